"""build_kernels.py on a scratch tree: the content-hash cache, compile errors, symbol checks."""
from __future__ import annotations

import json
import shutil
import time

import pytest

import build_kernels
from conftest import ROOT
from hgemm_build.toolchain import parse_ptxas

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def tree(tmp_path):
    cu = tmp_path / "cu"
    cu.mkdir()
    shutil.copy(ROOT / "cu" / "naive.cu", cu)
    shutil.copy(ROOT / "cu" / "naive.toml", cu)
    shutil.copytree(ROOT / "cu" / "common", cu / "common")  # the shared headers naive.cu includes
    return tmp_path


def build(tree, *extra):
    return build_kernels.main(["--cu", str(tree / "cu"), "--cache", str(tree / "cache"), "--out",
                               str(tree / "art"), "--arch", "90", "-j", "2", *extra])


def test_build_then_noop_rebuild_is_cached_and_fast(tree, capsys):
    assert build(tree) == 0
    manifest = json.loads((tree / "art" / "manifest.json").read_text())
    assert {k["name"] for k in manifest["kernels"]} == {"hgemm_naive_f16", "sgemm_naive_f32"}
    assert (tree / "art" / "sm_90" / "naive.cubin").is_file()
    capsys.readouterr()
    t0 = time.perf_counter()
    assert build(tree) == 0
    assert time.perf_counter() - t0 < 2.0
    assert "0 to compile" in capsys.readouterr().err
    # a changed source is recompiled
    src = tree / "cu" / "naive.cu"
    src.write_text(src.read_text() + "\n// touched\n")
    assert build(tree) == 0
    assert "1 to compile" in capsys.readouterr().err


def test_compile_error_names_the_kernels_the_arch_and_nvcc_message(tree, capsys):
    src = tree / "cu" / "naive.cu"
    src.write_text(src.read_text().replace("acc += ", "acc +=* "))
    assert build(tree) == 1
    err = capsys.readouterr().err
    assert "compile error in naive.cu for sm_90" in err and "hgemm_naive_f16" in err and "error" in err


def test_declared_symbol_missing_from_the_cubin_fails_the_build(tree, capsys):
    toml = tree / "cu" / "naive.toml"
    toml.write_text(toml.read_text().replace('name = "sgemm_naive_f32"', 'name = "sgemm_naive_f32x"'))
    assert build(tree) == 1
    assert "declared symbol(s) not in the cubin: ['sgemm_naive_f32x']" in capsys.readouterr().err


def test_bad_declaration_is_reported_with_its_file(tree, capsys):
    toml = tree / "cu" / "naive.toml"
    toml.write_text(toml.read_text().replace('layout = "NN"', 'layout = "NT"', 1))
    assert build(tree) == 2
    assert "naive.toml: hgemm_naive_f16: layout='NT'" in capsys.readouterr().err


def test_parse_ptxas_reads_registers_spills_and_smem():
    log = """ptxas info    : Compiling entry function 'kern' for 'sm_90'
ptxas info    : Function properties for kern
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]
ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized"""
    funcs, warnings = parse_ptxas(log)
    f = funcs["kern"]
    assert (f.registers, f.spill_stores, f.spill_loads, f.stack, f.static_smem) == (168, 4, 12, 8, 16384)
    assert warnings and "C7510" in warnings[0]


def test_a_header_included_by_a_header_is_part_of_the_cache_key(tree, capsys):
    common = tree / "cu" / "common"
    (common / "inner.cuh").write_text("#pragma once\n// v1\n")
    (common / "outer.cuh").write_text('#pragma once\n#include "inner.cuh"\n')
    src = tree / "cu" / "naive.cu"
    src.write_text('#include "common/outer.cuh"\n' + src.read_text())
    assert build(tree) == 0
    capsys.readouterr()
    (common / "inner.cuh").write_text("#pragma once\n// v2\n")  # reached only through outer.cuh
    assert build(tree) == 0
    assert "1 to compile" in capsys.readouterr().err


def test_a_cached_cubin_that_no_longer_matches_its_hash_is_compiled_again(tree, capsys):
    assert build(tree) == 0
    cubin = next((tree / "cache").glob("naive-sm_90-*/naive.cubin"))
    cubin.write_bytes(cubin.read_bytes()[:-16])  # truncated in the cache
    capsys.readouterr()
    assert build(tree) == 0
    assert "1 to compile" in capsys.readouterr().err
    manifest = json.loads((tree / "art" / "manifest.json").read_text())
    published = (tree / "art" / "sm_90" / "naive.cubin").read_bytes()
    import hashlib
    assert {b["sha256"] for k in manifest["kernels"] for b in k["builds"].values()} == \
        {hashlib.sha256(published).hexdigest()}
