"""The cuBLAS baseline through nvmath-python's 1:1 bindings (`nvmath.bindings.cublas`).

cuBLAS is column-major; our matrices are row-major. A row-major M x N matrix is the column-major
N x M matrix of its transpose, so C = A.B is computed as C^T = B^T . A^T: the operands swap places
and m, n swap, with no data movement.
"""
from __future__ import annotations

import atexit
import threading
from typing import Any

import numpy as np

from .device import get_device, stream_handle
from .errors import DriverError, NoGpuError

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


_SCALAR = {"f16": np.float16, "f32": np.float32, "tf32": np.float32}


def gemm(a_ptr: int, b_ptr: int, c_ptr: int, M: int, N: int, K: int, *, layout: str, dtype: str, acc: str,
         stream: Any = None, device: int = 0, alpha: float = 1.0, beta: float = 0.0) -> None:
    """C (M x N, row-major) = alpha * A (M x K) . B + beta * C, B K x N (NN) or N x K (TN)."""
    cublas = _cublas()
    from nvmath import CudaDataType

    dt = {"f16": CudaDataType.CUDA_R_16F, "bf16": CudaDataType.CUDA_R_16BF, "f32": CudaDataType.CUDA_R_32F}[dtype]
    compute = {
        ("f16", "f16"): cublas.ComputeType.COMPUTE_16F,
        ("f16", "f32"): cublas.ComputeType.COMPUTE_32F,
        ("bf16", "f32"): cublas.ComputeType.COMPUTE_32F,
        ("f32", "f32"): cublas.ComputeType.COMPUTE_32F,
        ("f32", "tf32"): cublas.ComputeType.COMPUTE_32F_FAST_TF32,
    }[(dtype, acc)]
    # alpha/beta live in host memory with the compute type's precision (cuBLAS's default pointer mode)
    scalars = np.array([alpha, beta], dtype=_SCALAR[acc])
    s = scalars.ctypes.data
    # C^T (N x M) = op(B) (N x K) . A^T (K x M); row-major A is column-major A^T with ld = K.
    if layout == "NN":  # row-major B (K x N) is column-major B^T (N x K), ld = N: no transpose
        op_b, ldb = cublas.Operation.N, N
    else:  # row-major B (N x K) is column-major (K x N), ld = K: transpose it back
        op_b, ldb = cublas.Operation.T, K
    h = handle(device)
    with _lock:
        _call("set_stream", cublas.set_stream, h, stream_handle(stream))
        _call("gemm_ex", cublas.gemm_ex, h, op_b, cublas.Operation.N, N, M, K, s, b_ptr, dt, ldb, a_ptr, dt, K,
              s + scalars.itemsize, c_ptr, dt, N, compute, cublas.GemmAlgo.DEFAULT_TENSOR_OP)
