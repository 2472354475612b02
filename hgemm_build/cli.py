"""Compile every kernel family in cu/ into per-architecture cubins and write artifacts/manifest.json.

    python build_kernels.py                 # all of sm_80, sm_86, sm_89, sm_90 (+ sm_90a kernels)
    python build_kernels.py --arch 89       # one architecture (--arch 90 includes the sm_90a kernels)
    python build_kernels.py --kernels 'hgemm_wmma*' -j 4

Compiled cubins are cached under build/cache by a hash of the source, the shared headers, the
compiler version and the flags, so an unchanged rebuild does no compilation. Every build (cached or
not) is checked against its declarations: the symbols exist and each kernel's dynamic shared memory
is the one its toml declares. What passes is published per family and architecture into the existing
manifest: other archs and families keep their builds, a family that fails keeps its last good one
(the exit status is 1 and the failed families are named). The manifest is written last, atomically.
Ctrl-C stops the running nvcc processes and publishes nothing.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import fcntl
import os
import signal
import sys
import threading
import time
from pathlib import Path

from hgemm_rt.errors import ManifestError
from hgemm_rt.declaration import ARCHS

from .catalog import Family, load_catalog, select_families
from .jobs import BuildError, Built, Job, Runner, cached, compile_job, job_key, verify
from .publish import previous_entries, publish
from .toolchain import (ToolchainError, cuda12_nvcc, cutlass_include, find_cuda12_ptxas, find_nvcc, nvcc_version,
                        split_identity)

DEFAULT_ARCHS = ("80", "86", "89", "90", "90a")
EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


class Interrupted(Exception):
    """Ctrl-C: carries the one line the build ends with."""


def checkout(src: Path | None) -> Path:
    """The directory holding cu/: --src, else the checkout this package was imported from (cu/ is not
    part of the installed package)."""
    root = (src or Path(__file__).resolve().parent.parent).resolve()
    if (root / "cu").is_dir():
        return root
    if src is not None:
        raise BuildError(f"--src {root}: there is no cu/ (the kernel sources) there; point --src at an hgemm checkout")
    raise BuildError(f"no kernel sources at {root / 'cu'}: hgemm_build is installed without its checkout (cu/ is "
                     f"not installed); run `python build_kernels.py` in a checkout, or pass --src /path/to/checkout")


def parse_archs(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return DEFAULT_ARCHS
    archs: list[str] = []
    for v in values:
        for a in v.replace("sm_", "").split(","):
            a = a.strip()
            if a not in ARCHS:
                raise BuildError(f"--arch {a!r} is not one of {', '.join(ARCHS)}")
            archs.append(a)
            if a == "90" and "90a" not in archs:  # the same GPU: Hopper-only kernels come along
                archs.append("90a")
    return tuple(dict.fromkeys(archs))


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each stops the build as Ctrl-C does


def _interrupt(sig, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_signals_interrupt():
    """SIGTERM and SIGHUP (a CI cancel, `timeout`, a closed terminal) raise KeyboardInterrupt as Ctrl-C does, so
    that one path stops the compilers and cleans up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS[1:]}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def sigint_deferred():
    """A Ctrl-C (or SIGTERM/SIGHUP) inside this block takes effect at its end: the artifacts are never left
    half-written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: pending.append(sig)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt


def _arg_parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", action="append", help="80, 86, 89, 90 or 90a; repeat or comma-separate")
    ap.add_argument("--kernels", metavar="PATTERN", help="only families holding a kernel matching this glob")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc processes")
    ap.add_argument("--nvcc", help="nvcc to use (default: $HGEMM_NVCC, the pip wheel, then PATH)")
    ap.add_argument("--cuda12", action="store_true",
                    help="cubins a CUDA 12 driver (R525+) loads, from a CUDA 13 nvcc: it compiles to PTX, a CUDA 12 "
                         "ptxas assembles (docs/cuda12.md); not needed with the nvcc of a CUDA 12 toolkit")
    ap.add_argument("--ptxas", help="with --cuda12: a CUDA 12.8/12.9 ptxas (default: the cu12 nvcc wheel's)")
    ap.add_argument("--src", type=Path, help="the hgemm checkout holding cu/ (default: the one this package is in)")
    ap.add_argument("--out", type=Path, help="artifacts directory (default: SRC/artifacts)")
    ap.add_argument("--list", action="store_true", help="list the catalogue and exit")
    ap.add_argument("--cache", type=Path, help=argparse.SUPPRESS)  # default SRC/build/cache
    return ap


def _compile_all(todo: list[Job], args, nvcc: Path, cu: Path, cutlass_dir: Path | None, src: Path,
                 prog: str) -> list[tuple[Job, str]]:
    """Compile the jobs in parallel; returns the (job, nvcc error) of those that failed. On Ctrl-C the
    queued jobs are cancelled and the running nvcc process groups stopped before Interrupted is raised."""
    runner = Runner()
    errors = []
    pool = cf.ThreadPoolExecutor(max_workers=max(1, args.jobs))
    futures: list[cf.Future] = []
    done = stopped = 0
    try:
        futures += [pool.submit(compile_job, j, nvcc, cu, cutlass_dir if j.family.cutlass else None, runner, src)
                    for j in todo]
        for fut in cf.as_completed(futures):
            job, secs, err = fut.result()
            done += 1
            print(f"[{done}/{len(todo)}] {job.label:40s} {secs:6.1f} s  {'ok' if err is None else 'FAILED'}",
                  file=sys.stderr, flush=True)
            if err:
                errors.append((job, err))
    except KeyboardInterrupt:
        with sigint_deferred():  # a second Ctrl-C must not leave nvcc processes behind
            stopped = runner.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            _, running = cf.wait(futures, timeout=1.0)
            if running:  # nvcc ignored SIGTERM: the workers wait on it
                runner.cancel(signal.SIGKILL)
                cf.wait(running, timeout=0.5)
        raise Interrupted(f"{prog}: interrupted: stopped {stopped} nvcc process(es) and published nothing "
                          f"(artifacts unchanged); the {done} compile(s) that finished are cached") from None
    pool.shutdown()
    return errors


def recoverable_jobs(families: list[Family], jobs: list[Job], nvcc_ver: str, cu: Path, cache: Path) -> list[Job]:
    """The family builds outside `jobs` whose compiled cubin the cache holds for today's sources: published with this
    build when the previous manifest cannot be merged into, so that a partial build does not forget them."""
    have = {(j.family.name, j.arch) for j in jobs}
    try:
        cutlass_dir = cutlass_include() if any(f.cutlass for f in families) else None
    except ToolchainError:
        cutlass_dir = None
    found = []
    for f in families:
        if f.cutlass and cutlass_dir is None:
            continue
        for a in f.archs:
            if (f.name, a) not in have:
                job = Job(f, a, job_key(f, a, nvcc_ver, cu, cutlass_dir if f.cutlass else None), cache)
                if cached(job):
                    found.append(job)
    return found


def build(argv: list[str] | None, prog: str) -> int:
    with stop_signals_interrupt():
        return _build(argv, prog)


def _build(argv: list[str] | None, prog: str) -> int:
    args = _arg_parser(prog).parse_args(argv)
    src = checkout(args.src)
    cu, out = src / "cu", (args.out or src / "artifacts").resolve()
    cache = (args.cache or src / "build" / "cache").resolve()
    families = load_catalog(cu)
    if args.list:
        for fam in families:
            for k in fam.kernels:
                print(f"{k.name:64s} {fam.name:24s} {k.layout} {','.join(k.archs)}")
        return 0
    archs = parse_archs(args.arch)
    chosen = select_families(families, args.kernels)
    if not chosen:
        raise BuildError(f"no kernel matches {args.kernels!r}")
    if not any(a in archs for f in chosen for a in f.archs):
        declared = sorted({a for f in chosen for a in f.archs})
        raise BuildError(f"nothing to build: {', '.join(f.name for f in chosen)} declare(s) sm_{', sm_'.join(declared)}, "
                         f"none of --arch {','.join(archs)}")
    if args.ptxas and not args.cuda12:
        raise BuildError("--ptxas goes with --cuda12 (a CUDA 12 ptxas assembling the nvcc's PTX)")
    nvcc = find_nvcc(args.nvcc)
    split = args.cuda12 and int(nvcc_version(nvcc).split(".")[0]) > 12  # (a CUDA 12 nvcc builds for CUDA 12 as it is)
    front = nvcc
    if split:
        nvcc = cuda12_nvcc(front, find_cuda12_ptxas(args.ptxas), cache.parent)
    nvcc_ver = nvcc_version(nvcc)
    # the cache key's compiler: a split build's reports its ptxas's release, so its front end is added
    key_ver = f"{nvcc_ver} ({split_identity(front)})" if split else nvcc_ver
    cutlass_dir = cutlass_include() if any(f.cutlass for f in chosen) else None
    jobs = [Job(f, a, job_key(f, a, key_ver, cu, cutlass_dir if f.cutlass else None), cache)
            for f in chosen for a in f.archs if a in archs]
    if previous_entries(out)[1] is not None:  # no manifest to merge into: what the cache holds is published too
        jobs += recoverable_jobs(families, jobs, key_ver, cu, cache)
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # one build at a time per cache: concurrent builds would race on the manifest; the jobs left to
    # compile are counted once the lock is held (a build that waited finds what the other one compiled)
    with open(cache.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        todo = [j for j in jobs if not cached(j)]
        print(f"nvcc {nvcc_ver} ({nvcc}); {len(jobs)} family builds, {len(jobs) - len(todo)} cached, "
              f"{len(todo)} to compile with -j {args.jobs}", file=sys.stderr, flush=True)
        failures = [(job, "compile error", err) for job, err in
                    _compile_all(todo, args, nvcc, cu, cutlass_dir, src, prog)]
        built: dict[tuple[str, str], Built] = {}
        for job in jobs:
            if any(job is f[0] for f in failures):
                continue
            try:
                built[(job.family.name, job.arch)] = verify(job)
            except BuildError as exc:
                failures.append((job, "check failed", str(exc)))
        failed: dict[str, list[str]] = {}
        for job, _, _ in failures:
            failed.setdefault(job.family.name, []).append(job.arch)
        try:
            with sigint_deferred():  # the artifacts are replaced as a whole or not at all
                manifest, notes = publish(families, built, failed, out, nvcc_ver)
        except KeyboardInterrupt:
            raise Interrupted(f"{prog}: interrupted after the build was published ({out / 'manifest.json'} "
                              f"is complete)") from None
    print(f"wrote {out / 'manifest.json'}: {len(manifest['kernels'])} kernels, build {manifest['build_hash']} "
          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    for note in notes:
        print(f"{prog}: note: {note}", file=sys.stderr)
    for job, kind, err in failures:
        kernels = ", ".join(k.name for k in job.family.kernels)
        print(f"\n{prog}: {kind} in {job.family.source.name} for sm_{job.arch} (kernels: {kernels}):\n{err}",
              file=sys.stderr)
    if failures:
        summary = "; ".join(f"{fam} (sm_{', sm_'.join(a)})" for fam, a in failed.items())
        print(f"\n{prog}: {len(failures)} of {len(jobs)} family builds failed: {summary}; the artifacts keep the "
              f"last good build of each (if there was one)", file=sys.stderr)
        return EXIT_FAILED
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The build command (`python build_kernels.py`): returns the exit status."""
    prog = prog or "build_kernels.py"
    try:
        return build(argv, prog)
    except (BuildError, ManifestError, ToolchainError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as exc:
        print(exc, file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:  # outside the compiles (waiting for the lock, checking): nothing was written
        print(f"{prog}: interrupted; published nothing (artifacts unchanged)", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
