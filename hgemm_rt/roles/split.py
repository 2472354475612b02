"""The split kernels (split_tf32, split_f16x3): dst = src's head and residual planes, one 128-byte row a k-block
(cu/matmul.cu), in the format their product reads (problem.SplitFormat); a scaled format's exponents too. They take
the copy ABI; a split's grid covers its source (each CTA writes its tile's planes; a scaled split's CTA whole lines)."""
from __future__ import annotations

from typing import Any

from ..validate import GemmShape
from .copy import CopyRole


class SplitRole(CopyRole):
    def launch_shape(self, step: Any) -> GemmShape:
        return GemmShape(step.src_rows, 1 if step.format.scaled else step.src_cols, 1)

