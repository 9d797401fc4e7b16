"""Stream the `traceEvents` array of one trace in typed chunks, never holding the whole text.

The inflated text is read in blocks. The header (keys before `traceEvents`) is located by finding the key
and proving the text before it is a complete JSON object prefix. The array is then cut at element
boundaries (`}` `,` `{`), and each chunk is decoded as `[chunk]` into typed structs. Each chunk starts at a
true element start, so a cut that falls inside an element (a `},{` inside a string or nested args) makes
`[chunk]` invalid JSON: it can never pass silently. A failed cut is retried at an earlier boundary (before
the byte msgspec complains about); when the buffer holds no usable boundary, more text is read. The end of
the file is decoded as `{"traceEvents":[` + rest, which also yields the keys written after the array
(`baseTimeNanoseconds`, `distributedInfo`, ...). Small files and texts the splitter cannot find its way
through take the whole-document path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO, Callable

import msgspec
from msgspec import Raw

from traceattr.errors import TraceFormatError
from traceattr.io.events import EventsDecoder
from traceattr.io.gzipstream import BLOCK_BYTES, open_inflated, read_block

EventsCallback = Callable[[list, int], None]   # (events of one chunk, index of its first event)

TRACE_EVENTS = "traceEvents"
_KEY = b'"traceEvents"'
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_KEY_COLON = re.compile(rb"\s*:\s*")
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
_AT_INDEX = re.compile(r"`\$\[(\d+)\]")
_HEADER_LIMIT_BLOCKS = 8        # give up looking for the key after this many blocks: whole-document path
_GROW_LIMIT_BLOCKS = 4          # a buffer this big without a valid cut: read the rest and decode it whole
_HEADER_DECODER = msgspec.json.Decoder(dict[str, Raw])


class NoTraceEventsError(TraceFormatError):
    """Valid JSON without a `traceEvents` key (a manifest, a config): not a trace; load skips it."""


class _Reader:
    def __init__(self, stream: BinaryIO, path: str, block_bytes: int) -> None:
        self.stream, self.path, self.block_bytes = stream, path, block_bytes
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
        self.offset += len(data)
        return data

    def read_rest(self) -> bytes:
        parts = []
        while not self.eof:
            parts.append(self.read())
        return b"".join(parts)


def stream_events(path: str | Path, on_events: EventsCallback, *, decoder: EventsDecoder | None = None,
                  block_bytes: int = BLOCK_BYTES) -> dict[str, Raw]:
    """Feed every chunk of `traceEvents` to `on_events`; return the other top-level keys (raw JSON).
    `decoder` (float timestamps by default) also counts args of unexpected types (EventsDecoder)."""
    path = str(path)
    decoder = decoder or EventsDecoder(exact_decimal=False)
    with open_inflated(path) as stream:
        reader = _Reader(stream, path, block_bytes)
        text = reader.read()
        if reader.eof:
            return decode_whole(path, text, decoder, on_events)
        header, text, array_at = _find_events_array(reader, text)
        if header is None:
            return decode_whole(path, text + reader.read_rest(), decoder, on_events)
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
        raise TraceFormatError(path, f"not valid JSON: {_describe(exc, 0)}") from exc
    raw_events = document.pop(TRACE_EVENTS, None)
    if raw_events is None:
        raise NoTraceEventsError(path, "valid JSON without traceEvents (not a trace)")
    if not bytes(raw_events).lstrip().startswith(b"["):
        raise TraceFormatError(path, "traceEvents is not a list")
    on_events(_decode_events(path, decoder, raw_events, 0), 0)
    return document


_JSON_KINDS = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}


def _json_kind(text: bytes) -> str | None:
    """What valid JSON that is not an object holds ("array", "number", ...); None when it is not valid JSON."""
    is_array = text.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["
    try:   # an array's elements stay raw bytes: validated, never built as Python objects
        value = msgspec.json.decode(text, type=list[Raw]) if is_array else msgspec.json.decode(text)
    except msgspec.DecodeError:
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
    except msgspec.DecodeError:
        return None


def _split_array(reader: _Reader, buf: bytearray, buf_offset: int, decoder: EventsDecoder,
                 on_events: EventsCallback) -> dict[str, Raw]:
    """`buf[0]` is the byte before the next element (the array's `[` or a separator): each chunk is
    decoded in place as `[` + elements + `]` by overwriting that byte and the one after the cut, so the
    text is never copied for decoding."""
    index = 0
    grow_from = None           # size of the buffer when a cut last failed completely
    while True:
        if not reader.eof and (len(buf) < reader.block_bytes or grow_from is not None):
            buf += reader.read()
        if reader.eof or (grow_from is not None and len(buf) > _GROW_LIMIT_BLOCKS * reader.block_bytes):
            buf += reader.read_rest()
            return _decode_tail(reader.path, buf, buf_offset, decoder, on_events, index)
        cut = _cut_chunk(reader.path, buf, decoder, index)
        if cut is None:
            grow_from = len(buf)
            continue
        events, next_start = cut
        on_events(events, index)
        index += len(events)
        buf_offset += next_start - 1
        del buf[:next_start - 1]          # keep one byte before the next element as the placeholder
        grow_from = None


def _cut_chunk(path: str, buf: bytearray, decoder: EventsDecoder,
               index: int) -> tuple[list, int] | None:
    """Decode the longest run of elements in `buf` that ends at a true element boundary; returns the
    events and the position of the next element's `{`, or None when no boundary works."""
    buf[0] = 0x5B                          # "["
    limit = len(buf)
    while True:
        close = _last_boundary(buf, limit)
        if close < 1:
            return None
        after = buf[close + 1]
        buf[close + 1] = 0x5D              # "]" over the separator, restored below
        try:
            with memoryview(buf) as view:
                events = decoder.decode(view[:close + 2])
        except msgspec.ValidationError as exc:
            raise TraceFormatError(path, _describe(exc, index)) from exc
        except msgspec.DecodeError as exc:
            error_byte = _error_byte(exc)
            limit = close if error_byte is None else min(close, error_byte)
            continue
        finally:
            buf[close + 1] = after
        return events, _BOUNDARY.match(buf, close).end() - 1


def _last_boundary(buf: bytes, limit: int) -> int:
    """Position of the `}` of the last `}` `,` `{` that starts before `limit`, or -1."""
    while True:
        close = buf.rfind(b"}", 0, limit)
        if close < 0 or _BOUNDARY.match(buf, close):
            return close
        limit = close


def _decode_tail(path: str, buf: bytearray, buf_offset: int, decoder: EventsDecoder,
                 on_events: EventsCallback, index: int) -> dict[str, Raw]:
    """The last elements, the closing `]` and the keys after the array, decoded as one object."""
    opening = b'{"traceEvents":'
    buf[0] = 0x5B                          # "[" over the placeholder byte
    try:
        document = _HEADER_DECODER.decode(opening + buf)
    except msgspec.DecodeError as exc:
        byte = _error_byte(exc)
        where = "" if byte is None else f" near byte {buf_offset + byte - len(opening)}"
        raise TraceFormatError(path, f"malformed JSON{where}: {_describe(exc, index)}") from exc
    on_events(_decode_events(path, decoder, document.pop(TRACE_EVENTS), index), index)
    return document


def _decode_events(path: str, decoder: EventsDecoder, raw: Raw, index: int) -> list:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, _describe(exc, index)) from exc


def _error_byte(exc: msgspec.DecodeError) -> int | None:
    match = _ERROR_BYTE.search(str(exc))
    return int(match.group(1)) if match else None


def _describe(exc: msgspec.DecodeError, index: int) -> str:
    """msgspec's message with chunk-relative `$[i]` turned into the event's index in the file."""
    message = str(exc)
    if message == "Input data was truncated":
        return "truncated JSON (the file ends early)"
    return _AT_INDEX.sub(lambda m: f"`traceEvents[{int(m.group(1)) + index}]", message)
