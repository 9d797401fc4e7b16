"""`traceattr check PATH`: the integrity verdict of every run under a path, for people and for CI.

People formats show, per run, a header with the verdict and one row per finding that is not plainly ok;
`--format json` gives the whole verdict tree (overall, per run, per file, every check with count and ns);
csv and parquet give every finding with a `run` column; with `--clip-outliers`, each run's busy and idle time
per (rank, device) as loaded and with the outlier activities clipped, side by side. The checks are run by
traceattr.pipelines.check.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pandas as pd

from traceattr import schema as S
from traceattr.analysis.check import OK, RUN_PATH, VERDICTS, CheckReport
from traceattr.report.render import RAW_CSV, render, write_text


@dataclass(frozen=True)
class RunCheck:
    name: str
    report: CheckReport
    clip: pd.DataFrame | None     # per (rank, device): as loaded vs clipped; None without --clip-outliers

    @property
    def verdict(self) -> str:
        return self.report.verdict

    @property
    def findings(self) -> pd.DataFrame:
        """Every check of every file and of the run, passed ones included (check.COLUMNS)."""
        return self.report.findings

    @property
    def problems(self) -> pd.DataFrame:
        """The findings that are not a plain zero-count ok: what the report's table shows."""
        return shown(self.report.findings)

    @property
    def notes(self) -> list[str]:
        """Each file (or the run as a whole) that is not ok, with the checks behind its verdict: the report
        header's notes, paths as found."""
        files, checks = self.report.files(), _checks_by_file(self.report.findings)
        return [_file_note(checks.get((row.rank, row.window, row.path, row.verdict), ""), row.path, row.verdict)
                for row in files.itertuples() if row.verdict != OK]


@dataclass(frozen=True)
class CheckResult:
    """traceattr.check(): the worst verdict over every run, and each run's RunCheck."""
    verdict: str
    runs: list[RunCheck]

    @property
    def exit_code(self) -> int:
        """`traceattr check`'s exit status: 0 ok, 1 warn, 2 bad."""
        return VERDICTS.index(self.verdict)


NO_RUN = "(files in no run)"      # the entry of files that belong to none of the runs (pipelines/check.py)


def shown(findings: pd.DataFrame, root: str | None = None) -> pd.DataFrame:
    """What people read: findings that are not a plain zero-count ok, with paths under `root` (the checked
    path, named in the title) shown relative to it (a 24-column path column folded `run/rank0.pt.trace.jso`
    over three lines; csv and json keep them as typed), and no window column when every window is 0."""
    rows = findings[(findings[S.COUNT] > 0) | (findings["verdict"] != OK)].reset_index(drop=True)
    if root is None or rows.empty:
        return rows
    if (rows[S.WINDOW] <= 0).all():     # one window per rank (most runs): a column of zeros, and 9 columns
        rows = rows.drop(columns=[S.WINDOW])    # the detail can use at 100
    return rows.assign(**{S.PATH: [_under(path, root) for path in rows[S.PATH].tolist()]})


def _under(path: str, root: str | None) -> str:
    """`path` relative to `root` when it lies under it (a file given as `root`: its name), else as typed."""
    if path == RUN_PATH or root is None:
        return path
    base = root if os.path.isdir(root) else os.path.dirname(root)
    try:
        relative = os.path.relpath(path, base or ".")
    except ValueError:
        return path
    return path if relative == ".." or relative.startswith(".." + os.sep) else relative


def as_json(results: list[RunCheck], verdict: str) -> str:
    def records(frame: pd.DataFrame) -> list[dict]:
        return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")

    document = {"verdict": verdict, "exit_code": VERDICTS.index(verdict), "runs": [
        {"run": r.name, "verdict": r.report.verdict, "files": records(r.report.files()),
         "findings": records(r.report.findings),
         **({"clipped": records(r.clip)} if r.clip is not None else {})} for r in results]}
    return json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n"


def stacked(results: list[RunCheck]) -> pd.DataFrame:
    """Every finding of every run, with a `run` column first (csv, parquet)."""
    parts = [r.report.findings.assign(run=r.name) for r in results]
    table = pd.concat(parts, ignore_index=True)
    return table[["run"] + [c for c in table.columns if c != "run"]]


def header(result: RunCheck, verdict: str, path: str, runs: int) -> dict:
    files = result.report.files()
    counts = files[files[S.PATH] != "<run>"]["verdict"].value_counts()
    head = {"verdict": f"{result.report.verdict} (overall {verdict})" if runs > 1 else verdict,
            "files": ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)}
    if result.name == NO_RUN:
        head["run"] = f"files under {path} that could not be read, so belong to none of its runs"
    elif runs > 1:
        head["run"] = f"{result.name} (one of {runs} runs under {path}, never merged)"
    checks = _checks_by_file(result.report.findings)
    head["notes"] = [_file_note(checks.get((row.rank, row.window, row.path, row.verdict), ""), row.path,
                                row.verdict, path)
                     for row in files.itertuples() if row.verdict != OK]
    return head


def _checks_by_file(findings: pd.DataFrame) -> dict[tuple, str]:
    """(rank, window, path, verdict) -> its checks, each once, in the findings' order: one pass (a filter of
    every finding per file was quadratic: 71 of check's 78 s at 20,000 files)."""
    keys = [S.RANK, S.WINDOW, S.PATH, "verdict"]
    grouped = findings.groupby(keys, sort=False, dropna=False)["check"]
    return {key: ", ".join(dict.fromkeys(values.tolist())) for key, values in grouped}


def _file_note(checks: str, path: str, verdict: str, root: str | None = None) -> str:
    """`rank0.pt.trace.json: warn (unlinked, far_beyond_typical)`: a file's verdict and the checks behind it
    (the note said only `<run>: warn`)."""
    who = "the run as a whole" if path == RUN_PATH else _under(path, root)
    return f"{who}: {verdict} ({checks})"


def render_check(results: list[RunCheck], verdict: str, path: str, fmt: str, output: str | None,
                 width: int | None = None) -> str | None:
    """The check report in `fmt`; the text, or None when written to `output`."""
    if fmt in ("csv", RAW_CSV, "parquet"):
        return render(stacked(results), fmt, header={"verdict": verdict}, output=output)
    if fmt == "json":
        text = as_json(results, verdict)
    else:
        parts = []
        runs = sum(r.name != NO_RUN for r in results)
        for result in results:
            title = f"check {result.name if len(results) > 1 else path}"
            parts.append(render(shown(result.report.findings, path), fmt, header=header(result, verdict, path, runs),
                                title=title, width=width))
            if result.clip is not None:
                parts.append(render(result.clip, fmt, title="outliers clipped", width=width))
        text = "\n".join(parts)
    if output is None:
        return text
    write_text(text, output)
    return None
