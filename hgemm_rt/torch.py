"""PyTorch operators on hgemm_rt.matmul: `hgemm::mm` and `hgemm::linear`, usable eagerly, under
autograd and in `torch.compile` (fullgraph included). Optional: install with `pip install hgemm[torch]`;
`import hgemm_rt` never imports torch, only `import hgemm_rt.torch` does.

    import torch, hgemm_rt.torch as ht
    c = ht.mm(a, b)                        # = torch.ops.hgemm.mm(a, b): a (M, K) @ b (K, N)
    y = ht.linear(x, w, bias)              # = torch.nn.functional.linear: x (..., in), w (out, in)
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

from .api import matmul
from .errors import ValidationError
from .operands import torch_dtype_code
from .problem import ACCUMULATE
from .validate import accumulate_code, check_option

__all__ = ["Linear", "linear", "mm", "replace_linear"]



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


def _readable(t: Tensor) -> Tensor:
    """t, or a dense copy where a dimension is broadcast (stride 0, as the gradient of a .sum() is):
    the kernels and matmul's copies take distinct elements at distinct addresses."""
    return t.contiguous() if any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride())) else t


# ---------------------------------------------------------------------------------------------------
# hgemm::mm
# ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("hgemm::mm", mutates_args=())
def mm(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    """a @ b for 2-D a (M, K) and b (K, N) of one dtype (fp16, bf16, fp32) on one GPU, any strides."""
    _check_mm(a, b, accumulate, fake=False)
    (M, K), N = a.shape, b.shape[1]
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)  # the caching allocator, current stream
    if K == 0:  # (the kernels take M, N, K >= 1; torch.mm's answer for K = 0 is zeros)
        return out.zero_()
    if M and N:
        matmul(_readable(a), _readable(b), out=out, accumulate=accumulate)  # on torch's current stream
    return out


@mm.register_fake
def _mm_fake(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    _check_mm(a, b, accumulate, fake=True)
    return a.new_empty((a.shape[0], b.shape[1]))


def _mm_setup(ctx, inputs, keyword_only_inputs, output) -> None:
    a, b = inputs
    ctx.accumulate = keyword_only_inputs.get("accumulate")
    # each gradient needs the other operand only
    ctx.save_for_backward(b if ctx.needs_input_grad[0] else None, a if ctx.needs_input_grad[1] else None)


def _mm_backward(ctx, grad: Tensor):
    b, a = ctx.saved_tensors
    acc = ctx.accumulate
    grad_a = mm(grad, b.t(), accumulate=acc) if ctx.needs_input_grad[0] else None  # .t(): a view, no copy
    grad_b = mm(a.t(), grad, accumulate=acc) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


mm.register_autograd(_mm_backward, setup_context=_mm_setup)


# ---------------------------------------------------------------------------------------------------
# hgemm::linear
# ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("hgemm::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, accumulate: Optional[str] = None) -> Tensor:
    """x @ weight.T + bias, as torch.nn.functional.linear: x (..., in_features), weight (out_features,
    in_features), bias (out_features,) or None. The bias is added in the GEMM's epilogue, to the fp32
    accumulator before the one rounding of the result."""
    _check_linear(x, weight, bias, accumulate, fake=False)
    N, K = weight.shape
    out = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)  # the caching allocator, current stream
    rows = math.prod(x.shape[:-1])
    if out.numel() == 0:
        return out
    if K == 0:  # an empty sum: the bias alone
        if bias is None:
            out.zero_()
        else:
            out.copy_(bias)
        return out
    # reshape: a view when x's batch dimensions fold into rows, else one copy (matmul refuses those)
    matmul(_readable(x.reshape(rows, K)), _readable(weight).t(), out=out.view(rows, N),
           bias=None if bias is None else _readable(bias), accumulate=accumulate)
    return out


@linear.register_fake
def _linear_fake(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *,
                 accumulate: Optional[str] = None) -> Tensor:
    _check_linear(x, weight, bias, accumulate, fake=True)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_setup(ctx, inputs, keyword_only_inputs, output) -> None:
    x, weight, bias = inputs
    ctx.accumulate = keyword_only_inputs.get("accumulate")
    ctx.x_shape = x.shape
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weight if ctx.needs_input_grad[0] else None)


def _linear_backward(ctx, grad: Tensor):
    x, weight = ctx.saved_tensors
    # (a bias left at its default None is dropped from the call by the dispatcher: two flags then)
    need_x, need_w, need_b = (*ctx.needs_input_grad, False)[:3]
    N = grad.shape[-1]
    g = grad.reshape(math.prod(ctx.x_shape[:-1]), N)  # rows x out_features
    acc = ctx.accumulate
    grad_x = mm(g, weight, accumulate=acc).reshape(ctx.x_shape) if need_x else None
    grad_w = mm(g.t(), x.reshape(g.shape[0], x.shape[-1]), accumulate=acc) if need_w else None
    grad_b = g.sum(0) if need_b else None
    return grad_x, grad_w, grad_b


linear.register_autograd(_linear_backward, setup_context=_linear_setup)


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
