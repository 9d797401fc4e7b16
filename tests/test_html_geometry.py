"""The HTML report reads well: its geometry measured in a real headless Chromium, not only that it renders.

Found by a user (issue 37): the rank table's label column shrank to one character ("rank 0 device 0"
printed vertically), the kernel chart's tick labels ran together ("5.00 ms10.0 ms15.0 ms"), the compare
waterfall's deltas were slivers beside 45 ms bars, one rank's utilisation strip was ~30 px tall, a
20,000-character name ran off its chart. Each page here is measured by GEOMETRY (below): no cell narrower
than its longest unbreakable piece of text, label cells at least their min-width, no two tick labels of an
axis overlapping, every chart text inside its chart, every plot area at least plots.MIN_PLOT_IN tall, nothing
wider than the viewport, every label's tooltip the whole name. One browser for the module.
"""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pytest

from clirun import run_cli
from tests.tracesets import SMALL
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.report import plots
from traceattr.report.escape import TOOLTIP_CHARS
from traceattr.report.printable import printable

REPO = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1200, "height": 900}
PX_PER_IN = 96          # the SVGs are sized in pt; the page does not scale them down at this viewport
LONG = "void very_long_kernel<" + "float, " * 2_850 + "int>"        # 20,000 characters
HOSTILE = {"\x1b[31mred\x07 kernel\r\nforged line": 300_000, "rtl\u202eevil\u200f\u2066name": 250_000,
           LONG: 200_000, "<b>bold</b> &amp; <img src=x onerror=alert(1)>": 150_000,
           "q\" onmouseover=\"alert(3)\" x='<script>alert(4)</script>'": 120_000,
           "_ZN5aiter24add_rmsnorm_quant_kernelILi128ELi4EN3c108BFloat16EfEEvPT1_PKS3_S6_S6_f": 100_000,
           "核函数" * 40 + "🔥" * 20: 500_000}

# every problem the page's layout has, as strings (an empty list: it reads well)
GEOMETRY = """(minPlotPx) => {
  const problems = [];
  const root = document.documentElement, vw = root.clientWidth;
  if (root.scrollWidth > vw) problems.push(`the page scrolls sideways: ${root.scrollWidth} > ${vw}`);
  for (const el of document.body.querySelectorAll('*')) {        // tables scroll inside their .wide box
    if ((el.parentElement && el.parentElement.closest('.wide')) || el.closest('svg')) continue;
    const r = el.getBoundingClientRect();
    if (r.width && r.right > vw + 1) problems.push(`${el.tagName}.${el.className} ends at ${r.right} > ${vw}`);
  }
  const ctx = document.createElement('canvas').getContext('2d'), decode = document.createElement('textarea');
  for (const cell of document.querySelectorAll('td, th')) {
    const style = getComputedStyle(cell);
    ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    // the pieces a cell can not break inside: between spaces and the <wbr> break points (other tags, a
    // link around a name, are not text)
    const pieces = cell.innerHTML.replace(/<\\/?(?!wbr>)[a-z][^>]*>/gi, '').split(/<wbr>|\\s+/).map(p => { decode.innerHTML = p; return decode.value; });
    const longest = Math.max(0, ...pieces.map(p => ctx.measureText(p).width));
    const inner = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const text = JSON.stringify(cell.innerText.slice(0, 40));
    if (inner + 1 < longest) problems.push(`cell ${text}: ${inner} px < its longest word ${longest} px`);
    if (cell.classList.contains('l') && cell.clientWidth < 12 * parseFloat(style.fontSize) - 1)
      problems.push(`label cell ${text} is ${cell.clientWidth} px, under its min-width`);
  }
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 &&
                            Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  document.querySelectorAll('figure svg').forEach((svg, n) => {
    const box = svg.getBoundingClientRect();
    for (const axis of ['xtick', 'ytick']) {
      const labels = [...svg.querySelectorAll(`g[id^=${axis}] text`)]
        .map(t => [t.textContent, t.getBoundingClientRect()]);
      for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++)
        if (overlap(labels[i][1], labels[j][1]))
          problems.push(`chart ${n}: ${axis} labels ${labels[i][0]} and ${labels[j][0]} overlap`);
    }
    for (const text of svg.querySelectorAll('text')) {
      const r = text.getBoundingClientRect();
      const outside = r.left < box.left - 1 || r.right > box.right + 1 ||
                      r.top < box.top - 1 || r.bottom > box.bottom + 1;
      if (r.width && outside)
        problems.push(`chart ${n}: text ${JSON.stringify(text.textContent.slice(0, 40))} runs off the chart`);
    }
    for (const area of svg.querySelectorAll('g[id^=axes_] > g[id^=patch_]:first-child')) {
      const height = area.getBoundingClientRect().height;
      if (height < minPlotPx) problems.push(`chart ${n}: a plot area ${height} px tall < ${minPlotPx}`);
    }
  });
  return problems;
}"""

TOOLTIPS = """() => ({
  rows: [...document.querySelectorAll('tbody tr')].map(tr => [tr.dataset.key, tr.querySelector('td.l').title]),
  svg: [...document.querySelectorAll('figure svg title')].map(t => t.textContent)})"""


def cli(*args):
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    return result



@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """name -> an HTML page: the bundled sample, an 8-rank set, a compare page, hostile names (both pages)."""
    root = tmp_path_factory.mktemp("geometry")
    write_trace_set(root / "eight", TraceSpec(ranks=8, rank_scale={5: 1.2}, **SMALL))
    write_trace_set(root / "a", TraceSpec(ranks=2, **SMALL))
    write_trace_set(root / "b", TraceSpec(ranks=2, kernel_scale={"sgemm": 1.1, "layer_norm": 0.9}, **SMALL))
    write_trace_set(root / "hostile", TraceSpec(ranks=2, add_kernels=HOSTILE, **SMALL))
    write_trace_set(root / "runs" / "control", TraceSpec(ranks=2, seed=1, **SMALL))     # two runs, one folder
    write_trace_set(root / "runs" / "test", TraceSpec(ranks=2, seed=1, kernel_scale={"sgemm": 1.3}, **SMALL))
    made = {"charts": root / "charts.html"}
    made["charts"].write_text(_charts_page(), encoding="utf-8")
    for name, args in {"sample": ["report", REPO / "sample_traces" / "synthetic_2rank"],
                       "eight ranks": ["report", root / "eight"],
                       "compare": ["compare", root / "a", root / "b", "--format", "html"],
                       "hostile report": ["report", root / "hostile"],
                       "hostile compare": ["compare", root / "a", root / "hostile", "--format", "html"],
                       "several runs": ["report", root / "runs"],
                       "compare critical": ["compare", root / "a", root / "b", "--by", "critical", "--format",
                                            "html"]}.items():
        made[name] = root / (name.replace(" ", "_") + ".html")
        cli(*args, "-o", made[name], "-q", "--no-cache")
    return made


def _charts_page() -> str:
    """The charts alone at the sizes that broke them: one rank's timeline, names past the left margin's cap
    beside 45 ms bars, a 45 ms waterfall of small deltas, 40 steps of a heatmap, one rank's bars."""
    import numpy as np

    edges = np.linspace(0, 45_000_000, 121)
    charts = [plots.timeline({0: {"compute": np.full(120, 300_000.0)}}, edges),
              plots.bars(["x" * 70, "b", "c"], [45_000_000, 17_500_000, 5_000], "device self time"),
              plots.waterfall("A busy", 45_000_000, [("sgemm", 1_000_000), ("layer_norm", -300_000)], "B busy"),
              plots.heatmap(["rank 0", "rank 1"], [f"ProfilerStep#{s}" for s in range(40)],
                            np.arange(80, dtype=np.int64).reshape(2, 40) * 1_000, "device self time in each step"),
              plots.stacked_ranks([0], {"compute": [45_000_000], "communication": [3_000_000]}),
              plots.grouped([0], {"wait": [1_000_000], "transfer": [2_500_000]}),
              *_analysis_charts()]
    figures = "".join(f"<figure>{svg}</figure>" for svg in charts)
    return f"<!DOCTYPE html><html><head><style>body{{max-width:1100px;margin:2em auto}}" \
           f"svg{{max-width:100%;height:auto}}</style></head><body>{figures}</body></html>"


def _analysis_charts() -> list[str]:
    """The roofline (points over eight decades, one of them tiny, a hostile name) and the critical path
    (one rank, then 16 ranks of 400 segments of every kind)."""
    import numpy as np

    from traceattr.report.plots_analyses import KIND_COLORS, Point, Roof, critical_paths, roofline

    points = [Point(10.0 ** e, 10.0 ** (e - 3), int(10 ** (e + 3)), family, f"{family} <b>{e}</b>")
              for e, family in zip(range(-2, 6), ["gemm", "attention", "conv", "norm", "elementwise", "softmax",
                                                   "reduction", ""])]
    one = [("rank 0", np.array([0, 1_000]), np.array([1_000, 45_000_000]), ["host", "compute"], ["a", "b"])]
    kinds = list(KIND_COLORS)
    ends = np.cumsum(np.arange(1, 401) * 1_000)
    many = [(f"rank {r}", ends - np.arange(1, 401) * 1_000, ends, [kinds[i % 8] for i in range(400)],
             [f"tip {i}" for i in range(400)]) for r in range(16)]
    return [roofline(points, Roof("bf16", 989.4, 3.35)), roofline(points[:1], Roof("fp32", 67.0, 3.35)),
            critical_paths(one, "critical path of ProfilerStep#1"), critical_paths(many, "critical path of " + LONG)]


def measured(browser, path: Path):
    page = browser.new_page(viewport=VIEWPORT)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    problems = page.evaluate(GEOMETRY, 0.95 * plots.MIN_PLOT_IN * PX_PER_IN)
    return page, problems, dialogs


def test_charts_geometry(browser, pages):
    page, problems, _ = measured(browser, pages["charts"])
    assert problems == []
    # the chart names' tooltips: the whole name, whatever the label shows
    assert "x" * 70 in page.eval_on_selector_all("svg title", "ts => ts.map(t => t.textContent)")
    page.close()


@pytest.mark.parametrize("name", ["sample", "eight ranks", "compare", "hostile report", "hostile compare",
                                  "several runs", "compare critical"])
def test_page_geometry(browser, pages, name):
    page, problems, dialogs = measured(browser, pages[name])
    assert problems == [] and dialogs == []
    assert page.locator("img").count() == 0 and page.locator("script").count() == 0
    # every shortened label's tooltip is the whole name (the row's data-key), up to TOOLTIP_CHARS of it
    tips = page.evaluate(TOOLTIPS)
    assert tips["rows"] and tips["svg"]
    for key, title in tips["rows"]:
        assert title == (key if len(key) <= TOOLTIP_CHARS else key[:TOOLTIP_CHARS] + "…")
    keys = {key for key, _ in tips["rows"] if len(key) <= TOOLTIP_CHARS}
    assert keys & set(tips["svg"])
    page.close()


def test_several_runs_page_opens_clean_and_each_section_holds_its_runs_numbers(browser, pages):
    """report on a folder of two runs: no console error, the index links to each run's section, and each
    section's busy figure is summarize's busy time of that run (never the two merged)."""
    from traceattr.analysis.run_tables import report_runs

    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(pages["several runs"].as_uri())
    page.wait_for_load_state("load")
    assert errors == []
    found = page.evaluate("""() => [...document.querySelectorAll('section.run')].map(s => ({
        id: s.id, name: s.querySelector('h2').innerText,
        busy: s.querySelector('.summary .figure[title]').title}))""")
    links = page.eval_on_selector_all(".runs a", "as => as.map(a => [a.innerText, a.getAttribute('href')])")
    summarized = {run.name: run.header["busy_ns"] for run in report_runs(str(pages["several runs"].parent / "runs"),
                                                                            cache=False)}
    assert [f["name"] for f in found] == [f"Run {name}" for name in summarized]
    assert links == [[name, f"#{f['id']}"] for name, f in zip(summarized, found)]
    for f, busy in zip(found, summarized.values()):
        assert f["busy"] == f"{busy:,} ns"
    assert len(set(summarized.values())) == 2          # the planted slower sgemm: two different numbers
    page.click(".runs a >> nth=1")                      # the anchor takes the reader to the second run
    assert page.evaluate("() => location.hash") == f"#{found[1]['id']}"
    page.close()


def test_hostile_names_are_text_with_their_whole_name_kept(browser, pages):
    page, _, _ = measured(browser, pages["hostile report"])
    body = page.inner_text("body")
    keys = page.eval_on_selector_all("tbody tr", "trs => trs.map(tr => tr.dataset.key)")
    for name in HOSTILE:
        assert printable(name) in keys, name[:40]       # controls shown as visible escapes, the rest whole
    assert "rtl\\u202eevil\\u200f\\u2066name" in body    # a bidi override is shown, not obeyed
    assert "<img src=x onerror=alert(1)>" in body and LONG not in body
    svg_titles = page.eval_on_selector_all("figure svg title", "ts => ts.map(t => t.textContent)")
    assert LONG[:TOOLTIP_CHARS] + "…" in svg_titles     # the chart's label: shortened, its tooltip long
    page.close()


def test_page_opens_with_figures_then_findings_then_folded_details(browser, pages, tmp_path):
    """Summary figures and verdicts first, then the findings (none: no section), the header's facts and
    notes folded below in a <details>."""
    import traceattr
    from traceattr.analysis.page_plan import page_data_files
    from traceattr.report.html import trace_page

    data = page_data_files(traceattr.load(REPO / "sample_traces" / "synthetic_2rank", progress=False, cache=False))[0]
    plain = trace_page(dataclasses.replace(data, findings=[]), "traces", "sample")[0]
    assert "Findings" not in plain
    said = ["exposed communication 1.1 ms <b>(7% of busy)</b> — `--by rank`", "rank 1 \x1b[2J holds the others back"]
    path = tmp_path / "findings.html"
    path.write_text(trace_page(dataclasses.replace(data, findings=said), "traces", "sample")[0], encoding="utf-8")
    page, problems, _ = measured(browser, path)
    assert problems == []
    tops = page.evaluate("""() => ['.summary', '.verdicts', 'section.findings', 'details', 'section:not(.findings)']
                                   .map(s => document.querySelector(s).getBoundingClientRect().top)""")
    assert tops == sorted(tops), tops
    assert page.eval_on_selector_all(".findings li", "lis => lis.map(li => li.innerText)") == \
        [printable(finding) for finding in said]
    figures = page.eval_on_selector_all(".summary .figure", "fs => fs.map(f => f.innerText.split('\\n')[0])")
    assert figures[:3] == ["busy", "idle", "span"] and "check" in figures
    assert not page.is_visible("details .facts")            # folded until opened
    assert "note: " in html.unescape(page.inner_html("details"))
    page.close()
    # the comparison page's place for them: the table's attrs
    import pandas as pd

    from traceattr.report.compare import compare_header
    from traceattr.report.html import compare_report

    table = pd.DataFrame({"key": ["sgemm"], "a_ns": [10], "b_ns": [15], "delta_ns": [5], "kind": ["key"]})
    table.attrs.update(busy_a_ns=10, busy_b_ns=15)
    assert "Findings" not in compare_report(table, compare_header(table, "a", "b"), "kernel")
    table.attrs["findings"] = ["sgemm <5 ns> slower"]
    assert "<li>sgemm &lt;5 ns&gt; slower</li>" in compare_report(table, compare_header(table, "a", "b"), "kernel")


def test_waterfall_axis_spans_the_deltas():
    """A 1 ms change beside 45 ms totals: the deltas get most of the axis, which starts near 44 ms, not 0."""
    import re

    svg = plots.waterfall("A busy", 45_000_000, [("sgemm", 1_000_000), ("layer_norm", -400_000)], "B busy")
    ticks = [m for m in re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, re.S)]
    assert ticks and "0" not in ticks and all(t.endswith(" ms") for t in ticks), ticks
    assert min(float(t.split()[0]) for t in ticks) >= 44, ticks
    assert "the axis starts at" in svg


def test_wide_characters_count_double_on_the_chart():
    """48 CJK characters are as wide as 96 Latin ones: the label ran off the chart's left edge (this machine
    may lack CJK fonts, so the browser checks above cannot see it): tick labels are cut to NAME_UNITS."""
    import re

    name = "核函数" * 40 + "🔥" * 20
    svg = plots.bars([name, "b"], [2_000_000, 1_000_000], "device self time")
    (shown,) = [t for t in re.findall(r'<g id="ytick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, re.S) if t != "b"]
    assert "…" in shown and plots._units(shown) <= plots.NAME_UNITS and shown.endswith("🔥")
    assert f"<title>{name}</title>" in svg
