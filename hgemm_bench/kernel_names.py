"""The GPU kernels a call launches, by name: torch.profiler over one call of it, where torch is installed (it is
no dependency). cuBLAS's Hopper kernels are `nvjet` kernels whose name encodes the tile, the pipeline stages, the
cluster, the schedule and split-K (parse_nvjet): what the baseline runs where it beats hgemm (docs/dev/cublas_winners.md).
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Callable

# nvjet_sm90_<types>_<BM>x<BN>_<BK>x<stages>_<cluster M>x<cluster N>_<raster>_bz_[coopA_|coopB_][splitK_]<layouts>
NVJET = re.compile(r"nvjet_sm\d+_(?P<types>[a-z]+)_(?P<bm>\d+)x(?P<bn>\d+)_(?P<bk>\d+)x(?P<stages>\d+)_"
                   r"(?P<cm>\d+)x(?P<cn>\d+)_(?P<raster>[hv])_bz_(?P<coop>coop[AB]_)?(?P<splitk>splitK_)?(?P<layout>\w+)")

# activity the profiler reports beside the kernels (the copies and fills of a call are not what it computes with)
NOT_KERNELS = ("Memset", "Memcpy")


def parse_nvjet(name: str) -> dict | None:
    """The tile, stages, cluster, schedule (coopA/coopB: two consumer warpgroups on one tile; "no coop": the name
    does not say whether one consumer or two in ping-pong) and split-K of an nvjet kernel name; None for another
    kernel."""
    m = NVJET.search(name)
    if m is None:
        return None
    g = m.groupdict()
    return {"tile": [int(g["bm"]), int(g["bn"]), int(g["bk"])], "stages": int(g["stages"]),
            "cluster": [int(g["cm"]), int(g["cn"])], "raster": g["raster"],
            "schedule": (g["coop"] or "").rstrip("_") or "no coop", "split_k": bool(g["splitk"]), "layout": g["layout"]}


def launched(fn: Callable[[], Any], torch: Any, calls: int = 1) -> list[tuple[str, float]]:
    """(kernel name, mean GPU us a launch) of every kernel `calls` calls of fn launch, in the profiler's order."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [(e.key, e.device_time_total / e.count) for e in prof.key_averages()
            if e.device_time_total > 0 and not e.key.startswith(NOT_KERNELS)]


def kernel_record(fn: Callable[[], Any]) -> dict:
    """What a bench row keeps of the kernels one call of fn launches: every kernel with its GPU us, the longest
    ("kernel"), its nvjet fields where it is one, or "why" there are none (no torch, a profiler that failed)."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:  # ImportError, or a broken install's OSError
        return {"kernel": None, "why": f"torch is not installed ({type(exc).__name__}: {exc})"}
    try:
        kernels = launched(fn, torch)
    except Exception as exc:  # a profiler (CUPTI) that cannot start here: the row says so, the bench goes on
        return {"kernel": None, "why": f"torch.profiler: {type(exc).__name__}: {exc}"}
    if not kernels:
        return {"kernel": None, "why": "the profiler saw no kernel"}
    main = max(kernels, key=lambda k: k[1])[0]
    return {"kernel": main, "nvjet": parse_nvjet(main), "kernels": [[n, us] for n, us in kernels]}
