"""Per-file lookup tables that turn repeated event values into small integer codes in one C-level pass.

Names, categories, phases and pids repeat heavily (the 1 GB benchmark has 660 distinct names over 2 M
complete events), so the per-event work is one dict lookup inside `np.fromiter`, and arrow converts each
distinct string once at the end instead of once per event (`pa.array` of Python strings cost more than the
JSON decode itself).
"""

from __future__ import annotations

import functools
import zlib
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceattr.io.limits import INT64_MAX, checked_int


def lookup(table: dict, add: Callable[[object], object], getter: Callable, items: list,
           dtype: type) -> np.ndarray:
    """`table[getter(item)]` for every item as a numpy array; values missing from `table` are added
    with `add(value)` first (the rare path: most chunks bring no new values)."""
    try:
        return np.fromiter(map(table.__getitem__, map(getter, items)), dtype, len(items))
    except KeyError:
        for value in set(map(getter, items)).difference(table):
            add(value)
        return np.fromiter(map(table.__getitem__, map(getter, items)), dtype, len(items))


class Interner:
    """Strings -> int32 codes (indices into `values`), stable for the whole file."""

    def __init__(self, *seed: str) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []
        for value in seed:
            self.add(value)

    def add(self, value: str) -> int:
        code = self.index.get(value)
        if code is None:
            code = self.index[value] = len(self.values)
            self.values.append(value)
        return code

    def codes(self, getter: Callable, items: list) -> np.ndarray:
        return lookup(self.index, self.add, getter, items, np.int32)

    def arrow(self) -> pa.Array:
        return arrow_strings(self.values)


# below every integer pid/tid a trace may hold: the ids of string pids/tids, which so never meet an integer's
# (an integer pid equal to a string's crc id merged two devices' busy time)
STRING_ROW_IDS_BELOW = -(1 << 62)


class RowIds:
    """pid/tid values (int, or strings such as "Spans", "GPU 0 Counters") -> int64 ids. Integers keep
    their value (from STRING_ROW_IDS_BELOW up); a string gets a stable id below that from its crc (same
    string, same id). The dict keeps 1 and "1" apart, so a numeric string never passes as an int."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.ids: dict[int | str, int] = {}
        self._taken: set[int] = set()

    def add(self, value: int | str) -> int:
        known = self.ids.get(value)
        if known is not None:                # seen before (the C scanner hands over strings msgspec met too)
            return known
        if type(value) is int:
            checked_int(self.path, "a pid or tid", value, STRING_ROW_IDS_BELOW, INT64_MAX)
            self.ids[value] = value
            return value
        found = STRING_ROW_IDS_BELOW - 1 - zlib.crc32(value.encode("utf-8", "surrogateescape")) % (1 << 31)
        while found in self._taken:          # a crc collision: keep ids distinct within the file
            found -= 1
        self.ids[value] = found
        self._taken.add(found)
        return found

    def column(self, getter: Callable, items: list) -> np.ndarray:
        return lookup(self.ids, self.add, getter, items, np.int64)


# `pa.array` imports pandas on first use (about 0.5 s); building arrays from buffers does not, so a
# decode-only process (a worker, `convert`) never pays for pandas.

NUMPY_TYPES = {pa.int64(): np.int64, pa.int32(): np.int32}     # arrow -> numpy, the fixed-width types of the tables


def arrow_numbers(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A zero-copy arrow array over a numpy array of the matching fixed-width type (no nulls)."""
    values = np.ascontiguousarray(values, dtype=NUMPY_TYPES[type_])
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def arrow_strings(values: list[str]) -> pa.Array:
    """A string array from a (short) list of distinct Python strings (`[""]`: the one shared ONLY_EMPTY,
    which a file's interners of collectives, process groups and shapes hold when it has none)."""
    if values == [""]:
        return ONLY_EMPTY
    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    if offsets[-1] >= 2**31:          # beyond 32-bit offsets: let arrow decide
        return pa.array(values, pa.string())
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))])


def empty_texts(rows: int) -> pa.Array:
    """`rows` empty strings: what ONLY_EMPTY.take(codes) gives, without a compute call (8 us, eleven times
    a one-kernel file's decode)."""
    offsets = pa.py_buffer(np.zeros(rows + 1, np.int32))
    return pa.Array.from_buffers(pa.string(), rows, [None, offsets, pa.py_buffer(b"")])


ONLY_EMPTY = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.zeros(2, np.int32)), pa.py_buffer(b"")])


def dictionary_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column dictionary-encoded chunk by chunk, every chunk on one dictionary of the distinct values in
    first-seen order: what `column.combine_chunks().dictionary_encode()` gives, without the combined copy of
    the column (the kernel names of a 202 MB trace are 14 MB, copied at the map step's memory peak). A
    null is a value of the dictionary too (decoded tables hold none; tables built by hand may). A dictionary
    column is returned as it is."""
    if column.num_chunks > 1 and column.null_count == 0 and not pa.types.is_dictionary(column.type) and \
            pc.count_distinct(column).as_py() == 1:
        return _one_value_coded(column)
    encoded = column.dictionary_encode(null_encoding="encode")
    chunks = encoded.chunks     # arrow gives every chunk the dictionary of the whole column
    if chunks and not all(chunk.dictionary.equals(chunks[-1].dictionary) for chunk in chunks[:-1]):
        return pa.chunked_array([column.combine_chunks().dictionary_encode(null_encoding="encode")])
    return encoded


def _one_value_coded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column of one value, dictionary-encoded as chunks that share one array of zero indices (the decoder
    keeps such a column as chunks of one shared array: encoded chunk by chunk, 4 bytes a row)."""
    rows = 1 << 16
    one = pa.DictionaryArray.from_arrays(arrow_numbers(np.zeros(min(rows, len(column)), np.int32), pa.int32()),
                                         column.chunk(0).slice(0, 1))
    whole, rest = divmod(len(column), rows)
    return pa.chunked_array([one] * whole + ([one.slice(0, rest)] if rest else []), one.type)


def pair_codes(codes: np.ndarray, column: np.ndarray) -> np.ndarray:
    """Dense codes (in order of first appearance) of the (codes, column) pairs; `codes` dense, so the
    combined value stays below len**2. Folding key columns in one at a time gives each distinct row of
    keys a code without a Python tuple per row."""
    import pandas as pd         # the decoder (this module's other users) runs without pandas

    column_codes = pd.factorize(column)[0].astype(np.int64)
    return pd.factorize(codes.astype(np.int64) * (int(column_codes.max(initial=-1)) + 1) + column_codes)[0]


def row_codes(columns: list[np.ndarray]) -> np.ndarray:
    """Dense codes (in order of first appearance) of the rows of several integer columns of one length: what
    folding them in one at a time with pair_codes gives, with a single factorize when their value ranges
    multiply within int64 (a factorize cost a small file's map step ~40 µs a column)."""
    import pandas as pd         # the decoder (this module's other users) runs without pandas

    rows = len(columns[0]) if columns else 0
    combined, radix = np.zeros(rows, np.int64), 1
    if all(len(column) == 0 or column.strides == (0,) or column.min() == column.max() for column in columns):
        return combined          # one row of keys (a file's one kernel on one device): zeros, never written
    for column in columns if rows else ():
        low, high = int(column.min()), int(column.max())
        radix *= high - low + 1
        if radix >= 2**62:      # the ranges multiply beyond int64: a pair at a time
            return functools.reduce(pair_codes, columns, np.zeros(rows, np.int64))
        if high > low:
            combined *= high - low + 1
            combined += column.astype(np.int64) - low
    return pd.factorize(combined)[0].astype(np.int64, copy=False)


def text_codes(values, sort: bool = False) -> tuple[np.ndarray, list[str]]:
    """(int64 code per value; the distinct texts, in order of first appearance or with `sort` sorted), -1 for
    a value that is not a str (None, NaN), as pandas' factorize gives. By a dict: Python keeps a str's hash,
    where pandas' factorize hashes each row's text again. A `Process Group Ranks` text lists every rank of
    its group (5 KB at 1024 ranks, 59 KB at 10 k): 287 k communication rows sharing one such text take 20 s
    to factorize, 0.02 s by a dict (benchmarks/bench_alignment.py)."""
    table: dict[str, int] = {}
    values = np.asarray(values, dtype=object).tolist()
    codes = np.fromiter((table.setdefault(v, len(table)) if isinstance(v, str) else -1 for v in values),
                        np.int64, len(values))
    texts = list(table)
    if sort and texts:
        order = sorted(range(len(texts)), key=texts.__getitem__)
        position = np.empty(len(texts) + 1, np.int64)
        position[order] = np.arange(len(texts))
        position[-1] = -1                   # code -1 stays -1
        codes, texts = position[codes], [texts[i] for i in order]
    return codes, texts


def shared_texts(values) -> np.ndarray:
    """`values` (object) with each repeated text as one object, the first seen (pickled once, held once);
    values that are not a str are kept as they are. By a dict, for the reason text_codes gives."""
    first: dict[str, str] = {}
    values = np.asarray(values, dtype=object).tolist()
    return np.fromiter((first.setdefault(v, v) if isinstance(v, str) else v for v in values), object, len(values))


def dictionary_codes(column: pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """(distinct values in first-seen order, int64 code per row) of a column (dictionary_column's)."""
    chunks = dictionary_column(column).chunks
    if not chunks:
        return pa.array([], column.type), np.zeros(0, np.int64)
    dictionary = chunks[-1].dictionary
    if len(dictionary) == 1:     # one distinct value: zeros from calloc, whose pages are never written
        return dictionary, np.zeros(len(column), np.int64)
    codes = [np.asarray(chunk.indices.to_numpy(zero_copy_only=False), dtype=np.int64) for chunk in chunks]
    return dictionary, codes[0] if len(codes) == 1 else np.concatenate(codes)


def numbers(column: pa.ChunkedArray, dtype=None) -> np.ndarray:
    """A numeric column as numpy (in `dtype`, else its own type): a view of a column of one chunk, a read-only
    broadcast of a column of one value (the decoder keeps such columns as chunks of one shared array: 8 bytes
    a row if read whole), else a copy."""
    if column.num_chunks > 1 and len(column) > 1:
        low, high = (value.as_py() for value in pc.min_max(column).values())
        if low == high and low is not None:
            return np.broadcast_to(np.asarray(low, dtype or column.type.to_pandas_dtype()), len(column))
    return np.asarray(column.to_numpy(), dtype=dtype)
