"""fp32 inputs at fp32 accuracy on TF32 tensor cores (3xTF32): the planner's split recipe on the CPU (the pieces
emulated in numpy, so that a wrong piece order fails here), and on the GPU every 3xTF32 route against float64,
held to twice cuBLAS's fp32 SGEMM error on the same inputs, N(0,1) and magnitudes spanning 2^-20..2^20."""
from __future__ import annotations

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import planner, problem
from hgemm_rt.testing import GuardedArray, each_route
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
HOPPER = (9, 0)


def _problem(M, N, K, acc="f32", b_order="row", batch=()):
    bs = tuple(M * K for _ in batch), tuple(K * N for _ in batch), tuple(M * N for _ in batch)
    a = problem.View.make("A", M, K, K, 1, 256, bs[0])
    b = problem.View.make("B", K, N, N, 1, 256, bs[1]) if b_order == "row" else \
        problem.View.make("B", K, N, 1, K, 256, bs[1])
    c = problem.View.make("C", M, N, N, 1, 256, bs[2])
    return problem.Problem("f32", acc, a, b, c, plain=True, beta_zero=True, batch=batch)


def _tf32_rn(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: the nearest fp32 with 10 mantissa bits, ties away from zero."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _split(x: np.ndarray, seg: int, pieces: int) -> np.ndarray:
    """util_split_tf32 in numpy: rows of x as three pieces of seg columns, piece p the residual where bit p is set."""
    x = np.asarray(x, np.float32)
    hi = _tf32_rn(x)
    lo = _tf32_rn(x - hi)
    out = np.zeros((x.shape[0], 3 * seg), np.float32)
    for p in range(3):
        out[:, p * seg:p * seg + x.shape[1]] = lo if pieces >> p & 1 else hi
    return out


@needs_manifest
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_fp32_accuracy_on_hopper_plans_the_3xtf32_split(b_order):
    recipe = planner.heuristic_recipe(_problem(4096, 4096, 4096, b_order=b_order), MANIFEST, HOPPER, 132)
    text = planner.describe(recipe)
    splits = [s for s in recipe.steps if isinstance(s, problem.Copy)]
    gemm = recipe.steps[-1]
    assert [s.pieces for s in splits] == [planner.TF32X3_A_PIECES, planner.TF32X3_B_PIECES], text
    assert MANIFEST.kernels[gemm.kernel].acc == "tf32" and gemm.K == 3 * 4096 and gemm.c.base == "C", text
    assert recipe.route.opts()[planner.TF32X3] is True and "split A->tA3" in text


@needs_manifest
def test_tf32_request_takes_the_one_pass_kernel_and_f16_never_a_tf32_kernel():
    one = planner.heuristic_recipe(_problem(4096, 4096, 4096, acc="tf32"), MANIFEST, HOPPER, 132)
    assert not any(isinstance(s, problem.Copy) and s.pieces for s in one.steps), planner.describe(one)
    assert MANIFEST.kernels[one.steps[-1].kernel].acc == "tf32" and one.steps[-1].K == 4096
    half = _problem(1024, 1024, 1024)
    half = problem.Problem("f16", "f32", half.a, half.b, half.c, True, True)
    for _est, r in planner.ranked_recipes(half, MANIFEST, HOPPER, 132):
        assert all(MANIFEST.kernels[s.kernel].dtype == "f16" for s in r.steps), planner.describe(r)


@needs_manifest
def test_3xtf32_needs_an_f32_request_a_tf32_kernel_and_one_matrix():
    prob = _problem(512, 512, 512)
    tf32 = next(n for n, s in MANIFEST.kernels.items() if s.acc == "tf32" and s.role == "gemm_strided_wgmma")
    route = problem.Route(tf32, False, (("splits", 1), (planner.TF32X3, True)))
    assert planner.recipe_for(route, prob, MANIFEST) is not None
    # plain (one TF32 pass) on an fp32-accuracy request: refused, never a silent TF32 result
    assert planner.recipe_for(problem.Route(tf32, False, (("splits", 1),)), prob, MANIFEST) is None
    assert planner.recipe_for(route, _problem(512, 512, 512, acc="tf32"), MANIFEST) is None
    assert planner.recipe_for(route, _problem(64, 64, 64, batch=(3,)), MANIFEST) is None
    simt = problem.Route("util_gemm_simt_f32", False, ((planner.TF32X3, True),))
    assert planner.recipe_for(simt, prob, MANIFEST) is None
    batched = planner.ranked_recipes(_problem(64, 64, 64, batch=(3,)), MANIFEST, HOPPER, 132)
    assert batched and not any(r.route.opts().get(planner.TF32X3) for _e, r in batched)


@needs_manifest
@pytest.mark.parametrize("shape", [(37, 70, 5), (128, 96, 200), (9, 33, 1000)])
def test_the_split_recipe_computes_the_product_to_fp32_accuracy(shape, rng):
    """The recipe's pieces, emulated: A3 . B3^T (what the TF32 GEMM sums) against the exact product. The
    dropped lo(a) lo(b) term leaves ~2^-21; one TF32 pass would leave ~2^-11, and a piece order that pairs
    lo with lo or repeats a product fails too."""
    M, N, K = shape
    tf32 = next(n for n, s in MANIFEST.kernels.items() if s.acc == "tf32" and s.role == "gemm_strided_wgmma")
    recipe = planner.recipe_for(problem.Route(tf32, False, (("splits", 1), (planner.TF32X3, True))),
                                _problem(M, N, K), MANIFEST)
    sa, sb, g = recipe.steps
    seg = g.K // 3
    assert seg >= K and sa.src.base == "A" and sb.src.base == "B" and (sa.dst.cols, sb.dst.cols) == (g.K, g.K)
    a = rng.standard_normal((M, K)) * 2.0 ** rng.uniform(-20, 20, (M, K))
    b = rng.standard_normal((K, N)) * 2.0 ** rng.uniform(-20, 20, (K, N))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    exact = a32.astype(np.float64) @ b32.astype(np.float64)
    got = _split(a32, seg, sa.pieces).astype(np.float64) @ _split(b32.T, seg, sb.pieces).astype(np.float64).T
    err = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    assert err < 2.0 ** -19, err
    one_pass = _tf32_rn(a32).astype(np.float64) @ _tf32_rn(b32).astype(np.float64)
    assert np.linalg.norm(one_pass - exact) / np.linalg.norm(exact) > 2.0 ** -16  # the test can tell them apart


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

def _cublas_sgemm_error(a: GuardedArray, b: GuardedArray, want: np.ndarray) -> float:
    """cuBLAS's fp32 SGEMM (GemmEx, COMPUTE_32F: no TF32) on the same inputs, its relative error."""
    from hgemm_rt import cublas

    try:
        c = hg.empty(want.shape, "f32")
        cublas.matmul(a.view, b.view, c, acc="f32")
        got = c.to_numpy().astype(np.float64)
    except (ImportError, RuntimeError) as exc:  # no cuBLAS: the static fp32 bound stands in
        pytest.skip(f"cuBLAS is not available for the baseline error: {exc}")
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


SHAPES = [(1, 1, 1), (7, 5, 3), (97, 141, 100), (256, 384, 1000), (300, 257, 4099), (1024, 1024, 1024)]


@pytest.mark.gpu
@pytest.mark.parametrize("wide", [False, True], ids=["normal", "magnitudes-2^-20..2^20"])
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_every_3xtf32_route_is_as_accurate_as_cublas_sgemm(M, N, K, b_order, wide, rng):
    def values(shape):
        v = rng.standard_normal(shape)
        return v * 2.0 ** rng.uniform(-20, 20, shape) if wide else v

    a = GuardedArray(values((M, K)), "f32", "row", 1, 0)
    b = GuardedArray(values((K, N)), "f32", b_order, 0, 3)
    c = GuardedArray(np.zeros((M, N)), "f32", "row", 0, 0)
    from hgemm_rt import api

    prob = api.problem_of(api.validate_call(a.view, b.view, c.view, 1.0, 0.0, "f32", "auto", None))
    want = a.exact @ b.exact
    cublas_err = _cublas_sgemm_error(a, b, want)
    bound = max(2 * cublas_err, 2.0 ** -23)  # (a 1-term product is exact in both)
    tested, bad = 0, []
    for plan, got in each_route(prob, "f32", a, b, c, 1.0, 0.0):
        if not plan.route.opts().get(planner.TF32X3):
            continue
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want)) if np.isfinite(got).all() else float("inf")
        tested += 1
        if not err <= bound or not c.outside_untouched():
            bad.append(f"{planner.describe(plan)}: {err:.2e} > {bound:.2e} (cuBLAS SGEMM {cublas_err:.2e})")
    assert tested >= 2 and not bad, "\n".join(bad)


@pytest.mark.gpu
def test_matmul_fp32_default_and_tf32_request(rng):
    """matmul on fp32 arrays: the default (accumulate='f32') at SGEMM accuracy, 'tf32' at TF32's."""
    M, N, K = 515, 1030, 2051
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    da, db = hg.to_device(a), hg.to_device(b)
    for acc, bound in (("f32", 1e-6), ("tf32", 2e-3)):
        got = hg.matmul(da, db, accumulate=acc).to_numpy().astype(np.float64)
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        assert err <= bound, (acc, err, hg.explain(da, db, accumulate=acc))
    assert "split" in hg.explain(da, db) and "tf32" in hg.explain(da, db, accumulate="tf32")
