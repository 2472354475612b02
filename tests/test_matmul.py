"""hgemm_rt.matmul: argument errors, planning and the autotune cache on the CPU; on the GPU a
hypothesis fuzz over shapes (1, primes, ragged), dtypes, layouts, strides, misaligned pointers and
alpha/beta against a float64 reference, every route forced once, the small-M and padding paths,
torch/DLPack zero-copy interop, numpy in/out and CUDA-graph capture.

Operands are built as views into larger buffers whose surroundings hold NaN bit patterns: a kernel
that reads outside its view poisons the result, and the bytes around `out` are checked unchanged.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hgemm_rt as hg
from hgemm_rt import DeviceArray, planner, problem, tuning
from hgemm_rt.api import repeat_key
from hgemm_rt.dtypes import ITEMSIZE, STORAGE, storage_to_f64
from hgemm_rt.errors import UnknownKernelError, ValidationError
from hgemm_bench.matmul_checks import download
from hgemm_rt.numerics import error_floor
from hgemm_rt.roles import SPLIT_FORMATS
from hgemm_rt.roles.base import MULTICAST
from hgemm_rt.roles.gemm import LONG_LAUNCH_MACS, STAGES, WHOLE_TILE_STAGES
from hgemm_rt.roles.gemm_strided_stream import STREAM_SPLIT_COST
from hgemm_rt.roles.gemm_strided_wgmma import k_sum_work_bytes
from hgemm_rt.roles.glue import SPLITS, SPLIT_ROW, fits
from guarded import GuardedArray, each_route
from kernel_cases import load_manifest_or_none
from interop import OnlyDlpack
from threads import errors_from_threads

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
# the compute capabilities this build can serve (the SIMT fallback is built for each of them)
CCS = sorted({(int(a[0]), int(a[1])) for a in MANIFEST.kernels["matmul_gemm_simt_f16"].builds if not a.endswith("a")}) \
    if MANIFEST and "matmul_gemm_simt_f16" in MANIFEST.kernels else [(9, 0)]


# ---------------------------------------------------------------------------------------------------
# CPU: argument errors, before anything touches a GPU
# ---------------------------------------------------------------------------------------------------

def _fake(ptr, shape, dtype="f16", **kw):
    """A DeviceArray that was never allocated: validation must refuse it without any driver call."""
    return DeviceArray(ptr, shape, dtype, **kw)


H16 = lambda *s: np.zeros(s, np.float16)  # noqa: E731

ERRORS = [
    ("dtype mismatch", lambda: hg.matmul(H16(3, 4), np.zeros((4, 5), np.float32))),
    ("inner dimensions differ", lambda: hg.matmul(H16(3, 4), H16(5, 5))),
    ("do not broadcast", lambda: hg.matmul(H16(2, 3, 4), H16(3, 4, 5))),
    ("B must be 2-D", lambda: hg.matmul(H16(3, 4), H16(4))),
    ("A must be 2-D", lambda: hg.matmul(H16(4), H16(4, 5))),
    ("inner dimensions differ", lambda: hg.matmul(H16(2, 3, 4, 1), H16(4, 5))),
    ("out has shape", lambda: hg.matmul(_fake(0x10000, (2, 3, 4)), _fake(0x20000, (4, 5)), out=_fake(0x30000, (6, 5)))),
    ("out has shape", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (2, 4, 5)), out=_fake(0x30000, (3, 5)))),
    ("unsupported dtype", lambda: hg.matmul(np.zeros((3, 4)), np.zeros((4, 5)))),
    ("different GPUs", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5), device=1))),
    ("read-only", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                    out=_fake(0x30000, (3, 5), readonly=True))),
    ("overlaps A", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), out=_fake(0x10004, (3, 5)))),
    ("overlaps B", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                     out=_fake(0x1fff0, (3, 5), strides=(2, 6)))),
    ("share memory", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                       out=_fake(0x30000, (3, 5), strides=(0, 2)))),
    ("out has shape", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), out=_fake(0x30000, (3, 6)))),
    ("out has dtype", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                        out=_fake(0x30000, (3, 5), "f32"))),
    ("accumulate='tf32'", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), accumulate="tf32")),
    ("accumulate='f16'", lambda: hg.matmul(_fake(0x10000, (3, 4), "f32"), _fake(0x20000, (4, 5), "f32"),
                                           accumulate="f16")),
    ("M, N, K must be >= 1", lambda: hg.matmul(_fake(0x10000, (3, 0)), _fake(0x20000, (0, 5)))),
    ("whole", lambda: hg.matmul(_fake(0x10000, (3, 4), strides=(8, 3)), _fake(0x20000, (4, 5)))),
    ("alpha must be a real number", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), alpha="x")),
    ("alpha must be a real number", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), alpha=True)),
    ("beta=inf is not a finite fp32", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                                        out=_fake(0x30000, (3, 5)), beta=float("inf"))),
    ("alpha=nan is not a finite fp32", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                                         alpha=float("nan"))),
    ("alpha=1e\\+300 is not a finite fp32", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)),
                                                            alpha=1e300)),
    ("alpha must be a real number", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), alpha=10**400)),
    ("not a pointer value", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), stream=-1)),
    ("cannot use", lambda: hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), stream=object())),
    ("share memory", lambda: hg.matmul(H16(3, 4), H16(4, 5),
                                       out=np.lib.stride_tricks.as_strided(np.zeros(5, np.float16), (3, 5), (0, 2)))),
    ("read-only", lambda: hg.matmul(H16(3, 4), H16(4, 5), out=_readonly(np.zeros((3, 5), np.float16)))),
]


def _readonly(x):
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("match,fn", ERRORS, ids=[f"{i}-{m}" for i, (m, _) in enumerate(ERRORS)])
def test_bad_arguments_are_refused_before_any_gpu_work(match, fn):
    with pytest.raises(ValidationError, match=match.replace("(", r"\(").replace("'", "'")):
        fn()


def test_numpy_out_aliasing_an_input_is_refused():
    x = np.zeros((4, 4), np.float16)
    with pytest.raises(ValidationError, match="overlaps A"):
        hg.matmul(x, np.ones((4, 4), np.float16), out=x)


@needs_manifest
def test_unknown_kernel_names_close_matches():
    with pytest.raises(UnknownKernelError, match="did you mean"):
        hg.matmul(_fake(0x10000, (3, 4)), _fake(0x20000, (4, 5)), kernel="matmul_gemm_simt_f1")


# ---------------------------------------------------------------------------------------------------
# CPU: plans honour every kernel's contract
# ---------------------------------------------------------------------------------------------------

def test_a_graph_runs_the_copies_of_different_operands_side_by_side_and_orders_what_shares_a_buffer():
    from hgemm_rt.executor import launch_dependencies

    v = lambda base: problem.View.make(base, 64, 64, 64, 1, 256)  # noqa: E731
    copy = lambda src, dst, epi=False: problem.Copy("matmul_copy2d_f16", v(src), v(dst), 64, 64, epi)  # noqa: E731
    gemm = problem.Gemm("k", "gemm_strided_wgmma", v("tA"), v("tB"), v("tC"), 64, 64, 64)
    steps = [copy("A", "tA"), copy("B", "tB"), gemm, copy("tC", "C", True)]
    assert launch_dependencies(steps, 1) == [(), (), (0, 1), (2,)]
    # a loop of launches reuses the temporaries: round 2's copies wait for round 1's GEMM (which read them), its
    # GEMM for round 1's copy-out (which read tC)
    deps = launch_dependencies(steps, 2)
    assert deps[4] == (0, 2) and deps[5] == (1, 2) and deps[6] == (0, 1, 2, 3, 4, 5) and deps[7] == (2, 3, 6)
    # a GEMM and the sum of its deferred K groups: the sum reads the workspace the GEMM writes
    work = v("tW")
    gsum = problem.GroupSum("s", work, v("C"), 64, 64, 4)
    from hgemm_rt.roles.gemm_strided_wgmma import KGroups
    assert launch_dependencies([replace(gemm, c=v("C"), work=work, options=KGroups(4, True)), gsum], 1) == [(), (0,)]


def _view(base, rows, cols, order, pad=0, align=256):
    if order == "row":
        return problem.View.make(base, rows, cols, cols + pad, 1, align)
    if order == "col":
        return problem.View.make(base, rows, cols, 1, rows + pad, align)
    return problem.View.make(base, rows, cols, 2 * cols + pad, 2, align)  # neither stride is 1


def _problem(M, N, K, dtype="f16", acc=None, orders=("row", "row", "row"), pads=(0, 0, 0), aligns=(256,) * 3,
             plain=True):
    acc = acc or problem.ACCUMULATE[dtype][0]
    a = _view("A", M, K, orders[0], pads[0], aligns[0])
    b = _view("B", K, N, orders[1], pads[1], aligns[1])
    c = _view("C", M, N, orders[2], pads[2], aligns[2])
    return problem.Problem(dtype, acc, a, b, c, plain=plain, beta_zero=plain)


def _check_plan_contract(plan, prob, manifest):
    """Every catalogue GEMM step gets shapes its `require` takes and operands that fit its ABI; every
    copy stays inside its source; the last step writes C."""
    if prob.batched:
        _check_batched_contract(plan, prob, manifest)
    temps = {t.name: t for t in plan.temps}
    for step in plan.steps:
        if isinstance(step, problem.Split):  # a head and a residual plane per k-block, 128-byte rows
            fmt = step.format
            assert step.dst.cols == SPLIT_ROW and step.dst.rows == 2 * -(-step.src_cols // fmt.block) * step.src_rows
            assert (step.shift is not None) == fmt.scaled and (not fmt.scaled or step.shift.cols == step.src_rows)
            continue
        if isinstance(step, problem.Copy):
            assert step.src_rows <= step.dst.rows and step.src_cols <= step.dst.cols or step.applies_alpha_beta
            continue
        if isinstance(step, problem.GroupSum):  # the planes the deferred K-groups GEMM before it wrote
            (gemm,) = [s for s in plan.steps if isinstance(s, problem.Gemm)]
            assert gemm.k_deferred and gemm.work == step.work and gemm.k_groups == step.groups
            assert (step.M, step.N) == (gemm.M, gemm.N) and step.work.cols * temps[step.work.base].count >= \
                k_sum_work_bytes(step.M, step.N, step.groups) // ITEMSIZE[prob.dtype]
            continue
        spec = manifest.kernels[step.kernel]
        if step.role == "gemm":
            for dim, v in (("M", step.M), ("N", step.N), ("K", step.K)):
                assert v % spec.require.get(dim, 1) == 0, (step, dim)
            tm = planner.tmap_operands(spec)
            b_dims = (step.K, step.N) if spec.layout == "NN" else (step.N, step.K)
            # a column-major-A kernel reads A^T (K x M row-major) through its tensor map
            a = (step.a.T, (step.K, step.M)) if spec.a_order == "col" else (step.a, (step.M, step.K))
            for name, v, dims in (("A", *a), ("B", step.b, b_dims), ("C", step.c, (step.M, step.N))):
                assert fits(v, *dims, tma=name in tm, align=spec.align, itemsize=ITEMSIZE[prob.dtype]), (step, name)
                if v.base in temps:
                    assert (temps[v.base].rows, temps[v.base].cols) == dims
        elif step.role in planner.LEADING_DIM_ROLES:
            assert step.a.cs == 1 and (step.M == 1 or step.a.rs % 8 == 0) and step.a.align >= 16
            lay = dict(step.variant)["b"]
            ld = step.b.rs if lay == "row" else step.b.cs
            assert (step.b.cs if lay == "row" else step.b.rs) == 1 and step.b.align >= 16
            assert ld % 8 == 0 or (step.K == 1 if lay == "row" else step.N == 1)
            assert step.splits in SPLITS
        elif step.role == "gemm_strided_wgmma":
            b_dims = (step.K, step.N) if spec.layout == "NN" else (step.N, step.K)
            for v, dims in ((step.a, (step.M, step.K)), (step.b, b_dims)):
                rows, cols = (v.rows, v.cols)
                assert v.cs == 1 and v.align >= 16 and v.rs * ITEMSIZE[prob.dtype] % 16 == 0 and v.rs >= cols
                assert rows == dims[0] and cols >= dims[1]  # a packed operand may carry zero columns
            assert step.splits in SPLITS
        elif step.role in SPLIT_FORMATS:  # A's and B^T's planes (and exponents), as their split steps wrote them
            made = {s.dst.base: s for s in plan.steps if isinstance(s, problem.Split)}
            sa, sb = made[step.a.base], made[step.b.base]
            assert (sa.src_rows, sb.src_rows) == (step.M, step.N) and sa.src_cols == sb.src_cols == step.K
            assert sa.format == sb.format == SPLIT_FORMATS[step.role]
            assert (step.a_shift, step.b_shift) == (sa.shift, sb.shift)
            assert step.splits in SPLITS and (not prob.batched or SPLIT_FORMATS[step.role].batched)
    last = plan.steps[-1]
    assert (last.dst.base if isinstance(last, problem.Copy) else last.c.base) == "C"


def _check_batched_contract(plan, prob, manifest):
    """A batched plan (the per-matrix contract is _check_plan_contract's): strided roles only; every launch's
    grid.z (splits x matrices) within 65535; every matrix of A and B at an address its kernel takes (16-byte
    multiples of batch strides for mma.sync, TMA's rules for the tensor maps); a copy per matrix along every
    level its source varies on, and a broadcast level copied once and read broadcast; temporaries holding
    every matrix they are addressed at, reused (not strided) across the loop levels; C at its own strides."""
    isz = ITEMSIZE[prob.dtype]
    nl = len(prob.batch)
    kernel_levels = range(max(nl - problem.KERNEL_LEVELS, 0), nl)
    assert plan.loop == prob.batch[:-problem.KERNEL_LEVELS]
    temps = {t.name: t for t in plan.temps}
    sources = {}  # temporary -> the view its copy read
    for step in plan.steps:
        outer, inner = problem.kernel_batch(step.batch)
        views = (step.src, step.dst) if isinstance(step, (problem.Copy, problem.Split)) else (step.a, step.b, step.c)
        assert len(step.batch) == nl and all(len(v.bs) == nl for v in views), step
        for v in views:
            if v.base in temps:
                assert all(v.bstride(level) == 0 for level in range(nl) if level not in kernel_levels), v
        if isinstance(step, (problem.Copy, problem.Split)):
            assert outer * inner <= problem.MAX_GRID_BATCH
            for level in range(nl):
                if step.batch[level] == 1 and prob.batch[level] > 1:
                    assert level in kernel_levels and step.src.bstride(level) == 0 and step.dst.bstride(level) == 0
                else:
                    assert step.batch[level] == prob.batch[level]
            if step.dst.base in temps:
                t = temps[step.dst.base]
                counted = [(step.dst.bstride(level), step.batch[level]) for level in kernel_levels
                           if step.dst.bstride(level)]
                size = t.rows * t.row_stride  # dense: inner level innermost, one matrix after another
                for stride, n in sorted(counted):
                    assert stride == size, (t, counted)
                    size *= n
                assert size == t.count * t.rows * t.row_stride, (t, counted)
                sources[step.dst.base] = step.src
            continue
        spec = manifest.kernels[step.kernel]
        assert spec.role != "gemm" and step.batch == prob.batch
        assert step.splits * outer * inner <= problem.MAX_GRID_BATCH
        for v, user in ((step.a, prob.a), (step.b, prob.b)):
            if v.base in temps:  # read along exactly the levels the copy wrote
                src = sources[v.base]
                assert all((v.bstride(level) == 0) == (src.bstride(level) == 0) for level in kernel_levels), (v, src)
            elif v.base in ("A", "B"):
                assert v.bs == next(u for u in (prob.a, prob.b) if u.base == v.base).bs
            if step.role in planner.LEADING_DIM_ROLES:
                assert all(s * isz % 16 == 0 for s in v.bs), v
            elif step.role == "gemm_strided_wgmma":
                assert all(0 <= s * isz < 2**40 and s * isz % 16 == 0 for s in v.bs), v
        assert step.c.base != "C" or step.c.bs == prob.c.bs


@needs_manifest
@settings(max_examples=150, deadline=None)
@given(M=st.integers(1, 5000), N=st.integers(1, 5000), K=st.integers(1, 5000),
       dtype=st.sampled_from(["f16", "bf16", "f32"]),
       orders=st.tuples(*[st.sampled_from(["row", "col", "gen"])] * 3),
       pads=st.tuples(*[st.integers(0, 9)] * 3), aligns=st.tuples(*[st.sampled_from([2, 4, 8, 16, 256])] * 3),
       plain=st.booleans(), cc=st.sampled_from(CCS))
def test_every_plan_respects_the_kernel_contracts(M, N, K, dtype, orders, pads, aligns, plain, cc):
    prob = _problem(M, N, K, dtype, orders=orders, pads=pads, aligns=aligns, plain=plain)
    ranked = planner.ranked_recipes(prob, MANIFEST, cc, 132)
    assert ranked, "no route at all: the SIMT fallback must always be there"
    for _, plan in ranked:
        _check_plan_contract(plan, prob.transposed() if plan.route.transpose else prob, MANIFEST)


def _batched_problem(M, N, K, dtype, orders, pads, aligns, plain, batch, kinds):
    """A batched _problem: per operand and level a batch stride of kind 0 (broadcast), 1 (the dense stride
    past the matrix's extent), 2 (that, plus an odd element count) or 3 (an odd stride across levels)."""
    base = _problem(M, N, K, dtype, orders=orders, pads=pads, aligns=aligns, plain=plain)
    views = []
    for v, ks in zip((base.a, base.b, base.c), kinds):
        extent = (v.rows - 1) * abs(v.rs) + (v.cols - 1) * abs(v.cs) + 1
        bs, step = [], extent
        for level in reversed(range(len(batch))):
            kind = ks[level]
            stride = 0 if kind == 0 else step + (7 if kind == 2 else 0) if kind != 3 else step * 3 + 1
            bs.append(stride)
            step = max(step, stride * batch[level]) if stride else step
        bs = tuple(reversed(bs))
        if v.base == "C":  # out never overlaps itself: broadcast levels are not an out's
            bs = tuple(s or max(bs + (extent,)) * 2 ** (level + 1) * max(batch) for level, s in enumerate(bs))
        views.append(problem.View.make(v.base, v.rows, v.cols, v.rs, v.cs,
                                       problem.batch_align(v.align, bs, ITEMSIZE[dtype]), bs))
    return problem.Problem(dtype, base.acc, *views, plain=plain, beta_zero=plain, batch=batch)


@needs_manifest
@settings(max_examples=120, deadline=None)
@given(M=st.integers(1, 700), N=st.integers(1, 700), K=st.integers(1, 700),
       dtype=st.sampled_from(["f16", "bf16", "f32"]),
       orders=st.tuples(*[st.sampled_from(["row", "col", "gen"])] * 3),
       pads=st.tuples(*[st.integers(0, 9)] * 3), aligns=st.tuples(*[st.sampled_from([2, 16, 256])] * 3),
       plain=st.booleans(), cc=st.sampled_from(CCS),
       batch=st.lists(st.sampled_from([2, 3, 7, 64, 4000, 20000]), min_size=1, max_size=3).map(tuple),
       kinds=st.tuples(*[st.lists(st.sampled_from([0, 1, 1, 2, 3]), min_size=3, max_size=3)] * 3))
def test_every_batched_plan_respects_the_kernel_contracts(M, N, K, dtype, orders, pads, aligns, plain, cc, batch,
                                                          kinds):
    prob = _batched_problem(M, N, K, dtype, orders, pads, aligns, plain, batch, kinds)
    ranked = planner.ranked_recipes(prob, MANIFEST, cc, 132)
    if problem.kernel_batch(batch)[0] * problem.kernel_batch(batch)[1] > problem.MAX_GRID_BATCH:
        assert not ranked, "api.py never makes a problem whose kernel levels pass grid.z's limit"
        return
    assert ranked, "no route at all: the SIMT fallback must always be there"
    assert all(not MANIFEST.kernels[s.kernel].role == "gemm" for _, plan in ranked for s in plan.steps)
    for _, plan in ranked:
        _check_plan_contract(plan, prob.transposed() if plan.route.transpose else prob, MANIFEST)


@needs_manifest
@needs_manifest
def test_the_128_x_192_tiles_go_where_256_wide_ones_leave_a_wave_part_empty():
    """H100, fp16, B as nn.Linear holds it: 1024 x 6144 x 4096 ran 72.9 us on them (256 tiles, 1.94 waves) against
    90.8 on 128 x 256 tiles (1.45 waves) and 77.9 stream-K; 3072^3 84.0 against 104.4. Where the 256-wide tiles
    fill their waves they stay (4096^3: 206.6 against 225.6; 2048 x 6144 x 4096 147.7 against 152.6)."""
    narrow = {n for n, s in MANIFEST.kernels.items() if s.ladder == "hopper" and s.tile[1] == 192}
    if not narrow:
        pytest.skip("no 128 x 192 Hopper kernels in this build")
    h = lambda *a, **k: planner.heuristic_recipe(_problem(*a, **k), MANIFEST, (9, 0), 132)  # noqa: E731
    for dtype in ("f16", "bf16"):
        for M, N, K in ((1024, 6144, 4096), (3072, 3072, 3072)):
            p = h(M, N, K, dtype, orders=("row", "col", "row"))
            assert p.route.kernel in narrow and len(p.steps) == 1, planner.describe(p)
        for M, N, K in ((4096, 4096, 4096), (2048, 6144, 4096), (8192, 8192, 8192), (1024, 4096, 4096)):
            p = h(M, N, K, dtype, orders=("row", "col", "row"))
            assert p.route.kernel not in narrow, planner.describe(p)
    # nor beside copies of the operands (4097^3 packed: 538.7 us on them against 320 on the matmul kernel's route)
    p = h(4097, 4097, 4097)
    assert len(p.steps) > 1 and not [s for s in p.steps if getattr(s, "kernel", None) in narrow], planner.describe(p)
    # never on an output narrower than the tile (either way round)
    for M, N in ((16384, 128), (128, 16384), (4096, 160)):
        prob = _problem(M, N, 4096, orders=("row", "col", "row"))
        routes = planner.candidate_routes(prob, MANIFEST, (9, 0), sm_count=132)
        assert not [r for r in routes if r.kernel in narrow and (M if r.transpose else N) < 192]
    # a kernel the caller names runs wherever it can
    forced = planner.heuristic_recipe(_problem(16384, 128, 4096, orders=("row", "col", "row")), MANIFEST, (9, 0), 132,
                                      kernel=sorted(narrow)[0])
    assert forced.route.kernel == sorted(narrow)[0]


def test_heuristic_picks_the_fast_paths_on_hopper():
    h = lambda *a, **k: planner.heuristic_recipe(_problem(*a, **k), MANIFEST, (9, 0), 132)  # noqa: E731
    if not any(s.ladder == "hopper" for s in MANIFEST.kernels.values()):
        pytest.skip("no Hopper kernels in this build")
    p = h(4096, 4096, 4096)
    assert MANIFEST.kernels[p.route.kernel].ladder == "hopper" and len(p.steps) == 1  # no copies
    # column-major A (a transposed view), B either way: the A-column-major kernels, still no copies
    for dtype in ("f16", "bf16"):
        for b_order in ("row", "col"):
            p = h(4096, 4096, 4096, dtype, orders=("col", b_order, "row"))
            k = MANIFEST.kernels[p.route.kernel]
            assert k.ladder == "hopper" and k.a_order == "col" and len(p.steps) == 1, planner.describe(p)
    p = h(4095, 4095, 4095)  # unaligned: padded copies, then a TMA + wgmma kernel
    k = MANIFEST.kernels[p.route.kernel]
    assert (k.ladder == "hopper" or k.name.startswith("matmul_gemm_wgmma_")) and len(p.steps) >= 2
    # decode shapes (a side <= 16): a 16-row-tile kernel, copying at most the short operand (N = 16 is
    # solved as C^T = B^T A^T, whose A is B^T: not row-major); B as N x K (nn.Linear's weight) gets the
    # streaming kernel
    for shape, orders, steps in (((16, 4096, 4096), None, 1), ((4096, 16, 4096), None, 2),
                                 ((1, 4096, 4096), ("row", "col", "row"), 1)):
        p = h(*shape, **({"orders": orders} if orders else {}))
        assert MANIFEST.kernels[p.route.kernel].tile[0] <= planner.DECODE_ROWS, planner.describe(p)
        assert len(p.steps) <= steps and p.copy_bytes <= 2 * 16 * 4096 * 2, planner.describe(p)
    assert h(1, 4096, 4096, orders=("row", "col", "row")).route.kernel.startswith("matmul_gemm_decode_tn_")
    # M = 128: a matmul kernel whose tiles M fills (H100, 128 x 4096 x 4096 fp16: 64 x 64 tiles unsplit 26.1 us,
    # 128 x 64 split in 2 24.9, 128 x 128 split in 4 34.4), no copies
    p = h(128, 4096, 4096)
    assert p.route.kernel.startswith(("matmul_gemm_mma_f16_m", "matmul_gemm_wgmma_f16_m")) and len(p.steps) == 1
    assert MANIFEST.kernels[p.route.kernel].tile[0] <= 128 and dict(p.route.options).get("splits", 1) <= 2
    # a side <= SHORT_SIDE: tiles that side fills (16384 x 64 x 4096: 128 x 64 tiles 60.5 us, 128 x 256 96.5)
    for M, N in ((16384, 64), (64, 16384), (16384, 128)):
        p = h(M, N, 4096, orders=("row", "col", "row"))
        assert planner.tile_fill(p, MANIFEST) == 1.0, planner.describe(p)


@needs_manifest
def test_kxn_decode_takes_the_register_stream_kernel():
    """Decode rows with B as K x N (x @ W, W row-major) go to matmul_gemm_decode_nn in place, split in two where its
    CTAs would leave half the SMs idle and unsplit where they fill them (H100, fp16, L2 flushed: 1 x 4096 x 4096
    split 2 21.8 us, unsplit 27.5, split 4 27.6; 1 x 14336 x 4096 unsplit 50.0, split 2 55.6; 16 x 4096 x 14336
    split 2 53.7 against matmul_gemm_mma_f16_m16 split 4's 58.3); B as N x K keeps the ring kernel."""
    h = lambda M, N, K, dtype="f16", b="row": planner.heuristic_recipe(  # noqa: E731
        _problem(M, N, K, dtype, orders=("row", b, "row")), MANIFEST, (9, 0), 132)
    for (M, N, K), splits in (((1, 4096, 4096), 2), ((16, 4096, 4096), 2), ((1, 14336, 4096), 1),
                              ((16, 14336, 4096), 1), ((1, 4096, 14336), 2), ((16, 4096, 14336), 2)):
        for dtype in ("f16", "bf16"):
            p = h(M, N, K, dtype)
            assert p.route.kernel == f"matmul_gemm_decode_nn_{dtype}" and len(p.steps) == 1, planner.describe(p)
            assert dict(p.route.options).get("splits", 1) == splits, planner.describe(p)
    assert h(1, 4096, 4096, b="col").route.kernel == "matmul_gemm_decode_tn_f16"
    # a split of 4 or more slows the stream far more than one of 2 (STREAM_SPLIT_COST)
    assert STREAM_SPLIT_COST[4] > 4 * STREAM_SPLIT_COST[2] > 0


@needs_manifest
def test_one_k_block_takes_whole_tile_staging():
    """A catalogue TMA-store kernel runs stages=3 (one store pass) where the problem is a single k-block, and its
    default 4 stages deeper (roles.gemm.whole_tile_staging)."""
    if not any(WHOLE_TILE_STAGES in s.variants.get(STAGES, ()) for s in MANIFEST.kernels.values()):
        pytest.skip("no kernel with a stages variant in this build")
    h = lambda K: planner.heuristic_recipe(_problem(8192, 8192, K, orders=("row", "col", "row")),  # noqa: E731
                                           MANIFEST, (9, 0), 132)
    for K, stages in ((16, 3), (64, 3), (128, 4), (4096, 4)):
        p = h(K)
        spec = MANIFEST.kernels[p.route.kernel]
        assert spec.resolve_variant(dict(p.route.options)).get(STAGES) == stages, planner.describe(p)


@needs_manifest
def test_a_long_launch_takes_whole_tile_staging():
    """From LONG_LAUNCH_MACS multiply-adds up (8192^3), the catalogue TMA-store kernels run stages=3; just
    below it (8192 x 8192 x 4096, 4096^3) their default 4."""
    if not any(WHOLE_TILE_STAGES in s.variants.get(STAGES, ()) for s in MANIFEST.kernels.values()):
        pytest.skip("no kernel with a stages variant in this build")
    assert LONG_LAUNCH_MACS == 8192 ** 3
    for dtype in ("f16", "bf16"):
        for (M, N, K), stages in (((8192, 8192, 8192), 3), ((16384, 16384, 16384), 3), ((16384, 14336, 4096), 3),
                                  ((8192, 8192, 4096), 4), ((4096, 4096, 4096), 4)):
            p = planner.heuristic_recipe(_problem(M, N, K, dtype=dtype, orders=("row", "col", "row")), MANIFEST,
                                         (9, 0), 132)
            spec = MANIFEST.kernels[p.route.kernel]
            assert STAGES in spec.variants, planner.describe(p)  # (the catalogue's persistent kernel)
            assert spec.resolve_variant(dict(p.route.options)).get(STAGES) == stages, planner.describe(p)


@needs_manifest
def test_a_route_from_the_tuning_cache_is_held_to_the_precision_rules():
    """A cached route to a kernel that accumulates in fp16 never serves accumulate="f32" (the planner
    drops it and the heuristic chooses), however the cache entry came to name it."""
    f16_only = [s for s in MANIFEST.kernels.values() if s.role == "gemm" and s.dtype == "f16" and
                (s.variants.get("acc") == ("f16",) or ("acc" not in s.variants and s.acc == "f16"))]
    if not f16_only:
        pytest.skip("no fp16-accumulating kernel in this build")
    for spec in f16_only:
        for transpose in (False, True):
            route = problem.Route(spec.name, transpose)
            assert planner.recipe_for(route, _problem(256, 256, 256, acc="f32"), MANIFEST) is None, spec.name
    assert any(planner.recipe_for(problem.Route(s.name, t), _problem(256, 256, 256, acc="f16"), MANIFEST)
               for s in f16_only for t in (False, True))


def test_route_json_roundtrip_and_rejects_junk():
    r = problem.Route("matmul_gemm_mma_f16_m16", True, (("splits", 4),))
    assert problem.Route.from_json(json.loads(json.dumps(r.to_json()))) == r
    for bad in ({"kernel": 3, "transpose": False}, {"kernel": "k", "transpose": "no"},
                {"kernel": "k", "transpose": False, "options": {"x": [1]}}):
        with pytest.raises(ValueError):
            problem.Route.from_json(bad)


# ---------------------------------------------------------------------------------------------------
# CPU: the autotune cache
# ---------------------------------------------------------------------------------------------------

@needs_manifest
def test_autotune_checks_a_batched_call_on_its_first_last_and_one_random_matrix():
    from hgemm_rt.launcher import ArrayRef

    base = 1 << 40
    refs = (ArrayRef(base, (2, 3, 40, 64), (3 * 40 * 64 * 2, 40 * 64 * 2, 128, 2), "f16"),
            ArrayRef(base + (1 << 30), (64, 56), (112, 2), "f16"),  # broadcast: stride 0 on every level
            ArrayRef(base + (2 << 30), (2, 3, 40, 56), (3 * 40 * 56 * 2, 40 * 56 * 2, 112, 2), "f16"))
    batch = ((2, 3), ((3 * 40 * 64, 40 * 64), (0, 0), (3 * 40 * 56, 40 * 56)))
    for seed in range(20):
        views = tuning.sampled_matrices(refs, batch, np.random.default_rng(seed))
        firsts = [a.ptr for a, _, _ in views]
        assert firsts[0] == base and firsts[-1] == base + 5 * 40 * 64 * 2 and 2 <= len(views) <= 3
        for a, b, c in views:
            index = (a.ptr - base) // (40 * 64 * 2)
            assert a.shape == (40, 64) and a.strides == (128, 2) and b == refs[1]
            assert c.ptr == refs[2].ptr + index * 40 * 56 * 2 and c.shape == (40, 56)
    (only,) = tuning.sampled_matrices(tuple(r._replace(shape=r.shape[-2:], strides=r.strides[-2:]) for r in refs),
                                      ((), ((), (), ())), np.random.default_rng(0))
    assert only[0].ptr == base and only[2].ptr == refs[2].ptr


def test_autotune_cache_roundtrip_and_corruption_is_never_trusted(tmp_path, monkeypatch):
    at = tuning
    monkeypatch.setenv("HGEMM_CACHE_DIR", str(tmp_path))
    name, h = "NVIDIA H100 80GB HBM3", MANIFEST.build_hash
    route = problem.Route("matmul_gemm_mma_f16_m16", False, (("splits", 2),))
    path = at.save({"k1": {"route": route, "us": 12.5}}, name, h)
    assert path.parent == tmp_path and "H100" in path.name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert at.load(name, h, MANIFEST)["k1"]["route"] == route
    good = path.read_text()
    corruptions = {
        "garbage": "{not json",
        "truncated": good[: len(good) // 2],
        "edited": good.replace("12.5", "1.5"),
        "other device": good.replace(name, "NVIDIA A100"),
        "unknown kernel": None,
    }
    for what, text in corruptions.items():
        if text is None:
            at.save({"k1": {"route": problem.Route("no_such_kernel"), "us": 1.0}}, name, h)
        else:
            path.write_text(text)
        with pytest.warns(RuntimeWarning, match="not trusted"):
            assert at.load(name, h, MANIFEST) == {}, what
    # a different build never reads another build's file
    assert at.cache_path(name, h) != at.cache_path(name, "0" * 16)
    at.save({"k1": {"route": route, "us": 12.5}}, name, h)  # rebuilt
    assert at.load(name, h, MANIFEST)["k1"]["us"] == 12.5


# ---------------------------------------------------------------------------------------------------
# GPU helpers: operands as strided views inside NaN-filled buffers
# ---------------------------------------------------------------------------------------------------

def _bound(dtype, acc, K):
    return error_floor(dtype, acc, dtype, K)


def _rel(got, ref):
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def _case(M, N, K, dtype, orders, offsets, pads, alpha, beta, acc, rng, out_given=True):
    a = GuardedArray(rng.standard_normal((M, K)), dtype, orders[0], offsets[0], pads[0])
    b = GuardedArray(rng.standard_normal((K, N)), dtype, orders[1], offsets[1], pads[1])
    c0 = rng.standard_normal((M, N)) if beta else np.full((M, N), np.nan)
    c = GuardedArray(c0, dtype, orders[2], offsets[2], pads[2]) if out_given else None
    ref = alpha * (a.exact @ b.exact) + (beta * c.exact if (beta and c is not None) else 0.0)
    res = hg.matmul(a.view, b.view, out=c.view if c else None, alpha=alpha, beta=beta if c else 0.0, accumulate=acc)
    hg.get_device().synchronize()
    if c is not None:
        assert res is c.view
        assert c.outside_untouched(), "matmul wrote outside out's view"
        got = c.read()
    else:
        assert isinstance(res, DeviceArray) and res.shape == (M, N) and res.is_c_contiguous
        got = storage_to_f64(download(res, np.empty((M, N), STORAGE[dtype])), dtype)
    return _rel(got, ref), _bound(dtype, acc or problem.ACCUMULATE[dtype][0], K)


PRIMES = [1, 2, 3, 5, 7, 13, 17, 31, 61, 127, 251, 509, 1021]
DIMS = st.one_of(st.sampled_from(PRIMES + [8, 16, 64, 128, 129, 256, 257, 640]), st.integers(1, 700))


@pytest.mark.gpu
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(M=DIMS, N=DIMS, K=DIMS, dtype=st.sampled_from(["f16", "bf16", "f32"]),
       orders=st.tuples(*[st.sampled_from(["row", "col", "gen"])] * 3),
       offsets=st.tuples(*[st.integers(0, 9)] * 3), pads=st.tuples(*[st.integers(0, 9)] * 3),
       ab=st.sampled_from([(1.0, 0.0), (0.5, 0.0), (1.0, 1.0), (-2.0, 0.25)]),
       loose=st.booleans(), out_given=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_fuzz_matmul_matches_float64(M, N, K, dtype, orders, offsets, pads, ab, loose, out_given, seed):
    acc = {"f16": "f16", "f32": "tf32", "bf16": None}[dtype] if loose else None
    err, bound = _case(M, N, K, dtype, orders, offsets, pads, *ab, acc, np.random.default_rng(seed), out_given)
    assert err <= bound, f"rel err {err:.2e} > {bound:.2e}"


# ---------------------------------------------------------------------------------------------------
# GPU: every route once, the big ragged shapes, small M
# ---------------------------------------------------------------------------------------------------

ROUTE_CASES = [
    ("f16", 200, 136, 120, ("row", "row", "row"), (0, 0, 0)),
    ("f16", 131, 77, 261, ("col", "row", "row"), (1, 3, 0)),
    ("f16", 64, 256, 96, ("row", "col", "col"), (0, 0, 5)),
    ("f16", 192, 136, 120, ("col", "col", "row"), (0, 0, 0)),  # A column-major in place (acol kernels)
    ("bf16", 150, 260, 70, ("row", "col", "row"), (0, 0, 0)),
    ("f32", 97, 141, 100, ("row", "row", "row"), (0, 0, 0)),
    ("f16", 5, 77, 261, ("row", "row", "row"), (0, 0, 0)),  # decode shapes: ragged K, N % 8 != 0
    ("bf16", 9, 250, 1000, ("row", "col", "col"), (0, 0, 3)),
    ("f16", 1, 1, 40, ("row", "col", "row"), (0, 0, 1)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,orders,offsets", ROUTE_CASES)
def test_every_route_is_correct(dtype, M, N, K, orders, offsets, rng):
    a = GuardedArray(rng.standard_normal((M, K)), dtype, orders[0], offsets[0], 0)
    b = GuardedArray(rng.standard_normal((K, N)), dtype, orders[1], offsets[1], 0)
    c = GuardedArray(rng.standard_normal((M, N)), dtype, orders[2], offsets[2], 0)
    ref = 0.5 * (a.exact @ b.exact) + 2.0 * c.exact
    # the bound holds for outputs of the size random products have: where cancellation left C far smaller (1 x 1
    # x 40 at fp16 accumulation failed 1 run in 6 at 1.4x the bound), it scales with that (at least 1)
    typical = np.linalg.norm(np.abs(a.exact) @ np.abs(b.exact)) / np.sqrt(K)
    tested, bad = 0, []
    for alpha, beta, want in ((1.0, 0.0, a.exact @ b.exact), (0.5, 2.0, ref)):
        prob = problem.problem_of_arrays(a.view, b.view, c.view,
                                         "f16" if dtype == "f16" else problem.ACCUMULATE[dtype][-1], alpha, beta)
        cancelled = max(1.0, alpha * typical / max(np.linalg.norm(want), 1e-30))
        for plan, got in each_route(prob, dtype, a, b, c, alpha, beta):
            err, bound = _rel(got, want), _bound(dtype, prob.acc, K) * cancelled
            tested += 1
            if not err <= bound or not c.outside_untouched():
                bad.append(f"{plan.route}: {err:.2e} > {bound:.2e}")
    assert tested > 4 and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,b_order", [("f16", "col"), ("bf16", "row"), ("f16", "row")])
def test_every_b_multicast_route_is_correct(dtype, b_order, rng):
    """The multicast pairs (the `mc` = 2 variant, a cluster (1, 2, 1)), where the planner picks them (B beyond L2):
    every such route at a ragged shape whose odd last row of tiles leaves a pair's second CTA idle, tn and nn."""
    _check_ranked_routes(rng, dtype, (300, 8200, 4200), ("row", b_order), 1,  # B: 69 MB
                         lambda r: any(isinstance(s, problem.Gemm) and s.cluster_m > 1 for s in r.steps))


def _check_ranked_routes(rng, dtype, shape, orders, a_offset, chosen, b_pad=0):
    """Every route the planner ranks for a random problem of `shape` (A and B in `orders`, B's leading dimension
    `b_pad` longer, NaN there; C row-major) that `chosen` keeps, checked against float64 at alpha 1, beta 0 and at
    alpha 0.5, beta 2 (at least four runs)."""
    M, N, K = shape
    a = GuardedArray(rng.standard_normal((M, K)), dtype, orders[0], a_offset, 0)
    b = GuardedArray(rng.standard_normal((K, N)), dtype, orders[1], 0, b_pad)
    c = GuardedArray(rng.standard_normal((M, N)), dtype, "row", 0, 0)
    exact = a.exact @ b.exact
    tested, bad = 0, []
    for alpha, beta, want in ((1.0, 0.0, exact), (0.5, 2.0, 0.5 * exact + 2.0 * c.exact)):
        prob = problem.problem_of_arrays(a.view, b.view, c.view, "f32", alpha, beta)
        dev = hg.get_device()
        plans = [r for _e, r in planner.ranked_recipes(prob, hg.get_registry().manifest, dev.info.cc, dev.info.sm_count)
                 if chosen(r)]
        for plan, got in each_route(prob, dtype, a, b, c, alpha, beta, plans=plans):
            err, bound = _rel(got, want), _bound(dtype, prob.acc, K)
            tested += 1
            if not err <= bound or not c.outside_untouched():
                bad.append(f"{planner.describe(plan)}: {err:.2e} > {bound:.2e}")
    assert tested >= 4 and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,shape,b_pad", [
    ("f16", (1, 4096, 4096), 0),
    ("bf16", (16, 1001, 520), 7),  # a ragged last column piece: NaN in B's row padding must not reach C
    ("f16", (5, 77, 264), 3),
    ("f16", (17, 300, 1000), 4),  # two 16-row tiles, K not a whole number of 32-row chunks
    ("bf16", (3, 64, 40), 0),
])
def test_every_kxn_decode_route_is_correct(dtype, shape, b_pad, rng):
    """matmul_gemm_decode_nn (B as K x N, streamed into registers), every split the planner ranks, in place on B
    (its leading dimension a multiple of 8), against float64; C's surroundings untouched."""
    _check_ranked_routes(rng, dtype, shape, ("row", "row"), 0,
                         lambda r: any(isinstance(s, problem.Gemm) and s.kernel.startswith("matmul_gemm_decode_nn_")
                                       for s in r.steps), b_pad=b_pad)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 16, 77, 128])
@pytest.mark.parametrize("b_order", ["row", "col"])
def test_small_m_decode_shapes(M, b_order, rng):
    err, bound = _case(M, 4096, 4096, "f16", ("row", b_order, "row"), (0, 0, 0), (0, 0, 0), 1.0, 0.0, None, rng)
    assert err <= bound


@pytest.mark.gpu
@pytest.mark.parametrize("S", [4095, 4100])
def test_unaligned_big_squares_take_the_padding_path(S, rng):
    a = rng.standard_normal((S, S)).astype(np.float16)
    b = rng.standard_normal((S, S)).astype(np.float16)
    A, B, C = hg.to_device(a), hg.to_device(b), hg.empty((S, S), "f16")
    C.fill_bytes(0xFF)
    hg.matmul(A, B, out=C)
    rows = np.union1d(rng.choice(S, 64, replace=False), [0, S - 4, S - 1])  # and the ragged last rows
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    assert _rel(C.to_numpy()[rows].astype(np.float64), ref) < 1e-3
    assert np.isfinite(C.to_numpy()).all()


# ---------------------------------------------------------------------------------------------------
# GPU: interop, numpy, graphs, autotune
# ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_numpy_in_numpy_out(rng):
    a = rng.standard_normal((33, 65)).astype(np.float32)
    b = rng.standard_normal((65, 17)).astype(np.float32)
    c = hg.matmul(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    assert _rel(c.astype(np.float64), a.astype(np.float64) @ b) < 1e-5
    out = np.ones((33, 17), np.float32)
    assert hg.matmul(a, b.T.copy().T, out=out, beta=1.0) is out
    assert _rel(out.astype(np.float64), a.astype(np.float64) @ b + 1.0) < 1e-5


@pytest.mark.gpu
def test_torch_tensors_and_transposed_views_zero_copy(rng):
    torch = pytest.importorskip("torch")
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        a = torch.randn(300, 200, device="cuda", dtype=dt)
        w = torch.randn(150, 200, device="cuda", dtype=dt)  # a Linear weight: a @ w.T (TN)
        out = torch.full((150, 300), float("nan"), device="cuda", dtype=dt).t()  # column-major out
        ptr = out.data_ptr()
        res = hg.matmul(a, w.t(), out=out, stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert res is out and out.data_ptr() == ptr  # written in place, no copy
        ref = a.double() @ w.double().t()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5}[dt], (dt, err)


@pytest.mark.gpu
def test_batched_a_folds_into_rows_like_torch_matmul(rng):
    """(..., M, K) @ (K, N): the batch folds into rows (a 2-D B broadcast, as torch.matmul does), the
    result has the batch shape, and an out of that shape is written in place; batch dimensions that do
    not fold run batched (tests/test_batched.py), B broadcast."""
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, 50, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(40, 64, device="cuda", dtype=torch.float16)
    ref = x.double() @ w.double().t()
    y = hg.matmul(x, w.t())
    assert y.shape == (2, 3, 50, 40)
    out = torch.empty(2, 3, 50, 40, device="cuda", dtype=torch.float16)
    assert hg.matmul(x, w.t(), out=out) is out
    torch.cuda.synchronize()
    for got in (y, out):
        assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-3
    xs = x.transpose(0, 1)  # (3, 2, 50, 64): the batch dimensions are not in row order
    assert "*" in hg.explain(xs, w.t())  # a batched launch, not one of folded rows
    ys = hg.matmul(xs, w.t())
    torch.cuda.synchronize()
    assert ys.shape == (3, 2, 50, 40)
    assert ((ys.double() - ref.transpose(0, 1)).norm() / ref.norm()).item() < 1e-3


@pytest.mark.gpu
def test_dlpack_only_producer_zero_copy(rng):
    torch = pytest.importorskip("torch")

    a = torch.randn(64, 96, device="cuda", dtype=torch.float16)
    b = torch.randn(96, 40, device="cuda", dtype=torch.float16)
    out = torch.zeros(64, 40, device="cuda", dtype=torch.float16)
    hg.matmul(OnlyDlpack(a), OnlyDlpack(b), out=OnlyDlpack(out))
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-3


def _captured_and_replayed(call, s):
    """Capture call() on stream s (global mode) into a CUDA graph, launch the graph once and wait."""
    from hgemm_rt._driver import check, driver

    drv = driver()
    check(drv.cuStreamBeginCapture(s.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL),
          "cuStreamBeginCapture")
    call()
    graph = check(drv.cuStreamEndCapture(s.handle), "cuStreamEndCapture")
    exe = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    check(drv.cuGraphLaunch(exe, s.handle), "cuGraphLaunch")
    s.synchronize()
    check(drv.cuGraphExecDestroy(exe), "cuGraphExecDestroy")
    check(drv.cuGraphDestroy(graph), "cuGraphDestroy")


@pytest.mark.gpu
def test_cuda_graph_capture_replays_matmul(rng):
    M, N, K = 257, 129, 300  # ragged: the plan has copies and temporaries
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    A, B, C = hg.to_device(a), hg.to_device(b), hg.empty((M, N), "f16")
    with hg.Stream() as s:
        hg.matmul(A, B, out=C, stream=s)  # builds the plan outside the capture
        s.synchronize()
        C.fill_bytes(0xFF, s)
        s.synchronize()
        _captured_and_replayed(lambda: hg.matmul(A, B, out=C, stream=s), s)
    assert _rel(C.to_numpy().astype(np.float64), a.astype(np.float64) @ b) < 1e-3


def _repeated_on_the_same_buffers(M, N, K, rng, s):
    """GRAPH_AFTER_REPEATS + 3 calls on the same A, B and C on stream s, fresh random contents each time, each
    checked against float64. Returns (A, B, C, a, b, the call's Bound) after the last one."""
    from hgemm_rt.api import GRAPH_AFTER_REPEATS

    A, B, C = hg.empty((M, K), "f16"), hg.empty((K, N), "f16"), hg.empty((M, N), "f16")
    for i in range(GRAPH_AFTER_REPEATS + 3):
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((K, N)).astype(np.float16)
        A.copy_from_numpy(a)
        B.copy_from_numpy(b)
        C.fill_bytes(0xFF, s)
        assert hg.matmul(A, B, out=C, stream=s) is C
        s.synchronize()
        assert _rel(C.to_numpy().astype(np.float64), a.astype(np.float64) @ b) < 1e-3, f"call {i}"
    return A, B, C, a, b, hg.plans.calls[repeat_key(A, B, C, stream=s)]


@pytest.mark.gpu
# one kernel, copies, split-K, deferred K groups (the sum kernel a programmatic dependent of the GEMM: a graph edge,
# and in the user's capture a launch attribute)
@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (257, 129, 300), (130, 264, 200), (96, 200, 40000)])
def test_repeats_on_the_same_buffers_go_through_a_cuda_graph_and_stay_correct(M, N, K, rng):
    """A call repeated on the same buffers launches through one CUDA graph after GRAPH_AFTER_REPEATS
    repeats: every call still reads the current contents of A and B, and a user's capture on the same
    stream still works (it gets the kernel launches: a graph launch cannot be captured)."""
    with hg.Stream() as s:
        A, B, C, a, b, bound = _repeated_on_the_same_buffers(M, N, K, rng, s)
        assert bound.last.graph is not None, "the repeats did not switch to a CUDA graph"
        C.fill_bytes(0xFF, s)
        s.synchronize()
        _captured_and_replayed(lambda: hg.matmul(A, B, out=C, stream=s), s)  # kernel launches, not the graph
    assert _rel(C.to_numpy().astype(np.float64), a.astype(np.float64) @ b) < 1e-3


@pytest.mark.gpu
def test_repeats_of_one_long_kernel_stay_plain_launches_and_correct(rng):
    """One kernel the cost model puts at GRAPH_BELOW_US or more: the GPU paces its repeats, so they keep plain
    launches (a graph launch costs GPU time), and every call reads the current A and B."""
    from hgemm_rt import planner
    from hgemm_rt.api import GRAPH_BELOW_US
    from hgemm_rt.registry import get_registry

    with hg.Stream() as s:
        _A, _B, _C, _a, _b, bound = _repeated_on_the_same_buffers(2048, 2048, 2048, rng, s)
        est = planner.estimate_us(bound.recipe, bound.problem, get_registry().manifest, bound.dev.info.cc,
                                  bound.dev.info.sm_count)
        assert len(bound.last.launches) == 1 and est >= GRAPH_BELOW_US, \
            f"the premise: one kernel estimated at {est:.1f} us >= {GRAPH_BELOW_US} ({bound.recipe})"
        assert bound.graph_pays is False and bound.last.graph is None, "a long single kernel switched to a graph"


@needs_manifest
@pytest.mark.parametrize("name", ["matmul_gemm_decode_tn_f16", "matmul_gemm_mma_bf16_m64", "matmul_copy2d_f16"])
def test_reusable_parameter_arrays_set_in_place_hold_what_pack_builds(name):
    """ParamPacker.reusable's array, its pointers set for some operands, holds the bytes pack() builds for them
    (the integers shared, every pointer where the kernel reads it)."""
    import ctypes

    from hgemm_rt.launcher import ArrayRef, ParamPacker

    spec = MANIFEST.kernels[name]
    scalars = {p.partition(":")[2]: 3 + i for i, p in enumerate(spec.params) if not p.startswith(("ptr:", "tmap:"))}
    packer = ParamPacker(spec, scalars)
    names = [p.partition(":")[2] for p in spec.params if p.startswith("ptr:")]
    arrays = {x: ArrayRef(0x10000 * (i + 1) + 256, (4, 4), (8, 2), spec.dtype) for i, x in enumerate(names)}
    params, slots = packer.reusable()
    assert [x for _, _, x in slots] == names and not any(is_map for is_map, _, _ in slots)
    for _, value, x in slots:
        value.value = arrays[x].ptr
    want = packer.pack(arrays)

    def words(packed):  # each parameter's value, read through the void* array the launch passes
        sizes = {"ptr": 8, "i64": 8, "i32": 4}
        return [ctypes.string_at(packed.array[i], sizes[p.partition(":")[0]]) for i, p in enumerate(spec.params)]
    assert words(params) == words(want)


@pytest.mark.gpu
# decode (pointers), split-K wgmma (tensor maps), copies + a GEMM: each set in place per new address
@pytest.mark.parametrize("M,N,K", [(1, 512, 1024), (16, 300, 200), (130, 264, 200), (33, 70, 50)])
def test_calls_on_new_addresses_in_any_order_and_from_two_threads_stay_correct(M, N, K, rng):
    """A call on new addresses (a model's fresh activations) sets the pointers of the execution's reusable
    parameter arrays in place (Execution.transient); the same call twice in a row is packed for keeps (the
    repeat path). A sequence mixing new buffers, buffers seen two calls before and repeats, then two threads on
    the same shape with their own buffers, every result against float64."""
    a = [rng.standard_normal((M, K)).astype(np.float16) for _ in range(4)]
    b = [rng.standard_normal((K, N)).astype(np.float16) for _ in range(2)]
    A, B = [hg.to_device(x) for x in a], [hg.to_device(x) for x in b]
    C = [hg.empty((M, N), "f16") for _ in range(3)]
    bound = _bound("f16", "f32", K)
    for i, (ia, ib, ic) in enumerate([(0, 0, 0), (1, 0, 1), (0, 0, 2), (2, 1, 0), (2, 1, 0), (2, 1, 0), (2, 1, 0),
                                      (3, 1, 1), (0, 0, 0), (1, 0, 1)]):
        C[ic].fill_bytes(0xFF)
        assert hg.matmul(A[ia], B[ib], out=C[ic]) is C[ic]
        got = C[ic].to_numpy().astype(np.float64)
        assert _rel(got, a[ia].astype(np.float64) @ b[ib]) <= bound, f"call {i}: A{ia} B{ib} C{ic}"
    def work(seed: int) -> list:
        r, bad = np.random.default_rng(seed), []
        with hg.Stream() as s:
            outs = [hg.empty((M, N), "f16") for _ in range(2)]
            for j in range(40):
                ia, ib, out = int(r.integers(4)), int(r.integers(2)), outs[j % 2]
                out.fill_bytes(0xFF, s)
                hg.matmul(A[ia], B[ib], out=out, stream=s)
                s.synchronize()
                err = _rel(out.to_numpy().astype(np.float64), a[ia].astype(np.float64) @ b[ib])
                if not err <= bound:
                    bad.append((seed, j, err))
        return bad

    errors = errors_from_threads(work, (1, 2))
    assert not errors, errors


@pytest.mark.gpu
def test_autotune_writes_a_cache_that_matmul_then_uses(tmp_path, monkeypatch, rng, fresh_plans):
    monkeypatch.setenv("HGEMM_CACHE_DIR", str(tmp_path))
    tuning.forget()
    a = rng.standard_normal((96, 513)).astype(np.float16)
    b = rng.standard_normal((513, 200)).astype(np.float16)
    A, B, C = hg.to_device(a), hg.to_device(b), hg.empty((96, 200), "f16")
    try:
        results = hg.autotune(A, B, out=C, candidates=4, iters=3)
        assert results and math.isfinite(results[0]["us"])
        files = list(tmp_path.glob("autotune-*.json"))
        assert len(files) == 1
        entry = next(iter(json.loads(files[0].read_text())["entries"].values()))
        assert entry["route"]["kernel"] == results[0]["route"].kernel
        assert hg.Matmul(A, B, out=C).recipe.route == results[0]["route"]  # a new plan object sees the winner
        hg.matmul(A, B, out=C)
        assert _rel(C.to_numpy().astype(np.float64), a.astype(np.float64) @ b) < 1e-3
    finally:
        tuning.forget()


@pytest.mark.gpu
@pytest.mark.parametrize("a_shape,b_shape,with_out", [
    ((3, 70, 96), (3, 96, 130), True),         # one batch level
    ((2, 3, 50, 64), (2, 3, 64, 40), True),    # two levels
    ((72, 64), (5, 64, 88), True),             # A broadcast over B's batch
    ((2, 3, 40, 64), (64, 56), False),         # a 2-D B: the batch folds into rows; out made by matmul
])
def test_autotune_of_a_batched_call_caches_a_route_that_matmul_then_uses(tmp_path, monkeypatch, rng, a_shape,
                                                                         b_shape, with_out, fresh_plans):
    monkeypatch.setenv("HGEMM_CACHE_DIR", str(tmp_path))
    tuning.forget()
    a = rng.standard_normal(a_shape).astype(np.float16)
    b = rng.standard_normal(b_shape).astype(np.float16)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    A, B = hg.to_device(a), hg.to_device(b)
    C = hg.empty(ref.shape, "f16") if with_out else None
    try:
        results = hg.autotune(A, B, out=C, candidates=4, iters=2, warmup=1)
        assert results and math.isfinite(results[0]["us"]) and results[0]["error"] <= _bound("f16", "f32", b_shape[-2])
        (entry,) = json.loads(next(tmp_path.glob("autotune-*.json")).read_text())["entries"].values()
        assert entry["route"]["kernel"] == results[0]["route"].kernel
        assert hg.Matmul(A, B, out=C).recipe.route == results[0]["route"]  # a new plan object sees the winner
        out = hg.matmul(A, B, out=C)
        assert _rel(out.to_numpy().astype(np.float64), ref) <= _bound("f16", "f32", b_shape[-2])
    finally:
        tuning.forget()


@pytest.mark.gpu
def test_repeated_calls_take_the_validated_call_cache_and_stay_correct(rng):
    """matmul's hot path (a repeat call on the same DeviceArrays skips validation): new scalars, a
    second output and back again all give the right result, and a closed array is still refused."""
    M, N, K = 130, 264, 200  # a split-K matmul route (cluster launch) at this size
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    A, B = hg.to_device(a), hg.to_device(b)
    outs = [hg.empty((M, N), "f16"), hg.empty((M, N), "f16")]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for i, alpha in enumerate((1.0, 0.5, 1.0, -2.0, 0.5)):
        for C in (outs[i % 2], outs[(i + 1) % 2]):
            C.fill_bytes(0xFF)
            assert hg.matmul(A, B, out=C, alpha=alpha) is C
            assert _rel(C.to_numpy().astype(np.float64), alpha * ref) <= _bound("f16", "f32", K)
    # the repeats were served from the cache: one entry per alpha, whichever of the two outputs
    assert repeat_key(A, B, outs[0], alpha=0.5) in hg.plans.calls
    assert repeat_key(A, B, outs[1], alpha=0.5) == \
        repeat_key(A, B, outs[0], alpha=0.5)
    outs[1].close()
    with pytest.raises(ValidationError, match="closed"):
        hg.matmul(A, B, out=outs[1])


def test_cost_model_prices_short_split_k_slices_higher():
    """A split-K launch of the Hopper strided kernels costs more per flop the shorter each CTA's K
    (costmodel.SPLIT_K_SHORT_K); unsplit launches and the other roles are unchanged."""
    from hgemm_rt.costmodel import HOPPER, CostModel, SPLIT_K_SHORT_K
    spec = next((s for s in MANIFEST.kernels.values() if s.role == "gemm_strided_wgmma"), None) if MANIFEST else None
    if spec is None:
        pytest.skip("no gemm_strided_wgmma kernel in this build")
    model = CostModel(HOPPER, 132, MANIFEST)
    g = lambda K, s: problem.Gemm(spec.name, "gemm_strided_wgmma", _view("A", 256, K, "row"),  # noqa: E731
                                  _view("B", K, 4096, "row"), _view("C", 256, 4096, "row"), 256, 4096, K, splits=s)
    assert model.split_factor(spec, g(4096, 1)) == 1.0
    assert model.split_factor(spec, g(4096, 2)) == pytest.approx(1 + SPLIT_K_SHORT_K / 2048)
    assert model.split_factor(spec, g(1024, 8)) == pytest.approx(1 + SPLIT_K_SHORT_K / 128)  # uncapped
    assert model.split_factor(spec, g(65536, 8)) < model.split_factor(spec, g(4096, 2))


@needs_manifest
def test_clusters_of_4_or_8_fill_120_of_132_sms():
    """A split-K grid of the Hopper strided kernels runs in waves of the CTAs its clusters can hold at once
    (H100: 15 clusters of 8, 30 of 4, 66 of 2): 256 x 256 x 65536 at m64n64 splits=8 is 16 clusters of 8, two
    waves, so twice the one-wave estimate, and the split-K pick is a grid that fits (m128n64, 8 clusters)."""
    from hgemm_rt.costmodel import CostModel
    spec = MANIFEST.kernels.get("matmul_gemm_wgmma_f16_m64n64_tn")
    if spec is None:
        pytest.skip("no matmul_gemm_wgmma_f16_m64n64_tn in this build")
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    assert [model.cta_slots(spec, s) for s in (1, 2, 4, 8)] == [132, 132, 120, 120]
    g = problem.Gemm(spec.name, spec.role, _view("A", 256, 65536, "row"), _view("B", 65536, 256, "col"),
                     _view("C", 256, 256, "row"), 256, 256, 65536, splits=8)
    one_wave = CostModel(replace(model.rates, cluster_sm_share={}), 132, MANIFEST)
    assert model.gemm_us(spec, g, "f16") > 1.5 * one_wave.gemm_us(spec, g, "f16")  # the 16th cluster's wave
    ranked = planner.ranked_recipes(_problem(256, 256, 65536, orders=("row", "col", "row")), MANIFEST, (9, 0), 132)
    split_k = [r for _e, r in ranked if not any(isinstance(s, problem.GroupSum) for s in r.steps)]  # (not deferred)
    steps = [s for s in split_k[0].steps if isinstance(s, problem.Gemm)]
    assert len(steps) == 1 and steps[0].splits == 8 and "m128n64" in steps[0].kernel


@needs_manifest
def test_b_multicast_pairs_rows_of_tiles_on_unsplit_unbatched_hopper_launches():
    """The strided wgmma kernels' `mc` = 2 variant runs pairs of CTAs along M sharing their B tile by TMA multicast
    (a cluster (1, 2, 1)): offered on sm_90 where there are two rows of tiles, never split or before Hopper. The
    cost model streams half of B per CTA where B does not fit in L2 (ArchRates.l2_fit_bytes), counts whole pairs
    of rows and the pair's cluster: the pair is estimated below its unicast twin only there."""
    from hgemm_rt.costmodel import CostModel
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    prob = _problem(300, 8192, 8192, orders=("row", "col", "row"))  # B: 128 MiB
    routes = [r for r in planner.candidate_routes(prob, MANIFEST, (9, 0)) if "mc" in r.opts()]
    assert routes and all(MANIFEST.kernels[r.kernel].role == "gemm_strided_wgmma" and r.opts()["splits"] == 1 and
                          r.opts()["mc"] == MULTICAST for r in routes)
    assert not [r for r in planner.candidate_routes(prob, MANIFEST, (8, 0)) if "mc" in r.opts()]
    one_row = _problem(64, 8192, 8192, orders=("row", "col", "row"))  # one row of 64-row tiles (B^T: 8192 rows)
    assert all(r.transpose for r in planner.candidate_routes(one_row, MANIFEST, (9, 0))
               if "mc" in r.opts() and MANIFEST.kernels[r.kernel].tile[0] == 64)

    def twins(p, kernel):  # (the unicast estimate, the pair's) of `kernel`, untransposed and unsplit
        est = [model.estimate_us(planner.recipe_for(problem.Route(kernel, False, opts), p, MANIFEST), "f16")
               for opts in ((("splits", 1),), (("mc", 2), ("splits", 1)))]
        return tuple(est)

    plain, pair = twins(_problem(256, 8192, 8192, orders=("row", "col", "row")), "matmul_gemm_wgmma_f16_m128n128_tn")
    assert pair < plain  # B beyond L2: the pair halves its traffic (H100: 78.0 -> 66.5 us)
    plain, pair = twins(_problem(256, 6144, 4096, orders=("row", "col", "row")), "matmul_gemm_wgmma_f16_m128n128_tn")
    assert pair > plain  # B (48 MiB) in L2: no gain (H100: 34.0 -> 34.5 us), the cluster's cost
    route = next(r for r in routes if r.kernel == "matmul_gemm_wgmma_f16_m128n128_tn" and not r.transpose)
    recipe = planner.recipe_for(route, prob, MANIFEST)
    g = next(s for s in recipe.steps if isinstance(s, problem.Gemm))
    assert g.cluster_m == 2 and "[mc=2]" in planner.describe(recipe)
    split = problem.Route(route.kernel, False, (("mc", 2), ("splits", 2)))
    assert planner.recipe_for(split, prob, MANIFEST) is None
    assert model.tile_rows(g, 128) == 4  # three rows of tiles run as two pairs


@needs_manifest
def test_near_equal_estimates_go_to_the_least_arithmetic():
    """Of the recipes within NEAR_TIE of the best estimate (same split count), the one with the least
    arithmetic time comes first."""
    prob = _problem(2048, 128, 2048, orders=("row", "row", "row"))
    from hgemm_rt.costmodel import CostModel
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    ranked = planner.ranked_recipes(prob, MANIFEST, (9, 0), 132)
    best, first = ranked[0][0], ranked[0][1]
    rivals = [r for est, r in ranked if est <= best * (1 + planner.NEAR_TIE)
              and max(s.splits for s in r.steps if isinstance(s, problem.Gemm)) ==
              max(s.splits for s in first.steps if isinstance(s, problem.Gemm))]
    assert model.compute_us(first) == min(model.compute_us(r) for r in rivals)


@needs_manifest
def test_tma_operands_off_32_byte_rows_are_also_offered_packed():
    """A TMA map reads rows at an odd multiple of 16 bytes (fp16 K = 1000) 1.4-1.7x slower (costmodel
    TMA_SLOW_ROW_FACTOR): the planner then also offers each TMA-fed route with those operands packed into 128-byte
    rows (the `pack` option), and the cost model picks the packed copy where the GEMM is large enough to repay it."""
    from hgemm_rt.costmodel import CostModel, tma_slow_rows
    assert tma_slow_rows(_view("A", 64, 1000, "row"), 2) and not tma_slow_rows(_view("A", 64, 1024, "row"), 2)
    assert tma_slow_rows(_view("B", 1000, 64, "col"), 2) and not tma_slow_rows(_view("B", 1, 1000, "row"), 2)
    slow = _problem(8192, 8192, 1000, orders=("row", "col", "row"))
    routes = planner.candidate_routes(slow, MANIFEST, (9, 0), sm_count=132)
    packed = [r for r in routes if r.opts().get(planner.PACK)]
    assert packed and all(MANIFEST.kernels[r.kernel].role in planner.PACK_ROLES for r in packed)
    assert not [r for r in planner.candidate_routes(_problem(8192, 8192, 1024, orders=("row", "col", "row")),
                                                    MANIFEST, (9, 0), sm_count=132) if r.opts().get(planner.PACK)]
    route = next(r for r in packed if r.kernel.startswith("hgemm_sm90_wgmma_tma_ws_persistent_tn") and not r.transpose)
    recipe = planner.recipe_for(route, slow, MANIFEST)
    g = next(s for s in recipe.steps if isinstance(s, problem.Gemm))
    assert [s.dst.base for s in recipe.steps if isinstance(s, problem.Copy)] == ["tA", "tB"]
    assert g.a.rs * 2 % 128 == 0 and g.b.rs * 2 % 128 == 0  # whole 128-byte rows
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    in_place = planner.recipe_for(problem.Route(route.kernel, False), slow, MANIFEST)
    assert model.estimate_us(recipe, "f16") < model.estimate_us(in_place, "f16")
    best = planner.ranked_recipes(slow, MANIFEST, (9, 0), 132)[0][1]
    assert any(isinstance(s, problem.Copy) for s in best.steps)  # H100: 335.8 us in place, 235-241 packed
    small = planner.ranked_recipes(_problem(1024, 1024, 1000, orders=("row", "col", "row")), MANIFEST, (9, 0), 132)
    assert not any(isinstance(s, problem.Copy) for s in small[0][1].steps)  # the copies' launches cost more there
    # a route whose operands all sit on 32-byte rows has nothing to pack: no duplicate of the plain route
    aligned = _problem(8192, 8192, 1024, orders=("row", "col", "row"))
    assert planner.recipe_for(problem.Route(route.kernel, False, ((planner.PACK, 1),)), aligned, MANIFEST) is None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_every_packed_route_is_correct(dtype, rng):
    """The `pack` routes (TMA operands off 32-byte rows copied into 128-byte rows first) at a ragged shape with
    K = 1000 (2000-byte rows), A row-major and B as nn.Linear holds it, alpha/beta both ways."""
    _check_ranked_routes(rng, dtype, (333, 520, 1000), ("row", "col"), 0, lambda r: r.route.opts().get(planner.PACK))
