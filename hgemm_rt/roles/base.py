"""The shape of a role handler: what one kernel role (declaration.ROLES) does for the planner, the cost model and
the executor. Each role's module (hgemm_rt/roles/<role>.py) subclasses `RoleHandler` (a step other roles'
recipes use: copy, split, sum) or `GemmRole` (a product the planner offers for a problem) and sets its
behaviour there; nothing outside hgemm_rt/roles/ compares a role's name."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..launcher import LaunchConfig, prepare
from ..manifest import KernelSpec, Manifest
from ..problem import Gemm, Problem, Recipe, Route, kernel_batch
from ..validate import GemmShape
from .glue import SPLITS, Glue

OCC = "occ"  # the variant axis of two CTAs an SM (2; cu/matmul_sm90.cu), priced by costmodel.OCC2_SCALE
# Kernels with the `mc` variant (cu/matmul_sm90.cu) may run unsplit, unbatched launches as pairs of CTAs of two
# neighbouring rows of tiles in a cluster that loads their shared B tile once and multicasts it (mc = 2); the cost
# model says where that pays (CostModel.gemm_us: only where B does not fit in L2)
MULTICAST = 2


@dataclass(frozen=True)
class RouteContext:
    """What candidate routes depend on beyond the problem and the kernel: the build, the GPU (cc, SM count; 0:
    unknown), its cost model, the kernel the caller names (None: any) and the matrices of one launch."""

    manifest: Manifest
    cc: tuple[int, int]
    sm_count: int
    model: Any  # costmodel.CostModel
    kernel: str | None
    batch: int


class RoleOptions:
    """Base of the options a role's GEMM step carries (Gemm.options): the snapshot and describe() read them."""

    IS_OPTIONS: ClassVar[bool] = True


def on_grid_z(cfg: LaunchConfig, spec: KernelSpec, splits: int, matrices: int) -> LaunchConfig:
    """grid.z: the splits of each matrix of the batch (`matrices`, times K groups), batch slowest."""
    if splits > 1 or matrices > 1:
        if cfg.grid[2] != 1:
            raise ValueError(f"{spec.name}: a batched or split launch needs grid.z, its grid is {cfg.grid}")
        cfg = replace(cfg, grid=(cfg.grid[0], cfg.grid[1], splits * matrices))
    return cfg


class RoleHandler:
    """A role whose kernels are steps of other roles' recipes (copy, split, sum): never a candidate."""

    name: ClassVar[str] = ""
    solves: ClassVar[bool] = False  # a product the planner offers for a problem (GemmRole)
    pairs_swiglu: ClassVar[bool] = True  # may pair SwiGLU's gate/up columns where the kernel declares `swiglu`

    def routes(self, prob: Problem, spec: KernelSpec, ctx: RouteContext) -> list[Route]:
        return []

    def launch(self, manifest: Manifest, spec: KernelSpec, dev: Any, step: Any) -> tuple[Any, LaunchConfig]:
        """The loaded function and launch geometry of one of this role's steps."""
        raise NotImplementedError(f"{self.name}: no launch of its own")

    def operand_map(self, name: str, view: Any, step: Any, isz: int) -> tuple[tuple, tuple] | None:
        """(shape, byte strides) of a tensor-map operand laid out the role's own way, None for the plain rules."""
        return None


class GemmRole(RoleHandler):
    """A product: its candidate routes, its recipe, the cost model's terms for its kernels, its launch."""

    solves = True
    takes_batch: ClassVar[bool] = True  # runs batched problems (grid.z)
    split_k: ClassVar[bool] = False  # takes the `splits` route option (a cluster of CTAs along K)
    packs: ClassVar[bool] = False  # offers the `pack` route option for the operands its tensor maps read
    fuses_epilogue: ClassVar[bool] = True  # applies bias/activation/scale itself (else a copy after it does)
    serves_groups: ClassVar[bool] = False  # runs grouped_matmul's problems (Problem.group)
    acc_in_recipe: ClassVar[bool] = False  # resolves the accumulate request in its recipe (else recipe_for refuses)
    # cost-model terms (costmodel.CostModel.gemm_us)
    one_cta_per_sm: ClassVar[bool] = False  # its CTAs take a whole SM: clusters leave a GPC's spare SMs idle
    c_store: ClassVar[str] = "staged"  # how it stores C without a TMA map (costmodel.C_STORE_SHARE)
    fp32_tile_epilogue: ClassVar[bool] = False  # its fp32 tile goes through shared memory (and DSMEM when split)
    l2_panel: ClassVar[bool] = False  # its operand panels are bounded by what all SMs pull from L2 together
    reads_c_old: ClassVar[bool] = False  # its epilogue reads C_old itself for beta != 0 (overlapped with the MMAs)
    split_k_slowdown: ClassVar[bool] = False  # a split launch runs slower the shorter each CTA's K (SPLIT_K_SHORT_K)
    in_compute_tie: ClassVar[bool] = True  # its arithmetic time breaks ties between equal estimates

    def admits(self, p: Problem, spec: KernelSpec) -> bool:
        """Whether the role can run `p` at all (beyond its recipe's operand rules)."""
        return True

    def recipe(self, route: Route, p: Problem, spec: KernelSpec, glue: Glue, opts: dict) -> Recipe | None:
        raise NotImplementedError

    def grouped_recipe(self, route: Route, p: Problem, spec: KernelSpec) -> Recipe | None:
        return None

    def tflops(self, model: Any, spec: KernelSpec) -> float:
        """The kernel's sustained rate once the grid is full (costmodel.ArchRates)."""
        raise NotImplementedError

    def rate_factor(self, spec: KernelSpec, g: Gemm) -> float:
        """The share of its rate a launch reaches for reasons of its own (1: all of it)."""
        return 1.0

    def split_factor(self, model: Any, spec: KernelSpec, g: Gemm) -> float | None:
        """How much slower than its rate a split launch runs, None for the general rule (CostModel.split_factor)."""
        return None

    def gemm_us(self, model: Any, spec: KernelSpec, g: Gemm, dtype: str, beta_zero: bool) -> float:
        return model.tiled_gemm_us(spec, g, dtype, beta_zero)

    def busiest_load(self, model: Any, spec: KernelSpec, g: Gemm, ctas: int) -> float:
        """How many tiles the busiest SM runs (CostModel.tiled_gemm_us): its share of the grid's waves."""
        return math.ceil(ctas / model.cta_slots(spec, g.splits))

    def dram_bytes_per_s(self, model: Any, spec: KernelSpec, g: Gemm, ctas: int) -> float:
        """The rate a launch reads and writes DRAM at."""
        return model.rates.dram_bytes_per_s

    def compute_s(self, model: Any, spec: KernelSpec, g: Gemm) -> float | None:
        """Seconds of arithmetic where the role counts them its own way; None for the tiles' rule."""
        return None

    def pieces_sum_s(self, model: Any, spec: KernelSpec, g: Gemm) -> float:
        """Seconds a launch spends summing the pieces of K its own way (K groups), beyond the tile epilogue."""
        return 0.0

    def fixup_us(self, model: Any, spec: KernelSpec, g: Gemm) -> float:
        """Microseconds of work beyond the launch's k-blocks (stream-K's fix-up); 0 for most launches."""
        return 0.0

    def describe(self, g: Gemm) -> str:
        """What describe() says of the step's options (after its variant)."""
        return ""

    def option_scalars(self, g: Gemm) -> dict[str, int]:
        """The integers of its options a GEMM kernel may declare (executor.step_scalars), at their neutral values."""
        return {"group_mode": 0, "groups": 0, "sk_tiles": 0, "k_groups": 1}

    def launch(self, manifest: Manifest, spec: KernelSpec, dev: Any, step: Gemm) -> tuple[Any, LaunchConfig]:
        variant = spec.resolve_variant(dict(step.variant))  # declared axis order: the symbol name
        # SwiGLU: the kernel's N is C's width, its tiles span as many of B's 2N columns
        n_tiles = 2 * step.N if step.swiglu else step.N
        fn, cfg = prepare(manifest, spec, dev, GemmShape(step.M, n_tiles, step.K), variant, step.swizzle,
                          step.swizzle_stride)
        outer, inner = kernel_batch(step.batch)
        if step.k_groups > 1 and (outer * inner > 1 or step.cluster_m > 1):
            raise ValueError(f"{spec.name}: K groups need an unbatched launch without B multicast")
        if step.splits > 1:  # split-K: one CTA per split of a tile, the splits of a tile in one cluster
            cfg = replace(cfg, cluster=(1, 1, step.splits))
        if step.cluster_m > 1:  # B multicast: neighbouring rows of tiles in pairs (a last odd row's pair is idle)
            cm = step.cluster_m
            cfg = replace(cfg, cluster=(1, cm, 1), grid=(cfg.grid[0], -(-cfg.grid[1] // cm) * cm, cfg.grid[2]))
        cfg, matrices = self.grid(cfg, spec, dev, step, outer * inner)
        return fn, on_grid_z(cfg, spec, step.splits, matrices * step.k_groups)

    def grid(self, cfg: LaunchConfig, spec: KernelSpec, dev: Any, step: Gemm, matrices: int) -> tuple:
        """(launch config, matrices on grid.z): the tiled grid as prepared, the batch on grid.z."""
        return cfg, matrices

    def check_options(self, route: Route, p: Problem, spec: KernelSpec, opts: dict) -> bool:
        """The options every GEMM role shares: splits (where the role takes them), multicast, two CTAs an SM."""
        splits = int(opts.get("splits", 1))
        if "splits" in opts and not self.accepts_splits(splits):
            return False
        mc = int(opts.get("mc", 1))
        if mc != 1 and (mc not in spec.variants.get("mc", ()) or splits != 1 or p.batched):
            return False  # (the pair's cluster along M leaves no room for a split-K cluster or a batch in the maps)
        occ = int(opts.get(OCC, 1))
        if occ != 1 and (occ not in spec.variants.get(OCC, ()) or splits != 1 or "k_groups" in opts):
            return False  # (two CTAs an SM: no split-K cluster)
        return True

    def accepts_splits(self, splits: int) -> bool:
        """Whether a route may ask for `splits` (the catalogue role leaves it to the kernel's variants)."""
        return self.split_k and splits in SPLITS

    @staticmethod
    def whole_epilogue(p: Problem) -> dict:
        """The Gemm fields of a kernel that applies the problem's whole epilogue itself."""
        return dict(applies_alpha_beta=True, batch=p.batch, epi=p.epi, bias=p.bias)

