"""Per-thread containment of host events: who encloses whom, vectorized.

Nodes are the host ranges (`cpu_op`, `user_annotation`, `python_function`) plus every runtime call as a
point probe at its start. On each (rank, window, pid, tid) the start and end points are sorted by
(time, ends before starts, longer first); the running count of open ranges is each node's depth, and a
node's parent is the last node before it that opened at depth - 1 (under proper nesting that range is
still open). One sort and one searchsorted: O(n log n), no Python loop per event.

Containment is half-open: a range [s, e) contains a point t when s <= t < e. Ranges that are not nested
(a child that outlives its parent, seen with `with_stack=True`) are made to nest by cutting the end of one
of the two (the child when it overhangs a little, the parent when the child lives mostly past it); the cut
is counted and the pass repeats until the tree is consistent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S

RANGE_CATEGORIES = (S.CPU_OP, S.USER_ANNOTATION, S.PYTHON_FUNCTION)
_MAX_CLIP_PASSES = 32


def runtime_mask(category: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Runtime calls: cuda_runtime, cuda_driver and any other backend's `*_runtime` / `*_driver`."""
    mask = pc.or_(pc.ends_with(category, "_runtime"), pc.ends_with(category, "_driver"))
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def category_mask(category, values) -> np.ndarray:
    mask = pc.is_in(category, value_set=pa.array(list(values), pa.string()))
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def file_key(rank: np.ndarray, window: np.ndarray) -> np.ndarray:
    """One int64 per (rank, window): rank in the high 32 bits, window in the low 32 bits."""
    return (rank.astype(np.int64) << 32) | (window.astype(np.int64) & 0xFFFFFFFF)


@dataclass(frozen=True)
class HostTree:
    host_row: np.ndarray     # int64 per node: its row in traceset.host
    is_probe: np.ndarray     # bool: a runtime call, placed as a point at its start
    file: np.ndarray         # int64 file_key(rank, window)
    thread: np.ndarray       # int64 dense code of (rank, window, pid, tid)
    start_ns: np.ndarray
    end_ns: np.ndarray       # clipped to the parent's end; == start_ns for probes
    clipped_ns: np.ndarray   # int64: how much of the range's end was cut off to make it nest
    parent: np.ndarray       # int64 node index of the innermost enclosing range, -1 at top level
    depth: np.ndarray        # int64, 1 at top level
    levels: list[np.ndarray]  # levels[d - 1]: node indices at depth d

    def __len__(self) -> int:
        return len(self.host_row)

    def inherit(self, own: np.ndarray, missing: int = -1) -> np.ndarray:
        """value[node] = own[node] where it is not `missing`, else value[parent] (top-down by level)."""
        value = own.copy()
        for nodes in self.levels[1:]:
            unset = nodes[value[nodes] == missing]
            value[unset] = value[self.parent[unset]]
        return value

    def paths(self, trie, contributes: np.ndarray, name_code: np.ndarray) -> np.ndarray:
        """Per node: the trie code of the path of contributing ancestors-or-self (0 when none)."""
        code = np.zeros(len(self), dtype=np.int64)
        for nodes in self.levels:
            parent = self.parent[nodes]
            inherited = np.where(parent >= 0, code[np.maximum(parent, 0)], 0)
            own = contributes[nodes]
            code[nodes] = inherited
            code[nodes[own]] = trie.extend(inherited[own], name_code[nodes[own]])
        return code


def build_host_tree(host: pa.Table, ranges: tuple[str, ...] = RANGE_CATEGORIES) -> HostTree:
    """The containment tree of all host ranges (of the categories `ranges`) and runtime probes of every
    thread of every file."""
    category = host.column(S.CATEGORY)
    is_range = category_mask(category, ranges)
    is_probe_row = runtime_mask(category)
    rows = np.flatnonzero(is_range | is_probe_row)
    col = lambda name: np.asarray(host.column(name).to_numpy(), dtype=np.int64)[rows]  # noqa: E731
    is_probe = is_probe_row[rows]
    start = col(S.START_NS)
    end = np.where(is_probe, start, np.maximum(col(S.END_NS), start))
    file = file_key(col(S.RANK), col(S.WINDOW))
    thread = dense_codes(file, col(S.PID), col(S.TID))
    original_end = end.copy()

    for _ in range(_MAX_CLIP_PASSES):
        parent, depth = _nest(thread, start, end)
        parent_end = end[np.maximum(parent, 0)]
        outlives = (parent >= 0) & (end > parent_end)
        # a node whose parent was found wrongly (because of an earlier overlap) starts after that
        # parent's end: leave it for the next pass; the first overlap on each thread is always fixable
        fixable = outlives & (start < parent_end)
        if not fixable.any():
            break
        # a child that lives mostly past its parent's end (a record_function range entered inside a
        # short python frame) is lifted out: the parent ends where it starts. A child that only overhangs
        # a little (an op outliving its frame by a few ns) is clipped to the parent's end.
        lift = fixable & (end - parent_end > parent_end - start)
        lifted_parent = np.zeros(len(rows), dtype=bool)
        lifted_parent[parent[lift]] = True
        np.minimum.at(end, parent[lift], start[lift])
        clip = fixable & ~lift & ~lifted_parent[np.maximum(parent, 0)]
        end[clip] = parent_end[clip]
    levels = _levels(depth)
    for nodes in levels[1:]:               # keeps every node inside its parent even if passes ran out
        end[nodes] = np.maximum(start[nodes], np.minimum(end[nodes], end[parent[nodes]]))
    return HostTree(rows.astype(np.int64), is_probe, file, thread, start, end, original_end - end,
                    parent, depth, levels)


def dense_codes(*keys: np.ndarray) -> np.ndarray:
    """Dense int64 code per row for the tuple of keys (first key most significant)."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys[::-1])
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for key in keys:
        sorted_key = key[order]
        new[1:] |= sorted_key[1:] != sorted_key[:-1]
    code = np.empty(n, dtype=np.int64)
    code[order] = np.cumsum(new) - 1
    return code


def _nest(thread, start, end):
    """Parent and depth of every node, assuming proper nesting (checked by the caller)."""
    n = len(thread)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    node = np.arange(n, dtype=np.int64)
    zero = end == start
    # start points: (time, phase 1, longer first, node, 0); end points of ranges: (end, phase 0, ...);
    # a zero-length node's end follows its own start at once, so it can enclose nothing
    ev_thread = np.concatenate([thread, thread])
    ev_time = np.concatenate([start, np.where(zero, start, end)])
    ev_phase = np.concatenate([np.ones(n, np.int8), zero.astype(np.int8)])
    ev_negdur = np.concatenate([start - end, np.zeros(n, np.int64)])
    ev_node = np.concatenate([node, node])
    ev_is_end = np.concatenate([np.zeros(n, np.int8), np.ones(n, np.int8)])
    order = np.lexsort((ev_is_end, ev_node, ev_negdur, ev_phase, ev_time, ev_thread))
    running = np.cumsum(np.where(ev_is_end[order] == 1, -1, 1))
    position = np.empty(2 * n, dtype=np.int64)
    position[order] = np.arange(2 * n)
    start_pos = position[:n]
    depth = running[start_pos]
    # parent: the last start before mine whose depth is mine - 1; one searchsorted on (depth, position)
    width = 2 * n + 1
    key = depth * width + start_pos
    by_key = np.argsort(key, kind="stable")
    sorted_key = key[by_key]
    j = np.searchsorted(sorted_key, (depth - 1) * width + start_pos) - 1
    found = (j >= 0) & (sorted_key[np.maximum(j, 0)] // width == depth - 1)
    parent = np.where(found, by_key[np.maximum(j, 0)], -1)
    return parent, depth


def _levels(depth: np.ndarray) -> list[np.ndarray]:
    if len(depth) == 0:
        return []
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(1, depth.max() + 2))
    return [order[bounds[d]:bounds[d + 1]] for d in range(len(bounds) - 1)]
