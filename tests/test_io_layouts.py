"""One set of events written in every layout the wild produces must give identical tables, and the
streaming splitter must agree with the whole-document decode whatever the chunk size."""

from __future__ import annotations

import gzip
import json

import pytest

from traceattr import schema as S
from traceattr.io.decode import decode_file

BASE = 1_790_857_026_000_000_000


def _events(copies: int = 1) -> list[dict]:
    """Events with the value-type surprises of kineto-format.md 2.4 and text that looks like boundaries."""
    events = []
    for i in range(copies):
        t = 5_131_150_184_357.911 + i * 1000.0
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm},{\"ph\": \"X\"}", "pid": 11187, "tid": 11187,
             "ts": t, "dur": 10.5, "args": {"External id": 5 + i, "Sequence number": 9, "Fwd thread id": 1,
                                             "Input Dims": [[2, 3], [[1], [2, 3]], []], "Comms Id": 2**70,
                                             "Concrete Inputs": ["", "},{"]}},
            {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 11187, "tid": 11187,
             "ts": t + 0.001, "dur": 5, "args": {"Python id": 3, "Python parent id": None, "Python module id": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 11187, "tid": 11187,
             "ts": t + 1.25, "dur": 2.125, "args": {"correlation": 100 + i, "External id": 5 + i, "stream": "0x0",
                                                     "cid": 3, "kernel": "x"}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7,
             "ts": t + 3.333, "dur": 7.777, "args": {"correlation": 100 + i, "External id": 5 + i,
                                                      "blocks per SM": "inf", "grid": [1, 2, 3],
                                                      "occupancy": {"a": {"b": [{"c": 1}, {"d": 2}]}}}},
            {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": 20, "ts": t + 4, "dur": 1,
             "args": {"correlation": 101 + i, "Collective name": ""}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": t + 12,
             "dur": 0, "args": {"bytes": 4096, "memory bandwidth (GB/s)": "N/A", "correlation": 102 + i}},
            {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": t + 13,
             "dur": 0.5, "args": {"bytes": 16}},
            {"ph": "X", "cat": "gpu_user_Annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7,
             "ts": t + 3, "dur": 11, "args": {"External id": 4}},
            {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": -1, "ts": t + 2, "dur": 1},
            {"ph": "X", "cat": "xpu_sync", "name": "weird", "pid": 0, "tid": 7, "ts": t + 2, "dur": 1},
            {"ph": "X", "cat": "Operator", "name": "legacy_op", "pid": 11187, "tid": 5, "ts": t, "dur": 1},
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": t, "dur": 100, "args": {"Op count": 0}},
            {"ph": "X", "cat": "user_annotation", "name": "on a string row", "pid": "Traces", "tid": "",
             "ts": t, "dur": 2},
            {"ph": "s", "id": 100 + i, "pid": 11187, "tid": 11187, "ts": t + 1.25, "cat": "ac2g", "name": "ac2g"},
            {"ph": "f", "id": 100 + i, "pid": 0, "tid": 7, "ts": t + 3.333, "cat": "ac2g", "name": "ac2g", "bp": "e"},
            {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 11187, "tid": 11187,
             "ts": t, "args": {"Bytes": -4, "Addr": 2**63 + 5}},
            {"ph": "C", "cat": "hardware_counters", "name": "sm", "pid": "GPU 0 Counters", "tid": 0, "ts": t,
             "args": {"sm": 0.5}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "ts": t, "args": {"name": "stream 7 "}},
        ]
    return events


def _header() -> dict:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}],
            "note": 'a "traceEvents": [ look-alike', "meta": {"traceEvents": 1},
            "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4, "ranks": "[0, 1]",
                                "pg_config": [{"pg_name": "0"}, {"pg_name": "1"}]},
            "displayTimeUnit": "ms"}


def _trailer() -> dict:
    return {"traceName": "/tmp/tmp.json", "INFO": ["cpp:1217] x", "},{", "]"],
            "baseTimeNanoseconds": BASE}


def _pretty_213(header: dict, events: list[dict], trailer: dict) -> str:
    """torch 2.13: header keys at four spaces, every event key on its own line, blank padding lines."""
    head = "".join(f'    "{k}": {json.dumps(v)},\n' for k, v in header.items())
    body = ",\n".join("  {\n" + ",\n".join(f'    "{k}": {json.dumps(v, indent=2)}' for k, v in e.items())
                      + "\n    \n  }" for e in events)
    tail = "".join(f', "{k}": {json.dumps(v)}' for k, v in trailer.items())
    return " {\n" + head + '    "traceEvents": [\n    \n' + body + "\n  ]" + tail + " }"


def _one_per_line(header: dict, events: list[dict], trailer: dict) -> str:
    head = json.dumps(header)[:-1] + ', "traceEvents": [\n'
    return head + ",\n".join(json.dumps(e) for e in events) + "\n]" + json.dumps(trailer).replace("{", ", ", 1)


def _documents(events: list[dict]) -> dict[str, str]:
    header, trailer = _header(), _trailer()
    before = dict(header, baseTimeNanoseconds=BASE)
    trailer_without_base = {k: v for k, v in trailer.items() if k != "baseTimeNanoseconds"}
    return {
        "pretty213_base_after": _pretty_213(header, events, trailer),
        "pretty213_base_before": _pretty_213(before, events, trailer_without_base),
        "compact_one_line": json.dumps({**header, "traceEvents": events, **trailer}, separators=(",", ":")),
        "one_event_per_line": _one_per_line(header, events, trailer),
        "indent_4_base_before": json.dumps({**before, "traceEvents": events, **trailer_without_base}, indent=4),
    }


def _tables(decoded):
    return decoded.device, decoded.host, decoded.markers


@pytest.fixture(scope="module")
def reference():
    events = _events()
    return events, decode_file_text(json.dumps({**_header(), "traceEvents": events, **_trailer()}))


def decode_file_text(text: str, tmp=None, **kwargs):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank3.json"
        path.write_text(text)
        return decode_file(str(path), **kwargs)


def test_reference_tables_are_right(reference):
    events, decoded = reference
    device = decoded.device.to_pydict()
    assert device[S.CATEGORY] == [S.COMMUNICATION, S.COMPUTE, S.MEMCPY, S.MEMSET]
    assert device[S.BYTES] == [-1, -1, 4096, 16]
    assert device[S.START_NS][0] == BASE + 5_131_150_184_361_244          # 357.911 + 3.333 µs, exact
    assert [e - s for s, e in zip(device[S.START_NS], device[S.END_NS])] == [7777, 1000, 0, 500]
    host = decoded.host.to_pydict()
    assert host[S.CATEGORY] == [S.CPU_OP, S.PYTHON_FUNCTION, S.CUDA_RUNTIME, S.CPU_OP, S.USER_ANNOTATION]
    assert host[S.PYTHON_PARENT_ID][1] == -1 and host[S.PYTHON_MODULE_ID][1] == 7
    assert host[S.SEQUENCE_NUMBER][0] == 9 and host[S.CORRELATION][2] == 100
    assert host[S.PID][4] < -1 and host[S.TID][4] < -1 and host[S.TID][4] != host[S.PID][4]
    markers = decoded.markers.to_pydict()
    assert markers[S.CATEGORY] == [S.GPU_USER_ANNOTATION, S.CUDA_SYNC, "xpu_sync"]
    assert decoded.unmapped == {"xpu_sync": 1} and decoded.dropped == {"trace": 1}
    assert decoded.phases == {"X": 13, "s": 1, "f": 1, "i": 1, "C": 1, "M": 1}
    assert decoded.events == len(events) and decoded.json_rank == 3 and decoded.world_size == 4
    assert decoded.era == S.ERA_C and decoded.base_time_ns == BASE
    assert json.loads(decoded.device_properties) == [{"id": 0, "name": "GPU"}]
    metadata = json.loads(decoded.metadata)
    assert "INFO" not in metadata and metadata["traceName"] == "/tmp/tmp.json"


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_every_layout_gives_identical_tables(tmp_path, reference, compress):
    _, expected = reference
    for layout, text in _documents(_events()).items():
        path = tmp_path / (layout + (".json.gz" if compress else ".json"))
        if compress:
            path.write_bytes(gzip.compress(text.encode(), 9))
        else:
            path.write_text(text)
        for block_bytes in (1 << 20, 97):           # whole document and streaming with tiny blocks
            decoded = decode_file(str(path), block_bytes=block_bytes)
            for got, want in zip(_tables(decoded), _tables(expected)):
                assert got.equals(want), (layout, block_bytes)
            assert (decoded.era, decoded.base_time_ns, decoded.json_rank) == (S.ERA_C, BASE, 3), layout
            assert json.loads(decoded.metadata) == json.loads(expected.metadata), layout


@pytest.mark.parametrize("layout", ["pretty213_base_after", "compact_one_line", "one_event_per_line"])
def test_chunked_stream_equals_whole_document(tmp_path, layout):
    text = _documents(_events(copies=100))[layout]
    path = tmp_path / "rank3.json"
    path.write_text(text)
    assert len(text) > 40_000
    whole = decode_file(str(path), block_bytes=len(text) * 2)
    assert whole.device.num_rows == 4 * 100
    for block_bytes in (509, 8192):
        streamed = decode_file(str(path), block_bytes=block_bytes)
        for got, want in zip(_tables(streamed), _tables(whole)):
            assert got.equals(want), block_bytes
        assert (streamed.events, streamed.phases, streamed.metadata) == (whole.events, whole.phases, whole.metadata)


def test_gzip_is_recognised_by_magic_bytes_not_by_name(tmp_path, reference):
    _, expected = reference
    text = _documents(_events())["pretty213_base_after"]
    path = tmp_path / "rank3.json"                      # gzip bytes under a plain name
    path.write_bytes(gzip.compress(text.encode()))
    decoded = decode_file(str(path), block_bytes=256)
    for got, want in zip(_tables(decoded), _tables(expected)):
        assert got.equals(want)
