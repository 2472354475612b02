"""The element types the kernels take: codes, sizes, their numpy equivalents and host storage, and the
bf16 <-> fp32 bit conversions (one table, one place)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ValidationError

ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}

# numpy's own dtypes; bf16's (ml_dtypes.bfloat16) is added on first use by numpy_dtype: ml_dtypes takes
# longer to import than the whole runtime, and only a bf16 array crossing to or from numpy needs it
NUMPY = {"f16": np.dtype(np.float16), "f32": np.dtype(np.float32)}
BF16_EXTRA = "install ml_dtypes for numpy bfloat16 arrays (`pip install hgemm[bf16]`)"

# Host arrays in the device's bit layout that need no ml_dtypes: bf16 travels as its raw 16 bits.
STORAGE = {"f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16), "f32": np.dtype(np.float32)}

# __cuda_array_interface__ type strings: bf16 has none of its own, so it goes as 2 raw bytes
CAI_TYPESTR = {"f16": "<f2", "f32": "<f4", "bf16": "<V2"}

_BF16_EXPONENT = 0x7F80  # all ones: Inf or NaN


def dtype_code(dtype: Any) -> str:
    """'f16' | 'bf16' | 'f32' from a code, a numpy dtype or a name such as 'float16'."""
    if isinstance(dtype, str) and dtype in ITEMSIZE:
        return dtype
    if isinstance(dtype, str) and dtype == "bfloat16":  # (numpy knows the name only once ml_dtypes is imported)
        return "bf16"
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValidationError(f"unsupported dtype {dtype!r}: use float16, bfloat16 or float32") from None
    for code, npdt in NUMPY.items():
        if dt == npdt:
            return code
    if dt.name == "bfloat16":
        return "bf16"
    raise ValidationError(f"unsupported dtype {dt}: use float16, bfloat16 or float32")


def numpy_dtype(code: str) -> np.dtype:
    """The numpy dtype of a code; bf16's comes from ml_dtypes, imported here on first use."""
    if code == "bf16" and code not in NUMPY:
        try:
            import ml_dtypes
        except ImportError:
            raise ValidationError(f"dtype bf16 has no numpy equivalent here: {BF16_EXTRA}") from None
        NUMPY["bf16"] = np.dtype(ml_dtypes.bfloat16)
    if code not in NUMPY:
        raise ValidationError(f"dtype {code} has no numpy equivalent here ({BF16_EXTRA})")
    return NUMPY[code]


def f32_to_bf16_bits(x: Any) -> np.ndarray:
    """bf16 as its raw 16 bits: the top half of each fp32, rounded to nearest even (uint16). The sum is
    taken in 64 bits so that no input wraps around."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits: Any) -> np.ndarray:
    """The fp32 values of bf16 bit patterns (exact: bf16 is the top half of an fp32)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def to_storage(x32: Any, code: str) -> np.ndarray:
    """fp32 values rounded to `code`, as a host array in the device's bit layout (STORAGE)."""
    return f32_to_bf16_bits(x32) if code == "bf16" else np.asarray(x32).astype(STORAGE[code])


def storage_to_f64(host: np.ndarray, code: str) -> np.ndarray:
    """The float64 values of a host array in the device's bit layout."""
    return (bf16_bits_to_f32(host) if code == "bf16" else host).astype(np.float64)


def storage_all_finite(host: np.ndarray, code: str) -> bool:
    """No Inf or NaN in a host array in the device's bit layout (bf16 read from its exponent bits)."""
    if code == "bf16":
        return not bool(((host & _BF16_EXPONENT) == _BF16_EXPONENT).any())
    return bool(np.isfinite(host).all())


# accumulate= spellings: our codes, the fp/float names torch, CuPy and nvmath use, and dtype objects (numpy's,
# torch's: torch.float32 is read by its name, so torch is never imported here)
ACCUMULATE_ALIASES = {"f16": "f16", "f32": "f32", "tf32": "tf32", "fp16": "f16", "fp32": "f32", "float16": "f16",
                      "float32": "f32", "half": "f16", "float": "f32", "bf16": "bf16", "bfloat16": "bf16"}
