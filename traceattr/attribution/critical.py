"""The critical path of a step on one file (one rank): what bounds the step's wall time (docs/critical-path.md).

The graph is built as numpy columns, one node per start and end of every host range (cpu ops, annotations,
runtime calls) and every device activity, with these edges:

* host program order: consecutive points of one thread (nesting from hosttree.py), the segment between them
  belongs to the innermost open range (host work) or to none (a host gap: idle);
* a device activity's start -> its end (compute, communication, memcpy, memset);
* stream order: the previous activity's end on the same (device, stream) -> the next one's start (a gap);
* launch: the runtime call's start -> the activity's start (correlation, attribution/links.py);
* event waits: `Stream Wait Event` markers: the last activity launched on the awaited stream before the
  cudaEventRecord -> the first activity launched on the waiting stream after the cudaStreamWaitEvent;
* host syncs: `Stream Sync` / `Context Sync` / `Event Sync` markers (and `cudaDeviceSynchronize` calls in
  traces without markers): the awaited activities' end -> the sync call's return; a synchronous memcpy's
  end -> its call's return.

Every edge runs forward in time; one that runs backward (clock skew, a broken correlation) is dropped and
counted. Each node's binding predecessor is the incoming edge that arrived last (the latest source time):
with the trace's real times that is the dependency the node actually waited for. The path is the chain of
binding predecessors walked back from the step's end to its start, so its segments tile the step exactly:
Σ critical_ns over kinds == the step's duration, and the path is never longer than the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.attribution.hosttree import RANGE_CATEGORIES, build_host_tree, dense_codes, runtime_mask
from traceattr.attribution.links import PROFILER_STEP
from traceattr.io.codes import dictionary_codes
from traceattr.model.traceset import TraceSet

# kinds of path time, in the order the breakdown lists them
COMPUTE, COMMUNICATION, MEMORY, HOST, LAUNCH, KERNEL_GAP, SYNC, IDLE = range(8)
KINDS = ("compute", "communication", "memcpy", "host", "launch", "kernel_gap", "sync", "idle")
KIND_HELP = {
    "compute": "compute kernels running",
    "communication": "communication kernels running",
    "memcpy": "memcpy / memset running",
    "host": "CPU work inside an op or runtime call (name: the innermost one)",
    "launch": "launch overhead: the runtime call's start to its kernel's start (name: the kernel)",
    "kernel_gap": "gap between two kernels of one stream, the second queued",
    "sync": "waiting on the device: a cross-stream event wait, or a host sync returning after the kernel",
    "idle": "nothing the trace shows: a host gap between top-level ops, or before the first event",
}
# HTA's critical_path_analysis boundedness of each kind ("" : HTA gives such edges no weight)
HTA_BOUND = {"compute": "gpu_compute_bound", "memcpy": "gpu_compute_bound",
             "communication": "gpu_communication_bound", "host": "cpu_bound",
             "launch": "gpu_kernel_launch_overhead", "kernel_gap": "gpu_kernel_kernel_overhead",
             "sync": "", "idle": ""}
_DEVICE_KIND = {S.COMPUTE: COMPUTE, S.COMMUNICATION: COMMUNICATION, S.MEMCPY: MEMORY, S.MEMSET: MEMORY}
# edge priority when two predecessors arrive at the same time: program order first
_PRIORITY = {HOST: 3, IDLE: 3, COMPUTE: 3, COMMUNICATION: 3, MEMORY: 3, KERNEL_GAP: 2, LAUNCH: 1, SYNC: 0}
_MAX_LOOP_PASSES = 8
STREAM_SYNC_TID_OFFSET = 1_000_000     # kineto PR 1356 (2026-04) writes `Stream Sync` at tid = stream + 10**6
WAIT_EVENT, STREAM_SYNC, CONTEXT_SYNC, EVENT_SYNC = "Stream Wait Event", "Stream Sync", "Context Sync", "Event Sync"
DEVICE_SYNC_CALLS = ("cudaDeviceSynchronize", "hipDeviceSynchronize")
STREAM_SYNC_CALLS = ("cudaStreamSynchronize", "hipStreamSynchronize")
STEP, KIND, KEY = "step", "kind", "key"
CRITICAL_NS, STEP_NS = "critical_ns", "step_ns"
SLACK_NS = "slack_ns"
NO_MARGIN = 2**62                      # a node with one predecessor: nothing else can hold it
SEGMENTS = "segments"


@dataclass
class Graph:
    """One file's dependency graph as columns: nodes are points in time, edges (src, dst, kind, owner)."""
    ts: np.ndarray                  # int64 per node
    struct_edge: np.ndarray         # int64 per node: its program-order edge (thread, span or stream), -1
    src: np.ndarray                 # int64 per edge
    dst: np.ndarray
    kind: np.ndarray                # int8 per edge: KINDS index
    name: np.ndarray                # int64 per edge: code into names (-1: none)
    names: list[str]
    host_end: np.ndarray            # int64 per host range node: its end point
    host_start: np.ndarray
    host_row: np.ndarray            # host table row per host range node
    dropped: int = 0                # edges that ran backward in time (clock skew, broken correlations)
    notes: list[str] = field(default_factory=list)
    # solved once, on the first walk
    pred_edge: np.ndarray | None = None
    margin: np.ndarray | None = None
    parent_list: list | None = None
    ts_list: list | None = None

    is_work: np.ndarray | None = None   # bool per edge: a host segment or an activity's span (not a dependency)
    base: int = 0                   # device row k: start node base + k, end node base + n_device + k
    n_device: int = 0
    _stops: dict = field(default_factory=dict)

    def stop_set(self, mask: np.ndarray) -> set:
        """The nodes of a stop mask as a set (built once per mask object)."""
        found = self._stops.get(id(mask))
        if found is None or found[0] is not mask:
            found = self._stops[id(mask)] = (mask, set(np.flatnonzero(mask).tolist()))
        return found[1]

    @property
    def name_array(self) -> np.ndarray:
        """names as an object array with "" appended (code -1 reads the last)."""
        return np.asarray(self.names + [""], dtype=object)


@dataclass
class Path:
    """The critical path of one step: segments tiling [start_ns, end_ns] from its start, end to end."""
    step: str
    start_ns: int
    end_ns: int
    seg_start: np.ndarray           # int64 per segment, in time order
    seg_end: np.ndarray
    kind: np.ndarray                # int8 per segment
    name: np.ndarray                # object per segment: op or kernel name ("" for gaps)
    stop_node: int = -1             # walk(stop=...): the node it stopped on, -1 when it reached start_ns
    margin: np.ndarray | None = None   # int64 per segment: least margin of the path's nodes from its end on

    def breakdown(self) -> pd.DataFrame:
        """critical_ns per (kind, key), Σ == end_ns - start_ns; slack_ns: how much the key's time on the path
        can shrink with the step shrinking as much, for sure (no later node of the path meets another of its
        predecessors): min(critical_ns, the least margin after the key's first segment)."""
        ns = self.seg_end - self.seg_start
        margin = self.margin if self.margin is not None else np.full(len(ns), NO_MARGIN, np.int64)
        frame = pd.DataFrame({KIND: np.asarray(KINDS, dtype=object)[self.kind], KEY: self.name,
                              CRITICAL_NS: ns, "margin": margin})
        out = frame.groupby([KIND, KEY], as_index=False, sort=False).agg(
            critical_ns=(CRITICAL_NS, "sum"), segments=(CRITICAL_NS, "size"), margin=("margin", "min"))
        out[SLACK_NS] = np.minimum(out[CRITICAL_NS], out.pop("margin")).astype(np.int64)
        out.insert(0, STEP, self.step)
        out[STEP_NS] = self.end_ns - self.start_ns
        return out


def critical_paths(traceset: TraceSet, step: str | None = None) -> tuple[list[Path], list[str]]:
    """The critical path of every step of a one-file TraceSet (ProfilerStep#N ranges, or the instances of the
    annotation named `step`, else the whole window) and notes on what was dropped."""
    graph = build_graph(traceset)
    steps = steps_of(traceset, graph, step)
    paths = [walk(graph, name, sink, start) for name, sink, start in steps]
    notes = list(graph.notes) + dropped_note(graph)
    if step is not None and not steps:
        notes.append(f"critical path: no annotation named {step!r}; the path covers the window")
    return paths or ([walk(graph, "<window>", *window_of(graph))] if len(graph.ts) else []), notes


def dropped_note(graph: Graph) -> list[str]:
    if not graph.dropped:
        return []
    return [f"critical path: {graph.dropped} dependency edge(s) ran backward in time (clock skew or a broken "
            f"correlation) and were dropped"]


# --- the graph ------------------------------------------------------------------------------------

def build_graph(traceset: TraceSet) -> Graph:
    host, device, markers = traceset.host, traceset.device, traceset.markers
    category = host.column(S.CATEGORY)
    ranges = np.asarray(pc.is_in(category, value_set=pa.array(RANGE_CATEGORIES[:2])).to_numpy(
        zero_copy_only=False), dtype=bool)                 # cpu ops and annotations; python frames are left out
    calls = runtime_mask(category)
    rows = np.flatnonzero(ranges | calls)
    col = lambda table, name, r=None: np.asarray(table.column(name).to_numpy(), dtype=np.int64) \
        if r is None else np.asarray(table.column(name).to_numpy(), dtype=np.int64)[r]  # noqa: E731
    # every kept host row as a range (runtime calls too: a sync call's return is a point the path reaches)
    as_ranges = pa.table({S.CATEGORY: pa.array([S.CPU_OP] * len(rows), pa.string()),
                          S.RANK: col(host, S.RANK, rows), S.WINDOW: col(host, S.WINDOW, rows),
                          S.PID: col(host, S.PID, rows), S.TID: col(host, S.TID, rows),
                          S.START_NS: col(host, S.START_NS, rows), S.END_NS: col(host, S.END_NS, rows)})
    tree = build_host_tree(as_ranges)
    host_row = rows[tree.host_row]
    h = len(tree)
    names_dict, host_name = _codes(host.column(S.NAME))
    names = list(names_dict)

    # host points: start i, end h + i; chained per thread in nesting order
    point = np.arange(2 * h, dtype=np.int64)
    is_end = point >= h
    node = point % h
    zero = tree.end_ns == tree.start_ns
    p_ts = np.concatenate([tree.start_ns, tree.end_ns])
    phase = np.where(is_end, np.where(zero[node], 2, 0), 1)
    depth_key = np.where(is_end, -tree.depth[node], tree.depth[node])
    order = np.lexsort((node, depth_key, phase, p_ts, tree.thread[node]))
    same = tree.thread[node[order]][1:] == tree.thread[node[order]][:-1]
    h_src, h_dst = order[:-1][same], order[1:][same]
    owner = np.where(h_src < h, h_src, tree.parent[node[h_src]])      # a start opens its range; an end, its parent
    h_kind = np.where(owner >= 0, HOST, IDLE).astype(np.int8)
    h_name = np.where(owner >= 0, host_name[host_row[np.maximum(owner, 0)]], -1)

    # device points: start 2h + k, end 2h + n + k
    n = device.num_rows
    d_start, d_end = col(device, S.START_NS), col(device, S.END_NS)
    d_end = np.maximum(d_end, d_start)
    base = 2 * h
    ts = np.concatenate([p_ts, d_start, d_end])
    dev_names, dev_name = _codes(device.column(S.NAME))
    offset = len(names)
    names += list(dev_names)
    dev_name = dev_name + offset
    categories, category_code = _codes(device.column(S.CATEGORY))
    d_kind = np.array([_DEVICE_KIND.get(c, COMPUTE) for c in categories] + [COMPUTE], np.int8)[category_code]
    k = np.arange(n, dtype=np.int64)
    srcs, dsts, kinds, ename = [h_src, base + k], [h_dst, base + n + k], [h_kind, d_kind], [h_name, dev_name]

    # stream order
    stream = dense_codes(col(device, S.DEVICE), col(device, S.STREAM)) if n else np.zeros(0, np.int64)
    by_stream = np.lexsort((k, d_start, stream))
    next_same = stream[by_stream][1:] == stream[by_stream][:-1]
    prev, nxt = by_stream[:-1][next_same], by_stream[1:][next_same]
    srcs.append(base + n + prev), dsts.append(base + nxt)
    kinds.append(np.full(len(prev), KERNEL_GAP, np.int8)), ename.append(np.full(len(prev), -1))

    # launches: the runtime call's start -> the activity's start
    host_node_of_row = np.full(host.num_rows, -1, np.int64)
    host_node_of_row[host_row] = np.arange(h)
    runtime_row = launching_calls(host, calls, device)
    runtime_node = np.where(runtime_row >= 0, host_node_of_row[np.maximum(runtime_row, 0)], -1)
    launched = np.flatnonzero(runtime_node >= 0)
    srcs.append(runtime_node[launched]), dsts.append(base + launched)
    kinds.append(np.full(len(launched), LAUNCH, np.int8)), ename.append(dev_name[launched])

    # synchronous copies: the activity's end -> its call's return
    blocking_name = np.array([_blocking_copy(c) for c in names] + [False], bool)     # per distinct name
    pageable = np.array([_pageable_copy(c) for c in dev_names] + [False], bool)
    blocking = blocking_name[host_name[host_row[runtime_node[launched]]]] | pageable[dev_name[launched] - offset]
    copies = launched[blocking]
    srcs.append(base + n + copies), dsts.append(h + runtime_node[copies])
    kinds.append(np.full(len(copies), SYNC, np.int8)), ename.append(np.full(len(copies), -1))

    notes: list[str] = []
    s_src, s_dst = _sync_edges(traceset, markers, device, stream, host_node_of_row, host_name, names, h, notes,
                               runtime_row)
    srcs.append(base + n + s_src), dsts.append(s_dst)
    kinds.append(np.full(len(s_src), SYNC, np.int8)), ename.append(np.full(len(s_src), -1))

    src, dst = np.concatenate(srcs).astype(np.int64), np.concatenate(dsts).astype(np.int64)
    kind, name = np.concatenate(kinds).astype(np.int8), np.concatenate(ename).astype(np.int64)
    backward = ts[src] > ts[dst]
    # program order (thread chains, activity spans, stream order: the first edges) never loops: the walk's
    # way out of a loop of equal-time edges
    structural = len(h_src) + n + len(prev)
    kept_index = np.cumsum(~backward) - 1
    struct_edge = np.full(len(ts), -1, np.int64)
    ordered = np.flatnonzero(~backward[:structural])
    struct_edge[dst[ordered]] = kept_index[ordered]
    is_work = np.zeros(len(src), bool)
    is_work[:len(h_src) + n] = True          # host program order and activity spans: time spent working
    return Graph(ts, struct_edge, src[~backward], dst[~backward], kind[~backward], name[~backward], names,
                 host_end=h + np.arange(h), host_start=np.arange(h), host_row=host_row,
                 dropped=int(backward.sum()), notes=notes, base=base, n_device=n, is_work=is_work[~backward])


def launching_calls(host: pa.Table, calls: np.ndarray, device: pa.Table) -> np.ndarray:
    """Per device row the host row of its runtime call (same correlation; the earliest of duplicates, as
    attribution/links.py), -1. One file: correlations are unique to it."""
    rows = np.flatnonzero(calls)
    corr = np.asarray(host.column(S.CORRELATION).to_numpy(), np.int64)[rows]
    start = np.asarray(host.column(S.START_NS).to_numpy(), np.int64)[rows]
    keep = corr >= 0
    rows, corr, start = rows[keep], corr[keep], start[keep]
    order = np.lexsort((start, corr))
    rows, corr = rows[order], corr[order]
    first = np.ones(len(corr), bool)
    first[1:] = corr[1:] != corr[:-1]
    rows, corr = rows[first], corr[first]
    wanted = np.asarray(device.column(S.CORRELATION).to_numpy(), np.int64)
    at = np.minimum(np.searchsorted(corr, wanted), max(len(corr) - 1, 0))
    hit = (len(corr) > 0) & (wanted >= 0) & (corr[at] == wanted) if len(corr) else np.zeros(len(wanted), bool)
    return np.where(hit, rows[at] if len(rows) else -1, -1)


def _sync_edges(traceset, markers, device, stream, host_node_of_row, host_name, names, h, notes, runtime_row):
    """(awaited activity, host end point or device start point) of every event wait and host sync."""
    n = device.num_rows
    base = 2 * h
    empty = np.zeros(0, np.int64)
    if not n:
        return empty, empty
    dev_id, dev_stream, dev_corr = (np.asarray(device.column(c).to_numpy(), np.int64)
                                    for c in (S.DEVICE, S.STREAM, S.CORRELATION))
    # activities by (stream, correlation): "the last one launched before correlation c on stream s"
    launches = pd.DataFrame({"dev": dev_id, "stream": dev_stream, "corr": dev_corr, "row": np.arange(n)})
    launches = launches[launches["corr"] >= 0].sort_values("corr", kind="stable")
    sync = pc.equal(markers.column(S.CATEGORY), S.CUDA_SYNC)
    m = markers.filter(sync)
    frame = m.select([S.DEVICE, S.STREAM, S.NAME, S.CORRELATION, S.WAIT_ON_STREAM, S.WAIT_ON_CORRELATION]).to_pandas()
    frame = frame.rename(columns={S.DEVICE: "dev", S.STREAM: "stream", S.CORRELATION: "corr"})
    known = set(zip(dev_id.tolist(), dev_stream.tolist()))
    moved = [(d, s - STREAM_SYNC_TID_OFFSET) in known and (d, s) not in known
             for d, s in zip(frame["dev"].tolist(), frame["stream"].tolist())]
    frame.loc[np.asarray(moved, bool), "stream"] -= STREAM_SYNC_TID_OFFSET
    srcs, dsts = [], []

    # host calls by correlation: the end point of the call each sync marker belongs to
    host = traceset.host
    calls = np.flatnonzero(runtime_mask(host.column(S.CATEGORY)))
    call_corr = np.asarray(host.column(S.CORRELATION).to_numpy(), np.int64)[calls]
    call_node = host_node_of_row[calls]
    call_of = pd.Series(call_node, index=call_corr)
    call_of = call_of[~call_of.index.duplicated()]

    def last_before(dev, streams, corr):
        """Activity row launched last on (dev, stream) before correlation corr (-1 none), per query."""
        q = pd.DataFrame({"dev": dev, "stream": streams, "corr": corr, "q": np.arange(len(corr))})
        q = q[q["corr"] >= 0].sort_values("corr", kind="stable")
        if not len(q) or not len(launches):
            return np.full(len(corr), -1, np.int64)
        hit = pd.merge_asof(q, launches, on="corr", by=["dev", "stream"], allow_exact_matches=False)
        out = np.full(len(corr), -1, np.int64)
        out[hit.q.to_numpy()] = hit.row.fillna(-1).to_numpy(np.int64)
        return out

    def first_after(dev, streams, corr):
        q = pd.DataFrame({"dev": dev, "stream": streams, "corr": corr, "q": np.arange(len(corr))})
        q = q[q["corr"] >= 0].sort_values("corr", kind="stable")
        if not len(q) or not len(launches):
            return np.full(len(corr), -1, np.int64)
        hit = pd.merge_asof(q, launches, on="corr", by=["dev", "stream"], allow_exact_matches=False,
                            direction="forward")
        out = np.full(len(corr), -1, np.int64)
        out[hit.q.to_numpy()] = hit.row.fillna(-1).to_numpy(np.int64)
        return out

    def call_end(corr):
        node = call_of.reindex(corr).fillna(-1).to_numpy(np.int64)
        return np.where(node >= 0, h + node, -1)

    unmatched = 0
    waits = frame[frame[S.NAME] == WAIT_EVENT]
    if len(waits):
        src = last_before(waits.dev.to_numpy(), waits.wait_on_stream.to_numpy(), waits.wait_on_correlation.to_numpy())
        dst = first_after(waits.dev.to_numpy(), waits.stream.to_numpy(), waits["corr"].to_numpy())
        ok = (src >= 0) & (dst >= 0)
        srcs.append(src[ok]), dsts.append(base + dst[ok])
    events = frame[frame[S.NAME] == EVENT_SYNC]
    if len(events):
        src = last_before(events.dev.to_numpy(), events.wait_on_stream.to_numpy(),
                          events.wait_on_correlation.to_numpy())
        dst = call_end(events["corr"].to_numpy())
        ok = (src >= 0) & (dst >= 0)
        unmatched += int((dst < 0).sum())
        srcs.append(src[ok]), dsts.append(dst[ok])
    streams = frame[frame[S.NAME] == STREAM_SYNC]
    if len(streams):
        src = last_before(streams.dev.to_numpy(), streams.stream.to_numpy(), streams["corr"].to_numpy())
        dst = call_end(streams["corr"].to_numpy())
        ok = (src >= 0) & (dst >= 0)
        unmatched += int((dst < 0).sum())
        srcs.append(src[ok]), dsts.append(dst[ok])
    # a device-wide sync waits for the last activity of every stream of its device
    contexts = frame[frame[S.NAME] == CONTEXT_SYNC][["dev", "corr"]]
    if not len(frame):       # no markers (torch < 2.1 or syncs not recorded): device syncs by their call's name
        is_device_sync = np.isin(np.asarray(names, dtype=object)[host_name[calls]], DEVICE_SYNC_CALLS) \
            if len(calls) else np.zeros(0, bool)
        devices = np.unique(dev_id)
        if is_device_sync.any() and len(devices) == 1:
            contexts = pd.DataFrame({"dev": devices[0], "corr": call_corr[is_device_sync]})
        waits = np.isin(np.asarray(names, dtype=object)[host_name[calls]], ("cudaStreamWaitEvent", "hipStreamWaitEvent")) \
            if len(calls) else np.zeros(0, bool)
        if waits.any():
            notes.append(f"critical path: no cuda_sync markers: {int(waits.sum())} cudaStreamWaitEvent call(s) "
                         f"cannot be followed, so a kernel held by another stream shows as launch time (torch >= 2.1 "
                         f"records the markers)")
        # a stream sync waits for the stream its thread last launched on (`.item()`: a copy, then the sync)
        is_stream_sync = np.isin(np.asarray(names, dtype=object)[host_name[calls]], STREAM_SYNC_CALLS) \
            if len(calls) else np.zeros(0, bool)
        if is_stream_sync.any():
            src = _last_launched_by_thread(host, runtime_row, calls[is_stream_sync])
            dst = h + host_node_of_row[calls[is_stream_sync]]
            ok = (src >= 0) & (dst >= 0)
            srcs.append(src[ok]), dsts.append(dst[ok])
            if ok.any():
                notes.append(f"critical path: no cuda_sync markers; {int(ok.sum())} cudaStreamSynchronize call(s) "
                             f"taken to wait for the last activity their thread launched")
    if len(contexts):
        pairs = np.unique(np.stack([dev_id, dev_stream], 1), axis=0)
        rep = contexts.merge(pd.DataFrame({"dev": pairs[:, 0], "stream": pairs[:, 1]}), on="dev")
        src = last_before(rep.dev.to_numpy(), rep.stream.to_numpy(), rep["corr"].to_numpy())
        dst = call_end(rep["corr"].to_numpy())
        ok = (src >= 0) & (dst >= 0)
        srcs.append(src[ok]), dsts.append(dst[ok])
    if unmatched:
        notes.append(f"critical path: {unmatched} sync marker(s) without their runtime call were left out")
    if not srcs:
        return empty, empty
    return np.concatenate(srcs).astype(np.int64), np.concatenate(dsts).astype(np.int64)


def _last_launched_by_thread(host: pa.Table, runtime_row: np.ndarray, sync_rows: np.ndarray) -> np.ndarray:
    """Per sync call (host rows): the device row whose launch call started last before it on its thread (by
    time: writers leave a sync call's correlation out)."""
    pid = np.asarray(host.column(S.PID).to_numpy(), np.int64)
    tid = np.asarray(host.column(S.TID).to_numpy(), np.int64)
    start = np.asarray(host.column(S.START_NS).to_numpy(), np.int64)
    launched = np.flatnonzero(runtime_row >= 0)
    thread = dense_codes(np.concatenate([pid[runtime_row[launched]], pid[sync_rows]]),
                         np.concatenate([tid[runtime_row[launched]], tid[sync_rows]]))
    launches = pd.DataFrame({"thread": thread[:len(launched)], "at": start[runtime_row[launched]], "row": launched})
    queries = pd.DataFrame({"thread": thread[len(launched):], "at": start[sync_rows], "q": np.arange(len(sync_rows))})
    out = np.full(len(sync_rows), -1, np.int64)
    if not len(launches) or not len(queries):
        return out
    hit = pd.merge_asof(queries.sort_values("at", kind="stable"), launches.sort_values("at", kind="stable"),
                        on="at", by="thread", allow_exact_matches=False)
    out[hit["q"].to_numpy()] = hit["row"].fillna(-1).to_numpy(np.int64)
    return out


def _pageable_copy(activity: str) -> bool:
    """A copy to or from pageable host memory (`Memcpy DtoH (Device -> Pageable)`): the call returns only
    when it is done, even a cudaMemcpyAsync."""
    return activity.startswith("Memcpy") and "Pageable" in activity


def _blocking_copy(call: str) -> bool:
    """A synchronous copy call (cudaMemcpy, cudaMemcpy2D, hipMemcpy...) returns after its copy ends."""
    return ("Memcpy" in call or "Memset" in call) and "Async" not in call and "Peer" not in call


def _codes(column) -> tuple[list[str], np.ndarray]:
    """(distinct texts, int64 code per row): one Python string per distinct value, never per row."""
    dictionary, codes = dictionary_codes(column)
    return [str(v) for v in dictionary.to_pylist()], np.asarray(codes, dtype=np.int64)


# --- the steps and the walk -----------------------------------------------------------------------

def steps_of(traceset: TraceSet, graph: Graph, step: str | None) -> list[tuple[str, int, int]]:
    """(name, sink node, start ns) per step: the end point of each ProfilerStep#N range (or of each
    instance of the annotation `step`), in time order."""
    host = traceset.host
    text, code = _codes(host.column(S.NAME))
    wanted = np.array([t == step if step is not None else t.startswith(PROFILER_STEP) for t in text] + [False])
    annotation = np.asarray(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION).to_numpy(zero_copy_only=False),
                            bool)
    rows = graph.host_row
    chosen = np.flatnonzero(wanted[code[rows]] & (annotation[rows] | (step is not None)))
    start = graph.ts[graph.host_start[chosen]]
    chosen = chosen[np.argsort(start, kind="stable")]
    labels = [text[c] for c in code[rows[chosen]].tolist()]
    if step is not None and len(set(labels)) < len(labels):
        labels = [f"{label} #{i}" for i, label in enumerate(labels)]
    return [(label, int(graph.host_end[c]), int(graph.ts[graph.host_start[c]])) for label, c in zip(labels, chosen)]


def window_of(graph: Graph) -> tuple[int, int]:
    """The whole file: from its first point to its last (a device end first when times tie)."""
    last = len(graph.ts) - 1 - int(np.argmax(graph.ts[::-1]))
    return last, int(graph.ts.min())


def binding_predecessors(graph: Graph) -> np.ndarray:
    """Per node the edge (index) that arrived last: latest source time, then program order; -1: none. A loop
    of equal-time edges (a kernel of zero duration at its launch's very start...) is broken by program order,
    each broken edge counted with the dropped ones."""
    pred = np.full(len(graph.ts), -1, np.int64)
    if not len(graph.src):
        return pred
    priority = np.asarray([_PRIORITY[k] for k in range(len(KINDS))], np.int8)[graph.kind]
    order = np.lexsort((priority, graph.ts[graph.src], graph.dst))
    last = np.ones(len(order), bool)
    last[:-1] = graph.dst[order][1:] != graph.dst[order][:-1]
    pred[graph.dst[order[last]]] = order[last]
    for _ in range(_MAX_LOOP_PASSES):
        looped = _on_loops(graph.ts, graph.src, pred)
        if not len(looped):
            break
        graph.dropped += len(looped)
        pred[looped] = graph.struct_edge[looped]
    return pred


def margins(graph: Graph, pred: np.ndarray) -> np.ndarray:
    """Per node: how much earlier it could be before another of its predecessors holds it (its time minus the
    latest source of its other incoming edges); NO_MARGIN when it has no other."""
    margin = np.full(len(graph.ts), NO_MARGIN, np.int64)
    edges = np.arange(len(graph.src))
    other = edges[pred[graph.dst] != edges]
    if not len(other):
        return margin
    other = other[np.argsort(graph.dst[other], kind="stable")]
    dst = graph.dst[other]
    starts = np.flatnonzero(np.concatenate([[True], dst[1:] != dst[:-1]]))
    latest = np.maximum.reduceat(graph.ts[graph.src[other]], starts)
    nodes = dst[starts]
    margin[nodes] = graph.ts[nodes] - latest
    return margin


def _on_loops(ts: np.ndarray, src: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """One node of every loop of binding predecessors. A predecessor is never later than its node, so a loop
    has one time only: only nodes whose predecessor has their own time are followed (pointer doubling)."""
    parent = np.where(pred >= 0, src[np.maximum(pred, 0)], -1)
    same = np.flatnonzero((parent >= 0) & (ts[np.maximum(parent, 0)] == ts))
    if not len(same):
        return same
    local = np.full(len(ts), -1, np.int64)
    local[same] = np.arange(len(same))
    jump = local[parent[same]]                 # within the equal-time nodes, -1 when the chain leaves them
    for _ in range(int(np.ceil(np.log2(len(same) + 1))) + 1):
        jump = np.where(jump >= 0, jump[np.maximum(jump, 0)], -1)
    return np.unique(same[jump[jump >= 0]])    # after >= len(same) steps a chain that never left is in a loop


def prepare(graph: Graph) -> None:
    """Solve the binding predecessors once, and keep them as Python lists for the walks' loops."""
    if graph.parent_list is None:
        graph.pred_edge = binding_predecessors(graph)
        graph.margin = margins(graph, graph.pred_edge)
        parent = np.where(graph.pred_edge >= 0, graph.src[np.maximum(graph.pred_edge, 0)], -1)
        graph.parent_list, graph.ts_list = parent.tolist(), graph.ts.tolist()


def walk(graph: Graph, name: str, sink: int, start_ns: int, stop: np.ndarray | None = None) -> Path:
    """The chain of binding predecessors from `sink` back to `start_ns`, as segments in time order. `stop`
    (a mask of nodes): the walk also ends on reaching one of them (Path.stop_node; the path then starts
    there, with no idle filler)."""
    prepare(graph)
    parent, ts = graph.parent_list, graph.ts_list
    chain, v, stop_node = [sink], sink, -1
    if stop is None:
        while ts[v] > start_ns:             # the one loop per path node: three list reads and an append
            v = parent[v]
            if v < 0:
                break
            chain.append(v)
    else:
        stops = graph.stop_set(stop)
        while ts[v] > start_ns:
            v = parent[v]
            if v < 0:
                break
            chain.append(v)
            if v in stops:
                stop_node = v
                break
    nodes = np.asarray(chain[::-1], np.int64)          # in time order: earliest first
    edge = graph.pred_edge[nodes[1:]]
    seg_start = np.maximum(graph.ts[nodes[:-1]], start_ns)
    seg_end = graph.ts[nodes[1:]]
    kind, code = graph.kind[edge], graph.name[edge]
    # a segment shrunk by d moves every later node of the path d earlier, until one of them meets the time of
    # another of its predecessors: the least margin from the segment's end on
    later = np.minimum.accumulate(graph.margin[nodes[1:]][::-1])[::-1] if len(nodes) > 1 else np.zeros(0, np.int64)
    first = int(graph.ts[nodes[0]])
    if first > start_ns and stop_node < 0:   # nothing before: the step opened on no dependency the trace shows
        seg_start = np.concatenate([[start_ns], seg_start]).astype(np.int64)
        seg_end = np.concatenate([[first], seg_end]).astype(np.int64)
        kind = np.concatenate([[IDLE], kind]).astype(np.int8)
        code = np.concatenate([[-1], code])
        later = np.concatenate([[later[0] if len(later) else NO_MARGIN], later]).astype(np.int64)
    text = graph.name_array[np.where(code >= 0, code, len(graph.names))]
    keep = seg_end > seg_start
    origin = int(start_ns) if stop_node < 0 else max(first, int(start_ns))
    return Path(name, origin, int(graph.ts[sink]), seg_start[keep], seg_end[keep], kind[keep], text[keep],
                stop_node, later[keep])
