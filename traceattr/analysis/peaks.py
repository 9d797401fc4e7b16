"""Peak dense throughput per dtype and memory bandwidth of the GPUs Kineto traces name (docs/roofline.md).

TFLOP/s are dense (no 2:4 sparsity), tensor/matrix-core peaks where the unit has them (fp64 and tf32 too),
at the boost clock; bandwidth is the HBM/GDDR peak in TB/s (10^12 bytes/s). None: the vendor gives no
figure for that dtype (no fp8 before Hopper/CDNA3, no bf16 on V100), and then peak_pct stays blank.
An AMD MI250X or MI250 is two GCDs, and each is one device in a trace: their rows are per GCD (half the
module's figures).

Sources (vendor datasheets, dense figures; sparse ones halved):
* H100 SXM5 / PCIe: NVIDIA H100 Tensor Core GPU datasheet (2023), and the Hopper architecture whitepaper
* H200 SXM: NVIDIA H200 datasheet (2024): H100 SXM compute, 4.8 TB/s
* B200: NVIDIA HGX B200 / DGX B200 datasheets (2024), per GPU of the 8-GPU board
* A100: NVIDIA A100 datasheet (2021): SXM4 40 GB 1.555 TB/s, 80 GB 2.039 TB/s; PCIe 80 GB 1.935 TB/s
* L40S: NVIDIA L40S datasheet (2023)
* V100: NVIDIA V100 datasheet (2020): SXM2 and PCIe
* MI300X: AMD Instinct MI300X datasheet (2023)
* MI250X, MI250, MI210: AMD Instinct MI200 series datasheets (2021/2022)
"""

from __future__ import annotations

import json
from dataclasses import dataclass

DTYPE_CLASSES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class Peak:
    device: str                      # the name peaks are known under ("H100 SXM")
    tflops: dict[str, float | None]  # dtype class -> dense TFLOP/s (TOP/s for int8)
    tbps: float                      # memory bandwidth, TB/s


def _peak(device: str, tbps: float, fp64, fp32, tf32, bf16, fp16, fp8, int8) -> Peak:
    return Peak(device, dict(zip(DTYPE_CLASSES, (fp64, fp32, tf32, bf16, fp16, fp8, int8))), tbps)


PEAKS = {peak.device: peak for peak in (
    #     device           TB/s    fp64   fp32   tf32    bf16    fp16    fp8     int8
    _peak("H100 SXM",      3.35,   67.0,  67.0,  494.7,  989.4,  989.4,  1978.9, 1978.9),
    _peak("H100 PCIe",     2.0,    51.0,  51.0,  378.0,  756.0,  756.0,  1513.0, 1513.0),
    _peak("H200",          4.8,    67.0,  67.0,  494.7,  989.4,  989.4,  1978.9, 1978.9),
    _peak("B200",          8.0,    37.0,  None,  1125.0, 2250.0, 2250.0, 4500.0, 4500.0),
    _peak("A100 40GB",     1.555,  19.5,  19.5,  156.0,  312.0,  312.0,  None,   624.0),
    _peak("A100 80GB",     2.039,  19.5,  19.5,  156.0,  312.0,  312.0,  None,   624.0),
    _peak("A100 80GB PCIe", 1.935, 19.5,  19.5,  156.0,  312.0,  312.0,  None,   624.0),
    _peak("L40S",          0.864,  None,  91.6,  183.0,  362.05, 362.05, 733.0,  733.0),
    _peak("V100 SXM2",     0.9,    7.8,   15.7,  None,   None,   125.0,  None,   None),
    _peak("V100 PCIe",     0.9,    7.0,   14.0,  None,   None,   112.0,  None,   None),
    _peak("MI300X",        5.3,    163.4, 163.4, 653.7,  1307.4, 1307.4, 2614.9, 2614.9),
    _peak("MI250X GCD",    1.6384, 47.85, 47.85, None,   191.5,  191.5,  None,   191.5),
    _peak("MI250/MI210 GCD", 1.6384, 45.3, 45.3, None,   181.0,  181.0,  None,   181.0),
)}

# AMD's gfx90a GCDs by compute units (ROCm names an MI250 "AMD Radeon Graphics"): 110 on an MI250X, 104 on
# an MI250 and an MI210, whose per-GCD peaks are the same
_GFX90A_BY_UNITS = {110: "MI250X GCD", 104: "MI250/MI210 GCD"}


def device_peak(entry: dict) -> Peak | None:
    """The peaks of one `deviceProperties` entry (name, totalGlobalMem, numSms, computeMajor), or None."""
    name = str(entry.get("name", ""))
    upper = name.upper()
    memory = entry.get("totalGlobalMem")
    big = isinstance(memory, int) and memory > 60 * 2**30
    if "H100" in upper:
        return PEAKS["H100 PCIe" if "PCIE" in upper else "H100 SXM"]
    for key in ("H200", "B200", "L40S", "MI300X"):
        if key in upper:
            return PEAKS[key]
    if "A100" in upper:
        return PEAKS[("A100 80GB PCIe" if "PCIE" in upper else "A100 80GB") if big else "A100 40GB"]
    if "V100" in upper:
        return PEAKS["V100 PCIe" if "PCIE" in upper else "V100 SXM2"]
    if "MI250X" in upper:
        return PEAKS["MI250X GCD"]
    if "MI250" in upper or "MI210" in upper:
        return PEAKS["MI250/MI210 GCD"]
    if name == "AMD Radeon Graphics" and entry.get("computeMajor") == 9 and entry.get("computeMinor") == 0:
        found = _GFX90A_BY_UNITS.get(entry.get("numSms"))
        return PEAKS[found] if found else None
    return None


def device_entries(properties_text: str) -> dict[int, dict]:
    """A file's `deviceProperties` JSON text -> {device id: entry} (entries without an int id: by position)."""
    try:
        entries = json.loads(properties_text) if properties_text else []
    except (ValueError, RecursionError):
        return {}
    if not isinstance(entries, list):
        return {}
    out = {}
    for position, entry in enumerate(entries):
        if isinstance(entry, dict):
            key = entry.get("id")
            out[key if type(key) is int else position] = entry
    return out
