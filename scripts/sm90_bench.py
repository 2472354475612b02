#!/usr/bin/env python3
"""Hopper kernels against the best cuBLAS variant, interleaved, for the sm_90a tuning rounds.

    PYTHONPATH=. python3 scripts/sm90_bench.py --layout TN --sizes 2048 4096 8192 16384 --reps 5
    PYTHONPATH=. python3 scripts/sm90_bench.py --entries hgemm_sm90_tn hgemm_sm90_wgmma_tma_ws_persistent_tn:stages=4

For each square size: every entry (a kernel variant, or cuBLAS with each accumulation) is launched
once into NaN-filled C and checked against a float64 reference of sampled rows (error bound: four
times cuBLAS's on the same rows, hgemm_rt.testing.error_bound); after `--warm-s` seconds of untimed
launches (the board reaches its power-capped steady state), `--reps` rounds time every entry in
turn, each round in a rotated order, so slow drifts of the clock (power, temperature) fall on all
entries alike. A round's ratio is the entry's TFLOPS over the best cuBLAS variant's in the same
round; the table shows the median TFLOPS and the median ratio over the rounds, with the spread.
Timing: hgemm_rt.timing.time_fn (CUDA events, L2 flushed before every run, median of the runs).
Where NVML is there, the mean SM clock and board power during each entry's timing are shown too:
they tell a power-limited clock from a stalled kernel.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hgemm_rt as hg  # noqa: E402
from hgemm_bench.measure import ShapeInputs, all_finite, download, timed_once, values  # noqa: E402
from hgemm_rt.testing import error_bound, rel_error  # noqa: E402
from hgemm_rt.timing import L2Flusher, time_fn  # noqa: E402

CUBLAS = {"TN": "hgemm_cublas_tensor_op_tn", "NN": "hgemm_cublas_tensor_op_nn"}
# What the tuning rounds compare (the launch default of each kernel unless a variant is named).
DEFAULT_ENTRIES = {
    "TN": [
        "hgemm_sm90_wgmma_tma_ws_persistent_tn:stages=3",
        "hgemm_sm90_wgmma_tma_ws_persistent_tn:stages=4",
        "hgemm_sm90_wgmma_tma_ws_persistent_cluster2_tn:stages=3",
        "hgemm_sm90_wgmma_tma_ws_persistent_cluster2_tn:stages=4",
    ],
    "NN": [
        "hgemm_sm90_wgmma_tma_ws_persistent_nn:stages=3",
        "hgemm_sm90_wgmma_tma_ws_persistent_nn:stages=4",
        "hgemm_sm90_wgmma_tma_ws_persistent_cluster2_nn:stages=4",
    ],
}
THROTTLE = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
            0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}


class Nvml:
    """SM clock (MHz), board power (W) and clock-throttle reasons, sampled in a thread while an
    entry is timed. Absent NVML (no driver library), every reading is None."""

    def __init__(self, index: int = 0):
        self.lib = self.handle = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            handle = ctypes.c_void_p()
            if lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                self.lib, self.handle = lib, handle
        except OSError:
            pass

    def sample(self) -> tuple[int, float, int] | None:
        if self.lib is None:
            return None
        clk, mw, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        try:
            if self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(clk)):  # 1 = NVML_CLOCK_SM
                return None
            self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw))
            self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(reasons))
        except AttributeError:  # an NVML without one of these entry points
            return None
        return clk.value, mw.value / 1e3, reasons.value

    def during(self, fn):
        """Run fn() while sampling every 5 ms; returns (fn's result, mean MHz, mean W, reasons)."""
        samples, stop = [], threading.Event()

        def loop():
            while not stop.is_set():
                s = self.sample()
                if s is not None:
                    samples.append(s)
                time.sleep(0.005)

        th = threading.Thread(target=loop, daemon=True)
        th.start()
        try:
            out = fn()
        finally:
            stop.set()
            th.join()
        if not samples:
            return out, None, None, 0
        reasons = 0
        for s in samples:
            reasons |= s[2]
        return out, statistics.mean(s[0] for s in samples), statistics.mean(s[1] for s in samples), reasons


def parse_entry(text: str) -> tuple[str, dict]:
    """'name' or 'name:axis=value,axis=value' (integers where they parse)."""
    name, _, rest = text.partition(":")
    opts = {}
    for part in filter(None, rest.split(",")):
        k, _, v = part.partition("=")
        opts[k] = int(v) if v.lstrip("-").isdigit() else v
    return name, opts


def label(name: str, opts: dict) -> str:
    short = name.replace("hgemm_sm90_wgmma_tma_ws_", "").replace("hgemm_cublas_tensor_op_", "cublas_")
    return short + "".join(f" {k}={v}" for k, v in opts.items())


def run_size(n: int, layout: str, entries: list[tuple[str, dict]], args, rng, nvml: Nvml, flusher: L2Flusher,
             cc) -> list[dict]:
    inp = ShapeInputs(n, n, n, rng, args.check_rows)
    rows: list[dict] = []
    try:
        A, B = inp.operands(layout, "f16")
        C = inp.output("f16")
        ref = inp.reference("f16")
        cublas_err = {}
        # ---- check every entry once, and size its timing from a warm launch ----
        for name, opts in entries:
            e = hg.get_kernel(name)
            r = {"entry": label(name, opts), "name": name, "opts": opts, "n": n, "baseline": e.is_baseline,
                 "acc": e.acc_for(opts)}
            rows.append(r)
            reason = e.supports(n, n, n, cc)
            if reason:
                r["skip"] = reason
                continue
            run = (lambda e=e, opts=opts: e(A, B, C, **opts))
            C.fill_bytes(0xFF)
            try:
                cfg = run()
                first = timed_once(run)
            except Exception as exc:  # noqa: BLE001 - a kernel that fails is reported, the run goes on
                r["skip"] = f"{type(exc).__name__}: {exc}"
                continue
            host = download(C, inp.host_output("f16"))
            err = rel_error(values(host[inp.rows], "f16"), ref) if all_finite(host, "f16") else float("inf")
            r["err"] = err
            r["grid"] = list(cfg.grid) if cfg is not None else None
            if e.is_baseline:
                cublas_err[r["acc"]] = err
            r["run"] = run
            r["est_ms"] = min(first, timed_once(run))
        for r in rows:
            if "err" in r:
                r["bound"] = error_bound("f16", r["acc"], "f16", n, cublas_err.get(r["acc"]))
                r["ok"] = bool(r["err"] <= r["bound"])
        live = [r for r in rows if "run" in r]
        # ---- warm-up: from 4096^3 up the board runs at its power cap; the first entry timed on a
        # cool, idle GPU would get a higher clock than the rest, so bring it to its steady state ----
        if live and args.warm_s > 0:
            t_end = time.perf_counter() + args.warm_s
            while time.perf_counter() < t_end:
                for r in live:
                    r["run"]()
                hg.get_device().synchronize()
        # ---- interleaved timing rounds ----
        for rep in range(args.reps):
            order = live[rep % len(live):] + live[:rep % len(live)]
            for r in order:
                iters = int(min(args.max_iters, max(args.min_iters, args.budget_ms / max(r["est_ms"], 1e-3))))
                t, mhz, watts, reasons = nvml.during(
                    lambda r=r, iters=iters: time_fn(r["run"], warmup=3, iters=iters, flush=flusher,
                                                     queue_ahead=r["est_ms"] < 5.0))
                r.setdefault("tflops", []).append(t.tflops(n, n, n))
                r.setdefault("mhz", []).append(mhz)
                r.setdefault("watts", []).append(watts)
                r["reasons"] = r.get("reasons", 0) | reasons
            best = max((r["tflops"][-1] for r in live if r["baseline"] and r.get("ok")), default=None)
            for r in live:
                r.setdefault("ratio", []).append(r["tflops"][-1] / best if best else None)
    finally:
        inp.close()
    for r in rows:
        r.pop("run", None)
    return rows


def fmt(rows: list[dict], n: int, layout: str) -> str:
    out = [f"\n{layout} {n}x{n}x{n}  (median over rounds; ratio = TFLOPS / best cuBLAS of the same round)",
           f"{'entry':<52} {'TFLOPS':>7} {'min-max':>13} {'x cuBLAS':>8} {'spread':>13} {'MHz':>5} {'W':>4} "
           f"{'rel err':>8} {'grid':>5}"]
    for r in rows:
        if "skip" in r:
            out.append(f"{r['entry']:<52} skipped: {r['skip'][:90]}")
            continue
        if "tflops" not in r:
            continue
        tf = r["tflops"]
        ratios = [x for x in r["ratio"] if x is not None]
        mhz = [x for x in r["mhz"] if x is not None]
        watts = [x for x in r["watts"] if x is not None]
        flag = "" if r.get("ok") else " ERROR>bound"
        out.append(
            f"{r['entry']:<52} {statistics.median(tf):7.1f} {min(tf):6.1f}-{max(tf):<6.1f} "
            f"{(statistics.median(ratios) if ratios else float('nan')):8.3f} "
            f"{(min(ratios) if ratios else float('nan')):6.3f}-{(max(ratios) if ratios else float('nan')):<6.3f} "
            f"{(statistics.median(mhz) if mhz else 0):5.0f} {(statistics.median(watts) if watts else 0):4.0f} "
            f"{r['err']:8.2e} {r['grid'][0] if r.get('grid') else '':>5}{flag}")
    reasons = 0
    for r in rows:
        reasons |= r.get("reasons", 0)
    if reasons:
        out.append("clock throttle reasons seen: " + ", ".join(v for k, v in THROTTLE.items() if reasons & k))
    return "\n".join(out)


def profile(args) -> int:
    """Launches for a profiler: nothing else runs on the GPU (no fill, no flush, no reference)."""
    name, opts = parse_entry(args.profile)
    e = hg.get_kernel(name)
    n = args.sizes[0]
    inp = ShapeInputs(n, n, n, np.random.default_rng(args.seed), 1)
    try:
        A, B = inp.operands(e.layout, "f16")
        C = inp.output("f16")
        for _ in range(args.launches):
            e(A, B, C, **opts)
        hg.get_device().synchronize()
    finally:
        inp.close()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", choices=("TN", "NN"), default="TN")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--entries", nargs="+", help="name[:axis=value,...] (default: this layout's tuning set)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--budget-ms", type=float, default=80.0, help="GPU time per entry per round")
    ap.add_argument("--warm-s", type=float, default=1.5, help="seconds of untimed launches before the rounds")
    ap.add_argument("--min-iters", type=int, default=8)
    ap.add_argument("--max-iters", type=int, default=100)
    ap.add_argument("--check-rows", type=int, default=96, help="rows checked against float64 (0 = all)")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--profile", metavar="ENTRY", help="only launch ENTRY --launches times at the first size "
                    "(random inputs, no checks, no timing), for `ncu --launch-skip 2 --launch-count 1`")
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args(argv)
    if args.profile:
        return profile(args)

    entries = [parse_entry(t) for t in (args.entries or DEFAULT_ENTRIES[args.layout])]
    cublas = CUBLAS[args.layout]
    entries += [(cublas, {"acc": "f32"}), (cublas, {"acc": "f16"})]
    dev = hg.get_device()
    cc = dev.info.cc
    nvml = Nvml()
    flusher = L2Flusher()
    rng = np.random.default_rng(args.seed)
    print(f"{dev.info.name}, {dev.info.sm_count} SMs; NVML {'on' if nvml.lib else 'off'}; "
          f"{args.reps} interleaved rounds", flush=True)
    results = []
    summary = []
    for n in args.sizes:
        t0 = time.perf_counter()
        rows = run_size(n, args.layout, entries, args, rng, nvml, flusher, cc)
        print(fmt(rows, n, args.layout) + f"\n({time.perf_counter() - t0:.1f} s)", flush=True)
        results += rows
        kern = [r for r in rows if not r["baseline"] and r.get("ok") and r.get("tflops")]
        if kern:
            best = max(kern, key=lambda r: statistics.median(r["tflops"]))
            ratios = [x for x in best["ratio"] if x is not None]
            cub = max((statistics.median(r["tflops"]) for r in rows if r["baseline"] and r.get("tflops")), default=0)
            summary.append(f"{args.layout} {n:>5}^3: best {best['entry']:<48} {statistics.median(best['tflops']):6.1f} "
                           f"TFLOPS, best cuBLAS {cub:6.1f}, ratio {statistics.median(ratios):.3f}")
    print("\nsummary\n" + "\n".join(summary))
    bad = [r["entry"] + f" @ {r['n']}" for r in results if "err" in r and not r.get("ok")]
    if bad:
        print("OVER THE ERROR BOUND: " + "; ".join(bad))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
