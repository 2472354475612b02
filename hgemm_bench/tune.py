"""hgemm-tune: which route is fastest, measured per shape on this GPU, written as its shipped tuning table.

    hgemm-tune                                      # the sections of DEFAULT_SECTIONS, into hgemm_rt/tuned/<GPU>.json
    hgemm-tune --sections models,decode --only 'x4096 ' --out /tmp/h200.json
    python -m hgemm_bench.tune --list               # the shapes it would measure, no GPU

The shapes: the GEMMs of the bench's sections (hgemm_bench/matmul_table.py; a decode step's layers one GEMM each,
M token rows), each once. For each, N(0, 1) operands in the section's layout and dtype, then Matmul.autotune
with save=False (the user's tuning cache is neither read nor written): the top --candidates of
planner.ranked_recipes (tuning.choose_candidates: the cost model's pick first), each checked against float64 on
sampled rows, then timed with an L2 flush before every run, warm-up, the median of --iters. A shape's winner is
kept where it beats the cost model's pick by more than --margin (NOISE_MARGIN); elsewhere the cost model stays
matmul's choice and the table has no entry (hgemm_rt/tuned/table.py: the format, the buckets, the lookup).

The table is rewritten whole after every shape (a temp file, then a rename), so a run stopped at any point keeps
what it measured; a later run writing the same file on the same GPU and build adds to it (a bucket measured
again takes the new result), so the sections can be measured in several runs. Exit status: 0 done, 1 no GPU,
2 bad flags or an --out that cannot be written.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hgemm_rt.tuned import table as tuned_table

from .matmul_table import SECTIONS, Section, Shape, selected_shapes
from .outputs import OutputError, prepare, write_atomically
from .progress import Progress

NOISE_MARGIN = 0.02  # a winner must beat the cost model's pick by more than this share of its time
DEFAULT_SECTIONS = ("models", "decode", "decode_graph", "batched", "public")
DEFAULT_CANDIDATES = 8  # Matmul.autotune's default
DEFAULT_ITERS = 20
DEFAULT_WARMUP = 3


def tunable(section: Section) -> bool:
    """A section of plain products (autotune takes no fused epilogue; grouped and host rows are other calls)."""
    return not section.calls and all(not s.epilogue and not s.routing for s in section.shapes)


TUNABLE = tuple(name for name, sec in SECTIONS.items() if tunable(sec))


def gemms(shape: Shape) -> tuple[Shape, ...]:
    """The products one bench row runs: itself, or a decode step's layers (M x N x K each, B as the step has it)."""
    if not shape.layers:
        return (shape,)
    return tuple(replace(shape, N=n, K=k, layers=()) for _name, n, k in shape.layers)


def shape_set(sections: list[str], only: str | None) -> list[Shape]:
    """The GEMMs of the sections' shapes (--only: those whose table text matches), each once, in section order."""
    return list(dict.fromkeys(g for name in sections for s in selected_shapes(SECTIONS[name], only) for g in gemms(s)))


@dataclass
class Settings:
    sections: list[str]
    only: str | None = None
    candidates: int = DEFAULT_CANDIDATES
    iters: int = DEFAULT_ITERS
    warmup: int = DEFAULT_WARMUP
    margin: float = NOISE_MARGIN
    out: str | None = None  # None: the package's table of this GPU (tuned_table.table_path)
    fresh: bool = False
    seed: int | None = None
    progress: bool = True
    list_only: bool = False


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hgemm-tune", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="sections it can measure:\n" + "\n".join(
                                     f"  {n:<13}{SECTIONS[n].title[:100]}" for n in TUNABLE))
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS), metavar="NAMES",
                    help=f"comma-separated, of {', '.join(TUNABLE)} (default {','.join(DEFAULT_SECTIONS)})")
    ap.add_argument("--only", metavar="REGEX", help="only the shapes whose table text (as bench.py --matmul --only "
                                                   "reads it, e.g. '512x4096x4096 f16 A row B col') matches")
    ap.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES,
                    help=f"routes timed per shape, the cost model's best first (default {DEFAULT_CANDIDATES})")
    ap.add_argument("--iters", type=int, default=DEFAULT_ITERS, help=f"timed runs per route (default {DEFAULT_ITERS})")
    ap.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                    help=f"untimed runs per route first (default {DEFAULT_WARMUP})")
    ap.add_argument("--margin", type=float, default=NOISE_MARGIN,
                    help=f"keep a winner only where it is this share faster than the cost model's pick "
                         f"(default {NOISE_MARGIN})")
    ap.add_argument("--out", metavar="JSON", help="the table to write (default: hgemm_rt/tuned/<GPU>.json in the "
                                                  "package hgemm_rt is imported from)")
    ap.add_argument("--fresh", action="store_true", help="start an empty table instead of adding to --out's")
    ap.add_argument("--seed", type=int, help="seed of the random inputs (default: fresh)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    ap.add_argument("--list", action="store_true", help="print the shapes it would measure and exit (no GPU)")
    return ap


def parse_args(argv: list[str] | None = None) -> Settings:
    ap = build_parser()
    args = ap.parse_args(argv)
    names = list(dict.fromkeys(n.strip() for n in args.sections.split(",") if n.strip()))
    wrong = [n for n in names if n not in TUNABLE]
    if wrong or not names:
        ap.error(f"--sections: {', '.join(wrong) or repr(args.sections)} not a section it can measure; choose from "
                 f"{', '.join(TUNABLE)} (comma-separated)")
    if args.candidates < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("--candidates and --iters must be >= 1, --warmup >= 0")
    if not math.isfinite(args.margin) or not 0 <= args.margin < 1:
        ap.error(f"--margin must be a share of the cost model's time in [0, 1), not {args.margin}")
    if args.seed is not None and args.seed < 0:
        ap.error(f"--seed must be >= 0, not {args.seed}")
    if args.only is not None:
        try:
            matched = shape_set(names, args.only)
        except re.error as exc:
            ap.error(f"--only {args.only!r}: not a regular expression ({exc})")
        if not matched:
            ap.error(f"--only {args.only!r} matches no shape of {', '.join(names)} (a shape reads like "
                     f"{SECTIONS[names[0]].shapes[0].cell!r})")
    return Settings(names, args.only, args.candidates, args.iters, args.warmup, args.margin, args.out, args.fresh,
                    args.seed, not args.no_progress, args.list)


# ---------------------------------------------------------------------------------------------------
# what a measurement keeps, and the table it goes to (no GPU)
# ---------------------------------------------------------------------------------------------------

def winner(results: list[dict], model_route: Any, margin: float) -> tuple[dict | None, float | None]:
    """(the fastest of Matmul.autotune's `results` where it beats the cost model's pick `model_route` by more than
    `margin`, else None; the pick's measured us, None where it failed its check or was not timed)."""
    model_us = next((r["us"] for r in results if r["route"] == model_route), None)
    model_us = model_us if model_us is not None and math.isfinite(model_us) else None
    best = results[0] if results and math.isfinite(results[0]["us"]) else None
    if best is None or best["route"] == model_route:
        return None, model_us
    beats = model_us is None or best["us"] < model_us * (1 - margin)
    return (best if beats else None), model_us


def existing_entries(path: Path, device: str, build_hash: str) -> tuple[dict, list[str], str]:
    """(the entries, the sections) of the table already at `path` where it was written on this GPU and build (a run
    adds to them), else ({}, [], why they are not)."""
    try:
        doc = json.loads(path.read_text())
        tuned_table.parse_table(doc)
    except FileNotFoundError:
        return {}, [], ""
    except (OSError, ValueError, TypeError, RecursionError) as exc:  # (as tuned_table.read_table reads a file)
        return {}, [], f"{path} is no table ({exc}): starting empty"
    if doc["device"] != device or doc["build_hash"] != build_hash:
        return {}, [], (f"{path} was measured on {doc['device']!r}, build {doc['build_hash'][:12]}: starting empty "
                        "(this run replaces it)")
    return doc["entries"], list(doc.get("sections", [])), ""


def write_table(path: Path, doc: dict) -> None:
    """The table written whole (temp file + rename), after checking that it reads back as one."""
    tuned_table.parse_table(doc)
    write_atomically(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------------
# the GPU part
# ---------------------------------------------------------------------------------------------------

def operand(rng: np.random.Generator, rows: int, cols: int, order: str, dtype: str, batch: int) -> tuple[Any, Any]:
    """(a rows x cols N(0, 1) DeviceArray, 3-D for batch > 1, the array that owns its memory): column-major is the
    transposed view of a cols x rows array."""
    from hgemm_rt import DeviceArray
    from hgemm_rt.dtypes import to_storage

    shape = ((rows, cols) if order == "row" else (cols, rows))
    shape = shape if batch == 1 else (batch, *shape)
    stored = DeviceArray.from_host(to_storage(rng.standard_normal(shape, dtype=np.float32), dtype), dtype)
    if order == "row":
        return stored, stored
    st = stored.strides
    return DeviceArray(stored.ptr, (*shape[:-2], shape[-1], shape[-2]), dtype, (*st[:-2], st[-1], st[-2]),
                       owner=stored, device=stored.device), stored


def measure(shape: Shape, s: Settings, rng: np.random.Generator) -> tuple[Any, list[dict], Any]:
    """(the Problem, Matmul.autotune's results fastest first, the cost model's pick) of one shape; its GPU memory
    freed before it returns."""
    import hgemm_rt as hg
    from hgemm_rt import planner
    from hgemm_rt.device import get_device
    from hgemm_rt.registry import get_registry

    (a, a_mem), (b, b_mem) = (operand(rng, shape.M, shape.K, shape.a_order, shape.dtype, shape.batch),
                              operand(rng, shape.K, shape.N, shape.b_order, shape.dtype, shape.batch))
    c = hg.empty((shape.M, shape.N) if shape.batch == 1 else (shape.batch, shape.M, shape.N), shape.dtype)
    info = get_device().info
    try:
        with hg.Matmul(a, b, out=c) as mm:
            model = planner.heuristic_recipe(mm.problem, get_registry().manifest, info.cc, info.sm_count)
            results = mm.autotune(candidates=s.candidates, iters=s.iters, warmup=s.warmup, save=False)
            return mm.problem, results, model.route
    finally:
        for x in (a_mem, b_mem, c):
            x.close()


def outcome(shape: Shape, best: dict | None, model_route: Any, model_us: float | None) -> str:
    us = f"{model_us:.1f} us" if model_us is not None else "no time"
    if best is None:
        return f"{shape.cell}: the cost model's {model_route} ({us}) stays"
    return f"{shape.cell}: {best['route']} {best['us']:.1f} us against the cost model's {model_route} {us}"


def main(argv: list[str] | None = None) -> int:
    s = parse_args(argv)
    shapes = shape_set(s.sections, s.only)
    if s.list_only:
        print("\n".join(x.cell for x in shapes))
        return 0
    from hgemm_rt import HgemmError, tuned
    from hgemm_rt.device import get_device
    from hgemm_rt.errors import NoGpuError
    from hgemm_rt.registry import get_registry

    try:
        info = get_device().info
    except NoGpuError as exc:
        print(f"hgemm-tune: no GPU ({exc})", file=sys.stderr)
        return 1
    manifest = get_registry().manifest
    path = Path(s.out) if s.out else tuned.table_path(info.name)
    try:
        prepare("--out", str(path))
    except OutputError as exc:
        print(f"hgemm-tune: {exc}", file=sys.stderr)
        return 2
    entries, sections, why = ({}, [], "") if s.fresh else existing_entries(path, info.name, manifest.build_hash)
    if why:
        print(f"hgemm-tune: {why}", file=sys.stderr)
    rng = np.random.default_rng(s.seed)
    progress = Progress(sum(x.M * x.N * x.K * x.batch for x in shapes), s.progress)
    kept = 0
    for shape in shapes:
        progress.update(shape.cell)
        try:
            prob, results, model_route = measure(shape, s, rng)
        except HgemmError as exc:  # (a shape this build cannot run: said, and the others measured)
            progress.clear()
            print(f"{shape.cell}: not measured ({type(exc).__name__}: {exc})")
            progress.update(shape.cell, shape.M * shape.N * shape.K * shape.batch)
            continue
        best, model_us = winner(results, model_route, s.margin)
        key = tuned_table.bucket_of(prob).key
        entries.pop(key, None)
        if best is not None:
            kept += 1
            entries.update([tuned_table.entry_of(prob, best["route"], best["us"], model_route, model_us)])
        doc = tuned_table.table_doc(entries, info.name, info.cc, info.sm_count, manifest.build_hash,
                                    sections + s.sections, s.margin)
        write_table(path, doc)
        progress.clear()
        print(outcome(shape, best, model_route, model_us))
        progress.update(shape.cell, shape.M * shape.N * shape.K * shape.batch)
    progress.clear()
    print(f"hgemm-tune: {kept} of {len(shapes)} shapes beat the cost model by more than {s.margin:.0%}; "
          f"{len(entries)} entries in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
