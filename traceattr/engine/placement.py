"""Where each unit's rows belong: its rank and window, known only once every file's header facts are in
(distributedInfo, file names, --rank-map, the time order of a rank's windows), or given by a loaded TraceSet.

A map step sees one file as rank 0, window 0, and tags what it sends with the file's position (its index in
the source); the driver keeps each file's header facts (driver_facts: no tables) until every file is in,
then places them once, exactly as traceattr.load does. Every state's finalize reads the same Placement.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.io.decode import DecodedFile
from traceattr.io.header import DROP_WARNINGS_KEY, parse_metadata
from traceattr.io.load import files_table, place_files
from traceattr.io.store_writer import check_one_run
from traceattr.model.traceset import TraceSet


@dataclass(frozen=True)
class Placement:
    """The kept files in (rank, window) order (schema.FILE_SCHEMA), the load's notes, and per unit position
    its rank and window (-1: a file the load skipped; one -1 more at the end, for 'no file')."""
    files: pa.Table
    notes: tuple[str, ...]
    rank_of: np.ndarray
    window_of: np.ndarray
    paths: tuple[str, ...]          # per unit position: the file's path as shown

    def paths_of_rank(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        for path, rank in zip(self.paths, self.rank_of.tolist()):
            if rank >= 0:
                found.setdefault(rank, []).append(path)
        return found


def placed(facts: list[DecodedFile], *, notes: list[str], skip_bad: bool, rank_map: dict[str, int] | None,
           origin: str) -> Placement:
    """The placement of files from their header facts (in unit order), as load() assigns ranks and windows;
    several runs raise SeveralRunsError and unplaceable files raise or are skipped, as load() does. A None
    stands for a file that could not be read (a cluster's fold keeps its position): placed nowhere."""
    read = [fact for fact in facts if fact is not None]
    check_one_run(read, origin, rank_map)      # as load(): several runs are never merged
    kept, notes = place_files(read, notes=notes, skip_bad=skip_bad, rank_map=rank_map, origin=origin)
    files = files_table(kept)     # what assemble() gives, without stacking an empty table per file
    del kept
    place = {path: (rank, window) for path, rank, window in zip(
        files.column(S.PATH).to_pylist(), files.column(S.RANK).to_pylist(), files.column(S.WINDOW).to_pylist())}
    unread = (-1, -1)
    rank_of = np.array([place.get(f.path, unread)[0] if f else -1 for f in facts] + [-1], dtype=np.int64)
    window_of = np.array([place.get(f.path, unread)[1] if f else -1 for f in facts] + [-1], dtype=np.int64)
    return Placement(files, tuple(notes), rank_of, window_of, tuple(f.path if f else "" for f in facts))


def traceset_placement(traceset: TraceSet) -> Placement:
    """A loaded TraceSet's placement: its units are its files, in the files table's order."""
    files = traceset.files
    ranks, windows = (np.asarray(files.column(name).to_numpy(), dtype=np.int64) for name in (S.RANK, S.WINDOW))
    return Placement(files, tuple(traceset.notes), np.append(ranks, -1), np.append(windows, -1),
                     tuple(files.column(S.PATH).to_pylist()))


def driver_facts(decoded: DecodedFile) -> DecodedFile:
    """A file's header facts for the trip to the driver, which holds them until every file is in: hollow()
    with only the pids of its host rows (io/runs.py reads nothing else of them: an arrow column costs the
    driver ~1 KB, a table ~16 KB), and of its texts only what the driver reads. Whole, they grow with the
    world size (distributedInfo lists every rank of each process group: 5.5 KB of metadata a file at 1024
    ranks, and 3 KB of device properties), and no map-reduce answer shows them."""
    # of the host rows only their pids, each process once, in pid order, as Python ints: an arrow table of
    # them cost a small file's map 36 us to make and pickle, and the driver 23 us a file to read back
    pids = np.unique(np.asarray(decoded.host.column(S.PID).to_numpy(), dtype=np.int64)).tolist()
    return dataclasses.replace(decoded, device=None, markers=None, host=None, host_pids=tuple(pids),
                               metadata=_driver_metadata(decoded.metadata), device_properties="", phases={},
                               dropped={}, unmapped={})


def _driver_metadata(metadata: str) -> str:
    """The metadata JSON cut to the keys the driver reads: distributedInfo's backend (io/runs.py tells runs
    apart by it) and the profiler's drop warnings (check.loader_rows); "" when it is not a JSON object."""
    found = parse_metadata(metadata)
    if found is None:
        return ""
    info = found.get("distributedInfo")
    kept = {"distributedInfo": {"backend": info["backend"]}} if isinstance(info, dict) and "backend" in info else {}
    if DROP_WARNINGS_KEY in found:
        kept[DROP_WARNINGS_KEY] = found[DROP_WARNINGS_KEY]
    return json.dumps(kept)


def shared_facts(facts: DecodedFile | None) -> DecodedFile | None:
    """The driver's copy of a file's header facts (driver_facts): its texts, the same on every rank, as one
    shared copy. None (a file not read) stays None."""
    if facts is None:
        return None
    return dataclasses.replace(facts, device_properties=sys.intern(facts.device_properties),
                               metadata=sys.intern(facts.metadata))
