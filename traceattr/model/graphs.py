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

    def __len__(self) -> int:
        return len(self.kernel)


@dataclass(frozen=True, eq=False)
class GraphCatalog:
    strings: tuple[str, ...] = ()                       # names (kernels, ops, modules)
    paths: tuple[tuple[int, ...], ...] = ()             # op stacks and module paths: string codes, root first
    graphs: tuple[CapturedGraph, ...] = ()
    captures: tuple[str, ...] = ()                      # the capture-only files (never windows nor ranks)
    notes: tuple[str, ...] = field(default=())          # what went wrong reading them

    def __bool__(self) -> bool:
        return bool(self.graphs)
