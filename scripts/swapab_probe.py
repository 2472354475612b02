"""On the GPU machine: decode GEMMs as serving engines run them (x: M x K, w: N x K as nn.Linear holds it, x @ w.t()),
each timed (GPU time, L2 flushed: triton.testing.do_bench, median) as torch.matmul, as matmul's pick, and on every
token-width tile of the split-K wgmma kernel (128 x 32/16/8) forced through C^T = B^T A^T at splits 1, 2, 4, 8; one
line a shape, in GB/s of the weights (N x K x 2 bytes over the time). What costmodel.HOPPER's
token_tile_dram_bytes_per_s is set from. A probe for tuning, not the product bench.

    PYTHONPATH=.:$PYTHONPATH python3 scripts/swapab_probe.py [--dtype bf16] [--m 1,8,16,32,64]
"""
from __future__ import annotations

import argparse
import math

import torch
from triton.testing import do_bench

import hgemm_rt as hg
from hgemm_rt import costmodel, planner
from hgemm_rt.device import get_device
from hgemm_rt.executor import Execution
from hgemm_rt.problem import Gemm, Route
from hgemm_rt.roles.gemm_strided_wgmma import token_tile

LAYER = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))  # Llama-3-8B: qkv, o, gate_up, down
SPLITS = (1, 2, 4, 8)


def timed(recipe, dtype: str, manifest, x, w, out, ref) -> tuple[float, float]:
    """(microseconds, relative error against ref) of one recipe on the tensors."""
    ex = Execution(recipe, dtype, 0, manifest)
    try:
        packed = ex.pack((x.data_ptr(), w.data_ptr(), out.data_ptr(), 0), 1.0, 0.0)
        stream = torch.cuda.current_stream().cuda_stream
        ex.launch(packed, stream)
        torch.cuda.synchronize()
        err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
        return do_bench(lambda: ex.launch(packed, stream), return_mode="median") * 1e3, err
    finally:
        ex.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=["f16", "bf16"])
    ap.add_argument("--m", default="1,8,16,32,64", help="token counts")
    args = ap.parse_args()
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    dev = get_device()
    manifest = hg.get_registry().manifest
    tiles = sorted((s for s in manifest.kernels.values() if token_tile(s) and s.dtype == args.dtype),
                   key=lambda s: -s.tile[1])
    print(torch.cuda.get_device_name(), args.dtype, "GB/s of the weights; tiles x splits", SPLITS, flush=True)
    ratios = []  # best token tile over a pick that is not one, at one tile's width of tokens (the constant's domain)
    for M in map(int, args.m.split(",")):
        for N, K in LAYER:
            x = torch.randn(M, K, device="cuda", dtype=tdt)
            w = torch.randn(N, K, device="cuda", dtype=tdt)
            out = torch.empty(M, N, device="cuda", dtype=tdt)
            ref = x.double() @ w.t().double()
            gbs = lambda us: N * K * 2 / us / 1e3  # noqa: E731
            t_torch = do_bench(lambda: torch.matmul(x, w.t()), return_mode="median") * 1e3
            prob = hg.Matmul(x, w.t(), out=out).problem
            est, pick = planner.ranked_recipes(prob, manifest, dev.info.cc, dev.info.sm_count)[0]
            t_pick, err = timed(pick, args.dtype, manifest, x, w, out, ref)
            cells, worst, best = [], err, 0.0
            for spec in tiles:
                row = []
                for s in SPLITS:
                    recipe = planner.recipe_for(Route(spec.name, True, (("splits", s),)), prob, manifest)
                    t, e = timed(recipe, args.dtype, manifest, x, w, out, ref)
                    worst = max(worst, e)
                    row.append(f"{gbs(t):5.0f}")
                    if M <= spec.tile[1]:
                        best = max(best, gbs(t))
                cells.append(f"n{spec.tile[1]} " + " ".join(row))
            print(f"{M:3d}x{N:5d}x{K:5d} torch {gbs(t_torch):5.0f} | pick {gbs(t_pick):5.0f} (model {gbs(est):5.0f}) "
                  f"| {' | '.join(cells)} | err {worst:.0e} | {planner.describe(pick)}", flush=True)
            if best and not any(token_tile(manifest.kernels[s.kernel]) for s in pick.steps if isinstance(s, Gemm)):
                ratios.append(best / gbs(t_pick))
    if ratios:  # the model prices those picks (the decode kernels) at stream_bytes_per_s
        r, stream = math.exp(sum(map(math.log, ratios)) / len(ratios)), costmodel.HOPPER.stream_bytes_per_s
        print(f"one-wide token tiles over the picks: geomean {r:.3f} ({len(ratios)} shapes), so "
              f"token_tile_dram_bytes_per_s ~ {r * stream:.3g} (stream_bytes_per_s {stream:.3g} x {r:.3f})", flush=True)

if __name__ == "__main__":
    main()
