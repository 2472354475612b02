"""What a recipe costs on one GPU: a table of rates per architecture and the arithmetic that prices a
recipe's GEMM and copy steps with it. Pure data, no GPU (tested on the CPU).

Only the ratios between kernel classes rank the candidates; the wave, tile and bandwidth terms decide
between a big tile and split-K. The Hopper table is measured (H100/H200 reference runs and the
matmul bench on an H200); the Ampere/Ada table is scaled from datasheet peaks and has not been
measured on such a GPU, so `hg.Matmul(...).autotune()` is the way to a measured choice there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from .manifest import KernelSpec, Manifest
from .dtypes import ITEMSIZE
from .problem import Copy, Gemm, GroupSum, Recipe, Split, kernel_batch
from .roles import gemm_handler
from .roles.base import OCC
from .roles.gemm import narrow_hopper
from .roles.gemm_f16x3 import GemmF16x3
from .roles.gemm_strided_wgmma import SMEM_SPLIT_SUM_US, c_column_run, smem_split
from .roles.gemm_tf32x3 import GemmTf32x3
from .roles.glue import distinct_matrices, tma_slow_rows
from .roles.tma_gemm import QUEUE


@dataclass(frozen=True)
class ArchRates:
    """Sustained rates of each kernel class once the grid is full, and the memory system's speeds."""

    name: str
    ladder_tflops: Mapping[str, float]  # best kernel of each catalogue ladder
    tf32_tflops: float
    strided_mma_tflops: Mapping[int, float]  # gemm_strided_mma by BM
    fused_wgmma_tflops: float  # gemm_fused_wgmma: the persistent Hopper kernel with the fused epilogue
    fused_c_read_bytes_per_s: float  # its epilogue reading C_old for beta != 0 (partly overlapped with the MMAs)
    # the split products (gemm_tf32x3, gemm_f16x3) by role and (BM, BN), in FLOPs of the product (2MNK)
    split_tflops: Mapping[str, Mapping[tuple[int, int], float]]
    simt_tflops: Mapping[str, float]
    dram_bytes_per_s: float
    stream_bytes_per_s: float  # gemm_strided_stream: B read once, straight from HBM
    stream_sm_bytes_per_s: float  # what one SM of a gemm_strided_stream grid pulls when few SMs are busy
    copy_bytes_per_s: float  # copy kernel, row-major destination with 16-byte rows
    copy_transpose_bytes_per_s: float  # column-major destination
    copy_transpose_unaligned_bytes_per_s: float  # ... whose columns are not 16-byte aligned: element stores
    copy_unaligned_bytes_per_s: float  # destination rows not 16-byte aligned: element stores
    strided_c_column_bytes_per_s: float  # the strided GEMMs' element stores down a C whose columns are contiguous
    sm_bytes_per_s: float  # how fast one CTA streams its operand panels from L2
    l2_bytes_per_s: float  # what the SMs of a strided wgmma launch pull from L2 together (operand panels)
    l2_fit_bytes: int  # an operand up to this size is re-read from L2, not DRAM (matmul_sm90's B policy: 64 MiB)
    smem_bytes_per_s: float  # one SM writing and re-reading its fp32 partial tile (strided GEMM epilogue)
    dsmem_bytes_per_s: float  # one SM summing its rows of the cluster's partial tiles (split-K epilogue)
    launch_us: float = 2.5  # GPU-side cost of one more kernel in the sequence
    scaled_split_us: float = 0.0  # a scaled split step's second pass: its lines' maxima come first (SplitFormat)
    cluster_launch_us: float = 0.0  # extra latency of a split-K launch (a cluster of CTAs along K)
    # the share of the SMs that clusters of each size fill at once (one CTA an SM): a cluster runs within one
    # GPC, so the SMs a GPC has beyond a multiple of the size stay idle; sizes not listed fill them all
    cluster_sm_share: Mapping[int, float] = field(default_factory=dict)
    strided_tile_latency_us: float = 0.0  # per 128 x 128 of tile: a strided-role CTA's fill and fp32 epilogue
    hopper_bonus: Mapping[str, float] = field(default_factory=dict)  # persistent / cluster / tma_store / narrow
    streamk_fixup_us: float = 0.0  # what a stream-K launch takes beyond its busiest CTA's k-blocks ...
    streamk_fixup_piece_us: float = 0.0  # ... and per piece of a tile beyond two (the owner adds each peer's partial)
    streamk_shared_fixup_us: float = 0.0  # ... where every piece sums and stores a share (more than SK_SERIAL_PIECES)
    k_groups_fixup_us: float = 0.0  # K groups: publishing, counting in and the last group's start on the sum
    k_groups_dram_bytes_per_s: float = 0.0  # what K-group launches (long K slices of few tiles) read from DRAM at,
    k_groups_cta_bytes_per_s: float = 0.0  # ... at most this much per CTA of the wave
    k_groups_sum_round_us: float = 0.0  # the last group's CTA summing the groups' rows: per L2 round trip of a thread
    k_sum_publish_us: float = 0.0  # deferred K groups: a CTA writing its sums to its group's plane
    k_sum_dram_bytes_per_s: float = 0.0  # what deferred launches (unclustered, nobody waiting) read from DRAM at, ...
    k_sum_cta_bytes_per_s: float = 0.0  # ... at most this much per CTA of the wave
    k_sum_latency_us: float = 0.0  # the sum launch (kgroups_sum role): its fixed cost, ...
    k_sum_bytes_per_s: float = 0.0  # ... and the rate it reads the planes (from L2) and writes C at
    # what the gemm_strided_wgmma launches of token-width tiles (roles.gemm_strided_wgmma.token_tile: decode as
    # C^T = B^T A^T, the weights streamed through 11-13 stage rings) read and write DRAM at; 0: dram_bytes_per_s
    token_tile_dram_bytes_per_s: float = 0.0


LADDER_FLOOR = 0.25  # the first rung of a ladder runs at about this fraction of its last (naive kernels)
REUSE_FULL = 42.0  # BM*BN/(BM+BN) of a 128 x 64 tile: smaller tiles re-read operands from L2 more
# gemm_fused_wgmma with C stored through its pointer: the threads write the staged passes
# (docs/dev/cost_model.md#c-unmapped)
C_UNMAPPED_SHARE = 0.9
# The share of the DRAM rate at which an epilogue writes C where that takes the time (small K): a TMA store streams
# whole lines, the matmul kernels 8-byte runs from a staged tile, direct epilogues 4-byte pairs
# (docs/dev/cost_model.md#c-store)
C_STORE_SHARE = {"tma": 1.0, "staged": 0.8, "direct": 0.4}


# The fused kernels' tile queue pays on batched launches of at least DYNAMIC_MIN_TILES tiles of at most DYNAMIC_MAX_K
# with at least DYNAMIC_MIN_OUT_BYTES of C (the static order lets CTAs drift apart; each claim waits on the one
# before it): priced as QUEUE_SCALE of the static launch (docs/dev/cost_model.md#tile-queue)
DYNAMIC_MIN_TILES = 1024
DYNAMIC_MAX_K = 128
DYNAMIC_MIN_OUT_BYTES = 128 << 20
QUEUE_SCALE = {True: 0.94, False: 1.02}  # (where it pays, elsewhere)


def dynamic_order_pays(tiles: int, K: int, batched: bool, out_bytes: int) -> bool:
    """Whether a fused-kernel launch of `tiles` tiles (over its batch), this K and `out_bytes` of C (over its batch)
    runs faster from the tile queue."""
    return batched and tiles >= DYNAMIC_MIN_TILES and K <= DYNAMIC_MAX_K and out_bytes >= DYNAMIC_MIN_OUT_BYTES


# Two CTAs an SM (the m128n64 kernels' `occ` variant, each with half the ring) pay batched with a short K: priced as
# OCC2_SCALE of the one-CTA launch (docs/dev/cost_model.md#two-ctas-an-sm)
OCC2_MAX_K = 1024
OCC2_SCALE = {True: 0.95, False: 1.10}  # (where it pays, elsewhere)


def two_ctas_pay(K: int, batched: bool) -> bool:
    """Whether a launch of the `occ` kernels runs faster at two CTAs an SM: batched, with a short K."""
    return batched and K <= OCC2_MAX_K


# A split-K launch of the strided kernels runs slower the shorter each CTA's K: its arithmetic and panel terms are
# scaled by 1 + SPLIT_K_SHORT_K / (K per CTA), uncapped (docs/dev/cost_model.md#split-k)
SPLIT_K_SHORT_K = 1300.0
# A multicast pair pays with B in L2 where this many rows of tiles re-read a B of at least these bytes ...
MC_REREAD_ROWS, MC_REREAD_B_BYTES = (4, 8), 16 << 20
# ... running its arithmetic in this share of the unicast launch's time (there the L2, not the tensor cores,
# limits one CTA an SM; docs/dev/cost_model.md#multicast)
MC_PAIR_COMPUTE_SHARE = 0.88
# TMA-fed kernels read rows whose byte stride is off a multiple of 32 (tma.TMA_FAST_ROW_BYTES) this much slower;
# the planner also offers such operands packed (the `pack` route option) (docs/dev/cost_model.md#tma-slow-rows)
TMA_SLOW_ROW_FACTOR = 1.4


def c_store_kind(spec: KernelSpec) -> str:
    """How a kernel stores C (C_STORE_SHARE): its TMA map, else its role's way."""
    if "tmap:C" in spec.params:
        return "tma"
    return gemm_handler(spec.role).c_store

# H100/H200, measured: each field's measurement in docs/dev/cost_model.md#hopper-rates
HOPPER = ArchRates(
    name="sm_90 (H100/H200, measured)",
    ladder_tflops={"hopper": 640.0, "cute": 430.0, "mma": 250.0, "wmma": 180.0, "cuda": 20.0, "sgemm": 40.0},
    tf32_tflops=120.0,
    strided_mma_tflops={16: 70.0, 32: 120.0, 64: 170.0, 128: 210.0},
    fused_wgmma_tflops=740.0,  # below the catalogue kernel's: a plain product keeps it, an epilogue saves a copy
    fused_c_read_bytes_per_s=2.6e12,
    split_tflops={GemmTf32x3.name: {(128, 64): 60.0, (128, 128): 79.0, (128, 192): 90.0},
                  GemmF16x3.name: {(128, 64): 112.0, (128, 128): 156.0, (128, 192): 180.0}},
    simt_tflops={"f16": 15.0, "bf16": 15.0, "f32": 20.0},
    dram_bytes_per_s=2.6e12,
    stream_bytes_per_s=2.9e12,
    stream_sm_bytes_per_s=45e9,
    copy_bytes_per_s=2.5e12,
    copy_transpose_bytes_per_s=1.5e12,
    copy_transpose_unaligned_bytes_per_s=0.27e12,
    copy_unaligned_bytes_per_s=0.75e12,
    strided_c_column_bytes_per_s=0.16e12,
    sm_bytes_per_s=120e9,
    l2_bytes_per_s=8.0e12,
    l2_fit_bytes=64 << 20,
    smem_bytes_per_s=200e9,
    dsmem_bytes_per_s=60e9,
    hopper_bonus={"persistent": 40.0, "cluster": -3.0, "tma_store": 80.0, "narrow": -23.0},
    cluster_launch_us=1.2,
    strided_tile_latency_us=1.5,
    scaled_split_us=4.0,
    cluster_sm_share={4: 120 / 132, 8: 120 / 132},
    streamk_fixup_us=11.0,
    streamk_fixup_piece_us=1.5,
    streamk_shared_fixup_us=25.0,
    k_groups_fixup_us=3.5,
    k_groups_dram_bytes_per_s=1.5e12,
    k_groups_cta_bytes_per_s=14e9,
    k_groups_sum_round_us=0.2,
    k_sum_publish_us=1.0,
    k_sum_dram_bytes_per_s=2.0e12,
    k_sum_cta_bytes_per_s=26e9,
    k_sum_latency_us=1.5,
    k_sum_bytes_per_s=4e12,
    # the decode kernels' stream rate: on the H200 the token-width routes ran 0.93x the decode kernels at M <= 16
    # and ahead of the 64-row wgmma tiles at M = 32, which this rate ranks the same way
    # (docs/dev/tuning_log.md#token-width-tiles-for-decode-session-33-h200)
    token_tile_dram_bytes_per_s=2.9e12,
)

# sm_80/86/89 (A100, A10/3090, L4/4090 class): the Hopper class rates without wgmma, scaled to an A100's
# 312 TFLOPS dense fp16 peak and ~1.6 TB/s of DRAM; not measured here. mma.sync is the native tensor
# path before Hopper and reaches a larger share of the peak there (~1.6x the share it gets on an H100).
# Within one GPU only the ratios rank the candidates, so one table serves the family.
_AMPERE_SCALE = 312.0 / 989.0 * 1.6
AMPERE = ArchRates(
    name="sm_80/86/89 (datasheet-scaled, not measured)",
    ladder_tflops={k: v * _AMPERE_SCALE for k, v in
                   {"cute": 430.0, "mma": 250.0, "wmma": 180.0, "cuda": 20.0, "sgemm": 40.0}.items()},
    tf32_tflops=120.0 * _AMPERE_SCALE,
    strided_mma_tflops={bm: v * _AMPERE_SCALE for bm, v in {16: 70.0, 32: 120.0, 64: 170.0, 128: 210.0}.items()},
    fused_wgmma_tflops=0.0,  # sm_90a only
    fused_c_read_bytes_per_s=0.3e12,
    split_tflops={},  # sm_90a only
    simt_tflops={"f16": 8.0, "bf16": 8.0, "f32": 12.0},
    dram_bytes_per_s=1.3e12,
    stream_bytes_per_s=1.45e12,
    stream_sm_bytes_per_s=30e9,
    copy_bytes_per_s=1.2e12,
    copy_transpose_bytes_per_s=0.75e12,
    copy_transpose_unaligned_bytes_per_s=0.15e12,
    copy_unaligned_bytes_per_s=0.4e12,
    strided_c_column_bytes_per_s=0.1e12,
    sm_bytes_per_s=90e9,
    l2_bytes_per_s=4e12,  # unused: no strided wgmma before sm_90
    l2_fit_bytes=32 << 20,  # (A100 40 MB)
    smem_bytes_per_s=150e9,
    dsmem_bytes_per_s=60e9,  # unused: no clusters before sm_90
)


def rates_for(cc: tuple[int, int]) -> ArchRates:
    return HOPPER if cc >= (9, 0) else AMPERE


class CostModel:
    """Prices recipes for one GPU (its architecture's rates and SM count) and one build."""

    def __init__(self, rates: ArchRates, sm_count: int, manifest: Manifest | None = None):
        self.rates, self.sm_count, self.manifest = rates, sm_count, manifest

    @classmethod
    def for_device(cls, cc: tuple[int, int], sm_count: int, manifest: Manifest | None = None) -> "CostModel":
        return cls(rates_for(cc), sm_count, manifest)

    def _step_rank(self, spec: KernelSpec) -> float:
        """0 for the first rung of the kernel's ladder (same dtype and accumulation), 1 for the last."""
        if self.manifest is None:
            return 1.0
        steps = [s.step for s in self.manifest.kernels.values()
                 if s.ladder == spec.ladder and s.dtype == spec.dtype and s.acc == spec.acc]
        lo, hi = min(steps), max(steps)
        return 1.0 if hi == lo else (spec.step - lo) / (hi - lo)

    def kernel_tflops(self, spec: KernelSpec) -> float:
        """The kernel's sustained rate once the grid is full: its role's (GemmRole.tflops)."""
        return gemm_handler(spec.role).tflops(self, spec)

    def ladder_tflops(self, spec: KernelSpec) -> float:
        """A catalogue kernel's rate: its ladder's best (TF32 for the sgemm ladder's TF32 kernels), the Hopper
        steps' bonuses (alternatives, not a maturity ladder), the others' rungs from LADDER_FLOOR up; smaller
        tiles less (REUSE_FULL)."""
        r = self.rates
        BM, BN, _ = spec.tile
        tf32 = spec.ladder == "sgemm" and spec.acc == "tf32"
        rate = r.tf32_tflops if tf32 else r.ladder_tflops.get(spec.ladder, 10.0)
        if spec.ladder == "hopper":  # the Hopper steps are alternatives, not a maturity ladder
            bonus = r.hopper_bonus
            rate += bonus.get("persistent", 0.0) if spec.grid == "persistent" else 0.0
            rate += bonus.get("cluster", 0.0) if spec.cluster != (1, 1, 1) else 0.0
            rate += bonus.get("tma_store", 0.0) if "tmap:C" in spec.params else 0.0
            rate += bonus.get("narrow", 0.0) if narrow_hopper(spec) else 0.0
        else:
            rate *= LADDER_FLOOR + (1 - LADDER_FLOOR) * self._step_rank(spec)
        return rate * min(1.0, BM * BN / (BM + BN) / REUSE_FULL)

    def gemm_us(self, spec: KernelSpec, g: Gemm, dtype: str, beta_zero: bool = True) -> float:
        """Estimated microseconds of one GEMM launch, as its role prices it (GemmRole.gemm_us: tiled_gemm_us but
        for the streaming role)."""
        return gemm_handler(spec.role).gemm_us(self, spec, g, dtype, beta_zero)

    def tiled_gemm_us(self, spec: KernelSpec, g: Gemm, dtype: str, beta_zero: bool = True) -> float:
        """Estimated microseconds of one GEMM launch of a tiled kernel: the slowest of compute (at the class rate,
        scaled by how evenly the CTAs spread over the SMs), DRAM traffic, and the operand panels one SM must stream.
        A batched launch has every matrix's tiles in its grid (the wave terms) and the bytes of every
        distinct matrix it reads and writes (a broadcast operand's once)."""
        r = self.rates
        isz = ITEMSIZE[dtype]
        BM, BN, _ = spec.tile
        outer, inner = kernel_batch(g.batch)
        nb = outer * inner
        c_bytes = g.M * g.N * nb * isz  # C over the batch
        role = gemm_handler(spec.role)
        tiles = self.grid_ctas(spec, g)
        load = role.busiest_load(self, spec, g, tiles)  # tiles on the busiest SM
        compute = self._compute_s(spec, g) / (C_UNMAPPED_SHARE if g.c_unmapped else 1.0)
        dram = role.dram_bytes_per_s(self, spec, g, tiles)
        memory = (g.M * g.K * distinct_matrices(g.a, g.batch) + g.K * g.N * distinct_matrices(g.b, g.batch) +
                  g.M * g.N * distinct_matrices(g.c, g.batch) / C_STORE_SHARE[c_store_kind(spec)]) * isz / dram
        # a multicast pair shares its B tile: where B does not fit in L2, or where MC_REREAD_ROWS rows of tiles re-read
        # a B of MC_REREAD_B_BYTES from L2 (docs/dev/cost_model.md#multicast); elsewhere priced as unshared
        b_bytes = g.N * g.K * isz
        rereads = MC_REREAD_ROWS[0] <= math.ceil(g.M / BM) <= MC_REREAD_ROWS[1] and b_bytes >= MC_REREAD_B_BYTES
        b_shared = g.cluster_m if b_bytes > r.l2_fit_bytes or rereads else 1
        panel_bytes = (BM + BN / b_shared) * (g.K / (g.splits * g.k_groups)) * isz
        if rereads and b_bytes <= r.l2_fit_bytes and b_shared > 1:  # the L2 feeds the class rate; the pair reads less
            compute *= MC_PAIR_COMPUTE_SHARE
        panel = load * panel_bytes / r.sm_bytes_per_s * self.split_factor(spec, g)
        if role.l2_panel:
            panel = max(panel, tiles * panel_bytes / r.l2_bytes_per_s)
        # a multicast pair's cluster launch and barriers (docs/dev/cost_model.md#multicast)
        epilogue = r.cluster_launch_us * 1e-6 if g.cluster_m > 1 else 0.0
        latency = r.cluster_launch_us if g.splits > 1 else 0.0
        if role.fp32_tile_epilogue:  # fp32 tile through shared memory
            tile_bytes = BM * BN * 4
            epilogue += load * (tile_bytes / r.smem_bytes_per_s +
                               (tile_bytes / r.dsmem_bytes_per_s if g.splits > 1 else 0.0))
            latency += r.strided_tile_latency_us * BM * BN / (128 * 128)
            if smem_split(spec) and g.splits > 2:
                epilogue += load * SMEM_SPLIT_SUM_US * 1e-6 * (g.splits - 2) * BM * BN / (128 * 128)
            if g.c.cs != 1 and g.c.rows > 1 and r.strided_c_column_bytes_per_s:  # element stores, row by row
                epilogue += c_bytes / (r.strided_c_column_bytes_per_s * c_column_run(spec, isz))
        epilogue += role.pieces_sum_s(self, spec, g)  # (K groups' sums)
        if role.reads_c_old and g.applies_alpha_beta and not beta_zero:
            epilogue = c_bytes / r.fused_c_read_bytes_per_s
        epilogue += role.fixup_us(self, spec, g) * 1e-6  # (stream-K's partial tiles)
        variant = dict(g.variant)
        scale = QUEUE_SCALE[dynamic_order_pays(tiles, g.K, nb > 1, c_bytes)] if variant.get(QUEUE) == 1 else 1.0
        scale *= OCC2_SCALE[two_ctas_pay(g.K, nb > 1)] if variant.get(OCC) == 2 else 1.0
        compute, memory, panel, epilogue = (x * scale for x in (compute, memory, panel, epilogue))
        # a problem too small to keep the GPU busy costs the launch's latency instead
        return max((max(compute, memory, panel) + epilogue) * 1e6, latency)

    def _compute_s(self, spec: KernelSpec, g: Gemm) -> float:
        """Seconds of arithmetic of one GEMM launch: the tiles' work, wasted or not, at the class rate over
        the SMs its grid keeps busy (or as its role counts it: GemmRole.compute_s)."""
        own = gemm_handler(spec.role).compute_s(self, spec, g)
        if own is not None:
            return own
        BM, BN, _ = spec.tile
        nb = math.prod(kernel_batch(g.batch))
        tiles = self.grid_ctas(spec, g)
        eff = tiles / (math.ceil(tiles / self.cta_slots(spec, g.splits)) * self.sm_count)  # how evenly the CTAs spread
        # what the tiles compute, wasted or not (a half_tiles kernel's last narrow tile computes BN/2 columns)
        Mt, Nt = self.tile_rows(g, BM) * BM, spec.computed_cols(g.N, g.swiglu)
        rate = self.kernel_tflops(spec) * gemm_handler(spec.role).rate_factor(spec, g)
        return 2.0 * Mt * Nt * g.K * nb / (rate * 1e12 * eff) * self.split_factor(spec, g)

    @staticmethod
    def tile_rows(g: Gemm, BM: int) -> int:
        """Rows of tiles the grid runs: whole multicast pairs (the last odd row's pair computes nothing)."""
        return -(-math.ceil(g.M / BM) // g.cluster_m) * g.cluster_m

    def grid_ctas(self, spec: KernelSpec, g: Gemm) -> int:
        """The CTAs of a launch (stream-K aside): its tiles times its K pieces, over the kernel's batch."""
        BM, BN, _ = spec.tile
        return self.tile_rows(g, BM) * math.ceil(g.N / BN) * g.splits * g.k_groups * math.prod(kernel_batch(g.batch))

    def cta_slots(self, spec: KernelSpec, cluster_size: int) -> int:
        """The wave of a launch in clusters of `cluster_size`: the SM count, less the SMs that such clusters
        of the Hopper strided kernels (one CTA an SM: their rings fill the shared memory) leave idle."""
        if not gemm_handler(spec.role).one_cta_per_sm:
            return self.sm_count
        share = self.rates.cluster_sm_share.get(cluster_size, 1.0)
        return max(int(self.sm_count * share) // cluster_size * cluster_size, cluster_size)

    def compute_us(self, recipe: Recipe) -> float:
        """The arithmetic part of the recipe's GEMM steps alone: what breaks a tie between recipes whose
        estimates are the same memory-bound time (the one with the most arithmetic slack keeps up with the
        memory system best; a stream-K step's fix-up counts: it is work, not waiting on memory)."""
        specs = [(self.manifest.kernels[s.kernel], s) for s in recipe.steps if isinstance(s, Gemm)]
        return sum(1e6 * self._compute_s(spec, s) + gemm_handler(spec.role).fixup_us(self, spec, s)
                   for spec, s in specs if gemm_handler(spec.role).in_compute_tie)

    def split_factor(self, spec: KernelSpec, g: Gemm) -> float:
        """How much slower than its rate a split-K launch runs: its role's rule (GemmRole.split_factor: the
        smem_split kernels'), else for the roles whose split launches slow with short K slices
        (GemmRole.split_k_slowdown; docs/dev/cost_model.md#split-k)
        1 + SPLIT_K_SHORT_K / (K per CTA); 1 unsplit and for the other roles."""
        role = gemm_handler(spec.role)
        own = role.split_factor(self, spec, g)
        if own is not None:
            return own
        pieces = g.splits * g.k_groups
        if pieces == 1 or not role.split_k_slowdown:
            return 1.0
        return 1.0 + SPLIT_K_SHORT_K / (g.K / pieces)

    def group_sum_us(self, s: GroupSum, dtype: str, beta_zero: bool = True) -> float:
        """A deferred K-groups sum: every group's fp32 plane read (from L2) and C written (and read for beta)."""
        r = self.rates
        nbytes = s.groups * s.M * s.N * 4 + s.M * s.N * ITEMSIZE[dtype] * (1 if beta_zero else 2)
        return r.k_sum_latency_us + nbytes / r.k_sum_bytes_per_s * 1e6

    def copy_us(self, c: Copy | Split, dtype: str, beta_zero: bool = True) -> float:
        """A copy or split step: bytes over the rate its destination's access pattern reaches."""
        r = self.rates
        isz = ITEMSIZE[dtype]
        outer, inner = kernel_batch(c.batch)  # (the loop levels: estimate_us)
        split = c.format if isinstance(c, Split) else None
        reads = split.reads if split else 1  # (a scaled split reads its source twice)
        nbytes = (reads * c.src_rows * c.src_cols + c.dst.rows * c.dst.cols) * isz * outer * inner
        if c.applies_alpha_beta and not beta_zero:
            nbytes += c.dst.rows * c.dst.cols * isz * outer * inner
        if c.dst.cs != 1 and c.dst.rows > 1:
            rate = r.copy_transpose_bytes_per_s if c.dst.align >= 16 and (c.dst.cols == 1 or c.dst.cs * isz % 16 == 0) \
                else r.copy_transpose_unaligned_bytes_per_s
        elif c.dst.align < 16 or (c.dst.rows > 1 and c.dst.rs * isz % 16):
            rate = r.copy_unaligned_bytes_per_s
        else:
            rate = r.copy_bytes_per_s
        latency = r.scaled_split_us if split and split.scaled else 0.0
        return nbytes / rate * 1e6 + latency

    @staticmethod
    def tma_row_factor(spec: KernelSpec, g: Gemm) -> float:
        """TMA_SLOW_ROW_FACTOR where a tensor map of the launch reads A or B off 32-byte row boundaries, else 1."""
        isz = ITEMSIZE[spec.dtype]
        slow = ("tmap:A" in spec.params and tma_slow_rows(g.a, isz)) or \
            ("tmap:B" in spec.params and tma_slow_rows(g.b, isz))
        return TMA_SLOW_ROW_FACTOR if slow else 1.0

    def estimate_us(self, recipe: Recipe, dtype: str, beta_zero: bool = True) -> float:
        """The recipe's steps in sequence, each launch's latency included; repeated per index of its
        loop levels (a batched problem with more levels or matrices than one launch takes)."""
        if self.manifest is None:
            raise ValueError("estimate_us needs the manifest the recipe's kernels come from")
        t = 0.0
        for step in recipe.steps:
            if isinstance(step, Gemm):
                spec = self.manifest.kernels[step.kernel]
                t += self.gemm_us(spec, step, dtype, beta_zero) * self.tma_row_factor(spec, step)
            elif isinstance(step, GroupSum):
                t += self.group_sum_us(step, dtype, beta_zero)
            else:
                t += self.copy_us(step, dtype, beta_zero)
        loops = math.prod(recipe.loop)
        return (t + self.rates.launch_us * len(recipe.steps)) * loops
