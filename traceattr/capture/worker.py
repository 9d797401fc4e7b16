"""The writer process: `python -m traceattr.capture.worker`, one per profiling rank, at the lowest priority.

It reads one JSON job per line on stdin (a window torch has exported) and answers JSON events on stdout:
{"event": "stage"|"file"|"error"|"kernels"|"done", "window": W, ...}. Each artifact (the trace, its kernel
summary, the memory snapshot and its HTML view) is made independently: one that fails is reported and
skipped, the others are still made. It never imports torch, and it exits when stdin closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import stat
import sys
import time
from pathlib import Path

from traceattr.capture import artifacts
from traceattr.capture.manifest import (MANIFEST_NAME, RESERVE_NAME, apply_records, memory_name, memory_view_name,
                                        read_records, record_name, summary_name, temp_name, trace_name,
                                        write_json_atomic)


def main() -> int:
    _lower_priority()
    _hold_log_lock()
    parent = os.getppid()       # the training process; once it is gone, this one says what it finished
    out = sys.stdout.buffer
    gone = False
    folders: dict[str, list | None] = {}     # rank folder -> the manifest's owner (pid, started_at_ns)

    def emit(event: dict) -> None:
        nonlocal gone
        recorder.see(event)
        if gone:
            return
        try:
            out.write(json.dumps(event).encode() + b"\n")
            out.flush()
        except BrokenPipeError:
            # the training process has exited (Ctrl-C during its stop()): the queued windows still land
            # complete under their final names, as its manifest's `unfinished` says they may
            gone = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())    # nothing more to say at exit either

    for line in sys.stdin.buffer:
        job = json.loads(line)
        if job.get("quit"):
            break
        recorder = Recorder(job)
        folders[job["rank_dir"]] = job.get("owner")
        try:
            write_window(job, emit)
        except Exception as exc:  # noqa: BLE001 - one window's surprise must not end the process
            emit({"event": "error", "window": job["window"], "stage": "writer", "message": _describe(exc)})
        emit({"event": "done", "window": job["window"], "degraded": job.get("degraded")})
        if os.getppid() != parent:
            settle_orphaned(folders)
    if folders and _records_left(folders):
        _outlive_a_dying_parent(parent, out.fileno())
    if os.getppid() != parent:
        settle_orphaned(folders)
    return 0


_PF_EXITING = 0x4      # include/linux/sched.h: the process is exiting


def _records_left(folders: dict) -> bool:
    return any(Path(folder).glob(".window*.record") for folder in folders)


def _outlive_a_dying_parent(parent: int, out_fd: int, limit_s: float = 30.0) -> None:
    """Records not yet removed: the training process may not have written them into its manifest. Wait
    until it has read every event (it closes its end of stdout: close(), or its reaper), unless it is
    exiting (its reaper thread killed, it recorded nothing): then until it is gone, so that
    settle_orphaned can. Bounded."""
    deadline = time.monotonic() + limit_s
    try:
        watch = select.poll() if stat.S_ISFIFO(os.fstat(out_fd).st_mode) else None
        if watch is not None:
            watch.register(out_fd, 0)       # POLLERR: the training process closed its end, or exited
    except (OSError, AttributeError):
        watch = None
    while watch is not None and time.monotonic() < deadline and os.getppid() == parent:
        if watch.poll(100):
            break
    while time.monotonic() < deadline and os.getppid() == parent and _exiting(parent):
        time.sleep(0.02)


def _exiting(pid: int) -> bool:
    """Whether process `pid` is exiting or has exited (Linux; False where /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            fields = stat_file.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return os.path.isdir("/proc/self")      # gone, where /proc would show it
    except (OSError, IndexError):
        return False
    return fields[0] in ("Z", "X") or bool(int(fields[6]) & _PF_EXITING)


class Recorder:
    """The writer's own account of one window, `.window{W}.record` beside its files, rewritten atomically as
    each file lands or fails and when the window is done: the training process may be killed before it
    hears of them (torchrun passes one rank's SIGTERM to the others during their stop()), and its manifest
    would then say `writing` with no files for windows finished here. The training process removes the
    record once its manifest lists the window; read_run and settle_orphaned use what is left."""

    def __init__(self, job: dict) -> None:
        self.path = Path(job["rank_dir"]) / record_name(job["window"])
        self.device_requested = job.get("device_requested", True)
        self.data = {"window": job["window"], "entry": job.get("entry"), "files": {}, "errors": [],
                     "degraded": None, "done": False, "writer_pid": os.getpid()}

    def see(self, event: dict) -> None:
        kind, data = event["event"], self.data
        if event.get("window") != data["window"]:
            return
        if kind == "file":
            data["files"][event["kind"]] = event["name"]
        elif kind == "error":
            data["errors"].append(f"{event['stage']} failed: {event['message']}")
        elif kind == "done":
            data["done"] = True
            data["degraded"] = event.get("degraded") if self.device_requested else None
        else:
            return
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
        except OSError:     # a full disk: the manifest, or the files on disk, are all there is
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass


def settle_orphaned(folders: dict[str, list | None]) -> None:
    """The training process is gone (killed, or exited while this one still wrote): nothing else writes its
    manifest now, so the records of the windows finished here go into it, and the records go."""
    for folder, owner in folders.items():
        rank_dir = Path(folder)
        path = rank_dir / MANIFEST_NAME
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or owner is None or [data.get("pid"), data.get("started_at_ns")] != owner:
            continue        # another run's manifest now (overwrite=True in a later process): not ours to touch
        try:
            covered, merged = apply_records(data, read_records(rank_dir))
            if merged:
                data.setdefault("notes", []).append(
                    f"windows {merged} were recorded by the writer process (pid {os.getpid()}) after the "
                    "training process ended")
                write_json_atomic(path, data)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        settled = all(isinstance(e, dict) and e.get("status") != "writing" for e in data.get("windows", []))
        for name in [record_name(window) for window in covered] + ([RESERVE_NAME] if settled else []):
            try:
                (rank_dir / name).unlink(missing_ok=True)      # and the manifest's kept space, when all is in
            except OSError:
                pass


def _hold_log_lock() -> None:
    """A shared lock on this process's log (its stderr, `.writer.log`) for as long as it runs: how a reader
    tells that a writer still works in the folder (manifest.writer_alive)."""
    try:
        import fcntl  # lazy: fcntl is POSIX only; without it the lock is skipped

        fcntl.flock(2, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except (ImportError, OSError):    # Windows, or a log on a file system without locks
        pass


def write_window(job: dict, emit) -> None:
    window, rank_dir = job["window"], Path(job["rank_dir"])

    def fail(stage: str, exc: BaseException) -> None:
        emit({"event": "error", "window": window, "stage": stage, "message": _describe(exc)})

    trace = write_trace(job, emit, fail)
    if job["kernel_summary"] and trace is not None:
        emit({"event": "stage", "window": window, "stage": "kernel summary"})
        try:
            table = artifacts.write_kernel_summary_table(trace, rank_dir / temp_name(window, "kernels"),
                                                         rank_dir / summary_name(window))
        except Exception as exc:  # noqa: BLE001
            fail("kernel summary", exc)
        else:
            emit({"event": "file", "window": window, "kind": "kernels", "name": summary_name(window)})
            emit({"event": "kernels", "window": window, "rows": artifacts.top_kernels(table)})
            job["degraded"] = None if table.num_rows else "no device activity in this window"
    if job.get("memory"):
        write_memory(job, emit, fail)


def write_trace(job: dict, emit, fail) -> Path | None:
    """The trace under its final name (gzip and header insertion here); None when no trace could be kept."""
    window, rank_dir, raw = job["window"], Path(job["rank_dir"]), Path(job["raw"])
    compress, header = job["compress"], job["prepend_header"]
    final = rank_dir / trace_name(window, compress)
    stage = "compression" if compress else "rename"
    emit({"event": "stage", "window": window, "stage": stage})
    try:
        if compress or header:
            artifacts.copy_trace(raw, rank_dir / temp_name(window, "gz" if compress else "json"), compress, header)
            os.replace(rank_dir / temp_name(window, "gz" if compress else "json"), final)
            raw.unlink()
        else:
            os.replace(raw, final)
    except Exception as exc:  # noqa: BLE001
        fail(stage, exc)
        return keep_plain_trace(job, emit)
    emit({"event": "file", "window": window, "kind": "trace", "name": final.name})
    return final


def keep_plain_trace(job: dict, emit) -> Path | None:
    plain = artifacts.rescue_export(job)
    if plain is not None:
        emit({"event": "file", "window": job["window"], "kind": "trace", "name": plain.name})
    return plain


def write_memory(job: dict, emit, fail) -> None:
    window, rank_dir = job["window"], Path(job["rank_dir"])
    target = rank_dir / memory_name(window)
    emit({"event": "stage", "window": window, "stage": "memory snapshot"})
    try:
        os.replace(job["memory"], target)
    except Exception as exc:  # noqa: BLE001
        fail("memory snapshot", exc)
        return
    emit({"event": "file", "window": window, "kind": "memory", "name": target.name})
    emit({"event": "stage", "window": window, "stage": "memory view"})
    try:
        made = artifacts.write_memory_view(target, rank_dir / memory_view_name(window))
    except Exception as exc:  # noqa: BLE001
        fail("memory view", exc)
        return
    if made:
        emit({"event": "file", "window": window, "kind": "memory_view", "name": memory_view_name(window)})


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


NICE_ENV = "TRACEATTR_WRITER_NICE"


def writer_niceness() -> int:
    """The writer's niceness: 19, or 0-19 from TRACEATTR_WRITER_NICE (a node whose every core is busy with
    data-loader workers starves a nice-19 writer past stop()'s flush timeout); anything else is 19."""
    value = nice_of(os.environ.get(NICE_ENV, ""))
    return 19 if value is None else value


def nice_of(text: str) -> int | None:
    text = text.strip()
    return int(text) if len(text) <= 2 and text.isdecimal() and text.isascii() and int(text) <= 19 else None


def _lower_priority() -> None:
    """Lowest CPU priority, one compute thread, and deaf to the terminal's Ctrl-C (the training process
    decides when to stop; a write in progress finishes) and to SIGTERM (below). Deaf to SIGHUP too: the
    kernel sends it (then SIGCONT) to a stopped process group that the training process's death leaves
    orphaned, and this process outlives the training process on purpose, to finish its windows."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # SLURM (at a time limit, scancel) and systemd end a job with a SIGTERM to every process of it, then a
    # SIGKILL some seconds later: the windows this process holds land whole meanwhile, and it exits once
    # they are done (its stdin ends with the training process). A SIGKILL still ends it at once.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    niceness = writer_niceness()
    try:
        os.nice(niceness)
    except (AttributeError, OSError):   # pragma: no cover - Windows, or a sandbox that forbids it
        pass
    _lower_autogroup(niceness)


AUTOGROUP = "/proc/self/autogroup"


def _lower_autogroup(niceness: int, tries: int = 30) -> bool:
    """A writer alone in its session (Python 3.10 starts it so, or a caller did) is alone in its autogroup,
    where its own niceness ranks it against nothing: the group's niceness is what competes with training.
    Raising it needs no privilege. Never in the training's session: that group is the training's too.
    Linux allows one such change a tenth of a second machine-wide (EAGAIN), so a few tries. True when set."""
    try:
        if os.getsid(0) != os.getpid() or not os.path.exists(AUTOGROUP):
            return False
    except (AttributeError, OSError):   # pragma: no cover - Windows
        return False
    for _ in range(tries):
        try:
            with open(AUTOGROUP, "w") as group:
                group.write(str(niceness))
            return True
        except BlockingIOError:
            time.sleep(0.05)
        except OSError:     # a kernel without autogroup, or a sandbox: its own niceness is all there is
            return False
    return False


if __name__ == "__main__":
    sys.exit(main())
