"""CUDA/HIP graph replays: each replayed kernel back to the capture launch that made its node (docs/inference.md).

In a replay trace every kernel of a graph shares the correlation of one `cudaGraphLaunch`/`hipGraphLaunch`,
which lies in no op. A capture trace (recorded while the graph was captured) holds, between
`*StreamBeginCapture` and `*StreamEndCapture`, one runtime launch per node under its op, op stack and
module, with `args.kernel` naming the kernel (HIP, and CUDA writers that record it); its kernels never ran.

capture_catalog() reads one capture file into a GraphCatalog (model/graphs.py); match_replays() matches the
kernels of each graph launch of a replay file to one captured graph:
* the kernels of one launch are ordered by `graph node id` where the writer recorded it (CUPTI numbers nodes
  in creation order, so the order is the capture's even when streams interleave), else by start time;
* the k-th kernel named N of the launch is the k-th launch of N in the captured graph ("name order"; a
  `graph node id` order is reported as "graph node id"); a capture whose launches carry no kernel names is
  matched by position ("position");
* the graph is the one matching most kernels; among several, the smallest captured batch size at least the
  replay's (from its annotation, `bs=N` / `execute_N_`), then, within one capture file (piecewise graphs of
  one batch size), the i-th identical launch of a step takes the i-th identical captured graph. Ties across
  capture files, or between batch sizes the replay does not tell apart, are ambiguous: a note, and those
  kernels fall back to their launch.
Work is per distinct launch signature (the kernel names of a launch), never per replayed launch: a serving
trace replays the same few graphs thousands of times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.attribution.hosttree import dense_codes
from traceattr.io.codes import dictionary_codes
from traceattr.io.shapes import SHAPE_COLUMNS
from traceattr.model.graphs import NO_CODE, CapturedGraph, GraphCatalog

GRAPH_LAUNCH = "GraphLaunch"               # cudaGraphLaunch, hipGraphLaunch, cudaGraphLaunch_v10000
BEGIN_CAPTURE, END_CAPTURE = "StreamBeginCapture", "StreamEndCapture"
MEMCPY_NODE, MEMSET_NODE = "<memcpy>", "<memset>"       # copy and set nodes, matched by kind
REPLAY_PREFIX = "<graph replay: "

NO_MATCH, BY_NODE_ID, BY_NAME, BY_POSITION = range(4)
RULE_NAMES = ("", "graph node id", "name order", "position")
MATCHED, NO_CAPTURE, NOT_IN_CAPTURE, AMBIGUOUS = range(4)

MAX_GRAPHS_PER_FILE = 4096           # vLLM captures ~70 pieces x ~70 batch sizes in all, ~70 a file
_LAUNCH_CALL = re.compile(r"LaunchKernel|LaunchCooperativeKernel|Memcpy|Memset", re.IGNORECASE)
# the batch size an annotation or file name tells (SGLang `bs=32`, vLLM `execute_32_...`, `capture_32_...`)
_BATCH = re.compile(r"(?:\bbs[=_:]?|batch_size[=_:]|\bexecute_|\bcapture_)(\d{1,7})", re.IGNORECASE)


def batch_size_in(text: str) -> int:
    """The last batch size `text` names, -1 when none."""
    found = _BATCH.findall(text)
    return int(found[-1]) if found else NO_CODE


def graph_launch_names(names: list[str]) -> np.ndarray:
    """Per host name code: a graph launch call."""
    return np.array([GRAPH_LAUNCH in name for name in names], dtype=bool)


def replay_label(name: str) -> str:
    return f"{REPLAY_PREFIX}{name}>"


# --- the capture side -------------------------------------------------------------------------------

def capture_catalog(traceset, links, path: str, batch_size: int = NO_CODE, call_of=None) -> GraphCatalog:
    """The graphs captured in one file (`links`: link(traceset)); an empty catalog when it holds no capture
    range with a launch whose kernel never ran. `batch_size`: execution_details.json's, else each range's
    annotation or the file name tells it. `call_of(links, op rows)`: the host row of the op call whose
    shapes each op row's kernels count for (the `shape` level's rule, analysis/shape_keys.py), -1 none;
    by default the op itself."""
    host, tree = traceset.host, links.tree
    names = links.host_names
    name_code = links.host_name_code
    row_node = np.full(host.num_rows, -1, np.int64)
    row_node[tree.host_row] = np.arange(len(tree))
    probes = tree.host_row[tree.is_probe]
    named = lambda text: np.array([text in n for n in names], bool)[name_code[probes]]  # noqa: E731  per name
    begins, ends = probes[named(BEGIN_CAPTURE)], probes[named(END_CAPTURE)]
    if not len(begins):
        return GraphCatalog()
    correlation = np.asarray(host.column(S.CORRELATION).to_numpy(), dtype=np.int64)
    ran = np.unique(np.asarray(traceset.device.column(S.CORRELATION).to_numpy(), dtype=np.int64))
    launched = host.column(S.LAUNCHED_KERNEL)
    launched_names, launched_code = _codes(launched)
    has_kernel = np.array([text != "" for text in launched_names], bool)
    is_launch = np.array([bool(_LAUNCH_CALL.search(n)) for n in names], bool)[name_code[probes]]
    is_launch |= has_kernel[launched_code[probes]] if len(has_kernel) else False
    launch_rows = probes[is_launch & ~np.isin(correlation[probes], ran[ran >= 0])]
    range_of = _capture_ranges(tree, row_node, begins, ends, launch_rows)
    strings: dict[str, int] = {}
    paths: dict[tuple[int, ...], int] = {}
    shapes: dict[tuple[int, int, int, int], int] = {}
    shape_texts = _ShapeTexts(host, names, name_code, strings, shapes, call_of or (lambda _, rows: rows), links)
    graphs = []
    for begin, closed, rows in range_of:
        if len(graphs) == MAX_GRAPHS_PER_FILE:
            break
        size = batch_size
        if size < 0:
            size = batch_size_in(links.annotations.string(int(links.node_annotation[row_node[begin]])))
        if size < 0:
            size = batch_size_in(path.rsplit("/", 1)[-1])
        graphs.append(_graph(path, len(graphs), size, closed, rows, row_node, links, strings, paths,
                             launched_names, launched_code, shape_texts))
    if not graphs:
        return GraphCatalog()
    # a file that also replays graphs (torch.compile profiled from capture to replay in one session) is a
    # replay too: its graphs join the catalog, the file stays a window
    replays = graph_launch_names(names)[name_code[probes]] & np.isin(correlation[probes], ran[ran >= 0])
    return GraphCatalog(strings=tuple(strings), paths=tuple(paths), shapes=tuple(shapes), graphs=tuple(graphs),
                        captures=() if replays.any() else (path,))


def _capture_ranges(tree, row_node, begins, ends, launch_rows) -> list[tuple[int, bool, np.ndarray]]:
    """(begin row, closed, launch rows in start order) per capture range with launches, in begin order: a
    range runs from its *StreamBeginCapture to the next *StreamEndCapture of its thread (the file's end when
    none). Sorts and searches, never a scan per range."""
    begins, ends = np.asarray(begins, np.int64), np.asarray(ends, np.int64)
    b_thread, b_start = tree.thread[row_node[begins]], tree.start_ns[row_node[begins]]
    order = np.lexsort((b_start, b_thread))
    begins, b_thread, b_start = begins[order], b_thread[order], b_start[order]
    e_thread, e_start = tree.thread[row_node[ends]], tree.start_ns[row_node[ends]]
    order = np.lexsort((-e_start, e_thread))
    e_thread, e_start = e_thread[order], e_start[order]
    # the first end at or after each begin: the last by descending time whose -time <= -begin
    end_at = _last_at_or_before(e_thread, -e_start, b_thread, -b_start)
    closed = end_at >= 0
    end_ns = np.where(closed, e_start[np.maximum(end_at, 0)] if len(e_start) else 0, np.iinfo(np.int64).max)
    l_thread, l_start = tree.thread[row_node[launch_rows]], tree.start_ns[row_node[launch_rows]]
    owner = _last_at_or_before(b_thread, b_start, l_thread, l_start)      # the last begin before each launch
    inside = owner >= 0
    inside[inside] = l_start[inside] < end_ns[owner[inside]]
    owner = np.where(inside, owner, -1)
    by_owner = np.lexsort((l_start, owner))
    owner_sorted = owner[by_owner]
    starts = np.flatnonzero(np.r_[True, owner_sorted[1:] != owner_sorted[:-1]]) if len(owner) else np.zeros(0, int)
    out = []
    for first, last in zip(starts.tolist(), np.r_[starts[1:], len(owner)].tolist()):   # one step per range
        index = int(owner_sorted[first])
        if index >= 0:
            out.append((int(begins[index]), bool(closed[index]), launch_rows[by_owner[first:last]]))
    out.sort(key=lambda item: tree.start_ns[row_node[item[0]]])
    return out


def _last_at_or_before(group, start, query_group, query_time) -> np.ndarray:
    """Per query: the index of the last item of its group (items sorted by (group, start)) whose start is
    <= the query time, -1 when none (one merge sort of items and queries)."""
    n = len(group)
    kind = np.r_[np.zeros(n, np.int8), np.ones(len(query_group), np.int8)]      # items first on ties
    order = np.lexsort((kind, np.r_[start, query_time], np.r_[group, query_group]))
    item = np.where(order < n, order, -1)
    last = np.maximum.accumulate(item) if len(item) else item
    found = np.empty(len(query_group), np.int64)
    is_query = order >= n
    found[order[is_query] - n] = last[is_query]
    ok = found >= 0
    ok[ok] = group[found[ok]] == query_group[ok]
    return np.where(ok, found, -1)


class _ShapeTexts:
    """Per capture launch: the code (in the catalog's shapes) of its op call's (name, Input Dims, Input type,
    Concrete Inputs) and the call's ordinal within its graph; texts are coded per distinct call, not per
    launch."""

    def __init__(self, host, names, name_code, strings, shapes, call_of, links) -> None:
        self.columns = [dictionary_codes(host.column(c)) if c in host.column_names else None for c in SHAPE_COLUMNS]
        self.names, self.name_code = names, name_code
        self.strings, self.shapes, self.call_of, self.links = strings, shapes, call_of, links

    def of(self, op_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        call_rows = np.asarray(self.call_of(self.links, np.asarray(op_rows, np.int64)), np.int64)
        shape = np.full(len(call_rows), NO_CODE, np.int64)
        call = np.full(len(call_rows), NO_CODE, np.int64)
        has = call_rows >= 0
        if not has.any():
            return shape, call
        distinct, back = np.unique(call_rows[has], return_inverse=True)
        call[has] = back.reshape(-1)
        codes = []
        for row in distinct.tolist():
            texts = [self.names[self.name_code[row]]]
            for found in self.columns:
                texts.append("" if found is None else str(found[0][int(found[1][row])].as_py() or ""))
            key = tuple(self.strings.setdefault(t, len(self.strings)) for t in texts)
            codes.append(self.shapes.setdefault(key, len(self.shapes)))
        shape[has] = np.asarray(codes, np.int64)[back.reshape(-1)]
        return shape, call


def _graph(path, index, size, closed, rows, row_node, links, strings, paths, launched_names, launched_code,
           shape_texts) -> CapturedGraph:
    names, name_code = links.host_names, links.host_name_code
    nodes = row_node[rows]

    def code(text: str) -> int:
        return strings.setdefault(text, len(strings))

    def path_of(trie, trie_code: int) -> int:
        if trie_code <= 0:
            return NO_CODE
        chain = []
        while trie_code > 0:
            chain.append(code(trie.name(trie_code)))
            trie_code = int(trie.parent[trie_code])
        return paths.setdefault(tuple(reversed(chain)), len(paths))

    kernel = []
    for row in rows.tolist():
        launched = launched_names[launched_code[row]]
        call = names[name_code[row]]
        kernel.append(code(launched) if launched else code(MEMCPY_NODE) if "Memcpy" in call
                      else code(MEMSET_NODE) if "Memset" in call else NO_CODE)
    op_node = links.node_op[nodes]
    op = [code(names[name_code[links.tree.host_row[n]]]) if n >= 0 else NO_CODE for n in op_node.tolist()]
    op_stack = [path_of(links.op_stacks, c) for c in links.node_op_stack[nodes].tolist()]
    module = [path_of(links.modules, c) for c in links.node_module[nodes].tolist()]
    node_id = np.full(len(rows), NO_CODE, np.int64)     # no writer records a node id on capture launches yet
    op_rows = np.where(op_node >= 0, links.tree.host_row[np.maximum(op_node, 0)], NO_CODE)
    shape, call = shape_texts.of(op_rows)
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    return CapturedGraph(path, index, int(size), closed, as_array(kernel), node_id, as_array(op),
                         as_array(op_stack), as_array(module), shape, call)


def _codes(column) -> tuple[list[str], np.ndarray]:
    """(distinct texts, code per row) of a text column, plain or dictionary-coded."""
    dictionary, codes = dictionary_codes(column)
    return dictionary.to_pylist(), codes


def merged_catalog(catalogs: list[GraphCatalog], notes: list[str]) -> GraphCatalog:
    """One catalog of several files' (codes moved into one string table)."""
    strings: dict[str, int] = {}
    paths: dict[tuple[int, ...], int] = {}
    shapes: dict[tuple[int, ...], int] = {}
    graphs = []
    for catalog in catalogs:
        string_map = np.array([strings.setdefault(s, len(strings)) for s in catalog.strings] + [NO_CODE], np.int64)
        path_map = np.array([paths.setdefault(tuple(string_map[list(p)].tolist()), len(paths))
                             for p in catalog.paths] + [NO_CODE], np.int64)
        shape_map = np.array([shapes.setdefault(tuple(string_map[list(k)].tolist()), len(shapes))
                              for k in catalog.shapes] + [NO_CODE], np.int64)
        for g in catalog.graphs:
            graphs.append(CapturedGraph(g.path, g.index, g.batch_size, g.closed, string_map[g.kernel], g.node_id,
                                        string_map[g.op], path_map[g.op_stack], path_map[g.module],
                                        shape_map[g.shape], g.call))
    captures = tuple(p for c in catalogs for p in c.captures)
    return GraphCatalog(strings=tuple(strings), paths=tuple(paths), shapes=tuple(shapes), graphs=tuple(graphs),
                        captures=captures, notes=tuple(notes))


# --- the replay side --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayMatch:
    graph_kernel: np.ndarray     # bool per device row: launched by a graph launch
    launch: np.ndarray           # int64 per device row: index into the catalog's launches (all graphs in order), -1
    rule: np.ndarray             # int8 per device row: NO_MATCH, BY_NODE_ID, BY_NAME, BY_POSITION
    outcome: np.ndarray          # int8 per device row: MATCHED, NO_CAPTURE, NOT_IN_CAPTURE, AMBIGUOUS (graph kernels)
    graphs_used: frozenset       # (capture path, range index) of the graphs some kernel matched
    notes: tuple[str, ...]


def match_replays(device: pa.Table, dev_probe: np.ndarray, graph_probe: np.ndarray, probe_group: np.ndarray,
                  probe_hint: np.ndarray, start_ns: np.ndarray, catalog: GraphCatalog | None) -> ReplayMatch:
    """Per device row of one replay file, the catalog launch that made its node. `dev_probe`: the runtime
    node that launched each row (-1); `graph_probe` (per node): a graph launch; `probe_group` (per node): the
    step/annotation a launch lies in (ordinals of identical launches count within it); `probe_hint` (per
    node): the batch size its annotation tells (-1); `start_ns` (per node)."""
    n = device.num_rows
    graph_kernel = (dev_probe >= 0) & graph_probe[np.maximum(dev_probe, 0)] if n and len(graph_probe) \
        else np.zeros(n, bool)
    launch = np.full(n, NO_CODE, np.int64)
    rule = np.zeros(n, np.int8)
    outcome = np.zeros(n, np.int8)
    rows = np.flatnonzero(graph_kernel)
    if not len(rows):
        return ReplayMatch(graph_kernel, launch, rule, outcome, frozenset(), ())
    if not catalog:
        outcome[rows] = NO_CAPTURE
        launches = len(np.unique(dev_probe[rows]))
        return ReplayMatch(graph_kernel, launch, rule, outcome, frozenset(), (
            f"{len(rows)} kernels of {launches} graph launches have no capture trace: each is attributed to its "
            f"launch as {replay_label('OP')} (give the capture with --graph-capture; docs/inference.md)",))

    codes = _replay_codes(device, catalog)[rows]
    node_id = np.asarray(device.column(S.GRAPH_NODE_ID).to_numpy(), np.int64)[rows]
    dev_start = np.asarray(device.column(S.START_NS).to_numpy(), np.int64)[rows]
    probe = dev_probe[rows]
    order = np.lexsort((dev_start, node_id, probe))
    rows, codes, node_id, probe = rows[order], codes[order], node_id[order], probe[order]
    first = np.r_[True, probe[1:] != probe[:-1]]
    segment = np.cumsum(first) - 1
    seg_start = np.flatnonzero(first)
    pos = np.arange(len(rows)) - seg_start[segment]
    seg_len = np.diff(np.r_[seg_start, len(rows)])
    seg_probe = probe[seg_start]
    by_node = np.logical_and.reduceat(node_id >= 0, seg_start)
    signature = _signatures(codes, pos, seg_start, seg_len, by_node)
    group = probe_group[seg_probe]
    hint = probe_hint[seg_probe]
    ordinal = _ordinals(dense_codes(group, signature), start_ns[seg_probe])

    offsets = np.cumsum([0] + [len(g) for g in catalog.graphs])
    matcher = _Matcher(catalog.graphs)
    notes: dict[str, int] = {}
    used = set()
    firsts = dict(zip(*[v.tolist() for v in np.unique(signature, return_index=True)]))
    for seg in range(len(seg_start)):            # one step per launch: its kernels are set as a slice
        s, at = int(signature[seg]), slice(seg_start[seg], seg_start[seg] + seg_len[seg])
        first = firsts[s]
        sequence = codes[seg_start[first]:seg_start[first] + seg_len[first]]
        candidates, problem, why = matcher.decide(s, sequence, int(hint[seg]))
        if not candidates:
            outcome[rows[at]] = problem
            notes[why] = notes.get(why, 0) + int(seg_len[seg])
            continue
        chosen = candidates[int(ordinal[seg]) % len(candidates)]
        _, positions, matched_by = matcher.match(s, sequence, chosen)
        found = positions >= 0
        graph = catalog.graphs[chosen]
        used.add((graph.path, graph.index))
        launch[rows[at][found]] = offsets[chosen] + positions[found]
        rule[rows[at][found]] = BY_NODE_ID if by_node[seg] else matched_by
        outcome[rows[at][found]] = MATCHED
        outcome[rows[at][~found]] = NOT_IN_CAPTURE
        if (~found).any():
            key = (f"the replay has kernels that {graph.path} (graph {graph.index}, {len(graph)} launches"
                   f"{'' if graph.closed else ', capture not closed: the file ends inside it'}) does not hold")
            notes[key] = notes.get(key, 0) + int((~found).sum())
    text = tuple(f"{count} replayed kernels: {what}; attributed to their graph launch as "
                 f"{replay_label('OP')}" for what, count in notes.items())
    return ReplayMatch(graph_kernel, launch, rule, outcome, frozenset(used), text)


def _replay_codes(device: pa.Table, catalog: GraphCatalog) -> np.ndarray:
    """Per device row: the catalog string code of its name (copies and sets by kind), -2 when absent."""
    index = {s: i for i, s in enumerate(catalog.strings)}
    names, code = _codes(device.column(S.NAME))
    by_name = np.array([index.get(s, -2) for s in names] + [-2], np.int64)[code] if len(code) else code
    category = np.asarray(device.column(S.CATEGORY).to_numpy(zero_copy_only=False))
    for kind, text in ((S.MEMCPY, MEMCPY_NODE), (S.MEMSET, MEMSET_NODE)):
        by_name = np.where(category == kind, index.get(text, -2), by_name)
    return by_name


def _signatures(codes, pos, seg_start, seg_len, by_node) -> np.ndarray:
    """A dense code per launch for its sequence of kernel names (two 64-bit weighted sums: a collision of
    both for different sequences is beyond any trace's count of launches)."""
    rng = np.random.default_rng(38)
    width = int(pos.max()) + 1
    sums = []
    for _ in range(2):
        weight = rng.integers(1, 2**63, size=width, dtype=np.uint64)
        with np.errstate(over="ignore"):
            sums.append(np.add.reduceat((codes + 3).astype(np.uint64) * weight[pos], seg_start))
    return dense_codes(seg_len.astype(np.int64), by_node.astype(np.int64), sums[0].view(np.int64),
                       sums[1].view(np.int64))


def _ordinals(key: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per item: how many items of the same key started before it."""
    order = np.lexsort((start, key))
    first = np.r_[True, key[order][1:] != key[order][:-1]]
    begin = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    out = np.empty(len(order), np.int64)
    out[order] = np.arange(len(order)) - begin
    return out


def _match(sequence: np.ndarray, graph: CapturedGraph) -> tuple[int, np.ndarray, int]:
    """(kernels matched, capture position per replayed kernel (-1), rule) of one launch against one graph."""
    captured = graph.kernel
    if len(captured) and (captured < 0).any():            # launches without kernel names: by position
        positions = np.where(np.arange(len(sequence)) < len(captured), np.arange(len(sequence)), -1)
        return int((positions >= 0).sum()), positions, BY_POSITION
    where: dict[tuple[int, int], int] = {}
    seen: dict[int, int] = {}
    for j, c in enumerate(captured.tolist()):
        k = seen.get(c, 0)
        seen[c] = k + 1
        where[(c, k)] = j
    seen = {}
    positions = np.empty(len(sequence), np.int64)
    for i, c in enumerate(sequence.tolist()):
        k = seen.get(c, 0)
        seen[c] = k + 1
        positions[i] = where.get((c, k), -1)
    return int((positions >= 0).sum()), positions, BY_NAME


class _Matcher:
    """Which captured graphs a launch's kernels match, per distinct (signature, batch size told): the graphs
    of the smallest captured batch size at least the replay's (all graphs when it tells none), and among them
    those matching most kernels (only those with equal names when some have: a vLLM catalog holds thousands of
    graphs, pieces x batch sizes). Several from different files or batch sizes are ambiguous."""

    def __init__(self, graphs: tuple[CapturedGraph, ...]) -> None:
        self.graphs = graphs
        self.sizes = np.array([g.batch_size for g in graphs], np.int64)
        self.exact: dict[tuple, list[int]] = {}
        for i, graph in enumerate(graphs):
            if not (graph.kernel < 0).any():
                self.exact.setdefault(tuple(graph.kernel.tolist()), []).append(i)
        self._matches: dict[tuple[int, int], tuple] = {}
        self._decisions: dict[tuple[int, int], tuple] = {}

    def match(self, signature: int, sequence: np.ndarray, graph: int) -> tuple[int, np.ndarray, int]:
        key = (signature, graph)
        if key not in self._matches:
            self._matches[key] = _match(sequence, self.graphs[graph])
        return self._matches[key]

    def decide(self, signature: int, sequence: np.ndarray, hint: int) -> tuple[list[int], int, str]:
        """(candidate graphs, MATCHED, ""), or ([], the outcome, why)."""
        key = (signature, hint)
        if key not in self._decisions:
            self._decisions[key] = self._decide(signature, sequence, hint)
        return self._decisions[key]

    def _decide(self, signature, sequence, hint) -> tuple[list[int], int, str]:
        sizes = self.sizes
        pool = np.arange(len(self.graphs))
        told = hint >= 0 and bool((sizes >= hint).any())
        if told:
            pool = np.flatnonzero(sizes == sizes[sizes >= hint].min())
        in_pool = set(pool.tolist())
        same = [i for i in self.exact.get(tuple(sequence.tolist()), ()) if i in in_pool]
        scored = same or pool.tolist()
        scores = [self.match(signature, sequence, i)[0] for i in scored]
        best = max(scores, default=0)
        if best <= 0:
            where = f" of batch size {int(sizes[pool[0]])} (the replay's {hint}, rounded up)" if told else ""
            return [], NO_CAPTURE, f"no captured graph{where} holds their kernels"
        candidates = [i for i, score in zip(scored, scores) if score == best]
        files = sorted({self.graphs[i].path for i in candidates})
        batch_sizes = sorted({int(sizes[i]) for i in candidates})
        if len(files) > 1 or len(batch_sizes) > 1:
            return [], AMBIGUOUS, (
                f"{len(candidates)} captured graphs match them equally ({', '.join(files)}; batch sizes "
                f"{', '.join(map(str, batch_sizes))}; the replay tells "
                f"{'no batch size' if hint < 0 else f'batch size {hint}'})")
        return candidates, MATCHED, ""
