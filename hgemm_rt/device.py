"""The device, its primary context, streams and events; the driver's CUDA version against the build's."""
from __future__ import annotations

import ctypes
import functools
import operator
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ._driver import check, check_code, driver, init, native
from .errors import ArgumentTypeError, NoGpuError, NotBuiltForDeviceError, ValidationError


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


# GPUs explain() can plan for without one: (compute capability, SM count) of each kind's common form
DEVICE_KINDS = {
    "H100": ((9, 0), 132), "H100 SXM": ((9, 0), 132), "H100 PCIe": ((9, 0), 114), "H200": ((9, 0), 132),
    "H20": ((9, 0), 78), "A100": ((8, 0), 108), "A10": ((8, 6), 72), "A40": ((8, 6), 84), "RTX 3090": ((8, 6), 82),
    "L4": ((8, 9), 58), "L40S": ((8, 9), 142), "RTX 4090": ((8, 9), 128),
}
DEFAULT_DEVICE_KIND = "H100"  # (what explain() plans for on a machine without a GPU, unless told)


def device_kind(name: str | None = None, cc: tuple[int, int] | None = None,
                sm_count: int | None = None) -> tuple[str, tuple[int, int], int]:
    """(name, compute capability, SM count) of a stated GPU: a kind from DEVICE_KINDS (any case), or cc= and
    sm_count= (both); neither: DEFAULT_DEVICE_KIND. Nothing here touches a GPU."""
    if (cc is None) != (sm_count is None):
        raise ValidationError(f"give cc= and sm_count= together (got cc={cc!r}, sm_count={sm_count!r})")
    if cc is not None:
        if name is not None:
            raise ValidationError(f"give a device kind ({name!r}) or cc= and sm_count=, not both")
        if not (isinstance(cc, tuple) and len(cc) == 2 and all(type(x) is int and x >= 0 for x in cc)):
            raise ArgumentTypeError(f"cc must be a (major, minor) tuple of integers, got {cc!r}")
        if type(sm_count) is not int or sm_count < 1:
            raise ArgumentTypeError(f"sm_count must be a positive integer, got {sm_count!r}")
        return f"sm_{cc[0]}{cc[1]}", cc, sm_count
    if name is None:
        name = DEFAULT_DEVICE_KIND
    if not isinstance(name, str):
        raise ArgumentTypeError(f"device must be a GPU kind's name such as 'H100', got {name!r} "
                                f"({type(name).__name__})")
    for kind, (kind_cc, kind_sms) in DEVICE_KINDS.items():
        if kind.lower() == name.strip().lower():
            return kind, kind_cc, kind_sms
    raise ValidationError(f"unknown device kind {name!r}: use one of {sorted(DEVICE_KINDS)}, or cc= and sm_count=")


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
            driver_version=driver_version(),
        )

    def make_current(self) -> None:
        """Contexts are per thread: every entry point calls this before driver work."""
        check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def ensure_current(self) -> None:
        """make_current() for the per-call path: one cheap query, and a switch only where another
        library (or device) left a different context current on this thread."""
        lib = native()
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
    """A non-blocking CUDA stream owned by this object (`close()` is safe to call twice). Other libraries
    take it as theirs through the `__cuda_stream__` protocol (e.g. `torch.cuda.ExternalStream`,
    `cupy.cuda.ExternalStream` with `s.ptr`, cuda.core)."""

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

    def __cuda_stream__(self) -> tuple[int, int]:
        """(protocol version 0, the CUstream handle as an integer)."""
        return 0, int(self.handle)

    def synchronize(self) -> None:
        check(driver().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def record(self, event: "Event | None" = None) -> "Event":
        """Record `event` (a new Event if None) on this stream, as torch/cuda.core streams do; returns it."""
        if event is None:
            event = Event()
        elif not isinstance(event, Event):
            raise ArgumentTypeError(f"Stream.record takes an hgemm_rt Event or None, got {type(event).__name__}")
        event.record(self)
        return event

    def wait(self, event_or_stream: Any) -> None:
        """Make later work on this stream wait for an Event, or for the work queued so far on another stream
        (our Stream, an integer handle, a torch/CuPy/`__cuda_stream__` stream): nothing waits on the host."""
        event = event_or_stream if isinstance(event_or_stream, Event) else Event().record(event_or_stream)
        check(driver().cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

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
    is a pointer: anything outside [0, 2^64) is refused here, before any driver call; so is anything that
    is not a handle or a stream object (a bool, a string, a float: ArgumentTypeError, never rounded)."""
    if stream is None:
        return 0
    if isinstance(stream, (bool, str, bytes, float, complex)):
        raise ArgumentTypeError(f"cannot use {stream!r} as a CUDA stream: pass a stream object or an integer handle")
    try:
        handle = operator.index(stream)  # int, numpy integers
    except TypeError:
        if isinstance(stream, Stream):
            handle = stream.ptr
        elif hasattr(stream, "__cuda_stream__"):
            handle = int(stream.__cuda_stream__()[1])
        elif hasattr(stream, "cuda_stream"):  # torch
            handle = int(stream.cuda_stream)
        elif hasattr(stream, "ptr"):  # CuPy
            handle = int(stream.ptr)
        elif hasattr(stream, "__float__"):  # a real number that is not an integer (numpy floats)
            raise ArgumentTypeError(f"cannot use {stream!r} as a CUDA stream: a handle is an integer") from None
        else:
            try:
                handle = int(stream)  # cuda-python CUstream
            except (TypeError, ValueError):
                raise ArgumentTypeError(f"cannot use {type(stream).__name__} as a CUDA stream") from None
    if not 0 <= handle < 2**64:
        raise ValidationError(f"stream handle {handle} is not a pointer value (0 <= handle < 2^64)")
    return handle


class Event:
    """A CUDA event, for timing and for ordering streams (Stream.record, Stream.wait).

        start, end = Event(), Event()
        start.record(s); ...; end.record(s); end.synchronize()
        ms = start.elapsed_time(end)            # as torch.cuda.Event; end.elapsed_ms(start) is the same
    """

    def __init__(self) -> None:
        drv = driver()
        self.handle = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        self._finalizer = weakref.finalize(self, _destroy, drv.cuEventDestroy, self.handle)

    def record(self, stream: Any = None) -> "Event":
        """Record on `stream` (any stream stream_handle takes; None: the legacy default stream); returns self."""
        check(driver().cuEventRecord(self.handle, stream_handle(stream)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        check(driver().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to `end` (both recorded and complete), as torch.cuda.Event's."""
        if not isinstance(end, Event):
            raise ArgumentTypeError(f"Event.elapsed_time takes the end Event, got {type(end).__name__}")
        return float(check(driver().cuEventElapsedTime(self.handle, end.handle), "cuEventElapsedTime"))

    def elapsed_ms(self, start: "Event") -> float:
        """Milliseconds from `start` to this event: start.elapsed_time(self)."""
        return float(check(driver().cuEventElapsedTime(start.handle, self.handle), "cuEventElapsedTime"))


# -- the driver against the build --------------------------------------------------------------------
# CUDA's minor-version compatibility: a cubin from the nvcc of CUDA X.y loads on any driver of CUDA X.0
# or newer; PTX is JIT-compiled only by a driver of CUDA X.y or newer.
MIN_LINUX_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}  # the oldest driver of each CUDA major


@functools.lru_cache(maxsize=None)
def driver_version() -> int:
    """The CUDA version the installed driver supports (cuDriverGetVersion: 13000 is 13.0); process-wide."""
    init()
    return int(check(driver().cuDriverGetVersion(), "cuDriverGetVersion"))


def driver_needed(compiler: str, jit: bool = False) -> tuple[int, int] | None:
    """The oldest CUDA version a driver must support to load the cubins of nvcc `compiler` ("13.0.88"), or
    with `jit` to JIT-compile its PTX; None where the version is unknown."""
    try:
        major, minor = (int(x) for x in compiler.split(".")[:2])
    except ValueError:
        return None  # a manifest without the compiler's version: nothing to compare
    return (major, minor) if jit else (major, 0)


def driver_requirement(compiler: str) -> str:
    """What a build from nvcc `compiler` needs from the driver, in words (no driver call: the manifest's
    `nvcc` is enough), e.g. for a build's description or a bug report."""
    cubins, ptx = driver_needed(compiler), driver_needed(compiler, jit=True)
    if cubins is None:
        return "the build records no compiler version: what it needs from the driver is unknown"
    linux = f" (Linux driver {MIN_LINUX_DRIVER[cubins[0]]} or newer)" if cubins[0] in MIN_LINUX_DRIVER else ""
    return (f"cubins from nvcc {compiler}: a driver for CUDA {cubins[0]}.{cubins[1]} or newer{linux}; its PTX "
            f"(JIT-compiled on a GPU newer than the cubins): CUDA {ptx[0]}.{ptx[1]} or newer")


@functools.lru_cache(maxsize=None)
def driver_problem(compiler: str, driver_cuda: int, jit: bool = False) -> str | None:
    """Why a driver that supports CUDA `driver_cuda` (13000 = 13.0) cannot load code from nvcc `compiler`
    ("13.0.88"): cubins, or PTX to JIT-compile with `jit`; None when it can (or the version is unknown)."""
    need = driver_needed(compiler, jit)
    if need is None:
        return None
    major = need[0]
    have = (driver_cuda // 1000, driver_cuda % 1000 // 10)
    if have >= need:
        return None
    what = "PTX (JIT-compiled for this GPU)" if jit else "cubins"
    driver_name = f" (Linux driver {MIN_LINUX_DRIVER[major]} or newer)" if major in MIN_LINUX_DRIVER and not jit else ""
    message = (f"this build's {what} come from nvcc {compiler} and need a driver for CUDA {need[0]}.{need[1]} or "
               f"newer{driver_name}, but the installed driver supports CUDA {have[0]}.{have[1]}: update the NVIDIA "
               "driver")
    if have[0] >= 12:  # (older drivers run no toolkit this project builds with)
        message += (", or rebuild the kernels with the nvcc of a CUDA 12.8+ toolkit: "
                    "`HGEMM_NVCC=/usr/local/cuda/bin/nvcc python build_kernels.py`")
        if have[0] == 12 and major > 12:  # pip's compilers can build for it too
            message += (", or with pip's compilers: `pip install -e .[build,build-cu12]` then "
                        "`python build_kernels.py --cuda12` (docs/cuda12.md)")
    return message


def require_driver_for(compiler: str, *, jit: bool = False) -> None:
    """Raise NotBuiltForDeviceError where this machine's driver is too old for code from nvcc `compiler`
    (see driver_problem). Without a usable driver it returns: whatever needs the GPU reports that."""
    try:
        version = driver_version()
    except NoGpuError:
        return
    problem = driver_problem(compiler, version, jit)
    if problem:
        raise NotBuiltForDeviceError(problem)
