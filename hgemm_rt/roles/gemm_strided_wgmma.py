"""gemm_strided_wgmma: the Hopper wgmma kernels on A and B through TMA maps, with split-K in clusters, B multicast
(`mc`), two CTAs an SM (`occ`) and K groups (`k_groups`: clusters of one tile along grid.z, each on its own share
of K, the last adding the others' sums from a workspace, or with `k_sum` a sum launch after it). On fp32 at fp32
accuracy (acc "f32") they are 3xTF32 with the split in shared memory (`smem_split`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..manifest import KernelSpec
from ..problem import Gemm, GroupSum, Problem, Recipe, Route
from .base import RoleOptions, RouteContext
from .glue import Glue, kernel_of_role, round_up
from .kgroups_sum import GroupSumRole
from .splitk import SplitKRole
from .tma_gemm import K_GROUPS, K_SUM, TmaGemmRole

# K groups: offered unbatched and unicast to the fp16/bf16 kernels of KG_TILE_ROWS x at most KG_TILE_COLS tiles (not
# the token-width ones), where C fills a tile, with the group counts that fill a wave and a share of at least
# KG_MIN_BLOCKS k-blocks per CTA; deferred (k_sum) unclustered, without SwiGLU, on the tallest tile C fills
# (docs/dev/planner.md#k-groups)
KG_DTYPES = ("f16", "bf16")
KG_TILE_ROWS, KG_TILE_COLS = 128, 128
KG_MIN_BLOCKS = 4
KG_MAX = 512
KG_COUNT_ALIGN = 256  # bytes: the fp32 partials follow the int32 counts (tiles x splits) at this alignment
KG_SUM_MIN_BLOCKS = 2  # (no group waits on another: short shares cost only their launch, which the model prices)
# A smem_split kernel's split-K slice: its cost beyond its K at the kernel's rate (fill, the first stage's split, the
# cluster's DSMEM sum), and per piece beyond two the sum of a 128 x 128 fp32 tile (docs/dev/cost_model.md#smem-split)
SMEM_SPLIT_FIXED_US = 5.5
KG_SUM_LOADS = 4  # the K groups' sum: L2 loads in flight per thread (cu/matmul_sm90.cu, kgroups_fixup's unroll)
K_GROUPS_DEFERRED = 1 << 16  # i32:k_groups's bit of a deferred launch (cu/matmul_sm90.cu, kKgDeferred)
SMEM_SPLIT_SUM_US = 0.6
# Tile widths offered whole-K launches only: split, they lose to the 64/128-wide tiles the model ranks below them
# (docs/dev/tuning_log.md#the-128-x-112-and-128-x-96-tiles-session-33-h200)
UNSPLIT_TILE_COLS = (112, 96)
# The token-width tiles (cu/matmul_sm90.cu, kTokenN: at most TOKEN_TILE_COLS columns), decode run as C^T = B^T A^T
# with the weights as A: where the tokens fit one tile's width, each CTA streams its panel of A once through an 11-13
# stage ring, at ArchRates.token_tile_dram_bytes_per_s
TOKEN_TILE_COLS = 32
SECTOR_BYTES = 32


@dataclass(frozen=True)
class KGroups(RoleOptions):
    """K groups: `k_groups` clusters of a tile along grid.z; `k_deferred`: each group's sums to a plane of the
    workspace (Gemm.work), added by a kgroups_sum step."""

    k_groups: int = 1
    k_deferred: bool = False


def k_groups_offered(tiles: int, splits: int, k_blocks: int, sm_count: int, wave: int,
                     min_blocks: int = KG_MIN_BLOCKS) -> list[int]:
    """The K-group counts offered to a launch of `tiles` tiles split `splits` ways: as many groups as fill the SMs
    (sm_count) and as fill the wave that clusters of `splits` get (wave, the cost model's cta_slots), each at
    least 2 and leaving every CTA `min_blocks` k-blocks."""
    out = []
    for slots in (sm_count, wave):
        g = min(slots // (tiles * splits), k_blocks // (splits * min_blocks), KG_MAX)
        if g >= 2 and g not in out:
            out.append(g)
    return out


def k_groups_work_bytes(tiles: int, splits: int, groups: int, tile: tuple[int, int]) -> int:
    """The K groups' workspace: the int32 counts, then every group's fp32 partial of every tile."""
    return round_up(tiles * splits * 4, KG_COUNT_ALIGN) + tiles * groups * tile[0] * tile[1] * 4


def k_sum_work_bytes(M: int, N: int, groups: int) -> int:
    """Deferred K groups' workspace: a fp32 plane of M rows of N rounded up to 4 columns per group."""
    return groups * M * round_up(N, 4) * 4


def smem_split(spec: KernelSpec) -> bool:
    """A gemm_strided_wgmma kernel at fp32 accuracy on fp32 operands (acc "f32"): 3xTF32 whose split into heads and
    residuals happens in shared memory (the gemm_tf32x3s kernels), not in a copy step before it."""
    return spec.role == StridedWgmma.name and spec.dtype == "f32" and spec.acc == "f32"


def token_tile(spec: KernelSpec) -> bool:
    """A gemm_strided_wgmma kernel of a token-width tile (at most TOKEN_TILE_COLS columns: the decode tiles)."""
    return spec.role == StridedWgmma.name and spec.tile[1] <= TOKEN_TILE_COLS


def streams_a_once(spec: KernelSpec, g: Gemm) -> bool:
    """A token-width tile's launch whose N fits one tile's width: no two CTAs read a panel of A."""
    return token_tile(spec) and g.N <= spec.tile[1]


def c_column_run(spec: KernelSpec, isz: int) -> int:
    """How many elements down one of C's columns a launch's stores write together, where C's columns are contiguous
    (the transposed C of C^T = B^T A^T): whole sectors for a token-width tile (cu/matmul_sm90.cu, store_pass_columns:
    8 rows a thread, a warp 128 rows of a column), one for the others (their warps store along a row of the tile, as
    costmodel's strided_c_column_bytes_per_s was measured)."""
    return SECTOR_BYTES // isz if token_tile(spec) else 1


def strided_wgmma_rate(spec: KernelSpec) -> float:
    """The kernel's sustained TFLOPS as measured and declared in its toml (`rate_tflops`, with `rate_source`: the
    manifest refuses a gemm_strided_wgmma kernel without one). TF32 and 3xTF32 kernels declare their own rate."""
    return spec.rate_tflops


class StridedWgmma(SplitKRole, TmaGemmRole):
    name = "gemm_strided_wgmma"
    pairs_swiglu = False  # (m64n128 nn, 233 x 92 x 115, beta != 0 stopped with an illegal instruction: not used)
    one_cta_per_sm = True  # its ring fills the shared memory
    fp32_tile_epilogue = True
    l2_panel = True

    def splits_k(self, spec: KernelSpec) -> bool:
        return spec.tile[1] not in UNSPLIT_TILE_COLS

    def k_group_routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext, transpose: bool,
                       splits: int) -> list[Route]:
        if not (spec.dtype in KG_DTYPES and spec.tile[0] <= KG_TILE_ROWS and spec.tile[1] <= KG_TILE_COLS and
                ctx.sm_count and not prob.batched and ctx.cc >= (9, 0)) or token_tile(spec):
            return []  # (the token-width tiles: decode's thousands of rows fill the SMs; K groups unmeasured there)
        out = []
        M, N = (prob.N, prob.M) if transpose else (prob.M, prob.N)
        tiles = spec.output_tiles(M, N, prob.swiglu)
        full = M >= spec.tile[0] and N >= spec.tile[1]
        k_blocks = -(-prob.K // spec.tile[2])
        for g in k_groups_offered(tiles, splits, k_blocks, ctx.sm_count, ctx.model.cta_slots(spec, splits)) \
                if full and spec.tile[0] == KG_TILE_ROWS else ():
            out.append(Route(spec.name, transpose, ((K_GROUPS, g), ("splits", splits))))
        # deferred: the groups that fill the SMs, on the tallest tile C fills
        tall = spec.tile[0] == (KG_TILE_ROWS if M >= KG_TILE_ROWS else KG_TILE_ROWS // 2)
        if splits == 1 and full and tall and not prob.swiglu:
            for g in k_groups_offered(tiles, 1, k_blocks, ctx.sm_count, ctx.sm_count, KG_SUM_MIN_BLOCKS):
                out.append(Route(spec.name, transpose, ((K_GROUPS, g), (K_SUM, 1), ("splits", 1))))
        return out

    def with_options(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict,
                     g: Gemm) -> Recipe | None:
        if K_GROUPS in opts:
            groups, splits = opts[K_GROUPS], g.splits
            if p.batched or g.cluster_m != 1 or not isinstance(groups, int) or not 2 <= groups <= KG_MAX:
                return None
            if opts.get(K_SUM):  # the GEMM's plain sums per group, then the sum launch with the epilogue
                summer = kernel_of_role(glue.manifest, p.dtype, GroupSumRole.name)
                if summer is None or splits != 1:
                    return None
                work = glue.temp("tW", k_sum_work_bytes(p.M, p.c.cols, groups))
                g = replace(g, options=KGroups(groups, True), work=work, applies_alpha_beta=False, epi=None, bias=None)
                return glue.recipe(route, g, GroupSum(summer, work, p.c, p.M, p.c.cols, groups, epi=p.epi,
                                                      bias=p.bias))
            nbytes = k_groups_work_bytes(spec.output_tiles(p.M, p.c.cols, p.swiglu), splits, groups, spec.tile[:2])
            g = replace(g, options=KGroups(groups), work=glue.temp("tW", nbytes))
        return self.queued(route, spec, glue, opts, g)

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return strided_wgmma_rate(spec)

    def dram_bytes_per_s(self, model: Any, spec: KernelSpec, g: Gemm, ctas: int) -> float:
        """Token-width tiles one wide: what their deep rings stream A at; K groups: what the CTAs of one wave stream
        (deferred: nobody waiting on another) from DRAM at."""
        r = model.rates
        if g.k_groups == 1:
            return r.token_tile_dram_bytes_per_s if streams_a_once(spec, g) and r.token_tile_dram_bytes_per_s \
                else r.dram_bytes_per_s
        wave = min(ctas, model.cta_slots(spec, g.splits))
        if g.k_deferred:
            return min(r.k_sum_dram_bytes_per_s, wave * r.k_sum_cta_bytes_per_s)
        return min(r.k_groups_dram_bytes_per_s, wave * r.k_groups_cta_bytes_per_s)

    def pieces_sum_s(self, model: Any, spec: KernelSpec, g: Gemm) -> float:
        """Deferred: each CTA writes its sums to its group's plane (a GroupSum step adds them). Else every CTA publishes
        its rows of the tile and the last group's sums them all from L2, each consumer thread BN / (8 splits) quads
        over the groups, KG_SUM_LOADS loads in flight."""
        r = model.rates
        if g.k_deferred:
            return r.k_sum_publish_us * 1e-6
        if g.k_groups == 1:
            return 0.0
        rounds = g.k_groups * math.ceil(spec.tile[1] / (8 * g.splits)) / KG_SUM_LOADS
        return (r.k_groups_fixup_us + rounds * r.k_groups_sum_round_us) * 1e-6

    def split_factor(self, model: Any, spec: KernelSpec, g: Gemm) -> float | None:
        """A smem_split kernel's slice costs SMEM_SPLIT_FIXED_US more than its share of K at its rate, uncapped: the
        K that its CTA computes in that time is the short K; unsplit too, where the grid is one wave."""
        pieces = g.splits * g.k_groups
        if smem_split(spec) and (pieces > 1 or model.grid_ctas(spec, g) <= model.cta_slots(spec, 1)):
            cta_flops_per_s = model.kernel_tflops(spec) * 1e12 / model.sm_count
            short_k = SMEM_SPLIT_FIXED_US * 1e-6 * cta_flops_per_s / (2.0 * spec.tile[0] * spec.tile[1])
            return 1.0 + short_k / (g.K / pieces)
        return None

    def option_scalars(self, g: Gemm) -> dict[str, int]:
        return {**super().option_scalars(g), "k_groups": g.k_groups | (K_GROUPS_DEFERRED if g.k_deferred else 0)}

    def describe(self, g: Gemm) -> str:
        return (f" k_groups={g.k_groups}" if g.k_groups > 1 else "") + (" deferred" if g.k_deferred else "")
