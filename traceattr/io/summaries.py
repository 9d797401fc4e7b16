"""Capture-time summaries: read the `window{W}.kernels.parquet` files that traceattr.capture writes, so that
`summarize --by kernel` answers without reading the trace JSON (analysis/capture_summary.py sums the rows
read here into the table).

A capture summary holds, per window, the columns of summarize(by="kernel"): rank, device, name, category,
count, duration_ns, self_ns, solo_ns, self_pct. Summed over windows these give the kernel table exactly
(Σ self_ns per device and window == its busy time, so self_pct is recomputed from Σ self_ns).
`--by rank` needs the window lengths and exposed communication, and `--by category` the exposed time of each
category (when no other category ran), which per-kernel sums cannot hold: they read the traces.
A summary is used only when every trace of the run has one that is not older than the trace, and the
manifests are plainly one run (the trace path splits runs; summaries summed over two would merge them).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from traceattr import schema as S
from traceattr.errors import TraceDiscoveryError
from traceattr.io.discover import (FOLDER, INCOMPLETE_STORE, MANIFEST_NAME, STORE, FoundFile,  # noqa: F401  (light)
                                   discover, find_trace_files, is_capture_manifest, stat_of)
from traceattr.io import limits
from traceattr.io.limits import MAX_RANK, TIME_LIMIT_NS
from traceattr.io.manifest import config_ranks, manifest_text, read_run

SUMMARY_LEVELS = ("kernel",)


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
    """The summary rows of a capture folder (or of one of its rank folders), CaptureRows(reason=...) when
    they cannot answer level `by`, or None when `path` is not a capture folder at all."""
    root = Path(path)
    folders = capture_folders(path)
    found = next((f for f in folders if f.folder == root), None)
    if found is None:       # no capture, or a parent of some: the traces answer (and split runs)
        return None
    if by not in SUMMARY_LEVELS:
        try:
            listed = any(window.get("kernels") for view in _views(found) for window in view.windows)
        except TraceDiscoveryError:       # the traces answer; capture_problems says what is wrong
            listed = False
        if not listed:
            return None     # no summaries to explain away
        return CaptureRows(reason=f"capture summaries hold no window lengths or exposed time "
                                     f"(needed by --by {by}): read the traces")
    if len(folders) > 1:
        other = next(f.folder for f in folders if f is not found)
        return CaptureRows(reason=f"{other} holds another capture: read the traces")
    views = _views(found)     # each manifest alone: a manifest of the wrong shape is one clean error
    reason = _not_one_run(found, views)
    if reason:      # the trace path splits runs; summaries summed over these manifests would merge them
        return CaptureRows(reason=f"{reason}: read the traces")
    run = views[0] if found.one_rank else _read_run(root, known=found.inputs)
    real = functools.cache(os.path.realpath)     # each file's links resolved once (lstat per part)
    unlisted = _unlisted_traces(path, run.trace_files, real)
    if unlisted:
        return CaptureRows(reason=f"{unlisted[0]} is in no capture manifest (an interrupted or rewritten "
                                     "capture): read the traces")
    parts, used = [], []
    walked = found.inputs.held_paths if found.inputs is not None else frozenset()
    for window in run.windows:
        trace, kernels = window.get("trace"), window.get("kernels")
        where = f"rank {window.get('rank')} window {window.get('window')}"
        if trace and not kernels:
            return CaptureRows(reason=f"no capture summary for {where} in its manifest, or none on disk (only "
                                      "summaries the capture recorded are read): read the traces")
        if not kernels:
            continue
        # the summary is read: its links are resolved; the trace is only stat'd, and one the walk found lies
        # under the folder already (its parts need no second lstat each)
        outside = [str(p) for p in (kernels,) + (() if str(trace) in walked else (trace,))
                   if p and not _inside(root, p, real)]
        if outside:
            raise TraceDiscoveryError(f"{root}: the capture manifest of {where} names a file outside the capture "
                                      f"folder ({outside[0]}): refusing to read it")
        if trace and os.stat(kernels).st_mtime_ns < _stat(found.inputs, trace).st_mtime_ns:
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


@dataclass(frozen=True)
class CaptureFolder:
    """A traceattr.capture folder (its out_dir) and the capture manifests in its sub-folders; or, with
    `one_rank`, the rank folder a path named, whose own manifest is read alone."""

    folder: Path
    manifests: tuple[Path, ...]
    one_rank: bool = False
    inputs: Any = field(default=None, compare=False)     # the io.discover.Inputs they were found in

    @property
    def out_dir(self) -> Path:
        return self.folder.parent if self.one_rank else self.folder


def capture_folders(path: str | os.PathLike) -> list[CaptureFolder]:
    """The capture folders at or under `path`, found where the trace path finds files (out_dir/rank*/
    manifest.json at any depth; a rank folder when `path` is one); [] for a file or a path without traces.
    `path` may be an io.discover.Inputs: its walk, and the manifests it read, are used."""
    inputs = discover(path)
    root = Path(path)
    if inputs.kind not in (FOLDER, STORE, INCOMPLETE_STORE):
        return []
    own = root / MANIFEST_NAME
    # a folder's own manifest.json, when a readable file, is among the files its walk found
    if str(own) in inputs.manifests or inputs.kind != FOLDER and is_capture_manifest(own):
        return [CaptureFolder(root, (own,), one_rank=True, inputs=inputs)]
    try:
        inputs.found_files(noted=False)
    except TraceDiscoveryError:
        return []
    groups: dict[Path, list[Path]] = {}
    for file in map(Path, inputs.manifests):
        if file.name == MANIFEST_NAME:
            groups.setdefault(file.parent.parent, []).append(file)
    return [CaptureFolder(folder, tuple(sorted(paths)), inputs=inputs) for folder, paths in sorted(groups.items())]


def capture_problems(path: str | os.PathLike) -> list[tuple[Path, list[str]]]:
    """(folder, problems) for every capture folder at or under `path` whose run is not complete and clean
    (read_run's problems: a rank that never stopped, unfinished writes, a selected rank with no manifest).
    Manifests that are not one run (a copied or stale rank folder) each answer for their own rank folder."""
    out = []
    for found in capture_folders(path):
        try:
            views = _views(found)
            if found.one_rank or not _not_one_run(found, views):
                parts = [(found.folder, (views[0] if found.one_rank else
                                         _read_run(found.folder, known=found.inputs)).problems)]
            else:
                parts = [(manifest.parent, view.problems) for manifest, view in zip(found.manifests, views)]
        except TraceDiscoveryError as exc:
            parts = [(found.folder, [f"manifests not read: {exc}"])]
        out += [(folder, problems) for folder, problems in parts if problems]
    return out


def problems_by_run(path: str | os.PathLike, runs: list[str]) -> dict[str, list[str]]:
    """capture_problems under `path`, each line prefixed with its folder (relative to `path`, unless it is
    `path`), given to the runs of those names (folders relative to `path`, as io/runs names them): the runs
    in the folder or under it, else the innermost run holding it, else the first run."""
    out: dict[str, list[str]] = {name: [] for name in runs}
    if not runs:
        return out
    root = Path(path)
    folders = {name: re.sub(r" #\d+$", "", name) for name in runs}
    for folder, problems in capture_problems(path):
        where = os.path.relpath(folder, root)
        label = "" if where == "." else f"{where}: "
        inside = [n for n, f in folders.items() if _under(f, where)]
        around = sorted((n for n, f in folders.items() if _under(where, f)), key=lambda n: -len(folders[n]))
        for name in inside or around[:1] or runs[:1]:
            out[name] += [label + problem for problem in problems]
    return out


def _under(folder: str, parent: str) -> bool:
    """Whether the relative folder `folder` is `parent` or lies under it."""
    return parent == "." or folder == parent or folder.startswith(parent.rstrip("/") + "/")


def _read_run(out_dir: Path, manifest: Path | None = None, known=None):
    """read_run (of one rank's `manifest` only, when given), TraceDiscoveryError for a manifest of the wrong
    shape. `known`: the path's Inputs (files it found exist: no second look)."""
    whole = manifest is None and known is not None and Path(out_dir) == Path(known)
    try:
        return read_run(out_dir, manifest, known=known.held_paths if known is not None else frozenset(),
                        manifests=known.rank_manifests() if whole else None,
                        read=known.read_manifest if known is not None else None)
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise TraceDiscoveryError(f"{manifest or out_dir}: not a readable capture manifest "
                                  f"({type(exc).__name__})") from None


def _views(found: CaptureFolder) -> list:
    """One read_run view per manifest of `found`, each read alone (so two of one rank are no error)."""
    return [_read_run(found.out_dir, manifest, found.inputs) for manifest in found.manifests]


def _not_one_run(found: CaptureFolder, views: list) -> str:
    """Why the manifests of `found` may hold more than one run, '' when nothing says so. The capture writes
    rank R into a folder named rank{R} (so no rank twice); one run's ranks share the world size and config
    and start together (runs started more than FAR_APART_NS apart are split by the trace path too)."""
    from traceattr.io.runs import FAR_APART_NS   # lazy: io.runs imports the decoder; capture summaries decode nothing

    worlds, configs, starts = set(), set(), []
    for manifest, view in zip(found.manifests, views):
        ((rank, data),) = view.manifests.items()
        if Path(os.path.abspath(manifest)).parent.name != f"rank{rank}":      # PATH may be "." or "rank1/.."
            return f"{manifest} (rank {rank}) is not in a folder named rank{rank} (a copy, or another run)"
        worlds.add(data["world_size"])
        configs.add(str(data.get("config_sha256")))
        if type(data.get("started_at_ns")) is int:
            starts.append(data["started_at_ns"])
    if len(worlds) > 1:
        return f"the manifests of {found.folder} are of world sizes {', '.join(map(str, sorted(worlds)))}"
    if len(configs) > 1:
        return f"the manifests of {found.folder} are of {len(configs)} configs"
    if starts and max(starts) - min(starts) > FAR_APART_NS:
        return f"the ranks of {found.folder} started {(max(starts) - min(starts)) // 3_600_000_000_000} h apart"
    return ""


def _unlisted_traces(path, listed: list[str], real=os.path.realpath) -> list[str]:
    """Traces on disk that no manifest lists: summaries would then answer from other windows than traces.
    Paths are compared as written first; links are resolved (an lstat per part) only for what is left."""
    written = {os.path.abspath(p) for p in listed}
    left = [str(p) for p in discover(path).trace_files() if os.path.abspath(str(p)) not in written]
    if not left:
        return []
    known = {real(p) for p in listed}
    return [p for p in left if real(p) not in known and not _not_a_trace(Path(p))]


_SMALL_JSON = 1 << 20


def _not_a_trace(path: Path) -> bool:
    """Whether the loader surely skips `path` as not a trace (a config.json beside the traces): valid JSON of
    at most 1 MiB (inflated) without a top-level traceEvents. Anything else counts as a trace: the traces
    then answer, and the loader says what the file is."""
    import gzip
    import zlib

    import msgspec

    try:
        with (gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")) as handle:
            text = handle.read(_SMALL_JSON + 1)
        if len(text) > _SMALL_JSON:
            return False
        document = msgspec.json.decode(text)
    except (OSError, EOFError, zlib.error, msgspec.DecodeError, RecursionError):
        return False
    return not (isinstance(document, dict) and "traceEvents" in document)


def _inside(root: Path, path: str, real=os.path.realpath) -> bool:
    """Whether `path` (symlinks resolved) lies under the capture folder `root`."""
    return Path(real(str(path))).is_relative_to(real(str(root)))


def _stat(inputs, path: str) -> os.stat_result:
    """The stat the walk took of `path` when it found it, else one now."""
    held = inputs.held([path])[0] if inputs is not None else path
    return stat_of(held)


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


def capture_selection(paths: list[str], inputs=None) -> set[int] | None:
    """The ranks a traceattr.capture config selected (`ranks=`, rank 0 by default), read from the manifest
    beside the first of `paths` (trace files) that has one; None when none is a capture's, the config
    selected "all", or the manifest cannot say. A capture of rank 0 of 8 is not 7 missing ranks. `inputs`:
    the walk that found `paths` (io.discover.Inputs), which says without another look whether a manifest
    is beside a trace it found."""
    import json

    looked = set()
    for path in paths:
        folder = os.path.dirname(path)
        if folder in looked:          # one look per folder: 20,000 traces in one folder share one manifest
            continue
        looked.add(folder)
        manifest = Path(path).parent / MANIFEST_NAME
        try:
            size = _file_size(manifest, path, inputs)
            if size is None or size > limits.MAX_MANIFEST_BYTES:
                continue
            found = inputs is not None and str(path) in inputs.held_paths
            raw = (inputs.read_manifest(manifest) if found
                   else limits.read_at_most(manifest, limits.MAX_MANIFEST_BYTES))
            config = json.loads(manifest_text(raw)).get("config")
        except (OSError, ValueError, AttributeError, RecursionError):
            return None

        values = config_ranks(config)
        if not isinstance(values, list) or not all(type(r) is int and 0 <= r <= MAX_RANK for r in values):
            return None
        return set(values)
    return None


def _file_size(path: Path, beside: str, inputs) -> int | None:
    """The size of the regular file `path` (None when it is not one), from the walk that found the trace
    `beside` in the same folder: that walk found every regular *.json there (manifest.json among them)."""
    if inputs is not None and str(beside) in inputs.held_paths:
        found = inputs.held([str(path)])[0]
        return found.stat.st_size if isinstance(found, FoundFile) else None
    return path.stat().st_size if path.is_file() else None
