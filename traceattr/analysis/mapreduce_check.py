"""check() by per-file map-reduce: the same CheckReport (rows and `.line()`) without building the TraceSet.

Every check but one is per file or reduces from small per-file facts:
* per file, in the map step: longer_than_window, outside_window, same_stream_overlap (check.py's own row
  code on the one-file TraceSet, relabelled on the driver), the ProfilerStep names, the communication
  activities (collectives.comm_extract, a few per step);
* on the driver: the loader rows (the files table), missing_ranks and step_sets_differ (check.run_rows),
  clock_skew (collectives.match_extract over every file's communication rows: check.skew_rows).

far_beyond_typical compares each compute kernel with its name's MEDIAN duration over the whole run (all
files, all categories of that name), which no per-file sum gives. Exactly, in two small maps:
1. per file and kernel name: a histogram of durations in log-spaced buckets (8 per octave, integer bounds),
   the count, and the longest compute instance;
2. the driver finds the bucket(s) of each name's median; the median is at least the lower bound L of its
   bucket, so a name can have a kernel over FAR_BEYOND_FACTOR x its median (and FAR_BEYOND_MIN_NS over it)
   only if its longest compute kernel is over FAR_BEYOND_FACTOR x L and FAR_BEYOND_MIN_NS over L. For
   those names only (usually none), a second map over the files holding them (served by the file cache when
   it is on) returns the durations inside the median bucket(s), which give the exact median, and the compute
   kernels over that bound with their device's busy time, which the driver then judges as check() does.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis import check as K
from traceattr.analysis.collectives import comm_columns, comm_frame
from traceattr.analysis.mapreduce import Extract, interned
from traceattr.attribution.sweep import sweep
from traceattr.io.codes import dictionary_codes
from traceattr.io.load import one_file
from traceattr.io.parallel import FileFailure, cached_decode_task, decode_files, successes
from traceattr.model.traceset import TraceSet

NAME = "check"                  # the Extract's name (Reduced.extracts[NAME])
SUB_BUCKETS = 8                 # histogram buckets per octave (bucket width 9%)
_LINEAR = 2 * SUB_BUCKETS       # durations below this many ns have a bucket each
_MAX_BUCKETS = 1024             # more than bucket_of gives for any int64 duration (_LINEAR + 60 octaves x 8)


@dataclass
class FileCheck:
    """What one file tells the check (rank 0, window 0 until the driver relabels it)."""
    path: str
    rows: list                      # check.COLUMNS rows of the per-file checks (no far_beyond_typical)
    names: np.ndarray               # device activity names (object), one per histogram row
    buckets: np.ndarray             # their duration bucket
    counts: np.ndarray              # activities of that name in that bucket
    compute_max: dict               # name -> longest compute kernel of that name (ns)
    shortest: int                   # the shortest duration (0 without activities; bucket 0's lower bound)
    steps: tuple                    # ProfilerStep names
    comm: dict | None               # collectives.comm_columns, None without communication

    def __post_init__(self) -> None:
        self._intern()

    def __setstate__(self, state: dict) -> None:
        """Unpickled in the driver: one copy of each text (kernel names repeat in every file)."""
        self.__dict__.update(state)
        self._intern()

    def _intern(self) -> None:
        self.names = interned(self.names)
        if self.comm is not None:
            self.comm = {c: interned(v) if v.dtype == object else v for c, v in self.comm.items()}


def bucket_of(duration: np.ndarray) -> np.ndarray:
    """Log-spaced bucket of each duration: one per ns below 16 (0 holds every duration <= 0), then
    SUB_BUCKETS per octave, by the three bits after the leading one (exact integer bounds)."""
    d = np.maximum(np.asarray(duration, dtype=np.int64), 0)
    top = np.frexp(d.astype(np.float64))[1].astype(np.int64) - 1        # floor(log2 d), exact below 2**53
    shift = np.maximum(top - 3, 0)
    mantissa = (d >> shift) & (SUB_BUCKETS - 1)
    return np.where(d < _LINEAR, d, _LINEAR + (top - 4) * SUB_BUCKETS + mantissa)


def lower_bound(bucket: int, shortest: int = 0) -> int:
    """The smallest duration bucket_of puts in `bucket` (bucket 0: `shortest`, the run's shortest duration,
    when negative: the loader clamps negative durations, tables built by hand may not)."""
    if bucket < _LINEAR:
        return min(shortest, 0) if bucket == 0 else bucket
    top, mantissa = 4 + (bucket - _LINEAR) // SUB_BUCKETS, (bucket - _LINEAR) % SUB_BUCKETS
    return (SUB_BUCKETS + mantissa) << (top - 3)


# --- map ---------------------------------------------------------------------------------------------

def check_extract(traceset: TraceSet, links: bool = False) -> FileCheck:
    """The map step of the check on a one-file TraceSet (mapreduce.Extract); `links`: with the unlinked
    rows (the file must keep its cpu ops)."""
    device = traceset.device
    path = traceset.files.column(S.PATH)[0].as_py()
    rows = K.file_rows(traceset, links)
    start = np.asarray(device.column(S.START_NS).to_numpy(), dtype=np.int64)
    duration = np.asarray(device.column(S.END_NS).to_numpy(), dtype=np.int64) - start
    dictionary, code = dictionary_codes(device.column(S.NAME))
    names = dictionary.to_numpy(zero_copy_only=False).astype(object)
    compute = np.asarray(pc.equal(device.column(S.CATEGORY), S.COMPUTE).to_numpy(zero_copy_only=False), bool)
    # numpy, not group-bys: this runs once per file. Histogram rows: (name code, bucket) -> count
    cells, counts = np.unique(code * _MAX_BUCKETS + bucket_of(duration), return_counts=True)
    longest = np.full(len(names), -1, np.int64)
    np.maximum.at(longest, code[compute], duration[compute])
    is_comm = pc.any(pc.equal(device.column(S.CATEGORY), S.COMMUNICATION)).as_py() if device.num_rows else False
    comm = comm_columns(traceset) if is_comm else None
    return FileCheck(path, rows, names[cells // _MAX_BUCKETS], cells % _MAX_BUCKETS, counts.astype(np.int64),
                     {name: int(ns) for name, ns in zip(names.tolist(), longest.tolist()) if ns >= 0},
                     int(duration.min(initial=0)),
                     tuple(sorted(K.step_sets(traceset).get(0, ()))),
                     comm)


# --- reduce ------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """A kernel name that may have far-beyond instances: where its median lies."""
    name: str
    below: int           # activities of this name in buckets below the median's
    first: int           # 0-based positions of the two middle durations (equal when the count is odd)
    second: int
    lower: int           # durations in [lower, upper) hold both middle ones
    upper: int


@dataclass
class CheckParts:
    """The reduced per-file facts: everything check() needs but the far-beyond rows' second map."""
    rows: list
    candidates: list[Candidate]
    files_of: dict[str, list[tuple[int, int, str]]]     # name -> (rank, window, path) of files holding it
    steps: dict[int, set[str]]
    comm: pd.DataFrame | None


def reduce_check(items: list) -> CheckParts:
    """Extract.reduce: [(rank, window, FileCheck)] in load order -> CheckParts."""
    rows, hist, longest, steps, comm, shortest = [], [], {}, {}, [], 0
    for index, (rank, window, found) in enumerate(items):
        rows += [(rank, window) + tuple(row[2:]) for row in found.rows]
        hist.append(pd.DataFrame({"file": np.int32(index), "name": found.names, "bucket": found.buckets,
                                  "count": found.counts}))
        for name, ns in found.compute_max.items():
            longest[name] = max(ns, longest.get(name, ns))
        steps.setdefault(rank, set()).update(found.steps)
        shortest = min(shortest, found.shortest)
        if found.comm is not None:
            size = len(found.comm[S.RANK])
            comm.append({**found.comm, S.RANK: np.full(size, rank, np.int32), S.WINDOW: np.full(size, window, np.int32)})
    hist = pd.concat(hist, ignore_index=True) if hist else None
    candidates = _candidates(hist, longest, shortest)
    files_of = {}
    if candidates:
        holding = hist[hist["name"].isin([c.name for c in candidates])].groupby("name")["file"].unique()
        files_of = {name: [(items[i][0], items[i][1], items[i][2].path) for i in sorted(found.tolist())]
                    for name, found in holding.items()}
    # one frame, as comm_extract of the whole TraceSet (files in load order, then sorted)
    comm = comm_frame({name: np.concatenate([c[name] for c in comm]) for name in comm[0]}) if comm else None
    return CheckParts(rows, candidates, files_of, dict(sorted(steps.items())), comm)


def _candidates(hist: pd.DataFrame | None, longest: dict[str, int], shortest: int) -> list[Candidate]:
    if hist is None or not longest:
        return []
    found = []
    counts = hist.groupby(["name", "bucket"], sort=True)["count"].sum()
    for name, per_bucket in counts.groupby(level=0, sort=False):
        if name not in longest:          # no compute kernel of this name: nothing can be flagged
            continue
        buckets = per_bucket.index.get_level_values(1).to_numpy(np.int64)
        cumulative = np.cumsum(per_bucket.to_numpy(np.int64))
        total = int(cumulative[-1])
        if total < K.TYPICAL_MIN_COUNT:
            continue
        first, second = (total - 1) // 2, total // 2
        at_first = int(np.searchsorted(cumulative, first, side="right"))
        at_second = int(np.searchsorted(cumulative, second, side="right"))
        lower = lower_bound(int(buckets[at_first]), shortest)
        top = longest[name]
        if not (top > K.FAR_BEYOND_FACTOR * lower and top - lower >= K.FAR_BEYOND_MIN_NS):
            continue
        below = int(cumulative[at_first - 1]) if at_first else 0
        found.append(Candidate(name, below, first, second, lower, lower_bound(int(buckets[at_second]) + 1)))
    return found


# --- the second map: exact medians and the kernels beyond them -------------------------------------

@dataclass
class Beyond:
    path: str
    middle: dict          # name -> durations in [lower, upper) (every category)
    kernels: pd.DataFrame  # compute kernels of candidate names over the bound: row, name, duration, busy


def beyond_task(path: str, shown_path: str | None = None, *, bounds: dict, cache_folder: str | None = None):
    """In a worker: one file's durations around the medians of `bounds` {name: (lower, upper)} and its
    compute kernels of those names that could be far beyond them."""
    decoded, _ = cached_decode_task(path, shown_path or path, cache_folder)
    if isinstance(decoded, FileFailure):
        return decoded
    traceset = one_file(decoded)
    device = traceset.device
    start = np.asarray(device.column(S.START_NS).to_numpy(), dtype=np.int64)
    duration = np.asarray(device.column(S.END_NS).to_numpy(), dtype=np.int64) - start
    names = device.column(S.NAME).to_numpy(zero_copy_only=False).astype(object)
    compute = np.asarray(pc.equal(device.column(S.CATEGORY), S.COMPUTE).to_numpy(zero_copy_only=False), bool)
    result = sweep(traceset)
    busy = result.groups[S.BUSY_NS].to_numpy(dtype=np.int64)[result.group_id]
    middle, kernels = {}, []
    for name, (lower, upper) in bounds.items():
        mine = names == name
        middle[name] = duration[mine & (duration >= lower) & (duration < upper)]
        over = mine & compute & (duration > K.FAR_BEYOND_FACTOR * lower) & (duration - lower >= K.FAR_BEYOND_MIN_NS)
        rows = np.flatnonzero(over)
        kernels.append(pd.DataFrame({"row": rows, "name": name, "duration": duration[rows], "busy": busy[rows]}))
    return Beyond(decoded.path, middle, pd.concat(kernels, ignore_index=True))


def beyond_rows(parts: CheckParts, runner) -> list[tuple]:
    """far_beyond_typical rows, as check() makes them, from a second map over the candidates' files."""
    if not parts.candidates:
        return []
    bounds = {c.name: (c.lower, c.upper) for c in parts.candidates}
    where = {}
    for name in bounds:
        for rank, window, path in parts.files_of[name]:
            where[path] = (rank, window)
    paths = list(where)
    task = functools.partial(beyond_task, bounds=bounds, cache_folder=runner.cache_folder)
    middle: dict[str, list] = {name: [] for name in bounds}
    kernels = []
    with contextlib.closing(decode_files(paths, jobs=runner.jobs, executor=runner.executor, task=task)) as results:
        for found in successes(results, False, []):
            for name, values in found.middle.items():
                middle[name].append(values)
            rank, window = where[found.path]
            kernels.append(found.kernels.assign(rank=rank, window=window, path=found.path))
    typical = {}
    for c in parts.candidates:
        values = np.sort(np.concatenate(middle[c.name]))
        low, high = values[c.first - c.below], values[c.second - c.below]
        typical[c.name] = int(np.round((np.float64(low) + np.float64(high)) / 2))   # pandas' median, rounded
    kernels = pd.concat(kernels, ignore_index=True)
    median = kernels["name"].map(typical).to_numpy(np.int64)
    duration = kernels["duration"].to_numpy(np.int64)
    beyond = kernels[(duration > K.FAR_BEYOND_FACTOR * median) & (duration - median >= K.FAR_BEYOND_MIN_NS)]
    beyond = beyond.assign(typical=median[beyond.index], dominant=beyond["duration"] > K.MOST * beyond["busy"])
    rows = []
    for (rank, window, path), mine in beyond.groupby(["rank", "window", "path"], sort=False):
        worst = mine.sort_values(["duration", "row"], ascending=[False, True], kind="stable").iloc[0]
        verdict, detail = K.beyond_verdict(worst["name"], np.int64(worst["duration"]), np.int64(worst["typical"]),
                                           np.int64(worst["busy"]), bool(mine["dominant"].any()))
        rows.append((int(rank), int(window), path, "far_beyond_typical", len(mine),
                     int((mine["duration"] - mine["typical"]).sum()), verdict, detail))
    return rows


def check_report(reduced, runner, links: bool = False, skipped=()) -> K.CheckReport:
    """check(TraceSet, links=links, skipped=skipped) of the files behind `reduced` (mapreduce.Reduced, its
    plan holding EXTRACT, or LINKS_EXTRACT with `links`); `runner` (mapreduce.Runner) runs the second map
    when a kernel may be far beyond typical."""
    parts: CheckParts = reduced.extracts[NAME]
    files = reduced.files
    ranks = sorted(set(files.column(S.RANK).to_pylist()))
    rows = K.skipped_rows(skipped) + list(parts.rows) + beyond_rows(parts, runner) + K.loader_rows(files)
    rows += K.run_rows(files, {rank: parts.steps.get(rank, set()) for rank in ranks})
    if len(ranks) >= 2 and parts.comm is not None:
        rows += K.skew_rows(parts.comm, ranks)
    paths = {(int(r), int(w)): p for r, w, p in zip(files.column(S.RANK).to_pylist(),
                                                  files.column(S.WINDOW).to_pylist(), files.column(S.PATH).to_pylist())}
    return K.report_of(rows, paths, links=links)


def check_extract_links(traceset: TraceSet) -> FileCheck:
    return check_extract(traceset, links=True)


EXTRACT = Extract(NAME, check_extract, reduce_check)     # put it in the Plan's extracts
LINKS_EXTRACT = Extract(NAME, check_extract_links, reduce_check)     # `traceattr check`: with unlinked rows
