"""traceattr report / compare --format html: one offline page, checked in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tracesets import SMALL
from traceattr.builder import TraceSpec, write_trace_set

XSS = "<img src=x onerror=alert(1)>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO = Path(__file__).resolve().parents[1]


def cli(*args):
    result = subprocess.run([sys.executable, "-m", "traceattr.cli", *map(str, args)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    write_trace_set(root / "a", TraceSpec(ranks=2, add_kernels={XSS: 50_000, "</td><script>alert(2)</script>": 45_000},
                                          rank_scale={1: 1.3}, **SMALL))
    write_trace_set(root / "b", TraceSpec(ranks=2, kernel_scale={"sgemm": 1.5}, **SMALL))
    return root


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium package)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


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
    assert len(sizes) == 6      # timeline, kernels, ops, modules, categories, rank x step heatmap
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
    assert "straggler: rank 1" in body                 # the planted straggler's verdict
    assert "communication wait/transfer" in body        # absent until the rank table has the split: says why
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
     ["communication wait/transfer"]),
    ("built without stacks", ["Top ops by self time"], ["no module in these traces"]),
])
def test_reports_say_why_a_section_is_absent(browser, tmp_path, folder, present, absent):
    traces = REPO / "sample_traces" / folder
    if folder == "built without stacks":
        traces = tmp_path / "nostack"
        write_trace_set(traces, TraceSpec(with_stack=False, **SMALL))
    import traceattr
    from traceattr.report.html import trace_report

    page_path = tmp_path / "page.html"      # in-process: the CLI path is the first test's
    page_path.write_text(trace_report(traceattr.load(traces, progress=False, cache=False), "traces", folder),
                         encoding="utf-8")
    page, events = open_page(browser, page_path)
    assert events["errors"] == [] and events["dialogs"] == []
    body = page.inner_text("body")
    for text in present + absent:
        assert text in body, text
