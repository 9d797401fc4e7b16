"""The cache folder: where it is, what an entry is, and how entries are read, written, evicted and cleared.

Where: `--cache-dir DIR`, else `$TRACEATTR_CACHE_DIR`, else `$XDG_CACHE_HOME/traceattr` (default
`~/.cache/traceattr`). Never inside the trace folders. A folder that exists, is not empty and is not already
a traceattr cache (no CACHEDIR.TAG written by us) is refused, so `traceattr cache clear` can never delete
anything but cache entries.

What: each entry of a kind (`files`, `results`, `answers`) is a record `KIND/<name>.record` (JSON, but
never named `.json`, which discovery would take for a trace) plus its parts `KIND/<name>.<sha256>.<part>`.
`<name>` is a hex hash computed by the caller from the entry's key; the record holds the key, facts and
the sha256 of every part, and a sha256 of its own body (key, parts' digests and facts, canonical JSON), so
one hash chain covers the whole entry: an edited record (a rank, a world size, a note) is a miss like an
edited part. Nothing read from the cache is trusted: names are checked to be hex, every path is resolved
and must stay under the root, the record must match its own hash and a schema, the key must equal the
caller's key, and each part's bytes must hash to the digest (a part's file name is its digest). Any
failure is a miss, never an exception: the caller computes the entry again and rewrites it. The hashes are
not keyed, so they catch damage and edits, not a writer who recomputes them: what a record says is still
validated by its reader (the facts' schema and bounds, the tables' laws).

Writes are atomic (a temporary file renamed into place; parts before the record), so concurrent readers
see a whole entry, an older whole entry, or a miss. Every hit refreshes the record's mtime: eviction
removes the least recently used entries when the folder grows past its cap
(`$TRACEATTR_CACHE_MAX`, default 10G), and sweeps temporary files left by killed writers.

It imports no pandas, numpy, pyarrow or msgspec: the cached-answer path of `summarize` starts here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from traceattr.errors import TraceInputError
from traceattr.io.limits import read_at_most
import traceattr

ENV_DIR = "TRACEATTR_CACHE_DIR"
ENV_MAX = "TRACEATTR_CACHE_MAX"
DEFAULT_MAX_BYTES = 10 << 30
# 3: each record carries the sha256 of its own body; 4: a file without a timed event has its window at
# schema.NO_TIME, no longer -1 (a time a relative trace can hold); 5: device rows' group_size; 6: marker rows'
# correlation, wait_on_stream, wait_on_correlation; 7: host rows' input_dims, input_types, concrete_inputs;
# 8: device rows' graph_id, graph_node_id, host rows' launched_kernel;
# 9: ROCm's decimal-text `bytes` read as the number (no longer absent, with a note)
CACHE_FORMAT = 9
KINDS = ("files", "results", "answers")
TAG_NAME = "CACHEDIR.TAG"
RECORD = ".record"
# https://bford.info/cachedir/ : backup tools skip the folder; for us it also marks a folder we own
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# This file marks a traceattr cache folder (safe to delete; `traceattr cache clear`).\n")
MAX_RECORD_BYTES = 64 << 20     # a record holds a key and small facts: far below this
STALE_SECONDS = 3600            # a temporary file this old belongs to a writer that was killed
_HEX = re.compile(r"[0-9a-f]{16,64}")
_PART = re.compile(r"[a-z]{1,16}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_UMASK = os.umask(0)
os.umask(_UMASK)
_FILE_MODE = 0o666 & ~_UMASK     # the umask's mode (not 0600): a team cache is read by the team


@dataclass(frozen=True)
class Record:
    """A record, `KIND/<name>.record`: these three fields and `sha256`, the hash of their canonical body
    (plain json: the fast path skips msgspec)."""

    key: dict
    parts: dict[str, str]           # part name -> sha256 hex of its bytes
    facts: dict

    @classmethod
    def decode(cls, data: bytes, verify: bool = True) -> Record:
        """The record in `data`; ValueError unless it is well formed and (with `verify`) its body hashes to
        its `sha256`. Only removing an entry's old parts reads a record unverified."""
        record = json.loads(data)
        if not isinstance(record, dict) or set(record) != {"key", "parts", "facts", "sha256"}:
            raise ValueError("not a cache record")
        key, parts, facts = record["key"], record["parts"], record["facts"]
        if not (isinstance(key, dict) and isinstance(facts, dict) and isinstance(parts, dict)
                and all(isinstance(p, str) and _PART.fullmatch(p) and isinstance(d, str) and _DIGEST.fullmatch(d)
                        for p, d in parts.items())):
            raise ValueError("a cache record with fields of the wrong type")
        if verify and record["sha256"] != _body_digest(key, parts, facts):
            raise ValueError("the record does not match its hash")
        return cls(key, parts, facts)

    def encode(self) -> bytes:
        # the hash of the body as it will read back: a tuple is a list, a non-string dict key a string
        key, parts, facts = (json.loads(json.dumps(value)) for value in (self.key, self.parts, self.facts))
        return json.dumps({"key": key, "parts": parts, "facts": facts,
                           "sha256": _body_digest(key, parts, facts)}).encode()


def _body_digest(key: dict, parts: dict, facts: dict) -> str:
    """sha256 of a record's body as canonical JSON (sorted keys, no spaces, ASCII): the same for every
    spelling of the same values, different for any other value."""
    body = json.dumps({"key": key, "parts": parts, "facts": facts}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(body.encode()).hexdigest()


class CacheEntryError(Exception):
    """An entry that must not be used (missing, foreign, tampered, outside the root): always a miss."""


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of every .py and .c file of the installed package (the C scanner decodes too): any code change
    invalidates cached results."""

    digest = hashlib.sha256(f"{traceattr.__version__}/{CACHE_FORMAT}".encode())
    root = Path(traceattr.__file__).parent
    for source in sorted([*root.rglob("*.py"), *root.rglob("*.c")]):
        digest.update(str(source.relative_to(root)).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def file_key(path: str, stat: os.stat_result | None = None) -> dict:
    """What must be unchanged for anything cached about a file to be valid. Size and mtime alone miss a
    file replaced by another of the same size and mtime (`cp -p`, `rsync -a`, `touch -r`, a rewrite within
    one mtime tick): the inode and ctime catch those, as no user can set a ctime and a rename changes the
    inode. `stat`: the one discovery took (io.discover.stat_of), else the file is stat'd now."""
    stat = stat or os.stat(path)
    return {"path": os.path.abspath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "inode": stat.st_ino, "ctime_ns": stat.st_ctime_ns, "format": CACHE_FORMAT, "code": code_fingerprint()}


def hex_name(text: str) -> str:
    """An entry name: the only way a name is made, so names never carry text from a trace or a cache."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def default_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceattr"


def parse_size(text: str) -> int:
    """'10G', '500M', '2048' -> bytes (binary units)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not match or float(match.group(1)) * _UNITS[match.group(2)] >= 1 << 62:
        raise TraceInputError(f"{ENV_MAX}={text!r}: not a size (examples: 10G, 500M, 2048)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


@dataclass(frozen=True)
class Cleared:
    entries: int                     # records removed
    bytes: int
    failed: int                      # files that could not be removed
    reason: str                      # the first failure's, e.g. "Permission denied"


@dataclass(frozen=True)
class Usage:
    entries: dict[str, int]          # per kind
    bytes: int
    stale_temporary: int


# Bytes this process wrote to each cache folder since it last scanned it (absent: never scanned). Kept per
# process, not per CacheDir: a CacheDir is made per decoded file, and each one's first write scanned the
# whole cache (64 files on a cache of 5000 entries: 5.8 s became 50 s). A process scans a folder once, then
# again after writing an eighth of the cap.
_WRITTEN_SINCE_SCAN: dict[Path, int] = {}
_UPKEEP_LOCK = threading.Lock()


class CacheDir:
    """One cache folder. Reading raises only CacheEntryError (a miss to the caller); callers of write treat
    its errors as a cost in speed, never a failure."""

    def __init__(self, root: str | os.PathLike, max_bytes: int | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        self.max_bytes = max_bytes if max_bytes is not None else _env_max()

    @classmethod
    def at(cls, explicit: str | os.PathLike | None = None) -> CacheDir:
        """The cache to use: `explicit` (--cache-dir), else $TRACEATTR_CACHE_DIR, else the user cache.
        A named folder is validated now (TraceInputError, exit 2); the default one is created when written."""
        chosen = explicit if explicit not in (None, "") else os.environ.get(ENV_DIR) or None
        if chosen is None:
            return cls(default_root())
        source = "--cache-dir" if explicit not in (None, "") else ENV_DIR
        text = os.fspath(chosen)
        if "\x00" in text:
            raise TraceInputError(f"{source}: the folder name contains a NUL byte")
        root = Path(os.path.abspath(os.path.expanduser(text)))
        if root.exists() and not root.is_dir():
            raise TraceInputError(f"{source} {root}: exists and is not a folder")
        if root.is_dir() and not _ours(root):
            raise TraceInputError(f"{source} {root}: a folder that is not empty and not a traceattr cache "
                                  f"(no {TAG_NAME}); give a new or empty folder")
        return cls(root)

    # --- paths ------------------------------------------------------------------------------------
    def path(self, kind: str, name: str, suffix: str = RECORD) -> Path:
        """KIND/<name><suffix>, resolved and checked to be inside the root."""
        if kind not in KINDS or not _HEX.fullmatch(name):
            raise CacheEntryError(f"not a cache entry name: {kind}/{name!r}")
        path = self.root / kind / f"{name}{suffix}"
        real_root = os.path.realpath(self.root)
        if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
            raise CacheEntryError(f"{path} resolves outside the cache")
        return path

    def _part(self, kind: str, name: str, part: str, digest: str) -> Path:
        if not _PART.fullmatch(part) or not _DIGEST.fullmatch(digest):
            raise CacheEntryError(f"not a cache part: {part!r} {digest!r}")
        return self.path(kind, name, f".{digest[:32]}.{part}")

    # --- reading ----------------------------------------------------------------------------------
    def read(self, kind: str, name: str, key: dict, parts: tuple[str, ...]) -> tuple[dict, dict[str, bytes]]:
        """(facts, {part: bytes}) of a valid entry whose key equals `key` and whose parts are among
        `parts`; CacheEntryError otherwise."""
        record_path = self.path(kind, name)
        try:
            record = Record.decode(read_at_most(record_path, MAX_RECORD_BYTES))
        except (OSError, ValueError, RecursionError) as exc:
            raise CacheEntryError(f"{record_path}: {exc}") from None
        if record.key != key or not set(record.parts) <= set(parts):
            raise CacheEntryError(f"{record_path}: another key or unknown parts")
        data = {}
        for part, digest in record.parts.items():
            try:
                blob = self._part(kind, name, part, digest).read_bytes()
            except OSError as exc:
                raise CacheEntryError(f"{kind}/{name} {part}: {exc}") from None
            if hashlib.sha256(blob).hexdigest() != digest:
                raise CacheEntryError(f"{kind}/{name} {part}: content does not match its hash")
            data[part] = blob
        try:
            os.utime(record_path)       # least recently used goes first on eviction
        except OSError:
            pass
        return record.facts, data

    # --- writing ----------------------------------------------------------------------------------
    def write(self, kind: str, name: str, key: dict, facts: dict,
              parts: dict[str, Callable[[str], None]]) -> None:
        """Write an entry: each part by its writer (called with a temporary path), then the record."""
        folder = self.root / kind
        self._prepare(folder)
        record_path = self.path(kind, name)      # before any byte is written: KIND/ must be inside the root
        old = self._current_parts(kind, name)
        digests, written = {}, 0
        for part, write_to in parts.items():
            tmp = _temporary(folder)
            try:
                write_to(tmp)
                digests[part] = _file_digest(tmp)
                written += os.path.getsize(tmp)
                os.replace(tmp, self._part(kind, name, part, digests[part]))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        record = Record(key=key, parts=digests, facts=facts).encode()
        self.write_bytes(record_path, record)
        for part, digest in old.items():
            if digests.get(part) != digest:
                self._part(kind, name, part, digest).unlink(missing_ok=True)
        with _UPKEEP_LOCK:
            since = _WRITTEN_SINCE_SCAN.get(self.root)
            due = since is None or since + written + len(record) > self.max_bytes // 8
            _WRITTEN_SINCE_SCAN[self.root] = 0 if due else since + written + len(record)
        if due:
            self.evict()

    def write_bytes(self, target: Path, data: bytes) -> None:
        tmp = _temporary(target.parent)
        try:
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _prepare(self, folder: Path) -> None:
        if not self.root.is_dir():
            # the user's own cache is private; a team cache (named explicitly) keeps the umask's mode
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700 if self.root == default_root() else 0o777)
        tag = self.root / TAG_NAME
        if not tag.is_file():
            _write_tag(tag)
        folder.mkdir(exist_ok=True)

    def _current_parts(self, kind: str, name: str) -> dict[str, str]:
        try:
            # unverified: a damaged record's parts are still this entry's files (names checked by _part)
            return Record.decode(read_at_most(self.path(kind, name), MAX_RECORD_BYTES), verify=False).parts
        except Exception:      # noqa: BLE001 - no usable old record: nothing of it to remove
            return {}

    # --- upkeep -----------------------------------------------------------------------------------
    def _scan(self) -> tuple[list[tuple[float, int, list[Path]]], list[Path], int]:
        """(entries as (last use, bytes, files), stale temporary or orphaned files, total bytes)."""
        entries, stale, total = [], [], 0
        now = time.time()
        for kind in KINDS:
            groups: dict[str, list[tuple[Path, os.stat_result]]] = {}
            for item in self._listing(kind):
                try:
                    stat = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += stat.st_size
                name = item.name.split(".", 1)[0]
                if item.name.endswith(".tmp") or not _HEX.fullmatch(name):
                    if item.name.endswith(".tmp") and now - stat.st_mtime > STALE_SECONDS:
                        stale.append(Path(item.path))
                    continue
                groups.setdefault(name, []).append((Path(item.path), stat))
            for name, files in groups.items():
                record = [stat for path, stat in files if path.name == f"{name}{RECORD}"]
                size = sum(stat.st_size for _, stat in files)
                if record:
                    # the record first: once it is gone, readers miss instead of finding half an entry
                    ordered = sorted((path for path, _ in files), key=lambda p: not p.name.endswith(RECORD))
                    entries.append((record[0].st_mtime, size, ordered))
                elif all(now - stat.st_mtime > STALE_SECONDS for _, stat in files):
                    stale.extend(path for path, _ in files)     # parts whose record was never written
        return entries, stale, total

    def _listing(self, kind: str) -> list[os.DirEntry]:
        """The entries of KIND/, or none when it is missing or a symlink (eviction and clear must never
        delete in a folder a symlink points to)."""
        folder = self.root / kind
        try:
            if folder.is_symlink() or not folder.is_dir():
                return []
            return list(os.scandir(folder))
        except OSError:
            return []

    def evict(self) -> int:
        """Sweep stale temporary files and remove least recently used entries until under the cap."""
        with _UPKEEP_LOCK:
            _WRITTEN_SINCE_SCAN[self.root] = 0
        entries, stale, total = self._scan()
        removed = 0
        for path in stale:
            total -= _unlink(path)
        for _, size, files in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            for path in files:
                total -= _unlink(path)
            removed += 1
        return removed

    def usage(self) -> Usage:
        entries, stale, total = self._scan()
        per_kind = {kind: 0 for kind in KINDS}
        for _, _, files in entries:
            per_kind[files[0].parent.name] += 1
        return Usage(per_kind, total, len(stale))

    def clear(self) -> Cleared:
        """Remove every entry, part and temporary file (only names this module makes). Counts only what was
        removed: on a cache the user cannot write to, nothing is, and `failed` says so."""
        records = freed = failed = 0
        reason = ""
        for kind in KINDS:
            for item in self._listing(kind):
                name = item.name.split(".", 1)[0]
                ours = _HEX.fullmatch(name) or (item.name.startswith(".") and item.name.endswith(".tmp"))
                if not ours or item.is_dir(follow_symlinks=False):
                    continue
                try:
                    size = item.stat(follow_symlinks=False).st_size
                    os.unlink(item.path)
                except FileNotFoundError:
                    continue                # removed meanwhile, by eviction in another run
                except OSError as exc:
                    failed += 1
                    reason = reason or exc.strerror or type(exc).__name__
                    continue
                records += item.name == f"{name}{RECORD}"
                freed += size
        return Cleared(records, freed, failed, reason)


def _ours(root: Path) -> bool:
    """Whether a folder is empty or tagged, from one listing: a tag test and then a listing could see no tag
    and then the tag itself, written between the two by a run preparing the folder."""
    with os.scandir(root) as listing:
        entries = [(entry.name, entry.is_file()) for entry in listing]
    return not entries or (TAG_NAME, True) in entries


def _write_tag(tag: Path) -> None:
    """The tag created in place, before anything else is in the folder: written to a temporary file and
    renamed, it left a moment in which the folder held a file and no tag, and another run or pool worker
    checking the folder then (CacheDir.at) refused it as not a traceattr cache. A tag that another writer
    creates first is left to it."""
    try:
        fd = os.open(tag, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as out:
        out.write(TAG_TEXT.encode())
    os.chmod(tag, _FILE_MODE)


def _temporary(folder: Path) -> str:
    path = folder / f".{secrets.token_hex(8)}.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    os.close(fd)
    os.chmod(path, _FILE_MODE)
    return str(path)


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unlink(path: Path) -> int:
    try:
        size = path.lstat().st_size
        path.unlink()
        return size
    except OSError:
        return 0


def _env_max() -> int:
    text = os.environ.get(ENV_MAX)
    return DEFAULT_MAX_BYTES if not text else parse_size(text)
