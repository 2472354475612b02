"""fp32 inputs at fp32 accuracy on tensor cores, as three products of split operands: 3xTF32 (TF32 heads and
residuals, made by a split step or in the GEMM's shared memory) and 3xFP16 (each row scaled by a power of two into
fp16 heads and residuals). The planner's split recipes on the CPU (the pieces emulated in numpy, so that a wrong piece
order or scale fails here), and on the GPU every route of each against float64, held to twice cuBLAS's fp32 SGEMM error
on the same inputs: N(0,1), magnitudes spanning 2^-20..2^20, and rows of A and columns of B whose scales differ by up
to 2^100."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import costmodel, executor, planner, problem
from hgemm_rt.numerics import rel_error
from hgemm_rt.roles import SPLIT_FORMATS
from hgemm_rt.roles.gemm_strided_wgmma import SMEM_SPLIT_FIXED_US
from hgemm_rt.roles.glue import SPLITS
from hgemm_rt.roles.split_products import split_planes
from guarded import GuardedArray, each_route
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


# The kinds of fp32-accurate tensor-core GEMM: the split products by role, and the kernels that split in shared memory
KINDS = {**{role: (lambda spec, role=role: spec.role == role) for role in SPLIT_FORMATS},
         "smem_split": costmodel.smem_split}
BATCHED_KINDS = [k for k in KINDS if k not in SPLIT_FORMATS or SPLIT_FORMATS[k].batched]


def _x3(recipe):
    return [s for s in recipe.steps if isinstance(s, problem.Split)], recipe.steps[-1]


def _best(prob, role):
    """The planner's best-ranked recipe whose GEMM has `role`."""
    return next(r for _e, r in planner.ranked_recipes(prob, MANIFEST, HOPPER, 132)
                if MANIFEST.kernels[r.steps[-1].kernel].role == role)


@needs_manifest
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_fp32_accuracy_on_hopper_offers_the_3xtf32_split(b_order):
    M, N, K = 4096, 3072, 1000
    recipe = _best(_problem(M, N, K, b_order=b_order), "gemm_tf32x3")
    text = planner.describe(recipe)
    (sa, sb), gemm = _x3(recipe)
    assert MANIFEST.kernels[gemm.kernel].role == "gemm_tf32x3" and (gemm.M, gemm.N, gemm.K) == (M, N, K), text
    planes = 2 * -(-K // 32)  # a head and a residual plane per 32-column k-block
    assert (sa.src.base, sa.src_rows, sa.src_cols, sa.dst.rows, sa.dst.cols) == ("A", M, K, planes * M, 32), text
    assert (sb.src.base, sb.src_rows, sb.src_cols, sb.dst.rows, sb.dst.cols) == ("B", N, K, planes * N, 32), text
    assert (gemm.a.base, gemm.b.base, gemm.c.base) == (sa.dst.base, sb.dst.base, "C") and "split A->tA3" in text
    assert split_planes(gemm.a, M, 4) == ((1, planes, M, 32), (planes * M * 128, M * 128, 128, 4))
    assert sa.shift is None and gemm.a_shift is None


@needs_manifest
def test_tf32_request_takes_the_one_pass_kernel_and_f16_never_a_tf32_kernel():
    one = planner.heuristic_recipe(_problem(4096, 4096, 4096, acc="tf32"), MANIFEST, HOPPER, 132)
    assert not _x3(one)[0] and MANIFEST.kernels[one.steps[-1].kernel].acc == "tf32", planner.describe(one)
    half = _problem(1024, 1024, 1024)
    half = problem.Problem("f16", "f32", half.a, half.b, half.c, True, True)
    for _est, r in planner.ranked_recipes(half, MANIFEST, HOPPER, 132):
        assert all(MANIFEST.kernels[s.kernel].dtype == "f16" for s in r.steps), planner.describe(r)


@needs_manifest
def test_no_silent_tf32_for_an_fp32_request():
    prob = _problem(512, 512, 512)
    one_pass = next(n for n, s in MANIFEST.kernels.items() if s.acc == "tf32" and s.role == "gemm_strided_wgmma")
    x3 = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_tf32x3")
    assert planner.recipe_for(problem.Route(x3, False, (("splits", 2),)), prob, MANIFEST) is not None
    assert planner.recipe_for(problem.Route(one_pass, False, (("splits", 1),)), prob, MANIFEST) is None
    for _est, r in planner.ranked_recipes(prob, MANIFEST, HOPPER, 132):
        assert all(MANIFEST.kernels[s.kernel].acc != "tf32" for s in r.steps), planner.describe(r)


def _tf32_trunc_pieces(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gemm_tf32x3s kernels' pieces in float64: the head tf32 wgmma reads from an fp32 operand (its low 13
    mantissa bits dropped) and the residual past it, rounded to TF32 (hg::tf32_trunc_residual)."""
    x = np.asarray(x, np.float32)
    head = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return head.astype(np.float64), _tf32_rn(x - head).astype(np.float64)


def test_three_tf32_products_of_truncated_heads_carry_fp32_accuracy(rng):
    """What the gemm_tf32x3s kernels sum, in float64: the residual of a truncated head has up to 13 bits, of which
    TF32 keeps 11, so the sum is ~2^-21 off (one truncated TF32 product: ~2^-10)."""
    a = rng.standard_normal((64, 300)) * 2.0 ** rng.uniform(-20, 20, (64, 300))
    b = rng.standard_normal((300, 48)) * 2.0 ** rng.uniform(-20, 20, (300, 48))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    exact = a32.astype(np.float64) @ b32.astype(np.float64)
    (ah, al), (bh, bl) = _tf32_trunc_pieces(a32), _tf32_trunc_pieces(b32)
    for got, bound in ((al @ bh + ah @ bl + ah @ bh, 2.0 ** -19), (ah @ bh, None)):
        err = np.linalg.norm(got - exact) / np.linalg.norm(exact)
        assert err < bound if bound else err > 2.0 ** -15, err


@needs_manifest
def test_fp32_accuracy_offers_the_shared_memory_split_on_the_operands_in_place():
    """The gemm_tf32x3s kernels read A and B as the caller holds them, B as N x K (tn) or K x N (nn, which transposes
    it in shared memory): no split step, no copy, batched on grid.z (K = 520: rows of 2080 bytes, which a tensor map
    reads in place). A tn kernel takes B held K x N after a transposing copy; an nn kernel leaves B held N x K to the
    tn ones. They declare fp32 accuracy, so an fp32 request may run them and no one-pass TF32 kernel; they are priced
    at their own rate, the nn ones at a share of it."""
    names = [n for n, s in MANIFEST.kernels.items() if costmodel.smem_split(s)]
    assert {MANIFEST.kernels[n].layout for n in names} == {"TN", "NN"}
    assert all(MANIFEST.kernels[n].acc == "f32" and MANIFEST.kernels[n].dtype == "f32" for n in names)
    model = costmodel.CostModel.for_device(HOPPER, 132, MANIFEST)
    for name in names:
        spec = MANIFEST.kernels[name]
        own, other = ("col", "row") if spec.layout == "TN" else ("row", "col")
        r = planner.recipe_for(problem.Route(name, False, (("splits", 2),)), _problem(300, 200, 520, b_order=own,
                                                                                     batch=(3,)), MANIFEST)
        assert r is not None and len(r.steps) == 1 and r.loop == (), planner.describe(r)
        g = r.steps[0]
        assert (g.a.base, g.b.base, g.c.base, g.splits, g.batch) == ("A", "B", "C", 2, (3,)), planner.describe(r)
        r = planner.recipe_for(problem.Route(name, False, ()), _problem(300, 200, 520, b_order=other), MANIFEST)
        if spec.layout == "TN":
            assert [s.dst.base for s in r.steps[:-1]] == ["tB"], planner.describe(r)
        else:
            assert r is None
        # the rate its toml declares (an nn kernel's below its tn twin's: B transposed in shared memory)
        assert model.kernel_tflops(spec) == spec.rate_tflops and spec.rate_source
        twin = MANIFEST.kernels.get(name[:-2] + "tn")
        if spec.layout == "NN" and twin is not None:
            assert spec.rate_tflops < twin.rate_tflops


@needs_manifest
def test_shared_memory_split_slices_pay_a_fixed_cost_and_scaled_splits_their_maxima_pass(monkeypatch):
    """The cost model's rules for these kernels: a K slice costs SMEM_SPLIT_FIXED_US beyond its K at the kernel's
    rate, uncapped; unsplit only where the grid is one wave (beyond it the rate holds); a cluster's sum adds per
    piece beyond two; and a scaled split step (3xFP16) carries scaled_split_us for its maxima pass."""
    model = costmodel.CostModel.for_device(HOPPER, 132, MANIFEST)
    name = next(n for n, s in MANIFEST.kernels.items() if costmodel.smem_split(s) and s.tile[:2] == (64, 64))
    spec = MANIFEST.kernels[name]

    def gemm(K, splits=1, batch=()):
        p = _problem(256, 256, K, b_order="col" if spec.layout == "TN" else "row", batch=batch)
        return problem.Gemm(name, spec.role, p.a, p.b, p.c, 256, 256, K, splits=splits, batch=batch)

    short_k = SMEM_SPLIT_FIXED_US * 1e-6 * model.kernel_tflops(spec) * 1e12 / 132 / (2 * 64 * 64)
    assert model.split_factor(spec, gemm(256, 4)) == pytest.approx(1 + short_k / 64)
    assert model.split_factor(spec, gemm(256, 8)) > 2.0  # uncapped
    assert model.split_factor(spec, gemm(256)) == pytest.approx(1 + short_k / 256)  # 16 tiles: one wave
    assert model.split_factor(spec, gemm(256, batch=(64,))) == 1.0  # 1024 tiles
    sum_us = costmodel.SMEM_SPLIT_SUM_US
    with_sum = [model.gemm_us(spec, gemm(4096, s), "f32") for s in (2, 8)]
    monkeypatch.setattr(costmodel, "SMEM_SPLIT_SUM_US", 0.0)
    without = [model.gemm_us(spec, gemm(4096, s), "f32") for s in (2, 8)]
    assert with_sum[0] == without[0]  # two pieces: nothing added
    waves = -(-16 * 8 // model.cta_slots(spec, 8))  # 16 tiles x 8 pieces in clusters of 8 (120 fit at once: 2)
    assert with_sum[1] - without[1] == pytest.approx(waves * sum_us * (8 - 2) * 64 * 64 / (128 * 128))
    x3 = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_f16x3")
    r = planner.recipe_for(problem.Route(x3, False, ()), _problem(512, 512, 512), MANIFEST)
    split = _x3(r)[0][0]
    unscaled = problem.Copy(split.kernel, split.src, split.dst, split.src_rows, split.src_cols, False, batch=split.batch)
    assert model.copy_us(split, "f32") > model.copy_us(unscaled, "f32") + costmodel.HOPPER.scaled_split_us - 1e-9


@needs_manifest
def test_a_batched_3xfp16_splits_every_matrix_in_one_launch_and_3xtf32_takes_none():
    """3xFP16's kernels take a batch (grid.z): one split launch per operand writes a plane stack and a row of
    exponents per matrix it varies over (B broadcast along the outer level: 3 of them), and the GEMM's maps hold
    the stacks as their outermost dimension. 3xTF32's take one matrix."""
    b = problem.View.make("B", 80, 48, 48, 1, 256, (0, 80 * 48))  # broadcast along the outer level
    prob = replace(_problem(64, 48, 80, batch=(2, 3)), b=b)
    x3 = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_f16x3")
    r = planner.recipe_for(problem.Route(x3, False, (("splits", 1),)), prob, MANIFEST)
    (sa, sb), gemm = _x3(r)
    assert r.loop == () and gemm.batch == (2, 3) and (sa.batch, sb.batch) == ((2, 3), (1, 3)), planner.describe(r)
    temps = {t.name: t for t in r.temps}
    stack_a, stack_b = 4 * 64 * 32, 4 * 48 * 32  # 4 planes (2 k-blocks of 64) of rows x 32 fp32 units
    assert (temps[sa.dst.base].count, temps[sb.dst.base].count, temps[sb.shift.base].count) == (6, 3, 3)
    assert (sa.dst.bs, sa.shift.bs, sb.dst.bs, sb.shift.bs) == ((3 * stack_a, stack_a), (3 * 64, 64), (0, stack_b), (0, 48))
    assert split_planes(gemm.a, 64, 4, gemm.batch)[0] == (6, 4, 64, 32)
    assert split_planes(gemm.b, 48, 4, gemm.batch)[0] == (3, 4, 48, 32)
    tf32 = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_tf32x3")
    assert planner.recipe_for(problem.Route(tf32, False, (("splits", 1),)), prob, MANIFEST) is None


@needs_manifest
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_fp32_accuracy_on_hopper_plans_the_3xfp16_split_with_row_exponents(b_order):
    M, N, K = 4096, 3072, 1000
    recipe = planner.heuristic_recipe(_problem(M, N, K, b_order=b_order), MANIFEST, HOPPER, 132)
    text = planner.describe(recipe)
    (sa, sb), gemm = _x3(recipe)
    assert MANIFEST.kernels[gemm.kernel].role == "gemm_f16x3" and (gemm.M, gemm.N, gemm.K) == (M, N, K), text
    planes = 2 * -(-K // 64)  # a head and a residual plane per 64-column k-block, 128-byte rows
    assert (sa.src.base, sa.src_rows, sa.src_cols, sa.dst.rows, sa.dst.cols) == ("A", M, K, planes * M, 32), text
    assert (sb.src.base, sb.src_rows, sb.src_cols, sb.dst.rows, sb.dst.cols) == ("B", N, K, planes * N, 32), text
    assert (sa.shift.cols, sb.shift.cols) == (M, N) and (gemm.a_shift, gemm.b_shift) == (sa.shift, sb.shift), text
    assert {sa.shift.base, sb.shift.base} <= {t.name for t in recipe.temps} and "rows scaled" in text
    launches = executor.launch_dependencies(list(recipe.steps), 1)
    assert launches[1] == () and set(launches[2]) == {0, 1}, launches  # the splits side by side, then the GEMM


def _f16x3_pieces(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """matmul_split_f16x3's pieces of each row of x (float32) in float64: hi, lo (fp16, scaled) and the row's exponent."""
    top = np.abs(np.where(np.isfinite(x), x, 0)).max(axis=1)
    shift = np.where(top > 0, 14 - np.floor(np.log2(np.where(top > 0, top, 1))), 0)
    y = x.astype(np.float64) * 2.0 ** shift[:, None]  # exact
    hi = y.astype(np.float16)
    lo = (y - hi.astype(np.float64)).astype(np.float32).astype(np.float16)  # y - hi is exact in fp32
    return hi.astype(np.float64), lo.astype(np.float64), shift


def test_three_fp16_products_of_scaled_rows_carry_fp32_accuracy(rng):
    """What gemm_f16x3 sums, in float64: ~2^-22 from the dropped lo(a) lo(b) and the residuals' rounding, with rows of
    A and columns of B 2^-60..2^60 apart (each row its own power-of-two scale); one fp16 head product leaves ~2^-11,
    and one scale for the whole operand flushes the small rows."""
    a = rng.standard_normal((64, 300)) * 2.0 ** rng.integers(-60, 61, (64, 1))
    b = rng.standard_normal((300, 48)) * 2.0 ** rng.integers(-60, 61, (1, 48))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    exact = a32.astype(np.float64) @ b32.astype(np.float64)
    (ah, al, ea), (bh, bl, eb) = _f16x3_pieces(a32), _f16x3_pieces(b32.T)
    unscale = 2.0 ** -(ea[:, None] + eb[None, :])
    scale = np.outer(np.linalg.norm(a32.astype(np.float64), axis=1), np.linalg.norm(b32.astype(np.float64), axis=0))
    for got, bound in (((al @ bh.T + ah @ bl.T + ah @ bh.T) * unscale, 2.0 ** -20), ((ah @ bh.T) * unscale, None)):
        err = np.max(np.abs(got - exact) / scale)
        assert err < bound if bound else err > 2.0 ** -16, err


def test_three_tf32_products_carry_fp32_accuracy(rng):
    """What gemm_tf32x3 sums (lo(a) hi(b) + hi(a) lo(b) + hi(a) hi(b) of matmul_split_tf32's pieces), in float64:
    ~2^-21 from the dropped lo(a) lo(b) and the residuals' rounding, where one TF32 pass leaves ~2^-11."""
    a = rng.standard_normal((64, 300)) * 2.0 ** rng.uniform(-20, 20, (64, 300))
    b = rng.standard_normal((300, 48)) * 2.0 ** rng.uniform(-20, 20, (300, 48))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    exact = a32.astype(np.float64) @ b32.astype(np.float64)

    def pieces(x):
        hi = _tf32_rn(x)
        return hi.astype(np.float64), _tf32_rn(x - hi).astype(np.float64)

    (ah, al), (bh, bl) = pieces(a32), pieces(b32)
    for got, bound in ((al @ bh + ah @ bl + ah @ bh, 2.0 ** -19), (ah @ bh, None)):
        err = np.linalg.norm(got - exact) / np.linalg.norm(exact)
        assert err < bound if bound else err > 2.0 ** -16, err


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

def _cublas_sgemm(a: GuardedArray, b: GuardedArray, want: np.ndarray) -> np.ndarray:
    """cuBLAS's fp32 SGEMM (GemmEx, COMPUTE_32F: no TF32) on the same inputs."""
    from hgemm_rt import cublas

    try:
        c = hg.empty(want.shape, "f32")
        cublas.matmul(a.view, b.view, c, acc="f32")
        return c.to_numpy().astype(np.float64)
    except (ImportError, RuntimeError) as exc:  # no cuBLAS: no baseline to hold the routes to
        pytest.skip(f"cuBLAS is not available for the baseline error: {exc}")


def _cublas_sgemm_error(a: GuardedArray, b: GuardedArray, want: np.ndarray) -> float:
    """cuBLAS's fp32 SGEMM's relative error on these inputs."""
    got = _cublas_sgemm(a, b, want)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


SHAPES = [(1, 1, 1), (7, 5, 3), (97, 141, 100), (256, 384, 1000), (300, 257, 4099), (1024, 1024, 1024)]


def _values(rng, shape, kind):
    """N(0,1); times 2^u per entry, u uniform in -20..20 ("wide"); or times 2^u per row ("rows", for A) or per
    column ("cols", for B), u an integer in -50..50."""
    v = rng.standard_normal(shape)
    if kind == "wide":
        return v * 2.0 ** rng.uniform(-20, 20, shape)
    if kind == "rows":
        return v * 2.0 ** rng.integers(-50, 51, (shape[0], 1))
    if kind == "cols":
        return v * 2.0 ** rng.integers(-50, 51, (1, shape[1]))
    return v


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("wide", [False, True], ids=["normal", "magnitudes-2^-20..2^20"])
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_every_split_route_is_as_accurate_as_cublas_sgemm(M, N, K, b_order, wide, kind, rng):
    _check_split_routes(rng, M, N, K, b_order, kind, "wide" if wide else "normal", "wide" if wide else "normal")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_split_routes_keep_each_row_and_column_at_its_own_scale(b_order, kind, rng):
    """Rows of A and columns of B 2^-50..2^50 apart: every entry of C to fp32 accuracy at its own scale, |a_i| |b_j|
    (a scale shared by the whole operand would flush the small rows and columns)."""
    _check_split_routes(rng, 300, 200, 515, b_order, kind, "rows", "cols", per_entry=True)


@pytest.mark.gpu
def test_shared_memory_split_is_not_finite_exactly_where_cublas_is_not(rng):
    """An inf or NaN operand entry has no residual (its head carries it): C is inf or NaN exactly where cuBLAS SGEMM's
    is, and every other entry at fp32 accuracy. (Where an inf head meets a residual of 0, the product is NaN where
    cuBLAS has inf, as with any 3xTF32.)"""
    a = rng.standard_normal((130, 100))
    b = rng.standard_normal((100, 70))
    a[3, 5], a[7, :] = np.inf, 0.0
    a[7, 9], b[11, 4] = -np.inf, np.nan
    ga, gb = GuardedArray(a, "f32", "row", 0, 0), GuardedArray(b, "f32", "col", 0, 0)
    gc = GuardedArray(np.zeros((130, 70)), "f32", "row", 0, 0)
    from hgemm_rt import api

    prob = api.problem_of(api.validate_call(ga.view, gb.view, gc.view, 1.0, 0.0, "f32", "auto", None))
    want = _cublas_sgemm(ga, gb, np.zeros((130, 70)))
    plans = [r for r in (planner.recipe_for(problem.Route(n, False, ()), prob, MANIFEST)
                         for n, spec in MANIFEST.kernels.items() if costmodel.smem_split(spec)) if r is not None]
    tested = 0
    for plan, got in each_route(prob, "f32", ga, gb, gc, 1.0, 0.0, plans=plans):
        got = np.asarray(got, np.float64)
        finite = np.isfinite(want)
        assert np.array_equal(np.isfinite(got), finite) and 0 < finite.sum() < finite.size, planner.describe(plan)
        assert np.max(np.abs(got[finite] - want[finite])) <= 1e-5 * np.max(np.abs(want[finite])), planner.describe(plan)
        tested += 1
    assert tested >= 2


def _check_split_routes(rng, M, N, K, b_order, kind, a_kind, b_kind, per_entry=False):
    a = GuardedArray(_values(rng, (M, K), a_kind), "f32", "row", 1, 0)
    b = GuardedArray(_values(rng, (K, N), b_kind), "f32", b_order, 0, 3)
    c = GuardedArray(np.zeros((M, N)), "f32", "row", 0, 0)
    from hgemm_rt import api

    prob = api.problem_of(api.validate_call(a.view, b.view, c.view, 1.0, 0.0, "f32", "auto", None))
    want = a.exact @ b.exact
    cublas_err = _cublas_sgemm_error(a, b, want)
    # at K = 1-3 cuBLAS rounds once (~2^-24) where 3xTF32 drops lo(a) lo(b) and the residuals' rounding (~2^-21)
    bound = max(2 * cublas_err, 2.0 ** -20)
    routes = [problem.Route(n, t, (("splits", s),)) for n, spec in MANIFEST.kernels.items()
              if KINDS[kind](spec) for t in (False, True) for s in SPLITS]
    plans = [r for r in (planner.recipe_for(route, prob, MANIFEST) for route in routes) if r is not None]
    # per entry: |C - C64| / (|a_i| |b_j|), its worst over C, held to twice cuBLAS SGEMM's worst, at least 2^-20 (the
    # worst of 60000 entries moves between draws; a row or column flushed to zero by a shared scale is ~K^-1/2 off)
    scale = np.outer(np.linalg.norm(a.exact, axis=1), np.linalg.norm(b.exact, axis=0))
    worst = (lambda x: float(np.max(np.abs(np.asarray(x, np.float64) - want) / scale))) if per_entry else None
    if worst is not None:
        bound = max(2 * worst(_cublas_sgemm(a, b, want)), 2.0 ** -20)
    tested, bad = 0, []
    for plan, got in each_route(prob, "f32", a, b, c, 1.0, 0.0, plans=plans):
        err = worst(got) if worst is not None else rel_error(got, want)
        tested += 1
        if not err <= bound or not c.outside_untouched():
            bad.append(f"{planner.describe(plan)}: {err:.2e} > {bound:.2e} (cuBLAS SGEMM {cublas_err:.2e})")
    assert tested >= 2 and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", BATCHED_KINDS)
def test_batched_fp32_runs_every_batched_split_route(kind, rng):
    """A batch of 2 x 3 matrices (B broadcast along the first level and column-major, C with gaps, alpha and beta)
    through every split route of `kind`, one launch a step: every matrix at fp32 accuracy, nothing around C
    written."""
    from hgemm_rt import api

    a = GuardedArray(rng.standard_normal((2, 3, 130, 300)), "f32", offset=1)
    b = GuardedArray(rng.standard_normal((3, 300, 70)), "f32", order="col", pad=3)
    c = GuardedArray(rng.standard_normal((2, 3, 130, 70)), "f32", pad=2, gap=5)
    prob = api.problem_of(api.validate_call(a.view, b.view, c.view, 0.5, 0.25, "f32", "auto", None))
    want = 0.5 * np.matmul(a.exact, b.exact) + 0.25 * c.exact
    routes = [problem.Route(n, t, (("splits", s),)) for n, spec in MANIFEST.kernels.items()
              if KINDS[kind](spec) for t in (False, True) for s in (1, 2)]
    plans = [r for r in (planner.recipe_for(route, prob, MANIFEST) for route in routes) if r is not None]
    tested = 0
    for plan, got in each_route(prob, "f32", a, b, c, 0.5, 0.25, plans=plans):
        err = rel_error(got, want)
        assert not plan.loop and err <= 1e-6 and c.outside_untouched(), (planner.describe(plan), err)
        tested += 1
    assert tested >= 2


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
        err = rel_error(got, want)
        assert err <= bound, (acc, err, hg.explain(da, db, accumulate=acc))
    assert "split" in hg.explain(da, db) and "tf32" in hg.explain(da, db, accumulate="tf32")
