"""The matmul helper ("matmul") kernels' checks, shared by the sanitizer (sanitize.py) and the GPU tests:
the problems whose matmul plans launch each of them at an aligned and a ragged shape, which of those
plans to run (pure data, tested on the CPU), and the checked run of them on operands whose gaps are
never written."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from hgemm_rt.dtypes import ITEMSIZE, storage_to_f64, to_storage
from hgemm_rt.numerics import error_floor, rel_error

from .kernel_checks import selected_specs

SHAPE_CLASSES = ("aligned", "ragged", "ragged_mk")
# aligned: multiples of every matmul tile (BM <= 128, BN <= 256, BK = 64), 8 K tiles so that every split
# count has work; ragged: no dimension a multiple of 8, K = 5 tiles (split 8 leaves slices empty); ragged_mk:
# M and K ragged, C's rows whole 16-byte runs, as the TMA-store kernels (gemm_fused_wgmma) need them
CHECK_SHAPES = {"aligned": (256, 256, 512), "ragged": (97, 141, 261), "ragged_mk": (97, 144, 261)}
RAGGED = ("ragged", "ragged_mk")  # a kernel must run at one of these (and at "aligned")


@dataclass(frozen=True)
class Operand:
    """How one operand sits in its buffer: `order` row | col, `offset` elements in, `pad` extra
    elements per leading dimension."""

    order: str = "row"
    offset: int = 0
    pad: int = 0

    def strides(self, rows: int, cols: int) -> tuple[int, int]:
        return (cols + self.pad, 1) if self.order == "row" else (1, rows + self.pad)


@dataclass(frozen=True)
class MatmulCase:
    dtype: str
    shape: str  # "aligned" | "ragged"
    what: str
    a: Operand
    b: Operand
    c: Operand
    alpha: float
    beta: float
    acc: str = "f32"  # the accumulate= request (fp32 cases also ask for "tf32": the one-pass TF32 kernels)

    @property
    def MNK(self) -> tuple[int, int, int]:
        return CHECK_SHAPES[self.shape]

    def views(self) -> list:
        from hgemm_rt import problem

        M, N, K = self.MNK
        isz = ITEMSIZE[self.dtype]
        out = []
        for base, op, (rows, cols) in (("A", self.a, (M, K)), ("B", self.b, (K, N)), ("C", self.c, (M, N))):
            rs, cs = op.strides(rows, cols)
            # buffers come from cuMemAlloc (256-byte aligned): the view's alignment is its offset's
            out.append(problem.View.make(base, rows, cols, rs, cs, problem.ptr_alignment(op.offset * isz)))
        return out

    def problem(self):
        from hgemm_rt import problem

        a, b, c = self.views()
        return problem.Problem(self.dtype, self.acc, a, b, c, plain=self.alpha == 1.0 and self.beta == 0.0,
                               beta_zero=self.beta == 0.0)

    def __str__(self) -> str:
        acc = "" if self.acc == "f32" else f" accumulate={self.acc}"
        return f"{self.dtype} {self.shape} {'x'.join(map(str, self.MNK))} {self.what}{acc}"


def matmul_cases(dtypes) -> list[MatmulCase]:
    row = Operand()
    cases = []
    for dtype in dtypes:
        for shape in SHAPE_CLASSES:
            if shape == "ragged_mk":  # only the case with every leading dimension padded (TMA in place)
                _M, N, K = CHECK_SHAPES[shape]
                cases.append(MatmulCase(dtype, shape, "row-major, leading dimensions padded to 8, alpha/beta",
                                      Operand("row", 0, -K % 8), Operand("row", 0, -N % 8),
                                      Operand("row", 0, -N % 8), 0.5, 0.25))
                continue
            cases += [
                MatmulCase(dtype, shape, "plain", row, row, row, 1.0, 0.0),
                MatmulCase(dtype, shape, "alpha/beta, column-major strided C", row, row, Operand("col", 0, 3), -2.0,
                         0.25),
                # rows start off 16-byte boundaries and have odd lengths: copies take load16_any's
                # misaligned path right up to each row's gap
                MatmulCase(dtype, shape, "misaligned A, column-major B, offset C, alpha", Operand("row", 1, 3),
                         Operand("col", 3, 5), Operand("row", 1, 1), 0.5, 0.0),
            ]
            _M, N, K = CHECK_SHAPES[shape]
            if K % 8 or N % 8:  # ragged rows padded to 16 bytes: TMA maps of A, B and C in place
                cases.append(MatmulCase(dtype, shape, "row-major, leading dimensions padded to 8, alpha/beta",
                                      Operand("row", 0, -K % 8), Operand("row", 0, -N % 8),
                                      Operand("row", 0, -N % 8), 0.5, 0.25))
    # fp32 inputs at TF32 precision: the one-pass TF32 kernels (fp32 accuracy runs the split products above)
    cases += [replace(c, acc="tf32") for c in cases if c.dtype == "f32"]
    return cases


def plan_keys(plan, prob, shape: str, manifest) -> set[tuple[str, str, str]]:
    """(kernel, feature, shape class) for every matmul kernel a plan launches; feature "" is the
    launch itself, then its variant, split-K, alpha/beta, transposing / misaligned copies."""
    from hgemm_rt.problem import Copy, GroupSum, Split

    def c_fast(v) -> bool:  # a view whose columns are adjacent in memory
        return abs(v.cs) <= abs(v.rs)

    keys = set()
    for s in plan.steps:
        if isinstance(s, (Copy, Split)):
            name = s.kernel
            feats = {""}
            if c_fast(s.src) != c_fast(s.dst):
                feats.add("transposing")
            if s.src.align < 16:
                feats.add("misaligned source")
            if s.applies_alpha_beta and not prob.plain:
                feats.add("alpha/beta")
        elif isinstance(s, GroupSum):
            name = s.kernel
            feats = {""} | ({"alpha/beta"} if not prob.plain else set())
        elif not manifest.kernels[s.kernel].catalogue:
            name = s.kernel
            # the symbol launched: the step's variant, its defaults filled in
            feats = {""} | {f"{k}={v}" for k, v in manifest.kernels[s.kernel].resolve_variant(dict(s.variant)).items()}
            if s.splits > 1:
                feats.add("split-K")
            if not prob.plain:
                feats.add("alpha/beta")
        else:
            continue
        keys |= {(name, f, shape) for f in feats}
    return keys


def matmul_schedule(manifest, cc: tuple[int, int], sm_count: int, names: set[str]) -> tuple[list, set]:
    """[(case, plan)] to run, and the keys they cover: per case, matmul's plans cheapest first, each
    taken only if it covers a key of a selected kernel that no earlier plan covered."""
    from hgemm_rt import planner
    from hgemm_rt.roles.gemm_fused_wgmma import FusedWgmma

    dtypes = sorted({manifest.kernels[n].dtype for n in names})
    covered: set = set()
    out = []
    for case in matmul_cases(dtypes):
        prob = case.problem()
        for _est, plan in planner.ranked_recipes(prob, manifest, cc, sm_count):
            new = {k for k in plan_keys(plan, prob, case.shape, manifest) if k[0] in names} - covered
            if case.shape == "ragged_mk":  # the class exists for the TMA-store kernels, which "ragged" cannot run
                new = {k for k in new if manifest.kernels[k[0]].role == FusedWgmma.name}
            if new:
                out.append((case, plan))
                covered |= new
    return out, covered


def tma_stored_temps(plan, manifest) -> list[str]:
    """Temporaries a GEMM of the plan writes with TMA stores (a `tmap:C` kernel) for a later copy to read.

    initcheck does not see the global writes of cp.async.bulk.tensor (TMA) stores: the copy-out that
    reads such a tC back is reported as reading uninitialised memory although the kernel wrote all of
    it (H200: every read of tC after the hgemm_sm90 kernels with a TMA-store epilogue; none
    after the kernels that store with st.global). The runner fills these temporaries with NaN first:
    initialised for the tool, and a wrong result if the kernel leaves any element unwritten."""
    from hgemm_rt.problem import Gemm

    return [s.c.base for s in plan.steps if isinstance(s, Gemm) and s.c.base not in ("A", "B", "C")
            and "tmap:C" in manifest.kernels[s.kernel].params]


def matmul_kernel_names(manifest, pattern: str | None, cc: tuple[int, int]) -> tuple[set[str], list[str]]:
    """(selected matmul kernels runnable on cc, the selected ones with no build for it)."""
    from hgemm_rt.errors import NotBuiltForDeviceError

    runnable, unbuilt = set(), []
    for spec in selected_specs(manifest, pattern, helpers=True):
        try:
            manifest.select(spec, cc)
            runnable.add(spec.name)
        except NotBuiltForDeviceError:
            unbuilt.append(spec.name)
    return runnable, sorted(unbuilt)


def missing(names, covered) -> list[str]:
    """Selected matmul kernels not launched at an aligned and at a ragged shape."""
    out = [f"{n} (aligned)" for n in sorted(names) if (n, "", "aligned") not in covered]
    return out + [f"{n} (ragged)" for n in sorted(names) if not any((n, "", c) in covered for c in RAGGED)]


def stored_and_exact(x, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """float64 values -> (storage array of `dtype`, the exact float64 values it holds)."""
    stored = to_storage(np.asarray(x, np.float32), dtype)
    return stored, storage_to_f64(stored, dtype)


class Buffer:
    """A case's operand on the GPU in a buffer of exactly the view's extent. Inputs: only the view's
    elements are ever written (row by row), so any read of a gap or past the end is uninitialised
    or out of bounds. Output: the whole buffer holds `fill` (NaN), so a write outside the view shows."""

    def __init__(self, values, dtype: str, op: Operand, output: bool):
        from hgemm_rt.memory import DeviceArray

        rows, cols = values.shape
        rs, cs = op.strides(rows, cols)
        isz = ITEMSIZE[dtype]
        n = op.offset + (rows - 1) * rs + (cols - 1) * cs + 1
        store, self.exact = stored_and_exact(values, dtype)
        self.buf = DeviceArray.empty((n,), dtype)
        self.idx = op.offset + np.arange(rows)[:, None] * rs + np.arange(cols)[None, :] * cs
        self.view = DeviceArray(self.buf.ptr + op.offset * isz, (rows, cols), dtype, (rs * isz, cs * isz),
                                owner=self.buf)
        if output:
            self.host = stored_and_exact(np.full(n, np.nan), dtype)[0]
            self.host[self.idx] = store
            self.upload()
        else:
            self.view.copy_from_host(store)  # row by row (or column by column): the gaps stay unwritten

    def upload(self) -> None:
        self.buf.copy_from_host(self.host)

    def download(self) -> np.ndarray:
        return download(self.buf, self.host)


def run_matmul_checks(names: set[str], report: Callable[[str], Any] = lambda line: None) -> tuple[int, int, set]:
    """Run matmul_schedule on the GPU, each plan checked against float64 and C checked untouched outside
    its view; `report` gets one line per plan ("ok " or "BAD " first). Returns (wrong results,
    launches, covered keys)."""
    from hgemm_rt import planner
    from hgemm_rt.device import get_device
    from hgemm_rt.executor import Execution
    from hgemm_rt.problem import problem_of_arrays
    from hgemm_rt.registry import get_registry

    dev = get_device()
    manifest = get_registry().manifest
    sched, _ = matmul_schedule(manifest, dev.info.cc, dev.info.sm_count, names)
    rng = np.random.default_rng()
    bad = launches = 0
    covered: set = set()
    bufs: dict = {}
    for case, plan in sched:
        if case not in bufs:
            M, N, K = case.MNK
            c0 = rng.standard_normal((M, N)) if case.beta else np.full((M, N), np.nan)  # beta == 0: C is poison
            bufs.clear()  # one case's buffers at a time
            bufs[case] = [Buffer(rng.standard_normal((M, K)), case.dtype, case.a, False),
                          Buffer(rng.standard_normal((K, N)), case.dtype, case.b, False),
                          Buffer(c0, case.dtype, case.c, True)]
        A, B, C = bufs[case]
        prob = problem_of_arrays(A.view, B.view, C.view, case.acc, case.alpha, case.beta)
        if prob.key() != case.problem().key():  # the plan was chosen for these exact views
            raise RuntimeError(f"{case}: views {prob.key()} differ from the planned {case.problem().key()}")
        C.upload()
        runnable = Execution(plan, case.dtype, dev.info.ordinal, manifest)
        for name in tma_stored_temps(plan, manifest):
            runnable.temps[name].fill_bytes(0xFF)  # NaN: the kernel must overwrite every element read later
        runnable.run((A.view.ptr, B.view.ptr, C.view.ptr), case.alpha, case.beta, 0)
        now = C.download()
        runnable.close()
        got = storage_to_f64(now[C.idx], case.dtype)
        ref = case.alpha * (A.exact @ B.exact) + (case.beta * C.exact if case.beta else 0.0)
        err, bound = rel_error(got, ref), error_floor(case.dtype, case.acc, case.dtype, case.MNK[2])
        outside = np.ones(now.shape, bool)
        outside[C.idx] = False
        ok = err <= bound and np.array_equal(now[outside].view(np.uint8), C.host[outside].view(np.uint8))
        bad += not ok
        launches += len(plan.steps)
        covered |= {k for k in plan_keys(plan, prob, case.shape, manifest) if k[0] in names}
        report(f"{'ok ' if ok else 'BAD'} {planner.describe(plan)} | {case} err={err:.2e} launches={len(plan.steps)}")
    bufs.clear()
    return bad, launches, covered


def download(array, like: np.ndarray) -> np.ndarray:
    """A device array's bytes in a host array like `like`, once the GPU's queued work is done."""
    from hgemm_rt.device import get_device

    get_device().synchronize()
    return array.to_host(np.empty_like(like))
