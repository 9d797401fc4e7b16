"""What the HTML report (`traceattr report`, report/html.py) shows of one run: its header and tables,
computed by analysis/page_plan.py over the run's files (on disk, or of a loaded TraceSet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceattr.analysis.roofline import PeakOverride


TIMELINE_BINS = 120
TOP_LEVELS = ("kernel", "op", "module")     # the "top ... by self time" sections, in page order


@dataclass
class PageData:
    header: dict                      # the rank table's report header (summary_plan.header_for)
    rank_table: pd.DataFrame          # summarize(by="rank"), with the multi-rank columns
    ranks: tuple[int, ...]
    device_rows: int                  # 0: a host-only run (no device time to draw)
    levels: dict[str, pd.DataFrame]   # kernel, op, module, category, step: per-rank tables
    timeline: pd.DataFrame            # timeline.binned_at rows (rank, category, bin, self_ns), TIMELINE_BINS bins
    edges: np.ndarray                 # the bins' edges in ns since the earliest window start
    findings: list[str] = field(default_factory=list)   # one-sentence answers shown first on the page (none: no section)
    shapes: pd.DataFrame | None = None   # the shape table over ranks, with its roofline (analysis/roofline.py)
    critical: Any = None                 # page_critical.CriticalPage: one step's critical path per rank
    peaks: PeakOverride = field(default_factory=PeakOverride)   # --peak-tflops/--peak-tbps: the roofline's roof


