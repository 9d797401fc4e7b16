"""summary_report (what `traceattr summarize` shows): the summary levels map traces without cpu ops and
python frames, and must give exactly the tables and headers the same plans give a full load."""

from __future__ import annotations

import pytest

import traceattr
from traceattr import schema as S
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.results import multirank_options
from traceattr.pipelines.summarize import CPU_ONLY_NOTE, _from_traces, summary_report
from traceattr.units import human_ns

from conftest import shared_trace

LEVELS = ("kernel", "category", "rank")


def full_report(path, by: str):
    traceset = traceattr.load(path, cache=False)
    table = traceattr.summarize(traceset, by=by)
    full = _from_traces(traceset, by, None, False, False, False, 1, False, False, None, None, None,
                        multirank_options((), True, False))
    assert full.table.equals(table)
    return table, full.header, traceset


def assert_same_as_full_load(path, by: str) -> None:
    from traceattr.analysis.across import across_ranks

    report = summary_report(str(path), by=by, cache=False, per_rank=True)
    table, header, full = full_report(path, by)
    if by == "kernel" and header["host_only"]:       # CPU-only: summarize answers with the host ops instead
        as_op = summary_report(str(path), by="op", cache=False, per_rank=True)
        assert report.table.equals(as_op.table) and report.header["notes"][0] == CPU_ONLY_NOTE
        assert report.title == as_op.title == "host time by op" and table.empty
        return
    assert report.table.equals(table)
    if by != "rank" and len(full.ranks) > 1:     # the default: one row per key over all ranks
        assert summary_report(str(path), by=by, cache=False).table.equals(across_ranks(table))
    assert {k: v for k, v in report.header.items() if k != "source"} == \
           {k: v for k, v in header.items() if k != "source"}
    busy = table.groupby([S.RANK, S.DEVICE])[S.BUSY_NS if by == "rank" else S.SELF_NS].sum()
    assert int(busy.sum()) == header["busy_ns"]          # the table adds up to busy time


@pytest.mark.parametrize("by", LEVELS)
def test_trimmed_load_gives_the_full_tables_and_header(tmp_path, by):
    write_trace_set(tmp_path, TraceSpec(ranks=3, steps=4, jitter=0.1, rank_scale={2: 1.4}))
    assert_same_as_full_load(tmp_path, by)


def test_trimmed_load_leaves_out_only_ops_and_python_frames(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=2, steps=2))
    full = traceattr.load(tmp_path, cache=False)
    trimmed = traceattr.load(tmp_path, cache=False, drop_host=(S.CPU_OP, S.PYTHON_FUNCTION))
    kept = set(trimmed.host.column(S.CATEGORY).to_pylist())
    assert kept == set(full.host.column(S.CATEGORY).to_pylist()) - {S.CPU_OP, S.PYTHON_FUNCTION}
    assert trimmed.device.equals(full.device) and trimmed.files.equals(full.files)


@pytest.mark.parametrize("name", ["trace_filter", "torch213_cpu/dist2", "nccl_parser_config"])
def test_trimmed_load_on_real_traces(name):
    for by in LEVELS:
        assert_same_as_full_load(shared_trace(name), by)


def test_a_rank_whose_window_recorded_nothing_leaves_the_span_alone(tmp_path):
    """A rank file with metadata only (a window that recorded no timed event: start_ns = end_ns = NO_TIME) made
    the header's span reach back to 1970 (1,716,423,323 s) on the map-reduce, TraceSet and HTML paths."""
    import json

    write_trace_set(tmp_path, TraceSpec(ranks=2, seed=3))
    [second] = tmp_path.glob("rank1.*")
    data = json.loads(second.read_text())
    data["traceEvents"] = [event for event in data["traceEvents"] if event.get("ph") == "M"]
    second.write_text(json.dumps(data))
    traceset = traceattr.load(tmp_path, cache=False)
    starts, ends = (traceset.files.column(c).to_pylist() for c in (S.START_NS, S.END_NS))
    assert sorted(zip(traceset.files.column(S.RANK).to_pylist(), starts, ends))[1][1:] == (S.NO_TIME, S.NO_TIME)
    want = max(ends) - min(s for s in starts if s != S.NO_TIME)
    assert 0 < want < 10**10
    for by in ("kernel", "rank"):
        report = summary_report(str(tmp_path), by=by, cache=False)
        assert report.header["span_ns"] == want and report.header["ranks"] == [0, 1]
    assert f"span {human_ns(want)}" in repr(traceset)
    from traceattr.analysis.timeline import bin_edges
    t0, edges = bin_edges(traceset.files, 10)
    assert t0 == min(s for s in starts if s != S.NO_TIME) and edges[-1] == want
