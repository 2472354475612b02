"""Choosing the cubin for a compute capability, and integrity checks before loading (CPU only)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hgemm_rt import ManifestError, NotBuiltForDeviceError
from hgemm_rt.manifest import Manifest, kernel_spec_from_dict

SYMBOLS = {"k": {"registers": 32, "spill_stores": 0, "spill_loads": 0, "stack": 0, "static_smem": 0}}


def spec_with(archs_built, archs=("80", "86", "89", "90"), ptx_arch=None):
    d = {"name": "k", "family": "f", "ladder": "cuda", "layout": "NN", "dtype": "f16", "out": "f16",
         "block": [128], "tile": [64, 64, 32], "grid": "tiles", "archs": list(archs),
         "builds": {a: {"cubin": f"sm_{a}/f.cubin", "sha256": "0", "symbols": SYMBOLS} for a in archs_built},
         "ptx": {"arch": ptx_arch, "path": f"ptx/f.compute_{ptx_arch}.ptx", "sha256": "0"} if ptx_arch else None}
    return kernel_spec_from_dict(d)


M = Manifest(Path("/art"), {}, {}, "h", "13.0")


@pytest.mark.parametrize("built,cc,want", [
    (("80", "86", "89", "90"), (9, 0), "90"),
    (("80", "86", "89", "90"), (8, 9), "89"),
    (("80", "86"), (8, 9), "86"),  # same major, lower minor runs
    (("80",), (8, 6), "80"),
    (("80", "90", "90a"), (9, 0), "90a"),  # the arch-specific build wins on its own GPU
])
def test_picks_the_best_cubin(built, cc, want):
    sel = M.select(spec_with(built, archs=built), cc)
    assert (sel.arch, sel.is_ptx) == (want, False)
    assert sel.path == Path(f"/art/sm_{want}/f.cubin")


def test_newer_gpu_falls_back_to_ptx_jit():
    sel = M.select(spec_with(("80", "90"), ptx_arch="90"), (12, 0))
    assert sel.is_ptx and sel.arch == "90"


def test_sm90_cubin_is_not_offered_to_an_ampere_gpu():
    with pytest.raises(NotBuiltForDeviceError, match=r"sm_86.*build_kernels.py --arch 86"):
        M.select(spec_with(("90",)), (8, 6))


def test_hopper_only_kernel_says_it_supports_only_sm90a():
    with pytest.raises(NotBuiltForDeviceError, match="supports only sm_90a"):
        M.select(spec_with(("90a",), archs=("90a",)), (8, 9))


def test_altered_or_truncated_cubin_is_refused(tmp_path):
    (tmp_path / "sm_90").mkdir()
    cubin = tmp_path / "sm_90" / "f.cubin"
    cubin.write_bytes(b"\x7fELF original")
    import hashlib

    digest = hashlib.sha256(cubin.read_bytes()).hexdigest()
    spec = spec_with(("90",))
    man = Manifest(tmp_path, {"k": spec}, {}, "h", "13.0")
    sel = man.select(spec, (9, 0))
    sel = type(sel)(sel.path.parent.parent.parent / tmp_path / "sm_90" / "f.cubin", digest, "90", False)
    assert man.read_verified(spec, sel) == b"\x7fELF original"
    cubin.write_bytes(b"\x7fELF orig")  # truncated
    with pytest.raises(ManifestError, match="does not match the sha256.*build_kernels.py"):
        man.read_verified(spec, sel)
    cubin.unlink()
    with pytest.raises(ManifestError, match="missing"):
        man.read_verified(spec, sel)


def test_declaration_errors_name_the_kernel():
    with pytest.raises(ManifestError, match="k: layout='XY'"):
        kernel_spec_from_dict({"name": "k", "family": "f", "ladder": "cuda", "layout": "XY", "dtype": "f16",
                               "out": "f16", "block": [1], "tile": [1, 1, 1], "grid": "tiles"})
    with pytest.raises(ManifestError, match="unknown name 'stagez'"):
        kernel_spec_from_dict({"name": "k", "family": "f", "ladder": "cuda", "layout": "NN", "dtype": "f16",
                               "out": "f16", "block": [1], "tile": [1, 1, 1], "grid": "tiles",
                               "dsmem": "stagez * 2", "variants": {"stages": [2]}})
