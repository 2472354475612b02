"""The declaration's shape: one truth per fact in cu/*.toml, the instantiation lists generated from it, and
the declared symbols equal to what each cubin exports (where a build is at hand)."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import ROOT
from hgemm_build.catalog import expand_entries, family_options, load_catalog, load_family
from hgemm_build.instances import include_line
from hgemm_build.toolchain import find_tool, sass_by_function
from hgemm_rt import ManifestError
from hgemm_rt.declaration import RATED_ROLES
from hgemm_rt.manifest import Manifest, default_artifacts_dir

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

CATALOG = load_catalog(ROOT / "cu")
TOMLS = sorted((ROOT / "cu").glob("*.toml"))
GENERATED = [f for f in CATALOG if f.instances_header() is not None]
# a macro call at the top level whose first argument is a kernel name: a hand-written instantiation list
_HAND_LINE = re.compile(r"^\s*[A-Z][A-Z0-9_]*\(\s*(\w+)", re.M)


@pytest.mark.parametrize("toml", TOMLS, ids=lambda p: p.stem)
def test_no_list_or_table_is_written_twice_among_the_kernels_of_a_family(toml):
    data = tomllib.loads(toml.read_text())
    seen: dict[tuple[str, str], str] = {}
    for entry in data["kernel"]:
        for key, value in entry.items():
            if key == "use" or not isinstance(value, (list, dict)):
                continue
            k = (key, json.dumps(value))
            assert k not in seen, (f"{toml.name}: {entry['name']} repeats {key} = {value} of {seen[k]}: move it to "
                                   f"[defaults] or a [sets.<name>] table")
            seen[k] = entry["name"]


# the families whose kernels are written out as functions (the first rungs of the teaching ladders)
HAND_WRITTEN = {"naive", "hgemm_mma_naive", "hgemm_cuda_sliced_k"}


def test_every_family_but_the_hand_written_ones_is_generated():
    assert {f.name for f in CATALOG} - {f.name for f in GENERATED} == HAND_WRITTEN


@pytest.mark.parametrize("fam", GENERATED, ids=lambda f: f.name)
def test_every_symbol_of_a_generated_family_comes_from_its_declaration(fam):
    source = fam.source.read_text()
    assert source.rstrip().endswith(include_line(fam.name))
    names = {k.name for k in fam.kernels} | {s for k in fam.kernels for s in k.symbols()}
    hand = [m.group(1) for m in _HAND_LINE.finditer(source) if m.group(1) in names]
    assert not hand, f"{fam.source.name} still lists {hand} by hand: declare their instance in {fam.name}.toml"
    header = fam.instances_header()
    generated = {m.group(1) for m in _HAND_LINE.finditer(header)}
    # kernels written out as functions (not behind a macro's NAME parameter)
    written = {n for n in re.findall(r'extern "C" __global__ void(?:\s+__launch_bounds__\([^)]*\))?\s+(\w+)\s*\(',
                                     source) if n in names}
    assert generated | written == {s for k in fam.kernels for s in k.symbols()}


# families that compile kernels their toml does not declare for an arch: matmul.cu's two splits (written out by hand,
# declared for sm_90 only, compiled for every arch of the family)
UNDECLARED_EXTRAS = {"matmul"}


def _manifest():
    try:
        return Manifest.load(default_artifacts_dir())
    except ManifestError:
        return None


@pytest.mark.parametrize("fam", CATALOG, ids=lambda f: f.name)
def test_each_familys_declared_symbols_are_the_kernels_its_cubins_export(fam):
    cuobjdump, manifest = find_tool("cuobjdump"), _manifest()
    if cuobjdump is None or manifest is None:
        pytest.skip("needs a build (HGEMM_ARTIFACTS) and cuobjdump (the build extra)")
    for arch in fam.archs:
        declared = {s for k in fam.kernels if arch in k.archs for s in k.symbols()}
        spec = next(k for k in fam.kernels if arch in k.archs)
        built = manifest.kernels.get(spec.name)
        if built is None or arch not in built.builds:
            continue
        exported = set(sass_by_function(manifest.root / built.builds[arch].cubin, cuobjdump))
        assert declared <= exported, (fam.name, arch, sorted(declared - exported))
        extra = exported - declared  # compiled but undeclared: a hand list that instantiates more than the toml says
        if fam.name not in UNDECLARED_EXTRAS:
            assert not extra, (fam.name, arch, sorted(extra))


def test_rated_roles_carry_their_rate_and_where_it_was_measured():
    rated = [k for f in CATALOG for k in f.kernels if k.role in RATED_ROLES]
    assert rated and all(k.rate_tflops and k.rate_source.startswith("docs/") for k in rated)


def test_catalogue_comes_from_the_role_and_helpers_have_no_step():
    for k in (k for f in CATALOG for k in f.kernels):
        assert k.catalogue == (k.role == "gemm") == (k.ladder != "matmul")
        assert (k.step is None) == (not k.catalogue)


# -- the loader's rules, on scratch families -------------------------------------------------------------

def _family(tmp_path, toml: str, cu: str = "// kernels\n"):
    (tmp_path / "f.cu").write_text(cu)
    (tmp_path / "f.toml").write_text(toml)
    return load_family(tmp_path / "f.toml")


KERNEL = 'layout = "NN"\ndtype = "f16"\nout = "f16"\nblock = [32]\ntile = [16, 16, 16]\ngrid = "tiles"\n'


def test_defaults_then_sets_in_order_then_the_entry_knobs_merged_by_name():
    data = {"defaults": {"align": 4, "knobs": {"a": 1, "b": 1}}, "sets": {"s": {"align": 8, "knobs": {"b": 2}}},
            "kernel": [{"name": "k", "use": "s", "knobs": {"c": 3}}, {"name": "j", "align": 2}]}
    k, j = expand_entries(data, "x.toml")
    assert k == {"name": "k", "align": 8, "knobs": {"a": 1, "b": 2, "c": 3}}
    assert j == {"name": "j", "align": 2, "knobs": {"a": 1, "b": 1}}


@pytest.mark.parametrize("data, match", [
    ({"kernel": [{"name": "k", "use": "nope"}]}, r"use names unknown set\(s\) \['nope'\]"),
    ({"defaults": {"name": "x"}, "kernel": []}, "cannot set the kernel name"),
    ({"kernels": []}, r"unknown top-level table\(s\) \['kernels'\]"),
])
def test_a_bad_shared_table_is_refused(data, match):
    with pytest.raises(ManifestError, match=match):
        expand_entries(data, "x.toml")


@pytest.mark.parametrize("table, match", [
    ({"cutlas": True}, r"unknown \[family\] key\(s\) \['cutlas'\]"),
    ({"cutlass": "no"}, "cutlass must be true or false, got 'no'"),
    ({"extra_flags": "-O2"}, "extra_flags must be a list of strings, got '-O2'"),
])
def test_the_family_table_is_validated(table, match):
    with pytest.raises(ManifestError, match=match):
        family_options(table, "x.toml")


def test_an_instance_needing_an_undeclared_knob_is_a_catalogue_error(tmp_path):
    toml = f'[[kernel]]\nname = "k"\nladder = "cuda"\n{KERNEL}instance = "M({{symbol}}, {{stages}})"\n'
    with pytest.raises(ManifestError, match=r"k: instance field \{stages\} cannot be filled .*declare the knob"):
        _family(tmp_path, toml, include_line("f") + "\n")
    fam = _family(tmp_path, toml.replace("instance", "knobs = { stages = 3 }\ninstance"), include_line("f") + "\n")
    assert fam.instances_header().splitlines()[-1] == "M(k, 3)"


def test_the_source_includes_the_generated_list_exactly_when_there_is_one(tmp_path):
    toml = f'[[kernel]]\nname = "k"\nladder = "cuda"\n{KERNEL}'
    with pytest.raises(ManifestError, match="no kernel of f.toml declares an instance"):
        _family(tmp_path, toml, include_line("f") + "\n")
    with pytest.raises(ManifestError, match="does not end with"):
        _family(tmp_path, toml + 'instance = "M({symbol})"\n')


def test_a_helper_kernel_declaring_a_step_is_refused(tmp_path):
    with pytest.raises(ManifestError, match="a helper kernel .* has no step"):
        _family(tmp_path, f'[[kernel]]\nname = "k"\nrole = "copy"\nstep = 3\n{KERNEL}')


def test_a_gemm_strided_wgmma_kernel_without_a_rate_is_refused(tmp_path):
    toml = f'[[kernel]]\nname = "k"\nrole = "gemm_strided_wgmma"\n{KERNEL}'
    with pytest.raises(ManifestError, match="declare rate_tflops"):
        _family(tmp_path, toml)
    with pytest.raises(ManifestError, match="rate_tflops 100.0 needs a rate_source"):
        _family(tmp_path, toml + "rate_tflops = 100.0\n")


@pytest.mark.parametrize("expr, match", [("(" * 60 + "1" + ")" * 60, "nested deeper than 50"),
                                         ("1" * 5000, "5000 characters"), ("9" * 45, "more than 40 digits")])
def test_a_pathological_dsmem_expression_is_refused_clearly(tmp_path, expr, match):
    with pytest.raises(ManifestError, match=match):
        _family(tmp_path, f'[[kernel]]\nname = "k"\nladder = "cuda"\n{KERNEL}dsmem = "{expr}"\n')
