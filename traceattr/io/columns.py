"""Turn each decoded chunk of events into numpy columns at once, so the structs can be dropped.

Only complete events (`ph == "X"`) become rows; they are routed by category (compared lower-cased):
device activities (busy time), host events, device-row markers, and unknown categories that are kept as
markers only if they sit on a device row (known at the end of the file). Everything else is counted.
Timestamps become int64 ns here (relative to the file's base; the base is added once it is known).
Strings (names, categories, collectives) are kept as int32 codes into per-file tables and become arrow
strings only at the end (see `codes.py`). A chunk arrives as msgspec structs or, from the C scanner, as
columns already (io/scanned.py); both take the same path from the raw columns on.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from itertools import compress
from operator import attrgetter

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.errors import TraceFormatError
from traceattr.io import comm_rules as comm
from traceattr.io.codes import ONLY_EMPTY, STRING_ROW_IDS_BELOW, Interner, RowIds, arrow_numbers, empty_texts
from traceattr.io.shapes import RawTexts
from traceattr.io.limits import (INT64_MAX, MAX_EVENTS_DEFAULT, MAX_WORLD_SIZE, TIME_LIMIT_NS, TIME_LIMIT_US,
                                 checked_int, too_many_events)
from traceattr.io.timeconv import ERA_B_US_FLOOR, decimal_us_to_ns, float_us_to_ns

DEVICE, HOST, MARKER, UNKNOWN, DROPPED = range(5)
KIND_NAMES = {DEVICE: "device", HOST: "host", MARKER: "marker", UNKNOWN: "unknown"}

# device work of every backend (kineto-format.md 2.2): XPU and PrivateUse1 write the CUDA names; MTIA's
# on-device `mtia_ccp_events` are libkineto's CONCURRENT_KERNEL under another name (its `mtia_runtime`
# and HPU's `hpu_op` are host-side runtime calls, matched below by suffix)
_DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": S.MEMCPY, "memcpy": S.MEMCPY,
                "gpu_memset": S.MEMSET, "memset": S.MEMSET, "mtia_ccp_events": "kernel"}
_HOST_CATS = {S.CPU_OP, S.USER_ANNOTATION, S.PYTHON_FUNCTION, S.CUDA_RUNTIME, S.CUDA_DRIVER}
_LEGACY_HOST = {"operator": S.CPU_OP, "runtime": S.CUDA_RUNTIME}
_MARKER_CATS = {S.GPU_USER_ANNOTATION, S.CUDA_SYNC, "cuda_event"}
_DROPPED_CATS = {"trace", "overhead"}
ABSURD_DURATION_NS = 86_400 * 10**9      # an event longer than a day is a CUPTI glitch or a forged trace
_COALESCE_PARTS = 32                      # chunk parts merged into one, so tables keep few chunks
_KERNEL = "kernel"                        # normalised `cat` of kernels, split into compute/communication

_PH, _CAT, _NAME, _PID, _TID, _TS, _DUR, _ARGS = map(
    attrgetter, ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args"))
# args by their events.Args attribute name
_COMM_INTS = {S.SEQ: "seq", "in_nelems": "in_nelems", "out_nelems": "out_nelems", S.SRC_RANK: "src_rank",
              S.DST_RANK: "dst_rank", "pg_id": "pg_id", S.GROUP_SIZE: "group_size"}
_COMM_TEXTS = {S.PROCESS_GROUP: "pg_name", S.GROUP_RANKS: "pg_ranks", "dtype": "dtype"}
_COMM_COLUMNS = (S.PROCESS_GROUP, S.GROUP_RANKS, S.SEQ, S.COMM_BYTES, S.SRC_RANK, S.DST_RANK, S.GROUP_SIZE)
_HOST_ONLY_ARGS = ((S.SEQUENCE_NUMBER, "sequence_number"), (S.FWD_THREAD_ID, "fwd_thread_id"),
                   (S.PYTHON_ID, "python_id"), (S.PYTHON_PARENT_ID, "python_parent_id"),
                   (S.PYTHON_MODULE_ID, "python_module_id"))
_SHAPE_ARGS = ((S.INPUT_DIMS, "input_dims"), (S.INPUT_TYPES, "input_types"), (S.CONCRETE_INPUTS, "concrete_inputs"))
_KIND_COLUMNS = {             # the columns each kind keeps beyond name/pid/tid/times/category
    DEVICE: (S.CORRELATION, S.EXTERNAL_ID), HOST: (S.CORRELATION, S.EXTERNAL_ID),
    MARKER: (S.EXTERNAL_ID, S.CORRELATION), UNKNOWN: (S.EXTERNAL_ID, S.CORRELATION)}
_X = "X"
_LAUNCH_COLUMNS = (S.CATEGORY, S.NAME, S.PID, S.TID, S.START_NS, "dur_ns", S.CORRELATION)   # _launching_ops reads


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


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_LIMIT_US_DECIMAL = Decimal(TIME_LIMIT_NS) / 1000


def _ints(getter: attrgetter, items: list) -> np.ndarray:
    """An int64 column of one integer arg (msgspec already checked the type)."""
    try:
        return np.fromiter(map(getter, items), np.int64, len(items))
    except (TypeError, OverflowError):   # JSON null (a root frame's `Python parent id`), or beyond int64
        pass
    # as float64 a null is NaN, with no per-event Python step; exact while the ids stay below 2**53
    as_float = np.fromiter(map(getter, items), np.float64, len(items))
    missing = np.isnan(as_float)
    if np.abs(as_float[~missing]).max(initial=0) < 2**53:
        as_float[missing] = S.NO_INT
        return as_float.astype(np.int64)
    # an id beyond int64 links nothing: absent, like null (the link report counts what stays unlinked)
    return np.fromiter((v if v is not None and _INT64_MIN <= v <= _INT64_MAX else S.NO_INT
                        for v in map(getter, items)), np.int64, len(items))


class _StructArgs:
    """The args structs of a chunk's rows (the msgspec path): columns are read from them on demand."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def take(self, rows: np.ndarray) -> "_StructArgs":
        return _StructArgs(list(map(self.items.__getitem__, rows.tolist())))

    def ints(self, name: str) -> np.ndarray:
        return _ints(attrgetter(name), self.items)

    def texts(self, name: str, interner: Interner | RawTexts) -> np.ndarray:
        return interner.codes(attrgetter(name), self.items)


class _ColumnArgs:
    """The same args as columns (the C scanner's path), text codes already in the collector's interners.
    `take` only narrows the row selection: a column is cut when it is read (most never are)."""

    def __init__(self, columns: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        self.columns, self.rows = columns, rows

    def __len__(self) -> int:
        return len(self.columns["correlation"]) if self.rows is None else len(self.rows)

    def take(self, rows: np.ndarray) -> "_ColumnArgs":
        return _ColumnArgs(self.columns, rows if self.rows is None else self.rows[rows])

    def ints(self, name: str) -> np.ndarray:
        return self.columns[name] if self.rows is None else self.columns[name][self.rows]

    def texts(self, name: str, interner: Interner | RawTexts) -> np.ndarray:
        return self.ints(name)


def fractional_epoch_us(ts_us: np.ndarray, dur_us: np.ndarray) -> bool:
    """Era-B evidence in float µs times within the limits: sub-µs digits on an epoch-µs event (float64 may
    round a ts fraction away, never a dur's)."""
    absolute = ts_us >= ERA_B_US_FLOOR
    return bool(absolute.any() and (np.any(ts_us[absolute] != np.floor(ts_us[absolute]))
                                    or np.any(dur_us[absolute] != np.floor(dur_us[absolute]))))


def shows_era_b(events) -> bool | None:
    """Whether one chunk's float-decoded events (msgspec structs or a ScannedChunk) already show era B as
    ColumnCollector would count it: fractional_epoch_us on its complete events within the time limits.
    None for a chunk without complete events (no time the collector reads)."""
    if isinstance(events, list):
        complete = [event for event in events if event.ph == _X]
        # a missing time reads as NaN, outside the limits below (the collector refuses the file for it)
        ts_us = np.fromiter(map(_TS, complete), np.float64, len(complete))
        dur_us = np.fromiter(map(_DUR, complete), np.float64, len(complete))
    else:
        ts_us, dur_us = events.ts_us, events.dur_us
    if not len(ts_us):
        return None
    fits = (np.abs(ts_us) <= TIME_LIMIT_US) & (np.abs(dur_us) <= TIME_LIMIT_US)
    return fractional_epoch_us(ts_us[fits], dur_us[fits])


class ColumnCollector:
    """Accumulates per-chunk columns of one file; `exact_decimal` for Decimal-typed (era B) events. A file of
    more than `max_events` events is refused (too_many_events) at the chunk that passes it, before its columns."""

    def __init__(self, path: str, exact_decimal: bool = False, max_events: int = MAX_EVENTS_DEFAULT) -> None:
        self.path = path
        self.exact_decimal = exact_decimal
        self.max_events = max_events
        self.events = 0
        self.negative_durations = 0
        self.absurd_durations = 0
        self.out_of_range = 0                         # events dropped for a time beyond TIME_LIMIT_NS
        self.odd_group_sizes = 0                      # `Group size` args outside 1..MAX_WORLD_SIZE, read as absent
        self.first_odd_group_size = 0
        self.fractional_absolute_ts = False           # era B evidence: sub-µs digits on epoch-µs events
        self.max_ts_us = -np.inf
        self.parts: dict[int, list[dict]] = {DEVICE: [], HOST: [], MARKER: [], UNKNOWN: []}
        self._pending = dict.fromkeys(self.parts, 0)      # parts added since the last merge
        self._phases = Interner(_X)                       # code 0 is "X"
        self._phase_counts: list[int] = []
        self._dropped_counts: Counter[int] = Counter()    # category code -> X events not kept
        self._names = Interner()
        self._categories = Interner(_KERNEL, S.COMPUTE, S.COMMUNICATION)   # normalised categories
        self._collectives = Interner("")                  # code 0: no collective
        self._comm_texts = Interner("")                   # process groups, ranks strings, dtypes
        self._shapes = RawTexts()                         # record_shapes args, canonical JSON (code 0: "")
        self._launched = Interner("")                     # runtime launches' `kernel` arg (code 0: none)
        self._comm_ops: list[dict] = []                   # record_param_comms rows: host row and its args
        self._host_rows = 0                               # host rows so far (a file-wide host row number)
        self._ids = RowIds(path)
        self._raw_cats = Interner()                       # raw `cat` -> code into the two arrays below
        self._cat_kind = np.empty(0, np.int8)
        self._cat_category = np.empty(0, np.int32)        # raw cat code -> normalised category code
        # C scanner codes -> this collector's codes, per string family (scanned.FAMILIES)
        self._scan_adders = {"ph": self._phases.add, "cat": self._raw_cats.add, "name": self._names.add,
                             "row_id": self._ids.add, "collective": self._collectives.add,
                             "pg_name": self._comm_texts.add, "pg_ranks": self._comm_texts.add,
                             "dtype": self._comm_texts.add, "input_dims": self._shapes.add,
                             "input_types": self._shapes.add, "concrete_inputs": self._shapes.add,
                             "kernel": self._launched.add}
        self._scan_codes = {family: np.empty(0, np.int64) for family in self._scan_adders}

    @property
    def phases(self) -> dict[str, int]:
        """Events per `ph`."""
        values = self._phases.values
        return {values[code]: count for code, count in enumerate(self._phase_counts) if count}

    @property
    def dropped(self) -> Counter:
        """X events per normalised category that were not kept."""
        values = self._categories.values
        return Counter({values[code]: count for code, count in self._dropped_counts.items()})

    # -- per chunk -------------------------------------------------------------------------------
    def add(self, events, first_index: int) -> None:
        """One chunk: a list of msgspec event structs, or a scanned.ScannedChunk (the C scanner's columns)."""
        self.events += len(events)
        if self.events > self.max_events:
            raise too_many_events(self.path, self.events, self.max_events)
        found = self._struct_rows(events, first_index) if isinstance(events, list) else self._scanned_rows(events)
        if found is None:
            return
        columns, cat_codes, args = found
        columns[S.CATEGORY] = self._cat_category[cat_codes]
        columns[S.CORRELATION], columns[S.EXTERNAL_ID] = args.ints("correlation"), args.ints("external_id")
        kinds = self._cat_kind[cat_codes]
        first_kind = int(kinds[0])
        if (kinds == first_kind).all():          # the usual chunk: one kind, nothing to split
            self._add_kind(first_kind, columns, args)
            return
        for kind in np.unique(kinds).tolist():
            rows = np.flatnonzero(kinds == kind)
            self._add_kind(kind, {key: value[rows] for key, value in columns.items()}, args.take(rows))

    def _struct_rows(self, events: list, first_index: int) -> tuple[dict, np.ndarray, _StructArgs] | None:
        """(columns, raw cat codes, args) of the complete events in range; None when there are none."""
        # every per-event step is a C-level map inside np.fromiter/compress: this runs for millions of events
        phase_codes = self._phases.codes(_PH, events)
        self._count_phases(phase_codes)
        is_complete = phase_codes == 0
        complete = events if is_complete.all() else list(compress(events, is_complete.tolist()))
        if not complete:
            return None
        start_ns, dur_ns, in_range = self._times(complete, events, first_index)
        if in_range is not None:           # times beyond TIME_LIMIT_NS: the events are dropped (a note says so)
            complete = list(compress(complete, in_range.tolist()))
            if not complete:
                return None
        columns = {S.NAME: self._names.codes(_NAME, complete), S.PID: self._ids.column(_PID, complete),
                   S.TID: self._ids.column(_TID, complete), S.START_NS: start_ns, "dur_ns": dur_ns}
        return columns, self._cat_codes(complete), _StructArgs(list(map(_ARGS, complete)))

    def _scanned_rows(self, chunk) -> tuple[dict, np.ndarray, _ColumnArgs] | None:
        """The same from the C scanner's columns (its codes mapped to this collector's)."""
        known_cats = len(self._raw_cats.values)
        codes = self._scan_codes
        for family, strings in chunk.new.items():
            if strings:
                added = np.array([self._scan_adders[family](value) for value in strings], np.int64)
                codes[family] = np.concatenate([codes[family], added])
        self._classify_new(known_cats)
        self._count_phases(codes["ph"][chunk.phases])
        if not len(chunk.ts_us):
            return None
        start_ns, dur_ns, in_range = self._float_times(chunk.ts_us, chunk.dur_us)
        columns = {S.NAME: codes["name"][chunk.name].astype(np.int32),
                   S.PID: _row_ids(self.path, chunk.pid, chunk.pid_text, codes),
                   S.TID: _row_ids(self.path, chunk.tid, chunk.tid_text, codes), "raw_cat": codes["cat"][chunk.cat]}
        columns.update(chunk.ints)
        for family, values in chunk.texts.items():       # -1: absent, code 0 ("") in both text interners
            columns[family] = (np.where(values >= 0, codes[family][np.maximum(values, 0)], 0).astype(np.int32)
                               if (values >= 0).any() else np.zeros(len(values), np.int32))
        if in_range is not None:
            columns = _select(columns, in_range)
            if not len(start_ns):
                return None
        cat_codes = columns.pop("raw_cat")
        rows = {key: columns.pop(key) for key in (S.NAME, S.PID, S.TID)}
        rows[S.START_NS], rows["dur_ns"] = start_ns, dur_ns
        return rows, cat_codes, _ColumnArgs(columns)

    def _count_phases(self, phase_codes: np.ndarray) -> None:
        counts = np.bincount(phase_codes).tolist()
        totals = self._phase_counts
        totals.extend([0] * (len(counts) - len(totals)))
        for code, count in enumerate(counts):
            totals[code] += count

    def _cat_codes(self, complete: list) -> np.ndarray:
        """Raw `cat` codes; a new `cat` is classified once and its kind/category appended to the arrays."""
        known = len(self._raw_cats.values)
        codes = self._raw_cats.codes(_CAT, complete)
        self._classify_new(known)
        return codes

    def _classify_new(self, known: int) -> None:
        """Classify the raw `cat` values interned since there were `known` of them."""
        new = self._raw_cats.values[known:]
        if new:
            kinds, categories = zip(*map(classify_category, new))
            self._cat_kind = np.concatenate([self._cat_kind, np.array(kinds, np.int8)])
            self._cat_category = np.concatenate(
                [self._cat_category, np.array([self._categories.add(c) for c in categories], np.int32)])

    def _add_kind(self, kind: int, columns: dict, args: list) -> None:
        if kind == DROPPED:
            codes, counts = np.unique(columns[S.CATEGORY], return_counts=True)
            self._dropped_counts.update(dict(zip(codes.tolist(), counts.tolist())))
            return
        part = {key: columns[key] for key in (S.NAME, S.PID, S.TID, S.START_NS, "dur_ns", S.CATEGORY)}
        part.update((key, columns[key]) for key in _KIND_COLUMNS[kind])
        # first, so the host row numbers of _keep_comm_ops count kept rows: one such event would stretch the
        # file's window (and its idle time) to days
        keep = part["dur_ns"] <= ABSURD_DURATION_NS
        if not keep.all():
            self.absurd_durations += int((~keep).sum())
            part, args = _select(part, keep), args.take(np.flatnonzero(keep))
        if kind == DEVICE:
            part[S.BYTES] = args.ints("bytes")
            part[S.COLLECTIVE] = args.texts("collective", self._collectives)
            part.update(self._comm_args(args, part[S.COLLECTIVE] != 0))
            # ids are >= 0 as CUPTI writes them: any other value reads as absent (the store checks the same)
            part[S.GRAPH_ID], part[S.GRAPH_NODE_ID] = (np.maximum(args.ints(name), S.NO_INT)
                                                       for name in ("graph_id", "graph_node_id"))
        elif kind == HOST:
            for column, name in _HOST_ONLY_ARGS:
                part[column] = args.ints(name)
            for column, name in _SHAPE_ARGS:
                part[column] = args.texts(name, self._shapes)
            part[S.LAUNCHED_KERNEL] = args.texts("kernel", self._launched)
            self._keep_comm_ops(part, args)
        else:                                    # markers (and unknown rows that may become markers)
            part[S.WAIT_ON_STREAM] = args.ints("wait_on_stream")
            part[S.WAIT_ON_CORRELATION] = args.ints("wait_on_correlation")
        parts = self.parts[kind]
        parts.append({key: _compact(value) for key, value in part.items()})
        self._pending[kind] += 1
        if self._pending[kind] == _COALESCE_PARTS:
            # chunks are small (cache-sized); merge runs of them so tables do not get thousands of chunks
            merged = _merge(parts[-_COALESCE_PARTS:])
            del parts[-_COALESCE_PARTS:]
            parts.append(merged)
            self._pending[kind] = 0

    def _times(self, complete: list, events: list,
               first_index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(start_ns relative to the base, dur_ns) of the events whose times are in range, and None when
        that is all of them, else the mask of those events."""
        in_range = None
        if self.exact_decimal:
            ts, dur = list(map(_TS, complete)), list(map(_DUR, complete))
            if None in ts or None in dur:
                self._missing_time(complete, events, first_index)
            # copy_abs: no decimal context, so even 1e999999999 compares without an Overflow
            fits = [t.copy_abs() <= _LIMIT_US_DECIMAL and d.copy_abs() <= _LIMIT_US_DECIMAL for t, d in zip(ts, dur)]
            if not all(fits):
                in_range = np.array(fits, bool)
                ts, dur = list(compress(ts, fits)), list(compress(dur, fits))
            start_ns, dur_ns = decimal_us_to_ns(ts, len(ts)), decimal_us_to_ns(dur, len(dur))
            if in_range is not None:
                self.out_of_range += int((~in_range).sum())
            return start_ns, self._clamped(dur_ns), in_range
        # fromiter turns a JSON null into NaN (JSON itself has no NaN): that is the missing-time check
        ts_us = np.fromiter(map(_TS, complete), np.float64, len(complete))
        dur_us = np.fromiter(map(_DUR, complete), np.float64, len(complete))
        if np.isnan(ts_us).any() or np.isnan(dur_us).any():
            self._missing_time(complete, events, first_index)
        return self._float_times(ts_us, dur_us)

    def _float_times(self, ts_us: np.ndarray, dur_us: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """_times for float µs columns (no NaN)."""
        in_range = None
        fits = (np.abs(ts_us) <= TIME_LIMIT_US) & (np.abs(dur_us) <= TIME_LIMIT_US)
        if not fits.all():
            in_range, ts_us, dur_us = fits, ts_us[fits], dur_us[fits]
            self.out_of_range += int((~in_range).sum())
        self.max_ts_us = max(self.max_ts_us, float(ts_us.max(initial=-np.inf)))
        if not self.fractional_absolute_ts:
            self.fractional_absolute_ts = fractional_epoch_us(ts_us, dur_us)
        return float_us_to_ns(ts_us), self._clamped(float_us_to_ns(dur_us)), in_range

    def _clamped(self, dur_ns: np.ndarray) -> np.ndarray:
        """Negative durations become 0 (counted)."""
        negative = dur_ns < 0
        if negative.any():
            self.negative_durations += int(negative.sum())
            dur_ns = np.maximum(dur_ns, 0)
        return dur_ns

    def _missing_time(self, complete: list, events: list, first_index: int) -> None:
        bad = next(e for e in complete if e.ts is None or e.dur is None)
        field = "ts" if bad.ts is None else "dur"
        raise TraceFormatError(self.path, f"traceEvents[{first_index + _index_of(events, bad)}]: "
                               f"X event without a numeric `{field}`")

    # -- end of file -----------------------------------------------------------------------------
    def tables(self, base_ns: int) -> tuple[pa.Table, pa.Table, pa.Table, Counter]:
        """(device, host, markers) without rank/window columns, absolute ns; and the unmapped
        device-row categories kept as markers. Consumes the collected parts (one copy at a time)."""
        for kind, parts in self.parts.items():
            if kind != HOST:
                self._drop_beyond_limits(parts, base_ns)
        device_parts = self.parts[DEVICE]
        self._resolve_kernels(device_parts)
        # host rows only now: the launching-op lookup above numbers host rows as they were collected
        self._drop_beyond_limits(self.parts[HOST], base_ns)
        # each part's distinct pids first: a concatenation of the column was 8 bytes a device row
        device_pids = (np.unique(np.concatenate([np.unique(part[S.PID]) for part in device_parts]))
                       if device_parts else np.empty(0, np.int64))
        marker_parts = self.parts[MARKER]
        unmapped_counts: Counter[int] = Counter()
        for part in self.parts[UNKNOWN]:
            on_device = np.isin(part[S.PID], device_pids)
            for counter, rows in ((unmapped_counts, on_device), (self._dropped_counts, ~on_device)):
                codes, counts = np.unique(part[S.CATEGORY][rows], return_counts=True)
                counter.update(dict(zip(codes.tolist(), counts.tolist())))
            if on_device.any():
                marker_parts.append(_select(part, on_device))
        self.parts[UNKNOWN] = []
        categories = self._categories.values
        unmapped = Counter({categories[code]: count for code, count in unmapped_counts.items()})
        texts = self._comm_texts.arrow()
        strings = {S.NAME: self._names.arrow(), S.CATEGORY: self._categories.arrow(),
                   S.COLLECTIVE: self._collectives.arrow(), S.PROCESS_GROUP: texts, S.GROUP_RANKS: texts,
                   S.LAUNCHED_KERNEL: self._launched.arrow()}
        shapes = self._shapes.texts.arrow()
        strings.update(dict.fromkeys((S.INPUT_DIMS, S.INPUT_TYPES, S.CONCRETE_INPUTS), shapes))
        on_device_rows = {S.DEVICE: S.PID, S.STREAM: S.TID}
        return (_stack(device_parts, S.DEVICE_SCHEMA, base_ns, on_device_rows, strings),
                _stack(self.parts[HOST], S.HOST_SCHEMA, base_ns, {}, strings),
                _stack(marker_parts, S.MARKER_SCHEMA, base_ns, on_device_rows, strings),
                unmapped)

    def _comm_args(self, args: list, rows: np.ndarray) -> dict:
        """The collective columns of a device part: read only on `rows` (kernels with collective args),
        the rest stay unknown (-1, "")."""
        n = len(args)
        out = {S.PROCESS_GROUP: np.zeros(n, np.int32), S.GROUP_RANKS: np.zeros(n, np.int32),
               **{name: np.full(n, S.NO_INT, np.int64)
                  for name in (S.SEQ, S.COMM_BYTES, S.SRC_RANK, S.DST_RANK, S.GROUP_SIZE)}}
        if rows.any():
            index = np.flatnonzero(rows)
            found = self._read_comm_args(args.take(index))
            for name in _COMM_COLUMNS:
                out[name][index] = found[name]
        return out

    def _read_comm_args(self, args: list) -> dict:
        ints = {column: args.ints(name) for column, name in _COMM_INTS.items()}
        texts = {column: args.texts(name, self._comm_texts) for column, name in _COMM_TEXTS.items()}
        group = texts[S.PROCESS_GROUP]
        if (ints["pg_id"] >= 0).any():      # early 2024: `Process Group ID` (an int) instead of the name
            by_id = np.array([self._comm_texts.add(str(v)) for v in ints["pg_id"].tolist()], np.int32)
            group = np.where((group == 0) & (ints["pg_id"] >= 0), by_id, group)
        nbytes = comm.message_bytes(ints["in_nelems"], ints["out_nelems"], texts["dtype"], self._comm_texts.values)
        return {S.PROCESS_GROUP: group, S.GROUP_RANKS: texts[S.GROUP_RANKS], S.SEQ: ints[S.SEQ],
                S.COMM_BYTES: nbytes, S.SRC_RANK: ints[S.SRC_RANK], S.DST_RANK: ints[S.DST_RANK],
                S.GROUP_SIZE: self._group_sizes(ints[S.GROUP_SIZE])}

    def _group_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """`Group size` within 1..MAX_WORLD_SIZE, else absent (-1) and counted for the decode's note: a group
        of 0 or 2**40 ranks would size an instance or a bus bandwidth factor."""
        odd = (sizes != S.NO_INT) & ((sizes < 1) | (sizes > MAX_WORLD_SIZE))
        if not odd.any():
            return sizes
        if not self.odd_group_sizes:
            self.first_odd_group_size = int(sizes[odd][0])
        self.odd_group_sizes += int(odd.sum())
        return np.where(odd, S.NO_INT, sizes)

    def _keep_comm_ops(self, part: dict, args: list) -> None:
        """Remember the record_param_comms rows (few) with their collective args, by file-wide host row."""
        first = self._host_rows
        self._host_rows += len(args)
        code = self._names.index.get(comm.RECORD_PARAM_COMMS)
        if code is None:
            return
        rows = np.flatnonzero(part[S.NAME] == code)
        if len(rows):
            found = self._read_comm_args(args.take(rows))
            self._comm_ops.append({"host_row": rows + first, **found})

    def _drop_beyond_limits(self, parts: list[dict], base_ns: int) -> None:
        """Drop rows whose absolute start or end (base + relative) is beyond ±TIME_LIMIT_NS. The base and
        each relative time are within the limit already, so these sums cannot overflow int64."""
        for i, part in enumerate(parts):
            start = part[S.START_NS] + np.int64(base_ns)
            fits = (start >= -TIME_LIMIT_NS) & (start + part["dur_ns"] <= TIME_LIMIT_NS)
            if not fits.all():
                self.out_of_range += int((~fits).sum())
                parts[i] = _select(part, fits)

    def _resolve_kernels(self, device_parts: list[dict]) -> None:
        """kernel -> compute or communication by the rules of io/comm_rules.py (own args, names, launching op),
        names decided once per distinct name; communication kernels without collective args take them
        from the record_param_comms op they were launched in."""
        comm_by_name = comm.name_rule(self._names.values) >= 0
        kernel, compute, communication = (self._categories.index[c] for c in (_KERNEL, S.COMPUTE, S.COMMUNICATION))
        launched_in = self._launching_ops(device_parts)
        for part, (op_row, by_op) in zip(device_parts, launched_in):
            category = part[S.CATEGORY]
            is_kernel = category == kernel
            if is_kernel.any():
                is_comm = comm_by_name[part[S.NAME]] | (part[S.COLLECTIVE] != 0) | by_op
                part[S.CATEGORY] = _compact(np.where(is_kernel, np.where(is_comm, communication, compute), category))
                self._inherit_op_args(part, is_kernel & is_comm & (part[S.COLLECTIVE] == 0), op_row)

    def _launching_ops(self, device_parts: list[dict]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per device part: (file-wide host row of the innermost op or annotation around each activity's
        launch (-1 none), whether that op makes it communication). Skipped when no name is a comm op."""
        none = [(np.full(len(p[S.NAME]), -1, np.int64), np.zeros(len(p[S.NAME]), bool)) for p in device_parts]
        op_names = comm.is_comm_op(self._names.values)
        if not op_names.any() or not device_parts or not self.parts[HOST]:
            return none
        # only the columns the search reads, merged for it alone: the parts stay as they are (merging all 15
        # columns, the parts still held, was the decode's memory peak: +29 MB on a 202 MB trace)
        host = _merge([{key: part[key] for key in _LAUNCH_COLUMNS} for part in self.parts[HOST]])
        categories = self._categories.values
        is_range = np.isin(host[S.CATEGORY], [i for i, c in enumerate(categories) if c in (S.CPU_OP, S.USER_ANNOTATION)])
        is_probe = np.isin(host[S.CATEGORY], [i for i, c in enumerate(categories) if c.endswith(("_runtime", "_driver"))])
        is_probe &= host[S.CORRELATION] >= 0
        is_comm_op = is_range & op_names[host[S.NAME]]
        if not is_comm_op.any():
            return none
        # only launches inside a comm op can be comm-launched, and only ranges that start inside one can be
        # more inner than it: the innermost search runs on those few rows, not on every host event
        within = _inside_ranges(host, np.flatnonzero(is_comm_op))
        ranges, probes = np.flatnonzero(is_range & within), np.flatnonzero(is_probe & within)
        if len(probes) == 0:
            return none
        thread = _thread_codes(host[S.PID], host[S.TID], np.concatenate([ranges, probes]))
        inner = comm.innermost_range(thread[:len(ranges)], host[S.START_NS][ranges],
                                     host[S.START_NS][ranges] + host["dur_ns"][ranges],
                                     thread[len(ranges):], host[S.START_NS][probes])
        op_of_probe = np.where(inner >= 0, ranges[np.maximum(inner, 0)], -1)
        correlation = host[S.CORRELATION][probes]
        order = np.argsort(correlation, kind="stable")
        out = []
        for part in device_parts:
            at = np.clip(np.searchsorted(correlation[order], part[S.CORRELATION]), 0, max(len(order) - 1, 0))
            hit = (len(order) > 0) & (correlation[order][at] == part[S.CORRELATION]) & (part[S.CORRELATION] >= 0)
            op_row = np.where(hit, op_of_probe[order][at], -1)
            by_op = (op_row >= 0) & op_names[host[S.NAME][np.maximum(op_row, 0)]]
            out.append((op_row, by_op))
        return out

    def _inherit_op_args(self, part: dict, rows: np.ndarray, op_row: np.ndarray) -> None:
        if not self._comm_ops or not rows.any():
            return
        ops = _merge(self._comm_ops)
        order = np.argsort(ops["host_row"])
        keys = ops["host_row"][order]
        at = np.clip(np.searchsorted(keys, op_row), 0, len(keys) - 1)
        take = rows & (keys[at] == op_row)
        for name in _COMM_COLUMNS:
            part[name] = np.where(take, ops[name][order][at], part[name])


def _row_ids(path: str, values: np.ndarray, text_codes: np.ndarray, codes: dict) -> np.ndarray:
    """A scanned pid/tid column: integers as they are (range-checked as RowIds checks them), strings (text
    code >= 0) by their RowIds id."""
    low = values < STRING_ROW_IDS_BELOW      # integers only: a string's row holds NO_INT here
    if low.any():
        checked_int(path, "a pid or tid", int(values[low][0]), STRING_ROW_IDS_BELOW, INT64_MAX)
    if (text_codes < 0).all():
        return values
    return np.where(text_codes >= 0, codes["row_id"][np.maximum(text_codes, 0)], values)


def _thread_codes(pid: np.ndarray, tid: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A dense code per (pid, tid) of `rows`."""
    pairs = np.stack([pid[rows], tid[rows]], axis=1)
    if len(pairs) == 0:
        return np.zeros(0, np.int64)
    return np.unique(pairs, axis=0, return_inverse=True)[1].astype(np.int64).ravel()


def _inside_ranges(host: dict, range_rows: np.ndarray) -> np.ndarray:
    """Per host row: whether its start lies inside one of `range_rows` on the same thread (half-open)."""
    inside = np.zeros(len(host[S.PID]), bool)
    pid, tid, start = host[S.PID], host[S.TID], host[S.START_NS]
    for p, t in set(zip(pid[range_rows].tolist(), tid[range_rows].tolist())):    # a few threads
        mine = range_rows[(pid[range_rows] == p) & (tid[range_rows] == t)]
        order = np.argsort(start[mine], kind="stable")
        lo = start[mine][order]
        reach = np.maximum.accumulate((start[mine] + host["dur_ns"][mine])[order])
        rows = np.flatnonzero((pid == p) & (tid == t))
        at = np.searchsorted(lo, start[rows], side="right") - 1
        inside[rows] = (at >= 0) & (start[rows] < reach[np.maximum(at, 0)])
    return inside


def _index_of(events: list, target) -> int:
    return next(i for i, event in enumerate(events) if event is target)


def _select(columns: dict, mask: np.ndarray) -> dict:
    rows = np.flatnonzero(mask)
    return {key: value[rows] for key, value in columns.items()}


def _merge(parts: list[dict]) -> dict:
    """One part from several (every column is numpy; one value in every part stays a broadcast of it)."""
    return {key: _concatenated([p[key] for p in parts]) for key in parts[0]}


def _compact(values: np.ndarray) -> np.ndarray:
    """`values`, or when it repeats one value a read-only broadcast of that value: the args a kind of event
    never has (a compute kernel's collective, process group, seq, bytes; ids a writer left out), and often
    the name, category, device and stream of a file of one kernel, took 4-8 bytes a row each to say
    nothing, from the scan to the tables (a broadcast is indexed, compared and concatenated as an array)."""
    if len(values) > 1 and values.strides != (0,) and (values == values[0]).all():
        return np.broadcast_to(values[:1].copy().reshape(()), values.shape)
    return values


def _concatenated(pieces: list[np.ndarray], writable: bool = False) -> np.ndarray:
    """The pieces as one array; broadcasts of one same value stay one (unless `writable`)."""
    pieces = [piece for piece in pieces if len(piece)] or pieces[:1]
    if not writable and len(pieces[0]) and all(piece.strides == (0,) for piece in pieces) and \
            all(piece[0] == pieces[0][0] for piece in pieces):
        return np.broadcast_to(pieces[0][:1].copy().reshape(()), (sum(map(len, pieces)),))
    if len(pieces) == 1:
        return pieces[0] if pieces[0].flags.writeable and pieces[0].strides != (0,) else pieces[0].copy()
    return np.concatenate(pieces)


def _stack(parts: list[dict], schema: pa.Schema, base_ns: int, renames: dict[str, str],
           strings: dict[str, pa.Array]) -> pa.Table:
    """One arrow table (schema minus rank/window) from the per-chunk parts, emptying `parts`. Each column is
    one contiguous array, joined column by column while the parts' arrays of that column are let go: the
    peak is one copy of the columns plus one column, and every int64 column reads as a numpy view later
    (to_numpy of a chunked column copied it, in each analysis of the map step: 8 bytes per row each time)."""
    fields = S.unplaced(schema)
    if not parts:
        return pa.Table.from_batches([], schema=fields)  # empty_table() imports pandas
    start = _joined(parts, S.START_NS, writable=True)
    start += np.int64(base_ns)                          # absolute ns = base + relative ns
    end = _joined(parts, "dur_ns", writable=True)
    end += start
    derived = {S.START_NS: start, S.END_NS: end}
    arrays = []
    for name, f in zip(fields.names, fields):
        value = derived.pop(name, None)
        if value is None:
            value = _joined(parts, renames.get(name, name))
            if len(value) >= _CONSTANT_ROWS and (value.strides == (0,) or (value == value[0]).all()):
                arrays.append(_constant_column(value[:_CONSTANT_ROWS], len(value), f, strings))
                continue
        texts = strings.get(name)
        if texts is not None:                             # codes -> the strings they stand for
            arrays.append(empty_texts(len(value)) if texts is ONLY_EMPTY
                          else texts.take(arrow_numbers(value, pa.int32())))
        else:
            arrays.append(arrow_numbers(value, f.type))
        del value
    parts.clear()
    return pa.Table.from_arrays(arrays, schema=fields)


_CONSTANT_ROWS = 1 << 16


def _constant_column(head: np.ndarray, rows: int, field: pa.Field, strings: dict[str, pa.Array]) -> pa.ChunkedArray:
    """A column of one value as chunks that all share one array of _CONSTANT_ROWS rows: the args a kind of
    event never has (a compute kernel's collective, its process group, seq, bytes; ids a writer left out)
    are most of a device table's columns, and took 8 bytes a row each (4 for a text) to say nothing. Read
    whole (to_numpy) it is materialized then, by the analysis that reads it."""
    one = (strings[field.name].take(arrow_numbers(head, pa.int32())) if field.name in strings
           else arrow_numbers(head.copy(), field.type))
    whole, rest = divmod(rows, _CONSTANT_ROWS)
    return pa.chunked_array([one] * whole + ([one.slice(0, rest)] if rest else []), field.type)


def _joined(parts: list[dict], key: str, writable: bool = False) -> np.ndarray:
    """Column `key` of every part as one array, taken out of the parts (so each part's copy goes at once)."""
    return _concatenated([part.pop(key) for part in parts], writable)
