"""The fused epilogue of matmul: bias=, activation=, scale= (hgemm_rt/epilogue.py, cu/common/epilogue.cuh).

CPU: argument errors before anything runs, the encoding shared with the CUDA header, and what the planner
does with an epilogue (every recipe applies it exactly once, in its last step). GPU: every ranked route
against a float64 reference of y = scale * act(alpha * A.B + bias) + beta * C (SwiGLU: silu(gate) * up),
fresh N(0,1) inputs, the memory around C checked untouched.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import DeviceArray, api, executor, planner
from hgemm_rt.dtypes import storage_to_f64, to_storage
from hgemm_rt.epilogue import ACT_SHIFT, ACTIVATIONS, BIAS_BITS, SWIGLU_BIT, Epilogue, reference
from hgemm_rt.errors import ValidationError
from hgemm_rt.problem import Copy, Gemm, GroupSum
from hgemm_rt.numerics import error_floor
from guarded import GuardedArray, each_route
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (python build_kernels.py)")
HEADER = Path(__file__).resolve().parent.parent / "cu" / "common" / "epilogue.cuh"


def _fake(ptr, shape, dtype="f16", **kw):
    return DeviceArray(ptr, shape, dtype, **kw)  # never allocated: validation must refuse without the GPU


# ---------------------------------------------------------------------------------------------------
# CPU
# ---------------------------------------------------------------------------------------------------

def test_the_python_encoding_is_the_headers():
    text = HEADER.read_text()
    consts = {m[0]: int(m[1]) for m in re.findall(r"(k\w+) = (\d+)", text)}
    assert consts["kBiasCol"] == BIAS_BITS["col"] and consts["kBiasRow"] == BIAS_BITS["row"]
    assert consts["kActRelu"] == ACTIVATIONS["relu"] and consts["kActGelu"] == ACTIVATIONS["gelu"]
    assert consts["kActGeluTanh"] == ACTIVATIONS["gelu_tanh"] and consts["kActSilu"] == ACTIVATIONS["silu"]
    assert f"kActShift = {ACT_SHIFT};" in text and "kSwiGLU = 1 << 8;" in text and SWIGLU_BIT == 1 << 8
    assert Epilogue("row", "gelu", 2.0).flags == 2 | (2 << 4)
    assert Epilogue("col", "swiglu").flags == 1 | 256
    assert Epilogue("row", "relu").transposed() == Epilogue("col", "relu")


A, B = _fake(1 << 20, (64, 32)), _fake(2 << 20, (32, 48))
ERRORS = [
    ("is not one of", lambda: hg.matmul(A, B, activation="tanh")),
    ("N must be even", lambda: hg.matmul(A, _fake(2 << 20, (32, 47)), activation="swiglu")),
    ("bias has dtype", lambda: hg.matmul(A, B, bias=_fake(3 << 20, (48,), "bf16"))),
    ("bias has shape", lambda: hg.matmul(A, B, bias=_fake(3 << 20, (47,)))),
    ("bias has shape", lambda: hg.matmul(A, B, bias=_fake(3 << 20, (64, 48)))),
    ("row bias is not supported", lambda: hg.matmul(_fake(1 << 20, (2, 64, 32)), _fake(2 << 20, (2, 32, 48)),
                                                    bias=_fake(3 << 20, (64, 1)))),
    ("scale=nan", lambda: hg.matmul(A, B, scale=float("nan"))),
    ("out overlaps bias", lambda: hg.matmul(A, B, out=_fake(3 << 20, (64, 48)), bias=_fake(3 << 20, (48,)))),
    ("product is (64, 24)", lambda: hg.matmul(A, B, out=_fake(3 << 20, (64, 48)), activation="swiglu")),
]


@pytest.mark.parametrize("needle,call", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_epilogue_arguments_are_refused_before_the_gpu(needle, call):
    with pytest.raises(ValidationError, match=re.escape(needle)):
        call()


def _problem(M, N, K, dtype="f16", bias=None, activation=None, scale=1.0, beta=0.0, batch=(), alpha=1.0):
    a = _fake(1 << 36, (*batch, M, K), dtype)
    b = _fake(2 << 36, (*batch, K, N), dtype)
    n_out = N // 2 if activation == "swiglu" else N
    c = _fake(3 << 36, (*batch, M, n_out), dtype)
    bv = None if bias is None else _fake(4 << 36, (N,) if bias == "col" else (M, 1), dtype)
    call = api.validate_call(a, b, c, alpha, beta, None, "auto", None, bv, activation, scale)
    return api.problem_of(call)


def test_problems_that_differ_only_in_scale_have_different_keys():
    """Recipes and executions are cached by the problem's key, and a recipe carries the scale to the kernels."""
    assert _problem(64, 48, 32, activation="gelu").key() != _problem(64, 48, 32, activation="gelu", scale=0.5).key()
    assert _problem(64, 48, 32, scale=2.0).key() != _problem(64, 48, 32, scale=0.5).key()


def as_stored(want: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 reference as the output dtype holds it: no kernel comes closer than that rounding. (A SwiGLU of
    a gate at -20 is ~1.5e-7, in fp16's subnormal range, whose spacing 6e-8 puts even the correctly rounded value
    0.19 off: 1 x 2 x 40 on the H100, every route alike.)"""
    return storage_to_f64(to_storage(np.asarray(want, np.float32), dtype), dtype)


def _last_applies_epilogue(recipe, epi):
    """The recipe's steps apply each part of the user's epilogue exactly once: beta, the activation and the scale
    in the last step; alpha and the bias there too, or in the GEMM before it (the SwiGLU fallback adds them to
    the fp32 sums before they are rounded into its temporary)."""
    applying = [s for s in recipe.steps if s.applies_alpha_beta]
    last = recipe.steps[-1]
    if not last.applies_alpha_beta or last.epi is None or not applying:
        return False
    biases = [s.epi.bias for s in applying if s.epi is not None and s.epi.bias]
    return ([s for s in applying if "b" in s.scalars] == [last] and sum("a" in s.scalars for s in applying) == 1
            and biases == ([epi.bias] if epi.bias else []) and last.epi.activation == epi.activation
            and last.epi.scale == epi.scale
            and all(s.epi is None or (s.epi.activation is None and s.epi.scale == 1.0) for s in applying[:-1]))


@needs_manifest
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
@pytest.mark.parametrize("kw", [dict(bias="col", activation="gelu"), dict(bias="row", activation="relu", beta=1.0),
                                dict(activation="swiglu", bias="col"), dict(scale=0.5, activation="silu")])
@pytest.mark.parametrize("shape", [(256, 512, 128), (77, 130, 61), (4, 4096, 512)])
def test_every_recipe_applies_the_epilogue_once_at_the_end(cc, kw, shape):
    prob = _problem(*shape, **kw)
    ranked = planner.ranked_recipes(prob, MANIFEST, cc, 132)
    assert ranked, f"no recipe for {prob.key()}"
    for _us, recipe in ranked:
        epi = prob.epi.transposed() if recipe.route.transpose else prob.epi
        assert _last_applies_epilogue(recipe, epi), planner.describe(recipe)
        if prob.swiglu:
            assert not recipe.route.transpose
            last = recipe.steps[-1]
            spec = MANIFEST.kernels[last.kernel]
            assert planner.pairs_swiglu(spec), f"{spec.name} cannot pair gate and up columns"
        else:  # the activation acts on the fp32 accumulator (or deferred K groups' fp32 sum), not on an fp16 copy
            assert isinstance(recipe.steps[-1], (Gemm, GroupSum)), planner.describe(recipe)
    described = planner.describe(ranked[0][1])
    epi = prob.epi.transposed() if ranked[0][1].route.transpose else prob.epi
    assert all(part in described for part in str(epi).split(", ")), described  # (the SwiGLU fallback: two steps)


@needs_manifest
def test_hopper_fuses_the_epilogue_into_the_gemm():
    """On sm_90 the cheapest recipe of a transformer-sized GEMM + bias + gelu is one kernel, no copy-out."""
    prob = _problem(4096, 4096, 4096, bias="col", activation="gelu")
    best = planner.heuristic_recipe(prob, MANIFEST, (9, 0), 132)
    assert len(best.steps) == 1 and isinstance(best.steps[0], Gemm), planner.describe(best)
    prob = _problem(4096, 2 * 4096, 4096, activation="swiglu")
    best = planner.heuristic_recipe(prob, MANIFEST, (9, 0), 132)
    assert [type(s) for s in best.steps] == [Gemm] and best.steps[0].N == 4096, planner.describe(best)


@needs_manifest
def test_swiglu_without_a_pairing_kernel_is_a_gemm_then_the_swiglu_copy():
    prob = _problem(100, 64, 40, activation="swiglu")
    for _us, recipe in planner.ranked_recipes(prob, MANIFEST, (8, 0), 108):
        last = recipe.steps[-1]
        if isinstance(last, Copy):
            assert last.src.base == "tS" and last.src_cols == 64 and last.dst.cols == 32
            assert "b" in last.scalars and last.epi.swiglu
            # before the SwiGLU copy at most alpha, in a GEMM with the fused epilogue (no bias here)
            assert all(s.scalars == "a" and isinstance(s, Gemm) and s.epi is None for s in recipe.steps[:-1]
                       if s.applies_alpha_beta)


@needs_manifest
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_swiglu_fallback_adds_the_bias_before_rounding(cc):
    """A bias that cancels a gate or up sum must meet it in fp32: the fallback's GEMM applies alpha and the bias
    (kernels with the fused epilogue only: a catalogue kernel's rounded product takes no bias here)."""
    prob = _problem(100, 64, 40, activation="swiglu", bias="col", alpha=0.5, beta=1.0)
    fallbacks = 0
    for _us, recipe in planner.ranked_recipes(prob, MANIFEST, cc, 108):
        if not isinstance(recipe.steps[-1], Copy):
            continue
        fallbacks += 1
        gemm = next(s for s in recipe.steps if isinstance(s, Gemm))
        assert planner.applies_epilogue(MANIFEST.kernels[gemm.kernel]), planner.describe(recipe)
        assert gemm.applies_alpha_beta and gemm.scalars == "a" and gemm.epi == Epilogue("col") and gemm.bias is not None
        assert recipe.steps[-1].bias is None and "(beta, swiglu)" in planner.describe(recipe)
        bits = [executor.alpha_beta_bits(s, 0.5, 1.0) for s in (gemm, recipe.steps[-1])]
        assert bits == [{"alpha_bits": executor.f32_bits(0.5), "beta_bits": 0},  # alpha in the GEMM, beta in the copy
                        {"alpha_bits": executor.f32_bits(1.0), "beta_bits": executor.f32_bits(1.0)}]
    assert fallbacks


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

CASES = [  # dtype, M, N, K, bias, activation, scale, alpha, beta, C order
    ("f16", 200, 136, 120, "col", "gelu", 1.0, 1.0, 0.0, "row"),
    ("f16", 131, 77, 261, "row", "relu", 0.5, 0.7, 1.5, "row"),
    ("bf16", 150, 260, 70, "col", "silu", 1.0, 1.0, 1.0, "col"),
    ("f16", 64, 256, 96, None, "gelu_tanh", 2.0, 1.0, 0.0, "row"),
    ("f16", 5, 77, 261, "col", "relu", 1.0, 1.0, 0.0, "row"),  # decode shapes
    ("f32", 97, 141, 100, "col", "gelu", 1.0, 1.0, 1.0, "row"),
    ("f16", 300, 512, 136, "col", "swiglu", 1.0, 1.0, 0.0, "row"),
    ("bf16", 129, 260, 72, "row", "swiglu", 0.5, 0.9, 1.0, "row"),
    ("f16", 9, 1024, 1000, None, "swiglu", 1.0, 1.0, 0.0, "row"),
    ("f16", 1, 2, 40, "col", "swiglu", 1.0, 1.0, 0.0, "row"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,M,N,K,bias,act,scale,alpha,beta,c_order", CASES)
def test_every_route_applies_the_epilogue(dtype, M, N, K, bias, act, scale, alpha, beta, c_order, rng):
    n_out = N // 2 if act == "swiglu" else N
    a = GuardedArray(rng.standard_normal((M, K)), dtype, "row", 1, 0)
    b = GuardedArray(rng.standard_normal((K, N)), dtype, "row", 0, 0)
    c = GuardedArray(rng.standard_normal((M, n_out)), dtype, c_order, 0, 0)
    bv = None
    if bias is not None:  # a strided bias: a column of a padded matrix, or a row with a gap
        bv = GuardedArray(rng.standard_normal((1, N) if bias == "col" else (M, 1)), dtype, "row", 2, 3)
    call = api.validate_call(a.view, b.view, c.view, alpha, beta, None, "auto", None,
                             None if bv is None else bv.view, act, scale)
    prob = api.problem_of(call)
    want = as_stored(reference(a.exact @ b.exact, prob.epi, alpha, beta, c.exact, None if bv is None else bv.exact),
                     dtype)
    floor = error_floor(dtype, "f32", dtype, K) * (2 if act == "swiglu" else 1)
    tested, bad = 0, []
    for plan, got in each_route(prob, dtype, a, b, c, alpha, beta, bias=bv):
        err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)) if np.isfinite(got).all() \
            else float("inf")
        tested += 1
        last = plan.steps[-1]
        if isinstance(last, Copy) and last.epi is not None and last.epi.swiglu and dtype != "f32":
            # SwiGLU's fallback rounds gate and up into its temporary; silu's relative condition number
            # |1 + g (1 - sigmoid(g))| reaches 5 near g = -6, which a single output (1 x 2 x 40) shows undamped:
            # 2.8e-3 on the H100 against the fused routes' 2e-3 floor
            err /= 2
        if not err <= floor or not c.outside_untouched():
            bad.append(f"{planner.describe(plan)}: {err:.2e} > {floor:.2e}")
    assert tested >= 2 and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_activations_match_float64_element_by_element(act, dtype, rng):
    """Each output within 2 units in the last place of the correctly rounded activation (plus 1e-6 for the
    approximations' absolute error where outputs are tiny), on every route: the norm-wise tests would not see a
    fast formula that is 1% off in a tail. The accumulators are exact (K = 16, one non-zero product per output:
    u_m v_n, fp16/bf16 products fit fp32), u spanning [-12, 12] in 256 steps, v in [0.25, 1]."""
    M, N, K = 256, 136, 16
    u = np.linspace(-12.0, 12.0, M) + rng.uniform(-0.02, 0.02, M)
    v = rng.uniform(0.25, 1.0, N)
    av, bv = np.zeros((M, K)), np.zeros((K, N))
    av[:, 0], bv[0, :] = u, v
    a, b = GuardedArray(av, dtype), GuardedArray(bv, dtype)
    c = GuardedArray(np.zeros((M, N)), dtype)
    call = api.validate_call(a.view, b.view, c.view, 1.0, 0.0, None, "auto", None, None, act, 1.0)
    prob = api.problem_of(call)
    want = as_stored(reference(a.exact @ b.exact, prob.epi), dtype)
    ulp = np.spacing(np.abs(want).astype(np.float16 if dtype == "f16" else np.float32)).astype(np.float64)
    if dtype == "bf16":
        ulp *= 2.0 ** 16  # bf16 keeps 8 of fp32's 24 significant bits
    tol = 2 * ulp + 1e-6
    tested, bad = 0, []
    for plan, got in each_route(prob, dtype, a, b, c, 1.0, 0.0):
        tested += 1
        worst = np.unravel_index(np.argmax(np.abs(got - want) - tol), want.shape)
        if not (np.abs(got - want) <= tol).all():
            bad.append(f"{planner.describe(plan)}: at acc {(a.exact @ b.exact)[worst]:.4g} got {got[worst]:.6g}, "
                       f"want {want[worst]:.6g}")
    assert tested >= 2 and not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["gelu", "swiglu"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_batched_epilogue_matches_float64(act, dtype, rng):
    """(batch, M, K) @ (batch, K, N) with a shared column bias, through matmul itself."""
    batch, M, N, K = 6, 130, 384, 72
    a = GuardedArray(rng.standard_normal((batch, M, K)), dtype)
    b = GuardedArray(rng.standard_normal((batch, K, N)), dtype)
    bv = GuardedArray(rng.standard_normal((1, N)), dtype)
    n_out = N // 2 if act == "swiglu" else N
    out = hg.empty((batch, M, n_out), dtype)
    hg.matmul(a.view, b.view, out=out, bias=bv.view, activation=act)
    got = storage_to_f64(out.to_host(), dtype)
    want = reference(a.exact @ b.exact, Epilogue("col", act), bias=bv.exact)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert err <= 2 * error_floor(dtype, "f32", dtype, K), (err, hg.explain(a.view, b.view, out=out, bias=bv.view,
                                                                             activation=act))


@pytest.mark.gpu
def test_torch_linear_gelu_and_swiglu_mlp_match_torch(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = torch.randn(1000, 512, device="cuda", dtype=torch.float16)
    w1 = torch.randn(2 * 768, 512, device="cuda", dtype=torch.float16) / 512 ** 0.5
    b1 = torch.randn(2 * 768, device="cuda", dtype=torch.float16)
    w2 = torch.randn(512, 768, device="cuda", dtype=torch.float16) / 768 ** 0.5
    h = hg.matmul(x, w1.t(), bias=b1, activation="swiglu")
    y = x.clone()
    hg.matmul(h, w2.t(), out=y, beta=1.0)  # the down projection adds the residual
    x64, w1_64, b1_64, w2_64 = (t.double() for t in (x, w1, b1, w2))
    g, u = (x64 @ w1_64.t() + b1_64).chunk(2, dim=-1)
    want = x64 + (torch.nn.functional.silu(g) * u) @ w2_64.t()
    err = float((y.double() - want).norm() / want.norm())
    assert err < 2e-3, err
    z = hg.matmul(x, w2[:, :512], bias=b1[:512], activation="gelu")
    want = torch.nn.functional.gelu(x64 @ w2_64[:, :512] + b1_64[:512])
    assert float((z.double() - want).norm() / want.norm()) < 2e-3


@pytest.mark.gpu
def test_fuzz_matmul_with_epilogues(rng):
    """Random shapes, layouts, batches and epilogues through matmul, each against float64."""
    acts = [None, "relu", "gelu", "gelu_tanh", "silu", "swiglu"]
    refused = 0
    for trial in range(40):
        dtype = str(rng.choice(["f16", "bf16", "f32"]))
        act = acts[rng.integers(len(acts))] if dtype != "f32" else acts[rng.integers(len(acts) - 1)]
        batch = () if rng.random() < 0.6 else (int(rng.integers(1, 5)),)
        M, K = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        N = int(rng.integers(1, 200)) * (2 if act == "swiglu" else 1)
        n_out = N // 2 if act == "swiglu" else N
        bias = None if rng.random() < 0.3 else ("col" if batch or rng.random() < 0.7 else "row")
        alpha = 1.0 if rng.random() < 0.5 else float(rng.uniform(-2, 2))
        beta = 0.0 if rng.random() < 0.5 else float(rng.uniform(-1, 1))
        a = GuardedArray(rng.standard_normal((*batch, M, K)), dtype, str(rng.choice(["row", "col"])))
        b = GuardedArray(rng.standard_normal((*batch, K, N)), dtype, str(rng.choice(["row", "col"])))
        c = GuardedArray(rng.standard_normal((*batch, M, n_out)), dtype, str(rng.choice(["row", "col"])))
        bv = None if bias is None else GuardedArray(rng.standard_normal((1, N) if bias == "col" else (M, 1)), dtype)
        what = f"trial {trial}: {dtype} {batch} {M}x{N}x{K} bias={bias} act={act} alpha={alpha:.2f} beta={beta:.2f}"
        try:
            hg.matmul(a.view, b.view, out=c.view, alpha=alpha, beta=beta, bias=None if bv is None else bv.view,
                      activation=act)
            got = c.read().reshape(c.shape)
        except ValidationError as exc:  # the one refusal: batched SwiGLU off the fused kernel's layouts
            if not (batch and act == "swiglu" and "batched activation='swiglu'" in str(exc)):
                raise AssertionError(f"{what}: {exc}") from exc
            refused += 1
            continue
        except Exception as exc:
            raise AssertionError(f"{what}: {hg.explain(a.view, b.view, out=c.view, alpha=alpha, beta=beta, bias=None if bv is None else bv.view, activation=act)}: {exc}") from exc
        want = as_stored(reference(a.exact @ b.exact, Epilogue(bias, act), alpha, beta, c.exact,
                                   None if bv is None else bv.exact), dtype)
        err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        floor = error_floor(dtype, "f32", dtype, K) * (2 if act == "swiglu" else 1) * (1 + abs(beta))
        assert err <= floor and c.outside_untouched(), f"{what}: {err:.2e} > {floor:.2e}"
    assert refused < 10, f"{refused} of 40 trials refused"
