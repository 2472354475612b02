"""The steady-state protocol (`bench.py --steady [ROUNDS]`), for claims within a few percent.

Under a 700 W cap the SM clock falls from its boost to ~1.5-1.6 GHz within milliseconds of a large
GEMM, so the first contender timed on a cool GPU gets a faster clock than the rest. Here the
contenders (the checked kernels and cuBLAS variants of one shape, or hg.matmul and the cuBLAS
variants of one matmul row) first run round-robin, untimed, for `warm_s` seconds (the board reaches
its power-capped state), then are timed in `rounds` rounds, each round every contender in turn and
in a rotated order, so that slow drifts of the clock (power, temperature) fall on all of them alike.
A round times a contender with hgemm_rt.timing.time_fn (CUDA events, L2 flushed before every run,
the median) while devinfo.ClockSampler records the SM clock and board power; ratios are taken within
a round. The budget is per contender over all rounds.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hgemm_rt import HgemmError, get_device
from hgemm_rt.timing import L2Flusher, time_fn

from .devinfo import ClockSampler

# (both protocols) below this a launch is as short as Python's launch latency: queue the timed runs ahead
QUEUE_AHEAD_BELOW_MS = 5.0


@dataclass(frozen=True)
class Protocol:
    rounds: int = 5
    warm_s: float = 1.5
    budget_s: float = 0.5  # warm-up excluded: the timed runs of one contender over all rounds
    iters: int = 20  # timed runs per round at most

    def record(self) -> dict[str, Any]:
        return {"protocol": "steady", "rounds": self.rounds, "warm_s": self.warm_s}


@dataclass
class Contender:
    """One thing to time: `est_ms` (the GPU time of one warm launch) sizes its runs per round."""
    run: Callable[[], Any]
    est_ms: float
    stream: Any = None
    ms: list[float] = field(default_factory=list)  # each round's median
    sm_mhz: list[float | None] = field(default_factory=list)
    board_w: list[float | None] = field(default_factory=list)
    throttle: set[str] = field(default_factory=set)
    iters: int = 0
    error: str | None = None  # set when a timed round raised: the contender leaves the rounds

    def median_ms(self) -> float:
        return statistics.median(self.ms)

    def record(self) -> dict[str, Any]:
        """The per-round figures a results file keeps beside the median."""
        mhz = [x for x in self.sm_mhz if x is not None]
        watts = [x for x in self.board_w if x is not None]
        return {"ms": self.ms, "sm_mhz": statistics.median(mhz) if mhz else None,
                "board_w": statistics.median(watts) if watts else None, "throttle": sorted(self.throttle)}


def iters_per_round(c: Contender, p: Protocol) -> int:
    return int(min(p.iters, max(1, p.budget_s * 1e3 / p.rounds / max(c.est_ms, 1e-3))))


def warm_up(contenders: list[Contender], seconds: float) -> None:
    """Untimed launches, round-robin, until the board has run `seconds` under this load."""
    dev = get_device()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for c in contenders:
            c.run()
        dev.synchronize()


def interleave(contenders: list[Contender], p: Protocol, flusher: L2Flusher, sampler: ClockSampler) -> None:
    """Warm up, then the rounds; fills each contender's per-round lists (or its error)."""
    if not contenders:
        return
    warm_up(contenders, p.warm_s)
    for rnd in range(p.rounds):
        live = [c for c in contenders if c.error is None]
        shift = rnd % max(len(live), 1)
        for c in live[shift:] + live[:shift]:
            n = iters_per_round(c, p)
            # one untimed launch: the previous contender left its own data in the caches
            try:
                t, seen = sampler.during(lambda c=c, n=n: time_fn(
                    c.run, warmup=1, iters=n, stream=c.stream, flush=flusher, queue_ahead=c.est_ms < QUEUE_AHEAD_BELOW_MS))
            except (HgemmError, RuntimeError) as exc:
                c.error = f"error in round {rnd + 1}: {type(exc).__name__}: {exc}"
                continue
            c.ms.append(t.median_ms)
            c.sm_mhz.append(seen.sm_mhz)
            c.board_w.append(seen.board_w)
            c.throttle.update(seen.throttle)
            c.iters += n
