"""The HTML report's roofline and critical-path sections (report/html.py, analysis/page_critical.py) on planted
truth: the roofline's points at the planted rates under the device's roof, the inefficient shapes ranked by
the time they lose, each rank's path tiling its step with the planted time per kind. No browser here
(tests/test_html_geometry.py measures the charts)."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from tests.clirun import run_cli
from tests.test_roofline import ADDMM, ADDMM_FLOPS, NORM, NORM_BYTES, STEPS, planted, truth_ns
from traceattr.analysis.page_plan import page_data_files
from traceattr.analysis.page_critical import compact
from traceattr.analysis.peaks import PEAKS
from traceattr.attribution.critical import KINDS
from traceattr.builder import critical as scenarios
from traceattr.report.html import trace_page


def _page(path):
    data, source = page_data_files(str(path), cache=False)
    return data, trace_page(data, source, "planted")[0]


def _section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}")
    return page[start:page.index("</section>", start)]


def test_roofline_points_at_planted_rates_under_the_devices_roof(tmp_path):
    path, truth = planted(tmp_path, {"aten::addmm": ADDMM, "aten::native_layer_norm": NORM})
    data, page = _page(path)
    chart = _section(page, "Roofline")
    tips = [html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", chart)]
    h100 = PEAKS["H100 SXM"]           # the builder's deviceProperties: an H100 80GB HBM3
    # bf16 has the most time: its roof is drawn, at the device's figures
    assert f"roof (bf16): {h100.tflops['bf16']:g} TFLOP/s compute, {h100.tbps:g} TB/s memory" in tips
    _, ns = truth_ns(truth, "aten::addmm")
    calls = 2 * 2 * STEPS
    addmm = [t for t in tips if t.startswith(f"aten::addmm {ADDMM[0]} bf16:")]
    assert len(addmm) == 1 and f"{ADDMM_FLOPS * calls / ns / 1e3:.3g} TFLOP/s" in addmm[0]
    assert f"in {calls:,} calls" in addmm[0]
    _, ns = truth_ns(truth, "aten::native_layer_norm")
    norm = [t for t in tips if t.startswith("aten::native_layer_norm")]
    assert len(norm) == 1 and f"{NORM_BYTES * 2 * STEPS / ns / 1e3:.3g} TB/s" in norm[0]
    # the inefficient shapes: lost = time x (1 - peak_pct), largest first
    worst = _section(page, "Top inefficient shapes")
    shapes = data.shapes
    known = shapes[np.isfinite(shapes["peak_pct"])]
    want = (known["duration_ns"] * (1 - known["peak_pct"] / 100)).round().astype(int).sort_values(ascending=False)
    rows = re.findall(r"<tr data-key=\"([^\"]*)\">(.*?)</tr>", worst)
    got = [int(re.findall(r'data-ns="(-?\d+)"', cells)[-1]) for _, cells in rows]
    assert got == want.head(len(got)).tolist() and got[0] > 0
    assert html.unescape(rows[0][0]).startswith(("aten::addmm", "aten::native_layer_norm"))


def test_roofline_absent_with_a_reason(tmp_path):
    bare = scenarios.compute_bound()[0].write(tmp_path / "bare.json")    # no Input Dims at all
    _, page = _page(bare)
    assert "absent: no Input Dims in the traces: capture with record_shapes=True" in _section(page, "Roofline")


def test_critical_section_tiles_the_step_with_the_planted_kinds(tmp_path):
    scenario, kinds, _ = scenarios.compute_bound()
    data, page = _page(scenario.write(tmp_path / "trace.json"))
    steps, segments = data.critical.steps, data.critical.segments
    (row,) = steps.to_dict("records")
    assert row["step"] == scenarios.STEP
    assert {k: row[f"{k}_ns"] for k in KINDS if row[f"{k}_ns"]} == kinds
    assert sum(row[f"{k}_ns"] for k in KINDS) == row["step_ns"] == sum(kinds.values())
    assert segments["start_ns"].iloc[0] == 0 and segments["end_ns"].iloc[-1] == row["step_ns"]
    assert (segments["start_ns"].to_numpy()[1:] == segments["end_ns"].to_numpy()[:-1]).all()
    section = _section(page, "Critical path")
    assert "<svg" in section and "rank 0: ProfilerStep#1" in section
    assert f'data-ns="{row["step_ns"]}"' in section


def test_critical_section_per_rank(tmp_path):
    ranks, _, _ = scenarios.late_rank()
    for i, scenario in enumerate(ranks):
        scenario.write(tmp_path / f"rank{i}.json")
    data, page = _page(tmp_path)
    steps, segments = data.critical.steps, data.critical.segments
    assert steps["rank"].tolist() == [0, 1]
    for rank, step_ns in zip(steps["rank"], steps["step_ns"]):
        mine = segments[segments["rank"] == rank]
        assert int((mine["end_ns"] - mine["start_ns"]).sum()) == step_ns
        assert int(steps.loc[steps["rank"] == rank, [f"{k}_ns" for k in KINDS]].to_numpy().sum()) == step_ns
    assert "rank 1" in _section(page, "Critical path")


def test_compact_keeps_the_tiling_and_the_time_per_kind():
    rng = np.random.default_rng(3)
    ns = rng.integers(1, 50, 20_000)
    ns[::500] = 100_000                                        # a few long segments among many short ones
    end = np.cumsum(ns)
    start = end - ns
    kind = rng.integers(0, len(KINDS), len(ns)).astype(np.int8)
    name = np.array([f"k{i % 7}" for i in range(len(ns))], dtype=object)
    got_start, got_end, got_kind, label, pieces = compact(start, end, kind, name, int(end[-1]), limit=100)
    assert got_start[0] == 0 and got_end[-1] == end[-1] and (got_start[1:] == got_end[:-1]).all()
    assert pieces.sum() == len(ns) and len(got_start) <= 2 * 100 + 1
    long = ns == 100_000                                       # long segments keep their kind and name
    for s, k in zip(start[long], kind[long]):
        at = np.flatnonzero(got_start <= s)[-1]
        assert got_kind[at] == k
    small = compact(start[:50], end[:50], kind[:50], name[:50], int(end[49]))
    merged = np.r_[True, kind[1:50] != kind[:49]].sum()
    assert len(small[0]) == merged and (small[4].sum() == 50)


def test_report_cli_has_both_sections(tmp_path):
    path, _ = planted(tmp_path, {"aten::addmm": ADDMM})
    out = run_cli("report", path, "-o", tmp_path / "r.html", "-q", "--no-cache")
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<h2>Roofline" in page and "<h2>Critical path" in page and "<h2>Top inefficient shapes" in page


def test_peak_overrides_set_the_reports_roof(tmp_path):
    """report --peak-tflops/--peak-tbps: the roofline is drawn under the given roof and the inefficient shapes
    lose time against it, as summarize --by shape measures them with the same options; bad values are refused
    with summarize's own message."""
    import io

    import pandas as pd

    path, _ = planted(tmp_path, {"aten::addmm": ADDMM, "aten::native_layer_norm": NORM})
    given = ["--peak-tflops", "100", "--peak-tbps", "1"]
    out = run_cli("report", path, "-o", tmp_path / "page.html", "--no-cache", "-q", *given)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    tips = [html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", _section(page, "Roofline"))]
    assert "roof (bf16): 100 TFLOP/s compute, 1 TB/s memory" in tips
    assert "the given peaks" in _section(page, "Roofline")
    shapes = run_cli("summarize", path, "--by", "shape", "--format", "csv", "--no-cache", "-q", *given)
    table = pd.read_csv(io.StringIO(shapes.stdout), keep_default_na=False)
    table = table[table["peak_pct"] != ""]
    lost = (table["duration_ns"] * (1 - table["peak_pct"].astype(float).clip(upper=100) / 100)).round()
    rows = re.findall(r"<tr data-key=\"([^\"]*)\">(.*?)</tr>", _section(page, "Top inefficient shapes"))
    got = [int(re.findall(r'data-ns="(-?\d+)"', cells)[-1]) for _, cells in rows]
    assert got == sorted(lost.astype(int).tolist(), reverse=True)[:len(got)] and got
    # against the device's own roof the same shapes lose other amounts
    default = run_cli("report", path, "-o", tmp_path / "device.html", "--no-cache", "-q")
    assert default.returncode == 0 and "the given peaks" not in (tmp_path / "device.html").read_text(encoding="utf-8")
    for bad in (["--peak-tflops", "0"], ["--peak-tbps", "-3"], ["--peak-tflops", "nan"]):
        report = run_cli("report", path, "-o", tmp_path / "bad.html", "--no-cache", "-q", *bad)
        summarize = run_cli("summarize", path, "--by", "shape", "--no-cache", "-q", *bad)
        assert report.returncode == summarize.returncode == 2 and report.stderr == summarize.stderr
        assert "--peak" in report.stderr and not (tmp_path / "bad.html").exists()
