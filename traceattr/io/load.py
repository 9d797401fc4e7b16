"""load(): every trace file under a path -> one TraceSet (all ranks and windows, int64 ns tables)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection
from concurrent.futures import Executor
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.errors import NoTracesError, TraceDiscoveryError
from traceattr.io.cache import FileCache
from traceattr.io.codes import NUMPY_TYPES, arrow_numbers
from traceattr.io.decode import DecodedFile, placement_span
from traceattr.io.gzipstream import events_limited
from traceattr.io.discover import FoundFile, RankChoice, discover, order_windows, resolve_ranks
from traceattr.io.parallel import as_executor, decode_paths, successes
from traceattr.io.runs import SeveralRunsError, describe_runs, split_runs
from traceattr.io.store import is_store, read_store
from traceattr.model.traceset import TraceSet, check_load_values, check_path_argument


def load(path: str | Path, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
         jobs: int | None = None, executor: Executor | None = None, cache: bool | str | FileCache = True,
         progress: bool = False, drop_host: Collection[str] = (), max_events: int | None = None,
         leave_out: Collection[str] = ()) -> TraceSet:
    """Load a trace file, a folder of traces or a parquet store (traceattr convert). Bad files raise
    TraceInputError subclasses naming the file, or with `skip_bad=True` are skipped with a note.

    Files are decoded `jobs` at a time in a process pool (default: the available cores), or on `executor`
    (any concurrent.futures.Executor, or a Dask Client: its get_executor(pure=False)). With `cache` (True: the
    user cache folder; or a folder, or a FileCache), decoded files are kept as parquet in the cache folder and
    reused while each file is unchanged (traceattr.io.cache, traceattr.io.cachedir).
    `progress` shows a progress bar on stderr when it is a terminal. `drop_host` lists host categories to
    leave out (e.g. the cpu ops and python frames that make up most of a trace, when the analysis does not
    attribute to ops): each file is trimmed as it arrives, so many ranks fit in memory. `max_events`: a file
    of more events is refused, as --max-events does (default io.limits.MAX_EVENTS_DEFAULT). `leave_out`:
    paths of files under `path` that are not traces of the run (graph captures: traceattr.load finds them)."""
    _check_arguments("load", path, rank_map, cache, executor, skip_bad, progress)
    drop_host = (drop_host,) if isinstance(drop_host, str) else drop_host     # one category, not its letters
    if is_store(path):
        return read_store(path)
    with events_limited(max_events):
        decoded, notes = _decode_all(path, skip_bad, jobs, executor, cache, progress, drop_host, leave_out)
    runs = split_runs(decoded, path, rank_map)
    if len(runs) > 1:
        raise SeveralRunsError(f"{path} holds {len(runs)} separate runs, never merged: "
                               f"{describe_runs(runs, decoded)}; point at one run's folder or file "
                               "(traceattr.load_runs or `traceattr summarize` report each run)",
                               [run.name for run in runs])
    return assemble(decoded, notes=notes, skip_bad=skip_bad, rank_map=rank_map, origin=str(path))


def _check_arguments(function: str, path, rank_map, cache, executor, skip_bad, progress) -> None:
    """TypeErrors that name the argument, before pathlib, discovery or the cache code meet it."""
    check_path_argument(path, "path", function)
    check_load_values(function, rank_map=rank_map, cache=cache, executor=executor, skip_bad=skip_bad,
                      progress=progress)


def load_runs(path: str | Path, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
              jobs: int | None = None, executor: Executor | None = None, cache: bool | FileCache = True,
              progress: bool = False, drop_host: Collection[str] = (),
              max_events: int | None = None, leave_out: Collection[str] = ()) -> list[tuple[str, TraceSet]]:
    """Like load, but a folder holding several runs (io/runs.py) gives one (name, TraceSet) per run, in
    time order, instead of an error; a single run is [(".", traceset)]."""
    _check_arguments("load_runs", path, rank_map, cache, executor, skip_bad, progress)
    if is_store(path):
        return [(".", read_store(path))]
    with events_limited(max_events):
        decoded, notes = _decode_all(path, skip_bad, jobs, executor, cache, progress, drop_host, leave_out)
    runs = split_runs(decoded, path, rank_map)
    return [(run.name, assemble([decoded[i] for i in run.members], notes=notes, skip_bad=skip_bad,
                                rank_map=rank_map, origin=str(Path(path) / run.name)))
            for run in runs]


def _decode_all(path, skip_bad, jobs, executor, cache, progress, drop_host,
                leave_out=()) -> tuple[list[DecodedFile], list[str]]:
    """Every trace file under `path` but those in `leave_out`, decoded; files that are not traces (or broken,
    with skip_bad) are left out with a note."""
    executor = as_executor(executor)
    notes: list[str] = []
    inputs = discover(path)
    found = inputs.found_files()         # raises what the walk found wrong, its notes named
    notes.extend(inputs.notes)
    manifests = set(inputs.manifests)
    # each file with the stat the walk took (the cache key reads it: no second look), its path as Path writes it
    files = [FoundFile(str(Path(f)), f.stat) for f in _kept([f for f in found if f not in manifests], leave_out)]
    file_cache = FileCache.of(cache)
    decoded: list[DecodedFile] = []
    with closing(decode_paths(files, jobs=jobs, executor=executor, cache=file_cache, progress=progress)) as results:
        for result in successes(results, skip_bad, notes):
            decoded.append(_drop_host(result, drop_host) if drop_host else result)
    return decoded, notes


def _kept(files: list[FoundFile], leave_out: Collection[str]) -> list[FoundFile]:
    """`files` but those `leave_out` names, links resolved: by the file the walk's stat found (the graph
    captures traceattr.load found in the same walk), else, for a path the walk did not give, by realpath
    (an lstat per part of each file, only then)."""
    if not leave_out:
        return files
    by_text = {str(f): f for f in files}
    named = [str(p) for p in leave_out]
    same = {_identity(by_text[p]) for p in named if p in by_text}
    others = {os.path.realpath(p) for p in named if p not in by_text}
    return [f for f in files if _identity(f) not in same and not (others and os.path.realpath(str(f)) in others)]


def _identity(found: FoundFile) -> tuple[int, int]:
    return found.stat.st_dev, found.stat.st_ino


def assemble(decoded: list[DecodedFile], *, notes: list[str] | None = None, skip_bad: bool = False,
             rank_map: dict[str, int] | None = None, origin: str = "input") -> TraceSet:
    """Assign ranks and windows to decoded files (from any executor) and build the TraceSet."""
    kept, notes = place_files(decoded, notes=notes, skip_bad=skip_bad, rank_map=rank_map, origin=origin)
    return TraceSet(
        device=_stack([(f.device, c.rank, w) for f, c, w in kept], S.DEVICE_SCHEMA),
        host=_stack([(f.host, c.rank, w) for f, c, w in kept], S.HOST_SCHEMA),
        markers=_stack([(f.markers, c.rank, w) for f, c, w in kept], S.MARKER_SCHEMA),
        files=files_table(kept),
        notes=tuple(notes),
    )


def place_files(decoded: list[DecodedFile], *, notes: list[str] | None = None, skip_bad: bool = False,
                rank_map: dict[str, int] | None = None,
                origin: str = "input") -> tuple[list[tuple[DecodedFile, RankChoice, int]], list[str]]:
    """assemble() without the tables: each kept file with its rank choice and window, and the notes. Only
    the files' header facts are read (a map-reduce driver holds those, never the tables)."""
    notes = list(notes or [])
    if not decoded:
        detail = f" ({'; '.join(notes)})" if notes else ""
        raise NoTracesError(origin, f"{origin}: no readable trace files{detail}")
    paths = [d.path for d in decoded]
    choices, rank_notes = resolve_ranks(paths, [d.json_rank for d in decoded], rank_map, root=origin)
    notes.extend(rank_notes)
    notes.extend(f"{d.path}: rank {c.rank} is outside distributedInfo.world_size {d.world_size} "
                 f"(ranks 0 to {d.world_size - 1})"
                 for d, c in zip(decoded, choices) if 0 < d.world_size <= c.rank)
    spans = [placement_span(d) for d in decoded]
    windows = order_windows(paths, [c.rank for c in choices], [s for s, _ in spans], [e for _, e in spans])
    kept = []
    for file, choice, (window, problem) in zip(decoded, choices, windows):
        if problem is not None:
            if not skip_bad:
                raise TraceDiscoveryError(problem)
            notes.append(f"skipped {file.path}: {problem}")
            continue
        kept.append((file, choice, window))
        notes.extend(file.notes)
    return kept, notes


def one_file(decoded: DecodedFile) -> TraceSet:
    """One decoded file as a TraceSet of rank 0, window 0: what a map step over files analyses (the real
    rank and window depend on every file; the reduce sets them, see analysis/summary_plan.py)."""
    kept = [(decoded, RankChoice(0, S.RANK_ASSUMED), 0)]
    return TraceSet(device=_stack([(decoded.device, 0, 0)], S.DEVICE_SCHEMA, keep_coded=True),
                    host=_stack([(decoded.host, 0, 0)], S.HOST_SCHEMA),
                    markers=_stack([(decoded.markers, 0, 0)], S.MARKER_SCHEMA),
                    files=files_table(kept), notes=tuple(decoded.notes))


def drop_host(file: DecodedFile, categories: Collection[str]) -> DecodedFile:
    """`file` (a DecodedFile, or a TraceSet: anything with a host table) without the host rows of these
    categories."""
    return _drop_host(file, categories) if categories else file


def _drop_host(file: DecodedFile, categories: Collection[str]) -> DecodedFile:
    dropped = pc.is_in(file.host.column(S.CATEGORY), value_set=pa.array(list(categories), pa.string()))
    if not pc.any(dropped).as_py():       # nothing to drop (e.g. dropped already): no copy of the table
        return file
    return dataclasses.replace(file, host=file.host.filter(pc.invert(dropped)))


def _stack(parts: list[tuple[pa.Table, int, int]], schema: pa.Schema, keep_coded: bool = False) -> pa.Table:
    """The parts as one table of `schema`'s types; `keep_coded`: but a coded name column stays so
    (_coded_kept: a one-file map step's). A TraceSet's texts are always plain strings."""
    tables = []
    for table, rank, window in parts:
        rows = table.num_rows
        table = table.add_column(0, schema.field(S.WINDOW), _int32s(rows, window))
        table = table.add_column(0, schema.field(S.RANK), _int32s(rows, rank))
        if table.schema.names != schema.names:      # a decoded table's are in order already (17 us a table)
            table = table.select(schema.names)
        typed = _coded_kept(schema, table.schema) if keep_coded else schema
        # a cast to the types it has already cost a small file's map step 70 µs per table
        tables.append(table if table.schema.equals(typed, check_metadata=True) else table.cast(typed))
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _int32s(rows: int, value: int) -> pa.Array:
    """A column of `rows` times `value`; zeros from calloc, whose pages stay unmapped until written (a map
    step's file is rank 0, window 0: 8 bytes a row that take no memory)."""
    return arrow_numbers(np.zeros(rows, np.int32) if value == 0 else np.full(rows, value, np.int32), pa.int32())


def _coded_kept(schema: pa.Schema, found: pa.Schema) -> pa.Schema:
    """`schema`, with the name column of `found` kept as it is when it is a dictionary of strings (a
    one-file map step's coded kernel names, engine/units.coded_names: one_file must not expand them;
    the map step reads them through dictionary codes, filters and to_numpy only). Any other column takes
    the schema's type."""
    name = found.field(S.NAME)
    coded = pa.types.is_dictionary(name.type) and name.type.value_type == schema.field(S.NAME).type
    if not coded:
        return schema
    last = _LAST_CODED.get(id(schema))       # made once per schema and coded type (22 us, once a file)
    if last is None or last[0] is not schema or not last[1].equals(name):
        last = _LAST_CODED[id(schema)] = (schema, name, pa.schema([name if field.name == S.NAME else field
                                                                   for field in schema]))
    return last[2]


_LAST_CODED: dict[int, tuple[pa.Schema, pa.Field, pa.Schema]] = {}


def files_table(kept: list) -> pa.Table:
    """One row per kept (file, rank choice, window), in (rank, window) order (schema.FILE_SCHEMA)."""
    kept = sorted(kept, key=lambda item: (item[1].rank, item[2]))
    files = [f for f, _, _ in kept]
    values = {S.RANK: [c.rank for _, c, _ in kept], S.WINDOW: [w for _, _, w in kept],
              S.RANK_SOURCE: [c.source for _, c, _ in kept],
              **{name: [getattr(f, attribute) for f in files] for name, attribute in _FILE_FACTS}}
    # numbers through numpy (a pa.array per column was half a one-file map's files table, 0.1 ms); texts on
    # the system allocator: arrow's default pool kept the builders' doubling buffers of the text columns
    # (device properties and metadata, ~8 KB a file), 3.5x the table at 1024 files (30 MB RSS for 8 MB)
    pool = pa.system_memory_pool()
    return pa.Table.from_arrays(
        [arrow_numbers(np.array(values[field.name], NUMPY_TYPES[field.type]), field.type)
         if field.type in NUMPY_TYPES else pa.array(values[field.name], field.type, memory_pool=pool)
         for field in S.FILE_SCHEMA], schema=S.FILE_SCHEMA)


_FILE_FACTS = ((S.PATH, "path"), (S.WORLD_SIZE, "world_size"), (S.ERA, "era"), (S.BASE_TIME_NS, "base_time_ns"),
               (S.START_NS, "start_ns"), (S.END_NS, "end_ns"), (S.EVENTS, "events"),
               (S.NEGATIVE_DURATIONS, "negative_durations"), (S.ABSURD_DURATIONS, "absurd_durations"),
               (S.DEVICE_PROPERTIES, "device_properties"), (S.METADATA, "metadata"))
