"""hgemm_rt.torch's two paths, on the CPU (torch without a GPU): eager calls take the direct path (the
CUDA computation called straight away, or through a torch.autograd.Function where gradients are
needed), everything torch records or transforms takes the custom ops torch.ops.hgemm.mm/linear.

The CUDA computations are replaced by CPU stand-ins (torch's own mm and F.linear) that log each call,
so that the dispatch, the gradients' GEMMs and the traced graphs can be checked here; the checks'
messages are compared between the two paths with the real code. tests/test_torch_ops.py runs both
paths on the GPU.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import hgemm_rt.torch as ht  # noqa: E402  (after the skip: needs torch)
from hgemm_rt.errors import ValidationError  # noqa: E402


@pytest.fixture
def log(monkeypatch):
    """The CUDA computations as CPU stand-ins, each call logged as ("mm", a, b) or ("linear", x, w, bias);
    calls of the custom op objects logged as ("op", name)."""
    calls = []

    def mm_cpu(a, b, accumulate):
        calls.append(("mm", a, b))
        return a @ b

    def linear_cpu(x, weight, bias, accumulate):
        calls.append(("linear", x, weight, bias))
        return F.linear(x, weight, bias)

    def spy(name, op):
        def call(*args, **kwargs):
            calls.append(("op", name))
            return op(*args, **kwargs)
        return call

    monkeypatch.setattr(ht, "_mm_cuda", mm_cpu)
    monkeypatch.setattr(ht, "_linear_cuda", linear_cpu)
    monkeypatch.setattr(ht, "_mm_op", spy("mm", ht._mm_op))
    monkeypatch.setattr(ht, "_linear_op", spy("linear", ht._linear_op))
    return calls


@pytest.fixture
def cpu_checks(monkeypatch):
    """The ops' checks taking CPU tensors as meta ones: the fake implementations then trace CPU tensors, as
    torch.compile traces CUDA ones."""
    check = ht._check_tensors

    def checked(op, named, accumulate, fake):
        check(op, tuple((n, t.to("meta") if t.device.type == "cpu" else t) for n, t in named), accumulate, True)

    monkeypatch.setattr(ht, "_check_tensors", checked)


def _inputs(*shapes, requires_grad=(), dtype=torch.float64):
    out = [torch.randn(s, dtype=dtype) for s in shapes]
    for i in requires_grad:
        out[i].requires_grad_()
    return out


def _kinds(log):
    return [c[0] if c[0] != "op" else f"op:{c[1]}" for c in log]


def test_the_custom_ops_keep_their_schemas():
    assert str(torch.ops.hgemm.mm.default._schema) == "hgemm::mm(Tensor a, Tensor b, *, str? accumulate=None) -> Tensor"
    assert str(torch.ops.hgemm.linear.default._schema) == \
        "hgemm::linear(Tensor x, Tensor weight, Tensor? bias=None, *, str? accumulate=None) -> Tensor"


def test_eager_calls_without_gradients_take_the_direct_path(log):
    a, b, x3, w, bias = _inputs((5, 7), (7, 3), (2, 5, 7), (3, 7), (3,), requires_grad=(3, 4))
    with torch.no_grad():  # (parameters that require grad, as in inference under no_grad)
        c, y = ht.mm(a, b), ht.linear(x3, w, bias)
        z = ht.Linear(7, 3, dtype=torch.float64)(a)
    assert _kinds(log) == ["mm", "linear", "linear"]
    assert torch.equal(c, a @ b) and torch.equal(y, F.linear(x3, w, bias))
    assert c.grad_fn is None and y.grad_fn is None and z.grad_fn is None
    log.clear()
    with torch.inference_mode():
        ht.linear(a, w.detach())
    ht.mm(a, b)  # nothing requires grad
    assert _kinds(log) == ["linear", "mm"]


@pytest.mark.parametrize("needs", ["x", "w", "bias", "x,w,bias"])
def test_linear_gradients_come_from_the_autograd_function(log, needs):
    """Only the needed GEMMs run, on the direct mm: grad_x = g @ W, grad_w = g^T @ x (2-D views of 3-D x)."""
    want = needs.split(",")
    x, w, bias = _inputs((2, 5, 7), (3, 7), (3,), requires_grad=[("x", "w", "bias").index(n) for n in want])
    g = torch.randn(2, 5, 3, dtype=torch.float64)
    y = ht.linear(x, w, bias)
    assert type(y.grad_fn).__name__ == "_LinearFunctionBackward"
    y.backward(g)
    kinds = _kinds(log)
    assert kinds == ["linear"] + ["mm"] * (("x" in want) + ("w" in want)), kinds
    gemms = [c[1:] for c in log if c[0] == "mm"]
    g2 = g.reshape(10, 3)
    expected = ([(g2, w)] if "x" in want else []) + ([(g2.t(), x.reshape(10, 7))] if "w" in want else [])
    assert all(torch.equal(p, q) and torch.equal(r, s) for (p, r), (q, s) in zip(gemms, expected))
    ref = [t.detach().clone().requires_grad_(t.requires_grad) for t in (x, w, bias)]
    F.linear(*ref).backward(g)
    for t, r in zip((x, w, bias), ref):
        assert (t.grad is None) == (r.grad is None)
        if t.grad is not None:
            assert t.grad.shape == t.shape and torch.allclose(t.grad, r.grad)


def test_mm_gradients_come_from_the_autograd_function(log):
    a, b = _inputs((5, 7), (7, 3), requires_grad=(0, 1))
    g = torch.randn(5, 3, dtype=torch.float64)
    c = ht.mm(a, b)
    assert type(c.grad_fn).__name__ == "_MmFunctionBackward"
    c.backward(g)
    assert _kinds(log) == ["mm", "mm", "mm"]
    (_, ga, gb), (_, ta, tg) = log[1], log[2]
    assert torch.equal(ga, g) and torch.equal(gb, b.t()) and torch.equal(ta, a.t()) and torch.equal(tg, g)
    assert torch.allclose(a.grad, g @ b.t()) and torch.allclose(b.grad, a.t() @ g)


def test_the_direct_backward_is_differentiable_again(log):
    """gradcheck and gradgradcheck in float64: the backward's own GEMMs go through the Function again."""
    a, b = _inputs((4, 6), (6, 3), requires_grad=(0, 1))
    x, w, bias = _inputs((2, 4, 6), (3, 6), (3,), requires_grad=(0, 1, 2))
    assert torch.autograd.gradcheck(ht.mm, (a, b))
    assert torch.autograd.gradgradcheck(ht.mm, (a, b))
    assert torch.autograd.gradcheck(ht.linear, (x, w, bias))
    assert torch.autograd.gradgradcheck(ht.linear, (x, w, bias))
    assert not [k for k in _kinds(log) if k.startswith("op")]


def test_meta_tensors_take_the_fake_implementations(log):
    meta = dict(device="meta", dtype=torch.float16)
    ht.mm(torch.empty(5, 7, **meta), torch.empty(7, 3, **meta))
    ht.linear(torch.empty(4, 7, **meta), torch.empty(3, 7, **meta))
    assert _kinds(log) == ["op:mm", "op:linear"]


def _model():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 7))  # (fp32: a dtype the ops' checks take)
            self.b = torch.nn.Parameter(torch.randn(3))

        def forward(self, x, m):
            return ht.mm(ht.linear(x, self.w, self.b), m)

    return Model()


def _targets(graph):
    return [str(n.target) for n in graph.nodes if n.op == "call_function" and "hgemm" in str(n.target)]


@pytest.mark.usefixtures("cpu_checks")
def test_torch_compile_records_the_custom_ops(log):
    """Dynamo reads torch.compiler.is_compiling() as True: the graph holds the ops (fullgraph: nothing of
    the direct path is traced), forward and backward, and runs them."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    model, graphs = _model(), {}

    def keep(kind):  # a backend that keeps the graph AOTAutograd traced and runs it as is
        def compiler(gm, example_inputs):
            graphs[kind] = gm.graph
            return make_boxed_func(gm.forward)
        return compiler

    torch.compiler.reset()
    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x, m = _inputs((5, 7), (3, 4), requires_grad=(0,), dtype=torch.float32)
    g = torch.randn(5, 4)
    compiled(x, m).backward(g)
    assert _targets(graphs["fw"]) == ["hgemm.linear.default", "hgemm.mm.default"]
    assert set(_targets(graphs["bw"])) == {"hgemm.mm.default"}, _targets(graphs["bw"])
    got = [x.grad, model.w.grad, model.b.grad]
    for t in (x, *model.parameters()):
        t.grad = None
    model(x, m).backward(g)  # eager: the direct path
    assert all(torch.allclose(p, q) for p, q in zip(got, [x.grad, model.w.grad, model.b.grad]))
    torch.compiler.reset()


@pytest.mark.usefixtures("cpu_checks")
@pytest.mark.filterwarnings("ignore:`torch.jit.*is deprecated:DeprecationWarning")
def test_tracers_record_the_custom_ops(log):
    """torch.fx, make_fx (a dispatch mode over real tensors), torch.jit.trace and torch.jit.script: each
    graph holds the ops, not what the direct path would have computed."""
    from torch.fx.experimental.proxy_tensor import make_fx

    model = _model()
    x, m = _inputs((5, 7), (3, 4), dtype=torch.float32)
    assert _targets(torch.fx.symbolic_trace(model).graph) == ["hgemm.linear.default", "hgemm.mm.default"]
    log.clear()
    assert _targets(make_fx(model)(x, m).graph) == ["hgemm.linear.default", "hgemm.mm.default"]
    assert _kinds(log) == ["op:linear", "linear", "op:mm", "mm"]  # the ops ran (on the stand-ins) while traced
    for scripted in (torch.jit.trace(model, (x, m), check_trace=False), torch.jit.script(model)):
        nodes = [n.kind() for n in scripted.graph.nodes()]
        assert "hgemm::linear" in nodes and "hgemm::mm" in nodes, nodes


# refusals that come before any device test: the same message from either path here (tests/test_torch_ops.py
# compares every refusal on CUDA tensors)
MISMATCHES = {
    "mm dtype": ("mm", ((4, 4), torch.float64), ((4, 4), torch.float64)),
    "mm inner": ("mm", ((4, 5), torch.float16), ((4, 5), torch.float16)),
    "mm 3-D": ("mm", ((2, 4, 5), torch.float16), ((5, 5), torch.float16)),
    "linear in": ("linear", ((3, 5), torch.float16), ((4, 6), torch.float16)),
    "linear 1-D weight": ("linear", ((3, 6), torch.float16), ((6,), torch.float16)),
    "linear bias shape": ("linear", ((3, 6), torch.float16), ((4, 6), torch.float16), ((5,), torch.float16)),
    "linear dtype": ("linear", ((3, 6), torch.int32), ((4, 6), torch.int32)),
}


def _call(case, device):
    op, *specs = case
    acc = specs.pop() if isinstance(specs[-1], str) else None
    tensors = [None if s is None else torch.zeros(s[0], dtype=s[1], device=device) for s in specs]
    return getattr(ht, op)(*tensors, accumulate=acc)


@pytest.mark.parametrize("case", list(MISMATCHES), ids=list(MISMATCHES))
def test_the_direct_path_refuses_as_the_fake_implementation_does(case):
    messages = []
    for device in ("cpu", "meta"):  # the direct path's checks, and the custom op's fake implementation
        with pytest.raises(ValidationError) as info:
            _call(MISMATCHES[case], device)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_the_direct_path_refuses_host_tensors():
    with pytest.raises(ValidationError, match="x is on cpu; hgemm runs on CUDA"):
        ht.linear(torch.zeros(3, 6, dtype=torch.float16), torch.zeros(4, 6, dtype=torch.float16))
    with pytest.raises(ValidationError, match="b is on cpu; hgemm runs on CUDA"):  # (the fake implementation's)
        ht.mm(torch.zeros(3, 6, dtype=torch.float16, device="meta"), torch.zeros(6, 4, dtype=torch.float16))


@pytest.fixture
def cpu_matmul(monkeypatch, cpu_checks):
    """hgemm_rt.matmul and its direct entries' first calls as the computations call them, on CPU tensors: each
    call logged as (a, b, out, bias), b as the product reads it (a linear's weight transposed)."""
    calls = []

    def matmul(a, b, out=None, *, bias=None, accumulate=None):
        calls.append((a, b, out, bias))
        c = a @ b if bias is None else a @ b + bias
        return c if out is None else out.copy_(c)

    def direct_first(entry, a, b, bias=None):
        return matmul(a, b.t() if entry == "linear" else b, bias=bias)

    monkeypatch.setattr(ht, "matmul", matmul)
    monkeypatch.setattr(ht, "direct_first", direct_first)
    return calls


def test_the_computations_shape_their_calls_as_torch_does(cpu_matmul):
    """The real CUDA computations over a CPU matmul: every shape class of x (2-D, 3-D, one that does not
    fold into rows, 1-D, empty, K = 0) gives F.linear's result; zero-size products never call matmul, and
    broadcast (stride 0) operands reach it dense."""
    w, bias = torch.randn(3, 7), torch.randn(3)
    x3 = torch.randn(2, 5, 7)
    for x in (x3[0], x3, x3.transpose(0, 1), x3[0, 0], x3[:, :0], torch.randn(1, 7).expand(4, 7)):
        for b in (None, bias):
            cpu_matmul.clear()
            y = ht.linear(x, w, b)
            ref = F.linear(x, w, b)
            assert y.shape == ref.shape and y.is_contiguous() and torch.allclose(y, ref, atol=1e-6), (x.shape, b)
            assert len(cpu_matmul) == (x.numel() > 0)
            assert all(0 not in t.stride() for call in cpu_matmul for t in call if t is not None and t.numel() > 1)
    assert torch.equal(ht.linear(x3[..., :0], w[:, :0], bias), bias.expand(2, 5, 3))  # K = 0: the bias alone
    assert torch.equal(ht.linear(x3[..., :0], w[:, :0]), torch.zeros(2, 5, 3))
    assert ht.linear(x3, w[:0]).shape == (2, 5, 0)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    cpu_matmul.clear()
    assert torch.allclose(ht.mm(a, b), a @ b) and torch.allclose(ht.mm(a, b.t().contiguous().t()), a @ b)
    assert ht.mm(a[:0], b).shape == (0, 3) and torch.equal(ht.mm(a[:, :0], b[:0]), torch.zeros(5, 3))
    assert len(cpu_matmul) == 2


class _Kept:
    """A stand-in for a call hgemm_rt kept (bound.Bound): records the addresses it runs at, returns `result`."""

    def __init__(self, result):
        self.result, self.runs = result, []

    def run(self, pa, pb, out, pc, pbias=0):
        self.runs.append((pa, pb, out, pc, pbias))
        return self.result


def _keep(monkeypatch, entry, a, b, bias=None):
    """A stand-in kept under the key of `entry`'s call on these operands (as api.direct_first keeps one)."""
    from hgemm_rt import api, operands
    for t in (a, b, bias):
        operands.call_key(t)  # (learns the tensors' type)
    kept = _Kept(torch.zeros(a.shape[0], b.shape[0] if entry == "linear" else b.shape[1], dtype=a.dtype))
    monkeypatch.setitem(api.plans.calls, api.direct_identity(entry, a, b, bias)[3], kept)
    return kept


def test_a_repeat_call_runs_the_kept_call_without_the_checks(monkeypatch):
    """CPU tensors are refused by the checks: a result here is the kept call's, run at the operands' addresses;
    with accumulate=, another shape or under a tracer, the checks (or the custom op) come back."""
    x, w, bias = _inputs((4, 6), (3, 6), (3,), dtype=torch.float16)
    kept = _keep(monkeypatch, "linear", x, w, bias)
    assert ht.linear(x, w, bias) is kept.result
    assert kept.runs == [(x.data_ptr(), w.data_ptr(), None, 0, bias.data_ptr())]
    a, b = x, w.t()
    kept_mm = _keep(monkeypatch, "mm", a, b)
    assert ht.mm(a, b) is kept_mm.result and kept_mm.runs == [(a.data_ptr(), b.data_ptr(), None, 0, 0)]
    for call in (lambda: ht.linear(x, w, bias, accumulate="f32"), lambda: ht.linear(x, w),
                 lambda: ht.linear(x[:3], w, bias), lambda: ht.mm(a, b, accumulate="f32")):
        with pytest.raises(ValidationError, match="on cpu; hgemm runs on CUDA"):
            call()
    assert len(kept.runs) == 1 and len(kept_mm.runs) == 1
    w.requires_grad_()  # (its key changes with it: kept again)
    kept = _keep(monkeypatch, "linear", x, w, bias)
    y = ht.linear(x, w, bias)
    assert type(y.grad_fn).__name__ == "_LinearFunctionBackward" and len(kept.runs) == 1


def test_a_kept_call_does_not_bypass_the_tracers(monkeypatch, cpu_checks):
    """make_fx (a dispatch mode): the graph holds the custom op even where a call of these operands is kept."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = _inputs((4, 6), (3, 6), dtype=torch.float32)
    _keep(monkeypatch, "linear", x, w)
    monkeypatch.setattr(ht, "direct_first", lambda entry, a, b, bias=None: F.linear(a, b, bias))
    graph = make_fx(lambda x, w: ht.linear(x, w))(x, w).graph
    assert [str(n.target) for n in graph.nodes if n.op == "call_function"] == ["hgemm.linear.default"]


def test_first_calls_take_the_direct_entries(monkeypatch, cpu_checks):
    """2-D x and x whose batch folds into rows: the linear entry on x as it is; x that does not fold: one copy,
    matmul into a view of the result; accumulate=: matmul; mm: the mm entry."""
    log = []

    def direct_first(entry, a, b, bias=None):
        log.append(("direct", entry, a.shape, a.stride()))
        return F.linear(a, b, bias) if entry == "linear" else a @ b

    def matmul(a, b, out=None, *, bias=None, accumulate=None):
        log.append(("matmul", out is not None, accumulate))
        c = a @ b if bias is None else a @ b + bias
        return c if out is None else out.copy_(c)

    monkeypatch.setattr(ht, "direct_first", direct_first)
    monkeypatch.setattr(ht, "matmul", matmul)
    w, bias = torch.randn(3, 7), torch.randn(3)
    x3 = torch.randn(2, 5, 7)
    for x, want in ((x3[0], ("direct", "linear", (5, 7), (7, 1))), (x3, ("direct", "linear", (2, 5, 7), (35, 7, 1))),
                    (x3.transpose(0, 1), ("matmul", True, None))):
        log.clear()
        y = ht.linear(x, w, bias)
        assert log == [want] and torch.allclose(y, F.linear(x, w, bias), atol=1e-6) and y.is_contiguous()
    log.clear()
    ht.linear(x3, w, accumulate="fp32")
    ht.mm(x3[0], w.t())
    assert log == [("matmul", False, "fp32"), ("direct", "mm", (5, 7), (7, 1))]
