"""The exact sweep against a brute-force reference in plain Python with Fractions."""

from __future__ import annotations

import gc
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceattr import schema as S
from traceattr.attribution import columns as C
from traceattr.attribution.sweep import GROUP_COLUMNS, sweep
from traceattr.errors import TraceError
from traceattr.model.traceset import TraceSet
from reference import union_ns


# --- building TraceSets straight from rows (shared with test_summarize / test_cli) -----------------

def make_traceset(activities, windows=None, notes=()) -> TraceSet:
    """activities: dicts with rank, window, device, stream, name, category, start_ns, end_ns.
    windows: {(rank, window): (start_ns, end_ns)}; by default each spans its activities plus 100 ns."""
    device = pa.Table.from_pylist([
        {S.CORRELATION: -1, S.EXTERNAL_ID: -1, S.BYTES: -1, S.COLLECTIVE: "", **a} for a in activities],
        schema=S.DEVICE_SCHEMA)
    if windows is None:
        windows = {}
        for a in activities:
            key = (a[S.RANK], a[S.WINDOW])
            lo, hi = windows.get(key, (a[S.START_NS], a[S.END_NS]))
            windows[key] = (min(lo, a[S.START_NS]), max(hi, a[S.END_NS] + 100))
    files = pa.Table.from_pylist([
        {S.RANK: r, S.WINDOW: w, S.PATH: f"rank{r}.{w}.pt.trace.json", S.WORLD_SIZE: -1,
         S.RANK_SOURCE: S.RANK_FROM_NAME, S.ERA: S.ERA_C, S.BASE_TIME_NS: 0, S.START_NS: lo, S.END_NS: hi,
         S.EVENTS: 0, S.NEGATIVE_DURATIONS: 0, S.ABSURD_DURATIONS: 0, S.DEVICE_PROPERTIES: "[]",
         S.METADATA: "{}"} for (r, w), (lo, hi) in sorted(windows.items())], schema=S.FILE_SCHEMA)
    return TraceSet(device, S.HOST_SCHEMA.empty_table(), S.MARKER_SCHEMA.empty_table(), files, tuple(notes))


def activity(start, end, *, rank=0, window=0, device=0, stream=7, name="k", category=S.COMPUTE):
    return {S.RANK: rank, S.WINDOW: window, S.DEVICE: device, S.STREAM: stream, S.NAME: name,
            S.CATEGORY: category, S.START_NS: start, S.END_NS: end}


# --- brute-force reference ---------------------------------------------------------------------

def reference(activities):
    """Exact self/solo per activity and per-group facts, by enumerating elementary segments."""
    exact_self = [Fraction(0)] * len(activities)
    solo = [0] * len(activities)
    groups = defaultdict(list)
    for i, a in enumerate(activities):
        groups[(a[S.RANK], a[S.WINDOW], a[S.DEVICE])].append(i)
    facts = {}
    for key, members in groups.items():
        points = sorted({activities[i][S.START_NS] for i in members} | {activities[i][S.END_NS] for i in members})
        busy = exposed = communicating = max_k = 0
        alone = dict.fromkeys(S.DEVICE_CATEGORIES, 0)     # time each category ran with no other category
        for lo, hi in zip(points, points[1:]):
            running = [i for i in members if activities[i][S.START_NS] <= lo and activities[i][S.END_NS] >= hi]
            if not running:
                continue
            busy += hi - lo
            max_k = max(max_k, len(running))
            cats = {activities[i][S.CATEGORY] for i in running}
            if S.COMMUNICATION in cats and S.COMPUTE not in cats:
                exposed += hi - lo
            if S.COMMUNICATION in cats:
                communicating += hi - lo
            if len(cats) == 1:
                alone[cats.pop()] += hi - lo
            for i in running:
                exact_self[i] += Fraction(hi - lo, len(running))
                if len(running) == 1:
                    solo[i] += hi - lo
        stream_union = sum(union_ns((activities[i][S.START_NS], activities[i][S.END_NS])
                                    for i in members if activities[i][S.STREAM] == stream)
                           for stream in {activities[i][S.STREAM] for i in members})
        duration = sum(activities[i][S.END_NS] - activities[i][S.START_NS] for i in members)
        facts[key] = {S.BUSY_NS: busy, S.EXPOSED_COMMUNICATION_NS: exposed, C.MAX_CONCURRENCY: max_k,
                      S.DURATION_NS: duration, S.ACTIVITIES: len(members),
                      C.SAME_STREAM_OVERLAP_NS: duration - stream_union,
                      C.COMMUNICATION_RUNNING_NS: communicating,
                      **{C.EXPOSED_NS[name]: ns for name, ns in alone.items()}}
    return exact_self, solo, facts


def check_against_reference(activities):
    ts = make_traceset(activities)
    result = sweep(ts)
    result.self_check()
    exact_self, solo, facts = reference(activities)
    assert result.self_ns.dtype == np.int64 and result.solo_ns.dtype == np.int64
    for i, exact in enumerate(exact_self):
        assert abs(result.self_ns[i] - exact) < 1, (i, result.self_ns[i], exact)
    assert result.solo_ns.tolist() == solo
    assert len(result.groups) == len(facts)
    for row in result.groups.to_dict("records"):
        expected = facts[(row[S.RANK], row[S.WINDOW], row[S.DEVICE])]
        for name, value in expected.items():
            assert row[name] == value, (name, row, expected)
        members = result.group_id == result.groups.index[
            (result.groups[S.RANK] == row[S.RANK]) & (result.groups[S.WINDOW] == row[S.WINDOW])
            & (result.groups[S.DEVICE] == row[S.DEVICE])][0]
        assert int(result.self_ns[members].sum()) == row[S.BUSY_NS]
        assert row[S.OVERLAP_NS] == row[S.DURATION_NS] - row[S.BUSY_NS]
        assert row[S.IDLE_NS] == row[S.WINDOW_NS] - row[S.BUSY_NS]
    return result


# --- property tests ----------------------------------------------------------------------------

interval = st.tuples(
    st.integers(0, 3),                    # rank/window/device group selector
    st.integers(0, 60), st.integers(0, 25),
    st.sampled_from([7, 8, 20]),
    st.sampled_from(S.DEVICE_CATEGORIES))


@settings(max_examples=150, deadline=None)
@given(st.lists(interval, min_size=1, max_size=25), st.data())
def test_matches_brute_force(specs, data):
    activities = []
    for group, start, length, stream, category in specs:
        # duplicate an earlier interval now and then so identical intervals and ties are common
        if activities and data.draw(st.booleans()):
            twin = activities[data.draw(st.integers(0, len(activities) - 1))]
            start, length = twin[S.START_NS], twin[S.END_NS] - twin[S.START_NS]
        activities.append(activity(start, start + length, rank=group % 2, window=group // 2 % 2,
                                   device=group // 2, stream=stream, category=category))
    check_against_reference(activities)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-10**6, 10**6), st.integers(0, 10**6)), min_size=1, max_size=30))
def test_absolute_epoch_ns_stay_exact(specs):
    base = 1_790_857_026_000_000_000          # real era-C base: float64 could not hold these
    check_against_reference([activity(base + s, base + s + d, stream=7 + i % 3) for i, (s, d) in enumerate(specs)])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 2**40, 2**61, 2**62]), st.integers(0, 50),
                          st.integers(0, 30), st.sampled_from([7, 8])), min_size=1, max_size=20))
def test_time_spans_too_wide_for_packed_keys(specs):
    """Activities 2**62 ns apart: the points' packed sort key and the streams' lifted time line overflow
    int64, so the sweep takes its lexsort and per-stream sweep paths; the same exact answers."""
    check_against_reference([activity(far + start, far + start + length, rank=group % 2, device=group // 2,
                                      stream=stream, category=S.COMMUNICATION if stream == 8 else S.COMPUTE)
                             for group, far, start, length, stream in specs])


# --- targeted cases ----------------------------------------------------------------------------

def test_fair_share_rounding_hands_out_the_leftover_by_largest_remainder():
    # three identical 10 ns kernels: 10/3 each -> 4, 3, 3 (ties by row order), summing to busy 10
    result = check_against_reference([activity(0, 10), activity(0, 10, stream=8), activity(0, 10, stream=20)])
    assert result.self_ns.tolist() == [4, 3, 3]
    assert result.groups[C.SAME_STREAM_OVERLAP_NS].tolist() == [0]
    assert result.groups[C.MAX_CONCURRENCY].tolist() == [3]


def largest_remainder(exact: list[Fraction], busy: int) -> list[int]:
    """The module's rule, from its docstring: each share's floor, then the leftover R = busy − Σ floor goes one
    ns each to the R shares with the largest remainders (ties by row order)."""
    whole = [math.floor(x) for x in exact]
    leftover = busy - sum(whole)
    assert 0 <= leftover < len(exact)
    for i in sorted(range(len(exact)), key=lambda i: (-(exact[i] - whole[i]), i))[:leftover]:
        whole[i] += 1
    return whole


def test_leftover_ns_go_to_the_largest_unequal_remainders():
    """Unequal fractions, the largest ones not on the first rows: giving the leftover to the smallest
    remainders (or by row order) still leaves every share within 1 ns of exact, which the brute-force
    check allows; only the exact integers catch it."""
    # device 0: exact shares 151/30, 6/5, 9/20, 107/60, 68/15 (remainders 1/30, 1/5, 9/20, 47/60, 8/15),
    # busy 13, floors sum to 11: the 2 leftover ns go to rows 3 and 4
    zero = [(1, 11), (8, 12), (9, 11), (4, 10), (4, 14)]
    # device 1: exact 49/6, 7/6, 2/3 (remainders 1/6, 1/6, 2/3), busy 10, floors 9: the 1 ns goes to the last
    one = [(0, 10), (0, 3), (0, 2)]
    rows = [(0, *iv) for iv in zero] + [(1, *iv) for iv in one]
    order = [5, 0, 6, 1, 2, 7, 3, 4]                       # the devices' rows interleaved
    activities = [activity(rows[i][1], rows[i][2], device=rows[i][0], stream=10 + j) for j, i in enumerate(order)]
    result = check_against_reference(activities)

    exact_self, _, facts = reference(activities)
    expected = [0] * len(activities)
    for device in (0, 1):
        members = [j for j, a in enumerate(activities) if a[S.DEVICE] == device]
        busy = facts[(0, 0, device)][S.BUSY_NS]
        for j, share in zip(members, largest_remainder([exact_self[j] for j in members], busy)):
            expected[j] = share
    assert [exact_self[order.index(i)] for i in range(5)] == [Fraction(151, 30), Fraction(6, 5), Fraction(9, 20),
                                                              Fraction(107, 60), Fraction(68, 15)]
    by_row = dict(zip(order, result.self_ns.tolist()))
    assert [by_row[i] for i in range(8)] == [5, 1, 0, 2, 5, 8, 1, 1]
    assert result.self_ns.tolist() == expected


def test_zero_length_and_nested_activities():
    result = check_against_reference([
        activity(0, 100), activity(10, 20, stream=8), activity(50, 50, stream=8), activity(100, 100)])
    assert result.self_ns.tolist() == [95, 5, 0, 0]
    assert result.solo_ns.tolist() == [90, 0, 0, 0]


def test_only_zero_length_activities():
    result = check_against_reference([activity(5, 5), activity(5, 5, stream=8)])
    assert result.self_ns.tolist() == [0, 0]
    assert result.groups[S.BUSY_NS].tolist() == [0]


def test_deep_concurrency_uses_exact_big_integer_fractions():
    # 45 nested intervals: concurrency levels 1..45, lcm(1..45) does not fit in int64
    activities = [activity(i, 1000 - 7 * i, stream=i) for i in range(45)]
    result = check_against_reference(activities)
    assert result.groups[C.MAX_CONCURRENCY].tolist() == [45]


def test_huge_time_spans_take_the_exact_fallback_paths():
    # times ~2^61 apart cannot be packed into one int64 sort key: the lexsort / sweep fallbacks must agree
    far = 2 ** 61
    check_against_reference([activity(0, 10), activity(5, 15, stream=8), activity(far, far + 7, stream=8),
                             activity(far + 3, far + 9, stream=9), activity(far + 3, far + 9, stream=9),
                             activity(0, 4, device=1), activity(far, far + 4, device=1, stream=9)])


def test_same_stream_overlap_is_measured_not_hidden():
    # µs-era rounding: back-to-back kernels on one stream that overlap by 1000 ns
    result = check_against_reference([activity(0, 5000), activity(4000, 9000), activity(0, 3000, stream=8)])
    assert result.groups[C.SAME_STREAM_OVERLAP_NS].tolist() == [1000]


def test_exposed_communication():
    result = check_against_reference([
        activity(0, 100, category=S.COMPUTE), activity(50, 200, stream=20, category=S.COMMUNICATION),
        activity(150, 180, stream=8, category=S.MEMCPY)])
    assert result.groups[S.EXPOSED_COMMUNICATION_NS].tolist() == [100]


def test_exposed_time_per_category_is_time_no_other_category_hides():
    """compute 0-100, communication 50-200, memcpy 150-180, a second compute 300-400, two memsets
    overlapping each other 500-560 and 520-600: alone are compute 0-50 and 300-400, communication 100-150
    and 180-200, memset 500-600 (memsets hide one another, not themselves); memcpy never runs alone.
    Communication without compute (100-200) is wider: memcpy may run beside it."""
    result = check_against_reference([
        activity(0, 100, category=S.COMPUTE), activity(50, 200, stream=20, category=S.COMMUNICATION),
        activity(150, 180, stream=8, category=S.MEMCPY), activity(300, 400, category=S.COMPUTE),
        activity(500, 560, stream=8, category=S.MEMSET), activity(520, 600, stream=9, category=S.MEMSET)])
    row = result.groups.iloc[0]
    assert [row[C.EXPOSED_NS[name]] for name in S.DEVICE_CATEGORIES] == [150, 70, 0, 100]
    assert row[S.EXPOSED_COMMUNICATION_NS] == 100 and row[C.COMMUNICATION_RUNNING_NS] == 150


def test_exposed_time_may_pass_the_rounded_self_time_by_less_than_an_activity_ns():
    """Two memsets share 2..5: each exact share is 1.5 ns, rounded to 1 and 2 or, as here with a third
    category taking the leftover, both down; the memsets' exposed time is 3 ns whatever the rounding."""
    result = check_against_reference([
        activity(0, 2, category=S.MEMCPY), activity(0, 1), activity(2, 5, stream=8, category=S.MEMSET),
        activity(2, 5, stream=9, category=S.MEMSET)])
    row = result.groups.iloc[0]
    assert row[C.EXPOSED_NS[S.MEMSET]] == 3 and 3 - row[C.MEMSET_NS] < 2


def test_one_category_is_exposed_whenever_it_runs():
    result = check_against_reference([activity(0, 100), activity(50, 120, stream=8), activity(200, 210)])
    assert result.groups[C.EXPOSED_NS[S.COMPUTE]].tolist() == [130] == result.groups[S.BUSY_NS].tolist()


def test_groups_columns_and_dtypes():
    result = sweep(make_traceset([activity(0, 10), activity(0, 10, rank=1, device=1)]))
    assert list(result.groups.columns) == GROUP_COLUMNS
    assert all(dtype == np.int64 for dtype in result.groups.dtypes)
    assert result.groups[S.RANK].tolist() == [0, 1]


def test_empty_device_table():
    result = sweep(TraceSet.empty())
    result.self_check()
    assert len(result.self_ns) == 0 and len(result.groups) == 0
    assert list(result.groups.columns) == GROUP_COLUMNS


def test_cached_per_traceset_and_released_with_it():
    from traceattr.attribution import sweep as sweep_module
    ts = make_traceset([activity(0, 10)])
    assert sweep(ts) is sweep(ts)
    assert sweep(make_traceset([activity(0, 10)])) is not sweep(ts)
    before = len(sweep_module._CACHE)
    del ts
    gc.collect()
    assert len(sweep_module._CACHE) < before


def test_bad_tables_raise_trace_errors():
    with pytest.raises(TraceError, match="categories"):
        sweep(make_traceset([activity(0, 10, category="gpu_user_annotation")]))
    with pytest.raises(TraceError, match="end before they start"):
        sweep(make_traceset([activity(10, 5)], windows={(0, 0): (0, 20)}))
    with pytest.raises(TraceError, match="no file row"):
        sweep(make_traceset([activity(0, 10, window=3)], windows={(0, 0): (0, 20)}))


def test_self_check_catches_a_broken_result():
    result = sweep(make_traceset([activity(0, 10), activity(5, 15, stream=8)]))
    result.self_ns[0] += 1              # a one-nanosecond leak must not pass
    with pytest.raises(TraceError, match="conservation"):
        result.self_check()


def test_large_input_is_vectorized_and_exact():
    rng = np.random.default_rng(7)
    n = 200_000
    start = rng.integers(0, 10**9, n)
    end = start + rng.integers(0, 20_000, n)
    device = pa.table({
        S.RANK: pa.array(rng.integers(0, 2, n), pa.int32()), S.WINDOW: pa.array(np.zeros(n, np.int32)),
        S.DEVICE: rng.integers(0, 2, n), S.STREAM: rng.integers(0, 4, n), S.NAME: ["k"] * n,
        S.CATEGORY: [S.DEVICE_CATEGORIES[i] for i in rng.integers(0, 4, n)],
        S.START_NS: start, S.END_NS: end, S.CORRELATION: np.full(n, -1), S.EXTERNAL_ID: np.full(n, -1),
        S.BYTES: np.full(n, -1), S.COLLECTIVE: [""] * n, S.PROCESS_GROUP: [""] * n, S.GROUP_RANKS: [""] * n,
        **{name: np.full(n, -1) for name in (S.SEQ, S.COMM_BYTES, S.SRC_RANK, S.DST_RANK, S.GROUP_SIZE,
                                             S.GRAPH_ID, S.GRAPH_NODE_ID)}},
        schema=S.DEVICE_SCHEMA)
    files = make_traceset([activity(0, 10**9 + 20_000, rank=r) for r in (0, 1)]).files
    result = sweep(TraceSet(device, S.HOST_SCHEMA.empty_table(), S.MARKER_SCHEMA.empty_table(), files))
    result.self_check()
    # independent union per group: merge sorted intervals in numpy
    for g, row in result.groups.iterrows():
        members = result.group_id == g
        s, e = np.sort(start[members]), end[members][np.argsort(start[members], kind="stable")]
        reach = np.maximum.accumulate(e)
        gaps = np.maximum(s[1:] - reach[:-1], 0).sum()
        assert row[S.BUSY_NS] == reach[-1] - s[0] - gaps
    assert math.isclose(result.self_ns.sum(), result.groups[S.BUSY_NS].sum(), rel_tol=0)
