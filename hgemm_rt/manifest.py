"""The build manifest: frozen, validated views of `artifacts/manifest.json`, and cubin selection.

`build_kernels.py` writes the manifest; everything else (runtime, bench, tests) reads it through this
module. Nothing here touches the GPU.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .declaration import KernelSpec, TOP_FIELDS, check_table, kernel_spec_from_dict, shown, typed_field
from .errors import ManifestError, NotBuiltForDeviceError

SCHEMA_VERSION = 4  # 2: every declared field written out, symbols carry dynamic_smem; 3: knobs, rates, step optional;
# 4: the helper kernels and families named matmul_* (ladder "matmul"), no longer util_*
REBUILD_HINT = "rebuild with `python build_kernels.py` (or `--arch XX` for one architecture)"


def default_artifacts_dir() -> Path:
    """$HGEMM_ARTIFACTS, else the build that an installed wheel carries (`hgemm_rt/artifacts/`, see
    setup.py), else `artifacts/` of the source checkout this package was imported from."""
    env = os.environ.get("HGEMM_ARTIFACTS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    packaged = here / "artifacts"
    # the manifest is written last, so a folder without one is no build (an interrupted copy)
    return packaged if (packaged / "manifest.json").is_file() else here.parent / "artifacts"


def arch_of_cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}{cc[1]}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Selection:
    """What to load for one kernel on one device."""

    path: Path
    sha256: str
    arch: str
    is_ptx: bool  # True: the driver JIT-compiles PTX for a GPU newer than every cubin


@dataclass(frozen=True)
class Manifest:
    root: Path
    kernels: Mapping[str, KernelSpec]
    aliases: Mapping[str, str]
    build_hash: str
    nvcc: str

    @classmethod
    def load(cls, root: "Path | str | None" = None) -> "Manifest":
        root = Path(root) if root else default_artifacts_dir()
        path = root / "manifest.json"
        if not path.is_file():
            raise ManifestError(f"no build manifest at {path}: {REBUILD_HINT}")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{path} is not readable JSON ({exc}); {REBUILD_HINT}") from None
        return cls.from_dict(data, root, str(path))

    @classmethod
    def from_dict(cls, data: Any, root: Path, source: str = "the manifest") -> "Manifest":
        """Validate a parsed manifest. Anything structurally wrong (types, missing or unknown keys) is a
        ManifestError naming `source`, the place and the value, and how to rebuild."""
        if not isinstance(data, Mapping):
            raise ManifestError(f"{source} holds a JSON {type(data).__name__}, not a manifest table; {REBUILD_HINT}")
        if data.get("schema") != SCHEMA_VERSION:
            raise ManifestError(f"{source} has schema {shown(data.get('schema'))}, this runtime reads schema "
                                f"{SCHEMA_VERSION}; {REBUILD_HINT}")
        try:
            check_table(data, "the top level", TOP_FIELDS)
            for key in ("nvcc", "build_hash", "created"):
                typed_field(data, key, (str,), "a string", "the top level")
            entries = typed_field(data, "kernels", (list,), "a list of kernel entries", "the top level")
            kernels: dict[str, KernelSpec] = {}
            for entry in entries:
                spec = kernel_spec_from_dict(entry, complete=True)
                if spec.name in kernels:
                    raise ManifestError(f"kernel {spec.name} is listed twice")
                kernels[spec.name] = spec
            aliases: dict[str, str] = {}
            for spec in kernels.values():
                for alias in spec.aliases:
                    if alias in kernels or alias in aliases:
                        raise ManifestError(f"alias {alias!r} of {spec.name} clashes with another name")
                    aliases[alias] = spec.name
        except ManifestError as exc:
            raise ManifestError(f"{source}: {exc}; {REBUILD_HINT}") from None
        return cls(root, kernels, aliases, data["build_hash"], data["nvcc"])

    def canonical(self, name: str) -> str | None:
        return name if name in self.kernels else self.aliases.get(name)

    def read_verified(self, spec: KernelSpec, sel: Selection) -> bytes:
        """The cubin/PTX bytes, refused unless they match the manifest's sha256."""
        if not sel.path.is_file():
            raise ManifestError(f"{spec.name}: {sel.path} is missing; {REBUILD_HINT}")
        data = sel.path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sel.sha256:
            raise ManifestError(
                f"{spec.name}: {sel.path} does not match the sha256 in the manifest (altered, truncated or "
                f"from another build); {REBUILD_HINT}"
            )
        return data

    def select(self, spec: KernelSpec, cc: tuple[int, int]) -> Selection:
        """The cubin for compute capability `cc`: sm_90a > exact sm_XY > same major, lower minor >
        PTX JIT for a newer GPU. Raises NotBuiltForDeviceError saying what to build."""
        arch = arch_of_cc(cc)
        order = []
        if arch == "90":
            order.append("90a")
        order.append(arch)
        order += sorted(
            (a for a in spec.builds if not a.endswith("a") and a[:-1] == str(cc[0]) and int(a[-1]) < cc[1]),
            key=lambda a: -int(a[-1]),
        )
        for a in order:
            if a in spec.builds:
                b = spec.builds[a]
                return Selection(self.root / b.cubin, b.sha256, a, False)
        if spec.ptx and int(spec.ptx.arch.rstrip("a")) <= cc[0] * 10 + cc[1] and not spec.ptx.arch.endswith("a"):
            return Selection(self.root / spec.ptx.path, spec.ptx.sha256, spec.ptx.arch, True)
        built = ", ".join(f"sm_{a}" for a in sorted(spec.builds)) or "nothing"
        runnable = [a for a in spec.archs if a.rstrip("a")[:-1] == str(cc[0]) and int(a.rstrip("a")[-1]) <= cc[1]]
        if runnable:
            hint = f"build it with `python build_kernels.py --arch {runnable[-1]}`"
        else:
            hint = f"it supports only {', '.join('sm_' + a for a in spec.archs)}"
        raise NotBuiltForDeviceError(
            f"{spec.name}: no cubin for this GPU (sm_{arch}); the build holds {built}; {hint}"
        )
