"""attribute(): exact device self time per op, op stack, nn.Module, nn.Module class, annotation or step.

Every device activity's self time (the sweep: integers that sum to busy per device) goes to exactly one
key of the chosen level through its links (attribution/links.py), or to an explicit `<unattributed>` row
(or `<carried in>`: launched before the window, attribution/carried.py), so every table sums to busy time per (rank, device) exactly. Op stacks, modules and annotations are
paths: their tables also carry inclusive and exclusive self time, the depth and the parent path, and
`tree=True` lists every path node (internal ones too) in depth-first order for render_tree. The
`module_class` level maps and merges as `module` does and groups the module paths by class at the end
(`Model_0/Qwen2DecoderLayer_13/Qwen2Attention_13` -> `Model/Qwen2DecoderLayer/Qwen2Attention`, with the
number of instances): a regrouping of the module table's exact rows, so it sums to busy time too.

Traces without device activities (CPU training, gloo) attribute host self time instead: each cpu op's
duration minus its child cpu ops on the same thread (exact int64); `df.attrs["time_kind"]` says which.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.fold import fold_below_top
from traceattr.attribution.carried import carried_in
from traceattr.analysis.launch import UNIT_COLUMNS as LAUNCH_UNITS, launch_units
from traceattr.analysis.shape_keys import device_shape_codes, device_texts, shape_codes
from traceattr.attribution.hosttree import dense_codes
from traceattr.attribution.links import (CHECKS, MODULE_SEPARATOR, OP_SEPARATOR, Links, link,
                                         profiler_steps, step_order)
from traceattr.attribution.paths import PathTrie
from traceattr.attribution.sweep import sweep
from traceattr.errors import TraceInputError
from traceattr.model.traceset import TraceSet

LEVELS = ("op", "op_stack", "module", "module_class", "annotation", "step", "shape", "launch")
KEYED_LEVELS = ("shape", "launch")     # levels whose keys are computed in their own module, with own units
TREE_LEVELS = ("op_stack", "module", "annotation")
PATH_LEVELS = TREE_LEVELS + ("module_class",)      # levels whose keys are paths of a PathTrie
_PATHS_OF = {"module_class": "module"}             # a level computed from another level's paths
UNATTRIBUTED = "<unattributed>"
CARRIED_IN = "<carried in>"      # launched before the profiling window: no op can hold them
CARRIED_CODE = -2                # its code in a part's sums (-1: <unattributed>, >= 0 a key)
LOW_LINKED_SHARE = 0.95      # below this the header says plainly that the tables rest on missing links

KEY = "key"
NAME = "name"
DEPTH = "depth"
PARENT = "parent"
INCLUSIVE_SELF_NS = "inclusive_self_ns"
EXCLUSIVE_SELF_NS = "exclusive_self_ns"
INFERRED_SELF_NS = "inferred_self_ns"   # module level: self time placed by the backward Sequence number
INSTANCES = "instances"                 # module_class level: module instances of the class (summed over ranks)
CALLS = "calls"                         # shape level: op calls whose activities the row holds
TIME_KIND_DEVICE = "device"
TIME_KIND_HOST = "host"
_WHAT = {"op": "a launching op", "op_stack": "a launching op", "module": "an nn.Module", "module_class": "an nn.Module",
         "annotation": "a record_function annotation", "step": "a ProfilerStep",
         "shape": "a launching op", "launch": "a launching op"}   # what a key is, per level



@dataclass
class AttributionPart:
    """One level's time summed per (rank, device, code) and what the codes mean: the map step of attribute()
    (attribution_part, of one file or a whole TraceSet) and, merged (merge_parts), the input of its table.
    The table is the same whether the merged part came from one TraceSet or from each of its files."""
    by: str
    kind: str                           # TIME_KIND_DEVICE or TIME_KIND_HOST
    sums: dict[str, np.ndarray]         # rank, device, code, self/duration/solo/inferred_self_ns, count
    labels: list[str]                   # op: code -> name; step: code -> step name, in step order
    paths: object                       # path levels: _PathRows (map step) or a PathTrie (merged)
    totals: dict[tuple[int, int], int]  # (rank, device) -> what its rows sum to (busy, or host op time)
    ranks: tuple[int, ...]
    has_modules: bool                   # any nn.Module frame in the input
    has_steps: bool                     # any ProfilerStep#N annotation
    # by step: (rank, window key, step name) of every ProfilerStep#N, so a name repeated over windows of a
    # rank is told (the window key: the window, or in analysis/summary_plan.py the file's index)
    step_windows: frozenset = frozenset()
    # by shape: the deviceProperties entries (JSON texts, roofline.device_texts) of the devices with rows
    devices: frozenset = frozenset()


def check_level(by: str, tree: bool = False) -> None:
    if by not in LEVELS:
        raise TraceInputError(f"cannot attribute by {by!r}: choose one of {', '.join(LEVELS)}")
    if tree and by not in TREE_LEVELS:
        raise TraceInputError(f"a tree needs a path level ({', '.join(TREE_LEVELS)}), not {by!r}")


def attribution_part(traceset: TraceSet, by: str) -> AttributionPart:
    """The map step: per (rank, device, code) sums of `traceset` (one file, or a whole set)."""
    links = link(traceset)
    level = _PATHS_OF.get(by, by)
    keyed_labels: list[str] = []
    if traceset.device.num_rows:
        units, totals, kind = _device_units(traceset, links, level), _device_totals(traceset), TIME_KIND_DEVICE
    else:
        units, totals, kind = _host_units(traceset, links, level), _host_totals(traceset, links), TIME_KIND_HOST
    if by in KEYED_LEVELS:
        units["code"], keyed_labels, extra = units.pop("keyed")
        units.update(extra)
    units[S.COUNT] = np.ones(len(units["code"]), dtype=np.int64)
    sums = _direct_sums(units)
    code, labels, paths = sums["code"], [], None
    if by in PATH_LEVELS:
        paths = _PathRows.of(_trie(links, level), code)
    elif by == "step":                          # step codes already follow the step order
        labels = list(links.step_names)
    elif by in KEYED_LEVELS:                    # their codes are dense already
        labels = keyed_labels
    else:
        used = np.unique(code[code >= 0])
        labels = [links.host_names[c] for c in used.tolist()]
        sums["code"] = np.where(code >= 0, np.searchsorted(used, np.maximum(code, 0)), code)
    return AttributionPart(by, kind, sums, labels, paths, totals, tuple(traceset.ranks),
                           len(links.modules) > 1, bool(links.step_names),
                           _step_windows(traceset) if by == "step" and links.step_names else frozenset(),
                           device_texts(traceset) if by == "shape" else frozenset())


def _step_windows(traceset: TraceSet) -> frozenset:
    keys = [S.RANK, S.WINDOW, S.NAME]
    steps = traceset.host.filter(profiler_steps(traceset.host)).select(keys).group_by(keys).aggregate([])
    return frozenset(zip(*(steps.column(name).to_pylist() for name in (S.RANK, S.WINDOW, S.NAME))))


def merge_parts(parts: list[AttributionPart]) -> AttributionPart:
    """The reduce step: one part whose codes index merged labels or one merged PathTrie (paths matched by
    their names, steps ordered by step number). Exact: int64 sums added again per (rank, device, code).
    Ranks of different parts must already be final (analysis/summary_plan.py relabels them first)."""
    by = parts[0].by
    kind = TIME_KIND_DEVICE if any(p.kind == TIME_KIND_DEVICE for p in parts) else TIME_KIND_HOST
    used = [p for p in parts if p.kind == kind]      # device time: files without device rows add nothing
    trie, labels = None, []
    if by in PATH_LEVELS:      # a merged part's PathTrie merges again (parts merge in any grouping)
        paths = [p.paths if isinstance(p.paths, _PathRows) else _PathRows.of(p.paths, p.sums["code"]) for p in used]
        trie, codes = _merge_paths(paths, [p.sums["code"] for p in used],
                                   MODULE_SEPARATOR if _PATHS_OF.get(by, by) == "module" else OP_SEPARATOR)
    else:
        labels = sorted({name for p in used for name in p.labels}, key=step_order if by == "step" else None)
        index = {name: i for i, name in enumerate(labels)}
        codes = [np.array([index[name] for name in p.labels] + [CARRIED_CODE, -1], dtype=np.int64)[p.sums["code"]]
                 for p in used]                      # codes -2 and -1 pick the trailing -2 and -1
    sums = {name: np.concatenate([p.sums[name] for p in used] + [np.zeros(0, np.int64)])
            for name in _SUMMED_UNITS + (_optional(used[0].sums) if used else ())}
    sums["code"] = np.concatenate(codes + [np.zeros(0, np.int64)])
    totals: dict[tuple[int, int], int] = {}
    for p in used:
        for key, value in p.totals.items():
            totals[key] = totals.get(key, 0) + value
    return AttributionPart(by, kind, _direct_sums(sums), labels, trie, dict(sorted(totals.items())),
                           tuple(sorted({r for p in parts for r in p.ranks})),
                           any(p.has_modules for p in parts), any(p.has_steps for p in parts),
                           frozenset().union(*(p.step_windows for p in parts)),
                           frozenset().union(*(p.devices for p in parts)))


def attribution_table(part: AttributionPart, tree: bool = False, top: int | None = None) -> pd.DataFrame:
    """attribute()'s table from a merged part (merge_parts)."""
    by, kind, trie, totals = part.by, part.kind, part.paths, part.totals
    check_level(by, tree)
    if by in _PATHS_OF:
        return _by_class(attribution_table(replace(part, by=_PATHS_OF[by])), by, top)
    columns = _aggregate(part.sums, trie, all_nodes=tree)
    codes = columns.pop("code")
    table = pd.DataFrame({S.RANK: columns[S.RANK], S.DEVICE: columns[S.DEVICE],
                          KEY: _keys(codes, part.labels, trie)})
    for name in (S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.COUNT):
        table[name] = columns[name]
    for name in _OPTIONAL_UNITS:
        if name in columns:
            table[name] = columns[name]
    if kind == TIME_KIND_HOST:
        table[S.SOLO_NS] = S.NO_INT          # "ran alone on its device" has no host meaning
    denominator = np.array([totals.get(k, 0) for k in zip(columns[S.RANK].tolist(),
                                                             columns[S.DEVICE].tolist())], dtype=float)
    table[S.SELF_PCT] = np.where(denominator > 0, 100.0 * columns[S.SELF_NS] / np.maximum(denominator, 1), 0.0)
    if trie is not None:
        safe = np.maximum(codes, 0)
        table[NAME] = [trie.name(c) if c > 0 else CARRIED_IN if c == CARRIED_CODE else UNATTRIBUTED
                       for c in codes.tolist()]
        table[DEPTH] = np.where(codes > 0, trie.depth[safe] - 1, 0)
        parent = np.where(codes > 0, trie.parent[safe], 0)
        table[PARENT] = trie.strings(parent)
        table[EXCLUSIVE_SELF_NS] = columns[S.SELF_NS]
        table[INCLUSIVE_SELF_NS] = columns[INCLUSIVE_SELF_NS]
        if by == "module":
            table[INFERRED_SELF_NS] = columns[INFERRED_SELF_NS]
        order = _depth_first(columns, codes, parent, table[NAME].tolist()) if tree else _by_self(table)
    elif by == "step":
        order = np.lexsort((np.where(codes < 0, np.iinfo(np.int64).max, codes), columns[S.DEVICE], columns[S.RANK]))
    else:
        order = _by_self(table)
    table = table.iloc[order].reset_index(drop=True)
    if top is not None and not tree:
        summed = [c for c in (S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.COUNT, S.SELF_PCT, EXCLUSIVE_SELF_NS,
                              INFERRED_SELF_NS) if c in table.columns]
        table = fold_below_top(table, top, KEY, summed + [c for c in _OPTIONAL_UNITS if c in table.columns])
    share = _share_with_key(part.sums, totals)      # the trust figure of this level, from the rows shown
    table.attrs.update(level=by, time_kind=kind, totals=totals, linked_share=share,
                       notes=_notes(part, kind, share))
    if by == "shape":
        table.attrs["devices"] = sorted(part.devices)
    return table


def _share_with_key(units: dict[str, np.ndarray], totals: dict[tuple[int, int], int]) -> dict[int, float]:
    """Per rank: the share of the attributed time that has a key at this level (not <unattributed>):
    the figure that matches the table's own <unattributed> row (nan for a rank without time)."""
    # carried-in time has no op to be linked to: the share is of the rest, as the table shows it
    frame = pd.DataFrame({S.RANK: units[S.RANK], "all": np.where(units["code"] != CARRIED_CODE, units[S.SELF_NS], 0),
                          "keyed": np.where(units["code"] >= 0, units[S.SELF_NS], 0)})
    sums = frame.groupby(S.RANK).sum()
    share = {int(r): (float(row["keyed"] / row["all"]) if row["all"] > 0 else math.nan)
             for r, row in sums.iterrows()}
    ranks = {rank for rank, _ in totals}
    return {r: share.get(r, math.nan) for r in sorted(ranks | set(share))}


def link_report_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """link_report as numpy columns (engine.columns.numpy_columns of it: texts as object arrays), without the
    frames between: the map step's, once per file."""
    columns = dict(link(traceset).report_columns)
    return columns | {"meaning": np.array([CHECKS[check] for check in columns["check"].tolist()], dtype=object)}


# --- units: the rows whose time is attributed ---------------------------------------------------

def _device_units(traceset: TraceSet, links: Links, by: str) -> dict[str, np.ndarray]:
    result = sweep(traceset)
    device = traceset.device
    keyed = {}
    if by == "shape":
        codes, labels, first = device_shape_codes(traceset, links)
        keyed = {"keyed": (codes, labels, {CALLS: first.astype(np.int64)})}
    elif by == "launch":
        keyed = {"keyed": launch_units(traceset, links, result.self_ns)}
    if keyed:
        codes = np.zeros(device.num_rows, dtype=np.int64)       # replaced by the level's own codes
    else:
        codes = {
            "op": links.op_code,
            "op_stack": links.op_stack, "module": links.module, "annotation": links.annotation,
            "step": links.step,
        }[by]
    return keyed | {
        S.RANK: np.asarray(device.column(S.RANK).to_numpy(), dtype=np.int64),
        S.DEVICE: np.asarray(device.column(S.DEVICE).to_numpy(), dtype=np.int64),
        "code": np.where(carried_in(traceset), CARRIED_CODE, _missing_as_minus_one(codes, by)),
        S.SELF_NS: result.self_ns, S.DURATION_NS: result.duration_ns, S.SOLO_NS: result.solo_ns,
        INFERRED_SELF_NS: np.where(links.module_inferred, result.self_ns, 0),
    }


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


def _host_units(traceset: TraceSet, links: Links, by: str) -> dict[str, np.ndarray]:
    ops, self_ns, _ = _host_ops(traceset, links)
    rows = links.tree.host_row[ops]
    host = traceset.host
    start = np.asarray(host.column(S.START_NS).to_numpy(), dtype=np.int64)[rows]
    end = np.asarray(host.column(S.END_NS).to_numpy(), dtype=np.int64)[rows]
    keyed = {}
    if by == "shape":
        shape_code, labels = shape_codes(traceset, rows)
        keyed = {"keyed": (shape_code, labels, {CALLS: np.ones(len(ops), dtype=np.int64)})}
    elif by == "launch":      # no device activity, nothing launched: the ops, as at the op level
        names = links.host_name_code[rows]
        used = np.unique(names)
        labels = [json.dumps([links.host_names[c], S.NO_INT, -1]) for c in used.tolist()]
        keyed = {"keyed": (np.searchsorted(used, names), labels, {c: np.zeros(len(ops), dtype=np.int64)
                                                                   for c in LAUNCH_UNITS})}
    if keyed:
        codes = np.zeros(len(ops), dtype=np.int64)
    else:
        codes = {
            "op": links.host_name_code[rows], "op_stack": links.node_op_stack[ops],
            "module": links.node_module[ops], "annotation": links.node_annotation[ops],
            "step": links.node_step[ops],
        }[by]
    return keyed | {
        S.RANK: np.asarray(host.column(S.RANK).to_numpy(), dtype=np.int64)[rows],
        S.DEVICE: np.full(len(ops), S.NO_INT, dtype=np.int64),
        "code": _missing_as_minus_one(codes, by),
        S.SELF_NS: self_ns, S.DURATION_NS: np.maximum(end - start, 0),
        S.SOLO_NS: np.zeros(len(ops), dtype=np.int64),
        INFERRED_SELF_NS: np.where(links.node_module_inferred[ops], self_ns, 0),
    }


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

def _aggregate(units: dict[str, np.ndarray], trie: PathTrie | None, all_nodes: bool) -> dict[str, np.ndarray]:
    """Sums per (rank, device, code), exact int64. For path levels also inclusive self time, climbing
    each path's time up to all its ancestors; `all_nodes` keeps the ancestors that have no own time."""
    rank, device, code = units[S.RANK], units[S.DEVICE], units["code"]
    owners, codes = [np.arange(len(code))], [code]      # unit row and the path code it counts for
    if trie is not None:
        current, owner = code, owners[0]
        while len(current):                             # one step per tree level, vectorized
            up = current > 0
            current, owner = trie.parent[current[up]], owner[up]
            up = current > 0
            current, owner = current[up], owner[up]
            owners.append(owner), codes.append(current)
    owners, all_code = np.concatenate(owners), np.concatenate(codes)
    all_rank, all_device = rank[owners], device[owners]
    direct = np.zeros(len(owners), dtype=bool)
    direct[:len(code)] = True
    group = dense_codes(all_rank, all_device, all_code)
    n = int(group.max(initial=-1)) + 1
    first = np.zeros(n, dtype=np.int64)
    first[group[::-1]] = np.arange(len(group))[::-1]      # any row of the group names it
    out = {S.RANK: all_rank[first], S.DEVICE: all_device[first], "code": all_code[first]}
    for name in (S.SELF_NS, S.DURATION_NS, S.SOLO_NS, INFERRED_SELF_NS) + _optional(units):
        out[name] = _sum(group[direct], units[name], n)
    out[S.COUNT] = _sum(group[direct], units[S.COUNT], n)
    out[INCLUSIVE_SELF_NS] = _sum(group, units[S.SELF_NS][owners], n)
    if not all_nodes:
        keep = out[S.COUNT] > 0
        out = {k: v[keep] for k, v in out.items()}
    return out


def _sum(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, group, values.astype(np.int64))
    return total


def _trie(links: Links, by: str) -> PathTrie | None:
    return {"op_stack": links.op_stacks, "module": links.modules, "annotation": links.annotations}.get(by)


_SUMMED_UNITS = (S.RANK, S.DEVICE, S.SELF_NS, S.DURATION_NS, S.SOLO_NS, INFERRED_SELF_NS, S.COUNT)
_OPTIONAL_UNITS = (CALLS,) + LAUNCH_UNITS      # summed too by the levels that have them


def _optional(units: dict) -> tuple[str, ...]:
    return tuple(name for name in _OPTIONAL_UNITS if name in units)


def _direct_sums(units: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Units summed per (rank, device, code): exact int64."""
    rank, device, code = units[S.RANK], units[S.DEVICE], units["code"]
    group = dense_codes(rank, device, code)
    n = int(group.max(initial=-1)) + 1
    first = np.zeros(n, dtype=np.int64)
    first[group[::-1]] = np.arange(len(group))[::-1]      # any row of the group names it
    out = {S.RANK: rank[first], S.DEVICE: device[first], "code": code[first]}
    for name in (S.SELF_NS, S.DURATION_NS, S.SOLO_NS, INFERRED_SELF_NS, S.COUNT) + _optional(units):
        out[name] = _sum(group, units[name], n)
    return out


@dataclass(frozen=True)
class _PathRows:
    """Some paths of a trie as (code, parent code, name), parents before children: what a part ships
    instead of its whole trie (which names every host name of its file)."""
    separator: str
    rows: tuple[tuple[int, int, str], ...]

    @classmethod
    def of(cls, trie: PathTrie, codes: np.ndarray) -> "_PathRows":
        """The paths `codes` name and their ancestors."""
        parents = trie.parent
        needed, frontier = set(), {int(c) for c in np.unique(codes).tolist() if c > 0}
        while frontier:
            needed |= frontier
            frontier = {int(parents[c]) for c in frontier if parents[c] > 0} - needed
        return cls(trie.separator, tuple((c, int(parents[c]), trie.name(c)) for c in sorted(needed)))


def _merge_paths(parts: list[_PathRows], code_arrays: list[np.ndarray],
                 separator: str) -> tuple[PathTrie, list[np.ndarray]]:
    """One trie holding the paths of all parts (matched by their names, level by level) and each array of
    codes translated into it (codes <= 0 unchanged)."""
    names = sorted({name for part in parts for _, _, name in part.rows})
    index = {name: i for i, name in enumerate(names)}
    merged = PathTrie(names, separator)
    translated = []
    for part, codes in zip(parts, code_arrays):
        local, depth = {0: 0}, {0: 0}
        for code, parent, _ in part.rows:        # parents come first: a trie appends a path after its parent
            depth[code] = depth[parent] + 1
        for level in range(1, max(depth.values()) + 1):
            at = [row for row in part.rows if depth[row[0]] == level]
            got = merged.extend(np.array([local[p] for _, p, _ in at], dtype=np.int64),
                                np.array([index[n] for _, _, n in at], dtype=np.int64))
            local.update(zip([c for c, _, _ in at], got.tolist()))
        lookup = np.zeros(max(local) + 1, dtype=np.int64)
        lookup[list(local)] = list(local.values())
        codes = np.asarray(codes, dtype=np.int64)
        translated.append(np.where(codes > 0, lookup[np.clip(codes, 0, len(lookup) - 1)], codes))
    return merged, translated


def _keys(codes: np.ndarray, labels: list[str], trie: PathTrie | None) -> list[str]:
    unique = np.unique(codes).tolist()
    if trie is None:
        text = {c: labels[c] for c in unique if c >= 0}
    else:
        text = {c: trie.string(c) for c in unique if c > 0}
    text[-1] = UNATTRIBUTED
    text[CARRIED_CODE] = CARRIED_IN
    return [text[c] for c in codes.tolist()]


def _by_self(table: pd.DataFrame) -> np.ndarray:
    return np.lexsort((table[KEY].to_numpy(dtype=object), -table[S.SELF_NS].to_numpy(),
                       table[S.DEVICE].to_numpy(), table[S.RANK].to_numpy()))


def _depth_first(columns: dict[str, np.ndarray], codes: np.ndarray, parent: np.ndarray,
                 names: list[str]) -> list[int]:
    """Row order: per (rank, device), paths depth-first with children by inclusive time, then by name
    (not by code: codes differ between a TraceSet and merged files), then <unattributed>. One Python
    step per path node (never per event)."""
    order: list[int] = []
    rank, device, inclusive = columns[S.RANK], columns[S.DEVICE], columns[INCLUSIVE_SELF_NS]
    by_group = np.lexsort((codes, device, rank))
    groups: dict[tuple[int, int], list[int]] = {}
    for row in by_group.tolist():
        groups.setdefault((int(rank[row]), int(device[row])), []).append(row)
    for _, rows in sorted(groups.items()):
        children: dict[int, list[tuple[int, int, int]]] = {}
        for row in rows:
            if codes[row] > 0:
                children.setdefault(int(parent[row]), []).append(
                    (-int(inclusive[row]), names[row], row, int(codes[row])))
        stack = sorted(children.get(0, []), reverse=True)
        while stack:
            _, _, row, code = stack.pop()
            order.append(row)
            stack.extend(sorted(children.get(code, []), reverse=True))
        order.extend(row for row in rows if codes[row] < 0)
    return order


_INSTANCE = re.compile(r"_\d+$")      # torch names module instances `Class_N` (with_modules)


def class_path(path: str) -> str:
    """A module path with each module's instance number dropped: `Model_0/Qwen2DecoderLayer_13/Linear_2` ->
    `Model/Qwen2DecoderLayer/Linear` (<unattributed> stays)."""
    if path == UNATTRIBUTED:
        return path
    return MODULE_SEPARATOR.join(_INSTANCE.sub("", name) for name in path.split(MODULE_SEPARATOR))


def _by_class(table: pd.DataFrame, by: str, top: int | None) -> pd.DataFrame:
    """The module table's rows grouped by class path per (rank, device): sums of its exact columns, the
    number of instances, self % against the same totals."""
    attrs = dict(table.attrs)
    paths = table[KEY].astype(str)
    classes = {path: class_path(path) for path in paths.unique().tolist()}     # per distinct path
    summed = [c for c in (S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.COUNT, INFERRED_SELF_NS) if c in table.columns]
    frame = table[[S.RANK, S.DEVICE] + summed].assign(**{KEY: paths.map(classes),
                                                          INSTANCES: (paths != UNATTRIBUTED).astype("int64")})
    grouped = frame.groupby([S.RANK, S.DEVICE, KEY], as_index=False, sort=False)[summed + [INSTANCES]].sum()
    if attrs.get("time_kind") == TIME_KIND_HOST:
        grouped[S.SOLO_NS] = S.NO_INT          # "not applicable", as the module table has it
    totals = attrs.get("totals", {})
    denominator = np.array([totals.get(k, 0) for k in zip(grouped[S.RANK].tolist(), grouped[S.DEVICE].tolist())],
                           dtype=float)
    grouped[S.SELF_PCT] = np.where(denominator > 0, 100.0 * grouped[S.SELF_NS] / np.maximum(denominator, 1), 0.0)
    columns = [S.RANK, S.DEVICE, KEY, INSTANCES, S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.COUNT, S.SELF_PCT,
               INFERRED_SELF_NS]
    grouped = grouped[[c for c in columns if c in grouped.columns]].astype({INSTANCES: "int64"})
    grouped = grouped.iloc[_by_self(grouped)].reset_index(drop=True)
    if top is not None:
        grouped = fold_below_top(grouped, top, KEY, [c for c in summed + [S.SELF_PCT, INSTANCES]
                                                     if c in grouped.columns])
    grouped.attrs.update(attrs, level=by)
    return grouped


def _notes(part: AttributionPart, kind: str, share: dict[int, float]) -> list[str]:
    notes = []
    if kind == TIME_KIND_HOST:
        notes.append("no device activities: host self time of cpu ops (exclusive of child ops) is shown")
    for rank, value in share.items():
        if not math.isnan(value) and value < LOW_LINKED_SHARE:
            notes.append(f"rank {rank}: only {100 * value:.1f}% of {kind} time has {_WHAT[part.by]}; "
                         f"the rest is <unattributed> (see --links)")
    if part.by == "annotation" and any(v < LOW_LINKED_SHARE for v in share.values() if not math.isnan(v)):
        # found on real traces: 67% <unattributed> beside a `## backward ##` range of 115 µs
        notes.append("annotations hold what their own thread launched (as torch's gpu_user_annotation does): "
                     "backward kernels launched by autograd's thread are not under a `## backward ##` of the "
                     "training thread; --links counts them (annotation_other_thread)")
    if part.by in ("module", "module_class") and not part.has_modules:
        notes.append("no nn.Module frames in the trace: capture with with_stack=True to attribute modules")
    if part.by == "step" and not part.has_steps:
        notes.append("no ProfilerStep#N annotations in the trace: time cannot be split by step")
    repeated = _repeated_steps(part.step_windows)
    if repeated:
        listed = ", ".join(repeated[:3]) + (f" and {len(repeated) - 3} more" if len(repeated) > 3 else "")
        notes.append(f"{listed} appear in more than one profiling window of a rank (each torch.profiler object "
                     "numbers its steps from the same N): each such row sums those windows' steps; "
                     "`compare --by step` keeps them apart")
    return notes


def _repeated_steps(step_windows: frozenset) -> list[str]:
    """Step names that a rank holds in more than one window, in step order."""
    windows: dict[tuple[int, str], set] = {}
    for rank, window, name in step_windows:
        windows.setdefault((rank, name), set()).add(window)
    return sorted({name for (_, name), found in windows.items() if len(found) > 1}, key=step_order)
