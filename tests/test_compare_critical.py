"""`compare --by critical` (analysis/compare_critical.py): run A's critical paths against run B's per (kind,
key). Planted truth from hand-timed builder traces (builder/critical.py): B plants a host stall or a slower
kernel on the path, and the delta must land in that (kind, key) exactly, every other row unchanged; the CLI's
formats; a real pair of traces against summarize --by critical."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

import traceattr
from clirun import run_cli
from traceattr.builder import critical as scenarios

COLUMNS = ["kind", "key", "a_ns", "b_ns", "delta_ns", "a_share_pct", "b_share_pct"]


def _host_stall(stall_us: float = 0.0) -> scenarios.Scenario:
    """builder/critical.host_bound, with aten::b (on the path: the step is host bound) `stall_us` longer:
    the path is step 10 + aten::a 380 + the launch call 10 + aten::b 600 (+ stall) µs."""
    s = scenarios.Scenario()
    s.step(0, 1000 + stall_us)
    s.host("aten::a", 10, 400)
    s.kernel("k_small", 7, (300, 310), (320, 340))
    s.host("aten::b", 400, 1000 + stall_us)
    return s


def _slow_kernel(slower_us: float = 0.0) -> scenarios.Scenario:
    """builder/critical.compute_bound, with k2 (queued behind k1, on the path) `slower_us` longer and
    everything after it as much later: step 5 + op 5 + launch 10 + k1 480 + gap 2 + k2 398 (+ slower) + sync 5
    + op 45 + step 50 µs."""
    s = scenarios.Scenario()
    s.step(0, 1000 + slower_us)
    s.host("aten::op", 5, 950 + slower_us)
    s.kernel("k1", 7, (10, 15), (20, 500))
    s.kernel("k2", 7, (16, 21), (502, 900 + slower_us))
    s.sync(7, 30, 905 + slower_us)
    return s


def _pair(tmp_path, make, planted_us: float):
    return make().write(tmp_path / "a.json"), make(planted_us).write(tmp_path / "b.json")


def _deltas(table: pd.DataFrame) -> dict:
    rows = table[table["kind"] != "total"]
    return {(kind, key): int(delta) for kind, key, delta in rows[["kind", "key", "delta_ns"]].itertuples(index=False)}


def _sums_hold(table: pd.DataFrame) -> None:
    """Σ rows == Σ step_ns on each side (the total row), so the deltas add up to the step time's change."""
    rows, total = table[table["kind"] != "total"], table[table["kind"] == "total"].iloc[0]
    assert int(rows["a_ns"].sum()) == int(total["a_ns"]) == table.attrs["step_a_ns"]
    assert int(rows["b_ns"].sum()) == int(total["b_ns"]) == table.attrs["step_b_ns"]
    assert int(rows["delta_ns"].sum()) == int(total["delta_ns"])


@pytest.mark.parametrize("make, planted, where", [
    (_host_stall, 300, ("host", "aten::b")),
    (_slow_kernel, 100, ("compute", "k2")),
])
def test_the_planted_change_lands_in_its_kind_and_key_exactly(tmp_path, make, planted, where):
    a, b = _pair(tmp_path, make, planted)
    table = traceattr.compare(a, b, by="critical", cache=False)
    assert list(table.columns) == COLUMNS
    _sums_hold(table)
    deltas = _deltas(table)
    assert deltas.pop(where) == planted * 1000
    assert set(deltas.values()) == {0}                 # nothing else on the path moved
    assert table.iloc[0][["kind", "key"]].tolist() == list(where)       # sorted by |delta|: first
    assert table.iloc[-1]["key"] == "<step time>" and int(table.iloc[-1]["delta_ns"]) == planted * 1000
    # the share of each side's step: the planted row grows from A's share to B's
    row = table[(table["kind"] == where[0]) & (table["key"] == where[1])].iloc[0]
    assert row["a_share_pct"] == pytest.approx(row["a_ns"] / table.attrs["step_a_ns"] * 100)
    assert row["b_share_pct"] == pytest.approx(row["b_ns"] / table.attrs["step_b_ns"] * 100)
    assert table.attrs["kinds"][where[0]] == planted * 1000


def test_the_header_names_the_step_change_and_the_kind_that_changed_most(tmp_path):
    a, b = _pair(tmp_path, _host_stall, 300)
    out = run_cli("compare", a, b, "--by", "critical", "--format", "markdown", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    assert "step time: A 1.00 ms, B 1.30 ms per step: +300 µs (+30.0%)" in out.stdout
    assert "changed most: host +300 µs on the path" in out.stdout
    assert "| host | aten::b |" in out.stdout.replace("  ", " ")


def test_formats_hold_the_same_rows(tmp_path):
    a, b = _pair(tmp_path, _slow_kernel, 100)
    table = traceattr.compare(a, b, by="critical", cache=False)
    csv = run_cli("compare", a, b, "--by", "critical", "--format", "csv", "--no-cache", "-q")
    assert csv.returncode == 0, csv.stderr
    read = pd.read_csv(io.StringIO(csv.stdout), keep_default_na=False)
    assert read[["kind", "key", "a_ns", "b_ns", "delta_ns"]].values.tolist() == \
        table[["kind", "key", "a_ns", "b_ns", "delta_ns"]].values.tolist()
    as_json = run_cli("compare", a, b, "--by", "critical", "--format", "json", "--no-cache", "-q")
    assert as_json.returncode == 0, as_json.stderr
    rows = json.loads(as_json.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert {(r["kind"], r["key"]): r["delta_ns"] for r in rows}[("compute", "k2")] == 100_000
    page = tmp_path / "page.html"
    html = run_cli("compare", a, b, "--by", "critical", "--format", "html", "-o", page, "--no-cache", "-q")
    assert html.returncode == 0, html.stderr
    text = page.read_text(encoding="utf-8")
    assert "compute: k2" in text and 'data-ns="100000"' in text and "<script" not in text
    # --top: the rest in one <other> row, sums kept
    top = traceattr.compare(a, b, by="critical", top=1, cache=False)
    assert top["key"].tolist() == ["k2", "<other>", "<step time>"]
    _sums_hold(top)


def test_step_names_and_kernel_hashes_are_joined_when_normalized(tmp_path):
    """Two runs number their steps differently (ProfilerStep#1 vs #7): the host time in the step's own
    annotation is one key, `<step>`; --no-normalize keeps the names apart."""
    a = _host_stall().write(tmp_path / "a.json")
    b_trace = _host_stall(300)
    for event in b_trace.events:
        if event["name"] == scenarios.STEP:
            event["name"] = "ProfilerStep#7"
    b = b_trace.write(tmp_path / "b.json")
    deltas = _deltas(traceattr.compare(a, b, by="critical", cache=False))
    assert deltas[("host", "<step>")] == 0 and deltas[("host", "aten::b")] == 300_000
    raw = _deltas(traceattr.compare(a, b, by="critical", normalize=False, cache=False))
    assert raw[("host", scenarios.STEP)] == -10_000 and raw[("host", "ProfilerStep#7")] == 10_000


def test_refused_where_it_cannot_answer(tmp_path):
    a, b = _pair(tmp_path, _host_stall, 300)
    gate = run_cli("compare", a, b, "--by", "critical", "--fail-on-regression", "5", "--no-cache", "-q")
    assert gate.returncode == 2 and len(gate.stderr.splitlines()) == 1
    assert "--fail-on-regression" in gate.stderr and "Traceback" not in gate.stderr
    with pytest.raises(TypeError, match="scheduler"):
        traceattr.compare(a, b, by="critical", scheduler="tcp://x:1")


def test_real_pair_sums_to_summarize_by_critical(shared_traces):
    """trace_diff's control and test: each side's column sums to the step time summarize --by critical gives
    that run, and each (kind, key) of A is critical_path's row for it."""
    control, test = shared_traces / "trace_diff" / "control", shared_traces / "trace_diff" / "test"
    table = traceattr.compare(control, test, by="critical", normalize=False, cache=False)
    _sums_hold(table)
    for side, path in (("a_ns", control), ("b_ns", test)):
        alone = traceattr.critical_path(path, cache=False)
        assert table.attrs[f"step_{side[0]}_ns"] == alone.attrs["step_ns"]
        rows = table[table["kind"] != "total"]
        got = {(k, n): int(v) for k, n, v in rows[["kind", "key", side]].itertuples(index=False) if v}
        assert got == {(k, n): int(v) for k, n, v in alone[["kind", "key", "critical_ns"]].itertuples(index=False)
                       if v}
