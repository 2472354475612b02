"""Interop out, on the GPU: torch and CuPy take our DeviceArrays through DLPack without a copy (f16, bf16,
f32, transposed views), the memory outlives our array while they hold it, an export orders the consumer's
stream after the work hgemm queued on its own (an event, no device sync; a negative control without it), Stream speaks `__cuda_stream__`, and a kernel launches through CuPy's
RawModule from `get_kernel(name).binary()` (the README's escape-hatch example).

torch and cupy are optional: each test imports its framework with pytest.importorskip.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt.dtypes import bf16_bits_to_f32, storage_to_f64, to_storage

pytestmark = pytest.mark.gpu

DTYPES = ["f16", "bf16", "f32"]


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def _cupy():
    return pytest.importorskip("cupy")


def _device_array(rng, shape, dtype):
    """(a DeviceArray of random values, their float64 values). bf16 goes up as its raw bits, so the
    check does not depend on ml_dtypes."""
    host = to_storage(rng.standard_normal(shape).astype(np.float32), dtype)
    return hg.DeviceArray.from_host(host, dtype), storage_to_f64(host, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_reads_our_arrays_without_a_copy(rng, dtype):
    torch = _torch()
    a, values = _device_array(rng, (96, 64), dtype)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.ptr and t.is_cuda and tuple(t.shape) == (96, 64)
    assert t.dtype == {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    np.testing.assert_array_equal(t.double().cpu().numpy(), values)
    tt = torch.from_dlpack(a.T)  # a strided view, still no copy
    assert tt.data_ptr() == a.ptr and tt.stride() == (1, 64)
    np.testing.assert_array_equal(tt.double().cpu().numpy(), values.T)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cupy_reads_our_arrays_without_a_copy(rng, dtype):
    cp = _cupy()
    a, values = _device_array(rng, (96, 64), dtype)
    try:
        x = cp.from_dlpack(a)
    except (NotImplementedError, TypeError) as exc:
        if dtype == "bf16" and "bfloat16" in str(exc):  # CuPy takes bf16 only with ml_dtypes installed
            pytest.skip(f"this CuPy has no bfloat16: {exc}")
        raise
    assert x.data.ptr == a.ptr and x.shape == (96, 64)
    got = x.view(cp.uint16) if dtype == "bf16" else x
    host = cp.asnumpy(got)
    if dtype == "bf16":
        host = bf16_bits_to_f32(host)
    np.testing.assert_array_equal(host.astype(np.float64), values)


def test_the_memory_outlives_our_array_while_torch_holds_it(rng):
    torch = _torch()
    a, values = _device_array(rng, (256, 256), "f32")
    t = torch.from_dlpack(a)
    a.close()  # deferred: torch still points into it
    assert not a.closed
    del a
    gc.collect()
    scratch = [hg.empty((256, 256), "f32") for _ in range(8)]  # would reuse freed memory
    for s in scratch:
        s.fill_bytes(0xFF)
    hg.get_device().synchronize()
    np.testing.assert_array_equal(t.double().cpu().numpy(), values)


def test_close_frees_once_the_last_consumer_lets_go(rng):
    torch = _torch()
    a, _ = _device_array(rng, (64, 64), "f16")
    t1, t2 = torch.from_dlpack(a), torch.from_dlpack(a.T)
    a.close()
    del t1
    gc.collect()
    assert not a.closed
    del t2
    gc.collect()
    assert a.closed
    with pytest.raises(hg.ValidationError, match="closed"):
        a.__dlpack__()


def test_an_export_waits_for_work_hgemm_queued_on_its_own_stream(rng):
    torch = _torch()
    M = N = K = 2048  # the naive kernel takes milliseconds here: long enough to be caught unfinished
    x = rng.standard_normal((M, K)).astype(np.float16)
    y = rng.standard_normal((K, N)).astype(np.float16)
    a, b, c = hg.to_device(x), hg.to_device(y), hg.empty((M, N), "f16")
    c.fill_bytes(0xFF)  # NaN until the kernel writes it
    hg.get_device().synchronize()
    with hg.Stream() as s:  # non-blocking: torch's default stream does not wait for it by itself
        hg.launch("hgemm_naive_f16", a, b, c, stream=s)
        got = torch.from_dlpack(c).double().cpu().numpy()
    ref = x.astype(np.float64) @ y.astype(np.float64)
    assert np.isfinite(got).all(), "torch read C before hgemm's kernel wrote it"
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2


# -- an export is ordered by events on the consumer's stream, with no device synchronisation -------------------

# an aligned shape whose recipe needs no temporaries (creating an execution with temporaries synchronizes the
# device, which would hide a missing wait; its first call runs outside the race)
RACE_M, RACE_N, RACE_K = 512, 384, 256
SHORT_DELAY = 50e-3  # seconds hgemm's stream spins before its matmul writes C
LONG_DELAY = 200e-3  # the negative control: the race must be observed every time


def _delay_cycles(seconds: float) -> int:
    """GPU clock cycles that last at least `seconds` (the reported clock is the maximum: a slower clock only
    makes the delay longer)."""
    return int(seconds * (hg.get_device().info.clock_khz or 2_000_000) * 1e3)


def _consumer(torch, which: str):
    return torch.cuda.Stream() if which == "side-stream" else torch.cuda.default_stream()


def _export_race(torch, rng, consumer, seconds: float) -> tuple[float, bool]:
    """hgemm writes C = A @ B on its own non-blocking stream behind a `seconds` spin; torch imports C with
    torch.from_dlpack on `consumer` (which passes it to __dlpack__) and reads it there at once. Returns (the
    relative error of what torch read against float64, hgemm's stream still busy once the read was queued:
    the export waited for nothing on the host)."""
    x = rng.standard_normal((RACE_M, RACE_K)).astype(np.float16)
    y = rng.standard_normal((RACE_K, RACE_N)).astype(np.float16)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    a, b, c = hg.to_device(x), hg.to_device(y), hg.empty((RACE_M, RACE_N), "f16")
    with hg.Stream() as s:
        hg.matmul(a, b, out=c, stream=s)  # the first call, outside the race: the one in it is the repeat path
        c.fill_bytes(0xFF, stream=s)  # NaN until the kernel in the race writes it
        hg.get_device().synchronize()
        ours = torch.cuda.ExternalStream(s.ptr)
        with torch.cuda.stream(ours):
            torch.cuda._sleep(_delay_cycles(seconds))
        hg.matmul(a, b, out=c, stream=s)
        with torch.cuda.stream(consumer):
            got = torch.from_dlpack(c).double()
            busy = not ours.query()
        torch.cuda.synchronize()
    host = got.cpu().numpy()
    err = float(np.linalg.norm(host - ref) / np.linalg.norm(ref)) if np.isfinite(host).all() else float("inf")
    return err, busy


@pytest.mark.parametrize("which", ["side-stream", "default-stream"])
def test_an_export_orders_the_consumers_stream_after_hgemms_without_a_device_sync(rng, which):
    torch = _torch()
    err, busy = _export_race(torch, rng, _consumer(torch, which), SHORT_DELAY)
    assert err < 1e-3, f"rel err {err:.2e}: torch read C before hgemm's matmul wrote it"
    assert busy, "hgemm's stream was idle once torch's read was queued: the export waited on the host (or the " \
                 "delay was too short to tell)"


def test_negative_control_without_the_ordering_the_race_is_observed(rng, monkeypatch):
    """With the export's ordering removed (no event, no device sync), the scenario of the ordering test must
    read C before hgemm writes it: this proves that test can fail. The delay is long enough that the race is
    observed every time."""
    torch = _torch()
    from hgemm_rt import memory
    monkeypatch.setattr(memory, "order_after_writers", lambda consumer, writers, device: True)
    err, busy = _export_race(torch, rng, torch.cuda.Stream(), LONG_DELAY)
    assert busy, "the delay had already ended when torch's read was queued: no race to observe"
    assert not err < 1e-3, (f"rel err {err:.2e}: the unordered read still saw hgemm's write, so the ordering "
                            "test cannot tell a missing wait")


def test_each_front_door_remembers_the_stream_it_wrote_on(rng):
    """DeviceArray.writers after matmul (first and repeat calls, a new result), Matmul, grouped_matmul (Hopper)
    and the host copies: the streams a DLPack export orders its consumer after."""
    x = rng.standard_normal((64, 64)).astype(np.float16)
    a, c = hg.to_device(x), hg.empty((64, 64), "f16")
    assert a.writers == {1}  # the host copy, on the legacy default stream
    assert c.writers == set()
    with hg.Stream() as s, hg.Stream() as s2:
        hg.matmul(a, a, out=c, stream=s)  # the first call
        assert c.writers == {s.ptr}
        for _ in range(2):  # a first call on s2, then the repeat path, into a view: its memory's writers
            hg.matmul(a, a, out=hg.DeviceArray(c.ptr, c.shape, "f16", owner=c), stream=s2)
        assert c.writers == {s.ptr, s2.ptr}
        assert hg.matmul(a, a).writers == {1}  # a new result, on the legacy default stream
        d = hg.empty((64, 64), "f16")
        with hg.Matmul(a, a, out=d, stream=s2) as mm:
            mm()
        assert d.writers == {s2.ptr}
        if hg.get_device().info.cc >= (9, 0):
            w = hg.to_device(np.stack([x, x]))  # (2 experts, K, N)
            g = hg.grouped_matmul(a, w, offsets=np.array([32, 64], np.int32), stream=s)
            assert g.writers == {s.ptr}
        hg.get_device().synchronize()


def test_copy_true_exports_a_copy(rng):
    torch = _torch()
    a, values = _device_array(rng, (32, 16), "f16")
    t = torch.utils.dlpack.from_dlpack(a.__dlpack__(stream=1, copy=True))
    assert t.data_ptr() != a.ptr
    a.fill_bytes(0)
    hg.get_device().synchronize()
    np.testing.assert_array_equal(t.double().cpu().numpy(), values)


def test_stream_speaks_the_cuda_stream_protocol():
    with hg.Stream() as s:
        assert s.__cuda_stream__() == (0, s.ptr)
        try:
            from cuda.core import Device
        except ImportError:
            Device = pytest.importorskip("cuda.core.experimental").Device
        dev = Device(0)
        dev.set_current()  # (cuda.core's rule; the primary context, the one hgemm uses)
        theirs = dev.create_stream(s)  # cuda.core wraps a foreign stream through the protocol
        assert int(theirs.handle) == s.ptr


def test_escape_hatch_launches_through_cupy_rawmodule(rng):
    cp = _cupy()
    # the README's example, as written there
    kb = hg.get_kernel("hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages_dsmem_tn_swizzle_x4").binary(stages=3)
    fn = cp.RawModule(path=str(kb.path)).get_function(kb.symbol)
    fn.max_dynamic_shared_size_bytes = kb.dsmem  # above 48 KiB a kernel must opt in
    M, N, K = 1024, 768, 512
    a = cp.asarray(rng.standard_normal((M, K)), dtype=cp.float16)
    b = cp.asarray(rng.standard_normal((N, K)), dtype=cp.float16)  # TN: B is N x K
    c = cp.empty((M, N), dtype=cp.float16)
    fn(kb.grid_for(M, N, K), kb.block, (a, b, c, cp.int32(M), cp.int32(N), cp.int32(K)), shared_mem=kb.dsmem)
    assert kb.params == ("ptr:A", "ptr:B", "ptr:C", "i32:M", "i32:N", "i32:K")
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64).T
    got = cp.asnumpy(c).astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2
