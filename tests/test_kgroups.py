"""K groups (cu/util_sm90.cu, `i32:k_groups`): clusters of one tile along grid.z, each on its own share of K, the
last to finish summing every group's partial from a workspace. The planner's offers, recipes and workspace (CPU);
every util_sm90 kernel with K groups against float64, repeated bitwise, the workspace's counts left zero (GPU)."""
from __future__ import annotations

import pytest

from hgemm_rt import planner, problem, tuning
from hgemm_rt.costmodel import CostModel
from hgemm_rt.problem import Gemm, Route
from epilogue_cases import epilogue_case, forced_twice
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
KG = planner.K_GROUPS


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
    assert planner.k_groups_offered(4, 8, 2048, 132, 120) == [4, 3]
    assert planner.k_groups_offered(1, 1, 2048, 132, 132) == [132]
    # a short K: each CTA keeps KG_MIN_BLOCKS k-blocks at least
    assert planner.k_groups_offered(1, 2, 64, 132, 132) == [64 // (2 * planner.KG_MIN_BLOCKS)]
    # no room for two groups
    assert planner.k_groups_offered(64, 2, 2048, 132, 132) == []
    assert planner.k_groups_offered(1, 8, 40, 132, 120) == []


def test_workspace_holds_the_counts_then_every_groups_partials():
    counts = planner.k_groups_work_bytes(3, 8, 5, (64, 128)) - 3 * 5 * 64 * 128 * 4
    assert counts == 256  # 24 int32 counts, rounded up to the partials' alignment
    assert planner.k_groups_work_bytes(100, 8, 2, (128, 256)) == 3328 + 100 * 2 * 128 * 256 * 4


@needs_manifest
def test_planner_offers_k_groups_to_the_util_sm90_kernels_only_unbatched_and_with_an_sm_count():
    prob = _problem(128, 128, 131072)
    routes = planner.candidate_routes(prob, MANIFEST, (9, 0), sm_count=132)
    kg = [r for r in routes if KG in r.opts()]
    assert kg and {MANIFEST.kernels[r.kernel].role for r in kg} == {planner.KG_ROLE}
    assert all("mc" not in r.opts() for r in kg)
    tiles = {tuple(MANIFEST.kernels[r.kernel].tile[:2]) for r in kg}
    assert tiles == {(128, 64), (128, 128)}, tiles  # the tiles measured to gain (planner.KG_TILE_ROWS, KG_TILE_COLS)
    assert not any(KG in r.opts() for r in planner.candidate_routes(prob, MANIFEST, (9, 0)))  # SMs unknown
    assert not any(KG in r.opts() for r in planner.candidate_routes(prob, MANIFEST, (8, 0), sm_count=108))
    batched = _problem(128, 128, 131072, batch=(2,))
    assert not any(KG in r.opts() for r in planner.candidate_routes(batched, MANIFEST, (9, 0), sm_count=132))


@needs_manifest
def test_a_k_group_recipe_carries_its_groups_and_workspace_and_bad_ones_are_refused():
    name = "util_gemm_wgmma_f16_m64n64_tn"
    spec = MANIFEST.kernels[name]
    prob = _problem(128, 128, 131072)
    recipe = planner.recipe_for(Route(name, False, ((KG, 3), ("splits", 8))), prob, MANIFEST)
    g = _gemm(recipe)
    assert (g.splits, g.k_groups) == (8, 3) and "splits=8 k_groups=3" in planner.describe(recipe)
    tiles = spec.output_tiles(128, 128)
    assert g.work.cols * 2 >= planner.k_groups_work_bytes(tiles, 8, 3, spec.tile[:2])
    assert [t.name for t in recipe.temps] == ["tW"]
    for opts in (((KG, 1), ("splits", 8)), ((KG, planner.KG_MAX + 1), ("splits", 1)), ((KG, "3"), ("splits", 1))):
        assert planner.recipe_for(Route(name, False, opts), prob, MANIFEST) is None, opts
    assert planner.recipe_for(Route(name, False, ((KG, 2), ("splits", 1))), _problem(128, 128, 8192, batch=(2,)),
                              MANIFEST) is None
    pair = "util_gemm_wgmma_f16_m128n128_tn"
    assert planner.recipe_for(Route(pair, False, ((KG, 2), ("mc", 2), ("splits", 1))), _problem(256, 256, 65536),
                              MANIFEST) is None
    fused = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_fused_wgmma" and s.dtype == "f16")
    assert planner.recipe_for(Route(fused, False, ((KG, 2),)), prob, MANIFEST) is None
    assert tuning._route_ok(Route(name, False, ((KG, 3), ("splits", 8))), MANIFEST)
    assert not tuning._route_ok(Route(name, False, ((KG, 0), ("splits", 8))), MANIFEST)


@needs_manifest
def test_the_long_k_shapes_take_k_groups_where_they_were_measured_to_gain():
    # H100, fp16, L2 flushed: 128 x 128 x 131072 m128n64 splits 8 x 7 groups 45.6 us (stream-K 48.1-48.6); at 256 x
    # 256 x 65536 no K-group route of these tiles beat split-K's 48.0 (m128n64 splits 8)
    pick = planner.describe(planner.heuristic_recipe(_problem(128, 128, 131072), MANIFEST, (9, 0), 132))
    assert "m128n64_tn splits=8 k_groups=7" in pick, pick
    pick = planner.describe(planner.heuristic_recipe(_problem(256, 256, 65536), MANIFEST, (9, 0), 132))
    assert "k_groups" not in pick and "m128n64_tn splits=8" in pick, pick


@needs_manifest
def test_cost_model_prices_k_groups_as_more_ctas_on_shorter_k():
    name = "util_gemm_wgmma_f16_m128n64_tn"
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


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,b_order,bias,act,alpha,beta", CASES)
def test_every_util_sm90_kernel_with_k_groups_matches_float64_and_repeats_bitwise(dtype, M, N, K, b_order, bias, act,
                                                                                  alpha, beta, rng):
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    case = epilogue_case(rng, dtype, M, N, K, b_order=b_order, bias=bias, act=act, alpha=alpha, beta=beta)
    tested, bad = 0, []
    for name, spec in manifest.kernels.items():
        if spec.role != planner.KG_ROLE or spec.dtype != dtype:
            continue
        for splits, groups in SPLIT_GROUPS:
            plan = planner.recipe_for(Route(name, False, ((KG, groups), ("splits", splits))), case.prob, manifest)
            if plan is None:
                continue
            g = _gemm(plan)
            tested += 1
            bad += forced_twice(case, plan, spec.output_tiles(g.M, g.N, g.epi is not None and g.epi.swiglu) * splits)
    assert tested >= 3 * len(SPLIT_GROUPS) and not bad, "\n".join(bad)
