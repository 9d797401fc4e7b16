"""The HTML report's charts of two analyses, on report/plots.py's helpers (static SVG, fixed margins, few
ticks, minimum plot heights, whole names in <title> tooltips):

* roofline(): achieved TFLOP/s against arithmetic intensity, log-log, one point per (op, shape) with its
  area following its device time, coloured by op family, under the device's roof for one dtype;
* critical_paths(): per rank, one step's critical path as segments over the time since the step's start,
  coloured by kind (attribution/critical.py KINDS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceattr.report.plots import _figure, _height, _margins, _style, _svg, _time_axis, _TIP, _label
from traceattr.report.printable import printable

FAMILY_COLORS = {"gemm": "#4c78a8", "attention": "#f58518", "conv": "#54a24b", "norm": "#b279a2",
                 "elementwise": "#e45756", "softmax": "#72b7b2", "reduction": "#eeca3b"}
OTHER_COLOR = "#888888"      # an op with a model of another family
KIND_COLORS = {"compute": "#4c78a8", "communication": "#f58518", "memcpy": "#54a24b", "host": "#9d755d",
               "launch": "#eeca3b", "kernel_gap": "#b279a2", "sync": "#e45756", "idle": "#d0d0d0"}
ROW_IN = 0.4                 # the path chart's height per rank
TITLE_CHARS = 90             # the path chart's title on one line of its 9 in
RASTER_SEGMENTS = 1_500
TIP_SHARE = 0.01             # path segments at least this share of their step get a tooltip of their own


@dataclass(frozen=True)
class Point:
    intensity: float         # FLOP per byte
    tflops: float            # achieved TFLOP/s
    duration_ns: int         # the point's device time (its area)
    family: str              # perfmodels' family: gemm, attention, conv, norm, elementwise...
    tooltip: str


@dataclass(frozen=True)
class Roof:
    dtype: str
    tflops: float            # the compute ceiling, TFLOP/s
    tbps: float              # the memory slope: TB/s x FLOP/byte = TFLOP/s


def roof_text(roof: Roof) -> str:
    return f"roof ({roof.dtype}): {roof.tflops:g} TFLOP/s compute, {roof.tbps:g} TB/s memory"


def _plain_log(axis) -> None:
    """Decade ticks as plain numbers (0.1, 10, 1000, 1e+05): the log formatter's mathtext is off here."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def roofline(points: list[Point], roof: Roof) -> str:
    """The points under the roof min(tflops, tbps x intensity), log-log."""
    with _style():
        figure = _figure(9, _height(4.2))
        ax = figure.subplots()
        ax.set_xscale("log")
        ax.set_yscale("log")
        ridge = roof.tflops / roof.tbps
        xs = [p.intensity for p in points] + [ridge]
        ys = [p.tflops for p in points] + [roof.tflops]
        # whole decades around the points and the ridge, at least three of them on each axis
        left, right = 10 ** np.floor(np.log10(min(xs) / 2)), 10 ** np.ceil(np.log10(max(xs) * 2))
        bottom, top = 10 ** np.floor(np.log10(min(ys) / 2)), 10 ** np.ceil(np.log10(max(ys) * 2))
        right, top = max(right, left * 1000), max(top, bottom * 1000)
        line = np.geomspace(left, right, 200)
        tips, seen = [roof_text(roof)], set()
        ax.plot(line, np.minimum(roof.tflops, roof.tbps * line), color="#222", linewidth=1.2,
                label=_label(f"roof ({roof.dtype})"), gid=f"{_TIP}0")
        largest = max([p.duration_ns for p in points] + [1])
        for i, point in enumerate(sorted(points, key=lambda p: -p.duration_ns)):
            shade = FAMILY_COLORS.get(point.family, OTHER_COLOR)
            label = _label(point.family or "other") if point.family not in seen else None
            seen.add(point.family)
            ax.scatter([point.intensity], [point.tflops], s=25 + 400 * point.duration_ns / largest, color=shade,
                       alpha=0.75, edgecolors="white", linewidths=0.5, label=label, gid=f"{_TIP}{len(tips)}")
            tips.append(point.tooltip)
        ax.set_xlim(left, right)
        ax.set_ylim(bottom, top)
        _plain_log(ax.xaxis)
        _plain_log(ax.yaxis)
        ax.set_xlabel("arithmetic intensity (FLOP per byte)")
        ax.set_ylabel("achieved TFLOP/s")
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        for handle in legend.legend_handles:         # one marker size in the legend, whatever the points' times
            if hasattr(handle, "set_sizes"):
                handle.set_sizes([40])
        _margins(figure, ["x" * 11], bottom_in=0.55, right_in=1.6)      # "0.0001" and the axis label
        return _svg(figure, tips)


def critical_paths(rows: list[tuple[str, np.ndarray, np.ndarray, list[str], list[str]]], title: str) -> str:
    """One row per rank, top down: (row label, segment starts, ends (ns since the step's start), kinds,
    tooltips). Every segment is drawn (one collection per kind and rank); those of at least TIP_SHARE of
    the step are drawn again on top with their own tooltip."""
    with _style():
        figure = _figure(9, _height(0.8 + ROW_IN * max(len(rows), 1), bottom_in=0.55))
        ax = figure.subplots()
        tips, drawn_kinds = [], []
        # past RASTER_SEGMENTS an image: 16 ranks of 400 segments as vector rectangles were 1 MB of SVG
        raster = sum(len(start) for _, start, *_ in rows) > RASTER_SEGMENTS
        for y, (_, start, end, kinds, tooltips) in zip(range(len(rows))[::-1], rows):
            start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
            kinds = np.asarray(kinds, dtype=object)
            for kind, shade in KIND_COLORS.items():
                mine = kinds == kind
                if mine.any():
                    label = kind if kind not in drawn_kinds else None
                    drawn_kinds += [kind] if label else []
                    ax.broken_barh(list(zip(start[mine].tolist(), (end - start)[mine].tolist())), (y - 0.35, 0.7),
                                   facecolors=shade, label=label, rasterized=raster)
            step_ns = int(end.max()) if len(end) else 0
            for i in np.flatnonzero((end - start) >= TIP_SHARE * step_ns):
                ax.barh(y, int(end[i] - start[i]), left=int(start[i]), height=0.7,
                        color=KIND_COLORS.get(kinds[i], "#888"), gid=f"{_TIP}{len(tips)}")
                tips.append(tooltips[i])
        ax.set_yticks(range(len(rows))[::-1], [printable(label) for label, *_ in rows])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_xlim(left=0)
        ax.set_title(_label(title, TITLE_CHARS), loc="left")      # a step's name can be any length
        ax.set_xlabel("time since the step's start")
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(range(len(labels)), key=lambda i: list(KIND_COLORS).index(labels[i]))
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
                  bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        _margins(figure, [label for label, *_ in rows], bottom_in=0.55, right_in=1.4)
        _time_axis(ax, figure)
        return _svg(figure, tips)
