"""gemm_f16x3: fp32 at fp32 accuracy as three fp16 products of operands split by split_f16x3, each line scaled by a
power of two (batched on grid.z)."""
from __future__ import annotations

from ..problem import SplitFormat
from .split_f16x3 import SplitF16x3
from .split_products import SplitProduct

FORMAT = SplitFormat(SplitF16x3.name, 64, True, 2, True, "fp16 hi/lo, rows scaled by powers of two")


class GemmF16x3(SplitProduct):
    name = "gemm_f16x3"
    format = FORMAT
