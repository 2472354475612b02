"""`python bench.py --matmul [SECTIONS]`: the public `hgemm_rt.matmul` measured against cuBLAS and
torch.matmul, in the same run, on the same buffers.

Sections (matmul_table declares their rows, baseline and target):
  ragged, sweep, smallm, layouts, decode  GPU time of hg.matmul and of the fastest cuBLAS call on the
          same buffers in the same layout: GemmEx at each accumulation (hgemm_rt.cublas.matmul) and the
          cuBLASLt heuristic's top LT_ALGOS candidates at each (hgemm_rt.cublaslt.matmul), each checked
          first (one that fails or is wrong is skipped and counted); GemmEx's best is kept beside it and
          torch.matmul on the same buffers is a cross-check; a section's target is judged where
          set; the memory-bound decode rows show GB/s and the share of the HBM bandwidth a 1 GiB fill
          reaches (the L2 flush leaves dirty lines, whose write-back the next kernel pays: the same for
          cuBLAS, but it lowers both against that reference)
  torch   hg.matmul(x, w.t()) against torch.matmul(x, w.t()) on the same torch tensors (w an (N, K)
          weight, as nn.Linear presents it): GPU time and wall time per call
  batched GPU time of hg.matmul on 3-D torch tensors (attention's Q.K^T and P.V, batches of mid-size
          GEMMs) against the faster of cublasGemmStridedBatchedEx called directly on the same tensors
          (hgemm_rt.cublas.gemm_strided_batched, each accumulation) and torch.matmul; wall time beside
  decode_graph  one decode step's linear layers (shape.layers at M token rows) captured in one torch
          CUDA graph with hg.matmul(x, w.t(), out=y) and in another with torch.matmul on the same
          tensors, every layer checked after one replay; GPU time per step of replays back to back
          (no L2 flush: consecutive steps, layers of distinct weights cycled), hg and torch in
          alternating rounds; GB/s of the weights beside the HBM bandwidth
  host    wall time per call at 64^3 and 16 x 4096 x 4096 per input kind (DeviceArray, torch, CuPy, a
          Matmul object, CUDA-graph replay) beside torch/CuPy's own matmul, one repeat call split into
          its parts, and the calls a model makes (LAYER_CALLS: ht.linear, ht.mm, hg.matmul on a new
          activation every call) beside F.linear, torch.mm and torch.matmul called the same way

Protocol: random N(0, 1) data; every result is verified before it is timed (NaN-filled
output, float64 reference; the error bound is hgemm_rt.numerics.error_bound over the cuBLAS/torch error
on the same inputs); GPU time = CUDA events, L2 flushed before every run, the timed launches queued
behind a busy GPU (time_fn queue_ahead) so that no host cost leaks in, the median; wall time = n calls
back to back with one synchronisation at the end, the best of WALL_REPEATS repetitions.
"""
from __future__ import annotations

import datetime as _dt
import functools
import importlib
import inspect
import itertools
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import hgemm_rt as hg
from hgemm_rt import cublas, cublaslt
from hgemm_rt.api import call_identity
from hgemm_rt.problem import ACCUMULATE, ITEMSIZE
from hgemm_rt.numerics import error_bound, reference, rel_error

from .kernel_checks import baseline_acc, random_operands
from hgemm_rt.timing import L2Flusher, time_fn

from .analysis import geomean
from .devinfo import ClockSampler, clocks, device_record, header_lines
from .matmul_table import (DECODE_GRAPH_COPIES, DECODE_GRAPH_REPLAYS, GRAPH_CALLS, LAYER_CALLS, LAYER_POOL, LT_ALGOS,
                           SECTIONS, WALL_MIN_CALLS, WALL_REPEAT_S, WALL_REPEATS, HostCall, LayerCall, Section, Shape,
                           selected_shapes, shape_text)
from .measure import ShapeInputs, checked_launch, timed_once
from .results import MATMUL_SCHEMA
from .steady import Contender, Protocol, interleave
from .kernel_names import kernel_record
from .tables import STEADY_HEADERS, steady_cells, tabulate

TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


# ---------------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def framework(name: str) -> tuple[Any, str | None]:
    """(torch or cupy, None), or (None, why it cannot be used): neither is a dependency."""
    try:
        mod = importlib.import_module(name)
    except Exception as exc:  # ImportError, or a broken install's OSError
        return None, f"{name} is not installed ({type(exc).__name__}: {exc})"
    if not mod.cuda.is_available():
        return None, f"{name} sees no CUDA GPU"
    return mod, None


def framework_versions() -> dict[str, str | None]:
    return {name: framework(name)[0].__version__ if framework(name)[0] else None for name in ("torch", "cupy")}


@dataclass
class Run:
    """What every section shares: the options, the L2 flusher, the random source, the steady protocol
    and its clock sampler where asked for, and what was skipped."""
    iters: int
    warmup: int
    check_rows: int
    autotune: bool
    rng: np.random.Generator
    flusher: L2Flusher
    steady: Protocol | None = None
    sampler: ClockSampler | None = None
    skipped: list[dict] = field(default_factory=list)
    hbm: float | None = None  # measured HBM bandwidth, bytes/s (hbm_bytes_per_s)
    only: str | None = None  # --only: the regular expression a shape's table text must match (None: every shape)
    # names the kernels one call launches (kernel_names.kernel_record); None: the rows do not name them
    kernel_names: Callable[[Callable[[], Any]], dict] | None = kernel_record

    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth as a 1 GiB fill measures it, once per run: the reference of memory-bound rows."""
        if self.hbm is None:
            with hg.empty((HBM_PROBE_BYTES // 4,), "f32") as buf:
                t = time_fn(lambda: buf.fill_bytes(0), warmup=2, iters=10)
            self.hbm = HBM_PROBE_BYTES / (t.median_ms * 1e-3)
        return self.hbm

    def gpu_us(self, fn: Callable[[], Any], stream: Any = None) -> float:
        """Median GPU microseconds of fn: L2 flushed before each run, the runs queued behind a busy GPU."""
        t = time_fn(fn, warmup=self.warmup, iters=self.iters, stream=stream, flush=self.flusher, queue_ahead=True)
        return t.median_ms * 1e3

    def skip(self, section: str, what: str, reason: str) -> None:
        print(f"  skipped {what}: {reason}")
        self.skipped.append({"section": section, "what": what, "reason": reason})


HBM_PROBE_BYTES = 1 << 30


def calls_per_repeat(seconds_per_call: float) -> int:
    """Calls in one wall-time repetition: about WALL_REPEAT_S long, at least WALL_MIN_CALLS."""
    return max(WALL_MIN_CALLS, math.ceil(WALL_REPEAT_S / max(seconds_per_call, 1e-9)))


def back_to_back_s(fn: Callable[[], Any], sync: Callable[[], Any], n: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return time.perf_counter() - t0


def wall_us(fn: Callable[[], Any], sync: Callable[[], Any]) -> float:
    """Wall microseconds per call as a user sees them: n calls back to back with no sync between, one
    at the end, the best of WALL_REPEATS. A warm-up call and a probe of WALL_MIN_CALLS size n."""
    fn()
    probe = back_to_back_s(fn, sync, WALL_MIN_CALLS) / WALL_MIN_CALLS
    n = calls_per_repeat(probe)
    return min(back_to_back_s(fn, sync, n) for _ in range(WALL_REPEATS)) / n * 1e6


def tflops(shape: Shape, us: float | None) -> float | None:
    return 2.0 * shape.batch * shape.M * shape.N * shape.K / (us * 1e-6) / 1e12 if us else None


def ratio(baseline_us: float | None, ours_us: float | None) -> float | None:
    """baseline / ours: above 1 means hg.matmul is faster."""
    return baseline_us / ours_us if baseline_us and ours_us else None


def verdict_of(err: float | None, bound: float) -> dict:
    return {"rel_error": err, "error_bound": bound, "ok": err is not None and err <= bound}


# -- against cuBLAS -----------------------------------------------------------------------------------

def baseline_accumulations(dtype: str) -> tuple[str, ...]:
    """The cuBLAS variants to take the best of: every accumulation matmul accepts for the dtype, but
    not TF32 (matmul's default fp32 path is exact fp32, so its baseline is too)."""
    return tuple(a for a in ACCUMULATE[dtype] if a != "tf32")


@dataclass
class BaselineCall:
    """One contender of the baseline on the row's buffers: a GemmEx accumulation, a cuBLASLt heuristic
    candidate, a cublasGemmStridedBatchedEx accumulation (the batched section), or torch.matmul (in the
    sections against cuBLAS a cross-check: checked and timed, never the baseline). `reason` says why it
    was skipped (it failed, its result was wrong, or the problem is not one such call)."""
    label: str
    api: str  # "GemmEx", "Lt", "StridedBatched" or "torch"
    acc: str | None
    run: Callable[[], Any] | None
    config: dict | None = None  # an Lt candidate's configuration (cublaslt.Candidate.record)
    rel_error: float | None = None
    error_bound: float | None = None
    us: float | None = None
    reason: str | None = None

    def record(self) -> dict:
        return {"label": self.label, "api": self.api, "acc": self.acc,
                **({"config": self.config} if self.config else {}), "rel_error": self.rel_error,
                "error_bound": self.error_bound, "us": self.us, "skipped": self.reason}


CUBLAS_APIS = ("GemmEx", "Lt")  # the baseline: the fastest of these
# the plain cuBLAS calls: each held to the static error bound, and setting the bound of the other calls
# (and of hg.matmul) at its accumulation
REFERENCE_APIS = ("GemmEx", "StridedBatched")


def baseline_calls(A: Any, B: Any, C: Any, dtype: str, algos: int = LT_ALGOS) -> list[BaselineCall]:
    """GemmEx at every baseline accumulation, then the cuBLASLt heuristic's top `algos` candidates at
    each (a heuristic that fails is one skipped entry)."""
    calls = [BaselineCall(f"GemmEx acc {acc}", "GemmEx", acc, lambda acc=acc: cublas.matmul(A, B, C, acc=acc))
             for acc in baseline_accumulations(dtype)]
    for acc in baseline_accumulations(dtype):
        try:
            found = cublaslt.candidates(A, B, C, acc=acc, algos=algos)
        except hg.HgemmError as exc:  # nvmath or cuBLASLt missing, or no algorithm for this problem
            calls.append(BaselineCall(f"Lt acc {acc}", "Lt", acc, None, reason=f"heuristic: {exc}"))
            continue
        calls += [BaselineCall(f"{cand.label} acc {acc}", "Lt", acc,
                               lambda acc=acc, k=cand.index: cublaslt.matmul(A, B, C, acc=acc, algo=k, algos=algos),
                               config=cand.record()) for cand in found]
    return calls


def torch_cross_check(A: Any, B: Any, C: Any) -> BaselineCall | None:
    """torch.matmul(A, B, out=C) on the same buffers (DLPack views), or None without torch."""
    torch = framework("torch")[0]
    if torch is None:
        return None
    try:
        ta, tb, tc = (torch.from_dlpack(x) for x in (A, B, C))
    except Exception as exc:  # a torch that refuses the views: the cross-check says why
        return BaselineCall("torch.matmul", "torch", None, None, reason=f"from_dlpack: {type(exc).__name__}: {exc}")
    return BaselineCall("torch.matmul", "torch", None, lambda: torch.matmul(ta, tb, out=tc))


def check_baselines(calls: list[BaselineCall], K: int, dtype: str,
                    error_of: Callable[[Callable[[], Any]], float | None]) -> dict[str, float]:
    """One checked launch of every call (error_of: run it into NaN-filled C, give its relative error
    against float64, None for NaN/Inf in C); a call that raises or exceeds its bound gets its `reason`.
    The REFERENCE_APIS calls (first in `calls`) are held to the static bound, the others to the bound
    that the reference call of their accumulation sets on the same inputs. Returns {acc: the reference
    call's error}."""
    reference: dict[str, float] = {}
    for call in calls:
        if call.reason is not None:
            continue
        acc = call.acc or ACCUMULATE[dtype][0]
        try:
            err = error_of(call.run)
        except (hg.HgemmError, RuntimeError) as exc:
            call.reason = f"{type(exc).__name__}: {exc}"
            continue
        call.rel_error = err
        is_reference = call.api in REFERENCE_APIS
        call.error_bound = error_bound(dtype, acc, dtype, K, None if is_reference else reference.get(acc))
        if err is None or err > call.error_bound:
            call.reason = "NaN/Inf in C" if err is None else f"rel err {err:.2e} > {call.error_bound:.2e}"
        elif is_reference:
            reference[acc] = err
    return reference


def group_figures(mine: list[float], members: list[tuple[str, list[float]]]
                  ) -> tuple[float | None, str | None, float | None, list[float]]:
    """(us, label, ratio, per-round ratios) of the fastest of `members` (label, ms per round) against
    hg.matmul's ms per round: each round's fastest member, the median over rounds; the label is the
    member with the lowest median. With one round (the default protocol) that is simply the fastest."""
    if not members:
        return None, None, None, []
    best = [min(ms[i] for _, ms in members) for i in range(len(mine))]
    rounds = [b / m for b, m in zip(best, mine)]
    label = min(members, key=lambda lm: statistics.median(lm[1]))[0]
    return statistics.median(best) * 1e3, label, statistics.median(rounds), rounds


# (group, the APIs of its members): each group's fastest call is reported as "<group>_us", "_variant", "_ratio"
CUBLAS_GROUPS = (("cublas", CUBLAS_APIS), ("gemmex", ("GemmEx",)), ("torch", ("torch",)))
# the batched section's: its baseline is the faster of cuBLAS strided-batched and torch.matmul
BATCHED_GROUPS = (("baseline", ("StridedBatched", "torch")), ("cublas", ("StridedBatched",)), ("torch", ("torch",)))


def time_vs_cublas(run: Run, ours: Callable[[], Any], calls: list[BaselineCall], why: str = "", *,
                   stream: Any = None, groups: tuple = CUBLAS_GROUPS, judged: str = "cublas") -> dict:
    """GPU microseconds of hg.matmul and of every call that passed its check (a call that fails while
    timed gets its `reason`), all on `stream`, and per group its fastest call: by default the fastest
    GemmEx or cuBLASLt call ("cublas_*", or `why` there is none), beside the fastest GemmEx ("gemmex_*")
    and torch.matmul ("torch_*"). The `judged` group's ratio is the row's "ratio", and "<judged>_kernel" names
    the kernels its fastest call launches (Run.kernel_names, one more call of it). With the steady
    protocol all run in interleaved rounds, a group's time is the median over the rounds of its fastest
    member, its ratio the median of the rounds' ratios, and "steady" keeps the rounds."""
    live = [c for c in calls if c.reason is None]
    if run.steady is None:
        mine = [run.gpu_us(ours, stream) / 1e3]
        per_call: dict[int, list[float]] = {}
        for i, call in enumerate(live):
            try:
                per_call[i] = [run.gpu_us(call.run, stream) / 1e3]
            except (hg.HgemmError, RuntimeError) as exc:
                call.reason = f"while timed: {type(exc).__name__}: {exc}"
        steady = None
    else:
        contenders = [Contender(fn, timed_once(fn), stream) for fn in (ours, *(c.run for c in live))]
        interleave(contenders, run.steady, run.flusher, run.sampler)
        if contenders[0].error:
            raise RuntimeError(contenders[0].error)
        mine = contenders[0].ms
        per_call = {}
        for i, (call, cont) in enumerate(zip(live, contenders[1:])):
            if cont.error:
                call.reason = f"while timed: {cont.error}"
            else:
                per_call[i] = cont.ms
        steady = contenders[0].record()
    for i, ms in per_call.items():
        live[i].us = statistics.median(ms) * 1e3
    out: dict[str, Any] = {"hg_us": statistics.median(mine) * 1e3}
    for name, apis in groups:
        members = [(live[i].label, ms) for i, ms in per_call.items() if live[i].api in apis]
        us, label, r, rounds = group_figures(mine, members)
        out.update({f"{name}_us": us, f"{name}_variant": label, f"{name}_ratio": r})
        if name == judged and steady is not None:
            steady = {**steady, "ratio": rounds}
    out["ratio"] = out.pop(f"{judged}_ratio")
    winner = next((c for c in live if c.label == out[f"{judged}_variant"] and c.us is not None), None)
    if winner is not None and run.kernel_names is not None:  # what the baseline runs: tile, cluster, schedule
        out[f"{judged}_kernel"] = run.kernel_names(winner.run)
    if out["cublas_variant"] is None:
        out["cublas_variant"] = why or "no cuBLAS call passed its check"
    if steady is not None:
        out["steady"] = steady
    return out


def unavailable(calls: list[BaselineCall], apis: tuple[str, ...] = CUBLAS_APIS) -> str:
    """Why no call of `apis` (GemmEx or cuBLASLt) is left: the first reason given."""
    reasons = [c.reason for c in calls if c.api in apis and c.reason]
    return f"cuBLAS unavailable: {reasons[0]}" if reasons else ""


def autotune(a: Any, b: Any, c: Any, shape: Shape) -> None:
    """--autotune: time the shape's candidate routes first (the tuning cache then holds the fastest); the best
    three printed."""
    tuned = hg.autotune(a, b, c)
    print(f"  autotune {shape.label}: " + "; ".join(
        f"{r['route'].kernel}{' (C^T)' if r['route'].transpose else ''} {r['us']:.1f} us" for r in tuned[:3]))


def measure_vs_cublas(section: str, shape: Shape, run: Run) -> list[dict]:
    M, N, K, dtype = shape.M, shape.N, shape.K, shape.dtype
    inp = ShapeInputs(M, N, K, run.rng, run.check_rows)
    calls: list[BaselineCall] = []
    try:
        # B column-major is the TN storage (an N x K upload) seen transposed
        A, Bs = inp.operands("NN" if shape.b_order == "row" else "TN", dtype, shape.a_order)
        B = Bs if shape.b_order == "row" else Bs.T
        C = inp.output(dtype)
        if run.autotune:
            autotune(A, B, C, shape)
        route = hg.explain(A, B, C)
        _, err = checked_launch(lambda: hg.matmul(A, B, C), C, inp, dtype)
        acc = ACCUMULATE[dtype][0]  # what matmul accumulates in by default
        calls = baseline_calls(A, B, C, dtype)
        calls += [c for c in (torch_cross_check(A, B, C),) if c is not None]
        gemmex_err = check_baselines(calls, K, dtype, lambda fn: checked_launch(fn, C, inp, dtype)[1])
        cublas_err = gemmex_err.get(baseline_acc(dtype, acc))  # None: the static bound applies
        timed = time_vs_cublas(run, lambda: hg.matmul(A, B, C), calls, unavailable(calls))
    finally:
        records = [c.record() for c in calls]
        calls.clear()  # torch's DLPack views of the buffers go before the buffers
        inp.close()
    skipped = [r for r in records if r["skipped"] and r["api"] in CUBLAS_APIS]
    skip_calls(run, section, shape, records)
    row = {"section": section, "M": M, "N": N, "K": K, "dtype": dtype, "a_order": shape.a_order,
           "b_order": shape.b_order, "route": route, **timed, "hg_tflops": tflops(shape, timed["hg_us"]),
           "cublas_tflops": tflops(shape, timed["cublas_us"]), "gemmex_tflops": tflops(shape, timed["gemmex_us"]),
           "cublas_rel_error": cublas_err, "baseline_timed": sum(1 for r in records if r["us"] is not None
                                                                 and r["api"] in CUBLAS_APIS),
           "baseline_skipped": len(skipped), "baseline_calls": records,
           "checked_rows": int(len(inp.rows)), **verdict_of(err, error_bound(dtype, acc, dtype, K, cublas_err))}
    if SECTIONS[section].bandwidth:
        hbm = run.hbm_bytes_per_s()
        row.update(hg_gbps=gbps(shape, timed["hg_us"]), cublas_gbps=gbps(shape, timed["cublas_us"]),
                   hbm_gbps=hbm / 1e9, hg_hbm_share=gbps(shape, timed["hg_us"]) * 1e9 / hbm)
    return [row]


def skip_calls(run: Run, section: str, shape: Shape, records: list[dict]) -> None:
    """Every baseline call of the row that was skipped goes to the run's skipped list, with its reason."""
    for r in records:
        if r["skipped"]:
            run.skip(section, f"{shape.label} {shape.dtype} A {shape.a_order} B {shape.b_order}: {r['label']}",
                     r["skipped"])


def gbps(shape: Shape, us: float | None) -> float | None:
    """GB/s of the operands' and the result's bytes, each read or written once (the floor of any GEMM's traffic)."""
    nbytes = (shape.M * shape.K + shape.K * shape.N + shape.M * shape.N) * ITEMSIZE[shape.dtype]
    return nbytes / (us * 1e-6) / 1e9 if us else None


# -- against torch.matmul -----------------------------------------------------------------------------

def torch_operand(torch: Any, rng: np.random.Generator, rows: int, cols: int, order: str, dtype: str,
                  batch: int = 1) -> Any:
    """A rows x cols N(0, 1) CUDA tensor (batch > 1: `batch` of them, 3-D); column-major is the
    transpose of a cols x rows tensor (w.t(), or k.transpose(-1, -2) as attention takes K^T)."""
    shape = (rows, cols) if order == "row" else (cols, rows)
    shape = shape if batch == 1 else (batch, *shape)
    t = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to("cuda", getattr(torch, TORCH_DTYPES[dtype]))
    return t if order == "row" else t.transpose(-1, -2)


def torch_rel_error(c: Any, ref: Any) -> float | None:
    """||c - ref|| / ||ref|| in float64 on the GPU; None where c holds NaN/Inf (an unwritten element)."""
    if not bool(c.isfinite().all()):
        return None
    return float((c.double() - ref).norm() / ref.norm())


def measure_vs_torch(section: str, shape: Shape, run: Run) -> list[dict]:
    torch = framework("torch")[0]
    M, N, K, dtype = shape.M, shape.N, shape.K, shape.dtype
    x = torch_operand(torch, run.rng, M, K, shape.a_order, dtype, shape.batch)
    w = torch_operand(torch, run.rng, K, N, shape.b_order, dtype, shape.batch)
    ref = x.double() @ w.double()
    c = torch.full(tuple(ref.shape), float("nan"), dtype=x.dtype, device=x.device)  # an element left unwritten fails
    hg.matmul(x, w, out=c)
    err = torch_rel_error(c, ref)
    torch_err = torch_rel_error(torch.matmul(x, w), ref)
    acc = ACCUMULATE[dtype][0]
    ours, theirs = (lambda: hg.matmul(x, w)), (lambda: torch.matmul(x, w))
    stream = torch.cuda.current_stream().cuda_stream  # where both run: the events and flushes go there too
    gpu = [run.gpu_us(f, stream) for f in (ours, theirs)]
    wall = [wall_us(f, torch.cuda.synchronize) for f in (ours, theirs)]
    return [{"section": section, "M": M, "N": N, "K": K, "batch": shape.batch, "dtype": dtype, "a_order": shape.a_order,
             "b_order": shape.b_order, "route": hg.explain(x, w), "hg_gpu_us": gpu[0], "torch_gpu_us": gpu[1],
             "gpu_ratio": ratio(gpu[1], gpu[0]), "hg_tflops": tflops(shape, gpu[0]),
             "torch_tflops": tflops(shape, gpu[1]), "hg_wall_us": wall[0], "torch_wall_us": wall[1],
             "wall_ratio": ratio(wall[1], wall[0]), "ratio": ratio(wall[1], wall[0]), "torch_rel_error": torch_err,
             **verdict_of(err, error_bound(dtype, acc, dtype, K, torch_err))}]


# -- batched: against cuBLAS strided-batched and torch.matmul ---------------------------------------------

STRIDED_BATCHED = "cublasGemmStridedBatchedEx"


def strided_batched_calls(x: Any, w: Any, c: Any, dtype: str, stream: int) -> list[BaselineCall]:
    """cublasGemmStridedBatchedEx (hgemm_rt.cublas.gemm_strided_batched) at every baseline accumulation
    on the torch tensors' memory: their pointers, per-matrix leading dimensions and batch strides (a
    transposed view such as k.transpose(-1, -2) is a transpose flag, no copy). Where the product is
    not one strided batch (batch dimensions that do not step evenly), one skipped entry says why."""
    try:
        args = cublas.batched_operands(x, w, c, STRIDED_BATCHED).arguments()
    except hg.HgemmError as exc:
        return [BaselineCall(STRIDED_BATCHED, "StridedBatched", None, None, reason=f"{type(exc).__name__}: {exc}")]
    return [BaselineCall(f"{STRIDED_BATCHED} acc {acc}", "StridedBatched", acc,
                         lambda acc=acc: cublas.gemm_strided_batched(**args, acc=acc, stream=stream))
            for acc in baseline_accumulations(dtype)]


def torch_error_of(c: Any, ref: Any) -> Callable[[Callable[[], Any]], float | None]:
    """check_baselines' check on torch tensors: fn() writes c, filled with NaN first, on torch's stream."""
    def error_of(fn: Callable[[], Any]) -> float | None:
        c.fill_(float("nan"))
        fn()
        return torch_rel_error(c, ref)
    return error_of


def measure_batched(section: str, shape: Shape, run: Run) -> list[dict]:
    """hg.matmul on 3-D torch tensors against the faster of cuBLAS strided-batched (called directly,
    each accumulation) and torch.matmul on the same tensors, all writing the same output: GPU time
    judged, wall time per call of hg.matmul and torch.matmul beside it."""
    torch = framework("torch")[0]
    M, N, K, dtype = shape.M, shape.N, shape.K, shape.dtype
    x = torch_operand(torch, run.rng, M, K, shape.a_order, dtype, shape.batch)
    w = torch_operand(torch, run.rng, K, N, shape.b_order, dtype, shape.batch)
    ref = x.double() @ w.double()
    c = torch.empty(tuple(ref.shape), dtype=x.dtype, device=x.device)
    if run.autotune:
        autotune(x, w, c, shape)
    stream = torch.cuda.current_stream().cuda_stream  # where all of them run: the events and flushes go there too
    error_of = torch_error_of(c, ref)
    ours = lambda: hg.matmul(x, w, out=c)  # noqa: E731
    err = error_of(ours)
    acc = ACCUMULATE[dtype][0]
    torch_call = BaselineCall("torch.matmul", "torch", None, lambda: torch.matmul(x, w, out=c))
    calls = strided_batched_calls(x, w, c, dtype, stream) + [torch_call]
    cublas_err = check_baselines(calls, K, dtype, error_of).get(baseline_acc(dtype, acc))
    torch_err = torch_call.rel_error if torch_call.reason is None else None
    timed = time_vs_cublas(run, ours, calls, unavailable(calls, ("StridedBatched",)), stream=stream,
                           groups=BATCHED_GROUPS, judged="baseline")
    wall = [wall_us(f, torch.cuda.synchronize) for f in (lambda: hg.matmul(x, w), lambda: torch.matmul(x, w))]
    records = [call.record() for call in calls]
    skip_calls(run, section, shape, records)
    bound_err = cublas_err if cublas_err is not None else torch_err  # cuBLAS's error sets the bound where it ran
    return [{"section": section, "M": M, "N": N, "K": K, "batch": shape.batch, "dtype": dtype, "a_order": shape.a_order,
             "b_order": shape.b_order, "route": hg.explain(x, w, out=c), **timed,
             **{f"{who}_tflops": tflops(shape, timed[f"{who}_us"]) for who in ("hg", "baseline", "cublas", "torch")},
             "hg_wall_us": wall[0], "torch_wall_us": wall[1], "wall_ratio": ratio(wall[1], wall[0]),
             "cublas_rel_error": cublas_err, "torch_rel_error": torch_err, "baseline_calls": records,
             **verdict_of(err, error_bound(dtype, acc, dtype, K, bound_err))}]


# -- fused epilogues against torch eager ------------------------------------------------------------------

def fused_workload(torch: Any, shape: Shape, run: Run) -> tuple[Callable[[], Any], Callable[[], Any], Any, Any, str]:
    """(ours, torch eager, our result, the float64 reference, our plans) of one row of an eager section."""
    F = torch.nn.functional
    M, N, K, dtype = shape.M, shape.N, shape.K, shape.dtype
    x = torch_operand(torch, run.rng, M, K, "row", dtype)
    if shape.epilogue == "bias_gelu":
        w = torch_operand(torch, run.rng, N, K, "row", dtype) / K ** 0.5  # nn.Linear's weight, N x K
        b = torch_operand(torch, run.rng, 1, N, "row", dtype).reshape(N)
        ref = F.gelu(x.double() @ w.double().t() + b.double())
        out = hg.matmul(x, w.t(), bias=b, activation="gelu")
        return (lambda: hg.matmul(x, w.t(), bias=b, activation="gelu")), (lambda: F.gelu(F.linear(x, w, b))), out, \
            ref, hg.explain(x, w.t(), bias=b, activation="gelu")
    f = N // 2
    w1 = torch_operand(torch, run.rng, N, K, "row", dtype) / K ** 0.5  # [gate; up] projections, 2F x H
    w2 = torch_operand(torch, run.rng, K, f, "row", dtype) / f ** 0.5  # down projection, H x F
    x64 = x.double()
    g, u = (x64 @ w1.double().t()).chunk(2, dim=-1)
    ref = x64 + (F.silu(g) * u) @ w2.double().t()
    y = x.clone()  # the residual stream: the down GEMM adds into it (beta = 1)

    def ours():
        h = hg.matmul(x, w1.t(), activation="swiglu")
        return hg.matmul(h, w2.t(), out=y, beta=1.0)

    def eager():
        gate, up = F.linear(x, w1).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, w2)

    result = ours().clone()
    y.copy_(x)  # timed calls keep adding into y: its values do not feed back into the work
    h = hg.matmul(x, w1.t(), activation="swiglu")
    plans = f"{hg.explain(x, w1.t(), activation='swiglu')} | {hg.explain(h, w2.t(), out=y, beta=1.0)}"
    return ours, eager, result, ref, plans


def measure_vs_eager(section: str, shape: Shape, run: Run) -> list[dict]:
    torch = framework("torch")[0]
    ours, eager, out, ref, plans = fused_workload(torch, shape, run)
    err = torch_rel_error(out, ref)
    torch_err = torch_rel_error(eager(), ref)
    stream = torch.cuda.current_stream().cuda_stream
    gpu = [run.gpu_us(fn, stream) for fn in (ours, eager)]
    wall = [wall_us(fn, torch.cuda.synchronize) for fn in (ours, eager)]
    M, N, K, dtype = shape.M, shape.N, shape.K, shape.dtype
    flop = 2.0 * M * N * K + (2.0 * M * (N // 2) * K if shape.epilogue == "mlp" else 0.0)
    bound = error_bound(dtype, "f32", dtype, K, torch_err) * (2 if shape.epilogue == "mlp" else 1)
    gr = ratio(gpu[1], gpu[0])
    return [{"section": section, "M": M, "N": N, "K": K, "batch": 1, "dtype": dtype, "a_order": "row",
             "b_order": "col", "epilogue": shape.epilogue, "route": plans, "hg_gpu_us": gpu[0], "torch_gpu_us": gpu[1],
             "gpu_ratio": gr,
             "hg_tflops": flop / (gpu[0] * 1e-6) / 1e12, "torch_tflops": flop / (gpu[1] * 1e-6) / 1e12,
             "hg_wall_us": wall[0], "torch_wall_us": wall[1], "wall_ratio": ratio(wall[1], wall[0]),
             "ratio": gr, "torch_rel_error": torch_err, **verdict_of(err, bound)}]


# -- grouped GEMM against a loop of cuBLAS calls and torch._grouped_mm -------------------------------------

def expert_sizes(rng: np.random.Generator, tokens: int, experts: int, routing: str) -> np.ndarray:
    """Tokens per expert: an even split, or Dirichlet(0.3) shares (a few hot experts, many cold or empty)."""
    if routing == "uniform":
        return np.full(experts, tokens // experts) + (np.arange(experts) < tokens % experts)
    return rng.multinomial(tokens, rng.dirichlet(np.full(experts, 0.3)))


def measure_grouped(section: str, shape: Shape, run: Run) -> list[dict]:
    torch = framework("torch")[0]
    T, N, K, E, dtype = shape.M, shape.N, shape.K, shape.batch, shape.dtype
    sizes = expert_sizes(run.rng, T, E, shape.routing)
    ends_host = np.cumsum(sizes)
    ends = torch.tensor(ends_host, dtype=torch.int32, device="cuda")
    x = torch_operand(torch, run.rng, T, K, "row", dtype)
    w = torch_operand(torch, run.rng, E * N, K, "row", dtype).reshape(E, N, K) / K ** 0.5  # nn.Linear stacks
    wt = w.transpose(-1, -2)  # (E, K, N), column-major per expert
    out = torch.full((T, N), float("nan"), dtype=x.dtype, device="cuda")
    bounds = list(zip([0, *ends_host[:-1]], ends_host))
    hg.grouped_matmul(x, wt, out, offsets=ends)
    ref = torch.empty((T, N), dtype=torch.float64, device="cuda")
    for e, (s, t) in enumerate(bounds):
        ref[s:t] = x[s:t].double() @ wt[e].double()
    err = torch_rel_error(out, ref)

    def loop():
        for e, (s, t) in enumerate(bounds):
            if t > s:
                torch.mm(x[s:t], wt[e], out=out[s:t])

    loop()
    loop_err = torch_rel_error(out, ref)
    ours = lambda: hg.grouped_matmul(x, wt, out, offsets=ends)  # noqa: E731
    stream = torch.cuda.current_stream().cuda_stream
    gpu = {"hg": run.gpu_us(ours, stream), "loop": run.gpu_us(loop, stream)}
    wall = {"hg": wall_us(ours, torch.cuda.synchronize), "loop": wall_us(loop, torch.cuda.synchronize)}
    grouped_mm = getattr(torch, "_grouped_mm", None)
    gm_err = None
    if grouped_mm is not None:
        try:
            gm_err = torch_rel_error(grouped_mm(x, wt, offs=ends), ref)
            gpu["grouped_mm"] = run.gpu_us(lambda: grouped_mm(x, wt, offs=ends), stream)
            wall["grouped_mm"] = wall_us(lambda: grouped_mm(x, wt, offs=ends), torch.cuda.synchronize)
        except RuntimeError as exc:  # (a build or GPU without it)
            run.skip(section, f"torch._grouped_mm at {shape.label}", str(exc).splitlines()[0])
    flop = 2.0 * T * N * K
    row = {"section": section, "M": T, "N": N, "K": K, "batch": E, "dtype": dtype, "a_order": "row", "b_order": "col",
           "routing": shape.routing, "experts_empty": int((sizes == 0).sum()), "largest_expert": int(sizes.max()),
           "route": "grouped_matmul: persistent gemm_fused_wgmma, contiguous groups",
           "hg_gpu_us": gpu["hg"], "loop_gpu_us": gpu["loop"], "grouped_mm_gpu_us": gpu.get("grouped_mm"),
           "hg_wall_us": wall["hg"], "loop_wall_us": wall["loop"], "grouped_mm_wall_us": wall.get("grouped_mm"),
           "hg_tflops": flop / (gpu["hg"] * 1e-6) / 1e12, "ratio": ratio(gpu["loop"], gpu["hg"]),
           "grouped_mm_ratio": ratio(gpu.get("grouped_mm"), gpu["hg"]), "loop_rel_error": loop_err,
           "grouped_mm_rel_error": gm_err, **verdict_of(err, error_bound(dtype, "f32", dtype, K, loop_err))}
    return [row]


def grouped_table(rows: list[dict]) -> str:
    table = tabulate([[shape_cell(r), f"{r['experts_empty']} / {r['largest_expert']}", fmt(r["hg_gpu_us"]),
                       fmt(r["hg_tflops"]), fmt(r["loop_gpu_us"]), fmt(r["ratio"], ".2f", "x"),
                       fmt(r["grouped_mm_gpu_us"]), fmt(r["grouped_mm_ratio"], ".2f", "x"), fmt(r["hg_wall_us"]),
                       fmt(r["loop_wall_us"]), fmt(r["grouped_mm_wall_us"]), fmt_err(r)] for r in rows],
                     headers=["shape", "empty / largest expert", "GPU us hg", "TFLOPS", "cuBLAS loop", "x loop",
                              "_grouped_mm", "x _grouped_mm", "wall us hg", "loop", "_grouped_mm", "rel err"],
                     disable_numparse=True)
    return (f"{table}\ngeomean: x loop {fmt(geomean([r['ratio'] for r in rows]), '.3f', 'x')}, x torch._grouped_mm "
            f"{fmt(geomean([r['grouped_mm_ratio'] for r in rows if r['grouped_mm_ratio']]), '.3f', 'x')} (GPU time)")


# -- host cost per call ---------------------------------------------------------------------------------

def host_operands(kind: str, a: np.ndarray, b: np.ndarray) -> tuple[Any, Any, Any]:
    """a, b uploaded and an M x N output, as the input kind's own arrays."""
    shape = (a.shape[0], b.shape[1])
    if kind == "DeviceArray":
        return hg.to_device(a), hg.to_device(b), hg.empty(shape, a.dtype)
    mod = framework(kind)[0]
    if kind == "torch":
        ta, tb = mod.from_numpy(a).cuda(), mod.from_numpy(b).cuda()
        return ta, tb, ta.new_empty(shape)
    return mod.asarray(a), mod.asarray(b), mod.empty(shape, dtype=a.dtype)


def capture_graph(torch: Any, warm_up: Callable[[], Any], body: Callable[[], Any]) -> Any:
    """A torch CUDA graph of body(), captured on a side stream after warm_up() there outside the capture
    (which makes hg.matmul's executions for that stream, and torch's cuBLAS workspace)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm_up()
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        body()
    return graph


def captured_graph(torch: Any, a: Any, b: Any, c: Any) -> Any:
    """A torch CUDA graph of GRAPH_CALLS hg.matmul calls, captured on a side stream after one call there."""
    def calls():
        for _ in range(GRAPH_CALLS):
            hg.matmul(a, b, c)
    return capture_graph(torch, lambda: hg.matmul(a, b, c), calls)


def hg_call(form: str, a: Any, b: Any, c: Any) -> tuple[Callable[[], Any], int]:
    """(fn, matmul calls one fn() makes) for a HostCall form."""
    if form == "plan":
        mm = hg.Matmul(a, b, c)
        return (lambda: mm(a, b, c)), 1
    if form == "graph":
        return captured_graph(framework("torch")[0], a, b, c).replay, GRAPH_CALLS
    return matmul_call(hg, form, a, b, c), 1


def matmul_call(module: Any, form: str, a: Any, b: Any, c: Any) -> Callable[[], Any]:
    """module.matmul(a, b, out=c) ("out") or module.matmul(a, b) ("new"): hgemm_rt, torch and CuPy alike."""
    return (lambda: module.matmul(a, b, out=c)) if form == "out" else (lambda: module.matmul(a, b))


def reference_label(hc: HostCall) -> str | None:
    return None if hc.reference is None else f"{hc.kind}.matmul(a, b{', out=c' if hc.reference == 'out' else ''})"


def host_error(fn: Callable[[], Any], c: Any, ref: np.ndarray, sync: Callable[[], Any]) -> float | None:
    """The relative error of one fn() (its result, or c, poisoned with NaN before)."""
    out = hg.as_device_array(c)
    out.fill_bytes(0xFF)
    result = fn()
    sync()
    got = hg.as_device_array(result).to_numpy() if result is not None and result is not c else out.to_numpy()
    err = rel_error(got, ref)
    return err if math.isfinite(err) else None


@functools.lru_cache(maxsize=None)
def matmul_defaults() -> tuple:
    """hgemm_rt.matmul's keyword defaults in signature order (alpha, beta, activation, scale, accumulate,
    kernel, stream; the bias is an operand, keyed apart): the options part of the key a call made without
    them is filed under."""
    params = inspect.signature(hg.matmul).parameters.values()
    return tuple(p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "bias")


def repeat_call_key(a: Any, b: Any, c: Any) -> tuple:
    """The key hgemm_rt.matmul(a, b, c) looks a repeat call up by in hgemm_rt.plans.calls, built as
    api.matmul builds it (api.call_identity with matmul's default options)."""
    return call_identity(a, b, c, matmul_defaults())[3]


def breakdown(a: Any, b: Any, c: Any, sync: Callable[[], Any], run: Run) -> list[dict]:
    """One repeat hg.matmul(a, b, c) on torch tensors by part (role "part"), the whole call ("whole"),
    the validation a first call pays (a Matmul made from scratch, its plan cached) and the GPU time of
    the launch ("other"). Wall microseconds per call, back to back (the GPU part of a 64^3 call is
    shorter than its host part)."""
    hg.matmul(a, b, c)
    hg.matmul(a, b, c)  # (the second call leaves its bound launches in the Bound)
    calls = hg.plans.calls
    key = repeat_call_key(a, b, c)
    bound = calls.get(key)
    if bound is None:
        raise RuntimeError("hgemm_rt.plans.calls holds no call under matmul_section.repeat_call_key after "
                           "hg.matmul(a, b, c): update it from api.matmul")
    stream = bound.stream()
    last = bound.last  # what the last call launched: its graph if the repeats switched to one
    launch = last.graph_launch if last.graph is not None else last.launches[0][0]
    pa, pb, pc, _key = call_identity(a, b, c, matmul_defaults())
    fresh = itertools.count(1)

    def fresh_ptrs() -> tuple:  # addresses never packed before (256-byte aligned, far from real ones; never launched)
        base = (1 << 44) + next(fresh) * (1 << 24)
        return base, base + (1 << 22), base + (2 << 22), 0

    def pack_new():  # packed, bound and kept, as a repeat on new buffers is
        return last.execution.plan(stream).packed_set(fresh_ptrs(), bound.alpha, bound.beta)

    def set_new():
        return last.execution.transient(fresh_ptrs(), bound.alpha, bound.beta, stream)

    parts = (
        ("key: api.call_identity (operands.KEYERS of A, B, C) + plans.calls lookup", "part",
         lambda: calls.get(repeat_call_key(a, b, c))),
        ("stream: torch's current stream", "part", bound.stream),
        ("the rest of Bound.run: overlap check, the last call's launches", "part",
         lambda: bound.run(pa, pb, c, pc)),
        ("the repeat call hg.matmul(a, b, c)", "whole", lambda: hg.matmul(a, b, c)),
        ("of which the driver: one cuGraphLaunch (or cuLaunchKernelEx) as bound", "other", launch),
        ("packing for new addresses, kept for repeats on them: LaunchPlan.packed_set", "other", pack_new),
        ("new addresses set in place (a call on other buffers): Execution.transient", "other", set_new),
        ("first-call validation: Matmul(a, b, c)", "other", lambda: hg.Matmul(a, b, c)),
    )
    rows = [{"part": part, "role": role, "us": wall_us(fn, sync)} for part, role, fn in parts]
    rows[2]["us"] -= rows[1]["us"]  # Bound.run reads the stream itself
    return rows + [{"part": "GPU time of the launch (events, L2 flushed)", "role": "other",
                    "us": run.gpu_us(lambda: bound.run(pa, pb, c, pc), stream)}]


def measure_host(section: str, shape: Shape, run: Run) -> list[dict]:
    a, b = random_operands(shape.M, shape.N, shape.K, "NN", shape.dtype, run.rng)
    ref = reference(a, b, "NN")
    err_bound = error_bound(shape.dtype, ACCUMULATE[shape.dtype][0], shape.dtype, shape.K)  # the static floor
    sync = hg.get_device().synchronize  # the whole context: every stream of every framework
    operands: dict[str, tuple] = {}
    reference_us: dict[str, float] = {}  # each reference measured once, shown beside every row it serves
    rows = []
    where = {"section": section, "M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "a_order": "row",
             "b_order": "row"}
    for hc in SECTIONS[section].calls:
        if hc.kind != "DeviceArray" and framework(hc.kind)[0] is None:
            run.skip(section, hc.label, framework(hc.kind)[1])
            continue
        if hc.kind not in operands:
            operands[hc.kind] = host_operands(hc.kind, a, b)
        A, B, C = operands[hc.kind]
        fn, calls = hg_call(hc.form, A, B, C)
        err = host_error(fn, C, ref, sync)
        us = wall_us(fn, sync) / calls
        label = reference_label(hc)
        if label and label not in reference_us:
            reference_us[label] = wall_us(matmul_call(framework(hc.kind)[0], hc.reference, A, B, C), sync)
        theirs = reference_us.get(label)
        rows.append({**where, "call": hc.label, "hg_us": us, "reference": label, "reference_us": theirs,
                     "ratio": ratio(theirs, us), **verdict_of(err, err_bound)})
    if "torch" in operands:
        rows += [{**where, **r} for r in breakdown(*operands["torch"], sync, run)]
    else:
        run.skip(section, "breakdown of a repeat call", framework("torch")[1])
    # (B = w.t(): column-major, as nn.Linear's weight gives it)
    return rows + [{**where, "b_order": "col", **r} for r in layer_rows(section, shape, b, sync, run)]


def layer_names() -> tuple[dict | None, str | None]:
    """(the names a LayerCall's expressions use, None), or (None, why they cannot run)."""
    torch, why = framework("torch")
    if torch is None:
        return None, why
    try:
        import hgemm_rt.torch as ht
    except ImportError as exc:  # (a torch too old for the ops)
        return None, str(exc)
    return {"ht": ht, "hg": hg, "torch": torch, "F": torch.nn.functional}, None


def layer_call(expr: str, names: dict, pool: list, w: Any, bias: Any) -> Callable[[], Any]:
    """expr on the next tensor of the pool each call (x), w and bias: a new activation address every call."""
    fn = eval(f"lambda x, w, bias: {expr}", dict(names))  # (the table's label is the code, so one truth)
    pick = itertools.cycle(pool).__next__
    return lambda: fn(pick(), w, bias)


def layer_rows(section: str, shape: Shape, b: np.ndarray, sync: Callable[[], Any], run: Run) -> list[dict]:
    """Each LayerCall and torch's call beside it, wall time per call, with w = b^T (N, K) and LAYER_POOL
    activations of their own values; ours checked first against float64 on an activation no call had before."""
    names, why = layer_names()
    if names is None:
        run.skip(section, "the torch-op rows (LAYER_CALLS)", why)
        return []
    torch = names["torch"]
    xs = [random_operands(shape.M, 1, shape.K, "NN", shape.dtype, run.rng)[0] for _ in range(LAYER_POOL)]
    bias_np = random_operands(1, shape.N, 1, "NN", shape.dtype, run.rng)[1][0]
    pool = [torch.from_numpy(x).cuda() for x in xs]
    w0, bias = torch.from_numpy(np.ascontiguousarray(b.T)).cuda(), torch.from_numpy(bias_np).cuda()
    err_bound = error_bound(shape.dtype, ACCUMULATE[shape.dtype][0], shape.dtype, shape.K)
    rows = []
    for lc in LAYER_CALLS:
        w = w0.detach().requires_grad_(lc.weight_grad)  # (grad mode on, as the bench runs: a model's default)
        got = layer_call(lc.ours, names, pool[1:2], w, bias)()  # (values no earlier call computed: no stale result)
        sync()
        uses_bias = "bias" in lc.ours  # (the expression is the call)
        want = reference(xs[1], b, "NN") + (bias_np.astype(np.float64) if uses_bias else 0.0)
        err = rel_error(hg.as_device_array(got.detach()).to_numpy(), want)
        us, theirs = (wall_us(layer_call(e, names, pool, w, bias), sync) for e in (lc.ours, lc.theirs))
        rows.append({"call": layer_label(lc), "hg_us": us, "reference": lc.theirs, "reference_us": theirs,
                     "ratio": ratio(theirs, us), **verdict_of(err if math.isfinite(err) else None, err_bound)})
    return rows


def layer_label(lc: LayerCall) -> str:
    return f"{lc.ours}, a new x every call" + (", w requires grad" if lc.weight_grad else "")


# -- decode steps in CUDA graphs against torch.matmul captured the same way ---------------------------------

def step_tensors(torch: Any, shape: Shape, run: Run) -> list[tuple]:
    """Per layer of the decode step: (x (M, K), w (N, K) as nn.Linear holds it, y (M, N), x @ w^T in float64)."""
    tensors = []
    for _name, n, k in shape.layers:
        x = torch_operand(torch, run.rng, shape.M, k, "row", shape.dtype)
        w = torch_operand(torch, run.rng, n, k, "row", shape.dtype)
        y = torch.empty((shape.M, n), dtype=x.dtype, device=x.device)
        tensors.append((x, w, y, x.double() @ w.double().t()))
    return tensors


def step_call(matmul: Callable[..., Any], tensors: list[tuple]) -> Callable[[], None]:
    """One decode step: matmul(x, w.t(), out=y) for each layer in order (hg.matmul, or torch.matmul as F.linear)."""
    def step() -> None:
        for x, w, y, _ref in tensors:
            matmul(x, w.t(), out=y)
    return step


def replayed_errors(torch: Any, graph: Any, tensors: list[tuple]) -> list[float | None]:
    """Each layer's relative error against float64 after one replay of the graph, every y NaN-filled before."""
    for _x, _w, y, _ref in tensors:
        y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return [torch_rel_error(y, ref) for _x, _w, y, ref in tensors]


def step_checks(torch: Any, shape: Shape, graphs: dict[str, list], copies: list[list[tuple]]) -> list[dict]:
    """Every layer of every copy, after one replay of hg's graph and one of torch's: hg's error held to
    the bound torch's error sets at the layer's K."""
    acc = ACCUMULATE[shape.dtype][0]
    checks = []
    for c, tensors in enumerate(copies):
        ours, theirs = (replayed_errors(torch, graphs[who][c], tensors) for who in ("hg", "torch"))
        for (name, _n, k), err, torch_err in zip(shape.layers, ours, theirs):
            bound = error_bound(shape.dtype, acc, shape.dtype, k, torch_err)
            checks.append({"layer": name, "copy": c, "torch_rel_error": torch_err, **verdict_of(err, bound)})
    return checks


def replay_us(torch: Any, graphs: list, replays: int) -> float:
    """GPU microseconds per replay: `replays` replays cycling through the graphs back to back between two
    events on the current stream, behind one untimed replay of each (the host's launches stay ahead)."""
    for graph in graphs:
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(replays):
        graphs[i % len(graphs)].replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


def measure_decode_graph(section: str, shape: Shape, run: Run) -> list[dict]:
    """One decode step (shape.layers at M token rows) captured in one CUDA graph with hg.matmul and in another
    with torch.matmul on the same tensors, DECODE_GRAPH_COPIES copies of distinct weights each: every layer
    checked after one replay, then GPU time per step, hg and torch in alternating rounds (run.warmup untimed,
    run.iters timed), the medians. A capture that fails is a skipped row that says why."""
    torch = framework("torch")[0]
    where = {"section": section, "M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype,
             "a_order": shape.a_order, "b_order": shape.b_order, "layers": [list(layer) for layer in shape.layers]}
    copies = [step_tensors(torch, shape, run) for _ in range(DECODE_GRAPH_COPIES)]
    try:
        graphs = {who: [capture_graph(torch, step_call(mm, t), step_call(mm, t)) for t in copies]
                  for who, mm in (("hg", hg.matmul), ("torch", torch.matmul))}
    except (hg.HgemmError, RuntimeError) as exc:
        reason = f"CUDA graph capture: {type(exc).__name__}: {exc}"
        run.skip(section, shape.label, reason)
        return [{**where, "hg_us": None, "torch_us": None, "ratio": None, "skipped": reason}]
    checks = step_checks(torch, shape, graphs, copies)
    rounds: dict[str, list[float]] = {"hg": [], "torch": []}
    for i in range(run.warmup + run.iters):
        for who in rounds:  # ABAB: hg, then torch, each round
            us = replay_us(torch, graphs[who], DECODE_GRAPH_REPLAYS)
            if i >= run.warmup:
                rounds[who].append(us)
    hg_us, torch_us = (statistics.median(rounds[who]) for who in ("hg", "torch"))
    worst = max(checks, key=lambda c: math.inf if c["rel_error"] is None else c["rel_error"] / c["error_bound"])
    routes = " | ".join(f"{name}: {hg.explain(x, w.t(), out=y)}" for (name, _n, _k), (x, w, y, _r)
                        in zip(shape.layers, copies[0]))
    weight_bytes = shape.N * shape.K * ITEMSIZE[shape.dtype]  # (N x K: the layers' weights in total)
    row = {**where, "route": routes, "copies": DECODE_GRAPH_COPIES, "replays": DECODE_GRAPH_REPLAYS,
           "hg_us": hg_us, "torch_us": torch_us, "ratio": ratio(torch_us, hg_us),
           "round_ratios": [t / h for h, t in zip(rounds["hg"], rounds["torch"])], "hg_rounds_us": rounds["hg"],
           "torch_rounds_us": rounds["torch"], "hg_tflops": tflops(shape, hg_us),
           "torch_tflops": tflops(shape, torch_us), "weight_bytes": weight_bytes,
           "hg_gbps": weight_bytes / (hg_us * 1e-6) / 1e9, "torch_gbps": weight_bytes / (torch_us * 1e-6) / 1e9,
           "layer_checks": checks, "rel_error": worst["rel_error"], "error_bound": worst["error_bound"],
           "ok": all(c["ok"] for c in checks)}
    if SECTIONS[section].bandwidth:
        hbm = run.hbm_bytes_per_s()
        row.update(hbm_gbps=hbm / 1e9, hg_hbm_share=row["hg_gbps"] * 1e9 / hbm)
    return [row]


# ---------------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------------

def fmt(x: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


def fmt_err(r: dict) -> str:
    text = "inf (NaN/Inf in C)" if r["rel_error"] is None else f"{r['rel_error']:.1e}"
    return text if r["ok"] else f"{text} > {r['error_bound']:.1e} FAIL"


def shape_cell(r: dict) -> str:
    return shape_text(r["M"], r["N"], r["K"], r["dtype"], r.get("a_order", ""), r.get("b_order", ""),
                      r.get("batch", 1), r.get("epilogue", ""), r.get("routing", ""), r.get("layers", ()))


def tried_cell(r: dict) -> str:
    """The GemmEx and cuBLASLt calls timed for the baseline, and those skipped (failed or wrong)."""
    timed, skipped = r.get("baseline_timed"), r.get("baseline_skipped")
    return "-" if timed is None else f"{timed}" + (f" ({skipped} skipped)" if skipped else "")


def cublas_table(rows: list[dict]) -> str:
    steady = any(r.get("steady") for r in rows)  # the rounds' spread, clock and power beside the ratio
    bandwidth = any("hg_gbps" in r for r in rows)  # memory-bound rows: GB/s instead of TFLOPS
    torch = any(r.get("torch_us") for r in rows)  # the cross-check, where torch ran
    rate = (lambda r, who: fmt(r[f"{who}_gbps"], ".0f")) if bandwidth else (lambda r, who: fmt(r[f"{who}_tflops"]))
    text = tabulate([[shape_cell(r), fmt(r["hg_us"]), rate(r, "hg"), fmt(r["cublas_us"]), rate(r, "cublas"),
                      r["cublas_variant"], fmt(r["ratio"], ".2f", "x"), fmt(r.get("gemmex_us")),
                      fmt(r.get("gemmex_ratio"), ".2f", "x"), tried_cell(r)]
                     + ([fmt(r.get("torch_us")), fmt(r.get("torch_ratio"), ".2f", "x")] if torch else [])
                     + [fmt_err(r), r["route"]]
                     + ([fmt(100 * r["hg_hbm_share"], ".0f", "%")] if bandwidth else [])
                     + (steady_cells(r) if steady else []) for r in rows],
                    headers=["shape", "matmul us", "GB/s" if bandwidth else "TFLOPS", "cuBLAS us",
                             "GB/s" if bandwidth else "TFLOPS", "cuBLAS best", "x cuBLAS", "GemmEx us", "x GemmEx",
                             "cuBLAS tried"] + (["torch us", "x torch"] if torch else []) + ["rel err", "route"]
                    + (["matmul % HBM"] if bandwidth else []) + (STEADY_HEADERS if steady else []),
                    disable_numparse=True)
    if bandwidth:
        text += f"\nHBM bandwidth (a 1 GiB fill on this GPU): {rows[0]['hbm_gbps']:.0f} GB/s"
    skipped = sum(r.get("baseline_skipped") or 0 for r in rows)
    text += (f"\ncuBLAS: the fastest of GemmEx (each accumulation) and the cuBLASLt heuristic's top {LT_ALGOS} "
             f"candidates per accumulation, each checked against float64 first; {skipped} skipped (failed or wrong)"
             + ("; torch.matmul on the same buffers is a cross-check, not the baseline" if torch else ""))
    return text


def batched_table(rows: list[dict]) -> str:
    steady = any(r.get("steady") for r in rows)
    text = tabulate([[shape_cell(r), fmt(r["hg_us"]), fmt(r["hg_tflops"]), fmt(r["cublas_us"]),
                      fmt(r["cublas_ratio"], ".2f", "x"), fmt(r["torch_us"]), fmt(r["torch_ratio"], ".2f", "x"),
                      r["baseline_variant"] or "-", fmt(r["ratio"], ".2f", "x"), fmt(r["hg_wall_us"]),
                      fmt(r["torch_wall_us"]), fmt(r["wall_ratio"], ".2f", "x"), fmt_err(r), r["route"]]
                     + (steady_cells(r) if steady else []) for r in rows],
                    headers=["shape", "matmul us", "TFLOPS", "cuBLAS s-b us", "x cuBLAS", "torch us", "x torch",
                             "baseline (faster)", "x baseline", "wall us hg", "torch", "torch/hg", "rel err", "route"]
                    + (STEADY_HEADERS if steady else []), disable_numparse=True)
    missing = sorted({r["cublas_variant"] for r in rows if r["cublas_us"] is None})
    return (f"{text}\nGPU time, L2 flushed; cuBLAS s-b: {STRIDED_BATCHED} through nvmath at each accumulation, "
            f"the fastest; the baseline is the faster of it and torch.matmul, every call checked against float64 "
            f"first; geomean x baseline {fmt(geomean([r['ratio'] for r in rows if r['ratio']]), '.3f', 'x')}"
            + "".join(f"\nno cuBLAS strided-batched figure: {why}" for why in missing))


def torch_table(rows: list[dict]) -> str:
    table = tabulate([[shape_cell(r), fmt(r["hg_gpu_us"]), fmt(r["torch_gpu_us"]), fmt(r["gpu_ratio"], ".2f", "x"),
                       fmt(r["hg_wall_us"]), fmt(r["torch_wall_us"]), fmt(r["wall_ratio"], ".2f", "x"), fmt_err(r),
                       r["route"]] for r in rows],
                     headers=["shape", "GPU us hg", "torch", "torch/hg", "wall us hg", "torch", "torch/hg",
                              "rel err", "route"], disable_numparse=True)
    return (f"{table}\ngeomean torch/hg: GPU time {fmt(geomean([r['gpu_ratio'] for r in rows]), '.3f', 'x')}, "
            f"wall time {fmt(geomean([r['wall_ratio'] for r in rows]), '.3f', 'x')} (>1: hg.matmul is faster)")


def host_table(rows: list[dict]) -> str:
    calls = [r for r in rows if "call" in r]
    text = (f"wall us per call: {WALL_MIN_CALLS}+ calls back to back (~{WALL_REPEAT_S:g} s), one sync at the end, "
            f"best of {WALL_REPEATS} (a 64^3 launch takes ~2.5 us of GPU time: the wall time is the host's); "
            f"'a new x every call': the next of {LAYER_POOL} activations each call, as a model's layers see them\n")
    text += tabulate([[shape_cell(r), r["call"], fmt(r["hg_us"]), r["reference"] or "-", fmt(r["reference_us"]),
                       fmt(r["ratio"], ".2f", "x"), fmt_err(r)] for r in calls],
                     headers=["shape", "call", "us", "reference", "us", "ref/ours", "rel err"], disable_numparse=True)
    for shape, parts in itertools.groupby((r for r in rows if "part" in r),
                                          key=lambda r: f", {shape_cell(r)}" if "M" in r else ""):
        parts = list(parts)
        whole = sum(r["us"] for r in parts if r["role"] == "whole")
        rest = whole - sum(r["us"] for r in parts if r["role"] == "part")
        text += f"\n\none repeat call from torch tensors{shape}, by part (wall us per call, measured alone):\n"
        text += tabulate([[r["part"], fmt(r["us"], ".2f")] for r in parts]
                         + [["the rest of the call (whole - parts, derived)", fmt(rest, ".2f")]],
                         headers=["part", "us"], disable_numparse=True)
    return text


def decode_graph_table(rows: list[dict]) -> str:
    timed = [r for r in rows if not r.get("skipped")]
    text = tabulate([[shape_cell(r), fmt(r["hg_us"]), fmt(r["torch_us"]), fmt(r["ratio"], ".2f", "x"),
                      f"{min(r['round_ratios']):.2f}-{max(r['round_ratios']):.2f}x", fmt(r["hg_gbps"], ".0f"),
                      fmt(r["torch_gbps"], ".0f"), fmt(100 * r["hg_hbm_share"], ".0f", "%") if "hg_hbm_share" in r
                      else "-", fmt_err(r), r["route"]] for r in timed],
                    headers=["decode step", "hg us/step", "torch us/step", "x torch", "rounds", "GB/s hg", "GB/s torch",
                             "hg % HBM", "rel err (worst layer)", "route"], disable_numparse=True)
    if timed:
        r = timed[0]
        text += (f"\nGPU time per step: {r['replays']} graph replays back to back between two events, {r['copies']} "
                 f"layers of distinct weights cycled (one graph each), hg and torch in alternating rounds, the median; "
                 f"GB/s: the weights' bytes per step")
        if "hbm_gbps" in r:
            text += f"; HBM bandwidth (a 1 GiB fill on this GPU): {r['hbm_gbps']:.0f} GB/s"
        text += f"\ngeomean x torch {fmt(geomean([r['ratio'] for r in timed if r['ratio']]), '.3f', 'x')}"
    return text + "".join(f"\nskipped {shape_cell(r)}: {r['skipped']}" for r in rows if r.get("skipped"))


@dataclass(frozen=True)
class Kind:
    measure: Callable[[str, Shape, Run], list[dict]]
    table: Callable[[list[dict]], str]
    needs: str | None = None  # a framework without which the whole section is skipped


KINDS: dict[str, Kind] = {
    "cublas": Kind(measure_vs_cublas, cublas_table),
    "torch": Kind(measure_vs_torch, torch_table, needs="torch"),
    "batched": Kind(measure_batched, batched_table, needs="torch"),
    "host": Kind(measure_host, host_table),
    "eager": Kind(measure_vs_eager, torch_table, needs="torch"),
    "grouped": Kind(measure_grouped, grouped_table, needs="torch"),
    "graph": Kind(measure_decode_graph, decode_graph_table, needs="torch"),
}


def judge_target(name: str, section: Section, ratios: list[float | None]) -> dict | None:
    """Whether a section met its target: every ratio ("each", judged on the smallest) or their geomean.
    None for an informative section; value None where no row has a baseline to compare with."""
    if section.target is None:
        return None
    value = worst = None
    if ratios and all(r is not None for r in ratios):
        value = min(ratios) if section.judge == "each" else geomean(ratios)
        worst = min(ratios)
    met = None if value is None else value >= section.target and (section.floor is None or worst >= section.floor)
    return {"section": name, "target": section.target, "judge": section.judge, "value": value,
            "floor": section.floor, "worst": worst, "met": met}


def verdict_line(v: dict) -> str:
    what = "every row" if v["judge"] == "each" else "the geomean"
    floor = f" and every row >= {v['floor']:g}x" if v.get("floor") is not None else ""
    if v["value"] is None:
        got = "not judged (no row with a baseline)"
    else:
        worst = f", worst {v['worst']:.2f}x" if floor else ""
        got = f"{v['value']:.2f}x{worst} {'(met)' if v['met'] else '(NOT met)'}"
    return f"target: {what} >= {v['target']:g}x the baseline{floor} -> {got}"


WORST_ROWS = 10


def worst_rows(rows: list[dict]) -> str:
    """The rows furthest below the baseline, with their routes (the sweep's to-do list)."""
    judged = sorted((r for r in rows if r.get("ratio") is not None), key=lambda r: r["ratio"])[:WORST_ROWS]
    return f"the {len(judged)} worst shapes:\n" + tabulate(
        [[shape_cell(r), fmt(r["ratio"], ".2f", "x"), r["route"]] for r in judged],
        headers=["shape", "x baseline", "route"], disable_numparse=True)


def run_section(name: str, run: Run) -> tuple[list[dict], dict | None]:
    """Every shape of one section, its table and its verdict: (rows, verdict). A shape whose call
    raises is a failed row (ok False, with the error), and the section goes on."""
    section = SECTIONS[name]
    kind = KINDS[section.baseline]
    print(f"\n== {name}: {section.title} ==", flush=True)
    if kind.needs and framework(kind.needs)[0] is None:
        run.skip(name, "the section", framework(kind.needs)[1])
        return [], None
    shapes = selected_shapes(section, run.only)
    if not shapes:
        print(f"  (no shape matches --only {run.only!r})", flush=True)
        return [], None
    rows, failed = [], []
    for shape in shapes:
        try:
            rows += kind.measure(name, shape, run)
        except (hg.HgemmError, RuntimeError) as exc:
            failed.append({"section": name, "M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype,
                           "a_order": shape.a_order, "b_order": shape.b_order, "ok": False,
                           **({"layers": [list(layer) for layer in shape.layers]} if shape.layers else {}),
                           "error": f"{type(exc).__name__}: {exc}"})
            print(f"  !! {shape_cell(failed[-1])}: {failed[-1]['error']}", flush=True)
    if rows:
        print(kind.table(rows), flush=True)
        if section.judge == "geomean" and len(rows) > WORST_ROWS:
            print(worst_rows(rows), flush=True)
    if len(shapes) < len(section.shapes):  # a subset says nothing about the section's target
        print(f"  ({len(shapes)} of the section's {len(section.shapes)} shapes, by --only: its target is not judged)")
        return rows + failed, None
    verdict = judge_target(name, section, [r.get("ratio") for r in rows])
    if verdict is not None:
        print(verdict_line(verdict))
    return rows + failed, verdict


def run_sections(names: list[str], settings: dict, build: dict, command: str, steady: Protocol | None = None,
                 on_section: Callable[[dict], None] | None = None) -> dict:
    """The sections in order, under one device header: the results document (see make_doc).
    settings: iters, warmup, check_rows, autotune, seed (None: fresh), only (--only's pattern, or None);
    `steady`: the steady-state protocol for the sections against cuBLAS; `on_section`: given the document
    of the sections finished so far after each one (to write it as the run goes)."""
    dev = hg.get_device()
    device = device_record(dev)
    versions = framework_versions()
    for line in header_lines(device, build):
        print(line)
    print(", ".join(f"{name} {v}" if v else f"{name}: {framework(name)[1]}" for name, v in versions.items()))
    seed = settings["seed"] if settings["seed"] is not None else int(np.random.SeedSequence().entropy % (2**63))
    run = Run(settings["iters"], settings["warmup"], settings["check_rows"], settings["autotune"],
              np.random.default_rng(seed), L2Flusher(), steady, ClockSampler(dev.info.ordinal) if steady else None,
              only=settings.get("only"))
    rows, verdicts = [], []

    def doc() -> dict:
        return make_doc(device=device, build=build, frameworks=versions,
                        settings={**settings, "seed": seed, "sections": names, "wall_repeat_s": WALL_REPEAT_S,
                                  "wall_min_calls": WALL_MIN_CALLS, "wall_repeats": WALL_REPEATS,
                                  **(steady.record() if steady else {})},
                        command=command, rows=rows, verdicts=verdicts, skipped=run.skipped)

    try:
        for name in names:
            got, verdict = run_section(name, run)
            rows += got
            verdicts += [verdict] if verdict else []
            if on_section is not None:
                on_section(doc())
    finally:
        run.flusher.close()
    device["clocks_at_end"] = clocks(dev.info.ordinal)
    return doc()


DOC_ROWS = ("targets", "skipped", "rows")  # the lists of the document written one record per line


def make_doc(*, device: dict, build: dict, frameworks: dict, settings: dict, command: str, rows: list[dict],
             verdicts: list[dict], skipped: list[dict]) -> dict:
    return {"schema": MATMUL_SCHEMA,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "command": command,
            "device": device, "build": build, "frameworks": frameworks, "settings": settings, "targets": verdicts,
            "skipped": skipped, "rows": rows}


def failures(doc: dict) -> list[str]:
    """The rows over their error bound or whose call failed, named."""
    return [f"{r['section']} {r.get('call') or shape_cell(r)}" for r in doc["rows"] if r.get("ok") is False]

