"""`convert` with the workers writing: each worker decodes one file and writes its store partitions straight
into the store's temporary folder (on the shared output storage), and only the file's header facts travel
back. The driver then assigns ranks and windows (which need every file), renames each staged partition to
its `rank=R/window=W` place (a rename: no data moves), writes files.parquet and the metadata file last, and
renames the folder into place: the store is committed once, or not at all.

Each staged partition is written under a temporary name and renamed, so a worker killed halfway leaves
no partition that looks complete; the whole temporary folder is removed when anything fails.
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

import pyarrow as pa
import pyarrow.parquet as pq

from traceattr import schema as S
from traceattr.io.decode import DecodedFile
from traceattr.io.discover import find_trace_files
from traceattr.io.load import assemble
from traceattr.io.parallel import FileFailure, cached_decode_task, decode_files, successes
from traceattr.io.store import TABLE_SCHEMAS, _begin, _commit, _schema_text, store_sources
from traceattr.io.summaries import is_capture_manifest

STAGING = "_staging"


@dataclasses.dataclass(frozen=True)
class StagedFile:
    """What a worker sends back: the decoded file without its tables, and where their rows went."""
    facts: DecodedFile
    folder: str            # staging folder of this file, holding <table>.parquet
    rows: dict             # table -> row count


def stage_file(path: str, shown_path: str | None = None, *, staging: str,
               cache_folder: str | None = None) -> StagedFile | FileFailure:
    """In a worker: decode one file and write its device/host/markers tables under `staging`."""
    decoded, _ = cached_decode_task(path, shown_path or path, cache_folder)
    if isinstance(decoded, FileFailure):
        return decoded
    folder = Path(staging) / hashlib.sha256(decoded.path.encode()).hexdigest()[:24]
    folder.mkdir(parents=True, exist_ok=True)
    rows = {}
    for name in TABLE_SCHEMAS:
        table = getattr(decoded, name)
        rows[name] = table.num_rows
        tmp = folder / f".{name}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, folder / f"{name}.parquet")       # atomic per partition
    return StagedFile(dataclasses.replace(decoded, device=None, host=None, markers=None), str(folder), rows)


def convert_files(path: str, out: str, *, jobs: int | None = None, executor: Executor | None = None,
                  skip_bad: bool = False, rank_map: dict[str, int] | None = None, cache_folder: str | None = None,
                  progress: bool = False, overwrite: bool = False):
    """Write the traces under `path` as a store at `out`, the partitions written by the workers.
    Returns the store's files table and its row count per table."""
    paths = [str(f) for f in find_trace_files(path) if not is_capture_manifest(f)]
    target, tmp = _begin(out, overwrite)
    try:
        staging = tmp / STAGING
        staging.mkdir()
        task = functools.partial(stage_file, staging=str(staging.resolve()), cache_folder=cache_folder)
        staged, notes = [], []
        with closing(decode_files(paths, jobs=jobs, executor=executor, progress=progress, task=task)) as results:
            staged.extend(successes(results, skip_bad, notes))
        empty = {name: pa.schema([f for f in schema if f.name not in (S.RANK, S.WINDOW)]).empty_table()
                 for name, schema in TABLE_SCHEMAS.items()}
        hollow = assemble([dataclasses.replace(s.facts, **empty) for s in staged], notes=notes, skip_bad=skip_bad, rank_map=rank_map,
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
                partitions.append([rank, window, item.rows[name]])
            tables[name] = {"rows": sum(p[2] for p in partitions), "partitions": partitions,
                            "schema": _schema_text(schema)}
        shutil.rmtree(staging)
        kept = files.column(S.PATH).to_pylist()
        sources = store_sources(kept) if all(os.path.exists(p) for p in kept) else []
        _commit(tmp, target, tables, files, hollow.notes, str(path), sources)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return files, {name: meta["rows"] for name, meta in tables.items()}


def convert_traces(path: str, out: str, *, jobs: int | None = None, scheduler: str | None = None,
                   skip_bad: bool = False, cache: bool = True, progress: bool = False, overwrite: bool = False):
    """convert_files for the CLI: `scheduler` (a Dask address) runs the workers, `cache` uses the file cache."""
    from contextlib import nullcontext

    from traceattr.io.cache import cache_dir_for

    pool = nullcontext(None)
    if scheduler:
        from traceattr.io.cluster import dask_executor
        pool = dask_executor(scheduler)
    with pool as executor:
        return convert_files(path, out, jobs=jobs, executor=executor, skip_bad=skip_bad, progress=progress,
                             cache_folder=str(cache_dir_for(path)) if cache else None, overwrite=overwrite)
