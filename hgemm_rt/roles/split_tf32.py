"""split_tf32: A's or B^T's TF32 head and residual planes for gemm_tf32x3 (one matrix)."""
from __future__ import annotations

from .split import SplitRole


class SplitTf32(SplitRole):
    name = "split_tf32"
