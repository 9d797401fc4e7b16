"""Self time of an activity before a cut: the wait part of a communication kernel, exactly.

An activity's exact self time is Σ over the elementary segments it spans of length / activities running.
Cutting it at time c (start <= c <= end) splits that sum in two; `self_before` returns the floor of the
part in [start, c). Since the floor of a part never exceeds the floor of the whole, and sweep.py's self_ns
is the floor or ceiling of the whole, `min(self_before, self_ns)` and `self_ns - that` are two non-negative
integers that add up to self_ns exactly: a split of the activity's share that loses no nanosecond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from traceattr import schema as S
from traceattr.attribution.sweep import _group_rows, _int64, _segments, concurrency_levels, sweep
from traceattr.model.traceset import TraceSet


def split_self(traceset: TraceSet, rows: np.ndarray, cut_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) self ns of device rows `rows` cut at `cut_ns` (clipped to each activity);
    before + after == sweep(traceset).self_ns[rows] exactly."""
    self_ns = sweep(traceset).self_ns[rows]
    if len(rows) == 0:
        return self_ns.copy(), self_ns.copy()
    return split_profile(cut_profile(traceset, rows), self_ns, cut_ns)


def split_profile(profile: "CutProfile", self_ns: np.ndarray, cut_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """split_self of profiled rows whose self ns are `self_ns` (a profile a map step sent, see compact)."""
    before = np.minimum(profile_before(profile, cut_ns), self_ns)
    return before, self_ns - before


def self_before(traceset: TraceSet, rows: np.ndarray, cut_ns: np.ndarray) -> np.ndarray:
    """floor(exact self time of each row in [start, cut)), cut clipped to [start, end]."""
    return profile_before(cut_profile(traceset, rows), cut_ns)


@dataclass(frozen=True)
class CutProfile:
    """The elementary segments of some device rows: all self_before needs to cut them anywhere. Point j
    starts a segment of `length[j]` ns with `running[j]` activities; row i spans points first[i]..stop[i]
    (its start and its end)."""
    times: np.ndarray
    running: np.ndarray
    length: np.ndarray | None         # None in compact profiles, on their way and piled (with_lengths)
    first: np.ndarray
    stop: np.ndarray


def cut_profile(traceset: TraceSet, rows: np.ndarray) -> CutProfile:
    """The profile of device rows `rows` (over the whole sweep's points; compact() keeps just theirs)."""
    device = traceset.device
    rank, window, device_id = _int64(device, S.RANK), _int64(device, S.WINDOW), _int64(device, S.DEVICE)
    start_ns, end_ns = _int64(device, S.START_NS), _int64(device, S.END_NS)
    gid, _, _ = _group_rows(rank, window, device_id)
    seg = _segments(gid, start_ns, end_ns)
    times = np.concatenate([start_ns, end_ns])[seg.order]        # time of each sorted point
    return CutProfile(times, seg.running, seg.length, seg.first_seg[rows], seg.end_seg[rows])


def compact(profile: CutProfile) -> CutProfile:
    """Only the points the rows span, each row's on its own (a few per row: what a map step sends to be cut
    on the driver). Lengths are left out (None): they are the gaps between a row's points (with_lengths)."""
    counts = profile.stop - profile.first + 1              # >= 2: a row's start sorts before its end
    first = np.cumsum(counts) - counts
    index = np.repeat(profile.first - first, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    running = profile.running[index]
    return CutProfile(profile.times[index], running.astype(np.int32) if len(first) else running, None, first,
                      first + counts - 1)


def with_lengths(profile: CutProfile) -> CutProfile:
    """Compact profiles' points concatenated (first/stop: every row's, into them), with their lengths: the
    gap to the next point, none after a row's end; int32 when they fit (a row's gaps). Built only when a
    split needs them (at 1024 ranks the points are hundreds of thousands: 1.3 MB held through the matching)."""
    length = np.zeros(len(profile.times), np.int64)
    np.subtract(profile.times[1:], profile.times[:-1], out=length[:-1])
    length[profile.stop] = 0
    if len(length) and int(length.max()) <= np.iinfo(np.int32).max:
        length = length.astype(np.int32)
    return CutProfile(profile.times, profile.running, length, profile.first, profile.stop)


def profile_before(profile: CutProfile, cut_ns: np.ndarray) -> np.ndarray:
    """floor(exact self time of each profiled row in [start, cut)), cut clipped to [start, end]."""
    times, running, length, first, stop = profile.times, profile.running, profile.length, profile.first, profile.stop
    if len(first) == 0:
        return np.zeros(0, np.int64)
    cut = np.clip(cut_ns, times[first], times[stop])
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
    levels = concurrency_levels(running, length)
    denominator = math.lcm(*levels) if levels else 1
    exact_int64 = denominator * max(len(levels), 1) < 2 ** 62
    whole = np.zeros(len(first), np.int64)
    numerator = np.zeros(len(first), np.int64 if exact_int64 else object)
    running_at_p = running[np.minimum(p, len(running) - 1)]
    # one prefix buffer for every level, filled in place: the driver splits every collective's points at
    # once (325 k at 1024 ranks), and a fresh buffer plus a masked copy per level were its peak there
    prefix = np.zeros(len(length) + 1, dtype=np.int64)
    for k in levels:
        np.multiply(length, running == k, out=prefix[1:])
        np.cumsum(prefix[1:], out=prefix[1:])
        time_at_k = prefix[p] - prefix[first] + np.where(running_at_p == k, partial, 0)
        quotient, remainder = np.divmod(time_at_k, k)
        whole += quotient
        scale = denominator // k
        numerator += remainder * scale if exact_int64 else remainder.astype(object) * scale
    return whole + (numerator // denominator).astype(np.int64)
