"""Self time of an activity before a cut: the wait part of a communication kernel, exactly.

An activity's exact self time is Σ over the elementary segments it spans of length / activities running.
Cutting it at time c (start <= c <= end) splits that sum in two; `self_before` returns the floor of the
part in [start, c). Since the floor of a part never exceeds the floor of the whole, and sweep.py's self_ns
is the floor or ceiling of the whole, `min(self_before, self_ns)` and `self_ns - that` are two non-negative
integers that add up to self_ns exactly: a split of the activity's share that loses no nanosecond.
"""

from __future__ import annotations

import math

import numpy as np

from traceattr import schema as S
from traceattr.attribution.sweep import _group_rows, _int64, _segments, sweep
from traceattr.model.traceset import TraceSet


def split_self(traceset: TraceSet, rows: np.ndarray, cut_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) self ns of device rows `rows` cut at `cut_ns` (clipped to each activity);
    before + after == sweep(traceset).self_ns[rows] exactly."""
    self_ns = sweep(traceset).self_ns[rows]
    if len(rows) == 0:
        return self_ns.copy(), self_ns.copy()
    before = np.minimum(self_before(traceset, rows, cut_ns), self_ns)
    return before, self_ns - before


def self_before(traceset: TraceSet, rows: np.ndarray, cut_ns: np.ndarray) -> np.ndarray:
    """floor(exact self time of each row in [start, cut)), cut clipped to [start, end]."""
    device = traceset.device
    rank, window, device_id = _int64(device, S.RANK), _int64(device, S.WINDOW), _int64(device, S.DEVICE)
    start_ns, end_ns = _int64(device, S.START_NS), _int64(device, S.END_NS)
    gid, _, _ = _group_rows(rank, window, device_id)
    seg = _segments(gid, start_ns, end_ns)
    times = np.concatenate([start_ns, end_ns])[seg.order]        # time of each sorted point
    first, stop = seg.first_seg[rows], seg.end_seg[rows]
    cut = np.clip(cut_ns, start_ns[rows], end_ns[rows])
    # p = the last point in [first, stop] at or before the cut (bisection over each row's own points)
    lo, hi = first.copy(), stop + 1
    while True:
        active = hi - lo > 1
        if not active.any():
            break
        mid = (lo + hi) // 2
        ok = times[np.where(active, mid, lo)] <= cut
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)
    p = lo
    partial = np.where(p < stop, cut - times[p], 0)             # the cut segment's part before the cut
    levels = [int(k) for k in np.unique(seg.running[seg.length > 0]).tolist() if k > 0]
    denominator = math.lcm(*levels) if levels else 1
    exact_int64 = denominator * max(len(levels), 1) < 2 ** 62
    whole = np.zeros(len(rows), np.int64)
    numerator = np.zeros(len(rows), np.int64 if exact_int64 else object)
    running_at_p = seg.running[np.minimum(p, len(seg.running) - 1)]
    for k in levels:
        prefix = np.zeros(len(seg.length) + 1, dtype=np.int64)
        np.cumsum(np.where(seg.running == k, seg.length, 0), out=prefix[1:])
        time_at_k = prefix[p] - prefix[first] + np.where(running_at_p == k, partial, 0)
        quotient, remainder = np.divmod(time_at_k, k)
        whole += quotient
        scale = denominator // k
        numerator += remainder * scale if exact_int64 else remainder.astype(object) * scale
    return whole + (numerator // denominator).astype(np.int64)
