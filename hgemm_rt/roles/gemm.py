"""gemm: the catalogue kernels with the default ABI (dense operands implied by M, N, K) or TMA maps, no batch;
the copy kernel applies what they do not (alpha/beta, strides they cannot store, the fused epilogue)."""
from __future__ import annotations

from typing import Any

from ..launcher import default_swizzle_stride
from ..manifest import KernelSpec
from ..problem import Copy, Gemm, Problem, Recipe, Route, Temp, View
from .base import GemmRole, RouteContext
from .glue import PACK, Glue, Repack, acc_variant, dense, fits, rounds_before_activation, round_up, tmap_operands

HOPPER_TILE_COLS = 256  # the Hopper catalogue's tile width (its 128 x 192 kernels are "narrow": hopper_bonus)
ODD_N_DIRECT_STORE = 0.85  # direct-store epilogues fall back to element stores when N is odd (4095^3)
# The TMA-store kernels' `stages` at 3 stage the whole output tile for the store: where a tile is a single k-block
# (the ring's depth buys nothing) or the launch is long (docs/dev/planner.md#whole-tile-staging)
STAGES, WHOLE_TILE_STAGES = "stages", 3
LONG_LAUNCH_MACS = 2**39


def narrow_hopper(spec: KernelSpec) -> bool:
    """One of the catalogue's 128 x 192 Hopper kernels (narrower than the ladder's 128 x 256 tile)."""
    return spec.ladder == "hopper" and spec.tile[1] < HOPPER_TILE_COLS


def whole_tile_staging(spec: KernelSpec, prob: Problem) -> bool:
    """Does `spec` run `prob` with whole-tile staging (its `stages` variant at 3): a single k-block, or a launch of
    at least LONG_LAUNCH_MACS multiply-adds?"""
    return WHOLE_TILE_STAGES in spec.variants.get(STAGES, ()) and (
        prob.K <= spec.tile[2] or prob.M * prob.N * prob.K >= LONG_LAUNCH_MACS)


class Catalogue(GemmRole):
    name = "gemm"
    takes_batch = False  # the catalogue ABI has no batch
    packs = True
    fuses_epilogue = False
    acc_in_recipe = True
    c_store = "direct"  # stores 4-byte pairs from registers (without a TMA map)

    def accepts_splits(self, splits: int) -> bool:
        return True  # (a `splits` the kernel has no variant for is refused with the other unknown options)

    def routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext) -> list[Route]:
        if prob.batched or spec.out != prob.dtype or acc_variant(spec, prob.dtype, prob.acc) is False:
            return []
        opts = ((STAGES, WHOLE_TILE_STAGES),) if whole_tile_staging(spec, prob) else ()
        out = []
        for t in (False, True):
            # the 128 x 192 kernels are for the wave fill of wide outputs; narrower than the tile, the matmul kernels'
            # tiles fill it better (as ranked_recipes' tile-fill rule has it for 256-wide ones). A kernel the caller
            # names runs wherever it can.
            if ctx.kernel is None and narrow_hopper(spec) and (prob.M if t else prob.N) < spec.tile[1]:
                continue
            out.append(Route(spec.name, t, opts))
        return out

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return model.ladder_tflops(spec)

    def rate_factor(self, spec: KernelSpec, g: Gemm) -> float:
        return ODD_N_DIRECT_STORE if "ptr:C" in spec.params and g.N % 2 else 1.0

    def recipe(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict) -> Recipe | None:
        """Operands in place where the kernel's ABI takes them (dense, or TMA-mappable; divisibility `require`),
        else padded copies; C in place for a plain linear problem it can store, else a temporary and the copy."""
        isz, M, N, K = glue.isz, p.M, p.N, p.K
        repack = Repack(opts, isz)
        rq = spec.require
        Mk, Nk, Kk = round_up(M, rq.get("M", 1)), round_up(N, rq.get("N", 1)), round_up(K, rq.get("K", 1))
        tm = tmap_operands(spec)
        a = self._operand(glue, repack, p.a, "A", Kk, Mk, tm, spec) if spec.a_order == "col" else \
            self._operand(glue, repack, p.a, "A", Mk, Kk, tm, spec)
        if spec.layout == "NN":
            b = self._operand(glue, repack, p.b, "B", Kk, Nk, tm, spec)
        else:  # TN: the kernel reads B^T, N x K row-major
            b = self._operand(glue, repack, p.b.T, "B", Nk, Kk, tm, spec)
        if repack.idle():
            return None  # (nothing to pack: the plain route)
        c = p.c
        direct = p.plain and p.linear and fits(c, Mk, Nk, tma="C" in tm, align=spec.align, itemsize=isz) and \
            spec.out == p.dtype
        if not direct:
            if glue.copier is None or rounds_before_activation(p):
                return None
            glue.temps.append(Temp("tC", Mk, Nk))
            c = dense("tC", Mk, Nk)
        given = {k: v for k, v in opts.items() if k in spec.variants}
        av = acc_variant(spec, p.dtype, p.acc)  # the precision rule holds whatever a route asks for
        if set(opts) - set(spec.variants) - {PACK} or av is False:
            return None
        if "acc" in spec.variants:
            given["acc"] = av
        try:
            variant = spec.resolve_variant(given)  # the one default rule: declared `default`, else the first value
        except ValueError:
            return None
        swz, stride = False, None
        if spec.grid == "tiles+swizzle":
            stride = default_swizzle_stride(Nk)
            swz = bool(stride) and stride % spec.tile[1] == 0
            stride = stride if swz else None
        glue.steps.append(Gemm(route.kernel, spec.role, a, b, c, Mk, Nk, Kk, variant=tuple(variant.items()),
                               swizzle=swz, swizzle_stride=stride))
        if not direct:
            src = View.make("tC", M, N, Nk, 1, 256)
            glue.steps.append(Copy(glue.copier, src, p.c, M, N, applies_alpha_beta=True, epi=p.epi, bias=p.bias))
            glue.copy_bytes += (2 * M * N + (0 if p.beta_zero else M * N)) * isz
        return glue.recipe(route)

    @staticmethod
    def _operand(glue: Glue, repack: Repack, v: View, name: str, rows: int, cols: int, tm: set,
                 spec: KernelSpec) -> View:
        """`v` as the kernel reads it (rows x cols row-major; A^T for a column-major A, seen back as A), in place
        where its ABI takes it, else a padded copy."""
        tma = name in tm
        seen = v.T if name == "A" and spec.a_order == "col" else v
        if not fits(seen, rows, cols, tma=tma, align=spec.align, itemsize=glue.isz) or (tma and repack.slow(seen)):
            packed = glue.pack("t" + name, seen, rows, cols, tma=tma)
            return packed.T if seen is not v else packed
        return v
