"""Exact µs -> ns conversion: era C (floor plus fraction) and era B (decimals), checked through the
real decoder so the JSON text -> ns path is covered, not just the arithmetic."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from traceattr import schema as S
from traceattr.io.decode import decode_file
from traceattr.io.timeconv import float_us_to_ns

# relative era-C values stay below 7.9e12 µs (kineto-format.md 3.2)
relative_ns = st.integers(min_value=0, max_value=7_900_000_000_000_000)
absolute_ns = st.integers(min_value=1_000_000_000_000_000_000, max_value=2_000_000_000_000_000_000)


def _us_text(ns: int) -> str:
    """How kineto prints ns as µs: `{ns // 1000}.{ns % 1000:03}`."""
    return f"{ns // 1000}.{ns % 1000:03}"


def _write_trace(tmp_path, pairs, header: str) -> str:
    events = ",".join(
        f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {_us_text(ts)}, '
        f'"dur": {_us_text(dur)}}}' for ts, dur in pairs)
    path = tmp_path / "rank0.json"
    path.write_text(f'{{{header}"traceEvents": [{events}]}}')
    return str(path)


def test_naive_rounding_is_wrong_where_the_recipe_is_right():
    """The premise: values exist where rint(ts*1000) misses and the recipe does not."""
    ns = np.arange(4_458_676_522_690_000, 4_458_676_522_690_000 + 20_000, 1, dtype=np.int64)
    us = np.array([float(_us_text(int(v))) for v in ns])
    assert np.any(np.rint(us * 1000).astype(np.int64) != ns)
    assert np.array_equal(float_us_to_ns(us), ns)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(relative_ns, st.integers(0, 10**12)), min_size=1, max_size=40))
@example([(4_458_676_522_690_655, 63_813)])
def test_era_c_exact(tmp_path_factory, pairs):
    base = 1_790_857_026_000_000_000
    path = _write_trace(tmp_path_factory.mktemp("c"), pairs, f'"baseTimeNanoseconds": {base}, ')
    decoded = decode_file(path)
    assert decoded.era == S.ERA_C and decoded.base_time_ns == base
    start = decoded.device.column(S.START_NS).to_pylist()
    end = decoded.device.column(S.END_NS).to_pylist()
    assert start == [base + ts for ts, _ in pairs]
    assert [e - s for s, e in zip(start, end)] == [dur for _, dur in pairs]


@settings(max_examples=40, deadline=None)
@given(absolute_ns, st.lists(st.tuples(st.integers(0, 10**15), st.integers(0, 10**9)), min_size=1, max_size=40),
       st.booleans())
@example(1_712_195_495_519_689_047, [(0, 63_813)], True)
def test_era_b_exact(tmp_path_factory, origin, offsets, with_unit):
    # times anywhere in the epoch range, but one file spans at most 11.6 days here (a file over 104 days is
    # refused: io/limits.FILE_SUM_LIMIT_NS); with or without displayTimeUnit "ns": one value with sub-µs
    # digits marks the file as era B
    pairs = [(origin + offset, dur) for offset, dur in offsets] + [(origin - origin % 1000 + 1, 1)]
    header = '"displayTimeUnit": "ns", ' if with_unit else ""
    path = _write_trace(tmp_path_factory.mktemp("b"), pairs, header)
    decoded = decode_file(path)
    assert decoded.era == S.ERA_B and decoded.base_time_ns == 0
    start = decoded.device.column(S.START_NS).to_pylist()
    end = decoded.device.column(S.END_NS).to_pylist()
    assert start == [ts for ts, _ in pairs]
    assert [e - s for s, e in zip(start, end)] == [dur for _, dur in pairs]


def test_era_a_and_relative_without_base(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1695835542514261, "dur": 68.0}]}))
    decoded = decode_file(str(path))
    assert decoded.era == S.ERA_A
    assert decoded.device.column(S.START_NS).to_pylist() == [1695835542514261000]
    assert decoded.device.column(S.END_NS).to_pylist() == [1695835542514261000 + 68000]
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.5, "dur": 1}]}))
    decoded = decode_file(str(path))
    assert decoded.era == S.ERA_RELATIVE and decoded.base_time_ns == 0
    assert decoded.device.column(S.START_NS).to_pylist() == [12500]
    assert any("relative timestamps" in note for note in decoded.notes)
