"""Nsight Compute (`ncu`) as a subprocess: finding it, its version, the command line of one profiling
batch, and its output read back: the raw page (`--csv --page raw`) as one metric dict per profiled
launch, the passes each launch took, and the errors worth a one-line message. No GPU and no hgemm_rt
here, so all of it is tested on recorded text (tests/data/ncu_raw_sample.csv)."""
from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

# Where ncu lives when it is not on PATH: the CUDA toolkit's bin/ and Nsight Compute's own install.
NCU_FALLBACKS = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
NCU_ENV = "HGEMM_NCU"

# ncu's defaults, named so that a profile records what it ran under: clocks locked to the base clock,
# every cache flushed before each replay pass, each kernel replayed in place until all metrics are in.
CLOCK_CONTROL = "base"
CACHE_CONTROL = "all"
REPLAY_MODE = "kernel"

PERMISSION_MARK = "ERR_NVGPUCTRPERM"
MISSING = ("ncu (Nsight Compute) is not installed here: none on PATH, in $" + NCU_ENV + " or in "
           + ", ".join(NCU_FALLBACKS) + "; install Nsight Compute (it comes with the CUDA toolkit) or set "
           + NCU_ENV + "=/path/to/ncu")
NO_PERMISSION = ("ncu has no permission to read the GPU performance counters (" + PERMISSION_MARK + "): run "
                 "as root, or let every user profile (NVreg_RestrictProfilingToAdminUsers=0)")


class NcuError(RuntimeError):
    """ncu is missing, lacks permission, or failed; the message is one line for the user."""


def find_ncu() -> str | None:
    """$HGEMM_NCU, else `ncu` on PATH, else the usual install places (newest version first)."""
    env = os.environ.get(NCU_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    exe = shutil.which("ncu")
    if exe:
        return exe
    for pattern in NCU_FALLBACKS:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


def version(exe: str) -> str | None:
    """'2025.3.0.0' from `ncu --version` (None where it does not say)."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Version\s+(\S+)", out.stdout + out.stderr)
    return m.group(1) if m else None


def command(exe: str, metrics: list[str], kernel_regex: str | None, log_file: str, target: list[str]) -> list[str]:
    """One batch: every launch of `target` (and its children) whose function name matches the regex
    (all launches for None) profiled once for `metrics`, the raw page as CSV into `log_file`."""
    cmd = [exe, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics),
           "--target-processes", "all", "--replay-mode", REPLAY_MODE, "--clock-control", CLOCK_CONTROL,
           "--cache-control", CACHE_CONTROL, "--log-file", log_file]
    if kernel_regex is not None:
        cmd += ["--kernel-name", "regex:" + kernel_regex]
    return cmd + target


def symbol_regex(symbols: list[str]) -> str:
    """A regex that matches exactly these function names."""
    return "^(" + "|".join(re.escape(s) for s in symbols) + ")$"


# -- reading the output ---------------------------------------------------------------------------

@dataclass
class Launch:
    """One profiled launch: its function name, launch geometry and metrics in base units."""

    id: int
    kernel: str
    block: str = ""
    grid: str = ""
    metrics: dict[str, float | None] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)


# Non-metric columns of the raw page (ncu writes "Kernel Name"; older versions "Function Name").
META_COLUMNS = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Function Name",
                "Demangled Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC", "Kernel Time",
                "Section Name", "Metric Name", "Metric Unit", "Metric Value"}
NAME_COLUMNS = ("Kernel Name", "Function Name", "Demangled Name")
NOT_A_VALUE = {"", "n/a", "N/A", "-", "nan", "NaN", "(none)"}

# unit words in base form -> the canonical unit they are reported in; prefixes scale by powers of ten
UNIT_WORDS = {"second": "second", "s": "second", "byte": "byte", "B": "byte", "hz": "cycle/second",
              "Hz": "cycle/second", "cycle": "cycle", "inst": "inst", "sector": "sector", "request": "request",
              "warp": "warp", "block": "block", "thread": "thread", "register": "register", "wavefront": "wavefront"}
PREFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
SHORT_TIME = {"ns": ("n", "second"), "us": ("u", "second"), "ms": ("m", "second")}


def _word(part: str) -> tuple[float, str] | None:
    """('1e-9', 'second') for 'nsecond'; None for a word that is not a unit ncu scales."""
    if part in SHORT_TIME:
        prefix, word = SHORT_TIME[part]
        return PREFIXES[prefix], word
    if part in UNIT_WORDS:
        return 1.0, UNIT_WORDS[part]
    if len(part) > 1 and part[0] in PREFIXES and part[1:] in UNIT_WORDS:
        return PREFIXES[part[0]], UNIT_WORDS[part[1:]]
    if len(part) > 2 and part[0] in PREFIXES and part[1:].lower() == "hz":
        return PREFIXES[part[0]], "cycle/second"
    return None


def to_base(value: float, unit: str) -> tuple[float, str]:
    """The value in unscaled units: 1.5 'msecond' -> 0.0015 'second', 2 'Ghz' -> 2e9 'cycle/second',
    3 'cycle/nsecond' -> 3e9 'cycle/second'. Percentages, ratios and unknown units pass unchanged."""
    parts = unit.split("/")
    if len(parts) > 2 or not unit:
        return value, unit
    num = _word(parts[0])
    if num is None:
        return value, unit
    scale, out = num
    if len(parts) == 2:
        den = _word(parts[1])
        if den is None:
            return value, unit
        scale, out = scale / den[0], f"{out}/{den[1]}"
    return value * scale, out


def number(text: str) -> float | None:
    """A metric cell as a float: thousands separators dropped; None for n/a and the like."""
    text = text.strip()
    if text in NOT_A_VALUE:
        return None
    try:
        return float(text.replace(",", "")) if re.fullmatch(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?", text, re.I) else None
    except ValueError:
        return None


def csv_rows(text: str) -> list[list[str]]:
    """The CSV part of ncu's output: its own `==PROF==`/`==WARNING==` lines and the profiled
    program's output dropped, from the header row (first cell "ID") on."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    for i, row in enumerate(rows):
        if row and row[0].strip() == "ID":
            return [r for r in rows[i:] if r]
    return []


def parse_raw(text: str) -> list[Launch]:
    """Every profiled launch in ncu's CSV output, in launch order. Reads the raw page (a header row,
    a units row, one row per launch) and also the details layout (one row per launch and metric),
    whatever ncu version wrote it. Values are converted to base units (see to_base)."""
    rows = csv_rows(text)
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    col = {h: i for i, h in enumerate(header)}
    name_col = next((col[n] for n in NAME_COLUMNS if n in col), None)
    if name_col is None:
        raise ValueError(f"ncu CSV has no kernel-name column (header: {', '.join(header[:12])} ...)")

    def cell(row: list[str], name: str) -> str:
        return row[col[name]].strip() if name in col and col[name] < len(row) else ""

    launches: dict[int, Launch] = {}

    def launch_of(row: list[str]) -> Launch:
        lid = int(number(cell(row, "ID")) or 0)
        if lid not in launches:
            launches[lid] = Launch(lid, row[name_col].strip(), cell(row, "Block Size"), cell(row, "Grid Size"))
        return launches[lid]

    def put(launch: Launch, metric: str, raw: str, unit: str) -> None:
        v = number(raw)
        if v is not None:
            v, unit = to_base(v, unit)
        launch.metrics[metric] = v
        launch.units[metric] = unit

    if "Metric Name" in col and "Metric Value" in col:  # details layout
        for row in rows[1:]:
            if number(cell(row, "ID")) is None:
                continue
            put(launch_of(row), cell(row, "Metric Name"), cell(row, "Metric Value"), cell(row, "Metric Unit"))
        return [launches[k] for k in sorted(launches)]
    body = rows[1:]
    units = [""] * len(header)
    if body and not cell(body[0], "ID"):  # the raw page's second row: the unit of each column
        units = [u.strip() for u in body[0]] + [""] * len(header)
        body = body[1:]
    metric_cols = [(i, h) for i, h in enumerate(header) if h not in META_COLUMNS]
    for row in body:
        if number(cell(row, "ID")) is None:
            continue
        launch = launch_of(row)
        for i, h in metric_cols:
            put(launch, h, row[i] if i < len(row) else "", units[i])
    return [launches[k] for k in sorted(launches)]


PASSES = re.compile(r'==PROF== Profiling "([^"]+)".*?-\s*(\d+)\s+pass')


def passes(text: str) -> list[tuple[str, int]]:
    """(function name, replay passes) per profiled launch, in order, from ncu's progress lines."""
    return [(m.group(1), int(m.group(2))) for m in PASSES.finditer(text)]


def error_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]


def check_permission(text: str) -> None:
    if PERMISSION_MARK in text:
        raise NcuError(NO_PERMISSION)


def metrics_named_in_errors(text: str, requested: list[str]) -> list[str]:
    """The requested metrics that ncu's error or warning lines name (by full or base name): the
    ones this ncu or this GPU does not have."""
    noisy = [ln for ln in text.splitlines() if ln.startswith(("==ERROR==", "==WARNING=="))]
    named = []
    for m in requested:
        base = m.split(".")[0]
        if any(re.search(r"(?<![\w.])" + re.escape(base) + r"(?![\w])", ln) for ln in noisy):
            named.append(m)
    return named


def query_metric_names(exe: str) -> set[str] | None:
    """The base metric names `ncu --query-metrics` lists for this machine's GPU (None where it
    fails or lists nothing recognisable)."""
    try:
        out = subprocess.run([exe, "--query-metrics"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    names = {m.group(1) for m in re.finditer(r"^\s*([a-z0-9]+__[A-Za-z0-9_]+)\b", out.stdout, re.M)}
    return names or None
