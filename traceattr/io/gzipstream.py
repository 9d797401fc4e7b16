"""Open a trace file as a stream of inflated bytes, whatever its extension says.

gzip is recognised by its magic bytes, not by the name (torch's `traceName` and users' renames lie).
isal inflates about 4x faster than zlib; the stdlib `gzip` module is the fallback. Every read error
(truncated or corrupt gzip, I/O failure) becomes one TraceFormatError naming the file.
"""

from __future__ import annotations

import gzip
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from traceattr.errors import TraceFormatError

try:  # pragma: no cover - depends on the environment
    from isal import igzip as _gzip_impl
    from isal.igzip_lib import IsalError
except ImportError:  # pragma: no cover
    _gzip_impl = gzip
    IsalError = zlib.error

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 1 << 20           # 1 MB: the structs of one chunk stay in cache while columns are cut (8 MB ran 1.5x slower)

_READ_ERRORS = (EOFError, OSError, zlib.error, IsalError, ValueError)


def is_gzip(path: str | Path) -> bool:
    with open(path, "rb") as raw:
        return raw.read(2) == GZIP_MAGIC


@contextmanager
def open_inflated(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary stream of the file's JSON bytes (inflated when the file is gzip)."""
    try:
        stream: BinaryIO = _gzip_impl.open(path, "rb") if is_gzip(path) else open(path, "rb")
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        yield stream
    finally:
        stream.close()


def read_block(stream: BinaryIO, path: str | Path, size: int = BLOCK_BYTES) -> bytes:
    """Read up to `size` inflated bytes; b"" at the end. Broken gzip data raises TraceFormatError."""
    try:
        return stream.read(size)
    except _READ_ERRORS as exc:
        raise TraceFormatError(path, f"corrupt or truncated gzip data ({type(exc).__name__}: {exc})") from exc


def read_all(path: str | Path) -> bytes:
    """The whole inflated text (the fallback path and small files)."""
    with open_inflated(path) as stream:
        blocks = []
        while block := read_block(stream, path):
            blocks.append(block)
    return b"".join(blocks)
