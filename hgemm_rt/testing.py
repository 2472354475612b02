"""Correctness helpers shared by the tests and the benchmark: random operands, the float64
reference, the relative error and its bound."""
from __future__ import annotations

import numpy as np

from .memory import numpy_dtype


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
    clamp = {"tf32": 1e-3, "f16": 3e-4}.get(acc, 3e-4 if out != "f32" else 1e-6)
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
