"""DLPack capsules through ctypes: reading a producer's (for views of torch/JAX/... arrays) and making our
own (DeviceArray.__dlpack__), so that torch.from_dlpack and cupy.from_dlpack take our arrays without a
copy. The structs are those of dlpack.h: DLManagedTensor in a capsule named "dltensor" (before DLPack
1.0), DLManagedTensorVersioned in one named "dltensor_versioned" (1.0 and later). A consumer renames
the capsule it takes ("used_dltensor...") and later calls the struct's deleter; a capsule that dies
still bearing its first name was never taken, and its destructor releases the export instead.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

from .dtypes import ITEMSIZE
from .errors import ValidationError

CUDA = 2  # kDLCUDA
# (DLDataTypeCode, bits) of each dtype: kDLFloat = 2, kDLBfloat = 4
DTYPE_CODES = {"f16": (2, 16), "f32": (2, 32), "bf16": (4, 16)}
_DTYPE_OF = {v: k for k, v in DTYPE_CODES.items()}
VERSION = (1, 0)  # of the versioned struct we make (1.1 added dtypes only)
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*deleter)(DLManagedTensor[Versioned] *self)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# Capsule names live as long as the module (a capsule keeps only the pointer).
NAME, NAME_VERSIONED = b"dltensor", b"dltensor_versioned"

# Prototypes of our own (not ctypes.pythonapi's shared ones, whose argtypes other code may set). The
# destructor side takes the capsule as a raw pointer: it runs while the capsule is being deallocated.
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))


# -- reading a producer's capsule -------------------------------------------------------------------

def read_capsule(capsule: Any) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, str]:
    """(address, shape, byte strides or None for compact row-major, dtype code) of a legacy
    "dltensor" capsule. The capsule is left unconsumed: its owner keeps it alive as long as the view."""
    t = DLTensor.from_address(_capsule_pointer(capsule, NAME))  # a DLManagedTensor starts with its DLTensor
    code = _DTYPE_OF.get((t.dtype.code, t.dtype.bits))
    if code is None or t.dtype.lanes != 1:
        raise ValidationError(f"unsupported DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                              f"{t.dtype.lanes} lanes): use float16, bfloat16 or float32")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] * ITEMSIZE[code] for i in range(t.ndim)) if t.strides else None
    return (t.data or 0) + t.byte_offset, shape, strides, code


# -- making our own ---------------------------------------------------------------------------------

class _Export:
    """What one capsule points into, alive until its consumer lets go: the struct, its shape and strides
    arrays, the exported object, and what to do on release."""

    __slots__ = ("managed", "shape", "strides", "keep", "on_release")

    def __init__(self, managed: Any, shape: Any, strides: Any, keep: Any, on_release: Callable[[], None]):
        self.managed, self.shape, self.strides, self.keep, self.on_release = managed, shape, strides, keep, on_release


# struct address -> its export. No lock: a dict's set and pop are atomic, and a lock here could be
# re-entered by a capsule destructor that garbage collection runs while it is held.
_live: dict[int, _Export] = {}


def live_exports() -> int:
    """How many capsules made here are still held (by a consumer, or not yet consumed)."""
    return len(_live)


def _release(address: int | None) -> None:
    export = _live.pop(address or 0, None)
    if export is not None:  # (once: the deleter and an unconsumed capsule's destructor never both find it)
        export.on_release()


def _deleter(address: int | None) -> None:
    try:  # called by the consumer, from C, on any thread
        _release(address)
    except Exception:  # interpreter shutdown: nothing left to release into
        pass


def _capsule_destructor(capsule: int | None) -> None:
    try:
        for name in (NAME, NAME_VERSIONED):
            if _raw_is_valid(capsule, name):  # still its first name: never consumed
                _release(_raw_pointer(capsule, name))
    except Exception:
        pass


_DELETER_FN = _DELETER(_deleter)
_DESTRUCTOR_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)  # PyCapsule_Destructor
_DESTRUCTOR_PTR = ctypes.cast(_DESTRUCTOR_FN, ctypes.c_void_p)


def make_capsule(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str, device: int, *,
                 keep: Any, on_release: Callable[[], None], versioned: bool, flags: int = 0) -> Any:
    """A capsule describing GPU memory at `ptr` (byte `strides`). `keep` stays referenced and `on_release`
    runs once, when the consumer's deleter runs or the capsule dies unconsumed (never if this raises)."""
    itemsize = ITEMSIZE[dtype]
    if any(s % itemsize for s in strides):
        raise BufferError(f"strides {strides} bytes are not whole {dtype} elements: DLPack counts elements")
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*(s // itemsize for s in strides))
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = managed.dl_tensor
    t.data, t.byte_offset = ptr or None, 0
    t.device = DLDevice(CUDA, device)
    t.ndim = ndim
    t.dtype = DLDataType(*DTYPE_CODES[dtype], 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _DELETER_FN
    if versioned:
        managed.version = DLPackVersion(*VERSION)
        managed.flags = flags
    address = ctypes.addressof(managed)
    _live[address] = _Export(managed, shape_arr, strides_arr, keep, on_release)
    try:
        return _capsule_new(address, NAME_VERSIONED if versioned else NAME, _DESTRUCTOR_PTR)
    except BaseException:  # no capsule: nothing was exported (the caller undoes its own bookkeeping)
        del _live[address]
        raise
