"""`traceattr convert` as a plan on the engine's runner, like every other command's maps.

    map        decode a file where the runner maps it and write its store partitions into the store's
               temporary folder, hashed (io.store_writer.stage_file: the workers write); back come its header
               facts, row counts and digests (io.store_writer.StagedFile)
    state      Staged: the staged files in file order (a file that could not be read keeps its position)
    finalize   once every file is placed (engine.placement.placed, as load() places them), each kept file's
               partitions renamed to their `rank=R/window=W` place (no data moves): the store metadata's
               tables; io.store then writes files.parquet and the sealed metadata, and renames the store
               into place, once or not at all

Locally, on a process pool (--jobs) and on a Dask cluster (--scheduler): where the runner folds, each run of
files is staged into a state on its worker and the states combine in order (engine.runner.Runner.fold).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

from traceattr import schema as S
from traceattr.engine.placement import Placement, placed
from traceattr.engine.runner import Runner
from traceattr.engine.units import WholeFileTask, forget_last_file
from traceattr.io.cache import FileCache
from traceattr.io.cluster import executor_pool
from traceattr.io.discover import FoundFile, discover
from traceattr.io.failure import FileFailure
from traceattr.io.parallel import as_executor, successes
from traceattr.io.store_writer import STAGING, StagedFile, stage_file
from traceattr.io.store import TABLE_SCHEMAS, _begin, _commit, _schema_text, building, store_sources
from traceattr.io.summaries import problems_by_run


class Staged:
    """convert's state: the staged files from position `first` on, in file order (None for a file that could
    not be read), and those files' failures in order. `store`: the store's temporary folder, where finalize
    moves the partitions."""

    def __init__(self, store: str) -> None:
        self.store, self.first = store, 0
        self.files: list[StagedFile | None] = []
        self.failures: list[FileFailure] = []

    def update(self, index: int, staged: StagedFile | None) -> None:
        if not self.files:
            self.first = index
        assert index == self.first + len(self.files), "files arrive in source order"
        self.files.append(staged)

    def skip(self, index: int, failure: FileFailure) -> None:
        self.update(index, None)
        self.failures.append(failure)

    def combine(self, other: "Staged") -> None:
        """Take the files of `other` (a state of the files right after this one's)."""
        if not self.files:
            self.first = other.first
        assert not other.files or other.first == self.first + len(self.files), "states combine in order"
        self.files += other.files
        self.failures += other.failures

    def facts(self) -> list:
        """Every file's header facts, in file order (None: not read), for the placement."""
        return [staged.facts if staged is not None else None for staged in self.files]

    def finalize(self, placement: Placement) -> dict:
        """The store metadata's tables: each placed file's partitions renamed to `TABLE/rank=R/window=W`, listed
        in file order (the row order of the TraceSet a load gives), with their rows and digests."""
        root = Path(self.store)
        rank_of, window_of = placement.rank_of.tolist(), placement.window_of.tolist()
        tables = {}
        for name, schema in TABLE_SCHEMAS.items():
            (root / name).mkdir()
            partitions = []
            for at, staged in enumerate(self.files, start=self.first):
                if staged is None or rank_of[at] < 0 or not staged.rows[name]:
                    continue
                rank, window = rank_of[at], window_of[at]
                part = root / name / f"{S.RANK}={rank}" / f"{S.WINDOW}={window}"
                part.mkdir(parents=True)
                os.rename(Path(staged.folder) / f"{name}.parquet", part / "part-0.parquet")
                partitions.append([rank, window, staged.rows[name], staged.digests[name]])
            tables[name] = {"rows": sum(p[2] for p in partitions), "partitions": partitions,
                            "schema": _schema_text(schema)}
        return tables


def convert_files(path: str, out: str, *, jobs: int | None = None, executor: Any = None,
                  skip_bad: bool = False, rank_map: dict[str, int] | None = None, cache_folder: str | None = None,
                  progress: bool = False, overwrite: bool = False, graph_captures=None):
    """Write the traces under `path` as a store at `out`, the partitions written where each file is mapped
    (this process, a pool of `jobs`, or `executor`: a Dask client or its executor). Returns the store's files
    table and its row count per table. `graph_captures(runner, path, paths)`: (catalog, the paths that are not
    captures, notes), analysis/graph_capture.py's first stage given by the caller (a floor above): the
    captures are never windows, the store keeps the catalog."""
    inputs = discover(path)        # the one walk: the files, the captures, the capture problems
    manifests = set(inputs.manifests)
    # each file with the stat the walk took (cache keys and the store's sources read it), as Path writes it
    paths = [FoundFile(str(Path(f)), f.stat) for f in inputs.found_files(noted=False) if f not in manifests]
    target, tmp = _begin(out, overwrite)
    try:
        with building(tmp, target):
            staging = tmp / STAGING
            staging.mkdir()
            runner = Runner(jobs, as_executor(executor), cache_folder, progress)
            catalog, capture_notes = None, []
            if graph_captures is not None:
                catalog, paths, capture_notes = graph_captures(runner, inputs, paths)
            task = WholeFileTask(functools.partial(stage_file, staging=str(staging.resolve())))
            # a file that fails the convert stops a map in this process at once; a fold's failures come in its state
            staged = runner.fold(paths, task, functools.partial(Staged, str(tmp)),
                                 stop=lambda failure: not (failure.not_a_trace or skip_bad))
            notes: list[str] = list(capture_notes)
            list(successes(staged.failures, skip_bad, notes))    # raised or noted in file order, as load() does
            placement = placed(staged.facts(), notes=notes, skip_bad=skip_bad, rank_map=rank_map, origin=str(path))
            tables = staged.finalize(placement)
            shutil.rmtree(staging)
            files = placement.files
            found_as = {str(p): p for p in paths}
            kept = [found_as.get(p, p) for p in files.column(S.PATH).to_pylist()]
            sources = store_sources(kept) if all(isinstance(p, FoundFile) or os.path.exists(p) for p in kept) else []
            _commit(tmp, target, tables, files, placement.notes, str(path), sources, overwrite,
                    problems_by_run(inputs, ["."])["."], catalog)
    finally:
        forget_last_file()        # a map in this process kept its last file: nothing maps it again
    return files, {name: meta["rows"] for name, meta in tables.items()}


def convert_traces(path: str, out: str, *, jobs: int | None = None, scheduler: str | None = None,
                   skip_bad: bool = False, cache: bool = True, cache_dir: str | None = None,
                   rank_map: dict[str, int] | None = None, progress: bool = False, overwrite: bool = False,
                   graph_captures=None):
    """convert_files for the CLI: `scheduler` (a Dask address) runs the maps, `cache` uses the file
    cache (in `cache_dir`, else the default folder)."""
    with executor_pool(None, scheduler) as executor:
        return convert_files(path, out, jobs=jobs, executor=executor, skip_bad=skip_bad, rank_map=rank_map,
                             progress=progress, overwrite=overwrite, graph_captures=graph_captures,
                             cache_folder=str(FileCache(cache_dir).dir.root) if cache else None)
