"""What a report says about the loaded trace set before its table: files, ranks, span, totals, notes."""

from __future__ import annotations

import numpy as np

from traceattr import schema as S
from traceattr.attribution import columns as C
from traceattr.analysis.summarize import rank_table
from traceattr.model.traceset import timed_range
from traceattr.units import human_ns

HOST_ONLY_NOTE = ("no device activities (kernels, memcpy, memset) in these traces: device time is zero and "
                  "the kernel tables are empty (a CPU-only run?)")


def rules_text(by_rule: dict[str, int]) -> str:
    """Which rule of io/comm_rules.py made how much communication time (io.comm_rules.time_by_rule's dict)."""
    total = sum(by_rule.values()) or 1
    return ", ".join(f"{rule} {human_ns(ns)} ({100 * ns / total:.1f}%)" for rule, ns in
                     sorted(by_rule.items(), key=lambda item: -item[1]))


def header_of(files, groups, notes, check: str | None = None) -> dict:
    """A report's header facts from the files table, the sweep's (rank, window, device) groups, the load
    notes and the one-line check verdict (left out when None), reduced over files (analysis/summary_plan.py).
    Keys ending in `_ns` hold int64 ns; `notes` lists what to tell the user."""
    starts = np.asarray(files.column(S.START_NS).to_numpy(), dtype=np.int64)
    ends = np.asarray(files.column(S.END_NS).to_numpy(), dtype=np.int64)
    by_rank = rank_table(groups, files)
    ranks = sorted(set(files.column(S.RANK).to_pylist()))
    devices = sorted({(int(r), int(d)) for r, d in zip(groups[S.RANK], groups[S.DEVICE])})
    window_ns = int((ends - starts).sum())
    busy_ns = int(groups[S.BUSY_NS].sum())
    activities = int(groups[S.ACTIVITIES].sum())
    header = {"source": "traces"}
    if check is not None:
        header["check"] = check          # the one-line integrity verdict of every table
    header.update({
        "files": files.num_rows,
        "ranks": ranks,
        "windows": files.num_rows,
        "devices": len(devices),
        "activities": activities,
        "span_ns": _span_ns(files),
        "window_ns": window_ns,
        "busy_ns": busy_ns,
        # Σ over (rank, device) of the rank's windows minus busy, as in summarize(by="rank")
        "idle_ns": int(by_rank[S.IDLE_NS].sum()),
        "duration_ns": int(groups[S.DURATION_NS].sum()),
        "overlap_ns": int(groups[S.OVERLAP_NS].sum()),
        **exposed_communication(groups),
        "rank_sources": _rank_sources(files),
        "eras": sorted(set(files.column(S.ERA).to_pylist())),
        "host_only": activities == 0,
        "notes": list(notes) + _warnings(activities, groups),
    })
    return header


EXPOSED_COMMUNICATION = "exposed communication"     # the header key of exposed_communication's line


def exposed_communication(groups) -> dict:
    """{"exposed communication": its line} when communication ran: the time it ran with no compute beside it
    (exposed_communication_ns, memcpy/memset hide nothing), its share of the time communication ran, and
    the overlap ratio (the rest: the share compute hid). Both shares are of the running time, not of the
    fair share, which an overlapping memcpy halves while the exposed time stays whole."""
    running = int(groups[C.COMMUNICATION_RUNNING_NS].sum()) if len(groups) else 0
    if running <= 0:
        return {}
    exposed = int(groups[S.EXPOSED_COMMUNICATION_NS].sum())
    return {EXPOSED_COMMUNICATION: f"{human_ns(exposed)} ({_percent(exposed, running)} of communication; "
                                   f"overlap ratio {_percent(running - exposed, running)})"}


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%"


def with_carried_in(header: dict, count: int, ns: int, excluded: bool) -> dict:
    """The header with `carried in` right after busy time: the activities launched before the window
    (attribution/carried.py), counted in busy time, or left out of it with --exclude-carried-in."""
    if not count:
        return header
    what = f"{count} kernel{'s' * (count != 1)}, {human_ns(ns)} ({ns:,} ns)"
    text = (f"{what} left out of every total (--exclude-carried-in)" if excluded
            else f"{what} (launched before the window)")
    out = {}
    for key, value in header.items():
        out[key] = value
        if key == "busy_ns":
            out["carried in"] = text
    out.setdefault("carried in", text)
    return out


def _span_ns(files) -> int:
    first, last = timed_range(files) or (0, 0)
    return last - first


def _rank_sources(files) -> dict[int, str]:
    """Per rank, where its number came from (several files of one rank may differ)."""
    sources: dict[int, set[str]] = {}
    for rank, source in zip(files.column(S.RANK).to_pylist(), files.column(S.RANK_SOURCE).to_pylist()):
        sources.setdefault(rank, set()).add(source)
    return {rank: " + ".join(sorted(found)) for rank, found in sorted(sources.items())}


def with_table_facts(header: dict, table, imbalance: tuple[dict, list[str]] | None) -> dict:
    """Add a table's own facts to a header (header_of): the linked share and notes of attribution tables,
    the imbalance facts and notes (imbalance.rank_facts_of / step_facts_of), and which kind of time the table holds."""
    if "linked_share" in table.attrs:   # the trust figure of attribution tables, and plain warnings
        header["linked share"] = {r: "n/a" if v != v else f"{100 * v:.1f}%"
                                  for r, v in table.attrs["linked_share"].items()}
        header["notes"].extend(table.attrs.get("notes", []))
    if "facts" in table.attrs:      # multi-rank: clock alignment, straggler (rank_comm.py)
        header.update(table.attrs["facts"])
        header["notes"].extend(table.attrs.get("notes", []))
    header.update(table.attrs.get("level_facts", {}))   # by shape: peaks, modelled share; by launch: short kernels
    if imbalance is not None:
        facts, notes = imbalance
        header.update(facts)
        header["notes"].extend(notes)
    time_kind = table.attrs.get("time_kind", "device")   # attribute() reports host time on CPU-only traces
    if time_kind != "device":
        header["notes"].append(f"the table holds {time_kind} time, not device time")
    return header


def _warnings(activities: int, groups) -> list[str]:
    notes = []
    if activities == 0:
        notes.append(HOST_ONLY_NOTE)
    same_stream = int(groups[C.SAME_STREAM_OVERLAP_NS].sum())
    if same_stream:
        affected = int((groups[C.SAME_STREAM_OVERLAP_NS] > 0).sum())
        notes.append(f"activities on one stream overlap by {same_stream} ns in total on {affected} device "
                     "window(s) (µs rounding of older traces, or a profiler bug); counted once in busy time")
    # clamped and dropped durations are already in the loader's per-file notes (with the file's name)
    return notes
