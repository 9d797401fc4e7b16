"""HTA's per-rank trace frames built from a TraceSet's columns, and back.

HTA's loader (`hta.common.trace_parser`) turns every complete event into a row of a pandas frame: `ts` and
`dur` in integer µs (float µs are rounded inwards: `ts` up, the end down, since pytorch#122425), `cat` and
`name` as ids into one symbol table, selected `args` as columns (`stream`, `correlation`, `bytes`,
`External id`, ...), then `index_correlation` (the row of the launch or kernel a row is linked to),
`iteration` (the ProfilerStep#N a row belongs to) and `end`. The frames built here hold the same values
from traceattr's int64-ns columns, with no JSON read again, so HTA's analyses run on them unchanged.

What traceattr does not keep, and so what these frames hold as HTA's defaults (see docs/hta.md): the
`memory bandwidth (GB/s)` of era-A copies (recomputed as Kineto does for eras B and C), the `Input Dims`,
`Input type` and `Input Strides` args; the `stream` arg of device-row markers (cuda_sync rows take their row's
stream, others none); events of categories traceattr drops (`overhead`, unknown host categories); negative
durations (clamped to 0 by traceattr). Row `index` values number the kept rows, not every event of the file.
The sync markers' `correlation`, `wait_on_stream` and `wait_on_cuda_event_record_corr_id` args are passed,
under those names (HTA's critical path reads them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.io.columns import DEVICE, HOST, MARKER, UNKNOWN, classify_category
from traceattr.io.comm_rules import name_rule
from traceattr.io.header import parse_json, parse_metadata
from traceattr.model.traceset import TraceSet

# HTA's `cat` for traceattr's device categories (the spelling of current Kineto traces)
_HTA_DEVICE_CAT = {S.COMPUTE: "kernel", S.COMMUNICATION: "kernel", S.MEMCPY: "gpu_memcpy", S.MEMSET: "gpu_memset"}
_STREAM_MARKERS = (S.CUDA_SYNC,)          # device-row markers that carry a `stream` arg in Kineto traces
# HTA's arg columns after `bytes`, in its order, with its default value for the rows (or frames) without one:
# the frames pass no input shapes, and the bandwidth only of era-B/C copies
_WAIT_ON_STREAM, _WAIT_ON_EVENT = "wait_on_stream", "wait_on_cuda_event_record_corr_id"    # HTA's names
_ARGS_AFTER_BYTES = (("memory_bw_gbps", 0.0), (_WAIT_ON_STREAM, -1), (_WAIT_ON_EVENT, -1),
                     ("input_dims", "-1"), ("input_type", "-1"), ("input_strides", "-1"))
_NO_STREAM = 2**32 - 1                    # Kineto writes a device-wide sync's stream unsigned, its tid as -1
_PROFILER_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_US = 1000


@dataclass(frozen=True)
class RankFrame:
    """One rank's rows before symbol encoding: `frame` has `name` and `cat` as strings."""
    rank: int
    path: str
    frame: pd.DataFrame
    metadata: dict


def rank_frames(traceset) -> list[RankFrame]:
    """One RankFrame per rank (HTA holds one trace file per rank)."""
    files = traceset.files.to_pandas()
    return [_rank_frame(traceset, row) for row in files.itertuples(index=False)]


def _rank_frame(traceset, file) -> RankFrame:
    rank, window = file.rank, file.window
    parts = []
    for table, kind in ((traceset.host, "host"), (traceset.device, "device"), (traceset.markers, "marker")):
        rows = table.filter(pc.and_(pc.equal(table.column(S.RANK), rank), pc.equal(table.column(S.WINDOW), window)))
        parts.append(_columns(rows, kind))
    frame = pd.DataFrame({key: _concat([part[key] for part in parts]) for key in parts[0]})
    if file.era in (S.ERA_B, S.ERA_C):
        frame["memory_bw_gbps"] = _memory_bandwidth(frame)
    _times_as_hta(frame, file.base_time_ns)
    return RankFrame(rank=int(rank), path=file.path, frame=frame, metadata=_metadata(file))


def _concat(values: list):
    if isinstance(values[0], np.ndarray):
        return np.concatenate(values)
    return pa.chunked_array([v for chunked in values for v in chunked.chunks], values[0].type).to_pandas()


def _columns(table: pa.Table, kind: str) -> dict:
    """The columns HTA reads, from one kind of traceattr table (strings stay arrow until the end)."""
    rows = table.num_rows
    none = np.full(rows, S.NO_INT, np.int64)
    category = table.column(S.CATEGORY).cast(pa.string())
    if kind == "device":
        cat = _map_strings(category, _HTA_DEVICE_CAT)
        pid, tid = table.column(S.DEVICE), table.column(S.STREAM)
        stream = tid.to_numpy()
        correlation, nbytes = table.column(S.CORRELATION).to_numpy(), table.column(S.BYTES).to_numpy()
    else:
        cat = category
        pid, tid = (table.column(S.PID), table.column(S.TID)) if kind == "host" else \
            (table.column(S.DEVICE), table.column(S.STREAM))
        if kind == "marker":
            carries = pc.is_in(category, value_set=pa.array(_STREAM_MARKERS)).to_numpy(zero_copy_only=False)
            stream = np.where(carries, tid.to_numpy(), S.NO_INT)
            stream[carries & (stream == -1)] = _NO_STREAM          # a device-wide sync (Context Sync)
        else:
            stream = none
        correlation = table.column(S.CORRELATION).to_numpy()
        nbytes = none
    # the sync markers' event: what a `Stream Wait Event` / `Event Sync` waits on (-1 on every other row)
    waits = {_WAIT_ON_STREAM: S.WAIT_ON_STREAM, _WAIT_ON_EVENT: S.WAIT_ON_CORRELATION}
    return {"cat": cat, "name": table.column(S.NAME), "pid": pid.to_numpy(), "tid": tid.to_numpy(),
            "start_ns": table.column(S.START_NS).to_numpy(), "end_ns": table.column(S.END_NS).to_numpy(),
            "stream": stream, "correlation": correlation, "bytes": nbytes,
            "external_id": table.column(S.EXTERNAL_ID).to_numpy(),
            **{hta: table.column(ours).to_numpy() if kind == "marker" else none for hta, ours in waits.items()}}


def _map_strings(values: pa.ChunkedArray, mapping: dict[str, str]) -> pa.ChunkedArray:
    keys = list(mapping)
    codes = pc.index_in(values, value_set=pa.array(keys))
    return pc.take(pa.array([mapping[k] for k in keys]), codes)


def _memory_bandwidth(frame: pd.DataFrame) -> np.ndarray:
    """Kineto's `memory bandwidth (GB/s)` arg of memcpy/memset: bytes / duration in ns (equal to the written
    value on every copy of the era-B/C shared traces). Era-A traces wrote whole-µs durations, so the ns
    duration, and the bandwidth, cannot be recovered there: they keep HTA's default 0."""
    duration = (frame["end_ns"] - frame["start_ns"]).to_numpy()
    copies = frame["cat"].isin(["gpu_memcpy", "gpu_memset"]).to_numpy() & (duration > 0)
    bandwidth = np.zeros(len(frame))
    bandwidth[copies] = frame["bytes"].to_numpy()[copies] / duration[copies]
    return bandwidth


def _times_as_hta(frame: pd.DataFrame, base_ns: int) -> None:
    """`ts`, `dur` and `end` in integer µs as HTA's loader leaves them: the written µs (relative to
    baseTimeNanoseconds when present), rounded inwards as float64 when any has a fraction."""
    start = frame.pop("start_ns").to_numpy() - np.int64(base_ns)
    duration = frame.pop("end_ns").to_numpy() - start - np.int64(base_ns)
    if not ((start % _US).any() or (duration % _US).any()):
        ts, end = start // _US, (start + duration) // _US
    else:
        ts_us, dur_us = _us_float(start), _us_float(duration)
        ts, end = np.ceil(ts_us).astype(np.int64), np.floor(ts_us + dur_us).astype(np.int64)
    frame.insert(4, "ts", ts)
    frame.insert(5, "dur", end - ts)
    frame["end"] = end   # HTA computes `end` before it aligns `ts` to the first event, and never shifts it


def _us_float(ns: np.ndarray) -> np.ndarray:
    """The float64 a JSON parser gives for the µs literal of each ns value (the nearest double)."""
    if np.abs(ns).max(initial=0) < 2**53:
        return ns.astype(np.float64) / _US          # exact operands, one correctly rounded division
    whole, part = np.divmod(ns, _US)
    if np.abs(whole).max() < 2**53:
        # epoch ns (era B): `whole` is exact and the one rounding of the sum lands on the nearest double, since
        # at |µs| >= 2**43 no k/1000 fraction lies within part/1000's rounding error of a tie (checked equal
        # to Python's exact int division on 2.3 M values)
        return whole.astype(np.float64) + part / _US
    return np.array([value / _US for value in ns.tolist()], np.float64)   # Python int division rounds exactly


def _metadata(file) -> dict:
    """HTA's per-rank metadata: the file's top-level keys other than traceEvents (traceattr keeps the
    small ones; kineto's INFO/WARNING/ERROR log copies are not kept)."""
    metadata = parse_metadata(file.metadata) or {}
    properties = parse_json(file.device_properties) if file.device_properties else None
    if properties is not None:
        metadata["deviceProperties"] = properties
    return metadata


def encode(rank_frame: RankFrame, sym_index: dict[str, int]) -> pd.DataFrame:
    """The frame with `name`/`cat` as symbol ids, HTA's arg columns and dtypes, and an `index` column."""
    frame = rank_frame.frame
    for column in ("cat", "name"):
        values = pd.Categorical(frame[column])
        ids = np.array([sym_index[s] for s in values.categories], np.int64)
        frame[column] = ids[values.codes] if len(ids) else np.empty(0, np.int64)
    frame.insert(0, "index", np.arange(len(frame), dtype=np.int64))
    position = frame.columns.get_loc("bytes") + 1
    for column, default in _ARGS_AFTER_BYTES:
        values = frame.pop(column) if column in frame else default
        frame.insert(position, column, values)
        position += 1
    end = frame.pop("end")
    for column in frame.columns:           # HTA's `_compress_df` downcasts every integer column
        if frame[column].dtype.kind == "i" and column not in ("cat", "name", "ts"):
            frame[column] = pd.to_numeric(frame[column], downcast="integer")
    # HTA's `dur` is float64 (metadata events have none: NaN until dropped), so is `end`; symbol ids int64
    frame["dur"] = frame["dur"].astype(np.float64)
    frame["end"] = end.astype(np.float64)
    return frame


def add_iteration(frame: pd.DataFrame, sym_index: dict[str, int], stream0_cpu_ops: bool) -> None:
    """HTA's `add_iteration` without its per-row Python: a host row belongs to the last ProfilerStep#N row
    (in row order) whose [ts, ts + dur) holds its ts; a device row to the step of the row it is linked to
    by `index_correlation` (-1 without one); device rows on stream 0 stay NaN, as in HTA. Newer HTA also
    steps cpu ops that carry stream 0 (`stream0_cpu_ops`)."""
    step_ids = {sid: int(m.group(1)) for name, sid in sym_index.items()
                if name.startswith("ProfilerStep") and (m := _PROFILER_STEP.match(name))}
    ts, stream = frame["ts"].to_numpy(), frame["stream"].to_numpy()
    names = frame["name"].to_numpy()
    host_step = np.full(len(frame), -1, np.int64)
    for row in np.flatnonzero(np.isin(names, list(step_ids))):
        inside = (ts >= ts[row]) & (ts < ts[row] + frame["dur"].to_numpy()[row])
        host_step[inside] = step_ids[names[row]]
    iteration = np.full(len(frame), np.nan)
    on_host = stream < 0
    if stream0_cpu_ops and "cpu_op" in sym_index:
        on_host |= (stream == 0) & (frame["cat"].to_numpy() == sym_index["cpu_op"])
    iteration[on_host] = host_step[on_host]
    linked = frame["index_correlation"].to_numpy()
    on_device = stream > 0
    iteration[on_device] = np.where(linked[on_device] > 0, iteration[np.maximum(linked[on_device], 0)], -1)
    frame["iteration"] = pd.to_numeric(iteration if np.isnan(iteration).any() else iteration.astype(np.int64),
                                       downcast="integer")


# --- back: HTA's frames -> traceattr tables -------------------------------------------------------
REQUIRED_COLUMNS = ("ts", "dur", "cat", "name", "pid", "tid", "correlation")
_TABLES = (("device", S.DEVICE_SCHEMA), ("host", S.HOST_SCHEMA), ("markers", S.MARKER_SCHEMA))


def traceset_from_trace(trace):
    """A TraceSet (one window per rank) from an HTA `Trace` whose frames hold REQUIRED_COLUMNS."""
    sym_table = list(trace.symbol_table.get_sym_table())
    parts, files = {name: [] for name, _ in _TABLES}, []
    for rank in sorted(trace.traces):
        metadata = trace.meta_data.get(rank, {})
        base = metadata.get("baseTimeNanoseconds")
        base = base if isinstance(base, int) and not isinstance(base, bool) else 0
        tables = tables_from_frame(trace.traces[rank], sym_table, int(trace.min_ts), base)
        for name, schema in _TABLES:
            columns = tables[name]
            rows = len(columns[S.START_NS])
            columns = {S.RANK: np.full(rows, rank, np.int32), S.WINDOW: np.zeros(rows, np.int32), **columns}
            parts[name].append(pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema}, schema=schema))
        files.append(_file_row(rank, trace, tables, metadata, base))
    return TraceSet(*(pa.concat_tables(parts[name]) for name, _ in _TABLES),
                    files=pa.Table.from_pylist(files, schema=S.FILE_SCHEMA),
                    notes=("loaded by HTA: times are whole µs; HTA drops the last ProfilerStep when there are "
                           "two or more, and device activities without a launch on the host (a lost record)",))


def _file_row(rank: int, trace, tables: dict, metadata: dict, base: int) -> dict:
    starts = [t[S.START_NS].min() for t in tables.values() if len(t[S.START_NS])]
    ends = [t[S.END_NS].max() for t in tables.values() if len(t[S.END_NS])]
    info = metadata.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    return {S.RANK: rank, S.WINDOW: 0, S.PATH: str(trace.trace_files.get(rank, "")),
            S.WORLD_SIZE: world if isinstance(world, int) and not isinstance(world, bool) else S.NO_INT,
            S.RANK_SOURCE: "HTA", S.ERA: S.ERA_C if base else S.ERA_A, S.BASE_TIME_NS: base,
            S.START_NS: int(min(starts)) if starts else S.NO_TIME, S.END_NS: int(max(ends)) if ends else S.NO_TIME,
            S.EVENTS: len(trace.traces[rank]), S.NEGATIVE_DURATIONS: int((trace.traces[rank]["dur"] < 0).sum()),
            S.ABSURD_DURATIONS: 0,
            S.DEVICE_PROPERTIES: json.dumps(metadata["deviceProperties"]) if "deviceProperties" in metadata else "",
            S.METADATA: json.dumps({k: v for k, v in metadata.items() if k != "deviceProperties"}, default=str)}


def tables_from_frame(frame: pd.DataFrame, sym_table: list[str], start_us: int, base_ns: int) -> dict:
    """device/host/markers columns (without rank/window) from one HTA frame. `start_us` is what HTA took
    off `ts` when it aligned the ranks; ns = (ts + start_us) µs + base, so sub-µs digits are gone."""
    symbols = np.array(sym_table, dtype=object)
    # per symbol, not per row: the kind and category of each `cat`, and whether a name is a collective
    classified = [classify_category(str(symbol)) for symbol in symbols]
    kind_of = np.array([kind for kind, _ in classified], np.int8)
    category_of = np.array([category for _, category in classified], object)
    # the decoder's own name rules (io/comm_rules.py; it also reads `Collective name` and the launching op, which
    # HTA's frames do not hold)
    comm_of = name_rule([str(symbol) for symbol in symbols]) >= 0
    cat_ids, name_ids = frame["cat"].to_numpy(np.int64), frame["name"].to_numpy(np.int64)
    kind, category, names = kind_of[cat_ids], category_of[cat_ids].copy(), symbols[name_ids]
    kernels = (kind == DEVICE) & (category == "kernel")
    category[kernels] = np.where(comm_of[name_ids[kernels]], S.COMMUNICATION, S.COMPUTE)
    start = (frame["ts"].to_numpy().astype(np.int64) + np.int64(start_us)) * _US + np.int64(base_ns)
    # HTA's inward rounding makes a sub-µs activity that crosses no µs boundary end 1 µs before it starts:
    # clamped to 0, as traceattr's decoder does (the file row counts them)
    end = start + np.maximum(frame["dur"].to_numpy().astype(np.int64), 0) * _US
    column = {S.NAME: names, S.CATEGORY: category, S.START_NS: start, S.END_NS: end,
              S.PID: frame["pid"].to_numpy().astype(np.int64), S.TID: frame["tid"].to_numpy().astype(np.int64),
              S.CORRELATION: frame["correlation"].to_numpy().astype(np.int64),
              S.EXTERNAL_ID: frame["external_id"].to_numpy().astype(np.int64) if "external_id" in frame
              else np.full(len(frame), S.NO_INT, np.int64),
              S.BYTES: frame["bytes"].to_numpy().astype(np.int64) if "bytes" in frame
              else np.full(len(frame), S.NO_INT, np.int64),
              # the sync markers' event, under HTA's names (only marker rows keep them)
              **{ours: frame[hta].to_numpy().astype(np.int64) if hta in frame
                 else np.full(len(frame), S.NO_INT, np.int64)
                 for hta, ours in ((_WAIT_ON_STREAM, S.WAIT_ON_STREAM), (_WAIT_ON_EVENT, S.WAIT_ON_CORRELATION))}}
    column[S.DEVICE], column[S.STREAM] = column[S.PID], column[S.TID]
    # as traceattr's decoder: an unknown category is a marker when it sits on a device row, else dropped
    device_pid = np.isin(column[S.PID], np.unique(column[S.PID][kind == DEVICE]))
    kind = np.where((kind == UNKNOWN) & device_pid, MARKER, kind)
    out = {}
    for name, wanted, schema in (("device", DEVICE, S.DEVICE_SCHEMA), ("host", HOST, S.HOST_SCHEMA),
                                 ("markers", MARKER, S.MARKER_SCHEMA)):
        rows = np.flatnonzero(kind == wanted)
        order = rows[np.argsort(start[rows], kind="stable")]
        out[name] = {f.name: _pick(column, f, order) for f in schema if f.name not in (S.RANK, S.WINDOW)}
    return out


def _pick(column: dict, field: pa.Field, rows: np.ndarray):
    values = column.get(field.name)
    if values is None:          # sequence number, python ids, collective: not in HTA's frames
        return np.full(len(rows), "" if field.type == pa.string() else S.NO_INT,
                       object if field.type == pa.string() else np.int64)
    return values[rows]
