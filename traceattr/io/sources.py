"""open_traces: the TraceSet behind a path (a parquet store, or traces decoded in parallel or served from
the cache) and a short line for report headers that says which it was."""

from __future__ import annotations

import contextlib
from collections.abc import Collection

from traceattr.io.cache import FileCache
from traceattr.io.load import load
from traceattr.io.store import is_store
from traceattr.model.traceset import TraceSet


def open_traces(path: str, *, skip_bad: bool = False, jobs: int | None = None, progress: bool = False,
                cache: bool = True, scheduler: str | None = None,
                drop_host: Collection[str] = (), cache_dir: str | None = None) -> tuple[TraceSet, str]:
    """(TraceSet, source text). `scheduler`: a Dask scheduler address that decodes the files;
    `drop_host`: host categories to leave out (see load); `cache_dir`: the cache folder (see cachedir)."""
    if is_store(path):
        return load(path), f"parquet store {path}"
    file_cache = FileCache(cache_dir) if cache else None
    executor = contextlib.nullcontext()
    if scheduler:
        from traceattr.io.cluster import dask_executor
        executor = dask_executor(scheduler)
    with executor as pool:
        traceset = load(path, skip_bad=skip_bad, jobs=jobs, executor=pool, progress=progress,
                        cache=file_cache if file_cache is not None else False, drop_host=drop_host)
    if file_cache is None:
        return traceset, "traces (cache off)"
    # short: a long cache path would wrap the header line it sits on (docs/scale.md says where the cache is)
    return traceset, f"traces ({file_cache.misses} decoded, {file_cache.hits} from cache)"
