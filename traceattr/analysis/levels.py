"""The table of any level of a loaded TraceSet (its communication rules already applied): the kernel,
category and rank tables, the collective instances, and the attribution levels. The one place that maps a
level's name to its analysis for a TraceSet."""

from __future__ import annotations

import pandas as pd

from traceattr.analysis.attribute import LEVELS as ATTRIBUTION_LEVELS, attribution_part, attribution_table, merge_parts
from traceattr.analysis.collectives import collectives_table, match_collectives
from traceattr.analysis.rank_comm import with_multirank_columns
from traceattr.analysis.summarize import busy_by_rank, keys_level
from traceattr.model.traceset import TraceSet


def level_table(traceset: TraceSet, by: str, top: int | None = None, *, tree: bool = False, align: bool = True,
                aggregate: bool = False) -> pd.DataFrame:
    """`by`: kernel, category, rank, collective or an attribution level (a tree folds per level when rendered;
    a flat table folds below `top` into <other>, and still adds up)."""
    if by == "collective":
        return collectives_table(match_collectives(traceset, align=align), top=top, aggregate=aggregate,
                                 align=align)
    if by == "rank":
        return with_multirank_columns(traceset, busy_by_rank(traceset), align=align)
    if by in ATTRIBUTION_LEVELS:
        return attribution_table(merge_parts([attribution_part(traceset, by)]), tree=tree,
                                 top=None if tree else top)
    return keys_level(traceset, by, top)
