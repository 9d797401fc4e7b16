"""Turn each decoded chunk of events into numpy/arrow columns at once, so the structs can be dropped.

Only complete events (`ph == "X"`) become rows; they are routed by category (compared lower-cased):
device activities (busy time), host events, device-row markers, and unknown categories that are kept as
markers only if they sit on a device row (known at the end of the file). Everything else is counted.
Timestamps become int64 ns here (relative to the file's base; the base is added once it is known).
"""

from __future__ import annotations

import zlib
from collections import Counter
from operator import attrgetter, itemgetter

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.errors import TraceFormatError
from traceattr.io.timeconv import ERA_B_US_FLOOR, decimal_us_to_ns, float_us_to_ns

DEVICE, HOST, MARKER, UNKNOWN, DROPPED = range(5)
KIND_NAMES = {DEVICE: "device", HOST: "host", MARKER: "marker", UNKNOWN: "unknown"}

_DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": S.MEMCPY, "memcpy": S.MEMCPY,
                "gpu_memset": S.MEMSET, "memset": S.MEMSET}
_HOST_CATS = {S.CPU_OP, S.USER_ANNOTATION, S.PYTHON_FUNCTION, S.CUDA_RUNTIME, S.CUDA_DRIVER}
_LEGACY_HOST = {"operator": S.CPU_OP, "runtime": S.CUDA_RUNTIME}
_MARKER_CATS = {S.GPU_USER_ANNOTATION, S.CUDA_SYNC, "cuda_event"}
_DROPPED_CATS = {"trace", "overhead"}
ABSURD_DURATION_NS = 86_400 * 10**9      # a device activity longer than a day is a CUPTI glitch

_X_FIELDS = attrgetter("name", "pid", "tid", "ts", "dur", "args")
_DEVICE_ARGS = attrgetter("correlation", "external_id", "bytes", "collective")
_HOST_ARGS = attrgetter("correlation", "external_id", "sequence_number", "fwd_thread_id",
                        "python_id", "python_parent_id", "python_module_id")
_PH = attrgetter("ph")
_CAT = attrgetter("cat")
_COMM_MARKS = ("nccl", "rccl")


def classify_category(cat: str) -> tuple[int, str]:
    """(kind, normalised category) of one `cat` value."""
    low = cat.lower()
    if low in _DEVICE_CATS:
        return DEVICE, _DEVICE_CATS[low]
    if low in _LEGACY_HOST:
        return HOST, _LEGACY_HOST[low]
    if low in _HOST_CATS or low.endswith(("_runtime", "_driver", "_op")):
        return HOST, low
    if low in _MARKER_CATS:
        return MARKER, low
    if low in _DROPPED_CATS:
        return DROPPED, low
    return UNKNOWN, low


class _StringIds:
    """String pids/tids ("Spans", "GPU 0 Counters") as stable negative ints (same string, same id)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.taken: set[int] = set()

    def __call__(self, value: int | str) -> int:
        if type(value) is int:
            return value
        found = self.ids.get(value)
        if found is None:
            found = -2 - zlib.crc32(value.encode()) % (1 << 31)
            while found in self.taken:          # a crc collision: keep ids distinct within the file
                found -= 1
            self.ids[value] = found
            self.taken.add(found)
        return found

    def column(self, values: tuple) -> np.ndarray:
        try:
            return np.fromiter(values, np.int64, len(values))
        except (TypeError, ValueError):
            return np.fromiter(map(self, values), np.int64, len(values))


def _int_column(values: tuple) -> np.ndarray:
    try:
        return np.fromiter(values, np.int64, len(values))
    except TypeError:       # JSON null (`Python parent id` of a root frame): absent
        return np.fromiter((S.NO_INT if v is None else v for v in values), np.int64, len(values))


class ColumnCollector:
    """Accumulates per-chunk columns of one file; `exact_decimal` for Decimal-typed (era B) events."""

    def __init__(self, path: str, exact_decimal: bool = False) -> None:
        self.path = path
        self.exact_decimal = exact_decimal
        self.events = 0
        self.phases: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()        # X events of categories that are not kept
        self.negative_durations = 0
        self.absurd_durations = 0
        self.fractional_absolute_ts = False           # era B evidence: sub-µs digits on epoch-µs events
        self.max_ts_us = -np.inf
        self.parts: dict[int, list[dict]] = {DEVICE: [], HOST: [], MARKER: [], UNKNOWN: []}
        self._kinds: dict[str, tuple[int, str]] = {}
        self._comm_names: dict[str, bool] = {}
        self._ids = _StringIds()

    # -- per chunk -------------------------------------------------------------------------------
    def add(self, events: list, first_index: int) -> None:
        self.events += len(events)
        self.phases.update(map(_PH, events))
        complete = [event for event in events if event.ph == "X"]
        if not complete:
            return
        cats = list(map(_CAT, complete))
        for cat in set(cats).difference(self._kinds):
            self._kinds[cat] = classify_category(cat)
        kinds = np.fromiter((self._kinds[cat][0] for cat in cats), np.int8, len(cats))
        for kind in (DEVICE, HOST, MARKER, UNKNOWN, DROPPED):
            rows = np.flatnonzero(kinds == kind)
            if len(rows) == 0:
                continue
            chosen = [complete[i] for i in rows] if len(rows) < len(complete) else complete
            self._add_kind(kind, chosen, [cats[i] for i in rows], events, first_index)

    def _add_kind(self, kind: int, chosen: list, cats: list, events: list, first_index: int) -> None:
        names, pids, tids, ts, dur, args = zip(*map(_X_FIELDS, chosen))
        start_ns, dur_ns = self._times(ts, dur, chosen, events, first_index)
        if kind == DROPPED:
            self.dropped.update(self._kinds[c][1] for c in cats)
            return
        columns = {S.NAME: names, S.PID: self._ids.column(pids), S.TID: self._ids.column(tids),
                   S.START_NS: start_ns, "dur_ns": dur_ns,
                   S.CATEGORY: [self._kinds[c][1] for c in cats]}
        if kind == DEVICE:
            correlation, external, nbytes, collective = zip(*map(_DEVICE_ARGS, args))
            columns.update({S.CORRELATION: _int_column(correlation), S.EXTERNAL_ID: _int_column(external),
                            S.BYTES: _int_column(nbytes), S.COLLECTIVE: collective})
            columns[S.CATEGORY] = self._device_categories(columns[S.CATEGORY], names, collective)
            keep = dur_ns <= ABSURD_DURATION_NS
            if not keep.all():
                self.absurd_durations += int((~keep).sum())
                columns = _select(columns, keep)
        elif kind == HOST:
            values = list(zip(*map(_HOST_ARGS, args)))
            for column, value in zip((S.CORRELATION, S.EXTERNAL_ID, S.SEQUENCE_NUMBER, S.FWD_THREAD_ID,
                                      S.PYTHON_ID, S.PYTHON_PARENT_ID, S.PYTHON_MODULE_ID), values):
                columns[column] = _int_column(value)
        else:
            columns[S.EXTERNAL_ID] = _int_column(tuple(map(attrgetter("external_id"), args)))
        # strings go to arrow now: millions of Python str objects would dwarf the columns
        self.parts[kind].append({key: value if isinstance(value, np.ndarray) else pa.array(value, pa.string())
                                 for key, value in columns.items()})

    def _times(self, ts: tuple, dur: tuple, chosen: list, events: list, first_index: int):
        if None in ts or None in dur:
            bad = next(e for e in chosen if e.ts is None or e.dur is None)
            field = "ts" if bad.ts is None else "dur"
            raise TraceFormatError(self.path, f"traceEvents[{first_index + _index_of(events, bad)}]: "
                                   f"X event without a numeric `{field}`")
        if self.exact_decimal:
            start_ns, dur_ns = decimal_us_to_ns(ts, len(ts)), decimal_us_to_ns(dur, len(dur))
        else:
            ts_us = np.array(ts, dtype=np.float64)
            self.max_ts_us = max(self.max_ts_us, float(ts_us.max()))
            dur_us = np.array(dur, dtype=np.float64)
            if not self.fractional_absolute_ts:
                # sub-µs digits on epoch µs; float64 may round a ts fraction away, never a dur's
                absolute = ts_us >= ERA_B_US_FLOOR
                self.fractional_absolute_ts = bool(np.any(ts_us[absolute] != np.floor(ts_us[absolute]))
                                                   or np.any(dur_us[absolute] != np.floor(dur_us[absolute])))
            start_ns, dur_ns = float_us_to_ns(ts_us), float_us_to_ns(dur_us)
        negative = dur_ns < 0
        if negative.any():
            self.negative_durations += int(negative.sum())
            dur_ns = np.maximum(dur_ns, 0)
        return start_ns, dur_ns

    def _device_categories(self, kinds: list, names: tuple, collective: tuple) -> list:
        """kernel -> compute or communication (NCCL/RCCL name, or a `Collective name` arg)."""
        comm = self._comm_names
        for name in set(names).difference(comm):
            low = name.lower()
            comm[name] = any(mark in low for mark in _COMM_MARKS)
        return [(S.COMMUNICATION if comm[n] or c else S.COMPUTE) if k == "kernel" else k
                for k, n, c in zip(kinds, names, collective)]

    # -- end of file -----------------------------------------------------------------------------
    def tables(self, base_ns: int) -> tuple[pa.Table, pa.Table, pa.Table, Counter]:
        """(device, host, markers) without rank/window columns, absolute ns; and the unmapped
        device-row categories kept as markers."""
        device = _concat(self.parts[DEVICE])
        device_pids = device.get(S.PID, np.empty(0, np.int64))
        marker_parts = list(self.parts[MARKER])
        unmapped: Counter[str] = Counter()
        for part in self.parts[UNKNOWN]:
            on_device = np.isin(part[S.PID], device_pids)
            categories = np.asarray(part[S.CATEGORY].to_pylist(), dtype=object)
            unmapped.update(categories[on_device])
            self.dropped.update(categories[~on_device])
            if on_device.any():
                marker_parts.append(_select(part, on_device))
        host = _concat(self.parts[HOST])
        markers = _concat(marker_parts)
        return (_table(device, S.DEVICE_SCHEMA, base_ns, {S.DEVICE: S.PID, S.STREAM: S.TID}),
                _table(host, S.HOST_SCHEMA, base_ns, {}),
                _table(markers, S.MARKER_SCHEMA, base_ns, {S.DEVICE: S.PID, S.STREAM: S.TID}),
                unmapped)


def _index_of(events: list, target) -> int:
    return next(i for i, event in enumerate(events) if event is target)


def _select(columns: dict, mask: np.ndarray) -> dict:
    rows = np.flatnonzero(mask)
    out = {}
    for key, value in columns.items():
        if isinstance(value, np.ndarray):
            out[key] = value[rows]
        elif isinstance(value, pa.Array):
            out[key] = value.take(pa.array(rows))
        else:
            out[key] = [value[i] for i in rows]
    return out


def _concat(parts: list[dict]) -> dict:
    """One dict of columns: numpy arrays concatenated, strings as arrow arrays."""
    if not parts:
        return {}
    out = {}
    for key in parts[0]:
        values = [part[key] for part in parts]
        if isinstance(values[0], np.ndarray):
            out[key] = np.concatenate(values)
        else:
            out[key] = pa.chunked_array(values, pa.string())
    return out


def _table(columns: dict, schema: pa.Schema, base_ns: int, renames: dict[str, str]) -> pa.Table:
    """An arrow table in `schema` minus rank/window; times made absolute with the file's base."""
    fields = [f for f in schema if f.name not in (S.RANK, S.WINDOW)]
    if not columns:
        return pa.schema(fields).empty_table()
    start = columns[S.START_NS] + np.int64(base_ns)
    derived = {S.START_NS: start, S.END_NS: start + columns["dur_ns"]}
    arrays = []
    for f in fields:
        value = derived.get(f.name)
        if value is None:
            value = columns[renames.get(f.name, f.name)]
        arrays.append(value if isinstance(value, pa.ChunkedArray) else pa.array(value, f.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
