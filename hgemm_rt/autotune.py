"""Autotuning `matmul`: time the candidate routes of a problem on the GPU, keep the fastest correct
one in an on-disk cache that `matmul(kernel="auto")` consults before the heuristic.

    hg.autotune(a, b, out)          # same arguments as matmul; returns the timings, fastest first

The cache is one JSON file per (GPU name, manifest build hash) in $HGEMM_CACHE_DIR, else
~/.cache/hgemm. A new build (or another GPU) therefore never sees stale winners. On load the file is
validated: JSON, schema, device name and build hash, a sha256 over the entries, and every route
against the manifest (the kernel exists, its options are built). A file failing any check is not
trusted at all: a warning says why, the cache starts empty and the next save rewrites the file.

Each candidate is checked against a float64 reference on sampled rows before its time counts, so a
kernel that computes a wrong answer is never cached. Timing follows the benchmark protocol: random
inputs are the caller's, an L2 flush before every timed run, warm-up, the median of GPU times (the
launches queued behind a busy GPU, so the host's launch cost does not count: it is the same for every
route of one shape, up to the number of launches).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from . import dispatch
from .device import DeviceInfo, get_device
from .manifest import Manifest

SCHEMA = 1
_lock = threading.Lock()
_loaded: dict[str, dict] = {}  # path -> entries


def cache_dir() -> Path:
    env = os.environ.get("HGEMM_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "hgemm"


def cache_path(device_name: str, build_hash: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", device_name).strip("_") or "gpu"
    return cache_dir() / f"autotune-{safe}-{(build_hash or 'nohash')[:16]}.json"


def _checksum(entries: dict) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def _route_ok(route: dispatch.Route, manifest: Manifest) -> bool:
    spec = manifest.kernels.get(route.kernel)
    if spec is None:
        return False
    for k, v in route.options:
        if k == "splits":
            if v not in dispatch.SPLITS:
                return False
        elif k not in spec.variants or v not in spec.variants[k]:
            return False
    return True


def load(device_name: str, build_hash: str, manifest: Manifest, path: Path | None = None) -> dict:
    """The validated entries {key: {"route": Route, "us": float}}; {} (with a warning) if the file is
    missing, unreadable or fails any check."""
    path = path or cache_path(device_name, build_hash)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r} != {SCHEMA}")
        if data.get("device") != device_name or data.get("build_hash") != build_hash:
            raise ValueError(f"written for {data.get('device')!r} / build {data.get('build_hash')!r}")
        entries = data.get("entries")
        if not isinstance(entries, dict) or data.get("sha256") != _checksum(entries):
            raise ValueError("checksum mismatch (edited or truncated)")
        out = {}
        for key, e in entries.items():
            route = dispatch.Route.from_json(e["route"])
            us = float(e["us"])
            if not _route_ok(route, manifest) or not np.isfinite(us) or us <= 0:
                raise ValueError(f"entry {key!r} names a route this build cannot run: {route}")
            out[key] = {"route": route, "us": us, "tried": e.get("tried", [])}
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        warnings.warn(f"hgemm autotune cache {path} is not trusted ({exc}); starting empty, it will be rewritten",
                      RuntimeWarning, stacklevel=3)
        return {}


def save(entries: dict, device_name: str, build_hash: str, path: Path | None = None) -> Path:
    """Write atomically (temp file + os.replace): a crash never leaves half a cache."""
    path = path or cache_path(device_name, build_hash)
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = {k: {"route": e["route"].to_json(), "us": e["us"], "tried": e.get("tried", [])}
             for k, e in entries.items()}
    doc = {"schema": SCHEMA, "device": device_name, "build_hash": build_hash, "entries": plain,
           "sha256": _checksum(plain)}
    fd, tmp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def _entries(info: DeviceInfo, manifest: Manifest) -> dict:
    path = str(cache_path(info.name, manifest.build_hash))
    with _lock:
        if path not in _loaded:
            _loaded[path] = load(info.name, manifest.build_hash, manifest)
        return _loaded[path]


def lookup(info: DeviceInfo, manifest: Manifest, key: str) -> dispatch.Route | None:
    e = _entries(info, manifest).get(key)
    return e["route"] if e else None


def forget() -> None:
    """Drop the in-memory copies (the next lookup re-reads and re-validates the files)."""
    with _lock:
        _loaded.clear()


# ---------------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------------

def _download(arr) -> np.ndarray:
    """A host copy of a strided device view (the bytes it spans, viewed with its strides)."""
    from ._driver import check, driver
    from .matmul import _extent
    from .memory import numpy_dtype

    lo, hi = _extent(arr)
    buf = np.empty(hi - lo, dtype=np.uint8)
    get_device(arr.device)
    check(driver().cuMemcpyDtoH(buf.ctypes.data, lo, hi - lo), "cuMemcpyDtoH")
    base = buf[arr.ptr - lo:]
    if arr.dtype == "bf16":  # numpy has no bfloat16 without ml_dtypes: widen the bits to fp32
        bits = np.lib.stride_tricks.as_strided(base.view(np.uint16), arr.shape, arr.strides)
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return np.lib.stride_tricks.as_strided(base.view(numpy_dtype(arr.dtype)), arr.shape, arr.strides).copy()


def _scratch_like(arr):
    """A buffer with the same shape, strides and address alignment (mod 256) as `arr`, so that a
    route's validity and speed are those of the real output, which autotune never touches."""
    from .matmul import _extent
    from .memory import DeviceArray

    lo, hi = _extent(arr)
    owner = DeviceArray.empty(((hi - lo + 512) // arr.itemsize + 1,), arr.dtype, arr.device)
    start = owner.ptr + 256 + (lo % 256)
    view = DeviceArray(start + (arr.ptr - lo), arr.shape, arr.dtype, arr.strides, owner=owner, device=arr.device)
    return view, owner


def autotune(a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
             accumulate: str | None = None, stream: Any = None, candidates: int = 8, iters: int = 10,
             warmup: int = 2, save_result: bool = True) -> list[dict]:
    """Time up to `candidates` routes for matmul(a, b, out, ...) (the heuristic's best ones, with up
    to three of every kernel kind), verify each on sampled rows, cache the fastest correct one.
    Returns [{"route", "plan", "us", "error", "estimate_us"}], fastest first. `out` is not written."""
    from .matmul import Plan, _inputs, _validate, problem_of
    from .registry import get_registry
    from .testing import error_floor
    from .timing import L2Flusher, time_fn

    call = _validate(a, b, out, alpha, beta, accumulate, "auto", stream)
    A, B, C0, ours = _inputs(call)
    C, owner = (C0, None) if ours else _scratch_like(C0)
    prob = problem_of(A, B, C, call.acc, call.alpha, call.beta)
    dev = get_device(call.device)
    manifest = get_registry().manifest
    ranked = dispatch.ranked_plans(prob, manifest, dev.info.cc, dev.info.sm_count)
    if ranked:  # hopeless routes (say the SIMT fallback at 8192^3) would only burn time
        ranked = [r for r in ranked if r[0] <= 20 * ranked[0][0] + 50]
    chosen, per_kind = [], {}
    for est, plan in ranked:  # the best of each kernel kind first, then the rest by estimate
        kind = plan.route.kernel.rsplit("_m", 1)[0] if plan.route.kernel.startswith("util_") else \
            manifest.kernels[plan.route.kernel].ladder
        if per_kind.get(kind, 0) < 3:
            per_kind[kind] = per_kind.get(kind, 0) + 1
            chosen.append((est, plan))
    for item in ranked:
        if len(chosen) >= max(candidates, len(per_kind)):
            break
        if item not in chosen:
            chosen.append(item)
    chosen = chosen[:max(candidates, 1)]

    rng = np.random.default_rng()
    rows = np.sort(rng.choice(call.M, size=min(call.M, 16), replace=False))
    try:
        a_h, b_h = _download(A)[rows].astype(np.float64), _download(B).astype(np.float64)
        ref = call.alpha * (a_h @ b_h)
    except Exception:  # bf16 without ml_dtypes: time only
        ref = None
    bound = 4 * error_floor(call.dtype, call.acc, call.dtype, call.K)
    flusher = L2Flusher(call.device)
    results = []
    try:
        for est, spec in chosen:
            plan = Plan(spec, call.dtype, call.device)
            try:
                ptrs = {"A": A.ptr, "B": B.ptr, "C": C.ptr}
                (C if owner is None else owner).fill_bytes(0, call.stream)  # beta's term is checked nowhere
                plan.run(ptrs, call.alpha, 0.0, call.stream)
                err = float("nan")
                if ref is not None:
                    dev.synchronize()
                    got = _download(C)[rows].astype(np.float64)
                    err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)) \
                        if np.isfinite(got).all() else float("inf")
                if ref is not None and not err <= bound:
                    results.append({"route": spec.route, "plan": spec, "us": float("inf"), "error": err,
                                    "estimate_us": est})
                    continue
                t = time_fn(lambda: plan.run(ptrs, call.alpha, call.beta, call.stream), warmup=warmup,
                            iters=iters, stream=call.stream, flush=flusher, queue_ahead=True)
                results.append({"route": spec.route, "plan": spec, "us": t.median_ms * 1e3, "error": err,
                                "estimate_us": est})
            finally:
                dev.synchronize()
                plan.close()
    finally:
        flusher.close()
        if owner is not None:
            owner.close()
    results.sort(key=lambda r: r["us"])
    if results and np.isfinite(results[0]["us"]) and save_result:
        entries = _entries(dev.info, manifest)
        with _lock:
            entries[prob.key()] = {"route": results[0]["route"], "us": results[0]["us"],
                                   "tried": [[str(r["route"]), r["us"]] for r in results]}
            save(entries, dev.info.name, manifest.build_hash)
        from .matmul import _calls, _choices, _fast
        _choices.clear()  # the next matmul sees the new winner
        _fast.clear()
        _calls.clear()
    return results
