"""The multi-rank answers by per-file map-reduce: `summarize --by rank` (wait/transfer, late arrivals, wait
caused, clock offsets, the straggler and its cause), `--by collective` (instances, --aggregate, --top), with
`--comm-pattern` and `--no-align` (rank_comm.py, collectives.py, straggler.py), while the driver never
holds a trace: its memory is bounded by one file at any rank count.

  map 1, every file     the sweep groups and header facts (summary_plan.py) and comm_extract(): one small row per
                        communication activity (rank, device, kind, group, seq, bytes, start/end, self ns),
                        with the user's comm patterns applied to the file first, and the elementary segments
                        each row spans (attribution/cut.py's profile: a few points per row)
  driver                match_extract(): collectives matched across ranks, clocks aligned, instances; then per
                        activity the cut time (the last participant's arrival, in the rank's own clock), its
                        exact wait/transfer split from the profile, and the straggler with its median rank and
                        the intervals before its late collectives
  map 2, few files      split_file(): the straggler's and the median rank's files, for the measures of the
                        cause over the intervals in each file (straggler.measures_of), and the files whose
                        profile was too large to send (communication overlapping very many activities), for
                        their split; read from the file cache when it is on
  reduce                the straggler's measures summed over its files, then the tables
                        (rank_comm.multirank_columns, collectives.collectives_table, straggler.with_cause)

The collective table needs neither the split nor map 2 (wait and skew of an instance come from arrivals).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.allocator import heap_holes_returned
from traceattr.analysis.collectives import (ROW, SHARED_TEXTS, collectives_table, comm_columns, comm_extract,
                                            comm_frame, comm_ordered, cut_times, match_extract, with_split)
from traceattr.analysis.fold import check_top
from traceattr.analysis.header import with_carried_in
from traceattr.analysis.findings_part import EXTRACT as FINDINGS_EXTRACT
from traceattr.analysis.summary_plan import UNUSED_HOST, Plan, Reduced, header_for, reduce_path
from traceattr.analysis.rank_comm import multirank_columns
from traceattr.analysis.straggler import Straggler, measures_of, straggler_spans, sum_measures, with_cause
from traceattr.analysis.summarize import rank_table
from traceattr.attribution.cut import CutProfile, compact, cut_profile, split_profile, split_self, with_lengths
from traceattr.engine.columns import Chunks, narrowest, numpy_columns, owned_columns, placed_rows
from traceattr.engine.partial import Partial
from traceattr.engine.placement import Placement
from traceattr.engine.runner import Runner
from traceattr.engine.units import Unit, UnitTask
from traceattr.io.codes import shared_texts
from traceattr.io.comm_rules import compile_patterns
from traceattr.io.parallel import successes
from traceattr.io.spill import spill_folder
from traceattr.model.traceset import TraceSet
from traceattr.analysis import check_plan
from traceattr.analysis.run_tables import RunReport, reduced_runs

LEVELS = ("rank", "collective")
COMM = "communication activities"      # the Partial's name


# --- map 1: the per-file extract ---------------------------------------------------------------------

PROFILE_POINTS_PER_ROW = 16     # a file sends its cut profile when it is at most this many points per row on
#   average (12 bytes each: no larger than the rows themselves); beyond that, map 2 splits its rows
CUT_FIRST, CUT_STOP = "cut_first", "cut_stop"     # a row's points in the profile (-1: cut in map 2)
TIMES, RUNNING = "times", "running"                # a profile's points (CutProfile's) as the driver piles them
_UNUSED = (S.NAME, S.COLLECTIVE, S.CORRELATION)    # comm_extract columns the reduce never reads (kind has them)


@dataclass
class FileComm:
    columns: dict[str, np.ndarray]      # comm_extract of the file (rank 0, window 0)
    profile: CutProfile | None          # compact cut profile of those rows, None when too large


@dataclass
class CommExtract:
    frame: pd.DataFrame                 # comm_extract of the whole TraceSet, plus CUT_FIRST and CUT_STOP
    points: CutProfile                  # every sent profile's points, no lengths (cut.with_lengths)


def file_extract(traceset: TraceSet) -> FileComm:
    """comm_extract of one file as numpy columns for the trip to the driver (each text, the same few on
    every row, is one object, pickled once), and the segments each row spans, so that the driver can split
    it at any cut without a second pass over the file: a few points per row, unless the file's
    communication overlaps so many other activities that the profile would outgrow the rows."""
    columns = {name: column for name, column in _extract_columns(traceset).items() if name not in _UNUSED}
    for name, column in columns.items():
        if column.dtype == object and len(column):
            columns[name] = shared_texts(column)
    profile = compact(cut_profile(traceset, columns[ROW])) if len(columns[ROW]) else None
    if profile is not None and len(profile.times) > PROFILE_POINTS_PER_ROW * len(columns[ROW]):
        profile = None
    return FileComm(columns, profile)


def _extract_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """numpy_columns(comm_extract(traceset)); a file without communication (most files of a small-file run)
    takes the empty extract's columns, made once, not a frame of its own (2 ms a file)."""
    columns = comm_columns(traceset)
    if len(columns[ROW]):
        return numpy_columns(comm_frame(columns))
    return {name: values.copy() for name, values in _no_communication().items()}


@functools.lru_cache(maxsize=1)
def _no_communication() -> dict[str, np.ndarray]:
    return numpy_columns(comm_extract(TraceSet.empty()))


class CommPile:
    """Each file's communication rows on the driver (its Partial's state, engine/partial.py), tagged with the file's
    position, and the sent profiles' points, both in summary_plan.Chunks (the points' running counts narrowed:
    at 1024 ranks the points are hundreds of thousands, and profiles concatenated as CutProfiles held them
    as int64 three times over, 8 MB)."""

    def __init__(self) -> None:
        self.parts = Chunks()
        self.points = Chunks()
        self.point_count = 0            # points of the profiles so far: where the next file's start
        self.files = 0

    def update(self, index: int, found: FileComm) -> None:
        n = len(found.columns[S.RANK])
        where = {CUT_FIRST: np.full(n, -1, np.int64), CUT_STOP: np.full(n, -1, np.int64)}
        if found.profile is not None:
            where = {CUT_FIRST: found.profile.first + self.point_count, CUT_STOP: found.profile.stop + self.point_count}
            self.points.append(owned_columns({TIMES: found.profile.times, RUNNING: narrowest(found.profile.running)}))
            self.point_count += len(found.profile.times)
        self.parts.append({**owned_columns(found.columns), S.RANK: np.full(n, index, np.int64), **where})
        self.files += 1

    def combine(self, other: "CommPile") -> None:
        """Take the files of `other` (a state of the files after this one's): its rows' places in the
        profiles' points move by the points held here."""
        columns = other.parts.whole()
        if columns is not None:
            for name in (CUT_FIRST, CUT_STOP):
                columns[name] = np.where(columns[name] >= 0, columns[name] + self.point_count, columns[name])
            self.parts.append(columns)
        self.points.combine(other.points)
        self.point_count += other.point_count
        self.files += other.files

    def finalize(self, placement: Placement) -> CommExtract:
        """The comm_extract of the whole TraceSet (its `row` stays the activity's row in its own file's
        device table) and the profiles' points."""
        rank_of, window_of = placement.rank_of, placement.window_of
        points, self.points = self.points.whole(), Chunks()      # the pile is done: its chunks go first
        if points is None:
            points = {TIMES: np.zeros(0, np.int64), RUNNING: np.zeros(0, np.int32)}
        if not (rank_of[:self.files] >= 0).any():
            none = np.zeros(0, np.int64)
            return CommExtract(comm_extract(TraceSet.empty()).assign(**{CUT_FIRST: -1, CUT_STOP: -1}),
                               CutProfile(points[TIMES], points[RUNNING], None, none, none))
        columns, self.parts = self.parts.whole(), Chunks()
        sent = columns[CUT_FIRST] >= 0
        profile = CutProfile(points[TIMES], points[RUNNING], None, columns[CUT_FIRST][sent], columns[CUT_STOP][sent])
        kept = placed_rows(columns, rank_of, window_of)
        # the shared texts stay one object per distinct value, as comm_frame keeps them: inferred as arrow
        # strings, each row copied its Process Group Ranks (5 KB at 1024 ranks: +330 KB a file on the driver)
        return CommExtract(comm_ordered(columns, kept, SHARED_TEXTS), profile)


COMM_EXTRACT = Partial(COMM, file_extract, CommPile)


# --- map 2: the wait/transfer split and the straggler's measures of one file -------------------------

@dataclass
class FileSplit:
    wait: np.ndarray            # per requested row: self ns before its cut
    transfer: np.ndarray        # and after it (wait + transfer == the row's self ns)
    measures: dict | None       # straggler.measures_of over this file's intervals, when asked


def split_work(unit: Unit, *, rows: np.ndarray, cuts: np.ndarray, spans: tuple | None) -> FileSplit:
    """Map 2 on one file (a worker): split its communication rows `rows` (its own device rows) at `cuts`,
    and measure the straggler's cause over `spans` when given."""
    wait, transfer = split_self(unit.traceset, rows, cuts)
    return FileSplit(wait, transfer, measures_of(unit.traceset, 0, spans) if spans is not None else None)


# --- the driver ----------------------------------------------------------------------------------------

@dataclass
class CommReduced:
    reduced: Reduced
    runner: Runner
    table: pd.DataFrame


def comm_tables(path, *, by: str, top: int | None = None, aggregate: bool = False, align: bool = True,
                comm_patterns=(), host_dropped: tuple[str, ...] = (), skip_bad: bool = False,
                rank_map: dict[str, int] | None = None, jobs: int | None = None, executor: Any = None,
                cache=True, progress: bool = False) -> CommReduced:
    """The `--by rank` (with the multi-rank columns and attrs facts/notes) or `--by collective` table of the
    traces under `path`, by map-reduce. `host_dropped`: host categories left out of the straggler's files
    (the CLI drops python frames, traceattr.load keeps them: the cause's modules come from them)."""
    comm_patterns = check_request(by, top, comm_patterns)
    reduced, runner = reduce_path(path, by=by, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, executor=executor,
                                  cache=cache, progress=progress, extracts=(COMM_EXTRACT,), comm_patterns=comm_patterns)
    table = comm_table(reduced, runner, by, top=top, aggregate=aggregate, align=align, comm_patterns=comm_patterns,
                       host_dropped=host_dropped)
    return CommReduced(reduced, runner, table)


def comm_straggler(path, *, align: bool = True, comm_patterns: tuple[str, ...] = (), skip_bad: bool = False,
                   rank_map: dict[str, int] | None = None, jobs: int | None = None, executor: Any = None,
                   cache=True, progress: bool = False) -> Straggler:
    """The straggler and its cause of the traces under `path` (or of a loaded TraceSet), by map-reduce: the
    files' communication extracts matched on the driver, and the straggler's and the median rank's files
    mapped again to measure the cause."""
    comm_patterns = check_request("rank", None, comm_patterns)
    with spill_folder(not cache) as spill:      # the cause's map reads the two ranks' files from it
        reduced, runner = reduce_path(path, by="rank", skip_bad=skip_bad, rank_map=rank_map, jobs=jobs,
                                      executor=executor, cache=cache, progress=progress, extracts=(COMM_EXTRACT,),
                                      comm_patterns=comm_patterns, spill=spill)
        return straggler(reduced, runner, align=align, comm_patterns=comm_patterns)


def check_request(by: str, top: int | None, comm_patterns) -> tuple[str, ...]:
    """The request's problems, before any trace is read; the patterns as a tuple."""
    if by not in LEVELS:
        raise ValueError(f"multirank_plan answers {LEVELS}, not {by!r}")
    check_top(top)
    compile_patterns(comm_patterns)
    return tuple(comm_patterns)


def comm_table(reduced: Reduced, runner: Runner, by: str, *, top: int | None = None, aggregate: bool = False,
               align: bool = True, comm_patterns: tuple[str, ...] = (),
               host_dropped: tuple[str, ...] = ()) -> pd.DataFrame:
    """comm_tables' table from files reduced with COMM_EXTRACT in the plan (and the same comm_patterns);
    `runner` runs map 2."""
    loaded = set(reduced.files.column(S.RANK).to_pylist())
    extract = reduced.extracts[COMM]
    keyed, instances, alignment, notes = match_extract(extract.frame, loaded, align)
    heap_holes_returned()       # the matching's heap holes before the split's arrays (command: -0.5 MB at 1024 ranks)
    if by == "collective":      # instances need arrivals only, never the split
        found = with_split(keyed, instances, alignment, notes, *_unsplit(keyed))
        return collectives_table(found, top=top, aggregate=aggregate, align=align)
    found, verdict = _split_and_verdict(reduced, runner, (keyed, instances, alignment, notes), comm_patterns,
                                        host_dropped)
    return multirank_columns(rank_table(reduced.groups, reduced.files, reduced.spans), found, verdict, align)


def straggler(reduced: Reduced, runner: Runner, *, align: bool = True, comm_patterns: tuple[str, ...] = (),
              host_dropped: tuple[str, ...] = ()) -> Straggler:
    """The straggler and its cause (analysis/straggler.py) of files reduced with COMM_EXTRACT in the plan."""
    loaded = set(reduced.files.column(S.RANK).to_pylist())
    matched = match_extract(reduced.extracts[COMM].frame, loaded, align)
    return _split_and_verdict(reduced, runner, matched, comm_patterns, host_dropped)[1]


def _split_and_verdict(reduced: Reduced, runner: Runner, matched: tuple, comm_patterns: tuple[str, ...],
                       host_dropped: tuple[str, ...]):
    """(the matched collectives with their wait/transfer split, the straggler with its cause): map 2."""
    keyed, instances, alignment, notes = matched
    cuts = cut_times(keyed, instances, alignment)
    # the verdict reads the unsplit figures; the split below overwrites them in place (no copy of the rows:
    # at 1024 ranks it was the top of the driver's peak)
    verdict, spans = straggler_spans(with_split(keyed, instances, alignment, notes, *_unsplit(keyed)), reduced.files,
                                     reduced.steps)
    wait, transfer, measures = _map_split(reduced, runner, keyed, reduced.extracts[COMM].points, cuts, spans or {},
                                          comm_patterns, host_dropped)
    found = with_split(keyed, instances, alignment, notes, wait, transfer)
    if spans is not None:
        verdict = with_cause(verdict, {rank: sum_measures(measures.get(rank, [])) for rank in spans})
    return found, verdict


def _unsplit(keyed: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(wait, transfer) of activities not cut after their start: no wait, all self time transfer."""
    return np.zeros(len(keyed), np.int64), keyed[S.SELF_NS].to_numpy(np.int64).copy()


def _map_split(reduced: Reduced, runner: Runner, keyed: pd.DataFrame, points: CutProfile, cuts: np.ndarray,
               spans: dict, comm_patterns: tuple[str, ...], host_dropped: tuple[str, ...]):
    """(wait, transfer) per activity of `keyed`, and the straggler's measures per rank (a list per file).
    Activities cut after their start are split here when their file sent its profile, else in map 2, which
    also measures the straggler's and the median rank's files."""
    wait, transfer = _unsplit(keyed)
    inside = cuts > keyed[S.START_NS].to_numpy(np.int64)
    here = np.flatnonzero(inside & (keyed[CUT_FIRST].to_numpy(np.int64) >= 0))
    points = with_lengths(points)
    profile = CutProfile(points.times, points.running, points.length, keyed[CUT_FIRST].to_numpy(np.int64)[here],
                         keyed[CUT_STOP].to_numpy(np.int64)[here])
    wait[here], transfer[here] = split_profile(profile, transfer[here], cuts[here])
    cut_inside = keyed[inside & (keyed[CUT_FIRST].to_numpy(np.int64) < 0)]
    positions = {key: np.asarray(labels, np.int64)
                 for key, labels in cut_inside.groupby([S.RANK, S.WINDOW]).groups.items()}
    files = reduced.files
    paths, tasks, where = [], [], []
    for path, rank, window in zip(files.column(S.PATH).to_pylist(), files.column(S.RANK).to_pylist(),
                                  files.column(S.WINDOW).to_pylist()):
        at = positions.get((rank, window), np.zeros(0, np.int64))
        in_window = spans[rank][3] == window if rank in spans else np.zeros(0, bool)
        mine = tuple(column[in_window] for column in spans[rank]) if in_window.any() else None
        if len(at) == 0 and mine is None:
            continue
        paths.append(path)
        where.append((rank, at))
        # `host_dropped`: the host categories the rank table leaves out (the cause names launching ops)
        tasks.append(UnitTask(functools.partial(split_work, rows=keyed[ROW].to_numpy(np.int64)[at], cuts=cuts[at],
                                                spans=mine),
                              drop_host=host_dropped if mine is not None else UNUSED_HOST,
                              comm_patterns=comm_patterns))
    measures: dict[int, list[dict]] = {}
    results = runner.map(paths, tasks, always_pool=files.num_rows > 1)
    with contextlib.closing(results):
        for (rank, at), result in zip(where, successes(results, False, [])):
            wait[at], transfer[at] = result.wait, result.transfer
            if result.measures is not None:
                measures.setdefault(rank, []).append(result.measures)
    return wait, transfer, measures


def comm_report_runs(path, by: str, *, top: int | None = None, aggregate: bool = False, align: bool = True,
                     comm_patterns=(), host_dropped: tuple[str, ...] = (), skip_bad: bool = False,
                     rank_map: dict[str, int] | None = None, jobs: int | None = None, scheduler: str | None = None,
                     executor: Any = None, cache: bool = True, cache_dir: str | None = None,
                     progress: bool = False, exclude_carried_in: bool = False) -> list:
    """`traceattr summarize PATH --by rank|collective` by map-reduce: a run_tables.RunReport per run
    under `path` (never merged), its header with the check line (analysis/check_plan.py)."""

    comm_patterns = check_request(by, top, comm_patterns)
    plan = Plan(by=by, extracts=(COMM_EXTRACT, check_plan.EXTRACT_WITHOUT_COMM, FINDINGS_EXTRACT),
                comm_patterns=comm_patterns, exclude_carried_in=exclude_carried_in)
    with reduced_runs(path, plan, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, scheduler=scheduler,
                      executor=executor, cache=cache, cache_dir=cache_dir, progress=progress) as (runs, runner, seen):
        reports = []
        for name, reduced in runs:
            table = comm_table(reduced, runner, by, top=top, aggregate=aggregate, align=align,
                               comm_patterns=comm_patterns, host_dropped=host_dropped)
            check, carried = check_plan.check_facts(reduced, runner, comm=reduced.extracts[COMM].frame)
            header = with_carried_in(header_for(reduced, table, by, runner, check=check), *carried)
            header["source"] = seen.source(cache)
            reports.append(RunReport(name, table, header))
        return reports


def comm_report(path, by: str, **options) -> tuple[pd.DataFrame, dict]:
    """(table, header) of the one run under `path` (comm_report_runs' options)."""
    (run, *others) = comm_report_runs(path, by, **options)
    if others:
        raise ValueError(f"{path} holds several runs: use comm_report_runs")
    return run.table, run.header
