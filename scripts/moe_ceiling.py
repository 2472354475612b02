"""On the GPU machine: how close a mixture-of-experts GEMM already runs to the tensor cores' peak, in steady state at
the board's power cap, to tell a speed-up target that is out of reach from one that is not. A probe for the
closing notes and the tuning log, not the product bench (`bench.py --matmul moe` is).

For each shape, interleaved rounds (bench.py's steady protocol: warm-up, then rounds in a rotated order, SM clock and
board power sampled through NVML) of hg.grouped_matmul, the bench's loop of one torch.mm per expert, torch._grouped_mm
and the dense GEMM of the same size (torch.matmul and hg.matmul against one expert's weight). Each line gives the
median time, TFLOPS and the share of the tensor peak at the clock sampled during its runs; the last line what a
speed-up of --target over the loop would need at the loop's clock.

    PYTHONPATH=.:$PYTHONPATH python3 scripts/moe_ceiling.py 8x16384x4096x4096 8x65536x2048x7168 [--target 1.2]
    (EXPERTSxTOKENSxNxK[:skewed]; bf16, weights as (E, N, K) nn.Linear stacks)
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

import hgemm_rt as hg
from hgemm_bench.devinfo import ClockSampler
from hgemm_bench.matmul_section import expert_sizes
from hgemm_bench.steady import Contender, Protocol, interleave
from hgemm_rt.device import get_device
from hgemm_rt.timing import L2Flusher

# Dense fp16/bf16 tensor-core flops a clock per SM with fp32 accumulation on sm_90 (H100 SXM: 989.4 TFLOPS at
# 1830 MHz on 132 SMs).
SM90_TENSOR_FLOP_PER_CLK = 4096


def parse(spec: str) -> tuple[int, int, int, int, str]:
    dims, _, routing = spec.partition(":")
    E, T, N, K = map(int, dims.split("x"))
    return E, T, N, K, routing or "uniform"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", nargs="+", help="EXPERTSxTOKENSxNxK[:skewed]")
    ap.add_argument("--target", type=float, default=1.2, help="speed-up over the loop to test (default 1.2)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warm", type=float, default=2.0, help="seconds of warm-up before the rounds")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timed runs per contender")
    args = ap.parse_args()
    sms = get_device(0).info.sm_count
    protocol = Protocol(rounds=args.rounds, warm_s=args.warm, budget_s=args.budget, iters=50)
    flusher, sampler = L2Flusher(0), ClockSampler(0)
    for spec in args.shapes:
        E, T, N, K, routing = parse(spec)
        sizes = expert_sizes(np.random.default_rng(1), T, E, routing)
        ends_host = np.cumsum(sizes)
        bounds = list(zip([0, *ends_host[:-1]], ends_host))
        ends = torch.tensor(ends_host, dtype=torch.int32, device="cuda")
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        wt = (torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5).transpose(-1, -2)
        out, scratch = (torch.empty(T, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))

        def loop() -> None:
            for e, (s, t) in enumerate(bounds):
                if t > s:
                    torch.mm(x[s:t], wt[e], out=scratch[s:t])

        dense = hg.Matmul(x, wt[0], out=scratch)
        runs = {"hg.grouped_matmul": lambda: hg.grouped_matmul(x, wt, out=out, offsets=ends),
                "loop of torch.mm": loop,
                "torch._grouped_mm": lambda: torch._grouped_mm(x, wt, offs=ends),
                "dense torch.matmul": lambda: torch.matmul(x, wt[0], out=scratch),
                "dense hg.matmul": dense}
        flop = 2.0 * T * N * K
        stream = torch.cuda.current_stream().cuda_stream
        contenders = [Contender(run=fn, est_ms=flop / 700e12 * 1e3, stream=stream) for fn in runs.values()]
        interleave(contenders, protocol, flusher, sampler)
        print(f"== {E} experts ({routing}: {sizes.min()}-{sizes.max()} rows), {T} x {N} x {K} bf16; "
              f"{args.rounds} rounds after {args.warm:g} s of warm-up")
        share = {}
        for name, c in zip(runs, contenders):
            if c.error or not c.ms:
                print(f"  {name}: {c.error}")
                continue
            rec = c.record()
            us = statistics.median(c.ms) * 1e3
            tf = flop / (us * 1e-6) / 1e12
            mhz = rec["sm_mhz"]
            peak = mhz * 1e6 * sms * SM90_TENSOR_FLOP_PER_CLK / 1e12 if mhz else None
            share[name] = (tf, peak)
            print(f"  {us:8.1f} us  rounds {' '.join(f'{m * 1e3:.0f}' for m in c.ms)}  {mhz or 0:.0f} MHz "
                  f"{rec['board_w'] or 0:.0f} W  {tf:.0f} TFLOPS" + (f" = {tf / peak:.2f} of the peak at that clock"
                                                                   if peak else "") + f"  {name}")
        tf, peak = share.get("loop of torch.mm", (None, None))
        if tf and peak:
            need = args.target * tf
            print(f"  {args.target:g}x the loop: {need:.0f} TFLOPS = {need / peak:.2f} of the tensor peak at the loop's "
                  f"clock")
        del x, wt, out, scratch


if __name__ == "__main__":
    main()
