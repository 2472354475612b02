"""DLPack export on the CPU: DeviceArray.__dlpack__ describes views of fake device addresses (nothing is
dereferenced), and stream=-1 asks for no synchronisation, so no GPU is touched. GPU consumers (torch,
CuPy): tests/test_gpu_dlpack.py."""
from __future__ import annotations

import ctypes
import gc
import weakref

import pytest

from hgemm_rt import DeviceArray, ValidationError, dlpack
from hgemm_rt.memory import from_dlpack

ADDR = 0x7F0000000000

_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
USED = b"used_dltensor"  # (a consumer's static string, as torch and CuPy rename a capsule they take)


def _tensor(capsule, versioned: bool):
    name = dlpack.NAME_VERSIONED if versioned else dlpack.NAME
    struct = dlpack.DLManagedTensorVersioned if versioned else dlpack.DLManagedTensor
    return struct.from_address(_get_pointer(capsule, name))


@pytest.mark.parametrize("dtype,code,bits", [("f16", 2, 16), ("bf16", 4, 16), ("f32", 2, 32)])
def test_legacy_capsule_describes_the_array(dtype, code, bits):
    a = DeviceArray(ADDR, (3, 5), dtype, device=1)
    cap = a.__dlpack__(stream=-1)
    assert _get_name(cap) == b"dltensor"
    t = _tensor(cap, versioned=False).dl_tensor
    assert (t.data, t.byte_offset, t.device.device_type, t.device.device_id) == (ADDR, 0, 2, 1)  # kDLCUDA
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (code, bits, 1)
    assert [t.shape[i] for i in range(2)] == [3, 5] and [t.strides[i] for i in range(2)] == [5, 1]
    assert a.__dlpack_device__() == (2, 1)


def test_versioned_capsule_for_a_dlpack_1_consumer_and_strides_in_elements():
    a = DeviceArray(ADDR, (64, 32), "bf16")
    cap = a.T.__dlpack__(stream=-1, max_version=(1, 3))  # a transposed view: strides, no copy
    assert _get_name(cap) == b"dltensor_versioned"
    m = _tensor(cap, versioned=True)
    assert (m.version.major, m.version.minor, m.flags) == (1, 0, 0)
    t = m.dl_tensor
    assert [t.shape[i] for i in range(2)] == [32, 64] and [t.strides[i] for i in range(2)] == [1, 32]
    assert _get_name(a.__dlpack__(stream=-1, max_version=(0, 8))) == b"dltensor"  # an older consumer


def test_read_only_arrays_export_flagged_or_not_at_all():
    a = DeviceArray(ADDR, (4, 4), "f16", readonly=True)
    assert _tensor(a.__dlpack__(stream=-1, max_version=(1, 0)), True).flags == dlpack.FLAG_READ_ONLY
    with pytest.raises(BufferError, match="read-only array exports only as a versioned capsule"):
        a.__dlpack__(stream=-1)


@pytest.mark.parametrize("stream", [0, -2, True, 1.5, "1"])
def test_bad_streams_are_refused_before_any_driver_call(stream):
    with pytest.raises(ValidationError, match="a CUDA stream is an integer handle"):
        DeviceArray(ADDR, (4, 4), "f16").__dlpack__(stream=stream)


def test_another_device_is_refused():
    a = DeviceArray(ADDR, (4, 4), "f16", device=0)
    assert _get_name(a.__dlpack__(stream=-1, dl_device=(2, 0))) == b"dltensor"
    with pytest.raises(BufferError, match=r"exports only there, not to \(1, 0\)"):
        a.__dlpack__(stream=-1, dl_device=(1, 0))


def test_an_unconsumed_capsule_releases_the_array_when_it_dies():
    a = DeviceArray(ADDR, (4, 4), "f16")
    gone = weakref.ref(a)
    before = dlpack.live_exports()
    cap = a.__dlpack__(stream=-1)
    del a
    gc.collect()
    assert gone() is not None and dlpack.live_exports() == before + 1  # the capsule keeps it
    del cap
    gc.collect()
    assert gone() is None and dlpack.live_exports() == before


def test_a_consumed_capsule_keeps_the_array_until_the_consumer_calls_the_deleter():
    a = DeviceArray(ADDR, (4, 4), "f16")
    gone = weakref.ref(a)
    cap = a.__dlpack__(stream=-1, max_version=(1, 0))
    managed = _tensor(cap, versioned=True)
    assert _set_name(cap, USED) == 0  # what a consumer does when it takes the capsule
    del a, cap
    gc.collect()
    assert gone() is not None  # the consumer's tensor still points into it
    managed.deleter(ctypes.addressof(managed))  # the consumer lets go
    gc.collect()
    assert gone() is None


def test_our_own_import_reads_our_export():
    class Producer:  # a DLPack-only wrapper, so from_dlpack takes the capsule path
        def __init__(self, arr):
            self.arr = arr

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

        def __dlpack__(self, stream=None):
            return self.arr.__dlpack__(stream=-1)

    a = DeviceArray(ADDR, (8, 16), "bf16")
    view = from_dlpack(Producer(a.T))
    assert (view.ptr, view.shape, view.strides, view.dtype) == (ADDR, (16, 8), (2, 32), "bf16")
