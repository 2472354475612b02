"""The public matmul API: `Matmul`, a plan object described once and run many times, and the one-shot
`matmul` on top of it.

    import hgemm_rt as hg
    c = hg.matmul(a, b)                          # a: M x K, b: K x N; fp16, bf16 or fp32
    mm = hg.Matmul(a, b.T, out=c, alpha=2.0, beta=1.0)
    print(mm.explain()); mm.autotune()           # optional: measure the candidates, keep the fastest
    mm(a2, b2.T, out=c2)                         # new buffers of the same description

Operands: PyTorch tensors, CuPy and JAX arrays, our DeviceArrays, anything with
`__cuda_array_interface__` or DLPack (zero copy), or numpy arrays (copied to the GPU). Any row- or
column-major or otherwise strided 2-D view, any pointer alignment, any M, N, K >= 1.

Batched: (..., M, K) @ (..., K, N) by torch.matmul's rules: the batch dimensions (all but the last two)
broadcast (a missing or size-1 dimension is repeated, as a stride-0 view is), any batch strides, and
the result has the broadcast batch shape. Where B has no batch and A's batch folds into its rows (and
out's too), the product is one 2-D GEMM of prod(...) * M rows. Otherwise every matrix of the batch is
computed in one launch (grid.z; two levels of batch dimensions that do not merge, up to 65535 matrices
per launch: more, or more levels, run as a loop of such launches).

Result: `out` when given (written in place; a numpy `out` is filled from the GPU result). Without
`out`, a new C-contiguous array of shape (*batch, M, N) of the inputs' kind: a torch tensor for torch
inputs, a CuPy array for CuPy inputs, numpy when both inputs are numpy, else a DeviceArray.

Stream: stream= (any handle, our Stream, torch/CuPy streams, `__cuda_stream__` objects); without it a
call on torch tensors runs on torch's current stream and one on CuPy arrays on CuPy's, as their own
operations do, anything else on the legacy default stream. Work a producer has pending on another
stream (a CAI `stream`, DLPack, the torch/CuPy current stream when stream= names another) is ordered
before the call, as the protocols require.

accumulate: "f32" (default) or, for fp16 inputs, "f16" (also allows kernels that accumulate in fp16,
the cuBLAS COMPUTE_16F error class); "tf32" for fp32 inputs allows TF32 tensor cores (one pass, ~1e-3 error);
fp32 inputs with "f32" keep fp32 accuracy (on Hopper: three tensor-core products of split operands, 3xFP16 on
power-of-two-scaled fp16 heads and residuals for large products, 3xTF32 split in the GEMM's shared memory for small
ones and their batches; the cost model chooses). bf16 takes "f32".
kernel: "auto" (tuning cache, else the cost model's choice) or a kernel name, which forces that kernel
(with whatever copies it needs around it).

Every argument is checked before anything runs on the GPU. A repeat call on operands of the same
identity (address, shape, strides, dtype, device: `operands.call_key`) and the same options skips
validation and planning: it costs the key, a dictionary lookup and one driver launch per step.
"""
from __future__ import annotations

import ctypes
import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from . import operands as ops
from . import planner, tuning
from ._driver import check, driver, native
from .device import get_device, stream_handle
from .errors import DriverError, ValidationError
from .executor import Execution
from .launcher import CONTEXT_ERRORS, ArrayRef, LaunchGraph
from .memory import DeviceArray, byte_extent, c_strides
from .operands import Operand
from .epilogue import ACTIVATIONS, SWIGLU, Epilogue
from .problem import ACCUMULATE, ITEMSIZE, KERNEL_LEVELS, MAX_GRID_BATCH, Problem, Recipe, View, batch_align, \
    ptr_alignment
from .registry import get_registry

__all__ = ["Matmul", "PlanCache", "autotune", "explain", "matmul", "plans"]

_I32 = 2**31 - 1
# a call repeated this many times on the same buffers and stream launches through a CUDA graph from then
# on: one cuGraphLaunch (~3 us of host time on an H100 host) instead of a cuLaunchKernelEx per kernel
# (~4-6 us each); building the graph costs ~100 us once
GRAPH_AFTER_REPEATS = 4
# ... unless it is one kernel the cost model gives this many microseconds or more: there the GPU, not the host,
# paces back-to-back calls (a plain repeat launch costs ~8-14 us of host time, a graph launch ~7), and behind
# another kernel (a model's previous op) a graph launch costs 0.4-1 us of GPU time that a plain (programmatic
# dependent) launch does not; behind a memset (the bench's L2 flush) the two tie. H100, fp16, same buffers, plain
# -> graph (us). GPU time with L2 flushed by a kernel (triton do_bench), three interleaved rounds (estimate in
# parentheses): 1024 x 1024 x 4096 (27.8) 22.9-23.2 -> 23.6-24.0, 16 x 4096^2 B K x N (16.3) 22.8-22.9 -> 23.5-23.7,
# 1 x 4096^2 (14.1) 19.2 -> 19.8-20.1, 256 x 1024 x 4096 (14.9) 16.0-16.5 -> 16.4-16.5, 1024^3 (9.0) 10.5-10.8 ->
# 11.1; with a memset flush (time_fn) the medians overlap (within 0.5). Wall time a call back to back, two runs: 2048^3
# 24.3-24.7 -> 25.0-25.6, 1024 x 1024 x 4096 18.7 -> 19.3-19.4, 256 x 1024 x 4096 11.2-13.9 -> 12.1-12.2, 1 x 4096^2
# 14.1-15.4 -> 15.1-15.5, and below the threshold, where the host paces the calls, 1024^3 8.5-14.0 -> 7.6-7.8.
# Routes of several launches keep the graph (it runs independent copies side by side, and saves a launch's host
# cost per kernel).
GRAPH_BELOW_US = 12.0


# ---------------------------------------------------------------------------------------------------
# validation of a call: every check, before anything touches the GPU
# ---------------------------------------------------------------------------------------------------

class Call:
    """A validated matmul call: operands, sizes, options, device and stream."""

    __slots__ = ("a", "b", "c", "M", "N", "K", "dtype", "acc", "alpha", "beta", "kernel", "device", "stream",
                 "explicit_stream", "frameworks", "result_shape", "batch", "bstrides", "bias", "epi")

    def __init__(self, **kw: Any):
        for k, v in kw.items():
            setattr(self, k, v)

    @property
    def operands(self) -> tuple:
        return (self.a, self.b, self.c)

    @property
    def inputs(self) -> tuple:
        """Every array the call reads besides out: A, B and the bias if there is one."""
        return (self.a, self.b) if self.bias is None else (self.a, self.b, self.bias)

    @property
    def n_out(self) -> int:
        """Columns of the result: N, or half of it for SwiGLU (gate | up)."""
        return self.N // 2 if self.epi is not None and self.epi.swiglu else self.N

    def described(self) -> "Call":
        """This call without the arrays it was made with (operands.described): what a cache keeps."""
        kw = {k: getattr(self, k) for k in self.__slots__}
        kw.update(a=ops.described(self.a), b=ops.described(self.b), c=ops.described(self.c),
                  bias=ops.described(self.bias))
        return Call(**kw)


def _self_overlapping(op: Operand) -> bool:
    """True if two elements of a view may share an address (zero or interleaved strides): ordered by
    stride, each dimension must step past the bytes the ones below it span."""
    extent = op.itemsize
    for s, n in sorted((abs(s), n) for n, s in zip(op.shape, op.strides) if n > 1):
        if s < extent:
            return True
        extent += s * (n - 1)
    return False


def validate_call(a: Any, b: Any, out: Any, alpha: Any, beta: Any, accumulate: str | None, kernel: str,
                  stream: Any, bias: Any = None, activation: str | None = None, scale: Any = 1.0) -> Call:
    explicit = stream is not None
    given = stream_handle(stream) if explicit else ops.implied_stream((a, b, out, bias))
    A, B = ops.describe(a, "A", given), ops.describe(b, "B", given)
    C = ops.describe(out, "out", given) if out is not None else None
    Bias = ops.describe(bias, "bias", given) if bias is not None else None
    if activation is not None and activation != SWIGLU and activation not in ACTIVATIONS:
        raise ValidationError(f"matmul: activation={activation!r} is not one of "
                              f"{[None, *ACTIVATIONS, SWIGLU]}")
    for op in (A, B):
        if len(op.shape) < 2:
            raise ValidationError(f"matmul: {op.what} must be 2-D, or N-D with batch dimensions, got shape {op.shape}")
    (M, K), (K2, N) = A.shape[-2:], B.shape[-2:]
    if K != K2:
        raise ValidationError(f"matmul: A is {M} x {K} but B is {K2} x {N}: inner dimensions differ "
                              f"(shapes {A.shape} and {B.shape})")
    batch_shape = _broadcast_batch(A, B)
    if activation == SWIGLU and N % 2:
        raise ValidationError(f"matmul: activation='swiglu' takes B's {N} columns as [gate | up] halves: N must be "
                              "even")
    result_shape = (*batch_shape, M, N // 2 if activation == SWIGLU else N)
    if C is not None and C.shape != result_shape:
        raise ValidationError(f"matmul: out has shape {C.shape}, the product is {result_shape}")
    if any(n < 1 for n in batch_shape):
        raise ValidationError(f"matmul: batch dimensions must be >= 1, got the batch shape {batch_shape}")
    batch, bstrides = (), ((), (), ())
    if batch_shape:
        if math.prod(B.shape[:-2]) == 1 and all(op is None or _folds(op) for op in (A, C)):
            # (..., M, K) @ (K, N) as torch.matmul broadcasts a 2-D B: the batch folds into rows
            for op in (A, C):
                if op is not None:
                    _fold_rows(op)
            _squeeze(B)
        else:
            batch, bstrides = _batch_levels(result_shape, A, B, C)
    if A.dtype != B.dtype:
        raise ValidationError(f"matmul: dtype mismatch: A is {A.dtype}, B is {B.dtype}")
    dtype = A.dtype
    if C is not None and C.dtype != dtype:
        raise ValidationError(f"matmul: out has dtype {C.dtype}, the inputs are {dtype} (out must match)")
    choices = ACCUMULATE[dtype]
    acc = choices[0] if accumulate is None else accumulate
    if acc not in choices:
        raise ValidationError(f"matmul: accumulate={accumulate!r} is not available for {dtype} inputs; "
                              f"choose one of {list(choices)}")
    M = A.shape[-2]  # (the batch folded into rows, if it did)
    if min(M, N, K) < 1:
        raise ValidationError(f"matmul: M, N, K must be >= 1, got M={M}, N={N}, K={K}")
    if max(M, N, K) > _I32:
        raise ValidationError(f"matmul: dimensions above 2^31-1 are not supported (M={M}, N={N}, K={K})")
    devices = {op.device for op in (A, B, C, Bias) if op is not None and op.device is not None}
    if len(devices) > 1:
        raise ValidationError(f"matmul: the arrays are on different GPUs {sorted(devices)}: move them to one")
    for op in (A, B, C):
        if op is None or op.host is not None:
            continue
        # the matrix strides go to the kernels as int32, batch strides (any size) as int64
        if any(s % op.itemsize for s in op.strides) or any(abs(s // op.itemsize) > _I32 for s in op.strides[-2:]):
            raise ValidationError(f"matmul: {op.what} has byte strides {op.strides}, not whole "
                                  f"{op.itemsize}-byte elements (below 2^31 for the last two dimensions)")
    bias_axis = _validate_bias(Bias, dtype, M, N, bool(batch_shape)) if Bias is not None else None
    if C is not None:
        validate_out(C, (A, B) if Bias is None else (A, B, Bias))
    alpha_f, beta_f, scale_f = (fp32_scalar(name, x) for name, x in (("alpha", alpha), ("beta", beta),
                                                                       ("scale", scale)))
    epi = Epilogue(bias_axis, activation, scale_f)
    epi = None if epi == Epilogue() else epi
    name = None
    if kernel != "auto":
        entry = get_registry().get(kernel)  # UnknownKernelError with close matches
        if entry.is_baseline:
            raise ValidationError(f"matmul: {kernel} is a cuBLAS baseline, not a kernel of this build")
        if entry.dtype != dtype:
            raise ValidationError(f"matmul: kernel {entry.name} takes {entry.dtype}, the inputs are {dtype}")
        name = entry.name
    device = devices.pop() if devices else 0
    frameworks = tuple(dict.fromkeys(op.framework for op in (A, B, C, Bias) if op is not None and op.framework))
    s = given if explicit else ops.framework_stream(frameworks, device)
    return Call(a=A, b=B, c=C, M=M, N=N, K=K, dtype=dtype, acc=acc, alpha=alpha_f, beta=beta_f, kernel=name,
                device=device, stream=s, explicit_stream=explicit, frameworks=frameworks, result_shape=result_shape,
                batch=batch, bstrides=bstrides, bias=Bias, epi=epi)


def _broadcast_batch(A: Operand, B: Operand) -> tuple[int, ...]:
    """The batch shape of A @ B by torch.matmul's (numpy's) rules: the batch dimensions (all but the
    last two) aligned from the right, each pair equal or one of them 1 (or missing)."""
    ba, bb = A.shape[:-2], B.shape[:-2]
    n = max(len(ba), len(bb))
    out = []
    for i in range(n):
        x = ba[i - n + len(ba)] if i >= n - len(ba) else 1
        y = bb[i - n + len(bb)] if i >= n - len(bb) else 1
        if x != y and x != 1 and y != 1:
            raise ValidationError(
                f"matmul: the batch dimensions of A {A.shape} and B {B.shape} do not broadcast: dimension "
                f"{i - n + len(ba)} of A is {x}, dimension {i - n + len(bb)} of B is {y} (each pair must be equal, "
                "or one of them 1)")
        out.append(y if x == 1 else x)
    return tuple(out)


def _folds(op: Operand) -> bool:
    """Whether an (..., M, K) operand's batch dimensions fold into its rows without a copy (a host array
    is copied dense anyway)."""
    if op.host is not None:
        return True
    dims = [(n, s) for n, s in zip(op.shape[:-1], op.strides[:-1]) if n > 1]
    return all(outer[1] == inner[1] * inner[0] for outer, inner in zip(dims, dims[1:]))


def _squeeze(op: Operand) -> None:
    """View an operand whose batch dimensions are all 1 as its 2-D matrix."""
    op.shape, op.strides = op.shape[-2:], op.strides[-2:]


def _element_strides(op: Operand) -> tuple[int, ...]:
    """The operand's strides in elements (a host array's: those of the dense copy it is uploaded as)."""
    if op.host is not None:
        return c_strides(op.shape, 1)
    return tuple(s // op.itemsize for s in op.strides)


def _batch_levels(result_shape: tuple[int, ...], A: Operand, B: Operand, C: Operand | None
                  ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """The batch as levels: (counts, (A's, B's, C's element strides per level)), outermost first. Size-1
    dimensions go; adjacent dimensions that every operand steps through evenly merge into one level;
    the kernels take the last two (KERNEL_LEVELS), at most MAX_GRID_BATCH matrices: the two levels whose
    product is largest within that, a level above it split by its largest divisor within it, and the
    rest become a loop of launches (problem.Problem.loop). A missing out is a new dense result."""
    batch_shape = result_shape[:-2]
    nb = len(batch_shape)
    per_op = []
    for op, shape in ((A, A.shape), (B, B.shape), (C, result_shape)):
        strides = _element_strides(op) if op is not None else c_strides(result_shape, 1)
        lead = nb - (len(shape) - 2)
        per_op.append([0 if d < lead or shape[d - lead] == 1 else strides[d - lead] for d in range(nb)])
    levels: list[tuple[int, tuple[int, ...]]] = []
    for d, n in enumerate(batch_shape):
        if n == 1:
            continue
        st = tuple(op[d] for op in per_op)
        if levels and all(so == si * n for so, si in zip(levels[-1][1], st)):
            levels[-1] = (levels[-1][0] * n, st)  # the outer level steps over the whole inner one
        else:
            levels.append((n, st))
    split: list[tuple[int, tuple[int, ...]]] = []
    for n, st in levels:  # a level above the grid's limit: (n / q) x q, q its largest divisor within it
        if n > MAX_GRID_BATCH:
            q = next(q for q in range(MAX_GRID_BATCH, 0, -1) if n % q == 0)
            split += [(n // q, tuple(s * q for s in st)), (q, st)]
        else:
            split.append((n, st))
    best = max(((i, j) for i in range(len(split)) for j in range(i, len(split))
                if (split[i][0] * split[j][0] if i != j else split[i][0]) <= MAX_GRID_BATCH),
               key=lambda ij: (split[ij[0]][0] * (split[ij[1]][0] if ij[0] != ij[1] else 1), ij[::-1]))
    kernel = sorted(set(best))
    ordered = [lv for k, lv in enumerate(split) if k not in kernel] + [split[k] for k in kernel]
    if len(kernel) < KERNEL_LEVELS < len(ordered) + 1:  # the kernel's levels are the last two: pad with a 1
        ordered.insert(len(ordered) - len(kernel), (1, (0, 0, 0)))
    counts = tuple(n for n, _ in ordered)
    return counts, tuple(tuple(st[k] for _, st in ordered) for k in range(3))


def _fold_rows(op: Operand) -> None:
    """View an (..., M, K) operand that _folds() as (prod(...) * M) x K in place (a host array is copied
    dense anyway)."""
    *lead, cols = op.shape
    rows = math.prod(lead)
    if op.host is None:
        dims = [(n, s) for n, s in zip(lead, op.strides[:-1]) if n > 1]
        rs = dims[-1][1] if dims else cols * op.itemsize
        op.shape, op.strides = (rows, cols), (rs, op.strides[-1])
    else:
        op.shape, op.strides = (rows, cols), (cols * op.itemsize, op.itemsize)


FP32_MAX = 3.4028234663852886e38


def fp32_scalar(name: str, x: Any) -> float:
    """alpha or beta as the kernels take it: a finite real number representable as an fp32."""
    if isinstance(x, (bool, str, bytes)) or not hasattr(x, "__float__"):
        raise ValidationError(f"matmul: {name} must be a real number, got {x!r}")
    try:
        value = float(x)
    except (TypeError, ValueError, OverflowError):
        raise ValidationError(f"matmul: {name} must be a real number, got {x!r}") from None
    if not math.isfinite(value) or abs(value) > FP32_MAX:
        raise ValidationError(f"matmul: {name}={x!r} is not a finite fp32 value (|x| <= {FP32_MAX:.4g})")
    return value


def _validate_bias(bias: Operand, dtype: str, M: int, N: int, batched: bool) -> str:
    """Which axis a bias runs along: "col" for one value per column of the product ((N,) or (1, N), as
    nn.Linear's bias; SwiGLU: the GEMM's N = 2F), "row" for one per row ((M, 1), unbatched products only).
    Leading size-1 dimensions are allowed; the bias is shared by every matrix of a batch."""
    if bias.dtype != dtype:
        raise ValidationError(f"matmul: bias has dtype {bias.dtype}, the inputs are {dtype} (bias must match)")
    shape = tuple(bias.shape)
    core = shape
    while len(core) > 2 and core[0] == 1:
        core = core[1:]
    isz = bias.itemsize
    if core == (N,) or (len(core) == 2 and core == (1, N)):
        axis, stride = "col", bias.strides[-1] if N > 1 else isz
    elif len(core) == 2 and core == (M, 1) and not batched:
        axis, stride = "row", bias.strides[-2] if M > 1 else isz
    else:
        rule = "(M, 1) per row or " if not batched else ""
        raise ValidationError(f"matmul: bias has shape {shape}; it must be {rule}(N,) / (1, N) per column with N = {N} "
                              f"(the product is {M} x {N}{', batched: a row bias is not supported' if batched else ''}); "
                              "add a full matrix with out= and beta=1")
    if stride % isz or stride <= 0 or stride // isz > _I32:
        raise ValidationError(f"matmul: bias has byte strides {bias.strides}: its values must be a positive "
                              f"whole number of {isz}-byte elements apart")
    # one dense vector view: the kernels read bias[i * bias_stride]
    bias.shape, bias.strides = (1, N if axis == "col" else M), (0, stride)
    return axis


def validate_out(C: Operand, inputs: tuple) -> None:
    if _self_overlapping(C):
        raise ValidationError(f"matmul: out's strides {C.strides} make distinct elements share memory")
    if C.readonly:
        raise ValidationError("matmul: out (numpy) is read-only" if C.host is not None else "matmul: out is read-only")
    if C.framework == "torch" and C.obj.requires_grad:
        raise ValidationError("matmul: out requires grad; matmul writes it in place, outside autograd "
                              "(pass a tensor that does not require grad, or no out)")
    for op in inputs:
        if C.host is not None or op.host is not None:
            if C.host is not None and op.host is not None and np.shares_memory(C.host, op.host):
                raise ValidationError(f"matmul: out overlaps {op.what} in memory; it must not alias an input")
            continue
        lo, hi = byte_extent(C.ptr, C.shape, C.strides, C.itemsize)
        olo, ohi = byte_extent(op.ptr, op.shape, op.strides, op.itemsize)
        if lo < ohi and olo < hi:
            raise ValidationError(f"matmul: out overlaps {op.what} in memory; it must not alias an input")


def problem_of(call: Call) -> Problem:
    """The Problem of a validated call. Host (numpy) operands are copied into dense buffers, and a
    missing out is allocated dense: both are seen as row-major at 256-byte alignment. A batched call's
    views carry their batch strides, and their alignment is what every matrix of the batch has."""
    isz = ITEMSIZE[call.dtype]

    def view(op: Operand | None, base: str, rows: int, cols: int, bs: tuple[int, ...]) -> View:
        if op is None or op.host is not None:
            rs, cs, align = cols, 1, 256
        else:
            rs, cs, align = op.strides[-2] // isz, op.strides[-1] // isz, ptr_alignment(op.ptr)
        return View.make(base, rows, cols, rs, cs, batch_align(align, bs, isz), bs)

    bsa, bsb, bsc = call.bstrides
    bias = None
    if call.bias is not None:
        op = call.bias
        stride = 1 if op.host is not None else op.strides[1] // isz
        align = 256 if op.host is not None else ptr_alignment(op.ptr)
        bias = View.make("bias", 1, op.shape[1], op.shape[1] * stride, stride, align)
    return Problem(call.dtype, call.acc, view(call.a, "A", call.M, call.K, bsa), view(call.b, "B", call.K, call.N, bsb),
                   view(call.c, "C", call.M, call.n_out, bsc), plain=(call.alpha == 1.0 and call.beta == 0.0),
                   beta_zero=(call.beta == 0.0), batch=call.batch, epi=call.epi, bias=bias)


# ---------------------------------------------------------------------------------------------------
# the one cache: recipes chosen, executions, validated calls
# ---------------------------------------------------------------------------------------------------

def _is_capturing(stream: int) -> bool:
    drv = driver()
    status = check(drv.cuStreamIsCapturing(drv.CUstream(stream)), "cuStreamIsCapturing")
    return int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


def _may_capture(stream: int) -> bool:
    """True unless `stream` is certainly not capturing (an error, such as the legacy stream's implicit
    capture, counts as capturing): a graph launch may not be captured (CUDA 13: STREAM_CAPTURE_UNSUPPORTED,
    and the capture is lost), so a capturing stream gets the kernel launches instead."""
    lib = native()
    if lib is None:
        try:
            return _is_capturing(stream)
        except DriverError:
            return True
    status = ctypes.c_int()
    return lib.cuStreamIsCapturing(stream or None, status) != 0 or status.value != 0


class PlanCache:
    """Recipes chosen per (device, problem, kernel), executions per (device, stream, problem, route) and
    validated repeat calls, under one lock; clear() frees every execution's temporaries."""

    MAX_EXECUTIONS = 16
    MAX_RECIPES = 1024
    MAX_CALLS = 256

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.recipes: OrderedDict = OrderedDict()
        self.executions: OrderedDict = OrderedDict()
        self.calls: dict = {}  # (a plain dict: the repeat call's one lookup; oldest first)

    def recipe(self, prob: Problem, device: int, kernel: str | None) -> Recipe:
        """The autotuned route if the tuning cache has one for this device and build, else the cost
        model's cheapest."""
        key = (device, prob.key_str, kernel)
        with self.lock:
            hit = self.recipes.get(key)
            if hit is not None:
                return hit
        dev = get_device(device)
        manifest = get_registry().manifest
        recipe = None
        if kernel is None:
            route = tuning.lookup(dev.info, manifest, prob.key_str)
            if route is not None:
                recipe = planner.recipe_for(route, prob, manifest)
        if recipe is None:
            recipe = planner.heuristic_recipe(prob, manifest, dev.info.cc, dev.info.sm_count, kernel)
        if recipe is None and prob.swiglu and prob.batched:
            raise ValidationError(f"matmul: a batched activation='swiglu' runs on the fused Hopper kernels only: out "
                                  f"row-major with rows of a multiple of 16 bytes, on an sm_90 GPU ({prob.key()}); "
                                  "fold the batch into rows, or call it per matrix")
        if recipe is None:
            what = f"kernel {kernel}" if kernel else "any kernel of this build"
            raise ValidationError(f"matmul: {what} cannot run {prob.key()} on {dev.info.name} "
                                  f"(sm_{dev.info.cc[0]}{dev.info.cc[1]}); rebuild with build_kernels.py")
        with self.lock:
            self.recipes[key] = recipe
            if len(self.recipes) > self.MAX_RECIPES:
                self.recipes.popitem(last=False)
        return recipe

    def execution(self, recipe: Recipe, prob: Problem, device: int, stream: int) -> Execution:
        key = (device, stream, prob.key_str, recipe.route)
        with self.lock:
            ex = self.executions.get(key)
            if ex is not None:
                self.executions.move_to_end(key)
                return ex
        if recipe.temps and _is_capturing(stream):
            raise ValidationError("matmul: this call needs temporary buffers that are allocated on its first run; "
                                  "call it once outside the CUDA-graph capture, then capture it")
        ex = Execution(recipe, prob.dtype, device, get_registry().manifest)
        with self.lock:
            self.executions[key] = ex
            while len(self.executions) > self.MAX_EXECUTIONS:
                self.executions.popitem(last=False)[1].close()
        return ex

    def remember(self, key: tuple, bound: "Bound") -> None:
        with self.lock:
            self.calls[key] = bound
            if len(self.calls) > self.MAX_CALLS:
                del self.calls[next(iter(self.calls))]

    def clear(self) -> None:
        """Forget every choice and call, and free every execution's temporaries."""
        with self.lock:
            for ex in self.executions.values():
                ex.close()
            self.executions.clear()
            self.recipes.clear()
            self.calls.clear()


plans = PlanCache()


# ---------------------------------------------------------------------------------------------------
# running a validated call
# ---------------------------------------------------------------------------------------------------

class LastCall:
    """What the last run of a Bound launched: its (A, B, C addresses, stream), the execution, the packed
    parameters (kept alive for the bound launches; None where the launch went through the execution's
    reusable arrays, Execution.transient, which the next call may rewrite), (bound launch, KernelLaunch) per
    step, and once the same call has repeated GRAPH_AFTER_REPEATS times (where a graph pays: Bound.graph_worth_it),
    the CUDA graph of those launches."""

    __slots__ = ("key", "execution", "packed", "launches", "repeats", "graph", "graph_launch")

    def __init__(self, key: tuple, execution: Any, packed: Any, launches: tuple):
        self.key, self.execution, self.packed, self.launches = key, execution, packed, launches
        self.repeats = 0
        self.graph: LaunchGraph | None = None
        self.graph_launch: Any = None


class Bound:
    """A validated call, ready to run again on operands of the same identity: the per-call work is
    the stream, the result (if new), the parameter lookup and the launches."""

    __slots__ = ("call", "problem", "recipe", "dev", "device", "fixed_stream", "stream_fn", "executions",
                 "result_like", "alpha", "beta", "waits", "extents", "last", "graph_pays")

    def __init__(self, call: Call, problem: Problem, recipe: Recipe):
        self.call, self.problem, self.recipe = call, problem, recipe
        self.dev = get_device(call.device)
        self.device = call.device
        self.alpha, self.beta = call.alpha, call.beta
        self.fixed_stream = call.stream
        # without stream=, the framework's current stream is read on every call (it can change)
        fw = next((f for f in call.frameworks if f in ops.FRAMEWORK_STREAM), None)
        self.stream_fn = None if call.explicit_stream or fw is None else fw
        self.executions: dict[int, Execution] = {}
        self._describe(call)
        # stream= given on framework operands: the framework's current stream is a producer to wait for
        self.waits = bool(call.explicit_stream and call.frameworks)
        # byte ranges of A, B and out around their addresses: a repeat call with an out checks that
        # the new addresses do not make out overlap an input (the one check that reads addresses)
        self.extents = tuple(byte_extent(0, op.shape, op.strides, op.itemsize) if op is not None else None
                             for op in (*call.operands, call.bias))
        # a loop on the same buffers launches without looking anything up, and after GRAPH_AFTER_REPEATS
        # repeats through one CUDA graph where that pays (graph_worth_it)
        self.last = LastCall((None,), None, None, ())
        self.graph_pays: bool | None = None  # decided at the first repeat past GRAPH_AFTER_REPEATS

    def _describe(self, call: Call) -> None:
        self.call = call
        self.result_like = next((op for op in (call.a, call.b) if op.framework), None)

    def forget_arrays(self) -> None:
        """Drop the first call's arrays (after run_full): a remembered call keeps descriptions only."""
        self._describe(self.call.described())

    def stream(self) -> int:
        fw = self.stream_fn
        return self.fixed_stream if fw is None else ops.FRAMEWORK_STREAM[fw](self.device)

    def execution(self, stream: int) -> Execution:
        ex = self.executions.get(stream)
        if ex is None or ex.closed:
            ex = self.executions[stream] = plans.execution(self.recipe, self.problem, self.device, stream)
        return ex

    def new_result(self, stream: int) -> Any:
        c = self.call
        if self.result_like is not None:
            return ops.new_result(self.result_like, c.result_shape, c.device, stream, c.explicit_stream)
        if stream and _is_capturing(stream):
            raise ValidationError("matmul: pass out= when capturing a CUDA graph (the result cannot be allocated "
                                  "inside the capture)")
        return DeviceArray.empty(c.result_shape, c.dtype, c.device)

    def run(self, pa: int, pb: int, out: Any, pc: int, pbias: int = 0) -> Any:
        """Launch on A, B (and the bias) at pa, pb (pbias) into `out` at pc (None: a new result). Returns
        the result."""
        fw = self.stream_fn
        s = self.fixed_stream if fw is None else ops.FRAMEWORK_STREAM[fw](self.device)
        if self.waits:
            ops.order_after_producers(self.call.operands, s, self.device, True)
        if out is None:
            out = self.new_result(s)
            pc = out.data_ptr() if self.result_like is not None and self.result_like.framework == "torch" \
                else ops.result_ptr(out)
        else:
            (alo, ahi), (blo, bhi), (clo, chi), bias_ext = self.extents
            if pc + clo < pa + ahi and pa + alo < pc + chi or pc + clo < pb + bhi and pb + blo < pc + chi or \
                    bias_ext is not None and pc + clo < pbias + bias_ext[1] and pbias + bias_ext[0] < pc + chi:
                raise ValidationError("matmul: out overlaps an input in memory; it must not alias an input")
        last = self.last
        key = (pa, pb, pc, pbias, s)
        if last.key == key and last.packed is not None and not last.execution.closed:
            last.repeats += 1
            if not _may_capture(s):  # (a graph launch may not be captured)
                if last.graph is None and last.repeats >= GRAPH_AFTER_REPEATS and self.graph_worth_it(last):
                    with plans.lock:  # built once: a graph in use is never replaced (or destroyed)
                        if last.graph is None:
                            graph = LaunchGraph(list(zip(last.execution.launches, last.packed)),
                                                last.execution.dependencies())
                            last.graph_launch, last.graph = graph.bind(s), graph
                if last.graph is not None:  # the same buffers again: one graph launch
                    code = last.graph_launch()
                    if code:
                        self._failed(code, last.graph, last.graph_launch)
                    return out
            launches = last.launches
        else:
            ex = self.executions.get(s)
            if ex is None or ex.closed:
                ex = self.execution(s)
            # new addresses: parameter arrays set in place; the same ones twice in a row: packed for keeps (the
            # repeat path above, then a graph)
            if last.key != key:
                launches = ex.transient((pa, pb, pc, pbias), self.alpha, self.beta, s)
                self.last = LastCall(key, ex, None, ())
            else:
                packed = ex.pack((pa, pb, pc, pbias), self.alpha, self.beta)
                launches = ex.bind(packed, s)
                self.last = LastCall(key, ex, packed, launches)
                self.last.repeats = 1  # (a repeat of the transient launch: it counts toward the graph)
        for launch, kernel in launches:
            code = launch()
            if code:
                self._failed(code, kernel, launch)
        return out

    def graph_worth_it(self, last: LastCall) -> bool:
        """Whether repeats of this call launch through a CUDA graph: always for a route of several launches, for
        one kernel where the cost model puts it under GRAPH_BELOW_US (decided once)."""
        pays = self.graph_pays
        if pays is None:
            pays = len(last.launches) > 1 or planner.estimate_us(
                self.recipe, self.problem, get_registry().manifest, self.dev.info.cc,
                self.dev.info.sm_count) < GRAPH_BELOW_US
            self.graph_pays = pays
        return pays

    def _failed(self, code: int, kernel: Any, launch: Any) -> None:
        """A launch failed: where another context is current on this thread, make ours current and
        retry it; otherwise raise."""
        try:
            kernel.check_launch(code)
        except DriverError as exc:
            if exc.result_name not in CONTEXT_ERRORS:
                raise
            self.dev.make_current()
            kernel.check_launch(launch())

    def run_full(self) -> Any:
        """The first run of a call: host operands uploaded, producers' streams waited for, numpy results
        copied back."""
        c = self.call
        s = self.stream()
        ex = self.execution(s)
        ops.order_after_producers(c.operands, s, c.device, c.explicit_stream)
        dev = self.dev
        dev.make_current()
        # host operands (numpy) are uploaded dense; a bias of shape (N,), (1, N) or (M, 1) as its vector
        arrays = [DeviceArray.from_numpy(np.asarray(op.host).reshape(op.shape), c.device) if op.host is not None
                  else None for op in c.inputs]
        if any(x is not None for x in arrays):  # the pageable upload may still be in flight for another stream
            dev.synchronize()
        pa, pb, pbias = [x.ptr if x is not None else op.ptr for x, op in zip(arrays, c.inputs)] + [0] * (3 - len(arrays))
        host_out = c.c is not None and c.c.host is not None
        if c.c is not None and not host_out:
            result, pc = c.c.obj, c.c.ptr
        elif host_out:
            result = DeviceArray.empty(c.result_shape, c.dtype, c.device)
            if c.beta != 0.0:  # numpy out with beta: its values take part
                result.copy_from_numpy(c.c.host)
            pc = result.ptr
        else:
            result = self.new_result(s)
            pc = ops.result_ptr(result)
        ex.launch(ex.pack((pa, pb, pc, pbias), c.alpha, c.beta), s)
        if host_out or (c.c is None and c.a.host is not None and c.b.host is not None):
            check(driver().cuStreamSynchronize(driver().CUstream(s)), "cuStreamSynchronize")
            host = result.to_numpy()
            result.close()
            if host_out:
                np.copyto(c.c.host, host)
                return c.c.obj
            return host
        return result


# ---------------------------------------------------------------------------------------------------
# the public objects
# ---------------------------------------------------------------------------------------------------

class Matmul:
    """C = alpha * A.B + beta * C, described once (validated, planned), run any number of times.

    mm = Matmul(a, b, out=None, *, alpha=1.0, beta=0.0, bias=None, activation=None, scale=1.0,
                accumulate=None, kernel="auto", stream=None)
    mm.explain()   mm.autotune(...)   mm() or mm(a2, b2, out2, bias=bias2, stream=...)
    """

    def __init__(self, a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0, bias: Any = None,
                 activation: str | None = None, scale: float = 1.0, accumulate: str | None = None,
                 kernel: str = "auto", stream: Any = None):
        self._args = (a, b, out, bias)
        self._stream = stream  # the stream a call without stream= runs on
        self._options = dict(alpha=alpha, beta=beta, accumulate=accumulate, kernel=kernel, activation=activation,
                             scale=scale)
        self.call = validate_call(a, b, out, alpha, beta, accumulate, kernel, stream, bias, activation, scale)
        self.problem = problem_of(self.call)
        self.recipe = plans.recipe(self.problem, self.call.device, self.call.kernel)
        self._bound: dict[tuple, Bound] = {}

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.call.M, self.call.N, self.call.K

    def explain(self) -> str:
        """What runs, in one line: the kernel and the glue around it."""
        return planner.describe(self.recipe)

    def bind(self, call: Call) -> Bound:
        """A runnable Bound for a call of this description (raises if it is another problem)."""
        prob = problem_of(call)
        if prob.key_str != self.problem.key_str or call.kernel != self.call.kernel:
            raise ValidationError(f"matmul: these operands describe {prob.key()}, this Matmul was planned for "
                                  f"{self.problem.key()}: make a new Matmul for them")
        return Bound(call, self.problem, self.recipe)

    def __call__(self, a: Any = None, b: Any = None, out: Any = None, *, bias: Any = None, stream: Any = None) -> Any:
        """Run on new buffers of the same description (no arguments: the ones it was made with), on
        `stream`, else the stream it was made with."""
        if a is None and b is None and out is None and bias is None:
            a, b, out, bias = self._args
        if stream is None:
            stream = self._stream
        try:
            pa, pb, pc, key = call_identity(a, b, out, (stream,))
            pbias, key = with_bias(key, bias)
            bound = self._bound[key]
        except (KeyError, TypeError):
            bound = None
        if bound is not None:
            return bound.run(pa, pb, out, pc, pbias)
        o = self._options
        bound = self.bind(validate_call(a, b, out, o["alpha"], o["beta"], o["accumulate"], o["kernel"], stream, bias,
                                        o["activation"], o["scale"]))
        result = bound.run_full()
        key = call_cache_key(a, b, out, stream, bias=bias)
        if key is not None:
            bound.forget_arrays()
            self._bound[key] = bound
        return result

    def autotune(self, *, candidates: int = 8, iters: int = 10, warmup: int = 2, save: bool = True) -> list[dict]:
        """Time up to `candidates` recipes (the cost model's best, up to three of every kernel kind) on this
        call's operands, verify each on sampled rows, keep the fastest correct one in the tuning cache
        (save=True) and use it from now on. Returns [{"route", "recipe", "us", "error", "estimate_us"}],
        fastest first. `out` is never written."""
        c = self.call
        if self.problem.epi is not None:  # (the timing runs pass no bias: the kernels would read a null one)
            raise ValidationError("matmul: autotune does not take a call with bias=, activation= or scale= yet; "
                                  "its plan is the cost model's choice")
        dev = get_device(c.device)
        manifest = get_registry().manifest
        keep = []
        refs = []
        for op in c.operands:  # (a host operand or a missing out: a dense device copy, as the call's own plan has it)
            if op is None or op.host is not None:
                shape = op.shape if op is not None else (c.result_shape if c.batch else (c.M, c.N))
                arr = DeviceArray.empty(shape, c.dtype, c.device)
                if op is not None and op.what != "out":
                    arr.copy_from_numpy(np.asarray(op.host).reshape(shape))
                elif op is None or op.what == "out":
                    arr.fill_bytes(0)
                keep.append(arr)
                refs.append(ArrayRef(arr.ptr, shape, arr.strides, c.dtype))
            else:
                refs.append(ArrayRef(op.ptr, op.shape, op.strides, c.dtype))
        try:
            ranked = planner.ranked_recipes(self.problem, manifest, dev.info.cc, dev.info.sm_count)
            chosen = tuning.choose_candidates(ranked, manifest, candidates)
            results = tuning.time_routes(chosen, tuple(refs), c.dtype, c.acc, c.alpha, c.beta, c.device, c.stream,
                                         manifest, iters=iters, warmup=warmup,
                                         c_is_scratch=c.c is None or c.c.host is not None,
                                         batch=(c.batch, c.bstrides))
        finally:
            dev.synchronize()
            for arr in keep:
                arr.close()
        if results and np.isfinite(results[0]["us"]):
            if save:
                tuning.record(dev.info, manifest, self.problem.key_str, results)
                plans.clear()  # every later call sees the new winner
            self.recipe = results[0]["recipe"]
            self._bound.clear()
        return results


def call_identity(a: Any, b: Any, out: Any, options: tuple) -> tuple:
    """(A, B, out addresses, the key a validated call is filed under): each operand's description and
    address alignment (the low 8 bits: all the planner reads of an address), then the options. Raises
    KeyError for an operand without a cheap identity (operands.KEYERS); the key may be unhashable."""
    keys = ops.KEYERS
    pa, da = keys[type(a)](a)
    pb, db = keys[type(b)](b)
    pc, dc = keys[type(out)](out)
    return pa, pb, pc, (da, pa & 255, db, pb & 255, dc, pc & 255, *options)


def matmul(a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0, bias: Any = None,
           activation: str | None = None, scale: float = 1.0, accumulate: str | None = None, kernel: str = "auto",
           stream: Any = None) -> Any:
    """C = scale * activation(alpha * a.b + bias) + beta * C (see the module docstring and epilogue.py).
    Returns `out`, or the new result."""
    try:  # a repeat call: the operands' descriptions and the options find the validated call
        pa, pb, pc, key = call_identity(a, b, out, (alpha, beta, activation, scale, accumulate, kernel, stream))
        pbias, key = with_bias(key, bias)
        bound = plans.calls[key]
    except (KeyError, TypeError):  # new, uncacheable or unhashable: validate in full
        return _first_call(a, b, out, alpha, beta, accumulate, kernel, stream, bias, activation, scale)
    return bound.run(pa, pb, out, pc, pbias)


def with_bias(key: tuple, bias: Any) -> tuple[int, tuple]:
    """(the bias's address, the repeat-call key extended by its description and alignment); (0, key) without
    a bias. Raises KeyError for a bias without a cheap identity (operands.KEYERS)."""
    if bias is None:
        return 0, key
    pbias, dbias = ops.KEYERS[type(bias)](bias)
    return pbias, (key, dbias, pbias & 255)


def call_cache_key(a: Any, b: Any, out: Any, *options: Any, bias: Any = None) -> tuple | None:
    """The key a call with these operands and options is remembered by (call_identity, then the bias's
    description and alignment where there is one), or None if it has none (an operand without a cheap
    identity, an unhashable option)."""
    if any(ops.call_key(x) is None for x in (a, b, out, bias)):  # (call_key learns the operands' types)
        return None
    key = with_bias(call_identity(a, b, out, options)[3], bias)[1]
    try:
        hash(key)
    except TypeError:  # an unhashable stream object or scalar: every call takes the full path
        return None
    return key


def repeat_key(a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0, bias: Any = None,
               activation: str | None = None, scale: float = 1.0, accumulate: str | None = None, kernel: str = "auto",
               stream: Any = None) -> tuple | None:
    """The key `matmul` files a call with these arguments under in plans.calls (None: it is not kept)."""
    return call_cache_key(a, b, out, alpha, beta, activation, scale, accumulate, kernel, stream, bias=bias)


def _first_call(a: Any, b: Any, out: Any, alpha: Any, beta: Any, accumulate: str | None, kernel: str,
                stream: Any, bias: Any = None, activation: str | None = None, scale: Any = 1.0) -> Any:
    mm = Matmul(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation, scale=scale,
                accumulate=accumulate, kernel=kernel, stream=stream)
    bound = Bound(mm.call, mm.problem, mm.recipe)
    result = bound.run_full()
    key = repeat_key(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation, scale=scale,
                     accumulate=accumulate, kernel=kernel, stream=stream)
    if key is not None:
        bound.forget_arrays()
        plans.remember(key, bound)
    return result


def explain(a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0, bias: Any = None,
            activation: str | None = None, scale: float = 1.0, accumulate: str | None = None,
            kernel: str = "auto") -> str:
    """What matmul would run for these arguments, in one line (nothing is launched)."""
    return Matmul(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation, scale=scale,
                  accumulate=accumulate, kernel=kernel).explain()


def autotune(a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
             accumulate: str | None = None, stream: Any = None, candidates: int = 8, iters: int = 10,
             warmup: int = 2, save_result: bool = True) -> list[dict]:
    """Matmul(a, b, out, ...).autotune(...): time the candidate recipes, cache the fastest correct one."""
    mm = Matmul(a, b, out, alpha=alpha, beta=beta, accumulate=accumulate, stream=stream)
    return mm.autotune(candidates=candidates, iters=iters, warmup=warmup, save=save_result)
