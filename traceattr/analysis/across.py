"""across_ranks: one row per key over all ranks, from any per-(rank, device) table.

A 64-rank kernel table has 64 rows per kernel; people want one: the total over ranks, the mean per rank,
and which rank spent least and most. This works on the finished per-rank table (whatever computed it:
one process, a per-file map-reduce, a cache), so it composes with every way a level is built, and it
keeps the laws: Σ self_ns of the result == Σ self_ns of the input == Σ busy over all (rank, device).

A rank that has no row for a key spent 0 ns on it: it counts in the mean and can be the minimum rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.fold import OTHER

RANKS = "ranks"                  # how many ranks have the key
MEAN_SELF_NS = "mean_self_ns"    # total self / ranks in the table (absent ranks count as 0)
MIN_SELF_NS = "min_self_ns"
MIN_RANK = "min_rank"
MAX_SELF_NS = "max_self_ns"
MAX_RANK = "max_rank"
_SUMMED_EXTRA = (S.COUNT,)
_PATH_ONLY = ("name", "parent")   # a path level's key already holds the whole path


def across_ranks(table: pd.DataFrame, top: int | None = None, ranks=(),
                 rank_values: tuple[str, ...] = (), rank_first: tuple[str, ...] = (),
                 rank_last: tuple[str, ...] = ()) -> pd.DataFrame:
    """Aggregate a per-(rank, device) table over ranks and devices (see the module docstring).

    Key columns are the text columns (and `depth`); every other int64 column is summed (one that is -1
    everywhere, "not applicable", stays -1); self_pct is recomputed against the total. `top` keeps the N
    largest keys and sums the rest into one `<other>` row. `ranks`: the run's ranks, which count even with
    no row (a rank with no device activity spent 0 ns on every kernel: the mean and the least busy rank).
    `rank_values`: columns that hold one value per rank (the same on each of its device rows: a step's wall
    time); the result holds their mean over the ranks that have the key, and then mean_self_ns too is over
    those ranks (a step two of four ranks ran is not 0 ns on the other two). `rank_first` / `rank_last`:
    instants (epoch ns) one per rank; the result holds the earliest / latest over the ranks, exactly."""
    if S.RANK not in table.columns or S.SELF_NS not in table.columns:
        raise ValueError("across_ranks needs a per-rank table with rank and self_ns columns")
    attrs = dict(table.attrs)
    ranks = sorted(set(table[S.RANK].tolist()) | {int(rank) for rank in ranks})
    keys = [c for c in table.columns if c not in (S.RANK, S.DEVICE) and not _is_number(table[c])]
    keys = [c for c in keys if c not in _PATH_ONLY or "key" not in table.columns]
    keys += ["depth"] if "depth" in table.columns else []
    summed = [c for c in table.columns
              if c not in keys and c not in (S.RANK, S.DEVICE, S.SELF_PCT) and c not in _PATH_ONLY
              and pd.api.types.is_integer_dtype(table[c])]
    present = bool(rank_values)
    extremes = {**{c: "min" for c in rank_first}, **{c: "max" for c in rank_last}}
    if table.empty:
        out = pd.DataFrame({c: pd.Series([], dtype=table[c].dtype) for c in keys + summed})
        return _finish(out, keys, summed, attrs, len(ranks), top, present)
    by_rank = table.groupby(keys + [S.RANK], sort=False, dropna=False)[S.SELF_NS]
    per_rank = by_rank.sum().unstack(S.RANK).reindex(columns=ranks)
    # a rank has the key when it has a row of it, even at 0 ns (a zero-length op or kernel)
    has_key = by_rank.size().unstack(S.RANK).reindex(index=per_rank.index, columns=ranks).notna().to_numpy()
    per_rank = per_rank.fillna(0).astype(np.int64)
    grid = per_rank.to_numpy()
    totals = table.groupby(keys, sort=False, dropna=False)[summed].sum()
    for c in summed:
        if (table[c] == S.NO_INT).all():
            totals[c] = S.NO_INT
    totals = totals.reindex(per_rank.index)
    for c in rank_values:    # one value per rank (its device rows repeat it), "not applicable" (-1) left out
        values = table.groupby(keys + [S.RANK], sort=False, dropna=False)[c].first()
        values = values[values != S.NO_INT]
        means = values.groupby(level=list(range(len(keys))), sort=False, dropna=False).mean()
        totals[c] = means.reindex(totals.index).round().fillna(S.NO_INT).astype(np.int64)
    for c, how in extremes.items():    # int64 min / max: exact, where a float mean of epoch ns is not
        values = table.loc[table[c] != S.NO_INT].groupby(keys, sort=False, dropna=False)[c].agg(how)
        totals[c] = values.astype(np.int64).reindex(totals.index, fill_value=S.NO_INT)   # never through float
    rank_labels = np.asarray(ranks, dtype=np.int64)
    totals[RANKS] = has_key.sum(axis=1) if len(ranks) else 0
    totals[MIN_SELF_NS] = grid.min(axis=1)
    totals[MIN_RANK] = rank_labels[grid.argmin(axis=1)]
    totals[MAX_SELF_NS] = grid.max(axis=1)
    totals[MAX_RANK] = rank_labels[grid.argmax(axis=1)]
    out = totals.reset_index()
    return _finish(out, keys, summed, attrs, len(ranks), top, present)


def _finish(out: pd.DataFrame, keys, summed, attrs, rank_count: int, top: int | None,
            present: bool = False) -> pd.DataFrame:
    # a categorical key (summarize.keys_table(coded=True)) becomes text once it has one row per key
    out = out.astype({c: "str" for c in keys if isinstance(out[c].dtype, pd.CategoricalDtype)})
    for c in (RANKS, MIN_SELF_NS, MIN_RANK, MAX_SELF_NS, MAX_RANK):
        if c not in out.columns:
            out[c] = pd.Series([], dtype="int64")
    out = out.sort_values([S.SELF_NS] + keys, ascending=[False] + [True] * len(keys), kind="stable")
    if top is not None and len(out) > top:
        out = _fold(out, top, keys)
    total = int(out[S.SELF_NS].sum()) if len(out) else 0
    out[S.SELF_PCT] = 100.0 * out[S.SELF_NS] / total if total else 0.0
    if present:        # over the ranks that have the key (<other>: no such count, no mean)
        out[MEAN_SELF_NS] = np.where(out[RANKS] > 0, out[S.SELF_NS] // out[RANKS].clip(lower=1), S.NO_INT)
    else:
        out[MEAN_SELF_NS] = out[S.SELF_NS] // max(rank_count, 1)
    columns = keys + [RANKS] + summed + [S.SELF_PCT, MEAN_SELF_NS, MIN_SELF_NS, MIN_RANK, MAX_SELF_NS, MAX_RANK]
    out = out[columns].reset_index(drop=True)
    out = out.astype({c: "int64" for c in columns if c not in keys and c != S.SELF_PCT})
    out.attrs.update(attrs)
    out.attrs["across_ranks"] = rank_count
    return out


def _fold(out: pd.DataFrame, top: int, keys: list[str]) -> pd.DataFrame:
    kept, rest = out.iloc[:top], out.iloc[top:]
    other = {c: ("" if not _is_number(out[c]) else S.NO_INT) for c in out.columns}
    other[keys[0]] = OTHER
    for c in out.columns:
        if _is_number(out[c]) and c not in keys and c not in (MIN_RANK, MAX_RANK, MIN_SELF_NS, MAX_SELF_NS,
                                                                RANKS):
            other[c] = rest[c].sum() if not (rest[c] == S.NO_INT).all() else S.NO_INT
    return pd.concat([kept, pd.DataFrame([other])], ignore_index=True)


def _is_number(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
