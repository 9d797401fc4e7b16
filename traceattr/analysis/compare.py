"""compare(a, b): what changed between two runs, per normalized key, in rows that add up exactly.

Rows join on the key (kernel names normalized across builds, see normalize.py). Every row holds the exact
self time of both sides (int64 ns, from the sweep), so Σ key deltas == busy(B) − busy(A), and with the
`<idle>` row == window(B) − window(A). The `<total>` row holds the busy totals.

Noise: self time per key per ProfilerStep on each side. With the same number (2+) of steps on both sides,
a paired t-test on the per-step differences (steps matched by position: an effect of a step's position,
like a heavier first step, cancels) and Welch's both run, and the smaller p, doubled, says whether a key
changed beyond step-to-step noise; with different step counts, Welch's alone (noise.py). p-values are
Holm-corrected over the key rows, and noise_ns is the chosen test's interval half-width at the level Holm
tested the key at, so a key row is `changed` exactly when |b_step_ns − a_step_ns| > noise_ns (up to the
1 ns rounding of those columns). A step is a (window occurrence, ProfilerStep#N) pair: a process that
profiles twice numbers both windows' steps from the same N, and those are two sets of steps
(analysis/compare_plan.py, run_steps).
Status: `added` (only in B), `removed` (only in A), `changed` (beyond noise), `noise` (a tested nonzero
delta within noise), `unchanged` (no difference at all), `untested` (a nonzero delta with no noise
estimate: fewer than two steps on a side, a key mostly outside steps, and always the `<idle>` row;
p_value nan, noise_ns -1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.keys import KEY, RAW, STEP
from traceattr.analysis.fold import check_top
from traceattr.analysis.noise import MIN_STEPS, half_widths, holm, holm_levels, p_values, paired_stats, welch_stats
from traceattr.errors import TraceInputError
from traceattr.analysis.collectives import rank_ranges
from traceattr.units import human_ns

# columns
KIND = "kind"                 # "key", "other", "idle" or "total"
A_NS, B_NS, DELTA_NS, DELTA_PCT = "a_ns", "b_ns", "delta_ns", "delta_pct"
A_COUNT, B_COUNT = "a_count", "b_count"
A_STEP_NS, B_STEP_NS = "a_step_ns", "b_step_ns"   # per-step mean self time (0 without steps); a step
                                                  # row (by="step"): that step's own time
NOISE_NS = "noise_ns"         # half-width of the interval of the per-step mean delta at the level Holm tested the
                              # key at (<total>: 1 − alpha); changed <=> |delta per step| > noise_ns; -1: none
P_VALUE = "p_value"           # Holm-adjusted for key rows; nan: not tested
STATUS = "status"
RAW_NAMES = "raw_names"       # the distinct raw names behind the key (both sides)
COLUMNS = [KEY, A_NS, B_NS, DELTA_NS, DELTA_PCT, A_COUNT, B_COUNT, A_STEP_NS, B_STEP_NS, NOISE_NS, P_VALUE,
           STATUS, KIND, RAW_NAMES]

ADDED, REMOVED, CHANGED, UNCHANGED, UNTESTED = "added", "removed", "changed", "unchanged", "untested"
NOISE = "noise"               # tested, and the delta is within step-to-step noise (not "unchanged": it moved)
TOTAL, IDLE, OTHER = "<total>", "<idle>", "<other>"
MIN_STEPPED_SHARE = 0.5       # a key tested on steps must have at least this share of its time in steps
MAX_RAW_NAMES = 3


@dataclass(frozen=True)
class Side:
    """What the totals and notes of a comparison read of one side: a TraceSet, or the per-file aggregates of
    a path (analysis/compare_plan.py)."""
    files: int
    device_rows: int
    ranks: tuple[int, ...]
    world_sizes: frozenset[int]
    steps: int                  # ProfilerSteps in the side's step order (STEP values index them)
    window_ns: int              # Σ window_ns over the (rank, device) rows of the rank table
    busy_ns: int
    communication_ns: int = 0   # Σ self ns of communication activities (the rank table's communication_ns)


def check_options(alpha: float, top: int | None) -> None:
    if type(alpha) is bool or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise TraceInputError(f"alpha must be a number between 0 and 1, got {alpha!r}")
    check_top(top)


def compare_sides(a: Side, b: Side, units_a: pd.DataFrame, units_b: pd.DataFrame, by: str, normalize: bool,
                  alpha: float, top: int | None) -> pd.DataFrame:
    """compare() from each side's facts and activity_keys() rows (STEP indexing the side's own steps)."""
    table = compare_units(units_a, units_b, a.steps, b.steps, alpha=alpha,
                          idle=(a.window_ns - a.busy_ns, b.window_ns - b.busy_ns), by_step=by == "step",
                          ranks=(len(a.ranks), len(b.ranks)))
    table.attrs.update(level=by, alpha=alpha, normalized=normalize, steps_a=a.steps, steps_b=b.steps,
                       ranks_a=len(a.ranks), ranks_b=len(b.ranks), device_rows_a=a.device_rows,
                       device_rows_b=b.device_rows,
                       busy_a_ns=a.busy_ns, busy_b_ns=b.busy_ns, window_a_ns=a.window_ns, window_b_ns=b.window_ns,
                       notes=_notes(a, b, units_a, units_b, table, by))
    return fold(table, top)


def noise_test_name(steps_a: int, steps_b: int) -> str:
    """The noise test compare_units runs for these step counts (attrs["test"])."""
    if min(steps_a, steps_b) < MIN_STEPS:
        return f"none (A {steps_a} steps, B {steps_b} steps: a noise test needs {MIN_STEPS}+ per side)"
    if steps_a == steps_b:
        return f"paired or Welch t over {steps_a} steps (the smaller p, doubled)"
    return f"Welch t (A {steps_a} steps, B {steps_b} steps)"


def _noise_test(per_step_a: np.ndarray, per_step_b: np.ndarray):
    """Per row: (mean per-step delta, its standard error, degrees of freedom, p) and how many tests the p
    pays for. With the same number of steps on both sides, the paired test (steps matched by position: an
    effect of a step's position cancels) and Welch's (more degrees of freedom: at 3 steps the paired test
    alone missed +20% regressions Welch caught, 6 vs 12 of 24) both run, and each row keeps the smaller p,
    doubled (Bonferroni over the two), with that test's interval; else Welch alone (noise.py)."""
    diff, se, df = welch_stats(per_step_a, per_step_b)
    p = p_values(diff, se, df)
    if per_step_a.shape[1] != per_step_b.shape[1]:
        return diff, se, df, p, 1
    pair = paired_stats(per_step_a, per_step_b)
    p_pair = p_values(*pair)
    better = p_pair < p                     # nan compares False: Welch's row stays
    se, df = np.where(better, pair[1], se), np.where(better, pair[2], df)
    return diff, se, df, np.minimum(1.0, 2 * np.where(better, p_pair, p)), 2


def compare_units(units_a: pd.DataFrame, units_b: pd.DataFrame, steps_a: int, steps_b: int, *,
                  alpha: float = 0.05, top: int | None = None,
                  idle: tuple[int, int] | None = None, by_step: bool = False,
                  ranks: tuple[int, int] = (1, 1)) -> pd.DataFrame:
    """The comparison table from two activity_keys() frames (also used for rank vs rank, step vs step).
    STEP values of each side index its own steps 0..steps-1 (-1: outside every step). `by_step`: the keys
    are steps, whose time lies in their own step only (one value per side, no noise sample): key rows are
    untested, only <total> is tested, and a step row's a_step_ns/b_step_ns is that step's own time (a mean
    over the side's steps would divide one step by the step count). attrs["test"] names the noise test
    (noise_test_name). `ranks`: each side's rank count; when they differ (and neither is 0), the step columns
    and the noise test are per rank (a side's per-step sums over its ranks divided by its rank count): twice
    the ranks doing the same work per rank is no change (a_ns and b_ns stay the exact sums)."""
    keys = sorted(set(units_a[KEY]) | set(units_b[KEY]))
    index = {key: i for i, key in enumerate(keys)}
    per_a, per_b = _rank_divisors(*ranks)
    side_a, side_b = _side(units_a, index, steps_a, per_a), _side(units_b, index, steps_b, per_b)
    table = pd.DataFrame({KEY: pd.Series(keys, dtype="str"),
                          A_NS: side_a["total"], B_NS: side_b["total"],
                          A_COUNT: side_a["count"], B_COUNT: side_b["count"]})
    table[DELTA_NS] = table[B_NS] - table[A_NS]
    diff, se, df, p, tests = _noise_test(_per_rank(side_a), _per_rank(side_b))
    untestable = ~(_stepped(side_a) & _stepped(side_b)) | by_step
    p[untestable] = np.nan
    table[P_VALUE] = holm(p)
    table[NOISE_NS] = _noise_ns(half_widths(se, df, holm_levels(p, alpha) / tests))
    table[A_STEP_NS], table[B_STEP_NS] = (_in_steps(side_a), _in_steps(side_b)) if by_step else (
        _step_mean(side_a), _step_mean(side_b))
    table[STATUS] = _status(table, alpha)
    table[RAW_NAMES] = [_raw_names(side_a["raw"][i] | side_b["raw"][i]) for i in range(len(keys))]
    table[KIND] = "key"
    order = np.lexsort((table[KEY].to_numpy(dtype=object), -np.abs(table[DELTA_NS].to_numpy())))
    table = table.iloc[order].reset_index(drop=True)
    extra = [_total(side_a, side_b, alpha)]
    if idle is not None:
        extra.insert(0, _plain_row(IDLE, "idle", int(idle[0]), int(idle[1])))
    table = pd.concat([table] + [pd.DataFrame([row]) for row in extra], ignore_index=True)
    table[DELTA_PCT] = _percent(table[DELTA_NS].to_numpy(), table[A_NS].to_numpy())
    table = _typed(table[COLUMNS])
    table.attrs["test"] = noise_test_name(steps_a, steps_b)
    table.attrs["min_steps"] = min(steps_a, steps_b)     # what a "within noise" verdict rests on (noise.py)
    table.attrs["one_step"] = _one_step(side_a, side_b) if table[STATUS].iloc[-1] == NOISE else None
    return fold(table, top)


def fold(table: pd.DataFrame, top: int | None) -> pd.DataFrame:
    """The table for display: key rows past the `top` largest |delta| summed into one `<other>` row (attrs
    kept). Folding is for display only: regressions() judges the unfolded table."""
    check_top(top)
    keys = table[table[KIND] == "key"]
    if top is None or len(keys) <= top:
        return table
    rest = table[table[KIND] != "key"]
    other = _other(keys.iloc[top:])
    # a level's own columns (by shape: compare_shape.py) stay, blank on the <other> row
    extra = [c for c in table.columns if c not in COLUMNS]
    for column in extra:
        kind = table[column].dtype.kind
        other[column] = pd.Series([S.NO_INT if kind in "iu" else np.nan if kind == "f" else ""],
                                  index=other.index).astype(table[column].dtype)
    folded = pd.concat([keys.iloc[:top], other, rest], ignore_index=True)
    folded[DELTA_PCT] = _percent(folded[DELTA_NS].to_numpy(), folded[A_NS].to_numpy())
    folded = pd.concat([_typed(folded[COLUMNS]), folded[extra]], axis=1)[list(table.columns)]
    folded.attrs.update(table.attrs)
    return folded


def regressions(table: pd.DataFrame, pct: float) -> pd.DataFrame:
    """Rows slower by more than `pct` percent and beyond noise: the `<total>` row or a key row with
    status `changed` (or `untested`: without a noise estimate a slowdown cannot be called noise), or an
    `added` key whose time exceeds `pct` percent of A's busy total, when the added keys' time net of the
    removed keys' does too. With different rank counts the sides are judged per rank. By step (attrs level
    "step") only `<total>` is judged: step rows have no noise sample, and steps on one side only are not slower work.
    `table` must hold every key (compare() without `top`): a key folded into `<other>` cannot be judged."""
    if (table[KIND] == "other").any():
        raise TraceInputError("regressions() needs every key: compare without top, and fold() for display")
    # sums over different rank counts are not comparable (2 ranks against 4 doing the same work read +100%):
    # per rank, as the noise test decided
    per_a, per_b = _rank_divisors(table.attrs.get("ranks_a", 0), table.attrs.get("ranks_b", 0))
    total_a = int(table.loc[table[KIND] == "total", A_NS].sum()) / per_a
    a, b = table[A_NS] / per_a, table[B_NS] / per_b
    growth = (100.0 * (b - a) / a.where(a > 0)).where(b > a, 0.0)
    steps_a, steps_b = table.attrs.get("steps_a", 0), table.attrs.get("steps_b", 0)
    if steps_a and steps_b and (steps_a != steps_b or per_a != per_b):
        # totals over different step counts are not comparable (6 steps of A against 4 slower ones of B read
        # -20%, and the gate never fired): per step, as the noise test decided
        a, b = table[A_STEP_NS].astype(float), table[B_STEP_NS].astype(float)
        growth = (100.0 * (b - a) / a.where(a > 0)).fillna(growth)
    judged = table[KIND].isin(["total"] if table.attrs.get("level") == "step" else ["key", "total"])
    slower = table[STATUS].isin([CHANGED, UNTESTED]) & (growth > pct) & judged
    # an added key is new work only net of the removed keys: a kernel renamed from float to half (same
    # durations) failed the gate as added while the total fell
    keys = table[KIND] == "key"
    added_ns = table.loc[keys & (table[STATUS] == ADDED), B_NS].sum() / per_b
    removed_ns = table.loc[keys & (table[STATUS] == REMOVED), A_NS].sum() / per_a
    added = ((table[STATUS] == ADDED) & keys & judged & (100.0 * table[B_NS] / per_b > pct * total_a)
             & (100.0 * (added_ns - removed_ns) > pct * total_a))
    return table[slower | added]


# --- pieces ------------------------------------------------------------------------------------


def _side(units: pd.DataFrame, index: dict[str, int], steps: int, per: int = 1) -> dict:
    n = len(index)
    key = np.array([index[k] for k in units[KEY].tolist()], dtype=np.int64)
    self_ns = units[S.SELF_NS].to_numpy(dtype=np.int64)
    step = units[STEP].to_numpy(dtype=np.int64)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, key, self_ns)
    count = np.zeros(n, dtype=np.int64)
    np.add.at(count, key, units[S.COUNT].to_numpy(dtype=np.int64))
    per_step = np.zeros((n, steps), dtype=np.int64)
    inside = (step >= 0) & (step < steps)
    np.add.at(per_step, (key[inside], step[inside]), self_ns[inside])
    raw = [set() for _ in range(n)]
    for k, name in zip(key.tolist(), units[RAW].tolist()):    # one per distinct (rank, key, step) row
        raw[k].add(name)
    return {"total": total, "count": count, "steps": per_step, "raw": raw, "n_steps": steps, "per": per}


def _rank_divisors(ranks_a: int, ranks_b: int) -> tuple[int, int]:
    """What each side's sums are divided by: its rank count when the counts differ (neither 0), else 1."""
    return (ranks_a, ranks_b) if ranks_a and ranks_b and ranks_a != ranks_b else (1, 1)


def _per_rank(side: dict) -> np.ndarray:
    """The per-step values the noise test reads: per rank when the sides' rank counts differ (compare_units)."""
    return side["steps"] if side["per"] == 1 else side["steps"] / side["per"]


def _stepped(side: dict) -> np.ndarray:
    """Keys whose per-step values represent them: absent on this side, or mostly inside steps."""
    inside = side["steps"].sum(axis=1)
    return (side["total"] == 0) | (inside >= MIN_STEPPED_SHARE * side["total"])


def _step_mean(side: dict) -> np.ndarray:
    if side["n_steps"] == 0:
        return np.zeros(len(side["total"]), dtype=np.int64)
    return np.rint(side["steps"].sum(axis=1) / side["n_steps"] / side["per"]).astype(np.int64)


def _in_steps(side: dict) -> np.ndarray:
    """Per key, its time inside steps: a step key's own time (0 outside every step)."""
    return side["steps"].sum(axis=1).astype(np.int64)


ONE_STEP_SHARE = 0.5     # of the total's change, in one step (paired by position) ...
# ... and this many times the median change of the other steps: on 280 noise-only pairs (5-20 steps, 2-30%
# jitter) the largest step's change reached 11x that median; the planted one-step regressions 100x and more
ONE_STEP_FACTOR = 20
ONE_STEP_MIN_STEPS = 5   # with 3 steps the median is of two values: 1 noise pair of 60 passed a factor of 10


def _one_step(side_a: dict, side_b: dict) -> tuple[int, int, int] | None:
    """(step index, its busy change, the total's change) when one step holds the busy change: a +26%
    regression in step 5 of 10 tested as noise (one large paired difference is a large spread), and nothing
    named the step. Steps paired by position, per rank as the test reads them; None otherwise."""
    if side_a["n_steps"] != side_b["n_steps"] or side_a["n_steps"] < ONE_STEP_MIN_STEPS:
        return None
    change = _per_rank(side_b).sum(axis=0) - _per_rank(side_a).sum(axis=0)
    worst = int(np.argmax(np.abs(change)))
    others = np.abs(np.delete(change, worst))
    total = float(change.sum())
    if (not total or change[worst] * total <= 0 or abs(change[worst]) < ONE_STEP_SHARE * abs(total)
            or abs(change[worst]) <= ONE_STEP_FACTOR * float(np.median(others))):
        return None
    return worst, int(np.rint(change[worst])), int(np.rint(total))


def _noise_ns(half: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(half), -1, np.rint(np.nan_to_num(half))).astype(np.int64)


def _status(table: pd.DataFrame, alpha: float) -> np.ndarray:
    a, b, p = table[A_NS].to_numpy(), table[B_NS].to_numpy(), table[P_VALUE].to_numpy()
    a_count, b_count = table[A_COUNT].to_numpy(), table[B_COUNT].to_numpy()
    status = np.where(p <= alpha, CHANGED, np.where(a == b, UNCHANGED, NOISE)).astype(object)
    status[np.isnan(p) & (a != b)] = UNTESTED
    status[(a_count == 0) & (b_count > 0)] = ADDED
    status[(b_count == 0) & (a_count > 0)] = REMOVED
    return status


def _raw_names(names: set[str]) -> str:
    ordered = sorted(names)
    text = " | ".join(ordered[:MAX_RAW_NAMES])
    return text + (f" | … +{len(ordered) - MAX_RAW_NAMES} more" if len(ordered) > MAX_RAW_NAMES else "")


def _other(rest: pd.DataFrame) -> pd.DataFrame:
    row = _plain_row(OTHER, "other", int(rest[A_NS].sum()), int(rest[B_NS].sum()))
    row.update({A_COUNT: int(rest[A_COUNT].sum()), B_COUNT: int(rest[B_COUNT].sum()),
                A_STEP_NS: int(rest[A_STEP_NS].sum()), B_STEP_NS: int(rest[B_STEP_NS].sum()),
                STATUS: (UNCHANGED if (rest[STATUS] == UNCHANGED).all()
                         else NOISE if rest[STATUS].isin([UNCHANGED, NOISE]).all()
                         else UNTESTED if rest[STATUS].isin([UNCHANGED, NOISE, UNTESTED]).all() else CHANGED),
                RAW_NAMES: f"{len(rest)} keys below --top"})
    return pd.DataFrame([row])


def _total(side_a: dict, side_b: dict, alpha: float) -> dict:
    """Busy totals, tested on per-step busy (Σ over keys per step); not part of the Holm family. Its step
    columns are the Σ of the keys' per-step means (the mean busy per step, up to their rounding)."""
    row = _plain_row(TOTAL, "total", int(side_a["total"].sum()), int(side_b["total"].sum()))
    steps_a, steps_b = _per_rank(side_a).sum(axis=0)[None, :], _per_rank(side_b).sum(axis=0)[None, :]
    diff, se, df, p, tests = _noise_test(steps_a, steps_b)
    half = half_widths(se, df, np.array([float(alpha) / tests]))
    stepped = (side_a["steps"].sum() >= MIN_STEPPED_SHARE * row[A_NS]
               and side_b["steps"].sum() >= MIN_STEPPED_SHARE * row[B_NS])
    if not stepped:
        p[:], half[:] = np.nan, np.nan
    row.update({A_COUNT: int(side_a["count"].sum()), B_COUNT: int(side_b["count"].sum()),
                A_STEP_NS: int(_step_mean(side_a).sum()), B_STEP_NS: int(_step_mean(side_b).sum()),
                P_VALUE: float(p[0]), NOISE_NS: int(_noise_ns(half)[0])})
    tested = not np.isnan(p[0])
    row[STATUS] = (CHANGED if p[0] <= alpha else NOISE if row[DELTA_NS] else UNCHANGED) if tested else row[STATUS]
    return row


def _plain_row(key: str, kind: str, a_ns: int, b_ns: int) -> dict:
    return {KEY: key, A_NS: a_ns, B_NS: b_ns, DELTA_NS: b_ns - a_ns, A_COUNT: 0, B_COUNT: 0,
            A_STEP_NS: 0, B_STEP_NS: 0, NOISE_NS: -1, P_VALUE: np.nan,
            STATUS: UNTESTED if b_ns != a_ns else UNCHANGED, KIND: kind, RAW_NAMES: ""}


def _percent(delta: np.ndarray, base: np.ndarray) -> np.ndarray:
    base = base.astype(np.float64)
    return np.divide(100.0 * delta, base, out=np.full(len(delta), np.nan), where=base > 0)


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    ints = [A_NS, B_NS, DELTA_NS, A_COUNT, B_COUNT, A_STEP_NS, B_STEP_NS, NOISE_NS]
    return table.astype({**{c: "int64" for c in ints}, DELTA_PCT: "float64", P_VALUE: "float64",
                         KEY: "str", STATUS: "str", KIND: "str", RAW_NAMES: "str"}).reset_index(drop=True)


def _notes(a: Side, b: Side, units_a, units_b, table: pd.DataFrame, by: str) -> list[str]:
    notes = []
    for label, side in (("A", a), ("B", b)):
        if side.files == 0:
            notes.append(f"{label} is empty (no trace files): every key of the other side is added/removed")
        elif side.device_rows == 0 and (a.device_rows or b.device_rows):     # neither: one note below
            notes.append(f"{label} has no device activities (a CPU-only trace?): its device time is 0")
    if a.files and b.files and not a.device_rows and not b.device_rows:
        notes.append("neither side has device activities: compare measures device time, so every key row is "
                     "0 and --fail-on-regression cannot judge; `traceattr summarize PATH --by op` shows host "
                     "self time")
    if a.ranks and b.ranks and not set(a.ranks) & set(b.ranks):
        notes.append(f"no rank in common (A: {rank_ranges(list(a.ranks))}, B: {rank_ranges(list(b.ranks))}): "
                     "each row compares other ranks' work")
    common = set(units_a[KEY]) & set(units_b[KEY])
    if len(units_a) and len(units_b) and not common:
        notes.append("no key in common: every row is added or removed (different models, or --no-normalize?)")
    # a trace without distributedInfo has world size -1 (unknown): left out, never compared
    sizes_a, sizes_b = ({size for size in side.world_sizes if size >= 0} for side in (a, b))
    if sizes_a and sizes_b and sizes_a != sizes_b:
        notes.append(f"world sizes differ ({', '.join(map(str, sorted(sizes_a)))} vs "
                     f"{', '.join(map(str, sorted(sizes_b)))}): totals sum over the loaded ranks")
    if len(a.ranks) != len(b.ranks) and a.ranks and b.ranks:
        notes.append(f"A holds {len(a.ranks)} rank(s), B {len(b.ranks)}: a_ns and b_ns are sums over ranks; "
                     "the step columns, the noise test and --fail-on-regression are per rank")
    steps_a, steps_b = a.steps, b.steps
    if by == "step" and min(steps_a, steps_b) >= 2:
        notes.append("steps are matched by position (step 1, step 2, ...); each has one value per side, so "
                     "step rows are untested (their step columns hold the step's own time) and only <total> "
                     "is tested and gated")
    if min(steps_a, steps_b) >= MIN_STEPS and len(table) > 2 and steps_a != steps_b:   # the header names the test
        notes.append(f"noise test: Welch t, as A has {steps_a} steps and B {steps_b}: steps cannot be "
                     "paired by position, so an effect tied to a step's position counts as noise")
    if min(steps_a, steps_b) < 2 and len(table) > 2:
        notes.append(f"steps: A {steps_a}, B {steps_b}; a noise test needs 2+ ProfilerSteps per side, so any "
                     "nonzero delta is untested")
    total = table.loc[table[KIND] == "total", STATUS]
    if len(total) and total.iloc[0] not in (NOISE, UNCHANGED):      # a busy-time change beyond step noise
        notes += _communication_note(a, b)
    if table.attrs.get("one_step") and by != "step":
        per_rank = bool(a.ranks and b.ranks) and len(a.ranks) != len(b.ranks)
        notes.append(_one_step_note(*table.attrs["one_step"], per_rank=per_rank))
    return notes


def _one_step_note(step: int, change_ns: int, total_ns: int, per_rank: bool) -> str:

    def signed(ns: int) -> str:
        return f"{'+' if ns >= 0 else '−'}{human_ns(abs(ns))}"
    return (f"<total> is within step-to-step noise, but its change is one step's: step {step + 1} (by position) "
            f"{signed(change_ns)} of {signed(total_ns)} busy{' per rank' if per_rank else ''}, the other steps "
            "about unchanged; a one-off, not a spread: `--by step` shows it")


COMMUNICATION_SHARE = 0.25   # of the busy-time change: then say that communication time includes waiting


def _communication_note(a: Side, b: Side) -> list[str]:
    """A note when communication time makes a quarter or more of a busy-time change (beyond noise, the
    caller judges): a collective's kernel
    runs while it waits for the last rank, so a slower rank shows as a longer all-reduce on every other
    rank (a planted slow rank put the all-reduce, +419%, above the kernel that was added)."""

    change, busy_change = b.communication_ns - a.communication_ns, b.busy_ns - a.busy_ns
    if not change or abs(change) < COMMUNICATION_SHARE * abs(busy_change) or len(set(a.ranks) | set(b.ranks)) < 2:
        return []
    sign = "+" if change > 0 else "−"
    return [f"communication time {sign}{human_ns(abs(change))} (A {human_ns(a.communication_ns)}, B "
            f"{human_ns(b.communication_ns)}) of {'+' if busy_change >= 0 else '−'}{human_ns(abs(busy_change))} "
            "busy: a collective's kernels run while they wait for the last rank, so a slower rank shows as "
            "longer collectives on the others; `traceattr summarize PATH --by rank` on each run splits wait "
            "from transfer and names the straggler"]
