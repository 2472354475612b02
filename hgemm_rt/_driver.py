"""The CUDA driver API through cuda-python, and the one `check()` every driver call goes through."""
from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

from .errors import DriverError, NoGpuError


@functools.lru_cache(maxsize=None)
def driver() -> Any:
    """The `cuda.bindings.driver` module (cuda-python 12.6+ and 13.x), or `cuda.cuda` (older 12.x)."""
    try:
        from cuda.bindings import driver as drv
    except ImportError:
        try:
            from cuda import cuda as drv  # type: ignore[no-redef]
        except ImportError as exc:
            raise NoGpuError(f"cuda-bindings is not installed ({exc}); `pip install cuda-bindings`") from None
    return drv


def _result_text(result: Any) -> tuple[str, str]:
    drv = driver()
    try:
        _, name = drv.cuGetErrorName(result)
        _, text = drv.cuGetErrorString(result)
        return name.decode(), text.decode()
    except Exception:  # the driver itself may be unusable
        return str(result), ""


def check(ret: Any, op: str, kernel: str | None = None) -> Any:
    """Unwrap cuda-python's `(CUresult, *values)`; raise DriverError naming op, kernel and result."""
    if isinstance(ret, tuple):
        result, values = ret[0], ret[1:]
    else:
        result, values = ret, ()
    if int(result) != 0:
        name, text = _result_text(result)
        where = f" for kernel {kernel}" if kernel else ""
        raise DriverError(f"{op}{where} failed: {name} ({text})", result_name=name, code=int(result))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@functools.lru_cache(maxsize=None)
def init() -> None:
    """cuInit once. Without a driver library cuda-python raises instead of returning an error code."""
    drv = driver()
    try:
        ret = drv.cuInit(0)
    except RuntimeError as exc:  # cuda.pathfinder.DynamicLibNotFoundError and friends
        raise NoGpuError(f"no CUDA driver on this machine: {exc}") from None
    try:
        check(ret, "cuInit")
    except DriverError as exc:
        raise NoGpuError(f"the CUDA driver found no usable GPU: {exc}") from None
    n = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    if n == 0:
        raise NoGpuError("the CUDA driver reports no GPU")


def gpu_available() -> bool:
    try:
        init()
        return True
    except NoGpuError:
        return False


# -- the calls on matmul's per-call path, through ctypes -------------------------------------------
# cuda-python's wrappers convert every argument into binding objects, a few microseconds per call;
# the handful of calls a repeated matmul makes go straight to libcuda instead, and only there: each
# of these call sites has one backend. Handles are passed as integers (int(handle) of the cuda-python
# objects), results are checked like every other call (check_code).

_P = ctypes.c_void_p

# the per-call functions and their argument types
NATIVE_PROTOTYPES = {
    "cuLaunchKernelEx": [_P, _P, _P, _P],
    "cuGraphLaunch": [_P, _P],
    "cuStreamIsCapturing": [_P, ctypes.POINTER(ctypes.c_int)],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuCtxSetCurrent": [_P],
    "cuEventRecord": [_P, _P],
    "cuStreamWaitEvent": [_P, _P, ctypes.c_uint],
    "cuTensorMapEncodeTiled": [_P, ctypes.c_int, ctypes.c_uint32, _P, _P, _P, _P, _P, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_int],
}


@functools.lru_cache(maxsize=None)
def native() -> Any:
    """libcuda with the prototypes of the per-call functions (NATIVE_PROTOTYPES). cuda-python loads the
    same library, so where it works this does; NoGpuError where it cannot be loaded or is older than
    CUDA 11.8 (no cuLaunchKernelEx)."""
    name = "nvcuda.dll" if os.name == "nt" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        raise NoGpuError(f"no CUDA driver on this machine: cannot load {name} ({exc})") from None
    try:
        for fn_name, args in NATIVE_PROTOTYPES.items():
            fn = getattr(lib, fn_name)
            fn.argtypes, fn.restype = args, ctypes.c_int
    except AttributeError as exc:
        raise NoGpuError(f"the CUDA driver is older than CUDA 11.8 ({exc}): update the NVIDIA driver") from None
    return lib


def check_code(code: int, op: str, kernel: str | None = None) -> None:
    """check() for a raw CUresult integer from a native() call."""
    if code:
        check((driver().CUresult(code),), op, kernel)
