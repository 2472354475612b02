"""gemm_fused_wgmma: the persistent Hopper kernels with the fused epilogue (cu/matmul_sm90_fused.cu): a static tile
order or the tile queue (`queue`), stream-K (kernels with `i32:sk_tiles`: a grid of `ctas` CTAs cutting the last
tiles along K), C through its TMA map or its pointer, and the grouped GEMMs of grouped_matmul (kernels with
`ptr:group`): one launch over every expert's tiles. Grouped GEMM is this role, not one of its own: the same
kernels, the same launch and epilogue, only the group table (`Grouped` options) added."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..dtypes import ITEMSIZE
from ..manifest import KernelSpec
from ..problem import Gemm, Problem, Recipe, Route, View, kernel_batch
from .base import RoleOptions, RouteContext
from .glue import Glue, c_by_pointer, prod
from .tma_gemm import K_GROUPS, QUEUE, TmaGemmRole

# Stream-K (StreamK in cu/common/sm90_gemm.cuh): the workspace's int32 flags and counters (kSkFlagSlots) and one fp32
# partial tile per CTA (two consumers of 64 x 256 each)
SK_FLAG_BYTES = 2048 * 4
SK_PART_BYTES = 128 * 256 * 4
SK_MAX_CTAS = 512  # the flags' slots, two per CTA
# only behind at most this many waves of whole tiles (docs/dev/planner.md#stream-k-waves) ...
SK_MAX_WAVES = 4
SK_MAX_SPLITS = SK_MAX_CTAS  # ... and with at most this many pieces a tile: one per CTA
SK_MAX_BLOCKS = 2**31 - 1  # the kernel cuts K at j x k-blocks / pieces in 32 bits
# Tiles of at most this many pieces: the owner adds its peers' partials itself; more: every piece sums and stores
# its share of the tile (kSkSerialPieces in cu/common/sm90_gemm.cuh)
SK_SERIAL_PIECES = 4
GROUP_MODES = {"contiguous": 1, "masked": 2}  # the kernels' i32:group_mode by Problem.group (0: not grouped)


@dataclass(frozen=True)
class Fused(RoleOptions):
    """`c_unmapped`: C off TMA's rules, stored through ptr:C (no tmap:C; cu/CONTRACT.md); stream-K: its grid
    (`ctas`) and how many of the last tiles it cuts along K (`sk_tiles`), its workspace in Gemm.work; grouped
    GEMM: the kernels' group mode (GROUP_MODES) and the group count (the batch is the experts)."""

    c_unmapped: bool = False
    ctas: int = 0
    sk_tiles: int = 0
    group: int = 0
    groups: int = 0


def streamk(spec: KernelSpec) -> bool:
    """A stream-K kernel: its grid and stream-K tiles are the recipe's, and it takes a workspace."""
    return spec.role == FusedWgmma.name and "i32:sk_tiles" in spec.params


def streamk_splits(sk_tiles: int, ctas: int, k_blocks: int) -> int:
    """The pieces each stream-K tile is cut into (cu/common/sm90_gemm.cuh, sk_config): one per CTA, at least a
    k-block each."""
    return max(min(ctas // sk_tiles, k_blocks), 1)


def streamk_tiles(tiles: int, ctas: int) -> int:
    """How many of the last tiles a stream-K launch of `ctas` CTAs cuts into pieces along K: the last partial
    wave (all of them where there are fewer tiles than CTAs); 0 where that would not cut them in two at least
    (whole waves, or a last wave of more than half the CTAs) or where more than SK_MAX_WAVES whole waves come
    before it: the plain persistent kernel runs those."""
    sk = tiles % ctas
    return sk if sk and ctas // sk >= 2 and tiles // ctas <= SK_MAX_WAVES else 0


def streamk_grids(tiles: int, k_blocks: int, sm_count: int) -> list[int]:
    """The grids a stream-K route is offered with: one CTA per SM (at most SK_MAX_CTAS), and where there are fewer
    tiles than SMs, as many CTAs as cut each tile into the most pieces allowed (SK_MAX_SPLITS, a k-block each)."""
    sms = min(sm_count, SK_MAX_CTAS)
    out = [sms]
    if tiles < sms:
        g = tiles * min(sms // tiles, k_blocks, SK_MAX_SPLITS)
        if g not in out:
            out.append(g)
    return out


def grouped_kernel(manifest: Any, dtype: str, layout: str) -> KernelSpec | None:
    """The build's grouped GEMM kernel for `dtype` with B as `layout` (NN: K x N, TN: N x K), the first declared."""
    for spec in manifest.kernels.values():
        if spec.role == FusedWgmma.name and spec.dtype == dtype and spec.layout == layout and \
                "ptr:group" in spec.params:
            return spec
    return None


def grouped_layout(b: View) -> str:
    """How a grouped problem's B (K x N per expert) lies: row-major ("NN") or as an (E, N, K) weight ("TN");
    a single column (N = 1) is read as one row of the TN kernel's (the same bytes either way)."""
    return "NN" if b.cs == 1 and not (b.cols == 1 and b.rows > 1) else "TN"


class FusedWgmma(TmaGemmRole):
    name = "gemm_fused_wgmma"
    reads_c_old = True
    serves_groups = True

    def routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext) -> list[Route]:
        if prob.group:  # grouped_matmul: the first grouped kernel of the dtype and B's layout
            first = grouped_kernel(ctx.manifest, prob.dtype, grouped_layout(prob.b))
            return [Route(spec.name)] if first is not None and first.name == spec.name else []
        if streamk(spec):  # its grid: see streamk_grids
            out = []
            for t in (False, True):
                M, N = (prob.N, prob.M) if t else (prob.M, prob.N)
                tiles = spec.output_tiles(M, N, prob.swiglu) * ctx.batch
                grids = streamk_grids(tiles, -(-prob.K // spec.tile[2]), ctx.sm_count) if ctx.sm_count else []
                out += [Route(spec.name, t, (("ctas", g),)) for g in grids]
            return out
        # persistent: no split-K; the static order, or the tile queue
        orders = [()] + ([((QUEUE, 1),)] if 1 in spec.variants.get(QUEUE, ()) else [])
        return [Route(spec.name, t, order) for t in (False, True) for order in orders]

    def c_unmapped(self, p: Problem, spec: KernelSpec, opts: dict, isz: int) -> bool | None:
        # C through a TMA store, which writes whole 16-byte runs: C's width must end on one (else the store zeroes
        # the padding columns after it). Any other C with contiguous rows goes through ptr:C.
        if "splits" in opts or ("ctas" in opts) != streamk(spec):
            return None
        unmapped = c_by_pointer(p.c, isz)
        if unmapped and not (p.c.cs == 1 and (p.c.rows == 1 or p.c.rs >= p.c.cols)):
            return None
        return unmapped

    def default_options(self, c_unmapped: bool) -> object:
        return Fused(c_unmapped) if c_unmapped else None

    def with_options(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict,
                     g: Gemm) -> Recipe | None:
        if K_GROUPS in opts:
            return None
        if not streamk(spec):
            return self.queued(route, spec, glue, opts, g)
        ctas = int(opts["ctas"])
        tiles = spec.output_tiles(p.M, p.c.cols, p.swiglu) * prod(p.kernel_batch)
        nk = -(-p.K // spec.tile[2])
        sk = streamk_tiles(tiles, ctas) if 1 <= ctas <= SK_MAX_CTAS else 0
        pieces = streamk_splits(sk, ctas, nk) if sk else 0
        if not 2 <= pieces <= SK_MAX_SPLITS or pieces * nk > SK_MAX_BLOCKS:
            return None  # nothing to cut (the plain fused kernel), a tile of one k-block, or too many pieces
        work = glue.temp("tW", SK_FLAG_BYTES + ctas * SK_PART_BYTES)
        return glue.recipe(route, replace(g, options=Fused(g.c_unmapped, ctas, sk), work=work))

    def grouped_recipe(self, route: Route, p: Problem, spec: KernelSpec) -> Recipe | None:
        """grouped_matmul's one launch over every expert (p.batch = (experts,)), the whole epilogue in the kernel."""
        if route.transpose or route.options or "ptr:group" not in spec.params or spec.dtype != p.dtype:
            return None
        b = p.b if spec.layout == "NN" else p.b.T
        options = Fused(c_by_pointer(p.c, ITEMSIZE[p.dtype]), group=GROUP_MODES[p.group], groups=p.batch[0])
        g = Gemm(spec.name, spec.role, p.a, b, p.c, p.M, p.c.cols, p.K, applies_alpha_beta=True, batch=p.batch,
                 epi=p.epi, options=options)
        return Recipe(route, (), (g,))

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return model.rates.fused_wgmma_tflops

    @staticmethod
    def _streamk_tiles(spec: KernelSpec, g: Gemm) -> tuple[int, int]:
        """(tiles, k-blocks per tile) of a stream-K launch."""
        return spec.output_tiles(g.M, g.N, g.swiglu) * prod(kernel_batch(g.batch)), math.ceil(g.K / spec.tile[2])

    def streamk_blocks(self, spec: KernelSpec, g: Gemm) -> int:
        """The k-blocks of a stream-K launch's busiest CTA: its whole tiles, then its piece."""
        tiles, nk = self._streamk_tiles(spec, g)
        return (tiles - g.sk_tiles) // g.ctas * nk + math.ceil(nk / streamk_splits(g.sk_tiles, g.ctas, nk))

    def busiest_load(self, model: Any, spec: KernelSpec, g: Gemm, ctas: int) -> float:
        if not g.ctas:
            return super().busiest_load(model, spec, g, ctas)
        return self.streamk_blocks(spec, g) / math.ceil(g.K / spec.tile[2])  # the busiest CTA's tiles and piece

    def compute_s(self, model: Any, spec: KernelSpec, g: Gemm) -> float | None:
        """Stream-K: the busiest CTA's k-blocks at the rate of one SM."""
        if not g.ctas:
            return None
        BM, BN, BK = spec.tile
        per_sm = model.kernel_tflops(spec) * 1e12 / model.sm_count
        return 2.0 * BM * BN * BK * self.streamk_blocks(spec, g) / per_sm

    def fixup_us(self, model: Any, spec: KernelSpec, g: Gemm) -> float:
        """What a stream-K launch takes beyond its k-blocks: the owners adding their peers' partials, or (more
        pieces) the peers sharing the sum first; 0 for any other launch."""
        if not g.ctas:
            return 0.0
        pieces = streamk_splits(g.sk_tiles, g.ctas, self._streamk_tiles(spec, g)[1])
        r = model.rates
        if pieces <= SK_SERIAL_PIECES:
            return r.streamk_fixup_us + r.streamk_fixup_piece_us * max(pieces - 2, 0)
        return r.streamk_shared_fixup_us

    def grid(self, cfg: Any, spec: KernelSpec, dev: Any, step: Gemm, matrices: int) -> tuple:
        """Persistent over every matrix's tiles: one CTA per SM at most (stream-K: the recipe's grid), the batch in
        the tile schedule, not on grid.z."""
        tiles = spec.output_tiles(step.M, step.N, step.swiglu) * matrices
        ctas = step.ctas or min(tiles, dev.info.sm_count)
        if ctas > dev.info.sm_count:
            raise ValueError(f"{spec.name}: a stream-K grid of {ctas} CTAs on {dev.info.sm_count} SMs: its CTAs "
                             "wait on each other, so all must be resident")
        return replace(cfg, grid=(ctas, 1, 1)), 1

    def option_scalars(self, g: Gemm) -> dict[str, int]:
        return {**super().option_scalars(g), "group_mode": g.group, "groups": g.groups, "sk_tiles": g.sk_tiles}

    def describe(self, g: Gemm) -> str:
        extra = f" stream-K {g.sk_tiles} tiles over {g.ctas} CTAs" if g.ctas else ""
        extra += " dynamic tile order" if dict(g.variant).get(QUEUE) == 1 else ""
        return extra + (" C by pointer" if g.c_unmapped else "")


__all__ = ["Fused", "FusedWgmma", "GROUP_MODES", "streamk", "streamk_grids", "streamk_splits",
           "streamk_tiles", "grouped_kernel", "grouped_layout"]
