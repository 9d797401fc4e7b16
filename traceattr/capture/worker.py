"""The writer process: `python -m traceattr.capture.worker`, one per profiling rank, at the lowest priority.

It reads one JSON job per line on stdin (a window torch has exported) and answers JSON events on stdout:
{"event": "stage"|"file"|"error"|"kernels"|"done", "window": W, ...}. Each artifact (the trace, its kernel
summary, the memory snapshot and its HTML view) is made independently: one that fails is reported and
skipped, the others are still made. It never imports torch, and it exits when stdin closes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from traceattr.capture import artifacts
from traceattr.capture.manifest import memory_name, memory_view_name, summary_name, temp_name, trace_name


def main() -> int:
    _lower_priority()
    out = sys.stdout.buffer
    gone = False

    def emit(event: dict) -> None:
        nonlocal gone
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
        try:
            write_window(job, emit)
        except Exception as exc:  # noqa: BLE001 - one window's surprise must not end the process
            emit({"event": "error", "window": job["window"], "stage": "writer", "message": _describe(exc)})
        emit({"event": "done", "window": job["window"], "degraded": job.get("degraded")})
    return 0


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
    decides when to stop; a write in progress finishes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
            import time
            time.sleep(0.05)
        except OSError:     # a kernel without autogroup, or a sandbox: its own niceness is all there is
            return False
    return False


if __name__ == "__main__":
    sys.exit(main())
