"""`python bench.py`: select, measure shape by shape (a table each), then the summary, top-k, plot,
JSON and CSV. Exit codes: 0 done, 1 no GPU (after listing the build), 2 bad build/flags, 3 some
kernel failed its correctness check (the tables say which). `--matmul` runs the matmul sections
(matmul_section) instead, with the same exit codes."""
from __future__ import annotations

import datetime as _dt
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import analysis as an
from . import plot as pl
from . import results, tables
from .cli import Settings, parse_args
from .progress import Progress
from .outputs import OutputError, prepare_all
from .selection import describe_build, pattern_problem, select

ROOT = Path(__file__).resolve().parent.parent


def checkout_commit() -> str | None:
    """HEAD of the checkout as git itself reports it; None without a usable git (no git, or a tree
    copied without .git)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def git_commit() -> str | None:
    """HEAD of the checkout, or $HGEMM_GIT_COMMIT where the tree was copied without .git (a lent GPU)."""
    if os.environ.get("HGEMM_GIT_COMMIT"):
        return os.environ["HGEMM_GIT_COMMIT"]
    return checkout_commit()


def err(msg: str) -> None:
    print(f"bench.py: {msg}", file=sys.stderr)


def command_line(argv: list[str] | None) -> str:
    return "python bench.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


def build_record(registry: Any) -> dict:
    return {"hash": registry.manifest.build_hash, "nvcc": registry.manifest.nvcc, "git": git_commit()}


def load_registry() -> Any | None:
    """The build's kernel registry, or None after saying what is wrong with the build."""
    import hgemm_rt as hg

    try:
        return hg.get_registry()
    except hg.ManifestError as exc:
        err(str(exc))
        return None


def listed(names: list[str], most: int = 10) -> str:
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def readme_mode(s: Settings) -> int:
    try:
        doc = results.load(s.readme)
        from .readme import update_readme

        an.rejudge(doc["measurements"])  # ratios by the current rules, whatever rules the run used

        written = update_readme(doc, s.readme, s.readme_file, s.readme_images, s.readme_shape)
    except (OSError, ValueError, RuntimeError) as exc:
        err(str(exc))
        return 2
    print(f"updated the results section of {s.readme_file}" + (f" and {', '.join(written)}" if written else ""))
    return 0


def plots_mode(s: Settings) -> int:
    """Every image of each results file (plot.write_plots) into s.out."""
    if not pl.have_matplotlib():
        err(pl.MISSING_MATPLOTLIB)
        return 2
    for path in s.plots:
        try:
            doc = results.load_any(path)
            if doc["schema"] == results.SCHEMA:
                an.rejudge(doc["measurements"])  # ratios by the current rules, as --readme
            written = pl.write_plots(doc, s.out, size=s.readme_shape, topk=s.topk)
        except (OSError, ValueError, KeyError) as exc:
            err(f"{path}: {exc}")
            return 2
        print(f"{path}: wrote {', '.join(written)}")
    return 0


def matmul_mode(s: Settings, argv: list[str] | None) -> int:
    import hgemm_rt as hg

    if not hg.gpu_available():
        err(f"no CUDA GPU on this machine: the matmul sections ({', '.join(s.matmul)}) time GPU work")
        return 1
    registry = load_registry()
    if registry is None:
        return 2
    from .matmul_section import DOC_ROWS, failures, run_sections

    def save(doc: dict) -> None:  # after every section, so that an interrupted run keeps those it finished
        if s.json:
            results.write_json(doc, s.json, DOC_ROWS)

    try:
        doc = run_sections(s.matmul, {"iters": s.iters, "warmup": s.warmup, "check_rows": s.check_rows,
                                      "autotune": s.autotune, "seed": s.seed, "only": s.only}, build_record(registry),
                           command_line(argv), steady_protocol(s), on_section=save)
    except KeyboardInterrupt:
        err("interrupted" + (f": {s.json} holds the sections finished so far" if s.json else ""))
        return 130
    save(doc)
    if s.json:
        print(f"wrote {s.json}")
    failed = failures(doc)
    if failed:
        err(f"{len(failed)} result(s) over their error bound or failed: {listed(failed)}")
        return 3
    return 0


def steady_protocol(s: Settings) -> Any:
    """The steady-state protocol the flags ask for (steady.Protocol), or None."""
    if s.steady is None:
        return None
    from .steady import Protocol

    return Protocol(rounds=s.steady, warm_s=s.warm_s, budget_s=s.budget, iters=s.iters)


def main(argv: list[str] | None = None) -> int:
    s = parse_args(argv)
    try:
        prepare_all(s)  # before any GPU time: a path the run cannot write is refused now, not after it
    except OutputError as exc:
        err(str(exc))
        return 2
    if not s.list_only and not tables.have_tabulate():  # (every mode but --list writes tables)
        err(tables.BENCH_EXTRA)
        return 2
    if s.readme:
        return readme_mode(s)
    if s.plots:
        return plots_mode(s)
    if s.ladder_doc:
        from .ladder_doc import ladder_doc_mode

        return ladder_doc_mode(s.ladder_doc, s.ladder_doc_out)
    if s.profile:
        from .profile import profile_mode

        return profile_mode(s, command_line(argv), build_record, checkout_commit)
    if s.matmul:
        return matmul_mode(s, argv)
    if s.plot and not pl.have_matplotlib():
        err(pl.MISSING_MATPLOTLIB)  # before any GPU time is spent
        return 2
    import hgemm_rt as hg
    from hgemm_rt.device import driver_requirement

    registry = load_registry()
    if registry is None:
        return 2
    entries = registry.kernels()
    cases = select(entries, s)
    problem = pattern_problem(entries, s, cases)
    if problem:
        err(problem)
        return 2
    build = f"{describe_build(entries)}\n\nbuild {registry.manifest.build_hash}: {driver_requirement(registry.manifest.nvcc)}"
    if s.list_only:
        print(build)
        print(f"\nthese flags select {len(cases)} runs per shape, {len(s.shapes)} shape(s)")
        return 0
    if not hg.gpu_available():
        print(build, file=sys.stderr)
        err(f"no CUDA GPU on this machine: nothing can be timed (the build above holds "
            f"{sum(not e.is_baseline for e in entries)} kernels; these flags select {len(cases)} runs per shape)")
        return 1
    if not cases:
        err("the flags select nothing to run (see --help: selection)")
        return 2
    return run(s, registry, cases, argv)


def results_doc(s: Settings, device: dict, build: dict, argv: list[str] | None, records: list[dict],
                skipped: list[dict], complete: bool, elapsed_s: float) -> dict:
    """The results document of the shapes measured so far (`complete`: every shape)."""
    return results.make_doc(device=device, build=build, settings=s.settings_record(), command=command_line(argv),
                            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            records=records, skipped=skipped, complete=complete, elapsed_s=elapsed_s)


def save_results(s: Settings, doc: dict, say: bool = False) -> None:
    """--json and --csv, each written whole (after every shape, and once more at the end)."""
    for path, write in ((s.json, results.write_json), (s.csv, results.write_csv)):
        if path:
            write(doc, path)
            if say:
                print(f"wrote {path}")


def run(s: Settings, registry: Any, cases: list, argv: list[str] | None) -> int:
    import hgemm_rt as hg
    from hgemm_rt.timing import L2Flusher

    from .devinfo import ClockSampler, clocks, device_record, header_lines
    from .measure import measure_shape

    dev = hg.get_device()
    device = device_record(dev)
    build = build_record(registry)
    for line in header_lines(device, build):
        print(line)
    protocol = steady_protocol(s)
    sampler = ClockSampler(dev.info.ordinal) if protocol else None
    how = (f"steady protocol: {protocol.warm_s:g} s of warm-up, then {protocol.rounds} interleaved rounds of up to "
           f"{s.iters} timed runs each, {s.budget:g} s per kernel and shape over all rounds; SM clock and power "
           f"{'from NVML' if sampler.available else 'unavailable (no NVML)'}" if protocol else
           f"warm-up {s.warmup}, up to {s.iters} timed runs, budget {s.budget:g} s per kernel and shape")
    print(f"{len(cases)} runs per shape ({sum(c.entry.is_baseline for c in cases)} cuBLAS), "
          f"{len(s.shapes)} shape(s); {how}; L2 flushed before every timed run", flush=True)
    peak = device["fp16_dense_peak_tflops"]
    seed = s.seed if s.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
    s.seed = seed
    rng = np.random.default_rng(seed)
    flusher = L2Flusher()
    weight = {shape: float(shape[0]) * shape[1] * shape[2] for shape in s.shapes}
    bar = Progress(sum(weight.values()) * len(cases), enabled=s.progress and len(s.shapes) * len(cases) > 1)
    records: list[dict] = []
    skipped: list[dict] = []
    complete = False
    t0 = time.perf_counter()
    try:
        for i, shape in enumerate(s.shapes):
            where = f"shape {i + 1}/{len(s.shapes)} {'x'.join(map(str, shape))}"
            bar.update(where)

            def on_case(case: Any, _dt_s: float, where: str = where, w: float = weight[shape]) -> None:
                bar.update(f"{where} {case.name} {case.label}", advance=w)

            recs, skips = measure_shape(shape, cases, dev.info.cc, flusher, rng, warmup=s.warmup, iters=s.iters,
                                        budget_s=s.budget, check_rows=s.check_rows, on_case=on_case,
                                        steady=protocol, sampler=sampler)
            an.finish_shape(recs)
            records += recs
            skipped += skips
            bar.clear()
            print(tables.shape_report(recs, skips, peak), flush=True)
            save_results(s, results_doc(s, device, build, argv, records, skipped, False, time.perf_counter() - t0))
        complete = True
    except KeyboardInterrupt:
        bar.clear()
        err("interrupted: the summary and files below hold the shapes finished so far")
    finally:
        flusher.close()
    elapsed = time.perf_counter() - t0
    device["clocks_at_end"] = clocks(dev.info.ordinal)
    if "clocks.sm" in device["clocks_at_end"]:
        end = device["clocks_at_end"]
        print(f"\nat the end: SM clock {end['clocks.sm']:.0f} MHz, {end.get('temperature.gpu', '?')} C")
    if records:
        print(tables.final_report(records, s.topk))
    print(f"\n{len(records)} measurements, {len(skipped)} skipped, {elapsed:.0f} s")
    save_results(s, results_doc(s, device, build, argv, records, skipped, complete, elapsed), say=True)
    if s.plot and records:
        data = pl.plot_series(records, s.topk)
        pl.render(data, device["name"], s.plot, peak)
        print(f"wrote {s.plot}")
    failed = [r for r in records if not r["ok"]]
    if failed:
        names = sorted({f"{r['name']} ({r['label']})" if r["label"] else r["name"] for r in failed})
        err(f"{len(failed)} measurement(s) over their error bound: {listed(names)}")
        return 3
    return 0 if complete else 130
