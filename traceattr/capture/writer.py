"""Background writer: gzip the exported trace, rename it atomically, then write the kernel summary.

Runs on one daemon thread per profiler so the training thread only pays for torch's own export. A file is
either complete under its final name or absent: everything is written to a hidden `.tmp` name first.
Results go back through callbacks; the profiler decides what a failure means (it disables profiling).
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from traceattr.capture.manifest import summary_name, temp_name, trace_name

try:   # isal is a dependency and about 5x faster; stdlib gzip keeps us working without it
    from isal import igzip as _gzip_module
except ImportError:   # pragma: no cover
    import gzip as _gzip_module



def kernel_summary_schema():
    """The summary parquet: the columns of traceattr.summarize(ts, by="kernel"). pyarrow is imported only
    here, so a capture without summaries runs where the analysis stack is not installed."""
    import pyarrow as pa

    from traceattr import schema as S

    return pa.schema([
        (S.RANK, pa.int32()), (S.DEVICE, pa.int64()), (S.NAME, pa.string()), (S.CATEGORY, pa.string()),
        (S.COUNT, pa.int64()), (S.DURATION_NS, pa.int64()), (S.SELF_NS, pa.int64()), (S.SOLO_NS, pa.int64()),
        (S.SELF_PCT, pa.float64()),
    ])


def __getattr__(name: str):
    if name == "KERNEL_SUMMARY_SCHEMA":
        return kernel_summary_schema()
    raise AttributeError(name)


@dataclass
class WindowJob:
    rank_dir: Path
    window: int
    raw_path: Path                  # torch's uncompressed export, under a hidden temporary name
    compress: bool
    kernel_summary: bool
    memory_snapshot: Any = None     # allocator snapshot taken at the window's end, pickled here
    prepend_header: str = ""        # `"distributedInfo": {...},` for torch builds that cannot preset it


class WriteError(Exception):
    """A write stage failed; `stage` is compression, summary or memory snapshot."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        self.stage, self.cause = stage, cause
        super().__init__(f"{stage} failed: {type(cause).__name__}: {cause}")


class Writer:
    """One background thread that writes windows in order. `on_file(window, kind, path)` after each rename,
    `on_done(window, degraded)` after the last stage, `on_error(window, WriteError)` on failure."""

    def __init__(self, on_file: Callable, on_done: Callable, on_error: Callable) -> None:
        self._on_file, self._on_done, self._on_error = on_file, on_done, on_error
        self._jobs: queue.Queue = queue.Queue()
        self._pending: dict[int, str] = {}     # window -> what it is doing now
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="traceattr-capture-writer", daemon=True)
        self._thread.start()

    def submit(self, job: WindowJob) -> None:
        with self._lock:
            self._pending[job.window] = "queued"
        self._jobs.put(job)

    def pending(self) -> dict[int, str]:
        with self._lock:
            return dict(self._pending)

    def close(self, timeout_s: float) -> dict[int, str]:
        """Stop after the queued jobs; wait at most timeout_s. Returns what is still unfinished."""
        self._jobs.put(None)
        self._thread.join(timeout_s)
        return self.pending()

    def _stage(self, window: int, stage: str) -> None:
        with self._lock:
            self._pending[window] = stage

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                degraded = self._write(job)
            except WriteError as exc:
                self._on_error(job.window, exc)
            except BaseException as exc:   # noqa: BLE001 - nothing may escape into the process
                self._on_error(job.window, WriteError("writer", exc))
            else:
                self._on_done(job.window, degraded)
            finally:
                with self._lock:
                    self._pending.pop(job.window, None)

    def _write(self, job: WindowJob) -> str | None:
        final = self._write_trace(job)
        degraded = None
        if job.kernel_summary:
            self._stage(job.window, "summary")
            try:
                rows = write_kernel_summary(final, job.rank_dir / temp_name(job.window, "kernels"),
                                            job.rank_dir / summary_name(job.window))
            except Exception as exc:
                raise WriteError("kernel summary", exc) from exc
            self._on_file(job.window, "kernels", job.rank_dir / summary_name(job.window))
            degraded = None if rows else "no device activity in this window"
        if job.memory_snapshot is not None:
            self._stage(job.window, "memory snapshot")
            target = job.rank_dir / f"window{job.window}.memory.pickle"
            try:
                tmp = job.rank_dir / temp_name(job.window, "memory")
                with open(tmp, "wb") as out:
                    pickle.dump(job.memory_snapshot, out)
                os.replace(tmp, target)
            except Exception as exc:
                raise WriteError("memory snapshot", exc) from exc
            self._on_file(job.window, "memory", target)
        return degraded

    def _write_trace(self, job: WindowJob) -> Path:
        final = job.rank_dir / trace_name(job.window, job.compress)
        self._stage(job.window, "compression" if job.compress else "rename")
        try:
            if job.compress or job.prepend_header:
                tmp = job.rank_dir / temp_name(job.window, "gz" if job.compress else "json")
                copy_trace(job.raw_path, tmp, job.compress, job.prepend_header)
                os.replace(tmp, final)
                job.raw_path.unlink()
            else:
                os.replace(job.raw_path, final)
        except Exception as exc:
            # keep what torch exported under a real name: an uncompressed trace beats no trace
            plain = job.rank_dir / trace_name(job.window, False)
            try:
                if job.raw_path.exists() and not job.prepend_header:
                    os.replace(job.raw_path, plain)
                    self._on_file(job.window, "trace", plain)
            except OSError:
                pass
            raise WriteError("compression" if job.compress else "rename", exc) from exc
        self._on_file(job.window, "trace", final)
        return final


def copy_trace(src: Path, dst: Path, compress: bool, prepend_header: str = "") -> None:
    """Stream src to dst (gzip-compressed when asked), inserting header keys after the opening brace."""
    opener = (lambda p: _gzip_module.open(p, "wb")) if compress else (lambda p: open(p, "wb"))
    try:
        with open(src, "rb") as fin, opener(dst) as fout:
            if prepend_header:
                head = fin.read(1 << 16)
                brace = head.index(b"{")
                fout.write(head[:brace + 1] + prepend_header.encode() + head[brace + 1:])
            shutil.copyfileobj(fin, fout, 1 << 20)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise


def write_kernel_summary(trace_path: Path, tmp: Path, final: Path) -> int:
    """Exact per-kernel self time of one window via the analysis core (same code as `summarize`)."""
    import pyarrow.parquet as pq

    table = kernel_summary_table(trace_path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return table.num_rows


def kernel_summary_table(trace_path: Path):
    import pyarrow as pa

    import traceattr

    schema = kernel_summary_schema()
    frame = traceattr.summarize(traceattr.load(str(trace_path), cache=False, jobs=1), by="kernel")
    if len(frame) == 0:
        return schema.empty_table()
    missing = [c for c in schema.names if c not in frame.columns]
    if missing:
        raise ValueError(f"summarize(by='kernel') lacks columns {missing}")
    columns = {c: pa.array(frame[c].to_numpy(), type=schema.field(c).type) for c in schema.names}
    return pa.table(columns, schema=schema)
