"""`bench.py --matmul` on the CPU: its flags, the section table, the verdicts, the wall-time sizing,
the repeat-call key it reads the plan cache with, the JSON document, and the exit without a GPU."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hgemm_rt as hg  # noqa: E402
from hgemm_bench import cli, results  # noqa: E402
from hgemm_bench import matmul_section as ms  # noqa: E402
from hgemm_bench.matmul_table import BASELINES, HOST_CALLS, SECTIONS  # noqa: E402
from hgemm_rt.problem import ACCUMULATE  # noqa: E402

# -- flags ---------------------------------------------------------------------------------------


def test_matmul_flag_defaults_to_every_section_and_keeps_the_order_given():
    assert cli.parse_args([]).matmul == []
    assert cli.parse_args(["--matmul"]).matmul == list(SECTIONS)
    assert cli.parse_args(["--matmul", "host,torch"]).matmul == ["host", "torch"]
    assert cli.parse_args(["--matmul", "ragged, host,ragged"]).matmul == ["ragged", "host"]
    s = cli.parse_args(["--matmul", "sweep", "--autotune", "--iters", "7", "--json", "m.json", "--seed", "3"])
    assert (s.matmul, s.autotune, s.iters, s.json, s.seed) == (["sweep"], True, 7, "m.json", 3)


def test_unknown_section_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["--matmul", "host,bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "bogus" in err and all(name in err for name in SECTIONS)


def test_help_lists_the_flag_and_every_section():
    text = cli.build_parser().format_help()
    assert "--matmul" in text and "--autotune" in text
    for name, section in SECTIONS.items():
        assert name in text and section.title in text


# -- the section table -------------------------------------------------------------------------------

def test_every_section_declares_its_rows_and_a_baseline_that_is_measured():
    assert set(ms.KINDS) == set(BASELINES)
    for name, section in SECTIONS.items():
        kind = ms.KINDS[section.baseline]
        assert callable(kind.measure) and callable(kind.table), name
        assert bool(section.calls) == (section.baseline == "host"), name  # call forms are host rows only
        assert section.shapes and section.judge in ("each", "geomean"), name
        for shape in section.shapes:
            assert min(shape.M, shape.N, shape.K) >= 1 and shape.dtype in ACCUMULATE, (name, shape)
            assert {shape.a_order, shape.b_order} <= {"row", "col"}, (name, shape)
    assert "torch" in SECTIONS and "host" in SECTIONS


def test_host_calls_name_known_forms():
    for hc in HOST_CALLS:
        assert hc.kind in ("DeviceArray", "torch", "cupy") and hc.form in ("out", "new", "plan", "graph")
        assert hc.reference in (None, "out", "new") and not (hc.kind == "DeviceArray" and hc.reference)
    labels = [ms.reference_label(hc) for hc in HOST_CALLS]
    assert "torch.matmul(a, b, out=c)" in labels and "torch.matmul(a, b)" in labels
    assert "cupy.matmul(a, b, out=c)" in labels


def test_baselines_exclude_tf32():
    assert ms.baseline_accumulations("f16") == ("f32", "f16")
    assert ms.baseline_accumulations("f32") == ("f32",)


# -- verdicts, wall-time sizing ------------------------------------------------------------------------

def test_targets_are_judged_on_every_row_or_the_geomean():
    each, geo, info = SECTIONS["ragged"], SECTIONS["sweep"], SECTIONS["layouts"]
    v = ms.judge_target("ragged", each, [2.5, 1.9])
    assert v["value"] == 1.9 and v["met"] is False and "NOT met" in ms.verdict_line(v)
    v = ms.judge_target("sweep", geo, [0.81, 1.0])
    assert math.isclose(v["value"], 0.9) and v["met"] is True and "(met)" in ms.verdict_line(v)
    assert ms.judge_target("ragged", each, [2.5, None])["met"] is None  # a row without cuBLAS
    assert ms.judge_target("layouts", info, [1.0]) is None


def test_wall_time_repetitions_last_about_the_declared_time(monkeypatch):
    assert ms.calls_per_repeat(1.0) == ms.WALL_MIN_CALLS
    assert ms.calls_per_repeat(ms.WALL_REPEAT_S / 1000) == 1000
    monkeypatch.setattr(ms, "WALL_REPEAT_S", 1e-3)  # keep the CPU suite fast
    calls, syncs = [], []
    us = ms.wall_us(lambda: calls.append(1), lambda: syncs.append(1))
    # a warm-up call, a probe of WALL_MIN_CALLS, then WALL_REPEATS repetitions; one sync before and after each
    assert us > 0 and len(calls) >= 1 + ms.WALL_MIN_CALLS + ms.WALL_REPEATS * ms.WALL_MIN_CALLS
    assert len(syncs) == 2 * (1 + ms.WALL_REPEATS)


def test_tables_render_rows_with_missing_baselines_and_failures():
    """The fields each measuring function returns, as the tables read them (no GPU time lost to a typo)."""
    row = {"section": "s", "M": 16, "N": 4096, "K": 4096, "dtype": "f16", "a_order": "row", "b_order": "col",
           "route": "kernel 16x4096x4096", "rel_error": None, "error_bound": 1e-3, "ok": False}
    text = ms.cublas_table([dict(row, hg_us=9.0, hg_tflops=1.0, cublas_us=None, cublas_tflops=None,
                                 cublas_variant="cuBLAS unavailable", ratio=None)])
    assert "FAIL" in text and "kernel 16x4096x4096" in text
    assert "torch/hg" in ms.torch_table([dict(row, hg_gpu_us=1.0, torch_gpu_us=2.0, gpu_ratio=2.0, hg_wall_us=3.0,
                                              torch_wall_us=None, wall_ratio=None)])
    parts = [{"part": p, "role": r, "us": us} for p, r, us in (("key", "part", 1.0), ("call", "whole", 4.0))]
    text = ms.host_table([dict(row, call="torch, out given", hg_us=4.0, reference=None, reference_us=None,
                               ratio=None)] + parts)
    assert "torch, out given" in text and "3.00" in text  # the rest of the call: 4 - 1


# -- the repeat-call key -----------------------------------------------------------------------------------

def test_repeat_call_key_is_the_key_matmul_looks_up():
    """A fake validated call filed under our key is what hg.matmul runs: so the breakdown reads the
    plan cache exactly as a repeat call does (no GPU: the arrays are never touched)."""
    a, b, c = (hg.DeviceArray(ptr, (64, 64), "f16") for ptr in (1 << 20, 2 << 20, 3 << 20))
    ran = []

    class FakeBound:
        def run(self, pa, pb, out, pc):
            ran.append((pa, pb, pc))
            return out

    key = ms.repeat_call_key(a, b, c)
    hg.plans.calls[key] = FakeBound()
    try:
        assert hg.matmul(a, b, c) is c
    finally:
        hg.plans.calls.pop(key, None)
    assert ran == [(a.ptr, b.ptr, c.ptr)]


# -- JSON, failures, no GPU ------------------------------------------------------------------------

def test_results_document_is_strict_json_one_row_per_line():
    rows = [{"section": "sweep", "M": 64, "N": 64, "K": 64, "dtype": "f16", "a_order": "row", "b_order": "row",
             "hg_us": 5.0, "ratio": float("nan"), "rel_error": None, "error_bound": 1e-3, "ok": False},
            {"section": "host", "call": "torch, out given", "hg_us": 9.0, "ok": True}]
    doc = ms.make_doc(device={"name": "GPU"}, build={"hash": "x"}, frameworks={"torch": None, "cupy": None},
                      settings={"seed": 1}, command="python bench.py --matmul", rows=rows,
                      verdicts=[], skipped=[{"section": "torch", "what": "the section", "reason": "no torch"}])
    text = results.dumps(doc, ms.DOC_ROWS)
    back = json.loads(text)
    assert back["rows"][0]["ratio"] is None and back["device"]["name"] == "GPU"
    assert len([ln for ln in text.splitlines() if '"section": ' in ln]) == 3
    assert ms.failures(doc) == ["sweep 64x64x64 f16 A row B row"]


def test_without_a_gpu_matmul_mode_exits_1(monkeypatch, capsys):
    from hgemm_bench.main import main

    monkeypatch.setattr(hg, "gpu_available", lambda: False)
    assert main(["--matmul", "host"]) == 1
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(hg.gpu_available(), reason="this machine has a GPU: the command would run the bench")
def test_bench_py_matmul_says_no_gpu_and_exits_1():
    out = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--matmul"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 1, out.stderr
    assert "no CUDA GPU" in out.stderr and "matmul" in out.stderr


@pytest.mark.gpu
def test_matmul_sections_on_the_gpu(tmp_path, monkeypatch, capsys):
    """A short real run: every row verified and timed, the JSON written, exit 0."""
    from hgemm_bench.main import main

    monkeypatch.setattr(ms, "WALL_REPEAT_S", 0.02)  # short wall-time repetitions: this checks the plumbing
    out = tmp_path / "m.json"
    rc = main(["--matmul", "smallm,torch,host", "--iters", "3", "--warmup", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    doc = json.loads(out.read_text())
    assert doc["rows"] and all(r.get("ok", True) for r in doc["rows"])
    timed = [v for r in doc["rows"] for k, v in r.items() if k.endswith("_us") and v is not None]
    assert timed and all(v > 0 for v in timed)
    assert "== smallm" in text and "== host" in text and "x cuBLAS" in text


@pytest.mark.gpu
def test_matmul_steady_protocol_on_the_gpu(tmp_path, capsys):
    """--steady on a section against cuBLAS: hg.matmul and the cuBLAS variants in interleaved rounds."""
    from hgemm_bench.main import main

    out = tmp_path / "m.json"
    rc = main(["--matmul", "smallm", "--steady", "2", "--warm-s", "0.1", "--iters", "3", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    doc = json.loads(out.read_text())
    assert doc["settings"]["protocol"] == "steady" and doc["settings"]["rounds"] == 2
    for r in doc["rows"]:
        assert len(r["steady"]["ms"]) == 2 and len(r["steady"]["ratio"]) == 2 and r["ratio"] > 0
    assert "per round" in text
