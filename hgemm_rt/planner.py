"""Which kernel `matmul` runs, and what glue it needs: pure data, no GPU (tested on the CPU).

`recipe_for(route, problem, manifest)` says what a route needs: the operands used in place, the ones
that must first be copied into a zero-padded aligned buffer (strides, alignment or a kernel's
divisibility `require`), and whether the result goes through a temporary and a copy-out (alpha/beta,
strides the kernel cannot store). `ranked_recipes` prices every candidate with the cost model of the
GPU's architecture (costmodel.py) and sorts them; the tuning cache (tuning.py) replaces the estimate
by measurements where the user asks for it.

Every candidate is discovered from the manifest: a kernel's declared `role` says what it does in a
recipe (cu/*.toml, manifest.ROLES), its layout, dtype, acc, tile, require, align, params, grid and
cluster say how. No kernel name is written or parsed here.
"""
from __future__ import annotations

from typing import Any

from .costmodel import CostModel
from .errors import NotBuiltForDeviceError
from .launcher import default_swizzle_stride
from .manifest import KernelSpec, Manifest
from .problem import ITEMSIZE, Copy, Gemm, Problem, Recipe, Route, Temp, View

SPLITS = (1, 2, 4, 8)  # cluster sizes along K (portable cluster size limit is 8)
STRIDED_MMA_ALIGN = 16  # 16-byte chunks of A and B: 16-byte aligned rows, leading dims multiple of 8
TMA_ROW_BYTES = 128  # row pitch of the padded copies that TMA maps read (TMA itself needs 16)
# A and B by pointer and leading dimension, B row- or column-major (the `b` variant)
LEADING_DIM_ROLES = ("gemm_strided_mma", "gemm_strided_stream")
SPLIT_K_ROLES = ("gemm_strided_mma", "gemm_strided_wgmma", "gemm_strided_stream")
DECODE_ROWS = 16  # see ranked_recipes


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def tmap_operands(spec: KernelSpec) -> set[str]:
    return {p.split(":", 1)[1] for p in spec.params if p.startswith("tmap:")}


def fits(view: View, rows: int, cols: int, *, tma: bool, align: int, itemsize: int) -> bool:
    """May a kernel read/write `view` in place as a rows x cols row-major operand? Default-ABI
    pointers imply a dense matrix; a TMA tensor map takes any 16-byte-multiple row stride."""
    if view.rows != rows or view.cols != cols or view.cs != 1:
        return False
    if tma:  # (a single row has rs == cols after View.make)
        return view.align >= 16 and view.rs >= cols and view.rs * itemsize % 16 == 0
    return view.align >= align and view.dense()


def _dense(name: str, rows: int, cols: int) -> View:
    return View.make(name, rows, cols, cols, 1, 256)  # temporaries come from cuMemAlloc: 256-B aligned


def acc_variant(spec: KernelSpec, dtype: str, acc: str) -> str | None | bool:
    """The `acc` variant to launch spec with for accumulate=acc: a value, None (no acc axis, fixed
    accumulation acceptable) or False (this kernel cannot honour the request)."""
    allowed = {"f16": ("f16", "f32"), "f32": ("f32",), "tf32": ("tf32", "f32")}[acc]
    if dtype == "bf16":
        allowed = ("f32",)
    if "acc" in spec.variants:
        vals = [v for v in spec.variants["acc"] if v in allowed]
        if not vals:
            return False
        return acc if acc in vals else vals[0]  # the requested precision where it is built
    return None if spec.acc in allowed else False


def copy_kernel(manifest: Manifest, dtype: str) -> str | None:
    """The kernel with the "copy" role for `dtype`, or None if the build has none."""
    for spec in manifest.kernels.values():
        if spec.role == "copy" and spec.dtype == dtype:
            return spec.name
    return None


class _NoCopyKernel(Exception):
    """The recipe needs a copy and the build has no "copy" kernel for the dtype."""


class _Glue:
    """The temporaries and copy steps a recipe collects before its GEMM."""

    def __init__(self, manifest: Manifest, dtype: str):
        self.copier = copy_kernel(manifest, dtype)
        self.isz = ITEMSIZE[dtype]
        self.temps: list[Temp] = []
        self.steps: list[Any] = []
        self.copy_bytes = 0

    def pack(self, name: str, src: View, rows: int, cols: int, tma: bool = False) -> View:
        """A zero-padded row-major copy of `src` (rows x cols), filled by a copy step."""
        if self.copier is None:
            raise _NoCopyKernel
        # a buffer that only a TMA map reads gets whole 128-byte rows: its boxes then start on L2
        # lines (a 4104-element fp16 row is 8208 bytes, so every box row would straddle two)
        stride = _round_up(cols, max(1, TMA_ROW_BYTES // self.isz)) if tma and rows > 1 else cols
        self.temps.append(Temp(name, rows, cols, 0 if stride == cols else stride))
        dst = View.make(name, rows, cols, stride, 1, 256)
        self.steps.append(Copy(self.copier, src, dst, src.rows, src.cols, epilogue=False))
        self.copy_bytes += (src.rows * src.cols + rows * cols) * self.isz
        return dst

    def recipe(self, route: Route, *last: Any) -> Recipe:
        return Recipe(route, tuple(self.temps), tuple(self.steps) + last, self.copy_bytes)


def recipe_for(route: Route, prob: Problem, manifest: Manifest) -> Recipe | None:
    """What running `route` on `prob` takes, or None if the route cannot run it."""
    p = prob.transposed() if route.transpose else prob
    spec = manifest.kernels.get(route.kernel)
    if spec is None or spec.dtype != p.dtype or spec.role == "copy":
        return None
    try:
        return _recipe(route, p, spec, _Glue(manifest, p.dtype))
    except _NoCopyKernel:
        return None


def _recipe(route: Route, p: Problem, spec: KernelSpec, glue: _Glue) -> Recipe | None:
    isz = glue.isz
    M, N, K = p.M, p.N, p.K
    pack = glue.pack
    opts = route.opts()
    splits = int(opts.get("splits", 1))
    if spec.role != "gemm" and "splits" in opts and (spec.role not in SPLIT_K_ROLES or splits not in SPLITS):
        return None
    if spec.role == "gemm_strided_simt":
        if route.transpose:
            return None  # strides are general: transposing buys nothing
        return Recipe(route, (), (Gemm(route.kernel, spec.role, p.a, p.b, p.c, M, N, K, epilogue=True),))
    if spec.role == "gemm_strided_wgmma":
        # TMA maps of A and B as they are where their rows are contiguous with 16-byte-multiple
        # strides; otherwise a packed copy (B packed as N x K, which the TN kernel reads)
        a = p.a
        if not fits(a, M, K, tma=True, align=16, itemsize=isz):
            a = pack("tA", a, M, _round_up(K, 8), tma=True)
        if spec.layout == "NN":
            b = p.b
            if not fits(b, K, N, tma=True, align=16, itemsize=isz):
                return None  # the TN kernel takes this problem with a packed B^T
        else:
            b = p.b.T
            if not fits(b, N, K, tma=True, align=16, itemsize=isz):
                b = pack("tB", b, N, _round_up(K, 8), tma=True)
        g = Gemm(route.kernel, spec.role, a, b, p.c, M, N, K, splits=splits, epilogue=True)
        return glue.recipe(route, g)
    if spec.role in LEADING_DIM_ROLES:
        a = p.a
        if not (a.cs == 1 and a.align >= STRIDED_MMA_ALIGN and (a.rows == 1 or a.rs % 8 == 0)):
            a = pack("tA", a, M, _round_up(K, 8))
        b = p.b
        if b.cs == 1 and b.align >= STRIDED_MMA_ALIGN and (b.rows == 1 or b.rs % 8 == 0):
            b_layout = "row"
        elif b.rs == 1 and b.align >= STRIDED_MMA_ALIGN and (b.cols == 1 or b.cs % 8 == 0):
            b_layout = "col"
        else:
            b = pack("tB", b.T, N, _round_up(K, 8)).T  # N x K row-major, seen as K x N
            b_layout = "col"
        if b_layout not in spec.variants.get("b", ()):
            return None  # a kernel of the other B layout takes it
        g = Gemm(route.kernel, spec.role, a, b, p.c, M, N, K, variant=(("b", b_layout),), splits=splits,
                 epilogue=True)
        return glue.recipe(route, g)

    # the "gemm" role: a catalogue kernel with the default ABI (dense operands implied by M, N, K) or TMA maps
    rq = spec.require
    Mk, Nk, Kk = _round_up(M, rq.get("M", 1)), _round_up(N, rq.get("N", 1)), _round_up(K, rq.get("K", 1))
    tm = tmap_operands(spec)
    a = p.a
    if spec.a_order == "col":  # the kernel reads A^T, K x M row-major (A stays an M x K view)
        if not fits(a.T, Kk, Mk, tma="A" in tm, align=spec.align, itemsize=isz):
            a = pack("tA", a.T, Kk, Mk, tma="A" in tm).T
    elif not fits(a, Mk, Kk, tma="A" in tm, align=spec.align, itemsize=isz):
        a = pack("tA", a, Mk, Kk, tma="A" in tm)
    if spec.layout == "NN":
        b = p.b
        if not fits(b, Kk, Nk, tma="B" in tm, align=spec.align, itemsize=isz):
            b = pack("tB", b, Kk, Nk, tma="B" in tm)
    else:  # TN: the kernel reads B^T, N x K row-major
        b = p.b.T
        if not fits(b, Nk, Kk, tma="B" in tm, align=spec.align, itemsize=isz):
            b = pack("tB", b, Nk, Kk, tma="B" in tm)
    c = p.c
    direct = p.plain and fits(c, Mk, Nk, tma="C" in tm, align=spec.align, itemsize=isz) and spec.out == p.dtype
    if not direct:
        if glue.copier is None:
            return None
        glue.temps.append(Temp("tC", Mk, Nk))
        c = _dense("tC", Mk, Nk)
    given = {k: v for k, v in opts.items() if k in spec.variants}
    av = acc_variant(spec, p.dtype, p.acc)  # the precision rule holds whatever a route asks for
    if set(opts) - set(spec.variants) or av is False:
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
        glue.steps.append(Copy(glue.copier, src, p.c, M, N, epilogue=True))
        glue.copy_bytes += (2 * M * N + (0 if p.beta_zero else M * N)) * isz
    return glue.recipe(route)


# ---------------------------------------------------------------------------------------------------
# candidates, ranked by the architecture's cost model
# ---------------------------------------------------------------------------------------------------

def _built(manifest: Manifest, spec: KernelSpec, cc: tuple[int, int]) -> bool:
    try:
        manifest.select(spec, cc)
        return True
    except NotBuiltForDeviceError:
        return False


def candidate_routes(prob: Problem, manifest: Manifest, cc: tuple[int, int], kernel: str | None = None
                     ) -> list[Route]:
    """Every route that could run `prob` on a GPU of compute capability cc (before recipe_for)."""
    out: list[Route] = []
    for spec in manifest.kernels.values():
        if spec.dtype != prob.dtype or (kernel and spec.name != kernel) or not _built(manifest, spec, cc):
            continue
        if spec.role == "copy":
            continue
        if spec.role == "gemm_strided_simt":
            out.append(Route(spec.name))
            continue
        if spec.role in SPLIT_K_ROLES:
            for t in (False, True):
                for s in SPLITS:
                    if s == 1 or cc >= (9, 0):  # thread-block clusters are sm_90+
                        out.append(Route(spec.name, t, (("splits", s),)))
            continue
        if spec.out != prob.dtype or acc_variant(spec, prob.dtype, prob.acc) is False:
            continue
        for t in (False, True):
            out.append(Route(spec.name, t))
    return out


def _gemm_tile_rows(recipe: Recipe, manifest: Manifest) -> int:
    return max(manifest.kernels[s.kernel].tile[0] for s in recipe.steps if isinstance(s, Gemm))


def ranked_recipes(prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int,
                   kernel: str | None = None) -> list[tuple[float, Recipe]]:
    """Every runnable recipe with its estimated microseconds, cheapest first.

    A problem with a side of at most DECODE_ROWS (decoding) only streams B: where kernels with tiles
    that short can run it, taller tiles are not candidates (they waste most of each tile; measured on
    an H100 at M = 1..16 they ran 1.1-1.6x slower than the best short-tile kernel, which the model's
    rates alone do not see)."""
    model = CostModel.for_device(cc, sm_count, manifest)
    out = []
    for route in candidate_routes(prob, manifest, cc, kernel):
        recipe = recipe_for(route, prob, manifest)
        if recipe is not None:
            out.append((model.estimate_us(recipe, prob.dtype, prob.beta_zero), recipe))
    if min(prob.M, prob.N) <= DECODE_ROWS:
        out = [x for x in out if _gemm_tile_rows(x[1], manifest) <= DECODE_ROWS] or out
    out.sort(key=lambda x: (x[0], str(x[1].route)))
    return out


def heuristic_recipe(prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int,
                     kernel: str | None = None) -> Recipe | None:
    ranked = ranked_recipes(prob, manifest, cc, sm_count, kernel)
    return ranked[0][1] if ranked else None


def describe(recipe: Recipe) -> str:
    """One line: the kernel and the glue around it."""
    parts = []
    for s in recipe.steps:
        if isinstance(s, Copy):
            parts.append(f"copy {s.src.base}->{s.dst.base}" + (" (alpha/beta)" if s.epilogue else ""))
        else:
            extra = f" splits={s.splits}" if s.splits > 1 else ""
            v = ",".join(f"{k}={v}" for k, v in s.variant)
            parts.append(f"{s.kernel}{'[' + v + ']' if v else ''}{extra} {s.M}x{s.N}x{s.K}")
    return " ; ".join(parts) + (" (solved as C^T = B^T A^T)" if recipe.route.transpose else "")
