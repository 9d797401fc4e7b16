"""Runners: where the map steps of a plan run, over trace files or over a loaded TraceSet.

`Runner` maps trace files: in this process, on a process pool of `jobs`, or on `executor` (any
concurrent.futures.Executor, or a Dask Client's), each file decoded (or read from the file cache) where its
map runs, results in the order of the paths. `TraceSetRunner` maps the files of a TraceSet already in
memory, in this process. Both take the same UnitTask (engine/units.py), so an analysis written once runs on
either source, and later maps of a plan (the files of two ranks, of a collective's cut) go through the same
runner as the first.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from traceattr.allocator import small_arrays_returned
from traceattr.engine.units import DecodeTask, UnitTask, file_slices, file_task
from traceattr.io.cluster import cluster_watch
from traceattr.io.discover import Inputs
from traceattr.io.failure import FileFailure
from traceattr.io.parallel import decode_files, decodes_here, fold_files
from traceattr.model.traceset import TraceSet


@dataclass(frozen=True)
class Runner:
    """Maps over trace files: a process pool of `jobs`, or `executor`."""
    jobs: int | None = None
    executor: Any = None
    cache_folder: str | None = None
    progress: bool = False
    inputs: Inputs | None = None        # the files as discovered: each goes to its map with its stat
    spill_folder: str | None = None     # cache off: the command's spill (io/spill.py), none decoded twice

    def map(self, paths: list[str], task: DecodeTask | list[DecodeTask], always_pool: bool = False) -> Iterator:
        """task (one for every path, or one per path) over `paths`, results (or FileFailures) in path order;
        `always_pool`: a later map of a run of several files, which must not decode even one file in the
        driver (io.parallel.decode_files)."""
        paths = self._held(paths)
        # a file mapped in this process is kept until the next: a later map of it takes it, not decoding twice
        keep = self.executor is None and decodes_here(len(paths), jobs=self.jobs, always_pool=always_pool)
        if not isinstance(task, list):
            return decode_files(paths, jobs=self.jobs, executor=self.executor, progress=self.progress,
                                task=functools.partial(file_task, task=task, cache_folder=self.cache_folder,
                                                       keep_last=keep, spill_folder=self.spill_folder),
                                always_pool=always_pool)
        tasks = [functools.partial(file_task, task=one, cache_folder=self.cache_folder, keep_last=keep,
                                   spill_folder=self.spill_folder) for one in task]
        return decode_files(paths, jobs=self.jobs, executor=self.executor, progress=self.progress, tasks=tasks,
                            always_pool=always_pool)

    def folds_on_cluster(self, files: int) -> bool:
        """Whether a first map over `files` files runs as a fold on a Dask cluster (fold)."""
        return files > 1 and cluster_watch(self.executor) is not None

    def folds(self, files: int) -> bool:
        """Whether a first map over `files` files runs as a fold (fold): on a Dask cluster, or on this
        machine's process pool (`jobs` > 1)."""
        return self.folds_on_cluster(files) or (self.executor is None and not self.decodes_here(files) and files > 1)

    def fold(self, paths: list[str], task: DecodeTask, state: Callable[[], Any],
             stop: Callable[[FileFailure], bool] | None = None) -> Any:
        """`task` over `paths`, each file's part folded into a state (`state()` makes an empty one, with
        update(index, part), skip(index, FileFailure), combine(other)); the one state of every file. Where
        the runner folds (`folds`: a process pool, a Dask cluster), each run of files folds into a state
        where it is mapped (fold_task; io.parallel.fold_files) and the states combine in order; elsewhere the
        maps run as `map` runs them and one state takes each result as it comes, and a failure for which
        `stop(failure)` holds raises its error at once (a fold keeps its failures in the state, in order)."""
        if not self.folds(len(paths)):
            folded = state()
            with contextlib.closing(self.map(paths, task)) as results:
                for index, result in enumerate(results):
                    if isinstance(result, FileFailure) and stop is not None and stop(result):
                        raise result.exception()
                    (folded.skip if isinstance(result, FileFailure) else folded.update)(index, result)
            return folded
        paths = self._held(paths)
        folded = fold_files(paths, functools.partial(fold_task, task=task, state=state, cache_folder=self.cache_folder,
                                              spill_folder=self.spill_folder),
                            jobs=self.jobs, executor=self.executor if self.folds_on_cluster(len(paths)) else None,
                            progress=self.progress)
        return folded if folded is not None else state()

    def _held(self, paths: list[str]) -> list[str]:
        """`paths` with the stat discovery took of each (io.discover.FoundFile): the file cache's key needs
        no second look (later maps name files by the text of the files table)."""
        return self.inputs.held(paths) if self.inputs is not None else paths

    def decodes_here(self, files: int) -> bool:
        """Whether a map over `files` files decodes in this process (io.parallel.decode_files' rule; a
        later map of several files' run never does)."""
        return decodes_here(files, jobs=self.jobs, executor=self.executor)

    def reducing_only(self, files: int):
        """allocator.small_arrays_returned while the driver only reduces: when workers decode every one of
        `files` files (and so every later map of their run)."""
        return small_arrays_returned(not self.decodes_here(files))


def fold_task(run: list[tuple[int, str, str]], *, task: DecodeTask, state: Callable[[], Any],
              cache_folder: str | None = None, spill_folder: str | None = None):
    """In a worker: (position, path to open, path as shown) of consecutive files, each mapped and folded (a
    fold is a command's first map of its files: the spill is written, not read)."""
    folded = state()
    for index, target, shown in run:
        result = file_task(target, shown, task=task, cache_folder=cache_folder, spill_folder=spill_folder,
                           first_map=True)
        (folded.skip if isinstance(result, FileFailure) else folded.update)(index, result)
    return folded


@dataclass(frozen=True)
class TraceSetRunner:
    """Maps over the files of a loaded TraceSet, in this process (its tables are here already)."""
    traceset: TraceSet
    jobs: int | None = 1
    executor: Any = None
    cache_folder: str | None = None
    progress: bool = False
    inputs: None = None                 # as Runner's: no walk found these files

    def map(self, paths: list[str], task: UnitTask | list[UnitTask], always_pool: bool = False) -> Iterator:
        tasks = [task] * len(paths) if isinstance(task, UnitTask) else task
        found = dict(file_slices(self.traceset, set(paths)))
        for path, one_task in zip(paths, tasks):
            yield one_task.on_slice(found[path], path)

    def decodes_here(self, files: int) -> bool:
        return True

    def reducing_only(self, files: int):
        return contextlib.nullcontext()
