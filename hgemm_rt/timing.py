"""Timing with CUDA events: warm-up, an L2 flush before every timed run, the median of the repeats."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from .device import Event, get_device
from .memory import DeviceArray


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    iters: int

    def tflops(self, M: int, N: int, K: int) -> float:
        return 2.0 * M * N * K / (self.median_ms * 1e-3) / 1e12


class L2Flusher:
    """Writing a buffer twice the size of L2 evicts the operands, so small problems are timed from
    device memory rather than from the cache."""

    def __init__(self, device: int = 0):
        l2 = get_device(device).info.l2_bytes
        self.buffer = DeviceArray.empty((max(2 * l2, 1 << 20),), "f32", device) if l2 else None
        self._fill_ms: float | None = None

    def __call__(self, stream: Any = None) -> None:
        if self.buffer is not None:
            self.buffer.fill_bytes(0, stream)

    def fill_ms(self, stream: Any = None) -> float:
        """GPU time of one flush (measured once)."""
        if self._fill_ms is None:
            start, end = Event(), Event()
            self(stream)
            start.record(stream)
            for _ in range(4):
                self(stream)
            end.record(stream)
            end.synchronize()
            self._fill_ms = max(end.elapsed_ms(start) / 4, 1e-3)
        return self._fill_ms

    def hold(self, ms: float, stream: Any = None) -> None:
        """Keep the GPU busy for about `ms` (back-to-back flushes), so that the host can queue the
        timed launches behind it: the events then time the kernel, not the host's launch latency."""
        if self.buffer is None or ms <= 0:
            return
        for _ in range(min(2000, math.ceil(ms / self.fill_ms(stream)))):
            self(stream)

    def close(self) -> None:
        if self.buffer is not None:
            self.buffer.close()


def time_fn(fn: Callable[[], Any], *, warmup: int = 5, iters: int = 20, stream: Any = None,
            flush: L2Flusher | None = None, queue_ahead: bool = False) -> Timing:
    """queue_ahead (needs `flush`): measure the host's cost of one launch, then hold the GPU busy for
    longer than queueing all timed runs takes, so that no timed run waits for the host (Python launch
    overhead is tens of microseconds: as long as a whole 1024^3 GEMM on a Hopper GPU)."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    for _ in range(warmup):
        fn()
    pairs = [(Event(), Event()) for _ in range(iters)]
    if queue_ahead and flush is not None:
        fill = flush.fill_ms(stream)
        t0 = time.perf_counter()
        flush(stream)
        fn()
        Event().record(stream)
        host_ms = (time.perf_counter() - t0) * 1e3
        flush.hold(min(200.0, 1.5 * iters * host_ms + fill), stream)
    for start, end in pairs:
        if flush is not None:
            flush(stream)
        start.record(stream)
        fn()
        end.record(stream)
    pairs[-1][1].synchronize()
    times = [end.elapsed_ms(start) for start, end in pairs]
    return Timing(statistics.median(times), min(times), max(times), iters)
