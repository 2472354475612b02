"""split_f16x3: A's or B^T's fp16 head and residual planes for gemm_f16x3, each line scaled by a power of two
(its exponents written beside them), batched on grid.z."""
from __future__ import annotations

from .split import SplitRole


class SplitF16x3(SplitRole):
    name = "split_f16x3"
