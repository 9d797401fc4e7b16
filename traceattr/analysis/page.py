"""What the HTML report (`traceattr report`, report/html.py) shows of one run: its header and tables, from a
loaded TraceSet here or by per-file map-reduce (analysis/mapreduce_page.py), so the page renders the same
either way and the command never holds the traces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceattr.analysis.header import table_header
from traceattr.analysis.levels import level_table
from traceattr.analysis.timeline import binned_self

TIMELINE_BINS = 120
TOP_LEVELS = ("kernel", "op", "module")     # the "top ... by self time" sections, in page order


@dataclass
class PageData:
    header: dict                      # table_header of the rank table
    rank_table: pd.DataFrame          # summarize(by="rank"), with the multi-rank columns
    ranks: tuple[int, ...]
    device_rows: int                  # 0: a host-only run (no device time to draw)
    levels: dict[str, pd.DataFrame]   # kernel, op, module, category, step: per-rank tables
    timeline: pd.DataFrame            # binned_self rows (rank, category, bin, self_ns), TIMELINE_BINS bins
    edges: np.ndarray                 # the bins' edges in ns since the earliest window start


def page_data(traceset) -> PageData:
    """The page's header and tables of a loaded TraceSet."""
    rank_table = level_table(traceset, "rank")
    levels = {level: level_table(traceset, level) for level in ("kernel", "category", "op", "module", "step")}
    timeline, edges = binned_self(traceset, bins=TIMELINE_BINS)
    return PageData(table_header(traceset, rank_table, "rank"), rank_table, tuple(traceset.ranks),
                    traceset.device.num_rows, levels, timeline, edges)
