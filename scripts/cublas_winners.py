"""On the GPU machine: which cuBLAS kernel torch.matmul runs for each row of some `bench.py --matmul` sections, its
GPU time beside hg.matmul's on the same tensors, and hg.matmul's plan: what hgemm lacks where it loses.

    python3 scripts/cublas_winners.py models,decode,batched,smallm --json docs/dev/cublas_winners_h200.json

torch.profiler names the kernel (cuBLAS's nvjet names encode the tile, stages, cluster, schedule and split-K:
hgemm_bench.kernel_names.parse_nvjet); GPU time is triton's do_bench (L2 flushed), the better of two runs each. Needs torch and triton.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sections", help="comma-separated bench sections (hgemm_bench.matmul_table.SECTIONS)")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    import torch
    from triton.testing import do_bench

    import hgemm_rt as hg
    from hgemm_bench.kernel_names import kernel_record
    from hgemm_bench.matmul_table import SECTIONS
    from scripts.ab_runtime import operand
    names = args.sections.split(",")
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        ap.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    rows = []
    for name in names:
        for i, s in enumerate(SECTIONS[name].shapes):
            if s.routing or s.epilogue:
                continue  # (grouped and fused rows have no single torch.matmul to name)
            gen = torch.Generator(device="cuda").manual_seed(i)
            a = operand(torch, gen, s.M, s.K, s.a_order, s.dtype, s.batch)
            b = operand(torch, gen, s.K, s.N, s.b_order, s.dtype, s.batch)
            out = torch.empty(((s.batch,) if s.batch > 1 else ()) + (s.M, s.N), dtype=a.dtype, device="cuda")

            def by_torch():
                return torch.matmul(a, b, out=out)

            def by_hgemm():
                return hg.matmul(a, b, out=out)
            by_torch(), by_hgemm()
            kernels = kernel_record(by_torch)
            t_torch = min(1e3 * do_bench(by_torch, warmup=10, rep=30) for _ in range(2))
            t_hgemm = min(1e3 * do_bench(by_hgemm, warmup=10, rep=30) for _ in range(2))
            main_kernel = kernels["kernel"]
            r = {"section": name, "shape": s.cell, "torch_us": t_torch, "hgemm_us": t_hgemm,
                 "hgemm_over_torch": t_torch / t_hgemm, "torch_kernels": kernels.get("kernels"),
                 "torch_kernel": main_kernel, "nvjet": kernels.get("nvjet"), "hgemm_plan": hg.explain(a, b, out=out)}
            rows.append(r)
            print(f"{name:8s} {s.cell:45s} torch {t_torch:8.1f} hg {t_hgemm:8.1f} x{r['hgemm_over_torch']:.3f} "
                  f"{(main_kernel or '-')[:70]}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                     "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
