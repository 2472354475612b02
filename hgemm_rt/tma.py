"""The host side of TMA: a CUtensorMap for each `tmap:X` kernel parameter (Hopper kernels only).

A kernel declares, in its toml,

    params = ["tmap:A", "tmap:B", "tmap:C", "i32:M", "i32:N", "i32:K"]
    tma = { A = { box = [64, 128], swizzle = 128 }, ... }

and launcher.py calls `build_param(spec, "A", array, name)` for each tensor-map parameter. The
operand is a dense row-major 2-D matrix (rows x cols); the tensor map describes it to the copy
engine as dimension 0 = columns (contiguous) and dimension 1 = rows, with `box` = [columns, rows]
copied per TMA instruction. Out-of-bounds elements of a box read as zero and are not written on
stores, which is what lets the kernels take ragged M, N, K.

A batched launch describes an operand rank-4, (outer batch, inner batch, rows, cols) with byte strides
(executor.tma_shape): the map gets dimensions (cols, rows, inner, outer) and a box of one matrix.

The result is a 64-byte aligned ctypes buffer holding the 128 opaque bytes; launcher.py passes its
address in the kernel-parameter array, so the driver copies the map by value into the
`const __grid_constant__ CUtensorMap` parameter.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any, Callable, Mapping

from ._driver import check_code, driver, native
from .dtypes import ITEMSIZE
from .errors import ManifestError, ValidationError

# TMA reads rows at full speed where their byte stride is a multiple of this (an L2 sector); the cost model prices
# the others (costmodel.TMA_SLOW_ROW_FACTOR) and the maps fetch them in 128-byte blocks (encode_tiled)
TMA_FAST_ROW_BYTES = 32

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64  # cuTensorMapEncodeTiled and the kernel parameter both want 64-byte alignment

def _data_type(dtype: str) -> Any:
    t = driver().CUtensorMapDataType
    table = {
        "f16": t.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        "bf16": t.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        "f32": t.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    }
    return table[dtype]


def _swizzle(nbytes: int, kernel: str, operand: str) -> Any:
    s = driver().CUtensorMapSwizzle
    table = {
        0: s.CU_TENSOR_MAP_SWIZZLE_NONE,
        32: s.CU_TENSOR_MAP_SWIZZLE_32B,
        64: s.CU_TENSOR_MAP_SWIZZLE_64B,
        128: s.CU_TENSOR_MAP_SWIZZLE_128B,
    }
    if nbytes not in table:
        raise ManifestError(f"{kernel}: tma.{operand}.swizzle={nbytes} must be one of 0, 32, 64, 128")
    return table[nbytes]


def aligned_buffer(nbytes: int = TENSOR_MAP_BYTES, align: int = TENSOR_MAP_ALIGN) -> ctypes.Array:
    """A ctypes byte array of `nbytes` whose address is a multiple of `align` (ctypes only guarantees
    the alignment of its largest member, 8, so carve the aligned window out of a larger buffer; the
    window keeps the backing buffer alive through its `_objects`)."""
    raw = (ctypes.c_uint8 * (nbytes + align))()
    offset = (-ctypes.addressof(raw)) % align
    return (ctypes.c_uint8 * nbytes).from_buffer(raw, offset)


def _box(spec_tma: Mapping[str, Any], operand: str, kernel: str) -> tuple[list[int], int]:
    entry = spec_tma.get(operand) if spec_tma else None
    if not entry or "box" not in entry:
        raise ManifestError(f"{kernel}: parameter tmap:{operand} has no [kernel.tma] {operand} = {{ box = [...] }}")
    box = [int(x) for x in entry["box"]]
    if len(box) != 2 or not all(1 <= x <= 256 for x in box):
        raise ManifestError(f"{kernel}: tma.{operand}.box={box} must be [inner, outer] with 1..256 each")
    return box, int(entry.get("swizzle", 0))


# A tensor map is a pure function of these arguments (it holds no reference to the allocation), so
# repeated launches on the same buffers reuse it instead of paying a driver call per operand per
# launch; a freed-and-reused address with the same shape maps to the same, still correct, bytes.
def encode_2d(ptr: int, rows: int, cols: int, row_stride_bytes: int, dtype: str, box: tuple[int, ...],
              swizzle_bytes: int, kernel: str, operand: str) -> ctypes.Array:
    """cuTensorMapEncodeTiled for a row-major rows x cols matrix; returns the aligned 128-byte map
    (treat it as read-only: it is shared by every launch with the same arguments)."""
    return encode_tiled(ptr, (cols, rows), (row_stride_bytes,), dtype, tuple(box), swizzle_bytes, kernel, operand)


@functools.lru_cache(maxsize=256)
def encode_tiled(ptr: int, dims: tuple[int, ...], strides: tuple[int, ...], dtype: str, box: tuple[int, ...],
                 swizzle_bytes: int, kernel: str, operand: str) -> ctypes.Array:
    """cuTensorMapEncodeTiled for a tensor of `dims` (innermost first, the innermost contiguous) with
    byte `strides` of the outer dimensions; `box` gives the innermost two box extents (the others are 1).
    Returns the aligned 128-byte map (read-only: shared by every launch with the same arguments)."""
    item = ITEMSIZE[dtype]
    rank = len(dims)
    # TMA's own rules, checked here so the message names the operand instead of a bare
    # CUDA_ERROR_INVALID_VALUE (validate.py normally refuses these shapes first via `require`/`align`).
    if ptr % 16:
        raise ValidationError(f"{kernel}: operand {operand} address 0x{ptr:x} is not 16-byte aligned (TMA)")
    if strides[0] % 16:
        raise ValidationError(
            f"{kernel}: operand {operand} row stride {strides[0]} B ({dims[0]} elements) is not a multiple "
            "of 16 bytes, which TMA requires"
        )
    for s in strides[1:]:
        if s % 16 or not 0 < s < 2**40:
            raise ValidationError(f"{kernel}: operand {operand} batch stride {s} B is not a positive multiple of "
                                  "16 bytes below 2^40, which TMA requires")
    if box[0] * item % 16:
        raise ManifestError(f"{kernel}: tma.{operand}.box inner extent {box[0]} x {item} B is not a multiple of 16")
    if swizzle_bytes and box[0] * item > swizzle_bytes:
        raise ManifestError(
            f"{kernel}: tma.{operand}.box inner extent {box[0] * item} B exceeds the {swizzle_bytes} B swizzle span"
        )
    drv = driver()
    what = (f"cuTensorMapEncodeTiled(operand {operand}, {'x'.join(map(str, dims[::-1]))} {dtype}, box {box}, "
            f"swizzle {swizzle_bytes})")
    modes = (drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, _swizzle(swizzle_bytes, kernel, operand),
             # L2 promotion: the boxes are 128-byte rows read by many CTAs, fetched as 256-byte blocks; rows that
             # start off 32-byte boundaries take 128-byte blocks, faster there (docs/dev/code_measurements.md,
             # "TMA L2 promotion")
             drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B if strides[0] % TMA_FAST_ROW_BYTES == 0
             else drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
             # Out-of-bounds elements read as zero (NAN_REQUEST_ZERO_FMA would give NaN).
             drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    boxes, steps = (box[0], box[1]) + (1,) * (rank - 2), (1,) * rank
    out = aligned_buffer()
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32  # straight into the aligned buffer (one backend: libcuda's)
    # globalDim innermost first; globalStrides in bytes, dims 1.. only; dense boxes
    code = native().cuTensorMapEncodeTiled(ctypes.addressof(out), int(_data_type(dtype)), rank, ptr,
                                           (u64 * rank)(*dims), (u64 * (rank - 1))(*strides), (u32 * rank)(*boxes),
                                           (u32 * rank)(*steps), *(int(m) for m in modes))
    check_code(code, what, kernel)
    return out


def build_param(spec: Any, operand: str, array: Any, kernel_name: str) -> ctypes.Array:
    """The `tmap:<operand>` kernel parameter for `array` (a DeviceArray) as declared in spec.tma."""
    return param_encoder(spec, operand, array, kernel_name)(int(array.ptr))


def param_encoder(spec: Any, operand: str, array: Any, kernel_name: str) -> Callable[[int], ctypes.Array]:
    """build_param for an array of `array`'s shape, strides and dtype at any address: the declaration and the
    geometry checked once, then one (cached) encode per address."""
    box, swizzle = _box(spec.tma or {}, operand, kernel_name)
    if len(array.shape) not in (2, 4):
        raise ValidationError(f"{kernel_name}: operand {operand} must be 2-D (or 4-D: batched) for TMA, got shape "
                              f"{array.shape}")
    rows, cols = array.shape[-2:]
    item = ITEMSIZE[array.dtype]
    if array.strides[-1] != item:
        raise ValidationError(
            f"{kernel_name}: operand {operand} must be contiguous along its rows for TMA; strides {array.strides}"
        )
    # a single row's stride is never followed, and may be anything (a (1, K) slice of a column-major
    # matrix): the map gets the dense one, as the planner's View.make assumes
    row_stride = int(array.strides[-2]) if rows > 1 else -(-cols * item // 16) * 16
    if len(array.shape) == 4:  # (outer, inner, rows, cols): dimensions (cols, rows, inner, outer)
        outer, inner = array.shape[:2]
        dims, strides = (int(cols), int(rows), int(inner), int(outer)), \
            (row_stride, int(array.strides[1]), int(array.strides[0]))
    else:
        dims, strides = (int(cols), int(rows)), (row_stride,)
    return functools.partial(_encode_at, (dims, strides, array.dtype, tuple(box), swizzle, kernel_name, operand))


def _encode_at(geometry: tuple, ptr: int) -> ctypes.Array:
    return encode_tiled(ptr, *geometry)
