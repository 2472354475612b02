"""On the GPU machine: the host cost of the calls a model makes, as the bench's host section measures them
(`bench.py --matmul host`, LAYER_CALLS): wall microseconds per call, a new activation every call (a pool of
LAYER_POOL preallocated x cycled), ours and torch's repetitions taken in turn (matmul_section.interleaved_wall_us:
n calls back to back, one synchronisation, the best of WALL_REPEATS). A probe for the host path, not the bench.

    PYTHONPATH=.:$PYTHONPATH python3 scripts/host_probe.py [64x64x64 16x4096x4096 ...] [--dtype f16] [--json out.json]

Rows: the bench's LAYER_CALLS, then x of three dimensions (a batch of sequences, as a model passes them), and the
floor of the requires-grad path: a torch.autograd.Function whose forward only allocates the result, through
Function.apply and through its C part alone (as hgemm_rt.torch calls its Functions), beside that allocation alone. Each of our results is checked against torch's on one call first.
"""
from __future__ import annotations

import argparse
import json

import torch

import hgemm_rt as hg
from hgemm_bench.matmul_section import interleaved_wall_us, layer_call, layer_names
from hgemm_bench.matmul_table import LAYER_CALLS, LAYER_POOL

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


class _AllocOnly(torch.autograd.Function):
    """The cheapest forward an autograd.Function can have here: the result allocated, nothing computed."""

    @staticmethod
    def forward(ctx, x, w):
        return x.new_empty((x.shape[0], w.shape[0]))

    @staticmethod
    def backward(ctx, grad):
        return None, None


# (ours, theirs, w requires grad, x of three dimensions) beyond the bench's LAYER_CALLS
EXTRA_CALLS = (
    ("ht.linear(x, w)", "F.linear(x, w)", False, True),
    ("ht.linear(x, w, bias)", "F.linear(x, w, bias)", False, True),
    ("ht.linear(x, w)", "F.linear(x, w)", True, True),
    ("alloc_only(x, w)", "x.new_empty((x.shape[0], w.shape[0]))", True, False),
    ("alloc_only_c(x, w)", "x.new_empty((x.shape[0], w.shape[0]))", True, False),
)


def probe(M: int, N: int, K: int, dtype: torch.dtype) -> list[dict]:
    names = layer_names()[0]
    # (alloc_only_c: the C part of Function.apply alone, as hgemm_rt.torch calls its Functions)
    names = {**names, "alloc_only": _AllocOnly.apply,
             "alloc_only_c": super(torch.autograd.Function, _AllocOnly).apply}
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool2 = [torch.randn(M, K, device="cuda", dtype=dtype, generator=gen) for _ in range(LAYER_POOL)]
    pool3 = [x.view(2, M // 2, K) if M % 2 == 0 else x.view(1, M, K) for x in pool2]
    w0 = torch.randn(N, K, device="cuda", dtype=dtype, generator=gen) / K ** 0.5
    bias = torch.randn(N, device="cuda", dtype=dtype, generator=gen)
    sync = hg.get_device().synchronize
    calls = [(lc.ours, lc.theirs, lc.weight_grad, False) for lc in LAYER_CALLS] + list(EXTRA_CALLS)
    rows = []
    for ours, theirs, weight_grad, three_d in calls:
        pool = pool3 if three_d else pool2
        w = w0.detach().requires_grad_(weight_grad)  # (grad mode on, as the bench runs)
        got, want = (layer_call(e, names, pool[:1], w, bias)() for e in (ours, theirs))
        err = None
        if not ours.startswith("alloc_only"):
            got, want = got.detach().float(), want.detach().float()
            err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        fns = [layer_call(e, names, pool, w, bias) for e in (ours, theirs)]
        us, theirs_us = interleaved_wall_us(fns, sync)
        rows.append({"M": M, "N": N, "K": K, "call": ours, "reference": theirs, "w_requires_grad": weight_grad,
                     "x_dims": 3 if three_d else 2, "us": us, "reference_us": theirs_us, "over_us": us - theirs_us,
                     "rel_diff_vs_torch": err})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", default=["64x64x64", "16x4096x4096"], help="MxNxK")
    parser.add_argument("--dtype", default="f16", choices=sorted(DTYPES))
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = []
    for spec in args.shapes:
        M, N, K = (int(v) for v in spec.lower().split("x"))
        rows += probe(M, N, K, DTYPES[args.dtype])
    print(f"{'shape':>14} {'call':<42} {'us':>7} {'torch us':>9} {'over':>7}  reference")
    for r in rows:
        call = r["call"] + (", w grad" if r["w_requires_grad"] else "") + (", x 3-D" if r["x_dims"] == 3 else "")
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        print(f"{shape:>14} {call:<42} {r['us']:7.2f} {r['reference_us']:9.2f} "
              f"{r['over_us']:+7.2f}  {r['reference']}  (rel diff {r['rel_diff_vs_torch']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
