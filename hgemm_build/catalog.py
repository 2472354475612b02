"""The kernel catalogue: every `cu/<family>.toml` beside its `cu/<family>.cu`, validated.

This is the one place where the kernel list is written down; the manifest, the runtime registry, the
benchmark rows and the test ids all derive from it.

A family's toml states each fact once: `[defaults]` holds what its kernels share, `[sets.<name>]` what a
subset shares (a kernel takes them with `use = "<name>"` or a list of names, applied in order), and a
`[[kernel]]` entry only what is its own. Later tables replace a field whole, except `knobs`, which merge
by knob name (cu/CONTRACT.md).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from hgemm_rt.errors import ManifestError
from hgemm_rt.manifest import KernelSpec, kernel_spec_from_dict

from .instances import include_line, instance_lines, instances_header

FAMILY_OPTIONS = {"cutlass": bool, "extra_flags": list}  # the [family] table's keys and their types
TOP_TABLES = ("family", "defaults", "sets", "kernel")
BUILD_ONLY_FIELDS = ("instance",)  # read by the build (its generated instantiation list), not in the manifest
MERGED_FIELDS = ("knobs",)  # tables merged key by key along defaults -> sets -> kernel


@dataclass(frozen=True)
class Family:
    """One `.cu` file and the kernels it declares; compiled once per architecture."""

    name: str
    source: Path
    kernels: tuple[KernelSpec, ...]
    cutlass: bool = False
    extra_flags: tuple[str, ...] = ()
    raw: tuple[dict, ...] = field(default=(), repr=False, compare=False)  # the merged declarations
    # each kernel's `instance` template ("" for a kernel written out by hand): build-only, not in the manifest
    instances: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def archs(self) -> tuple[str, ...]:
        seen: list[str] = []
        for k in self.kernels:
            seen += [a for a in k.archs if a not in seen]
        return tuple(seen)

    def generated(self) -> list[tuple[KernelSpec, str]]:
        """The kernels whose extern "C" symbols the build generates, with their `instance` templates."""
        return [(spec, template) for spec, template in zip(self.kernels, self.instances) if template]

    def instances_header(self) -> str | None:
        """The generated instantiation list the .cu includes, or None for a family written out by hand."""
        kernels = self.generated()
        return instances_header(kernels, self.source.with_suffix(".toml"), self.archs) if kernels else None


def family_options(data: Any, where: str) -> tuple[bool, tuple[str, ...]]:
    """The [family] table's (cutlass, extra_flags), every key known and typed, else a ManifestError naming it."""
    if not isinstance(data, Mapping):
        raise ManifestError(f"{where}: [family] must be a table, got {data!r}")
    unknown = sorted(set(data) - set(FAMILY_OPTIONS))
    if unknown:
        raise ManifestError(f"{where}: unknown [family] key(s) {unknown}; it takes {list(FAMILY_OPTIONS)}")
    cutlass = data.get("cutlass", False)
    if not isinstance(cutlass, bool):
        raise ManifestError(f"{where}: [family] cutlass must be true or false, got {cutlass!r}")
    flags = data.get("extra_flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ManifestError(f"{where}: [family] extra_flags must be a list of strings, got {flags!r}")
    return cutlass, tuple(flags)


def _layer(table: Any, where: str) -> dict:
    if not isinstance(table, Mapping):
        raise ManifestError(f"{where} must be a table of kernel fields, got {table!r}")
    if "name" in table:
        raise ManifestError(f"{where}: a shared table cannot set the kernel name")
    return dict(table)


def _merge(layers: list[Mapping[str, Any]]) -> dict:
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            if key in MERGED_FIELDS and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                value = {**out[key], **value}
            out[key] = value
    return out


def expand_entries(data: Mapping[str, Any], where: str) -> list[dict]:
    """Each [[kernel]] entry with the [defaults] and the sets it uses applied (without `use`)."""
    unknown = sorted(set(data) - set(TOP_TABLES))
    if unknown:
        raise ManifestError(f"{where}: unknown top-level table(s) {unknown}; a family file has {list(TOP_TABLES)}")
    defaults = _layer(data.get("defaults", {}), f"{where}: [defaults]")
    sets_in = data.get("sets", {})
    if not isinstance(sets_in, Mapping):
        raise ManifestError(f"{where}: [sets] must hold tables [sets.<name>], got {sets_in!r}")
    sets = {name: _layer(t, f"{where}: [sets.{name}]") for name, t in sets_in.items()}
    entries = data.get("kernel", [])
    if not isinstance(entries, list):
        raise ManifestError(f"{where}: kernel must be an array of tables [[kernel]]")
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise ManifestError(f"{where}: a [[kernel]] entry must be a table, got {entry!r}")
        entry = dict(entry)
        use = entry.pop("use", [])
        use = [use] if isinstance(use, str) else use
        if not isinstance(use, list) or not all(isinstance(u, str) for u in use):
            raise ManifestError(f"{where}: {entry.get('name')}: use must be a set name or a list of them, got {use!r}")
        missing = [u for u in use if u not in sets]
        if missing:
            raise ManifestError(f"{where}: {entry.get('name')}: use names unknown set(s) {missing}; the file "
                                f"declares {sorted(sets)}")
        out.append(_merge([defaults, *(sets[u] for u in use), entry]))
    return out


def _check_generated(toml_path: Path, source: Path, kernels: list[KernelSpec], instances: list[str]) -> None:
    """Every `instance` fills (no knob missing), and the .cu includes the generated list exactly when there is one."""
    generated = False
    for spec, template in zip(kernels, instances):
        if template:  # ("" : a kernel written out by hand in a generated family)
            try:
                instance_lines(spec, template)
            except ManifestError as exc:
                raise ManifestError(f"{toml_path}: {exc}") from None
            generated = True
    includes = include_line(toml_path.stem) in source.read_text()
    if generated != includes:
        raise ManifestError(f"{source}: " + (f"its kernels declare an instance, but it does not end with "
                                             f"{include_line(toml_path.stem)!r} (the generated list)" if generated
                                             else f"includes {include_line(toml_path.stem)!r}, but no kernel of "
                                                  f"{toml_path.name} declares an instance"))


def load_family(toml_path: Path) -> Family:
    source = toml_path.with_suffix(".cu")
    if not source.is_file():
        raise ManifestError(f"{toml_path} declares kernels but {source.name} does not exist")
    try:
        data = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{toml_path}: {exc}") from None
    cutlass, extra_flags = family_options(data.get("family", {}), str(toml_path))
    raw, kernels, instances = [], [], []
    for entry in expand_entries(data, str(toml_path)):
        entry = {**entry, "family": toml_path.stem}
        declared = {k: v for k, v in entry.items() if k not in BUILD_ONLY_FIELDS}
        try:
            spec = kernel_spec_from_dict(declared, with_builds=False)
            instance = entry.get("instance")
            if instance is not None and not isinstance(instance, str):
                raise ManifestError(f"{spec.name}: instance must be a string (a line of the generated "
                                    f"instantiation list), got {instance!r}")
        except ManifestError as exc:
            raise ManifestError(f"{toml_path}: {exc}") from None
        if not spec.catalogue and spec.step is not None:
            raise ManifestError(f"{toml_path}: {spec.name}: a helper kernel (role {spec.role}) has no step: only the "
                                f"catalogue's ladders are ordered")
        kernels.append(spec)
        raw.append(declared)
        instances.append(instance or "")
    if not kernels:
        raise ManifestError(f"{toml_path} declares no [[kernel]]")
    _check_generated(toml_path, source, kernels, instances)
    return Family(name=toml_path.stem, source=source, kernels=tuple(kernels), cutlass=cutlass,
                  extra_flags=extra_flags, raw=tuple(raw), instances=tuple(instances))


def load_catalog(cu_dir: Path) -> list[Family]:
    families = []
    names: dict[str, str] = {}
    for toml_path in sorted(cu_dir.glob("*.toml")):
        family = load_family(toml_path)
        for spec in family.kernels:
            for n in (spec.name, *spec.aliases):
                if n in names:
                    raise ManifestError(f"{toml_path}: {n!r} is declared twice (also in {names[n]})")
                names[n] = toml_path.name
        families.append(family)
    return families


def select_families(families: list[Family], pattern: str | None) -> list[Family]:
    """Families with at least one kernel (or alias) matching the glob/substring `pattern`."""
    if not pattern:
        return families

    def hit(k: KernelSpec) -> bool:
        return any(fnmatch.fnmatch(n, pattern) or pattern in n for n in (k.name, *k.aliases))

    return [f for f in families if any(hit(k) for k in f.kernels)]
