"""The device, its primary context, streams and events."""
from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ._driver import check, check_code, driver, init, native
from .errors import NoGpuError, ValidationError


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    cc: tuple[int, int]
    sm_count: int
    max_smem_optin: int  # bytes of shared memory one block may opt into
    l2_bytes: int
    clock_khz: int
    driver_version: int  # e.g. 13000


class Device:
    """One GPU with its retained primary context (shared with cuBLAS and other libraries)."""

    def __init__(self, ordinal: int = 0):
        init()
        drv = driver()
        count = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= ordinal < count:
            raise NoGpuError(f"GPU {ordinal} does not exist: the driver sees {count}")
        self.handle = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = check(drv.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self._context_ptr = int(self.context)
        self._finalizer = weakref.finalize(self, _release_primary, self.handle)
        self.make_current()
        attr = drv.CUdevice_attribute

        def get(a: Any) -> int:
            return int(check(drv.cuDeviceGetAttribute(a, self.handle), f"cuDeviceGetAttribute({a.name})"))

        name = check(drv.cuDeviceGetName(128, self.handle), "cuDeviceGetName")
        self.info = DeviceInfo(
            ordinal=ordinal,
            name=name.split(b"\0", 1)[0].decode(),
            cc=(get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
            sm_count=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            max_smem_optin=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            l2_bytes=get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            clock_khz=get(attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            driver_version=int(check(drv.cuDriverGetVersion(), "cuDriverGetVersion")),
        )

    def make_current(self) -> None:
        """Contexts are per thread: every entry point calls this before driver work."""
        check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def ensure_current(self) -> None:
        """make_current() for the per-call path: one cheap query, and a switch only where another
        library (or device) left a different context current on this thread."""
        lib = native()
        if lib is None:
            self.make_current()
            return
        cur = ctypes.c_void_p()
        check_code(lib.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
        if cur.value != self._context_ptr:
            check_code(lib.cuCtxSetCurrent(self._context_ptr), "cuCtxSetCurrent")

    def synchronize(self) -> None:
        self.make_current()
        check(driver().cuCtxSynchronize(), "cuCtxSynchronize")

    def __repr__(self) -> str:
        i = self.info
        return f"<Device {i.ordinal}: {i.name}, sm_{i.cc[0]}{i.cc[1]}, {i.sm_count} SMs>"


def _release_primary(handle: Any) -> None:
    try:
        driver().cuDevicePrimaryCtxRelease(handle)
    except Exception:  # interpreter shutdown: the driver may already be gone
        pass


_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _device(ordinal: int) -> Device:
    return Device(ordinal)


def get_device(ordinal: int = 0) -> Device:
    """The process-wide Device for `ordinal`, made current on the calling thread."""
    with _lock:
        dev = _device(ordinal)
    dev.make_current()
    return dev


class Stream:
    """A non-blocking CUDA stream owned by this object (`close()` is safe to call twice)."""

    def __init__(self, device: Device | None = None):
        self.device = device or get_device()
        drv = driver()
        self.handle = check(
            drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate"
        )
        self._finalizer = weakref.finalize(self, _destroy, drv.cuStreamDestroy, self.handle)

    @property
    def ptr(self) -> int:
        return int(self.handle)

    def synchronize(self) -> None:
        check(driver().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _destroy(fn: Any, handle: Any) -> None:
    try:
        fn(handle)
    except Exception:
        pass


def stream_handle(stream: Any) -> int:
    """An integer CUstream from None (the legacy default stream), an int, our Stream, a CUstream, or
    another library's stream (`__cuda_stream__` protocol, CuPy/PyTorch `.cuda_stream`, `.ptr`). A handle
    is a pointer: anything outside [0, 2^64) is refused here, before any driver call."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise ValidationError(f"cannot use {stream!r} as a CUDA stream")
    if isinstance(stream, int):
        handle = stream
    elif isinstance(stream, Stream):
        handle = stream.ptr
    elif hasattr(stream, "__cuda_stream__"):
        handle = int(stream.__cuda_stream__()[1])
    elif hasattr(stream, "cuda_stream"):  # torch
        handle = int(stream.cuda_stream)
    elif hasattr(stream, "ptr"):  # CuPy
        handle = int(stream.ptr)
    else:
        try:
            handle = int(stream)  # cuda-python CUstream
        except (TypeError, ValueError):
            raise ValidationError(f"cannot use {type(stream).__name__} as a CUDA stream") from None
    if not 0 <= handle < 2**64:
        raise ValidationError(f"stream handle {handle} is not a pointer value (0 <= handle < 2^64)")
    return handle


class Event:
    """A CUDA event for timing."""

    def __init__(self) -> None:
        drv = driver()
        self.handle = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        self._finalizer = weakref.finalize(self, _destroy, drv.cuEventDestroy, self.handle)

    def record(self, stream: Any = None) -> None:
        check(driver().cuEventRecord(self.handle, stream_handle(stream)), "cuEventRecord")

    def synchronize(self) -> None:
        check(driver().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def elapsed_ms(self, start: "Event") -> float:
        return float(check(driver().cuEventElapsedTime(start.handle, self.handle), "cuEventElapsedTime"))
