"""A file's timestamp era told from its one read (issue 35 point 3): decode_file reads a trace of any era
once, keeping the first 4 MB of its text for the era-A check and switching to exact (Decimal) times at the
first chunk with complete events when that chunk already shows era B. Its era and tables are those of the reference below, which
decides the era from the whole file first (every event, the text's first 4 MB) and then decodes an era-B
file again exactly: the way decode_file worked before, reading an era-A file twice and an era-B one twice.
Only files whose first chunk does not show their era (era-B evidence later, or a base after it) are read
again."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from traceattr import schema as S
from traceattr.builder import TraceSpec, write_trace
from traceattr.io import decode as decode_module
from traceattr.io.columns import ColumnCollector
from traceattr.io.decode import decode_file
from traceattr.io.events import EventsDecoder
from traceattr.io.header import read_header
from traceattr.io.splitter import stream_events
from traceattr.io.timeconv import detect_era

from conftest import shared_trace

EPOCH_NS = 1_712_195_495_519_689_000        # April 2024, µs-aligned
SMALL = dict(layers=2, ops_per_module=1, kernels_per_op=2, steps=2)
BLOCK = 1 << 12                             # several chunks even in a small file


def reference(path: str, block_bytes: int) -> tuple[str, tuple]:
    """(era, (device, host, markers)) deciding the era from the whole file, then decoding again for era B."""
    collector = ColumnCollector(path)
    facts = read_header(path, stream_events(path, collector.add, decoder=EventsDecoder(exact_decimal=False),
                                            block_bytes=block_bytes))
    era = detect_era(has_base=facts.base_time_ns is not None, display_unit=facts.display_unit,
                     max_ts_us=None if collector.max_ts_us == -np.inf else collector.max_ts_us,
                     fractional_absolute=collector.fractional_absolute_ts)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        head = handle.read(4 << 20)
    if era == S.ERA_A and decode_module._SUB_US_NUMBER.search(head):
        era = S.ERA_B
    if era == S.ERA_B:
        collector = ColumnCollector(path, exact_decimal=True)
        stream_events(path, collector.add, decoder=EventsDecoder(exact_decimal=True), block_bytes=block_bytes)
    return era, collector.tables(facts.base_time_ns or 0)[:3]


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03}"


def _kernel(ts: str, dur: str, index: int) -> str:
    return (f'{{"ph": "X", "cat": "kernel", "name": "k{index % 3}", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
            f'"args": {{"correlation": {index}}}}}')


def _hand_made(path, times: list[tuple[str, str]], before: str = "", after: str = "") -> str:
    events = ", ".join(_kernel(ts, dur, i) for i, (ts, dur) in enumerate(times))
    path.write_text(f'{{{before}"traceEvents": [{events}]{after}}}')
    return str(path)


def _whole_us(count: int) -> list[tuple[str, str]]:
    return [(_us(EPOCH_NS + i * 5_000), _us(3_000)) for i in range(count)]


HAND_MADE = {
    # era B whose first chunk writes whole µs (`.000`): its fractions come later, so it is read again
    "era B, fractions after the first chunk": (lambda p: _hand_made(p, _whole_us(400) + [(_us(EPOCH_NS + 9_000_047), "1.5")]), 2),
    # fractions float64 rounds away at epoch scale (< 0.125 µs): only the text shows them
    "era B, fractions below 0.125 us": (lambda p: _hand_made(p, [(_us(EPOCH_NS + i * 5_000 + 47), "3.000")
                                                                 for i in range(50)]), 2),
    # displayTimeUnit ns after the events, whole µs written: era B from the header alone
    "era B, unit after the events": (lambda p: _hand_made(p, _whole_us(50), after=', "displayTimeUnit": "ns"'), 2),
    # era-B-looking first chunk, then a base after the events: era C (times relative to it), read again
    "base after the events": (lambda p: _hand_made(p, [(_us(EPOCH_NS + i * 5_000 + 500), "3.5") for i in range(50)],
                                                   after=', "baseTimeNanoseconds": 1000'), 2),
    "era B, fractions in the first chunk": (lambda p: _hand_made(
        p, [(_us(EPOCH_NS + i * 5_000 + 500), "3.250") for i in range(400)]), 1),
    "era A": (lambda p: _hand_made(p, [(str(EPOCH_NS // 1000 + i * 5), "3") for i in range(400)]), 1),
    "relative": (lambda p: _hand_made(p, [(_us(i * 5_000 + 123), "3.5") for i in range(50)]), 1),
}


def _count_reads(monkeypatch) -> list:
    reads = []
    original = decode_module.stream_events

    def counted(path, *args, **kwargs):
        reads.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(decode_module, "stream_events", counted)
    return reads


def _assert_as_reference(path: str, block_bytes: int, monkeypatch) -> int:
    """decode_file gives the reference's era and tables; returns how often it read the file."""
    era, tables = reference(path, block_bytes)
    reads = _count_reads(monkeypatch)
    decoded = decode_file(path, block_bytes=block_bytes)
    assert decoded.era == era
    for name, table in zip(("device", "host", "markers"), tables):
        assert getattr(decoded, name).equals(table), name
    return len(reads)


@pytest.mark.parametrize("block_bytes", [BLOCK, 1 << 20])
@pytest.mark.parametrize("name", list(HAND_MADE))
def test_hand_made_eras_as_the_reference(name, block_bytes, tmp_path, monkeypatch):
    make, reads = HAND_MADE[name]
    path = make(tmp_path / "rank0.json")
    many_chunks = block_bytes == BLOCK
    # in one chunk (a 1 MB block holds the file), era B's later fractions are in the first chunk
    expected = reads if many_chunks or name not in ("era B, fractions after the first chunk",) else 1
    assert _assert_as_reference(path, block_bytes, monkeypatch) == expected


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("era, base_at_end", [("A", False), ("B", False), ("C", False), ("C", True)])
def test_builder_eras_are_read_once(era, base_at_end, gz, tmp_path, monkeypatch):
    truth = write_trace(tmp_path / f"rank0.pt.trace.json{'.gz' if gz else ''}",
                        TraceSpec(era=era, base_at_end=base_at_end, gzip=gz, **SMALL))
    for block_bytes in (BLOCK, 1 << 20):
        assert _assert_as_reference(truth.path, block_bytes, monkeypatch) == 1
    assert decode_file(truth.path).era == {"A": S.ERA_A, "B": S.ERA_B, "C": S.ERA_C}[era]


@pytest.mark.parametrize("relative", ["ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                                      "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"])
def test_real_era_a_and_b_files_are_read_once_as_the_reference(relative, monkeypatch):
    path = str(shared_trace(relative))
    assert _assert_as_reference(path, 1 << 20, monkeypatch) == 1
