"""Device work of other backends (kineto-format.md 2.2): MTIA's on-device events are busy time on their
device, linked through `mtia_runtime` like CUDA kernels through `cuda_runtime`."""

from __future__ import annotations

import json

import traceattr
from traceattr import schema as S
from traceattr.analysis.header import HOST_ONLY_NOTE
from tracesets import header_of
from traceattr.attribution.links import LINKED, link

BASE_US = 1_795_993_600_000_000


def mtia_trace(path) -> None:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 900, "tid": 900,
         "ts": BASE_US, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 900, "tid": 900, "ts": BASE_US + 1, "dur": 20},
        {"ph": "X", "cat": "mtia_runtime", "name": "mtiaLaunchKernel", "pid": 900, "tid": 900,
         "ts": BASE_US + 2, "dur": 3, "args": {"correlation": 11}},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 900, "tid": 900, "ts": BASE_US + 30,
         "dur": 20},
        {"ph": "X", "cat": "mtia_runtime", "name": "mtiaLaunchKernel", "pid": 900, "tid": 900,
         "ts": BASE_US + 31, "dur": 3, "args": {"correlation": 12}},
        {"ph": "X", "cat": "mtia_ccp_events", "name": "mm_kernel", "pid": 3, "tid": 1, "ts": BASE_US + 10,
         "dur": 40, "args": {"correlation": 11}},
        {"ph": "X", "cat": "mtia_ccp_events", "name": "hccl_allreduce", "pid": 3, "tid": 2, "ts": BASE_US + 40,
         "dur": 30, "args": {"correlation": 12}},
        {"ph": "X", "cat": "hpu_op", "name": "a runtime call", "pid": 900, "tid": 900, "ts": BASE_US + 60,
         "dur": 1},
    ]
    info = {"backend": "mtia:hccl,cpu:gloo", "rank": 1, "world_size": 2}
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": info, "deviceProperties": [],
                                "traceEvents": events}))


def test_mtia_device_events_are_busy_time_on_their_device(tmp_path):
    mtia_trace(tmp_path / "mtia.json")
    ts = traceattr.load(tmp_path / "mtia.json", cache=False)
    by_rank = traceattr.summarize(ts, by="rank")
    assert by_rank[S.DEVICE].tolist() == [3] and by_rank[S.RANK].tolist() == [1]
    assert by_rank[S.BUSY_NS].tolist() == [60_000]            # [10, 70) µs: the two overlap by 10 µs
    by_category = traceattr.summarize(ts, by="category").set_index(S.CATEGORY)
    assert by_category[S.DURATION_NS].to_dict() == {S.COMPUTE: 40_000, S.COMMUNICATION: 30_000}
    assert (link(ts).status == LINKED).all()
    header = header_of(ts)
    assert not header["host_only"] and HOST_ONLY_NOTE not in header["notes"]
    assert not any("CPU-only" in note for note in header["notes"])
    steps = traceattr.attribute(ts, by="step")
    assert steps["key"].tolist() == ["ProfilerStep#1"] and steps[S.SELF_NS].sum() == 60_000
