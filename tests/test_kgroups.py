"""K groups (cu/matmul_sm90.cu, `i32:k_groups`): clusters of one tile along grid.z, each on its own share of K, the
last to finish summing every group's partial from a workspace; deferred, each group's sums to a plane that a second
kernel (matmul_kgroups_sum) adds. The planner's offers, recipes and workspace (CPU); every matmul_sm90 kernel with K
groups, both ways, against float64, repeated bitwise, the workspace's counts left zero (GPU)."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from hgemm_rt import planner, problem, tuning
from hgemm_rt.costmodel import CostModel
from hgemm_rt.executor import step_scalars
from hgemm_rt.problem import Gemm, GroupSum, Route
from hgemm_rt.roles.gemm_strided_wgmma import (K_GROUPS_DEFERRED, KG_MAX, KG_MIN_BLOCKS, KG_SUM_MIN_BLOCKS,
                                               KG_TILE_COLS, k_groups_offered, k_groups_work_bytes, k_sum_work_bytes)
from hgemm_rt.roles.tma_gemm import K_GROUPS
from epilogue_cases import epilogue_case, forced_twice
from kernel_cases import ROOT, load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
KG = K_GROUPS
KS = planner.K_SUM


def _problem(M, N, K, dtype="f16", batch=()):  # B as nn.Linear holds it (N x K row-major), which the tn kernels read
    views = [problem.View.make("A", M, K, K, 1, 256), problem.View.make("B", K, N, 1, K, 256),
             problem.View.make("C", M, N, N, 1, 256)]
    if batch:
        views = [problem.View.make(v.base, v.rows, v.cols, v.rs, v.cs, 256, bs=(v.rows * v.cols,)) for v in views]
    return problem.Problem(dtype, "f32", *views, plain=True, beta_zero=True, batch=batch)


def _gemm(recipe) -> Gemm:
    (g,) = [s for s in recipe.steps if isinstance(s, Gemm)]
    return g


def test_group_counts_fill_the_wave_and_leave_each_cta_a_few_k_blocks():
    # 4 tiles split 8 ways: 132 SMs hold 4 groups, the 120 SMs that clusters of 8 fill hold 3
    assert k_groups_offered(4, 8, 2048, 132, 120) == [4, 3]
    assert k_groups_offered(1, 1, 2048, 132, 132) == [132]
    # a short K: each CTA keeps KG_MIN_BLOCKS k-blocks at least
    assert k_groups_offered(1, 2, 64, 132, 132) == [64 // (2 * KG_MIN_BLOCKS)]
    # no room for two groups
    assert k_groups_offered(64, 2, 2048, 132, 132) == []
    assert k_groups_offered(1, 8, 40, 132, 120) == []


def test_workspace_holds_the_counts_then_every_groups_partials():
    counts = k_groups_work_bytes(3, 8, 5, (64, 128)) - 3 * 5 * 64 * 128 * 4
    assert counts == 256  # 24 int32 counts, rounded up to the partials' alignment
    assert k_groups_work_bytes(100, 8, 2, (128, 256)) == 3328 + 100 * 2 * 128 * 256 * 4


@needs_manifest
def test_planner_offers_k_groups_to_the_matmul_sm90_kernels_only_unbatched_and_with_an_sm_count():
    prob = _problem(128, 128, 131072)
    routes = planner.candidate_routes(prob, MANIFEST, (9, 0), sm_count=132)
    kg = [r for r in routes if KG in r.opts()]
    assert kg and {MANIFEST.kernels[r.kernel].role for r in kg} == {planner.KG_ROLE}
    assert all("mc" not in r.opts() for r in kg)
    tiles = {tuple(MANIFEST.kernels[r.kernel].tile[:2]) for r in kg}
    assert tiles == {(128, 64), (128, 128)}, tiles  # the tiles measured to gain (KG_TILE_ROWS, KG_TILE_COLS)
    assert not any(KG in r.opts() for r in planner.candidate_routes(prob, MANIFEST, (9, 0)))  # SMs unknown
    assert not any(KG in r.opts() for r in planner.candidate_routes(prob, MANIFEST, (8, 0), sm_count=108))
    batched = _problem(128, 128, 131072, batch=(2,))
    assert not any(KG in r.opts() for r in planner.candidate_routes(batched, MANIFEST, (9, 0), sm_count=132))


@needs_manifest
def test_a_k_group_recipe_carries_its_groups_and_workspace_and_bad_ones_are_refused():
    name = "matmul_gemm_wgmma_f16_m64n64_tn"
    spec = MANIFEST.kernels[name]
    prob = _problem(128, 128, 131072)
    recipe = planner.recipe_for(Route(name, False, ((KG, 3), ("splits", 8))), prob, MANIFEST)
    g = _gemm(recipe)
    assert (g.splits, g.k_groups) == (8, 3) and "splits=8 k_groups=3" in planner.describe(recipe)
    tiles = spec.output_tiles(128, 128)
    assert g.work.cols * 2 >= k_groups_work_bytes(tiles, 8, 3, spec.tile[:2])
    assert [t.name for t in recipe.temps] == ["tW"]
    for opts in (((KG, 1), ("splits", 8)), ((KG, KG_MAX + 1), ("splits", 1)), ((KG, "3"), ("splits", 1))):
        assert planner.recipe_for(Route(name, False, opts), prob, MANIFEST) is None, opts
    assert planner.recipe_for(Route(name, False, ((KG, 2), ("splits", 1))), _problem(128, 128, 8192, batch=(2,)),
                              MANIFEST) is None
    pair = "matmul_gemm_wgmma_f16_m128n128_tn"
    assert planner.recipe_for(Route(pair, False, ((KG, 2), ("mc", 2), ("splits", 1))), _problem(256, 256, 65536),
                              MANIFEST) is None
    fused = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_fused_wgmma" and s.dtype == "f16")
    assert planner.recipe_for(Route(fused, False, ((KG, 2),)), prob, MANIFEST) is None
    assert tuning.route_runs(Route(name, False, ((KG, 3), ("splits", 8))), MANIFEST)
    assert not tuning.route_runs(Route(name, False, ((KG, 0), ("splits", 8))), MANIFEST)


@needs_manifest
def test_the_long_k_shapes_take_deferred_k_groups_where_they_were_measured_to_gain():
    # H100, fp16, L2 flushed: deferred m128n64 x 64 groups 40.7 us at 128 x 128 x 131072 (clustered 8 x 7 groups 44.8),
    # x 16 at 256 x 256 x 65536 41.3 (split-K 8 ways 47.9), m64n64 x 64-132 at 64 x 64 x 65536 18.4-19.0 (decode 20.0)
    for shape, want in (((128, 128, 131072), "m128n64_tn k_groups=66 deferred"),
                        ((256, 256, 65536), "m128n64_tn k_groups=16 deferred"),
                        ((64, 64, 65536), "m64n64_tn k_groups=132 deferred")):
        pick = planner.describe(planner.heuristic_recipe(_problem(*shape), MANIFEST, (9, 0), 132))
        assert want in pick and "matmul_kgroups_sum_f16" in pick, (shape, pick)
    for shape in ((1024, 1024, 1024), (256, 4096, 14336), (128, 8192, 8192)):  # no long K: one launch
        pick = planner.heuristic_recipe(_problem(*shape), MANIFEST, (9, 0), 132)
        assert not any(isinstance(s, GroupSum) for s in pick.steps), (shape, planner.describe(pick))


@needs_manifest
def test_deferred_k_groups_are_offered_unclustered_on_the_tallest_tile_c_fills():
    def rows(m):  # C's rows fill a 128-row tile, or half of one
        return 128 if m >= 128 else 64

    for M, N, K in ((128, 128, 131072), (64, 64, 65536), (100, 300, 65536)):
        routes = [r for r in planner.candidate_routes(_problem(M, N, K), MANIFEST, (9, 0), sm_count=132)
                  if KS in r.opts()]
        assert routes, (M, N, K)
        for r in routes:
            spec, m = MANIFEST.kernels[r.kernel], N if r.transpose else M
            assert r.opts()["splits"] == 1 and spec.role == planner.KG_ROLE and spec.tile[0] == rows(m), r
            assert spec.tile[1] <= KG_TILE_COLS and r.opts()[KG] >= 2, r
    assert not any(KS in r.opts() for r in planner.candidate_routes(_problem(128, 128, 131072, batch=(2,)), MANIFEST,
                                                                     (9, 0), sm_count=132))
    assert k_groups_offered(6, 1, 5, 132, 132, KG_SUM_MIN_BLOCKS) == [2]


@needs_manifest
def test_a_deferred_recipe_is_the_plain_gemm_then_the_sum_with_the_epilogue():
    from hgemm_rt.epilogue import Epilogue

    name = "matmul_gemm_wgmma_f16_m128n64_tn"
    base = _problem(300, 200, 40000)
    bias = problem.View.make("bias", 1, 200, 200, 1, 256)
    prob = problem.Problem("f16", "f32", base.a, base.b, base.c, plain=False, beta_zero=False,
                           epi=Epilogue("col", "gelu"), bias=bias)
    recipe = planner.recipe_for(Route(name, False, ((KG, 9), (KS, 1), ("splits", 1))), prob, MANIFEST)
    g, s = recipe.steps
    assert isinstance(g, Gemm) and isinstance(s, GroupSum) and s.kernel == "matmul_kgroups_sum_f16"
    assert g.k_deferred and g.k_groups == 9 and not g.applies_alpha_beta and g.epi is None and g.bias is None
    assert s.applies_alpha_beta and s.epi == prob.epi and s.bias == bias and s.c == prob.c and (s.M, s.N, s.groups) == (300, 200, 9)
    assert g.work == s.work and [t.name for t in recipe.temps] == ["tW"]
    assert g.work.cols * 2 >= k_sum_work_bytes(300, 200, 9) == 9 * 300 * 200 * 4
    assert k_sum_work_bytes(3, 5, 2) == 2 * 3 * 8 * 4  # rows of whole fp32 quads
    assert "k_groups=9 deferred" in planner.describe(recipe) and "matmul_kgroups_sum_f16 of 9 groups" in \
        planner.describe(recipe)
    assert step_scalars(g)["k_groups"] == 9 | K_GROUPS_DEFERRED and step_scalars(s)["k_groups"] == 9
    assert (step_scalars(s)["M"], step_scalars(s)["N"], step_scalars(s)["ldc_r"]) == (300, 200, 200)
    for opts in (((KG, 9), (KS, 1), ("splits", 2)), ((KS, 1), ("splits", 1))):  # clustered; no groups
        assert planner.recipe_for(Route(name, False, opts), prob, MANIFEST) is None, opts
    swiglu = replace(_problem(64, 256, 40000), epi=Epilogue(None, "swiglu"), plain=False)
    assert planner.recipe_for(Route(name, False, ((KG, 4), (KS, 1), ("splits", 1))), swiglu, MANIFEST) is None
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    assert model.estimate_us(recipe, "f16") > model.estimate_us(
        replace(recipe, steps=recipe.steps[:1]), "f16") + model.rates.launch_us  # the sum launch is priced


def test_the_deferred_bit_is_the_kernels():
    src = (ROOT / "cu" / "matmul_sm90.cu").read_text()
    assert re.search(r"kKgDeferred = 1 << (\d+)", src).group(1) == str(K_GROUPS_DEFERRED.bit_length() - 1)
    assert K_GROUPS_DEFERRED > KG_MAX


@needs_manifest
def test_cost_model_prices_k_groups_as_more_ctas_on_shorter_k():
    name = "matmul_gemm_wgmma_f16_m128n64_tn"
    prob = _problem(128, 128, 131072)
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    est = {kg: model.estimate_us(planner.recipe_for(Route(name, False, ((KG, kg), ("splits", 8))) if kg > 1 else
                                                    Route(name, False, (("splits", 8),)), prob, MANIFEST), "f16")
           for kg in (1, 7, 8)}
    assert est[7] < est[1] / 1.5, est  # 112 CTAs stream the operands, not 16 (H100: 45.6 against 69.5-70.4 us)
    assert est[8] > est[7], est  # 128 CTAs in clusters of 8: two waves (53.5 us)


CASES = [  # dtype, M, N (B's columns), K, B's order (col: as nn.Linear holds it), bias, activation, alpha, beta
    ("f16", 128, 128, 16384, "col", None, None, 1.0, 0.0),
    ("f16", 128, 128, 16384, "row", None, None, 1.0, 0.0),
    ("bf16", 100, 200, 9000, "col", "col", "gelu", 0.5, 1.0),
    ("f16", 70, 96, 20000, "row", "row", "relu", 1.0, -0.5),
    ("f16", 64, 512, 8192, "col", None, "swiglu", 0.02, 0.0),  # (alpha: gate x up of K = 8192 overflows fp16)
    ("bf16", 300, 136, 4104, "row", None, None, 2.0, 0.0),
]
SPLIT_GROUPS = ((1, 3), (2, 5), (8, 2))
DEFERRED_GROUPS = (2, 7, 130)  # 130: more planes than the sum kernel has warps, each warp adding several


@pytest.mark.gpu
@pytest.mark.parametrize("deferred,dtype,M,N,K,b_order,bias,act,alpha,beta",
                         [(d, *c) for d in (False, True) for c in CASES if not (d and c[6] == "swiglu")])
def test_every_matmul_sm90_kernel_with_k_groups_matches_float64_and_repeats_bitwise(deferred, dtype, M, N, K, b_order,
                                                                                  bias, act, alpha, beta, rng):
    """Clustered groups (their counts left zero) and deferred ones (no counts; SwiGLU is not offered deferred)."""
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    case = epilogue_case(rng, dtype, M, N, K, b_order=b_order, bias=bias, act=act, alpha=alpha, beta=beta)
    routes = [((KG, g), (KS, 1), ("splits", 1)) for g in DEFERRED_GROUPS] if deferred else \
        [((KG, g), ("splits", s)) for s, g in SPLIT_GROUPS]
    tested, bad = 0, []
    for name, spec in manifest.kernels.items():
        if spec.role != planner.KG_ROLE or spec.dtype != dtype:
            continue
        for opts in routes:
            plan = planner.recipe_for(Route(name, False, opts), case.prob, manifest)
            if plan is None:
                continue
            g = _gemm(plan)
            tested += 1
            counts = 0 if deferred else spec.output_tiles(g.M, g.N, g.epi is not None and g.epi.swiglu) * g.splits
            bad += forced_twice(case, plan, counts)
    assert tested >= 3 * len(routes) and not bad, "\n".join(bad)
