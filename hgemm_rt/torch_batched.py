"""`hgemm::bmm`: torch.bmm on hgemm_rt.matmul's batched path, as a PyTorch operator usable eagerly, under
autograd and in `torch.compile` (fullgraph included). Imported by hgemm_rt.torch (`ht.bmm`), which checks
that torch is installed.

    c = ht.bmm(a, b)                       # = torch.ops.hgemm.bmm(a, b): a (B, M, K) @ b (B, K, N) -> (B, M, N)

a and b are 3-D CUDA tensors of one dtype (fp16, bf16 or fp32) on one device, any strides (a transposed
view, `x.transpose(1, 2)`, is read in place), with equal batch sizes (no broadcasting, as torch.bmm); the
keyword `accumulate` is hgemm_rt.matmul's, as for hgemm::mm. Every matrix of the batch is computed in one
launch. The result is a new contiguous tensor from torch's caching allocator on the current stream, where
the kernels run. The fake (meta) implementation makes the same checks, so compile refuses what eager
refuses, and the backward is two batched products on the same op: grad_a = grad @ b^T, grad_b = a^T @ grad.

`ht.bmm` calls the computation directly in eager mode (under autograd through a torch.autograd.Function
with the same backward); wherever torch records or transforms the call (compile, export, jit, fx, make_fx
and other dispatch modes, fake and meta tensors, subclasses, functorch) it calls the custom op.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .api import matmul
from .errors import ValidationError
from .operands import torch_dtype_code
from .problem import ACCUMULATE
from .torch_direct import eager, readable, script_as
from .validate import accumulate_code, check_option

__all__ = ["bmm"]

OP = "hgemm::bmm"


def _check_bmm(a: Tensor, b: Tensor, accumulate: Optional[str], fake: bool) -> None:
    """What the kernels take, refused with the same message by the CUDA and the fake implementations
    (meta tensors are taken by the fake one only)."""
    if a.dim() != 3 or b.dim() != 3:
        raise ValidationError(f"{OP}: a and b must be 3-D (batch, M, K) and (batch, K, N), got shapes "
                              f"{tuple(a.shape)} and {tuple(b.shape)} (hgemm::mm takes 2-D ones)")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValidationError(f"{OP}: a is {tuple(a.shape)} but b is {tuple(b.shape)}: the batch sizes and "
                              "the inner dimensions must be equal (bmm does not broadcast)")
    for name, t in (("a", a), ("b", b)):
        if torch_dtype_code(t.dtype) is None:
            raise ValidationError(f"{OP}: {name} is {t.dtype}; the kernels take torch.float16, torch.bfloat16 "
                                  "or torch.float32")
    if a.dtype != b.dtype:
        raise ValidationError(f"{OP}: a is {a.dtype} but b is {b.dtype}: cast them to one dtype (ops are not "
                              "autocast)")
    check_option("accumulate", accumulate, OP)
    choices = ACCUMULATE[torch_dtype_code(a.dtype)]
    if accumulate is not None and accumulate_code(accumulate, OP) not in choices:
        raise ValidationError(f"{OP}: accumulate={accumulate!r} is not available for {a.dtype} inputs; choose "
                              f"None or one of {list(choices)}")
    # (last: every refusal above reads the same on any device)
    for name, t in (("a", a), ("b", b)):
        if t.device.type != "cuda" and not (fake and t.device.type == "meta"):
            raise ValidationError(f"{OP}: {name} is on {t.device}; hgemm runs on CUDA tensors (move it with .cuda())")
    if a.device != b.device:
        raise ValidationError(f"{OP}: a is on {a.device} but b is on {b.device}: move them to one device")


def _bmm_cuda(a: Tensor, b: Tensor, accumulate: Optional[str]) -> Tensor:
    _check_bmm(a, b, accumulate, fake=False)
    (batch, M, K), N = a.shape, b.shape[2]
    if batch and M and N and K:  # the result: a new torch tensor by matmul, on torch's current stream
        return matmul(readable(a), readable(b), accumulate=accumulate)
    out = a.new_empty((batch, M, N))
    return out.zero_() if K == 0 else out  # (the kernels take sizes >= 1; torch.bmm's answer for K = 0 is zeros)


# -- the custom op: what torch.compile, export, jit, fx and fake tensors see ----------------------------

@torch.library.custom_op(OP, mutates_args=())
def _bmm_op(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    return _bmm_cuda(a, b, accumulate)


@_bmm_op.register_fake
def _bmm_fake(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    _check_bmm(a, b, accumulate, fake=True)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


def _keep_for_backward(ctx, a: Tensor, b: Tensor, accumulate: Optional[str]) -> None:
    ctx.accumulate = accumulate
    # each gradient needs the other operand only
    ctx.save_for_backward(b if ctx.needs_input_grad[0] else None, a if ctx.needs_input_grad[1] else None)


def _gradients(ctx, grad: Tensor, bmm_fn) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """(grad_a, grad_b), each a batched product by bmm_fn (the custom op, or the direct path); .mT is a view."""
    b, a = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[:2]
    return (bmm_fn(grad, b.mT, accumulate=ctx.accumulate) if need_a else None,
            bmm_fn(a.mT, grad, accumulate=ctx.accumulate) if need_b else None)


def _bmm_op_setup(ctx, inputs, keyword_only_inputs, output) -> None:
    _keep_for_backward(ctx, *inputs, keyword_only_inputs.get("accumulate"))


_bmm_op.register_autograd(lambda ctx, grad: _gradients(ctx, grad, _bmm_op), setup_context=_bmm_op_setup)


# -- the direct path: eager calls without the custom op's dispatch ---------------------------------------

class _BmmFunction(torch.autograd.Function):
    """bmm with autograd outside the custom op: the same backward, its products on `bmm` again."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, accumulate: Optional[str]) -> Tensor:
        _keep_for_backward(ctx, a, b, accumulate)
        return _bmm_cuda(a, b, accumulate)

    backward = staticmethod(lambda ctx, grad: (*_gradients(ctx, grad, bmm), None))  # (none for accumulate)


def bmm(a: Tensor, b: Tensor, *, accumulate: Optional[str] = None) -> Tensor:
    """a @ b for 3-D a (B, M, K) and b (B, K, N) of one dtype (fp16, bf16, fp32) on one GPU, any strides, as
    torch.bmm: hgemm::bmm (torch.ops.hgemm.bmm), called directly in eager mode."""
    if not eager(a, b):
        return _bmm_op(a, b, accumulate=accumulate)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _BmmFunction.apply(a, b, accumulate)
    return _bmm_cuda(a, b, accumulate)


script_as({OP: bmm})  # (jit.script: a call of bmm is the op)
