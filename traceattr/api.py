"""The public Python API: each function checks its arguments and runs the engine's plan for its table.

Every function takes a TraceSet or a path (trace files, or a parquet store), with the load options of a path
(jobs, executor: a concurrent.futures.Executor or a Dask Client, cache, skip_bad, rank_map, progress) refused
beside a TraceSet. The plans map each file of the source and reduce exactly (docs/design.md); what a source
holds is decided in one place, analysis.summary_plan.held_source.
"""

from __future__ import annotations

import dataclasses

import functools
import os

import pandas as pd

from traceattr.analysis.attribute import check_level
from traceattr.analysis.compare import check_options
from traceattr.analysis.critical import across_table, critical_steps, critical_table, kinds_table, parse_what_if
from traceattr.analysis.fold import check_top
from traceattr.analysis.imbalance import Imbalance
from traceattr.analysis.keys import LEVELS as KEY_LEVELS
from traceattr.analysis.summary_plan import imbalance_files, summarize_files
from traceattr.analysis.multirank_plan import comm_report_runs, comm_straggler, comm_tables
from traceattr.analysis.run_tables import report_runs
from traceattr.analysis.iteration import LEVEL as ITERATION
from traceattr.analysis.phase import LEVEL as PHASE
from traceattr.analysis.graph_capture import load_captures
from traceattr.analysis.compare_plan import PATH_OPTIONS, compare_path_runs, compare_paths
from traceattr.analysis.compare_critical import CRITICAL, compare_critical_paths
from traceattr.analysis.roofline import PeakOverride, check_peaks
from traceattr.analysis.straggler import Straggler
from traceattr.analysis.summarize import LEVELS
from traceattr.engine.units import forget_last_file
from traceattr.errors import TraceInputError
from traceattr.io.cache import FileCache
from traceattr.io.discover import Inputs, discover
from traceattr.io.gzipstream import events_limited
from traceattr.io import load as io_load
from traceattr.io.runs import SeveralRunsError
from traceattr.captures import capture_paths, captures_given
from traceattr.model.graphs import GraphCatalog
from traceattr.model.traceset import (LOAD_OPTIONS, TraceSet, check_flags, check_load_options, check_load_values,
                                      check_path_argument, check_traces_argument, refuse_load_options)
from traceattr.pipelines.check import check_runs
from traceattr.pipelines.summarize import stacked_runs
from traceattr.report.check import CheckResult

__all__ = ["load", "load_runs", "summarize", "attribute", "collectives", "imbalance", "rank_imbalance",
           "step_imbalance", "compare", "compare_runs", "check", "critical_path"]

CHECK_OPTIONS = ("rank_map", "jobs", "executor", "cache", "progress")     # a check skips unreadable files


def load(path, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None, jobs: int | None = None,
         executor=None, cache=True, progress: bool = False, drop_host=(), max_events: int | None = None,
         graph_capture=None) -> TraceSet:
    """A trace file, a folder of traces or a parquet store (traceattr convert) as one TraceSet; the options
    are io.load.load's (its help says each). Graph-capture traces (beside execution_details.json, in
    capture_traces/, or given as `graph_capture`: a path or paths) are never windows: they are left out,
    with a note, and the TraceSet carries their catalog, so every analysis of it attributes graph replays
    as the commands do (docs/inference.md)."""
    options = dict(skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, executor=executor, cache=cache,
                   progress=progress, drop_host=drop_host, max_events=max_events)
    path, (catalog, notes, captures) = _captures_for(path, graph_capture, "load", options)
    return _with_catalog(io_load.load(path, leave_out=captures, **options), catalog, notes)


def load_runs(path, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None, jobs: int | None = None,
              executor=None, cache=True, progress: bool = False, drop_host=(), max_events: int | None = None,
              graph_capture=None) -> list[tuple[str, TraceSet]]:
    """Like load, but a folder holding several runs gives one (name, TraceSet) per run, in time order (io.load
    .load_runs), each carrying the graph capture catalog."""
    options = dict(skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, executor=executor, cache=cache,
                   progress=progress, drop_host=drop_host, max_events=max_events)
    path, (catalog, notes, captures) = _captures_for(path, graph_capture, "load_runs", options)
    return [(name, _with_catalog(traceset, catalog, notes))
            for name, traceset in io_load.load_runs(path, leave_out=captures, **options)]


def _captures_for(path, graph_capture, function: str,
                  options: dict) -> tuple[Inputs, tuple[GraphCatalog, list[str], list[str]]]:
    """(the path's one walk, which the load then reads too; the captures' catalog, notes and files)."""
    check_path_argument(path, "path", function)
    check_load_values(function, **{k: options[k] for k in ("rank_map", "cache", "executor", "skip_bad", "progress")})
    given = capture_paths(graph_capture)
    stage = {k: options[k] for k in ("jobs", "executor", "cache", "progress")}
    inputs = discover(path)
    return inputs, load_captures(inputs, given, **stage)


def _with_catalog(traceset: TraceSet, catalog: GraphCatalog, notes: list[str]) -> TraceSet:
    if not catalog and not notes:
        return traceset
    return dataclasses.replace(traceset, graph_catalog=catalog if catalog else traceset.graph_catalog,
                               notes=tuple(notes) + tuple(traceset.notes))


def _options(value, function: str, load_options: dict) -> dict:
    """The load options that go with `value`: refused beside a TraceSet, checked for a path (the engine
    decides what a path holds: analysis.summary_plan.held_source)."""
    check_traces_argument(value, "traceset", function)
    if isinstance(value, TraceSet):
        refuse_load_options(function, load_options)
    else:
        check_load_options(function, load_options)
    return load_options


def _answer(function):
    """A public function whose maps may keep the last file decoded in this process (engine.units.file_task):
    it is let go once the answer is complete. Its `max_events=` load option (--max-events) holds for the call,
    and so do its `graph_capture=` paths (--graph-capture: graph-capture traces, docs/inference.md)."""
    @functools.wraps(function)
    def answered(*args, max_events: int | None = None, graph_capture=None, **kwargs):
        for name, value in (("max_events", max_events), ("graph_capture", graph_capture)):
            if value is not None and any(isinstance(found, TraceSet) for found in (*args, *kwargs.values())):
                refuse_load_options(function.__name__, {name: value})
        try:
            with events_limited(max_events), captures_given(graph_capture):
                return function(*args, **kwargs)
        finally:
            forget_last_file()
    return answered


def _patterns(comm_patterns) -> tuple[str, ...]:
    """--comm-pattern values as a tuple: a text is one pattern, not its characters."""
    return (comm_patterns,) if isinstance(comm_patterns, str) else tuple(comm_patterns or ())


@_answer
def summarize(traceset: TraceSet | str, by: str = "kernel", top: int | None = None, *, align: bool = True,
              comm_patterns=(), aggregate: bool = False, exclude_carried_in: bool = False,
              **load_options) -> pd.DataFrame:
    """Device time per kernel name, category or rank, or one row per collective instance (collectives()).
    Integer columns are int64 ns (or counts). `comm_patterns`: extra regular expressions whose kernels are
    communication (io/comm_rules.py); `align`: clock alignment of cross-rank figures (by rank and collective);
    `aggregate` (by collective): one row per (kind, process group, bytes); `exclude_carried_in` (kernel and
    category): device activities launched before the profiler started left out of every total.

    `traceset` may also be a path: every table is then computed per file where the file is decoded and
    reduced exactly, never holding the traces (rank and collective tables match collectives across ranks from
    small per-file extracts); `load_options` say how. A parquet store is loaded."""
    check_traces_argument(traceset, "traceset", "summarize")
    check_top(top)
    check_flags("summarize", align=align, aggregate=aggregate, exclude_carried_in=exclude_carried_in)
    options = _options(traceset, "summarize", load_options)
    if by not in LEVELS + ("critical",):
        raise TraceInputError(f"unknown summary level {by!r}; choose one of {', '.join(LEVELS + ('critical',))}")
    comm_patterns = _patterns(comm_patterns)
    if by == "critical":
        return critical_path(traceset, top=top, **options)
    if exclude_carried_in and by not in ("kernel", "category"):
        raise TraceInputError("exclude_carried_in takes by='kernel' or 'category' here (attribute() for the "
                              "attribution levels; the CLI's --exclude-carried-in for every level)")
    try:
        if by in ("kernel", "category"):
            return summarize_files(traceset, by=by, top=top, comm_patterns=comm_patterns,
                                   exclude_carried_in=exclude_carried_in, **options)
        return comm_tables(traceset, by=by, top=top, align=align, comm_patterns=comm_patterns, aggregate=aggregate,
                           **options).table
    except SeveralRunsError:
        return _by_run(traceset, by, top, False, options, comm_patterns=comm_patterns, align=align,
                       aggregate=aggregate, exclude_carried_in=exclude_carried_in)


@_answer
def critical_path(traceset: TraceSet | str, *, step: str | None = None, top: int | None = None,
                  per_step: bool = False, across_ranks: bool = False, what_if=None, **load_options) -> pd.DataFrame:
    """The critical path of every step of every rank (docs/critical-path.md): one row per (kind, key) with
    critical_ns, share_pct (of Σ step_ns), segments and steps; Σ critical_ns == Σ step_ns exactly. Kinds:
    compute, communication, memcpy, host, launch, kernel_gap, sync, idle; keys: the kernel or op on the path.
    `step`: the annotation whose instances are the steps (default ProfilerStep#N, else each file's window).
    `per_step`: one row per (rank, step, kind, key) with step_ns instead. attrs: step_ns, steps, kinds (ns per
    kind), notes (dropped edges: clock skew, broken correlations). `traceset` may be a path (per-file map).
    `across_ranks`: each step's path followed across ranks through matched collectives, from the rank whose
    step ended last (analysis/critical_ranks.py): one row per (kind, key, rank), Σ critical_ns == Σ path_ns;
    attrs["chains"]: per step its end rank, path_ns and the chain of ranks that bound it.
    `what_if` ({key: factor} or "KEY=FACTOR" texts; a key is a kernel or op name as the tables show it):
    attrs["what_if"], per (rank, step), step_ns, what_if_ns (the step re-solved on the same graph with those
    kernels / ops scaled: docs/critical-path.md says what the model does not see) and gain_ns."""
    check_traces_argument(traceset, "traceset", "critical_path")
    check_top(top)
    check_flags("critical_path", per_step=per_step, across_ranks=across_ranks)
    if step is not None and not isinstance(step, str):
        raise TraceInputError(f"critical_path: step must be an annotation name, got {type(step).__name__}")
    factors = parse_what_if(what_if) if what_if is not None else ()
    steps, header = critical_steps(traceset, step, factors, **_options(traceset, "critical_path", load_options))
    rows, chains = header.pop("across_ranks")
    scaled = header.pop("what_if")
    if across_ranks:
        table = rows if per_step else across_table(rows)
        table.attrs.update(chains=chains, path_ns=int(chains["path_ns"].sum()) if len(chains) else 0,
                           notes=list(header.get("notes", [])))
        if factors:
            table.attrs["what_if"] = scaled
        return table
    table = steps if per_step else critical_table(steps, top)
    table.attrs.update(step_ns=int(steps.drop_duplicates(["rank", "step"])["step_ns"].sum()),
                       steps=len(steps.drop_duplicates(["rank", "step"])),
                       kinds=dict(zip(*kinds_table(steps)[["kind", "critical_ns"]].to_dict("list").values())),
                       notes=list(header.get("notes", [])))
    if factors:
        table.attrs["what_if"] = scaled
    return table


@_answer
def attribute(traceset: TraceSet | str, by: str = "op", tree: bool = False, top: int | None = None, *,
              exclude_carried_in: bool = False, peak_tflops: float | None = None, peak_tbps: float | None = None,
              **load_options) -> pd.DataFrame:
    """One row per (rank, device, key) of level `by` (op, op_stack, module, annotation, step, or phase:
    prefill / decode / mixed / other per serving-engine iteration, with iterations, requests and token
    columns, docs/inference.md); self_ns sums to busy per (rank, device).

    `by="shape"`: one row per (rank, device, op, input dims, input types, concrete inputs) with FLOPs, bytes,
    achieved TFLOP/s and TB/s and the share of the device's roof (docs/roofline.md); `peak_tflops` and
    `peak_tbps` replace the device's peaks.

    Columns: rank, device, key, self_ns, duration_ns, solo_ns, count, self_pct (of the (rank, device)
    total); for op_stack/module/annotation also name, depth, parent, exclusive_self_ns, inclusive_self_ns;
    for module also inferred_self_ns. attrs: level, time_kind ("device" or "host"), totals
    {(rank, device): ns}, linked_share {rank: share}, notes [str]. `top` (flat tables only; a tree folds
    when rendered) keeps the largest rows per (rank, device) and sums the rest into one `<other>` row.
    Activities launched before the profiler started are the `<carried in>` row; `exclude_carried_in`
    leaves them out of every total (docs/inference.md).
    `traceset` may also be a path (map-reduce over its files, see summarize; `load_options` say how)."""
    check_flags("attribute", tree=tree, exclude_carried_in=exclude_carried_in)
    if by not in (PHASE, ITERATION) or tree:    # per engine iteration's phase (analysis/phase.py, iteration.py)
        check_level(by, tree)
    check_peaks(by, peak_tflops, peak_tbps)
    check_traces_argument(traceset, "traceset", "attribute")
    check_top(top)
    options = _options(traceset, "attribute", load_options)
    try:
        return summarize_files(traceset, by=by, top=top, tree=tree, exclude_carried_in=exclude_carried_in,
                               peaks=PeakOverride(peak_tflops, peak_tbps), **options)
    except SeveralRunsError:
        return _by_run(traceset, by, top, tree, options, exclude_carried_in=exclude_carried_in,
                       peaks=PeakOverride(peak_tflops, peak_tbps))


def _by_run(path, by: str, top: int | None, tree: bool, options: dict, **multirank) -> pd.DataFrame:
    """summarize/attribute of a path that holds several runs: each run's own table (what a path holding that
    run alone gives), stacked with a `run` column first, as the CLI's machine formats give them; never
    merged. attrs: `runs`, the run names in order."""
    options = dict(options)
    cache = FileCache.of(options.pop("cache", True))
    common = dict(options, cache=cache is not None, cache_dir=str(cache.dir.root) if cache is not None else None)
    if by in ("rank", "collective"):
        runs = comm_report_runs(path, by, top=top, **multirank, **common)
    else:
        runs = report_runs(path, by=by, top=top, tree=tree, comm_patterns=multirank.get("comm_patterns", ()),
                           exclude_carried_in=multirank.get("exclude_carried_in", False),
                           peaks=multirank.get("peaks", PeakOverride()), **common)
    stacked = stacked_runs([(run.name, run.table) for run in runs])
    stacked.attrs = {"runs": [run.name for run in runs]}
    return stacked


@_answer
def collectives(traceset: TraceSet | str, *, top: int | None = None, aggregate: bool = False, align: bool = True,
                comm_patterns=(), **load_options) -> pd.DataFrame:
    """One row per collective instance, or with `aggregate` one per (kind, process group, bytes). `top`: the
    N rows with the most wait, the rest summed into one <other> row (wait and transfer only), so Σ wait_ns
    still equals Σ wait_caused_ns of `--by rank`. attrs: `notes`, `facts` (alignment, rules) for report
    headers. `traceset` may be a path: then this is summarize(path, by="collective", ...)."""
    check_traces_argument(traceset, "traceset", "collectives")
    check_flags("collectives", aggregate=aggregate, align=align)
    if isinstance(traceset, TraceSet):
        refuse_load_options("collectives", load_options)
    return summarize(traceset, by="collective", top=top, aggregate=aggregate, align=align,
                     comm_patterns=comm_patterns, **load_options)


@_answer
def imbalance(traceset: TraceSet | str, align: bool = True, comm_patterns=(), **load_options) -> Straggler:
    """The straggler rank and its cause (analysis/straggler.py). `traceset` may be a path: its files are
    then mapped where they are decoded, as summarize's (`load_options` say how), never loaded whole."""
    check_traces_argument(traceset, "traceset", "imbalance")
    check_flags("imbalance", align=align)
    return comm_straggler(traceset, align=align, comm_patterns=_patterns(comm_patterns),
                          **_options(traceset, "imbalance", load_options))


@_answer
def rank_imbalance(traceset: TraceSet | str, by: str = "kernel", alpha: float = 0.05, **load_options) -> Imbalance:
    """The busiest rank against the median rank by busy time, as the `summarize --by rank` header says it
    (analysis/imbalance.py): `.per_unit` (rank, busy_ns, step_ns: mean ProfilerStep wall), `.busy_ratio`,
    `.step_ratio` (max / median), `.slowest` (the busiest rank, -1: under two ranks with device time),
    `.median`, `.extra_ns` (its extra busy ns) and `.explain`, the compare() table of the median rank (a)
    against the busiest (b) by `by` (kernel, category, op, op_stack, module, annotation, step): Σ key
    delta_ns == extra_ns, each key tested against step-to-step noise at `alpha`. The busiest rank is not the
    straggler (a rank that waits at collectives is busy while it waits): imbalance() names who made the
    others wait.
    `traceset` may be a path (map-reduce over its files, see summarize; `load_options` say how)."""
    check_traces_argument(traceset, "traceset", "rank_imbalance")
    _check_imbalance(by, alpha)
    return imbalance_files(traceset, "rank", by, alpha, **_options(traceset, "rank_imbalance", load_options))


@_answer
def step_imbalance(traceset: TraceSet | str, by: str = "kernel", alpha: float = 0.05, **load_options) -> Imbalance:
    """The longest step against the median step, as the `summarize --by step` header says it
    (analysis/imbalance.py; an outlier only when it stands out: imbalance.step_facts_of): each step measured
    on its slowest rank (longest ProfilerStep range). `.per_unit` (step, step_name, rank, busy_ns, wall_ns),
    `.busy_ratio`, `.step_ratio` (max / median wall), `.slowest` (the longest step's index, -1: under two
    steps), `.median`, `.extra_ns` (its extra wall ns, or busy ns when steps have no wall time) and
    `.explain`, the compare() table of the median step (a) against the longest (b) by `by`, each on its own
    rank. `traceset` may be a path (map-reduce over its files, see summarize; `load_options` say how)."""
    check_traces_argument(traceset, "traceset", "step_imbalance")
    _check_imbalance(by, alpha)
    return imbalance_files(traceset, "step", by, alpha, **_options(traceset, "step_imbalance", load_options))


def _check_imbalance(by: str, alpha: float) -> None:
    if by not in KEY_LEVELS:
        raise TraceInputError(f"unknown key level {by!r}; choose one of {', '.join(KEY_LEVELS)}")
    check_options(alpha, None)


@_answer
def compare(a: TraceSet | str, b: TraceSet | str, by: str = "kernel", normalize: bool = True, alpha: float = 0.05,
            top: int | None = None, **load_options) -> pd.DataFrame:
    """One row per key of A or B (sorted by |delta_ns|), then `<other>` (with `top`), `<idle>`, `<total>`.
    `top` folds rows for display only: judge regressions() on the table without it (then fold()).

    attrs: level, alpha, normalized, steps_a/steps_b, busy_a_ns/busy_b_ns, window_a_ns/window_b_ns, test (the
    noise test that ran: "paired t over N steps", "Welch t (A n steps, B m steps)" or "none ..."), notes.
    `a` and `b` may be trace paths: each side is then computed per file where it is decoded and reduced
    exactly, never holding the traces; `load_options` (jobs, executor, cache, skip_bad, rank_map, progress)
    say how. A parquet store is loaded.

    `by="critical"`: the steps' critical paths of A against B, one row per (kind, key) with a_ns, b_ns,
    delta_ns, a_share_pct and b_share_pct (of each side's Σ step_ns), by |delta_ns|, then `<other>` (with
    `top`) and the `total` row; Σ delta_ns == the change of Σ step_ns (analysis/compare_critical.py)."""
    check_traces_argument(a, "a", "compare")
    check_traces_argument(b, "b", "compare")
    check_options(alpha, top)
    check_flags("compare", normalize=normalize)     # normalize="no" is truthy: it normalized without a word
    if isinstance(a, TraceSet) and isinstance(b, TraceSet):
        refuse_load_options("compare", load_options)
    else:
        check_load_options("compare", load_options, LOAD_OPTIONS if by == CRITICAL else PATH_OPTIONS)
    if by == CRITICAL:
        return compare_critical_paths(a, b, normalize=normalize, top=top, **load_options)
    return compare_paths(a, b, by=by, normalize=normalize, alpha=alpha, top=top, **load_options)


@_answer
def compare_runs(a: TraceSet | str, b: TraceSet | str, by: str = "kernel", normalize: bool = True,
                 alpha: float = 0.05, top: int | None = None, **load_options) -> list[tuple[str, pd.DataFrame]]:
    """compare() run by run: [(name, table)], one per pair of runs when `a` and `b` each hold several runs
    (a folder of separate single-GPU traces: paired by run name, else in time order with a note in the
    table's attrs; docs/compare.md), or [(".", table)] when each holds one run."""
    check_traces_argument(a, "a", "compare_runs")
    check_traces_argument(b, "b", "compare_runs")
    if by == CRITICAL:      # the critical path compares one run per side (its steps are matched by name)
        raise TraceInputError("compare_runs does not pair runs by='critical': compare each pair with "
                              "traceattr.compare(run_a, run_b, by='critical')")
    check_options(alpha, top)
    check_flags("compare_runs", normalize=normalize)
    if isinstance(a, TraceSet) and isinstance(b, TraceSet):
        refuse_load_options("compare_runs", load_options)
    else:
        check_load_options("compare_runs", load_options, PATH_OPTIONS)
    return compare_path_runs(a, b, by=by, normalize=normalize, alpha=alpha, top=top, **load_options)


@_answer
def check(traceset: TraceSet | str, *, clip: bool = False, **load_options) -> CheckResult:
    """What can make a number untrustworthy, as `traceattr check` reports it (the same plans): `.verdict`
    (ok, warn or bad: the worst run's), `.exit_code` (0, 1, 2) and `.runs`, one per run under a path (one,
    ".", for a TraceSet), each with `.verdict`, `.problems` (the findings that are not plainly ok: rank,
    window, path, check, count, time_ns, verdict, detail), `.notes` (each file that is not ok and the checks
    behind it), `.findings` (every check of every file, passed ones included) and, with `clip`, `.clip`:
    busy and idle ns per (rank, device) as loaded and with every outlier activity clipped. Files that cannot
    be read are findings (bad), not errors. Load options of a path: rank_map, jobs, executor, cache (True,
    False or a folder), progress."""
    check_traces_argument(traceset, "traceset", "check")
    check_flags("check", clip=clip)
    if isinstance(traceset, TraceSet):
        refuse_load_options("check", load_options)
    else:
        check_load_options("check", load_options, CHECK_OPTIONS)
    cache = load_options.pop("cache", True)
    folder = None if cache is True else FileCache.of(cache)      # load()'s reading of cache=: one place
    source = traceset if isinstance(traceset, TraceSet) else os.fspath(traceset)
    runs, verdict = check_runs(source, clip=clip, cache=bool(cache),
                               cache_dir=None if folder is None else str(folder.dir.root), **load_options)
    return CheckResult(verdict, runs)
