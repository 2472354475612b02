"""Bad input is refused before anything touches the GPU, with the exact error type and message.
These run on the CPU: the arrays below are fake pointers that are never dereferenced."""
from __future__ import annotations

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt.manifest import kernel_spec_from_dict
from hgemm_rt.memory import DeviceArray
from hgemm_rt.registry import CubinKernel
from hgemm_rt.validate import validate_operands

BASE = 1 << 32


def fake(shape, dtype="f16", offset=0, strides=None, readonly=False):
    fake.next += 1 << 28  # disjoint fake allocations
    return DeviceArray(BASE + fake.next + offset, shape, dtype, strides=strides, readonly=readonly)


fake.next = 0


def spec(**over):
    d = {"name": "hgemm_test_kernel", "family": "t", "ladder": "mma", "layout": "NN", "dtype": "f16",
         "out": "f16", "block": [256], "tile": [128, 128, 32], "grid": "tiles+swizzle",
         "require": {"M": 128, "N": 128, "K": 32}, "align": 16, "variants": {"stages": [2, 3, 4]},
         "dsmem": "stages * (BM * BK + BK * BN) * 2"}
    d.update(over)
    return kernel_spec_from_dict(d)


def ok_operands(layout="NN", M=256, N=256, K=64):
    b = (K, N) if layout == "NN" else (N, K)
    return fake((M, K)), fake(b), fake((M, N))


def test_valid_operands_give_the_problem_size():
    p = validate_operands(spec(), *ok_operands())
    assert (p.M, p.N, p.K) == (256, 256, 64)


@pytest.mark.parametrize("make,message", [
    (lambda: (fake((256, 64), "f32"), fake((64, 256)), fake((256, 256))), "A has dtype f32, this kernel takes f16"),
    (lambda: (fake((256, 64, 1)), fake((64, 256)), fake((256, 256))), r"A must be 2-D, got shape \(256, 64, 1\)"),
    (lambda: (fake((256, 64)), fake((65, 256)), fake((256, 256))), r"B has shape \(65, 256\).*K x N \(NN layout\)"),
    (lambda: (fake((256, 64)), fake((64, 256)), fake((255, 256))), "C has 255 rows but A has 256"),
    (lambda: (fake((256, 64), offset=8), fake((64, 256)), fake((256, 256))), "not 16-byte aligned"),
    (lambda: (fake((256, 64), strides=(2, 512)), fake((64, 256)), fake((256, 256))), "must be C-contiguous"),
    (lambda: (fake((256, 64)), fake((64, 256)), fake((256, 256), readonly=True)), "C is read-only"),
    (lambda: (fake((200, 64)), fake((64, 256)), fake((200, 256))), "M=200 is not a multiple of 128"),
    (lambda: (fake((256, 48)), fake((48, 256)), fake((256, 256))), "K=48 is not a multiple of 32"),
])
def test_bad_operands_are_refused_with_the_reason(make, message):
    with pytest.raises(hg.ValidationError, match=message) as info:
        validate_operands(spec(), *make())
    assert "hgemm_test_kernel" in str(info.value)


def test_tn_kernel_given_an_nn_b_names_the_layout():
    a, b, c = ok_operands("NN", M=256, N=384, K=64)
    with pytest.raises(hg.ValidationError, match=r"N x K \(TN layout: B given transposed\) = \(384, 64\)"):
        validate_operands(spec(layout="TN"), a, b, c)


def test_output_aliasing_an_input_is_refused():
    a = fake((256, 256))
    b = fake((256, 256))
    with pytest.raises(hg.ValidationError, match="C overlaps A"):
        validate_operands(spec(), a, b, a)


def test_unbuilt_stage_count_is_refused():
    with pytest.raises(hg.ValidationError, match=r"stages=5 is not built; available: \[2, 3, 4\]"):
        spec().resolve_variant({"stages": 5})
    with pytest.raises(hg.ValidationError, match="unknown option"):
        spec().resolve_variant({"stage": 3})


def test_host_array_is_refused_with_a_hint():
    k = CubinKernel(None, spec())  # type: ignore[arg-type]
    with pytest.raises(hg.ValidationError, match="numpy array in host memory.*to_device"):
        k(np.zeros((256, 64), np.float16), *ok_operands()[1:])


def test_non_gpu_object_is_refused():
    k = CubinKernel(None, spec())  # type: ignore[arg-type]
    with pytest.raises(hg.ValidationError, match="not a GPU array"):
        k([[1.0]], *ok_operands()[1:])


def test_unknown_kernel_name_suggests_close_matches():
    with pytest.raises(hg.UnknownKernelError, match="did you mean hgemm_naive_f16"):
        hg.get_kernel("hgemm_naive_f61")


def test_cublas_entry_validates_too():
    entry = hg.get_kernel("hgemm_cublas_tensor_op_tn")
    a, b, c = ok_operands("NN", M=64, N=96, K=32)
    with pytest.raises(hg.ValidationError, match="TN layout"):
        entry(a, b, c)
    with pytest.raises(hg.ValidationError, match="acc='f64' is not one of"):
        entry(*ok_operands("TN", 64, 96, 32), acc="f64")


@pytest.mark.parametrize("make, message", [
    (lambda: (fake((64, 32, 2)), fake((32, 96)), fake((64, 96))), "must be 2-D"),
    (lambda: (fake((64, 32)), fake((33, 96)), fake((64, 96))), r"A \(64, 32\) . B \(33, 96\) does not give"),
    (lambda: (fake((64, 32)), fake((32, 96), "f32"), fake((64, 96))), "dtypes f16, f32, f16"),
    (lambda: (fake((64, 32), strides=(128, 4)), fake((32, 96)), fake((64, 96))), "neither row- nor column-major"),
    (lambda: (fake((64, 32)), fake((32, 96)), fake((96, 64)).T), "C must be row-major"),
    (lambda: (fake((64, 32)), fake((32, 96)), fake((64, 96))), "acc='tf32' is not one of"),
])
def test_cublas_matmul_refuses_bad_operands_before_any_call(make, message):
    from hgemm_rt import cublas

    with pytest.raises(hg.ValidationError, match=message):
        cublas.matmul(*make(), acc="tf32" if "tf32" in message else "f32")


def test_column_major_a_kernel_takes_a_transposed_view_and_refuses_row_major_a():
    tmaps = ["tmap:A", "tmap:B", "tmap:C", "i32:M", "i32:N", "i32:K"]
    col = spec(a_order="col", params=tmaps, tma={"A": {"box": [64, 64]}})
    M, N, K = 256, 256, 64
    p = validate_operands(col, fake((K, M)).T, fake((K, N)), fake((M, N)))
    assert (p.M, p.N, p.K) == (M, N, K)
    with pytest.raises(hg.ValidationError, match="A must be column-major .* x.T"):
        validate_operands(col, fake((M, K)), fake((K, N)), fake((M, N)))
    with pytest.raises(hg.ManifestError, match="needs a tmap:A parameter"):
        spec(a_order="col")
    with pytest.raises(hg.ManifestError, match="a_order='diag' is not one of"):
        spec(a_order="diag")


def test_transposed_view_is_refused_by_a_kernel_that_needs_row_major():
    a = fake((64, 256))
    t = a.T
    assert t.shape == (256, 64) and t.strides == (2, 512) and t.ptr == a.ptr and not t.is_c_contiguous
    with pytest.raises(hg.ValidationError, match="A must be C-contiguous"):
        validate_operands(spec(), t, fake((64, 256)), fake((256, 256)))


def test_dimensions_that_do_not_fit_the_kernels_int32_are_refused():
    M = 2**31  # a multiple of every tile: only the int32 parameters stand in the way
    a, b, c = fake((M, 64)), fake((64, 256)), fake((M, 256))
    with pytest.raises(hg.ValidationError, match="below 2\\^31"):
        validate_operands(spec(), a, b, c)
