"""gemm_strided_mma: mma.sync kernels (sm_80+) on A and B by pointer and leading dimension, split-K in clusters on
sm_90, the fp32 tile through shared memory."""
from __future__ import annotations

from typing import Any

from ..manifest import KernelSpec
from .leading_dim import LeadingDimRole


class StridedMma(LeadingDimRole):
    name = "gemm_strided_mma"
    fp32_tile_epilogue = True

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return model.rates.strided_mma_tflops.get(spec.tile[0], 100.0)
