"""compare(A, B) of two trace paths by per-file map-reduce: the driver never holds either run's traces.

A comparison reads, per side, the activity_keys() rows (self ns per rank, device, key, raw name and step),
the step order, the window and busy totals and a few facts for its notes. Every one of them comes from one
file at a time: each file's rows are computed where it is decoded (a Partial of the summary plan, analysis/summary_plan.py),
with its steps as names, since a file numbers only its own steps; the driver puts every file's steps in the
run's order (run_steps) and indexes them again, so the table is the one compare() gives on the two loaded
TraceSets, bit for bit. Normalized step keys ("step 3") are positions in the run's step order, known only on
the driver: the map keeps raw step names.

A step is a name and its occurrence in its rank: torch numbers the steps of each profiler object from the
same N, so a process that profiles twice writes two windows of ProfilerStep#1..#5, which are ten steps,
not five of double length. The k-th window of a rank that holds a name (k from 0, windows in time order)
gives the step (k, name); ranks share steps (rank 0's (0, #3) and rank 1's are one step, summed).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.attribution import columns as C
from traceattr.analysis import summary_plan as M
from traceattr.analysis import check_plan
from traceattr.analysis.findings import FINDINGS, Results, compare_findings
from traceattr.analysis.findings_part import EXTRACT as FINDINGS_EXTRACT
from traceattr.analysis.compare import Side, compare_sides, check_options
from traceattr.analysis.imbalance import STEP_NAME
from traceattr.analysis.compare_shape import with_speedups
from traceattr.analysis.keys import COMPARE_LEVELS, KEY, STEP, UNIT_COLUMNS, activity_keys, step_names
from traceattr.analysis.summarize import rank_table
from traceattr.attribution.links import step_order
from traceattr.engine.columns import Chunks, numpy_columns, owned_columns, tag_columns
from traceattr.engine.partial import Partial
from traceattr.engine.placement import Placement
from traceattr.errors import TraceDiscoveryError, TraceInputError
from traceattr.io.cache import FileCache
from traceattr.io.cluster import executor_pool
from traceattr.io.discover import Inputs, discover
from traceattr.io.runs import SeveralRunsError
from traceattr.io.spill import spill_folder
from traceattr.model.traceset import TraceSet

NAME = "compare_units"


@dataclass(frozen=True)
class Units:
    """One side's activity_keys() rows over all its files, STEP indexing `step_names` (run_steps labels)."""
    units: pd.DataFrame
    step_names: tuple[str, ...]
    device_rows: int


def run_steps(files: list[tuple[int, int, int, tuple[str, ...]]]) -> tuple[tuple[str, ...], dict]:
    """The run's steps from (file, rank, window, its step names) of each kept file: their labels in step
    order and {(file, name): step index}. A name a rank already held in an earlier window is a new step
    (torch restarts ProfilerStep#N per profiler object): ordered after the first ones, labelled
    "ProfilerStep#3 [2]" (its 2nd occurrence); the labels of a run without repeats are its names."""
    seen: dict[tuple[int, str], int] = {}          # (rank, name) -> windows so far
    found: dict[tuple[int, str], tuple[int, str]] = {}
    for file, rank, _, names in sorted(files, key=lambda f: (f[1], f[2])):
        for name in names:
            found[file, name] = (seen.get((rank, name), 0), name)
            seen[rank, name] = found[file, name][0] + 1
    steps = sorted(set(found.values()), key=lambda step: (step[0], step_order(step[1])))
    index = {step: i for i, step in enumerate(steps)}
    labels = tuple(name if k == 0 else f"{name} [{k + 1}]" for k, name in steps)
    return labels, {place: index[step] for place, step in found.items()}


def file_units(traceset: TraceSet, by: str, normalize: bool) -> dict:
    """The map: one file's activity_keys() rows with step names (step keys raw: positions need every file);
    each text one object, so a name repeated over steps is pickled once."""
    names = step_names(traceset)
    units = activity_keys(traceset, by, normalize and by != "step")
    return {"units": owned_columns(numpy_columns(M.named_steps(units, names))), "steps": names,
            "device_rows": traceset.device.num_rows}


class UnitsPile:
    """The files' rows on the driver (a Partial's state, engine/partial.py): texts shared over files (a kernel name
    repeats on every rank and step), tagged with the file's position, in summary_plan.Chunks; reduce() keeps the
    files the load kept, with their ranks, steps in the run's order."""

    def __init__(self, by: str, normalize: bool) -> None:
        self.by, self.normalize = by, normalize
        self.parts = Chunks()
        self.steps: list[tuple[int, tuple[str, ...]]] = []
        self.device_rows: list[tuple[int, int]] = []

    def update(self, index: int, found: dict) -> None:
        self.parts.append(tag_columns(found["units"], index))
        self.steps.append((index, tuple(sys.intern(name) for name in found["steps"])))
        self.device_rows.append((index, found["device_rows"]))

    def combine(self, other: "UnitsPile") -> None:
        self.parts.combine(other.parts)
        self.steps += other.steps
        self.device_rows += other.device_rows

    def finalize(self, placement: Placement) -> Units:
        rank_of, window_of = placement.rank_of, placement.window_of
        labels, step_of = run_steps([(i, int(rank_of[i]), int(window_of[i]), steps)
                                     for i, steps in self.steps if rank_of[i] >= 0])
        units = self._kept(rank_of, step_of) if self.parts else None
        if units is None or not len(units):
            units = activity_keys(TraceSet.empty(), self.by, self.normalize)
        if self.by == "step":       # a step key is its step (names repeat over windows): known only here
            text = [f"step {i + 1}" for i in range(len(labels))] if self.normalize else list(labels)
            units[KEY] = [text[step] if step >= 0 else key for step, key in zip(units[STEP].tolist(),
                                                                                 units[KEY].tolist())]
        return Units(units[UNIT_COLUMNS], labels, sum(n for i, n in self.device_rows if rank_of[i] >= 0))

    def _kept(self, rank_of: np.ndarray, step_of: dict[tuple[int, str], int]) -> pd.DataFrame:
        """The kept files' rows with their ranks and steps (indexes into the run's steps); texts stay the
        shared objects (a frame inferring arrow strings would copy every row's key and raw name)."""
        columns = self.parts.whole()
        index = columns[S.RANK]
        keep = rank_of[index] >= 0
        frame = pd.DataFrame({name: pd.Series(values[keep], dtype=object) if values.dtype == object else values[keep]
                              for name, values in columns.items() if name != STEP_NAME})
        frame[STEP] = np.array([step_of.get((file, name), -1) for file, name in
                                zip(index[keep].tolist(), columns[STEP_NAME][keep].tolist())], dtype=np.int64)
        frame[S.RANK] = rank_of[index[keep]]
        return frame


# the load options compare() takes for paths (those of _side, and executor and scheduler)
PATH_OPTIONS = ("skip_bad", "rank_map", "jobs", "executor", "scheduler", "cache", "cache_dir", "progress",
                "check_lines")


def compare_paths(path_a, path_b, **options) -> pd.DataFrame:
    """compare() of the runs under two paths (each one run; a parquet store is loaded whole). With
    `check_lines` the table's attrs hold `check`: "A <check line>; B <check line>", as `traceattr check`.
    Two paths that each hold several runs raise SeveralRunsError: compare_path_runs compares them pair by pair."""
    pairs = compare_path_runs(path_a, path_b, **options)
    if len(pairs) > 1:
        names = [name for name, _ in pairs]
        raise SeveralRunsError(f"{path_a} and {path_b} each hold {len(pairs)} runs ({', '.join(names)}): "
                               "traceattr.compare_runs compares them pair by pair", names)
    return pairs[0][1]


def compare_path_runs(path_a, path_b, *, by: str = "kernel", normalize: bool = True, alpha: float = 0.05,
                      top: int | None = None, check_lines: bool = False, executor: Any = None,
                      scheduler: str | None = None, **load_options) -> list[tuple[str, pd.DataFrame]]:
    """[(".", the comparison)] of two paths holding one run each; when both hold several runs (io/runs.py),
    one (name, comparison) per pair of runs (pair_runs), each side's files mapped again per run. A path of
    several runs beside a path of one raises its SeveralRunsError, as before."""
    check_options(alpha, top)
    if by not in COMPARE_LEVELS:
        raise TraceInputError(f"cannot compare by {by!r}: choose one of {', '.join(COMPARE_LEVELS)}")
    side = functools.partial(_side, by=by, normalize=normalize, check_line=check_lines, **load_options)
    with executor_pool(executor, scheduler) as pool:      # one cluster connection for both sides
        sources = [_source(path) for path in (path_a, path_b)]
        sides = [_side_or_runs(side, source, pool) for source in sources]
        several = [found for found in sides if isinstance(found, SeveralRunsError)]
        if not several:
            return [(".", _compared(*sides, by, normalize, alpha, top, check_lines, ()))]
        if len(several) == 1:
            raise several[0]
        pairs, notes = pair_runs(*several, str(path_a), str(path_b))
        out = []
        for name, (name_a, paths_a), (name_b, paths_b) in pairs:
            pair = [side(_run_inputs(inputs, run, paths), executor=pool)
                    for inputs, run, paths in ((sources[0], name_a, paths_a), (sources[1], name_b, paths_b))]
            out.append((name, _compared(*pair, by, normalize, alpha, top, check_lines, notes)))
    return out


def _source(path):
    """A TraceSet as it is; a path discovered once (its runs' files are taken from this walk)."""
    return path if isinstance(path, TraceSet) else discover(path)


def _side_or_runs(side, inputs, pool):
    """A path's side, or the SeveralRunsError naming its runs and their files."""
    try:
        return side(inputs, executor=pool)
    except SeveralRunsError as runs:
        if not runs.paths:      # a raiser that did not say which files (never a path's plan)
            raise
        return runs


def _compared(found_a, found_b, by, normalize, alpha, top, check_lines, notes) -> pd.DataFrame:
    (side_a, units_a, check_a, results_a), (side_b, units_b, check_b, results_b) = found_a, found_b
    table = compare_sides(side_a, side_b, units_a.units, units_b.units, by, normalize, alpha, top)
    if by == "shape":       # readable keys and the speed-ups first: the findings name the rows as shown
        table = with_speedups(table)
    table.attrs[FINDINGS] = compare_findings(table, results_a, results_b)
    if check_lines:
        table.attrs["check"] = f"A {check_a}; B {check_b}"
    table.attrs["notes"] = [*notes, *table.attrs.get("notes", [])]
    return table


def pair_runs(runs_a: SeveralRunsError, runs_b: SeveralRunsError, path_a: str, path_b: str):
    """The runs of A and B in pairs: by name when both hold the same run names (the same models profiled
    twice), else in time order when both hold as many runs (with a note naming each pair); a
    TraceDiscoveryError naming both sides' runs otherwise. Returns ([(name, (A name, A paths), (B name,
    B paths))], notes)."""
    named_a = dict(zip(runs_a.runs, runs_a.paths))
    named_b = dict(zip(runs_b.runs, runs_b.paths))
    if set(named_a) == set(named_b):
        return [(name, (name, named_a[name]), (name, named_b[name])) for name in runs_a.runs], []
    if len(named_a) != len(named_b):
        raise TraceDiscoveryError(
            f"cannot pair the runs of {path_a} ({len(named_a)}: {_listed(runs_a.runs)}) with those of {path_b} "
            f"({len(named_b)}: {_listed(runs_b.runs)}): neither their names nor their numbers match; compare "
            "one run of each (its folder or file)")
    pairs = [(f"{a} vs {b}" if a != b else a, (a, named_a[a]), (b, named_b[b]))
             for a, b in zip(runs_a.runs, runs_b.runs)]
    note = ("runs paired in time order (their names differ): "
            + "; ".join(f"A {a} with B {b}" for _, (a, _), (b, _) in pairs))
    return pairs, [note]


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _run_inputs(inputs: Inputs, name: str, paths: tuple[str, ...]) -> Inputs:
    """One run of a path as a source of its own: its files (with their stat) under the run's name as the
    path, which is its origin for rank names, as summarize's runs (pipelines/summarize.py) read it."""
    return dataclasses.replace(inputs, path=str(Path(inputs.path) / name), files=tuple(inputs.held(list(paths))))


def _side(path, by: str, normalize: bool, check_line: bool, *, skip_bad: bool = False,
          rank_map: dict[str, int] | None = None, jobs: int | None = None, executor: Any = None,
          cache: bool = True, cache_dir: str | None = None,
          progress: bool = False) -> tuple[Side, Units, str | None, Results]:
    """(Side, Units, its check line or None, what its findings read) of the one run under `path`;
    `executor` stays open for the check line's second map."""
    extract = Partial(NAME, functools.partial(file_units, by=by, normalize=normalize),
                      functools.partial(UnitsPile, by=by, normalize=normalize))
    extracts = (extract, FINDINGS_EXTRACT) + ((check_plan.EXTRACT,) if check_line else ())
    # the plan's level decides which host rows the map keeps: cpu ops and python frames for attribution
    with spill_folder(not cache and check_line) as spill:     # the check line's second map reads it
        reduced, runner = M.reduce_path(path, by=by, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs,
                                        executor=executor, cache=FileCache(cache_dir) if cache else False,
                                        progress=progress, extracts=extracts, spill=spill)
        line = check_plan.check_line(reduced, runner) if check_line else None
    units: Units = reduced.extracts[NAME]
    files = reduced.files
    ranks = rank_table(reduced.groups, files)
    side = Side(files.num_rows, units.device_rows, tuple(sorted(set(files.column(S.RANK).to_pylist()))),
                frozenset(files.column(S.WORLD_SIZE).to_pylist()), len(units.step_names),
                int(ranks[S.WINDOW_NS].sum()), int(ranks[S.BUSY_NS].sum()), int(ranks[C.COMMUNICATION_NS].sum()))
    return side, units, line, M.findings_results(reduced, pd.DataFrame())
