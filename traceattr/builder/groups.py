"""Disjoint process groups whose collectives carry `Group size` but, as in torch versions that record no
`Seq`, maybe no group: the answers planted.

`ranks` ranks in groups of `group_size` consecutive ranks (0-1, 2-3, ...). Each group runs `collectives`
all-reduces on its own stream id (the same id on every rank, as NCCL's first communicator gets): group g's
k-th starts at `k * period_ns + g * stagger_ns` (stagger 0: every group at once, so nothing in the trace
tells the groups apart). Within an instance the ranks arrive `skew_ns` apart (the highest rank of the group
last), and every participant's kernel ends `transfer_ns` after the last arrival: the wait is planted. The
kernels carry `Collective name`, `In/Out msg nelems`, `dtype` and `Group size`, plus `Process Group Ranks`
(`with_group_ranks`) and `Process Group Name` (`with_group_name`); never `Seq`. One clock for all ranks
(zero skew planted) unless `clock_offset_ns` says otherwise. Kineto era C, plain JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from traceattr.builder.multirank import (ALLREDUCE_KERNEL, FIRST_NS, LAUNCH_NS, CollectiveTruth, MultiRankSpec,
                                         MultiRankTruth, finished, opened)
from traceattr.builder.spec import DEFAULT_BASE_NS

GROUP_STREAM = 28


@dataclass(frozen=True)
class GroupSetSpec:
    ranks: int = 8
    group_size: int = 2
    collectives: int = 6
    period_ns: int = 1_000_000          # one instance of every group per period
    stagger_ns: int = 200_000           # group g starts g x this later in each period (0: all at once)
    skew_ns: int = 7_000                # arrivals within a group: rank i of the group arrives i x this late
    transfer_ns: int = 40_000
    message_bytes: int = 1024 * 1024    # float32 elements x 4
    with_group_ranks: bool = False      # `Process Group Ranks` on each collective
    with_group_name: bool = False       # `Process Group Name` on each collective
    group_size_arg: int | None = None   # what `Group size` says (None: group_size; 0: not written)
    clock_offset_ns: dict[int, int] = field(default_factory=dict)
    base_time_ns: int = DEFAULT_BASE_NS

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.group_size < 1 or self.ranks % self.group_size or self.collectives < 1:
            raise ValueError("ranks must be a positive multiple of group_size, collectives >= 1")

    @property
    def groups(self) -> list[tuple[int, ...]]:
        return [tuple(range(first, first + self.group_size)) for first in range(0, self.ranks, self.group_size)]


def build_groups(spec: GroupSetSpec, folder: str | Path) -> MultiRankTruth:
    """Write rank{R}.pt.trace.json for every rank under `folder`; return the planted truth (true time)."""
    writer_spec = MultiRankSpec(ranks=spec.ranks, clock_offset_ns=spec.clock_offset_ns,
                                base_time_ns=spec.base_time_ns)
    ranks, paths = opened(writer_spec, folder)
    t0 = spec.base_time_ns + FIRST_NS
    size_arg = spec.group_size if spec.group_size_arg is None else spec.group_size_arg
    truth: list[CollectiveTruth] = []
    for k in range(spec.collectives):
        for g, members in enumerate(spec.groups):
            begin = t0 + k * spec.period_ns + g * spec.stagger_ns
            arrivals = {rank: begin + i * spec.skew_ns for i, rank in enumerate(members)}
            end = max(arrivals.values()) + spec.transfer_ns
            args = {"Collective name": "allreduce", "In msg nelems": spec.message_bytes // 4,
                    "Out msg nelems": spec.message_bytes // 4, "dtype": "Float"}
            if size_arg:
                args["Group size"] = size_arg
            if spec.with_group_name:
                args["Process Group Name"] = str(g + 1)
            if spec.with_group_ranks:
                args["Process Group Ranks"] = str(list(members))
            for rank in members:
                r = ranks[rank]
                host = arrivals[rank] - LAUNCH_NS - 3_000
                r.x("cpu_op", "c10d::allreduce_", host - 1_000, host + 7_000)
                r.x("cpu_op", "record_param_comms", host, host + 6_000, dict(args))
                r.correlation += 1
                r.x("cuda_runtime", "cudaLaunchKernel", host + 2_000, host + 5_000, {"correlation": r.correlation})
                r.kernel(ALLREDUCE_KERNEL, GROUP_STREAM, arrivals[rank], end, dict(args))
            truth.append(CollectiveTruth("allreduce", k + 1, members, arrivals, {rank: end for rank in members}))
        for r in ranks:
            r.flush()
    return finished(spec, ranks, paths, truth)
