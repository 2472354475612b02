"""bench.py on the CPU: flag parsing, selection from ladders, and the table / plot / JSON / CSV / README
builders on measurements recorded on the lent GPU (tests/data/bench_*.json, written by bench.py --json
there; nothing here invents TFLOPS)."""
from __future__ import annotations

import copy
import csv
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hgemm_bench import analysis as an  # noqa: E402
from hgemm_bench import cli, progress, readme, results, tables  # noqa: E402
from hgemm_bench import plot as pl  # noqa: E402
from hgemm_bench.matmul_table import SECTIONS  # noqa: E402
from hgemm_bench.selection import default_set, expand, select  # noqa: E402

DATA = ROOT / "tests" / "data"
# the fixtures, and the acceptance run the README's results section is generated from
RECORDED = sorted(DATA.glob("bench_*.json")) + sorted((ROOT / "docs").glob("bench_results.json"))


# -- flags ---------------------------------------------------------------------------------------

def test_default_shapes_and_settings():
    s = cli.parse_args([])
    assert s.shapes == [(n, n, n) for n in cli.DEFAULT_SWEEP]
    assert s.default and s.cublas and not s.all and not any(s.groups.values())
    assert (s.warmup, s.iters, s.plot, s.json) == (3, 20, None, None)


@pytest.mark.parametrize("argv,shapes", [
    (["--MNK", "4096"], [(4096, 4096, 4096)]),
    (["--M", "4096", "--N", "2048", "--K", "1000"], [(4096, 2048, 1000)]),
    (["--MNK", "4096", "--K", "512"], [(4096, 4096, 512)]),
    (["--MMNK", "8192", "--SEP", "1024"], [(n, n, n) for n in range(1024, 8193, 1024)]),
    (["--MMNK", "3000"], [(1024,) * 3, (2048,) * 3]),  # SEP defaults to 1024; sizes <= MMNK
])
def test_shape_flags(argv, shapes):
    assert cli.parse_args(argv).shapes == shapes


@pytest.mark.parametrize("argv", [
    ["--M", "128"],                       # N, K missing and no --MNK to fill them
    ["--MMNK", "4096", "--MNK", "1024"],  # a sweep and a single shape
    ["--SEP", "256"],                     # a step without a sweep
    ["--MMNK", "512", "--SEP", "1024"],   # empty sweep
    ["--MNK", "0"], ["--iters", "0"], ["--warmup", "-1"], ["--budget", "0"], ["--topk", "0"],
    ["--kernels", ","], ["--frobnicate"],
    ["--matmul", ","],                    # no matmul section named
    ["--matmul", "--MNK", "256"], ["--matmul", "sweep", "--all"], ["--matmul", "--plot"],  # the kernel bench's
    ["--autotune"],                       # --autotune is for --matmul only
])
def test_bad_flags_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_group_and_output_flags():
    s = cli.parse_args(["--mma-all", "--cute-tn", "--no-default", "--no-cublas", "--kernels", "x*,y",
                        "--plot", "--topk", "3", "--json", "o.json", "--csv", "o.csv", "--iters", "7"])
    assert {k for k, v in s.groups.items() if v} == {"mma_all", "cute_tn"}
    assert not s.default and not s.cublas and s.kernels == ["x*", "y"]
    assert (s.plot, s.topk, s.json, s.csv, s.iters) == ("bench_tflops.png", 3, "o.json", "o.csv", 7)
    assert cli.parse_args(["--plot", "p.png"]).plot == "p.png"
    rec = s.settings_record()
    assert rec["groups"] == ["cute_tn", "mma_all"] and rec["iters"] == 7


def test_every_group_flag_exists_with_the_issue_spelling():
    text = cli.build_parser().format_help()
    for flag in ("--cuda", "--cuda-all", "--wmma", "--wmma-all", "--mma", "--mma-all", "--cute-tn", "--sgemm",
                 "--hopper", "--all", "--no-default", "--kernels", "--no-cublas", "--M", "--N", "--K", "--MNK",
                 "--MMNK", "--SEP", "--warmup", "--iters", "--plot", "--topk", "--json", "--csv", "--readme"):
        assert flag in text


# -- selection (duck-typed registry entries) ---------------------------------------------------------

def entry(name, ladder, step, layout="NN", dtype="f16", variants=None, grid="tiles", baseline=False, acc="f32"):
    return SimpleNamespace(name=name, ladder=ladder, catalogue=ladder != "matmul", step=step, layout=layout, dtype=dtype,
                           out=dtype,
                           variants=variants or {}, is_baseline=baseline, acc_for=lambda choice: acc,
                           spec=None if baseline else SimpleNamespace(grid=grid, tile=(128, 256, 32)))


STAGED = {"stages": (2, 3, 4), "acc": ("f16", "f32")}
FAKE = [
    entry("c1", "cuda", 1), entry("c2", "cuda", 2),
    entry("w1", "wmma", 1), entry("w9", "wmma", 9, variants={"stages": (2, 3)}, grid="tiles+swizzle"),
    entry("m1", "mma", 1, variants={"acc": ("f16", "f32")}), entry("m5", "mma", 5, variants=STAGED, grid="tiles+swizzle"),
    entry("m6tn", "mma", 6, layout="TN", variants=STAGED, grid="tiles+swizzle"),
    entry("cute", "cute", 1, layout="TN", variants=STAGED, grid="tiles+swizzle"),
    entry("h1", "hopper", 1, layout="TN"), entry("h2", "hopper", 2), entry("h3bf", "hopper", 3, dtype="bf16"),
    entry("s1", "sgemm", 1, dtype="f32"), entry("s2", "sgemm", 2, dtype="f32"),
    entry("s3tf32", "sgemm", 3, dtype="f32", acc="tf32"), entry("newladder_k", "newladder", 1),
    entry("cublas_nn", "cublas", 0, variants={"acc": ("f32", "f16")}, baseline=True),
    entry("sgemm_cublas", "cublas", 0, dtype="f32", variants={"acc": ("f32", "tf32")}, baseline=True),
]


def names(cases):
    return [c.name for c in cases]


def test_default_set_is_the_top_rung_of_each_tensor_core_ladder_per_layout_and_of_sgemm_per_accumulation():
    assert sorted(e.name for e in default_set(FAKE)) == ["cute", "h1", "h2", "m5", "m6tn", "s2", "s3tf32", "w9"]
    cases = select(FAKE, cli.parse_args([]))
    # the SGEMM table shows our fp32 and TF32 kernels beside the fp32 and TF32 cuBLAS rows
    assert names(cases) == ["w9", "m5", "m6tn", "cute", "h1", "h2", "s2", "s3tf32"] + ["cublas_nn"] * 2 \
        + ["sgemm_cublas"] * 2
    # one default variant per kernel: first value of every axis, swizzle "auto" where the grid has it
    w9 = [c for c in cases if c.name == "w9"]
    assert len(w9) == 1 and w9[0].label == "stages=2,swizzle=auto"


def test_plain_group_is_default_variant_and_all_group_every_variant():
    plain = select(FAKE, cli.parse_args(["--mma", "--no-default", "--no-cublas"]))
    assert names(plain) == ["m1", "m5", "m6tn"]
    every = select(FAKE, cli.parse_args(["--mma-all", "--no-default", "--no-cublas"]))
    assert names(every).count("m1") == 2 and names(every).count("m5") == 3 * 2 * 2  # stages x acc x swizzle
    labels = {c.label for c in every if c.name == "m5"}
    assert "stages=4,acc=f32,swizzle=on" in labels and "stages=2,acc=f16,swizzle=off" in labels


def test_all_takes_every_ladder_including_unknown_ones_and_orders_cublas_last():
    cases = select(FAKE, cli.parse_args(["--all"]))
    kernels = [e.name for e in FAKE if not e.is_baseline]
    assert set(names(cases)) == set(kernels) | {"cublas_nn", "sgemm_cublas"}
    assert names(cases)[-4:] == ["cublas_nn"] * 2 + ["sgemm_cublas"] * 2
    assert names(cases).index("c1") < names(cases).index("w1") < names(cases).index("s1")


def test_kernels_pattern_alone_and_with_groups():
    alone = select(FAKE, cli.parse_args(["--kernels", "h*", "--no-cublas"]))
    assert names(alone) == ["h1", "h2", "h3bf"]  # exactly the matches, the default set dropped
    with_group = select(FAKE, cli.parse_args(["--mma", "--kernels", "tn", "--no-default", "--no-cublas"]))
    assert names(with_group) == ["m6tn"]
    aliased = entry("hgemm_long_name", "cute", 2, layout="TN")
    aliased.spec.aliases = ("short_tn",)
    assert names(select(FAKE + [aliased], cli.parse_args(["--kernels", "short_tn", "--no-cublas"]))) == \
        ["hgemm_long_name"]


def test_default_variant_is_the_declared_launch_default():
    declared = entry("cute", "cute", 1, layout="TN", variants=STAGED, grid="tiles+swizzle")
    declared.spec.resolve_variant = lambda given: {"stages": 4, "acc": "f32"}  # toml `default`
    assert [c.label for c in expand(declared, False)] == ["stages=4,acc=f32,swizzle=auto"]
    # no declared default: the first value of every axis
    assert [c.label for c in expand(FAKE[5], False)] == ["stages=2,acc=f16,swizzle=auto"]


def test_cublas_runs_every_accumulation_and_can_be_dropped():
    assert [c.label for c in expand(FAKE[-2], False)] == ["acc=f32", "acc=f16"]
    assert select(FAKE, cli.parse_args(["--no-default", "--no-cublas"])) == []


def test_selection_over_the_built_registry_derives_groups_from_ladders():
    hg = pytest.importorskip("hgemm_rt")
    try:
        entries = hg.get_registry().kernels()
    except hg.ManifestError:
        pytest.skip("no build manifest (run build_kernels.py)")
    every = select(entries, cli.parse_args(["--all"]))
    for e in entries:
        assert e.name in names(every)
    for flag, (ladders, _) in cli.GROUP_FLAGS.items():
        chosen = select(entries, cli.parse_args(["--" + flag.replace("_", "-"), "--no-default", "--no-cublas"]))
        assert set(names(chosen)) == {e.name for e in entries if e.ladder in ladders and not e.is_baseline}


# -- builders on recorded GPU measurements -----------------------------------------------------------

def test_a_recorded_results_file_is_committed():
    assert RECORDED, "tests/data/bench_*.json: record one with `python bench.py ... --json` on a GPU"


@pytest.fixture(params=RECORDED, ids=[p.name for p in RECORDED])
def doc(request):
    return results.load(str(request.param))


def test_recorded_file_matches_the_schema(doc):
    assert results.validate(doc) == []
    assert doc["device"]["name"] and doc["build"]["hash"] and doc["measurements"]
    assert {tuple(s) for s in doc["settings"]["shapes"]} >= set(an.shapes_in_order(doc["measurements"]))


def test_schema_check_catches_damage(doc):
    bad = copy.deepcopy(doc)
    bad["measurements"][0]["tflops"] *= 2  # no longer follows from the time
    del bad["measurements"][1]["rel_error"]
    bad["device"].pop("sm_count")
    problems = results.validate(bad)
    assert any("tflops" in p for p in problems) and any("rel_error" in p for p in problems)
    assert any("sm_count" in p for p in problems)
    assert results.validate({"schema": "x"})  # not a results file at all


def test_judging_again_reproduces_the_recorded_verdicts_and_ratios(doc):
    recs = copy.deepcopy(doc["measurements"])
    for shape in an.shapes_in_order(recs):
        an.finish_shape([r for r in recs if an.shape_of(r) == shape])
    for got, want in zip(recs, doc["measurements"]):
        assert got["ok"] == want["ok"]  # (the bound itself is numerics.error_bound's, which may be retuned)
        assert (got["ratio"] is None) == (want["ratio"] is None)
        if want["ratio"] is not None:
            assert got["ratio"] == pytest.approx(want["ratio"])


def test_ratio_is_to_the_best_cublas_variant_of_the_same_shape_and_dtype(doc):
    for shape in an.shapes_in_order(doc["measurements"]):
        rows = [r for r in doc["measurements"] if an.shape_of(r) == shape]
        for r in rows:
            same = [b["tflops"] for b in rows if b["baseline"] and b["ok"] and b["dtype"] == r["dtype"]]
            # no cuBLAS of this dtype in the file (bf16 before it was measured): the class's best
            same = same or [b["tflops"] for b in rows if b["baseline"] and b["ok"] and an.klass(b["dtype"]) ==
                            an.klass(r["dtype"])]
            if same:
                assert r["ratio"] == pytest.approx(r["tflops"] / max(same))


def test_bf16_kernels_compare_with_bf16_cublas_and_fp16_with_fp16():
    rec = lambda name, dtype, tflops, base=False: {"name": name, "dtype": dtype, "tflops": tflops,  # noqa: E731
                                                   "baseline": base, "ok": True}
    rows = [rec("cublas_f16", "f16", 700.0, True), rec("cublas_bf16", "bf16", 800.0, True),
            rec("k16", "f16", 560.0), rec("kbf", "bf16", 640.0), rec("ksgemm", "f32", 40.0)]
    an.set_ratios(rows)
    assert [r["ratio"] for r in rows[:4]] == pytest.approx([1.0, 1.0, 0.8, 0.8]) and rows[4]["ratio"] is None
    an.set_ratios(rows[:1] + rows[2:])  # no bf16 cuBLAS: bf16 falls back to the class's best
    assert rows[3]["ratio"] == pytest.approx(640.0 / 700.0)


def test_shape_table_marks_the_best_and_the_gains(doc):
    peak = doc["device"]["fp16_dense_peak_tflops"]
    shape = an.shapes_in_order(doc["measurements"])[-1]
    rows = [r for r in doc["measurements"] if an.shape_of(r) == shape and an.klass(r["dtype"]) == "hgemm"]
    view = an.shape_view(rows)
    ok = [r for r in rows if r["ok"]]
    best = max(ok, key=lambda r: r["tflops"])
    assert [v["row"] for v in view if v["best"]] == [best]
    running = 0.0  # gains: exactly the rows that beat every correct row before them
    for v in view:
        r = v["row"]
        beats = r["ok"] and r["tflops"] > running
        assert (v["gain"] is not None) == (beats and running > 0)
        if v["gain"] is not None:
            assert v["gain"] == pytest.approx((r["tflops"] / running - 1) * 100)
        if beats:
            running = r["tflops"]
    text = tables.shape_table(rows, peak)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows)
    marked = [ln for ln in lines[2:] if ln.startswith("*")]
    assert len(marked) == 1 and best["name"] in marked[0] and f"{best['tflops']:.1f}" in marked[0]
    head = tables.shape_header(rows, "hgemm", peak)
    assert best["name"] in head and (not peak or f"{100 * best['tflops'] / peak:.1f}% of the" in head)


def test_summary_geomeans_and_topk(doc):
    recs = doc["measurements"]
    shapes = an.shapes_in_order(recs)
    summary = an.summarize(recs, shapes)
    assert len(summary) == len({an.key_of(r) for r in recs})
    for s in summary:
        mine = [r["tflops"] for r in recs if an.key_of(r) == (s["name"], s["label"]) and r["ok"]]
        assert s["shapes"] == len(mine)
        if mine:
            assert s["geomean_tflops"] == pytest.approx(math.exp(sum(map(math.log, mine)) / len(mine)))
    for cls in an.classes_present(recs):
        top = an.topk(summary, 3, cls)
        assert len(top) <= 3 and all(t["complete"] and not t["baseline"] for t in top)
        assert [t["geomean_tflops"] for t in top] == sorted((t["geomean_tflops"] for t in top), reverse=True)
        top_names = [t["name"] for t in top]
        assert len(set(top_names)) == len(top_names)  # each kernel once, in its best variant
        pool = [s for s in summary if s["class"] == cls and s["complete"] and not s["baseline"]]
        for t in top:
            assert t["geomean_tflops"] == max(s["geomean_tflops"] for s in pool if s["name"] == t["name"])
        assert all(o["geomean_tflops"] <= top[-1]["geomean_tflops"] for o in pool if o["name"] not in top_names)
    text = tables.final_report(recs, 3)
    assert "Summary" in text and "top" in text


def test_plot_series(doc):
    recs = doc["measurements"]
    data = pl.plot_series(recs, 3)
    shapes = an.shapes_in_order([r for r in recs if an.klass(r["dtype"]) == data["class"]])
    assert data["shapes"] == [list(s) for s in shapes] and len(data["x"]) == len(shapes)
    kinds = [s["kind"] for s in data["series"]]
    assert kinds.count("kernel") <= 3 and kinds[-1] == "best"
    for s in data["series"]:
        assert len(s["y"]) == len(shapes)
    best = data["series"][-1]
    for i, shape in enumerate(shapes):
        ok = [r["tflops"] for r in recs if an.shape_of(r) == shape and r["ok"] and not r["baseline"]
              and an.klass(r["dtype"]) == data["class"]]
        assert best["y"][i] == (max(ok) if ok else None)
        for s in data["series"]:
            if s["kind"] == "kernel" and s["y"][i] is not None:
                assert s["y"][i] <= best["y"][i]


def test_plot_png_is_titled_with_the_device(doc, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    titles = []
    real_savefig = plt.Figure.savefig

    def spy(fig, *a, **k):
        titles.append(fig.axes[0].get_title())
        return real_savefig(fig, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    out = tmp_path / "p.png"
    pl.render(pl.plot_series(doc["measurements"], 3), doc["device"]["name"], str(out),
              doc["device"]["fp16_dense_peak_tflops"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert titles and titles[0].startswith(doc["device"]["name"])


def test_json_and_csv_round_trip(doc, tmp_path):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    results.write_json(doc, str(j))
    text = j.read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    assert json.loads(text) == json.loads(json.dumps(doc))
    assert len(text.splitlines()) > len(doc["measurements"])  # one record per line
    assert results.load(str(j))["measurements"] == doc["measurements"]
    results.write_csv(doc, str(c))
    with open(c) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["measurements"])
    assert rows[0]["device"] == doc["device"]["name"] and rows[0]["build_hash"] == doc["build"]["hash"]
    assert float(rows[0]["tflops"]) == pytest.approx(doc["measurements"][0]["tflops"])


def test_readme_section_is_generated_between_the_markers_only(doc, tmp_path):
    shape = an.pick_shape(doc["measurements"], 4096)
    rows = an.ladder_rows(doc["measurements"], shape)
    ok_at = [r for r in doc["measurements"] if an.shape_of(r) == shape and r["ok"] and not r["baseline"]]
    assert {(r["ladder"], r["step"]) for r in rows if r["ladder"] != "cublas"} == \
        {(r["ladder"], r["step"]) for r in ok_at}
    for r in rows:
        if r["ladder"] != "cublas":
            assert r["tflops"] == max(x["tflops"] for x in ok_at if (x["ladder"], x["step"]) == (r["ladder"], r["step"]))
    sec = readme.section(doc, 4096, {"tflops": "docs/p.png"}, "tests/data/x.json")
    assert sec.startswith(readme.START) and sec.endswith(readme.END) and doc["device"]["name"] in sec
    original = "# Title\n\nlead's text\n"
    once = readme.replace_section(original, sec)
    assert once.startswith(original.rstrip("\n")) and once.count(readme.START) == 1
    twice = readme.replace_section(once + "\nmore lead text\n", sec.replace("Results", "Results again"))
    assert twice.count(readme.START) == 1 and "Results again" in twice and twice.endswith("more lead text\n")
    with pytest.raises(ValueError):
        readme.replace_section("x " + readme.END + " " + readme.START, sec)


def test_readme_command_rewrites_only_the_section(doc, tmp_path, monkeypatch):
    from hgemm_bench.main import main

    src = tmp_path / "r.json"
    results.write_json(doc, str(src))
    md = tmp_path / "README.md"
    md.write_text("# hgemm\n\nintro\n")
    rc = main(["--readme", str(src), "--readme-file", str(md), "--readme-images", ""])
    assert rc == 0
    text = md.read_text()
    assert text.startswith("# hgemm\n\nintro\n") and readme.START in text and "| ladder" in text


# -- the images (drawn from the recorded files in docs/) ------------------------------------------------

DOCS = ROOT / "docs"
BENCH_DOC, MATMUL_DOC = DOCS / "bench_results.json", DOCS / "matmul_bench_h100.json"
PNG = b"\x89PNG\r\n\x1a\n"


def test_plots_flags():
    s = cli.parse_args(["--plots", "a.json", "b.json", "--out", "docs/"])
    assert (s.plots, s.out) == (["a.json", "b.json"], "docs/")
    for bad in (["--plots"], ["--plots", "a.json", "--readme", "r.json"], ["--plots", "a.json", "--matmul"]):
        with pytest.raises(SystemExit):
            cli.parse_args(bad)


def test_every_image_renders_from_the_recorded_files(tmp_path):
    pytest.importorskip("matplotlib")
    from hgemm_bench.main import main

    assert main(["--plots", str(BENCH_DOC), str(MATMUL_DOC), "--out", str(tmp_path)]) == 0
    for name in (*pl.BENCH_IMAGES.values(), *pl.MATMUL_IMAGES.values()):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == PNG and len(data) > 20_000, name


def test_plots_without_matplotlib_or_with_a_bad_file_exit_2(monkeypatch, tmp_path, capsys):
    from hgemm_bench import main as m

    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "other"}')
    assert m.main(["--plots", str(bad), "--out", str(tmp_path)]) == 2
    monkeypatch.setattr(m.pl, "have_matplotlib", lambda: False)
    assert m.main(["--plots", str(BENCH_DOC)]) == 2
    assert "matplotlib" in capsys.readouterr().err


def test_the_readme_shows_every_image_and_the_command_that_draws_them():
    text = (ROOT / "README.md").read_text()
    for name in (*pl.BENCH_IMAGES.values(), *pl.MATMUL_IMAGES.values()):
        assert f"](docs/{name})" in text and (DOCS / name).is_file(), name
    assert f"python bench.py --plots docs/{BENCH_DOC.name} docs/{MATMUL_DOC.name} --out docs/" in text


def test_roofline_points_stay_under_the_roofs_of_their_device():
    from hgemm_bench.devinfo import roofs

    for path in (BENCH_DOC, MATMUL_DOC):
        doc = results.load_any(str(path))
        r = roofs(doc["device"])
        pts = pl.roofline_points(doc)
        assert pts and r.hbm_tbps and r.fp16_tensor_tflops
        for p in pts:  # the least traffic and the datasheet peak bound every real measurement
            assert p["tflops"] <= min(r.fp16_tensor_tflops, p["intensity"] * r.hbm_tbps) * 1.02, p
        if doc["schema"] == results.SCHEMA:
            # one point per kernel and shape (its fastest variant), one per cuBLAS input type and shape
            ok = {(m["name"], m["M"]) for m in doc["measurements"] if m["ok"] and not m["baseline"]}
            assert sum(p["series"] != "cuBLAS" for p in pts) == len(ok)
            cube = next(p for p in pts if p["dtype"] == "f16" and p["M"] == p["N"] == p["K"])
            assert cube["intensity"] == pytest.approx(cube["M"] / 3)  # 2n^3 / (3 n^2 x 2 bytes)
        else:
            assert {"hg.matmul", "cuBLAS", "torch.matmul"} <= {p["series"] for p in pts}
    (label, ys), _fp32 = pl.roof_lines(roofs({"name": "NVIDIA H200"}), [1.0, 1000.0])
    assert label.startswith("fp16 tensor cores 989") and ys == [4.8, 989.0]


def test_ladder_bars_follow_the_readme_table():
    doc = results.load(str(BENCH_DOC))
    an.rejudge(doc["measurements"])
    data = pl.ladder_bars(doc["measurements"], 4096)
    shape = tuple(data["shape"])
    rows = [r for r in an.ladder_rows(doc["measurements"], shape) if r["ladder"] != "cublas"]
    assert [(p["ladder"], s) for p in data["panels"] for s in p["steps"]] == [(r["ladder"], r["step"]) for r in rows]
    hopper = next(p for p in data["panels"] if p["ladder"] == "hopper")
    assert set(hopper["cublas"]) == {"f16", "bf16"}  # each bar against cuBLAS of its own input type


def heatmap_row(M, N, K, ratio, dtype="f16", b_order="row"):
    return {"section": "grid", "M": M, "N": N, "K": K, "dtype": dtype, "a_order": "row", "b_order": b_order,
            "ratio": ratio, "cublas_us": 1.0}


def test_heatmap_takes_any_rows_of_a_section():
    rows = [heatmap_row(m, n, k, m / n) for m in (16, 4096) for n, k in ((4096, 4096), (8192, 1024))]
    rows.append(heatmap_row(16, 4096, 4096, None, b_order="col"))  # a failed row: no ratio
    panel = pl.heatmap({"rows": rows})["panels"][0]
    assert panel["M"] == [16, 4096] and panel["title"] == "grid"
    assert panel["columns"] == ["4096x4096 B col", "4096x4096 B row", "8192x1024 B row"]  # B order varies
    assert panel["ratio"] == [[None, 16 / 4096, 16 / 8192], [None, 1.0, 0.5]]
    doc = results.load_any(str(MATMUL_DOC))
    panels = {p["section"]: p for p in pl.heatmap(doc)["panels"]}
    measured = {r["section"] for r in doc["rows"]}  # the recorded run may predate a section
    assert set(panels) == {n for n, sec in SECTIONS.items() if sec.baseline == "cublas" and n in measured}
    sweep = panels["sweep"]  # squares: the diagonal
    assert all((v is not None) == (i == j) for i, row in enumerate(sweep["ratio"]) for j, v in enumerate(row))


# -- no GPU, missing matplotlib, progress ---------------------------------------------------------------

def test_without_a_gpu_the_build_is_listed_and_the_exit_is_nonzero(monkeypatch, capsys):
    hg = pytest.importorskip("hgemm_rt")
    try:
        hg.get_registry()
    except hg.ManifestError:
        pytest.skip("no build manifest (run build_kernels.py)")
    from hgemm_bench.main import main

    monkeypatch.setattr(hg, "gpu_available", lambda: False)
    assert main(["--MNK", "256"]) == 1
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "cublas" in err


def test_the_listed_build_says_what_it_needs_from_the_driver(capsys):
    hg = pytest.importorskip("hgemm_rt")
    try:
        manifest = hg.get_registry().manifest
    except hg.ManifestError:
        pytest.skip("no build manifest (run build_kernels.py)")
    from hgemm_bench.main import main
    from hgemm_rt.device import driver_requirement

    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert f"build {manifest.build_hash}: {driver_requirement(manifest.nvcc)}" in out
    assert f"cubins from nvcc {manifest.nvcc}: a driver for CUDA" in out


def test_plot_without_matplotlib_fails_before_any_gpu_work(monkeypatch, capsys):
    from hgemm_bench import main as m

    monkeypatch.setattr(m.pl, "have_matplotlib", lambda: False)
    assert m.main(["--plot", "--MNK", "256"]) == 2
    assert "matplotlib" in capsys.readouterr().err


def test_progress_line_in_a_log(capsys):
    import io

    buf = io.StringIO()
    p = progress.Progress(100.0, stream=buf, every_s=0)
    p.update("shape 1/2", advance=25.0)
    line = buf.getvalue()
    assert "25.0%" in line and "shape 1/2" in line and "eta" in line
    assert progress.fmt_s(125) == "2m05s"


def test_datasheet_lookup_and_roofs():
    from hgemm_bench.devinfo import datasheet, roofs

    assert datasheet("NVIDIA H100 80GB HBM3").fp16_dense_tflops == 989.0
    assert (datasheet("NVIDIA H100 80GB HBM3").hbm_tbps, datasheet("NVIDIA H200").hbm_tbps) == (3.35, 4.8)
    assert datasheet("NVIDIA H100 PCIe").fp16_dense_tflops == 756.0 and datasheet("NVIDIA H100 NVL").hbm_tbps == 3.9
    assert datasheet("NVIDIA GeForce GTX 1080") is None
    # a file recorded before the HBM figure was: the table by name; a recorded figure wins
    assert roofs({"name": "NVIDIA H200", "fp16_dense_peak_tflops": 989.0}).hbm_tbps == 4.8
    assert roofs({"name": "NVIDIA H200", "hbm_tbps": 5.0}).hbm_tbps == 5.0
    assert roofs({"name": "unknown board"}).fp16_tensor_tflops is None


# -- the steady protocol (timing faked: the rounds, their order and the ratios are host logic) ------------

def test_steady_flags():
    s = cli.parse_args(["--steady"])
    assert (s.steady, s.warm_s) == (cli.STEADY_ROUNDS, cli.STEADY_WARM_S)
    s = cli.parse_args(["--steady", "3", "--warm-s", "0", "--MNK", "4096"])
    assert (s.steady, s.warm_s) == (3, 0.0) and s.settings_record()["protocol"] == "steady"
    assert "protocol" not in cli.parse_args([]).settings_record()
    assert cli.parse_args(["--matmul", "sweep", "--steady"]).steady == cli.STEADY_ROUNDS
    for bad in (["--steady", "0"], ["--warm-s", "1"], ["--steady", "--warm-s", "-1"]):
        with pytest.raises(SystemExit):
            cli.parse_args(bad)


def test_steady_rounds_rotate_the_contenders_and_sample_the_clock(monkeypatch):
    from hgemm_bench import steady
    from hgemm_bench.devinfo import Sampled
    from hgemm_rt.timing import Timing

    order, ms = [], {"a": 2.0, "b": 1.0, "c": 4.0}

    def fake_time_fn(fn, *, warmup, iters, stream, flush, queue_ahead):
        name = fn()
        order.append(name)
        return Timing(ms[name], ms[name], ms[name], iters)

    class Sampler:
        def during(self, fn):
            return fn(), Sampled(1500.0, 650.0, ("sw_power_cap",))

    monkeypatch.setattr(steady, "time_fn", fake_time_fn)
    monkeypatch.setattr(steady, "get_device", lambda: SimpleNamespace(synchronize=lambda: None))
    cs = [steady.Contender(lambda n=n: n, est_ms=ms[n]) for n in "abc"]
    p = steady.Protocol(rounds=3, warm_s=0.0, budget_s=0.03, iters=20)
    steady.interleave(cs, p, flusher=None, sampler=Sampler())
    assert order == list("abc" "bca" "cab")  # every round a rotated order
    assert [c.ms for c in cs] == [[2.0] * 3, [1.0] * 3, [4.0] * 3]
    assert [c.iters for c in cs] == [3 * 5, 3 * 10, 3 * 2]  # 10 ms per round each, at most `iters`
    rec = cs[0].record()
    assert (rec["sm_mhz"], rec["board_w"], rec["throttle"]) == (1500.0, 650.0, ["sw_power_cap"])


def test_round_ratios_are_taken_within_each_round():
    def row(name, baseline, ms):
        return {"name": name, "label": "", "dtype": "f16", "baseline": baseline, "ok": True, "M": 1024, "N": 1024,
                "K": 1024, "tflops": 1.0, "steady": {"ms": ms}}

    # the clock drifts between rounds: the kernel is 0.8x cuBLAS in each round, whatever the drift
    rows = [row("k", False, [1.25, 2.5, 1.25]), row("cublas", True, [1.0, 2.0, 1.0])]
    an.set_round_ratios(rows)
    assert rows[0]["steady"]["ratio"] == pytest.approx([0.8, 0.8, 0.8])
    assert rows[1]["steady"]["ratio"] == pytest.approx([1.0, 1.0, 1.0])
    rows[0].update(ok=True, rel_error=1e-4, error_bound=1e-3, ms=1.25, ratio=0.8, layout="NN", gain=None)
    rows[0]["steady"].update(sm_mhz=1530.0, board_w=690.0, throttle=["sw_power_cap"])
    text = tables.shape_table([{**rows[0], "ms": 1.25}], 989.0)
    assert "per round" in text and "0.800-0.800" in text and "1530" in text and "690" in text


def test_recorded_json_is_strict(doc):
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


@pytest.mark.gpu
def test_bench_end_to_end_on_the_gpu(tmp_path, capsys):
    """A short real run: every selected row checked and timed, a valid results file, a table printed."""
    from hgemm_bench.main import main

    out = tmp_path / "r.json"
    rc = main(["--MNK", "512", "--iters", "3", "--warmup", "1", "--no-progress", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    doc = results.load(str(out))
    assert results.validate(doc) == [] and doc["complete"]
    assert all(m["ok"] for m in doc["measurements"]) and "M=N=K=512" in text and "x cuBLAS" in text
    assert any(m["baseline"] for m in doc["measurements"])


@pytest.mark.gpu
def test_steady_protocol_end_to_end_on_the_gpu(tmp_path, capsys):
    """--steady: every row checked, then timed in interleaved rounds; each round's ratio to cuBLAS kept."""
    from hgemm_bench.main import main

    out = tmp_path / "r.json"
    rc = main(["--MNK", "512", "--steady", "2", "--warm-s", "0.1", "--iters", "3", "--no-progress", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    doc = results.load(str(out))
    assert doc["settings"]["protocol"] == "steady"
    for m in doc["measurements"]:
        assert len(m["steady"]["ms"]) == 2 and m["ms_min"] <= m["ms"] <= m["ms_max"]
        assert len(m["steady"]["ratio"]) == 2
    assert "SGEMM" in text and "per round" in text
