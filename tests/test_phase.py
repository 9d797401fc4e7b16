"""`--by phase` (issue 38, point 4): device time per engine iteration's phase from the vLLM / SGLang / ATOM
iteration annotations, planted on builder traces (each ProfilerStep wrapped in an iteration range of a known
phase) and read by hand on the shared SGLang decode trace; rows sum to busy time."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pandas as pd
import pytest

import traceattr
from clirun import run_cli
from conftest import shared_trace
from traceattr import schema as S
from traceattr.analysis.iteration import ITERATION
from traceattr.analysis.phase import NO_ITERATIONS_NOTE, parse_iteration
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.pipelines.summarize import summary_report
from tracesets import SMALL

ONE_STREAM = dict(SMALL, streams=(7,), memcpy=False, collective=False, steps=(1, 2, 3, 4))
# ProfilerStep#N -> the iteration range written around it (None: none, its kernels are `other`)
PLANTED = {
    "ProfilerStep#1": "execute_100_context_2(sq100sk100sqsq5000sqsk5000)_generation_0(sq0sk0sqsq0sqsk0)",
    "ProfilerStep#2": "execute_context_0(0)_generation_8(8)",
    "ProfilerStep#3": "step[MIXED bs=4 c=1 g=3 c_sq=50 c_sk=50 c_sqsq=2500 c_sqsk=2500 g_sq=3 g_sk=300 g_sqsq=3 "
                      "g_sqsk=300]",
    "ProfilerStep#4": None,
}
PHASE_OF_STEP = {"ProfilerStep#1": "prefill", "ProfilerStep#2": "decode", "ProfilerStep#3": "mixed"}


def _planted(path) -> None:
    """Each ProfilerStep range gets an iteration range of the same span on its thread; step 2's also holds
    SGLang's own `step[DECODE bs=8]` inside it (one iteration, counted once)."""
    document = json.loads(path.read_text())
    added = []
    for event in document["traceEvents"]:
        name = PLANTED.get(event.get("name")) if event.get("cat") == "user_annotation" else None
        if name is not None:
            added.append({**event, "name": name, "args": {}})
            if event["name"] == "ProfilerStep#2":
                added.append({**event, "name": "step[DECODE bs=8]", "ts": float(event["ts"]) + 1,
                              "dur": float(event["dur"]) - 2, "args": {}})
    document["traceEvents"] += added
    path.write_text(json.dumps(document))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    path = tmp_path_factory.mktemp("phase") / "trace.json"
    truth = write_trace(path, TraceSpec(**ONE_STREAM))
    _planted(path)
    return path, truth


def test_formats_parse_to_requests_and_tokens():
    assert parse_iteration(PLANTED["ProfilerStep#1"]) == (0, 2, 0, 100, 0, 1)
    assert parse_iteration("execute_context_2(6144)_generation_3(3)") == (1, 2, 3, 6144, 3, 1)
    assert parse_iteration("step[DECODE bs=32]") == (2, 0, 32, 0, 32, 1)
    assert parse_iteration("step[EXTEND bs=2 toks=14721]") == (2, 2, 0, 14721, 0, 1)
    assert parse_iteration(PLANTED["ProfilerStep#3"]) == (2, 1, 3, 50, 3, 1)
    assert parse_iteration("decode[bs=117/128 tok=117 d=117]") == (3, 0, 117, 0, 117, 1)
    assert parse_iteration("prefill[bs=2 tok=14721 ctx=[7803, 6918]]") == (3, 2, 0, 14721, 0, 1)
    for other in ("ProfilerStep#3", "## forward ##", "execute_model", "step[", "decode"):
        assert parse_iteration(other) is None, other


def test_planted_phases_hold_their_iterations_kernels(planted):
    path, truth = planted
    expected: dict[str, int] = {}
    for start, end, step in zip(truth.activities["start_ns"], truth.activities["end_ns"], truth.activities["step"]):
        phase = PHASE_OF_STEP.get(step, "other")       # one stream: self == duration
        expected[phase] = expected.get(phase, 0) + end - start
    table = traceattr.attribute(path, by="phase", cache=False)
    got = dict(zip(table["key"], table[S.SELF_NS]))
    assert got == expected
    assert int(table[S.SELF_NS].sum()) == truth.busy_ns          # Σ self == busy
    rows = table.set_index("key")
    assert rows.loc[["prefill", "decode", "mixed"], "iterations"].tolist() == [1, 1, 1]   # nested range once
    assert rows.loc["prefill", ["requests", "context_tokens", "generation_tokens"]].tolist() == [2, 100, 0]
    assert rows.loc["decode", ["requests", "context_tokens", "generation_tokens"]].tolist() == [8, 0, 8]
    assert rows.loc["mixed", ["requests", "context_tokens", "generation_tokens"]].tolist() == [4, 50, 3]
    assert rows.loc["other", "iterations"] == 0
    # the CLI: the same rows, the formats in the header
    out = run_cli("summarize", path, "--by", "phase", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    csv = pd.read_csv(io.StringIO(out.stdout))
    assert dict(zip(csv["key"], csv[S.SELF_NS])) == expected
    header = summary_report(str(path), by="phase", cache=False).header
    assert header["iterations"] == "SGLang, vLLM detailed, vLLM native annotations"


def test_a_trace_without_iteration_annotations_says_so(tmp_path):
    path = tmp_path / "trace.json"
    truth = write_trace(path, TraceSpec(**ONE_STREAM))
    table = traceattr.attribute(path, by="phase", cache=False)
    assert table["key"].tolist() == ["other"] and int(table[S.SELF_NS].sum()) == truth.busy_ns
    assert NO_ITERATIONS_NOTE in table.attrs["notes"]
    header = summary_report(str(path), by="phase", cache=False).header
    assert NO_ITERATIONS_NOTE in header["notes"] and header["iterations"] == "none found"


def test_carried_in_work_is_its_own_row(tmp_path):
    path = tmp_path / "trace.json"
    truth = write_trace(path, TraceSpec(carried_in=3, **ONE_STREAM))
    _planted(path)
    table = traceattr.attribute(path, by="phase", cache=False)
    assert table.loc[table["key"] == "<carried in>", S.COUNT].tolist() == [3]
    assert int(table[S.SELF_NS].sum()) == truth.busy_ns
    excluded = traceattr.attribute(path, by="phase", cache=False, exclude_carried_in=True)
    assert "<carried in>" not in excluded["key"].tolist()


def test_shared_sglang_decode_trace_by_hand():
    """One engine iteration: `execute_32_context_0(...)_generation_32(sq32sk32785...)` (SGLang's roofline
    annotation, in vLLM's detailed format) holding `step[DECODE bs=32]`: a decode of 32 requests, one token
    each; every kernel is a graph replay launched inside it, so all busy time is decode."""
    path = shared_trace("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    ts = traceattr.load(path, cache=False)
    table = traceattr.attribute(ts, by="phase")
    assert table["key"].tolist() == ["decode"]
    row = table.iloc[0]
    assert (row["iterations"], row["requests"], row["context_tokens"], row["generation_tokens"]) == (1, 32, 0, 32)
    assert row[S.COUNT] == ts.device.num_rows
    busy = traceattr.summarize(ts, by="rank")[S.BUSY_NS].sum()
    assert row[S.SELF_NS] == busy


def _iteration_ranges(path) -> list[tuple[int, int]]:
    """(start, end) ns of the planted iterations, in order, from the file (ts, dur in µs, read exactly; the
    file's baseTimeNanoseconds not added)."""
    events = json.loads(path.read_text(), parse_float=Decimal)["traceEvents"]
    planted = set(filter(None, PLANTED.values()))
    return sorted((int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in events if e.get("name") in planted)


def test_by_iteration_one_row_per_planted_iteration(planted):
    path, truth = planted
    expected: dict[str, int] = {}
    for start, end, step in zip(truth.activities["start_ns"], truth.activities["end_ns"], truth.activities["step"]):
        key = PHASE_OF_STEP.get(step, "other")        # one stream: self == duration; one iteration per phase
        expected[key] = expected.get(key, 0) + end - start
    table = traceattr.attribute(path, by="iteration", cache=False)
    assert table["key"].tolist() == ["#0 prefill", "#1 decode", "#2 mixed", "other"]
    assert table["phase"].tolist() == ["prefill", "decode", "mixed", "other"]
    assert table["iteration"].tolist() == [0, 1, 2, -1]
    assert dict(zip(table["phase"], table[S.SELF_NS])) == expected
    assert int(table[S.SELF_NS].sum()) == truth.busy_ns          # Σ self == busy
    assert table[["requests", "context_tokens", "generation_tokens"]].values.tolist() == [
        [2, 100, 0], [8, 0, 8], [4, 50, 3], [0, 0, 0]]
    ranges = _iteration_ranges(path)
    got = list(zip(table[S.ITERATION_START_NS], table[S.ITERATION_END_NS]))
    base = int(got[0][0]) - ranges[0][0]                       # the file's base time
    assert [(int(a) - base, int(b) - base) for a, b in got[:3]] == ranges and got[3] == (S.NO_INT, S.NO_INT)
    assert table[S.DURATION_NS].tolist()[:3] == [b - a for a, b in ranges]
    # the same time as --by phase, phase by phase
    phase = traceattr.attribute(path, by="phase", cache=False)
    assert dict(zip(phase["key"], phase[S.SELF_NS])) == dict(zip(table["phase"], table[S.SELF_NS]))
    out = run_cli("summarize", path, "--by", "iteration", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    csv = pd.read_csv(io.StringIO(out.stdout))
    assert csv["key"].tolist() == table["key"].tolist() and csv[S.SELF_NS].tolist() == table[S.SELF_NS].tolist()


def test_by_iteration_carried_in_and_no_iterations(tmp_path):
    path = tmp_path / "trace.json"
    truth = write_trace(path, TraceSpec(carried_in=3, **ONE_STREAM))
    bare = traceattr.attribute(path, by="iteration", cache=False)
    assert bare["key"].tolist() == ["other", "<carried in>"] and NO_ITERATIONS_NOTE in bare.attrs["notes"]
    assert int(bare[S.SELF_NS].sum()) == truth.busy_ns
    _planted(path)
    table = traceattr.attribute(path, by="iteration", cache=False)
    assert table["key"].tolist()[-1] == "<carried in>" and table[S.COUNT].tolist()[-1] == 3
    assert int(table[S.SELF_NS].sum()) == truth.busy_ns


def test_shared_sglang_decode_trace_by_iteration():
    """One decode iteration of 32 requests (test_shared_sglang_decode_trace_by_hand): one row, all busy time."""
    path = shared_trace("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    ts = traceattr.load(path, cache=False)
    table = traceattr.attribute(ts, by="iteration")
    assert table["key"].tolist() == ["#0 decode"]
    row = table.iloc[0]
    assert (row["requests"], row["context_tokens"], row["generation_tokens"]) == (32, 0, 32)
    assert row[S.COUNT] == ts.device.num_rows
    assert row[S.SELF_NS] == traceattr.summarize(ts, by="rank")[S.BUSY_NS].sum()
    assert row[S.ITERATION_START_NS] < row[S.ITERATION_END_NS]
    assert traceattr.attribute(path, by="iteration", cache=False)[S.SELF_NS].tolist() == [row[S.SELF_NS]]


def test_top_folds_the_smaller_phases_into_other(planted):
    """--top 2 by phase: the two phases of most time, then one `<other>` row holding the rest's time,
    activities, iterations and requests (it had no effect before)."""
    path, truth = planted
    whole = traceattr.attribute(path, by="phase", cache=False).set_index("key")
    largest = whole[S.SELF_NS].sort_values(ascending=False, kind="stable").index[:2].tolist()
    table = traceattr.attribute(path, by="phase", top=2, cache=False)
    assert table["key"].tolist() == largest + ["<other>"]
    other = table.iloc[-1]
    rest = whole.drop(index=largest)
    for name in (S.SELF_NS, S.COUNT, "iterations", "requests", "context_tokens", "generation_tokens"):
        assert other[name] == rest[name].sum(), name
    assert int(table[S.SELF_NS].sum()) == truth.busy_ns          # Σ self == busy
    assert float(table[S.SELF_PCT].sum()) == pytest.approx(100.0)
    out = run_cli("summarize", path, "--by", "phase", "--top", "2", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    assert pd.read_csv(io.StringIO(out.stdout))["key"].tolist() == largest + ["<other>"]


def test_top_keeps_the_longest_iterations_in_start_order(planted):
    """--top 2 by iteration: the two iterations of longest wall time (planted ranges), in start order with
    their numbers, the third summed into `<other iterations>` before `other`; the header says so."""
    path, truth = planted
    ranges = _iteration_ranges(path)
    longest = sorted(sorted(range(3), key=lambda i: ranges[i][0] - ranges[i][1])[:2])   # numbers, start order
    whole = traceattr.attribute(path, by="iteration", cache=False)
    table = traceattr.attribute(path, by="iteration", top=2, cache=False)
    assert table[ITERATION].tolist() == longest + [-1, -1]
    assert table["key"].tolist()[2:] == ["<other iterations>", "other"]
    dropped = whole[(whole[ITERATION] >= 0) & ~whole[ITERATION].isin(longest)]
    other = table.iloc[2]
    for name in (S.SELF_NS, S.COUNT, "requests", "context_tokens", "generation_tokens"):
        assert other[name] == dropped[name].sum(), name
    assert other[S.DURATION_NS] == other[S.ITERATION_START_NS] == S.NO_INT
    assert int(table[S.SELF_NS].sum()) == truth.busy_ns          # Σ self == busy
    assert traceattr.attribute(path, by="iteration", top=3, cache=False)["key"].tolist() == whole["key"].tolist()
    out = run_cli("summarize", path, "--by", "iteration", "--top", "2", "--no-cache")
    assert out.returncode == 0, out.stderr
    assert "2 longest iteration(s) (wall time), in start order; 1 other iteration(s) summed" in out.stdout
    assert "<other iterations>" in out.stdout


def test_by_iteration_over_ranks_takes_each_iterations_span_and_means_not_sums(tmp_path):
    """Two ranks, each with the three planted iterations at different times: over ranks an iteration starts at
    the earliest rank's start and ends at the latest rank's end (exact epoch ns, never through float), its
    number, requests and tokens are the ranks' (not summed), its duration the mean of the ranks' wall times;
    self time is summed. Before, every one of these columns was summed over ranks, and the per-rank
    duration_ns of a second rank's rows was taken from another row's mask."""
    write_trace_set(tmp_path, TraceSpec(**dict(ONE_STREAM, ranks=2, jitter=0.2)))
    for path in sorted(tmp_path.glob("*.json")):
        _planted(path)
    per_rank = traceattr.attribute(tmp_path, by="iteration", cache=False)
    inside = per_rank[per_rank["iteration"] >= 0]
    assert (inside[S.DURATION_NS] == inside[S.ITERATION_END_NS] - inside[S.ITERATION_START_NS]).all()
    assert (per_rank.loc[per_rank["iteration"] < 0, S.DURATION_NS] == S.NO_INT).all()
    out = run_cli("summarize", tmp_path, "--by", "iteration", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    over = pd.read_csv(io.StringIO(out.stdout), dtype={S.ITERATION_START_NS: "int64", S.ITERATION_END_NS: "int64"})
    assert over["key"].tolist() == ["#0 prefill", "#1 decode", "#2 mixed", "other"]
    for _, row in over.iterrows():
        ranks = per_rank[per_rank["key"] == row["key"]]
        assert row[S.SELF_NS] == ranks[S.SELF_NS].sum() and row["ranks"] == 2
        if row["iteration"] < 0:
            assert row[S.ITERATION_START_NS] == row[S.ITERATION_END_NS] == S.NO_INT
            continue
        assert row[S.ITERATION_START_NS] == ranks[S.ITERATION_START_NS].min()
        assert row[S.ITERATION_END_NS] == ranks[S.ITERATION_END_NS].max()
        assert row["iteration"] == ranks["iteration"].iloc[0]
        for column in ("requests", "context_tokens", "generation_tokens"):
            assert row[column] == ranks[column].iloc[0] == ranks[column].iloc[1], column
        assert abs(row[S.DURATION_NS] - ranks[S.DURATION_NS].mean()) <= 0.5
    assert over[S.SELF_NS].sum() == per_rank[S.SELF_NS].sum()
