"""Capture-time summaries: read the `window{W}.kernels.parquet` files that traceattr.capture writes, so that
`summarize --by kernel|category` answers without reading the trace JSON (analysis/capture_summary.py sums
the rows read here into the tables).

A capture summary holds, per window, the columns of summarize(by="kernel"): rank, device, name, category,
count, duration_ns, self_ns, solo_ns, self_pct. Summed over windows these give the kernel and category
tables exactly (Σ self_ns per device and window == its busy time, so self_pct is recomputed from Σ self_ns).
`--by rank` needs the window lengths and exposed communication, which the summaries lack: it reads traces.
A summary is used only when every trace of the run has one that is not older than the trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from traceattr import schema as S
from traceattr.errors import TraceDiscoveryError
from traceattr.io.discover import MANIFEST_NAME, is_capture_manifest  # noqa: F401  (light: in discover)
from traceattr.io.limits import MAX_RANK, TIME_LIMIT_NS

SUMMARY_LEVELS = ("kernel", "category")


@dataclass
class CaptureRows:
    """Either `rows` (every window's summary rows: rank, device, name, category, count, duration_ns,
    self_ns, solo_ns) or `reason` why the traces must be read instead."""

    rows: pd.DataFrame | None = None
    reason: str = ""
    files: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)     # read_run's, of the manifests read for the rows


def read_capture_rows(path: str | os.PathLike, by: str) -> CaptureRows | None:
    """The summary rows of a capture folder, CaptureRows(reason=...) when they cannot answer level `by`,
    or None when `path` is not a capture folder at all."""
    root = Path(path)
    if not root.is_dir():
        return None
    manifests = sorted(root.glob(f"rank*/{MANIFEST_NAME}")) or sorted(root.glob(MANIFEST_NAME))
    manifests = [m for m in manifests if is_capture_manifest(m)]
    if not manifests:
        return None
    if by not in SUMMARY_LEVELS:
        return CaptureRows(reason=f"capture summaries hold no window lengths or exposed communication "
                                     f"(needed by --by {by}): read the traces")
    from traceattr.capture.manifest import read_run   # plain json + pathlib: no torch import

    try:
        run = read_run(root)
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:   # a manifest of the wrong shape
        raise TraceDiscoveryError(f"{root}: not a readable capture manifest ({type(exc).__name__})") from None
    unlisted = _unlisted_traces(root, run.trace_files)
    if unlisted:
        return CaptureRows(reason=f"{unlisted[0]} is in no capture manifest (an interrupted or rewritten "
                                     "capture): read the traces")
    parts, used = [], []
    for window in run.windows:
        trace, kernels = window.get("trace"), window.get("kernels")
        where = f"rank {window.get('rank')} window {window.get('window')}"
        if trace and not kernels:
            return CaptureRows(reason=f"no capture summary for {where}: read the traces")
        if not kernels:
            continue
        outside = [str(p) for p in (trace, kernels) if p and not _inside(root, p)]
        if outside:
            raise TraceDiscoveryError(f"{root}: the capture manifest of {where} names a file outside the capture "
                                      f"folder ({outside[0]}): refusing to read it")
        if trace and os.stat(kernels).st_mtime_ns < os.stat(trace).st_mtime_ns:
            return CaptureRows(reason=f"the capture summary of {where} is older than its trace: read the traces")
        rank = window.get("rank")
        if type(rank) is not int or not 0 <= rank <= MAX_RANK:
            raise TraceDiscoveryError(f"{root}: the capture manifest of {where} has an invalid rank")
        frame = _read(kernels, rank)
        if frame is None:
            return CaptureRows(reason=f"the capture summary of {where} is unreadable, of another shape or holds "
                                         "impossible values: read the traces")
        parts.append(frame)
        used.append(kernels)
    if not used:
        return CaptureRows(reason="the capture wrote no kernel summaries: read the traces")
    if sum(sum(part[S.DURATION_NS].tolist()) for part in parts) > TIME_LIMIT_NS:    # the tables' sums fit int64
        return CaptureRows(reason="the capture summaries add up to more kernel time than any run holds: "
                                  "read the traces")
    return CaptureRows(rows=pd.concat(parts, ignore_index=True), files=used,
                       ranks=sorted(int(r) for r in run.ranks), problems=run.problems)


def capture_problems(path) -> list[str]:
    """Why a traceattr.capture folder's run is not complete and clean (read_run's problems: a rank that
    never stopped, unfinished writes, a selected rank with no manifest); [] for any other path."""
    root = Path(path)
    if not root.is_dir() or not any(is_capture_manifest(m) for m in root.glob(f"rank*/{MANIFEST_NAME}")):
        return []
    from traceattr.capture.manifest import read_run   # plain json + pathlib: no torch import

    return read_run(root).problems


def _unlisted_traces(root: Path, listed: list[str]) -> list[str]:
    """Traces on disk that no manifest lists: summaries would then answer from other windows than traces."""
    from traceattr.io.discover import find_trace_files

    known = {os.path.realpath(p) for p in listed}
    return [str(p) for p in find_trace_files(root)
            if not is_capture_manifest(p) and os.path.realpath(p) not in known]


def _inside(root: Path, path: str) -> bool:
    """Whether `path` (symlinks resolved) lies under the capture folder `root`."""
    return Path(path).resolve().is_relative_to(root.resolve())


_SUMMARY_TYPES = {S.DEVICE: "i", S.NAME: "O", S.CATEGORY: "O", S.COUNT: "i", S.DURATION_NS: "i",
                  S.SELF_NS: "i", S.SOLO_NS: "i"}


def _read(path: str, rank: int) -> pd.DataFrame | None:
    """One summary file, or None when it cannot be read or lacks a column of the right kind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        frame = pq.read_table(path).to_pandas()
    except (OSError, pa.ArrowException):
        return None
    if any(column not in frame or frame[column].dtype.kind != kind for column, kind in _SUMMARY_TYPES.items()):
        return None
    if not _possible(frame):
        return None
    frame[S.RANK] = rank     # the manifest's rank names the folder; a summary of one file may say rank 0
    return frame


def _possible(frame: pd.DataFrame) -> bool:
    """Whether a summary's values are ones the capture can write: kernels of a device category, named,
    counted, 0 <= solo <= self <= duration, and durations whose sum stays far inside int64 (a window's
    kernels run for less than TIME_LIMIT_NS, 95 years)."""
    count, duration = frame[S.COUNT].to_numpy(), frame[S.DURATION_NS].to_numpy()
    self_ns, solo = frame[S.SELF_NS].to_numpy(), frame[S.SOLO_NS].to_numpy()
    return bool(frame[S.NAME].notna().all() and frame[S.CATEGORY].isin(S.DEVICE_CATEGORIES).all()
                and (count >= 1).all() and (solo >= 0).all() and (solo <= self_ns).all()
                and (self_ns <= duration).all()
                and sum(duration.tolist()) <= TIME_LIMIT_NS)      # Python ints: exact, never wraps
