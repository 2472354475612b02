#!/usr/bin/env python3
"""Compile every kernel family in cu/ into per-architecture cubins and write artifacts/manifest.json.

    python build_kernels.py                 # all of sm_80, sm_86, sm_89, sm_90 (+ sm_90a kernels)
    python build_kernels.py --arch 89       # one architecture (--arch 90 includes the sm_90a kernels)
    python build_kernels.py --kernels 'hgemm_wmma*' -j 4

Compiled cubins are cached under build/cache by a hash of the source, the shared headers, the
compiler version and the flags, so an unchanged rebuild does no compilation. The manifest is written
last and atomically; it lists every family whose current source has a cached build.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hgemm_build.catalog import Family, load_catalog, select_families
from hgemm_build.toolchain import (
    ToolchainError,
    cutlass_include,
    find_nvcc,
    host_compiler_hint,
    nvcc_command,
    nvcc_version,
    parse_ptxas,
)
from hgemm_rt.errors import ManifestError
from hgemm_rt.manifest import ARCHS, SCHEMA_VERSION, sha256_file

ROOT = Path(__file__).resolve().parent
CU = ROOT / "cu"
PORTABLE_PTX_ARCH = "90"  # newest non-"a" target: its PTX lets a newer GPU JIT the kernels
DEFAULT_ARCHS = ("80", "86", "89", "90", "90a")


@dataclass(frozen=True)
class Job:
    family: Family
    arch: str
    key: str

    @property
    def cache_dir(self) -> Path:
        return CACHE / f"{self.family.name}-sm_{self.arch}-{self.key[:20]}"

    @property
    def label(self) -> str:
        return f"sm_{self.arch:<3} {self.family.name}"


CACHE = ROOT / "build" / "cache"


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def local_includes(source: Path) -> list[Path]:
    """The quoted #includes reachable from `source` inside cu/ (transitively), so that a family's
    cache key changes with exactly the headers it uses."""
    seen: dict[Path, None] = {}
    todo = [source]
    while todo:
        current = todo.pop()
        for inc in _INCLUDE.findall(current.read_text()):
            # like the compiler: the including file's own directory first, then the -I paths
            for base in (current.parent, CU):
                cand = (base / inc).resolve()
                if cand.is_file() and cand not in seen:
                    seen[cand] = None
                    todo.append(cand)
                    break
    return sorted(seen)


def job_key(family: Family, arch: str, nvcc_ver: str, cutlass_dir: Path | None) -> str:
    h = hashlib.sha256()
    flags = nvcc_command(Path("nvcc"), Path("x.cu"), arch, Path("x.cubin"), None, [], family_flags(family))
    for part in (nvcc_ver, arch, " ".join(flags), family.source.read_text()):
        h.update(part.encode() + b"\0")
    for header in local_includes(family.source):
        h.update(header.name.encode() + b"\0" + header.read_bytes())
    if cutlass_dir is not None:  # the CUTLASS version is in its version header
        h.update((cutlass_dir / "cutlass" / "version.h").read_bytes())
    return h.hexdigest()


def family_flags(family: Family) -> list[str]:
    return (["--expt-relaxed-constexpr"] if family.cutlass else []) + list(family.extra_flags)


def compile_job(job: Job, nvcc: Path, cutlass_dir: Path | None) -> tuple[Job, float, str | None]:
    """Compile into a temporary directory, then publish it into the cache with one rename."""
    t0 = time.perf_counter()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{job.family.name}-{job.arch}-", dir=CACHE))
    try:
        keep = tmp / "keep" if job.arch == PORTABLE_PTX_ARCH else None
        if keep:
            keep.mkdir()
        includes = [CU] + ([cutlass_dir] if cutlass_dir else [])
        cubin = tmp / f"{job.family.name}.cubin"
        cmd = nvcc_command(nvcc, job.family.source, job.arch, cubin, keep, includes, family_flags(job.family))
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            return job, time.perf_counter() - t0, f"nvcc exited {proc.returncode}{host_compiler_hint()}:\n{log.strip()}"
        funcs, warnings = parse_ptxas(log)
        declared = [s for k in job.family.kernels if job.arch in k.archs for s in k.symbols()]
        missing = [s for s in declared if s not in funcs]
        if missing:
            return job, time.perf_counter() - t0, (
                f"declared symbol(s) not in the cubin: {missing}\n(check the extern \"C\" wrappers "
                f"and cu/CONTRACT.md's naming); functions found: {sorted(funcs)}"
            )
        if keep:
            ptx = sorted(keep.glob("*.ptx"))
            if ptx:
                shutil.move(str(ptx[0]), tmp / f"{job.family.name}.ptx")
            shutil.rmtree(keep)
        (tmp / "ptxas.json").write_text(json.dumps(
            {"functions": {n: asdict(f) for n, f in funcs.items()}, "warnings": warnings,
             "cubin_sha256": sha256_file(cubin)}, indent=1))
        if job.cache_dir.exists():
            shutil.rmtree(job.cache_dir)
        os.replace(tmp, job.cache_dir)
        return job, time.perf_counter() - t0, None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cached(job: Job) -> bool:
    """The job's cache entry is complete and its cubin is the one it was compiled to (a truncated or
    altered cache file is compiled again, never published)."""
    info = job.cache_dir / "ptxas.json"
    cubin = job.cache_dir / f"{job.family.name}.cubin"
    if not info.is_file() or not cubin.is_file():
        return False
    try:
        recorded = json.loads(info.read_text()).get("cubin_sha256")
    except (OSError, ValueError):
        return False
    return recorded == sha256_file(cubin)


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def publish(families: list[Family], keys: dict[tuple[str, str], str], out: Path, nvcc_ver: str) -> dict:
    """Copy every cached build of the current sources into `out` and write the manifest last."""
    kernels = []
    published: set[Path] = set()
    build_hash = hashlib.sha256()
    for fam in families:
        builds_by_arch = {}
        ptx = None
        for arch in fam.archs:
            job = Job(fam, arch, keys[(fam.name, arch)])
            if not cached(job):
                continue
            rel = Path(f"sm_{arch}") / f"{fam.name}.cubin"
            data = (job.cache_dir / f"{fam.name}.cubin").read_bytes()
            atomic_write(out / rel, data)
            published.add(out / rel)
            digest = hashlib.sha256(data).hexdigest()
            build_hash.update(f"{fam.name}:{arch}:{digest}".encode())
            info = json.loads((job.cache_dir / "ptxas.json").read_text())
            builds_by_arch[arch] = (rel, digest, info)
            ptx_file = job.cache_dir / f"{fam.name}.ptx"
            if ptx_file.is_file():
                prel = Path("ptx") / f"{fam.name}.compute_{arch}.ptx"
                atomic_write(out / prel, ptx_file.read_bytes())
                published.add(out / prel)
                ptx = {"arch": arch, "path": prel.as_posix(), "sha256": sha256_file(out / prel)}
        build_hash.update(json.dumps(fam.raw, sort_keys=True).encode())  # the declarations are part of a build
        for spec, raw in zip(fam.kernels, fam.raw):
            builds = {}
            for arch, (rel, digest, info) in builds_by_arch.items():
                if arch not in spec.archs:
                    continue
                builds[arch] = {
                    "cubin": rel.as_posix(),
                    "sha256": digest,
                    "symbols": {s: info["functions"][s] for s in spec.symbols()},
                    "warnings": [w for w in info["warnings"] if any(s in w for s in spec.symbols())],
                }
            if builds:
                entry = {**raw, "builds": builds, "ptx": ptx if ptx and ptx["arch"] in spec.archs else None}
                kernels.append(entry)
    # drop published files that no longer belong to any build (deleted families, old archs)
    for sub in [*(out / f"sm_{a}" for a in ARCHS), out / "ptx"]:
        for p in sub.glob("*") if sub.is_dir() else []:
            if p not in published:
                p.unlink()
    manifest = {
        "schema": SCHEMA_VERSION,
        "nvcc": nvcc_ver,
        "build_hash": build_hash.hexdigest()[:16],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernels": kernels,
    }
    atomic_write(out / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def parse_archs(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return DEFAULT_ARCHS
    archs: list[str] = []
    for v in values:
        for a in v.replace("sm_", "").split(","):
            a = a.strip()
            if a not in ARCHS:
                raise SystemExit(f"build_kernels.py: --arch {a!r} is not one of {', '.join(ARCHS)}")
            archs.append(a)
            if a == "90" and "90a" not in archs:  # the same GPU: Hopper-only kernels come along
                archs.append("90a")
    return tuple(dict.fromkeys(archs))


def main(argv: list[str] | None = None) -> int:
    global CU, CACHE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", action="append", help="80, 86, 89, 90 or 90a; repeat or comma-separate")
    ap.add_argument("--kernels", metavar="PATTERN", help="only families holding a kernel matching this glob")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc processes")
    ap.add_argument("--nvcc", help="nvcc to use (default: $HGEMM_NVCC, the pip wheel, then PATH)")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts", help="artifacts directory")
    ap.add_argument("--list", action="store_true", help="list the catalogue and exit")
    ap.add_argument("--cu", type=Path, default=CU, help=argparse.SUPPRESS)  # tests build a scratch tree
    ap.add_argument("--cache", type=Path, default=CACHE, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    CU, CACHE = args.cu.resolve(), args.cache.resolve()
    try:
        families = load_catalog(CU)
    except ManifestError as exc:
        print(f"build_kernels.py: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for fam in families:
            for k in fam.kernels:
                print(f"{k.name:64s} {fam.name:24s} {k.layout} {','.join(k.archs)}")
        return 0
    archs = parse_archs(args.arch)
    chosen = select_families(families, args.kernels)
    if not chosen:
        print(f"build_kernels.py: no kernel matches {args.kernels!r}", file=sys.stderr)
        return 2
    try:
        nvcc = find_nvcc(args.nvcc)
        nvcc_ver = nvcc_version(nvcc)
        cutlass_dir = cutlass_include() if any(f.cutlass for f in families) else None
    except ToolchainError as exc:
        print(f"build_kernels.py: {exc}", file=sys.stderr)
        return 2

    keys = {
        (f.name, a): job_key(f, a, nvcc_ver, cutlass_dir if f.cutlass else None)
        for f in families
        for a in f.archs
    }
    jobs = [Job(f, a, keys[(f.name, a)]) for f in chosen for a in f.archs if a in archs]
    CACHE.mkdir(parents=True, exist_ok=True)
    failures = []
    t0 = time.perf_counter()
    # one build at a time per checkout: concurrent builds would race on the manifest; the jobs left to
    # compile are counted once the lock is held (a build that waited finds what the other one compiled)
    with open(CACHE.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        todo = [j for j in jobs if not cached(j)]
        print(f"nvcc {nvcc_ver} ({nvcc}); {len(jobs)} family builds, {len(jobs) - len(todo)} cached, "
              f"{len(todo)} to compile with -j {args.jobs}", file=sys.stderr, flush=True)
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(compile_job, j, nvcc, cutlass_dir if j.family.cutlass else None) for j in todo]
            for n, fut in enumerate(cf.as_completed(futures), 1):
                job, secs, err = fut.result()
                status = "ok" if err is None else "FAILED"
                print(f"[{n}/{len(todo)}] {job.label:40s} {secs:6.1f} s  {status}", file=sys.stderr, flush=True)
                if err:
                    kernels = ", ".join(k.name for k in job.family.kernels)
                    failures.append(f"{job.family.source.name} for sm_{job.arch} (kernels: {kernels}):\n{err}")
        manifest = publish(families, keys, args.out, nvcc_ver)
    n_kernels = len(manifest["kernels"])
    print(f"wrote {args.out / 'manifest.json'}: {n_kernels} kernels, build {manifest['build_hash']} "
          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    for f in failures:
        print(f"\nbuild_kernels.py: compile error in {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
