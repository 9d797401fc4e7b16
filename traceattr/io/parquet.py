"""read_bounded: a parquet file of the store or the cache, read only if it decodes within the inflate limit.

Parquet compresses twice (encodings, then zstd), so a tiny file can decode to gigabytes: found by a fuzz
run, a 6 kB store partition whose every row named one dictionary entry of 20 MiB took 4.3 GB to read. Two
checks, before any value is materialized: the footer's uncompressed sizes (a plain column of huge values),
then, with each dictionary-encoded text column read as a dictionary (values stored once), the bytes its rows
would take as plain strings (a dictionary whose one huge entry every row repeats).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceattr.io.gzipstream import InflateLimit
from traceattr.io.limits import PARQUET_INFLATE_FLOOR


class Inflated(ValueError):
    """The file would decode to more than the inflate limit allows; the message says how much."""


def arrow_owned(blob: bytes) -> pa.Buffer:
    """`blob` copied into memory arrow owns. Arrow objects over a Python bytes object, kept alive by an
    error's traceback until the interpreter's end, aborted the process there ("terminate called": seen
    reading stores); a copy of a cache part costs far less than decoding its trace."""
    owned = pa.allocate_buffer(len(blob))
    if len(blob):           # an empty buffer's memoryview has no shape to assign to
        memoryview(owned).cast("B")[:] = memoryview(blob).cast("B")
    return owned


def read_bounded(source, size: int) -> pa.Table:
    """The table in `source` (a path or a pyarrow buffer reader) of `size` bytes on disk, as written (text
    columns plain, dictionary columns dictionaries); Inflated when it would decode past
    max(PARQUET_INFLATE_FLOOR, ratio x size) or the limit's bytes (--max-inflate)."""
    limit = InflateLimit.current()
    allowed = int(min(max(PARQUET_INFLATE_FLOOR, limit.max_ratio * size), limit.max_bytes))
    footer = pq.read_metadata(source)
    stored = sum(footer.row_group(g).column(c).total_uncompressed_size
                 for g in range(footer.num_row_groups) for c in range(footer.num_columns))
    _refuse(stored, size, allowed)
    # a column stored plainly has its full size in the footer (checked above); only a dictionary-encoded one
    # is read as a dictionary to count it (reading a plain one so would hash every value: 2x a cache read)
    encoded = {footer.schema.column(c).path for g in range(footer.num_row_groups)
               for c in range(footer.num_columns) if footer.row_group(g).column(c).has_dictionary_page}
    texts = [f.name for f in footer.schema.to_arrow_schema() if f.name in encoded and (
        pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_binary(f.type))]
    table = pq.ParquetFile(source, metadata=footer, read_dictionary=texts).read()
    _refuse(sum(_plain_bytes(column) for column in table.columns), size, allowed)
    # back to plain only the columns read as a dictionary here (one written as a dictionary stays one)
    plain = [pa.field(f.name, f.type.value_type, f.nullable, f.metadata) if f.name in texts else f
             for f in table.schema]
    return table.cast(pa.schema(plain, metadata=table.schema.metadata))


def _plain_bytes(column: pa.ChunkedArray) -> int:
    """What the column takes once its dictionary is decoded: each row's value bytes plus an offset."""
    if not pa.types.is_dictionary(column.type):
        return column.nbytes
    total = 0
    for chunk in column.chunks:
        lengths = pc.binary_length(chunk.dictionary).cast(pa.int64())
        total += int(pc.sum(lengths.take(chunk.indices)).as_py() or 0) + 8 * len(chunk)
    return total


def _refuse(decoded: int, size: int, allowed: int) -> None:
    if decoded > allowed:
        raise Inflated(f"it decodes to {decoded:,} bytes from {size:,} on disk, beyond the inflate limit "
                       f"({allowed:,} bytes; --max-inflate)")
