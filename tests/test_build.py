"""The build (hgemm_build.cli, run as build_kernels.py) on a scratch checkout: the content-hash cache,
compile errors, symbol and shared-memory checks, publishing per family and architecture, Ctrl-C."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

import build_kernels
from conftest import ROOT
from hgemm_build import cli
from hgemm_build.cubin import dsmem_exports
from hgemm_build.toolchain import parse_ptxas
from hgemm_rt import ManifestError
from hgemm_rt.manifest import Manifest

pytestmark = pytest.mark.filterwarnings("ignore")


def make_tree(tmp_path, *families):
    """A scratch checkout holding these families of cu/ and the shared headers."""
    cu = tmp_path / "cu"
    cu.mkdir()
    for fam in families:
        shutil.copy(ROOT / "cu" / f"{fam}.cu", cu)
        shutil.copy(ROOT / "cu" / f"{fam}.toml", cu)
    shutil.copytree(ROOT / "cu" / "common", cu / "common")
    return tmp_path


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path, "naive")


def build(tree, *extra, arch="90"):
    return build_kernels.main(["--src", str(tree), "--arch", arch, "-j", "2", *extra])


def manifest_of(tree):
    return json.loads((tree / "artifacts" / "manifest.json").read_text())


def builds_of(tree):
    """{(kernel, arch): sha256} of the manifest, after checking that the runtime loads it and that
    every cubin it lists is there with that sha256."""
    m = Manifest.load(tree / "artifacts")
    for spec in m.kernels.values():
        for b in spec.builds.values():
            assert hashlib.sha256((m.root / b.cubin).read_bytes()).hexdigest() == b.sha256, b.cubin
    return {(k, a): b.sha256 for k, spec in m.kernels.items() for a, b in spec.builds.items()}


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_build_then_noop_rebuild_is_cached_and_fast(tree, capsys):
    assert build(tree) == 0
    manifest = manifest_of(tree)
    assert {k["name"] for k in manifest["kernels"]} == {"hgemm_naive_f16", "sgemm_naive_f32"}
    assert (tree / "artifacts" / "sm_90" / "naive.cubin").is_file()
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
    edit(tree / "cu" / "naive.cu", "acc += ", "acc +=* ")
    assert build(tree) == 1
    err = capsys.readouterr().err
    assert "compile error in naive.cu for sm_90" in err and "hgemm_naive_f16" in err and "error" in err
    assert "1 of 1 family builds failed: naive (sm_90)" in err


def test_declared_symbol_missing_from_the_cubin_fails_the_build(tree, capsys):
    edit(tree / "cu" / "naive.toml", 'name = "sgemm_naive_f32"', 'name = "sgemm_naive_f32x"')
    assert build(tree) == 1
    assert "declared symbol(s) not in the cubin: ['sgemm_naive_f32x']" in capsys.readouterr().err


def test_a_declaration_is_checked_against_a_cached_build_too(tree, capsys):
    """The cache key covers the source, not the toml: a cached cubin is checked on every run."""
    assert build(tree) == 0
    edit(tree / "cu" / "naive.toml", 'name = "sgemm_naive_f32"', 'name = "sgemm_naive_f32x"')
    capsys.readouterr()
    assert build(tree) == 1
    err = capsys.readouterr().err
    assert "0 to compile" in err and "declared symbol(s) not in the cubin: ['sgemm_naive_f32x']" in err


def test_bad_declaration_is_reported_with_its_file(tree, capsys):
    edit(tree / "cu" / "naive.toml", 'layout = "NN"', 'layout = "NT"')
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
    cubin = next((tree / "build" / "cache").glob("naive-sm_90-*/naive.cubin"))
    cubin.write_bytes(cubin.read_bytes()[:-16])  # truncated in the cache
    capsys.readouterr()
    assert build(tree) == 0
    assert "1 to compile" in capsys.readouterr().err
    published = (tree / "artifacts" / "sm_90" / "naive.cubin").read_bytes()
    assert set(builds_of(tree).values()) == {hashlib.sha256(published).hexdigest()}


# -- publishing per family and architecture ------------------------------------------------------------

def test_a_failed_compile_keeps_that_archs_last_good_cubin_and_publishes_the_others(tree, capsys):
    assert build(tree, arch="89,90") == 0
    before = builds_of(tree)
    # broken for sm_90 only; sm_89 compiles a changed source
    edit(tree / "cu" / "naive.cu", "#include", "#if __CUDA_ARCH__ == 900\n#error broken for sm_90\n#endif\n#include")
    capsys.readouterr()
    assert build(tree, arch="89,90") == 1
    err = capsys.readouterr().err
    assert "compile error in naive.cu for sm_90" in err and "broken for sm_90" in err
    assert "1 of 2 family builds failed: naive (sm_90)" in err
    after = builds_of(tree)  # loads, and every listed cubin matches its sha256
    assert set(after) == set(before)
    assert all(after[k, "90"] == before[k, "90"] for k in ("hgemm_naive_f16", "sgemm_naive_f32"))
    assert all(after[k, "89"] != before[k, "89"] for k in ("hgemm_naive_f16", "sgemm_naive_f32"))


def test_a_failed_family_whose_declarations_changed_keeps_its_previous_entries(tree, capsys):
    assert build(tree) == 0
    before = manifest_of(tree)["kernels"]
    edit(tree / "cu" / "naive.toml", 'technique = "', 'technique = "changed: ')
    edit(tree / "cu" / "naive.cu", "acc += ", "acc +=* ")
    assert build(tree) == 1
    assert manifest_of(tree)["kernels"] == before
    assert "naive: kept its previous build for every arch" in capsys.readouterr().err
    builds_of(tree)


def test_a_partial_build_keeps_the_other_archs(tree):
    assert build(tree, arch="89,90") == 0
    before = builds_of(tree)
    shutil.rmtree(tree / "build" / "cache")
    assert build(tree, arch="89") == 0
    after = builds_of(tree)
    assert set(after) == set(before) and all(after[k] == before[k] for k in after if k[1] == "90")
    m = Manifest.load(tree / "artifacts")
    assert all((m.root / s.ptx.path).is_file() for s in m.kernels.values())  # the sm_90 build's PTX stays


def test_a_kernels_pattern_build_keeps_the_other_families(tmp_path):
    tree = make_tree(tmp_path, "naive", "hgemm_cuda_sliced_k")
    assert build(tree) == 0
    before = builds_of(tree)
    shutil.rmtree(tree / "build" / "cache")
    assert build(tree, "--kernels", "hgemm_naive*") == 0
    assert builds_of(tree) == before
    assert (tree / "artifacts" / "sm_90" / "hgemm_cuda_sliced_k.cubin").is_file()


def test_a_family_removed_from_cu_is_dropped_with_its_files(tmp_path, capsys):
    tree = make_tree(tmp_path, "naive", "hgemm_cuda_sliced_k")
    assert build(tree) == 0
    (tree / "cu" / "hgemm_cuda_sliced_k.toml").unlink()
    assert build(tree) == 0
    assert {k for k, _ in builds_of(tree)} == {"hgemm_naive_f16", "sgemm_naive_f32"}
    assert not (tree / "artifacts" / "sm_90" / "hgemm_cuda_sliced_k.cubin").exists()
    assert "dropped the builds of ['hgemm_cuda_sliced_k']" in capsys.readouterr().err


def test_an_unreadable_previous_manifest_is_replaced(tree, capsys):
    (tree / "artifacts").mkdir()
    (tree / "artifacts" / "manifest.json").write_text('{"schema": 1, "kernels": "x"}')
    assert build(tree) == 0
    assert "previous manifest cannot be merged into" in capsys.readouterr().err
    assert len(builds_of(tree)) == 2


# -- one truth for dynamic shared memory ----------------------------------------------------------------

def test_the_dsmem_each_kernel_exports_is_the_declared_one_and_reaches_the_manifest(tmp_path):
    tree = make_tree(tmp_path, "sgemm_wmma")
    assert build(tree) == 0
    exports = dsmem_exports((tree / "artifacts" / "sm_90" / "sgemm_wmma.cubin").read_bytes())
    spec = Manifest.load(tree / "artifacts").kernels["sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages"]
    want = {s: spec.dsmem_bytes(c) for s, c in zip(spec.symbols(), spec.variant_choices())}
    assert exports == want == {s: i.dynamic_smem for s, i in spec.builds["90"].symbols.items()}
    assert set(want.values()) == {37888, 56832}


def test_a_wrong_dsmem_declaration_is_refused_naming_kernel_declared_and_actual_bytes(tmp_path, capsys):
    tree = make_tree(tmp_path, "sgemm_wmma")
    assert build(tree) == 0
    before = manifest_of(tree)["kernels"]
    edit(tree / "cu" / "sgemm_wmma.toml", "BK * (BN + 8)) * 4", "BK * (BN + 4)) * 4")
    capsys.readouterr()
    assert build(tree) == 1
    err = capsys.readouterr().err
    assert ("sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages: sgemm_wmma.toml declares dsmem "
            "'stages * (BM * (BK + 4) + BK * (BN + 4)) * 4' = 37376 bytes for "
            "sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages__stages2, but sgemm_wmma.cu computes 37888 bytes") in err
    assert "1 of 1 family builds failed: sgemm_wmma (sm_90)" in err
    assert manifest_of(tree)["kernels"] == before  # the last good build stays published


def test_a_declared_dsmem_without_an_export_is_refused(tree, capsys):
    edit(tree / "cu" / "naive.toml", 'name = "hgemm_naive_f16"', 'name = "hgemm_naive_f16"\ndsmem = 1024')
    assert build(tree) == 1
    assert "exports no hg_dsmem__hgemm_naive_f16: add HG_EXPORT_DSMEM(hgemm_naive_f16" in capsys.readouterr().err


# -- Ctrl-C ------------------------------------------------------------------------------------------------

FAKE_NVCC = """#!/bin/sh
# answers --version like nvcc; a compile records its pid and its child's, then waits on the child
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
sleep 60 &
echo "$$ $!" > "$FAKE_NVCC_PIDS/$$"
wait
"""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead; only its parent has not collected it yet
        return open(f"/proc/{pid}/stat").read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _build_on_a_fake_nvcc(tmp_path):
    """A build of two families whose (fake) nvcc processes are both running: (tree, build process, their pids)."""
    tree = make_tree(tmp_path, "naive", "hgemm_cuda_sliced_k")
    fake, pids = tmp_path / "nvcc", tmp_path / "pids"
    fake.write_text(FAKE_NVCC)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    pids.mkdir()
    # (SIGINT as a foreground terminal delivers it: a suite started in the background, `pytest &` from a script,
    # inherits SIGINT ignored, and so would the build)
    proc = subprocess.Popen([sys.executable, str(ROOT / "build_kernels.py"), "--src", str(tree), "--nvcc", str(fake),
                             "--arch", "90", "-j", "2"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FAKE_NVCC_PIDS": str(pids)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = [int(p) for f in pids.iterdir() for p in f.read_text().split()]
    assert len(started) == 4, "the fake nvcc did not start twice"
    return tree, proc, started


def test_ctrl_c_stops_within_2_s_with_one_line_kills_nvcc_and_leaves_artifacts_alone(tmp_path):
    art = tmp_path / "artifacts"  # the previous build, in the tree the helper makes
    art.mkdir()
    (art / "manifest.json").write_text("the previous build\n")
    tree, proc, started = _build_on_a_fake_nvcc(tmp_path)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)  # to the build only: it must stop the compilers itself
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - t0 < 2.0
    assert proc.returncode == 130
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[0].startswith("nvcc 13.0.88") and len(lines) == 2, err
    assert lines[1] == ("build_kernels.py: interrupted: stopped 2 nvcc process(es) and published nothing "
                        "(artifacts unchanged); the 0 compile(s) that finished are cached")
    time.sleep(0.2)
    assert not [p for p in started if _alive(p)]
    assert (art / "manifest.json").read_text() == "the previous build\n" and os.listdir(art) == ["manifest.json"]
    assert not [p for p in (tree / "build" / "cache").iterdir()]  # no half-written cache entry


def test_ctrl_c_while_publishing_waits_until_the_artifacts_are_complete(tree, monkeypatch, capsys):
    import hgemm_build.publish as publish_mod

    real = publish_mod.atomic_write

    def interrupted_write(path, data):
        if path.name == "naive.cubin":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C between the cubin and the manifest
        real(path, data)

    monkeypatch.setattr(publish_mod, "atomic_write", interrupted_write)
    assert build(tree) == 130
    assert "interrupted after the build was published" in capsys.readouterr().err
    assert len(builds_of(tree)) == 2


# -- where the build finds its sources -------------------------------------------------------------------

def test_without_a_checkout_the_build_says_how_to_point_at_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "site-packages" / "hgemm_build" / "cli.py"))
    assert cli.main(["--list"]) == 2
    err = capsys.readouterr().err
    assert "build_kernels.py: no kernel sources at" in err and "installed without its checkout" in err and "--src" in err
    assert cli.main(["--src", str(tmp_path), "--list"]) == 2
    assert "there is no cu/" in capsys.readouterr().err


def test_build_kernels_py_is_a_thin_wrapper_over_the_package_entry_point():
    out = subprocess.run([sys.executable, str(ROOT / "build_kernels.py"), "--list"], capture_output=True, text=True,
                         cwd="/")
    assert out.returncode == 0 and "hgemm_naive_f16" in out.stdout
    assert build_kernels.main is cli.main


def test_the_previous_manifest_must_load_to_be_merged_into(tree):
    assert build(tree) == 0
    path = tree / "artifacts" / "manifest.json"
    data = json.loads(path.read_text())
    data["kernels"][0]["builds"]["90"]["symbols"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError):
        Manifest.load(tree / "artifacts")
    assert build(tree) == 0  # replaced, not merged
    assert len(builds_of(tree)) == 2


# -- nothing lost on interrupted or partial work -------------------------------------------------------------

def test_a_partial_build_over_a_damaged_manifest_keeps_the_other_families(tmp_path, capsys):
    tree = make_tree(tmp_path, "naive", "hgemm_cuda_sliced_k")
    assert build(tree) == 0
    before = builds_of(tree)
    (tree / "artifacts" / "manifest.json").write_text("{ damaged")
    assert build(tree, "--kernels", "hgemm_naive_f16") == 0
    assert builds_of(tree) == before  # the other family's cached build is published again, not forgotten
    assert (tree / "artifacts" / "sm_90" / "hgemm_cuda_sliced_k.cubin").is_file()
    assert "previous manifest cannot be merged into" in capsys.readouterr().err


def test_an_arch_that_no_chosen_family_declares_is_an_error_not_an_empty_build(tree, capsys):
    assert build(tree, arch="90a") == 2
    assert "nothing to build: naive declare(s) sm_80, sm_86, sm_89, sm_90, none of --arch 90a" in capsys.readouterr().err
    assert not (tree / "artifacts").exists()


def test_sigterm_stops_the_compilers_and_cleans_up_as_ctrl_c_does(tmp_path):
    tree, proc, started = _build_on_a_fake_nvcc(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "interrupted: stopped 2 nvcc process(es) and published nothing" in err
    time.sleep(0.2)
    assert not [p for p in started if _alive(p)]  # nvcc and its children ran in their own sessions
    assert not [p for p in (tree / "build" / "cache").iterdir()]  # the temp directories are gone
    assert not (tree / "artifacts").exists()


def test_the_published_ptx_names_no_absolute_path_and_matches_its_sha256(tree):
    assert build(tree) == 0
    entry = next(e for e in manifest_of(tree)["kernels"] if e["ptx"])
    data = (tree / "artifacts" / entry["ptx"]["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["ptx"]["sha256"]
    files = [line for line in data.decode().splitlines() if line.strip().startswith(".file")]
    assert files and not [f for f in files if '"/' in f], files
    assert '"cu/naive.cu"' in files[0]
