"""Find trace files under a path, resolve each file's rank and order the windows of each rank
(kineto-format.md 1.4)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from traceattr.errors import TraceDiscoveryError
from traceattr.io.limits import MAX_RANK

RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)(?!\d)")
_TRACE_SUFFIXES = (".json", ".json.gz")
_TEMPORARY_SUFFIXES = (".tmp", ".part")

STORE_MARKER = "_traceattr_store.json"   # written last into a parquet store (traceattr.io.store)

def find_trace_files(path: str | Path, notes: list[str] | None = None) -> list[Path]:
    """The file itself, or every *.json / *.json.gz below a folder (hidden and temporary names skipped).
    A folder that cannot be listed is skipped with a note appended to `notes` (load shows them)."""
    root = Path(path)
    if root.is_file():
        if not _utf8(root):
            raise TraceDiscoveryError(f"{root}: the file name is not valid UTF-8: rename it to read it")
        return [root]
    if not root.exists():
        raise TraceDiscoveryError(f"{root}: no such file or folder")
    if not root.is_dir():
        raise TraceDiscoveryError(f"{root}: not a file or folder")
    unreadable: list[OSError] = []
    found, unnamed = [], []
    # os.walk, not rglob: it reports the folders it cannot list (rglob skips them without a word)
    for folder, subfolders, names in os.walk(root, onerror=unreadable.append):
        if STORE_MARKER in names:            # parquet stores hold no JSON traces
            subfolders.clear()
            continue
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in names:
            lower = name.lower()
            if name.startswith(".") or lower.endswith(_TEMPORARY_SUFFIXES) or not lower.endswith(_TRACE_SUFFIXES):
                continue
            candidate = Path(folder) / name
            if not candidate.is_file():
                continue
            if _utf8(candidate):
                found.append(candidate)
            else:   # every table holds paths as UTF-8 text (arrow strings), and a note shows the name escaped
                unnamed.append(candidate)
    problems = [f"skipped {error.filename}: cannot list the folder ({error.strerror or error})"
                for error in unreadable]
    problems += [f"skipped {path}: the file name is not valid UTF-8 (rename it to read it)" for path in unnamed]
    if notes is not None:
        notes.extend(problems)
    if not found:
        detail = f" ({'; '.join(problems)})" if problems else ""
        raise TraceDiscoveryError(f"{root}: no trace files (*.json or *.json.gz) found{detail}")
    return sorted(found)


def _utf8(path: Path) -> bool:
    """Whether the path's name decodes as UTF-8 (os gives undecodable bytes as lone surrogates)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def rank_from_name(basename: str) -> int | None:
    """The last `rank{R}` / `rank-{R}` / `rank_{R}` in a file name (not `frank12`), else None."""
    matches = RANK_IN_NAME.findall(basename)
    if not matches:
        return None
    digits = matches[-1]
    return int(digits) if len(digits) <= 18 else 10**19   # too long for int() (4300 digits) and any rank


def worker_prefix(basename: str) -> str:
    """tensorboard_trace_handler's worker name: the part of the file name before the first dot."""
    return basename.split(".", 1)[0]


@dataclass(frozen=True)
class RankChoice:
    rank: int
    source: str          # schema.RANK_FROM_*


def resolve_ranks(paths: list[str], json_ranks: list[int],
                  rank_map: dict[str, int] | None = None) -> tuple[list[RankChoice], list[str]]:
    """One RankChoice per file: distributedInfo, else rank_map (by base name), else the file name, else
    rank 0 when the files are one process's windows. Returns the choices and notes for the user."""
    from traceattr import schema as S   # here: schema imports pyarrow, and the cached-answer path lists files
    rank_map = rank_map or {}
    choices: list[RankChoice | None] = []
    notes: list[str] = []
    for path, json_rank in zip(paths, json_ranks):
        basename = Path(path).name
        mapped = rank_map.get(basename, rank_map.get(path))
        named = rank_from_name(basename)
        for value, what in ((mapped, "the rank map"), (named, "the file name")):
            if value is not None and not 0 <= value <= MAX_RANK:
                raise TraceDiscoveryError(f"{path}: rank {value} from {what} is out of range (0..{MAX_RANK})")
        if json_rank >= 0:
            choices.append(RankChoice(json_rank, S.RANK_FROM_JSON))
            for other, what in ((mapped, "the rank map"), (named, "the file name")):
                if other is not None and other != json_rank:
                    notes.append(f"{path}: {what} says rank {other} but distributedInfo says rank "
                                 f"{json_rank}; using {json_rank}")
        elif mapped is not None:
            choices.append(RankChoice(int(mapped), S.RANK_FROM_MAP))
        elif named is not None:
            choices.append(RankChoice(named, S.RANK_FROM_NAME))
        else:
            choices.append(None)
    unresolved = [path for path, choice in zip(paths, choices) if choice is None]
    if not unresolved:
        return choices, notes
    processes = len({worker_prefix(Path(p).name) for p in unresolved})
    if processes == 1:      # one process's windows: rank 0 (beside ranked files: a folder of several runs)
        notes.append(f"rank assumed 0 for {', '.join(unresolved)} (no distributedInfo, rank map or rank "
                     "in the file name)")
        return [choice or RankChoice(0, S.RANK_ASSUMED) for choice in choices], notes
    listed = ", ".join(Path(p).name for p in unresolved[:5]) + (" ..." if len(unresolved) > 5 else "")
    raise TraceDiscoveryError(
        f"cannot tell the ranks of {len(unresolved)} trace files from {processes} processes apart ({listed}): "
        "put rank{R} in each file name (e.g. rank3.pt.trace.json.gz), record distributedInfo, or give "
        "--rank-map FILE (name=rank lines; rank_map={name: rank} in Python)")


def order_windows(paths: list[str], ranks: list[int], starts: list[int],
                  ends: list[int]) -> list[tuple[int, str | None]]:
    """Per file: (window number within its rank in time order, None) or (-1, reason) for a file whose
    window overlaps an earlier file of the same rank (the same capture twice)."""
    result: list[tuple[int, str | None]] = [(-1, None)] * len(paths)
    by_rank: dict[int, list[int]] = {}
    for index, rank in enumerate(ranks):
        by_rank.setdefault(rank, []).append(index)
    for rank, members in by_rank.items():
        members.sort(key=lambda i: (starts[i], paths[i]))
        window, last = 0, None
        for i in members:
            if last is not None and starts[i] >= 0 and starts[last] >= 0 and starts[i] < ends[last]:
                result[i] = (-1, f"{paths[i]} and {paths[last]} overlap in time for rank {rank} "
                                 "(the same capture twice?)")
                continue
            result[i] = (window, None)
            window += 1
            last = i
    return result


MANIFEST_NAME = "manifest.json"          # == traceattr.capture.manifest.MANIFEST_NAME (no torch import here)
CAPTURE_FORMAT_PREFIX = "traceattr.capture/"


def is_capture_manifest(path: str | os.PathLike) -> bool:
    """A `manifest.json` written by traceattr.capture (not a trace: loaders skip it without a note)."""
    path = Path(path)
    if path.name != MANIFEST_NAME:
        return False
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and str(data.get("format", "")).startswith(CAPTURE_FORMAT_PREFIX)
