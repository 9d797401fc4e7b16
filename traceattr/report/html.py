"""One self-contained HTML page for a trace set (`traceattr report`) or a comparison (`compare --format html`).

No script and no network at view time: charts are inline SVG (report/plots.py says why), tables are plain
HTML whose cells carry the exact ns (`data-ns`) beside the human figure. Every string from a trace (kernel,
op and module names, file names, notes) goes through escape.for_html (quote=True: attribute-safe too); a
section that cannot be drawn for these traces (host-only, one rank, an empty level) says why instead.

The page opens with what matters: a row of summary figures and the verdicts, then the findings (when the
analysis gives any), then the header's details and notes folded in a <details>. Tables never squeeze their
label column (a min-width, wrapping at word boundaries, long words given <wbr> break points); names are
shortened with the whole name in a tooltip (and the row's data-key).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.across import across_ranks
from traceattr.analysis.attribute import CARRIED_IN, UNATTRIBUTED
from traceattr.analysis.compare_critical import TOTAL as CRITICAL_TOTAL
from traceattr.analysis.page import TOP_LEVELS
from traceattr.analysis.timeline import BIN
from traceattr.names import display_names
from traceattr.analysis.page_critical import END_NS, LABEL, PIECES, START_NS, kind_column
from traceattr.analysis.roofline import INTENSITY, MODEL, PEAK_PCT, TB_PER_S, TFLOPS_PER_S, table_peak
from traceattr.attribution.critical import KIND, KINDS, STEP, STEP_NS
from traceattr.report import plots
from traceattr.report.plots_analyses import Point, Roof, critical_paths, roof_text, roofline
from traceattr.report.escape import for_html, for_terminal, for_tooltip
from traceattr.report.shape import LABELS, header_lines, human_ns, human_pct
from traceattr.report.summarize import capture_notes, with_capture_verdict
from traceattr.units import digits_int

TOP = 15
MAX_WATERFALL = 30
CHART_NAME_WIDTH = 48
TABLE_NAME_WIDTH = 160     # a 100,000-character kernel name made the page a million pixels wide
WORD_CHARS = 24            # a longer word in a label gets break points (<wbr>), so no word widens a column past it
MAX_TIMELINE_RANKS = 16
WAIT_NS, TRANSFER_NS = "communication_wait_ns", "communication_transfer_ns"   # from the multi-rank rank table

# labels (td.l) wrap at word boundaries and never shrink below 12em: `overflow-wrap:anywhere` beside nowrap
# number columns let the rank table print "rank 0 device 0" one character a line
_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;padding:0 1em;max-width:1100px;color:#222}
h1{font-size:1.5em;overflow-wrap:anywhere}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.summary{display:flex;flex-wrap:wrap;gap:.5em 2.5em;margin:1em 0}.figure b{display:block;font-size:1.5em}
.figure span{color:#555;font-size:12px}.verdicts div{font-weight:600;margin:.2em 0;overflow-wrap:anywhere}
.findings li{margin:.3em 0}details{margin:1em 0}summary{cursor:pointer;color:#444}
.facts{columns:2;font-size:13px}.facts div{break-inside:avoid;overflow-wrap:anywhere}.note{color:#8a5a00}
.absent{color:#777;font-style:italic}table{border-collapse:collapse;font-size:13px;margin:.5em 0}
td,th{padding:2px 8px;vertical-align:top;border-bottom:1px solid #eee;text-align:left}
td.l{min-width:12em;overflow-wrap:normal;word-break:normal}th{font-weight:600}
.wide{overflow-x:auto}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}td.n{white-space:nowrap}
figure{margin:0}svg{max-width:100%;height:auto}footer{margin-top:3em;color:#777;font-size:12px}"""


@dataclass
class Section:
    title: str
    body: str            # HTML, already escaped


esc = for_html


def page(title: str, opening_html: str, sections: list[Section], css: str = "") -> str:
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>",
             "<meta name=viewport content='width=device-width,initial-scale=1'>",
             "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'; "
             "img-src data:\">",
             f"<style>{_CSS}{css}</style></head><body><h1>{esc(title)}</h1>", opening_html]
    for section in sections:
        parts.append(f"<section><h2>{esc(section.title)}</h2>{section.body}</section>")
    parts.append(f"<footer>traceattr · generated {esc(time.strftime('%Y-%m-%d %H:%M:%S %Z'))}</footer>"
                 "</body></html>\n")
    return "".join(parts)


VERDICTS = ("straggler", "busiest rank", "busy imbalance", "step-time imbalance")   # header facts shown on top
FIGURES = ("busy_ns", "idle_ns", "span_ns", "busy A_ns", "busy B_ns", "step A_ns", "step B_ns")   # shown as figures


def opening(header: dict, findings=(), heading: str = "h2") -> str:
    """The top of a page: summary figures and verdicts, the findings (nothing when there are none), then
    every header fact and note folded in a <details>. `heading`: the findings' heading tag (h3 in a run's
    part of a page of several runs)."""
    return summary_block(header) + findings_block(findings, heading) + details_block(header)


def summary_block(header: dict) -> str:
    figures = [_figure_html(LABELS.get(key, key.removesuffix("_ns")), human_ns(header[key]),
                            f"{int(header[key]):,} ns", _share_of_windows(header, key))
               for key in FIGURES if key in header]
    for key_a, key_b in (("busy A_ns", "busy B_ns"), ("step A_ns", "step B_ns")):
        if key_a in header and key_b in header:
            a, b = int(header[key_a]), int(header[key_b])
            change = f"{(b - a) / a * 100:+.1f}%" if a else ""
            figures.append(_figure_html("change (B − A)", ("+" if b > a else "") + human_ns(b - a), f"{b - a:,} ns",
                                        change))
    if isinstance(header.get("ranks"), (list, tuple)):
        files = f"{header['files']} files" if "files" in header else ""
        figures.append(_figure_html("ranks", f"{len(header['ranks']):,}", "", files))
    if "check" in header:
        figures.append(_figure_html("check", _worst_verdict(str(header["check"])), str(header["check"]), ""))
    facts, _ = header_lines({k: v for k, v in header.items() if k.startswith(VERDICTS)})
    verdicts = "".join(f"<div>{esc(fact)}</div>" for fact in facts)
    return f"<div class=summary>{''.join(figures)}</div>" + (f"<div class=verdicts>{verdicts}</div>" if facts else "")


def _worst_verdict(check: str) -> str:
    """The check line's worst word (a comparison's is "A ok; B warn: ..."), else its start ("not run")."""
    found = re.findall(r"\b(ok|warn|bad)\b", check)
    return max(found, key=("ok", "warn", "bad").index) if found else re.split(r"[:(]", check)[0].strip()[:40]


def _figure_html(label: str, value: str, title: str, detail: str) -> str:
    tip = f" title=\"{esc(title)}\"" if title else ""
    return f"<div class=figure{tip}><span>{esc(label)}</span><b>{esc(value)}</b><span>{esc(detail)}</span></div>"


def _share_of_windows(header: dict, key: str) -> str:
    windows = int(header.get("window_ns", 0) or 0)
    return f"{int(header[key]) / windows * 100:.1f}% of windows" if key in ("busy_ns", "idle_ns") and windows else ""


def findings_block(findings, heading: str = "h2") -> str:
    """The findings (one sentence each, from the analyses: strings, or objects with a `text`), first after
    the summary; nothing when there are none."""
    items = [f"<li>{esc(getattr(finding, 'text', finding))}</li>" for finding in findings or ()]
    return (f"<section class=findings><{heading}>Findings</{heading}><ol>{''.join(items)}</ol></section>"
            if items else "")


def details_block(header: dict) -> str:
    facts, notes = header_lines({k: v for k, v in header.items() if k != "findings"})
    rows = [f"<div>{esc(fact)}</div>" for fact in facts]
    rows += [f"<div class=note>note: {esc(note)}</div>" for note in notes]
    counted = f"{len(facts)} facts" + (f", {len(notes)} notes" if notes else "")
    return f"<details><summary>Details: sources, checks and notes ({counted})</summary>" \
           f"<div class=facts>{''.join(rows)}</div></details>"


def absent(reason: str) -> str:
    return f"<p class=absent>{esc(reason)}</p>"


def figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def wrappable(text: str) -> str:
    """`text` escaped, with a <wbr> break point in every word longer than WORD_CHARS (after its last `_`,
    `:`, `,`, `.`, `/`, `<` or `(` in each WORD_CHARS characters, else at WORD_CHARS), so a mangled or
    templated name wraps inside its column instead of widening it."""
    words = re.split(r"(\s+)", text)
    return "".join(esc(word) if len(word) <= WORD_CHARS else "<wbr>".join(esc(p) for p in _pieces(word))
                   for word in words)


def _pieces(word: str) -> list[str]:
    pieces = []
    while len(word) > WORD_CHARS:
        head = word[:WORD_CHARS]
        cut = max(head.rfind(c) for c in "_:,./<(") + 1
        cut = cut if cut > WORD_CHARS // 2 else WORD_CHARS
        pieces.append(word[:cut])
        word = word[cut:]
    return pieces + [word] if word else pieces


def table_html(table: pd.DataFrame, label: str, columns: list[str]) -> str:
    """A plain table: the label column shows display names (the full name in the row's data-key, and up to
    escape.TOOLTIP_CHARS of it in a tooltip), time columns human units with the exact ns in data-ns."""
    # printable first: a control character's escape (\u202e) is six characters of the width
    shown = display_names([for_terminal(name) for name in table[label].astype(str)], TABLE_NAME_WIDTH)
    head = "".join(f"<th{' class=n' if c != label else ''}>{esc(c.removesuffix('_ns').replace('_', ' '))}</th>"
                   for c in columns)
    body = []
    for i, row in enumerate(table[columns].itertuples(index=False)):
        cells = []
        for column, value in zip(columns, row):
            if column == label:
                cells.append(f"<td class=l title=\"{for_tooltip(value)}\">{wrappable(shown[i])}</td>")
            elif column.endswith("_ns") and pd.isna(value):     # not measurable (one rank's wait, transfer)
                cells.append("<td class=n>n/a</td>")
            elif column.endswith("_ns"):
                text = "-" if value == S.NO_INT and "delta" not in column else human_ns(value)
                cells.append(f"<td class=n data-ns=\"{int(value)}\">{esc(text)}</td>")
            elif column.endswith("_pct"):
                cells.append(f"<td class=n>{esc(human_pct(value))}</td>")
            else:
                cells.append(f"<td class=n>{esc('-' if value == S.NO_INT else value)}</td>")
        body.append(f"<tr data-key=\"{esc(row[columns.index(label)])}\">{''.join(cells)}</tr>")   # the whole name
    # many columns (the rank table's 14) scroll inside the page instead of widening it
    return f"<div class=wide><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"


# --- the report of one trace set --------------------------------------------------------------------


def trace_page(data, source: str, path_label: str, capture_problems: list[str] = (),
               shown=None) -> tuple[str, dict]:
    """The HTML page for one run's analysis.page.PageData (from a TraceSet, or by map-reduce) and the header
    it shows (whose notes the CLI also prints). `capture_problems`: the capture's, from its manifests
    (io.summaries.problems_by_run): notes, and counted in the check line, as summarize shows them.
    `shown(header)`: the header as the page shows it (cli.Display: notes collapsed, jargon behind -v)."""
    header, shown_header, sections = _run_parts(data, source, capture_problems, shown)
    return page(f"traceattr report: {path_label}", opening(shown_header, data.findings), sections), header


def _run_parts(data, source: str, capture_problems, shown, extra: dict | None = None):
    """(header, the header as shown, sections) of one run's report."""
    header = dict(data.header, source=source, **(extra or {}))
    header["notes"] = list(header.get("notes", [])) + capture_notes(list(capture_problems))
    with_capture_verdict(header, list(capture_problems))
    sections = [_timeline(data), *_top_levels(data), _categories(data), _steps(data), _critical(data),
                *_roofline(data), _communication(data), _rank_table(data.rank_table)]
    shown_header = shown(header) if shown else header       # cli.Display: notes collapsed, jargon behind -v
    return header, shown_header, sections


# a page of several runs: each run's report under its own h2, its sections one level down
_RUNS_CSS = "h3{font-size:1.05em;margin-top:1.5em;border-bottom:1px solid #eee}.run{margin-top:3em}"


def runs_page(runs: list, source: str, path_label: str, capture_problems: dict, path: str,
              shown=None) -> tuple[str, list[dict]]:
    """One page for the several runs under a path (io/runs.py): an index of the runs (name, ranks, span,
    busy, verdict), then each run's whole report under its own heading and anchor (`#run-N`), never
    merged; findings per run. `runs`: [(name, PageData)]; `capture_problems`: {run name: problems}.
    Returns the page and each run's header (whose notes the CLI prints)."""
    headers, parts, rows = [], [], []
    for number, (name, data) in enumerate(runs, 1):
        extra = {"run": f"{name} ({number} of {len(runs)} under {path}, never merged)"}
        header, shown_header, sections = _run_parts(data, source, capture_problems.get(name, []), shown, extra)
        headers.append(header)
        body = "".join(f"<section><h3>{esc(section.title)}</h3>{section.body}</section>" for section in sections)
        parts.append(f"<section class=run id=run-{number}><h2>Run {esc(name)}</h2>"
                     f"{opening(shown_header, data.findings, 'h3')}{body}</section>")
        rows.append(_index_row(number, name, header))
    index = ("<section class=runs><h2>Runs</h2><p>" + esc(f"{path_label} holds {len(runs)} separate runs (by "
             "world size, distributedInfo, process or time): each is reported on its own below, never merged.")
             + "</p><div class=wide><table><thead><tr><th>run</th><th class=n>ranks</th><th class=n>span</th>"
             "<th class=n>busy</th><th>verdict</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
             "</section>")
    return page(f"traceattr report: {path_label}", index + "".join(parts), [], css=_RUNS_CSS), headers


def _index_row(number: int, name: str, header: dict) -> str:
    """A run's line in the index: its link, ranks, span, busy time and verdict (the check's worst word, and
    the straggler when one is named)."""
    ranks = header.get("ranks", [])
    cells = [f"<td class=l title=\"{for_tooltip(name)}\"><a href=\"#run-{number}\">{wrappable(for_terminal(name))}"
             "</a></td>",
             f"<td class=n>{len(ranks) if isinstance(ranks, (list, tuple)) else esc(ranks)}</td>"]
    for key in ("span_ns", "busy_ns"):
        value = int(header.get(key, 0) or 0)
        cells.append(f"<td class=n data-ns=\"{value}\">{esc(human_ns(value))}</td>")
    verdict = _worst_verdict(str(header["check"])) if "check" in header else "not run"
    straggler = str(header.get("straggler", ""))
    if re.match(r"rank \d+:", straggler):
        verdict += f"; straggler {straggler.split(':')[0]}"
    cells.append(f"<td>{esc(verdict)}</td>")
    return f"<tr data-key=\"{esc(name)}\">{''.join(cells)}</tr>"


def _host_only(data) -> str | None:
    if data.device_rows == 0:
        return "absent: these traces hold no device activities (a CPU-only run), so there is no device time to draw"
    return None


def _timeline(data) -> Section:
    title = "Device utilisation over time, by category"
    if reason := _host_only(data):
        return Section(title, absent(reason))
    binned = data.timeline
    ranks = sorted(set(binned[S.RANK].tolist()))
    note = ""
    if len(ranks) > MAX_TIMELINE_RANKS:
        note = absent(f"the first {MAX_TIMELINE_RANKS} of {len(ranks)} ranks; the heatmap below shows them all")
        ranks = ranks[:MAX_TIMELINE_RANKS]
    series = {r: {c: group.sort_values(BIN)[S.SELF_NS].to_numpy() for c, group in
                  binned[binned[S.RANK] == r].groupby(S.CATEGORY)} for r in ranks}
    text = ("<p>Share of each time bin the device was busy (self time, overlapping streams counted once; "
            "a rank with several devices can exceed 100%).</p>")
    return Section(title, text + note + figure(plots.timeline(series, data.edges)))


def _top_levels(data) -> list[Section]:
    sections = []
    for level in TOP_LEVELS:
        label = S.NAME if level == "kernel" else "key"
        title = f"Top {level}s by self time (all ranks)"
        per_rank = data.levels[level]
        if level == "kernel" and (reason := _host_only(data)):
            sections.append(Section(title, absent(reason)))
            continue
        known = per_rank[~per_rank[label].isin([UNATTRIBUTED, CARRIED_IN])] if label == "key" else per_rank
        if per_rank.empty or known.empty or int(known[S.SELF_NS].sum()) == 0:
            why = {"kernel": "no device activities",
                   "op": "no device activity links to a launching cpu op (no cpu ops in these traces?)",
                   "module": "no module in these traces: capture them with with_stack=True (and with_modules)"}
            sections.append(Section(title, absent(f"absent: {why[level]}")))
            continue
        table = across_ranks(per_rank, TOP, data.ranks)
        kind = per_rank.attrs.get("time_kind", "device")
        whole = table[label].astype(str).tolist()
        names = display_names([for_terminal(name) for name in whole], CHART_NAME_WIDTH)
        chart = plots.bars(names, table[S.SELF_NS].astype(int).tolist(), f"{kind} self time", full_names=whole)
        spread = ["mean_self_ns", "min_self_ns", "min_rank", "max_self_ns", "max_rank"] if len(data.ranks) > 1 else []
        columns = [label, S.SELF_NS, S.SELF_PCT, *spread, S.COUNT]      # one rank: no min/max of one
        sections.append(Section(title, figure(chart) + table_html(table, label, columns)))
    return sections


def _categories(data) -> Section:
    title = "Category split per rank"
    if reason := _host_only(data):
        return Section(title, absent(reason))
    table = data.levels["category"]
    per_rank = table.groupby([S.RANK, S.CATEGORY])[S.SELF_NS].sum().unstack(fill_value=0)
    ranks = per_rank.index.tolist()
    parts = {c: per_rank[c].astype(int).tolist() for c in per_rank.columns}
    return Section(title, figure(plots.stacked_ranks(ranks, parts)))


def _steps(data) -> Section:
    title = "Busy time per rank and step"
    if reason := _host_only(data):
        return Section(title, absent(reason))
    table = data.levels["step"]
    table = table[~table["key"].isin([UNATTRIBUTED, CARRIED_IN])]
    if table.empty:
        return Section(title, absent("absent: no ProfilerStep annotations in these traces"))
    grid = table.groupby([S.RANK, "key"])[S.SELF_NS].sum().unstack(fill_value=0)
    steps = sorted(grid.columns, key=_step_order)
    grid = grid[steps]
    chart = plots.heatmap([f"rank {r}" for r in grid.index], [str(s) for s in steps],
                          grid.to_numpy(dtype=np.int64), "device self time in each step")
    return Section(title, figure(chart))


def _step_order(key: str):
    number = digits_int(key.rsplit("#", 1)[-1])
    return (0, number, key) if number is not None else (1, 0, key)


MAX_ROOFLINE_POINTS = 60
LOST_NS = "lost_ns"         # device time x (1 - peak_pct / 100): the time the shape spent below its roof


def _roofline(data) -> list[Section]:
    """The roofline chart (one point per (op, shape) with a model and device time, under the roof of the dtype
    with most time) and the shapes that lose most time below their roof."""
    title, worst = "Roofline: achieved TFLOP/s vs arithmetic intensity, per op and shape", "Top inefficient shapes"
    shapes = data.shapes
    reason = _host_only(data)
    if reason is None and (shapes is None or shapes.empty):
        reason = "absent: no device activity launched by an op"
    if reason is None and not (shapes[S.INPUT_DIMS] != "").any():
        reason = "absent: no Input Dims in the traces: capture with record_shapes=True for FLOPs and bytes"
    if reason is not None:
        return [Section(title, absent(reason))]
    peak, why = table_peak(shapes, data.peaks)
    rates = shapes[TFLOPS_PER_S].to_numpy(np.float64)
    intensity = shapes[INTENSITY].to_numpy(np.float64)
    drawable = shapes[np.isfinite(rates) & (rates > 0) & np.isfinite(intensity) & (intensity > 0)]
    if drawable.empty:
        return [Section(title, absent("absent: no op call has both a performance model and device time "
                                      "(see the notes of `summarize --by shape`)"))]
    if peak is None:
        return [Section(title, absent(f"absent: {why}"))]
    times = drawable.groupby("dtype")[S.DURATION_NS].sum().sort_values(ascending=False, kind="stable")
    dtype = next((d for d in times.index if peak.tflops.get(d)), None)
    if dtype is None:
        return [Section(title, absent(f"absent: {peak.device} has no known peak for "
                                      f"{', '.join(map(str, times.index))}"))]
    roof = Roof(dtype, float(peak.tflops[dtype]), float(peak.tbps))
    drawn = drawable.sort_values(S.DURATION_NS, ascending=False, kind="stable").head(MAX_ROOFLINE_POINTS)
    points = [Point(float(row[INTENSITY]), float(row[TFLOPS_PER_S]), int(row[S.DURATION_NS]), str(row[MODEL]),
                    _shape_tip(row)) for _, row in drawn.iterrows()]
    total = int(drawable[S.DURATION_NS].sum())
    text = (f"<p>{len(drawable):,} (op, shape) keys with a performance model and device time "
            f"({esc(shapes.attrs.get('level_facts', {}).get('modelled', ''))}); each point's area follows its "
            f"device time (all ranks), its colour the op's family. The line is {_roof_owner(peak.device)} "
            f"{esc(roof_text(roof))}: other dtypes have other ceilings (their peak_pct uses their own).</p>")
    if len(drawable) > len(drawn):
        rest = total - int(drawn[S.DURATION_NS].sum())
        text += absent(f"the {len(drawn)} keys with most device time are drawn; {len(drawable) - len(drawn):,} "
                       f"more hold {human_ns(rest)}")
    sections = [Section(title, text + figure(roofline(points, roof)))]
    known = shapes[np.isfinite(shapes[PEAK_PCT].to_numpy(np.float64))]
    if known.empty:
        sections.append(Section(worst, absent("absent: no shape has a peak_pct")))
        return sections
    lost = (known[S.DURATION_NS] * (1 - known[PEAK_PCT].clip(upper=100) / 100)).round().astype(np.int64)
    table = known.assign(**{LOST_NS: lost, "shape": [_shape_label(row) for _, row in known.iterrows()]})
    table = table.sort_values(LOST_NS, ascending=False, kind="stable").head(TOP)
    for column, shown in ((TFLOPS_PER_S, "TFLOP/s"), (TB_PER_S, "TB/s"), (INTENSITY, "FLOP/byte")):
        table[shown] = [f"{value:.3g}" for value in table[column]]
    columns = ["shape", MODEL, "dtype", S.COUNT, S.DURATION_NS, "TFLOP/s", "TB/s", "FLOP/byte", "bound", PEAK_PCT,
               LOST_NS]
    text = ("<p>The shapes that lose most device time below their roof: lost = device time × (1 − peak_pct), "
            "all ranks.</p>")
    sections.append(Section(worst, text + table_html(table, "shape", columns)))
    return sections


def _roof_owner(device: str) -> str:
    """Whose roof the roofline draws, as HTML: the device's, or the figures --peak-tflops and --peak-tbps gave."""
    return "the given peaks' (--peak-tflops, --peak-tbps)" if device == "given" else f"{esc(device)}'s"


def _shape_label(row) -> str:
    return f"{row['key']} {row[S.INPUT_DIMS]}".strip()


def _shape_tip(row) -> str:
    return (f"{_shape_label(row)} {row['dtype']}: {row[TFLOPS_PER_S]:.3g} TFLOP/s, {row[TB_PER_S]:.3g} TB/s, "
            f"{row[INTENSITY]:.3g} FLOP/byte, {human_ns(int(row[S.DURATION_NS]))} in {int(row[S.COUNT]):,} calls"
            + (f", {row[PEAK_PCT]:.1f}% of peak" if np.isfinite(row[PEAK_PCT]) else ""))


def _critical(data) -> Section:
    """Per rank, the critical path of the run's longest step (analysis/page_critical.py) over its time, and
    the path's time by kind beside it."""
    title = "Critical path of the longest step, per rank"
    found = data.critical
    if found is None or found.steps.empty:
        return Section(title, absent("absent: no events to follow a path through"))
    steps = found.steps
    note = ""
    if len(steps) > MAX_TIMELINE_RANKS:
        note = absent(f"the first {MAX_TIMELINE_RANKS} of {len(steps)} ranks are drawn; the table lists them all")
    rows = []
    for rank, step in zip(steps[S.RANK].head(MAX_TIMELINE_RANKS), steps[STEP].head(MAX_TIMELINE_RANKS)):
        mine = found.segments[found.segments[S.RANK] == rank]
        tips = [f"{kind}{': ' + label if label else ''}: {human_ns(int(end - start))}"
                + (f" ({pieces:,} segments)" if pieces > 1 else "")
                for kind, label, start, end, pieces in zip(mine[KIND], mine[LABEL], mine[START_NS], mine[END_NS],
                                                          mine[PIECES])]
        rows.append((f"rank {rank}", mine[START_NS].to_numpy(), mine[END_NS].to_numpy(), mine[KIND].tolist(), tips))
    names = sorted(set(steps[STEP]))
    chart = critical_paths(rows, f"critical path of {names[0] if len(names) == 1 else 'each rank’s longest step'}")
    text = ("<p>The chain of dependent work whose length is the step (docs/critical-path.md): what to shorten "
            "to shorten the step. Its time by kind per rank, Σ = the step:</p>")
    table = steps.assign(rank_step=[f"rank {r}: {s}" for r, s in zip(steps[S.RANK], steps[STEP])])
    columns = ["rank_step", STEP_NS] + [kind_column(kind) for kind in KINDS]
    notes = "".join(f"<div class=note>note: {esc(n)}</div>" for n in found.notes[:5])
    return Section(title, note + figure(chart) + text + table_html(table, "rank_step", columns) + notes)


def _communication(data) -> Section:
    rank_table = data.rank_table
    title = "Communication: waiting vs transferring"
    if WAIT_NS not in rank_table.columns or TRANSFER_NS not in rank_table.columns:
        return Section(title, absent("absent: this traceattr's rank table has no communication wait/transfer "
                                     "split yet (columns communication_wait_ns, communication_transfer_ns)"))
    if reason := _host_only(data):
        return Section(title, absent(reason))
    if len(data.ranks) < 2:
        return Section(title, absent("absent: one rank; waiting for other ranks needs several"))
    per_rank = rank_table.groupby(S.RANK)[[WAIT_NS, TRANSFER_NS]].sum()
    if int(per_rank.to_numpy().sum()) == 0:
        return Section(title, absent("absent: no communication kernels on the devices of these traces"))
    chart = plots.grouped(per_rank.index.tolist(), {"wait": per_rank[WAIT_NS].astype(int).tolist(),
                                                    "transfer": per_rank[TRANSFER_NS].astype(int).tolist()})
    return Section(title, figure(chart))


def _rank_table(rank_table: pd.DataFrame) -> Section:
    if rank_table.empty:
        return Section("Ranks", absent("absent: no ranks"))
    # a CPU-only rank has one row with no device (-1): it is the rank's host
    table = rank_table.assign(label=[f"rank {r} device {d}" if d >= 0 else f"rank {r} (no device)"
                                     for r, d in zip(rank_table[S.RANK], rank_table[S.DEVICE])])
    columns = ["label"] + [c for c in rank_table.columns if c.endswith("_ns")]
    return Section("Ranks", table_html(table, "label", columns))


# --- the comparison page ----------------------------------------------------------------------------

def compare_report(table: pd.DataFrame, header: dict, by: str) -> str:
    """The HTML page for compare(): header, a delta waterfall that adds up to B - A, the table."""
    busy_a, busy_b = int(table.attrs.get("busy_a_ns", 0)), int(table.attrs.get("busy_b_ns", 0))

    by_size = table.sort_values("delta_ns", key=lambda d: -d.abs(), kind="stable")
    # the table: key rows by |delta|, then <other>, <idle>, <total>, as every other format orders them
    place = table[KIND].map({"other": 1, "idle": 2, "total": 3}).fillna(0) if KIND in table.columns else 0
    rows = by_size.assign(_place=place).sort_values("_place", kind="stable").drop(columns="_place")
    # key and <other> rows add up to the busy delta; <idle> and <total> are not steps of it
    parts = by_size[by_size[KIND].isin(["key", "other"])] if KIND in by_size.columns else by_size
    kept = _waterfall_bars(parts["key"].astype(str).tolist(), parts["delta_ns"])
    missing = busy_b - busy_a - sum(delta for _, _, delta in kept)
    if missing:     # compare's rows add up to the busy delta; say so visibly if a future change breaks that
        kept.append(("(not in the table)", "(not in the table)", missing))
    steps = [(name, delta) for name, _, delta in kept]
    unchanged = ("absent: neither run has time at this level (CPU-only traces have no device time)"
                 if parts.empty else "no key changed: A and B spent the same time on every key")
    waterfall = (plots.waterfall("A busy", busy_a, steps, "B busy", full_names=[full for _, full, _ in kept])
                 if steps else absent(unchanged))
    columns = ["key", "a_ns", "b_ns", "delta_ns", "delta_pct", "status"]
    sections = [Section(f"What changed, by {by} (delta waterfall: A total -> B total)",
                        figure(waterfall) if steps else waterfall),
                Section("Table", table_html(rows, "key", [c for c in columns if c in rows.columns]))]
    findings = table.attrs.get("findings") or header.get("findings", ())
    return page(f"traceattr compare by {by}", opening(header, findings), sections)


def _waterfall_bars(labels: list[str], deltas) -> list[tuple[str, str, int]]:
    """(shown name, whole name, delta ns) of each key that changed, the rest past MAX_WATERFALL in one bar, so
    the bars still add up to B - A."""
    names = display_names([for_terminal(name) for name in labels], CHART_NAME_WIDTH)
    kept = [(name, full, int(delta)) for name, full, delta in zip(names, labels, deltas) if delta]
    if len(kept) > MAX_WATERFALL:
        rest = kept[MAX_WATERFALL - 1:]
        label = f"{len(rest)} more keys"
        kept = kept[:MAX_WATERFALL - 1] + [(label, label, sum(d for _, _, d in rest))]
    return kept


def compare_critical_report(table: pd.DataFrame, header: dict) -> str:
    """The HTML page for compare --by critical (analysis/compare_critical.py): header, a waterfall from A's
    summed step time to B's whose bars are the (kind, key) rows' deltas, the table."""
    shown = table.assign(path=[f"{kind}: {key}" if kind and key else (kind or key)
                               for kind, key in zip(table[KIND], table["key"])])
    rows = shown[shown[KIND] != CRITICAL_TOTAL]
    kept = _waterfall_bars(rows["path"].tolist(), rows["delta_ns"])
    step_a = int(table.attrs.get("step_a_ns", 0))
    waterfall = (figure(plots.waterfall("A steps", step_a, [(name, delta) for name, _, delta in kept], "B steps",
                                        full_names=[full for _, full, _ in kept]))
                 if kept else absent("no (kind, key) changed: A's and B's paths spent the same time on each"))
    columns = ["path", "a_ns", "b_ns", "delta_ns", "a_share_pct", "b_share_pct"]
    sections = [Section("What changed on the critical path (waterfall: Σ A's steps -> Σ B's steps)", waterfall),
                Section("Table", table_html(shown, "path", columns))]
    return page("traceattr compare by critical path", opening(header), sections)
