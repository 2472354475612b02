"""The wheel carries the kernels: build_py copies the build that `python build_kernels.py` wrote to
artifacts/ into the package as hgemm_rt/artifacts/, where hgemm_rt.manifest.default_artifacts_dir()
finds it once installed. Everything else about the package is declared in pyproject.toml.

    python build_kernels.py && pip wheel --no-deps -w dist .      # or: python -m build
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path, PurePosixPath

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parent
ARTIFACTS = ROOT / "artifacts"
BUILD_HINT = "run `python build_kernels.py` in the checkout first"


def checked_path(rel: object, where: str) -> str:
    """A file path from the manifest, refused unless it stays inside the artifacts directory (relative, no `..`)."""
    if not isinstance(rel, str) or not rel or PurePosixPath(rel).is_absolute() or "\\" in rel \
            or ".." in PurePosixPath(rel).parts:
        raise SetupError(f"{where}: the manifest names the file {rel!r}, which is not a path inside the artifacts "
                         f"directory; {BUILD_HINT}")
    return rel


def referenced_files(manifest: dict) -> list[str]:
    """Every cubin and PTX file the manifest names, with its sha256: what a wheel must carry (older
    builds may have left other files in artifacts/)."""
    files = {}
    for kernel in manifest.get("kernels", []):
        for arch, build in kernel.get("builds", {}).items():
            files[checked_path(build["cubin"], f"{kernel.get('name')} sm_{arch}")] = build["sha256"]
        if kernel.get("ptx"):
            files[checked_path(kernel["ptx"]["path"], f"{kernel.get('name')} ptx")] = kernel["ptx"]["sha256"]
    return sorted(files.items())


def copy_build(source: Path, target: Path) -> int:
    """Copy the manifest and the files it names, each checked against its sha256; returns the count."""
    manifest_path = source / "manifest.json"
    if not manifest_path.is_file():
        raise SetupError(f"no kernel build to package: {manifest_path} does not exist; {BUILD_HINT}")
    manifest = json.loads(manifest_path.read_text())
    files = referenced_files(manifest)
    if not files:
        raise SetupError(f"{manifest_path} lists no compiled kernel; {BUILD_HINT}")
    shutil.rmtree(target, ignore_errors=True)  # a previous wheel build's copy may be of another build
    for rel, sha256 in files:
        src, dst = source / rel, target / rel
        data = src.read_bytes() if src.is_file() else None
        if data is None or hashlib.sha256(data).hexdigest() != sha256:
            state = "is missing" if data is None else "does not match its sha256 in the manifest"
            raise SetupError(f"{src} {state}: the build in {source} is incomplete; {BUILD_HINT}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
    shutil.copyfile(manifest_path, target / "manifest.json")  # last: a copy without it is no build
    return len(files)


class BuildPyWithKernels(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout's artifacts/
            return
        n = copy_build(ARTIFACTS, Path(self.build_lib) / "hgemm_rt" / "artifacts")
        print(f"hgemm: packaged {n} cubin/PTX files from {ARTIFACTS}")


if __name__ == "__main__":  # (setuptools runs this file as __main__; tests import copy_build)
    setup(
        cmdclass={"build_py": BuildPyWithKernels},
        # setuptools' default build/ is the kernel cache's folder too: keep its staging tree apart
        options={"build": {"build_base": "build/setuptools"}},
    )
