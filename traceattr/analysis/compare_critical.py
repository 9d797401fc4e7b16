"""`compare --by critical`: the critical path of run A against run B, per (kind, key).

Each side is `summarize --by critical`'s rows (analysis/critical.py: per rank, step, kind and key, the path's
ns; each step's path tiles it), summed over every rank and step. Σ a_ns == Σ A's step_ns and Σ b_ns == Σ B's,
so the rows' deltas add up to the change of the summed step time exactly: what moved the step, and where.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.compare import A_NS, B_NS, DELTA_NS
from traceattr.analysis.critical import OTHER, critical_steps
from traceattr.analysis.fold import check_top
from traceattr.analysis.normalize import normalize_kernel_name, normalize_text
from traceattr.attribution.critical import CRITICAL_NS, KEY, KIND, KINDS, STEP, STEP_NS
from traceattr.units import human_ns

A_SHARE_PCT, B_SHARE_PCT = "a_share_pct", "b_share_pct"    # the row's ns over its side's Σ step_ns, in percent
COLUMNS = [KIND, KEY, A_NS, B_NS, DELTA_NS, A_SHARE_PCT, B_SHARE_PCT]
TOTAL = "total"              # the last row's kind: Σ step_ns of each side (its key: TOTAL_KEY)
TOTAL_KEY = "<step time>"
STEP_KEY = "<step>"          # host time in the step's own annotation (ProfilerStep#N differs between runs)
CRITICAL = "critical"       # the compare level (--by critical)
KERNEL_KINDS = ("compute", "communication", "memcpy", "launch")      # keyed by a kernel name


def compare_critical_paths(path_a, path_b, *, step: str | None = None, normalize: bool = True,
                           top: int | None = None, **load_options) -> pd.DataFrame:
    """The table of compare_critical over the critical paths of the runs under two paths (or TraceSets,
    or stores), each computed per file by the engine (critical_steps); the headers' notes in attrs."""
    steps_a, header_a = critical_steps(path_a, step, **load_options)
    steps_b, header_b = critical_steps(path_b, step, **load_options)
    table = compare_critical(steps_a, steps_b, normalize, top)
    table.attrs["notes"] = ([f"A: {note}" for note in header_a.get("notes", [])]
                            + [f"B: {note}" for note in header_b.get("notes", [])] + table.attrs["notes"])
    return table


def compare_critical(steps_a: pd.DataFrame, steps_b: pd.DataFrame, normalize: bool = True,
                     top: int | None = None) -> pd.DataFrame:
    """One row per (kind, key) of either side's critical paths (rows of critical_steps), by |delta_ns|, then
    `<other>` (with `top`: the rest summed) and the `total` row (Σ step_ns). attrs: step_a_ns, step_b_ns,
    steps_a, steps_b (rank-steps), kinds (delta ns per kind), notes."""
    check_top(top)
    sums = [_keyed(steps, normalize) for steps in (steps_a, steps_b)]
    table = pd.concat(sums, axis=1).fillna(0).astype(np.int64)
    table.columns = [A_NS, B_NS]
    table = table.reset_index()
    table[DELTA_NS] = table[B_NS] - table[A_NS]
    order = {kind: i for i, kind in enumerate(KINDS)}
    # largest change first; ties in the path's kind order, then by name, so the table never depends on a hash
    table = table.assign(_size=-table[DELTA_NS].abs(), _kind=table[KIND].map(order)).sort_values(
        ["_size", "_kind", KEY], kind="stable").drop(columns=["_size", "_kind"]).reset_index(drop=True)
    if top is not None and len(table) > top:
        rest = table.iloc[top:]
        other = {KIND: "", KEY: OTHER, A_NS: int(rest[A_NS].sum()), B_NS: int(rest[B_NS].sum())}
        other[DELTA_NS] = other[B_NS] - other[A_NS]
        table = pd.concat([table.iloc[:top], pd.DataFrame([other])], ignore_index=True)
    step_a, step_b = _step_ns(steps_a), _step_ns(steps_b)
    total = pd.DataFrame([{KIND: TOTAL, KEY: TOTAL_KEY, A_NS: step_a, B_NS: step_b, DELTA_NS: step_b - step_a}])
    table = pd.concat([table, total], ignore_index=True).astype({A_NS: "int64", B_NS: "int64", DELTA_NS: "int64"})
    with np.errstate(divide="ignore", invalid="ignore"):
        table[A_SHARE_PCT] = table[A_NS] / step_a * 100 if step_a else np.nan
        table[B_SHARE_PCT] = table[B_NS] / step_b * 100 if step_b else np.nan
    table = table[COLUMNS]
    kinds = table[table[KIND].isin(KINDS)].groupby(KIND)[DELTA_NS].sum()
    counts = [len(steps.drop_duplicates([S.RANK, STEP])) for steps in (steps_a, steps_b)]
    table.attrs.update(step_a_ns=step_a, step_b_ns=step_b, steps_a=counts[0], steps_b=counts[1],
                       kinds={kind: int(kinds.get(kind, 0)) for kind in KINDS}, notes=_notes(*counts))
    return table


def _keyed(steps: pd.DataFrame, normalize: bool) -> pd.Series:
    """critical_ns summed per (kind, key) over every rank and step; keys normalized as compare's levels
    normalize them (kernel names without templates' integers and hashes; the step's own annotation one key)."""
    kinds, keys = steps[KIND].astype(str).tolist(), steps[KEY].astype(str).tolist()
    if normalize:
        keys = [STEP_KEY if key == step else
                normalize_kernel_name(key) if kind in KERNEL_KINDS and key else normalize_text(key)
                for kind, key, step in zip(kinds, keys, steps[STEP].astype(str).tolist())]
    frame = pd.DataFrame({KIND: kinds, KEY: keys, CRITICAL_NS: steps[CRITICAL_NS].to_numpy(np.int64)})
    return frame.groupby([KIND, KEY], sort=False)[CRITICAL_NS].sum()


def _step_ns(steps: pd.DataFrame) -> int:
    return int(steps.drop_duplicates([S.RANK, STEP])[STEP_NS].sum())


def _notes(steps_a: int, steps_b: int) -> list[str]:
    if not steps_a or not steps_b:
        side = "A" if not steps_a else "B"
        return [f"{side} has no step to follow a path through: its column is zero"]
    if steps_a != steps_b:
        return [f"A has {steps_a} (rank, step)s and B {steps_b}: the rows sum every step of each side; the header's "
                "step time compares the mean step"]
    return []


def critical_header(table: pd.DataFrame, path_a: str, path_b: str) -> dict:
    """The comparison's header: the step time change (mean per rank-step) and the kind that changed most."""
    attrs = table.attrs
    steps_a, steps_b = attrs["steps_a"], attrs["steps_b"]
    mean_a = attrs["step_a_ns"] // steps_a if steps_a else 0
    mean_b = attrs["step_b_ns"] // steps_b if steps_b else 0
    change = f" ({(mean_b - mean_a) / mean_a * 100:+.1f}%)" if mean_a else ""
    kinds = attrs["kinds"]
    most = max(KINDS, key=lambda kind: (abs(kinds[kind]), -KINDS.index(kind)))
    return {"A": path_a, "B": path_b, "step A_ns": mean_a, "step B_ns": mean_b,
            "step time": f"A {human_ns(mean_a)}, B {human_ns(mean_b)} per step: {_signed(mean_b - mean_a)}{change} "
                         f"(A {steps_a}, B {steps_b} rank-steps; Σ A {attrs['step_a_ns']:,} ns, "
                         f"Σ B {attrs['step_b_ns']:,} ns)",
            "changed most": (f"{most} {_signed(kinds[most])} on the path (Σ over steps)" if kinds[most]
                             else "nothing: every kind spent the same time on the path"),
            "notes": list(attrs.get("notes", []))}


def _signed(ns: int) -> str:
    return ("+" if ns > 0 else "") + human_ns(ns)
