"""traceattr report / compare --format html: one offline page, checked in a real headless Chromium."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.tracesets import SMALL
from traceattr.builder import TraceSpec, write_trace_set
from clirun import run_cli

XSS = "<img src=x onerror=alert(1)>"
REPO = Path(__file__).resolve().parents[1]


def cli(*args):
    result = run_cli(*args)         # in this process (tests/clirun.py): a process's exit code and output
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    write_trace_set(root / "a", TraceSpec(ranks=2, add_kernels={XSS: 50_000, "</td><script>alert(2)</script>": 45_000},
                                          rank_scale={1: 1.3}, **SMALL))
    write_trace_set(root / "b", TraceSpec(ranks=2, kernel_scale={"sgemm": 1.5}, **SMALL))
    return root



def open_page(browser, path: Path):
    """The page, and every console error, page error, dialog (an alert() that ran) and network request."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    events = {"errors": [], "dialogs": [], "requests": []}
    page.on("console", lambda m: m.type == "error" and events["errors"].append(m.text))
    page.on("pageerror", lambda e: events["errors"].append(str(e)))
    page.on("dialog", lambda d: (events["dialogs"].append(d.message), d.dismiss()))
    page.on("request", lambda r: events["requests"].append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, events


def assert_clean(page, events, path: Path):
    assert events["errors"] == [] and events["dialogs"] == []
    assert events["requests"] == [path.as_uri()], "the page must not fetch anything"
    sizes = page.eval_on_selector_all("figure svg", "els => els.map(e => [e.getBoundingClientRect().width, "
                                      "e.getBoundingClientRect().height, e.querySelectorAll('path,rect,text').length])")
    assert sizes and all(w > 100 and h > 50 and n > 5 for w, h, n in sizes), sizes
    return sizes


def test_report_in_a_real_browser(runs, browser, tmp_path):
    page_path = tmp_path / "report.html"
    cli("report", runs / "a", "-o", page_path, "-q")
    assert page_path.stat().st_size < 3_000_000
    page, events = open_page(browser, page_path)
    sizes = assert_clean(page, events, page_path)
    # timeline, kernels, ops, modules, categories, rank x step heatmap, critical path, roofline, wait vs transfer
    assert len(sizes) == 9
    # the hostile names are text: no element came out of them, nothing ran
    assert page.locator("img").count() == 0 and page.locator("script").count() == 0
    assert XSS in page.inner_text("body") and "</td><script>alert(2)</script>" in page.inner_text("body")
    # numbers in the page == the CLI's (exact ns carried by each cell, and the human figure shown)
    expected = {row["name"]: row for row in json.loads(cli("summarize", runs / "a", "-q", "--format", "json").stdout)}
    rows = page.eval_on_selector_all(
        "section:has(h2:text-is('Top kernels by self time (all ranks)')) tbody tr",
        "trs => trs.map(tr => [tr.dataset.key, ...Array.from(tr.cells).map(c => [c.dataset.ns || null, c.innerText])])")
    assert len(rows) == 16      # the top 15 and <other>
    from traceattr.units import human_ns
    for key, _name, (self_ns, self_text), *_ in rows:
        if key == "<other>":
            continue
        assert int(self_ns) == expected[key]["self_ns"] and self_text == human_ns(expected[key]["self_ns"])
    body = page.inner_text("body")
    # rank 1's kernels are planted 1.3x slower: the busiest rank. The straggler verdict (who made the others
    # wait, docs/collectives.md) is shown too; this builder's collectives do not couple the ranks, so which
    # rank it names is tested on planted truth in test_collectives.py, not here
    assert "busiest rank: rank 1" in body and "straggler: rank " in body
    assert "Communication: waiting vs transferring" in body     # the rank table has the wait/transfer split
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)


def test_compare_page_waterfall_adds_up(runs, browser, tmp_path):
    import traceattr

    page_path = tmp_path / "diff.html"
    cli("compare", runs / "a", runs / "b", "--format", "html", "-o", page_path, "-q")
    page, events = open_page(browser, page_path)
    assert len(assert_clean(page, events, page_path)) == 1
    table = traceattr.compare(traceattr.load(runs / "a", progress=False), traceattr.load(runs / "b", progress=False))
    steps = table[table["kind"].isin(["key", "other"])]
    assert steps["delta_ns"].sum() == table.attrs["busy_b_ns"] - table.attrs["busy_a_ns"] != 0
    body = page.inner_text("body")
    assert "(not in the table)" not in body and page.locator("img").count() == 0
    assert "<img src=x onerror=alert(N)>" in body      # the normalized key, shown as text
    cells = page.eval_on_selector_all("tbody tr", "trs => trs.map(tr => [tr.dataset.key, +tr.cells[3].dataset.ns])")
    assert {key: delta for key, delta in cells} == dict(zip(table["key"], table["delta_ns"]))


@pytest.mark.parametrize("folder, present, absent", [
    ("cpu_torch213", ["Top ops by self time", "host self time"], ["no device activities"]),
    ("capture_cuda_2stream", ["Top kernels by self time", "Busy time per rank and step"],
     ["one rank; waiting for other ranks needs several"]),
    ("built without stacks", ["Top ops by self time"], ["no module in these traces"]),
])
def test_reports_say_why_a_section_is_absent(browser, tmp_path, folder, present, absent):
    traces = REPO / "sample_traces" / folder
    if folder == "built without stacks":
        traces = tmp_path / "nostack"
        write_trace_set(traces, TraceSpec(with_stack=False, **SMALL))
    import traceattr

    page_path = tmp_path / "page.html"      # in-process: the CLI path is the first test's
    page_path.write_text(_trace_report(traceattr.load(traces, progress=False, cache=False), "traces", folder),
                         encoding="utf-8")
    page, events = open_page(browser, page_path)
    assert events["errors"] == [] and events["dialogs"] == []
    body = page.inner_text("body")
    for text in present + absent:
        assert text in body, text


def test_rank_by_step_heatmap_stays_a_readable_size_at_many_ranks():
    """The heatmap grew 0.3 in per rank and matplotlib rasterized all of it (100 in tall and +170 MB to draw
    at 331 ranks): at most MAX_LABELLED_ROWS rows tall, every k-th rank labelled, every rank still drawn."""
    import re

    import numpy as np

    from traceattr.report import plots

    ranks = 331
    grid = np.arange(ranks * 6, dtype=np.int64).reshape(ranks, 6)
    svg = plots.heatmap([f"rank {r}" for r in range(ranks)], [f"ProfilerStep#{s}" for s in range(6)], grid, "t")
    height_pt = float(re.search(r'height="([0-9.]+)pt"', svg).group(1))
    assert height_pt <= (0.9 + 0.3 * plots.MAX_LABELLED_ROWS) * 72
    labelled = set(re.findall(r">rank (\d+)<", svg))
    assert "0" in labelled and len(labelled) <= plots.MAX_LABELLED_ROWS and str(ranks - 1) not in labelled
    few = plots.heatmap([f"rank {r}" for r in range(4)], ["ProfilerStep#1"], grid[:4, :1], "t")
    assert set(re.findall(r">rank (\d+)<", few)) == {"0", "1", "2", "3"}      # a few ranks: each labelled


@pytest.mark.parametrize("chart", ["stacked_ranks", "grouped"])
def test_per_rank_bars_stay_a_readable_size_at_many_ranks(chart):
    """One bar per rank grew 0.28-0.35 in per rank (290 in tall, 1.1 MB of SVG and 7 s to draw at 1024
    ranks): over MAX_LABELLED_ROWS ranks the bars are stacked bands, at most MAX_LABELLED_ROWS rows tall,
    every k-th rank labelled; a few ranks keep a labelled bar each."""
    import re

    from traceattr.report import plots

    def draw(ranks: int) -> str:
        values = [(r % 7 + 1) * 1_000_000 for r in range(ranks)]
        series = {"compute": values, "communication": values[::-1]} if chart == "stacked_ranks" else \
            {"wait": values, "transfer": values[::-1]}
        return getattr(plots, chart)(list(range(ranks)), series)

    many = draw(1024)
    height_pt = float(re.search(r'height="([0-9.]+)pt"', many).group(1))
    assert height_pt <= (0.6 + 0.35 * plots.MAX_LABELLED_ROWS) * 72
    assert len(many) < 300_000
    labelled = set(re.findall(r"rank (\d+)", many))
    assert "0" in labelled and len(labelled) <= plots.MAX_LABELLED_ROWS
    few = draw(4)
    assert set(re.findall(r"rank (\d+)", few)) == {"0", "1", "2", "3"}
    assert few.count("<path") > draw(1).count("<path")         # a bar (path) per rank and series


def test_huge_names_no_communication_and_cpu_only_compare(browser, tmp_path):
    """Found by a search: a 100,000-character kernel name made the page ~1 M px wide (and 400 kB a name);
    an emoji in a name printed matplotlib's glyph UserWarning; with no communication kernels the wait vs
    transfer chart was drawn all zero; a CPU-only rank read 'device -1'; two different CPU-only runs
    compared as 'A and B spent the same time on every key'."""
    huge = "void huge_kernel<" + "float, " * 14_000 + "int>"
    write_trace_set(tmp_path / "t", TraceSpec(ranks=2, collective=False, add_kernels={huge: 400_000,
                                                                                      "fire_🔥_kernel": 300_000},
                                              **SMALL))
    page_path = tmp_path / "report.html"
    done = cli("report", tmp_path / "t", "-o", page_path, "-q", "--no-cache")
    assert "Warning" not in done.stderr, done.stderr
    assert page_path.stat().st_size < 500_000
    page, events = open_page(browser, page_path)
    assert events["errors"] == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 1200    # the viewport: nothing widens it
    keys = page.eval_on_selector_all("tbody tr", "trs => trs.map(tr => tr.dataset.key)")
    assert huge in keys                                                     # the whole name is still there
    body = page.inner_text("body")
    assert "absent: no communication kernels" in body and huge not in body
    # CPU-only: the rank table's host row, and a compare with nothing at the kernel level
    import traceattr

    cpu = REPO / "sample_traces" / "cpu_torch213"
    page_path.write_text(_trace_report(traceattr.load(cpu, cache=False), "traces", "cpu"), encoding="utf-8")
    body = open_page(browser, page_path)[0].inner_text("body")
    assert "device -1" not in body and "rank 0 (no device)" in body
    other = tmp_path / "cpu_b"
    other.mkdir()
    (other / "rank0.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1_795_993_600_000_000, "dur": 50}]}))
    diff = tmp_path / "diff.html"
    cli("compare", cpu, other, "--format", "html", "-o", diff, "-q", "--no-cache")
    body = open_page(browser, diff)[0].inner_text("body")
    assert "same time on every key" not in body and "neither run has time at this level" in body


QUOTES = "q\" onmouseover=\"alert(3)\" x='<script>alert(4)</script>' \"><script>alert(5)</script>"


class _Tags(HTMLParser):
    """Every start tag of a page, as (tag, [(attribute, value), ...]) with entities decoded."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def test_title_attributes_hold_names_with_quotes_escaped(tmp_path):
    """The tooltip (`title="..."`) of a table row holds the whole name; the browser tests' hostile names had
    no `"`, so escaping it with quote=False there passed: a `"` in a kernel or op name then closed the
    attribute and the rest of the name became attributes of the cell (an onmouseover that runs). Parsed
    here with html.parser, no browser needed: each title round-trips to the name, and no tag carries an
    attribute the report does not write."""
    import traceattr

    def x(cat, name, ts, dur, pid=1, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [x("user_annotation", "ProfilerStep#1", 1000, 500)]
    for i, (op_name, kernel_name) in enumerate([(QUOTES, QUOTES), ("aten::mm", "sgemm")], start=1):
        start = 1000 + 100 * i
        events += [x("cpu_op", op_name, start, 50),
                   x("cuda_runtime", "cudaLaunchKernel", start + 10, 5, correlation=i),
                   x("kernel", kernel_name, 2000 + 100 * i, 50 + i, pid=0, tid=7, device=0, stream=7, correlation=i)]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    page = _trace_report(traceattr.load(tmp_path / "t", progress=False, cache=False), "traces", "quotes")

    parser = _Tags()
    parser.feed(page)
    parser.close()
    titled = [(tag, dict(attrs)) for tag, attrs in parser.tags if any(name == "title" for name, _ in attrs)]
    assert titled
    # the kernel table and the op table each have a row for the name, its cell's title the whole name
    assert sum(1 for tag, attrs in titled if tag == "td" and attrs["title"] == QUOTES) >= 2, \
        [attrs["title"] for _, attrs in titled]
    assert {attrs["title"] for _, attrs in titled} >= {QUOTES, "sgemm", "aten::mm"}
    # no attribute broken: table tags carry only what table_html writes, and nothing anywhere came from a name
    allowed = {"td": {"title", "class", "data-ns"}, "tr": {"data-key"}, "th": {"class"}}
    for tag, attrs in parser.tags:
        names = [name for name, _ in attrs]
        assert len(names) == len(set(names)), (tag, attrs)
        assert set(names) <= allowed.get(tag, set(names)), (tag, attrs)
        assert not any(name.startswith("on") or not name.replace("-", "").replace(":", "").isalnum()
                       for name in names), (tag, attrs)
    assert "script" not in {tag for tag, _ in parser.tags}
    assert sum(1 for tag, attrs in parser.tags if tag == "tr" and dict(attrs).get("data-key") == QUOTES) >= 2


def test_the_report_of_a_capture_that_lost_a_window_says_so_in_its_verdict(tmp_path):
    """summarize and check said warn (window 1 missing, from the manifest); the HTML page said `check: ok`
    and had no note."""
    from conftest import SAMPLE_TRACES

    output = tmp_path / "r.html"
    done = cli("report", SAMPLE_TRACES / "capture_cuda_2stream", "-o", output, "--no-cache", "-q")
    page = output.read_text()
    assert "check: warn: capture incomplete (1) (traceattr check PATH for details)" in page
    assert "note: capture: missing: " in page and "window1.pt.trace.json.gz" in page
    assert "traceattr: check: warn: capture incomplete (1)" in done.stderr


def _trace_report(traceset, source: str, path_label: str) -> str:
    """The HTML page of a loaded TraceSet (the same plan as a path's, over its files)."""
    from traceattr.analysis.page_plan import page_data_files
    from traceattr.report.html import trace_page

    return trace_page(page_data_files(traceset)[0], source, path_label)[0]
