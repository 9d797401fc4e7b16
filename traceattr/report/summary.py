"""summary_report: what `traceattr summarize` shows for a path, from the cheapest source that is exact.

In order: the per-window kernel summaries a traceattr.capture run wrote (kernel and category tables only),
a finished table cached for the same request on unchanged inputs, else the traces (or a store) themselves.
The header always says which source answered.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceattr import schema as S
from traceattr.analysis.summarize import LEVELS as SUMMARY_LEVELS


@dataclass(frozen=True)
class Report:
    table: pd.DataFrame
    header: dict
    title: str
    tree_top: int | None = None          # render as an indented tree with this many children per level


def summary_report(path: str, *, by: str = "kernel", top: int | None = None, tree: bool = False,
                   links: bool = False, skip_bad: bool = False, jobs: int | None = None,
                   progress: bool = False, cache: bool = True, scheduler: str | None = None) -> Report:
    from traceattr.errors import TraceInputError

    if tree and by in SUMMARY_LEVELS:
        raise TraceInputError("--tree needs --by op_stack, module or annotation")
    plain = not (tree or links)
    fallback = None
    if by in SUMMARY_LEVELS and plain:
        from traceattr.io.summaries import capture_header, capture_summary
        found = capture_summary(path, by, top)   # a traceattr.capture folder: its parquet summaries
        if found is not None and found.table is not None:
            return Report(found.table, capture_header(found), f"device time by {by}")
        fallback = found.reason if found is not None else None
    key = None
    if cache and plain:
        from traceattr.io.results import get_result, result_key
        key = result_key(path, {"command": "summarize", "by": by, "top": top, "skip_bad": skip_bad})
        cached = get_result(path, key)
        if cached is not None:
            table, header, title = cached
            header["source"] = "cached result (inputs unchanged since it was computed)"
            return Report(table, header, title)
    report = _from_traces(path, by, top, tree, links, skip_bad, jobs, progress, cache, scheduler)
    if fallback:
        report.header["notes"].append(fallback)
    if key is not None:
        from traceattr.io.results import put_result
        put_result(path, key, report.table, report.header, report.title)
    return report


def _from_traces(path, by, top, tree, links, skip_bad, jobs, progress, cache, scheduler) -> Report:
    from traceattr.analysis.header import summary_header, table_header
    from traceattr.io.sources import open_traces
    from traceattr.io.store import is_store

    if not is_store(path):      # trace files: per-file map-reduce, the driver never holds the traces
        from traceattr.analysis.mapreduce import report_files
        table, header = report_files(path, by=by, top=top, tree=tree, links=links, skip_bad=skip_bad, jobs=jobs,
                                     progress=progress, cache=cache, scheduler=scheduler)
        title = "link report" if links else f"{table.attrs.get('time_kind', 'device')} time by {by}"
        return Report(table, header, title, tree_top=(top or 10) if tree else None)

    # kernel, category and rank tables need no cpu ops or python frames (the bulk of a trace): leaving
    # them out as each file arrives keeps many ranks in memory. Steps still come from the annotations and
    # the runtime calls that launched each kernel.
    unused = (S.CPU_OP, S.PYTHON_FUNCTION) if by in SUMMARY_LEVELS and not links else ()
    traceset, source = open_traces(path, skip_bad=skip_bad, jobs=jobs, progress=progress, cache=cache,
                                   scheduler=scheduler, drop_host=unused)
    if links:
        from traceattr.analysis.attribute import link_report
        header = summary_header(traceset)
        header["source"] = source
        return Report(link_report(traceset), header, "link report")
    if by in SUMMARY_LEVELS:
        from traceattr.analysis.summarize import summarize
        table = summarize(traceset, by=by, top=top)
    else:
        from traceattr.analysis.attribute import attribute
        # a tree folds per level when rendered; a flat table folds below --top into <other> (still adds up)
        table = attribute(traceset, by=by, tree=tree, top=None if tree else top)
    header = table_header(traceset, table, by)
    header["source"] = source
    title = f"{table.attrs.get('time_kind', 'device')} time by {by}"
    return Report(table, header, title, tree_top=(top or 10) if tree else None)
