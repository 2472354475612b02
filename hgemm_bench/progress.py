"""A progress bar on stderr for sweeps: a redrawn line on a terminal, a line every few seconds in a
log. Work is weighted by M*N*K (a 8192^3 row costs 512x a 1024^3 one), which keeps the ETA honest."""
from __future__ import annotations

import sys
import time
from typing import TextIO


def fmt_s(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    def __init__(self, total: float, enabled: bool = True, stream: TextIO | None = None, every_s: float = 15.0):
        self.total = max(total, 1e-9)
        self.done = 0.0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.every_s = every_s

    def line(self, what: str, width: int = 30) -> str:
        frac = min(1.0, self.done / self.total)
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / frac * (1 - frac) if frac > 0 else float("nan")
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        eta_s = fmt_s(eta) if frac > 0 else "?"
        return f"[{bar}] {100 * frac:5.1f}% {fmt_s(elapsed)} eta {eta_s} {what}"

    def update(self, what: str, advance: float = 0.0) -> None:
        self.done += advance
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            print("\r" + self.line(what[:70]).ljust(130), end="", file=self.stream, flush=True)
        elif now - self.last >= self.every_s:
            self.last = now
            print(self.line(what), file=self.stream, flush=True)

    def clear(self) -> None:
        """Before printing a table on a terminal: remove the bar line."""
        if self.tty:
            print("\r" + " " * 130 + "\r", end="", file=self.stream, flush=True)
