"""Which kernel `matmul` runs, and what glue it needs: pure data, no GPU (tested on the CPU).

`recipe_for(route, problem, manifest)` says what a route needs: the operands used in place, the ones
that must first be copied into a zero-padded aligned buffer (strides, alignment or a kernel's
divisibility `require`), and whether the result goes through a temporary and a copy-out (alpha/beta,
strides the kernel cannot store); a route with the `pack` option also copies the operands a tensor map would
read off 32-byte row boundaries, which TMA reads slowly. `ranked_recipes` prices every candidate with the cost
model of the GPU's architecture (costmodel.py) and sorts them; the tuning cache (tuning.py) replaces the
estimate by measurements where the user asks for it.

Every candidate is discovered from the manifest: a kernel's declared `role` says what it does in a
recipe (cu/*.toml, manifest.ROLES), its layout, dtype, acc, tile, require, align, params, grid and
cluster say how. No kernel name is written or parsed here.

A batched problem (Problem.batch) runs on the strided roles only (their kernels take the batch on grid.z
with 64-bit batch strides: cu/CONTRACT.md); the catalogue kernels' default ABI has no batch. A packed
copy of a batched operand is one launch too (the copy kernel's grid.z), one matrix per batch index where
the operand varies, a single one where it is broadcast.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from .costmodel import OCC, QUEUE, CostModel, narrow_hopper, streamk_splits, tma_slow_rows
from .errors import NotBuiltForDeviceError
from .launcher import default_swizzle_stride
from .manifest import KernelSpec, Manifest
from .dtypes import ITEMSIZE
from .epilogue import SWIGLU, Epilogue
from .problem import KERNEL_LEVELS, MAX_GRID_BATCH, SPLIT_FORMATS, Copy, Gemm, GroupSum, Problem, Recipe, Route, \
    SplitFormat, Temp, View, batch_align, kernel_batch, split_format

SPLITS = (1, 2, 4, 8)  # cluster sizes along K (portable cluster size limit is 8)
STRIDED_MMA_ALIGN = 16  # 16-byte chunks of A and B: 16-byte aligned rows, leading dims multiple of 8
TMA_ROW_BYTES = 128  # row pitch of the padded copies that TMA maps read (TMA itself needs 16)
# A and B by pointer and leading dimension, B row- or column-major (the `b` variant)
LEADING_DIM_ROLES = ("gemm_strided_mma", "gemm_strided_stream")
SPLIT_K_ROLES = ("gemm_strided_mma", "gemm_strided_wgmma", "gemm_strided_stream", "gemm_tf32x3", "gemm_f16x3")
# Kernels with the `mc` variant (cu/util_sm90.cu) may run unsplit, unbatched launches as pairs of CTAs of two
# neighbouring rows of tiles in a cluster that loads their shared B tile once and multicasts it (mc = 2); the cost
# model says where that pays (CostModel.gemm_us: only where B does not fit in L2)
MULTICAST = 2
# Route option: pack the TMA-read A and B whose rows are off 32-byte boundaries into 128-byte rows first (offered
# only where the problem has such an operand; costmodel.TMA_SLOW_ROW_FACTOR prices reading them in place)
PACK = "pack"
PACK_ROLES = ("gemm", "gemm_strided_wgmma", "gemm_fused_wgmma")  # (the split products read planes they made)
SPLIT_ROLES = tuple(f.role for f in SPLIT_FORMATS.values())  # the kernels that make the split products' operands
SPLIT_ROW = 32  # a plane row in the problem's fp32 elements: 128 bytes, the TMA box row of the split products
DECODE_ROWS = 16  # see ranked_recipes
SHORT_SIDE = 128  # see ranked_recipes
NEAR_TIE = 0.01  # see ranked_recipes
WASTE_MARGIN = 0.1  # see ranked_recipes
TMA_MAX_STRIDE = 2**40  # bytes: a tensor map's strides must stay below it
# Stream-K (the gemm_fused_wgmma kernels with `i32:sk_tiles` and a `ptr:work` workspace; StreamK in
# cu/common/sm90_gemm.cuh): the workspace's int32 flags and counters (kSkFlagSlots) and one fp32 partial tile per CTA
# (two consumers of 64 x 256 each)
SK_FLAG_BYTES = 2048 * 4
SK_PART_BYTES = 128 * 256 * 4
SK_MAX_CTAS = 512  # the flags' slots, two per CTA
# Stream-K only behind at most this many waves of whole tiles: on the H100 it gained 5-14% after 0-3 waves
# (1024 x {6144, 14336} x 4096: 91.0 -> 79.8, 188.7 -> 168.7 us) but lost 1-1.5% after 23 and 62 (16384 x 6144 x
# 4096: 1087 -> 1104 us, 16384 x 8192 x 8192: 2904 -> 2934): there the plain kernel's short last wave runs on few
# SMs at the clock the power cap then allows, cheaper than the model's full-load rate says.
SK_MAX_WAVES = 4
# ... and with at most this many pieces a tile: one per CTA (the fix-up the cost model charges was measured with
# 2-4 pieces, the owner adding its peers' partials, and 8-132, the peers sharing the sum first)
SK_MAX_SPLITS = SK_MAX_CTAS
SK_MAX_BLOCKS = 2**31 - 1  # the kernel cuts K at j x k-blocks / pieces in 32 bits
# K groups (the util_sm90 kernels' `ptr:work`, `i32:k_groups`; cu/util_sm90.cu): `k_groups` clusters of the same
# tile along grid.z, each on its own share of K, the last to finish adding the others' sums from the workspace. For
# a few tiles with a long K (K >> M N), where split-K's cluster of at most 8 leaves most SMs idle. Offered unbatched
# and unicast, with the largest group counts that fill a wave of the split's clusters, and a share of at least
# KG_MIN_BLOCKS k-blocks per CTA, to the fp16/bf16 kernels of KG_TILE_ROWS x at most KG_TILE_COLS tiles, where C
# fills a tile: H100, fp16, L2 flushed, 128 x 128 x 131072: m128n64 splits 8 x 7 groups 45.6 us, splits 4 x 15
# 45.2-45.9, m128n128 8 x 15 46.5 (stream-K 48.1-48.6, torch 39.2-39.7), but the 64-row tiles in clusters 48.5-57.5,
# 256-wide tiles 54.4-59.0 at 256 x 256 x 65536 (the split-K pick there: 48.0), and m128n64 at 64 x 64 x 65536 21.0-21.7
# (the decode kernel 19.5-20.3)
K_GROUPS = "k_groups"
KG_ROLE = "gemm_strided_wgmma"
KG_DTYPES = ("f16", "bf16")
KG_TILE_ROWS, KG_TILE_COLS = 128, 128
KG_MIN_BLOCKS = 4
KG_MAX = 512
KG_COUNT_ALIGN = 256  # bytes: the fp32 partials follow the int32 counts (tiles x splits) at this alignment
# Deferred K groups (`k_sum` with `k_groups`): the GEMM writes each group's fp32 sums to a plane of C's shape and a
# second launch (the "kgroups_sum" role) adds the planes in group order and applies the epilogue, so that many groups
# of small tiles (the last group's one CTA would read every other group's partial alone) sum across the SMs.
# Offered unclustered (splits 1), with the groups that fill the SMs, without SwiGLU, to the tiles of at most
# KG_TILE_COLS columns and KG_TILE_ROWS rows (half as many where M is shorter). H100, fp16, L2 flushed, against the
# clustered K groups or split-K: 128 x 128 x 131072 m128n64 x 64 groups 44.8 -> 40.7 us, 256 x 256 x 65536 m128n64 x 16
# 47.9 -> 41.3, 512 x 512 x 32768 m128n128 x 8 54.3 -> 47.4, 64 x 64 x 65536 m64n64 x 64-132 18.4-19.0 (the decode
# kernel 20.0); the 64-row tiles ran 2-4 us slower than the 128-row ones wherever C fills both.
K_SUM = "k_sum"
KG_SUM_ROLE = "kgroups_sum"
KG_SUM_MIN_BLOCKS = 2  # (no group waits on another: short shares cost only their launch, which the model prices)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


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


def c_by_pointer(c: View, itemsize: int) -> bool:
    """Whether a gemm_fused_wgmma launch stores `c` through ptr:C (kCNoMap, cu/CONTRACT.md) rather than its TMA map:
    a C off TMA's rules, or whose width does not end on a 16-byte run (the TMA store writes whole runs)."""
    return not fits(c, c.rows, c.cols, tma=True, align=16, itemsize=itemsize) or c.cols * itemsize % 16 != 0


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


def pairs_swiglu(spec: KernelSpec) -> bool:
    """Whether matmul lets a GEMM pair SwiGLU's gate and up columns itself (else: the plain product, then the
    SwiGLU copy). The util_sm90 split-K kernels declare it, but on the H100 one of them (m64n128 nn, 233 x 92 x
    115, beta != 0) stopped with an illegal instruction: not used until that is understood."""
    return spec.swiglu and spec.role != "gemm_strided_wgmma"


def k_groups_offered(tiles: int, splits: int, k_blocks: int, sm_count: int, wave: int,
                     min_blocks: int = KG_MIN_BLOCKS) -> list[int]:
    """The K-group counts offered to a launch of `tiles` tiles split `splits` ways: as many groups as fill the SMs
    (sm_count) and as fill the wave that clusters of `splits` get (wave, the cost model's cta_slots), each at
    least 2 and leaving every CTA `min_blocks` k-blocks."""
    out = []
    for slots in (sm_count, wave):
        g = min(slots // (tiles * splits), k_blocks // (splits * min_blocks), KG_MAX)
        if g >= 2 and g not in out:
            out.append(g)
    return out


def k_groups_work_bytes(tiles: int, splits: int, groups: int, tile: tuple[int, int]) -> int:
    """The K groups' workspace: the int32 counts, then every group's fp32 partial of every tile."""
    return _round_up(tiles * splits * 4, KG_COUNT_ALIGN) + tiles * groups * tile[0] * tile[1] * 4


def k_sum_work_bytes(M: int, N: int, groups: int) -> int:
    """Deferred K groups' workspace: a fp32 plane of M rows of N rounded up to 4 columns per group."""
    return groups * M * _round_up(N, 4) * 4


def streamk(spec: KernelSpec) -> bool:
    """A stream-K kernel: its grid and stream-K tiles are the recipe's, and it takes a workspace."""
    return spec.role == "gemm_fused_wgmma" and "i32:sk_tiles" in spec.params


def streamk_tiles(tiles: int, ctas: int) -> int:
    """How many of the last tiles a stream-K launch of `ctas` CTAs cuts into pieces along K: the last partial
    wave (all of them where there are fewer tiles than CTAs); 0 where that would not cut them in two at least
    (whole waves, or a last wave of more than half the CTAs) or where more than SK_MAX_WAVES whole waves come
    before it: the plain persistent kernel runs those."""
    sk = tiles % ctas
    return sk if sk and ctas // sk >= 2 and tiles // ctas <= SK_MAX_WAVES else 0


def streamk_grids(tiles: int, k_blocks: int, sm_count: int) -> list[int]:
    """The grids a stream-K route is offered with: one CTA per SM (at most SK_MAX_CTAS), and where there are fewer
    tiles than SMs, as many CTAs as cut each tile into the most pieces allowed (SK_MAX_SPLITS, a k-block each)."""
    sms = min(sm_count, SK_MAX_CTAS)
    out = [sms]
    if tiles < sms:
        g = tiles * min(sms // tiles, k_blocks, SK_MAX_SPLITS)
        if g not in out:
            out.append(g)
    return out


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


def copy_kernel(manifest: Manifest, dtype: str, role: str = "copy") -> str | None:
    """The kernel with the "copy" role (or `role`) for `dtype`, or None if the build has none."""
    for spec in manifest.kernels.values():
        if spec.role == role and spec.dtype == dtype:
            return spec.name
    return None


class _NoCopyKernel(Exception):
    """The recipe needs a copy and the build has no "copy" kernel for the dtype."""


def _prod(xs: Any) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


class _Glue:
    """The temporaries and copy steps a recipe collects before its GEMM."""

    def __init__(self, manifest: Manifest, dtype: str, batch: tuple[int, ...] = ()):
        self.manifest = manifest
        self.copier = copy_kernel(manifest, dtype)
        self.splitters = {f.role: copy_kernel(manifest, dtype, f.role) for f in SPLIT_FORMATS.values()}
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
            raise _NoCopyKernel
        # a buffer that only a TMA map reads gets whole 128-byte rows: its boxes then start on L2
        # lines (a 4104-element fp16 row is 8208 bytes, so every box row would straddle two)
        stride = _round_up(cols, max(1, TMA_ROW_BYTES // self.isz)) if tma and rows > 1 else cols
        copies, index, count = self._per_matrix(src)
        bs = tuple(i * rows * stride for i in index)
        self.temps.append(Temp(name, rows, cols, 0 if stride == cols else stride, count))
        dst = View.make(name, rows, cols, stride, 1, batch_align(256, bs, self.isz), bs)
        self.steps.append(Copy(self.copier, src, dst, src.rows, src.cols, epilogue=False, batch=copies))
        self.copy_bytes += (src.rows * src.cols + rows * cols) * self.isz * _prod(copies)
        return dst

    def split(self, fmt: SplitFormat, name: str, src: View) -> tuple[View, View | None]:
        """A split product's operand of `src` (rows x K): its head and residual planes of rows x SPLIT_ROW, 2
        ceil(K / fmt.block) of them stacked (their stack as the view), filled by a split step; and for a scaled
        format the int32 exponents of its rows (1 x rows), which the same step writes. Batched: one stack (and one
        row of exponents) per matrix along the kernel levels `src` varies on, as `pack` lays out its copies."""
        kernel = self.splitters[fmt.role]
        if kernel is None:
            raise _NoCopyKernel
        planes = 2 * -(-src.cols // fmt.block)
        copies, index, count = self._per_matrix(src)
        stack = planes * src.rows * SPLIT_ROW
        self.temps.append(Temp(name, planes * src.rows, SPLIT_ROW, 0, count))
        dst = View.make(name, planes * src.rows, SPLIT_ROW, SPLIT_ROW, 1, 256, tuple(i * stack for i in index))
        shift = None
        if fmt.scaled:
            self.temps.append(Temp(name + "e", 1, src.rows, 0, count))
            shift = View.make(name + "e", 1, src.rows, src.rows, 1, 256, tuple(i * src.rows for i in index))
        self.steps.append(Copy(kernel, src, dst, src.rows, src.cols, epilogue=False, batch=copies, split=fmt.role,
                               shift=shift))
        self.copy_bytes += (fmt.reads * src.rows * src.cols + dst.rows * dst.cols) * self.isz * _prod(copies)
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

    def recipe(self, route: Route, *last: Any) -> Recipe:
        return Recipe(route, tuple(self.temps), tuple(self.steps) + last, self.copy_bytes,
                      self.batch[:-KERNEL_LEVELS])


def recipe_for(route: Route, prob: Problem, manifest: Manifest) -> Recipe | None:
    """What running `route` on `prob` takes, or None if the route cannot run it."""
    if route.transpose and prob.swiglu:
        return None  # the gate/up halves are column blocks of C
    if prob.swiglu and route.opts().get(K_SUM):
        return None  # (the sum step would have to pair them; the SwiGLU fallback's GEMM applies the bias itself)
    p = prob.transposed() if route.transpose else prob
    spec = manifest.kernels.get(route.kernel)
    if spec is None or spec.dtype != p.dtype or spec.role in ("copy", *SPLIT_ROLES, KG_SUM_ROLE):
        return None
    if p.batched and (spec.role == "gemm" or int(route.opts().get("splits", 1)) * _prod(p.kernel_batch) >
                      MAX_GRID_BATCH):
        return None  # the catalogue ABI has no batch; grid.z holds splits x the kernel's batch
    if spec.role != "gemm" and acc_variant(spec, p.dtype, p.acc) is False:
        return None  # (the catalogue role resolves its acc variant in _recipe)
    if spec.role in SPLIT_FORMATS and (p.swiglu or (p.batched and not SPLIT_FORMATS[spec.role].batched)):
        return None  # the products' producer loads B's rows n0 + c, never a gate/up pair; 3xTF32 takes one matrix
    if p.epi is not None:  # a build whose kernels predate the fused epilogue: never a silently dropped epilogue
        applier = _epilogue_kernel(p, spec, manifest)
        if applier is None or not applies_epilogue(applier):
            return None
    try:
        if p.swiglu and not pairs_swiglu(spec):
            return _swiglu_after(route, p, spec, _Glue(manifest, p.dtype, p.batch), manifest)
        return _recipe(route, p, spec, _Glue(manifest, p.dtype, p.batch))
    except _NoCopyKernel:
        return None


def _epilogue_kernel(p: Problem, spec: KernelSpec, manifest: Manifest) -> KernelSpec | None:
    """The kernel that applies p's epilogue on a route of `spec`: the GEMM itself (the strided and fused
    roles), else the copy that follows it (catalogue kernels, SwiGLU where the GEMM cannot pair columns)."""
    if spec.role != "gemm" and not (p.swiglu and not pairs_swiglu(spec)):
        return spec
    copier = copy_kernel(manifest, p.dtype)
    return manifest.kernels[copier] if copier else None


def _swiglu_after(route: Route, p: Problem, spec: KernelSpec, glue: _Glue, manifest: Manifest) -> Recipe | None:
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
    full = replace(p, c=_dense("tS", p.M, p.N), plain=True, beta_zero=True, epi=before, bias=p.bias)
    inner = _recipe(route, full, spec, glue)
    if inner is None:
        return None
    after = Epilogue(None, p.epi.activation, p.epi.scale)
    out = Copy(glue.copier, full.c, p.c, p.M, p.N, epilogue=True, epi=after, scalars="b" if fuses else "ab")
    nbytes = (p.M * p.N + p.c.rows * p.c.cols * (1 if p.beta_zero else 2)) * glue.isz
    # the user's beta belongs to the SwiGLU copy alone; alpha to the GEMM where it applies the epilogue
    steps = tuple(replace(s, epilogue=fuses and isinstance(s, Gemm), scalars="a") for s in inner.steps)
    return replace(inner, temps=inner.temps + (Temp("tS", p.M, p.N),), steps=steps + (out,),
                   copy_bytes=inner.copy_bytes + nbytes)


def _recipe(route: Route, p: Problem, spec: KernelSpec, glue: _Glue) -> Recipe | None:
    isz = glue.isz
    M, N, K = p.M, p.N, p.K
    pack = glue.pack
    opts = route.opts()
    splits = int(opts.get("splits", 1))
    if spec.role != "gemm" and "splits" in opts and (spec.role not in SPLIT_K_ROLES or splits not in SPLITS):
        return None
    mc = int(opts.get("mc", 1))
    occ = int(opts.get(OCC, 1))
    repack = bool(opts.get(PACK))
    repacked = []  # operands that fit a tensor map but are packed for the `pack` option

    def slow(v: View) -> bool:
        if repack and tma_slow_rows(v, isz):
            repacked.append(v.base)
            return True
        return False
    if mc != 1 and (mc not in spec.variants.get("mc", ()) or splits != 1 or p.batched):
        return None  # (the pair's cluster along M leaves no room for a split-K cluster or a batch in the maps)
    if occ != 1 and (occ not in spec.variants.get(OCC, ()) or splits != 1 or K_GROUPS in opts):
        return None  # (two CTAs an SM: no split-K cluster)
    fused = dict(epilogue=True, batch=p.batch, epi=p.epi, bias=p.bias)  # the kernel applies the whole epilogue
    if spec.role == "gemm_strided_simt":
        if route.transpose:
            return None  # strides are general: transposing buys nothing
        return glue.recipe(route, Gemm(route.kernel, spec.role, p.a, p.b, p.c, M, N, K, **fused))
    if spec.role in SPLIT_FORMATS:  # both operands split, whatever their layout: the kernel reads A's and B^T's planes
        fmt = SPLIT_FORMATS[spec.role]
        if spec.tile[2] != fmt.block:
            return None  # its k-block is not the split's plane
        (a3, a_shift), (b3, b_shift) = glue.split(fmt, "tA3", p.a), glue.split(fmt, "tB3", p.b.T)
        return glue.recipe(route, Gemm(route.kernel, spec.role, a3, b3, p.c, M, p.c.cols, K, splits=splits,
                                       a_shift=a_shift, b_shift=b_shift, **fused))
    if spec.role in ("gemm_strided_wgmma", "gemm_fused_wgmma"):
        # TMA maps of A and B as they are where their rows are contiguous with 16-byte-multiple
        # strides; otherwise a packed copy (B packed as N x K, which the TN kernel reads)
        a = p.a
        if not fits(a, M, K, tma=True, align=16, itemsize=isz) or slow(a):
            a = pack("tA", a, M, _round_up(K, 8), tma=True)
        if spec.layout == "NN":
            b = p.b
            if not fits(b, K, N, tma=True, align=16, itemsize=isz) or slow(b):
                return None  # the TN kernel takes this problem with a packed B^T
        else:
            b = p.b.T
            if not fits(b, N, K, tma=True, align=16, itemsize=isz) or slow(b):
                b = pack("tB", b, N, _round_up(K, 8), tma=True)
        if repack and not repacked:
            return None  # (nothing to pack: the plain route)
        unmapped = False
        if spec.role == "gemm_fused_wgmma":  # persistent, no split-K; C through a TMA store, which writes whole
            # 16-byte runs: C's width must end on one (H100: a 97 x 141 fp16 C with rows of 144 got its 3
            # padding columns zeroed). Any other C with contiguous rows goes without a map, through ptr:C.
            if "splits" in opts or ("ctas" in opts) != streamk(spec):
                return None
            unmapped = c_by_pointer(p.c, isz)
            if unmapped and not (p.c.cs == 1 and (p.c.rows == 1 or p.c.rs >= p.c.cols)):
                return None
        # (SwiGLU: the kernel's N is C's width, half of B's)
        variant = (("mc", mc),) * (mc != 1) + ((OCC, occ),) * (occ != 1)
        g = Gemm(route.kernel, spec.role, a, b, p.c, M, p.c.cols, K, variant=variant, splits=splits,
                 c_unmapped=unmapped, **fused)
        if opts.get(K_SUM) and K_GROUPS not in opts:
            return None  # (a sum of no groups)
        if K_GROUPS in opts:
            groups = opts[K_GROUPS]
            if spec.role != KG_ROLE or p.batched or mc != 1 or not isinstance(groups, int) or \
                    not 2 <= groups <= KG_MAX:
                return None
            if opts.get(K_SUM):  # the GEMM's plain sums per group, then the sum launch with the epilogue
                summer = copy_kernel(glue.manifest, p.dtype, KG_SUM_ROLE)
                if summer is None or splits != 1:
                    return None
                nbytes = k_sum_work_bytes(M, p.c.cols, groups)
                glue.temps.append(Temp("tW", 1, -(-nbytes // isz)))
                work = _dense("tW", 1, -(-nbytes // isz))
                g = replace(g, k_groups=groups, k_deferred=True, work=work, epilogue=False, epi=None, bias=None)
                return glue.recipe(route, g, GroupSum(summer, work, p.c, M, p.c.cols, groups, epi=p.epi,
                                                      bias=p.bias))
            nbytes = k_groups_work_bytes(spec.output_tiles(M, p.c.cols, p.swiglu), splits, groups, spec.tile[:2])
            glue.temps.append(Temp("tW", 1, -(-nbytes // isz)))
            g = replace(g, k_groups=groups, work=_dense("tW", 1, -(-nbytes // isz)))
        if streamk(spec):
            ctas = int(opts["ctas"])
            tiles = spec.output_tiles(M, p.c.cols, p.swiglu) * _prod(p.kernel_batch)
            nk = -(-K // spec.tile[2])
            sk = streamk_tiles(tiles, ctas) if 1 <= ctas <= SK_MAX_CTAS else 0
            pieces = streamk_splits(sk, ctas, nk) if sk else 0
            if not 2 <= pieces <= SK_MAX_SPLITS or pieces * nk > SK_MAX_BLOCKS:
                return None  # nothing to cut (the plain fused kernel), a tile of one k-block, or too many pieces
            nbytes = SK_FLAG_BYTES + ctas * SK_PART_BYTES
            glue.temps.append(Temp("tW", 1, -(-nbytes // isz)))
            g = replace(g, ctas=ctas, sk_tiles=sk, work=_dense("tW", 1, -(-nbytes // isz)))
        elif QUEUE in opts:  # the tile queue, with its counter (the dynamic order): one int32, zeroed once
            if opts[QUEUE] != 1 or 1 not in spec.variants.get(QUEUE, ()):
                return None
            glue.temps.append(Temp("tQ", 1, -(-4 // isz)))
            g = replace(g, variant=g.variant + ((QUEUE, 1),), work=_dense("tQ", 1, -(-4 // isz)))
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
        g = Gemm(route.kernel, spec.role, a, b, p.c, M, N, K, variant=(("b", b_layout),), splits=splits, **fused)
        return glue.recipe(route, g)

    # the "gemm" role: a catalogue kernel with the default ABI (dense operands implied by M, N, K) or TMA maps
    rq = spec.require
    Mk, Nk, Kk = _round_up(M, rq.get("M", 1)), _round_up(N, rq.get("N", 1)), _round_up(K, rq.get("K", 1))
    tm = tmap_operands(spec)
    a = p.a
    if spec.a_order == "col":  # the kernel reads A^T, K x M row-major (A stays an M x K view)
        if not fits(a.T, Kk, Mk, tma="A" in tm, align=spec.align, itemsize=isz) or ("A" in tm and slow(a.T)):
            a = pack("tA", a.T, Kk, Mk, tma="A" in tm).T
    elif not fits(a, Mk, Kk, tma="A" in tm, align=spec.align, itemsize=isz) or ("A" in tm and slow(a)):
        a = pack("tA", a, Mk, Kk, tma="A" in tm)
    if spec.layout == "NN":
        b = p.b
        if not fits(b, Kk, Nk, tma="B" in tm, align=spec.align, itemsize=isz) or ("B" in tm and slow(b)):
            b = pack("tB", b, Kk, Nk, tma="B" in tm)
    else:  # TN: the kernel reads B^T, N x K row-major
        b = p.b.T
        if not fits(b, Nk, Kk, tma="B" in tm, align=spec.align, itemsize=isz) or ("B" in tm and slow(b)):
            b = pack("tB", b, Nk, Kk, tma="B" in tm)
    if repack and not repacked:
        return None  # (nothing to pack: the plain route)
    c = p.c
    direct = p.plain and p.linear and fits(c, Mk, Nk, tma="C" in tm, align=spec.align, itemsize=isz) and \
        spec.out == p.dtype
    if not direct:
        if glue.copier is None or rounds_before_activation(p):
            return None
        glue.temps.append(Temp("tC", Mk, Nk))
        c = _dense("tC", Mk, Nk)
    given = {k: v for k, v in opts.items() if k in spec.variants}
    av = acc_variant(spec, p.dtype, p.acc)  # the precision rule holds whatever a route asks for
    if set(opts) - set(spec.variants) - {PACK} or av is False:
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
        glue.steps.append(Copy(glue.copier, src, p.c, M, N, epilogue=True, epi=p.epi, bias=p.bias))
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


# The catalogue's TMA-store kernels stage the whole output tile for the store with 3 ring stages, half of it (two
# passes, the second waiting for the first to be read) with 4. Where a tile is a single k-block the ring's depth
# buys nothing and the second pass is exposed: H100, fp16, 8192 x 8192 x K, three rounds in one run: K = 16 56.9-57.2
# -> 55.3-56.0 us, K = 32 54.9-55.5 -> 54.3-54.6, K = 64 54.0 -> 53.8-54.2 (K = 256: 67.6 -> 76.2, which is why the
# default stays 4).
STAGES, WHOLE_TILE_STAGES = "stages", 3
# ... and where the launch is long: from 2^39 multiply-adds up 3 stages ran 0.4-4% faster (H100, three interleaved
# rounds: fp16 8192^3 1413-1417 against 1430-1434 us, bf16 1363-1365 / 1370-1371, 16384^3 11859-12208 / 12227-12771),
# at 2^38 either way within 1%, below it 4 stages (4096^3 184.5 / 180.5); the H200 turned alike (docs/tuning_log.md,
# hgemm_sm90 and session 25).
LONG_LAUNCH_MACS = 2**39


def whole_tile_staging(spec: KernelSpec, prob: Problem) -> bool:
    """Does `spec` run `prob` with whole-tile staging (its `stages` variant at 3): a single k-block, or a launch of
    at least LONG_LAUNCH_MACS multiply-adds?"""
    return WHOLE_TILE_STAGES in spec.variants.get(STAGES, ()) and (
        prob.K <= spec.tile[2] or prob.M * prob.N * prob.K >= LONG_LAUNCH_MACS)


def candidate_routes(prob: Problem, manifest: Manifest, cc: tuple[int, int], kernel: str | None = None,
                     sm_count: int = 0) -> list[Route]:
    """Every route that could run `prob` on a GPU of compute capability cc and sm_count SMs (0: unknown, no
    stream-K or K-group routes) (before recipe_for)."""
    out: list[Route] = []
    model = CostModel.for_device(cc, sm_count, manifest)
    batch = _prod(prob.kernel_batch)
    for spec in manifest.kernels.values():
        if spec.dtype != prob.dtype or (kernel and spec.name != kernel) or not _built(manifest, spec, cc):
            continue
        if spec.role in ("copy", *SPLIT_ROLES, KG_SUM_ROLE) or (prob.batched and spec.role == "gemm"):
            continue
        if spec.role == "gemm_strided_simt":
            out.append(Route(spec.name))
            continue
        if spec.role == "gemm_fused_wgmma" and streamk(spec):  # its grid: see streamk_grids
            for t in (False, True):
                M, N = (prob.N, prob.M) if t else (prob.M, prob.N)
                tiles = spec.output_tiles(M, N, prob.swiglu) * batch
                grids = streamk_grids(tiles, -(-prob.K // spec.tile[2]), sm_count) if sm_count else []
                out += [Route(spec.name, t, (("ctas", g),)) for g in grids]
            continue
        if spec.role == "gemm_fused_wgmma":  # persistent: no split-K; the static order, or the tile queue
            orders = [()] + ([((QUEUE, 1),)] if 1 in spec.variants.get(QUEUE, ()) else [])
            out += [Route(spec.name, t, order) for t in (False, True) for order in orders]
            continue
        if spec.role in SPLIT_K_ROLES:
            if acc_variant(spec, prob.dtype, prob.acc) is False:
                continue  # (a TF32 kernel for an fp32-accuracy request: the split products' roles are that)
            for t in (False, True):
                for s in SPLITS:  # thread-block clusters are sm_90+; grid.z holds splits x batch
                    if (s == 1 or cc >= (9, 0)) and s * batch <= MAX_GRID_BATCH:
                        out.append(Route(spec.name, t, (("splits", s),)))
                    if spec.role == KG_ROLE and spec.dtype in KG_DTYPES and spec.tile[0] <= KG_TILE_ROWS and \
                            spec.tile[1] <= KG_TILE_COLS and sm_count and not prob.batched and cc >= (9, 0):
                        M, N = (prob.N, prob.M) if t else (prob.M, prob.N)
                        tiles = spec.output_tiles(M, N, prob.swiglu)
                        full = M >= spec.tile[0] and N >= spec.tile[1]
                        k_blocks = -(-prob.K // spec.tile[2])
                        for g in k_groups_offered(tiles, s, k_blocks, sm_count, model.cta_slots(spec, s)) \
                                if full and spec.tile[0] == KG_TILE_ROWS else ():
                            out.append(Route(spec.name, t, ((K_GROUPS, g), ("splits", s))))
                        # deferred: the groups that fill the SMs, on the tallest tile C fills
                        tall = spec.tile[0] == (KG_TILE_ROWS if M >= KG_TILE_ROWS else KG_TILE_ROWS // 2)
                        if s == 1 and full and tall and not prob.swiglu:
                            for g in k_groups_offered(tiles, 1, k_blocks, sm_count, sm_count, KG_SUM_MIN_BLOCKS):
                                out.append(Route(spec.name, t, ((K_GROUPS, g), (K_SUM, 1), ("splits", 1))))
                rows = prob.N if t else prob.M
                if MULTICAST in spec.variants.get("mc", ()) and cc >= (9, 0) and not prob.batched and \
                        -(-rows // spec.tile[0]) >= MULTICAST:
                    out.append(Route(spec.name, t, (("mc", MULTICAST), ("splits", 1))))
                if 2 in spec.variants.get(OCC, ()):  # two CTAs an SM (the cost model knows where it pays)
                    out.append(Route(spec.name, t, ((OCC, 2), ("splits", 1))))
            continue
        if spec.out != prob.dtype or acc_variant(spec, prob.dtype, prob.acc) is False:
            continue
        opts = ((STAGES, WHOLE_TILE_STAGES),) if whole_tile_staging(spec, prob) else ()
        for t in (False, True):
            # the catalogue's 128 x 192 kernels are for the wave fill of wide outputs; narrower than the tile, the
            # util kernels' tiles fill it better (as the tile-fill rule of ranked_recipes has it for 256-wide ones).
            # A kernel the caller names runs wherever it can.
            if kernel is None and narrow_hopper(spec) and (prob.M if t else prob.N) < spec.tile[1]:
                continue
            out.append(Route(spec.name, t, opts))
    isz = ITEMSIZE[prob.dtype]
    if any(tma_slow_rows(v, isz) for v in (prob.a, prob.b) if v.cs == 1 or v.rs == 1):
        tma_read = {s.name for s in manifest.kernels.values()
                    if s.role in PACK_ROLES and {"A", "B"} & tmap_operands(s)}
        out += [Route(r.kernel, r.transpose, tuple(sorted(r.options + ((PACK, 1),)))) for r in out
                if r.kernel in tma_read]
    return out


def _narrow_with_copies(recipe: Recipe, manifest: Manifest) -> bool:
    """A recipe that pairs the catalogue's 128 x 192 kernels with copies of the operands: not offered unless the
    caller names the kernel. Measured in
    place only (H100, fp16): 4097^3 with both operands packed ran 538.7 us on them, estimated below the util kernels'
    packed route, which ran 320."""
    gemms = [manifest.kernels[s.kernel] for s in recipe.steps if isinstance(s, Gemm)]
    return len(recipe.steps) > len(gemms) and any(narrow_hopper(s) for s in gemms)


def _gemm_tile_rows(recipe: Recipe, manifest: Manifest) -> int:
    return max(manifest.kernels[s.kernel].tile[0] for s in recipe.steps if isinstance(s, Gemm))


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

    A problem with a side of at most DECODE_ROWS (decoding) only streams B: where kernels with tiles
    that short can run it, taller tiles are not candidates (they waste most of each tile; measured on
    an H100 at M = 1..16 they ran 1.1-1.6x slower than the best short-tile kernel, which the model's
    rates alone do not see). Likewise with a side of at most SHORT_SIDE, recipes whose tiles leave half
    their area or more empty rank after the rest where others fill their tiles over twice as well (H100,
    fp16, 16384 x 64 / 128 x 4096: the 128 x 256-tile kernels ran 96.5 / 85.9 us, 128 x 64 / 128 x 128
    tiles 60.5 / 62.7, at equal estimates), unless estimated over WASTE_MARGIN below the best of those (128 x
    128 x 131072: stream-K's 128 x 256 tiles, estimated 20% below 64 x 64-tile split-K, ran 50.2 against 60.8
    us); they stay listed (autotune and the sanitizer's schedule)."""
    model = CostModel.for_device(cc, sm_count, manifest)
    out = []
    for route in candidate_routes(prob, manifest, cc, kernel, sm_count):
        recipe = recipe_for(route, prob, manifest)
        if recipe is not None and (kernel is not None or not _narrow_with_copies(recipe, manifest)):
            out.append((model.estimate_us(recipe, prob.dtype, prob.beta_zero), recipe))
    if min(prob.M, prob.N) <= DECODE_ROWS:
        out = [x for x in out if _gemm_tile_rows(x[1], manifest) <= DECODE_ROWS] or out
    wasteful = set()
    if DECODE_ROWS < min(prob.M, prob.N) <= SHORT_SIDE and out:
        fill = {id(r): tile_fill(r, manifest) for _, r in out}
        best = max(fill.values())
        filled = min(e for e, r in out if fill[id(r)] > best / 2)
        wasteful = {id(r) for e, r in out if fill[id(r)] <= best / 2 and e >= filled * (1 - WASTE_MARGIN)}
    out.sort(key=lambda x: (id(x[1]) in wasteful, x[0], model.compute_us(x[1]), x[1].route.transpose, str(x[1].route)))
    # Estimates within NEAR_TIE of the best are the same memory-bound time to the model's precision: of those
    # with the best's split count, an untransposed one goes first (H100, fp16, 64 x 14336 x 4096: 53.9-55.3 us as
    # it is, 60.1-62.8 as C^T = B^T A^T, where the weight is A, not the streamed B), then the one with the least
    # arithmetic time (H100, fp16, 256 x (2048 x 128 x 2048): 64 x 64 tiles, estimated 0.03% under 128 x 128 ones,
    # ran 1109.5 us; 128 x 128 tiles ran 1.01x cuBLAS at batch 64).
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


def describe(recipe: Recipe) -> str:
    """One line: the kernel and the glue around it (a batched step names its batch: 8x12*, the matrices
    of one launch; a loop of launches over further batch levels comes last)."""
    def batch(s: Any) -> str:
        kb = [n for n in kernel_batch(s.batch) if n > 1]
        return "x".join(map(str, kb)) + "*" if kb else ""

    def epi(s: Any) -> str:  # what the step's epilogue fuses
        if not s.epilogue:
            return ""
        scalars = {"ab": "alpha/beta", "a": "alpha", "b": "beta"}[s.scalars]
        what = ", ".join(x for x in (scalars, str(s.epi) if s.epi else "") if x)
        return f" ({what})" if isinstance(s, (Copy, GroupSum)) or s.epi else ""

    parts = []
    for s in recipe.steps:
        if isinstance(s, Copy) and s.split:
            parts.append(f"split {s.src.base}->{s.dst.base} ({split_format(s.split).label})")
        elif isinstance(s, Copy):
            parts.append(f"copy {batch(s)}{s.src.base}->{s.dst.base}{epi(s)}")
        elif isinstance(s, GroupSum):
            parts.append(f"{s.kernel} of {s.groups} groups {s.M}x{s.N}{epi(s)}")
        else:
            extra = f" splits={s.splits}" if s.splits > 1 else ""
            extra += f" k_groups={s.k_groups}" if s.k_groups > 1 else ""
            extra += " deferred" if s.k_deferred else ""
            extra += f" stream-K {s.sk_tiles} tiles over {s.ctas} CTAs" if s.ctas else ""
            extra += " dynamic tile order" if dict(s.variant).get(QUEUE) == 1 else ""
            extra += " C by pointer" if s.c_unmapped else ""
            v = ",".join(f"{k}={v}" for k, v in s.variant)
            parts.append(f"{s.kernel}{'[' + v + ']' if v else ''}{extra} {batch(s)}{s.M}x{s.N}x{s.K}{epi(s)}")
    loop = f" (x {'x'.join(map(str, recipe.loop))} launches)" if recipe.loop else ""
    return " ; ".join(parts) + loop + (" (solved as C^T = B^T A^T)" if recipe.route.transpose else "")
