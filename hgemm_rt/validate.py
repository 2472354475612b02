"""Input checks for a kernel launch, done before anything touches the GPU.

Every message names the kernel and shows the values at fault.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ValidationError
from .manifest import KernelSpec
from .memory import DeviceArray


@dataclass(frozen=True)
class GemmShape:
    M: int
    N: int
    K: int


def expected_b_shape(layout: str, N: int, K: int) -> tuple[int, int]:
    return (K, N) if layout == "NN" else (N, K)


def validate_operands(spec: KernelSpec, a: DeviceArray, b: DeviceArray, c: DeviceArray,
                      acc: str | None = None) -> GemmShape:
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
