"""`--top N`: keep the N largest rows of each (rank, device) and sum the rest into one `<other>` row,
so that a shortened table still adds up to busy time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.errors import TraceInputError

OTHER = "<other>"


def fold_below_top(table: pd.DataFrame, top: int, label: str, summed: list[str]) -> pd.DataFrame:
    """Rows come back in (rank, device) blocks, largest self_ns first, `<other>` last in each block.

    `label` is the column that says `<other>`; `summed` are the columns added up in the `<other>` row
    (the others get "" for text and -1 for integers, meaning "not applicable")."""
    table = table.sort_values([S.RANK, S.DEVICE, S.SELF_NS], ascending=[True, True, False], kind="stable")
    place = table.groupby([S.RANK, S.DEVICE], sort=False).cumcount()
    kept, rest = table[place < top], table[place >= top]
    if rest.empty:
        return table.reset_index(drop=True)
    other = rest.groupby([S.RANK, S.DEVICE], as_index=False)[summed].sum()
    for name in summed:      # a column that has no meaning here (all -1) stays -1 rather than a sum of -1s
        if (table[name] == S.NO_INT).all():
            other[name] = S.NO_INT
    if S.SELF_PCT in summed:     # as every row's: of its (rank, device)'s total, which its rows add up to
        whole = table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum()
        whole = whole.reindex(pd.MultiIndex.from_frame(other[[S.RANK, S.DEVICE]])).to_numpy(np.float64)
        part = other[S.SELF_NS].to_numpy(np.float64)
        other[S.SELF_PCT] = np.divide(100.0 * part, whole, out=np.zeros(len(part)), where=whole > 0)
    for name in table.columns.difference(other.columns):
        other[name] = OTHER if name == label else ("" if table[name].dtype.kind in "OSUT" or
                                                   str(table[name].dtype) == "str" else S.NO_INT)
    folded = pd.concat([kept.assign(_other=False), other[table.columns].assign(_other=True)],
                       ignore_index=True)
    folded = folded.sort_values([S.RANK, S.DEVICE, "_other", S.SELF_NS],
                                ascending=[True, True, True, False], kind="stable")
    return folded.drop(columns="_other").reset_index(drop=True).astype(table.dtypes.to_dict())


def check_top(top) -> None:
    """`top` is None or an int of at least 1 (not a bool, a float or a text): the caller's error otherwise."""

    if top is not None and (type(top) is bool or not isinstance(top, (int, np.integer)) or top < 1):
        raise TraceInputError(f"--top must be an integer of at least 1, got {top!r}")
