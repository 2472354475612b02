"""The build manifest on the CPU: schema, contents against the catalogue, integrity, resources."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

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


# Spills accepted, by symbol, with the bytes and the reason (cuobjdump -sass: never in a k-loop):
# - the stream-K kernels keep three 4-byte values of the tile schedule computed before the warpgroups split (live
#   across setmaxnreg) on the stack, stored once and loaded once per warpgroup at its start (STL before the first
#   BAR.SYNC, LDL after USETMAXREG), and since the shared fix-up stores C itself (sk_reduce_store) also the SwiGLU
#   flag (epi & kSwiGLU) and the tile's column count, stored once at kernel start and loaded once per tile (at its
#   epilogue choice) and once in the fix-up: 16 bytes stored, 36 loaded (13 STL/LDL) (H100: the stream-K shapes
#   whose tiles are not cut more than 4 ways ran as before, 1024 x 6144 x 4096 78.5 -> 77.9-78.1 us);
# - the fused kernels keep one 4-byte value of the tile schedule made before the warpgroups split on the stack since
#   their epilogue can store C through its pointer (StagedStore): stored at kernel start and at each warpgroup's start
#   (STL before the first BAR.SYNC, after USETMAXREG), loaded there and once a tile outside the k-loop: 16 bytes
#   stored, 40 loaded (H100, fp16, the plain fused kernel at 4096 x 4104 x 4096 through C's map 218.0-221.8 us before,
#   219.6-222.1 after; stream-K at 1024 x 14336 x 4096 164.0-165.0 and 164.5-166.5);
# - their tile-queue variant also keeps the schedule's row end (loaded once per warpgroup start and where a tile's row
#   end is written back, once a tile) and the column offset of the bias L1 prefetch (loaded once a tile where a column
#   bias is prefetched): 24 bytes stored, 28 loaded; since half tiles (the `half_tiles` test made once a tile before
#   the k-loop and again after it) one more word of the tile's state, loaded once a tile outside the k-loop: 28-32
#   stored, 32 loaded (H100, fp16, 256 x (512 x 512 x 64) through the queue 67.8-68.7 us before, 68.1-68.9 after).
JUSTIFIED_SPILL_BYTES = {r"matmul_gemm_wgmma_streamk_.*": 36, r"matmul_gemm_wgmma_fused_.*__queue0": 40,
                         r"matmul_gemm_wgmma_fused_.*__queue1": 32}


def test_no_local_memory_spills(manifest):
    spills = [(spec.name, arch, sym, info.spill_stores, info.spill_loads)
              for spec in manifest.kernels.values() for arch, b in spec.builds.items()
              for sym, info in b.symbols.items() if info.spill_stores or info.spill_loads]
    spills = [s for s in spills if not any(re.fullmatch(k, s[2]) and max(s[3], s[4]) <= n
                                           for k, n in JUSTIFIED_SPILL_BYTES.items())]
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
    ({"half_tiles": "yes"}, "half_tiles"),
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


# -- a structurally broken manifest is a ManifestError naming the problem and the rebuild ----------------

def _valid_manifest() -> dict:
    """A manifest as the build writes it (hgemm_build.publish.merge), for kernels that cover the shapes
    of an entry: variants (ints and strings), tensor maps, require, default, cluster, PTX."""
    from hgemm_build.jobs import Built
    from hgemm_build.publish import merge
    from hgemm_rt.declaration import SYMBOL_FIELDS

    wanted = {"naive", "sgemm_wmma", "hgemm_sm90", "matmul"}
    families = [f for f in CATALOG if f.name in wanted]
    built = {}
    for fam in families:
        for arch in fam.archs:
            symbols = {s: {**{k: 0 for k in SYMBOL_FIELDS}, "registers": 32, "dynamic_smem": spec.dsmem_bytes(c)}
                       for spec in fam.kernels if arch in spec.archs
                       for s, c in zip(spec.symbols(), spec.variant_choices())}
            ptx = Path(__file__) if arch == "90" else None  # any file stands in for the PTX (merge hashes it)
            built[(fam.name, arch)] = Built(fam.name, arch, ROOT / "x.cubin", f"{len(built):064x}", symbols,
                                            ("ptxas warning: x",), ptx)
    entries, _, _ = merge(families, built, {}, [], ROOT / "no-artifacts")
    return {"schema": SCHEMA_VERSION, "nvcc": "13.0.88", "build_hash": "0123456789abcdef",
            "created": "2025-01-01T00:00:00Z", "kernels": entries}


VALID = _valid_manifest()
LOADED = Manifest.from_dict(VALID, ROOT, "m")
# tables whose keys are data (an arch, a symbol, an axis): deleting one of their entries is a smaller
# build or another declaration, not damage, so the property below deletes only keys of fixed records
MAPS = {"builds", "symbols", "require", "variants", "default", "tma", "knobs"}
UNION_TYPES = {"knobs": ("int", "str")}  # a table whose values may be any of these types (KernelSpec.knobs)


def _union(path):
    """The other valid types of the value at `path` (a knob is an integer or a string by declaration)."""
    return UNION_TYPES.get(path[-2], ()) if len(path) > 1 else ()
OTHER_TYPES = [None, 0, 7, -1, 1.5, True, False, "", "x", "90", "BM * 2", [], [1], ["a"], {}, {"a": 1}]


def _json_type(v):
    return type(v).__name__


def _paths(node, path=()):
    """Every (path, may_delete, JSON type of the value there) in the JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        here = path + (key,)
        yield here, isinstance(node, dict) and (not path or path[-1] not in MAPS), _json_type(child)
        yield from _paths(child, here)


PATHS = list(_paths(VALID))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(PATHS))), st.sampled_from(range(len(OTHER_TYPES) + 1))),
                min_size=1, max_size=3))
def test_a_damaged_manifest_loads_the_same_or_raises_manifest_error(mutations):
    """Deleted keys and values of another type: the manifest means what it meant, or it is refused
    with a ManifestError that says how to rebuild (never a KeyError/TypeError from deeper code)."""
    import copy

    data = copy.deepcopy(VALID)
    changed = False
    for p, v in mutations:
        path, may_delete, valid_type = PATHS[p]
        parent = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            old = parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this place
        if v == len(OTHER_TYPES):
            if may_delete:
                del parent[path[-1]]
                changed = True
        elif _json_type(OTHER_TYPES[v]) not in (valid_type, _json_type(old), *_union(path)):  # never back to a valid type
            parent[path[-1]] = copy.deepcopy(OTHER_TYPES[v])
            changed = True
    try:
        loaded = Manifest.from_dict(data, ROOT, "m")
    except ManifestError as exc:
        assert "build_kernels.py" in str(exc)
        return
    assert loaded == LOADED or not changed, "a damaged manifest loaded with another meaning"


@pytest.mark.parametrize("text,match", [
    ("{not json", "is not readable JSON"),
    ("[1, 2]", "holds a JSON list, not a manifest table"),
    ('{"schema": 4, "nvcc": "13.0", "build_hash": "x", "created": "x", "kernels": {}}',
     "kernels must be a list of kernel entries, got {}"),
    ('{"schema": 4, "nvcc": "13.0", "build_hash": "x", "kernels": []}', r"the top level: missing \['created'\]"),
    ('{"schema": 4, "nvcc": 13, "build_hash": "x", "created": "x", "kernels": []}', "nvcc must be a string, got 13"),
    ('{"schema": 4, "nvcc": "13.0", "build_hash": "x", "created": "x", "kernels": ["k"]}',
     "a kernel declaration must be a table, got 'k'"),
])
def test_a_broken_manifest_file_names_the_problem_and_the_rebuild(tmp_path, text, match):
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ManifestError, match=match) as exc:
        Manifest.load(tmp_path)
    message = str(exc.value)
    assert str(tmp_path / "manifest.json") in message and "rebuild with `python build_kernels.py`" in message


@pytest.mark.parametrize("damage,match", [
    (lambda k: k.pop("dsmem"), r"sgemm_wmma_\w+: missing field\(s\) \['dsmem'\]"),
    (lambda k: k["builds"]["90"].pop("sha256"), r"sm_90 build: missing \['sha256'\]"),
    (lambda k: k["builds"].update({"90": []}), "sm_90 build must be a table, got"),
    (lambda k: k["builds"]["90"].update(symbols=[]), "symbols must be a table of symbol -> ptxas figures"),
    (lambda k: next(iter(k["builds"]["90"]["symbols"].values())).pop("registers"), r"missing \['registers'\]"),
    (lambda k: next(iter(k["builds"]["90"]["symbols"].values())).update(dynamic_smem=1),
     "exports 1 bytes of dynamic smem, its dsmem 'stages .*' gives 37888"),
    (lambda k: k["variants"].update(stages=[2, "3"]), "one type per axis"),
    (lambda k: k.update(require=None), "require must be a table"),
    (lambda k: k.update(ptx={"arch": "90"}), r"ptx: missing \['path', 'sha256'\]"),
])
def test_a_broken_kernel_entry_names_the_kernel_and_the_field(damage, match):
    import copy

    data = copy.deepcopy(VALID)
    damage(next(k for k in data["kernels"] if k["name"].startswith("sgemm_wmma")))
    with pytest.raises(ManifestError, match=match):
        Manifest.from_dict(data, ROOT, "m")


def test_every_declaration_survives_the_manifest_round_trip():
    from hgemm_rt.declaration import declaration_dict, kernel_spec_from_dict

    for spec in DECLARED:
        assert kernel_spec_from_dict(declaration_dict(spec), with_builds=False) == spec, spec.name


def test_every_built_symbol_records_the_dynamic_smem_its_kernel_exports(manifest):
    """The build checked each export against dsmem; the manifest keeps the kernel's own figure."""
    wrong = [(spec.name, arch, sym, info.dynamic_smem, spec.dsmem_bytes(choice))
             for spec in manifest.kernels.values() for arch, b in spec.builds.items()
             for sym, choice in zip(spec.symbols(), spec.variant_choices())
             for info in [b.symbols[sym]] if info.dynamic_smem != spec.dsmem_bytes(choice)]
    assert not wrong, f"{len(wrong)} symbols, e.g. (kernel, arch, symbol, exported, declared): {wrong[:5]}"


@pytest.mark.parametrize("path", ["../x.cubin", "/etc/x.cubin", "sm_90/../../x.cubin"])
def test_a_cubin_path_outside_the_artifacts_is_refused(path):
    import copy

    data = copy.deepcopy(VALID)
    build = next(iter(data["kernels"][0]["builds"].values()))
    build["cubin"] = path
    with pytest.raises(ManifestError, match="must be a path inside the artifacts directory"):
        Manifest.from_dict(data, ROOT, "m")
