"""The parquet store: a loaded TraceSet on disk, readable by pyarrow, pandas, DuckDB or polars alone.

    STORE/
      _traceattr_store.json                         metadata and completion marker (written last)
      files.parquet                                 one row per trace file (schema.FILE_SCHEMA)
      device/rank=R/window=W/part-0.parquet         hive partitions, zstd; rank and window live in the
      host/rank=R/window=W/part-0.parquet           folder names (as hive readers expect), not in the files
      markers/rank=R/window=W/part-0.parquet

The store is built in a hidden temporary folder beside STORE and renamed into place, so STORE either is
complete or does not exist; a folder that looks like a store but has no marker is refused, never read.
The layout is documented in docs/scale.md; bump STORE_VERSION on any change to it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traceattr import schema as S
from traceattr.io.discover import STORE_MARKER
from traceattr.errors import TraceInputError
from traceattr.io.limits import MAX_RANK, TIME_LIMIT_NS, TIME_LIMIT_TEXT
from traceattr.model.traceset import TraceSet

MARKER = STORE_MARKER
STORE_FORMAT = "traceattr.store"
STORE_VERSION = 2   # 2: collective columns on device rows
FILES_NAME = "files.parquet"
TABLE_SCHEMAS = {"device": S.DEVICE_SCHEMA, "host": S.HOST_SCHEMA, "markers": S.MARKER_SCHEMA}


class StoreError(TraceInputError):
    """A store that is incomplete, from another version, or cannot be written."""


def is_store(path: str | os.PathLike) -> bool:
    """True for a complete store; raises StoreError for a folder that looks like an unfinished one."""
    root = Path(path)
    if not root.is_dir():
        return False
    if (root / MARKER).is_file():
        return True
    if (root / FILES_NAME).exists() or (root / "device").is_dir():
        raise StoreError(f"{root}: incomplete traceattr store (no {MARKER}; an interrupted convert?): "
                         "delete it and convert again")
    return False


def write_store(traceset: TraceSet, out: str | os.PathLike, *, source: str = "", overwrite: bool = False,
                sources: list[dict] | None = None) -> Path:
    """Write `traceset` as a store at `out` atomically. An existing store is replaced only with overwrite."""
    target, tmp = _begin(out, overwrite)
    try:
        tables = {name: _write_partitions(getattr(traceset, name), tmp / name, schema)
                  for name, schema in TABLE_SCHEMAS.items()}
        _commit(tmp, target, tables, traceset.files, traceset.notes, source, sources)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)   # Ctrl-C or a full disk: leave nothing half-written
        raise
    return target


def _begin(out: str | os.PathLike, overwrite: bool) -> tuple[Path, Path]:
    """The target path (checked) and a new hidden temporary folder beside it."""
    target = Path(out)
    if target.exists():
        if not overwrite:
            raise StoreError(f"{target}: already exists (pass --force to replace it)")
        if not (target / MARKER).is_file():
            raise StoreError(f"{target}: exists and is not a traceattr store; refusing to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{time.time_ns()}")
    tmp.mkdir()
    return target, tmp


def _commit(tmp: Path, target: Path, tables: dict, files: pa.Table, notes, source: str,
            sources: list[dict] | None) -> None:
    """files.parquet, then the metadata file (last: it marks the store complete), then rename into place."""
    pq.write_table(files, tmp / FILES_NAME, compression="zstd")
    metadata = {
        "format": STORE_FORMAT, "version": STORE_VERSION, "traceattr_version": _version(),
        "created_ns": time.time_ns(), "source": source, "sources": sources or [],
        "partitioning": "hive: <table>/rank=R/window=W/part-0.parquet (rank, window: int32)",
        "compression": "zstd", "notes": list(notes), "tables": tables,
        "files_schema": _schema_text(S.FILE_SCHEMA),
    }
    (tmp / MARKER).write_text(json.dumps(metadata, indent=1))   # last: marks the store complete
    _move_into_place(tmp, target)


def read_store(path: str | os.PathLike) -> TraceSet:
    """The TraceSet written by write_store, with tables identical to the ones written (rows in order)."""
    root = Path(path)
    try:
        metadata = json.loads((root / MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"{root}: unreadable store metadata {MARKER} ({exc})") from None
    except RecursionError:
        raise StoreError(f"{root}: unreadable store metadata {MARKER} (nested too deeply)") from None
    if not isinstance(metadata, dict):
        raise StoreError(f"{root}: store metadata {MARKER} is not a JSON object; convert the traces again")
    if metadata.get("format") != STORE_FORMAT or metadata.get("version") != STORE_VERSION:
        raise StoreError(f"{root}: store format {metadata.get('format')!r} version {metadata.get('version')!r}; "
                         f"this traceattr reads {STORE_FORMAT!r} version {STORE_VERSION}: convert the traces again")
    try:
        tables = {name: _read_partitions(root / name, _partitions(root, metadata, name), schema)
                  for name, schema in TABLE_SCHEMAS.items()}
        files = pq.read_table(root / FILES_NAME).cast(S.FILE_SCHEMA)
    except (OSError, KeyError, pa.ArrowException) as exc:
        raise StoreError(f"{root}: damaged store ({type(exc).__name__}: {exc}); convert the traces again") from None
    _check_times(root, {**tables, "files": files})
    notes = metadata.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise StoreError(f"{root}: damaged store metadata (notes is not a list of strings); convert the traces again")
    return TraceSet(files=files, notes=tuple(notes), **tables)


def _check_times(root: Path, tables: dict[str, pa.Table]) -> None:
    """Every time within ±TIME_LIMIT_NS, as the decoder guarantees: a crafted store must not make the
    sweep's sums wrap."""
    import pyarrow.compute as pc

    for name, table in tables.items():
        for column in (S.START_NS, S.END_NS):
            if table.num_rows == 0 or column not in table.column_names:
                continue
            low, high = pc.min_max(table.column(column)).values()
            if low.as_py() is not None and not (-TIME_LIMIT_NS <= low.as_py() and high.as_py() <= TIME_LIMIT_NS):
                raise StoreError(f"{root}: damaged store ({name}.{column} beyond {TIME_LIMIT_TEXT}); "
                                 "convert the traces again")


def _partitions(root: Path, metadata: dict, name: str) -> list[tuple[int, int, int]]:
    """The checked partition list of one table: (rank, window, rows) integers within bounds, so the
    folder names built from them stay inside the store."""
    try:
        partitions = metadata["tables"][name]["partitions"]
    except (KeyError, TypeError):
        raise StoreError(f"{root}: damaged store metadata (no partition list for {name}); "
                         "convert the traces again") from None
    checked = []
    for entry in partitions if isinstance(partitions, list) else [partitions]:
        values = entry if isinstance(entry, list) and len(entry) == 3 else None
        if values is None or not all(type(v) is int for v in values) or not (
                0 <= values[0] <= MAX_RANK and 0 <= values[1] < 2**31 and 0 <= values[2] < 2**48):
            raise StoreError(f"{root}: damaged store metadata (partition {str(entry)[:60]!r} of {name} is not "
                             f"[rank, window, rows] within bounds); convert the traces again")
        checked.append(tuple(values))
    return checked


def _write_partitions(table: pa.Table, folder: Path, schema: pa.Schema) -> dict:
    """One parquet file per (rank, window); the partition list keeps the table's row order for reading."""
    folder.mkdir()
    partitions = []
    if table.num_rows:
        rank = np.asarray(table.column(S.RANK).to_numpy(), dtype=np.int64)
        window = np.asarray(table.column(S.WINDOW).to_numpy(), dtype=np.int64)
        key = (rank << 32) | (window & 0xFFFFFFFF)
        # rows of one file are contiguous in a loaded TraceSet; a stable sort keeps their order anyway
        changes = np.flatnonzero(np.diff(key)) + 1
        contiguous = len(np.unique(key)) == len(changes) + 1
        order = None if contiguous else np.argsort(key, kind="stable")
        data = table.drop_columns([S.RANK, S.WINDOW])
        if order is not None:
            data, key = data.take(pa.array(order)), key[order]
            changes = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate([[0], changes])
        ends = np.concatenate([changes, [len(key)]])
        for start, end in zip(starts.tolist(), ends.tolist()):
            r, w = int(key[start] >> 32), int(np.int32(np.uint32(key[start] & 0xFFFFFFFF)))
            part = folder / f"{S.RANK}={r}" / f"{S.WINDOW}={w}"
            part.mkdir(parents=True)
            pq.write_table(data.slice(start, end - start), part / "part-0.parquet", compression="zstd")
            partitions.append([r, w, end - start])
    return {"rows": table.num_rows, "partitions": partitions, "schema": _schema_text(schema)}


def _read_partitions(folder: Path, partitions: list, schema: pa.Schema) -> pa.Table:
    parts = []
    for rank, window, rows in partitions:
        data = pq.read_table(folder / f"{S.RANK}={rank}" / f"{S.WINDOW}={window}" / "part-0.parquet")
        if data.num_rows != rows:
            raise pa.ArrowInvalid(f"partition rank={rank}/window={window} holds {data.num_rows} rows, "
                                  f"metadata says {rows}")
        data = data.add_column(0, schema.field(S.WINDOW), pa.array(np.full(rows, window, np.int32)))
        data = data.add_column(0, schema.field(S.RANK), pa.array(np.full(rows, rank, np.int32)))
        parts.append(data.select(schema.names).cast(schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _move_into_place(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.rename(tmp, target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.time_ns()}")
    os.rename(target, old)           # a directory cannot be renamed over a non-empty one: swap
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _schema_text(schema: pa.Schema) -> list[list[str]]:
    return [[field.name, str(field.type)] for field in schema]


def _version() -> str:
    from traceattr import __version__
    return __version__


def store_sources(paths: list[str]) -> list[dict]:
    """path, size and mtime_ns of each trace file a store was made from (for staleness checks by users)."""
    rows = []
    for path in paths:
        stat = os.stat(path)
        rows.append({"path": os.path.abspath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return rows

