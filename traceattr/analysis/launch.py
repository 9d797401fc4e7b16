"""The `launch` level: per (rank, device, stream, launching op), how long the host took to launch the
activities, how long they waited between their launch and their start, and how many were short.

The map step keys each device activity by (op, stream, delay bin) (attribute.py sums them as any level,
exactly, and merges them across files), and launch_table() folds the bins of a key into its delay
percentiles: 16 bins an octave, so a percentile is the upper edge of its bin, at most 4.4% above the exact
value (the exact values would be one number per kernel on the driver). Launch time is the runtime call's
duration (cudaLaunchKernel...), counted once per call (a graph launch starts several kernels); the delay
is the activity's start minus the call's start. Short activities last under SHORT_NS: the header says how
many there are, their share of busy time and the ops that launch most of them.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.fold import fold_below_top
from traceattr.attribution.hosttree import dense_codes
from traceattr.attribution.links import Links
from traceattr.model.traceset import TraceSet

SHORT_NS = 10_000                     # 10 µs: below it a kernel costs about what its launch does
BINS_PER_OCTAVE = 16
LAUNCHES = "launches"                 # runtime calls that launched the row's activities
LAUNCH_NS = "launch_ns"               # Σ their durations (host time spent launching)
SHORT = "short"                       # activities shorter than SHORT_NS
SHORT_SELF_NS = "short_self_ns"       # their self time
DELAYED = "delayed"                   # activities with a launch record (whose delay is known)
DELAY_P50_NS = "delay_p50_ns"         # launch-to-start delay percentiles (-1: no launch record)
DELAY_P99_NS = "delay_p99_ns"
UNIT_COLUMNS = (LAUNCHES, LAUNCH_NS, SHORT, SHORT_SELF_NS, DELAYED)
_NO_BIN = -1


def delay_bin(delay_ns: np.ndarray) -> np.ndarray:
    """0 for a delay <= 0 ns, else 1 + floor(16 log2(delay)): bin b holds [2^((b-1)/16), 2^(b/16)) ns."""
    delay = np.asarray(delay_ns, dtype=np.float64)
    bins = np.floor(BINS_PER_OCTAVE * np.log2(np.maximum(delay, 1))).astype(np.int64) + 1
    return np.where(delay <= 0, 0, bins)


def bin_upper_ns(b: int) -> int:
    """The largest delay bin `b` holds, in whole ns (rounded up)."""
    return 0 if b <= 0 else int(np.ceil(2.0 ** (b / BINS_PER_OCTAVE)))


def launch_units(traceset: TraceSet, links: Links, self_ns: np.ndarray) -> tuple[np.ndarray, list[str], dict]:
    """Per device row: the code of its (op, stream, delay bin) key (-1: no op launched it), the labels, and
    the unit columns."""
    device, host = traceset.device, traceset.host
    start = np.asarray(device.column(S.START_NS).to_numpy(), dtype=np.int64)
    end = np.asarray(device.column(S.END_NS).to_numpy(), dtype=np.int64)
    stream = np.asarray(device.column(S.STREAM).to_numpy(), dtype=np.int64)
    op = np.asarray(links.op_code, dtype=np.int64)      # graph replays: their capture op, or the launch
    runtime = np.asarray(links.runtime_row, dtype=np.int64)
    has = runtime >= 0
    host_start = np.asarray(host.column(S.START_NS).to_numpy(), dtype=np.int64)
    host_end = np.asarray(host.column(S.END_NS).to_numpy(), dtype=np.int64)
    rows = np.maximum(runtime, 0)
    bins = np.where(has, delay_bin(start - host_start[rows] if len(host_start) else start), _NO_BIN)
    first = np.zeros(len(runtime), dtype=bool)            # a runtime call's first activity counts the call
    if has.any():
        _, at = np.unique(runtime[has], return_index=True)
        first[np.flatnonzero(has)[at]] = True
    short = (end - start) < SHORT_NS
    # an activity no op launched is <unattributed> (code -1), one row per device as at every level: the
    # linked share then says how much of the table rests on missing links
    linked = np.flatnonzero(op >= 0)
    code = np.full(len(op), -1, dtype=np.int64)
    code[linked] = dense_codes(op[linked], stream[linked], bins[linked])
    n = int(code.max(initial=-1)) + 1
    pick = np.zeros(n, dtype=np.int64)
    pick[code[linked][::-1]] = linked[::-1]
    names = links.host_names
    labels = [json.dumps([names[o], s, b]) for o, s, b in
              zip(op[pick].tolist(), stream[pick].tolist(), bins[pick].tolist())]
    units = {LAUNCHES: first.astype(np.int64), LAUNCH_NS: np.where(first, host_end[rows] - host_start[rows], 0)
             if len(host_start) else np.zeros(len(first), np.int64),
             SHORT: short.astype(np.int64), SHORT_SELF_NS: np.where(short, self_ns, 0), DELAYED: has.astype(np.int64)}
    return code, labels, units


def launch_table(table: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """The attribution table of level `launch` (one row per delay bin) as one row per (rank, device,
    stream, op), with the delay percentiles, and the short-kernel facts in attrs["level_facts"]."""
    parsed = [json.loads(label) if label.startswith("[") else [label, S.NO_INT, _NO_BIN]
              for label in table["key"].tolist()]
    frame = table.drop(columns=["key", S.SELF_PCT]).copy()
    frame["key"] = [p[0] for p in parsed]
    frame[S.STREAM] = np.array([p[1] for p in parsed], dtype=np.int64)
    frame["bin"] = np.array([p[2] for p in parsed], dtype=np.int64)
    keys = [S.RANK, S.DEVICE, S.STREAM, "key"]
    summed = [S.COUNT, LAUNCHES, LAUNCH_NS, DELAYED, SHORT, SHORT_SELF_NS, S.SELF_NS, S.DURATION_NS, S.SOLO_NS]
    out = frame.groupby(keys, as_index=False, sort=False)[summed].sum()
    p50, p99 = _percentiles(frame, keys, out)
    out[DELAY_P50_NS], out[DELAY_P99_NS] = p50, p99
    totals = table.attrs.get("totals", {})
    whole = np.array([totals.get((r, d), 0) for r, d in zip(out[S.RANK].tolist(), out[S.DEVICE].tolist())],
                     dtype=np.float64)
    out[S.SELF_PCT] = np.divide(100.0 * out[S.SELF_NS], whole, out=np.zeros(len(out)), where=whole > 0)
    columns = keys + [S.COUNT, LAUNCHES, LAUNCH_NS, DELAY_P50_NS, DELAY_P99_NS, SHORT, SHORT_SELF_NS,
                      S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.SELF_PCT]
    out = out[columns].sort_values([S.RANK, S.DEVICE, S.SELF_NS, "key"], ascending=[True, True, False, True],
                                   kind="stable").reset_index(drop=True)
    facts = _short_facts(out, totals)
    if top is not None:
        out = fold_below_top(out, top, "key", [S.COUNT, LAUNCHES, LAUNCH_NS, SHORT, SHORT_SELF_NS, S.SELF_NS,
                                               S.DURATION_NS, S.SOLO_NS, S.SELF_PCT])
    out = out.astype({c: "int64" for c in columns if c not in ("key", S.SELF_PCT)})
    out.attrs = dict(table.attrs)
    out.attrs["level_facts"] = facts
    return out


def _percentiles(frame: pd.DataFrame, keys: list[str], out: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """p50 and p99 of the delay per key of `out`, from the bin rows of `frame` (-1 without a delay)."""
    index = {key: i for i, key in enumerate(zip(*(out[k].tolist() for k in keys)))}
    p50, p99 = np.full(len(out), -1, np.int64), np.full(len(out), -1, np.int64)
    timed = frame[frame["bin"] >= 0].sort_values("bin", kind="stable")
    for key, rows in timed.groupby(keys, sort=False):
        counts = rows[DELAYED].to_numpy(np.int64)
        if counts.sum() <= 0:
            continue
        reach = np.cumsum(counts)
        bins = rows["bin"].to_numpy(np.int64)
        i = index[key]
        p50[i] = bin_upper_ns(int(bins[np.searchsorted(reach, 0.5 * reach[-1])]))
        p99[i] = bin_upper_ns(int(bins[np.searchsorted(reach, 0.99 * reach[-1])]))
    return p50, p99


def _short_facts(out: pd.DataFrame, totals: dict) -> dict:
    """The header lines: short activities, their share of busy time, the ops that launch most of them."""
    activities, short = int(out[S.COUNT].sum()), int(out[SHORT].sum())
    busy = sum(totals.values())
    share = 100 * int(out[SHORT_SELF_NS].sum()) / busy if busy else 0.0
    by_op = out.groupby("key")[SHORT].sum().sort_values(ascending=False, kind="stable")
    most = ", ".join(f"{name} ({int(n):,})" for name, n in by_op.head(3).items() if n > 0)
    text = (f"{short:,} of {activities:,} activities under {SHORT_NS // 1000} µs, {share:.1f}% of busy time"
            + (f"; most launched by {most}" if most else ""))
    facts = {"short kernels": text}
    launches, launch_ns = int(out[LAUNCHES].sum()), int(out[LAUNCH_NS].sum())
    if launches:
        facts["launch calls"] = f"{launches:,}, {launch_ns / launches / 1000:.1f} µs each on average"
    return facts
