"""Runtime behaviour on the GPU: zero-copy interop, buffers, streams, errors from the driver."""
from __future__ import annotations

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_bench.kernel_checks import random_operands, upload_ordered
from hgemm_rt.numerics import reference, rel_error
from interop import OnlyDlpack

pytestmark = pytest.mark.gpu


def test_device_array_roundtrip_and_close_twice(rng):
    x = rng.standard_normal((37, 53)).astype(np.float16)
    d = hg.to_device(x)
    assert np.array_equal(d.to_numpy(), x)
    d.close()
    d.close()
    assert d.closed
    with pytest.raises(hg.ValidationError, match="closed"):
        d.to_numpy()


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("order", ["row", "col"])
def test_host_copies_of_strided_views(rng, dtype, order):
    """copy_from_host writes a strided view's elements and nothing between them; strided_to_host reads
    the view back; fill_strided sets every byte the view spans; bf16 travels as its uint16 bits."""
    from hgemm_rt.dtypes import ITEMSIZE, STORAGE, to_storage
    from hgemm_rt.memory import fill_strided, strided_to_host

    rows, cols, pad, offset = 5, 7, 3, 2
    rs, cs = (cols + pad, 1) if order == "row" else (1, rows + pad)
    n = offset + (rows - 1) * rs + (cols - 1) * cs + 1 + 4
    isz = ITEMSIZE[dtype]
    before = np.arange(n).astype(STORAGE[dtype])  # every element differs from the values written
    values = to_storage(rng.standard_normal((rows, cols)).astype(np.float32), dtype)
    with hg.DeviceArray.from_host(before, dtype) as buf:
        view = hg.DeviceArray(buf.ptr + offset * isz, (rows, cols), dtype, (rs * isz, cs * isz), owner=buf)
        view.copy_from_host(values)
        want = before.copy()
        idx = offset + np.arange(rows)[:, None] * rs + np.arange(cols)[None, :] * cs
        want[idx] = values
        assert np.array_equal(buf.to_host().view(np.uint8), want.view(np.uint8))
        assert np.array_equal(strided_to_host(view).view(np.uint8), values.view(np.uint8))
        fill_strided(view, 0)
        hg.get_device().synchronize()
        want[idx.min():idx.max() + 1] = 0
        assert np.array_equal(buf.to_host().view(np.uint8), want.view(np.uint8))


def test_torch_tensors_are_used_without_copying(rng):
    torch = pytest.importorskip("torch")
    M, N, K = 96, 80, 64
    a, b = random_operands(M, N, K, "NN", "f16", rng)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    view = hg.as_device_array(tc)
    assert view.ptr == tc.data_ptr()  # zero-copy
    hg.launch("hgemm_naive_f16", ta, tb, tc, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert rel_error(tc.cpu().numpy(), reference(a, b, "NN")) < 1e-3


def test_dlpack_producer_is_used_without_copying(rng):
    cp = pytest.importorskip("cupy")
    M, N, K = 64, 48, 32
    a, b = random_operands(M, N, K, "NN", "f32", rng)
    ca, cb = cp.asarray(a), cp.asarray(b)
    cc = cp.full((M, N), cp.nan, dtype=cp.float32)

    view = hg.as_device_array(OnlyDlpack(cc))
    assert view.ptr == cc.data.ptr and view.shape == (M, N) and view.dtype == "f32"
    hg.launch("sgemm_naive_f32", OnlyDlpack(ca), OnlyDlpack(cb), view)
    cp.cuda.Device().synchronize()
    assert rel_error(cp.asnumpy(cc), reference(a, b, "NN")) < 1e-5


def test_two_streams_give_correct_results(rng):
    M, N, K = 128, 96, 64
    outs = []
    with hg.Stream() as s1, hg.Stream() as s2:
        for s in (s1, s2):
            a, b = random_operands(M, N, K, "NN", "f16", rng)
            A, B, C = hg.to_device(a), hg.to_device(b), hg.empty((M, N), "f16")
            C.fill_bytes(0xFF, s)
            hg.launch("hgemm_naive_f16", A, B, C, stream=s)
            outs.append((A, B, C, reference(a, b, "NN"), s))
        for A, B, C, ref, s in outs:
            s.synchronize()
            assert rel_error(C.to_numpy(), ref) < 1e-3


def test_device_info_is_sane():
    info = hg.get_device().info
    assert info.sm_count > 0 and info.cc >= (8, 0) and info.max_smem_optin >= 48 * 1024


def test_matmul_takes_transposed_device_array_views(rng):
    M, N, K = 77, 130, 45
    a, b = random_operands(K, N, M, "NN", "f16", rng)[0], random_operands(M, N, K, "NN", "f16", rng)[1]
    # a is K x M: its transposed view is the M x K operand, column-major, with no copy
    with hg.to_device(a) as A, hg.to_device(b) as B:
        c = hg.matmul(A.T, B)
        got = c.to_numpy() if hasattr(c, "to_numpy") else np.asarray(c)
    assert rel_error(got, reference(a.T, b, "NN")) < 1e-3


@pytest.mark.parametrize("dtype, acc, bound", [("f16", "f32", 1e-3), ("f16", "f16", 1e-2), ("f32", "f32", 1e-5)])
@pytest.mark.parametrize("a_order, b_order", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")])
def test_cublas_matmul_takes_every_layout(rng, dtype, acc, bound, a_order, b_order):
    from hgemm_rt import cublas

    M, N, K = 67, 130, 96
    a, b = random_operands(M, N, K, "NN", dtype, rng)
    c0 = rng.standard_normal((M, N), dtype=np.float32).astype(a.dtype)

    (a_own, A), (b_own, B), (C, _) = upload_ordered(a, a_order), upload_ordered(b, b_order), upload_ordered(c0)
    owners = (a_own, b_own, C)
    try:
        label = cublas.matmul(A, B, C, acc=acc, alpha=0.5, beta=2.0)
        got = C.to_numpy()
    finally:
        for x in owners:
            x.close()
    assert label == f"A {a_order}, B {b_order}"
    assert rel_error(got, 0.5 * reference(a, b, "NN") + 2.0 * c0.astype(np.float64)) < bound
