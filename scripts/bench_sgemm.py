#!/usr/bin/env python3
"""SGEMM ladder on the GPU: every sgemm_* kernel in the build, every variant (stages), with and
without block swizzle where the grid policy has it, against cuBLAS fp32 and TF32 on the same buffers.

    PYTHONPATH=. python3 scripts/bench_sgemm.py [--MNK 4096 8192] [--kernels 'sgemm_t_8x8*']

bench.py times the default variant only; this sweeps the variant axes. Random N(0,1) inputs, a
sampled-row float64 check of every result (NaN-poisoned C), L2 flush, warm-up, median of CUDA-event
timings (hgemm_rt.timing). Prints TFLOPS and the ratio to cuBLAS fp32 and to cuBLAS TF32.
"""
from __future__ import annotations

import argparse
import fnmatch
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--MNK", type=int, nargs="+", default=[4096])
    ap.add_argument("--kernels", default="sgemm_*", help="glob over kernel names")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per row at most")
    args = ap.parse_args(argv)

    import hgemm_rt as hg
    from hgemm_rt.launch import default_swizzle_stride
    from hgemm_rt.testing import random_operands, reference, rel_error
    from hgemm_rt.timing import L2Flusher, time_fn
    from tabulate import tabulate

    reg = hg.get_registry()
    dev = hg.get_device()
    i = dev.info
    print(f"{i.name}, sm_{i.cc[0]}{i.cc[1]}, {i.sm_count} SMs, build {reg.manifest.build_hash}")
    kernels = [e for e in reg.kernels() if not e.is_baseline and e.dtype == "f32"
               and fnmatch.fnmatch(e.name, args.kernels)]
    kernels.sort(key=lambda e: (e.step, e.name))
    cublas = hg.get_kernel("sgemm_cublas")
    flusher = L2Flusher()
    rng = np.random.default_rng()
    import time

    for n in args.MNK:
        M = N = K = n
        a, b = random_operands(M, N, K, "NN", "f32", rng)
        rows_idx = np.sort(rng.choice(M, size=min(M, 64), replace=False))
        ref = reference(a[rows_idx], b, "NN")
        runs = [(cublas, {"acc": acc}) for acc in cublas.variants["acc"]]
        for e in kernels:
            if e.supports(M, N, K, i.cc) is not None:
                continue
            for choice in e.spec.variant_choices():
                runs.append((e, dict(choice)))
                stride = default_swizzle_stride(N)
                if e.spec.grid == "tiles+swizzle" and stride and stride % e.spec.tile[1] == 0:
                    runs.append((e, {**choice, "swizzle": True, "swizzle_stride": stride}))
        table, tf = [], {}
        with hg.to_device(a) as A, hg.to_device(b) as B, hg.empty((M, N), "f32") as C:
            for e, opts in runs:
                C.fill_bytes(0xFF)
                run = lambda: e(A, B, C, **opts)  # noqa: E731
                t0 = time.perf_counter()
                run()
                dev.synchronize()
                once = time.perf_counter() - t0
                err = rel_error(C.to_numpy()[rows_idx], ref)
                iters = max(3, min(args.iters, int(args.budget / max(once, 1e-6))))
                t = time_fn(run, warmup=min(3, iters), iters=iters, flush=flusher)
                label = ",".join(f"{k}={v}" for k, v in opts.items() if k != "swizzle_stride")
                tflops = t.tflops(M, N, K)
                if e.is_baseline:
                    tf[opts["acc"]] = tflops
                table.append([e.name, label, f"{n}^3", f"{t.median_ms:.3f}", tflops, f"{err:.1e}"])
        for row in table:
            tfl = row[4]
            row[4] = f"{tfl:.1f}"
            row.append(f"{tfl / tf['f32']:.2f}x" if tf.get("f32") else "-")
            row.append(f"{tfl / tf['tf32']:.2f}x" if tf.get("tf32") else "-")
        print(f"\n== M=N=K={n} ==")
        print(tabulate(table, headers=["kernel", "variant", "shape", "ms", "TFLOPS", "rel err (64 rows)",
                                       "x cuBLAS f32", "x cuBLAS tf32"]))
    flusher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
