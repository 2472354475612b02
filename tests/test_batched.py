"""Batched matmul: (..., M, K) @ (..., K, N) by torch.matmul's rules, one launch per batch.

On the CPU: the broadcasting rules against numpy's (and torch's, where installed), errors naming the bad
dimensions, which calls fold into rows and which run batched, the batch levels (merged, broadcast, split
at the grid's limit, looped), the i64 kernel parameters and their range checks, the executor's batch
scalars and rank-4 tensor-map shapes, the cost model's batch terms. The planner's batched recipes are
held to each kernel's contract in tests/test_matmul.py (test_every_batched_plan_respects_the_kernel_contracts).

On the GPU (marked gpu): results against float64 for batch 1, 3, 7, 64 with ragged M, N, K in fp16, bf16
and fp32; broadcast A or B (2-D, size-1 and stride-0 batch dimensions); transposed batch views (the
attention layout); out with beta; torch tensors, DeviceArrays and numpy; every batched route once; more
levels than a launch takes and more matrices than grid.z holds; a seeded fuzz over shapes and strides.
Operands are views inside NaN-filled buffers: a read outside a view poisons the result, and the bytes
around out are checked unchanged.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import DeviceArray, api, costmodel, executor, planner, problem
from hgemm_rt.costmodel import CostModel
from hgemm_rt.dtypes import ITEMSIZE, STORAGE, storage_to_f64
from hgemm_rt.errors import ManifestError, ValidationError
from hgemm_rt.launcher import ParamPacker
from hgemm_rt.manifest import kernel_spec_from_dict
from hgemm_bench.matmul_checks import download, stored_and_exact
from hgemm_rt.numerics import error_floor
from hgemm_rt.roles import SPLIT_FORMATS, split_format
from hgemm_rt.roles.gemm_fused_wgmma import streamk
from hgemm_rt.roles.glue import SPLIT_ROW
from hgemm_rt.roles.split_products import split_planes
from hgemm_rt.roles.tma_gemm import QUEUE
from guarded import GuardedArray, each_route
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
BASE = 1 << 40


# ---------------------------------------------------------------------------------------------------
# CPU: validation, the batch levels, the problem
# ---------------------------------------------------------------------------------------------------

def _fake(shape, dtype="f16", strides=None, slot=0):
    """A DeviceArray that was never allocated (validation never dereferences it), in its own 2^36 bytes."""
    return DeviceArray(BASE + slot * (1 << 36), shape, dtype, strides=strides)


def _dense_strides(shape, isz=2):
    out, acc = [], isz
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _call(a, b, out=None, alpha=1.0, beta=0.0):
    return api.validate_call(a, b, out, alpha, beta, None, "auto", None)


SHAPE_PAIRS = [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (6, 4, 5)),
    ((6, 3, 4), (1, 4, 5)), ((2, 1, 3, 4), (5, 4, 6)), ((7, 1, 1, 3, 4), (2, 1, 4, 6)), ((1, 1, 3, 4), (4, 5)),
    ((2, 3, 4), (3, 4, 5)), ((2, 3, 3, 4), (2, 4, 4, 5)), ((4, 5), (2, 1, 5, 3)), ((2, 3, 4), (2, 5, 6)),
]


@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_result_shapes_and_refusals_follow_torch_matmul(sa, sb):
    """The result shape is numpy's (torch.matmul's, for operands of 2 or more dimensions); a pair that
    does not broadcast is refused, naming the dimension at fault."""
    try:
        want = np.matmul(np.zeros(sa, np.float16), np.zeros(sb, np.float16)).shape
    except ValueError:
        want = None
    try:
        import torch  # noqa: F401  (a second opinion where torch is installed: meta tensors, no memory)

        try:
            tw = tuple(torch.matmul(torch.empty(sa, device="meta"), torch.empty(sb, device="meta")).shape)
        except RuntimeError:
            tw = None
        assert tw == want
    except ImportError:
        pass
    a, b = _fake(sa, slot=0), _fake(sb, slot=1)
    if want is None:
        with pytest.raises(ValidationError, match="inner dimensions differ|do not broadcast") as info:
            _call(a, b)
        msg = str(info.value)
        assert str(sa) in msg and str(sb) in msg
        return
    call = _call(a, b)
    assert call.result_shape == want
    prob = api.problem_of(call)
    assert prob.batch_count * (1 if prob.batched else call.M // sa[-2]) == int(np.prod(want[:-2]))


def test_broadcast_error_names_the_dimensions():
    with pytest.raises(ValidationError, match=r"dimension 1 of A is 3, dimension 0 of B is 4"):
        _call(_fake((2, 3, 4, 5)), _fake((4, 5, 6), slot=1))
    with pytest.raises(ValidationError, match=r"dimension 0 of A is 2, dimension 0 of B is 3"):
        _call(_fake((2, 4, 5)), _fake((3, 5, 6), slot=1))
    with pytest.raises(ValidationError, match=r"batch dimensions must be >= 1"):
        _call(_fake((0, 4, 5)), _fake((0, 5, 6), slot=1))
    with pytest.raises(ValidationError, match=r"out has shape \(2, 4, 6\), the product is \(3, 4, 6\)"):
        _call(_fake((3, 4, 5)), _fake((5, 6), slot=1), _fake((2, 4, 6), slot=2))
    with pytest.raises(ValidationError, match="B must be 2-D, or N-D"):
        _call(_fake((3, 4)), _fake((4,), slot=1))


def test_a_broadcast_out_is_refused():
    """out must not be a stride-0 (expanded) view: its matrices would share memory."""
    out = _fake((3, 4, 6), strides=(0, 12, 2), slot=2)
    with pytest.raises(ValidationError, match="share memory"):
        _call(_fake((3, 4, 5)), _fake((3, 5, 6), slot=1), out)
    out = _fake((3, 4, 6), strides=(8, 12, 2), slot=2)  # matrices overlapping one another
    with pytest.raises(ValidationError, match="share memory"):
        _call(_fake((3, 4, 5)), _fake((3, 5, 6), slot=1), out)


def test_out_overlapping_an_input_batch_is_refused():
    a = _fake((3, 4, 5))
    out = DeviceArray(a.ptr + 2 * 4 * 5 * 2, (3, 4, 6), "f16")  # starts inside A's third matrix
    with pytest.raises(ValidationError, match="overlaps A"):
        _call(a, _fake((3, 5, 6), slot=1), out)


def test_a_2d_b_folds_rows_and_everything_else_is_batched():
    # (..., M, K) @ (K, N) with A's batch in row order: one GEMM of 2*3*50 rows, out of the batch shape
    call = _call(_fake((2, 3, 50, 64)), _fake((64, 40), slot=1))
    assert call.batch == () and call.M == 300 and call.result_shape == (2, 3, 50, 40)
    # B with batch dimensions of size 1 is a 2-D B
    call = _call(_fake((2, 3, 50, 64)), _fake((1, 1, 64, 40), slot=1))
    assert call.batch == () and call.M == 300
    # A's batch out of row order (a transposed batch): batched, B broadcast (stride 0)
    x = _fake((3, 2, 50, 64), strides=(50 * 64 * 2, 3 * 50 * 64 * 2, 128, 2))
    call = _call(x, _fake((64, 40), slot=1))
    assert call.batch == (3, 2) and call.bstrides[1] == (0, 0)
    # an out whose batch does not fold keeps a foldable A batched too
    out = _fake((2, 50, 40), strides=(40 * 2, 2 * 40 * 2, 2), slot=2)
    call = _call(_fake((2, 50, 64)), _fake((64, 40), slot=1), out)
    assert call.batch == (2,) and call.bstrides == ((50 * 64,), (0,), (40,))
    # a 2-D A against a batched B: A broadcast
    call = _call(_fake((50, 64)), _fake((5, 64, 40), slot=1))
    assert call.batch == (5,) and call.bstrides == ((0,), (64 * 40,), (50 * 40,))


def test_batch_levels_merge_broadcast_and_order():
    # contiguous (2, 3) batches merge into one level of 6
    call = _call(_fake((2, 3, 4, 5)), _fake((2, 3, 5, 6), slot=1))
    assert call.batch == (6,) and call.bstrides == ((20,), (30,), (24,))
    # (2, 1) x (3,): two levels, each operand broadcast along one of them, size-1 dimensions gone
    call = _call(_fake((2, 1, 4, 5)), _fake((3, 5, 6), slot=1))
    assert call.batch == (2, 3) and call.bstrides == ((20, 0), (0, 30), (72, 24))
    # the attention layout: (B, S, H, D) viewed as (B, H, S, D), and K^T: two levels that do not merge
    B, S, H, D = 2, 128, 4, 64
    q = _fake((B, H, S, D), strides=(S * H * D * 2, D * 2, H * D * 2, 2))
    k = _fake((B, H, D, S), strides=(S * H * D * 2, D * 2, 2, H * D * 2), slot=1)
    call = _call(q, k)
    assert call.batch == (B, H) and call.bstrides[:2] == ((S * H * D, D), (S * H * D, D))
    prob = api.problem_of(call)
    assert prob.a.rs == H * D and prob.a.align == 128 and prob.b.cs == H * D and prob.c.bs == (H * S * S, S * S)
    # an expanded (stride-0) operand: its level's stride is 0
    call = _call(_fake((4, 3, 5), strides=(0, 10, 2)), _fake((4, 5, 6), slot=1))
    assert call.batch == (4,) and call.bstrides[0] == (0,)


def test_more_levels_than_a_launch_takes_loop_over_the_outer_ones():
    # 3 levels that do not merge: the kernel takes the two largest, the other is a loop of launches
    x = _fake((2, 5, 3, 4, 8), strides=(5 * 3 * 4 * 8 * 2 * 4, 3 * 4 * 8 * 2, 5 * 3 * 4 * 8 * 2 * 2, 16, 2))
    call = _call(x, _fake((8, 6), slot=1))
    prob = api.problem_of(call)
    assert sorted(call.batch) == [2, 3, 5] and prob.loop == (2,) and prob.kernel_batch == (5, 3)
    assert prob.batch_count == 30


@pytest.mark.parametrize("n,kernel,loop", [(65535, (1, 65535), ()), (100000, (1, 50000), (2,)),
                                           (65536 * 3, (1, 49152), (4,)), (65537, (1, 1), (65537,))])
def test_more_matrices_than_grid_z_holds_split_by_a_divisor(n, kernel, loop):
    """grid.z holds 65535 matrices: a larger batch is q matrices per launch, q its largest divisor within
    that, and n / q launches (a prime count above it runs one matrix per launch: correct, not fast)."""
    call = _call(_fake((n, 4, 4)), _fake((n, 4, 4), slot=1))
    prob = api.problem_of(call)
    assert prob.kernel_batch == kernel and prob.loop == loop and prob.batch_count == n
    assert prob.a.bstride(len(prob.batch) - 1) == 16 and (not loop or prob.a.bs[0] == 16 * kernel[1])


def test_host_operands_are_seen_dense_and_out_shapes_follow():
    a = np.zeros((3, 1, 4, 5), np.float16)[:, :, :, :]  # numpy: copied to the GPU dense
    b = np.zeros((2, 5, 6), np.float16).transpose(0, 2, 1).transpose(0, 2, 1)
    call = _call(a, b)
    assert call.result_shape == (3, 2, 4, 6) and call.batch == (3, 2)
    assert call.bstrides == ((20, 0), (0, 30), (48, 24))
    prob = api.problem_of(call)
    assert prob.a.align == 8 and prob.c.rs == 6  # (the upload is 256-byte aligned, its matrices 40 bytes apart)


def test_alignment_of_a_batch_is_its_worst_matrix():
    # every matrix 16-byte aligned: the mma.sync kernels take A in place; one odd stride: not
    even = api.problem_of(_call(_fake((4, 64, 64), strides=(64 * 64 * 2, 128, 2)), _fake((4, 64, 64), slot=1)))
    odd = api.problem_of(_call(_fake((4, 64, 64), strides=(64 * 64 * 2 + 2, 128, 2)), _fake((4, 64, 64), slot=1)))
    assert even.a.align == 256 and odd.a.align == 2


def test_the_batch_is_in_the_plan_key():
    p1 = api.problem_of(_call(_fake((4, 64, 64)), _fake((4, 64, 64), slot=1)))
    p2 = api.problem_of(_call(_fake((5, 64, 64)), _fake((5, 64, 64), slot=1)))
    p3 = api.problem_of(_call(_fake((4, 64, 64)), _fake((64, 64), slot=1), _fake((4, 64, 64), slot=2)))
    assert len({p1.key_str, p2.key_str, p3.key_str}) == 3 and "4*64x64x64" in p1.key_str


# ---------------------------------------------------------------------------------------------------
# CPU: the i64 parameter kind
# ---------------------------------------------------------------------------------------------------

def _spec(params):
    return kernel_spec_from_dict({"name": "k_test", "family": "t", "ladder": "matmul", "role": "gemm_strided_simt",
                                  "layout": "NN", "dtype": "f16", "out": "f16", "block": [256], "tile": [64, 64, 16],
                                  "grid": "tiles", "params": params})


def test_i64_parameters_pack_as_64_bit_integers():
    spec = _spec(["ptr:A", "i32:M", "i64:bsa_o", "i64:bsa_i"])
    packer = ParamPacker(spec, {"M": 7, "bsa_o": 2**40 + 3, "bsa_i": -(2**63)})
    packed = packer.pack({"A": type("R", (), {"ptr": 0x1234})()})
    kinds = [type(v) for v in packed.values]
    assert kinds == [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64]
    assert [v.value for v in packed.values[1:]] == [7, 2**40 + 3, -(2**63)]
    # the launch reads each value through the pointer array
    assert ctypes.cast(packed.array[2], ctypes.POINTER(ctypes.c_int64)).contents.value == 2**40 + 3


@pytest.mark.parametrize("kind,value,match", [("i64", 2**63, "does not fit its int64"),
                                              ("i64", -(2**63) - 1, "does not fit its int64"),
                                              ("i32", 2**31, "does not fit its int32"),
                                              ("i64", True, "is not an integer"),
                                              ("i64", 1.5, "is not an integer")])
def test_integer_parameters_out_of_range_are_refused(kind, value, match):
    with pytest.raises(ValidationError, match=match):
        ParamPacker(_spec(["ptr:A", f"{kind}:x"]), {"x": value})


def test_the_schema_knows_i64_and_nothing_else():
    assert _spec(["i64:x"]).params == ("i64:x",)
    with pytest.raises(ManifestError, match=r"is not <ptr\|i32\|i64\|tmap>:<name>"):
        _spec(["i16:x"])
    with pytest.raises(ManifestError, match="no value for its integer parameter 'y'"):
        ParamPacker(_spec(["i64:y"]), {})


@needs_manifest
def test_batched_kernels_declare_the_batch_parameters():
    gemm = ["i32:batch_inner", "i64:bsa_o", "i64:bsa_i", "i64:bsb_o", "i64:bsb_i", "i64:bsc_o", "i64:bsc_i"]
    for spec in MANIFEST.kernels.values():
        if spec.role in ("gemm_strided_mma", "gemm_strided_simt", "gemm_strided_stream"):
            assert list(spec.params[-7:]) == gemm, spec.name
        elif spec.role == "gemm_strided_wgmma":
            assert list(spec.params[-6:-2]) == ["i32:batch_inner", "i32:tma_levels", "i64:bsc_o", "i64:bsc_i"]
            assert list(spec.params[-2:]) == ["ptr:work", "i32:k_groups"], spec.name  # (K groups: unbatched)
        elif spec.role == "copy":
            assert list(spec.params[-5:]) == ["i32:batch_inner", "i64:bss_o", "i64:bss_i", "i64:bsd_o", "i64:bsd_i"]


# ---------------------------------------------------------------------------------------------------
# CPU: what the executor gives the kernels, and the cost model
# ---------------------------------------------------------------------------------------------------

def _vw(base, rows, cols, rs, cs, bs, align=256):
    return problem.View.make(base, rows, cols, rs, cs, align, bs)


def test_step_scalars_carry_the_kernel_levels_strides():
    batch = (2, 3, 5)  # a loop level, then the kernel's outer and inner
    a, b = _vw("A", 8, 4, 4, 1, (999, 40, 32)), _vw("B", 4, 6, 6, 1, (0, 0, 24))
    c = _vw("C", 8, 6, 6, 1, (720, 240, 48))
    g = problem.Gemm("k", "gemm_strided_simt", a, b, c, 8, 6, 4, batch=batch)
    sc = executor.step_scalars(g)
    assert sc["batch_inner"] == 5
    assert (sc["bsa_o"], sc["bsa_i"], sc["bsb_o"], sc["bsb_i"], sc["bsc_o"], sc["bsc_i"]) == (40, 32, 0, 24, 240, 48)
    # rank-4 maps: A has both levels, B only the inner one
    assert sc["tma_levels"] == executor.TMA_RANK4 | 1 | 2 | 4 | 32 | 64  # C: both levels (the fused kernels)
    unbatched = problem.Gemm("k", "gemm_strided_simt", _vw("A", 8, 4, 4, 1, ()), _vw("B", 4, 6, 6, 1, ()),
                             _vw("C", 8, 6, 6, 1, ()), 8, 6, 4)
    sc = executor.step_scalars(unbatched)
    assert sc["batch_inner"] == 1 and sc["tma_levels"] == 0
    assert all(sc[k] == 0 for k in ("bsa_o", "bsa_i", "bsb_o", "bsb_i", "bsc_o", "bsc_i"))
    cp = problem.Copy("c", _vw("B", 4, 6, 6, 1, (0, 0, 24)), _vw("tB", 4, 8, 8, 1, (0, 0, 32)), 4, 6, False,
                      batch=(2, 1, 5))
    sc = executor.step_scalars(cp)
    assert (sc["batch_inner"], sc["bss_o"], sc["bss_i"], sc["bsd_o"], sc["bsd_i"]) == (5, 0, 24, 0, 32)


def test_rank4_tensor_map_shapes():
    v = _vw("A", 100, 64, 72, 1, (0, 10_000))
    shape, strides = executor.tma_shape(v, (3, 7), 2)
    # the broadcast outer level: size 1 with a positive 16-byte-multiple stride (TMA takes no 0)
    assert shape == (1, 7, 100, 64) and strides[1:] == (20_000, 144, 2)
    assert strides[0] > 0 and strides[0] % 16 == 0
    shape, strides = executor.tma_shape(_vw("A", 100, 64, 72, 1, (0, 0)), (3, 7), 2)
    assert shape[:2] == (1, 1) and all(s > 0 and s % 16 == 0 for s in strides[:2])


def test_loop_offsets_walk_the_loop_levels_in_order():
    recipe = problem.Recipe(problem.Route("k"), (), (), 0, (2, 3))
    v = _vw("A", 4, 4, 4, 1, (1000, 100, 7, 5))
    assert executor.loop_offsets(recipe, v) == [0, 100, 200, 1000, 1100, 1200]
    assert executor.loop_offsets(problem.Recipe(problem.Route("k"), (), ()), v) == [0]


@needs_manifest
def test_the_cost_model_prices_the_whole_batch():
    model = CostModel.for_device((9, 0), 132, MANIFEST)
    spec = next(s for s in MANIFEST.kernels.values() if s.role == "gemm_strided_mma" and s.dtype == "f16")
    M = N = 1024
    K = 128

    def gemm(n, b_bs):
        a = _vw("A", M, K, K, 1, (M * K,))
        b = _vw("B", K, N, N, 1, (b_bs,))
        c = _vw("C", M, N, N, 1, (M * N,))
        return problem.Gemm(spec.name, spec.role, a, b, c, M, N, K, variant=(("b", "row"),), batch=(n,))

    one, many = model.gemm_us(spec, gemm(1, K * N), "f16"), model.gemm_us(spec, gemm(64, K * N), "f16")
    assert 40 < many / one <= 64.5  # tiles x batch: close to linear once the grid is full
    # a broadcast B is read once: never dearer than 64 distinct ones
    assert model.gemm_us(spec, gemm(64, 0), "f16") <= many
    # a copy of 8 matrices moves 8 times the bytes of one
    cp = lambda n: problem.Copy("c", _vw("A", 512, 512, 1, 512, (512 * 512,)),  # noqa: E731
                                _vw("tA", 512, 512, 512, 1, (512 * 512,)), 512, 512, False, batch=(n,))
    assert model.copy_us(cp(8), "f16") == pytest.approx(8 * model.copy_us(cp(1), "f16"))
    # a loop of launches repeats everything
    g = gemm(8, K * N)
    r1 = problem.Recipe(problem.Route(spec.name), (), (g,))
    r4 = problem.Recipe(problem.Route(spec.name), (), (problem.Gemm(**{**g.__dict__, "batch": (4, 1, 8)}),), 0, (4,))
    assert model.estimate_us(r4, "f16") == pytest.approx(4 * model.estimate_us(r1, "f16"))


@needs_manifest
def test_attention_shapes_plan_one_launch_without_copies():
    """(B*H, S, D) @ (B*H, D, S) and the (B, S, H, D) layout seen as (B, H, S, D): one batched launch of a
    tensor-core kernel, A and B read in place."""
    for cc in ((9, 0), (8, 0)):
        for bh, s, d in ((64, 1024, 64), (512, 128, 128), (96, 4096, 128)):
            q, k = _fake((bh, s, d)), _fake((bh, d, s), slot=1)
            recipe = planner.heuristic_recipe(api.problem_of(_call(q, k)), MANIFEST, cc, 132)
            assert len(recipe.steps) == 1 and not recipe.loop, planner.describe(recipe)
            assert MANIFEST.kernels[recipe.route.kernel].role in ("gemm_strided_mma", "gemm_strided_wgmma", "gemm_fused_wgmma")
        B, S, H, D = 4, 512, 16, 64
        q = _fake((B, H, S, D), strides=(S * H * D * 2, D * 2, H * D * 2, 2))
        k = _fake((B, H, D, S), strides=(S * H * D * 2, D * 2, 2, H * D * 2), slot=1)
        recipe = planner.heuristic_recipe(api.problem_of(_call(q, k)), MANIFEST, cc, 132)
        assert len(recipe.steps) == 1 and recipe.steps[0].batch == (B, H), planner.describe(recipe)


@needs_manifest
def test_long_batched_fused_launches_take_the_dynamic_tile_order():
    """The fused kernel's best route where the tile queue pays (costmodel.dynamic_order_pays: many tiles, a short
    K, an output L2 does not hold) is its `queue` variant, its tiles claimed from a counter (an int32 temporary its
    `ptr:work` gets); elsewhere the plain variant, in the static order (a null pointer), the queue ranked after it."""
    fused = next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_fused_wgmma" and not streamk(s)
                 and s.dtype == "f16" and s.layout == "NN")  # (B as K x N, row-major)
    spec = MANIFEST.kernels[fused]
    assert spec.params[-1] == "ptr:work" and "work" in executor.OPTIONAL_POINTERS
    for batch, dynamic in ((256, True), (4, False)):
        q, k = _fake((batch, 2048, 128)), _fake((batch, 128, 2048), slot=1)
        prob = api.problem_of(_call(q, k))
        tiles = spec.output_tiles(2048, 2048, False) * batch
        assert costmodel.dynamic_order_pays(tiles, 128, True, batch * 2048 * 2048 * 2) == dynamic
        ranked = [r for _est, r in planner.ranked_recipes(prob, MANIFEST, (9, 0), 132, kernel=fused)
                  if not r.route.transpose]
        recipe = ranked[0]
        (step,) = recipe.steps
        queued = dict(step.variant).get(QUEUE) == 1
        assert (step.work is not None) == queued == dynamic, planner.describe(recipe)
        assert ("dynamic tile order" in planner.describe(recipe)) == dynamic
        assert any(dict(r.steps[0].variant).get(QUEUE) != queued for r in ranked[1:])  # the other order
        assert [t.name for t in recipe.temps] == (["tQ"] if dynamic else [])
        if dynamic:  # one int32
            assert recipe.temps[0].rows * recipe.temps[0].cols * ITEMSIZE["f16"] == 4
    for K in (128, 256):  # 8192 tiles, unbatched: the static order (the gain was measured on batches)
        a, b = _fake((16384, K)), _fake((K, 16384), slot=1)
        recipe = planner.ranked_recipes(api.problem_of(_call(a, b)), MANIFEST, (9, 0), 132, kernel=fused)[0][1]
        step = recipe.steps[0]
        assert step.work is None and not dict(step.variant).get(QUEUE), planner.describe(recipe)


def _gemm_step(recipe):
    return next(s for s in recipe.steps if isinstance(s, problem.Gemm))


@needs_manifest
def test_short_k_batches_run_two_ctas_an_sm():
    """Attention's P.V (a batch of 512 x 64 x 512) takes the m128n64 kernel's `occ` = 2 variant (two CTAs an SM:
    costmodel.two_ctas_pay); unbatched, or with a long K, that kernel runs one CTA an SM."""
    kern = next(n for n, s in MANIFEST.kernels.items()
                if 2 in s.variants.get(costmodel.OCC, ()) and s.dtype == "f16" and s.layout == "NN")
    for batch, (M, N, K), two in ((64, (512, 64, 512), True), (1, (1024, 64, 4096), False),
                                  (64, (512, 64, 4096), False)):
        a, b = _fake((batch, M, K) if batch > 1 else (M, K)), _fake((batch, K, N) if batch > 1 else (K, N), slot=1)
        prob = api.problem_of(_call(a, b))
        ranked = [r for _e, r in planner.ranked_recipes(prob, MANIFEST, (9, 0), 132, kernel=kern)
                  if not r.route.transpose]
        occ = [dict(_gemm_step(r).variant).get(costmodel.OCC, 1) for r in ranked]
        assert occ[0] == (2 if two else 1) and set(occ) == {1, 2}, \
            (batch, M, N, K, [planner.describe(r) for r in ranked[:3]])


@needs_manifest
def test_a_broadcast_operand_is_copied_once():
    """A packed copy of a broadcast operand is one matrix, read by every matrix of the batch."""
    a = _fake((7, 100, 33), strides=(100 * 33 * 2, 33 * 2, 2))  # K = 33: rows not 16-byte multiples
    b = _fake((33, 77), slot=1)
    c = _fake((7, 100, 77), slot=2, strides=(100 * 80 * 2 + 16, 80 * 2, 2))  # out does not fold either
    prob = api.problem_of(_call(a, b, c))
    seen = 0
    for _, recipe in planner.ranked_recipes(prob, MANIFEST, (9, 0), 132):
        p = prob.transposed() if recipe.route.transpose else prob
        for st in recipe.steps:
            if isinstance(st, problem.Copy) and st.src.base == "B":
                seen += 1
                assert problem.kernel_batch(st.batch) == (1, 1) and not st.dst.batched
                t = next(t for t in recipe.temps if t.name == st.dst.base)
                assert t.count == 1
            if isinstance(st, problem.Copy) and st.src.base == "A":
                assert problem.kernel_batch(st.batch) == (1, 7)
        assert p.batch == (7,)
    assert seen


# ---------------------------------------------------------------------------------------------------
# GPU helpers: batched operands as views inside NaN-filled buffers
# ---------------------------------------------------------------------------------------------------

def _rel(got, ref):
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def _bound(dtype, K, acc=None):
    return error_floor(dtype, acc or problem.ACCUMULATE[dtype][0], dtype, K)


def _run(a, b, c, alpha=1.0, beta=0.0, acc=None, kernel="auto"):
    """matmul on GuardedArray operands (c None: a new result); (relative error, bound, the result)."""
    ref = alpha * np.matmul(a.exact, b.exact)
    if c is not None and beta:
        ref = ref + beta * c.exact
    res = hg.matmul(a.view, b.view, out=c.view if c is not None else None, alpha=alpha, beta=beta if c else 0.0,
                    accumulate=acc, kernel=kernel)
    if c is not None:
        assert res is c.view
        assert c.outside_untouched(), "matmul wrote outside out's view"
        got = c.read()
    else:
        assert isinstance(res, DeviceArray) and res.shape == ref.shape and res.is_c_contiguous
        got = storage_to_f64(download(res, np.empty(res.shape, STORAGE[a.dtype])), a.dtype)
    return _rel(got, ref), _bound(a.dtype, a.shape[-1], acc), res


# ---------------------------------------------------------------------------------------------------
# GPU: correctness
# ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("batch", [1, 3, 7, 64])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (17, 33, 9), (131, 77, 261), (128, 256, 64)])
def test_batched_matches_float64(dtype, batch, M, N, K, rng):
    a = GuardedArray(rng.standard_normal((batch, M, K)), dtype)
    b = GuardedArray(rng.standard_normal((batch, K, N)), dtype)
    c = GuardedArray(np.full((batch, M, N), np.nan), dtype)
    err, bound, _ = _run(a, b, c)
    assert err <= bound, f"rel err {err:.2e} > {bound:.2e}: {hg.explain(a.view, b.view, out=c.view)}"
    err, bound, res = _run(a, b, None)
    assert err <= bound and res.shape == (batch, M, N)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("sa,sb,kw_a,kw_b", [
    ((61, 40), (5, 40, 129), {}, {}),                                      # A 2-D: broadcast
    ((5, 61, 40), (40, 129), {"perm": [0], "gap": 3}, {}),                 # B 2-D, A's batch does not fold
    ((2, 1, 61, 40), (3, 40, 129), {}, {}),                                # (2, 1) against (3,)
    ((4, 61, 40), (4, 40, 129), {"expand": (0,)}, {}),                     # A expanded: stride 0
    ((3, 1, 61, 48), (1, 4, 48, 64), {}, {"order": "col"}),                # both broadcast, B column-major
    ((2, 3, 61, 40), (2, 3, 40, 72), {"perm": [0, 1]}, {"perm": [0, 1]}),  # transposed batch dimensions
])
def test_broadcast_and_strided_batches(dtype, sa, sb, kw_a, kw_b, rng):
    a = GuardedArray(rng.standard_normal(sa), dtype, **kw_a)
    b = GuardedArray(rng.standard_normal(sb), dtype, **kw_b)
    shape = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    c = GuardedArray(rng.standard_normal(shape), dtype, order="col", pad=3)
    err, bound, _ = _run(a, b, c, alpha=0.5, beta=-2.0)
    assert err <= bound, f"rel err {err:.2e} > {bound:.2e}: {hg.explain(a.view, b.view, out=c.view)}"


@pytest.mark.gpu
def test_more_levels_than_a_launch_takes(rng):
    """Three batch levels that do not merge: the kernel takes two, a loop of launches the third."""
    a = GuardedArray(rng.standard_normal((2, 3, 5, 20, 24)), "f16", perm=[1, 0, 2], gap=8)
    b = GuardedArray(rng.standard_normal((2, 3, 5, 24, 16)), "f16", perm=[2, 0, 1])
    c = GuardedArray(np.full((2, 3, 5, 20, 16), np.nan), "f16", perm=[0, 2, 1])
    assert "launches" in hg.explain(a.view, b.view, out=c.view)
    err, bound, _ = _run(a, b, c)
    assert err <= bound


@pytest.mark.gpu
def test_more_matrices_than_grid_z_holds(rng):
    n = 70000  # 2 launches of 35000
    a = GuardedArray(rng.standard_normal((n, 4, 8)), "f16")
    b = GuardedArray(rng.standard_normal((n, 8, 4)), "f16")
    err, bound, res = _run(a, b, None)
    assert err <= bound and res.shape == (n, 4, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,layouts", [
    ("f16", 70, 136, 120, ("row", "row", "row")),
    ("f16", 131, 77, 261, ("col", "row", "row")),
    ("f16", 64, 256, 96, ("row", "col", "col")),
    ("bf16", 150, 260, 70, ("row", "col", "row")),
    ("f32", 97, 141, 100, ("row", "row", "row")),
    ("f16", 5, 77, 261, ("row", "col", "row")),  # decode-sized rows
    ("bf16", 5, 200, 136, ("row", "row", "row")),  # ... with B as K x N
])
def test_every_batched_route_is_correct(dtype, M, N, K, layouts, rng):
    """Every recipe the planner ranks for a batch of 3 (and a 2 x 2 one with B broadcast along a level),
    forced once, against float64; C's surroundings untouched."""
    tested, bad = 0, []
    for sa, sb, sc in (((3, M, K), (3, K, N), (3, M, N)), ((2, 2, M, K), (2, 1, K, N), (2, 2, M, N))):
        a = GuardedArray(rng.standard_normal(sa), dtype, layouts[0], gap=5)
        b = GuardedArray(rng.standard_normal(sb), dtype, layouts[1])
        c = GuardedArray(rng.standard_normal(sc), dtype, layouts[2], gap=1)
        for alpha, beta in ((1.0, 0.0), (0.5, 2.0)):
            want = alpha * np.matmul(a.exact, b.exact) + beta * c.exact
            call = api.validate_call(a.view, b.view, c.view, alpha, beta, None, "auto", None)
            prob = api.problem_of(call)
            assert prob.batched
            for plan, got in each_route(prob, dtype, a, b, c, alpha, beta):
                err, bound = _rel(got, want), _bound(dtype, K, prob.acc)
                tested += 1
                if not err <= bound or not c.outside_untouched():
                    bad.append(f"{sa} {planner.describe(plan)}: {err:.2e} > {bound:.2e}")
    assert tested >= 4 and not bad, "\n".join(bad)


@pytest.mark.gpu
def test_torch_batched_matmul_bmm_and_attention_layout(rng):
    torch = pytest.importorskip("torch")
    for dt, tol in ((torch.float16, 1e-3), (torch.bfloat16, 8e-3), (torch.float32, 1e-5)):
        x = torch.randn(6, 100, 72, device="cuda", dtype=dt)
        y = torch.randn(6, 72, 90, device="cuda", dtype=dt)
        ref = x.double() @ y.double()
        z = hg.matmul(x, y)
        assert isinstance(z, torch.Tensor) and z.shape == (6, 100, 90) and z.dtype == dt
        out = torch.randn(6, 100, 90, device="cuda", dtype=dt)
        ref2 = 0.5 * ref + 2.0 * out.double()
        assert hg.matmul(x, y, out=out, alpha=0.5, beta=2.0) is out
        torch.cuda.synchronize()
        for got, want in ((z, ref), (out, ref2)):
            assert ((got.double() - want).norm() / want.norm()).item() < tol, dt
    # attention: q, k, v as (B, S, H, D) viewed (B, H, S, D); scores = q @ k^T, then scores @ v
    B, S, H, D = 2, 256, 8, 64
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16).transpose(1, 2) for _ in range(3))
    scores = hg.matmul(q, k.transpose(-1, -2), alpha=D ** -0.5)
    ref = (q.double() @ k.double().transpose(-1, -2)) * D ** -0.5
    torch.cuda.synchronize()
    assert ((scores.double() - ref).norm() / ref.norm()).item() < 1e-3
    p = torch.softmax(scores.float(), -1).half()
    o = hg.matmul(p, v)
    ref = p.double() @ v.double()
    torch.cuda.synchronize()
    assert o.shape == (B, H, S, D) and ((o.double() - ref).norm() / ref.norm()).item() < 1e-3
    # torch.matmul's broadcasting, 4-D against 3-D
    a = torch.randn(3, 1, 40, 24, device="cuda", dtype=torch.float16)
    b = torch.randn(5, 24, 33, device="cuda", dtype=torch.float16)
    got, want = hg.matmul(a, b), torch.matmul(a.double(), b.double())
    torch.cuda.synchronize()
    assert got.shape == want.shape and ((got.double() - want).norm() / want.norm()).item() < 1e-3


@pytest.mark.gpu
def test_numpy_batched_in_and_out(rng):
    a = rng.standard_normal((4, 33, 65)).astype(np.float32)
    b = rng.standard_normal((65, 17)).astype(np.float32)[None].repeat(4, 0).transpose(0, 2, 1).transpose(0, 2, 1)
    c = hg.matmul(a, b)
    assert isinstance(c, np.ndarray) and c.shape == (4, 33, 17)
    assert _rel(c.astype(np.float64), np.matmul(a.astype(np.float64), b)) < 1e-5
    out = np.ones((4, 33, 17), np.float32)
    assert hg.matmul(a, b, out=out, beta=1.0) is out
    assert _rel(out.astype(np.float64), np.matmul(a.astype(np.float64), b) + 1.0) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,b_order", [("f16", "col"), ("bf16", "row")])
def test_dynamic_tile_order_is_correct_launch_after_launch(dtype, b_order, rng, monkeypatch, fresh_plans):
    """A batched launch with many tiles in the dynamic tile order (100 x (300 x 1000 x 72): 1200 ragged tiles; its
    60 MB of C is under the cost model's output-size condition, lowered here), fresh inputs each call, against
    float64: the counter the CTAs claim tiles from is back at zero after every launch (a tile claimed twice or never
    would leave NaN or a wrong sum), with beta * C_old too."""
    monkeypatch.setattr(costmodel, "DYNAMIC_MIN_OUT_BYTES", 0)
    kernel = f"matmul_gemm_wgmma_fused_{dtype}_{'tn' if b_order == 'col' else 'nn'}"
    for call, beta in enumerate((0.0, 0.0, 0.5)):  # (the same execution each time: its counter)
        a = GuardedArray(rng.standard_normal((100, 300, 72)), dtype)
        b = GuardedArray(rng.standard_normal((100, 72, 1000)), dtype, b_order)
        c = GuardedArray(rng.standard_normal((100, 300, 1000)) if beta else np.full((100, 300, 1000), np.nan), dtype)
        plan = hg.explain(a.view, b.view, out=c.view, beta=beta, kernel=kernel)
        assert "dynamic tile order" in plan, plan
        err, bound, _ = _run(a, b, c, 1.0, beta, kernel=kernel)
        assert err <= bound, f"call {call}: rel err {err:.2e} > {bound:.2e}: {plan}"


@pytest.mark.gpu
@pytest.mark.parametrize("batch,M,N,K", [(3, 1, 1, 1), (3, 17, 33, 9), (64, 131, 77, 261), (7, 128, 256, 64)])
def test_dynamic_tile_order_at_any_tile_count(batch, M, N, K, rng, monkeypatch, fresh_plans):
    """The dynamic tile order forced on short launches (fewer tiles than SMs: every CTA's first claim fails),
    twice each, against float64."""
    monkeypatch.setattr(costmodel, "DYNAMIC_MIN_TILES", 1)
    monkeypatch.setattr(costmodel, "DYNAMIC_MAX_K", 1 << 30)
    monkeypatch.setattr(costmodel, "DYNAMIC_MIN_OUT_BYTES", 0)
    for dtype in ("f16", "bf16"):
        a = GuardedArray(rng.standard_normal((batch, M, K)), dtype)
        b = GuardedArray(rng.standard_normal((batch, K, N)), dtype)
        c = GuardedArray(np.full((batch, M, N), np.nan), dtype)
        plan = hg.explain(a.view, b.view, out=c.view)
        if "matmul_gemm_wgmma_fused" not in plan:
            continue  # (another kernel's route: nothing to test here)
        assert "dynamic tile order" in plan
        for call in range(2):
            err, bound, _ = _run(a, b, c)
            assert err <= bound, f"{dtype} call {call}: rel err {err:.2e} > {bound:.2e}: {plan}"


@pytest.mark.gpu
def test_batched_repeats_go_through_a_cuda_graph_and_stay_correct(rng):
    from hgemm_rt.api import GRAPH_AFTER_REPEATS, repeat_key

    A, B, C = hg.empty((8, 96, 80), "f16"), hg.empty((8, 80, 72), "f16"), hg.empty((8, 96, 72), "f16")
    with hg.Stream() as s:
        for i in range(GRAPH_AFTER_REPEATS + 2):
            a = rng.standard_normal((8, 96, 80)).astype(np.float16)
            b = rng.standard_normal((8, 80, 72)).astype(np.float16)
            A.copy_from_numpy(a)
            B.copy_from_numpy(b)
            C.fill_bytes(0xFF, s)
            assert hg.matmul(A, B, out=C, stream=s) is C
            s.synchronize()
            assert _rel(C.to_numpy().astype(np.float64), np.matmul(a.astype(np.float64), b)) < 1e-3, f"call {i}"
        assert hg.plans.calls[repeat_key(A, B, C, stream=s)].last.graph is not None


@pytest.mark.gpu
def test_fuzz_batched_shapes_and_strides(rng):
    """Random batch shapes (broadcast, expanded, transposed batch dimensions, gaps), matrix layouts,
    dtypes and alpha/beta, drawn from the test's seed."""
    for case in range(40):
        dtype = str(rng.choice(["f16", "bf16", "f32"]))
        M, N, K = (int(x) for x in rng.choice([1, 2, 7, 16, 33, 64, 100, 129, 200], 3))
        nb = int(rng.integers(1, 4))
        bshape = [int(x) for x in rng.choice([1, 2, 3, 5], nb)]
        # each operand: the batch shape with some dimensions 1, maybe fewer leading dimensions
        sa, sb = ([n if rng.random() < 0.7 else 1 for n in bshape][int(rng.integers(0, nb + 1)) if rng.random() < 0.3
                                                                    else 0:] for _ in range(2))

        def operand(batch, rows, cols):
            kw = {"order": str(rng.choice(["row", "col", "gen"])), "offset": int(rng.integers(0, 9)),
                  "pad": int(rng.integers(0, 5)), "gap": int(rng.integers(0, 3))}
            if len(batch) > 1 and rng.random() < 0.5:
                kw["perm"] = [int(x) for x in rng.permutation(len(batch))]
            if batch and rng.random() < 0.2:
                kw["expand"] = (int(rng.integers(0, len(batch))),)
            return kw

        a = GuardedArray(rng.standard_normal((*sa, M, K)), dtype, **operand(sa, M, K))
        b = GuardedArray(rng.standard_normal((*sb, K, N)), dtype, **operand(sb, K, N))
        shape = np.matmul(np.zeros((*sa, 1, 1)), np.zeros((*sb, 1, 1))).shape[:-2] + (M, N)
        kw_c = operand(shape[:-2], M, N)
        kw_c.pop("expand", None)
        out_given = rng.random() < 0.7
        c = GuardedArray(rng.standard_normal(shape), dtype, **kw_c) if out_given else None
        alpha, beta = [(1.0, 0.0), (0.5, 0.0), (1.0, 1.0), (-2.0, 0.25)][int(rng.integers(0, 4))]
        err, bound, _ = _run(a, b, c, alpha, beta if out_given else 0.0)
        assert err <= bound, (f"case {case}: {dtype} A{a.shape} B{b.shape} out {out_given} alpha {alpha} "
                              f"beta {beta}: rel err {err:.2e} > {bound:.2e}: {hg.explain(a.view, b.view)}")


# ---------------------------------------------------------------------------------------------------
# CPU: every batched recipe computes the product, in a host model of the kernels' contracts
# ---------------------------------------------------------------------------------------------------

class Heap:
    """Host memory standing in for the GPU's: float64 elements at byte addresses HEAP + i * itemsize;
    every allocation starts on 256 bytes, as cuMemAlloc's do, and NaN fills what nothing wrote."""

    HEAP = 1 << 44

    def __init__(self, isz):
        self.isz, self.mem, self.top = isz, np.full(0, np.nan), 0

    def alloc(self, elements):
        start = self.top
        self.top = -(-(start + elements + 8) * self.isz // 256) * 256 // self.isz
        self.mem = np.concatenate([self.mem, np.full(self.top - self.mem.size, np.nan)])
        return start

    def addr(self, index):
        return self.HEAP + index * self.isz

    def index(self, addr):
        assert (addr - self.HEAP) % self.isz == 0
        return (addr - self.HEAP) // self.isz


class HostND:
    """GuardedArray's layouts in a Heap: `view` is a never-allocated DeviceArray at the heap address."""

    def __init__(self, heap, values, dtype, order="row", offset=0, pad=0, perm=None, gap=0, expand=()):
        *bshape, rows, cols = values.shape
        values = np.array(values)
        for d in expand:
            values = np.broadcast_to(np.take(values, [0], axis=d), values.shape)
        rs, cs = {"row": (cols + pad, 1), "col": (1, rows + pad), "gen": (2 * cols + pad, 2)}[order]
        extent = (rows - 1) * rs + (cols - 1) * cs + 1
        bstr, step = [0] * len(bshape), extent + gap
        for d in (perm if perm is not None else reversed(range(len(bshape)))):
            if d not in expand:
                bstr[d] = step
                step *= bshape[d]
        _, self.exact = stored_and_exact(values, dtype)
        grids = np.meshgrid(*[np.arange(n) for n in values.shape], indexing="ij")
        self.idx = offset + sum(g * s for g, s in zip(grids, bstr + [rs, cs]))
        self.start = heap.alloc(int(self.idx.max()) + 1)
        self.idx = self.idx + self.start
        heap.mem[self.idx] = self.exact
        isz = ITEMSIZE[dtype]
        self.view = DeviceArray(heap.addr(self.start + offset), values.shape, dtype,
                                tuple(s * isz for s in bstr + [rs, cs]))
        self.shape, self.heap = values.shape, heap

    def read(self):
        return self.heap.mem[self.idx]


def _params(spec, scalars, refs):
    """The kernel's declared parameters by name, as ParamPacker packs them (tmap: the ArrayRef it maps)."""
    packer = ParamPacker(spec, scalars)
    out = {}
    for p, (kind, x) in zip(spec.params, packer.slots):
        name = p.partition(":")[2]
        out[name] = x.value if kind in ("i32", "i64") else refs[x].ptr if kind == "ptr" else refs[x]
    return out


def _f32(bits):
    return float(np.array([bits], np.int32).view(np.float32)[0])


def _simulate(heap, recipe, ptrs, alpha, beta, manifest):
    """Run a recipe on the heap, each kernel as its contract (cu/CONTRACT.md, the banners) says: grid.z
    the batch (outer = z / batch_inner), batch strides in elements, zero padding, alpha/beta."""
    from hgemm_rt.launcher import ArrayRef

    isz = heap.isz
    temps = {}
    for t in recipe.temps:  # (the executor zeroes its temporaries once)
        start = heap.alloc(t.count * t.rows * t.row_stride)
        heap.mem[start:start + t.count * t.rows * t.row_stride] = 0.0
        temps[t.name] = heap.addr(start)
    parts = int(np.prod(recipe.loop)) if recipe.loop else 1
    for part in range(parts):
        for step in recipe.steps:
            spec = manifest.kernels[step.kernel]
            tmaps = planner.tmap_operands(spec)
            refs = {}
            for name, v in executor.step_operands(step).items():
                base = ptrs["ABC".index(v.base)] if v.base in "ABC" else temps[v.base]
                if name in tmaps and spec.role in SPLIT_FORMATS and name in ("A", "B"):
                    shape, strides = split_planes(v, step.M if name == "A" else step.N, isz, step.batch)
                elif name in tmaps and executor.batched_launch(step):
                    shape, strides = executor.tma_shape(v, step.batch, isz)
                else:
                    shape, strides = (v.rows, v.cols), (v.rs * isz, v.cs * isz)
                refs[name] = ArrayRef(base + executor.loop_offsets(recipe, v)[part] * isz, shape, strides, spec.dtype)
            for name in executor.OPTIONAL_POINTERS:  # (a plain product: null pointers)
                refs.setdefault(name, ArrayRef(0, (1, 1), (isz, isz), spec.dtype))
            scalars = dict(executor.step_scalars(step), **executor.alpha_beta_bits(step, alpha, beta))
            p = _params(spec, scalars, refs)
            outer, inner = problem.kernel_batch(step.batch)
            b_row = dict(getattr(step, "variant", ())).get("b", "row") == "row"
            for z in range(outer * inner):
                o, i = divmod(z, p.get("batch_inner", 1))
                _kernel(heap, spec, p, o, i, b_row)


def _split_slots(rows, K, block):
    """Where the model of a split kernel keeps entry (r, k) of its source in the planes: head-plane order, one
    value a slot (the real planes' bits are the GPU tests' to check; here the offsets and pointers are)."""
    rr, kk = np.meshgrid(np.arange(rows), np.arange(K), indexing="ij")
    return ((kk // block) * rows + rr) * block + kk % block


def _kernel(heap, spec, p, o, i, b_row):
    mem, isz = heap.mem, heap.isz
    if spec.role in planner.SPLIT_ROLES:  # dst: the source's lines scaled by 2^shift (0 unscaled), zero past K
        fmt = split_format(spec.role)
        rows, K = p["src_rows"], p["src_cols"]
        rr, kk = np.meshgrid(np.arange(rows), np.arange(K), indexing="ij")
        x = mem[heap.index(p["src"]) + o * p.get("bss_o", 0) + i * p.get("bss_i", 0) + rr * p["srs"] + kk * p["scs"]]
        shift = np.zeros(rows)
        if fmt.scaled:
            top = np.abs(x).max(axis=1)
            shift = np.where(top > 0, 14 - np.floor(np.log2(np.where(top > 0, top, 1))), 0)
            mem[heap.index(p["shift"]) + o * p["bse_o"] + i * p["bse_i"] + np.arange(rows)] = shift
        dst = heap.index(p["dst"]) + o * p.get("bsd_o", 0) + i * p.get("bsd_i", 0)
        mem[dst:dst + 2 * -(-K // fmt.block) * rows * SPLIT_ROW] = 0.0
        mem[dst + _split_slots(rows, K, fmt.block)] = x * 2.0 ** shift[:, None]
        return
    alpha, beta = _f32(p["alpha_bits"]), _f32(p["beta_bits"])
    M, N = p["M"], p["N"]
    r, c = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    if spec.role == "copy":
        src = heap.index(p["src"]) + o * p["bss_o"] + i * p["bss_i"]
        dst = heap.index(p["dst"]) + o * p["bsd_o"] + i * p["bsd_i"]
        inside = (r < p["src_rows"]) & (c < p["src_cols"])
        val = np.where(inside, mem[src + np.where(inside, r * p["srs"] + c * p["scs"], 0)], 0.0)
        out = dst + r * p["drs"] + c * p["dcs"]
        mem[out] = alpha * val + (beta * mem[out] if beta else 0.0)
        return
    K = p["K"]
    if spec.role in SPLIT_FORMATS:  # A's and B^T's planes and exponents, matrix (o, i), their exponents off
        fmt = SPLIT_FORMATS[spec.role]
        lv, n_inner = p.get("tma_levels", 0), p.get("batch_inner", 1)

        def lines(ref, rows, shift, bits):  # ref: the map (matrices, planes, rows, 32); the matrix flat over its levels
            z = (o * (n_inner if lv & bits[1] else 1) if lv & bits[0] else 0) + (i if lv & bits[1] else 0)
            assert z < ref.shape[0], (z, ref.shape)
            e = mem[heap.index(p[shift]) + z * rows + np.arange(rows)] if fmt.scaled else np.zeros(rows)
            base = heap.index(ref.ptr) + z * ref.strides[0] // isz
            return mem[base + _split_slots(rows, K, fmt.block)] * 2.0 ** -e[:, None]

        cidx = heap.index(p["C"]) + o * p.get("bsc_o", 0) + i * p.get("bsc_i", 0) + r * p["ldc_r"] + c * p["ldc_c"]
        acc = lines(p["A"], M, "a_shift", (2, 1)) @ lines(p["B"], N, "b_shift", (8, 4)).T
        mem[cidx] = alpha * acc + (beta * mem[cidx] if beta else 0.0)
        return
    m, n, k = np.meshgrid(np.arange(M), np.arange(N), np.arange(K), indexing="ij")
    if spec.role in ("gemm_strided_wgmma", "gemm_fused_wgmma"):  # rank-4 maps: (k, m, inner, outer) where mapped
        lv = p["tma_levels"]
        assert bool(lv & executor.TMA_RANK4) == (len(p["A"].shape) == 4) == (len(p["B"].shape) == 4)

        def tmap(ref, rows_idx, cols_idx, bits, k_axis):
            base = heap.index(ref.ptr)
            if len(ref.shape) == 4:
                ao = o if lv & bits[0] else 0
                ai = i if lv & bits[1] else 0
                assert ao < ref.shape[0] and ai < ref.shape[1]
                base += (ao * ref.strides[0] + ai * ref.strides[1]) // isz
            rows, cols = ref.shape[-2:]
            assert (rows_idx < rows).all() and (cols_idx < cols).all()
            # the K tiles past K read the map's zero padding (a packed copy's) or nothing (TMA's zero fill)
            k_end = min(-(-K // 64) * 64, cols if k_axis == 1 else rows)
            pad = np.arange(K, k_end)
            if pad.size:
                lines = np.unique(rows_idx) if k_axis == 1 else np.unique(cols_idx)
                pr, pc = np.meshgrid(lines, pad, indexing="ij") if k_axis == 1 else np.meshgrid(pad, lines, indexing="ij")
                assert (mem[base + pr * (ref.strides[-2] // isz) + pc] == 0).all(), "K padding is not zero"
            return mem[base + rows_idx * (ref.strides[-2] // isz) + cols_idx]

        a = tmap(p["A"], m, k, (2, 1), 1)
        b = tmap(p["B"], n, k, (8, 4), 1) if spec.layout == "TN" else tmap(p["B"], k, n, (8, 4), 0)
        cbase = heap.index(p["C"]) + o * p["bsc_o"] + i * p["bsc_i"]
        cidx = cbase + r * p["ldc_r"] + c * p.get("ldc_c", 1)  # (the fused kernels' C rows are contiguous)
    else:
        A = heap.index(p["A"]) + o * p["bsa_o"] + i * p["bsa_i"]
        B = heap.index(p["B"]) + o * p["bsb_o"] + i * p["bsb_i"]
        C = heap.index(p["C"]) + o * p["bsc_o"] + i * p["bsc_i"]
        if spec.role == "gemm_strided_simt":
            a, b = mem[A + m * p["ars"] + k * p["acs"]], mem[B + k * p["brs"] + n * p["bcs"]]
            cidx = C + r * p["crs"] + c * p["ccs"]
        else:
            a = mem[A + m * p["lda"] + k]
            b = mem[B + (k * p["ldb"] + n if b_row else n * p["ldb"] + k)]
            cidx = C + r * p["ldc_r"] + c * p["ldc_c"]
    acc = (a * b).sum(axis=2)
    mem[cidx] = alpha * acc + (beta * mem[cidx] if beta else 0.0)


def _host_case(rng, heap, dtype, sa, sb, M, N, K, kw_a, kw_b, kw_c, out_given):
    a = HostND(heap, rng.standard_normal((*sa, M, K)), dtype, **kw_a)
    b = HostND(heap, rng.standard_normal((*sb, K, N)), dtype, **kw_b)
    shape = np.matmul(np.zeros((*sa, 1, 1)), np.zeros((*sb, 1, 1))).shape[:-2] + (M, N)
    c = HostND(heap, rng.standard_normal(shape), dtype, **kw_c) if out_given else None
    return a, b, c, shape


@needs_manifest
@pytest.mark.parametrize("cc", [(9, 0), (8, 0)])
def test_every_batched_recipe_computes_the_product_in_a_host_model(cc, rng):
    """validate_call, the batch levels, every ranked recipe, the executor's scalars, offsets and map
    shapes and the parameter packing, run on a host model of each kernel's contract: each recipe's C
    equals float64's alpha * A @ B + beta * C, and nothing around C is written."""
    cases = [
        ("f16", (3,), (3,), 17, 33, 9, {}, {}, {}),
        ("bf16", (2, 1), (3,), 20, 24, 40, {"gap": 3}, {"order": "col"}, {"order": "col", "pad": 2}),
        ("f16", (5,), (), 16, 40, 72, {"perm": [0], "gap": 8}, {}, {"gap": 1}),
        ("f32", (), (4,), 9, 16, 16, {}, {"expand": ()}, {}),
        ("f16", (4,), (4,), 64, 64, 64, {"expand": (0,)}, {"order": "gen"}, {}),
        ("f16", (2, 3), (2, 3), 8, 16, 24, {"perm": [0, 1]}, {"perm": [0, 1], "order": "col"}, {"perm": [0, 1]}),
        ("f16", (2, 3, 2), (2, 3, 2), 5, 8, 16, {"perm": [1, 0, 2]}, {"perm": [2, 0, 1]}, {"perm": [0, 2, 1]}),
        ("f16", (2, 3, 2), (2, 3, 2), 32, 24, 32, {"perm": [1, 0, 2]}, {"perm": [2, 0, 1]}, {"perm": [0, 2, 1]}),
        ("bf16", (6,), (6,), 1, 24, 80, {}, {"order": "col"}, {}),
    ]
    manifest = MANIFEST
    for dtype, sa, sb, M, N, K, kw_a, kw_b, kw_c in cases:
        for out_given, (alpha, beta) in ((True, (0.5, -2.0)), (True, (1.0, 0.0)), (False, (1.0, 0.0))):
            heap = Heap(ITEMSIZE[dtype])
            a, b, c, shape = _host_case(rng, heap, dtype, sa, sb, M, N, K, kw_a, kw_b, kw_c, out_given)
            call = api.validate_call(a.view, b.view, c.view if c else None, alpha, beta, None, "auto", None)
            prob = api.problem_of(call)
            if c is None:  # a new dense result
                start = heap.alloc(int(np.prod(shape)))
                cidx, cptr = start + np.arange(int(np.prod(shape))).reshape(shape), heap.addr(start)
            else:
                cidx, cptr = c.idx, c.view.ptr
            want = alpha * np.matmul(a.exact, b.exact) + (beta * c.exact if c is not None and beta else 0.0)
            ranked = planner.ranked_recipes(prob, manifest, cc, 132)
            assert ranked
            snapshot = heap.mem.copy()
            for _, recipe in ranked:
                heap.mem = snapshot.copy()
                heap.top = snapshot.size
                _simulate(heap, recipe, (a.view.ptr, b.view.ptr, cptr), alpha, beta, manifest)
                got = heap.mem[cidx]
                where = f"{dtype} A{a.shape} B{b.shape} out {out_given}: {planner.describe(recipe)}"
                assert np.allclose(got, want, rtol=1e-9, atol=1e-9), where
                outside = np.ones(snapshot.size, bool)
                outside[cidx] = False
                outside[snapshot.size:] = False
                assert np.array_equal(heap.mem[:snapshot.size][outside[:snapshot.size]],
                                      snapshot[outside[:snapshot.size]], equal_nan=True), where


@needs_manifest
def test_many_small_outputs_keep_the_static_tile_order():
    """1024 x (128 x 128 x 64): 1024 tiles of K = 64, but 32 MiB of C, which L2 holds (H100, fp16, time_routes
    medians: static 29.5 us, the queue 31.6); 256 x (512 x 512 x 64), 128 MiB, the queue (68.2 -> 67.9 us)."""
    for batch, M, N, queued in ((1024, 128, 128, False), (256, 512, 512, True)):
        q, k = _fake((batch, M, 64)), _fake((batch, 64, N), slot=1)
        recipe = planner.ranked_recipes(api.problem_of(_call(q, k)), MANIFEST, (9, 0), 132)[0][1]
        assert "matmul_gemm_wgmma_fused" in planner.describe(recipe)
        assert ("dynamic tile order" in planner.describe(recipe)) == queued, planner.describe(recipe)
