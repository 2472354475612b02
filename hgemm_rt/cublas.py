"""The cuBLAS baseline through nvmath-python's 1:1 bindings (`nvmath.bindings.cublas`).

cuBLAS is column-major; our matrices are row-major. A row-major M x N matrix is the column-major
N x M matrix of its transpose, so C = A.B is computed as C^T = B^T . A^T: the operands swap places
and m, n swap, with no data movement. A strided batch (cublasGemmStridedBatchedEx) swaps the same way,
each operand's batch stride going with it.
"""
from __future__ import annotations

import atexit
import math
import threading
from typing import Any, NamedTuple

import numpy as np

from .device import get_device, stream_handle
from .errors import DriverError, NoGpuError, ValidationError
from .declaration import LAYOUTS

_lock = threading.Lock()
_handles: dict[int, int] = {}
# what a cuBLAS baseline asks for where nvmath-python is missing (it is not a core dependency)
CUBLAS_EXTRA = ("the cuBLAS baselines need the cublas extra: `pip install hgemm[cublas]` "
                "(or `pip install nvmath-python nvidia-cublas`)")


def _cublas() -> Any:
    try:
        from nvmath.bindings import cublas
    except ImportError as exc:
        raise NoGpuError(f"nvmath-python is not installed ({exc}): {CUBLAS_EXTRA}") from None
    return cublas


def _call(op: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # nvmath raises cuBLASError (or a loader RuntimeError without cuBLAS)
        raise DriverError(f"cuBLAS {op} failed: {exc}", result_name=type(exc).__name__) from exc


def handle(device: int = 0) -> int:
    """One cuBLAS handle per device, created on first use and destroyed at exit."""
    with _lock:
        if device not in _handles:
            get_device(device)  # cuBLAS then adopts our (primary) context
            _handles[device] = _call("create", _cublas().create)
        return _handles[device]


@atexit.register
def _destroy_handles() -> None:
    for h in list(_handles.values()):
        try:
            _cublas().destroy(h)
        except Exception:
            pass
    _handles.clear()


# alpha/beta's host type per accumulation: the compute type's precision (cuBLAS's scale type)
SCALAR = {"f16": np.float16, "f32": np.float32, "tf32": np.float32}


def gemm(a_ptr: int, b_ptr: int, c_ptr: int, M: int, N: int, K: int, *, layout: str, dtype: str, acc: str,
         stream: Any = None, device: int = 0, alpha: float = 1.0, beta: float = 0.0) -> None:
    """C (M x N, row-major) = alpha * A (M x K) . B + beta * C, B K x N (NN) or N x K (TN)."""
    who = "cuBLAS gemm"
    b_order, ldb = b_storage(layout, N, K, who)
    check_matrices(who, M, N, K, "row", K, b_order, ldb, N, a_ptr=a_ptr, b_ptr=b_ptr, c_ptr=c_ptr)
    _gemm_ex(a_ptr, "row", K, b_ptr, b_order, ldb, c_ptr, N, M, N, K, dtype=dtype, acc=acc, stream=stream,
             device=device, alpha=alpha, beta=beta, who=who)


def gemm_strided_batched(a_ptr: int, b_ptr: int, c_ptr: int, M: int, N: int, K: int, batch: int, *,
                         stride_a: int, stride_b: int, stride_c: int, layout: str, dtype: str, acc: str,
                         a_order: str = "row", lda: int | None = None, ldb: int | None = None,
                         ldc: int | None = None, stream: Any = None, device: int = 0, alpha: float = 1.0,
                         beta: float = 0.0) -> None:
    """C_i = alpha * A_i . B_i + beta * C_i for i < batch in one cublasGemmStridedBatchedEx, matrix i of X
    at x_ptr + i * stride_x elements. A_i is M x K row-major (a_order "col": column-major), B_i K x N (NN)
    or N x K (TN) row-major as in gemm, C_i M x N row-major; a leading dimension left None is the dense one.
    A stride of 0 gives every product the same A or B (a broadcast); C's stride must keep the outputs
    apart. Everything is checked (ValidationError) before cuBLAS is called."""
    who = "cuBLAS gemm_strided_batched"
    b_order, ldb_dense = b_storage(layout, N, K, who)
    if a_order not in ORDERS:
        raise ValidationError(f"{who}: a_order={a_order!r} is not one of {list(ORDERS)}")
    lda = (K if a_order == "row" else M) if lda is None else lda
    ldb = ldb_dense if ldb is None else ldb
    ldc = N if ldc is None else ldc
    check_matrices(who, M, N, K, a_order, lda, b_order, ldb, ldc, a_ptr=a_ptr, b_ptr=b_ptr, c_ptr=c_ptr)
    check_ints(who, 1, INT32_MAX, batch=batch)
    check_ints(who, 0, INT64_MAX, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c)
    c_elements = ldc * (M - 1) + N
    if batch > 1 and stride_c < c_elements:
        raise ValidationError(f"{who}: stride_c={stride_c} is below the {c_elements} elements of one C "
                              f"({M} rows of ldc={ldc}): the batch's outputs would overlap (a stride of 0 "
                              "broadcasts A or B only)")
    _gemm_ex(a_ptr, a_order, lda, b_ptr, b_order, ldb, c_ptr, ldc, M, N, K, dtype=dtype, acc=acc, stream=stream,
             device=device, alpha=alpha, beta=beta, batch=Batch(batch, stride_a, stride_b, stride_c), who=who)


def b_storage(layout: str, N: int, K: int, who: str = "cuBLAS") -> tuple[str, int]:
    """(B's storage order, its dense leading dimension) for a layout: NN, row-major B (K x N) has unit
    column stride, ld = N; TN, B is N x K row-major, i.e. the column-major K x N matrix with ld = K."""
    if layout not in LAYOUTS:
        raise ValidationError(f"{who}: layout={layout!r} is not one of {list(LAYOUTS)}")
    return ("row", N) if layout == "NN" else ("col", K)


def check_ints(who: str, lo: int, hi: int, **values: Any) -> None:
    """Each value an integer in [lo, hi]: cuBLAS takes sizes and leading dimensions as int32, batch strides
    as int64, pointers as uintptr."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise ValidationError(f"{who}: {name}={v!r} must be an integer in [{lo}, {hi}]")


def check_matrices(who: str, M: int, N: int, K: int, a_order: str, lda: int, b_order: str, ldb: int, ldc: int,
                   **pointers: int) -> None:
    """Sizes and leading dimensions as cuBLAS takes them (int32; each ld at least its matrix's dense one, C
    row-major) and non-null pointers."""
    check_ints(who, 1, INT32_MAX, M=M, N=N, K=K, lda=lda, ldb=ldb, ldc=ldc)
    check_ints(who, 1, UINT64_MAX, **pointers)
    for what, order, ld, rows, cols in (("A", a_order, lda, M, K), ("B", b_order, ldb, K, N), ("C", "row", ldc, M, N)):
        need = cols if order == "row" else rows
        if ld < need:
            raise ValidationError(f"{who}: {what} ({rows} x {cols}, {order}-major) needs a leading dimension "
                                  f">= {need}, got {ld}")


ORDERS = ("row", "col")
INT32_MAX, INT64_MAX, UINT64_MAX = 2**31 - 1, 2**63 - 1, 2**64 - 1


def matmul(a: Any, b: Any, c: Any, *, acc: str = "f32", stream: Any = None, alpha: float = 1.0,
           beta: float = 0.0) -> str:
    """C = alpha * A . B + beta * C through cuBLAS on the caller's buffers, for A and B each row- or
    column-major (any leading dimension) and C row-major: the baseline for every layout that
    hgemm_rt.matmul takes. Returns the layout label, e.g. "A row, B col"."""
    op = operands(a, b, c, "cuBLAS matmul")
    _gemm_ex(op.A.ptr, op.a_order, op.lda, op.B.ptr, op.b_order, op.ldb, op.C.ptr, op.ldc, op.M, op.N, op.K,
             dtype=op.dtype, acc=acc, stream=stream, device=op.C.device, alpha=alpha, beta=beta,
             who="cuBLAS matmul")
    return f"A {op.a_order}, B {op.b_order}"


class Operands(NamedTuple):
    """Validated operands of C (M x N, row-major, ld ldc) = A (M x K) . B (K x N), A and B each row- or
    column-major with their leading dimensions, in elements."""
    A: Any
    B: Any
    C: Any
    M: int
    N: int
    K: int
    dtype: str
    a_order: str
    lda: int
    b_order: str
    ldb: int
    ldc: int


def operands(a: Any, b: Any, c: Any, who: str) -> Operands:
    """The checks every cuBLAS baseline makes of its buffers (2-D, shapes that multiply, one dtype cuBLAS
    takes, A and B row- or column-major, C row-major); `who` starts each message."""
    A, B, C = _arrays(a, b, c)
    if not (A.ndim == B.ndim == C.ndim == 2):
        raise ValidationError(f"{who}: A, B and C must be 2-D, got {A.shape}, {B.shape}, {C.shape}")
    return _matrices(A, B, C, who)


def _arrays(a: Any, b: Any, c: Any) -> tuple[Any, Any, Any]:
    from .memory import as_device_array

    return as_device_array(a, "A"), as_device_array(b, "B"), as_device_array(c, "C")


def _matrices(A: Any, B: Any, C: Any, who: str) -> Operands:
    """The checks of one product of the matrices in A, B and C's last two dimensions (see operands)."""
    (M, K), (K2, N) = A.shape[-2:], B.shape[-2:]
    if K2 != K or C.shape[-2:] != (M, N):
        raise ValidationError(f"{who}: A {A.shape} . B {B.shape} does not give C {C.shape}")
    if not (A.dtype == B.dtype == C.dtype) or A.dtype not in COMPUTE_OF:
        raise ValidationError(f"{who}: dtypes {A.dtype}, {B.dtype}, {C.dtype}; "
                              f"one of {sorted(COMPUTE_OF)} for all three")
    a_order, lda = storage_order("A", A, who)
    b_order, ldb = storage_order("B", B, who)
    c_order, ldc = storage_order("C", C, who)
    if c_order != "row":
        raise ValidationError(f"{who}: C must be row-major (unit column stride), strides {C.strides}")
    return Operands(A, B, C, M, N, K, A.dtype, a_order, lda, b_order, ldb, ldc)


class StridedBatch(NamedTuple):
    """Validated operands of a batch of products C_i = A_i . B_i that one strided-batched call computes:
    the matrices' storage as `Operands` has it, and the element stride from one matrix of each operand to
    the next (0: every product reads the same matrix)."""
    op: Operands
    batch: int
    stride_a: int
    stride_b: int
    stride_c: int

    def arguments(self) -> dict[str, Any]:
        """gemm_strided_batched's arguments for this batch, but acc and what is not the data's (stream,
        alpha, beta)."""
        op = self.op
        return dict(a_ptr=op.A.ptr, b_ptr=op.B.ptr, c_ptr=op.C.ptr, M=op.M, N=op.N, K=op.K, batch=self.batch,
                    stride_a=self.stride_a, stride_b=self.stride_b, stride_c=self.stride_c,
                    layout="NN" if op.b_order == "row" else "TN", dtype=op.dtype, a_order=op.a_order,
                    lda=op.lda, ldb=op.ldb, ldc=op.ldc, device=op.C.device)


def batched_operands(a: Any, b: Any, c: Any, who: str) -> StridedBatch:
    """The checks of operands(), per matrix, for (..., M, K) @ (..., K, N) -> (..., M, N) with C's batch
    dimensions those of the product: A's and B's batch dimensions broadcast to them as torch.matmul's do
    (each equal, 1 or missing). One strided-batched call needs one element stride per operand from a
    matrix to the next over the whole batch (C's batch dimensions taken in order, a broadcast one a
    stride of 0); an operand whose batch dimensions do not step evenly is refused, saying so."""
    A, B, C = _arrays(a, b, c)
    if min(A.ndim, B.ndim, C.ndim) < 2:
        raise ValidationError(f"{who}: A, B and C must be at least 2-D, got {A.shape}, {B.shape}, {C.shape}")
    op = _matrices(A, B, C, who)
    dims = C.shape[:-2]
    strides = []
    for what, x in (("A", A), ("B", B), ("C", C)):
        lead = len(dims) - (x.ndim - 2)
        if lead < 0 or any(n not in (1, dims[lead + d]) for d, n in enumerate(x.shape[:-2])):
            raise ValidationError(f"{who}: {what} {x.shape} does not broadcast to C's batch dimensions {dims}")
        # per batch dimension of C: the element stride through it (0 where the operand has size 1 or none)
        steps = [0 if d < lead or x.shape[d - lead] == 1 else x.strides[d - lead] // x.itemsize
                 for d in range(len(dims))]
        walked = [(n, s) for n, s in zip(dims, steps) if n > 1]
        if any(outer != inner * n for (_, outer), (n, inner) in zip(walked, walked[1:])):
            raise ValidationError(f"{who}: {what} {x.shape} with strides {x.strides} is not one strided batch: "
                                  f"its element strides {steps} through C's batch dimensions {dims} do not "
                                  "step evenly (each the next one's times its size)")
        strides.append(walked[-1][1] if walked else 0)
    return StridedBatch(op, math.prod(dims), *strides)


def batched_matmul(a: Any, b: Any, c: Any, *, acc: str = "f32", stream: Any = None, alpha: float = 1.0,
                   beta: float = 0.0) -> str:
    """C = alpha * A . B + beta * C for batches of matrices (batched_operands) in one
    cublasGemmStridedBatchedEx on the caller's buffers. Returns the layout label, e.g. "A row, B col"."""
    sb = batched_operands(a, b, c, "cuBLAS batched matmul")
    gemm_strided_batched(**sb.arguments(), acc=acc, stream=stream, alpha=alpha, beta=beta)
    return f"A {sb.op.a_order}, B {sb.op.b_order}"


def storage_order(what: str, x: Any, who: str = "cuBLAS matmul") -> tuple[str, int]:
    """("row", ld) for unit column stride, ("col", ld) for unit row stride, in elements, of the matrix
    in x's last two dimensions."""
    rows, cols = x.shape[-2:]
    s0, s1 = (s // x.itemsize for s in x.strides[-2:])
    if s1 == 1 or cols == 1:
        if rows == 1 or s0 >= cols:
            return "row", max(s0, cols, 1)
    if s0 == 1 or rows == 1:
        if cols == 1 or s1 >= rows:
            return "col", max(s1, rows, 1)
    raise ValidationError(f"{who}: {what} {x.shape} with strides {x.strides} is neither row- nor "
                          f"column-major; copy it to a contiguous array first")


def check_acc(dtype: str, acc: str, who: str = "cuBLAS") -> None:
    if dtype not in COMPUTE_OF:
        raise ValidationError(f"{who}: dtype={dtype!r} is not one of {sorted(COMPUTE_OF)}")
    if acc not in COMPUTE_OF.get(dtype, ()):
        raise ValidationError(f"{who}: acc={acc!r} is not one of {list(COMPUTE_OF.get(dtype, ()))} for {dtype}")


# (input dtype, accumulation) -> the cublasComputeType_t member: the one list of what the baseline runs
COMPUTE_TYPE = {
    ("f16", "f16"): "COMPUTE_16F",
    ("f16", "f32"): "COMPUTE_32F",
    ("bf16", "f32"): "COMPUTE_32F",
    ("f32", "f32"): "COMPUTE_32F",
    ("f32", "tf32"): "COMPUTE_32F_FAST_TF32",
}
COMPUTE_OF = {d: tuple(a for dd, a in COMPUTE_TYPE if dd == d) for d, _ in COMPUTE_TYPE}
# the cudaDataType_t member of each element type
DATA_TYPE = {"f16": "CUDA_R_16F", "bf16": "CUDA_R_16BF", "f32": "CUDA_R_32F"}


class Batch(NamedTuple):
    """A strided batch: `count` products, matrix i of each operand `stride_*` elements after matrix i - 1."""
    count: int
    stride_a: int
    stride_b: int
    stride_c: int


def _gemm_ex(a_ptr: int, a_order: str, lda: int, b_ptr: int, b_order: str, ldb: int, c_ptr: int, ldc: int,
             M: int, N: int, K: int, *, dtype: str, acc: str, stream: Any, device: int, alpha: float,
             beta: float, batch: Batch | None = None, who: str = "cuBLAS") -> None:
    """One cublasGemmEx for row-major C (M x N, ld = ldc) = A . B, A and B row- or column-major; with a
    `batch`, one cublasGemmStridedBatchedEx of as many such products."""
    check_acc(dtype, acc, who)
    # alpha/beta live in host memory with the compute type's precision (cuBLAS's default pointer mode)
    scalars = scalar_pair(alpha, beta, acc, who)
    s = scalars.ctypes.data
    stream_ptr = stream_handle(stream)
    cublas = _cublas()
    from nvmath import CudaDataType

    dt = getattr(CudaDataType, DATA_TYPE[dtype])
    compute = getattr(cublas.ComputeType, COMPUTE_TYPE[(dtype, acc)])
    algo = cublas.GemmAlgo.DEFAULT_TENSOR_OP
    # Row-major C is column-major C^T (N x M), so compute C^T = B^T . A^T: cuBLAS's A is our B and its B
    # our A, m = N and n = M. A row-major operand read as column-major is already its transpose (op N); a
    # column-major one must be transposed (op T). A batch's strides go with their operands.
    op = {"row": cublas.Operation.N, "col": cublas.Operation.T}
    h = handle(device)
    with _lock:
        _call("set_stream", cublas.set_stream, h, stream_ptr)
        if batch is None:
            _call("gemm_ex", cublas.gemm_ex, h, op[b_order], op[a_order], N, M, K, s, b_ptr, dt, ldb, a_ptr, dt,
                  lda, s + scalars.itemsize, c_ptr, dt, ldc, compute, algo)
        else:
            _call("gemm_strided_batched_ex", cublas.gemm_strided_batched_ex, h, op[b_order], op[a_order], N, M, K,
                  s, b_ptr, dt, ldb, batch.stride_b, a_ptr, dt, lda, batch.stride_a, s + scalars.itemsize, c_ptr, dt,
                  ldc, batch.stride_c, batch.count, compute, algo)


def scalar_pair(alpha: float, beta: float, acc: str, who: str = "cuBLAS") -> np.ndarray:
    """[alpha, beta] in the scale type of the accumulation; refused unless both are finite there."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            pair = np.array([alpha, beta], dtype=SCALAR[acc])
    except (TypeError, ValueError):
        pair = None
    if pair is None or pair.shape != (2,) or not np.isfinite(pair).all():
        raise ValidationError(f"{who}: alpha={alpha!r} and beta={beta!r} must be real numbers finite in "
                              f"{np.dtype(SCALAR[acc]).name} (the scale type of acc={acc!r})")
    return pair
