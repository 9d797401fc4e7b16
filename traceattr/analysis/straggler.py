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

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.collectives import Collectives
from traceattr.attribution.sweep import sweep
from traceattr.model.traceset import TraceSet
from traceattr.names import display_names
from traceattr.units import human_ns, p_text
from traceattr.analysis.collectives import rank_ranges
from traceattr.attribution.links import link

NOISE_CHANCE = 0.1      # noise alone makes some rank last that often 1 time in 10 or more: no consistent straggler
# a one-off stall: a rank last too seldom to be a consistent straggler, yet ONE_OFF_SHARE of the run's waiting
# was for it, at a collective whose wait is ONE_OFF_FACTOR x the median wait of the other collectives of that
# kind and group, and ONE_OFF_MIN_NS (found on planted truth: one 2 ms stall in 8 steps, 98.7% of all waiting,
# read "chance alone, p = 1.00"; 60 noise sets reached 10.2x at most)
ONE_OFF_SHARE = 0.5
ONE_OFF_FACTOR = 20
ONE_OFF_MIN_NS = 10_000
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
    modules: list[str] = field(default_factory=list)          # nn.Modules behind extra compute (python frames loaded)
    per_rank: pd.DataFrame = field(default_factory=pd.DataFrame)   # rank, late_arrivals, wait_caused_ns, measures
    shared: int = 0                  # collectives with two or more ranks that the straggler took part in
                                     # (no straggler: all of them; 0 there: nothing to judge on)
    chance: float = math.nan         # probability that noise alone makes some rank last that often (see _chance)
    best_chance: float = math.nan    # the same had it been last at every one: >= NOISE_CHANCE, too few to tell
    steps: int = 0                   # the steps that were the trials (several collectives a step), 0: collectives
    share: float = math.nan          # its wait caused / all wait caused
    largest_wait_ns: int = 0         # the wait of the collective it made the others wait longest at
    typical_wait_ns: int = -1        # the median wait of the other collectives of that kind and group (-1: none)
    absent: str = ""                 # ranks that collectives expect but no trace was loaded for (rank_ranges)
    # other ranks behind the rest too, never last as the straggler is later still: (rank, mean arrival lag ns),
    # and the median rank's lag (lag: arrival minus the instance's first arrival, over its shared collectives)
    also_late: tuple[tuple[int, int], ...] = ()
    median_lag_ns: int = 0
    stalls: int = 0                  # its late collectives whose wait is a stall (ONE_OFF_FACTOR x typical)
    # not consistent alone, yet it and the ranks also behind were together last that often (group_chance)
    group: tuple[int, ...] = ()
    group_late: int = 0
    group_shared: int = 0
    group_chance: float = math.nan

    @property
    def consistent(self) -> bool:
        """False when the last rank changes from collective to collective as noise would have it."""
        return not self.chance >= NOISE_CHANCE

    @property
    def consistent_group(self) -> bool:
        """Several ranks equally late take turns being last, so none is a consistent straggler alone; together
        they are last more often than chance makes a group of that many ranks last."""
        return bool(self.group) and not self.consistent and not self.group_chance >= NOISE_CHANCE

    @property
    def too_few(self) -> bool:
        """Too few collectives (or steps) for any rank to stand out from chance, and this one was last at
        every one (last at fewer, it is not a consistent straggler, however few there are)."""
        return self.best_chance >= NOISE_CHANCE and self.chance <= self.best_chance * (1 + 1e-9)

    @property
    def one_off(self) -> bool:
        """Not a consistent straggler, yet most of the waiting was for it, at a collective far beyond the
        typical one's wait: a stall once or a few times, which chance does not explain either."""
        return (self.rank >= 0 and not self.consistent and self.share >= ONE_OFF_SHARE and self.typical_wait_ns >= 0
                and self.largest_wait_ns >= max(ONE_OFF_FACTOR * self.typical_wait_ns, ONE_OFF_MIN_NS))

    @property
    def shows_cause(self) -> bool:
        """The cause is given for a consistent straggler (alone, or with the ranks also behind it as a group)
        and a one-off stall, and, labelled so, when there are too few to tell."""
        return self.rank >= 0 and (self.consistent or self.too_few or self.one_off or self.consistent_group)

    def summary(self) -> str:
        # the rank everyone waited for may be one whose trace is not here
        absent = (f"; rank(s) {self.absent} took part in these collectives but no trace of it is loaded: the rank "
                  "the others waited for may be there") if self.absent else ""
        if self.rank < 0 and not self.shared:     # one rank loaded, or none of its collectives on another
            others = f"; the collectives also expect rank(s) {self.absent}, whose traces are not loaded" \
                if self.absent else ""
            return "not judged: no collective is shared by two or more of the ranks loaded" + others
        if self.rank < 0:
            loaded = " loaded" if self.absent else ""
            return f"no straggler: no rank{loaded} made another wait at a collective (of {self.shared} shared)" + absent
        text = (f"rank {self.rank}: made the others wait {human_ns(self.wait_caused_ns)} over "
                f"{self.late_arrivals} collective(s) it arrived last at (of {self.shared})") + absent
        if self.consistent_group:
            ranks = " and ".join(str(rank) for rank in self.group)
            text += (f"; not a consistent straggler alone ({p_text(self.chance)}), but ranks {ranks} together were "
                     f"last at {self.group_late} of {self.group_shared} (chance alone would make that many ranks "
                     f"last that often with {p_text(self.group_chance)})")
        elif self.one_off:
            stall = "a one-off stall" if self.stalls <= 1 else f"stalls at {self.stalls} collectives"
            text += (f"; {stall}, not a consistent straggler ({p_text(self.chance)}): "
                     f"{self.share:.0%} of all waiting was for it, up to {human_ns(self.largest_wait_ns)} at one "
                     f"collective (the median of the others of that kind: {human_ns(self.typical_wait_ns)})")
        elif self.too_few:
            unit = f"steps ({self.steps})" if self.steps else "collectives"
            text += (f"; too few {unit} to test a straggler against chance (last at every one, chance alone "
                     f"would do that with {p_text(self.best_chance)})")
        elif not self.consistent:
            return (text + f"; not a consistent straggler: chance alone would make some rank last that often "
                           f"({p_text(self.chance)})")
        else:       # p said how sure: 0.05 and 1e-6 read alike before
            text += f"; chance alone would make some rank last that often with {p_text(self.chance)}"
        if self.also_late and self.shows_cause:     # with a group: every rank of it but the straggler
            behind = ", ".join(f"rank {rank} +{human_ns(lag)}" for rank, lag in self.also_late)
            text += (f"; also behind the others: {behind} (mean arrival after the first rank; the median "
                     f"rank's +{human_ns(self.median_lag_ns)})")
        if self.median_rank >= 0:
            parts = ", ".join(f"{k.removesuffix('_ns').replace('_', ' ')} {_signed(v)}" for k, v in self.deltas.items())
            # over the intervals before its late arrivals, against the rank of median arrival there: the
            # whole-run table can say the opposite (less compute overall, more before those collectives)
            text += (f"; before those collectives, vs rank {self.median_rank} (median arrival): "
                     f"{self.cause or 'no measure is larger'} ({parts})")
        return text


def straggler_spans(found: Collectives, files: pa.Table,
                    steps: pd.DataFrame | None = None) -> tuple[Straggler, dict | None]:
    """The straggler and its median rank (no cause yet), and per those two ranks the intervals to measure
    (device, start, end, window arrays in its own clock; measures_of), None when there is nothing to compare.
    Needs only the matched collectives and the files table, so a map-reduce measures just two ranks' files."""
    per_rank = found.per_rank.groupby(S.RANK, as_index=False)[[S.LATE_ARRIVALS, S.WAIT_CAUSED_NS]].sum()
    if per_rank.empty or int(per_rank[S.WAIT_CAUSED_NS].max()) <= 0:
        instance = found.activities[S.INSTANCE].to_numpy(np.int64)
        shared = int((np.bincount(instance) >= 2).sum()) if len(instance) else 0
        return Straggler(-1, per_rank=per_rank, shared=shared, absent=_absent(found.instances, files)), None
    top = per_rank.sort_values([S.WAIT_CAUSED_NS, S.RANK], ascending=[False, True]).iloc[0]
    rank = int(top[S.RANK])
    late = found.instances[found.instances[S.LAST_RANK] == rank]
    largest, typical, stalls = _stall_scale(found.instances, late, rank)
    also_late, median_lag = _also_late(found.activities, rank)
    acts = found.activities
    # only the columns read below: a straggler late for most collectives has most rows of every rank here
    # (at 1024 ranks a copy of every column was 5 MB of the driver's peak)
    mine = acts.loc[acts[S.INSTANCE].isin(late[S.INSTANCE]), _MINE]
    median_rank = _median_rank(mine, rank)
    rank_steps = int((steps[S.RANK] == rank).sum()) if steps is not None and len(steps) else 0
    shared, chance, best, trials = _chance(found, rank, int(top[S.LATE_ARRIVALS]), rank_steps)
    verdict = Straggler(rank, int(top[S.WAIT_CAUSED_NS]), int(top[S.LATE_ARRIVALS]), median_rank, per_rank=per_rank,
                        shared=shared, chance=chance, best_chance=best, steps=trials if trials < shared else 0,
                        share=int(top[S.WAIT_CAUSED_NS]) / int(per_rank[S.WAIT_CAUSED_NS].sum()),
                        largest_wait_ns=largest, typical_wait_ns=typical, also_late=also_late, median_lag_ns=median_lag,
                        absent=_absent(found.instances, files), stalls=stalls)
    if also_late and not (verdict.consistent or verdict.too_few or verdict.one_off):
        group = (rank, *(other for other, _ in also_late))
        group_late = int(found.instances[S.LAST_RANK].isin(group).sum())
        group_shared, group_chance, _, _ = _chance(found, group, group_late, rank_steps)
        verdict = dataclasses.replace(verdict, group=group, group_late=group_late, group_shared=group_shared,
                                      group_chance=group_chance)
    if median_rank < 0 or not verdict.shows_cause:
        # no cause (nor its details) for noise: nothing to measure; they leaked as notes on noise before
        return verdict, None
    return verdict, _intervals(files, acts, mine, (rank, median_rank))


def _stall_scale(instances: pd.DataFrame, late: pd.DataFrame, rank: int) -> tuple[int, int, int]:
    """(the longest wait the rank caused at one collective, the median wait of the other collectives of
    that kind and group, -1 when there are none; its late collectives with a stall's wait): what waiting
    looks like there. Not over every collective:
    subgroup pairs and send/recv end nearly together, so their waits of ns made jitter of µs read as a
    stall; nor only where another rank was last, which a rank later on average makes small."""
    if not len(late):
        return 0, -1, 0
    worst = late.loc[late[S.WAIT_NS].idxmax()]
    lane = ((instances[S.COLLECTIVE] == worst[S.COLLECTIVE]) & (instances[S.PROCESS_GROUP] == worst[S.PROCESS_GROUP])
            & (instances[S.LAST_RANK] >= 0) & (instances[S.INSTANCE] != worst[S.INSTANCE]))
    others = instances.loc[lane, S.WAIT_NS].to_numpy(np.int64)
    typical = int(np.median(others)) if len(others) else -1
    # a stall: a wait as far beyond the typical one as one_off asks of the worst (not every late arrival:
    # 'stalls at 3' for one 2 ms stall and two µs of jitter)
    stalls = int((late[S.WAIT_NS].to_numpy(np.int64) >= max(ONE_OFF_FACTOR * typical, ONE_OFF_MIN_NS)).sum())
    return int(worst[S.WAIT_NS]), typical, stalls


ALSO_LATE_SHARE = 0.25     # another rank is also behind when its mean lag is a quarter of the straggler's
ALSO_LATE_FACTOR = 5       # ... and 5x the median rank's (jitter): the straggler hides it, being later still


def _also_late(acts: pd.DataFrame, rank: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """Ranks other than the straggler whose mean arrival lag (arrival minus the first arrival, over the shared
    collectives) is ALSO_LATE_SHARE of the straggler's and ALSO_LATE_FACTOR x the median rank's, largest first
    (at most 3), and that median lag. Found on planted truth: ranks 300 and 200 µs late each step; the second
    was never last, so it caused no wait, and nothing named it."""
    sizes = acts.groupby(S.INSTANCE)[S.RANK].transform("size")
    shared = acts[sizes >= 2]
    if shared.empty:
        return (), 0
    lag = shared["arrival_ns"] - shared.groupby(S.INSTANCE)["arrival_ns"].transform("min")
    mean = lag.groupby(shared[S.RANK]).mean()
    median = float(np.sort(mean.to_numpy())[(len(mean) - 1) // 2])
    own = float(mean.get(rank, 0.0))
    others = mean.drop(rank, errors="ignore").sort_values(ascending=False, kind="stable")
    found = [(int(r), int(round(v))) for r, v in others.items()
             if v >= ALSO_LATE_SHARE * own and v >= ALSO_LATE_FACTOR * median and v > 0]
    return tuple(found[:3]), int(round(median))


def _absent(instances: pd.DataFrame, files: pa.Table) -> str:
    """The ranks some collective expects (its group's) that no loaded file holds, as rank_ranges text."""

    texts = set(instances[S.MISSING_RANKS].tolist()) - {""}
    if not texts:
        return ""
    loaded = set(files.column(S.RANK).to_pylist())
    absent = sorted({int(r) for text in texts for r in text.split(",")} - loaded)
    return rank_ranges(absent) if absent else ""


def _chance(found: Collectives, rank: int | tuple[int, ...], late: int, steps: int = 0
            ) -> tuple[int, float, float, int]:
    """(the collectives with two or more ranks that `rank` took part in; the probability that noise alone
    makes some rank last as often as `rank` was; the same had it been last at all of them; the trials).
    Under noise each of an instance's n participants is last with chance 1/n: a binomial tail, times the
    number of ranks (any rank could have been the one; Bonferroni). Collectives of one step are not
    independent (a rank late in a step is last at each of its collectives: two per step named a straggler
    on noise 13 of 40 times), so with ProfilerSteps the trials are the rank's steps, taken as runs of c
    consecutive collectives (c per step): a step counts when the rank was last at one of them at least,
    with chance 1 - (1 - 1/n)^c (the most a step can give under noise). A tuple of k ranks is judged as one:
    last when any of them is, with chance g/n (g of them taking part), times the C(ranks, k) groups."""
    group = np.asarray(rank if isinstance(rank, tuple) else (rank,), np.int64)
    instance = found.activities[S.INSTANCE].to_numpy(np.int64)
    ranks = found.activities[S.RANK].to_numpy(np.int64)
    if not len(instance) or late <= 0:
        return 0, math.nan, math.nan, 0
    participants = np.bincount(instance)          # one activity per rank and instance
    members = np.bincount(instance[np.isin(ranks, group)], minlength=len(participants))
    mine = np.unique(instance[np.isin(ranks, group)])
    mine = mine[participants[mine] >= 2]
    if not len(mine):
        return 0, math.nan, math.nan, 0
    table = found.instances.set_index(S.INSTANCE).loc[mine]
    # an exact tie is no trial: nobody was last there (a send/recv pair, a subgroup ending together), yet each
    # raised the chance of a step, so adding such collectives turned a straggler into 'too few to tell'.
    # Nor is a skew within the clocks' residual (the spread of collective ends on the clocks used): which
    # rank was last there is the clock estimate's noise (offsets of ±400 ns fitted to identical clocks
    # flipped 2-rank subgroups' last ranks and named a straggler on noise, p = 0.036)
    alignment = found.alignment
    residual = alignment.residual_after_ns if alignment.applied else alignment.residual_before_ns
    told = table[S.ARRIVAL_SKEW_NS].to_numpy(np.int64) > max(residual, 0)
    order = np.argsort(table[S.FIRST_START_NS].to_numpy(np.int64)[told], kind="stable")
    was_late = np.isin(table[S.LAST_RANK].to_numpy(np.int64), group)[told][order]
    sizes = participants[mine][told][order]
    if not len(sizes):
        return len(mine), math.nan, math.nan, 0
    per_step = max(1, round(len(sizes) / steps)) if steps else 1
    p = 1.0 - float(np.mean(1.0 - members[mine][told][order] / sizes)) ** per_step
    runs = [was_late[i:i + per_step].any() for i in range(0, len(was_late), per_step)]
    family = math.comb(len(np.unique(ranks)), len(group))
    return (len(mine), min(1.0, family * _binomial_tail(len(runs), p, int(sum(runs)))),
            min(1.0, family * _binomial_tail(len(runs), p, len(runs))), len(runs))


def _binomial_tail(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if p >= 1.0:
        return 1.0
    return sum(math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                        + j * math.log(p) + (n - j) * math.log1p(-p)) for j in range(k, n + 1))


def with_cause(verdict: Straggler, measures: dict[int, dict]) -> Straggler:
    """The verdict with its cause from measures_of() of the straggler and the median rank."""
    rank, median_rank = verdict.rank, verdict.median_rank
    deltas = {name: int(measures[rank][name] - measures[median_rank][name]) for name in CAUSES}
    best = max(deltas, key=deltas.get)
    cause = CAUSES[best] if deltas[best] > 0 else ""
    details = _details(best, measures[rank], measures[median_rank]) if cause else []
    modules = _top_deltas("module", measures[rank]["modules"], measures[median_rank]["modules"]) \
        if cause == COMPUTE else []
    return dataclasses.replace(verdict, cause=cause, deltas=deltas, details=details, modules=modules)


_MINE = [S.RANK, S.DEVICE, S.WINDOW, S.INSTANCE, S.START_NS, "arrival_ns"]    # what _median_rank and _intervals read


def _median_rank(mine: pd.DataFrame, straggler: int) -> int:
    """The participant (not the straggler) with the median mean arrival over the straggler's collectives."""
    others = mine[mine[S.RANK] != straggler]
    if others.empty:
        return -1
    first = mine.groupby(S.INSTANCE)["arrival_ns"].transform("min")
    lateness = (others["arrival_ns"] - first[others.index]).groupby(others[S.RANK]).mean().sort_values(kind="stable")
    return int(lateness.index[(len(lateness) - 1) // 2])


def _intervals(files: pa.Table, acts: pd.DataFrame, mine: pd.DataFrame, ranks: tuple[int, int]) -> dict:
    """Per rank: arrays (device, start, end, window) in its own clock, one per collective the straggler was late for
    that both ranks joined. Both intervals start at the same aligned instant: the later of the two ranks'
    previous communication ends (or window starts)."""
    offset = (acts[S.START_NS] - acts["arrival_ns"]).groupby(acts[S.RANK]).first()
    firsts = {r: mine[mine[S.RANK] == r].drop_duplicates(S.INSTANCE).set_index(S.INSTANCE) for r in ranks}
    shared = firsts[ranks[0]].index.intersection(firsts[ranks[1]].index)
    previous = {}
    for r in ranks:
        rows = firsts[r].loc[shared]
        own = acts[acts[S.RANK] == r]
        before = np.full(len(rows), np.iinfo(np.int64).min, np.int64)
        for device, group in own.groupby(S.DEVICE):
            ends = np.sort(group["aligned_end_ns"].to_numpy(np.int64))
            here = rows[S.DEVICE].to_numpy() == device
            at = np.searchsorted(ends, rows["arrival_ns"].to_numpy(np.int64)[here], side="right") - 1
            before[here] = np.where(at >= 0, ends[np.maximum(at, 0)], before[here])
        starts = _window_starts(files, r)
        window_start = np.array([starts.get(int(w), s) for w, s in zip(rows[S.WINDOW], rows[S.START_NS])], np.int64)
        previous[r] = np.maximum(before, window_start - int(offset[r]))
    common = np.maximum(previous[ranks[0]], previous[ranks[1]])
    spans = {}
    for r in ranks:
        rows = firsts[r].loc[shared]
        arrival = rows[S.START_NS].to_numpy(np.int64)
        spans[r] = (rows[S.DEVICE].to_numpy(np.int64), np.minimum(common + int(offset[r]), arrival), arrival,
                    rows[S.WINDOW].to_numpy(np.int64))
    return spans


def measures_of(traceset: TraceSet, rank: int, spans: tuple) -> dict:
    """Σ over the rank's intervals: compute, host-bound idle and launch gap (ns), plus compute per kernel and
    launching op, and the host ops that ran while the device idled. Vectorized over intervals: one sort of
    the rank's activities per device, searchsorted per interval. Each interval lies in one window, so the
    measures of a rank's windows taken one file at a time add up (sum_measures) to those of the rank."""
    device = traceset.device
    out = _no_measures()
    span_device, span_lo, span_hi = spans[:3]
    if len(span_lo) == 0:
        return out
    mine = pc.and_(pc.equal(device.column(S.RANK), rank), pc.not_equal(device.column(S.CATEGORY), S.COMMUNICATION))
    mask = np.asarray(mine.to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(mask)
    dev = np.asarray(device.column(S.DEVICE).to_numpy(), np.int64)[rows]
    start = np.asarray(device.column(S.START_NS).to_numpy(), np.int64)[rows]
    order = np.lexsort((start, dev))
    rows, dev, start = rows[order], dev[order], start[order]
    end = np.asarray(device.column(S.END_NS).to_numpy(), np.int64)[rows]
    self_ns = sweep(traceset).self_ns[rows]
    inside = np.zeros(len(rows) + 1, np.int64)        # +1 / -1 marks: rows that start inside an interval
    pieces = []
    for d in np.unique(span_device).tolist():
        first, stop = np.searchsorted(dev, [d, d + 1])
        s_d, e_d = start[first:stop], end[first:stop]
        which = span_device == d
        lo, hi = span_lo[which], span_hi[which]
        begin = first + np.searchsorted(s_d, lo)
        finish = first + np.searchsorted(s_d, hi)
        np.add.at(inside, begin, 1)
        np.add.at(inside, finish, -1)
        # activities that overlap [lo, hi) start after lo - (longest duration): slices, no per-row scan
        longest = int((e_d - s_d).max(initial=0))
        reach_from = first + np.searchsorted(s_d, lo - longest)
        counts = finish - reach_from
        span_id = np.repeat(np.flatnonzero(which), counts)
        index = np.repeat(reach_from - np.cumsum(np.r_[0, counts[:-1]]), counts) + np.arange(counts.sum())
        pieces.append((span_id, index))
    started_inside = np.cumsum(inside[:-1]) > 0
    out["compute_ns"] = int(self_ns[started_inside].sum())
    names = np.asarray(device.column(S.NAME).take(pa.array(rows[started_inside], pa.int64())).to_pylist(), object)
    ops, modules = _launching_ops(traceset, rows[started_inside])
    for key, table in ((names, out["kernels"]), (ops, out["ops"]), (modules, out["modules"])):
        sums = pd.Series(self_ns[started_inside]).groupby(key).sum()
        table.update({k: int(v) for k, v in sums.items()})
    span_id = np.concatenate([p[0] for p in pieces])
    index = np.concatenate([p[1] for p in pieces])
    lo, hi = span_lo[span_id], span_hi[span_id]
    clip_lo, clip_hi = np.maximum(start[index], lo), np.minimum(end[index], hi)
    keep = clip_hi > clip_lo
    busy, last_end, gaps = _unions(span_id[keep], clip_lo[keep], clip_hi[keep], span_lo, len(span_lo))
    tail_lo = np.maximum(span_lo, last_end)
    out["launch_gap_ns"] = int((span_hi - tail_lo).sum())
    out["host_bound_idle_ns"] = int((span_hi - span_lo - busy - (span_hi - tail_lo)).sum())
    host_ops = _host_ops(traceset, rank)
    out["idle_ops"] = _overlap_ops(host_ops, *gaps)
    out["gap_ops"] = _overlap_ops(host_ops, tail_lo, span_hi)
    return out


def _no_measures() -> dict:
    return {"compute_ns": 0, "host_bound_idle_ns": 0, "launch_gap_ns": 0, "kernels": {}, "ops": {}, "modules": {},
            "idle_ops": {}, "gap_ops": {}}


def sum_measures(parts: list[dict]) -> dict:
    """measures_of() results of one rank's files (windows) added up: ns sums, and ns per key."""
    out = _no_measures()
    for part in parts:
        for name, value in part.items():
            if isinstance(value, dict):
                for key, ns in value.items():
                    out[name][key] = out[name].get(key, 0) + ns
            else:
                out[name] += value
    return out


def _unions(group: np.ndarray, lo: np.ndarray, hi: np.ndarray, floor: np.ndarray, n: int):
    """Per group of intervals [lo, hi) (all within [floor[g], ...)): union length, last end (floor when
    empty), and the gaps (starts, ends) between floor and the blocks, over all groups."""
    busy = np.zeros(n, np.int64)
    last_end = floor.copy()
    if len(lo) == 0:
        return busy, last_end, (np.zeros(0, np.int64), np.zeros(0, np.int64))
    order = np.lexsort((lo, group))
    group, lo, hi = group[order], lo[order], hi[order]
    first = np.r_[True, group[1:] != group[:-1]]
    # running max of hi within each group: lift groups apart so one accumulate serves all
    base = floor[group]
    span = int((hi - base).max()) + 1
    lift = np.cumsum(first) * span
    reach_lifted = np.maximum.accumulate(hi - base + lift)
    previous = np.where(first, base, np.r_[0, reach_lifted[:-1]] - lift + base)
    covered = np.maximum(hi - np.maximum(lo, previous), 0)
    np.add.at(busy, group, covered)
    np.maximum.at(last_end, group, hi)
    gap = lo > previous
    return busy, last_end, (previous[gap], lo[gap])


def _launching_ops(traceset: TraceSet, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per device row: its launching op and its nn.Module path ("<unattributed>" when not linked; the
    module only when python frames were loaded, i.e. traced with_stack and not dropped)."""
    missing = np.full(len(rows), "<unattributed>", object)
    has_ops = pc.any(pc.equal(traceset.host.column(S.CATEGORY), S.CPU_OP)).as_py() if traceset.host.num_rows else False
    if not has_ops:
        return missing, missing
    links = link(traceset)
    codes = links.op_code[rows]
    names = np.asarray(links.host_names + ["<unattributed>"], object)
    module_codes = links.module[rows]
    paths = {int(c): links.modules.string(int(c)) for c in np.unique(module_codes) if c > 0}
    modules = np.array([paths.get(int(c), "<unattributed>") for c in module_codes], object)
    return names[np.where(codes >= 0, codes, len(links.host_names))], modules


def _host_ops(traceset: TraceSet, rank: int) -> pd.DataFrame:
    host = traceset.host
    if host.num_rows == 0:
        return pd.DataFrame({S.NAME: [], S.START_NS: [], S.END_NS: []})
    mask = pc.and_(pc.equal(host.column(S.RANK), rank), pc.equal(host.column(S.CATEGORY), S.CPU_OP))
    return host.filter(mask).select([S.NAME, S.START_NS, S.END_NS]).to_pandas()


def _overlap_ops(host_ops: pd.DataFrame, gap_lo: np.ndarray, gap_hi: np.ndarray) -> dict:
    """ns of each host op name spent inside the gaps (disjoint intervals), without a loop over ops or gaps:
    F(t) = gap time before t, and an op [s, e) overlaps them by F(e) - F(s)."""
    keep = gap_hi > gap_lo
    if host_ops.empty or not keep.any():
        return {}
    order = np.argsort(gap_lo[keep], kind="stable")
    lo, hi = gap_lo[keep][order], gap_hi[keep][order]
    before = np.r_[0, np.cumsum(hi - lo)]

    def covered(t: np.ndarray) -> np.ndarray:
        at = np.searchsorted(lo, t, side="right") - 1
        inside = np.clip(t - lo[np.maximum(at, 0)], 0, (hi - lo)[np.maximum(at, 0)])
        return np.where(at >= 0, before[np.maximum(at, 0)] + inside, 0)

    overlap = covered(host_ops[S.END_NS].to_numpy(np.int64)) - covered(host_ops[S.START_NS].to_numpy(np.int64))
    sums = pd.Series(overlap).groupby(host_ops[S.NAME].to_numpy(object)).sum()
    return {k: int(v) for k, v in sums.items() if v > 0}


def _window_starts(files: pa.Table, rank: int) -> dict[int, int]:
    return {w: s for r, w, s in zip(files.column(S.RANK).to_pylist(), files.column(S.WINDOW).to_pylist(),
                                    files.column(S.START_NS).to_pylist()) if r == rank}


def _details(measure: str, mine: dict, median: dict, top: int = 3) -> list[str]:
    if measure == "compute_ns":
        return _top_deltas("kernel", mine["kernels"], median["kernels"], top) + \
            _top_deltas("op", mine["ops"], median["ops"], top)
    key = "idle_ops" if measure == "host_bound_idle_ns" else "gap_ops"
    best = sorted(((v, k) for k, v in mine[key].items() if v > 0), reverse=True)[:top]
    found = [f"host op {k} ran {human_ns(v)} while the device idled" for v, k in best]
    return found or ["no cpu op ran in those gaps (a host-side gap: Python, data loading, or cpu ops not loaded)"]


def _top_deltas(label: str, mine: dict, median: dict, top: int = 3) -> list[str]:
    """The `top` keys with the most extra ns on the straggler, as "label key +ns" lines."""
    diff = {k: mine.get(k, 0) - median.get(k, 0) for k in set(mine) | set(median) if k != "<unattributed>"}
    best = sorted(((v, k) for k, v in diff.items() if v > 0), reverse=True)[:top]
    shown = display_names([k for _, k in best])      # a note is prose: short names, never two alike
    return [f"{label} {name} {_signed(v)}" for (v, _), name in zip(best, shown)]


def _signed(ns: int) -> str:
    return ("+" if ns >= 0 else "−") + human_ns(abs(ns))
