"""`traceattr check PATH`, run: every run under a path checked by per-file map-reduce (analysis/check.py,
clip_plan.py), with the capture manifests' problems and the files that belong to no run; report/check.py
renders the result.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pandas as pd

from traceattr import schema as S
from traceattr.analysis.check import SKIPPED_CHECKS, VERDICTS, WARN, CheckReport
from traceattr.analysis.run_tables import check_files
from traceattr.io.discover import discover
from traceattr.model.traceset import TraceSet
from traceattr.pipelines.capture_problems import capture_problems_by_run
from traceattr.report.check import NO_RUN, RunCheck

_SKIPPED = re.compile(r"^skipped (.+?): (.*)$")


def check_runs(path: str | TraceSet, *, clip: bool = False, jobs: int | None = None, progress: bool = False,
               cache: bool = True, scheduler: str | None = None, executor: Any = None,
               rank_map: dict[str, int] | None = None, cache_dir: str | None = None) -> tuple[list[RunCheck], str]:
    """Every run under `path`, checked; files that cannot be read are findings (bad), not errors. By
    per-file map-reduce (the driver holds no trace; the files of a store or a TraceSet are mapped from its
    tables, as one run)."""
    if not isinstance(path, TraceSet):
        path = discover(path)        # once: the plan and the capture problems read it
    options = dict(rank_map=rank_map, jobs=jobs, scheduler=scheduler, executor=executor, cache=cache,
                   cache_dir=cache_dir, progress=progress)
    results = [RunCheck(*found) for found in check_files(path, skipped_files, clip=clip, **options)]
    if not isinstance(path, TraceSet):      # a TraceSet is one run, and has no capture manifests
        results = with_capture_problems(results, path)
        results = files_in_no_run_apart(results, path)
    return results, VERDICTS[max(VERDICTS.index(r.report.verdict) for r in results)]


def with_capture_problems(results: list[RunCheck], path: str) -> list[RunCheck]:
    """Runs from traceattr.capture folders (at, under or inside `path`) whose manifests say they did not end
    cleanly: each such run's capture_incomplete row counts its problems and shows the first (a rank killed in
    stop() left only good windows, and check said ok)."""
    found = capture_problems_by_run(path, [r.name for r in results])
    out = []
    for result in results:
        problems = found.get(result.name)
        if problems:
            findings = result.report.findings.copy()
            row = findings.index[findings["check"] == "capture_incomplete"]
            more = f" (and {len(problems) - 1} more: traceattr.capture.read_run)" if len(problems) > 1 else ""
            findings.loc[row, [S.COUNT, "verdict", "detail"]] = [len(problems), WARN, problems[0][:300] + more]
            result = RunCheck(result.name, CheckReport.of(findings), result.clip)
        out.append(result)
    return out


def files_in_no_run_apart(results: list[RunCheck], root: str) -> list[RunCheck]:
    """With several runs, a file skipped before the runs were told apart (unreadable) was listed, and
    counted bad, in every run's report. It now stays only in the run named by its folder, and is one
    entry of its own when no run is."""
    if len(results) < 2:
        return results

    def skipped(findings: pd.DataFrame) -> pd.Series:      # per row: (path, check, detail) of a skipped file
        rows = findings[findings["check"].isin(SKIPPED_CHECKS)]
        return pd.Series(list(zip(rows[S.PATH], rows["check"], rows["detail"])), index=rows.index, dtype=object)

    common = set.intersection(*(set(skipped(r.report.findings)) for r in results))
    if not common:
        return results
    names = {r.name for r in results}
    home = {key: folder if (folder := os.path.relpath(os.path.dirname(key[0]), root)) in names else None
            for key in common}
    apart, no_run = [], None
    for result in results:
        findings = result.report.findings
        keys = skipped(findings)
        elsewhere = findings.index.isin(keys[keys.map(lambda k: k in common and home[k] != result.name)].index)
        if no_run is None:
            orphans = keys[keys.map(lambda k: k in common and home[k] is None)].index
            no_run = findings.loc[orphans].reset_index(drop=True)
        apart.append(RunCheck(result.name, CheckReport.of(findings[~elsewhere].reset_index(drop=True)), result.clip))
    return apart + ([RunCheck(NO_RUN, CheckReport.of(no_run), None)] if len(no_run) else [])


def skipped_files(notes) -> list[tuple[str, str]]:
    """(path, problem) of the files the loader skipped, from its notes (not-a-trace files are no finding)."""
    return [m.groups() for m in map(_SKIPPED.match, notes) if m and "(not a trace)" not in m[2]]
