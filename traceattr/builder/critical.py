"""Small hand-timed traces whose critical path is known by construction (tests/test_critical_path.py).

A Scenario places host ops, launches, kernels, event records/waits and syncs at exact µs on one thread and
one device, and writes a Kineto JSON file (absolute µs, torch 2.1+ `cuda_sync` markers). Each scenario
function returns the scenario and its planted truth: the path's ns per kind and per (kind, name), worked out
by hand from the timings in its docstring, never by running the analysis.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PID, TID, DEVICE = 1234, 1234, 0
BASE_US = 1_700_000_000_000_000     # absolute epoch µs, whole: every time is exact in ns
STEP = "ProfilerStep#1"


class Scenario:
    def __init__(self, rank: int | None = None, world_size: int = 1) -> None:
        self.events: list[dict] = []
        self.rank, self.world_size = rank, world_size
        self.pid = PID + (rank or 0)
        self.correlation = 100 + 100_000 * (rank or 0)

    def _next(self) -> int:
        self.correlation += 1
        return self.correlation

    def host(self, name: str, start: float, end: float, cat: str = "cpu_op", **args) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.pid, "ts": BASE_US + start,
                            "dur": end - start, "args": args})

    def step(self, start: float, end: float, name: str = STEP) -> None:
        self.host(name, start, end, cat="user_annotation")

    def call(self, name: str, start: float, end: float) -> int:
        corr = self._next()
        self.host(name, start, end, cat="cuda_runtime", correlation=corr)
        return corr

    def kernel(self, name: str, stream: int, call: tuple[float, float], run: tuple[float, float],
               cat: str = "kernel", runtime: str = "cudaLaunchKernel") -> int:
        corr = self.call(runtime, *call)
        self.device(cat, name, stream, *run, correlation=corr)
        return corr

    def device(self, cat: str, name: str, stream: int, start: float, end: float, **args) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": DEVICE, "tid": stream,
                            "ts": BASE_US + start, "dur": end - start,
                            "args": {"device": DEVICE, "stream": stream, **args}})

    def allreduce(self, seq: int, stream: int, call: tuple[float, float], run: tuple[float, float]) -> int:
        """An NCCL all-reduce of every rank (process group "0"), matched across ranks by its `Seq`."""
        corr = self.call("cudaLaunchKernel", *call)
        ranks = ", ".join(str(r) for r in range(self.world_size))
        self.device("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream, *run, correlation=corr,
                    **{"Collective name": "allreduce", "Process Group Name": "0", "Process Group Ranks": f"[{ranks}]",
                       "Seq": seq, "Group size": self.world_size, "In msg nelems": 1024, "Out msg nelems": 1024,
                       "dtype": "Float"})
        return corr

    def device_sync(self, start: float, end: float) -> None:
        corr = self.call("cudaDeviceSynchronize", start, end)
        self.device("cuda_sync", "Context Sync", -1, start, end, cuda_sync_kind="Context Sync", correlation=corr)

    def record(self, start: float, end: float) -> int:
        return self.call("cudaEventRecord", start, end)

    def wait(self, stream: int, on_stream: int, record: int, start: float, end: float) -> None:
        corr = self.call("cudaStreamWaitEvent", start, end)
        self.device("cuda_sync", "Stream Wait Event", stream, start, end, cuda_sync_kind="Stream Wait Event",
                    correlation=corr, wait_on_stream=on_stream, wait_on_cuda_event_record_corr_id=record)

    def sync(self, stream: int, start: float, end: float) -> None:
        corr = self.call("cudaStreamSynchronize", start, end)
        self.device("cuda_sync", "Stream Sync", stream, start, end, cuda_sync_kind="Stream Sync", correlation=corr)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
                 "traceEvents": sorted(self.events, key=lambda e: e["ts"])}
        if self.rank is not None:
            trace["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "wt") as out:
            json.dump(trace, out)
        return path


def _ns(kinds: dict[str, float]) -> dict[str, int]:
    return {kind: int(round(us * 1000)) for kind, us in kinds.items() if us}


def host_bound() -> tuple[Scenario, dict, dict]:
    """Step 0..1000 µs; aten::a 10..400 launches a 20 µs kernel (call 300..310); aten::b 400..1000. The GPU
    never holds the host up: the whole step is host time (step 10, aten::a 380, the launch call 10, aten::b 600)."""
    s = Scenario()
    s.step(0, 1000)
    s.host("aten::a", 10, 400)
    s.kernel("k_small", 7, (300, 310), (320, 340))
    s.host("aten::b", 400, 1000)
    names = {("host", STEP): 10, ("host", "aten::a"): 380, ("host", "cudaLaunchKernel"): 10, ("host", "aten::b"): 600}
    return s, _ns({"host": 1000}), {k: v * 1000 for k, v in names.items()}


def launch_bound() -> tuple[Scenario, dict, dict]:
    """Step 0..100; aten::op 5..95 launches at 10..20 a kernel that starts only at 60 and runs 10 µs; a stream
    sync 30..75 returns 5 µs after it: step 5 + op 5 (to the call) + launch 50 + compute 10 + sync 5 + op 20
    (after the sync) + step 5."""
    s = Scenario()
    s.step(0, 100)
    s.host("aten::op", 5, 95)
    s.kernel("k_late", 7, (10, 20), (60, 70))
    s.sync(7, 30, 75)
    names = {("host", STEP): 10, ("host", "aten::op"): 25, ("launch", "k_late"): 50, ("compute", "k_late"): 10,
             ("sync", ""): 5}
    return s, _ns({"host": 35, "launch": 50, "compute": 10, "sync": 5}), {k: v * 1000 for k, v in names.items()}


def compute_bound() -> tuple[Scenario, dict, dict]:
    """Step 0..1000; aten::op 5..950 launches k1 (call 10..15, runs 20..500) and k2 (call 16..21, queued
    behind k1: runs 502..900) and syncs 30..905: step 5 + op 5 + launch 10 + k1 480 + gap 2 + k2 398 + sync 5
    + op 45 + step 50."""
    s = Scenario()
    s.step(0, 1000)
    s.host("aten::op", 5, 950)
    s.kernel("k1", 7, (10, 15), (20, 500))
    s.kernel("k2", 7, (16, 21), (502, 900))
    s.sync(7, 30, 905)
    names = {("host", STEP): 55, ("host", "aten::op"): 50, ("launch", "k1"): 10, ("compute", "k1"): 480,
             ("kernel_gap", ""): 2, ("compute", "k2"): 398, ("sync", ""): 5}
    return s, _ns({"host": 105, "launch": 10, "compute": 878, "kernel_gap": 2, "sync": 5}), \
        {k: v * 1000 for k, v in names.items()}


def event_wait() -> tuple[Scenario, dict, dict]:
    """Two streams. Step 0..700; aten::op 5..600: k1 on stream 7 (call 10..12, runs 20..300), an event
    recorded on 7 (13..14) and awaited by stream 20 (15..16), k2 on stream 20 (call 17..18) starts at 301,
    one µs after k1, runs to 500; a sync of stream 20 (19..505). Without the wait edge k2 would look
    launch-bound (284 µs); with it: step 5 + op 5 + launch 10 + k1 280 + wait 1 + k2 199 + sync 5 + op 95 +
    step 100."""
    s = Scenario()
    s.step(0, 700)
    s.host("aten::op", 5, 600)
    s.kernel("k1", 7, (10, 12), (20, 300))
    record = s.record(13, 14)
    s.wait(20, 7, record, 15, 16)
    s.kernel("k2", 20, (17, 18), (301, 500))
    s.sync(20, 19, 505)
    names = {("host", STEP): 105, ("host", "aten::op"): 100, ("launch", "k1"): 10, ("compute", "k1"): 280,
             ("sync", ""): 6, ("compute", "k2"): 199}
    return s, _ns({"host": 205, "launch": 10, "compute": 479, "sync": 6}), {k: v * 1000 for k, v in names.items()}


def sync_in_the_middle() -> tuple[Scenario, dict, dict]:
    """Step 0..600; aten::a 5..406 launches k1 (call 10..12, runs 15..400) and syncs 50..405; then aten::b
    410..500 on the host alone: step 5 + a 5 + launch 5 + k1 385 + sync 5 + a 1 + step 4 + b 90 + step 100."""
    s = Scenario()
    s.step(0, 600)
    s.host("aten::a", 5, 406)
    s.kernel("k1", 7, (10, 12), (15, 400))
    s.sync(7, 50, 405)
    s.host("aten::b", 410, 500)
    names = {("host", STEP): 109, ("host", "aten::a"): 6, ("launch", "k1"): 5, ("compute", "k1"): 385,
             ("sync", ""): 5, ("host", "aten::b"): 90}
    return s, _ns({"host": 205, "launch": 5, "compute": 385, "sync": 5}), {k: v * 1000 for k, v in names.items()}


def late_rank() -> tuple[list[Scenario], dict, list[tuple[int, int, int]]]:
    """Two ranks, one all-reduce. Rank 0 (step 0..820) launches it at once (call 40..45, kernel 60..700:
    it waits there for rank 1) and syncs 50..705. Rank 1 stalls on the host (aten::stall 5..600), then
    c10d::allreduce_ 600..650 launches it (call 640..645, kernel 650..700); it syncs 655..705. Rank 0's own
    path is 640 µs of communication; across ranks the step is bound by rank 1's stall: rank 1 0..650 (step 5,
    stall 595, c10d 40, launch 10), then rank 0 650..820 (the transfer 50, sync 5, step 115).
    Returns the scenarios, the cross-rank truth per (rank, kind, key) from rank 0's step, and its chain."""
    r0, r1 = Scenario(0, 2), Scenario(1, 2)
    r0.step(0, 820)           # the step ends last on rank 0: the path starts from its end
    r1.step(0, 800)
    r0.host("aten::a", 5, 50)
    r0.allreduce(1, 20, (40, 45), (60, 700))
    r0.sync(20, 50, 705)
    r1.host("aten::stall", 5, 600)
    r1.host("c10d::allreduce_", 600, 650)
    r1.allreduce(1, 20, (640, 645), (650, 700))
    r1.sync(20, 655, 705)
    truth = {(1, "host", STEP): 5, (1, "host", "aten::stall"): 595, (1, "host", "c10d::allreduce_"): 40,
             (1, "launch", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"): 10,
             (0, "communication", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"): 50, (0, "sync", ""): 5,
             (0, "host", STEP): 115}
    return [r0, r1], {k: v * 1000 for k, v in truth.items()}, [(1, 0, 650_000), (0, 650_000, 820_000)]


def pageable_copy() -> tuple[Scenario, dict, dict]:
    """Step 0..600; aten::to 5..500 launches k (call 6..8, runs 20..390) and a copy to pageable memory
    (cudaMemcpyAsync 10..405, queued behind k: runs 392..400), which blocks its call until 5 µs after the copy:
    step 5 + to 1 + launch 14 + k 370 + gap 2 + copy 8 + sync 5 + to 95 + step 100."""
    s = Scenario()
    s.step(0, 600)
    s.host("aten::to", 5, 500)
    s.kernel("k", 7, (6, 8), (20, 390))
    s.kernel("Memcpy DtoH (Device -> Pageable)", 7, (10, 405), (392, 400), cat="gpu_memcpy", runtime="cudaMemcpyAsync")
    names = {("host", STEP): 105, ("host", "aten::to"): 96, ("launch", "k"): 14, ("compute", "k"): 370,
             ("kernel_gap", ""): 2, ("memcpy", "Memcpy DtoH (Device -> Pageable)"): 8, ("sync", ""): 5}
    return s, _ns({"host": 201, "launch": 14, "compute": 370, "kernel_gap": 2, "memcpy": 8, "sync": 5}), \
        {k: v * 1000 for k, v in names.items()}


def parallel_streams() -> tuple[Scenario, dict, dict, dict]:
    """Step 0..400; aten::op 5..350 launches A on stream 7 (call 10..12, runs 20..300) and B on stream 20
    (call 13..15, runs 20..290), then a device sync 30..305: step 55 + op 50 + launch 10 + A 280 + sync 5.
    B ends 10 µs before A, the sync returns 5 µs after A: shrinking A gains at most 15 µs before B holds the
    sync, so every key before the sync has 15 µs of slack (the sync itself its 5)."""
    s = Scenario()
    s.step(0, 400)
    s.host("aten::op", 5, 350)
    s.kernel("A", 7, (10, 12), (20, 300))
    s.kernel("B", 20, (13, 15), (20, 290))
    s.device_sync(30, 305)
    names = {("host", STEP): 55, ("host", "aten::op"): 50, ("launch", "A"): 10, ("compute", "A"): 280,
             ("sync", ""): 5}
    slack = {("host", STEP): 15, ("host", "aten::op"): 15, ("launch", "A"): 10, ("compute", "A"): 15,
             ("sync", ""): 5}
    return s, _ns({"host": 105, "launch": 10, "compute": 280, "sync": 5}), \
        {k: v * 1000 for k, v in names.items()}, {k: v * 1000 for k, v in slack.items()}


SCENARIOS = {"host_bound": host_bound, "launch_bound": launch_bound, "compute_bound": compute_bound,
             "event_wait": event_wait, "sync_in_the_middle": sync_in_the_middle, "pageable_copy": pageable_copy}


def large(steps: int = 20, ops_per_step: int = 2000, streams: int = 2, collective_every: int = 0) -> Scenario:
    """A big regular trace for the benchmark: each op launches one kernel, round robin over the streams, with
    a stream sync closing each step; with `collective_every` N, every N-th op launches an all-reduce instead."""
    s = Scenario(0, 1)
    t = 0.0
    seq = 0
    for _ in range(steps):
        start = t
        gpu = {7 + i: t for i in range(streams)}
        for i in range(ops_per_step):
            stream = 7 + i % streams
            s.host("aten::mm" if i % 3 else "aten::add", t, t + 8)
            run = max(gpu[stream], t + 6) + 1
            if collective_every and i % collective_every == 0:
                seq += 1
                s.allreduce(seq, stream, (t + 2, t + 6), (run, run + 5 + i % 7))
            else:
                s.kernel("gemm" if i % 3 else "add", stream, (t + 2, t + 6), (run, run + 5 + i % 7))
            gpu[stream] = run + 5 + i % 7
            t += 9
        end = max(gpu.values())
        s.sync(7, t, end + 3)
        t = end + 5
        s.step(start, t)
        t += 1
    return s
