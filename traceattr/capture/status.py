"""What a rank's profiler reports: small, frozen and picklable, so a driver can gather one per rank over RPC."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class KernelRow(NamedTuple):
    """One row of a window's kernel summary (the columns of `summarize(by="kernel")`), times in int64 ns."""

    window: int
    rank: int
    device: int
    name: str
    category: str
    count: int
    duration_ns: int
    self_ns: int
    solo_ns: int
    self_pct: float


@dataclass(frozen=True)
class CaptureStatus:
    """What one rank's profiler has done so far."""

    rank: int | None
    state: str                      # created | disabled | not_selected | running | done | stopped | failed
    files: tuple[str, ...] = ()     # paths that exist (traces, summaries, snapshots)
    error: str | None = None        # the fault that disabled profiling, if any
    pending: tuple[str, ...] = ()   # writes still unfinished when stop() returned
    windows: int = 0                # windows written: their trace is on disk (see `errors` for what was skipped)
    kernels: tuple[KernelRow, ...] = ()   # the latest written window's top kernels by self time
    errors: tuple[str, ...] = ()    # every error recorded: skipped artifacts ("window W: ... failed"), faults
    manifest_error: str | None = None     # why the manifest on disk is behind (a full disk); None: it is current
