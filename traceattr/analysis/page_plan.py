"""The HTML report's header and tables (analysis/page.py) by per-file map-reduce: `traceattr report` never
holds the traces, at any rank count.

  map 1, every file   the rank level of analysis/summary_plan.py (sweep groups, steps, device spans) with the
                      communication extract of multirank_plan.py (whose rows the check line reads too), the
                      check line's extract (check_plan.py), the kernel sums and the op, module, step and
                      shape attribution parts of the file (cpu ops and python frames kept for them), and the
                      critical path of its steps (analysis/page_critical.py)
  driver              the rank table with its multi-rank columns and the header (a second small map over the
                      straggler's files, as `summarize --by rank`); the kernel, category, op, module and step
                      tables from the reduced sums and merged parts, bit for bit as on the TraceSet
  map 2, every file   the utilisation timeline: its bins span the run's earliest window start to its latest
                      window end, known only after map 1 (read from the file cache when it is on, else
                      from the command's spill of map 1: io/spill.py; no file is decoded twice)

The timeline is a picture of float shares: summed over a rank's windows it can differ from the TraceSet's
one-pass integral in the last bits; every table and header number is exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceattr import schema as S
from traceattr.analysis import summary_plan as M
from traceattr.analysis import check_plan
from traceattr.analysis.findings import FINDINGS
from traceattr.analysis.findings_part import EXTRACT as FINDINGS_EXTRACT
from traceattr.analysis.attribute import attribution_part, merge_parts
from traceattr.analysis.multirank_plan import COMM, COMM_EXTRACT, comm_table
from traceattr.analysis.across import across_ranks
from traceattr.analysis.page import TIMELINE_BINS, PageData
from traceattr.analysis.page_critical import EXTRACT as CRITICAL_EXTRACT, NAME as CRITICAL
from traceattr.analysis.roofline import PeakOverride, with_roofline
from traceattr.analysis.run_tables import reduced_runs
from traceattr.analysis.summarize import kernel_sums
from traceattr.analysis.timeline import BIN, bin_edges, binned_at, empty_bins
from traceattr.io.cache import FileCache
from traceattr.io.cluster import executor_pool
from traceattr.engine.columns import concat_columns, numpy_columns
from traceattr.engine.partial import Partial, listed
from traceattr.engine.runner import TraceSetRunner
from traceattr.io.parallel import successes
from traceattr.io.spill import spill_folder
from traceattr.model.traceset import TraceSet

PARTS = ("op", "module", "step", "shape")      # attribution levels of the page (shape: its roofline)
TABLES = "page tables"                # the Extracts' names
TIMELINE = "page timeline"


def file_tables(traceset: TraceSet) -> dict:
    """Map 1's extract: one file's kernel sums and attribution parts (rank 0)."""
    has_device = traceset.device.num_rows > 0
    return {"kernels": numpy_columns(kernel_sums(traceset)) if has_device else None,
            "parts": {level: attribution_part(traceset, level) for level in PARTS}}


def reduce_tables(found: list) -> dict:
    """Kernel sums and merged parts of every kept file, with their ranks."""
    rank_of = np.array([rank for rank, _, _ in found] + [-1], dtype=np.int64)
    kernels = [M.tagged(one["kernels"], i) for i, (_, _, one) in enumerate(found) if one["kernels"] is not None]
    merged = {}
    for level in PARTS:
        parts = [M.tagged(one["parts"][level], i) for i, (_, _, one) in enumerate(found)]
        merged[level] = M.relabeled_part(merge_parts(parts), rank_of) if parts else None
    frame = M.relabeled(concat_columns(kernels), rank_of) if kernels else None
    return {"kernels": pa.Table.from_pandas(frame, preserve_index=False) if frame is not None else None,
            "parts": merged}


def file_timeline(traceset: TraceSet, t0: int, edges: np.ndarray) -> dict[str, np.ndarray]:
    """Map 2's extract: one file's share of the run's timeline bins, per category."""
    binned = binned_at(traceset, t0, edges)
    return {str(category): rows.sort_values(BIN)[S.SELF_NS].to_numpy(np.float64)
            for category, rows in binned.groupby(S.CATEGORY)}


EXTRACTS = (COMM_EXTRACT, check_plan.EXTRACT_WITHOUT_COMM, Partial(TABLES, file_tables, listed(reduce_tables)),
            FINDINGS_EXTRACT, CRITICAL_EXTRACT)


class TimelinePile:
    """Map 2's pile: each file's bins added to its rank's as it arrives (the ranks are known by then), so
    the driver holds one row of bins per (rank, category), not each file's."""

    def __init__(self, rank_of: np.ndarray) -> None:
        self.rank_of = rank_of
        self.sums: dict[tuple[int, str], np.ndarray] = {}

    def update(self, index: int, found: dict[str, np.ndarray]) -> None:
        for category, values in found.items():
            key = (int(self.rank_of[index]), sys.intern(category))
            self.sums[key] = values.copy() if key not in self.sums else self.sums[key] + values

    def combine(self, other: "TimelinePile") -> None:
        for key, values in other.sums.items():
            self.sums[key] = values.copy() if key not in self.sums else self.sums[key] + values

    def finalize(self, placement=None) -> pd.DataFrame:
        if not self.sums:
            return empty_bins()
        keys = sorted(self.sums)
        bins = len(self.sums[keys[0]])
        categories = np.repeat(np.array([category for _, category in keys], object), bins)
        return pd.DataFrame({S.RANK: np.repeat([rank for rank, _ in keys], bins),
                             S.CATEGORY: pd.Series(categories, dtype=object),
                             BIN: np.tile(np.arange(bins), len(keys)),
                             S.SELF_NS: np.concatenate([self.sums[key] for key in keys])})


def page_data_files(path, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
                    jobs: int | None = None, executor: Any = None, scheduler: str | None = None,
                    cache: bool = True, cache_dir: str | None = None,
                    progress: bool = False, peaks: PeakOverride = PeakOverride()) -> tuple[PageData, str]:
    """(PageData, source line) of the one run under `path` (a path of several runs raises, as load; a
    parquet store's files are mapped from its tables). `peaks`: the roofline's roof instead of the
    device's (--peak-tflops / --peak-tbps)."""
    file_cache = FileCache(cache_dir) if cache else False
    # cache off: map 2 (the timeline) and the straggler's and check's maps read map 1's spill (io/spill.py)
    with executor_pool(executor, scheduler) as executor, spill_folder(not cache) as spill:
        reduced, runner = M.reduce_path(path, by="rank", skip_bad=skip_bad, rank_map=rank_map, jobs=jobs,
                                        executor=executor, cache=file_cache, progress=progress, extracts=EXTRACTS,
                                        keep_host=True, spill=spill)
        source = f"parquet store {path}" if isinstance(runner, TraceSetRunner) else M.source_of(reduced, cache)
        return _page_data(reduced, runner, peaks), source


def page_data_runs(path, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
                   jobs: int | None = None, executor: Any = None, scheduler: str | None = None,
                   cache: bool = True, cache_dir: str | None = None, progress: bool = False,
                   peaks: PeakOverride = PeakOverride()) -> tuple[list[tuple[str, PageData]], str]:
    """([(run name, PageData)], source line) of the runs under `path`: [(".", the page data)] for one run,
    as page_data_files gives it; for a folder of several runs (io/runs.py) each run's own, its files
    mapped again per run as summarize's runs are (run_tables.reduced_runs), never merged."""
    plan = M.Plan(by="rank", extracts=M.level_extracts("rank") + EXTRACTS, keep_host=True)
    with reduced_runs(path, plan, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, scheduler=scheduler,
                      executor=executor, cache=cache, cache_dir=cache_dir, progress=progress) as (runs, runner, seen):
        source = seen.source(cache)
        return [(name, _page_data(reduced, runner, peaks)) for name, reduced in runs], source


def _page_data(reduced: M.Reduced, runner, peaks: PeakOverride = PeakOverride()) -> PageData:
    rank_table = comm_table(reduced, runner, "rank")
    check = check_plan.check_line(reduced, runner, comm=reduced.extracts[COMM].frame)
    header = M.header_for(reduced, rank_table, "rank", runner, check=check)
    device_rows = int(reduced.groups[S.ACTIVITIES].sum())
    timeline, edges = _timeline(reduced, runner) if device_rows else (empty_bins(), np.zeros(1))
    tables = reduced.extracts[TABLES]
    with_sums = dataclasses.replace(reduced, kernels=tables["kernels"])
    levels = {level: M.table_of(with_sums, level) for level in ("kernel", "category")}
    levels.update((level, M.table_of(dataclasses.replace(reduced, part=tables["parts"][level]), level))
                  for level in PARTS if level != "shape")
    ranks = tuple(sorted(set(reduced.files.column(S.RANK).to_pylist())))
    # the roofline's rates from the sums over ranks, as `summarize --by shape --across-ranks`
    per_rank = M.table_of(dataclasses.replace(reduced, part=tables["parts"]["shape"]), "shape", coded=True, peaks=None)
    shapes = with_roofline(across_ranks(per_rank, None, ranks), peaks)
    return PageData(header, rank_table, ranks, device_rows, levels, timeline, edges,
                    findings=list(header.get(FINDINGS, [])), shapes=shapes, critical=reduced.extracts[CRITICAL],
                    peaks=peaks)


def _timeline(reduced: M.Reduced, runner) -> tuple[pd.DataFrame, np.ndarray]:
    """Map 2 over the kept files (which hold device rows): the timeline's rows and bin edges."""
    files = reduced.files
    t0, edges = bin_edges(files, TIMELINE_BINS)
    paths = files.column(S.PATH).to_pylist()
    new_pile = functools.partial(TimelinePile, np.asarray(files.column(S.RANK).to_pylist(), np.int64))
    extract = Partial(TIMELINE, functools.partial(file_timeline, t0=t0, edges=edges), new_pile)
    pile, position = new_pile(), {path: i for i, path in enumerate(paths)}
    with contextlib.closing(runner.map(paths, M.Plan(by="kernel", extracts=(extract,)).task())) as results:
        for result in successes(results, False, []):
            pile.update(position[result.path], result.extracts[TIMELINE])
    return pile.finalize(), edges
