"""Decoded trace files in the cache folder (traceattr.io.cachedir), so a second look decodes nothing.

One entry per trace file, named by a hash of its absolute path and keyed by that path, its size, mtime_ns,
inode and ctime_ns, the cache format and the code fingerprint, so a changed or replaced trace, or a changed
decoder, is never served stale; a file that changed while it was decoded is not stored. The entry's facts
(era, ranks, counts, notes, readable metadata JSON) are validated against the fields of DecodedFile with
the bounds a decode can produce, and its three tables against their arrow schemas, the facts (window, event
count) and the inflate limit, so a foreign or forged entry is rebuilt, never served.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from typing import Annotated

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceattr import schema as S
from traceattr.io.cachedir import CacheDir, CacheEntryError, file_key, hex_name
from traceattr.io.decode import DecodedFile, _window
from traceattr.io.discover import stat_of
from traceattr.io.header import unreadable_texts
from traceattr.io.parquet import Inflated, arrow_owned, read_bounded
from traceattr.io.failure import FileFailure

KIND = "files"
_TABLES = {"device": S.DEVICE_SCHEMA, "host": S.HOST_SCHEMA, "markers": S.MARKER_SCHEMA}
_ERAS = (S.ERA_A, S.ERA_B, S.ERA_C, S.ERA_RELATIVE)
_PATH_MARK = "\x00path\x00"       # notes mention the file; stored with a mark, filled in with today's name
_INT64 = msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)
_COUNT = msgspec.Meta(ge=0, le=(1 << 63) - 1)
_RANK = msgspec.Meta(ge=-1, lt=1 << 31)      # ranks and world sizes are int32 in every table
_BOUNDS = {"json_rank": _RANK, "world_size": _RANK, "events": _COUNT, "negative_durations": _COUNT,
           "absurd_durations": _COUNT}


class FileCache:
    """get/put decoded files in one cache folder. Never raises for cache problems: a miss instead."""

    def __init__(self, cache: CacheDir | str | os.PathLike | None = None) -> None:
        self.dir = cache if isinstance(cache, CacheDir) else CacheDir.at(cache)
        self.hits = self.misses = self.write_errors = 0
        self._missed: dict[str, dict] = {}    # path -> its key when get() missed: before it was decoded

    @classmethod
    def of(cls, cache) -> FileCache | None:
        """`load(cache=...)`: True (the default folder), False/None (no cache), a folder, or a FileCache."""
        if isinstance(cache, FileCache) or not cache:
            return cache or None
        return cls(None if cache is True else cache)

    def get(self, path: str) -> DecodedFile | FileFailure | None:
        key = None
        try:
            key = file_key(path, stat_of(path))     # the stat discovery took: no second look before the read
            facts, blobs = self.dir.read(KIND, hex_name(key["path"]), key, tuple(_TABLES))
            result = _from_entry(facts, blobs, path)
        except Exception:      # noqa: BLE001 - missing, stale, corrupt, foreign or forged: rebuild
            self.misses += 1
            if key is not None:
                self._missed[path] = key
            return None
        self.hits += 1
        return result

    def put(self, path: str, result: DecodedFile | FileFailure) -> None:
        """Store `result`, decoded after get(path) missed, only if the file is still the one get() saw: a
        trace replaced (`mv`) or rewritten while it was read stored the old tables under the new file's
        key, served from then on."""
        try:
            key = file_key(path)                    # now: the file must still be the one get() saw
            if self._missed.pop(path, None) != key:
                self.write_errors += 1
                return
            if isinstance(result, FileFailure):
                facts, parts = {"not_a_trace": result.problem}, {}
            else:
                facts = _facts_of(result)
                parts = {name: functools.partial(_write_table, getattr(result, name)) for name in _TABLES}
            self.dir.write(KIND, hex_name(key["path"]), key, facts, parts)
        except Exception:      # noqa: BLE001 - a cache that cannot be written only costs speed
            self.write_errors += 1


_NOT_CACHED = ("path", "host_pids")      # the path is the key's; host_pids is a driver's facts' alone


@functools.lru_cache(maxsize=1)
def _facts_type() -> type:
    """A msgspec Struct of DecodedFile's fields other than the path and tables, each with its bounds:
    derived from the dataclass, so a field added there is cached and validated without a second list."""
    hints = typing.get_type_hints(DecodedFile)
    fields = []
    for field in dataclasses.fields(DecodedFile):
        if field.name in _TABLES or field.name in _NOT_CACHED:
            continue
        kind = hints[field.name]
        if kind is int:
            kind = Annotated[int, _BOUNDS.get(field.name, _INT64)]
        elif typing.get_origin(kind) is dict and typing.get_args(kind)[1] is int:
            kind = dict[str, Annotated[int, _COUNT]]
        fields.append((field.name, kind))
    return msgspec.defstruct("DecodedFacts", fields, forbid_unknown_fields=True)


def _facts_of(decoded: DecodedFile) -> dict:
    facts = {f.name: getattr(decoded, f.name) for f in dataclasses.fields(decoded)
             if f.name not in _TABLES and f.name not in _NOT_CACHED}
    facts["notes"] = [note.replace(decoded.path, _PATH_MARK) for note in decoded.notes]
    return facts


def _from_entry(facts: dict, blobs: dict[str, bytes], path: str) -> DecodedFile | FileFailure:
    if set(facts) == {"not_a_trace"} and isinstance(facts["not_a_trace"], str) and not blobs:
        return FileFailure(path, facts["not_a_trace"], True)
    valid = msgspec.structs.asdict(msgspec.convert(facts, type=_facts_type()))
    if valid["era"] not in _ERAS:
        raise CacheEntryError(f"unknown era {valid['era']!r}")
    bad = unreadable_texts(valid["metadata"], valid["device_properties"])
    if bad:
        raise CacheEntryError(f"{bad} that is not readable JSON")
    tables = {name: _table(blobs[name], schema) for name, schema in _TABLES.items()}
    if (valid["start_ns"], valid["end_ns"]) != _window(*tables.values()) or \
            (valid["host_start_ns"], valid["host_end_ns"]) != _window(tables["host"]):
        raise CacheEntryError("the facts' window does not match the tables")
    if sum(table.num_rows for table in tables.values()) > valid["events"]:
        raise CacheEntryError("more table rows than events")
    valid["notes"] = tuple(note.replace(_PATH_MARK, path) for note in valid["notes"])
    return DecodedFile(path=path, **tables, **valid)


def _table(blob: bytes, schema: pa.Schema) -> pa.Table:
    """A decoded table as the decoder writes it: the schema's columns without rank/window, in order, of
    the schema's types (plain strings: the map step codes names itself, after the cache), no nulls (the
    decoder writes none: a null name reached the map step's rule lookup as a NaN index), and no activity
    ending before it starts (the decoder clamps negative durations)."""
    try:
        table = read_bounded(pa.BufferReader(arrow_owned(blob)), len(blob))
    except Inflated as exc:
        raise CacheEntryError(str(exc)) from None
    want = S.unplaced(schema)
    if table.schema.names != want.names:
        raise CacheEntryError(f"columns {table.schema.names} are not {want.names}")
    for got, field in zip(table.schema, want):
        if got.type != field.type:
            raise CacheEntryError(f"column {field.name} is {got.type}, not {field.type}")
        if table.column(field.name).null_count:
            raise CacheEntryError(f"column {field.name} holds nulls")
    if table.num_rows and pc.any(pc.less(table[S.END_NS], table[S.START_NS])).as_py():
        raise CacheEntryError("an activity ends before it starts")
    return table


def _write_table(table: pa.Table, target: str) -> None:
    # no parquet dictionary pages: the dictionary builders' hash tables were the write's whole memory cost
    # (+30 MB RSS on a 202 MB trace) and half its time, and zstd alone packs the repeated names smaller.
    # 128 KiB data pages, not 1 MiB: the device table's write peaked at +15.5 MiB over its 26.5 MiB (the
    # kernel names' pages in flight), +7.9 MiB with them; the file and its read time stay the same
    pq.write_table(table, target, compression="zstd", use_dictionary=False, data_page_size=128 << 10)
