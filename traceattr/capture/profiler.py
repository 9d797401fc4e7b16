"""The capture profiler: torch.profiler on the selected ranks, driven by start/step/stop or `with`.

One promise: profiling never crashes or stalls training. Every fault (profiler, export, compression,
summary, misuse) disables profiling for the rest of the run with ONE warning naming the cause, still stops
the underlying Kineto profiler, and is recorded in the manifest and the returned status. A user exception
inside `with` propagates unchanged. Disabled configs and non-selected ranks build nothing.
"""

from __future__ import annotations

import collections
import inspect
import json
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from traceattr.capture import memory
from traceattr.capture.config import CaptureConfig, resolve_activities
from traceattr.capture.manifest import MANIFEST_NAME, Manifest, rank_dir_name, temp_name
from traceattr.capture.ranks import distributed_initialized, is_selected, out_of_range, resolve_rank
from traceattr.capture.writer import WindowJob, WriteError, Writer

# one Kineto profiler per process: a second one fails with "already enabled"
_GUARD = threading.Lock()
_active: "Profiler | None" = None


@dataclass(frozen=True)
class CaptureStatus:
    """What one rank's profiler has done so far; small and picklable, so a driver can gather one per rank."""

    rank: int | None
    state: str                      # created | disabled | not_selected | running | done | stopped | failed
    files: tuple[str, ...] = ()     # paths that exist (traces, summaries, snapshots)
    error: str | None = None        # the fault that disabled profiling, if any
    pending: tuple[str, ...] = ()   # writes still unfinished when stop() returned
    windows: int = 0                # windows fully written


class Profiler:
    """`with Profiler(cfg) as prof: ... prof.step()`, or `start()`, `step()`, `stop()` from a driver."""

    def __init__(self, config: CaptureConfig | dict) -> None:
        cfg = config if isinstance(config, CaptureConfig) else CaptureConfig.from_dict(config)
        self.config = cfg.validate()
        self._state = "created" if cfg.enabled else "disabled"
        self._inert = True           # True: step() returns at once (disabled, not selected, failed, done)
        self._status: CaptureStatus | None = None
        self._rank: int | None = None
        self._world = 1
        self._warnings: list[str] = []   # config problems that did not stop profiling (in the manifest)
        self._files: list[str] = []
        self._windows_written = 0
        self._error: str | None = None
        self._faulted = False
        self._fault_lock = threading.Lock()   # writer-thread and training-thread faults may race
        self._faults: collections.deque = collections.deque()   # (cause, exc) from callbacks, handled here
        self._pending: tuple[str, ...] = ()
        self._stop_latched = False
        self._torch_prof = None
        self._torch_running = False
        self._writer: Writer | None = None
        self._manifest: Manifest | None = None
        self._owner: int | None = None
        self._step_num = 0
        self._window_count = 0
        self._stopping = False
        self._history_on = False
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
        self.stop()
        return False         # never swallow the user's exception

    def status(self) -> CaptureStatus:
        status = self._status
        if status is None:
            status = self._status = CaptureStatus(self._rank, self._state, tuple(self._files), self._error,
                                                  self._pending, self._windows_written)
        return status

    def step(self) -> CaptureStatus:
        if self._inert:
            return self._status or self.status()
        if threading.get_ident() != self._owner:
            self._fault("step() called on a thread other than the one that called start()")
            return self.status()
        self._handle_faults()
        if not self._inert:
            try:
                self._torch_prof.step()
                self._step_num += 1
            except Exception as exc:  # noqa: BLE001
                self._fault("torch.profiler step() failed", exc)
            self._handle_faults()
        if not self._inert:
            if self._step_num >= self._schedule_end:
                self._finish()
            else:
                self._maybe_start_history()
        return self.status()

    def start(self) -> CaptureStatus:
        if self._state != "created" or self._stop_latched:
            return self.status()        # disabled, or a second start(): nothing to do
        try:
            self._rank, self._world, source = resolve_rank()
        except Exception as exc:  # noqa: BLE001
            return self._fault("cannot tell this process's rank from RANK/WORLD_SIZE", exc)
        # ranks beyond the world (a config reused for a smaller run): said once, the others still profile
        bad = out_of_range(self.config.ranks, self._world)
        self._warnings = [f"ranks {bad} do not exist in a world of size {self._world}"] if bad else []
        if bad and self._rank == min(set(range(self._world)) - set(bad), default=0):
            warnings.warn(f"traceattr.capture: {self._warnings[0]}; profiling the selected ranks that exist",
                          RuntimeWarning, stacklevel=2)
        if not is_selected(self.config.ranks, self._rank):
            self._set_state("not_selected")
            return self.status()
        if not _claim(self):
            return self._fault("another traceattr capture is already running in this process")
        try:
            import torch

            if torch.autograd._profiler_enabled():
                return self._fault("a torch profiler is already running in this process")
            self.rank_dir = self.out_dir / rank_dir_name(self._rank)
            if (self.rank_dir / MANIFEST_NAME).exists() and not self.config.overwrite:
                return self._fault(f"{self.rank_dir} already holds a capture; use a new out_dir "
                                   "or overwrite=True")
            self.rank_dir.mkdir(parents=True, exist_ok=True)
            self._manifest = Manifest(self.rank_dir, self._manifest_header(source))
            self._manifest.flush()
            self._writer = Writer(self._on_file, self._on_done, self._on_write_error)
            self._torch_prof = self._build_torch_profiler(source)
            self._owner = threading.get_ident()
            self._inert = False
            self._set_state("running")
            self._torch_running = True
            self._torch_prof.start()
            self._maybe_start_history()
        except Exception as exc:  # noqa: BLE001
            self._fault("starting torch.profiler failed", exc)
        return self.status()

    def stop(self) -> CaptureStatus:
        """Stop (safe without start, twice, after a fault), flush writes with a bounded wait, report."""
        if self._stop_latched or self._state in ("disabled",):
            return self.status()
        self._stop_latched = True
        if self._state == "created":
            self._set_state("stopped")
            return self.status()
        if self._torch_running and threading.get_ident() != self._owner:
            self._fault("stop() called on a thread other than the one that called start()")
        self._handle_faults()
        if self._torch_running:
            self._stopping = True       # a window still recording is exported now, marked partial
            self._stop_torch()
            self._handle_faults()
        _release(self)
        if self._writer is not None:
            unfinished = self._writer.close(self.config.flush_timeout_s)
            self._pending = tuple(f"window{w}: {stage}" for w, stage in sorted(unfinished.items()))
            self._handle_faults()
        if self._state in ("running", "done"):
            self._set_state("stopped")
        if self._manifest is not None:
            self._manifest.set(state=self._state, stopped_at_ns=time.time_ns(), unfinished=list(self._pending))
        self._barrier()
        self._status = None
        return self.status()

    # ---- torch.profiler --------------------------------------------------------------------------
    def _build_torch_profiler(self, rank_source: str):
        import torch.profiler as tp

        cfg = self.config
        self._torch_schedule = tp.schedule(skip_first=cfg.skip_first, wait=cfg.wait, warmup=cfg.warmup,
                                           active=cfg.active, repeat=cfg.repeat)
        wanted = dict(activities=resolve_activities(cfg.activities), schedule=self._schedule,
                      on_trace_ready=self._on_trace_ready, record_shapes=cfg.record_shapes,
                      profile_memory=cfg.profile_memory, with_stack=cfg.with_stack, with_flops=cfg.with_flops,
                      with_modules=cfg.with_modules)
        # we never read key_averages(), so torch's advice to set acc_events does not apply here
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
        accepted = inspect.signature(tp.profile.__init__).parameters
        prof = tp.profile(**{k: v for k, v in wanted.items() if k in accepted})
        if not distributed_initialized():
            # torch writes distributedInfo only under torch.distributed; loaders need the rank in the file
            info = json.dumps({"backend": "none", "rank": self._rank, "world_size": self._world,
                               "rank_source": rank_source})
            if hasattr(prof, "preset_metadata_json"):
                prof.preset_metadata_json("distributedInfo", info)
            else:   # older torch: the writer inserts the key when it copies the trace
                self._prepend_header = f'"distributedInfo": {info}, '
        return prof

    def _schedule(self, step: int):
        from torch.profiler import ProfilerAction

        # bounds repeat=0 to max_windows; torch's own schedule otherwise
        return ProfilerAction.NONE if step >= self._schedule_end else self._torch_schedule(step)

    def _on_trace_ready(self, prof) -> None:
        """Called by torch inside step()/stop() on the training thread: export only, then hand off."""
        window = self._window_count
        self._window_count += 1
        if self._faulted:
            return
        cfg = self.config
        first = cfg.skip_first + window * cfg.cycle + cfg.wait + cfg.warmup
        raw = self.rank_dir / temp_name(window, "export")
        try:
            self._export(prof, raw)
            snapshot = None
            if self._history_on:
                snapshot = memory.take_snapshot()
                self._stop_history()
            entry = {"window": window, "first_step": first,
                     "last_step": self._step_num - 1 if self._stopping else first + cfg.active - 1,
                     "partial": self._stopping, "status": "writing", "degraded": None, "files": {}}
            if self._stopping:
                entry["stopped_at_step"] = self._step_num
            self._manifest.add_window(entry)
            self._writer.submit(WindowJob(self.rank_dir, window, raw, cfg.compress, cfg.kernel_summary,
                                          snapshot, self._prepend_header))
        except Exception as exc:  # noqa: BLE001 - never let it escape into torch's step()
            raw.unlink(missing_ok=True) if raw.parent.is_dir() else None
            self._faults.append((f"exporting window {window} failed", exc))

    def _export(self, prof, path: Path) -> None:
        # a name not ending in .gz: torch writes it directly instead of gzipping on this thread
        prof.export_chrome_trace(str(path))
        # kineto logs a failed open and returns normally: check that a trace really landed
        if not path.is_file() or path.stat().st_size == 0:
            raise OSError(f"torch.profiler wrote no trace to {path}")

    def _stop_torch(self) -> None:
        self._torch_running = False
        try:
            self._torch_prof.stop()
        except Exception as exc:  # noqa: BLE001
            self._fault("stopping torch.profiler failed", exc)
        self._stop_history()

    def _finish(self) -> None:
        """Every window of the schedule is taken: stop torch now; stop() still flushes and reports."""
        self._stop_torch()
        _release(self)
        self._inert = True
        if not self._faulted:
            self._set_state("done")

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

    # ---- writer callbacks (writer thread) ---------------------------------------------------------
    def _on_file(self, window: int, kind: str, path: Path) -> None:
        self._files.append(str(path))
        self._manifest.add_file(window, kind, path.name)
        self._status = None

    def _on_done(self, window: int, degraded: str | None) -> None:
        if degraded and not self._device_requested():
            degraded = None       # a CPU-only capture has no kernels by design
        self._windows_written += 1
        self._manifest.update_window(window, status="written", degraded=degraded)
        self._status = None

    def _on_write_error(self, window: int, exc: WriteError) -> None:
        self._manifest.update_window(window, status="failed", error=str(exc))
        self._faults.append((f"writing window {window}: {exc.stage} failed", exc.cause))
        if self._stop_latched:      # stop() has returned: nobody else will report it
            self._handle_faults()

    def _device_requested(self) -> bool:
        return any(a.name != "CPU" for a in resolve_activities(self.config.activities))

    # ---- faults ----------------------------------------------------------------------------------
    def _handle_faults(self) -> None:
        while self._faults:
            cause, exc = self._faults.popleft()
            self._fault(cause, exc)

    def _fault(self, cause: str, exc: BaseException | None = None) -> CaptureStatus:
        message = f"{cause}: {type(exc).__name__}: {exc}" if exc is not None else cause
        if self._manifest is not None:
            self._manifest.add_error(message)
        with self._fault_lock:
            first = not self._faulted
            self._faulted = True
        if not first:
            return self.status()
        self._error, self._inert = message, True
        self._set_state("failed")
        warnings.warn(f"traceattr.capture: profiling disabled on rank {self._rank} for the rest of the run: "
                      f"{message}", RuntimeWarning, stacklevel=3)
        if self._torch_running:
            self._stop_torch()      # or a later profiler in this process fails with "already enabled"
        self._stop_history()
        _release(self)
        if self._manifest is not None:
            self._manifest.set(state="failed")
        return self.status()

    def _set_state(self, state: str) -> None:
        self._state = state
        self._status = None

    def _manifest_header(self, rank_source: str) -> dict:
        import torch

        import traceattr

        return {"rank": self._rank, "world_size": self._world, "rank_source": rank_source,
                "torch_version": torch.__version__, "traceattr_version": traceattr.__version__,
                "config": self.config.to_dict(), "config_sha256": self.config.content_hash(),
                "out_dir": str(self.out_dir), "warnings": list(self._warnings)}

    def _barrier(self) -> None:
        if not (self.config.enabled and self.config.barrier_on_stop and distributed_initialized()):
            return
        try:
            import torch.distributed as dist

            dist.barrier()      # rank 0 does not acknowledge stop while others still write
        except Exception as exc:  # noqa: BLE001
            if self._manifest is not None:
                self._manifest.add_error(f"barrier at stop failed: {exc}")


def profile(config: CaptureConfig | dict) -> Profiler:
    """`with traceattr.capture.profile(cfg) as prof:` ... `prof.step()` once per global step."""
    return Profiler(config)


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
