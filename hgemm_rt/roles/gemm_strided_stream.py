"""gemm_strided_stream: the decode kernels, which stream B once from HBM for a few rows of A (by pointer and
leading dimension, split-K in clusters). Priced by their stream, not their arithmetic
(docs/dev/cost_model.md#stream-split)."""
from __future__ import annotations

import math
from typing import Any

from ..dtypes import ITEMSIZE
from ..manifest import KernelSpec
from ..problem import Gemm, kernel_batch
from .glue import distinct_matrices
from .leading_dim import LeadingDimRole

# the share a split launch's stream slows by, by split count (docs/dev/cost_model.md#stream-split)
STREAM_SPLIT_COST = {1: 0.0, 2: 0.06, 4: 0.32, 8: 0.45}
# the share of stream_sm_bytes_per_s one CTA pulls alone, by its `b` variant where not all of it: b = row holds one
# chunk's loads a warp in flight, no ring; CTAs sharing an SM add up to its rate (docs/dev/cost_model.md#stream-cta)
STREAM_CTA_SHARE = {"row": 0.58}


class StridedStream(LeadingDimRole):
    name = "gemm_strided_stream"
    split_k_slowdown = False
    in_compute_tie = False  # its time is the stream's, not arithmetic's

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return model.ladder_tflops(spec)

    def gemm_us(self, model: Any, spec: KernelSpec, g: Gemm, dtype: str, beta_zero: bool) -> float:
        """B read once per BM rows of C at the DRAM rate, or at what the busiest SM pulls where the grid leaves SMs
        idle (its CTAs, each at its share of the SM's rate, at most all of it). Splitting K costs a cluster launch
        and a share of the stream (STREAM_SPLIT_COST), so it pays only where it fills idle SMs."""
        r = model.rates
        isz = ITEMSIZE[dtype]
        BM, BN, _ = spec.tile
        load = math.ceil(model.grid_ctas(spec, g) / model.sm_count)
        cta_share = STREAM_CTA_SHARE.get(dict(g.variant).get("b", ""), 1.0)
        row_tiles = math.ceil(g.M / BM)
        nb = kernel_batch(g.batch)
        nbytes = (row_tiles * g.K * g.N * distinct_matrices(g.b, g.batch) +
                  g.M * g.K * distinct_matrices(g.a, g.batch) + g.M * g.N * nb[0] * nb[1]) * isz
        memory = nbytes / r.stream_bytes_per_s * (1.0 + STREAM_SPLIT_COST[g.splits])
        sm_rate = r.stream_sm_bytes_per_s * min(1.0, load * cta_share)
        panel = load * (min(g.M, BM) + BN) * (g.K / g.splits) * isz / sm_rate
        latency = r.cluster_launch_us if g.splits > 1 else 0.0
        return max(memory, panel) * 1e6 + latency
