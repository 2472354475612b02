"""The description of a matmul, as pure data (no GPU, tested on the CPU).

Vocabulary of the matmul stack, one word per thing:
- `View`: a 2-D operand (the user's A, B, C or a temporary) with element strides and address alignment,
  and for a batched problem its stride along each batch level (0 where it is broadcast).
- `Problem`: C = alpha * A.B + beta * C as views, dtype and the accumulate= request; batched: one such
  product per index of the batch levels `batch` (outermost first). The kernels take the last two levels
  in one launch (grid.z, see KERNEL_LEVELS); levels before them, where a call has more that do not
  merge, are a loop of launches over pointer offsets (`Problem.loop`).
- `Route`: one kernel, whether the problem is solved as it stands or transposed (C^T = B^T A^T), and
  its launch options; the planner chooses it, the tuning cache remembers the measured best.
- `Recipe`: what a route needs to run a problem: temporaries (`Temp`), then `Copy`, `Split`, `Gemm` and
  `GroupSum` steps (each a kernel of a role, hgemm_rt/roles/).
- `Execution` (executor.py): a Recipe made runnable on one device: temporaries allocated, launches
  prepared. `Matmul` (api.py): the public plan object that owns the choice and its Execution.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Mapping

from .dtypes import ITEMSIZE
from .epilogue import Epilogue

KERNEL_LEVELS = 2  # batch levels a batched kernel takes (outer, inner: grid.z = splits x outer x inner)
MAX_GRID_BATCH = 65535  # grid.z: splits x the kernel levels' batch must not exceed it
# accumulate= values accepted per input dtype; the first is the default. "f16" on fp16 inputs *allows*
# fp16-accumulating kernels (cuBLAS COMPUTE_16F class error); "tf32" on fp32 inputs allows TF32 tensor
# cores. The stricter choice is always allowed to run (an fp32-accumulating kernel satisfies "f16").
ACCUMULATE = {"f16": ("f32", "f16"), "bf16": ("f32",), "f32": ("f32", "tf32")}

__all__ = ["ACCUMULATE", "ITEMSIZE", "KERNEL_LEVELS", "MAX_GRID_BATCH", "Copy", "Gemm", "GroupSum", "Problem",
           "Recipe", "Route", "Split", "SplitFormat", "Temp", "View", "batch_align", "kernel_batch",
           "problem_of_arrays", "ptr_alignment", "view_of"]


def ptr_alignment(ptr: int) -> int:
    """The largest power of two (up to 256) dividing a byte address."""
    a = 1
    while a < 256 and ptr % (a * 2) == 0:
        a *= 2
    return a


@dataclass(frozen=True)
class View:
    """A 2-D operand: the user's A, B or C (or a temporary), element strides, address alignment; in a
    batched problem, the element stride along each batch level (Problem.batch), 0 where broadcast."""

    base: str  # "A" | "B" | "C" (the user's operands) or the name of a temporary buffer
    rows: int
    cols: int
    rs: int  # row stride in elements
    cs: int  # column stride in elements
    align: int  # bytes; alignment of the address of element (0, 0) of every matrix of the batch
    bs: tuple[int, ...] = ()  # batch strides in elements, one per batch level (() when unbatched)

    @staticmethod
    def make(base: str, rows: int, cols: int, rs: int, cs: int, align: int, bs: tuple[int, ...] = ()) -> "View":
        # A stride of a length-1 dimension is never used: normalise it so that a single row or column
        # is recognised as dense whatever stride its producer reported.
        if cols == 1:
            cs = 1
        if rows == 1:
            rs = cols
        return View(base, rows, cols, rs, cs, align, tuple(bs))

    @property
    def T(self) -> "View":
        return View.make(self.base, self.cols, self.rows, self.cs, self.rs, self.align, self.bs)

    def bstride(self, level: int) -> int:
        """The batch stride along `level` (0 for an unbatched view: every level broadcasts it)."""
        return self.bs[level] if level < len(self.bs) else 0

    @property
    def batched(self) -> bool:
        return any(self.bs)

    @property
    def row_major(self) -> bool:
        return self.cs == 1 and (self.rows == 1 or self.rs >= self.cols)

    def dense(self) -> bool:
        return self.cs == 1 and (self.rows == 1 or self.rs == self.cols)

    def sig(self) -> str:
        b = f"/b{','.join(map(str, self.bs))}" if self.bs else ""
        return f"{self.rows}x{self.cols}:{self.rs},{self.cs}@{self.align}{b}"  # align: kernels need up to 32


def batch_align(align: int, bs: Any, itemsize: int) -> int:
    """`align` lowered to what every matrix of a batch has: the alignment of each batch stride's bytes."""
    for s in bs:
        if s:
            align = min(align, ptr_alignment(abs(s) * itemsize))
    return align


def kernel_batch(batch: tuple[int, ...]) -> tuple[int, int]:
    """(outer, inner) counts of the batch levels a kernel takes: the last two (1 where absent)."""
    inner = batch[-1] if batch else 1
    outer = batch[-2] if len(batch) >= 2 else 1
    return outer, inner


@dataclass(frozen=True)
class Problem:
    dtype: str
    acc: str  # the accumulate= request
    a: View  # M x K
    b: View  # K x N
    c: View  # M x N
    plain: bool  # alpha == 1 and beta == 0: a kernel may store straight into C
    beta_zero: bool  # beta == 0: C is write-only
    # batch level counts, outermost first (() unbatched); every view has one stride per level. The last
    # KERNEL_LEVELS are the kernels' (grid.z), those before them a loop of launches (`loop`)
    batch: tuple[int, ...] = ()
    epi: Epilogue | None = None  # bias / activation / scale beyond alpha, beta (epilogue.py)
    bias: View | None = None  # the bias vector (1 x length, element stride cs) when epi has one
    group: str = ""  # grouped_matmul: "contiguous" | "masked" (the batch is the experts)

    @property
    def batched(self) -> bool:
        return bool(self.batch)

    @property
    def batch_count(self) -> int:
        """Matrices in the batch (1 unbatched)."""
        return math.prod(self.batch)

    @property
    def kernel_batch(self) -> tuple[int, int]:
        return kernel_batch(self.batch)

    @property
    def loop(self) -> tuple[int, ...]:
        """The batch levels looped over by launches (before the kernel's two)."""
        return self.batch[:-KERNEL_LEVELS]

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
        batch = f"{'x'.join(map(str, self.batch))}*" if self.batch else ""
        epi = ""
        if self.epi is not None:
            # the scale too: a recipe carries it into the kernels' parameters (executions are cached by this key)
            epi = f"/epi{self.epi.flags}" + (f",scale{self.epi.scale!r}" if self.epi.scale != 1.0 else "") + \
                (f",bias{self.bias.sig()}" if self.bias is not None else "")
        group = f"/grouped-{self.group}" if self.group else ""
        return (f"{self.dtype}/{self.acc}/{batch}{self.M}x{self.N}x{self.K}/A{self.a.sig()}/B{self.b.sig()}/"
                f"C{self.c.sig()}/{mode}{epi}{group}")

    @property
    def linear(self) -> bool:
        """Only alpha/beta: no bias, activation or scale (a kernel without the fused epilogue may store)."""
        return self.epi is None

    @property
    def swiglu(self) -> bool:
        return self.epi is not None and self.epi.swiglu

    def transposed(self) -> "Problem":
        """C^T = B^T . A^T: the same product with the operands' roles swapped (not for SwiGLU, whose
        gate/up halves are column blocks of C)."""
        if self.swiglu:
            raise ValueError("a SwiGLU problem has no transposed form")
        return replace(self, a=self.b.T, b=self.a.T, c=self.c.T, epi=self.epi.transposed() if self.epi else None)


@dataclass(frozen=True)
class Route:
    kernel: str
    transpose: bool = False
    options: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) pairs: variant axes, splits, ctas, pack, k_groups

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


@dataclass(frozen=True)
class Temp:
    name: str
    rows: int
    cols: int  # row-major, the problem's dtype
    stride: int = 0  # elements between rows (0: cols, dense)
    count: int = 1  # matrices (a batched temporary: `count` of them back to back)

    @property
    def row_stride(self) -> int:
        return self.stride or self.cols


@dataclass(frozen=True)
class SplitFormat:
    """The operands of a split product (fp32 at fp32 accuracy as three tensor-core products, cu/matmul.cu): the
    kernel that makes them (its role), the k-block of K each plane row holds (one 128-byte row: 32 TF32 or 64 fp16
    values), whether it scales each line by a power of two (and writes the exponents the GEMM takes back off), how
    many times it reads the source (a scaled split reads each line twice: its maximum, then the split), and whether
    its kernels take a batch (grid.z over the matrices, cu/matmul.cu and cu/matmul_sm90.cu). The formats: the split
    products' handlers (hgemm_rt/roles, roles.SPLIT_FORMATS)."""

    role: str
    block: int
    scaled: bool
    reads: int
    batched: bool
    label: str


@dataclass(frozen=True)
class Copy:
    """A "copy"-role kernel: dst (rows x cols) = alpha * src (zero outside src_rows x src_cols) + beta * dst."""

    kernel: str
    src: View
    dst: View
    src_rows: int
    src_cols: int
    applies_alpha_beta: bool  # True: the user's alpha/beta (and `epi`); False: a plain copy (alpha 1, beta 0)
    batch: tuple[int, ...] = ()  # the problem's batch levels: one copy per matrix (views' `bs`)
    scalars: str = "ab"  # with applies_alpha_beta: which of the user's alpha ("a") and beta ("b") it takes
    epi: Epilogue | None = None  # with applies_alpha_beta: the bias/activation/scale it applies too (SwiGLU:
    bias: View | None = None  # src has 2 * dst.cols columns, gate | up)


@dataclass(frozen=True)
class Split:
    """A split kernel's step (roles split_tf32, split_f16x3): dst = src's head and residual planes, one 128-byte row
    a k-block (cu/matmul.cu): 2 ceil(src_cols / k-block) planes of src_rows rows, dst their stack (`format`), and for
    a scaled format the int32 exponent of each of src's rows (`shift`)."""

    kernel: str
    src: View
    dst: View
    src_rows: int
    src_cols: int
    format: SplitFormat
    batch: tuple[int, ...] = ()  # the problem's batch levels: one split per matrix (views' `bs`)
    shift: View | None = None
    # (a split applies none of the user's scalars nor the epilogue)
    applies_alpha_beta: ClassVar[bool] = False
    scalars: ClassVar[str] = "ab"
    epi: ClassVar[None] = None
    bias: ClassVar[None] = None


def _option(name: str, neutral: Any, doc: str) -> property:
    """A read-only view of a role option of a Gemm step (Gemm.options), `neutral` where it has none."""
    return property(lambda self: getattr(self.options, name, neutral), doc=doc)


@dataclass(frozen=True)
class Gemm:
    """A product's step. What every GEMM launch has; the role's own options (stream-K, K groups, the grouped
    table, split exponents) in `options`, the role handler's dataclass (hgemm_rt/roles/<role>.py), read here through
    the properties below (their neutral value where the role has no such option)."""

    kernel: str
    role: str  # the kernel's declared role (declaration.ROLES)
    a: View
    b: View  # catalogue: K x N (NN) or N x K (TN) as the kernel takes it; strided roles: as given (variant b)
    c: View
    M: int
    N: int
    K: int
    variant: tuple[tuple[str, Any], ...] = ()
    swizzle: bool = False
    swizzle_stride: int | None = None
    splits: int = 1  # a cluster of CTAs along K per tile (split-K; grid.z)
    applies_alpha_beta: bool = False  # the kernel applies the user's alpha/beta (and `epi`) itself
    batch: tuple[int, ...] = ()  # the problem's batch levels: one product per matrix (views' `bs`)
    scalars: str = "ab"  # with applies_alpha_beta: which of the user's alpha ("a") and beta ("b") it takes
    epi: Epilogue | None = None  # with applies_alpha_beta: the bias/activation/scale it applies too
    bias: View | None = None
    work: View | None = None  # a workspace temporary its options need (stream-K, K groups, the tile queue)
    options: Any = None  # the role's options object (None: none)

    @property
    def cluster_m(self) -> int:
        """CTAs along M in a cluster (1, cluster_m, 1) sharing their B tile by TMA multicast: the kernel's `mc`
        variant (cu/matmul_sm90.cu), 1 for every other launch."""
        return int(dict(self.variant).get("mc", 1))

    @property
    def swiglu(self) -> bool:
        """The step pairs gate and up columns (its epilogue's SwiGLU): C's width N, B's 2N."""
        return self.epi is not None and self.epi.swiglu

    # the role options' values, their neutral value where the step's role has no such option
    ctas = _option("ctas", 0, "Stream-K: its grid (0: not stream-K).")
    sk_tiles = _option("sk_tiles", 0, "Stream-K: how many of the last tiles it cuts along K, a piece per CTA.")
    k_groups = _option("k_groups", 1, "K groups: clusters of one tile along grid.z, each on a share of K (1: none).")
    k_deferred = _option("k_deferred", False, "K groups whose sums a GroupSum step adds (each group's plane in work).")
    c_unmapped = _option("c_unmapped", False, "C off TMA's rules, stored through ptr:C (no tmap:C; cu/CONTRACT.md).")
    group = _option("group", 0, "grouped_matmul's i32:group_mode (0: not grouped; the batch is the experts).")
    groups = _option("groups", 0, "grouped_matmul's group count.")
    a_shift = _option("a_shift", None, "A scaled split product: the exponents the split scaled A's rows by.")
    b_shift = _option("b_shift", None, "... and B^T's rows by.")


@dataclass(frozen=True)
class GroupSum:
    """A "kgroups_sum"-role kernel after a deferred K-groups GEMM: C = epilogue(the sum of `groups` fp32 planes of
    M x N in `work`, the GEMM's partials), the user's alpha/beta, bias and activation applied here."""

    kernel: str
    work: View
    c: View
    M: int
    N: int
    groups: int
    applies_alpha_beta: bool = True
    scalars: str = "ab"
    epi: Epilogue | None = None
    bias: View | None = None
    batch: tuple[int, ...] = ()


@dataclass(frozen=True)
class Recipe:
    route: Route
    temps: tuple[Temp, ...]
    steps: tuple[Any, ...]  # Copy | Split | Gemm | GroupSum, in order
    copy_bytes: int = 0
    loop: tuple[int, ...] = ()  # the problem's loop levels: the steps run once per index, at pointer offsets


def view_of(base: str, array: Any) -> View:
    """The View of a 2-D device array (anything with ptr, shape, byte strides and itemsize)."""
    isz = array.itemsize
    return View.make(base, array.shape[0], array.shape[1], array.strides[0] // isz, array.strides[1] // isz,
                     ptr_alignment(array.ptr))


def problem_of_arrays(a: Any, b: Any, c: Any, acc: str, alpha: float, beta: float) -> Problem:
    """The Problem of C = alpha * A.B + beta * C on three 2-D device arrays."""
    return Problem(a.dtype, acc, view_of("A", a), view_of("B", b), view_of("C", c),
                   plain=(alpha == 1.0 and beta == 0.0), beta_zero=(beta == 0.0))
