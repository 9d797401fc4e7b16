"""Turn each decoded chunk of events into numpy/arrow columns at once, so the structs can be dropped.

Only complete events (`ph == "X"`) become rows; they are routed by category (compared lower-cased):
device activities (busy time), host events, device-row markers, and unknown categories that are kept as
markers only if they sit on a device row (known at the end of the file). Everything else is counted.
Timestamps become int64 ns here (relative to the file's base; the base is added once it is known).
"""

from __future__ import annotations

import zlib
from collections import Counter
from itertools import compress
from operator import attrgetter

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
ABSURD_DURATION_NS = 86_400 * 10**9
_COALESCE_PARTS = 32      # a device activity longer than a day is a CUPTI glitch

_PH, _CAT, _NAME, _PID, _TID, _TS, _DUR, _ARGS = map(
    attrgetter, ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args"))
_CORRELATION, _EXTERNAL_ID, _BYTES, _COLLECTIVE = map(
    attrgetter, ("correlation", "external_id", "bytes", "collective"))
_HOST_ARGS = [(column, attrgetter(attr)) for column, attr in (
    (S.CORRELATION, "correlation"), (S.EXTERNAL_ID, "external_id"), (S.SEQUENCE_NUMBER, "sequence_number"),
    (S.FWD_THREAD_ID, "fwd_thread_id"), (S.PYTHON_ID, "python_id"), (S.PYTHON_PARENT_ID, "python_parent_id"),
    (S.PYTHON_MODULE_ID, "python_module_id"))]
_IS_X = "X".__eq__
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

    def column(self, values: list) -> np.ndarray:
        array = np.array(values)            # no dtype: a numeric string must not pass as an int
        if array.dtype == np.int64 or (array.dtype.kind == "i" and len(values)):
            return array.astype(np.int64, copy=False)
        return np.fromiter(map(self, values), np.int64, len(values))


def _int_column(values: list) -> np.ndarray:
    try:
        return np.array(values, np.int64)
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
        self._pending = dict.fromkeys(self.parts, 0)      # parts added since the last merge
        self._kinds: dict[str, tuple[int, str]] = {}
        self._kind_of: dict[str, int] = {}
        self._category_of: dict[str, str] = {}
        self._comm_names: dict[str, bool] = {}
        self._ids = _StringIds()

    # -- per chunk -------------------------------------------------------------------------------
    def add(self, events: list, first_index: int) -> None:
        # every per-event step is a C-level map/compress: this runs for millions of events
        self.events += len(events)
        phases = list(map(_PH, events))
        self.phases.update(phases)
        complete = list(compress(events, map(_IS_X, phases)))
        if not complete:
            return
        cats = list(map(_CAT, complete))
        for cat in set(cats).difference(self._kinds):
            self._kinds[cat] = classify_category(cat)
            self._kind_of[cat] = self._kinds[cat][0]
            self._category_of[cat] = self._kinds[cat][1]
        kinds = np.array(list(map(self._kind_of.__getitem__, cats)), np.int8)
        for kind in np.unique(kinds).tolist():
            if kind == kinds[0] and (kinds == kind).all():
                self._add_kind(kind, complete, cats, events, first_index)
                break
            mask = (kinds == kind).tolist()
            self._add_kind(kind, list(compress(complete, mask)), list(compress(cats, mask)), events, first_index)

    def _add_kind(self, kind: int, chosen: list, cats: list, events: list, first_index: int) -> None:
        ts, dur = list(map(_TS, chosen)), list(map(_DUR, chosen))
        start_ns, dur_ns = self._times(ts, dur, chosen, events, first_index)
        if kind == DROPPED:
            self.dropped.update(map(self._category_of.__getitem__, cats))
            return
        names = list(map(_NAME, chosen))
        args = list(map(_ARGS, chosen))
        columns = {S.NAME: names, S.PID: self._ids.column(list(map(_PID, chosen))),
                   S.TID: self._ids.column(list(map(_TID, chosen))),
                   S.START_NS: start_ns, "dur_ns": dur_ns,
                   S.CATEGORY: list(map(self._category_of.__getitem__, cats))}
        if kind == DEVICE:
            collective = list(map(_COLLECTIVE, args))
            columns.update({S.CORRELATION: _int_column(list(map(_CORRELATION, args))),
                            S.EXTERNAL_ID: _int_column(list(map(_EXTERNAL_ID, args))),
                            S.BYTES: _int_column(list(map(_BYTES, args))), S.COLLECTIVE: collective})
            columns[S.CATEGORY] = self._device_categories(columns[S.CATEGORY], names, collective)
            keep = dur_ns <= ABSURD_DURATION_NS
            if not keep.all():
                self.absurd_durations += int((~keep).sum())
                columns = _select(columns, keep)
        elif kind == HOST:
            for column, getter in _HOST_ARGS:
                columns[column] = _int_column(list(map(getter, args)))
        else:
            columns[S.EXTERNAL_ID] = _int_column(list(map(_EXTERNAL_ID, args)))
        # strings go to arrow now: millions of Python str objects would dwarf the columns
        parts = self.parts[kind]
        parts.append({key: value if isinstance(value, np.ndarray) else pa.array(value, pa.string())
                      for key, value in columns.items()})
        self._pending[kind] += 1
        if self._pending[kind] == _COALESCE_PARTS:
            # chunks are small (cache-sized); merge runs of them so tables do not get thousands of chunks
            merged = _merge(parts[-_COALESCE_PARTS:])
            del parts[-_COALESCE_PARTS:]
            parts.append(merged)
            self._pending[kind] = 0

    def _times(self, ts: list, dur: list, chosen: list, events: list, first_index: int):
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

    def _device_categories(self, kinds: list, names: list, collective: list) -> list:
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
        device-row categories kept as markers. Consumes the collected parts (one copy at a time)."""
        device_parts = self.parts[DEVICE]
        device_pids = (np.unique(np.concatenate([part[S.PID] for part in device_parts]))
                       if device_parts else np.empty(0, np.int64))
        marker_parts = self.parts[MARKER]
        unmapped: Counter[str] = Counter()
        for part in self.parts[UNKNOWN]:
            on_device = np.isin(part[S.PID], device_pids)
            categories = np.asarray(part[S.CATEGORY].to_pylist(), dtype=object)
            unmapped.update(categories[on_device])
            self.dropped.update(categories[~on_device])
            if on_device.any():
                marker_parts.append(_select(part, on_device))
        self.parts[UNKNOWN] = []
        on_device_rows = {S.DEVICE: S.PID, S.STREAM: S.TID}
        return (_stack(device_parts, S.DEVICE_SCHEMA, base_ns, on_device_rows),
                _stack(self.parts[HOST], S.HOST_SCHEMA, base_ns, {}),
                _stack(marker_parts, S.MARKER_SCHEMA, base_ns, on_device_rows),
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


def _merge(parts: list[dict]) -> dict:
    """One part from several: numpy columns concatenated, arrow string columns concatenated."""
    return {key: np.concatenate([p[key] for p in parts]) if isinstance(parts[0][key], np.ndarray)
            else pa.concat_arrays([p[key] for p in parts]) for key in parts[0]}


def _stack(parts: list[dict], schema: pa.Schema, base_ns: int, renames: dict[str, str]) -> pa.Table:
    """One arrow table (schema minus rank/window) from the per-chunk parts, emptying `parts`: the
    chunks stay chunks (no concatenation), so the peak memory is one copy of the columns."""
    fields = pa.schema([f for f in schema if f.name not in (S.RANK, S.WINDOW)])
    tables = []
    parts.reverse()
    while parts:
        tables.append(_part_table(parts.pop(), fields, base_ns, renames))
    return pa.concat_tables(tables) if tables else fields.empty_table()


def _part_table(columns: dict, fields: pa.Schema, base_ns: int, renames: dict[str, str]) -> pa.Table:
    start = columns[S.START_NS] + np.int64(base_ns)      # absolute ns = base + relative ns
    derived = {S.START_NS: start, S.END_NS: start + columns["dur_ns"]}
    arrays = []
    for f in fields:
        value = derived.get(f.name)
        if value is None:
            value = columns[renames.get(f.name, f.name)]
        arrays.append(value if isinstance(value, pa.Array) else pa.array(value, f.type))
    return pa.Table.from_arrays(arrays, schema=fields)
