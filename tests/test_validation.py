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


# ---------------------------------------------------------------------------------------------------
# strict types: a wrong type is a TypeError (hg.ArgumentTypeError, also a ValidationError), a value that
# the kernels would take as something else is refused, never coerced
# ---------------------------------------------------------------------------------------------------

def _mm_args():
    return fake((3, 4)), fake((4, 5))


@pytest.mark.parametrize("name", ["alpha", "beta", "scale"])
@pytest.mark.parametrize("value", [1 + 2j, np.complex64(1), complex(1, 0)])
def test_a_complex_scalar_is_a_type_error_not_a_complex_warning(name, value):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (numpy's ComplexWarning would be an error here)
        with pytest.raises(TypeError, match=f"{name} must be a real number"):
            hg.matmul(*_mm_args(), **{name: value})


@pytest.mark.parametrize("name", ["alpha", "beta", "scale"])
@pytest.mark.parametrize("value", [1e-50, -1e-46, np.float64(1e-300)])
def test_a_finite_scalar_that_underflows_fp32_is_refused_by_name(name, value):
    with pytest.raises(hg.ValidationError, match=f"{name}=.* underflows fp32"):
        hg.matmul(*_mm_args(), **{name: value})


@pytest.mark.parametrize("name", ["alpha", "beta", "scale"])
def test_a_finite_scalar_that_overflows_fp32_is_refused_by_name(name):
    with pytest.raises(hg.ValidationError, match=f"{name}=1e\\+39 is not a finite fp32"):
        hg.matmul(*_mm_args(), **{name: 1e39})


def test_scalars_fp32_can_hold_are_taken():
    from hgemm_rt.validate import fp32_scalar

    assert fp32_scalar("alpha", 1e-40) == 1e-40  # (an fp32 subnormal: not zero)
    assert fp32_scalar("alpha", np.float16(2)) == 2.0 and fp32_scalar("beta", 0) == 0.0 and fp32_scalar("a", -0.0) == 0


@pytest.mark.parametrize("stream", [1.9, "7", b"7", np.float32(3.0), True, 2j])
def test_a_stream_that_is_not_a_handle_or_a_stream_object_is_a_type_error(stream):
    from hgemm_rt.device import stream_handle

    with pytest.raises(TypeError, match="as a CUDA stream"):
        stream_handle(stream)
    with pytest.raises(TypeError, match="as a CUDA stream"):
        hg.matmul(*_mm_args(), stream=stream)


def test_integer_handles_and_stream_objects_are_taken_as_before():
    from hgemm_rt.device import stream_handle

    class Torchish:
        cuda_stream = 0x1234

    class Protocol:
        def __cuda_stream__(self):
            return 0, 0x5678

    assert stream_handle(None) == 0 and stream_handle(7) == 7 and stream_handle(np.int64(9)) == 9
    assert stream_handle(Torchish()) == 0x1234 and stream_handle(Protocol()) == 0x5678
    with pytest.raises(hg.ValidationError, match="not a pointer value"):
        stream_handle(-1)


@pytest.mark.parametrize("swizzle", ["no", 1, None])
def test_launch_swizzle_takes_a_bool_only(swizzle):
    k = CubinKernel(None, spec())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="swizzle must be True or False"):
        k(*ok_operands(), swizzle=swizzle)


def test_launch_swizzle_stride_takes_an_integer_or_none():
    k = CubinKernel(None, spec())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="swizzle_stride must be an integer"):
        k(*ok_operands(), swizzle=True, swizzle_stride="512")


@pytest.mark.parametrize("kw,needle", [
    ({"kernel": None}, "kernel must be a string"),
    ({"kernel": 5}, "kernel must be a string"),
    ({"activation": ["relu"]}, "activation must be a string or None"),
    ({"accumulate": ["f32"]}, "accumulate must be a string or None"),
])
def test_options_of_the_wrong_type_are_a_clear_type_error(kw, needle):
    with pytest.raises(TypeError, match=needle):
        hg.matmul(*_mm_args(), **kw)
    with pytest.raises(TypeError, match=needle):
        hg.Matmul(*_mm_args(), **kw)


@pytest.mark.parametrize("kw,needle", [
    ({"activation": ["relu"]}, "activation must be a string or None"),
    ({"accumulate": 3}, "accumulate must be a string or None"),
    ({"alpha": 1j}, "alpha must be a real number"),
    ({"stream": "7"}, "as a CUDA stream"),
])
def test_grouped_options_of_the_wrong_type_are_a_clear_type_error(kw, needle):
    x, w = fake((100, 64)), fake((4, 64, 32))
    with pytest.raises(TypeError, match=needle):
        hg.grouped_matmul(x, w, offsets=np.array([10, 20, 30, 100], np.int32), **kw)


@pytest.mark.parametrize("ends", [[10, 5, 30, 100], [-1, 20, 30, 100], [10, 20, 30, 101]])
def test_host_offsets_must_be_non_decreasing_row_ends_within_the_rows(ends):
    x, w = fake((100, 64)), fake((4, 64, 32))
    with pytest.raises(hg.ValidationError, match="offsets .* must be non-decreasing row ends within the 100 rows"):
        hg.grouped_matmul(x, w, offsets=np.array(ends, np.int32))


@pytest.mark.parametrize("counts", [[1, 2, 26, 0], [1, -1, 2, 3]])
def test_host_counts_must_be_within_max_m(counts):
    x, w = fake((4, 25, 64)), fake((4, 64, 32))
    with pytest.raises(hg.ValidationError, match="counts must each be 0 .. max_M = 25"):
        hg.grouped_matmul(x, w, counts=np.array(counts, np.int32))


@pytest.mark.parametrize("front", ["matmul", "launch", "grouped"])
def test_a_list_operand_is_a_type_error(front):
    a, b, c = ok_operands()
    with pytest.raises(TypeError, match="list is not a GPU array"):
        if front == "matmul":
            hg.matmul([[1.0]], b)
        elif front == "launch":
            CubinKernel(None, spec())(a, [[1.0]], c)  # type: ignore[arg-type]
        else:
            hg.grouped_matmul([[1.0]], fake((4, 64, 32)), offsets=np.array([1, 2, 3, 4], np.int32))
    with pytest.raises(TypeError, match="list is not a GPU array"):
        hg.as_device_array([[1.0]])


def test_a_cai_producer_stream_is_checked_by_every_front_door():
    """A __cuda_array_interface__ `stream` of 0 is refused by matmul, launch and as_device_array alike (the
    protocol disallows it); a valid one is waited for (the GPU tests show the ordering)."""
    class Cai:
        def __init__(self, arr, stream):
            self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__, stream=stream)

    a, b, c = ok_operands()
    for bad in (0, "1", 1.5):
        with pytest.raises(hg.ValidationError, match="is not a stream handle"):
            hg.matmul(Cai(a, bad), b)
        with pytest.raises(hg.ValidationError, match="is not a stream handle"):
            CubinKernel(None, spec())(Cai(a, bad), b, c)  # type: ignore[arg-type]
        with pytest.raises(hg.ValidationError, match="is not a stream handle"):
            hg.as_device_array(Cai(a, bad))
