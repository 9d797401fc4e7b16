"""Summary tables of device time per kernel, category or rank, built on the exact sweep.

Every table adds up: Σ self_ns per (rank, device) == busy_ns of that device over all its windows, and
`--top` folds the rest into one `<other>` row per (rank, device) instead of dropping it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from traceattr import schema as S
from traceattr.attribution import columns as C
from traceattr.attribution.sweep import sweep
from traceattr.io.codes import dictionary_codes, numbers, row_codes
from traceattr.model.traceset import TraceSet

LEVELS = ("kernel", "category", "rank", "collective")

KERNEL_COLUMNS = [S.RANK, S.DEVICE, S.NAME, S.CATEGORY, S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS,
                  S.SELF_PCT]
CATEGORY_COLUMNS = [S.RANK, S.DEVICE, S.CATEGORY, S.COUNT, S.DURATION_NS, S.SELF_NS, S.EXPOSED_NS, S.SOLO_NS,
                    S.SELF_PCT]
RANK_COLUMNS = [S.RANK, S.DEVICE, S.WINDOW_NS, S.BUSY_NS, S.IDLE_NS, S.DEVICE_SPAN_NS, S.OVERLAP_NS, C.COMPUTE_NS,
                C.COMMUNICATION_NS, S.EXPOSED_COMMUNICATION_NS, C.MEMCPY_NS, C.MEMSET_NS, S.ACTIVITIES]
_TEXT_COLUMNS = {S.NAME, S.CATEGORY}
_FLOAT_COLUMNS = {S.SELF_PCT}


def empty_frame(columns: list[str]) -> pd.DataFrame:
    """A frame with no rows and the dtypes a filled one would have."""
    return pd.DataFrame({name: pd.Series([], dtype=_dtype(name)) for name in columns})


def _dtype(name: str):
    if name in _TEXT_COLUMNS:
        return "str"
    return "float64" if name in _FLOAT_COLUMNS else "int64"


def kernel_sums(traceset: TraceSet) -> pa.Table:
    """count, duration_ns, self_ns, solo_ns per (rank, device, name, category): the map step of the kernel
    and category tables (sums of one file, or of many, sum again exactly)."""
    keys = [S.RANK, S.DEVICE, S.NAME, S.CATEGORY]
    result = sweep(traceset)
    rows = traceset.device.select(keys).append_column(S.COUNT, pa.array(np.ones(len(result.self_ns), np.int64))) \
        .append_column(S.DURATION_NS, pa.array(result.duration_ns)) \
        .append_column(S.SELF_NS, pa.array(result.self_ns)).append_column(S.SOLO_NS, pa.array(result.solo_ns))
    return sum_by(rows, keys)


def kernel_sum_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """kernel_sums as numpy columns, what engine.columns.numpy_columns makes of that table (texts as object
    arrays), summed in numpy without the arrow tables between: the map step's, once per file (the tables
    and their columns' trip back to numpy cost a one-kernel file 0.7 ms)."""
    keys = [S.RANK, S.DEVICE, S.NAME, S.CATEGORY]
    device, result = traceset.device, sweep(traceset)
    values, codes = {}, {}
    for key in keys:
        column = device.column(key)
        if pa.types.is_integer(column.type):
            values[key] = codes[key] = numbers(column)
        else:           # texts by their dictionary codes, each distinct text one Python string
            dictionary, codes[key] = dictionary_codes(column)
            values[key] = dictionary.to_numpy(zero_copy_only=False).astype(object)
    grouping = _Grouping(row_codes(list(codes.values())))
    first = grouping.first
    out = {key: values[key][codes[key][first]] if values[key].dtype == object else values[key][first]
           for key in keys}
    return out | {S.COUNT: grouping.counts} | grouping.sums({
        S.DURATION_NS: result.duration_ns, S.SELF_NS: result.self_ns, S.SOLO_NS: result.solo_ns})


class _Grouping:
    """Rows grouped by dense group ids in first-seen order (row_codes'): each group's first row, its row
    count, and exact int64 sums per group, as sum_by adds them. Counted by bincount and ordered by one
    stable argsort; one group (a file's one kernel) is summed without a reordered copy of the rows."""

    def __init__(self, group: np.ndarray) -> None:
        self.counts = np.bincount(group).astype(np.int64) if len(group) else np.zeros(0, np.int64)
        self.order = np.argsort(group, kind="stable") if len(self.counts) > 1 else None
        self.starts = np.cumsum(self.counts) - self.counts
        # a stable sort puts each group's first row first
        self.first = self.order[self.starts] if self.order is not None else self.starts

    def sums(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.order is None:
            return {name: np.array([np.asarray(values).sum(dtype=np.int64)] if len(self.starts) else [], np.int64)
                    for name, values in columns.items()}
        return {name: np.add.reduceat(np.asarray(values, dtype=np.int64)[self.order], self.starts)
                for name, values in columns.items()}


def sum_by(rows: pa.Table, keys: list[str]) -> pa.Table:
    """Exact int64 sums of count, duration_ns, self_ns and solo_ns per `keys`, the groups in first-seen
    order, the keys in their own types. In numpy over integer codes: arrow's
    group_by runs an Acero plan whose first use costs a process ~6 MiB, and the driver's per-rank kernel
    table at 1024 ranks (16 k rows) held 9 MiB more after it (benchmarks/RESULTS.md, session 11)."""
    summed = [S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS]
    codes = []
    for key in keys:        # texts by their dictionary codes: a code per row, never a Python string
        column = rows.column(key)
        text = pa.types.is_dictionary(column.type) or pa.types.is_string(column.type) \
            or pa.types.is_large_string(column.type)
        codes.append(dictionary_codes(column)[1] if text else np.asarray(column.to_numpy()))
    grouping = _Grouping(row_codes(codes))
    out = {key: rows.column(key).take(pa.array(grouping.first)) for key in keys}
    sums = grouping.sums({name: rows.column(name).to_numpy() for name in summed})
    return pa.table(out | {name: pa.array(values) for name, values in sums.items()})


def keys_table(sums: pa.Table, busy: pd.Series, keys: list[str], columns: list[str],
               coded: bool = False) -> pd.DataFrame:
    """The kernel or category table from kernel_sums rows (of one TraceSet, or merged over files) and
    busy_ns per (rank, device). `coded`: dictionary-encoded text columns of `sums` stay categorical (for
    across_ranks, which reduces the rows of every rank to a few: a text per row was 3 MB at 1024 ranks)."""
    if sums.num_rows == 0:
        return empty_frame(columns)
    table = sum_by(sums, keys)
    table = table.take(pa.array(_ranked(table, keys)))      # sorted in arrow, texts still coded: sorting
    # the pandas frame took a copy of every text (16 k per-rank rows at 1024 ranks: +5 MiB on the driver)
    if not coded:      # texts as plain strings in arrow: pandas' categorical -> str costs twice as much
        table = pa.table({name: column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column
                          for name, column in zip(table.column_names, table.columns)})
    table = table.to_pandas()
    table[S.RANK] = table[S.RANK].astype("int64")
    busy_of_row = busy.reindex(pd.MultiIndex.from_frame(table[[S.RANK, S.DEVICE]])).to_numpy()
    table[S.SELF_PCT] = _percent(table[S.SELF_NS].to_numpy(), busy_of_row)
    table = table[columns]
    if coded:
        return table.astype({name: _dtype(name) for name in table.columns
                             if not isinstance(table[name].dtype, pd.CategoricalDtype)})
    return _typed(table)


def with_exposed(table: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """A category table (keys_table, without exposed_ns) with exposed_ns in its CATEGORY_COLUMNS place: per
    (rank, device) and category, the sweep's exposed time of that category (C.EXPOSED_NS) summed over windows."""
    exposed = np.zeros(len(table), np.int64)
    if len(table) and len(groups):
        per_device = groups.groupby([S.RANK, S.DEVICE])[list(C.EXPOSED_NS.values())].sum()
        rows = per_device.reindex(pd.MultiIndex.from_arrays([table[S.RANK].to_numpy(np.int64),
                                                             table[S.DEVICE].to_numpy(np.int64)]), fill_value=0)
        categories = table[S.CATEGORY].astype(str).to_numpy()
        for name, column in C.EXPOSED_NS.items():
            hit = categories == name
            exposed[hit] = rows[column].to_numpy(np.int64)[hit]
    table = table.copy()
    table.insert(CATEGORY_COLUMNS.index(S.EXPOSED_NS), S.EXPOSED_NS, exposed)
    return table


def _ranked(table: pa.Table, keys: list[str]) -> np.ndarray:
    """Row order of a keys table: self_ns descending, then rank, device and the text keys ascending (texts
    by code point, as pandas and Python sort them; a null, in a table built by hand, last). Each key row is
    unique, so the order is total."""
    texts = []
    for key in keys[2:]:
        dictionary, codes = dictionary_codes(table.column(key))
        values = dictionary.to_pylist()     # the distinct texts: few
        place = np.empty(len(values), np.int64)
        place[sorted(range(len(values)), key=lambda i: (values[i] is None, values[i] or ""))] = np.arange(len(values))
        texts.append(place[codes])
    numbers = [np.asarray(table.column(key).to_numpy(), dtype=np.int64) for key in (S.RANK, S.DEVICE)]
    self_ns = np.asarray(table.column(S.SELF_NS).to_numpy(), dtype=np.int64)
    return np.lexsort([*reversed(texts), *reversed(numbers), -self_ns])


def _percent(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    whole = whole.astype(np.float64)
    return np.divide(100.0 * part, whole, out=np.zeros(len(part)), where=whole > 0)


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    return table.astype({name: _dtype(name) for name in table.columns})


def _rank_windows(files: pa.Table) -> pd.Series:
    lengths = pd.DataFrame({
        S.RANK: np.asarray(files.column(S.RANK).to_numpy(), dtype=np.int64),
        S.WINDOW_NS: (np.asarray(files.column(S.END_NS).to_numpy(), dtype=np.int64)
                      - np.asarray(files.column(S.START_NS).to_numpy(), dtype=np.int64))})
    return lengths.groupby(S.RANK)[S.WINDOW_NS].sum()


def device_span_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """device_span_ns per (rank, device): per window, first activity start to last activity end (the span
    HTA and TraceLens measure idle over), summed over windows like window_ns; numpy columns rank, device,
    device_span_ns, by rank then device, from the sweep's (rank, window, device) groups: the map step's,
    once per file (an arrow group-by and its frames cost a one-kernel file 2-3 ms)."""
    result = sweep(traceset)
    rank, device = result.columns[S.RANK], result.columns[S.DEVICE]
    device_rows = traceset.device
    first = np.full(len(rank), np.iinfo(np.int64).max)
    last = np.full(len(rank), np.iinfo(np.int64).min)
    np.minimum.at(first, result.group_id, np.asarray(device_rows.column(S.START_NS).to_numpy(), np.int64))
    np.maximum.at(last, result.group_id, np.asarray(device_rows.column(S.END_NS).to_numpy(), np.int64))
    order = np.lexsort((device, rank))          # the windows of a (rank, device) next to each other
    rank, device, span = rank[order], device[order], (last - first)[order]
    starts = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (device[1:] != device[:-1])]) if len(rank) \
        else np.zeros(0, np.int64)
    return {S.RANK: rank[starts], S.DEVICE: device[starts],
            S.DEVICE_SPAN_NS: np.add.reduceat(span, starts) if len(span) else np.zeros(0, np.int64)}


def rank_table(groups: pd.DataFrame, files: pa.Table, spans: pd.Series | None = None) -> pd.DataFrame:
    """The rank table from the sweep's (rank, window, device) groups, the files table and device_span_ns per
    (rank, device) (device_span_columns, summed over files): window lengths and spans are summed per rank
    over its files, so it reduces exactly from per-file parts (spans None: device_span_ns 0, for callers
    that read other columns)."""
    windows = _rank_windows(files)
    summed_columns = [S.BUSY_NS, S.OVERLAP_NS, C.COMPUTE_NS, C.COMMUNICATION_NS,
                      S.EXPOSED_COMMUNICATION_NS, C.MEMCPY_NS, C.MEMSET_NS, S.ACTIVITIES]
    per_device = groups.groupby([S.RANK, S.DEVICE], as_index=False)[summed_columns].sum()
    # ranks with no device activity (CPU-only runs) still get a row: device -1, zero busy
    idle_ranks = sorted(set(windows.index) - set(per_device[S.RANK]))
    if idle_ranks:
        filler = pd.DataFrame({S.RANK: idle_ranks, S.DEVICE: S.NO_INT,
                               **{name: 0 for name in summed_columns}})
        per_device = pd.concat([per_device, filler], ignore_index=True) if len(per_device) else filler
    if per_device.empty:
        return empty_frame(RANK_COLUMNS)
    per_device[S.WINDOW_NS] = windows.reindex(per_device[S.RANK]).fillna(0).to_numpy(dtype=np.int64)
    per_device[S.IDLE_NS] = per_device[S.WINDOW_NS] - per_device[S.BUSY_NS]
    spans = spans if spans is not None else pd.Series(dtype="int64")
    per_device[S.DEVICE_SPAN_NS] = spans.reindex(
        pd.MultiIndex.from_frame(per_device[[S.RANK, S.DEVICE]])).fillna(0).to_numpy(dtype=np.int64)
    per_device = per_device.sort_values([S.RANK, S.DEVICE], kind="stable").reset_index(drop=True)
    return _typed(per_device[RANK_COLUMNS])
