"""hgemm::bmm on the CPU (torch without a GPU): its schema, the fake implementation's shapes on meta
tensors, its refusals (the same message from the direct path and the fake implementation), the dispatch
(eager calls take the direct path, through a torch.autograd.Function where gradients are needed;
everything torch records or transforms takes the custom op), the backward's two batched products, and
the computation's calls shaped as torch.bmm's. The CUDA computation is replaced by a CPU stand-in
(torch.bmm) that logs each call, and the checks take CPU tensors as meta ones where a graph is traced.
tests/test_gpu_torch_batched.py runs the op on the GPU.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import hgemm_rt.torch as ht  # noqa: E402  (after the skip: needs torch)
from hgemm_rt import torch_batched as tb  # noqa: E402
from hgemm_rt.errors import ValidationError  # noqa: E402


@pytest.fixture
def log(monkeypatch):
    """The CUDA computation as torch.bmm on the CPU, each call logged as ("bmm", a, b); calls of the custom op
    object logged as ("op",)."""
    calls = []

    def bmm_cpu(a, b, accumulate):
        calls.append(("bmm", a, b))
        return torch.bmm(a, b)

    op = tb._bmm_op

    def spy(*args, **kwargs):
        calls.append(("op",))
        return op(*args, **kwargs)

    monkeypatch.setattr(tb, "_bmm_cuda", bmm_cpu)
    monkeypatch.setattr(tb, "_bmm_op", spy)
    return calls


@pytest.fixture
def cpu_checks(monkeypatch):
    """The checks taking CPU tensors as meta ones: the fake implementation then traces CPU tensors, as
    torch.compile traces CUDA ones."""
    check = tb._check_bmm

    def meta(t):
        return t.to("meta") if t.device.type == "cpu" else t

    monkeypatch.setattr(tb, "_check_bmm", lambda a, b, accumulate, fake: check(meta(a), meta(b), accumulate, True))


def _inputs(*shapes, requires_grad=(), dtype=torch.float64):
    return [torch.randn(s, dtype=dtype).requires_grad_(i in requires_grad) for i, s in enumerate(shapes)]


def _kinds(log):
    return [c[0] for c in log]


def test_the_op_is_exported_with_its_schema():
    assert ht.bmm is tb.bmm
    assert str(torch.ops.hgemm.bmm.default._schema) == \
        "hgemm::bmm(Tensor a, Tensor b, *, str? accumulate=None) -> Tensor"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_fake_implementation_gives_torchs_shape_and_dtype(dtype):
    a, b = torch.empty(4, 5, 7, device="meta", dtype=dtype), torch.empty(4, 3, 7, device="meta", dtype=dtype).mT
    for x, y in ((a, b), (a.mT.contiguous().mT, b.contiguous()), (a[:0], b[:0]), (a[:, :, :0], b[:, :0])):
        c = ht.bmm(x, y)
        ref = torch.bmm(x, y)
        assert c.shape == ref.shape and c.dtype == dtype and c.is_contiguous() and c.is_meta


f16, bf16 = torch.float16, torch.bfloat16
REFUSALS = {  # (a's shape and dtype, b's, accumulate): the message
    "2-D": (((4, 5), f16), ((5, 3), f16), None, "must be 3-D"),
    "batch": (((2, 4, 5), f16), ((3, 5, 3), f16), None, r"a is \(2, 4, 5\) but b is \(3, 5, 3\)"),
    "inner": (((2, 4, 5), f16), ((2, 4, 3), f16), None, "inner dimensions must be equal"),
    "dtype": (((2, 4, 5), torch.float64), ((2, 5, 3), torch.float64), None, "a is torch.float64; the kernels take"),
    "mixed": (((2, 4, 5), f16), ((2, 5, 3), bf16), None, "a is torch.float16 but b is torch.bfloat16"),
    "accumulate": (((2, 4, 5), bf16), ((2, 5, 3), bf16), "f16", "accumulate='f16' is not available for torch.bfloat16"),
    "accumulate name": (((2, 4, 5), f16), ((2, 5, 3), f16), "f8", "accumulate"),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_the_direct_path_refuses_as_the_fake_implementation_does(case):
    (sa, da), (sb, db), acc, match = REFUSALS[case]
    messages = []
    for device in ("cpu", "meta"):  # the direct path's checks, and the custom op's fake implementation
        with pytest.raises(ValidationError, match=match) as info:
            ht.bmm(torch.zeros(sa, dtype=da, device=device), torch.zeros(sb, dtype=db, device=device), accumulate=acc)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_host_tensors_are_refused():
    with pytest.raises(ValidationError, match="a is on cpu; hgemm runs on CUDA"):
        ht.bmm(torch.zeros(2, 3, 4, dtype=f16), torch.zeros(2, 4, 5, dtype=f16))
    with pytest.raises(ValidationError, match="b is on cpu; hgemm runs on CUDA"):  # (the fake implementation's)
        ht.bmm(torch.zeros(2, 3, 4, dtype=f16, device="meta"), torch.zeros(2, 4, 5, dtype=f16))


def test_eager_calls_take_the_direct_path_and_gradients_the_autograd_function(log):
    a, b = _inputs((3, 5, 7), (3, 7, 4), requires_grad=(0, 1))
    with torch.no_grad():
        c = ht.bmm(a, b)
    assert _kinds(log) == ["bmm"] and c.grad_fn is None and torch.equal(c, torch.bmm(a, b))
    log.clear()
    g = torch.randn(3, 5, 4, dtype=torch.float64)
    c = ht.bmm(a, b)
    assert type(c.grad_fn).__name__ == "_BmmFunctionBackward"
    c.backward(g)
    assert _kinds(log) == ["bmm", "bmm", "bmm"]  # the forward, grad_a, grad_b: each on the direct path
    (_, ga, gb), (_, ta, tg) = log[1], log[2]
    assert torch.equal(ga, g) and torch.equal(gb, b.mT) and torch.equal(ta, a.mT) and torch.equal(tg, g)
    assert torch.allclose(a.grad, g @ b.mT) and torch.allclose(b.grad, a.mT @ g)


@pytest.mark.parametrize("needs", [(0,), (1,)], ids=["a", "b"])
def test_only_the_needed_gradient_is_computed(log, needs):
    a, b = _inputs((2, 4, 6), (2, 6, 3), requires_grad=needs)
    ht.bmm(a, b).sum().backward()
    assert _kinds(log) == ["bmm", "bmm"]
    assert (a.grad is None, b.grad is None) == ((0 not in needs), (1 not in needs))


def test_the_direct_backward_is_differentiable_again(log):
    a, b = _inputs((2, 4, 6), (2, 6, 3), requires_grad=(0, 1))
    assert torch.autograd.gradcheck(ht.bmm, (a, b))
    assert torch.autograd.gradgradcheck(ht.bmm, (a, b))
    assert "op" not in _kinds(log)


def test_meta_tensors_take_the_custom_op(log):
    meta = dict(device="meta", dtype=f16)
    ht.bmm(torch.empty(2, 5, 7, **meta), torch.empty(2, 7, 3, **meta))
    assert _kinds(log) == ["op"]


@pytest.mark.usefixtures("cpu_checks")
def test_torch_compile_records_the_op_forward_and_backward(log):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(kind):  # a backend that keeps the graph AOTAutograd traced and runs it as is
        def compiler(gm, example_inputs):
            graphs[kind] = gm.graph
            return make_boxed_func(gm.forward)
        return compiler

    def f(x, y):
        return ht.bmm(x, y).relu()

    torch.compiler.reset()
    compiled = torch.compile(f, fullgraph=True, backend=aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw")))
    a, b = _inputs((3, 5, 7), (3, 7, 4), requires_grad=(0, 1), dtype=torch.float32)
    g = torch.randn(3, 5, 4)
    compiled(a, b).backward(g)
    targets = {k: [str(n.target) for n in gr.nodes if n.op == "call_function" and "hgemm" in str(n.target)]
               for k, gr in graphs.items()}
    assert targets["fw"] == ["hgemm.bmm.default"] and targets["bw"] == ["hgemm.bmm.default"] * 2, targets
    got = [a.grad, b.grad]
    a.grad = b.grad = None
    f(a, b).backward(g)  # eager: the direct path
    assert all(torch.allclose(p, q) for p, q in zip(got, [a.grad, b.grad]))
    torch.compiler.reset()


@pytest.mark.usefixtures("cpu_checks")
def test_make_fx_and_opcheck_see_the_op(log):
    from torch.fx.experimental.proxy_tensor import make_fx

    a, b = _inputs((2, 5, 7), (2, 7, 3), dtype=torch.float32)
    graph = make_fx(lambda x, y: ht.bmm(x, y))(a, b).graph
    assert [str(n.target) for n in graph.nodes if n.op == "call_function"] == ["hgemm.bmm.default"]
    ga, gb = _inputs((2, 5, 7), (2, 7, 3), requires_grad=(0, 1), dtype=torch.float32)
    for args in ((a, b), (ga, gb), (ga, gb.mT.contiguous().mT)):
        torch.library.opcheck(torch.ops.hgemm.bmm.default, args)  # (on the CPU stand-in)


@pytest.fixture
def cpu_matmul(monkeypatch, cpu_checks):
    """hgemm_rt.matmul as the computation calls it, on CPU tensors: each call logged as (a, b)."""
    calls = []

    def matmul(a, b, *, accumulate=None):
        calls.append((a, b))
        return a @ b

    monkeypatch.setattr(tb, "matmul", matmul)
    return calls


def test_the_computation_shapes_its_calls_as_torch_bmm(cpu_matmul):
    """The real computation over a CPU matmul: strided and broadcast operands give torch.bmm's result (broadcast
    ones reach matmul dense), zero-size products never call matmul, K = 0 gives zeros."""
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 4)
    for x, y in ((a, b), (a.mT.contiguous().mT, b), (a, b.mT.contiguous().mT), (a[:1].expand(3, 5, 7), b)):
        cpu_matmul.clear()
        c = ht.bmm(x, y)
        assert torch.allclose(c, torch.bmm(x, y)) and len(cpu_matmul) == 1
        assert all(0 not in t.stride() for t in cpu_matmul[0])
    cpu_matmul.clear()
    assert ht.bmm(a[:0], b[:0]).shape == (0, 5, 4) and ht.bmm(a[:, :0], b).shape == (3, 0, 4)
    assert ht.bmm(a, b[..., :0]).shape == (3, 5, 0)
    assert torch.equal(ht.bmm(a[..., :0], b[:, :0]), torch.zeros(3, 5, 4))
    assert not cpu_matmul


def _scripted_caller(a, b):
    return ht.bmm(a, b)


@pytest.mark.filterwarnings("ignore:`torch.jit.*is deprecated:DeprecationWarning")
def test_torch_jit_script_compiles_a_call_to_the_op():
    nodes = [n.kind() for n in torch.jit.script(_scripted_caller).graph.nodes()]
    assert "hgemm::bmm" in nodes, nodes
