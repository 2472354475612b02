"""`python bench.py --ladder-doc PROFILE_JSON`: docs/ladder.md (and its roofline figure) from a
--profile JSON and the hand-written notes of docs/ladder_notes.toml. No GPU.

A note says, per rung, what changed against the rung it is compared with and which counters that
change should move (counter, direction, why) as data; the render checks each claim against the
profile and marks it "confirmed" or "not confirmed by the counters". Every number in the document
comes from the JSON; a rung that got slower lists the counters that moved the wrong way.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import counters as ct
from . import plot as pl
from .selection import ladder_rank

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
NOTES = ROOT / "docs" / "ladder_notes.toml"
DIRECTIONS = ("up", "down", "same", "top")
SLOWER = -0.02  # a TFLOPS change below this (2%) makes a rung slower than its base
TOP_STALLS = 3
CONFIRMED, NOT_CONFIRMED, NO_DATA = "confirmed", "not confirmed by the counters", "no data"
WORDS = {"up": "up", "down": "down", "same": "unchanged", "top": f"among the top {TOP_STALLS} stalls"}


@dataclass(frozen=True)
class Claim:
    counter: str
    direction: str
    why: str
    min_change: float | None = None


@dataclass(frozen=True)
class Note:
    kernel: str
    change: str
    base: str | None = None  # the rung compared with; None: the previous step of the same ladder
    expect: tuple[Claim, ...] = ()
    if_slower: tuple[Claim, ...] = ()


def _claims(items: Any, where: str) -> tuple[Claim, ...]:
    if not isinstance(items, list):
        raise ValueError(f"{where}: a list of {{counter, direction, why}} tables")
    out = []
    for i, c in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(c, dict) or set(c) - {"counter", "direction", "why", "min_change"}:
            raise ValueError(f"{at}: keys are counter, direction, why and min_change, got {c!r}")
        if c.get("counter") not in ct.BY_KEY:
            raise ValueError(f"{at}: unknown counter {c.get('counter')!r} (counters: {', '.join(ct.BY_KEY)})")
        if c.get("direction") not in DIRECTIONS:
            raise ValueError(f"{at}: direction {c.get('direction')!r} is not one of {', '.join(DIRECTIONS)}")
        if c["direction"] == "top" and not c["counter"].startswith("stall_"):
            raise ValueError(f"{at}: direction 'top' is for stall_* counters, not {c['counter']!r}")
        if not isinstance(c.get("why"), str) or not c["why"].strip():
            raise ValueError(f"{at}: needs a `why`")
        out.append(Claim(c["counter"], c["direction"], c["why"].strip(), c.get("min_change")))
    return tuple(out)


def parse_notes(text: str, where: str = "notes") -> dict[str, Note]:
    """Notes by kernel name; ValueError naming the rung and field for anything malformed."""
    data = tomllib.loads(text)
    notes: dict[str, Note] = {}
    for i, r in enumerate(data.get("rung", [])):
        at = f"{where}: rung {i + 1} ({r.get('kernel', '?')})"
        unknown = set(r) - {"kernel", "base", "change", "expect", "if_slower"}
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {sorted(unknown)}")
        if not isinstance(r.get("kernel"), str) or not isinstance(r.get("change"), str):
            raise ValueError(f"{at}: needs `kernel` and `change` strings")
        if r["kernel"] in notes:
            raise ValueError(f"{at}: a second note for {r['kernel']}")
        notes[r["kernel"]] = Note(r["kernel"], " ".join(r["change"].split()), r.get("base"),
                                  _claims(r.get("expect", []), f"{at} expect"),
                                  _claims(r.get("if_slower", []), f"{at} if_slower"))
    return notes


def load_notes(path: str | Path = NOTES) -> dict[str, Note]:
    return parse_notes(Path(path).read_text(), str(path))


# -- the rungs and their comparisons ---------------------------------------------------------------

@dataclass
class Rung:
    k: dict  # the kernel's entry in the profile
    d: dict  # its counters
    note: Note | None
    base: "Rung | None" = None

    name = property(lambda self: self.k["name"])


@dataclass
class Verdict:
    claim: Claim
    old: float | None
    new: float | None
    result: str
    rank: int | None = None  # "top" claims: the stall's rank in this kernel


def check(claim: Claim, base: dict | None, this: dict) -> Verdict:
    new = this.get(claim.counter)
    if claim.direction == "top":
        ranked = [r for r, _ in ct.top_stalls(this, len(ct.STALL_REASONS))]
        reason = claim.counter[len("stall_"):]
        rank = ranked.index(reason) + 1 if reason in ranked else None
        if new is None:
            return Verdict(claim, None, None, NO_DATA)
        return Verdict(claim, None, new, CONFIRMED if rank is not None and rank <= TOP_STALLS else NOT_CONFIRMED, rank)
    old = None if base is None else base.get(claim.counter)
    ok = ct.moved(claim.counter, old, new, claim.direction, claim.min_change)
    return Verdict(claim, old, new, NO_DATA if ok is None else CONFIRMED if ok else NOT_CONFIRMED)


def rungs_of(doc: dict, notes: dict[str, Note]) -> list[Rung]:
    """The profiled kernels in ladder order, each with its base rung (the note's, else the previous
    profiled step of its ladder)."""
    ok = [k for k in doc["kernels"] if k["status"] == "ok" and not k.get("baseline")]
    ok.sort(key=lambda k: (ladder_rank(k["ladder"]), k["ladder"], k["step"], k["name"]))
    rungs = [Rung(k, ct.derive(k["metrics"], doc["shape"]), notes.get(k["name"])) for k in ok]
    by_name = {r.name: r for r in rungs}
    for i, r in enumerate(rungs):
        if r.note and r.note.base:
            r.base = by_name.get(r.note.base)
        elif i and rungs[i - 1].k["ladder"] == r.k["ladder"]:
            r.base = rungs[i - 1]
    return rungs


def speed_change(r: Rung) -> float | None:
    if r.base is None or not r.base.d.get("tflops") or r.d.get("tflops") is None:
        return None
    return r.d["tflops"] / r.base.d["tflops"] - 1.0


# -- formatting ------------------------------------------------------------------------------------

def si(v: float) -> str:
    for scale, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def fmt(key: str, v: float | None) -> str:
    if v is None:
        return "–"
    c = ct.BY_KEY[key]
    if c.unit == "%":
        return f"{v:.1f}%" if abs(v) < 10 else f"{v:.0f}%"
    if key == "tflops":
        return f"{v:.1f}"
    if c.unit in ("MB", "MHz"):
        return f"{v:,.0f} {c.unit}"
    if c.unit in ("ms", "TB/s"):
        return f"{v:.3g} {c.unit}"
    if key in ("registers", "grid_blocks"):
        return f"{v:.0f}"
    return si(v) if abs(v) >= 1e4 else f"{v:.3g}"


def fmt_change(key: str, old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return ""
    if ct.BY_KEY[key].kind == "pct":
        return f"{new - old:+.1f} points"
    if old == 0:
        return "from 0" if new else "0 both"
    ratio = new / old
    if new == 0:
        return "to 0"
    if ratio >= 3:
        return f"×{ratio:.3g}"
    if ratio <= 1 / 3:
        return f"÷{1 / ratio:.3g}"
    return f"{(ratio - 1) * 100:+.0f}%"


def fmt_pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.0f}%"


def shape_text(v: Any) -> str:
    return "×".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


CONFIG_FIELDS = (("layout", "layout"), ("a_order", "A order"), ("dtype", "inputs"), ("acc", "accumulate"),
                 ("block", "threads"), ("tile", "block tile"), ("grid", "grid"), ("cluster", "cluster"),
                 ("dsmem", "dynamic smem B"), ("static_smem", "static smem B"), ("ptxas_registers", "registers (ptxas)"),
                 ("params", "parameters"))


def config_diff(base: dict, this: dict) -> list[str]:
    """The declared configuration that differs: 'block tile 128×128×8 → 128×128×16', variant axes too."""
    out = []
    for key, label in CONFIG_FIELDS:
        a, b = base.get(key), this.get(key)
        if a != b and not (a is None and b is None):
            if key == "params":
                a = ",".join(p.split(":")[0] for p in a or []) or "-"
                b = ",".join(p.split(":")[0] for p in b or []) or "-"
                if a == b:
                    continue
            out.append(f"{label} {shape_text(a)} → {shape_text(b)}")
    va, vb = base.get("variant") or {}, this.get("variant") or {}
    for axis in dict.fromkeys([*va, *vb]):
        if axis != "acc" and va.get(axis) != vb.get(axis):
            out.append(f"{axis} {va.get(axis, '-')} → {vb.get(axis, '-')}")
    return out


# -- the document ----------------------------------------------------------------------------------

def claim_rows(verdicts: list[Verdict]) -> list[str]:
    rows = ["| counter | should go | because | measured | verdict |", "|---|---|---|---|---|"]
    for v in verdicts:
        c = ct.BY_KEY[v.claim.counter]
        if v.claim.direction == "top":
            measured = "–" if v.new is None else f"{fmt(c.key, v.new)} of the cycles, rank {v.rank or '–'}"
        elif v.old is None and v.new is not None:
            measured = f"{fmt(c.key, v.new)} (no base value)"
        else:
            measured = f"{fmt(c.key, v.old)} → {fmt(c.key, v.new)} ({fmt_change(c.key, v.old, v.new)})"
        verdict = f"**{v.result}**" if v.result == CONFIRMED else v.result
        rows.append(f"| {c.label} | {WORDS[v.claim.direction]} | {v.claim.why} | {measured} | {verdict} |")
    return rows


def rung_section(r: Rung) -> tuple[list[str], list[Verdict]]:
    k = r.k
    lines = [f"### {k['ladder']} {k['step']} · `{k['name']}`", ""]
    variant = k.get("label") or "no variant axes"
    base = r.base
    if base:
        against = f"Compared with `{base.name}`."
    elif r.note and r.note.base:
        against = f"Its base `{r.note.base}` was not profiled: nothing to compare with."
    else:
        against = "The first rung: nothing to compare with."
    passes = f"; {k['passes']} ncu passes" if k.get("passes") else ""
    lines.append(f"Default variant: {variant}{passes}. {against}")
    lines.append("")
    note = r.note
    lines.append(note.change if note else "_No note for this rung in docs/ladder_notes.toml yet._")
    lines.append("")
    cfg = k.get("config") or {}
    if base:
        diff = config_diff(base.k.get("config") or {}, cfg)
        lines += ["Declared difference: " + ("; ".join(diff) if diff else "none in the declarations") + ".", ""]
        if cfg.get("technique"):
            lines += [f"Technique: {cfg['technique']}.", ""]
        change = speed_change(r)
        word = ("faster" if change is not None and change > -SLOWER else
                "slower" if change is not None and change < SLOWER else "level")
        lines.append(f"Measured: {fmt('tflops', base.d['tflops'])} → {fmt('tflops', r.d['tflops'])} TFLOPS "
                     f"({fmt_pct(change)}, {word}).")
    else:
        if cfg.get("technique"):
            lines += [f"Technique: {cfg['technique']}.", ""]
        lines.append(f"Measured: {fmt('tflops', r.d['tflops'])} TFLOPS.")
    lines.append("")
    verdicts = [check(c, base.d if base else None, r.d) for c in (note.expect if note else ())]
    if verdicts:
        lines += claim_rows(verdicts) + [""]
    change = speed_change(r)
    if base is not None and change is not None and change < SLOWER:
        lines.append(f"**Slower than `{base.name}` ({fmt_pct(change)}): the measured reasons.**")
        lines.append("")
        why = [check(c, base.d, r.d) for c in (note.if_slower if note else ())]
        if why:
            lines += claim_rows(why) + [""]
            verdicts += why
        adverse = ct.adverse_moves(base.d, r.d)
        if adverse:
            moves = "; ".join(f"{ct.BY_KEY[key].label} {fmt(key, base.d[key])} → {fmt(key, r.d[key])} "
                              f"({fmt_change(key, base.d[key], r.d[key])})" for key, _ in adverse)
            lines.append(f"The counters that moved furthest the wrong way: {moves}.")
        else:
            lines.append("No counter of this set moved the wrong way past its threshold: the loss is in "
                         "what these counters do not separate.")
        lines.append("")
    return lines, verdicts


SUMMARY_COLUMNS = ("tflops", "occupancy_achieved", "registers", "smem_bank_conflicts", "global_ld_sectors_per_req",
                   "l2_hit_pct", "dram_pct", "tensor_pipe_pct", "simt_pipe_pct")


def summary_table(rows: list[Rung]) -> list[str]:
    heads = ["step", "kernel", *(ct.BY_KEY[c].label for c in SUMMARY_COLUMNS[:1]), "vs base",
             *(ct.BY_KEY[c].label for c in SUMMARY_COLUMNS[1:]), "top stalls"]
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        stalls = ", ".join(f"{reason} {share:.0f}%" for reason, share in ct.top_stalls(r.d, TOP_STALLS))
        cells = [str(r.k.get("step") or "–"), f"`{r.name}`", fmt("tflops", r.d["tflops"]), fmt_pct(speed_change(r)),
                 *(fmt(c, r.d[c]) for c in SUMMARY_COLUMNS[1:]), stalls]
        out.append("| " + " | ".join(cells) + " |")
    return out


def spread(values: list[float | None], spec: str) -> str | None:
    """The median and range of the known values; None when none is known."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return None
    lo, mid, hi = known[0], statistics.median(known), known[-1]
    return format(mid, spec) if lo == hi else f"{format(mid, spec)} (median; {format(lo, spec)}–{format(hi, spec)})"


def joined(*parts: str | None, sep: str = ", ") -> str:
    """The parts that are known, joined: a field the profile lacks is left out, never shown as '?'."""
    return sep.join(p for p in parts if p)


def when(value: Any, text: str) -> str | None:
    """`text` (formatted with the value) where the profile records the value, else nothing."""
    return text.format(value) if value not in (None, "") else None


def replays(doc: dict) -> str:
    """How often ncu replayed each kernel: the recorded pass counts, or only the mode where the
    profile has none (they come from ncu's progress lines, which a run's log may lack)."""
    n = doc["ncu"]
    passes = sorted(p for k in doc["kernels"] if (p := k.get("passes")))
    mode = f"`--replay-mode {n.get('replay_mode')}`"
    if not passes:
        return f"replayed each kernel ({mode}; the pass counts are not recorded)"
    count = f"{passes[0]}–{passes[-1]}" if passes[0] != passes[-1] else str(passes[0])
    return f"replayed each kernel {count} times ({mode})"


def header(doc: dict, rungs: list[Rung], json_rel: str) -> list[str]:
    dev, n, build = doc["device"] or {}, doc["ncu"], doc.get("build") or {}
    drv = dev.get("driver") or {}
    M, N, K = doc["shape"]
    shape = f"M = N = K = {M}" if M == N == K else f"M = {M}, N = {N}, K = {K}"
    clock = when(spread([r.d["sm_clock_mhz"] for r in rungs], ".0f"), ": SM clock {} MHz")
    card = joined(when(str(dev.get("cc") or "").replace(".", ""), "sm_{}"),
                  when(dev.get("sm_count"), "{} SMs"), when(drv.get("nvidia"), "driver {}"), when(drv.get("cuda"), "CUDA {}"))
    where = joined(f"**{dev.get('name') or 'an unnamed GPU'}**" + (f" ({card})" if card else ""),
                   when(n.get("version"), "with Nsight Compute {}"), sep=" ")
    run = joined(when(build.get("hash"), "Build `{}`"), when(build.get("git"), "git `{}`"))
    run = joined(run, when(doc.get("command"), "the run: `{}`"), sep="; ")
    return [
        "# The ladder, measured: what each rung changed and what the counters say",
        "",
        f"<!-- generated by `python bench.py --ladder-doc {json_rel}` from {json_rel} and "
        "docs/ladder_notes.toml: do not edit by hand -->",
        "",
        f"Profiled on {where}" + (f", {doc['created']}" if doc.get("created") else "") + f": {shape}, every kernel "
        f"once in its default variant on N(0,1) data. ncu locked the clocks (`--clock-control {n.get('clock_control')}`"
        f"{clock or ''}), flushed the caches before each replay pass (`--cache-control {n.get('cache_control')}`) "
        f"and {replays(doc)} to collect {len(n.get('metrics', []))} metrics." + (f" {run}." if run else ""),
        "",
        "TFLOPS are 2MNK over ncu's `gpu__time_duration` at that locked clock: below the bench's figures "
        "(boost clock), comparable between rungs. Each rung below says what changed against the rung it is "
        "compared with (the declared difference is computed from the kernels' declarations), which counters "
        "that change should move and why (docs/ladder_notes.toml), and what they did: **confirmed** or "
        "*not confirmed by the counters*, checked here, not asserted. A rung that got slower lists its "
        "measured reasons: the counters that moved furthest the wrong way.",
        "",
    ]


def counter_legend() -> list[str]:
    rows = ["| counter | key (docs/ladder_notes.toml) | what it is |", "|---|---|---|"]
    for c in ct.COUNTERS:
        if not c.key.startswith("stall_"):
            rows.append(f"| {c.label} | `{c.key}` | {c.doc} |")
    rows.append("| stall *reason* | `stall_<reason>` | share of a warp's cycles per issued instruction spent in "
                "that state (`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio` / "
                "`smsp__average_warp_latency_per_inst_issued.ratio`); reasons: "
                + ", ".join(r for r in ct.STALL_REASONS if r not in ct.NOT_A_STALL) + " |")
    return rows


def render(doc: dict, notes: dict[str, Note], figure: str | None = None, json_rel: str = "docs/ladder_profile.json",
           figure_note: str | None = None) -> str:
    rungs = rungs_of(doc, notes)
    lines = header(doc, rungs, json_rel)
    lines += ["## The roofline", ""]
    if figure:
        lines += [f"![The ladders on a roofline: TFLOPS against FLOP per DRAM byte and per L2 byte]({figure})", "",
                  "Points: each rung (ladder by colour, its step beside it). Slanted roofs: the DRAM and L2 "
                  "bandwidth ncu reports as peak for this card at its clocks; flat roofs: the datasheet's dense "
                  "fp16 tensor and fp32 peaks (at boost clock, above what the locked clock allows).", ""]
    else:
        lines += [figure_note or "_The figure was not rendered (matplotlib is not installed)._", ""]
    ladders = list(dict.fromkeys(r.k["ladder"] for r in rungs))
    lines += ["## Summary", ""]
    for lad in ladders:
        lines += [f"### {lad}", ""] + summary_table([r for r in rungs if r.k["ladder"] == lad]) + [""]
    refs = [Rung(k, ct.derive(k["metrics"], doc["shape"]), None) for k in doc["kernels"]
            if k["status"] == "ok" and k.get("baseline")]
    if refs:
        lines += ["### reference: cuBLAS", ""] + summary_table(refs) + [""]
        lines += ["cuBLAS ran " + "; ".join(f"`{r.name}` ({r.k.get('label')}) as "
                                            f"{', '.join(f'`{n}`' for n in r.k.get('ncu_kernels', []))}" for r in refs)
                  + ".", ""]
    missing = [k for k in doc["kernels"] if k["status"] != "ok"]
    if missing:
        lines += ["Not profiled: " + "; ".join(f"`{k['name']}` ({joined(k['status'], k.get('reason'), sep=': ')})"
                                               for k in missing) + ".", ""]
    lines += ["## The rungs", ""]
    checked: list[tuple[Rung, Verdict]] = []
    for r in rungs:
        sec, verdicts = rung_section(r)
        lines += sec
        checked += [(r, v) for v in verdicts]
    count = {res: sum(v.result == res for _, v in checked) for res in (CONFIRMED, NOT_CONFIRMED, NO_DATA)}
    lines += ["## The claims, counted", "",
              f"{count[CONFIRMED]} of {len(checked)} claims confirmed by the counters, {count[NOT_CONFIRMED]} not "
              f"confirmed, {count[NO_DATA]} without data.", ""]
    lines += [f"- not confirmed: {r.k['ladder']} {r.k['step']} `{r.name}`: {ct.BY_KEY[v.claim.counter].label} "
              f"{WORDS[v.claim.direction]}" for r, v in checked if v.result == NOT_CONFIRMED]
    lines += [""]
    lines += ["## The counters", ""] + counter_legend() + [""]
    dropped = doc["ncu"].get("dropped") or {}
    if dropped:
        lines += ["Metrics this ncu refused (not collected): " + ", ".join(f"`{m}`" for m in dropped) + ".", ""]
    profiled = [k for k in doc["kernels"] if k["status"] == "ok"]
    silent = [m for m in doc["ncu"].get("metrics", []) if profiled and all(k["metrics"].get(m) is None for k in profiled)]
    if silent:
        lines += ["Metrics no kernel reported a value for (n/a on this GPU): "
                  + ", ".join(f"`{m}`" for m in silent) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


# -- the figure ------------------------------------------------------------------------------------

LADDER_COLORS = {"cuda": "tab:blue", "wmma": "tab:orange", "mma": "tab:green", "cute": "tab:purple",
                 "hopper": "tab:red", "sgemm": "tab:brown", "cublas": "black"}


def roofline(doc: dict, path: str | Path) -> None:
    """Two panels, FLOP per DRAM byte and per L2 byte against TFLOPS, log-log: the rungs, and the
    datasheet's compute roofs under the bandwidth ncu reports as peak for each memory."""
    from .devinfo import Roofs, roofs

    plt = pl.pyplot()
    rows = [(k, ct.derive(k["metrics"], doc["shape"])) for k in doc["kernels"] if k["status"] == "ok"]
    sheet = roofs(doc["device"]) if doc.get("device") else Roofs(None, None, None)
    fig, axes = plt.subplots(1, 2, figsize=(14, 6), dpi=110)
    for ax, (xkey, bwkey, what) in zip(axes, (("intensity_dram", "dram_peak_tbps", "DRAM"),
                                              ("intensity_l2", "l2_peak_tbps", "L2"))):
        pts = [(k, d[xkey], d["tflops"]) for k, d in rows if d[xkey] and d["tflops"]]
        bws = [d[bwkey] for _, d in rows if d[bwkey]]
        bw = statistics.median(bws) if bws else None
        ridges = [peak / bw for peak in (sheet.fp16_tensor_tflops, sheet.fp32_tflops) if peak and bw]
        xs = [x for _, x, _ in pts] or [1.0]
        lo, hi = min(xs + ridges) / 3, max(xs + ridges) * 3  # every ridge point in view
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        for (label, ys), style in zip(pl.roof_lines(Roofs(sheet.fp16_tensor_tflops, sheet.fp32_tflops, bw), grid),
                                      ("-", "--")):
            ax.plot(grid, ys, color="grey", linestyle=style, linewidth=1.2, label=f"{label} (datasheet)")
        if bw:
            ax.plot([], [], color="none", label=f"{what} {bw:.2f} TB/s (ncu's peak: the slope)")
        for lad in dict.fromkeys(k["ladder"] for k, _, _ in pts):
            mine = [(k, x, y) for k, x, y in pts if k["ladder"] == lad]
            ax.scatter([x for _, x, _ in mine], [y for _, _, y in mine], s=22, label=lad,
                       color=LADDER_COLORS.get(lad, "grey"), zorder=3)
            for k, x, y in mine:
                ax.annotate(str(k["step"]) if k["step"] else "cuBLAS", (x, y), fontsize=6, xytext=(3, 2),
                            textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_xlabel(f"FLOP per {what} byte (measured traffic)")
        ax.set_ylabel("TFLOPS (ncu, locked clock)")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{what} roofline")
    M, N, K = doc["shape"]
    fig.suptitle(f"{(doc.get('device') or {}).get('name') or 'GPU'}: every rung at {M}x{N}x{K} (Nsight Compute)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def relative(path: Path, start: Path) -> str:
    try:
        return str(path.resolve().relative_to(start.resolve()))
    except ValueError:
        return str(path)


def ladder_doc_mode(json_path: str, out_md: str, notes_path: str | Path = NOTES) -> int:
    """--ladder-doc: 0 written, 2 a file that cannot be read (the message says which)."""
    from .profile import load

    try:
        doc = load(json_path)
        notes = load_notes(notes_path)
    except (OSError, ValueError) as exc:
        print(f"bench.py: --ladder-doc: {exc}", file=sys.stderr)
        return 2
    md = Path(out_md)
    md.parent.mkdir(parents=True, exist_ok=True)
    png = md.with_name(md.stem + "_roofline.png")
    figure, note = None, None
    if pl.have_matplotlib():
        roofline(doc, png)
        figure = png.name
    else:
        note = (f"_The figure was not rendered: matplotlib is not installed (`pip install -e .[plot]`, then "
                f"`python bench.py --ladder-doc {json_path}` again)._")
        print(f"bench.py: --ladder-doc: matplotlib is not installed: {md} is written without its figure",
              file=sys.stderr)
    md.write_text(render(doc, notes, figure, relative(Path(json_path), ROOT), note))
    unnoted = [r.name for r in rungs_of(doc, notes) if r.note is None]
    print(f"wrote {md}" + (f" and {png}" if figure else "")
          + (f"; {len(unnoted)} rung(s) without a note: {', '.join(unnoted)}" if unnoted else ""))
    return 0
