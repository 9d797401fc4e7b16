"""Columns on their way from the workers to the driver: numpy arrays, never an object per row or per file.

A map step's tables travel as dicts of numpy columns (numpy_columns), tagged with the file's position (its
rank and window are known only once every file is in: engine/placement.py), and wait on the driver in
Chunks: every COMPACT_EVERY files concatenated, integers narrowed, texts coded, so the driver holds a few
arrays whatever the number of files. placed_rows gives the positions their ranks and windows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from traceattr import schema as S


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


def concat_columns(items: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([item[name] for item in items]) for name in items[0]}


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

    def combine(self, other: "Chunks") -> None:
        """Take `other`'s columns after this one's (the files that came after)."""
        for name, dtype in other.dtypes.items():
            self.dtypes[name] = np.promote_types(self.dtypes.get(name, dtype), dtype)
        if self.tail:
            self.chunks.append({name: held(values) for name, values in concat_columns(self.tail).items()})
        self.chunks += other.chunks
        self.tail = list(other.tail)

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


def placed_rows(columns: dict[str, np.ndarray], rank_of: np.ndarray, window_of: np.ndarray) -> np.ndarray:
    """relabeled() in place, without the copy: the file positions in `columns`' rank column become ranks and
    windows; returns the rows of the files assemble() kept."""
    files = columns[S.RANK].astype(np.int64, copy=False)
    columns[S.RANK], columns[S.WINDOW] = rank_of[files], window_of[files]
    return np.flatnonzero(columns[S.RANK] >= 0)


def tag_columns(columns: dict[str, np.ndarray], index: int) -> dict[str, np.ndarray]:
    """A file's columns, owned (owned_columns), with the file's position where its rank goes (placed_rows
    puts the rank there once every file is in); columns without a rank column (summed over ranks already)
    come back owned only."""
    columns = owned_columns(columns)
    if S.RANK not in columns:
        return columns
    return {**columns, S.RANK: np.full(len(columns[S.RANK]), index, dtype=columns[S.RANK].dtype)}
