"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the kernels, counting errors:
the driver behind `python scripts/sanitize.py`.

    python scripts/sanitize.py                       # every kernel in the manifest, all four tools
    python scripts/sanitize.py --kernels 'hgemm_mma*' --tools memcheck,racecheck
    python scripts/sanitize.py --kernels 'matmul_*'    # only matmul's helper kernels

Each tool runs two child processes (`--child gemm|matmul`; all side by side, `--jobs`) that launch
every selected kernel at an aligned and a ragged shape on random inputs, check each result against
float64 (kernel_checks.py, matmul_checks.py: the checks the GPU tests use), and print which kernels they launched:

- catalogue GEMMs: every variant, the test suite's aligned and ragged shapes, into a NaN-poisoned C;
- the "matmul" kernels (matmul_copy2d_*, matmul_gemm_{mma,wgmma,simt}_*), which only hgemm_rt.matmul
  launches: through matmul's recipes (hgemm_rt.planner) on a few problems per dtype and shape class
  (plain; alpha/beta into a strided C; misaligned operands with odd leading dimensions). Of every
  plan matmul could run, the cheapest one that launches something not yet covered is run (a matmul
  kernel, a variant, split-K > 1, alpha/beta, a transposing or misaligned copy). The operands' row
  gaps and the bytes past their last element are never written, so initcheck / memcheck flag a
  kernel that reads them.

Exit status 1 if any tool reports an error, any result is wrong, a tool runs past --timeout, or a
selected kernel was not launched at both an aligned and a ragged shape.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .kernel_checks import selected_specs, shapes_for
from .outputs import OutputError, prepare
from .matmul_checks import missing, run_matmul_checks, matmul_kernel_names

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # where `python -m hgemm_bench.sanitize` finds the package
report = functools.partial(print, flush=True)  # the child's lines are what the parent's summary counts


# ---------------------------------------------------------------------------------------------------
# child: launch and check
# ---------------------------------------------------------------------------------------------------

def child_gemm(pattern: str | None) -> tuple[int, int, set, list[str]]:
    """Every selected catalogue kernel, every variant, at its aligned and ragged test shapes."""
    import numpy as np

    import hgemm_rt as hg
    from .kernel_checks import run_checked

    rng = np.random.default_rng()
    cc = hg.get_device().info.cc
    specs = selected_specs(hg.get_registry().manifest, pattern, helpers=False)
    bad = launches = 0
    launched = set()
    wanted = []  # (kernel, shape class): each kernel at its aligned and its ragged test shape
    for spec in specs:
        entry = hg.get_kernel(spec.name)
        for label, M, N, K in shapes_for(spec)[:2]:  # aligned, ragged
            wanted.append((spec.name, label))
            if entry.supports(M, N, K, cc) is not None:
                continue
            for choice in spec.variant_choices():
                r = run_checked(entry, M, N, K, rng, with_cublas=False, **choice)
                ok = r["error"] <= r["bound"]
                bad += not ok
                launches += 1
                launched.add((spec.name, label))
                report(f"{'ok ' if ok else 'BAD'} {spec.name} {choice} {label} {M}x{N}x{K} err={r['error']:.2e}")
    holes = [f"{name} ({c})" for name, c in wanted if (name, c) not in launched]
    return bad, launches, {n for n, _ in launched}, holes


def child_matmul(pattern: str | None) -> tuple[int, int, set, list[str]]:
    import hgemm_rt as hg

    cc = hg.get_device().info.cc
    names, unbuilt = matmul_kernel_names(hg.get_registry().manifest, pattern, cc)
    if unbuilt:
        print(f"not built for sm_{cc[0]}{cc[1]} (skipped): {', '.join(unbuilt)}")
    if not names:
        return 0, 0, set(), []
    bad, launches, covered = run_matmul_checks(names, report)
    feats = sorted((k, f, c) for k, f, c in covered if f)
    print(f"matmul features covered: {len(feats)}: " + "; ".join(f"{k} {f} ({c})" for k, f, c in feats))
    return bad, launches, {k for k, _f, _c in covered}, missing(names, covered)


PARTS = {"gemm": child_gemm, "matmul": child_matmul}


def child(pattern: str | None, part: str) -> int:
    """One part's kernels: one line per launch (or matmul plan), then what was launched."""
    bad, launches, kernels, holes = PARTS[part](pattern)
    print(f"LAUNCHED kernels={len(kernels)} launches={launches}")
    if holes:
        print(f"NOT LAUNCHED at both an aligned and a ragged shape ({len(holes)}): " + ", ".join(holes))
    return 1 if bad or holes else 0


# ---------------------------------------------------------------------------------------------------
# parent: one sanitizer process per tool and part
# ---------------------------------------------------------------------------------------------------

# memcheck/synccheck/initcheck end with "ERROR SUMMARY: N errors"; racecheck with
# "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)".
_SUMMARY = re.compile(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error)")
_LAUNCHED = re.compile(r"^LAUNCHED kernels=(\d+) launches=(\d+)", re.MULTILINE)
_FRAME_KERNEL = re.compile(r"Device Frame: (\w+)\+0x[0-9a-f]+ in ")


def errors_by_kernel(log: str) -> dict[str, int]:
    """Sanitizer reports per kernel: the outermost device frame of each report names its kernel."""
    out: dict[str, int] = {}
    for block in re.split(r"\n========= \n", log):
        frames = _FRAME_KERNEL.findall(block)
        if frames:
            out[frames[-1]] = out.get(frames[-1], 0) + 1
    return out


@dataclass
class Result:
    clean: bool
    line: str
    errors: int
    kernels: int
    launches: int
    seconds: float


def summarize(what: str, log: str, returncode: int | None, seconds: float) -> Result:
    """One sanitizer process's log: its error count (-1: no summary, it did not finish), launches,
    wrong results."""
    m = _SUMMARY.search(log)
    errors = int(m.group(1) or m.group(2)) if m else -1
    wrong = log.count("\nBAD ")
    lm = _LAUNCHED.search(log)
    kernels, launches = (int(lm.group(1)), int(lm.group(2))) if lm else (0, log.count("\nok ") + wrong)
    clean = errors == 0 and wrong == 0 and returncode == 0
    status = "clean" if clean else ("TIMEOUT" if returncode is None else "FAILED")
    line = (f"{what:16s} errors={errors:<4d} kernels={kernels:<4d} launches={launches:<5d} wrong={wrong:<3d} "
            f"exit={returncode} {seconds:6.1f}s {status}")
    if not clean:
        by = errors_by_kernel(log)
        if by:
            line += "\n  reports by kernel: " + ", ".join(f"{k}: {v}" for k, v in sorted(by.items()))
        line += "\n" + "\n".join(log.splitlines()[-15:])
    return Result(clean, line, errors, kernels, launches, seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sanitize.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", metavar="PATTERN",
                    help="glob or substring of the kernel names, or a comma-separated list of them (default: all)")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--jobs", type=int, default=2 * len(TOOLS),
                    help="sanitizer processes side by side: one per tool and part (catalogue, matmul)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per process before it counts as failed")
    ap.add_argument("--sanitizer", default=os.environ.get("HGEMM_SANITIZER") or shutil.which("compute-sanitizer"))
    ap.add_argument("--log-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    ap.add_argument("--child", choices=sorted(PARTS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.kernels, args.child)
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        ap.error(f"--timeout must be a finite number of seconds > 0, not {args.timeout}")
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, not {args.jobs}")
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tool(s) {sorted(unknown)}; choose from {', '.join(TOOLS)}")
    if not args.sanitizer:
        print("sanitize.py: compute-sanitizer not found (set HGEMM_SANITIZER)", file=sys.stderr)
        return 2
    import hgemm_rt as hg

    manifest = hg.get_registry().manifest  # the build's declarations only: the parent touches no GPU
    n = {part: len(selected_specs(manifest, args.kernels, helpers=part == "matmul")) for part in PARTS}
    unmatched = [g for g in (args.kernels or "").split(",") if g and not any(
        selected_specs(manifest, g, helpers=part == "matmul") for part in PARTS)]
    if unmatched or not sum(n.values()):  # (a run over nothing, or less than asked, must not read as clean)
        print(f"sanitize.py: no kernel of this build matches --kernels {', '.join(unmatched) or args.kernels!r}",
              file=sys.stderr)
        return 2
    try:
        prepare("--log-dir", str(args.log_dir), is_dir=True)
    except OutputError as exc:
        print(f"sanitize.py: {exc}", file=sys.stderr)
        return 2
    print(f"{sum(n.values())} kernels ({n['gemm']} catalogue, {n['matmul']} matmul), tools: {', '.join(tools)}",
          flush=True)
    pending = [(t, p) for t in tools for p in PARTS if n[p]]
    running: dict = {}
    totals = {t: [0, 0, 0, 0.0, True] for t in tools}  # errors, kernels, launches, seconds, clean
    t_all = time.monotonic()
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            tool, part = job = pending.pop(0)
            cmd = [args.sanitizer, f"--tool={tool}", "--print-limit=10"]
            if tool == "racecheck":
                cmd.append("--racecheck-report=all")
            cmd += [sys.executable, "-m", "hgemm_bench.sanitize", "--child", part]
            cmd += ["--kernels", args.kernels] if args.kernels else []
            with open(args.log_dir / f"sanitize_{tool}_{part}.log", "w") as log:
                # own session: a timeout ends the sanitizer and the child it started, nothing else
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=PACKAGE_DIR,
                                        start_new_session=True)
            running[job] = (proc, time.monotonic())
        time.sleep(0.5)
        for (tool, part), (proc, t0) in list(running.items()):
            rc = proc.poll()
            late = args.timeout is not None and time.monotonic() - t0 > args.timeout
            if rc is None and not late:
                continue
            if rc is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            del running[(tool, part)]
            r = summarize(f"{tool}/{part}", (args.log_dir / f"sanitize_{tool}_{part}.log").read_text(), rc,
                          time.monotonic() - t0)
            tot = totals[tool]
            tot[0] = -1 if -1 in (tot[0], r.errors) else tot[0] + r.errors  # -1: a process without a summary
            tot[1] += r.kernels
            tot[2] += r.launches
            tot[3], tot[4] = max(tot[3], r.seconds), tot[4] and r.clean
            print(r.line, flush=True)
    print("per tool:")
    for tool, (errors, kernels, launches, seconds, clean) in totals.items():
        print(f"  {tool:10s} kernels={kernels:<4d} launches={launches:<5d} errors={errors:<4d} "
              f"{seconds:6.1f}s {'clean' if clean else 'FAILED'}")
    print(f"all tools: {time.monotonic() - t_all:.1f}s wall", flush=True)
    return 0 if all(t[4] for t in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
