"""The tolerance model: the float64 reference of a product, the relative error of a result, and the
bound no correct kernel exceeds (tuning.py checks each candidate route with it; the tests, the
benchmark and the sanitizer check their results with it)."""
from __future__ import annotations

import numpy as np


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
