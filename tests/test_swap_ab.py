"""The token-width tiles of the Hopper split-K GEMM (cu/matmul_sm90.cu, kTokenN: 128 x 32, 128 x 16, 128 x 8; fp16/bf16,
B as N x K, unicast): decode (M = 1..32 tokens) solved as C^T = B^T A^T, the weights as A and the tokens as the wgmma
N, as cuBLAS's swap-AB kernels run it.

CPU: what the manifest declares of them; that the planner offers them transposed for decode problems (and not where
they cannot run: SwiGLU, the multicast pair, two CTAs an SM); that the cost model prices their one-wide launches at
ArchRates.token_tile_dram_bytes_per_s, the constant that decides between them and the decode kernels. GPU: each forced
through the transposed and the plain route at aligned, ragged and tiny shapes, split 1, 2 and 4 ways, with alpha/beta
into a strided C and a bias, against float64 (C's surroundings untouched, two runs bitwise equal), and hg.matmul on
torch tensors (x, w.t()) at M = 8 and 32.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from epilogue_cases import EpilogueCase, epilogue_case, forced_twice
from hgemm_rt import DeviceArray, api, costmodel, planner
from hgemm_rt.costmodel import CostModel
from hgemm_rt.numerics import error_floor
from hgemm_rt.problem import Gemm, Route
from hgemm_rt.roles.gemm_strided_wgmma import StridedWgmma, streams_a_once, token_tile
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
TOKEN_BN = (32, 16, 8)
# one Llama-3-8B layer's linears (N, K): qkv, o, gate_up, down
LAYER = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))


def token_kernels(manifest, dtype: str | None = None) -> list[str]:
    """The split-K wgmma kernels of token-width tiles (of `dtype`), read from the manifest by role and tile."""
    return sorted(n for n, s in manifest.kernels.items() if token_tile(s) and (dtype is None or s.dtype == dtype))


def _gemm(recipe) -> Gemm:
    """The recipe's one GEMM step."""
    return next(s for s in recipe.steps if isinstance(s, Gemm))


# CPU: the declarations, the planner's routes, the pricing

@needs_manifest
def test_the_token_tiles_are_fp16_and_bf16_tn_unicast_kernels_with_deep_rings():
    specs = [MANIFEST.kernels[n] for n in token_kernels(MANIFEST)]
    assert sorted((s.dtype, s.tile[1]) for s in specs) == sorted((d, bn) for d in ("f16", "bf16") for bn in TOKEN_BN)
    for s in specs:
        n = s.name
        BM, BN, BK = s.tile
        assert (s.role, s.layout, BM, BK, s.out, s.swiglu) == (StridedWgmma.name, "TN", 128, 64, s.dtype, False), n
        assert not s.variants, n  # unicast: no multicast pair, no two CTAs an SM
        # B's stage is one TMA box of BN rows (whole 8-row swizzle atoms), A's one of BM rows
        assert s.tma["B"]["box"] == [64, BN] and s.tma["A"]["box"] == [64, BM] and BN % 8 == 0, n
        stages = s.knobs["stages"]
        assert stages >= 10 and s.dsmem_bytes({}) == stages * (BM + BN) * BK * 2 + 2 * stages * 8 + 1024, n
        assert s.dsmem_bytes({}) <= 227 * 1024 < (stages + 1) * (BM + BN) * BK * 2 + 1024, n  # as deep as fits
        assert s.rate_tflops and s.rate_source, n


def _problem(M: int, N: int, K: int, dtype: str, **kw):
    """A (M x K) @ B (K x N) held as nn.Linear holds it (N x K rows), C (M x N): never allocated, the planner only
    reads shapes and strides."""
    isz = 2
    a = DeviceArray(1 << 20, (M, K), dtype)
    b = DeviceArray(1 << 40, (K, N), dtype, (isz, K * isz))
    c = DeviceArray(1 << 41, (M, N // 2 if kw.get("activation") == "swiglu" else N), dtype)
    return api.problem_of(api.validate_call(a, b, c, 1.0, 0.0, None, "auto", None, None, kw.get("activation"), 1.0))


@needs_manifest
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("M", [1, 8, 16, 32])
@pytest.mark.parametrize("N,K", LAYER)
def test_the_planner_offers_the_token_tiles_transposed_for_decode(dtype, M, N, K):
    ranked = planner.ranked_recipes(_problem(M, N, K, dtype), MANIFEST, (9, 0), 132)
    offered = {}
    for _us, r in ranked:
        g = _gemm(r)
        if token_tile(MANIFEST.kernels[g.kernel]) and r.route.transpose:
            offered.setdefault(g.kernel, set()).add(g.splits)
            # the weights read in place as A (M' = N features), the tokens as the kernel's N, C^T written in place
            assert len(r.steps) == 1 and (g.M, g.N, g.K) == (N, M, K) and g.c.rs == 1, planner.describe(r)
    # decoding (M <= DECODE_ROWS) keeps the tiles at most that wide; every split count the role offers
    want = [n for n in token_kernels(MANIFEST, dtype)
            if M > planner.DECODE_ROWS or MANIFEST.kernels[n].tile[1] <= planner.DECODE_ROWS]
    assert sorted(offered) == want and all(v == {1, 2, 4, 8} for v in offered.values()), offered


@needs_manifest
def test_the_token_tiles_are_not_offered_where_they_cannot_run():
    prob = _problem(8, 4096, 4096, "bf16")
    swiglu = _problem(8, 4096, 4096, "bf16", activation="swiglu")
    for name in token_kernels(MANIFEST, "bf16"):
        assert planner.recipe_for(Route(name, True, (("splits", 2),)), prob, MANIFEST) is not None
        assert planner.recipe_for(Route(name, True, (("splits", 1),)), swiglu, MANIFEST) is None  # C^T's halves
        for opts in ((("mc", 2), ("splits", 1)), (("occ", 2), ("splits", 1))):  # unicast, one CTA an SM
            assert planner.recipe_for(Route(name, True, opts), prob, MANIFEST) is None, (name, opts)
        assert planner.recipe_for(Route(name, True, (("splits", 1),)), _problem(8, 4096, 4096, "f16"),
                                  MANIFEST) is None  # (the other dtype's kernel)
    # K groups are not offered on them
    ranked = planner.ranked_recipes(_problem(32, 128, 131072, "bf16"), MANIFEST, (9, 0), 132)
    assert not [r for _us, r in ranked if token_tile(MANIFEST.kernels[_gemm(r).kernel]) and _gemm(r).k_groups > 1]


@needs_manifest
def test_one_wide_launches_are_priced_at_the_token_tile_rate(monkeypatch):
    """The token-width tiles stream A at token_tile_dram_bytes_per_s where the tokens fit one tile's width (a grid of
    several columns of tiles reads each panel of A more than once: the common DRAM rate); that constant decides between
    them and the decode kernels."""
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    prob = _problem(32, 4096, 4096, "bf16")
    for name in token_kernels(MANIFEST, "bf16"):
        spec = MANIFEST.kernels[name]
        g = _gemm(planner.recipe_for(Route(name, True, (("splits", 1),)), prob, MANIFEST))
        rate = StridedWgmma().dram_bytes_per_s(model, spec, g, model.grid_ctas(spec, g))
        one_wide = spec.tile[1] >= 32
        assert streams_a_once(spec, g) == one_wide
        assert rate == (model.rates.token_tile_dram_bytes_per_s if one_wide else model.rates.dram_bytes_per_s)

    def pick(rate: float) -> Gemm:
        monkeypatch.setattr(costmodel, "HOPPER", replace(costmodel.HOPPER, token_tile_dram_bytes_per_s=rate))
        return _gemm(planner.heuristic_recipe(_problem(8, 4096, 14336, "bf16"), MANIFEST, (9, 0), 132))

    fast, slow = pick(1.5 * costmodel.HOPPER.stream_bytes_per_s), pick(0.7 * costmodel.HOPPER.stream_bytes_per_s)
    assert token_tile(MANIFEST.kernels[fast.kernel]) and fast.N == 8, fast.kernel
    assert not token_tile(MANIFEST.kernels[slow.kernel]), slow.kernel


# GPU: every kernel forced onto each launch, and through hg.matmul on torch tensors

def token_case(rng, dtype: str, M: int, N: int, K: int, **kw) -> EpilogueCase:
    """A decode case with B as nn.Linear holds it (N x K rows: the tn kernels' B, read in place as the transposed
    problem's A); A's rows start one element into their buffer (packed before the kernel reads them as B^T), C's
    rows padded by c_pad (its transpose: column stride N + c_pad)."""
    return epilogue_case(rng, dtype, M, N, K, b_order="col", **kw)


SPLITS = (1, 2, 4)
CASES = [  # dtype, M, N (B's columns), K, batch, bias, activation, alpha, beta, C's row padding
    # aligned: the Llama-3-8B o and qkv projections at 32 and 8 tokens (C^T: stored down its columns)
    ("bf16", 32, 4096, 4096, (), None, None, 1.0, 0.0, 0),
    ("f16", 8, 6144, 4096, (), None, None, 1.0, 0.0, 0),
    # ragged: 13 tokens, 1000 features (a part-filled last row of tiles), K = 4104 (not a multiple of 64)
    ("bf16", 13, 1000, 4104, (), "col", "gelu", 0.5, 0.25, 3),
    ("f16", 13, 1000, 4104, (), None, None, -1.5, 1.0, 5),
    ("f16", 17, 999, 523, (), "row", "silu", 1.0, 0.5, 0),  # (17 tokens: two columns of 16 or 8 wide tiles)
    # tiny: one part-filled tile (K = 1, 5: A and B packed to 16-byte rows)
    ("f16", 1, 1, 1, (), None, None, 1.0, 0.0, 0),
    ("bf16", 3, 7, 5, (), "row", "relu", 1.0, 1.0, 2),
    # batched (rank-4 maps: B's one box a stage through tma_load_4d_hint)
    ("bf16", 8, 200, 300, (3,), "col", "silu", 1.0, 0.0, 0),
    ("f16", 5, 136, 128, (2, 2), None, None, 0.5, 0.5, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,batch,bias,act,alpha,beta,c_pad", CASES)
def test_token_tiles_forced_onto_each_launch_match_float64(dtype, M, N, K, batch, bias, act, alpha, beta, c_pad, rng):
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    case = token_case(rng, dtype, M, N, K, batch=batch, bias=bias, act=act, alpha=alpha, beta=beta, c_pad=c_pad)
    names = token_kernels(manifest, dtype)
    assert len(names) == len(TOKEN_BN), names
    tested, bad = 0, []
    for name in names:
        for transpose in (True, False):
            for splits in SPLITS:
                plan = planner.recipe_for(Route(name, transpose, (("splits", splits),)), case.prob, manifest)
                if plan is None:
                    bad.append(f"{name} {'transposed ' if transpose else ''}splits={splits}: no recipe")
                    continue
                g = _gemm(plan)
                assert g.kernel == name and g.splits == splits and plan.route.transpose == transpose
                tested += 1
                bad += forced_twice(case, plan, 0, workspace=None)
    assert tested == len(names) * 2 * len(SPLITS) and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [8, 32])
def test_matmul_on_torch_tensors_forced_to_a_token_tile_matches_float64(M, rng, fresh_plans):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    import hgemm_rt as hg
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    N, K = 4096, 4096
    x = torch.from_numpy(rng.standard_normal((M, K), dtype=np.float32)).to("cuda", torch.bfloat16)
    w = torch.from_numpy(rng.standard_normal((N, K), dtype=np.float32)).to("cuda", torch.bfloat16)
    ref = x.double() @ w.double().t()
    floor = error_floor("bf16", "f32", "bf16", K)
    for name in token_kernels(manifest, "bf16"):
        plan = hg.explain(x, w.t(), kernel=name)
        assert name in plan and "C^T = B^T A^T" in plan, plan
        out = hg.matmul(x, w.t(), kernel=name)
        torch.cuda.synchronize()
        assert out.shape == (M, N) and out.dtype == torch.bfloat16
        err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
        assert err <= floor, f"{name}: {err:.2e} > {floor:.2e} ({plan})"
