"""Per-partial properties (engine/partial.py): for every analysis, any split of the files into consecutive
parts, each reduced in a state of its own and the states combined in any bracketing (always the earlier
files' state taking the later one's), gives the same result as one state updated with every file, exactly.

Each file is mapped once per plan (Runner(jobs=1), in path order) and its FileAggregate pickled, as a worker
sends it; every example unpickles them again (a state's update, combine and finalize take what they are
given). The plans are those the commands run: each summary level (+ links), the check's extracts
(CheckPile: name codes are each state's own, combine recodes), the communication extract (CommPile: rows
point into the profiles' points, which move on combine), compare's UnitsPile, the page's tables (Listed)
and its timeline (TimelinePile); the piles' chunking (engine/columns.COMPACT_EVERY) is drawn too, so
combine meets compacted chunks, tails and empty states.

Two runs, built once: `spec` (builder.TraceSpec: 3 ranks, rank 0 in 3 windows, rank 1 in 2, the last window
numbering its steps again as torch does, a slow rank, planted check outliers and a kernel name only one
file holds) and `comm` (builder.multirank: 3 ranks in 2 windows, a late-launching straggler with a clock
offset, point-to-point sends, every file sending its cut profile).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from traceattr import schema as S
from traceattr.analysis import summary_plan as M
from traceattr.analysis import check_plan as MK
from traceattr.analysis import multirank_plan as MC
from traceattr.analysis import compare_plan as MP
from traceattr.analysis import page_plan as PG
from traceattr.analysis import critical as CR
from traceattr.analysis.attribute import TREE_LEVELS, AttributionPart, attribution_table
from traceattr.analysis.findings_part import EXTRACT as FINDINGS, FindingsData
from traceattr.analysis.page import TIMELINE_BINS
from traceattr.analysis.page_critical import CriticalPage
from traceattr.analysis.timeline import bin_edges
from traceattr.attribution.cut import CutProfile
from traceattr.builder import TraceSpec
from traceattr.builder.multirank import MultiRankSpec, build_multirank
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from traceattr.builder.writer import write_trace
from traceattr.engine import columns as engine_columns
from traceattr.engine.partial import Partial
from traceattr.engine.placement import Placement, placed
from traceattr.engine.runner import Runner
from test_scale_mapreduce_clip import plant
from traceattr.io.discover import find_trace_files

from tracesets import SMALL

SGEMM = "ampere_sgemm_128x64_tn"         # ~90 µs, 4 a rank per window: 3 ms is longer than the window
FUSED = "void graph_fused_kernel_0"      # ~7 µs: 1.2 ms is far beyond typical, inside the window
COPY = "Memcpy HtoD"


# --- the runs ---------------------------------------------------------------------------------------

def _spec_run(folder: Path) -> None:
    """Rank 0 in 3 windows, rank 1 in 2, rank 2 in 1 (6 files); the last window numbers its steps
    ProfilerStep#1, #2 again (a second profiler object of the process)."""
    for window, ranks in enumerate(((0, 1, 2), (0, 1), (0,))):
        steps = (1, 2) if window == 2 else (2 * window + 1, 2 * window + 2)
        spec = TraceSpec(ranks=ranks, world_size=3, **{**SMALL, "steps": steps}, rank_scale={2: 1.4}, jitter=0.05,
                         seed=window, base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        for rank in ranks:
            write_trace(folder / f"w{window}_rank{rank}.pt.trace.json", spec, rank)
    plant(folder / "w0_rank2.pt.trace.json", SGEMM, 3_000)                        # longer than its window
    plant(folder / "w0_rank1.pt.trace.json", COPY, 4_000)                         # a longer copy
    plant(folder / "w1_rank0.pt.trace.json", SGEMM, 2_500, rename="planted_once")  # a name one file holds
    plant(folder / "w1_rank1.pt.trace.json", FUSED, 1_200)                        # far beyond typical


def _comm_run(folder: Path) -> None:
    """3 ranks in 2 windows (6 files): rank 1 launches its collectives late, on a clock 90 µs ahead."""
    for window in range(2):
        build_multirank(MultiRankSpec(ranks=3, steps=2, seed=window, late_launch_ns={1: 800_000},
                                      clock_offset_ns={1: 90_000}, p2p=True,
                                      base_time_ns=DEFAULT_BASE_NS + window * 10_000_000_000), folder / f"w{window}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("partials")
    for name, build in (("spec", _spec_run), ("comm", _comm_run)):
        (root / name).mkdir()
        build(root / name)
    return {name: str(root / name) for name in ("spec", "comm")}


# --- the plans --------------------------------------------------------------------------------------

def _units(by: str, normalize: bool = True) -> Partial:
    """compare's extract of one side (compare_plan._side), under a name of its own per level."""
    return Partial(f"{MP.NAME} {by} {normalize}", functools.partial(MP.file_units, by=by, normalize=normalize),
                   functools.partial(MP.UnitsPile, by=by, normalize=normalize))


PLANS = {       # as the commands build them
    "kernel": M.Plan(by="kernel", extracts=(MK.EXTRACT, FINDINGS, _units("kernel"))),   # summarize + check, compare
    "category": M.Plan(by="category"),
    "rank": M.Plan(by="rank", extracts=(MC.COMM_EXTRACT, MK.EXTRACT_WITHOUT_COMM, FINDINGS)),    # multirank_plan
    "op": M.Plan(by="op", extracts=(_units("op", normalize=False),)),
    "op_stack": M.Plan(by="op_stack", extracts=(_units("op_stack"),)),
    "module": M.Plan(by="module", extracts=(_units("module"),)),
    "module_class": M.Plan(by="module_class", extracts=(_units("module_class"),)),
    "annotation": M.Plan(by="annotation", extracts=(_units("annotation"),)),
    "step": M.Plan(by="step", extracts=(_units("step"), _units("step", normalize=False))),
    "shape": M.Plan(by="shape"),                                                     # summarize --by shape
    "launch": M.Plan(by="launch"),                                                   # summarize --by launch
    "iteration": M.Plan(by="iteration", extracts=M.level_extracts("iteration")),     # summarize --by iteration
    "links": M.Plan(by="kernel", links=True, extracts=(MK.EXTRACT,)),          # traceattr check --links
    "page": M.Plan(by="rank", extracts=PG.EXTRACTS, keep_host=True),                # traceattr report, map 1
    # summarize --by critical (--across-ranks, --what-if): its extract is a Listed state
    "critical": M.Plan(by="kernel", extracts=(CR.critical_partial(what_if=(("aten::mm", 0.5),)),), keep_host=True),
    # "timeline": traceattr report's map 2, built from the run's placement (_timeline_plan)
}
CASES = [("spec", name) for name in (*PLANS, "timeline")] + [("comm", name) for name in
                                                              ("kernel", "rank", "step", "links", "page", "timeline",
                                                               "critical")]


def _timeline_plan(placement: Placement) -> M.Plan:
    """page_plan._timeline's plan: the bins of the run's windows, each file's added to its rank's."""
    t0, edges = bin_edges(placement.files, TIMELINE_BINS)
    extract = Partial(PG.TIMELINE, functools.partial(PG.file_timeline, t0=t0, edges=edges),
                      functools.partial(PG.TimelinePile, placement.rank_of))
    return M.Plan(by="kernel", extracts=(extract,))


@dataclass
class Mapped:
    """One plan mapped over one run: each file's aggregate as sent, the placement, the one-state answer."""
    origin: str
    plan: M.Plan
    sent: list[bytes]
    placement: Placement
    reference: M.Reduced
    tables: list            # tables_of(reference)

    def arrived(self) -> list[M.FileAggregate]:
        return [pickle.loads(blob) for blob in self.sent]


_MAPPED: dict[tuple[str, str], Mapped] = {}


def mapped(runs: dict[str, str], run: str, name: str) -> Mapped:
    """Each file of `run` mapped once with plan `name` (kept for the module), and the reference: one state."""
    origin = runs[run]
    if (origin, name) not in _MAPPED:
        paths = [str(path) for path in find_trace_files(origin, [])]
        plan = _timeline_plan(mapped(runs, run, "rank").placement) if name == "timeline" else PLANS[name]
        results = list(Runner(jobs=1).map(paths, plan.task()))
        assert all(isinstance(result, M.FileAggregate) for result in results), results
        sent = [pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL) for result in results]
        pile = M._Pile(plan.extracts)
        for index, aggregate in enumerate(pickle.loads(blob) for blob in sent):
            pile.update(index, aggregate)
        placement = placed(pile.all_facts(), notes=[], skip_bad=False, rank_map=None, origin=origin)
        assert (placement.rank_of[:-1] >= 0).all()
        reference = M.finalized(pile, placement)
        _MAPPED[origin, name] = Mapped(origin, plan, sent, placement, reference, tables_of(reference, plan))
    return _MAPPED[origin, name]


# --- splits and bracketings -------------------------------------------------------------------------

@st.composite
def reductions(draw, files: int):
    """(segments, merges, compact_every): consecutive runs of files (some maybe empty) covering them all,
    the order of combines (merge i: state i takes state i + 1), and the piles' chunk size."""
    cuts = sorted(draw(st.lists(st.integers(0, files), max_size=files + 1)))
    bounds = [0, *cuts, files]
    segments = list(zip(bounds, bounds[1:]))
    merges = [draw(st.integers(0, left - 2)) for left in range(len(segments), 1, -1)]
    return segments, merges, draw(st.sampled_from((2, 3, engine_columns.COMPACT_EVERY)))


@contextlib.contextmanager
def compact_every(count: int):
    """Piles compacted every `count` files (summary_plan's parts and engine.columns.Chunks)."""
    before = M.COMPACT_EVERY, engine_columns.COMPACT_EVERY
    M.COMPACT_EVERY = engine_columns.COMPACT_EVERY = count
    try:
        yield
    finally:
        M.COMPACT_EVERY, engine_columns.COMPACT_EVERY = before


def split_reduce(run: Mapped, segments, merges, compact: int) -> M.Reduced:
    """A state per segment, updated with each file at its position in the source, combined in `merges`'
    order down to one, placed from its own facts and finalized."""
    aggregates = run.arrived()
    with compact_every(compact):
        states = []
        for low, high in segments:
            state = M._Pile(run.plan.extracts)
            for index in range(low, high):
                state.update(index, aggregates[index])
            states.append(state)
        for at in merges:
            states[at].combine(states.pop(at + 1))
        (state,) = states
        placement = placed(state.all_facts(), notes=[], skip_bad=False, rank_map=None, origin=run.origin)
        assert_same_placement(placement, run.placement)
        return M.finalized(state, placement)


# --- exactly the same --------------------------------------------------------------------------------

def assert_same_placement(got: Placement, want: Placement) -> None:
    assert got.files.equals(want.files)
    assert got.notes == want.notes and got.paths == want.paths
    assert np.array_equal(got.rank_of, want.rank_of) and np.array_equal(got.window_of, want.window_of)


def same_frame(got, want, what: str) -> None:
    assert (got is None) == (want is None), what
    if got is not None:
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=what)


def same_series(got, want, what: str) -> None:
    assert (got is None) == (want is None), what
    if got is not None:
        pd.testing.assert_series_equal(got, want, check_exact=True, obj=what)


def same_arrow(got, want, what: str) -> None:
    assert (got is None) == (want is None), what
    if got is not None:
        assert got.schema == want.schema, what
        assert got.equals(want), what
        pd.testing.assert_frame_equal(got.to_pandas(), want.to_pandas(), check_exact=True, obj=what)


def same_array(got: np.ndarray | None, want: np.ndarray | None, what: str) -> None:
    assert (got is None) == (want is None), what
    if got is not None:
        assert got.dtype == want.dtype and np.array_equal(got, want), what


def same_part(got: AttributionPart | None, want: AttributionPart | None, what: str) -> None:
    """Two merged attribution parts give the same tables (flat, and as a tree where the level has one)."""
    assert (got is None) == (want is None), what
    if got is None:
        return
    assert (got.by, got.kind, got.totals, got.ranks, got.has_modules, got.has_steps, got.step_windows,
            got.devices) == (want.by, want.kind, want.totals, want.ranks, want.has_modules, want.has_steps,
                             want.step_windows, want.devices), what
    for tree in (False, True) if got.by in TREE_LEVELS else (False,):
        same_frame(attribution_table(got, tree=tree), attribution_table(want, tree=tree), f"{what} tree={tree}")


def same_extract(got, want, what: str) -> None:
    assert type(got) is type(want), what
    if isinstance(want, MK.CheckParts):
        for field in dataclasses.fields(want):
            if field.name == "comm":
                same_frame(got.comm, want.comm, f"{what}.comm")
            else:
                assert getattr(got, field.name) == getattr(want, field.name), f"{what}.{field.name}"
    elif isinstance(want, MC.CommExtract):
        same_frame(got.frame, want.frame, f"{what}.frame")
        for field in dataclasses.fields(CutProfile):
            same_array(getattr(got.points, field.name), getattr(want.points, field.name), f"{what}.points.{field.name}")
    elif isinstance(want, MP.Units):
        same_frame(got.units, want.units, f"{what}.units")
        assert (got.step_names, got.device_rows) == (want.step_names, want.device_rows), what
    elif isinstance(want, tuple):               # critical_reduce: steps, notes, (rows, chains), what-if
        steps, notes, (rows, chains), scaled = want
        same_frame(got[0], steps, f"{what}.steps")
        assert got[1] == notes, f"{what}.notes"
        same_frame(got[2][0], rows, f"{what}.across rows")
        same_frame(got[2][1], chains, f"{what}.chains")
        same_frame(got[3], scaled, f"{what}.what_if")
    elif isinstance(want, FindingsData):        # plain sums per key: equal as values
        assert got == want, what
    elif isinstance(want, CriticalPage):        # the page's critical paths
        same_frame(got.segments, want.segments, f"{what}.segments")
        same_frame(got.steps, want.steps, f"{what}.steps")
        assert got.notes == want.notes, f"{what}.notes"
    elif isinstance(want, pd.DataFrame):        # the page's timeline
        same_frame(got, want, what)
    else:                                       # the page's tables (Listed: page_plan.reduce_tables)
        assert set(got) == set(want) == {"kernels", "parts"}, what
        same_arrow(got["kernels"], want["kernels"], f"{what}.kernels")
        assert set(got["parts"]) == set(want["parts"]), what
        for level, part in want["parts"].items():
            same_part(got["parts"][level], part, f"{what}.parts[{level}]")


def assert_same_reduced(got: M.Reduced, want: M.Reduced, plan: M.Plan, tables: list | None = None) -> None:
    """Every field of Reduced, and the tables and headers the commands make of it (tables_of; `tables`:
    those of `want`, when made already)."""
    assert got.files.equals(want.files)
    for name in ("notes", "step_names", "comm_rules", "decoded", "cached", "paths_of_rank"):
        assert getattr(got, name) == getattr(want, name), name
    for name in ("groups", "steps", "link_report"):
        same_frame(getattr(got, name), getattr(want, name), name)
    for name in ("step_busy", "spans"):
        same_series(getattr(got, name), getattr(want, name), name)
    same_arrow(got.kernels, want.kernels, "kernels")
    same_part(got.part, want.part, "part")
    assert set(got.extracts) == set(want.extracts) == {extract.name for extract in plan.extracts}
    for name, found in want.extracts.items():
        same_extract(got.extracts[name], found, name)
    for (what, found), (_, wanted) in zip(tables_of(got, plan), tables if tables is not None else
                                          tables_of(want, plan), strict=True):
        if isinstance(wanted, pd.DataFrame):
            same_frame(found, wanted, what)
        else:
            assert found == wanted, what


def tables_of(reduced: M.Reduced, plan: M.Plan) -> list[tuple[str, object]]:
    """The tables and headers the commands make of `reduced` without a second map (the inputs of those
    that map again are the fields assert_same_reduced compares)."""
    found = []
    if plan.links:
        return found
    for by in ("kernel", "category") if plan.by in ("kernel", "category") else (plan.by,):
        for options in ({}, {"top": 2}, *([{"tree": True}] if by in TREE_LEVELS else [])):
            table = M.table_of(reduced, by, **options)
            found.append((f"table {by} {options}", table))
            if by not in ("rank", "step"):      # their imbalance facts map the busiest ranks' files again
                found.append((f"header {by} {options}", M.header_for(reduced, table, by)))
    if MC.COMM in reduced.extracts:         # the collective table needs no second map
        found.append(("collectives", MC.comm_table(reduced, None, "collective")))
    return found


# --- the property -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("run", "name"), CASES)
# 8 splits of 6 files a case and run (18 cases: ~150 a run, new ones each run; ~0.1 s each)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_split_and_combine_order_gives_the_one_state_answer(runs, run, name, data):
    one = mapped(runs, run, name)
    segments, merges, compact = data.draw(reductions(len(one.sent)), label="segments, merges, compact_every")
    assert_same_reduced(split_reduce(one, segments, merges, compact), one.reference, one.plan, one.tables)


def _named(candidates: list[MK.Candidate], *prefixes: str) -> bool:
    return all(any(c.name.startswith(prefix) for c in candidates) for prefix in prefixes)


def test_the_runs_hold_what_the_properties_need(runs):
    """Without these facts the properties above would hold for lack of anything to combine: codes that
    differ per state, sent profiles, candidates, several windows per rank, repeated step names."""
    for run in ("spec", "comm"):
        assert len(mapped(runs, run, "rank").sent) == 6
    spec = mapped(runs, "spec", "kernel").reference
    parts = spec.extracts[MK.NAME]
    assert len(parts.candidates) == 1 and _named(parts.candidates, FUSED)
    assert _named(parts.longer, SGEMM, COPY)
    kernels = M.table_of(spec, "kernel")
    assert kernels.loc[kernels[S.NAME] == "planted_once", S.RANK].tolist() == [0]   # codes differ per state
    assert spec.files.column("rank").to_pylist() == [0, 0, 0, 1, 1, 2]
    step_units = mapped(runs, "spec", "step").reference.extracts[f"{MP.NAME} step False"]
    assert any(label.endswith("[2]") for label in step_units.step_names)    # rank 0's third window
    comm = mapped(runs, "comm", "rank").reference.extracts[MC.COMM]
    assert len(comm.frame) and (comm.frame[MC.CUT_FIRST] >= 0).all() and len(comm.points.times)
    for case in ("spec", "comm"):
        timeline = mapped(runs, case, "timeline").reference.extracts[PG.TIMELINE]
        assert len(timeline) and timeline[S.SELF_NS].sum() > 0


def test_a_state_takes_only_the_files_right_after_its_own(runs):
    """A state of a later run of files starts at its first file's position; combine refuses a state that
    does not start where this one ends (its rows would be placed as other files')."""
    one = mapped(runs, "spec", "category")
    aggregates = one.arrived()
    states = [M._Pile(one.plan.extracts) for _ in range(3)]
    for state, (low, high) in zip(states, ((0, 2), (2, 4), (4, 6))):
        for index in range(low, high):
            state.update(index, aggregates[index])
    with pytest.raises(AssertionError, match="source order"):
        states[2].update(3, aggregates[3])
    with pytest.raises(AssertionError, match="combine in order"):
        states[0].combine(states[2])
