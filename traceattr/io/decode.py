"""decode_file: one trace file to columnar tables plus its header facts (no rank or window yet).

Top level and picklable, so a process pool or a Dask cluster can run it unchanged; ranks and windows
are assigned afterwards by `traceattr.io.load`, which sees all files.
"""

from __future__ import annotations

import gc
import json
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.errors import TraceFormatError
from traceattr.io.columns import ColumnCollector, shows_era_b
from traceattr.io.discover import TOO_MANY_DIGITS, rank_from_name
from traceattr.io.limits import (FILE_SUM_LIMIT_NS, FILE_SUM_LIMIT_TEXT, MAX_RANK, MAX_WORLD_SIZE, TIME_LIMIT_TEXT,
                                 checked_rank)
from traceattr.io.gzipstream import BLOCK_BYTES, InflateLimit
from traceattr.io.header import read_header
from traceattr.io import fastscan
from traceattr.io.events import EventsDecoder
from traceattr.io.scanned import ScanDecoder
from traceattr.io.splitter import TextHead, stream_events
from traceattr.io.timeconv import detect_era


@dataclass
class DecodedFile:
    path: str
    device: pa.Table                 # DEVICE_SCHEMA without rank/window; absolute ns
    host: pa.Table                   # HOST_SCHEMA without rank/window
    markers: pa.Table                # MARKER_SCHEMA without rank/window
    era: str                         # schema.ERA_*
    base_time_ns: int                # added to every relative time (0 in eras A and B)
    json_rank: int                   # distributedInfo.rank, -1 when absent
    world_size: int
    device_properties: str
    metadata: str
    events: int                      # events of any phase
    negative_durations: int
    absurd_durations: int
    start_ns: int                    # first start over kept timed events, S.NO_TIME when there are none
    end_ns: int                      # last end over kept timed events, S.NO_TIME when there are none
    host_start_ns: int = S.NO_TIME   # the same over host events only: where the profiler recorded (placement_span)
    host_end_ns: int = S.NO_TIME
    phases: dict[str, int] = field(default_factory=dict)       # events per `ph`
    dropped: dict[str, int] = field(default_factory=dict)      # X events per category not kept
    unmapped: dict[str, int] = field(default_factory=dict)     # unknown device-row categories kept as markers
    notes: tuple[str, ...] = ()
    # a driver's header facts only (engine.placement.driver_facts): the distinct pids of the host rows, whose
    # table is then None; never cached or spilled (a decoded file's host table holds them)
    host_pids: tuple[int, ...] | None = None


def make_decoder(exact_decimal: bool):
    """The decoder for one file (an EventsDecoder or a ScanDecoder). Era B (Decimal timestamps) always
    takes msgspec: its exact decimal parse is what keeps those ns."""
    if exact_decimal or not fastscan.use_compiled():
        return EventsDecoder(exact_decimal=exact_decimal)
    return ScanDecoder(fastscan._scan.Scanner)


def decode_file(path: str, *, block_bytes: int = BLOCK_BYTES, max_inflate: InflateLimit | None = None) -> DecodedFile:
    """Decode one .json or .json.gz trace. Raises TraceFormatError (a NoTraceEventsError for valid JSON
    that is not a trace) naming the file. `max_inflate` bounds a gzip file's inflated size and the file's
    events (default: the limits --max-inflate and --max-events set, else InflateLimit())."""
    path = str(path)
    max_inflate = max_inflate or InflateLimit.current()
    was_enabled = gc.isenabled()
    gc.disable()                     # millions of short-lived tuples: collections would only cost time
    try:
        return _decode(path, block_bytes, max_inflate)
    finally:
        if was_enabled:
            gc.enable()


def _decode(path: str, block_bytes: int, limit: InflateLimit) -> DecodedFile:
    named_rank = rank_from_name(os.path.basename(path))
    if named_rank == TOO_MANY_DIGITS:         # the cap is no number the name holds
        raise TraceFormatError(path, "the rank in the file name has more than 18 digits: out of range "
                                     f"(0..{MAX_RANK})")
    if named_rank is not None:
        checked_rank(path, "the rank in the file name", named_rank)
    collector = ColumnCollector(path, max_events=limit.max_events)
    decoder, head = EraDecoder(collector), TextHead(_SCAN_BYTES)
    facts = read_header(path, stream_events(path, collector.add, decoder=decoder, block_bytes=block_bytes,
                                             limit=limit, head=head))
    has_base = facts.base_time_ns is not None
    if decoder.exact:                # its first chunk showed era B: a base (era C) is all that overrules it
        era = S.ERA_C if has_base else S.ERA_B
    else:
        era = detect_era(has_base=has_base, display_unit=facts.display_unit,
                         max_ts_us=None if collector.max_ts_us == -np.inf else collector.max_ts_us,
                         fractional_absolute=collector.fractional_absolute_ts)
        if era == S.ERA_A and _SUB_US_NUMBER.search(head.text):
            era = S.ERA_B    # float64 rounded every epoch-µs fraction away (all < 0.125 µs): the text keeps them
    if (era == S.ERA_B) != decoder.exact:
        # era B seen only after the first chunk (or a base after exact chunks): decode again, the one case
        # that reads the file twice; float64 cannot hold epoch µs with ns decimals
        collector = ColumnCollector(path, exact_decimal=era == S.ERA_B, max_events=limit.max_events)
        decoder = make_decoder(exact_decimal=era == S.ERA_B)
        stream_events(path, collector.add, decoder=decoder, block_bytes=block_bytes, limit=limit)
    base = facts.base_time_ns or 0
    device, host, markers, unmapped = collector.tables(base)
    notes = []
    if era == S.ERA_RELATIVE:
        notes.append(f"{path}: relative timestamps without baseTimeNanoseconds; loaded with base 0, "
                     "so its times cannot be aligned with other files")
    if collector.absurd_durations:
        notes.append(f"{path}: dropped {collector.absurd_durations} events longer than a day "
                     "(impossible durations)")
    if decoder.odd_args:
        notes.append(f"{path}: {decoder.odd_args} event args of an unexpected type read as absent "
                     f"(first: {decoder.first_odd})")
    if collector.odd_group_sizes:
        notes.append(f"{path}: {collector.odd_group_sizes} event args of an unexpected value read as absent "
                     f"(first: `Group size` {collector.first_odd_group_size}, outside 1..{MAX_WORLD_SIZE:,})")
    if collector.out_of_range:
        notes.append(f"{path}: dropped {collector.out_of_range} events whose ts or dur is beyond "
                     f"{TIME_LIMIT_TEXT}")
    if collector.negative_durations:
        notes.append(f"{path}: clamped {collector.negative_durations} negative durations to 0")
    for category, count in sorted(unmapped.items()):
        notes.append(f"{path}: {count} events of unmapped device-row category '{category}' kept as markers "
                     "(never busy)")
    for category, count in sorted(collector.dropped.items()):
        if category not in ("trace", "overhead"):
            notes.append(f"{path}: dropped {count} events of unmapped category '{category}' (not on a device row)")
    unread = {ph: count for ph, count in collector.phases.items() if ph not in CHROME_PHASES}
    if unread:      # an event of another phase holds no time traceattr reads: say so, never drop it unsaid
        shown = ", ".join(f"{json.dumps(ph, ensure_ascii=True)[:40]} ({count})" for ph, count in sorted(unread.items())[:5])
        notes.append(f"{path}: skipped {sum(unread.values())} events of a phase traceattr does not read (ph {shown}); "
                     "only complete 'X' events are timed")
    host_start_ns, host_end_ns = _window(host)
    start_ns, end_ns = _joined_window((host_start_ns, host_end_ns), _window(device, markers))
    _check_sums(path, device, start_ns, end_ns)
    return DecodedFile(
        path=path, device=device, host=host, markers=markers, era=era, base_time_ns=base,
        json_rank=facts.json_rank, world_size=facts.world_size,
        device_properties=facts.device_properties, metadata=facts.metadata,
        events=collector.events, negative_durations=collector.negative_durations,
        # events of impossible times either way: over a day long, or beyond the int64 ns the tables hold
        absurd_durations=collector.absurd_durations + collector.out_of_range, start_ns=start_ns, end_ns=end_ns,
        host_start_ns=host_start_ns, host_end_ns=host_end_ns,
        phases=dict(collector.phases), dropped=dict(collector.dropped), unmapped=dict(unmapped),
        notes=tuple(notes))


# the Chrome trace format's phases other than B/E: kineto writes X for every timed event, and the rest hold
# no time traceattr reads (instants, flows, metadata, counters, async and object events)
CHROME_PHASES = frozenset({"X", "i", "I", "s", "t", "f", "M", "C", "b", "e", "n", "S", "T", "F", "P", "N", "O",
                           "D", "R", "c", "(", ")", "V", "v"})


# a `ts` or `dur` written with a non-zero digit after the decimal point: ns precision (era B when absolute).
# Era A writers print integers (or `68.0`); the float64 parse alone misses era-B fractions below 0.125 µs at
# epoch scale, so an era-A verdict is checked against the first few MB of the text (kept as it was read)
_SUB_US_NUMBER = re.compile(rb'"(?:ts|dur)"\s*:\s*-?\d+\.\d*[1-9](?![0-9eE])')   # not `2.2e+16`
_SCAN_BYTES = 4 << 20


class EraDecoder:
    """A file's decoder that tells era B from the first chunk holding complete events, so that an era-B file
    is read once: chunks are decoded with float times (make_decoder), and when that chunk already shows era
    B (sub-µs digits on epoch µs, columns.shows_era_b) it is decoded again exactly from the bytes in hand, as
    is every later chunk (`exact`); `collector` is switched with it (the chunks before held no time it reads).
    A base found later (era C) or era-B evidence only in later chunks is _decode's to settle, by reading
    again."""

    def __init__(self, collector: ColumnCollector) -> None:
        self.collector = collector
        self.active = make_decoder(exact_decimal=False)
        self.exact = False
        self._deciding = True

    @property
    def odd_args(self) -> int:
        return self.active.odd_args

    @property
    def first_odd(self) -> str:
        return self.active.first_odd

    def decode(self, data, first_index: int = 0):
        events = self.active.decode(data, first_index)
        if self._deciding:               # a cut that failed raised before this: these events are used
            era_b = shows_era_b(events)
            self._deciding = era_b is None
            if era_b:
                self.active, self.exact = make_decoder(exact_decimal=True), True
                self.collector.exact_decimal = True
                return self.active.decode(data, first_index)
        return events


def placement_span(file: DecodedFile) -> tuple[int, int]:
    """The span that places a file among its rank's windows and runs: its host events' when it has any.
    A device activity with a wrong timestamp (check's outside_window, seconds away) must not make the
    window overlap the rank's next one and get that refused as the same capture twice."""
    if file.host_start_ns != S.NO_TIME:
        return file.host_start_ns, file.host_end_ns
    return file.start_ns, file.end_ns


def _check_sums(path: str, device: pa.Table, start_ns: int, end_ns: int) -> None:
    """A TraceFormatError when the file's span or its device activities' summed durations pass
    FILE_SUM_LIMIT_NS (summed in float64: an int64 sum is what would wrap)."""
    span = end_ns - start_ns          # 0 without a timed event: both are S.NO_TIME then (_window)
    start, end = (_whole(_int64s(device.column(name))) for name in (S.START_NS, S.END_NS))
    busy = float((end.astype(np.float64) - start.astype(np.float64)).sum())
    for what, value in (("its events span", span), ("its device activities' durations add up to", busy)):
        if value > FILE_SUM_LIMIT_NS:
            raise TraceFormatError(path, f"{what} {value:.3g} ns: beyond the {FILE_SUM_LIMIT_TEXT} a trace file can "
                                         "hold (times or durations are corrupt)")


def _joined_window(*windows: tuple[int, int]) -> tuple[int, int]:
    """The window over several (_window's, the host's computed once: the placement reads it alone)."""
    found = [window for window in windows if window[0] != S.NO_TIME]
    if not found:
        return S.NO_TIME, S.NO_TIME
    return min(start for start, _ in found), max(end for _, end in found)


def _window(*tables: pa.Table) -> tuple[int, int]:
    starts = [int(chunk.min()) for t in tables for chunk in _int64s(t.column(S.START_NS))]
    ends = [int(chunk.max()) for t in tables for chunk in _int64s(t.column(S.END_NS))]
    if not starts:
        return S.NO_TIME, S.NO_TIME
    return min(starts), max(ends)


def _whole(chunks: list[np.ndarray]) -> np.ndarray:
    """The chunks as one array: a view of the one a decoded column has (the chunks of two columns need not
    line up, so they are never zipped)."""
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks) if chunks else np.zeros(0, np.int64)


def _int64s(column: pa.ChunkedArray) -> list[np.ndarray]:
    """The chunks of a decoded int64 column (no nulls) as numpy views: not to_numpy, which imports pandas
    (a decode-only process does not need it), nor a pyarrow.compute call per table (8-10 us each, a tenth
    of a one-kernel file's decode)."""
    return [np.frombuffer(chunk.buffers()[1], np.int64, len(chunk), chunk.offset * 8) for chunk in column.chunks
            if len(chunk)]      # an empty chunk may have no data buffer at all
