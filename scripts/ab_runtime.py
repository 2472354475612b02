"""On the GPU machine: two builds of the runtime side by side in one process, on the same buffers, over the
shapes of every `bench.py --matmul` section: does a change of the runtime change what it runs or how fast?

    python3 scripts/ab_runtime.py --before DIR [--before-artifacts DIR] [--sections models,decode] [--json F]
                                  [--renamed util_=matmul_]

DIR holds the other build as a package named `hgemm_rt_before` (make it with `--make-before REV DIR` on a
checkout: `git archive REV hgemm_rt`, the package renamed and its absolute imports rewritten). Where the two
runtimes read different manifest schemas, give the before one its own build with --before-artifacts: build REV's
kernels in a worktree of REV (`python build_kernels.py --arch 90`) and carry its manifest.json, sm_90/ and sm_90a/
compressed (`tar cJf`; two builds' cubins exceed what a device call carries), unpacked there before the run. Each row:
both runtimes' plans (`explain`), whether their results are bitwise equal, and GPU time (triton's do_bench,
L2 flushed) in ABBA order, `rounds` times, medians; then per section the geomean of after / before and the
slowest row. Where kernels were renamed between the two, --renamed OLD=NEW maps the before plans' kernel-name
prefix before the plans are compared. The host section times 64^3 calls back to back (wall time, out given, torch tensors).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import io
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_before(rev: str, dest: Path) -> None:
    """`hgemm_rt` of git revision `rev` as the package `hgemm_rt_before` under `dest`."""
    blob = subprocess.run(["git", "archive", rev, "hgemm_rt"], cwd=REPO, check=True, capture_output=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    pkg = dest / "hgemm_rt_before"
    if pkg.exists():
        raise SystemExit(f"{pkg} exists already")
    (dest / "hgemm_rt").rename(pkg)
    for path in pkg.rglob("*.py"):
        text = path.read_text()
        path.write_text(text.replace("from hgemm_rt.", "from hgemm_rt_before.").replace("import hgemm_rt.", "import hgemm_rt_before."))


def operand(torch, gen, rows, cols, order, dtype, batch=1):
    """A rows x cols N(0, 1) CUDA tensor drawn on the GPU (batch > 1: 3-D); column-major as the transpose."""
    shape = (rows, cols) if order == "row" else (cols, rows)
    shape = shape if batch == 1 else (batch, *shape)
    t = torch.randn(shape, device="cuda", generator=gen).to(DT[dtype](torch))
    return t if order == "row" else t.transpose(-1, -2)


DT = {"f16": lambda t: t.float16, "bf16": lambda t: t.bfloat16, "f32": lambda t: t.float32}


def workload(torch, shape, seed):
    """(call(rt), plan(rt), the output tensor) of one row: the same inputs and output for either runtime."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    M, N, K, dt, bt = shape.M, shape.N, shape.K, shape.dtype, shape.batch
    if shape.routing:  # grouped
        from hgemm_bench.matmul_section import expert_sizes
        sizes = expert_sizes(np.random.default_rng(seed), M, bt, shape.routing)
        ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
        x = operand(torch, gen, M, K, "row", dt)
        w = (operand(torch, gen, bt * N, K, "row", dt).reshape(bt, N, K) / K ** 0.5).transpose(-1, -2)
        out = torch.empty((M, N), dtype=x.dtype, device="cuda")
        return (lambda rt: rt.grouped_matmul(x, w, out=out, offsets=ends)), (lambda rt: "grouped"), out
    if shape.epilogue == "bias_gelu":
        x = operand(torch, gen, M, K, "row", dt)
        w = operand(torch, gen, N, K, "row", dt) / K ** 0.5
        b = operand(torch, gen, 1, N, "row", dt).reshape(N)
        out = torch.empty((M, N), dtype=x.dtype, device="cuda")
        return (lambda rt: rt.matmul(x, w.t(), out=out, bias=b, activation="gelu")), \
            (lambda rt: rt.explain(x, w.t(), out=out, bias=b, activation="gelu")), out
    if shape.epilogue == "mlp":
        f = N // 2
        x = operand(torch, gen, M, K, "row", dt)
        w1 = operand(torch, gen, N, K, "row", dt) / K ** 0.5
        w2 = operand(torch, gen, K, f, "row", dt) / f ** 0.5
        h = torch.empty((M, f), dtype=x.dtype, device="cuda")
        y = x.clone()

        def mlp(rt):
            rt.matmul(x, w1.t(), out=h, activation="swiglu")
            return rt.matmul(h, w2.t(), out=y)  # (beta 0: repeated calls give the same y)
        return mlp, (lambda rt: rt.explain(x, w1.t(), out=h, activation="swiglu") + " | " +
                     rt.explain(h, w2.t(), out=y)), y
    a = operand(torch, gen, M, K, shape.a_order, dt, bt)
    b = operand(torch, gen, K, N, shape.b_order, dt, bt)
    out = torch.empty(((bt,) if bt > 1 else ()) + (M, N), dtype=a.dtype, device="cuda")
    acc = {"accumulate": "f32"} if dt == "f32" else {}
    return (lambda rt: rt.matmul(a, b, out=out, **acc)), (lambda rt: rt.explain(a, b, out=out, **acc)), out


def gpu_ms(do_bench, fn):
    return do_bench(fn, warmup=10, rep=40)


def host_us(torch, rt, n=2000):
    a, b = (torch.randn(64, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty(64, 64, device="cuda", dtype=torch.float16)
    for _ in range(50):
        rt.matmul(a, b, out=c)
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            rt.matmul(a, b, out=c)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-before", nargs=2, metavar=("REV", "DIR"))
    ap.add_argument("--before", type=Path)
    ap.add_argument("--before-artifacts", type=Path, help="the before runtime's kernels (default: the same build)")
    ap.add_argument("--sections", default="all")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--renamed", action="append", default=[], metavar="OLD=NEW",
                    help="a kernel-name prefix the before runtime's plans spell OLD and the after one NEW (e.g. util_=matmul_)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.make_before:
        make_before(args.make_before[0], Path(args.make_before[1]))
        return 0
    if args.before is None:
        ap.error("--before DIR is required")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
    import torch
    from triton.testing import do_bench
    from hgemm_bench.matmul_table import SECTIONS

    sys.path.insert(0, str(args.before.resolve()))
    after = importlib.import_module("hgemm_rt")
    after.get_registry()  # (each runtime reads its manifest once, now: the after one from the checkout)
    saved = os.environ.get("HGEMM_ARTIFACTS")
    os.environ["HGEMM_ARTIFACTS"] = str((args.before_artifacts or REPO / "artifacts").resolve())
    before = importlib.import_module("hgemm_rt_before")
    before.get_registry()
    os.environ.pop("HGEMM_ARTIFACTS") if saved is None else os.environ.update(HGEMM_ARTIFACTS=saved)
    names = list(SECTIONS) if args.sections == "all" else args.sections.split(",")
    renamed = [tuple(r.split("=", 1)) for r in args.renamed]
    if any(len(r) != 2 or not all(r) for r in renamed):
        ap.error("--renamed takes OLD=NEW")
    rows, summary = [], {}
    for si, name in enumerate(names):
        sec = SECTIONS[name]
        ratios = []
        t_sec = time.time()
        if name == "host":
            t = {"before": [], "after": []}
            for order in ("before", "after", "after", "before") * args.rounds:
                t[order].append(host_us(torch, after if order == "after" else before))
            r = {"section": name, "shape": "64^3 f16 torch out given", "before_us": float(np.median(t["before"])),
                 "after_us": float(np.median(t["after"]))}
            r["ratio"] = r["after_us"] / r["before_us"]
            rows.append(r)
            ratios.append(r["ratio"])
        for i, shape in enumerate(sec.shapes if name != "host" else ()):
            seed = (si * 1000 + i) & 0xFFFFFFFF
            call, plan, out = workload(torch, shape, seed)
            fa, fb = (lambda: call(after)), (lambda: call(before))
            pa, pb = plan(after), plan(before)
            for old, new in renamed:
                pb = re.sub(rf"\b{re.escape(old)}", new, pb)
            fb()
            ob = out.clone()
            fa()
            torch.cuda.synchronize()
            same = bool(torch.equal(out, ob))
            del ob
            t = {"before": [], "after": []}
            for order in ("before", "after", "after", "before") * args.rounds:
                t[order].append(gpu_ms(do_bench, fa if order == "after" else fb))
            r = {"section": name, "shape": shape.cell, "plan_after": pa, "plan_before": pb, "same_plan": pa == pb,
                 "same_result": same, "before_us": 1e3 * float(np.median(t["before"])),
                 "after_us": 1e3 * float(np.median(t["after"]))}
            r["ratio"] = r["after_us"] / r["before_us"]
            rows.append(r)
            ratios.append(r["ratio"])
            flag = "" if r["same_plan"] and same else "  <-- " + ("plan differs" if not r["same_plan"] else "result differs")
            print(f"{name:9s} {shape.cell:50s} {r['before_us']:10.1f} {r['after_us']:10.1f} {r['ratio']:6.3f}{flag}",
                  flush=True)
            del fa, fb, call, plan, out
            torch.cuda.empty_cache()
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            worst = max(ratios)
            summary[name] = {"rows": len(ratios), "geomean_after_over_before": geo, "slowest_row": worst,
                             "plans_differ": sum(1 for r in rows if r["section"] == name and not r.get("same_plan", True)),
                             "results_differ": sum(1 for r in rows if r["section"] == name and not r.get("same_result", True)),
                             "seconds": time.time() - t_sec}
            print(f"== {name}: geomean after/before {geo:.4f}, slowest row {worst:.3f}, "
                  f"plans differ {summary[name]['plans_differ']}, results differ {summary[name]['results_differ']}",
                  flush=True)
        if args.json:
            tmp = args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
            os.replace(tmp, args.json)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
