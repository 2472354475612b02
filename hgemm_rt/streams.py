"""Ordering one stream after another's pending work, as the array protocols require of a consumer: an
event recorded on the producer stream, waited for on the consumer stream (through ctypes: a repeat call
may do this on every call). The CAI `stream` key is read here, by every front door alike, and a DLPack
export orders its consumer after the streams that wrote the array (`order_after_writers`)."""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Iterable

from ._driver import check, check_code, driver, native
from .device import get_device
from .errors import ValidationError

LEGACY_STREAM = 1  # CU_STREAM_LEGACY, and DLPack's / CAI's name for the legacy default stream
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: the calling thread's default stream
# in a set of writer streams (memory.DeviceArray.writers): some write's stream is not known, so nothing short
# of a device synchronisation orders a reader after it
UNKNOWN_WRITER = -1


def cai_stream(cai: dict, what: str) -> int | None:
    """The producer stream a `__cuda_array_interface__` names (None: no key, nothing to wait for). The protocol
    disallows 0 (1 is the legacy default stream, 2 the per-thread one)."""
    producer = cai.get("stream")
    if producer is not None and (isinstance(producer, bool) or not isinstance(producer, int) or producer <= 0):
        raise ValidationError(f"{what}: __cuda_array_interface__ stream {producer!r} is not a stream handle "
                              "(0 is disallowed by the protocol: 1 is the legacy default stream)")
    return producer


class _Waits:
    """One reusable event per device to make a stream wait for another's pending work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[int, Any] = {}

    def wait(self, consumer: int, producer: int, device: int) -> None:
        if producer == consumer or (producer in (0, LEGACY_STREAM) and consumer in (0, LEGACY_STREAM)):
            return
        with self._lock:
            ev = self._events.get(device)
            if ev is None:
                get_device(device)
                drv = driver()
                ev = self._events[device] = int(check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING),
                                                      "cuEventCreate"))
            lib = native()
            check_code(lib.cuEventRecord(ev, producer or None), "cuEventRecord (producer stream)")
            check_code(lib.cuStreamWaitEvent(consumer or None, ev, 0), "cuStreamWaitEvent")


_waits = _Waits()


def wait_for(consumer: int, producer: int | None, device: int) -> None:
    """Make `consumer` wait for the work queued on `producer` so far (nothing for None, the same stream, or the
    two default streams)."""
    if producer is not None:
        _waits.wait(consumer, producer, device)


def is_capturing(stream: int) -> bool:
    """Whether `stream` is capturing a CUDA graph (DriverError if the query fails)."""
    status = ctypes.c_int()
    check_code(native().cuStreamIsCapturing(stream or None, status), "cuStreamIsCapturing")
    return status.value != 0


def may_capture(stream: int) -> bool:
    """True unless `stream` is certainly not capturing (an error, such as the legacy stream's implicit
    capture, counts as capturing), for what a capture must not see: a graph launch (CUDA 13:
    STREAM_CAPTURE_UNSUPPORTED, and the capture is lost; a capturing stream gets the kernel launches instead),
    an event recorded to order another stream."""
    status = ctypes.c_int()
    return native().cuStreamIsCapturing(stream or None, status) != 0 or status.value != 0


def order_after_writers(consumer: int, writers: Iterable[int], device: int) -> bool:
    """Make `consumer` wait for the work queued so far on each of the `writers` streams (an event recorded on
    each, waited for on `consumer`; nothing waits on the host). False, with nothing done, where events cannot
    order them: a writer is UNKNOWN_WRITER, or one is capturing a CUDA graph (an event recorded there would
    join the capture; a query that fails counts as capturing). The caller then synchronises the device."""
    pending = [w for w in writers if w != consumer]
    if UNKNOWN_WRITER in pending or any(may_capture(w) for w in pending):
        return False
    for w in pending:
        _waits.wait(consumer, w, device)
    return True
