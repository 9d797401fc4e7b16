"""`traceattr report` on a folder of several runs (io/runs.py): one page, an index of the runs (name, ranks,
span, busy, verdict) and each run's whole report under its own heading and anchor, never merged; each run's
numbers are summarize's for that run. One run keeps its page as before. The browser's view of the page is in
tests/test_html_geometry.py."""

from __future__ import annotations

import dataclasses
import html
import re

from clirun import run_cli
from conftest import SAMPLE_TRACES
from tracesets import SMALL
from traceattr.analysis.page_plan import page_data_files
from traceattr.analysis.run_tables import report_runs
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.cli import Display
from traceattr.report.html import trace_page

SPEC = dict(SMALL, streams=(7,), dropped_records=0)


def _report(folder, page, *args):
    out = run_cli("report", folder, "-o", page, "--no-cache", "-q", *args)
    assert out.returncode == 0, out.stderr
    return page.read_text(encoding="utf-8")


def _runs(text: str) -> dict[str, str]:
    """{run name: its section} of a several-run page, in page order."""
    found = re.findall(r"<section class=run id=run-(\d+)><h2>Run ([^<]*)</h2>(.*?)(?=<section class=run |<footer>)",
                       text, re.S)
    return {html.unescape(name): body for _, name, body in found}


def _figure_ns(section: str, label: str) -> int:
    """The exact ns of a summary figure (its tooltip) in a run's section."""
    found = re.search(r'<div class=figure title="([\d,]+) ns"><span>' + label + "</span>", section)
    return int(found.group(1).replace(",", ""))


def test_each_run_has_its_own_report_with_summarizes_numbers(tmp_path):
    """A control and a test run of the same ranks at the same time (the test run's sgemm planted 30% slower):
    each section holds its own run's busy and span, as summarize gives them per run; nothing is merged."""
    write_trace_set(tmp_path / "runs" / "control", TraceSpec(ranks=2, seed=1, **SPEC))
    write_trace_set(tmp_path / "runs" / "test", TraceSpec(ranks=2, seed=1, kernel_scale={"sgemm": 1.3}, **SPEC))
    text = _report(tmp_path / "runs", tmp_path / "page.html")
    sections = _runs(text)
    summarized = {run.name: run.header for run in report_runs(str(tmp_path / "runs"), cache=False)}
    assert list(sections) == list(summarized) and sorted(sections) == ["control", "test"]
    for name, section in sections.items():
        assert _figure_ns(section, "busy") == summarized[name]["busy_ns"]
        assert _figure_ns(section, "span") == summarized[name]["span_ns"]
        assert f"run: {name} (" in html.unescape(section)       # its header says which run, never merged
        for title in ("Device utilisation over time", "Top kernels", "Critical path", "Ranks"):
            assert f"<h3>{title}" in section
    assert summarized["test"]["busy_ns"] > summarized["control"]["busy_ns"]      # the planted slowdown
    # the index: one row per run, linking to its section, with its ranks, span, busy and verdict
    index = text[text.index("<section class=runs>"):text.index("<section class=run ")]
    rows = re.findall(r'<tr data-key="([^"]*)"><td class=l title="[^"]*"><a href="#run-(\d+)">.*?</a></td><td class=n>(\d+)</td>'
                      r'<td class=n data-ns="(\d+)">.*?</td><td class=n data-ns="(\d+)">.*?</td><td>([^<]*)</td>',
                      index)
    assert [(name, int(n)) for name, n, *_ in rows] == [(name, i) for i, name in enumerate(sections, 1)]
    for name, _, ranks, span, busy, verdict in rows:
        header = summarized[name]
        assert (int(ranks), int(span), int(busy)) == (len(header["ranks"]), header["span_ns"], header["busy_ns"])
        assert verdict.split(";")[0] == header["check"].split(":")[0]


def test_one_run_keeps_its_page(tmp_path):
    """A folder of one run: the page trace_page gives that run's page data, as before (the footer's time
    aside): no index, no run sections."""
    write_trace_set(tmp_path / "one", TraceSpec(ranks=2, seed=3, **SPEC))
    text = _report(tmp_path / "one", tmp_path / "page.html")
    data, source = page_data_files(str(tmp_path / "one"), cache=False)
    shown = Display(str(tmp_path / "one"), quiet=True).header       # what the command shows with -q
    want = trace_page(dataclasses.replace(data, findings=[]), source, "one", shown=shown)[0]
    cut = re.compile(r"<footer>.*</footer>")
    assert cut.sub("", text.replace("\n", "")) == cut.sub("", want.replace("\n", ""))
    assert "<section class=run" not in text and "<section class=runs>" not in text


def test_the_bundled_sample_folder_of_four_runs(tmp_path):
    """sample_traces holds four runs of real traces (two CPU-only): each its own section and numbers, and
    the capture run's missing window warns in its own section only."""
    text = _report(SAMPLE_TRACES, tmp_path / "page.html")
    sections = _runs(text)
    summarized = {run.name: run.header for run in report_runs(str(SAMPLE_TRACES), cache=False)}
    assert list(sections) == list(summarized) and len(sections) == 4
    for name, section in sections.items():
        assert _figure_ns(section, "busy") == summarized[name]["busy_ns"]
    warned = [name for name, section in sections.items() if "capture incomplete" in html.unescape(section)]
    assert warned == ["capture_cuda_2stream/rank0"]
    assert "absent: these traces hold no device activities" in sections["cpu_torch213"]


def test_several_runs_without_the_cache_decode_each_file_once(tmp_path, monkeypatch, capsys):
    """Each run is mapped again over its own files, and its timeline once more: from the command's spill of
    the first map (io/spill.py), never by a second decode."""
    from test_decode_once import _cli, _decodes

    for name, seed in (("control", 1), ("test", 2)):
        write_trace_set(tmp_path / "runs" / name, TraceSpec(ranks=2, seed=seed, **SPEC))
    page = tmp_path / "page.html"
    counts = _decodes(tmp_path / "log", monkeypatch,
                      _cli(["report", str(tmp_path / "runs"), "-o", str(page), "--no-cache", "-q", "-j", "1"]))
    capsys.readouterr()
    assert set(counts) == {str(p.resolve()) for p in (tmp_path / "runs").rglob("*.json")}
    assert max(counts.values()) == 1 and len(_runs(page.read_text(encoding="utf-8"))) == 2


def test_each_runs_findings_on_stderr_name_their_run(tmp_path):
    """With the page or table in a file, the findings and judgements go to stderr: from a folder of several
    runs each names the run it is about (they were anonymous lines, one run's after another's)."""
    page = tmp_path / "page.html"
    for args in (("report", SAMPLE_TRACES, "-o", page), ("summarize", SAMPLE_TRACES, "--format", "csv",
                                                         "-o", tmp_path / "table.csv")):
        out = run_cli(*args, "--no-cache")
        assert out.returncode == 0, out.stderr
        judged = [line for line in out.stderr.splitlines()
                  if line.startswith(("traceattr: finding: ", "traceattr: check: "))]
        names = [name for name in (p.name for p in SAMPLE_TRACES.iterdir() if p.is_dir())]
        assert len(judged) >= 2, out.stderr
        for line in judged:
            about = line.split(": ", 2)[2]
            assert any(about.startswith(name) for name in names), line
