#!/usr/bin/env python3
"""Sweep the mma.sync ladder's variant axes (acc x stages x block swizzle) at large square shapes
against every cuBLAS variant, on the GPU machine.

bench.py times each kernel's default variant (stages=2, acc=f16); the ladder's fast rungs want 3-4
stages, and the fp32-accumulate variants must be measured too. This script times every requested
(kernel, acc, stages, swizzle) combination on the same random operands as cuBLAS NN and TN (acc f16
and f32), checks sampled rows of every result against float64, and prints TFLOPS and the ratio to
the best cuBLAS variant of the run.

Timing: CUDA events around REPS back-to-back launches (Python's launch overhead overlaps the GPU
work, since each launch takes far longer than the call), after an L2 flush; the median of GROUPS.

    PYTHONPATH=. python3 scripts/bench_mma.py --MNK 4096 8192 --kernels 'hgemm_mma*'
    PYTHONPATH=. python3 scripts/bench_mma.py --MNK 16384 --kernels '*x2*' --stages 3 4
"""
from __future__ import annotations

import argparse
import fnmatch
import statistics
import sys
import time

import numpy as np


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--MNK", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--kernels", nargs="+", default=["hgemm_mma*"], help="globs over kernel names")
    ap.add_argument("--stages", type=int, nargs="*", help="stage counts to sweep (default: all built)")
    ap.add_argument("--acc", nargs="*", help="accumulations to sweep (default: all built)")
    ap.add_argument("--swizzle", choices=["on", "off", "both"], default="on")
    ap.add_argument("--reps", type=int, default=10, help="back-to-back launches per timed group")
    ap.add_argument("--groups", type=int, default=5, help="timed groups (the median is reported)")
    ap.add_argument("--rows", type=int, default=64, help="rows of C checked against float64")
    ap.add_argument("--skip-slow", type=float, default=50.0,
                    help="skip a variant whose first launch is under this many TFLOPS (naive rungs)")
    return ap.parse_args(argv)


def combos(entry, args):
    v = entry.variants
    accs = [a for a in v.get("acc", [None]) if a is None or not args.acc or a in args.acc]
    stages = [s for s in v.get("stages", [None]) if s is None or not args.stages or s in args.stages]
    swz = {"on": [True], "off": [False], "both": [True, False]}[args.swizzle]
    if entry.is_baseline or entry.spec.grid != "tiles+swizzle":
        swz = [False]
    for a in accs:
        for s in stages:
            for z in swz:
                opt = {}
                if a is not None:
                    opt["acc"] = a
                if s is not None:
                    opt["stages"] = s
                yield opt, z


def main(argv=None) -> int:
    args = parse_args(argv)
    import hgemm_rt as hg
    from hgemm_rt.device import Event
    from hgemm_rt.launch import default_swizzle_stride
    from hgemm_rt.testing import reference, rel_error
    from hgemm_rt.timing import L2Flusher

    reg = hg.get_registry()
    dev = hg.get_device()
    info = dev.info
    print(f"{info.name}, sm_{info.cc[0]}{info.cc[1]}, {info.sm_count} SMs, build {reg.manifest.build_hash}",
          flush=True)
    entries = [e for e in reg.kernels()
               if (e.is_baseline and e.dtype == "f16") or (not e.is_baseline and any(fnmatch.fnmatch(e.name, k) for k in args.kernels))]
    flush = L2Flusher()
    rng = np.random.default_rng()
    summary = []
    for n in args.MNK:
        M = N = K = n
        t0 = time.time()
        a = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
        b_nn = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
        b_tn = np.ascontiguousarray(b_nn.T)  # the same product in both layouts
        rows = np.sort(rng.choice(M, size=min(M, args.rows), replace=False))
        ref = reference(a[rows], b_nn, "NN")
        A, B_nn, B_tn = hg.to_device(a), hg.to_device(b_nn), hg.to_device(b_tn)
        C = hg.empty((M, N), "f16")
        print(f"\n== M=N=K={n} (operands ready in {time.time() - t0:.1f} s) ==", flush=True)
        print(f"{'kernel':64s} {'variant':28s} {'ms':>8s} {'TFLOPS':>7s} {'x cuBLAS':>8s} {'rel err':>8s}", flush=True)
        results = []
        for e in entries:
            if not e.is_baseline and e.supports(M, N, K, info.cc) is not None:
                continue
            Bop = B_nn if e.layout == "NN" else B_tn
            for opt, z in combos(e, args):
                launch = dict(opt)
                if z:
                    stride = default_swizzle_stride(N)
                    if not stride or stride % e.spec.tile[1]:
                        continue
                    launch.update(swizzle=True, swizzle_stride=stride)
                label = ",".join(f"{k}={v}" for k, v in opt.items()) + (",swz" if z else "")
                try:
                    e(A, Bop, C, **launch)  # loads the module, sets the smem attribute
                    C.fill_bytes(0xFF)
                    s, t = Event(), Event()
                    s.record()
                    e(A, Bop, C, **launch)
                    t.record()
                    t.synchronize()
                    first = t.elapsed_ms(s)
                    err = rel_error(C.to_numpy()[rows], ref)
                    if not e.is_baseline and 2.0 * M * N * K / (first * 1e-3) / 1e12 < args.skip_slow:
                        print(f"{e.name:64s} {label:28s} skipped: first launch {first:.1f} ms", flush=True)
                        continue
                    times = []
                    for _ in range(args.groups):
                        flush()
                        s, t = Event(), Event()
                        s.record()
                        for _ in range(args.reps):
                            e(A, Bop, C, **launch)
                        t.record()
                        t.synchronize()
                        times.append(t.elapsed_ms(s) / args.reps)
                    ms = statistics.median(times)
                except Exception as exc:  # report and go on: one bad variant must not hide the rest
                    print(f"{e.name:64s} {label:28s} FAILED: {type(exc).__name__}: {exc}", flush=True)
                    continue
                tf = 2.0 * M * N * K / (ms * 1e-3) / 1e12
                results.append((e, label, ms, tf, err))
                print(f"{e.name:64s} {label:28s} {ms:8.3f} {tf:7.1f} {'':>8s} {err:8.1e}", flush=True)
        best_cublas = max((r[3] for r in results if r[0].is_baseline), default=float("nan"))
        print(f"-- best cuBLAS at {n}^3: {best_cublas:.1f} TFLOPS; ranking (ratio to it):")
        ranked = sorted((r for r in results if not r[0].is_baseline), key=lambda r: -r[3])
        for e, label, ms, tf, err in ranked[:12]:
            print(f"   {e.name:64s} {label:28s} {tf:7.1f} {tf / best_cublas:6.2f}x  err {err:.1e}")
        for e, label, ms, tf, err in results:
            if e.is_baseline:
                print(f"   {e.name:64s} {label:28s} {tf:7.1f}  err {err:.1e}")
        if ranked:
            summary.append((n, ranked[0], best_cublas))
        for x in (A, B_nn, B_tn, C):
            x.close()
    flush.close()
    print("\n== summary: best mma-family kernel per shape ==")
    for n, (e, label, ms, tf, err), bc in summary:
        print(f"{n}^3: {e.name} [{label}] {tf:.1f} TFLOPS = {tf / bc:.2f}x best cuBLAS ({bc:.1f}), err {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
