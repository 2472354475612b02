"""The catalogue kernels' correctness checks, shared by the sanitizer (sanitize.py) and the GPU tests:
random operands, the cuBLAS entry and accumulation each kernel is compared with, one checked launch
against the float64 reference (hgemm_rt.numerics), the shapes each kernel is checked at (derived from
its declaration), and which kernels a --kernels pattern selects."""
from __future__ import annotations

import fnmatch

import numpy as np

from hgemm_rt.dtypes import numpy_dtype
from hgemm_rt.numerics import error_bound, reference, rel_error


def random_operands(M: int, N: int, K: int, layout: str, dtype: str, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B (K x N for NN, N x K for TN), N(0, 1) entries: never zeros, which hide
    unwritten outputs and run faster than real data."""
    npdt = numpy_dtype(dtype)
    a = rng.standard_normal((M, K), dtype=np.float32).astype(npdt)
    b_shape = (K, N) if layout == "NN" else (N, K)
    b = rng.standard_normal(b_shape, dtype=np.float32).astype(npdt)
    return a, b


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
    from hgemm_rt.memory import DeviceArray

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
    from hgemm_rt import cublas
    from hgemm_rt.memory import DeviceArray

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


def selected_specs(manifest, pattern: str | None, helpers: bool) -> list:
    """The catalogue kernels (helpers=False) or matmul helper kernels (helpers=True) whose name matches a
    glob or contains the pattern, or one of a comma-separated list of them (every one without a pattern)."""
    globs = [g for g in (pattern or "").split(",") if g]

    def match(name: str) -> bool:
        return not globs or any(fnmatch.fnmatch(name, g) or g in name for g in globs)

    return [s for s in manifest.kernels.values() if (not s.catalogue) == helpers and match(s.name)]
