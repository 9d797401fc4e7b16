"""Open a trace file as a stream of inflated bytes, whatever its extension says.

gzip is recognised by its magic bytes, not by the name (torch's `traceName` and users' renames lie).
isal inflates about 4x faster than zlib; the stdlib `gzip` module is the fallback. Every read error
(truncated or corrupt gzip, I/O failure) becomes one TraceFormatError naming the file.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import threading
import zlib
from dataclasses import dataclass
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from traceattr.errors import TraceFormatError, TraceInputError
from traceattr.io.limits import MAX_EVENTS_DEFAULT
from traceattr.units import digits_int

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


@dataclass(frozen=True)
class InflateLimit:
    """How much one trace file may decode to. A compressed file inflates to at most `max_bytes`, and at
    most `max_ratio` times its size on disk: a gzip bomb (a few MB inflating to many GB) is refused as soon
    as it passes either bound, while it is being streamed, so memory never holds more than the streaming
    buffers. Any file holds at most `max_events` events (--max-events), counted as they stream in: memory
    grows per event, not per byte (a 2.3 MB gzip of 10 M tiny events is well inside the byte caps)."""

    max_bytes: int = 64 << 30
    max_ratio: float = 1000.0
    max_events: int = MAX_EVENTS_DEFAULT

    @classmethod
    def from_text(cls, text: str) -> "InflateLimit":
        """`64GiB`, `1000:1` or both (`64GiB,1000:1`); sizes take B, K/KB/KiB, M.., G.., T.. (powers of 1024)."""
        limit = cls()
        for token in (t.strip() for t in text.split(",")):
            if ":" in token:
                ratio, _, one = token.partition(":")
                value = _number(ratio)
                if one.strip() != "1" or value is None or not 1 <= value <= 1e9:
                    raise TraceInputError(f"--max-inflate: bad ratio {token!r} (expected N:1, e.g. 1000:1)")
                limit = dataclasses.replace(limit, max_ratio=value)
            else:
                match = _SIZE.fullmatch(token)
                value = _number(match.group(1)) if match else None
                if value is None:
                    raise TraceInputError(f"--max-inflate: bad size {token!r} (expected e.g. 64GiB or 500MB)")
                scale = 1024 ** "BKMGT".index((match.group(2) or "B")[0].upper())
                limit = dataclasses.replace(limit, max_bytes=int(min(value * scale, 2**62)))
        return limit

    @classmethod
    def from_env(cls) -> "InflateLimit":
        """The limits set by `--max-inflate` and `--max-events` (TRACEATTR_MAX_INFLATE and
        TRACEATTR_MAX_EVENTS in this process's environment)."""
        text = os.environ.get(MAX_INFLATE_ENV, "").strip()
        limit = cls.from_text(text) if text else cls()
        events = os.environ.get(MAX_EVENTS_ENV, "").strip()
        return dataclasses.replace(limit, max_events=max_events_from_text(events)) if events else limit

    @classmethod
    def current(cls) -> "InflateLimit":
        """The limit of the task running in this thread (applied_limit), else from_env(): a Dask worker's
        environment is not the driver's, so executor tasks carry the driver's limit with them."""
        return getattr(_TASK_LIMIT, "limit", None) or cls.from_env()

    def bytes_for(self, compressed_bytes: int) -> int:
        return int(min(self.max_bytes, max(compressed_bytes, 1) * self.max_ratio))


MAX_INFLATE_ENV = "TRACEATTR_MAX_INFLATE"
MAX_EVENTS_ENV = "TRACEATTR_MAX_EVENTS"


def max_events_from_text(text: str) -> int:
    """--max-events: a whole number of at least 1 (digits, `_` or `,` separators allowed)."""
    value = digits_int(text.strip().replace("_", "").replace(",", ""))
    if value is None or value < 1:
        raise TraceInputError(f"--max-events: expected a whole number of at least 1, got {text!r}")
    return value
_SIZE = re.compile(r"(?i)\s*([0-9.]+)\s*([bkmgt](?:i?b)?)?\s*")
_TASK_LIMIT = threading.local()     # per thread: a Dask worker may run several tasks at once


@contextmanager
def applied_limit(limit: InflateLimit) -> Iterator[None]:
    """Every gzip file opened in this thread meanwhile inflates within `limit` (open_inflated's default)."""
    previous = getattr(_TASK_LIMIT, "limit", None)
    _TASK_LIMIT.limit = limit
    try:
        yield
    finally:
        _TASK_LIMIT.limit = previous


@contextmanager
def events_limited(max_events: int | None) -> Iterator[None]:
    """The API's `max_events=` (--max-events): every file decoded meanwhile, here or on the workers the
    driver sends its limit to, holds at most that many events; None keeps the current limit."""
    if max_events is None:
        yield
        return
    if type(max_events) is not int:
        raise TypeError(f"max_events must be an int of at least 1, got {type(max_events).__name__}")
    if max_events < 1:
        raise TraceInputError(f"max_events must be at least 1, got {max_events}")
    with applied_limit(dataclasses.replace(InflateLimit.current(), max_events=max_events)):
        yield


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 and value == value and value != float("inf") else None


class _CappedStream:
    """A read-only stream that refuses to inflate past `limit` bytes (TraceFormatError naming the file)."""

    def __init__(self, stream: BinaryIO, path: str | Path, limit: int, compressed_bytes: int) -> None:
        self.stream, self.path, self.limit, self.compressed_bytes = stream, path, limit, compressed_bytes
        self.inflated = 0

    def read(self, size: int = -1) -> bytes:
        wanted = self.limit + 1 - self.inflated if size < 0 else min(size, self.limit + 1 - self.inflated)
        data = self.stream.read(max(wanted, 1))
        self.inflated += len(data)
        if self.inflated > self.limit:
            raise TraceFormatError(self.path, f"inflates to more than {self.limit:,} bytes from "
                                   f"{self.compressed_bytes:,} compressed (a gzip bomb?); raise the limit "
                                   "with --max-inflate SIZE or --max-inflate RATIO:1 if the file is genuine")
        return data

    def close(self) -> None:
        self.stream.close()


@contextmanager
def open_inflated(path: str | Path, limit: InflateLimit | None = None) -> Iterator[BinaryIO]:
    """Yield a binary stream of the file's JSON bytes (inflated when the file is gzip, within `limit`,
    by default the current task's, else the one --max-inflate set)."""
    raw = None
    try:
        raw = open(path, "rb")          # opened once: its first bytes say gzip or not, fstat its size
        gzipped = raw.read(len(GZIP_MAGIC)) == GZIP_MAGIC
        raw.seek(0)
        if gzipped:
            limit = limit or InflateLimit.current()
            compressed = os.fstat(raw.fileno()).st_size
            stream: BinaryIO = _CappedStream(_gzip_impl.open(raw, "rb"), path, limit.bytes_for(compressed),
                                             compressed)
        else:
            stream = raw
    except OSError as exc:
        if raw is not None:
            raw.close()
        raise TraceFormatError(path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        yield stream
    finally:
        stream.close()
        raw.close()                     # a gzip stream over a file object leaves the file open


def read_block(stream: BinaryIO, path: str | Path, size: int = BLOCK_BYTES) -> bytes:
    """Read up to `size` inflated bytes; b"" at the end. Broken gzip data raises TraceFormatError."""
    try:
        return stream.read(size)
    except _READ_ERRORS as exc:
        problem = _gzip_problem(path) or f"corrupt or truncated gzip data ({type(exc).__name__}: {exc})"
        raise TraceFormatError(path, problem) from exc


def _gzip_problem(path: str | Path) -> str | None:
    """What is wrong with a gzip file the reader failed on, said precisely: cut short, corrupt within a
    range of bytes, or whole but followed by bytes that are not gzip (read as 'truncated' by gzip, which
    took them for a next member). Inflates once more, streamed, its output dropped (on the error path
    only); None when the cause is elsewhere (a later gzip member)."""
    inflater, offset, chunk, inflated = zlib.decompressobj(16 + zlib.MAX_WBITS), 0, b"", 0
    try:
        with open(path, "rb") as file:
            limit = InflateLimit.current().bytes_for(os.fstat(file.fileno()).st_size)
            while not inflater.eof:
                offset += len(chunk)
                chunk = data = file.read(BLOCK_BYTES)
                if not chunk:
                    return "truncated gzip data: the file ends before the compressed stream does"
                while data and not inflater.eof:
                    inflated += len(inflater.decompress(data, BLOCK_BYTES))   # bounded output per call
                    data = inflater.unconsumed_tail
                    if inflated > limit:      # no second pass through a bomb's gigabytes
                        return None
            start = offset + len(chunk) - len(inflater.unused_data)      # where the stream ended
            after = inflater.unused_data + file.read(len(GZIP_MAGIC))
            trailing = os.fstat(file.fileno()).st_size - start
    except zlib.error as exc:
        return f"corrupt gzip data (in compressed bytes {offset:,} to {offset + len(chunk):,}: {exc})"
    except OSError:
        return None
    if not trailing or after.startswith(GZIP_MAGIC):
        return None       # whole, or another gzip member follows: the error is in that one
    return (f"trailing garbage: the gzip stream ends at byte {start:,}, and the {trailing:,} byte(s) after it "
            "are not gzip data (the compressed trace itself is whole)")
