"""The training process's side of the writer: hands each exported window to a writer process and collects
what it reports, without a thread of its own.

Gzip and the kernel summary (pandas, arrow, the decoder) run in a separate process at the lowest priority
(traceattr.capture.worker), so they never hold this process's GIL and never appear in its traces (a
`with_stack` profiler records every Python thread of the process it runs in). Handing a job over is one
short pipe write; replies are read without blocking when the profiler's step() asks. If the writer process
dies, the windows it held keep torch's uncompressed export, are reported as failed artifacts, and the next
window starts a new writer process.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

from traceattr.capture.artifacts import remove_temporaries, rescue_export, write_kernel_summary  # noqa: F401
from traceattr.capture.manifest import WRITER_LOG
from traceattr.capture.warn import warn

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])    # the folder that holds the traceattr package
_EXIT_WAIT_S = 120.0    # how long the reaper waits for a writer that finished its windows to exit
LOG_NAME = WRITER_LOG   # the writer process's stderr, quoted when it dies; hidden; locked while it runs
_LATE: "weakref.WeakSet[Writer]" = weakref.WeakSet()     # writers still finishing after their stop()

# A process group of its own from fork on: a terminal's Ctrl-C (the foreground group) or a SIGTERM to the
# training job's process group (torchrun's killpg) never reaches it. Ignoring SIGINT once running
# (worker._lower_priority) came after its imports: a Ctrl-C 0.1 s after start() killed it, and its queued
# windows stayed unfinished. Not a session of its own, as it was: with the kernel's autogroup scheduling
# (sched_autogroup_enabled=1) a new session is a new autogroup, where nice 19 ranks the writer only against
# itself, and it took an equal share of the CPU beside training. In the training's session it shares the
# training's autogroup, where its niceness counts. Python 3.10 has no process_group: a session of its own,
# and the writer lowers its autogroup's niceness itself (worker._lower_autogroup).
_OUT_OF_THE_JOBS_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


def discard_late_writes(folder: Path) -> int:
    """overwrite=True is about to replace `folder`: the writes of an earlier capture still landing there
    (its writer process by the folder's name, its reaper's manifest updates) would mix into the new
    capture, so they are stopped and dropped. Returns how many windows were dropped."""
    dropped = 0
    for writer in list(_LATE):
        if writer.folder == folder:
            dropped += writer.discard()
    return dropped


class Writer:
    """`submit(job)` a window; `poll()` delivers events to `on_event(dict)`; `close(timeout)` drains.
    Events: stage, file, error, kernels, done (see traceattr.capture.worker)."""

    def __init__(self, on_event: Callable[[dict], None], log_dir: Path) -> None:
        self._on_event = on_event
        self.folder = log_dir
        self._log_path = log_dir / LOG_NAME
        self._proc: subprocess.Popen | None = None
        self._jobs: dict[int, dict] = {}       # window -> job, until its "done"
        self._stages: dict[int, str] = {}      # window -> what it is doing now
        self._buffer = b""
        self._lock = threading.RLock()         # the reaper thread (after a timed-out close) vs a late poll
        self.reaper: threading.Thread | None = None

    # ---- training thread ---------------------------------------------------------------------------
    def start(self, required: bool = False) -> None:
        """Start the writer process now, so its imports happen before the first window closes. A failure
        here is left for submit() to report as that window's failed artifacts (required=True raises it)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is not None and not self._proc.stdout.closed:
                # a writer that died (the OOM killer): its last events first, then its windows as lost with
                # its own exit code (they were blamed on the next writer's clean exit, "code 0")
                proc = self._proc
                for _ in range(64):     # a pipe holds at most 1 MiB, then EOF; never a wait on the training thread
                    if self._proc is not proc:
                        break
                    self._read()
                if self._proc is proc:  # a child of the writer still holds its end: no more to read
                    self._lose_process(f"the writer process exited with code {proc.returncode}")
            if self._proc is None or self._proc.poll() is not None:
                try:
                    self._proc = self._spawn()
                except OSError:
                    self._proc = None
                    if required:
                        raise

    def submit(self, job: dict) -> None:
        with self._lock:
            window = job["window"]
            try:
                self.start(required=True)      # first: a writer that died reports its own windows as lost
            except OSError as exc:
                self._jobs[window], self._stages[window] = job, "queued"
                self._lose_process(f"cannot start the writer process: {exc}")
                return
            self._jobs[window], self._stages[window] = job, "queued"
            try:
                os.write(self._proc.stdin.fileno(), json.dumps(job).encode() + b"\n")   # < PIPE_BUF: atomic
            except OSError as exc:
                self._lose_process(f"cannot hand the window to the writer process: {exc}")

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def locked(self):
        """The lock under which events are delivered (the reaper's too): hold it to read and record at once."""
        return self._lock

    def pending(self) -> dict[int, str]:
        with self._lock:
            return dict(self._stages)

    def poll(self) -> None:
        """Deliver the events that are ready; never blocks."""
        with self._lock:
            if self._proc is not None and self._jobs:
                self._read()

    def close(self, timeout_s: float) -> dict[int, str]:
        """No more jobs; wait at most timeout_s for the pending ones. Returns what is still unfinished (it
        goes on in the writer process; a daemon thread records it when it lands)."""
        with self._lock:
            if self._proc is None:
                return {}
            self._quit()
            deadline = time.monotonic() + timeout_s
            while self._jobs and self._proc is not None and time.monotonic() < deadline:
                ready, _, _ = select.select([self._proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
                if ready:
                    self._read()
            if self._jobs and self._proc is not None:
                self._reap_later()
            elif self._proc is not None:
                self._proc.stdout.close()
                code = _wait(self._proc, max(0.1, deadline - time.monotonic()))
                if code == 0:
                    _remove_if_empty(self._log_path)
                elif code is None:      # done, but not yet exited (a starved writer): the reaper tidies up
                    self._reap_later()
            return dict(self._stages)

    def abandon(self) -> dict[int, str]:
        """Stop waiting (a Ctrl-C cut close() short): the queued writes go on in the writer process, and a
        daemon thread records them as they land, as after a timed-out close(). Returns what is unfinished."""
        with self._lock:
            if self._proc is not None and self._jobs and (self.reaper is None or not self.reaper.is_alive()):
                self._quit()
                self._reap_later()
            return dict(self._stages)

    def discard(self) -> int:
        """Kill the writer process and forget its windows, reporting nothing (discard_late_writes)."""
        with self._lock:
            proc, self._proc, dropped = self._proc, None, len(self._jobs)
            self._jobs.clear()
            self._stages.clear()
        if proc is not None and proc.poll() is None:
            proc.kill()
            _wait(proc, 5.0)
        return dropped

    # ---- internals ---------------------------------------------------------------------------------
    def _quit(self) -> None:
        """The writer process exits after its last job (an explicit word: a forked DataLoader worker may
        hold the pipe open)."""
        try:
            if not self._proc.stdin.closed:
                os.write(self._proc.stdin.fileno(), b'{"quit": true}\n')
                self._proc.stdin.close()
        except OSError:
            pass

    def _reap_later(self) -> None:
        _LATE.add(self)
        self.reaper = threading.Thread(target=self._reap, name="traceattr-capture-reaper", daemon=True)
        self.reaper.start()

    def _spawn(self) -> subprocess.Popen:
        # lazy: the worker module runs as `python -m traceattr.capture.worker`; imported by the package first,
        # runpy warns into the writer's log
        from traceattr.capture.worker import NICE_ENV, nice_of  # lazy: see above

        asked = os.environ.get(NICE_ENV, "")
        if asked.strip() and nice_of(asked) is None:
            warn(f"traceattr.capture: {NICE_ENV}={asked[:20]!r} is not a niceness from 0 to 19: the writer "
                 "runs at 19")
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")])))
        with open(self._log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "traceattr.capture.worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, env=env, bufsize=0, close_fds=True,
                                    **_OUT_OF_THE_JOBS_GROUP)
        os.set_blocking(proc.stdout.fileno(), False)
        # never block the training thread: a job line is far below PIPE_BUF, so a write is all or EAGAIN,
        # and EAGAIN means some hundred windows wait in the pipe: the writer is stuck and is replaced
        os.set_blocking(proc.stdin.fileno(), False)
        return proc

    def _read(self) -> None:
        fd = self._proc.stdout.fileno()
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            code = _wait(self._proc, 5.0)
            self._lose_process(f"the writer process exited with code {code}{self._log_tail()}")
            return
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._deliver(json.loads(line))

    def _deliver(self, event: dict) -> None:
        window = event["window"]
        if event["event"] == "stage":
            self._stages[window] = event["stage"]
        if event["event"] == "done":
            self._jobs.pop(window, None)
            self._stages.pop(window, None)
        self._on_event(event)

    def _lose_process(self, why: str) -> None:
        """The writer process is gone: each window it held keeps torch's export, uncompressed."""
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is not None and proc.poll() is None:
            proc.kill()
        for window, job in sorted(self._jobs.items()):
            self._on_event({"event": "error", "window": window, "stage": "writer process", "message": why})
            rescued = rescue_export(job)
            remove_temporaries(job)
            if rescued is not None:
                self._on_event({"event": "file", "window": window, "kind": "trace", "name": rescued.name})
            self._deliver({"event": "done", "window": window, "degraded": None})

    def _reap(self) -> None:
        while True:
            with self._lock:
                if not self._jobs or self._proc is None:
                    _LATE.discard(self)
                    proc = self._proc
                    break
                proc = self._proc
            select.select([proc.stdout], [], [], 1.0)
            with self._lock:
                if self._proc is proc:
                    self._read()
        # as close() does when the writes land in time: its end of stdout closed first (one pipe per
        # timed-out stop() was held open), which tells the writer every event was read and it may exit; a
        # starved writer (nice 19 on a busy node) may take a while to, and the lock is not held meanwhile
        if proc is not None and proc.stdout is not None:
            try:
                proc.stdout.close()
            except OSError:
                pass
        if proc is not None and _wait(proc, _EXIT_WAIT_S) == 0:
            _remove_if_empty(self._log_path)

    def _log_tail(self) -> str:
        try:
            lines = self._log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f" ({lines[-1].strip()})" if lines else ""


def _wait(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """The exit code, or None when the process is still running after timeout_s (never blocks longer)."""
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _remove_if_empty(path: Path) -> None:
    try:
        if path.stat().st_size == 0:
            path.unlink()
    except OSError:
        pass
