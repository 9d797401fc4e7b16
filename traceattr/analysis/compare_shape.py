"""`compare --by shape`: the comparison's rows (compare.py, unchanged: Σ key deltas == busy delta) with what a
shape's speed-up is: time per op call on each side, the TFLOP/s each side ran it at, and A's time per call
over B's (> 1: B is faster).

The rates here are of self time (the table's conserved column: overlapping streams counted once), so they
equal `summarize --by shape`'s (of summed durations) where a shape's kernels overlap nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.compare import A_COUNT, A_NS, B_COUNT, B_NS, KIND
from traceattr.analysis.keys import KEY
from traceattr.analysis.perfmodels import Skip, work
from traceattr.analysis.shape_keys import parse_label

FLOPS = "flops"                                   # per call (-1: no model)
A_CALL_NS, B_CALL_NS = "a_call_ns", "b_call_ns"   # self ns per op call (NO_INT: no call on that side)
A_TFLOPS, B_TFLOPS = "a_tflops_per_s", "b_tflops_per_s"
SPEEDUP = "speedup"                               # a_call_ns / b_call_ns (NaN: a side without calls)
SHAPE_COLUMNS = (S.INPUT_DIMS, S.INPUT_TYPES, S.CONCRETE_INPUTS)


def with_speedups(table: pd.DataFrame) -> pd.DataFrame:
    """The shape comparison with its key split (op name and dims as `key`, the exact args in their own
    columns) and the per-call columns; rows and sums as they were."""
    parts = [parse_label(label) for label in table[KEY].astype(str).tolist()]
    out = table.copy()
    out[KEY] = [f"{name} {dims}" if dims else name for name, dims, _, _ in parts]
    at = out.columns.get_loc(KEY) + 1
    for i, column in enumerate(SHAPE_COLUMNS):
        out.insert(at + i, column, pd.Series([p[i + 1] for p in parts], index=out.index, dtype=object))
    found = [work(*p) if p[1] else None for p in parts]
    flops = np.array([-1 if w is None or isinstance(w, Skip) else w.flops for w in found], dtype=np.int64)
    keyed = (out[KIND] == "key").to_numpy() if KIND in out.columns else np.ones(len(out), bool)
    columns = {FLOPS: np.where(keyed, flops, -1)}
    for count, ns, per_call, rate in ((A_COUNT, A_NS, A_CALL_NS, A_TFLOPS), (B_COUNT, B_NS, B_CALL_NS, B_TFLOPS)):
        calls = out[count].to_numpy(np.int64)
        self_ns = out[ns].to_numpy(np.int64)
        has = keyed & (calls > 0)
        columns[per_call] = np.where(has, np.round(self_ns / np.maximum(calls, 1)), S.NO_INT).astype(np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            columns[rate] = np.where(has & (flops > 0) & (self_ns > 0), flops * calls / self_ns / 1e3, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        both = (columns[A_CALL_NS] != S.NO_INT) & (columns[B_CALL_NS] != S.NO_INT) & (columns[B_CALL_NS] > 0)
        columns[SPEEDUP] = np.where(both, out[A_NS] / np.maximum(out[A_COUNT], 1)
                                    / (out[B_NS] / np.maximum(out[B_COUNT], 1)), np.nan)
    for name, values in columns.items():
        out[name] = values
    out.attrs = dict(table.attrs)
    out.attrs["notes"] = list(out.attrs.get("notes", [])) + [
        "by shape: count is op calls; a_call_ns / b_call_ns and the TFLOP/s are of self time per call; "
        "speedup = a_call_ns / b_call_ns (> 1: B is faster)"]
    return out
