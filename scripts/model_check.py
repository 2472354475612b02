#!/usr/bin/env python3
"""A transformers Llama decoder with every nn.Linear running on hgemm_rt.matmul, against the same
model on torch's own GEMMs: logits, greedy tokens and the time of a forward.

    python scripts/model_check.py                              # 4 layers, hidden 2048, batch 2 x 1024 tokens, fp16
    python scripts/model_check.py --layers 8 --dtype bf16 --json model.json

The model is built from a config with random weights (torch.manual_seed(0); no download):
LlamaForCausalLM(hidden 2048, intermediate 5632, 16 heads, 16 KV heads (--kv-heads: fewer, grouped-query attention as
Llama-3 has), vocab 32000), on cuda, eval.
Under torch.inference_mode() the same random input_ids go through the model twice: with torch's
nn.Linear, and with each Linear's forward swapped for hg.matmul(x, weight.t()) (x's batch folds into rows)
(+ bias). Reported: the relative Frobenius error of the logits (float64), the fraction of positions
whose greedy token (argmax over the vocabulary) agrees, and for the disagreements how far apart the
two tokens are in torch's logits (random weights give top-2 gaps of ~0.2, so a ~1e-3 logit error can
flip near-ties). With --calibrate (the default) the model is also run in fp32 by torch, and both
fp16/bf16 runs are scored against it: the noise floor torch itself has.

Timing: 3 warm-up forwards each, then 20 forwards back to back with one torch.cuda.synchronize() at
the end, best of 3 repetitions, torch and hg interleaved. Prints ms per forward and torch/hg.
Decoding (--decode-tokens, default 32; 0 skips it): a greedy generation with the KV cache from the first 16
tokens of --decode-batch rows, as a chat model runs (each step's Linears are M = batch-row GEMMs): ms per
generated token, torch and hg interleaved (best of --reps), and how many leading tokens the two agree on.

Exit code 0 if the logits' relative error < 1e-2 and >= 99.9% of the greedy tokens agree, or every token that
differs is a near-tie (its gap in torch's logits at most --tie-factor times the logits' rms error: a few hundred
positions make one such flip 0.2%), else 1.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hgemm_rt as hg  # noqa: E402

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=None, help="default: 2.75 x hidden (5632 for 2048)")
    p.add_argument("--heads", type=int, default=None, help="default: hidden / 128 (16 for 2048)")
    p.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads (grouped-query attention, e.g. 8 for Llama-3 8B); default: --heads")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20, help="forwards per timed block")
    p.add_argument("--reps", type=int, default=3, help="timed blocks per side (best is reported)")
    p.add_argument("--max-rel", type=float, default=1e-2, help="bound on the logits' relative error")
    p.add_argument("--min-agree", type=float, default=0.999, help="fraction of greedy tokens that must agree")
    p.add_argument("--tie-factor", type=float, default=8.0,
                   help="a differing token passes if torch's gap between the two is within this many rms logit errors")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="skip the fp32 torch reference run")
    p.add_argument("--decode-tokens", type=int, default=32, help="greedy tokens to time (0: no decoding run)")
    p.add_argument("--decode-batch", type=int, default=1, help="sequences decoded together (GEMM rows a step)")
    p.add_argument("--json", metavar="FILE", help="write the numbers to FILE")
    args = p.parse_args(argv)
    args.heads = args.heads or max(1, args.hidden // 128)
    args.kv_heads = args.heads if args.kv_heads is None else args.kv_heads
    if args.kv_heads < 1 or args.heads % args.kv_heads:
        p.error(f"--kv-heads {args.kv_heads} must divide --heads {args.heads}")
    return args


# ---------------------------------------------------------------------------------------------------
# nn.Linear on hg.matmul
# ---------------------------------------------------------------------------------------------------

def _hg_linear_forward(mod):
    def forward(x):
        out = hg.matmul(x, mod.weight.t())  # (..., in) folds into rows; torch's current stream; a new tensor
        if mod.bias is not None:
            out += mod.bias
        return out

    return forward


@contextlib.contextmanager
def hg_linears(model):
    """Every nn.Linear of `model` runs on hg.matmul inside the block; the forwards the modules had
    before (the class's, or an instance attribute) are restored afterwards. Yields the count."""
    import torch

    _missing = object()
    swapped = []
    try:
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear):
                swapped.append((mod, mod.__dict__.get("forward", _missing)))
                mod.forward = _hg_linear_forward(mod)
        yield len(swapped)
    finally:
        for mod, before in swapped:
            if before is _missing:
                del mod.forward
            else:
                mod.forward = before


# ---------------------------------------------------------------------------------------------------
# the model and the comparison
# ---------------------------------------------------------------------------------------------------

def build_model(args, torch):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate or int(round(args.hidden * 2.75)),
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                         max_position_embeddings=max(2048, args.seq))
    torch.manual_seed(args.seed)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    return model.to(dtype=getattr(torch, DTYPES[args.dtype])).eval(), config


def forward(model, ids):
    return model(input_ids=ids, use_cache=False).logits


def compare(ref, got, torch):
    """Relative Frobenius error (float64), greedy-token agreement, and for the disagreements the gap
    in `ref` between ref's token and got's token."""
    r64 = ref.double()
    rel = ((got.double() - r64).norm() / r64.norm()).item()
    err_rms = (got.float() - ref.float()).pow(2).mean().sqrt().item()
    del r64
    tr, tg = ref.argmax(-1), got.argmax(-1)
    same = tr == tg
    agree = same.float().mean().item()
    ref32 = ref.float()
    gaps = (ref32.gather(-1, tr.unsqueeze(-1)) - ref32.gather(-1, tg.unsqueeze(-1))).squeeze(-1)[~same]
    return {
        "rel_error": rel,
        "logit_error_rms": err_rms,
        "agree": agree,
        "positions": same.numel(),
        "disagree": int((~same).sum().item()),
        "max_gap_of_disagreements": float(gaps.max().item()) if gaps.numel() else 0.0,
        "median_gap_of_disagreements": float(gaps.median().item()) if gaps.numel() else 0.0,
    }


def greedy(model, prompt, steps, torch):
    """`steps` greedy tokens after `prompt` with the KV cache: (batch, steps) token ids."""
    out = model(input_ids=prompt, use_cache=True)
    tokens = [out.logits[:, -1].argmax(-1, keepdim=True)]
    for _ in range(steps - 1):
        out = model(input_ids=tokens[-1], past_key_values=out.past_key_values, use_cache=True)
        tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(tokens, 1)


def time_decoding(model, prompt, steps, reps, torch):
    """ms per generated token (best of `reps` generations), torch and hg interleaved, and both token sequences."""
    times_t, times_h = [], []
    for _ in range(reps + 1):  # the first of each: warm-up
        times_t.append(time_forwards(lambda: greedy(model, prompt, steps, torch), 1, torch) / steps)
        with hg_linears(model):
            times_h.append(time_forwards(lambda: greedy(model, prompt, steps, torch), 1, torch) / steps)
    seq_t = greedy(model, prompt, steps, torch)
    with hg_linears(model):
        seq_h = greedy(model, prompt, steps, torch)
    return min(times_t[1:]), min(times_h[1:]), seq_t, seq_h


def time_forwards(fn, iters, torch):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / iters


def linear_shapes(model, torch):
    """The distinct (in_features, out_features) of the model's Linears, with one (name, module) each."""
    seen = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            seen.setdefault((mod.in_features, mod.out_features), (name, mod))
    return seen


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    dtype = getattr(torch, DTYPES[args.dtype])
    dev_name = torch.cuda.get_device_name(0)
    model, config = build_model(args, torch)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"device: {dev_name}   torch {torch.__version__}")
    print(f"model: Llama {config.num_hidden_layers} layers, hidden {config.hidden_size}, intermediate "
          f"{config.intermediate_size}, {config.num_attention_heads} heads ({config.num_key_value_heads} key/value), "
          f"vocab {config.vocab_size}, "
          f"{nparams / 1e6:.0f}M params, {args.dtype}; input {args.batch} x {args.seq} tokens")
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 1)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda", generator=gen)
    rows = args.batch * args.seq
    result = {"device": dev_name, "torch": torch.__version__, "dtype": args.dtype, "batch": args.batch,
              "seq": args.seq, "layers": config.num_hidden_layers, "hidden": config.hidden_size,
              "intermediate": config.intermediate_size, "heads": config.num_attention_heads,
              "kv_heads": config.num_key_value_heads, "vocab": config.vocab_size, "explain": {}}

    # the same weights in fp32, for the noise floor (converted outside inference mode)
    model32 = copy.deepcopy(model).float() if args.calibrate and dtype != torch.float32 else None

    with torch.inference_mode():
        for (fin, fout), (name, mod) in linear_shapes(model, torch).items():
            x = torch.empty((rows, fin), device="cuda", dtype=dtype)
            route = hg.explain(x, mod.weight.t())
            result["explain"][f"{rows}x{fout}x{fin}"] = route
            print(f"  hg.explain {name.split('.')[-1]:<10} {rows} x {fout} x {fin}: {route}")
            del x

        # --- correctness --------------------------------------------------------------------------
        logits_t = forward(model, ids)
        with hg_linears(model) as n:
            logits_h = forward(model, ids)
        torch.cuda.synchronize()
        print(f"swapped {n} nn.Linear forwards for hg.matmul")
        cmp = compare(logits_t, logits_h, torch)
        result.update({"linears": n, **cmp})
        print(f"logits: rel error {cmp['rel_error']:.3e} (bound {args.max_rel:g}), rms error "
              f"{cmp['logit_error_rms']:.2e}; greedy tokens agree at {cmp['agree'] * 100:.3f}% of "
              f"{cmp['positions']} positions ({cmp['disagree']} differ; their gap in torch's logits: max "
              f"{cmp['max_gap_of_disagreements']:.2e}, median {cmp['median_gap_of_disagreements']:.2e})")

        if model32 is not None:
            logits_32 = forward(model32, ids)
            del model32
            cal_t, cal_h = compare(logits_32, logits_t, torch), compare(logits_32, logits_h, torch)
            del logits_32
            torch.cuda.empty_cache()
            result["vs_fp32"] = {"torch": cal_t, "hg": cal_h}
            for label, c in (("torch", cal_t), ("hg", cal_h)):
                print(f"  vs torch fp32: {label:<5} rel error {c['rel_error']:.3e}, tokens agree "
                      f"{c['agree'] * 100:.3f}% ({c['disagree']} differ)")
        del logits_t, logits_h
        torch.cuda.empty_cache()

        # --- timing -------------------------------------------------------------------------------
        def run_torch():
            forward(model, ids)

        def run_hg():
            with hg_linears(model):
                forward(model, ids)

        for _ in range(args.warmup):
            run_torch()
            run_hg()
        times_t, times_h = [], []
        for _ in range(args.reps):
            times_t.append(time_forwards(run_torch, args.iters, torch))
            with hg_linears(model):
                times_h.append(time_forwards(lambda: forward(model, ids), args.iters, torch))
    ms_t, ms_h = min(times_t), min(times_h)
    ratio = ms_t / ms_h
    result.update({"ms_torch": ms_t, "ms_hg": ms_h, "torch_over_hg": ratio, "times_torch": times_t,
                   "times_hg": times_h})
    print(f"forward ({args.batch} x {args.seq} tokens), best of {args.reps} x {args.iters}: torch {ms_t:.2f} ms, "
          f"hg {ms_h:.2f} ms, torch/hg {ratio:.3f}x")

    if args.decode_tokens > 0:
        with torch.inference_mode():
            prompt = ids[:args.decode_batch, :16] if args.decode_batch <= args.batch else \
                torch.randint(0, config.vocab_size, (args.decode_batch, 16), device="cuda", generator=gen)
            tok_t, tok_h, seq_t, seq_h = time_decoding(model, prompt, args.decode_tokens, args.reps, torch)
        differ = (seq_t != seq_h).any(0).nonzero()
        lead = int(differ[0].item()) if differ.numel() else args.decode_tokens
        result["decode"] = {"batch": args.decode_batch, "tokens": args.decode_tokens, "ms_per_token_torch": tok_t,
                            "ms_per_token_hg": tok_h, "torch_over_hg": tok_t / tok_h, "leading_tokens_agree": lead}
        print(f"decoding ({args.decode_batch} x {args.decode_tokens} greedy tokens after 16, KV cache), best of "
              f"{args.reps}: torch {tok_t:.3f} ms/token, hg {tok_h:.3f} ms/token, torch/hg {tok_t / tok_h:.3f}x; "
              f"the first {lead} of {args.decode_tokens} tokens agree")

    near_ties = cmp["max_gap_of_disagreements"] <= args.tie_factor * cmp["logit_error_rms"]
    ok = math.isfinite(cmp["rel_error"]) and cmp["rel_error"] < args.max_rel and \
        (cmp["agree"] >= args.min_agree or near_ties)
    result["passed"] = ok
    print("PASS" if ok else f"FAIL: need rel error < {args.max_rel:g} and >= {args.min_agree * 100:g}% tokens agreeing "
          f"(or only near-ties differing: gaps <= {args.tie_factor:g} x the rms logit error)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
