"""The problems a traceattr.capture run's manifests record (a rank killed in stop(), a lost window), read
for the header notes of summarize and report and for check's capture_incomplete row."""

from __future__ import annotations

from traceattr.io.store import is_store, store_capture_problems
from traceattr.io.summaries import problems_by_run


def capture_problems_at(path: str) -> list[str]:
    """The problems of the traceattr.capture run at or under `path` (one run: report), from its manifests,
    or those a store carries from the capture it was converted from."""
    return capture_problems_by_run(path, ["."])["."]


def capture_problems_by_run(path: str, runs: list[str]) -> dict[str, list[str]]:
    """io.summaries.problems_by_run; a store (one run) holds its capture's problems itself."""
    if is_store(path):
        return {name: store_capture_problems(path) if index == 0 else [] for index, name in enumerate(runs)}
    return problems_by_run(path, runs)
