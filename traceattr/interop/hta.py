"""Holistic Trace Analysis (HTA) on traceattr's loader, and back (optional extra `traceattr[hta]`).

    ta = traceattr.interop.hta.trace_analysis("traces/")      # an hta.trace_analysis.TraceAnalysis
    ta.get_temporal_breakdown(visualize=False)                  # HTA's own analyses, unchanged
    ts = traceattr.interop.hta.from_trace_analysis(ta)          # a TraceSet from an HTA-loaded object

HTA's loader parses the JSON into Python objects, one dict per event, and applies Python per row; here
traceattr decodes the files (in parallel, cached) and HTA's frames are built from its columns
(`hta_frames.py` says which fields traceattr does not keep). HTA's own code then links launches to
kernels, aligns ranks and drops incomplete iterations, as its loader does. Supported: the releases named in
SUPPORTED; another version is refused before anything is loaded, since the frames follow HTA's internals.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from typing import Callable

from traceattr import schema as S
from traceattr.errors import TraceError
from traceattr.interop.hta_frames import REQUIRED_COLUMNS, add_iteration, encode, rank_frames, traceset_from_trace
from traceattr.io.load import load
from traceattr.model.traceset import TraceSet, check_traces_argument, refuse_load_options

# distribution -> (first supported version, first unsupported version); both install the `hta` package
SUPPORTED = {"holistictraceanalysis": ((0, 5, 0), (0, 6, 0)), "traceinsight": ((0, 6, 0), (0, 7, 0))}
_INSTALL = "pip install 'traceattr[hta]'"


class HTAInteropError(TraceError):
    """HTA missing or unsupported, a trace set HTA cannot hold, or an HTA analysis that failed."""

    exit_code = 2


def supported_range() -> str:
    return " or ".join(f"{dist} >={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
                       for dist, (low, high) in SUPPORTED.items())


def hta_version() -> tuple[str, str]:
    """(distribution, version) of the installed HTA; HTAInteropError when absent or unsupported."""
    found = []
    for dist in SUPPORTED:
        try:
            found.append((dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            continue
    if not found:
        raise HTAInteropError(f"Holistic Trace Analysis is not installed ({_INSTALL}; supported: {supported_range()})")
    for dist, version in found:
        low, high = SUPPORTED[dist]
        if low <= _version_tuple(version) < high:
            try:
                import hta.trace_analysis  # noqa: F401  (installed but broken is also "not usable")
            except ImportError as exc:
                raise HTAInteropError(f"{dist} {version} is installed but cannot be imported: {exc}") from exc
            return dist, version
    named = ", ".join(f"{dist} {version}" for dist, version in found)
    raise HTAInteropError(f"unsupported Holistic Trace Analysis version: {named}; supported: {supported_range()}")


def _version_tuple(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        numbers.append(int(digits[:9]) if digits else -1)
    return tuple(numbers + [0] * (3 - len(numbers)))


def trace_analysis(path, *, include_last_profiler_step: bool = False, **load_options):
    """An `hta.trace_analysis.TraceAnalysis` of the traces at `path` (a file, a folder, or an already
    loaded TraceSet), built from traceattr's columns. `load_options` go to `traceattr.load`. HTA holds one
    trace file per rank, so each rank must have one window. Analyses that fail raise HTAInteropError
    naming the analysis and the HTA version."""
    dist, version = hta_version()
    check_traces_argument(path, "path", "trace_analysis")
    if isinstance(path, TraceSet):
        refuse_load_options("trace_analysis", load_options)     # a misspelt include_last_profiler_step too
        traceset = path
    else:
        traceset = load(path, **load_options)
    try:
        return _build(traceset, include_last_profiler_step, dist, version)
    except HTAInteropError:
        raise
    except Exception as exc:   # HTA's own code raising on our frames: one message, no half-built object
        raise HTAInteropError(f"building HTA's trace with {dist} {version} failed: "
                              f"{type(exc).__name__}: {exc}") from exc


def _build(traceset: TraceSet, include_last_profiler_step: bool, dist: str, version: str):
    from hta.common import trace_parser
    from hta.common.trace import Trace, transform_correlation_to_index
    from hta.common.trace_symbol_table import TraceSymbolTable
    from hta.trace_analysis import TraceAnalysis

    ranks = traceset.files.column(S.RANK).to_pylist()
    if not ranks:
        raise HTAInteropError("no trace files to give HTA")
    several = sorted({rank for rank in ranks if ranks.count(rank) > 1})
    if several:
        paths = [path for rank, path in zip(ranks, traceset.files.column(S.PATH).to_pylist()) if rank == several[0]]
        raise HTAInteropError(f"HTA holds one trace file per rank; rank(s) {several} have several profiling "
                              f"windows (rank {several[0]}: {', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})"
                              ": load one window's files")
    frames = rank_frames(traceset)
    symbols = TraceSymbolTable()
    symbols.add_symbols(sorted(set().union(*(set(rf.frame["cat"].unique()) | set(rf.frame["name"].unique())
                                             for rf in frames))))
    sym_index = symbols.get_sym_id_map()
    stream0_cpu_ops = dist == "traceinsight"      # its add_iteration also steps cpu ops on stream 0 (triton)
    paths = {rf.rank: os.path.abspath(rf.path) for rf in frames}
    # no files given to HTA: it would check that they exist, and a parquet store has no JSON left to check
    trace = Trace(trace_files={}, trace_dir=os.path.dirname(next(iter(paths.values()))))
    trace.trace_files = paths
    for rf in frames:
        frame = transform_correlation_to_index(encode(rf, sym_index), symbols)
        add_iteration(frame, sym_index, stream0_cpu_ops)
        metadata = dict(rf.metadata)
        if hasattr(trace_parser, "infer_gpu_type"):            # traceinsight records the device type
            metadata["device_type"] = trace_parser.infer_gpu_type(metadata, sym_index)
        trace.traces[rf.rank], trace.meta_data[rf.rank] = frame, metadata
    trace.symbol_table = symbols
    trace.align_and_filter_trace(include_last_profiler_step)
    for rank, frame in trace.traces.items():                   # as HTA's load_traces ends
        frame = frame.set_index("index", drop=False)
        frame.index.names = [None]
        trace.traces[rank] = frame
    trace.is_parsed = True
    checked = _checked_analysis_class(TraceAnalysis, f"{dist} {version}")
    analysis = checked.__new__(checked)        # not __init__: that would parse the JSON again
    analysis.t = trace
    return analysis


@functools.lru_cache(maxsize=None)
def _checked_analysis_class(base: type, hta_name: str) -> type:
    """A TraceAnalysis subclass whose public methods turn an exception into one HTAInteropError naming the
    analysis and the HTA version (the object stays usable for the other analyses)."""
    def checked(name: str, method: Callable) -> Callable:
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                raise HTAInteropError(f"HTA analysis {name} failed ({hta_name}, on traceattr's frames): "
                                      f"{type(exc).__name__}: {exc}") from exc
        return run
    methods = {name: checked(name, member) for name, member in vars(base).items()
               if callable(member) and not name.startswith("_")}
    return type("TraceAnalysis", (base,), methods)


def from_trace_analysis(analysis) -> TraceSet:
    """A TraceSet from an HTA TraceAnalysis (however it was loaded), one window per rank.

    Precision HTA's frames lost, and so this TraceSet does not have: times are whole µs (HTA rounds ns
    timestamps inwards, `ts` up and the end down, and float64 cannot hold epoch µs with ns digits);
    with two or more ProfilerSteps HTA dropped the last step's rows and the kernels it launched; HTA also
    keeps only device activities joined to a host launch (a kernel whose launch record was lost is gone);
    kernel/memcpy/memset spellings, `Collective name`, sequence numbers and python frame ids are not in HTA's
    frames (communication kernels are told by NCCL/RCCL/HCCL in the name); the window is the span of the rows kept."""
    trace = getattr(analysis, "t", None)
    if trace is None or not getattr(trace, "traces", None):
        raise HTAInteropError(f"not an HTA TraceAnalysis with loaded traces: {type(analysis).__name__}")
    for rank, frame in trace.traces.items():
        missing = [column for column in REQUIRED_COLUMNS if column not in frame.columns]
        if missing:
            raise HTAInteropError(f"HTA's frame of rank {rank} lacks column(s) {', '.join(missing)}")
    return traceset_from_trace(trace)
