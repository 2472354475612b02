"""The Hopper roles whose kernels read A and B through TMA maps (gemm_strided_wgmma, gemm_fused_wgmma): their
shared recipe, each role adding its own options (K groups; stream-K, the tile queue)."""
from __future__ import annotations

from dataclasses import replace

from ..manifest import KernelSpec
from ..problem import Gemm, Problem, Recipe, Route
from .base import OCC, GemmRole
from .glue import Glue, Repack, tma_operands

QUEUE = "queue"  # the variant axis of the fused kernels' tile queue (1; TileQueue in cu/common/sm90_gemm.cuh)
K_GROUPS = "k_groups"  # route option: K groups (gemm_strided_wgmma)
K_SUM = "k_sum"  # route option: ... deferred to a sum launch


class TmaGemmRole(GemmRole):
    packs = True

    def recipe(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict) -> Recipe | None:
        repack = Repack(opts, glue.isz)
        ab = tma_operands(p, spec, glue, repack)
        if ab is None or repack.idle():
            return None  # (an NN kernel would need B packed; or nothing to pack: the plain route)
        unmapped = self.c_unmapped(p, spec, opts, glue.isz)
        if unmapped is None:
            return None
        mc, occ = int(opts.get("mc", 1)), int(opts.get(OCC, 1))
        variant = (("mc", mc),) * (mc != 1) + ((OCC, occ),) * (occ != 1)
        # (SwiGLU: the kernel's N is C's width, half of B's)
        g = Gemm(route.kernel, spec.role, ab[0], ab[1], p.c, p.M, p.c.cols, p.K, variant=variant,
                 splits=int(opts.get("splits", 1)), options=self.default_options(unmapped), **self.whole_epilogue(p))
        if opts.get(K_SUM) and K_GROUPS not in opts:
            return None  # (a sum of no groups)
        return self.with_options(route, p, spec, glue, opts, g)

    def c_unmapped(self, p: Problem, spec: KernelSpec, opts: dict, isz: int) -> bool | None:
        """Whether C goes without a TMA map (through ptr:C); None where the role cannot store it."""
        return False

    def default_options(self, c_unmapped: bool) -> object:
        return None

    def with_options(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict,
                     g: Gemm) -> Recipe | None:
        """The recipe of `g` with the role's own route options applied (the tile queue: shared)."""
        if K_GROUPS in opts:
            return None
        return self.queued(route, spec, glue, opts, g)

    @staticmethod
    def queued(route: Route, spec: KernelSpec, glue: Glue, opts: dict, g: Gemm) -> Recipe | None:
        if QUEUE in opts:  # the tile queue, with its counter (the dynamic order): one int32, zeroed once
            if opts[QUEUE] != 1 or 1 not in spec.variants.get(QUEUE, ()):
                return None
            g = replace(g, variant=g.variant + ((QUEUE, 1),), work=glue.temp("tQ", 4))
        return glue.recipe(route, g)
