"""Findings (analysis/findings.py, findings_part.py) on planted truth: each rule's number is the builder's,
computed here from what it wrote (TraceTruth), never from the implementation's output."""

from __future__ import annotations

import json

import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis import findings as F
from traceattr.analysis import summary_plan as M
from traceattr.analysis.findings_part import (EXTRACT, GAP_MIN_NS, PAGEABLE_ASYNC, SYNC_MEMCPY, FindingsData)
from traceattr.analysis.multirank_plan import comm_report_runs
from traceattr.analysis.straggler import HOST_BOUND
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.builder.multirank import MultiRankSpec, build_multirank
from traceattr.pipelines.summarize import summary_report
from traceattr.units import human_ns

from clirun import run_cli
from tracesets import SMALL

PAGEABLE_NAME = "Memcpy HtoD (Pageable -> Device)"


def _data(path) -> FindingsData:
    reduced, _ = M.reduce_path(str(path), extracts=(EXTRACT,), cache=False, jobs=1)
    return reduced.extracts[EXTRACT.name]


def _calls(truths, name: str) -> tuple[int, int, set[str]]:
    calls = [call for truth in truths.values() for call in truth.host_calls if call[0] == name]
    return len(calls), sum(call[2] for call in calls), {call[3] for call in calls}


def _copies_ns(truths) -> int:
    return sum(end - start for truth in truths.values() for start, end, category in
               zip(truth.activities["start_ns"], truth.activities["end_ns"], truth.activities["category"])
               if category == "memcpy")


def _findings(path) -> list[str]:
    return summary_report(str(path), cache=False, jobs=1).header[F.FINDINGS]


def test_blocking_memcpy_with_the_op_that_called_it(tmp_path):
    truths = write_trace_set(tmp_path, TraceSpec(memcpy_runtime="cudaMemcpy", cuda_sync=False, **SMALL))
    count, host_ns, ops = _calls(truths, "cudaMemcpy")
    assert count == 2 and ops == {"aten::to"}           # one copy per step, under aten::to (the builder's)
    data = _data(tmp_path)
    assert data.copies == {(SYNC_MEMCPY, "cudaMemcpy", "aten::to"): [count, _copies_ns(truths), host_ns]}
    assert not data.syncs
    line = next(line for line in _findings(tmp_path) if line.startswith(SYNC_MEMCPY))
    assert f"{count} calls hold the host {human_ns(host_ns)}" in line and "aten::to" in line


def test_async_memcpy_from_pageable_memory(tmp_path):
    truths = write_trace_set(tmp_path, TraceSpec(memcpy_name=PAGEABLE_NAME, cuda_sync=False, **SMALL))
    count, host_ns, _ = _calls(truths, "cudaMemcpyAsync")
    data = _data(tmp_path)
    assert data.copies == {(PAGEABLE_ASYNC, "cudaMemcpyAsync", "aten::to"): [count, _copies_ns(truths), host_ns]}


def test_pinned_async_memcpy_is_no_finding_and_sync_calls_are(tmp_path):
    truths = write_trace_set(tmp_path, TraceSpec(**SMALL))       # pinned memory, cudaStreamSynchronize per step
    count, host_ns, ops = _calls(truths, "cudaStreamSynchronize")
    data = _data(tmp_path)
    assert data.copies == {}
    assert data.syncs == {("cudaStreamSynchronize", ""): [count, host_ns]} and ops == {""}
    found = F.findings_of(F.Results(busy_ns=host_ns, data=data))
    assert found[0].ns == host_ns and found[0].command == "--by op"
    assert f"host blocked in synchronize calls {human_ns(host_ns)} over {count} calls" in found[0].text


def _gaps(truth) -> list[int]:
    """Idle stretches >= GAP_MIN_NS between the activities of each device, from the written intervals."""
    found = []
    acts = truth.activities
    for device in set(acts["device"]):
        spans = sorted((s, e) for d, s, e in zip(acts["device"], acts["start_ns"], acts["end_ns"]) if d == device)
        reach = spans[0][1]
        for start, end in spans[1:]:
            if start - reach >= GAP_MIN_NS:
                found.append(start - reach)
            reach = max(reach, end)
    return found


def test_device_gaps_planted_by_host_pauses(tmp_path):
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, steps=3, step_pause_ns=3_000_000, layers=2,
                                                 ops_per_module=1, kernels_per_op=1))
    data = _data(tmp_path)
    for rank, truth in truths.items():
        gaps = _gaps(truth)
        assert len(gaps) == 2              # before steps 2 and 3: the pauses
        assert data.gaps[rank] == [len(gaps), sum(gaps), max(gaps)]
    total = sum(sum(_gaps(truth)) for truth in truths.values())
    line = next(line for line in _findings(tmp_path) if line.startswith("device idle in 4 gaps"))
    assert human_ns(total) in line
    # the host paused between steps: no cpu op ran through most of the gaps (the next step's first op only
    # overlaps their ends), and the finding says so
    assert sum(data.gap_ops.values()) == total and max(data.gap_ops, key=data.gap_ops.get) == ""
    assert "the host ran no cpu op through" in line


def test_a_gap_while_the_host_runs_one_op_names_it(tmp_path):
    """A device gap inside one long cpu op (the host busy in Python under it): the op is named, with the time."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::slow_host_op", "pid": 1, "tid": 1, "ts": 100.0,
               "dur": 5000.0, "args": {}},
              {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 50.0, "dur": 100.0,
               "args": {"correlation": -1}},
              {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 4150.0, "dur": 100.0,
               "args": {"correlation": -1}}]
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    data = _data(tmp_path)
    assert data.gaps[0] == [1, 4_000_000, 4_000_000]
    assert data.gap_ops == {"aten::slow_host_op": 4_000_000}
    line = next(line for line in _findings(tmp_path) if line.startswith("device idle in 1 gap"))
    assert "the host was in aten::slow_host_op through 4.00 ms of them" in line


def _exposed(truth) -> int:
    """Time some communication runs and no compute does, per device, from the written intervals."""
    total = 0
    acts = truth.activities
    for device in set(acts["device"]):
        points = []
        for d, s, e, cat in zip(acts["device"], acts["start_ns"], acts["end_ns"], acts["category"]):
            if d == device and cat in ("communication", "compute"):
                points += [(s, 1, cat), (e, -1, cat)]
        points.sort(key=lambda p: (p[0], p[1]))
        open_ = {"communication": 0, "compute": 0}
        last = None
        for t, step, cat in points:
            if last is not None and open_["communication"] > 0 and open_["compute"] == 0:
                total += t - last
            open_[cat] += step
            last = t
    return total


def test_exposed_communication(tmp_path):
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, coupled_collectives=True, **SMALL))
    exposed = sum(_exposed(truth) for truth in truths.values())
    assert exposed > 0
    reduced, _ = M.reduce_path(str(tmp_path), cache=False, jobs=1)
    found = M.findings_results(reduced, M.table_of(reduced, "kernel"))
    assert found.exposed_communication_ns == exposed
    assert any(line.startswith(f"exposed communication {human_ns(exposed)}") for line in _findings(tmp_path))


def _communicating(truth) -> int:
    """Time some communication runs, per device (the union of its intervals), from the written intervals."""
    total = 0
    acts = truth.activities
    for device in set(acts["device"]):
        spans = sorted((s, e) for d, s, e, cat in zip(acts["device"], acts["start_ns"], acts["end_ns"],
                                                       acts["category"]) if d == device and cat == "communication")
        end = None
        for s, e in spans:
            total += max(0, e - max(s, end if end is not None else s))
            end = e if end is None else max(end, e)
    return total


def test_the_header_shows_exposed_communication_and_the_overlap_ratio(tmp_path):
    """One line whenever communication ran: the exposed time, its share of the time communication ran and
    the rest (what compute hid) as the overlap ratio; the finding's share hidden agrees with it."""
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, **SMALL))      # collectives beside compute
    exposed = sum(_exposed(truth) for truth in truths.values())
    running = sum(_communicating(truth) for truth in truths.values())
    assert 0 < exposed < running
    done = run_cli("summarize", tmp_path, "--by", "category", "--no-cache")
    assert done.returncode == 0, done.stderr
    shown = " ".join(done.stdout.split())
    assert (f"exposed communication: {human_ns(exposed)} ({100 * exposed / running:.1f}% of communication; "
            f"overlap ratio {100 * (running - exposed) / running:.1f}%)") in shown
    assert f"{100 * (running - exposed) / running:.0f}% of communication hidden by compute" in shown
    quiet = tmp_path / "compute_only"
    write_trace_set(quiet, TraceSpec(collective=False, **SMALL))
    assert "exposed communication" not in run_cli("summarize", quiet, "--by", "category", "--no-cache").stdout


def test_straggler_and_its_cause(tmp_path):
    truth = build_multirank(MultiRankSpec(ranks=4, steps=3, host_stall_ns={1: 300_000}), tmp_path)
    (run,) = comm_report_runs(str(tmp_path), "rank", cache=False, jobs=1)
    line = next(line for line in run.header[F.FINDINGS] if "holds the others back" in line)
    assert line.startswith(f"rank 1 holds the others back: {human_ns(truth.wait_caused_ns()[1])} of waiting")
    assert HOST_BOUND in line and "aten::_host_stall" in line


def test_low_linked_share_on_attribution_levels(tmp_path):
    write_trace_set(tmp_path, TraceSpec(dropped_records=6, cuda_graph=False, **SMALL))
    report = summary_report(str(tmp_path), by="op", cache=False, jobs=1)
    table = report.table
    unattributed = int(table.loc[table["key"] == "<unattributed>", S.SELF_NS].sum())
    share = 1 - unattributed / int(table[S.SELF_NS].sum())
    assert share < F.LOW_LINKED_SHARE
    assert f"only {100 * share:.1f}% of device time linked to an op" in "\n".join(report.header[F.FINDINGS])


def test_ranked_by_time_at_most_five_and_small_ones_dropped():
    made = [F.Finding(f"finding {ns}", ns, "--by rank") for ns in (5, 300, 100, 900, 200, 700, 400)]
    rule = F.rule(lambda found: made)
    try:
        shown = F.findings_of(F.Results(busy_ns=10_000))
    finally:
        F.RULES.remove(rule)
    assert [f.ns for f in shown] == [900, 700, 400, 300, 200]       # 5 < 1% of busy: dropped
    assert shown[0].line() == "finding 900 — more: --by rank"


def test_cli_findings_first_on_the_terminal_on_stderr_otherwise_and_quiet_drops_them(tmp_path):
    write_trace_set(tmp_path, TraceSpec(memcpy_runtime="cudaMemcpy", **SMALL))
    shown = run_cli("summarize", tmp_path, "--no-cache")
    box = shown.stdout.splitlines()
    assert shown.returncode == 0 and "finding: " in box[1]        # the first line inside the header box
    as_csv = run_cli("summarize", tmp_path, "--no-cache", "--format", "csv")
    assert "finding" not in as_csv.stdout
    assert any(line.startswith("traceattr: finding: synchronous memcpy") for line in as_csv.stderr.splitlines())
    quiet = run_cli("summarize", tmp_path, "--no-cache", "--quiet")
    quiet_csv = run_cli("summarize", tmp_path, "--no-cache", "--quiet", "--format", "csv")
    assert "finding" not in quiet.stdout and "finding" not in quiet_csv.stderr
    assert quiet_csv.stdout == as_csv.stdout


def test_compare_opens_with_the_change_size_and_significance_apart(tmp_path):
    a = write_trace_set(tmp_path / "a", TraceSpec(steps=4, **{k: v for k, v in SMALL.items() if k != "steps"}))
    b = write_trace_set(tmp_path / "b", TraceSpec(steps=4, kernel_scale={"sgemm": 3.0},
                                                  **{k: v for k, v in SMALL.items() if k != "steps"}))
    delta = sum(t.busy_ns for t in b.values()) - sum(t.busy_ns for t in a.values())
    assert delta > 0
    shown = run_cli("compare", tmp_path / "a", tmp_path / "b", "--no-cache")
    assert shown.returncode == 0, shown.stderr
    findings = [line for line in shown.stdout.splitlines() if "finding:" in line]
    assert any(f"finding: busy time +{human_ns(delta)} from A to B" in line for line in findings), findings
    assert any("step-to-step noise (p " in line for line in findings)       # significance, apart from size
    quiet = run_cli("compare", tmp_path / "a", tmp_path / "b", "--no-cache", "-q")
    assert "finding:" not in quiet.stdout


# --- issue 37 point 6: --by step -----------------------------------------------------------------------

def _step_walls(path) -> dict[str, int]:
    """ProfilerStep#N wall ns as the file writes them (its user_annotation ranges)."""
    import json

    events = json.loads(path.read_text())["traceEvents"]
    return {e["name"]: round(float(e["dur"]) * 1000) for e in events
            if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")}


def test_step_duration_is_wall_time_mean_over_the_ranks_that_have_the_step(tmp_path):
    import io

    import pandas as pd

    import traceattr
    from traceattr import schema as S
    from traceattr.builder import write_trace

    base = dict(ranks=2, layers=2, ops_per_module=1, kernels_per_op=2)
    write_trace(tmp_path / "rank0.pt.trace.json", TraceSpec(steps=(1, 2, 3), **base), 0)
    write_trace(tmp_path / "rank1.pt.trace.json", TraceSpec(steps=(1, 2), seed=5, **base), 1)
    walls = {rank: _step_walls(tmp_path / f"rank{rank}.pt.trace.json") for rank in (0, 1)}
    per_rank = traceattr.attribute(tmp_path, by="step", cache=False, jobs=1)
    for rank, key, duration in zip(per_rank[S.RANK], per_rank["key"], per_rank[S.DURATION_NS]):
        assert duration == walls[rank].get(key, S.NO_INT), (rank, key)
    out = run_cli("summarize", tmp_path, "--by", "step", "--no-cache", "-q", "--format", "csv")
    table = pd.read_csv(io.StringIO(out.stdout)).set_index("key")
    for step in ("ProfilerStep#1", "ProfilerStep#2"):
        assert table.loc[step, "ranks"] == 2
        assert table.loc[step, S.DURATION_NS] == round((walls[0][step] + walls[1][step]) / 2)
        assert table.loc[step, "mean_self_ns"] == table.loc[step, S.SELF_NS] // 2
    only = table.loc["ProfilerStep#3"]       # on rank 0 alone: its own wall time and self time
    assert only["ranks"] == 1 and only[S.DURATION_NS] == walls[0]["ProfilerStep#3"]
    assert only["mean_self_ns"] == only[S.SELF_NS]


def test_a_name_of_any_length_keeps_a_finding_one_short_sentence():
    huge = "aten::" + "x" * 20_000 + "\u202e<b>"
    data = FindingsData(copies={(SYNC_MEMCPY, "cudaMemcpy", huge): [3, 1_000, 5_000_000]},
                        syncs={("cudaStreamSynchronize", huge): [2, 4_000_000]})
    lines = F.lines_of(F.Results(busy_ns=10_000_000, data=data))
    assert len(lines) == 2 and all(len(line) < 300 for line in lines), lines


def test_a_straggler_too_few_to_test_is_said_so_in_its_finding(tmp_path):
    truth = build_multirank(MultiRankSpec(ranks=2, steps=2, extra_compute_ns={1: 200_000}), tmp_path)
    (run,) = comm_report_runs(str(tmp_path), "rank", cache=False, jobs=1)
    line = next(line for line in run.header[F.FINDINGS] if line.startswith("rank 1 "))
    assert line.startswith(f"rank 1 arrived last, {human_ns(truth.wait_caused_ns()[1])} of waiting")
    assert "too few collectives to test it against chance" in line and "holds the others back" not in line


def _tiny_and_long(path, tiny: int, long: int, tiny_ns: int = 2_000, long_ns: int = 200_000) -> None:
    """`tiny` kernels of `tiny_ns` launched by aten::add_, then `long` of `long_ns` by aten::mm, one at a
    time (self == duration)."""
    events, t = [], 1000.0
    for i in range(tiny + long):
        op, dur = ("aten::add_", tiny_ns) if i < tiny else ("aten::mm", long_ns)
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 2.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 0.5,
             "dur": 1.0, "args": {"correlation": i}},
            {"ph": "X", "cat": "kernel", "name": f"k_{op}", "pid": 0, "tid": 7, "ts": t + 1.0, "dur": dur / 1000,
             "args": {"correlation": i}}]
        t += 1.0 + dur / 1000 + 1.0
    path.write_text(json.dumps({"traceEvents": events}))


def test_short_kernels_that_dominate_are_a_finding_that_adds_up_with_by_launch(tmp_path):
    path = tmp_path / "rank0.json"
    _tiny_and_long(path, tiny=1000, long=5)               # 2 ms of tiny kernels, 1 ms of long ones
    short_ns = 1000 * 2_000
    assert _data(path).short == [1000, 1005, short_ns]
    for by, named in (("kernel", False), ("op", True)):    # the op only where the plan linked the file
        line = next(line for line in summary_report(str(path), by=by, cache=False, jobs=1).header[F.FINDINGS]
                    if line.startswith("activities under 10 µs"))
        assert f"1,000 of 1,005, {human_ns(short_ns)} (67% of busy)" in line and line.endswith("--by launch")
        assert (f"mostly aten::add_ {human_ns(short_ns)}" in line) == named, line
    launch = traceattr.attribute(str(path), by="launch", cache=False)
    assert launch["short"].sum() == 1000 and launch["short_self_ns"].sum() == short_ns
    assert launch["count"].sum() == 1005
    out = run_cli("summarize", path, "--no-cache")
    assert out.returncode == 0 and "activities under 10 µs: 1,000 of 1,005" in out.stdout + out.stderr


def test_few_short_kernels_are_no_finding(tmp_path):
    path = tmp_path / "rank0.json"
    _tiny_and_long(path, tiny=10, long=100)               # 10 of 110 kernels, 20 µs of 20 ms
    assert _data(path).short == [10, 110, 10 * 2_000]
    assert not any("under 10 µs" in line for line in _findings(path))


def test_gap_ops_against_every_op_by_hand():
    """The gaps' host ops read only the ops that can overlap each gap: the same answer as trying every op."""
    import numpy as np
    import pyarrow as pa

    from traceattr import schema as S
    from traceattr.analysis.findings_part import _gap_intervals, _gap_ops

    rng = np.random.default_rng(5)
    for _ in range(200):
        n, m = int(rng.integers(0, 30)), int(rng.integers(2, 15))
        starts = np.sort(rng.integers(0, 30_000_000, m))
        device = pa.table({S.DEVICE: rng.integers(0, 2, m), S.START_NS: starts,
                           S.END_NS: starts + rng.integers(1, 3_000_000, m)})
        op_start = rng.integers(0, 30_000_000, n)
        op_end = op_start + rng.integers(0, 8_000_000, n)
        names = [f"op{i % 5}" for i in range(n)]
        is_op = rng.random(n) < 0.8
        expected: dict[str, int] = {}
        for gap_start, gap_end in _gap_intervals(device).tolist():
            best = None                  # most overlap; then latest start; then shortest; then host order
            for i in np.flatnonzero(is_op).tolist():
                held = min(op_end[i], gap_end) - max(op_start[i], gap_start)
                rank = (held, op_start[i], -(op_end[i] - op_start[i]))
                if held > 0 and (best is None or rank > best[0]):
                    best = (rank, i)
            held = int(best[0][0]) if best else 0
            if held:
                expected[names[best[1]]] = expected.get(names[best[1]], 0) + held
            if gap_end - gap_start > held:
                expected[""] = expected.get("", 0) + int(gap_end - gap_start - held)
        assert _gap_ops(device, pa.table({S.NAME: names}), is_op, op_start, op_end) == expected
