"""One compile job (a kernel family for one architecture): its content-hash cache entry, the nvcc run
that fills it, and the checks that a cached build must pass before it is published.

A cache entry `build/cache/<family>-sm_<arch>-<key>/` holds the cubin, ptxas.json (ptxas figures, its
warnings and the cubin's sha256) and, for the portable arch, the PTX. The key hashes the compiler
version, the flags, the source and every header it includes; the declarations (cu/*.toml) are not in
the key, so a cached build is checked against them on every run (`verify`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hgemm_rt.declaration import PTX_ARCH
from hgemm_rt.manifest import sha256_file

from .catalog import Family
from .cubin import DSMEM_PREFIX, CubinError, dsmem_exports
from .instances import header_name
from .toolchain import host_compiler_hint, nvcc_command, parse_ptxas

class BuildError(RuntimeError):
    """A job's build cannot be published: the message says what disagrees and where."""


class Cancelled(Exception):
    """The build was interrupted: no new nvcc starts, running ones are stopped."""


@dataclass(frozen=True)
class Job:
    family: Family
    arch: str
    key: str
    cache_root: Path

    @property
    def cache_dir(self) -> Path:
        return self.cache_root / f"{self.family.name}-sm_{self.arch}-{self.key[:20]}"

    @property
    def cubin(self) -> Path:
        return self.cache_dir / f"{self.family.name}.cubin"

    @property
    def label(self) -> str:
        return f"sm_{self.arch:<3} {self.family.name}"


@dataclass(frozen=True)
class Built:
    """A verified build of one family for one architecture, ready to publish."""

    family: str
    arch: str
    cubin: Path  # in the cache
    sha256: str
    symbols: dict  # symbol -> ptxas figures and dynamic_smem (hgemm_rt.declaration.SymbolInfo's fields)
    warnings: tuple[str, ...]
    ptx: Path | None


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def local_includes(source: Path, cu: Path) -> list[Path]:
    """The quoted #includes reachable from `source` inside `cu` (transitively), so that a family's
    cache key changes with exactly the headers it uses."""
    seen: dict[Path, None] = {}
    todo = [source]
    while todo:
        current = todo.pop()
        for inc in _INCLUDE.findall(current.read_text()):
            # like the compiler: the including file's own directory first, then the -I paths
            for base in (current.parent, cu):
                cand = (base / inc).resolve()
                if cand.is_file() and cand not in seen:
                    seen[cand] = None
                    todo.append(cand)
                    break
    return sorted(seen)


def family_flags(family: Family) -> list[str]:
    return (["--expt-relaxed-constexpr"] if family.cutlass else []) + list(family.extra_flags)


def job_key(family: Family, arch: str, nvcc_ver: str, cu: Path, cutlass_dir: Path | None) -> str:
    h = hashlib.sha256()
    flags = nvcc_command(Path("nvcc"), Path("x.cu"), arch, Path("x.cubin"), None, [], family_flags(family))
    header = family.instances_header()  # (a family without one keeps the key it had before generation existed)
    for part in (nvcc_ver, arch, " ".join(flags), family.source.read_text()) + ((header,) if header else ()):
        h.update(part.encode() + b"\0")
    for header in local_includes(family.source, cu):
        h.update(header.name.encode() + b"\0" + header.read_bytes())
    if cutlass_dir is not None:  # the CUTLASS version is in its version header
        h.update((cutlass_dir / "cutlass" / "version.h").read_bytes())
    return h.hexdigest()


class Runner:
    """Runs a build's nvcc processes so that a Ctrl-C can stop them: each starts its own process group
    (nvcc runs cicc, ptxas and the host compiler under it) and `cancel` signals every group."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.cancelled = False

    def run(self, cmd: list[str], cwd: Path) -> tuple[int, str]:
        with self._lock:  # no process starts after cancel() has looked at the running ones
            if self.cancelled:
                raise Cancelled
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            self._procs.add(proc)
        try:
            log, _ = proc.communicate()
        finally:
            with self._lock:
                self._procs.discard(proc)
        if self.cancelled:
            raise Cancelled
        return proc.returncode, log

    def cancel(self, sig: int = signal.SIGTERM) -> int:
        """Stop every running nvcc (and what it started); returns how many were running."""
        with self._lock:
            self.cancelled = True
            procs = list(self._procs)
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):  # already gone
                pass
        return len(procs)


def compile_job(job: Job, nvcc: Path, cu: Path, cutlass_dir: Path | None, runner: Runner,
                cwd: Path) -> tuple[Job, float, str | None]:
    """Compile into a temporary directory, then publish it into the cache with one rename.
    Returns the job, the seconds taken and nvcc's error (None on success)."""
    t0 = time.perf_counter()
    job.cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{job.family.name}-{job.arch}-", dir=job.cache_root))
    try:
        keep = tmp / "keep" if job.arch == PTX_ARCH else None
        if keep:
            keep.mkdir()
        includes = [cu] + ([cutlass_dir] if cutlass_dir else [])
        header = job.family.instances_header()
        if header is not None:  # the family's generated instantiation list (hgemm_build.instances)
            gen = tmp / "gen"
            gen.mkdir()
            (gen / header_name(job.family.name)).write_text(header)
            includes.insert(0, gen)
        cubin = tmp / f"{job.family.name}.cubin"
        cmd = nvcc_command(nvcc, job.family.source, job.arch, cubin, keep, includes, family_flags(job.family))
        rc, log = runner.run(cmd, cwd)
        if rc != 0:
            return job, time.perf_counter() - t0, f"nvcc exited {rc}{host_compiler_hint()}:\n{log.strip()}"
        funcs, warnings = parse_ptxas(log)
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
    if not info.is_file() or not job.cubin.is_file():
        return False
    try:
        recorded = json.loads(info.read_text()).get("cubin_sha256")
    except (OSError, ValueError):
        return False
    return recorded == sha256_file(job.cubin)


def verify(job: Job) -> Built:
    """The job's cache entry held against the family's declarations: every declared symbol is in the
    cubin, and the dynamic shared memory each symbol's source computes (its hg_dsmem__ export) is what
    its `dsmem` declares. Raises BuildError naming the kernel, the symbol and both values."""
    fam, arch = job.family, job.arch
    info = json.loads((job.cache_dir / "ptxas.json").read_text())
    data = job.cubin.read_bytes()
    declared = {sym: (spec, choice) for spec in fam.kernels if arch in spec.archs
                for sym, choice in zip(spec.symbols(), spec.variant_choices())}
    missing = [s for s in declared if s not in info["functions"]]
    if missing:
        raise BuildError(f"declared symbol(s) not in the cubin: {missing}\n(check the extern \"C\" wrappers "
                         f"and cu/CONTRACT.md's naming); functions found: {sorted(info['functions'])}")
    try:
        exports = dsmem_exports(data, str(job.cubin))
    except CubinError as exc:
        raise BuildError(str(exc)) from None
    toml = fam.source.with_suffix(".toml").name
    problems = []
    for sym, (spec, choice) in declared.items():
        want, got = spec.dsmem_bytes(choice), exports.get(sym)
        if got is None and want:
            problems.append(f"{spec.name}: {toml} declares dsmem {spec.dsmem!r} = {want} bytes for {sym}, but "
                            f"{fam.source.name} exports no {DSMEM_PREFIX}{sym}: add HG_EXPORT_DSMEM({sym}, <bytes "
                            f"the kernel uses>) beside its extern \"C\" wrapper (cu/common/dsmem.cuh)")
        elif got is not None and got != want:
            problems.append(f"{spec.name}: {toml} declares dsmem {spec.dsmem!r} = {want} bytes for {sym}, but "
                            f"{fam.source.name} computes {got} bytes ({DSMEM_PREFIX}{sym}); make the two agree")
    if problems:
        raise BuildError("dynamic shared memory declared and used differ:\n  " + "\n  ".join(problems))
    symbols = {s: {**info["functions"][s], "dynamic_smem": exports.get(s, 0)} for s in declared}
    ptx = job.cache_dir / f"{fam.name}.ptx"
    if arch == PTX_ARCH and not ptx.is_file():  # the manifest pairs an sm_90 build with its PTX
        raise BuildError(f"nvcc --keep left no PTX for sm_{arch} in {job.cache_dir}; delete that directory to "
                         f"compile it again")
    return Built(fam.name, arch, job.cubin, hashlib.sha256(data).hexdigest(), symbols,
                 tuple(info["warnings"]), ptx if arch == PTX_ARCH else None)
