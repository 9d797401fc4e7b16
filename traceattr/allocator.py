"""Allocator settings of the `traceattr` command: memory a step frees goes back to the system.

A cold `summarize` holds one decoded file, then the sweep's and the check's arrays, one after the other.
With the defaults each step's freed memory stayed in the process and the next step's came on top:
* arrow's default pool (mimalloc) keeps the pages it freed; the system allocator hands them back;
* glibc raises its mmap threshold to the size of each large block freed, so later arrays of that size come
  from the heap, whose free holes are rarely returned; a fixed threshold keeps every array over it in its
  own mapping, unmapped when freed. At 4 MB: a lower threshold trades time for little memory, since every
  array over it is faulted in afresh (128 KB doubled the kernel time on a 1 GB trace; 1 MB cost 10-20% of
  the wall time of a cold 202 MB file and of 64 x 20 MB at --jobs 1 for 12-15 MB less peak).
Measured, cold summarize of one file, one job: 202 MB trace peak RSS 318 -> 227 MB, 1 GB trace 890 -> 574 MB
(benchmarks/RESULTS.md, "The one-run scale table").
* a fixed mmap threshold also fixes glibc's trim threshold at its 128 KB default: every free that left
  128 KB at the heap's top gave it back, and the next step faulted it in again (645 k page faults over
  64 x 20 MB at --jobs 1, 1.4 s of system time). At 8 MB: 22 k faults, 0.2 s, peak RSS +0-3 MB.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3    # mallopt parameters (glibc malloc.h)
MMAP_THRESHOLD_BYTES = 4 << 20    # fixed (a set value disables glibc's raising of it)
TRIM_THRESHOLD_BYTES = 8 << 20    # free memory at the heap's top kept for the next step


def return_freed_memory() -> None:
    """Set these for this process and the processes it starts (pool workers inherit the environment).
    Call before pyarrow is imported. A user's own ARROW_DEFAULT_MEMORY_POOL, MALLOC_MMAP_THRESHOLD_ or
    MALLOC_TRIM_THRESHOLD_ wins; other C libraries than glibc are left alone."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    settings = [(name, parameter, value) for name, parameter, value in (
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)) if name not in os.environ]
    for name, _, value in settings:
        os.environ[name] = str(value)
    try:
        libc = ctypes.CDLL(None)            # this process's own symbols: the C library it runs on
    except (OSError, TypeError):           # Windows
        return
    if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):      # glibc only
        for _, parameter, value in settings:
            libc.mallopt(parameter, value)
        _OURS.update(name for name, _, _ in settings)


_OURS: set[str] = set()           # the settings return_freed_memory made here (a user's own are left alone)
REDUCE_MMAP_THRESHOLD_BYTES = 128 << 10
_lowered = False                  # inside small_arrays_returned


@contextlib.contextmanager
def small_arrays_returned(wanted: bool = True):
    """While a driver only reduces what workers decoded: every block over 128 KB in a mapping of its own.
    The reduce's arrays are a few hundred KB each at many files (a column over 1024 files' rows), and under
    the 4 MB threshold each freed one stayed a heap hole that the next, larger one did not fit: the driver's
    peak was the sum of its steps, not the largest (the command's driver at 1024 x 10 MB on Dask: 174 -> 166
    MB, 152 MB at 64 files; benchmarks/RESULTS.md, session 8). Never while decoding (there 128 KB doubled the
    kernel time, see above; a pool worker forked meanwhile gets 4 MB back), and only where
    return_freed_memory set the threshold: a library caller's process is left alone."""
    global _lowered
    libc = _libc() if wanted and "MALLOC_MMAP_THRESHOLD_" in _OURS else None
    if libc is None or _lowered:
        yield
        return
    _restored_in_forked_workers()
    libc.mallopt(_M_MMAP_THRESHOLD, REDUCE_MMAP_THRESHOLD_BYTES)
    _lowered = True
    try:
        yield
    finally:
        _lowered = False
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def heap_holes_returned() -> None:
    """Inside small_arrays_returned, after a reduce step let go of its inputs: the heap's free pages back to
    the system (glibc malloc_trim). Blocks under 128 KB (a chunk of 128 files' columns, the rows unpickled per
    file) leave holes that the next steps, whose arrays are mapped on their own, do not fill: the driver at
    1024 x 10 MB gave back 3 MB after the reduce and 2 MB after the check."""
    trim = _malloc_trim() if _lowered else None
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _restored_in_forked_workers() -> None:
    """A pool worker forked while the threshold is lowered decodes: it starts with the command's own."""
    def restore() -> None:
        global _lowered
        if _lowered:
            _lowered = False
            _libc().mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=restore)


@functools.lru_cache(maxsize=1)
def _libc():
    try:
        return ctypes.CDLL(None)
    except (OSError, TypeError):
        return None


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library, Windows)."""
    libc = _libc()
    if libc is None or not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "malloc_trim")):
        return None
    trim = libc.malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


TRIM_AFTER_BYTES = 16 << 20      # give back the heap's holes only when they are this much (see below)


def give_back_free_heap(floor: int = TRIM_AFTER_BYTES, events: int | None = None) -> None:
    """Return the heap's free pages to the system (glibc malloc_trim) when its free chunks hold at least
    `floor` bytes (mallinfo2). Columns under the mmap threshold live in the heap, and glibc gives back only
    its top: a step's freed arrays stay holes that the next step's arrays, mapped on their own or larger
    than any hole, do not fill. Called between the map step's stages (after the decode, the cache write,
    the host filter and the sweep) and after the last file mapped in the driver's own process. Cold 202 MB
    file (192.7 MiB), with the sweep's leaner arrays and coded kernel names: 208 -> 189 MiB peak RSS.
    Each trim makes the next step fault those pages in again. Files of 20 MB leave 3-10 MiB of holes
    between stages, which the next stage and file reuse: trimming them at 8 MiB cost 64 x 20 MB at
    `--jobs 1` 1.1 s of system time (+15% wall) for 5 MiB, hence 16 MiB (the 202 MB file leaves 25-70
    MiB). The decode's holes go back from 8 MiB (10.6 MiB at 202 MB, where they were the cache write's
    peak): once per decode, +0.2 s of system time over those 64 files.

    `events`: the events of the file the steps since the last call worked on. The heap is looked at only
    once those steps may have freed enough to reach `floor` (at most FREED_PER_EVENT an event, on top of
    the holes the last look found): mallinfo2 walks every free chunk, 0.04 ms, three times a one-kernel
    file (3% of its map), where a thousand such files free less than one big file's stage."""
    global _unlooked_bytes, _free_at_last_look
    if events is not None:
        _unlooked_bytes += events * FREED_PER_EVENT
        if _unlooked_bytes + _free_at_last_look < floor:
            return
    _unlooked_bytes = 0
    trim, free = _malloc_trim(), _heap_free_bytes()
    _free_at_last_look = free or 0
    if trim is not None and free is not None and free >= floor:
        trim(0)
        _free_at_last_look = 0


FREED_PER_EVENT = 16 << 10      # far above what a map step allocates per event (its rows, sweep points, keys)
_unlooked_bytes = 0             # what the steps since the last look may have freed (FREED_PER_EVENT an event)
_free_at_last_look = 0          # the free chunks the last look found (below its floor, or 0 after a trim)


_MALLINFO_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                    "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO_FIELDS]


class _MallInfo(ctypes.Structure):         # glibc before 2.33: the same fields as C ints
    _fields_ = [(name, ctypes.c_uint) for name in _MALLINFO_FIELDS]


def _heap_free_bytes() -> int | None:
    """Bytes in the free chunks of every malloc arena (glibc's mallinfo2; mallinfo before glibc 2.33, modulo
    4 GiB), None for other C libraries."""
    info = _mallinfo()
    return None if info is None else int(info().fordblks)


@functools.lru_cache(maxsize=1)
def _mallinfo():
    libc = _libc()
    if libc is None or not hasattr(libc, "gnu_get_libc_version"):
        return None
    for name, result in (("mallinfo2", _MallInfo2), ("mallinfo", _MallInfo)):
        if hasattr(libc, name):
            function = getattr(libc, name)
            function.argtypes, function.restype = [], result
            return function
    return None
