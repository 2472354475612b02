#!/usr/bin/env python3
"""Benchmark every kernel in the build against cuBLAS: time, TFLOPS, ratio to the best cuBLAS
variant measured in the same run, and the relative error against a float64 reference.

    python bench.py                       # the default sweep
    python bench.py --MNK 4096            # one square shape
    python bench.py --M 4096 --N 2048 --K 1024 --kernels 'hgemm_wmma*'

Random N(0,1) inputs, CUDA events, warm-up, an L2 flush before every timed run, the median.
"""
from __future__ import annotations

import argparse
import fnmatch
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

DEFAULT_SWEEP = (1024, 2048, 4096, 8192)


@dataclass
class Row:
    name: str
    variant: str
    layout: str
    dtype: str
    M: int
    N: int
    K: int
    ms: float
    tflops: float
    error: float
    baseline: bool
    ratio: float = float("nan")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--M", type=int)
    ap.add_argument("--N", type=int)
    ap.add_argument("--K", type=int)
    ap.add_argument("--MNK", type=int, help="one square shape M = N = K")
    ap.add_argument("--kernels", metavar="PATTERN", help="glob or substring of kernel names (cuBLAS always runs)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20, help="timed runs per kernel (fewer for slow kernels)")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per kernel at most")
    args = ap.parse_args(argv)
    given = [x for x in (args.M, args.N, args.K) if x is not None]
    if args.MNK is not None and given:
        ap.error("use either --MNK or --M/--N/--K")
    if given and len(given) != 3:
        ap.error("--M, --N and --K go together")
    if any(x is not None and x < 1 for x in (args.M, args.N, args.K, args.MNK)):
        ap.error("sizes must be >= 1")
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    return args


def shapes(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    if args.MNK:
        return [(args.MNK,) * 3]
    if args.M:
        return [(args.M, args.N, args.K)]
    return [(s, s, s) for s in DEFAULT_SWEEP]


def matches(name: str, pattern: str | None) -> bool:
    return not pattern or fnmatch.fnmatch(name, pattern) or pattern in name


def sampled_error(C: np.ndarray, a: np.ndarray, b: np.ndarray, layout: str, rows: np.ndarray) -> float:
    """Relative error on sampled rows against float64 (the full reference at 8192^3 would take
    minutes on the CPU); any NaN/Inf anywhere (an unwritten element) gives inf."""
    from hgemm_rt.testing import reference, rel_error

    if not np.isfinite(C).all():
        return float("inf")
    return rel_error(C[rows], reference(a[rows], b, layout))


def bench_shape(M: int, N: int, K: int, entries: list, args: argparse.Namespace, rng: np.random.Generator,
                flusher, progress) -> list[Row]:
    import hgemm_rt as hg
    from hgemm_rt.launch import default_swizzle_stride
    from hgemm_rt.testing import random_operands
    from hgemm_rt.timing import time_fn

    dev = hg.get_device()
    rows_idx = np.sort(rng.choice(M, size=min(M, 128), replace=False))
    inputs: dict[tuple[str, str], tuple] = {}
    out: list[Row] = []
    for entry in entries:
        key = (entry.layout, entry.dtype)
        if key not in inputs:
            a, b = random_operands(M, N, K, entry.layout, entry.dtype, rng)
            inputs[key] = (a, b, hg.to_device(a), hg.to_device(b))
        a, b, A, B = inputs[key]
        variants = [{"acc": v} for v in entry.variants["acc"]] if entry.is_baseline else [{}]
        for opts in variants:
            progress(f"{M}x{N}x{K} {entry.name} {opts or ''}")
            if entry.supports(M, N, K, dev.info.cc) is not None:
                continue
            launch_opts = dict(opts)
            if not entry.is_baseline and entry.spec.grid == "tiles+swizzle":
                stride = default_swizzle_stride(N)
                if stride and stride % entry.spec.tile[1] == 0:
                    launch_opts.update(swizzle=True, swizzle_stride=stride)
            with hg.empty((M, N), entry.out) as C:
                C.fill_bytes(0xFF)
                run = lambda: entry(A, B, C, **launch_opts)  # noqa: E731
                t0 = time.perf_counter()
                run()
                dev.synchronize()
                once = time.perf_counter() - t0
                err = sampled_error(C.to_numpy(), a, b, entry.layout, rows_idx)
                iters = max(3, min(args.iters, int(args.budget / max(once, 1e-6))))
                t = time_fn(run, warmup=min(args.warmup, iters), iters=iters, flush=flusher)
            variant = ",".join(f"{k}={v}" for k, v in launch_opts.items() if k != "swizzle_stride")
            out.append(Row(entry.name, variant, entry.layout, entry.dtype, M, N, K, t.median_ms,
                           t.tflops(M, N, K), err, entry.is_baseline))
    for _, _, A, B in inputs.values():
        A.close()
        B.close()
    best = {}
    for r in out:
        if r.baseline:
            best[r.dtype] = max(best.get(r.dtype, 0.0), r.tflops)
    for r in out:
        if best.get(r.dtype):
            r.ratio = r.tflops / best[r.dtype]
    return out


def format_table(rows: list[Row]) -> str:
    from tabulate import tabulate

    body = [[r.name, r.variant, r.layout, f"{r.M}x{r.N}x{r.K}", f"{r.ms:.4f}", f"{r.tflops:.1f}",
             f"{r.ratio:.2f}x" if not math.isnan(r.ratio) else "-", f"{r.error:.1e}"] for r in rows]
    return tabulate(body, headers=["kernel", "variant", "layout", "MxNxK", "ms", "TFLOPS", "x cuBLAS", "rel err"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import hgemm_rt as hg

    try:
        registry = hg.get_registry()
    except hg.ManifestError as exc:
        print(f"bench.py: {exc}", file=sys.stderr)
        return 2
    entries = [e for e in registry.kernels() if e.is_baseline or matches(e.name, args.kernels)]
    if not hg.gpu_available():
        names = [e.name for e in entries if not e.is_baseline]
        print(f"The build holds {len(names)} kernels: {', '.join(names)}", file=sys.stderr)
        print("bench.py: no CUDA GPU on this machine: nothing can be timed", file=sys.stderr)
        return 1
    dev = hg.get_device()
    i = dev.info
    print(f"{i.name}, sm_{i.cc[0]}{i.cc[1]}, {i.sm_count} SMs, driver {i.driver_version // 1000}."
          f"{i.driver_version % 1000 // 10}, build {registry.manifest.build_hash}")
    from hgemm_rt.timing import L2Flusher

    flusher = L2Flusher()
    rng = np.random.default_rng()
    count = [0]

    def progress(what: str) -> None:
        count[0] += 1
        if sys.stderr.isatty():
            print(f"\r[{count[0]}] {what[:100]:100s}", end="", file=sys.stderr, flush=True)

    all_rows = []
    for M, N, K in shapes(args):
        rows = bench_shape(M, N, K, entries, args, rng, flusher, progress)
        if sys.stderr.isatty():
            print("\r" + " " * 110 + "\r", end="", file=sys.stderr)
        print(f"\n== M={M} N={N} K={K} ==")
        print(format_table(rows))
        all_rows += rows
    flusher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
