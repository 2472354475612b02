"""Resource hygiene on the GPU: no device-memory growth over many launches and alloc/free cycles,
out-of-memory as a clear exception that leaves the runtime usable, concurrent threads; the matmul
kernels through the sanitizer's matmul plans (hgemm_bench.matmul_checks.run_matmul_checks, without the sanitizer)."""
from __future__ import annotations

import numpy as np
import pytest

import hgemm_rt as hg
from hgemm_rt._driver import check, driver
from hgemm_bench.kernel_checks import random_operands
from hgemm_bench.matmul_checks import missing, run_matmul_checks, matmul_kernel_names
from hgemm_rt.numerics import reference, rel_error
from threads import errors_from_threads

pytestmark = pytest.mark.gpu


def free_bytes() -> int:
    hg.get_device().synchronize()
    free, _total = check(driver().cuMemGetInfo(), "cuMemGetInfo")
    return int(free)


def test_ten_thousand_launches_and_alloc_cycles_do_not_grow_device_memory(rng):
    M = N = K = 64
    a, b = random_operands(M, N, K, "NN", "f16", rng)
    A, B, C = hg.to_device(a), hg.to_device(b), hg.empty((M, N), "f16")
    kernel = hg.get_kernel("hgemm_naive_f16")
    kernel(A, B, C)  # load the module first
    before = free_bytes()
    for i in range(10_000):
        kernel(A, B, C)
        if i % 10 == 0:  # 1,000 alloc/free cycles of a 1 MiB buffer in between
            with hg.empty((512, 1024), "f16") as tmp:
                tmp.fill_bytes(0)
    after = free_bytes()
    assert rel_error(C.to_numpy(), reference(a, b, "NN")) < 1e-3
    assert before - after < 4 << 20, f"device memory fell by {(before - after) >> 20} MiB"


def test_out_of_memory_is_a_clear_error_and_the_runtime_stays_usable(rng):
    with pytest.raises(hg.DriverError, match="cuMemAlloc.*CUDA_ERROR_OUT_OF_MEMORY"):
        hg.empty((1 << 24, 1 << 24), "f32")  # 1 PiB
    M, N, K = 32, 48, 16
    a, b = random_operands(M, N, K, "NN", "f16", rng)
    with hg.to_device(a) as A, hg.to_device(b) as B, hg.empty((M, N), "f16") as C:
        hg.launch("hgemm_naive_f16", A, B, C)
        assert rel_error(C.to_numpy(), reference(a, b, "NN")) < 1e-3


def test_two_python_threads_launching_at_once_get_correct_results():
    def work(seed: int) -> list:
        rng, bad = np.random.default_rng(seed), []
        with hg.Stream() as s:
            for _ in range(20):
                M, N, K = (int(x) for x in rng.integers(1, 200, size=3))
                a, b = random_operands(M, N, K, "NN", "f16", rng)
                with hg.to_device(a) as A, hg.to_device(b) as B, hg.empty((M, N), "f16") as C:
                    C.fill_bytes(0xFF, s)
                    hg.launch("hgemm_naive_f16", A, B, C, stream=s)
                    s.synchronize()
                    err = rel_error(C.to_numpy(), reference(a, b, "NN"))
                    if err > 1e-3:
                        bad.append((M, N, K, err))
        return bad

    errors = errors_from_threads(work, (1, 2))
    assert not errors, errors


def test_every_matmul_kernel_is_right_through_matmul_plans_at_aligned_and_ragged_shapes():
    """The sanitizer's schedule without the sanitizer: each plan against float64, inputs with never-written
    row gaps, C untouched outside its view, every matmul kernel at both shape classes."""
    dev = hg.get_device()
    names, _unbuilt = matmul_kernel_names(hg.get_registry().manifest, None, dev.info.cc)
    bad, launches, covered = run_matmul_checks(names)
    assert bad == 0 and launches > len(names)
    assert missing(names, covered) == []
