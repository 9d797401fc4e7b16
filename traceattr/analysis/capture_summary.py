"""The kernel table from the summaries a traceattr.capture run wrote (io/summaries.py reads them).

Summed over windows the rows give the table of summarize(by="kernel") exactly: Σ self_ns per device and
window == its busy time, so self_pct is recomputed from Σ self_ns. The category table's exposed_ns needs
the overlaps of the traces (io/summaries.py gives the reason).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.fold import fold_below_top
from traceattr.analysis.header import HOST_ONLY_NOTE
from traceattr.analysis.summarize import KERNEL_COLUMNS, empty_frame
from traceattr.io.summaries import read_capture_rows


@dataclass
class CaptureSummary:
    """Either `table` (a summarize()-shaped frame) or `reason` why the traces must be read instead."""

    table: pd.DataFrame | None = None
    reason: str = ""
    files: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)      # the capture's, from its manifests (read_run)


def capture_summary(path: str | os.PathLike, by: str, top: int | None = None) -> CaptureSummary | None:
    """The summary table from capture summaries, CaptureSummary(reason=...) when they cannot answer,
    or None when `path` is not a capture folder at all."""
    found = read_capture_rows(path, by)
    if found is None or found.rows is None:
        return None if found is None else CaptureSummary(reason=found.reason)
    table = _table(found.rows)
    if top is not None:
        table = fold_below_top(table, top, S.NAME, [S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS, S.SELF_PCT])
    return CaptureSummary(table=table, files=found.files, ranks=found.ranks, problems=found.problems)


def _table(rows: pd.DataFrame) -> pd.DataFrame:
    keys, columns = [S.RANK, S.DEVICE, S.NAME, S.CATEGORY], KERNEL_COLUMNS
    if rows.empty:
        return empty_frame(columns)
    table = rows.groupby(keys, as_index=False, sort=False)[[S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS]].sum()
    busy = table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].transform("sum").to_numpy(dtype=np.float64)
    part = table[S.SELF_NS].to_numpy(dtype=np.float64)
    table[S.SELF_PCT] = np.divide(100.0 * part, busy, out=np.zeros(len(part)), where=busy > 0)
    table = table.sort_values([S.SELF_NS, S.RANK, S.DEVICE] + keys[2:],
                              ascending=[False, True, True] + [True] * len(keys[2:]), kind="stable")
    types = {name: ("str" if name in (S.NAME, S.CATEGORY) else "float64" if name == S.SELF_PCT else "int64")
             for name in columns}
    return table[columns].reset_index(drop=True).astype(types)


CAPTURE_SOURCE = "capture summaries"    # how a header answered from them begins its source


def capture_header(summary: CaptureSummary) -> dict:
    """Report header for a table answered from capture summaries (no trace was read)."""
    table = summary.table
    busy = int(table[S.SELF_NS].sum())
    duration = int(table[S.DURATION_NS].sum())
    activities = int(table[S.COUNT].sum())
    return {
        "source": f"{CAPTURE_SOURCE} ({len(summary.files)} *.kernels.parquet; trace JSON not read)",
        # the checks read traces; report/summarize.with_capture_verdict counts the capture's own problems
        "check": "not run (capture summaries; traceattr check PATH reads the traces)",
        "files": len(summary.files),
        "ranks": summary.ranks,
        "windows": len(summary.files),
        "devices": int(table[[S.RANK, S.DEVICE]].drop_duplicates().shape[0]),
        "activities": activities,
        "busy_ns": busy,
        "duration_ns": duration,
        "overlap_ns": duration - busy,
        "notes": [] if activities else [HOST_ONLY_NOTE],      # as read from the traces
    }
