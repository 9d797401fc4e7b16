"""What the writer made of each window: the files that exist, the top kernels, the artifacts that failed.

Fed by the writer's events (traceattr.capture.writer) on the training thread, or by the writer's reaper
thread after a timed-out stop(); every change goes to the rank's manifest. A failed artifact is skipped
for its window with one warning per kind; it never disables profiling.
"""

from __future__ import annotations

import collections
from pathlib import Path

from traceattr.capture.manifest import Manifest, record_name
from traceattr.capture.status import KernelRow
from traceattr.capture.warn import warn


class WindowOutputs:
    def __init__(self) -> None:
        self.files: list[str] = []
        self.kernels: dict[int, tuple[KernelRow, ...]] = {}
        self.windows_written = 0        # windows done with their trace on disk (a skipped artifact or not)
        self.errors: list[str] = []     # every skipped artifact, "window W: <stage> failed: <why>"
        self._traced: set[int] = set()
        self._errors: dict[int, list[str]] = collections.defaultdict(list)
        self._warned_stages: set[str] = set()
        self._manifest: Manifest | None = None
        self._rank_dir: Path | None = None
        self._rank: int | None = None
        self._device_requested = False

    def attach(self, manifest: Manifest, rank_dir: Path, rank: int, device_requested: bool) -> None:
        self._manifest, self._rank_dir, self._rank = manifest, rank_dir, rank
        self._device_requested = device_requested

    def latest_kernels(self) -> tuple[KernelRow, ...]:
        return self.kernels[max(self.kernels)] if self.kernels else ()

    def apply(self, event: dict, flush_files: bool) -> None:
        """One writer event. flush_files=False: a new file reaches the manifest with its window's "done"
        (one small write per window on the training thread)."""
        window, kind = event["window"], event["event"]
        if kind == "file":
            self.files.append(str(self._rank_dir / event["name"]))
            if event["kind"] == "trace":
                self._traced.add(window)
            self._manifest.add_file(window, event["kind"], event["name"], flush=flush_files)
        elif kind == "kernels":
            self.kernels[window] = tuple(KernelRow(window=window, **row) for row in event["rows"])
        elif kind == "error":
            self._artifact_failed(window, event["stage"], event["message"])
        elif kind == "done":
            errors = self._errors.pop(window, [])
            degraded = event.get("degraded") if self._device_requested else None   # CPU-only: no kernels
            if window in self._traced:     # what exists: a trace kept uncompressed or without its summary too
                self.windows_written += 1
            # the writer's record of the window goes once the manifest on disk lists it
            self._manifest.update_window(window, record=self._rank_dir / record_name(window),
                                         status="incomplete" if errors else "written",
                                         degraded=degraded, **({"errors": errors} if errors else {}))

    def _artifact_failed(self, window: int, stage: str, message: str) -> None:
        text = f"window {window}: {stage} failed: {message}"
        self.errors.append(text)
        self._errors[window].append(f"{stage} failed: {message}")
        self._manifest.add_error(text)
        if stage not in self._warned_stages:      # one warning per kind; each one is in the manifest
            self._warned_stages.add(stage)
            warn(f"traceattr.capture: rank {self._rank} {text}; that artifact is skipped for this window and "
                 "profiling goes on (later failures of this kind are recorded in the manifest only)")
