"""An nvcc for CUDA 12 drivers from the compilers pip installs: the CUDA C++ front end of a CUDA 13 nvcc,
and the ptxas of a CUDA 12 toolkit (the nvidia-cuda-nvcc-cu12 wheel: ptxas and libNVVM, no nvcc, no cicc).

It takes the build's nvcc command line (`-cubin -gencode=arch=compute_XX,code=sm_XX ... -o out.cubin src.cu`,
hgemm_build.toolchain.nvcc_command) and runs it in two steps: the front-end nvcc compiles the source to PTX,
the PTX's `.version` is lowered to the newest PTX ISA the CUDA 12 ptxas reads (PTX that uses anything newer is
refused by that ptxas with its own error), and the CUDA 12 ptxas assembles the cubin, printing the `-v`
resource report the build parses. The cubin is then a CUDA 12 one (the CUDA 12 ELF ABI, its toolkit version in
the ELF header), which a driver of CUDA 12.0 or newer loads; the PTX kept beside it is the lowered one, which
a driver of the ptxas's CUDA version JIT-compiles. `--version` reports the ptxas's release (what the driver
sees) and then the front end's.

The build makes a launcher for it (`python build_kernels.py --cuda12`); by hand:
`python -m hgemm_build.split_nvcc --front NVCC13 --ptxas PTXAS12 -- <nvcc arguments>`.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# the newest PTX ISA each CUDA 12 ptxas reads (the PTX ISA document's release history)
PTX_ISA = {(12, 8): (8, 7), (12, 9): (8, 8)}

_VERSION_LINE = re.compile(rb"^\.version (\d+)\.(\d+)[ \t]*$", re.M)
_RELEASE = re.compile(r"release (\d+)\.(\d+), V([\d.]+)")


class SplitNvccError(RuntimeError):
    pass


def tool_release(tool: str) -> tuple[int, int, str]:
    """(major, minor, full version) of an nvcc or ptxas, from its `--version`."""
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
    m = _RELEASE.search(out)
    if not m:
        raise SplitNvccError(f"{tool} --version printed no release:\n{out}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def lower_ptx_version(ptx: bytes, isa: tuple[int, int]) -> bytes:
    """The PTX with a `.version` newer than `isa` set to `isa` (an older one is left as it is)."""
    m = _VERSION_LINE.search(ptx)
    if not m:
        raise SplitNvccError("the front end's PTX has no .version line")
    if (int(m.group(1)), int(m.group(2))) <= isa:
        return ptx
    return ptx[:m.start()] + f".version {isa[0]}.{isa[1]}".encode() + ptx[m.end():]


def split_command(argv: list[str]) -> dict:
    """The parts of the build's nvcc command: arch, output, source, ptxas options, keep dir, and the
    front-end options (everything else)."""
    parts: dict = {"ptxas": [], "front": [], "keep_dir": None, "out": None, "arch": None}
    it = iter(argv[:-1])
    for arg in it:
        if arg == "-cubin" or arg == "--keep":
            continue
        if arg in ("-Xptxas", "--ptxas-options"):
            parts["ptxas"] += next(it).split(",")
        elif arg.startswith(("-Xptxas=", "--ptxas-options=")):
            parts["ptxas"] += arg.split("=", 1)[1].split(",")
        elif re.fullmatch(r"--?maxrregcount=\d+", arg):  # a ptxas option nvcc forwards (a PTX has no room for it)
            parts["ptxas"].append("--maxrregcount=" + arg.split("=", 1)[1])
        elif arg == "-o":
            parts["out"] = next(it)
        elif arg.startswith("--keep-dir="):
            parts["keep_dir"] = arg.split("=", 1)[1]
        elif arg.startswith("-gencode="):
            m = re.fullmatch(r"-gencode=arch=compute_(\w+),code=sm_(\w+)", arg)
            if not m or m.group(1) != m.group(2):
                raise SplitNvccError(f"{arg}: only -gencode=arch=compute_XX,code=sm_XX is handled")
            parts["arch"] = m.group(1)
        else:
            parts["front"].append(arg)
    if not argv or parts["arch"] is None or parts["out"] is None:
        raise SplitNvccError("expected the build's command: -cubin -gencode=arch=compute_XX,code=sm_XX ... -o OUT SRC")
    parts["source"] = argv[-1]
    return parts


def compile_cubin(front: str, ptxas: str, argv: list[str]) -> int:
    parts = split_command(argv)
    major, minor, _ = tool_release(ptxas)
    isa = PTX_ISA.get((major, minor))
    if isa is None:
        raise SplitNvccError(f"{ptxas} is CUDA {major}.{minor}; a CUDA {', '.join(f'{a}.{b}' for a, b in PTX_ISA)} "
                             "ptxas is expected (the newest PTX ISA it reads is known for those)")
    out = Path(parts["out"])
    with tempfile.TemporaryDirectory(prefix=".split-nvcc-", dir=out.parent) as tmp:
        ptx = Path(tmp) / (Path(parts["source"]).stem + ".ptx")
        proc = subprocess.run([front, "-ptx", f"--gpu-architecture=compute_{parts['arch']}", *parts["front"],
                               "-o", str(ptx), parts["source"]], capture_output=True, text=True)
        sys.stdout.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            return proc.returncode
        ptx.write_bytes(lower_ptx_version(ptx.read_bytes(), isa))
        lineinfo = ["-lineinfo"] if "-lineinfo" in parts["front"] else []
        proc = subprocess.run([ptxas, f"-arch=sm_{parts['arch']}", "-m64", "-O3", *lineinfo, *parts["ptxas"],
                               str(ptx), "-o", str(out)], capture_output=True, text=True)
        sys.stdout.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            print(f"split_nvcc: the CUDA {major}.{minor} ptxas refused the PTX of {parts['source']} (lowered to "
                  f"ISA {isa[0]}.{isa[1]}): it uses something newer, or the ptxas found a real error")
            return proc.returncode
        if parts["keep_dir"]:
            os.replace(ptx, Path(parts["keep_dir"]) / ptx.name)
    return 0


def print_version(front: str, ptxas: str) -> int:
    """ptxas's release first (hgemm_build.toolchain.nvcc_version reads the first one: it is what decides
    which drivers load the cubins), then the front end's."""
    print(subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.rstrip())
    print(f"split_nvcc: CUDA C++ front end {front}, nvcc {tool_release(front)[2]}; PTX assembled by {ptxas}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hgemm_build.split_nvcc", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--front", required=True, help="the nvcc that compiles CUDA C++ to PTX (CUDA 13)")
    ap.add_argument("--ptxas", required=True, help="the ptxas that assembles the PTX (CUDA 12.8 or 12.9)")
    ap.add_argument("nvcc_args", nargs=argparse.REMAINDER, help="-- then the nvcc command line")
    args = ap.parse_args(argv)
    rest = args.nvcc_args[1:] if args.nvcc_args[:1] == ["--"] else args.nvcc_args
    try:
        if rest == ["--version"]:
            return print_version(args.front, args.ptxas)
        return compile_cubin(args.front, args.ptxas, rest)
    except SplitNvccError as exc:
        print(f"split_nvcc: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
