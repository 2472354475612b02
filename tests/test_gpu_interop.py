"""hg.matmul called from PyTorch, CuPy and JAX code, on the GPU: stream ordering against a producer
that is still busy on another stream (with negative controls showing the ordering checks can fail),
results in the caller's framework, tensors that require grad, the Matmul plan object and repeat
calls that must re-read memory. Every result is checked against a float64 reference of fresh
random inputs.

torch, cupy and jax are optional: each test imports its framework with pytest.importorskip.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt.api import GRAPH_AFTER_REPEATS, repeat_key
from hgemm_rt import operands as ops

pytestmark = pytest.mark.gpu

# relative Frobenius error bounds, accumulate="f32" (the default)
BOUND = {"f16": 1e-3, "bf16": 8e-3, "f32": 1e-5}

# The ordering tests use an aligned shape whose recipe needs no temporaries on sm_80/sm_90 (creating
# an execution with temporaries synchronizes the device, which would hide a missing wait).
M, N, K = 512, 384, 256
SHORT_DELAY = 50e-3  # seconds the producer stream stays busy before it writes A
LONG_DELAY = 200e-3  # the negative controls: the race must be observed every time


def _rel(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def _delay_cycles(seconds: float) -> int:
    """GPU clock cycles that last at least `seconds` (the reported clock is the maximum: a slower
    clock only makes the delay longer)."""
    khz = hg.get_device().info.clock_khz or 2_000_000
    return int(seconds * khz * 1e3)


# ---------------------------------------------------------------------------------------------------
# torch helpers
# ---------------------------------------------------------------------------------------------------

def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def _tdtype(torch, dt: str):
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]


def _trand(torch, rng, shape, dt="f16"):
    """Fresh N(0, 1) values rounded to `dt`, on the GPU (queued on torch's current stream)."""
    return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device="cuda", dtype=_tdtype(torch, dt))


def _t64(t) -> np.ndarray:
    """A torch tensor's exact values as float64 numpy."""
    return t.detach().float().cpu().numpy().astype(np.float64)


def _torch_race(torch, rng, explicit: bool, seconds: float, iterations: int = 2):
    """The producer scenario: A is NaN (written and synchronized on the default stream); on a
    non-blocking stream s the GPU sleeps `seconds`, then writes new values into A, then matmul is
    called while s is still busy: without stream= (it must run on s) or with stream=s2, another
    torch stream (s2 must wait for s). Iteration 0 takes matmul's full path, the later ones the
    validated-call cache. Returns per iteration (relative error, A's producer still busy after the
    call, the result object, out)."""
    a = torch.full((M, K), float("nan"), device="cuda", dtype=torch.float16)
    b = _trand(torch, rng, (K, N))
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16) if explicit else None
    s, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    runs = []
    for _ in range(iterations):
        src = _trand(torch, rng, (M, K))
        a.fill_(float("nan"))
        if out is not None:
            out.fill_(float("nan"))
        ref = _t64(src) @ _t64(b)
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(_delay_cycles(seconds))
            a.copy_(src)
            c = hg.matmul(a, b, out=out, stream=s2) if explicit else hg.matmul(a, b)
            busy = not s.query()
        torch.cuda.synchronize()
        runs.append((_rel(_t64(c), ref), busy, c, out))
    return runs


# ---------------------------------------------------------------------------------------------------
# 1. torch producer on a non-default stream
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("explicit", [False, True], ids=["current-stream", "explicit-stream"])
def test_torch_producer_stream_is_ordered_before_matmul(explicit, rng):
    torch = _torch()
    runs = _torch_race(torch, rng, explicit, SHORT_DELAY)
    for i, (err, busy, c, out) in enumerate(runs):
        if explicit:
            assert c is out
        assert err < BOUND["f16"], f"iteration {i}: rel err {err:.2e}: matmul did not wait for the producer stream"
        if i:  # the repeat path never synchronizes: the race window was open when matmul was queued
            assert busy, f"iteration {i}: the delay had already ended when matmul returned (test inconclusive)"


# ---------------------------------------------------------------------------------------------------
# 2. CuPy producer on a non-default stream
# ---------------------------------------------------------------------------------------------------

_SPIN = r"""
extern "C" __global__ void hg_test_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
        __nanosleep(1000);
    }
}
"""


def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("cupy sees no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("cupy sees no CUDA device")
    return cupy


@pytest.mark.parametrize("explicit", [False, True], ids=["current-stream", "explicit-stream"])
def test_cupy_producer_stream_is_ordered_before_matmul(explicit, rng):
    cupy = _cupy()
    spin = cupy.RawKernel(_SPIN, "hg_test_spin")
    spin((1,), (1,), (np.int64(0),))  # compiled and loaded outside the race
    b_h = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
    a = cupy.full((M, K), np.nan, dtype=cupy.float16)
    b = cupy.asarray(b_h)
    out = cupy.full((M, N), np.nan, dtype=cupy.float16) if explicit else None
    stream = cupy.cuda.Stream(non_blocking=True)
    other = cupy.cuda.Stream(non_blocking=True)
    for i in range(2):  # the full path, then the validated-call cache
        src_h = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
        src = cupy.asarray(src_h)
        a.fill(np.nan)
        if out is not None:
            out.fill(np.nan)
        cupy.cuda.Device().synchronize()
        ref = src_h.astype(np.float64) @ b_h.astype(np.float64)
        with stream:
            spin((1,), (1,), (np.int64(_delay_cycles(SHORT_DELAY)),))
            a[...] = src
            c = hg.matmul(a, b, out=out, stream=other) if explicit else hg.matmul(a, b)
            busy = not stream.done
        cupy.cuda.Device().synchronize()
        if explicit:
            assert c is out
        assert isinstance(c, cupy.ndarray)
        err = _rel(cupy.asnumpy(c), ref)
        assert err < BOUND["f16"], f"iteration {i}: rel err {err:.2e}: matmul did not wait for the producer stream"
        if i:
            assert busy, f"iteration {i}: the delay had already ended when matmul returned (test inconclusive)"


# ---------------------------------------------------------------------------------------------------
# 3. negative controls: without the ordering, the same scenario reads the old (NaN) A
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("explicit", [False, True], ids=["current-stream", "explicit-stream"])
def test_negative_control_without_ordering_the_race_is_observed(explicit, rng, monkeypatch, fresh_plans):
    """With torch's stream taken to be the legacy default stream (which does not wait for torch's
    non-blocking streams) and the producer waits removed, the scenario of the ordering test must
    give a wrong result: this proves that test can fail."""
    torch = _torch()
    a = torch.full((M, K), float("nan"), device="cuda", dtype=torch.float16)
    b = _trand(torch, rng, (K, N))
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    src = _trand(torch, rng, (M, K))
    s, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    kw = {"stream": s2} if explicit else {}
    with monkeypatch.context() as mp:
        mp.setattr(ops, "FRAMEWORK_STREAM", dict(ops.FRAMEWORK_STREAM, torch=lambda device: 0))
        mp.setattr(ops, "order_after_producers", lambda *args, **kwargs: None)
        # a first call with valid inputs, outside the race: the plan and its execution exist, so
        # the call in the race is the repeat path (nothing in it synchronizes)
        a.copy_(src)
        torch.cuda.synchronize()
        hg.matmul(a, b, out=out, **kw)
        torch.cuda.synchronize()
        warm = _rel(_t64(out), _t64(src) @ _t64(b))
        assert warm < BOUND["f16"], f"the warm-up call itself is wrong ({warm:.2e})"
        src2 = _trand(torch, rng, (M, K))
        ref = _t64(src2) @ _t64(b)
        a.fill_(float("nan"))
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(_delay_cycles(LONG_DELAY))
            a.copy_(src2)
            hg.matmul(a, b, out=out, **kw)
            busy = not s.query()
        torch.cuda.synchronize()
        err = _rel(_t64(out), ref)
    assert busy, "the delay had already ended when matmul returned: no race to observe"
    assert not err < BOUND["f16"], (f"rel err {err:.2e}: the unordered call still saw the producer's write, "
                                    "so the ordering tests cannot tell a missing wait")


# ---------------------------------------------------------------------------------------------------
# 4. results in the caller's framework
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["f16", "bf16", "f32"])
def test_torch_inputs_give_a_torch_result(dt, rng):
    torch = _torch()
    m, n, k = 200, 136, 120
    x = _trand(torch, rng, (m, k), dt)
    w = _trand(torch, rng, (n, k), dt)  # an nn.Linear weight: x @ w.t()
    ref = _t64(x) @ _t64(w).T
    for b in (w.t(), w.t().contiguous()):  # column-major and row-major B
        c = hg.matmul(x, b)
        torch.cuda.synchronize()
        assert isinstance(c, torch.Tensor)
        assert c.device == x.device and c.dtype == x.dtype and tuple(c.shape) == (m, n) and c.is_contiguous()
        err = _rel(_t64(c), ref)
        assert err < BOUND[dt], (dt, b.stride(), err)


@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_cupy_inputs_give_a_cupy_result(dt, rng):
    cupy = _cupy()
    npdt = {"f16": np.float16, "f32": np.float32}[dt]
    m, n, k = 200, 136, 120
    x_h = rng.standard_normal((m, k), dtype=np.float32).astype(npdt)
    w_h = rng.standard_normal((n, k), dtype=np.float32).astype(npdt)
    ref = x_h.astype(np.float64) @ w_h.astype(np.float64).T
    x, w = cupy.asarray(x_h), cupy.asarray(w_h)
    for b in (w.T, cupy.ascontiguousarray(w.T)):
        c = hg.matmul(x, b)
        cupy.cuda.Device().synchronize()
        assert isinstance(c, cupy.ndarray)
        assert c.dtype == npdt and c.shape == (m, n) and c.flags.c_contiguous and c.device.id == x.device.id
        err = _rel(cupy.asnumpy(c), ref)
        assert err < BOUND[dt], (dt, b.strides, err)


# ---------------------------------------------------------------------------------------------------
# 5. tensors that require grad
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_requires_grad_inputs_are_read_and_out_is_refused(dt, rng):
    torch = _torch()
    m, n, k = 96, 80, 64
    w = torch.nn.Parameter(_trand(torch, rng, (n, k), dt))
    x = _trand(torch, rng, (m, k), dt).requires_grad_(True)
    ref = _t64(x) @ _t64(w).T
    c = hg.matmul(x, w.t())
    torch.cuda.synchronize()
    assert _rel(_t64(c), ref) < BOUND[dt]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=_tdtype(torch, dt))
    assert hg.matmul(x, w.t(), out=out) is out  # an out that does not require grad is fine
    torch.cuda.synchronize()
    assert _rel(_t64(out), ref) < BOUND[dt]
    for bad in (torch.zeros((m, n), device="cuda", dtype=_tdtype(torch, dt), requires_grad=True),
                torch.nn.Parameter(torch.zeros((m, n), device="cuda", dtype=_tdtype(torch, dt)))):
        with pytest.raises(hg.ValidationError, match="requires grad"):
            hg.matmul(x, w.t(), out=bad)
        torch.cuda.synchronize()
        assert not bad.detach().any().item()  # untouched


# ---------------------------------------------------------------------------------------------------
# 6. JAX arrays as inputs
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_jax_arrays_as_inputs(dt, rng):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before jax is imported
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        pytest.skip("jax has no GPU device")
    jdt = {"f16": jnp.float16, "f32": jnp.float32}[dt]
    m, n, k = 200, 136, 120
    xa = jax.device_put(rng.standard_normal((m, k), dtype=np.float32), gpus[0]).astype(jdt)
    xb = jax.device_put(rng.standard_normal((k, n), dtype=np.float32), gpus[0]).astype(jdt)
    ref = np.asarray(xa).astype(np.float64) @ np.asarray(xb).astype(np.float64)
    res = hg.matmul(xa, xb)
    assert isinstance(res, hg.DeviceArray) and res.shape == (m, n)
    hg.get_device().synchronize()
    err = _rel(res.to_numpy(), ref)
    assert err < BOUND[dt], (dt, err)


# ---------------------------------------------------------------------------------------------------
# 7. the Matmul plan object
# ---------------------------------------------------------------------------------------------------

def test_matmul_plan_object_on_torch_tensors(rng):
    torch = _torch()
    m, n, k = 160, 96, 128

    def operands():
        x, w = _trand(torch, rng, (m, k)), _trand(torch, rng, (n, k))
        return x, w.t(), torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)

    a, b, c = operands()
    mm = hg.Matmul(a, b, out=c)
    text = mm.explain()
    assert isinstance(text, str) and text
    assert any(name in text for name in hg.get_registry().manifest.kernels), text
    assert mm() is c
    torch.cuda.synchronize()
    assert _rel(_t64(c), _t64(a) @ _t64(b)) < BOUND["f16"]
    a2, b2, c2 = operands()
    assert (a2.stride(), b2.stride(), c2.stride()) == (a.stride(), b.stride(), c.stride())
    assert mm(a2, b2, out=c2) is c2
    torch.cuda.synchronize()
    assert _rel(_t64(c2), _t64(a2) @ _t64(b2)) < BOUND["f16"]
    a.copy_(_trand(torch, rng, (m, k)))  # the first operands again, with new contents
    c.fill_(float("nan"))
    assert mm() is c
    torch.cuda.synchronize()
    assert _rel(_t64(c), _t64(a) @ _t64(b)) < BOUND["f16"]
    a3 = _trand(torch, rng, (m + 1, k))
    c3 = torch.empty((m + 1, n), device="cuda", dtype=torch.float16)
    with pytest.raises(hg.ValidationError):
        mm(a3, b, out=c3)


# ---------------------------------------------------------------------------------------------------
# 8. repeat calls re-read memory
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_out", [True, False], ids=["out", "no-out"])
def test_repeat_calls_on_the_same_tensors_see_new_contents(with_out, rng):
    torch = _torch()
    m, n, k = 130, 264, 200
    a = _trand(torch, rng, (m, k))
    b = _trand(torch, rng, (k, n))
    out = torch.empty((m, n), device="cuda", dtype=torch.float16) if with_out else None
    for i in range(GRAPH_AFTER_REPEATS + 3):  # past the switch to a CUDA graph on the same buffers
        a.copy_(_trand(torch, rng, (m, k)))
        if out is not None:
            out.fill_(float("nan"))
        c = hg.matmul(a, b, out=out)
        torch.cuda.synchronize()
        if out is not None:
            assert c is out
        err = _rel(_t64(c), _t64(a) @ _t64(b))
        assert err < BOUND["f16"], f"call {i}: rel err {err:.2e}"
    # the repeats were served from the validated-call cache (the path that must re-read memory)
    assert repeat_key(a, b, out) in hg.plans.calls


@pytest.mark.parametrize("via", ["matmul", "Matmul"])
def test_a_remembered_call_keeps_no_array_alive(via, rng):
    """The call cache (and a Matmul's bound calls) keep descriptions, not the caller's tensors: their
    memory is freed when the caller drops them (a torch CUDA-graph capture also checks this)."""
    torch = pytest.importorskip("torch")
    import gc
    import weakref

    mm = None
    refs = []
    for _ in range(2):  # the first call is validated and remembered, the second takes the repeat path
        a = torch.from_numpy(rng.standard_normal((64, 48))).to("cuda", torch.float16)
        b = torch.from_numpy(rng.standard_normal((48, 40))).to("cuda", torch.float16)
        if via == "Matmul":
            mm = mm or hg.Matmul(a.clone(), b.clone())
            c = mm(a, b)
        else:
            c = hg.matmul(a, b)
        torch.cuda.synchronize()
        ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
        assert _rel(c.double().cpu().numpy(), ref) <= BOUND["f16"]
        refs += [weakref.ref(a), weakref.ref(b), weakref.ref(c)]
        del a, b, c
    gc.collect()
    assert all(r() is None for r in refs), "a remembered call still holds a tensor"


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_single_row_or_column_views_with_any_stride(dt, rng):
    """K = 1 (an outer product) with A of strides (1, 1), as torch's autograd makes them: A^T is one
    row whose stride is never followed, and a TMA map of it must not take that stride at face value."""
    torch = pytest.importorskip("torch")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    base = torch.from_numpy(rng.standard_normal(256)).to("cuda", tdt)
    a = base.as_strided((256, 1), (1, 1))
    b = torch.from_numpy(rng.standard_normal((1, 64))).to("cuda", tdt)
    c = hg.matmul(a, b)
    torch.cuda.synchronize()
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    assert _rel(c.double().cpu().numpy(), ref) <= BOUND[dt]
