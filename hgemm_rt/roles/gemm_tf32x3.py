"""gemm_tf32x3: fp32 at fp32 accuracy as three TF32 products of operands split by split_tf32 (one matrix)."""
from __future__ import annotations

from ..problem import SplitFormat
from .split_products import SplitProduct
from .split_tf32 import SplitTf32

FORMAT = SplitFormat(SplitTf32.name, 32, False, 1, False, "TF32 hi/lo")


class GemmTf32x3(SplitProduct):
    name = "gemm_tf32x3"
    format = FORMAT
