"""The table and header of `traceattr summarize PATH` (and the report of `traceattr check PATH`) by per-file
map-reduce, one per run under PATH.

Every level's table and header (the `check:` line included, analysis/check_plan.py) from small
per-file aggregates: the driver never holds the traces. Several runs under one folder (io/runs.py) are told apart from the files' header facts,
as load_runs does, and each run is mapped again over its own files (the file cache serves them when on):
one table and header per run, never merged.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from traceattr import schema as S
from traceattr.analysis import summary_plan as M
from traceattr.analysis import check_plan
from traceattr.analysis.check import CheckReport
from traceattr.analysis.findings import CARRIED_IN
from traceattr.analysis.findings_part import EXTRACT as FINDINGS_EXTRACT
from traceattr.analysis.header import with_carried_in
from traceattr.analysis.roofline import PeakOverride, with_roofline
from traceattr.analysis.clip_plan import check_and_clip
from traceattr.engine.runner import Runner
from traceattr.io.cache import FileCache
from traceattr.io.cluster import executor_pool
from traceattr.io.discover import discover
from traceattr.io.parallel import as_executor, successes
from traceattr.io.runs import SeveralRunsError
from traceattr.io.spill import spill_folder
from traceattr.model.traceset import TraceSet
from traceattr.analysis.across import across_ranks
from traceattr.analysis.iteration import ACROSS_RANKS as ITERATION_ACROSS, in_start_order

# per-rank values a level's table holds, and how they go over ranks (every other number is summed)
_ACROSS = {"step": dict(rank_values=(S.DURATION_NS,)), "iteration": ITERATION_ACROSS}


@dataclass(frozen=True)
class RunReport:
    name: str                  # the run's folder relative to the path ("." for the path itself)
    table: pd.DataFrame
    header: dict


def report_runs(path: str, *, by: str = "kernel", top: int | None = None, tree: bool = False,
                links: bool = False, across: bool = False, skip_bad: bool = False,
                rank_map: dict[str, int] | None = None, jobs: int | None = None, scheduler: str | None = None,
                executor: Any = None, cache: bool = True, cache_dir: str | None = None,
                progress: bool = False, comm_patterns: tuple[str, ...] = (),
                exclude_carried_in: bool = False, peaks: PeakOverride = PeakOverride()) -> list[RunReport]:
    """One RunReport per run under `path`. `across`: a table of several ranks gets one row per key over
    all ranks (analysis/across.py). The header's `source` says how many files were decoded or cached.
    `comm_patterns`: --comm-pattern, applied to each file first; `exclude_carried_in`: activities launched
    before the window left out of every total (attribution/carried.py); `peaks`: the roof of --by shape."""
    extracts = M.level_extracts(by) + (check_plan.EXTRACT, FINDINGS_EXTRACT)
    plan = M.Plan(by=by, links=links, extracts=extracts,
                  comm_patterns=tuple(comm_patterns), exclude_carried_in=exclude_carried_in)
    with reduced_runs(path, plan, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, scheduler=scheduler,
                      executor=executor, cache=cache, cache_dir=cache_dir, progress=progress) as (runs, runner, seen):
        return [_report(name, reduced, runner, by, top, tree, links, across, seen.source(cache), peaks)
                for name, reduced in runs]


def check_files(path: str, skipped_of, *, clip: bool = False, rank_map: dict[str, int] | None = None,
                jobs: int | None = None, scheduler: str | None = None, executor: Any = None, cache: bool = True,
                cache_dir: str | None = None,
                progress: bool = False) -> list[tuple[str, CheckReport, pd.DataFrame | None]]:
    """`traceattr check PATH` by map-reduce: (run name, its CheckReport, with `clip` the clip table
    (clip_plan.py) else None) per run, files that cannot be read skipped; `skipped_of(notes)`: the
    (path, problem) pairs of the load notes. `path` may be a TraceSet or a store: one run, "."."""
    # links: cpu ops kept, as load(); the link table (summarize --links') is not part of the check: at 1,024
    # ranks its frame, relabelled and sorted, was 6 MiB of the driver's peak
    plan = M.Plan(links=True, link_table=False, extracts=(check_plan.EXTRACT,))
    with reduced_runs(path, plan, skip_bad=True, rank_map=rank_map, jobs=jobs, scheduler=scheduler,
                      executor=executor, cache=cache, cache_dir=cache_dir, progress=progress) as (runs, runner, _):
        if clip:
            return [(name, *check_and_clip(reduced, runner, skipped_of(reduced.notes))) for name, reduced in runs]
        return [(name, check_plan.check_report(reduced, runner, skipped=skipped_of(reduced.notes)),
                 None) for name, reduced in runs]


@contextlib.contextmanager
def reduced_runs(path: str, plan: M.Plan, *, skip_bad: bool, rank_map, jobs, scheduler=None, executor=None,
                 cache: bool = True, cache_dir: str | None = None, progress: bool = False):
    """([(run name, Reduced)], the Runner, what was seen) of the files under `path`, with the executor
    still open for second maps. A parquet store (`traceattr convert`) holds its tables whole: it is read, and
    the plan maps its files in memory (engine.runner.TraceSetRunner)."""
    if not isinstance(path, TraceSet):      # a TraceSet holds its files: nothing to walk
        path = discover(path)         # the command's one walk when it gave one; each file's stat goes with it
    held = M.held_source(path)
    if held is not None:
        reduced, runner = M.reduce_plan(held, plan)
        yield [(".", reduced)], runner, _StoreSeen(str(path))
        return
    with contextlib.ExitStack() as stack:
        executor = stack.enter_context(executor_pool(executor, scheduler))
        file_cache = FileCache(cache_dir) if cache else None
        paths = path.trace_files()
        # cache off, several files: the later maps (the imbalance's ranks, the straggler's cause, the check's
        # medians, each run of several) read map 1's spill (io/spill.py), never decoding a file twice
        spill = stack.enter_context(spill_folder(not cache and len(paths) > 1))
        runner = Runner(jobs, as_executor(executor), str(file_cache.dir.root) if file_cache else None, progress,
                        path, spill_folder=spill)
        notes: list[str] = list(path.notes)
        plan, paths, graph_notes = M.with_graph_captures(runner, path, paths, plan)
        notes += graph_notes
        stack.enter_context(runner.reducing_only(len(paths)))
        seen, split = _Seen(skip_bad, notes), ()
        try:
            if runner.folds(len(paths)):     # a pool or Dask: the files fold into states where they are mapped
                pile = runner.fold(paths, plan.task(), functools.partial(M._Pile, plan.extracts))
                seen.folded(pile)
                runs = [(".", M.reduce_pile(pile, skip_bad=skip_bad, rank_map=rank_map, origin=str(path),
                                            notes=notes))]
            else:
                with contextlib.closing(runner.map(paths, plan.task())) as results:
                    runs = [(".", _reduce(seen.watch(results), plan, skip_bad, rank_map, str(path), notes))]
        except SeveralRunsError as several:
            runs, split = None, several.split       # its members: positions among the files seen
        if runs is None:       # map each run's files again: never merged, and no aggregate is held twice
            runs = []
            for run in split:
                members = [seen.paths[i] for i in run.members]
                with contextlib.closing(runner.map(members, plan.task(), always_pool=len(paths) > 1)) as results:
                    runs.append((run.name, _reduce(results, plan, skip_bad, rank_map, str(Path(path) / run.name),
                                                   list(seen.notes))))
        yield [(name, M.with_unused_captures(plan, reduced)) for name, reduced in runs], runner, seen


@dataclass(frozen=True)
class _StoreSeen:
    path: str

    def source(self, cache: bool) -> str:
        return f"parquet store {self.path}"


class _Seen:
    """Watches the map results on their way to the reduce: the path of each file (to map each run again
    when they are several), the notes of skipped files, and how many files the cache served."""

    def __init__(self, skip_bad: bool, notes: list[str]) -> None:
        self.skip_bad, self.notes = skip_bad, notes
        self.paths: list[str] = []
        self.decoded = self.cached = 0

    def source(self, cache: bool) -> str:
        return M.source_of(self, cache)

    def folded(self, pile) -> None:
        """What a cluster's fold saw: the files read, in order, and how many the cache served."""
        self.paths = [fact.path for fact in pile.all_facts(keep=True) if fact is not None]
        self.cached, self.decoded = pile.cached, len(self.paths) - pile.cached

    def watch(self, results):
        for result in successes(results, self.skip_bad, self.notes):
            self.cached += result.from_cache
            self.decoded += not result.from_cache
            self.paths.append(result.path)
            yield result


def _reduce(results, plan: M.Plan, skip_bad: bool, rank_map, origin: str, notes: list[str]) -> M.Reduced:
    return M.reduce_files(results, skip_bad=skip_bad, rank_map=rank_map, origin=origin, extracts=plan.extracts,
                          notes=notes)


def _report(name: str, reduced: M.Reduced, runner: Runner, by: str, top, tree: bool, links: bool,
            across: bool, source: str, peaks: PeakOverride = PeakOverride()) -> RunReport:
    check, carried = check_plan.check_facts(reduced, runner)
    if links:
        table = reduced.link_report
        header = M.header_for(reduced, pd.DataFrame(), by="links", check=check)
    else:
        ranks = sorted(set(reduced.files.column(S.RANK).to_pylist()))
        if across and len(ranks) > 1:
            # by shape the rates follow the sums over ranks: computed after them; a step's wall time is one per
            # rank: its mean over the ranks that ran the step
            per_rank = by in M.TOP_PER_RANK      # --by iteration: each rank's longest, then over ranks
            table = across_ranks(M.table_of(reduced, by, top if per_rank else None, tree, coded=True, peaks=None),
                                 None if per_rank else top, ranks,
                                 **_ACROSS.get(by, {}))
            if by == "shape":
                table = with_roofline(table, peaks)
            if by == "iteration":
                table = in_start_order(table)
        else:
            table = M.table_of(reduced, by, top, tree, peaks=peaks)
        header = M.header_for(reduced, table, by, runner, check=check, extra={CARRIED_IN: carried})
    header = with_carried_in(header, *carried)
    header["source"] = source
    return RunReport(name, table, header)
