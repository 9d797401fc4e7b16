"""The in-memory reference the map-reduce commands are tested against: each run under a path loaded whole
(traceattr.load_runs) and analysed by the TraceSet analyses (analysis/check.py, levels.py, header.py), code
apart from the engine's per-file plans. Test code only: no command runs it."""

from __future__ import annotations

import pandas as pd

from traceattr import schema as S
from traceattr.model.traceset import TraceSet
from traceattr.analysis.clip import clip_table
from traceattr.analysis.summarize import LEVELS as SUMMARY_LEVELS
from traceattr.analysis.check import check
from traceattr.report.check import RunCheck, skipped_files
from traceattr.report.summary import Report, _several_runs, _title
from traceattr.analysis.attribute import LEVELS as ATTRIBUTION_LEVELS, attribution_part, attribution_table, merge_parts
from traceattr.analysis.collectives import collectives_table, match_collectives
from traceattr.analysis.rank_comm import with_multirank_columns
from traceattr.analysis.summarize import busy_by_rank, keys_level


def from_tracesets(path, by, top, tree, links, skip_bad, jobs, progress, cache, scheduler, rank_map,
                    cache_dir, multirank, across: bool = False) -> Report:
    """The report from whole TraceSets, one per run (open_runs): stores; tests compare the map-reduce reports
    with it."""
    from traceattr.io.sources import open_runs

    # kernel, category and rank tables need no cpu ops or python frames (the bulk of a trace): leaving
    # them out as each file arrives keeps many ranks in memory. Steps still come from the annotations and
    # the runtime calls that launched each kernel.
    # `--by rank` keeps the cpu ops: the straggler's cause names the ops that launched its extra compute
    unused = () if by not in SUMMARY_LEVELS or links else (S.PYTHON_FUNCTION,) if by == "rank" else \
        (S.CPU_OP, S.PYTHON_FUNCTION)
    runs, source = open_runs(path, skip_bad=skip_bad, jobs=jobs, progress=progress, cache=cache,
                             scheduler=scheduler, drop_host=unused, rank_map=rank_map, cache_dir=cache_dir)
    reports = [(name, _report(traceset, source, by, top, tree, links, multirank, across))
               for name, traceset in runs]
    return reports[0][1] if len(reports) == 1 else _several_runs(path, reports)


def _report(traceset, source: str, by, top, tree, links, multirank, across: bool = False) -> Report:
    from traceattr.analysis.header import summary_header, table_header
    from traceattr.io.comm import apply_patterns

    traceset = apply_patterns(traceset, multirank["comm_patterns"])    # once: every table and header agree
    if links:
        from traceattr.analysis.attribute import link_report
        header = summary_header(traceset)
        header["source"] = source
        return Report(link_report(traceset), header, "link report")
    if across and len(traceset.ranks) > 1:
        from traceattr.analysis.across import across_ranks
        table = across_ranks(level_table(traceset, by, None, tree=tree, align=multirank["align"], aggregate=multirank["aggregate"]), top, traceset.ranks)
    else:
        table = level_table(traceset, by, top, tree=tree, align=multirank["align"],
                            aggregate=multirank["aggregate"])
    header = table_header(traceset, table, by)
    header["source"] = source
    return Report(table, header, _title(table, by, multirank), tree_top=(top or 10) if tree else None)



def traceset_runs(path: str, *, clip: bool = False, **options) -> list[RunCheck]:
    """check_runs by loading each run whole: for a store (loaded whole by design), and the reference the
    map-reduce is tested against. `options`: open_runs' (jobs, cache, scheduler, rank_map, ...)."""
    from traceattr.io.sources import open_runs

    runs, _ = open_runs(path, skip_bad=True, **options)
    return [RunCheck(name, check(traceset, skipped=skipped_files(traceset.notes)),
                     clip_table(traceset) if clip else None)
            for name, traceset in runs]


def level_table(traceset: TraceSet, by: str, top: int | None = None, *, tree: bool = False, align: bool = True,
                aggregate: bool = False) -> pd.DataFrame:
    """`by`: kernel, category, rank, collective or an attribution level (a tree folds per level when rendered;
    a flat table folds below `top` into <other>, and still adds up)."""
    if by == "collective":
        return collectives_table(match_collectives(traceset, align=align), top=top, aggregate=aggregate,
                                 align=align)
    if by == "rank":
        return with_multirank_columns(traceset, busy_by_rank(traceset), align=align)
    if by in ATTRIBUTION_LEVELS:
        return attribution_table(merge_parts([attribution_part(traceset, by)]), tree=tree,
                                 top=None if tree else top)
    return keys_level(traceset, by, top)
