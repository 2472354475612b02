"""What every role's recipe is made of: the rules for using an operand in place (`fits`), the glue that copies
or splits operands into temporaries (`Glue`), the accumulate rule (`acc_variant`) and the kernel parameters
a role reads off a kernel's declaration. Pure data, no GPU."""
from __future__ import annotations

from typing import Any

from ..dtypes import ITEMSIZE
from ..epilogue import SWIGLU
from ..manifest import KernelSpec, Manifest
from ..problem import KERNEL_LEVELS, Copy, Problem, Recipe, Route, Split, SplitFormat, Temp, View, batch_align
from ..tma import TMA_FAST_ROW_BYTES

SPLITS = (1, 2, 4, 8)  # cluster sizes along K (portable cluster size limit is 8)
STRIDED_MMA_ALIGN = 16  # 16-byte chunks of A and B: 16-byte aligned rows, leading dims multiple of 8
TMA_ROW_BYTES = 128  # row pitch of the padded copies that TMA maps read (TMA itself needs 16)
TMA_MAX_STRIDE = 2**40  # bytes: a tensor map's strides must stay below it
# Route option: pack the TMA-read A and B whose rows are off 32-byte boundaries into 128-byte rows first (offered
# only where the problem has such an operand; costmodel.TMA_SLOW_ROW_FACTOR prices reading them in place)
PACK = "pack"
SPLIT_ROW = 32  # a plane row in the problem's fp32 elements: 128 bytes, the TMA box row of the split products


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def prod(xs: Any) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def tmap_operands(spec: KernelSpec) -> set[str]:
    return {p.split(":", 1)[1] for p in spec.params if p.startswith("tmap:")}


def fits(view: View, rows: int, cols: int, *, tma: bool, align: int, itemsize: int) -> bool:
    """May a kernel read/write `view` in place as a rows x cols row-major operand? Default-ABI
    pointers imply a dense matrix; a TMA tensor map takes any 16-byte-multiple row stride (and, for a
    batched view, non-negative batch strides below 2^40 bytes; their 16-byte multiples are in align)."""
    if view.rows != rows or view.cols != cols or view.cs != 1:
        return False
    if tma:  # (a single row has rs == cols after View.make)
        return view.align >= 16 and view.rs >= cols and view.rs * itemsize % 16 == 0 and \
            all(0 <= s * itemsize < TMA_MAX_STRIDE for s in view.bs)
    return view.align >= align and view.dense() and not view.batched


def tma_slow_rows(view: View, itemsize: int) -> bool:
    """Are `view`'s rows, as a kernel reads them (its unit-stride orientation), off 32-byte boundaries?"""
    stride, rows = (view.rs, view.rows) if view.cs == 1 else (view.cs, view.cols)
    return rows > 1 and stride * itemsize % TMA_FAST_ROW_BYTES != 0


def c_by_pointer(c: View, itemsize: int) -> bool:
    """Whether a gemm_fused_wgmma launch stores `c` through ptr:C (kCNoMap, cu/CONTRACT.md) rather than its TMA map:
    a C off TMA's rules, or whose width does not end on a 16-byte run (the TMA store writes whole runs)."""
    return not fits(c, c.rows, c.cols, tma=True, align=16, itemsize=itemsize) or c.cols * itemsize % 16 != 0


def dense(name: str, rows: int, cols: int) -> View:
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


def applies_epilogue(spec: KernelSpec) -> bool:
    """Whether a kernel takes the fused epilogue's parameters (cu/common/epilogue.cuh): bias, activation, scale."""
    return "i32:epi" in spec.params


def rounds_before_activation(p: Problem) -> bool:
    """Whether a route whose GEMM writes the temporary tC and leaves the epilogue to the copy would apply the
    activation to a rounded product: tC has the problem's dtype, so for fp16/bf16 it would (gelu(-2.35) off by
    4 fp16 units in the last place). Such routes are not offered: the activation acts on the fp32 accumulator.
    (SwiGLU's fallback is its own route: planner.pairs_swiglu.)"""
    act = p.epi.activation if p.epi is not None else None
    return act is not None and act != SWIGLU and p.dtype != "f32"


def kernel_of_role(manifest: Manifest, dtype: str, role: str) -> str | None:
    """The first kernel of `role` for `dtype`, or None if the build has none."""
    for spec in manifest.kernels.values():
        if spec.role == role and spec.dtype == dtype:
            return spec.name
    return None


class NoCopyKernel(Exception):
    """The recipe needs a copy and the build has no "copy" kernel for the dtype."""


class Glue:
    """The temporaries and copy steps a recipe collects before its GEMM. `copier`: the build's copy kernel for the
    dtype; `splitters`: its split kernel of each split format (by the format's role), None where it has none."""

    def __init__(self, manifest: Manifest, dtype: str, copier: str | None, splitters: dict[str, str | None],
                 batch: tuple[int, ...] = ()):
        self.manifest = manifest
        self.copier = copier
        self.splitters = splitters
        self.isz = ITEMSIZE[dtype]
        self.batch = batch
        self.temps: list[Temp] = []
        self.steps: list[Any] = []
        self.copy_bytes = 0

    def pack(self, name: str, src: View, rows: int, cols: int, tma: bool = False) -> View:
        """A zero-padded row-major copy of `src` (rows x cols), filled by a copy step. Batched: one
        matrix per index of the kernel's batch levels along which `src` varies, back to back (a level
        that broadcasts src broadcasts the copy too); the loop levels reuse the buffer launch by launch."""
        if self.copier is None:
            raise NoCopyKernel
        # a buffer that only a TMA map reads gets whole 128-byte rows: its boxes then start on L2
        # lines (a 4104-element fp16 row is 8208 bytes, so every box row would straddle two)
        stride = round_up(cols, max(1, TMA_ROW_BYTES // self.isz)) if tma and rows > 1 else cols
        copies, index, count = self._per_matrix(src)
        bs = tuple(i * rows * stride for i in index)
        self.temps.append(Temp(name, rows, cols, 0 if stride == cols else stride, count))
        dst = View.make(name, rows, cols, stride, 1, batch_align(256, bs, self.isz), bs)
        self.steps.append(Copy(self.copier, src, dst, src.rows, src.cols, applies_alpha_beta=False, batch=copies))
        self.copy_bytes += (src.rows * src.cols + rows * cols) * self.isz * prod(copies)
        return dst

    def split(self, fmt: SplitFormat, name: str, src: View) -> tuple[View, View | None]:
        """A split product's operand of `src` (rows x K): its head and residual planes of rows x SPLIT_ROW, 2
        ceil(K / fmt.block) of them stacked (their stack as the view), filled by a split step; and for a scaled
        format the int32 exponents of its rows (1 x rows), which the same step writes. Batched: one stack (and one
        row of exponents) per matrix along the kernel levels `src` varies on, as `pack` lays out its copies."""
        kernel = self.splitters[fmt.role]
        if kernel is None:
            raise NoCopyKernel
        planes = 2 * -(-src.cols // fmt.block)
        copies, index, count = self._per_matrix(src)
        stack = planes * src.rows * SPLIT_ROW
        self.temps.append(Temp(name, planes * src.rows, SPLIT_ROW, 0, count))
        dst = View.make(name, planes * src.rows, SPLIT_ROW, SPLIT_ROW, 1, 256, tuple(i * stack for i in index))
        shift = None
        if fmt.scaled:
            self.temps.append(Temp(name + "e", 1, src.rows, 0, count))
            shift = View.make(name + "e", 1, src.rows, src.rows, 1, 256, tuple(i * src.rows for i in index))
        self.steps.append(Split(kernel, src, dst, src.rows, src.cols, fmt, batch=copies, shift=shift))
        self.copy_bytes += (fmt.reads * src.rows * src.cols + dst.rows * dst.cols) * self.isz * prod(copies)
        return dst, shift

    def _per_matrix(self, src: View) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """A temporary of one matrix per index of the kernel levels `src` varies on: the copies a step makes (per
        batch level: its count, or 1 where src is broadcast and so is the copy), the temporary's batch strides in
        matrices (times a matrix's elements: its `bs`) and how many matrices it holds."""
        nl = len(self.batch)
        index, count = [0] * nl, 1
        for level in range(nl - 1, max(nl - KERNEL_LEVELS, 0) - 1, -1):  # the kernel's levels, inner first
            if src.bstride(level):
                index[level] = count
                count *= self.batch[level]
        copies = tuple(n if level < nl - KERNEL_LEVELS or src.bstride(level) else 1
                       for level, n in enumerate(self.batch))
        return copies, tuple(index), count

    def temp(self, name: str, nbytes: int) -> View:
        """A workspace temporary of at least `nbytes` (one row of the problem's dtype)."""
        cols = -(-nbytes // self.isz)
        self.temps.append(Temp(name, 1, cols))
        return dense(name, 1, cols)

    def recipe(self, route: Route, *last: Any) -> Recipe:
        return Recipe(route, tuple(self.temps), tuple(self.steps) + last, self.copy_bytes,
                      self.batch[:-KERNEL_LEVELS])


class Repack:
    """The `pack` route option: operands that fit a tensor map but whose rows TMA reads slowly are packed too."""

    def __init__(self, opts: dict, isz: int):
        self.on, self.isz = bool(opts.get(PACK)), isz
        self.repacked: list[str] = []  # the operands packed for it

    def slow(self, v: View) -> bool:
        if self.on and tma_slow_rows(v, self.isz):
            self.repacked.append(v.base)
            return True
        return False

    def idle(self) -> bool:
        """The option asked for with nothing to pack: the plain route is that recipe."""
        return self.on and not self.repacked


def tma_operands(p: Problem, spec: KernelSpec, glue: Glue, repack: Repack) -> tuple[View, View] | None:
    """A and B of a kernel that reads both through TMA maps: as they are where their rows are contiguous with
    16-byte-multiple strides, otherwise a packed copy (B packed as N x K, which the TN kernel reads); None where
    an NN kernel would need B packed (the TN kernel takes that problem)."""
    isz, M, K, N = glue.isz, p.M, p.K, p.N
    a = p.a
    if not fits(a, M, K, tma=True, align=16, itemsize=isz) or repack.slow(a):
        a = glue.pack("tA", a, M, round_up(K, 8), tma=True)
    if spec.layout == "NN":
        b = p.b
        if not fits(b, K, N, tma=True, align=16, itemsize=isz) or repack.slow(b):
            return None  # the TN kernel takes this problem with a packed B^T
    else:
        b = p.b.T
        if not fits(b, N, K, tma=True, align=16, itemsize=isz) or repack.slow(b):
            b = glue.pack("tB", b, N, round_up(K, 8), tma=True)
    return a, b


__all__ = ["PACK", "SPLITS", "SPLIT_ROW", "STRIDED_MMA_ALIGN", "TMA_MAX_STRIDE", "TMA_ROW_BYTES", "Glue",
           "NoCopyKernel", "Repack", "acc_variant", "applies_epilogue", "batch_strides", "c_by_pointer", "dense",
           "distinct_matrices", "fits", "kernel_levels", "kernel_of_role", "prod", "round_up",
           "rounds_before_activation", "tma_operands", "tma_slow_rows", "tmap_operands"]


def kernel_levels(batch: tuple[int, ...]) -> tuple[int | None, int | None]:
    """The indices of the (outer, inner) batch levels a kernel takes (None where absent)."""
    n = len(batch)
    return (n - 2 if n >= 2 else None), (n - 1 if n >= 1 else None)


def batch_strides(view: View, batch: tuple[int, ...]) -> tuple[int, int]:
    """(outer, inner) batch strides of `view` in elements along the kernel's levels (0 where absent)."""
    outer, inner = kernel_levels(batch)
    return (view.bstride(outer) if outer is not None else 0, view.bstride(inner) if inner is not None else 0)


def distinct_matrices(view: View, batch: tuple[int, ...]) -> int:
    """Distinct matrices of `view` one batched launch touches: the kernel levels along which it varies
    (a broadcast operand is read once from DRAM, and L2 serves the rest)."""
    n = 1
    for level in range(max(len(batch) - KERNEL_LEVELS, 0), len(batch)):
        if view.bstride(level):
            n *= batch[level]
    return n
