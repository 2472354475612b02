"""Locating nvcc and the CUTLASS headers, compiling one family for one architecture, and reading
ptxas's resource report."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class ToolchainError(RuntimeError):
    pass


def _site_packages() -> list[Path]:
    import site
    import sysconfig

    paths = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    paths += [Path(p) for p in site.getsitepackages() if p]
    return list(dict.fromkeys(paths))


def _given_or_wheel(what: str, given: list[tuple[str, str | None]], wheel_dir: str) -> Path | None:
    """The first of the (option, value) pairs that has a value, which must be an executable; else `what`
    in the pip wheels' nvidia/<wheel_dir>/bin/; else None."""
    for source, value in given:
        if value:
            path = Path(value)
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise ToolchainError(f"{source}={value} is not an executable {what}")
            return path
    for sp in _site_packages():
        cand = sp / "nvidia" / wheel_dir / "bin" / what
        if cand.is_file():
            return cand
    return None


def find_nvcc(explicit: str | None = None) -> Path:
    """--nvcc, then $HGEMM_NVCC, then the pip wheel (nvidia-cuda-nvcc 13.0), then nvcc on PATH."""
    found = _given_or_wheel("nvcc", [("--nvcc", explicit), ("HGEMM_NVCC", os.environ.get("HGEMM_NVCC"))], "cu13")
    if found:
        return found
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    raise ToolchainError(
        "no nvcc found: install the compiler wheels (`pip install -e .[build]`), or point "
        "HGEMM_NVCC / --nvcc at an nvcc 12.8+ (docs/cuda12.md: a build for CUDA 12 drivers)"
    )


def nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    if not m:
        raise ToolchainError(f"{nvcc} --version printed no version:\n{out}")
    return m.group(1)


def find_cuda12_ptxas(explicit: str | None = None) -> Path:
    """--ptxas, then the nvidia-cuda-nvcc-cu12 wheel's ptxas (that wheel holds ptxas and libNVVM only)."""
    found = _given_or_wheel("ptxas", [("--ptxas", explicit)], "cuda_nvcc")
    if found:
        return found
    raise ToolchainError("--cuda12 needs a CUDA 12 ptxas: `pip install -e .[build,build-cu12]` (the "
                         "nvidia-cuda-nvcc-cu12 wheel), or pass --ptxas /path/to/cuda-12.9/bin/ptxas; with the "
                         "nvcc of a CUDA 12 toolkit, HGEMM_NVCC=/usr/local/cuda-12.9/bin/nvcc needs no --cuda12")


def split_identity(front: Path) -> str:
    """What a --cuda12 build's cache key adds to the ptxas release it reports: the front end's version and the
    split's own code (hgemm_build/split_nvcc.py), so that neither a CUDA 12 toolkit's nvcc of the same
    release nor an earlier split shares its cache entries."""
    code = (Path(__file__).resolve().parent / "split_nvcc.py").read_bytes()
    return f"split: front end nvcc {nvcc_version(front)}, split_nvcc {hashlib.sha256(code).hexdigest()[:16]}"


def cuda12_nvcc(nvcc: Path, ptxas: Path, directory: Path) -> Path:
    """An executable that runs the build's nvcc commands as `nvcc` (the CUDA C++ front end, to PTX) then
    `ptxas` (CUDA 12, to the cubin): hgemm_build.split_nvcc, launched by this Python."""
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / "nvcc-cuda12"
    package_root = Path(__file__).resolve().parent.parent
    text = (
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(package_root)!r})\n"
        "from hgemm_build.split_nvcc import main\n"
        f"sys.exit(main(['--front', {str(nvcc)!r}, '--ptxas', {str(ptxas)!r}, '--', *sys.argv[1:]]))\n")
    if not launcher.is_file() or launcher.read_text() != text:  # (a concurrent build writes the same text)
        tmp = directory / f".nvcc-cuda12.{os.getpid()}"
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, launcher)
    return launcher


def cutlass_include() -> Path:
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.submodule_search_locations:
        inc = Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
        if (inc / "cute").is_dir():
            return inc
    env = os.environ.get("HGEMM_CUTLASS_INCLUDE")
    if env and (Path(env) / "cute").is_dir():
        return Path(env)
    raise ToolchainError(
        "CUTLASS/CuTe headers not found: `pip install nvidia-cutlass` (the `build` extra) or set "
        "HGEMM_CUTLASS_INCLUDE to a directory holding cute/ and cutlass/"
    )


def gencode(arch: str) -> str:
    # sm_90a must use the -gencode form: the -arch=sm_90a shorthand also runs a plain sm_90 pass.
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def nvcc_command(nvcc: Path, source: Path, arch: str, out: Path, keep_dir: Path | None,
                 include_dirs: list[Path], extra: list[str]) -> list[str]:
    cmd = [str(nvcc), "-cubin", gencode(arch), "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v",
           "-Xptxas", "-warn-spills,-warn-lmem-usage"]
    cmd += [f"-I{d}" for d in include_dirs] + extra
    if keep_dir is not None:  # keeps the PTX nvcc produces on the way (for JIT on newer GPUs)
        cmd += ["--keep", f"--keep-dir={keep_dir}"]
    return cmd + ["-o", str(out), str(source)]


@dataclass
class PtxasFunction:
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    static_smem: int = 0


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> tuple[dict[str, PtxasFunction], list[str]]:
    """Per-function figures from `ptxas -v` output, and the warning lines (C7510, spills, ...)."""
    funcs: dict[str, PtxasFunction] = {}
    current: PtxasFunction | None = None
    warnings = []
    for line in log.splitlines():
        if "warning" in line.lower():
            warnings.append(line.strip())
        m = _ENTRY.search(line)
        if m:
            current = funcs.setdefault(m.group(1), PtxasFunction())
            continue
        if current is None:
            continue
        m = _PROPS.search(line)
        if m:
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
        m = _USED.search(line)
        if m:
            current.registers = int(m.group(1))
            s = _SMEM.search(line)
            current.static_smem = int(s.group(1)) if s else 0
    return funcs, warnings


def host_compiler_hint() -> str:
    return "" if shutil.which("g++") or shutil.which("c++") else " (no host C++ compiler on PATH: nvcc needs g++)"


def python_info() -> str:
    return f"{sys.implementation.name} {sys.version.split()[0]}"


def find_tool(name: str) -> Path | None:
    """cuobjdump / nvdisasm: beside the pip nvcc (the nvidia-cuda-cuobjdump wheel), else on PATH."""
    for sp in _site_packages():
        cand = sp / "nvidia" / "cu13" / "bin" / name
        if cand.is_file():
            return cand
    found = shutil.which(name)
    return Path(found) if found else None


_PTX_FILE = re.compile(rb'^(\s*\.file\s+\d+\s+")([^"]*)(")', re.M)


def portable_ptx(data: bytes, root: Path) -> bytes:
    """The PTX with its `.file` paths made builder-independent (the debug line table only; the cubin is compiled
    before and is not touched): a source of the checkout `root`'s cu/ relative to it (cu/naive.cu), a header of
    an include tree from its `include/` (include/cuda_fp16.hpp, include/cute/...), another file of the checkout
    relative to it, anything else its file name."""
    prefix = str(root.resolve()).encode() + b"/"

    def rel(m: re.Match) -> bytes:
        path = m.group(2)
        if not path.startswith(b"/"):
            return m.group(0)
        if path.startswith(prefix + b"cu/"):
            short = path[len(prefix):]
        elif b"/include/" in path:  # the toolkit's and CUTLASS's headers, wherever they are installed
            short = b"include/" + path.rsplit(b"/include/", 1)[1].lstrip(b"/")
        elif path.startswith(prefix):
            short = path[len(prefix):]
        else:
            short = path.rsplit(b"/", 1)[-1]
        return m.group(1) + short + m.group(3)

    return _PTX_FILE.sub(rel, data)


_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)", re.M)


def sass_by_function(cubin: Path, cuobjdump: Path) -> dict[str, str]:
    """The SASS text of every function in a cubin, from `cuobjdump -sass`."""
    proc = subprocess.run([str(cuobjdump), "-sass", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -sass {cubin} failed: {proc.stderr.strip()}")
    parts = _FUNCTION.split(proc.stdout)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
