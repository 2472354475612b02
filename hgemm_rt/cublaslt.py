"""cuBLASLt through nvmath-python's 1:1 bindings (`nvmath.bindings.cublasLt`): the strongest cuBLAS
baseline, where the heuristic's top candidates for a problem can each be run and timed.

The problem is mapped as hgemm_rt.cublas maps it for GemmEx: row-major C (M x N) is the column-major
C^T (N x M), so C^T = B^T . A^T is computed with the operands swapped (cuBLASLt's A is our B, its B our
A), every matrix layout column-major (CUBLASLT_ORDER_COL, the order all of cuBLASLt's kernels take) and
a column-major operand transposed (op T) where a row-major one is read as is (op N). No data moves.

Per device: one cuBLASLt handle; per (device, stream): one workspace of WORKSPACE_BYTES, which the
heuristic may spend (split-K, stream-K). Per problem (shape, orders, leading dimensions, dtype,
accumulation, pointer alignments, algorithms requested): a Plan holding the matmul descriptor, the
three matrix layouts (D is C) and the heuristic's results, cached (PLAN_CACHE_SIZE, least recently
used out). `release()` destroys every plan, frees the workspaces and destroys the handles, after the
device has finished with them; it also runs at exit.
"""
from __future__ import annotations

import atexit
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cublas import COMPUTE_TYPE, CUBLAS_EXTRA, DATA_TYPE, SCALAR, check_acc, operands
from .device import get_device, stream_handle
from .errors import DriverError, NoGpuError, ValidationError

DEFAULT_ALGOS = 8  # heuristic candidates requested per problem
WORKSPACE_BYTES = 32 << 20  # what cuBLAS itself reserves on Hopper
MAX_ALIGNMENT = 256  # the alignment cuBLASLt assumes of a pointer unless told less
PLAN_CACHE_SIZE = 256

# alpha/beta's type (cuBLASLt's scale type) per accumulation: the compute type's precision
SCALE_TYPE = {"f16": "CUDA_R_16F", "f32": "CUDA_R_32F", "tf32": "CUDA_R_32F"}

# the algorithm configuration attributes a Candidate reports (cublasLtMatmulAlgoConfigAttributes_t)
CONFIG = (("algo_id", "ID"), ("tile", "TILE_ID"), ("stages", "STAGES_ID"), ("split_k", "SPLITK_NUM"),
          ("reduction", "REDUCTION_SCHEME"), ("swizzle", "CTA_SWIZZLING"), ("custom", "CUSTOM_OPTION"),
          ("inner_shape", "INNER_SHAPE_ID"), ("cluster_shape", "CLUSTER_SHAPE_ID"))

_lock = threading.RLock()
_handles: dict[int, int] = {}
_workspaces: dict[tuple[int, int], Any] = {}  # (device, stream) -> DeviceArray
_plans: "OrderedDict[tuple, Plan]" = OrderedDict()


def _lt() -> Any:
    try:
        from nvmath.bindings import cublasLt
    except ImportError as exc:
        raise NoGpuError(f"nvmath-python is not installed ({exc}): {CUBLAS_EXTRA}") from None
    return cublasLt


def _enums() -> tuple[Any, Any, Any]:
    """(cudaDataType_t, cublasComputeType_t, cublasOperation_t) as nvmath names them."""
    from nvmath import CudaDataType
    from nvmath.bindings.cublas import ComputeType, Operation

    return CudaDataType, ComputeType, Operation


def _call(op: str, fn: Any, *args: Any, what: str = "") -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # nvmath raises cuBLASLtError (or a loader RuntimeError without cuBLASLt)
        where = f" ({what})" if what else ""
        raise DriverError(f"cuBLASLt {op}{where} failed: {exc}", result_name=type(exc).__name__) from exc


# -- the problem as cuBLASLt sees it (pure) ------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """One cublasLtMatrixLayout: a column-major rows x cols matrix with leading dimension ld."""
    rows: int
    cols: int
    ld: int


@dataclass(frozen=True)
class Mapping:
    """cuBLASLt's D (m x n) = op(A) (m x k) . op(B) (k x n) for our row-major C = A . B: m = N, n = M,
    k = K, cuBLASLt's A is our B's storage, its B our A's, D = C is C^T column-major."""
    m: int
    n: int
    k: int
    transa: str  # "N" or "T", of cuBLASLt's A (our B)
    transb: str  # of cuBLASLt's B (our A)
    a: Layout
    b: Layout
    c: Layout
    data_type: str  # a cudaDataType_t member: A, B, C and D
    compute_type: str  # a cublasComputeType_t member
    scale_type: str  # alpha/beta's cudaDataType_t


def mapping(M: int, N: int, K: int, a_order: str, lda: int, b_order: str, ldb: int, ldc: int, dtype: str,
            acc: str) -> Mapping:
    """The cuBLASLt problem computing row-major C (M x N, ld ldc) = A (M x K) . B (K x N), A and B each
    "row"- or "col"-major with leading dimension lda/ldb (elements). Refuses what cuBLASLt would."""
    check_acc(dtype, acc, "cuBLASLt")
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValidationError(f"cuBLASLt: {name} must be a positive integer, got {v!r}")
    need = {("A", "row"): K, ("A", "col"): M, ("B", "row"): N, ("B", "col"): K}
    for name, order, ld in (("A", a_order, lda), ("B", b_order, ldb)):
        if order not in ("row", "col"):
            raise ValidationError(f"cuBLASLt: {name} order must be 'row' or 'col', got {order!r}")
        if ld < need[(name, order)]:
            raise ValidationError(f"cuBLASLt: {name} ({order}-major) needs ld >= {need[(name, order)]}, got {ld}")
    if ldc < N:
        raise ValidationError(f"cuBLASLt: C (row-major, {M} x {N}) needs ld >= {N}, got {ldc}")
    # Seen column-major, a row-major X (r x c, ld) is X^T (c x r, ld): read as is (op N). A column-major
    # X is X itself (r x c, ld): transposed (op T) to give the X^T that C^T = B^T . A^T needs.
    lt_a = Layout(N, K, ldb) if b_order == "row" else Layout(K, N, ldb)
    lt_b = Layout(K, M, lda) if a_order == "row" else Layout(M, K, lda)
    trans = {"row": "N", "col": "T"}
    return Mapping(N, M, K, trans[b_order], trans[a_order], lt_a, lt_b, Layout(N, M, ldc), DATA_TYPE[dtype],
                   COMPUTE_TYPE[(dtype, acc)], SCALE_TYPE[acc])


def alignment(ptr: int) -> int:
    """The largest power of two dividing ptr, at most MAX_ALIGNMENT bytes (the heuristic's preference)."""
    ptr = int(ptr)
    return MAX_ALIGNMENT if ptr == 0 else min(ptr & -ptr, MAX_ALIGNMENT)


def describe(M: int, N: int, K: int, dtype: str, acc: str, a_order: str, b_order: str) -> str:
    return f"{M}x{N}x{K} {dtype} acc {acc}, A {a_order}, B {b_order}"


# -- handles, workspaces ----------------------------------------------------------------------------

def handle(device: int = 0) -> int:
    """One cuBLASLt handle per device, created on first use (destroyed by release())."""
    with _lock:
        if device not in _handles:
            get_device(device)  # cuBLASLt then adopts our (primary) context
            _handles[device] = _call("create", _lt().create)
        return _handles[device]


def _allocate(nbytes: int, device: int) -> Any:
    from .memory import DeviceArray

    return DeviceArray.empty((nbytes // 4,), "f32", device)


def workspace(device: int, stream: int) -> tuple[int, int]:
    """(pointer, bytes) of the workspace of (device, stream): one per stream, so that work queued on two
    streams never shares it."""
    with _lock:
        key = (device, stream)
        if key not in _workspaces:
            _workspaces[key] = _allocate(WORKSPACE_BYTES, device)
        return _workspaces[key].ptr, WORKSPACE_BYTES


# -- plans: descriptors, layouts, heuristic results ----------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One algorithm the heuristic returned, in its order (index 0 is its first choice)."""
    index: int
    algo_id: int
    tile: int
    stages: int
    split_k: int
    reduction: int
    swizzle: int
    custom: int
    inner_shape: int
    cluster_shape: int
    workspace: int  # bytes it needs
    waves: float  # the heuristic's waves count

    @property
    def label(self) -> str:
        return f"Lt algo #{self.index} (id {self.algo_id})"

    def record(self) -> dict[str, Any]:
        return {"index": self.index, "algo_id": self.algo_id, "tile": self.tile, "stages": self.stages,
                "split_k": self.split_k, "reduction": self.reduction, "swizzle": self.swizzle,
                "custom": self.custom, "inner_shape": self.inner_shape, "cluster_shape": self.cluster_shape,
                "workspace": self.workspace, "waves": self.waves}


class Plan:
    """The cuBLASLt objects of one problem: its matmul descriptor, matrix layouts (A, B, C = D) and the
    heuristic's results, whose algo structs matmul() reads. destroy() releases them (safe twice)."""

    def __init__(self, key: tuple, mp: Mapping, what: str):
        self.key, self.mapping, self.what = key, mp, what
        self.desc = 0
        self.layouts: list[int] = []
        self.results = np.zeros(0)
        self.candidates: tuple[Candidate, ...] = ()

    def algo_ptr(self, index: int) -> int:
        """The address of candidate `index`'s cublasLtMatmulAlgo_t (the first field of its result)."""
        return self.results.ctypes.data + index * self.results.itemsize + self.results.dtype.fields["algo"][1]

    def destroy(self) -> None:
        lt = _lt()
        desc, layouts = self.desc, self.layouts
        self.desc, self.layouts = 0, []
        for lay in layouts:
            _call("matrix_layout_destroy", lt.matrix_layout_destroy, lay, what=self.what)
        if desc:
            _call("matmul_desc_destroy", lt.matmul_desc_destroy, desc, what=self.what)


def _set(op: str, fn: Any, obj: int, attr: Any, dtype: Any, value: Any, what: str) -> None:
    buf = np.array([value], dtype=dtype)
    _call(op, fn, obj, int(attr), buf.ctypes.data, buf.nbytes, what=what)


def _config(lt: Any, algo_ptr: int, attr_name: str, what: str) -> int:
    attr = lt.MatmulAlgoConfigAttribute[attr_name]
    buf = np.zeros(1, dtype=lt.get_matmul_algo_config_attribute_dtype(attr))
    written = np.zeros(1, dtype=np.uint64)
    _call(f"matmul_algo_config_get_attribute({attr_name})", lt.matmul_algo_config_get_attribute, algo_ptr,
          int(attr), buf.ctypes.data, buf.nbytes, written.ctypes.data, what=what)
    return int(buf[0])


def _build(plan: Plan, device: int, aligns: tuple[int, int, int], algos: int) -> None:
    """Create the descriptor and layouts, and ask the heuristic for up to `algos` algorithms that fit
    the workspace and the pointers' alignment. On an error the caller destroys the plan."""
    lt, (data_types, compute_types, operation) = _lt(), _enums()
    mp, what = plan.mapping, plan.what
    dt = int(getattr(data_types, mp.data_type))
    plan.desc = _call("matmul_desc_create", lt.matmul_desc_create, int(getattr(compute_types, mp.compute_type)),
                      int(getattr(data_types, mp.scale_type)), what=what)
    for attr, trans in (("TRANSA", mp.transa), ("TRANSB", mp.transb)):
        a = lt.MatmulDescAttribute[attr]
        _set(f"matmul_desc_set_attribute({attr})", lt.matmul_desc_set_attribute, plan.desc, a,
             lt.get_matmul_desc_attribute_dtype(a), int(getattr(operation, trans)), what)
    for lay in (mp.a, mp.b, mp.c):
        plan.layouts.append(_call("matrix_layout_create", lt.matrix_layout_create, dt, lay.rows, lay.cols, lay.ld,
                                  what=what))
    pref = _call("matmul_preference_create", lt.matmul_preference_create, what=what)
    try:
        settings = [("MAX_WORKSPACE_BYTES", WORKSPACE_BYTES)] + [
            (f"MIN_ALIGNMENT_{m}_BYTES", al) for m, al in zip("ABCD", aligns + (aligns[2],))]
        for name, value in settings:
            a = lt.MatmulPreferenceAttribute[name]
            _set(f"matmul_preference_set_attribute({name})", lt.matmul_preference_set_attribute, pref, a,
                 lt.get_matmul_preference_attribute_dtype(a), value, what)
        results = np.zeros(algos, dtype=lt.matmul_heuristic_result_dtype)
        count = np.zeros(1, dtype=np.int32)
        la, lb, lc = plan.layouts
        _call("matmul_algo_get_heuristic", lt.matmul_algo_get_heuristic, handle(device), plan.desc, la, lb, lc, lc,
              pref, algos, results.ctypes.data, count.ctypes.data, what=what)
    finally:
        _call("matmul_preference_destroy", lt.matmul_preference_destroy, pref, what=what)
    usable = [i for i in range(min(int(count[0]), algos)) if int(results["state"][i]) == 0]
    if not usable:
        raise DriverError(f"cuBLASLt matmul_algo_get_heuristic ({what}) returned no usable algorithm "
                          f"({int(count[0])} returned)", result_name="CUBLAS_STATUS_NOT_SUPPORTED")
    plan.results = np.ascontiguousarray(results[usable])
    plan.candidates = tuple(
        Candidate(i, **{field: _config(lt, plan.algo_ptr(i), attr, what) for field, attr in CONFIG},
                  workspace=int(plan.results["workspace_size"][i]), waves=float(plan.results["waves_count"][i]))
        for i in range(len(usable)))


def plan_for(op: Any, acc: str, algos: int) -> Plan:
    """The cached Plan of validated operands (hgemm_rt.cublas.Operands), built on first use."""
    if not isinstance(algos, (int, np.integer)) or isinstance(algos, bool) or algos < 1:
        raise ValidationError(f"cuBLASLt: algos (heuristic candidates requested) must be >= 1, got {algos!r}")
    mp = mapping(op.M, op.N, op.K, op.a_order, op.lda, op.b_order, op.ldb, op.ldc, op.dtype, acc)
    aligns = (alignment(op.B.ptr), alignment(op.A.ptr), alignment(op.C.ptr))  # cuBLASLt's A, B, C
    device = op.C.device
    key = (device, op.M, op.N, op.K, op.a_order, op.lda, op.b_order, op.ldb, op.ldc, op.dtype, acc, aligns,
           int(algos))
    with _lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
        plan = Plan(key, mp, describe(op.M, op.N, op.K, op.dtype, acc, op.a_order, op.b_order))
        try:
            _build(plan, device, aligns, int(algos))
        except BaseException:
            plan.destroy()
            raise
        _plans[key] = plan
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)[1].destroy()
        return plan


# -- the public calls ----------------------------------------------------------------------------------

def candidates(a: Any, b: Any, c: Any, *, acc: str = "f32", algos: int = DEFAULT_ALGOS) -> tuple[Candidate, ...]:
    """The heuristic's usable algorithms for C = A . B on these buffers (their shapes, layouts, dtype and
    pointer alignment), best first, at most `algos`: run one with matmul(..., algo=index)."""
    return plan_for(operands(a, b, c, "cuBLASLt matmul"), acc, algos).candidates


def matmul(a: Any, b: Any, c: Any, *, acc: str = "f32", algo: int = 0, algos: int = DEFAULT_ALGOS,
           stream: Any = None, alpha: float = 1.0, beta: float = 0.0) -> Candidate:
    """C = alpha * A . B + beta * C through cublasLtMatmul with the heuristic's candidate `algo` (0: its
    first choice) out of the `algos` requested, on the caller's buffers: A and B each row- or
    column-major (any leading dimension), C row-major; fp16/bf16 with acc "f32" (or "f16" for fp16),
    fp32 with "f32" (or "tf32"). Returns the Candidate that ran."""
    op = operands(a, b, c, "cuBLASLt matmul")
    plan = plan_for(op, acc, algos)
    if isinstance(algo, bool) or not isinstance(algo, (int, np.integer)) or not 0 <= algo < len(plan.candidates):
        raise ValidationError(f"cuBLASLt matmul ({plan.what}): algo={algo!r}, but the heuristic gave "
                              f"{len(plan.candidates)} candidate(s) (0..{len(plan.candidates) - 1})")
    lt = _lt()
    device = op.C.device
    s = stream_handle(stream)
    scalars = np.array([alpha, beta], dtype=SCALAR[acc])
    alpha_ptr = scalars.ctypes.data
    ws, ws_bytes = workspace(device, s)
    with _lock:  # the plan stays alive (not evicted, not destroyed) until the call has read it
        la, lb, lc = plan.layouts
        _call("matmul", lt.matmul, handle(device), plan.desc, alpha_ptr, op.B.ptr, la, op.A.ptr, lb,
              alpha_ptr + scalars.itemsize, op.C.ptr, lc, op.C.ptr, lc, plan.algo_ptr(algo), ws, ws_bytes, s,
              what=f"{plan.what}, algo #{algo}")
    return plan.candidates[algo]


def cache_info() -> dict[str, int]:
    return {"plans": len(_plans), "workspaces": len(_workspaces), "handles": len(_handles)}


def release() -> None:
    """Destroy every plan, free the workspaces (once their devices are idle) and destroy the handles.
    The next call starts afresh. Errors are raised after everything was attempted."""
    errors: list[BaseException] = []

    def attempt(fn: Any) -> None:  # go on after a failure: every resource gets its chance
        try:
            fn()
        except Exception as exc:
            errors.append(exc)

    with _lock:
        plans = list(_plans.values())
        _plans.clear()
        for plan in plans:
            attempt(plan.destroy)
        spaces = list(_workspaces.items())
        _workspaces.clear()
        for device in sorted({d for (d, _), _ws in spaces}):
            attempt(lambda d=device: get_device(d).synchronize())  # no queued matmul still uses a workspace
        for _key, ws in spaces:
            attempt(ws.close)
        hs = list(_handles.values())
        _handles.clear()
        for h in hs:
            attempt(lambda h=h: _call("destroy", _lt().destroy, h))
    if errors:
        raise errors[0]


@atexit.register
def _release_at_exit() -> None:
    try:
        release()
    except Exception:  # interpreter shutdown: the context may be gone already
        pass
