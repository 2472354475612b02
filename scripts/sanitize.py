#!/usr/bin/env python3
"""Run kernels under compute-sanitizer (memcheck, racecheck, synccheck, initcheck) and count errors.

    python scripts/sanitize.py                       # every kernel in the manifest, all four tools
    python scripts/sanitize.py --kernels 'hgemm_mma*' --tools memcheck,racecheck

Each tool runs one child process (`--child`) that launches every selected kernel, every variant, at an
aligned and a ragged shape (the test suite's shapes) on random inputs into a NaN-poisoned output, and
checks the result against float64 so that a wrong answer fails here too. Exit status 1 if any tool
reports an error or any result is wrong.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def selected_specs(pattern: str | None):
    import hgemm_rt as hg

    specs = [s for s in hg.get_registry().manifest.kernels.values() if s.ladder != "util"]
    return [s for s in specs if not pattern or fnmatch.fnmatch(s.name, pattern) or pattern in s.name]


def child(pattern: str | None) -> int:
    """Launch every selected kernel at its aligned and ragged shapes; print one line each."""
    import numpy as np

    import hgemm_rt as hg
    from hgemm_rt.testing import run_checked
    from kernel_cases import shapes_for

    rng = np.random.default_rng()
    cc = hg.get_device().info.cc
    bad = 0
    for spec in selected_specs(pattern):
        entry = hg.get_kernel(spec.name)
        for label, M, N, K in shapes_for(spec)[:2]:  # aligned, ragged
            if entry.supports(M, N, K, cc) is not None:
                continue
            for choice in spec.variant_choices():
                r = run_checked(entry, M, N, K, rng, with_cublas=False, **choice)
                ok = r["error"] <= r["bound"]
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {spec.name} {choice} {label} {M}x{N}x{K} err={r['error']:.2e}",
                      flush=True)
    return 1 if bad else 0


# memcheck/synccheck/initcheck end with "ERROR SUMMARY: N errors"; racecheck with
# "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)".
_SUMMARY = re.compile(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", metavar="PATTERN")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--sanitizer", default=os.environ.get("HGEMM_SANITIZER") or shutil.which("compute-sanitizer"))
    ap.add_argument("--log-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.kernels)
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tool(s) {sorted(unknown)}; choose from {', '.join(TOOLS)}")
    if not args.sanitizer:
        print("sanitize.py: compute-sanitizer not found (set HGEMM_SANITIZER)", file=sys.stderr)
        return 2
    n = len(selected_specs(args.kernels))
    print(f"{n} kernels, tools: {', '.join(tools)}", flush=True)
    failed = False
    for tool in tools:
        cmd = [args.sanitizer, f"--tool={tool}", "--print-limit=10"]
        if tool == "racecheck":
            cmd.append("--racecheck-report=all")
        cmd += [sys.executable, __file__, "--child"] + (["--kernels", args.kernels] if args.kernels else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        log = proc.stdout + proc.stderr
        args.log_dir.mkdir(parents=True, exist_ok=True)
        (args.log_dir / f"sanitize_{tool}.log").write_text(log)
        m = _SUMMARY.search(log)
        errors = int(m.group(1) or m.group(2)) if m else -1
        wrong = log.count("\nBAD ")
        launched = log.count("\nok ") + wrong
        status = "clean" if errors == 0 and wrong == 0 and proc.returncode == 0 else "FAILED"
        failed |= status != "clean"
        print(f"{tool:10s} errors={errors:<4d} launches={launched:<5d} wrong={wrong:<3d} exit={proc.returncode} {status}",
              flush=True)
        if status != "clean":
            print("\n".join(log.splitlines()[-15:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
