"""The kernel roles (declaration.ROLES), one handler each: what a role's kernels do in a recipe, what they cost and
how they launch. The planner, the cost model and the executor ask `handler(role)`; no role name is compared
outside this package."""
from __future__ import annotations

from ..problem import SplitFormat
from .base import GemmRole, RoleHandler, RouteContext
from .copy import CopyRole
from .gemm import Catalogue
from .gemm_f16x3 import GemmF16x3
from .gemm_fused_wgmma import FusedWgmma
from .gemm_strided_mma import StridedMma
from .gemm_strided_simt import StridedSimt
from .gemm_strided_stream import StridedStream
from .gemm_strided_wgmma import StridedWgmma
from .gemm_tf32x3 import GemmTf32x3
from .kgroups_sum import GroupSumRole
from .split_f16x3 import SplitF16x3
from .split_products import SplitProduct
from .split_tf32 import SplitTf32

HANDLERS: dict[str, RoleHandler] = {h.name: h for h in (
    Catalogue(), CopyRole(), StridedMma(), StridedWgmma(), StridedSimt(), StridedStream(), FusedWgmma(),
    GemmTf32x3(), SplitTf32(), GemmF16x3(), SplitF16x3(), GroupSumRole())}
# the split products' operand formats, by the product's role
SPLIT_FORMATS: dict[str, SplitFormat] = {h.name: h.format for h in HANDLERS.values() if isinstance(h, SplitProduct)}


def handler(role: str) -> RoleHandler:
    """The handler of a declared role (declaration.ROLES)."""
    return HANDLERS[role]


def gemm_handler(role: str) -> GemmRole:
    """The handler of a product's role (a Gemm step's)."""
    h = HANDLERS[role]
    assert isinstance(h, GemmRole), role
    return h


def split_format(split_role: str) -> SplitFormat:
    """The format a split kernel's role makes."""
    return next(f for f in SPLIT_FORMATS.values() if f.role == split_role)


__all__ = ["HANDLERS", "SPLIT_FORMATS", "GemmRole", "RoleHandler", "RouteContext", "gemm_handler", "handler",
           "split_format"]
