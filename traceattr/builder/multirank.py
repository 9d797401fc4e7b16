"""Multi-rank traces whose collectives really couple the ranks, with the answers planted.

Each step on each rank: the host (optionally) stalls, launches `compute_kernels` compute kernels (plus an
extra one on ranks given `extra_compute_ns`), (optionally) delays, then launches an NCCL all-reduce under
`c10d::allreduce_` > `record_param_comms`; the collective's kernel arrives when both its launch and the
rank's compute are done, and ends on every rank `transfer_ns` after the **last** rank arrived (plus an
optional per-rank end jitter). Optional point-to-point: rank 0 sends to rank 1 after the all-reduce.
Optional subgroups (`subgroup_size` consecutive ranks, as tensor-parallel groups): then each group
all-reduces among its ranks, in a process group of its own with its own Seq, on a stream of its own, as
NCCL gives each communicator; it arrives last where the rank's previous collective ended last. The host
then synchronizes, so steps start together. Each rank's file is written with its clock shifted by
`clock_offset_ns[rank]`; the truth is in true time. Kineto era C (baseTimeNanoseconds), plain JSON.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from traceattr.builder.spec import DEFAULT_BASE_NS

LAUNCH_NS = 5_000          # runtime call to kernel start, when the stream is free
OP_NS = 10_000             # a host op that launches one kernel
COMPUTE_KERNEL = "ampere_sgemm_128x64_tn"
EXTRA_KERNEL = "void extra_attention_kernel<float>(float const*, float*, long)"
EXTRA_MODULE = "ExtraAttention_0"
ALLREDUCE_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
SENDRECV_KERNEL = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
ALLTOALL_TOLD_BY = ("arg", "annotation", "name")    # MultiRankSpec.alltoall_told_by
OTHER_THREAD = 1                                    # tid offset of a thread that launches nothing
COMPUTE_STREAM, NCCL_STREAM, P2P_STREAM, SUBGROUP_STREAM = 7, 20, 24, 28
FIRST_NS = 4_000_000_000_000_000    # the first step's true time after the base time (era C relative µs)


@dataclass(frozen=True)
class MultiRankSpec:
    ranks: int = 4
    steps: int = 3
    compute_kernels: int = 4
    compute_ns: int = 100_000
    transfer_ns: int = 50_000
    message_bytes: int = 4 * 1024 * 1024          # float32 elements x 4
    clock_offset_ns: dict[int, int] = field(default_factory=dict)
    extra_compute_ns: dict[int, int] = field(default_factory=dict)   # extra kernel before each collective
    extra_compute_steps: tuple[int, ...] = ()      # steps (from 0) that have it; empty: every step
    host_stall_ns: dict[int, int] = field(default_factory=dict)      # host busy before launching compute
    late_launch_ns: dict[int, int] = field(default_factory=dict)     # host busy before launching the collective
    p2p: bool = False                              # rank 0 -> rank 1 send/recv after each all-reduce
    truncated: dict[int, int] = field(default_factory=dict)          # rank -> last collectives it lacks
    end_jitter_ns: int = 0                         # each rank's collective end: + uniform [0, jitter]
    compute_jitter: float = 0.0                    # each compute kernel: x uniform [1 - j, 1 + j] (noise)
    with_seq: bool = True                          # kernels carry Process Group Name/Ranks and Seq
    subgroup_size: int = 0                         # > 0: each step also all-reduces in groups of this many ranks
    # the step's collective is an all-to-all run as SendRecv kernels (as NCCL runs DLRM's), told by: "arg"
    # (`Collective name` on op and kernel), "annotation" (only the `nccl:all_to_all` range around the launch,
    # with a shorter `nccl:all_reduce` range on another thread around it that must not count) or "name"
    # (the kernel name alone: its kind is then sendrecv); "": an all-reduce
    alltoall_told_by: str = ""
    seed: int = 0
    base_time_ns: int = DEFAULT_BASE_NS

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.steps < 1 or self.compute_kernels < 1:
            raise ValueError("ranks, steps and compute_kernels must be >= 1")
        if self.p2p and self.ranks < 2:
            raise ValueError("p2p needs two ranks")
        if self.subgroup_size < 0:
            raise ValueError("subgroup_size must be >= 0")
        if self.alltoall_told_by not in ("", *ALLTOALL_TOLD_BY):
            raise ValueError(f"alltoall_told_by must be one of {ALLTOALL_TOLD_BY} or empty")
        if len([rank for rank in self.truncated if 0 <= rank < self.ranks]) >= self.ranks:
            raise ValueError("at least one rank must not be truncated")


@dataclass
class CollectiveTruth:
    kind: str                       # "allreduce", "alltoall" or "sendrecv"
    seq: int
    ranks: tuple[int, ...]          # participants present in the files
    arrival_ns: dict[int, int]      # true time the kernel started, per rank
    end_ns: dict[int, int]
    missing: tuple[int, ...] = ()   # participants whose file stops before this collective

    @property
    def last_rank(self) -> int:
        """The last to arrive (ties: the lowest rank); -1 alone or when every rank arrived at once."""
        if len(set(self.arrival_ns[r] for r in self.ranks)) < 2:
            return -1
        return max(self.ranks, key=lambda r: (self.arrival_ns[r], -r))

    @property
    def last_start_ns(self) -> int:
        return max(self.arrival_ns.values())

    def wait_ns(self, rank: int) -> int:
        return min(self.last_start_ns, self.end_ns[rank]) - self.arrival_ns[rank]

    def transfer_ns(self, rank: int) -> int:
        return self.end_ns[rank] - min(self.last_start_ns, self.end_ns[rank])


@dataclass
class MultiRankTruth:
    paths: dict[int, str]
    collectives: list[CollectiveTruth]
    clock_offset_ns: dict[int, int]

    def per_rank(self, name: str) -> dict[int, int]:
        """Σ over collectives of wait_ns or transfer_ns per rank."""
        out: dict[int, int] = {}
        for c in self.collectives:
            for r in c.ranks:
                out[r] = out.get(r, 0) + getattr(c, name)(r)
        return out

    def wait_caused_ns(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in self.collectives:
            if c.last_rank >= 0:
                last = c.last_rank
                out[last] = out.get(last, 0) + sum(c.wait_ns(r) for r in c.ranks if r != last)
        return out


class _Rank:
    def __init__(self, spec: MultiRankSpec, rank: int) -> None:
        self.spec, self.rank = spec, rank
        self.pid, self.tid = 1000 + rank, 1000 + rank
        self.events: list[dict] = []         # this step's events, written out by flush()
        self.written = 0
        self.correlation = 100
        self.free = {COMPUTE_STREAM: 0, NCCL_STREAM: 0, P2P_STREAM: 0, SUBGROUP_STREAM: 0}

    def x(self, cat: str, name: str, start: int, end: int, args: dict | None = None, device: bool = False,
          stream: int = 0, tid: int | None = None) -> None:
        offset = self.spec.clock_offset_ns.get(self.rank, 0) - self.spec.base_time_ns
        event = {"ph": "X", "cat": cat, "name": name, "pid": self.rank if device else self.pid,
                 "tid": stream if device else self.tid if tid is None else tid, "ts": _us(start + offset), "dur": _us(end - start)}
        if args:
            event["args"] = args
        self.events.append(event)

    def open(self, path: Path) -> None:
        head = {"schemaVersion": 1, "deviceProperties": [],
                "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.spec.ranks},
                "baseTimeNanoseconds": self.spec.base_time_ns, "displayTimeUnit": "ms"}
        self.file = open(path, "w")
        self.file.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')

    def flush(self) -> None:
        """Write the events so far (one per line), so memory stays one step per rank."""
        if self.events:
            self.file.write((",\n" if self.written else "") + ",\n".join(map(json.dumps, self.events)))
            self.written += len(self.events)
            self.events = []

    def close(self, path: Path) -> None:
        self.flush()
        self.file.write(f'\n], "traceName": {json.dumps(str(path))}}}\n')
        self.file.close()

    def launch(self, h: int, name: str, stream: int, dur: int, ready: int = 0, args: dict | None = None) -> tuple[int, int]:
        """A runtime call at host time h; returns (kernel start, kernel end)."""
        self.correlation += 1
        self.x("cuda_runtime", "cudaLaunchKernel", h, h + 4_000, {"correlation": self.correlation})
        start = max(h + LAUNCH_NS, self.free[stream], ready)
        self.kernel(name, stream, start, start + dur, args)
        return start, start + dur

    def kernel(self, name: str, stream: int, start: int, end: int, args: dict | None = None) -> None:
        self.free[stream] = end
        self.x("kernel", name, start, end, {"device": self.rank, "stream": stream, "correlation": self.correlation,
                                            **(args or {})}, device=True, stream=stream)


def build_multirank(spec: MultiRankSpec, folder: str | Path) -> MultiRankTruth:
    """Write rank{R}.pt.trace.json for every rank under `folder`; return the planted truth."""
    rng = random.Random(spec.seed)
    noise = random.Random(spec.seed + 1_000_003)      # its own stream: sets without jitter stay as they were
    ranks, paths = opened(spec, folder)
    t0 = spec.base_time_ns + FIRST_NS
    h = {r.rank: t0 for r in ranks}
    stopped: set[int] = set()
    truth: list[CollectiveTruth] = []
    group = list(range(spec.ranks))
    seq = 0
    p2p_seq = 0
    subgroups = [list(range(first, min(first + spec.subgroup_size, spec.ranks)))
                 for first in range(0, spec.ranks, spec.subgroup_size)] if spec.subgroup_size else []
    subgroup_seq = [0] * len(subgroups)
    for step in range(spec.steps):
        arrivals, pending = {}, {}
        for r in ranks:
            if r.rank in stopped:
                continue
            step_start = h[r.rank]
            cursor = step_start + 2_000
            stall = spec.host_stall_ns.get(r.rank, 0)
            if stall:
                r.x("cpu_op", "aten::_host_stall", cursor, cursor + stall)
                cursor += stall
            compute_done = 0
            names = [COMPUTE_KERNEL] * spec.compute_kernels
            extra = spec.extra_compute_ns.get(r.rank, 0) if step in (spec.extra_compute_steps or (step,)) else 0
            for i, name in enumerate(names + ([EXTRA_KERNEL] if extra else [])):
                op = "aten::extra_attention" if name == EXTRA_KERNEL else "aten::mm"
                if name == EXTRA_KERNEL:     # the extra work sits in its own nn.Module (a with_stack frame)
                    r.x("python_function", f"nn.Module: {EXTRA_MODULE}", cursor - 500, cursor + OP_NS + 500,
                        {"Python id": step + 1, "Python parent id": None, "Python module id": 7})
                r.x("cpu_op", op, cursor, cursor + OP_NS)
                length = extra if name == EXTRA_KERNEL else spec.compute_ns
                if spec.compute_jitter and name != EXTRA_KERNEL:
                    length = round(length * noise.uniform(1 - spec.compute_jitter, 1 + spec.compute_jitter))
                _, compute_done = r.launch(cursor + 2_000, name, COMPUTE_STREAM, length)
                cursor += OP_NS + 1_000
            late = spec.late_launch_ns.get(r.rank, 0)
            if late:
                r.x("cpu_op", "aten::_late_host_work", cursor, cursor + late)
                cursor += late
            pending[r.rank] = (cursor, compute_done, step_start)
        seq += 1
        index = seq - 1
        lacking = {rank for rank, n in spec.truncated.items() if index >= n_collectives_for(spec, n, rank)}
        present = [rank for rank in pending if rank not in lacking]
        group_args = {"Process Group Name": "0", "Process Group Description": "default_pg",
                      "Process Group Ranks": str(group), "Seq": seq}
        arrivals, ends = _allreduce(spec, rng, ranks, pending, list(pending), present, stopped, NCCL_STREAM,
                                    spec.transfer_ns, spec.message_bytes // 4, spec.ranks, group_args,
                                    spec.alltoall_told_by)
        kind = {"": "allreduce", "name": "sendrecv"}.get(spec.alltoall_told_by, "alltoall")
        truth.append(CollectiveTruth(kind, seq, tuple(present), arrivals, ends,
                                     tuple(sorted(lacking & set(pending)))))
        step_end = max(ends.values())
        if spec.p2p and 0 in present and 1 in present:
            p2p_seq += 1
            p2p_arrivals, p2p_ends = {}, {}
            for rank in (0, 1):
                cursor, ready, _ = pending[rank]
                p2p_arrivals[rank] = max(cursor + 3_000 + LAUNCH_NS, ready)
            p2p_last = max(p2p_arrivals.values())
            for rank in (0, 1):
                r = ranks[rank]
                cursor, ready, step_start = pending[rank]
                name = "send" if rank == 0 else "recv"
                p2p_args = {"Collective name": name, "In msg nelems": 262_144, "Out msg nelems": 262_144,
                            "dtype": "Float", "Src Rank": 0, "Dst Rank": 1}
                r.x("cpu_op", f"c10d::{name}", cursor, cursor + 8_000)
                r.x("cpu_op", "record_param_comms", cursor + 1_000, cursor + 7_000, p2p_args)
                r.correlation += 1
                r.x("cuda_runtime", "cudaLaunchKernel", cursor + 3_000, cursor + 6_000, {"correlation": r.correlation})
                p2p_ends[rank] = p2p_last + spec.transfer_ns // 5
                r.kernel(SENDRECV_KERNEL, P2P_STREAM, p2p_arrivals[rank], p2p_ends[rank], p2p_args)
                pending[rank] = (cursor + 8_000, p2p_ends[rank], step_start)
            truth.append(CollectiveTruth("sendrecv", p2p_seq, (0, 1), p2p_arrivals, p2p_ends))
            step_end = max(step_end, *p2p_ends.values())
        for index, members in enumerate(subgroups):
            subgroup_seq[index] += 1
            step_end = max(step_end, _subgroup_allreduce(spec, rng, ranks, members, index, subgroup_seq[index],
                                                         pending, stopped, truth))
        for rank, (cursor, _, step_start) in pending.items():
            r = ranks[rank]
            if rank in stopped:
                r.x("user_annotation", f"ProfilerStep#{step + 1}", step_start, cursor + 8_000)
                continue
            sync_end = max(cursor, step_end) + 2_000
            r.x("cuda_runtime", "cudaStreamSynchronize", cursor, sync_end, {"correlation": -1})
            r.x("user_annotation", f"ProfilerStep#{step + 1}", step_start, sync_end + 1_000)
            h[rank] = sync_end + 20_000
        for r in ranks:
            r.flush()
    return finished(spec, ranks, paths, truth)


def opened(spec: MultiRankSpec, folder: str | Path) -> tuple[list[_Rank], dict[int, Path]]:
    """A writer per rank of `spec`, each open on its rank{R}.pt.trace.json under `folder` (made if missing),
    and those paths; builder/groups.py starts its sets the same way, and finished() ends both."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ranks = [_Rank(spec, r) for r in range(spec.ranks)]
    paths = {r.rank: folder / f"rank{r.rank}.pt.trace.json" for r in ranks}
    for r in ranks:
        r.open(paths[r.rank])
    return ranks, paths


def finished(spec, ranks: list[_Rank], paths: dict, truth: list[CollectiveTruth]) -> MultiRankTruth:
    """Every rank's file closed, and the truth of the set (builder/groups.py ends its sets the same way)."""
    for r in ranks:
        r.close(paths[r.rank])
    return MultiRankTruth({r: str(p) for r, p in paths.items()}, truth,
                          {r: spec.clock_offset_ns.get(r, 0) for r in range(spec.ranks)})


def _subgroup_allreduce(spec: MultiRankSpec, rng: random.Random, ranks: list[_Rank], members: list[int], index: int,
                        seq: int, pending: dict, stopped: set[int], truth: list[CollectiveTruth]) -> int:
    """One all-reduce of a subgroup after the step's collectives (ranks whose file stopped are missing from
    it); returns its latest end (the step's end is no earlier)."""
    present = [rank for rank in members if rank in pending and rank not in stopped]
    if not present:
        return 0
    group_args = {"Process Group Name": str(index + 1), "Process Group Description": f"subgroup_{index}",
                  "Process Group Ranks": str(members), "Seq": seq}
    arrivals, ends = _allreduce(spec, rng, ranks, pending, present, present, stopped, SUBGROUP_STREAM,
                                spec.transfer_ns // 2, spec.message_bytes // 16, len(members), group_args)
    truth.append(CollectiveTruth("allreduce", seq, tuple(present), arrivals, ends,
                                 tuple(rank for rank in members if rank not in present)))
    return max(ends.values())


def _allreduce(spec: MultiRankSpec, rng: random.Random, ranks: list[_Rank], pending: dict, issuing: list[int],
               present: list[int], stopped: set[int], stream: int, transfer_ns: int, nbytes: int, group_size: int,
               group_args: dict, alltoall_told_by: str = "") -> tuple[dict[int, int], dict[int, int]]:
    """An all-reduce (an all-to-all when `alltoall_told_by`: MultiRankSpec) launched on the `issuing` ranks;
    it runs on the `present` ones (an issuing rank not present stops its file here: launched, never recorded
    on the device). Each present rank's kernel arrives when its launch and its previous work are done and
    ends `transfer_ns` after the last arrival (plus the end jitter). Returns (arrivals, ends) in true time."""
    arrivals = {rank: max(pending[rank][0] + 3_000 + LAUNCH_NS, pending[rank][1]) for rank in present}
    last = max(arrivals.values())
    ends = {rank: last + transfer_ns + (rng.randint(0, spec.end_jitter_ns) if spec.end_jitter_ns else 0)
            for rank in present}
    args = {"Collective name": "all_to_all" if alltoall_told_by else "allreduce", "In msg nelems": nbytes,
            "Out msg nelems": nbytes, "Group size": group_size, "dtype": "Float"}
    if spec.with_seq:
        args.update(group_args)
    if alltoall_told_by in ("annotation", "name"):     # 2023 writers: no `Collective name` anywhere
        del args["Collective name"]
    for rank in issuing:
        r = ranks[rank]
        cursor, _, step_start = pending[rank]
        r.x("cpu_op", "c10d::alltoall_base_" if alltoall_told_by else "c10d::allreduce_", cursor, cursor + 8_000)
        r.x("cpu_op", "record_param_comms", cursor + 1_000, cursor + 7_000, dict(args))
        if alltoall_told_by == "annotation":
            r.x("user_annotation", "nccl:all_to_all", cursor + 2_000, cursor + 6_500)
            r.x("user_annotation", "nccl:all_reduce", cursor + 2_500, cursor + 6_000, tid=r.tid + OTHER_THREAD)
        if rank not in arrivals:
            stopped.add(rank)
            continue
        r.correlation += 1
        r.x("cuda_runtime", "cudaLaunchKernel", cursor + 3_000, cursor + 6_000, {"correlation": r.correlation})
        r.kernel(SENDRECV_KERNEL if alltoall_told_by else ALLREDUCE_KERNEL, stream, arrivals[rank], ends[rank],
                 args if spec.with_seq else {k: v for k, v in args.items() if k != "Collective name"})
        pending[rank] = (cursor + 8_000, ends[rank], step_start)
    return arrivals, ends


def n_collectives_for(spec: MultiRankSpec, lacking: int, rank: int) -> int:
    """The all-reduce index from which a rank truncated by `lacking` collectives has none."""
    return spec.steps - lacking


def _us(ns: int) -> float:
    """Kineto's `{us}.{ns:03}` (a float that the loader turns back into the same ns)."""
    return float(f"{ns // 1000}.{ns % 1000:03}")
