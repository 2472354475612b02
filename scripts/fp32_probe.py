"""On the GPU machine: where the time of matmul's fp32 paths goes (3xTF32: the two splits and the TF32 GEMM over
3K; one TF32 pass), beside torch's fp32 SGEMM and TF32 GEMM, GPU time with L2 flushed (triton.testing.do_bench,
median), and each result's error against float64. A probe for tuning, not the product bench
(`bench.py --matmul fp32` is).

    PYTHONPATH=.:$PYTHONPATH python3 scripts/fp32_probe.py 2048 4096 8192 [KERNEL ...]  (each forced, fp32 accuracy)
"""
from __future__ import annotations

import sys

import torch
from triton.testing import do_bench

import hgemm_rt as hg
from hgemm_rt import planner
from hgemm_rt.executor import Execution


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


def main(sizes: list[int], kernels: list[str]) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    for n in sizes:
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        ref = a.double() @ b.double()
        flop = 2.0 * n ** 3
        torch.backends.cuda.matmul.allow_tf32 = False
        c_sgemm = a @ b
        t_sgemm = do_bench(lambda: a @ b, return_mode="median")
        torch.backends.cuda.matmul.allow_tf32 = True
        c_tf32 = a @ b
        t_tf32 = do_bench(lambda: a @ b, return_mode="median")
        torch.backends.cuda.matmul.allow_tf32 = False
        out = torch.empty(n, n, device="cuda")
        rows = [("torch fp32 SGEMM", t_sgemm, rel(c_sgemm, ref)), ("torch TF32", t_tf32, rel(c_tf32, ref))]
        for acc, kernel in [("f32", "auto"), ("tf32", "auto")] + [("f32", k) for k in kernels]:
            mm = hg.Matmul(a, b, out=out, accumulate=acc, kernel=kernel)
            mm(a, b, out=out)
            torch.cuda.synchronize()
            err = rel(out, ref)
            t = do_bench(lambda: mm(a, b, out=out), return_mode="median")
            rows.append((f"hg {acc}: {mm.explain()}", t, err))
        # the 3xTF32 recipe's steps one at a time
        mm = hg.Matmul(a, b, out=out)
        ex = Execution(mm.recipe, "f32", 0, hg.get_registry().manifest)
        packed = ex.pack((a.data_ptr(), b.data_ptr(), out.data_ptr(), 0), 1.0, 0.0)
        for i, (kl, st) in enumerate(zip(ex.launches, ex.steps)):
            t = do_bench(lambda: kl(packed[i], torch.cuda.current_stream().cuda_stream), return_mode="median")
            rows.append((f"  step {i}: {st.spec.name}", t, None))
        ex.close()
        print(f"\n{n}^3 fp32")
        for name, ms, err in rows:
            e = f"{err:.2e}" if err is not None else ""
            print(f"  {ms * 1e3:9.1f} us {flop / ms / 1e9:7.1f} TFLOPS  err {e:>9}  x SGEMM {t_sgemm / ms:5.2f}  {name}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main([int(x) for x in args if x.isdigit()] or [2048, 4096, 8192], [x for x in args if not x.isdigit()])
