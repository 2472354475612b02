"""The correctness harness shared by the tests, the benchmark and the sanitizer driver
(hgemm_bench/sanitize.py): random operands, the float64 reference, the relative error and its bound,
one checked launch of a kernel; which shapes each catalogue kernel is checked at; and for the
matmul helper ("util") kernels, the problems and matmul plans that launch each of them at an aligned
and a ragged shape, and the checked run of those plans."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from .dtypes import ITEMSIZE, STORAGE, numpy_dtype, storage_to_f64, to_storage


def random_operands(M: int, N: int, K: int, layout: str, dtype: str, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B (K x N for NN, N x K for TN), N(0, 1) entries: never zeros, which hide
    unwritten outputs and run faster than real data."""
    npdt = numpy_dtype(dtype)
    a = rng.standard_normal((M, K), dtype=np.float32).astype(npdt)
    b_shape = (K, N) if layout == "NN" else (N, K)
    b = rng.standard_normal(b_shape, dtype=np.float32).astype(npdt)
    return a, b


def reference(a: np.ndarray, b: np.ndarray, layout: str) -> np.ndarray:
    """C = A.B in float64 from the (already rounded) inputs."""
    b64 = b.astype(np.float64)
    return a.astype(np.float64) @ (b64 if layout == "NN" else b64.T)


def rel_error(c: np.ndarray, ref: np.ndarray) -> float:
    """||C - ref||_F / ||ref||_F; inf if C holds any NaN/Inf (an unwritten, NaN-poisoned element)."""
    c64 = c.astype(np.float64)
    if not np.isfinite(c64).all():
        return float("inf")
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(c64 - ref) / (denom if denom else 1.0))


def error_floor(dtype: str, acc: str, out: str, K: int) -> float:
    """A bound no correct kernel exceeds on N(0,1) data. fp16 output rounding alone gives ~2.8e-4;
    fp16 accumulation adds error growing like sqrt(K) (cuBLAS COMPUTE_16F: ~3e-3 at K=4096);
    TF32 keeps 10 mantissa bits of each input."""
    k = max(K, 1) ** 0.5
    if acc == "f16":
        return 2e-3 + 1e-4 * k
    if acc == "tf32":
        return 2e-3
    if out in ("f16", "bf16"):
        return 1e-3 if out == "f16" else 8e-3
    return 1e-5 + 1e-7 * k  # fp32 end to end


def error_bound(dtype: str, acc: str, out: str, K: int, cublas_error: float | None = None) -> float:
    """Never looser than a small factor over cuBLAS on the same inputs and accumulation, where that
    was measured; the static floor otherwise. The factor is clamped below at what the accumulation's
    own precision allows: cuBLAS may quietly pick a more precise path (a "TF32" call at M=1 comes back
    at full fp32 accuracy), which must not make the bound unreachable for an honest TF32 kernel."""
    floor = error_floor(dtype, acc, out, K)
    if cublas_error is None or not np.isfinite(cublas_error):
        return floor
    # fp32 end to end: another summation order (split-K, another tile) moves the result by about the
    # unit roundoff times sqrt(K)
    fp32 = max(1e-6, 6e-8 * max(K, 1) ** 0.5)
    clamp = {"tf32": 1e-3, "f16": 3e-4}.get(acc, 3e-4 if out != "f32" else fp32)
    return min(floor, max(4.0 * cublas_error, clamp))


def baseline_for(layout: str, dtype: str) -> str | None:
    """The cuBLAS entry computing the same product, for error and speed comparisons."""
    if dtype == "f32":
        return "sgemm_cublas" if layout == "NN" else None
    suffix = {"f16": "", "bf16": "_bf16"}[dtype]
    return {"NN": "hgemm_cublas_tensor_op_nn", "TN": "hgemm_cublas_tensor_op_tn"}[layout] + suffix


def baseline_acc(dtype: str, acc: str) -> str:
    """The cuBLAS accumulation to compare an accumulation with."""
    if dtype == "f32":
        return "tf32" if acc == "tf32" else "f32"
    return "f16" if acc == "f16" else "f32"


def upload_ordered(x: np.ndarray, order: str = "row"):
    """x on the GPU, row- or column-major: (owner, view). A column-major array is the transposed view
    of a row-major copy of x.T; close the owner, not the view (the view keeps the owner alive)."""
    from .memory import DeviceArray

    if order == "row":
        owner = DeviceArray.from_numpy(x)
        return owner, owner
    owner = DeviceArray.from_numpy(np.ascontiguousarray(x.T))
    return owner, owner.T


def run_checked(entry, M: int, N: int, K: int, rng: np.random.Generator, *, with_cublas: bool = True,
                **options) -> dict:
    """Launch `entry` once on fresh N(0,1) inputs into a NaN-poisoned C and compare with the float64
    reference. Returns {"error", "bound", "cublas_error"}; the caller asserts. The cuBLAS error that
    sets the bound comes from the same inputs in the same storage (hgemm_rt.cublas.matmul)."""
    from . import cublas
    from .memory import DeviceArray

    a, b = random_operands(M, N, K, entry.layout, entry.dtype, rng)
    ref = reference(a, b, entry.layout)
    choice = {k: v for k, v in options.items() if k in entry.variants}
    acc = entry.acc_for(choice)
    a_owner, A = upload_ordered(a, entry.a_order)
    with a_owner, DeviceArray.from_numpy(b) as B, DeviceArray.empty((M, N), entry.out) as C:
        C.fill_bytes(0xFF)  # NaN everywhere: an element the kernel does not write fails the check
        entry(A, B, C, **options)
        err = rel_error(C.to_numpy(), ref)
        cublas_err = None
        if with_cublas and entry.out == entry.dtype:
            try:
                C.fill_bytes(0xFF)
                cublas.matmul(A, B if entry.layout == "NN" else B.T, C, acc=baseline_acc(entry.dtype, acc))
                cublas_err = rel_error(C.to_numpy(), ref)
            except Exception:  # no cuBLAS here: the static bound applies
                cublas_err = None
    bound = error_bound(entry.dtype, acc, entry.out, K, cublas_err)
    return {"error": err, "bound": bound, "cublas_error": cublas_err, "acc": acc}


# ---------------------------------------------------------------------------------------------------
# catalogue kernels: the shapes each is checked at, derived from its declaration
# ---------------------------------------------------------------------------------------------------

def tile_dims(spec) -> dict[str, tuple[int, int]]:
    """(tile size, required multiple) per dimension of a KernelSpec."""
    BM, BN, BK = spec.tile
    return {d: (t, spec.require.get(d, 1)) for d, t in (("M", BM), ("N", BN), ("K", max(BK, 16)))}


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def shapes_for(spec) -> list[tuple[str, int, int, int]]:
    """Named (label, M, N, K): aligned, one step above and one below a tile multiple (a step is the
    kernel's required multiple, or 1 where it has none), K below one K tile, and M=1 / N=1 where the
    kernel accepts them. The first two are "aligned" and "ragged"."""
    d = tile_dims(spec)
    aligned = {k: round_up(2 * t, r) for k, (t, r) in d.items()}
    ragged = {k: (aligned[k] + r if r > 1 else aligned[k] + 1) for k, (t, r) in d.items()}
    below = {k: aligned[k] - r for k, (t, r) in d.items()}  # one step below a tile multiple
    cases = [("aligned", aligned["M"], aligned["N"], aligned["K"]),
             ("ragged", ragged["M"], ragged["N"], ragged["K"]),
             ("below", below["M"], below["N"], below["K"])]
    k_small = d["K"][1] if d["K"][1] > 1 else 7
    if k_small < d["K"][0]:
        cases.append(("k_small", aligned["M"], aligned["N"], k_small))
    if d["M"][1] == 1:
        cases.append(("m1", 1, ragged["N"], ragged["K"]))
    if d["N"][1] == 1:
        cases.append(("n1", ragged["M"], 1, ragged["K"]))
    if spec.grid == "persistent":  # many more tiles than SMs: each CTA loops over several, ragged edges
        cases.append(("many_tiles", round_up(15 * d["M"][0] + 7, d["M"][1]),
                      round_up(12 * d["N"][0] + 3, d["N"][1]), round_up(3 * d["K"][0] + 5, d["K"][1])))
    return cases


def refusal_shapes(spec) -> list[tuple[str, int, int, int]]:
    """For each dimension with a requirement, a shape that breaks only it."""
    d = tile_dims(spec)
    base = {k: round_up(2 * t, r) for k, (t, r) in d.items()}
    out = []
    for k, (_, r) in d.items():
        if r > 1:
            bad = dict(base)
            bad[k] = base[k] + r // 2 if r // 2 else base[k] + 1
            out.append((f"bad_{k}", bad["M"], bad["N"], bad["K"]))
    return out


def selected_specs(manifest, pattern: str | None, util: bool) -> list:
    """The catalogue kernels (util=False) or matmul helper kernels (util=True) whose name matches a
    glob or contains the pattern, or one of a comma-separated list of them (every one without a pattern)."""
    globs = [g for g in (pattern or "").split(",") if g]

    def match(name: str) -> bool:
        return not globs or any(fnmatch.fnmatch(name, g) or g in name for g in globs)

    return [s for s in manifest.kernels.values() if (s.ladder == "util") == util and match(s.name)]


# ---------------------------------------------------------------------------------------------------
# util kernels: problems for matmul's plans, and which plans to run (pure data, tested on the CPU)
# ---------------------------------------------------------------------------------------------------

SHAPE_CLASSES = ("aligned", "ragged", "ragged_mk")
# aligned: multiples of every util tile (BM <= 128, BN <= 256, BK = 64), 8 K tiles so that every split
# count has work; ragged: no dimension a multiple of 8, K = 5 tiles (split 8 leaves slices empty); ragged_mk:
# M and K ragged, C's rows whole 16-byte runs, as the TMA-store kernels (gemm_fused_wgmma) need them
UTIL_SHAPES = {"aligned": (256, 256, 512), "ragged": (97, 141, 261), "ragged_mk": (97, 144, 261)}
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
class UtilCase:
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
        return UTIL_SHAPES[self.shape]

    def views(self) -> list:
        from . import problem

        M, N, K = self.MNK
        isz = ITEMSIZE[self.dtype]
        out = []
        for base, op, (rows, cols) in (("A", self.a, (M, K)), ("B", self.b, (K, N)), ("C", self.c, (M, N))):
            rs, cs = op.strides(rows, cols)
            # buffers come from cuMemAlloc (256-byte aligned): the view's alignment is its offset's
            out.append(problem.View.make(base, rows, cols, rs, cs, problem.ptr_alignment(op.offset * isz)))
        return out

    def problem(self):
        from . import problem

        a, b, c = self.views()
        return problem.Problem(self.dtype, self.acc, a, b, c, plain=self.alpha == 1.0 and self.beta == 0.0,
                               beta_zero=self.beta == 0.0)

    def __str__(self) -> str:
        acc = "" if self.acc == "f32" else f" accumulate={self.acc}"
        return f"{self.dtype} {self.shape} {'x'.join(map(str, self.MNK))} {self.what}{acc}"


def util_cases(dtypes) -> list[UtilCase]:
    row = Operand()
    cases = []
    for dtype in dtypes:
        for shape in SHAPE_CLASSES:
            if shape == "ragged_mk":  # only the case with every leading dimension padded (TMA in place)
                _M, N, K = UTIL_SHAPES[shape]
                cases.append(UtilCase(dtype, shape, "row-major, leading dimensions padded to 8, alpha/beta",
                                      Operand("row", 0, -K % 8), Operand("row", 0, -N % 8),
                                      Operand("row", 0, -N % 8), 0.5, 0.25))
                continue
            cases += [
                UtilCase(dtype, shape, "plain", row, row, row, 1.0, 0.0),
                UtilCase(dtype, shape, "alpha/beta, column-major strided C", row, row, Operand("col", 0, 3), -2.0,
                         0.25),
                # rows start off 16-byte boundaries and have odd lengths: copies take load16_any's
                # misaligned path right up to each row's gap
                UtilCase(dtype, shape, "misaligned A, column-major B, offset C, alpha", Operand("row", 1, 3),
                         Operand("col", 3, 5), Operand("row", 1, 1), 0.5, 0.0),
            ]
            _M, N, K = UTIL_SHAPES[shape]
            if K % 8 or N % 8:  # ragged rows padded to 16 bytes: TMA maps of A, B and C in place
                cases.append(UtilCase(dtype, shape, "row-major, leading dimensions padded to 8, alpha/beta",
                                      Operand("row", 0, -K % 8), Operand("row", 0, -N % 8),
                                      Operand("row", 0, -N % 8), 0.5, 0.25))
    # fp32 inputs at TF32 precision: the one-pass TF32 kernels (fp32 accuracy runs the split products above)
    cases += [replace(c, acc="tf32") for c in cases if c.dtype == "f32"]
    return cases


def plan_keys(plan, prob, shape: str, manifest) -> set[tuple[str, str, str]]:
    """(kernel, feature, shape class) for every util kernel a plan launches; feature "" is the
    launch itself, then its variant, split-K, alpha/beta, transposing / misaligned copies."""
    from .problem import Copy, GroupSum

    def c_fast(v) -> bool:  # a view whose columns are adjacent in memory
        return abs(v.cs) <= abs(v.rs)

    keys = set()
    for s in plan.steps:
        if isinstance(s, Copy):
            name = s.kernel
            feats = {""}
            if c_fast(s.src) != c_fast(s.dst):
                feats.add("transposing")
            if s.src.align < 16:
                feats.add("misaligned source")
            if s.epilogue and not prob.plain:
                feats.add("alpha/beta")
        elif isinstance(s, GroupSum):
            name = s.kernel
            feats = {""} | ({"alpha/beta"} if not prob.plain else set())
        elif manifest.kernels[s.kernel].ladder == "util":
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


def util_schedule(manifest, cc: tuple[int, int], sm_count: int, names: set[str]) -> tuple[list, set]:
    """[(case, plan)] to run, and the keys they cover: per case, matmul's plans cheapest first, each
    taken only if it covers a key of a selected kernel that no earlier plan covered."""
    from . import planner

    dtypes = sorted({manifest.kernels[n].dtype for n in names})
    covered: set = set()
    out = []
    for case in util_cases(dtypes):
        prob = case.problem()
        for _est, plan in planner.ranked_recipes(prob, manifest, cc, sm_count):
            new = {k for k in plan_keys(plan, prob, case.shape, manifest) if k[0] in names} - covered
            if case.shape == "ragged_mk":  # the class exists for the TMA-store kernels, which "ragged" cannot run
                new = {k for k in new if manifest.kernels[k[0]].role == "gemm_fused_wgmma"}
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
    from .problem import Gemm

    return [s.c.base for s in plan.steps if isinstance(s, Gemm) and s.c.base not in ("A", "B", "C")
            and "tmap:C" in manifest.kernels[s.kernel].params]


def util_names(manifest, pattern: str | None, cc: tuple[int, int]) -> tuple[set[str], list[str]]:
    """(selected util kernels runnable on cc, the selected ones with no build for it)."""
    from .errors import NotBuiltForDeviceError

    runnable, unbuilt = set(), []
    for spec in selected_specs(manifest, pattern, util=True):
        try:
            manifest.select(spec, cc)
            runnable.add(spec.name)
        except NotBuiltForDeviceError:
            unbuilt.append(spec.name)
    return runnable, sorted(unbuilt)


def missing(names, covered) -> list[str]:
    """Selected util kernels not launched at an aligned and at a ragged shape."""
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
        from .memory import DeviceArray

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
        from .device import get_device

        get_device().synchronize()
        return self.buf.to_host(np.empty_like(self.host))


def run_util(names: set[str], report: Callable[[str], Any] = lambda line: None) -> tuple[int, int, set]:
    """Run util_schedule on the GPU, each plan checked against float64 and C checked untouched outside
    its view; `report` gets one line per plan ("ok " or "BAD " first). Returns (wrong results,
    launches, covered keys)."""
    from . import planner
    from .device import get_device
    from .executor import Execution
    from .problem import problem_of_arrays
    from .registry import get_registry

    dev = get_device()
    manifest = get_registry().manifest
    sched, _ = util_schedule(manifest, dev.info.cc, dev.info.sm_count, names)
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


# ---- operands for the GPU tests: strided (and batched) views inside NaN-filled buffers ----

class GuardedArray:
    """values (..., rows, cols) placed in a NaN-filled device buffer at `offset` elements: each matrix
    with the strides of `order` (row / col / gen: neither stride 1) and `pad` extra elements per leading
    dimension, the batch dimensions stepping in the order `perm` (innermost first; default the last batch
    dimension innermost) with `gap` elements between matrices; dimensions in `expand` get stride 0 (their
    values are those of index 0, as torch's expand() makes them)."""

    def __init__(self, values, dtype, order="row", offset=0, pad=0, perm=None, gap=0, expand=()):
        *bshape, rows, cols = values.shape
        nb = len(bshape)
        values = np.array(values)
        for d in expand:  # one value along an expanded dimension
            values = np.broadcast_to(np.take(values, [0], axis=d), values.shape)
        rs, cs = {"row": (cols + pad, 1), "col": (1, rows + pad), "gen": (2 * cols + pad, 2)}[order]
        extent = (rows - 1) * rs + (cols - 1) * cs + 1
        bstr, step = [0] * nb, extent + gap
        for d in (perm if perm is not None else reversed(range(nb))):
            if d in expand:
                continue
            bstr[d] = step
            step *= bshape[d]
        self.dtype, self.shape, self.rs, self.cs = dtype, values.shape, rs, cs
        store, self.exact = stored_and_exact(values, dtype)
        grids = np.meshgrid(*[np.arange(n) for n in values.shape], indexing="ij")
        idx = offset + sum(g * s for g, s in zip(grids, bstr + [rs, cs]))
        n = int(idx.max()) + 1 + 8 if idx.size else offset + 8
        self.host = np.full(n, np.nan, np.float32).astype(STORAGE[dtype]) if dtype != "bf16" \
            else np.full(n, 0x7FC1, np.uint16)  # NaN bit patterns around (and under) the view
        self.host[idx] = store
        from .memory import DeviceArray

        self.buf = DeviceArray.empty((n,), dtype)
        self.buf.copy_from_host(self.host)
        isz = ITEMSIZE[dtype]
        self.view = DeviceArray(self.buf.ptr + offset * isz, values.shape, dtype,
                                tuple(s * isz for s in bstr + [rs, cs]), owner=self.buf)
        self._idx = idx

    def read(self):
        return storage_to_f64(download(self.buf, self.host)[self._idx], self.dtype)

    def outside_untouched(self):
        now = download(self.buf, self.host)
        mask = np.ones(now.shape, bool)
        mask[self._idx] = False
        return np.array_equal(now[mask].view(np.uint8), self.host[mask].view(np.uint8))


def download(array, like: np.ndarray) -> np.ndarray:
    """A device array's bytes in a host array like `like`, once the GPU's queued work is done."""
    from .device import get_device

    get_device().synchronize()
    return array.to_host(np.empty_like(like))


def each_route(prob, dtype: str, a: GuardedArray, b: GuardedArray, c: GuardedArray, alpha: float, beta: float,
               bias: GuardedArray | None = None, plans=None):
    """Every recipe the planner ranks for `prob` (or the recipes `plans`), forced once on a, b, c (and the bias
    of a fused epilogue; C set back to its initial values before each): yields (recipe, C's view as float64)
    with the GPU idle, C's surroundings as left."""
    from . import planner
    from .device import get_device
    from .executor import Execution
    from .registry import get_registry

    dev = get_device()
    manifest = get_registry().manifest
    if plans is None:
        plans = [plan for _est, plan in planner.ranked_recipes(prob, manifest, dev.info.cc, dev.info.sm_count)]
    for plan in plans:
        c.buf.copy_from_host(c.host)
        ex = Execution(plan, dtype, 0, manifest)
        try:
            ex.run((a.view.ptr, b.view.ptr, c.view.ptr, bias.view.ptr if bias is not None else 0), alpha, beta, 0)
            dev.synchronize()
        finally:
            ex.close()
        yield plan, c.read()
