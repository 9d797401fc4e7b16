"""Stream the `traceEvents` array of one trace in typed chunks, never holding the whole text.

The inflated text is read in blocks. The header (keys before `traceEvents`) is located by finding the key
and proving the text before it is a complete JSON object prefix. The array is then cut at element
boundaries (`}` `,` `{`), and each chunk is decoded as `[chunk]` into typed structs. Each chunk starts at a
true element start, so a cut that falls inside an element (a `},{` inside a string or nested args) makes
`[chunk]` invalid JSON: it can never pass silently. A failed cut is retried at an earlier boundary (before
the byte msgspec complains about); when the buffer holds no usable boundary, more text is read. The end of
the file is decoded as `{"traceEvents":[` + rest, which also yields the keys written after the array
(`baseTimeNanoseconds`, `distributedInfo`, ...). Small files and texts the splitter cannot find its way
through take the whole-document path, up to MAX_PENDING_BYTES: no path ever holds the whole inflated text of
a large file. Errors name the byte offset in the (inflated) text; nesting too deep for the decoder is a
clean error; a second `traceEvents` key after a streamed array is refused (a JSON reader would keep only
the last one, but the first array's events are already delivered).
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import BinaryIO, Callable

import msgspec
from msgspec import Raw

from traceattr.errors import TraceFormatError
from traceattr.io.events import AT_INDEX, EventsDecoder
from traceattr.io.gzipstream import BLOCK_BYTES, InflateLimit, open_inflated, read_block

EventsCallback = Callable[[list, int], None]   # (events of one chunk, index of its first event)

TRACE_EVENTS = "traceEvents"
_KEY = b'"traceEvents"'
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_KEY_COLON = re.compile(rb"\s*:\s*")
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
_HEADER_LIMIT_BLOCKS = 8        # give up looking for the key after this many blocks: whole-document path
_CUT_TRIES = 8                 # decodes per cut before reading more (each costs up to the buffer's length)
MAX_PENDING_BYTES = 64 << 20   # text held at once without an event boundary (or before `traceEvents`)
_HEADER_DECODER = msgspec.json.Decoder(dict[str, Raw])
_RAW_DECODER = msgspec.json.Decoder(Raw)


class NoTraceEventsError(TraceFormatError):
    """Valid JSON without a `traceEvents` key (a manifest, a config): not a trace; load skips it."""


class TextHead:
    """The first `size` bytes of a file's text, kept as the stream reads them: a look at the text after the
    decode (io/decode.py's era test) without opening the file again."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._parts: list[bytes] = []
        self._held = 0

    def add(self, block: bytes) -> None:
        if self._held < self.size and block:
            part = block[:self.size - self._held]      # the block itself (no copy) while it fits
            self._parts.append(part)
            self._held += len(part)

    @property
    def text(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    def __init__(self, stream: BinaryIO, path: str, block_bytes: int, head: TextHead | None = None) -> None:
        self.stream, self.path, self.block_bytes, self.head = stream, path, block_bytes, head
        self.eof = False
        self.offset = 0     # bytes of JSON text read so far

    def read(self) -> bytes:
        """One block (short only at the end of the stream)."""
        parts, wanted = [], self.block_bytes
        while wanted > 0 and not self.eof:
            data = read_block(self.stream, self.path, wanted)
            if not data:
                self.eof = True
            parts.append(data)
            wanted -= len(data)
        data = b"".join(parts)
        if self.head is not None:
            self.head.add(data)
        if self.offset == 0 and data.startswith(_UTF8_BOM):
            data = data[len(_UTF8_BOM):]   # Windows tools write one; JSON readers skip it (RFC 8259 §8.1)
        self.offset += len(data)
        return data

    def _names_key(self, parts: list[bytes]) -> bool:
        """Whether `"traceEvents"` occurs in `parts` or in the rest of the stream (read a block at a time,
        never held): a document without it is not a trace, whatever its size."""
        if any(_KEY in part for part in parts):
            return True
        tail = parts[-1][-len(_KEY):]
        while not self.eof:
            block = self.read()
            if _KEY in tail + block[:len(_KEY)] or _KEY in block:
                return True
            tail = block[-len(_KEY):]
        return False

    def read_up_to(self, text: bytes, limit: int, what: str) -> bytes:
        """`text` plus the rest of the stream, refused once more than `limit` bytes would be held."""
        parts, held = [text], len(text)
        while not self.eof:
            if held > limit:
                at = self.offset
                if text.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[") and not self._names_key(parts):
                    # a big JSON document beside the traces (a dataset, a config): skipped like a small one
                    raise NoTraceEventsError(self.path, f"JSON without traceEvents (over {limit >> 20} MB; "
                                                        "not a trace)")
                raise TraceFormatError(self.path, f"{what} within {limit >> 20} MB (byte {at}): "
                                       "not a trace this reader can stream")
            parts.append(self.read())
            held += len(parts[-1])
        return b"".join(parts)


def stream_events(path: str | Path, on_events: EventsCallback, *, decoder: EventsDecoder | None = None,
                  block_bytes: int = BLOCK_BYTES, limit: InflateLimit | None = None,
                  head: TextHead | None = None) -> dict[str, Raw]:
    """Feed every chunk of `traceEvents` to `on_events`; return the other top-level keys (raw JSON).
    `decoder` (float timestamps by default) also counts args of unexpected types (EventsDecoder); `head`
    keeps the first bytes of the text read."""
    path = str(path)
    decoder = decoder or EventsDecoder(exact_decimal=False)
    with open_inflated(path, limit) as stream:
        reader = _Reader(stream, path, block_bytes, head)
        text = reader.read()
        if reader.eof:
            return decode_whole(path, text, decoder, on_events)
        header, text, array_at = _find_events_array(reader, text)
        if header is None:
            text = reader.read_up_to(text, MAX_PENDING_BYTES, "no traceEvents array found")
            return decode_whole(path, text, decoder, on_events)
        buf, buf_offset = bytearray(memoryview(text)[array_at - 1:]), array_at - 1
        del text
        header.update(_split_array(reader, buf, buf_offset, decoder, on_events))
    return header


def decode_whole(path: str, text: bytes, decoder: EventsDecoder,
                 on_events: EventsCallback) -> dict[str, Raw]:
    """Whole-document typed decode: the path for small files and unusual layouts."""
    if not text.strip():
        raise TraceFormatError(path, "empty file")
    try:
        document = _HEADER_DECODER.decode(text)
    except msgspec.ValidationError as exc:
        kind = _json_kind(text)
        if kind is not None:   # valid JSON, just not an object (TraceLens's execution_details.json is an array)
            raise NoTraceEventsError(path, f"valid JSON {kind} without traceEvents (not a trace)") from exc
        raise TraceFormatError(path, f"not a JSON object at the top level ({exc})") from exc
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"not valid JSON: {_describe(exc, 0, text, 0)}{_looks_like(text)}") from exc
    except RecursionError:
        raise TraceFormatError(path, "JSON nested too deeply to decode") from None
    raw_events = document.pop(TRACE_EVENTS, None)
    if raw_events is None:
        raise NoTraceEventsError(path, "valid JSON without traceEvents (not a trace)")
    if not bytes(raw_events).lstrip().startswith(b"["):
        raise TraceFormatError(path, "traceEvents is not a list")
    try:
        events = decoder.decode(raw_events, 0)
    except msgspec.DecodeError as exc:     # only now find where the array starts, for the byte offset
        events_text = bytes(raw_events)
        raise TraceFormatError(path, _describe(exc, 0, events_text, max(text.find(events_text), 0))) from exc
    except RecursionError:
        raise TraceFormatError(path, "JSON nested too deeply to decode (in traceEvents)") from None
    on_events(events, 0)
    return document


_JSON_KINDS = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}


def _json_kind(text: bytes) -> str | None:
    """What valid JSON that is not an object holds ("array", "number", ...); None when it is not valid JSON."""
    is_array = text.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["
    try:   # an array's elements stay raw bytes: validated, never built as Python objects
        value = msgspec.json.decode(text, type=list[Raw]) if is_array else msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):      # an element's depth is checked too
        return None
    return _JSON_KINDS.get(type(value), "value")


def _find_events_array(reader: _Reader, text: bytes) -> tuple[dict[str, Raw] | None, bytes, int]:
    """(header keys, all text read so far, offset just after the array's `[`); header None when the
    key cannot be placed (the caller then decodes the whole document)."""
    start = 0
    while True:
        key_at = text.find(_KEY, start)
        if key_at < 0:
            if reader.eof or len(text) > _HEADER_LIMIT_BLOCKS * reader.block_bytes:
                return None, text, -1
            start = max(0, len(text) - len(_KEY))
            text += reader.read()
            continue
        header = _decode_header(text[:key_at])
        if header is None:          # the key sits inside a string or a nested object: look further
            start = key_at + 1
            continue
        after = key_at + len(_KEY)
        while len(text) - after < 64 and not reader.eof:
            text += reader.read()
        colon = _KEY_COLON.match(text, after)
        if colon is None or colon.end() >= len(text):
            return None, text, -1
        if text[colon.end():colon.end() + 1] != b"[":
            raise TraceFormatError(reader.path, "traceEvents is not a list")
        return header, text, colon.end() + 1


def _decode_header(prefix: bytes) -> dict[str, Raw] | None:
    body = prefix.rstrip()
    if body.endswith(b","):
        body = body[:-1]
    if not body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return None
    try:
        return _HEADER_DECODER.decode(body + b"}")
    except (msgspec.DecodeError, RecursionError):
        return None


def _split_array(reader: _Reader, buf: bytearray, buf_offset: int, decoder: EventsDecoder,
                 on_events: EventsCallback) -> dict[str, Raw]:
    """`buf[0]` is the byte before the next element (the array's `[` or a separator): each chunk is
    decoded in place as `[` + elements + `]` by overwriting that byte and the one after the cut, so the
    text is never copied for decoding."""
    index = 0
    stuck = False              # the last cut found no usable boundary: read more before trying again
    floor = 1                  # boundaries before this position are known not to work
    while True:
        if not reader.eof and (len(buf) < reader.block_bytes or stuck):
            if len(buf) > MAX_PENDING_BYTES:
                raise TraceFormatError(reader.path, f"no event boundary in {len(buf) >> 20} MB from byte "
                                       f"{buf_offset + 1} (malformed JSON, or one event too large to stream)")
            buf += reader.read()
        if reader.eof:
            return _decode_tail(reader.path, buf, buf_offset, decoder, on_events, index)
        cut = _cut_chunk(reader.path, buf, buf_offset, decoder, index, floor)
        stuck = cut is None
        if stuck:   # every boundary so far failed: after the next read, try only the new ones (linear growth)
            floor = max(len(buf) - 2, 1)
            continue
        floor = 1
        events, next_start = cut
        on_events(events, index)
        index += len(events)
        buf_offset += next_start - 1
        del buf[:next_start - 1]          # keep one byte before the next element as the placeholder


def _cut_chunk(path: str, buf: bytearray, buf_offset: int, decoder: EventsDecoder,
               index: int, floor: int = 1) -> tuple[list, int] | None:
    """Decode the longest run of elements in `buf` that ends at a true element boundary at or after
    `floor`; returns the events and the position of the next element's `{`, or None when no boundary
    works. At most _CUT_TRIES decodes: a cut inside a long string fails at every boundary in it."""
    buf[0] = 0x5B                          # "["
    limit = len(buf)
    malformed = None     # an error before the cut: the text itself is broken there, whatever comes after
    for _ in range(_CUT_TRIES):
        close = _last_boundary(buf, limit, floor)
        if close < floor:
            if malformed is not None and close < 1:      # broken inside the first element: no cut can help
                raise TraceFormatError(path, f"malformed JSON: {malformed}")
            return None
        after = buf[close + 1]
        buf[close + 1] = 0x5D              # "]" over the separator, restored below
        try:
            # the slice released here too: a thread holding this frame (Dask's profiler samples every
            # worker thread's frames) kept it exported, and `del buf[...]` then raised BufferError
            with memoryview(buf) as view, view[:close + 2] as chunk:
                events = decoder.decode(chunk, index)
        except msgspec.ValidationError as exc:
            raise TraceFormatError(path, _describe(exc, index, buf, buf_offset)) from exc
        except msgspec.DecodeError as exc:
            error_byte = _error_byte(exc)
            if error_byte is None and _bad_utf8_at(buf, close + 2) is not None:   # no cut can mend it
                raise TraceFormatError(path, _describe(exc, index, buf, buf_offset)) from exc
            # an error before our "]" (msgspec counts from 1) is in the text itself, unless the array ended
            # before the cut (trailing characters: the cut is in the keys after it)
            if error_byte is not None and error_byte <= close and "trailing characters" not in str(exc):
                malformed = _describe(exc, index, buf, buf_offset)   # text only: exc pins `view`
            limit = close if error_byte is None else min(close, error_byte)
            continue
        except RecursionError:
            raise TraceFormatError(path, f"JSON nested too deeply to decode (events from "
                                         f"traceEvents[{index}], byte {buf_offset})") from None
        finally:
            buf[close + 1] = after
        return events, _BOUNDARY.match(buf, close).end() - 1
    return None


def _last_boundary(buf: bytes, limit: int, floor: int = 0) -> int:
    """Position of the `}` of the last `}` `,` `{` in buf[floor:limit], or -1."""
    while True:
        close = buf.rfind(b"}", floor, limit)
        if close < 0 or _BOUNDARY.match(buf, close):
            return close
        limit = close


def _decode_tail(path: str, buf: bytearray, buf_offset: int, decoder: EventsDecoder,
                  on_events: EventsCallback, index: int) -> dict[str, Raw]:
    """The last elements, the closing `]` and the keys after the array (returned, raw)."""
    buf[0] = 0x5B                          # "[" over the placeholder byte
    end = _array_end(path, buf, buf_offset, index)
    rest = bytes(buf[end:]).lstrip()
    try:
        if not rest.startswith((b",", b"}")):
            raise msgspec.DecodeError("expected ',' or '}' after the traceEvents array")
        keys = _HEADER_DECODER.decode(b"{" + (rest[1:] if rest.startswith(b",") else rest))
    except RecursionError:
        raise TraceFormatError(path, "JSON nested too deeply to decode (after traceEvents)") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"malformed JSON after the traceEvents array (byte "
                                     f"{buf_offset + end}): {exc}") from exc
    if TRACE_EVENTS in keys:
        raise TraceFormatError(path, "traceEvents appears twice at the top level (a JSON reader keeps only "
                                     "the last): refusing an ambiguous file")
    with memoryview(buf) as view, view[:end] as chunk:
        on_events(_decode_events(path, decoder, chunk, index, buf, buf_offset), index)
    return keys


def _array_end(path: str, buf: bytearray, buf_offset: int, index: int) -> int:
    """Length of the JSON array at the start of `buf` (msgspec names where the trailing text starts)."""
    try:
        _RAW_DECODER.decode(buf)
    except msgspec.DecodeError as exc:
        byte = _error_byte(exc) if "trailing characters" in str(exc) else None
        if byte is not None:      # msgspec names the byte after the first trailing one: the array ends before
            return buf.rindex(b"]", 0, byte) + 1
        raise TraceFormatError(path, f"malformed JSON: {_describe(exc, index, buf, buf_offset)}") from exc
    except RecursionError:
        raise TraceFormatError(path, f"JSON nested too deeply to decode (events from traceEvents[{index}], "
                                     f"byte {buf_offset})") from None
    raise TraceFormatError(path, "truncated JSON (the file ends after the traceEvents array)")


def _decode_events(path: str, decoder: EventsDecoder, raw, index: int, text=b"", offset: int = 0) -> list:
    try:
        return decoder.decode(raw, index)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, _describe(exc, index, text, offset)) from exc
    except RecursionError:
        raise TraceFormatError(path, f"JSON nested too deeply to decode (events from traceEvents[{index}])") from None


def _error_byte(exc: msgspec.DecodeError) -> int | None:
    match = _ERROR_BYTE.search(str(exc))
    return int(match.group(1)) if match else None


def _bad_utf8_at(text, end: int) -> int | None:
    """Position of the first invalid UTF-8 byte in text[:end], or None (one linear C pass)."""
    try:
        with memoryview(text) as view:
            codecs.utf_8_decode(view[:end], "strict", True)
    except UnicodeDecodeError as exc:
        return exc.start
    return None


# what a file that is not JSON at byte 0 may be instead: 'invalid character (byte 0)' said nothing of it
_UTF8_BOM = b"\xef\xbb\xbf"
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])")
_MAGIC = ((b"\xff\xfe\x00\x00", "UTF-32 text"),
          (b"\x00\x00\xfe\xff", "UTF-32 text"), (b"\xff\xfe", "UTF-16 text"), (b"\xfe\xff", "UTF-16 text"),
          (b"BZh", "bzip2-compressed"), (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
          (b"\xfd7zXZ\x00", "xz-compressed"), (b"PK\x03\x04", "a zip archive"))


def _looks_like(text: bytes) -> str:
    """'; the file looks like UTF-16 text (...)' when its first bytes say what it is instead of JSON."""
    head = bytes(text[:8])
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"; the file looks like {what} (traceattr reads UTF-8 JSON, plain or gzip)"
    if len(head) >= 2 and (head[0] == 0) != (head[1] == 0):          # UTF-16 without a byte order mark
        return "; the file looks like UTF-16 text (traceattr reads UTF-8 JSON, plain or gzip)"
    return ""


def _describe(exc: msgspec.DecodeError, index: int, text=b"", offset: int = 0) -> str:
    """msgspec's message with chunk-relative `$[i]` turned into the event's index in the file, and
    chunk-relative `(byte N)` into the offset in the file's text (`text` starts at `offset`)."""
    message = str(exc)
    if message == "Input data was truncated":
        return "truncated JSON (the file ends early)"
    if "UTF-8" in message and (bad := _bad_utf8_at(text, len(text))) is not None:
        return f"invalid UTF-8 at byte {offset + bad}"
    if "hex escape" in message and (found := _ERROR_BYTE.search(message)):
        at = int(found.group(1))          # msgspec's 'unexpected end of hex escape' for a lone \ud800
        if (lone := _LONE_SURROGATE.search(bytes(text[max(at - 12, 0):at + 1]))) is not None:
            return (f"an unpaired surrogate escape {lone.group(0).decode()} at byte {offset + at} (a high "
                    "surrogate must be followed by a low one, \\udc00-\\udfff)")
    message = _ERROR_BYTE.sub(lambda m: f"(byte {int(m.group(1)) + offset})", message)
    return AT_INDEX.sub(lambda m: f"`traceEvents[{int(m.group(1)) + index}]", message)
