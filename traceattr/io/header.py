"""Facts from the top-level keys of one trace (before or after `traceEvents`, kineto-format.md 1.2-1.3)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import msgspec
from msgspec import Raw

from traceattr import schema as S
from traceattr.errors import TraceFormatError
from traceattr.io.limits import MAX_RANK, MAX_WORLD_SIZE, TIME_LIMIT_NS, checked_int
from traceattr.units import digits_int

_LOG_KEYS = {"INFO", "WARNING", "ERROR"}       # kineto's copied log lines: large; only drop reports are kept
DROP_WARNINGS_KEY = "traceattr_profiler_drop_warnings"   # metadata key: log lines saying records were lost
_DROP_WORDS = re.compile(r"(?i)\b(?:drop(?:ped|s)?|lost|overflow(?:ed)?)\b")
_MAX_DROP_LINES = 5
_MAX_METADATA_VALUE = 1 << 20


@dataclass(frozen=True)
class HeaderFacts:
    base_time_ns: int | None       # baseTimeNanoseconds (era C), None when absent
    display_unit: str | None       # displayTimeUnit
    json_rank: int                 # distributedInfo.rank, -1 when absent
    world_size: int                # distributedInfo.world_size, -1 when absent
    device_properties: str         # JSON text of deviceProperties, "" when absent
    metadata: str                  # JSON text of the other small keys


def read_header(path: str, keys: dict[str, Raw]) -> HeaderFacts:
    base = _decode(path, keys, "baseTimeNanoseconds")
    if base is not None and (isinstance(base, bool) or not isinstance(base, int)):
        raise TraceFormatError(path, f"baseTimeNanoseconds is not an integer: {json.dumps(base)[:40]}")
    if base is not None:
        checked_int(path, "baseTimeNanoseconds", base, 0, TIME_LIMIT_NS)
    unit = _decode(path, keys, "displayTimeUnit")
    info = _decode(path, keys, "distributedInfo")
    info = info if isinstance(info, dict) else {}
    metadata = {key: value for key, value in keys.items()
                if key not in _LOG_KEYS and key != "deviceProperties" and len(value) <= _MAX_METADATA_VALUE}
    drops = _drop_warnings(keys)
    if drops:       # the profiler said it lost records: `traceattr check` reports them
        metadata[DROP_WARNINGS_KEY] = drops
    properties = keys.get("deviceProperties")
    return HeaderFacts(
        base_time_ns=base,
        display_unit=unit if isinstance(unit, str) else None,
        json_rank=_in_range(path, "distributedInfo.rank", _as_int(path, "distributedInfo.rank", info.get("rank")),
                            MAX_RANK),
        world_size=_in_range(path, "distributedInfo.world_size",
                             _as_int(path, "distributedInfo.world_size", info.get("world_size")), MAX_WORLD_SIZE),
        device_properties="" if properties is None else bytes(properties).decode("utf-8", "replace"),
        metadata=msgspec.json.encode(metadata).decode("utf-8", "replace"),
    )


def _drop_warnings(keys: dict[str, Raw]) -> list[str]:
    """The first few WARNING/ERROR log lines that say the profiler dropped, lost or overflowed records."""
    found: list[str] = []
    for key in ("WARNING", "ERROR"):
        if key not in keys or len(keys[key]) > 64 * _MAX_METADATA_VALUE:
            continue
        try:
            lines = msgspec.json.decode(keys[key])
        except msgspec.DecodeError:
            continue
        for line in lines if isinstance(lines, list) else [lines]:
            if isinstance(line, str) and _DROP_WORDS.search(line) and len(found) < _MAX_DROP_LINES:
                found.append(line[:300])
    return found


def _decode(path: str, keys: dict[str, Raw], key: str):
    raw = keys.get(key)
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw)
    except RecursionError:
        raise TraceFormatError(path, f"{key} is nested too deeply") from None
    except msgspec.DecodeError as exc:     # cannot happen for text msgspec already split, but be clear
        raise TraceFormatError(path, f"cannot read {key}: {exc}") from exc


def _in_range(path: str, field: str, value: int, high: int) -> int:
    """A negative value reads as absent (as before); one beyond `high` is an error naming the field."""
    return S.NO_INT if value < 0 else checked_int(path, field, value, 0, high)


def _as_int(path: str, field: str, value) -> int:
    """An int from an int or a digit string (`"rank": "3"` in hand-made files); -1 when absent (or null).
    Anything else is an error naming the field: 1.0, true or "²" had read as absent, so a file with a
    rank was taken for rank 0 with a note saying it had no distributedInfo."""
    if value is None:
        return S.NO_INT
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = digits_int(value) if isinstance(value, str) else None    # " 1" and "\u00a01" are no digit strings
    if number is None:
        raise TraceFormatError(path, f"{field} is not an integer: {json.dumps(value, ensure_ascii=True)[:40]}")
    return number


def parse_metadata(text: str) -> dict | None:
    """A file's metadata (the JSON object text of its small top-level keys) as a dict; None when it is not
    one: not JSON, not an object, or nested deeper than Python's json reads (a store or cache entry is
    checked with this where it enters, so every reader of the text can rely on it)."""
    value = parse_json(text or "{}")
    return value if isinstance(value, dict) else None


def unreadable_texts(metadata: str, device_properties: str) -> str:
    """Which of a file's two JSON texts a reader could not parse ("metadata", "device_properties", "" for
    none): checked where a store or cache entry enters, as every reader parses them."""
    if parse_metadata(metadata) is None:
        return "metadata"
    return "device_properties" if device_properties and parse_json(device_properties) is None else ""


def parse_json(text: str):
    """json.loads(text), or None when it is not JSON or is nested too deeply to read (RecursionError)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
