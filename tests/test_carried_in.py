"""Work carried in from before the window (issue 38, point 5): kernels launched before the profiler started
(planted by the builder: no runtime record, correlations below every recorded one, queued ahead of the first
recorded launch on their stream) are told from runtime records CUPTI dropped mid-window, shown as their own
`<carried in>` row and header line, left out of every total by --exclude-carried-in, and every command's
check line says what `traceattr check` says for the same input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import traceattr
from clirun import run_cli
from conftest import shared_trace
from traceattr import schema as S
from traceattr.analysis.compare_plan import compare_paths
from traceattr.attribution.carried import carried_in
from traceattr.attribution.hosttree import runtime_mask
from traceattr.builder import TraceSpec, write_trace
from traceattr.pipelines.summarize import summary_report
from traceattr.units import human_ns
from tracesets import SMALL

CARRIED = 6
# one stream: no two activities overlap, so each one's self time is its duration (an independent truth)
ONE_STREAM = dict(SMALL, streams=(7,), cuda_graph=False, memcpy=False, collective=False)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("carried")
    truth = write_trace(folder / "trace.json", TraceSpec(carried_in=CARRIED, dropped_records=2, **ONE_STREAM))
    return folder / "trace.json", truth


def _durations(truth, rows) -> int:
    return sum(truth.activities["end_ns"][i] - truth.activities["start_ns"][i] for i in rows)


def test_carried_in_kernels_are_told_from_records_dropped_mid_window(planted):
    path, truth = planted
    ts = traceattr.load(path, cache=False)
    corr = ts.device.column(S.CORRELATION).to_numpy()
    found = carried_in(ts)
    assert sorted(corr[found].tolist()) == sorted(truth.carried_in) and len(truth.carried_in) == CARRIED
    # the records dropped mid-window (no runtime record either) are not carried in: still <unattributed>
    dropped = {c for c, launch in zip(truth.activities["correlation"], truth.activities["launch"]) if not launch}
    mid_window = dropped - set(truth.carried_in)
    assert len(mid_window) == 2 * len(TraceSpec(**ONE_STREAM).steps) and not set(corr[found].tolist()) & mid_window
    # the first carried kernel starts before the first host event, the others run inside the window
    host_start = int(ts.host.column(S.START_NS).to_numpy().min())
    starts = ts.device.column(S.START_NS).to_numpy()[found]
    assert starts.min() < host_start < starts.max()


def test_tables_header_and_check_name_them(planted):
    path, truth = planted
    carried_rows = [i for i, c in enumerate(truth.activities["correlation"]) if c in set(truth.carried_in)]
    carried_ns = _durations(truth, carried_rows)
    busy_ns = _durations(truth, range(len(truth)))
    for by in ("op", "op_stack", "module", "annotation", "step"):
        table = traceattr.attribute(path, by=by, cache=False)
        row = table[table["key"] == "<carried in>"]
        assert row[S.COUNT].tolist() == [CARRIED] and row[S.SELF_NS].tolist() == [carried_ns], by
        assert int(table[S.SELF_NS].sum()) == busy_ns, by              # Σ self == busy, carried in included
    dropped = sum(1 for launch in truth.activities["launch"] if not launch) - CARRIED
    op = traceattr.attribute(path, by="op", cache=False)
    assert op.loc[op["key"] == "<unattributed>", S.COUNT].tolist() == [dropped]
    header = summary_report(str(path), by="op", cache=False).header
    assert header["carried in"] == (f"{CARRIED} kernels, {human_ns(carried_ns)} ({carried_ns:,} ns) "
                                    "(launched before the window)")
    assert header["busy_ns"] == busy_ns
    assert list(header).index("carried in") == list(header).index("busy_ns") + 1
    found = traceattr.check(path, cache=False).runs[0].findings
    row = found[found["check"] == "carried_in"]
    assert row[S.COUNT].tolist() == [CARRIED] and row["time_ns"].tolist() == [carried_ns]
    unlinked = found[found["check"] == "unlinked"]      # the mid-window drops only
    assert unlinked[S.COUNT].tolist() == [dropped]


def test_exclude_carried_in_leaves_them_out_of_every_total(planted):
    path, truth = planted
    kept = [i for i, c in enumerate(truth.activities["correlation"]) if c not in set(truth.carried_in)]
    busy_ns = _durations(truth, kept)
    for by in ("kernel", "op", "module", "step"):
        report = summary_report(str(path), by=by, cache=False, exclude_carried_in=True)
        table, header = report.table, report.header
        assert "<carried in>" not in set(table.get("key", table.get("name")).tolist()), by
        assert int(table[S.SELF_NS].sum()) == header["busy_ns"] == busy_ns, by
        assert header["activities"] == len(kept)
        assert "left out of every total (--exclude-carried-in)" in header["carried in"]
        assert header["check"] == "ok" or "carried" not in header["check"]
    api = traceattr.attribute(path, by="op", cache=False, exclude_carried_in=True)
    assert int(api[S.SELF_NS].sum()) == busy_ns
    assert int(traceattr.summarize(path, cache=False, exclude_carried_in=True)[S.SELF_NS].sum()) == busy_ns
    out = run_cli("summarize", path, "--by", "op", "--exclude-carried-in", "--no-cache", "-q")
    assert out.returncode == 0 and "left out of every total" in out.stdout, out.stderr


def _verdict(line: str) -> str:
    return line.split(":")[0].split()[0]


@pytest.mark.parametrize("spec", [
    dict(carried_in=40, dropped_records=0),      # carried in: a third of busy time, warn
    dict(carried_in=0, dropped_records=0),       # clean: ok
    dict(carried_in=0, dropped_records=3),       # CUPTI dropped records mid-window
], ids=["carried", "clean", "dropped"])
def test_every_header_says_the_verdict_check_gives(tmp_path, spec):
    """summarize said `check: ok` where check warned: its plans left the unlinked row out (the kernel
    levels drop the cpu ops the row needs). Every level's header now gives check's verdict."""
    path = tmp_path / "trace.json"
    write_trace(path, TraceSpec(**{**ONE_STREAM, **spec}))
    _same_verdicts(path)


def _same_verdicts(path) -> None:
    verdict = traceattr.check(path, cache=False).verdict
    for by in ("kernel", "category", "rank", "op", "module", "step"):
        header = summary_report(str(path), by=by, cache=False).header
        assert _verdict(header["check"]) == verdict, (by, header["check"], verdict)
    sides = compare_paths(path, path, check_lines=True, cache=False).attrs["check"]     # "A <line>; B <line>"
    assert [_verdict(side[2:]) for side in sides.split("; ")] == [verdict, verdict], sides


def test_shared_model_trace_with_kernels_from_before_the_window(tmp_path):
    """The MI300 Qwen trace: 463 kernels (13.3 ms of 43.1 ms busy) still running when the profiler
    started, all on one stream ahead of its first recorded launch. summarize said `check: ok`."""
    source = shared_trace("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    path = tmp_path / source.name
    shutil.copy(source, path)
    ts = traceattr.load(path, cache=False)
    found = carried_in(ts)
    corr = ts.device.column(S.CORRELATION).to_numpy()
    runtime = ts.host.filter(runtime_mask(ts.host.column(S.CATEGORY))).column(S.CORRELATION).to_numpy()
    # by hand: every dangling kernel of this trace lies below the first recorded correlation
    dangling = np.isin(corr, runtime, invert=True) & (corr >= 0)
    assert found.sum() == dangling.sum() == 463 and (corr[found] < runtime[runtime >= 0].min()).all()
    _same_verdicts(path)
    header = summary_report(str(path), by="op", cache=False).header
    assert header["carried in"].startswith("463 kernels, 13.3 ms")
    excluded = summary_report(str(path), by="kernel", cache=False, exclude_carried_in=True).header
    assert excluded["busy_ns"] == header["busy_ns"] - 13_318_864 and excluded["activities"] == 1517 - 463



def test_carried_in_work_is_a_finding_unless_left_out(planted):
    path, truth = planted
    carried_ns = sum(truth.activities["end_ns"][i] - truth.activities["start_ns"][i]
                     for i, c in enumerate(truth.activities["correlation"]) if c in set(truth.carried_in))
    shown = run_cli("summarize", path, "--no-cache", "--format", "csv")       # findings on stderr
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stderr.splitlines() if "carried in from before the window" in line)
    assert line.startswith("traceattr: finding: ") and human_ns(carried_ns) in line and f"{CARRIED} kernels" in line
    left_out = run_cli("summarize", path, "--no-cache", "--format", "csv", "--exclude-carried-in")
    assert "carried in from before the window" not in left_out.stderr


def test_a_correlation_recorded_only_in_another_file_still_dangles(tmp_path):
    """carried_in looks for each activity's runtime record in its own file: a kernel whose correlation id
    some other rank recorded is still carried in. The shortcut for a map step's one file (no id missing from
    the whole table, so none dangles) must not apply to a TraceSet of several files."""
    write_trace(tmp_path / "rank0.json", TraceSpec(carried_in=CARRIED, world_size=2, **ONE_STREAM))
    write_trace(tmp_path / "rank1.json", TraceSpec(world_size=2, **ONE_STREAM), rank=1)
    missing = {}            # per file: the correlation ids of its activities that no runtime record of it holds
    for rank in (0, 1):
        alone = traceattr.load(tmp_path / f"rank{rank}.json")
        corr = alone.device.column(S.CORRELATION).to_numpy()
        recorded = alone.host.column(S.CORRELATION).to_numpy()[runtime_mask(alone.host.column(S.CATEGORY))]
        missing[rank] = sorted(set(corr[(corr >= 0) & ~np.isin(corr, recorded)].tolist()))
    assert len(missing[0]) >= CARRIED
    # each rank records runtime calls with the other's missing ids (launches of its own, at its first one)
    for rank in (0, 1):
        trace = json.loads((tmp_path / f"rank{rank}.json").read_text())
        first = min((e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
        trace["traceEvents"] += [dict(first, args=dict(first["args"], correlation=i)) for i in missing[1 - rank]]
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(trace))
    both = traceattr.load(tmp_path)
    host_corr = both.host.column(S.CORRELATION).to_numpy()[runtime_mask(both.host.column(S.CATEGORY))]
    found = carried_in(both)
    rank = both.device.column(S.RANK).to_numpy()
    dev_corr = both.device.column(S.CORRELATION).to_numpy()
    assert np.isin(dev_corr[dev_corr >= 0], host_corr).all()       # every id was recorded, by some rank
    assert int(found[rank == 0].sum()) == CARRIED and not found[rank == 1].any()
