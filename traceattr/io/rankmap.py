"""read_rank_map: the `--rank-map FILE` of every command, as {file name or path: rank}.

Two spellings: a JSON object `{"host-a_100.pt.trace.json": 0, ...}`, or text lines `name=rank` (blank
lines and `#` comments allowed). A name is a trace's base name, its path relative to PATH (or to any folder
above it), as typed or absolute (io/discover.py, rank_map_keys); `./` and `a//b` are read as `a/b`, and a
name starting with `..` as the path it names from here.
Every value is range-checked here, where it enters: one line naming the file, the line and the problem.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from traceattr.errors import TraceInputError
from traceattr.io.limits import MAX_RANK      # the bound of every rank read, from a trace or a map
from traceattr.units import digits_int

MAX_BYTES = 16 << 20          # a map of a million ranks is ~40 MB of text; beyond this it is not a rank map


def read_rank_map(path: str | Path) -> dict[str, int]:
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise TraceInputError(f"{path}: rank map larger than {MAX_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceInputError(f"{path}: cannot read rank map ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise TraceInputError(f"{path}: rank map is not UTF-8 text") from None
    if text.lstrip().startswith("{"):
        try:
            pairs = json.loads(text, object_pairs_hook=_Pairs)     # text starts with "{": an object or an error
        except RecursionError:
            raise TraceInputError(f"{path}: rank map is not a flat JSON object (nested too deeply)") from None
        except (ValueError, AttributeError) as exc:
            raise TraceInputError(f"{path}: rank map is not valid JSON ({exc})") from None
        mapping: dict[str, int] = {}
        for name, value in pairs:
            _put(path, f"key {name!r}", mapping, _key(name), _rank(path, f"key {name!r}", value))
        return mapping
    mapping = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.rpartition("=")
        if not sep or not name.strip():
            raise TraceInputError(f"{path}:{number}: expected name=rank, got {line[:80]!r}")
        _put(path, f"line {number}", mapping, _key(name.strip()), _rank(path, f"line {number}", value.strip()))
    if not mapping:
        raise TraceInputError(f"{path}: empty rank map (expected name=rank lines or a JSON object)")
    return mapping


class _Pairs(list):
    """A JSON object's (name, value) pairs in order, duplicates kept, so that a name given twice is seen."""


def _put(path: Path, where: str, mapping: dict[str, int], key: str, rank: int) -> None:
    """A name given two ranks (as typed or as normalized: `./a` is `a`) is a contradiction, not a last-wins."""
    if mapping.get(key, rank) != rank:
        raise TraceInputError(f"{path}: {where}: {key!r} is given rank {rank} here and rank {mapping[key]} "
                              f"before")
    mapping[key] = rank


def _key(name: str) -> str:
    """The name as discovery spells paths (no `./`, no `//`); `../x` as an absolute path (from where typed)."""
    name = os.path.normpath(name) if name else name
    return os.path.abspath(name) if name == os.pardir or name.startswith(os.pardir + os.sep) else name


def _rank(path: Path, where: str, value) -> int:
    if isinstance(value, str) and digits_int(value) is not None:
        value = digits_int(value)
    if type(value) is not int or not 0 <= value <= MAX_RANK:
        raise TraceInputError(f"{path}: {where}: rank must be an integer from 0 to {MAX_RANK}, got {value!r}")
    return value
