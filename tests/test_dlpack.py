"""DLPack export on the CPU: DeviceArray.__dlpack__ describes views of fake device addresses (nothing is
dereferenced), and stream=-1 asks for no synchronisation, so no GPU is touched; the stream ordering of an
export (an event on each stream that wrote the array, waited for on the consumer's; a device sync only
where the writers are unknown) runs against a fake driver. GPU consumers (torch, CuPy):
tests/test_gpu_dlpack.py."""
from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

from hgemm_rt import DeviceArray, DriverError, ValidationError, dlpack
from hgemm_rt.memory import from_dlpack, note_write

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


# -- stream ordering on export, with the driver faked: events, no device synchronisation ------------------

WRITER, CONSUMER = 0x5000, 0x6000  # stream handles (never dereferenced: the driver is fake)


class FakeGpu:
    """The driver calls an export and a fake array make: each logged as (name, stream or event...)."""

    class CUevent_flags:
        CU_EVENT_DISABLE_TIMING = 2

    def __init__(self):
        self.calls, self.capturing, self.fail = [], set(), {}

    # the device (memory.get_device, streams.get_device)
    def make_current(self):
        pass

    def synchronize(self):
        self.calls.append(("cuCtxSynchronize",))

    # cuda-python's driver (memory.driver, streams.driver)
    def cuMemAlloc(self, nbytes):
        return 0, ADDR

    def cuMemFree(self, ptr):
        return (0,)

    def cuMemsetD8Async(self, ptr, byte, n, stream):
        self.calls.append(("cuMemsetD8Async", stream))
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):
        self.calls.append(("cuMemcpyHtoD",))
        return (0,)

    def cuEventCreate(self, flags):
        return 0, 0xE0

    # the ctypes library (streams.native)
    def cuStreamIsCapturing(self, stream, status):
        status.value = int(stream in self.capturing)
        return 0

    def cuEventRecord(self, event, stream):
        self.calls.append(("cuEventRecord", event, stream))
        return self.fail.get("cuEventRecord", 0)

    def cuStreamWaitEvent(self, stream, event, flags):
        self.calls.append(("cuStreamWaitEvent", stream, event))
        return 0

    def named(self, *names):
        return [c for c in self.calls if c[0] in names]


@pytest.fixture
def gpu(monkeypatch):
    from hgemm_rt import memory, streams
    fake = FakeGpu()
    for module in (memory, streams):
        monkeypatch.setattr(module, "get_device", lambda ordinal=0: fake)
        monkeypatch.setattr(module, "driver", lambda: fake)
    monkeypatch.setattr(streams, "native", lambda: fake)
    monkeypatch.setattr(streams, "_waits", streams._Waits())  # (a fresh event cache: the fake's event)
    return fake


def _written(gpu, stream=WRITER, shape=(8, 8)):
    """A new array that a front door wrote on `stream` (as matmul's note_write), its driver log cleared."""
    a = DeviceArray.empty(shape, "f16")
    note_write(a, stream)
    gpu.calls.clear()
    return a


def test_an_export_orders_the_consumer_after_the_writer_with_an_event_not_a_device_sync(gpu):
    a = _written(gpu)
    a.__dlpack__(stream=CONSUMER)
    assert gpu.calls == [("cuEventRecord", 0xE0, WRITER), ("cuStreamWaitEvent", CONSUMER, 0xE0)]
    a.close()


@pytest.mark.parametrize("stream,consumer", [(None, 1), (1, 1), (2, 2)], ids=["None", "legacy", "per-thread"])
def test_the_protocols_default_streams_are_the_consumers(gpu, stream, consumer):
    a = _written(gpu)
    a.__dlpack__(stream=stream)
    assert gpu.named("cuStreamWaitEvent") == [("cuStreamWaitEvent", consumer, 0xE0)]
    assert not gpu.named("cuCtxSynchronize")
    a.close()


def test_nothing_to_order_on_the_writers_own_stream_or_when_asked_for_none(gpu):
    a = _written(gpu)
    a.__dlpack__(stream=WRITER)
    a.__dlpack__(stream=-1)
    fresh = DeviceArray.empty((4, 4), "f16")  # nothing has written it
    fresh.__dlpack__(stream=CONSUMER)
    assert gpu.calls == []
    a.close()
    fresh.close()


def test_every_writer_stream_is_waited_for_and_views_share_them(gpu):
    a = _written(gpu)
    note_write(a.T, 0x7000)  # a view's writer is its memory's
    half = DeviceArray(a.ptr, (4, 8), "f16", owner=a)
    note_write(half, 0)  # 0: the legacy default stream
    assert a.writers == {WRITER, 0x7000, 1} and half.writers is a.writers
    gpu.calls.clear()
    half.__dlpack__(stream=CONSUMER)
    assert sorted(c[2] for c in gpu.named("cuEventRecord")) == [1, WRITER, 0x7000]
    assert [c[1] for c in gpu.named("cuStreamWaitEvent")] == [CONSUMER] * 3
    assert not gpu.named("cuCtxSynchronize")
    a.close()


def test_the_host_copies_and_fill_bytes_are_writers(gpu):
    a = DeviceArray.empty((4, 4), "f16")
    a.copy_from_host(np.zeros((4, 4), np.float16))
    assert a.writers == {1}  # (the legacy default stream: a pageable copy returns before its DMA lands)
    a.fill_bytes(0xFF, stream=WRITER)
    assert a.writers == {1, WRITER}
    gpu.calls.clear()
    a.__dlpack__(stream=1)  # a legacy consumer waits for the fill only
    assert gpu.calls == [("cuEventRecord", 0xE0, WRITER), ("cuStreamWaitEvent", 1, 0xE0)]
    a.close()


def test_unknown_writers_fall_back_to_a_device_sync(gpu):
    raw = DeviceArray(ADDR, (4, 4), "f16")  # a bare pointer: anyone may have written it
    raw.__dlpack__(stream=CONSUMER)
    assert gpu.calls == [("cuCtxSynchronize",)]

    class Producer:  # foreign memory, viewed through DLPack
        def __dlpack_device__(self):
            return raw.__dlpack_device__()

        def __dlpack__(self, stream=None):
            return raw.__dlpack__(stream=-1)

    view = from_dlpack(Producer())
    note_write(view, WRITER)  # hgemm's own write does not make the others known
    gpu.calls.clear()
    view.__dlpack__(stream=CONSUMER)
    assert gpu.calls == [("cuCtxSynchronize",)]


@pytest.mark.parametrize("writes", [[2], list(range(0x100, 0x100 + 9))], ids=["per-thread", "too-many-streams"])
def test_writers_it_cannot_name_later_are_unknown(gpu, writes):
    a = _written(gpu)
    for s in writes:
        note_write(a, s)
    a.__dlpack__(stream=CONSUMER)
    assert gpu.calls == [("cuCtxSynchronize",)]
    a.close()


def test_a_writer_capturing_a_graph_falls_back_to_a_device_sync(gpu):
    a = _written(gpu)
    gpu.capturing.add(WRITER)  # an event recorded there would join the capture
    a.__dlpack__(stream=CONSUMER)
    assert gpu.calls == [("cuCtxSynchronize",)]
    a.close()


def test_a_failing_event_record_raises(gpu):
    a = _written(gpu)
    gpu.fail["cuEventRecord"] = 400  # CUDA_ERROR_INVALID_HANDLE
    with pytest.raises(DriverError, match="cuEventRecord"):
        a.__dlpack__(stream=CONSUMER)
    a.close()


def test_only_device_arrays_remember_writers():
    note_write(np.zeros(3), WRITER)  # (another framework's array: its own framework orders it)
    note_write(None, WRITER)
