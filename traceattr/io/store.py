"""The parquet store: a loaded TraceSet on disk, readable by pyarrow, pandas, DuckDB or polars alone.

    STORE/
      _traceattr_store.json                         metadata and completion marker (written last)
      files.parquet                                 one row per trace file (schema.FILE_SCHEMA)
      device/rank=R/window=W/part-0.parquet         hive partitions, zstd; rank and window live in the
      host/rank=R/window=W/part-0.parquet           folder names (as hive readers expect), not in the files
      markers/rank=R/window=W/part-0.parquet
      graph_catalog.json                            the graph captures replays match (only when any):
                                                    model/graphs.py catalog_json, its sha256 in the metadata

The store is built in a hidden temporary folder beside STORE and renamed into place, so STORE either is
complete or does not exist; a folder that looks like a store but has no marker is refused, never read.
The layout is documented in docs/scale.md; bump STORE_VERSION on any change to it.

Every file is sealed at convert time (version 3 on): the metadata lists the sha256 of each partition file and of
files.parquet, and ends with the sha256 of its own bytes before that line (`"metadata_sha256"`, its last
key). Reading hashes each file's bytes and hands those same bytes to pyarrow (each file read once): one
flipped bit anywhere is one line naming the file, "changed since convert (hash mismatch)", never a changed
number. This stops damage (disk, copy, transfer), not a forger, who can rewrite the hashes too: what is
read is still checked value by value below.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceattr import schema as S
from traceattr.io.shapes import MAX_TEXT_CHARS, SHAPE_COLUMNS
from traceattr.io.discover import INCOMPLETE_STORE, STORE, STORE_MARKER, Inputs, stat_of
from traceattr.errors import TraceError, TraceInputError
from traceattr.io.header import unreadable_texts
from traceattr.io import limits
from traceattr.io.limits import MAX_RANK, MAX_WORLD_SIZE, TIME_LIMIT_NS, TIME_LIMIT_TEXT
from traceattr.io.parquet import Inflated, read_bounded
from traceattr.model.graphs import GraphCatalog, catalog_from_json, catalog_json
from traceattr.model.traceset import TraceSet
from traceattr.units import digits_int
from traceattr import __version__

MARKER = STORE_MARKER
STORE_FORMAT = "traceattr.store"
# 2: collective columns on device rows; 3: sha256 of every file in the metadata; 4: a file without a timed
# event has start_ns = end_ns = S.NO_TIME, no longer -1 (a time a relative trace can hold); 5: group_size;
# 6: marker rows' correlation, wait_on_stream, wait_on_correlation; 7: host rows' input_dims, input_types,
# concrete_inputs; 8: graph_id, graph_node_id on device rows, launched_kernel on host rows; 9: graph_catalog.json
# (a traceattr that would ignore it attributes replays otherwise: it must refuse such a store)
STORE_VERSION = 9
FILES_NAME = "files.parquet"
CATALOG_NAME = "graph_catalog.json"
CATALOG_KEY = "graph_catalog_sha256"
MAX_CAPTURE_PROBLEMS = 100_000      # a capture of 1,024 ranks with every window lost is far below
TABLE_SCHEMAS = {"device": S.DEVICE_SCHEMA, "host": S.HOST_SCHEMA, "markers": S.MARKER_SCHEMA}
# Reading checks every value as the decoder guarantees it (a crafted store must not crash, hang or mislead
# an analysis): no nulls anywhere (schema.py: a missing integer is -1, a missing string ""), ranks, world
# sizes and base times within the decoder's limits, known eras and device categories, one file row per
# (rank, window) with start_ns <= end_ns (both S.NO_TIME for a file without a timed event, which then holds
# no rows), every row inside its file's window (the window spans every row of the file, io/decode._window)
# and ending no earlier than it starts (negative durations are clamped).
ERAS = (S.ERA_A, S.ERA_B, S.ERA_C, S.ERA_RELATIVE)
FILE_RANGES = {S.RANK: (0, MAX_RANK), S.WINDOW: (0, 2**31 - 1), S.WORLD_SIZE: (S.NO_INT, MAX_WORLD_SIZE),
               S.BASE_TIME_NS: (0, TIME_LIMIT_NS), S.EVENTS: (0, 2**63 - 1),
               S.NEGATIVE_DURATIONS: (0, 2**63 - 1), S.ABSURD_DURATIONS: (0, 2**63 - 1)}
# A parquet file holding more rows than it has bytes is refused before it is read: the rows of real traces
# take 10 to 30 bytes each in a store, perfectly regular synthetic ones (same kernel, fixed period) about 7
# (zstd, pyarrow's default dictionary pages); only long runs of identical rows pack denser (about 15 rows a
# byte, page headers alone), so such a file is a forgery (a 2 MB partition claiming 30 million rows, 5.5 GB
# once read) or the store of a trace of thousands of copies of one event. Reading then needs at most ~200
# bytes of memory per byte of store.
MAX_ROWS_PER_BYTE = 1
# Another host's leftover folder (`.NAME.tmp-HOST-PID-NS`) is swept only once nothing in it changed for a day:
# its pid means nothing here, and a convert that runs there stages into it (docs/scale.md)
FOREIGN_STALE_S = 24 * 3600
HASH = "sha256"
SEAL_KEY = "metadata_sha256"
# the metadata file: its JSON (indent=1) with the seal as the last key, the sha256 of every byte before it
_SEALED = re.compile(rb'\A(.*),\n "metadata_sha256": "([0-9a-f]{64})"\n\}\n\Z', re.S)
_DIGEST = re.compile(r"[0-9a-f]{64}")
CHANGED = "changed since convert (hash mismatch)"


class StoreError(TraceInputError):
    """A store that is incomplete, from another version, or cannot be written."""


def is_store(path: str | os.PathLike) -> bool:
    """True for a complete store; raises StoreError for a folder that looks like an unfinished one."""
    if isinstance(path, Inputs):          # discovered already: its kind, not another look
        if path.kind == INCOMPLETE_STORE:
            raise StoreError(f"{Path(path)}: incomplete traceattr store (no {MARKER}; an interrupted convert?): "
                             "delete it and convert again")
        return path.kind == STORE
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
                sources: list[dict] | None = None, capture_problems: list[str] = ()) -> Path:
    """Write `traceset` as a store at `out` atomically. An existing store is replaced only with overwrite.
    `capture_problems`: those of the traceattr.capture run it came from (its manifests stay behind)."""
    target, tmp = _begin(out, overwrite)
    with building(tmp, target):
        tables = {name: _write_partitions(getattr(traceset, name), tmp / name, schema)
                  for name, schema in TABLE_SCHEMAS.items()}
        _commit(tmp, target, tables, traceset.files, traceset.notes, source, sources, overwrite,
                capture_problems, traceset.graph_catalog)
    return target


@contextmanager
def building(tmp: Path, target: Path):
    """Remove `tmp` when the body fails (Ctrl-C or a full disk: leave nothing half-written). A failure because
    `tmp` itself vanished (removed by another process or host) is said in one line, not as the OSError of
    whatever step met it first."""
    try:
        yield
    except BaseException as exc:
        vanished = isinstance(exc, (OSError, TraceError)) and not tmp.exists()
        shutil.rmtree(tmp, ignore_errors=True)
        if vanished:
            raise StoreError(f"{target}: the temporary folder {tmp.name} beside it vanished while converting "
                             "(removed by another process or host?); nothing was written") from None
        raise


def _begin(out: str | os.PathLike, overwrite: bool) -> tuple[Path, Path]:
    """The target path (checked) and a new hidden temporary folder beside it."""
    target = Path(out)
    if target.exists():
        if not overwrite:
            raise StoreError(f"{target}: already exists (pass --force to replace it)")
        if not (target / MARKER).is_file():
            raise StoreError(f"{target}: exists and is not a traceattr store; refusing to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead(target)
    tmp = _aside(target, "tmp")
    tmp.mkdir()
    return target, tmp


def host_tag() -> str:
    """This host in a folder name: its name ([A-Za-z0-9.] kept, the rest `_`, so `-` still splits the name)
    and, where Linux tells it, its pid namespace: a pid is only meaningful within both."""
    tag = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"
    try:
        tag += "_" + re.sub(r"[^0-9]", "", os.readlink("/proc/self/ns/pid"))   # 'pid:[4026531836]'
    except OSError:
        pass
    return tag


def _aside(target: Path, kind: str) -> Path:
    """`.NAME.KIND-HOST-PID-NS` beside `target`: a convert's temporary folder (tmp) or a replaced store (old)."""
    return target.with_name(f".{target.name}.{kind}-{host_tag()}-{os.getpid()}-{time.time_ns()}")


def _sweep_dead(target: Path) -> None:
    """The hidden folders a killed convert left beside `target` (`.NAME.tmp-HOST-PID-NS`, `.NAME.old-...`),
    deleted once their process is gone; a store moved aside with none in its place is moved back first.
    Only this host's (and pid namespace's) are judged by their pid; another host's only after
    FOREIGN_STALE_S unchanged (shared storage: its convert may still be running)."""
    try:
        leftovers = sorted(target.parent.glob(f".{glob.escape(target.name)}.*-*-*"))
    except OSError:
        return
    here = host_tag()
    for path in leftovers:
        parts = path.name[len(target.name) + 2:].split("-")
        if parts[0] not in ("tmp", "old") or len(parts) not in (3, 4) or digits_int(parts[-2]) is None:
            continue
        if len(parts) == 4 and parts[1] != here:
            if not _stale(path):
                continue
        elif _alive(int(parts[-2])):   # this host's, or an older traceattr's `KIND-PID-NS` as it judged them
            continue
        if parts[0] == "old" and not target.exists() and (path / MARKER).is_file():
            os.rename(path, target)     # killed between its two renames (no exchange on this system)
            continue
        shutil.rmtree(path, ignore_errors=True)


def _stale(path: Path) -> bool:
    """Nothing changed in `path` or its subfolders (the staging folder gains one per staged file) for
    FOREIGN_STALE_S."""
    try:
        newest = max([path.stat().st_mtime] + [child.stat().st_mtime for child in path.iterdir() if child.is_dir()])
    except OSError:
        return False
    return time.time() - newest > FOREIGN_STALE_S


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True         # another user's process, or not a pid: never touch its folder
    return True


def _commit(tmp: Path, target: Path, tables: dict, files: pa.Table, notes, source: str,
            sources: list[dict] | None, overwrite: bool = False, capture_problems: list[str] = (),
            graph_catalog: GraphCatalog | None = None) -> None:
    """files.parquet (and the graph catalog), then the metadata file (last: it marks the store complete), then
    rename into place."""
    pq.write_table(files, tmp / FILES_NAME, compression="zstd")
    catalog = {}
    if graph_catalog:
        (tmp / CATALOG_NAME).write_text(json.dumps(catalog_json(graph_catalog)), encoding="utf-8")
        catalog = {CATALOG_KEY: file_sha256(tmp / CATALOG_NAME)}
    metadata = {
        "format": STORE_FORMAT, "version": STORE_VERSION, "traceattr_version": _version(),
        "created_ns": time.time_ns(), "source": source, "sources": sources or [],
        "partitioning": "hive: <table>/rank=R/window=W/part-0.parquet (rank, window: int32); "
                        "partitions: [rank, window, rows, sha256 of the file]",
        "compression": "zstd", "notes": list(notes), "tables": tables,
        "capture_problems": list(capture_problems),
        "files_schema": _schema_text(S.FILE_SCHEMA), **catalog,
    }
    metadata["hash"] = HASH
    metadata["files_sha256"] = file_sha256(tmp / FILES_NAME)
    (tmp / MARKER).write_bytes(sealed_metadata(metadata))   # last: marks the store complete
    _move_into_place(tmp, target, overwrite)


def read_store(path: str | os.PathLike) -> TraceSet:
    """The TraceSet written by write_store, with tables identical to the ones written (rows in order).
    Every table is checked as it enters (see ERAS above): a damaged store raises StoreError naming the
    store, or its parquet file at fault."""
    root = Path(path)
    metadata = _metadata(root)
    layout = {name: _partitions(root, metadata, name) for name in TABLE_SCHEMAS}
    files_digest = metadata.get("files_sha256")
    if not isinstance(files_digest, str) or not _DIGEST.fullmatch(files_digest):
        raise StoreError(f"{root}: damaged store metadata (files_sha256 is not a sha256); convert the traces again")
    files = _read_parquet(root / FILES_NAME, None, files_digest, S.FILE_SCHEMA)
    windows = _check_files(root / FILES_NAME, files)
    _check_layout(root, layout, windows)
    tables = {name: _read_partitions(root / name, layout[name], schema, windows)
              for name, schema in TABLE_SCHEMAS.items()}
    notes = metadata.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise StoreError(f"{root}: damaged store metadata (notes is not a list of strings); convert the traces again")
    return TraceSet(files=files, notes=tuple(notes), graph_catalog=_read_catalog(root, metadata), **tables)


def _read_catalog(root: Path, metadata: dict) -> GraphCatalog | None:
    """The graph catalog the store keeps (None: it keeps none), its hash and every value checked."""
    digest = metadata.get(CATALOG_KEY)
    if digest is None:
        return None
    path = root / CATALOG_NAME
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise StoreError(f"{root}: damaged store metadata ({CATALOG_KEY} is not a sha256); convert the traces again")
    try:
        raw = limits.read_at_most(path, limits.MAX_STORE_JSON_BYTES)
    except OSError as exc:
        raise StoreError(f"{path}: unreadable ({exc.strerror or exc}); convert the traces again") from None
    except limits.TooLarge as exc:
        raise StoreError(f"{path}: {exc}; convert the traces again") from None
    if hashlib.sha256(raw).hexdigest() != digest:
        raise StoreError(f"{path}: {CHANGED}; convert the traces again")
    try:
        return catalog_from_json(json.loads(raw))
    except (ValueError, RecursionError, TypeError) as exc:
        raise StoreError(f"{path}: damaged graph catalog ({' '.join(str(exc).split())[:120]}); "
                         "convert the traces again") from None


def sealed_metadata(metadata: dict) -> bytes:
    """The bytes of the metadata file: `metadata` as JSON, then its seal (SEAL_KEY, the sha256 of every byte
    before that line) as the last key; still one JSON object, for any reader."""
    body = json.dumps({k: v for k, v in metadata.items() if k != SEAL_KEY}, indent=1).encode()
    head = body[:-2]                                    # json.dumps(indent=1) of a non-empty dict ends "\n}"
    return head + f',\n "{SEAL_KEY}": "{hashlib.sha256(head).hexdigest()}"\n}}\n'.encode()


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _metadata(root: Path) -> dict:
    """The store's metadata file as a dict, its seal checked (a store of another version is refused as such),
    or StoreError naming what is wrong with it."""
    marker = root / MARKER
    try:
        raw = limits.read_at_most(marker, limits.MAX_STORE_JSON_BYTES)
    except OSError as exc:
        raise StoreError(f"{marker}: unreadable store metadata ({exc})") from None
    except limits.TooLarge as exc:
        raise StoreError(f"{marker}: damaged store metadata ({exc}); convert the traces again") from None
    sealed = _SEALED.match(raw)
    if sealed and hashlib.sha256(sealed.group(1)).hexdigest() != sealed.group(2).decode():
        raise StoreError(f"{marker}: {CHANGED}; convert the traces again")
    try:
        metadata = json.loads(raw)
    except ValueError as exc:
        metadata, problem = None, str(exc)
    except RecursionError:
        metadata, problem = None, "nested too deeply"
    if not sealed:
        # no seal: a store of another version (refused as one), else this version's seal is damaged
        if isinstance(metadata, dict) and metadata.get("version") != STORE_VERSION:
            _check_version(root, metadata)
        raise StoreError(f"{marker}: {CHANGED}: its {SEAL_KEY} line is missing or damaged; "
                         "convert the traces again")
    if metadata is None:
        raise StoreError(f"{marker}: unreadable store metadata ({problem})") from None
    if not isinstance(metadata, dict):
        raise StoreError(f"{marker}: store metadata is not a JSON object; convert the traces again")
    _check_version(root, metadata)
    return metadata


def _check_version(root: Path, metadata: dict) -> None:
    if metadata.get("format") != STORE_FORMAT or metadata.get("version") != STORE_VERSION:
        raise StoreError(f"{root}: store format {repr(metadata.get('format'))[:40]} version "
                         f"{repr(metadata.get('version'))[:20]}; this traceattr reads {STORE_FORMAT!r} version "
                         f"{STORE_VERSION}: convert the traces again")


def store_capture_problems(path: str | os.PathLike) -> list[str]:
    """The problems of the traceattr.capture run a store was converted from (its manifests did not travel
    with it: check said ok on the store of a capture that lost a window); [] for other stores."""
    root = Path(path)
    problems = _metadata(root).get("capture_problems", [])
    if not isinstance(problems, list) or len(problems) > MAX_CAPTURE_PROBLEMS or \
            not all(isinstance(problem, str) for problem in problems):
        raise StoreError(f"{root}: damaged store metadata (capture_problems is not a list of at most "
                         f"{MAX_CAPTURE_PROBLEMS:,} strings); convert the traces again")
    return problems


def _partitions(root: Path, metadata: dict, name: str) -> list[tuple[int, int, int, str]]:
    """The checked partition list of one table: (rank, window, rows) integers within bounds, so the
    folder names built from them stay inside the store, and no (rank, window) twice; then the file's sha256."""
    try:
        partitions = metadata["tables"][name]["partitions"]
    except (KeyError, TypeError):
        raise StoreError(f"{root}: damaged store metadata (no partition list for {name}); "
                         "convert the traces again") from None
    checked = []
    for entry in partitions if isinstance(partitions, list) else [partitions]:
        values = entry if isinstance(entry, list) and len(entry) == 4 else None
        if values is None or not all(type(v) is int for v in values[:3]) or not (
                0 <= values[0] <= MAX_RANK and 0 <= values[1] < 2**31 and 0 <= values[2] < 2**48) or not (
                isinstance(values[3], str) and _DIGEST.fullmatch(values[3])):
            raise StoreError(f"{root}: damaged store metadata (partition {str(entry)[:60]!r} of {name} is not "
                             f"[rank, window, rows, sha256] within bounds); convert the traces again")
        checked.append(tuple(values))
    seen: set[tuple[int, int]] = set()
    for rank, window, _, _ in checked:
        if (rank, window) in seen:
            raise StoreError(f"{root}: damaged store metadata (partition rank={rank} window={window} of {name} "
                             "is listed twice); convert the traces again")
        seen.add((rank, window))
    return checked


def _damaged(path: Path, problem: str) -> StoreError:
    return StoreError(f"{path}: damaged store ({problem}); convert the traces again")


def _read_bytes(path: Path, digest: str) -> pa.Buffer:
    """The bytes of one file of the store, read once, checked against the sha256 recorded at convert time."""
    try:
        # O_NONBLOCK: a FIFO put in a partition's place fails the check below instead of blocking the open
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _damaged(path, "not a regular file")
            # into memory arrow owns: arrow objects over a Python bytes object, left alive by an error's
            # traceback until the interpreter's end, aborted the process there ("terminate called")
            data = pa.allocate_buffer(info.st_size + 1, resizable=True)
            view, size = memoryview(data), 0
            while size < len(view) and (read := handle.readinto(view[size:])):
                size += read
            view.release()
            data.resize(size)
    except OSError as exc:
        raise _damaged(path, f"{type(exc).__name__}: {exc}") from None
    if size != info.st_size or hashlib.sha256(data).hexdigest() != digest:
        raise StoreError(f"{path}: {CHANGED}; convert the traces again")
    return data


def _read_parquet(path: Path, rows: int | None, digest: str, schema: pa.Schema | None = None) -> pa.Table:
    """One parquet file of the store, as written (cast to `schema` if given), its bytes read once: hashed
    (against `digest`) and parsed from memory. Its row count, from the footer, is checked against the
    metadata's `rows` and against the file's size before a row is read: a small file cannot claim millions
    of rows (MAX_ROWS_PER_BYTE)."""
    data = _read_bytes(path, digest)
    try:
        found = pq.read_metadata(pa.BufferReader(data)).num_rows
        size = data.size
        if rows is not None and found != rows:
            raise _damaged(path, f"it holds {found} rows, the store metadata says {rows}")
        if found > MAX_ROWS_PER_BYTE * size:
            raise _damaged(path, f"{found} rows in {size} bytes: more rows than bytes, denser than the rows of "
                                 "any trace pack (a forged file, or a trace of thousands of copies of one event)")
        table = read_bounded(pa.BufferReader(data), size)
        return table if schema is None else table.cast(schema)
    except Inflated as exc:
        raise _damaged(path, str(exc)) from None
    except (OSError, KeyError, pa.ArrowException) as exc:
        raise _damaged(path, f"{type(exc).__name__}: {exc}") from None


def _check_files(path: Path, files: pa.Table) -> dict[tuple[int, int], tuple[int, int, int]]:
    """The files table checked (see ERAS): {(rank, window): (start_ns, end_ns, events)} of its rows."""
    _check_nulls(path, "files", files)
    if not files.num_rows:
        return {}
    for column, (low, high) in FILE_RANGES.items():
        _refuse_rows(path, pc.or_(pc.less(files[column], low), pc.greater(files[column], high)),
                     lambda row: f"the file row of {_file_row(files, row)} has {column} {files[column][row].as_py()}, "
                                 f"out of range ({low}..{high})")
    untimed = pc.equal(files[S.START_NS], S.NO_TIME)
    _refuse_rows(path, pc.xor(untimed, pc.equal(files[S.END_NS], S.NO_TIME)),
                 lambda row: f"the file row of {_file_row(files, row)} has one of start_ns and end_ns but not the "
                             f"other: {files[S.START_NS][row].as_py()}..{files[S.END_NS][row].as_py()}")
    _check_times(path, "files", files.filter(pc.invert(untimed)))     # NO_TIME itself lies beyond the limits
    _refuse_rows(path, pc.greater(files[S.START_NS], files[S.END_NS]),
                 lambda row: f"the file row of {_file_row(files, row)} starts after it ends: "
                             f"start_ns {files[S.START_NS][row].as_py()} > end_ns {files[S.END_NS][row].as_py()}")
    _refuse_rows(path, pc.invert(pc.is_in(files[S.ERA], value_set=pa.array(ERAS))),
                 lambda row: f"the file row of {_file_row(files, row)} has era {files[S.ERA][row].as_py()[:40]!r}, "
                             f"not one of {ERAS}")
    # every reader parses these texts: one nested past what json reads crashed every command (RecursionError)
    for row, (metadata, properties) in enumerate(zip(files[S.METADATA].to_pylist(),
                                                     files[S.DEVICE_PROPERTIES].to_pylist())):
        bad = unreadable_texts(metadata, properties)
        if bad:
            raise _damaged(path, f"the file row of {_file_row(files, row)} has {bad} that is not readable JSON "
                                 "(not JSON, not an object, or nested too deeply)")
    counts = files.group_by([S.RANK, S.WINDOW]).aggregate([([], "count_all")])
    _refuse_rows(path, pc.greater(counts["count_all"], 1),
                 lambda row: f"{counts['count_all'][row].as_py()} file rows for {_file_row(counts, row)}")
    columns = (files[name].to_pylist() for name in (S.RANK, S.WINDOW, S.START_NS, S.END_NS, S.EVENTS))
    return {(rank, window): (start, end, events) for rank, window, start, end, events in zip(*columns)}


def _check_layout(root: Path, layout: dict[str, list], windows: dict) -> None:
    """Every partition has its file row, and a file's rows over the three tables number at most the events
    read from it (each row is one event; the file cache holds its entries to the same rule)."""
    rows: dict[tuple[int, int], int] = {}
    for name, partitions in layout.items():
        for rank, window, count, _ in partitions:
            if (rank, window) not in windows:
                raise _damaged(_partition_path(root / name, rank, window),
                               f"{name} rows of rank {rank} window {window}, which has no row in {FILES_NAME}")
            rows[rank, window] = rows.get((rank, window), 0) + count
    for (rank, window), count in rows.items():
        events = windows[rank, window][2]
        if count > events:
            raise _damaged(root / FILES_NAME, f"rank {rank} window {window} has {count} rows in the store, "
                                              f"more than the {events} events read from its file")


def _partition_path(folder: Path, rank: int, window: int) -> Path:
    return folder / f"{S.RANK}={rank}" / f"{S.WINDOW}={window}" / "part-0.parquet"


def _read_partitions(folder: Path, partitions: list, schema: pa.Schema, windows: dict) -> pa.Table:
    parts = []
    for rank, window, rows, digest in partitions:
        path = _partition_path(folder, rank, window)
        data = _read_parquet(path, rows, digest)
        try:
            data = data.add_column(0, schema.field(S.WINDOW), pa.array(np.full(rows, window, np.int32)))
            data = data.add_column(0, schema.field(S.RANK), pa.array(np.full(rows, rank, np.int32)))
            data = data.select(schema.names).cast(schema)
        except (KeyError, pa.ArrowException) as exc:
            raise _damaged(path, f"{type(exc).__name__}: {exc}") from None
        _check_partition(path, folder.name, data, *windows[rank, window][:2])
        parts.append(data)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _check_partition(path: Path, name: str, data: pa.Table, start_ns: int, end_ns: int) -> None:
    """The rows of one file (see ERAS): no nulls, times within the limits and inside the file's window,
    none ending before it starts, device rows of the device categories only."""
    _check_nulls(path, name, data)
    if not data.num_rows:
        return
    _check_times(path, name, data)
    start, end = data[S.START_NS], data[S.END_NS]
    _refuse_rows(path, pc.less(end, start),
                 lambda row: f"{name} row {row} ends before it starts: start_ns {start[row].as_py()} > "
                             f"end_ns {end[row].as_py()}")
    _refuse_rows(path, pc.or_(pc.less(start, start_ns), pc.greater(end, end_ns)),
                 lambda row: f"{name} row {row}, {start[row].as_py()}..{end[row].as_py()} ns, lies outside its "
                             f"file's window in {FILES_NAME}, {start_ns}..{end_ns} ns")
    if name == "host":       # the shape texts as the decoder bounds them (io/shapes.py)
        for column in SHAPE_COLUMNS:
            longest = pc.max(pc.utf8_length(data[column])).as_py() or 0
            if longest > MAX_TEXT_CHARS:
                raise _damaged(path, f"host.{column} holds a text of {longest:,} characters, over {MAX_TEXT_CHARS:,}")
    if name == "device":
        unknown = pc.invert(pc.is_in(data[S.CATEGORY], value_set=pa.array(S.DEVICE_CATEGORIES)))
        _refuse_rows(path, unknown,
                     lambda row: f"device row {row} has category {data[S.CATEGORY][row].as_py()[:40]!r}, not one "
                                 f"of {S.DEVICE_CATEGORIES}")
        # as the decoder reads it: absent, or 1..MAX_WORLD_SIZE (a group of 0 ranks would size a bandwidth)
        size = data[S.GROUP_SIZE]
        _refuse_rows(path, pc.and_(pc.not_equal(size, S.NO_INT),
                                   pc.or_(pc.less(size, 1), pc.greater(size, MAX_WORLD_SIZE))),
                     lambda row: f"device row {row} has {S.GROUP_SIZE} {size[row].as_py()}, out of range "
                                 f"({S.NO_INT} or 1..{MAX_WORLD_SIZE})")
        for column in (S.GRAPH_ID, S.GRAPH_NODE_ID):      # as the decoder reads them: absent (-1) or >= 0
            ids = data[column]
            _refuse_rows(path, pc.less(ids, S.NO_INT),
                         lambda row: f"device row {row} has {column} {ids[row].as_py()}, below {S.NO_INT}")


def _refuse_rows(path: Path, bad, problem) -> None:
    """A StoreError saying `problem(first bad row)` and how many there are, when the boolean mask `bad`
    (of a table's rows, no nulls) is true anywhere."""
    count = pc.sum(bad).as_py()
    if count:
        first = pc.index(bad, True).as_py()
        raise _damaged(path, problem(first) + (f"; {count} such rows" if count > 1 else ""))


def _check_times(path: Path, name: str, table: pa.Table) -> None:
    """Every time within ±TIME_LIMIT_NS, as the decoder guarantees: a crafted store must not make the
    sweep's sums wrap."""
    for column in (S.START_NS, S.END_NS):
        if table.num_rows == 0 or column not in table.column_names:
            continue
        low, high = pc.min_max(table.column(column)).values()
        if not (-TIME_LIMIT_NS <= low.as_py() and high.as_py() <= TIME_LIMIT_NS):
            raise _damaged(path, f"{name}.{column} beyond {TIME_LIMIT_TEXT}")


def _check_nulls(path: Path, name: str, table: pa.Table) -> None:
    """No null anywhere: the decoder writes -1 for a missing integer and "" for a missing string."""
    for column in table.column_names:
        nulls = table.column(column).null_count
        if nulls:
            raise _damaged(path, f"{name}.{column} holds {nulls} null value{'s' if nulls > 1 else ''}")


def _file_row(table: pa.Table, row: int) -> str:
    return f"rank {table[S.RANK][row].as_py()} window {table[S.WINDOW][row].as_py()}"


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
            partitions.append([r, w, end - start, file_sha256(part / "part-0.parquet")])
    return {"rows": table.num_rows, "partitions": partitions, "schema": _schema_text(schema)}


def _move_into_place(tmp: Path, target: Path, overwrite: bool) -> None:
    """Rename `tmp` to `target`. A store already there (one that appeared meanwhile: another convert into
    the same new output) is replaced only with `overwrite`; else a StoreError and `target` is left alone."""
    if _rename_noreplace(tmp, target):
        return
    if not overwrite:
        raise StoreError(f"{target} appeared while converting (another convert?): not replaced; use --force")
    if not (target / MARKER).is_file():    # --force replaces a store, never what else appeared there
        raise StoreError(f"{target}: exists and is not a traceattr store; refusing to replace it")
    if _exchange(tmp, target):      # one atomic step: a reader sees the old store or the new one
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = _aside(target, "old")
    os.rename(target, old)           # a directory cannot be renamed over a non-empty one: swap
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM)   # kernel or filesystem lacks it
_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)


def _rename_noreplace(a: Path, b: Path) -> bool:
    """Rename `a` to `b` unless `b` exists: True when renamed, False when `b` was there. Atomic with Linux
    renameat2; elsewhere a check then rename(2), which cannot replace a non-empty folder (a store) anyway."""
    renamed = _renameat2(a, b, RENAME_NOREPLACE)
    if renamed is not None:
        return renamed
    if os.path.lexists(b):
        return False
    try:
        os.rename(a, b)
    except OSError as exc:
        if exc.errno in _TAKEN:
            return False
        raise
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    return bool(_renameat2(a, b, RENAME_EXCHANGE))


def _renameat2(a: Path, b: Path, flags: int) -> bool | None:
    """renameat2(a, b, flags): True when done, False when `b` exists (EEXIST), None where the system or
    filesystem lacks it; other errors raise OSError."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):       # glibc before 2.28, or another libc
        return None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return True
    error = ctypes.get_errno()
    if error in _UNSUPPORTED:
        return None
    if error == errno.EEXIST and flags == RENAME_NOREPLACE:
        return False
    raise OSError(error, os.strerror(error), str(b))


def _schema_text(schema: pa.Schema) -> list[list[str]]:
    return [[field.name, str(field.type)] for field in schema]


def _version() -> str:
    return __version__


def store_sources(paths: list[str]) -> list[dict]:
    """path, size and mtime_ns of each trace file a store was made from (for staleness checks by users): a
    file discovery found (FoundFile) as its stat then saw it."""
    rows = []
    for path in paths:
        info = stat_of(path)
        rows.append({"path": os.path.abspath(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns})
    return rows

