"""Static SVG charts for the HTML report, drawn by matplotlib's SVG backend.

Why static SVG from matplotlib: the page must open offline, stay small for thousands of ranks' worth of
data and show at once. Plotly inlines ~4.5 MB of JS; Vega-Lite (altair) needs ~0.8 MB of JS and draws in
the browser; matplotlib (already the notebooks' plotting library) writes plain SVG that needs no script at
all, is a few tens of kB per chart whatever the trace size (the data are binned first), and keeps text as
<text> (fonttype "none") so names stay searchable. Every label passes through printable() first: a
control character is not even valid XML.
"""

from __future__ import annotations

import io
import warnings

import numpy as np

from traceattr.errors import TraceInputError
from traceattr.report.printable import printable
from traceattr.report.shape import human_ns

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


def _margins(figure, labels: list[str], top_in: float = 0.35, bottom_in: float = 0.45, right_in: float = 0.9):
    """Fixed margins sized from the longest y label: matplotlib's constrained layout measures every text
    extent and costs more than the drawing itself."""
    width, height = figure.get_size_inches()
    left_in = 0.25 + _CHAR_INCH * max([len(label) for label in labels] + [4])
    figure.subplots_adjust(left=min(left_in / width, 0.6), right=1 - right_in / width,
                           bottom=min(bottom_in / height, 0.45), top=1 - min(top_in / height, 0.4))


def _svg(figure) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buffer = io.StringIO()
    with warnings.catch_warnings():     # text stays <text> (fonttype none): the browser draws any glyph
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        FigureCanvasSVG(figure).print_svg(buffer, metadata={"Date": None})   # same traces, same page
    text = buffer.getvalue()
    return text[text.index("<svg"):]          # inline in HTML: no XML declaration or DOCTYPE


def _style():
    import matplotlib

    return matplotlib.rc_context(_STYLE)


def _ns_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: human_ns(int(value)))


def timeline(series: dict[int, dict[str, np.ndarray]], edges: np.ndarray) -> str:
    """Per rank (one small panel each): utilisation (busy share of each bin) stacked by category."""
    with _style():
        ranks = sorted(series)
        figure = _figure(9, 0.2 + 1.1 * len(ranks))
        axes = figure.subplots(len(ranks), 1, sharex=True, squeeze=False)[:, 0]
        width = float(edges[1] - edges[0]) if len(edges) > 1 else 1.0
        middles = (edges[:-1] + edges[1:]) / 2
        categories = sorted({c for per in series.values() for c in per})
        for ax, rank in zip(axes, ranks):
            values = [series[rank].get(c, np.zeros(len(middles))) / width for c in categories]
            ax.stackplot(middles, *values, colors=[color(c, i) for i, c in enumerate(categories)],
                         labels=[printable(c) for c in categories], step="mid")
            ax.set_ylim(0, max(1.0, max(float(np.sum(values, axis=0).max()), 0) * 1.05))
            ax.set_ylabel(f"rank {rank}", rotation=0, ha="right", va="center")
            ax.set_yticks([0, 1], ["0", "100%"])
        axes[-1].xaxis.set_major_formatter(_ns_formatter())
        axes[-1].set_xlabel("time since the earliest window start")
        axes[0].legend(loc="lower right", ncols=len(categories), fontsize=8, frameon=False,
                       bbox_to_anchor=(1, 1.0))
        _margins(figure, ["rank 0000"], top_in=0.35, bottom_in=0.55, right_in=0.3)
        return _svg(figure)


def bars(labels: list[str], values_ns: list[int], title: str) -> str:
    """Horizontal bars, largest on top, values labelled in human units."""
    with _style():
        figure = _figure(9, 0.5 + 0.24 * max(len(labels), 1))
        ax = figure.subplots()
        positions = np.arange(len(labels))[::-1]
        ax.barh(positions, values_ns, color="#4c78a8")
        ax.set_yticks(positions, [printable(label) for label in labels])
        for y, value in zip(positions, values_ns):
            ax.text(value, y, " " + human_ns(value), va="center", fontsize=8)
        ax.xaxis.set_major_formatter(_ns_formatter())
        ax.set_title(printable(title), loc="left")
        ax.margins(x=0.15)
        _margins(figure, labels)
        return _svg(figure)


def stacked_ranks(ranks: list[int], parts: dict[str, list[int]]) -> str:
    """One horizontal bar per rank, split by category (over MAX_LABELLED_ROWS ranks: _rank_stairs)."""
    with _style():
        ax, figure = _rank_axes(ranks)
        series = {printable(category): values for category, values in sorted(parts.items())}
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
        ax.xaxis.set_major_formatter(_ns_formatter())
        ax.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), fontsize=8, frameon=False)
        _margins(figure, [max((f"rank {r}" for r in ranks), key=len, default="")], right_in=1.4)
        return _svg(figure)


def _rank_axes(ranks: list[int], row_in: float = 0.28):
    """A figure for one row per rank, `row_in` inches each, at most MAX_LABELLED_ROWS rows tall (its axes,
    the figure)."""
    figure = _figure(9, 0.6 + row_in * min(max(len(ranks), 1), MAX_LABELLED_ROWS))
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
    """rank x step busy time; each cell labelled when the grid is small enough to read."""
    with _style():
        # at most MAX_LABELLED_ROWS rows tall, every k-th rank labelled: imshow rasterizes the whole figure,
        # and a figure 0.3 in per rank was 100 in tall at 331 ranks (+170 MB to draw, and unreadable)
        figure = _figure(9, 0.9 + 0.3 * min(max(len(rows), 1), MAX_LABELLED_ROWS))
        ax = figure.subplots()
        image = ax.imshow(grid_ns, aspect="auto", cmap="viridis", interpolation="nearest")
        every = max(1, -(-len(rows) // MAX_LABELLED_ROWS))
        ax.set_yticks(range(0, len(rows), every), [printable(r) for r in rows[::every]])
        step = max(1, len(columns) // 20)
        ax.set_xticks(range(0, len(columns), step), [printable(c) for c in columns[::step]], rotation=30,
                      ha="right")
        if grid_ns.size <= 300:
            for (y, x), value in np.ndenumerate(grid_ns):
                ax.text(x, y, human_ns(int(value)), ha="center", va="center", fontsize=7, color="white")
        colorbar = figure.colorbar(image, ax=ax)
        colorbar.formatter = _ns_formatter()
        colorbar.update_ticks()
        ax.set_title(printable(title), loc="left")
        longest = max([len(c) for c in columns[::step]] + [4])
        _margins(figure, rows, bottom_in=0.3 + 0.5 * _CHAR_INCH * longest, right_in=0.3)
        return _svg(figure)


def grouped(ranks: list[int], series: dict[str, list[int]]) -> str:
    """Per rank, side-by-side bars of each series (communication wait and transfer); over
    MAX_LABELLED_ROWS ranks, the series stacked (_rank_stairs: wait + transfer is the rank's communication)."""
    with _style():
        ax, figure = _rank_axes(ranks, row_in=0.35)
        colors = list(_OTHER_COLORS[:len(series)])
        labelled = {printable(label): values for label, values in series.items()}
        if len(ranks) > MAX_LABELLED_ROWS:
            _rank_stairs(ax, ranks, labelled, colors)
        else:
            positions = np.arange(len(ranks))[::-1]
            height = 0.8 / max(len(series), 1)
            for i, ((label, values), shade) in enumerate(zip(labelled.items(), colors)):
                ax.barh(positions + i * height, values, height=height, color=shade, label=label)
            ax.set_yticks(positions + height * (len(series) - 1) / 2, [f"rank {r}" for r in ranks])
        ax.xaxis.set_major_formatter(_ns_formatter())
        ax.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), fontsize=8, frameon=False)
        _margins(figure, [max((f"rank {r}" for r in ranks), key=len, default="")], right_in=1.2)
        return _svg(figure)


def waterfall(start_label: str, start_ns: int, steps: list[tuple[str, int]], end_label: str) -> str:
    """A (total) -> each delta -> B (total): the deltas add up to B - A."""
    with _style():
        labels = [start_label] + [label for label, _ in steps] + [end_label]
        figure = _figure(9, 0.8 + 0.26 * len(labels))
        ax = figure.subplots()
        positions = np.arange(len(labels))[::-1]
        level = start_ns
        ax.barh(positions[0], start_ns, color="#4c78a8")
        for y, (_, delta) in zip(positions[1:-1], steps):
            ax.barh(y, delta, left=level, color="#e45756" if delta > 0 else "#54a24b")
            ax.text(max(level, level + delta), y, f" {'+' if delta > 0 else ''}{human_ns(delta)}", va="center",
                    fontsize=8)
            level += delta
        ax.barh(positions[-1], level, color="#4c78a8")
        ax.set_yticks(positions, [printable(label) for label in labels])
        ax.xaxis.set_major_formatter(_ns_formatter())
        ax.margins(x=0.12)
        _margins(figure, labels)
        return _svg(figure)
