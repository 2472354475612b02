"""The roles whose kernels take A and B by pointer and leading dimension, B row- or column-major (the `b`
variant): their shared recipe."""
from __future__ import annotations

from ..manifest import KernelSpec
from ..problem import Gemm, Problem, Recipe, Route
from .glue import STRIDED_MMA_ALIGN, Glue, round_up
from .splitk import SplitKRole


def _leading_dim_ok(v, rows_or_cols: int, stride: int) -> bool:
    return v.align >= STRIDED_MMA_ALIGN and (rows_or_cols == 1 or stride % 8 == 0)


class LeadingDimRole(SplitKRole):
    def recipe(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict) -> Recipe | None:
        M, N, K = p.M, p.N, p.K
        a = p.a
        if not (a.cs == 1 and _leading_dim_ok(a, a.rows, a.rs)):
            a = glue.pack("tA", a, M, round_up(K, 8))
        b = p.b
        if b.cs == 1 and _leading_dim_ok(b, b.rows, b.rs):
            b_layout = "row"
        elif b.rs == 1 and _leading_dim_ok(b, b.cols, b.cs):
            b_layout = "col"
        else:
            b = glue.pack("tB", b.T, N, round_up(K, 8)).T  # N x K row-major, seen as K x N
            b_layout = "col"
        if b_layout not in spec.variants.get("b", ()):
            return None  # a kernel of the other B layout takes it
        g = Gemm(route.kernel, spec.role, a, b, p.c, M, N, K, variant=(("b", b_layout),),
                 splits=int(opts.get("splits", 1)), **self.whole_epilogue(p))
        return glue.recipe(route, g)
