"""`python bench.py --profile [JSON]`: Nsight Compute over every rung of every ladder (default variant)
at one shape, one JSON out (the card, the ncu version, per kernel the counters of hgemm_bench/counters.py).

The run is a few batches, one ncu process each (a ladder, or one cuBLAS reference): ncu starts
`python -m hgemm_bench.profile launch SPEC`, which launches each kernel of the batch once on random
N(0,1) operands and records what it launched; ncu profiles exactly those functions (a regex of their
symbols) with one metric list in kernel-replay mode, clocks locked to base and caches flushed before
every pass. Each batch leaves its files in `<JSON stem>.ncu/` (spec, launch record, ncu's CSV and
log), and the JSON is assembled from them, so it can be rebuilt without a GPU:
`python -m hgemm_bench.profile rebuild JSON`.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hgemm_rt.declaration import variant_symbol

from . import counters as ct
from . import ncu
from .cli import DEFAULT_SWEEP, GROUP_FLAGS, Settings
from .selection import aliases_of, ladder_rank, matches, unmatched_message

SCHEMA = "hgemm-ladder-profile/1"
ROOT = Path(__file__).resolve().parent.parent
PROFILE_SHAPE = (4096, 4096, 4096)
# Wall-clock budget of the whole run (a lent GPU gives one call 8 minutes); a batch that would start
# with less than MIN_BATCH_S left is recorded as not profiled instead.
BUDGET_S = 420.0
MIN_BATCH_S = 20.0
# Ladders in the order their batches run: the small ones first (a metric this ncu lacks shows up on
# a one-kernel batch), the slow CUDA-core ladders last.
BATCH_ORDER = ("cute", "hopper", "mma", "wmma", "cuda", "sgemm")
# One cuBLAS row per input type, the accumulation frameworks use; in a batch of its own, where every
# kernel launched is cuBLAS's.
CUBLAS_REFERENCES = {"f16": ("hgemm_cublas_tensor_op_tn", "f32"), "f32": ("sgemm_cublas", "f32")}


@dataclass
class Batch:
    name: str
    kernels: list[str] = field(default_factory=list)  # catalogue names, launched in this order
    symbols: list[str] = field(default_factory=list)  # their functions at the default variant
    cublas: tuple[str, str] | None = None  # (baseline name, acc): the batch is this one cuBLAS call


def rungs(entries: list[Any], s: Settings) -> list[Any]:
    """The kernels to profile: every rung of every ladder, or of the ladders the group flags name,
    narrowed by --kernels; in ladder order."""
    kernels = [e for e in entries if not e.is_baseline and e.catalogue]
    if not s.all and any(s.groups.values()):
        ladders = {lad for flag, on in s.groups.items() if on for lad in GROUP_FLAGS[flag][0]}
        kernels = [e for e in kernels if e.ladder in ladders]
    if s.kernels:
        kernels = [e for e in kernels if matches(e.name, s.kernels, aliases_of(e))]
    return sorted(kernels, key=lambda e: (ladder_rank(e.ladder), e.ladder, e.step, e.name))


def plan(kernels: list[Any], cublas: bool) -> list[Batch]:
    by_ladder: dict[str, Batch] = {}
    for e in kernels:
        batch = by_ladder.setdefault(e.ladder, Batch(e.ladder))
        batch.kernels.append(e.name)
        batch.symbols.append(variant_symbol(e.spec.name, e.spec.resolve_variant({})))
    order = sorted(by_ladder, key=lambda lad: (BATCH_ORDER.index(lad) if lad in BATCH_ORDER else -1, lad))
    batches = [by_ladder[lad] for lad in order]
    if cublas:
        dtypes = {"f32" if e.dtype == "f32" else "f16" for e in kernels}
        refs = [Batch(f"cublas_{d}", cublas=CUBLAS_REFERENCES[d]) for d in CUBLAS_REFERENCES if d in dtypes]
        # before the CUDA-core ladders: their slow kernels are what a short budget should lose
        at = next((i for i, b in enumerate(batches) if b.name in ("cuda", "sgemm")), len(batches))
        batches[at:at] = refs
    return batches


# -- the launcher ncu profiles (runs under ncu, on the GPU) ----------------------------------------

def kernel_config(e: Any, choice: dict, symbol: str, stride: int | None, cc: tuple[int, int]) -> dict:
    """What the ladder doc compares between rungs: the kernel's declaration at this variant, and the
    ptxas figures of the cubin this GPU runs."""
    spec = e.spec
    sel = e.manifest.select(spec, cc)
    info = None if sel.is_ptx else spec.builds[sel.arch].symbols.get(symbol)
    return {
        "layout": spec.layout, "a_order": spec.a_order, "dtype": spec.dtype, "acc": spec.acc_for(choice),
        "out": spec.out, "block": list(spec.block), "tile": list(spec.tile), "grid": spec.grid,
        "cluster": list(spec.cluster), "variant": dict(choice), "swizzle_stride": stride,
        "dsmem": spec.dsmem_bytes(choice), "static_smem": info.static_smem if info else None,
        "ptxas_registers": info.registers if info else None, "cubin_arch": sel.arch,
        "params": list(spec.params), "sass": list(spec.sass), "technique": spec.technique,
    }


def launch_batch(spec: dict) -> dict:
    """Launch each kernel of the batch once (default variant, thread-block swizzle where it has one)
    and return what ran: symbol and grid per kernel, or why it did not."""
    import numpy as np

    import hgemm_rt as hg

    from .devinfo import device_record
    from .measure import ShapeInputs, Skip, launch_options
    from .selection import expand

    M, N, K = spec["shape"]
    dev = hg.get_device()
    device = device_record(dev)
    registry = hg.get_registry()
    inp = ShapeInputs(M, N, K, np.random.default_rng(spec["seed"]), check_rows=1)
    records = []
    try:
        for name in spec["kernels"]:
            e = registry.get(name)
            case = expand(e, False)[0]
            rec: dict[str, Any] = {"name": e.name, "ladder": e.ladder, "step": int(e.step), "label": case.label,
                                   "baseline": False}
            try:
                reason = e.supports(M, N, K, dev.info.cc)
                if reason is not None:
                    raise Skip(reason)
                opts, stride = launch_options(case, N)
                A, B = inp.operands(e.layout, e.dtype, e.a_order)
                cfg = e(A, B, inp.output(e.out), **opts)
                dev.synchronize()
                rec.update(status="launched", symbol=cfg.symbol, grid=list(cfg.grid),
                           config=kernel_config(e, dict(case.variant), cfg.symbol, stride, dev.info.cc))
            except Skip as exc:
                rec.update(status="skipped", reason=str(exc))
            except (hg.HgemmError, RuntimeError, ValueError) as exc:
                rec.update(status="error", reason=f"{type(exc).__name__}: {exc}")
            records.append(rec)
        if spec.get("cublas"):
            name, acc = spec["cublas"]
            e = registry.get(name)
            A, B = inp.operands(e.layout, e.dtype)
            rec = {"name": e.name, "ladder": "cublas", "step": 0, "label": f"acc={acc}", "baseline": True,
                   "config": {"layout": e.layout, "a_order": "row", "dtype": e.dtype, "acc": acc, "out": e.out,
                              "technique": e.technique}}
            try:
                e(A, B, inp.output(e.out), acc=acc)
                dev.synchronize()
                rec["status"] = "launched"
            except (hg.HgemmError, RuntimeError, ValueError) as exc:
                rec.update(status="error", reason=f"{type(exc).__name__}: {exc}")
            records.append(rec)
    finally:
        try:
            inp.close()
        except (hg.HgemmError, RuntimeError):
            pass  # a kernel that broke the context breaks the frees too; the record says which
    return {"device": device, "launches": records}


def launch_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    record = launch_batch(spec)
    Path(spec["record"]).write_text(json.dumps(record, indent=1))
    return 0


# -- running the batches under ncu (the parent process) --------------------------------------------

@dataclass
class BatchRun:
    name: str
    returncode: int | None
    elapsed_s: float
    timed_out: bool = False


def workdir_of(json_path: str | Path) -> Path:
    p = Path(json_path)
    return p.with_name(p.stem + ".ncu")


def files_of(workdir: Path, batch: str) -> dict[str, Path]:
    return {k: workdir / f"{batch}.{k}" for k in ("spec.json", "record.json", "csv", "log")}


def run_batch(exe: str, batch: Batch, metrics: list[str], shape: tuple[int, int, int], workdir: Path, seed: int,
              timeout_s: float) -> BatchRun:
    f = files_of(workdir, batch.name)
    for p in (f["record.json"], f["csv"]):
        p.unlink(missing_ok=True)
    spec = {"shape": list(shape), "kernels": batch.kernels, "cublas": batch.cublas, "seed": seed,
            "record": str(f["record.json"])}
    f["spec.json"].write_text(json.dumps(spec, indent=1))
    # a cuBLAS batch launches nothing but the cuBLAS call: every kernel it runs is profiled
    regex = ncu.symbol_regex(batch.symbols) if batch.cublas is None else None
    target = [sys.executable, "-m", "hgemm_bench.profile", "launch", str(f["spec.json"])]
    cmd = ncu.command(exe, metrics, regex, str(f["csv"]), target)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    t0 = time.monotonic()
    with open(f["log"], "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                                start_new_session=True)  # its own process group: a timeout ends ncu and the child
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, timed_out = None, True
    return BatchRun(batch.name, rc, time.monotonic() - t0, timed_out)


def read_text(p: Path) -> str:
    return p.read_text(errors="replace") if p.exists() else ""


def batch_output(workdir: Path, batch: str) -> tuple[list[ncu.Launch], str]:
    """The launches ncu profiled in a batch and its whole text output (CSV file and log)."""
    f = files_of(workdir, batch)
    text = read_text(f["csv"]) + "\n" + read_text(f["log"])
    return ncu.parse_raw(read_text(f["csv"]) or read_text(f["log"])), text


def batch_names(batch: Batch) -> list[str]:
    return list(batch.kernels) + ([batch.cublas[0]] if batch.cublas else [])


def launched(workdir: Path, batch: str) -> int | None:
    """How many kernels the batch's launcher says it launched (None: it wrote no record)."""
    f = files_of(workdir, batch)["record.json"]
    if not f.exists():
        return None
    return sum(r["status"] == "launched" for r in json.loads(f.read_text())["launches"])


def unknown_metrics(exe: str, text: str, metrics: list[str]) -> list[str]:
    """The metrics to drop after a batch that profiled nothing: those ncu's errors name, else those
    `ncu --query-metrics` does not list."""
    named = [m for m in ncu.metrics_named_in_errors(text, metrics) if m not in ct.ALWAYS_THERE]
    if named:
        return named
    listed = ncu.query_metric_names(exe)
    if not listed or len(listed) < 50:  # nothing trustworthy to go by
        return []
    return [m for m in metrics if m not in ct.ALWAYS_THERE and m.split(".")[0] not in listed]


def run_all(exe: str, batches: list[Batch], shape: tuple[int, int, int], workdir: Path, seed: int) -> dict:
    """Every batch within the budget; what ran, what was dropped and why (the "ncu" part of the JSON
    lacks only the path and version)."""
    metrics = list(ct.METRICS.values())
    dropped: dict[str, str] = {}
    runs: list[dict] = []
    deadline = time.monotonic() + BUDGET_S
    for i, batch in enumerate(batches):
        left = deadline - time.monotonic()
        if left < MIN_BATCH_S:
            runs.append({"batch": batch.name, "kernels": batch_names(batch),
                         "skipped": f"the {BUDGET_S:.0f} s budget ran out"})
            print(f"  {batch.name}: not profiled, the time budget ran out", flush=True)
            continue
        for attempt in (1, 2):
            run = run_batch(exe, batch, metrics, shape, workdir, seed, left)
            launches, text = batch_output(workdir, batch.name)
            ncu.check_permission(text)
            if launches or run.timed_out or attempt == 2:
                break
            unknown = unknown_metrics(exe, text, metrics)
            if not unknown:
                break
            for m in unknown:
                dropped[m] = "this ncu or GPU does not have it"
            metrics = [m for m in metrics if m not in unknown]
            print(f"  {batch.name}: ncu refused {len(unknown)} metric(s) ({', '.join(unknown)}); again without",
                  flush=True)
            left = deadline - time.monotonic()
        errors = ncu.error_lines(text)[:5]
        runs.append({"batch": batch.name, "kernels": batch_names(batch),
                     "returncode": run.returncode, "timed_out": run.timed_out, "elapsed_s": round(run.elapsed_s, 1),
                     "profiled": len(launches), "errors": errors})
        status = "timed out" if run.timed_out else f"{len(launches)} launch(es) profiled"
        print(f"  [{i + 1}/{len(batches)}] {batch.name}: {status} in {run.elapsed_s:.0f} s"
              + (f"; {errors[0]}" if errors and not launches else ""), flush=True)
        if i == 0 and not launches and not run.timed_out and launched(workdir, batch.name) != 0:
            # the same would happen to every batch: stop here with what went wrong
            last = [ln for ln in text.splitlines() if ln.strip()][-1:] or [""]
            raise ncu.NcuError(f"ncu profiled nothing in the first batch ({batch.name}): "
                               f"{errors[0] if errors else last[0].strip()} (log: {files_of(workdir, batch.name)['log']})")
    return {"metrics": metrics, "dropped": dropped, "batches": runs}


# the counters a reader of the JSON wants without hgemm_bench (the doc derives everything from "metrics")
HEADLINE = ("tflops", "time_ms", "sm_clock_mhz", "registers", "occupancy_theoretical", "occupancy_achieved",
            "smem_bank_conflicts", "smem_ld_wavefronts_per_inst", "global_ld_sectors_per_req",
            "global_st_sectors_per_req", "l2_pct", "l2_hit_pct", "l2_mb", "dram_pct", "dram_mb", "tensor_pipe_pct",
            "simt_pipe_pct")


def headline(metrics: dict, shape: list[int]) -> dict:
    d = ct.derive(metrics, shape)
    return {**{key: d[key] for key in HEADLINE}, "occupancy_limiter": ct.occupancy_limiter(metrics),
            "top_stalls": [[reason, share] for reason, share in ct.top_stalls(d)]}


def function_name(kernel: str) -> str:
    """'hgemm_naive_f16' from ncu's kernel name, with or without a parameter list."""
    return kernel.split("(")[0].strip()


def assemble(workdir: Path, meta: dict) -> dict:
    """The profile JSON from a run's files: each launch record joined with ncu's row for its symbol
    (a cuBLAS batch: the longest of the kernels cuBLAS launched)."""
    device = None
    kernels: list[dict] = []
    units: dict[str, str] = {}
    wanted = set(meta["ncu"]["metrics"])
    for run in meta["ncu"]["batches"]:
        f = files_of(workdir, run["batch"])
        if "skipped" in run or not f["record.json"].exists():
            for name in run.get("kernels", []):
                kernels.append({"name": name, "status": "not profiled",
                                "reason": run.get("skipped") or "the launcher wrote no record (see the batch log)"})
            continue
        record = json.loads(f["record.json"].read_text())
        device = device or record["device"]
        launches, text = batch_output(workdir, run["batch"])
        passes = ncu.passes(text)
        for launch in launches:
            units.update({m: u for m, u in launch.units.items() if m in wanted})
        for rec in record["launches"]:
            k = dict(rec)
            if rec["status"] == "launched":
                if rec["baseline"]:
                    rows = sorted(launches, key=lambda L: -(L.metrics.get(ct.METRICS["time"]) or 0.0))
                    k["ncu_kernels"] = [L.kernel for L in launches]
                else:
                    rows = [L for L in launches if function_name(L.kernel) == rec["symbol"]]
                if rows:
                    row = rows[0]
                    k["status"] = "ok"
                    k["ncu_kernel"] = row.kernel
                    k["passes"] = next((n for name, n in passes if function_name(name) == function_name(row.kernel)),
                                       None)
                    k["metrics"] = {m: v for m, v in row.metrics.items() if m in wanted}
                    k["summary"] = headline(k["metrics"], meta["shape"])
                else:
                    k["status"] = "not profiled"
                    k["reason"] = ("ncu recorded no launch of it (timed out?)" if run.get("timed_out")
                                   else "ncu recorded no launch of it")
            kernels.append(k)
    ncu_meta = dict(meta["ncu"])
    ncu_meta["units"] = units
    return {**{k: v for k, v in meta.items() if k != "ncu"}, "schema": SCHEMA, "device": device, "ncu": ncu_meta,
            "kernels": kernels}


def validate(doc: Any) -> list[str]:
    """Problems with a profile document ([] when it can be rendered)."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    problems = [f"missing {k!r}" for k in ("schema", "shape", "device", "ncu", "kernels") if k not in doc]
    if problems:
        return problems
    if doc["schema"] != SCHEMA:
        problems.append(f"schema {doc['schema']!r} is not {SCHEMA!r}")
    for i, k in enumerate(doc["kernels"]):
        if not isinstance(k, dict) or "name" not in k or "status" not in k:
            problems.append(f"kernels[{i}]: needs name and status")
        elif k["status"] == "ok" and not isinstance(k.get("metrics"), dict):
            problems.append(f"kernels[{i}] ({k['name']}): status ok without metrics")
    return problems


def load(path: str | Path) -> dict:
    doc = json.loads(Path(path).read_text())
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path}: not a ladder profile: {'; '.join(problems[:5])}")
    return doc


def write(doc: dict, path: str | Path) -> None:
    text = json.dumps(doc, indent=1, allow_nan=False)
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


def summary(doc: dict) -> str:
    """A table per ladder for the terminal: TFLOPS and the headline counters."""
    from .tables import tabulate

    rows = []
    for k in doc["kernels"]:
        if k["status"] != "ok":
            rows.append([k.get("ladder", "?"), k.get("step", ""), k["name"], k["status"], "", "", "", "", ""])
            continue
        d = ct.derive(k["metrics"], doc["shape"])
        top = ", ".join(f"{r} {v:.0f}%" for r, v in ct.top_stalls(d, 2))

        def f(key: str, spec: str = ".0f") -> str:
            return "-" if d[key] is None else format(d[key], spec)

        rows.append([k["ladder"], k["step"] or "", k["name"], f("tflops", ".1f"), f("occupancy_achieved"),
                     f("smem_bank_conflicts", ".3g"), f("tensor_pipe_pct"), f("dram_pct"), top])
    return tabulate(rows, headers=["ladder", "step", "kernel", "TFLOPS", "occ %", "bank confl.", "tensor %",
                                   "DRAM %", "top stalls"])


def err(msg: str) -> None:
    print(f"bench.py: {msg}", file=sys.stderr)


UNKNOWN_COMMIT = "unknown"


def build_of(registry: Any, build_record: Callable[[Any], dict], commit: Callable[[], "str | None"]) -> dict:
    """What a profile records about the build: the results' build record, with the commit that git
    itself reports for this checkout (`commit()`), or "unknown" where git cannot tell (no git, a tree
    copied without .git). $HGEMM_GIT_COMMIT is not taken here: nothing checks it against the tree,
    and a stale value names the wrong source for every number of the doc."""
    return {**build_record(registry), "git": commit() or UNKNOWN_COMMIT}


def profile_mode(s: Settings, command: str, build_record: Callable[[Any], dict],
                 commit: Callable[[], "str | None"]) -> int:
    """--profile: 0 every kernel profiled, 1 no GPU, 2 no ncu / no permission / bad flags or build, 3
    some kernel not profiled (the JSON says which and why). `build_record(registry)` is what a results
    file records about the build and `commit()` the checkout's commit from git alone, None without
    it (hgemm_bench.main's); see build_of."""
    exe = ncu.find_ncu()
    if exe is None:
        err(f"--profile: {ncu.MISSING}")
        return 2
    if len(s.shapes) != 1 and s.shapes != [(n, n, n) for n in DEFAULT_SWEEP]:
        err("--profile measures one shape: give --MNK or --M/--N/--K")
        return 2
    shape = s.shapes[0] if len(s.shapes) == 1 else PROFILE_SHAPE
    import hgemm_rt as hg

    if not hg.gpu_available():
        err("--profile: no CUDA GPU on this machine")
        return 1
    try:
        registry = hg.get_registry()
    except hg.ManifestError as exc:
        err(str(exc))
        return 2
    unmatched = unmatched_message(registry.kernels(), s.kernels)
    if unmatched:
        err(f"--profile: {unmatched}")
        return 2
    kernels = rungs(registry.kernels(), s)
    if not kernels:
        err("--profile: the flags select no kernel")
        return 2
    batches = plan(kernels, s.cublas)
    out = Path(s.profile)  # type: ignore[arg-type]
    workdir = workdir_of(out)
    workdir.mkdir(parents=True, exist_ok=True)
    seed = s.seed if s.seed is not None else 0
    version = ncu.version(exe)
    print(f"ncu {version or '(version unknown)'} at {exe}: {len(kernels)} kernels + "
          f"{sum(b.cublas is not None for b in batches)} cuBLAS reference(s) at {'x'.join(map(str, shape))}, "
          f"{len(batches)} batches, {len(ct.METRICS)} metrics, clocks {ncu.CLOCK_CONTROL}, caches flushed "
          f"({ncu.CACHE_CONTROL}), {ncu.REPLAY_MODE} replay; files in {workdir}", flush=True)
    t0 = time.monotonic()
    try:
        ran = run_all(exe, batches, shape, workdir, seed)
    except ncu.NcuError as exc:
        err(f"--profile: {exc}")
        return 2
    meta = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "command": command,
        "shape": list(shape), "seed": seed, "build": build_of(registry, build_record, commit),
        "ncu": {"path": exe, "version": version, "clock_control": ncu.CLOCK_CONTROL,
                "cache_control": ncu.CACHE_CONTROL, "replay_mode": ncu.REPLAY_MODE, **ran},
        "elapsed_s": round(time.monotonic() - t0, 1),
    }
    (workdir / "meta.json").write_text(json.dumps(meta, indent=1))
    doc = assemble(workdir, meta)
    write(doc, out)
    print(summary(doc))
    print(f"wrote {out} ({meta['elapsed_s']:.0f} s); render it with python bench.py --ladder-doc {out}")
    missing = [k["name"] for k in doc["kernels"] if k["status"] != "ok"]
    if missing:
        err(f"{len(missing)} kernel(s) not profiled: {', '.join(missing[:8])}{', ...' if len(missing) > 8 else ''}")
        return 3
    return 0


def rebuild_main(json_path: str) -> int:
    """Assemble the JSON again from the files a run left (a fix to the parsing needs no GPU)."""
    workdir = workdir_of(json_path)
    meta = json.loads((workdir / "meta.json").read_text())
    write(assemble(workdir, meta), json_path)
    print(f"rebuilt {json_path} from {workdir}")
    return 0


if __name__ == "__main__":
    usage = "usage: python -m hgemm_bench.profile launch SPEC_JSON | rebuild PROFILE_JSON"
    if len(sys.argv) != 3 or sys.argv[1] not in ("launch", "rebuild"):
        print(usage, file=sys.stderr)
        sys.exit(2)
    sys.exit(launch_main(sys.argv[2]) if sys.argv[1] == "launch" else rebuild_main(sys.argv[2]))
