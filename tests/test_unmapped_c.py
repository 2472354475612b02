"""The fused Hopper kernels (role gemm_fused_wgmma) with a C that TMA cannot map (rows off 16-byte multiples, a
base off 16 bytes, a width off a 16-byte run): the planner sends them that C through ptr:C (tma_levels' kCNoMap,
tmap:C zero bytes) instead of a temporary and a copy-out (CPU); every such kernel, plain, tile queue and stream-K,
against float64 with misaligned C (rows starting 0-3 elements past 8 bytes) at every epilogue, twice, C's
surroundings untouched (GPU)."""
from __future__ import annotations

import ctypes

import pytest

from hgemm_rt import planner, problem
from hgemm_rt.executor import TMA_C_NO_MAP, step_scalars
from hgemm_rt.launcher import ParamPacker
from hgemm_rt.problem import Copy, Gemm, Route
from hgemm_rt.roles.gemm_fused_wgmma import SK_FLAG_BYTES, streamk
from hgemm_rt.roles.tma_gemm import QUEUE
from epilogue_cases import epilogue_case, forced_twice
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")


def _problem(M, N, K, c_rs, c_align=256, dtype="f16"):
    a = problem.View.make("A", M, K, K, 1, 256)
    b = problem.View.make("B", K, N, 1, K, 256)  # N x K row-major, as nn.Linear holds it
    c = problem.View.make("C", M, N, c_rs, 1, c_align)
    return problem.Problem(dtype, "f32", a, b, c, plain=True, beta_zero=True)


def _fused(dtype="f16", layout="TN", stream_k=False):
    return next(n for n, s in MANIFEST.kernels.items() if s.role == "gemm_fused_wgmma" and s.dtype == dtype and
                s.layout == layout and streamk(s) == stream_k)


@needs_manifest
@pytest.mark.parametrize("N,c_rs,c_align", [(4097, 4097, 256), (4096, 4097, 256), (4096, 4096, 2), (4100, 4100, 256)])
def test_a_c_off_tma_rules_goes_by_pointer_with_no_copy_out(N, c_rs, c_align):
    prob = _problem(4096, N, 4096, c_rs, c_align)
    name = _fused()
    recipe = planner.recipe_for(Route(name), prob, MANIFEST)
    (g,) = [s for s in recipe.steps if isinstance(s, Gemm)]
    assert g.c_unmapped and g.c.base == "C" and "C by pointer" in planner.describe(recipe)
    assert not [s for s in recipe.steps if isinstance(s, Copy)], planner.describe(recipe)  # A, B aligned: in place
    assert step_scalars(g)["tma_levels"] & TMA_C_NO_MAP
    # stream-K too
    sk = _fused(stream_k=True)
    r = planner.recipe_for(Route(sk, False, (("ctas", 132),)), _problem(4097, 4097, 4096, 4097), MANIFEST)
    assert r is not None and next(s for s in r.steps if isinstance(s, Gemm)).c_unmapped


@needs_manifest
def test_a_mappable_c_keeps_its_map_and_a_c_without_contiguous_rows_is_not_offered():
    name = _fused()
    g = next(s for s in planner.recipe_for(Route(name), _problem(4096, 4096, 4096, 4104), MANIFEST).steps
             if isinstance(s, Gemm))
    assert not g.c_unmapped and not step_scalars(g)["tma_levels"] & TMA_C_NO_MAP
    col_major = problem.Problem("f16", "f32", problem.View.make("A", 512, 512, 512, 1, 256),
                                problem.View.make("B", 512, 520, 1, 512, 256), problem.View.make("C", 512, 520, 1, 513, 2),
                                plain=True, beta_zero=True)
    assert planner.recipe_for(Route(name), col_major, MANIFEST) is None  # (C^T's route takes it)


@needs_manifest
@pytest.mark.parametrize("M,N", [(4096, 4097), (1024, 50257), (16384, 4097)])
def test_an_odd_width_runs_a_fused_kernel_by_pointer_not_on_c_transposed(M, N):
    # H100, fp16: 4096 x 4097 x 4096 on the matmul m128 kernel as C^T 467 us, the catalogue kernel into a temporary and a
    # transposing copy-out 443, stream-K by pointer 225; 1024 x 50257 x 4096 matmul m128 1220, fused by pointer 625
    ranked = planner.ranked_recipes(_problem(M, N, 4096, N), MANIFEST, (9, 0), 132)
    best = ranked[0][1]
    g = next(s for s in best.steps if isinstance(s, Gemm))
    assert MANIFEST.kernels[g.kernel].role == "gemm_fused_wgmma" and g.c_unmapped, planner.describe(best)
    assert not best.route.transpose and not [s for s in best.steps if isinstance(s, Copy)]
    transposed = [e for e, r in ranked if r.route.transpose]
    assert transposed and min(transposed) > ranked[0][0] * 1.5  # (C^T's element stores or its copy-out)


def test_an_unmapped_operand_gets_a_zero_tensor_map():
    from hgemm_rt.manifest import kernel_spec_from_dict

    spec = kernel_spec_from_dict({
        "name": "k", "family": "f", "role": "gemm_fused_wgmma", "ladder": "matmul", "step": None, "layout": "TN", "dtype": "f16",
        "acc": "f32", "out": "f16", "block": [384, 1, 1], "tile": [128, 256, 64], "grid": "persistent",
        "params": ["tmap:C", "ptr:C", "i32:M"], "tma": {"C": {"box": [64, 64], "swizzle": 128}},
        "technique": "t", "archs": ["90a"]}, "x.toml")

    class Ref:  # an odd row pitch that no tensor map could take
        ptr, shape, strides, dtype = 0x1002, (3, 5), (10, 2), "f16"

    packed = ParamPacker(spec, {"M": 3}, frozenset({"C"})).pack({"C": Ref()})
    tmap = packed.values[0]
    assert ctypes.sizeof(tmap) == 128 and bytes(tmap) == bytes(128)


# dtype, M, N (C's width; SwiGLU: 2N B columns), K, batch, bias, activation, alpha, beta, C's offset and row padding
CASES = [  # (the plain and bias-only epilogues store the staged passes, the others their register pairs)
    ("f16", 300, 517, 1000, (), None, None, 1.0, 0.0, 1, 0),
    ("f16", 257, 264, 4099, (), "col", None, 1.0, 0.0, 1, 1),
    ("bf16", 130, 385, 520, (3,), None, None, 1.0, 0.0, 3, 1),
    ("bf16", 300, 520, 1000, (), "col", "gelu", 0.5, 1.0, 1, 3),
    ("f16", 257, 264, 4099, (), "row", "relu", 1.0, -0.5, 0, 1),
    ("f16", 200, 1024, 777, (), "col", "swiglu", 1.0, 0.5, 3, 1),
    ("bf16", 130, 385, 520, (3,), "col", "silu", 1.0, 0.0, 1, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,batch,bias,act,alpha,beta,c_offset,c_pad", CASES)
def test_every_fused_kernel_stores_an_unmapped_c_exactly(dtype, M, N, K, batch, bias, act, alpha, beta, c_offset,
                                                          c_pad, rng):
    from hgemm_rt.device import get_device

    sms = get_device().info.sm_count
    case = epilogue_case(rng, dtype, M, N, K, batch=batch, bias=bias, act=act, alpha=alpha, beta=beta,
                         c_offset=c_offset, c_pad=c_pad)
    tested, bad = 0, []
    for name, spec in MANIFEST.kernels.items():
        if spec.role != "gemm_fused_wgmma" or spec.dtype != dtype:
            continue
        routes = [Route(name, False, (("ctas", g),)) for g in (8, sms)] if streamk(spec) else \
            [Route(name), Route(name, False, ((QUEUE, 1),))]
        for route in routes:
            plan = planner.recipe_for(route, case.prob, MANIFEST)
            if plan is None:
                continue
            assert next(s for s in plan.steps if isinstance(s, Gemm)).c_unmapped, planner.describe(plan)
            tested += 1
            # the workspace words a launch leaves zero: stream-K's flags and counters, the queue's counter
            temps = {t.name for t in plan.temps}
            temp = "tW" if "tW" in temps else "tQ" if "tQ" in temps else None
            words = SK_FLAG_BYTES // 4 if temp == "tW" else 1
            bad += forced_twice(case, plan, words, temp)
    assert tested >= 2 and not bad, "\n".join(bad)

