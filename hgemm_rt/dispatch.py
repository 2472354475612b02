"""Which kernel `matmul` runs, and what glue it needs: pure data, no GPU (tested on the CPU).

A problem is C = alpha * A.B + beta * C with A (M x K), B (K x N), C (M x N) given as 2-D views with
arbitrary element strides. A *route* names one kernel, whether the problem is solved as it stands or
transposed (C^T = B^T . A^T, which turns column-major operands into row-major ones for free), and
its launch options. `plan_steps(route, problem)` says what that route needs: the operands that are
used in place, the ones that must first be copied into a zero-padded aligned buffer (because of
strides, alignment or a kernel's divisibility `require`), and whether the result goes through a
temporary buffer and a copy-out (alpha/beta, strides the kernel cannot store). `estimate_us` prices a
plan with the heuristic table below; `heuristic_route` takes the cheapest. `autotune.py` replaces the
estimate by measurements where the user asks for it.

Every candidate is discovered from the manifest (ladder, layout, dtype, acc, tile, require, align,
params, grid, cluster); no kernel name is written here beyond the util helpers' naming scheme
(`util_gemm_mma_<dtype>_m<BM>`, `util_gemm_simt_<dtype>`, `util_copy2d_<dtype>`), which this module
and cu/util.toml share.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .launch import default_swizzle_stride
from .manifest import KernelSpec, Manifest
from .errors import NotBuiltForDeviceError

ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}
# accumulate= values accepted per input dtype; the first is the default. "f16" on fp16 inputs *allows*
# fp16-accumulating kernels (cuBLAS COMPUTE_16F class error); "tf32" on fp32 inputs allows TF32 tensor
# cores. The stricter choice is always allowed to run (an fp32-accumulating kernel satisfies "f16").
ACCUMULATE = {"f16": ("f32", "f16"), "bf16": ("f32",), "f32": ("f32", "tf32")}

UTIL_MMA_BM = (16, 32, 64, 128)  # util_gemm_mma_<dtype>_m<BM> (cu/util.toml)
UTIL_MMA_BN = 128
SPLITS = (1, 2, 4, 8)  # cluster sizes along K (portable cluster size limit is 8)
UTIL_ALIGN = 16  # util_gemm_mma's cp.async chunks: 16-byte aligned rows, leading dims multiple of 8
TMA_ROW_BYTES = 128  # row pitch of the padded copies that TMA maps read (TMA itself needs 16)


# ---------------------------------------------------------------------------------------------------
# views and problems
# ---------------------------------------------------------------------------------------------------

def ptr_alignment(ptr: int) -> int:
    """The largest power of two (up to 256) dividing a byte address."""
    a = 1
    while a < 256 and ptr % (a * 2) == 0:
        a *= 2
    return a


@dataclass(frozen=True)
class View:
    """A 2-D operand: the user's A, B or C (or a temporary), element strides, address alignment."""

    base: str  # "A" | "B" | "C" (the user's operands) or the name of a temporary buffer
    rows: int
    cols: int
    rs: int  # row stride in elements
    cs: int  # column stride in elements
    align: int  # bytes; alignment of the address of element (0, 0)

    @staticmethod
    def make(base: str, rows: int, cols: int, rs: int, cs: int, align: int) -> "View":
        # A stride of a length-1 dimension is never used: normalise it so that a single row or column
        # is recognised as dense whatever stride its producer reported.
        if cols == 1:
            cs = 1
        if rows == 1:
            rs = cols
        return View(base, rows, cols, rs, cs, align)

    @property
    def T(self) -> "View":
        return View.make(self.base, self.cols, self.rows, self.cs, self.rs, self.align)

    @property
    def row_major(self) -> bool:
        return self.cs == 1 and (self.rows == 1 or self.rs >= self.cols)

    def dense(self) -> bool:
        return self.cs == 1 and (self.rows == 1 or self.rs == self.cols)

    def sig(self) -> str:
        return f"{self.rows}x{self.cols}:{self.rs},{self.cs}@{self.align}"  # align: kernels need up to 32


@dataclass(frozen=True)
class Problem:
    dtype: str
    acc: str  # the accumulate= request
    a: View  # M x K
    b: View  # K x N
    c: View  # M x N
    plain: bool  # alpha == 1 and beta == 0: a kernel may store straight into C
    beta_zero: bool  # beta == 0: C is write-only

    @property
    def M(self) -> int:
        return self.a.rows

    @property
    def N(self) -> int:
        return self.b.cols

    @property
    def K(self) -> int:
        return self.a.cols

    @functools.cached_property
    def key_str(self) -> str:
        return self.key()

    def key(self) -> str:
        """The autotune-cache key: everything a route's validity and speed depend on."""
        mode = "plain" if self.plain else ("axpby" if not self.beta_zero else "alpha")
        return (f"{self.dtype}/{self.acc}/{self.M}x{self.N}x{self.K}/A{self.a.sig()}/B{self.b.sig()}/"
                f"C{self.c.sig()}/{mode}")

    def transposed(self) -> "Problem":
        """C^T = B^T . A^T: the same product with the operands' roles swapped."""
        return replace(self, a=self.b.T, b=self.a.T, c=self.c.T)


@dataclass(frozen=True)
class Route:
    kernel: str
    transpose: bool = False
    options: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) pairs: variant axes, swizzle, splits

    def opts(self) -> dict[str, Any]:
        return dict(self.options)

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "transpose": self.transpose, "options": dict(self.options)}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Route":
        opts = d.get("options", {})
        if not isinstance(d.get("kernel"), str) or not isinstance(d.get("transpose"), bool) or \
                not isinstance(opts, dict) or not all(isinstance(v, (str, int, bool)) for v in opts.values()):
            raise ValueError(f"malformed route {d!r}")
        return Route(d["kernel"], d["transpose"], tuple(sorted(opts.items())))

    def __str__(self) -> str:
        o = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.kernel}{'[T]' if self.transpose else ''}{'(' + o + ')' if o else ''}"


# ---------------------------------------------------------------------------------------------------
# plans (what a route needs), still pure data
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Temp:
    name: str
    rows: int
    cols: int  # row-major, the problem's dtype
    stride: int = 0  # elements between rows (0: cols, dense)

    @property
    def row_stride(self) -> int:
        return self.stride or self.cols


@dataclass(frozen=True)
class Copy:
    """util_copy2d: dst (rows x cols) = alpha * src (zero outside src_rows x src_cols) + beta * dst."""

    src: View
    dst: View
    src_rows: int
    src_cols: int
    epilogue: bool  # True: the user's alpha/beta; False: a plain copy (alpha 1, beta 0)


@dataclass(frozen=True)
class Gemm:
    kernel: str
    kind: str  # "catalog" (the default ABI), "mma" / "wgmma" (util_gemm_(w)mma), "simt" (util_gemm_simt)
    a: View
    b: View  # catalog: K x N (NN) or N x K (TN) as the kernel takes it; mma: as given (see b_layout)
    c: View
    M: int
    N: int
    K: int
    variant: tuple[tuple[str, Any], ...] = ()
    swizzle: bool = False
    swizzle_stride: int | None = None
    splits: int = 1
    epilogue: bool = False  # the kernel applies the user's alpha/beta itself


@dataclass(frozen=True)
class PlanSpec:
    route: Route
    temps: tuple[Temp, ...]
    steps: tuple[Any, ...]  # Copy | Gemm, in order
    copy_bytes: int = 0
    notes: tuple[str, ...] = field(default=())


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _tmap_operands(spec: KernelSpec) -> set[str]:
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


def plan_steps(route: Route, prob: Problem, manifest: Manifest) -> PlanSpec | None:
    """What running `route` on `prob` takes, or None if the route cannot run it."""
    p = prob.transposed() if route.transpose else prob
    spec = manifest.kernels.get(route.kernel)
    if spec is None or spec.dtype != p.dtype:
        return None
    isz = ITEMSIZE[p.dtype]
    M, N, K = p.M, p.N, p.K
    temps: list[Temp] = []
    steps: list[Any] = []
    copy_bytes = 0

    def pack(name: str, src: View, rows: int, cols: int, tma: bool = False) -> View:
        nonlocal copy_bytes
        # a buffer that only a TMA map reads gets whole 128-byte rows: its boxes then start on L2
        # lines (a 4104-element fp16 row is 8208 bytes, so every box row would straddle two)
        stride = _round_up(cols, max(1, TMA_ROW_BYTES // isz)) if tma and rows > 1 else cols
        temps.append(Temp(name, rows, cols, 0 if stride == cols else stride))
        dst = View.make(name, rows, cols, stride, 1, 256)
        steps.append(Copy(src, dst, src.rows, src.cols, epilogue=False))
        copy_bytes += (src.rows * src.cols + rows * cols) * isz
        return dst

    opts = route.opts()
    if spec.ladder == "util":
        if route.kernel.startswith("util_gemm_simt_"):
            if route.transpose:
                return None  # strides are general: transposing buys nothing
            return PlanSpec(route, (), (Gemm(route.kernel, "simt", p.a, p.b, p.c, M, N, K, epilogue=True),))
        splits = int(opts.get("splits", 1))
        if splits not in SPLITS:
            return None
        if route.kernel.startswith("util_gemm_wgmma_"):
            # TMA maps of A and B as they are where their rows are contiguous with 16-byte-multiple
            # strides; otherwise a packed copy (B packed as N x K, which the tn kernel reads)
            a = p.a
            if not fits(a, M, K, tma=True, align=16, itemsize=isz):
                a = pack("tA", a, M, _round_up(K, 8), tma=True)
            if spec.layout == "NN":
                b = p.b
                if not fits(b, K, N, tma=True, align=16, itemsize=isz):
                    return None  # the tn kernel takes this problem with a packed B^T
            else:
                b = p.b.T
                if not fits(b, N, K, tma=True, align=16, itemsize=isz):
                    b = pack("tB", b, N, _round_up(K, 8), tma=True)
            g = Gemm(route.kernel, "wgmma", a, b, p.c, M, N, K, splits=splits, epilogue=True)
            return PlanSpec(route, tuple(temps), tuple(steps) + (g,), copy_bytes)
        if not route.kernel.startswith("util_gemm_mma_"):
            return None
        a = p.a
        if not (a.cs == 1 and a.align >= UTIL_ALIGN and (a.rows == 1 or a.rs % 8 == 0)):
            a = pack("tA", a, M, _round_up(K, 8))
        b = p.b
        if b.cs == 1 and b.align >= UTIL_ALIGN and (b.rows == 1 or b.rs % 8 == 0):
            b_layout = "row"
        elif b.rs == 1 and b.align >= UTIL_ALIGN and (b.cols == 1 or b.cs % 8 == 0):
            b_layout = "col"
        else:
            b = pack("tB", b.T, N, _round_up(K, 8)).T  # N x K row-major, seen as K x N
            b_layout = "col"
        g = Gemm(route.kernel, "mma", a, b, p.c, M, N, K, variant=(("b", b_layout),), splits=splits, epilogue=True)
        return PlanSpec(route, tuple(temps), tuple(steps) + (g,), copy_bytes)

    # a catalogue kernel with the default ABI (dense operands implied by M, N, K) or TMA maps
    rq = spec.require
    Mk, Nk, Kk = _round_up(M, rq.get("M", 1)), _round_up(N, rq.get("N", 1)), _round_up(K, rq.get("K", 1))
    tm = _tmap_operands(spec)
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
    direct = prob.plain and fits(c, Mk, Nk, tma="C" in tm, align=spec.align, itemsize=isz) and spec.out == p.dtype
    if not direct:
        temps.append(Temp("tC", Mk, Nk))
        c = _dense("tC", Mk, Nk)
    variant = {}
    if "acc" in spec.variants:
        av = acc_variant(spec, p.dtype, p.acc)
        if av is False:
            return None
        variant["acc"] = av
    for axis, values in spec.variants.items():
        if axis != "acc":
            v = opts.get(axis, values[-1] if axis == "stages" else values[0])
            if v not in values:
                return None
            variant[axis] = v
    swz, stride = False, None
    if spec.grid == "tiles+swizzle":
        stride = default_swizzle_stride(Nk)
        swz = bool(stride) and stride % spec.tile[1] == 0
        stride = stride if swz else None
    steps.append(Gemm(route.kernel, "catalog", a, b, c, Mk, Nk, Kk, variant=tuple(variant.items()),
                      swizzle=swz, swizzle_stride=stride))
    if not direct:
        src = View.make("tC", M, N, Nk, 1, 256)
        steps.append(Copy(src, p.c, M, N, epilogue=True))
        copy_bytes += (2 * M * N + (0 if prob.beta_zero else M * N)) * isz
    return PlanSpec(route, tuple(temps), tuple(steps), copy_bytes)


# ---------------------------------------------------------------------------------------------------
# candidates and the heuristic table
# ---------------------------------------------------------------------------------------------------

def _built(manifest: Manifest, spec: KernelSpec, cc: tuple[int, int]) -> bool:
    try:
        manifest.select(spec, cc)
        return True
    except NotBuiltForDeviceError:
        return False


def candidate_routes(prob: Problem, manifest: Manifest, cc: tuple[int, int], kernel: str | None = None
                     ) -> list[Route]:
    """Every route that could run `prob` on a GPU of compute capability cc (before plan_steps)."""
    out: list[Route] = []
    for spec in manifest.kernels.values():
        if spec.dtype != prob.dtype or (kernel and spec.name != kernel) or not _built(manifest, spec, cc):
            continue
        if spec.ladder == "util":
            if spec.name.startswith("util_gemm_simt_"):
                out.append(Route(spec.name))
            elif spec.name.startswith(("util_gemm_mma_", "util_gemm_wgmma_")):
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


# Sustained TFLOPS of the best kernel of each class once the grid is full, on an H100/H200 with fp16
# inputs (GPU.md reference points and scripts/matmul_bench.py runs on an H200: Hopper persistent
# ~775 at 4096^3, util_gemm_mma ~217, SGEMM 8x8 ~40, SIMT fp32 ~20). Only the ratios matter: they rank
# the classes; the wave, tile and bandwidth terms of gemm_us decide between a big tile and split-K.
LADDER_TFLOPS = {"hopper": 640.0, "cute": 430.0, "mma": 250.0, "wmma": 180.0, "cuda": 20.0, "sgemm": 40.0}
LADDER_FLOOR = 0.25  # the first rung of a ladder runs at about this fraction of its last (naive kernels)
HOPPER_PERSISTENT_BONUS = 40.0  # persistent grid, grouped tile order
HOPPER_CLUSTER_BONUS = -3.0  # B multicast across a 2-CTA cluster: no gain on the H200 (autotune, GPU time:
# 28.6 vs 29.6 us at 2048^3, 180.8 vs 182.1 at 4096^3, 1439 vs 1437 at 8192^3), and pairs schedule less freely
HOPPER_TMA_STORE_BONUS = 80.0  # epilogue overlapped with the next tile (H200: 180 vs 198 us at 4096^3)
ODD_N_DIRECT_STORE = 0.85  # direct-store epilogues fall back to element stores when N is odd (4095^3)
TF32_TFLOPS = 120.0
UTIL_MMA_TFLOPS = {16: 70.0, 32: 120.0, 64: 170.0, 128: 210.0}  # measured ~217 at 4096^3 (H200)
UTIL_WGMMA_TFLOPS = {(64, 256): 520.0, (128, 256): 660.0,  # m128: 675 at 4096^3 without split (H200)
                     (64, 128): 400.0, (128, 128): 560.0,  # narrower tiles re-read A more often
                     (64, 64): 300.0, (128, 64): 450.0}
UTIL_SIMT_TFLOPS = {"f16": 15.0, "bf16": 15.0, "f32": 20.0}
REUSE_FULL = 42.0  # BM*BN/(BM+BN) of a 128 x 64 tile: smaller tiles re-read operands from L2 more
DRAM_BYTES_PER_S = 2.6e12  # achievable on H100 SXM / H200 (3.35 / 4.8 TB/s peak)
COPY_BYTES_PER_S = 2.5e12  # util_copy2d, measured on the H200 (see copy_us)
COPY_TRANSPOSE_BYTES_PER_S = 1.5e12
COPY_UNALIGNED_BYTES_PER_S = 0.75e12
SM_BYTES_PER_S = 120e9  # ~64 B/clk from L2 per SM: bounds how fast one CTA streams its operand panels
LAUNCH_US = 2.5  # GPU-side cost of one more kernel in the sequence
SMEM_BYTES_PER_S = 200e9  # one SM writing and re-reading its fp32 partial tile (util GEMM epilogue)
DSMEM_BYTES_PER_S = 60e9  # one SM summing its rows of the cluster's partial tiles (split-K epilogue)


def _step_rank(spec: KernelSpec, manifest: Manifest | None) -> float:
    """0 for the first rung of the kernel's ladder (same dtype and accumulation), 1 for the last."""
    if manifest is None:
        return 1.0
    steps = [s.step for s in manifest.kernels.values()
             if s.ladder == spec.ladder and s.dtype == spec.dtype and s.acc == spec.acc]
    lo, hi = min(steps), max(steps)
    return 1.0 if hi == lo else (spec.step - lo) / (hi - lo)


def kernel_tflops(spec: KernelSpec, bm: int = 0, manifest: Manifest | None = None) -> float:
    if spec.ladder == "util":
        if spec.name.startswith("util_gemm_mma_"):
            return UTIL_MMA_TFLOPS.get(bm, 100.0)
        if spec.name.startswith("util_gemm_wgmma_"):
            return UTIL_WGMMA_TFLOPS.get((spec.tile[0], spec.tile[1]), 400.0)
        return UTIL_SIMT_TFLOPS.get(spec.dtype, 6.0)
    if spec.ladder == "sgemm" and spec.acc == "tf32":
        rate = TF32_TFLOPS
    else:
        rate = LADDER_TFLOPS.get(spec.ladder, 10.0)
    if spec.ladder == "hopper":
        if spec.grid == "persistent":
            rate += HOPPER_PERSISTENT_BONUS
        if spec.cluster != (1, 1, 1):
            rate += HOPPER_CLUSTER_BONUS
        if "tmap:C" in spec.params:
            rate += HOPPER_TMA_STORE_BONUS
    if spec.ladder != "hopper":  # the Hopper steps are alternatives, not a maturity ladder
        rate *= LADDER_FLOOR + (1 - LADDER_FLOOR) * _step_rank(spec, manifest)
    BM, BN, _ = spec.tile
    return rate * min(1.0, BM * BN / (BM + BN) / REUSE_FULL)


def gemm_us(spec: KernelSpec, g: Gemm, dtype: str, sm_count: int, manifest: Manifest | None = None) -> float:
    """Estimated microseconds of one GEMM launch: the slowest of compute (at the class rate, scaled by
    how evenly the CTAs spread over the SMs), DRAM traffic, and the operand panels one SM must stream."""
    isz = ITEMSIZE[dtype]
    BM, BN, _ = spec.tile
    tiles = math.ceil(g.M / BM) * math.ceil(g.N / BN) * g.splits
    load = math.ceil(tiles / sm_count)  # CTAs on the busiest SM
    eff = tiles / (load * sm_count)
    Mt, Nt = math.ceil(g.M / BM) * BM, math.ceil(g.N / BN) * BN  # what the tiles compute, wasted or not
    rate = kernel_tflops(spec, BM, manifest)
    if spec.ladder != "util" and "ptr:C" in spec.params and g.N % 2:
        rate *= ODD_N_DIRECT_STORE
    compute = 2.0 * Mt * Nt * g.K / (rate * 1e12 * eff)
    memory = (g.M * g.K + g.K * g.N + g.M * g.N) * isz / DRAM_BYTES_PER_S
    panel = load * (BM + BN) * (g.K / g.splits) * isz / SM_BYTES_PER_S
    epilogue = 0.0
    if g.kind in ("mma", "wgmma"):  # the fp32 tile goes through shared memory (and DSMEM when split)
        tile_bytes = BM * BN * 4
        epilogue = load * (tile_bytes / SMEM_BYTES_PER_S + (tile_bytes / DSMEM_BYTES_PER_S if g.splits > 1 else 0.0))
    return (max(compute, memory, panel) + epilogue) * 1e6


def copy_us(c: Copy, dtype: str, beta_zero: bool = True) -> float:
    """util_copy2d: bytes over the rate its access pattern reaches (H200, --breakdown): a row-major
    destination with 16-byte rows ~2.5 TB/s whatever the source's order, a column-major destination
    ~1.5, a destination whose rows are not 16-byte aligned (4095-wide C: element stores) ~0.75."""
    isz = ITEMSIZE[dtype]
    nbytes = (c.src_rows * c.src_cols + c.dst.rows * c.dst.cols) * isz
    if c.epilogue and not beta_zero:
        nbytes += c.dst.rows * c.dst.cols * isz
    if c.dst.cs != 1 and c.dst.rows > 1:
        rate = COPY_TRANSPOSE_BYTES_PER_S
    elif c.dst.align < 16 or (c.dst.rows > 1 and c.dst.rs * isz % 16):
        rate = COPY_UNALIGNED_BYTES_PER_S
    else:
        rate = COPY_BYTES_PER_S
    return nbytes / rate * 1e6


def estimate_us(plan: PlanSpec, manifest: Manifest, dtype: str, sm_count: int, beta_zero: bool = True) -> float:
    t = 0.0
    for step in plan.steps:
        if isinstance(step, Gemm):
            t += gemm_us(manifest.kernels[step.kernel], step, dtype, sm_count, manifest)
        else:
            t += copy_us(step, dtype, beta_zero)
    return t + LAUNCH_US * len(plan.steps)


def ranked_plans(prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int,
                 kernel: str | None = None) -> list[tuple[float, PlanSpec]]:
    """Every runnable plan with its estimate, cheapest first."""
    out = []
    for route in candidate_routes(prob, manifest, cc, kernel):
        plan = plan_steps(route, prob, manifest)
        if plan is not None:
            out.append((estimate_us(plan, manifest, prob.dtype, sm_count, prob.beta_zero), plan))
    out.sort(key=lambda x: (x[0], str(x[1].route)))
    return out


def heuristic_plan(prob: Problem, manifest: Manifest, cc: tuple[int, int], sm_count: int,
                   kernel: str | None = None) -> PlanSpec | None:
    ranked = ranked_plans(prob, manifest, cc, sm_count, kernel)
    return ranked[0][1] if ranked else None


def describe(plan: PlanSpec) -> str:
    """One line: the kernel and the glue around it."""
    parts = []
    for s in plan.steps:
        if isinstance(s, Copy):
            parts.append(f"copy {s.src.base}->{s.dst.base}" + (" (alpha/beta)" if s.epilogue else ""))
        else:
            extra = f" splits={s.splits}" if s.splits > 1 else ""
            v = ",".join(f"{k}={v}" for k, v in s.variant)
            parts.append(f"{s.kernel}{'[' + v + ']' if v else ''}{extra} {s.M}x{s.N}x{s.K}")
    return " ; ".join(parts) + (" (solved as C^T = B^T A^T)" if plan.route.transpose else "")

