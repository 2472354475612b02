"""hgemm_rt.torch: the `hgemm::mm` and `hgemm::linear` torch operators.

Without torch: importing hgemm_rt never imports torch, and `import hgemm_rt.torch` names the extra to
install. With torch (no GPU needed): the fake implementations' shapes on meta tensors, and every
refusal (device, dtype, shape, accumulate) with its message. On the GPU: torch.library.opcheck on both
ops (fp16/bf16; aligned, ragged and tiny shapes; with and without autograd), results and gradients
against float64 references with the tolerances of the other matmul tests (hgemm_rt.numerics), a side
stream, and a small MLP on the ops under torch.compile (fullgraph) against the same module run
eagerly, against torch's own nn.Linear, and backward through the compiled graph. The direct path
(eager ht.mm / ht.linear without the custom op's dispatch): forward and gradients against float64 and
against the custom ops', compiled functions still holding the ops, and every refusal with the fake
implementation's message (tests/test_torch_dispatch.py checks the dispatch itself on the CPU).
"""
from __future__ import annotations

import copy
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hgemm_rt.errors import ValidationError
from hgemm_rt.numerics import error_floor

ROOT = Path(__file__).resolve().parent.parent
DEVICE = "cuda"
DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
# (M, N, K): aligned, ragged (primes, odd), tiny
SHAPES = {"aligned": (128, 256, 64), "ragged": (37, 19, 61), "tiny": (1, 1, 1)}


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def ht(torch):
    import hgemm_rt.torch as ht

    return ht


@pytest.fixture
def gpu_torch(torch):
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def _randn(torch, rng, shape, dt, requires_grad=False):
    """N(0, 1) from the seeded rng, rounded to dt, on the GPU."""
    x = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(DEVICE, getattr(torch, DTYPES[dt]))
    return x.requires_grad_(requires_grad)


def _rel(got, ref) -> float:
    """||got - ref||_F / ||ref||_F in float64; inf if got is not finite."""
    got = got.detach().double()
    ref = ref.detach().double()
    if not bool(got.isfinite().all()):
        return float("inf")
    return float((got - ref).norm() / max(float(ref.norm()), 1e-30))


def _bound(dt, K):
    return error_floor(dt, "f32", dt, K)


def _seed(torch, rng):
    torch.manual_seed(int(rng.integers(2**31)))  # module init from the test's seed (HGEMM_TEST_SEED replays it)


# ---------------------------------------------------------------------------------------------------
# CPU, without torch
# ---------------------------------------------------------------------------------------------------

def test_importing_hgemm_rt_does_not_import_torch():
    code = "import sys, hgemm_rt; print(sorted(m for m in ('torch', 'hgemm_rt.torch') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", f"import hgemm_rt imported {res.stdout.strip()}"


def test_without_torch_the_import_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` sees where torch is not installed
    monkeypatch.delitem(sys.modules, "hgemm_rt.torch", raising=False)
    with pytest.raises(ImportError, match=r"pip install hgemm\[torch\]"):
        importlib.import_module("hgemm_rt.torch")


# ---------------------------------------------------------------------------------------------------
# with torch, no GPU: fake implementations and refusals
# ---------------------------------------------------------------------------------------------------

def test_fake_implementations_give_torchs_shapes_and_dtypes(torch, ht):
    meta = dict(device="meta", dtype=torch.bfloat16)
    c = ht.mm(torch.empty(5, 7, **meta), torch.empty(7, 3, **meta).t().contiguous().t())
    assert c.shape == (5, 3) and c.dtype == torch.bfloat16 and c.is_contiguous()
    x, w, b = torch.empty(2, 4, 7, **meta), torch.empty(3, 7, **meta), torch.empty(3, **meta)
    for args in ((x, w, b), (x, w), (x[0, 0], w, b), (x.transpose(0, 1), w)):
        y = ht.linear(*args)
        ref = torch.nn.functional.linear(*args)
        assert y.shape == ref.shape and y.dtype == ref.dtype and y.is_contiguous()
    y = ht.replace_linear(torch.nn.Linear(7, 3, device="meta", dtype=torch.float16))(torch.empty(4, 7, device="meta",
                                                                                                 dtype=torch.float16))
    assert y.shape == (4, 3)


def test_refusals_name_the_problem(torch, ht):
    meta = dict(device="meta")
    f16, bf16 = torch.float16, torch.bfloat16
    cases = [
        (lambda: ht.mm(torch.randn(4, 4, dtype=f16), torch.randn(4, 4, dtype=f16)), "on cpu; hgemm runs on CUDA"),
        (lambda: ht.mm(torch.empty(4, 4, dtype=torch.float64, **meta), torch.empty(4, 4, dtype=torch.float64, **meta)),
         "torch.float64; the kernels take"),
        (lambda: ht.mm(torch.empty(4, 4, dtype=f16, **meta), torch.empty(4, 4, dtype=bf16, **meta)),
         "b is torch.bfloat16 but a is torch.float16"),
        (lambda: ht.mm(torch.empty(4, 5, dtype=f16, **meta), torch.empty(4, 5, dtype=f16, **meta)),
         "a is 4 x 5 but b is 4 x 5: inner dimensions differ"),
        (lambda: ht.mm(torch.empty(2, 4, 5, dtype=f16, **meta), torch.empty(5, 5, dtype=f16, **meta)), "must be 2-D"),
        (lambda: ht.mm(torch.empty(4, 4, dtype=bf16, **meta), torch.empty(4, 4, dtype=bf16, **meta), accumulate="f16"),
         "accumulate='f16' is not available for torch.bfloat16"),
        (lambda: ht.linear(torch.empty(3, 5, dtype=f16, **meta), torch.empty(4, 6, dtype=f16, **meta)),
         "in_features = 6"),
        (lambda: ht.linear(torch.empty(3, 6, dtype=f16, **meta), torch.empty(4, 6, dtype=f16, **meta),
                           torch.empty(5, dtype=f16, **meta)), r"expected \(4,\) = \(out_features,\)"),
        (lambda: ht.linear(torch.empty(3, 6, dtype=f16, **meta), torch.empty(4, 6, dtype=f16, **meta),
                           torch.empty(4, dtype=torch.float32, **meta)), "bias is torch.float32 but x"),
    ]
    for call, match in cases:
        with pytest.raises(ValidationError, match=match):
            call()


def test_replace_linear_shares_the_parameters(torch, ht):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(16, 4)))
    params = list(model.parameters())
    assert ht.replace_linear(model) is model
    assert isinstance(model[0], ht.Linear) and isinstance(model[2][0], ht.Linear)
    assert all(p is q for p, q in zip(model.parameters(), params))
    lone = torch.nn.Linear(3, 2, bias=False)
    new = ht.replace_linear(lone)
    assert isinstance(new, ht.Linear) and new.weight is lone.weight and new.bias is None


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------

OPCHECK_TOL = dict(atol=5e-2, rtol=2e-2)  # two runs of one op may take different routes (alignment)


def opcheck_cases(test):
    """Every shape class, fp16 and bf16, with and without gradients, on the GPU."""
    marks = (pytest.mark.gpu, pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES)),
             pytest.mark.parametrize("dt", ["f16", "bf16"]),
             pytest.mark.parametrize("grad", [False, True], ids=["nograd", "grad"]))
    for mark in reversed(marks):  # applied bottom-up, as stacked decorators are
        test = mark(test)
    return test


@opcheck_cases
def test_opcheck_mm(gpu_torch, ht, dt, shape, grad, rng):
    torch = gpu_torch
    M, N, K = SHAPES[shape]
    a = _randn(torch, rng, (M, K), dt, grad)
    b = _randn(torch, rng, (K, N), dt, grad)
    bt = _randn(torch, rng, (N, K), dt, grad).t()  # a column-major view, as a Linear weight's .t()
    op = torch.ops.hgemm.mm.default
    torch.library.opcheck(op, (a, b), **OPCHECK_TOL)
    torch.library.opcheck(op, (a, bt), {"accumulate": "f32"}, **OPCHECK_TOL)
    if dt == "f16":
        torch.library.opcheck(op, (a.t().contiguous().t(), b), {"accumulate": "f16"}, **OPCHECK_TOL)


@opcheck_cases
def test_opcheck_linear(gpu_torch, ht, dt, shape, grad, rng):
    torch = gpu_torch
    M, N, K = SHAPES[shape]
    x = _randn(torch, rng, (2, M, K), dt, grad)
    w = _randn(torch, rng, (N, K), dt, grad)
    bias = _randn(torch, rng, (N,), dt, grad)
    op = torch.ops.hgemm.linear.default
    torch.library.opcheck(op, (x, w, bias), **OPCHECK_TOL)
    torch.library.opcheck(op, (x, w), **OPCHECK_TOL)
    torch.library.opcheck(op, (x.transpose(0, 1), w, bias), **OPCHECK_TOL)  # rows that do not fold: a copy
    torch.library.opcheck(op, (x[0, 0], w, None), **OPCHECK_TOL)  # 1-D x, as nn.Linear takes


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("dt", list(DTYPES))
def test_results_match_float64(gpu_torch, ht, dt, shape, rng):
    torch = gpu_torch
    M, N, K = SHAPES[shape]
    a, b = _randn(torch, rng, (M, K), dt), _randn(torch, rng, (K, N), dt)
    c = ht.mm(a, b)
    assert c.shape == (M, N) and c.dtype == a.dtype and c.is_contiguous()
    assert _rel(c, a.double() @ b.double()) <= _bound(dt, K)
    x, w, bias = _randn(torch, rng, (3, M, K), dt), _randn(torch, rng, (N, K), dt), _randn(torch, rng, (N,), dt)
    ref = x.double() @ w.double().t()
    for args, want in (((x, w), ref), ((x, w, bias), ref + bias.double()),
                       ((x.transpose(0, 1), w, bias), (ref + bias.double()).transpose(0, 1))):
        y = ht.linear(*args)
        assert y.shape == want.shape and y.is_contiguous()
        assert _rel(y, want) <= _bound(dt, K), (len(args), args[0].shape)
    # zero-size products follow torch.mm / F.linear: empty results, and zeros (or the bias) for K = 0
    assert ht.mm(a[:0], b).shape == (0, N)
    assert bool((ht.mm(a[:, :0], b[:0]) == 0).all())
    assert bool((ht.linear(x[..., :0], w[:, :0], bias) == bias).all())


@pytest.mark.gpu
def test_runs_on_the_current_stream(gpu_torch, ht, rng):
    """Inputs made on a side stream, the op called there, the result read there: no extra sync needed."""
    torch = gpu_torch
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = _randn(torch, rng, (300, 200), "f16")
        b = _randn(torch, rng, (200, 170), "f16")
        c = ht.mm(a, b)
        err = _rel(c, a.double() @ b.double())  # (on s, after the op)
    assert err <= _bound("f16", 200)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_gradients_match_torch(gpu_torch, ht, dt, rng):
    """Gradients of mm and linear: in fp32 against torch's own fp32 matmul and F.linear gradients;
    every dtype against float64 gradients. A .sum() loss makes a broadcast (stride 0) gradient."""
    torch = gpu_torch
    M, N, K = 75, 48, 130
    a, b = _randn(torch, rng, (M, K), dt, True), _randn(torch, rng, (K, N), dt, True)
    x, w = _randn(torch, rng, (2, M, K), dt, True), _randn(torch, rng, (N, K), dt, True)
    bias = _randn(torch, rng, (N,), dt, True)
    g_mm, g_lin = _randn(torch, rng, (M, N), dt), _randn(torch, rng, (2, M, N), dt)

    def grads(mm, lin, cast):
        ins = [t.detach().to(cast).requires_grad_() for t in (a, b, x, w, bias)]
        ca, cb, cx, cw, cbias = ins
        loss = (mm(ca, cb) * g_mm.to(cast)).sum() + (lin(cx, cw, cbias) * g_lin.to(cast)).sum()
        loss.backward()
        mm(ca, cb).sum().backward()  # (its gradients add onto the ones above)
        return [t.grad for t in ins]

    ours = grads(ht.mm, ht.linear, a.dtype)
    exact = grads(torch.mm, torch.nn.functional.linear, torch.float64)
    reduction = {"a": N, "b": M, "x": N, "w": 2 * M, "bias": 2 * M}  # the length each gradient sums over
    for name, got, ref in zip(reduction, ours, exact):
        assert got.dtype == a.dtype and got.shape == ref.shape
        assert _rel(got, ref) <= 2 * _bound(dt, reduction[name]), name
    if dt == "f32":  # (torch's own error sets the bound too, should its fp32 matmuls be allowed TF32 here)
        theirs = grads(torch.mm, torch.nn.functional.linear, torch.float32)
        for name, got, ref, ex in zip(reduction, ours, theirs, exact):
            assert _rel(got, ref) <= max(1e-4, 2 * _rel(ref, ex)), name


def _mlp(torch, rng, dt, d_in=96, hidden=200, d_out=40):
    _seed(torch, rng)
    model = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, d_out))
    return model.to(DEVICE, getattr(torch, DTYPES[dt]))


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_compiled_mlp_matches_eager_and_torch(gpu_torch, ht, dt, rng):
    torch = gpu_torch
    model = _mlp(torch, rng, dt)
    ours = ht.replace_linear(copy.deepcopy(model))
    exact = copy.deepcopy(model).double()
    graphs = []

    def record(gm, example_inputs):  # a backend that keeps the graph Dynamo captured and runs it as is
        graphs.append(gm)
        return gm.forward

    torch.compiler.reset()
    traced = torch.compile(ours, backend=record, fullgraph=True)
    x = _randn(torch, rng, (4, 33, 96), dt)
    assert _rel(traced(x), ours(x)) <= _bound(dt, 200)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count("hgemm.linear.default") == 2, targets

    torch.compiler.reset()
    compiled = torch.compile(ours, fullgraph=True)  # inductor
    bound = _bound(dt, 200)
    for shape in ((4, 33, 96), (3, 17, 96), (5, 96)):  # new batch shapes: a dynamic-shape recompile
        x = _randn(torch, rng, shape, dt)
        with torch.no_grad():
            got, eager, theirs, ref = compiled(x), ours(x), model(x), exact(x.double())
        assert got.shape == ref.shape and got.dtype == x.dtype
        assert _rel(got, eager) <= bound, shape
        assert _rel(eager, theirs) <= 3 * bound, shape
        assert _rel(got, ref) <= 2 * _rel(theirs, ref) + bound, shape


@pytest.mark.gpu
def test_compiled_training_step_matches_eager(gpu_torch, ht, rng):
    """Backward through the compiled graph (AOTAutograd traces the registered backward, itself on
    hgemm::mm) against the same module's eager gradients, fp32, and an optimizer step."""
    torch = gpu_torch
    model = ht.replace_linear(_mlp(torch, rng, "f32"))
    twin = copy.deepcopy(model)
    torch.compiler.reset()
    compiled = torch.compile(twin, fullgraph=True)
    x, target = _randn(torch, rng, (64, 96), "f32", True), _randn(torch, rng, (64, 40), "f32")
    x2 = x.detach().clone().requires_grad_()
    torch.nn.functional.mse_loss(model(x), target).backward()
    torch.nn.functional.mse_loss(compiled(x2), target).backward()
    assert _rel(x2.grad, x.grad) <= 1e-5
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert _rel(q.grad, p.grad) <= 1e-5, name
    opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    opt.step()
    with torch.no_grad():
        assert torch.isfinite(compiled(x2)).all()


@pytest.mark.gpu
def test_linear_module_under_autocast_computes_like_nn_linear(gpu_torch, ht, rng):
    """fp32 parameters, torch.autocast(bf16): the output is bf16 as nn.Linear's, within bf16 error of it,
    and the fp32 parameters get fp32 gradients."""
    torch = gpu_torch
    model = _mlp(torch, rng, "f32")
    ours = ht.replace_linear(copy.deepcopy(model))
    x = _randn(torch, rng, (16, 96), "f32")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got, want = ours(x), model(x)
    assert got.dtype == want.dtype == torch.bfloat16
    assert _rel(got, want) <= 3 * _bound("bf16", 200)
    got.float().square().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in ours.parameters())


@pytest.mark.gpu
def test_reduce_overhead_compile_captures_the_ops_in_cuda_graphs(gpu_torch, ht, rng):
    """mode="reduce-overhead": torch captures the compiled forward in a CUDA graph after warm-up runs
    (matmul plans are built outside the capture then) and replays it."""
    torch = gpu_torch
    ours = ht.replace_linear(_mlp(torch, rng, "f16"))
    torch.compiler.reset()
    compiled = torch.compile(ours, mode="reduce-overhead", fullgraph=True)
    x = _randn(torch, rng, (8, 96), "f16")
    with torch.no_grad():
        eager = ours(x)
        for _ in range(4):  # warm-up, capture, replays
            got = compiled(x).clone()
            assert _rel(got, eager) <= _bound("f16", 200)


# ---------------------------------------------------------------------------------------------------
# GPU: the direct path (eager ht.mm / ht.linear without the custom op's dispatch)
# ---------------------------------------------------------------------------------------------------

def _linear_cases(torch, rng, dt, M=37, N=48, K=130):
    """(name, x, w, bias) for 2-D and 3-D x, with and without a bias, every tensor requiring grad."""
    x2, x3 = _randn(torch, rng, (M, K), dt, True), _randn(torch, rng, (2, M, K), dt, True)
    w, bias = _randn(torch, rng, (N, K), dt, True), _randn(torch, rng, (N,), dt, True)
    return [("2-D", x2, w, None), ("2-D bias", x2, w, bias), ("3-D", x3, w, None), ("3-D bias", x3, w, bias)]


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_direct_path_forward_and_backward_match_float64(gpu_torch, ht, dt, rng):
    """ht.mm and ht.linear eagerly: forward (with and without grad) and every gradient against float64
    autograd; the result's grad_fn is the direct path's autograd.Function."""
    torch = gpu_torch
    K = 130
    a, b = _randn(torch, rng, (37, K), dt, True), _randn(torch, rng, (K, 48), dt, True)
    g = _randn(torch, rng, (37, 48), dt)
    c = ht.mm(a, b)
    assert type(c.grad_fn).__name__ == "_MmFunctionBackward"
    with torch.no_grad():
        assert ht.mm(a, b).grad_fn is None
    c.backward(g)
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    c64 = a64 @ b64
    c64.backward(g.double())
    assert _rel(c, c64) <= _bound(dt, K)
    assert _rel(a.grad, a64.grad) <= 2 * _bound(dt, 48) and _rel(b.grad, b64.grad) <= 2 * _bound(dt, 37)
    for name, x, w, bias in _linear_cases(torch, rng, dt, K=K):
        for t in (x, w, bias):
            if t is not None:
                t.grad = None
        y = ht.linear(x, w, bias)
        assert type(y.grad_fn).__name__ == "_LinearFunctionBackward", name
        with torch.no_grad():
            assert _rel(ht.linear(x, w, bias), y) <= _bound(dt, K), name
        gy = _randn(torch, rng, tuple(y.shape), dt)
        y.backward(gy)
        ins64 = [None if t is None else t.detach().double().requires_grad_() for t in (x, w, bias)]
        y64 = torch.nn.functional.linear(*ins64)
        y64.backward(gy.double())
        rows = y.numel() // y.shape[-1]
        assert y.shape == y64.shape and y.is_contiguous() and _rel(y, y64) <= _bound(dt, K), name
        # (each gradient against its float64 one, bounded by the length it sums over)
        for what, t, t64, n in (("x", x, ins64[0], 48), ("w", w, ins64[1], rows), ("bias", bias, ins64[2], rows)):
            if t is None:
                continue
            assert t.grad.dtype == x.dtype and t.grad.shape == t.shape, (name, what)
            assert _rel(t.grad, t64.grad) <= 2 * _bound(dt, n), (name, what)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_direct_path_gradients_equal_the_custom_ops(gpu_torch, ht, dt, rng):
    """The same inputs through ht.mm / ht.linear (the direct path) and torch.ops.hgemm.mm / linear (the
    custom ops): results and gradients agree to within one rounding of the output."""
    torch = gpu_torch
    K = 130
    a, b = _randn(torch, rng, (37, K), dt, True), _randn(torch, rng, (K, 48), dt, True)
    g = _randn(torch, rng, (37, 48), dt)

    def run(fn, *ins, grad):
        ins = [None if t is None else t.detach().clone().requires_grad_() for t in ins]
        out = fn(*ins)
        out.backward(grad)
        return [out] + [None if t is None else t.grad for t in ins]

    for got, ref in zip(run(ht.mm, a, b, grad=g), run(torch.ops.hgemm.mm, a, b, grad=g)):
        assert _rel(got, ref) <= _bound(dt, K)
    for name, x, w, bias in _linear_cases(torch, rng, dt, K=K):
        gy = _randn(torch, rng, (*x.shape[:-1], w.shape[0]), dt)
        for got, ref in zip(run(ht.linear, x, w, bias, grad=gy), run(torch.ops.hgemm.linear, x, w, bias, grad=gy)):
            assert (got is None) == (ref is None), name
            if got is not None:
                assert got.shape == ref.shape and _rel(got, ref) <= _bound(dt, K), name


@pytest.mark.gpu
def test_compiled_functions_call_the_custom_ops(gpu_torch, ht, rng):
    """torch.compile(fullgraph=True) of a function on ht.linear and ht.mm: the graph Dynamo captures holds
    the custom ops (is_compiling() is True at trace time), and its results match the eager ones."""
    torch = gpu_torch
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(x, w, bias, m):
        return ht.mm(ht.linear(x, w, bias), m)

    x, w, bias, m = (_randn(torch, rng, shape, "f16") for shape in ((40, 96), (64, 96), (64,), (64, 24)))
    torch.compiler.reset()
    got = torch.compile(fn, backend=record, fullgraph=True)(x, w, bias, m)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets == ["hgemm.linear.default", "hgemm.mm.default"], targets
    assert _rel(got, fn(x, w, bias, m)) <= _bound("f16", 64)
    torch.compiler.reset()


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_repeat_calls_on_new_activations_match_float64(gpu_torch, ht, dt, rng):
    """ht.linear and ht.mm as a model calls them: a new x every call (three cycled twice: first calls, then
    repeats of the kept ones), 2-D and 3-D x (batch folding into rows, and one that does not), with and without a
    bias, with grad and without; every result against float64, of torch's shape, contiguous, and every repeat
    kept under its entry's key. A refusal after the repeats still names the problem."""
    from hgemm_rt import api, plans

    torch = gpu_torch
    M, N, K = 37, 48, 130
    w, bias = _randn(torch, rng, (N, K), dt), _randn(torch, rng, (N,), dt)
    pools = {"2-D": [_randn(torch, rng, (M, K), dt) for _ in range(3)],
             "3-D": [_randn(torch, rng, (2, M, K), dt) for _ in range(3)],
             "3-D, no fold": [_randn(torch, rng, (M, 2, K), dt).transpose(0, 1) for _ in range(3)]}
    F = torch.nn.functional
    for (name, pool), b, grad in ((c, b, g) for c in pools.items() for b in (None, bias) for g in (False, True)):
        wg = w.detach().requires_grad_(grad)
        for x in pool + pool:
            y = ht.linear(x, wg, b)
            ref = F.linear(x.double(), w.double(), None if b is None else b.double())
            assert y.shape == ref.shape and y.dtype == x.dtype and y.is_contiguous(), (name, b is None, grad)
            assert _rel(y, ref) <= _bound(dt, K), (name, b is None, grad)
            assert (y.grad_fn is not None) == grad
            if name != "3-D, no fold":
                assert api.direct_identity("linear", x, wg, b)[3] in plans.calls, (name, b is None, grad)
    for a in pools["2-D"] * 2:
        c = ht.mm(a, w.t())
        assert c.shape == (M, N) and c.is_contiguous() and _rel(c, a.double() @ w.double().t()) <= _bound(dt, K)
        assert api.direct_identity("mm", a, w.t())[3] in plans.calls
    with pytest.raises(ValidationError, match="bias has shape"):
        ht.linear(pools["2-D"][0], w, bias[:-1])


REFUSALS = {  # (op, x/a (shape, dtype), w/b, [bias], [accumulate]) refused on CUDA tensors
    "dtype": ("mm", ((4, 4), "float64"), ((4, 4), "float64")),
    "mixed": ("mm", ((4, 4), "float16"), ((4, 4), "bfloat16")),
    "inner": ("mm", ((4, 5), "float16"), ((4, 5), "float16")),
    "3-D": ("mm", ((2, 4, 5), "float16"), ((5, 5), "float16")),
    "accumulate": ("mm", ((4, 4), "bfloat16"), ((4, 4), "bfloat16"), "f16"),
    "accumulate name": ("mm", ((4, 4), "float16"), ((4, 4), "float16"), "f8"),
    "in_features": ("linear", ((3, 5), "float16"), ((4, 6), "float16")),
    "1-D weight": ("linear", ((3, 6), "float16"), ((6,), "float16")),
    "bias shape": ("linear", ((3, 6), "float16"), ((4, 6), "float16"), ((5,), "float16")),
    "bias dtype": ("linear", ((3, 6), "float16"), ((4, 6), "float16"), ((4,), "float32")),
    "linear accumulate": ("linear", ((3, 6), "float32"), ((4, 6), "float32"), None, "f16"),
}


@pytest.mark.gpu
def test_direct_path_refuses_as_the_fake_implementation(gpu_torch, ht):
    """Every refusal: the same message from CUDA tensors (the direct path) as from meta tensors (the
    custom op's fake implementation), and accumulate= requests the dtype allows still run."""
    torch = gpu_torch
    for case, (op, *specs) in REFUSALS.items():
        acc = specs.pop() if isinstance(specs[-1], str) else None
        messages = []
        for device in ("cuda", "meta"):
            ins = [None if s is None else torch.zeros(s[0], dtype=getattr(torch, s[1]), device=device) for s in specs]
            with pytest.raises(ValidationError) as info:
                getattr(ht, op)(*ins, accumulate=acc)
            messages.append(str(info.value))
        assert messages[0] == messages[1], case
    a = torch.ones(8, 16, dtype=torch.float16, device=DEVICE)
    assert bool((ht.mm(a, a.t(), accumulate="f16") == 16).all())
    assert bool((ht.linear(a.float(), a.float(), accumulate="tf32") == 16).all())
