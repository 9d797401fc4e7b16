"""Parquet cache of decoded trace files, kept beside the traces (`.traceattr-cache/`) or, when that folder
is read-only, in the user cache folder (`$XDG_CACHE_HOME/traceattr`, else `~/.cache/traceattr`).

One entry per trace file, keyed by its absolute path. An entry is served only when the file's size and
mtime_ns, the cache format and the code fingerprint (a hash of the package's sources) all match, so a
changed or replaced trace, or a changed decoder, is never served stale. Each entry is
`<key>.json` (facts + token) and `<key>.<token>.{device,host,markers}.parquet`; the JSON is replaced
atomically after its tables exist, so a reader sees a whole old entry, a whole new one, or a miss.
Anything unreadable (corrupt, truncated, another version) is a miss and is rewritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import tempfile
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from traceattr.io.decode import DecodedFile
from traceattr.io.parallel import FileFailure

CACHE_DIR_NAME = ".traceattr-cache"
CACHE_FORMAT = 1
_TABLES = ("device", "host", "markers")
_UMASK = os.umask(0)
os.umask(_UMASK)
_FILE_MODE = 0o666 & ~_UMASK     # mkstemp makes 0600 files; a shared trace folder needs the usual mode
_PATH_MARK = "\x00path\x00"       # notes mention the file; stored with a mark, filled in with today's name


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of every .py file of the installed package: any code change invalidates cached results."""
    import traceattr

    digest = hashlib.sha256(f"{traceattr.__version__}/{CACHE_FORMAT}".encode())
    root = Path(traceattr.__file__).parent
    for source in sorted(root.rglob("*.py")):
        digest.update(str(source.relative_to(root)).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceattr"


def cache_dir_for(path: str | os.PathLike) -> Path:
    """`.traceattr-cache` in the trace folder (the file's folder for a file) when it is writable, else the
    user cache folder."""
    root = Path(path)
    folder = root if root.is_dir() else root.parent
    beside = folder / CACHE_DIR_NAME
    if _writable(folder) and (_writable(beside) if beside.exists() else True):
        return beside
    return user_cache_dir() / "files"


def _writable(folder: Path) -> bool:
    # a folder with no write bit at all is meant to be read-only (shared reference traces): respect that
    # even for root, whom os.access always lets write
    try:
        return bool(folder.stat().st_mode & 0o222) and os.access(folder, os.W_OK | os.X_OK)
    except OSError:
        return False


def file_key(path: str) -> dict:
    """What must be unchanged for a cached decode to be valid."""
    stat = os.stat(path)
    return {"path": os.path.abspath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "format": CACHE_FORMAT, "code": code_fingerprint()}


class FileCache:
    """get/put decoded files under one cache folder. Never raises for cache problems: a miss instead."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.hits = self.misses = self.write_errors = 0

    def _name(self, abspath: str) -> str:
        return hashlib.sha256(abspath.encode()).hexdigest()[:24]

    def get(self, path: str) -> DecodedFile | FileFailure | None:
        try:
            key = file_key(path)
            entry = self.folder / f"{self._name(key['path'])}.json"
            facts = json.loads(entry.read_text())
            if facts.get("key") != key:
                raise LookupError("stale")
            result = _from_facts(facts, path, self.folder, entry.stem)
        except Exception:      # noqa: BLE001 - missing, stale, corrupt or foreign: rebuild
            self.misses += 1
            return None
        self.hits += 1
        return result

    def put(self, path: str, result: DecodedFile | FileFailure) -> None:
        try:
            key = file_key(path)
            self.folder.mkdir(parents=True, exist_ok=True)
            name = self._name(key["path"])
            token = secrets.token_hex(6)
            facts = {"key": key, "token": token}
            if isinstance(result, FileFailure):
                facts["not_a_trace"] = result.problem
            else:
                for table in _TABLES:
                    _write_atomic_table(getattr(result, table), self.folder / f"{name}.{token}.{table}.parquet")
                facts["decoded"] = _facts_of(result)
            old_token = _current_token(self.folder / f"{name}.json")
            _write_atomic_text(self.folder / f"{name}.json", json.dumps(facts))
            if old_token and old_token != token:
                for table in _TABLES:
                    (self.folder / f"{name}.{old_token}.{table}.parquet").unlink(missing_ok=True)
        except Exception:      # noqa: BLE001 - a cache that cannot be written only costs speed
            self.write_errors += 1


def _facts_of(decoded: DecodedFile) -> dict:
    facts = {f.name: getattr(decoded, f.name) for f in dataclasses.fields(decoded) if f.name not in _TABLES}
    facts["notes"] = [note.replace(decoded.path, _PATH_MARK) for note in decoded.notes]
    del facts["path"]
    return facts


def _from_facts(facts: dict, path: str, folder: Path, name: str) -> DecodedFile | FileFailure:
    if "not_a_trace" in facts:
        return FileFailure(path, str(facts["not_a_trace"]), True)
    decoded = dict(facts["decoded"])
    token = facts["token"]
    tables = {t: pq.read_table(folder / f"{name}.{token}.{t}.parquet") for t in _TABLES}
    decoded["notes"] = tuple(note.replace(_PATH_MARK, path) for note in decoded["notes"])
    return DecodedFile(path=path, **tables, **decoded)


def _current_token(entry: Path) -> str | None:
    try:
        return json.loads(entry.read_text()).get("token")
    except Exception:      # noqa: BLE001
        return None


def _write_atomic_table(table: pa.Table, target: Path) -> None:
    handle, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=target.parent)
    os.close(handle)
    try:
        os.chmod(tmp, _FILE_MODE)
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_atomic_text(target: Path, text: str) -> None:
    handle, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, _FILE_MODE)
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
