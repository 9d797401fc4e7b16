"""The straggler and why: the rank whose late arrivals at collectives made the others wait the most.

The straggler is the rank with the largest `wait_caused_ns` (collectives.py), never the busiest rank: a
rank that waits long arrived early. Its cause comes from the intervals *before* the collectives it was late
for, each from the end of the rank's previous communication activity to its arrival, compared with the
median rank (the participant with the median mean arrival over those collectives) over the same collectives.
Each interval on each rank splits exactly into
* device compute: self time of the non-communication activities that start in it,
* host-bound idle: device idle before its last activity ended (gaps while the host had not launched),
* launch gap: device idle from its last activity to the collective's start (a late collective launch),
with busy measured as the union of those activities. The largest straggler-minus-median difference is the
cause; kernels, launching ops or host ops give the detail, with ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.collectives import Collectives, match_collectives
from traceattr.attribution.sweep import sweep
from traceattr.model.traceset import TraceSet
from traceattr.report.shape import human_ns

COMPUTE = "more device compute"
HOST_BOUND = "host-bound (device idle before the host launched its work)"
LATE_LAUNCH = "late collective launch"
CAUSES = {"compute_ns": COMPUTE, "host_bound_idle_ns": HOST_BOUND, "launch_gap_ns": LATE_LAUNCH}


@dataclass(frozen=True)
class Straggler:
    rank: int                        # -1: no straggler (no collective with several ranks, or nobody waited)
    wait_caused_ns: int = 0
    late_arrivals: int = 0
    median_rank: int = -1
    cause: str = ""                  # one of CAUSES' values, or "" when none is larger on the straggler
    deltas: dict[str, int] = field(default_factory=dict)      # straggler - median, per measure, over the intervals
    details: list[str] = field(default_factory=list)          # kernels / ops / host ops behind the cause, with ns
    per_rank: pd.DataFrame = field(default_factory=pd.DataFrame)   # rank, late_arrivals, wait_caused_ns, measures

    def summary(self) -> str:
        if self.rank < 0:
            return "no straggler: no rank made another wait at a collective"
        text = (f"rank {self.rank}: made the others wait {human_ns(self.wait_caused_ns)} over "
                f"{self.late_arrivals} collective(s) it arrived last at")
        if self.median_rank >= 0:
            parts = ", ".join(f"{k.removesuffix('_ns').replace('_', ' ')} {_signed(v)}" for k, v in self.deltas.items())
            text += f"; vs median rank {self.median_rank}: {self.cause or 'no measure is larger'} ({parts})"
        return text


def imbalance(traceset: TraceSet, align: bool = True, comm_patterns=(), found: Collectives | None = None) -> Straggler:
    """The straggler rank and its cause (see the module docstring)."""
    from traceattr.io.comm import apply_patterns
    traceset = apply_patterns(traceset, comm_patterns)
    found = found if found is not None else match_collectives(traceset, align=align)
    per_rank = found.per_rank.groupby(S.RANK, as_index=False)[[S.LATE_ARRIVALS, S.WAIT_CAUSED_NS]].sum()
    if per_rank.empty or int(per_rank[S.WAIT_CAUSED_NS].max()) <= 0:
        return Straggler(-1, per_rank=per_rank)
    top = per_rank.sort_values([S.WAIT_CAUSED_NS, S.RANK], ascending=[False, True]).iloc[0]
    rank = int(top[S.RANK])
    late = found.instances[found.instances[S.LAST_RANK] == rank]
    acts = found.activities
    mine = acts[acts[S.INSTANCE].isin(late[S.INSTANCE])]
    median_rank = _median_rank(mine, rank)
    verdict = Straggler(rank, int(top[S.WAIT_CAUSED_NS]), int(top[S.LATE_ARRIVALS]), median_rank, per_rank=per_rank)
    if median_rank < 0:
        return verdict
    spans = _intervals(traceset, acts, mine, (rank, median_rank))
    measures = {r: _measures(traceset, r, spans[r]) for r in (rank, median_rank)}
    deltas = {name: int(measures[rank][name] - measures[median_rank][name]) for name in CAUSES}
    best = max(deltas, key=deltas.get)
    cause = CAUSES[best] if deltas[best] > 0 else ""
    details = _details(best, measures[rank], measures[median_rank]) if cause else []
    return Straggler(rank, verdict.wait_caused_ns, verdict.late_arrivals, median_rank, cause, deltas, details,
                     per_rank)


def _median_rank(mine: pd.DataFrame, straggler: int) -> int:
    """The participant (not the straggler) with the median mean arrival over the straggler's collectives."""
    others = mine[mine[S.RANK] != straggler]
    if others.empty:
        return -1
    first = mine.groupby(S.INSTANCE)["arrival_ns"].transform("min")
    lateness = (others["arrival_ns"] - first[others.index]).groupby(others[S.RANK]).mean().sort_values(kind="stable")
    return int(lateness.index[(len(lateness) - 1) // 2])


def _intervals(traceset: TraceSet, acts: pd.DataFrame, mine: pd.DataFrame, ranks: tuple[int, int]) -> dict:
    """Per rank: (device, start, end) in its own clock, one per collective the straggler was late for. Both
    ranks' intervals start at the same aligned instant: the later of their previous communication ends."""
    offset = (acts[S.START_NS] - acts["arrival_ns"]).groupby(acts[S.RANK]).first()
    starts = {r: _window_starts(traceset, r) for r in ranks}
    spans: dict[int, list] = {r: [] for r in ranks}
    for _, group in mine[mine[S.RANK].isin(ranks)].groupby(S.INSTANCE):
        first = group.drop_duplicates(S.RANK).set_index(S.RANK)
        if not set(ranks) <= set(first.index):
            continue
        common = S.NO_INT
        for r in ranks:
            row = first.loc[r]
            own = acts[(acts[S.RANK] == r) & (acts[S.DEVICE] == row[S.DEVICE])
                       & (acts["aligned_end_ns"] <= row["arrival_ns"])]
            previous = int(own["aligned_end_ns"].max()) if len(own) else \
                starts[r].get(int(row[S.WINDOW]), int(row[S.START_NS])) - int(offset[r])
            common = max(common, previous)
        for r in ranks:
            row = first.loc[r]
            spans[r].append((int(row[S.DEVICE]), min(common + int(offset[r]), int(row[S.START_NS])),
                             int(row[S.START_NS])))
    return spans


def _measures(traceset: TraceSet, rank: int, spans: list) -> dict:
    """Σ over the rank's intervals: compute, host-bound idle and launch gap (ns), plus compute per kernel and
    launching op, and the host ops that ran while the device idled."""
    device = traceset.device
    self_ns = sweep(traceset).self_ns
    out = {"compute_ns": 0, "host_bound_idle_ns": 0, "launch_gap_ns": 0, "kernels": {}, "ops": {},
           "idle_ops": {}, "gap_ops": {}}
    if not spans:
        return out
    mask = np.asarray(pc.and_(pc.equal(device.column(S.RANK), rank),
                              pc.not_equal(device.column(S.CATEGORY), S.COMMUNICATION)).to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(mask)
    start = np.asarray(device.column(S.START_NS).to_numpy(), np.int64)[rows]
    end = np.asarray(device.column(S.END_NS).to_numpy(), np.int64)[rows]
    dev = np.asarray(device.column(S.DEVICE).to_numpy(), np.int64)[rows]
    names = np.asarray(device.column(S.NAME).to_numpy(zero_copy_only=False), object)[rows]
    ops = _launching_ops(traceset, rows)
    host_ops = _host_ops(traceset, rank)
    for d, b, a in spans:
        inside = (dev == d) & (start >= b) & (start < a)
        out["compute_ns"] += int(self_ns[rows[inside]].sum())
        for key, table in ((names, out["kernels"]), (ops, out["ops"])):
            for name, ns in zip(key[inside].tolist(), self_ns[rows[inside]].tolist()):
                table[name] = table.get(name, 0) + ns
        overlapping = (dev == d) & (start < a) & (end > b)
        busy, last_end, gaps = _union(np.maximum(start[overlapping], b), np.minimum(end[overlapping], a), b)
        tail = a - max(b, last_end)
        out["launch_gap_ns"] += tail
        out["host_bound_idle_ns"] += (a - b) - busy - tail
        _overlap_ops(host_ops, gaps, out["idle_ops"])
        _overlap_ops(host_ops, [(max(b, last_end), a)], out["gap_ops"])
    return out


def _union(lo: np.ndarray, hi: np.ndarray, floor: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(length of the union of [lo, hi), its last end (floor if empty), the gaps between its blocks)."""
    if len(lo) == 0:
        return 0, floor, []
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    new = np.r_[True, lo[1:] > reach[:-1]]
    block_lo, block_hi = lo[new], np.maximum.reduceat(hi, np.flatnonzero(new))
    gaps = [(floor, int(block_lo[0]))] if block_lo[0] > floor else []
    gaps += [(int(h), int(l)) for h, l in zip(block_hi[:-1], block_lo[1:])]
    return int((block_hi - block_lo).sum()), int(block_hi.max()), gaps


def _launching_ops(traceset: TraceSet, rows: np.ndarray) -> np.ndarray:
    has_ops = pc.any(pc.equal(traceset.host.column(S.CATEGORY), S.CPU_OP)).as_py() if traceset.host.num_rows else False
    if not has_ops:
        return np.full(len(rows), "<no cpu ops loaded>", object)
    from traceattr.attribution.links import link
    links = link(traceset)
    codes = links.op_name(links.op_row[rows])
    names = np.asarray(links.host_names + ["<unattributed>"], object)
    return names[np.where(codes >= 0, codes, len(links.host_names))]


def _host_ops(traceset: TraceSet, rank: int) -> pd.DataFrame:
    host = traceset.host
    if host.num_rows == 0:
        return pd.DataFrame({S.NAME: [], S.START_NS: [], S.END_NS: []})
    mask = pc.and_(pc.equal(host.column(S.RANK), rank), pc.equal(host.column(S.CATEGORY), S.CPU_OP))
    return host.filter(mask).select([S.NAME, S.START_NS, S.END_NS]).to_pandas()


def _overlap_ops(host_ops: pd.DataFrame, gaps: list[tuple[int, int]], into: dict) -> None:
    if host_ops.empty:
        return
    start, end = host_ops[S.START_NS].to_numpy(np.int64), host_ops[S.END_NS].to_numpy(np.int64)
    names = host_ops[S.NAME].to_numpy(object)
    for lo, hi in gaps:
        overlap = np.minimum(end, hi) - np.maximum(start, lo)
        for name, ns in zip(names[overlap > 0].tolist(), overlap[overlap > 0].tolist()):
            into[name] = into.get(name, 0) + int(ns)


def _window_starts(traceset: TraceSet, rank: int) -> dict[int, int]:
    files = traceset.files
    return {w: s for r, w, s in zip(files.column(S.RANK).to_pylist(), files.column(S.WINDOW).to_pylist(),
                                    files.column(S.START_NS).to_pylist()) if r == rank}


def _details(measure: str, mine: dict, median: dict, top: int = 3) -> list[str]:
    if measure == "compute_ns":
        lines = []
        for label, key in (("kernel", "kernels"), ("op", "ops")):
            diff = {k: mine[key].get(k, 0) - median[key].get(k, 0) for k in set(mine[key]) | set(median[key])}
            best = sorted(((v, k) for k, v in diff.items() if v > 0), reverse=True)[:top]
            lines += [f"{label} {k} {_signed(v)}" for v, k in best]
        return lines
    key = "idle_ops" if measure == "host_bound_idle_ns" else "gap_ops"
    best = sorted(((v, k) for k, v in mine[key].items() if v > 0), reverse=True)[:top]
    found = [f"host op {k} ran {human_ns(v)} while the device idled" for v, k in best]
    return found or ["no cpu op ran in those gaps (a host-side gap: Python, data loading, or cpu ops not loaded)"]


def _signed(ns: int) -> str:
    return ("+" if ns >= 0 else "−") + human_ns(abs(ns))
