"""The input rules of every front door (`launch`, `matmul`/`Matmul`, `grouped_matmul`), checked before
anything touches the GPU: the operands as operands.Operand describes them, the scalars and the options.

Every message names the caller (the kernel, or "matmul") and shows the value at fault. A wrong type is
an ArgumentTypeError (a TypeError), a bad value a ValidationError (a ValueError).
"""
from __future__ import annotations

import math
import numbers
import struct
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .dtypes import ACCUMULATE_ALIASES, ITEMSIZE
from .epilogue import ACTIVATIONS, SWIGLU
from .errors import ArgumentTypeError, ValidationError
from .manifest import KernelSpec
from .memory import byte_extent

FP32_MAX = 3.4028234663852886e38
I32_MAX = 2**31 - 1


@dataclass(frozen=True)
class GemmShape:
    M: int
    N: int
    K: int


def expected_b_shape(layout: str, N: int, K: int) -> tuple[int, int]:
    return (K, N) if layout == "NN" else (N, K)


def validate_operands(spec: KernelSpec, a: Any, b: Any, c: Any,
                      acc: str | None = None) -> GemmShape:
    """A kernel launch's operands (Operands or DeviceArrays: ptr, shape, strides, dtype, device, readonly)
    against the kernel's declaration: dtypes, dense layouts, alignment, shapes, divisibility, aliasing."""
    name = spec.name
    for label, arr, want in (("A", a, spec.dtype), ("B", b, spec.dtype), ("C", c, spec.out)):
        if arr.ndim != 2:
            raise ValidationError(f"{name}: {label} must be 2-D, got shape {arr.shape}")
        if arr.dtype != want:
            raise ValidationError(f"{name}: {label} has dtype {arr.dtype}, this kernel takes {want}")
        if label == "A" and spec.a_order == "col":
            if not arr.T.is_c_contiguous:  # A^T, K x M, must be dense row-major: what the tensor map reads
                raise ValidationError(
                    f"{name}: A must be column-major (the transposed view of a dense row-major K x M array, "
                    f"e.g. x.T); got strides {arr.strides} for shape {arr.shape}"
                )
        elif not arr.is_c_contiguous:
            raise ValidationError(
                f"{name}: {label} must be C-contiguous (row-major, dense); got strides {arr.strides} "
                f"for shape {arr.shape}"
            )
        if arr.ptr % spec.align:
            raise ValidationError(
                f"{name}: {label} pointer 0x{arr.ptr:x} is not {spec.align}-byte aligned, which this "
                "kernel's vector loads need"
            )
    M, K = a.shape
    if c.shape[0] != M:
        raise ValidationError(f"{name}: C has {c.shape[0]} rows but A has {M} (A is M x K, C is M x N)")
    N = c.shape[1]
    want_b = expected_b_shape(spec.layout, N, K)
    if b.shape != want_b:
        hint = "K x N (NN layout)" if spec.layout == "NN" else "N x K (TN layout: B given transposed)"
        raise ValidationError(
            f"{name}: B has shape {b.shape}; with A {a.shape} and C {c.shape} this kernel needs B as "
            f"{hint} = {want_b}"
        )
    if min(M, N, K) < 1:
        raise ValidationError(f"{name}: M, N, K must be >= 1, got M={M}, N={N}, K={K}")
    if max(M, N, K) >= 2**31:  # the kernels take them as int32
        raise ValidationError(f"{name}: M, N, K must be below 2^31, got M={M}, N={N}, K={K}")
    for dim, value in (("M", M), ("N", N), ("K", K)):
        mult = spec.require.get(dim, 1)
        if value % mult:
            raise ValidationError(f"{name}: {dim}={value} is not a multiple of {mult}, which this kernel requires")
    if c.readonly:
        raise ValidationError(f"{name}: C is read-only")
    if len({a.device, b.device, c.device}) != 1:
        raise ValidationError(f"{name}: A, B, C are on different GPUs ({a.device}, {b.device}, {c.device})")
    for label, x in (("A", a), ("B", b)):
        if x.ptr < c.ptr + c.nbytes and c.ptr < x.ptr + x.nbytes:
            raise ValidationError(f"{name}: C overlaps {label} in memory; the output must not alias an input")
    return GemmShape(M, N, K)


def unsupported_reason(spec: KernelSpec, M: int, N: int, K: int) -> str | None:
    """Why `spec` cannot take this shape, or None: used by the bench and the tests to skip kernels."""
    for dim, value in (("M", M), ("N", N), ("K", K)):
        mult = spec.require.get(dim, 1)
        if value % mult:
            return f"{dim}={value} is not a multiple of {mult}"
    return None


# ---------------------------------------------------------------------------------------------------
# the rules every front door shares
# ---------------------------------------------------------------------------------------------------

def _fp32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def fp32_scalar(name: str, x: Any, where: str = "matmul") -> float:
    """alpha, beta or scale as the kernels take it: a real number (not a bool, a string or a complex) whose
    fp32 value is finite, and nonzero unless it is zero (a finite value that underflows or overflows fp32 is
    refused, never rounded to 0 or inf)."""
    if isinstance(x, (bool, np.bool_, str, bytes)) or not hasattr(x, "__float__") or \
            (isinstance(x, numbers.Complex) and not isinstance(x, numbers.Real)):
        raise ArgumentTypeError(f"{where}: {name} must be a real number, got {x!r}")
    try:
        value = float(x)
    except (TypeError, ValueError, OverflowError):
        raise ValidationError(f"{where}: {name} must be a real number, got {x!r}") from None
    if not math.isfinite(value) or abs(value) > FP32_MAX:
        raise ValidationError(f"{where}: {name}={x!r} is not a finite fp32 value (|x| <= {FP32_MAX:.4g})")
    if value != 0.0 and _fp32(value) == 0.0:
        raise ValidationError(f"{where}: {name}={x!r} underflows fp32 (it would be 0; |x| >= 1.4e-45 is needed)")
    return value


def check_flag(name: str, value: Any, where: str) -> bool:
    """A yes/no option: a bool only (swizzle='no' must not read as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{where}: {name} must be True or False, got {value!r}")
    return bool(value)


def accumulate_code(accumulate: Any, where: str) -> str | None:
    """The accumulate= request as our code ("f32", "f16", "tf32"; None: the default) from a code, a name
    ("fp32", "float16") or a dtype (np.float32, torch.float16); anything else is an ArgumentTypeError (an
    unknown name a ValidationError). Which accumulation a dtype allows is the caller's check."""
    if accumulate is None or type(accumulate) is str and accumulate in ITEMSIZE:
        return accumulate
    if isinstance(accumulate, str):
        name = accumulate.lower()
    elif type(accumulate).__module__ == "torch" and str(accumulate).startswith("torch."):
        name = str(accumulate)[len("torch."):]
    elif isinstance(accumulate, (type, np.dtype)):
        try:
            name = np.dtype(accumulate).name
        except TypeError:
            name = None
    else:
        raise ArgumentTypeError(f"{where}: accumulate must be a string or None (or a dtype), got {accumulate!r} "
                                f"({type(accumulate).__name__})")
    code = ACCUMULATE_ALIASES.get(name)
    if code is None:
        raise ValidationError(f"{where}: accumulate={accumulate!r} is not an accumulation: use 'f32' (also 'fp32', "
                              "float32), 'f16' (also 'fp16', float16) or 'tf32'")
    return code


def check_option(name: str, value: Any, where: str, allow_none: bool = True) -> None:
    """A named option (kernel=, accumulate=, activation=): a string, or None where that means the default."""
    if not isinstance(value, str) and not (allow_none and value is None):
        want = "a string" + (" or None" if allow_none else "")
        raise ArgumentTypeError(f"{where}: {name} must be {want}, got {value!r} ({type(value).__name__})")


def check_activation(activation: Any, where: str) -> None:
    check_option("activation", activation, where)
    if activation is not None and activation != SWIGLU and activation not in ACTIVATIONS:
        raise ValidationError(f"{where}: activation={activation!r} is not one of {[None, *ACTIVATIONS, SWIGLU]}")


def one_device(operands: Iterable[Any], where: str) -> int | None:
    """The one GPU the operands are on (None: host arrays only); refused if they are on several."""
    devices = {op.device for op in operands if op is not None and op.device is not None}
    if len(devices) > 1:
        raise ValidationError(f"{where}: the arrays are on different GPUs {sorted(devices)}: move them to one")
    return devices.pop() if devices else None


def self_overlapping(op: Any) -> bool:
    """True if two elements of a view may share an address (zero or interleaved strides): ordered by
    stride, each dimension must step past the bytes the ones below it span."""
    extent = op.itemsize
    for s, n in sorted((abs(s), n) for n, s in zip(op.shape, op.strides) if n > 1):
        if s < extent:
            return True
        extent += s * (n - 1)
    return False


def validate_out(C: Any, inputs: tuple, where: str = "matmul") -> None:
    """An out (an Operand) that a call may write: distinct elements at distinct addresses, writable, not a
    tensor autograd tracks, and no byte shared with an input."""
    if self_overlapping(C):
        raise ValidationError(f"{where}: out's strides {C.strides} make distinct elements share memory")
    if C.readonly:
        raise ValidationError(f"{where}: out (numpy) is read-only" if C.host is not None else f"{where}: out is read-only")
    if C.framework == "torch" and C.obj.requires_grad:
        raise ValidationError(f"{where}: out requires grad; matmul writes it in place, outside autograd "
                              "(pass a tensor that does not require grad, or no out)")
    for op in inputs:
        if C.host is not None or op.host is not None:
            if C.host is not None and op.host is not None and np.shares_memory(C.host, op.host):
                raise out_overlaps(where, op.what)
            continue
        lo, hi = byte_extent(C.ptr, C.shape, C.strides, C.itemsize)
        olo, ohi = byte_extent(op.ptr, op.shape, op.strides, op.itemsize)
        if lo < ohi and olo < hi:
            raise out_overlaps(where, op.what)


def out_overlaps(where: str, what: str) -> ValidationError:
    """The error for an out that shares memory with input `what` (validate_out's, and a repeat call's that checks
    new addresses against kept extents)."""
    return ValidationError(f"{where}: out overlaps {what} in memory; it must not alias an input")


def check_group_index(host: np.ndarray, what: str, rows: int) -> None:
    """Host-visible grouped offsets (non-decreasing row ends within the rows) or counts (0 .. max_M each):
    a bad routing table is refused where it can be seen (device ones are clamped by the kernels)."""
    if what == "offsets":
        if len(host) and (host[0] < 0 or np.any(np.diff(host) < 0) or host[-1] > rows):
            raise ValidationError(f"grouped_matmul: offsets {host.tolist()[:8]}{'...' if len(host) > 8 else ''} "
                                  f"must be non-decreasing row ends within the {rows} rows of A")
    elif np.any(host < 0) or np.any(host > rows):
        raise ValidationError(f"grouped_matmul: counts must each be 0 .. max_M = {rows}, got "
                              f"{host.tolist()[:8]}{'...' if len(host) > 8 else ''}")


def positional_out(args: tuple, out: Any, where: str) -> Any:
    """`out` of a call that passed it positionally (after a and b, as before it was keyword-only): the value, with a
    DeprecationWarning; more positional arguments, or out given both ways, are refused."""
    if len(args) > 1 or out is not None:
        raise ArgumentTypeError(f"{where}: takes a and b positionally and out= by keyword, got {2 + len(args)} "
                                f"positional arguments{' and out=' if out is not None else ''}")
    warnings.warn(f"{where}(a, b, out): pass out= by keyword; a positional out is deprecated and will be refused",
                  DeprecationWarning, stacklevel=3)
    return args[0]
