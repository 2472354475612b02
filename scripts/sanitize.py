#!/usr/bin/env python3
"""Run kernels under compute-sanitizer (memcheck, racecheck, synccheck, initcheck) and count errors.

    python scripts/sanitize.py                       # every kernel in the manifest, all four tools
    python scripts/sanitize.py --kernels 'hgemm_mma*' --tools memcheck,racecheck
    python scripts/sanitize.py --kernels 'util_*'    # only matmul's helper kernels

Each tool runs two child processes (`--child gemm|util`; all side by side, `--jobs`) that launch
every selected kernel at an aligned and a ragged shape on random inputs, checks each result against
float64, and prints which kernels it launched:

- catalogue GEMMs: every variant, the test suite's aligned and ragged shapes, into a NaN-poisoned C;
- the "util" kernels (util_copy2d_*, util_gemm_{mma,wgmma,simt}_*), which only hgemm_rt.matmul
  launches: through matmul's recipes (hgemm_rt.planner) on a few problems per dtype and shape class
  (plain; alpha/beta into a strided C; misaligned operands with odd leading dimensions). Of every
  plan matmul could run, the cheapest one that launches something not yet covered is run (a util
  kernel, a variant, split-K > 1, alpha/beta, a transposing or misaligned copy). The operands' row
  gaps and the bytes past their last element are never written, so initcheck / memcheck flag a
  kernel that reads them.

Exit status 1 if any tool reports an error, any result is wrong, a tool runs past --timeout, or a
selected kernel was not launched at both an aligned and a ragged shape.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
CLASSES = ("aligned", "ragged")


def _match(name: str, pattern: str | None) -> bool:
    return not pattern or fnmatch.fnmatch(name, pattern) or pattern in name


def selected_specs(manifest, pattern: str | None, util: bool):
    """The selected catalogue kernels (util=False) or matmul helper kernels (util=True)."""
    return [s for s in manifest.kernels.values() if (s.ladder == "util") == util and _match(s.name, pattern)]


# ---------------------------------------------------------------------------------------------------
# util kernels: problems for matmul's plans, and which plans to run (pure data, tested on the CPU)
# ---------------------------------------------------------------------------------------------------

# aligned: multiples of every util tile (BM <= 128, BN <= 256, BK = 64), 8 K tiles so that every split
# count has work; ragged: no dimension a multiple of 8, K = 5 tiles (split 8 leaves slices empty)
UTIL_SHAPES = {"aligned": (256, 256, 512), "ragged": (97, 141, 261)}


@dataclass(frozen=True)
class Operand:
    """How one operand sits in its buffer: `order` row | col, `offset` elements in, `pad` extra
    elements per leading dimension."""

    order: str = "row"
    offset: int = 0
    pad: int = 0

    def strides(self, rows: int, cols: int) -> tuple[int, int]:
        return (cols + self.pad, 1) if self.order == "row" else (1, rows + self.pad)


@dataclass(frozen=True)
class UtilCase:
    dtype: str
    shape: str  # "aligned" | "ragged"
    what: str
    a: Operand
    b: Operand
    c: Operand
    alpha: float
    beta: float

    @property
    def MNK(self) -> tuple[int, int, int]:
        return UTIL_SHAPES[self.shape]

    def views(self):
        from hgemm_rt import problem

        M, N, K = self.MNK
        isz = problem.ITEMSIZE[self.dtype]
        out = []
        for base, op, (rows, cols) in (("A", self.a, (M, K)), ("B", self.b, (K, N)), ("C", self.c, (M, N))):
            rs, cs = op.strides(rows, cols)
            # buffers come from cuMemAlloc (256-byte aligned): the view's alignment is its offset's
            out.append(problem.View.make(base, rows, cols, rs, cs, problem.ptr_alignment(op.offset * isz)))
        return out

    def problem(self):
        from hgemm_rt import problem

        a, b, c = self.views()
        return problem.Problem(self.dtype, "f32", a, b, c, plain=self.alpha == 1.0 and self.beta == 0.0,
                                beta_zero=self.beta == 0.0)

    def __str__(self) -> str:
        return f"{self.dtype} {self.shape} {'x'.join(map(str, self.MNK))} {self.what}"


def util_cases(dtypes) -> list[UtilCase]:
    row = Operand()
    cases = []
    for dtype in dtypes:
        for shape in CLASSES:
            cases += [
                UtilCase(dtype, shape, "plain", row, row, row, 1.0, 0.0),
                UtilCase(dtype, shape, "alpha/beta, column-major strided C", row, row, Operand("col", 0, 3), -2.0,
                         0.25),
                # rows start off 16-byte boundaries and have odd lengths: copies take load16_any's
                # misaligned path right up to each row's gap
                UtilCase(dtype, shape, "misaligned A, column-major B, offset C, alpha", Operand("row", 1, 3),
                         Operand("col", 3, 5), Operand("row", 1, 1), 0.5, 0.0),
            ]
            _M, N, K = UTIL_SHAPES[shape]
            if K % 8 or N % 8:  # ragged rows padded to 16 bytes: TMA maps of A and B in place
                cases.append(UtilCase(dtype, shape, "row-major, leading dimensions padded to 8",
                                      Operand("row", 0, -K % 8), Operand("row", 0, -N % 8), row, 1.0, 0.0))
    return cases


def _cfast(v) -> bool:
    return abs(v.cs) <= abs(v.rs)


def plan_keys(plan, prob, shape: str, manifest) -> set[tuple[str, str, str]]:
    """(kernel, feature, shape class) for every util kernel a plan launches; feature "" is the
    launch itself, then its variant, split-K, alpha/beta, transposing / misaligned copies."""
    from hgemm_rt.problem import Copy

    keys = set()
    for s in plan.steps:
        if isinstance(s, Copy):
            name = s.kernel
            feats = {""}
            if _cfast(s.src) != _cfast(s.dst):
                feats.add("transposing")
            if s.src.align < 16:
                feats.add("misaligned source")
            if s.epilogue and not prob.plain:
                feats.add("alpha/beta")
        elif manifest.kernels[s.kernel].ladder == "util":
            name = s.kernel
            feats = {""} | {f"{k}={v}" for k, v in s.variant}
            if s.splits > 1:
                feats.add("split-K")
            if not prob.plain:
                feats.add("alpha/beta")
        else:
            continue
        keys |= {(name, f, shape) for f in feats}
    return keys


def util_schedule(manifest, cc: tuple[int, int], sm_count: int, names: set[str]):
    """[(case, plan)] to run, and the keys they cover: per case, matmul's plans cheapest first, each
    taken only if it covers a key of a selected kernel that no earlier plan covered."""
    from hgemm_rt import planner

    dtypes = sorted({manifest.kernels[n].dtype for n in names})
    covered: set = set()
    out = []
    for case in util_cases(dtypes):
        prob = case.problem()
        for _est, plan in planner.ranked_recipes(prob, manifest, cc, sm_count):
            new = {k for k in plan_keys(plan, prob, case.shape, manifest) if k[0] in names} - covered
            if new:
                out.append((case, plan))
                covered |= new
    return out, covered


def tma_stored_temps(plan, manifest) -> list[str]:
    """Temporaries a GEMM of the plan writes with TMA stores (a `tmap:C` kernel) for a later copy to read.

    initcheck does not see the global writes of cp.async.bulk.tensor (TMA) stores: the copy-out that
    reads such a tC back is reported as reading uninitialised memory although the kernel wrote all of
    it (H200: every read of tC after the hgemm_sm90 kernels with a TMA-store epilogue; none
    after the kernels that store with st.global). The runner fills these temporaries with NaN first:
    initialised for the tool, and a wrong result if the kernel leaves any element unwritten."""
    from hgemm_rt.problem import Gemm

    return [s.c.base for s in plan.steps if isinstance(s, Gemm) and s.c.base not in ("A", "B", "C")
            and "tmap:C" in manifest.kernels[s.kernel].params]


def util_names(manifest, pattern: str | None, cc: tuple[int, int]) -> tuple[set[str], list[str]]:
    """(selected util kernels runnable on cc, the selected ones with no build for it)."""
    from hgemm_rt.errors import NotBuiltForDeviceError

    runnable, unbuilt = set(), []
    for spec in selected_specs(manifest, pattern, util=True):
        try:
            manifest.select(spec, cc)
            runnable.add(spec.name)
        except NotBuiltForDeviceError:
            unbuilt.append(spec.name)
    return runnable, sorted(unbuilt)


def missing(names, covered) -> list[str]:
    """Selected util kernels not launched at both shape classes."""
    return [f"{n} ({c})" for n in sorted(names) for c in CLASSES if (n, "", c) not in covered]


# ---------------------------------------------------------------------------------------------------
# child: launch and check
# ---------------------------------------------------------------------------------------------------

def _to_bits(x, dtype: str):
    """float64 values -> (storage array of `dtype`, the exact float64 values it holds)."""
    import numpy as np

    x32 = np.asarray(x, np.float32)
    if dtype == "bf16":  # round to nearest even on the top 16 bits (numpy has no bfloat16)
        u = x32.view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    v = x32.astype(np.float16 if dtype == "f16" else np.float32)
    return v, v.astype(np.float64)


class Buffer:
    """A case's operand on the GPU in a buffer of exactly the view's extent. Inputs: only the view's
    elements are ever written (row by row), so any read of a gap or past the end is uninitialised
    or out of bounds. Output: the whole buffer holds `fill` (NaN), so a write outside the view shows."""

    def __init__(self, values, dtype: str, op: Operand, output: bool):
        import numpy as np

        import hgemm_rt as hg
        from hgemm_rt._driver import check, driver
        from hgemm_rt.dtypes import ITEMSIZE

        self.check, self.drv = check, driver()
        rows, cols = values.shape
        rs, cs = op.strides(rows, cols)
        self.isz = ITEMSIZE[dtype]
        n = op.offset + (rows - 1) * rs + (cols - 1) * cs + 1
        store, self.exact = _to_bits(values, dtype)
        self.buf = hg.empty((n,), dtype)
        self.idx = op.offset + np.arange(rows)[:, None] * rs + np.arange(cols)[None, :] * cs
        if output:
            self.host = _to_bits(np.full(n, np.nan), dtype)[0]
            self.host[self.idx] = store
            self.upload()
        else:
            lines = store if op.order == "row" else store.T  # contiguous runs in memory
            for i, line in enumerate(np.ascontiguousarray(lines)):
                addr = self.buf.ptr + (op.offset + i * (rs if op.order == "row" else cs)) * self.isz
                check(self.drv.cuMemcpyHtoD(addr, line.ctypes.data, line.nbytes), "cuMemcpyHtoD")
        self.view = hg.DeviceArray(self.buf.ptr + op.offset * self.isz, (rows, cols), dtype,
                                   (rs * self.isz, cs * self.isz), owner=self.buf)

    def upload(self) -> None:
        self.check(self.drv.cuMemcpyHtoD(self.buf.ptr, self.host.ctypes.data, self.host.nbytes), "cuMemcpyHtoD")

    def download(self):
        import numpy as np

        import hgemm_rt as hg

        out = np.empty_like(self.host)
        hg.get_device().synchronize()
        self.check(self.drv.cuMemcpyDtoH(out.ctypes.data, self.buf.ptr, out.nbytes), "cuMemcpyDtoH")
        return out


def run_util(names: set[str]) -> tuple[int, int, set]:
    """Run util_schedule on the GPU; returns (wrong results, launches, covered keys)."""
    import numpy as np

    import hgemm_rt as hg
    from hgemm_rt import planner
    from hgemm_rt.executor import Execution
    from hgemm_rt.problem import problem_of_arrays
    from hgemm_rt.testing import error_floor, rel_error

    dev = hg.get_device()
    manifest = hg.get_registry().manifest
    sched, _ = util_schedule(manifest, dev.info.cc, dev.info.sm_count, names)
    rng = np.random.default_rng()
    bad = launches = 0
    covered: set = set()
    bufs: dict = {}
    for case, plan in sched:
        if case not in bufs:
            M, N, K = case.MNK
            c0 = rng.standard_normal((M, N)) if case.beta else np.full((M, N), np.nan)  # beta == 0: C is poison
            bufs.clear()  # one case's buffers at a time
            bufs[case] = [Buffer(rng.standard_normal((M, K)), case.dtype, case.a, False),
                          Buffer(rng.standard_normal((K, N)), case.dtype, case.b, False),
                          Buffer(c0, case.dtype, case.c, True)]
        A, B, C = bufs[case]
        prob = problem_of_arrays(A.view, B.view, C.view, "f32", case.alpha, case.beta)
        if prob.key() != case.problem().key():  # the plan was chosen for these exact views
            raise RuntimeError(f"{case}: views {prob.key()} differ from the planned {case.problem().key()}")
        C.upload()
        runnable = Execution(plan, case.dtype, dev.info.ordinal, manifest)
        for name in tma_stored_temps(plan, manifest):
            runnable.temps[name].fill_bytes(0xFF)  # NaN: the kernel must overwrite every element read later
        runnable.run((A.view.ptr, B.view.ptr, C.view.ptr), case.alpha, case.beta, 0)
        now = C.download()
        runnable.close()
        got = now[C.idx].astype(np.float64) if case.dtype != "bf16" else _to_f64_bf16(now[C.idx])
        ref = case.alpha * (A.exact @ B.exact) + (case.beta * C.exact if case.beta else 0.0)
        err, bound = rel_error(got, ref), error_floor(case.dtype, "f32", case.dtype, case.MNK[2])
        outside = np.ones(now.shape, bool)
        outside[C.idx] = False
        ok = err <= bound and np.array_equal(now[outside].view(np.uint8), C.host[outside].view(np.uint8))
        bad += not ok
        launches += len(plan.steps)
        covered |= {k for k in plan_keys(plan, prob, case.shape, manifest) if k[0] in names}
        print(f"{'ok ' if ok else 'BAD'} {planner.describe(plan)} | {case} err={err:.2e} launches={len(plan.steps)}",
              flush=True)
    bufs.clear()
    return bad, launches, covered


def _to_f64_bf16(bits):
    import numpy as np

    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def child_gemm(pattern: str | None) -> tuple[int, int, set, list[str]]:
    """Every selected catalogue kernel, every variant, at its aligned and ragged test shapes."""
    import numpy as np
    from kernel_cases import shapes_for

    import hgemm_rt as hg
    from hgemm_rt.testing import run_checked

    rng = np.random.default_rng()
    cc = hg.get_device().info.cc
    specs = selected_specs(hg.get_registry().manifest, pattern, util=False)
    bad = launches = 0
    launched = set()
    for spec in specs:
        entry = hg.get_kernel(spec.name)
        for label, M, N, K in shapes_for(spec)[:2]:  # aligned, ragged
            if entry.supports(M, N, K, cc) is not None:
                continue
            for choice in spec.variant_choices():
                r = run_checked(entry, M, N, K, rng, with_cublas=False, **choice)
                ok = r["error"] <= r["bound"]
                bad += not ok
                launches += 1
                launched.add((spec.name, label))
                print(f"{'ok ' if ok else 'BAD'} {spec.name} {choice} {label} {M}x{N}x{K} err={r['error']:.2e}",
                      flush=True)
    holes = [f"{s.name} ({c})" for s in specs for c in CLASSES if (s.name, c) not in launched]
    return bad, launches, {n for n, _ in launched}, holes


def child_util(pattern: str | None) -> tuple[int, int, set, list[str]]:
    import hgemm_rt as hg

    cc = hg.get_device().info.cc
    names, unbuilt = util_names(hg.get_registry().manifest, pattern, cc)
    if unbuilt:
        print(f"not built for sm_{cc[0]}{cc[1]} (skipped): {', '.join(unbuilt)}")
    if not names:
        return 0, 0, set(), []
    bad, launches, covered = run_util(names)
    feats = sorted((k, f, c) for k, f, c in covered if f)
    print(f"util features covered: {len(feats)}: " + "; ".join(f"{k} {f} ({c})" for k, f, c in feats))
    return bad, launches, {k for k, _f, _c in covered}, missing(names, covered)


PARTS = {"gemm": child_gemm, "util": child_util}


def child(pattern: str | None, part: str) -> int:
    """One part's kernels: one line per launch (or matmul plan), then what was launched."""
    bad, launches, kernels, holes = PARTS[part](pattern)
    print(f"LAUNCHED kernels={len(kernels)} launches={launches}")
    if holes:
        print(f"NOT LAUNCHED at both an aligned and a ragged shape ({len(holes)}): " + ", ".join(holes))
    return 1 if bad or holes else 0


# ---------------------------------------------------------------------------------------------------
# parent: one sanitizer process per tool
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", metavar="PATTERN")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--jobs", type=int, default=2 * len(TOOLS),
                    help="sanitizer processes side by side: one per tool and part (catalogue, util)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per process before it counts as failed")
    ap.add_argument("--sanitizer", default=os.environ.get("HGEMM_SANITIZER") or shutil.which("compute-sanitizer"))
    ap.add_argument("--log-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    ap.add_argument("--child", choices=sorted(PARTS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.kernels, args.child)
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tool(s) {sorted(unknown)}; choose from {', '.join(TOOLS)}")
    if not args.sanitizer:
        print("sanitize.py: compute-sanitizer not found (set HGEMM_SANITIZER)", file=sys.stderr)
        return 2
    from hgemm_rt.manifest import Manifest

    manifest = Manifest.load(os.environ.get("HGEMM_ARTIFACTS") or ROOT / "artifacts")
    n = {part: len(selected_specs(manifest, args.kernels, util=part == "util")) for part in PARTS}
    print(f"{sum(n.values())} kernels ({n['gemm']} catalogue, {n['util']} util), tools: {', '.join(tools)}",
          flush=True)
    args.log_dir.mkdir(parents=True, exist_ok=True)
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
            cmd += [sys.executable, __file__, "--child", part] + (["--kernels", args.kernels] if args.kernels else [])
            with open(args.log_dir / f"sanitize_{tool}_{part}.log", "w") as log:
                # own session: a timeout ends the sanitizer and the child it started, nothing else
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
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
