"""The cuBLAS baseline through nvmath-python's 1:1 bindings (`nvmath.bindings.cublas`).

cuBLAS is column-major; our matrices are row-major. A row-major M x N matrix is the column-major
N x M matrix of its transpose, so C = A.B is computed as C^T = B^T . A^T: the operands swap places
and m, n swap, with no data movement.
"""
from __future__ import annotations

import atexit
import threading
from typing import Any, NamedTuple

import numpy as np

from .device import get_device, stream_handle
from .errors import DriverError, NoGpuError, ValidationError

_lock = threading.Lock()
_handles: dict[int, int] = {}


def _cublas() -> Any:
    try:
        from nvmath.bindings import cublas
    except ImportError as exc:
        raise NoGpuError(f"nvmath-python is not installed ({exc}): `pip install nvmath-python`") from None
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
    # NN: row-major B (K x N) has unit column stride, ld = N; TN: B is N x K row-major, i.e. the
    # column-major K x N matrix with ld = K.
    b_order, ldb = ("row", N) if layout == "NN" else ("col", K)
    _gemm_ex(a_ptr, "row", K, b_ptr, b_order, ldb, c_ptr, N, M, N, K, dtype=dtype, acc=acc, stream=stream,
             device=device, alpha=alpha, beta=beta)


def matmul(a: Any, b: Any, c: Any, *, acc: str = "f32", stream: Any = None, alpha: float = 1.0,
           beta: float = 0.0) -> str:
    """C = alpha * A . B + beta * C through cuBLAS on the caller's buffers, for A and B each row- or
    column-major (any leading dimension) and C row-major: the baseline for every layout that
    hgemm_rt.matmul takes. Returns the layout label, e.g. "A row, B col"."""
    op = operands(a, b, c, "cuBLAS matmul")
    _gemm_ex(op.A.ptr, op.a_order, op.lda, op.B.ptr, op.b_order, op.ldb, op.C.ptr, op.ldc, op.M, op.N, op.K,
             dtype=op.dtype, acc=acc, stream=stream, device=op.C.device, alpha=alpha, beta=beta)
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
    from .memory import as_device_array

    A, B, C = as_device_array(a, "A"), as_device_array(b, "B"), as_device_array(c, "C")
    if not (A.ndim == B.ndim == C.ndim == 2):
        raise ValidationError(f"{who}: A, B and C must be 2-D, got {A.shape}, {B.shape}, {C.shape}")
    (M, K), (K2, N) = A.shape, B.shape
    if K2 != K or C.shape != (M, N):
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


def storage_order(what: str, x: Any, who: str = "cuBLAS matmul") -> tuple[str, int]:
    """("row", ld) for unit column stride, ("col", ld) for unit row stride, in elements."""
    rows, cols = x.shape
    s0, s1 = (s // x.itemsize for s in x.strides)
    if s1 == 1 or cols == 1:
        if rows == 1 or s0 >= cols:
            return "row", max(s0, cols, 1)
    if s0 == 1 or rows == 1:
        if cols == 1 or s1 >= rows:
            return "col", max(s1, rows, 1)
    raise ValidationError(f"{who}: {what} {x.shape} with strides {x.strides} is neither row- nor "
                          f"column-major; copy it to a contiguous array first")


def check_acc(dtype: str, acc: str, who: str = "cuBLAS") -> None:
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


def _gemm_ex(a_ptr: int, a_order: str, lda: int, b_ptr: int, b_order: str, ldb: int, c_ptr: int, ldc: int,
             M: int, N: int, K: int, *, dtype: str, acc: str, stream: Any, device: int, alpha: float,
             beta: float) -> None:
    """One cublasGemmEx for row-major C (M x N, ld = ldc) = A . B, A and B row- or column-major."""
    check_acc(dtype, acc)
    cublas = _cublas()
    from nvmath import CudaDataType

    dt = getattr(CudaDataType, DATA_TYPE[dtype])
    compute = getattr(cublas.ComputeType, COMPUTE_TYPE[(dtype, acc)])
    # alpha/beta live in host memory with the compute type's precision (cuBLAS's default pointer mode)
    scalars = np.array([alpha, beta], dtype=SCALAR[acc])
    s = scalars.ctypes.data
    # Row-major C is column-major C^T (N x M), so compute C^T = B^T . A^T. A row-major operand read as
    # column-major is already its transpose (op N); a column-major one must be transposed (op T).
    op = {"row": cublas.Operation.N, "col": cublas.Operation.T}
    h = handle(device)
    with _lock:
        _call("set_stream", cublas.set_stream, h, stream_handle(stream))
        _call("gemm_ex", cublas.gemm_ex, h, op[b_order], op[a_order], N, M, K, s, b_ptr, dt, ldb, a_ptr, dt, lda,
              s + scalars.itemsize, c_ptr, dt, ldc, compute, cublas.GemmAlgo.DEFAULT_TENSOR_OP)
