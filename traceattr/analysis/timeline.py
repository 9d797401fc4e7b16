"""Device self time per (rank, category, time bin), for utilisation-over-time pictures (`traceattr report`).

Each activity's self time (the exact sweep share) is spread evenly over its interval, so a bin holds the
busy time that fell in it, overlapping streams counted once: Σ over bins == Σ self == busy. Computed with
sorted cumulative sums (O(n log n)), never one Python object per activity.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.model.traceset import TraceSet, timed_range

BIN = "bin"


def bin_edges(files, bins: int) -> tuple[int, np.ndarray]:
    """(t0, edges): `bins` equal bins from the earliest window start to the latest window end of `files`."""
    t0, t1 = timed_range(files) or (0, 0)
    return t0, np.linspace(0.0, float(max(t1 - t0, 1)), bins + 1)


def empty_bins() -> pd.DataFrame:
    return pd.DataFrame({S.RANK: [], S.CATEGORY: [], BIN: [], S.SELF_NS: []})


def binned_at(traceset: TraceSet, t0: int, edges: np.ndarray) -> pd.DataFrame:
    """Rows (rank, category, bin, self_ns as float ns) over given bins (`edges` in ns since `t0`, bin_edges):
    one file's share of a run's picture (analysis/page_plan.py sums them)."""
    device = traceset.device
    if device.num_rows == 0:
        return empty_bins()
    bins = len(edges) - 1
    start = np.asarray(device.column(S.START_NS).to_numpy(), dtype=np.int64) - t0
    end = np.asarray(device.column(S.END_NS).to_numpy(), dtype=np.int64) - t0
    self_ns = np.asarray(sweep(traceset).self_ns, dtype=np.float64)
    rank = np.asarray(device.column(S.RANK).to_numpy(), dtype=np.int64)
    codes = device.column(S.CATEGORY).combine_chunks().dictionary_encode()
    names = codes.dictionary.to_pylist()
    category = np.asarray(codes.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    frames = []
    for r in np.unique(rank):
        for c in np.unique(category[rank == r]):
            mask = (rank == r) & (category == c)
            # times from the group's first start: smaller cumulative sums, less float cancellation
            origin = start[mask].min()
            values = np.diff(_integral(start[mask] - origin, end[mask] - origin, self_ns[mask], edges - origin))
            frames.append(pd.DataFrame({S.RANK: int(r), S.CATEGORY: names[c], BIN: np.arange(bins),
                                        S.SELF_NS: values}))
    return pd.concat(frames, ignore_index=True)


def _integral(start: np.ndarray, end: np.ndarray, self_ns: np.ndarray, at: np.ndarray) -> np.ndarray:
    """F(t) = Σ self_i · (share of activity i's interval before t), at each t of `at`."""
    duration = (end - start).astype(np.float64)
    rate = np.divide(self_ns, duration, out=np.zeros_like(self_ns), where=duration > 0)
    start_f, end_f = start.astype(np.float64), end.astype(np.float64)

    def before(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(points, kind="stable")
        sorted_points = points[order]
        rates = np.concatenate([[0.0], np.cumsum(rate[order])])
        weighted = np.concatenate([[0.0], np.cumsum(rate[order] * sorted_points)])
        index = np.searchsorted(sorted_points, at, side="right")
        return rates[index], weighted[index]

    rate_started, weighted_started = before(start_f)
    rate_ended, weighted_ended = before(end_f)
    # instantaneous activities (duration 0) have self 0 and rate 0: they add nothing
    return at * (rate_started - rate_ended) - (weighted_started - weighted_ended)
