"""attribute(): exact device self time per op, op stack, nn.Module, annotation or step.

Every device activity's self time (the sweep: integers that sum to busy per device) goes to exactly one
key of the chosen level through its links (attribution/links.py), or to an explicit `<unattributed>` row,
so every table sums to busy time per (rank, device) exactly. Op stacks, modules and annotations are
paths: their tables also carry inclusive and exclusive self time, the depth and the parent path, and
`tree=True` lists every path node (internal ones too) in depth-first order for render_tree.

Traces without device activities (CPU training, gloo) attribute host self time instead: each cpu op's
duration minus its child cpu ops on the same thread (exact int64); `df.attrs["time_kind"]` says which.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.attribution.links import CHECKS, LINKED, Links, link
from traceattr.attribution.paths import PathTrie
from traceattr.attribution.sweep import sweep
from traceattr.errors import TraceInputError
from traceattr.model.traceset import TraceSet

LEVELS = ("op", "op_stack", "module", "annotation", "step")
TREE_LEVELS = ("op_stack", "module", "annotation")
UNATTRIBUTED = "<unattributed>"
LOW_LINKED_SHARE = 0.95      # below this the header says plainly that the tables rest on missing links

KEY = "key"
NAME = "name"
DEPTH = "depth"
PARENT = "parent"
INCLUSIVE_SELF_NS = "inclusive_self_ns"
EXCLUSIVE_SELF_NS = "exclusive_self_ns"
INFERRED_SELF_NS = "inferred_self_ns"   # module level: self time placed by the backward Sequence number
TIME_KIND_DEVICE = "device"
TIME_KIND_HOST = "host"

_SUMS = [S.SELF_NS, S.DURATION_NS, S.SOLO_NS, INFERRED_SELF_NS]


def attribute(traceset: TraceSet, by: str = "op", tree: bool = False) -> pd.DataFrame:
    """One row per (rank, device, key) of level `by`; self_ns sums to busy per (rank, device).

    Columns: rank, device, key, self_ns, duration_ns, solo_ns, count, self_pct (of the (rank, device)
    total); for op_stack/module/annotation also name, depth, parent, exclusive_self_ns, inclusive_self_ns;
    for module also inferred_self_ns. attrs: level, time_kind ("device" or "host"), totals
    {(rank, device): ns}, linked_share {rank: share}, notes [str].
    """
    if by not in LEVELS:
        raise TraceInputError(f"cannot attribute by {by!r}: choose one of {', '.join(LEVELS)}")
    if tree and by not in TREE_LEVELS:
        raise TraceInputError(f"a tree needs a path level ({', '.join(TREE_LEVELS)}), not {by!r}")
    links = link(traceset)
    if traceset.device.num_rows:
        units, totals, kind = _device_units(traceset, links, by), _device_totals(traceset), TIME_KIND_DEVICE
    else:
        units, totals, kind = _host_units(traceset, links, by), _host_totals(traceset, links), TIME_KIND_HOST
    table = _aggregate(units)
    trie = _trie(links, by)
    if by in TREE_LEVELS:
        table = _with_tree(table, trie, all_nodes=tree)
    table[KEY] = _keys(table["code"].to_numpy(), by, links, trie)
    total = pd.Series(totals, dtype="int64")
    denominator = np.array([totals.get((r, d), 0) for r, d in zip(table[S.RANK], table[S.DEVICE])], dtype=float)
    table[S.SELF_PCT] = np.where(denominator > 0, 100.0 * table[S.SELF_NS] / np.maximum(denominator, 1), 0.0)
    table = _order(table, tree)
    columns = [S.RANK, S.DEVICE, KEY, S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.COUNT, S.SELF_PCT]
    if by in TREE_LEVELS:
        columns += [NAME, DEPTH, PARENT, EXCLUSIVE_SELF_NS, INCLUSIVE_SELF_NS]
    if by == "module":
        columns.append(INFERRED_SELF_NS)
    table = table[columns].reset_index(drop=True)
    share = linked_share(traceset)
    table.attrs.update(level=by, time_kind=kind, totals={k: int(v) for k, v in total.items()},
                       linked_share=share, notes=_notes(traceset, links, by, kind, share))
    return table


def linked_share(traceset: TraceSet) -> dict[int, float]:
    """Per rank: the share of device busy time whose activity links to a launching cpu op
    (nan for a rank without device time)."""
    ranks = set(traceset.ranks)
    if not traceset.device.num_rows:
        return {r: math.nan for r in sorted(ranks)}
    links, self_ns = link(traceset), sweep(traceset).self_ns
    rank = np.asarray(traceset.device.column(S.RANK).to_numpy(), dtype=np.int64)
    frame = pd.DataFrame({S.RANK: rank, "all": self_ns, "linked": np.where(links.status == LINKED, self_ns, 0)})
    sums = frame.groupby(S.RANK).sum()
    share = {int(r): (float(row["linked"] / row["all"]) if row["all"] > 0 else math.nan)
             for r, row in sums.iterrows()}
    return {r: share.get(r, math.nan) for r in sorted(ranks | set(share))}


def link_report(traceset: TraceSet) -> pd.DataFrame:
    """Per (rank, window): every link check with a count, ns, and what it measures."""
    report = link(traceset).report.copy()
    report["meaning"] = report["check"].map(CHECKS)
    return report


# --- units: the rows whose time is attributed ---------------------------------------------------

def _device_units(traceset: TraceSet, links: Links, by: str) -> pd.DataFrame:
    result = sweep(traceset)
    device = traceset.device
    codes = {
        "op": links.op_name(links.op_row),
        "op_stack": links.op_stack, "module": links.module, "annotation": links.annotation,
        "step": links.step,
    }[by]
    return pd.DataFrame({
        S.RANK: np.asarray(device.column(S.RANK).to_numpy(), dtype=np.int64),
        S.DEVICE: np.asarray(device.column(S.DEVICE).to_numpy(), dtype=np.int64),
        "code": _missing_as_minus_one(codes, by),
        S.SELF_NS: result.self_ns, S.DURATION_NS: result.duration_ns, S.SOLO_NS: result.solo_ns,
        INFERRED_SELF_NS: np.where(links.module_inferred, result.self_ns, 0),
    })


def _host_ops(traceset: TraceSet, links: Links) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cpu op nodes, their host self time (clipped duration minus their child ops' durations) and
    their enclosing op node (-1 for an outermost op)."""
    tree = links.tree
    nodes = np.arange(len(tree))
    ops = nodes[links.node_op == nodes]
    length = tree.end_ns - tree.start_ns
    enclosing = np.where(tree.parent >= 0, links.node_op[np.maximum(tree.parent, 0)], -1)
    children = ops[enclosing[ops] >= 0]
    self_ns = length.copy()
    np.subtract.at(self_ns, enclosing[children], length[children])
    return ops, self_ns[ops], enclosing[ops]


def _host_units(traceset: TraceSet, links: Links, by: str) -> pd.DataFrame:
    ops, self_ns, _ = _host_ops(traceset, links)
    rows = links.tree.host_row[ops]
    host = traceset.host
    start = np.asarray(host.column(S.START_NS).to_numpy(), dtype=np.int64)[rows]
    end = np.asarray(host.column(S.END_NS).to_numpy(), dtype=np.int64)[rows]
    codes = {
        "op": links.host_name_code[rows], "op_stack": links.node_op_stack[ops],
        "module": links.node_module[ops], "annotation": links.node_annotation[ops],
        "step": links.node_step[ops],
    }[by]
    return pd.DataFrame({
        S.RANK: np.asarray(host.column(S.RANK).to_numpy(), dtype=np.int64)[rows],
        S.DEVICE: np.full(len(ops), S.NO_INT, dtype=np.int64),
        "code": _missing_as_minus_one(codes, by),
        S.SELF_NS: self_ns, S.DURATION_NS: np.maximum(end - start, 0),
        S.SOLO_NS: np.full(len(ops), S.NO_INT, dtype=np.int64),
        INFERRED_SELF_NS: np.where(links.node_module_inferred[ops], self_ns, 0),
    })


def _missing_as_minus_one(codes: np.ndarray, by: str) -> np.ndarray:
    codes = np.asarray(codes, dtype=np.int64)
    return np.where(codes == 0, -1, codes) if by in TREE_LEVELS else codes   # trie code 0 = no path


def _device_totals(traceset: TraceSet) -> dict[tuple[int, int], int]:
    groups = sweep(traceset).groups
    busy = groups.groupby([S.RANK, S.DEVICE])[S.BUSY_NS].sum()
    return {(int(r), int(d)): int(v) for (r, d), v in busy.items()}


def _host_totals(traceset: TraceSet, links: Links) -> dict[tuple[int, int], int]:
    """Per rank: Σ durations of the outermost cpu ops of every thread (what host self time sums to)."""
    ops, _, enclosing = _host_ops(traceset, links)
    outer = ops[enclosing < 0]
    rank = np.asarray(traceset.host.column(S.RANK).to_numpy(), dtype=np.int64)[links.tree.host_row[outer]]
    length = (links.tree.end_ns - links.tree.start_ns)[outer]
    sums = pd.Series(length).groupby(rank).sum()
    return {(int(r), S.NO_INT): int(v) for r, v in sums.items()}


# --- aggregation and keys --------------------------------------------------------------------------

def _aggregate(units: pd.DataFrame) -> pd.DataFrame:
    keys = [S.RANK, S.DEVICE, "code"]
    grouped = units.groupby(keys, sort=True)
    table = grouped[_SUMS].sum()
    table[S.COUNT] = grouped.size()
    return table.reset_index().astype({c: "int64" for c in [*keys, *_SUMS, S.COUNT]})


def _trie(links: Links, by: str) -> PathTrie | None:
    return {"op_stack": links.op_stacks, "module": links.modules, "annotation": links.annotations}.get(by)


def _keys(codes: np.ndarray, by: str, links: Links, trie: PathTrie | None) -> list[str]:
    unique = np.unique(codes).tolist()
    if by == "op":
        text = {c: links.host_names[c] for c in unique if c >= 0}
    elif by == "step":
        text = {c: links.step_names[c] for c in unique if c >= 0}
    else:
        text = {c: trie.string(c) for c in unique if c > 0}
    text[-1] = UNATTRIBUTED
    return [text[c] for c in codes.tolist()]


def _with_tree(table: pd.DataFrame, trie: PathTrie, all_nodes: bool) -> pd.DataFrame:
    """Add inclusive self time (own + descendants), depth, parent path and name per path code;
    with all_nodes, add the internal path nodes that have no time of their own."""
    parent_of, depth_of = trie.parent, trie.depth
    group = [S.RANK, S.DEVICE]
    attributed = table[table["code"] > 0]
    climbing = attributed[[*group, "code", S.SELF_NS]]
    pieces = [climbing]
    while len(climbing):
        climbing = climbing.assign(code=parent_of[climbing["code"].to_numpy()])
        climbing = climbing[climbing["code"] > 0]
        pieces.append(climbing)
    inclusive = pd.concat(pieces).groupby([*group, "code"])[S.SELF_NS].sum().rename(INCLUSIVE_SELF_NS)
    how = "outer" if all_nodes else "left"
    table = table.merge(inclusive.reset_index(), on=[*group, "code"], how=how)
    fill = {c: 0 for c in [*_SUMS, S.COUNT]}
    table = table.fillna(fill)
    unattributed = table["code"] < 0
    table[INCLUSIVE_SELF_NS] = np.where(unattributed, table[S.SELF_NS], table[INCLUSIVE_SELF_NS].fillna(0))
    table = table.astype({c: "int64" for c in [*_SUMS, S.COUNT, INCLUSIVE_SELF_NS]})
    table[EXCLUSIVE_SELF_NS] = table[S.SELF_NS]
    code = table["code"].to_numpy()
    safe = np.maximum(code, 0)
    table[DEPTH] = np.where(code > 0, depth_of[safe] - 1, 0)
    table["parent_code"] = np.where(code > 0, parent_of[safe], 0)
    table[PARENT] = [trie.string(int(p)) for p in table["parent_code"]]
    table[NAME] = [trie.name(int(c)) if c > 0 else UNATTRIBUTED for c in code.tolist()]
    return table


def _order(table: pd.DataFrame, tree: bool) -> pd.DataFrame:
    if not tree:
        return table.sort_values([S.RANK, S.DEVICE, S.SELF_NS, KEY], ascending=[True, True, False, True])
    # depth-first, children by inclusive time; one Python step per path node (never per event)
    order = []
    for _, group in table.groupby([S.RANK, S.DEVICE], sort=True):
        children: dict[int, list] = {}
        for idx, code, parent, inclusive in zip(group.index, group["code"], group["parent_code"],
                                                group[INCLUSIVE_SELF_NS]):
            if code > 0:
                children.setdefault(int(parent), []).append((-int(inclusive), idx, int(code)))
        stack = sorted(children.get(0, []), reverse=True)
        while stack:
            _, idx, code = stack.pop()
            order.append(idx)
            stack.extend(sorted(children.get(code, []), reverse=True))
        order.extend(group.index[group["code"] < 0])
    return table.loc[order]


def _notes(traceset: TraceSet, links: Links, by: str, kind: str, share: dict[int, float]) -> list[str]:
    notes = []
    if kind == TIME_KIND_HOST:
        notes.append("no device activities: host self time of cpu ops (exclusive of child ops) is shown")
    for rank, value in share.items():
        if not math.isnan(value) and value < LOW_LINKED_SHARE:
            notes.append(f"rank {rank}: only {100 * value:.1f}% of device time links to a launching op; "
                         f"the rest is <unattributed> (see --links)")
    if by == "module" and len(links.modules) == 1:
        notes.append("no nn.Module frames in the trace: capture with with_stack=True to attribute modules")
    if by == "step" and not links.step_names:
        notes.append("no ProfilerStep#N annotations in the trace: time cannot be split by step")
    return notes
