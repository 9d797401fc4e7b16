"""Decode many trace files at once: a process pool by default, or any concurrent.futures.Executor
(a Dask `Client(...).get_executor(pure=False)`), with an optional progress bar on stderr.

Workers return a DecodedFile (small columnar arrow tables) or a plain error record: exceptions are not
shipped back as objects, because TraceFormatError(path, problem) does not survive pickling by its args, and
a file that fails in a worker must be named exactly as the serial path names it.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from traceattr.allocator import give_back_free_heap
from traceattr.errors import TraceError, TraceFormatError, TraceInputError
from traceattr.io.cache import FileCache
from traceattr.io.cluster import cluster_watch, quiet_client
from traceattr.io.spill import spill, spilled
from traceattr.io.decode import DecodedFile, decode_file
from traceattr.io.discover import absolute, stat_of
from traceattr.io.gzipstream import InflateLimit, applied_limit
from traceattr.io.limits import out_of_memory, too_many_events
from traceattr.io.failure import FileFailure  # noqa: F401  (tasks return it; callers import it from here)
from traceattr.io.splitter import NoTraceEventsError


class WorkerCrashError(TraceError):
    """A decoding worker died (killed, out of memory) or the executor broke: exit code 1."""


def as_executor(executor):
    """A Dask distributed Client becomes its Executor (pure=False: two runs on a changed file both run)."""
    get_executor = getattr(executor, "get_executor", None)
    return get_executor(pure=False) if callable(get_executor) else executor


def checked_jobs(jobs) -> int:
    """`jobs` as given (an int of at least 1), or the default for None; anything else is the caller's error."""
    if jobs is None:
        return default_jobs()
    if type(jobs) is bool or not isinstance(jobs, int) or jobs < 1:
        raise TraceInputError(f"jobs must be an integer of at least 1, got {jobs!r}")
    return jobs


def default_jobs() -> int:
    """The cores this process may use (affinity and cgroup-restricted CPU sets included)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # macOS, Windows
        return max(1, os.cpu_count() or 1)


def decode_task(path: str, shown_path: str | None = None) -> DecodedFile | FileFailure:
    """One file, run in a worker. `path` is what the worker opens (absolute for remote workers);
    `shown_path` is how the file is named in results and errors (as the user gave it)."""
    shown = shown_path or path
    try:
        decoded = decode_file(path)
    except NoTraceEventsError as exc:
        return FileFailure(shown, exc.problem, True)
    except TraceFormatError as exc:
        return FileFailure(shown, exc.problem, False)
    except MemoryError:
        return FileFailure(shown, out_of_memory("while decoding it"), False)
    if shown != path:
        decoded.path = shown
        decoded.notes = tuple(note.replace(path, shown) for note in decoded.notes)
    return decoded


@dataclass(frozen=True)
class LimitedTask:
    """A task that decodes within the driver's inflate limit wherever it runs: --max-inflate lives in the
    driver's environment, which Dask workers do not share."""

    task: Callable
    limit: InflateLimit

    def __call__(self, *args, **kwargs):
        with applied_limit(self.limit):
            return self.task(*args, **kwargs)

    @property
    def __name__(self) -> str:
        # Dask names the tasks after this (fold_task-..., file_task-...), as it did before the wrapper
        inner = self.task.func if isinstance(self.task, functools.partial) else self.task
        return getattr(inner, "__name__", type(inner).__name__)


def successes(results: Iterable, skip_bad: bool, notes: list[str]) -> Iterator:
    """The results that are not FileFailures. A failure raises its exception, unless it is "not a trace"
    or `skip_bad` is set: then it becomes a `skipped PATH: problem` line in `notes`."""
    for result in results:
        if isinstance(result, FileFailure):
            if not (result.not_a_trace or skip_bad):
                raise result.exception()
            notes.append(f"skipped {result.path}: {result.problem}")
            continue
        yield result


def cached_decode_task(path: str, shown_path: str | None = None, cache_folder: str | None = None,
                       spill_folder: str | None = None, first_map: bool = False
                       ) -> tuple[DecodedFile | FileFailure, bool]:
    """decode_task through the file cache in `cache_folder` (None: no cache), for tasks that decode on a
    worker: (result, whether the cache served it). Without a cache, `spill_folder`: the command's spill
    (io/spill.py), read before decoding and written after, so a later map of the command decodes nothing.
    `first_map`: no map of this command read the file before, so the spill is only written (a look for a
    file not there yet reads the spill's index again: 0.07 ms a file)."""
    shown = shown_path or path
    if not cache_folder and spill_folder:
        found = None if first_map else spilled(spill_folder, path, shown)
        if found is not None:
            return found, False
        result = decode_task(path, shown)
        if isinstance(result, DecodedFile):
            spill(spill_folder, path, shown, result)
        return result, False
    if not cache_folder:
        return decode_task(path, shown), False
    cache = FileCache(cache_folder)
    hit = over_max_events(cache.get(path), shown)
    if hit is not None:
        if isinstance(hit, FileFailure):
            return FileFailure(shown, hit.problem, hit.not_a_trace), True
        if shown != path:
            hit.path = shown
            hit.notes = tuple(note.replace(path, shown) for note in hit.notes)
        return hit, True
    result = decode_task(path, shown)
    # the decode's holes: the cache write's buffers would come on top
    give_back_free_heap(8 << 20, None if isinstance(result, FileFailure) else result.events)
    if isinstance(result, DecodedFile) or result.not_a_trace:
        cache.put(path, result)
    return result, False


def over_max_events(cached: DecodedFile | FileFailure | None, shown: str) -> DecodedFile | FileFailure | None:
    """A file the cache holds, refused as its decode would be when it has more events than --max-events
    allows now: the map's memory grows per event whether the columns come from the cache or not."""
    limit = InflateLimit.current().max_events
    if isinstance(cached, DecodedFile) and cached.events > limit:
        return FileFailure(shown, too_many_events(shown, cached.events, limit).problem, False)
    return cached


def decode_files(paths: list[str], *, jobs: int | None = None, executor: cf.Executor | None = None,
                 progress: bool = False, task: Callable = decode_task, tasks: list[Callable] | None = None,
                 always_pool: bool = False) -> Iterable[DecodedFile | FileFailure]:
    """Decode each path; yield results in the order of `paths`. `task(path, shown_path)` runs per file
    (default decode_task; a picklable top-level function or functools.partial of one, like the map step
    of analysis/summary_plan.py, which returns a small per-file aggregate instead of the tables). `tasks`: one
    task per path instead (per-file arguments, e.g. analysis/multirank_plan.py's cut times of that file).

    No executor and jobs == 1 (or a single file, unless `always_pool`: a later map of small results over
    one file of a run must not put that file's decode in the driver): decode in this process. Otherwise at
    most `jobs` (or twice the executor's workers) files are in flight, so memory is bounded by what the
    workers hold plus the finished columnar results. `progress` shows a bar only when stderr is a terminal.
    """
    sizes = [_size(p) for p in paths]
    jobs = checked_jobs(jobs)
    with _progress_bar(len(paths), sum(sizes), progress) as advance:
        if decodes_here(len(paths), jobs=jobs, executor=executor, always_pool=always_pool):
            for index, (path, size) in enumerate(zip(paths, sizes)):
                result = (tasks[index] if tasks else task)(path, path)
                if index == len(paths) - 1:     # the next file would fault the pages in again: only the last
                    give_back_free_heap()       # file's holes go back, before the reduce and the table
                advance(size)
                yield result
            return
        limit = InflateLimit.current()      # resolved here, on the driver, and sent with every task
        task = LimitedTask(task, limit)
        tasks = [LimitedTask(one, limit) for one in tasks] if tasks else None
        if executor is not None:
            with quiet_client(executor):
                yield from _run(executor, paths, sizes, advance, window=2 * max(jobs, 2), remote=True, task=task,
                                tasks=tasks, watch=cluster_watch(executor))
            return
        pool = cf.ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=_context(),
                                      initializer=_ignore_sigint, initargs=(os.getpid(),))
        try:
            yield from _run(pool, paths, sizes, advance, window=min(jobs, len(paths)), remote=False,
                            task=task, tasks=tasks)
        except BaseException:
            _stop_pool(pool)     # Ctrl-C or an error: no worker keeps running after we return
            raise
        pool.shutdown(wait=True)


FOLD_FILES = 128                # files in one run of fold_files at most ...
FOLD_BYTES = 16 << 20           # ... and bytes (a larger file is a run of its own)
FOLD_RUNS_PER_JOB = 4           # at least this many runs per worker: a slow run holds up a quarter of its worker's


def fold_runs(sizes: list[int], workers: int) -> list[tuple[int, int]]:
    """(start, end) of the consecutive runs of files (of these sizes) that fold_files folds, one task each: at
    most FOLD_FILES files and FOLD_BYTES of traces (a larger file is a run of its own), and at least
    FOLD_RUNS_PER_JOB runs per worker when there are files enough."""
    most = max(1, min(FOLD_FILES, -(-len(sizes) // (FOLD_RUNS_PER_JOB * workers))))
    starts, run_bytes = [0], 0
    for index, size in enumerate(sizes):
        if index > starts[-1] and (index - starts[-1] >= most or run_bytes + size > FOLD_BYTES):
            starts.append(index)
            run_bytes = 0
        run_bytes += size
    return list(zip(starts, starts[1:] + [len(sizes)])) if sizes else []


def fold_files(paths: list[str], fold: Callable[[list[tuple[int, str, str]]], Any], *, jobs: int | None = None,
               executor: cf.Executor | None = None, progress: bool = False) -> Any:
    """fold(run) over the consecutive runs of `paths` (fold_runs), each run a list of (position, path to
    open, path as shown) that fold maps into one state (update(index, part), skip(index, FileFailure),
    combine(other)); the states combined in order, and the one state returned (None for no paths). For maps
    that fold each file's part into a state where the file is decoded (engine.runner.Runner.fold): one task
    and one result per run of small files, not per file, whose fixed costs (the task and its result pickled,
    the queues, the driver's update) were as much CPU as a small file's map.

    On a process pool of `jobs` (no executor): at most `jobs` runs in flight, the states combined here as they
    come. On `executor`, a Dask client's (io.cluster.cluster_watch knows it): every run submitted, the
    states combined on the workers pairwise (a tree: combined(left, right)), so only the last state comes
    here. Either way a task decodes within the driver's --max-inflate (LimitedTask), and `progress` shows a
    bar (on a terminal) that moves as runs finish."""
    if not paths:
        return None
    sizes = [_size(p) for p in paths]
    watch = cluster_watch(executor) if executor is not None else None
    if executor is not None and watch is None:
        raise TypeError("fold_files runs on a process pool or on a Dask client's executor")
    # the client's own futures: a Dask future passed to a task is its result there (the tree's combines)
    client = executor._client if watch is not None else None
    workers = max(1, len(client.nthreads())) if client is not None else checked_jobs(jobs)
    runs = fold_runs(sizes, workers)
    limit = InflateLimit.current()      # resolved here, on the driver, and sent with every task
    remote = client is not None         # remote workers have another cwd: they open absolute paths
    folds = [[(i, absolute(paths[i]) if remote else paths[i], paths[i]) for i in range(start, end)]
             for start, end in runs]
    run_sizes = [sum(sizes[start:end]) for start, end in runs]
    with _progress_bar(len(paths), sum(sizes), progress) as advance:
        if client is not None:
            return _fold_on_cluster(executor, LimitedTask(fold, limit), folds, run_sizes, advance, watch)
        tasks = [LimitedTask(functools.partial(_fold_run, fold=fold, run=run), limit) for run in folds]
        # a worker that dies names its run (decode_files names the file)
        labels = [paths[start] if end == start + 1 else f"{paths[start]} or one of the {end - start - 1} files after it"
                  for start, end in runs]
        pool = cf.ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=_context(),
                                      initializer=_ignore_sigint, initargs=(os.getpid(),))
        folded = None
        try:
            for found in _run(pool, labels, run_sizes, advance, window=min(workers, len(tasks)), remote=False,
                              tasks=tasks, files=[end - start for start, end in runs]):
                folded = found if folded is None else combined(folded, found)
        except BaseException:
            _stop_pool(pool)     # Ctrl-C or an error: no worker keeps running after we return
            raise
        pool.shutdown(wait=True)
        return folded


def _fold_on_cluster(executor, fold: Callable, runs: list[list], sizes: list[int],
                     advance: Callable[[int, int], None], watch):
    """fold_files on a Dask cluster: a task per run, combined pairwise on the workers."""
    client = executor._client
    with quiet_client(executor):
        folds = [client.submit(fold, run, pure=False) for run in runs]
        states = list(folds)
        while len(states) > 1:
            states = [client.submit(combined, *states[i:i + 2], pure=False) if i + 1 < len(states) else states[i]
                      for i in range(0, len(states), 2)]
        # a run's future is let go as soon as it is seen done: its state is freed once combined
        running = dict(enumerate(folds))
        del folds

        def finished() -> None:
            for index in [i for i, future in running.items() if future.done()]:
                del running[index]
                advance(sizes[index], len(runs[index]))

        return awaited(states.pop(), f"{sum(len(run) for run in runs)} files", watch, finished)


def combined(left, right):
    """Two states of consecutive runs of files, combined in order (on a Dask worker, or here)."""
    left.combine(right)
    return left


def _fold_run(target: str, shown: str, *, fold: Callable[[list[tuple[int, str, str]]], Any], run: list):
    """A pool task of fold_files, called as _run calls a file's task (its label twice)."""
    return fold(run)


def decodes_here(files: int, *, jobs: int | None = None, executor: cf.Executor | None = None,
                 always_pool: bool = False) -> bool:
    """Whether decode_files runs its tasks over `files` files in this process (no pool, no executor)."""
    jobs = checked_jobs(jobs)
    return executor is None and (jobs == 1 or files == 0 or (files == 1 and not always_pool))


POLL_S = 1.0     # how often a run on a Dask cluster with nothing finishing asks whether it can still finish


def _run(executor: cf.Executor, paths: list[str], sizes: list[int], advance: Callable[[int, int], None],
         window: int, remote: bool, task: Callable = decode_task,
         tasks: list[Callable] | None = None, watch=None,
         files: list[int] | None = None) -> Iterable[DecodedFile | FileFailure]:
    """Submit with at most `window` files in flight; yield in input order. `watch` (a Dask executor's
    io.cluster.ClusterWatch): fail instead of waiting forever on a cluster that lost its scheduler or
    every worker; without one, wait as concurrent.futures does. `files`: how many files each task
    covers, for the progress bar (fold_files' runs; else one each)."""
    pending: dict[int, cf.Future] = {}
    done: dict[int, DecodedFile | FileFailure] = {}
    next_submit = next_yield = 0
    try:
        while next_yield < len(paths):
            while next_submit < len(paths) and len(pending) < window:
                path = paths[next_submit]
                target = absolute(path) if remote else path   # remote workers have another cwd
                pending[next_submit] = executor.submit(tasks[next_submit] if tasks else task, target, path)
                next_submit += 1
            finished, _ = cf.wait(pending.values(), timeout=POLL_S if watch else None,
                                  return_when=cf.FIRST_COMPLETED)
            if not finished:
                _check_cluster(watch)
            for index in [i for i, f in pending.items() if f in finished]:
                future = pending.pop(index)
                done[index] = result_of(future, paths[index], watch)
                advance(sizes[index], files[index] if files else 1)
            while next_yield in done:
                yield done.pop(next_yield)
                next_yield += 1
    finally:
        for future in pending.values():
            future.cancel()


def _check_cluster(watch) -> None:
    problem = watch.problem()
    if problem:
        raise WorkerCrashError(problem)


def awaited(future, what: str, watch, waiting: Callable[[], None] = lambda: None):
    """The result of one Dask future (a distributed.Future), asking the cluster every POLL_S whether it can
    still finish, as _run does for the futures of a map; `waiting()` is called then too (and once at the end)."""
    while True:
        try:
            future.result(timeout=POLL_S)
        except TimeoutError:
            if not future.done():        # not finished yet (else the task itself raised: result_of says how)
                _check_cluster(watch)
                waiting()
                continue
        except Exception:                # the task failed: result_of names it
            pass
        waiting()
        return result_of(future, what, watch)


def result_of(future: cf.Future, path: str, watch=None) -> DecodedFile | FileFailure:
    try:
        return future.result()
    except MemoryError:            # raised in a worker (pickled back) or while unpickling its result here
        raise TraceFormatError(path, out_of_memory("while mapping it")) from None
    except cf.process.BrokenProcessPool as exc:
        raise WorkerCrashError(f"a decoding worker died while reading {path} (killed, or out of memory?); "
                               "retry with fewer --jobs") from exc
    except TraceError:
        raise
    except Exception as exc:   # e.g. Dask's KilledWorker, or the CancelledError of a lost scheduler
        lost = watch.lost() if watch else None
        if lost:                   # every task is cancelled then: the file is not to blame
            raise WorkerCrashError(lost) from None
        reason = " ".join(str(exc).split())[:300]       # Dask's messages span lines: keep the error one line
        raise WorkerCrashError(f"decoding {path} failed on the executor: {type(exc).__name__}: {reason}") from exc


def _ignore_sigint(parent: int) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers (_stop_pool), so a worker
    # must not print its own KeyboardInterrupt traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """On Linux, the worker ends when the process that forked it does: a driver killed outright (SIGKILL,
    the out-of-memory killer) left its workers decoding for nobody, for seconds to minutes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    pr_set_pdeathsig = 1
    prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:      # it died before prctl: nobody will read this worker's answers
        os._exit(1)


def _context():
    # fork starts workers in milliseconds with the package already imported; spawn elsewhere
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _stop_pool(pool: cf.ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=2)
        if process.is_alive():   # SIGTERM not honoured in time: no worker outlives the command
            process.kill()
            process.join(timeout=2)


def _size(path: str) -> int:
    try:
        return stat_of(path).st_size        # a discovered file's size as found: no second look
    except OSError:
        return 0


class _progress_bar:
    """Context manager yielding `advance(bytes, files=1)`; a rich bar on stderr only when it is a terminal."""

    def __init__(self, files: int, total_bytes: int, wanted: bool) -> None:
        self.files, self.total_bytes = files, total_bytes
        self.show = wanted and files > 0 and sys.stderr.isatty()
        self._progress = None

    def __enter__(self) -> Callable[[int, int], None]:
        if not self.show:
            return lambda size, files=1: None
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        # one task: the bar and the size column follow bytes (files differ in size), a text field counts files
        self._progress = Progress(TextColumn("decoding"), BarColumn(), TextColumn("{task.fields[files]} files"),
                                  DownloadColumn(), TimeRemainingColumn(),
                                  console=Console(file=sys.stderr), transient=True)
        self._progress.start()
        task = self._progress.add_task("decoding", total=max(self.total_bytes, 1), files=f"0/{self.files}")
        count = [0]

        def advance(size: int, files: int = 1) -> None:
            count[0] += files
            self._progress.update(task, advance=size, files=f"{count[0]}/{self.files}")

        return advance

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()



def decode_paths(paths: list[str], *, jobs: int | None = None, executor: cf.Executor | None = None,
                 cache=None, progress: bool = False) -> Iterable[DecodedFile | FileFailure]:
    """decode_files, serving what `cache` (a traceattr.io.cache.FileCache, or None) holds and storing
    what it lacks; results in the order of `paths`. Failures other than "not a trace" are never cached."""
    results = [over_max_events(cache.get(path), path) if cache is not None else None for path in paths]
    missing = [path for path, result in zip(paths, results) if result is None]
    fresh = decode_files(missing, jobs=jobs, executor=executor, progress=progress)
    try:
        for path, result in zip(paths, results):
            if result is None:
                result = next(fresh)
                if cache is not None and (isinstance(result, DecodedFile) or result.not_a_trace):
                    cache.put(path, result)
            yield result
    finally:
        fresh.close()
