"""The kernel catalogue: every `cu/<family>.toml` beside its `cu/<family>.cu`, validated.

This is the one place where the kernel list is written down; the manifest, the runtime registry, the
benchmark rows and the test ids all derive from it.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from hgemm_rt.errors import ManifestError
from hgemm_rt.manifest import KernelSpec, kernel_spec_from_dict


@dataclass(frozen=True)
class Family:
    """One `.cu` file and the kernels it declares; compiled once per architecture."""

    name: str
    source: Path
    kernels: tuple[KernelSpec, ...]
    cutlass: bool = False
    extra_flags: tuple[str, ...] = ()
    raw: tuple[dict, ...] = field(default=(), repr=False, compare=False)

    @property
    def archs(self) -> tuple[str, ...]:
        seen: list[str] = []
        for k in self.kernels:
            seen += [a for a in k.archs if a not in seen]
        return tuple(seen)


def load_catalog(cu_dir: Path) -> list[Family]:
    families = []
    names: dict[str, str] = {}
    for toml_path in sorted(cu_dir.glob("*.toml")):
        source = toml_path.with_suffix(".cu")
        if not source.is_file():
            raise ManifestError(f"{toml_path} declares kernels but {source.name} does not exist")
        try:
            data = tomllib.loads(toml_path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ManifestError(f"{toml_path}: {exc}") from None
        fam_opts = data.get("family", {})
        unknown = set(data) - {"family", "kernel"}
        if unknown:
            raise ManifestError(f"{toml_path}: unknown top-level table(s) {sorted(unknown)}")
        raw = []
        kernels = []
        for entry in data.get("kernel", []):
            entry = {**entry, "family": toml_path.stem}
            try:
                spec = kernel_spec_from_dict(entry, with_builds=False)
            except ManifestError as exc:
                raise ManifestError(f"{toml_path}: {exc}") from None
            for n in (spec.name, *spec.aliases):
                if n in names:
                    raise ManifestError(f"{toml_path}: {n!r} is declared twice (also in {names[n]})")
                names[n] = toml_path.name
            kernels.append(spec)
            raw.append(entry)
        if not kernels:
            raise ManifestError(f"{toml_path} declares no [[kernel]]")
        families.append(
            Family(
                name=toml_path.stem,
                source=source,
                kernels=tuple(kernels),
                cutlass=bool(fam_opts.get("cutlass", False)),
                extra_flags=tuple(fam_opts.get("extra_flags", ())),
                raw=tuple(raw),
            )
        )
    return families


def select_families(families: list[Family], pattern: str | None) -> list[Family]:
    """Families with at least one kernel (or alias) matching the glob/substring `pattern`."""
    if not pattern:
        return families

    def hit(k: KernelSpec) -> bool:
        return any(fnmatch.fnmatch(n, pattern) or pattern in n for n in (k.name, *k.aliases))

    return [f for f in families if any(hit(k) for k in f.kernels)]
