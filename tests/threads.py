"""Running a test's work in several Python threads at once, with every failure surfaced."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable


def errors_from_threads(work: Callable[[int], list], seeds: Iterable[int]) -> list[Any]:
    """work(seed) in one thread per seed, all started before any is joined: the failures each returned, and any
    exception one raised (a thread's exception would otherwise vanish)."""
    errors: list[Any] = []

    def run(seed: int) -> None:
        try:
            errors.extend(work(seed))
        except Exception as exc:  # noqa: BLE001 (surfaced to the caller)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
