"""Every real trace loads with the exact reference numbers of /work/shared/traces/README.md.

Union and concurrency are computed here with tiny plain-Python references, and Σ durations also with an
independent `json.load(parse_float=Decimal)` parse, never with library code.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from conftest import shared_trace
from reference import union_ns

# file, device pid, (kernel, memcpy, memset), {stream: events}, Σ dur ns, busy union ns, max concurrency
REFERENCE = [
    ("trace_filter/sampled_rank-0.json.gz", 0, (1154, 40, 10), {7: 1052, 23: 126, 25: 16, 84: 8, 203: 2},
     607_844_000, 547_656_000, 3),
    ("trace_filter/sampled_rank-1.json.gz", 1, (1104, 40, 10), {7: 1002, 23: 126, 25: 16, 84: 8, 203: 2},
     667_530_000, 580_050_000, 3),
    ("trace_diff/control/control.json.gz", 3, (8568, 228, 654), {7: 8964, 20: 282, 21: 60, 22: 144},
     501_567_000, 388_587_000, 3),
    ("trace_diff/test/test.json.gz", 1, (9876, 4856, 900), {7: 15136, 14: 288, 15: 64, 16: 144},
     963_762_000, 717_943_000, 4),
    ("nccl_parser_config/nccl_data.json.gz", 0, (2700, 960, 114), {7: 3753, 40: 21},
     165_185_838, 157_500_014, 2),
    ("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", 2, (14, 2, 0), {0: 16}, 149_042, 149_042, 1),
    ("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 0, (4350, 1600, 145), {7: 6095},
     472_454_441, 472_454_441, 1),
    ("critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", 0, (79, 16, 3),
     {7: 91, 20: 7}, 66_203_000, 66_141_000, 2),
    ("critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz", 0, (79, 16, 3),
     {7: 91, 20: 7}, 49_816_000, 49_758_000, 2),
]
_KIND = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2}


def _max_concurrency(intervals: list[tuple[int, int]]) -> int:
    points = sorted([(s, 1) for s, e in intervals if e > s] + [(e, -1) for s, e in intervals if e > s],
                    key=lambda p: (p[0], p[1]))          # an end before a start at the same instant
    running = best = 0
    for _, delta in points:
        running += delta
        best = max(best, running)
    return best


def _plain_device_durations(path: Path) -> list[int]:
    """Device durations in exact ns from Python's own json module with decimal floats."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        events = json.load(handle, parse_float=Decimal)["traceEvents"]
    return [int(Decimal(e["dur"]) * 1000) for e in events
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() in _KIND]


def check_conservation(traceset) -> None:
    """Σ self == busy union for every (rank, window, device), busy from the plain-Python union."""
    result = sweep(traceset)
    device = traceset.device
    keys = zip(*(device.column(c).to_pylist() for c in (S.RANK, S.WINDOW, S.DEVICE)))
    intervals: dict[tuple, list] = {}
    selfs: dict[tuple, int] = {}
    for key, start, end, own in zip(keys, device.column(S.START_NS).to_pylist(),
                                    device.column(S.END_NS).to_pylist(), result.self_ns.tolist()):
        intervals.setdefault(key, []).append((start, end))
        selfs[key] = selfs.get(key, 0) + own
    for key, spans in intervals.items():
        assert selfs[key] == union_ns(spans), key


@pytest.mark.parametrize("row", REFERENCE, ids=[r[0].split("/")[0] + "/" + Path(r[0]).name[:20] for r in REFERENCE])
def test_real_trace_matches_reference(row):
    relative, pid, (kernels, memcpys, memsets), streams, dur_sum, busy, concurrency = row
    path = shared_trace(relative)
    traceset = traceattr.load(path)
    device = traceset.device.to_pydict()
    mine = [i for i, d in enumerate(device[S.DEVICE]) if d == pid]
    assert len(mine) == len(device[S.DEVICE]), "all device events sit on the documented device"
    categories = [device[S.CATEGORY][i] for i in mine]
    assert categories.count(S.MEMCPY) == memcpys and categories.count(S.MEMSET) == memsets
    assert categories.count(S.COMPUTE) + categories.count(S.COMMUNICATION) == kernels
    per_stream: dict[int, int] = {}
    for i in mine:
        per_stream[device[S.STREAM][i]] = per_stream.get(device[S.STREAM][i], 0) + 1
    assert per_stream == streams
    spans = [(device[S.START_NS][i], device[S.END_NS][i]) for i in mine]
    durations = [e - s for s, e in spans]
    assert sum(durations) == dur_sum
    assert sorted(durations) == sorted(_plain_device_durations(path))
    assert union_ns(spans) == busy
    assert _max_concurrency(spans) == concurrency
    check_conservation(traceset)


def test_ranks_from_distributed_info(shared_traces):
    trace_filter = traceattr.load(shared_traces / "trace_filter")
    assert trace_filter.ranks == [0, 1]
    assert trace_filter.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_FROM_JSON] * 2
    assert trace_filter.files.column(S.WORLD_SIZE).to_pylist() == [128, 128]
    # rank 1's kernels are on its own GPU (pid 1): per-device keys must follow the rank
    pairs = set(zip(trace_filter.device.column(S.RANK).to_pylist(), trace_filter.device.column(S.DEVICE).to_pylist()))
    assert pairs == {(0, 0), (1, 1)}
    check_conservation(trace_filter)
    dist2 = traceattr.load(shared_trace("torch213_cpu/dist2"))
    assert dist2.ranks == [0, 1]
    names = {Path(p).name.split(".")[0]: r for p, r in zip(dist2.files.column(S.PATH).to_pylist(),
                                                          dist2.files.column(S.RANK).to_pylist())}
    assert names == {"vm_11203": 0, "vm_11204": 1}
    assert dist2.device.num_rows == 0 and dist2.host.num_rows == 2 * 2990


def test_one_process_two_windows_and_assumed_rank():
    single = traceattr.load(shared_trace("torch213_cpu/single_gz"))
    files = single.files.to_pydict()
    assert files[S.RANK] == [0, 0] and files[S.WINDOW] == [0, 1]
    assert files[S.RANK_SOURCE] == [S.RANK_ASSUMED] * 2
    assert files[S.END_NS][0] <= files[S.START_NS][1]
    assert sorted(files[S.PATH]) == files[S.PATH]        # time order == the time_ns order in the names
    assert any("rank assumed 0" in note for note in single.notes)
    host = single.host.to_pydict()
    assert set(zip(host[S.RANK], host[S.WINDOW])) == {(0, 0), (0, 1)}
    modules = [n for n, c in zip(host[S.NAME], host[S.CATEGORY]) if n.startswith("nn.Module:")]
    assert modules and all(c == S.PYTHON_FUNCTION for n, c in zip(host[S.NAME], host[S.CATEGORY])
                           if n.startswith("nn.Module:"))
    amd = traceattr.load(shared_trace("amd_trace"))
    assert amd.ranks == [0] and amd.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_ASSUMED]
    check_conservation(amd)


def test_single_json_counts():
    single = traceattr.load(shared_trace("torch213_cpu/single_json"))
    categories = single.host.column(S.CATEGORY).to_pylist()
    assert (categories.count(S.CPU_OP), categories.count(S.PYTHON_FUNCTION),
            categories.count(S.USER_ANNOTATION)) == (828, 846, 10)
    assert single.files.column(S.EVENTS).to_pylist() == [2019]
    assert single.device.num_rows == 0 and single.markers.num_rows == 0


def test_era_b_is_exact():
    traceset = traceattr.load(shared_trace("ns_resolution_trace"))
    files = traceset.files.to_pydict()
    assert files[S.ERA] == [S.ERA_B] and files[S.BASE_TIME_NS] == [0] and files[S.RANK] == [0]
    durations = (traceset.device.column(S.END_NS).to_numpy() - traceset.device.column(S.START_NS).to_numpy())
    assert int(durations.sum()) == 472_454_441
    # sub-µs digits survive on absolute starts (float64 would have rounded them to 0.25 µs steps)
    assert np.any(traceset.device.column(S.START_NS).to_numpy() % 250 != 0)
    markers = traceset.markers.column(S.CATEGORY).to_pylist()
    assert markers.count(S.GPU_USER_ANNOTATION) == 15


def test_era_c_base_read_from_end_of_file():
    path = shared_trace("nccl_parser_config/nccl_data.json.gz")
    with gzip.open(path, "rb") as handle:
        text = handle.read()
    assert text.rfind(b'"baseTimeNanoseconds"') > text.find(b'"traceEvents"')     # the premise
    traceset = traceattr.load(path)
    files = traceset.files.to_pydict()
    assert files[S.ERA] == [S.ERA_C] and files[S.BASE_TIME_NS] == [1_711_964_646_000_000_000]
    assert files[S.WORLD_SIZE] == [2]
    assert json.loads(files[S.METADATA][0])["displayTimeUnit"] == "ms"
    assert "INFO" not in json.loads(files[S.METADATA][0])
    # a kernel's absolute start = base + exact relative ns of its written `ts`
    events = json.loads(text, parse_float=Decimal)["traceEvents"]
    first = next(e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")
    device = traceset.device.to_pydict()
    row = device[S.CORRELATION].index(first["args"]["correlation"])
    assert device[S.START_NS][row] == 1_711_964_646_000_000_000 + int(first["ts"] * 1000)
    communication = [c for c, k in zip(device[S.COLLECTIVE], device[S.CATEGORY]) if k == S.COMMUNICATION]
    assert len(communication) == 21 and set(communication) == {"allreduce", "broadcast"}
    assert traceset.markers.column(S.CATEGORY).to_pylist().count(S.GPU_USER_ANNOTATION) == 30


def test_sync_events_are_markers_not_device_work():
    traceset = traceattr.load(shared_trace("critical_path/alexnet"))
    assert traceset.markers.column(S.CATEGORY).to_pylist().count(S.CUDA_SYNC) == 41
    assert S.CUDA_SYNC not in set(traceset.device.column(S.CATEGORY).to_pylist())
    check_conservation(traceset)
