"""GPU test cases of a fused-epilogue GEMM forced onto one recipe: guarded operands with the float64 reference
(epilogue_case), and a recipe run twice and checked (forced_twice). Shared by the stream-K and K-group tests."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hgemm_rt import api, planner
from hgemm_rt.dtypes import storage_to_f64, to_storage
from hgemm_rt.epilogue import Epilogue, reference as epilogue_reference
from hgemm_rt.numerics import error_floor, rel_error
from guarded import GuardedArray


@dataclass
class EpilogueCase:
    """Guarded operands of C = epilogue(alpha A.B + bias) + beta C_old, the problem matmul validates for them, and the
    float64 reference (rounded to the output dtype) with its error floor."""

    dtype: str
    a: GuardedArray
    b: GuardedArray
    c: GuardedArray
    bias: GuardedArray | None
    alpha: float
    beta: float
    prob: Any
    want: np.ndarray
    floor: float

    @property
    def ptrs(self) -> tuple[int, int, int, int]:
        return (self.a.view.ptr, self.b.view.ptr, self.c.view.ptr, self.bias.view.ptr if self.bias is not None else 0)


def epilogue_case(rng: np.random.Generator, dtype: str, M: int, N: int, K: int, *, batch: tuple[int, ...] = (),
                  b_order: str = "row", bias: str | None = None, act: str | None = None, alpha: float = 1.0,
                  beta: float = 0.0, c_offset: int = 0, c_pad: int = 0) -> EpilogueCase:
    """A case on N(0,1) values: A's rows padded by a column, B of N columns in `b_order`, C of N columns (N / 2 with
    SwiGLU) `c_offset` elements into its buffer with rows padded by `c_pad`, a bias per column ("col") or row ("row")
    or none; the floor twice the usual for SwiGLU's two sums."""
    n_out = N // 2 if act == "swiglu" else N
    a = GuardedArray(rng.standard_normal((*batch, M, K)), dtype, "row", 1, 0)
    b = GuardedArray(rng.standard_normal((*batch, K, N)), dtype, b_order, 0, 0)
    c = GuardedArray(rng.standard_normal((*batch, M, n_out)), dtype, "row", c_offset, c_pad)
    bv = None
    if bias is not None:
        bv = GuardedArray(rng.standard_normal((1, N) if bias == "col" else (M, 1)), dtype, "row", 0, 0)
    call = api.validate_call(a.view, b.view, c.view, alpha, beta, None, "auto", None,
                             None if bv is None else bv.view, act, 1.0)
    prob = api.problem_of(call)
    want = epilogue_reference(a.exact @ b.exact, prob.epi or Epilogue(None), alpha, beta, c.exact,
                              None if bv is None else bv.exact)
    want = storage_to_f64(to_storage(np.asarray(want, np.float32), dtype), dtype)
    floor = error_floor(dtype, "f32", dtype, K) * (2 if act == "swiglu" else 1)
    return EpilogueCase(dtype, a, b, c, bv, alpha, beta, prob, want, floor)


def forced_twice(case: EpilogueCase, plan, zero_words: int, workspace: str | None = "tW") -> list[str]:
    """Runs `plan` twice on the case (C set back before each) and says what is wrong: an error over the floor or C's
    surroundings touched (first run), the runs differing in any bit, or any of the workspace temporary's first
    `zero_words` int32 (the flags or counts a launch must leave zero) set (workspace None: a plan without one)."""
    from hgemm_rt.device import get_device
    from hgemm_rt.executor import Execution
    from hgemm_rt.registry import get_registry

    dev = get_device()
    ex = Execution(plan, case.dtype, 0, get_registry().manifest)
    try:
        runs = []
        for _ in range(2):
            case.c.buf.copy_from_host(case.c.host)
            ex.run(case.ptrs, case.alpha, case.beta, 0)
            dev.synchronize()
            runs.append(case.c.read())
        left = ex.temps[workspace].to_host().reshape(-1).view(np.int32)[:zero_words] if workspace else np.zeros(0)
    finally:
        ex.close()
    what, bad = planner.describe(plan), []
    err = rel_error(runs[0], case.want)
    if not err <= case.floor or not case.c.outside_untouched():
        bad.append(f"{what}: {err:.2e} > {case.floor:.2e}")
    if not np.array_equal(runs[0], runs[1], equal_nan=True):
        bad.append(f"{what}: two runs differ")
    if left.any():
        bad.append(f"{what}: {int((left != 0).sum())} workspace words left set")
    return bad
