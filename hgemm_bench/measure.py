"""The GPU part of a run: inputs, the float64 reference, one checked launch, then event timing.

Per shape one N(0,1) draw in float32 is rounded to each input dtype that a selected kernel takes
(B transposed for TN), so every kernel and cuBLAS of a dtype see the same numbers, and the float64
reference of the sampled rows is computed once per dtype (it is the same for NN and TN).
"""
from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hgemm_rt import DeviceArray, HgemmError
from hgemm_rt.device import Event
from hgemm_rt.dtypes import STORAGE, storage_all_finite, storage_to_f64, to_storage
from hgemm_rt.launcher import default_swizzle_stride
from hgemm_rt.numerics import rel_error
from hgemm_rt.timing import L2Flusher, Timing, time_fn

from .devinfo import ClockSampler
from .selection import Case
from .steady import QUEUE_AHEAD_BELOW_MS, Contender, Protocol, interleave

_FULL_CHECK_ELEMS = 1 << 31  # below M*N*K = 2^31 every row is checked (the reference costs little)


def all_finite(host: np.ndarray, dtype: str) -> bool:
    """No NaN/Inf anywhere in C. numpy releases the GIL in ufuncs, so row blocks are checked in
    parallel: at 8192^2 the scan would otherwise cost more host time than timing the kernel."""
    if host.size < (1 << 22):
        return storage_all_finite(host, dtype)
    blocks = np.array_split(host, _pool()._max_workers)
    return all(_pool().map(lambda blk: storage_all_finite(blk, dtype), blocks))


@functools.lru_cache(maxsize=None)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1))


def timed_once(run: Callable[[], Any]) -> float:
    """GPU milliseconds of one launch between two events (host work in between counts too)."""
    start, end = Event(), Event()
    start.record()
    run()
    end.record()
    end.synchronize()
    return end.elapsed_ms(start)


class ShapeInputs:
    """Operands, output buffers and references for one shape; `close()` frees the GPU memory."""

    def __init__(self, M: int, N: int, K: int, rng: np.random.Generator, check_rows: int):
        self.M, self.N, self.K = M, N, K
        self.a32 = rng.standard_normal((M, K), dtype=np.float32)
        self.b32 = rng.standard_normal((K, N), dtype=np.float32)
        full = check_rows == 0 or check_rows >= M or M * N * K <= _FULL_CHECK_ELEMS
        self.rows = np.arange(M) if full else np.sort(rng.choice(M, size=check_rows, replace=False))
        self._dev: dict[tuple[str, str, str], tuple[DeviceArray, DeviceArray]] = {}
        self._uploads: list[DeviceArray] = []  # what close() frees (_dev may hold .T views of them)
        self._out: dict[str, DeviceArray] = {}
        self._host: dict[str, np.ndarray] = {}
        self._ref: dict[str, np.ndarray] = {}

    def operands(self, layout: str, dtype: str, a_order: str = "row") -> tuple[DeviceArray, DeviceArray]:
        """A (M x K; column-major: the transposed view of a K x M upload) and B as the layout takes it."""
        key = (layout, dtype, a_order)
        if key not in self._dev:
            a, b = to_storage(self.a32, dtype), to_storage(self.b32, dtype)
            a_up = DeviceArray.from_host(a if a_order == "row" else a.T, dtype)
            b_up = DeviceArray.from_host(b if layout == "NN" else b.T, dtype)
            self._uploads += [a_up, b_up]
            self._dev[key] = (a_up if a_order == "row" else a_up.T, b_up)
        return self._dev[key]

    def output(self, dtype: str) -> DeviceArray:
        if dtype not in self._out:
            self._out[dtype] = DeviceArray.empty((self.M, self.N), dtype)
        return self._out[dtype]

    def host_output(self, dtype: str) -> np.ndarray:
        """One host buffer per output dtype, reused: no fresh pages to fault in per kernel."""
        if dtype not in self._host:
            self._host[dtype] = np.empty((self.M, self.N), dtype=STORAGE[dtype])
        return self._host[dtype]

    def reference(self, dtype: str) -> np.ndarray:
        """float64 C on the checked rows, from the inputs as rounded to `dtype`."""
        if dtype not in self._ref:
            a = storage_to_f64(to_storage(self.a32[self.rows], dtype), dtype)
            self._ref[dtype] = a @ storage_to_f64(to_storage(self.b32, dtype), dtype)
        return self._ref[dtype]

    def close(self) -> None:
        for x in self._uploads:
            x.close()
        self._uploads.clear()
        for C in self._out.values():
            C.close()
        self._dev.clear()
        self._out.clear()


def checked_launch(run: Callable[[], Any], C: DeviceArray, inp: ShapeInputs, dtype: str) -> tuple[float, float | None]:
    """One launch of `run` into NaN-filled C: (its GPU ms, the relative error of C on the checked rows
    against the float64 reference of `dtype` inputs; None where C holds NaN/Inf)."""
    C.fill_bytes(0xFF)  # NaN in every element: one the kernel leaves unwritten fails the check
    ms = timed_once(run)
    host = C.to_host(inp.host_output(C.dtype))
    if not all_finite(host, C.dtype):
        return ms, None
    return ms, rel_error(storage_to_f64(host[inp.rows], C.dtype), inp.reference(dtype))


class Skip(Exception):
    """This case does not run at this shape (the reason is recorded)."""


def launch_options(case: Case, N: int) -> tuple[dict[str, Any], int | None]:
    """The case's variant plus the thread-block swizzle: on with the default stride (about N/4,
    see hgemm_rt.launcher.default_swizzle_stride) where the grid has one and N allows it."""
    opts = case.options
    if case.swizzle not in ("on", "auto"):
        return opts, None
    stride = default_swizzle_stride(N)
    if stride is not None and stride % case.entry.spec.tile[1]:
        stride = None
    if stride is None:
        if case.swizzle == "on":
            raise Skip(f"no swizzle stride at N={N} (swizzle=on is the same run as off)")
        return opts, None
    return {**opts, "swizzle": True, "swizzle_stride": stride}, stride


@dataclass
class Checked:
    """A case after its checked launch: how to run it, its error, and the GPU time that sizes its timing."""
    case: Case
    run: Callable[[], Any]
    first_ms: float
    est_ms: float
    warmed: int  # warm launches already made (the one that gave est_ms)
    err: float | None
    stride: int | None


def check_case(case: Case, inp: ShapeInputs, cc: tuple[int, int], budget_s: float) -> Checked:
    """One checked launch into NaN-filled C, then a warm launch whose GPU time sizes the timing.
    Raises Skip when the kernel does not take this shape or was not built for this GPU."""
    e = case.entry
    M, N, K = inp.M, inp.N, inp.K
    reason = e.supports(M, N, K, cc)
    if reason is not None:
        raise Skip(reason)
    opts, stride = launch_options(case, N)
    A, B = inp.operands(e.layout, e.dtype, getattr(e, "a_order", "row"))
    C = inp.output(e.out)
    run: Callable[[], Any] = lambda: e(A, B, C, **opts)  # noqa: E731

    first_ms, err = checked_launch(run, C, inp, e.dtype)

    # The checked launch is the first warm-up, but its time can include a module load or cuBLAS's
    # set-up (hundreds of ms): unless it already ate the budget, a second, warm launch sizes the rest.
    est_ms, warmed = first_ms, 0
    if first_ms < 4e3 * budget_s:
        est_ms, warmed = min(first_ms, timed_once(run)), 1
    return Checked(case, run, first_ms, est_ms, warmed, err, stride)


def record_of(c: Checked, inp: ShapeInputs, t: Timing, warmup: int) -> dict[str, Any]:
    """The results file's measurement record of a checked case timed as `t`."""
    e, case = c.case.entry, c.case
    M, N, K = inp.M, inp.N, inp.K
    return {
        "name": e.name, "ladder": e.ladder, "step": int(e.step), "layout": e.layout, "dtype": e.dtype,
        "acc": e.acc_for(case.options), "out": e.out, "baseline": bool(e.is_baseline), "variant": dict(case.variant),
        "swizzle": case.swizzle, "label": case.label, "swizzle_stride": c.stride, "M": M, "N": N, "K": K,
        "ms": float(t.median_ms), "ms_min": float(t.min_ms), "ms_max": float(t.max_ms), "first_ms": float(c.first_ms),
        "iters": t.iters, "warmup": warmup, "tflops": float(t.tflops(M, N, K)),
        "rel_error": None if c.err is None or not np.isfinite(c.err) else float(c.err),
        "checked_rows": int(len(inp.rows)),
    }


def measure_case(case: Case, inp: ShapeInputs, cc: tuple[int, int], flusher: L2Flusher, *, warmup: int,
                 iters: int, budget_s: float) -> dict[str, Any]:
    """The default protocol: the checked launch, then warm-up and timing within the budget."""
    c = check_case(case, inp, cc, budget_s)
    runs = max(1, int(budget_s * 1e3 / max(c.est_ms, 1e-3)) - c.warmed)  # the budget covers warm-up + timed runs
    n_iters = max(1, min(iters, runs))
    n_warm = max(0, min(warmup - c.warmed, runs - n_iters))
    # queueing ahead matters where a launch is as short as Python's launch latency; for a slow kernel
    # its probe launch would only spend budget
    t = time_fn(c.run, warmup=n_warm, iters=n_iters, flush=flusher, queue_ahead=c.est_ms < QUEUE_AHEAD_BELOW_MS)
    return record_of(c, inp, t, n_warm + c.warmed)


def steady_records(checked: list[Checked], inp: ShapeInputs, protocol: Protocol, flusher: L2Flusher,
                   sampler: ClockSampler) -> tuple[list[dict], list[dict]]:
    """The steady protocol over the checked cases of one shape: (records, skipped). A record's timing
    is over the rounds (median, min and max of the round medians); "steady" keeps each round."""
    contenders = [Contender(c.run, c.est_ms) for c in checked]
    interleave(contenders, protocol, flusher, sampler)
    records, skipped = [], []
    for c, t in zip(checked, contenders):
        if t.error is not None:
            skipped.append(skip_record(c.case, inp, t.error))
            continue
        rec = record_of(c, inp, Timing(t.median_ms(), min(t.ms), max(t.ms), t.iters), c.warmed)
        rec["steady"] = t.record()
        records.append(rec)
    return records, skipped


def skip_record(case: Case, inp: ShapeInputs, reason: str) -> dict[str, Any]:
    return {"name": case.name, "label": case.label, "M": inp.M, "N": inp.N, "K": inp.K, "reason": reason}


def measure_shape(shape: tuple[int, int, int], cases: list[Case], cc: tuple[int, int], flusher: L2Flusher,
                  rng: np.random.Generator, *, warmup: int, iters: int, budget_s: float, check_rows: int,
                  on_case: Callable[[Case, float], None], steady: Protocol | None = None,
                  sampler: ClockSampler | None = None) -> tuple[list[dict], list[dict]]:
    """Every case at one shape: (records, skipped). A kernel that raises is recorded as skipped with
    the error, and the run goes on. With `steady` (and its sampler) every case is checked first, then
    all are timed together in interleaved rounds (steady.py)."""
    inp = ShapeInputs(*shape, rng, check_rows)
    records, skipped, checked = [], [], []
    try:
        for case in cases:
            t0 = time.perf_counter()
            try:
                if steady is None:
                    records.append(measure_case(case, inp, cc, flusher, warmup=warmup, iters=iters, budget_s=budget_s))
                else:
                    checked.append(check_case(case, inp, cc, budget_s))
            except Skip as exc:
                skipped.append(skip_record(case, inp, str(exc)))
            except (HgemmError, RuntimeError, ValueError) as exc:
                skipped.append(skip_record(case, inp, f"error: {type(exc).__name__}: {exc}"))
            on_case(case, time.perf_counter() - t0)
        if checked:
            got, lost = steady_records(checked, inp, steady, flusher, sampler)
            records += got
            skipped += lost
    finally:
        inp.close()
    return records, skipped
