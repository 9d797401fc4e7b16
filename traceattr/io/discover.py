"""Find trace files under a path, resolve each file's rank and order the windows of each rank
(kineto-format.md 1.4)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from traceattr.errors import NoTracesError, TraceDiscoveryError
from traceattr.io.limits import MAX_RANK, TIME_LIMIT_NS

RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)(?!\d)")
RANK_FOLDER = re.compile(r"(?i)rank[-_]?(\d+)")       # a whole folder name: rank3, rank-3, rank_3
_RUN_NUMBER = re.compile(r" #\d+$")
_TRACE_SUFFIXES = (".json", ".json.gz")
_TEMPORARY_SUFFIXES = (".tmp", ".part")

STORE_MARKER = "_traceattr_store.json"   # written last into a parquet store (traceattr.io.store)

def find_trace_files(path: str | Path, notes: list[str] | None = None) -> list[Path]:
    """The file itself, or every *.json / *.json.gz below a folder (hidden and temporary names skipped).
    A folder that cannot be listed, a link to a folder (not followed), a broken link named like a trace and
    hidden entries holding traces are skipped with a note appended to `notes` (load shows them)."""
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
    found, unnamed, skipped, hidden = [], [], [], []
    # os.walk, not rglob: it reports the folders it cannot list (rglob skips them without a word). It never
    # enters a linked folder: one may lead anywhere (a dataset, the home folder, a loop); such links are noted
    for folder, subfolders, names in os.walk(root, onerror=unreadable.append):
        if STORE_MARKER in names:            # parquet stores hold no JSON traces
            subfolders.clear()
            continue
        subfolders.sort()
        if notes is not None:                # the notes cost a stat per subfolder: only when someone reads them
            skipped += _linked_folders(root, folder, subfolders)
            hidden += [f"{Path(folder) / d}/" for d in subfolders if d.startswith(".") and _holds_traces(folder, d)]
        subfolders[:] = [d for d in subfolders if not d.startswith(".")]
        for name in names:
            lower = name.lower()
            if lower.endswith(_TEMPORARY_SUFFIXES) or not lower.endswith(_TRACE_SUFFIXES):
                continue
            candidate = Path(folder) / name
            if name.startswith("."):
                hidden.append(str(candidate))
            elif not candidate.is_file():
                if candidate.is_symlink() and not candidate.exists():   # it leads nowhere (or in a loop)
                    skipped.append(f"skipped {candidate}: a broken link (to {_target(candidate)})")
                elif candidate.exists():     # a FIFO, socket or device (or a link to one): never read
                    skipped.append(f"skipped {candidate}: not a regular file (a FIFO, socket or device)")
            elif _utf8(candidate):
                found.append(candidate)
            else:   # every table holds paths as UTF-8 text (arrow strings), and a note shows the name escaped
                unnamed.append(candidate)
    problems = [f"skipped {error.filename}: cannot list the folder ({error.strerror or error})"
                for error in unreadable]
    problems += [f"skipped {path}: the file name is not valid UTF-8 (rename it to read it)" for path in unnamed]
    problems += skipped
    if hidden:
        listed = ", ".join(hidden[:5]) + (f" and {len(hidden) - 5} more" if len(hidden) > 5 else "")
        problems.append(f"skipped hidden trace files and folders holding them (names starting with '.' are not "
                        f"searched): {listed}")
    if notes is not None:
        notes.extend(problems)
    if not found:
        detail = f" ({'; '.join(problems)})" if problems else ""
        raise NoTracesError(root, f"{root}: no trace files (*.json or *.json.gz) found{detail}")
    return sorted(found)


# hidden folders of tools, never of traces: not even listed
_TOOL_FOLDERS = frozenset({".git", ".hg", ".svn", ".cache", ".venv", ".tox", ".ipynb_checkpoints", ".idea",
                           ".vscode", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".dvc"})
_HIDDEN_LOOK = 4096           # entries of a hidden folder looked at for a trace name: a huge one costs no more


def _holds_traces(folder: str, name: str) -> bool:
    """Whether the hidden folder `name` holds a trace file directly (one listing, never a walk)."""
    if name in _TOOL_FOLDERS or os.path.islink(os.path.join(folder, name)):
        return False
    try:
        with os.scandir(os.path.join(folder, name)) as entries:
            for _, entry in zip(range(_HIDDEN_LOOK), entries):
                lower = entry.name.lower()
                if (not entry.name.startswith(".") and lower.endswith(_TRACE_SUFFIXES)
                        and not lower.endswith(_TEMPORARY_SUFFIXES)):
                    return True
    except OSError:
        return False
    return False


def _target(link: str | Path) -> str:
    try:
        return os.readlink(link)
    except OSError:           # gone since it was listed
        return "?"


def _linked_folders(root: Path, folder: str, subfolders: list[str]) -> list[str]:
    """A note for each link to a folder among `subfolders` (os.walk lists them, never enters them)."""
    notes = []
    for name in subfolders:
        link = os.path.join(folder, name)
        if name.startswith(".") or not os.path.islink(link):
            continue
        target, inside = _target(link), os.path.realpath(link)
        if Path(inside).is_relative_to(os.path.realpath(root)):
            notes.append(f"skipped {link}: a link to {target}, a folder under PATH, searched where it is")
        else:
            notes.append(f"skipped {link}: a link to the folder {target}, not followed (give that folder "
                         "itself as PATH, or copy it here)")
    return notes


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
    return _as_rank(matches[-1])


TOO_MANY_DIGITS = 10**19    # a rank of more than 18 digits: too long for int() (4300 digits) and any rank


def _as_rank(digits: str) -> int:
    return int(digits) if len(digits) <= 18 else TOO_MANY_DIGITS


def rank_from_folders(path: str, root: str | None) -> int | None:
    """The rank of the nearest folder named `rank{R}` / `rank-{R}` / `rank_{R}` holding the file, from its
    own folder up to PATH (`root`), PATH included (`job/rank3/trace.json` is rank 3, whether PATH is `job` or
    `job/rank3`); folders above PATH never count, and a file given as PATH has none."""
    if root is None:
        return None
    root = _RUN_NUMBER.sub("", str(root))     # a run's origin is PATH/<run name>: runs.py names a second `x #2`
    try:
        inside = Path(path).parent.relative_to(root)
    except ValueError:       # not under root (a file given as PATH, or files decoded elsewhere)
        return None
    for name in (*reversed(inside.parts), Path(os.path.abspath(root)).name):
        match = RANK_FOLDER.fullmatch(name)
        if match:
            return _as_rank(match.group(1))
    return None


def rank_map_keys(path: str) -> list[str]:
    """The rank-map keys that name the file at `path`, most specific first: the path as found, its absolute
    path, then each shorter tail down to the base name (`job/r0/t.json`, `r0/t.json`, `t.json`). So a key may be
    absolute, as typed, relative to PATH (or any folder above the file), or a base name."""
    parts = Path(os.path.abspath(path)).parts
    return [path, *(str(Path(*parts[i:])) for i in range(len(parts)))]


def mapped_rank(path: str, rank_map: dict[str, int] | None) -> tuple[str, int] | None:
    """(key, rank) of the most specific rank-map entry naming `path` (rank_map_keys), else None."""
    if not rank_map:
        return None
    return next(((key, rank_map[key]) for key in rank_map_keys(path) if key in rank_map), None)


def rank_of(path: str, json_rank: int, rank_map: dict[str, int] | None = None, root: str | None = None) -> int:
    """The rank the loader gives the file before it sees the others (an unresolved one is rank 0, as it
    will load when it is its process's only file): for io/runs.py, which groups files into runs first."""
    if json_rank >= 0:
        return json_rank
    hit = mapped_rank(path, rank_map)
    for rank in (hit[1] if hit else None, rank_from_name(Path(path).name), rank_from_folders(path, root)):
        if rank is not None:
            return int(rank)
    return 0


def worker_prefix(basename: str) -> str:
    """tensorboard_trace_handler's worker name: the part of the file name before the first dot."""
    return basename.split(".", 1)[0]


@dataclass(frozen=True)
class RankChoice:
    rank: int
    source: str          # schema.RANK_FROM_*


def resolve_ranks(paths: list[str], json_ranks: list[int], rank_map: dict[str, int] | None = None,
                  root: str | None = None) -> tuple[list[RankChoice], list[str]]:
    """One RankChoice per file: distributedInfo, else rank_map (mapped_rank), else the file name, else its
    folder's name under `root` (PATH), else rank 0 when the files are one process's windows. Returns the
    choices and notes for the user (a rank-map entry naming none of `paths` is one)."""
    from traceattr import schema as S   # lazy: schema imports pyarrow, and the cached-answer path lists files
    choices: list[RankChoice | None] = []
    notes: list[str] = []
    used: set[str] = set()
    for path, json_rank in zip(paths, json_ranks):
        hit = mapped_rank(path, rank_map)
        if hit:
            used.add(hit[0])
        mapped = hit[1] if hit else None
        named = rank_from_name(Path(path).name)
        folder = rank_from_folders(path, root)
        others = ((mapped, "the rank map"), (named, "the file name"), (folder, "the folder name"))
        for value, what in others:
            if value is not None and not 0 <= value <= MAX_RANK:
                shown = "of more than 18 digits" if value == TOO_MANY_DIGITS else value   # not the cap's value
                raise TraceDiscoveryError(f"{path}: rank {shown} from {what} is out of range (0..{MAX_RANK})")
        if json_rank >= 0:
            choices.append(RankChoice(json_rank, S.RANK_FROM_JSON))
            for other, what in others:
                if other is not None and other != json_rank:
                    notes.append(f"{path}: {what} says rank {other} but distributedInfo says rank "
                                 f"{json_rank}; using {json_rank}")
        elif mapped is not None:
            choices.append(RankChoice(int(mapped), S.RANK_FROM_MAP))
        elif named is not None:
            choices.append(RankChoice(named, S.RANK_FROM_NAME))
        elif folder is not None:
            choices.append(RankChoice(folder, S.RANK_FROM_FOLDER))
        else:
            choices.append(None)
    unused = [key for key in rank_map or {} if key not in used]
    if unused:
        listed = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        where = f" under {root}" if root is not None else ""
        notes.append(f"{len(unused)} rank-map {'entry names' if len(unused) == 1 else 'entries name'} no trace "
                     f"file{where}: {listed}")
    unresolved = [path for path, choice in zip(paths, choices) if choice is None]
    if not unresolved:
        return choices, notes
    processes = _processes(unresolved)
    if processes == 1:      # one process's windows: rank 0 (beside ranked files: a folder of several runs)
        notes.append(f"rank assumed 0 for {', '.join(unresolved)} (no distributedInfo, rank map or rank "
                     "in the file or folder name)")
        return [choice or RankChoice(0, S.RANK_ASSUMED) for choice in choices], notes
    listed = ", ".join(unresolved[:5]) + (" ..." if len(unresolved) > 5 else "")
    raise TraceDiscoveryError(
        f"cannot tell the ranks of {len(unresolved)} trace files from {processes} processes apart ({listed}): "
        "put rank{R} in each file or folder name (e.g. rank3.pt.trace.json.gz, rank3/trace.json), record "
        "distributedInfo, or give --rank-map FILE (name=rank lines; rank_map={name: rank} in Python)")


def _processes(paths: list[str]) -> int:
    """How many processes wrote these files, as far as names tell: tensorboard_trace_handler's worker name,
    and the folder when another folder holds a file of the very same name (rank0/trace.json and
    rank1/trace.json are two processes; one process's windows differ in name by their time stamp)."""
    folders: dict[str, set[str]] = {}
    for path in paths:
        folders.setdefault(Path(path).name, set()).add(str(Path(path).parent))
    return len({(worker_prefix(name), folder if len(homes) > 1 else "")
                for name, homes in folders.items() for folder in homes})


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
            # a file without a timed event (schema.NO_TIME: below every kept time; schema imports pyarrow,
            # which the cached-answer path never loads) overlaps nothing; a negative time is a time
            timed = min(starts[i], starts[last]) >= -TIME_LIMIT_NS if last is not None else False
            if timed and starts[i] < ends[last]:
                result[i] = (-1, f"{paths[i]} and {paths[last]} overlap in time for rank {rank} "
                                 "(the same capture twice?)")
                continue
            result[i] = (window, None)
            window += 1
            last = i
    return result


MANIFEST_NAME = "manifest.json"          # a capture's per-rank manifest (io/manifest.py reads it)
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
