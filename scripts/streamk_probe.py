"""On the GPU machine: every candidate route the cost model ranks near the top for a shape, the stream-K ones at
each grid it is offered, timed (GPU time, L2 flushed: triton.testing.do_bench, median) beside torch.matmul, with
the model's estimate: what the cost model's stream-K terms are checked against. A probe for tuning, not the
product bench (`bench.py --matmul public` is).

    PYTHONPATH=.:$PYTHONPATH python3 scripts/streamk_probe.py 1024x6144x4096 256x4096x4096 [--dtype bf16] [--top 6]
"""
from __future__ import annotations

import argparse

import torch
from triton.testing import do_bench

import hgemm_rt as hg
from hgemm_rt import planner
from hgemm_rt.device import get_device
from hgemm_rt.executor import Execution
from hgemm_rt.problem import Route
from hgemm_rt.roles import gemm_fused_wgmma


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", help="MxNxK, B as nn.Linear holds it (column-major)")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--top", type=int, default=6, help="plain routes timed besides every stream-K one")
    ap.add_argument("--grids", default="", help="comma-separated stream-K grids to time too (at most the SMs)")
    ap.add_argument("--max-splits", type=int, default=gemm_fused_wgmma.SK_MAX_SPLITS,
                    help="pieces a stream-K tile may be cut into (the stream-K role's SK_MAX_SPLITS unless given)")
    args = ap.parse_args()
    gemm_fused_wgmma.SK_MAX_SPLITS = args.max_splits  # (a probe of the range the planner does not offer)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    dev = get_device()
    manifest = hg.get_registry().manifest
    print(torch.cuda.get_device_name(), args.dtype, flush=True)
    for shape in args.shapes:
        M, N, K = map(int, shape.lower().split("x"))
        a = torch.randn(M, K, device="cuda", dtype=tdt)
        w = torch.randn(N, K, device="cuda", dtype=tdt)
        out = torch.empty(M, N, device="cuda", dtype=tdt)
        ref = a.double() @ w.t().double()
        t_torch = do_bench(lambda: torch.matmul(a, w.t()), return_mode="median") * 1e3
        prob = hg.Matmul(a, w.t(), out=out).problem
        ranked = planner.ranked_recipes(prob, manifest, dev.info.cc, dev.info.sm_count)
        chosen = [r for r in ranked[:args.top]] + [r for r in ranked[args.top:] if "stream-K" in planner.describe(r[1])]
        sk = next((s.name for s in manifest.kernels.values() if gemm_fused_wgmma.streamk(s) and s.dtype == args.dtype
                   and s.layout == "TN"), None)
        for g in filter(None, args.grids.split(",")):
            forced = sk and planner.recipe_for(Route(sk, False, (("ctas", int(g)),)), prob, manifest)
            if forced:
                chosen.append((float("nan"), forced))
        print(f"\n{shape}: torch.matmul {t_torch:.1f} us")
        for est, recipe in chosen:
            ex = Execution(recipe, args.dtype, 0, manifest)
            ptrs = (a.data_ptr(), w.data_ptr(), out.data_ptr(), 0)
            packed = ex.pack(ptrs, 1.0, 0.0)
            stream = torch.cuda.current_stream().cuda_stream
            ex.launch(packed, stream)
            torch.cuda.synchronize()
            err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
            t = do_bench(lambda: ex.launch(packed, stream), return_mode="median") * 1e3
            ex.close()
            print(f"  {t:8.1f} us  x torch {t_torch / t:5.2f}  model {est:8.1f}  err {err:.1e}  {planner.describe(recipe)}",
                  flush=True)


if __name__ == "__main__":
    main()
