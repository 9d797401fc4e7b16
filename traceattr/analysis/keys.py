"""Per-activity keys for comparisons: which key (kernel, category, op, module, annotation, step) each device
activity's exact self time goes to, and which step launched it.

Keys are built per distinct value (codes, then one string per code), never per event. The result is a
small frame of (rank, device, key, raw, step, self_ns, count) sums, one row per distinct combination,
which compare.py and imbalance.py aggregate further.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.attribute import class_path
from traceattr.analysis.normalize import normalize_kernel_name, normalize_text
from traceattr.analysis.shape_keys import device_shape_codes
from traceattr.attribution.links import link, profiler_step_names
from traceattr.attribution.sweep import sweep
from traceattr.errors import TraceInputError
from traceattr.io.codes import dictionary_codes
from traceattr.model.traceset import TraceSet

LEVELS = ("kernel", "category", "op", "op_stack", "module", "module_class", "annotation", "step")
COMPARE_LEVELS = LEVELS + ("shape",)     # shape: (op, Input Dims, Input type, Concrete Inputs), its count op calls
UNATTRIBUTED = "<unattributed>"     # same label as attribute()
KEY = "key"
RAW = "raw"          # the key before normalization (a kernel's full name, ProfilerStep#N)
STEP = "step"        # step index in the trace set's step order (-1: launched outside every step)
UNIT_COLUMNS = [S.RANK, S.DEVICE, KEY, RAW, STEP, S.SELF_NS, S.COUNT]


def activity_keys(traceset: TraceSet, by: str, normalize: bool = True) -> pd.DataFrame:
    """Self time summed per (rank, device, key, raw, step). Σ self_ns per (rank, device) == busy."""
    if by not in COMPARE_LEVELS:
        raise TraceInputError(f"cannot compare by {by!r}: choose one of {', '.join(COMPARE_LEVELS)}")
    device = traceset.device
    if device.num_rows == 0:
        return _empty()
    count = np.ones(device.num_rows, dtype=np.int64)
    if by == "shape":       # count: the op calls (their first activity), as summarize --by shape counts them
        codes, raw_names, count = _shape_codes(traceset)
    else:
        codes, raw_names = _codes(traceset, by)
    keys = [_normalized(raw, by, normalize) for raw in raw_names]
    if by == "step" and normalize:
        keys = step_keys(raw_names, link(traceset).step_names)
    links = link(traceset)
    frame = pd.DataFrame({
        S.RANK: np.asarray(device.column(S.RANK).to_numpy(), dtype=np.int64),
        S.DEVICE: np.asarray(device.column(S.DEVICE).to_numpy(), dtype=np.int64),
        "code": codes, STEP: np.asarray(links.step, dtype=np.int64),
        S.SELF_NS: sweep(traceset).self_ns, S.COUNT: count})
    summed = frame.groupby([S.RANK, S.DEVICE, "code", STEP], as_index=False, sort=False)[
        [S.SELF_NS, S.COUNT]].sum()
    code = summed.pop("code").to_numpy()
    summed[KEY] = np.asarray(keys, dtype=object)[code]
    summed[RAW] = np.asarray(raw_names, dtype=object)[code]
    return summed[UNIT_COLUMNS].astype({S.SELF_NS: "int64", S.COUNT: "int64", STEP: "int64"})


def step_keys(raw_names: list[str], names: tuple[str, ...]) -> list[str]:
    """Normalized step keys: runs number their steps differently, so a step is matched by its position in
    the step order `names` ("step 3"); other names (no step) stay as they are."""
    order = {name: i for i, name in enumerate(names)}
    return [f"step {order[raw] + 1}" if raw in order else raw for raw in raw_names]


def step_names(traceset: TraceSet) -> tuple[str, ...]:
    """ProfilerStep#N names in step order; STEP values index this tuple."""
    return profiler_step_names(traceset) if traceset.device.num_rows or traceset.host.num_rows else ()


def _empty() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype="str" if name in (KEY, RAW) else "int64")
                         for name in UNIT_COLUMNS})


def _codes(traceset: TraceSet, by: str) -> tuple[np.ndarray, list[str]]:
    """Per device row a code into the returned list of raw key strings (one per distinct value)."""
    device = traceset.device
    if by in ("kernel", "category"):
        dictionary, codes = dictionary_codes(device.column(S.NAME if by == "kernel" else S.CATEGORY))
        return codes, [str(v) for v in dictionary.to_pylist()]
    links = link(traceset)
    if by == "op":
        raw_codes, text = links.op_code, lambda c: links.host_names[c]
    elif by == "step":
        raw_codes, text = links.step, lambda c: links.step_names[c]
    else:
        level = "module" if by == "module_class" else by      # instances, grouped by class in _normalized
        trie = {"op_stack": links.op_stacks, "module": links.modules, "annotation": links.annotations}[level]
        path_codes = {"op_stack": links.op_stack, "module": links.module, "annotation": links.annotation}[level]
        raw_codes = np.where(path_codes == 0, -1, path_codes)     # path code 0: no path
        text = trie.string
    raw_codes = np.asarray(raw_codes, dtype=np.int64)
    unique, dense = np.unique(raw_codes, return_inverse=True)
    names = [UNATTRIBUTED if c < 0 else text(c) for c in unique.tolist()]
    return dense.reshape(-1).astype(np.int64), names


def _shape_codes(traceset: TraceSet) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Per device row: a code into the shape labels (shape_keys.shape_label; UNATTRIBUTED: no launching op)
    and what it counts: 1 for the first activity of its op call (and for an unattributed one), else 0."""
    codes, labels, first = device_shape_codes(traceset, link(traceset))
    unique, dense = np.unique(codes, return_inverse=True)
    names = [UNATTRIBUTED if c < 0 else labels[c] for c in unique.tolist()]
    return dense.reshape(-1).astype(np.int64), names, np.where(codes < 0, 1, first).astype(np.int64)


def _normalized(raw: str, by: str, normalize: bool) -> str:
    if by == "module_class":              # the class is the key; the instance path stays the raw name
        raw = class_path(raw)
    if not normalize or raw == UNATTRIBUTED:
        return raw
    if by == "kernel":
        return normalize_kernel_name(raw)
    return raw if by in ("category", "step", "shape") else normalize_text(raw)     # a shape's dims are exact
