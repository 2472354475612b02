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
from typing import Any, Callable

import numpy as np

from hgemm_rt import DeviceArray, HgemmError
from hgemm_rt._driver import check, driver
from hgemm_rt.device import Event
from hgemm_rt.launcher import default_swizzle_stride
from hgemm_rt.testing import rel_error
from hgemm_rt.timing import L2Flusher, time_fn

from .selection import Case

# bf16 travels as its raw 16 bits (no ml_dtypes needed): the top half of an fp32, rounded to nearest even.
_HOST_DTYPE = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32}
QUEUE_AHEAD_BELOW_MS = 5.0
_FULL_CHECK_ELEMS = 1 << 31  # below M*N*K = 2^31 every row is checked (the reference costs little)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def rounded(x32: np.ndarray, dtype: str) -> np.ndarray:
    """Host array in the device's bit layout for `dtype`."""
    return to_bf16_bits(x32) if dtype == "bf16" else x32.astype(_HOST_DTYPE[dtype])


def values(host: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values of a host array in device layout."""
    return (from_bf16_bits(host) if dtype == "bf16" else host).astype(np.float64)


def _finite_rows(host: np.ndarray, dtype: str) -> bool:
    if dtype == "bf16":  # exponent all ones: Inf or NaN
        return not bool(((host & 0x7F80) == 0x7F80).any())
    return bool(np.isfinite(host).all())


def all_finite(host: np.ndarray, dtype: str) -> bool:
    """No NaN/Inf anywhere in C. numpy releases the GIL in ufuncs, so row blocks are checked in
    parallel: at 8192^2 the scan would otherwise cost more host time than timing the kernel."""
    if host.size < (1 << 22):
        return _finite_rows(host, dtype)
    blocks = np.array_split(host, _pool()._max_workers)
    return all(_pool().map(lambda blk: _finite_rows(blk, dtype), blocks))


@functools.lru_cache(maxsize=None)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1))


def upload(host: np.ndarray, dtype: str) -> DeviceArray:
    host = np.ascontiguousarray(host)
    arr = DeviceArray.empty(host.shape, dtype)
    check(driver().cuMemcpyHtoD(arr.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
    return arr


def download(arr: DeviceArray, out: np.ndarray | None = None) -> np.ndarray:
    if out is None:
        out = np.empty(arr.shape, dtype=_HOST_DTYPE[arr.dtype])
    check(driver().cuMemcpyDtoH(out.ctypes.data, arr.ptr, out.nbytes), "cuMemcpyDtoH")
    return out


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
            a, b = rounded(self.a32, dtype), rounded(self.b32, dtype)
            a_up, b_up = upload(a if a_order == "row" else a.T, dtype), upload(b if layout == "NN" else b.T, dtype)
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
            self._host[dtype] = np.empty((self.M, self.N), dtype=_HOST_DTYPE[dtype])
        return self._host[dtype]

    def reference(self, dtype: str) -> np.ndarray:
        """float64 C on the checked rows, from the inputs as rounded to `dtype`."""
        if dtype not in self._ref:
            a = values(rounded(self.a32[self.rows], dtype), dtype)
            self._ref[dtype] = a @ values(rounded(self.b32, dtype), dtype)
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
    host = download(C, inp.host_output(C.dtype))
    if not all_finite(host, C.dtype):
        return ms, None
    return ms, rel_error(values(host[inp.rows], C.dtype), inp.reference(dtype))


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


def measure_case(case: Case, inp: ShapeInputs, cc: tuple[int, int], flusher: L2Flusher, *, warmup: int,
                 iters: int, budget_s: float) -> dict[str, Any]:
    """One checked launch into NaN-filled C (its GPU time sizes the rest), then the timing. Raises
    Skip when the kernel does not take this shape or was not built for this GPU."""
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
    runs = max(1, int(budget_s * 1e3 / max(est_ms, 1e-3)) - warmed)  # the budget covers warm-up + timed runs
    n_iters = max(1, min(iters, runs))
    n_warm = max(0, min(warmup - warmed, runs - n_iters))
    # queueing ahead matters where a launch is as short as Python's launch latency; for a slow kernel
    # its probe launch would only spend budget
    t = time_fn(run, warmup=n_warm, iters=n_iters, flush=flusher, queue_ahead=est_ms < QUEUE_AHEAD_BELOW_MS)
    acc = e.acc_for(case.options)
    return {
        "name": e.name, "ladder": e.ladder, "step": int(e.step), "layout": e.layout, "dtype": e.dtype,
        "acc": acc, "out": e.out, "baseline": bool(e.is_baseline), "variant": dict(case.variant),
        "swizzle": case.swizzle, "label": case.label, "swizzle_stride": stride, "M": M, "N": N, "K": K,
        "ms": float(t.median_ms), "ms_min": float(t.min_ms), "ms_max": float(t.max_ms), "first_ms": float(first_ms),
        "iters": n_iters, "warmup": n_warm + warmed, "tflops": float(t.tflops(M, N, K)),
        "rel_error": None if err is None or not np.isfinite(err) else float(err),
        "checked_rows": int(len(inp.rows)),
    }


def measure_shape(shape: tuple[int, int, int], cases: list[Case], cc: tuple[int, int], flusher: L2Flusher,
                  rng: np.random.Generator, *, warmup: int, iters: int, budget_s: float, check_rows: int,
                  on_case: Callable[[Case, float], None]) -> tuple[list[dict], list[dict]]:
    """Every case at one shape: (records, skipped). A kernel that raises is recorded as skipped with
    the error, and the run goes on."""
    M, N, K = shape
    inp = ShapeInputs(M, N, K, rng, check_rows)
    records, skipped = [], []
    try:
        for case in cases:
            t0 = time.perf_counter()
            try:
                records.append(measure_case(case, inp, cc, flusher, warmup=warmup, iters=iters, budget_s=budget_s))
            except Skip as exc:
                skipped.append({"name": case.name, "label": case.label, "M": M, "N": N, "K": K, "reason": str(exc)})
            except (HgemmError, RuntimeError, ValueError) as exc:
                skipped.append({"name": case.name, "label": case.label, "M": M, "N": N, "K": K,
                                "reason": f"error: {type(exc).__name__}: {exc}"})
            on_case(case, time.perf_counter() - t0)
    finally:
        inp.close()
    return records, skipped
