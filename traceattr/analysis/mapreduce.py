"""Per-file map-reduce of every summary table: the driver holds small aggregates, never the traces.

Every sweep group (rank, window, device) and every link (activity -> launch -> op -> step) lives inside one
trace file, so each table `summarize` shows is computed per file where the file is decoded (a pool worker,
or a Dask worker next to the data). Only small per-file aggregates travel to the driver, which reduces them
exactly (int64 sums) into the same tables, bit for bit, as `load()` + `summarize()`/`attribute()` on the
whole TraceSet. The full TraceSet is built only where a caller asks for one (`traceattr.load`, notebooks).

The map step (`map_file`, picklable, one file): decode (or read the file cache), make a TraceSet of that one
file with rank 0 and window 0 (the real rank and window depend on every file: distributedInfo, names,
rank_map, the time order of a rank's windows), and return a FileAggregate:

  facts        the DecodedFile without tables: what `io.load.assemble` needs to assign ranks and windows
  groups       the sweep's rows per (rank, window, device): busy, idle, overlap, category and exposed
               communication ns, activities (rank table, header)
  kernels      count, duration, self and solo ns per (rank, device, name, category) (kernel, category)
  part         an attribute.AttributionPart of the requested level (op, op_stack, module, annotation, step)
  steps        the ProfilerStep#N ranges (a few rows; step-time imbalance), step_names their names
  spans        device_span_ns per (rank, device): first device start to last end of the file's window
  step_busy    busy ns per (step name, rank) (the outlier step, measured on its slowest rank)
  link_report  the link checks of the file (--links)
  extracts     {name: object} from the Extract hooks of the plan

The reduce step (`reduce_files`, the driver): assign ranks and windows from all facts, relabel rank 0 and
window 0 in each aggregate, then concatenate groups, re-sum kernel rows, merge attribution parts (paths and
names matched by text, steps ordered by number), concatenate link reports and reduce each extract.
Cross-file facts are reduced, never decided per file: a rank's window and idle time sum over its files, its
busy time over its files and devices; the busiest rank (the most busy time against the median rank; the
straggler is another fact, analysis/mapreduce_comm.py) is known only after every file, so the per-key units
of just those two ranks come from a second small map over their files (read from the cache when it is on).

Adding a column (the contract):
* per (rank, window, device), additive or min/max (e.g. a device span, first device start to last end):
  add it to the sweep groups (attribution/sweep.py GROUP_COLUMNS); it reaches the driver in `groups` and
  rank_table reduces it per rank (sum, or min/max).
* anything else: an Extract(name, extract, pile) in the plan: extract(one-file TraceSet) -> a small
  picklable object (rank 0, window 0); on the driver a pile() takes each file's object as it arrives,
  add(index, object), folding what does not need the rank (sums, histograms, min/max) and keeping the rest
  as numpy columns tagged with the file's position, never an object per file; reduce(rank_of, window_of)
  -> the result, found in `Reduced.extracts[name]`. Cross-rank matching (collectives by group and sequence
  number, wait/transfer) belongs in `reduce`, over the extracts, never over the traces. The function and
  the class must be top level (they travel to workers by name).
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import functools
import json
import pickle
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from traceattr import schema as S
from traceattr.allocator import give_back_free_heap, heap_holes_returned, small_arrays_returned
from traceattr.analysis.attribute import (AttributionPart, attribution_part, attribution_table, check_level,
                                          link_report, merge_parts)
from traceattr.analysis.fold import fold_below_top
from traceattr.analysis.header import header_of, rules_text, with_table_facts
from traceattr.analysis.imbalance import (STEP_NAME, rank_facts_of, rank_imbalance_of, step_facts_of,
                                          step_imbalance_of, step_ranges)
from traceattr.analysis.keys import STEP, activity_keys, step_names
from traceattr.analysis.summarize import (CATEGORY_COLUMNS, KERNEL_COLUMNS, LEVELS as SUMMARY_LEVELS,
                                          device_spans, empty_frame, kernel_sums, keys_table, rank_table)
from traceattr.attribution import columns as C
from traceattr.attribution.links import CHECKS, step_order
from traceattr.attribution.sweep import sweep
from traceattr.errors import TraceError, TraceInputError
from traceattr.io.cache import FileCache
from traceattr.io.codes import dictionary_column, text_codes
from traceattr.io.cluster import executor_pool
from traceattr.io.comm import RULE_NAMES, apply_patterns, compile_patterns, time_by_rule
from traceattr.io.decode import DecodedFile
from traceattr.io.header import DROP_WARNINGS_KEY, parse_metadata
from traceattr.io.discover import find_trace_files
from traceattr.io.load import drop_host, files_table, one_file, place_files
from traceattr.io.parallel import FileFailure, as_executor, cached_decode_task, decode_files, decodes_here, successes
from traceattr.io.staged import check_one_run, hollow
from traceattr.io.summaries import is_capture_manifest
from traceattr.model.traceset import TraceSet
from traceattr.attribution.sweep import GROUP_COLUMNS

# kernel, category and rank tables need no cpu ops or python frames (the bulk of a trace); steps still come
# from the annotations and the runtime calls that launched each kernel
UNUSED_HOST = (S.CPU_OP, S.PYTHON_FUNCTION)


@dataclass(frozen=True)
class Extract:
    """A per-file fact beyond the built-in tables: extract(one-file TraceSet) -> small picklable object, in
    the worker; on the driver pile() -> an object whose add(index, object) takes each file's object as it
    arrives (index: the file's position) and whose reduce(rank_of, window_of) gives the result (rank_of[index],
    window_of[index]: that file's rank and window, -1 for a file the load skipped). A top-level function and
    class (the plan travels to the workers by name)."""
    name: str
    extract: Callable[[TraceSet], Any]
    pile: Callable[[], Any]


class Listed:
    """An Extract's pile for objects reduced all at once: holds each file's object as it came and calls
    reduce([(rank, window, object), ...]) over the kept files in load order. For objects that are small or
    that the reduce needs side by side; fold the others as they arrive (analysis/mapreduce_check.py)."""

    def __init__(self, reduce: Callable[[list], Any]) -> None:
        self.reduce_list, self.found = reduce, []

    def add(self, index: int, found) -> None:
        self.found.append((index, found))

    def reduce(self, rank_of: np.ndarray, window_of: np.ndarray):
        return self.reduce_list([(int(rank_of[i]), int(window_of[i]), found) for i, found in self.found
                                 if rank_of[i] >= 0])


def listed(reduce: Callable[[list], Any]) -> Callable[[], Listed]:
    """Extract(name, extract, listed(reduce)): the pile of an extract reduced from the list of objects."""
    return functools.partial(Listed, reduce)


@dataclass(frozen=True)
class Plan:
    """What the map step computes for each file."""
    by: str = "kernel"
    links: bool = False
    units_only: bool = False            # second pass: kernel units of the straggler and median ranks
    extracts: tuple[Extract, ...] = ()
    comm_patterns: tuple[str, ...] = ()  # --comm-pattern: applied to each file first (io.comm.apply_patterns)
    keep_host: bool = False             # keep cpu ops and python frames for extracts that attribute to them


@dataclass
class FileAggregate:
    facts: DecodedFile                  # tables None (arrow buffers are not sent for nothing)
    from_cache: bool
    groups: dict | None = None
    kernels: dict | None = None           # frames travel as numpy columns (numpy_columns)
    part: AttributionPart | None = None
    step_names: tuple[str, ...] = ()
    steps: dict | None = None
    step_busy: dict | None = None
    spans: dict | None = None             # device_span_ns per (rank, device): summarize.device_spans
    units: dict | None = None
    link_report: dict | None = None
    comm_rules: dict = field(default_factory=dict)   # Σ self ns per communication rule (io.comm.time_by_rule)
    extracts: dict = field(default_factory=dict)


# --- the map step ------------------------------------------------------------------------------

def map_file(path: str, shown_path: str | None = None, *, plan: Plan,
             cache_folder: str | None = None) -> FileAggregate | FileFailure:
    """One file, in a worker: decode it (or read the file cache in `cache_folder`) and aggregate it."""
    shown = shown_path or path
    decoded, from_cache = cached_decode_task(path, shown, cache_folder)
    if isinstance(decoded, FileFailure):
        return decoded
    decoded = _names_needed(decoded, plan)     # first: the plain names go before the host filter's copy
    give_back_free_heap()                      # the cache write's holes and the plain names
    decoded = _host_needed(decoded, plan)      # here, so the dropped host rows are freed before the sweep
    give_back_free_heap()
    try:
        return aggregate_file(decoded, plan, from_cache)
    except TraceError as exc:     # a file that breaks an analysis is named like a file that breaks decoding
        return FileFailure(shown, " ".join(str(exc).split()), False)


def aggregate_file(decoded: DecodedFile, plan: Plan, from_cache: bool = False) -> FileAggregate:
    """The map step on a decoded file (map_file after decoding)."""
    decoded = _host_needed(decoded, plan)
    traceset = apply_patterns(one_file(decoded), plan.comm_patterns)
    out = FileAggregate(driver_facts(decoded), from_cache)
    has_device = traceset.device.num_rows > 0
    if plan.units_only or (plan.by in ("rank", "step") and not plan.links):   # links: only when steps matter
        out.step_names = step_names(traceset)
    if plan.units_only:
        if has_device:
            out.units = numpy_columns(named_steps(activity_keys(traceset, "kernel"), out.step_names))
        return out
    out.groups = numpy_columns(sweep(traceset).groups)
    give_back_free_heap()                      # the sweep's freed point arrays (two points per activity)
    if has_device and (out.groups[C.COMMUNICATION_NS] > 0).any():
        out.comm_rules = time_by_rule(traceset, sweep(traceset).self_ns)
    if plan.links:
        out.link_report = numpy_columns(link_report(traceset))
    elif plan.by in ("kernel", "category"):
        out.kernels = numpy_columns(kernel_sums(traceset)) if has_device else None
    elif plan.by not in SUMMARY_LEVELS:
        out.part = attribution_part(traceset, plan.by)
    if plan.by in ("rank", "step") and not plan.links:
        out.steps = numpy_columns(step_ranges(traceset))
    if plan.by == "rank" and not plan.links:
        out.spans = numpy_columns(device_spans(traceset).reset_index())
    if plan.by == "step" and has_device and not plan.links:
        units = named_steps(activity_keys(traceset, "kernel"), out.step_names)
        out.step_busy = numpy_columns(units[units[STEP_NAME] != ""].groupby([STEP_NAME, S.RANK], as_index=False)[
            S.SELF_NS].sum())
    out.extracts = {extract.name: extract.extract(traceset) for extract in plan.extracts}
    return out


def driver_facts(decoded: DecodedFile) -> DecodedFile:
    """A file's header facts for the trip to the driver, which holds them until every file is in: hollow()
    with only the pids of its host rows (io/runs.py reads nothing else of them: an arrow column costs the
    driver ~1 KB, a table ~16 KB), and of its texts only what the driver reads. Whole, they grow with the
    world size (distributedInfo lists every rank of each process group: 5.5 KB of metadata a file at 1024
    ranks, and 3 KB of device properties), and no map-reduce answer shows them."""
    facts = hollow(decoded)
    return dataclasses.replace(facts, host=facts.host.select([S.PID]), metadata=_driver_metadata(facts.metadata),
                               device_properties="", phases={}, dropped={}, unmapped={})


def _driver_metadata(metadata: str) -> str:
    """The metadata JSON cut to the keys the driver reads: distributedInfo's backend (io/runs.py tells runs
    apart by it) and the profiler's drop warnings (check.loader_rows); "" when it is not a JSON object."""
    found = parse_metadata(metadata)
    if found is None:
        return ""
    info = found.get("distributedInfo")
    kept = {"distributedInfo": {"backend": info["backend"]}} if isinstance(info, dict) and "backend" in info else {}
    if DROP_WARNINGS_KEY in found:
        kept[DROP_WARNINGS_KEY] = found[DROP_WARNINGS_KEY]
    return json.dumps(kept)


def _summary_only(plan: Plan) -> bool:
    """The plan reads no host rows but a few (the summary levels, without links or extracts that attribute)."""
    return plan.by in SUMMARY_LEVELS and not plan.links and not plan.keep_host


def _host_needed(decoded: DecodedFile, plan: Plan) -> DecodedFile:
    """`decoded` without the host rows the plan never reads (itself when it already has none of them), its
    kernel names dictionary-encoded when the plan reads them only so (_names_needed)."""
    return drop_host(_names_needed(decoded, plan), UNUSED_HOST) if _summary_only(plan) else decoded


def _names_needed(decoded: DecodedFile, plan: Plan) -> DecodedFile:
    """coded_names(decoded) for the summary levels, whose map step reads the names through
    io.codes.dictionary_codes, arrow filters and to_numpy only (the same answers on either form); else
    `decoded`."""
    return coded_names(decoded) if _summary_only(plan) else decoded


def coded_names(decoded: DecodedFile) -> DecodedFile:
    """`decoded` with its device names as a dictionary column (distinct names in first-seen order, what
    io.codes.dictionary_codes gives), unless they are already: a kernel name repeats on most device rows,
    and as plain text they were the largest column of the map step (14 MiB of the 202 MB trace's 26.5 MiB
    device table, held from the decode to the check). The file cache keeps the plain column (it is written
    before)."""
    column = decoded.device.column(S.NAME)
    if pa.types.is_dictionary(column.type):
        return decoded
    names = dictionary_column(column)
    at = decoded.device.schema.get_field_index(S.NAME)
    return dataclasses.replace(decoded, device=decoded.device.set_column(at, pa.field(S.NAME, names.type), names))


def numpy_columns(frame: pd.DataFrame | pa.Table) -> dict[str, np.ndarray]:
    """A frame (or arrow table) as numpy columns, text as object arrays, for the trip to the driver: pandas 3
    keeps text in arrow buffers, and arrow buffers unpickled in the driver land in its mimalloc pool, which
    kept about 150 KB per file (measured: 8-10 MB more for 56 more files, against under 3 MB with numpy
    columns). One column lookup each: a pandas 3 lookup costs ~0.15 ms, a fifth of a small file's map."""
    if isinstance(frame, pa.Table):
        return {name: frame.column(name).to_numpy(zero_copy_only=False) for name in frame.column_names}
    return {name: _numpy(column) for name, column in frame.items()}


def _numpy(column: pd.Series) -> np.ndarray:
    text = column.dtype.kind in "OUT" or str(column.dtype) == "str"
    return column.to_numpy(dtype=object if text else None)


def _frame(columns: dict[str, np.ndarray] | None) -> pd.DataFrame | None:
    return None if columns is None else pd.DataFrame(columns)


def concat_columns(items: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([item[name] for item in items]) for name in items[0]}


def named_steps(units: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    """activity_keys rows with their step as a name (step indexes differ between files; "": no step)."""
    text = np.asarray(list(names) + [""], dtype=object)
    step = units[STEP].to_numpy(dtype=np.int64)
    units = units.drop(columns=STEP)
    units[STEP_NAME] = text[np.where(step >= 0, step, len(names))]
    return units


# --- the reduce step ----------------------------------------------------------------------------

@dataclass
class Reduced:
    files: pa.Table                     # one row per kept file (schema.FILE_SCHEMA)
    notes: tuple[str, ...]
    groups: pd.DataFrame                # sweep GROUP_COLUMNS, ordered by (rank, window, device)
    kernels: pa.Table | None
    part: AttributionPart | None
    step_names: tuple[str, ...]
    steps: pd.DataFrame                 # ProfilerStep ranges in load order
    step_busy: pd.Series | None         # busy ns per (step, rank): imbalance.step_busy
    spans: pd.Series | None             # device_span_ns per (rank, device)
    link_report: pd.DataFrame | None
    comm_rules: dict                    # Σ self ns per communication rule, summed over files
    extracts: dict
    decoded: int                        # files decoded from JSON
    cached: int                         # files read from the cache
    paths_of_rank: dict[int, list[str]]


COMPACT_EVERY = 128      # aggregates held before they are concatenated (a small DataFrame costs ~10 KB)


class Chunks:
    """Per-file numpy columns (dicts of equal-length arrays) as they arrive, every COMPACT_EVERY of them
    concatenated into a chunk of its own, so the driver holds a few arrays, not a small object per file. Never
    one array regrown at each compaction: each regrowth left the old array's heap hole behind, too small for
    the next one (at 1024 files the driver's RSS grew by about twice the columns it held). A chunk's integer
    columns are held in the narrowest type that holds their values (positions, devices, counts, streams are
    small) and its object columns as codes into their distinct values, both given back as they were by
    whole(): exact, and the piles at 1024 x 10 MB 4.5 -> 1.4 MB."""

    def __init__(self) -> None:
        self.chunks: list[dict[str, np.ndarray]] = []
        self.tail: list[dict[str, np.ndarray]] = []
        self.dtypes: dict[str, np.dtype] = {}

    def append(self, columns: dict[str, np.ndarray]) -> None:
        for name, values in columns.items():       # each column's own type: what concatenating them gives
            self.dtypes[name] = np.promote_types(self.dtypes.get(name, values.dtype), values.dtype)
        self.tail.append(columns)
        if len(self.tail) >= COMPACT_EVERY:
            self.chunks.append({name: held(values) for name, values in concat_columns(self.tail).items()})
            self.tail = []

    def __bool__(self) -> bool:
        return bool(self.chunks or self.tail)

    def whole(self) -> dict[str, np.ndarray] | None:
        """Every file's columns concatenated in their own types (None when there were none), held as that one
        chunk from now."""
        items = self.chunks + self.tail
        if not items:
            return None
        self.chunks, self.tail = [{
            name: np.concatenate([unheld(item[name]) for item in items], dtype=dtype) if len(items) > 1
            else unheld(items[0][name]).astype(dtype, copy=False) for name, dtype in self.dtypes.items()}], []
        return self.chunks[0]


_NARROWER = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32))


@dataclass(frozen=True)
class _Coded:
    """An object column as codes into its distinct values (the very objects: kernel names, kinds and groups
    repeat on every rank)."""
    codes: np.ndarray
    values: np.ndarray


def held(values: np.ndarray):
    """A chunk's column as Chunks holds it: integers narrowed, objects coded (unheld gives it back)."""
    if values.dtype != object:
        return narrowest(values)
    distinct: dict = {}
    try:
        codes = np.fromiter((distinct.setdefault(value, len(distinct)) for value in values.tolist()), np.int64,
                            count=len(values))
    except TypeError:           # values that cannot be a dict's keys: held as they are
        return values
    table = np.empty(len(distinct), dtype=object)
    table[:] = list(distinct)
    return _Coded(narrowest(codes), table)


def unheld(column) -> np.ndarray:
    return column.values[column.codes] if isinstance(column, _Coded) else column


def narrowest(values: np.ndarray) -> np.ndarray:
    """An integer column in the narrowest signed type that holds its values (else as it is)."""
    if values.dtype.kind != "i" or not len(values):
        return values
    low, high = int(values.min()), int(values.max())
    for dtype in _NARROWER:
        if dtype.itemsize >= values.dtype.itemsize:
            break
        if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values


class _Pile:
    """Aggregates as they arrive, tagged with their file's position (rank and window are not known until
    every file is in): numpy columns in Chunks, attribution parts merged every COMPACT_EVERY files."""

    def __init__(self, extracts: tuple[Extract, ...] = ()) -> None:
        # each file's header facts pickled into one buffer until every file is in: a dozen small objects per
        # file, kept among the many each aggregate frees, fragmented the heap (1024 files: 1-1.5 MB of RSS)
        self.fact_bytes = bytearray()
        self.fact_ends = array.array("q")
        self.cached = 0
        # per file, as the file's rank is not known yet: a file the load then skips (--skip-bad) must not
        # count (its communication time was in the header's 'communication by rule', 30 µs for 15)
        self.step_names: list[tuple[int, frozenset[str]]] = []
        self.extracts = {extract.name: extract.pile() for extract in extracts}
        self.comm_rules: list[tuple[int, dict[str, int]]] = []
        self.columns: dict[str, Chunks] = {name: Chunks() for name in _COLUMNS}
        self.parts: list[AttributionPart] = []

    def add(self, aggregate: FileAggregate) -> None:
        index = len(self.fact_ends)
        self.fact_bytes += pickle.dumps(aggregate.facts, protocol=pickle.HIGHEST_PROTOCOL)
        self.fact_ends.append(len(self.fact_bytes))
        self.cached += aggregate.from_cache
        if aggregate.step_names:
            self.step_names.append((index, frozenset(aggregate.step_names)))
        for name, found in aggregate.extracts.items():
            self.extracts[name].add(index, found)
        if aggregate.comm_rules:
            self.comm_rules.append((index, dict(aggregate.comm_rules)))
        for name, chunks in self.columns.items():
            value = getattr(aggregate, name)
            if value is not None:
                chunks.append(tagged(value, index))
        if aggregate.part is not None:
            self.parts.append(tagged(aggregate.part, index))
            if len(self.parts) >= COMPACT_EVERY:
                self.parts = [merge_parts(self.parts)]

    def all_facts(self) -> list[DecodedFile]:
        """Every file's header facts, in arrival order (mapreduce.shared_facts: texts shared)."""
        ends = self.fact_ends.tolist()
        with memoryview(self.fact_bytes) as view:
            facts = [shared_facts(pickle.loads(view[start:end])) for start, end in zip([0] + ends, ends)]
        self.fact_bytes = bytearray()
        return facts

    def one(self, name: str):
        if name == "part":
            if len(self.parts) > 1:
                self.parts = [merge_parts(self.parts)]
            return self.parts[0] if self.parts else None
        return self.columns[name].whole()


def tagged(value, index: int):
    """Put the file's position where its rank goes (relabelled by relabeled after assemble)."""
    if isinstance(value, AttributionPart):
        sums = dict(value.sums)
        sums[S.RANK] = np.full(len(sums[S.RANK]), index, dtype=np.int64)
        steps = frozenset((index, window, name) for _, window, name in value.step_windows)
        return dataclasses.replace(value, sums=sums, totals={(index, d): v for (_, d), v in value.totals.items()},
                                   ranks=(index,), step_windows=steps)
    value = owned_columns(value)
    if S.RANK not in value:      # step units: summed over ranks already
        return value
    return {**value, S.RANK: np.full(len(value[S.RANK]), index, dtype=value[S.RANK].dtype)}


def interned(column: np.ndarray) -> np.ndarray:
    """An object column whose texts are one shared object each (names repeat on every rank, and can be
    hundreds of bytes long)."""
    return np.array([sys.intern(text) if isinstance(text, str) else text for text in column.tolist()], dtype=object)


def owned_columns(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Numpy columns with one copy of each text (kernel names repeat on every rank and can be hundreds of
    bytes long; `Process Group Ranks` lists every rank of the group on every communication row), each
    owning its memory: a Dask client unpickles arrays as views into the message they came in, so a kept
    view of a few bytes kept the whole message (~20 KB a file at 1024 ranks)."""
    return {name: interned(column) if column.dtype == object else column.copy() if column.base is not None
            else column for name, column in columns.items()}


def shared_facts(facts: DecodedFile) -> DecodedFile:
    """The driver's copy of a file's header facts: its texts, the same on every rank, as one shared copy,
    and its host pids in a table of their own (owned_columns says why)."""
    pids = np.asarray(facts.host.column(S.PID).to_numpy(), dtype=np.int64).copy()
    return dataclasses.replace(facts, device_properties=sys.intern(facts.device_properties),
                               metadata=sys.intern(facts.metadata),
                               host=pa.table([pa.array(pids, facts.host.schema.field(S.PID).type)], [S.PID]))


_COLUMNS = ("groups", "kernels", "steps", "step_busy", "spans", "link_report")   # FileAggregate's


def reduce_files(results, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
                 origin: str = "input", extracts: tuple[Extract, ...] = (), notes: list[str] | None = None) -> Reduced:
    """Reduce map_file results (in path order) exactly; failures raise or are skipped as load() does, and
    several runs under one path raise SeveralRunsError as load() does. `notes`: the load's notes, a list
    that may still grow while `results` streams by (read once they are all in)."""
    pile, notes = _Pile(extracts), notes if notes is not None else []
    for result in successes(results, skip_bad, notes):
        pile.add(result)
    facts = pile.all_facts()
    check_one_run(facts, origin, rank_map)      # as load(): several runs are never merged
    kept, notes = place_files(facts, notes=notes, skip_bad=skip_bad, rank_map=rank_map, origin=origin)
    files = files_table(kept)     # what assemble() gives, without stacking an empty table per file
    del kept
    place = {path: (rank, window) for path, rank, window in zip(
        files.column(S.PATH).to_pylist(), files.column(S.RANK).to_pylist(), files.column(S.WINDOW).to_pylist())}
    rank_of = np.array([place.get(f.path, (-1, -1))[0] for f in facts] + [-1], dtype=np.int64)
    window_of = np.array([place.get(f.path, (-1, -1))[1] for f in facts] + [-1], dtype=np.int64)
    groups = relabeled(pile.one("groups"), rank_of, window_of)
    if groups is not None:
        groups = groups.sort_values([S.RANK, S.WINDOW, S.DEVICE], kind="stable").reset_index(drop=True)
    kernels = coded_rows(pile.one("kernels"), rank_of)
    part = pile.one("part")
    names = tuple(sorted(frozenset().union(*(found for i, found in pile.step_names if rank_of[i] >= 0)),
                         key=step_order))
    comm_rules: dict[str, int] = {}
    for i, rules in pile.comm_rules:
        if rank_of[i] >= 0:
            for rule, ns in rules.items():
                comm_rules[rule] = comm_rules.get(rule, 0) + ns
    step_busy = relabeled(pile.one("step_busy"), rank_of)
    spans = relabeled(pile.one("spans"), rank_of)
    paths_of_rank: dict[int, list[str]] = {}
    for fact in facts:
        if fact.path in place:
            paths_of_rank.setdefault(place[fact.path][0], []).append(fact.path)
    report = relabeled(pile.one("link_report"), rank_of, window_of)
    reduced = Reduced(
        files=files, notes=tuple(notes), groups=groups if groups is not None else _empty_groups(),
        kernels=kernels,
        part=relabeled_part(part, rank_of) if part is not None else None, step_names=names,
        steps=relabeled(pile.one("steps"), rank_of) if pile.columns["steps"] else _empty_steps(),
        step_busy=_step_busy(step_busy, names) if step_busy is not None else None,
        spans=spans.groupby([S.RANK, S.DEVICE])[S.DEVICE_SPAN_NS].sum() if spans is not None else None,
        link_report=_sorted_report(report) if report is not None else None,
        comm_rules={rule: comm_rules[rule] for rule in RULE_NAMES if rule in comm_rules},
        extracts={name: found.reduce(rank_of, window_of) for name, found in pile.extracts.items()},
        decoded=len(facts) - pile.cached, cached=pile.cached, paths_of_rank=paths_of_rank)
    del pile          # its chunks were the heap's holes
    heap_holes_returned()
    return reduced


def relabeled(columns: dict | None, rank_of: np.ndarray, window_of: np.ndarray | None = None):
    """File positions -> ranks (and windows); rows of files that assemble() skipped are dropped."""
    if columns is None:
        return None
    frame = pd.DataFrame(columns)
    index = frame[S.RANK].to_numpy(dtype=np.int64)
    keep = rank_of[index] >= 0
    frame = frame[keep].copy()
    frame[S.RANK] = rank_of[index[keep]].astype(frame[S.RANK].dtype)
    if window_of is not None:
        frame[S.WINDOW] = window_of[index[keep]].astype(frame[S.WINDOW].dtype)
    return frame.reset_index(drop=True)


def coded_rows(columns: dict | None, rank_of: np.ndarray) -> pa.Table | None:
    """relabeled() as an arrow table whose texts are dictionary-encoded: kernel names repeat on every rank
    and can be hundreds of bytes long, and a text column held each row's own copy (1024 ranks x 16 kernels:
    3 MB a copy, and the kernel table took several)."""
    if columns is None:
        return None
    index = columns[S.RANK].astype(np.int64)
    keep = rank_of[index] >= 0
    out = {}
    for name, values in columns.items():
        values = values[keep]
        if name == S.RANK:
            out[name] = pa.array(rank_of[index[keep]].astype(values.dtype))
        elif values.dtype == object:
            codes, texts = text_codes(values, sort=True)
            out[name] = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32), mask=codes < 0),
                                                       pa.array(texts, pa.string()))
        else:
            out[name] = pa.array(values)
    return pa.table(out)


def placed_rows(columns: dict[str, np.ndarray], rank_of: np.ndarray, window_of: np.ndarray) -> np.ndarray:
    """relabeled() in place, without the copy: the file positions in `columns`' rank column become ranks and
    windows; returns the rows of the files assemble() kept."""
    files = columns[S.RANK].astype(np.int64, copy=False)
    columns[S.RANK], columns[S.WINDOW] = rank_of[files], window_of[files]
    return np.flatnonzero(columns[S.RANK] >= 0)


def relabeled_part(part: AttributionPart, rank_of: np.ndarray) -> AttributionPart:
    sums = dict(part.sums)
    keep = rank_of[sums[S.RANK]] >= 0
    sums = {name: values[keep] for name, values in sums.items()}
    sums[S.RANK] = rank_of[sums[S.RANK]]
    totals: dict[tuple[int, int], int] = {}
    for (index, device), value in part.totals.items():
        if rank_of[index] >= 0:
            key = (int(rank_of[index]), device)
            totals[key] = totals.get(key, 0) + value
    ranks = tuple(sorted({int(rank_of[i]) for i in part.ranks if rank_of[i] >= 0}))
    # a file's steps (tagged by its index): the index tells its window from the rank's others
    step_windows = frozenset((int(rank_of[index]), index, name) for index, _, name in part.step_windows
                             if rank_of[index] >= 0)
    # merge once more: several windows of one rank become one (rank, device, code) row each
    merged = merge_parts([dataclasses.replace(part, sums=sums, totals=totals, ranks=ranks, step_windows=step_windows)])
    return merged


def _units_again(runner: Runner, paths: list[str], always_pool: bool):
    """(path, kernel units with step names) of each file that has device activities: a second map."""
    with contextlib.closing(runner.map(paths, Plan(units_only=True), always_pool)) as results:
        for result in successes(results, False, []):
            if result.units is not None:
                yield result.facts.path, result.units


def indexed_steps(units: dict | pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    """Step names back to indexes into the merged step order (-1: outside every step)."""
    index = {name: i for i, name in enumerate(names)}
    units = pd.DataFrame(units)
    units[STEP] = np.array([index.get(name, -1) for name in units.pop(STEP_NAME).tolist()], dtype=np.int64)
    return units


def _step_busy(frame: pd.DataFrame, names: tuple[str, ...]) -> pd.Series:
    """Busy ns per (step index in the merged order, rank)."""
    index = {name: i for i, name in enumerate(names)}
    frame = frame.assign(**{STEP: [index[name] for name in frame[STEP_NAME].tolist()]})
    return frame.groupby([STEP, S.RANK])[S.SELF_NS].sum()


def _sorted_report(report: pd.DataFrame) -> pd.DataFrame:
    order = {name: i for i, name in enumerate(CHECKS)}
    report["_order"] = report["check"].map(order)
    return report.sort_values([S.RANK, S.WINDOW, "_order"]).drop(columns="_order").reset_index(drop=True)


def _empty_groups() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype="int64") for name in GROUP_COLUMNS})


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({S.RANK: pd.Series([], dtype="int32"), S.NAME: pd.Series([], dtype=object),
                         S.START_NS: pd.Series([], dtype="int64"), S.END_NS: pd.Series([], dtype="int64"),
                         S.DURATION_NS: pd.Series([], dtype="int64")})


# --- the driver -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Runner:
    """Where map steps run: a process pool of `jobs`, or `executor` (any concurrent.futures.Executor)."""
    jobs: int | None = None
    executor: Any = None
    cache_folder: str | None = None
    progress: bool = False

    def map(self, paths: list[str], plan: Plan, always_pool: bool = False):
        """map_file over `paths`; `always_pool`: a later map of a run of several files, which must not
        decode even one file in the driver (decode_files)."""
        task = functools.partial(map_file, plan=plan, cache_folder=self.cache_folder)
        return decode_files(paths, jobs=self.jobs, executor=self.executor, progress=self.progress, task=task,
                            always_pool=always_pool)

    def decodes_here(self, files: int) -> bool:
        """Whether a map over `files` files decodes in this process (io.parallel.decode_files' rule; a
        later map of several files' run never does)."""
        return decodes_here(files, jobs=self.jobs, executor=self.executor)

    def reducing_only(self, files: int):
        """allocator.small_arrays_returned while the driver only reduces: when workers decode every one of
        `files` files (and so every later map of their run)."""
        return small_arrays_returned(not self.decodes_here(files))


def reduce_path(path, *, by: str = "kernel", links: bool = False, skip_bad: bool = False,
                rank_map: dict[str, int] | None = None, jobs: int | None = None, executor: Any = None,
                cache: bool | FileCache = True, progress: bool = False,
                extracts: tuple[Extract, ...] = (), comm_patterns: tuple[str, ...] = (),
                keep_host: bool = False) -> tuple[Reduced, Runner]:
    """Map every trace file under `path` and reduce the aggregates (a store is not a trace path: use load)."""
    found_notes: list[str] = []          # folders that could not be listed, noted first as load() does
    files = [str(f) for f in find_trace_files(path, found_notes) if not is_capture_manifest(f)]
    file_cache = FileCache.of(cache)
    folder = str(file_cache.dir.root) if file_cache is not None else None
    runner = Runner(jobs, as_executor(executor), folder, progress)
    plan = Plan(by=by, links=links, extracts=tuple(extracts), comm_patterns=tuple(comm_patterns), keep_host=keep_host)
    with runner.reducing_only(len(files)), contextlib.closing(runner.map(files, plan)) as results:
        reduced = reduce_files(results, skip_bad=skip_bad, rank_map=rank_map, origin=str(path),
                               extracts=plan.extracts)
    return dataclasses.replace(reduced, notes=tuple(found_notes) + tuple(reduced.notes)), runner


def source_of(counts, cache: bool) -> str:
    """The header's `source` line: how many files were decoded and how many the cache served (`counts`:
    a Reduced, or anything with `decoded` and `cached`)."""
    return f"traces ({counts.decoded} decoded, {counts.cached} from cache)" if cache else "traces (cache off)"


def table_of(reduced: Reduced, by: str, top: int | None = None, tree: bool = False,
             coded: bool = False) -> pd.DataFrame:
    """The table summarize(by) (kernel, category, rank) or attribute(by) would give on the whole TraceSet;
    `coded`: the kernel and category tables keep their texts categorical (summarize.keys_table)."""
    if top is not None and top < 1:
        raise TraceInputError(f"--top must be at least 1, got {top}")
    if by == "rank":
        return rank_table(reduced.groups, reduced.files, reduced.spans)
    if by in ("kernel", "category"):
        keys = [S.RANK, S.DEVICE, S.NAME, S.CATEGORY] if by == "kernel" else [S.RANK, S.DEVICE, S.CATEGORY]
        columns = KERNEL_COLUMNS if by == "kernel" else CATEGORY_COLUMNS
        if reduced.kernels is None:
            return empty_frame(columns)
        busy = reduced.groups.groupby([S.RANK, S.DEVICE])[S.BUSY_NS].sum()
        table = keys_table(reduced.kernels, busy, keys, columns, coded=coded)
        if top is None:
            return table
        return fold_below_top(table, top, keys[2], [S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS, S.SELF_PCT])
    check_level(by, tree)
    return attribution_table(reduced.part, tree=tree, top=None if tree else top)


def header_for(reduced: Reduced, table: pd.DataFrame, by: str, runner: Runner | None = None,
               check: str | None = None) -> dict:
    """table_header() of the whole TraceSet, from the reduced aggregates; its `check` line when given
    (analysis/mapreduce_check.py computes it with a check Extract in the plan)."""
    header = header_of(reduced.files, reduced.groups, reduced.notes, check=check)
    if reduced.comm_rules:
        header["communication by rule"] = rules_text(reduced.comm_rules)
    imbalance = None
    if by == "rank" and header["activities"]:
        units_of = functools.partial(_rank_units, reduced, runner or Runner())
        imbalance = rank_facts_of(rank_imbalance_of(rank_table(reduced.groups, reduced.files), reduced.steps,
                                                    units_of, len(reduced.step_names)))
    elif by == "step" and header["activities"]:
        units_of = functools.partial(_rank_units, reduced, runner or Runner())
        imbalance = step_facts_of(step_imbalance_of(reduced.step_names, reduced.step_busy, reduced.steps,
                                                    units_of))
    return with_table_facts(header, table, imbalance)


def _rank_units(reduced: Reduced, runner: Runner, ranks: list[int]) -> pd.DataFrame:
    """activity_keys(kernel) rows of these ranks: a second map over their files only."""
    paths = [p for r in dict.fromkeys(ranks) for p in reduced.paths_of_rank.get(r, [])]
    rank_of = dict(zip(reduced.files.column(S.PATH).to_pylist(), reduced.files.column(S.RANK).to_pylist()))
    several = reduced.files.num_rows > 1
    frames = [tagged(units, rank_of[path]) for path, units in _units_again(runner, paths, several)]
    if not frames:
        return activity_keys(TraceSet.empty(), "kernel")
    return indexed_steps(concat_columns(frames), reduced.step_names)


def report_files(path, *, by: str = "kernel", top: int | None = None, tree: bool = False, links: bool = False,
                 skip_bad: bool = False, rank_map: dict[str, int] | None = None, jobs: int | None = None,
                 executor: Any = None, scheduler: str | None = None, cache: bool = True,
                 progress: bool = False, comm_patterns: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict]:
    """(table, header) of `traceattr summarize PATH` computed by map-reduce over the trace files; with
    `links` the table is the link report. `scheduler`: a Dask scheduler address whose workers run the map."""
    if by not in SUMMARY_LEVELS:
        check_level(by, tree)
    with executor_pool(executor, scheduler) as executor:
        reduced, runner = reduce_path(path, by=by, links=links, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs,
                                      executor=executor, cache=cache, progress=progress,
                                      comm_patterns=comm_patterns)
        if links:
            table = reduced.link_report
            header = header_of(reduced.files, reduced.groups, reduced.notes)
        else:
            table = table_of(reduced, by, top, tree)
            header = header_for(reduced, table, by, runner)
    header["source"] = source_of(reduced, cache)
    return table, header


def summarize_files(path, by: str = "kernel", top: int | None = None, *, tree: bool = False,
                    skip_bad: bool = False, rank_map: dict[str, int] | None = None, jobs: int | None = None,
                    executor: Any = None, cache: bool = True, progress: bool = False,
                    comm_patterns: tuple[str, ...] = ()) -> pd.DataFrame:
    """summarize(path, ...) and attribute(path, ...): the table of any level for the traces under `path`,
    by map-reduce (no TraceSet is built). `executor`: a concurrent.futures.Executor or a Dask Client."""
    if by not in SUMMARY_LEVELS:
        check_level(by, tree)
    compile_patterns(comm_patterns)     # a bad pattern is the request's fault, not a file's
    reduced, _ = reduce_path(path, by=by, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, executor=executor,
                             cache=cache, progress=progress, comm_patterns=comm_patterns)
    return table_of(reduced, by, top, tree)
