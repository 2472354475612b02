"""A build for CUDA 12 drivers, checked on the CPU: which toolkit wrote a cubin (its ELF header), that a build's
cubins need what its manifest says from the driver, the split nvcc (a CUDA 13 front end, a CUDA 12 ptxas), the
CUDA 13 build's flags, and the extras a CUDA 12 user installs. No CUDA 12 driver loads anything here."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from hgemm_build.cubin import CubinError, toolkit_version
from hgemm_build.split_nvcc import SplitNvccError, lower_ptx_version, split_command
from hgemm_build.toolchain import nvcc_command
from hgemm_rt.device import driver_needed, driver_problem, driver_requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
ELF = ROOT / "tests" / "data" / "cuda_elf"  # an empty kernel (empty_kernel.ptx) through each ptxas


def test_the_cuda12_elf_header_holds_the_toolkit():
    data = (ELF / "empty_kernel.ptxas-12.9.sm_90.cubin").read_bytes()
    assert (data[7], data[8]) == (0x33, 7)  # EI_OSABI, EI_ABIVERSION of the CUDA 12 ABI
    assert toolkit_version(data) == (12, 9)


def test_the_cuda13_elf_names_the_toolkit_in_its_note():
    data = (ELF / "empty_kernel.ptxas-13.0.sm_90.cubin").read_bytes()
    assert (data[7], data[8]) == (0x41, 8)  # the ABI CUDA 13 introduced
    assert toolkit_version(data) == (13, 0)


def test_an_unknown_elf_abi_is_refused():
    data = bytearray((ELF / "empty_kernel.ptxas-12.9.sm_90.cubin").read_bytes())
    data[8] = 9
    with pytest.raises(CubinError, match="unknown CUDA ELF ABI"):
        toolkit_version(bytes(data))
    with pytest.raises(CubinError, match="not a 64-bit little-endian ELF"):
        toolkit_version(b"not a cubin" * 8)


@pytest.mark.parametrize("compiler,cubins,ptx", [("12.9.86", (12, 0), (12, 9)), ("13.0.88", (13, 0), (13, 0)),
                                                 ("", None, None)])
def test_what_a_build_needs_from_the_driver(compiler, cubins, ptx):
    assert driver_needed(compiler) == cubins and driver_needed(compiler, jit=True) == ptx


def test_the_statement_names_both_requirements_and_the_linux_driver():
    assert driver_requirement("12.9.86") == ("cubins from nvcc 12.9.86: a driver for CUDA 12.0 or newer (Linux driver "
                                             "525.60.13 or newer); its PTX (JIT-compiled on a GPU newer than the "
                                             "cubins): CUDA 12.9 or newer")
    assert "580.65.06" in driver_requirement("13.0.88")
    assert "unknown" in driver_requirement("")


def test_a_cuda12_driver_is_told_the_pip_rebuild():
    message = driver_problem("13.0.88", 12040)  # an R550 driver
    assert "supports CUDA 12.4" in message and "python build_kernels.py --cuda12" in message
    assert "--cuda12" not in driver_problem("13.0.88", 11080)  # (no CUDA 12 build helps a CUDA 11 driver)


def _build_at_hand():
    root = Path(os.environ.get("HGEMM_ARTIFACTS") or ROOT / "artifacts")
    if not (root / "manifest.json").is_file():
        pytest.skip(f"no build at {root} (set HGEMM_ARTIFACTS to a build directory)")
    return root, json.loads((root / "manifest.json").read_text())


def test_the_build_s_cubins_need_what_its_manifest_says():
    """Every cubin of the build at hand was written by the toolkit its manifest names: so the driver rule the
    runtime applies to the manifest's `nvcc` (driver_problem) is the one the files themselves carry."""
    root, manifest = _build_at_hand()
    want = tuple(int(x) for x in manifest["nvcc"].split(".")[:2])
    cubins = {b["cubin"] for k in manifest["kernels"] for b in k["builds"].values()}
    found = {rel: toolkit_version((root / rel).read_bytes(), rel) for rel in sorted(cubins)}
    assert found and {v for v in found.values()} == {want}, {r: v for r, v in found.items() if v != want}
    major = want[0]
    assert driver_problem(manifest["nvcc"], major * 1000) is None  # the oldest driver of that major loads them
    assert driver_problem(manifest["nvcc"], (major - 1) * 1000 + 90) is not None


def test_the_build_s_ptx_is_one_its_driver_reads():
    """The shipped PTX (JIT-compiled on GPUs newer than the cubins) is of an ISA the toolkit the manifest names
    writes: at most 8.8 for CUDA 12.9 (the split nvcc lowers the CUDA 13 front end's 9.0), 9.0 for CUDA 13.0."""
    import re

    from hgemm_build.split_nvcc import PTX_ISA

    root, manifest = _build_at_hand()
    want = tuple(int(x) for x in manifest["nvcc"].split(".")[:2])
    newest = {**PTX_ISA, (13, 0): (9, 0)}.get(want)
    if newest is None:
        pytest.skip(f"the newest PTX ISA of CUDA {want[0]}.{want[1]} is not listed here")
    for rel in sorted({k["ptx"]["path"] for k in manifest["kernels"] if k["ptx"]}):
        m = re.search(rb"^\.version (\d+)\.(\d+)", (root / rel).read_bytes(), re.M)
        assert m and (int(m.group(1)), int(m.group(2))) <= newest, rel


def test_the_cuda13_build_s_command_is_unchanged():
    """The build cache is keyed by the flags: the CUDA 13 build's must not move when the CUDA 12 route changes."""
    cmd = nvcc_command(Path("nvcc"), Path("x.cu"), "90a", Path("x.cubin"), Path("keep"), [Path("inc")], ["-DX"])
    assert cmd == ["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-lineinfo",
                   "-Xptxas", "-v", "-Xptxas", "-warn-spills,-warn-lmem-usage", "-Iinc", "-DX", "--keep",
                   "--keep-dir=keep", "-o", "x.cubin", "x.cu"]


def test_the_split_nvcc_reads_the_build_s_command():
    cmd = nvcc_command(Path("nvcc"), Path("cu/x.cu"), "90a", Path("o/x.cubin"), Path("k"), [Path("cu")], ["-DX"])
    parts = split_command(cmd[1:])
    assert parts["arch"] == "90a" and parts["out"] == "o/x.cubin" and parts["source"] == "cu/x.cu"
    assert parts["keep_dir"] == "k" and parts["ptxas"] == ["-v", "-warn-spills", "-warn-lmem-usage"]
    assert parts["front"] == ["-O3", "-std=c++17", "-lineinfo", "-Icu", "-DX"]


def test_the_split_nvcc_routes_the_ptxas_options_nvcc_forwards():
    parts = split_command(["-cubin", "-gencode=arch=compute_80,code=sm_80", "-maxrregcount=128", "-Xptxas=-O2",
                           "--ptxas-options", "-dlcm=cg", "-use_fast_math", "-o", "x.cubin", "x.cu"])
    assert parts["ptxas"] == ["--maxrregcount=128", "-O2", "-dlcm=cg"] and parts["front"] == ["-use_fast_math"]
    with pytest.raises(SplitNvccError, match="only -gencode=arch=compute_XX,code=sm_XX"):
        split_command(["-gencode=arch=compute_90,code=compute_90", "-o", "x.ptx", "x.cu"])


def test_the_ptx_version_is_lowered_only_when_newer():
    ptx = b"//\n.version 9.0\n.target sm_90\n"
    assert lower_ptx_version(ptx, (8, 8)) == b"//\n.version 8.8\n.target sm_90\n"
    assert lower_ptx_version(b".version 8.5\n", (8, 8)) == b".version 8.5\n"


def _pip_tool(*parts: str) -> Path | None:
    import site

    for sp in site.getsitepackages():
        cand = Path(sp, "nvidia", *parts)
        if cand.is_file():
            return cand
    return None


def test_the_split_nvcc_builds_a_cuda12_cubin(tmp_path):
    """cu/naive.cu through the launcher the build makes (`--cuda12`): a CUDA 12.9 cubin, the -v report, the
    lowered PTX kept. Where the build and build-cu12 extras are installed (skipped elsewhere)."""
    from hgemm_build.toolchain import cuda12_nvcc, nvcc_version, parse_ptxas

    front, ptxas = _pip_tool("cu13", "bin", "nvcc"), _pip_tool("cuda_nvcc", "bin", "ptxas")
    if front is None or ptxas is None or not shutil.which("g++"):
        pytest.skip("needs the build and build-cu12 extras (`pip install -e .[build,build-cu12]`) and g++")
    nvcc = cuda12_nvcc(front, ptxas, tmp_path)
    assert nvcc_version(nvcc).startswith("12.9.")
    (tmp_path / "keep").mkdir()
    cmd = nvcc_command(nvcc, ROOT / "cu" / "naive.cu", "90", tmp_path / "n.cubin", tmp_path / "keep", [ROOT / "cu"], [])
    import subprocess

    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert toolkit_version((tmp_path / "n.cubin").read_bytes()) == (12, 9)
    assert parse_ptxas(run.stdout)[0]  # the resource report the build records
    assert b"\n.version 8.8\n" in next((tmp_path / "keep").glob("*.ptx")).read_bytes()


def test_the_extras_for_a_cuda12_user():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["build-cu12"] == ["nvidia-cuda-nvcc-cu12==12.9.*"]
    assert "cuda-bindings>=12.6,<13" in extras["cu12"]
    cublas12 = " ".join(extras["cublas-cu12"])
    assert "nvidia-cublas-cu12>=12,<13" in cublas12 and "cuda-bindings>=12.9.2,<13" in cublas12
    assert "nvidia-cublas>=13" not in cublas12


def test_ptxas_without_cuda12_is_a_usage_error(tmp_path, capsys):
    from hgemm_build.cli import EXIT_USAGE, main

    assert main(["--ptxas", "/usr/bin/true", "--arch", "90", "--out", str(tmp_path)]) == EXIT_USAGE
    assert "--ptxas goes with --cuda12" in capsys.readouterr().err
    assert not (tmp_path / "manifest.json").exists()


def test_a_split_build_has_its_own_cache_entries(tmp_path):
    """A --cuda12 build reports its ptxas's release (12.9.86), as a CUDA 12.9 toolkit's nvcc does: the cache key
    adds the front end's version and the split's code, so the two never share cached cubins."""
    from hgemm_build.toolchain import split_identity

    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    fake.chmod(0o755)
    identity = split_identity(fake)
    assert "front end nvcc 13.0.88" in identity and "split_nvcc " in identity
