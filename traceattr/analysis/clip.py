"""`traceattr check --clip-outliers`: busy and idle time with every outlier activity clipped, beside the
figures as loaded.

An outlier is what `traceattr check` flags in a duration: an activity longer than its trace window, or a compute kernel
far beyond its name's typical (median) duration. Clipped, it ends at its start + that median (or at the
window's end when its name has too few instances for a median). The plan (analysis/clip_plan.py)
clips each file with the run-wide medians through clip(), and sums the tables here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.check import duration_facts
from traceattr.model.traceset import TraceSet


def outliers(traceset: TraceSet, typical: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Per device row: whether it is an outlier (longer than its window, or far beyond its name's typical
    duration), and the end it would have clipped (start + the name's median, else the window's end).
    `typical`: the run-wide medians of the names that can hold outliers (analysis/clip_plan.py)."""
    facts = duration_facts(traceset, typical)
    flagged = facts["longer"] | facts["beyond"]
    clipped_end = np.where(facts["typical"] >= 0, facts["start"] + facts["typical"],
                           np.minimum(facts["end"], np.maximum(facts["window_end"], facts["start"])))
    return flagged, np.where(flagged, clipped_end, facts["end"])


def clip(traceset: TraceSet, typical: dict[str, int]) -> tuple[TraceSet, np.ndarray]:
    """(the file with every outlier activity clipped, which device rows it clipped): one file of a run
    (`typical` as in outliers())."""
    flagged, end = outliers(traceset, typical)
    if not flagged.any():
        return traceset, flagged
    device = traceset.device.set_column(traceset.device.schema.get_field_index(S.END_NS), S.END_NS,
                                        [end.astype(np.int64)])
    return TraceSet(device, traceset.host, traceset.markers, traceset.files, traceset.notes), flagged


CLIP_COLUMNS = [S.RANK, S.DEVICE, S.BUSY_NS, S.CLIPPED_PREFIX + S.BUSY_NS, S.IDLE_NS, S.CLIPPED_PREFIX + S.IDLE_NS,
                S.CLIPPED_ACTIVITIES]


def clipped_counts(device, flagged: np.ndarray) -> pd.DataFrame:
    """Activities clipped per (rank, device) of a device table, from clip()'s `flagged` rows."""
    found = pd.DataFrame({name: np.asarray(device.column(name).to_numpy(), np.int64)[flagged]
                          for name in (S.RANK, S.DEVICE)})
    return found.groupby([S.RANK, S.DEVICE], as_index=False).size().rename(columns={"size": S.CLIPPED_ACTIVITIES})


def clip_table_of(before: pd.DataFrame, after: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Busy and idle ns per (rank, device) as loaded (`before`) and clipped (`after`: summarize.rank_table
    rows of each), side by side, and `counts` (clipped_counts rows, summed over windows) clipped activities."""
    keys, columns = [S.RANK, S.DEVICE], [S.BUSY_NS, S.IDLE_NS]
    table = before[keys + columns].merge(after[keys + columns], on=keys, suffixes=("", "_after"))
    table = table.rename(columns={f"{c}_after": S.CLIPPED_PREFIX + c for c in columns})
    counts = counts.groupby(keys)[S.CLIPPED_ACTIVITIES].sum()
    found = counts.reindex(pd.MultiIndex.from_frame(table[keys])) if len(counts) else pd.Series(0, table.index)
    table[S.CLIPPED_ACTIVITIES] = found.fillna(0).to_numpy(dtype=np.int64)
    return table[CLIP_COLUMNS]

