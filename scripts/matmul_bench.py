#!/usr/bin/env python3
"""hgemm_rt.matmul against the best cuBLAS variant, measured in the same run on the same buffers.

    python scripts/matmul_bench.py                 # every section below
    python scripts/matmul_bench.py --autotune      # autotune each shape first (prints the candidates)
    python scripts/matmul_bench.py --only ragged,smallm

Sections (issue 7 targets in brackets):
  ragged   4095^3 and 4100^3, fp16 NN                  [>= 2x cuBLAS]
  sweep    1024, 2048, 4096, 8192 cubed, fp16 NN       [geomean >= 0.9x cuBLAS]
  smallm   M = 16 and 128 with N = K = 4096, NN and TN  [>= 0.9x cuBLAS]
  layouts  4096^3 with column-major A and/or B, bf16 and fp32 at 2048^3 (no target)
  overhead per-call cost of a tiny matmul: eager vs replayed from a CUDA graph

Protocol (shared/GPU.md): random N(0,1) data, verify first (sampled rows against float64), CUDA
events, warm-up, an L2 flush before every timed run, the median; cuBLAS = the faster of fp32- and
fp16-accumulate tensor-op GEMM (bf16: fp32; fp32: exact fp32) on the same buffers in the same layout
(hgemm_rt.cublas.matmul). The route matmul chose is printed per row.
Both sides are timed as GPU time (time_fn queue_ahead: the timed launches are queued behind a busy
GPU, so neither side's Python host cost, ~10-30 us, leaks into a 4 us GEMM); the host cost per call
is reported on its own in the overhead section.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hgemm_rt as hg  # noqa: E402
from hgemm_rt import cublas  # noqa: E402
from hgemm_rt.testing import reference, rel_error, upload_ordered  # noqa: E402
from hgemm_rt.timing import L2Flusher, time_fn  # noqa: E402

SECTIONS = ("ragged", "sweep", "smallm", "layouts", "overhead")


def tflops(M, N, K, us):
    return 2.0 * M * N * K / (us * 1e-6) / 1e12


class Case:
    """Operands for one shape: A (M x K) and B (K x N) in the requested orders, C row-major."""

    def __init__(self, M, N, K, rng, dtype="f16", a_order="row", b_order="row"):
        npdt = {"f16": np.float16, "f32": np.float32}.get(dtype)
        self.M, self.N, self.K, self.dtype = M, N, K, dtype
        gen = lambda r, c: rng.standard_normal((r, c), dtype=np.float32)  # noqa: E731
        if dtype == "bf16":
            import torch  # only to make bf16 device arrays (numpy has no bfloat16)

            self.a_host = gen(M, K).astype(np.float32)
            self.b_host = gen(K, N).astype(np.float32)
            ta = torch.from_numpy(self.a_host).to("cuda", torch.bfloat16)
            tb = torch.from_numpy(self.b_host).to("cuda", torch.bfloat16)
            self.a_host = ta.float().cpu().numpy()
            self.b_host = tb.float().cpu().numpy()
            self._keep = (ta, tb)
            self.A, self.B = (ta if a_order == "row" else ta.t().contiguous().t()), \
                (tb if b_order == "row" else tb.t().contiguous().t())
            self.C = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
            return
        self.a_host, self.b_host = gen(M, K).astype(npdt), gen(K, N).astype(npdt)
        # column-major = the transpose of a row-major array, viewed back
        self.A = upload_ordered(self.a_host, a_order)[1]  # column-major: a view that keeps its upload alive
        self.B = upload_ordered(self.b_host, b_order)[1]
        self.C = hg.empty((M, N), dtype)

    def check(self, rows):
        c = self.C.to_numpy() if isinstance(self.C, hg.DeviceArray) else self.C.float().cpu().numpy()
        if not np.isfinite(c).all():
            return float("inf")
        return rel_error(c[rows], reference(self.a_host[rows], self.b_host, "NN"))


def cublas_best(case, flush, iters):
    """(us, label) of the fastest cuBLAS variant on this case's own buffers and layout: fp16 with fp32
    or fp16 accumulation; bf16 with fp32; fp32 in exact fp32 (matmul's fp32 path does not round to
    TF32, so neither does its baseline)."""
    best = (math.inf, "-")
    for acc in {"f16": ("f32", "f16"), "bf16": ("f32",), "f32": ("f32",)}[case.dtype]:
        try:
            layout = cublas.matmul(case.A, case.B, case.C, acc=acc)
            t = time_fn(lambda: cublas.matmul(case.A, case.B, case.C, acc=acc), warmup=3, iters=iters, flush=flush,
                        queue_ahead=True)
        except hg.HgemmError as exc:  # no cuBLAS on this machine
            print(f"  cuBLAS unavailable: {exc}")
            return best
        us = t.median_ms * 1e3
        if us < best[0]:
            best = (us, f"{layout}, acc {acc}")
    return best


def run_case(label, case, flush, iters, args, rng):
    M, N, K = case.M, case.N, case.K
    if args.autotune:
        res = hg.autotune(case.A, case.B, case.C, candidates=args.candidates, iters=max(3, iters // 2))
        print(f"  autotune {label}: " + "; ".join(f"{r['route']} {r['us']:.1f}us (est {r['estimate_us']:.0f})"
                                                 for r in res[:args.candidates]))
    route = hg.explain(case.A, case.B, case.C)
    hg.matmul(case.A, case.B, case.C)
    hg.get_device().synchronize()
    # random rows plus both ends (the ragged last tile rows)
    rows = np.union1d(rng.choice(M, size=min(M, 64), replace=False), [0, M - 1, max(0, M - 130)])
    err = case.check(rows)
    t = time_fn(lambda: hg.matmul(case.A, case.B, case.C), warmup=3, iters=iters, flush=flush, queue_ahead=True)
    ours = t.median_ms * 1e3
    cb, cb_label = cublas_best(case, flush, iters)
    ratio = cb / ours if math.isfinite(cb) else float("nan")
    print(f"{label:<22} {M:>5}x{N:>5}x{K:>5}  matmul {ours:9.1f} us {tflops(M, N, K, ours):7.1f} TFLOPS | "
          f"cuBLAS {cb:9.1f} us {tflops(M, N, K, cb) if math.isfinite(cb) else float('nan'):7.1f} ({cb_label}) | "
          f"{ratio:5.2f}x | err {err:.1e} | {route}")
    if args.breakdown:
        try:
            breakdown(case, flush, iters)
        except Exception as exc:  # diagnostics only
            print(f"  breakdown unavailable: {exc}")
    ok = err < (8e-3 if case.dtype == "bf16" else 1e-3)
    if not ok:
        print(f"  !! {label}: relative error {err:.2e} is over the bound")
    return ratio, ok


def breakdown(case, flush, iters):
    """Time each launch of the plan matmul runs for this case on its own (copies vs GEMM)."""
    import sys as _sys

    mm = _sys.modules["hgemm_rt.matmul"]
    A, B, C = (hg.as_device_array(x) if not isinstance(x, hg.DeviceArray) else x for x in (case.A, case.B, case.C))
    prob = mm.problem_of(A, B, C, "f32", 1.0, 0.0)
    spec = mm.plan_for(prob, C.device)
    plan = mm._plan(spec, prob, C.device, 0)
    ptrs = {"A": A.ptr, "B": B.ptr, "C": C.ptr}
    plan.run(ptrs, 1.0, 0.0, 0)
    parts = []
    for i, step in enumerate(spec.steps):
        t = time_fn(lambda: plan.launch_step(i, ptrs, 1.0, 0.0, 0), warmup=2, iters=iters, flush=flush, queue_ahead=True)
        name = step.kernel if hasattr(step, "kernel") else f"copy {step.src.base}->{step.dst.base}"
        extra = ""
        if not hasattr(step, "kernel"):
            nbytes = (step.src_rows * step.src_cols + step.dst.rows * step.dst.cols) * hg.dispatch.ITEMSIZE[case.dtype]
            extra = f" ({nbytes / (t.median_ms * 1e-3) / 1e12:.2f} TB/s)"
        parts.append(f"{name} {t.median_ms * 1e3:.1f} us{extra}")
    print("  breakdown: " + " | ".join(parts))


def overhead(flush, n=2000):
    """Per-call cost of a 64x64x64 matmul: eager (host-bound: argument checks, plan lookup, launch)
    and the same calls replayed from one CUDA graph."""
    from hgemm_rt._driver import check, driver

    drv = driver()
    rng = np.random.default_rng(0)
    for M, N, K in ((64, 64, 64), (63, 65, 67)):
        A = hg.to_device(rng.standard_normal((M, K)).astype(np.float16))
        B = hg.to_device(rng.standard_normal((K, N)).astype(np.float16))
        C = hg.empty((M, N), "f16")
        with hg.Stream() as s:
            route = hg.explain(A, B, C)
            for _ in range(20):
                hg.matmul(A, B, C, stream=s)
            s.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                hg.matmul(A, B, C, stream=s)
            s.synchronize()
            eager = (time.perf_counter() - t0) / n * 1e6
            # the same call on zero-copy __cuda_array_interface__ views (as torch/CuPy tensors come
            # in): every argument is converted and validated again on each call
            ca, cb_, cc = (_Cai(x) for x in (A, B, C))
            t0 = time.perf_counter()
            for _ in range(n // 4):
                hg.matmul(ca, cb_, cc, stream=s)
            s.synchronize()
            eager_cai = (time.perf_counter() - t0) / (n // 4) * 1e6
            check(drv.cuStreamBeginCapture(s.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL),
                  "cuStreamBeginCapture")
            for _ in range(n):
                hg.matmul(A, B, C, stream=s)
            graph = check(drv.cuStreamEndCapture(s.handle), "cuStreamEndCapture")
            exe = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            check(drv.cuGraphLaunch(exe, s.handle), "cuGraphLaunch")
            s.synchronize()
            t0 = time.perf_counter()
            check(drv.cuGraphLaunch(exe, s.handle), "cuGraphLaunch")
            s.synchronize()
            graphed = (time.perf_counter() - t0) / n * 1e6
            check(drv.cuGraphExecDestroy(exe), "cuGraphExecDestroy")
            check(drv.cuGraphDestroy(graph), "cuGraphDestroy")
            entry = hg.get_kernel("hgemm_cublas_tensor_op_nn")
            try:
                for _ in range(20):
                    entry(A, B, C, acc="f32", stream=s)
                s.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    entry(A, B, C, acc="f32", stream=s)
                s.synchronize()
                cub = f"{(time.perf_counter() - t0) / n * 1e6:.1f} us"
            except Exception:
                cub = "n/a"
        print(f"overhead {M}x{N}x{K}: eager {eager:.1f} us/call (DeviceArrays; {eager_cai:.1f} us on CAI views, "
              f"validated every call), CUDA graph {graphed:.1f} us/call (cuBLAS eager through nvmath: {cub}) | {route}")


class _Cai:
    """A bare __cuda_array_interface__ view of a DeviceArray (what a CuPy/torch tensor looks like)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = arr.__cuda_array_interface__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    ap.add_argument("--autotune", action="store_true", help="autotune every shape before timing it")
    ap.add_argument("--candidates", type=int, default=8, help="routes timed per shape by --autotune")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--breakdown", action="store_true", help="also time each launch of the chosen plan")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    if not hg.gpu_available():
        print("matmul_bench: no CUDA GPU here", file=sys.stderr)
        return 1
    dev = hg.get_device()
    i = dev.info
    print(f"{i.name}, sm_{i.cc[0]}{i.cc[1]}, {i.sm_count} SMs, build {hg.get_registry().manifest.build_hash}"
          f"{', autotuned' if args.autotune else ', heuristic dispatch'}")
    flush = L2Flusher()
    rng = np.random.default_rng()
    ok = True
    if "ragged" in only:
        print("\n== ragged (target >= 2x cuBLAS) ==")
        for S in (4095, 4100):
            r, good = run_case(f"ragged {S}", Case(S, S, S, rng), flush, args.iters, args, rng)
            ok &= good
            print(f"  -> {r:.2f}x cuBLAS {'(met)' if r >= 2 else '(NOT met)'}")
    if "sweep" in only:
        print("\n== default sweep (target geomean >= 0.9x cuBLAS) ==")
        ratios = []
        for S in (1024, 2048, 4096, 8192):
            r, good = run_case(f"sweep {S}", Case(S, S, S, rng), flush, args.iters, args, rng)
            ok &= good
            ratios.append(r)
        g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"  -> geomean {g:.3f}x cuBLAS {'(met)' if g >= 0.9 else '(NOT met)'}")
    if "smallm" in only:
        print("\n== small M, N = K = 4096 (target >= 0.9x cuBLAS) ==")
        for M in (16, 128):
            for b_order, lay in (("row", "NN"), ("col", "TN")):
                case = Case(M, 4096, 4096, rng, b_order=b_order)
                r, good = run_case(f"small-M {M} {lay}", case, flush, args.iters, args, rng)
                ok &= good
                print(f"  -> {r:.2f}x cuBLAS {'(met)' if r >= 0.9 else '(NOT met)'}")
    if "layouts" in only:
        print("\n== layouts and dtypes (informative) ==")
        for a_o, b_o in (("col", "row"), ("col", "col"), ("row", "col")):
            case = Case(4096, 4096, 4096, rng, a_order=a_o, b_order=b_o)
            ok &= run_case(f"A {a_o} B {b_o}", case, flush, args.iters, args, rng)[1]
        for dt in ("bf16", "f32"):
            try:
                case = Case(2048, 2048, 2048, rng, dtype=dt)
            except ImportError:
                print(f"  {dt}: skipped (needs torch for bf16 arrays)")
                continue
            ok &= run_case(f"{dt} 2048", case, flush, args.iters, args, rng)[1]
    if "overhead" in only:
        print("\n== launch overhead ==")
        overhead(flush)
    flush.close()
    print("\nall results verified" if ok else "\nSOME RESULTS FAILED VERIFICATION")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
