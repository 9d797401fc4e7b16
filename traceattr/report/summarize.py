"""What `traceattr summarize` shows, rendered: a Report (a table, its header and title, or one per run) in
a format, and the header lines of a capture's problems. The pipeline that builds a Report, from capture
summaries, a cached table or the traces, is traceattr.pipelines.summarize."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceattr.analysis.check import line_with_warning
from traceattr.report.render import render, write_text


@dataclass(frozen=True)
class Report:
    """What summary_report (traceattr.pipelines.summarize) returns and render_report shows."""
    table: pd.DataFrame
    header: dict
    title: str
    tree_top: int | None = None          # render as an indented tree with this many children per level
    runs: tuple = ()                     # several runs under the path: ((name, Report), ...), never merged


def capture_notes(problems: list[str]) -> list[str]:
    """The first three of a capture's problems as header notes (the tables were 'ok' while a rank had been
    killed in stop(): only its manifests knew), each naming its folder when that is not the path given."""
    notes = [f"capture: {problem}" for problem in problems[:3]]
    if len(problems) > 3:
        notes.append(f"and {len(problems) - 3} more: traceattr check or traceattr.capture.read_run")
    return notes


def with_capture_verdict(header: dict, problems: list[str], checked: bool = True) -> None:
    """The header's check line counts the capture's problems as `traceattr check` does (capture_incomplete,
    a warning): it said ok beside a note that a rank's window was missing. `checked=False`: a table
    answered from capture summaries, where no check on traces ran (capture_header says so)."""
    if problems and (not checked or "check" in header):
        header["check"] = line_with_warning(header["check"] if checked else None, "capture_incomplete",
                                            len(problems))


def render_report(report: Report, fmt: str, output: str | None, width: int | None,
                  full_names: bool = False) -> str | None:
    """Render a summary report: per run (its own header and table) for people formats when the path held
    several runs, else the one table. Returns the text, or None when written to `output`."""
    if not report.runs or fmt not in ("table", "markdown"):
        tree_top = None if report.runs else report.tree_top
        return render(report.table, fmt, header=report.header, output=output, title=report.title, width=width,
                      tree_top=tree_top, full_names=full_names)
    text = "\n".join(render(part.table, fmt, header=part.header, title=part.title, width=width,
                            tree_top=part.tree_top, full_names=full_names) for _, part in report.runs)
    if output is None:
        return text
    write_text(text, output)
    return None
