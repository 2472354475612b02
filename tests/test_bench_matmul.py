"""`bench.py --matmul` on the CPU: its flags, the section table, the verdicts, the wall-time sizing,
the repeat-call key it reads the plan cache with, the JSON document, and the exit without a GPU."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    text = ms.cublas_table([dict(row, hg_us=9.0, hg_tflops=1.0, cublas_us=8.0, cublas_tflops=1.1, ratio=0.89,
                                 cublas_variant="Lt algo #3 (id 66) acc f16", gemmex_us=10.0, gemmex_ratio=1.11,
                                 baseline_timed=17, baseline_skipped=1, torch_us=8.5, torch_ratio=0.94)])
    assert "Lt algo #3 (id 66) acc f16" in text and "17 (1 skipped)" in text and "x torch" in text
    assert "torch/hg" in ms.torch_table([dict(row, hg_gpu_us=1.0, torch_gpu_us=2.0, gpu_ratio=2.0, hg_wall_us=3.0,
                                              torch_wall_us=None, wall_ratio=None)])
    parts = [{"part": p, "role": r, "us": us} for p, r, us in (("key", "part", 1.0), ("call", "whole", 4.0))]
    text = ms.host_table([dict(row, call="torch, out given", hg_us=4.0, reference=None, reference_us=None,
                               ratio=None)] + parts)
    assert "torch, out given" in text and "3.00" in text  # the rest of the call: 4 - 1


# -- the cuBLAS baseline: GemmEx and the cuBLASLt candidates ------------------------------------------

class Cand:
    def __init__(self, index, algo_id):
        self.index, self.algo_id, self.label = index, algo_id, f"Lt algo #{index} (id {algo_id})"

    def record(self):
        return {"index": self.index, "algo_id": self.algo_id}


@pytest.fixture
def fake_cublas(monkeypatch):
    """cublas.matmul and cublaslt (candidates, matmul) recording their calls; the heuristic offers
    algorithms 66, 70 and 23 at acc f32, fails at acc f16."""
    ran = []
    monkeypatch.setattr(ms.cublas, "matmul", lambda A, B, C, acc: ran.append(("GemmEx", acc)))

    def candidates(A, B, C, acc, algos):
        if acc == "f16":
            raise hg.DriverError("cuBLASLt matmul_algo_get_heuristic (...) failed: NOT_SUPPORTED")
        return tuple(Cand(i, a) for i, a in enumerate((66, 70, 23)))[:algos]

    monkeypatch.setattr(ms.cublaslt, "candidates", candidates)
    monkeypatch.setattr(ms.cublaslt, "matmul", lambda A, B, C, acc, algo, algos: ran.append(("Lt", acc, algo, algos)))
    return ran


def test_baseline_calls_are_gemmex_then_each_accumulations_lt_candidates(fake_cublas):
    calls = ms.baseline_calls("A", "B", "C", "f16")
    assert [c.label for c in calls] == ["GemmEx acc f32", "GemmEx acc f16", "Lt algo #0 (id 66) acc f32",
                                        "Lt algo #1 (id 70) acc f32", "Lt algo #2 (id 23) acc f32", "Lt acc f16"]
    assert [c.api for c in calls] == ["GemmEx"] * 2 + ["Lt"] * 4
    assert calls[-1].run is None and calls[-1].reason.startswith("heuristic: cuBLASLt matmul_algo_get_heuristic")
    assert calls[3].config == {"index": 1, "algo_id": 70}
    for c in calls[:-1]:
        c.run()
    assert fake_cublas == [("GemmEx", "f32"), ("GemmEx", "f16"), ("Lt", "f32", 0, ms.LT_ALGOS),
                           ("Lt", "f32", 1, ms.LT_ALGOS), ("Lt", "f32", 2, ms.LT_ALGOS)]
    assert [c.label for c in ms.baseline_calls("A", "B", "C", "f32", algos=1)] == [
        "GemmEx acc f32", "Lt algo #0 (id 66) acc f32"]  # no TF32, the request size passed on


class FakeInputs:
    """ShapeInputs without a GPU: the operands are names, the output a token."""
    def __init__(self, M, N, K, rng, check_rows):
        self.M, self.N, self.K, self.rows = M, N, K, np.arange(M)
        self.closed = False

    def operands(self, layout, dtype, a_order="row"):
        return "A", "B"

    def output(self, dtype):
        return "C"

    def close(self):
        self.closed = True


def fake_checks(monkeypatch, errors: dict):
    """checked_launch runs the call and answers the error `errors` gives the last thing it ran (an
    exception is raised); hg.matmul and hg.explain stand in for the library."""
    last = []

    def checked_launch(fn, C, inp, dtype):
        fn()
        err = errors.get(last[-1] if last else None, 1e-4)
        if isinstance(err, Exception):
            raise err
        return 0.1, err

    monkeypatch.setattr(ms, "checked_launch", checked_launch)
    monkeypatch.setattr(ms.hg, "matmul", lambda A, B, C: last.append("hg"))
    monkeypatch.setattr(ms.hg, "explain", lambda A, B, C: "route")
    return last


def test_check_holds_gemmex_to_the_static_bound_and_lt_to_gemmex(monkeypatch):
    from hgemm_rt.numerics import error_bound

    last = fake_checks(monkeypatch, {"g32": 2e-4, "g16": 5.0, "lt0": 7e-4, "lt1": 9e-4, "lt2": None,
                                     "lt3": hg.DriverError("cuBLASLt matmul (...) failed: EXECUTION_FAILED"),
                                     "lt4": 3e-3})

    def call(label, api, acc):
        return ms.BaselineCall(label, api, acc, lambda: last.append(label))

    calls = [call("g32", "GemmEx", "f32"), call("g16", "GemmEx", "f16"), call("lt0", "Lt", "f32"),
             call("lt1", "Lt", "f32"), call("lt2", "Lt", "f32"), call("lt3", "Lt", "f32"), call("lt4", "Lt", "f16"),
             ms.BaselineCall("Lt acc bf", "Lt", "f16", None, reason="heuristic: none")]
    inp = FakeInputs(64, 64, 4096, None, 0)
    error_of = lambda fn: ms.checked_launch(fn, "C", inp, "f16")[1]  # noqa: E731
    assert ms.check_baselines(calls, inp.K, "f16", error_of) == {"f32": 2e-4}  # GemmEx f16 was wrong
    bound = error_bound("f16", "f32", "f16", 4096, 2e-4)
    assert calls[0].error_bound == error_bound("f16", "f32", "f16", 4096) and calls[0].reason is None
    assert calls[1].reason.startswith("rel err 5.00e+00 >")
    assert calls[2].reason is None and calls[2].error_bound == bound == 8e-4
    assert calls[3].reason == f"rel err 9.00e-04 > {bound:.2e}"
    assert calls[4].reason == "NaN/Inf in C"
    assert calls[5].reason == "DriverError: cuBLASLt matmul (...) failed: EXECUTION_FAILED"
    # no GemmEx f16 to compare with: the static bound of the accumulation
    assert calls[6].reason is None and calls[6].error_bound == error_bound("f16", "f16", "f16", 4096)
    assert calls[7].reason == "heuristic: none" and "Lt acc bf" not in last


def fake_run(us: dict, steady=None):
    """A Run whose GPU time of a call is us[the label it records]; a label with an exception raises."""
    run = ms.Run(iters=1, warmup=0, check_rows=0, autotune=False, rng=np.random.default_rng(0), flusher=None,
                 steady=steady, kernel_names=None)
    log = []

    def gpu_us(fn, stream=None):
        fn()
        v = us[log[-1]]
        if isinstance(v, Exception):
            raise v
        return v

    run.gpu_us = gpu_us
    return run, log


def test_the_baseline_is_the_fastest_gemmex_or_lt_call_and_gemmex_stays_beside_it():
    run, log = fake_run({"hg": 100.0, "GemmEx acc f32": 120.0, "GemmEx acc f16": 110.0, "Lt #0": 95.0,
                         "Lt #1": RuntimeError("launch failed"), "torch": 90.0})

    def call(label, api):
        return ms.BaselineCall(label, api, "f32", lambda: log.append(label))

    calls = [call("GemmEx acc f32", "GemmEx"), call("GemmEx acc f16", "GemmEx"), call("Lt #0", "Lt"),
             call("Lt #1", "Lt"), call("torch", "torch"), ms.BaselineCall("Lt #2", "Lt", "f32", None, reason="wrong")]
    t = ms.time_vs_cublas(run, lambda: log.append("hg"), calls, "")
    close = functools.partial(pytest.approx, rel=1e-12)
    assert (t["hg_us"], t["cublas_us"], t["ratio"]) == close((100.0, 95.0, 0.95)) and t["cublas_variant"] == "Lt #0"
    assert (t["gemmex_us"], t["gemmex_ratio"]) == close((110.0, 1.1)) and t["gemmex_variant"] == "GemmEx acc f16"
    assert (t["torch_us"], t["torch_ratio"]) == close((90.0, 0.9))  # faster, but a cross-check: not the baseline
    assert calls[3].reason == "while timed: RuntimeError: launch failed" and calls[3].us is None
    assert [c.us for c in calls] == [close(120.0), close(110.0), close(95.0), None, close(90.0), None]
    assert "Lt #2" not in log and "steady" not in t


def test_the_row_names_the_kernels_of_the_fastest_baseline_call_only():
    run, log = fake_run({"hg": 100.0, "GemmEx acc f32": 120.0, "Lt #0": 95.0})
    named = []
    run.kernel_names = lambda fn: (named.append(fn), {"kernel": "nvjet_x"})[1]
    calls = [ms.BaselineCall(label, api, "f32", lambda label=label: log.append(label))
             for label, api in (("GemmEx acc f32", "GemmEx"), ("Lt #0", "Lt"))]
    t = ms.time_vs_cublas(run, lambda: log.append("hg"), calls, "")
    assert named == [calls[1].run] and t["cublas_kernel"] == {"kernel": "nvjet_x"}
    run, log = fake_run({"hg": 10.0})
    run.kernel_names = lambda fn: pytest.fail("no baseline ran: nothing to name")
    assert "cublas_kernel" not in ms.time_vs_cublas(run, lambda: log.append("hg"), [], "none")


def test_kernel_names_parse_cublas_nvjet_names_and_say_why_without_torch(monkeypatch):
    from hgemm_bench import kernel_names as kn
    assert kn.parse_nvjet("nvjet_sm90_hsh_112x128_64x7_2x1_v_bz_splitK_TNN") == {
        "tile": [112, 128, 64], "stages": 7, "cluster": [2, 1], "raster": "v", "schedule": "no coop", "split_k": True,
        "layout": "TNN"}
    assert kn.parse_nvjet("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT")["schedule"] == "coopA"
    assert kn.parse_nvjet("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8") is None

    def no_torch(name):
        raise ImportError(f"No module named {name!r}")
    monkeypatch.setattr(kn.importlib, "import_module", no_torch)
    rec = kn.kernel_record(lambda: pytest.fail("not called without a profiler"))
    assert rec["kernel"] is None and rec["why"].startswith("torch is not installed")


def test_without_any_cublas_call_the_row_says_why():
    run, log = fake_run({"hg": 10.0})
    calls = [ms.BaselineCall("GemmEx acc f32", "GemmEx", "f32", None,
                             reason="NoGpuError: nvmath-python is not installed")]
    t = ms.time_vs_cublas(run, lambda: log.append("hg"), calls, ms.unavailable(calls))
    assert t["cublas_us"] is None and t["ratio"] is None and t["gemmex_us"] is None
    assert t["cublas_variant"] == "cuBLAS unavailable: NoGpuError: nvmath-python is not installed"


def test_steady_rounds_take_each_rounds_fastest_of_the_group(monkeypatch):
    """Per round, the fastest GemmEx or Lt call over hg.matmul; a contender that failed in a round
    leaves the rounds (its reason kept) and is no one's best."""
    from hgemm_bench.steady import Protocol

    ms_of = {"hg": [1.0, 1.0, 1.0], "GemmEx": [1.2, 1.1, 1.3], "Lt #0": [0.9, 1.2, 1.0], "Lt #1": [0.5]}

    def interleave(contenders, protocol, flusher, sampler):
        for c, name in zip(contenders, ms_of):
            c.ms = list(ms_of[name])
            if len(c.ms) < 3:
                c.error = "error in round 2: DriverError: boom"

    monkeypatch.setattr(ms, "interleave", interleave)
    monkeypatch.setattr(ms, "timed_once", lambda fn: 1.0)
    run, _ = fake_run({}, steady=Protocol(rounds=3))
    calls = [ms.BaselineCall(n, "GemmEx" if n == "GemmEx" else "Lt", "f32", lambda: None) for n in list(ms_of)[1:]]
    t = ms.time_vs_cublas(run, lambda: None, calls, "")
    assert t["steady"]["ratio"] == [0.9, 1.1, 1.0] and t["ratio"] == 1.0
    assert math.isclose(t["cublas_us"], 1000.0) and t["cublas_variant"] == "Lt #0"
    assert math.isclose(t["gemmex_us"], 1200.0) and math.isclose(t["gemmex_ratio"], 1.2)
    assert calls[2].reason == "while timed: error in round 2: DriverError: boom"


@pytest.mark.usefixtures("fake_cublas")  # its heuristic; the calls are replaced to record into `last`
def test_a_row_records_the_strongest_baseline_gemmex_and_every_call(monkeypatch):
    """measure_vs_cublas end to end with the GPU faked: the row keeps the winner and GemmEx's figure,
    the skipped candidates are counted and reported, the inputs are closed."""
    inputs = []
    monkeypatch.setattr(ms, "ShapeInputs", lambda *a: inputs.append(FakeInputs(*a)) or inputs[-1])
    monkeypatch.setattr(ms, "torch_cross_check", lambda A, B, C: None)
    last = fake_checks(monkeypatch, {("Lt", "f32", 1, ms.LT_ALGOS): 1.0})  # algo #1 is wrong
    monkeypatch.setattr(ms.cublas, "matmul", lambda A, B, C, acc: last.append(("GemmEx", acc)))
    monkeypatch.setattr(ms.cublaslt, "matmul",
                        lambda A, B, C, acc, algo, algos: last.append(("Lt", acc, algo, algos)))
    us = {"hg": 100.0, ("GemmEx", "f32"): 130.0, ("GemmEx", "f16"): 125.0, ("Lt", "f32", 0, ms.LT_ALGOS): 105.0,
          ("Lt", "f32", 2, ms.LT_ALGOS): 98.0}
    run, log = fake_run({})
    run.gpu_us = lambda fn, stream=None: (fn(), us[last[-1]])[1]
    (row,) = ms.measure_vs_cublas("sweep", SECTIONS["sweep"].shapes[0], run)
    assert inputs[0].closed
    assert row["cublas_variant"] == "Lt algo #2 (id 23) acc f32" and row["cublas_us"] == pytest.approx(98.0)
    assert row["ratio"] == pytest.approx(0.98) and row["gemmex_us"] == pytest.approx(125.0)
    assert row["gemmex_variant"] == "GemmEx acc f16"
    assert row["gemmex_tflops"] < row["cublas_tflops"] and row["ok"]
    assert row["baseline_timed"] == 4 and row["baseline_skipped"] == 2  # Lt #1 wrong, Lt acc f16 no heuristic
    labels = {r["label"]: r for r in row["baseline_calls"]}
    assert labels["Lt algo #1 (id 70) acc f32"]["skipped"].startswith("rel err 1.00e+00")
    assert labels["Lt algo #0 (id 66) acc f32"]["config"] == {"index": 0, "algo_id": 66}
    assert labels["Lt algo #0 (id 66) acc f32"]["us"] == pytest.approx(105.0)
    assert [s["what"].split(": ", 1)[1] for s in run.skipped] == ["Lt algo #1 (id 70) acc f32", "Lt acc f16"]
    assert row["cublas_rel_error"] == 1e-4  # GemmEx at matmul's accumulation sets hg.matmul's bound
    text = ms.cublas_table([row])
    assert "Lt algo #2 (id 23) acc f32" in text and "4 (2 skipped)" in text and "GemmEx us" in text
    assert "1.25x" in text and "2 skipped (failed or wrong)" in text and "torch us" not in text
    json.dumps(row)  # plain data only


# -- the batched section: cuBLAS strided-batched and torch.matmul ------------------------------------------

def test_strided_batched_sets_the_bound_of_torch_as_gemmex_does():
    """cublasGemmStridedBatchedEx is a reference call: held to the static bound, it bounds torch.matmul."""
    from hgemm_rt.numerics import error_bound

    errors = {"sb32": 2e-4, "sb16": 5e-3, "torch": 9e-4}
    calls = [ms.BaselineCall(label, api, acc, lambda label=label: label) for label, api, acc in
             (("sb32", "StridedBatched", "f32"), ("sb16", "StridedBatched", "f16"), ("torch", "torch", None))]
    assert ms.check_baselines(calls, 4096, "f16", lambda fn: errors[fn()]) == {"f32": 2e-4, "f16": 5e-3}
    assert calls[0].error_bound == error_bound("f16", "f32", "f16", 4096) and calls[1].reason is None
    assert calls[2].error_bound == error_bound("f16", "f32", "f16", 4096, 2e-4) == 8e-4
    assert calls[2].reason == "rel err 9.00e-04 > 8.00e-04"


def test_strided_batched_calls_take_the_tensors_storage_or_say_why_not(monkeypatch):
    """Q.K^T on 3-D arrays (K^T a transposed view: a transpose flag, no copy): every baseline accumulation
    is one gemm_strided_batched call with the arrays' pointers, leading dimensions and batch strides on the
    given stream; a batch without one stride per operand is one skipped entry that says why."""
    ran = []
    monkeypatch.setattr(ms.cublas, "gemm_strided_batched", lambda **kw: ran.append(kw))
    base = 1 << 32  # made-up addresses: nothing is dereferenced
    q, k = hg.DeviceArray(base, (8, 128, 64), "f16"), hg.DeviceArray(base + (1 << 24), (8, 128, 64), "f16")
    k_t = hg.DeviceArray(k.ptr, (8, 64, 128), "f16", strides=(k.strides[0], k.strides[2], k.strides[1]))
    c = hg.DeviceArray(base + (2 << 24), (8, 128, 128), "f16")
    calls = ms.strided_batched_calls(q, k_t, c, "f16", 0x5EED)
    assert [(x.label, x.api, x.acc) for x in calls] == [("cublasGemmStridedBatchedEx acc f32", "StridedBatched", "f32"),
                                                        ("cublasGemmStridedBatchedEx acc f16", "StridedBatched", "f16")]
    for x in calls:
        x.run()
    assert [(kw["acc"], kw["stream"]) for kw in ran] == [("f32", 0x5EED), ("f16", 0x5EED)]
    kw = ran[0]
    assert (kw["a_ptr"], kw["b_ptr"], kw["c_ptr"]) == (q.ptr, k.ptr, c.ptr)
    assert (kw["M"], kw["N"], kw["K"], kw["batch"], kw["layout"], kw["a_order"]) == (128, 128, 64, 8, "TN", "row")
    assert (kw["lda"], kw["ldb"], kw["ldc"], kw["stride_a"], kw["stride_b"], kw["stride_c"]) == (
        64, 64, 128, 128 * 64, 128 * 64, 128 * 128)
    # (2, 4) heads over batches stored as (4, 2): the batch dimensions of A do not step evenly
    s = hg.DeviceArray(base, (4, 2, 128, 64), "f16").strides
    a = hg.DeviceArray(base, (2, 4, 128, 64), "f16", strides=(s[1], s[0], s[2], s[3]))
    b = hg.DeviceArray(base + (1 << 24), (2, 4, 64, 128), "f16")
    c4 = hg.DeviceArray(base + (2 << 24), (2, 4, 128, 128), "f16")
    (skipped,) = ms.strided_batched_calls(a, b, c4, "f16", 0)
    assert skipped.run is None and skipped.label == "cublasGemmStridedBatchedEx" and len(ran) == 2
    assert skipped.reason.startswith("ValidationError: cublasGemmStridedBatchedEx: A (2, 4, 128, 64) with strides")
    assert "is not one strided batch" in skipped.reason


class FakeTensor:
    """A host stand-in for a CUDA tensor: what measure_batched asks of one."""
    dtype, device = "float16", "cuda"

    def __init__(self, a):
        self.a = np.asarray(a, np.float64)

    @property
    def shape(self):
        return self.a.shape

    def double(self):
        return FakeTensor(self.a)

    def __matmul__(self, other):
        return FakeTensor(self.a @ other.a)

    def fill_(self, v):
        self.a[...] = v

    def t(self):
        return FakeTensor(self.a.T)


@pytest.fixture
def fake_batched(monkeypatch):
    """measure_batched on the CPU: torch, hg.matmul and the cuBLAS call write x @ w into the output and log
    who ran (cuBLAS with acc f16 a little off); GPU time and wall time are looked up by who ran last."""
    log = []
    fake_torch = type("T", (), {})()
    fake_torch.cuda = type("C", (), {"current_stream": staticmethod(lambda: type("S", (), {"cuda_stream": 0x5EED})),
                                     "synchronize": staticmethod(lambda: None)})

    def product(who, x, w, out, off=0.0):
        log.append(who)
        if out is not None:
            out.a[...] = x.a @ w.a + off

    fake_torch.empty = lambda shape, dtype, device: FakeTensor(np.empty(shape))
    fake_torch.matmul = lambda x, w, out=None: product("torch", x, w, out)
    monkeypatch.setattr(ms, "framework", lambda name: (fake_torch, None))
    monkeypatch.setattr(ms, "torch_operand", lambda torch, rng, rows, cols, order, dtype, batch:
                        FakeTensor(rng.standard_normal((batch, rows, cols))))
    monkeypatch.setattr(ms, "torch_rel_error", lambda c, ref: None if not np.isfinite(c.a).all()
                        else float(np.linalg.norm(c.a - ref.a) / np.linalg.norm(ref.a)))
    monkeypatch.setattr(ms.hg, "matmul", lambda x, w, out=None: product("hg", x, w, out))
    monkeypatch.setattr(ms.hg, "explain", lambda x, w, out=None: "route")
    tensors = {}

    class Batch:
        def arguments(self):
            return tensors

    def batched_operands(x, w, c, who):
        if getattr(c, "refuse", False):
            raise hg.ValidationError(f"{who}: B (3, 4, 6) with strides (0, 2, 8) is not one strided batch")
        tensors.update(x=x, w=w, c=c)
        return Batch()

    monkeypatch.setattr(ms.cublas, "batched_operands", batched_operands)
    monkeypatch.setattr(ms.cublas, "gemm_strided_batched", lambda x, w, c, acc, stream:
                        product(("sb", acc, stream), x, w, c, 1e-3 if acc == "f16" else 0.0))
    us = {"hg": 100.0, ("sb", "f32", 0x5EED): 120.0, ("sb", "f16", 0x5EED): 110.0, "torch": 105.0}
    run, _ = fake_run({})
    run.gpu_us = lambda fn, stream=None: (fn(), us[log[-1]])[1] if stream == 0x5EED else pytest.fail("stream")
    monkeypatch.setattr(ms, "wall_us", lambda fn, sync: (fn(), {"hg": 30.0, "torch": 40.0}[log[-1]])[1])
    return run, log, fake_torch


def test_a_batched_row_judges_the_faster_of_cublas_strided_batched_and_torch(fake_batched):
    from hgemm_bench.matmul_table import Shape

    run, log, _ = fake_batched
    (row,) = ms.measure_batched("batched", Shape(8, 6, 4, "f16", b_order="col", batch=3), run)
    close = functools.partial(pytest.approx, rel=1e-12)
    assert row["cublas_variant"] == "cublasGemmStridedBatchedEx acc f16" and row["cublas_us"] == close(110.0)
    assert row["torch_variant"] == "torch.matmul" and row["torch_us"] == close(105.0)
    assert row["baseline_variant"] == "torch.matmul" and row["baseline_us"] == close(105.0)
    assert (row["ratio"], row["cublas_ratio"], row["torch_ratio"]) == close((1.05, 1.1, 1.05))
    assert (row["hg_wall_us"], row["torch_wall_us"], row["wall_ratio"]) == close((30.0, 40.0, 40.0 / 30.0))
    assert row["cublas_rel_error"] == 0.0 and row["ok"] and row["batch"] == 3
    assert row["cublas_tflops"] == pytest.approx(2.0 * 3 * 8 * 6 * 4 / 110e-6 / 1e12)
    labels = {r["label"]: r for r in row["baseline_calls"]}
    assert labels["cublasGemmStridedBatchedEx acc f32"]["us"] == close(120.0)
    assert labels["cublasGemmStridedBatchedEx acc f16"]["rel_error"] > 0 and not run.skipped
    text = ms.batched_table([row])
    assert "cublasGemmStridedBatchedEx" in text and "x baseline" in text and "torch.matmul" in text
    assert "1.10x" in text and "1.05x" in text and "no cuBLAS strided-batched figure" not in text
    json.dumps(row)  # plain data only
    v = ms.judge_target("batched", SECTIONS["batched"], [row["ratio"]])
    assert v["target"] == 1.0 and v["met"] is True


def test_a_batched_row_without_one_strided_batch_records_why_and_keeps_torch(fake_batched, monkeypatch):
    from hgemm_bench.matmul_table import Shape

    run, log, fake_torch = fake_batched
    monkeypatch.setattr(fake_torch, "empty", lambda shape, dtype, device: setattr(
        t := FakeTensor(np.empty(shape)), "refuse", True) or t)
    (row,) = ms.measure_batched("batched", Shape(8, 6, 4, "f16", batch=3), run)
    assert row["cublas_us"] is None and row["cublas_ratio"] is None and row["cublas_rel_error"] is None
    assert row["cublas_variant"].startswith("cuBLAS unavailable: ValidationError: cublasGemmStridedBatchedEx: B")
    assert row["baseline_variant"] == "torch.matmul" and row["ratio"] == pytest.approx(1.05)
    assert not any(isinstance(who, tuple) for who in log)  # no cuBLAS call was faked into a figure
    (skip,) = run.skipped
    assert skip["section"] == "batched" and skip["what"].endswith(": cublasGemmStridedBatchedEx")
    assert "is not one strided batch" in skip["reason"]
    assert "no cuBLAS strided-batched figure: cuBLAS unavailable" in ms.batched_table([row])


def test_steady_rounds_of_the_batched_section_are_the_baselines(monkeypatch):
    """With the batched groups, "ratio" and the steady rounds are the faster of cuBLAS and torch per round,
    every contender on the given stream."""
    from hgemm_bench.steady import Protocol

    ms_of = {"hg": [1.0, 1.0], "cublasGemmStridedBatchedEx acc f32": [1.2, 0.9], "torch.matmul": [1.1, 1.3]}
    contenders = []

    def interleave(cs, protocol, flusher, sampler):
        contenders.extend(cs)
        for c, name in zip(cs, ms_of):
            c.ms = list(ms_of[name])

    monkeypatch.setattr(ms, "interleave", interleave)
    monkeypatch.setattr(ms, "timed_once", lambda fn: 1.0)
    run, _ = fake_run({}, steady=Protocol(rounds=2))
    calls = [ms.BaselineCall("cublasGemmStridedBatchedEx acc f32", "StridedBatched", "f32", lambda: None),
             ms.BaselineCall("torch.matmul", "torch", None, lambda: None)]
    t = ms.time_vs_cublas(run, lambda: None, calls, "", stream=0x5EED, groups=ms.BATCHED_GROUPS, judged="baseline")
    assert t["steady"]["ratio"] == [1.1, 0.9] and t["ratio"] == pytest.approx(1.0)
    assert t["cublas_ratio"] == pytest.approx(1.05) and t["torch_ratio"] == pytest.approx(1.2)
    assert all(c.stream == 0x5EED for c in contenders) and "gemmex_us" not in t


# -- the decode_graph section: decode steps in CUDA graphs ------------------------------------------------

def test_decode_graph_rows_are_one_llama3_8b_decoder_layer_at_each_token_count():
    from hgemm_bench.matmul_table import DECODE_STEP, decode_step

    section = SECTIONS["decode_graph"]
    assert DECODE_STEP == (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336))
    assert [s.M for s in section.shapes] == [1, 8, 32, 64] and section.baseline == "graph" and section.bandwidth
    for s in section.shapes:
        assert s.layers == DECODE_STEP and (s.dtype, s.a_order, s.b_order, s.batch) == ("bf16", "row", "col", 1)
        assert s.N * s.K == sum(n * k for _, n, k in DECODE_STEP) and s.K == 4096  # the step's weights, as one GEMM
    assert section.shapes[1].cell == ("decode step M=8: qkv 6144x4096, o 4096x4096, gate_up 28672x4096, "
                                      "down 4096x14336, bf16 A row B col")
    row = {"M": 8, "N": 53248, "K": 4096, "dtype": "bf16", "a_order": "row", "b_order": "col",
           "layers": [list(layer) for layer in DECODE_STEP]}  # as the JSON gives it back
    assert ms.shape_cell(row) == section.shapes[1].cell
    with pytest.raises(ValueError, match="no multiple of the first layer's K = 4096"):
        decode_step(1, (("a", 10, 4096), ("b", 3, 5)))


def test_decode_graph_target_is_every_row_at_1x_and_the_geomean_at_105x():
    section = SECTIONS["decode_graph"]
    assert (section.target, section.judge, section.floor) == (1.05, "geomean", 1.0)
    v = ms.judge_target("decode_graph", section, [1.0, 1.05, 1.1, 1.1])
    assert v["met"] is True and v["worst"] == 1.0 and "every row >= 1x" in ms.verdict_line(v)
    v = ms.judge_target("decode_graph", section, [1.1, 1.1, 1.1, 0.99])  # geomean 1.07, one row below 1.0x
    assert v["value"] > 1.05 and v["met"] is False and "NOT met" in ms.verdict_line(v)
    assert ms.judge_target("decode_graph", section, [1.02] * 4)["met"] is False  # every row, not the geomean
    assert ms.judge_target("decode_graph", section, [1.1, None, 1.1, 1.1])["met"] is None  # a skipped row


class FakeGraphTorch:
    """torch's CUDA-graph API on the CPU: a GEMM captured is recorded (not run) and runs at each replay,
    advancing a GPU clock by cost[who] microseconds; events read that clock. `log` keeps what happened."""

    def __init__(self, cost):
        self.cost, self.clock, self.capturing, self.log = cost, 0.0, None, []
        fake = self

        class Stream:
            def wait_stream(self, other):
                pass

            def synchronize(self):
                pass

        class CUDAGraph:
            def __init__(self):
                self.ops = []

            def replay(self):
                fake.log.append("replay")
                for op in self.ops:
                    op()

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing

            def record(self):
                fake.log.append("event")
                self.at = fake.clock

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.at - self.at) / 1e3

        @contextlib.contextmanager
        def graph(g, stream):
            self.capturing = g
            yield
            self.capturing = None

        self.cuda = type("cuda", (), {"Stream": Stream, "CUDAGraph": CUDAGraph, "Event": Event,
                                      "graph": staticmethod(graph), "current_stream": staticmethod(Stream),
                                      "stream": staticmethod(lambda s: contextlib.nullcontext()),
                                      "synchronize": staticmethod(lambda: None)})

    def empty(self, shape, dtype, device):
        return FakeTensor(np.empty(shape))

    def gemm(self, who, x, wt, out, off=0.0):
        def op():
            out.a[...] = x.a @ wt.a + off
            self.clock += self.cost[who]
        if self.capturing is None:
            op()  # the warm-up call outside the capture
        else:
            self.capturing.ops.append(op)
            self.log.append(("captured", who))

    def matmul(self, x, wt, out=None):
        self.gemm("torch", x, wt, out)


SMALL_STEP = (("qkv", 6, 4), ("o", 4, 4), ("gate_up", 8, 4), ("down", 4, 8))  # weights: 26 x 4 in all


@pytest.fixture
def fake_graphs(monkeypatch):
    """measure_decode_graph's torch and hg.matmul faked: hg 25 us a GEMM, torch 27.5 (per step 100 and 110)."""
    fake = FakeGraphTorch({"hg": 25.0, "torch": 27.5})
    monkeypatch.setattr(ms, "framework", lambda name: (fake, None))
    monkeypatch.setattr(ms, "torch_operand", lambda torch, rng, rows, cols, order, dtype, batch=1:
                        FakeTensor(rng.standard_normal((rows, cols))))
    monkeypatch.setattr(ms, "torch_rel_error", lambda c, ref: None if not np.isfinite(c.a).all()
                        else float(np.linalg.norm(c.a - ref.a) / np.linalg.norm(ref.a)))
    monkeypatch.setattr(ms.hg, "matmul", lambda x, wt, out=None: fake.gemm("hg", x, wt, out))
    monkeypatch.setattr(ms.hg, "explain", lambda x, wt, out=None: f"route {wt.shape[1]}")
    run, _ = fake_run({})
    run.warmup, run.iters, run.hbm = 1, 3, 4e12
    return fake, run


def test_a_decode_graph_row_is_gpu_time_per_replayed_step_checked_first(fake_graphs):
    from hgemm_bench.matmul_table import DECODE_GRAPH_COPIES, DECODE_GRAPH_REPLAYS, decode_step

    fake, run = fake_graphs
    (row,) = ms.measure_decode_graph("decode_graph", decode_step(2, SMALL_STEP), run)
    close = functools.partial(pytest.approx, rel=1e-12)
    assert (row["hg_us"], row["torch_us"], row["ratio"]) == close((100.0, 110.0, 1.1))
    assert row["hg_rounds_us"] == [close(100.0)] * 3 and row["round_ratios"] == [close(1.1)] * 3
    assert row["weight_bytes"] == 26 * 4 * 2 and row["hg_gbps"] == close(208 / 100e-6 / 1e9)
    assert row["torch_gbps"] == close(208 / 110e-6 / 1e9) and row["hbm_gbps"] == close(4000.0)
    assert row["hg_hbm_share"] == close(row["hg_gbps"] / 4000.0)
    assert (row["copies"], row["replays"]) == (DECODE_GRAPH_COPIES, DECODE_GRAPH_REPLAYS)
    # one graph per copy and contender, each of the step's four GEMMs, captured (not run)
    assert fake.log.count(("captured", "hg")) == fake.log.count(("captured", "torch")) == 4 * DECODE_GRAPH_COPIES
    # every layer checked after one replay of each graph, before the first event
    first_event = fake.log.index("event")
    assert fake.log[:first_event].count("replay") == 2 * DECODE_GRAPH_COPIES + DECODE_GRAPH_COPIES  # + queued ahead
    assert [(c["layer"], c["copy"]) for c in row["layer_checks"]] == [
        (name, c) for c in range(DECODE_GRAPH_COPIES) for name, _, _ in SMALL_STEP]
    assert all(c["ok"] and c["rel_error"] == 0.0 and c["torch_rel_error"] == 0.0 for c in row["layer_checks"])
    assert row["ok"] and row["route"] == "qkv: route 6 | o: route 4 | gate_up: route 8 | down: route 4"
    assert not run.skipped
    json.dumps(row)  # plain data only
    text = ms.decode_graph_table([row])
    assert "decode step M=2: qkv 6x4" in text and "1.10x" in text and "4000 GB/s" in text
    assert "geomean x torch 1.100x" in text


def test_a_decode_graph_row_with_a_wrong_layer_fails(fake_graphs, monkeypatch):
    from hgemm_bench.matmul_table import decode_step

    fake, run = fake_graphs
    monkeypatch.setattr(ms.hg, "matmul", lambda x, wt, out=None: fake.gemm("hg", x, wt, out,
                                                                           1.0 if wt.shape[1] == 8 else 0.0))
    (row,) = ms.measure_decode_graph("decode_graph", decode_step(2, SMALL_STEP), run)
    assert row["ok"] is False and row["rel_error"] > row["error_bound"]
    assert [c["layer"] for c in row["layer_checks"] if not c["ok"]] == ["gate_up", "gate_up"]
    assert "FAIL" in ms.decode_graph_table([row])
    assert ms.failures({"rows": [row]}) == ["decode_graph " + ms.shape_cell(row)]


def test_a_decode_graph_row_that_cannot_be_captured_is_skipped_with_the_reason(fake_graphs, monkeypatch):
    from hgemm_bench.matmul_table import decode_step

    fake, run = fake_graphs

    def matmul(x, wt, out=None):
        if fake.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        fake.gemm("hg", x, wt, out)

    monkeypatch.setattr(ms.hg, "matmul", matmul)
    (row,) = ms.measure_decode_graph("decode_graph", decode_step(2, SMALL_STEP), run)
    assert row["ratio"] is None and row["hg_us"] is None and "ok" not in row and "event" not in fake.log
    assert row["skipped"] == "CUDA graph capture: RuntimeError: operation not permitted when stream is capturing"
    (skip,) = run.skipped
    assert skip["section"] == "decode_graph" and skip["what"].startswith("decode step M=2: qkv 6x4")
    assert "operation not permitted" in ms.decode_graph_table([row])
    assert ms.judge_target("decode_graph", SECTIONS["decode_graph"], [row["ratio"]])["met"] is None


def test_without_torch_the_decode_graph_section_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(ms, "framework", lambda name: (None, "torch is not installed (ImportError: no torch)"))
    run, _ = fake_run({})
    assert ms.run_section("decode_graph", run) == ([], None)
    assert run.skipped == [{"section": "decode_graph", "what": "the section",
                            "reason": "torch is not installed (ImportError: no torch)"}]


# -- the repeat-call key -----------------------------------------------------------------------------------

def test_repeat_call_key_is_the_key_matmul_looks_up():
    """A fake validated call filed under our key is what hg.matmul runs: so the breakdown reads the
    plan cache exactly as a repeat call does (no GPU: the arrays are never touched)."""
    a, b, c = (hg.DeviceArray(ptr, (64, 64), "f16") for ptr in (1 << 20, 2 << 20, 3 << 20))
    ran = []

    class FakeBound:
        def run(self, pa, pb, out, pc, pbias=0):
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
    for r in (r for r in doc["rows"] if r["section"] == "smallm"):
        # the strongest baseline: GemmEx and the Lt candidates timed, the fastest kept, GemmEx's beside it
        assert r["cublas_variant"].startswith(("GemmEx acc", "Lt algo #")) and r["cublas_us"] <= r["gemmex_us"]
        assert r["baseline_timed"] > len(ms.baseline_accumulations(r["dtype"])), r["baseline_calls"]
        assert any(c["api"] == "Lt" and c["us"] for c in r["baseline_calls"])


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


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 256, 64, "f16", "col", 8), (256, 64, 256, "f16", "row", 8),
                                   (128, 128, 128, "bf16", "row", 4)], ids=["QK^T", "PV", "bf16"])
def test_batched_rows_on_the_gpu_time_cublas_strided_batched_beside_torch(monkeypatch, shape):
    """measure_batched on small attention-like shapes: cublasGemmStridedBatchedEx at each accumulation is
    checked against float64 and timed on the tensors themselves (K^T a transposed view), beside torch.matmul."""
    pytest.importorskip("torch")
    from hgemm_bench.matmul_table import Shape
    from hgemm_rt.timing import L2Flusher

    monkeypatch.setattr(ms, "WALL_REPEAT_S", 0.02)
    M, N, K, dtype, b_order, batch = shape
    run = ms.Run(iters=3, warmup=1, check_rows=0, autotune=False, rng=np.random.default_rng(0), flusher=L2Flusher())
    try:
        (row,) = ms.measure_batched("batched", Shape(M, N, K, dtype, b_order=b_order, batch=batch), run)
    finally:
        run.flusher.close()
    assert row["ok"], row
    assert not run.skipped, run.skipped
    assert row["cublas_variant"].startswith("cublasGemmStridedBatchedEx acc ") and row["cublas_us"] > 0
    assert row["torch_us"] > 0 and row["baseline_us"] == pytest.approx(min(row["cublas_us"], row["torch_us"]))
    assert row["ratio"] == pytest.approx(row["baseline_us"] / row["hg_us"])
    assert [c["label"] for c in row["baseline_calls"]] == [
        f"cublasGemmStridedBatchedEx acc {acc}" for acc in ms.baseline_accumulations(dtype)] + ["torch.matmul"]
    assert all(c["rel_error"] is not None and c["rel_error"] <= c["error_bound"] for c in row["baseline_calls"])
    print(ms.batched_table([row]))


@pytest.mark.gpu
def test_decode_graph_rows_on_the_gpu():
    """measure_decode_graph at a reduced step (weights of ~13 MB: L2 may hold them, this checks the plumbing):
    both graphs captured and replayed, every layer of every copy checked against float64, GPU time per step."""
    pytest.importorskip("torch")
    from hgemm_bench.matmul_table import DECODE_GRAPH_COPIES, decode_step

    step = (("qkv", 1536, 1024), ("o", 1024, 1024), ("gate_up", 3584, 1024), ("down", 1024, 1792))
    run = ms.Run(iters=3, warmup=1, check_rows=0, autotune=False, rng=np.random.default_rng(0), flusher=None)
    (row,) = ms.measure_decode_graph("decode_graph", decode_step(8, step), run)
    assert row["ok"], row["layer_checks"]
    assert not run.skipped, run.skipped
    assert len(row["layer_checks"]) == len(step) * DECODE_GRAPH_COPIES
    assert all(c["rel_error"] is not None and c["torch_rel_error"] is not None for c in row["layer_checks"])
    assert row["hg_us"] > 0 and row["torch_us"] > 0 and row["ratio"] == pytest.approx(row["torch_us"] / row["hg_us"])
    assert len(row["hg_rounds_us"]) == len(row["round_ratios"]) == 3 and row["hbm_gbps"] > 0
    print(ms.decode_graph_table([row]))


@pytest.mark.gpu
def test_decode_graph_section_on_the_gpu(tmp_path, capsys):
    """bench.py --matmul decode_graph at one token count (the full Llama-3 8B layer): the JSON row, exit 0."""
    pytest.importorskip("torch")
    from hgemm_bench.main import main

    out = tmp_path / "m.json"
    rc = main(["--matmul", "decode_graph", "--only", "^decode step M=8:", "--iters", "3", "--warmup", "1",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["section"] == "decode_graph" and row["M"] == 8 and row["ok"] and row["ratio"] > 0
    assert "== decode_graph" in text and "x torch" in text and "HBM bandwidth" in text


# -- --only: a subset of the sections' shapes ------------------------------------------------------


def test_only_selects_shapes_by_their_table_text_and_needs_matmul(capsys):
    from hgemm_bench.matmul_table import selected_shapes
    s = cli.parse_args(["--matmul", "public", "--only", "^8192x8192x8192 f16"])
    assert s.only == "^8192x8192x8192 f16"
    picked = selected_shapes(SECTIONS["public"], s.only)
    assert picked and all(p.cell.startswith("8192x8192x8192 f16 A ") for p in picked)
    assert selected_shapes(SECTIONS["public"], None) == SECTIONS["public"].shapes
    # the text is the tables' (shape_cell of a row of the same shape)
    shape = SECTIONS["fused"].shapes[0]
    row = {"M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "a_order": shape.a_order,
           "b_order": shape.b_order, "epilogue": shape.epilogue}
    assert shape.cell == ms.shape_cell(row) and shape.cell.startswith("bias_gelu ")
    for argv, says in ((["--only", "8192"], "--only applies to --matmul"),
                       (["--matmul", "public", "--only", "("], "not a regular expression"),
                       (["--matmul", "host", "--only", "^nothing like this$"], "matches no shape")):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(argv)
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_section_cut_by_only_runs_its_matching_shapes_and_is_not_judged(monkeypatch, capsys):
    """run_section measures only the matching shapes, and a subset gets no verdict (its target is the section's)."""
    seen = []

    def measure(name, shape, run):
        seen.append(shape)
        return [{"section": name, "M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype,
                 "a_order": shape.a_order, "b_order": shape.b_order, "ratio": 2.0, "route": "r", "ok": True}]
    monkeypatch.setitem(ms.KINDS, SECTIONS["public"].baseline, ms.Kind(measure, lambda rows: "table"))
    run = ms.Run(1, 0, 0, False, np.random.default_rng(0), None, only="^16384x16384x16384 ")
    rows, verdict = ms.run_section("public", run)
    assert seen and all(s.M == s.N == s.K == 16384 for s in seen) and len(rows) == len(seen)
    assert verdict is None and "not judged" in capsys.readouterr().out
    run.only = None
    seen.clear()
    rows, verdict = ms.run_section("public", run)
    assert len(seen) == len(SECTIONS["public"].shapes) and verdict is not None
