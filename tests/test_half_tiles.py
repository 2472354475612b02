"""Half tiles of the fused GEMM (`half_tiles = true`, cu/CONTRACT.md; `half_tile` in cu/common/sm90_gemm.cuh): a
tile whose columns before N all lie in the first half of its BN loads half of B, runs m64n(BN/2)k16 and stores one
staging pass.

CPU: what the manifest says of it, the columns the cost model and the tile-fill rule count, and the pick it makes
for attention-like batches (N = 128). GPU: the fused kernels forced onto widths on both sides of BN/2 and BN, both
B layouts, batched, with the epilogues that take each store path, against float64, C's surroundings untouched and
two runs bitwise equal.
"""
from __future__ import annotations

import dataclasses

import pytest

from epilogue_cases import epilogue_case, forced_twice
from hgemm_rt import DeviceArray, api, planner
from hgemm_rt.problem import Gemm, Route
from hgemm_rt.roles.gemm_fused_wgmma import streamk
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
FUSED = ("matmul_gemm_wgmma_fused_f16_tn", "matmul_gemm_wgmma_fused_f16_nn", "matmul_gemm_wgmma_fused_bf16_tn",
         "matmul_gemm_wgmma_fused_bf16_nn")


# ---------------------------------------------------------------------------------------------------
# CPU
# ---------------------------------------------------------------------------------------------------

@needs_manifest
def test_the_fused_kernels_and_only_they_declare_half_tiles():
    declared = sorted(n for n, s in MANIFEST.kernels.items() if s.half_tiles)
    assert declared == sorted(FUSED)
    assert not any(s.half_tiles for s in MANIFEST.kernels.values() if streamk(s))


@needs_manifest
@pytest.mark.parametrize("N,cols", [(1, 128), (100, 128), (128, 128), (129, 256), (256, 256), (257, 384),
                                    (384, 384), (385, 512), (4096, 4096)])
def test_a_last_tile_of_half_the_width_computes_half(N, cols):
    spec = MANIFEST.kernels["matmul_gemm_wgmma_fused_f16_tn"]
    assert spec.tile[1] == 256
    assert spec.computed_cols(N) == cols
    assert spec.computed_cols(N, swiglu=True) == -(-N // 256) * 256  # SwiGLU tiles are gate and up halves
    whole = dataclasses.replace(spec, half_tiles=False)
    assert whole.computed_cols(N) == -(-N // 256) * 256


@needs_manifest
def test_the_tile_fill_rule_counts_a_half_tile_as_full():
    prob = _batched_problem(256, 128, 128, 128)
    checked = 0
    for _us, recipe in planner.ranked_recipes(prob, MANIFEST, (9, 0), 132):
        gemm = next(s for s in recipe.steps if isinstance(s, Gemm))
        if gemm.kernel in FUSED and not recipe.route.transpose:
            assert planner.tile_fill(recipe, MANIFEST) == 1.0, planner.describe(recipe)
            checked += 1
    assert checked >= 2  # the static order and the tile queue


@needs_manifest
@pytest.mark.parametrize("batch,M,N,K", [(256, 128, 128, 128), (512, 128, 128, 128), (64, 1024, 128, 1024)])
def test_attention_like_batches_pick_the_fused_kernel(batch, M, N, K):
    """H100, fp16, B as nn.Linear holds it (time_routes medians, us): 256 x (128 x 128 x 128) the fused kernel 16.0
    against m128n64 with two CTAs an SM 17.6, 512 x (128^3) 24.8 against 27.0, 64 x (1024 x 128 x 1024) 69.7 against
    78.7 (torch.matmul 14.7, 24.2, 72.2)."""
    prob = _batched_problem(batch, M, N, K)
    _us, recipe = planner.ranked_recipes(prob, MANIFEST, (9, 0), 132)[0]
    assert next(s for s in recipe.steps if isinstance(s, Gemm)).kernel.startswith("matmul_gemm_wgmma_fused_f16"), \
        planner.describe(recipe)


def _batched_problem(batch: int, M: int, N: int, K: int):
    """fp16 A (batch, M, K) @ B (batch, K, N) held as nn.Linear weights (N x K rows), C (batch, M, N)."""
    a = DeviceArray(1 << 20, (batch, M, K), "f16")  # never allocated: the planner only reads shapes and strides
    b = DeviceArray(1 << 40, (batch, K, N), "f16", (N * K * 2, 2, K * 2))
    c = DeviceArray(1 << 41, (batch, M, N), "f16")
    return api.problem_of(api.validate_call(a, b, c, 1.0, 0.0, None, "auto", None, None, None, 1.0))


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

CASES = [  # dtype, M, N, K, batch, B order, bias, activation, alpha, beta
    ("f16", 200, 128, 120, (), "row", None, None, 1.0, 0.0),  # the plain store, one tile
    ("f16", 130, 100, 200, (3,), "col", None, None, 1.0, 0.0),  # batched over rank-4 maps
    ("bf16", 64, 129, 64, (), "row", "col", None, 1.0, 0.0),  # one column past the half: a whole tile
    ("f16", 300, 384, 136, (), "col", "col", None, 1.0, 0.0),  # bias-only passes, the last tile half
    ("f16", 77, 257, 70, (2,), "row", "col", "relu", 0.5, 1.5),  # the general epilogue with C_old
    ("f16", 131, 77, 261, (), "row", "row", "relu", 0.7, 1.5),  # a row bias (unbatched only)
    ("bf16", 150, 300, 96, (), "col", "col", "gelu", 1.0, 1.0),
    ("f16", 9, 64, 1000, (), "row", None, "silu", 1.0, 0.0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,batch,b_order,bias,act,alpha,beta", CASES)
def test_fused_kernels_on_half_tiles_match_float64(dtype, M, N, K, batch, b_order, bias, act, alpha, beta, rng):
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    case = epilogue_case(rng, dtype, M, N, K, batch=batch, b_order=b_order, bias=bias, act=act, alpha=alpha,
                         beta=beta)
    tested, bad = 0, []
    for name, spec in manifest.kernels.items():
        if not spec.half_tiles or spec.dtype != dtype:
            continue
        for order in ((), (("queue", 1),)):
            plan = planner.recipe_for(Route(name, False, order), case.prob, manifest)
            if plan is None:  # (the kernel's B layout is not this case's)
                continue
            tested += 1
            bad += forced_twice(case, plan, 0, workspace=None)
    assert tested >= 2 and not bad, "\n".join(bad)
