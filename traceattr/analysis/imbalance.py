"""Rank and step imbalance: who is slow, by how much, and which keys explain it.

Ranks: imbalance = max / lower median over ranks of busy time and of mean ProfilerStep wall time. The straggler
is the rank with the most busy time; it is compared, key by key, with the median rank (the lower median
by busy time, an actual rank so that the key deltas add up exactly to the extra busy time). Both ranks
ran the same steps, so the per-step noise test of compare.py applies.

Steps: the outlier step is the one with the longest wall time (ProfilerStep duration, the slowest rank),
or the most busy time when steps have no wall time; it is compared with the median step the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.compare import DELTA_NS, KIND, compare_units
from traceattr.analysis.keys import KEY, STEP, activity_keys, step_names
from traceattr.analysis.summarize import summarize
from traceattr.model.traceset import TraceSet
from traceattr.report.shape import human_ns

STEP_NS = "step_ns"          # mean ProfilerStep wall time of a rank (-1: no steps)
WALL_NS = "wall_ns"          # a step's wall time: its longest ProfilerStep range over ranks (-1: none)
STEP_NAME = "step_name"


@dataclass(frozen=True)
class Imbalance:
    """One comparison of the slowest unit (rank or step) against the median one."""
    per_unit: pd.DataFrame      # one row per rank (rank, busy_ns, step_ns) or step (step, step_name, ...)
    busy_ratio: float           # max / median busy_ns (nan: under 2 units or median 0)
    step_ratio: float           # ranks: max / median step_ns; steps: max / median wall_ns
    slowest: int                # the straggler rank or the outlier step index (-1: none)
    median: int                 # the median rank or step index it is compared with
    extra_ns: int               # slowest − median in the compared measure (busy for ranks)
    explain: pd.DataFrame       # compare_units(median, slowest): Σ key delta_ns == busy difference


def rank_imbalance(traceset: TraceSet, by: str = "kernel", alpha: float = 0.05) -> Imbalance:
    """Busy and step-time imbalance over ranks, the straggler and the keys behind its extra time."""
    return rank_imbalance_of(summarize(traceset, by="rank"), step_ranges(traceset),
                             lambda ranks: activity_keys(traceset, by), len(step_names(traceset)), alpha)


def rank_imbalance_of(rank_table: pd.DataFrame, steps: pd.DataFrame, units_of, n_steps: int,
                      alpha: float = 0.05) -> Imbalance:
    """rank_imbalance from its pieces: summarize(by="rank"), the ProfilerStep ranges (step_ranges) and
    `units_of(ranks)`, activity_keys() rows holding at least those ranks (asked for only the straggler and
    the median rank, so a map-reduce over files computes keys for two ranks only)."""
    ranks = rank_table.groupby(S.RANK, as_index=False)[S.BUSY_NS].sum()
    ranks[STEP_NS] = ranks[S.RANK].map(_mean_step_ns(steps)).fillna(-1).astype("int64")
    busy = ranks[S.BUSY_NS].to_numpy()
    if len(ranks) < 2:
        return Imbalance(ranks, math.nan, math.nan, -1, -1, 0, pd.DataFrame())
    slowest = int(ranks[S.RANK].iloc[int(np.argmax(busy))])
    median = int(ranks[S.RANK].iloc[np.argsort(busy, kind="stable")[(len(busy) - 1) // 2]])
    units = units_of([median, slowest])
    explain = compare_units(units[units[S.RANK] == median], units[units[S.RANK] == slowest], n_steps, n_steps,
                            alpha=alpha)
    step_ns = ranks[STEP_NS].to_numpy()
    return Imbalance(ranks, _ratio(busy), _ratio(step_ns[step_ns >= 0]), slowest, median,
                     int(busy.max() - ranks.loc[ranks[S.RANK] == median, S.BUSY_NS].iloc[0]), explain)


def step_imbalance(traceset: TraceSet, by: str = "kernel", alpha: float = 0.05) -> Imbalance:
    """The outlier step (longest wall time) against the median step, with the keys that explain it."""
    return step_imbalance_of(step_names(traceset), activity_keys(traceset, by), step_ranges(traceset), alpha)


def step_imbalance_of(names: tuple[str, ...], units: pd.DataFrame, steps: pd.DataFrame,
                      alpha: float = 0.05) -> Imbalance:
    """step_imbalance from its pieces: step names in step order, activity_keys() rows (any ranks summed
    together: only key, raw, step, self_ns and count are read) and the ProfilerStep ranges."""
    busy = np.zeros(len(names), dtype=np.int64)
    stepped = units[units[STEP] >= 0]
    np.add.at(busy, stepped[STEP].to_numpy(dtype=np.int64), stepped[S.SELF_NS].to_numpy(dtype=np.int64))
    wall = _step_walls(steps, names)
    per_step = pd.DataFrame({STEP: np.arange(len(names), dtype=np.int64), STEP_NAME: list(names),
                             S.BUSY_NS: busy, WALL_NS: wall})
    if len(names) < 2:
        return Imbalance(per_step, math.nan, math.nan, -1, -1, 0, pd.DataFrame())
    measure = wall if (wall >= 0).all() else busy
    slowest = int(np.argmax(measure))
    median = int(np.argsort(measure, kind="stable")[(len(measure) - 1) // 2])
    explain = compare_units(_as_one_step(units, median), _as_one_step(units, slowest), 1, 1, alpha=alpha)
    return Imbalance(per_step, _ratio(busy), _ratio(wall[wall >= 0]), slowest, median,
                     int(measure[slowest] - measure[median]), explain)


def rank_facts(traceset: TraceSet, by: str = "kernel", top: int = 3) -> tuple[dict, list[str]]:
    """Header facts and note lines for `summarize --by rank`."""
    return rank_facts_of(rank_imbalance(traceset, by), top)


def rank_facts_of(result: Imbalance, top: int = 3) -> tuple[dict, list[str]]:
    if result.slowest < 0:
        return {}, []
    facts = {"busy imbalance (max/median)": _fmt_ratio(result.busy_ratio),
             "step-time imbalance (max/median)": _fmt_ratio(result.step_ratio),
             "straggler": f"rank {result.slowest} (+{human_ns(result.extra_ns)} busy vs median rank "
                          f"{result.median})"}
    return facts, [f"rank {result.slowest} vs rank {result.median}: " + _top_keys(result.explain, top)]


def step_facts(traceset: TraceSet, by: str = "kernel", top: int = 3) -> tuple[dict, list[str]]:
    """Header facts and note lines for `summarize --by step`."""
    return step_facts_of(step_imbalance(traceset, by), top)


def step_facts_of(result: Imbalance, top: int = 3) -> tuple[dict, list[str]]:
    if result.slowest < 0:
        return {}, []
    names = result.per_unit[STEP_NAME].tolist()
    what = "wall" if (result.per_unit[WALL_NS] >= 0).all() else "busy"
    facts = {"step imbalance (max/median wall)": _fmt_ratio(result.step_ratio),
             "outlier step": f"{names[result.slowest]} (+{human_ns(result.extra_ns)} {what} vs median "
                             f"{names[result.median]})"}
    return facts, [f"{names[result.slowest]} vs {names[result.median]}: " + _top_keys(result.explain, top)]


# --- pieces ------------------------------------------------------------------------------------

def _ratio(values: np.ndarray) -> float:
    if len(values) < 2:
        return math.nan
    median = float(np.sort(values)[(len(values) - 1) // 2])    # the lower median: an actual unit
    return float(values.max()) / median if median > 0 else math.nan


def _fmt_ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _top_keys(explain: pd.DataFrame, top: int) -> str:
    keys = explain[(explain[KIND] == "key") & (explain[DELTA_NS] != 0)].head(top)
    if keys.empty:
        return "no key differs"
    return "; ".join(f"{k} {'+' if d > 0 else '−'}{human_ns(abs(d))}" for k, d in zip(keys[KEY], keys[DELTA_NS]))


def _as_one_step(units: pd.DataFrame, step: int) -> pd.DataFrame:
    one = units[units[STEP] == step].copy()
    one[STEP] = 0
    return one


def step_ranges(traceset: TraceSet) -> pd.DataFrame:
    """rank, name, start_ns, end_ns, duration_ns of every ProfilerStep#N range (a few rows per file)."""
    host = traceset.host
    mask = pc.and_(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION),
                   pc.starts_with(host.column(S.NAME), "ProfilerStep#"))
    rows = host.filter(mask).select([S.RANK, S.NAME, S.START_NS, S.END_NS]).to_pandas()
    rows[S.DURATION_NS] = rows[S.END_NS] - rows[S.START_NS]
    return rows


def _mean_step_ns(rows: pd.DataFrame) -> pd.Series:
    return rows.groupby(S.RANK)[S.DURATION_NS].mean().round().astype("int64")


def _step_walls(rows: pd.DataFrame, names: tuple[str, ...]) -> np.ndarray:
    longest = rows.groupby(S.NAME)[S.DURATION_NS].max()
    return np.array([int(longest.get(name, -1)) for name in names], dtype=np.int64)
