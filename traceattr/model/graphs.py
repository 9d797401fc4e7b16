"""The graph-capture catalog: what a replay file's links need from the capture traces (docs/inference.md).

A capture trace is recorded while CUDA/HIP graphs are captured: between a `*StreamBeginCapture` and its
`*StreamEndCapture` every launch is recorded under its ops, modules and Python frames, but its kernel never
runs (it becomes a graph node). The catalog keeps, per captured graph, its launches in capture order with
the kernel each launched and where it was launched, as small numpy arrays and texts: it is built once from
the few capture files (analysis/graph_capture.py) and travels with each replay file's map step
(engine.units.UnitTask), where attribution/graphs.py matches replayed kernels to these launches.
"""

from __future__ import annotations

import contextlib
import os
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

NO_CODE = -1
# --graph-capture / graph_capture=: capture traces given beside the path, for the command or call running
GIVEN_CAPTURES: ContextVar[tuple[str, ...]] = ContextVar("graph_capture", default=())


def capture_paths(value) -> tuple[str, ...]:
    """graph_capture= as a tuple of paths: one path, or several (a text is one path, not its characters)."""
    if value is None:
        return ()
    values = (value,) if isinstance(value, (str, os.PathLike)) else tuple(value)
    for one in values:
        if not isinstance(one, (str, os.PathLike)) or not str(one):
            raise TypeError(f"graph_capture must be a path or paths, got {type(one).__name__}")
    return tuple(os.fspath(one) for one in values)


@contextlib.contextmanager
def captures_given(value):
    """GIVEN_CAPTURES set to `value` (paths) while the block runs."""
    token = GIVEN_CAPTURES.set(capture_paths(value))
    try:
        yield
    finally:
        GIVEN_CAPTURES.reset(token)


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
