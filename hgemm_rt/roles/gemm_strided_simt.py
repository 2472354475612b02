"""gemm_strided_simt: the SIMT fallback on any strides (every dtype, every architecture); nothing to transpose."""
from __future__ import annotations

from typing import Any

from ..manifest import KernelSpec
from ..problem import Gemm, Problem, Recipe, Route
from .base import GemmRole, RouteContext
from .glue import Glue


class StridedSimt(GemmRole):
    name = "gemm_strided_simt"

    def routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext) -> list[Route]:
        return [Route(spec.name)]

    def recipe(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict) -> Recipe | None:
        if route.transpose:
            return None  # strides are general: transposing buys nothing
        g = Gemm(route.kernel, spec.role, p.a, p.b, p.c, p.M, p.N, p.K, **self.whole_epilogue(p))
        return glue.recipe(route, g)

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return model.rates.simt_tflops.get(spec.dtype, 6.0)
