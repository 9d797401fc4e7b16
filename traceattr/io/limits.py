"""Bounds on every number read from a trace, a file name or a store, checked where the number enters.

Times: a relative `ts`, a `dur` and `baseTimeNanoseconds` are each within ±TIME_LIMIT_NS, so any sum of
three of them (base + ts + dur) stays inside int64 without a check per addition; an absolute start or end
beyond ±TIME_LIMIT_NS (about the years 1875 to 2065) is dropped with a note, so every span between two kept
times also fits in int64. Ranks and world sizes are int32 columns; MAX_RANK is far beyond any real job.
"""

from __future__ import annotations

from traceattr.errors import TraceFormatError

TIME_LIMIT_NS = 3 * 10**18
TIME_LIMIT_US = TIME_LIMIT_NS / 1000
TIME_LIMIT_TEXT = "±3e18 ns (the years 1875 to 2065)"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_RANK = 2**24 - 1
# one file's span and its device activities' summed durations: each time fits int64, but sums over files and
# streams did not (two files of 5.9e18 ns each printed a total of -6.6e18 ns); 104 days is far beyond any
# trace, and sums over 1,024 files of it still fit
FILE_SUM_LIMIT_NS = 2**53
FILE_SUM_LIMIT_TEXT = "2**53 ns (104 days)"
MAX_WORLD_SIZE = 2**24


def checked_int(path: str, field: str, value: int, low: int, high: int) -> int:
    """`value` when low <= value <= high, else a TraceFormatError naming the file and the field."""
    if not low <= value <= high:
        raise TraceFormatError(path, f"{field} {_short(value)} is out of range ({low}..{high})")
    return value


def checked_rank(path: str, field: str, rank: int) -> int:
    return checked_int(path, field, rank, 0, MAX_RANK)


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


PARQUET_INFLATE_FLOOR = 64 << 20     # any parquet file may decode to this much, whatever its size (io/parquet.py)

# events one trace file may hold (--max-events): a cold summarize peaks at ~110 bytes per event on tiny kernels,
# 180-300 with ids, overlap and host events (benchmarks/RESULTS.md, "Events and memory"), so the default keeps
# one file's decode and map within 1-3 GB
MAX_EVENTS_DEFAULT = 10_000_000


def too_many_events(path: str, events: int, limit: int) -> TraceFormatError:
    """The one-line refusal of a file past --max-events (`events`: those counted so far)."""
    return TraceFormatError(path, f"more than {limit:,} events ({events:,} read so far), the --max-events limit "
                                  "(max_events= in Python): memory grows by 100-300 bytes per event; raise "
                                  "the limit if the machine has the memory")


def out_of_memory(during: str) -> str:
    """The problem a MemoryError becomes (one line naming the file, exit 2; numpy's _ArrayMemoryError and
    pyarrow's ArrowMemoryError are MemoryErrors too): never a traceback."""
    return (f"out of memory{' ' + during if during else ''}; use fewer --jobs, or refuse files this large early with --max-events N "
            "(each event takes 100-300 bytes)")


# JSON read whole: a capture's manifest lists windows and errors, far below this however long the run; a
# store's metadata lists each source and partition (~0.5 KB a file: over 500,000 files) and its graph catalog
# the captured launches. A forged or runaway file is refused before it is read, not read into memory whole.
MAX_MANIFEST_BYTES = 64 << 20
MAX_STORE_JSON_BYTES = 256 << 20


class TooLarge(ValueError):
    """A file read whole that holds more than its limit."""


def read_at_most(path, limit: int) -> bytes:
    """The bytes of the file at `path`, or TooLarge when it holds more than `limit` (at most limit + 1
    bytes are read, however large it is or grows)."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"more than {limit:,} bytes, beyond what such a file holds")
    return data
