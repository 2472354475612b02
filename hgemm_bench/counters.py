"""The counters of a ladder profile: the ncu metrics one pass over a kernel collects (METRICS), the
quantities the ladder doc reads from them (COUNTERS: TFLOPS, occupancy, bank conflicts, sectors per
request, DRAM/L2 traffic, tensor-pipe use, warp-stall shares), and how two kernels' values compare
(`change`, `moved`). Pure functions over plain dicts in base units (hgemm_bench/ncu.py converts)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

Raw = Mapping[str, "float | None"]

# The warp states of the Warp State Statistics section ("gmma" exists on sm_90 only). Each metric is
# the average number of cycles a warp spends in that state per issued instruction.
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "gmma", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait")
NOT_A_STALL = ("selected",)  # the issue itself: one cycle per instruction


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


# short name -> ncu metric. One list, collected in one kernel-replay run per batch.
METRICS: dict[str, str] = {
    "time": "gpu__time_duration.sum",
    "sm_hz": "sm__cycles_elapsed.avg.per_second",
    "registers": "launch__registers_per_thread",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
    "waves": "launch__waves_per_multiprocessor",
    "smem_static": "launch__shared_mem_per_block_static",
    "smem_dynamic": "launch__shared_mem_per_block_dynamic",
    "limit_registers": "launch__occupancy_limit_registers",
    "limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "limit_warps": "launch__occupancy_limit_warps",
    "limit_blocks": "launch__occupancy_limit_blocks",
    "occ_theoretical": "sm__maximum_warps_per_active_cycle_pct",
    "occ_achieved": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "inst": "smsp__inst_executed.sum",
    "issue_active": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smem_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "smem_conflicts_ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smem_conflicts_st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smem_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smem_wavefronts_ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smem_wavefronts_st": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smem_ld_inst": "smsp__inst_executed_op_shared_ld.sum",
    "smem_st_inst": "smsp__inst_executed_op_shared_st.sum",
    "gld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "gld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "gst_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "gst_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "ldgsts_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum",
    "ldgsts_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum",
    "dram_bytes": "dram__bytes.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_peak_per_cycle": "dram__bytes.sum.peak_sustained",
    "dram_hz": "dram__cycles_elapsed.avg.per_second",
    "l2_bytes": "lts__t_bytes.sum",
    "l2_hit": "lts__t_sector_hit_rate.pct",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_peak_per_cycle": "lts__t_bytes.sum.peak_sustained",
    "l2_hz": "lts__cycles_elapsed.avg.per_second",
    "hmma": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "gmma": "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "tensor": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "fma": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "fp16": "sm__pipe_fp16_cycles_active.avg.pct_of_peak_sustained_active",
    "cpi": "smsp__average_warp_latency_per_inst_issued.ratio",
    **{f"stall_{r}": stall_metric(r) for r in STALL_REASONS},
}
# metrics every ncu has (launch statistics and the duration): never dropped as "unknown"
ALWAYS_THERE = tuple(m for m in METRICS.values() if m.startswith(("launch__", "gpu__time_duration",
                                                                   "sm__maximum_warps")))


def value(raw: Raw, short: str) -> float | None:
    v = raw.get(METRICS[short])
    return None if v is None else float(v)


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _pct(part: float | None, whole: float | None) -> float | None:
    share = _div(part, whole)
    return None if share is None else 100.0 * share


def _max(*xs: float | None) -> float | None:
    known = [x for x in xs if x is not None]
    return max(known) if known else None


Getter = Callable[[Raw, float], "float | None"]  # (raw metrics, flops of the problem) -> value


@dataclass(frozen=True)
class Counter:
    """One quantity of the ladder doc. `kind` "pct" compares in points, "amount" relatively; `better`
    is the direction that helps a GEMM ("" where neither does), which picks the adverse moves that
    explain a slower rung."""

    key: str
    label: str
    unit: str
    kind: str
    better: str
    doc: str
    get: Getter


def _raw(short: str, scale: float = 1.0) -> Getter:
    """A metric, times scale."""
    def get(raw: Raw, _flops: float) -> float | None:
        v = value(raw, short)
        return None if v is None else v * scale
    return get


def _ratio(num: str, den: str) -> Getter:
    return lambda raw, _flops: _div(value(raw, num), value(raw, den))


def _per_byte(bytes_metric: str) -> Getter:
    """Arithmetic intensity: FLOP of the problem per byte of measured traffic."""
    return lambda raw, flops: _div(flops, value(raw, bytes_metric))


def _largest(*shorts: str) -> Getter:
    """The largest of metrics of which a kernel runs one (HMMA or GMMA pipe, FMA or FP16 pipe)."""
    return lambda raw, _flops: _max(*(value(raw, s) for s in shorts))


def _stall_share(reason: str) -> Getter:
    return lambda raw, _flops: _pct(value(raw, f"stall_{reason}"), value(raw, "cpi"))


def _peak_tbps(per_cycle: str, hz: str) -> Getter:
    def get(raw: Raw, _flops: float) -> float | None:
        per, clock = value(raw, per_cycle), value(raw, hz)
        return None if per is None or clock is None else per * clock / 1e12
    return get


def _smem(kind: str) -> Callable[[Raw], "float | None"]:
    """Shared-memory totals: the all-ops metric, or loads + stores where only those were collected."""
    def get(raw: Raw) -> float | None:
        total = value(raw, f"smem_{kind}")
        ld, st = value(raw, f"smem_{kind}_ld"), value(raw, f"smem_{kind}_st")
        return total if total is not None else None if ld is None or st is None else ld + st
    return get


_conflicts, _wavefronts = _smem("conflicts"), _smem("wavefronts")

COUNTERS: tuple[Counter, ...] = (
    Counter("tflops", "TFLOPS", "TFLOPS", "amount", "up", "2MNK / gpu__time_duration (at the clock ncu locked)",
            lambda r, f: _div(f / 1e12, value(r, "time"))),
    Counter("time_ms", "time", "ms", "amount", "down", "gpu__time_duration.sum", _raw("time", 1e3)),
    Counter("sm_clock_mhz", "SM clock", "MHz", "amount", "", "sm__cycles_elapsed.avg.per_second", _raw("sm_hz", 1e-6)),
    Counter("registers", "registers", "/thread", "amount", "", "launch__registers_per_thread", _raw("registers")),
    Counter("grid_blocks", "CTAs", "", "amount", "", "launch__grid_size (CTAs launched)", _raw("grid")),
    Counter("waves", "waves", "", "amount", "", "launch__waves_per_multiprocessor", _raw("waves")),
    Counter("occupancy_theoretical", "theor. occupancy", "%", "pct", "up", "sm__maximum_warps_per_active_cycle_pct",
            _raw("occ_theoretical")),
    Counter("occupancy_achieved", "occupancy", "%", "pct", "up",
            "sm__warps_active.avg.pct_of_peak_sustained_active (achieved occupancy)", _raw("occ_achieved")),
    Counter("instructions", "warp instructions", "", "amount", "down", "smsp__inst_executed.sum", _raw("inst")),
    Counter("issue_active_pct", "issue active", "%", "pct", "up",
            "smsp__issue_active.avg.pct_of_peak_sustained_active (cycles a scheduler issued)", _raw("issue_active")),
    # The count of conflicts has no `better`: a rise from a few thousand to ten thousand among tens of
    # millions of wavefronts passes the 5% threshold of an amount and explains nothing. Their share of
    # the wavefronts (smem_conflict_pct, in points) is the one a slower rung is judged by.
    Counter("smem_bank_conflicts", "smem bank conflicts", "", "amount", "",
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared (ld + st)", lambda r, f: _conflicts(r)),
    Counter("smem_wavefronts", "smem wavefronts", "", "amount", "down",
            "l1tex__data_pipe_lsu_wavefronts_mem_shared (shared-memory accesses through the LSU, ldmatrix "
            "included; TMA and wgmma operand reads are not)", lambda r, f: _wavefronts(r)),
    Counter("smem_conflict_pct", "smem conflict share", "%", "pct", "down", "bank conflicts / shared wavefronts",
            lambda r, f: _pct(_conflicts(r), _wavefronts(r))),
    # No `better` either: wider loads (ldmatrix.x4, LDS.128) raise it as conflicts do, and wider loads help.
    Counter("smem_ld_wavefronts_per_inst", "smem wavefronts/ld", "", "amount", "",
            "shared-load wavefronts per shared-load instruction (1 per 128 bytes a warp reads, more with "
            "conflicts)", _ratio("smem_wavefronts_ld", "smem_ld_inst")),
    Counter("global_ld_sectors_per_req", "ld sectors/req", "", "amount", "",
            "global-load sectors per request (a warp's 32-bit loads: 4 when coalesced; 128-bit: 16)",
            _ratio("gld_sectors", "gld_requests")),
    Counter("global_ld_requests", "ld requests", "", "amount", "down", "global-load requests (LDG)",
            _raw("gld_requests")),
    Counter("ldgsts_sectors_per_req", "cp.async sectors/req", "", "amount", "",
            "cp.async (LDGSTS) sectors per request", _ratio("ldgsts_sectors", "ldgsts_requests")),
    Counter("global_st_sectors_per_req", "st sectors/req", "", "amount", "", "global-store sectors per request",
            _ratio("gst_sectors", "gst_requests")),
    Counter("global_st_requests", "st requests", "", "amount", "down", "global-store requests (STG)",
            _raw("gst_requests")),
    Counter("l2_mb", "L2 traffic", "MB", "amount", "down", "lts__t_bytes.sum (every byte through L2, TMA included)",
            _raw("l2_bytes", 1e-6)),
    Counter("l2_hit_pct", "L2 hit", "%", "pct", "up", "lts__t_sector_hit_rate.pct", _raw("l2_hit")),
    Counter("l2_pct", "L2 throughput", "%", "pct", "", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
            _raw("l2_pct")),
    Counter("dram_mb", "DRAM traffic", "MB", "amount", "down", "dram__bytes.sum", _raw("dram_bytes", 1e-6)),
    Counter("dram_pct", "DRAM throughput", "%", "pct", "", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            _raw("dram_pct")),
    Counter("tensor_pipe_pct", "tensor pipe", "%", "pct", "up",
            "sm__pipe_tensor{,_op_hmma,_op_gmma}_cycles_active.avg.pct_of_peak_sustained_active (the largest: "
            "mma.sync/WMMA or wgmma, whichever ran)", _largest("hmma", "gmma", "tensor")),
    Counter("simt_pipe_pct", "FMA pipe", "%", "pct", "up",
            "sm__pipe_{fma,fp16}_cycles_active.avg.pct_of_peak_sustained_active (FFMA / HFMA2)",
            _largest("fma", "fp16")),
    Counter("cpi", "cycles/issue", "", "amount", "down",
            "smsp__average_warp_latency_per_inst_issued (a warp's cycles per issued instruction)", _raw("cpi")),
    Counter("intensity_dram", "FLOP/DRAM byte", "", "amount", "", "2MNK / dram__bytes.sum", _per_byte("dram_bytes")),
    Counter("intensity_l2", "FLOP/L2 byte", "", "amount", "", "2MNK / lts__t_bytes.sum", _per_byte("l2_bytes")),
    Counter("dram_peak_tbps", "DRAM peak", "TB/s", "amount", "",
            "dram__bytes.sum.peak_sustained x dram__cycles_elapsed.avg.per_second",
            _peak_tbps("dram_peak_per_cycle", "dram_hz")),
    Counter("l2_peak_tbps", "L2 peak", "TB/s", "amount", "",
            "lts__t_bytes.sum.peak_sustained x lts__cycles_elapsed.avg.per_second",
            _peak_tbps("l2_peak_per_cycle", "l2_hz")),
    *(Counter(f"stall_{r}", f"stall {r}", "%", "pct", "" if r == "not_selected" else "down",
              f"share of a warp's cycles per issued instruction spent in state '{r}' ({stall_metric(r)} / cpi)",
              _stall_share(r)) for r in STALL_REASONS if r not in NOT_A_STALL),
)
BY_KEY = {c.key: c for c in COUNTERS}


def flops(shape: tuple[int, int, int] | list[int]) -> float:
    M, N, K = shape
    return 2.0 * M * N * K


def derive(raw: Raw, shape: tuple[int, int, int] | list[int]) -> dict[str, float | None]:
    """Every counter of one profiled kernel."""
    f = flops(shape)
    return {c.key: c.get(raw, f) for c in COUNTERS}


def occupancy_limiter(raw: Raw) -> str | None:
    """Which resource caps the blocks per SM ("registers", "shared_mem", "warps", "blocks")."""
    limits = {k[len("limit_"):]: value(raw, k) for k in METRICS if k.startswith("limit_")}
    known = {k: v for k, v in limits.items() if v is not None}
    return min(known, key=lambda k: known[k]) if known else None


def top_stalls(derived: Mapping[str, Any], n: int = 3) -> list[tuple[str, float]]:
    """The n warp states with the largest share of cycles (reason, % share), largest first."""
    shares = [(r, derived.get(f"stall_{r}")) for r in STALL_REASONS if r not in NOT_A_STALL]
    known = [(r, float(v)) for r, v in shares if v is not None]
    return sorted(known, key=lambda rv: -rv[1])[:n]


# -- comparing two kernels -------------------------------------------------------------------------

THRESHOLD = {"pct": 0.02, "amount": 0.05}  # 2 points of a percentage; 5% of an amount


def change(key: str, old: float | None, new: float | None) -> float | None:
    """How far a counter moved, in [-1, 1]: points / 100 for percentages, (new - old) / max(|old|,
    |new|) for amounts (bounded, so 0 -> something counts as a full move). None without both values."""
    if old is None or new is None:
        return None
    if BY_KEY[key].kind == "pct":
        return (new - old) / 100.0
    top = max(abs(old), abs(new))
    return 0.0 if top == 0 else (new - old) / top


def moved(key: str, old: float | None, new: float | None, direction: str, min_change: float | None = None) -> bool | None:
    """Did the counter move that way ("up", "down", or stay the "same")? None without data."""
    d = change(key, old, new)
    if d is None:
        return None
    t = THRESHOLD[BY_KEY[key].kind] if min_change is None else min_change
    if direction == "up":
        return d > t
    if direction == "down":
        return d < -t
    if direction == "same":
        return abs(d) <= t
    raise ValueError(f"direction {direction!r} is not up, down or same")


def adverse_moves(base: Mapping[str, Any], this: Mapping[str, Any], n: int = 3) -> list[tuple[str, float]]:
    """The n counters that moved furthest against their `better` direction (key, change), worst first:
    the measured part of why a rung got slower. TFLOPS and time, the outcome itself, are left out."""
    out = []
    for c in COUNTERS:
        if not c.better or c.key in ("tflops", "time_ms"):
            continue
        d = change(c.key, base.get(c.key), this.get(c.key))
        if d is None:
            continue
        against = -d if c.better == "up" else d
        if against > THRESHOLD[c.kind]:
            out.append((c.key, d))
    return sorted(out, key=lambda kd: -abs(kd[1]))[:n]
