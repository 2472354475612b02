"""Everything the bench knows about the device: its datasheet figures (the roofs of a roofline), the
header of a run (name, SMs, clocks, driver), and the SM clock and board power sampled while something
runs (NVML), which tells a power-capped clock from a slow kernel."""
from __future__ import annotations

import ctypes
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Datasheet:
    """NVIDIA's datasheet figures for a board: dense fp16 tensor-core TFLOPS (fp32 accumulate, no
    sparsity), fp32 CUDA-core TFLOPS, HBM bandwidth in TB/s."""
    key: str  # matched as a substring of the device name
    fp16_dense_tflops: float
    fp32_tflops: float
    hbm_tbps: float


# First match wins, so the variants of a name come before the name itself ("H100 NVL" before the SXM
# names, "GH200 144G" before "GH200").
DATASHEETS: tuple[Datasheet, ...] = (
    Datasheet("H100 NVL", 835.0, 60.0, 3.9),
    Datasheet("H100 PCIe", 756.0, 51.0, 2.0),
    Datasheet("H200 NVL", 835.0, 60.0, 4.8),
    Datasheet("GH200 144G", 989.0, 67.0, 4.9),  # HBM3e
    Datasheet("GH200", 989.0, 67.0, 4.0),  # HBM3
    Datasheet("H200", 989.0, 67.0, 4.8),
    Datasheet("H100 80GB HBM3", 989.0, 67.0, 3.35),  # the SXM5 board reports this name
    Datasheet("H100 SXM", 989.0, 67.0, 3.35),
    Datasheet("H800", 989.0, 67.0, 3.35),
    Datasheet("A100-SXM4-80GB", 312.0, 19.5, 2.039),
    Datasheet("A100 80GB PCIe", 312.0, 19.5, 1.935),
    Datasheet("A100", 312.0, 19.5, 1.555),
    Datasheet("L40S", 362.0, 91.6, 0.864),
)


def datasheet(name: str) -> Datasheet | None:
    """None ("unknown") for a device not in the table: no guess from SM counts and clocks."""
    for sheet in DATASHEETS:
        if sheet.key.lower() in name.lower():
            return sheet
    return None


@dataclass(frozen=True)
class Roofs:
    """The roofline of a device: compute roofs in TFLOPS, the memory roof in TB/s."""
    fp16_tensor_tflops: float | None
    fp32_tflops: float | None
    hbm_tbps: float | None


def roofs(device: dict[str, Any]) -> Roofs:
    """The roofs of a device record (a results file's "device"): its recorded figures, the datasheet
    table by its name for what a file recorded before they were recorded."""
    sheet = datasheet(device["name"])
    return Roofs(device.get("fp16_dense_peak_tflops") or (sheet.fp16_dense_tflops if sheet else None),
                 device.get("fp32_peak_tflops") or (sheet.fp32_tflops if sheet else None),
                 device.get("hbm_tbps") or (sheet.hbm_tbps if sheet else None))


def nvidia_smi(ordinal: int = 0) -> dict[str, Any]:
    """Clocks, power limit and driver as nvidia-smi reports them now ({} where it is missing)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    fields = ("driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
              "power.limit", "pstate", "temperature.gpu")
    try:
        out = subprocess.run([exe, "-i", str(ordinal), f"--query-gpu={','.join(fields)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    rec: dict[str, Any] = {}
    for f, v in zip(fields, values):
        try:
            rec[f] = float(v) if f not in ("driver_version", "pstate") else v
        except ValueError:
            rec[f] = v
    return rec


CLOCK_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "power.limit", "pstate",
                "temperature.gpu")


def clocks(ordinal: int = 0) -> dict[str, Any]:
    """Clocks, power limit, P-state and temperature now (compare start and end of a run for throttling)."""
    smi = nvidia_smi(ordinal)
    return {k: smi[k] for k in CLOCK_FIELDS if k in smi}


def device_record(dev: Any) -> dict[str, Any]:
    i = dev.info
    smi = nvidia_smi(i.ordinal)
    sheet = datasheet(i.name)
    return {
        "name": i.name,
        "cc": f"{i.cc[0]}.{i.cc[1]}",
        "sm_count": i.sm_count,
        "l2_bytes": i.l2_bytes,
        "max_clock_mhz": i.clock_khz / 1000.0,
        "clocks_at_start": {k: smi[k] for k in CLOCK_FIELDS if k in smi},
        "fp16_dense_peak_tflops": sheet.fp16_dense_tflops if sheet else None,
        "fp32_peak_tflops": sheet.fp32_tflops if sheet else None,
        "hbm_tbps": sheet.hbm_tbps if sheet else None,
        "driver": {"cuda": f"{i.driver_version // 1000}.{i.driver_version % 1000 // 10}",
                   "nvidia": smi.get("driver_version")},
    }


def header_lines(device: dict[str, Any], build: dict[str, Any]) -> list[str]:
    clocks = device.get("clocks_at_start", {})
    sm_clock = (f"SM clock {clocks['clocks.sm']:.0f} MHz now (max {clocks.get('clocks.max.sm', 0):.0f})"
                if "clocks.sm" in clocks else f"SM clock max {device['max_clock_mhz']:.0f} MHz")
    mem_clock = f", memory clock {clocks['clocks.mem']:.0f} MHz" if "clocks.mem" in clocks else ""
    peak = device.get("fp16_dense_peak_tflops")
    drv = device["driver"]
    return [
        f"{device['name']} (sm_{device['cc'].replace('.', '')}, {device['sm_count']} SMs, "
        f"L2 {device['l2_bytes'] / 2**20:.0f} MiB), {sm_clock}{mem_clock}",
        f"driver {drv.get('nvidia') or '?'} (CUDA {drv['cuda']}), build {build.get('hash') or '?'}"
        f"{', git ' + build['git'] if build.get('git') else ''}, fp16 dense peak "
        f"{f'{peak:.0f} TFLOPS' if peak else 'unknown'}"
        f"{f', HBM {hbm:g} TB/s' if (hbm := device.get('hbm_tbps')) else ''}",
    ]


# NVML's clock-event (throttle) reason bits, as nvml.h names them
THROTTLE_REASONS = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
NVML_CLOCK_SM = 1
SAMPLE_EVERY_S = 0.005


@dataclass(frozen=True)
class Sampled:
    """The mean SM clock (MHz) and board power (W) while something ran, and every throttle reason seen;
    None where NVML gave no reading."""
    sm_mhz: float | None
    board_w: float | None
    throttle: tuple[str, ...]


class ClockSampler:
    """Samples the SM clock, board power and throttle reasons through NVML (the library nvidia-smi
    reads) in a thread while a function runs. Without NVML every reading is None."""

    def __init__(self, index: int = 0):
        self.lib = self.handle = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            handle = ctypes.c_void_p()
            if lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                self.lib, self.handle = lib, handle
        except (OSError, AttributeError):
            pass
        # newer drivers name the reasons "clock events"; older ones only have "throttle reasons"
        self.reasons_fn = None
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if self.lib is not None and hasattr(self.lib, fn):
                self.reasons_fn = getattr(self.lib, fn)
                break

    @property
    def available(self) -> bool:
        return self.lib is not None

    def sample(self) -> tuple[int, float | None, int] | None:
        """(SM MHz, board W, reason bits) now, or None."""
        if self.lib is None:
            return None
        clk, mw, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(clk)):
            return None
        watts = mw.value / 1e3 if self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw)) == 0 else None
        if self.reasons_fn is None or self.reasons_fn(self.handle, ctypes.byref(reasons)):
            reasons.value = 0
        return clk.value, watts, reasons.value

    def during(self, fn: Callable[[], Any]) -> tuple[Any, Sampled]:
        """fn()'s result and what was sampled every SAMPLE_EVERY_S while it ran."""
        samples: list[tuple[int, float | None, int]] = []
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                got = self.sample()
                if got is not None:
                    samples.append(got)
                time.sleep(SAMPLE_EVERY_S)

        th = threading.Thread(target=loop, daemon=True) if self.lib is not None else None
        if th is not None:
            th.start()
        try:
            out = fn()
        finally:
            stop.set()
            if th is not None:
                th.join()
        watts = [w for _, w, _ in samples if w is not None]
        bits = 0
        for _, _, r in samples:
            bits |= r
        return out, Sampled(statistics.mean(c for c, _, _ in samples) if samples else None,
                            statistics.mean(watts) if watts else None,
                            tuple(name for bit, name in THROTTLE_REASONS.items() if bits & bit))
