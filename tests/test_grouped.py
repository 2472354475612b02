"""grouped_matmul (hgemm_rt/grouped.py): mixture-of-experts GEMMs in one launch.

CPU: argument errors before anything touches the GPU. GPU (Hopper): the contiguous and masked layouts
against float64 on fresh N(0,1) inputs, with empty, ragged and clamped groups, both weight layouts, fp16 and
bf16, an epilogue; rows outside every group are left as they were.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import DeviceArray
from hgemm_rt.dtypes import storage_to_f64
from hgemm_rt.epilogue import Epilogue, reference
from hgemm_rt.errors import ValidationError
from hgemm_rt.numerics import error_floor
from guarded import GuardedArray


class _DeviceInt32:
    """An int32 vector on the GPU, as __cuda_array_interface__ shows it (device counts are clamped by the kernels;
    host ones are checked before the launch)."""

    def __init__(self, host):
        self.buf = DeviceArray.from_numpy(np.ascontiguousarray(host, np.int32).view(np.float32))
        self.__cuda_array_interface__ = {"data": (self.buf.ptr, False), "typestr": "<i4", "shape": host.shape,
                                         "version": 3}


def _fake(ptr, shape, dtype="f16"):
    return DeviceArray(ptr, shape, dtype)


X, W = _fake(1 << 36, (100, 64)), _fake(2 << 36, (4, 64, 32))
ENDS = np.array([10, 20, 30, 100], np.int32)
ERRORS = [
    ("exactly one of", lambda: hg.grouped_matmul(X, W)),
    ("exactly one of", lambda: hg.grouped_matmul(X, W, offsets=ENDS, counts=ENDS)),
    ("B must be (experts, K, N)", lambda: hg.grouped_matmul(X, _fake(2 << 36, (64, 32)), offsets=ENDS)),
    ("contiguous A must be (rows, K)", lambda: hg.grouped_matmul(_fake(1 << 36, (4, 25, 64)), W, offsets=ENDS)),
    ("masked A must be (experts, max_M, K)", lambda: hg.grouped_matmul(X, W, counts=ENDS)),
    ("has K = 63", lambda: hg.grouped_matmul(_fake(1 << 36, (100, 63)), W, offsets=ENDS)),
    ("has 3 entries for 4 experts", lambda: hg.grouped_matmul(X, W, offsets=ENDS[:3])),
    ("1-D int32", lambda: hg.grouped_matmul(X, W, offsets=ENDS.astype(np.int64))),
    ("masked A has 3 experts", lambda: hg.grouped_matmul(_fake(1 << 36, (3, 25, 64)), W, counts=ENDS)),
    ("fp16 or bf16", lambda: hg.grouped_matmul(_fake(1 << 36, (100, 64), "f32"), _fake(2 << 36, (4, 64, 32), "f32"),
                                               offsets=ENDS)),
    ("beta != 0 needs out=", lambda: hg.grouped_matmul(X, W, offsets=ENDS, beta=1.0)),
    ("the result is f16 (100, 32)", lambda: hg.grouped_matmul(X, W, _fake(3 << 36, (100, 33)), offsets=ENDS)),
    ("is not one of", lambda: hg.grouped_matmul(X, W, offsets=ENDS, activation="tanh")),
    ("at most 492", lambda: hg.grouped_matmul(X, _fake(2 << 36, (493, 64, 32)), offsets=np.zeros(493, np.int32))),
]


@pytest.mark.parametrize("needle,call", ERRORS, ids=[f"{i}-{e[0]}" for i, e in enumerate(ERRORS)])
def test_bad_grouped_arguments_are_refused_before_the_gpu(needle, call):
    with pytest.raises(ValidationError, match=re.escape(needle)):
        call()


def _hopper():
    if not hg.gpu_available() or hg.get_device().info.cc < (9, 0):
        pytest.skip("grouped_matmul runs on Hopper GPUs")


def _weights(rng, E, K, N, dtype, layout):
    """(E, K, N) weights: row-major, or the transposed view of an (E, N, K) tensor (nn.Linear's)."""
    w = rng.standard_normal((E, K, N)) / K ** 0.5
    if layout == "row":
        return GuardedArray(w, dtype)
    g = GuardedArray(np.ascontiguousarray(w.transpose(0, 2, 1)), dtype)
    g.view = DeviceArray(g.view.ptr, (E, K, N), dtype, (g.view.strides[0], g.view.strides[2], g.view.strides[1]),
                         owner=g.buf)
    g.exact = np.ascontiguousarray(g.exact.transpose(0, 2, 1))
    return g


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("sizes", [(0, 130, 1, 257, 0, 64), (500,), (3, 0, 0, 2)])
def test_contiguous_groups_match_float64(dtype, layout, sizes, rng):
    _hopper()
    E, K, N = len(sizes), 192, 320
    T = sum(sizes) + 7  # rows past the last group: never written
    x = GuardedArray(rng.standard_normal((T, K)), dtype)
    w = _weights(rng, E, K, N, dtype, layout)
    out = hg.empty((T, N), dtype)
    out.fill_bytes(0xFF)  # NaN: a row the kernel should not write stays NaN
    ends = np.cumsum(sizes).astype(np.int32)
    hg.grouped_matmul(x.view, w.view, out, offsets=ends)
    got = storage_to_f64(out.to_host(), dtype)
    start = 0
    for e, n in enumerate(sizes):
        want = x.exact[start:start + n] @ w.exact[e]
        if n:
            err = np.linalg.norm(got[start:start + n] - want) / np.linalg.norm(want)
            assert err <= error_floor(dtype, "f32", dtype, K), (e, n, err)
        start += n
    assert np.isnan(got[start:]).all(), "rows past the last group were written"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("act", [None, "swiglu"])
def test_masked_groups_match_float64_and_clamp_counts(dtype, act, rng):
    _hopper()
    E, max_m, K, N = 6, 200, 136, 256
    counts = np.array([0, 200, 1, 77, 999, 128], np.int32)  # 999: clamped to max_M (on the GPU: host ones are refused)
    x = GuardedArray(rng.standard_normal((E, max_m, K)), dtype)
    w = _weights(rng, E, K, N, dtype, "col")
    n_out = N // 2 if act else N
    out = hg.empty((E, max_m, n_out), dtype)
    out.fill_bytes(0xFF)
    on_gpu = _DeviceInt32(counts)  # (alive until the result is read: the kernel reads it)
    hg.grouped_matmul(x.view, w.view, out, counts=on_gpu, activation=act)
    got = storage_to_f64(out.to_host(), dtype)
    on_gpu.buf.close()
    for e in range(E):
        n = min(int(counts[e]), max_m)
        if n:
            want = reference(x.exact[e, :n] @ w.exact[e], Epilogue(None, act))
            err = np.linalg.norm(got[e, :n] - want) / np.linalg.norm(want)
            assert err <= 2 * error_floor(dtype, "f32", dtype, K), (e, n, err)
        assert np.isnan(got[e, n:]).all(), f"expert {e}: rows past its count were written"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("mode", ["offsets", "counts"])
def test_an_output_tma_cannot_store_goes_through_its_pointer(dtype, mode, rng):
    """Results whose rows are not whole 16-byte runs (N = 331: 662-byte rows; an out= with a 339-element pitch, 2
    bytes past 16-byte alignment): every group's rows to float64 with alpha and gelu, empty and ragged groups, and
    nothing else written (rows outside the groups and the pitch's gap stay NaN). (C_old through the pointer:
    tests/test_unmapped_c.py.)"""
    _hopper()
    E, K, N, pitch, sizes = 4, 160, 331, 339, (0, 130, 1, 77)
    w = _weights(rng, E, K, N, dtype, "col")  # (E, N, K): nn.Linear's, rows of 320 bytes
    if mode == "offsets":
        T = sum(sizes) + 5
        x = GuardedArray(rng.standard_normal((T, K)), dtype)
        buf = hg.empty((T * pitch + 1,), dtype)
        buf.fill_bytes(0xFF)
        out = DeviceArray(buf.ptr + 2, (T, N), dtype, (pitch * 2, 2), owner=buf)  # 2 bytes past alignment
        rows = np.split(np.arange(T), np.cumsum(sizes))[:E]
        kw = {"offsets": np.cumsum(sizes).astype(np.int32)}
    else:
        max_m = 140
        x = GuardedArray(rng.standard_normal((E, max_m, K)), dtype)
        buf = hg.empty((E * max_m * pitch + 1,), dtype)
        buf.fill_bytes(0xFF)
        out = DeviceArray(buf.ptr + 2, (E, max_m, N), dtype, (max_m * pitch * 2, pitch * 2, 2), owner=buf)
        rows = [np.arange(n) for n in sizes]
        kw = {"counts": np.array(sizes, np.int32)}
    hg.grouped_matmul(x.view, w.view, out, alpha=0.5, activation="gelu", **kw)
    host = storage_to_f64(buf.to_host(), dtype)[1:]
    got = np.lib.stride_tricks.as_strided(host, out.shape, tuple(s // 2 * 8 for s in out.strides))
    written = np.zeros(host.shape, bool)
    for e, r in enumerate(rows):
        if not r.size:
            continue
        a = x.exact[r] if mode == "offsets" else x.exact[e, r]
        want = reference(0.5 * (a @ w.exact[e]), Epilogue(None, "gelu"))
        part = got[r] if mode == "offsets" else got[e, r]
        err = np.linalg.norm(part - want) / np.linalg.norm(want)
        assert err <= 2 * error_floor(dtype, "f32", dtype, K), (e, err)
        for i in r:
            base = (i if mode == "offsets" else e * max_m + i) * pitch
            written[base:base + N] = True
    assert np.isnan(host[~written]).all(), "wrote outside the groups' rows of out"


@pytest.mark.gpu
def test_grouped_from_torch_matches_grouped_mm_where_torch_has_it(rng):
    _hopper()
    torch = pytest.importorskip("torch")
    E, K, N, T = 8, 512, 384, 3000
    sizes = rng.multinomial(T, rng.dirichlet(np.ones(E) * 0.3))  # skewed routing
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    got = hg.grouped_matmul(x, w.transpose(-1, -2), offsets=ends)
    want = torch.cat([x[s:e].double() @ w[i].double().t() for i, (s, e) in
                      enumerate(zip([0, *np.cumsum(sizes)[:-1]], np.cumsum(sizes)))])
    assert float((got.double() - want).norm() / want.norm()) <= error_floor("bf16", "f32", "bf16", K)
    if hasattr(torch, "_grouped_mm"):
        ref = torch._grouped_mm(x, w.transpose(-1, -2), offs=ends)
        assert float((got.double() - ref.double()).norm() / ref.double().norm()) <= 2 * error_floor(
            "bf16", "f32", "bf16", K)
