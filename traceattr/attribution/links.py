"""Links: each device activity -> its runtime launch -> the innermost cpu op -> ops, modules, annotations, step.

kineto-format.md section 4. Every array is aligned with the rows of `traceset.device`:

* runtime: same (rank, window) and `correlation` (CUDA and ROCm; one graph launch may own many kernels;
  when several runtime records share a correlation the earliest wins and the duplicates are counted);
* op: the innermost `cpu_op` enclosing the runtime call's start on the launching (pid, tid)
  (hosttree.py); its op stack, `nn.Module: ...` frames and `user_annotation` ranges are its ancestors;
* step: the innermost `ProfilerStep#N` user_annotation of the launching process (same rank, window and
  pid) whose interval contains the launch, on any of its threads (backward runs on autograd threads that
  carry no step range; another process's annotations never count);
* backward: a launch under `autograd::engine::evaluate_function: ...` takes the module of the forward
  cpu op with the same `Sequence number` (the latest such op, when exactly one thread ran it), marked
  inferred;
* graph replays: a kernel launched by a `cudaGraphLaunch`/`hipGraphLaunch` (which lies in no op) takes the
  op, op stack and module of the capture launch that made its graph node (attribution/graphs.py, with the
  TraceSet's graph_catalog), else `<graph replay: OP>` for the op around the launch; its annotation and step
  are the launch's.

`External id` is not used: its meaning changed twice across torch versions and correlation plus
containment give the same answer wherever both exist.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.attribution.hosttree import HostTree, dense_codes, build_host_tree, file_key
from traceattr.attribution import graphs as G
from traceattr.attribution.paths import PathTrie
from traceattr.attribution.sweep import sweep
from traceattr.io.codes import dictionary_codes
from traceattr.units import digits_int
from traceattr.model.traceset import TraceSet

# status per device row
LINKED = 0            # runtime call and enclosing cpu op found
NO_CORRELATION = 1    # the activity carries no correlation id
NO_RUNTIME = 2        # dangling: no runtime record with its correlation (CUPTI dropped it)
NO_OP = 3             # runtime call outside every cpu op of its thread
NO_OP_THREAD = 4      # runtime call on a thread that has no cpu op at all
GRAPH_CAPTURED = 5    # replayed by a graph launch, matched to the capture launch that made its node
GRAPH_LAUNCH = 6      # replayed by a graph launch, attributed to the launch (no capture, or none matched)
LINKED_STATUSES = (LINKED, GRAPH_CAPTURED, GRAPH_LAUNCH)     # check's `unlinked` row counts the others
STATUS_NAMES = ("linked", "no correlation", "no runtime record", "no enclosing op", "thread without ops",
                "graph capture launch", "graph launch")

PROFILER_STEP = "ProfilerStep#"
MODULE_PREFIX = "nn.Module: "
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
OP_SEPARATOR = " > "
MODULE_SEPARATOR = "/"

# link report checks: (name, what count and ns measure)
CHECKS = {
    "device_activities": "device activities; ns = busy time (Σ self)",
    "linked": "activities linked to a runtime call and a cpu op",
    "no_correlation": "activities without a correlation id",
    "dangling_correlation": "activities whose correlation has no runtime record",
    "no_enclosing_op": "activities launched outside every cpu op of the launching thread",
    "thread_without_ops": "activities launched from a thread that has no cpu ops",
    "duplicate_correlation": "extra runtime records sharing a correlation; ns = self time of their activities",
    "overlapping_ops": "host ranges that outlive their parent on one thread; ns = the part clipped off",
    "profiler_steps": "ProfilerStep#N annotations in the file (0: steps cannot be attributed)",
    "no_step": "activities whose launch lies in no ProfilerStep",
    # not counted under that annotation, as torch's gpu_user_annotation does not (attribute.py's note)
    "annotation_other_thread": "activities launched under no annotation of their thread, in one of another "
                               "thread's",
    "module_inferred": "activities given their forward module through the backward Sequence number",
    "backward_unmatched": "activities under a backward node whose forward op was not found or ambiguous",
    # CUDA/HIP graph replays (attribution/graphs.py, docs/inference.md)
    "graph_launches": "graph launch calls (cudaGraphLaunch, hipGraphLaunch) that replayed kernels",
    "graph_kernels": "activities replayed by a graph launch",
    "graph_by_node_id": "graph activities matched to their capture launch in graph node id order",
    "graph_by_name_order": "graph activities matched to their capture launch by kernel name order",
    "graph_by_position": "graph activities matched to their capture launch by position (the capture names no "
                         "kernels)",
    "graph_no_capture": "graph activities with no capture trace, or none holding them: attributed to the "
                        "launch as <graph replay: OP>",
    "graph_not_in_capture": "graph activities beyond what their matched capture holds: attributed to the launch",
    "graph_ambiguous": "graph activities whose launch several captures match equally: attributed to the launch",
}


@dataclass(frozen=True, eq=False)
class Links:
    runtime_row: np.ndarray      # int64 per device row: host row of the runtime call, -1
    op_row: np.ndarray           # int64 per device row: host row of the innermost cpu op, -1
    status: np.ndarray           # int8 per device row: LINKED, NO_CORRELATION, ...
    op_code: np.ndarray          # int64 per device row: code in host_names of its op (a capture's, or
    #                              `<graph replay: OP>` for graph kernels), -1
    step: np.ndarray             # int64 per device row: index into step_names, -1
    step_names: tuple[str, ...]  # ProfilerStep#N names, in step number order
    op_stack: np.ndarray         # int64 per device row: code in op_stacks (0: none)
    module: np.ndarray           # int64 per device row: code in modules (0: none)
    module_inferred: np.ndarray  # bool per device row: module taken from the forward op
    annotation: np.ndarray       # int64 per device row: code in annotations (0: none)
    op_stacks: PathTrie
    modules: PathTrie
    annotations: PathTrie
    host_names: list[str]        # name code -> name, for op_name (then capture names, then graph replay labels)
    host_name_code: np.ndarray   # int64 per host row
    tree: HostTree
    node_op: np.ndarray          # per tree node: innermost cpu op node (ancestor-or-self), -1
    node_op_stack: np.ndarray    # per tree node: op stack code
    node_module: np.ndarray      # per tree node: module code (backward nodes: the forward's)
    node_module_inferred: np.ndarray
    node_annotation: np.ndarray
    node_step: np.ndarray        # per tree node: step index by its start time, -1
    report_columns: dict         # rank, window, check, count, ns (CHECKS): `report` as numpy columns
    graphs_used: frozenset = frozenset()   # (capture path, range) of the captured graphs some kernel matched
    graph_notes: tuple[str, ...] = ()      # what the graph matching could not do (attribution/graphs.py)
    # int64 per device row: the capture launch (index over the TraceSet's graph_catalog launches, all graphs
    # in order) that made a replayed kernel's node, -1; None when the file replays no graph
    capture_launch: np.ndarray | None = None

    @functools.cached_property
    def report(self) -> pd.DataFrame:
        """The link report, one row per (rank, window, check); built when first asked (the map step of a
        small file reads the columns: a frame cost it 0.2 ms to build and 0.3 ms to take apart)."""
        columns = self.report_columns
        return pd.DataFrame({**columns, "check": pd.array(columns["check"], dtype="str")})

    def op_name(self, host_rows: np.ndarray) -> np.ndarray:
        """Name codes (into host_names) of host rows; -1 stays -1."""
        return pick(self.host_name_code, host_rows, host_rows >= 0, -1)


_CACHE: "weakref.WeakKeyDictionary[TraceSet, Links]" = weakref.WeakKeyDictionary()


def link(traceset: TraceSet) -> Links:
    """The links of every device activity of `traceset`, computed once per TraceSet."""
    result = _CACHE.get(traceset)
    if result is None:
        result = _compute(traceset)
        _CACHE[traceset] = result
    return result


def built_links(traceset: TraceSet) -> Links | None:
    """link(traceset) when it was computed already, else None (for a caller that wants the links only when
    they cost nothing: a plan that kept no cpu ops never builds them)."""
    return _CACHE.get(traceset)


def profiler_step_names(traceset: TraceSet) -> tuple[str, ...]:
    """link(traceset).step_names without linking (the map of `summarize --by rank` needs only the names):
    every user_annotation is a node of the host tree, so its steps are the distinct ProfilerStep#N
    annotations of the host table, in step order."""
    found = _CACHE.get(traceset)
    if found is not None:
        return found.step_names
    host = traceset.host
    return tuple(sorted(pc.unique(host.column(S.NAME).filter(profiler_steps(host))).to_pylist(), key=step_order))


def profiler_steps(host: pa.Table):
    """The host rows that are ProfilerStep#N annotations (a boolean arrow array)."""
    return pc.and_(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION),
                   pc.starts_with(host.column(S.NAME), PROFILER_STEP))


def pick(values: np.ndarray, index: np.ndarray, ok: np.ndarray, missing) -> np.ndarray:
    """values[index] where ok, else `missing` (safe when `values` is empty)."""
    out = np.full(len(index), missing, dtype=values.dtype)
    out[ok] = values[index[ok]]
    return out


def _int64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _starts_with(column, prefix: str) -> np.ndarray:
    return np.asarray(pc.starts_with(column, prefix).to_numpy(zero_copy_only=False), dtype=bool)


def _names(host: pa.Table) -> tuple[list[str], np.ndarray]:
    dictionary, codes = dictionary_codes(host.column(S.NAME))
    return dictionary.to_pylist(), codes


def _lookup(table_keys: np.ndarray, query_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position in `table_keys` of the first equal key per query, -1 when absent, and a sort order
    (table_keys must already be sorted)."""
    pos = np.searchsorted(table_keys, query_keys)
    hit = pos < len(table_keys)
    hit[hit] = table_keys[pos[hit]] == query_keys[hit]
    return np.where(hit, pos, -1), hit


def _compute(traceset: TraceSet) -> Links:
    host, device = traceset.host, traceset.device
    names, name_code = _names(host)
    tree = build_host_tree(host)
    row = tree.host_row
    category = host.column(S.CATEGORY)
    is_op = (pc.equal(category, S.CPU_OP).to_numpy(zero_copy_only=False))[row]
    is_annotation = (pc.equal(category, S.USER_ANNOTATION).to_numpy(zero_copy_only=False))[row]
    is_python = (pc.equal(category, S.PYTHON_FUNCTION).to_numpy(zero_copy_only=False))[row]
    is_step = is_annotation & _starts_with(host.column(S.NAME), PROFILER_STEP)[row]
    is_module = is_python & _starts_with(host.column(S.NAME), MODULE_PREFIX)[row]
    is_backward = is_op & _starts_with(host.column(S.NAME), BACKWARD_PREFIX)[row]
    node_name = name_code[row]

    nodes = np.arange(len(tree), dtype=np.int64)
    node_op = tree.inherit(np.where(is_op, nodes, -1))
    node_backward = tree.inherit(np.where(is_backward, nodes, -1))
    catalog = traceset.graph_catalog
    graph_probe = tree.is_probe & G.graph_launch_names(names)[node_name] if len(names) else tree.is_probe & False
    # capture names and `<graph replay: OP>` labels join the names before any path is built (a trie keys
    # its paths on the number of names)
    capture_offset = len(names)
    names = names + list(catalog.strings if catalog else ())
    node_label, labels = _replay_labels(tree, graph_probe, node_op, node_name, names)
    node_label = np.where(node_label >= 0, node_label + len(names), -1)
    names = names + labels
    op_stacks = PathTrie(names, OP_SEPARATOR)
    node_op_stack = tree.paths(op_stacks, is_op, node_name)
    module_names = [n[len(MODULE_PREFIX):] if n.startswith(MODULE_PREFIX) else n for n in names]
    modules = PathTrie(module_names, MODULE_SEPARATOR)
    node_module = tree.paths(modules, is_module, node_name)
    annotations = PathTrie(names, OP_SEPARATOR)
    node_annotation = tree.paths(annotations, is_annotation & ~is_step, node_name)
    node_module, node_inferred, node_unmatched = _backward_modules(
        tree, host, is_op, node_backward, node_module)
    step_names, step_of_name = _step_names(names, node_name[is_step])
    process = dense_codes(tree.file, _int64(host, S.PID)[row])
    node_step = _steps_by_time(tree, is_step, step_of_name[node_name], process, tree.start_ns)
    # annotations are per thread (kineto-format.md section 4, and torch's own gpu_user_annotation): a
    # backward kernel launched by autograd's thread is not under `## backward ##` of the training thread.
    # Counted for the link report, as the annotation table shows it as <unattributed>.
    unannotated_probes = np.flatnonzero(tree.is_probe & (node_annotation == 0))    # launches are all it needs
    node_other_annotation = _steps_by_time(tree, is_annotation & ~is_step, nodes, process, tree.start_ns,
                                           unannotated_probes) >= 0

    probes, duplicate, dev_probe, dev_duplicated = _probe_of_device(tree, host, device)
    linked = dev_probe >= 0
    take = lambda values, missing: pick(values, dev_probe, linked, missing)  # noqa: E731
    op_node = take(node_op, -1)
    status = _statuses(tree, is_op, device, dev_probe, op_node)

    op_row = pick(row, op_node, op_node >= 0, -1)
    op_code = pick(name_code, op_row, op_row >= 0, -1)
    op_stack, module = take(node_op_stack, 0), take(node_module, 0)
    match = _graph_match(device, dev_probe, graph_probe, node_step, node_annotation, annotations, tree, catalog)
    if match.graph_kernel.any():
        _graph_links(match, catalog, capture_offset, dev_probe, node_label, node_op_stack, op_stacks, modules,
                     status, op_row, op_code, op_stack, module)
    links = dict(
        runtime_row=take(row, -1), op_row=op_row, op_code=op_code,
        status=status, step=take(node_step, -1), step_names=step_names,
        op_stack=op_stack, module=module,
        module_inferred=take(node_inferred, False), annotation=take(node_annotation, 0),
        op_stacks=op_stacks, modules=modules, annotations=annotations,
        host_names=names, host_name_code=name_code, tree=tree, node_op=node_op,
        node_op_stack=node_op_stack, node_module=node_module, node_module_inferred=node_inferred,
        node_annotation=node_annotation, node_step=node_step)
    report = _report(traceset, links, duplicate, probes, dev_duplicated, take(node_unmatched, False),
                     take(node_other_annotation, False), is_step, is_op, match)
    notes = match.notes + _launch_notes(match, dev_probe, names, node_label, node_name)
    return Links(**links, report_columns=report, graphs_used=match.graphs_used, graph_notes=notes,
                 capture_launch=match.launch if match.graph_kernel.any() else None)


def _graph_match(device, dev_probe, graph_probe, node_step, node_annotation, annotations, tree, catalog):
    """attribution/graphs.match_replays with what it needs per node: the group a launch's ordinal counts in
    (its step and annotation) and the batch size its annotation tells (read once per annotation path)."""
    if not graph_probe.any():                  # most traces: no graph launch, nothing per node to compute
        return G.match_replays(device, dev_probe, graph_probe, graph_probe, graph_probe, tree.start_ns, catalog)
    probe_group = dense_codes(node_step, node_annotation)
    told = np.unique(node_annotation[graph_probe])
    hint_of_path = np.full(len(annotations), -1, np.int64)
    hint_of_path[told] = [G.batch_size_in(annotations.string(int(c))) for c in told.tolist()]
    return G.match_replays(device, dev_probe, graph_probe, probe_group, hint_of_path[node_annotation], tree.start_ns,
                           catalog)


def _replay_labels(tree: HostTree, graph_probe, node_op, node_name, names) -> tuple[np.ndarray, list[str]]:
    """Per node: a code into the returned labels for graph launch probes (-1 others): `<graph replay: OP>`,
    OP the innermost cpu op around the launch, else the innermost python frame or annotation, else the
    launch call itself."""
    probes = np.flatnonzero(graph_probe)
    label = np.full(len(tree), -1, np.int64)
    if not len(probes):
        return label, []
    parent = tree.parent[probes]
    around = np.where(node_op[probes] >= 0, node_op[probes], parent)
    text_code = np.where(around >= 0, node_name[np.maximum(around, 0)], node_name[probes])
    unique, inverse = np.unique(text_code, return_inverse=True)
    label[probes] = inverse.reshape(-1)
    return label, [G.replay_label(names[c]) for c in unique.tolist()]


def _graph_links(match, catalog, offset, dev_probe, node_label, node_op_stack, op_stacks, modules, status,
                 op_row, op_code, op_stack, module) -> None:
    """Graph kernels take their capture launch's op, op stack and module (the module of the replay's launch
    when the capture has none), or, unmatched, `<graph replay: OP>` under the launch's op stack."""
    kernels = match.graph_kernel
    matched = match.launch >= 0
    op_row[kernels] = -1
    status[kernels & matched] = GRAPH_CAPTURED
    status[kernels & ~matched] = GRAPH_LAUNCH
    fallback = kernels & ~matched
    label = node_label[dev_probe[fallback]]
    op_code[fallback] = label
    op_stack[fallback] = op_stacks.extend(node_op_stack[dev_probe[fallback]], label)
    if not matched.any():
        return
    launches = np.flatnonzero(matched)
    graph_op = np.concatenate([g.op for g in catalog.graphs])[match.launch[launches]]
    graph_stack = np.concatenate([g.op_stack for g in catalog.graphs])[match.launch[launches]]
    graph_module = np.concatenate([g.module for g in catalog.graphs])[match.launch[launches]]
    no_op = graph_op < 0                # a capture launch outside every op keeps the replay's label
    op_code[launches] = np.where(no_op, node_label[dev_probe[launches]], graph_op + offset)
    stack_codes = _catalog_paths(op_stacks, catalog, offset)
    op_stack[launches] = np.where(graph_stack >= 0, stack_codes[graph_stack], 0)
    op_stack[launches[no_op]] = op_stacks.extend(node_op_stack[dev_probe[launches[no_op]]],
                                                 node_label[dev_probe[launches[no_op]]])
    module_codes = _catalog_paths(modules, catalog, offset)
    module[launches] = np.where(graph_module >= 0, module_codes[graph_module], module[launches])


def _catalog_paths(trie: PathTrie, catalog, offset: int) -> np.ndarray:
    """The trie code of each catalog path (index -1 reads the trailing 0: no path)."""
    codes = []
    for path in catalog.paths:            # a few hundred paths of a capture, a step per name
        code = np.zeros(1, np.int64)
        for name in path:
            code = trie.extend(code, np.array([name + offset], np.int64))
        codes.append(int(code[0]))
    return np.array(codes + [0], np.int64)


def _launch_notes(match, dev_probe, names, node_label, node_name) -> tuple[str, ...]:
    """`--links` names the graph launches: per launch call and label, how many launches replayed kernels."""
    if not match.graph_kernel.any():
        return ()
    probes = np.unique(dev_probe[match.graph_kernel])
    keys, counts = np.unique(np.stack([node_name[probes], node_label[probes]]), axis=1, return_counts=True)
    shown = [f"{count} x {names[call]} under {names[label][len(G.REPLAY_PREFIX):-1]}"
             for call, label, count in zip(keys[0].tolist(), keys[1].tolist(), counts.tolist())]
    return (f"graph launches that replayed kernels: {'; '.join(shown[:5])}"
            + (f" and {len(shown) - 5} more" if len(shown) > 5 else ""),)


def _probe_of_device(tree: HostTree, host: pa.Table, device: pa.Table):
    """Each device row's runtime probe node, by (rank, window, correlation): (probe nodes in key order,
    which of them repeat an earlier one's key, the probe per device row (-1), whether its key repeats)."""
    row = tree.host_row
    probes = np.flatnonzero(tree.is_probe)
    probe_corr = _int64(host, S.CORRELATION)[row[probes]]
    dev_file = file_key(_int64(device, S.RANK), _int64(device, S.WINDOW))
    dev_corr = _int64(device, S.CORRELATION)
    probes = probes[probe_corr >= 0]
    probe_corr = probe_corr[probe_corr >= 0]
    pair = dense_codes(np.concatenate([tree.file[probes], dev_file]), np.concatenate([probe_corr, dev_corr]))
    probe_key, dev_key = pair[:len(probes)], pair[len(probes):]
    order = np.lexsort((tree.start_ns[probes], probe_key))    # earliest runtime record first
    probe_key, probes = probe_key[order], probes[order]
    duplicate = np.zeros(len(probe_key), dtype=bool)
    duplicate[1:] = probe_key[1:] == probe_key[:-1]
    pos, hit = _lookup(probe_key, dev_key)
    hit &= dev_corr >= 0
    dev_probe = pick(probes, pos, hit, -1)
    dev_duplicated = np.zeros(len(dev_corr), dtype=bool)
    if len(probe_key):
        next_pos = np.minimum(np.maximum(pos, 0) + 1, len(probe_key) - 1)
        dev_duplicated = hit & (next_pos != pos) & (probe_key[next_pos] == dev_key)
    return probes, duplicate, dev_probe, dev_duplicated


def _statuses(tree: HostTree, is_op: np.ndarray, device: pa.Table, dev_probe: np.ndarray,
              op_node: np.ndarray) -> np.ndarray:
    """LINKED, NO_CORRELATION, ... per device row, from its probe (-1: none) and that probe's op (-1)."""
    dev_corr = _int64(device, S.CORRELATION)
    linked = dev_probe >= 0
    thread_has_op = np.zeros(int(tree.thread.max(initial=-1)) + 1, dtype=bool)
    thread_has_op[tree.thread[is_op]] = True
    status = np.full(len(dev_corr), LINKED, dtype=np.int8)
    status[dev_corr < 0] = NO_CORRELATION
    status[(dev_corr >= 0) & ~linked] = NO_RUNTIME
    no_op = linked & (op_node < 0)
    on_op_thread = pick(thread_has_op, pick(tree.thread, dev_probe, linked, 0), linked, False)
    status[no_op & on_op_thread] = NO_OP
    status[no_op & ~on_op_thread] = NO_OP_THREAD
    return status


def launch_status(traceset: TraceSet) -> np.ndarray:
    """The link statuses of the device rows (LINKED, NO_CORRELATION, ...) as the check's `unlinked` row
    counts them, in every command alike: from the host tree of cpu ops, annotations and runtime calls,
    python frames left out. They are the bulk of a trace (42k of 47k host rows of a with_stack model
    trace) and their nesting made the tree 100x slower to build, while no launch is a python frame's own:
    so a kernel-level summary, which never reads cpu ops otherwise, can afford its header's check line
    (the map keeps the rows this needs, engine/units.py). link()'s status is the same wherever python
    frames nest with the ops they call; a frame that ends inside an op it called clips that op in link()
    (kineto-format.md section 4), which may leave a launch there without its op in `--links` alone."""
    host = traceset.host
    tree = build_host_tree(host, ranges=(S.CPU_OP, S.USER_ANNOTATION))    # rows chosen, never a copy of the table
    is_op = np.asarray(pc.equal(host.column(S.CATEGORY), S.CPU_OP).to_numpy(zero_copy_only=False), bool)[tree.host_row]
    nodes = np.arange(len(tree), dtype=np.int64)
    node_op = tree.inherit(np.where(is_op, nodes, -1))
    _, _, dev_probe, _ = _probe_of_device(tree, host, traceset.device)
    status = _statuses(tree, is_op, traceset.device, dev_probe, pick(node_op, dev_probe, dev_probe >= 0, -1))
    # kernels replayed by a graph launch are the launch's (link() matches them), never unlinked
    launched = np.flatnonzero(dev_probe >= 0)
    names = host.column(S.NAME).take(pa.array(tree.host_row[dev_probe[launched]]))
    graph = np.asarray(pc.match_substring(names, G.GRAPH_LAUNCH).to_numpy(zero_copy_only=False), bool)
    status[launched[graph]] = GRAPH_LAUNCH
    return status


def _step_names(names: list[str], step_name_codes: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """Step names in step number order, and a map name code -> step index (-1 for other names)."""
    present = np.unique(step_name_codes).tolist()
    present.sort(key=lambda code: step_order(names[code]))
    step_of_name = np.full(len(names), -1, dtype=np.int64)
    step_of_name[present] = np.arange(len(present))
    return tuple(names[c] for c in present), step_of_name


def step_order(name: str) -> tuple:
    """Sort key of ProfilerStep#N names: by N, then names without a number (a total order, so step names
    merged from many files sort the same as those of one TraceSet)."""
    tail = name[len(PROFILER_STEP):]
    number = digits_int(tail)
    return (0, number, tail) if number is not None else (1, 0, tail)


def _steps_by_time(tree: HostTree, is_step, step_index, process, time, asked=None) -> np.ndarray:
    """Per node: the innermost step (the latest-starting one) whose range contains its start, among the
    steps of the same process (`process`: one code per (rank, window, pid)), on any of its threads; -1.
    `asked`: the nodes to answer (default all; the others get -1).

    Another process's annotations never count: a trace-long range on another pid can share thread ids.
    Steps can nest or overlap, so the latest step starting before the launch may already have ended
    while an earlier one still runs: walk back while an earlier step of the process may still be open."""
    result = np.full(len(tree), -1, dtype=np.int64)
    steps = np.flatnonzero(is_step)
    if not len(steps):
        return result
    # of two steps starting together the shorter is inside the longer: it goes last, so it is found first
    # (by row order, the answer depended on which the file wrote first)
    steps = steps[np.lexsort((-tree.end_ns[steps], tree.start_ns[steps], process[steps]))]
    step_process, step_end = process[steps], tree.end_ns[steps]
    if asked is not None:
        process, time = process[asked], time[asked]
    j = _last_at_or_before(step_process, tree.start_ns[steps], process, time)
    reach = _running_max_per_group(step_process, step_end)   # largest end among steps 0..j of the process
    query = np.flatnonzero(j >= 0)
    j = j[query]
    found = np.full(len(time), -1, dtype=np.int64)
    while len(query):          # one pass per nesting level, never per event
        inside = time[query] < step_end[j]
        found[query[inside]] = step_index[steps[j[inside]]]
        earlier = np.maximum(j - 1, 0)
        again = ~inside & (j > 0) & (step_process[earlier] == process[query]) & (reach[earlier] > time[query])
        query, j = query[again], j[again] - 1
    if asked is None:
        return found
    result[asked] = found
    return result


def _last_at_or_before(group: np.ndarray, start: np.ndarray, query_group: np.ndarray,
                       query_time: np.ndarray) -> np.ndarray:
    """Per query: the index of the last item of its group (items sorted by (group, start)) whose start is
    <= the query time, -1 when none. One merge sort of items and queries."""
    n = len(group)
    kind = np.r_[np.zeros(n, np.int8), np.ones(len(query_group), np.int8)]    # items first on ties
    order = np.lexsort((kind, np.r_[start, query_time], np.r_[group, query_group]))
    item = np.where(order < n, order, -1)
    last = np.maximum.accumulate(item) if len(item) else item
    found = np.empty(len(query_group), dtype=np.int64)
    is_query = order >= n
    found[order[is_query] - n] = last[is_query]
    ok = found >= 0
    ok[ok] = group[found[ok]] == query_group[ok]
    return np.where(ok, found, -1)


def _running_max_per_group(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of `values` restarting at each group (rows sorted by group), vectorized: values
    become dense ranks, offset per group so that a later group always exceeds an earlier one."""
    unique, dense = np.unique(values, return_inverse=True)
    first = np.r_[True, group[1:] != group[:-1]]
    offset = (np.cumsum(first) - 1) * (len(unique) + 1)
    running = np.maximum.accumulate(offset + dense.reshape(-1))
    return unique[running - offset]


def _backward_modules(tree: HostTree, host: pa.Table, is_op, node_backward, node_module):
    """Backward nodes take the module of their forward op (same file and Sequence number)."""
    seq = _int64(host, S.SEQUENCE_NUMBER)[tree.host_row]
    forward = np.flatnonzero(is_op & (node_backward < 0) & (seq >= 0))
    # per (file, seq): the latest-starting forward op (the one that created the autograd node)
    order = np.lexsort((tree.start_ns[forward], seq[forward], tree.file[forward]))
    forward = forward[order]
    f_file, f_seq, f_thread = tree.file[forward], seq[forward], tree.thread[forward]
    last = np.r_[(f_file[1:] != f_file[:-1]) | (f_seq[1:] != f_seq[:-1]), True] if len(forward) else \
        np.zeros(0, bool)
    first = np.r_[True, last[:-1]] if len(forward) else np.zeros(0, bool)
    group = np.cumsum(first) - 1
    threads_differ = np.r_[False, (f_thread[1:] != f_thread[:-1]) & ~first[1:]]
    ambiguous = np.zeros(int(group.max(initial=-1)) + 1, dtype=bool)
    np.logical_or.at(ambiguous, group, threads_differ)
    chosen = forward[last][~ambiguous]

    under = node_backward >= 0
    b_seq = pick(seq, node_backward, under, -1)
    key = dense_codes(np.concatenate([tree.file[chosen], tree.file]), np.concatenate([seq[chosen], b_seq]))
    chosen_key, query_key = key[:len(chosen)], key[len(chosen):]
    pos, hit = _lookup(chosen_key, query_key)  # chosen is sorted by (file, seq), so keys are sorted
    hit &= under & (b_seq >= 0)
    fwd_module = pick(node_module, pick(chosen, pos, hit, 0), hit, 0)
    inferred = hit & (fwd_module != 0)
    module = np.where(inferred, fwd_module, node_module)
    return module, inferred, under & (b_seq >= 0) & ~hit   # AccumulateGrad has no forward op


def _report(traceset, links, duplicate, probes, dev_duplicated, dev_unmatched, dev_other_annotation, is_step,
            is_op, match):
    """The link report's columns: one row per (rank, window, check) with a count and ns, every check listed."""
    device, tree = traceset.device, links["tree"]
    self_ns = sweep(traceset).self_ns if device.num_rows else np.zeros(0, np.int64)
    status = links["status"]
    launched = (status != NO_CORRELATION) & (status != NO_RUNTIME)
    per_device = {
        "device_activities": np.ones(len(status), bool),
        "linked": status == LINKED,
        "no_correlation": status == NO_CORRELATION,
        "dangling_correlation": status == NO_RUNTIME,
        "no_enclosing_op": status == NO_OP,
        "thread_without_ops": status == NO_OP_THREAD,
        "duplicate_correlation": dev_duplicated,
        "no_step": launched & (links["step"] < 0),
        "annotation_other_thread": dev_other_annotation,
        "module_inferred": links["module_inferred"],
        "backward_unmatched": dev_unmatched,
        "graph_launches": np.zeros(len(status), bool),
        "graph_kernels": match.graph_kernel,
        "graph_by_node_id": match.rule == G.BY_NODE_ID,
        "graph_by_name_order": match.rule == G.BY_NAME,
        "graph_by_position": match.rule == G.BY_POSITION,
        "graph_no_capture": match.graph_kernel & (match.outcome == G.NO_CAPTURE),
        "graph_not_in_capture": match.graph_kernel & (match.outcome == G.NOT_IN_CAPTURE),
        "graph_ambiguous": match.graph_kernel & (match.outcome == G.AMBIGUOUS),
    }
    dev_file = file_key(_int64(device, S.RANK), _int64(device, S.WINDOW))
    files = np.unique(np.concatenate([
        file_key(_int64(traceset.files, S.RANK), _int64(traceset.files, S.WINDOW)), dev_file, tree.file]))
    # numpy sums per (file, check), not a pandas group-by per check: the map-reduce runs this once per file
    count = np.zeros((len(files), len(CHECKS)), np.int64)
    ns = np.zeros((len(files), len(CHECKS)), np.int64)
    column = {name: i for i, name in enumerate(CHECKS)}

    def add(check: str, file: np.ndarray, mask: np.ndarray, values: np.ndarray | None, counted: bool = True):
        at = np.searchsorted(files, file[mask])
        if counted:
            np.add.at(count[:, column[check]], at, 1)
        if values is not None:
            np.add.at(ns[:, column[check]], at, values[mask].astype(np.int64))

    for check, mask in per_device.items():
        # host-side counts replace the device-row counts where the check is about host records
        add(check, dev_file, mask, self_ns, counted=check != "duplicate_correlation")
    add("duplicate_correlation", tree.file[probes], duplicate, None)
    add("overlapping_ops", tree.file, tree.clipped_ns > 0, tree.clipped_ns)
    add("profiler_steps", tree.file, is_step, None)
    graph_launches = np.unique(links["runtime_row"][match.graph_kernel])      # host rows of the launches
    add("graph_launches", file_key(_int64(traceset.host, S.RANK)[graph_launches],
                                   _int64(traceset.host, S.WINDOW)[graph_launches]),
        np.ones(len(graph_launches), bool), None)
    rank = np.repeat(files >> 32, len(CHECKS))
    window = np.repeat((files & 0xFFFFFFFF).astype(np.uint32).astype(np.int32).astype(np.int64), len(CHECKS))
    check_order = np.tile(np.arange(len(CHECKS)), len(files))
    order = np.lexsort((check_order, window, rank))
    return {S.RANK: rank[order], S.WINDOW: window[order],
            "check": np.asarray(list(CHECKS), dtype=object)[check_order[order]],
            S.COUNT: count.reshape(-1)[order], "ns": ns.reshape(-1)[order]}
