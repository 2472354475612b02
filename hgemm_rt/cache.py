"""The one eviction rule of the runtime's caches: each is a plain dict (a repeat call's lookup is one dict
lookup) of at most its limit of entries (CACHE_LIMIT unless it holds GPU memory), added to through put(): past the limit the entry least recently
added (or refreshed by hit()) goes, and an evicted value that has a close() is closed (an Execution's
temporaries freed at once, a launch plan closed)."""
from __future__ import annotations

import threading
from typing import Any, Callable

# entries per cache: recipes, executions and repeat calls (plans.PlanCache), a Matmul's calls per operand
# identity, an execution's packers per (alpha, beta) and launch plans per stream, a launch plan's parameter
# sets, a thread's reusable parameter arrays per (alpha, beta). 256: a model's distinct calls (each shape is
# one) stay validated and planned; past it the oldest pays a first call again
CACHE_LIMIT = 256
# ... but executions own GPU buffers (temporaries: operand copies, split-K workspaces, split planes), so at most this
# many stay allocated: a workload of many shapes holds no more device memory than 16 plans' temporaries
EXECUTIONS_LIMIT = 16


def close_value(value: Any) -> None:
    close = getattr(value, "close", None)
    if close is not None:
        close()


class Cache:
    """A dict (`entries`, read directly) and the lock its put()s take."""

    __slots__ = ("entries", "lock", "on_evict", "limit")

    def __init__(self, on_evict: Callable[[Any], None] | None = close_value, limit: int = CACHE_LIMIT):
        self.entries: dict = {}
        self.lock = threading.Lock()
        self.on_evict = on_evict
        self.limit = limit

    def put(self, key: Any, value: Any) -> Any:
        """Add (or replace) an entry as the newest; evict past the limit. Returns `value`."""
        entries, evicted = self.entries, []
        with self.lock:
            entries.pop(key, None)
            entries[key] = value
            while len(entries) > self.limit:
                evicted.append(entries.pop(next(iter(entries))))
        if self.on_evict is not None:
            for old in evicted:
                if old is not value:
                    self.on_evict(old)
        return value

    def hit(self, key: Any) -> Any:
        """The value under `key` (None if absent), refreshed as the newest: a lookup off the per-call path."""
        with self.lock:
            value = self.entries.pop(key, None)
            if value is not None:
                self.entries[key] = value
        return value

    def close(self) -> None:
        """Empty the cache, closing every value (on_evict)."""
        with self.lock:
            values = list(self.entries.values())
            self.entries.clear()
        if self.on_evict is not None:
            for value in values:
                self.on_evict(value)
