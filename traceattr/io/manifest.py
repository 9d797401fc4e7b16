"""The capture manifest format, and reading it: what a traceattr.capture run says it wrote, per rank.

traceattr.capture writes it (capture/manifest.py, inside training); discovery, summaries, `check` and
`traceattr.capture.read_run` read it here. Every value read is range-checked where it enters.
"""

from __future__ import annotations

import json
import locale
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from traceattr.errors import TraceDiscoveryError
from traceattr.io.discover import MANIFEST_NAME
from traceattr.io import limits
from traceattr.io.limits import MAX_RANK, MAX_WORLD_SIZE

try:   # isal reads a gzip about 5x faster (a dependency); the standard library's works too
    from isal import igzip as _gzip
except ImportError:   # pragma: no cover
    import gzip as _gzip




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


def record_name(window: int) -> str:
    """The writer process's own account of a window (its files, errors, whether it is done), written
    atomically as each file lands: what the manifest lacks when the training process was killed before it
    recorded them. Removed once the manifest lists them."""
    return f".window{window}.record"


FINAL_STATES = ("stopped", "failed", "not_selected", "disabled")


def process_identity() -> dict | None:
    """What tells this process from a later one with the same pid: the boot, the pid namespace and its start
    time in clock ticks since boot (Linux); None elsewhere."""
    try:
        return {"boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                "pid_ns": os.readlink("/proc/self/ns/pid"), "start_ticks": _start_ticks("self")}
    except (OSError, ValueError, IndexError):
        return None


def _start_ticks(pid) -> int:
    """Field 22 of /proc/PID/stat (after the command name, which may hold spaces and parentheses)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def process_alive(data: dict) -> bool | None:
    """Whether the process that wrote manifest `data` still runs: None when this cannot tell (another host,
    another pid namespace or boot, a manifest without its identity)."""
    pid, known = data.get("pid"), data.get("process")
    if data.get("host") != socket.gethostname() or type(pid) is not int or pid <= 0:
        return None
    mine = process_identity()
    if not isinstance(known, dict) or mine is None:
        return None
    if known.get("boot_id") != mine["boot_id"] or known.get("pid_ns") != mine["pid_ns"]:
        return None
    try:
        return _start_ticks(pid) == known.get("start_ticks")
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):
        return None


def writer_alive(rank_dir: Path) -> bool | None:
    """Whether a writer process still works in `rank_dir`: each holds a lock on its log (`.writer.log`) for
    as long as it runs. None when the lock cannot be tried (a file system without locks)."""
    try:
        import fcntl
    except ImportError:     # pragma: no cover - Windows
        return None
    try:
        with open(rank_dir / WRITER_LOG, "rb") as log:
            try:
                fcntl.flock(log.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(log.fileno(), fcntl.LOCK_UN)
            return False
    except FileNotFoundError:
        return False
    except OSError:
        return None


WRITER_LOG = ".writer.log"      # the writer process's stderr (traceattr.capture.writer.LOG_NAME)


def config_ranks(config) -> str | list | None:
    """A manifest config's `ranks` as written: "all", a list (an int is a list of one), None for other."""
    ranks = config.get("ranks") if isinstance(config, dict) else None
    return ranks if ranks == "all" else [ranks] if type(ranks) is int else ranks if isinstance(ranks, list) else None


@dataclass(frozen=True)
class CaptureRun:
    """The run view: every rank manifest under one out_dir, with absolute paths of the files that exist.

    A manifest can be behind the files: the training process killed during stop() (torchrun passes one
    rank's SIGTERM to the others; SLURM ends jobs so) while its writer process, out of the job's process
    group, finished every window. Its windows still `writing` are reconciled: from the writer's records
    (`.window{W}.record`), else from the files on disk (a whole gzip, a parquet that loads)."""

    out_dir: str
    manifests: dict[int, dict] = field(default_factory=dict)   # as read; `unfinished` as reconciled
    world_size: int = 0
    windows: tuple[dict, ...] = ()       # rank, window, first_step, last_step, partial, trace, kernels, ...
    errors: dict[int, tuple[str, ...]] = field(default_factory=dict)
    missing_files: tuple[str, ...] = ()  # listed by a manifest but absent (a writer that never finished)
    whole: bool = True                   # every rank folder read; False: some ranks only, none counted missing
    processes: dict[int, bool | None] = field(default_factory=dict)   # the training process runs; None: unknown
    writers: dict[int, bool | None] = field(default_factory=dict)     # a writer process still works there
    notes: tuple[str, ...] = ()          # what was reconciled from the writer's records or the disk

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
            writing = any(w["rank"] == rank and w.get("status") == "writing" for w in self.windows)
            settled = not writing and not data.get("unfinished")
            if state == "running":
                out.append(self._running(rank, data))
            elif state == "done" and not settled:
                out.append(f"rank {rank}: state 'done': stop() was never called, so writes were not flushed")
            elif state == "stopping" and not settled:
                out.append(f"rank {rank}: state 'stopping': " + (
                    "stop() is still waiting for the writes" if self.processes.get(rank) else
                    "the process ended inside stop() (killed?) before every write landed"))
            elif state not in FINAL_STATES + ("done", "stopping"):
                out.append(f"rank {rank}: state {state!r}")
            if data.get("unfinished"):
                out.append(f"rank {rank}: writes unfinished at stop(): {', '.join(map(str, data['unfinished']))}")
            out += [f"rank {rank}: {error}" for error in self.errors.get(rank, ())]
        for w in self.windows:
            if w.get("status") == "writing":
                alive = self.writers.get(w["rank"])
                out.append(f"rank {w['rank']} window {w['window']}: writing" + (
                    " (its writer process is still at it)" if alive else "" if alive is None else
                    ", never finished: no writer process is at it (killed, or the disk refused it)"))
            elif w.get("status") != "written":
                out.append(f"rank {w['rank']} window {w['window']}: {w.get('status')}")
        out += [f"missing: {path}" for path in self.missing_files]
        return out

    def _running(self, rank: int, data: dict) -> str:
        """The line for a manifest still `running`: why, as far as this process can tell."""
        failed, alive, pid = data.get("write_error"), self.processes.get(rank), data.get("pid")
        if isinstance(failed, dict):
            return (f"rank {rank}: state 'running' as last written: its manifest could not be updated after "
                    f"{_when(failed.get('at_ns'))} ({str(failed.get('message'))[:200]}), so it may be behind")
        if alive:
            return f"rank {rank}: state 'running': the process (pid {pid}) has not called stop() yet"
        if alive is False:
            return (f"rank {rank}: state 'running': the process (pid {pid}) ended without calling stop() (killed, "
                    "or it crashed): the windows it exported are listed, one it was recording is lost")
        return f"rank {rank}: state 'running': the process died, or has not called stop() yet"

    @property
    def ok(self) -> bool:
        """True only for a run every rank of which stopped cleanly with every window fully written."""
        return not self.problems


def _when(at_ns) -> str:
    if type(at_ns) is not int:
        return "some point"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at_ns / 1e9))


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


_RECORD_MAX_BYTES = 1 << 20


def window_file_names(window: int) -> set[str]:
    """Every name a window's files may have (a record naming anything else is not believed)."""
    return {trace_name(window, True), trace_name(window, False), summary_name(window), memory_name(window),
            memory_view_name(window)}


def read_record(path: Path) -> dict | None:
    """One writer record, or None when it is not one of the shape the writer writes."""
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read(_RECORD_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or type(record.get("window")) is not int or record["window"] < 0:
        return None
    files, errors = record.get("files", {}), record.get("errors", [])
    names = window_file_names(record["window"])
    if not isinstance(files, dict) or not all(isinstance(k, str) and v in names for k, v in files.items()):
        return None
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        return None
    entry = record.get("entry")
    if entry is not None and not (isinstance(entry, dict) and entry.get("window") == record["window"]):
        return None
    return record


def read_records(rank_dir: Path) -> dict[int, dict]:
    out = {}
    for path in sorted(rank_dir.glob(".window*.record")):
        record = read_record(path)
        if record is not None and path.name == record_name(record["window"]):
            out[record["window"]] = record
    return out


_ENTRY_KEYS = ("window", "first_step", "last_step", "partial", "stopped_at_step")    # what a record may add


def apply_records(data: dict, records: dict[int, dict]) -> tuple[list[int], list[int]]:
    """Merge the writer's finished records into manifest `data` (in place): a window still `writing` (or
    not listed at all: its add failed) takes the record's files, status, errors and degraded. Returns the
    windows whose records the manifest now covers (merged, or already final in it), and those merged."""
    entries = {e["window"]: e for e in data.get("windows", []) if isinstance(e, dict)
               and type(e.get("window")) is int}
    covered, merged = [], []
    for window, record in sorted(records.items()):
        if not record.get("done"):
            continue
        entry = entries.get(window)
        if entry is None:
            if not isinstance(record.get("entry"), dict):
                continue
            entry = entries[window] = {key: value for key, value in record["entry"].items()
                                       if key in _ENTRY_KEYS and (value is None or type(value) in (int, bool))}
            entry.update(window=window, status="writing", files={})
            data.setdefault("windows", []).append(entry)
        elif entry.get("status") != "writing":
            covered.append(window)
            continue
        errors = list(record.get("errors", []))
        entry["files"] = {**entry.get("files", {}), **record.get("files", {})}
        entry["status"] = "incomplete" if errors else "written"
        entry["degraded"] = record.get("degraded")
        if errors:
            entry["errors"] = errors
        data.setdefault("errors", [])
        data["errors"] += [line for line in (f"window {window}: {e}" for e in errors) if line not in data["errors"]]
        covered.append(window)
        merged.append(window)
    if merged:
        data["unfinished"] = [u for u in data.get("unfinished", []) if _window_of(u) not in merged]
        data["windows"].sort(key=lambda e: e.get("window", 0) if isinstance(e, dict) else 0)
    return covered, merged


def _window_of(unfinished) -> int | None:
    """The window of an `unfinished` line ("window3: compression")."""
    head = str(unfinished).split(":", 1)[0]
    return int(head[6:]) if head.startswith("window") and head[6:].isdecimal() else None


_CHECKED: dict[tuple, bool] = {}     # (path, size, mtime_ns) -> whole: each file is read through once


def whole_file(path: Path) -> bool:
    """Whether a window's file under its final name is whole: a gzip read through to its end (its CRC and
    length checked), a JSON export that ends as one does, a parquet file that loads; other kinds exist."""
    try:
        stat = path.stat()
    except OSError:
        return False
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _CHECKED:
        if len(_CHECKED) > 4096:
            _CHECKED.clear()
        _CHECKED[key] = _check_whole(path)
    return _CHECKED[key]


def _check_whole(path: Path) -> bool:
    name = path.name
    try:
        if name.endswith(".gz"):
            with _gzip.open(path, "rb") as handle:
                while handle.read(1 << 22):
                    pass
            return True
        if name.endswith(".json"):
            with open(path, "rb") as handle:
                handle.seek(max(0, path.stat().st_size - 256))
                return handle.read().rstrip().endswith(b"}")
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            pq.ParquetFile(path).read()
            return True
        return path.is_file()
    except ImportError:     # no pyarrow here: a parquet under its final name was renamed there whole
        return path.is_file()
    except Exception:  # noqa: BLE001 - OSError, EOFError, zlib.error, arrow's own: not whole
        return False


def reconcile(rank_dir: Path, data: dict, writer: bool | None) -> tuple[dict, list[str]]:
    """A copy of manifest `data` with its windows still `writing` settled from the writer's records, then
    from the whole files on disk; and notes saying what was settled so. A window whose files are not all
    there stays `writing` while a writer process still works here; else it is `incomplete` (its trace is
    there) with the reason, or stays `writing`."""
    data = json.loads(json.dumps(data))
    notes = []
    _, merged = apply_records(data, read_records(rank_dir))
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    for entry in data.get("windows", []):
        window = entry.get("window")
        if entry.get("status") != "writing":
            if window in merged:
                entry["reconciled"] = "the writer process's record"
                notes.append(f"window {window}: settled from the writer process's record")
            continue
        files = dict(entry.get("files", {}))
        for kind, names in (("trace", (trace_name(window, True), trace_name(window, False))),
                            ("kernels", (summary_name(window),)), ("memory", (memory_name(window),)),
                            ("memory_view", (memory_view_name(window),))):
            for name in names:
                if kind not in files and whole_file(rank_dir / name):
                    files[kind] = name
        missing = []
        if "trace" not in files:
            missing.append("its trace")
        elif config.get("compress", True) is not False and not files["trace"].endswith(".gz"):
            missing.append("its compression (the trace is kept uncompressed)")
        if config.get("kernel_summary", True) is not False and "kernels" not in files:
            missing.append("its kernel summary")
        entry["files"] = files
        if not missing:
            entry["status"], entry["reconciled"] = "written", "whole files on disk"
            notes.append(f"window {window}: settled from its whole files on disk")
        elif writer is False and "trace" in files:
            entry["status"], entry["reconciled"] = "incomplete", "whole files on disk"
            entry["errors"] = [f"{what} never finished: no writer process is at it" for what in missing]
            data["errors"] = list(data.get("errors", [])) + [f"window {window}: {e}" for e in entry["errors"]]
            notes.append(f"window {window}: settled from its whole files on disk, without "
                         f"{', '.join(m.split(' (')[0] for m in missing)}")
    final = {e.get("window") for e in data.get("windows", []) if e.get("status") != "writing"}
    data["unfinished"] = [u for u in data.get("unfinished", []) if _window_of(u) not in final]
    return data, notes


def manifest_text(raw: bytes) -> str:
    """A manifest's bytes as Path.read_text gives them (the locale's encoding, strict)."""
    return raw.decode(locale.getpreferredencoding(False))


def read_run(out_dir: str | os.PathLike, rank_manifest: str | os.PathLike | None = None, *,
             known: frozenset[str] | set[str] = frozenset(), manifests: list[Path] | None = None,
             read=None) -> CaptureRun:
    """Assemble the run view from out_dir/rank*/manifest.json, or from `rank_manifest` alone (one rank's
    view: no other rank counts as missing). Two manifests of one rank (a copied rank folder) are refused.
    Windows a manifest still has `writing`, or does not list, are reconciled (CaptureRun). `known`: files
    the command's walk found (io.discover.Inputs.held_paths), which exist without another look; `manifests`:
    out_dir/rank*/manifest.json as that walk found them (io.discover.Inputs.rank_manifests), not listed again;
    `read(path) -> bytes`: each manifest's bytes as that walk's command read them once
    (io.discover.Inputs.read_manifest)."""
    root = Path(out_dir)
    whole = rank_manifest is None
    if not whole:
        paths = [Path(rank_manifest)]
    else:
        paths = sorted(root.glob(f"rank*/{MANIFEST_NAME}")) if manifests is None else sorted(manifests)
    if not paths:
        raise TraceDiscoveryError(f"{root}: no capture manifests (expected rank*/{MANIFEST_NAME})")
    manifests, windows, errors, missing, where = {}, [], {}, [], {}
    processes, writers, notes = {}, {}, []
    for path in paths:
        try:
            data = json.loads(manifest_text(limits.read_at_most(path, limits.MAX_MANIFEST_BYTES) if read is None
                                            else read(path)))
            rank, world = _bounded(data, "rank", MAX_RANK), _bounded(data, "world_size", MAX_WORLD_SIZE, 0)
            for entry in data.get("windows", ()):
                _window_entry(entry)
            unsettled = data.get("state") not in FINAL_STATES or data.get("unfinished") or any(
                entry.get("status") == "writing" for entry in data.get("windows", ()))
            writer = writer_alive(path.parent) if unsettled else False
            if unsettled:
                data, settled = reconcile(path.parent, data, writer)
                notes += [f"rank {rank} {note}" for note in settled]
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
        processes[rank] = process_alive(data) if data.get("state") not in FINAL_STATES else None
        writers[rank] = writer
        for entry in entries:
            row = {"rank": rank, **{k: v for k, v in entry.items() if k != "files"}}
            for kind, name in entry.get("files", {}).items():
                full = path.parent / name
                if str(full) in known or full.exists():
                    row[kind] = str(full)
                else:
                    missing.append(str(full))
            windows.append(row)
    world = max((m["world_size"] for m in manifests.values()), default=0)
    windows.sort(key=lambda w: (w["rank"], w["window"]))
    return CaptureRun(str(root), manifests, world, tuple(windows), errors, tuple(missing), whole, processes,
                      writers, tuple(notes))
