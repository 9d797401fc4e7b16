"""`convert` with the workers writing: each worker decodes one file and writes its store partitions straight
into the store's temporary folder (on the shared output storage), and only the file's header facts travel
back. The driver then assigns ranks and windows (which need every file), renames each staged partition to
its `rank=R/window=W` place (a rename: no data moves), writes files.parquet and the metadata file last, and
renames the folder into place: the store is committed once, or not at all.

Each staged partition is written under a temporary name and renamed, so a worker killed halfway leaves
no partition that looks complete; the whole temporary folder is removed when anything fails. The worker
hashes each partition it wrote (sha256, read back from its page cache) and sends the digest with the row
counts: the driver reads no partition to seal the store (io/store.py).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
from concurrent.futures import Executor
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traceattr import schema as S
from traceattr.io.decode import DecodedFile
from traceattr.io.discover import find_trace_files
from traceattr.io.load import assemble
from traceattr.io.parallel import FileFailure, cached_decode_task, decode_files, successes
from traceattr.io.runs import SeveralRunsError, describe_runs, split_runs
from traceattr.io.store import (TABLE_SCHEMAS, _begin, _commit, _schema_text, building, file_sha256,
                                 store_sources)
from traceattr.io.summaries import is_capture_manifest
from traceattr.io.summaries import problems_by_run
from traceattr.io.cache import FileCache
from traceattr.io.cluster import executor_pool

STAGING = "_staging"
_EMPTY = {name: pa.schema([f for f in schema if f.name not in (S.RANK, S.WINDOW)]).empty_table()
          for name, schema in TABLE_SCHEMAS.items()}


def hollow(decoded: DecodedFile) -> DecodedFile:
    """A decoded file's header facts for the trip to the driver: no tables, but one host row per process
    (io/runs.py tells runs apart by their processes)."""
    pid = np.asarray(decoded.host.column(S.PID).to_numpy(), dtype=np.int64)
    first = np.unique(pid, return_index=True)[1]          # each process's first row, in pid order
    # filter, then take from those few rows: a take on the chunked host table concatenated all of it first
    keep = np.zeros(len(pid), bool)
    keep[first] = True
    rows = decoded.host.filter(pa.array(keep))
    return dataclasses.replace(decoded, device=None, markers=None,
                               host=rows.take(pa.array(np.searchsorted(np.sort(first), first))))


def refill(facts: DecodedFile) -> DecodedFile:
    """hollow() facts with empty device and marker tables, as assemble() expects (one shared pair)."""
    return dataclasses.replace(facts, device=_EMPTY["device"], markers=_EMPTY["markers"])


def check_one_run(facts: list[DecodedFile], path, rank_map) -> None:
    """SeveralRunsError, as load() raises it, when the files under `path` are several runs."""
    runs = split_runs(facts, path, rank_map)
    if len(runs) > 1:
        raise SeveralRunsError(f"{path} holds {len(runs)} separate runs, never merged: "
                               f"{describe_runs(runs, facts)}; point at one run's folder", [r.name for r in runs],
                               split=runs)


@dataclasses.dataclass(frozen=True)
class StagedFile:
    """What a worker sends back: the decoded file without its tables, and where their rows went."""
    facts: DecodedFile
    folder: str            # staging folder of this file, holding <table>.parquet
    rows: dict             # table -> row count
    digests: dict          # table -> sha256 of its staged parquet file


def stage_file(path: str, shown_path: str | None = None, *, staging: str,
               cache_folder: str | None = None) -> StagedFile | FileFailure:
    """In a worker: decode one file and write its device/host/markers tables under `staging`."""
    decoded, _ = cached_decode_task(path, shown_path or path, cache_folder)
    if isinstance(decoded, FileFailure):
        return decoded
    folder = Path(staging) / hashlib.sha256(decoded.path.encode()).hexdigest()[:24]
    try:
        # never parents=True: a task still running after a failed convert removed its temporary folder
        # (cancelling does not stop a running Dask task) would create that folder again, left for good
        folder.mkdir(exist_ok=True)
    except FileNotFoundError:
        return FileFailure(decoded.path, f"the convert's staging folder {staging} is gone (the convert failed, "
                                         "was stopped, or another process removed it)", False)
    rows, digests = {}, {}
    for name in TABLE_SCHEMAS:
        table = getattr(decoded, name)
        rows[name] = table.num_rows
        tmp = folder / f".{name}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        digests[name] = file_sha256(tmp)
        os.replace(tmp, folder / f"{name}.parquet")       # atomic per partition
    return StagedFile(hollow(decoded), str(folder), rows, digests)


def convert_files(path: str, out: str, *, jobs: int | None = None, executor: Executor | None = None,
                  skip_bad: bool = False, rank_map: dict[str, int] | None = None, cache_folder: str | None = None,
                  progress: bool = False, overwrite: bool = False):
    """Write the traces under `path` as a store at `out`, the partitions written by the workers.
    Returns the store's files table and its row count per table."""
    paths = [str(f) for f in find_trace_files(path) if not is_capture_manifest(f)]
    target, tmp = _begin(out, overwrite)
    with building(tmp, target):
        staging = tmp / STAGING
        staging.mkdir()
        task = functools.partial(stage_file, staging=str(staging.resolve()), cache_folder=cache_folder)
        staged, notes = [], []
        with closing(decode_files(paths, jobs=jobs, executor=executor, progress=progress, task=task)) as results:
            staged.extend(successes(results, skip_bad, notes))
        facts = [refill(item.facts) for item in staged]
        check_one_run(facts, path, rank_map)
        hollow = assemble(facts, notes=notes, skip_bad=skip_bad, rank_map=rank_map,
                          origin=str(path))
        files = hollow.files
        place = {p: (r, w) for p, r, w in zip(files.column(S.PATH).to_pylist(), files.column(S.RANK).to_pylist(),
                                              files.column(S.WINDOW).to_pylist())}
        tables = {}
        for name, schema in TABLE_SCHEMAS.items():
            (tmp / name).mkdir()
            partitions = []
            for item in staged:            # load order: the row order of the TraceSet's tables
                if item.facts.path not in place or not item.rows[name]:
                    continue
                rank, window = place[item.facts.path]
                part = tmp / name / f"{S.RANK}={rank}" / f"{S.WINDOW}={window}"
                part.mkdir(parents=True)
                os.rename(Path(item.folder) / f"{name}.parquet", part / "part-0.parquet")
                partitions.append([rank, window, item.rows[name], item.digests[name]])
            tables[name] = {"rows": sum(p[2] for p in partitions), "partitions": partitions,
                            "schema": _schema_text(schema)}
        shutil.rmtree(staging)
        kept = files.column(S.PATH).to_pylist()
        sources = store_sources(kept) if all(os.path.exists(p) for p in kept) else []
        _commit(tmp, target, tables, files, hollow.notes, str(path), sources, overwrite,
                problems_by_run(path, ["."])["."])
    return files, {name: meta["rows"] for name, meta in tables.items()}


def convert_traces(path: str, out: str, *, jobs: int | None = None, scheduler: str | None = None,
                   skip_bad: bool = False, cache: bool = True, cache_dir: str | None = None,
                   rank_map: dict[str, int] | None = None, progress: bool = False, overwrite: bool = False):
    """convert_files for the CLI: `scheduler` (a Dask address) runs the workers, `cache` uses the file
    cache (in `cache_dir`, else the default folder)."""

    with executor_pool(None, scheduler) as executor:
        return convert_files(path, out, jobs=jobs, executor=executor, skip_bad=skip_bad, rank_map=rank_map,
                             progress=progress, overwrite=overwrite,
                             cache_folder=str(FileCache(cache_dir).dir.root) if cache else None)
