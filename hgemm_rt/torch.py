"""PyTorch operators on hgemm_rt.matmul: `hgemm::mm` and `hgemm::linear`, usable eagerly, under
autograd and in `torch.compile` (fullgraph included). Optional: install with `pip install hgemm[torch]`;
`import hgemm_rt` never imports torch, only `import hgemm_rt.torch` does.

    import torch, hgemm_rt.torch as ht
    c = ht.mm(a, b)                        # = torch.ops.hgemm.mm(a, b): a (M, K) @ b (K, N)
    y = ht.linear(x, w, bias)              # = torch.nn.functional.linear: x (..., in), w (out, in)
    z = ht.bmm(p, q)                       # = torch.bmm: p (B, M, K) @ q (B, K, N) (hgemm_rt/torch_batched.py)
    model = ht.replace_linear(model)       # every nn.Linear in it runs on hgemm::linear
    model = torch.compile(model, fullgraph=True)

Both ops take fp16, bf16 or fp32 CUDA tensors of one dtype on one device, any strides, and the
keyword `accumulate` of hgemm_rt.matmul (None: fp32 accumulation; "f16" allows fp16-accumulating
kernels for fp16 inputs, "tf32" TF32 tensor cores for fp32 inputs; "fp32", "fp16", "float16" are the same
requests; the op's schema takes a string, so a dtype is passed by its name). The result is a new contiguous
tensor allocated by torch's caching allocator on the current stream, where the kernels run. Each op
has a fake (meta) implementation with the same checks, so shapes, dtypes and devices are refused with
the same message at trace time as eagerly, and a backward written with the same ops, so models
train and compiled backward graphs hold hgemm kernels too.

`ht.mm` and `ht.linear` (and so Linear and replace_linear) call the same computation directly in eager
mode, without the custom op's dispatch (which costs several times the call itself), under autograd
through a torch.autograd.Function with the same backward. A call that repeats an earlier one (operands of the
same shapes, strides, dtypes, devices and address alignments; new addresses) is found by those alone
(hgemm_rt.api.direct_repeat: the weight as it is, no transposed view) and skips the checks, which the first call
made. Wherever torch records or transforms the call
(torch.compile and export, torch.jit tracing and scripting, torch.fx, make_fx and other dispatch modes,
fake and meta tensors, tensor subclasses, functorch transforms) they call the custom op, so graphs hold
`hgemm.mm` / `hgemm.linear` as before.
"""
from __future__ import annotations

import math
from typing import Optional

try:
    import torch
    from torch import Tensor
except ImportError as exc:  # torch is an optional extra: say which one
    raise ImportError("hgemm_rt.torch needs PyTorch, which is not installed: pip install hgemm[torch] "
                      f"(or install torch yourself) [{exc}]") from exc

if torch.__version__ < "2.4":  # (a TorchVersion: compares as a version) custom_op with kwarg-only autograd
    raise ImportError(f"hgemm_rt.torch needs torch>=2.4 (torch.library.custom_op); this is torch {torch.__version__}: "
                      "pip install -U hgemm[torch]")

from .api import direct_first, direct_repeat, matmul
from .errors import ValidationError
from .operands import torch_dtype_code
from .problem import ACCUMULATE
from .torch_direct import eager, readable, script_as
from .validate import accumulate_code, check_option

__all__ = ["Linear", "bmm", "linear", "mm", "replace_linear"]



# ---------------------------------------------------------------------------------------------------
# checks, shared by the CUDA and the fake implementations (so compile refuses what eager refuses)
# ---------------------------------------------------------------------------------------------------

def _check_tensors(op: str, named: tuple[tuple[str, Tensor], ...], accumulate: Optional[str], fake: bool) -> None:
    first_name, first = named[0]
    for name, t in named:
        if torch_dtype_code(t.dtype) is None:
            raise ValidationError(f"hgemm::{op}: {name} is {t.dtype}; the kernels take torch.float16, "
                                  "torch.bfloat16 or torch.float32")
        if t.dtype != first.dtype:
            raise ValidationError(f"hgemm::{op}: {name} is {t.dtype} but {first_name} is {first.dtype}: "
                                  "cast them to one dtype (ops are not autocast; hgemm_rt.torch.Linear casts "
                                  "as nn.Linear does)")
        # meta tensors (shape inference, deferred init) take the fake implementation only
        if t.device.type != "cuda" and not (fake and t.device.type == "meta"):
            raise ValidationError(f"hgemm::{op}: {name} is on {t.device}; hgemm runs on CUDA tensors "
                                  "(move it with .cuda())")
        if t.device != first.device:
            raise ValidationError(f"hgemm::{op}: {name} is on {t.device} but {first_name} is on {first.device}: "
                                  "move them to one device")
    check_option("accumulate", accumulate, f"hgemm::{op}")  # (the op's schema: a string; "fp32" as "f32")
    choices = ACCUMULATE[torch_dtype_code(first.dtype)]
    if accumulate is not None and accumulate_code(accumulate, f"hgemm::{op}") not in choices:
        raise ValidationError(f"hgemm::{op}: accumulate={accumulate!r} is not available for {first.dtype} "
                              f"inputs; choose None or one of {list(choices)}")


def _check_mm(a: Tensor, b: Tensor, accumulate: Optional[str], fake: bool) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise ValidationError(f"hgemm::mm: a and b must be 2-D, got shapes {tuple(a.shape)} and {tuple(b.shape)} "
                              "(use hgemm::linear for inputs with batch dimensions)")
    if a.shape[1] != b.shape[0]:
        raise ValidationError(f"hgemm::mm: a is {a.shape[0]} x {a.shape[1]} but b is {b.shape[0]} x {b.shape[1]}: "
                              "inner dimensions differ")
    _check_tensors("mm", (("a", a), ("b", b)), accumulate, fake)


def _check_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], accumulate: Optional[str], fake: bool) -> None:
    if weight.dim() != 2:
        raise ValidationError(f"hgemm::linear: weight must be 2-D (out_features, in_features), got shape "
                              f"{tuple(weight.shape)}")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValidationError(f"hgemm::linear: x has shape {tuple(x.shape)}, its last dimension must be "
                              f"in_features = {weight.shape[1]} (weight is {tuple(weight.shape)})")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        raise ValidationError(f"hgemm::linear: bias has shape {tuple(bias.shape)}, expected "
                              f"({weight.shape[0]},) = (out_features,)")
    named = (("x", x), ("weight", weight)) + ((("bias", bias),) if bias is not None else ())
    _check_tensors("linear", named, accumulate, fake)


# ---------------------------------------------------------------------------------------------------
# the CUDA computations, shared by the custom ops' implementations and the direct path
# ---------------------------------------------------------------------------------------------------

_KERNEL_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32))


def _mm_cuda(a: Tensor, b: Tensor, accumulate: Optional[str]) -> Tensor:
    if accumulate is None:  # a repeat of a first call below: its checks passed on operands of these identities
        c = direct_repeat("mm", a, b)
        if c is not None:
            return c
    sa, sb, dt = a.shape, b.shape, a.dtype
    # the usual call in a few cheap comparisons; anything else takes the full checks, which name the problem
    if not (len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0] and dt in _KERNEL_DTYPES and b.dtype is dt
            and accumulate is None and a.is_cuda and b.is_cuda and a.get_device() == b.get_device()):
        _check_mm(a, b, accumulate, fake=False)
    (M, K), N = sa, sb[1]
    if M and N and K:  # the result: new, by matmul (caching allocator, torch's current stream: where it runs)
        if accumulate is None:
            return direct_first("mm", readable(a), readable(b))
        return matmul(readable(a), readable(b), accumulate=accumulate)
    out = a.new_empty((M, N))
    return out.zero_() if K == 0 else out  # (the kernels take M, N, K >= 1; torch.mm's answer for K = 0 is zeros)


def _linear_cuda(x: Tensor, weight: Tensor, bias: Optional[Tensor], accumulate: Optional[str]) -> Tensor:
    if accumulate is None:  # a repeat of a first call below: its checks passed on operands of these identities
        y = direct_repeat("linear", x, weight, bias)
        if y is not None:
            return y
    xs, ws, dt = x.shape, weight.shape, x.dtype
    if not (len(ws) == 2 and len(xs) >= 1 and xs[-1] == ws[1] and dt in _KERNEL_DTYPES and weight.dtype is dt
            and accumulate is None and x.is_cuda and weight.is_cuda and x.get_device() == weight.get_device()
            and (bias is None or bias.dtype is dt and bias.shape == ws[:1] and bias.is_cuda
                 and bias.get_device() == x.get_device())):
        _check_linear(x, weight, bias, accumulate, fake=False)
    N, K = ws
    rows = math.prod(xs[:-1])
    if rows == 0 or N == 0:
        return x.new_empty((*xs[:-1], N))
    if K == 0:  # an empty sum: the bias alone
        out = x.new_empty((*xs[:-1], N))
        return out.zero_() if bias is None else out.copy_(bias)
    x, weight, bias = readable(x), readable(weight), None if bias is None else readable(bias)
    # x (..., K) whose batch dimensions fold into rows (reshape's view: a copy has an address of its own) is
    # one GEMM of matmul's as it is; other x (1-D, or a batch that does not fold, which matmul would take as a
    # batch) as a 2-D view or one dense copy, into a view of the result
    x2 = x.reshape(rows, K)
    if len(xs) >= 2 and x2.data_ptr() == x.data_ptr():
        if accumulate is None:  # the result: new, by matmul (caching allocator, torch's current stream)
            return direct_first("linear", x, weight, bias)
        return matmul(x, weight.t(), bias=bias, accumulate=accumulate)
    out = x.new_empty((*xs[:-1], N))
    matmul(x2, weight.t(), out=out.view(rows, N), bias=bias, accumulate=accumulate)
    return out


# ---------------------------------------------------------------------------------------------------
# the custom ops: what torch.compile, export, jit, fx and fake tensors see
# ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("hgemm::mm", mutates_args=())
def _mm_op(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    return _mm_cuda(a, b, accumulate)


@_mm_op.register_fake
def _mm_fake(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    _check_mm(a, b, accumulate, fake=True)
    return a.new_empty((a.shape[0], b.shape[1]))


def _mm_save(ctx, a: Tensor, b: Tensor, accumulate: Optional[str]) -> None:
    ctx.accumulate = accumulate
    # each gradient needs the other operand only
    ctx.save_for_backward(b if ctx.needs_input_grad[0] else None, a if ctx.needs_input_grad[1] else None)


def _mm_grads(ctx, grad: Tensor, mm_fn) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """The gradients of a and b, each GEMM by mm_fn (the custom op, or the direct path)."""
    b, a = ctx.saved_tensors
    acc = ctx.accumulate
    grad_a = mm_fn(grad, b.t(), accumulate=acc) if ctx.needs_input_grad[0] else None  # .t(): a view, no copy
    grad_b = mm_fn(a.t(), grad, accumulate=acc) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


def _mm_op_setup(ctx, inputs, keyword_only_inputs, output) -> None:
    _mm_save(ctx, *inputs, keyword_only_inputs.get("accumulate"))


def _mm_op_backward(ctx, grad: Tensor):
    return _mm_grads(ctx, grad, _mm_op)


_mm_op.register_autograd(_mm_op_backward, setup_context=_mm_op_setup)


@torch.library.custom_op("hgemm::linear", mutates_args=())
def _linear_op(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *,
               accumulate: Optional[str] = None) -> Tensor:
    return _linear_cuda(x, weight, bias, accumulate)


@_linear_op.register_fake
def _linear_fake(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *,
                 accumulate: Optional[str] = None) -> Tensor:
    _check_linear(x, weight, bias, accumulate, fake=True)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_save(ctx, x: Tensor, weight: Tensor, accumulate: Optional[str]) -> None:
    ctx.accumulate = accumulate
    ctx.x_shape = x.shape
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weight if ctx.needs_input_grad[0] else None)


def _linear_grads(ctx, grad: Tensor, mm_fn) -> tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """The gradients of x, weight and bias, each GEMM by mm_fn (the custom op, or the direct path)."""
    x, weight = ctx.saved_tensors
    # (a bias left at its default None is dropped from the custom op's call by the dispatcher: two flags then)
    need_x, need_w, need_b = (*ctx.needs_input_grad, False)[:3]
    N = grad.shape[-1]
    g = grad.reshape(math.prod(ctx.x_shape[:-1]), N)  # rows x out_features
    acc = ctx.accumulate
    grad_x = mm_fn(g, weight, accumulate=acc).reshape(ctx.x_shape) if need_x else None
    grad_w = mm_fn(g.t(), x.reshape(g.shape[0], x.shape[-1]), accumulate=acc) if need_w else None
    grad_b = g.sum(0) if need_b else None
    return grad_x, grad_w, grad_b


def _linear_op_setup(ctx, inputs, keyword_only_inputs, output) -> None:
    x, weight, bias = inputs
    _linear_save(ctx, x, weight, keyword_only_inputs.get("accumulate"))


def _linear_op_backward(ctx, grad: Tensor):
    return _linear_grads(ctx, grad, _mm_op)


_linear_op.register_autograd(_linear_op_backward, setup_context=_linear_op_setup)


# ---------------------------------------------------------------------------------------------------
# the direct path: eager calls without the custom op's dispatch
# ---------------------------------------------------------------------------------------------------

# (forward with ctx, no setup_context: Function.apply binds a setup_context Function's arguments with
# inspect.signature on every call, several times the rest of its cost; the functorch transforms that need
# setup_context take the custom op instead)
class _MmFunction(torch.autograd.Function):
    """mm with autograd outside the custom op: the same backward, its GEMMs on `mm` again."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, accumulate: Optional[str]) -> Tensor:
        _mm_save(ctx, a, b, accumulate)
        return _mm_cuda(a, b, accumulate)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return (*_mm_grads(ctx, grad, mm), None)


class _LinearFunction(torch.autograd.Function):
    """linear with autograd outside the custom op: the same backward, its GEMMs on `mm`."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Optional[Tensor], accumulate: Optional[str]) -> Tensor:
        _linear_save(ctx, x, weight, accumulate)
        return _linear_cuda(x, weight, bias, accumulate)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return (*_linear_grads(ctx, grad, mm), None)


# Function.apply, as torch runs it outside functorch transforms (which eager() leaves to the custom op) for a Function
# without setup_context: dead functorch wrappers unwrapped, then the C apply; its Python part, which checks for the
# transforms and maps the arguments in a generator, is skipped (a torch without these keeps Function.apply)
_unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
_C_APPLY = _unwrap is not None and hasattr(torch._C, "_FunctionBase")
_mm_apply = super(torch.autograd.Function, _MmFunction).apply if _C_APPLY else _MmFunction.apply
_linear_apply = super(torch.autograd.Function, _LinearFunction).apply if _C_APPLY else _LinearFunction.apply
_unwrap = _unwrap or (lambda t: t)


def mm(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    """a @ b for 2-D a (M, K) and b (K, N) of one dtype (fp16, bf16, fp32) on one GPU, any strides:
    hgemm::mm (torch.ops.hgemm.mm), called directly in eager mode."""
    if not eager(a, b):
        return _mm_op(a, b, accumulate=accumulate)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _mm_apply(_unwrap(a), _unwrap(b), accumulate)
    return _mm_cuda(a, b, accumulate)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, accumulate: Optional[str] = None) -> Tensor:
    """x @ weight.T + bias, as torch.nn.functional.linear: x (..., in_features), weight (out_features,
    in_features), bias (out_features,) or None. The bias is added in the GEMM's epilogue, to the fp32
    accumulator before the one rounding of the result. hgemm::linear (torch.ops.hgemm.linear), called
    directly in eager mode."""
    if not eager(x, weight, bias):
        return _linear_op(x, weight, bias, accumulate=accumulate)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or bias is not None and bias.requires_grad):
        return _linear_apply(_unwrap(x), _unwrap(weight), bias if bias is None else _unwrap(bias), accumulate)
    return _linear_cuda(x, weight, bias, accumulate)


script_as({"hgemm::mm": mm, "hgemm::linear": linear})  # (jit.script: a call of mm or linear is the op)


# ---------------------------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------------------------

class Linear(torch.nn.Linear):
    """torch.nn.Linear whose forward is hgemm::linear (same parameters, state dict and init). Under
    torch.autocast it computes in the autocast dtype, as nn.Linear does (the ops themselves are not
    autocast: they take one dtype)."""

    def forward(self, input: Tensor) -> Tensor:
        weight, bias = self.weight, self.bias
        if input.is_cuda and torch.is_autocast_enabled("cuda"):
            dt = torch.get_autocast_dtype("cuda")
            input, weight = input.to(dt), weight.to(dt)  # (differentiable: fp32 master weights get their grads)
            bias = bias.to(dt) if bias is not None else None
        return linear(input, weight, bias)

    @classmethod
    def from_linear(cls, module: torch.nn.Linear) -> "Linear":
        """A Linear sharing `module`'s weight and bias Parameters (no copy; its hooks are not carried)."""
        new = cls(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
        new.weight = module.weight
        new.bias = module.bias
        new.train(module.training)
        return new


def replace_linear(module: torch.nn.Module) -> torch.nn.Module:
    """Every torch.nn.Linear in `module` (itself included; exact type only: subclasses may not use their
    forward, as MultiheadAttention's out_proj does not) replaced in place by a Linear on the same
    parameters. Returns `module`, or the new Linear if `module` itself was one."""
    if type(module) is torch.nn.Linear:
        return Linear.from_linear(module)
    for name, child in module.named_children():
        new = replace_linear(child)
        if new is not child:
            setattr(module, name, new)
    return module


from .torch_batched import bmm  # noqa: E402,F401  (hgemm::bmm, re-exported as ht.bmm)
