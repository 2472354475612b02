"""The roles whose kernels take split-K (a cluster of CTAs along K, `splits`): their shared candidate routes."""
from __future__ import annotations

from typing import ClassVar

from ..manifest import KernelSpec
from ..problem import MAX_GRID_BATCH, Problem, Route
from .base import MULTICAST, OCC, GemmRole, RouteContext
from .glue import SPLITS, acc_variant


class SplitKRole(GemmRole):
    split_k = True
    split_k_slowdown: ClassVar[bool] = True

    def routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext) -> list[Route]:
        if acc_variant(spec, prob.dtype, prob.acc) is False:
            return []  # (a TF32 kernel for an fp32-accuracy request: the split products' roles are that)
        out = []
        splits_k = self.splits_k(spec)
        for t in (False, True):
            for s in SPLITS if splits_k else (1,):  # thread-block clusters are sm_90+; grid.z holds splits x batch
                if (s == 1 or ctx.cc >= (9, 0)) and s * ctx.batch <= MAX_GRID_BATCH:
                    out.append(Route(spec.name, t, (("splits", s),)))
                if splits_k:
                    out += self.k_group_routes(prob, spec, ctx, t, s)
            rows = prob.N if t else prob.M
            if MULTICAST in spec.variants.get("mc", ()) and ctx.cc >= (9, 0) and not prob.batched and \
                    -(-rows // spec.tile[0]) >= MULTICAST:
                out.append(Route(spec.name, t, (("mc", MULTICAST), ("splits", 1))))
            if 2 in spec.variants.get(OCC, ()):  # two CTAs an SM (the cost model knows where it pays)
                out.append(Route(spec.name, t, ((OCC, 2), ("splits", 1))))
        return out

    def splits_k(self, spec: KernelSpec) -> bool:
        """Whether `spec` is offered K split across CTAs (split-K, K groups), or only whole-K launches."""
        return True

    def k_group_routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext, transpose: bool,
                       splits: int) -> list[Route]:
        """The K-group routes of a split count (the roles whose kernels take K groups)."""
        return []
