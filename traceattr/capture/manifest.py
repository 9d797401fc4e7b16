"""Per-rank manifest (out_dir/rank{R}/manifest.json) and the run view assembled from all of them.

Each rank writes only its own folder, so no two processes ever write the same file. File names inside a
manifest are relative to the rank folder; `read_run` turns them into absolute paths and checks they exist.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceattr.errors import TraceDiscoveryError
from traceattr.io.limits import MAX_RANK, MAX_WORLD_SIZE

MANIFEST_NAME = "manifest.json"
FORMAT = "traceattr.capture/1"


def rank_dir_name(rank: int) -> str:
    return f"rank{rank}"


def trace_name(window: int, compress: bool) -> str:
    return f"window{window}.pt.trace.json" + (".gz" if compress else "")


def summary_name(window: int) -> str:
    return f"window{window}.kernels.parquet"


def memory_name(window: int) -> str:
    return f"window{window}.memory.pickle"


def memory_view_name(window: int) -> str:
    return f"window{window}.memory.html"


def temp_name(window: int, stage: str) -> str:
    """Hidden, and never ending in .json/.json.gz/.parquet, so no discovery picks up a half-written file."""
    return f".window{window}.{stage}.tmp"


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


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
    with _WRITING:
        if _EXITING and threading.current_thread() is not threading.main_thread():
            return      # the process is ending: the file on disk stays as last written, whole
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


def config_ranks(config) -> str | list | None:
    """A manifest config's `ranks` as written: "all", a list (an int is a list of one), None for other."""
    ranks = config.get("ranks") if isinstance(config, dict) else None
    return ranks if ranks == "all" else [ranks] if type(ranks) is int else ranks if isinstance(ranks, list) else None


class Manifest:
    """Thread-safe manifest of one rank; every change is written to disk atomically at once."""

    def __init__(self, rank_dir: Path, header: dict[str, Any]) -> None:
        self.path = rank_dir / MANIFEST_NAME
        self._lock = threading.Lock()
        self._batching = self._dirty = self._stale = False
        self._data: dict[str, Any] = {
            "format": FORMAT, "host": socket.gethostname(), "pid": os.getpid(),
            "started_at_ns": time.time_ns(), "stopped_at_ns": None, "state": "running",
            **header, "windows": [], "errors": [], "unfinished": [],
        }

    def flush(self) -> None:
        """Write the manifest; an unwritable folder raises OSError for the caller to record as a fault."""
        with self._lock:
            write_json_atomic(self.path, self._data)

    def try_flush(self) -> None:
        if self._batching:
            self._dirty = True
            return
        try:
            self.flush()
        except OSError as exc:
            # the folder gone: the error is already in the status. A full disk is not: the manifest stayed
            # 'running' with every window 'writing' after stop(), and check called the process dead
            if not self._stale and self.path.parent.is_dir():
                self._stale = True
                from traceattr.capture.warn import warn
                warn(f"traceattr.capture: cannot update {self.path} ({exc.strerror or exc}): it stays as last "
                     "written, so `traceattr check` may read this rank as still running or its windows as "
                     "unfinished")

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

    def update_window(self, window: int, **changes: Any) -> None:
        with self._lock:
            for entry in self._data["windows"]:
                if entry["window"] == window:
                    entry.update(changes)
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

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._data, default=str))


@dataclass(frozen=True)
class CaptureRun:
    """The run view: every rank manifest under one out_dir, with absolute paths of the files that exist."""

    out_dir: str
    manifests: dict[int, dict] = field(default_factory=dict)
    world_size: int = 0
    windows: tuple[dict, ...] = ()       # rank, window, first_step, last_step, partial, trace, kernels, ...
    errors: dict[int, tuple[str, ...]] = field(default_factory=dict)
    missing_files: tuple[str, ...] = ()  # listed by a manifest but absent (a writer that never finished)
    whole: bool = True                   # every rank folder read; False: some ranks only, none counted missing

    @property
    def ranks(self) -> list[int]:
        return sorted(self.manifests)

    @property
    def trace_files(self) -> list[str]:
        return [w["trace"] for w in self.windows if w.get("trace")]

    @property
    def missing_ranks(self) -> tuple[int, int]:
        """(how many, the first) ranks the config selected that wrote no manifest (a process that never
        reached start(), or died before it); (0, -1) when every selected rank did or the config is unknown."""
        if not self.whole:
            return 0, -1
        configs = [data.get("config") for data in self.manifests.values()]
        chosen = {json.dumps(c.get("ranks"), sort_keys=True) for c in configs if isinstance(c, dict)}
        if len(chosen) != 1:
            return 0, -1
        ranks = config_ranks({"ranks": json.loads(chosen.pop())})
        if ranks == "all":
            present = sum(1 for rank in self.manifests if 0 <= rank < self.world_size)
            first = next((r for r in range(self.world_size) if r not in self.manifests), -1)
            return self.world_size - present, first
        missing = sorted({r for r in ranks or [] if type(r) is int and 0 <= r < self.world_size} - set(self.manifests))
        return len(missing), missing[0] if missing else -1

    @property
    def problems(self) -> list[str]:
        """Why the run is not complete and clean: one line per cause; empty when it is."""
        out = []
        count, first = self.missing_ranks
        if count:
            out.append(f"{count} selected rank(s) wrote no manifest (rank {first}{' and others' if count > 1 else ''}):"
                       " the process never called start(), or died before it")
        for rank, data in sorted(self.manifests.items()):
            state = data.get("state")
            if state == "running":
                out.append(f"rank {rank}: state 'running': the process died, or has not called stop() yet")
            elif state == "done":
                out.append(f"rank {rank}: state 'done': stop() was never called, so writes were not flushed")
            elif state not in ("stopped", "not_selected", "disabled"):
                out.append(f"rank {rank}: state {state!r}")
            if data.get("unfinished"):
                out.append(f"rank {rank}: writes unfinished at stop(): {', '.join(map(str, data['unfinished']))}")
            out += [f"rank {rank}: {error}" for error in self.errors.get(rank, ())]
        out += [f"rank {w['rank']} window {w['window']}: {w.get('status')}" for w in self.windows
                if w.get("status") != "written"]
        out += [f"missing: {path}" for path in self.missing_files]
        return out

    @property
    def ok(self) -> bool:
        """True only for a run every rank of which stopped cleanly with every window fully written."""
        return not self.problems


def _bounded(data: dict, key: str, high: int, default: int | None = None) -> int:
    """An integer field of a manifest in 0..high (ValueError otherwise: a forged or foreign manifest)."""
    value = data.get(key, default) if default is not None else data[key]
    if value is None and default is not None:
        value = default
    if type(value) is not int or not 0 <= value <= high:
        raise ValueError(f"{key} {str(value)[:40]!r} is not an integer in 0..{high}")
    return value


def _window_entry(entry) -> dict:
    """A manifest's window entry, refused (ValueError) unless it has the shape the capture writes."""
    if not isinstance(entry, dict) or type(entry.get("window")) is not int or entry["window"] < 0:
        raise ValueError("a window entry without a window number")
    files = entry.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError(f"window {entry['window']}: files is not a map of names")
    return entry


def read_run(out_dir: str | os.PathLike, rank_manifest: str | os.PathLike | None = None) -> CaptureRun:
    """Assemble the run view from out_dir/rank*/manifest.json, or from `rank_manifest` alone (one rank's
    view: no other rank counts as missing). Two manifests of one rank (a copied rank folder) are refused."""
    root = Path(out_dir)
    whole = rank_manifest is None
    paths = sorted(root.glob(f"rank*/{MANIFEST_NAME}")) if whole else [Path(rank_manifest)]
    if not paths:
        raise TraceDiscoveryError(f"{root}: no capture manifests (expected rank*/{MANIFEST_NAME})")
    manifests, windows, errors, missing, where = {}, [], {}, [], {}
    for path in paths:
        try:
            data = json.loads(path.read_text())
            rank, world = _bounded(data, "rank", MAX_RANK), _bounded(data, "world_size", MAX_WORLD_SIZE, 0)
            rank_errors = tuple(map(str, data.get("errors", ())))
            entries = [_window_entry(entry) for entry in data.get("windows", ())]
        except RecursionError:
            raise TraceDiscoveryError(f"{path}: not a readable capture manifest (nested too deeply)") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TraceDiscoveryError(f"{path}: not a readable capture manifest ({exc})") from exc
        if rank in where:       # its windows would be counted twice, or two runs' windows merged
            raise TraceDiscoveryError(f"{root}: two capture manifests say rank {rank} ({where[rank]}, {path}): "
                                      "not one run")
        where[rank] = path
        manifests[rank] = dict(data, world_size=world)
        errors[rank] = rank_errors
        for entry in entries:
            row = {"rank": rank, **{k: v for k, v in entry.items() if k != "files"}}
            for kind, name in entry.get("files", {}).items():
                full = path.parent / name
                if full.exists():
                    row[kind] = str(full)
                else:
                    missing.append(str(full))
            windows.append(row)
    world = max((m["world_size"] for m in manifests.values()), default=0)
    windows.sort(key=lambda w: (w["rank"], w["window"]))
    return CaptureRun(str(root), manifests, world, tuple(windows), errors, tuple(missing), whole)
