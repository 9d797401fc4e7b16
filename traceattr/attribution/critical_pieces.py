"""The pieces a cross-rank critical path is stitched from (analysis/critical_ranks.py), on one file's graph.

A piece is the chain of binding predecessors from a start node (a step's end, or a communication activity's
start) back to the first communication activity's end it reaches (a stop) or to its step's start. Pieces
share their earlier parts (every communication activity launched from one thread reaches the same host
chain), so a walk that reaches a node an earlier walk of the same step covered stops there and links to it:
the walks are cut into fragments at those joins, each fragment's time summed once per (kind, key), and a
piece is a linked list of fragments. The work is one visit per node however many pieces share it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceattr.attribution.critical import (CRITICAL_NS, IDLE, KEY, KIND, KINDS, Graph, Path, build_graph,
                                            dropped_note, prepare, steps_of, walk, window_of)
from traceattr.attribution.critical_whatif import what_if_ns
from traceattr.model.traceset import TraceSet

FRAGMENT = "fragment"
NEXT = "next"                # the fragment before it in time (-1: it ends at a stop or at its step's start)
STOP_ROW = "stop_row"        # device row of the communication activity it stopped on (-1: none)
START_NS, END_NS = "start_ns", "end_ns"


@dataclass
class Fragments:
    rows: dict[str, np.ndarray]      # fragment, kind, key, critical_ns
    meta: dict[str, np.ndarray]      # fragment, next, stop_row, start_ns, end_ns (one per fragment)
    first: np.ndarray                # per walk (in the order asked): its first (latest) fragment


def critical_pieces(traceset: TraceSet, step: str | None, comm_rows: np.ndarray, what_if=None
                    ) -> tuple[list[Path], Fragments | None, list[str], list[int] | None]:
    """The per-rank path of every step and, when the file has communication activities (`comm_rows`, device
    rows), the fragments of the pieces: first one walk per step (its tail: from its end), then one per
    activity (from its start, bounded by the start of the step it lies in, else the window's start).
    `what_if(names) -> {name code: factor}`: also each step's duration re-solved with those keys scaled
    (attribution/critical_whatif.py)."""
    graph = build_graph(traceset)
    steps = steps_of(traceset, graph, step)
    notes = list(graph.notes)
    if step is not None and not steps:
        notes.append(f"critical path: no annotation named {step!r}; the path covers the window")
    if not steps and len(graph.ts):
        steps = [("<window>",) + window_of(graph)]
    paths = [walk(graph, name, sink, start) for name, sink, start in steps]
    scaled = None
    if what_if is not None:
        factors = what_if(graph.names)
        scaled = [what_if_ns(graph, sink, start, factors) for _, sink, start in steps]
    if not len(comm_rows):
        return paths, None, notes + dropped_note(graph), scaled
    stop = np.zeros(len(graph.ts), bool)
    stop[graph.base + graph.n_device + comm_rows] = True
    starts = np.array([start for _, _, start in steps], np.int64)
    ends = np.array([path.end_ns for path in paths], np.int64)
    at = graph.ts[graph.base + comm_rows]
    inside = (starts[None, :] <= at[:, None]) & (ends[None, :] >= at[:, None])     # steps x activities: few
    last_inside = np.where(inside.any(1), inside.shape[1] - 1 - np.argmax(inside[:, ::-1], 1), -1)
    bound = np.where(last_inside >= 0, starts[np.maximum(last_inside, 0)], int(graph.ts.min()))
    walks = [(sink, start) for _, sink, start in steps] + list(zip((graph.base + comm_rows).tolist(), bound.tolist()))
    return paths, walk_pieces(graph, walks, stop), notes + dropped_note(graph), scaled


def walk_pieces(graph: Graph, starts: list[tuple[int, int]], stop: np.ndarray) -> Fragments:
    """Fragments of the walks from each (node, bound ns) of `starts`; `stop` masks the nodes walks end on."""
    prepare(graph)
    parent, ts = graph.parent_list, graph.ts_list
    stops = graph.stop_set(stop)
    node_walk = [-1] * len(ts)               # node -> walk that covered it (at node_pos in it)
    node_pos = [0] * len(ts)
    walks: list[list[int]] = []
    bounds: list[int] = []
    ends: list[tuple[str, int, int]] = []    # ("stop", row node, 0) | ("link", walk, pos) | ("origin", 0, 0)
    cuts: list[set[int]] = []                # per walk: positions where a fragment starts (0 first)
    for start, bound in starts:
        w = len(walks)
        nodes, v, end = [start], start, ("origin", 0, 0)
        while ts[v] > bound:
            if v in stops and v != start:
                end = ("stop", v, 0)
                break
            u = parent[v]
            if u < 0:
                break
            joined = node_walk[u]
            if joined >= 0 and bounds[joined] == bound:
                pos = node_pos[u]
                cuts[joined].add(pos)
                nodes.append(u)
                end = ("link", joined, pos)
                break
            nodes.append(u)
            v = u
        last = len(nodes) - (0 if end[0] == "origin" else 1)     # a stop or a join belongs to another
        for pos in range(last):
            node = nodes[pos]
            if node_walk[node] < 0:
                node_walk[node], node_pos[node] = w, pos
        walks.append(nodes)
        bounds.append(bound)
        ends.append(end)
        cuts.append({0})
    return _fragments(graph, walks, bounds, ends, [sorted(c) for c in cuts])


def _fragments(graph: Graph, walks, bounds, ends, cuts) -> Fragments:
    """Cut every walk at its cut positions: one fragment per piece between two cuts, summed per (kind, key)."""
    frag_base = np.cumsum([0] + [len(c) for c in cuts])
    n_frag = int(frag_base[-1])
    nxt = np.full(n_frag, -1, np.int64)
    stop_row = np.full(n_frag, -1, np.int64)
    f_start = np.zeros(n_frag, np.int64)
    f_end = np.zeros(n_frag, np.int64)
    seg_frag, seg_node, seg_prev, fill = [], [], [], []
    for w, nodes in enumerate(walks):
        cut = cuts[w]
        base = int(frag_base[w])
        for i, pos in enumerate(cut):
            f = base + i
            hi = cut[i + 1] if i + 1 < len(cut) else len(nodes) - 1
            f_end[f] = graph.ts_list[nodes[pos]]
            f_start[f] = max(graph.ts_list[nodes[hi]], bounds[w])
            if i + 1 < len(cut):
                nxt[f] = base + i + 1
            # segments: node j+1 -> node j for j in [pos, hi)
            seg_frag.append(np.full(hi - pos, f, np.int64))
            seg_node.append(np.asarray(nodes[pos:hi], np.int64))
            seg_prev.append(np.asarray(nodes[pos + 1:hi + 1], np.int64))
        last = base + len(cut) - 1
        kind, a, b = ends[w]
        if kind == "link":         # b is one of walk a's cuts: the fragment that starts there
            nxt[last] = int(frag_base[a]) + bisect_right(cuts[a], b) - 1
        elif kind == "stop":
            stop_row[last] = a - graph.base - graph.n_device
        elif graph.ts_list[nodes[-1]] > bounds[w]:      # nothing before: the step opened on nothing shown
            fill.append((last, bounds[w], graph.ts_list[nodes[-1]]))
            f_start[last] = bounds[w]
    frag = np.concatenate(seg_frag) if seg_frag else np.zeros(0, np.int64)
    node = np.concatenate(seg_node) if seg_node else np.zeros(0, np.int64)
    prev = np.concatenate(seg_prev) if seg_prev else np.zeros(0, np.int64)
    edge = graph.pred_edge[node]
    bound_of = np.repeat(np.asarray(bounds, np.int64), [len(c) for c in cuts])
    ns = graph.ts[node] - np.maximum(graph.ts[prev], bound_of[frag] if len(frag) else 0)
    kind = graph.kind[edge].astype(np.int64)
    name = graph.name[edge]
    if fill:
        f, lo, hi = (np.array(values, np.int64) for values in zip(*fill))
        frag, ns = np.concatenate([frag, f]), np.concatenate([ns, hi - lo])
        kind, name = np.concatenate([kind, np.full(len(f), IDLE)]), np.concatenate([name, np.full(len(f), -1)])
    frame = pd.DataFrame({FRAGMENT: frag, "k": kind, "n": name, CRITICAL_NS: ns})
    frame = frame[frame[CRITICAL_NS] > 0].groupby([FRAGMENT, "k", "n"], as_index=False, sort=False)[CRITICAL_NS].sum()
    names = graph.name_array
    rows = {FRAGMENT: frame[FRAGMENT].to_numpy(np.int64),
            KIND: np.asarray(KINDS, dtype=object)[frame["k"].to_numpy(np.int64)],
            KEY: names[np.where(frame["n"].to_numpy(np.int64) >= 0, frame["n"].to_numpy(np.int64), len(names) - 1)],
            CRITICAL_NS: frame[CRITICAL_NS].to_numpy(np.int64)}
    meta = {FRAGMENT: np.arange(n_frag, dtype=np.int64), NEXT: nxt, STOP_ROW: stop_row, START_NS: f_start,
            END_NS: f_end}
    return Fragments(rows, meta, np.asarray(frag_base[:-1], np.int64))
