"""The escape hatch on the CPU: get_kernel(name).binary(cc=...) describes a compiled variant as another
launcher (CuPy's RawModule) needs it. The CuPy launch itself: tests/test_gpu_dlpack.py."""
from __future__ import annotations

import hashlib

import pytest

import hgemm_rt as hg
from hgemm_rt import NotBuiltForDeviceError, ValidationError

TN = "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages_dsmem_tn_swizzle_x4"


def test_binary_of_a_variant_names_file_symbol_and_launch_geometry():
    kernel = hg.get_kernel(TN)
    spec = kernel.spec
    b = kernel.binary(cc=(8, 9), stages=3)
    assert b.arch == "80" and not b.is_ptx  # sm_89 runs the sm_80 cubin
    assert b.path == kernel.manifest.root / spec.builds["80"].cubin
    assert b.symbol in spec.builds["80"].symbols and "stages3" in b.symbol
    assert hashlib.sha256(b.read()).hexdigest() == b.sha256 == spec.builds["80"].sha256
    assert b.dsmem == spec.dsmem_bytes(spec.resolve_variant({"stages": 3})) and b.needs_smem_attribute
    assert (b.block, b.tile, b.params, b.grid) == (spec.block, spec.tile, spec.params, "tiles+swizzle")
    BM, BN, _ = spec.tile
    assert b.grid_for(4096, 2048, 1024) == (2048 // BN, 4096 // BM, 1)
    # swizzled: z = N / stride column bands, each N / BN / z tiles wide
    assert b.grid_for(4096, 4096, 1024, swizzle_stride=1024) == (4096 // BN // 4, 4096 // BM, 4)


def test_binary_defaults_follow_the_launch_defaults_and_refuse_unknown_options():
    kernel = hg.get_kernel(TN)
    default = kernel.spec.resolve_variant({})
    assert kernel.binary(cc=(9, 0)).symbol.endswith("".join(f"__{k}{v}" for k, v in default.items()))
    with pytest.raises(ValidationError, match="unknown option"):
        kernel.binary(cc=(9, 0), stagez=3)
    with pytest.raises(ValidationError, match="is not built"):
        kernel.binary(cc=(9, 0), stages=7)


def test_binary_for_a_newer_gpu_is_the_ptx_and_for_an_unbuilt_one_says_so():
    assert hg.get_kernel("hgemm_naive_f16").binary(cc=(12, 0)).is_ptx
    with pytest.raises(NotBuiltForDeviceError, match="sm_89"):
        hg.get_kernel("hgemm_sm90_wgmma_tma_ws_persistent_tn").binary(cc=(8, 9))


def test_a_persistent_kernel_needs_the_resident_block_count():
    b = hg.get_kernel("hgemm_sm90_wgmma_tma_ws_persistent_tn").binary(cc=(9, 0))
    assert b.arch == "90a" and b.grid == "persistent" and b.params[0] == "tmap:A"
    with pytest.raises(ValidationError, match="pass resident_blocks="):
        b.grid_for(4096, 4096, 4096)
    assert b.grid_for(4096, 4096, 4096, resident_blocks=132) == (132, 1, 1)
    assert b.grid_for(128, 256, 64, resident_blocks=132) == (1, 1, 1)  # never more blocks than tiles
