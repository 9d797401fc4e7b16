"""The compiled event scanner behind the EventsDecoder interface, with msgspec as the fallback.

ScanDecoder.decode returns a ScannedChunk (the raw columns of the chunk's complete events, straight from the
JSON bytes) or, for any chunk the scanner does not take (see _scan.c: escapes in kept strings, wrong types,
invalid JSON...), the msgspec structs of EventsDecoder, which then also give the errors. Both feed
ColumnCollector.add and give the same tables bit for bit (tests/test_io_scanner.py).

String codes in a ScannedChunk are the scanner's own (one code space per decoder, so one decoder per
collector); `new` lists the strings first seen since the last chunk, in code order, per family.
"""

from __future__ import annotations

import numpy as np

from traceattr.io.events import RAW_ARGS, Args, EventsDecoder
from traceattr.io.shapes import MAX_RAW_BYTES

# the args the scanner reads, named as events.Args names them (attribute -> JSON key): ints, then texts
_ARG_KEYS = dict(zip(Args.__struct_fields__, Args.__struct_encode_fields__))
TEXT_ARGS = ("collective", "pg_name", "pg_ranks", "dtype", "kernel")
INT_ARGS = tuple(name for name in Args.__struct_fields__ if name not in TEXT_ARGS + RAW_ARGS)
NULLABLE_ARGS = ("python_parent_id",)          # `Python parent id` is JSON null on root frames
# raw args follow the texts: any JSON value, its raw text interned (absent when over MAX_RAW_BYTES)
FAMILIES = ("ph", "cat", "name", "row_id") + TEXT_ARGS + RAW_ARGS   # the scanner's string families, in order


class ScannedChunk:
    """The complete ("X") events of one chunk as columns, plus the count and phases of all its events."""

    __slots__ = ("events", "new", "phases", "ts_us", "dur_us", "cat", "name", "pid", "tid",
                 "pid_text", "tid_text", "ints", "texts")

    def __init__(self, result: tuple) -> None:
        (self.events, new, phases, ts, dur, cat, name, pid, tid, pid_text, tid_text, ints, texts) = result
        self.new = dict(zip(FAMILIES, new))
        self.phases = np.frombuffer(phases, np.int32)
        self.ts_us, self.dur_us = np.frombuffer(ts, np.float64), np.frombuffer(dur, np.float64)
        self.cat, self.name = np.frombuffer(cat, np.int32), np.frombuffer(name, np.int32)
        self.pid, self.tid = np.frombuffer(pid, np.int64), np.frombuffer(tid, np.int64)
        self.pid_text, self.tid_text = np.frombuffer(pid_text, np.int32), np.frombuffer(tid_text, np.int32)
        self.ints = {key: np.frombuffer(b, np.int64) for key, b in zip(INT_ARGS, ints)}
        self.texts = {key: np.frombuffer(b, np.int32) for key, b in zip(TEXT_ARGS + RAW_ARGS, texts)}   # -1: absent

    def __len__(self) -> int:
        return self.events


class ScanDecoder(EventsDecoder):
    """EventsDecoder (float timestamps) that scans with the C extension first (`scanner_type`: _scan.Scanner)."""

    def __init__(self, scanner_type) -> None:
        super().__init__(exact_decimal=False)
        self._scanner = scanner_type(tuple(_ARG_KEYS[k] for k in INT_ARGS), tuple(_ARG_KEYS[k] for k in TEXT_ARGS),
                                     tuple(_ARG_KEYS[k] for k in NULLABLE_ARGS),
                                     tuple(_ARG_KEYS[k] for k in RAW_ARGS), MAX_RAW_BYTES)
        self.scanned = 0              # chunks the scanner took
        self.fallbacks = 0            # chunks left to msgspec

    def decode(self, data, first_index: int = 0):
        result = self._scanner.scan(data)
        if result is None:            # not a chunk the scanner takes: msgspec gives the structs or the error
            self.fallbacks += 1
            return super().decode(data, first_index)
        self.scanned += 1
        return ScannedChunk(result)
