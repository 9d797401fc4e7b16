"""What if a kernel or op took `factor` times as long? The step re-solved on the same graph.

Each edge gets a weight: the binding edge of a node keeps the time it took (an activity's span, a host
segment, a launch's latency, a kernel gap, the time a sync took to return), scaled when it is work of a named
key; every other edge weighs nothing (it had slack: a blocking call's own span included). Times are then solved
forward, each node at the latest of its predecessors' time plus weight, from the step's start; nodes before
it keep the trace's times. Unchanged weights give back the trace's times exactly, so the new step time is
what the model's edges say the change gains, nothing more: it does not see memory contention, clocks that
rise when a kernel shrinks, a CPU that would run ahead of a faster GPU into a full launch queue, and so on.
"""

from __future__ import annotations

import numpy as np

from traceattr.attribution.critical import Graph, prepare


def what_if_ns(graph: Graph, sink: int, start_ns: int, factor_of_name: dict[int, float]) -> int:
    """The step's new duration (sink's new time minus start_ns) with every work edge whose name code is in
    `factor_of_name` scaled by its factor."""
    prepare(graph)
    ts = graph.ts
    end_ns = int(ts[sink])
    inside = np.flatnonzero((ts >= start_ns) & (ts <= end_ns))
    if not len(inside):
        return end_ns - start_ns
    binding = np.zeros(len(graph.src), bool)
    chosen = graph.pred_edge[graph.pred_edge >= 0]
    binding[chosen] = True
    # binding edges keep their time; the others had slack and weigh nothing (a sync call's own span too: its
    # return waited for the device, as HTA zeroes blocking calls)
    weight = np.where(binding, ts[graph.dst] - ts[graph.src], 0).astype(np.float64)
    if factor_of_name:
        codes = np.fromiter(factor_of_name, np.int64, len(factor_of_name))
        factors = np.fromiter(factor_of_name.values(), np.float64, len(factor_of_name))
        order = np.argsort(codes)
        at = np.clip(np.searchsorted(codes[order], graph.name), 0, len(codes) - 1)
        hit = graph.is_work & (codes[order][at] == graph.name)
        weight[hit] *= factors[order][at[hit]]
    weight = np.round(weight).astype(np.int64)
    # incoming edges of the window's nodes, in time order of their destination
    in_window = np.zeros(len(ts), bool)
    in_window[inside] = True
    edges = np.flatnonzero(in_window[graph.dst])
    edges = edges[np.argsort(graph.dst[edges], kind="stable")]
    nodes = inside[np.lexsort((inside, ts[inside]))]
    new = ts.copy()
    src_list, w_list = graph.src[edges].tolist(), weight[edges].tolist()
    first = np.searchsorted(graph.dst[edges], nodes).tolist()
    last = np.searchsorted(graph.dst[edges], nodes, side="right").tolist()
    values = new.tolist()
    order = nodes.tolist()
    for _ in range(4):                # equal times may come in any order: a pass more settles them
        changed = False
        for v, lo, hi in zip(order, first, last):
            if lo == hi:
                continue          # no predecessor: keeps its time
            best = max(values[src_list[e]] + w_list[e] for e in range(lo, hi))
            if best != values[v]:
                values[v] = best
                changed = True
        if not changed:
            break
    return int(values[sink]) - int(start_ns)
