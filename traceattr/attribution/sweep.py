"""The exact attribution sweep: self and solo device time of every activity, in int64 ns.

For each (rank, window, device) the start/end points of all activities cut time into elementary segments.
In a segment of length L with k activities running, each gets self time L/k, and solo time L when k == 1.
Fair shares are rationals; they are made integers without losing a nanosecond:

* T_i[k] = time activity i spent in segments with exactly k running (an integer: a prefix sum over the
  sorted segments of L·[k_s == k], differenced at the activity's first and last segment);
* exact self_i = Σ_k T_i[k] / k = Σ_k T_i[k] // k  +  Σ_k (T_i[k] % k) / k, the second sum kept exactly as a
  numerator over D = lcm of the k levels present (Python ints when D is too large for int64);
* per group, the leftover R = busy − Σ floor(self_i) is an exact integer; R activities with the largest
  remainders get one more ns (largest-remainder rounding, ties by row order).

So every self_ns is the floor or ceiling of its exact share and each group sums to its busy time exactly.
Everything is vectorized: one sort of all 2n points of all groups at once, then one pass per k level.

Beside the shares, per group: exposed time per category (C.EXPOSED_NS: the segments where every running
activity is of that category, so no other category hides it; at most that category's exact share, so its
self_ns, a sum of rounded shares, falls short of it by less than 1 ns an activity; they add up to at most
busy_ns) and exposed_communication_ns (communication running, no compute: wider, since a
memcpy or memset beside it does not hide it from that measure).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.attribution import columns as C
from traceattr.errors import TraceError
from traceattr.io.codes import numbers
from traceattr.model.traceset import TraceSet

GROUP_COLUMNS = [
    S.RANK, S.WINDOW, S.DEVICE, S.WINDOW_NS, S.BUSY_NS, S.IDLE_NS, S.DURATION_NS, S.OVERLAP_NS,
    C.COMPUTE_NS, C.COMMUNICATION_NS, C.MEMCPY_NS, C.MEMSET_NS, S.EXPOSED_COMMUNICATION_NS,
    S.ACTIVITIES, C.MAX_CONCURRENCY, C.SAME_STREAM_OVERLAP_NS, *C.EXPOSED_NS.values(), C.COMMUNICATION_RUNNING_NS,
]
_COMPUTE_CODE = S.DEVICE_CATEGORIES.index(S.COMPUTE)
_COMMUNICATION_CODE = S.DEVICE_CATEGORIES.index(S.COMMUNICATION)


@dataclass(frozen=True)
class SweepResult:
    self_ns: np.ndarray      # int64, one per row of traceset.device, same row order
    solo_ns: np.ndarray      # int64: time the activity ran alone on its device
    columns: dict            # one int64 array per GROUP_COLUMNS name, a row per (rank, window, device) group
    group_id: np.ndarray     # int64 per device row: its row in `groups`
    duration_ns: np.ndarray  # int64 per device row: end_ns − start_ns

    @functools.cached_property
    def groups(self) -> pd.DataFrame:
        """`columns` as a frame, built when first asked: the map step of a small file reads the columns only
        (a frame of one row cost 0.2-0.3 ms to build and as much to take apart again)."""
        return pd.DataFrame(self.columns)

    def self_check(self) -> None:
        """Raise TraceError if any conservation law fails (a bug, never a property of the input)."""
        problems = _conservation_problems(self)
        if problems:
            raise TraceError("sweep conservation check failed: " + "; ".join(problems[:5]))


_CACHE: "weakref.WeakKeyDictionary[TraceSet, SweepResult]" = weakref.WeakKeyDictionary()


def sweep(traceset: TraceSet) -> SweepResult:
    """Self/solo time of every device activity of `traceset`, computed once per TraceSet."""
    result = _CACHE.get(traceset)
    if result is None:
        result = _compute(traceset.device, traceset.files)
        _CACHE[traceset] = result
    return result


# --- the computation ------------------------------------------------------------------------------

def _int64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _numbers(table: pa.Table, name: str) -> np.ndarray:
    """A column as numpy in its own type (int32 rank and window stay int32): a view of a one-chunk column."""
    return np.asarray(table.column(name).to_numpy())


def _category_codes(device: pa.Table) -> np.ndarray:
    categories = device.column(S.CATEGORY)
    codes = pc.index_in(categories, value_set=pa.array(S.DEVICE_CATEGORIES))
    unknown = pc.is_null(codes)
    if pc.any(unknown).as_py():
        names = sorted(set(categories.filter(unknown).to_pylist()), key=str)
        raise TraceError(f"device table has categories outside {S.DEVICE_CATEGORIES}: {names[:5]}")
    return np.asarray(codes.to_numpy(), dtype=np.int8)     # a few codes: 1 byte per activity, not 8


def _group_rows(rank, window, device):
    """Group id per row (groups ordered by rank, window, device), the row order that sorts by group (None for
    one group: the rows as they are), and the first sorted position of each group. A map step's file has one
    rank and window, and often one device: then the sort and its key copies (24 bytes per activity) are
    skipped, with the same result (lexsort is stable, so rows of equal keys keep their order)."""
    n = len(rank)
    if n and _constant(rank) and _constant(window):
        if _constant(device):
            return np.zeros(n, np.int64), None, np.zeros(1, np.int64)
        order = np.argsort(device, kind="stable")
        d = device[order]
        new = np.ones(n, dtype=bool)
        new[1:] = d[1:] != d[:-1]
        del d
        gid = np.empty(n, dtype=np.int64)
        gid[order] = np.cumsum(new) - 1
        return gid, order, np.flatnonzero(new)
    order = np.lexsort((device, window, rank))
    r, w, d = rank[order], window[order], device[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (w[1:] != w[:-1]) | (d[1:] != d[:-1])
    gid = np.empty(len(order), dtype=np.int64)
    gid[order] = np.cumsum(new) - 1
    return gid, order, np.flatnonzero(new)


def _constant(values: np.ndarray) -> bool:
    return bool((values == values[0]).all())


@dataclass(frozen=True)
class _Segments:
    """All start/end points of all groups sorted by (group, time, starts first); segment j runs from
    point j to point j + 1 (length 0 across a group boundary)."""
    length: np.ndarray     # int64 per segment
    running: np.ndarray    # int64: activities running in the segment
    first_seg: np.ndarray  # per activity: its first segment (the position of its start point)
    end_seg: np.ndarray    # per activity: one past its last segment (the position of its end point)
    order: np.ndarray      # sorted point -> original point (0..n-1 starts, n..2n-1 ends)
    group_first: np.ndarray  # first sorted point of each group


def _sort_points(group: np.ndarray, time: np.ndarray, is_end: np.ndarray) -> np.ndarray:
    """Order of points by (group, time, starts before ends). One argsort of a packed int64 key when
    (group, time relative to the earliest point, is_end) fits in 62 bits, else a three-key lexsort."""
    if len(time):
        t0 = int(time.min())
        span = int(time.max()) - t0 + 1
        if (int(group.max()) + 1) * span * 2 < 2 ** 62:
            if len(group) == 1:          # one group (_segments): the key is the time alone
                key = time - t0
            else:
                key = group * span
                key += time
                key -= t0
            key *= 2
            key += is_end
            return np.argsort(key)   # equal keys are interchangeable points
    return np.lexsort((is_end, time, np.broadcast_to(group, time.shape) if len(group) == 1 else group))


_POSITION_ROWS = 1 << 20


def _segments(gid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, narrow: bool = False) -> _Segments:
    """The sorted points and their segments. The 2n-point arrays are a few each of int64 alive at a
    time, and is_end is int8 (each int64 one is 16 bytes per activity: 1.8 MB at 116 k kernels).
    `narrow`: `running` and the positions as int32 where they fit (the sweep's own; 8 bytes a point less)."""
    n = len(gid)
    index_type = np.int32 if narrow and 4 * n < 2 ** 31 else np.int64
    time = np.concatenate([start_ns, end_ns])
    # one group (a map step's file on one device): no 2n group array, 16 bytes per activity twice over
    group = np.concatenate([gid, gid]) if n and gid.max() > 0 else np.zeros(1, np.int64)
    is_end = np.repeat(np.array([0, 1], np.int8), n)
    order = _sort_points(group, time, is_end)
    time = time[order]
    if len(group) > 1:
        group = group[order]
    step = is_end[order]
    del is_end
    step *= -2
    step += 1                                   # +1 at a start, -1 at an end
    running = np.cumsum(step, dtype=index_type)
    del step
    length = np.zeros(2 * n, dtype=np.int64)
    np.subtract(time[1:], time[:-1], out=length[:-1])
    del time
    # after the sorted times are gone: the positions are the last 2n array made here
    position = np.empty(2 * n, dtype=index_type)
    for first in range(0, 2 * n, _POSITION_ROWS):      # a slice at a time: no 16-byte-a-row arange beside it
        position[order[first:first + _POSITION_ROWS]] = np.arange(first, min(first + _POSITION_ROWS, 2 * n))
    if len(group) > 1:
        boundary = group[1:] != group[:-1]
        length[:-1][boundary] = 0
        group_first = np.flatnonzero(np.r_[True, boundary])
    else:
        group_first = np.zeros(1 if n else 0, np.int64)
    return _Segments(length, running, position[:n], position[n:], order, group_first)


def _row_sums(values: np.ndarray, row_order: np.ndarray, row_first: np.ndarray) -> np.ndarray:
    """_per_group of per-row values in group order; one group is one sum (no reordered copy of the rows)."""
    if row_order is None or len(row_first) == 1:
        return np.array([values.sum(dtype=np.int64)], np.int64)
    return _per_group(values[row_order], row_first)


def _per_group(values: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Exact int64 sums of consecutive runs of `values` starting at `firsts`."""
    if len(firsts) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(values.astype(np.int64, copy=False), firsts)


def concurrency_levels(running: np.ndarray, length: np.ndarray) -> list[int]:
    """The activity counts k > 0 of the segments with some length, ascending (a mask over 0..max: np.unique
    sorted a second copy of the points)."""
    present = np.zeros(int(running.max(initial=0)) + 1, bool)
    present[running[length > 0]] = True
    return [int(k) for k in np.flatnonzero(present) if k > 0]


def _fair_shares(seg: _Segments, n_groups: int, busy: np.ndarray, gid: np.ndarray,
                 row_order: np.ndarray, row_first: np.ndarray, prefix: np.ndarray | None = None):
    """self_ns and solo_ns per activity (see the module docstring)."""
    n = len(gid)
    levels = concurrency_levels(seg.running, seg.length)
    denominator = math.lcm(*levels) if levels else 1
    exact_int64 = denominator * max(len(levels), 1) < 2 ** 62
    # no overlap anywhere (only k == 1): every share is whole, nothing is left over, no numerator is needed
    numerator = np.zeros(n, dtype=np.int64 if exact_int64 else object) if denominator > 1 else None
    whole = np.zeros(n, dtype=np.int64)
    solo = np.zeros(n, dtype=np.int64)
    if prefix is None:
        prefix = np.zeros(len(seg.length) + 1, dtype=np.int64)  # one buffer for every level
    prefix[0] = 0
    for k in levels:
        np.multiply(seg.length, seg.running == k, out=prefix[1:])
        np.cumsum(prefix[1:], out=prefix[1:])
        time_at_k = _spans(prefix, seg.first_seg, seg.end_seg)
        if k == 1:
            solo = time_at_k
            whole += time_at_k
            continue
        remainder = time_at_k % k
        time_at_k //= k
        whole += time_at_k
        scale = denominator // k
        if exact_int64:
            remainder *= scale
            numerator += remainder
        else:
            numerator += remainder.astype(object) * scale
        del remainder, time_at_k
    del prefix
    if numerator is None:
        return whole, solo
    if exact_int64:         # in place: each per-activity array here is 8 bytes a row
        whole += numerator // denominator
        np.remainder(numerator, denominator, out=numerator)
        fraction = numerator
    else:
        whole += (numerator // denominator).astype(np.int64)
        fraction = numerator % denominator
    del numerator           # each per-activity array let go once read: they stacked up to the sweep's peak

    leftover = busy - _row_sums(whole, row_order, row_first)   # exact; 0 <= leftover < activities
    # only activities with a fraction can receive a leftover ns: rank those, largest first, ties by row
    candidates = np.flatnonzero(fraction != 0)
    by_fraction = candidates[np.argsort(-fraction[candidates], kind="stable")]
    del candidates, fraction
    ranked = by_fraction[np.argsort(gid[by_fraction], kind="stable")]
    del by_fraction
    ranked_gid = gid[ranked]
    group_start = np.searchsorted(ranked_gid, np.arange(n_groups))
    place_in_group = np.arange(len(ranked)) - group_start[ranked_gid]
    whole[ranked[place_in_group < leftover[ranked_gid]]] += 1
    return whole, solo


def _spans(prefix: np.ndarray, first: np.ndarray, end: np.ndarray) -> np.ndarray:
    """prefix[end] - prefix[first], a slice of rows at a time (no second 8-byte-a-row array beside it)."""
    out = prefix[end]
    for at in range(0, len(out), _POSITION_ROWS):
        out[at:at + _POSITION_ROWS] -= prefix[first[at:at + _POSITION_ROWS]]
    return out


def _exposure(seg: _Segments, category: np.ndarray) -> dict[str, np.ndarray]:
    """Per group: exposed_communication_ns (time when a communication activity runs and no compute does),
    communication_running_ns (time when one runs, hidden or not: the overlap ratio's whole) and, per category, its exposed time (C.EXPOSED_NS: time when that category runs and no activity of
    another category does, i.e. every running activity is of that category). Per point only int8 codes,
    one int32 count at a time and two bools; one int64 buffer serves every sum (as one array did before)."""
    n, n_groups = len(category), len(seg.group_first)
    out = {name: np.zeros(n_groups, np.int64)
           for name in [S.EXPOSED_COMMUNICATION_NS, C.COMMUNICATION_RUNNING_NS, *C.EXPOSED_NS.values()]}
    present = [code for code in range(len(S.DEVICE_CATEGORIES)) if (category == code).any()]
    if not present:
        return out
    buffer = np.empty(len(seg.length), np.int64)

    def time_where(mask: np.ndarray) -> np.ndarray:
        np.multiply(seg.length, mask, out=buffer)
        return _per_group(buffer, seg.group_first)

    if len(present) == 1:          # one category: it is alone whenever anything runs (no point arrays)
        out[C.EXPOSED_NS[S.DEVICE_CATEGORIES[present[0]]]] = time_where(seg.running > 0)
        if present[0] == _COMMUNICATION_CODE:
            out[S.EXPOSED_COMMUNICATION_NS] = out[C.COMMUNICATION_RUNNING_NS] = out[C.EXPOSED_NS[S.COMMUNICATION]]
        return out
    codes = category.astype(np.int8)
    point_category = np.concatenate([codes, codes])[seg.order]
    step = (seg.order < n).astype(np.int8)
    step *= 2
    step -= 1                                   # +1 at a start, -1 at an end
    communication_runs = compute_idle = None
    idle = time_where(seg.running == 0)       # every category "runs alone" where nothing runs: taken off
    this_step = np.empty_like(step)
    for code in present:
        np.multiply(step, point_category == code, out=this_step)
        running = np.cumsum(this_step, dtype=np.int32)      # activities of this category running
        out[C.EXPOSED_NS[S.DEVICE_CATEGORIES[code]]] = time_where(running == seg.running) - idle
        if code == _COMMUNICATION_CODE:
            communication_runs = running > 0
        elif code == _COMPUTE_CODE:
            compute_idle = running == 0
        del running
    if communication_runs is not None:
        out[C.COMMUNICATION_RUNNING_NS] = time_where(communication_runs)
        out[S.EXPOSED_COMMUNICATION_NS] = time_where(
            communication_runs if compute_idle is None else communication_runs & compute_idle)
    return out


def _stream_unions(gid, stream, start_ns, end_ns, n_groups, busy) -> np.ndarray:
    """Per group: Σ over its streams of the union length of that stream's activities."""
    if len(gid) == 0:
        return np.zeros(n_groups, dtype=np.int64)
    if _constant(stream):         # one stream: its union is the group's busy time (no sort, no 8-byte copies)
        return busy
    order = np.lexsort((start_ns, stream, gid))
    g = gid[order]
    new_group = np.r_[True, g[1:] != g[:-1]]
    del g
    st = stream[order]
    new_sub = new_group.copy()
    new_sub[1:] |= st[1:] != st[:-1]
    del st
    sub = np.cumsum(new_sub) - 1
    t0 = int(start_ns.min())
    span = int(end_ns.max()) - t0 + 1
    if int(sub[-1] + 1) * span >= 2 ** 62:       # cannot lift streams apart in int64: sweep them instead
        seg = _segments(sub, start_ns[order], end_ns[order])
        union = _per_group(np.where(seg.running > 0, seg.length, 0), seg.group_first)
        return _per_group(union, np.flatnonzero(new_group[new_sub]))
    # lift each (group, stream) onto its own stretch of the time line, so one running maximum serves all;
    # in place where it can be: each array here is 8 bytes per activity
    lift = sub
    lift *= span
    lo, hi = start_ns[order], end_ns[order]
    del order
    lo -= t0
    lo += lift
    hi -= t0
    hi += lift
    before = np.empty_like(hi)
    before[0] = 0
    np.maximum.accumulate(hi[:-1], out=before[1:])
    before[new_sub] = lift[new_sub]
    del lift
    np.maximum(lo, before, out=lo)
    del before
    covered = np.subtract(hi, lo, out=hi)
    np.maximum(covered, 0, out=covered)
    return _per_group(covered, np.flatnonzero(new_group))


def _window_lengths(files: pa.Table, rank_g: np.ndarray, window_g: np.ndarray) -> np.ndarray:
    spans = {(r, w): e - s for r, w, s, e in zip(
        files.column(S.RANK).to_pylist(), files.column(S.WINDOW).to_pylist(),
        files.column(S.START_NS).to_pylist(), files.column(S.END_NS).to_pylist())}
    out = np.empty(len(rank_g), dtype=np.int64)
    for i, key in enumerate(zip(rank_g.tolist(), window_g.tolist())):
        if key not in spans:
            raise TraceError(f"device activities of rank {key[0]} window {key[1]} have no file row")
        out[i] = spans[key]
    return out


def _compute(device: pa.Table, files: pa.Table) -> SweepResult:
    rank, window = _numbers(device, S.RANK), _numbers(device, S.WINDOW)
    device_id, stream = numbers(device.column(S.DEVICE), np.int64), numbers(device.column(S.STREAM), np.int64)
    start_ns, end_ns = _int64(device, S.START_NS), _int64(device, S.END_NS)
    category = _category_codes(device)
    duration = end_ns - start_ns
    if (duration < 0).any():
        raise TraceError(f"{int((duration < 0).sum())} device activities end before they start")

    gid, row_order, row_first = _group_rows(rank, window, device_id)
    n_groups = len(row_first)
    seg = _segments(gid, start_ns, end_ns, narrow=True)
    exposed = _exposure(seg, category)
    # the sorted points' origins are read by the exposed time only: 16 bytes an activity let go before the shares
    seg = dataclasses.replace(seg, order=None)
    # one 2n buffer for busy, the concurrency and every level of the shares (each was a 2n array of its own)
    scratch = np.empty(len(seg.length) + 1, np.int64)
    np.multiply(seg.length, seg.running > 0, out=scratch[1:])
    busy = _per_group(scratch[1:], seg.group_first)
    np.multiply(seg.running, seg.length > 0, out=scratch[1:])
    max_concurrency = np.maximum.reduceat(scratch[1:], seg.group_first) if n_groups else np.zeros(0, np.int64)
    self_ns, solo_ns = _fair_shares(seg, n_groups, busy, gid, row_order, row_first, prefix=scratch)
    del seg, scratch

    first_rows = row_order[row_first] if row_order is not None else row_first
    rank_g, window_g = rank[first_rows], window[first_rows]
    window_ns = _window_lengths(files, rank_g, window_g)
    duration_g = _row_sums(duration, row_order, row_first)
    data = {
        S.RANK: rank_g, S.WINDOW: window_g, S.DEVICE: device_id[first_rows],
        S.WINDOW_NS: window_ns, S.BUSY_NS: busy, S.IDLE_NS: window_ns - busy,
        S.DURATION_NS: duration_g, S.OVERLAP_NS: duration_g - busy,
    }
    for code, name in enumerate(S.DEVICE_CATEGORIES):
        data[C.CATEGORY_NS[name]] = _row_sums(np.where(category == code, self_ns, 0), row_order, row_first)
    data.update(exposed)
    data[S.ACTIVITIES] = np.diff(np.r_[row_first, len(gid)]).astype(np.int64)
    data[C.MAX_CONCURRENCY] = max_concurrency
    data[C.SAME_STREAM_OVERLAP_NS] = duration_g - _stream_unions(gid, stream, start_ns, end_ns, n_groups, busy)
    columns = {name: np.asarray(data[name], dtype=np.int64) for name in GROUP_COLUMNS}
    return SweepResult(self_ns, solo_ns, columns, gid, duration)


def _conservation_problems(result: SweepResult) -> list[str]:
    groups, problems = result.groups, []
    n_groups = len(groups)
    self_sum = np.zeros(n_groups, dtype=np.int64)
    np.add.at(self_sum, result.group_id, result.self_ns)
    busy = groups[S.BUSY_NS].to_numpy()
    if not np.array_equal(self_sum, busy):
        problems.append(f"Σ self_ns != busy_ns in {int((self_sum != busy).sum())} groups")
    by_category = sum(groups[name].to_numpy() for name in C.CATEGORY_NS.values())
    if not np.array_equal(by_category, busy):
        problems.append("category self times do not add up to busy_ns")
    # exposed ≤ the category's exact share; each self_ns is that share rounded to a whole ns (up or down),
    # so a category's self_ns may fall short of its exposed time, by less than 1 ns per activity
    exposed = {name: groups[C.EXPOSED_NS[name]].to_numpy() for name in S.DEVICE_CATEGORIES}
    activities = groups[S.ACTIVITIES].to_numpy()
    if (sum(exposed.values()) > busy).any() or any(
            (exposed[name] < 0).any() or (exposed[name] - groups[C.CATEGORY_NS[name]].to_numpy() >= activities).any()
            for name in S.DEVICE_CATEGORIES):
        problems.append("a category's exposed time is negative, past its share, or they add up past busy_ns")
    if ((groups[C.EXPOSED_NS[S.COMMUNICATION]] > groups[S.EXPOSED_COMMUNICATION_NS])
            | (groups[S.EXPOSED_COMMUNICATION_NS] > groups[C.COMMUNICATION_RUNNING_NS])
            | (groups[C.COMMUNICATION_NS] - groups[C.COMMUNICATION_RUNNING_NS] >= groups[S.ACTIVITIES])).any():
        problems.append("communication alone > communication without compute > communication running, "
                        "or its self time past the time it runs (by more than rounding)")
    if (groups[S.IDLE_NS] < 0).any():
        problems.append("busy_ns exceeds the window")
    if (groups[S.OVERLAP_NS] < 0).any():
        problems.append("busy_ns exceeds Σ duration_ns")
    if (result.self_ns < 0).any() or (result.self_ns > result.duration_ns).any():
        problems.append("self_ns outside [0, duration_ns]")
    if (result.solo_ns < 0).any() or (result.solo_ns > result.self_ns).any():
        problems.append("solo_ns outside [0, self_ns]")
    return problems
