"""Negative times are ordinary times. A trace without baseTimeNanoseconds writes `ts` relative to the
profiler's start, and events recorded before it are negative: once a file whose first event was negative
checked "empty: N events, none with a time" and every header said `warn: empty` (-1 meant "no time"). The
same traces moved to any start, negative, straddling zero or ending at -1 ns, give the same tables, headers,
check findings, placement, alignment and runs as moved to positive times; only absolute times move."""

from __future__ import annotations

import json
import tempfile
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import traceattr
from traceattr import schema as S
from traceattr.builder import MultiRankSpec, TraceSpec, build_multirank, write_trace_set
from traceattr.errors import TraceDiscoveryError
from traceattr.io.cache import FileCache
from traceattr.io.decode import decode_file, placement_span
from traceattr.io.limits import TIME_LIMIT_NS
from traceattr.io.runs import SeveralRunsError
from traceattr.io.store import read_store, write_store
from traceattr.pipelines.check import check_runs
from traceattr.pipelines.summarize import summary_report
from tracesets import SMALL, assert_same, checked

POSITIVE_NS = 1_000_000            # the reference: the earliest event 1 ms after the profiler started
DAY_NS = 86_400 * 10**9
LEVELS = ("kernel", "category", "rank", "op", "step")


def relative_copy(src: Path, dst: Path, first_ns: int) -> Path:
    """Every trace under `src` copied to `dst` without baseTimeNanoseconds (relative times, as Kineto writes
    them without it), all moved by one amount so that the earliest start of their kept events is `first_ns`;
    exact (decimal µs: the written ns survive)."""
    files = sorted(Path(src).rglob("*.json"))
    data = {path: json.loads(path.read_text(), parse_float=Decimal) for path in files}
    timed = [Decimal(e["ts"]) for d in data.values() for e in d["traceEvents"] if "ts" in e and e.get("ph") != "M"]
    move = Decimal(first_ns) / 1000 - min(timed)
    for _ in range(2):        # instants and dropped categories may start earlier than the kept events: once more
        for path, trace in data.items():
            moved = dict(trace)
            moved.pop("baseTimeNanoseconds", None)
            moved["traceEvents"] = [dict(e, ts=float(Decimal(e["ts"]) + move)) if "ts" in e and e.get("ph") != "M"
                                    else e for e in trace["traceEvents"]]    # 3 decimals below 2**43 µs: exact
            out = Path(dst) / path.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(moved, default=float))
        starts = [decode_file(str(Path(dst) / path.relative_to(src))).start_ns for path in files]
        move += Decimal(first_ns - min(s for s in starts if s != S.NO_TIME)) / 1000
    assert min(s for s in starts if s != S.NO_TIME) == first_ns
    return Path(dst)


def answers(path: Path, levels=LEVELS) -> dict:
    """Per level: the table and the header (paths in notes made relative) of the per-file map-reduce;
    `check`: the map-reduce's findings and verdict and the findings of the same files loaded as a TraceSet (paths as names)."""
    found = {}
    for by in levels:
        report = summary_report(str(path), by=by, cache=False, jobs=1)
        header = dict(report.header, notes=[note.replace(str(path), "<root>") for note in report.header["notes"]])
        found[by] = (report.table.reset_index(drop=True), header)
    (run,), verdict = check_runs(str(path), cache=False, jobs=1)
    found["check"] = (_named(run.report.findings), verdict,
                      _named(checked(traceattr.load(path, cache=False, jobs=1)).findings))
    return found


def _named(findings: pd.DataFrame) -> pd.DataFrame:
    return findings.assign(**{S.PATH: findings[S.PATH].map(lambda p: Path(p).name)}).reset_index(drop=True)


def assert_same_answers(got: dict, want: dict, moved_columns: dict[str, tuple[str, ...]] = {}) -> None:
    assert got.keys() == want.keys()
    for key in want:
        if key == "check":
            (mapped, verdict, memory), (want_mapped, want_verdict, want_memory) = got[key], want[key]
            pd.testing.assert_frame_equal(mapped, want_mapped)
            pd.testing.assert_frame_equal(memory, want_memory)
            assert verdict == want_verdict
            assert "empty" not in set(mapped.loc[mapped["count"] > 0, "check"]), mapped
            continue
        (table, header), (want_table, want_header) = got[key], want[key]
        moved = moved_columns.get(key, ())
        pd.testing.assert_frame_equal(table.drop(columns=list(moved)), want_table.drop(columns=list(moved)))
        assert header == want_header
        assert "empty" not in header.get("check", ""), header["check"]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> tuple[Path, dict, int]:
    """(the builder's one-rank trace, the answers of its relative copy at POSITIVE_NS, its span in ns)."""
    root = tmp_path_factory.mktemp("one_rank")
    write_trace_set(root / "src", TraceSpec(seed=5, **SMALL))
    positive = relative_copy(root / "src", root / "positive", POSITIVE_NS)
    [file] = positive.glob("*.json")
    decoded = decode_file(str(file))
    assert decoded.era == S.ERA_RELATIVE and decoded.start_ns == POSITIVE_NS
    return root / "src", answers(positive), decoded.end_ns - decoded.start_ns


@pytest.mark.parametrize("where", ["at_minus_1", "ends_at_minus_1", "straddles_zero", "days_before"])
def test_one_rank_at_negative_times_answers_as_at_positive_times(one_rank, tmp_path, where):
    """Every level, its header (no `warn: empty`) and check, on the map-reduce and in memory; -1 ns (the old
    'no time') as the first start and as the last end."""
    src, want, span = one_rank
    first = {"at_minus_1": -1, "ends_at_minus_1": -1 - span, "straddles_zero": -span // 2,
             "days_before": -30 * DAY_NS}[where]
    moved = relative_copy(src, tmp_path / where, first)
    [file] = moved.glob("*.json")
    decoded = decode_file(str(file))
    assert (decoded.start_ns, decoded.end_ns) == (first, first + span)
    assert placement_span(decoded)[0] < 0 and decoded.host_start_ns != S.NO_TIME
    assert_same_answers(answers(moved), want)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# within ±2**43 µs, where a float µs with 3 decimals holds every ns (relative_copy writes floats); beyond,
# the copy itself loses ns (a 1 ns self_ns difference at 9.99e15 ns was the float, not traceattr)
@given(first=st.integers(-8 * 10**15, 8 * 10**15))
@example(first=-1)
def test_any_shift_gives_the_same_rank_and_kernel_tables_and_check(one_rank, first):
    src, want, _ = one_rank
    with tempfile.TemporaryDirectory(dir=src.parent) as folder:
        moved = relative_copy(src, Path(folder) / "moved", first)
        assert_same_answers(answers(moved, levels=("kernel", "rank")), {k: want[k] for k in ("kernel", "rank", "check")})


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """Two ranks whose clocks differ by 300 µs, rank 1 late to every allreduce by 50 µs of extra compute."""
    root = tmp_path_factory.mktemp("two_ranks")
    build_multirank(MultiRankSpec(ranks=2, steps=2, clock_offset_ns={1: 300_000}, extra_compute_ns={1: 50_000}),
                    root / "src")
    return root / "src"


def test_two_ranks_at_negative_times_place_align_and_match_collectives_as_at_positive(two_ranks, tmp_path):
    positive = relative_copy(two_ranks, tmp_path / "positive", POSITIVE_NS)
    levels = ("kernel", "rank", "collective")
    want = answers(positive, levels)
    straggler = traceattr.imbalance(str(positive), cache=False, jobs=1)
    for first in (-DAY_NS, -1, -150_000):                # all before the start, from -1 ns, across zero
        moved = relative_copy(two_ranks, tmp_path / f"moved{first}", first)
        got = answers(moved, levels)
        # a collective's instance starts are absolute times: moved by exactly the shift, all else the same
        absolute = ["first_start_ns", "last_start_ns"]
        shifted = got["collective"][0][absolute] + (POSITIVE_NS - first)
        pd.testing.assert_frame_equal(shifted, want["collective"][0][absolute])
        assert_same_answers(got, want, moved_columns={"collective": tuple(absolute)})
        rank = got["rank"][0].set_index(S.RANK)
        assert rank.loc[1, "late_arrivals"] == 2 and rank.loc[1, "clock_offset_ns"] != 0
        files = traceattr.load(moved, cache=False, jobs=1).files
        assert files.column(S.RANK).to_pylist() == [0, 1] and files.column(S.WINDOW).to_pylist() == [0, 0]
        assert pc.min(files.column(S.START_NS)).as_py() == first
        found = traceattr.imbalance(str(moved), cache=False, jobs=1)
        assert found.rank == 1 and [getattr(found, k) for k in ("wait_caused_ns", "late_arrivals", "cause", "deltas")] \
            == [getattr(straggler, k) for k in ("wait_caused_ns", "late_arrivals", "cause", "deltas")]


def test_runs_days_apart_at_negative_times_are_split_as_at_positive(two_ranks, tmp_path):
    """Two copies of one job two days apart are two runs wherever the times lie (once, at negative times,
    the far-apart rule was skipped and the copies merged into one run of two windows per rank)."""
    for first in (POSITIVE_NS, -5 * DAY_NS):
        root = tmp_path / f"at{first}"
        relative_copy(two_ranks, root / "a", first)
        relative_copy(two_ranks, root / "b", first + 2 * DAY_NS)
        with pytest.raises(SeveralRunsError):
            traceattr.load(root, cache=False, jobs=1)


def test_one_rank_recorded_twice_at_once_is_refused_at_negative_times_too(two_ranks, tmp_path):
    """Two files of one rank whose windows overlap are the same capture twice, also before the start."""
    for first in (POSITIVE_NS, -DAY_NS):
        root = relative_copy(two_ranks, tmp_path / f"at{first}", first)
        (root / "rank1.pt.trace.json").unlink()
        again = root / "rank0_again.pt.trace.json"
        trace = json.loads((root / "rank0.pt.trace.json").read_text())
        for event in trace["traceEvents"]:
            if "ts" in event and event.get("ph") != "M":
                event["ts"] += 20.0             # 20 µs later: the windows overlap
        again.write_text(json.dumps(trace))
        with pytest.raises(TraceDiscoveryError, match="overlap in time for rank 0"):
            traceattr.load(root, cache=False, jobs=1)


@pytest.fixture
def with_an_empty_rank(two_ranks, tmp_path) -> Path:
    """The two ranks at negative times, rank 1's file holding only its metadata events (nothing timed)."""
    root = relative_copy(two_ranks, tmp_path / "traces", -DAY_NS)
    path = root / "rank1.pt.trace.json"
    trace = json.loads(path.read_text())
    trace["traceEvents"] = [event for event in trace["traceEvents"] if event.get("ph") == "M"]
    path.write_text(json.dumps(trace))
    return root


def test_a_file_without_timed_events_is_still_the_only_empty_one(with_an_empty_rank):
    root = with_an_empty_rank
    timed = decode_file(str(root / "rank0.pt.trace.json"))
    untimed = decode_file(str(root / "rank1.pt.trace.json"))
    assert timed.end_ns < 0 and (untimed.start_ns, untimed.end_ns) == (S.NO_TIME, S.NO_TIME)
    assert placement_span(untimed) == (S.NO_TIME, S.NO_TIME)
    (run,), verdict = check_runs(str(root), cache=False, jobs=1)
    for findings in (run.report.findings, checked(traceattr.load(root, cache=False, jobs=1)).findings):
        empty = findings[(findings["check"] == "empty") & (findings["count"] > 0)]
        assert [Path(p).name for p in empty[S.PATH]] == ["rank1.pt.trace.json"], findings
    header = summary_report(str(root), by="rank", cache=False, jobs=1).header
    assert "empty (1)" in header["check"]
    assert header["span_ns"] == header["window_ns"] == timed.end_ns - timed.start_ns    # NO_TIME stretches nothing


def test_the_store_and_the_cache_keep_negative_and_missing_times(with_an_empty_rank, tmp_path):
    root = with_an_empty_rank
    loaded = traceattr.load(root, cache=False, jobs=1)
    starts = loaded.files.column(S.START_NS).to_pylist()
    assert starts[0] < 0 and starts[1] == S.NO_TIME
    stored = read_store(write_store(loaded, tmp_path / "store"))
    assert_same(stored, loaded)
    want = summary_report(str(root), by="rank", cache=False, jobs=1)
    got = summary_report(str(tmp_path / "store"), by="rank", cache=False, jobs=1)
    pd.testing.assert_frame_equal(got.table, want.table)
    assert got.header["check"] == want.header["check"] and got.header["span_ns"] == want.header["span_ns"]
    for name in ("rank0.pt.trace.json", "rank1.pt.trace.json"):
        path = str(root / name)
        cache = FileCache(tmp_path / "cache")
        assert cache.get(path) is None
        decoded = decode_file(path)
        cache.put(path, decoded)
        again = FileCache(tmp_path / "cache")
        served = again.get(path)
        assert again.hits == 1 and (served.start_ns, served.end_ns, served.host_start_ns, served.host_end_ns) == \
            (decoded.start_ns, decoded.end_ns, decoded.host_start_ns, decoded.host_end_ns)


def test_no_time_lies_beyond_every_time_and_its_differences_fit_int64():
    assert S.NO_TIME < -TIME_LIMIT_NS
    assert -(2**63) <= S.NO_TIME - TIME_LIMIT_NS and TIME_LIMIT_NS - S.NO_TIME < 2**63
