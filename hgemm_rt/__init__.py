"""hgemm_rt: load the hgemm cubins with the CUDA driver API and launch them by name.

    import numpy as np, hgemm_rt as hg
    a = hg.to_device(np.random.randn(4096, 4096).astype(np.float16))
    b = hg.to_device(np.random.randn(4096, 4096).astype(np.float16))   # N x K for TN kernels
    c = hg.empty((4096, 4096), "f16")
    hg.launch("hgemm_cute_tn", a, b, c, stages=3, swizzle=True)
    print(c.to_numpy())

Nothing here touches the GPU until the first launch or allocation.
"""
from __future__ import annotations

from typing import Any, Union

from ._driver import gpu_available
from ._version import __version__
from .device import Device, Event, Stream, get_device
from .errors import (
    ArgumentTypeError,
    DriverError,
    HgemmError,
    ManifestError,
    NoGpuError,
    NotBuiltForDeviceError,
    UnknownKernelError,
    ValidationError,
)
from .manifest import KernelSpec, Manifest
from .memory import DeviceArray, as_device_array, empty, to_device
from .registry import CubinKernel, CublasKernel, KernelBinary, Registry, get_registry
from .api import Matmul, PlanCache, autotune, explain, matmul, plans  # any shape, layout, alignment
from .api import ArrayLike, StreamLike  # (the operand and stream types of the signatures)
from .grouped import grouped_matmul  # mixture-of-experts: every expert's GEMM in one launch

__all__ = [
    "__version__", "ArgumentTypeError", "ArrayLike", "StreamLike", "CubinKernel", "CublasKernel", "Device",
    "DeviceArray", "DriverError", "Event", "HgemmError", "KernelBinary", "KernelSpec", "Manifest", "ManifestError",
    "Matmul", "NoGpuError", "NotBuiltForDeviceError", "PlanCache", "Registry", "Stream", "UnknownKernelError",
    "ValidationError", "as_device_array", "autotune", "empty", "explain", "get_device", "get_kernel",
    "get_registry", "gpu_available", "grouped_matmul", "kernels", "launch", "matmul", "plans", "to_device",
]


def get_kernel(name: str) -> Union[CubinKernel, CublasKernel]:
    """The catalogue entry (cubin kernel or cuBLAS baseline) for a name or alias; a cubin kernel's
    `.binary(**variant)` describes its compiled form for launching it elsewhere (CuPy's RawModule)."""
    return get_registry().get(name)


def kernels() -> list[str]:
    """Every runnable name: the kernels in the build manifest and the cuBLAS baselines."""
    return get_registry().names()


def launch(name: str, a: ArrayLike, b: ArrayLike, c: ArrayLike, *, stream: StreamLike = None, **options: Any) -> Any:
    """C = A.B with the named kernel, exactly as built (no glue: the operands must suit it).

    Parameters
    ----------
    name : str
        A kernel or cuBLAS baseline name, or an alias (`kernels()` lists them).
    a, b, c : ArrayLike
        A (M x K), B (K x N; N x K for the TN kernels) and C (M x N), in the kernel's dtype and layout.
    stream : StreamLike, optional
        Where to launch (None: the legacy default stream; a torch/CuPy operand's current stream is ordered
        before it).
    **options
        The kernel's variant axes (e.g. stages=3, acc="f32"); swizzle=True and swizzle_stride=N for
        block-swizzled kernels.

    Returns
    -------
    LaunchConfig or None
        A cubin kernel's launch (grid, block, shared memory: registry.CubinKernel); None for a cuBLAS baseline.
        Inputs are validated before anything runs.
    """
    return get_kernel(name)(a, b, c, stream=stream, **options)
