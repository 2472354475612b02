"""Every kernel in the manifest (and every cuBLAS entry) against a float64 reference on the GPU, at
aligned and ragged shapes, on fresh random inputs, into NaN-poisoned output; and refusals."""
from __future__ import annotations

import pytest

import hgemm_rt as hg
from hgemm_rt.registry import BASELINES
from hgemm_bench.kernel_checks import run_checked, shapes_for
from kernel_cases import load_manifest_or_none, refusal_shapes

pytestmark = pytest.mark.gpu

_M = load_manifest_or_none()
SPECS = sorted((s for s in _M.kernels.values() if s.catalogue), key=lambda s: (s.ladder, s.step, s.name)) if _M else []


def _cases():
    for spec in SPECS:
        choices = spec.variant_choices()
        for label, M, N, K in shapes_for(spec):
            # every variant at the aligned and ragged shapes; the default one at the others
            for choice in choices if label in ("aligned", "ragged") else [spec.resolve_variant({})]:
                tag = "-".join(f"{k}{v}" for k, v in choice.items())
                yield pytest.param(spec.name, choice, (M, N, K), {}, id=f"{spec.name}-{tag}-{label}-{M}x{N}x{K}")
        if spec.grid == "tiles+swizzle":
            BM, BN, BK = spec.tile
            M, N, K = 2 * BM, 5 * BN, max(2 * BK, spec.require.get("K", 1))
            opts = {"swizzle": True, "swizzle_stride": 2 * BN}  # 3 strips, the last one short
            yield pytest.param(spec.name, spec.resolve_variant({}), (M, N, K), opts,
                               id=f"{spec.name}-swizzle-{M}x{N}x{K}")


@pytest.mark.parametrize("name,choice,shape,opts", list(_cases()))
def test_kernel_matches_float64_reference(name, choice, shape, opts, rng):
    entry = hg.get_kernel(name)
    M, N, K = shape
    r = run_checked(entry, M, N, K, rng, **choice, **opts)
    assert r["error"] <= r["bound"], (
        f"{name} {choice} {opts} at {M}x{N}x{K}: rel error {r['error']:.3e} > bound {r['bound']:.3e} "
        f"(cuBLAS {r['cublas_error']}, acc {r['acc']})"
    )


def _refusals():
    for spec in SPECS:
        for label, M, N, K in refusal_shapes(spec):
            yield pytest.param(spec.name, (M, N, K), id=f"{spec.name}-{label}-{M}x{N}x{K}")


@pytest.mark.parametrize("name,shape", list(_refusals()))
def test_kernel_refuses_shapes_it_cannot_take(name, shape):
    entry = hg.get_kernel(name)
    M, N, K = shape
    b_shape = (K, N) if entry.layout == "NN" else (N, K)
    a_shape = (M, K) if entry.a_order == "row" else (K, M)  # column-major A: the .T view of K x M
    with hg.empty(a_shape, entry.dtype) as A, hg.empty(b_shape, entry.dtype) as B, hg.empty((M, N), entry.out) as C:
        with pytest.raises(hg.ValidationError, match="not a multiple of"):
            entry(A if entry.a_order == "row" else A.T, B, C)


@pytest.mark.parametrize("name,acc", [(e.name, acc) for e in BASELINES for acc in e.variants["acc"]])
@pytest.mark.parametrize("shape", [(256, 384, 512), (33, 65, 17)])
def test_cublas_baseline_matches_float64_reference(name, acc, shape, rng):
    entry = hg.get_kernel(name)
    r = run_checked(entry, *shape, rng, with_cublas=False, acc=acc)
    assert r["error"] <= r["bound"], f"{name} acc={acc} at {shape}: {r['error']:.3e} > {r['bound']:.3e}"


def test_launch_by_alias_on_an_explicit_stream(rng):
    from hgemm_bench.kernel_checks import random_operands
    from hgemm_rt.numerics import reference, rel_error

    name = "hgemm_cute_tn" if _M and "hgemm_cute_tn" in _M.aliases else "hgemm_naive_f16"
    entry = hg.get_kernel(name)
    M, N, K = 256, 256, 128
    a, b = random_operands(M, N, K, entry.layout, "f16", rng)
    with hg.Stream() as s, hg.to_device(a) as A, hg.to_device(b) as B, hg.empty((M, N), "f16") as C:
        C.fill_bytes(0xFF, s)
        hg.launch(name, A, B, C, stream=s)
        s.synchronize()
        assert rel_error(C.to_numpy(), reference(a, b, entry.layout)) < 5e-3
