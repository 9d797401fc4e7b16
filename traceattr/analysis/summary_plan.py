"""The summary plan: every summary table per file, reduced exactly on the engine (docs/design.md).

Every sweep group (rank, window, device) and every link (activity -> launch -> op -> step) lives inside one
trace file, so each table `summarize` shows is computed per file where the file is decoded (a pool worker,
or a Dask worker next to the data), or per file of a loaded TraceSet. Only small per-file aggregates reach
the driver, which reduces them exactly (int64 sums).

The map step (`aggregate`, on an engine Unit: one file alone, rank 0, window 0) returns a FileAggregate:

  facts        the DecodedFile without tables: what the placement needs to assign ranks and windows
  groups       the sweep's rows per (rank, window, device): busy, idle, overlap, category and exposed
               communication ns, activities (rank table, header)
  kernels      count, duration, self and solo ns per (rank, device, name, category) (kernel, category)
  part         an attribute.AttributionPart of the requested level (op, op_stack, module, annotation, step)
  steps        the ProfilerStep#N ranges (a few rows; step-time imbalance), step_names their names
  spans        device_span_ns per (rank, device): first device start to last end of the file's window
  step_busy    busy ns per (step name, rank) (the outlier step, measured on its slowest rank)
  link_report  the link checks of the file (--links)
  extracts     {name: part} of each Partial in the plan

The state (`_Pile`: update, skip, combine) keeps them tagged with the file's position; `finalized` relabels
them with the placement's ranks and windows, concatenates groups, re-sums kernel rows, merges attribution
parts (paths and names matched by text, steps ordered by number) and finalizes each partial. Cross-file facts
are reduced, never decided per file: a rank's window and idle time sum over its files, its busy time over
its files and devices; the busiest rank is known only after every file, so the per-key units of just those
two ranks come from a second small map over their files, through the same runner.

Adding a column (the contract):
* per (rank, window, device), additive or min/max: add it to the sweep groups (attribution/sweep.py
  GROUP_COLUMNS); it reaches the driver in `groups` and rank_table reduces it per rank.
* anything else: a Partial(name, map, state) in the plan's extracts (engine/partial.py); its result is
  `Reduced.extracts[name]`. Cross-rank matching belongs in the state's finalize, over the parts, never over
  the traces.
"""


from __future__ import annotations

import array
import contextlib
import dataclasses
import functools
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceattr import schema as S
from traceattr.allocator import give_back_free_heap, heap_holes_returned
from traceattr.analysis.attribute import (LEVELS as ATTRIBUTION_LEVELS, AttributionPart, attribution_part,
                                          attribution_table, check_level, link_report_columns, merge_parts)
from traceattr.analysis.findings import FINDINGS, Results, lines_of
from traceattr.analysis.findings_part import EXTRACT as FINDINGS_EXTRACT
from traceattr.analysis.fold import fold_below_top
from traceattr.analysis.graph_capture import graph_captures, unused_captures
from traceattr.analysis.header import header_of, rules_text, with_table_facts
from traceattr.analysis.imbalance import (STEP_NAME, Imbalance, rank_facts_of, rank_imbalance_of, step_facts_of,
                                          step_imbalance_of, step_range_columns)
from traceattr.analysis.keys import STEP, activity_keys, step_names
from traceattr.analysis.iteration import (EXTRACT as ITERATION_EXTRACT, LEVEL as ITERATION,
                                          with_top as longest_iterations)
from traceattr.analysis.phase import EXTRACT as PHASE_EXTRACT, LEVEL as PHASE, with_top as top_phases
from traceattr.analysis.launch import launch_table
from traceattr.analysis.roofline import PeakOverride, shape_table, with_roofline
from traceattr.analysis.summarize import (CATEGORY_COLUMNS, KERNEL_COLUMNS, LEVELS as SUMMARY_LEVELS,
                                          device_span_columns, empty_frame, kernel_sum_columns, keys_table,
                                          rank_table, with_exposed)
from traceattr.attribution import columns as C
from traceattr.attribution.links import CHECKS, link, step_order
from traceattr.attribution.sweep import GROUP_COLUMNS, sweep
from traceattr.engine.columns import COMPACT_EVERY, Chunks, concat_columns, numpy_columns, tag_columns
from traceattr.engine.partial import Partial, probes
from traceattr.engine.placement import Placement, placed, shared_facts, traceset_placement
from traceattr.engine.runner import Runner, TraceSetRunner
from traceattr.engine.units import Unit, UnitTask
from traceattr.errors import TraceInputError
from traceattr.io.cache import FileCache
from traceattr.io.codes import text_codes
from traceattr.io.comm_rules import RULE_NAMES, compile_patterns, time_by_rule
from traceattr.io.decode import DecodedFile
from traceattr.io.discover import discover
from traceattr.io.parallel import FileFailure, as_executor, successes
from traceattr.io.spill import spill_folder
from traceattr.io.store import is_store, read_store
from traceattr.model.graphs import GraphCatalog
from traceattr.model.traceset import TraceSet

# kernel, category and rank tables need no cpu ops or python frames (the bulk of a trace); steps still come
# from the annotations and the runtime calls that launched each kernel
UNUSED_HOST = (S.CPU_OP, S.PYTHON_FUNCTION)
# levels whose table one extract makes (no attribution part): --by phase, --by iteration
EXTRACT_LEVELS = {PHASE: PHASE_EXTRACT, ITERATION: ITERATION_EXTRACT}
EXTRACT_TOPS = {PHASE: top_phases, ITERATION: longest_iterations}     # what --top does to their tables
# levels whose --top picks rows of each rank before a table over ranks (a time series: not the largest keys)
TOP_PER_RANK = (ITERATION,)


@dataclass(frozen=True)
class Plan:
    """What the map step computes for each file."""
    by: str = "kernel"
    links: bool = False
    link_table: bool = True             # with links: each file's link checks (--links' table; check reads none)
    units_only: bool = False            # second pass: the units of the busiest and median ranks (or steps)
    units_by: str = "kernel"            # ...their activity_keys() level
    extracts: tuple[Partial, ...] = ()
    comm_patterns: tuple[str, ...] = ()  # --comm-pattern: applied to each file first (io.comm_rules.apply_patterns)
    keep_host: bool = False             # keep cpu ops and python frames for extracts that attribute to them
    exclude_carried_in: bool = False    # --exclude-carried-in: activities launched before the window left out
    graph_capture: tuple[str, ...] = ()  # --graph-capture paths, beside those found (graph_capture.py)
    graph_catalog: GraphCatalog | None = None   # the graph captures replays are matched to (with_graph_captures)

    def task(self) -> UnitTask:
        """The map step as the engine runs it on each file (engine/units.py)."""
        summary_only = _summary_only(self)
        probed = any(extract.probe is not None for extract in self.extracts)
        return UnitTask(functools.partial(aggregate, plan=self), drop_host=UNUSED_HOST if summary_only else (),
                        coded_names=summary_only, comm_patterns=self.comm_patterns, facts=True,
                        statuses=any(extract.on_unit for extract in self.extracts),
                        exclude_carried_in=self.exclude_carried_in, graph_catalog=self.graph_catalog,
                        host_probe=functools.partial(probes, self.extracts) if probed else None)


@dataclass
class FileAggregate:
    facts: DecodedFile | None           # tables None (arrow buffers are not sent for nothing); None: placed
    from_cache: bool
    path: str = ""
    groups: dict | None = None
    kernels: dict | None = None           # frames travel as numpy columns (numpy_columns)
    part: AttributionPart | None = None
    step_names: tuple[str, ...] = ()
    steps: dict | None = None
    step_busy: dict | None = None
    spans: dict | None = None             # device_span_ns per (rank, device): summarize.device_span_columns
    units: dict | None = None
    link_report: dict | None = None
    comm_rules: dict = field(default_factory=dict)   # Σ self ns per communication rule (io.comm_rules.time_by_rule)
    extracts: dict = field(default_factory=dict)
    graph_notes: tuple[str, ...] = ()     # the graph replays' (attribution/graphs.py), naming the file
    graphs_used: frozenset = frozenset()  # (capture path, range) of the captured graphs its replays matched


# --- the map step ------------------------------------------------------------------------------

def aggregate(unit: Unit, plan: Plan) -> FileAggregate:
    """The map step on one file (engine/units.py's Unit: the file alone, rank 0, window 0)."""
    traceset = unit.traceset
    out = FileAggregate(unit.facts, unit.from_cache, unit.path)
    has_device = traceset.device.num_rows > 0
    if plan.units_only or (plan.by in ("rank", "step") and not plan.links):   # links: only when steps matter
        out.step_names = step_names(traceset)
    if plan.units_only:
        if has_device:
            out.units = numpy_columns(named_steps(activity_keys(traceset, plan.units_by), out.step_names))
        return out
    out.groups = dict(sweep(traceset).columns)
    give_back_free_heap(events=traceset.device.num_rows)   # the sweep's freed point arrays (two an activity)
    if has_device and (out.groups[C.COMMUNICATION_NS] > 0).any():
        out.comm_rules = time_by_rule(traceset, sweep(traceset).self_ns)
    if plan.links:
        out.link_report = link_report_columns(traceset) if plan.link_table else None
    elif plan.by in ("kernel", "category"):
        out.kernels = kernel_sum_columns(traceset) if has_device else None
    elif plan.by not in SUMMARY_LEVELS and plan.by not in EXTRACT_LEVELS:    # their extract makes the table
        out.part = attribution_part(traceset, plan.by)
    if plan.by in ("rank", "step") and not plan.links:
        out.steps = step_range_columns(traceset)
    if plan.by == "rank" and not plan.links:
        out.spans = device_span_columns(traceset)
    if plan.by == "step" and has_device and not plan.links:
        units = named_steps(activity_keys(traceset, "kernel"), out.step_names)
        out.step_busy = numpy_columns(units[units[STEP_NAME] != ""].groupby([STEP_NAME, S.RANK], as_index=False)[
            S.SELF_NS].sum())
    out.extracts = {extract.name: _mapped(extract, unit, traceset) for extract in plan.extracts}
    if plan.links or out.part is not None:            # linked already: the graph replays' notes cost nothing
        found = link(traceset)
        out.graph_notes = tuple(f"{unit.path}: {note}" for note in found.graph_notes)
        out.graphs_used = found.graphs_used
    return out


def level_extracts(by: str) -> tuple[Partial, ...]:
    """The extracts a level's table is made of: --by phase's (analysis/phase.py) or --by iteration's
    (analysis/iteration.py); () for the others."""
    return (EXTRACT_LEVELS[by],) if by in EXTRACT_LEVELS else ()


def _mapped(extract: Partial, unit: Unit, traceset: TraceSet):
    """A partial's map on the file: with the probe's result on its whole host table, on the Unit, or on the
    file's TraceSet (engine/partial.py)."""
    if extract.probe is not None:
        return extract.map(traceset, (unit.probed or {}).get(extract.name))
    return extract.map(unit if extract.on_unit else traceset)


def _summary_only(plan: Plan) -> bool:
    """The plan reads no host rows but a few (the summary levels, without links or extracts that attribute)."""
    return plan.by in SUMMARY_LEVELS and not plan.links and not plan.keep_host


def _frame(columns: dict[str, np.ndarray] | None) -> pd.DataFrame | None:
    return None if columns is None else pd.DataFrame(columns)


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
    step_busy: pd.Series | None         # busy ns per (step index, rank): Σ self ns of its activities
    spans: pd.Series | None             # device_span_ns per (rank, device)
    link_report: pd.DataFrame | None
    comm_rules: dict                    # Σ self ns per communication rule, summed over files
    extracts: dict
    decoded: int                        # files decoded from JSON
    cached: int                         # files read from the cache
    paths_of_rank: dict[int, list[str]]
    graphs_used: frozenset = frozenset()   # (capture path, range) of the captured graphs some replay matched


class _Pile:
    """The map step's state (engine/partial.py): aggregates as they arrive, tagged with their file's position
    (rank and window are not known until every file is in): numpy columns in Chunks, attribution parts
    merged every COMPACT_EVERY files, and each partial of the plan in its own state."""

    def __init__(self, extracts: tuple[Partial, ...] = ()) -> None:
        # each file's header facts pickled into one buffer until every file is in: a dozen small objects per
        # file, kept among the many each aggregate frees, fragmented the heap (1024 files: 1-1.5 MB of RSS)
        self.fact_bytes = bytearray()
        self.fact_ends = array.array("q")
        self.kept_facts: list | None = None     # all_facts(keep=True)'s, until the next all_facts()
        self.first = 0              # the position of its first file: a state of a later run of files starts there
        self.cached = 0
        # per file, as the file's rank is not known yet: a file the load then skips (--skip-bad) must not
        # count (its communication time was in the header's 'communication by rule', 30 µs for 15)
        self.step_names: list[tuple[int, frozenset[str]]] = []
        self.extracts = {extract.name: extract.state() for extract in extracts}
        self.comm_rules: list[tuple[int, dict[str, int]]] = []
        self.columns: dict[str, Chunks] = {name: Chunks() for name in _COLUMNS}
        self.parts: list[AttributionPart] = []
        self.failures: list[FileFailure] = []      # files that could not be read (skip): a fold's, in order
        self.graph_notes: list[tuple[int, tuple[str, ...]]] = []
        self.graphs_used: set = set()

    def update(self, index: int, aggregate: FileAggregate) -> None:
        self._arrived(index, aggregate.facts)
        self.cached += aggregate.from_cache
        if aggregate.step_names:
            self.step_names.append((index, frozenset(aggregate.step_names)))
        for name, found in aggregate.extracts.items():
            self.extracts[name].update(index, found)
        if aggregate.comm_rules:
            self.comm_rules.append((index, dict(aggregate.comm_rules)))
        if aggregate.graph_notes:
            self.graph_notes.append((index, aggregate.graph_notes))
        self.graphs_used |= aggregate.graphs_used
        for name, chunks in self.columns.items():
            value = getattr(aggregate, name)
            if value is not None:
                chunks.append(tagged(value, index))
        if aggregate.part is not None:
            self.parts.append(tagged(aggregate.part, index))
            if len(self.parts) >= COMPACT_EVERY:
                self.parts = [merge_parts(self.parts)]

    def skip(self, index: int, failure: FileFailure) -> None:
        """A file that could not be read keeps its position (with no facts: placement.placed leaves it out);
        the driver raises its failure or notes it, as for the files it maps itself (reduce_files)."""
        self._arrived(index, None)
        self.failures.append(failure)

    def _arrived(self, index: int, facts: DecodedFile | None) -> None:
        """The file at `index` is the next of this state's (its first sets where the state starts): its
        header facts go to the buffer (None: a file not read)."""
        if not self.fact_ends:
            self.first = index
        assert index == self.first + len(self.fact_ends), "files arrive in source order"
        self.fact_bytes += pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL)
        self.fact_ends.append(len(self.fact_bytes))

    def combine(self, other: "_Pile") -> None:
        """Take the files of `other` (a state of the files right after this one's)."""
        if not self.fact_ends:
            self.first = other.first
        assert not other.fact_ends or other.first == self.first + len(self.fact_ends), "states combine in order"
        offset = len(self.fact_bytes)
        self.fact_ends.extend(end + offset for end in other.fact_ends)
        self.fact_bytes += other.fact_bytes
        self.cached += other.cached
        self.step_names += other.step_names
        self.comm_rules += other.comm_rules
        self.graph_notes += other.graph_notes
        self.graphs_used |= other.graphs_used
        for name, chunks in self.columns.items():
            chunks.combine(other.columns[name])
        self.parts += other.parts
        self.failures += other.failures
        for name, state in self.extracts.items():
            state.combine(other.extracts[name])

    def all_facts(self, keep: bool = False) -> list[DecodedFile | None]:
        """Every file's header facts, in arrival order (summary_plan.shared_facts: texts shared; None for a file
        not read), let go from the state unless `keep` (then the next call takes these, not unpickling every
        file's again: a fold's files are listed first, then placed)."""
        facts, self.kept_facts = self.kept_facts, None
        if facts is None or len(facts) != len(self.fact_ends):       # none kept, or files came since
            ends = self.fact_ends.tolist()
            with memoryview(self.fact_bytes) as view:
                facts = [shared_facts(pickle.loads(view[start:end])) for start, end in zip([0] + ends, ends)]
        if keep:
            self.kept_facts = facts
        else:
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
    return tag_columns(value, index)


_COLUMNS = ("groups", "kernels", "steps", "step_busy", "spans", "link_report")   # FileAggregate's


def reduce_files(results, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
                 origin: str = "input", extracts: tuple[Partial, ...] = (), notes: list[str] | None = None,
                 placement: Placement | None = None) -> Reduced:
    """Reduce map step results (in source order) exactly; failures raise or are skipped as load() does, and
    several runs under one path raise SeveralRunsError as load() does. `notes`: the load's notes, a list
    that may still grow while `results` streams by (read once they are all in). `placement`: the files'
    ranks and windows when the source knows them (a loaded TraceSet); else they are placed from the facts."""
    pile, notes = _Pile(extracts), notes if notes is not None else []
    for index, result in enumerate(successes(results, skip_bad, notes)):
        pile.update(index, result)
    return reduce_pile(pile, skip_bad=skip_bad, rank_map=rank_map, origin=origin, notes=notes, placement=placement)


def reduce_pile(pile: _Pile, *, skip_bad: bool = False, rank_map: dict[str, int] | None = None,
                origin: str = "input", notes: list[str] | None = None, placement: Placement | None = None) -> Reduced:
    """The Reduced of a state holding every file (reduce_files', or a cluster's fold: its failures are
    raised or noted here, in file order, as reduce_files does while the results stream)."""
    notes = notes if notes is not None else []
    list(successes(pile.failures, skip_bad, notes))
    if placement is None:
        placement = placed(pile.all_facts(), notes=notes, skip_bad=skip_bad, rank_map=rank_map, origin=origin)
    return finalized(pile, placement)


def finalized(pile: _Pile, placement: Placement) -> Reduced:
    """The tables of every file in `pile`, placed."""
    rank_of, window_of = placement.rank_of, placement.window_of
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
    report = relabeled(pile.one("link_report"), rank_of, window_of)
    files = len(pile.fact_ends)
    graph_notes = tuple(note for _, _, i, found in sorted(     # in (rank, window) order, as a TraceSet's files
        (int(rank_of[i]), int(window_of[i]), i, found) for i, found in pile.graph_notes if rank_of[i] >= 0)
        for note in found)
    reduced = Reduced(
        files=placement.files, notes=tuple(placement.notes) + graph_notes,
        groups=groups if groups is not None else _empty_groups(),
        kernels=kernels,
        part=relabeled_part(part, rank_of) if part is not None else None, step_names=names,
        steps=relabeled(pile.one("steps"), rank_of) if pile.columns["steps"] else _empty_steps(),
        step_busy=_step_busy(step_busy, names) if step_busy is not None else None,
        spans=spans.groupby([S.RANK, S.DEVICE])[S.DEVICE_SPAN_NS].sum() if spans is not None else None,
        link_report=_sorted_report(report) if report is not None else None,
        comm_rules={rule: comm_rules[rule] for rule in RULE_NAMES if rule in comm_rules},
        extracts={name: found.finalize(placement) for name, found in pile.extracts.items()},
        decoded=files - pile.cached, cached=pile.cached, paths_of_rank=placement.paths_of_rank(),
        graphs_used=frozenset(pile.graphs_used))
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


def _units_again(runner: Runner, paths: list[str], always_pool: bool, by: str = "kernel"):
    """(path, `by` units with step names) of each file that has device activities: a second map (levels
    above the kernel link to cpu ops and python frames: those files keep their host rows)."""
    plan = Plan(units_only=True, units_by=by, keep_host=by not in ("kernel", "category"))
    with contextlib.closing(runner.map(paths, plan.task(), always_pool)) as results:
        for result in successes(results, False, []):
            if result.units is not None:
                yield result.path, result.units


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

def reduce_path(path, *, by: str = "kernel", links: bool = False, skip_bad: bool = False,
                rank_map: dict[str, int] | None = None, jobs: int | None = None, executor: Any = None,
                cache: bool | FileCache = True, progress: bool = False,
                extracts: tuple[Partial, ...] = (), comm_patterns: tuple[str, ...] = (),
                keep_host: bool = False, spill: str | None = None,
                exclude_carried_in: bool = False, graph_capture=()) -> tuple[Reduced, Runner]:
    """Map every file of a source and reduce the aggregates: the trace files under a path, or the files of a
    loaded TraceSet or of a parquet store (held_source: the one place a source's kind is decided). `spill`:
    the command's spill folder (io/spill.py), for its later maps when the cache is off. `graph_capture`:
    paths of graph-capture traces (--graph-capture), beside those found in the path (graph_capture.py)."""
    inputs = path if isinstance(path, TraceSet) else discover(path)   # the caller's walk when it gave one
    held = held_source(inputs)
    if held is not None:
        return reduce_traceset(held, by=by, links=links, extracts=extracts, comm_patterns=comm_patterns,
                               keep_host=keep_host, exclude_carried_in=exclude_carried_in)
    found_notes = list(inputs.notes)     # folders that could not be listed, noted first as load() does
    files = inputs.trace_files()
    file_cache = FileCache.of(cache)
    folder = str(file_cache.dir.root) if file_cache is not None else None
    runner = Runner(jobs, as_executor(executor), folder, progress, inputs,
                    spill_folder=spill if file_cache is None and len(files) > 1 else None)   # one: keep_last's
    plan = Plan(by=by, links=links, extracts=level_extracts(by) + tuple(extracts), comm_patterns=tuple(comm_patterns),
                keep_host=keep_host, exclude_carried_in=exclude_carried_in,
                graph_capture=tuple(map(str, graph_capture)))
    plan, files, graph_notes = with_graph_captures(runner, inputs, files, plan)
    found_notes += graph_notes
    if runner.folds(len(files)):      # a pool or Dask: the files fold into states where they are mapped
        with runner.reducing_only(len(files)):
            pile = runner.fold(files, plan.task(), functools.partial(_Pile, plan.extracts))
            reduced = reduce_pile(pile, skip_bad=skip_bad, rank_map=rank_map, origin=str(path))
    else:
        with runner.reducing_only(len(files)), contextlib.closing(runner.map(files, plan.task())) as results:
            reduced = reduce_files(results, skip_bad=skip_bad, rank_map=rank_map, origin=str(path),
                                   extracts=plan.extracts)
    reduced = with_unused_captures(plan, reduced)
    return dataclasses.replace(reduced, notes=tuple(found_notes) + tuple(reduced.notes)), runner


def with_graph_captures(runner: Runner, inputs, files: list, plan: Plan) -> tuple[Plan, list, list[str]]:
    """The first stage of graph replays (analysis/graph_capture.py): the plan carrying the capture catalog,
    the files that are not captures (never windows nor ranks), and the stage's notes."""
    catalog, files, notes = graph_captures(runner, inputs, files, plan.graph_capture)
    if catalog:
        plan = dataclasses.replace(plan, graph_catalog=catalog)
    return plan, files, notes


def with_unused_captures(plan: Plan, reduced: Reduced) -> Reduced:
    """`reduced` with a note per capture file whose graphs no replay matched (when the plan linked)."""
    if plan.graph_catalog is None or not (plan.links or plan.by in ATTRIBUTION_LEVELS):
        return reduced
    return dataclasses.replace(reduced, notes=tuple(reduced.notes) + tuple(
        unused_captures(plan.graph_catalog, reduced.graphs_used)))


def held_source(source) -> TraceSet | None:
    """The tables a source holds whole: a TraceSet itself, or a parquet store (`traceattr convert`) read
    whole; None for trace files, which are mapped where they are decoded. A path is discovered once here
    (io.discover.Inputs) unless it was already."""
    if isinstance(source, TraceSet):
        return source
    return read_store(source) if is_store(discover(source)) else None


def reduce_traceset(traceset: TraceSet, *, by: str = "kernel", links: bool = False,
                    extracts: tuple[Partial, ...] = (), comm_patterns: tuple[str, ...] = (),
                    keep_host: bool = False, exclude_carried_in: bool = False) -> tuple[Reduced, TraceSetRunner]:
    """reduce_path for a loaded TraceSet: the same plan over its files, placed where the TraceSet has them."""
    plan = Plan(by=by, links=links, extracts=level_extracts(by) + tuple(extracts), comm_patterns=tuple(comm_patterns),
                keep_host=keep_host, exclude_carried_in=exclude_carried_in)
    return reduce_plan(traceset, plan)


def reduce_plan(traceset: TraceSet, plan: Plan) -> tuple[Reduced, TraceSetRunner]:
    """`plan` over the files of a loaded TraceSet, placed where the TraceSet has them, its replays matched to
    the graph catalog it carries (traceattr.load's, or a store's) as a folder's are to its captures."""
    if plan.graph_catalog is None and traceset.graph_catalog:
        plan = dataclasses.replace(plan, graph_catalog=traceset.graph_catalog)
    runner = TraceSetRunner(traceset)
    paths = traceset.files.column(S.PATH).to_pylist()
    reduced = reduce_files(runner.map(paths, plan.task()), extracts=plan.extracts,
                           placement=traceset_placement(traceset))
    return reduced, runner


def source_of(counts, cache: bool) -> str:
    """The header's `source` line: how many files were decoded and how many the cache served (`counts`:
    a Reduced, or anything with `decoded` and `cached`)."""
    return f"traces ({counts.decoded} decoded, {counts.cached} from cache)" if cache else "traces (cache off)"


def table_of(reduced: Reduced, by: str, top: int | None = None, tree: bool = False,
             coded: bool = False, peaks: PeakOverride | None = PeakOverride()) -> pd.DataFrame:
    """The table summarize(by) (kernel, category, rank) or attribute(by) would give on the whole TraceSet;
    `coded`: the kernel and category tables keep their texts categorical (summarize.keys_table). By shape:
    the rates against `peaks` (None: without them, for a table summed over ranks first)."""
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
        summed = [S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS, S.SELF_PCT]
        if by == "kernel":
            table = keys_table(reduced.kernels, busy, keys, columns, coded=coded)
        else:      # exposed_ns from the sweep's groups: the kernels' sums cannot know what overlapped
            table = with_exposed(keys_table(reduced.kernels, busy, keys, [c for c in columns if c != S.EXPOSED_NS],
                                            coded=coded), reduced.groups)
            summed.append(S.EXPOSED_NS)
        if top is None:
            return table
        return fold_below_top(table, top, keys[2], summed)
    if by in EXTRACT_LEVELS:
        table = reduced.extracts[by]
        return table if top is None else EXTRACT_TOPS[by](table, top)
    check_level(by, tree)
    if by == "launch":      # its rows are delay bins until launch_table folds them: --top after that
        return launch_table(attribution_table(reduced.part), top)
    table = attribution_table(reduced.part, tree=tree, top=None if tree else top)
    if by == "shape":      # what has a model is judged on every row, before --top folds some
        whole = shape_table(attribution_table(reduced.part)) if top is not None else None
        table = shape_table(table, whole)
        return with_roofline(table, peaks) if peaks is not None else table
    if by == "step":
        table = with_step_walls(table, reduced.steps)
    return table


def with_step_walls(table: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """A step table's duration_ns: each rank's wall time of the step, the length of its ProfilerStep#N range
    (over the rank's windows when one repeats the name), on each of the rank's device rows; -1 (not
    applicable) for <unattributed> and <other>. Summing the activities' durations under a step counted nested
    and overlapping ones again (854 ms for a step of 594 ms wall time)."""
    walls = steps.groupby([S.RANK, S.NAME])[S.DURATION_NS].sum() if len(steps) else pd.Series(dtype="int64")
    found = {(int(rank), name): int(ns) for (rank, name), ns in walls.items()}
    table = table.copy()
    table[S.DURATION_NS] = np.array([found.get((int(rank), key), S.NO_INT) for rank, key in
                                     zip(table[S.RANK].tolist(), table["key"].tolist())], dtype=np.int64)
    return table


def header_for(reduced: Reduced, table: pd.DataFrame, by: str, runner: Runner | None = None,
               check: str | None = None, extra: dict | None = None) -> dict:
    """The report header of `table`, from the reduced aggregates; its `check` line when given
    (analysis/check_plan.py computes it with the check Partial in the plan). `extra`: other analyses'
    results for the findings' rules (Results.extra)."""
    header = header_of(reduced.files, reduced.groups, reduced.notes, check=check)
    if reduced.comm_rules:
        header["communication by rule"] = rules_text(reduced.comm_rules)
    imbalance = None
    if by == "rank" and header["activities"]:
        imbalance = rank_facts_of(rank_imbalance_reduced(reduced, runner or Runner()))
    elif by == "step" and header["activities"]:
        imbalance = step_facts_of(step_imbalance_reduced(reduced, runner or Runner()))
    header = with_table_facts(header, table, imbalance)
    found = findings_results(reduced, table)
    found.extra.update(extra or {})
    header[FINDINGS] = lines_of(found)
    return header


def findings_results(reduced: Reduced, table: pd.DataFrame) -> Results:
    """What the findings' rules read (analysis/findings.py), from the reduced files and the table's analyses."""
    groups = reduced.groups
    share = None
    shares, totals = table.attrs.get("linked_share"), table.attrs.get("totals")
    if shares and totals:        # the device time of every rank, weighted by its time
        per_rank: dict[int, int] = {}
        for (rank, _), ns in totals.items():
            per_rank[rank] = per_rank.get(rank, 0) + ns
        whole = sum(ns for rank, ns in per_rank.items() if shares.get(rank) == shares.get(rank))
        if whole:
            share = sum(shares[rank] * ns for rank, ns in per_rank.items()
                        if shares.get(rank) == shares.get(rank)) / whole
    return Results(busy_ns=int(groups[S.BUSY_NS].sum()), window_ns=int(groups[S.WINDOW_NS].sum()),
                   ranks=len(set(reduced.files.column(S.RANK).to_pylist())),
                   # the running time, not the fair share: an overlapping memcpy halves that, the exposed time not
                   communication_ns=int(groups[C.COMMUNICATION_RUNNING_NS].sum()),
                   exposed_communication_ns=int(groups[S.EXPOSED_COMMUNICATION_NS].sum()),
                   straggler=table.attrs.get("straggler"), linked_share=share, level=table.attrs.get("level", ""),
                   data=reduced.extracts.get(FINDINGS_EXTRACT.name))


def rank_imbalance_reduced(reduced: Reduced, runner: Runner, by: str = "kernel", alpha: float = 0.05) -> Imbalance:
    """The busiest rank against the median rank (imbalance.rank_imbalance_of) from a plan by rank, the two
    ranks' `by` keys from a second map over their files through `runner`."""
    units_of = functools.partial(_rank_units, reduced, runner, by=by)
    return rank_imbalance_of(rank_table(reduced.groups, reduced.files), reduced.steps, units_of,
                             len(reduced.step_names), alpha)


def step_imbalance_reduced(reduced: Reduced, runner: Runner, by: str = "kernel", alpha: float = 0.05) -> Imbalance:
    """The longest step against the median step (imbalance.step_imbalance_of) from a plan by step, the
    `by` keys of the ranks they are measured on from a second map over those ranks' files."""
    units_of = functools.partial(_rank_units, reduced, runner, by=by)
    step_busy = reduced.step_busy if reduced.step_busy is not None else pd.Series(dtype="int64")  # no device time
    return step_imbalance_of(reduced.step_names, step_busy, reduced.steps, units_of, alpha)


def _rank_units(reduced: Reduced, runner: Runner, ranks: list[int], by: str = "kernel") -> pd.DataFrame:
    """activity_keys(by) rows of these ranks: a second map over their files only."""
    paths = [p for r in dict.fromkeys(ranks) for p in reduced.paths_of_rank.get(r, [])]
    rank_of = dict(zip(reduced.files.column(S.PATH).to_pylist(), reduced.files.column(S.RANK).to_pylist()))
    several = reduced.files.num_rows > 1
    frames = [tagged(units, rank_of[path]) for path, units in _units_again(runner, paths, several, by)]
    if not frames:
        return activity_keys(TraceSet.empty(), by)
    return indexed_steps(concat_columns(frames), reduced.step_names)


def imbalance_files(path, kind: str, by: str = "kernel", alpha: float = 0.05, *, skip_bad: bool = False,
                    rank_map: dict[str, int] | None = None, jobs: int | None = None, executor: Any = None,
                    cache: bool = True, progress: bool = False) -> Imbalance:
    """rank_imbalance(path) (`kind` "rank") or step_imbalance(path) ("step"): the plan of `summarize --by
    rank` or `summarize --by step`, whose headers say the same (header_for), over the traces under `path`,
    a parquet store or a loaded TraceSet."""
    with spill_folder(not cache) as spill:     # the second map reads the chosen ranks' files from it
        reduced, runner = reduce_path(path, by=kind, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs,
                                      executor=executor, cache=cache, progress=progress, spill=spill)
        of = rank_imbalance_reduced if kind == "rank" else step_imbalance_reduced
        return of(reduced, runner, by, alpha)


def summarize_files(path, by: str = "kernel", top: int | None = None, *, tree: bool = False,
                    skip_bad: bool = False, rank_map: dict[str, int] | None = None, jobs: int | None = None,
                    executor: Any = None, cache: bool = True, progress: bool = False,
                    comm_patterns: tuple[str, ...] = (), exclude_carried_in: bool = False,
                    peaks: PeakOverride = PeakOverride()) -> pd.DataFrame:
    """summarize(path, ...) and attribute(path, ...): the table of any level for the traces under `path`,
    by map-reduce (no TraceSet is built). `executor`: a concurrent.futures.Executor or a Dask Client.
    `exclude_carried_in`: activities launched before the window left out of every total; `peaks`: the roof
    of the shape level."""
    if by not in SUMMARY_LEVELS and by not in EXTRACT_LEVELS:
        check_level(by, tree)
    compile_patterns(comm_patterns)     # a bad pattern is the request's fault, not a file's
    reduced, _ = reduce_path(path, by=by, skip_bad=skip_bad, rank_map=rank_map, jobs=jobs, executor=executor,
                             cache=cache, progress=progress, comm_patterns=comm_patterns,
                             exclude_carried_in=exclude_carried_in)
    return table_of(reduced, by, top, tree, peaks=peaks)
