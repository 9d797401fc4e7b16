"""Static SVG charts for the HTML report, drawn by matplotlib's SVG backend.

Why static SVG from matplotlib: the page must open offline, stay small for thousands of ranks' worth of
data and show at once. Plotly inlines ~4.5 MB of JS; Vega-Lite (altair) needs ~0.8 MB of JS and draws in
the browser; matplotlib (already the notebooks' plotting library) writes plain SVG that needs no script at
all, is a few tens of kB per chart whatever the trace size (the data are binned first), and keeps text as
<text> (fonttype "none") so names stay searchable. Every label passes through printable() first: a
control character is not even valid XML.

Readable at any input: time axes carry few ticks (one per TICK_IN of axis, never overlapping) in one SI
unit; every plot area is at least MIN_PLOT_IN tall; a long name is shortened on the chart and whole (up to
escape.TOOLTIP_CHARS) in the SVG <title> tooltip of its label (_named_ticks).
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
import warnings

import numpy as np

from traceattr.errors import TraceInputError
from traceattr.names import shorten_middle
from traceattr.report.escape import for_tooltip
from traceattr.report.printable import printable
from traceattr.units import TIME_UNITS, human_ns

CATEGORY_COLORS = {"compute": "#4c78a8", "communication": "#f58518", "memcpy": "#54a24b", "memset": "#b279a2"}
_OTHER_COLORS = ("#e45756", "#72b7b2", "#eeca3b", "#9d755d", "#bab0ac")
_STYLE = {"svg.fonttype": "none", "text.parse_math": False, "font.size": 9, "svg.hashsalt": "traceattr",
          "axes.spines.top": False, "axes.spines.right": False}


def require_matplotlib(what: str) -> None:
    """One line instead of a traceback deep in the drawing when matplotlib is missing (a broken install:
    it is a core dependency), before any trace is read."""
    try:
        import matplotlib  # noqa: F401  (drawing needs it anyway)
    except ImportError:
        raise TraceInputError(f"{what} draws its charts with matplotlib, which is not installed: "
                              "pip install matplotlib") from None


def color(category: str, index: int) -> str:
    return CATEGORY_COLORS.get(category, _OTHER_COLORS[index % len(_OTHER_COLORS)])


def _figure(width: float, height: float):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise TraceInputError("the HTML report draws its charts with matplotlib: "
                              "pip install 'traceattr[report]'") from None

    return Figure(figsize=(width, height))


_CHAR_INCH = 0.075   # width of one label character at font size 9 (DejaVu Sans), for fixed margins
MIN_PLOT_IN = 1.0    # the least height of a plot area: one rank's utilisation strip was 0.4 in (~30 px)
PANEL_IN = 1.0       # the timeline's height per rank
TICK_IN = 0.8        # axis length per time tick: labels like "12.5 ms" are ~0.45 in wide at font size 9
CELL_TEXT_IN = 0.55  # the least heatmap cell width that shows its value ("12.3 ms" at font size 7)
LABEL_CHARS = 32     # step and legend labels on a chart (names have their own width, from the caller)
NAME_UNITS = 64      # the widest tick label, in Latin character widths (a CJK character counts 2): it fits the
                     # left margin's cap (0.6 of 9 in), where 48 CJK characters ran off the chart's left edge


def _units(text: str) -> int:
    """The drawn width of `text` in Latin character widths: East Asian wide and full-width characters count 2."""
    return len(text) + sum(1 for c in text if unicodedata.east_asian_width(c) in "WF")


def _fit_units(text: str, units: int = NAME_UNITS) -> str:
    """`text` shortened in the middle until it is at most `units` wide."""
    width = len(text)
    while width > 1 and _units(shorten_middle(text, width)) > units:
        width -= max(1, (_units(shorten_middle(text, width)) - units) // 2)
    return shorten_middle(text, width)


def _height(wanted_in: float, top_in: float = 0.35, bottom_in: float = 0.45) -> float:
    """A figure height of at least the margins plus MIN_PLOT_IN."""
    return max(wanted_in, top_in + bottom_in + MIN_PLOT_IN)


def _margins(figure, labels: list[str], top_in: float = 0.35, bottom_in: float = 0.45, right_in: float = 0.9):
    """Fixed margins sized from the longest y label: matplotlib's constrained layout measures every text
    extent and costs more than the drawing itself."""
    width, height = figure.get_size_inches()
    left_in = 0.25 + _CHAR_INCH * max([min(_units(label), NAME_UNITS) for label in labels] + [4])   # _named_ticks
    # the figures' heights leave MIN_PLOT_IN beside the margins (_height): the caps only guard a caller
    figure.subplots_adjust(left=min(left_in / width, 0.6), right=1 - right_in / width,
                           bottom=min(bottom_in / height, 0.7), top=1 - min(top_in / height, 0.25))


_TIP = "traceattr-tip-"      # the gid of a tick label whose whole name becomes its tooltip (_named_ticks)


def _svg(figure, tooltips: list[str] = ()) -> str:
    """The figure as inline SVG; the tick labels _named_ticks marked get their whole name as an SVG <title>
    (the browser's tooltip; escaped, so a name is text whatever it holds)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buffer = io.StringIO()
    with warnings.catch_warnings():     # text stays <text> (fonttype none): the browser draws any glyph
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        FigureCanvasSVG(figure).print_svg(buffer, metadata={"Date": None})   # same traces, same page
    text = buffer.getvalue()
    text = text[text.index("<svg"):]          # inline in HTML: no XML declaration or DOCTYPE
    return re.sub(f'<g id="{_TIP}(\\d+)">',
                  lambda m: f"<g><title>{for_tooltip(tooltips[int(m.group(1))])}</title>", text)


def _named_ticks(axis, positions, shown: list[str], whole: list[str]) -> None:
    """Tick labels `shown` (short names) at `positions`, each with its `whole` name as a tooltip: pass the
    same `whole` list to _svg."""
    axis.set_ticks(positions, [_fit_units(printable(label)) for label in shown])
    for i, tick in enumerate(axis.get_major_ticks()[:len(shown)]):
        tick.label1.set_gid(f"{_TIP}{i}")


def _label(text: str, width: int = LABEL_CHARS) -> str:
    """A step or legend label that fits a chart (a 20,000-character one ran off its edge)."""
    return shorten_middle(printable(text), width)


def _style():
    import matplotlib

    return matplotlib.rc_context(_STYLE)


def _ns_formatter():
    """Tick labels in one SI time unit per axis, chosen from its largest tick: 0, 5 ms, 10 ms, 15 ms."""
    from matplotlib.ticker import Formatter

    class TimeTicks(Formatter):
        scale, unit = 1, "ns"

        def set_locs(self, locs):
            super().set_locs(locs)
            largest = max([abs(float(v)) for v in locs] + [0.0])
            self.scale, self.unit = next(((s, u) for s, u in TIME_UNITS if largest >= s), (1, "ns"))

        def __call__(self, value, pos=None):
            return "0" if value == 0 else f"{value / self.scale:.4g} {self.unit}"

    return TimeTicks()


def _time_axis(ax, figure) -> None:
    """Time ticks on ax's x axis: at most one per TICK_IN of its length (nine ticks on a 2.7 in
    axis printed "5.00 ms10.0 ms15.0 ms"), at round values, in one SI unit. Call after _margins."""
    from matplotlib.ticker import MaxNLocator

    length_in = ax.get_position().width * figure.get_figwidth()
    ax.xaxis.set_major_locator(MaxNLocator(nbins=max(1, min(8, int(length_in / TICK_IN))), steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_formatter(_ns_formatter())


def timeline(series: dict[int, dict[str, np.ndarray]], edges: np.ndarray) -> str:
    """Per rank (one panel each, PANEL_IN tall): utilisation (busy share of each bin) stacked by category."""
    with _style():
        ranks = sorted(series)
        top_in, bottom_in = 0.35, 0.55
        # subplots' spacing takes 0.2 of a panel between panels: the plot area grows with it
        figure = _figure(9, top_in + bottom_in + max(1.4 * MIN_PLOT_IN, PANEL_IN * (1.2 * len(ranks) - 0.2)))
        axes = figure.subplots(len(ranks), 1, sharex=True, squeeze=False)[:, 0]
        width = float(edges[1] - edges[0]) if len(edges) > 1 else 1.0
        middles = (edges[:-1] + edges[1:]) / 2
        categories = sorted({c for per in series.values() for c in per})
        for ax, rank in zip(axes, ranks):
            values = [series[rank].get(c, np.zeros(len(middles))) / width for c in categories]
            ax.stackplot(middles, *values, colors=[color(c, i) for i, c in enumerate(categories)],
                         labels=[_label(c) for c in categories], step="mid")
            ax.set_ylim(0, max(1.0, max(float(np.sum(values, axis=0).max()), 0) * 1.05))
            ax.set_ylabel(f"rank {rank}", rotation=0, ha="right", va="center")
            ax.set_yticks([0, 1], ["0", "100%"])
        axes[-1].set_xlabel("time since the earliest window start")
        axes[0].legend(loc="lower right", ncols=len(categories), fontsize=8, frameon=False,
                       bbox_to_anchor=(1, 1.0))
        _margins(figure, ["rank 0000"], top_in=top_in, bottom_in=bottom_in, right_in=0.3)
        _time_axis(axes[-1], figure)
        return _svg(figure)


def bars(labels: list[str], values_ns: list[int], title: str, full_names: list[str] | None = None) -> str:
    """Horizontal bars, largest on top, values labelled in human units; `full_names` (default: the labels)
    are the labels' tooltips."""
    with _style():
        figure = _figure(9, _height(0.5 + 0.24 * max(len(labels), 1)))
        ax = figure.subplots()
        positions = np.arange(len(labels))[::-1]
        ax.barh(positions, values_ns, color="#4c78a8")
        _named_ticks(ax.yaxis, positions, labels, full_names or labels)
        for y, value in zip(positions, values_ns):
            ax.text(value, y, " " + human_ns(value), va="center", fontsize=8)
        ax.set_title(printable(title), loc="left")
        ax.margins(x=0.15)
        _margins(figure, labels)
        _time_axis(ax, figure)
        return _svg(figure, full_names or labels)


def stacked_ranks(ranks: list[int], parts: dict[str, list[int]]) -> str:
    """One horizontal bar per rank, split by category (over MAX_LABELLED_ROWS ranks: _rank_stairs)."""
    with _style():
        ax, figure = _rank_axes(ranks)
        series = {_label(category): values for category, values in sorted(parts.items())}
        colors = [color(category, i) for i, category in enumerate(sorted(parts))]
        if len(ranks) > MAX_LABELLED_ROWS:
            _rank_stairs(ax, ranks, series, colors)
        else:
            positions = np.arange(len(ranks))[::-1]
            left = np.zeros(len(ranks))
            for (label, values), shade in zip(series.items(), colors):
                ax.barh(positions, values, left=left, color=shade, label=label)
                left += np.asarray(values, dtype=float)
            ax.set_yticks(positions, [f"rank {r}" for r in ranks])
        ax.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), fontsize=8, frameon=False)
        _margins(figure, [max((f"rank {r}" for r in ranks), key=len, default="")], right_in=1.4)
        _time_axis(ax, figure)
        return _svg(figure)


def _rank_axes(ranks: list[int], row_in: float = 0.28):
    """A figure for one row per rank, `row_in` inches each, at most MAX_LABELLED_ROWS rows tall (its axes,
    the figure)."""
    figure = _figure(9, _height(0.6 + row_in * min(max(len(ranks), 1), MAX_LABELLED_ROWS)))
    return figure.subplots(), figure


def _rank_stairs(ax, ranks: list[int], series: dict[str, list[int]], colors: list[str]) -> None:
    """The ranks' bars as one stepped band per series, stacked, rank by rank from the top: a bar per rank
    at 1024 ranks was a figure 290 in tall, 1.1 MB of SVG and 7 s to draw; this is a few paths."""
    edges = np.arange(len(ranks) + 1)
    base = np.zeros(len(ranks))
    for (label, values), shade in zip(series.items(), colors):
        top = base + np.asarray(values, dtype=float)
        ax.stairs(top, edges, baseline=base, fill=True, orientation="horizontal", color=shade, label=label,
                  rasterized=True)
        base = top
    every = max(1, -(-len(ranks) // MAX_LABELLED_ROWS))
    ax.set_yticks(edges[:-1:every] + 0.5, [f"rank {r}" for r in ranks[::every]])
    ax.set_ylim(len(ranks), 0)          # rank order from the top, as the bars
    ax.set_xlim(left=0)


MAX_LABELLED_ROWS = 48


def heatmap(rows: list[str], columns: list[str], grid_ns: np.ndarray, title: str) -> str:
    """rank x step busy time; each cell labelled when the grid is small enough to read. Steps named alike
    ("ProfilerStep#12") are labelled by what differs ("12") under an axis title of what they share; labels
    lie flat when short, else upright, and every k-th is shown so that none overlaps another."""
    with _style():
        shared = os.path.commonprefix(columns)
        shared = shared[:shared.rfind("#") + 1] if len(columns) > 1 else ""
        shown = [_label(c[len(shared):]) for c in columns]
        longest_in = _CHAR_INCH * max([len(c) for c in shown] + [1])
        flat = longest_in <= 0.6
        bottom_in = 0.55 + (0 if flat else longest_in)
        # at most MAX_LABELLED_ROWS rows tall, every k-th rank labelled: imshow rasterizes the whole figure,
        # and a figure 0.3 in per rank was 100 in tall at 331 ranks (+170 MB to draw, and unreadable)
        figure = _figure(9, _height(0.9 + 0.3 * min(max(len(rows), 1), MAX_LABELLED_ROWS), bottom_in=bottom_in))
        ax = figure.subplots()
        image = ax.imshow(grid_ns, aspect="auto", cmap="viridis", interpolation="nearest")
        every = max(1, -(-len(rows) // MAX_LABELLED_ROWS))
        ax.set_yticks(range(0, len(rows), every), [printable(r) for r in rows[::every]])
        colorbar = figure.colorbar(image, ax=ax)
        colorbar.formatter = _ns_formatter()
        colorbar.update_ticks()
        ax.set_title(printable(title), loc="left")
        ax.set_xlabel(_label(shared.rstrip("#")))
        _margins(figure, rows, bottom_in=bottom_in, right_in=0.3)
        pitch_in = longest_in + 0.15 if flat else 0.2          # a label's width (flat) or height (upright)
        axis_in = ax.get_position().width * figure.get_figwidth()
        step = max(1, -(-len(columns) // max(1, int(axis_in / pitch_in))))
        if grid_ns.size <= 300 and axis_in / max(len(columns), 1) >= CELL_TEXT_IN:   # values that fit their cells
            for (y, x), value in np.ndenumerate(grid_ns):
                ax.text(x, y, human_ns(int(value)), ha="center", va="center", fontsize=7, color="white")
        _named_ticks(ax.xaxis, range(0, len(columns), step), shown[::step], columns[::step])
        if not flat:
            for label in ax.get_xticklabels():
                label.set(rotation=90)
        return _svg(figure, columns[::step])


def grouped(ranks: list[int], series: dict[str, list[int]]) -> str:
    """Per rank, side-by-side bars of each series (communication wait and transfer); over
    MAX_LABELLED_ROWS ranks, the series stacked (_rank_stairs: wait + transfer is the rank's communication)."""
    with _style():
        ax, figure = _rank_axes(ranks, row_in=0.35)
        colors = list(_OTHER_COLORS[:len(series)])
        labelled = {_label(label): values for label, values in series.items()}
        if len(ranks) > MAX_LABELLED_ROWS:
            _rank_stairs(ax, ranks, labelled, colors)
        else:
            positions = np.arange(len(ranks))[::-1]
            height = 0.8 / max(len(series), 1)
            for i, ((label, values), shade) in enumerate(zip(labelled.items(), colors)):
                ax.barh(positions + i * height, values, height=height, color=shade, label=label)
            ax.set_yticks(positions + height * (len(series) - 1) / 2, [f"rank {r}" for r in ranks])
        ax.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), fontsize=8, frameon=False)
        _margins(figure, [max((f"rank {r}" for r in ranks), key=len, default="")], right_in=1.2)
        _time_axis(ax, figure)
        return _svg(figure)


def waterfall(start_label: str, start_ns: int, steps: list[tuple[str, int]], end_label: str,
              full_names: list[str] | None = None) -> str:
    """A (total) -> each delta -> B (total): the deltas add up to B - A. The axis spans the running totals,
    not 0 to the largest (deltas of 1 ms beside 45 ms totals were slivers): the A and B bars run in from
    the left edge, labelled with their totals. `full_names`: the steps' tooltips (default: their labels)."""
    with _style():
        labels = [start_label] + [label for label, _ in steps] + [end_label]
        figure = _figure(9, _height(0.8 + 0.26 * len(labels), bottom_in=0.55))
        ax = figure.subplots()
        positions = np.arange(len(labels))[::-1]
        level, levels = start_ns, [start_ns]
        for y, (_, delta) in zip(positions[1:-1], steps):
            ax.barh(y, delta, left=level, color="#e45756" if delta > 0 else "#54a24b")
            ax.text(max(level, level + delta), y, f" {'+' if delta > 0 else ''}{human_ns(delta)}", va="center",
                    fontsize=8)
            level += delta
            levels.append(level)
        low, high = min(levels), max(levels)
        pad = max(high - low, 1) * 0.15
        left = max(0.0, low - pad)
        ax.set_xlim(left, high + 1.5 * pad)        # room for the last delta's label on the right
        for y, total in ((positions[0], start_ns), (positions[-1], level)):
            ax.barh(y, total, color="#4c78a8")
            ax.text(total, y, " " + human_ns(total), va="center", fontsize=8)
        _named_ticks(ax.yaxis, positions, labels, [start_label] + (full_names or labels[1:-1]) + [end_label])
        ax.set_xlabel("busy time" + (f" (the axis starts at {human_ns(int(left))}, not 0)" if left > 0 else ""))
        _margins(figure, labels, bottom_in=0.55)
        _time_axis(ax, figure)
        return _svg(figure, [start_label] + (full_names or labels[1:-1]) + [end_label])
