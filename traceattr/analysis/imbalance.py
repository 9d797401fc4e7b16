"""Rank and step imbalance: who is slow, by how much, and which keys explain it.

Ranks: imbalance = max / lower median over ranks of busy time and of mean ProfilerStep wall time. The busiest
rank is compared, key by key, with the median rank (the lower median by busy time, an actual rank so that the
key deltas add up exactly to the extra busy time). Both ranks ran the same steps, so the per-step noise test
of compare.py applies. The busiest rank is not the straggler: a rank that waits at collectives is busy while
it waits. The straggler verdict (who made the others wait, and why) is straggler.py's.

Steps: each step is measured on its slowest rank (longest ProfilerStep range; busy time is that rank's).
The longest step (wall time, or busy time when steps have no wall time) is compared with the median step
the same way (each on its own slowest rank). It is named the outlier step only when it stands out: over the
median by more than OUTLIER_MADS scaled median absolute deviations of the steps and by more than
OUTLIER_MIN_EXCESS of the median (steps that differ by jitter alone have no outlier; with two steps only the
second bound applies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.noise import MIN_STEPS, MIN_VERDICT_STEPS
from traceattr.analysis.compare import (COLUMNS as COMPARE_COLUMNS, DELTA_NS, KIND, NOISE, RAW_NAMES, STATUS, UNTESTED,
                                        compare_units)
from traceattr.analysis.keys import KEY, STEP
from traceattr.model.traceset import TraceSet
from traceattr.names import display_names
from traceattr.units import human_ns
from traceattr.io.comm_rules import name_rule

STEP_NS = "step_ns"          # mean ProfilerStep wall time of a rank (-1: no steps)
WALL_NS = "wall_ns"          # a step's wall time: its longest ProfilerStep range over ranks (-1: none)
STEP_NAME = "step_name"          # per step also S.RANK: the rank it is measured on (its slowest)

OUTLIER_MADS = 3.0            # the longest step is an outlier beyond this many scaled MADs over the median...
OUTLIER_MIN_EXCESS = 0.05     # ...and beyond this share of the median step (steps jitter by a few percent)
MAD_SCALE = 1.4826            # a normal distribution's standard deviation in median absolute deviations


@dataclass(frozen=True)
class Imbalance:
    """One comparison of the slowest unit (rank or step) against the median one."""
    per_unit: pd.DataFrame      # one row per rank (rank, busy_ns, step_ns) or step (step, step_name, ...)
    busy_ratio: float           # max / median busy_ns (nan: under 2 units or median 0)
    step_ratio: float           # ranks: max / median step_ns; steps: max / median wall_ns
    slowest: int                # the busiest rank or the outlier step index (-1: none)
    median: int                 # the median rank or step index it is compared with
    extra_ns: int               # slowest − median in the compared measure (busy for ranks)
    explain: pd.DataFrame       # compare_units(median, slowest): Σ key delta_ns == busy difference


def rank_imbalance_of(rank_table: pd.DataFrame, steps: pd.DataFrame, units_of, n_steps: int,
                      alpha: float = 0.05) -> Imbalance:
    """Busy and step-time imbalance over ranks, the busiest rank and the keys behind its extra busy time,
    from its pieces: summarize(by="rank"), the ProfilerStep ranges (step_range_columns: rank, name,
    duration_ns) and `units_of(ranks)`, activity_keys() rows holding at least those ranks (asked for the
    busiest and the median rank only, so a map-reduce over files computes keys for two ranks:
    analysis/summary_plan.py rank_imbalance_reduced, traceattr.rank_imbalance)."""
    ranks = rank_table.groupby(S.RANK, as_index=False)[S.BUSY_NS].sum()
    ranks[STEP_NS] = ranks[S.RANK].map(_mean_step_ns(steps)).fillna(-1).astype("int64")
    busy = ranks[S.BUSY_NS].to_numpy()
    if len(ranks) < 2 or busy.max() == 0:     # one rank, or no device time (CPU-only): nobody is busiest
        return Imbalance(ranks, math.nan, math.nan, -1, -1, 0, no_explain())
    slowest = int(ranks[S.RANK].iloc[int(np.argmax(busy))])
    median = int(ranks[S.RANK].iloc[np.argsort(busy, kind="stable")[(len(busy) - 1) // 2]])
    units = units_of([median, slowest])
    explain = compare_units(units[units[S.RANK] == median], units[units[S.RANK] == slowest], n_steps, n_steps,
                            alpha=alpha)
    step_ns = ranks[STEP_NS].to_numpy()
    return Imbalance(ranks, _ratio(busy), _ratio(step_ns[step_ns >= 0]), slowest, median,
                     int(busy.max() - ranks.loc[ranks[S.RANK] == median, S.BUSY_NS].iloc[0]), explain)


def step_imbalance_of(names: tuple[str, ...], busy_by_step_rank: pd.Series, steps: pd.DataFrame, units_of,
                      alpha: float = 0.05) -> Imbalance:
    """The outlier step (longest wall time) against the median step, with the keys that explain it, from
    its pieces: step names in step order, busy ns per (step index, rank), the ProfilerStep ranges and
    `units_of(ranks)` (activity_keys() rows holding at least the two chosen steps' ranks;
    analysis/summary_plan.py step_imbalance_reduced, traceattr.step_imbalance).

    Like with like: each step is measured on its slowest rank (the longest ProfilerStep range, or the
    most busy time when a step has no range), and busy_ns is that rank's busy time in the step, never a
    sum over ranks set against one rank's wall time."""
    busy_of: dict[int, dict[int, int]] = {}      # step -> rank -> busy ns
    for (step, rank), ns in busy_by_step_rank.items():
        busy_of.setdefault(int(step), {})[int(rank)] = int(ns)
    wall_of: dict[str, dict[int, int]] = {}      # step name -> rank -> longest range ns
    for (name, rank), ns in steps.groupby([S.NAME, S.RANK])[S.DURATION_NS].max().items():
        wall_of.setdefault(name, {})[int(rank)] = int(ns)
    chosen, busy, wall = (np.full(len(names), fill, np.int64) for fill in (-1, 0, -1))
    for step, name in enumerate(names):      # one pass per step, never per event
        walls, busies = wall_of.get(name, {}), busy_of.get(step, {})
        ranked = walls or busies
        if ranked:
            chosen[step] = max(sorted(ranked), key=ranked.get)     # the slowest rank (lowest on ties)
            wall[step] = walls.get(int(chosen[step]), -1)
            busy[step] = busies.get(int(chosen[step]), 0)
    per_step = pd.DataFrame({STEP: np.arange(len(names), dtype=np.int64), STEP_NAME: list(names),
                             S.RANK: chosen, S.BUSY_NS: busy, WALL_NS: wall})
    if len(names) < 2:
        return Imbalance(per_step, math.nan, math.nan, -1, -1, 0, no_explain())
    measure = wall if (wall >= 0).all() else busy
    slowest = int(np.argmax(measure))
    median = int(np.argsort(measure, kind="stable")[(len(measure) - 1) // 2])
    units = units_of(sorted({int(chosen[median]), int(chosen[slowest])}))
    explain = compare_units(_as_one_step(units, median, chosen[median]),
                            _as_one_step(units, slowest, chosen[slowest]), 1, 1, alpha=alpha)
    return Imbalance(per_step, _ratio(busy), _ratio(wall[wall >= 0]), slowest, median,
                     int(measure[slowest] - measure[median]), explain)


def no_explain() -> pd.DataFrame:
    """The explain table when there is nothing to compare: no rows, the comparison's columns."""
    return pd.DataFrame({name: [] for name in COMPARE_COLUMNS})


def rank_facts_of(result: Imbalance, top: int = 3) -> tuple[dict, list[str]]:
    if result.slowest < 0:
        return {}, []
    facts = {"busy imbalance (max/median)": _fmt_ratio(result.busy_ratio),
             "step-time imbalance (max/median)": _fmt_ratio(result.step_ratio)}
    if result.extra_ns <= 0:      # "busiest rank: rank 0 (+0 ns ...)" named the first of equals
        facts["busiest rank"] = "none: the median rank is as busy as the busiest"
        return facts, []
    facts["busiest rank"] = (f"rank {result.slowest} (+{human_ns(result.extra_ns)} busy vs rank {result.median}, "
                             "the median by busy time; not the straggler verdict)")
    return facts, [f"rank {result.slowest} vs rank {result.median}: " + _top_keys(result.explain, top)]


def step_facts_of(result: Imbalance, top: int = 3) -> tuple[dict, list[str]]:
    if result.slowest < 0:
        return {}, []
    if result.slowest == result.median:   # the longest step is the median one: every step alike, no outlier
        return {"step imbalance (max/median wall)": _fmt_ratio(result.step_ratio)}, []   # ("#1 vs #1: +0 ns")
    names, ranks = result.per_unit[STEP_NAME].tolist(), result.per_unit[S.RANK].tolist()
    what = "wall" if (result.per_unit[WALL_NS] >= 0).all() else "busy"
    measure = result.per_unit[WALL_NS if what == "wall" else S.BUSY_NS].to_numpy()
    median_ns = int(measure[result.median])
    longest = (f"{names[result.slowest]} on rank {ranks[result.slowest]} (+{human_ns(result.extra_ns)} {what}"
               f"{_share(result.extra_ns, median_ns)} vs median {names[result.median]} on rank {ranks[result.median]})")
    facts = {"step imbalance (max/median wall)": _fmt_ratio(result.step_ratio)}
    if result.extra_ns <= outlier_bound_ns(measure, median_ns):
        facts["outlier step"] = (f"none: the longest, {longest}, is within the steps' spread "
                                 f"(an outlier runs over the median by > {100 * OUTLIER_MIN_EXCESS:.0f}% "
                                 f"and > {OUTLIER_MADS:g} MADs)")
        return facts, []
    facts["outlier step"] = longest
    note = f"{names[result.slowest]} vs {names[result.median]}: " + _top_keys(result.explain, top)
    idle = _idle_hint(result) if what == "wall" else ""
    return facts, [note + _waiting_hint(result.explain, ranks[result.slowest]) + idle]


def _idle_hint(result: Imbalance) -> str:
    """When under half of the outlier step's extra wall time is extra busy time, the rest is the device
    sitting idle. Found by a trial: a step stalled 302 µs with no kernel longer read only 'no key adds to
    the difference'."""
    busy = result.per_unit[S.BUSY_NS].to_numpy()
    extra_busy = int(busy[result.slowest] - busy[result.median])
    if 2 * extra_busy >= result.extra_ns:
        return ""
    return (f"; its busy time differs by {'+' if extra_busy >= 0 else '−'}{human_ns(abs(extra_busy))}: for the "
            f"rest of its +{human_ns(result.extra_ns)} wall time the device sat idle, waiting on the host (data "
            "loading, a synchronization, the CPU)")


def _waiting_hint(explain: pd.DataFrame, rank: int) -> str:
    """When the key that adds most to the outlier step is a collective's kernel (by name: io/comm_rules.py's
    rules): its time on this rank includes waiting for the last one. Found on planted truth: one rank 2 ms
    late in one step; every rank's step ran 2 ms long, and the step note on rank 0 said 'AllReduce +2.00 ms'."""

    adding = _adding(explain)
    if adding.empty or name_rule([str(adding[KEY].iloc[0])])[0] < 0:
        return ""
    return (f" (the largest is communication: on rank {rank} it includes waiting for the last rank to arrive; "
            "`--by rank` names the straggler and its cause)")


def outlier_bound_ns(measure: np.ndarray, median_ns: int) -> float:
    """How far over the median step (ns) the longest step may run and still not be an outlier: the larger of
    OUTLIER_MADS scaled median absolute deviations (the lower median, like the median step) and
    OUTLIER_MIN_EXCESS of the median."""
    deviations = np.sort(np.abs(measure.astype(np.int64) - median_ns))
    mad = float(deviations[(len(deviations) - 1) // 2])
    return max(OUTLIER_MADS * MAD_SCALE * mad, OUTLIER_MIN_EXCESS * median_ns)


def _share(extra_ns: int, median_ns: int) -> str:
    return f", +{100 * extra_ns / median_ns:.1f}%" if median_ns > 0 else ""


# --- pieces ------------------------------------------------------------------------------------

def _ratio(values: np.ndarray) -> float:
    if len(values) < 2:
        return math.nan
    median = float(np.sort(values)[(len(values) - 1) // 2])    # the lower median: an actual unit
    return float(values.max()) / median if median > 0 else math.nan


def _fmt_ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _top_keys(explain: pd.DataFrame, top: int) -> str:
    """The keys behind the (positive) difference: the largest that add to it, by size, then apart which of
    them are beyond step-to-step noise (size and significance are two rankings: one sentence mixing them read
    +48 µs beyond noise as the cause of a rank +32.4 ms busier, on trace_filter). Keys that take from it are
    no explanation (three kernels at -7.2, -6.0 and -3.1 ms were listed for that rank). Fewer steps than a
    noise verdict needs (noise.MIN_VERDICT_STEPS): no verdict, "too few steps to test"."""
    moved = _adding(explain)
    if moved.empty:
        return "no key adds to the difference"
    largest = f"largest: {_key_list(moved.head(top))}"
    steps = int(explain.attrs.get("min_steps", MIN_VERDICT_STEPS))
    if steps < MIN_STEPS:          # one step against one (the outlier step): no test to speak of
        return largest
    if steps < MIN_VERDICT_STEPS:
        return f"{largest} (too few steps to test against step-to-step noise: {steps})"
    beyond = moved[~moved[STATUS].isin([NOISE, UNTESTED])]
    if beyond.empty:
        return f"{largest}; none beyond step-to-step noise"
    if beyond.index.equals(moved.index):
        return f"{largest}; all beyond step-to-step noise"
    shown = int(beyond[DELTA_NS].sum())
    total = int(explain.loc[explain[KIND] == "total", DELTA_NS].sum())
    return (f"{largest}; beyond step-to-step noise: {_key_list(beyond.head(top))} (+{human_ns(shown)} of the "
            f"+{human_ns(total)})")


def _adding(explain: pd.DataFrame) -> pd.DataFrame:
    """The key rows of a slowest-vs-median comparison that add to the difference, largest first."""
    adding = explain[(explain[KIND] == "key") & (explain[DELTA_NS] > 0)]
    return adding.sort_values(DELTA_NS, ascending=False, kind="stable")


NOTE_NAME_WIDTH = 90      # as the tables' names (report/shape.MAX_TEXT)


def _key_list(keys: pd.DataFrame) -> str:
    # the name the table shows where one raw name is behind the key (ranks of one run share a build; the
    # key's `<arch>_` normalization is for runs on other GPUs), then short names, never two alike
    named = [raw if raw and " | " not in raw else key for key, raw in zip(keys[KEY], keys[RAW_NAMES])]
    shown = display_names(named, NOTE_NAME_WIDTH)     # a name of any length stays a part of one sentence
    return "; ".join(f"{k} {'+' if d > 0 else '−'}{human_ns(abs(d))}" for k, d in zip(shown, keys[DELTA_NS]))


def _as_one_step(units: pd.DataFrame, step: int, rank: int) -> pd.DataFrame:
    one = units[(units[STEP] == step) & (units[S.RANK] == rank)].copy()
    one[STEP] = 0
    return one


def step_range_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """rank, name, start_ns, end_ns, duration_ns of every ProfilerStep#N range (a few rows per file) as
    numpy columns (the name as an object array): the map step's, once per file."""
    rows = _step_rows(traceset)
    columns = {name: rows.column(name).to_numpy(zero_copy_only=False) for name in rows.column_names}
    columns[S.NAME] = columns[S.NAME].astype(object)
    return columns | {S.DURATION_NS: columns[S.END_NS] - columns[S.START_NS]}


def _step_rows(traceset: TraceSet) -> pa.Table:
    host = traceset.host
    mask = pc.and_(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION),
                   pc.starts_with(host.column(S.NAME), "ProfilerStep#"))
    return host.filter(mask).select([S.RANK, S.NAME, S.START_NS, S.END_NS])


def _mean_step_ns(rows: pd.DataFrame) -> pd.Series:
    return rows.groupby(S.RANK)[S.DURATION_NS].mean().round().astype("int64")
