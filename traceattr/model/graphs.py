"""The graph-capture catalog: what a replay file's links need from the capture traces (docs/inference.md).

A capture trace is recorded while CUDA/HIP graphs are captured: between a `*StreamBeginCapture` and its
`*StreamEndCapture` every launch is recorded under its ops, modules and Python frames, but its kernel never
runs (it becomes a graph node). The catalog keeps, per captured graph, its launches in capture order with
the kernel each launched and where it was launched, as small numpy arrays and texts: it is built once from
the few capture files (analysis/graph_capture.py) and travels with each replay file's map step
(engine.units.UnitTask), where attribution/graphs.py matches replayed kernels to these launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NO_CODE = -1


@dataclass(frozen=True, eq=False)
class CapturedGraph:
    path: str                 # the capture file
    index: int                # the capture range's position in its file (0, 1, ...): pieces in capture order
    batch_size: int           # execution_details.json, else the capture's annotation or file name; -1 unknown
    closed: bool              # its *StreamEndCapture was recorded (False: the file ends inside the capture)
    kernel: np.ndarray        # int64 per launch: code in GraphCatalog.strings of the kernel launched, -1 unknown
    node_id: np.ndarray       # int64 per launch: `graph node id` when the writer recorded it, -1
    op: np.ndarray            # int64 per launch: code of the innermost cpu op's name, -1 none
    op_stack: np.ndarray      # int64 per launch: index in GraphCatalog.paths of the op stack, -1 none
    module: np.ndarray        # int64 per launch: index in GraphCatalog.paths of the nn.Module path, -1 none
    # the `shape` level's op call of each launch (analysis/shape_keys.py: innermost composite, else modelled,
    # else innermost op) and its record_shapes args, so replayed kernels get the shapes eager ones get
    shape: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # index in GraphCatalog.shapes, -1
    call: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # the op call's ordinal in the graph, -1

    def __len__(self) -> int:
        return len(self.kernel)


@dataclass(frozen=True, eq=False)
class GraphCatalog:
    strings: tuple[str, ...] = ()                       # names (kernels, ops, modules)
    paths: tuple[tuple[int, ...], ...] = ()             # op stacks and module paths: string codes, root first
    shapes: tuple[tuple[int, int, int, int], ...] = ()  # (op name, Input Dims, Input type, Concrete Inputs) codes
    graphs: tuple[CapturedGraph, ...] = ()
    captures: tuple[str, ...] = ()                      # the capture-only files (never windows nor ranks)
    notes: tuple[str, ...] = field(default=())          # what went wrong reading them

    def __bool__(self) -> bool:
        return bool(self.graphs)


# --- the catalog as JSON: a store keeps it (io/store.py), so `summarize STORE` attributes replays as
# `summarize FOLDER` does without the capture files ------------------------------------------------------

_LAUNCH_COLUMNS = ("kernel", "node_id", "op", "op_stack", "module", "shape", "call")
MAX_CATALOG_ITEMS = 1 << 24          # strings, paths, shapes, launches: far beyond vLLM's ~70 x 70 graphs


def catalog_json(catalog: GraphCatalog) -> dict:
    """The catalog as plain JSON values (notes are not kept: the store keeps its own)."""
    return {
        "strings": list(catalog.strings), "paths": [list(p) for p in catalog.paths],
        "shapes": [list(s) for s in catalog.shapes], "captures": list(catalog.captures),
        "graphs": [{"path": g.path, "index": g.index, "batch_size": g.batch_size, "closed": g.closed,
                    **{c: np.asarray(getattr(g, c), np.int64).tolist() for c in _LAUNCH_COLUMNS}}
                   for g in catalog.graphs],
    }


def catalog_from_json(data) -> GraphCatalog:
    """catalog_json's inverse, every value range-checked (codes index what they name): ValueError saying
    what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    strings = _texts(data.get("strings"), "strings")
    captures = _texts(data.get("captures"), "captures")
    paths = tuple(tuple(_codes(p, len(strings), "paths", allow_none=False)) for p in _list(data.get("paths"), "paths"))
    shapes = tuple(tuple(_codes(s, len(strings), "shapes", allow_none=False)) for s in _list(data.get("shapes"), "shapes"))
    if any(len(s) != 4 for s in shapes):
        raise ValueError("a shape is not (name, dims, types, concrete)")
    limits = {"kernel": len(strings), "op": len(strings), "op_stack": len(paths), "module": len(paths),
              "shape": len(shapes), "node_id": 1 << 62, "call": MAX_CATALOG_ITEMS}
    graphs = []
    for g in _list(data.get("graphs"), "graphs"):
        if not isinstance(g, dict) or not isinstance(g.get("path"), str) or not isinstance(g.get("closed"), bool):
            raise ValueError("a graph without its path or closed flag")
        index, size = g.get("index"), g.get("batch_size")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (index, size)) \
                or not 0 <= index < MAX_CATALOG_ITEMS or not -1 <= size < 2**31:
            raise ValueError("a graph's index or batch size is out of range")
        columns = {c: np.asarray(_codes(g.get(c), limits[c], c), np.int64) for c in _LAUNCH_COLUMNS}
        if len({len(v) for v in columns.values()}) != 1:
            raise ValueError("a graph's launch columns differ in length")
        graphs.append(CapturedGraph(g["path"], index, size, g["closed"], **columns))
    return GraphCatalog(strings=strings, paths=paths, shapes=shapes, graphs=tuple(graphs), captures=captures)


def _list(value, what: str) -> list:
    if not isinstance(value, list) or len(value) > MAX_CATALOG_ITEMS:
        raise ValueError(f"{what} is not a list")
    return value


def _texts(value, what: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in _list(value, what)):
        raise ValueError(f"{what} holds a value that is not a text")
    return tuple(value)


def _codes(value, limit: int, what: str, allow_none: bool = True) -> list[int]:
    """A list of int codes in [-1 (when allowed), limit)."""
    low = NO_CODE if allow_none else 0
    if not all(isinstance(v, int) and not isinstance(v, bool) and low <= v < limit for v in _list(value, what)):
        raise ValueError(f"{what} holds a code out of range")
    return value
