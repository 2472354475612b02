"""bench.py --profile and --ladder-doc on the CPU: ncu's CSV parsed, the batches run against a stand-in
ncu, the profile JSON assembled and docs/ladder.md rendered from recorded files, the claims of
docs/ladder_notes.toml checked. tests/data/ladder_profile_sample.ncu/ holds the files of a run in
ncu's raw-page format with invented (plausible, H100-like) numbers; the doc's real numbers come from
docs/ladder_profile.json, recorded on the GPU."""
from __future__ import annotations

import json
import re
import stat
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hgemm_bench import cli  # noqa: E402
from hgemm_bench import counters as ct  # noqa: E402
from hgemm_bench import ladder_doc as ld  # noqa: E402
from hgemm_bench import ncu  # noqa: E402
from hgemm_bench import plot as pl  # noqa: E402
from hgemm_bench import profile as pf  # noqa: E402
from hgemm_bench.main import main  # noqa: E402

DATA = ROOT / "tests" / "data"
SAMPLE_DIR = DATA / "ladder_profile_sample.ncu"
SAMPLE_JSON = DATA / "ladder_profile_sample.json"
RECORDED = ROOT / "docs" / "ladder_profile.json"


def sample_meta() -> dict:
    return json.loads((SAMPLE_DIR / "meta.json").read_text())


# -- ncu's output ---------------------------------------------------------------------------------

def test_raw_page_is_parsed_into_base_units():
    text = (SAMPLE_DIR / "cuda.csv").read_text()
    launches = ncu.parse_raw(text)
    assert [L.kernel for L in launches] == ["hgemm_naive_f16", "hgemm_sliced_k_f16", "hgemm_t_8x8_sliced_k_f16x4",
                                            "hgemm_t_8x8_sliced_k_f16x4_pack"]
    naive = launches[0].metrics
    assert naive["gpu__time_duration.sum"] == pytest.approx(30_105_344e-9)  # "30,105,344" nsecond
    assert naive["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1.755e9)  # cycle/nsecond
    assert naive["dram__bytes.sum"] == pytest.approx(110.9e6)  # Mbyte
    assert naive[ct.METRICS["fp16"]] is None  # n/a
    assert launches[0].units["gpu__time_duration.sum"] == "second"
    assert launches[0].block == "(256, 1, 1)" and launches[0].grid == "(65536, 1, 1)"
    assert ncu.passes(text) == [(L.kernel, 11) for L in launches]


def test_details_layout_is_read_too():
    text = textwrap.dedent('''\
        ==PROF== Connected to process 7 (/usr/bin/python3)
        "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
        "0","7","python3","h","k1","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.5"
        "0","7","python3","h","k1","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sector_hit_rate.pct","%","n/a"
        "1","7","python3","h","k2","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1,250.0"
        ''')
    k1, k2 = ncu.parse_raw(text)
    assert (k1.kernel, k2.kernel) == ("k1", "k2")
    assert k1.metrics["gpu__time_duration.sum"] == pytest.approx(12.5e-6)
    assert k1.metrics["lts__t_sector_hit_rate.pct"] is None
    assert k2.metrics["gpu__time_duration.sum"] == pytest.approx(1.25)


@pytest.mark.parametrize("value,unit,want", [
    (1.5, "msecond", (1.5e-3, "second")), (250, "ns", (250e-9, "second")), (2, "Ghz", (2e9, "cycle/second")),
    (1.6, "cycle/nsecond", (1.6e9, "cycle/second")), (3, "Kbyte", (3e3, "byte")), (2, "Tbyte/second", (2e12, "byte/second")),
    (5, "%", (5, "%")), (7, "", (7, "")), (4, "register/thread", (4, "register/thread")), (9, "sector", (9, "sector")),
])
def test_units_are_converted_to_base(value, unit, want):
    got = ncu.to_base(value, unit)
    assert got[0] == pytest.approx(want[0]) and got[1] == want[1]


def test_numbers_and_not_values():
    assert ncu.number("1,234,567") == 1234567 and ncu.number(" 12.5 ") == 12.5 and ncu.number("1e+09") == 1e9
    assert ncu.number("n/a") is None and ncu.number("") is None and ncu.number("inf") is None


def test_command_profiles_exactly_the_named_functions():
    regex = ncu.symbol_regex(["hgemm_naive_f16", "hgemm_mma_m16n8k16_naive__accf16"])
    assert re.search(regex, "hgemm_naive_f16") and re.search(regex, "hgemm_mma_m16n8k16_naive__accf16")
    assert not re.search(regex, "hgemm_naive_f16_x") and not re.search(regex, "sgemm_naive_f32")
    cmd = ncu.command("/x/ncu", ["a.sum", "b.pct"], regex, "/t/out.csv", ["python3", "-m", "m"])
    joined = " ".join(cmd)
    for flag in ("--csv", "--page raw", "--metrics a.sum,b.pct", "--target-processes all", "--replay-mode kernel",
                 "--clock-control base", "--cache-control all", "--log-file /t/out.csv", "--kernel-name regex:^("):
        assert flag in joined
    assert cmd[-3:] == ["python3", "-m", "m"]


def test_permission_and_refused_metrics_are_recognised():
    with pytest.raises(ncu.NcuError, match="permission"):
        ncu.check_permission("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                             "Performance Counters on the target device 0.")
    log = "==ERROR== Failed to find metric sm__pipe_fp16_cycles_active.avg.pct_of_peak_sustained_active\n"
    wanted = [ct.METRICS["fp16"], ct.METRICS["fma"], ct.METRICS["time"]]
    assert ncu.metrics_named_in_errors(log, wanted) == [ct.METRICS["fp16"]]


# -- the profile mode -----------------------------------------------------------------------------

def test_profile_without_ncu_fails_cleanly(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    out = tmp_path / "p.json"
    assert main(["--profile", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ncu" in err and ncu.NCU_ENV in err
    assert not out.exists()


def test_profile_records_the_commit_git_reports_or_unknown(monkeypatch):
    """A profile names its commit only as git reports it for the checkout: where git cannot tell (a
    tree copied to a GPU machine without .git), "unknown", never $HGEMM_GIT_COMMIT, which nothing
    checks against the tree (a stale one named the wrong commit for the H100 profile)."""
    from hgemm_bench import main as bench_main

    monkeypatch.setenv("HGEMM_GIT_COMMIT", "a772883")
    record = lambda registry: {"hash": "h", "nvcc": "13.0", "git": bench_main.git_commit()}  # noqa: E731
    assert pf.build_of(None, record, lambda: None) == {"hash": "h", "nvcc": "13.0", "git": pf.UNKNOWN_COMMIT}
    assert pf.build_of(None, record, lambda: "ffae137c41e1")["git"] == "ffae137c41e1"

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(bench_main.subprocess, "run", no_git)
    assert bench_main.checkout_commit() is None
    assert pf.build_of(None, record, bench_main.checkout_commit)["git"] == pf.UNKNOWN_COMMIT
    assert bench_main.git_commit() == "a772883"  # the bench's results still take the variable


FAKE_NCU = r'''
import json, re, sys
args = sys.argv[1:]
opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
log, metrics = opt["--log-file"], opt["--metrics"].split(",")
MODE
if "REFUSE" in metrics[-1] or any("fp16_cycles" in m for m in metrics):
    open(log, "w").write("==ERROR== Failed to find metric sm__pipe_fp16_cycles_active.avg.pct_of_peak_sustained_active\n")
    sys.exit(1)
spec = json.load(open(args[-1]))
symbols = re.findall(r"\w+", opt["--kernel-name"][len("regex:"):]) if "--kernel-name" in opt else ["cublas_kernel"]
launches = [{"name": n, "ladder": "cuda", "step": i + 1, "label": "", "baseline": False, "status": "launched",
             "symbol": s, "config": {}} for i, (n, s) in enumerate(zip(spec["kernels"], symbols))]
json.dump({"device": {"name": "Fake GPU"}, "launches": launches}, open(spec["record"], "w"))
rows = ['"ID","Kernel Name",' + ",".join(f'"{m}"' for m in metrics), '"",""' + ',"nsecond"' * len(metrics)]
rows += [f'"{i}","{s}"' + ',"1,000"' * len(metrics) for i, s in enumerate(symbols)]
prof = [f'==PROF== Profiling "{s}" - {i}: 0%....50%....100% - 7 passes' for i, s in enumerate(symbols)]
open(log, "w").write("\n".join(prof + rows) + "\n")
'''


def fake_ncu(tmp_path: Path, mode: str = "") -> str:
    exe = tmp_path / "ncu"
    exe.write_text(f"#!{sys.executable}\n" + FAKE_NCU.replace("MODE", mode))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_batches_run_under_ncu_drop_refused_metrics_and_assemble(tmp_path):
    batches = [pf.Batch("cuda", ["hgemm_naive_f16", "hgemm_sliced_k_f16"], ["hgemm_naive_f16", "hgemm_sliced_k_f16"])]
    ran = pf.run_all(fake_ncu(tmp_path), batches, (256, 256, 256), tmp_path, seed=0)
    assert ran["dropped"] == {ct.METRICS["fp16"]: "this ncu or GPU does not have it"}
    assert ct.METRICS["fp16"] not in ran["metrics"] and ran["batches"][0]["profiled"] == 2
    meta = {"created": "now", "command": "test", "shape": [256, 256, 256], "seed": 0, "build": {},
            "ncu": {"path": "ncu", "version": "0", "clock_control": "base", "cache_control": "all",
                    "replay_mode": "kernel", **ran}, "elapsed_s": 1.0}
    doc = pf.assemble(tmp_path, meta)
    assert pf.validate(doc) == []
    assert [(k["name"], k["status"], k["passes"]) for k in doc["kernels"]] == [
        ("hgemm_naive_f16", "ok", 7), ("hgemm_sliced_k_f16", "ok", 7)]
    assert doc["kernels"][0]["metrics"][ct.METRICS["time"]] == pytest.approx(1e-6)


def test_no_permission_stops_the_run(tmp_path):
    exe = fake_ncu(tmp_path, 'open(log, "w").write("==ERROR== ERR_NVGPUCTRPERM - no permission\\n"); sys.exit(1)')
    with pytest.raises(ncu.NcuError, match="permission"):
        pf.run_all(exe, [pf.Batch("cuda", ["hgemm_naive_f16"], ["hgemm_naive_f16"])], (256,) * 3, tmp_path, 0)


def test_batches_follow_the_ladders_and_references_come_before_the_slow_ones():
    from types import SimpleNamespace

    def entry(name, ladder, step, dtype="f16"):
        spec = SimpleNamespace(name=name, resolve_variant=lambda given: {})
        return SimpleNamespace(name=name, ladder=ladder, step=step, dtype=dtype, spec=spec)

    ks = [entry("a", "cuda", 1), entry("b", "hopper", 1), entry("c", "sgemm", 1, "f32")]
    names = [b.name for b in pf.plan(ks, cublas=True)]
    assert names == ["hopper", "cublas_f16", "cublas_f32", "cuda", "sgemm"]
    assert [b.name for b in pf.plan(ks, cublas=False)] == ["hopper", "cuda", "sgemm"]


# -- the recorded profile and the document ---------------------------------------------------------

def test_the_sample_json_is_what_its_files_assemble_to():
    assert pf.assemble(SAMPLE_DIR, sample_meta()) == pf.load(SAMPLE_JSON)


def test_render_from_the_recorded_sample():
    doc = pf.load(SAMPLE_JSON)
    md = ld.render(doc, ld.load_notes(), "ladder_roofline.png")
    assert "**NVIDIA H100 80GB HBM3**" in md and "Nsight Compute 2025.3.1.0" in md
    assert "![The ladders on a roofline" in md
    assert md.count("### cuda ") == 4 and "### hopper 3 · `hgemm_sm90_wgmma_tma_ws_persistent_tn`" in md
    assert "Its base `hgemm_sm90_wgmma_tma_ws_tn` was not profiled" in md
    assert "**confirmed**" in md and "nan" not in md.lower().replace("nanoseconds", "")
    assert "Not profiled: `sgemm_naive_f32`" in md
    assert "as `nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN`" in md
    # rung 4 is slower than rung 3 in the sample: its measured reasons follow
    rung4 = md.split("### cuda 4")[1].split("###")[0]
    assert "**Slower than `hgemm_t_8x8_sliced_k_f16x4` (-4%): the measured reasons.**" in rung4
    # the conflicts are judged by their share of the wavefronts, not by their count
    assert "The counters that moved furthest the wrong way: smem conflict share 38% → 65% (+26.5 points)" in rung4


def test_wrong_way_moves_weigh_bank_conflicts_by_their_share():
    """A few thousand more conflicts among tens of millions of wavefronts, or fewer and wider shared
    loads (more wavefronts per instruction), are no reason for a slower rung; a larger conflict share
    is (the H100 profile listed 1.49 k -> 10.1 k conflicts as the CuTe rung's first reason)."""
    base = {"smem_bank_conflicts": 1.49e3, "smem_wavefronts": 26.7e6, "smem_ld_wavefronts_per_inst": 10.0,
            "smem_conflict_pct": 100 * 1.49e3 / 26.7e6, "tensor_pipe_pct": 91.0}
    this = {"smem_bank_conflicts": 10.1e3, "smem_wavefronts": 26.7e6, "smem_ld_wavefronts_per_inst": 20.0,
            "smem_conflict_pct": 100 * 10.1e3 / 26.7e6, "tensor_pipe_pct": 77.0}
    assert [key for key, _ in ct.adverse_moves(base, this)] == ["tensor_pipe_pct"]
    worse = dict(this, smem_conflict_pct=30.0)
    assert [key for key, _ in ct.adverse_moves(base, worse)] == ["smem_conflict_pct", "tensor_pipe_pct"]
    # a claim on the count is still checked as written
    assert ct.moved("smem_bank_conflicts", base["smem_bank_conflicts"], this["smem_bank_conflicts"], "up")


def test_every_slower_rung_gets_measured_reasons():
    doc = pf.load(SAMPLE_JSON)
    md = ld.render(doc, ld.load_notes())
    for r in ld.rungs_of(doc, ld.load_notes()):
        change = ld.speed_change(r)
        section = md.split(f"`{r.name}`\n")[1].split("\n### ")[0]
        if change is not None and change < ld.SLOWER:
            assert "the measured reasons" in section
            assert "moved furthest the wrong way" in section or "No counter of this set moved" in section


NOTES = '''
[[rung]]
kernel = "hgemm_sliced_k_f16"
change = "Shared-memory tiles."
expect = [
  { counter = "smem_bank_conflicts", direction = "down", why = "claimed, but the sample has more" },
  { counter = "l2_mb", direction = "down", why = "tiles are reused" },
  { counter = "registers", direction = "same", min_change = 0.5, why = "a small change" },
  { counter = "stall_barrier", direction = "top", why = "two barriers per tile" },
  { counter = "ldgsts_sectors_per_req", direction = "up", why = "no cp.async in either: no data" },
]
'''


def test_claims_are_marked_by_the_counters_not_asserted():
    doc = pf.load(SAMPLE_JSON)
    md = ld.render(doc, ld.parse_notes(NOTES))
    rung = md.split("### cuda 2")[1].split("###")[0]
    rows = {ln.split("|")[1].strip(): ln for ln in rung.splitlines() if ln.startswith("| ") and "verdict" not in ln}
    assert rows["smem bank conflicts"].endswith(f"| {ld.NOT_CONFIRMED} |")
    assert "0 → 1.31 M (from 0)" in rows["smem bank conflicts"]
    assert rows["L2 traffic"].endswith("| **confirmed** |")
    assert rows["registers"].endswith("| **confirmed** |")
    assert rows["stall barrier"].endswith("| **confirmed** |") and "rank 1" in rows["stall barrier"]
    assert rows["cp.async sectors/req"].endswith(f"| {ld.NO_DATA} |")
    assert "_No note for this rung in docs/ladder_notes.toml yet._" in md.split("### cuda 3")[1]
    assert "3 of 5 claims confirmed by the counters, 1 not confirmed, 1 without data." in md


@pytest.mark.parametrize("claim,message", [
    ('{ counter = "bogus", direction = "up", why = "x" }', "unknown counter 'bogus'"),
    ('{ counter = "l2_mb", direction = "sideways", why = "x" }', "direction 'sideways'"),
    ('{ counter = "l2_mb", direction = "top", why = "x" }', "'top' is for stall_"),
    ('{ counter = "l2_mb", direction = "up" }', "needs a `why`"),
    ('{ counter = "l2_mb", direction = "up", why = "x", weight = 2 }', "keys are"),
])
def test_malformed_notes_are_refused_with_the_rung_named(claim, message):
    text = f'[[rung]]\nkernel = "hgemm_naive_f16"\nchange = "c"\nexpect = [ {claim} ]\n'
    with pytest.raises(ValueError, match=re.escape(message)) as exc:
        ld.parse_notes(text)
    assert "hgemm_naive_f16" in str(exc.value)


def test_every_rung_of_the_catalogue_has_a_note():
    from hgemm_build.catalog import load_catalog

    rungs = {k.name for fam in load_catalog(ROOT / "cu") for k in fam.kernels if k.catalogue}
    notes = ld.load_notes()
    assert sorted(rungs - set(notes)) == [], "add a note for each new rung to docs/ladder_notes.toml"
    assert sorted(set(notes) - rungs) == [], "notes for kernels the catalogue does not have"
    assert sorted(n.base for n in notes.values() if n.base and n.base not in rungs) == []


def test_notes_carry_no_measured_numbers():
    measured = re.compile(r"\d\s*(%|TFLOPS|[GT]B/s|[GM]Hz|x faster|times faster|ms\b|us\b)")
    texts = [t for n in ld.load_notes().values() for t in (n.change, *(c.why for c in n.expect + n.if_slower))]
    assert [m.group(0) for t in texts for m in measured.finditer(t)] == []


def test_ladder_doc_command_writes_the_doc_and_the_figure(tmp_path, monkeypatch):
    out = tmp_path / "ladder.md"
    assert main(["--ladder-doc", str(SAMPLE_JSON), "--ladder-doc-out", str(out)]) == 0
    md = out.read_text()
    assert md.startswith("# The ladder, measured")
    if pl.have_matplotlib():
        assert (tmp_path / "ladder_roofline.png").stat().st_size > 10_000 and "](ladder_roofline.png)" in md
    monkeypatch.setattr(pl, "have_matplotlib", lambda: False)
    assert main(["--ladder-doc", str(SAMPLE_JSON), "--ladder-doc-out", str(tmp_path / "b.md")]) == 0
    assert "The figure was not rendered: matplotlib is not installed" in (tmp_path / "b.md").read_text()


def test_ladder_doc_refuses_a_file_that_is_no_profile(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "hgemm-bench/1"}))
    assert main(["--ladder-doc", str(bad), "--ladder-doc-out", str(tmp_path / "l.md")]) == 2
    assert "not a ladder profile" in capsys.readouterr().err


@pytest.mark.skipif(not RECORDED.exists(), reason="docs/ladder_profile.json not recorded yet")
def test_every_claim_of_the_notes_holds_on_the_recorded_profile():
    """A rung's paragraph claims only what its counters show, and every slower rung names a
    measured reason that the counters confirm."""
    doc = pf.load(RECORDED)
    wrong, unexplained = [], []
    for r in ld.rungs_of(doc, ld.load_notes()):
        assert r.note is not None, r.name
        base = r.base.d if r.base else None
        change = ld.speed_change(r)
        slower = change is not None and change < ld.SLOWER
        for c in r.note.expect + (r.note.if_slower if slower else ()):
            v = ld.check(c, base, r.d)
            if v.result != ld.CONFIRMED:
                wrong.append(f"{r.name}: {c.counter} {c.direction} ({v.result})")
        if slower and not any(ld.check(c, base, r.d).result == ld.CONFIRMED for c in r.note.if_slower):
            unexplained.append(r.name)
    assert wrong == [] and unexplained == []


@pytest.mark.skipif(not RECORDED.exists(), reason="docs/ladder_profile.json not recorded yet")
def test_docs_ladder_md_is_generated_from_the_recorded_profile():
    doc = pf.load(RECORDED)
    want = ld.render(doc, ld.load_notes(), "ladder_roofline.png", "docs/ladder_profile.json")
    assert (ROOT / "docs" / "ladder.md").read_text() == want, "run python bench.py --ladder-doc docs/ladder_profile.json"
    assert {k["name"] for k in doc["kernels"] if k["status"] == "ok" and not k.get("baseline")} >= set(ld.load_notes())


def test_the_launcher_launches_every_rung_in_its_default_variant(monkeypatch, tmp_path):
    """The child ncu profiles, with the GPU stubbed: every rung resolves its default variant, launch
    options and declared configuration, and the record names the symbol the regex expects."""
    from types import SimpleNamespace

    import hgemm_rt as hg
    from hgemm_bench import devinfo, measure
    from hgemm_rt import registry as reg_mod
    from hgemm_rt.launcher import LaunchConfig
    from hgemm_rt.declaration import variant_symbol

    try:
        registry = hg.get_registry()
    except hg.ManifestError as exc:
        pytest.skip(f"no build: {exc}")
    launched = []

    def fake_launch(manifest, spec, a, b, c, *, stream=None, swizzle=False, swizzle_stride=None, **variant):
        launched.append((spec.name, swizzle))
        return LaunchConfig(variant_symbol(spec.name, spec.resolve_variant(variant)), (1, 1, 1), spec.block, 0,
                            spec.cluster)

    class Inputs:
        def __init__(self, *args, **kwargs):
            pass

        def operands(self, layout, dtype, a_order="row"):
            return "A", "B"

        def output(self, dtype):
            return "C"

        def close(self):
            pass

    monkeypatch.setattr(reg_mod, "launch_spec", fake_launch)
    monkeypatch.setattr(hg, "get_device", lambda: SimpleNamespace(info=SimpleNamespace(cc=(9, 0)),
                                                                  synchronize=lambda: None))
    monkeypatch.setattr(measure, "ShapeInputs", Inputs)
    monkeypatch.setattr(devinfo, "device_record", lambda dev: {"name": "stub"})
    monkeypatch.setattr(type(registry.get("hgemm_cublas_tensor_op_tn")), "__call__", lambda self, *a, **k: None)
    s = cli.parse_args(["--profile", "x.json"])
    batches = pf.plan(pf.rungs(registry.kernels(), s), cublas=True)
    records = []
    for b in batches:
        out = pf.launch_batch({"shape": [4096] * 3, "kernels": b.kernels, "cublas": b.cublas, "seed": 0})
        records += out["launches"]
        assert [r["symbol"] for r in out["launches"] if not r["baseline"]] == b.symbols
    assert all(r["status"] == "launched" for r in records), [r for r in records if r["status"] != "launched"]
    assert len(records) == sum(len(b.kernels) for b in batches) + 2
    hopper = next(r for r in records if r["name"] == "hgemm_sm90_wgmma_tma_ws_persistent_cluster2_tn")
    assert hopper["config"]["cluster"] == [2, 1, 1] and hopper["config"]["cubin_arch"] == "90a"
    assert hopper["config"]["variant"] == {"stages": 4} and hopper["config"]["dsmem"] > 0
    assert dict(launched)["hgemm_mma_m16n8k16_mma2x4_warp4x4_stages"] is True  # thread-block swizzle at N=4096
