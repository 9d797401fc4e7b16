"""Per-rank manifest (out_dir/rank{R}/manifest.json) and the run view assembled from all of them.

Each rank writes only its own folder, so no two processes ever write the same file. File names inside a
manifest are relative to the rank folder; `read_run` turns them into absolute paths and checks they exist.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

# the format and its reading live in io (discovery and `check` read manifests too); capture writes them
from traceattr.capture.warn import warn
from traceattr.io.manifest import (FINAL_STATES, FORMAT, MANIFEST_NAME, WRITER_LOG, CaptureRun,  # noqa: F401
                                   apply_records, config_ranks, memory_name, memory_view_name, process_alive,
                                   process_identity, rank_dir_name, read_record, read_records, read_run,
                                   reconcile, record_name, summary_name, temp_name, trace_name, whole_file,
                                   window_file_names, writer_alive)


RESERVE_NAME = ".manifest.reserve"    # space kept for the manifest on a disk that fills up (Manifest.flush)
RESERVE_BYTES = 64 * 1024
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


# The writer's reaper is a daemon thread: the interpreter freezes it wherever it stands once the exit's
# atexit calls are done, which between the temporary's write and its rename leaves the temporary behind. So
# the exit waits for a write under way, and from then on only the main thread writes.
_WRITING = threading.Lock()
_EXITING = False
_EXIT_WAIT_S = 10.0     # a write on a hung network disk does not hold the exit for longer
_UNDER_WAY: list[Path] = []      # the temporary being written, for an exit that cannot wait for its rename


def _at_exit() -> None:
    global _EXITING
    got = False
    try:
        got = _WRITING.acquire(timeout=_EXIT_WAIT_S)
    except BaseException:  # noqa: BLE001 - a Ctrl-C while the exit waits: the reaper must stop writing all the same
        pass
    finally:
        _EXITING = True
        if got:
            _WRITING.release()
        else:       # a hung disk or a second Ctrl-C: the manifest stays as last renamed, its temporary goes
            for tmp in list(_UNDER_WAY):
                with contextlib.suppress(BaseException):
                    tmp.unlink(missing_ok=True)


atexit.register(_at_exit)


def write_json_atomic(path: Path, data: dict) -> bool:
    """Write `data` to `path` whole or not at all; False when the process is exiting and this is not its
    main thread (nothing is written)."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
    with _WRITING:
        if _EXITING and threading.current_thread() is not threading.main_thread():
            return False    # the process is ending: the file on disk stays as last written, whole
        _UNDER_WAY.append(tmp)
        try:
            tmp.write_text(json.dumps(data, indent=1, default=str))
            os.replace(tmp, path)
        except BaseException:       # a full disk: no half-written temporary is left beside the manifest
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
        finally:
            _UNDER_WAY.remove(tmp)
    return True


class Manifest:
    """Thread-safe manifest of one rank; every change is written to disk atomically at once.

    A disk that fills up: the manifest kept its first version (`running`, no errors, windows `writing`) and
    `traceattr check` blamed a dead process. So the first write also sets aside RESERVE_BYTES of space
    (`.manifest.reserve`); a write that fails for want of space frees it and is made again, recording the
    failure, and `stale` says whether the file on disk is behind (status() shows it)."""

    def __init__(self, rank_dir: Path, header: dict[str, Any]) -> None:
        self.path = rank_dir / MANIFEST_NAME
        self._reserve = rank_dir / RESERVE_NAME
        self._lock = threading.Lock()
        self._batching = self._dirty = self._warned = False
        self._reserved = False
        self.stale: str | None = None       # why the manifest on disk is behind; None when it is current
        self._drop_after_flush: list[Path] = []   # the writer's records of windows this manifest now lists
        self._data: dict[str, Any] = {
            "format": FORMAT, "host": socket.gethostname(), "pid": os.getpid(),
            "process": process_identity(), "started_at_ns": time.time_ns(), "stopped_at_ns": None,
            "state": "running", **header, "windows": [], "errors": [], "unfinished": [],
        }

    def flush(self) -> None:
        """Write the manifest; an unwritable folder raises OSError for the caller to record as a fault."""
        with self._lock:
            try:
                if not write_json_atomic(self.path, self._data):
                    self.stale = "the process is exiting"
                    return
            except OSError as exc:
                if exc.errno not in _DISK_FULL or not self._free_reserve():
                    self.stale = _why(exc)
                    raise
                # the space kept for this: the manifest says what happened instead of staying as it was
                self._data["write_error"] = {"at_ns": time.time_ns(), "message": _why(exc)}
                self._data["errors"].append(f"manifest: an update failed ({_why(exc)}); it was written from the "
                                            f"space kept for it, later updates may be missing")
                try:
                    if not write_json_atomic(self.path, self._data):
                        self.stale = "the process is exiting"
                        return
                except OSError as again:
                    self.stale = _why(again)
                    raise
            self.stale = None
            drop, self._drop_after_flush = self._drop_after_flush, []
            if not self._reserved:
                self._reserved = True
                self._keep_reserve()
        for path in drop:       # the manifest on disk lists these windows now
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    def try_flush(self) -> None:
        if self._batching:
            self._dirty = True
            return
        try:
            self.flush()
        except OSError as exc:
            # the folder gone: the error is already in the status. A full disk is not: the manifest stayed
            # 'running' with every window 'writing' after stop(), and check called the process dead
            if not self._warned and self.path.parent.is_dir():
                self._warned = True
                warn(f"traceattr.capture: cannot update {self.path} ({exc.strerror or exc}): it stays as last "
                     "written, so `traceattr check` may read this rank as still running or its windows as "
                     "unfinished")

    def _keep_reserve(self) -> None:
        """Set aside space for one manifest write (incompressible, so a compressing file system keeps it)."""
        try:
            with open(self._reserve, "wb") as out:
                out.write(os.urandom(RESERVE_BYTES))
        except OSError:     # a disk already full: nothing kept, and status() says so when a write fails
            with contextlib.suppress(OSError):
                self._reserve.unlink(missing_ok=True)

    def _free_reserve(self) -> bool:
        try:
            self._reserve.unlink()
            return True
        except OSError:
            return False

    def release_reserve(self) -> None:
        """The last write is done (stop() with nothing pending): the kept space goes back."""
        with self._lock:
            self._free_reserve()

    @contextlib.contextmanager
    def batched(self):
        """Changes inside are written once, at the end (several writer events read in one poll)."""
        self._batching, self._dirty = True, False
        try:
            yield self
        finally:
            self._batching = False
            if self._dirty:
                self.try_flush()

    def add_window(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._data["windows"].append(entry)
        self.try_flush()

    def update_window(self, window: int, record: Path | None = None, **changes: Any) -> None:
        """`record`: the writer's record of the window, removed once a manifest with these changes is written."""
        with self._lock:
            for entry in self._data["windows"]:
                if entry["window"] == window:
                    entry.update(changes)
            if record is not None:
                self._drop_after_flush.append(record)
        self.try_flush()

    def add_file(self, window: int, kind: str, name: str, flush: bool = True) -> None:
        """flush=False: written with the next change (the profiler writes a window's files with its "done",
        so the training thread pays for one small file write per window)."""
        with self._lock:
            for entry in self._data["windows"]:
                if entry["window"] == window:
                    entry.setdefault("files", {})[kind] = name
        if flush:
            self.try_flush()

    def add_error(self, message: str) -> None:
        with self._lock:
            self._data["errors"].append(message)
        self.try_flush()

    def set(self, **changes: Any) -> None:
        with self._lock:
            self._data.update(changes)
        self.try_flush()

    @property
    def owner(self) -> list:
        """[pid, started_at_ns]: what tells this manifest from a later one in the same folder."""
        return [self._data["pid"], self._data["started_at_ns"]]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._data, default=str))


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


# ---- the writer's records, and reconciling a manifest with them and with the disk ------------------------




