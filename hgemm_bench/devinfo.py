"""The device header: name, SMs, clocks, driver, and the fp16 dense tensor-core peak to compare with."""
from __future__ import annotations

import shutil
import subprocess
from typing import Any

# Dense fp16 tensor-core peak (fp32 accumulate, no sparsity) from NVIDIA's datasheets, matched by
# substring of the device name, first match wins (so "H100 NVL" is tried before the SXM names).
FP16_DENSE_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H200 NVL", 835.0),
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 80GB HBM3", 989.0),  # the SXM5 board reports this name
    ("H100 SXM", 989.0),
    ("H800", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
)


def fp16_peak_tflops(name: str) -> float | None:
    """None ("unknown") for a device not in the table: no guess from SM counts and clocks."""
    for key, peak in FP16_DENSE_PEAK_TFLOPS:
        if key.lower() in name.lower():
            return peak
    return None


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
    return {
        "name": i.name,
        "cc": f"{i.cc[0]}.{i.cc[1]}",
        "sm_count": i.sm_count,
        "l2_bytes": i.l2_bytes,
        "max_clock_mhz": i.clock_khz / 1000.0,
        "clocks_at_start": {k: smi[k] for k in CLOCK_FIELDS if k in smi},
        "fp16_dense_peak_tflops": fp16_peak_tflops(i.name),
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
        f"{f'{peak:.0f} TFLOPS' if peak else 'unknown'}",
    ]
