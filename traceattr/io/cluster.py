"""A Dask distributed cluster as a concurrent.futures.Executor for load(..., executor=...).

Dask is an optional extra (`pip install traceattr[dask]`): it is imported only here, only when asked for.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from traceattr.errors import TraceInputError

CONNECT_TIMEOUT_S = float(os.environ.get("TRACEATTR_SCHEDULER_TIMEOUT_S", "10"))


class SchedulerError(TraceInputError):
    """No Dask scheduler answers at the given address (or dask is not installed): exit code 2."""


@contextmanager
def dask_executor(address: str, timeout_s: float | None = None) -> Iterator:
    """Connect to the scheduler at `address` and yield `client.get_executor(pure=False)` (pure=False: two
    loads of one path must both run, not share a cached result). The client is closed on exit."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerError("--scheduler needs dask distributed: pip install 'traceattr[dask]'") from None
    try:
        client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address} within {timeout_s:g} s "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()
