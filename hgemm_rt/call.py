"""A matmul call validated: the operands described (operands.describe, the one operand type), every rule
checked (validate.py, the rules every front door shares; here the ones of a matmul: shapes, broadcasting,
batch levels, bias), and the Problem the planner takes. Nothing here touches the GPU."""
from __future__ import annotations

import math
from typing import Any

from . import operands as ops
from .device import stream_handle
from .epilogue import SWIGLU, Epilogue
from .errors import ValidationError
from .memory import c_strides
from .operands import Operand
from .problem import ACCUMULATE, ITEMSIZE, KERNEL_LEVELS, MAX_GRID_BATCH, Problem, View, batch_align, ptr_alignment
from .registry import get_registry
from .validate import I32_MAX, accumulate_code, check_activation, check_option, fp32_scalar, one_device, \
    validate_out


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


def validate_call(a: Any, b: Any, out: Any, alpha: Any, beta: Any, accumulate: str | None, kernel: str,
                  stream: Any, bias: Any = None, activation: str | None = None, scale: Any = 1.0) -> Call:
    """Every check of a matmul call, in the order a caller would fix them: the options' types, the operands
    (shapes, batch, dtypes, strides, devices, bias, out), the scalars, the kernel."""
    accumulate = accumulate_code(accumulate, "matmul")
    check_option("kernel", kernel, "matmul", allow_none=False)
    check_option("activation", activation, "matmul")
    explicit = stream is not None
    given = stream_handle(stream) if explicit else ops.implied_stream((a, b, out, bias))
    A, B = ops.describe(a, "A", given), ops.describe(b, "B", given)
    C = ops.describe(out, "out", given) if out is not None else None
    Bias = ops.describe(bias, "bias", given) if bias is not None else None
    check_activation(activation, "matmul")
    N, K, result_shape, batch, bstrides = _shapes(A, B, C, activation)
    dtype, acc = _dtypes(A, B, C, accumulate)
    M = A.shape[-2]  # (the batch folded into rows, if it did)
    if min(M, N, K) < 1:
        raise ValidationError(f"matmul: M, N, K must be >= 1, got M={M}, N={N}, K={K}")
    if max(M, N, K) > I32_MAX:
        raise ValidationError(f"matmul: dimensions above 2^31-1 are not supported (M={M}, N={N}, K={K})")
    device = one_device((A, B, C, Bias), "matmul")
    for op in (A, B, C):
        if op is None or op.host is not None:
            continue
        # the matrix strides go to the kernels as int32, batch strides (any size) as int64
        if any(s % op.itemsize for s in op.strides) or any(abs(s // op.itemsize) > I32_MAX for s in op.strides[-2:]):
            raise ValidationError(f"matmul: {op.what} has byte strides {op.strides}, not whole "
                                  f"{op.itemsize}-byte elements (below 2^31 for the last two dimensions)")
    bias_axis = _validate_bias(Bias, dtype, M, N, bool(result_shape[:-2])) if Bias is not None else None
    if C is not None:
        validate_out(C, (A, B) if Bias is None else (A, B, Bias))
    alpha_f, beta_f, scale_f = (fp32_scalar(name, x) for name, x in (("alpha", alpha), ("beta", beta),
                                                                       ("scale", scale)))
    epi = Epilogue(bias_axis, activation, scale_f)
    device = 0 if device is None else device
    frameworks = tuple(dict.fromkeys(op.framework for op in (A, B, C, Bias) if op is not None and op.framework))
    s = given if explicit else ops.framework_stream(frameworks, device)
    return Call(a=A, b=B, c=C, M=M, N=N, K=K, dtype=dtype, acc=acc, alpha=alpha_f, beta=beta_f,
                kernel=_kernel_name(kernel, dtype), device=device, stream=s, explicit_stream=explicit,
                frameworks=frameworks, result_shape=result_shape, batch=batch, bstrides=bstrides, bias=Bias,
                epi=None if epi == Epilogue() else epi)


def _shapes(A: Operand, B: Operand, C: Operand | None, activation: str | None) -> tuple:
    """(N, K, the result's shape, batch levels, their strides) of A @ B into C: the batch broadcast, and
    folded into rows (the operands viewed so in place: A's rows are then M) where B has none."""
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
    return N, K, result_shape, batch, bstrides


def _dtypes(A: Operand, B: Operand, C: Operand | None, accumulate: str | None) -> tuple[str, str]:
    """(the inputs' dtype, the accumulation): A, B and out of one dtype, an accumulation it allows."""
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
    return dtype, acc


def _kernel_name(kernel: str, dtype: str) -> str | None:
    """The catalogue name of a forced kernel (None for "auto"), which must be a kernel of this build for dtype."""
    if kernel == "auto":
        return None
    entry = get_registry().get(kernel)  # UnknownKernelError with close matches
    if entry.is_baseline:
        raise ValidationError(f"matmul: {kernel} is a cuBLAS baseline, not a kernel of this build")
    if entry.dtype != dtype:
        raise ValidationError(f"matmul: kernel {entry.name} takes {entry.dtype}, the inputs are {dtype}")
    return entry.name


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
    if stride % isz or stride <= 0 or stride // isz > I32_MAX:
        raise ValidationError(f"matmul: bias has byte strides {bias.strides}: its values must be a positive "
                              f"whole number of {isz}-byte elements apart")
    # one dense vector view: the kernels read bias[i * bias_stride]
    bias.shape, bias.strides = (1, N if axis == "col" else M), (0, stride)
    return axis


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
