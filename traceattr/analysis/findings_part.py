"""The per-file facts the findings need that no table holds (engine Partial `findings`, docs/design.md):
copies and memsets that block the host or run from pageable memory, host-blocking synchronize calls, and
idle gaps on a device, each with the host op responsible; and the short activities (under launch.SHORT_NS,
as `--by launch` counts them) with their self time, per launching op when the plan linked the file already.

probe (on the file's whole host table, before the summary plan leaves cpu ops out): the runtime calls of
interest (memcpy/memset, synchronize) with the outermost cpu op around each on its thread. map (on the file):
joins the copies' device rows to their calls by correlation, and finds the device's idle gaps. Both return
sums per (kind, call, op) and per rank: a handful of keys, never a row per event. The state sums them over
the files a placement keeps (analysis/findings.py turns them into sentences).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.launch import SHORT_NS
from traceattr.attribution.hosttree import dense_codes, runtime_mask
from traceattr.attribution.links import built_links
from traceattr.attribution.sweep import sweep
from traceattr.engine.partial import Partial, listed

GAP_MIN_NS = 1_000_000       # an idle stretch on a device at least this long is a gap (Nsight's rule is similar)
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize")
COPY_PREFIXES = ("cudaMemcpy", "cudaMemset", "hipMemcpy", "hipMemset")
# kinds of copy worth a finding
SYNC_MEMCPY = "synchronous memcpy"
SYNC_MEMSET = "synchronous memset"
PAGEABLE_ASYNC = "async memcpy with pageable memory"
PAGEABLE = "Pageable"         # Kineto memcpy names say e.g. `Memcpy HtoD (Pageable -> Device)`


@dataclass
class FindingsData:
    """Summed over the kept files. copies: (kind, call, op) -> [count, device ns, host ns of the calls];
    syncs: (call, op) -> [count, host ns]; gaps: rank -> [count, total ns, longest ns]; short: [short
    activities, all activities, Σ self ns of the short ones]; short_ops: launching op -> Σ self ns of its short
    activities (empty when no file was linked: kernel-level plans keep no cpu ops)."""
    copies: dict = field(default_factory=dict)
    syncs: dict = field(default_factory=dict)
    gaps: dict = field(default_factory=dict)
    short: list = field(default_factory=lambda: [0, 0, 0])
    short_ops: dict = field(default_factory=dict)
    gap_ops: dict = field(default_factory=dict)    # cpu op running through the gaps -> Σ gap ns ("" no op)


# --- probe: on the whole host table -------------------------------------------------------------------

def probe(host: pa.Table, device: pa.Table) -> dict | None:
    """The runtime calls of interest: name, correlation, duration and the outermost cpu op enclosing the call's
    start on its thread ("" when none); and "gap_ops": per cpu op, the device-gap time it held (_gap_ops;
    "" the time no op did). None when neither."""
    if host.num_rows == 0:
        return None
    category, names = host.column(S.CATEGORY), host.column(S.NAME)
    start = _ints(host, S.START_NS)
    end = _ints(host, S.END_NS)
    pid, tid = _ints(host, S.PID), _ints(host, S.TID)
    is_op = np.asarray(pc.equal(category, S.CPU_OP).to_numpy(zero_copy_only=False), dtype=bool)
    out = {"gap_ops": _gap_ops(device, host, is_op, start, end)}
    runtime = np.flatnonzero(runtime_mask(category))
    called = names.take(pa.array(runtime))       # the text tests on the runtime calls only
    of_interest = pc.is_in(called, value_set=pa.array(SYNC_CALLS, pa.string()))
    for prefix in COPY_PREFIXES:
        of_interest = pc.or_(of_interest, pc.starts_with(called, prefix))
    rows = runtime[np.asarray(of_interest.to_numpy(zero_copy_only=False), dtype=bool)] if len(runtime) else runtime
    if not len(rows):
        return out if out["gap_ops"] else None
    op_name = _outer_ops(host, is_op, pid, tid, start, end, rows)
    out.update({S.NAME: np.asarray(names.take(pa.array(rows)).to_pylist(), dtype=object),
                S.CORRELATION: _ints(host, S.CORRELATION)[rows], S.DURATION_NS: (end - start)[rows], "op": op_name})
    return out


def _gap_ops(device: pa.Table, host: pa.Table, is_op: np.ndarray, start, end) -> dict[str, int]:
    """Per device gap (GAP_MIN_NS or more), the cpu op overlapping it most (any thread, any depth; of ops
    that overlap it equally, the innermost: the latest to start, then the shortest) is given its overlap, and
    the rest of the gap goes to "" (no op). Each gap reads only the ops that can overlap it: those starting
    before its end whose running latest end (in start order) passes its start, not every op of the file."""
    gaps = _gap_intervals(device)
    if not len(gaps):
        return {}
    ops = np.flatnonzero(is_op)
    by_start = np.argsort(start[ops], kind="stable")
    sorted_start = start[ops][by_start]
    reach = np.maximum.accumulate(end[ops][by_start]) if len(ops) else sorted_start
    names = host.column(S.NAME)
    out: dict[str, int] = {}
    for gap_start, gap_end in gaps.tolist():
        first = int(np.searchsorted(reach, gap_start, side="right"))     # ops before it all end by the gap
        near = ops[np.sort(by_start[first:int(np.searchsorted(sorted_start, gap_end, side="left"))])]
        op_start, op_end = start[near], end[near]                         # in host order, as ties were
        overlap = np.minimum(op_end, gap_end) - np.maximum(op_start, gap_start)
        best = -1
        if len(near) and overlap.max() > 0:
            tied = np.flatnonzero(overlap == overlap.max())
            best = int(tied[np.lexsort((op_end[tied] - op_start[tied], -op_start[tied]))[0]])
        held = int(overlap[best]) if best >= 0 else 0
        if held:
            name = str(names[int(near[best])].as_py())
            out[name] = out.get(name, 0) + held
        if gap_end - gap_start > held:          # the rest of the gap: no op of that length ran
            out[""] = out.get("", 0) + int(gap_end - gap_start - held)
    return out


def _ints(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _outer_ops(host: pa.Table, is_op: np.ndarray, pid, tid, start, end, rows: np.ndarray) -> np.ndarray:
    """Per row of `rows`: the name of the outermost cpu op on its (pid, tid) whose [start, end) holds the
    row's start, "" when none. Top-level ops of a thread do not overlap: one searchsorted per thread."""
    out = np.full(len(rows), "", dtype=object)
    ops = np.flatnonzero(is_op)
    if not len(ops):
        return out
    thread = dense_codes(np.r_[pid[ops], pid[rows]], np.r_[tid[ops], tid[rows]])
    op_thread, row_thread = thread[:len(ops)], thread[len(ops):]
    op_names = host.column(S.NAME)
    for code in np.unique(row_thread):
        mine = ops[op_thread == code]
        if not len(mine):
            continue
        mine = mine[np.lexsort((-end[mine], start[mine]))]
        reach = np.maximum.accumulate(end[mine])
        top = np.r_[True, start[mine][1:] >= reach[:-1]]      # not inside an earlier op of the thread
        top_ops = mine[top]
        asked = np.flatnonzero(row_thread == code)
        at = start[rows[asked]]
        index = np.searchsorted(start[top_ops], at, side="right") - 1
        inside = (index >= 0) & (at < end[top_ops[np.maximum(index, 0)]])
        if inside.any():
            found = top_ops[index[inside]]
            out[asked[inside]] = op_names.take(pa.array(found)).to_pylist()
    return out


# --- map: on the file (its host rows may be partly left out) ---------------------------------------------

def map_file(traceset, probed: dict | None) -> dict:
    """The file's copies, synchronize calls and device gaps as sums per key."""
    copies: dict = {}
    syncs: dict = {}
    if probed is not None and S.NAME in probed:
        name, corr, host_ns, op = (probed[S.NAME], probed[S.CORRELATION], probed[S.DURATION_NS], probed["op"])
        is_sync = np.isin(name, np.asarray(SYNC_CALLS, dtype=object))
        for i in np.flatnonzero(is_sync):
            _add(syncs, (name[i], op[i]), (1, int(host_ns[i])))
        copy_rows = np.flatnonzero(~is_sync)
        if len(copy_rows):
            _copies(traceset.device, name[copy_rows], corr[copy_rows], host_ns[copy_rows], op[copy_rows], copies)
    short, short_ops = _short(traceset)
    return {"copies": copies, "syncs": syncs, "gaps": _gaps(traceset.device), "short": short,
            "short_ops": short_ops, "gap_ops": dict((probed or {}).get("gap_ops", {}))}


def _short(traceset) -> tuple[tuple[int, int, int], dict]:
    """(short activities, activities, Σ self ns of the short ones) and, when the file's links were built
    already (a linked plan), Σ self ns of the short ones per launching op; building them here would cost
    kernel-level plans a host tree they do not need."""
    device = traceset.device
    if device.num_rows == 0:
        return (0, 0, 0), {}
    short = (_ints(device, S.END_NS) - _ints(device, S.START_NS)) < SHORT_NS
    self_ns = np.where(short, sweep(traceset).self_ns, 0)
    counts = (int(short.sum()), int(device.num_rows), int(self_ns.sum()))
    links = built_links(traceset)
    if links is None or not short.any():
        return counts, {}
    op = np.asarray(links.op_code, dtype=np.int64)
    mine = short & (op >= 0)
    codes, at = np.unique(op[mine], return_inverse=True)
    sums = np.zeros(len(codes), dtype=np.int64)
    np.add.at(sums, at, self_ns[mine])                 # int64: exact, as every table
    return counts, {links.host_names[c]: int(n) for c, n in zip(codes.tolist(), sums.tolist())}


def _copies(device: pa.Table, call, corr, host_ns, op, out: dict) -> None:
    """Copies launched by a blocking call (cudaMemcpy, cudaMemset: no `Async`), and async copies whose device
    row says the host side was pageable memory (the driver stages them synchronously)."""
    if device.num_rows == 0:
        return
    category = device.column(S.CATEGORY)
    is_copy = np.asarray(pc.is_in(category, value_set=pa.array([S.MEMCPY, S.MEMSET])).to_numpy(
        zero_copy_only=False), dtype=bool)
    rows = np.flatnonzero(is_copy)
    dev_corr = _ints(device, S.CORRELATION)[rows]
    duration = (_ints(device, S.END_NS) - _ints(device, S.START_NS))[rows]
    names = device.column(S.NAME).take(pa.array(rows))
    if pa.types.is_dictionary(names.type):
        names = names.cast(names.type.value_type)
    pageable = np.asarray(pc.match_substring(names, PAGEABLE).to_numpy(zero_copy_only=False), dtype=bool)
    order = np.argsort(dev_corr, kind="stable")
    dev_corr, duration, pageable = dev_corr[order], duration[order], pageable[order]
    lo = np.searchsorted(dev_corr, corr, side="left")
    hi = np.searchsorted(dev_corr, corr, side="right")
    sums = np.r_[0, np.cumsum(duration)]
    any_pageable = np.r_[0, np.cumsum(pageable)]
    for i in range(len(call)):       # the calls of interest only (a few per step)
        blocking = "Async" not in call[i]
        is_memset = "Memset" in call[i]
        from_pageable = any_pageable[hi[i]] > any_pageable[lo[i]]
        if blocking:
            kind = SYNC_MEMSET if is_memset else SYNC_MEMCPY
        elif from_pageable and not is_memset:
            kind = PAGEABLE_ASYNC
        else:
            continue
        _add(out, (kind, call[i], op[i]), (1, int(sums[hi[i]] - sums[lo[i]]), int(host_ns[i])))


def _gap_intervals(device: pa.Table) -> np.ndarray:
    """(start, end) rows of the idle stretches of at least GAP_MIN_NS between a device's activities (before
    the first and after the last are the window's edges, not gaps)."""
    if device.num_rows < 2:
        return np.zeros((0, 2), np.int64)
    dev = _ints(device, S.DEVICE)
    start, end = _ints(device, S.START_NS), _ints(device, S.END_NS)
    order = np.lexsort((start, dev))
    dev, start, end = dev[order], start[order], end[order]
    first = np.r_[True, dev[1:] != dev[:-1]]
    group = np.cumsum(first)
    # running max of ends per device: later devices offset above earlier ones (times may be negative)
    span = int(end.max() - start.min()) + 1
    reach = np.maximum.accumulate((end - start.min()) + (group - 1) * span) - (group - 1) * span + start.min()
    gap = start[1:] - reach[:-1]
    keep = ~first[1:] & (gap >= GAP_MIN_NS)
    return np.stack([reach[:-1][keep], start[1:][keep]], axis=1)


def _gaps(device: pa.Table) -> tuple[int, int, int]:
    """(count, total ns, longest ns) of the device's gaps (_gap_intervals)."""
    gaps = _gap_intervals(device)
    length = gaps[:, 1] - gaps[:, 0]
    return (int(len(length)), int(length.sum()), int(length.max()) if len(length) else 0)


def _add(table: dict, key: tuple, values: tuple) -> None:
    found = table.get(key)
    table[key] = list(values) if found is None else [a + b for a, b in zip(found, values)]


# --- state: the kept files' sums ----------------------------------------------------------------------

def reduce_parts(parts: list) -> FindingsData:
    out = FindingsData()
    for rank, _window, part in parts:
        for key, values in part["copies"].items():
            _add(out.copies, key, values)
        for key, values in part["syncs"].items():
            _add(out.syncs, key, values)
        _add(out.gaps, (rank,), part["gaps"][:2] + (0,))
        out.short = [a + b for a, b in zip(out.short, part["short"])]
        for op, ns in part["short_ops"].items():
            out.short_ops[op] = out.short_ops.get(op, 0) + ns
        for op, ns in part.get("gap_ops", {}).items():
            out.gap_ops[op] = out.gap_ops.get(op, 0) + ns
        found = out.gaps[(rank,)]
        found[2] = max(found[2], part["gaps"][2])
    out.gaps = {key[0]: values for key, values in out.gaps.items()}
    return out


EXTRACT = Partial("findings", map_file, listed(reduce_parts), probe=probe)
