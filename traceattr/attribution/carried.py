"""Work carried in from before the profiling window: device activities launched before the profiler started.

When the profiler starts, the device may still be working through a queue of kernels launched earlier
(a serving engine's decode loop, an eager training step). They run inside the window, so they are busy time,
but their launch was never recorded: no runtime record in the file carries their correlation id. CUPTI also
drops runtime records mid-window (the link report's `dangling_correlation`); those must not be counted as
carried in. A device activity is **carried in** when all three hold:

* it carries a correlation id (>= 0) that no runtime record of its file (rank, window) carries (dangling);
* its correlation id is below the smallest runtime record correlation of its file: CUPTI and roctracer hand
  out correlation ids in launch order, so a smaller id was launched before the first recorded launch;
* it starts before the first activity of its (device, stream) whose launch is in the file (a stream runs
  its work in launch order, so work ahead of the first recorded launch was queued before it); on a stream
  with no recorded launch at all, before the file's first runtime record.

A file without any runtime record carries nothing in: nothing tells its launches apart.
"""

from __future__ import annotations

import weakref

import numpy as np
import pyarrow as pa

from traceattr import schema as S
from traceattr.attribution.hosttree import dense_codes, file_key, runtime_mask
from traceattr.model.traceset import TraceSet

_NEVER = np.iinfo(np.int64).max


_CACHE: "weakref.WeakKeyDictionary[TraceSet, np.ndarray]" = weakref.WeakKeyDictionary()


def carried_in(traceset: TraceSet) -> np.ndarray:
    """Per device row: whether it was launched before its file's window (module docstring), computed once
    per TraceSet (the check's unlinked and carried-in rows both read it: a small file's map step computed
    it twice) and read-only, as it is shared."""
    found = _CACHE.get(traceset)
    if found is None:
        found = _carried_in(traceset)
        found.flags.writeable = False
        _CACHE[traceset] = found
    return found


def _carried_in(traceset: TraceSet) -> np.ndarray:
    device, host = traceset.device, traceset.host
    if not device.num_rows or not host.num_rows:
        return np.zeros(device.num_rows, dtype=bool)
    runtime = np.flatnonzero(runtime_mask(host.column(S.CATEGORY)))
    host_corr = _int64(host, S.CORRELATION)[runtime]
    runtime = runtime[host_corr >= 0]
    host_corr = host_corr[host_corr >= 0]
    dev_corr = _int64(device, S.CORRELATION)
    if not np.isin(dev_corr[dev_corr >= 0], host_corr, invert=True).any():
        # every correlated activity has a runtime record of its id somewhere; in its own file too when
        # the table holds one file (a map step's): nothing dangles there, nothing is carried in
        if _one_file(traceset):
            return np.zeros(device.num_rows, dtype=bool)
    host_file = file_key(_int64(host, S.RANK)[runtime], _int64(host, S.WINDOW)[runtime])
    dev_file = file_key(_int64(device, S.RANK), _int64(device, S.WINDOW))
    files = np.unique(np.concatenate([host_file, dev_file]))
    host_at, dev_at = np.searchsorted(files, host_file), np.searchsorted(files, dev_file)
    # per file: its smallest runtime correlation and its first runtime record's start (none: _NEVER / -1)
    lowest = np.full(len(files), -1, np.int64)
    first_launch = np.full(len(files), -1, np.int64)
    if len(runtime):
        lowest[:] = _NEVER
        first_launch[:] = _NEVER
        np.minimum.at(lowest, host_at, host_corr)
        np.minimum.at(first_launch, host_at, _int64(host, S.START_NS)[runtime])
        lowest[lowest == _NEVER] = -1
        first_launch[first_launch == _NEVER] = -1
    key = dense_codes(np.concatenate([host_file, dev_file]), np.concatenate([host_corr, dev_corr]))
    recorded = np.isin(key[len(host_file):], key[:len(host_file)])
    dangling = (dev_corr >= 0) & ~recorded
    early = dangling & (dev_corr < lowest[dev_at])
    if not early.any():
        return early
    start = _int64(device, S.START_NS)
    stream = dense_codes(dev_file, _int64(device, S.DEVICE), _int64(device, S.STREAM))
    launched = (dev_corr >= 0) & recorded
    first = np.full(int(stream.max()) + 1, _NEVER, np.int64)
    np.minimum.at(first, stream[launched], start[launched])
    ahead = np.where(first[stream] == _NEVER, first_launch[dev_at], first[stream])
    return early & (start < ahead)


def _one_file(traceset: TraceSet) -> bool:
    """Whether every row of the TraceSet is of one (rank, window): a map step's file (rank 0, window 0)."""
    files = traceset.files
    if files.num_rows != 1:
        return False
    rank, window = files.column(S.RANK)[0].as_py(), files.column(S.WINDOW)[0].as_py()
    return all((_int64(table, S.RANK) == rank).all() and (_int64(table, S.WINDOW) == window).all()
               for table in (traceset.device, traceset.host))


def _int64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)
