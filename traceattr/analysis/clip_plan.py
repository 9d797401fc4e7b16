"""`traceattr check --clip-outliers` by per-file map-reduce: busy and idle per (rank, device) as loaded and
with every outlier clipped (clip.clip_table_of), with only small per-file aggregates on the driver.

An outlier (clip.outliers) is clipped to its name's median over the whole run, which no file knows alone:
1. the first map is the check's (check_plan.py): with it come each file's sweep groups (busy per
   (rank, window, device): the "as loaded" side, summarize.rank_table) and the names of its activities
   longer than their window;
2. the second map (check_plan.exact_medians, usually not run) gives the exact medians of the
   far-beyond candidates and of the longer-than-window names, once for the check rows and the clipping;
3. the third map, over the files holding an outlier only, clips each with those medians (clip.clip) and
   sends back its sweep groups and clipped activities per device. Every other
   file's clipped figures are its figures as loaded.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis import check as K
from traceattr.analysis.clip import clip, clip_table_of, clipped_counts
from traceattr.analysis import check_plan as MC
from traceattr.analysis.summarize import rank_table
from traceattr.attribution.hosttree import file_key
from traceattr.attribution.sweep import sweep
from traceattr.engine.columns import concat_columns, numpy_columns
from traceattr.engine.units import Unit, UnitTask
from traceattr.io.parallel import successes


@dataclass
class ClippedFile:
    path: str
    groups: dict              # sweep groups of the clipped file (rank 0, window 0), numpy columns
    counts: dict              # clip.clipped_counts rows (rank 0), numpy columns


def clip_work(unit: Unit, *, typical: dict[str, int]) -> ClippedFile:
    """In a worker: one file clipped with the run-wide medians `typical` (clip.clip)."""
    traceset, flagged = clip(unit.traceset, typical)
    return ClippedFile(unit.path, numpy_columns(sweep(traceset).groups),
                       numpy_columns(clipped_counts(traceset.device, flagged)))


def check_and_clip(reduced, runner, skipped=()) -> tuple[K.CheckReport, pd.DataFrame]:
    """(the check report, the clip table) of the files behind `reduced` (summary_plan.Reduced of a plan
    holding check_plan.EXTRACT); `runner` (summary_plan.Runner) runs the second and third maps."""
    parts: MC.CheckParts = reduced.extracts[MC.NAME]
    paths = K.paths_of(reduced.files)
    located = list({c.name: c for c in parts.candidates + parts.longer}.values())
    medians = MC.exact_medians(located, parts, runner, paths) if located else None
    report = MC.check_report(reduced, runner, skipped=skipped, medians=medians)
    outlying = set(parts.longer_files)
    if medians is not None:
        beyond = MC.beyond_kernels(medians)
        outlying |= set(zip(beyond[S.RANK].tolist(), beyond[S.WINDOW].tolist()))
    return report, clip_table(reduced, sorted(outlying), medians.typical if medians is not None else {}, runner)


def clip_table(reduced, outlying: list[tuple[int, int]], typical: dict[str, int], runner) -> pd.DataFrame:
    """clip.clip_table_of: as loaded from the first map's groups; clipped from them with the groups of the
    `outlying` files, (rank, window), replaced by the third map's."""
    before = rank_table(reduced.groups, reduced.files)
    if not outlying:
        return clip_table_of(before, before, pd.DataFrame(columns=[S.RANK, S.DEVICE, S.CLIPPED_ACTIVITIES]))
    paths = K.paths_of(reduced.files)
    where = {paths[key]: key for key in outlying}
    task = UnitTask(functools.partial(clip_work, typical=typical))
    groups, counts = [], []
    with contextlib.closing(runner.map(list(where), task, always_pool=reduced.files.num_rows > 1)) as results:
        for found in successes(results, False, []):
            rank, window = where[found.path]
            groups.append(_labelled(found.groups, rank, window))
            counts.append(_labelled(found.counts, rank))
    loaded = reduced.groups
    ranks, windows = (np.array(values, np.int64) for values in zip(*outlying))
    as_loaded = ~np.isin(file_key(loaded[S.RANK].to_numpy(), loaded[S.WINDOW].to_numpy()), file_key(ranks, windows))
    after = pd.concat([loaded[as_loaded], pd.DataFrame(concat_columns(groups))], ignore_index=True)
    return clip_table_of(before, rank_table(after, reduced.files), pd.DataFrame(concat_columns(counts)))


def _labelled(columns: dict[str, np.ndarray], rank: int, window: int | None = None) -> dict[str, np.ndarray]:
    """A file's columns with its rank (and window) in place of rank 0 (window 0)."""
    out = {**columns, S.RANK: np.full(len(columns[S.RANK]), rank, columns[S.RANK].dtype)}
    if window is not None:
        out[S.WINDOW] = np.full(len(columns[S.WINDOW]), window, columns[S.WINDOW].dtype)
    return out
