"""The `shape` table: one row per (op, Input Dims, Input type, Concrete Inputs), with the work each call does
(perfmodels.py), the rates it ran at and how near the device's roof (peaks.py) that is. docs/roofline.md.

shape_table() turns the attribution table of level `shape` (attribute.py; keys are shape_keys labels) into
these columns; with_roofline() adds the rates from the table's own sums, so that it applies as well to a
per-rank table as to one over ranks (across.py sums count and duration_ns, and the rates follow).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.errors import TraceInputError
from traceattr.analysis.attribute import CALLS, KEY, TIME_KIND_DEVICE
from traceattr.analysis.peaks import Peak, device_peak
from traceattr.analysis.perfmodels import BAD_ARGS, NO_SHAPES, Skip, work
from traceattr.analysis.shape_keys import parse_label

KERNELS = "kernels"                  # device activities of the row's calls
FLOPS = "flops"                      # per call (-1: no model)
BYTES = "bytes"                      # per call (-1: no model)
TFLOPS_PER_S = "tflops_per_s"        # flops x count / duration_ns, TFLOP/s (NaN: no model or no duration)
TB_PER_S = "tb_per_s"                # bytes x count / duration_ns, TB/s
INTENSITY = "intensity"              # flops / bytes
BOUND = "bound"                      # "compute" or "memory" against the ridge point ("" unknown)
PEAK_PCT = "peak_pct"                # achieved / the roof at this intensity, % (NaN unknown)
DTYPE = "dtype"                      # the dtype class of the call's math (peaks.DTYPE_CLASSES)
MODEL = "model"                      # the model's family: gemm, conv, attention... ("" none)
SHAPE_TEXT_COLUMNS = (S.INPUT_DIMS, S.INPUT_TYPES, S.CONCRETE_INPUTS)
ROOFLINE_COLUMNS = (MODEL, DTYPE, FLOPS, BYTES, TFLOPS_PER_S, TB_PER_S, INTENSITY, BOUND, PEAK_PCT)
MODEL_FACTS = "model_facts"          # attrs: _model_facts of the whole table
DEVICES = "devices"                  # attrs: the table's kinds of device (attribute.py, shape_keys.device_texts)


@dataclass(frozen=True)
class PeakOverride:
    """--peak-tflops / --peak-tbps: used for every dtype and every device when given."""
    tflops: float | None = None
    tbps: float | None = None


def check_peaks(by: str, tflops: float | None, tbps: float | None) -> None:
    """--peak-tflops / --peak-tbps: positive finite numbers, with --by shape only."""
    for name, value in (("--peak-tflops", tflops), ("--peak-tbps", tbps)):
        if value is None:
            continue
        if by != "shape":
            raise TraceInputError(f"{name} needs --by shape")
        if type(value) is bool or not isinstance(value, (int, float)) or not (0 < value < 1e9):
            raise TraceInputError(f"{name} must be a positive number (TFLOP/s or TB/s), got {value!r}")


def shape_table(table: pd.DataFrame, whole: pd.DataFrame | None = None) -> pd.DataFrame:
    """The attribution table of level `shape` as the shape table (without rates): the key's parts in
    columns, `count` the op calls, `kernels` their activities; attrs[MODEL_FACTS] what has a model, judged
    on `whole` (the same table before --top folded it) when given."""
    parts = [parse_label(label) for label in table[KEY].tolist()]
    out = table.copy()
    out[KEY] = [p[0] for p in parts]
    for i, name in enumerate(SHAPE_TEXT_COLUMNS, 1):
        out[name] = pd.Series([p[i] for p in parts], index=out.index, dtype=object)
    out[KERNELS] = out[S.COUNT]
    out[S.COUNT] = out.pop(CALLS)
    first = [c for c in (S.RANK, S.DEVICE, KEY) if c in out.columns] + list(SHAPE_TEXT_COLUMNS) + [S.COUNT, KERNELS]
    out = out[first + [c for c in out.columns if c not in first]]
    out.attrs = dict(table.attrs)
    out.attrs[MODEL_FACTS] = whole.attrs[MODEL_FACTS] if whole is not None else _model_facts(out)
    return out


def _model_facts(table: pd.DataFrame) -> dict[str, int]:
    """Σ self_ns with and without a model, calls whose args do not fit their model or have no shapes, and
    whether any row has Input Dims: the header's figures, kept in attrs through --top and across_ranks."""
    works = [work(*key) for key in zip(table[KEY].tolist(), *(table[c].tolist() for c in SHAPE_TEXT_COLUMNS))]
    self_ns, calls = table[S.SELF_NS].to_numpy(np.int64), table[S.COUNT].to_numpy(np.int64)
    reason = np.array([w.reason if isinstance(w, Skip) else "" for w in works], dtype=object)
    return {"modelled_ns": int(self_ns[reason == ""].sum()), "self_ns": int(self_ns.sum()),
            "bad_calls": int(calls[reason == BAD_ARGS].sum()), "unshaped_calls": int(calls[reason == NO_SHAPES].sum()),
            "with_dims": int((table[S.INPUT_DIMS] != "").any())}


def with_roofline(table: pd.DataFrame, override: PeakOverride = PeakOverride()) -> pd.DataFrame:
    """The shape table with its roofline columns (replacing any it had) and the notes that say how much
    time has a model and which peaks were used."""
    out = table.drop(columns=[c for c in ROOFLINE_COLUMNS if c in table.columns])
    out.attrs = dict(table.attrs)
    keys = list(zip(out[KEY].tolist(), *(out[c].tolist() for c in SHAPE_TEXT_COLUMNS)))
    found = {key: work(*key) for key in set(keys)}
    works = [found[key] for key in keys]
    modelled = np.array([not isinstance(w, Skip) for w in works], dtype=bool)
    flops = np.array([w.flops if m else -1 for w, m in zip(works, modelled)], dtype=np.int64)
    nbytes = np.array([w.bytes if m else -1 for w, m in zip(works, modelled)], dtype=np.int64)
    calls = out[S.COUNT].to_numpy(np.float64)
    duration = out[S.DURATION_NS].to_numpy(np.float64)
    host_time = out.attrs.get("time_kind", TIME_KIND_DEVICE) != TIME_KIND_DEVICE
    timed = modelled & (duration > 0) & ~host_time
    with np.errstate(divide="ignore", invalid="ignore"):
        tflops = np.where(timed, flops * calls / duration / 1e3, np.nan)
        tbps = np.where(timed, nbytes * calls / duration / 1e3, np.nan)
        intensity = np.where(modelled, flops / np.maximum(nbytes, 1), np.nan)
    peak, peak_note = _peak([json.loads(text) for text in out.attrs.get(DEVICES, [])], override)
    dtypes = [w.dtype if m else "" for w, m in zip(works, modelled)]
    roof_flops = np.array([_roof(peak, d) for d in dtypes], dtype=np.float64)
    roof_bw = peak.tbps if peak is not None and peak.tbps else np.nan
    ridge = roof_flops / roof_bw
    known = timed & np.isfinite(ridge)
    compute = known & (intensity >= ridge)
    bound = np.where(known, np.where(compute, "compute", "memory"), "")
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(compute, 100 * tflops / roof_flops, 100 * tbps / roof_bw)
    out[MODEL] = [w.family if m else "" for w, m in zip(works, modelled)]
    out[DTYPE] = dtypes
    out[FLOPS], out[BYTES] = flops, nbytes
    out[TFLOPS_PER_S], out[TB_PER_S], out[INTENSITY] = tflops, tbps, intensity
    out[BOUND] = bound
    out[PEAK_PCT] = np.where(known, pct, np.nan)
    facts = out.attrs.get(MODEL_FACTS) or _model_facts(out)
    out.attrs["notes"] = list(out.attrs.get("notes", [])) + _notes(facts, modelled, duration, host_time, peak_note)
    out.attrs["level_facts"] = {"modelled": _modelled_share(facts),
                             "peaks": peak_note if peak is None else _peak_text(peak)}
    return out


def table_peak(table: pd.DataFrame, override: PeakOverride = PeakOverride()) -> tuple[Peak | None, str]:
    """The peaks a shape table is measured against (the devices in its attrs), or None and why: the roof
    the HTML report draws."""
    return _peak([json.loads(text) for text in table.attrs.get(DEVICES, [])], override)


def _roof(peak: Peak | None, dtype: str) -> float:
    if peak is None or not dtype:
        return math.nan
    value = peak.tflops.get(dtype)
    return float(value) if value else math.nan


def _peak(devices: list[dict], override: PeakOverride) -> tuple[Peak | None, str]:
    """The peaks the table is measured against, or None and why."""
    names = sorted({str(entry.get("name", "")) for entry in devices})
    peaks = {id(entry): device_peak(entry) for entry in devices}
    known = {peak.device if peak else None for peak in peaks.values()}
    if override.tflops and override.tbps:
        return Peak("given", {d: override.tflops for d in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")},
                    override.tbps), ""
    if len(known) != 1 or None in known:
        why = ("no deviceProperties in the traces" if not devices else
               f"peaks unknown for {', '.join(repr(n) for n in names)}" if None in known else
               f"several kinds of device ({', '.join(names)})")
        return None, f"{why}: bound and peak_pct are blank; give --peak-tflops and --peak-tbps"
    peak = next(iter(peaks.values()))
    if override.tflops or override.tbps:     # one given: it replaces that figure of the known device
        flops = {d: override.tflops for d in peak.tflops} if override.tflops else peak.tflops
        peak = Peak(f"{peak.device} (given)", flops, override.tbps or peak.tbps)
    return peak, ""


def _peak_text(peak: Peak) -> str:
    figures = ", ".join(f"{d} {v:g}" for d, v in peak.tflops.items() if v)
    return f"{peak.device}: {figures} TFLOP/s, {peak.tbps:g} TB/s (docs/roofline.md)"


def _modelled_share(facts: dict) -> str:
    total = facts["self_ns"]
    return f"{100 * facts['modelled_ns'] / total:.1f}% of self time has a performance model" if total else "no time"


def _notes(facts: dict, modelled: np.ndarray, duration: np.ndarray, host_time: bool, peak_note: str) -> list[str]:
    notes = []
    if facts["bad_calls"]:
        notes.append(f"{facts['bad_calls']} call(s) of modelled ops have args that do not fit their model (missing, "
                     "malformed or absurd dims, unknown dtypes): no numbers for those rows")
    if facts["unshaped_calls"] and facts["with_dims"]:
        notes.append(f"{facts['unshaped_calls']} call(s) of modelled ops have no Input Dims (record_shapes off where "
                     "they ran, or a shape list over 64 KiB): no numbers for those rows")
    zero = modelled & (duration <= 0)
    if zero.any():
        notes.append(f"{int(zero.sum())} modelled row(s) have no device duration: no rates")
    if host_time:
        notes.append("no device activities: rates need device time and are blank")
    if not facts["with_dims"] and facts["self_ns"]:
        notes.append("no Input Dims in the traces: capture with record_shapes=True for FLOPs and bytes")
    if peak_note:
        notes.append(peak_note)
    return notes
