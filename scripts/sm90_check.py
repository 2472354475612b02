"""Extra GPU checks and a benchmark for the Hopper kernels (hgemm_sm90_*), beyond the generic tests.

    PYTHONPATH=.:$PYTHONPATH python3 scripts/sm90_check.py [--kernels 'hgemm_sm90*'] [--sizes 2048,4096]

1. Correctness at shapes the generic tests do not reach: persistent CTAs looping over many tiles
   (ring phases carried across tiles), ragged edges in every dimension at once, M = 1, K = 8, odd
   cluster rows. Reference: float64 matmul on the GPU (torch, used only as an independent
   reference) of the same rounded inputs; C is NaN-poisoned first.
2. Timing on random N(0,1) data with an L2 flush before each run (hgemm_rt.timing), median of the
   repeats, against the faster cuBLAS variant (fp32 and fp16 accumulation) on the same buffers.
"""
from __future__ import annotations

import argparse
import fnmatch
import math
import sys

import torch

import hgemm_rt as hg

CHECK_SHAPES = [
    (4096, 4096, 4096),
    (2000, 5000, 1000),   # ragged M, N, K; 16 x 20 tiles > 132 SMs: CTAs loop
    (8192, 1032, 520),    # many M tiles, N just past a tile, K not a multiple of BK
    (1, 8, 8),
    (1, 264, 72),
    (33, 8, 4096),
    (130, 4104, 64),      # odd number of 128-row tiles: the cluster's second CTA is idle on a row
    (384, 2048, 8),
]

TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


class DL:
    """Hands a torch tensor to hgemm_rt through DLPack only: torch's __cuda_array_interface__
    raises TypeError (not AttributeError) for bf16, which hasattr() does not swallow."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, *args, **kw):
        return self.t.__dlpack__(*args, **kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def operands(M: int, N: int, K: int, layout: str, dtype: str, gen: torch.Generator):
    dt = TORCH_DT[dtype]
    a = torch.randn((M, K), generator=gen, device="cuda", dtype=torch.float32).to(dt)
    b_shape = (K, N) if layout == "NN" else (N, K)
    b = torch.randn(b_shape, generator=gen, device="cuda", dtype=torch.float32).to(dt)
    return a, b


def reference(a, b, layout: str):
    b64 = b.double()
    return a.double() @ (b64 if layout == "NN" else b64.T)


def rel_err(c, ref) -> float:
    c64 = c.double()
    if not torch.isfinite(c64).all():
        return math.inf
    return float(torch.linalg.norm(c64 - ref) / torch.linalg.norm(ref))


def check(names: list[str], gen: torch.Generator) -> int:
    failures = 0
    for name in names:
        k = hg.get_kernel(name)
        for M, N, K in CHECK_SHAPES:
            why = k.supports(M, N, K)
            if why:
                print(f"CHECK {name:56s} {M}x{N}x{K}: refused ({why})")
                continue
            a, b = operands(M, N, K, k.layout, k.dtype, gen)
            c = torch.full((M, N), float("nan"), device="cuda", dtype=TORCH_DT[k.out])
            k(DL(a), DL(b), DL(c))
            torch.cuda.synchronize()
            ref = reference(a, b, k.layout)
            err = rel_err(c, ref)
            # Same inputs through cuBLAS (torch.matmul, fp32 accumulation) for the error scale.
            cb = a @ (b if k.layout == "NN" else b.T)
            cerr = rel_err(cb, ref)
            bound = max(4 * cerr, 3e-4 if k.out == "f16" else 3e-3)
            ok = err <= bound
            failures += not ok
            print(f"CHECK {name:56s} {M}x{N}x{K}: rel err {err:.3e} (cuBLAS {cerr:.3e}, bound {bound:.1e}) "
                  f"{'PASS' if ok else 'FAIL'}")
    return failures


def time_tflops(fn, M: int, N: int, K: int, iters: int, flush) -> float:
    """Median over `iters` single launches, each after an L2 flush. A GPU-side spin before the start
    event keeps the host's launch overhead (validation, tensor maps) out of the measured interval."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        flush.zero_()
        torch.cuda._sleep(1_000_000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in pairs)[len(pairs) // 2]
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def bench(names: list[str], sizes: list[int], gen: torch.Generator) -> None:
    # Writing twice the L2 size evicts the operands before each timed launch.
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, device="cuda",
                        dtype=torch.float32)
    for n in sizes:
        M = N = K = n
        iters = 20 if n <= 8192 else 10
        rows = []
        for layout in ("TN", "NN"):
            a, b = operands(M, N, K, layout, "f16", gen)
            c = torch.empty((M, N), device="cuda", dtype=torch.float16)
            base = hg.get_kernel(f"hgemm_cublas_tensor_op_{layout.lower()}")
            best = 0.0
            for acc in ("f32", "f16"):
                A, B, C = (hg.as_device_array(DL(x)) for x in (a, b, c))
                t = time_tflops(lambda: base(A, B, C, acc=acc), M, N, K, iters, flush)
                rows.append((f"cublas_{layout.lower()} acc={acc}", t, None))
                best = max(best, t)
            for name in names:
                k = hg.get_kernel(name)
                if k.layout != layout or k.dtype != "f16" or k.supports(M, N, K):
                    continue
                A, B, C = (hg.as_device_array(DL(x)) for x in (a, b, c))
                t = time_tflops(lambda: k(A, B, C), M, N, K, iters, flush)
                rows.append((name, t, t / best))
            del a, b, c
        for label, t, ratio in rows:
            r = f"{ratio:5.3f}x best cuBLAS" if ratio is not None else ""
            print(f"BENCH {n:6d}^3 {label:56s} {t:7.1f} TFLOPS {r}")
        sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="hgemm_sm90*")
    ap.add_argument("--sizes", default="2048,4096,8192,16384")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    names = [n for n in hg.kernels() if fnmatch.fnmatch(n, args.kernels)]
    print("kernels:", ", ".join(names))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(torch.seed() % (2**31))  # fresh inputs every run
    failures = 0 if args.no_check else check(names, gen)
    bench(names, [int(s) for s in args.sizes.split(",") if s], gen)
    print(f"SUMMARY check failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
