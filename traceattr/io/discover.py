"""Find trace files under a path, resolve each file's rank and order the windows of each rank
(kineto-format.md 1.4)."""

from __future__ import annotations

import errno
import fnmatch
import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR, S_ISREG

from traceattr.errors import NoTracesError, TraceDiscoveryError
from traceattr.io.cachedir import TAG_NAME     # a cache folder put inside the path is no trace folder
from traceattr.io import limits
from traceattr.io.limits import MAX_RANK, TIME_LIMIT_NS

RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)(?!\d)")
RANK_FOLDER = re.compile(r"(?i)rank[-_]?(\d+)")       # a whole folder name: rank3, rank-3, rank_3
_RUN_NUMBER = re.compile(r" #\d+$")
_TRACE_SUFFIXES = (".json", ".json.gz")
_TEMPORARY_SUFFIXES = (".tmp", ".part")

STORE_MARKER = "_traceattr_store.json"   # written last into a parquet store (traceattr.io.store)

def find_trace_files(path: str | Path | Inputs, notes: list[str] | None = None) -> list[Path]:
    """The file itself, or every *.json / *.json.gz below a folder (hidden and temporary names skipped).
    A folder that cannot be listed, a link to a folder (not followed), a broken link named like a trace and
    hidden entries holding traces are skipped with a note appended to `notes` (load shows them). `path` may
    be an Inputs: its walk is used, never repeated."""
    inputs = path if isinstance(path, Inputs) else discover(path)
    if notes is not None:
        notes.extend(inputs.notes)
    return [Path(found) for found in inputs.found_files(notes is not None)]


class FoundFile(str):
    """A trace file's path as discovery found it, with the os.stat it took then (`stat`): cache keys use it,
    so a trace is stat'd once to be found and once more only to see it unchanged after it was read. It
    travels to the workers with its stat (pickled by __reduce__); any str operation gives a plain str."""

    def __new__(cls, path: str, stat: os.stat_result) -> FoundFile:
        found = super().__new__(cls, path)
        found.stat = stat
        return found

    def __reduce__(self):
        return FoundFile, (str(self), self.stat)


def stat_of(path: str | os.PathLike) -> os.stat_result:
    """The stat discovery took of a FoundFile, else os.stat of the path now."""
    return path.stat if isinstance(path, FoundFile) else os.stat(path)


def absolute(path: str) -> str:
    """os.path.abspath that keeps a FoundFile's stat (remote workers open the absolute path)."""
    whole = os.path.abspath(path)
    return FoundFile(whole, path.stat) if isinstance(path, FoundFile) else whole


_KEEP_ERRORS = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)   # what Path.is_file() takes for "no"


def _stat_or_none(path: str | Path) -> os.stat_result | None:
    """os.stat as Path.is_file() / exists() see it: None for a path that is not there (or loops)."""
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno not in _KEEP_ERRORS:
            raise
        return None


@dataclass(frozen=True, eq=False)
class Inputs(os.PathLike):
    """What one path holds, described once by one walk (discover): every caller in a command (the cached
    answer's key, the capture summaries, the plan, the notes, the capture problems) reads this instead of
    looking again. It stands for the path as typed (os.fspath and str give it), so it goes wherever a path
    goes. Problems found on the way are kept and raised where a path's files are asked for, as before."""

    path: str                                    # as typed
    kind: str                                    # FILE, FOLDER, STORE, INCOMPLETE_STORE or NOTHING
    files: tuple[FoundFile, ...] = ()            # find_trace_files' answer, capture manifests included
    notes: tuple[str, ...] = ()                  # folders not listed, links not followed, hidden traces
    problem: Exception | None = None             # raised by found_files(): nothing to read there
    capture_root: bool = False                   # a traceattr.capture folder (manifest.json, rank*/manifest.json)
    listing: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (folder, its non-hidden file names) outside caches
    marker_stat: os.stat_result | None = None    # a store's metadata file as found
    quiet_problem: Exception | None = None       # `problem` without the notes of folders (found_files(False))
    rank_folders: tuple[str, ...] = ()           # the path's sub-folders named rank* (links included)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def found_files(self, noted: bool = True) -> tuple[FoundFile, ...]:
        """The files found, or the problem raised: its text names the folders noted (links, hidden ones)
        only when `noted`, as find_trace_files said it with and without a notes list."""
        problem = self.problem if noted or self.quiet_problem is None else self.quiet_problem
        if problem is not None:
            raise problem
        return self.files

    @functools.cached_property
    def manifests(self) -> tuple[FoundFile, ...]:
        """The capture manifests among the files found (each read once, here: read_manifest keeps it)."""
        return tuple(f for f in self.files if Path(f).name == MANIFEST_NAME and
                     (is_capture_manifest(f, self.read_manifest) if f.stat.st_size <= MANIFEST_LOOK
                      else is_capture_manifest(f)))     # a big one: only its first MB, as ever

    @functools.cached_property
    def _manifest_bytes(self) -> dict[str, bytes]:
        return {}

    def read_manifest(self, path: str | os.PathLike) -> bytes:
        """The bytes of a manifest.json under this path, read once for every reader in the command (the
        capture summaries, the capture problems, check's selected ranks): one view of a capture that may be
        writing. An OSError is raised to each reader, limits.TooLarge (a ValueError) past MAX_MANIFEST_BYTES."""
        key = os.fspath(path)
        if key not in self._manifest_bytes:
            self._manifest_bytes[key] = limits.read_at_most(key, limits.MAX_MANIFEST_BYTES)
        return self._manifest_bytes[key]

    def trace_files(self) -> list[FoundFile]:
        """The files to decode: those found but capture manifests; raises what discovery found wrong."""
        manifests = set(self.manifests) if self.problem is None else ()
        return [f for f in self.found_files() if f not in manifests]

    @functools.cached_property
    def _held(self) -> dict[str, FoundFile]:
        return {str(f): f for f in self.files}

    @functools.cached_property
    def held_paths(self) -> frozenset[str]:
        return frozenset(self._held)      # once: asked once per trace file (capture_selection)

    def held(self, paths: list[str]) -> list[str]:
        """`paths` with each file found here given back with its stat (FoundFile), others as they are."""
        return [self._held.get(path, path) for path in paths]

    def rank_manifests(self) -> list[Path]:
        """What Path(path).glob("rank*/manifest.json") gives, from the walk: a manifest it found, else one
        looked for (in a linked rank folder, which the walk does not enter)."""
        out = []
        for name in self.rank_folders:
            manifest = Path(self.path) / name / MANIFEST_NAME
            if str(manifest) in self._held or manifest.exists():
                out.append(manifest)
        return sorted(out)

    def capture_files(self) -> list[tuple[str, os.stat_result]]:
        """In a traceattr.capture folder, every regular file under it, with its stat (a trace's is the one
        it was found with), outside hidden and cache folders; [] elsewhere."""
        if not self.capture_root:
            return []
        out = []
        for folder, names in self.listing:
            for name in names:
                path = os.path.join(folder, name)
                try:
                    stat = self._held[path].stat if path in self._held else os.stat(path)
                except OSError:              # gone since it was listed, or a broken link: not a file
                    continue
                if S_ISREG(stat.st_mode):
                    out.append((path, stat))
        return out


FILE, FOLDER, STORE, INCOMPLETE_STORE, NOTHING = "file", "folder", "store", "incomplete store", "nothing"
STORE_PARTS = ("files.parquet", "device")          # a folder holding either without STORE_MARKER: unfinished


def discover(path: str | os.PathLike) -> Inputs:
    """The Inputs of `path`: one stat of the path, one walk of a folder (each folder listed once, each trace
    file stat'd once). Never raises for what it finds: find_trace_files / Inputs.found_files do."""
    if isinstance(path, Inputs):
        return path
    typed = os.fspath(path)
    try:
        return _discovered(typed)
    except (OSError, TraceDiscoveryError) as exc:      # raised where the files are asked for, as before
        return Inputs(typed, NOTHING, problem=exc)


def _discovered(typed: str) -> Inputs:
    root = Path(typed)
    stat = _stat_or_none(root)
    if stat is not None and S_ISREG(stat.st_mode):
        if not _utf8(root):
            raise TraceDiscoveryError(f"{root}: the file name is not valid UTF-8: rename it to read it")
        return Inputs(typed, FILE, (FoundFile(str(root), stat),))
    if stat is None:
        raise TraceDiscoveryError(f"{root}: no such file or folder")
    if not S_ISDIR(stat.st_mode):
        raise TraceDiscoveryError(f"{root}: not a file or folder")
    marker = _stat_or_none(root / STORE_MARKER)
    if marker is not None and S_ISREG(marker.st_mode):
        kind = STORE
    elif (root / STORE_PARTS[0]).exists() or (root / STORE_PARTS[1]).is_dir():
        kind = INCOMPLETE_STORE
    else:
        kind = FOLDER
    return _walked(typed, root, kind, marker if kind == STORE else None)


def _walked(typed: str, root: Path, kind: str, marker: os.stat_result | None) -> Inputs:
    """The walk: the trace files find_trace_files gives and, in a capture folder, every file for the
    cached answer's key (pipelines/answer.py), from one listing of each folder."""
    unreadable: list[OSError] = []
    found, unnamed, skipped, hidden = [], [], [], []
    listing: list[tuple[str, tuple[str, ...]]] = []
    searched: set[str] = set()     # folders find_trace_files searches (not inside a store)
    caches: set[str] = set()       # cache folders and folders inside them (not capture files)
    capture = None
    rank_folders: list[str] = []
    # os.walk, not rglob: it reports the folders it cannot list (rglob skips them without a word). It never
    # enters a linked folder: one may lead anywhere (a dataset, the home folder, a loop); such links are noted
    for folder, subfolders, names in os.walk(root, onerror=unreadable.append):
        top = folder == str(root)
        if top:
            rank_folders = sorted(d for d in subfolders if fnmatch.fnmatchcase(d, "rank*"))
            # pipelines/answer.py's test of a capture folder (its glob of rank*/manifest.json follows links)
            capture = (MANIFEST_NAME in names or MANIFEST_NAME in subfolders) and (root / MANIFEST_NAME).exists() \
                or any(fnmatch.fnmatchcase(d, "rank*") and (root / d / MANIFEST_NAME).exists() for d in subfolders)
        parent = os.path.dirname(folder)
        searching = (top or parent in searched) and STORE_MARKER not in names   # parquet stores hold no JSON
        in_cache = not top and (parent in caches or TAG_NAME in names or TAG_NAME in subfolders)
        subfolders.sort()
        if searching:
            searched.add(folder)
        if in_cache:
            caches.add(folder)
        elif capture:
            listing.append((folder, tuple(sorted(n for n in names if not n.startswith(".")))))
        if not searching and (in_cache or not capture):
            subfolders.clear()               # nothing below is read: not listed
            continue
        if searching:                        # (True: a note only when someone reads the notes, as before)
            skipped += [(note, True) for note in _linked_folders(root, folder, subfolders)]
            hidden += [(f"{Path(folder) / d}/", True) for d in subfolders
                       if d.startswith(".") and _holds_traces(folder, d)]
        subfolders[:] = [d for d in subfolders if not d.startswith(".")]
        if not searching:
            continue
        for name in names:
            lower = name.lower()
            if lower.endswith(_TEMPORARY_SUFFIXES) or not lower.endswith(_TRACE_SUFFIXES):
                continue
            candidate = Path(folder) / name
            if name.startswith("."):
                hidden.append((str(candidate), False))
                continue
            stat = _stat_or_none(candidate)
            if stat is None or not S_ISREG(stat.st_mode):
                if candidate.is_symlink() and stat is None:   # it leads nowhere (or in a loop)
                    skipped.append((f"skipped {candidate}: a broken link (to {_target(candidate)})", False))
                elif stat is not None:       # a FIFO, socket or device (or a link to one): never read
                    skipped.append((f"skipped {candidate}: not a regular file (a FIFO, socket or device)", False))
            elif _utf8(candidate):
                found.append(FoundFile(str(candidate), stat))
            else:   # every table holds paths as UTF-8 text (arrow strings), and a note shows the name escaped
                unnamed.append(candidate)
    unlisted = [f"skipped {error.filename}: cannot list the folder ({error.strerror or error})"
                for error in unreadable if os.path.dirname(str(error.filename)) in searched
                or str(error.filename) == str(root)]
    unlisted += [f"skipped {path}: the file name is not valid UTF-8 (rename it to read it)" for path in unnamed]

    def problems(noted: bool) -> list[str]:
        """The notes; `noted=False`: without those of folders (find_trace_files without notes, as before)."""
        shown = unlisted + [text for text, of_folder in skipped if noted or not of_folder]
        held = [text for text, of_folder in hidden if noted or not of_folder]
        if held:
            listed = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            shown.append(f"skipped hidden trace files and folders holding them (names starting with '.' are "
                         f"not searched): {listed}")
        return shown

    none = [None, None]
    if not found:
        for noted in (False, True):
            detail = f" ({'; '.join(problems(noted))})" if problems(noted) else ""
            none[noted] = NoTracesError(root, f"{root}: no trace files (*.json or *.json.gz) found{detail}")
    return Inputs(typed, kind, tuple(sorted(found, key=Path)), tuple(problems(True)), none[1], bool(capture), tuple(listing),
                  marker, none[0], tuple(rank_folders))


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
    # the files of a folder share its answer: asked once per folder (the placement asks for every file),
    # keyed by the working folder too, as a relative root is made absolute
    return _folder_rank(os.path.dirname(path), str(root), os.getcwd())


@functools.lru_cache(maxsize=4096)
def _folder_rank(parent: str, root: str, cwd: str) -> int | None:
    root = _RUN_NUMBER.sub("", root)     # a run's origin is PATH/<run name>: runs.py names a second `x #2`
    try:
        inside = Path(parent).relative_to(root)
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


MANIFEST_LOOK = 1 << 20      # a capture manifest is told by its first MB


def is_capture_manifest(path: str | os.PathLike, read=None) -> bool:
    """A `manifest.json` written by traceattr.capture (not a trace: loaders skip it without a note).
    `read(path) -> bytes`: where its bytes come from (Inputs.read_manifest), else its first MB is read."""
    path = Path(path)
    if path.name != MANIFEST_NAME:
        return False
    try:
        if read is not None:
            data = json.loads(read(path)[:MANIFEST_LOOK])
        else:
            with open(path, "rb") as handle:
                data = json.loads(handle.read(MANIFEST_LOOK))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and str(data.get("format", "")).startswith(CAPTURE_FORMAT_PREFIX)
