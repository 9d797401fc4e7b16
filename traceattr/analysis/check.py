"""`traceattr check`: what can make a number untrustworthy, per file and per run, with counts and ns, and a verdict.

Every check yields one row per file (rank, window) or per run (rank -1) with a count, an amount of time in
ns and a verdict `ok | warn | bad`; the file's verdict is its worst row, the overall verdict the worst file.
`bad` means a number computed from the input is wrong as it stands: a file that cannot be read or repeats
another of its rank, an activity longer than its whole trace window, or one that alone makes up most of its
device's time while far beyond its name's typical duration (a single corrupt `dur` has done exactly that).
`warn` means the numbers hold but rest on something the user should know (rounding overlaps, unlinked time,
missing ranks, clamped durations, dropped records).

The trace window of a file is the span of its host events (the profiler's own window: device activities are
only recorded between its start and stop). Files without host events skip the checks that need it.

Clock skew beyond the alignment residual comes from the multi-rank analysis (collectives.py: offsets from
collective end times), asked only when the run has several ranks and communication.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.attribution.hosttree import file_key
from traceattr.attribution.sweep import sweep
from traceattr.attribution import columns as C
from traceattr.io.codes import dictionary_codes, numbers
from traceattr.io.header import DROP_WARNINGS_KEY, parse_metadata
from traceattr.io.limits import TIME_LIMIT_TEXT
from traceattr.model.traceset import TraceSet
from traceattr.analysis.collectives import clock_alignment
from traceattr.attribution.carried import carried_in
from traceattr.attribution.links import (LINKED, LINKED_STATUSES, NO_CORRELATION, NO_OP, NO_OP_THREAD, NO_RUNTIME,
                                         launch_status)
from traceattr.analysis.collectives import rank_array
from traceattr.io.summaries import capture_selection

OK, WARN, BAD = "ok", "warn", "bad"
VERDICTS = (OK, WARN, BAD)            # index == exit code of `traceattr check`

FAR_BEYOND_FACTOR = 100               # "far beyond its name's typical duration": over 100x the median ...
FAR_BEYOND_MIN_NS = 1_000_000         # ... and at least 1 ms over it (µs kernels vary by more than 100x)
TYPICAL_MIN_COUNT = 3                 # a median of fewer instances says nothing about what is typical
MOST = 0.5                            # "alone makes up most of a device's time"
LOW_LINKED_SHARE = 0.95               # as in attribute.py: below it the tables rest on missing links
OUTSIDE_MARGIN_NS = 10**9             # "outside the window": over 1 s before its start or after its end
# an offset below this is noise, whatever the residual: collective ends on one clock jitter by µs, and point-
# to-point pairs end together (residual 0), so a 100 ns estimate warned on 13 of 60 clean planted sets
CLOCK_SKEW_MIN_NS = 10_000

CHECKS = {
    "unreadable": "files that could not be read as traces (skipped)",
    "overlapping_windows": "files whose window overlaps another file of the same rank (skipped: the same "
                           "capture twice, or two runs)",
    "longer_than_window": "device activities (1 ms or more) longer than the file's whole trace window; "
                          "ns = their duration",
    "far_beyond_typical": f"compute kernels over {FAR_BEYOND_FACTOR}x their name's median duration; ns = "
                          "time beyond the median (bad when one alone is most of its device's busy time)",
    "outside_window": "device activities over 1 s outside the trace window (a device lags its host by ms, "
                      "not seconds); ns = their duration",
    "same_stream_overlap": "activities overlapping an earlier one on the same stream (rounding or a "
                           "profiler bug; counted once in busy time); ns = the overlap",
    "clamped_durations": "negative durations clamped to 0 by the loader",
    "absurd_durations": f"events of impossible times (longer than a day, or beyond {TIME_LIMIT_TEXT}), dropped by "
                        "the loader",
    "empty": "files without a single timed event: no op, kernel or range was recorded (a profiler window "
             "that never became active, or a trace written before its events)",
    "unlinked": "device activities not linked to a launching op, by cause; ns = their self time",
    "carried_in": "device activities launched before the profiler started (docs/inference.md); ns = their "
                  "self time",
    "profiler_dropped": "warnings in the trace that the profiler dropped or lost records",
    "missing_ranks": "ranks of distributedInfo.world_size with no file (run level; of a traceattr.capture run, "
                     "the ranks its config selected)",
    "ranks_beyond_world": "ranks at or beyond distributedInfo.world_size (run level: the files disagree about the "
                          "job, e.g. a rank from another run, or a wrong world size)",
    "step_sets_differ": "ranks whose ProfilerStep set differs from the most common one (run level)",
    "windows_overlap": "windows of a rank whose events run into its next window (a device activity with a late "
                       "timestamp: the window, and its idle time, then span the gap); ns = the overlap",
    "capture_incomplete": "a traceattr.capture run that did not end cleanly (its manifests: a rank killed or not "
                          "stopped, writes unfinished, a selected rank with no manifest); count = problems",
    "clock_skew": "ranks whose clock offset (from collective end times) is beyond the residual spread after "
                  "alignment and 10 µs; ns = the largest offset",
}
RUN_CHECKS = ("missing_ranks", "ranks_beyond_world", "step_sets_differ", "windows_overlap", "clock_skew",
              "capture_incomplete")
SKIPPED_CHECKS = ("unreadable", "overlapping_windows")
FILE_CHECKS = tuple(c for c in CHECKS if c not in RUN_CHECKS + SKIPPED_CHECKS)
COLUMNS = [S.RANK, S.WINDOW, S.PATH, "check", S.COUNT, "time_ns", "verdict", "detail"]
RUN_PATH = "<run>"                   # path of run-level rows
RUN_LEVEL = -1                        # rank and window of run-level rows



@dataclass(frozen=True)
class CheckReport:
    findings: pd.DataFrame            # COLUMNS: one row per (file or run, check), every check listed
    verdict: str                      # worst over all rows

    @classmethod
    def of(cls, findings: pd.DataFrame) -> "CheckReport":
        """The report of these findings, its verdict the worst of theirs (ok when there are none)."""
        return cls(findings, VERDICTS[max((VERDICTS.index(v) for v in findings["verdict"]), default=0)])

    @property
    def exit_code(self) -> int:
        return VERDICTS.index(self.verdict)

    def files(self) -> pd.DataFrame:
        """Per file (and run-level row): its verdict, the worst of its checks."""
        worst = self.findings.assign(level=self.findings["verdict"].map(VERDICTS.index))
        grouped = worst.groupby([S.RANK, S.WINDOW, S.PATH], as_index=False, sort=True)["level"].max()
        grouped["verdict"] = [VERDICTS[i] for i in grouped.pop("level")]
        return grouped

    def line(self) -> str:
        """The one-line verdict for report headers: `ok`, or the verdict and what caused it."""
        if self.verdict == OK:
            return OK
        worst = self.findings[self.findings["verdict"] == self.verdict]
        causes = worst.groupby("check", sort=False)[S.COUNT].sum()
        what = ", ".join(cause_text(check, count) for check, count in causes.items())
        return f"{self.verdict}: {what} {LINE_END}"


def cause_text(check: str, count: int) -> str:
    """`missing ranks (126)`: the count in brackets ("missing ranks 1" read as rank 1 when rank 0 was missing)."""
    return f"{check.replace('_', ' ')} ({count})"


LINE_END = "(traceattr check PATH for details)"


def line_with_warning(line: str | None, check: str, count: int) -> str:
    """A header's one-line verdict (CheckReport.line(), or None where no check ran) with `count` more
    findings of the warning-level `check` that only the report layer sees (capture_incomplete: the
    manifests), as `traceattr check` counts them."""
    cause = cause_text(check, count)
    if line is None or line == OK:
        return f"{WARN}: {cause} {LINE_END}"
    if line.startswith(f"{WARN}: ") and line.endswith(LINE_END):
        return f"{line[:-len(LINE_END)].rstrip()}, {cause} {LINE_END}"
    return line         # bad: the line names the worst verdict's causes only


def report_of(rows: list[tuple], paths: dict[tuple[int, int], str], listed: bool = True) -> CheckReport:
    """The CheckReport of finding rows (COLUMNS) over the files `paths` {(rank, window): path}, as the
    per-file map-reduce reduces them (analysis/check_plan.py). `listed=False`: the findings alone, in the
    same order, without a row per file for each check it passed: enough for `.line()` and a summary's header
    (at 1,024 ranks those 14 k rows, merged and sorted, were the summary driver's peak: +5 MiB)."""
    found = pd.DataFrame(rows, columns=COLUMNS)
    if not listed:
        return CheckReport.of(_ordered(found))
    # every check listed for every file (and the run), so a JSON consumer sees what passed, not only what failed
    listed = [(r, w, p, c) for (r, w), p in sorted(paths.items()) for c in FILE_CHECKS]
    listed += [(RUN_LEVEL, RUN_LEVEL, RUN_PATH, c) for c in RUN_CHECKS]
    full = pd.DataFrame(listed, columns=COLUMNS[:4])
    table = full.merge(found, on=COLUMNS[:4], how="outer")
    table[S.COUNT] = table[S.COUNT].fillna(0).astype("int64")
    table["time_ns"] = table["time_ns"].fillna(0).astype("int64")
    table["verdict"] = table["verdict"].fillna(OK)
    table["detail"] = table["detail"].fillna("")
    return CheckReport.of(_ordered(table))


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Findings by file (rank, window, path), then in the order of CHECKS."""
    order = {name: i for i, name in enumerate(CHECKS)}
    table = table.assign(_o=table["check"].map(order)).sort_values([S.RANK, S.WINDOW, S.PATH, "_o"]) \
        .drop(columns="_o").reset_index(drop=True)
    table = table.astype({S.RANK: "int64", S.WINDOW: "int64", S.PATH: "str", "check": "str", "verdict": "str",
                          "detail": "str"})
    return table[COLUMNS]


def skew_rows(extract: pd.DataFrame, ranks: list[int]) -> list[tuple]:
    """clock_skew_rows from the communication activities of every file (collectives.comm_extract rows)."""
    alignment = clock_alignment(extract)
    if not alignment.applied:
        return []
    beyond = max(alignment.residual_after_ns, CLOCK_SKEW_MIN_NS)
    skewed = {rank: offset for rank, offset in sorted(alignment.offset_ns.items()) if abs(offset) > beyond}
    if not skewed:
        return []
    listed = ", ".join(f"rank {rank} {offset:+,} ns" for rank, offset in list(skewed.items())[:10])
    return [(RUN_LEVEL, RUN_LEVEL, RUN_PATH, "clock_skew", len(skewed), max(abs(o) for o in skewed.values()), WARN,
             f"clock offsets beyond the aligned residual {alignment.residual_after_ns:,} ns "
             f"(raw {alignment.residual_before_ns:,} ns): {listed}; cross-rank figures use the aligned clocks")]


# --- the checks ------------------------------------------------------------------------------------

def skipped_rows(skipped) -> list[tuple]:
    rows = []
    for path, problem in skipped:
        check = "overlapping_windows" if "overlap in time" in problem else "unreadable"
        rows.append((RUN_LEVEL, RUN_LEVEL, path, check, 1, 0, BAD, problem))
    return rows


def _int64(table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _numbers(table, name: str) -> np.ndarray:
    """A column in its own type (int32 rank and window are not widened: 8 bytes a row each, copied)."""
    return np.asarray(table.column(name).to_numpy())


def _one_or_each(values: np.ndarray, rows: int | None = None) -> np.ndarray:
    """`values` (one per row), or a read-only broadcast of its one value: to `rows` rows when it holds one."""
    rows = len(values) if rows is None else rows
    if len(values) and (len(values) == 1 or (values.strides != (0,) and (values == values[0]).all())):
        return np.broadcast_to(values[:1].copy().reshape(()), (rows,))
    return values


def paths_of(files) -> dict[tuple[int, int], str]:
    """{(rank, window): path} of a files table (schema.FILE_SCHEMA)."""
    return {(int(r), int(w)): p for r, w, p in zip(files.column(S.RANK).to_pylist(),
                                                  files.column(S.WINDOW).to_pylist(),
                                                  files.column(S.PATH).to_pylist())}


def duration_facts(traceset: TraceSet, typical: bool | dict[str, int] = False) -> dict[str, np.ndarray]:
    """Per device row: start, end, its file's host window, its name's typical (median) duration (`typical`:
    the run's medians per name, found by the driver over every file; -1 for the names it lacks, and for all
    when False), and whether it is longer than its window / far beyond typical."""
    with_typical = typical
    device, host = traceset.device, traceset.host
    start, end = _int64(device, S.START_NS), _int64(device, S.END_NS)
    duration = end - start
    dev_file = _one_or_each(file_key(_numbers(device, S.RANK), _numbers(device, S.WINDOW)))
    # per row, but a map step's rows are all of one file: then each is one value broadcast (no 8 bytes a row)
    window_start = window_end = np.broadcast_to(np.int64(-1), len(start))
    if host.num_rows and len(start):      # numpy, not a group-by: the map-reduce runs this once per file
        files, inverse = np.unique(file_key(_int64(host, S.RANK), _int64(host, S.WINDOW)), return_inverse=True)
        first = np.full(len(files), np.iinfo(np.int64).max)
        last = np.full(len(files), np.iinfo(np.int64).min)
        np.minimum.at(first, inverse, _int64(host, S.START_NS))
        np.maximum.at(last, inverse, _int64(host, S.END_NS))
        keys = dev_file[:1] if dev_file.strides == (0,) else dev_file
        position = np.minimum(np.searchsorted(files, keys), len(files) - 1)
        has = files[position] == keys
        starts, ends = np.full(len(keys), -1, np.int64), np.full(len(keys), -1, np.int64)
        starts[has], ends[has] = first[position[has]], last[position[has]]
        window_start, window_end = (_one_or_each(values, len(start)) for values in (starts, ends))
    windowed = window_end > window_start
    typical = np.broadcast_to(np.int64(-1), len(start))
    if len(start) and isinstance(with_typical, dict):     # the run's medians, found by the driver
        names, code = dictionary_codes(device.column(S.NAME))
        typical = np.array([with_typical.get(name, -1) for name in names.to_pylist()], np.int64)[code]
    # tiny hand-made traces can hold a kernel longer than their few host events: only ms count
    longer = windowed & (duration > window_end - window_start) & (duration >= FAR_BEYOND_MIN_NS)
    # compute kernels only: a copy's time follows its size and a collective's includes waiting for peers
    compute = np.asarray(pc.equal(device.column(S.CATEGORY), S.COMPUTE).to_numpy(zero_copy_only=False), bool)
    beyond = compute & (typical >= 0) & (duration > FAR_BEYOND_FACTOR * typical) \
        & (duration - typical >= FAR_BEYOND_MIN_NS)
    # the device runs behind the host by up to ms: only activities far outside the window are suspect
    outside = windowed & ((start >= window_end + OUTSIDE_MARGIN_NS) | (end + OUTSIDE_MARGIN_NS <= window_start))
    return {"start": start, "end": end, "duration": duration, "file": dev_file, "window_start": window_start,
            "window_end": window_end, "windowed": windowed, "typical": typical, "longer": longer,
            "beyond": beyond, "outside": outside}


def file_rows(traceset: TraceSet, facts: dict | None = None, status: np.ndarray | None = None,
              carried_out: tuple[int, int] | None = None) -> list[tuple]:
    """The rows that each file gives on its own (longer_than_window, outside_window, same_stream_overlap,
    unlinked, carried_in): the map step of analysis/check_plan.py, on a one-file TraceSet (`facts`: its
    duration_facts(typical=False) when the caller has them; `status`: links.launch_status of its device
    rows, computed when None; `carried_out`: activities left out as carried in before, (count, self ns))."""
    rows = _empty_rows(traceset) + _duration_rows(traceset, facts) + _stream_rows(traceset)
    status = launch_status(traceset) if status is None else status
    return rows + _unlinked_rows(traceset, status) + _carried_rows(traceset, carried_out)


def _empty_rows(traceset: TraceSet) -> list[tuple]:
    """A file with no timed event (its window's start is unset) checked ok: it holds nothing to analyse."""
    files = traceset.files
    return [(int(rank), int(window), path, "empty", 1, 0, WARN, f"{events} events, none with a time")
            for rank, window, path, start, events in zip(*(files.column(name).to_pylist() for name in (
                S.RANK, S.WINDOW, S.PATH, S.START_NS, S.EVENTS))) if start == S.NO_TIME]


def _duration_rows(traceset: TraceSet, facts: dict | None = None) -> list[tuple]:
    """longer_than_window and outside_window rows (far_beyond_typical needs the run's medians:
    check_plan.py finds it over every file)."""
    if not traceset.device.num_rows:
        return []
    facts = facts if facts is not None else duration_facts(traceset, typical=False)
    found = [(check, facts[mask]) for check, mask in (("longer_than_window", "longer"), ("outside_window", "outside"))
             if facts[mask].any()]
    if not found:       # the usual file: no row, and nothing to look up (its paths)
        return []
    duration = facts["duration"]
    paths = paths_of(traceset.files)
    names = traceset.device.column(S.NAME)
    rows = []
    for check, mask in found:
        for key in np.unique(facts["file"][mask]).tolist():
            mine = mask & (facts["file"] == key)
            rank, window = key >> 32, key & 0xFFFFFFFF
            worst = int(np.flatnonzero(mine)[np.argmax(duration[mine])])
            detail = f"longest: {names[worst].as_py()[:80]} {duration[worst]} ns"
            verdict = BAD if check == "longer_than_window" else WARN
            rows.append((rank, window, paths.get((rank, window), ""), check, int(mine.sum()),
                         int(duration[mine].sum()), verdict, detail))
    return rows


def beyond_verdict(name: str, duration: int, typical: int, busy: int, dominant: bool) -> tuple[str, str]:
    """(verdict, detail) of a file's far_beyond_typical row from its longest such kernel; `dominant`: one of
    them alone is most of its device's busy time."""
    detail = f"longest: {name[:80]} {duration} ns (median {typical} ns)"
    if not dominant:
        return WARN, detail
    return BAD, detail + f"; alone {100 * duration / max(busy, 1):.0f}% of its device's busy time"


def _stream_rows(traceset: TraceSet) -> list[tuple]:
    """Same-stream overlaps: count from the rows (sorted per stream, an activity starting before the
    running max end of the earlier ones), ns from the sweep's per-group figure."""
    device = traceset.device
    if not device.num_rows:
        return []
    keys = [numbers(device.column(name)) for name in (S.RANK, S.WINDOW, S.DEVICE, S.STREAM)]
    start, end = _int64(device, S.START_NS), _int64(device, S.END_NS)
    order = np.lexsort((start, *keys[::-1]))
    stream_first = np.zeros(len(order), dtype=bool)
    stream_first[0] = True
    for key in keys:
        if (key != key[0]).any():         # a map step's file has one rank and window: no sorted copy of those
            k = key[order]
            stream_first[1:] |= k[1:] != k[:-1]
            del k
    overlapping = np.zeros(len(order), dtype=bool)
    overlapping[1:] = ~stream_first[1:] & (start[order][1:] < _running_end(start, end, order, stream_first)[:-1])
    groups = sweep(traceset).columns
    if not overlapping.any():       # the usual file: no row, nothing to look up
        return []
    file = file_key(keys[0], keys[1])[order]
    group_file = file_key(groups[S.RANK], groups[S.WINDOW])
    paths = paths_of(traceset.files)
    rows = []
    for key in np.unique(file[overlapping]).tolist():
        rank, window = key >> 32, key & 0xFFFFFFFF
        overlap_ns = groups[C.SAME_STREAM_OVERLAP_NS][group_file == key].sum()     # over the file's devices
        rows.append((rank, window, paths.get((rank, window), ""), "same_stream_overlap",
                     int((overlapping & (file == key)).sum()), int(overlap_ns), WARN,
                     "counted once in busy time (µs rounding of older traces, or a profiler bug)"))
    return rows


def _running_end(start: np.ndarray, end: np.ndarray, order: np.ndarray, stream_first: np.ndarray) -> np.ndarray:
    """Per row in `order`: the largest end so far in its stream (a new stream, where `stream_first`, restarts
    it). Each stream is lifted onto its own stretch of the time line, so one running maximum serves all (as
    sweep._stream_unions does): 3 arrays of 8 bytes a row, where dense ranks of the ends (the fallback, when
    the lifted times do not fit int64) took about twice that."""
    if not stream_first[1:].any():        # one stream (a file's usual case): a plain running maximum
        return np.maximum.accumulate(end[order])
    stream = np.cumsum(stream_first) - 1
    t0 = int(start.min())
    span = int(end.max()) - t0 + 1
    if int(stream[-1] + 1) * span < 2 ** 62:
        stream *= span
        lifted = end[order]
        lifted -= t0
        lifted += stream
        del stream
        np.maximum.accumulate(lifted, out=lifted)
        lifted -= (np.cumsum(stream_first) - 1) * span
        lifted += t0
        return lifted
    unique, dense = np.unique(end[order], return_inverse=True)
    offset = stream * (len(unique) + 1)
    return unique[np.maximum.accumulate(offset + dense.reshape(-1)) - offset]


def loader_rows(files_table) -> list[tuple]:
    """Rows of the loader's per-file counts (schema.FILE_SCHEMA table)."""
    files = files_table.to_pylist()
    rows = []
    for f in files:
        for check, column, what in (("clamped_durations", S.NEGATIVE_DURATIONS, "negative durations clamped to 0"),
                                    ("absurd_durations", S.ABSURD_DURATIONS, "events of impossible times dropped")):
            if f[column] > 0:
                rows.append((f[S.RANK], f[S.WINDOW], f[S.PATH], check, int(f[column]), 0, WARN, what))
        dropped = _profiler_drop_warnings(f[S.METADATA])
        if dropped:
            rows.append((f[S.RANK], f[S.WINDOW], f[S.PATH], "profiler_dropped", len(dropped), 0, WARN,
                         "; ".join(dropped)[:200]))
    return rows


def _profiler_drop_warnings(metadata: str) -> list[str]:
    found = (parse_metadata(metadata) or {}).get(DROP_WARNINGS_KEY, [])
    return [str(line) for line in found] if isinstance(found, list) else []


UNLINKED_CAUSES = {NO_CORRELATION: "no correlation", NO_RUNTIME: "dangling correlation",
                   NO_OP: "no enclosing op", NO_OP_THREAD: "thread without ops"}


def _unlinked_rows(traceset: TraceSet, status: np.ndarray) -> list[tuple]:
    """Per file: its device activities not linked to a launching op (links.launch_status), by cause, with
    their self time; warn when they are 5% or more of its busy time. Activities carried in from before
    the window are their own row (carried_in), never counted here."""
    if not traceset.device.num_rows:
        return []
    device = traceset.device
    self_ns = sweep(traceset).self_ns
    status = np.where(carried_in(traceset), LINKED, status)       # carried in: its own row
    files = file_key(np.asarray(device.column(S.RANK).to_numpy(), np.int64),
                     np.asarray(device.column(S.WINDOW).to_numpy(), np.int64))
    paths = paths_of(traceset.files)
    rows = []
    for file in np.unique(files).tolist():
        mine = files == file
        found = status[mine]
        unlinked = ~np.isin(found, LINKED_STATUSES)      # a graph replay is linked to its launch
        if not unlinked.any():
            continue
        total_ns, ns = int(self_ns[mine].sum()), int(self_ns[mine][unlinked].sum())
        share = 1 - ns / total_ns if total_ns else 1.0
        detail = f"linked {100 * share:.1f}%; " + ", ".join(
            f"{name} {int((found == code).sum())} ({int(self_ns[mine][found == code].sum())} ns)"
            for code, name in UNLINKED_CAUSES.items() if (found == code).any())
        rank, window = file >> 32, int(np.int64(file & 0xFFFFFFFF).astype(np.uint32).astype(np.int32))
        rows.append((rank, window, paths.get((rank, window), ""), "unlinked", int(unlinked.sum()), ns,
                     WARN if share < LOW_LINKED_SHARE else OK, detail))
    return rows


def _carried_rows(traceset: TraceSet, carried_out: tuple[int, int] | None) -> list[tuple]:
    """The file's activities launched before its window (attribution/carried.py), with their self time:
    busy time all the same (the device ran them), attributed to `<carried in>`; warn when they are 5% or
    more of the file's busy time, as they hide the ops that launched them. `carried_out`: left out already
    (--exclude-carried-in): said, never warned about."""
    paths = paths_of(traceset.files)
    if carried_out is not None:         # a map step's one file (rank 0, window 0)
        count, ns = carried_out
        return [(0, 0, paths.get((0, 0), ""), "carried_in", count, ns, OK,
                 "left out of every total (--exclude-carried-in)")]
    carried = carried_in(traceset)
    if not carried.any():
        return []
    device = traceset.device
    self_ns = sweep(traceset).self_ns
    files = file_key(np.asarray(device.column(S.RANK).to_numpy(), np.int64),
                     np.asarray(device.column(S.WINDOW).to_numpy(), np.int64))
    rows = []
    for file in np.unique(files[carried]).tolist():
        mine = files == file
        ns, busy = int(self_ns[mine & carried].sum()), int(self_ns[mine].sum())
        share = ns / busy if busy else 0.0
        rank, window = file >> 32, int(np.int64(file & 0xFFFFFFFF).astype(np.uint32).astype(np.int32))
        rows.append((rank, window, paths.get((rank, window), ""), "carried_in", int((mine & carried).sum()), ns,
                     WARN if share > 1 - LOW_LINKED_SHARE else OK,
                     f"{100 * share:.1f}% of busy time; launched before the profiler started (no launch record): "
                     "attributed to <carried in>; --exclude-carried-in leaves them out"))
    return rows


def group_texts(traceset: TraceSet) -> tuple[str, ...]:
    """The distinct `Process Group Ranks` texts of the trace set's communication activities."""
    device = traceset.device
    if not device.num_rows or S.GROUP_RANKS not in device.column_names:
        return ()
    return tuple(text for text in pc.unique(device.column(S.GROUP_RANKS)).to_pylist() if text)


def group_ranks_named(texts) -> np.ndarray:
    """Every rank that some process group of `texts` lists, sorted, once each (malformed texts name none)."""

    arrays = [ranks for ranks in map(rank_array, texts) if ranks is not None]
    if not arrays:
        return np.zeros(0, np.int64)
    ranks = np.sort(np.concatenate(arrays))    # not np.unique: numpy 2.4's hash path took 2.9 s on 2 M ranks
    return ranks[np.r_[True, ranks[1:] != ranks[:-1]]]


def run_rows(files, steps: dict[int, set[str]], groups: tuple[str, ...] = (), inputs=None) -> list[tuple]:
    """missing_ranks and step_sets_differ from the files table and each rank's ProfilerStep names (every
    rank of `files` a key, in rank order). `groups`: the collectives' distinct `Process Group Ranks` texts,
    whose ranks say which are missing when no world size does (a trace without distributedInfo). `inputs`:
    the walk that found the files (io.discover.Inputs), for the capture manifests beside them."""

    rows = []
    ranks = set(files.column(S.RANK).to_pylist())
    worlds = sorted({w for w in files.column(S.WORLD_SIZE).to_pylist() if w > 0})
    inside = {rank for rank in ranks if len(worlds) == 1 and 0 <= rank < worlds[0]}
    # a traceattr.capture run profiles the ranks its config selected (rank 0 by default): the others are
    # not missing
    paths = files.column(S.PATH).to_pylist() if S.PATH in files.column_names else []
    selected = capture_selection(paths, inputs) if len(worlds) == 1 else None
    if len(worlds) == 1:
        # counted, and the first ten found, in steps of the ranks expected: a world size of 2**24 is allowed;
        # a rank beyond the world size (the loader notes it) fills no gap
        expected = range(worlds[0]) if selected is None else sorted(r for r in selected if r < worlds[0])
        missing = len(expected) - len(inside if selected is None else inside & selected)   # inside: < world
        if missing:
            first = list(itertools.islice((rank for rank in expected if rank not in inside), 10))
            listed = ", ".join(map(str, first)) + (" ..." if missing > 10 else "")
            found = (f"{len(inside)} rank(s) found" if selected is None else
                     f"{len(selected)} rank(s) selected by the capture, {len(inside)} found")
            rows.append((RUN_LEVEL, RUN_LEVEL, RUN_PATH, "missing_ranks", missing, 0, WARN,
                         f"world size {worlds[0]}, {found}; missing: {listed}"))
        # the loader notes it, but check said ok: a rank the world has no room for
        beyond = sorted(ranks - inside)
        if beyond:
            listed = ", ".join(map(str, beyond[:10])) + (" ..." if len(beyond) > 10 else "")
            rows.append((RUN_LEVEL, RUN_LEVEL, RUN_PATH, "ranks_beyond_world", len(beyond), 0, WARN,
                         f"world size {worlds[0]} (distributedInfo), yet rank(s) {listed} found"))
    elif groups:
        # no world size: the process groups still name their ranks (check said ok, summarize noted the gap)
        named = group_ranks_named(groups)
        absent = np.setdiff1d(named, np.fromiter(ranks, np.int64, len(ranks)), assume_unique=True)
        if len(absent):
            listed = ", ".join(map(str, absent[:10].tolist())) + (" ..." if len(absent) > 10 else "")
            rows.append((RUN_LEVEL, RUN_LEVEL, RUN_PATH, "missing_ranks", len(absent), 0, WARN,
                         f"no world size (distributedInfo); the collectives' process groups name {len(named)} "
                         f"rank(s), {len(named) - len(absent)} found; missing: {listed}"))
    rows += _overlap_rows(files)
    if len(steps) > 1:
        # ranks sharing one frozenset share it here too (frozenset() of a frozenset is that object)
        sets = pd.Series({rank: frozenset(s) for rank, s in steps.items()})
        common = sets.value_counts().index[0]
        odd = sorted(int(r) for r, s in sets.items() if s != common)
        if odd:
            rows.append((RUN_LEVEL, RUN_LEVEL, RUN_PATH, "step_sets_differ", len(odd), 0, WARN,
                         f"ranks {', '.join(map(str, odd[:10]))} differ from the {len(common)} steps of the others"))
    return rows


def _overlap_rows(files) -> list[tuple]:
    """windows_overlap: windows are placed by their host events (io/decode.placement_span), so a device
    activity stamped late can reach into the rank's next window: found on planted truth, a kernel 20 ms late
    landed on window 1's first kernel and check said nothing while idle grew by the gap."""
    columns = [S.RANK, S.WINDOW, S.START_NS, S.END_NS]
    if files.num_rows < 2 or not set(columns) <= set(files.column_names):    # a files table without windows
        return []
    table = files.select(columns).to_pandas().sort_values([S.RANK, S.WINDOW])
    timed = table[S.START_NS].to_numpy() != S.NO_TIME        # a window without a timed event overlaps nothing
    same_rank = (table[S.RANK].to_numpy()[1:] == table[S.RANK].to_numpy()[:-1]) & timed[1:] & timed[:-1]
    overlap = (table[S.END_NS].to_numpy()[:-1] - table[S.START_NS].to_numpy()[1:]).clip(min=0) * same_rank
    if not overlap.any():
        return []
    worst = int(np.argmax(overlap))
    rank, window = int(table[S.RANK].iloc[worst]), int(table[S.WINDOW].iloc[worst])
    return [(RUN_LEVEL, RUN_LEVEL, RUN_PATH, "windows_overlap", int((overlap > 0).sum()), int(overlap.sum()), WARN,
             f"rank {rank} window {window} runs {int(overlap[worst]):,} ns into window {window + 1} (a late "
             "device timestamp?): its window and idle time span the gap between them")]


def step_sets(traceset: TraceSet) -> dict[int, set[str]]:
    """Each rank's ProfilerStep names (every rank a key)."""
    host = traceset.host
    mask = pc.and_(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION),
                   pc.starts_with(host.column(S.NAME), "ProfilerStep#"))
    steps = host.filter(mask)       # a few rows per file: no group-by (an Acero plan cost a file 0.1-1 ms)
    sets: dict[int, set[str]] = {rank: set() for rank in traceset.ranks}
    for rank, name in zip(steps.column(S.RANK).to_pylist(), steps.column(S.NAME).to_pylist()):
        sets.setdefault(rank, set()).add(name)
    return sets
