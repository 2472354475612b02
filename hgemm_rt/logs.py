"""The runtime's loggers, as the logging module expects of a library: "hgemm_rt" and its topics below it, silent
(a NullHandler) unless the application configures logging, or HGEMM_LOG names topics to print to stderr:

    HGEMM_LOG=route python app.py      # each newly planned problem: its route and where the choice came from

A topic is the logger "hgemm_rt.<topic>" at INFO (an application may also enable it with logging's own
configuration). Only first calls log: a repeat call finds its plan without planning, and logs nothing.
"""
from __future__ import annotations

import logging
import os
import warnings

__all__ = ["TOPICS", "route_log", "configure"]

TOPICS = ("route",)  # HGEMM_LOG's values (comma-separated)

logging.getLogger("hgemm_rt").addHandler(logging.NullHandler())
route_log = logging.getLogger("hgemm_rt.route")


def configure(value: str | None) -> list[str]:
    """Print the topics named in `value` (HGEMM_LOG's syntax) to stderr; returns them. An unknown name warns (the
    environment cannot raise at import) and is ignored."""
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in TOPICS]
    if unknown:
        warnings.warn(f"HGEMM_LOG={value!r}: unknown topic(s) {unknown}; the topics are {list(TOPICS)}", stacklevel=2)
    topics = [n for n in names if n in TOPICS]
    for name in topics:
        log = logging.getLogger(f"hgemm_rt.{name}")
        if not any(getattr(h, "hgemm_log", False) for h in log.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("hgemm %(name)s: %(message)s"))
            handler.hgemm_log = True  # (configure twice: one handler)
            log.addHandler(handler)
        log.setLevel(logging.INFO)
    return topics


configure(os.environ.get("HGEMM_LOG"))
