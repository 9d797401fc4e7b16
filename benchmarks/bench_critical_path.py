"""The critical path of every step of one large builder trace: seconds for the graph and the walk.

    python3 benchmarks/bench_critical_path.py [ops_per_step] [steps]     # default 220000 ops, 2 steps

The trace (builder/critical.py `large`): each cpu op launches one kernel, round robin over two streams, every
50th an all-reduce, and each step ends with a stream sync; 3 events per op (op, launch call, kernel), so
220000 ops x 2 steps is 1.3 M events (about 200 MB of JSON). The decode is timed apart (the cache serves it on
a second run). Figures, best of three on the loaded TraceSet: `critical_paths` (the graph, the binding
predecessors and the walk of every step: `summarize --by critical` per rank), and the engine's whole map
step `critical_map` (with the comm extract and the pieces of the cross-rank path, one per all-reduce).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import traceattr
from traceattr.analysis.critical import critical_map
from traceattr.attribution.critical import critical_paths
from traceattr.attribution.links import _CACHE
from traceattr.attribution.sweep import _CACHE as _SWEEPS
from traceattr.builder.critical import large


def main() -> None:
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 220_000
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    with tempfile.TemporaryDirectory() as folder:
        path = large(steps=steps, ops_per_step=ops, collective_every=50).write(Path(folder) / "large.json")
        size = path.stat().st_size
        started = time.perf_counter()
        traceset = traceattr.load(path, cache=False)
        decode = time.perf_counter() - started
    best = float("inf")
    for _ in range(3):
        _CACHE.pop(traceset, None)         # the links are part of the work
        started = time.perf_counter()
        paths, notes = critical_paths(traceset)
        best = min(best, time.perf_counter() - started)
    whole = float("inf")
    for _ in range(3):
        _CACHE.pop(traceset, None)
        _SWEEPS.pop(traceset, None)
        started = time.perf_counter()
        part = critical_map(traceset)
        whole = min(whole, time.perf_counter() - started)
    events = traceset.host.num_rows + traceset.device.num_rows + traceset.markers.num_rows
    segments = sum(len(p.seg_start) for p in paths)
    assert all(int(p.breakdown().critical_ns.sum()) == p.end_ns - p.start_ns for p in paths)
    pieces = len(part["cross"]["activity"]) if part["cross"] is not None else 0
    print(f"{size / 1e6:.0f} MB, {events:,} events, {len(paths)} steps, {segments:,} path segments, {pieces:,} "
          f"collectives: decode {decode:.1f} s, critical path {best:.2f} s, whole map step with the cross-rank "
          f"pieces {whole:.2f} s (best of 3){'; ' + '; '.join(notes) if notes else ''}")


if __name__ == "__main__":
    main()
