"""Command-line flags of `python bench.py`: parsing and the checks that need no GPU."""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field

from .matmul_table import SECTIONS, WALL_REPEATS, selected_shapes

DEFAULT_SWEEP = (1024, 2048, 4096, 8192)
DEFAULT_SEP = 1024
STEADY_ROUNDS = 5
STEADY_WARM_S = 1.5

# flag -> (ladders, every variant?). The plain flag runs each kernel of the ladder once in its default
# variant (first value of every axis, thread-block swizzle where the grid has it); `-all` runs every
# variant (stages x acc x swizzle off/on). cute/sgemm/hopper have no `-all` twin: their flag already
# runs every variant.
GROUP_FLAGS: dict[str, tuple[tuple[str, ...], bool]] = {
    "cuda": (("cuda",), False),
    "cuda_all": (("cuda",), True),
    "wmma": (("wmma",), False),
    "wmma_all": (("wmma",), True),
    "mma": (("mma",), False),
    "mma_all": (("mma",), True),
    "cute_tn": (("cute",), True),
    "sgemm": (("sgemm",), True),
    "hopper": (("hopper",), True),
}

EPILOG = """\
selection (the groups come from each kernel's `ladder` in the build manifest, never from a list here):
  default     the top rung (highest step) of each tensor-core ladder (wmma, mma, cute, hopper) per
              layout, fp16, and of the SGEMM ladder per accumulation (fp32, TF32), each in its default
              variant, plus cuBLAS; --no-default drops it
  --cuda/--wmma/--mma           every kernel of that ladder, default variant
  --cuda-all/--wmma-all/--mma-all   every kernel, every variant (stages, acc, swizzle off/on)
  --cute-tn/--sgemm/--hopper    every kernel of that ladder, every variant
  --all       every kernel, every variant
  --kernels P comma-separated globs or substrings: alone it runs exactly the matching kernels (every
              variant); with group flags it keeps only the matching ones
  cuBLAS (NN and TN: fp16 with fp32 and fp16 accumulation, bf16 with fp32; fp32 and TF32 for SGEMM)
  always runs unless --no-cublas: ratios are to its best variant of the same input type in the same
  run (fp16 kernels against the fastest fp16 cuBLAS, bf16 against bf16; SGEMM: against the better of
  fp32 and TF32 cuBLAS).

shapes: --MNK S (one square), --M/--N/--K (missing ones from --MNK), --MMNK MAX [--SEP STEP] (squares
  STEP, 2*STEP, ... <= MAX); default: squares 1024, 2048, 4096, 8192.

measurement: N(0,1) inputs, one checked run into NaN-filled C (relative error against float64 on
  sampled rows, NaN anywhere = inf), then warm-up and CUDA-event timings with L2 flushed before each;
  the median. The timed launches are queued behind a GPU-side hold, so Python's launch latency is not
  in the events. --budget caps the seconds of warm-up + timed runs per kernel and shape (slow kernels
  get fewer iterations, down to one). Exit status 3 when a row is over its error bound.
  --steady [ROUNDS] (default {rounds}): the steady-state protocol, for claims within a few percent: every
  row of a shape is checked first, then all run round-robin, untimed, for --warm-s seconds (the board
  reaches its power-capped clock), then are timed in ROUNDS interleaved rounds (a rotated order each
  round); the median of the round medians, each round's ratio to cuBLAS, and the SM clock and board
  power sampled (NVML) during each row's timing. --budget is then per row over all rounds.

matmul: --matmul [SECTIONS] measures the public hgemm_rt.matmul instead of the kernels, and exits
  (0 done, 1 no GPU, 3 a result over its error bound or a call that failed). SECTIONS: comma-separated,
  default all of them:
{sections}
  Every result is verified first (NaN-filled output, float64 reference); GPU time as above, plus wall
  time per call (n calls back to back, one sync at the end, best of {repeats}) where a user's host cost
  counts.
  Applies with it: --iters, --warmup, --check-rows, --seed, --json FILE, --autotune, --steady (to the
  sections against cuBLAS: hg.matmul and every cuBLAS variant interleaved).

outputs: --plot [PNG] (--topk K), --json FILE, --csv FILE: each checked (its folder created) before the
  first measurement; --json and --csv are rewritten whole after every shape (--matmul: every section), so
  an interrupted run keeps what it measured. README: `python bench.py --readme RESULTS.json`
  rewrites the section between <!-- results:start --> and <!-- results:end --> and its images (no GPU needed).
plots (no GPU): --plots JSON [JSON ...] --out DIR draws from kernel bench results: TFLOPS against the
  shape, a roofline (every kernel and shape against the device's fp16 tensor, fp32 and HBM roofs), a bar
  chart per ladder; from --matmul results: a roofline and the x-cuBLAS heatmap of each section. The README
  images: python bench.py --plots docs/bench_results.json docs/matmul_bench_h100.json --out docs/
  $HGEMM_GIT_COMMIT names the commit in the results where the checkout has no .git.
""".format(sections="\n".join(f"    {name:<8} {sec.title}" for name, sec in SECTIONS.items()), repeats=WALL_REPEATS,
           rounds=STEADY_ROUNDS)

# what --matmul does not combine with: the kernel bench's selection, shapes and outputs (argparse dests)
KERNEL_BENCH_ONLY = (*GROUP_FLAGS, "all", "no_default", "kernels", "no_cublas", "list", "M", "N", "K", "MNK", "MMNK",
                     "SEP", "plot", "csv", "readme")


@dataclass
class Settings:
    shapes: list[tuple[int, int, int]]
    groups: dict[str, bool] = field(default_factory=dict)
    all: bool = False
    default: bool = True
    kernels: list[str] = field(default_factory=list)
    cublas: bool = True
    warmup: int = 3
    iters: int = 20
    budget: float = 0.5
    check_rows: int = 128
    topk: int = 5
    plot: str | None = None
    json: str | None = None
    csv: str | None = None
    seed: int | None = None
    progress: bool = True
    list_only: bool = False
    readme: str | None = None
    readme_shape: int = 4096
    readme_file: str = "README.md"
    readme_images: str = "docs"  # where --readme draws the section's images ("": none)
    plots: list[str] = field(default_factory=list)  # results files to draw (--plots)
    out: str = "."
    matmul: list[str] = field(default_factory=list)  # sections of the matmul bench; empty: the kernel bench
    autotune: bool = False
    only: str | None = None  # --only: a regular expression over the matmul sections' shapes (None: all)
    steady: int | None = None  # rounds of the steady-state protocol; None: the default protocol
    warm_s: float = STEADY_WARM_S
    profile: str | None = None  # --profile: the JSON to write (hgemm_bench/profile.py)
    ladder_doc: str | None = None  # --ladder-doc: the profile JSON to render (hgemm_bench/ladder_doc.py)
    ladder_doc_out: str = "docs/ladder.md"

    def settings_record(self) -> dict:
        """What a results file records about how it was measured."""
        return {
            "shapes": [list(s) for s in self.shapes],
            "groups": sorted(k for k, v in self.groups.items() if v),
            "all": self.all, "default": self.default, "kernels": self.kernels, "cublas": self.cublas,
            "warmup": self.warmup, "iters": self.iters, "budget_s": self.budget,
            "check_rows": self.check_rows, "topk": self.topk, "seed": self.seed,
            "timing": "CUDA events, median; L2 flushed (memset of 2x L2) before every timed run",
            **({"protocol": "steady", "rounds": self.steady, "warm_s": self.warm_s} if self.steady else {}),
        }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bench.py", description="Benchmark the hgemm kernels against cuBLAS.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sel = ap.add_argument_group("selection")
    for dest in GROUP_FLAGS:
        ladders, every = GROUP_FLAGS[dest]
        what = "every variant" if every else "default variant"
        sel.add_argument("--" + dest.replace("_", "-"), dest=dest, action="store_true",
                         help=f"kernels of ladder {'/'.join(ladders)}, {what}")
    sel.add_argument("--all", action="store_true", help="every kernel, every variant")
    sel.add_argument("--no-default", action="store_true", help="drop the default set")
    sel.add_argument("--kernels", metavar="PATTERN", help="comma-separated globs/substrings of kernel names")
    sel.add_argument("--no-cublas", action="store_true", help="do not run the cuBLAS baselines")
    sel.add_argument("--list", action="store_true", help="list the kernels, their groups and variants; no GPU")

    shp = ap.add_argument_group("shapes")
    shp.add_argument("--M", type=int)
    shp.add_argument("--N", type=int)
    shp.add_argument("--K", type=int)
    shp.add_argument("--MNK", type=int, help="one square shape M = N = K")
    shp.add_argument("--MMNK", type=int, help="square sweep up to this size")
    shp.add_argument("--SEP", type=int, help=f"step of the --MMNK sweep (default {DEFAULT_SEP})")

    msr = ap.add_argument_group("measurement")
    msr.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    msr.add_argument("--iters", type=int, default=20, help="timed runs per kernel and shape at most (default 20)")
    msr.add_argument("--budget", type=float, default=0.5,
                     help="seconds of warm-up + timed runs per kernel and shape at most (default 0.5)")
    msr.add_argument("--check-rows", type=int, default=128,
                     help="rows of C checked against float64 (0: all; default 128)")
    msr.add_argument("--seed", type=int, help="seed of the random inputs (default: fresh)")
    msr.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    msr.add_argument("--steady", nargs="?", type=int, const=STEADY_ROUNDS, metavar="ROUNDS",
                     help=f"steady-state protocol: warm up, then ROUNDS interleaved rounds (default {STEADY_ROUNDS}), "
                          "with SM clock and board power")
    msr.add_argument("--warm-s", type=float, help=f"with --steady: seconds of untimed launches first "
                                                  f"(default {STEADY_WARM_S})")

    out = ap.add_argument_group("outputs")
    out.add_argument("--plot", nargs="?", const="bench_tflops.png", metavar="PNG",
                     help="TFLOPS vs shape for the top-k kernels, cuBLAS and the per-shape best "
                          "(default file bench_tflops.png; needs matplotlib: pip install -e .[plot])")
    out.add_argument("--topk", type=int, default=5, help="kernels in the plot and the top list (default 5)")
    out.add_argument("--json", metavar="FILE", help="every measurement with device, driver, build and settings")
    out.add_argument("--csv", metavar="FILE", help="one line per measurement")

    mm = ap.add_argument_group("matmul (hgemm_rt.matmul against cuBLAS and torch)")
    mm.add_argument("--matmul", nargs="?", const=",".join(SECTIONS), metavar="SECTIONS",
                    help=f"run these matmul sections and exit: comma-separated of {', '.join(SECTIONS)} "
                         "(default all)")
    mm.add_argument("--only", metavar="REGEX",
                    help="with --matmul: only the shapes whose table text (e.g. '8192x8192x8192 f16 A row B col') "
                         "matches this regular expression; a section cut to a subset is not judged against its target")
    mm.add_argument("--autotune", action="store_true",
                    help="with --matmul: autotune every shape of the cuBLAS and batched sections first (writes the "
                         "tuning cache)")

    pf = ap.add_argument_group("profile (Nsight Compute over the ladders; docs/ladder.md)")
    pf.add_argument("--profile", nargs="?", const="ladder_profile.json", metavar="JSON",
                    help="run ncu over every rung of every ladder (default variant; the group flags and --kernels "
                         "narrow it) at one shape (--MNK, default 4096) and write its counters to JSON "
                         "(default ladder_profile.json)")
    pf.add_argument("--ladder-doc", metavar="PROFILE_JSON",
                    help="render docs/ladder.md and its roofline figure from a --profile JSON and exit (no GPU)")
    pf.add_argument("--ladder-doc-out", default="docs/ladder.md", metavar="MD",
                    help="the document --ladder-doc writes (default docs/ladder.md; the figure goes beside it)")

    rd = ap.add_argument_group("README (no GPU)")
    rd.add_argument("--readme", metavar="RESULTS_JSON",
                    help="regenerate the README results section from a results JSON and exit")
    rd.add_argument("--readme-shape", type=int, default=4096, help="square size of the ladder table (default 4096)")
    rd.add_argument("--readme-file", default="README.md", help="the README to update (default README.md)")
    rd.add_argument("--readme-images", default="docs", metavar="DIR",
                    help="where the section's images go (default docs; '' for none)")
    rd.add_argument("--plots", nargs="+", metavar="JSON",
                    help="draw the images of these results files (kernel bench or --matmul) and exit")
    rd.add_argument("--out", default=".", metavar="DIR", help="where --plots writes (default .)")
    return ap


def shapes_from(args: argparse.Namespace, error) -> list[tuple[int, int, int]]:
    dims = {"M": args.M, "N": args.N, "K": args.K}
    sizes = [v for v in (*dims.values(), args.MNK, args.MMNK, args.SEP) if v is not None]
    if any(v < 1 for v in sizes):
        error("sizes must be >= 1")
    if args.MMNK is not None:
        if args.MNK is not None or any(v is not None for v in dims.values()):
            error("--MMNK (a square sweep) does not combine with --MNK or --M/--N/--K")
        sep = args.SEP or DEFAULT_SEP
        if sep > args.MMNK:
            error(f"--SEP {sep} is larger than --MMNK {args.MMNK}: the sweep would be empty")
        return [(s, s, s) for s in range(sep, args.MMNK + 1, sep)]
    if args.SEP is not None:
        error("--SEP is the step of an --MMNK sweep")
    if any(v is not None for v in dims.values()):
        filled = {d: v if v is not None else args.MNK for d, v in dims.items()}
        missing = [d for d, v in filled.items() if v is None]
        if missing:
            error(f"--{'/--'.join(missing)} missing: give all of --M --N --K, or --MNK for the rest")
        return [(filled["M"], filled["N"], filled["K"])]
    if args.MNK is not None:
        return [(args.MNK,) * 3]
    return [(s, s, s) for s in DEFAULT_SWEEP]


def matmul_sections(args: argparse.Namespace, error) -> list[str]:
    """The --matmul sections in the order given, each once ([] without --matmul); --only checked against them."""
    if args.matmul is None:
        for dest in ("autotune", "only"):  # (their flags are --dest, as KERNEL_BENCH_ONLY's below)
            if getattr(args, dest) not in (None, False):
                error(f"--{dest} applies to --matmul")
        return []
    names = list(dict.fromkeys(n.strip() for n in args.matmul.split(",") if n.strip()))
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        error(f"--matmul: unknown section(s) {', '.join(unknown) or repr(args.matmul)}; "
              f"choose from {', '.join(SECTIONS)} (comma-separated)")
    given = ["--" + d.replace("_", "-") for d in KERNEL_BENCH_ONLY if getattr(args, d) not in (None, False)]
    if given:
        error(f"--matmul runs its own shapes and prints its own tables: it does not combine with {' '.join(given)}")
    if args.only is not None:
        try:
            chosen = [s for n in names for s in selected_shapes(SECTIONS[n], args.only)]
        except re.error as exc:
            error(f"--only {args.only!r}: not a regular expression ({exc})")
        if not chosen:
            error(f"--only {args.only!r} matches no shape of the section(s) {', '.join(names)} (a shape reads like "
                  f"{SECTIONS[names[0]].shapes[0].cell!r})")
    return names


def parse_args(argv: list[str] | None = None) -> Settings:
    ap = build_parser()
    args = ap.parse_args(argv)
    shapes = shapes_from(args, ap.error)
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    if not math.isfinite(args.budget) or args.budget <= 0:
        ap.error(f"--budget must be a finite number of seconds > 0, not {args.budget}")
    if args.topk < 1:
        ap.error("--topk must be >= 1")
    if args.check_rows < 0:
        ap.error("--check-rows must be >= 0")
    if args.seed is not None and args.seed < 0:  # (numpy's generators take none)
        ap.error(f"--seed must be >= 0, not {args.seed}")
    if args.readme_shape < 1:
        ap.error("--readme-shape must be >= 1")
    if args.steady is not None and args.steady < 1:
        ap.error("--steady needs at least 1 round")
    if args.warm_s is not None and (args.steady is None or not math.isfinite(args.warm_s) or args.warm_s < 0):
        ap.error("--warm-s is the warm-up of --steady, in seconds >= 0")
    sections = matmul_sections(args, ap.error)
    if args.plots and (args.readme or args.matmul is not None):
        ap.error("--plots draws from results files and exits: it does not combine with --readme or --matmul")
    patterns = [p.strip() for p in (args.kernels or "").split(",") if p.strip()]
    if args.kernels is not None and not patterns:
        ap.error("--kernels needs at least one pattern")
    return Settings(
        shapes=shapes,
        groups={k: bool(getattr(args, k)) for k in GROUP_FLAGS},
        all=args.all, default=not args.no_default, kernels=patterns, cublas=not args.no_cublas,
        warmup=args.warmup, iters=args.iters, budget=args.budget, check_rows=args.check_rows,
        topk=args.topk, plot=args.plot, json=args.json, csv=args.csv, seed=args.seed,
        progress=not args.no_progress, list_only=args.list, readme=args.readme,
        readme_shape=args.readme_shape, readme_file=args.readme_file, readme_images=args.readme_images,
        plots=args.plots or [], out=args.out,
        matmul=sections, autotune=args.autotune, only=args.only, steady=args.steady,
        warm_s=STEADY_WARM_S if args.warm_s is None else args.warm_s,
        profile=args.profile, ladder_doc=args.ladder_doc, ladder_doc_out=args.ladder_doc_out,
    )
