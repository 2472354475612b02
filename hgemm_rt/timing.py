"""Timing with CUDA events: warm-up, an L2 flush before every timed run, the median of the repeats."""
from __future__ import annotations

import statistics
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

    def __call__(self, stream: Any = None) -> None:
        if self.buffer is not None:
            self.buffer.fill_bytes(0, stream)

    def close(self) -> None:
        if self.buffer is not None:
            self.buffer.close()


def time_fn(fn: Callable[[], Any], *, warmup: int = 5, iters: int = 20, stream: Any = None,
            flush: L2Flusher | None = None) -> Timing:
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    for _ in range(warmup):
        fn()
    pairs = [(Event(), Event()) for _ in range(iters)]
    for start, end in pairs:
        if flush is not None:
            flush(stream)
        start.record(stream)
        fn()
        end.record(stream)
    pairs[-1][1].synchronize()
    times = [end.elapsed_ms(start) for start, end in pairs]
    return Timing(statistics.median(times), min(times), max(times), iters)
