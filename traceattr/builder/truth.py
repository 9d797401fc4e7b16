"""TraceTruth: what a built trace contains, recorded while building it (never by parsing it back).

Everything is plain Python (lists, dicts, ints) so tests can compare against it without traceattr code.
Times are int64 ns since the Unix epoch (baseTimeNanoseconds + relative time in era C).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ACTIVITY_FIELDS = ("device", "stream", "name", "category", "start_ns", "end_ns", "correlation",
                   "launch", "op", "op_stack", "module", "annotation", "step")


@dataclass
class DeviceTruth:
    busy_ns: int             # length of the union of the device's activity intervals
    sum_duration_ns: int     # naive Σ durations (what over-counting tools report)
    max_concurrency: int     # most activities running at one instant (touching ends do not overlap)
    activities: int

    @property
    def overlap_ns(self) -> int:
        return self.sum_duration_ns - self.busy_ns


@dataclass
class TraceTruth:
    """One file's answers. `activities` holds one list per field of ACTIVITY_FIELDS, in file order:
    device, stream, name, category (compute|communication|memcpy|memset), start_ns, end_ns, correlation,
    and the expected links: launch (runtime call name), op (innermost cpu_op), op_stack (tuple of cpu_op
    names, outermost first), module (nn.Module path like "Model_0/Linear_1"; the forward op's module for
    backward kernels), annotation (innermost user_annotation other than ProfilerStep), step
    ("ProfilerStep#N" containing the launch). A missing link is "" (or () for op_stack)."""

    path: str
    rank: int
    world_size: int
    era: str
    base_time_ns: int                      # 0 in eras A and B (times there are absolute already)
    steps: list[str] = field(default_factory=list)
    activities: dict[str, list] = field(default_factory=lambda: {k: [] for k in ACTIVITY_FIELDS})
    devices: dict[int, DeviceTruth] = field(default_factory=dict)
    events: int = 0                        # elements of traceEvents, all phases
    markers: dict[str, int] = field(default_factory=dict)   # gpu_user_annotation / cuda_sync counts
    # runtime calls written: (name, start ns, duration ns, outermost cpu op around it or "")
    host_calls: list[tuple[str, int, int, str]] = field(default_factory=list)
    window_start_ns: int = 0               # first start and last end of the host and device events (the
    window_end_ns: int = 0                 # loader's window: torch's `Trace` span left out)
    carried_in: list[int] = field(default_factory=list)    # correlations of the kernels launched before the window

    def __len__(self) -> int:
        return len(self.activities["start_ns"])

    def rows(self) -> list[dict]:
        """The activities as one dict per row (convenient for small traces)."""
        cols = self.activities
        return [dict(zip(ACTIVITY_FIELDS, values)) for values in zip(*(cols[k] for k in ACTIVITY_FIELDS))]

    @property
    def busy_ns(self) -> int:
        return sum(d.busy_ns for d in self.devices.values())

    def finish(self) -> None:
        """Compute the per-device figures from the recorded activities."""
        device = np.asarray(self.activities["device"], dtype=np.int64)
        start = np.asarray(self.activities["start_ns"], dtype=np.int64)
        end = np.asarray(self.activities["end_ns"], dtype=np.int64)
        self.devices = {int(d): device_truth(start[device == d], end[device == d])
                        for d in np.unique(device)}


def device_truth(start_ns: np.ndarray, end_ns: np.ndarray) -> DeviceTruth:
    """Union length, Σ durations and peak concurrency of a set of [start, end) intervals."""
    if len(start_ns) == 0:
        return DeviceTruth(0, 0, 0, 0)
    order = np.argsort(start_ns, kind="stable")
    starts, ends = start_ns[order], end_ns[order]
    # union: an interval opens a new block when it starts after everything before it has ended
    reach = np.maximum.accumulate(ends)
    new_block = np.ones(len(starts), dtype=bool)
    new_block[1:] = starts[1:] > reach[:-1]
    block_start = starts[new_block]
    block_end = np.maximum.reduceat(ends, np.flatnonzero(new_block))
    busy = int((block_end - block_start).sum())
    # concurrency: +1 at starts, -1 at ends, ends sorted before starts at equal times
    times = np.concatenate([ends, starts])
    deltas = np.concatenate([-np.ones(len(ends), np.int64), np.ones(len(starts), np.int64)])
    order = np.lexsort((deltas, times))
    peak = int(np.cumsum(deltas[order]).max())
    return DeviceTruth(busy, int((ends - starts).sum()), max(peak, 0), len(starts))
