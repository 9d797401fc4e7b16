"""`traceattr check` by per-file map-reduce: the CheckReport (rows and `.line()`) without building a TraceSet.

Every check but one is per file or reduces from small per-file facts:
* per file, in the map step: longer_than_window, outside_window, same_stream_overlap (check.py's own row
  code on the one-file TraceSet, relabelled on the driver), the ProfilerStep names, the communication
  activities (collectives.clock_columns: comm_extract's rows, a few per step, cut to what the skew reads);
* on the driver: the loader rows (the files table), missing_ranks and step_sets_differ (check.run_rows),
  clock_skew (collectives.clock_alignment over every file's communication rows: check.skew_rows).

far_beyond_typical compares each compute kernel with its name's MEDIAN duration over the whole run (all
files, all categories of that name), which no per-file sum gives. Exactly, in two small maps:
1. per file and kernel name: a histogram of durations in log-spaced buckets (8 per octave, integer bounds),
   the count, and the longest compute instance;
2. the driver finds the bucket(s) of each name's median; the median is at least the lower bound L of its
   bucket, so a name can have a kernel over FAR_BEYOND_FACTOR x its median (and FAR_BEYOND_MIN_NS over it)
   only if its longest compute kernel is over FAR_BEYOND_FACTOR x L and FAR_BEYOND_MIN_NS over L. For
   those names only (usually none), a second map over the files holding them (served by the file cache when
   it is on) returns the durations inside the median bucket(s), which give the exact median, and the compute
   kernels over that bound with their device's busy time, which the driver then judges (check.beyond_verdict).
"""

from __future__ import annotations

import array
import contextlib
import functools
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.allocator import heap_holes_returned
from traceattr.analysis import check as K
from traceattr.analysis.collectives import clock_columns, clock_frame
from traceattr.engine.columns import Chunks, owned_columns, placed_rows
from traceattr.engine.partial import Partial
from traceattr.engine.placement import Placement
from traceattr.engine.units import Unit, UnitTask
from traceattr.attribution.links import launch_status
from traceattr.attribution.sweep import sweep
from traceattr.io.codes import dictionary_codes
from traceattr.io.parallel import successes
from traceattr.model.traceset import TraceSet

NAME = "check"                  # the Partial's name (Reduced.extracts[NAME])
SUB_BUCKETS = 8                 # histogram buckets per octave (bucket width 9%)
_LINEAR = 2 * SUB_BUCKETS       # durations below this many ns have a bucket each
_MAX_BUCKETS = 1024             # more than bucket_of gives for any int64 duration (_LINEAR + 60 octaves x 8)


@dataclass
class FileCheck:
    """What one file tells the check (rank 0, window 0 until the driver relabels it)."""
    path: str
    rows: list                      # check.COLUMNS rows of the per-file checks (no far_beyond_typical)
    names: np.ndarray               # the file's device activity names (object), each once
    longest: np.ndarray             # per name: its longest compute kernel (ns), -1 when it has none
    longer: np.ndarray              # per name: whether one of its activities is longer than the window (bool)
    cells: np.ndarray               # histogram rows: position in `names` * _MAX_BUCKETS + duration bucket
    counts: np.ndarray              # activities in that cell
    shortest: int                   # the shortest duration (0 without activities; bucket 0's lower bound)
    steps: tuple                    # ProfilerStep names
    comm: dict | None               # collectives.clock_columns, None without communication
    groups: tuple = ()              # the distinct `Process Group Ranks` texts (check.group_texts)


_BUCKET_ROWS = 1 << 18        # bucket_of works through this many rows at a time


def bucket_of(duration: np.ndarray) -> np.ndarray:
    """Log-spaced bucket of each duration: one per ns below 16 (0 holds every duration <= 0), then
    SUB_BUCKETS per octave, by the three bits after the leading one (exact integer bounds). A slice of rows
    at a time: its eight temporaries of 8 bytes a row were the map step's peak on a file of tiny events."""
    duration = np.asarray(duration, dtype=np.int64)
    if len(duration) <= _BUCKET_ROWS:
        return _buckets(duration)
    out = np.empty(len(duration), np.int64)
    for first in range(0, len(duration), _BUCKET_ROWS):
        out[first:first + _BUCKET_ROWS] = _buckets(duration[first:first + _BUCKET_ROWS])
    return out


def _buckets(duration: np.ndarray) -> np.ndarray:
    d = np.maximum(duration, 0)
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

def check_extract(traceset: TraceSet, comm: bool = True, status: np.ndarray | None = None,
                  carried_out: tuple[int, int] | None = None) -> FileCheck:
    """The map step of the check on a one-file TraceSet; `status`: links.launch_status of its device rows
    (computed here when None: the file must then hold its cpu ops); `carried_out`: the activities the
    task left out as carried in (--exclude-carried-in)."""
    device = traceset.device
    path = traceset.files.column(S.PATH)[0].as_py()
    facts = K.duration_facts(traceset, typical=False)
    rows = K.file_rows(traceset, facts, launch_status(traceset) if status is None else status, carried_out)
    duration = facts["duration"]
    dictionary, code = dictionary_codes(device.column(S.NAME))
    names = dictionary.to_numpy(zero_copy_only=False).astype(object)
    longer = np.zeros(len(names), bool)
    longer[code[facts["longer"]]] = True        # --clip-outliers clips them to their run-wide median
    compute = np.asarray(pc.equal(device.column(S.CATEGORY), S.COMPUTE).to_numpy(zero_copy_only=False), bool)
    # numpy, not group-bys: this runs once per file. Histogram rows: (name code, bucket) -> count
    cell = bucket_of(duration)
    cell += code * np.int64(_MAX_BUCKETS)
    cells, counts = np.unique(cell, return_counts=True)
    del cell
    longest = np.full(len(names), -1, np.int64)
    np.maximum.at(longest, code[compute], duration[compute])
    is_comm = comm and (pc.any(pc.equal(device.column(S.CATEGORY), S.COMMUNICATION)).as_py() if device.num_rows
                        else False)
    return FileCheck(path, rows, names, longest, longer, cells, counts.astype(np.int64),
                     int(duration.min(initial=0)), tuple(sorted(K.step_sets(traceset).get(0, ()))),
                     owned_columns(clock_columns(traceset)) if is_comm else None,   # each text pickled once
                     K.group_texts(traceset))


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
    """The reduced per-file facts: everything the check needs but the far-beyond rows' second map."""
    rows: list
    candidates: list[Candidate]
    files_of: dict[str, list[tuple[int, int]]]     # name -> (rank, window) of the files holding it
    # --clip-outliers: names with an activity longer than its window (clipped to their median, when they
    # have TYPICAL_MIN_COUNT instances; else to the window's end), and the files holding such activities
    longer: list[Candidate]
    longer_files: list[tuple[int, int]]
    steps: dict[int, frozenset[str]]
    comm: pd.DataFrame | None
    groups: tuple[str, ...] = ()     # the kept files' distinct `Process Group Ranks` texts


class CheckPile:
    """The check's per-file facts on the driver (its Partial's state, engine/partial.py), held as numpy columns tagged with
    the file's position (a skipped file's rows must not count, and which files hold a name is needed for
    the second map), in summary_plan.Chunks: kernel names as codes into one list of texts,
    the duration histograms, each name's longest compute kernel, and the communication rows."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}         # kernel name -> its code, in order of arrival
        self.rows: list[tuple[int, tuple]] = []  # (file, check row): findings are few
        self.shortest = array.array("q")        # per file
        self.steps: list[tuple] = []            # per file: one shared tuple per distinct set of step names
        self.step_sets: dict[tuple, tuple] = {}
        self.groups: list[tuple] = []           # per file: its process groups' texts, one shared tuple each
        self.pending = {"names": Chunks(), "hist": Chunks(), "comm": Chunks()}

    def update(self, index: int, found: FileCheck) -> None:
        codes = np.array([self.codes.setdefault(name, len(self.codes)) for name in found.names.tolist()], np.int64)
        files = np.full(len(found.names), index, np.int32)
        self.pending["names"].append({"file": files, "code": codes, "longest": found.longest.copy(),
                                      "longer": found.longer.copy()})
        self.pending["hist"].append({"file": np.full(len(found.cells), index, np.int32),
                                     "cell": codes[found.cells // _MAX_BUCKETS] * _MAX_BUCKETS
                                     + found.cells % _MAX_BUCKETS,
                                     "count": found.counts.copy()})      # copies: owned_columns says why
        if found.comm is not None:      # its rank and window: the file's, set in reduce
            comm = owned_columns({name: values for name, values in found.comm.items() if name != S.WINDOW})
            self.pending["comm"].append({**comm, S.RANK: np.full(len(comm[S.RANK]), index, np.int32)})
        self.rows += [(index, row) for row in found.rows]
        self.shortest.append(found.shortest)
        self.steps.append(self.step_sets.setdefault(found.steps, found.steps))
        groups = tuple(sys.intern(text) for text in found.groups)     # 5 KB each at 1024 ranks, alike on every file
        self.groups.append(self.step_sets.setdefault(groups, groups))

    def combine(self, other: "CheckPile") -> None:
        """Take the files of `other` (a state of the files after this one's): its name codes are its own,
        so its rows are recoded into this state's."""
        recode = np.array([self.codes.setdefault(name, len(self.codes)) for name in other.codes], np.int64)
        for name in ("names", "hist"):
            chunks = other.pending[name]
            columns = chunks.whole()
            if columns is None:
                continue
            if name == "names":
                columns["code"] = recode[columns["code"]]
            else:
                columns["cell"] = recode[columns["cell"] // _MAX_BUCKETS] * _MAX_BUCKETS + columns["cell"] % _MAX_BUCKETS
            self.pending[name].append(columns)
        self.pending["comm"].combine(other.pending["comm"])
        self.rows += other.rows
        self.shortest.extend(other.shortest)
        self.steps += [self.step_sets.setdefault(steps, steps) for steps in other.steps]
        self.groups += [self.step_sets.setdefault(groups, groups) for groups in other.groups]

    def finalize(self, placement: Placement) -> CheckParts:
        """The CheckParts of the files the load kept, in load order (once: the pile's rows are let go)."""
        rank_of, window_of = placement.rank_of, placement.window_of
        rows = [(int(rank_of[i]), int(window_of[i])) + tuple(row[2:]) for i, row in self.rows if rank_of[i] >= 0]
        kept = np.flatnonzero(rank_of[:len(self.shortest)] >= 0)
        shortest = min(0, min((self.shortest[i] for i in kept), default=0))
        medians = self._medians(shortest, rank_of, window_of)
        groups = tuple(dict.fromkeys(text for i in kept.tolist() for text in self.groups[i]))
        return CheckParts(rows, *medians, self._rank_steps(kept, rank_of), self._comm(rank_of, window_of), groups)

    def _rank_steps(self, kept: np.ndarray, rank_of: np.ndarray) -> dict[int, frozenset[str]]:
        """Each rank's ProfilerStep names; ranks of the same names share one set (a set per rank was 2.3 MB
        of the driver's peak at 1024 ranks)."""
        of_rank: dict[int, set[tuple]] = {}
        for i in kept.tolist():
            of_rank.setdefault(int(rank_of[i]), set()).add(self.steps[i])
        unions: dict[frozenset, frozenset[str]] = {}
        return {rank: unions.setdefault(frozenset(tuples), frozenset().union(*tuples))
                for rank, tuples in sorted(of_rank.items())}

    def _medians(self, shortest: int, rank_of: np.ndarray, window_of: np.ndarray):
        """(candidates, files_of, longer, longer_files) of CheckParts, from the names and histograms of the kept
        files (dropped from the pile here: the communication rows are framed next)."""
        names, hist = self.pending.pop("names").whole() or _no_rows(), self.pending.pop("hist").whole() or _no_rows()
        names = {column: values[rank_of[names["file"]] >= 0] for column, values in names.items()}
        hist = {column: values[rank_of[hist["file"]] >= 0] for column, values in hist.items()}
        texts = np.array(list(self.codes), dtype=object)
        summed = _summed(hist)
        candidates = _candidates(texts, summed, names, shortest)
        longer = [c for _, c in _located(texts, summed, np.unique(names["code"][names["longer"]]), shortest)]
        files_of = {}
        for candidate in candidates + longer:
            code = self.codes[candidate.name]
            files = np.unique(names["file"][names["code"] == code])
            files_of[candidate.name] = [(int(rank_of[i]), int(window_of[i])) for i in files.tolist()]
        longer_files = [(int(rank_of[i]), int(window_of[i]))
                        for i in np.unique(names["file"][names["longer"]]).tolist()]
        return candidates, files_of, longer, longer_files

    def _comm(self, rank_of: np.ndarray, window_of: np.ndarray) -> pd.DataFrame | None:
        """One frame, as comm_extract of the whole TraceSet cut to what the clock skew reads (clock_frame)."""
        comm = self.pending.pop("comm").whole()
        if comm is None:
            return None
        kept = placed_rows(comm, rank_of, window_of)
        return clock_frame(comm, kept) if len(kept) else None


def _no_rows() -> dict[str, np.ndarray]:
    return {"file": np.zeros(0, np.int32), "code": np.zeros(0, np.int64), "longest": np.zeros(0, np.int64),
            "longer": np.zeros(0, bool),
            "cell": np.zeros(0, np.int64), "count": np.zeros(0, np.int64)}


def _summed(hist: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(name code, bucket, count) of the histograms summed over files, ordered by code then bucket."""
    cells, inverse = np.unique(hist["cell"], return_inverse=True)
    counts = np.zeros(len(cells), np.int64)
    np.add.at(counts, inverse, hist["count"])
    return cells // _MAX_BUCKETS, cells % _MAX_BUCKETS, counts


def _candidates(texts: np.ndarray, summed: tuple, names: dict, shortest: int) -> list[Candidate]:
    """The names that may have far-beyond instances (in name order), from the histograms summed over files
    and each name's longest compute kernel."""
    compute = names["longest"] >= 0
    if not compute.any():
        return []
    longest = np.full(len(texts), -1, np.int64)
    np.maximum.at(longest, names["code"][compute], names["longest"][compute])
    # only names with a compute kernel: nothing else can be flagged
    return [c for code, c in _located(texts, summed, np.flatnonzero(longest >= 0), shortest)
            if longest[code] > K.FAR_BEYOND_FACTOR * c.lower and longest[code] - c.lower >= K.FAR_BEYOND_MIN_NS]


def _located(texts: np.ndarray, summed: tuple, codes: np.ndarray, shortest: int) -> list[tuple[int, Candidate]]:
    """(code, where its median lies) of each name of `codes` (in name order), from the summed histograms;
    names of fewer than TYPICAL_MIN_COUNT instances have no typical duration and are left out."""
    code, bucket, counts = summed
    found = []
    for name_code in sorted(codes.tolist(), key=lambda c: texts[c]):
        low, high = np.searchsorted(code, [name_code, name_code + 1])    # its cells: contiguous, by bucket
        if low == high:
            continue
        buckets, cumulative = bucket[low:high], np.cumsum(counts[low:high])
        total = int(cumulative[-1])
        if total < K.TYPICAL_MIN_COUNT:
            continue
        first, second = (total - 1) // 2, total // 2
        at_first = int(np.searchsorted(cumulative, first, side="right"))
        at_second = int(np.searchsorted(cumulative, second, side="right"))
        below = int(cumulative[at_first - 1]) if at_first else 0
        lower, upper = lower_bound(int(buckets[at_first]), shortest), lower_bound(int(buckets[at_second]) + 1)
        found.append((name_code, Candidate(texts[name_code], below, first, second, lower, upper)))
    return found


# --- the second map: exact medians and the kernels beyond them -------------------------------------

@dataclass
class Beyond:
    path: str
    middle: dict          # name -> durations in [lower, upper) (every category)
    kernels: pd.DataFrame  # compute kernels of candidate names over the bound: row, name, duration, busy


def beyond_work(unit: Unit, *, bounds: dict) -> Beyond:
    """In a worker: one file's durations around the medians of `bounds` {name: (lower, upper)} and its
    compute kernels of those names that could be far beyond them."""
    traceset = unit.traceset
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
    return Beyond(unit.path, middle, pd.concat(kernels, ignore_index=True))


@dataclass
class Medians:
    """The second map's answer: exact run-wide medians, and the compute kernels over their bounds."""
    typical: dict[str, int]       # name -> its median duration over the run (pandas' median, rounded)
    kernels: pd.DataFrame         # Beyond.kernels of every file, with its rank, window and path


def exact_medians(located: list[Candidate], parts: CheckParts, runner, paths: dict[tuple[int, int], str]) -> Medians:
    """The second map, over the files holding the `located` names (`paths`: each (rank, window)'s file)."""
    bounds = {c.name: (c.lower, c.upper) for c in located}
    where = {}
    for name in bounds:
        for rank, window in parts.files_of[name]:
            where[paths[rank, window]] = (rank, window)
    task = UnitTask(functools.partial(beyond_work, bounds=bounds))
    middle: dict[str, list] = {name: [] for name in bounds}
    kernels = []
    # a run of several files: none decoded in the driver (decode_files)
    with contextlib.closing(runner.map(list(where), task, always_pool=len(paths) > 1)) as results:
        for found in successes(results, False, []):
            for name, values in found.middle.items():
                middle[name].append(values)
            rank, window = where[found.path]
            kernels.append(found.kernels.assign(rank=rank, window=window, path=found.path))
    typical = {}
    for c in located:
        values = np.sort(np.concatenate(middle[c.name]))
        low, high = values[c.first - c.below], values[c.second - c.below]
        typical[c.name] = int(np.round((np.float64(low) + np.float64(high)) / 2))   # pandas' median, rounded
    return Medians(typical, pd.concat(kernels, ignore_index=True))


def beyond_kernels(medians: Medians) -> pd.DataFrame:
    """The kernels far beyond their name's median, with it (`typical`) and whether one alone is most of its
    device's busy time (`dominant`)."""
    kernels = medians.kernels
    median = kernels["name"].map(medians.typical).to_numpy(np.int64)
    duration = kernels["duration"].to_numpy(np.int64)
    beyond = kernels[(duration > K.FAR_BEYOND_FACTOR * median) & (duration - median >= K.FAR_BEYOND_MIN_NS)]
    return beyond.assign(typical=median[beyond.index], dominant=beyond["duration"] > K.MOST * beyond["busy"])


def beyond_rows(parts: CheckParts, runner, paths: dict[tuple[int, int], str],
                medians: Medians | None = None) -> list[tuple]:
    """far_beyond_typical rows from a second map over the candidates' files
    (`paths`: each (rank, window)'s file); `medians`: that map's answer when the caller ran it (over the
    candidates and maybe more names: clip_plan.py)."""
    if not parts.candidates:
        return []
    beyond = beyond_kernels(medians or exact_medians(parts.candidates, parts, runner, paths))
    rows = []
    for (rank, window, path), mine in beyond.groupby(["rank", "window", "path"], sort=False):
        worst = mine.sort_values(["duration", "row"], ascending=[False, True], kind="stable").iloc[0]
        verdict, detail = K.beyond_verdict(worst["name"], np.int64(worst["duration"]), np.int64(worst["typical"]),
                                           np.int64(worst["busy"]), bool(mine["dominant"].any()))
        rows.append((int(rank), int(window), path, "far_beyond_typical", len(mine),
                     int((mine["duration"] - mine["typical"]).sum()), verdict, detail))
    return rows


def check_report(reduced, runner, skipped=(), comm: pd.DataFrame | None = None,
                 medians: Medians | None = None, listed: bool = True) -> K.CheckReport:
    """The CheckReport of the files behind `reduced` (summary_plan.Reduced, its
    plan holding EXTRACT or EXTRACT_WITHOUT_COMM); `runner` (summary_plan.Runner) runs the second map
    when a kernel may be far beyond typical, unless `medians` is its answer. `comm`: the communication rows
    (comm_extract's frame) when the plan held EXTRACT_WITHOUT_COMM beside multirank_plan's extract, which
    carries them already. `listed=False`: the findings only (check.report_of), for a summary's header."""
    parts: CheckParts = reduced.extracts[NAME]
    comm = parts.comm if comm is None else comm if len(comm) else None
    files = reduced.files
    ranks = sorted(set(files.column(S.RANK).to_pylist()))
    paths = K.paths_of(files)
    rows = K.skipped_rows(skipped) + list(parts.rows) + beyond_rows(parts, runner, paths, medians)
    rows += K.loader_rows(files)
    rows += K.run_rows(files, {rank: parts.steps.get(rank, set()) for rank in ranks}, parts.groups,
                       runner.inputs)
    if len(ranks) >= 2 and comm is not None:
        rows += K.skew_rows(comm, ranks)
    return K.report_of(rows, paths, listed)


def check_line(reduced, runner, comm: pd.DataFrame | None = None) -> str:
    """check_report(reduced, runner, comm=comm).line() for a summary's header; the check's parts are let go
    once read (at 1024 ranks its communication rows, 2.5 MB, were still held while the table was built)."""
    return check_facts(reduced, runner, comm)[0]


def check_facts(reduced, runner, comm: pd.DataFrame | None = None) -> tuple[str, tuple[int, int, bool]]:
    """(check_line, carried in): the activities launched before the window over every file, (count, Σ self
    ns, whether --exclude-carried-in left them out), from the check's carried_in rows."""
    report = check_report(reduced, runner, comm=comm, listed=False)
    found = report.findings[report.findings["check"] == "carried_in"]
    excluded = bool(found["detail"].str.startswith("left out").any())
    carried = (int(found[S.COUNT].sum()), int(found["time_ns"].sum()), excluded)
    reduced.extracts.pop(NAME)
    heap_holes_returned()
    return report.line(), carried


def check_unit(unit: Unit, comm: bool = True) -> FileCheck:
    """check_extract on a Unit: its launch statuses were taken before its cpu ops were left out, so every
    command's check line holds the `unlinked` row that `traceattr check` gives (summary levels included)."""
    return check_extract(unit.traceset, comm=comm, status=unit.launch_status, carried_out=unit.carried_out)


def check_unit_without_comm(unit: Unit) -> FileCheck:
    return check_unit(unit, comm=False)


EXTRACT = Partial(NAME, check_unit, CheckPile, on_unit=True)     # put it in the Plan's extracts
# beside multirank_plan.COMM_EXTRACT: the communication rows travel and are held once, in that extract
EXTRACT_WITHOUT_COMM = Partial(NAME, check_unit_without_comm, CheckPile, on_unit=True)
