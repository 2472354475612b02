"""The tuning cache: measured routes per problem, on disk, and the measuring that fills it.

    hg.Matmul(a, b, out=out).autotune()   # or hg.autotune(a, b, out=out): the timings, fastest first

`time_routes` times the candidate recipes of a problem on the GPU; the fastest correct one is kept in
an on-disk cache that matmul (kernel="auto") consults before the heuristic.

The cache is one JSON file per (GPU name, manifest build hash) in $HGEMM_CACHE_DIR, else
$XDG_CACHE_HOME/hgemm, else ~/.cache/hgemm (a new file's mode follows the umask). A new build (or another GPU) therefore never sees stale winners. On load the file is
validated: JSON, schema, device name and build hash, a sha256 over the entries. A file failing any
of these is not trusted at all: a warning says why, the cache starts empty and the next save rewrites
the file. Then each entry: its route well-formed and runnable on the manifest (the kernel exists, its
options are built), its time a positive number; an entry failing that is dropped with a warning.

Processes share the file: a record takes an exclusive lock (fcntl, on `<file>.lock`), re-reads the
file and adds its entry to what is there before replacing it (temp file + os.replace), so that
concurrent autotunes keep every winner. A record that cannot write (a folder it cannot create, a
read-only file, which is left as it is) warns once and keeps the winner in this process.

Each candidate is checked against a float64 reference on sampled rows before its time counts, so a
kernel that computes a wrong answer is never cached. Timing follows the benchmark protocol: random
inputs are the caller's, an L2 flush before every timed run, warm-up, the median of GPU times (the
launches queued behind a busy GPU, so the host's launch cost does not count: it is the same for every
route of one shape, up to the number of launches).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import secrets
import stat
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # (not POSIX: records are not locked against other processes)
    fcntl = None  # type: ignore[assignment]

from .device import DeviceInfo, get_device
from .dtypes import ITEMSIZE, bf16_bits_to_f32
from .executor import Execution
from .launcher import ArrayRef
from .memory import DeviceArray, byte_extent, fill_strided, strided_to_host
from .manifest import Manifest
from .problem import Recipe, Route
from .roles.gemm_fused_wgmma import SK_MAX_CTAS
from .roles.gemm_strided_wgmma import KG_MAX
from .roles.glue import PACK, SPLITS
from .roles.tma_gemm import K_GROUPS

SCHEMA = 1
_lock = threading.Lock()
_loaded: dict[str, dict] = {}  # path -> entries


def cache_dir() -> Path:
    """$HGEMM_CACHE_DIR, else $XDG_CACHE_HOME/hgemm (the XDG base-directory rule: only an absolute path counts),
    else ~/.cache/hgemm."""
    env = os.environ.get("HGEMM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "hgemm"


def device_key(device_name: str) -> str:
    """A GPU's name (DeviceInfo.name, e.g. "NVIDIA H200") as a file name: reduced to characters that cannot leave
    a folder ("NVIDIA_H200"). The tuning cache's files and the shipped tables (hgemm_rt/tuned/) are named by it."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", device_name).strip("_") or "gpu"


def cache_path(device_name: str, build_hash: str) -> Path:
    """The file of one (GPU, build): both names reduced to characters that cannot leave the folder (the
    build hash to its hex digits: it comes from the manifest, which is data)."""
    digest = re.sub(r"[^0-9A-Fa-f]", "", build_hash or "")[:16] or "nohash"
    return cache_dir() / f"autotune-{device_key(device_name)}-{digest}.json"


def _checksum(entries: dict) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def route_runs(route: Route, manifest: Manifest) -> bool:
    """Whether this build can run `route` at all: its kernel exists and every option is one it was built with (or
    a launch option in its range). Whether it runs a given problem is planner.recipe_for's question."""
    spec = manifest.kernels.get(route.kernel)
    if spec is None:
        return False
    for k, v in route.options:
        if k == "splits":
            if v not in SPLITS:
                return False
        elif k == "ctas":  # a stream-K grid
            if not isinstance(v, int) or not 1 <= v <= SK_MAX_CTAS:
                return False
        elif k == K_GROUPS:  # clusters of one tile along grid.z, each on a share of K
            if not isinstance(v, int) or not 2 <= v <= KG_MAX:
                return False
        elif k == PACK:  # operands off 32-byte rows packed first
            if v != 1:
                return False
        elif k not in spec.variants or v not in spec.variants[k]:
            return False
    return True


def positive_us(x: Any, what: str) -> float:
    """A measured time read from a file: a finite positive number (not a bool), else ValueError naming `what`."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{what} {x!r} is not a positive number of microseconds")
    return float(x)


def entry_from_json(e: object, manifest: Manifest) -> dict:
    """One validated entry {"route", "us", "tried"} of a cache file; ValueError saying what is wrong."""
    if not isinstance(e, dict) or not isinstance(e.get("route"), dict):
        raise ValueError(f"not an entry with a route object: {e!r:.80}")
    route = Route.from_json(e["route"])
    us = positive_us(e.get("us"), "time")
    if not route_runs(route, manifest):
        raise ValueError(f"names a route this build cannot run: {route}")
    tried = e.get("tried", [])
    return {"route": route, "us": us, "tried": tried if isinstance(tried, list) else []}


def load(device_name: str, build_hash: str, manifest: Manifest, path: Path | None = None) -> dict:
    """The validated entries {key: {"route": Route, "us": float}}; {} (with a warning) if the file is
    missing, unreadable or fails a check of the whole file; an entry that fails its own check is left
    out (with a warning)."""
    path = path or cache_path(device_name, build_hash)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r} != {SCHEMA}")
        if data.get("device") != device_name or data.get("build_hash") != build_hash:
            raise ValueError(f"written for {data.get('device')!r} / build {data.get('build_hash')!r}")
        entries = data.get("entries")
        if not isinstance(entries, dict) or data.get("sha256") != _checksum(entries):
            raise ValueError("checksum mismatch (edited or truncated)")
    except (FileNotFoundError, NotADirectoryError):  # no cache yet
        return {}
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # (unreadable too: "auto" runs on)
        warnings.warn(f"hgemm autotune cache {path} is not trusted ({exc}); starting empty, it will be rewritten",
                      RuntimeWarning, stacklevel=3)
        return {}
    out, dropped = {}, []
    for key, e in entries.items():
        try:
            out[key] = entry_from_json(e, manifest)
        except ValueError as exc:
            dropped.append(f"{key!r}: {exc}")
    if dropped:
        warnings.warn(f"hgemm autotune cache {path}: {len(dropped)} entr{'y' if len(dropped) == 1 else 'ies'} not "
                      f"trusted, left out ({'; '.join(dropped[:3])}{'; ...' if len(dropped) > 3 else ''}); the "
                      "others are used", RuntimeWarning, stacklevel=3)
    return out


def is_read_only(path: Path) -> bool:
    """An existing file nobody may write by its mode bits (also as root, whom os.access lets write it)."""
    return not os.access(path, os.W_OK) or not stat.S_IMODE(path.stat().st_mode) & 0o222


def save(entries: dict, device_name: str, build_hash: str, path: Path | None = None) -> Path:
    """Write atomically (temp file + os.replace): a crash never leaves half a cache. A read-only file
    is not replaced: PermissionError."""
    path = path or cache_path(device_name, build_hash)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and is_read_only(path):
        raise PermissionError(f"{path} is read-only (left as it is)")
    plain = {k: {"route": e["route"].to_json(), "us": e["us"], "tried": e.get("tried", [])}
             for k, e in entries.items()}
    doc = {"schema": SCHEMA, "device": device_name, "build_hash": build_hash, "entries": plain,
           "sha256": _checksum(plain)}
    # a new file's mode follows the umask (os.open applies it; mkstemp's would be 0600), a replaced one keeps its own
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            if path.exists():
                os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
            json.dump(doc, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock between processes for one read-merge-write of the cache file `path` (on a
    `.lock` file beside it, which stays: the cache file itself is replaced, not rewritten)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def _entries(info: DeviceInfo, manifest: Manifest) -> dict:
    path = str(cache_path(info.name, manifest.build_hash))
    with _lock:
        if path not in _loaded:
            _loaded[path] = load(info.name, manifest.build_hash, manifest)
        return _loaded[path]


def lookup(info: DeviceInfo, manifest: Manifest, key: str) -> Route | None:
    e = _entries(info, manifest).get(key)
    return e["route"] if e else None


def record(info: DeviceInfo, manifest: Manifest, key: str, results: list[dict]) -> Path | None:
    """Keep the fastest of `results` (time_routes' list) as the route for problem `key`: in this process
    first, then added to the file under its lock (what other processes wrote since kept). Returns the
    file, or None with a warning where it cannot be written (the winner still applies in this process)."""
    entries = _entries(info, manifest)
    path = cache_path(info.name, manifest.build_hash)
    with _lock:
        entries[key] = {"route": results[0]["route"], "us": results[0]["us"],
                        "tried": [[str(r["route"]), r["us"]] for r in results]}
        try:
            with locked(path):
                on_disk = load(info.name, manifest.build_hash, manifest, path)
                on_disk[key] = entries[key]
                return save(on_disk, info.name, manifest.build_hash, path)
        except OSError as exc:
            warnings.warn(f"hgemm autotune cache: the winner for {key} is not saved ({exc}); it applies in this "
                          "process only (set HGEMM_CACHE_DIR to a writable folder to keep it)",
                          RuntimeWarning, stacklevel=2)
            return None


def forget() -> None:
    """Drop the in-memory copies (the next lookup re-reads and re-validates the files)."""
    with _lock:
        _loaded.clear()


# ---------------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------------

def _download(ref: ArrayRef, device: int) -> np.ndarray:
    """A host copy (float64-able) of a strided device view; bf16 widened to fp32 (no ml_dtypes needed)."""
    host = strided_to_host(ref, device)
    return bf16_bits_to_f32(host) if ref.dtype == "bf16" else host


def _scratch_like(ref: ArrayRef, device: int) -> tuple[ArrayRef, DeviceArray]:
    """A buffer with the same shape, strides and address alignment (mod 256) as `ref`, so that a
    route's validity and speed are those of the real output, which autotune never touches."""
    isz = ITEMSIZE[ref.dtype]
    lo, hi = byte_extent(ref.ptr, ref.shape, ref.strides, isz)
    owner = DeviceArray.empty(((hi - lo + 512) // isz + 1,), ref.dtype, device)
    start = owner.ptr + 256 + (lo % 256)
    return ref._replace(ptr=start + (ref.ptr - lo)), owner


def _kind(recipe: Recipe, manifest: Manifest) -> str:
    spec = manifest.kernels[recipe.route.kernel]
    return spec.ladder if spec.catalogue else f"{spec.role}:{spec.tile[1]}"


def choose_candidates(ranked: list, manifest: Manifest, candidates: int) -> list:
    """Up to `candidates` of the ranked (estimate, recipe) pairs: the best three of each kernel kind
    first, then the rest by estimate; hopeless ones (20x the best estimate) never."""
    if ranked:  # the SIMT fallback at 8192^3 would only burn time
        ranked = [r for r in ranked if r[0] <= 20 * ranked[0][0] + 50]
    chosen, per_kind = [], {}
    for est, recipe in ranked:
        kind = _kind(recipe, manifest)
        if per_kind.get(kind, 0) < 3:
            per_kind[kind] = per_kind.get(kind, 0) + 1
            chosen.append((est, recipe))
    for item in ranked:
        if len(chosen) >= max(candidates, len(per_kind)):
            break
        if item not in chosen:
            chosen.append(item)
    return chosen[:max(candidates, 1)]


def sampled_matrices(refs: tuple[ArrayRef, ...], batch: tuple, rng: np.random.Generator) -> list[tuple[ArrayRef, ...]]:
    """The matrices of a call a candidate is checked on, each as 2-D views of (A, B, C): the one matrix of an
    unbatched call; of a batched one (`batch`: Call.batch, Call.bstrides, the levels' counts and each operand's
    element strides per level) the first, the last and one between at random."""
    counts, strides = batch
    total = math.prod(counts)
    picks = sorted({0, total - 1, int(rng.integers(total))})
    out = []
    for flat in picks:
        index = np.unravel_index(flat, counts) if counts else ()
        out.append(tuple(
            ref._replace(ptr=ref.ptr + sum(int(i) * s for i, s in zip(index, st)) * ITEMSIZE[ref.dtype],
                         shape=tuple(ref.shape[-2:]), strides=tuple(ref.strides[-2:]))
            for ref, st in zip(refs, strides)))
    return out


def time_routes(chosen: list, refs: tuple[ArrayRef, ArrayRef, ArrayRef], dtype: str, acc: str, alpha: float,
                beta: float, device: int, stream: int, manifest: Manifest, iters: int = 10,
                warmup: int = 2, c_is_scratch: bool = False, batch: tuple = ((), ((), (), ()))) -> list[dict]:
    """Time each (estimate, recipe) of `chosen` on the operands `refs` (A, B, C; N-D for a batched call,
    whose levels `batch` gives: Call.batch, Call.bstrides). C is written only when `c_is_scratch`; otherwise a
    look-alike scratch buffer takes its place. Each candidate is checked against a float64 reference on
    sampled rows (of sampled matrices) first: a wrong one gets us = inf and never wins.
    Returns [{"route", "recipe", "us", "error", "estimate_us"}], fastest first."""
    from .numerics import error_floor
    from .timing import L2Flusher, time_fn

    A, B, C = refs
    owner = None
    if not c_is_scratch:
        C, owner = _scratch_like(C, device)
    M, K = A.shape[-2:]
    dev = get_device(device)
    rng = np.random.default_rng()
    rows = np.sort(rng.choice(M, size=min(M, 16), replace=False))
    samples = sampled_matrices((A, B, C), batch, rng)
    host = functools.cache(lambda view: _download(view, device))  # (a broadcast operand's one matrix: one copy)
    ref = np.concatenate([alpha * (host(a)[rows].astype(np.float64) @ host(b).astype(np.float64))
                          for a, b, _ in samples])
    bound = 4 * error_floor(dtype, acc, dtype, K)
    flusher = L2Flusher(device)
    results = []
    ptrs = (A.ptr, B.ptr, C.ptr)
    try:
        for est, recipe in chosen:
            ex = Execution(recipe, dtype, device, manifest)
            try:
                fill_strided(C, 0, device, stream)  # beta's term is checked nowhere: start from zeros
                ex.run(ptrs, alpha, 0.0, stream)
                dev.synchronize()
                got = np.concatenate([_download(c, device)[rows].astype(np.float64) for _, _, c in samples])
                err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)) \
                    if np.isfinite(got).all() else float("inf")
                us = float("inf")
                if err <= bound:
                    packed = ex.pack(ptrs, alpha, beta)
                    t = time_fn(lambda: ex.launch(packed, stream), warmup=warmup, iters=iters, stream=stream,
                                flush=flusher, queue_ahead=True)
                    us = t.median_ms * 1e3
                results.append({"route": recipe.route, "recipe": recipe, "us": us, "error": err, "estimate_us": est})
            finally:
                dev.synchronize()
                ex.close()
    finally:
        flusher.close()
        if owner is not None:
            owner.close()
    results.sort(key=lambda r: r["us"])
    return results
