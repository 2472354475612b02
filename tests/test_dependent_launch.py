"""Programmatic dependent launch: the kernels declared `dependent_launch` (cu/*.toml) start behind the kernel before
them and hold every global access until its griddepcontrol.wait (tests/test_sass.py checks the wait, ACQBULK, in each
one's Hopper SASS). On the CPU: which families declare it, the environment switch. On the GPU: chains of matmuls
queued back to back behind a busy GPU, each layer reading the buffer the layer before wrote and overwriting the one
the layer before read, against a float64 chain.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt import DeviceArray, planner
from hgemm_rt.device import get_device
from hgemm_rt.dtypes import storage_to_f64, to_storage
from hgemm_rt.timing import L2Flusher
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
DEPENDENT = sorted(n for n, s in (MANIFEST.kernels.items() if MANIFEST else ()) if s.dependent_launch)


def test_dependent_kernels_are_declared():
    if MANIFEST is None:
        pytest.skip("no build manifest (python build_kernels.py)")
    families = {MANIFEST.kernels[n].family for n in DEPENDENT}
    assert {"matmul", "matmul_decode", "matmul_sm90", "matmul_sm90_fused", "hgemm_sm90"} <= families


@pytest.mark.parametrize("value,on,warns", [("0", False, False), ("1", True, False), ("", True, False),
                                           ("off", True, True)])
def test_the_environment_switch(monkeypatch, value, on, warns):
    from hgemm_rt import launcher

    monkeypatch.setenv("HGEMM_DEPENDENT_LAUNCH", value)
    if warns:
        with pytest.warns(RuntimeWarning, match="neither 0 nor 1"):
            assert launcher.dependent_launch_setting() is on
    else:
        assert launcher.dependent_launch_setting() is on


# (M, width, B order): a chain x <- x @ W_i of width x width weights; each shape's pick is a dependent kernel
CHAINS = [(1, 4096, "col"), (16, 4096, "row"), (3, 2048, "row"), (512, 512, "col"), (1024, 1024, "col"),
          (200, 768, "row")]
LAYERS = 8


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("M,width,order", CHAINS)
def test_back_to_back_dependent_chain(M, width, order, dtype, rng):
    dev = get_device()
    x0 = stored(rng.standard_normal((M, width)), dtype)
    ws = [stored(rng.standard_normal((width, width)) / np.sqrt(width), dtype) for _ in range(LAYERS)]
    owners, weights = [], []
    for w in ws:  # column-major: the transposed view of W^T stored row-major (nn.Linear's weight)
        owner = DeviceArray.from_host(to_storage(w if order == "row" else np.ascontiguousarray(w.T), dtype), dtype)
        owners.append(owner)
        weights.append(owner if order == "row" else owner.T)
    ping = DeviceArray.from_host(to_storage(x0, dtype), dtype)
    pong = DeviceArray.empty((M, width), dtype)
    flusher = L2Flusher()
    try:
        prob = hg.Matmul(ping, weights[0], out=pong).problem
        route = planner.ranked_recipes(prob, MANIFEST, dev.info.cc, dev.info.sm_count)[0][1]
        if dev.info.cc >= (9, 0):
            kernels = [MANIFEST.kernels[s.kernel] for s in route.steps if hasattr(s, "kernel")]
            assert any(k.dependent_launch for k in kernels), planner.describe(route)
        pong.fill_bytes(0xFF)  # NaN: a layer that reads before the one before has written shows
        flusher.hold(2.0)  # the GPU busy while the chain queues, so that its kernels run back to back
        bufs = (ping, pong)
        for i, w in enumerate(weights):
            hg.matmul(bufs[i % 2], w, out=bufs[(i + 1) % 2])
        got = storage_to_f64(bufs[LAYERS % 2].to_host(), dtype)
        ref = x0
        for w in ws:  # each layer's output is stored in the dtype before the next reads it
            ref = stored(ref @ w, dtype)
        assert np.isfinite(got).all(), f"{M}x{width} B {order} {dtype}: NaN ({planner.describe(route)})"
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < 3e-2, f"{M}x{width} B {order} {dtype}: chain rel error {err:.2e} ({planner.describe(route)})"
    finally:
        flusher.close()
        for a in owners + [ping, pong]:
            a.close()


def stored(a: np.ndarray, dtype: str) -> np.ndarray:
    """a rounded to the dtype, back in float64."""
    return storage_to_f64(to_storage(a.astype(np.float32), dtype), dtype)


def test_a_launch_config_carries_the_cluster_and_dependent_launch_attributes():
    """KernelLaunch.config(stream), built once per stream by a launch plan: the grid, block, shared memory and
    stream, and the cluster / programmatic-serialization attributes where the kernel has them."""
    from hgemm_rt.launcher import KernelLaunch, LaunchConfig, LoadedFunction

    ids = pytest.importorskip("cuda.bindings.driver").CUlaunchAttributeID
    plain = KernelLaunch(LoadedFunction(0x1234, 0), LaunchConfig("k", (3, 2, 1), (128, 1, 1), 1024, (1, 1, 1)))
    lc, address = plain.config(0)
    assert (lc.gridDimX, lc.gridDimY, lc.gridDimZ, lc.blockDimX, lc.sharedMemBytes) == (3, 2, 1, 128, 1024)
    assert lc.hStream is None and lc.numAttrs == 0 and address.value == ctypes.addressof(lc)
    both = KernelLaunch(LoadedFunction(0x1234, 0), LaunchConfig("k", (4, 1, 1), (384, 1, 1), 0, (1, 1, 2), True))
    lc, _ = both.config(7)
    assert lc.hStream == 7 and lc.numAttrs == 2
    assert [(a.id, list(a.value)[:3]) for a in lc.attrs[:2]] == [
        (int(ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION), [1, 1, 2]),
        (int(ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), [1, 0, 0])]
