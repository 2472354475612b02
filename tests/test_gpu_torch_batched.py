"""hgemm::bmm on the GPU: results against float64 (fp16, bf16, fp32; aligned, ragged and tiny shapes;
transposed and batch-strided views; zero-size products), gradients against float64 autograd, through the
direct path and the custom op alike, torch.library.opcheck on the op, and torch.compile(fullgraph=True)
over a function calling it against the same function run eagerly. The tolerances are those of the other
matmul tests (hgemm_rt.numerics). tests/test_torch_batched.py checks the dispatch on the CPU.
"""
from __future__ import annotations

import numpy as np
import pytest

from hgemm_rt.numerics import error_floor

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
# (batch, M, N, K): aligned, ragged (primes, odd), tiny
SHAPES = {"aligned": (3, 128, 256, 64), "ragged": (5, 37, 19, 61), "tiny": (2, 1, 1, 1)}
OPCHECK_TOL = dict(atol=5e-2, rtol=2e-2)  # two runs of one op may take different routes (alignment)


@pytest.fixture
def ht():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    import hgemm_rt.torch as ht

    return ht


def _rand(rng, shape, dt, grad=False):
    """N(0, 1) from the seeded rng, rounded to dt, on the GPU."""
    x = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to("cuda", DTYPES[dt])
    return x.requires_grad_(grad)


def _rel(got, ref) -> float:
    """||got - ref||_F / ||ref||_F in float64; inf if got is not finite."""
    got, ref = got.detach().double(), ref.detach().double()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30)) if bool(got.isfinite().all()) else float("inf")


def _bound(dt, K):
    return error_floor(dt, "f32", dt, K)


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("dt", list(DTYPES))
def test_results_match_float64(ht, dt, shape, rng):
    B, M, N, K = SHAPES[shape]
    a, b = _rand(rng, (B, M, K), dt), _rand(rng, (B, K, N), dt)
    views = {
        "row-major": (a, b),
        "column-major": (a.mT.contiguous().mT, b.mT.contiguous().mT),  # transposed views, read in place
        "batch-strided": (_rand(rng, (2 * B, M, K), dt)[::2], _rand(rng, (B, K, 2 * N), dt)[..., :N]),
    }
    for name, (x, y) in views.items():
        c = ht.bmm(x, y)
        assert c.shape == (B, M, N) and c.dtype == x.dtype and c.is_contiguous(), name
        assert _rel(c, x.double() @ y.double()) <= _bound(dt, K), name
    # zero-size products follow torch.bmm: empty results, zeros for K = 0
    assert ht.bmm(a[:0], b[:0]).shape == (0, M, N) and ht.bmm(a[:, :0], b).shape == (B, 0, N)
    assert bool((ht.bmm(a[..., :0], b[:, :0]) == 0).all())


@pytest.mark.parametrize("dt", list(DTYPES))
def test_gradients_match_float64(ht, dt, rng):
    """Both gradients through the direct path and through the custom op, against float64 autograd of
    torch.bmm; a .sum() loss adds a broadcast (stride 0) gradient."""
    B, M, N, K = 3, 75, 48, 130
    a, b = _rand(rng, (B, M, K), dt), _rand(rng, (B, K, N), dt)
    g = _rand(rng, (B, M, N), dt)

    def grads(bmm, cast):
        x, y = (t.detach().to(cast).requires_grad_() for t in (a, b))
        ((bmm(x, y) * g.to(cast)).sum() + bmm(x, y).sum()).backward()
        return x.grad, y.grad

    exact = grads(torch.bmm, torch.float64)
    for bmm in (ht.bmm, torch.ops.hgemm.bmm):
        for name, got, ref, reduction in zip(("a", "b"), grads(bmm, a.dtype), exact, (N, M)):
            assert got.dtype == a.dtype and got.shape == ref.shape, name
            assert _rel(got, ref) <= 2 * _bound(dt, reduction), (bmm, name)


@pytest.mark.parametrize("grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_opcheck(ht, shape, dt, grad, rng):
    B, M, N, K = SHAPES[shape]
    a, b = _rand(rng, (B, M, K), dt, grad), _rand(rng, (B, K, N), dt, grad)
    bt = _rand(rng, (B, N, K), dt, grad).mT  # column-major matrices
    op = torch.ops.hgemm.bmm.default
    torch.library.opcheck(op, (a, b), **OPCHECK_TOL)
    torch.library.opcheck(op, (a, bt), {"accumulate": "f32"}, **OPCHECK_TOL)
    if dt == "f16":
        torch.library.opcheck(op, (a.mT.contiguous().mT, b), {"accumulate": "f16"}, **OPCHECK_TOL)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_compiled_function_matches_eager(ht, dt, rng):
    """An attention-like block (scores = q @ k^T, a softmax, @ v) on ht.bmm: the graph Dynamo captures holds
    the op twice (fullgraph), and inductor's compiled function matches eager, for a second batch shape too."""
    def block(q, k, v):
        return ht.bmm(torch.softmax(ht.bmm(q, k.mT) * q.shape[-1] ** -0.5, dim=-1), v)

    graphs = []

    def record(gm, example_inputs):  # a backend that keeps the graph Dynamo captured and runs it as is
        graphs.append(gm)
        return gm.forward

    torch.compiler.reset()
    q, k, v = (_rand(rng, (4, 33, 64), dt) for _ in range(3))
    eager = block(q, k, v)
    assert _rel(torch.compile(block, backend=record, fullgraph=True)(q, k, v), eager) <= _bound(dt, 64)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count("hgemm.bmm.default") == 2, targets
    torch.compiler.reset()
    compiled = torch.compile(block, fullgraph=True)  # inductor
    for shape in ((4, 33, 64), (6, 17, 64)):
        q, k, v = (_rand(rng, shape, dt) for _ in range(3))
        with torch.no_grad():
            got, eager = compiled(q, k, v), block(q, k, v)
        ref = torch.softmax((q.double() @ k.double().mT) * 64 ** -0.5, dim=-1) @ v.double()
        assert got.shape == ref.shape and got.dtype == q.dtype
        assert _rel(got, eager) <= 2 * _bound(dt, 64), shape
        assert _rel(got, ref) <= 4 * _bound(dt, 64), shape
    torch.compiler.reset()
