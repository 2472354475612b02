"""The element types the kernels take: codes, sizes and their numpy equivalents (one table)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ValidationError

ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}

NUMPY = {"f16": np.dtype(np.float16), "f32": np.dtype(np.float32)}
try:  # bf16 has no numpy dtype of its own; ml_dtypes (a JAX dependency) provides one
    import ml_dtypes

    NUMPY["bf16"] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - optional
    pass


def dtype_code(dtype: Any) -> str:
    """'f16' | 'bf16' | 'f32' from a code, a numpy dtype or a name such as 'float16'."""
    if isinstance(dtype, str) and dtype in ITEMSIZE:
        return dtype
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
    if code not in NUMPY:
        raise ValidationError(f"dtype {code} has no numpy equivalent here (install ml_dtypes for bf16)")
    return NUMPY[code]
