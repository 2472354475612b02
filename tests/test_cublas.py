"""hgemm_rt.cublas: the cuBLAS baseline through nvmath's 1:1 bindings. On the CPU: the row-major ->
column-major mapping of gemm, gemm_strided_batched and batched_matmul, checked by a fake binding that
evaluates each call on host memory exactly as cuBLAS reads it (column-major, transpose flags, leading
dimensions, batch strides); argument validation before any binding call; the binding signatures. On the
GPU (marked gpu): batched_matmul against float64."""
from __future__ import annotations

import ctypes
import inspect
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hgemm_rt as hg  # noqa: E402
from hgemm_rt import cublas  # noqa: E402
from hgemm_rt.memory import DeviceArray  # noqa: E402
from numpy.lib.array_utils import byte_bounds  # noqa: E402

# -- a fake cuBLAS binding that computes ------------------------------------------------------------------


HOST: list[tuple[int, int]] = []  # [lo, hi) of the host arrays a test gave out: the fake touches nothing else


def address(x: np.ndarray) -> int:
    """x's address, its memory registered as the fake binding's to read and write."""
    HOST.append(byte_bounds(x))
    return x.ctypes.data


def column_major(ptr: int, dtype: np.dtype, rows: int, cols: int, ld: int) -> np.ndarray:
    """A writable view of the rows x cols column-major matrix with leading dimension ld at host address ptr
    (inside a registered array: a wrong mapping fails here instead of reading stray memory)."""
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), dtype)
    n = (cols - 1) * ld + rows
    lo, hi = ptr, ptr + n * dtype.itemsize
    assert any(a <= lo and hi <= b for a, b in HOST), f"[{lo:#x}, {hi:#x}) is outside every array of the test"
    flat = np.frombuffer((ctypes.c_char * (n * dtype.itemsize)).from_address(ptr), dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (dtype.itemsize, ld * dtype.itemsize))


class FakeCublas:
    """The nvmath.bindings.cublas calls hgemm_rt.cublas makes, over the real enums: recorded, and the GEMMs
    carried out on host memory as cuBLAS would (column-major; the pointers are numpy buffers' addresses)."""

    def __init__(self):
        self.real = pytest.importorskip("nvmath.bindings.cublas")
        from nvmath import CudaDataType

        self.Operation, self.ComputeType, self.GemmAlgo = self.real.Operation, self.real.ComputeType, self.real.GemmAlgo
        self.types = {int(CudaDataType.CUDA_R_32F): np.dtype(np.float32),
                      int(CudaDataType.CUDA_R_16F): np.dtype(np.float16)}
        self.scales = {int(self.ComputeType.COMPUTE_32F): np.dtype(np.float32),
                       int(self.ComputeType.COMPUTE_16F): np.dtype(np.float16)}
        self.log: list[tuple] = []

    def create(self):
        self.log.append(("create",))
        return 0xC0B1A5

    def set_stream(self, handle, stream_id):
        self.log.append(("set_stream", handle, stream_id))

    def calls(self, kind: str) -> list[dict]:
        return [e[1] for e in self.log if e[0] == kind]

    def gemm_ex(self, handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc,
                compute_type, algo):
        args = {k_: v for k_, v in locals().items() if k_ != "self"}
        self.log.append(("gemm_ex", args))
        self._run(**args, stride_a=0, stride_b=0, stride_c=0, batch_count=1)

    def gemm_strided_batched_ex(self, handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb,
                                stride_b, beta, c, ctype, ldc, stride_c, batch_count, compute_type, algo):
        args = {k_: v for k_, v in locals().items() if k_ != "self"}
        self.log.append(("gemm_strided_batched_ex", args))
        self._run(**args)

    def _run(self, handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb, stride_b, beta, c,
             ctype, ldc, stride_c, batch_count, compute_type, algo):
        """C_i (m x n, ld ldc) = alpha * op(A_i) . op(B_i) + beta * C_i, column-major, i < batch_count."""
        assert atype == btype == ctype and int(algo) == int(self.GemmAlgo.DEFAULT_TENSOR_OP)
        dt, scale = self.types[int(atype)], self.scales[int(compute_type)]
        al, be = (np.frombuffer(ctypes.string_at(p, scale.itemsize), scale)[0] for p in (alpha, beta))
        isz = dt.itemsize
        for i in range(batch_count):
            def op(ptr, trans, rows, cols, ld, stride):  # op(X) is rows x cols
                stored = (rows, cols) if trans == self.Operation.N else (cols, rows)
                x = column_major(ptr + i * stride * isz, dt, *stored, ld).astype(np.float64)
                return x if trans == self.Operation.N else x.T
            A, B = op(a, transa, m, k, lda, stride_a), op(b, transb, k, n, ldb, stride_b)
            C = column_major(c + i * stride_c * isz, dt, m, n, ldc)
            # beta == 0: C is not read (cuBLAS's rule; NaN there stays out of the result)
            C[...] = float(al) * (A @ B) + (float(be) * C.astype(np.float64) if be else 0.0)


@pytest.fixture
def fake(monkeypatch):
    f = FakeCublas()
    monkeypatch.setattr(cublas, "_cublas", lambda: f)
    monkeypatch.setattr(cublas, "get_device", lambda device=0: None)
    monkeypatch.setattr(cublas, "_handles", {})  # a handle made here is never the real one
    HOST.clear()
    yield f
    HOST.clear()


def test_the_fake_takes_the_real_bindings_arguments():
    """Each binding the fake stands in for takes the arguments its docstring's signature lists (nvmath
    1.0: "gemm_strided_batched_ex(intptr_t handle, int transa, ...)"), in the order the fake names them."""
    f = FakeCublas()
    for name in ("create", "set_stream", "gemm_ex", "gemm_strided_batched_ex"):
        first = getattr(f.real, name).__doc__.strip().splitlines()[0]
        assert first.startswith(name + "("), first
        params = [p.split()[-1] for p in first[len(name) + 1:first.index(")")].split(",") if p.strip()]
        assert params == list(inspect.signature(getattr(f, name)).parameters), (name, first)


# -- operands in host memory --------------------------------------------------------------------------------

def extent(rows: int, cols: int, order: str, ld: int) -> int:
    """Elements from a matrix's first to its last, stored row- or column-major with leading dimension ld."""
    return (rows - 1) * ld + cols if order == "row" else (cols - 1) * ld + rows


def placed(mats: np.ndarray, order: str, ld: int, stride: int, dtype=np.float32, pad=np.nan) -> tuple[np.ndarray, int]:
    """mats (batch, rows, cols) stored as a strided batch: matrix i at element i * stride, each row- or
    column-major with leading dimension ld; everything between holds `pad` (NaN: never read). With
    stride 0 only mats[0] is stored (every product reads it). Returns (the buffer, its address)."""
    count, rows, cols = mats.shape
    assert stride == 0 or stride >= extent(rows, cols, order, ld), "the matrices would overlap"
    n = extent(rows, cols, order, ld) + stride * (count - 1)
    buf = np.full(n + 8, pad, dtype=dtype)
    for i in range(count if stride else 1):
        if order == "row":
            view = np.lib.stride_tricks.as_strided(buf[i * stride:], (rows, cols), (ld * buf.itemsize, buf.itemsize))
        else:
            view = np.lib.stride_tricks.as_strided(buf[i * stride:], (rows, cols), (buf.itemsize, ld * buf.itemsize))
        view[...] = mats[i]
    return buf, address(buf)


def read_back(buf: np.ndarray, count: int, rows: int, cols: int, ld: int, stride: int) -> np.ndarray:
    return np.stack([np.lib.stride_tricks.as_strided(buf[i * stride:], (rows, cols), (ld * buf.itemsize, buf.itemsize))
                     for i in range(count)]).astype(np.float64)


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize("a_order,layout", list(itertools.product(("row", "col"), ("NN", "TN"))))
@pytest.mark.parametrize("M,N,K,batch,pad,broadcast", [
    (3, 5, 7, 4, 0, ""), (6, 1, 2, 3, 2, ""), (1, 9, 4, 2, 1, "A"), (5, 4, 1, 3, 3, "B"), (2, 3, 4, 1, 0, "")])
def test_strided_batched_mapping_computes_each_row_major_product(fake, a_order, layout, M, N, K, batch, pad,
                                                                 broadcast):
    """The arguments gemm_strided_batched hands cuBLAS, carried out as cuBLAS reads them, give row-major
    C_i = alpha A_i . B_i + beta C_i for every storage, padded leading dimensions, gaps between the
    matrices and a broadcast (stride 0) A or B; C's padding is left as it was."""
    rng = np.random.default_rng(0)
    b_order = "row" if layout == "NN" else "col"
    a = rng.standard_normal((1 if broadcast == "A" else batch, M, K))
    b = rng.standard_normal((1 if broadcast == "B" else batch, K, N))
    c0 = rng.standard_normal((batch, M, N))
    lda = (K if a_order == "row" else M) + pad
    ldb = (N if b_order == "row" else K) + pad
    ldc = N + pad
    stride_a = 0 if broadcast == "A" else extent(M, K, a_order, lda) + 3  # gaps between the matrices
    stride_b = 0 if broadcast == "B" else extent(K, N, b_order, ldb) + 5
    stride_c = extent(M, N, "row", ldc) + 7
    abuf, pa = placed(a, a_order, lda, stride_a)
    bbuf, pb = placed(b, b_order, ldb, stride_b)
    cbuf, pc = placed(c0, "row", ldc, stride_c, pad=-7.0)
    cublas.gemm_strided_batched(pa, pb, pc, M, N, K, batch, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c,
                                layout=layout, dtype="f32", acc="f32", a_order=a_order, lda=lda, ldb=ldb, ldc=ldc,
                                alpha=0.5, beta=2.0, stream=0xABC)
    want = 0.5 * np.matmul(a, b) + 2.0 * c0
    assert rel(read_back(cbuf, batch, M, N, ldc, stride_c), want) < 1e-6
    written = np.zeros(cbuf.shape, bool)
    for i in range(batch):
        for r in range(M):
            written[i * stride_c + r * ldc:i * stride_c + r * ldc + N] = True
    assert np.all(cbuf[~written] == -7.0)  # padding, gaps and the tail untouched
    (call,) = fake.calls("gemm_strided_batched_ex")
    # swapped: cuBLAS's A is our B (op N when B is row-major), its B our A, m = N, n = M
    assert (call["m"], call["n"], call["k"], call["batch_count"]) == (N, M, K, batch)
    assert (call["a"], call["lda"], call["stride_a"]) == (pb, ldb, stride_b)
    assert (call["b"], call["ldb"], call["stride_b"]) == (pa, lda, stride_a)
    assert (call["c"], call["ldc"], call["stride_c"]) == (pc, ldc, stride_c)
    N_, T_ = fake.Operation.N, fake.Operation.T
    assert (call["transa"], call["transb"]) == ({"row": N_, "col": T_}[b_order], {"row": N_, "col": T_}[a_order])
    assert call["compute_type"] == fake.ComputeType.COMPUTE_32F
    assert fake.log[0] == ("create",) and fake.log[1] == ("set_stream", 0xC0B1A5, 0xABC)


def test_dense_leading_dimensions_are_the_defaults_and_acc_f16_scales_in_f16(fake):
    rng = np.random.default_rng(1)
    M, N, K, batch = 4, 6, 5, 3
    a, b = rng.standard_normal((batch, M, K)), rng.standard_normal((batch, N, K))  # B as N x K: TN
    abuf, pa = placed(a, "row", K, M * K, np.float16)
    bbuf, pb = placed(b.transpose(0, 2, 1), "col", K, N * K, np.float16)
    cbuf, pc = placed(np.zeros((batch, M, N)), "row", N, M * N, np.float16)
    cublas.gemm_strided_batched(pa, pb, pc, M, N, K, batch, stride_a=M * K, stride_b=N * K, stride_c=M * N,
                                layout="TN", dtype="f16", acc="f16", alpha=1.5)
    (call,) = fake.calls("gemm_strided_batched_ex")
    assert (call["lda"], call["ldb"], call["ldc"]) == (K, K, N)  # B's ld (N x K rows), A's, C's
    assert call["compute_type"] == fake.ComputeType.COMPUTE_16F
    assert np.frombuffer(ctypes.string_at(call["alpha"], 2), np.float16)[0] == 1.5
    want = 1.5 * np.matmul(a.astype(np.float16).astype(np.float64), b.astype(np.float16).astype(np.float64)
                           .transpose(0, 2, 1))
    assert rel(read_back(cbuf, batch, M, N, N, M * N), want) < 2e-3


@pytest.mark.parametrize("layout", ["NN", "TN"])
def test_gemm_shares_the_mapping(fake, layout):
    """The 2-D gemm (the registry's cuBLAS entries) goes through the same swapped call, as cublasGemmEx."""
    rng = np.random.default_rng(2)
    M, N, K = 5, 7, 3
    a, b = rng.standard_normal((1, M, K)), rng.standard_normal((1, K, N))
    (abuf, pa), (cbuf, pc) = placed(a, "row", K, 0), placed(np.zeros((1, M, N)), "row", N, 0)
    bbuf, pb = placed(b, "row" if layout == "NN" else "col", N if layout == "NN" else K, 0)
    cublas.gemm(pa, pb, pc, M, N, K, layout=layout, dtype="f32", acc="f32")
    assert rel(read_back(cbuf, 1, M, N, N, 0), a @ b) < 1e-6
    assert len(fake.calls("gemm_ex")) == 1 and not fake.calls("gemm_strided_batched_ex")


# -- batched_matmul: arrays of any batch shape ---------------------------------------------------------------

def view(x: np.ndarray) -> DeviceArray:
    """A DeviceArray over a host array's memory and strides (only the fake binding reads it)."""
    return DeviceArray(address(x), x.shape, "f32", strides=x.strides)


def batched_cases():
    rng = np.random.default_rng(3)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    k = r(4, 6, 5)
    wide = r(4, 3, 9)
    yield "rows", r(4, 3, 5), r(4, 5, 6), 4, "A row, B row"
    yield "K^T a transposed view", r(4, 3, 5), k.transpose(0, 2, 1), 4, "A row, B col"
    yield "A column-major", r(4, 5, 3).transpose(0, 2, 1), r(4, 5, 6), 4, "A col, B row"
    yield "A padded rows", wide[:, :, :5], r(4, 5, 6), 4, "A row, B row"
    yield "B broadcast (2-D)", r(4, 3, 5), r(5, 6), 4, "A row, B row"
    yield "A broadcast (batch dim 1)", r(1, 3, 5), r(4, 5, 6), 4, "A row, B row"
    yield "4-D, even strides", r(2, 3, 3, 5), r(2, 3, 5, 6), 6, "A row, B row"
    yield "4-D, A broadcast over both", r(3, 5), r(2, 3, 5, 6), 6, "A row, B row"


@pytest.mark.parametrize("name,a,b,count,label", list(batched_cases()), ids=[c[0] for c in batched_cases()])
def test_batched_matmul_is_one_strided_batched_call(fake, name, a, b, count, label):
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    c = np.full(want.shape, np.nan, np.float32)
    assert cublas.batched_matmul(view(a), view(b), view(c)) == label
    (call,) = fake.calls("gemm_strided_batched_ex")
    assert call["batch_count"] == count
    assert rel(c.astype(np.float64), want) < 1e-6


def test_batched_operands_give_the_strides_in_elements():
    q, k = np.zeros((8, 16, 4), np.float32), np.zeros((8, 32, 4), np.float32)
    c = np.zeros((8, 16, 32), np.float32)
    sb = cublas.batched_operands(view(q), view(k.transpose(0, 2, 1)), view(c), "test")
    assert (sb.batch, sb.stride_a, sb.stride_b, sb.stride_c) == (8, 64, 128, 512)
    args = sb.arguments()
    assert (args["layout"], args["a_order"], args["lda"], args["ldb"], args["ldc"]) == ("TN", "row", 4, 4, 32)
    assert (args["M"], args["N"], args["K"], args["dtype"]) == (16, 32, 4, "f32")
    assert args["b_ptr"] == k.ctypes.data and args["c_ptr"] == c.ctypes.data


def z(*shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize("make, message", [
    (lambda: (z(2, 3, 3, 5), z(2, 1, 5, 6), z(2, 3, 3, 6)),
     r"B \(2, 1, 5, 6\) .* is not one strided batch"),  # broadcast over the inner batch dimension only
    (lambda: (z(3, 2, 3, 5).transpose(1, 0, 2, 3), z(2, 3, 5, 6), z(2, 3, 3, 6)),
     r"A \(2, 3, 3, 5\) .* is not one strided batch"),  # permuted batch dimensions
    (lambda: (z(3, 3, 5), z(4, 5, 6), z(4, 3, 6)), r"A \(3, 3, 5\) does not broadcast to C's batch dimensions \(4,\)"),
    (lambda: (z(4, 3, 5), z(4, 5, 6), z(3, 6)), r"A \(4, 3, 5\) does not broadcast to C's batch dimensions \(\)"),
    (lambda: (z(4, 3, 5), z(4, 5, 6), z(4, 6, 3).transpose(0, 2, 1)), "C must be row-major"),
    (lambda: (z(4, 3, 5), z(4, 6, 6), z(4, 3, 6)), "does not give C"),
    (lambda: (z(5), z(5, 6), z(4, 3, 6)), "at least 2-D"),
])
def test_batched_operands_refuse_what_one_strided_batched_call_cannot_do(make, message):
    with pytest.raises(hg.ValidationError, match=message):
        cublas.batched_operands(*(view(x) for x in make()), "cuBLAS strided-batched")


def test_an_output_batch_that_overlaps_itself_is_refused(fake):
    a, b = np.zeros((4, 3, 5), np.float32), np.zeros((4, 5, 6), np.float32)
    c = np.broadcast_to(np.zeros((3, 6), np.float32), (4, 3, 6))  # batch stride 0: every product into one C
    with pytest.raises(hg.ValidationError, match="stride_c=0 is below the 18 elements of one C"):
        cublas.batched_matmul(view(a), view(b), view(c))
    assert fake.log == []


# -- validation: refused before any binding call ---------------------------------------------------------

GOOD = dict(a_ptr=1 << 32, b_ptr=2 << 32, c_ptr=3 << 32, M=64, N=32, K=16, batch=4, stride_a=1024, stride_b=512,
            stride_c=2048, layout="NN", dtype="f16", acc="f32")


@pytest.mark.parametrize("change, message", [
    (dict(layout="NT"), r"layout='NT' is not one of \['NN', 'TN'\]"),
    (dict(a_order="diag"), r"a_order='diag' is not one of \['row', 'col'\]"),
    (dict(M=0), r"M=0 must be an integer in \[1, 2147483647\]"),
    (dict(K=2**31), r"K=2147483648 must be an integer"),
    (dict(batch=True), "batch=True must be an integer"),
    (dict(batch=2.0), "batch=2.0 must be an integer"),
    (dict(stride_a=-1), r"stride_a=-1 must be an integer in \[0, "),
    (dict(c_ptr=0), r"c_ptr=0 must be an integer in \[1, "),
    (dict(lda=8), r"A \(64 x 16, row-major\) needs a leading dimension >= 16, got 8"),
    (dict(a_order="col", lda=16), r"A \(64 x 16, col-major\) needs a leading dimension >= 64, got 16"),
    (dict(layout="TN", ldb=8), r"B \(16 x 32, col-major\) needs a leading dimension >= 16, got 8"),
    (dict(ldc=31), r"C \(64 x 32, row-major\) needs a leading dimension >= 32, got 31"),
    (dict(stride_c=2047), r"stride_c=2047 is below the 2048 elements of one C .* would overlap"),
    (dict(stride_c=0), "stride_c=0 is below"),
    (dict(dtype="f64"), r"dtype='f64' is not one of \['bf16', 'f16', 'f32'\]"),
    (dict(acc="tf32"), r"acc='tf32' is not one of \['f16', 'f32'\] for f16"),
    (dict(dtype="bf16", acc="f16"), r"acc='f16' is not one of \['f32'\] for bf16"),
    (dict(alpha="x"), "alpha='x' and beta=0.0 must be real numbers finite in float32"),
    (dict(acc="f16", beta=1e6), "finite in float16"),
    (dict(alpha=float("nan")), "must be real numbers finite"),
    (dict(stream=-1), "stream handle -1 is not a pointer value"),
])
def test_gemm_strided_batched_refuses_bad_arguments_before_any_call(fake, change, message):
    with pytest.raises(hg.ValidationError, match=message):
        cublas.gemm_strided_batched(**{**GOOD, **change})
    assert fake.log == []


def test_one_batch_stride_may_be_zero_and_one_matrix_needs_no_c_stride(fake):
    """A broadcast A or B (stride 0) and a batch of 1 (C's stride unused) are valid calls."""
    a, b = np.ones((1, 2, 3), np.float32), np.ones((1, 3, 4), np.float32)
    c = np.zeros((2, 2, 4), np.float32)
    cublas.gemm_strided_batched(address(a), address(b), address(c), 2, 4, 3, 2, stride_a=0, stride_b=0,
                                stride_c=8, layout="NN", dtype="f32", acc="f32")
    assert np.all(c == 3.0)
    c1 = np.zeros((2, 4), np.float32)
    cublas.gemm_strided_batched(address(a), address(b), address(c1), 2, 4, 3, 1, stride_a=0, stride_b=0,
                                stride_c=0, layout="NN", dtype="f32", acc="f32")
    assert np.all(c1 == 3.0)


def test_gemm_refuses_an_unknown_layout_before_any_call(fake):
    with pytest.raises(hg.ValidationError, match=r"cuBLAS gemm: layout='nn' is not one of"):
        cublas.gemm(1 << 32, 2 << 32, 3 << 32, 64, 64, 64, layout="nn", dtype="f16", acc="f32")
    assert fake.log == []


# -- on the GPU ----------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype,acc,bound", [("f16", "f32", 1e-3), ("f16", "f16", 1e-2), ("bf16", "f32", 1e-2),
                                             ("f32", "f32", 1e-5)])
@pytest.mark.parametrize("a_order,b_order", list(itertools.product(("row", "col"), repeat=2)))
def test_batched_matmul_on_the_gpu_against_float64(rng, dtype, acc, bound, a_order, b_order):
    """cublasGemmStridedBatchedEx through batched_matmul: every storage order, alpha and beta, one batch."""
    from hgemm_rt.dtypes import STORAGE, storage_to_f64, to_storage

    batch, M, N, K = 5, 67, 130, 96

    def upload(x: np.ndarray, order: str):
        stored = x if order == "row" else np.ascontiguousarray(x.transpose(0, 2, 1))
        d = hg.DeviceArray.from_host(np.ascontiguousarray(to_storage(stored.astype(np.float32), dtype)), dtype)
        s = d.strides
        return d, d if order == "row" else DeviceArray(d.ptr, x.shape, dtype, (s[0], s[2], s[1]), owner=d)

    a, b = rng.standard_normal((batch, M, K)), rng.standard_normal((batch, K, N))
    c0 = rng.standard_normal((batch, M, N))
    (a_own, A), (b_own, B), (C, _) = upload(a, a_order), upload(b, b_order), upload(c0, "row")
    try:
        label = cublas.batched_matmul(A, B, C, acc=acc, alpha=0.5, beta=2.0)
        got = storage_to_f64(C.to_host(np.empty((batch, M, N), STORAGE[dtype])), dtype)
    finally:
        for x in (a_own, b_own, C):
            x.close()
    f64 = lambda x: storage_to_f64(to_storage(x.astype(np.float32), dtype), dtype)  # noqa: E731
    assert label == f"A {a_order}, B {b_order}"
    assert rel(got, 0.5 * np.matmul(f64(a), f64(b)) + 2.0 * f64(c0)) < bound
