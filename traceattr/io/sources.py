"""open_traces: the TraceSet behind a path (a parquet store, or traces decoded in parallel or served from
the cache) and a short line for report headers that says which it was."""

from __future__ import annotations

from collections.abc import Collection

from traceattr.io.cache import FileCache
from traceattr.io.cluster import executor_pool
from traceattr.io.load import load, load_runs
from traceattr.io.store import is_store
from traceattr.model.traceset import TraceSet


def open_traces(path: str, *, skip_bad: bool = False, jobs: int | None = None, progress: bool = False,
                cache: bool = True, scheduler: str | None = None,
                drop_host: Collection[str] = (), rank_map: dict[str, int] | None = None,
                cache_dir: str | None = None) -> tuple[TraceSet, str]:
    """(TraceSet, source text) of the one run under `path` (SeveralRunsError, naming them, when it holds
    more). `scheduler`: a Dask scheduler address that decodes the files; `drop_host`: host categories to
    leave out; `rank_map`: {file name or path: rank} (see load); `cache_dir`: the cache folder (cachedir)."""
    runs, source = open_runs(path, skip_bad=skip_bad, jobs=jobs, progress=progress, cache=cache,
                             scheduler=scheduler, drop_host=drop_host, rank_map=rank_map, single=True,
                             cache_dir=cache_dir)
    return runs[0][1], source


def open_runs(path: str, *, skip_bad: bool = False, jobs: int | None = None, progress: bool = False,
              cache: bool = True, scheduler: str | None = None, drop_host: Collection[str] = (),
              rank_map: dict[str, int] | None = None, single: bool = False,
              cache_dir: str | None = None) -> tuple[list[tuple[str, TraceSet]], str]:
    """([(run name, TraceSet)], source text): every run under `path` (io/runs.py), never merged.
    `single`: refuse a path that holds several runs (load's SeveralRunsError)."""
    if is_store(path):
        return [(".", load(path))], f"parquet store {path}"
    file_cache = FileCache(cache_dir) if cache else None
    with executor_pool(None, scheduler) as pool:
        options = dict(skip_bad=skip_bad, jobs=jobs, executor=pool, progress=progress, drop_host=drop_host,
                       cache=file_cache if file_cache is not None else False, rank_map=rank_map)
        runs = [(".", load(path, **options))] if single else load_runs(path, **options)
    if file_cache is None:
        return runs, "traces (cache off)"
    # short: a long cache path would wrap the header line it sits on (docs/scale.md says where the cache is)
    return runs, f"traces ({file_cache.misses} decoded, {file_cache.hits} from cache)"
