"""The 128 x 112 and 128 x 96 tiles of the Hopper split-K GEMM (cu/matmul_sm90.cu, BN = 112, 96: fp16/bf16, B as
N x K, with the B multicast variant): tile counts that fill the SMs in one wave where 128 x 128 leaves part of a wave
empty (512 x 3584: 128 tiles of 112 columns; 512 x 3072: 128 of 96).

CPU: what the manifest declares of them, and that the planner offers them for the 512-token model rows (which one
wins is the rates' business: theirs are provisional until measured). GPU: each forced onto its unicast, multicast,
split-K and K-group launches at aligned, ragged, tiny and batched shapes, with alpha/beta, a bias, activations and
SwiGLU, against float64 (C's surroundings untouched, two runs bitwise equal), and once through hg.matmul(kernel=...).
"""
from __future__ import annotations

import numpy as np
import pytest

from epilogue_cases import EpilogueCase, forced_twice
from guarded import GuardedArray
from hgemm_rt import DeviceArray, api, planner
from hgemm_rt.costmodel import CostModel
from hgemm_rt.dtypes import storage_to_f64, to_storage
from hgemm_rt.epilogue import Epilogue, reference as epilogue_reference
from hgemm_rt.numerics import error_floor, rel_error
from hgemm_rt.problem import Gemm, Route
from hgemm_rt.roles.gemm_strided_wgmma import StridedWgmma
from hgemm_rt.roles.tma_gemm import K_GROUPS
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
NARROW_BN = (112, 96)


def narrow_kernels(manifest, dtype: str | None = None) -> list[str]:
    """The split-K wgmma kernels of 128 x 112 and 128 x 96 tiles (of `dtype`), read from the manifest by role and
    tile."""
    return sorted(n for n, s in manifest.kernels.items()
                  if s.role == StridedWgmma.name and s.tile[0] == 128 and s.tile[1] in NARROW_BN
                  and (dtype is None or s.dtype == dtype))


def _gemm(recipe) -> Gemm:
    (g,) = [s for s in recipe.steps if isinstance(s, Gemm)]
    return g


# ---------------------------------------------------------------------------------------------------
# CPU
# ---------------------------------------------------------------------------------------------------

@needs_manifest
def test_the_narrow_tiles_are_fp16_and_bf16_tn_kernels_with_b_multicast():
    names = narrow_kernels(MANIFEST)
    got = {(MANIFEST.kernels[n].dtype, MANIFEST.kernels[n].tile[1]) for n in names}
    assert len(names) == 4 and got == {(d, bn) for d in ("f16", "bf16") for bn in NARROW_BN}, names
    for n in names:
        s = MANIFEST.kernels[n]
        BM, BN, BK = s.tile
        assert (s.layout, BK, s.out, s.swiglu) == ("TN", 64, s.dtype, True), n
        assert set(s.variants) == {"mc"} and list(s.variants["mc"]) == [1, 2], n  # unicast and the multicast pair
        # a B stage is two TMA boxes of BN/2 rows (whole 8-row swizzle atoms), A one of BM rows
        assert s.tma["B"]["box"] == [64, BN // 2] and s.tma["A"]["box"] == [64, BM], n
        assert BN // 2 % 8 == 0
        stages = s.knobs["stages"]
        assert 6 <= stages <= 7 and s.dsmem_bytes({"mc": 1}) == stages * (BM + BN) * BK * 2 + 2 * stages * 8 + 1024
        assert s.dsmem_bytes({"mc": 1}) <= 227 * 1024
        assert s.rate_tflops and s.rate_source


def _problem(M: int, N: int, K: int, dtype: str):
    """A (M x K) @ B (K x N) held as nn.Linear holds it (N x K rows), C (M x N): never allocated, the planner only
    reads shapes and strides."""
    isz = 2
    a = DeviceArray(1 << 20, (M, K), dtype)
    b = DeviceArray(1 << 40, (K, N), dtype, (isz, K * isz))
    c = DeviceArray(1 << 41, (M, N), dtype)
    return api.problem_of(api.validate_call(a, b, c, 1.0, 0.0, None, "auto", None, None, None, 1.0))


@needs_manifest
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("M,N,K", [(512, 3584, 3584), (512, 3584, 14336), (512, 3072, 3072), (512, 3072, 8192)])
def test_the_planner_offers_the_narrow_tiles_for_the_512_token_rows(dtype, M, N, K):
    prob = _problem(M, N, K, dtype)
    ranked = planner.ranked_recipes(prob, MANIFEST, (9, 0), 132)
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    names = narrow_kernels(MANIFEST, dtype)
    assert len(names) == 2, names
    for name in names:
        spec = MANIFEST.kernels[name]
        mine = [r for _us, r in ranked if _gemm(r).kernel == name and not r.route.transpose]
        variants = {dict(_gemm(r).variant).get("mc", 1) for r in mine}
        assert {1, 2} <= variants, (name, [planner.describe(r) for r in mine])
        plain = next(r for r in mine if _gemm(r).splits == 1 and not _gemm(r).variant and _gemm(r).k_groups == 1)
        assert len(plain.steps) == 1, planner.describe(plain)  # A and B read in place through TMA maps
        # the model counts the narrow tiles: 4 rows of N / BN tiles, one wave of the 132 SMs where they divide N
        tiles = model.grid_ctas(spec, _gemm(plain))
        assert tiles == 4 * -(-N // spec.tile[1])
        if N % spec.tile[1] == 0:
            assert tiles <= model.cta_slots(spec, 1)


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

def narrow_case(rng, dtype: str, M: int, N: int, K: int, *, batch: tuple[int, ...] = (), bias: str | None = None,
                act: str | None = None, alpha: float = 1.0, beta: float = 0.0) -> EpilogueCase:
    """A case whose operands the kernels read in place where TMA can: A row-major from its buffer's start, B as
    nn.Linear holds it (N x K rows: the tn kernels' B), C row-major (N / 2 columns with SwiGLU); N(0,1) values,
    NaN around every view."""
    n_out = N // 2 if act == "swiglu" else N
    a = GuardedArray(rng.standard_normal((*batch, M, K)), dtype, "row")
    b = GuardedArray(rng.standard_normal((*batch, K, N)), dtype, "col")
    c = GuardedArray(rng.standard_normal((*batch, M, n_out)), dtype, "row")
    bv = None if bias is None else GuardedArray(rng.standard_normal((1, N) if bias == "col" else (M, 1)), dtype, "row")
    prob = api.problem_of(api.validate_call(a.view, b.view, c.view, alpha, beta, None, "auto", None,
                                            None if bv is None else bv.view, act, 1.0))
    ref = epilogue_reference(a.exact @ b.exact, prob.epi or Epilogue(None), alpha, beta, c.exact,
                             None if bv is None else bv.exact)
    want = storage_to_f64(to_storage(np.asarray(ref, np.float32), dtype), dtype)
    floor = error_floor(dtype, "f32", dtype, K) * (2 if act == "swiglu" else 1)
    return EpilogueCase(dtype, a, b, c, bv, alpha, beta, prob, want, floor)


UNICAST, MULTICAST = (("splits", 1),), (("mc", 2), ("splits", 1))
SPLIT_K = tuple((("splits", s),) for s in (2, 4, 8))
K_GROUPED = (((K_GROUPS, 3), ("splits", 2)), ((K_GROUPS, 4), (planner.K_SUM, 1), ("splits", 1)))
CASES = [  # dtype, M, N (B's columns), K, batch, bias, activation, alpha, beta, routes, transposed too
    # aligned: one wave of tiles, the staged store (plain, unsplit)
    ("f16", 512, 3584, 3584, (), None, None, 1.0, 0.0, (UNICAST, MULTICAST, *SPLIT_K[:1]), False),
    ("bf16", 512, 3072, 3072, (), None, None, 1.0, 0.0, (UNICAST, MULTICAST, *SPLIT_K[:1]), False),
    # ragged: the last tiles part-filled along M (an odd row of tiles: the multicast pair's idle partner) and N
    ("bf16", 300, 1000, 520, (), None, None, 1.0, 0.0, (UNICAST, MULTICAST, *SPLIT_K), False),  # staged (N % 8 == 0)
    ("f16", 301, 999, 523, (), None, None, -1.5, 0.0, (UNICAST, MULTICAST, *SPLIT_K), True),  # the fp32 tile's stores
    ("f16", 300, 1000, 520, (), "col", "gelu", 0.5, 0.25, (UNICAST, MULTICAST, *SPLIT_K), True),  # general epilogue
    # tiny: one part-filled tile (K = 1, 13: B and A packed to 16-byte rows)
    ("f16", 1, 1, 1, (), None, None, 1.0, 0.0, (UNICAST, MULTICAST, *SPLIT_K), False),
    ("bf16", 7, 9, 13, (), "row", "relu", 1.0, 1.0, (UNICAST, MULTICAST, *SPLIT_K), True),
    # split-K and K groups over a longer K, beta
    ("f16", 200, 300, 2000, (), None, None, 1.0, 0.5, (UNICAST, *SPLIT_K, *K_GROUPED), False),
    ("bf16", 256, 224, 4096, (), "col", "silu", 2.0, 0.0, (MULTICAST, *SPLIT_K, *K_GROUPED), False),
    # batched (rank-4 maps; no multicast)
    ("bf16", 130, 200, 300, (3,), "col", "silu", 1.0, 0.0, (UNICAST, *SPLIT_K), False),
    ("f16", 64, 240, 128, (2, 2), None, None, 0.5, 0.5, (UNICAST, *SPLIT_K[:1]), False),
    # SwiGLU: B's 2F columns [gate | up], a tile of BN/2 output columns (F = 224: 4 tiles of 56, 4.7 of 48)
    ("f16", 256, 448, 512, (), None, "swiglu", 0.05, 0.0, (UNICAST, MULTICAST, *SPLIT_K), False),
    ("bf16", 260, 1000, 700, (), None, "swiglu", 0.05, 0.0, (UNICAST, MULTICAST, *SPLIT_K[:2]), False),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,batch,bias,act,alpha,beta,routes,transposed", CASES)
def test_narrow_tiles_forced_onto_each_launch_match_float64(dtype, M, N, K, batch, bias, act, alpha, beta, routes,
                                                            transposed, rng):
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    case = narrow_case(rng, dtype, M, N, K, batch=batch, bias=bias, act=act, alpha=alpha, beta=beta)
    names = narrow_kernels(manifest, dtype)
    assert len(names) == 2, names
    tested, bad = 0, []
    for name in names:
        spec = manifest.kernels[name]
        for transpose in (False, True) if transposed else (False,):
            for opts in routes:
                plan = planner.recipe_for(Route(name, transpose, opts), case.prob, manifest)
                if plan is None:
                    bad.append(f"{name} {'transposed ' if transpose else ''}{opts}: no recipe")
                    continue
                g = _gemm(plan)
                assert g.kernel == name and g.splits == dict(opts)["splits"]
                counts, workspace = 0, None
                if g.k_groups > 1:
                    workspace = "tW"
                    if not g.k_deferred:
                        counts = spec.output_tiles(g.M, g.N, g.epi is not None and g.epi.swiglu) * g.splits
                tested += 1
                bad += forced_twice(case, plan, counts, workspace=workspace)
    assert tested == len(names) * len(routes) * (2 if transposed else 1) and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K", [("f16", 512, 3584, 3584), ("bf16", 512, 3072, 3072),
                                         ("f16", 300, 1000, 520)])
def test_matmul_forced_to_a_narrow_tile_matches_float64(dtype, M, N, K, rng, fresh_plans):
    import hgemm_rt as hg
    from hgemm_rt.registry import get_registry

    manifest = get_registry().manifest
    case = narrow_case(rng, dtype, M, N, K, bias="col", act="gelu", alpha=0.5, beta=0.25)
    for name in narrow_kernels(manifest, dtype):
        case.c.buf.copy_from_host(case.c.host)
        hg.matmul(case.a.view, case.b.view, case.c.view, alpha=case.alpha, beta=case.beta, bias=case.bias.view,
                  activation="gelu", kernel=name)
        err = rel_error(case.c.read(), case.want)
        assert err <= case.floor and case.c.outside_untouched(), f"{name}: {err:.2e} > {case.floor:.2e}"
        assert name in hg.explain(case.a.view, case.b.view, out=case.c.view, alpha=case.alpha, beta=case.beta,
                                  bias=case.bias.view, activation="gelu", kernel=name)
