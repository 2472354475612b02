"""Stream-K (matmul_gemm_wgmma_streamk_*, StreamK in cu/common/sm90_gemm.cuh): the schedule's pieces emulated
from the kernel's integer formulas (CPU), the planner's routes and workspace (CPU), and every stream-K kernel at
several grids against float64, twice (bitwise the same: the partial tiles are added in a fixed order), its
workspace flags zero afterwards (GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from hgemm_rt import planner, problem
from hgemm_rt.costmodel import CostModel
from hgemm_rt.problem import Gemm, Route
from hgemm_rt.roles.gemm_fused_wgmma import (SK_FLAG_BYTES, SK_MAX_WAVES, SK_PART_BYTES, SK_SERIAL_PIECES, streamk,
                                             streamk_splits, streamk_tiles)
from epilogue_cases import epilogue_case, forced_twice
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")


def _problem(M, N, K, dtype="f16", orders=("row", "row", "row")):
    views = []
    for base, (rows, cols), order in zip("ABC", ((M, K), (K, N), (M, N)), orders):
        views.append(problem.View.make(base, rows, cols, cols, 1, 256) if order == "row" else
                     problem.View.make(base, rows, cols, 1, rows, 256))
    return problem.Problem(dtype, "f32", *views, plain=True, beta_zero=True)


def _pieces(tiles: int, sk_tiles: int, nk: int, ctas: int) -> list[list[tuple[int, int, int]]]:
    """Each CTA's pieces (tile, kb0, kb1) in its order, as StreamK computes them."""
    dp = tiles - sk_tiles
    s = streamk_splits(sk_tiles, ctas, nk)
    out = []
    for c in range(ctas):
        mine = [(t, 0, nk) for t in range(c, dp, ctas)]
        if c < sk_tiles * s:
            j = c % s
            mine.append((dp + c // s, j * nk // s, (j + 1) * nk // s))
        out.append(mine)
    return out


@pytest.mark.parametrize("tiles,nk,ctas", [(192, 64, 132), (448, 64, 132), (64, 128, 132), (256, 224, 132),
                                           (9, 16, 100), (9, 16, 7), (5, 3, 13), (133, 1, 132), (1000, 7, 97),
                                           (300, 7, 97)])
def test_every_k_block_once_and_owners_wait_only_on_peers_that_never_wait(tiles, nk, ctas):
    sk = streamk_tiles(tiles, ctas)
    if sk == 0 or streamk_splits(sk, ctas, nk) < 2:  # whole waves, a last wave too full to cut, one k-block
        assert tiles % ctas == 0 or ctas // (tiles % ctas) < 2 or nk == 1 or tiles // ctas > SK_MAX_WAVES
        return
    assert sk == tiles % ctas and (tiles - sk) % ctas == 0
    pieces = _pieces(tiles, sk, nk, ctas)
    seen = np.zeros((tiles, nk), int)
    for c, mine in enumerate(pieces):
        for i, (t, kb0, kb1) in enumerate(mine):
            seen[t, kb0:kb1] += 1
            if kb1 - kb0 < nk:  # a piece: the CTA's last work; its tile's owner is the CTA of piece 0
                assert i == len(mine) - 1
                s = streamk_splits(sk, ctas, nk)
                assert (kb0 == 0) == (c % s == 0)
                if kb0 == 0:  # the peers it waits on hold only their piece
                    assert all(pieces[p][-1][0] == t and pieces[p][-1][1] > 0 for p in range(c + 1, c + s))
    assert (seen == 1).all()
    # the whole tiles fill waves: every CTA has as many
    assert len({sum(1 for p in mine if p[2] - p[1] == nk) for mine in pieces}) == 1


@needs_manifest
def test_hopper_plans_stream_k_where_the_last_wave_idles_and_sizes_its_workspace():
    # (1024 x 6144 x 4096 now takes the 128 x 192 tiles, whose 256 tiles fill two waves: test_matmul)
    prob = _problem(1024, 14336, 4096, orders=("row", "col", "row"))
    recipe = planner.heuristic_recipe(prob, MANIFEST, (9, 0), 132)
    g = next(s for s in recipe.steps if isinstance(s, Gemm))
    assert streamk(MANIFEST.kernels[g.kernel]), planner.describe(recipe)
    assert (g.ctas, g.sk_tiles) == (132, 52) and "stream-K 52 tiles over 132 CTAs" in planner.describe(recipe)
    (work,) = [t for t in recipe.temps if t.name == "tW"]
    assert work.rows * work.cols * 2 >= SK_FLAG_BYTES + 132 * SK_PART_BYTES
    assert g.work is not None and g.work.base == "tW"
    # whole waves keep the plain kernels; no SM count (an unknown GPU), no stream-K route
    whole = planner.heuristic_recipe(_problem(4096, 8448, 4096, orders=("row", "col", "row")), MANIFEST, (9, 0), 132)
    assert not any(s.ctas for s in whole.steps if isinstance(s, Gemm)), planner.describe(whole)
    assert not any("ctas" in r.opts() for r in planner.candidate_routes(prob, MANIFEST, (9, 0)))
    # a tile of one k-block, whole waves or a last wave of more than half the CTAs: nothing to cut
    k = next(n for n, s in MANIFEST.kernels.items() if streamk(s) and s.dtype == "f16" and s.layout == "TN")
    assert planner.recipe_for(Route(k, False, (("ctas", 132),)), _problem(128, 256, 64), MANIFEST) is None
    assert planner.recipe_for(Route(k, False, (("ctas", 96),)), _problem(1024, 3072, 4096), MANIFEST) is None
    assert planner.recipe_for(Route(k, False, (("ctas", 132),)), _problem(4096, 4096, 4096), MANIFEST) is None
    # up to a piece per CTA (256 x 256 x 65536: 2 tiles, 66 pieces each at 132 CTAs)
    for ctas, pieces in ((132, 66), (64, 32), (8, 4)):
        r = planner.recipe_for(Route(k, False, (("ctas", ctas),)), _problem(256, 256, 65536), MANIFEST)
        g = next(s for s in r.steps if isinstance(s, Gemm))
        assert (g.sk_tiles, streamk_splits(g.sk_tiles, g.ctas, 1024)) == (2, pieces)
    assert planner.recipe_for(Route(k, False), prob, MANIFEST) is None  # its grid is the route's


@needs_manifest
def test_the_cost_model_prices_the_busiest_cta():
    k = next(n for n, s in MANIFEST.kernels.items() if streamk(s) and s.dtype == "f16" and s.layout == "TN")
    prob = _problem(256, 8192, 8192, orders=("row", "col", "row"))
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    r = planner.recipe_for(Route(k, False, (("ctas", 132),)), prob, MANIFEST)
    g = next(s for s in r.steps if isinstance(s, Gemm))
    assert (g.sk_tiles, streamk_splits(g.sk_tiles, g.ctas, 128)) == (64, 2)
    plain = planner.heuristic_recipe(prob, MANIFEST, (9, 0), 132, "hgemm_sm90_wgmma_tma_ws_persistent_tn")
    # 64 tiles on 132 SMs: the plain persistent kernel runs at half the machine, stream-K at twice its rate, but
    # for the fix-up (H100: 70.3 against 104 us for the plain kernel's two tile times)
    busiest = 64 * 128 * 256 * 64 * 2 / (model.kernel_tflops(MANIFEST.kernels[k]) * 1e6 / 132)
    dram = (256 * 8192 + 8192 * 8192 + 256 * 8192) * 2 / model.rates.dram_bytes_per_s * 1e6  # (B: 128 MB)
    want = max(busiest, dram) + model.rates.streamk_fixup_us + model.rates.launch_us
    assert model.estimate_us(r, "f16") == pytest.approx(want, rel=0.01)
    assert model.estimate_us(plain, "f16") > 1.4 * model.estimate_us(r, "f16")


@needs_manifest
def test_the_cost_model_charges_the_fix_up_of_the_path_the_pieces_take():
    """Up to SK_SERIAL_PIECES pieces the owner adds its peers' partials (streamk_fixup_us, and streamk_fixup_piece_us
    for each piece beyond two); more, and every piece sums and stores its share of the tile
    (streamk_shared_fixup_us): 128 x 128 x 131072 (one tile) cut 4 and 132 ways."""
    k = next(n for n, s in MANIFEST.kernels.items() if streamk(s) and s.dtype == "f16" and s.layout == "TN")
    prob = _problem(128, 128, 131072, orders=("row", "col", "row"))
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    rates = model.rates
    dram = (2 * 128 * 131072 + 128 * 128) * 2 / rates.dram_bytes_per_s * 1e6
    serial = rates.streamk_fixup_us + rates.streamk_fixup_piece_us * (SK_SERIAL_PIECES - 2)  # pieces beyond two
    for ctas, fixup in ((SK_SERIAL_PIECES, serial), (132, rates.streamk_shared_fixup_us)):
        r = planner.recipe_for(Route(k, False, (("ctas", ctas),)), prob, MANIFEST)
        busiest = -(-2048 // ctas) * 128 * 256 * 64 * 2 / (model.kernel_tflops(MANIFEST.kernels[k]) * 1e6 / 132)
        assert model.estimate_us(r, "f16") == pytest.approx(max(busiest, dram) + fixup + rates.launch_us, rel=0.01)
    assert rates.streamk_shared_fixup_us > rates.streamk_fixup_us > 0
    # stream-K, despite its half-empty 128 x 256 tile, is estimated well below 64 x 64 tiles split 8 ways (H100: 50.2
    # us against 60.8), and K groups below both (45.6: tests/test_kgroups.py)
    ranked = planner.ranked_recipes(prob, MANIFEST, (9, 0), 132)
    est = {planner.describe(r): e for e, r in ranked}
    sk = est[planner.describe(planner.recipe_for(Route(k, False, (("ctas", 132),)), prob, MANIFEST))]
    split8 = min(e for d, e in est.items() if "m64n64_tn splits=8 128x128" in d)
    assert sk < 0.9 * split8 and "k_groups=" in planner.describe(ranked[0][1]) and ranked[0][0] < sk


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

CASES = [  # dtype, M, N, K, batch, bias, activation, alpha, beta
    ("f16", 300, 520, 1000, (), None, None, 1.0, 0.0),
    ("bf16", 300, 520, 1000, (), "col", "gelu", 0.5, 1.0),
    ("f16", 257, 264, 4099, (), "row", "relu", 1.0, -0.5),
    ("f16", 200, 1024, 777, (), "col", "swiglu", 1.0, 0.0),
    ("bf16", 130, 384, 520, (3,), "col", "silu", 1.0, 0.0),
    ("f16", 70, 200, 30000, (), "row", "gelu", 1.0, 0.5),  # one tile, up to a piece per SM: the shared fix-up
]
GRIDS_PER_CASE = 6  # of the grids the planner takes for the case (pieces 2-4: the owner adds its peers' partials;
# more: every piece sums and stores its share of C; whole waves before or not), spread


def _grids(name, prob, manifest, sm_count):
    """Up to GRIDS_PER_CASE grids (CTAs) at which `name` runs `prob`, from the fewest CTAs to the most."""
    ok = [g for g in range(2, sm_count + 1) if planner.recipe_for(Route(name, False, (("ctas", g),)), prob, manifest)]
    return ok[:: max(1, len(ok) // GRIDS_PER_CASE)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,batch,bias,act,alpha,beta", CASES)
def test_every_stream_k_kernel_and_grid_matches_float64_and_repeats_bitwise(dtype, M, N, K, batch, bias, act, alpha,
                                                                           beta, rng):
    from hgemm_rt.device import get_device
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    dev = get_device()
    case = epilogue_case(rng, dtype, M, N, K, batch=batch, bias=bias, act=act, alpha=alpha, beta=beta)
    tested, bad = 0, []
    for name, spec in manifest.kernels.items():
        if not streamk(spec) or spec.dtype != dtype:
            continue
        for grid in _grids(name, case.prob, manifest, dev.info.sm_count):
            plan = planner.recipe_for(Route(name, False, (("ctas", grid),)), case.prob, manifest)
            if plan is None:
                continue
            tested += 1
            bad += forced_twice(case, plan, SK_FLAG_BYTES // 4)
    assert tested >= 4 and not bad, "\n".join(bad)
