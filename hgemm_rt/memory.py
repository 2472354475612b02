"""Device arrays: memory this package owns (numpy in and out), zero-copy views of other libraries' GPU
arrays through `__cuda_array_interface__` or DLPack, and DLPack export of our own (`__dlpack__`).

This is the one module that copies between host and device memory: numpy arrays in and out
(`from_numpy`, `to_numpy`), raw host bits in the device's layout (`from_host`, `copy_from_host` into a
strided view, `to_host`), and strided views read or filled whole (`strided_to_host`, `fill_strided`)."""
from __future__ import annotations

import functools
import math
import sys
import threading
import weakref
from typing import Any

import numpy as np

from . import dlpack
from ._driver import check, driver, init
from .device import get_device, stream_handle
from .dtypes import CAI_TYPESTR, ITEMSIZE, STORAGE, dtype_code, numpy_dtype
from .errors import ArgumentTypeError, ValidationError
from .streams import LEGACY_STREAM, PER_THREAD_STREAM, UNKNOWN_WRITER, cai_stream, order_after_writers, wait_for

# guards the export counts and deferred closes of every array; re-entrant because garbage collection may
# run a capsule's release while this thread holds it
_exports_lock = threading.RLock()

# distinct streams one array's writers are remembered on; past this its writers count as unknown
MAX_WRITER_STREAMS = 8


class DeviceArray:
    """A 2-D (or N-D) array in GPU memory: a pointer, a shape, byte strides and a dtype code.

    Arrays made by `empty`/`to_device` own their memory; it is freed by `close()` (safe twice) or when
    the object is collected. Views of foreign arrays keep the foreign object alive instead. `__dlpack__`
    hands the memory to torch, CuPy, JAX... without a copy; it stays valid until they let go.

    `writers` is the set of streams hgemm queued work that writes this memory on (shared by the owning
    array and its views; `note_write`), which `__dlpack__` orders its consumer after. It holds
    UNKNOWN_WRITER where that is not known: a view of foreign memory or of a bare pointer, whose other
    writers hgemm never sees.
    """

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: str, strides: tuple[int, ...] | None = None,
                 owner: Any = None, device: int = 0, readonly: bool = False):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.itemsize = ITEMSIZE[dtype]
        self.strides = tuple(strides) if strides is not None else c_strides(self.shape, self.itemsize)
        self.device = device
        self.readonly = readonly
        self._owner = owner  # foreign object (or DLPack capsule) kept alive for a view
        self._finalizer: weakref.finalize | None = None
        self._exports = 0  # DLPack capsules of this memory still held by a consumer
        self._close_deferred = False  # close() was called while some were
        # one cell shared by an owning array and every view of it: [False] once the memory is freed
        self.memory_live: list[bool] = owner.memory_live if isinstance(owner, DeviceArray) else [True]
        # (empty() starts its own memory's with none: nothing but hgemm has written it)
        self.writers: set[int] = owner.writers if isinstance(owner, DeviceArray) else {UNKNOWN_WRITER}
        # (address, everything else a matmul call's validation reads of this array): operands.KEYERS.
        # The description is an interned string: a repeat call's key then hashes it for free.
        self.identity = (self.ptr, sys.intern(f"{dtype}{self.shape}{self.strides}@{device}{'r' if readonly else ''}"))

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: Any = "f16", device: int = 0) -> "DeviceArray":
        code = dtype_code(dtype)
        if any((not isinstance(s, (int, np.integer))) or s < 0 for s in shape):
            raise ValidationError(f"shape must be non-negative integers, got {shape!r}")
        nbytes = max(1, math.prod(shape) * ITEMSIZE[code])
        dev = get_device(device)
        ptr = check(driver().cuMemAlloc(nbytes), f"cuMemAlloc({nbytes} bytes)")
        arr = cls(int(ptr), tuple(int(s) for s in shape), code, device=device)
        arr._finalizer = weakref.finalize(arr, _free, dev, ptr, arr.memory_live)
        arr.writers = set()
        return arr

    @classmethod
    def from_numpy(cls, a: np.ndarray, device: int = 0) -> "DeviceArray":
        a = np.ascontiguousarray(a)
        return cls.from_host(a, a.dtype, device)

    @classmethod
    def from_host(cls, host: np.ndarray, dtype: Any, device: int = 0) -> "DeviceArray":
        """A new array of `dtype` holding `host`'s bytes: a host array in the device's bit layout, such as
        bf16 as its uint16 bits (dtypes.STORAGE), which numpy alone cannot name."""
        host = np.ascontiguousarray(host)
        arr = cls.empty(host.shape, dtype, device)
        arr.copy_from_host(host)
        return arr

    # -- properties ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        return self.size <= 1 or self.strides == c_strides(self.shape, self.itemsize)

    @property
    def T(self) -> "DeviceArray":
        """The transposed view (no copy): reversed shape and strides; it keeps this array alive."""
        self.check_open()
        return DeviceArray(self.ptr, self.shape[::-1], self.dtype, self.strides[::-1], owner=self,
                           device=self.device, readonly=self.readonly)

    @property
    def closed(self) -> bool:
        return not self.memory_live[0]

    @property
    def __cuda_array_interface__(self) -> dict:
        """CAI v3, without a `stream` key: by the protocol, nothing for the consumer to wait for. Work hgemm
        queued on other streams is the caller's to order (DLPack export does that: `__dlpack__(stream=)`)."""
        return {"shape": self.shape, "typestr": CAI_TYPESTR[self.dtype], "data": (self.ptr, self.readonly),
                "strides": None if self.is_c_contiguous else self.strides, "version": 3}

    # -- transfers ----------------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        self.check_open()
        if not self.is_c_contiguous:
            raise ValidationError("to_numpy() needs a C-contiguous array")
        return self.to_host(np.empty(self.shape, dtype=numpy_dtype(self.dtype)))

    def to_host(self, out: np.ndarray | None = None) -> np.ndarray:
        """This C-contiguous array's bytes in host memory: into `out` (a C-contiguous array of as many
        bytes), else into a new array in the device's bit layout (bf16 as uint16 bits, dtypes.STORAGE).
        Synchronous on the legacy stream: work queued on other streams is the caller's to wait for."""
        self.check_open()
        if not self.is_c_contiguous:
            raise ValidationError("to_host() needs a C-contiguous array")
        if out is None:
            out = np.empty(self.shape, dtype=STORAGE[self.dtype])
        elif out.nbytes != self.nbytes or not out.flags.c_contiguous:
            raise ValidationError(f"to_host(out): out must be C-contiguous and hold {self.nbytes} bytes, "
                                  f"not {out.nbytes}")
        if out.nbytes:
            get_device(self.device)
            check(driver().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def copy_from_host(self, host: np.ndarray) -> None:
        """Write `host` (this array's shape, in the device's bit layout: any numpy dtype of the same item
        size) into this array, which may be a 2-D view with a row or column stride of one element: one
        copy per contiguous row (or column), so the bytes between them stay as they are."""
        host = np.asarray(host)
        if host.shape != self.shape or host.itemsize != self.itemsize:
            raise ValidationError(f"host array {host.dtype}{list(host.shape)} does not fit the device array "
                                  f"{self.dtype}{list(self.shape)}")
        self.check_open()
        if not host.size:
            return
        get_device(self.device)
        self.note_writer(LEGACY_STREAM)  # (a pageable copy returns before its DMA lands)
        drv = driver()
        if self.is_c_contiguous:
            host = np.ascontiguousarray(host)
            check(drv.cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
            return
        if self.ndim == 2 and self.strides[1] == self.itemsize:
            lines, step = host, self.strides[0]  # rows
        elif self.ndim == 2 and self.strides[0] == self.itemsize:
            lines, step = host.T, self.strides[1]  # columns
        else:
            raise ValidationError(f"copy_from_host() writes C-contiguous arrays and 2-D views with a unit "
                                  f"row or column stride, not strides {self.strides} bytes")
        for i, line in enumerate(np.ascontiguousarray(lines)):
            check(drv.cuMemcpyHtoD(self.ptr + i * step, line.ctypes.data, line.nbytes), "cuMemcpyHtoD")

    def copy_from_numpy(self, a: np.ndarray, stream: Any = None) -> None:
        a = np.ascontiguousarray(a, dtype=numpy_dtype(self.dtype))
        if a.shape != self.shape:
            raise ValidationError(f"shape {a.shape} does not match the device array's {self.shape}")
        self.check_open()
        get_device(self.device)
        self.note_writer(LEGACY_STREAM)
        check(driver().cuMemcpyHtoD(self.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")

    def fill_bytes(self, byte: int, stream: Any = None) -> None:
        """Set every byte (0xFF makes every fp16/fp32 element a NaN: poison before a launch)."""
        self.check_open()
        get_device(self.device)
        handle = stream_handle(stream)
        self.note_writer(handle)
        check(driver().cuMemsetD8Async(self.ptr, byte, self.nbytes, handle), "cuMemsetD8Async")

    def note_writer(self, stream: int) -> None:
        """hgemm queues work that writes this memory on `stream` (an integer handle; 0 is the legacy default
        stream). A write on the per-thread default stream, or on more than MAX_WRITER_STREAMS streams, makes
        the writers unknown: the per-thread stream another thread exports from is not the writer's."""
        writers = self.writers
        if stream in writers:
            return
        if stream == 0:
            stream = LEGACY_STREAM
        elif stream == PER_THREAD_STREAM or len(writers) >= MAX_WRITER_STREAMS:
            stream = UNKNOWN_WRITER
        writers.add(stream)

    def close(self) -> None:
        """Free the memory now, or, while a DLPack consumer still holds it, when the last one lets go."""
        if self._finalizer is None:
            return
        with _exports_lock:
            if self._exports:
                self._close_deferred = True
                return
        self._finalizer()

    def __enter__(self) -> "DeviceArray":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def check_open(self) -> None:
        if not self.memory_live[0]:
            raise ValidationError("this device array was closed; its memory is freed")

    # -- DLPack export ------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.CUDA, self.device

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of this array (`torch.from_dlpack(a)`, `cupy.from_dlpack(a)`), by the Python
        array API's protocol: a versioned (DLPack 1.0) capsule where `max_version` allows one, zero-copy
        unless `copy=True`; the memory stays valid until the consumer lets go, even through `close()`.

        Streams, by the protocol: `stream` is where the consumer will use the array (None or 1: the legacy
        default stream, 2: the per-thread default stream, else a stream handle; -1: no ordering at all; 0 is
        refused as ambiguous). The export makes that stream wait, through an event and with nothing waiting
        on the host, for the work hgemm queued on the streams that write this memory (`writers`: matmul,
        grouped_matmul, launch, fill_bytes, the host copies), so the consumer may read it at once there
        (what another library queued on memory it took from us is its own to order, as the protocol says).
        Where those writers are unknown (a view of foreign memory or of a bare pointer), one of them is
        capturing a CUDA graph, or `copy=True`, it first waits for all the work queued on this GPU
        (cuCtxSynchronize) instead. A writer stream must not be destroyed before the export; writes captured
        into a CUDA graph are ordered by the stream the graph is launched on, which is the caller's to order.
        """
        self.check_open()
        if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int)
                                   or stream < -1 or stream == 0):
            raise ValidationError(f"__dlpack__(stream={stream!r}): a CUDA stream is an integer handle, 1 (legacy "
                                  "default), 2 (per-thread default) or -1 (no synchronisation); 0 is ambiguous")
        if dl_device is not None and tuple(int(x) for x in dl_device) != self.__dlpack_device__():
            raise BufferError(f"this array lives on DLPack device {self.__dlpack_device__()} and exports only "
                              f"there, not to {tuple(dl_device)}: copy it to the host with to_numpy()")
        versioned = max_version is not None and int(max_version[0]) >= 1
        if self.readonly and not copy and not versioned:
            raise BufferError("a read-only array exports only as a versioned capsule (DLPack 1.0 flags it "
                              "read-only): pass max_version=(1, 0), or copy=True")
        owner = self._memory_owner()
        if owner._close_deferred:
            raise ValidationError("this device array was closed; its memory is freed when its DLPack consumers let go")
        if copy:
            get_device(self.device).synchronize()
        elif stream != -1:
            dev = get_device(self.device)
            if not order_after_writers(LEGACY_STREAM if stream is None else stream, tuple(self.writers), self.device):
                dev.synchronize()
        src, flags = self, dlpack.FLAG_READ_ONLY if self.readonly else 0
        if copy:
            src = owner = self._contiguous_copy()
            flags = dlpack.FLAG_IS_COPIED
        with _exports_lock:
            owner._exports += 1
        try:
            return dlpack.make_capsule(src.ptr, src.shape, src.strides, src.dtype, src.device, keep=src,
                                       on_release=functools.partial(_release_export, owner),
                                       versioned=versioned, flags=flags)
        except BaseException:
            _release_export(owner)
            raise

    def _memory_owner(self) -> "DeviceArray":
        """The array whose close() frees this one's memory (itself, or the array it is a view of)."""
        a = self
        while a._finalizer is None and isinstance(a._owner, DeviceArray):
            a = a._owner
        return a

    def _contiguous_copy(self) -> "DeviceArray":
        if not self.is_c_contiguous:
            raise BufferError(f"copy=True exports C-contiguous arrays only; this one has strides {self.strides} "
                              "bytes: export it without a copy and copy in the consumer")
        dup = DeviceArray.empty(self.shape, self.dtype, self.device)
        if self.nbytes:
            check(driver().cuMemcpyDtoD(dup.ptr, self.ptr, self.nbytes), "cuMemcpyDtoD (DLPack copy)")
            get_device(self.device).synchronize()  # (the copy ran on the legacy stream; the consumer's may not)
        return dup

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<DeviceArray {self.dtype}{list(self.shape)} at 0x{self.ptr:x}{state}>"


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The strides of a C-contiguous array of `shape`, in units of `itemsize` bytes (1: in elements)."""
    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _release_export(owner: DeviceArray) -> None:
    """A DLPack consumer let go of `owner`'s memory: free it if close() was called meanwhile."""
    with _exports_lock:
        owner._exports -= 1
        free = owner._close_deferred and not owner._exports
    if free:
        owner.close()


def _free(device: Any, ptr: Any, live: list[bool]) -> None:
    live[0] = False
    try:
        device.make_current()
        driver().cuMemFree(ptr)
    except Exception:  # interpreter shutdown
        pass


def note_write(x: Any, stream: int) -> None:
    """A front door queues work that writes `x` on `stream`: remembered where `x` is a DeviceArray (its
    `writers`, which a DLPack export orders its consumer after); other arrays' frameworks order their own."""
    if isinstance(x, DeviceArray) and stream not in x.writers:  # (a repeat call: one set lookup)
        x.note_writer(stream)


def to_device(a: np.ndarray | Any, device: int = 0) -> DeviceArray:
    """Copy a numpy array (or anything np.asarray takes) to a new owning DeviceArray on GPU `device`
    (fp16 and fp32 arrays; bf16 as ml_dtypes.bfloat16, the `bf16` extra)."""
    return DeviceArray.from_numpy(np.asarray(a), device)


def empty(shape: tuple[int, ...], dtype: str | np.dtype | Any = "f16", device: int = 0) -> DeviceArray:
    """A new owning, uninitialised, C-contiguous DeviceArray of `shape` and `dtype` ("f16", "bf16", "f32",
    a numpy dtype or a name such as "float16") on GPU `device`."""
    return DeviceArray.empty(shape, dtype, device)


# -- zero-copy views ----------------------------------------------------------------------------

def from_dlpack(obj: Any, stream: int | None = None) -> DeviceArray:
    """A view of a DLPack producer's CUDA array. `stream` (DLPack's convention: 1 = the legacy default
    stream, 2 = per-thread default, else a handle) is where the caller will use it: the producer
    orders its pending work before that stream."""
    dev_type, dev_id = obj.__dlpack_device__()
    if int(dev_type) != dlpack.CUDA:
        raise ValidationError(f"{type(obj).__name__} lives on DLPack device type {int(dev_type)}, not a CUDA "
                              "GPU: copy it with hgemm_rt.to_device(numpy_array)")
    try:
        capsule = obj.__dlpack__(stream=stream)
    except TypeError:  # a producer older than the stream keyword
        capsule = obj.__dlpack__()
    # The capsule stays unconsumed and alive inside the view, so the producer's deleter runs when the
    # view goes away.
    ptr, shape, strides, code = dlpack.read_capsule(capsule)
    return DeviceArray(ptr, shape, code, strides, owner=(obj, capsule), device=int(dev_id))


_CODE_OF_TYPESTR = {typestr: code for code, typestr in CAI_TYPESTR.items()}


def from_cai(obj: Any, stream: int | None = LEGACY_STREAM) -> DeviceArray:
    """A view of an object's `__cuda_array_interface__`. Its `stream` key (the producer's) is honoured:
    `stream` (a handle; 1, the default, is the legacy default stream) first waits for the work queued
    there. stream=None leaves that to the caller (operands.describe: the call's stream is known later)."""
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    typestr = cai["typestr"]
    code = _CODE_OF_TYPESTR.get(typestr)
    if code is None:
        raise ValidationError(f"unsupported __cuda_array_interface__ typestr {typestr!r}")
    producer = cai_stream(cai, type(obj).__name__)
    shape = tuple(cai["shape"])
    strides = tuple(cai["strides"]) if cai.get("strides") else None
    dev = 0
    if ptr:
        init()
        drv = driver()
        attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        dev = int(check(drv.cuPointerGetAttribute(attr, ptr), "cuPointerGetAttribute(DEVICE_ORDINAL)"))
    if stream is not None:
        wait_for(stream, producer, dev)
    return DeviceArray(ptr or 0, shape, code, strides, owner=obj, device=dev, readonly=bool(readonly))


def as_device_array(obj: Any, what: str = "array", *, stream: Any = None) -> DeviceArray:
    """A DeviceArray for `obj` without copying: our own arrays, `__cuda_array_interface__` objects
    (CuPy, Numba, PyTorch) or DLPack producers on a CUDA device. Host arrays are refused. `stream` is where
    the caller will use it (default: the legacy default stream): a CAI producer's stream is waited for, a
    DLPack producer orders its work before it."""
    if isinstance(obj, DeviceArray):
        obj.check_open()
        return obj
    if isinstance(obj, np.ndarray):
        raise ValidationError(f"{what} is a numpy array in host memory: copy it first with hgemm_rt.to_device()")
    consumer = stream_handle(stream) or LEGACY_STREAM
    try:
        has_cai = hasattr(obj, "__cuda_array_interface__")
    except TypeError:  # torch raises TypeError (not AttributeError) for bf16: DLPack still works
        has_cai = False
    if has_cai:
        return from_cai(obj, consumer)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return from_dlpack(obj, consumer)
    raise ArgumentTypeError(
        f"{what} of type {type(obj).__name__} is not a GPU array (no __cuda_array_interface__ or DLPack)"
    )


def byte_extent(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """[lo, hi) bytes a strided view can touch."""
    lo = hi = ptr
    for n, s in zip(shape, strides):
        if n > 1:
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    return lo, hi + itemsize


# -- strided views, whole -------------------------------------------------------------------------
# A view here is anything with ptr, shape, byte strides and a dtype code (a DeviceArray, a launcher.ArrayRef).

def strided_to_host(view: Any, device: int = 0) -> np.ndarray:
    """A host copy of a strided device view, in the device's bit layout (bf16 as uint16 bits): the
    bytes it spans come over in one synchronous copy, then numpy applies the view's strides."""
    lo, hi = byte_extent(view.ptr, view.shape, view.strides, ITEMSIZE[view.dtype])
    buf = np.empty(hi - lo, dtype=np.uint8)
    get_device(device)
    check(driver().cuMemcpyDtoH(buf.ctypes.data, lo, hi - lo), "cuMemcpyDtoH")
    base = buf[view.ptr - lo:].view(STORAGE[view.dtype])
    return np.lib.stride_tricks.as_strided(base, view.shape, view.strides).copy()


def fill_strided(view: Any, byte: int, device: int = 0, stream: Any = None) -> None:
    """Set every byte a strided view spans, the gaps between its rows included, on `stream`."""
    lo, hi = byte_extent(view.ptr, view.shape, view.strides, ITEMSIZE[view.dtype])
    get_device(device)
    handle = stream_handle(stream)
    note_write(view, handle)
    check(driver().cuMemsetD8Async(lo, byte, hi - lo, handle), "cuMemsetD8Async")
