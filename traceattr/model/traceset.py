"""TraceSet: every rank and window of one run, as four arrow tables (schemas in traceattr.schema)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from traceattr import schema as S
from traceattr.model.graphs import GraphCatalog
from traceattr.units import counted, human_ns



def timed_range(files: pa.Table) -> tuple[int, int] | None:
    """(first start, last end) over the files that hold timed events, None when none does: a file without
    any (a window that recorded nothing) carries start_ns = end_ns = S.NO_TIME, which must not stretch a
    span; a negative time (a relative trace's events before the profiler started) is an ordinary one."""
    import pyarrow.compute as pc

    timed = files.filter(pc.not_equal(files.column(S.END_NS), S.NO_TIME)) if files.num_rows else files
    if timed.num_rows == 0:
        return None
    return int(pc.min(timed.column(S.START_NS)).as_py()), int(pc.max(timed.column(S.END_NS)).as_py())


# eq=False: identity hashing, so analyses can cache derived results (the sweep) per TraceSet
@dataclass(frozen=True, eq=False)
class TraceSet:
    device: pa.Table                 # S.DEVICE_SCHEMA: kernels, memcpy, memset (device busy time)
    host: pa.Table                   # S.HOST_SCHEMA: cpu ops, annotations, python frames, runtime calls
    markers: pa.Table                # S.MARKER_SCHEMA: gpu_user_annotation, cuda_sync, ... (never busy)
    files: pa.Table                  # S.FILE_SCHEMA: one row per (rank, window) file
    notes: tuple[str, ...] = field(default=())   # things the user should know (skipped files, assumed ranks)
    # the graph captures its replays are matched to (attribution/graphs.py); set on a map step's file
    graph_catalog: GraphCatalog | None = field(default=None)

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.files.column(S.RANK).to_pylist()))

    @property
    def source(self) -> str:
        """Where the tables came from, for report headers."""
        return "traces"

    def __repr__(self) -> str:
        """One short paragraph: files, ranks, windows, devices, activities, span (not the arrow tables)."""
        files = self.files
        ranks = self.ranks
        shown = ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")
        devices = 0
        if self.device.num_rows:
            devices = self.device.select([S.RANK, S.DEVICE]).group_by(
                [S.RANK, S.DEVICE]).aggregate([]).num_rows
        first, last = timed_range(files) or (0, 0)
        span = last - first
        notes = f", {counted(len(self.notes), 'note')}" if self.notes else ""
        return (f"TraceSet({counted(files.num_rows, 'file')}, ranks [{shown}], {counted(files.num_rows, 'window')}, "
                f"{counted(devices, 'device')}, {counted(self.device.num_rows, 'device activity', 'device activities')}, "
                f"{counted(self.host.num_rows, 'host event')}, span {human_ns(span)}{notes})")

    @classmethod
    def empty(cls) -> "TraceSet":
        return cls(S.DEVICE_SCHEMA.empty_table(), S.HOST_SCHEMA.empty_table(),
                   S.MARKER_SCHEMA.empty_table(), S.FILE_SCHEMA.empty_table())


def check_traces_argument(value, name: str, function: str) -> None:
    """`value` is a TraceSet or a path (str or os.PathLike, not empty): anything else is a TypeError that
    names the argument, before it reaches pathlib or pandas."""
    if not isinstance(value, TraceSet):
        check_path_argument(value, name, function, "a TraceSet or a trace path")


def check_path_argument(value, name: str, function: str, wanted: str = "a trace file, folder or store path") -> None:
    """`value` is a path (str or os.PathLike, not empty), else a TypeError naming the argument."""
    import os

    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise TypeError(f"{function}(): {name} must be {wanted}, got {type(value).__name__} {str(value)[:60]!r}")


LOAD_OPTIONS = ("skip_bad", "rank_map", "jobs", "executor", "cache", "progress")   # of a path (io/load.py)


def check_load_options(function: str, load_options: dict, allowed: tuple[str, ...] = LOAD_OPTIONS) -> None:
    """A misspelled load option is a TypeError naming `function` (the public one): met further down, it
    named a private helper (`_side() got an unexpected keyword argument 'jbos'`)."""
    unknown = sorted(set(load_options) - set(allowed))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r} (load options for a "
                        f"path: {', '.join(allowed)})")
    check_load_values(function, **load_options)


def check_load_values(function: str, **values) -> None:
    """The values of the load options given, each a TypeError naming it when of the wrong kind: `skip_bad`
    "no" skipped bad files (a non-empty string is true), `rank_map=[...]` and `cache=1` failed deep inside."""
    import os

    check_flags(function, **{name: values[name] for name in ("skip_bad", "progress") if name in values})
    rank_map = values.get("rank_map")
    if rank_map is not None and (not isinstance(rank_map, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in rank_map.items())):
        raise TypeError(f"{function}(): rank_map must be a dict {{file name: rank}} of str to int, "
                        f"got {str(rank_map)[:80]}")
    cache = values.get("cache", True)
    if not (isinstance(cache, (bool, str, os.PathLike)) or cache is None
            or (callable(getattr(cache, "get", None)) and callable(getattr(cache, "put", None)))):
        raise TypeError(f"{function}(): cache must be True, False, a folder or a FileCache, got {type(cache).__name__}")
    executor = values.get("executor")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(f"{function}(): executor must be a concurrent.futures.Executor or a Dask Client, "
                        f"got {type(executor).__name__}")


def check_flags(function: str, **flags) -> None:
    """Each flag a bool, else a TypeError naming it (align="no" and tree="yes" were taken as true)."""
    for name, value in flags.items():
        if not isinstance(value, bool) and type(value).__name__ not in ("bool", "bool_"):   # numpy's bool too
            raise TypeError(f"{function}(): {name} must be True or False, got {value!r}"[:200])


def refuse_load_options(function: str, load_options: dict) -> None:
    """Load options (for a path) given beside a TraceSet are a TypeError naming them: a misspelled option
    (topp=, tre=) or a CLI flag (per_rank=) was otherwise swallowed by **load_options and ignored."""
    if load_options:
        raise TypeError(f"{function}() got {', '.join(sorted(load_options))} with a TraceSet: load options "
                        f"({', '.join(LOAD_OPTIONS)}) apply to a path")
