"""The `shape` level's keys: which op call, with which record_shapes args, each device activity counts for.

A kernel counts for the innermost convolution or attention op around its launch (perfmodels.COMPOSITE:
their transposes, bias adds and fills, launched by inner ops, were paid for their FLOPs), else for the
innermost op that has a performance model (`aten::linear`'s GEMM for the `aten::addmm` that launched it,
whose args name the GEMM exactly), else for the innermost op (the `op` level's key), whose row then has no
model. The key is (op name, Input Dims, Input type, Concrete Inputs): two calls with
the same dims but another stride or causal flag do different work. All of it per distinct op call and per
distinct key, never per event.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.analysis.peaks import device_entries
from traceattr.analysis.perfmodels import COMPOSITE, MODELS
from traceattr.attribution.hosttree import dense_codes
from traceattr.attribution.links import GRAPH_CAPTURED, GRAPH_LAUNCH, Links
from traceattr.io.codes import dictionary_codes
from traceattr.io.shapes import SHAPE_COLUMNS
from traceattr.model.traceset import TraceSet


def shape_label(name: str, dims: str, types: str, concrete: str) -> str:
    """One key as text (a JSON list: any op name or shape text survives it), parsed by parse_label."""
    return json.dumps([name, dims, types, concrete], ensure_ascii=False)


def parse_label(label: str) -> tuple[str, str, str, str]:
    """(name, dims, types, concrete) of a shape_label; a label that is not one (<unattributed>, <other>)
    is its own name with no args."""
    if label.startswith("["):
        try:
            values = json.loads(label)
        except ValueError:
            values = None
        if isinstance(values, list) and len(values) == 4 and all(isinstance(v, str) for v in values):
            return tuple(values)
    return label, "", "", ""


def device_shape_codes(traceset: TraceSet, links: Links) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Per device row: the code of its shape key (-1: launched by no op), the labels the codes index, and
    whether the row is the first activity of its op call (Σ of it per key counts the calls). A kernel replayed
    by a graph launch counts for its capture launch's op call, with that call's args (the catalog carries
    them), once per replay; one its capture does not explain counts for its op-level label, without args."""
    call_row = call_rows(links, links.op_row)
    codes, labels = shape_codes(traceset, call_row)
    first = _firsts(call_row >= 0, call_row)
    if links.capture_launch is not None:
        graph = np.isin(links.status, (GRAPH_CAPTURED, GRAPH_LAUNCH))
        graph_codes, graph_labels, graph_first = _replay_shape_codes(traceset.graph_catalog, links, graph)
        index = {label: i for i, label in enumerate(labels)}
        remap = np.array([index.setdefault(label, len(index)) for label in graph_labels] + [-1], np.int64)
        codes[graph] = remap[graph_codes]
        first[graph] = graph_first
        labels = list(index)
    return codes, labels, first


def _firsts(has: np.ndarray, *call: np.ndarray) -> np.ndarray:
    """Per row: the first row (in row order) of its call (the tuple `call`) among rows where `has`."""
    first = np.zeros(len(has), dtype=bool)
    if has.any():
        _, at = np.unique(dense_codes(*(c[has] for c in call)), return_index=True)
        first[np.flatnonzero(has)[at]] = True
    return first


def _replay_shape_codes(catalog, links: Links, graph: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(code per graph row into the labels (-1 none), labels, first of its call per graph row) for the rows
    where `graph`: a call is one op call of the capture, once per graph launch that replayed it."""
    launch = links.capture_launch[graph]
    runtime = links.runtime_row[graph]
    shape = np.full(len(launch), -1, np.int64)
    call = np.full(len(launch), -1, np.int64)
    keys: list[tuple[int, int, int, int]] = list(catalog.shapes) if catalog else []
    if catalog and catalog.graphs:
        which = np.concatenate([np.full(len(g), i, np.int64) for i, g in enumerate(catalog.graphs)])
        shapes = np.concatenate([_sized(g.shape, len(g)) for g in catalog.graphs])
        calls = np.concatenate([_sized(g.call, len(g)) for g in catalog.graphs])
        matched = launch >= 0
        shape[matched] = shapes[launch[matched]]
        # a call is unique per (graph, ordinal in it): the ordinal of a graph's call, moved past all before
        call[matched] = np.where(calls[launch[matched]] >= 0,
                                 which[launch[matched]] * (1 << 32) + calls[launch[matched]], -1)
    strings = catalog.strings if catalog else ()
    labels = [shape_label(*(strings[c] for c in key)) for key in keys]
    # the rest count for their op-level label (a capture op without args, `<graph replay: OP>`) per launch
    rest = (shape < 0) | (call < 0)
    op_code = links.op_code[graph]
    used = np.unique(op_code[rest & (op_code >= 0)])
    labels += [shape_label(links.host_names[c], "", "", "") for c in used.tolist()]
    shape[rest] = np.where(op_code[rest] >= 0, len(keys) + np.searchsorted(used, op_code[rest]), -1)
    call[rest] = np.where(op_code[rest] >= 0, -2 - op_code[rest], -1)      # apart from the captured calls
    first = _firsts(shape >= 0, runtime, call)
    return shape, labels, first


def _sized(values: np.ndarray, n: int) -> np.ndarray:
    """A catalog column, or -1s for a catalog made without it."""
    return values if len(values) == n else np.full(n, -1, np.int64)


def shape_codes(traceset: TraceSet, host_rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes (dense, -1 for host row -1) and labels of the shape keys of these host rows."""
    host_rows = np.asarray(host_rows, dtype=np.int64)
    codes = np.full(len(host_rows), -1, dtype=np.int64)
    has = host_rows >= 0
    if not has.any():
        return codes, []
    host = traceset.host
    columns = [dictionary_codes(host.column(S.NAME))]
    columns += [dictionary_codes(host.column(name)) if name in host.column_names else (pa.array([""]),
                np.zeros(host.num_rows, np.int64)) for name in SHAPE_COLUMNS]
    picked = [values[host_rows[has]] for _, values in columns]
    dense = dense_codes(*picked)
    n = int(dense.max()) + 1
    first = np.zeros(n, dtype=np.int64)
    first[dense[::-1]] = np.arange(len(dense))[::-1]
    texts = [[str(v) for v in dictionary.take(pa.array(values[first])).to_pylist()]
             for (dictionary, _), values in zip(columns, picked)]
    labels = [shape_label(*key) for key in zip(*texts)]
    codes[has] = dense
    return codes, labels


def call_rows(links: Links, op_row: np.ndarray) -> np.ndarray:
    """Per innermost-op host row (-1: none): the host row of the op call its kernels count for, -1 when
    none: the innermost composite op (convolution, attention) around it, else the innermost modelled op,
    else the op itself. Also the rule of a capture's launches (analysis/graph_capture.py)."""
    op_row = np.asarray(op_row, dtype=np.int64)
    tree = links.tree
    if not (op_row >= 0).any():
        return op_row
    node_of_row = np.full(len(links.host_name_code), -1, dtype=np.int64)
    node_of_row[tree.host_row] = np.arange(len(tree.host_row))
    node_name = links.host_name_code[tree.host_row]
    starts, back = np.unique(node_of_row[op_row[op_row >= 0]], return_inverse=True)
    chosen = starts
    for names in (MODELS, COMPOSITE):           # the later wins where it finds an op
        wanted = np.array([name in names for name in links.host_names] + [False], dtype=bool)[node_name]
        found = _innermost(links, starts, wanted)
        chosen = np.where(found >= 0, found, chosen)
    out = np.full(len(op_row), -1, dtype=np.int64)
    out[op_row >= 0] = tree.host_row[chosen][back.reshape(-1)]
    return out


def _innermost(links: Links, starts: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per op node in `starts`: the innermost op node, itself or enclosing, where `wanted` (-1 none). One
    step per level of op nesting, over the distinct nodes."""
    found = np.full(len(starts), -1, dtype=np.int64)
    current = starts.copy()
    while True:
        active = (current >= 0) & (found < 0)
        if not active.any():
            return found
        hit = active & wanted[np.maximum(current, 0)]
        found[hit] = current[hit]
        climb = active & ~hit
        parent = links.tree.parent[current[climb]]
        current[climb] = np.where(parent >= 0, links.node_op[np.maximum(parent, 0)], -1)
        current[~climb] = -1


_DEVICE_KEYS = ("name", "totalGlobalMem", "computeMajor", "computeMinor", "numSms")   # what peaks.py reads


def device_texts(traceset: TraceSet) -> frozenset:
    """The deviceProperties entries (the keys peaks.py reads, as JSON texts) of the devices that have
    rows in this file: the driver gets no header texts (engine/placement.py), so the part carries them."""
    if not traceset.device.num_rows or S.DEVICE_PROPERTIES not in traceset.files.column_names:
        return frozenset()
    used = set(np.unique(np.asarray(traceset.device.column(S.DEVICE).to_numpy(), dtype=np.int64)).tolist())
    found = set()
    for text in traceset.files.column(S.DEVICE_PROPERTIES).to_pylist():
        entries = device_entries(text)
        kinds = {json.dumps({k: e.get(k) for k in _DEVICE_KEYS}, sort_keys=True) for e in entries.values()}
        for device in used:
            entry = entries.get(device)
            if entry is not None:
                found.add(json.dumps({k: entry.get(k) for k in _DEVICE_KEYS}, sort_keys=True))
            elif len(kinds) == 1:
                # a device id the list does not hold (an MI300X VF lists id 0 and runs as device 2): the
                # file's only kind of device
                found |= kinds
    return frozenset(found)
