"""summary_report: what `traceattr summarize` shows for a path, from the cheapest source that is exact.

In order: the per-window kernel summaries a traceattr.capture run wrote (the kernel table only),
a finished table cached for the same request on unchanged inputs, else the traces (or a store) themselves.
The header always says which source answered. report/summarize.py renders the Report.
"""

from __future__ import annotations

import pandas as pd

from traceattr import schema as S
from traceattr.analysis.across import across_ranks
from traceattr.analysis.capture_summary import CAPTURE_SOURCE, capture_header, capture_summary
from traceattr.analysis.header import HOST_ONLY_NOTE
from traceattr.analysis.roofline import PeakOverride, check_peaks
from traceattr.analysis.summarize import CATEGORY_COLUMNS, KERNEL_COLUMNS, RANK_COLUMNS
from traceattr.analysis.summarize import LEVELS as SUMMARY_LEVELS
from traceattr.errors import TraceError, TraceInputError
from traceattr.io.cachedir import CacheDir
from traceattr.io.comm_rules import compile_patterns
from traceattr.io.discover import discover
from traceattr.io.results import (CONSERVING_LEVELS, cached_header, get_result, multirank_options, put_result,
                                  result_key, summary_request)
from traceattr.pipelines.capture_problems import capture_problems_by_run
from traceattr.report.summarize import Report, capture_notes, with_capture_verdict
from traceattr.units import counted


def summary_report(path: str, *, by: str = "kernel", top: int | None = None, tree: bool = False,
                   links: bool = False, skip_bad: bool = False, jobs: int | None = None,
                   progress: bool = False, cache: bool = True, scheduler: str | None = None,
                   rank_map: dict[str, int] | None = None, cache_dir: str | None = None,
                   per_rank: bool = False, comm_patterns: tuple[str, ...] = (), align: bool = True,
                   aggregate: bool = False, exclude_carried_in: bool = False,
                   step_annotation: str | None = None, critical_across: bool = False,
                   what_if: tuple = (), peak_tflops: float | None = None,
                   peak_tbps: float | None = None) -> Report:
    """`per_rank=False` (the default): a table of several ranks other than `by="rank"` gets one row per key
    over all ranks (analysis/across.py); `per_rank=True` keeps one row per (rank, device, key).
    `comm_patterns`, `align`, `aggregate`: the multi-rank options (docs/collectives.md); `peak_tflops`,
    `peak_tbps`: the roof of --by shape instead of the device's (docs/roofline.md). Traces with no
    device activity (CPU-only runs) answer `by="kernel"` with their host ops by self time (`by="op"`), and
    the header says so. `by="critical"`: the critical path of every step (docs/critical-path.md), with
    `step_annotation`, `critical_across` (--across-ranks) and `what_if` (KEY=FACTOR texts)."""
    if step_annotation is not None and by != CRITICAL:
        raise TraceInputError("--step-annotation needs --by critical")
    if critical_across and by != CRITICAL:
        raise TraceInputError("--across-ranks needs --by critical")
    if what_if and by != CRITICAL:
        raise TraceInputError("--what-if needs --by critical")
    if by == CRITICAL:
        return _critical_report(discover(path), step_annotation, top, critical_across, what_if, skip_bad=skip_bad,
                                rank_map=rank_map, jobs=jobs, progress=progress,
                                cache=cache_dir if cache and cache_dir else cache)
    options = dict(top=top, tree=tree, links=links, skip_bad=skip_bad, jobs=jobs, progress=progress, cache=cache,
                   scheduler=scheduler, rank_map=rank_map, cache_dir=cache_dir, per_rank=per_rank,
                   comm_patterns=comm_patterns, align=align, aggregate=aggregate,
                   exclude_carried_in=exclude_carried_in, peak_tflops=peak_tflops, peak_tbps=peak_tbps)
    report = _summary_report(path, by=by, **options)
    if by == "kernel" and not (tree or links) and _no_device_activity(report):
        report = _summary_report(path, by="op", **options)
        for header in [report.header] + [part.header for _, part in report.runs]:
            notes = [note for note in header.get("notes", []) if note != HOST_ONLY_NOTE]     # said below
            header["notes"] = [CPU_ONLY_NOTE] + notes
    return report


CPU_ONLY_NOTE = ("no device activity in these traces (a CPU-only run?): summarize shows host ops by self time, "
                 "as `--by op` does; the kernel and category tables are empty")


def _no_device_activity(report: Report) -> bool:
    """The report is of traces without a device activity: every table empty and every header host only (a
    capture's summaries hold kernels only: all of them empty means no device activity, and the host ops are
    in the traces)."""
    parts = [part for _, part in report.runs] or [report]
    return all(part.table.empty and (part.header.get("host_only") is True or
                                     str(part.header.get("source", "")).startswith(CAPTURE_SOURCE))
               for part in parts)


def _summary_report(path: str, *, by: str, top: int | None, tree: bool, links: bool, skip_bad: bool,
                    jobs: int | None, progress: bool, cache: bool, scheduler: str | None,
                    rank_map: dict[str, int] | None, cache_dir: str | None, per_rank: bool,
                    comm_patterns: tuple[str, ...], align: bool, aggregate: bool,
                    exclude_carried_in: bool, peak_tflops: float | None, peak_tbps: float | None) -> Report:
    if tree and by in SUMMARY_LEVELS:
        raise TraceInputError("--tree needs --by op_stack, module or annotation")
    path = discover(path)        # once: the capture summaries, the cache key, the plan and the notes read it
    if aggregate and by != "collective":
        raise TraceInputError("--aggregate needs --by collective")
    if not align and by not in ("rank", "collective"):     # it would be accepted and change nothing
        raise TraceInputError("--no-align needs --by rank or collective")
    check_peaks(by, peak_tflops, peak_tbps)
    comm_patterns = tuple(comm_patterns)
    compile_patterns(comm_patterns)          # a bad pattern fails before any trace is read
    multirank = multirank_options(comm_patterns, align, aggregate, (peak_tflops, peak_tbps))
    plain = not (tree or links)
    fallback = None
    if by in SUMMARY_LEVELS and plain and not comm_patterns and not exclude_carried_in:   # summaries hold them
        across = _across(by, per_rank)
        found = capture_summary(path, by, None if across else top)   # a traceattr.capture folder's summaries
        if found is not None and found.table is not None:
            table = found.table
            if across and len(found.ranks) > 1:     # as from traces: an empty table of 2 ranks too
                table = across_ranks(table, top, found.ranks)
            elif across and top is not None:
                table = capture_summary(path, by, top).table
            header = capture_header(found)
            header["notes"] += capture_notes(found.problems)     # the manifests are read once
            with_capture_verdict(header, found.problems, checked=False)
            return Report(table, header, _title(table, by, multirank))
        fallback = found.reason if found is not None else None
    key = results = None
    if cache and plain:
        results = CacheDir.at(cache_dir)
        key = _key_or_none(path, summary_request(by, top, skip_bad, rank_map, per_rank, multirank,
                                                    exclude_carried_in))
        cached = get_result(key, results, *_laws(by, per_rank)) if key else None
        if cached is not None:
            table, header, title = cached
            return Report(table, cached_header(header), title)
    report = _from_traces(path, by, top, tree, links, skip_bad, jobs, progress, cache, scheduler, rank_map,
                          cache_dir, multirank, _across(by, per_rank) and plain, exclude_carried_in)
    _add_capture_notes(report, path, fallback)
    if key is not None and not report.runs:
        put_result(key, results, report.table, report.header, report.title)
    return report


def _critical_report(path, step_annotation: str | None, top: int | None, across: bool, what_if: tuple,
                     **load_options) -> Report:
    """`--by critical`: the critical path of every step, one row per (kind, key) (docs/critical-path.md);
    `across`: followed across ranks through matched collectives, one row per (kind, key, rank)."""
    from traceattr.analysis.critical import (GAIN_NS, STEP_NS, WHAT_IF_NS, across_table,  # lazy: the engine
                                             critical_steps, critical_table, parse_what_if)
    from traceattr.analysis.critical_ranks import CHAIN, END_RANK, PATH_NS, STEP   # lazy: as above
    what_if = parse_what_if(what_if)
    steps, header = critical_steps(path, step_annotation, what_if, **load_options)
    rows, chains = header.pop("across_ranks")
    scaled = header.pop("what_if")
    if what_if:
        keys = ", ".join(f"{key}×{factor:g}" for key, factor in what_if)
        header["what if"] = (f"{keys}: Σ step {int(scaled[STEP_NS].sum())} ns -> {int(scaled[WHAT_IF_NS].sum())} ns "
                             f"(gain {int(scaled[GAIN_NS].sum())} ns over {len(scaled)} step(s); the model's edges "
                             f"only: no memory contention, no clock changes)")
    if across:
        table = across_table(rows)
        header["critical path"] = (f"across ranks, {len(chains)} step(s), {int(chains[PATH_NS].sum()) if len(chains) else 0}"
                                   f" ns in all; Σ critical_ns == Σ path_ns")
        for step, rank, path_ns, chain in chains[[STEP, END_RANK, PATH_NS, CHAIN]].itertuples(index=False):
            header[f"path of {step}"] = f"{path_ns} ns, from rank {rank}'s end: {chain}"
        header["bound by"] = _bound_by(table, by_rank=True)
        if not table.empty and table["critical_ns"].sum():
            header["findings"] = [f"the step is bound by {header['bound by']} — more: --by critical --per-rank"]
        return Report(table, header, "critical path across ranks by kind, key and rank")
    table = critical_table(steps, top)
    header["bound by"] = _bound_by(table)
    if not table.empty and table["critical_ns"].sum():
        header["findings"] = [f"the step is bound by {header['bound by']} — more: --by critical --what-if KEY=0.5"]
    header["critical path"] = (f"{table.attrs['steps']} step(s), {table.attrs['step_ns']} ns in all; "
                               f"Σ critical_ns == Σ step_ns")
    return Report(table, header, "critical path by kind and key")


def _bound_by(table: pd.DataFrame, by_rank: bool = False) -> str:
    """The findings line: the kind (and rank) holding most of the path, and its largest key."""
    if table.empty or not table["critical_ns"].sum():
        return "nothing: no step time"
    total = table["critical_ns"].sum()
    groups = ["kind", "rank"] if by_rank else ["kind"]
    sums = table.groupby(groups)["critical_ns"].sum().sort_values(ascending=False)
    top = sums.index[0] if by_rank else (sums.index[0],)
    rows = table[(table["kind"] == top[0]) & ((table["rank"] == top[1]) if by_rank else True)]
    key = rows.sort_values("critical_ns", ascending=False).iloc[0]
    where = f"rank {top[1]}'s {top[0]}" if by_rank else top[0]
    named = f": {key['critical_ns'] / total:.0%} of the path is {key['key']}" if key["key"] else ""
    return f"{where}, {sums.iloc[0] / total:.0%} of the path{named}"


def _add_capture_notes(report: Report, path: str, fallback: str | None) -> None:
    """Why the capture summaries did not answer, and the capture problems. With several runs they go to the
    runs' headers (the ones people formats show; machine formats print every header's notes), each run with
    its own problems and the first with the reason."""
    names = [name for name, _ in report.runs] or ["."]
    found = capture_problems_by_run(path, names)
    headers = [part.header for _, part in report.runs] or [report.header]
    for index, (name, header) in enumerate(zip(names, headers)):
        notes = header.setdefault("notes", [])
        notes += ([fallback] if fallback and index == 0 else []) + capture_notes(found[name])
        with_capture_verdict(header, found[name])


def _key_or_none(path: str, request: dict) -> str | None:
    try:
        return result_key(path, request)
    except TraceError:        # no traces there: reading them says why, in the words of the loader
        return None


def _laws(by: str, per_rank: bool = True) -> tuple[tuple[str, ...], bool]:
    """What a cached table of this level must have (columns) and keep (Σ self == busy). A table over all
    ranks (the default with several ranks) has no rank or device column, but still adds up."""
    columns = {"kernel": KERNEL_COLUMNS, "category": CATEGORY_COLUMNS, "rank": RANK_COLUMNS,
               "collective": [S.COLLECTIVE, S.WAIT_NS]}     # instances and --aggregate rows both have these
    required = tuple(columns.get(by, (S.RANK, S.DEVICE, S.SELF_NS)))
    if _across(by, per_rank):     # over ranks: every column but rank and device
        required = tuple(c for c in required if c not in (S.RANK, S.DEVICE))
    return required, by in CONSERVING_LEVELS


def _across(by: str, per_rank: bool) -> bool:
    """Whether a several-rank table of level `by` is aggregated over ranks (rank tables stay per rank, and a
    collective instance spans ranks already)."""
    return not per_rank and by not in ("rank", "collective", "launch")


def _title(table: pd.DataFrame, by: str, multirank: dict) -> str:
    if by == "collective":
        return "collectives per (kind, group, size)" if multirank["aggregate"] else "collective instances across ranks"
    across = table.attrs.get("across_ranks")
    where = f", over {counted(across, 'rank')}" if across else ""
    return f"{table.attrs.get('time_kind', 'device')} time by {by}{where}"


def _from_traces(path, by, top, tree, links, skip_bad, jobs, progress, cache, scheduler, rank_map,
                 cache_dir, multirank, across: bool = False, exclude_carried_in: bool = False) -> Report:
    # every level by per-file map-reduce: the driver holds small aggregates, never the traces
    # (analysis/run_tables.py; rank and collective: analysis/multirank_plan.py, but for the link
    # report, which is the same at every level); a store's files are mapped from its tables
    if by in ("rank", "collective") and not links:
        from traceattr.analysis.multirank_plan import comm_report_runs   # lazy: the engine; a cached table needs none
        found = comm_report_runs(path, by, top=top, aggregate=multirank["aggregate"], align=multirank["align"],
                                 comm_patterns=multirank["comm_patterns"], host_dropped=(S.PYTHON_FUNCTION,),
                                 skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, scheduler=scheduler, cache=cache,
                                 cache_dir=cache_dir, progress=progress, exclude_carried_in=exclude_carried_in)
    else:
        from traceattr.analysis.run_tables import report_runs   # lazy: the engine; a cached table needs none
        found = report_runs(path, by=by, top=top, tree=tree, links=links, across=across, skip_bad=skip_bad,
                            rank_map=rank_map, jobs=jobs, scheduler=scheduler, cache=cache, cache_dir=cache_dir,
                            progress=progress, comm_patterns=multirank["comm_patterns"],
                            exclude_carried_in=exclude_carried_in,
                            peaks=PeakOverride(*multirank.get("peaks", (None, None))))
    reports = [(run.name, Report(run.table, run.header, "link report" if links else _title(run.table, by, multirank),
                                 tree_top=(top or 10) if tree and not links else None))
               for run in found]
    return reports[0][1] if len(reports) == 1 else _several_runs(path, reports)


CRITICAL = "critical"      # --by critical: the step's critical path (analysis/critical.py)
RUN = S.RUN      # the first column of a table over several runs


def _several_runs(path: str, reports: list[tuple[str, Report]]) -> Report:
    """Several runs under one path: one report per run (people formats show one header and table each);
    the machine table stacks them with a `run` column first. Nothing is ever summed across runs."""
    names = [name for name, _ in reports]
    table = stacked_runs([(name, report.table) for name, report in reports])
    first = reports[0][1]
    header = {"source": first.header.get("source", ""), "runs": ", ".join(names),
              "notes": [f"{path} holds {len(names)} separate runs (by world size, distributedInfo, process "
                        "or time): each is reported on its own, never merged"]}
    # a note about the folder (a file skipped under PATH) is in every run's header: said once, in the first
    shared = set.intersection(*(set(map(str, report.header.get("notes", []))) for _, report in reports))
    runs = tuple((name, Report(report.table, {"run": f"{name} ({i} of {len(names)} under {path}, never merged)",
                                              **_without(report.header, shared if i > 1 else ())},
                               f"{report.title} · run {name}", report.tree_top))
                 for i, (name, report) in enumerate(reports, 1))
    return Report(table, header, first.title, first.tree_top, runs=runs)


def _without(header: dict, notes) -> dict:
    """`header` without the `notes` given (said in another run's header already)."""
    if not notes or "notes" not in header:
        return header
    return {**header, "notes": [note for note in header["notes"] if str(note) not in notes]}


def stacked_runs(tables: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The tables of several runs stacked, a `run` column first (the machine formats' table, and the API's on a
    path that holds several runs). Nothing is summed across runs."""
    parts = []
    for name, table in tables:
        table = table.copy()
        table.attrs = {}    # one run's facts (some are frames, which pandas cannot compare when it stacks)
        table.insert(0, RUN, name)
        parts.append(table)
    return _integers_kept(pd.concat(parts, ignore_index=True), parts)


def _integers_kept(table: pd.DataFrame, parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Runs of different kinds have different columns (a CPU-only run has no device columns): stacking them
    leaves blanks that pandas holds as NaN in float columns, so 1143148 ns would print as 1143148.0. A column
    that is integer in every run that has it becomes a nullable integer (blank where a run lacks it)."""
    for column in table.columns:
        kinds = [part[column].dtype for part in parts if column in part.columns]
        if kinds and all(pd.api.types.is_integer_dtype(kind) for kind in kinds) \
                and not pd.api.types.is_integer_dtype(table[column].dtype):
            table[column] = table[column].astype("Int64")
    return table
