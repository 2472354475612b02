"""hgemm_rt.cublaslt: the cuBLASLt baseline. On the CPU: the problem mapping (checked by evaluating it
on the operands' memory as cuBLASLt reads it), argument validation, and the plumbing through a fake
binding (descriptors, layouts, preference, heuristic results, the matmul call, caching, release,
errors). On the GPU (marked gpu): every heuristic candidate against the float64 reference."""
from __future__ import annotations

import ctypes
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hgemm_rt as hg  # noqa: E402
from hgemm_rt import cublaslt as lt  # noqa: E402
from hgemm_rt.cublas import COMPUTE_OF  # noqa: E402

ORDERS = list(itertools.product(("row", "col"), repeat=2))

# -- the mapping, evaluated -------------------------------------------------------------------------------


def col_major(flat: np.ndarray, layout: lt.Layout) -> np.ndarray:
    """The rows x cols column-major matrix with leading dimension ld that cuBLASLt reads at flat."""
    return np.array([[flat[j * layout.ld + i] for j in range(layout.cols)] for i in range(layout.rows)])


def stored(x: np.ndarray, order: str, ld: int) -> np.ndarray:
    """x's memory, row- or column-major with leading dimension ld (padding holds NaN: never read)."""
    rows, cols = x.shape
    if order == "row":
        mem = np.full((rows, ld), np.nan)
        mem[:, :cols] = x
    else:
        mem = np.full((cols, ld), np.nan)
        mem[:, :rows] = x.T
    return mem.ravel()


def op(x: np.ndarray, trans: str) -> np.ndarray:
    return x if trans == "N" else x.T


@pytest.mark.parametrize("a_order,b_order", ORDERS)
@pytest.mark.parametrize("M,N,K,pad", [(3, 5, 7, 0), (1, 9, 4, 3), (6, 1, 2, 1), (5, 4, 1, 2)])
def test_mapping_computes_row_major_c_from_each_storage(a_order, b_order, M, N, K, pad):
    """D = op(A_lt) . op(B_lt) on the memory as cuBLASLt reads it (column-major, its lds) is C^T,
    stored column-major with ld ldc: exactly row-major C."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    lda = (K if a_order == "row" else M) + pad
    ldb = (N if b_order == "row" else K) + pad
    ldc = N + pad
    mp = lt.mapping(M, N, K, a_order, lda, b_order, ldb, ldc, "f16", "f32")
    assert (mp.m, mp.n, mp.k) == (N, M, K)
    assert mp.transa == {"row": "N", "col": "T"}[b_order] and mp.transb == {"row": "N", "col": "T"}[a_order]
    A_lt = col_major(stored(b, b_order, ldb), mp.a)  # cuBLASLt's A is our B
    B_lt = col_major(stored(a, a_order, lda), mp.b)
    assert op(A_lt, mp.transa).shape == (mp.m, mp.k) and op(B_lt, mp.transb).shape == (mp.k, mp.n)
    D = op(A_lt, mp.transa) @ op(B_lt, mp.transb)
    assert (mp.c.rows, mp.c.cols, mp.c.ld) == (N, M, ldc)
    mem = np.full(M * ldc, np.nan)
    for j in range(mp.c.cols):  # D written column-major
        mem[j * ldc: j * ldc + mp.c.rows] = D[:, j]
    np.testing.assert_allclose(mem.reshape(M, ldc)[:, :N], a @ b)


@pytest.mark.parametrize("dtype,acc,data,compute,scale", [
    ("f16", "f32", "CUDA_R_16F", "COMPUTE_32F", "CUDA_R_32F"),
    ("f16", "f16", "CUDA_R_16F", "COMPUTE_16F", "CUDA_R_16F"),
    ("bf16", "f32", "CUDA_R_16BF", "COMPUTE_32F", "CUDA_R_32F"),
    ("f32", "f32", "CUDA_R_32F", "COMPUTE_32F", "CUDA_R_32F"),
    ("f32", "tf32", "CUDA_R_32F", "COMPUTE_32F_FAST_TF32", "CUDA_R_32F"),
])
def test_mapping_types_per_dtype_and_accumulation(dtype, acc, data, compute, scale):
    mp = lt.mapping(8, 8, 8, "row", 8, "row", 8, 8, dtype, acc)
    assert (mp.data_type, mp.compute_type, mp.scale_type) == (data, compute, scale)
    assert lt.SCALE_TYPE.keys() >= set(a for accs in COMPUTE_OF.values() for a in accs)


def test_mapping_names_resolve_in_nvmath():
    pytest.importorskip("nvmath")
    data_types, compute_types, operation = lt._enums()
    for (dtype, acc) in ((d, a) for d, accs in COMPUTE_OF.items() for a in accs):
        mp = lt.mapping(4, 4, 4, "col", 4, "col", 4, 4, dtype, acc)
        for name in (mp.data_type, mp.scale_type):
            assert hasattr(data_types, name)
        assert hasattr(compute_types, mp.compute_type)
        assert hasattr(operation, mp.transa) and hasattr(operation, mp.transb)


@pytest.mark.parametrize("args,match", [
    ((4, 4, 4, "row", 4, "row", 4, 4, "bf16", "f16"), "acc='f16' is not one of"),
    ((4, 4, 4, "row", 4, "row", 4, 4, "f32", "f16"), "acc='f16'"),
    ((0, 4, 4, "row", 4, "row", 4, 4, "f16", "f32"), "M must be a positive integer"),
    ((4, 4, 0, "row", 4, "row", 4, 4, "f16", "f32"), "K must be"),
    ((4, 4, 8, "row", 7, "row", 4, 4, "f16", "f32"), r"A \(row-major\) needs ld >= 8, got 7"),
    ((5, 4, 8, "col", 4, "row", 4, 4, "f16", "f32"), r"A \(col-major\) needs ld >= 5"),
    ((4, 6, 4, "row", 4, "row", 5, 6, "f16", "f32"), r"B \(row-major\) needs ld >= 6"),
    ((4, 6, 4, "row", 4, "col", 3, 6, "f16", "f32"), r"B \(col-major\) needs ld >= 4"),
    ((4, 6, 4, "row", 4, "row", 6, 5, "f16", "f32"), r"C \(row-major, 4 x 6\) needs ld >= 6"),
    ((4, 4, 4, "diag", 4, "row", 4, 4, "f16", "f32"), "order must be 'row' or 'col'"),
])
def test_mapping_refuses_what_cublaslt_would(args, match):
    with pytest.raises(hg.ValidationError, match=match):
        lt.mapping(*args)


def test_alignment_is_the_pointers_power_of_two_up_to_256():
    assert lt.alignment(1 << 20) == 256 and lt.alignment(256 + 2) == 2 and lt.alignment(256 + 16) == 16
    assert lt.alignment(0) == 256 and lt.alignment(3) == 1


# -- a fake cublasLt binding ----------------------------------------------------------------------------

def read(ptr: int, dtype, n: int = 1) -> np.ndarray:
    dt = np.dtype(dtype)
    return np.frombuffer(ctypes.string_at(ptr, dt.itemsize * n), dtype=dt).copy()


def write(ptr: int, arr: np.ndarray) -> None:
    arr = np.ascontiguousarray(arr)
    ctypes.memmove(ptr, arr.ctypes.data, arr.nbytes)


class FakeLt:
    """The nvmath.bindings.cublasLt calls cublaslt makes, recorded, over the real enums and dtypes. The
    heuristic returns `offered` (algo id, state, workspace) results; an algorithm's configuration
    attribute is its id * 100 + the attribute's value."""

    def __init__(self, offered=((66, 0, 0), (70, 0, 1 << 20), (71, 15, 0), (23, 0, 0)), fail: str | None = None):
        self.real = pytest.importorskip("nvmath.bindings.cublasLt")
        self.offered, self.fail = offered, fail
        self.log: list[tuple] = []
        self.live: set[int] = set()
        self._ids = itertools.count(0x1000)
        for name in ("MatmulDescAttribute", "MatmulPreferenceAttribute", "MatmulAlgoConfigAttribute",
                     "matmul_heuristic_result_dtype", "get_matmul_desc_attribute_dtype",
                     "get_matmul_preference_attribute_dtype", "get_matmul_algo_config_attribute_dtype"):
            setattr(self, name, getattr(self.real, name))

    def _new(self, kind: str, *args) -> int:
        if self.fail == kind:
            raise RuntimeError(f"CUBLAS_STATUS_NOT_SUPPORTED in {kind}")
        h = next(self._ids)
        self.live.add(h)
        self.log.append((kind, h, *args))
        return h

    def _gone(self, kind: str, h: int) -> None:
        assert h in self.live, f"{kind} of {h:#x}, which is not alive"
        self.live.remove(h)
        self.log.append((kind, h))

    def calls(self, kind: str) -> list[tuple]:
        return [e for e in self.log if e[0] == kind]

    def create(self):
        return self._new("create")

    def destroy(self, h):
        self._gone("destroy", h)

    def matmul_desc_create(self, compute, scale):
        return self._new("matmul_desc_create", compute, scale)

    def matmul_desc_destroy(self, h):
        self._gone("matmul_desc_destroy", h)

    def matrix_layout_create(self, dt, rows, cols, ld):
        return self._new("matrix_layout_create", dt, rows, cols, ld)

    def matrix_layout_destroy(self, h):
        self._gone("matrix_layout_destroy", h)

    def matmul_preference_create(self):
        return self._new("matmul_preference_create")

    def matmul_preference_destroy(self, h):
        self._gone("matmul_preference_destroy", h)

    def _set_attribute(self, kind, h, attr, buf, size, dtype):
        assert h in self.live and np.dtype(dtype).itemsize == size, (kind, attr, size)
        self.log.append((kind, h, int(attr), int(read(buf, dtype)[0])))

    def matmul_desc_set_attribute(self, h, attr, buf, size):
        self._set_attribute("matmul_desc_set_attribute", h, attr, buf, size, self.get_matmul_desc_attribute_dtype(attr))

    def matmul_preference_set_attribute(self, h, attr, buf, size):
        self._set_attribute("matmul_preference_set_attribute", h, attr, buf, size,
                            self.get_matmul_preference_attribute_dtype(attr))

    def matmul_algo_get_heuristic(self, h, desc, a, b, c, d, pref, requested, results, count):
        if self.fail == "matmul_algo_get_heuristic":
            raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")
        assert {h, desc, a, b, c, pref} <= self.live and c == d
        self.log.append(("matmul_algo_get_heuristic", desc, a, b, c, pref, requested))
        got = self.offered[:requested]
        res = np.zeros(len(got), dtype=self.matmul_heuristic_result_dtype)
        for i, (algo_id, state, ws) in enumerate(got):
            res["algo"]["data_"][i][0] = algo_id
            res["state"][i], res["workspace_size"][i], res["waves_count"][i] = state, ws, 0.5 + i
        write(results, res)
        write(count, np.array([len(got)], dtype=np.int32))

    def matmul_algo_config_get_attribute(self, algo, attr, buf, size, written):
        algo_id = int(read(algo, np.uint64)[0])
        dt = np.dtype(self.get_matmul_algo_config_attribute_dtype(attr))
        assert dt.itemsize == size
        value = algo_id if int(attr) == int(self.MatmulAlgoConfigAttribute.ID) else algo_id * 100 + int(attr)
        write(buf, np.array([value], dtype=dt))
        write(written, np.array([size], dtype=np.uint64))

    def matmul(self, h, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, ws, ws_size, stream):
        if self.fail == "matmul":
            raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")
        assert {h, desc, adesc, bdesc, cdesc} <= self.live
        self.log.append(("matmul", dict(desc=desc, alpha=alpha, a=a, adesc=adesc, b=b, bdesc=bdesc, beta=beta, c=c,
                                        cdesc=cdesc, d=d, ddesc=ddesc, algo_id=int(read(algo, np.uint64)[0]),
                                        ws=ws, ws_size=ws_size, stream=stream)))


def test_the_fake_takes_the_real_bindings_arguments():
    """Each binding the fake stands in for takes the arguments its docstring's signature lists (nvmath
    1.0: "matmul(intptr_t light_handle, intptr_t compute_desc, ...)"), as many as the fake takes."""
    import inspect

    f = FakeLt()
    for name in ("create", "destroy", "matmul_desc_create", "matmul_desc_destroy", "matrix_layout_create",
                 "matrix_layout_destroy", "matmul_preference_create", "matmul_preference_destroy",
                 "matmul_desc_set_attribute", "matmul_preference_set_attribute", "matmul_algo_get_heuristic",
                 "matmul_algo_config_get_attribute", "matmul"):
        first = getattr(f.real, name).__doc__.strip().splitlines()[0]
        assert first.startswith(name + "("), first
        params = [p for p in first[len(name) + 1:first.index(")")].split(",") if p.strip()]
        assert len(params) == len(inspect.signature(getattr(f, name)).parameters), (name, first)


class FakeWorkspace:
    def __init__(self, nbytes, device, freed):
        self.ptr, self.nbytes, self.freed = 0x7000_0000 + 0x1000_0000 * len(freed), nbytes, freed
        freed.append(None)

    def close(self):
        self.freed[self.freed.index(None)] = self.ptr


@pytest.fixture
def fake(monkeypatch):
    f = FakeLt()
    f.workspaces = []
    f.syncs = []
    monkeypatch.setattr(lt, "_lt", lambda: f)
    monkeypatch.setattr(lt, "get_device", lambda d=0: type("D", (), {"synchronize": lambda s: f.syncs.append(d)})())
    monkeypatch.setattr(lt, "_allocate", lambda n, d: FakeWorkspace(n, d, f.workspaces))
    # start and end with empty caches, never touching the real ones' objects
    monkeypatch.setattr(lt, "_plans", type(lt._plans)())
    monkeypatch.setattr(lt, "_handles", {})
    monkeypatch.setattr(lt, "_workspaces", {})
    yield f
    lt.release()
    assert not f.live, f"cuBLASLt objects left alive: {sorted(map(hex, f.live))}"


def arrays(M, N, K, dtype="f16", a_order="row", b_order="row", base=1 << 30, c_offset=0):
    """DeviceArray views at made-up addresses (never dereferenced: the fake binding runs)."""
    def make(ptr, rows, cols, order):
        x = hg.DeviceArray(ptr, (rows, cols) if order == "row" else (cols, rows), dtype)
        return x if order == "row" else x.T
    return (make(base, M, K, a_order), make(base + (1 << 26), K, N, b_order),
            make(base + (2 << 26) + c_offset, M, N, "row"))


def test_candidates_are_the_usable_heuristic_results_in_order_with_their_configuration(fake):
    A, B, C = arrays(64, 96, 128)
    got = lt.candidates(A, B, C, acc="f32", algos=8)
    assert [c.algo_id for c in got] == [66, 70, 23]  # algo 71 came back with a failed state
    assert [c.index for c in got] == [0, 1, 2]
    attr = fake.MatmulAlgoConfigAttribute
    assert got[1].tile == 7000 + int(attr.TILE_ID) and got[1].stages == 7000 + int(attr.STAGES_ID)
    assert got[1].split_k == 7000 + int(attr.SPLITK_NUM) and got[1].workspace == 1 << 20
    assert got[2].waves == 3.5  # the 4th result's own waves count
    assert got[0].label == "Lt algo #0 (id 66)" and got[0].record()["algo_id"] == 66
    (heur,) = fake.calls("matmul_algo_get_heuristic")
    assert heur[-1] == 8  # algos requested


@pytest.mark.parametrize("a_order,b_order", ORDERS)
@pytest.mark.parametrize("dtype,acc", [("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("f32", "f32")])
def test_descriptor_layouts_and_call_follow_the_mapping(fake, a_order, b_order, dtype, acc):
    M, N, K = 33, 65, 17
    A, B, C = arrays(M, N, K, dtype, a_order, b_order)
    ran = lt.matmul(A, B, C, acc=acc, algo=1, alpha=0.5, beta=2.0, stream=0xABC)
    assert ran.algo_id == 70
    data_types, compute_types, operation = lt._enums()
    mp = lt.mapping(M, N, K, a_order, K if a_order == "row" else M, b_order, N if b_order == "row" else K, N,
                    dtype, acc)
    (desc,) = fake.calls("matmul_desc_create")
    assert desc[2:] == (int(getattr(compute_types, mp.compute_type)), int(getattr(data_types, mp.scale_type)))
    trans = {a: v for kind, h, a, v in fake.calls("matmul_desc_set_attribute")}
    assert trans == {int(fake.MatmulDescAttribute.TRANSA): int(getattr(operation, mp.transa)),
                     int(fake.MatmulDescAttribute.TRANSB): int(getattr(operation, mp.transb))}
    layouts = fake.calls("matrix_layout_create")
    dt = int(getattr(data_types, mp.data_type))
    assert [e[2:] for e in layouts] == [(dt, x.rows, x.cols, x.ld) for x in (mp.a, mp.b, mp.c)]
    (call,) = [e[1] for e in fake.calls("matmul")]
    # swapped operands: cuBLASLt's A is B, its B is A; C is read and written in place
    assert (call["a"], call["b"], call["c"], call["d"]) == (B.ptr, A.ptr, C.ptr, C.ptr)
    la, lb, lc = (e[1] for e in layouts)
    assert (call["adesc"], call["bdesc"], call["cdesc"], call["ddesc"]) == (la, lb, lc, lc)
    assert call["desc"] == desc[1] and call["algo_id"] == 70 and call["stream"] == 0xABC
    assert call["ws_size"] == lt.WORKSPACE_BYTES and call["ws"] == lt._workspaces[(0, 0xABC)].ptr
    scale = np.float16 if acc == "f16" else np.float32
    assert read(call["alpha"], scale)[0] == 0.5 and read(call["beta"], scale)[0] == 2.0


def test_preference_sets_the_workspace_and_each_pointers_alignment(fake):
    A, B, C = arrays(64, 64, 64, c_offset=16)  # C 16-byte aligned, A and B 256
    lt.candidates(A, B, C)
    pref = {a: v for kind, h, a, v in fake.calls("matmul_preference_set_attribute")}
    P = fake.MatmulPreferenceAttribute
    assert pref == {int(P.MAX_WORKSPACE_BYTES): lt.WORKSPACE_BYTES, int(P.MIN_ALIGNMENT_A_BYTES): 256,
                    int(P.MIN_ALIGNMENT_B_BYTES): 256, int(P.MIN_ALIGNMENT_C_BYTES): 16,
                    int(P.MIN_ALIGNMENT_D_BYTES): 16}
    assert len(fake.calls("matmul_preference_destroy")) == 1  # not kept past the heuristic


def test_plans_are_cached_per_problem_and_released(fake):
    A, B, C = arrays(64, 96, 128)
    lt.matmul(A, B, C)
    lt.matmul(A, B, C, algo=2)
    lt.candidates(A, B, C)
    assert len(fake.calls("matmul_algo_get_heuristic")) == 1 and len(fake.calls("matmul")) == 2
    assert len(fake.calls("create")) == 1  # one handle per device
    lt.candidates(A, B, C, acc="f16")  # another accumulation
    lt.candidates(A, B, C, algos=2)  # another request size
    A2, B2, C2 = arrays(64, 96, 128, c_offset=8)  # another alignment
    lt.candidates(A2, B2, C2)
    lt.candidates(*arrays(64, 96, 128, b_order="col"))  # another layout
    assert len(fake.calls("matmul_algo_get_heuristic")) == 5 == lt.cache_info()["plans"]
    lt.matmul(A, B, C, stream=5)
    assert lt.cache_info()["workspaces"] == 2  # one per stream
    lt.release()
    assert not fake.live and lt.cache_info() == {"plans": 0, "workspaces": 0, "handles": 0}
    assert sorted(p for p in fake.workspaces) == sorted(0x7000_0000 + 0x1000_0000 * i for i in range(2))
    assert fake.syncs == [0]  # freed once the device was idle
    lt.matmul(A, B, C)  # starts afresh
    assert len(fake.calls("create")) == 2


def test_least_recently_used_plans_are_destroyed_past_the_cache_size(fake, monkeypatch):
    monkeypatch.setattr(lt, "PLAN_CACHE_SIZE", 2)
    first = arrays(16, 16, 16)
    lt.candidates(*first)
    lt.candidates(*arrays(16, 16, 32))
    lt.candidates(*first)  # used again: the 16x16x32 plan is now the oldest
    lt.candidates(*arrays(16, 16, 48))
    assert lt.cache_info()["plans"] == 2 and len(fake.calls("matmul_desc_destroy")) == 1
    lt.candidates(*first)
    assert len(fake.calls("matmul_algo_get_heuristic")) == 3  # first was kept


@pytest.mark.parametrize("fail,op", [("matmul_desc_create", "matmul_desc_create"),
                                     ("matrix_layout_create", "matrix_layout_create"),
                                     ("matmul_preference_create", "matmul_preference_create"),
                                     ("matmul_algo_get_heuristic", "matmul_algo_get_heuristic")])
def test_a_failed_plan_names_the_operation_and_the_problem_and_leaves_nothing_alive(fake, fail, op):
    fake.fail = fail
    with pytest.raises(hg.DriverError, match=rf"cuBLASLt {op} \(64x96x128 f16 acc f32, A row, B col\) failed"):
        lt.candidates(*arrays(64, 96, 128, b_order="col"))
    assert lt.cache_info()["plans"] == 0
    assert fake.live <= set(lt._handles.values())  # descriptors and layouts destroyed again


def test_no_usable_algorithm_is_an_error_naming_the_problem(fake):
    fake.offered = ((71, 15, 0),)
    with pytest.raises(hg.DriverError, match=r"returned no usable algorithm \(1 returned\)"):
        lt.candidates(*arrays(8, 8, 8))
    assert lt.cache_info()["plans"] == 0


def test_a_failed_matmul_names_the_algorithm(fake):
    fake.fail = "matmul"
    with pytest.raises(hg.DriverError, match=r"cuBLASLt matmul \(8x8x8 f16 acc f32, A row, B row, algo #1\) failed"):
        lt.matmul(*arrays(8, 8, 8), algo=1)


@pytest.mark.parametrize("kwargs,match", [
    ({"algo": 3}, r"algo=3, but the heuristic gave 3 candidate\(s\) \(0..2\)"),
    ({"algo": -1}, "algo=-1"),
    ({"algo": True}, "algo=True"),
    ({"algos": 0}, "algos .* must be >= 1, got 0"),
    ({"acc": "f16", "algo": 0, "algos": 1.5}, "must be >= 1, got 1.5"),
    ({"acc": "tf32"}, "acc='tf32' is not one of"),
])
def test_matmul_arguments_are_checked(fake, kwargs, match):
    with pytest.raises(hg.ValidationError, match=match):
        lt.matmul(*arrays(8, 8, 8), **kwargs)


def test_operands_are_checked_before_any_cublaslt_call(fake):
    A, B, C = arrays(8, 12, 16)
    bad = [
        ((A, B, hg.DeviceArray(C.ptr, (8, 13), "f16")), "does not give C"),
        ((A, hg.DeviceArray(B.ptr, (16, 12), "f32"), C), "dtypes f16, f32, f16"),
        ((A, B, hg.DeviceArray(C.ptr, (12, 8), "f16").T), "C must be row-major"),
        ((A, hg.DeviceArray(B.ptr, (16, 12), "f16", strides=(48, 4)), C), "neither row- nor column-major"),
        ((hg.DeviceArray(A.ptr, (8, 16, 1), "f16"), B, C), "must be 2-D"),
    ]
    for args, match in bad:
        with pytest.raises(hg.ValidationError, match=rf"cuBLASLt matmul: .*{match}"):
            lt.matmul(*args)
    assert fake.log == []


def test_without_nvmath_the_error_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_nvmath(name, *args, **kwargs):
        if name.startswith("nvmath"):
            raise ImportError("No module named 'nvmath'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_nvmath)
    with pytest.raises(hg.NoGpuError, match="pip install nvmath-python"):
        lt._lt()


# -- on the GPU ------------------------------------------------------------------------------------------

def upload(x32: np.ndarray, dtype: str, order: str):
    """(owner, view): x rounded to dtype on the GPU, row- or column-major (the .T view of x.T's upload)."""
    from hgemm_rt.dtypes import to_storage

    host = to_storage(x32 if order == "row" else np.ascontiguousarray(x32.T), dtype)
    owner = hg.DeviceArray.from_host(host, dtype)
    return owner, owner if order == "row" else owner.T


@pytest.mark.gpu
@pytest.mark.parametrize("a_order,b_order", ORDERS)
@pytest.mark.parametrize("dtype,acc", [("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("f32", "f32")])
@pytest.mark.parametrize("M,N,K", [(67, 130, 96), (1, 4096, 1000), (257, 33, 4099)])
def test_every_candidate_matches_float64(rng, a_order, b_order, dtype, acc, M, N, K):
    """Each heuristic candidate (alpha, beta != 0) against the float64 reference of the rounded inputs,
    within the bound the same accumulation's GemmEx sets on the same inputs."""
    from hgemm_rt import cublas
    from hgemm_rt.dtypes import storage_to_f64, to_storage
    from hgemm_bench.kernel_checks import baseline_acc
    from hgemm_rt.numerics import error_bound, rel_error

    a32, b32 = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    c32 = rng.standard_normal((M, N), dtype=np.float32)
    (a_own, A), (b_own, B), (C, _) = upload(a32, dtype, a_order), upload(b32, dtype, b_order), upload(c32, dtype, "row")
    f64 = [storage_to_f64(to_storage(x, dtype), dtype) for x in (a32, b32, c32)]
    ref = 0.5 * (f64[0] @ f64[1]) + 2.0 * f64[2]
    c0 = to_storage(c32, dtype)
    try:
        C.copy_from_host(c0)
        cublas.matmul(A, B, C, acc=baseline_acc(dtype, acc), alpha=0.5, beta=2.0)
        gemmex = rel_error(storage_to_f64(C.to_host(), dtype), ref)
        bound = error_bound(dtype, acc, dtype, K, gemmex)
        cands = lt.candidates(A, B, C, acc=acc)
        assert cands and [c.index for c in cands] == list(range(len(cands)))
        for cand in cands:
            C.copy_from_host(c0)
            lt.matmul(A, B, C, acc=acc, algo=cand.index, alpha=0.5, beta=2.0)
            err = rel_error(storage_to_f64(C.to_host(), dtype), ref)
            assert err <= bound, f"{cand} at {M}x{N}x{K}: {err:.2e} > {bound:.2e} (GemmEx {gemmex:.2e})"
    finally:
        for x in (a_own, b_own, C):
            x.close()


@pytest.mark.gpu
def test_offset_pointers_and_padded_rows_on_a_stream(rng):
    """An operand 2 bytes past an allocation and padded leading dimensions: the heuristic is told the
    alignment and picks algorithms that run correctly there; the work goes on the stream given."""
    from hgemm_rt.numerics import rel_error

    M, N, K, pad = 65, 63, 129, 3
    a = rng.standard_normal((M, K + pad), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
    with hg.to_device(a) as a_own, hg.to_device(b) as B, hg.empty((M, N + 1), "f16") as c_own, hg.Stream() as s:
        A = hg.DeviceArray(a_own.ptr + 2, (M, K), "f16", a_own.strides)  # a[:, 1:K+1]
        C = hg.DeviceArray(c_own.ptr, (M, N), "f16", c_own.strides)
        ref = a[:, 1:K + 1].astype(np.float64) @ b.astype(np.float64)
        for cand in lt.candidates(A, B, C):
            c_own.fill_bytes(0xFF, s)
            lt.matmul(A, B, C, algo=cand.index, stream=s)
            s.synchronize()
            assert rel_error(c_own.to_numpy()[:, :N], ref) < 1e-3, cand
    lt.release()
    assert lt.cache_info() == {"plans": 0, "workspaces": 0, "handles": 0}
