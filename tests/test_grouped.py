"""grouped_matmul (hgemm_rt/grouped.py): mixture-of-experts GEMMs in one launch.

CPU: argument errors before anything touches the GPU. GPU (Hopper): the contiguous and masked layouts
against float64 on fresh N(0,1) inputs, with empty, ragged and clamped groups, both weight layouts, fp16 and
bf16, an epilogue; rows outside every group are left as they were. Repeat calls (the kept call: same and new
addresses, out=None, overlap refusals, new offsets contents, another stream, CuPy, a CUDA graph); their key logic
on the CPU: tests/test_grouped_repeat.py.
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


# ---------------------------------------------------------------------------------------------------
# GPU: repeat calls (grouped.GroupedCall: a kept call launched without validation or planning)
# ---------------------------------------------------------------------------------------------------

def _moe(torch, rng, E, T, K, N, dtype=None):
    """(x (T, K), w (E, K, N) as the transposed view of an (E, N, K) stack, int32 ends on the GPU): uniform-ish
    routing of T - 5 rows (the last 5 rows are in no group)."""
    dtype = dtype or torch.bfloat16
    ends = torch.tensor(np.cumsum(rng.multinomial(T - 5, np.ones(E) / E)), dtype=torch.int32, device="cuda")
    x = torch.randn(T, K, device="cuda", dtype=dtype)
    w = (torch.randn(E, N, K, device="cuda", dtype=dtype) / K ** 0.5).transpose(-1, -2)
    return x, w, ends


def _torch_moe_out(rng, E, T, K, N):
    """On a Hopper GPU with torch (else skipped): torch, _moe's x, w, ends and an empty (T, N) out."""
    _hopper()
    torch = pytest.importorskip("torch")
    x, w, ends = _moe(torch, rng, E, T, K, N)
    return torch, x, w, ends, torch.empty(T, N, device="cuda", dtype=x.dtype)


def _moe_ref(x, w, ends):
    """float64 rows of every group (T, N); rows in no group are NaN."""
    import torch

    want = torch.full((x.shape[0], w.shape[2]), float("nan"), dtype=torch.float64, device=x.device)
    start = 0
    for e, end in enumerate(ends.tolist()):
        want[start:end] = x[start:end].double() @ w[e].double()
        start = end
    return want


def _assert_moe(got, x, w, ends):
    want = _moe_ref(x, w, ends)
    rows = int(ends[-1])
    err = float((got[:rows].double() - want[:rows]).norm() / want[:rows].norm())
    dtype = "bf16" if str(x.dtype) == "torch.bfloat16" else "f16"
    assert err <= error_floor(dtype, "f32", dtype, x.shape[1]), err


def _first_torch_call(rng, E, T, K, N):
    """(torch, x, w, ends, out, a copy of the first call's result, checked against float64)."""
    _hopper()
    torch = pytest.importorskip("torch")
    x, w, ends = _moe(torch, rng, E, T, K, N)
    out = torch.full((T, N), float("nan"), dtype=x.dtype, device="cuda")
    first = hg.grouped_matmul(x, w, out=out, offsets=ends).clone()
    _assert_moe(first, x, w, ends)
    return torch, x, w, ends, out, first


@pytest.mark.gpu
def test_grouped_repeats_on_the_same_and_on_new_addresses_match_the_first_call(rng):
    from hgemm_rt.grouped import repeat_key

    torch, x, w, ends, out, first = _first_torch_call(rng, 8, 700, 256, 192)
    assert repeat_key(x, w, out, offsets=ends) in hg.plans.calls
    for _ in range(3):  # the same tensors: the kept call
        out.fill_(float("nan"))
        assert hg.grouped_matmul(x, w, out=out, offsets=ends) is out
        assert torch.equal(out[:int(ends[-1])], first[:int(ends[-1])]) and out[int(ends[-1]):].isnan().all()
    # new tensors of the same description: the same kept call, on their addresses
    x2, w2, ends2 = x.clone(), w.transpose(-1, -2).clone().transpose(-1, -2), ends.clone()
    out2 = torch.full_like(out, float("nan"))
    assert repeat_key(x2, w2, out2, offsets=ends2) == repeat_key(x, w, out, offsets=ends)
    hg.grouped_matmul(x2, w2, out=out2, offsets=ends2)
    assert torch.equal(out2[:int(ends[-1])], first[:int(ends[-1])])
    x3 = torch.randn_like(x2)  # new values too
    hg.grouped_matmul(x3, w2, out=out2, offsets=ends2)
    _assert_moe(out2, x3, w2, ends2)


@pytest.mark.gpu
def test_grouped_repeats_on_device_arrays_with_torch_offsets_match_float64(rng):
    _hopper()
    torch = pytest.importorskip("torch")
    E, T, K, N = 4, 300, 192, 320
    ends = torch.tensor([0, 130, 131, 290], dtype=torch.int32, device="cuda")
    w = _weights(rng, E, K, N, "f16", "col")
    for i in range(3):  # new x and out buffers each time: the kept call on their addresses
        x = GuardedArray(rng.standard_normal((T, K)), "f16")
        out = hg.empty((T, N), "f16")
        out.fill_bytes(0xFF)
        hg.grouped_matmul(x.view, w.view, out, offsets=ends)
        got = storage_to_f64(out.to_host(), "f16")
        for e, (s, t) in enumerate(zip([0, 0, 130, 131], [0, 130, 131, 290])):
            if t > s:
                want = x.exact[s:t] @ w.exact[e]
                assert np.linalg.norm(got[s:t] - want) / np.linalg.norm(want) <= error_floor("f16", "f32", "f16", K)
        assert np.isnan(got[290:]).all(), i


@pytest.mark.gpu
def test_grouped_repeat_without_out_returns_a_new_tensor_each_call(rng):
    _hopper()
    torch = pytest.importorskip("torch")
    x, w, ends = _moe(torch, rng, 6, 400, 128, 256)
    results = [hg.grouped_matmul(x, w, offsets=ends) for _ in range(3)]
    assert len({r.data_ptr() for r in results}) == 3
    assert all(isinstance(r, torch.Tensor) and r.shape == (400, 256) and r.dtype == x.dtype for r in results)
    rows = int(ends[-1])
    assert all(torch.equal(r[:rows], results[0][:rows]) for r in results)
    _assert_moe(results[-1], x, w, ends)


@pytest.mark.gpu
def test_grouped_repeat_refuses_an_out_overlapping_an_input_as_the_first_call_does(rng, fresh_plans):
    _hopper()
    torch = pytest.importorskip("torch")
    T, K, N, E = 256, 128, 128, 4
    buf = torch.randn(2 * T * K, device="cuda", dtype=torch.bfloat16)
    x = buf[:T * K].view(T, K)
    inside_x = buf[T * K // 2:T * K // 2 + T * N].view(T, N)  # (256-byte aligned, as a fresh out is)
    w = (torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5).transpose(-1, -2)
    ends = torch.tensor([64, 128, 192, 256], dtype=torch.int32, device="cuda")
    with pytest.raises(ValidationError) as first:  # the full path
        hg.grouped_matmul(x, w, out=inside_x, offsets=ends)
    hg.grouped_matmul(x, w, out=torch.empty(T, N, device="cuda", dtype=torch.bfloat16), offsets=ends)  # kept
    with pytest.raises(ValidationError) as repeat:
        hg.grouped_matmul(x, w, out=inside_x, offsets=ends)
    assert str(repeat.value) == str(first.value) and "out overlaps A" in str(first.value)
    w_rows = w.transpose(-1, -2).reshape(E * N, K)[:T]  # (T, N) too: K == N
    with pytest.raises(ValidationError, match="out overlaps B in memory"):
        hg.grouped_matmul(x, w, out=w_rows, offsets=ends)


@pytest.mark.gpu
def test_grouped_repeat_reads_the_offsets_contents_on_the_gpu_each_call(rng):
    torch, x, w, ends, out = _torch_moe_out(rng, 8, 600, 256, 128)
    for i in range(4):  # the same tensor, new routing each call
        ends.copy_(torch.tensor(np.cumsum(rng.multinomial(600 - 7 * i, rng.dirichlet(np.ones(8)))),
                                dtype=torch.int32))
        out.fill_(float("nan"))
        hg.grouped_matmul(x, w, out=out, offsets=ends)
        _assert_moe(out, x, w, ends)
        assert out[int(ends[-1]):].isnan().all(), i


@pytest.mark.gpu
def test_grouped_repeat_on_another_stream_runs_there_and_stays_correct(rng):
    torch, x, w, ends, out, first = _first_torch_call(rng, 4, 500, 128, 256)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    for explicit in (False, True, False):
        with torch.cuda.stream(side):
            out.fill_(float("nan"))
            hg.grouped_matmul(x, w, out=out, offsets=ends, stream=side if explicit else None)
            got = out.clone()  # (on the side stream: after the launch if it ran there)
        side.synchronize()
        assert torch.equal(got[:int(ends[-1])], first[:int(ends[-1])]), explicit
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_grouped_repeat_with_cupy_arrays_matches_float64(rng):
    _hopper()
    cupy = pytest.importorskip("cupy")
    E, T, K, N = 4, 300, 128, 192
    sizes = np.array([0, 130, 1, 160])
    ends = cupy.asarray(np.cumsum(sizes).astype(np.int32))
    w_h = (rng.standard_normal((E, N, K)) / K ** 0.5).astype(np.float16)
    w = cupy.asarray(w_h).transpose(0, 2, 1)
    for i in range(3):
        x_h = rng.standard_normal((T, K)).astype(np.float16)
        out = cupy.full((T, N), np.nan, dtype=cupy.float16)
        hg.grouped_matmul(cupy.asarray(x_h), w, out, offsets=ends)
        got = cupy.asnumpy(out).astype(np.float64)
        start = 0
        for e, n in enumerate(sizes):
            if n:
                want = x_h[start:start + n].astype(np.float64) @ w_h[e].T.astype(np.float64)
                assert np.linalg.norm(got[start:start + n] - want) / np.linalg.norm(want) <= \
                    error_floor("f16", "f32", "f16", K), (i, e)
            start += n
        assert np.isnan(got[start:]).all(), i


@pytest.mark.gpu
def test_grouped_repeat_captured_in_a_cuda_graph_replays_with_new_contents(rng):
    torch, x, w, ends, out = _torch_moe_out(rng, 8, 640, 256, 128)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the first call, outside the capture, on the capture's stream
        hg.grouped_matmul(x, w, out=out, offsets=ends)
        hg.grouped_matmul(x, w, offsets=ends)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        hg.grouped_matmul(x, w, out=out, offsets=ends)
        new = hg.grouped_matmul(x, w, offsets=ends)  # (a result in the graph's pool)
    for _ in range(2):  # new inputs and routing, the same tensors: the replay reads them
        x.copy_(torch.randn_like(x))
        ends.copy_(torch.tensor(np.cumsum(rng.multinomial(630, np.ones(8) / 8)), dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_moe(out, x, w, ends)
        _assert_moe(new, x, w, ends)
        assert out[int(ends[-1]):].isnan().all()
