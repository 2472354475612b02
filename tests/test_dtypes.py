"""The dtype table on the CPU: item sizes, host storage and the bf16 <-> fp32 bit conversions."""
from __future__ import annotations

import numpy as np
import pytest

from hgemm_rt import dtypes


def test_every_code_has_a_size_a_storage_and_a_cai_typestr():
    assert set(dtypes.STORAGE) == set(dtypes.ITEMSIZE) == set(dtypes.CAI_TYPESTR)
    for code, size in dtypes.ITEMSIZE.items():
        assert dtypes.STORAGE[code].itemsize == size, code
        assert dtypes.CAI_TYPESTR[code].endswith(str(size)), code


def test_bf16_bits_round_to_nearest_even_as_ml_dtypes_does(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    # (float32 before the comparison: ml_dtypes rounds a float64 to bf16 in one step, the runtime takes float32)
    x = np.concatenate([(rng.standard_normal(10_000) * 10.0 ** rng.integers(-30, 30, 10_000)).astype(np.float32),
                        np.array([0.0, -0.0, 1.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-40], np.float32),
                        # exact ties between two bf16 values: the even one wins
                        np.array([0x3F808000, 0x3F818000, 0xBF808000], np.uint32).view(np.float32)])
    want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(dtypes.f32_to_bf16_bits(x), want)
    assert np.isnan(dtypes.bf16_bits_to_f32(dtypes.f32_to_bf16_bits(np.float32(np.nan))))


def test_bf16_bits_widen_exactly_and_take_any_layout(rng):
    bits = rng.integers(0, 1 << 16, (8, 6)).astype(np.uint16)
    bits = bits[~np.isnan(dtypes.bf16_bits_to_f32(bits)).any(axis=1)]
    assert np.array_equal(dtypes.f32_to_bf16_bits(dtypes.bf16_bits_to_f32(bits)), bits)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    assert np.array_equal(dtypes.f32_to_bf16_bits(x.T), dtypes.f32_to_bf16_bits(x).T)  # a strided view


@pytest.mark.parametrize("code", ["f16", "bf16", "f32"])
def test_storage_holds_the_rounded_values(rng, code):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    stored = dtypes.to_storage(x, code)
    assert stored.dtype == dtypes.STORAGE[code] and stored.shape == x.shape
    exact = dtypes.storage_to_f64(stored, code)
    assert exact.dtype == np.float64
    assert np.max(np.abs(exact - x) / np.abs(x)) <= {"f16": 2 ** -11, "bf16": 2 ** -8, "f32": 0}[code]
    assert dtypes.storage_all_finite(stored, code)
    for bad in (np.inf, -np.inf, np.nan):
        y = x.copy()
        y[2, 3] = bad
        assert not dtypes.storage_all_finite(dtypes.to_storage(y, code), code), (code, bad)
