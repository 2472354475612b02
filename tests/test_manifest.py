"""The build manifest on the CPU: schema, contents against the catalogue, integrity, resources."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hgemm_build.catalog import load_catalog
from hgemm_rt import Manifest, ManifestError
from hgemm_rt.manifest import SCHEMA_VERSION, sha256_file
from conftest import ROOT

CATALOG = load_catalog(ROOT / "cu")
DECLARED = [k for fam in CATALOG for k in fam.kernels]


def test_every_declared_kernel_is_built_for_each_of_its_archs(manifest):
    missing = [(k.name, a) for k in DECLARED for a in k.archs
               if k.name not in manifest.kernels or a not in manifest.kernels[k.name].builds]
    assert not missing, f"declared but not in the manifest (run python build_kernels.py): {missing}"


def test_manifest_entries_carry_what_a_launch_needs(manifest):
    for spec in manifest.kernels.values():
        assert spec.layout in ("NN", "TN") and spec.grid and spec.threads > 0, spec.name
        for arch, build in spec.builds.items():
            assert set(spec.symbols()) <= set(build.symbols), (spec.name, arch)
            assert (manifest.root / build.cubin).is_file(), build.cubin


def test_cubins_match_their_sha256(manifest):
    seen = {}
    for spec in manifest.kernels.values():
        for build in spec.builds.values():
            seen[build.cubin] = build.sha256
    for path, digest in seen.items():
        assert sha256_file(manifest.root / path) == digest, path


def test_no_local_memory_spills(manifest):
    spills = [(spec.name, arch, sym, info.spill_stores, info.spill_loads)
              for spec in manifest.kernels.values() for arch, b in spec.builds.items()
              for sym, info in b.symbols.items() if info.spill_stores or info.spill_loads]
    assert not spills, f"(kernel, arch, symbol, spill stores, spill loads): {spills}"


def test_portable_ptx_kept_for_jit_on_newer_gpus(manifest):
    for spec in manifest.kernels.values():
        if "90" in spec.builds:
            assert spec.ptx is not None and (manifest.root / spec.ptx.path).is_file(), spec.name


def test_aliases_resolve(manifest):
    for alias, name in manifest.aliases.items():
        assert manifest.canonical(alias) == name


def _copy_artifacts(manifest, tmp_path):
    dst = tmp_path / "artifacts"
    shutil.copytree(manifest.root, dst)
    return dst


def test_other_schema_version_is_refused_with_rebuild_hint(manifest, tmp_path):
    root = _copy_artifacts(manifest, tmp_path)
    data = json.loads((root / "manifest.json").read_text())
    data["schema"] = SCHEMA_VERSION + 1
    (root / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="schema .*build_kernels.py"):
        Manifest.load(root)


def test_missing_manifest_says_how_to_build(tmp_path):
    with pytest.raises(ManifestError, match="no build manifest.*build_kernels.py"):
        Manifest.load(tmp_path)


def test_corrupt_manifest_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not readable JSON"):
        Manifest.load(tmp_path)


# -- declarations: one schema, no silent defaults -----------------------------------------------------

def _declaration(**change):
    """A real declaration from cu/ (its toml entry), with fields replaced or (value None) removed."""
    d = {**CATALOG[0].raw[0], **change}
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("change,match", [
    ({"requre": {"M": 128}}, "unknown field.*requre"),
    ({"align": 0}, "align must be a power of two"),
    ({"align": 24}, "align must be a power of two"),
    ({"align": True}, "align must be"),
    ({"step": "1"}, "step must be a non-negative integer"),
    ({"params": "ptr:A"}, "params must be a list of strings"),
    ({"archs": "90"}, "archs must be a list of strings"),
    ({"require": {"M": 0}}, "require must map"),
    ({"require": [128]}, "require must be a table"),
    ({"block": "256"}, "block must be 1 to 3 positive integers"),
    ({"dsmem": "BM // 0"}, "dsmem"),
    ({"dsmem": "BM *"}, "dsmem"),
    ({"dsmem": 1.5}, "dsmem must be bytes or an expression"),
    ({"aliases": ["not an identifier"]}, "aliases must be identifiers"),
    ({"tma": "A"}, "tma must be a table"),
])
def test_a_bad_declaration_is_refused_naming_the_field(change, match):
    from hgemm_rt.manifest import kernel_spec_from_dict

    with pytest.raises(ManifestError, match=match):
        kernel_spec_from_dict(_declaration(**change), with_builds=False)


def test_a_declaration_cannot_carry_manifest_only_fields():
    from hgemm_rt.manifest import kernel_spec_from_dict

    with pytest.raises(ManifestError, match="unknown field.*builds"):
        kernel_spec_from_dict(_declaration(builds={}), with_builds=False)


VALUES = [None, 0, -1, 1, 3, 16, 2**40, 1.5, True, "", "x", "f16", "NN", "BM * 2", [], [0], [1, 2], ["a"], {},
          {"M": 0}, {"stages": []}, {"stages": [2, 3]}]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(set(CATALOG[0].raw[0]) | {"bogus", "acc", "role", "default"})),
                          st.sampled_from(range(len(VALUES)))), min_size=1, max_size=3))
def test_any_mutated_declaration_is_accepted_or_refused_with_a_manifest_error(mutations):
    """Each mutation gives a valid spec or a ManifestError: never a raw traceback from deeper code."""
    from hgemm_rt.manifest import kernel_spec_from_dict

    d = dict(CATALOG[0].raw[0])
    for field, i in mutations:
        if VALUES[i] is None:
            d.pop(field, None)
        else:
            d[field] = VALUES[i]
    try:
        kernel_spec_from_dict(d, with_builds=False)
    except ManifestError:
        pass
