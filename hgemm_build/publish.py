"""Publishing verified builds into the artifacts directory, merged into the manifest already there.

A build publishes per family and architecture: what it built replaces that family's build for that
arch; everything it did not build (other archs, other families, a family whose compile failed) keeps
the build the previous manifest lists, as long as that build's cubin is intact and the kernel is still
declared the same way. A failed family whose declarations changed keeps its previous entries whole
(its last good cubins were built for those). The cubins are written first, the manifest last and
atomically, and only then are files no entry refers to removed.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from hgemm_rt.errors import ManifestError
from hgemm_rt.declaration import ARCHS, DECLARED_FIELDS, PTX_ARCH, declaration_dict
from hgemm_rt.manifest import SCHEMA_VERSION, Manifest, sha256_file

from .catalog import Family
from .jobs import Built
from .toolchain import portable_ptx


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


def previous_entries(out: Path) -> tuple[list[dict], str | None]:
    """The kernel entries of the manifest in `out` (none if there is none), and a note when it exists
    but cannot be merged into (then this build starts the manifest afresh)."""
    path = out / "manifest.json"
    if not path.is_file():
        return [], None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
            raise ManifestError(f"{path} is not a schema {SCHEMA_VERSION} manifest")
        Manifest.from_dict(data, out, str(path))
    except (OSError, ValueError, ManifestError) as exc:
        return [], f"the previous manifest cannot be merged into ({exc}); it is replaced by this build's alone"
    return data["kernels"], None


class _Intact:
    """Whether a file the previous manifest lists is still there with its sha256 (hashed once)."""

    def __init__(self, out: Path) -> None:
        self.out, self.seen = out, {}

    def __call__(self, ref: dict) -> bool:
        rel = ref.get("cubin") or ref["path"]
        if rel not in self.seen:
            path = self.out / rel
            self.seen[rel] = sha256_file(path) if path.is_file() else None
        return self.seen[rel] == ref["sha256"]


def _declared(entry: dict) -> dict:
    return {k: entry.get(k) for k in DECLARED_FIELDS}


def _cubin_rel(family: str, arch: str) -> str:
    return f"sm_{arch}/{family}.cubin"


def _ptx_rel(family: str, arch: str) -> str:
    return f"ptx/{family}.compute_{arch}.ptx"


def merge(catalog: list[Family], built: dict[tuple[str, str], Built], failed: dict[str, list[str]],
          previous: list[dict], out: Path) -> tuple[list[dict], dict[str, "Path | bytes"], list[str]]:
    """The new manifest's kernel entries, the files to copy in (relative path -> cache file, or the bytes to
    write: the PTX without the builder's paths), and notes for the user about what was kept or dropped."""
    intact = _Intact(out)
    old_by_family: dict[str, dict[str, dict]] = {}
    for e in previous:
        old_by_family.setdefault(e["family"], {})[e["name"]] = e
    entries: list[dict] = []
    copies: dict[str, Path | bytes] = {}
    notes: list[str] = []
    gone = sorted(set(old_by_family) - {f.name for f in catalog})
    if gone:
        notes.append(f"dropped the builds of {gone}: no longer in cu/")
    for fam in catalog:
        old = old_by_family.get(fam.name, {})
        new = {spec.name: declaration_dict(spec) for spec in fam.kernels}
        same = {n for n in new if n in old and _declared(old[n]) == new[n]}
        if fam.name in failed and old and (same != set(new) or set(old) != set(new)):
            entries += old.values()
            notes.append(f"{fam.name}: kept its previous build for every arch (its declarations changed, and "
                         f"its last good cubins were built for the previous ones)")
            continue
        for spec in fam.kernels:
            prev = old.get(spec.name) if spec.name in same else None
            builds, dropped, ptx = {}, [], None
            for arch in spec.archs:
                b = built.get((fam.name, arch))
                if b is not None:
                    rel = _cubin_rel(fam.name, arch)
                    copies[rel] = b.cubin
                    syms = spec.symbols()
                    builds[arch] = {"cubin": rel, "sha256": b.sha256, "symbols": {s: b.symbols[s] for s in syms},
                                    "warnings": [w for w in b.warnings if any(s in w for s in syms)]}
                    if b.ptx is not None:  # the sm_90 build and its PTX travel together
                        text = portable_ptx(b.ptx.read_bytes(), fam.source.parent.parent)
                        copies[_ptx_rel(fam.name, arch)] = text
                        ptx = {"arch": arch, "path": _ptx_rel(fam.name, arch),
                               "sha256": hashlib.sha256(text).hexdigest()}
                elif prev is not None and arch in prev["builds"] and intact(prev["builds"][arch]) \
                        and (arch != PTX_ARCH or intact(prev["ptx"])):
                    builds[arch] = prev["builds"][arch]
                    ptx = prev["ptx"] if arch == PTX_ARCH else ptx
                elif spec.name in old and arch in old[spec.name]["builds"]:
                    dropped.append(arch)
            if dropped:
                reason = "is declared differently now" if prev is None else "lost its cubin or PTX, or it was altered"
                notes.append(f"{spec.name}: dropped its previous {', '.join('sm_' + a for a in dropped)} build "
                             f"({reason}); rebuild with --arch {','.join(dropped)}")
            if builds:
                entries.append({**new[spec.name], "builds": builds, "ptx": ptx})
    return entries, copies, notes


def referenced(entries: Iterable[dict]) -> set[str]:
    refs = set()
    for e in entries:
        refs |= {b["cubin"] for b in e["builds"].values()}
        if e["ptx"]:
            refs.add(e["ptx"]["path"])
    return refs


def publish(catalog: list[Family], built: dict[tuple[str, str], Built], failed: dict[str, list[str]], out: Path,
            nvcc_ver: str) -> tuple[dict[str, Any], list[str]]:
    """Merge this build into `out` and write its manifest; returns the manifest and the notes."""
    previous, note = previous_entries(out)
    entries, copies, notes = merge(catalog, built, failed, previous, out)
    manifest = {
        "schema": SCHEMA_VERSION,
        "nvcc": nvcc_ver,
        "build_hash": hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernels": entries,
    }
    # the runtime must be able to load what is written: a build that would write a manifest it refuses
    # is a bug here, and leaves the previous manifest in place
    Manifest.from_dict(manifest, out, "the manifest this build would write")
    for rel, src in copies.items():
        atomic_write(out / rel, src if isinstance(src, bytes) else src.read_bytes())
    atomic_write(out / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    keep = referenced(entries)
    unlisted = [p for sub in [*(out / f"sm_{a}" for a in ARCHS), out / "ptx"] for p in (sub.glob("*") if sub.is_dir()
                else []) if p.relative_to(out).as_posix() not in keep]
    if note is None:
        for p in unlisted:
            p.unlink()
    elif unlisted:  # without a readable manifest a file may be a good build this one did not redo: left in place
        notes.append(f"kept {len(unlisted)} file(s) the unreadable manifest may have listed (not in the new one): "
                     f"run `python build_kernels.py` for every family and arch to list or replace them")
    return manifest, ([note] if note else []) + notes
