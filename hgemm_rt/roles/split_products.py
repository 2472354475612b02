"""The split products (fp32 at fp32 accuracy as three tensor-core products of split operands, cu/matmul.cu): both
operands split by the format's kernel into head and residual planes, whatever their layout; the product reads
A's and B^T's planes through rank-4 TMA maps (`split_planes`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..manifest import KernelSpec
from ..problem import Gemm, Problem, Recipe, Route, SplitFormat, View, kernel_batch
from .base import RoleOptions
from .glue import Glue, batch_strides
from .splitk import SplitKRole


@dataclass(frozen=True)
class SplitShifts(RoleOptions):
    """A scaled format's exponents that the split scaled A's rows and B^T's rows by (the product takes them off)."""

    a_shift: View | None = None
    b_shift: View | None = None


def split_planes(view: View, rows: int, isz: int, batch: tuple[int, ...] = ()) -> tuple[tuple, tuple]:
    """(shape, byte strides) of a split product's operand's rank-4 TMA map: the split's planes (view: their
    stack, planes x rows rows of `view.cols` elements) as (matrices, planes, rows, cols), one stack per matrix of
    the kernel levels the operand varies on (1 unbatched)."""
    planes = view.rows // rows
    outer, inner = kernel_batch(batch)
    so, si = batch_strides(view, batch)
    matrices = (outer if so else 1) * (inner if si else 1)
    stack = planes * rows * view.rs * isz
    return (matrices, planes, rows, view.cols), (stack, rows * view.rs * isz, view.rs * isz, isz)


class SplitProduct(SplitKRole):
    format: ClassVar[SplitFormat]
    one_cta_per_sm = True
    fp32_tile_epilogue = True

    def admits(self, p: Problem, spec: KernelSpec) -> bool:
        # the products' producer loads B's rows n0 + c, never a gate/up pair; a format without batch takes one matrix
        return not (p.swiglu or (p.batched and not self.format.batched))

    def recipe(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict) -> Recipe | None:
        fmt = self.format
        if spec.tile[2] != fmt.block:
            return None  # its k-block is not the split's plane
        (a3, a_shift), (b3, b_shift) = glue.split(fmt, "tA3", p.a), glue.split(fmt, "tB3", p.b.T)
        shifts = SplitShifts(a_shift, b_shift) if a_shift is not None or b_shift is not None else None
        return glue.recipe(route, Gemm(route.kernel, spec.role, a3, b3, p.c, p.M, p.c.cols, p.K,
                                       splits=int(opts.get("splits", 1)), options=shifts, **self.whole_epilogue(p)))

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        return model.rates.split_tflops.get(self.name, {}).get(tuple(spec.tile[:2]), 40.0)

    def operand_map(self, name: str, view: View, step: Gemm, isz: int) -> tuple[tuple, tuple] | None:
        if name not in ("A", "B"):
            return None
        return split_planes(view, step.M if name == "A" else step.N, isz, step.batch)
