"""What hgemm_rt.torch's operators (hgemm_rt/torch.py, hgemm_rt/torch_batched.py) share around their direct path:
when an eager call may skip the custom op, the tensors the kernels can read as they are, and jit.script's mapping
of a Python function to its op. Imported by those modules only (they check that torch is installed)."""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

__all__ = ["eager", "readable", "script_as"]

# Tensor types the direct path takes as they are; any other (FakeTensor, FunctionalTensor, an fx Proxy, a
# wrapper subclass) has its own dispatch, which only the custom op goes through.
PLAIN_TYPES = frozenset((Tensor, torch.nn.Parameter))
# (torch's own checks; a torch without one has nothing for it to see)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_jit_tracing = getattr(torch._C, "_is_tracing", torch.jit.is_tracing)  # (torch.jit.is_tracing's C part)


def eager(a: Tensor, b: Tensor, c: Optional[Tensor] = None) -> bool:
    """True where a call may skip the custom op: plain tensors, the first not a meta tensor (those take the
    fake implementation; other devices are refused by the same checks either way), and nothing that records
    or transforms ops in effect (torch.compile and export, whose Dynamo reads is_compiling() as True at
    trace time; jit tracing; a dispatch mode such as make_fx's; a functorch transform)."""
    return not (torch.compiler.is_compiling() or _jit_tracing() or _dispatch_modes()
                or _functorch_active()) and type(a) in PLAIN_TYPES and type(b) in PLAIN_TYPES \
        and (c is None or type(c) in PLAIN_TYPES) and not a.is_meta


def readable(t: Tensor) -> Tensor:
    """t, or a dense copy where a dimension is broadcast (stride 0, as the gradient of a .sum() is):
    the kernels and matmul's copies take distinct elements at distinct addresses."""
    strides = t.stride()
    return t.contiguous() if 0 in strides and any(s == 0 and n > 1 for n, s in zip(t.shape, strides)) else t


def script_as(ops: dict[str, Callable]) -> None:
    """torch.jit.script compiles a call of each function to its op {op name: function} (as it does torch's own
    Python functions), where this torch has the builtin table that does it."""
    register = getattr(getattr(torch.jit, "_builtins", None), "_register_builtin", None)
    if register is not None:
        for op, fn in ops.items():
            register(fn, op)
