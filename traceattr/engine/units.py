"""Units: one trace file as a map step sees it, from a file on disk or from a loaded TraceSet.

Every map step of every analysis runs on a Unit: the file alone as a TraceSet of rank 0 and window 0 (its
real rank and window depend on every file: engine/placement.py), its header facts when the placement is
still to be made, and whether the file cache served it. A UnitTask says what to do with it and how to
prepare the file first (host rows left out, names coded, --comm-pattern rules applied); it travels to the
workers, so its work is a top-level function or a functools.partial of one.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.allocator import give_back_free_heap
from traceattr.attribution.carried import carried_in
from traceattr.attribution.links import launch_status
from traceattr.attribution.sweep import sweep
from traceattr.engine.placement import driver_facts
from traceattr.errors import TraceError
from traceattr.io.codes import dictionary_column
from traceattr.io.comm_rules import apply_patterns
from traceattr.io.decode import DecodedFile
from traceattr.io.discover import stat_of
from traceattr.io.failure import FileFailure
from traceattr.io.limits import out_of_memory
from traceattr.io.load import drop_host, one_file
from traceattr.io.parallel import cached_decode_task
from traceattr.model.graphs import GraphCatalog
from traceattr.model.traceset import TraceSet


@dataclass(frozen=True)
class Unit:
    traceset: TraceSet                  # the file alone, rank 0, window 0
    facts: DecodedFile | None           # its header facts (driver_facts), for a placement still to be made
    from_cache: bool
    path: str                           # as shown to the user
    # links.launch_status per device row, taken before the host rows were left out (UnitTask.statuses)
    launch_status: np.ndarray | None = None
    # (activities, Σ their self ns) left out as carried in (UnitTask.exclude_carried_in); None: none were
    carried_out: tuple[int, int] | None = None
    probed: Any = None                  # host_probe's result on the file's whole host table (UnitTask)


@dataclass(frozen=True)
class UnitTask:
    """work(Unit) on each file, after leaving out the host rows of `drop_host`, coding the device names
    (`coded_names`: the summary levels read them only through their codes) and applying `comm_patterns`."""
    work: Callable[[Unit], Any]
    drop_host: tuple[str, ...] = ()
    coded_names: bool = False
    comm_patterns: tuple[str, ...] = ()
    facts: bool = False                 # keep the header facts (a first map, whose placement is to be made)
    statuses: bool = False              # give the work each device row's launch status (check's unlinked row)
    exclude_carried_in: bool = False    # leave out device activities launched before the window
    graph_catalog: GraphCatalog | None = None   # graph captures the file's replays match (analysis/graph_capture.py)
    # run on the file's whole host table before `drop_host` leaves rows out: what the work needs of the
    # dropped rows (a few runtime calls' enclosing ops), so the bulk of them is still freed before the work
    host_probe: Callable[[pa.Table, pa.Table], Any] | None = None

    def on_decoded(self, decoded: DecodedFile, from_cache: bool = False) -> Any:
        try:
            return self._on_decoded(decoded, from_cache)
        except MemoryError:       # the map's arrays did not fit: the file is named, as a decode's would be
            return FileFailure(decoded.path, out_of_memory("while mapping it"), False)

    def _on_decoded(self, decoded: DecodedFile, from_cache: bool) -> Any:
        probed = self.host_probe(decoded.host, decoded.device) if self.host_probe is not None else None
        if self.coded_names:
            decoded = coded_names(decoded)     # first: the plain names go before the host filter's copy
            give_back_free_heap(events=decoded.events)     # the cache write's holes and the plain names
        # the launch statuses need the cpu ops: those go after them (python frames, never needed, go first)
        later = tuple(c for c in self.drop_host if self.statuses and c == S.CPU_OP)
        decoded = drop_host(decoded, tuple(c for c in self.drop_host if c not in later))   # freed before the work
        give_back_free_heap(events=decoded.events)
        facts = driver_facts(decoded) if self.facts else None
        return self._prepared(one_file(decoded), later, facts, from_cache, decoded.path, probed)

    def on_slice(self, traceset: TraceSet, path: str) -> Any:
        """On one file of a loaded TraceSet (file_slices)."""
        probed = self.host_probe(traceset.host, traceset.device) if self.host_probe is not None else None
        return self._prepared(traceset, self.drop_host, None, False, path, probed)

    def _prepared(self, traceset: TraceSet, drop: tuple[str, ...], facts, from_cache: bool, path: str,
                  probed: Any = None) -> Any:
        """The work on `traceset` with the launch statuses and carried-in activities taken first (when asked),
        then without the host rows of `drop` and (when asked) without the carried-in activities."""
        status = launch_status(traceset) if self.statuses else None
        carried_out = None
        if self.exclude_carried_in:
            carried = carried_in(traceset)
            if carried.any():
                carried_out = (int(carried.sum()), int(sweep(traceset).self_ns[carried].sum()))
                traceset = dataclasses.replace(traceset, device=traceset.device.filter(pa.array(~carried)))
                status = status[~carried] if status is not None else None
        traceset = drop_host(traceset, drop)      # a TraceSet's host rows as a file's: no copy when none go
        return self._work(traceset, facts, from_cache, path, status, carried_out, probed)

    def _work(self, traceset: TraceSet, facts, from_cache: bool, path: str, status=None, carried_out=None,
              probed: Any = None) -> Any:
        if self.graph_catalog is not None:
            traceset = dataclasses.replace(traceset, graph_catalog=self.graph_catalog)
        try:
            return self.work(Unit(apply_patterns(traceset, self.comm_patterns), facts, from_cache, path, status,
                                  carried_out, probed))
        except TraceError as exc:     # a file that breaks an analysis is named like one that breaks decoding
            return FileFailure(path, " ".join(str(exc).split()), False)
        except MemoryError:
            return FileFailure(path, out_of_memory("while mapping it"), False)


@dataclass(frozen=True)
class WholeFileTask:
    """work(DecodedFile) on each file as it was decoded (or read from the file cache), nothing left out or
    coded: `traceattr convert` writes the tables as they are (engine/convert.py)."""
    work: Callable[[DecodedFile], Any]

    def on_decoded(self, decoded: DecodedFile, from_cache: bool = False) -> Any:
        return self.work(decoded)


DecodeTask = Union[UnitTask, WholeFileTask]     # what file_task runs on a decoded file: on_decoded(decoded, from_cache)


def file_task(path: str, shown_path: str | None = None, *, task: DecodeTask, cache_folder: str | None = None,
              keep_last: bool = False, spill_folder: str | None = None, first_map: bool = False):
    """One file, in a worker: decode it (or read the file cache in `cache_folder`) and run `task` on it.
    `keep_last` (maps in this process): keep the last file decoded, so that a later map of the same
    unchanged file (the check's medians, the straggler's cause, the collectives' cut) takes it instead of
    decoding it again; forget_last_file() lets it go when the answer is complete. `spill_folder`: the
    command's spill when the cache is off (io/spill.py), where every later map of a file reads it;
    `first_map`: the command's first map of the file, which has nothing to read there."""
    shown = shown_path or path
    key = _file_key(path, shown, cache_folder) if keep_last else None
    if key is not None and _LAST.key == key:
        decoded, from_cache = _LAST.decoded, _LAST.from_cache
    else:
        _LAST.key = _LAST.decoded = None           # let the last file go before this one is decoded
        decoded, from_cache = cached_decode_task(path, shown, cache_folder, spill_folder, first_map)
        if isinstance(decoded, FileFailure):
            return decoded
        if key is not None:
            _LAST.key, _LAST.decoded, _LAST.from_cache = key, decoded, from_cache
    return task.on_decoded(decoded, from_cache)


class _LastFile:
    key: tuple | None = None
    decoded: DecodedFile | None = None
    from_cache: bool = False


_LAST = _LastFile()


def _file_key(path: str, shown: str, cache_folder: str | None) -> tuple | None:
    """What makes a decoded file the same: the file as it is on disk now, its shown name, the cache folder."""
    try:
        stat = stat_of(path)          # as discovered: the run's one view of the file
    except OSError:
        return None
    return (os.path.abspath(path), shown, cache_folder, stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns)


def forget_last_file() -> None:
    """Let go of the last decoded file (the run is over)."""
    _LAST.key = _LAST.decoded = None


def coded_names(decoded: DecodedFile) -> DecodedFile:
    """`decoded` with its device names as a dictionary column (distinct names in first-seen order, what
    io.codes.dictionary_codes gives), unless they are already: a kernel name repeats on most device rows,
    and as plain text they were the largest column of the map step (14 MiB of the 202 MB trace's 26.5 MiB
    device table, held from the decode to the check). The file cache keeps the plain column (it is written
    before)."""
    column = decoded.device.column(S.NAME)
    if pa.types.is_dictionary(column.type):
        return decoded
    names = dictionary_column(column)
    at = decoded.device.schema.get_field_index(S.NAME)
    return dataclasses.replace(decoded, device=decoded.device.set_column(at, pa.field(S.NAME, names.type), names))


def file_slices(traceset: TraceSet, only: set[str] | None = None) -> Iterator[tuple[str, TraceSet]]:
    """(path, the file alone as rank 0, window 0) per file of a loaded TraceSet (`only`: of these paths), in
    its files table's order: each table sorted once by (rank, window) and sliced, never filtered per file."""
    parts = {name: _slices(getattr(traceset, name)) for name in ("device", "host", "markers", "files")}
    files = traceset.files
    for path, rank, window in zip(files.column(S.PATH).to_pylist(), files.column(S.RANK).to_pylist(),
                                  files.column(S.WINDOW).to_pylist()):
        if only is not None and path not in only:
            continue
        yield path, TraceSet(**{name: _at_zero(found.get((rank, window), getattr(traceset, name).schema.empty_table()))
                                for name, found in parts.items()}, notes=())


def _slices(table: pa.Table) -> dict[tuple[int, int], pa.Table]:
    if table.num_rows == 0:
        return {}
    table = table.take(pc.sort_indices(table, [(S.RANK, "ascending"), (S.WINDOW, "ascending")]))
    rank, window = (np.asarray(table.column(name).to_numpy(), dtype=np.int64) for name in (S.RANK, S.WINDOW))
    starts = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (window[1:] != window[:-1])])
    ends = np.r_[starts[1:], len(rank)]
    return {(int(rank[s]), int(window[s])): table.slice(s, e - s) for s, e in zip(starts, ends)}


def _at_zero(table: pa.Table) -> pa.Table:
    """The table's rank and window columns set to 0, as a map step sees a file."""
    for name in (S.RANK, S.WINDOW):
        at = table.schema.get_field_index(name)
        table = table.set_column(at, table.schema.field(at), pa.array(np.zeros(table.num_rows, np.int32),
                                                                       table.schema.field(at).type))
    return table
