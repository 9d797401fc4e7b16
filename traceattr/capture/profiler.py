"""The capture profiler: torch.profiler on the selected ranks, driven by start/step/stop or `with`.

One promise: profiling never crashes or stalls training. A fault that makes the profiler itself unsafe
(torch's step/stop or export failing, misuse from another thread, Ctrl-C inside an export) disables
profiling for the rest of the run with ONE warning naming the cause, still stops the underlying Kineto
profiler exactly once and on the thread that started it, and is recorded in the manifest and the status.
A writer fault (one failed compression, summary or memory view) skips that artifact for that window with a
warning and profiling goes on. A user exception inside `with` propagates unchanged; a KeyboardInterrupt
caught inside torch's callback is raised again once the profiler is safely off. Disabled configs and
non-selected ranks build nothing and never touch out_dir.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import shutil
import threading
import time
from pathlib import Path
from typing import NamedTuple

from traceattr.capture import memory
from traceattr.capture.config import CaptureConfig, resolve_activities
from traceattr.capture.manifest import MANIFEST_NAME, Manifest, rank_dir_name, temp_name, trace_name
from traceattr.capture.outputs import WindowOutputs
from traceattr.capture.ranks import (agree_on_run_name, distributed_initialized, is_selected, out_of_range,
                                     resolve_rank)
from traceattr.capture.status import CaptureStatus, KernelRow
from traceattr.capture.torch_profiler import build_torch_profiler, torch_schedule
from traceattr.capture.warn import warn
from traceattr.capture.writer import Writer, discard_late_writes
from traceattr.errors import CaptureConfigError

# one Kineto profiler per process: a second one fails with "already enabled"
_GUARD = threading.Lock()
_active: "Profiler | None" = None
_STOP_WAIT_MARGIN_S = 10.0   # a second stop() waits for the first's flush wait and this much more

__all__ = ["CaptureStatus", "KernelRow", "Profiler", "profile"]


class _Window(NamedTuple):
    first_step: int
    last_step: int


class Profiler:
    """`with Profiler(cfg) as prof: ... prof.step()`, or `start()`, `step()`, `stop()` from a driver."""

    def __init__(self, config: CaptureConfig | dict) -> None:
        cfg = config if isinstance(config, CaptureConfig) else CaptureConfig.from_dict(config)
        self.config = cfg.validate(probe_out_dir=False)     # only a selected rank touches out_dir
        self._state = "created" if cfg.enabled else "disabled"
        self._inert = True           # True: step() returns at once (disabled, not selected, failed, done)
        self._status: CaptureStatus | None = None
        self._rank: int | None = None
        self._world = 1
        self._warnings: list[str] = []   # config problems that did not stop profiling (in the manifest)
        self._outputs = WindowOutputs()
        self._error: str | None = None
        self._fault_messages: list[str] = []    # every fault, the first of which is _error
        self._faulted = False
        self._fault_lock = threading.Lock()   # faults from a foreign thread may race the training thread's
        self._faults: collections.deque = collections.deque()   # (cause, exc) from torch's callback
        self._interrupt: BaseException | None = None   # a KeyboardInterrupt caught inside torch's callback
        self._pending: tuple[str, ...] = ()
        self._stop_latched = False
        self._stop_lock = threading.Lock()      # one stop() does the work; others wait for its report
        self._stop_done = threading.Event()
        self._stopper: int | None = None        # the thread whose stop() does the work
        self._leaving_on_error = False    # the `with` block ends on the user's exception: no barrier
        self._raising = False             # start() with on_error="raise": its fault raises instead of warning
        self._torch_prof = None
        self._torch_running = False
        self._torch_unsure = False      # an exception escaped torch's own step(): its state is half-updated
        self._device_requested = False
        self._writer: Writer | None = None
        self._manifest: Manifest | None = None
        self._owner: int | None = None
        self._step_num = 0
        self._window_count = 0
        self._stopping = False
        self._history_on = False
        self._unstarted_warned = False
        self._prepend_header = ""
        self.out_dir = Path(cfg.out_dir).expanduser().resolve() if cfg.enabled else None
        self.rank_dir: Path | None = None
        windows = min(cfg.repeat, cfg.max_windows) if cfg.repeat else cfg.max_windows
        self._schedule_end = cfg.skip_first + windows * cfg.cycle if cfg.enabled else 0

    # ---- public ----------------------------------------------------------------------------------
    def __enter__(self) -> "Profiler":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._leaving_on_error = exc_type is not None
        self._stop(raise_interrupt=exc_type is None)   # the user's own exception wins over a late Ctrl-C
        return False         # never swallow the user's exception

    def status(self) -> CaptureStatus:
        status = self._status
        stale = self._manifest.stale if self._manifest is not None else None
        if status is None or status.manifest_error != stale:
            outputs = self._outputs
            status = self._status = CaptureStatus(self._rank, self._state, tuple(outputs.files), self._error,
                                                  self._pending, outputs.windows_written,
                                                  outputs.latest_kernels(),
                                                  tuple(self._fault_messages + outputs.errors), stale)
        return status

    def kernel_summary(self, window: int | None = None) -> tuple[KernelRow, ...]:
        """The top kernels (by exact self time) of a written window, the latest by default; small and
        picklable (`pandas.DataFrame(rows)` makes it a table). Empty until a summary is written."""
        self._poll_writer()
        if window is None:
            return self._outputs.latest_kernels()
        return self._outputs.kernels.get(window, ())

    def step(self) -> CaptureStatus:
        if self._inert:
            if self._state in ("created", "done"):
                self._idle_step()
            return self._status or self.status()
        if threading.get_ident() != self._owner:
            if not self._faulted:   # once: a data-loader thread stepping wrote the manifest again per call
                self._fault("step() called on a thread other than the one that called start()")
            return self._status or self.status()
        self._poll_writer()
        self._handle_faults()
        if self._faulted:           # a fault seen on another thread: torch is stopped here, on its own thread
            self._settle()
            return self.status()
        try:
            self._torch_prof.step()
            self._step_num += 1
        except BaseException as exc:  # noqa: BLE001 - never let it escape half-way through torch's step
            self._torch_unsure = True
            self._fault("torch.profiler step() failed", exc)
            self._keep_interrupt(exc)
        self._handle_faults()
        if not self._inert:
            if self._step_num >= self._schedule_end:
                self._finish()
            else:
                self._maybe_start_history()
        self._raise_interrupt()
        return self.status()

    def start(self) -> CaptureStatus:
        """Begin the schedule. A failure turns profiling off with one warning and training goes on; with
        `on_error="raise"` it raises CaptureConfigError naming the cause instead (torch's profiler is off)."""
        if self._state != "created" or self._stop_latched:
            return self.status()        # disabled, or a second start(): nothing to do
        self._raising = self.config.on_error == "raise"     # the error says it: no warning besides
        try:
            status = self._start()
        finally:
            self._raising = False
        if self._state == "failed" and self.config.on_error == "raise":
            raise CaptureConfigError([self._error or "start() failed"])
        return status

    def _start(self) -> CaptureStatus:
        try:
            self._rank, self._world, source = resolve_rank()
        except Exception as exc:  # noqa: BLE001
            return self._fault("cannot tell this process's rank from RANK/WORLD_SIZE", exc)
        # ranks beyond the world (a config reused for a smaller run): said once, the others still profile
        bad = out_of_range(self.config.ranks, self._world)
        self._warnings = [f"ranks {bad} do not exist in a world of size {self._world}"] if bad else []
        if bad and self._rank == min(set(range(self._world)) - set(bad), default=0):
            warn(f"traceattr.capture: {self._warnings[0]}; profiling the selected ranks that exist")
        if self.config.run_name:
            try:
                self.config = agree_on_run_name(self.config, self._rank, self._world)
                self.out_dir = Path(self.config.out_dir).expanduser().resolve()
            except BaseException as exc:  # noqa: BLE001 - a broadcast that failed, or Ctrl-C meanwhile
                self._fault("agreeing on run_name's folder failed", exc)
                self._keep_interrupt(exc)
                self._raise_interrupt()
                return self.status()
        if not is_selected(self.config.ranks, self._rank):
            self._set_state("not_selected")
            return self.status()
        # a selected rank only. An unwritable out_dir (a read-only mount, a full disk, a typo in a path the
        # job cannot create) turns profiling off with a warning: raising here ended the training job
        try:
            unwritable = self.config.out_dir_problems()
        except Exception as exc:  # noqa: BLE001
            unwritable = [f"out_dir: cannot create or write {str(self.config.out_dir)!r}: {exc}"]
        if unwritable:
            return self._fault(f"{unwritable[0]}; nothing is recorded")
        if not _claim(self):
            return self._fault("another traceattr capture is already running in this process")
        try:
            import torch  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

            if torch.autograd._profiler_enabled():
                return self._fault("a torch profiler is already running in this process")
            self.rank_dir = self.out_dir / rank_dir_name(self._rank)
            if (self.rank_dir / MANIFEST_NAME).exists():
                if not self.config.overwrite:
                    return self._fault(f"{self.rank_dir} already holds a capture; use a new out_dir, "
                                       "run_name='{time}-{config_hash}' or overwrite=True")
                dropped = discard_late_writes(self.rank_dir)
                if dropped:
                    self._warnings.append(f"overwrite=True: {dropped} window(s) of the previous capture still "
                                          f"being written into {self.rank_dir} were dropped")
                    warn(f"traceattr.capture: {self._warnings[-1]}")
                _clear_folder(self.rank_dir)
            self.rank_dir.mkdir(parents=True, exist_ok=True)
            self._manifest = Manifest(self.rank_dir, self._manifest_header(source))
            self._manifest.flush()
            self._torch_schedule = torch_schedule(self.config)
            self._torch_prof, self._prepend_header = build_torch_profiler(
                self.config, self._schedule, self._on_trace_ready,
                {"rank": self._rank, "world_size": self._world, "rank_source": source})
            devices = [a for a in resolve_activities(self.config.activities) if a.name != "CPU"]
            self._device_requested = bool(devices)
            self._outputs.attach(self._manifest, self.rank_dir, self._rank, device_requested=bool(devices))
            if self.config.compress or self.config.kernel_summary or self._prepend_header \
                    or self.config.memory_snapshot:
                self._writer = Writer(self._on_writer_event, self.rank_dir)
                self._writer.start()
            self._owner = threading.get_ident()
            self._inert = False
            self._set_state("running")
            self._torch_running = True
            self._torch_prof.start()
            self._maybe_start_history()
        except BaseException as exc:  # noqa: BLE001 - Ctrl-C half-way too: the claim is freed, torch is off
            self._fault(f"starting torch.profiler {'failed' if isinstance(exc, Exception) else 'interrupted'}", exc)
            self._keep_interrupt(exc)
            self._raise_interrupt()     # the user's Ctrl-C, once capture is settled
        return self.status()

    def stop(self) -> CaptureStatus:
        """Stop (safe without start, twice, after a fault), flush writes with a bounded wait, report."""
        return self._stop(raise_interrupt=True)

    # ---- stop ------------------------------------------------------------------------------------
    def _stop(self, raise_interrupt: bool) -> CaptureStatus:
        on_owner = self._owner is None or threading.get_ident() == self._owner
        if on_owner and self._faulted and self._torch_running:
            self._settle()              # a fault from another thread left torch running here
        with self._stop_lock:    # two threads' stop() at once: both had seen it unlatched and both stopped
            first = not (self._stop_latched or self._state == "disabled")
            if first:
                self._stop_latched, self._stopper = True, threading.get_ident()
        if not first:
            self._await_stop()
            return self._finish_stop(raise_interrupt)
        try:
            return self._stop_first(on_owner, raise_interrupt)
        finally:
            self._stop_done.set()

    def _await_stop(self) -> None:
        """A stop() after the first: its report once the first one's is done (it returned 'running' while
        the first still flushed). Bounded by the flush wait, and never on the first stop's own thread (a
        stop() from inside it, say a signal handler, would wait for itself)."""
        if self._stopper in (None, threading.get_ident()) or self._stop_done.is_set():
            return
        try:
            self._stop_done.wait(self.config.flush_timeout_s + _STOP_WAIT_MARGIN_S)
        except BaseException as exc:  # noqa: BLE001 - Ctrl-C while waiting: raised once this stop() reports
            self._keep_interrupt(exc)

    def _stop_first(self, on_owner: bool, raise_interrupt: bool) -> CaptureStatus:
        if self._state == "created":
            self._set_state("stopped")
            return self.status()
        if self._torch_running and not on_owner:
            self._fault("stop() called on a thread other than the one that called start()")
        try:
            self._flush(on_owner)
        except BaseException as exc:  # noqa: BLE001 - Ctrl-C while flushing: the report below still lands
            self._keep_interrupt(exc)
            if isinstance(exc, Exception):
                self._fault("stop() failed", exc)
            elif self._torch_running and on_owner:
                # before torch stopped: left running, a later capture was refused and the process crashed
                # at exit (139). Stopped now without its export (the user wants out), and said so
                self._fault("stop() interrupted before torch.profiler stopped: the window being recorded "
                            "was not exported")
            if not self._torch_running:
                _release(self)
                self._inert = True
            if self._writer is not None:    # the writes go on and are recorded as they land, as after a
                self._writer.abandon()                         # timed-out wait
        try:
            if self._state in ("running", "done"):
                self._set_state("stopped")
            # under the writer's lock, which the reaper holds while it records a late write: what is still
            # unfinished now, not a snapshot from before the reaper's last "done" (then stale for good)
            with self._writer.locked() if self._writer is not None else contextlib.nullcontext():
                if self._writer is not None:
                    self._pending = self._pending_now()
                if self._manifest is not None:
                    self._manifest.set(state=self._state, stopped_at_ns=time.time_ns(),
                                       unfinished=list(self._pending))
                    if not self._pending:
                        self._manifest.release_reserve()
            self._barrier()
        except BaseException as exc:  # noqa: BLE001 - a second Ctrl-C: raised once stop() is done
            self._keep_interrupt(exc)
            if isinstance(exc, Exception):
                self._fault("stop() failed", exc)
        self._status = None
        return self._finish_stop(raise_interrupt)

    def _flush(self, on_owner: bool) -> None:
        """stop()'s work before its report: torch off on its own thread, the writes waited for (bounded)."""
        self._poll_writer()
        self._handle_faults()
        if self._torch_running and on_owner:
            self._stopping = True       # a window still recording is exported now, marked partial
            self._stop_torch()
            self._handle_faults()
        if not self._torch_running:
            _release(self)
            # a step() after stop() must leave torch alone: its step() on a stopped profiler starts it
            # again, and the process crashed at exit (exit 139)
            self._inert = True
        if self._manifest is not None and self._state in ("running", "done"):
            # every window is exported and handed over: a SIGTERM from here on (torchrun passes one rank's
            # to the others, mid-stop()) leaves a capture the writer completes, and read_run says so
            self._manifest.set(state="stopping")
        if self._writer is not None:
            with self._manifest.batched():
                self._writer.close(self.config.flush_timeout_s)

    def _pending_now(self) -> tuple[str, ...]:
        return tuple(f"window{w}: {stage}" for w, stage in sorted(self._writer.pending().items()))

    def _finish_stop(self, raise_interrupt: bool) -> CaptureStatus:
        if raise_interrupt:
            self._raise_interrupt()
        self._interrupt = None
        return self.status()

    # ---- torch.profiler --------------------------------------------------------------------------
    def _schedule(self, step: int):
        from torch.profiler import ProfilerAction  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

        # bounds repeat=0 to max_windows; torch's own schedule otherwise
        return ProfilerAction.NONE if step >= self._schedule_end else self._torch_schedule(step)

    def _window_steps(self, window: int) -> _Window | None:
        """The steps a window's trace holds; None when stop() came before its first active step."""
        cfg = self.config
        first = cfg.skip_first + window * cfg.cycle + cfg.wait + cfg.warmup
        if not self._stopping:
            return _Window(first, first + cfg.active - 1)
        if self._step_num < first:
            return None          # stopped during warmup: torch exports warmup data, not a window
        return _Window(first, self._step_num)    # the step in progress at stop() is in the trace

    def _on_trace_ready(self, prof) -> None:
        """Called by torch inside step()/stop() on the training thread: export only, then hand off."""
        window = self._window_count
        self._window_count += 1
        if self._faulted:
            return
        raw = self.rank_dir / temp_name(window, "export")
        try:
            steps = self._window_steps(window)
            if steps is None:
                return
            self._export(prof, raw)
            entry = {"window": window, "first_step": steps.first_step, "last_step": steps.last_step,
                     "partial": self._stopping, "status": "writing", "degraded": None, "files": {}}
            if self._stopping:
                entry["stopped_at_step"] = self._step_num
            self._manifest.add_window(entry)
            # entry and owner: what the writer process records beside the files (worker.Recorder), and puts
            # into this manifest itself should this process be killed before it hears of them
            job = {"window": window, "rank_dir": str(self.rank_dir), "raw": str(raw),
                   "compress": self.config.compress, "kernel_summary": self.config.kernel_summary,
                   "prepend_header": self._prepend_header, "memory": self._dump_memory(window),
                   "entry": dict(entry), "owner": self._manifest.owner,
                   "device_requested": self._device_requested}
            if self._writer is None:
                self._finish_plain(window, raw)
            else:
                self._writer.submit(job)
        except BaseException as exc:  # noqa: BLE001 - nothing may escape into torch's step(), not even Ctrl-C
            try:
                if raw.parent.is_dir():
                    raw.unlink(missing_ok=True)
                    _kineto_temp(raw).unlink(missing_ok=True)
            except BaseException:  # noqa: BLE001 - a read-only mount (EROFS even for a file that is not
                pass               # there) escaped into torch's step(), and its stop() then segfaulted
            verb = "failed" if isinstance(exc, Exception) else "interrupted"
            self._faults.append((f"exporting window {window} {verb}", exc))
            self._keep_interrupt(exc)

    def _export(self, prof, path: Path) -> None:
        # a name not ending in .gz: torch writes it directly instead of gzipping on this thread
        prof.export_chrome_trace(str(path))
        # kineto logs a failed open or write and returns normally: check that a whole trace really landed
        if not path.is_file() or path.stat().st_size == 0:
            raise OSError(f"torch.profiler wrote no trace to {path}")
        if not _ends_whole(path):
            raise OSError(f"torch.profiler's trace {path} is cut short (a full disk?)")

    def _finish_plain(self, window: int, raw: Path) -> None:
        """Nothing to compress or summarize: the rename is all, done here."""
        final = self.rank_dir / trace_name(window, False)
        os.replace(raw, final)
        self._on_writer_event({"event": "file", "window": window, "kind": "trace", "name": final.name})
        self._on_writer_event({"event": "done", "window": window, "degraded": None})

    def _dump_memory(self, window: int) -> str | None:
        """The allocator snapshot of the window, pickled for the writer process; a failure skips it."""
        if not self._history_on:
            return None
        path = self.rank_dir / temp_name(window, "memory")
        try:
            snapshot = memory.take_snapshot()
            with open(path, "wb") as out:
                pickle.dump(snapshot, out)
        except Exception as exc:  # noqa: BLE001
            path.unlink(missing_ok=True)
            self._on_writer_event({"event": "error", "window": window, "stage": "memory snapshot",
                                   "message": f"{type(exc).__name__}: {exc}"})
            return None
        finally:
            self._stop_history()
        return str(path)

    def _stop_torch(self) -> None:
        """torch's stop(), once, on the thread that started it."""
        self._torch_running = False
        if self._torch_unsure and hasattr(self._torch_prof, "step_rec_fn"):
            # torch's step() was cut short after closing its ProfilerStep range; its stop() would close it
            # again, which crashes the process (exit 139). An open range left to the garbage collector is safe.
            self._torch_prof.step_rec_fn = None
        try:
            self._torch_prof.stop()
        except BaseException as exc:  # noqa: BLE001
            self._fault("stopping torch.profiler failed", exc)
            self._keep_interrupt(exc)
        self._stop_history()

    def _finish(self) -> None:
        """Every window of the schedule is taken: stop torch now; stop() still flushes and reports."""
        self._stop_torch()
        _release(self)
        self._inert = True
        self._handle_faults()
        if not self._faulted:
            self._set_state("done")
            # said on disk: every window is exported, so a process killed from now on (SLURM ends a job
            # long after its profiling) left a whole capture once the writer is done (read_run)
            self._manifest.set(state="done")

    def _idle_step(self) -> None:
        if self._state == "created" and not self._unstarted_warned:
            self._unstarted_warned = True
            warn("traceattr.capture: step() on a profiler that was never started, so nothing is recorded; "
                 "use `with profile(cfg) as prof:` or call prof.start() first")
        elif self._state == "done":
            self._poll_writer()

    # ---- memory history --------------------------------------------------------------------------
    def _maybe_start_history(self) -> None:
        cfg = self.config
        if not cfg.memory_snapshot or self._history_on or self._step_num < cfg.skip_first:
            return
        if (self._step_num - cfg.skip_first) % cfg.cycle == cfg.wait + cfg.warmup:
            try:
                memory.start_history(cfg.memory_snapshot_max_entries)
                self._history_on = True
            except Exception as exc:  # noqa: BLE001
                self._fault("turning on CUDA memory history failed", exc)

    def _stop_history(self) -> None:
        if self._history_on:
            self._history_on = False
            memory.stop_history()

    # ---- writer events (training thread, or the writer's reaper after a timed-out stop) -------------
    def _poll_writer(self) -> None:
        if self._writer is not None and self._writer.busy:
            with self._manifest.batched():     # one manifest write per poll, not one per event
                self._writer.poll()

    def _on_writer_event(self, event: dict) -> None:
        self._outputs.apply(event, flush_files=self._stop_latched)
        if event["event"] == "done" and self._stop_latched and self._pending:
            # a write that landed after stop() gave up waiting (the writer's reaper thread)
            self._pending = self._pending_now()
            self._manifest.set(unfinished=list(self._pending))
            if not self._pending:
                self._manifest.release_reserve()
        self._status = None

    # ---- faults ----------------------------------------------------------------------------------
    def _handle_faults(self) -> None:
        while self._faults:
            cause, exc = self._faults.popleft()
            self._fault(cause, exc)

    def _fault(self, cause: str, exc: BaseException | None = None) -> CaptureStatus:
        message = f"{cause}: {type(exc).__name__}: {exc}" if exc is not None else cause
        self._fault_messages.append(message)
        self._status = None
        if self._manifest is not None:
            self._manifest.add_error(message)
        with self._fault_lock:
            first = not self._faulted
            self._faulted = True
        if not first:
            return self.status()
        self._error = message
        self._set_state("failed")
        if not self._raising:
            warn(f"traceattr.capture: profiling disabled on rank {self._rank} for the rest of the run: {message}")
        if self._owner is None or threading.get_ident() == self._owner:
            self._settle()
        # else: torch's profiler state belongs to the training thread; its next step() or stop() settles it
        if self._manifest is not None:
            self._manifest.set(state="failed")
        return self.status()

    def _settle(self) -> None:
        """After a fault, on the training thread: torch off (once), history off, the process-wide claim freed."""
        if self._torch_running:
            self._stop_torch()
        self._stop_history()
        _release(self)
        self._inert = True

    def _keep_interrupt(self, exc: BaseException) -> None:
        if not isinstance(exc, Exception) and self._interrupt is None:
            self._interrupt = exc

    def _raise_interrupt(self) -> None:
        if self._interrupt is not None:
            interrupt, self._interrupt = self._interrupt, None
            raise interrupt

    def _set_state(self, state: str) -> None:
        self._state = state
        self._status = None

    def _manifest_header(self, rank_source: str) -> dict:
        import torch  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

        import traceattr  # lazy: the package's own __init__, for its version (capture is imported from it)

        return {"rank": self._rank, "world_size": self._world, "rank_source": rank_source,
                "torch_version": torch.__version__, "traceattr_version": traceattr.__version__,
                "config": self.config.to_dict(), "config_sha256": self.config.content_hash(),
                "out_dir": str(self.out_dir), "warnings": list(self._warnings)}

    def _barrier(self) -> None:
        if not (self.config.enabled and self.config.barrier_on_stop and distributed_initialized()):
            return
        if self._leaving_on_error or self._interrupt is not None:
            # the loop ended on an exception or Ctrl-C: the other ranks are in some other collective, and
            # the barrier held the user's traceback back for the process group's whole timeout (30 min)
            return
        try:
            import torch.distributed as dist  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

            dist.barrier()      # rank 0 does not acknowledge stop while others still write
        except Exception as exc:  # noqa: BLE001
            if self._manifest is not None:
                self._manifest.add_error(f"barrier at stop failed: {exc}")


def profile(config: CaptureConfig | dict) -> Profiler:
    """`with traceattr.capture.profile(cfg) as prof:` ... `prof.step()` once per global step."""
    return Profiler(config)


def _kineto_temp(export: Path) -> Path:
    """Where kineto writes an export before renaming it (left behind when its write fails)."""
    return export.with_name(export.name + ".tmp")


def _ends_whole(path: Path) -> bool:
    """Whether a JSON export ends as a whole document does (its closing brace): a full disk cut one short
    and kineto kept it, which then stood under the window's final name."""
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - 256))
        return file.read().rstrip().endswith(b"}")


def _clear_folder(rank_dir: Path) -> None:
    """overwrite=True: the previous capture moves aside in one rename (a reader sees the old run or none,
    never a mix), then is deleted."""
    aside = rank_dir.with_name(f".{rank_dir.name}.replaced-{os.getpid()}-{time.time_ns()}")
    os.replace(rank_dir, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _claim(profiler: Profiler) -> bool:
    global _active
    with _GUARD:
        if _active is not None and _active is not profiler:
            return False
        _active = profiler
        return True


def _release(profiler: Profiler) -> None:
    global _active
    with _GUARD:
        if _active is profiler:
            _active = None
