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
from .roles import HANDLERS, SPLIT_FORMATS, GemmRole, gemm_handler
from .roles.base import OCC
from .roles.gemm import HOPPER_TILE_COLS, ODD_N_DIRECT_STORE, narrow_hopper
from .roles.gemm_f16x3 import GemmF16x3
from .roles.gemm_tf32x3 import GemmTf32x3
from .roles.gemm_fused_wgmma import streamk_splits
from .roles.gemm_strided_stream import STREAM_CTA_SHARE, STREAM_SPLIT_COST
from .roles.gemm_strided_wgmma import SMEM_SPLIT_FIXED_US, SMEM_SPLIT_SUM_US, TF32_SHARE, smem_split
from .roles.glue import distinct_matrices, tma_slow_rows
from .roles.tma_gemm import QUEUE


@dataclass(frozen=True)
class ArchRates:
    """Sustained rates of each kernel class once the grid is full, and the memory system's speeds."""

    name: str
    ladder_tflops: Mapping[str, float]  # best kernel of each catalogue ladder
    tf32_tflops: float
    strided_mma_tflops: Mapping[int, float]  # gemm_strided_mma by BM
    strided_wgmma_tflops: Mapping[tuple[int, int], float]  # gemm_strided_wgmma by (BM, BN)
    fused_wgmma_tflops: float  # gemm_fused_wgmma: the persistent Hopper kernel with the fused epilogue
    fused_c_read_bytes_per_s: float  # its epilogue reading C_old for beta != 0 (partly overlapped with the MMAs)
    # the split products (gemm_tf32x3, gemm_f16x3) by role and (BM, BN), in FLOPs of the product (2MNK)
    split_tflops: Mapping[str, Mapping[tuple[int, int], float]]
    # gemm_strided_wgmma at fp32 accuracy on fp32 (acc "f32": 3xTF32 with the split in shared memory) by (BM, BN),
    # B as N x K (tn); nn kernels (B as K x N, transposed in shared memory) at smem_split_nn_share of it
    smem_split_tflops: Mapping[tuple[int, int], float]
    smem_split_nn_share: float
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
    l2_fit_bytes: int  # an operand up to this size is re-read from L2, not DRAM (util_sm90's B policy: 64 MiB)
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


LADDER_FLOOR = 0.25  # the first rung of a ladder runs at about this fraction of its last (naive kernels)
REUSE_FULL = 42.0  # BM*BN/(BM+BN) of a 128 x 64 tile: smaller tiles re-read operands from L2 more
# gemm_fused_wgmma with C stored through its pointer (Gemm.c_unmapped): the threads write the staged passes (H100,
# fp16, 4096 x 4097 x 4096 stream-K 211-219 us against 195.7 with a 4104-wide C through its map)
C_UNMAPPED_SHARE = 0.9
# The share of the DRAM rate at which a kernel's epilogue writes C, where writing C is what takes the time
# (small K): a TMA store streams whole lines; the util kernels store 8-byte runs from a staged tile; the
# catalogue's direct epilogues store 4-byte pairs from registers (H100, 8192 x 8192 x 16 fp16: 55.9 us
# through a TMA store, 139.9 us through direct stores)
C_STORE_SHARE = {"tma": 1.0, "staged": 0.8, "direct": 0.4}


# The fused kernel's `queue` variant: its tiles claimed from a counter (the dynamic order; TileQueue in
# cu/common/sm90_gemm.cuh). It pays on batched launches of at least DYNAMIC_MIN_TILES tiles of at most
# DYNAMIC_MAX_K, whose time is the output's writes: there the static order lets CTAs drift apart, reading operands
# the output stream has pushed out of L2 (H100, fp16, do_bench: 256 x (2048 x 2048 x 128) 1016 us as one launch, 965
# as 4 launches of 64), and the queue ran 1016 -> 878 us (torch 892), 64 x (...) 243 -> 228 (torch 229), 256 x (512 x
# 512 x 64) 68.2 -> 67.9; unbatched, 32768 x 8192 x 128 225 -> 213, the catalogue kernel's time, which plain GEMMs
# run on (only batched launches are priced as gaining). Elsewhere it lost 1-3% (64 x (512 x 512 x 64) 19.5 -> 21.2,
# 32 x 1024^3 118 -> 121, 16384 x 4096 x 4096 863 -> 871), each claim's round trip waiting on the one before it,
# and so did many tiles whose output L2 holds (at least DYNAMIC_MIN_OUT_BYTES of C: 1024 x (128 x 128 x 64), 32 MiB,
# 29.5 -> 31.6 us). Priced as QUEUE_SCALE of the static launch.
DYNAMIC_MIN_TILES = 1024
DYNAMIC_MAX_K = 128
DYNAMIC_MIN_OUT_BYTES = 128 << 20
QUEUE_SCALE = {True: 0.94, False: 1.02}  # (where it pays, elsewhere)


def dynamic_order_pays(tiles: int, K: int, batched: bool, out_bytes: int) -> bool:
    """Whether a fused-kernel launch of `tiles` tiles (over its batch), this K and `out_bytes` of C (over its batch)
    runs faster from the tile queue."""
    return batched and tiles >= DYNAMIC_MIN_TILES and K <= DYNAMIC_MAX_K and out_bytes >= DYNAMIC_MIN_OUT_BYTES


# The m128n64 util kernels' `occ` variant: two CTAs an SM, each with half the ring (cu/util_sm90.cu). H100, fp16,
# do_bench, one CTA an SM -> two: batched, P.V 64 x (512 x 64 x 512) 25.9 -> 23.9 us (torch 23.6), B as N x K
# 25.9 -> 24.2, 128 x (...) 42.1 -> 41.2, 64 x (1024 x 64 x 1024) 65.6 -> 64.8, 256 x (...) and 32 x (512 x 64 x
# 256) alike; unbatched it lost: 1024^3 11.1 -> 12.5, 256 x 4096 x 4096 23.7 -> 30.4, 512^3 8.0 -> 8.6. Priced as
# OCC2_SCALE of the one-CTA launch.
OCC2_MAX_K = 1024
OCC2_SCALE = {True: 0.95, False: 1.10}  # (where it pays, elsewhere)


def two_ctas_pay(K: int, batched: bool) -> bool:
    """Whether a launch of the `occ` kernels runs faster at two CTAs an SM: batched, with a short K."""
    return batched and K <= OCC2_MAX_K


# Split-K launches of the Hopper strided kernels (a cluster of CTAs along K, partial tiles summed through
# DSMEM) ran 1.15-2.3x their estimate at the unsplit rates on the H100, the more the shorter each CTA's K
# (fp16, 256 x 6144 x 4096: splits=4 (K 1024 per CTA) 70.7 us against 30.5 estimated, splits=1 37.0 against
# 34.5; 256 x 4096 x 4096 splits=2 (K 2048): 1.5-1.8x; 256 x 4096 x 14336 splits=2 (K 7168): 1.15-1.4x; at K
# 8192-16384 per CTA (256 x 256 x 65536 splits=8) ~1.0x): the arithmetic and panel terms of a split launch
# are scaled by 1 + SPLIT_K_SHORT_K / (K per CTA), uncapped: below 1300 of K per CTA the launches ran on past
# 2x, as the law says (H100, fp16, B as nn.Linear holds it, measured / estimated with the factor capped at 2 ->
# uncapped: 128 x 1024 x 4096 m128n128 splits=8 16.9 us / 11.8 -> 17.9, m128n64 splits=4 14.6 / 13.1 -> 14.4;
# 512^3 m64n64 splits=4 17.2 / 6.3 -> 19.0; 1024^3 m128n64 splits=4 35.7 / 18.4 -> 43.4), and the picks of the
# N = 512-1024, K = 4096 rows (a GQA model's k and v projections) moved to the faster launch: 64 x 1024 x 4096
# 14.3-14.7 -> 12.5-12.9 us, 128 x 512 x 4096 13.4-13.7 -> 12.0-12.1, 128 x 1024 x 4096 16.6-17.3 -> 14.2-14.5,
# 256 x 512 x 4096 16.3-16.7 -> 14.3-14.7 (torch.matmul 12.0-13.3).
SPLIT_K_SHORT_K = 1300.0
# util_sm90's multicast pair pays with B in L2 where this many rows of tiles re-read a B of at least these bytes
# (H100, fp16, m128n128 unicast -> paired: 512 x 4096 x 3584, B 29 MB, 32.4 -> 28.4 us; 512 x 3072 x 3072, 19 MB,
# 25.9 -> 23.6)
MC_REREAD_ROWS, MC_REREAD_B_BYTES = (4, 8), 16 << 20
# ... and there it runs its arithmetic in this share of the unicast launch's time: the m128n128 rate (560 TFLOPS) is
# the L2's limit on one CTA an SM, not the tensor cores' (H100, fp16, unicast -> paired, us: 512 x 3072 x 3072
# 25.9 -> 23.6, 512 x 3584 x 3584 30.8 -> 27.6, 512 x 3584 x 4096 33.7 -> 30.1, 512 x 4096 x 3584 32.4 -> 28.4, 512 x
# 11008 x 4096 119.8 -> 100.8, 512 x 3072 x 8192 54.5 -> 49.1: 0.84-0.91 of the time). Not where B overflows the L2
# (256 x 8192 x 28672: paired 207.9 against stream-K's 192.4): there DRAM, not the L2, feeds the pair.
MC_PAIR_COMPUTE_SHARE = 0.88
SPLIT_PRODUCTS = tuple(SPLIT_FORMATS)  # fp32 at fp32 accuracy: three tensor-core products of split operands
ONE_CTA_PER_SM = tuple(n for n, h in HANDLERS.items() if isinstance(h, GemmRole) and h.one_cta_per_sm)
# A TMA map reads rows at full speed where their byte stride is a multiple of 32 (tma.TMA_FAST_ROW_BYTES). At an odd
# multiple of 16 bytes (fp16 K = 1000 or 3000) every box row straddles one sector more, and the TMA-fed kernels ran
# 1.4-1.7x slower with 256-byte L2 promotion (H100, fp16, L2 flushed: 1024 x 1024 x 1000 m128n64 16.8-17.0 us
# against 10.5 at K = 1024 and 1088 (12.0 at 1040: rows on 32 bytes but not on 128 cost little); 8192 x 8192 x 1000
# persistent 335.8 us, torch.matmul 226.9; 1024 x 1024 x 3000 37.8, torch 20.7), ~1.4x with the 128-byte promotion
# their maps now take (8192 x 8192 x 1000 287.7 against 203.9 at K = 1024; 1024 x 1024 x 1000 14.9 against 11.1).
# The planner also offers such operands packed into 128-byte rows (the `pack` route option), which the copies' cost
# then decides.
TMA_SLOW_ROW_FACTOR = 1.4


# Tiles of at most this many pieces: the owner adds its peers' partials itself; more: every piece sums and stores
# its share of the tile (kSkSerialPieces in cu/common/sm90_gemm.cuh)
SK_SERIAL_PIECES = 4
KG_SUM_LOADS = 4  # the K groups' sum: L2 loads in flight per thread (cu/util_sm90.cu, kgroups_fixup's unroll)


def c_store_kind(spec: KernelSpec) -> str:
    """How a kernel stores C (C_STORE_SHARE): its TMA map, else its role's way."""
    if "tmap:C" in spec.params:
        return "tma"
    return gemm_handler(spec.role).c_store

# H100/H200 (measured): Hopper persistent ~775 TFLOPS at 4096^3, gemm_strided_mma ~217, SGEMM 8x8 ~40,
# SIMT fp32 ~20; util_copy2d 2.5 / 1.5 / 0.75 TB/s (row-major / transposing / unaligned destination).
HOPPER = ArchRates(
    name="sm_90 (H100/H200, measured)",
    ladder_tflops={"hopper": 640.0, "cute": 430.0, "mma": 250.0, "wmma": 180.0, "cuda": 20.0, "sgemm": 40.0},
    tf32_tflops=120.0,
    strided_mma_tflops={16: 70.0, 32: 120.0, 64: 170.0, 128: 210.0},
    strided_wgmma_tflops={(64, 256): 520.0, (128, 256): 660.0, (64, 128): 400.0, (128, 128): 560.0,
                          (64, 64): 300.0, (128, 64): 450.0},
    # the catalogue's persistent TMA-store kernel plus the epilogue's loads and math: a little below it, so
    # that a plain product keeps the catalogue kernel and an epilogue saves its copy-out pass
    fused_wgmma_tflops=740.0,
    # beta = 1 at 4096 x 8192 x 2048 fp16 (64 MB of C_old, TMA-loaded per pass): 214.5 us against 189.6 plain (H100)
    fused_c_read_bytes_per_s=2.6e12,
    # the GEMM step alone, H100, 2048-8192^3 (three TF32 products; 2048^3 fills 176 of 264 slots at 128 x 192);
    # 128 x 64 not measured (the 128 x 128 rate scaled by its tile reuse, as REUSE_FULL does elsewhere).
    # 3xFP16, the GEMM step alone, H100, 2048-8192^3: 128 x 64 110-121 TFLOPS, 128 x 128 148-164, 128 x 192 174-183
    split_tflops={GemmTf32x3.name: {(128, 64): 60.0, (128, 128): 79.0, (128, 192): 90.0},
                  GemmF16x3.name: {(128, 64): 112.0, (128, 128): 156.0, (128, 192): 180.0}},
    # H100, each kernel unsplit at 4096^3 (2048^3: 6-8% less): tn m128n128 100.4 TFLOPS, m128n64 72.5, m64n64 58.5; nn
    # m128n128 80.2, m64n64 47.0 (0.80 of tn; at 768-1024^3 nn without a copy ran 10-20% faster than a copy and tn)
    smem_split_tflops={(64, 64): 58.0, (128, 64): 72.0, (128, 128): 100.0},
    smem_split_nn_share=0.85,
    simt_tflops={"f16": 15.0, "bf16": 15.0, "f32": 20.0},
    dram_bytes_per_s=2.6e12,  # achievable on H100 SXM / H200 (3.35 / 4.8 TB/s peak)
    stream_bytes_per_s=2.9e12,
    stream_sm_bytes_per_s=45e9,
    copy_bytes_per_s=2.5e12,
    copy_transpose_bytes_per_s=1.5e12,
    # a 4097 x 4096 fp16 temporary into a 4096 x 4097 row-major C as its transpose: 251 us
    copy_transpose_unaligned_bytes_per_s=0.27e12,
    copy_unaligned_bytes_per_s=0.75e12,
    # 4096 x 4097 x 4096 fp16 as C^T = B^T A^T on util_gemm_wgmma_f16_m128_tn: 467 us, 255 into the row-major C
    strided_c_column_bytes_per_s=0.16e12,
    sm_bytes_per_s=120e9,  # ~64 B/clk from L2 per SM
    # H100, fp16, unsplit util_sm90 launches of 128 CTAs: 6.4-7.9 TB/s of operand panels (256 x 8192 x 8192 at
    # 128 x 128 tiles: 537 MB in 78.0 us, 403 MB in 66.5 with B multicast; 256 x 4096 x 4096 at 128 x 64: 201 MB in
    # 25.5 us, at 64 x 128: 31.6)
    l2_bytes_per_s=8.0e12,
    l2_fit_bytes=64 << 20,  # H100 50 MB, H200 60 MB of L2
    smem_bytes_per_s=200e9,
    dsmem_bytes_per_s=60e9,
    # persistent grid with grouped tile order; B multicast across a 2-CTA cluster (no gain on the H200:
    # 28.6 vs 29.6 us at 2048^3, 180.8 vs 182.1 at 4096^3); TMA-store epilogue overlapped with the next
    # tile (180 vs 198 us at 4096^3); tiles narrower than 256 columns (128 x 192: more operand traffic per flop) ~3%
    # slower per flop (2048 x 6144 x 4096, equal wave fill: 152.6 vs 147.7 us; 8192^3 1655 vs 1646 with 99.3% vs 97%
    # of the last wave filled)
    hopper_bonus={"persistent": 40.0, "cluster": -3.0, "tma_store": 80.0, "narrow": -23.0},
    # latencies, the floor of a tiny problem's time: warm per-launch GPU times at 64^3 (H100, CUDA-graph
    # replay) of a split launch are 1.0-1.4 us above the same kernel unsplit, and the strided-role
    # tiles add ~1.2-3 us per 128 x 128 (pipeline fill, fp32 epilogue through shared memory)
    cluster_launch_us=1.2,
    strided_tile_latency_us=1.5,
    # H100, fp32 at fp32 accuracy, 512^3: the 3xFP16 route (two scaled splits, then the product at splits=8) 32.7 us
    # against 16.8 estimated without this; a split step alone 7.6 us at 256^3 against 2.8
    scaled_split_us=4.0,
    # cuOccupancyMaxActiveClusters of the util_sm90 kernels on an H100 SXM (132 SMs): 66 clusters of 2, 30 of 4,
    # 15 of 8, so 120 CTAs at once in clusters of 4 or 8: a 128-CTA split-8 grid runs in two waves (256 x 256 x
    # 65536 fp16, m64n64 splits=8: 76.6 us against 37.1 estimated; m128n64 splits=8, 64 CTAs: 47.9 against 48.8)
    cluster_sm_share={4: 120 / 132, 8: 120 / 132},
    # H100 (scripts/streamk_probe.py, fp16, B as nn.Linear holds it): measured minus the k-block estimate,
    # 256 x {4096, 6144} x 4096 +12.4 / +11.6 us, 256 x 8192 x 8192 +10.8, 256 x 4096 x 14336 +12.4 (2-4 pieces
    # a tile), 1024 x {6144, 14336} x 4096 +3.3 / +9.3 (after a wave of whole tiles): whatever the pieces' length;
    # tiles of 4 pieces (no whole tiles, 4 CTAs a tile) more: 1024 x 1024 x 4096 +14, 2048 x 512 x 3584 +15, 512 x
    # 2048 x 3584 +14.6, 256 x 4096 x 14336 +15.4 (measured 28.4, 28.1, 27.6, 66.7 us), where the plain 128 x 64
    # tiles, one a CTA, ran 22.9, 22.0, 23.1 at the first three
    streamk_fixup_us=11.0,
    streamk_fixup_piece_us=1.5,
    # more than 4 pieces a tile (shared fix-up), fp16: measured minus the DRAM term, 256 x 256 x 65536
    # and 128 x 128 x 131072 cut 66 / 132 ways +25.1 / +24.4 us, 64 x 64 x 65536 (132 ways) +22.2, 512 x 1024 x
    # 16384 (8 ways) +27.7
    streamk_shared_fixup_us=25.0,
    # K groups, H100, fp16, 128 x 128 x 131072 (64 MB of operands): ncu 39.1 us and 1.77 TB/s from DRAM at 112 CTAs
    # (m128n64, splits 8, 7 groups), 41.0-42.3 at 96-128 CTAs (m64n64), against cuBLAS's split-K kernel's 29.2 us at
    # 2.4 TB/s; with L2 flushed (do_bench) 44.9-45.5 us, and 256 x 256 x 65536 (m128n64, 16 groups) 48.6; 2 us
    # priced 128 x 1024 x {4096, 8192} m128n64 splits=2 k_groups=4 2.2-2.6 us under its time (16.9, 20.1-20.6 us)
    # and over splits=4 (14.4, 18.3-18.9), and the K-group launches of 256-1024 x 1024 x 4096 +1.2 us on average
    k_groups_fixup_us=3.5,
    k_groups_dram_bytes_per_s=1.5e12,
    k_groups_cta_bytes_per_s=14e9,  # (96 CTAs of m64n64, 8 x 3 a tile: 45.7-45.9 us)
    # kernel time (profiler), H100, fp16: 64 x 64 x 65536 (m64n64) in 66 groups of clusters of 2 +15.5 us and 128
    # unclustered groups +52.5 against 15 groups of clusters of 8; 128 x 128 x 131072 m64n64 32 groups against 16
    # groups of 2 +9.6, m128n64 28 groups of 2 and 56 of 1 against 7 of 8 +6.0 / +24.0 (issuing 4 quads' loads at
    # a time ran 2-4x slower still)
    k_groups_sum_round_us=0.2,
    # deferred K groups, H100, fp16, L2 flushed: 128 x 128 x 131072 m128n64 x 64 groups 40.7 us (kernels 35.8), 256 x
    # 256 x 65536 m128n64 x 16 41.3 (36.4), 512 x 512 x 32768 m128n128 x 8 47.4 (42.8), 64 x 64 x 65536 m64n64 x 64
    # 18.4 (13.5; 64 CTAs), x 128 18.7 (13.9): the operands stream at ~2 TB/s, ~26 GB/s a CTA where few
    k_sum_publish_us=1.0,
    k_sum_dram_bytes_per_s=2.0e12,
    k_sum_cta_bytes_per_s=26e9,
    k_sum_latency_us=1.5,
    k_sum_bytes_per_s=4e12,
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
    strided_wgmma_tflops={},
    fused_wgmma_tflops=0.0,  # sm_90a only
    fused_c_read_bytes_per_s=0.3e12,
    split_tflops={},  # sm_90a only
    smem_split_tflops={},
    smem_split_nn_share=1.0,
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
        rate = r.tf32_tflops if spec.ladder == "sgemm" and spec.acc == "tf32" else r.ladder_tflops.get(spec.ladder, 10.0)
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
        """Estimated microseconds of one GEMM launch of a tiled kernel: the slowest of compute (at the class rate, scaled by
        how evenly the CTAs spread over the SMs), DRAM traffic, and the operand panels one SM must stream.
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
        load = math.ceil(tiles / self.cta_slots(spec, g.splits))  # CTAs on the busiest SM
        if g.ctas:  # stream-K: the busiest CTA's k-blocks, whole tiles and pieces
            load = self._streamk_blocks(spec, g) / math.ceil(g.K / spec.tile[2])
        compute = self._compute_s(spec, g) / (C_UNMAPPED_SHARE if g.c_unmapped else 1.0)
        dram = r.dram_bytes_per_s
        if g.k_groups > 1:  # the CTAs of one wave streaming
            wave = min(tiles, self.cta_slots(spec, g.splits))
            dram = min(r.k_sum_dram_bytes_per_s, wave * r.k_sum_cta_bytes_per_s) if g.k_deferred else \
                min(r.k_groups_dram_bytes_per_s, wave * r.k_groups_cta_bytes_per_s)
        memory = (g.M * g.K * distinct_matrices(g.a, g.batch) + g.K * g.N * distinct_matrices(g.b, g.batch) +
                  g.M * g.N * distinct_matrices(g.c, g.batch) / C_STORE_SHARE[c_store_kind(spec)]) * isz / dram
        # the operand panels each CTA streams, by the busiest SM and by all. A multicast pair shares its B tile: it
        # gains where B does not fit in L2 (H100, fp16: 256 x 8192 x 8192, B 128 MB, 78.0 -> 66.5 us), and where 4 or
        # more rows of tiles re-read a B of 16 MiB or more from L2 (m128n128, 512 x 4096 x 4096 34.6 -> 30.4,
        # 1024 x 4097 x 4096 74.1 -> 65.4, 512 x 11008 x 4096 119.8 -> 100.8), but not with 2 rows of tiles (256 x
        # 4097 x 4096 29.2 -> 30.9) nor a B of 8 MB (1024 x 1024 x 4096 26.2 -> 29.0). With 16 rows it gains too (2048
        # x 4097 x 4096 144.8 -> 126.3), but stream-K's 119.4 there is priced above it (the model's stream-K is high):
        # measured 4-8 rows only. Elsewhere it is priced as unshared, and the pair's cost below keeps it behind the
        # unicast launch
        b_bytes = g.N * g.K * isz
        rereads = MC_REREAD_ROWS[0] <= math.ceil(g.M / BM) <= MC_REREAD_ROWS[1] and b_bytes >= MC_REREAD_B_BYTES
        b_shared = g.cluster_m if b_bytes > r.l2_fit_bytes or rereads else 1
        panel_bytes = (BM + BN / b_shared) * (g.K / (g.splits * g.k_groups)) * isz
        if rereads and b_bytes <= r.l2_fit_bytes and b_shared > 1:  # the L2 feeds the class rate; the pair reads less
            compute *= MC_PAIR_COMPUTE_SHARE
        panel = load * panel_bytes / r.sm_bytes_per_s * self.split_factor(spec, g)
        if role.l2_panel:
            panel = max(panel, tiles * panel_bytes / r.l2_bytes_per_s)
        # a multicast pair's cluster launch and barriers: ~1 us measured (H100, fp16, 512^3 and 1024^3: 8.1 -> 9.3
        # and 12.4 -> 13.3 us with the pairs)
        epilogue = r.cluster_launch_us * 1e-6 if g.cluster_m > 1 else 0.0
        latency = r.cluster_launch_us if g.splits > 1 else 0.0
        if role.fp32_tile_epilogue:  # fp32 tile through shared memory
            tile_bytes = BM * BN * 4
            epilogue += load * (tile_bytes / r.smem_bytes_per_s +
                               (tile_bytes / r.dsmem_bytes_per_s if g.splits > 1 else 0.0))
            latency += r.strided_tile_latency_us * BM * BN / (128 * 128)
            if smem_split(spec) and g.splits > 2:
                epilogue += load * SMEM_SPLIT_SUM_US * 1e-6 * (g.splits - 2) * BM * BN / (128 * 128)
            if g.c.cs != 1 and g.c.rows > 1 and r.strided_c_column_bytes_per_s:  # one element a store, row by row
                epilogue += c_bytes / r.strided_c_column_bytes_per_s
        if g.k_deferred:  # each CTA writes its sums to its group's plane; a GroupSum step adds them (group_sum_us)
            epilogue += r.k_sum_publish_us * 1e-6
        elif g.k_groups > 1:  # every CTA publishes its rows of the tile; the last group's sums them all from L2,
            # each consumer thread BN / (8 splits) quads over the groups, KG_SUM_LOADS loads in flight
            rounds = g.k_groups * math.ceil(BN / (8 * g.splits)) / KG_SUM_LOADS
            epilogue += (r.k_groups_fixup_us + rounds * r.k_groups_sum_round_us) * 1e-6
        if role.reads_c_old and g.applies_alpha_beta and not beta_zero:
            epilogue = c_bytes / r.fused_c_read_bytes_per_s
        if g.ctas:  # stream-K: the pieces' partial tiles published, waited for and added by the owners
            epilogue += self._streamk_fixup_us(spec, g) * 1e-6
        variant = dict(g.variant)
        scale = QUEUE_SCALE[dynamic_order_pays(tiles, g.K, nb > 1, c_bytes)] if variant.get(QUEUE) == 1 else 1.0
        scale *= OCC2_SCALE[two_ctas_pay(g.K, nb > 1)] if variant.get(OCC) == 2 else 1.0
        compute, memory, panel, epilogue = (x * scale for x in (compute, memory, panel, epilogue))
        # a problem too small to keep the GPU busy costs the launch's latency instead
        return max((max(compute, memory, panel) + epilogue) * 1e6, latency)

    @staticmethod
    def _streamk_tiles(spec: KernelSpec, g: Gemm) -> tuple[int, int]:
        """(tiles, k-blocks per tile) of a stream-K launch."""
        return spec.output_tiles(g.M, g.N, g.swiglu) * math.prod(kernel_batch(g.batch)), math.ceil(g.K / spec.tile[2])

    def _streamk_blocks(self, spec: KernelSpec, g: Gemm) -> int:
        """The k-blocks of a stream-K launch's busiest CTA: its whole tiles, then its piece."""
        tiles, nk = self._streamk_tiles(spec, g)
        return (tiles - g.sk_tiles) // g.ctas * nk + math.ceil(nk / self._streamk_splits(spec, g))

    def _streamk_splits(self, spec: KernelSpec, g: Gemm) -> int:
        return streamk_splits(g.sk_tiles, g.ctas, self._streamk_tiles(spec, g)[1])

    def _streamk_fixup_us(self, spec: KernelSpec, g: Gemm) -> float:
        """What a stream-K launch takes beyond its k-blocks: the owners adding their peers' partials, or (more
        pieces) the peers sharing the sum first; 0 for any other launch."""
        if not g.ctas:
            return 0.0
        pieces = self._streamk_splits(spec, g)
        if pieces <= SK_SERIAL_PIECES:
            return self.rates.streamk_fixup_us + self.rates.streamk_fixup_piece_us * max(pieces - 2, 0)
        return self.rates.streamk_shared_fixup_us

    def _compute_s(self, spec: KernelSpec, g: Gemm) -> float:
        """Seconds of arithmetic of one GEMM launch: the tiles' work, wasted or not, at the class rate over
        the SMs its grid keeps busy (stream-K: the busiest CTA's k-blocks at the rate of one SM)."""
        BM, BN, _ = spec.tile
        if g.ctas:
            per_sm = self.kernel_tflops(spec) * 1e12 / self.sm_count
            return 2.0 * BM * BN * spec.tile[2] * self._streamk_blocks(spec, g) / per_sm
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
        return sum(1e6 * self._compute_s(spec, s) + self._streamk_fixup_us(spec, s)
                   for spec, s in specs if gemm_handler(spec.role).in_compute_tie)

    def split_factor(self, spec: KernelSpec, g: Gemm) -> float:
        """How much slower than its rate a split-K launch runs: its role's rule (GemmRole.split_factor: the
        smem_split kernels'), else for the roles whose split launches slow with short K slices
        (GemmRole.split_k_slowdown; the mma.sync kernels' splits measured alike, docs/dev/cost_model.md#split-k)
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
