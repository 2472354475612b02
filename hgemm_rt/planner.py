"""Which kernel `matmul` runs, and what glue it needs: pure data, no GPU (tested on the CPU).

`recipe_for(route, problem, manifest)` says what a route needs: the operands used in place, the ones
that must first be copied into a zero-padded aligned buffer (strides, alignment or a kernel's
divisibility `require`), and whether the result goes through a temporary and a copy-out (alpha/beta,
strides the kernel cannot store); a route with the `pack` option also copies the operands a tensor map would
read off 32-byte row boundaries, which TMA reads slowly. `ranked_recipes` prices every candidate with the cost
model of the GPU's architecture (costmodel.py) and sorts them; the tuning cache (tuning.py) replaces the
estimate by measurements where the user asks for it.

Every candidate is discovered from the manifest: a kernel's declared `role` says what it does in a
recipe (cu/*.toml, declaration.ROLES), its layout, dtype, acc, tile, require, align, params, grid and
cluster say how. Each role's routes and recipe are its handler's (hgemm_rt/roles/<role>.py); this module
loops over them and ranks. No kernel name is written or parsed here, and no role name compared.

A batched problem (Problem.batch) runs on the strided roles only (their kernels take the batch on grid.z
with 64-bit batch strides: cu/CONTRACT.md); the catalogue kernels' default ABI has no batch. A packed
copy of a batched operand is one launch too (the copy kernel's grid.z), one matrix per batch index where
the operand varies, a single one where it is broadcast.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from .costmodel import CostModel
from .dtypes import ITEMSIZE
from .epilogue import Epilogue
from .errors import NotBuiltForDeviceError
from .manifest import KernelSpec, Manifest
from .problem import MAX_GRID_BATCH, Copy, Gemm, GroupSum, Problem, Recipe, Route, Split, Temp, kernel_batch
from .roles import HANDLERS, SPLIT_FORMATS, GemmRole, RouteContext, gemm_handler, handler
from .roles.copy import CopyRole
from .roles.gemm import narrow_hopper
from .roles.gemm_fused_wgmma import grouped_kernel, grouped_layout
from .roles.gemm_strided_wgmma import StridedWgmma
from .roles.glue import PACK, Glue, NoCopyKernel, acc_variant, applies_epilogue, dense, kernel_of_role, prod, \
    tma_slow_rows, tmap_operands
from .roles.leading_dim import LeadingDimRole
from .roles.tma_gemm import K_SUM

# the role families, from their handlers (tests and the tuning cache read them)
LEADING_DIM_ROLES = tuple(n for n, h in HANDLERS.items() if isinstance(h, LeadingDimRole))
PACK_ROLES = tuple(n for n, h in HANDLERS.items() if isinstance(h, GemmRole) and h.packs)
SPLIT_ROLES = tuple(f.role for f in SPLIT_FORMATS.values())  # the kernels that make the split products' operands
KG_ROLE = StridedWgmma.name  # the role whose kernels take K groups
DECODE_ROWS = 16  # see ranked_recipes
SHORT_SIDE = 128  # see ranked_recipes
NEAR_TIE = 0.01  # see ranked_recipes
WASTE_MARGIN = 0.1  # see ranked_recipes


def copy_kernel(manifest: Manifest, dtype: str, role: str = CopyRole.name) -> str | None:
    """The kernel with the "copy" role (or `role`) for `dtype`, or None if the build has none."""
    return kernel_of_role(manifest, dtype, role)


def pairs_swiglu(spec: KernelSpec) -> bool:
    """Whether matmul lets a GEMM pair SwiGLU's gate and up columns itself (else: the plain product, then the
    SwiGLU copy): the kernel declares it and its role allows it (RoleHandler.pairs_swiglu)."""
    return spec.swiglu and handler(spec.role).pairs_swiglu


def _glue(manifest: Manifest, dtype: str, batch: tuple[int, ...]) -> Glue:
    splitters = {f.role: copy_kernel(manifest, dtype, f.role) for f in SPLIT_FORMATS.values()}
    return Glue(manifest, dtype, copy_kernel(manifest, dtype), splitters, batch)


def recipe_for(route: Route, prob: Problem, manifest: Manifest) -> Recipe | None:
    """What running `route` on `prob` takes, or None if the route cannot run it."""
    spec = manifest.kernels.get(route.kernel)
    if prob.group:  # grouped_matmul's problems: the role that serves them (roles.gemm_fused_wgmma)
        role = handler(spec.role) if spec is not None else None
        return role.grouped_recipe(route, prob, spec) if isinstance(role, GemmRole) and role.serves_groups else None
    if route.transpose and prob.swiglu:
        return None  # the gate/up halves are column blocks of C
    if prob.swiglu and route.opts().get(K_SUM):
        return None  # (the sum step would have to pair them; the SwiGLU fallback's GEMM applies the bias itself)
    p = prob.transposed() if route.transpose else prob
    role = handler(spec.role) if spec is not None else None
    if spec is None or spec.dtype != p.dtype or not isinstance(role, GemmRole):
        return None
    if p.batched and (not role.takes_batch or int(route.opts().get("splits", 1)) * prod(p.kernel_batch) >
                      MAX_GRID_BATCH):
        return None  # (the catalogue ABI has no batch); grid.z holds splits x the kernel's batch
    if not role.acc_in_recipe and acc_variant(spec, p.dtype, p.acc) is False:
        return None  # (the catalogue role resolves its acc variant in its recipe)
    if not role.admits(p, spec):
        return None
    if p.epi is not None:  # a build whose kernels predate the fused epilogue: never a silently dropped epilogue
        applier = _epilogue_kernel(p, spec, role, manifest)
        if applier is None or not applies_epilogue(applier):
            return None
    try:
        if p.swiglu and not pairs_swiglu(spec):
            return _swiglu_after(route, p, spec, _glue(manifest, p.dtype, p.batch), manifest)
        return _recipe(route, p, spec, _glue(manifest, p.dtype, p.batch))
    except NoCopyKernel:
        return None


def grouped_recipe(prob: Problem, manifest: Manifest) -> Recipe | None:
    """The recipe of a grouped_matmul problem (Problem.group set, its batch the experts): the build's first grouped
    kernel for its dtype and B's layout, one launch; None where the build has none."""
    spec = grouped_kernel(manifest, prob.dtype, grouped_layout(prob.b))
    return recipe_for(Route(spec.name), prob, manifest) if spec is not None else None


def _epilogue_kernel(p: Problem, spec: KernelSpec, role: GemmRole, manifest: Manifest) -> KernelSpec | None:
    """The kernel that applies p's epilogue on a route of `spec`: the GEMM itself (the strided and fused
    roles), else the copy that follows it (catalogue kernels, SwiGLU where the GEMM cannot pair columns)."""
    if role.fuses_epilogue and not (p.swiglu and not pairs_swiglu(spec)):
        return spec
    copier = copy_kernel(manifest, p.dtype)
    return manifest.kernels[copier] if copier else None


def _swiglu_after(route: Route, p: Problem, spec: KernelSpec, glue: Glue, manifest: Manifest) -> Recipe | None:
    """SwiGLU with a kernel that cannot pair gate and up columns itself: the product, all 2F columns, into a
    temporary, then the copy kernel's SwiGLU pass into C (unbatched problems). A GEMM that applies the fused
    epilogue adds alpha and the bias to its fp32 sums, as the fused kernels do (the copy then pairs, scales and
    adds beta * C): a gate or up sum that the bias cancels keeps its digits, where a bias added after the
    rounding into the temporary keeps only the rounding's. A catalogue kernel writes the plain product, so it
    takes no bias here."""
    copier = manifest.kernels.get(glue.copier) if glue.copier else None
    if copier is None or not copier.swiglu or p.batched:
        return None
    fuses = applies_epilogue(spec)
    if p.bias is not None and not fuses:
        return None
    before = Epilogue(p.epi.bias) if p.bias is not None else None  # the bias alone, in the product
    full = replace(p, c=dense("tS", p.M, p.N), plain=True, beta_zero=True, epi=before, bias=p.bias)
    inner = _recipe(route, full, spec, glue)
    if inner is None:
        return None
    after = Epilogue(None, p.epi.activation, p.epi.scale)
    out = Copy(glue.copier, full.c, p.c, p.M, p.N, applies_alpha_beta=True, epi=after, scalars="b" if fuses else "ab")
    nbytes = (p.M * p.N + p.c.rows * p.c.cols * (1 if p.beta_zero else 2)) * glue.isz
    # the user's beta belongs to the SwiGLU copy alone; alpha to the GEMM where it applies the epilogue
    steps = tuple(s if isinstance(s, Split) else replace(s, applies_alpha_beta=fuses and isinstance(s, Gemm),
                                                         scalars="a") for s in inner.steps)
    return replace(inner, temps=inner.temps + (Temp("tS", p.M, p.N),), steps=steps + (out,),
                   copy_bytes=inner.copy_bytes + nbytes)


def _recipe(route: Route, p: Problem, spec: KernelSpec, glue: Glue) -> Recipe | None:
    role = gemm_handler(spec.role)
    opts = route.opts()
    if not role.check_options(route, p, spec, opts):
        return None
    return role.recipe(route, p, spec, glue, opts)


# ---------------------------------------------------------------------------------------------------
# candidates, ranked by the architecture's cost model
# ---------------------------------------------------------------------------------------------------

def _built(manifest: Manifest, spec: KernelSpec, cc: tuple[int, int]) -> bool:
    try:
        manifest.select(spec, cc)
        return True
    except NotBuiltForDeviceError:
        return False


def candidate_routes(prob: Problem, manifest: Manifest, cc: tuple[int, int], kernel: str | None = None,
                     sm_count: int = 0) -> list[Route]:
    """Every route that could run `prob` on a GPU of compute capability cc and sm_count SMs (0: unknown, no
    stream-K or K-group routes) (before recipe_for): each product role's (GemmRole.routes), in the manifest's
    order, then the `pack` variants of the routes whose kernels read A or B through TMA maps, where the problem
    has an operand whose rows TMA reads slowly."""
    out: list[Route] = []
    ctx = RouteContext(manifest, cc, sm_count, CostModel.for_device(cc, sm_count, manifest), kernel,
                       prod(prob.kernel_batch))
    for spec in manifest.kernels.values():
        if spec.dtype != prob.dtype or (kernel and spec.name != kernel) or not _built(manifest, spec, cc):
            continue
        role = handler(spec.role)
        if role.solves and (not prob.group or role.serves_groups):
            out += role.routes(prob, spec, ctx)
    isz = ITEMSIZE[prob.dtype]
    if not prob.group and any(tma_slow_rows(v, isz) for v in (prob.a, prob.b) if v.cs == 1 or v.rs == 1):
        tma_read = {s.name for s in manifest.kernels.values()
                    if s.role in PACK_ROLES and {"A", "B"} & tmap_operands(s)}
        out += [Route(r.kernel, r.transpose, tuple(sorted(r.options + ((PACK, 1),)))) for r in out
                if r.kernel in tma_read]
    return out


def _narrow_with_copies(recipe: Recipe, manifest: Manifest) -> bool:
    """A recipe that pairs the catalogue's 128 x 192 kernels with copies of the operands: not offered unless the
    caller names the kernel (measured in place only; docs/dev/planner.md#narrow-with-copies)."""
    gemms = [manifest.kernels[s.kernel] for s in recipe.steps if isinstance(s, Gemm)]
    return len(recipe.steps) > len(gemms) and any(narrow_hopper(s) for s in gemms)


def decode_tiles(recipe: Recipe, manifest: Manifest, prob: Problem) -> bool:
    """Whether every GEMM step of the recipe has tiles at most DECODE_ROWS short: in rows, or, for a problem whose M
    is its short side solved as C^T = B^T A^T, in columns (the token-width tiles: the tokens are the kernel's N)."""
    def short(s: Gemm) -> bool:
        BM, BN, _ = manifest.kernels[s.kernel].tile
        return BM <= DECODE_ROWS or (recipe.route.transpose and prob.M <= prob.N and BN <= DECODE_ROWS)
    return all(short(s) for s in recipe.steps if isinstance(s, Gemm))


def _splits(recipe: Recipe) -> int:
    return max((s.splits for s in recipe.steps if isinstance(s, Gemm)), default=1)


def tile_fill(recipe: Recipe, manifest: Manifest) -> float:
    """The least share of its tiles' area that any GEMM step of the recipe fills with C (1: no waste; a half_tiles
    kernel's last narrow tile counts BN/2 columns)."""
    fill = 1.0
    for s in recipe.steps:
        if isinstance(s, Gemm):
            spec = manifest.kernels[s.kernel]
            BM = spec.tile[0]
            cols = spec.computed_cols(s.N, s.swiglu)
            fill = min(fill, s.M * s.N / (math.ceil(s.M / BM) * BM * cols))
    return fill


def ranked_recipes(prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int,
                   kernel: str | None = None) -> list[tuple[float, Recipe]]:
    """Every runnable recipe with its estimated microseconds, cheapest first; equal estimates (the same
    memory-bound time) in the order of their arithmetic time (CostModel.compute_us).

    A problem with a side of at most DECODE_ROWS (decoding) only streams B: where kernels with tiles that short can
    run it (decode_tiles), taller tiles are not candidates (they waste most of each tile, which the model's rates do
    not see). With a side of at most SHORT_SIDE, recipes whose tiles leave half their area or more empty rank after
    the rest where others fill their tiles over twice as well, unless estimated over WASTE_MARGIN below the best of
    those; they stay listed (autotune and the sanitizer's schedule). Measured: docs/dev/planner.md#ranking."""
    model = CostModel.for_device(cc, sm_count, manifest)
    out = []
    for route in candidate_routes(prob, manifest, cc, kernel, sm_count):
        recipe = recipe_for(route, prob, manifest)
        if recipe is not None and (kernel is not None or not _narrow_with_copies(recipe, manifest)):
            out.append((model.estimate_us(recipe, prob.dtype, prob.beta_zero), recipe))
    if min(prob.M, prob.N) <= DECODE_ROWS:
        out = [x for x in out if decode_tiles(x[1], manifest, prob)] or out
    wasteful = set()
    if DECODE_ROWS < min(prob.M, prob.N) <= SHORT_SIDE and out:
        fill = {id(r): tile_fill(r, manifest) for _, r in out}
        best = max(fill.values())
        filled = min(e for e, r in out if fill[id(r)] > best / 2)
        wasteful = {id(r) for e, r in out if fill[id(r)] <= best / 2 and e >= filled * (1 - WASTE_MARGIN)}
    out.sort(key=lambda x: (id(x[1]) in wasteful, x[0], model.compute_us(x[1]), x[1].route.transpose, str(x[1].route)))
    # Estimates within NEAR_TIE of the best are the same memory-bound time to the model's precision: of those with the
    # best's split count, an untransposed one goes first, then the one with the least arithmetic time
    # (docs/dev/planner.md#ranking)
    head = [x for x in out if id(x[1]) in wasteful] if out and id(out[0][1]) in wasteful else \
        [x for x in out if id(x[1]) not in wasteful]
    if head:
        splits = _splits(head[0][1])
        near = [x for x in head if x[0] <= head[0][0] * (1 + NEAR_TIE) and _splits(x[1]) == splits]
        first = min(near, key=lambda x: (x[1].route.transpose, model.compute_us(x[1])))
        out.remove(first)
        out.insert(0, first)
    return out


def estimate_us(recipe: Recipe, prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int) -> float:
    """The cost model's GPU microseconds for `recipe` on `prob` (L2 flushed, as ranked_recipes ranks them)."""
    return CostModel.for_device(cc, sm_count, manifest).estimate_us(recipe, prob.dtype, prob.beta_zero)


def heuristic_recipe(prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int,
                     kernel: str | None = None) -> Recipe | None:
    ranked = ranked_recipes(prob, manifest, cc, sm_count, kernel)
    return ranked[0][1] if ranked else None


def why_no_recipe(prob: Problem, manifest: Manifest, cc: tuple[int, int], kernel: str | None = None) -> str:
    """Why no route runs `prob` on a GPU of compute capability cc (kernel: the one the caller named), with the fix
    that helps: a rebuild only where the build lacks what the kernels declare for this GPU."""
    arch = f"sm_{cc[0]}{cc[1]}"
    if kernel is None:
        return f"no kernel of this build runs it on this {arch} GPU; rebuild with build_kernels.py"
    spec = manifest.kernels[kernel]
    if not isinstance(handler(spec.role), GemmRole):
        return (f"{kernel} is a matmul helper kernel (role {spec.role}), not a GEMM: name a GEMM kernel or leave "
                "kernel unset")
    if spec.dtype != prob.dtype:
        return f"{kernel} takes {spec.dtype} operands, these are {prob.dtype}: name a {prob.dtype} kernel"
    if acc_variant(spec, prob.dtype, prob.acc) is False:
        return (f"{kernel} accumulates in {'/'.join(spec.variants.get('acc', (spec.acc,)))}, which accumulate="
                f"{prob.acc!r} does not allow: name a kernel that accumulates as asked, or change accumulate")
    try:
        manifest.select(spec, cc)
    except NotBuiltForDeviceError as exc:
        return str(exc)  # (what to build, or the architectures the kernel supports)
    return (f"{kernel} cannot take this problem's shape, strides or batch (its tile, alignment or layout rules): "
            "leave kernel unset to let matmul choose")


def describe(recipe: Recipe) -> str:
    """One line: the kernel and the glue around it (a batched step names its batch: 8x12*, the matrices
    of one launch; a loop of launches over further batch levels comes last)."""
    def batch(s: Any) -> str:
        kb = [n for n in kernel_batch(s.batch) if n > 1]
        return "x".join(map(str, kb)) + "*" if kb else ""

    def epi(s: Any) -> str:  # what the step's epilogue fuses
        if not s.applies_alpha_beta:
            return ""
        scalars = {"ab": "alpha/beta", "a": "alpha", "b": "beta"}[s.scalars]
        what = ", ".join(x for x in (scalars, str(s.epi) if s.epi else "") if x)
        return f" ({what})" if isinstance(s, (Copy, GroupSum)) or s.epi else ""

    parts = []
    for s in recipe.steps:
        if isinstance(s, Split):
            parts.append(f"split {s.src.base}->{s.dst.base} ({s.format.label})")
        elif isinstance(s, Copy):
            parts.append(f"copy {batch(s)}{s.src.base}->{s.dst.base}{epi(s)}")
        elif isinstance(s, GroupSum):
            parts.append(f"{s.kernel} of {s.groups} groups {s.M}x{s.N}{epi(s)}")
        else:
            extra = (f" splits={s.splits}" if s.splits > 1 else "") + gemm_handler(s.role).describe(s)
            v = ",".join(f"{k}={v}" for k, v in s.variant)
            parts.append(f"{s.kernel}{'[' + v + ']' if v else ''}{extra} {batch(s)}{s.M}x{s.N}x{s.K}{epi(s)}")
    loop = f" (x {'x'.join(map(str, recipe.loop))} launches)" if recipe.loop else ""
    return " ; ".join(parts) + loop + (" (solved as C^T = B^T A^T)" if recipe.route.transpose else "")
