"""Bad input: each case raises a TraceInputError naming the file and the problem in one line, or with
skip_bad=True is skipped with a note; plus discovery of ranks and windows on hand-made files."""

from __future__ import annotations

import gzip
import json

import pytest

import traceattr
from traceattr import schema as S
from traceattr.errors import TraceDiscoveryError, TraceFormatError, TraceInputError
from test_io_real import check_conservation


def _kernel(ts: float, dur: float = 1.0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur}


def _trace(rank: int | None = None, start: float = 1_700_000_000_000_000, **extra) -> dict:
    doc = {"schemaVersion": 1, "traceEvents": [_kernel(start), _kernel(start + 10)], **extra}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    return doc


def _write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _one_line_error(exc: TraceInputError, name: str, words: str) -> None:
    message = str(exc)
    assert "\n" not in message and name in message and words in message.lower(), message
    assert exc.exit_code == 2


GOOD_TEXT = json.dumps(_trace(0))
BAD_FILES = {
    "not_json.json": (b"this is not json at all", "not valid json"),
    "truncated.json": (GOOD_TEXT[: len(GOOD_TEXT) // 2].encode(), "truncated"),
    "events_not_list.json": (json.dumps({"traceEvents": {"a": 1}}).encode(), "not a list"),
    "ts_string.json": (json.dumps({"traceEvents": [dict(_kernel(1.0), ts="12")]}).encode(), "ts"),
    "dur_missing.json": (json.dumps({"traceEvents": [{k: v for k, v in _kernel(1.0).items() if k != "dur"}]}).encode(), "dur"),
    "ph_missing.json": (json.dumps({"traceEvents": [{k: v for k, v in _kernel(1.0).items() if k != "ph"}]}).encode(), "ph"),
    "ph_number.json": (json.dumps({"traceEvents": [dict(_kernel(1.0), ph=5)]}).encode(), "ph"),
    "empty.json": (b"", "empty"),
    "truncated.json.gz": (gzip.compress(GOOD_TEXT.encode())[:-30], "truncated gzip data: the file ends before"),
    "corrupt.json.gz": (gzip.compress(GOOD_TEXT.encode())[:20] + b"\x00garbage" * 40, "corrupt gzip data (in "),
    # gzip itself said "truncated" here (it reads the garbage as a next member): the file is whole, then junk
    "trailing.json.gz": (gzip.compress(GOOD_TEXT.encode()) + b"GARBAGE", "trailing garbage: the gzip stream ends"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_raises_one_clear_line(tmp_path, name):
    content, words = BAD_FILES[name]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as caught:
        traceattr.load(path)
    _one_line_error(caught.value, name, words)
    assert caught.value.path == str(path)


def test_bad_data_deep_in_a_streamed_file_names_the_event(tmp_path):
    events = [_kernel(1_700_000_000_000_000 + i) for i in range(3000)]
    events[2500]["dur"] = "soon"
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    from traceattr.io.decode import decode_file
    with pytest.raises(TraceFormatError) as caught:
        decode_file(str(path), block_bytes=4096)
    assert "traceEvents[2500].dur" in str(caught.value)


def test_truncated_streamed_file(tmp_path):
    text = json.dumps(_trace(0, traceName="x") | {"traceEvents": [_kernel(1e15 + i) for i in range(2000)]})
    path = tmp_path / "rank0.json"
    path.write_text(text[:-5000])
    from traceattr.io.decode import decode_file
    with pytest.raises(TraceFormatError, match="truncated"):
        decode_file(str(path), block_bytes=4096)


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(TraceDiscoveryError) as caught:
        traceattr.load(tmp_path / "nope")
    _one_line_error(caught.value, "nope", "no such file")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(TraceDiscoveryError) as caught:
        traceattr.load(tmp_path / "empty")
    _one_line_error(caught.value, "empty", "no trace files")


def test_skip_bad_keeps_the_good_files(tmp_path):
    _write(tmp_path / "rank0.json", _trace(0))
    for name in ("not_json.json", "truncated.json.gz", "ts_string.json"):
        (tmp_path / name).write_bytes(BAD_FILES[name][0])
    with pytest.raises(TraceFormatError):
        traceattr.load(tmp_path)
    loaded = traceattr.load(tmp_path, skip_bad=True)
    check_conservation(loaded)
    assert loaded.ranks == [0] and loaded.device.num_rows == 2
    skipped = [n for n in loaded.notes if n.startswith("skipped")]
    assert len(skipped) == 3 and all(any(name in n for n in skipped)
                                     for name in ("not_json.json", "truncated.json.gz", "ts_string.json"))
    (tmp_path / "rank0.json").unlink()
    with pytest.raises(TraceDiscoveryError, match="no readable trace files"):
        traceattr.load(tmp_path, skip_bad=True)


def test_non_trace_json_hidden_and_temporary_files_are_skipped(tmp_path):
    _write(tmp_path / "rank1.json", _trace())
    _write(tmp_path / "manifest.json", {"ranks": [1], "files": ["rank1.json"]})
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "rank5.json").write_text("garbage")
    (tmp_path / ".rank6.json").write_text("garbage")
    (tmp_path / "rank7.json.part").write_text("garbage")
    loaded = traceattr.load(tmp_path)
    check_conservation(loaded)
    assert loaded.ranks == [1]
    assert loaded.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_FROM_NAME]
    assert any("manifest.json" in n and "without traceEvents" in n for n in loaded.notes)


@pytest.mark.parametrize("content,kind", [
    (b'[{"name": "aten::mm", "count": 3}, {"name": "x"}]', "array"), (b"  []", "array"), (b"42", "number"),
    (b'"text"', "string"), (b"null", "null")])
def test_valid_json_that_is_not_an_object_is_skipped_with_a_note_like_a_manifest(tmp_path, content, kind):
    """TraceLens writes execution_details.json (a top-level array) beside its traces: not a trace, not an
    error, exactly like an object without traceEvents."""
    _write(tmp_path / "rank1.json", _trace())
    (tmp_path / "execution_details.json").write_bytes(content)
    loaded = traceattr.load(tmp_path, cache=False)
    assert loaded.ranks == [1]
    assert any("execution_details.json" in n and f"valid JSON {kind} without traceEvents" in n
               for n in loaded.notes)
    (tmp_path / "broken.json").write_bytes(b'[{"name": "x"},')        # invalid JSON stays an error
    with pytest.raises(TraceFormatError, match="broken.json"):
        traceattr.load(tmp_path, cache=False)


@pytest.mark.parametrize("name,rank", [
    ("rank-3.Apr_03_18_51_38.1102.pt.trace.json.gz", 3), ("rank12.1795988183230409769.pt.trace.json", 12),
    ("x_rank_2.json", 2), ("profiler_trace_ranks_4_rank_2.json", 2), ("frank12_rank0.json", 0),
    ("inference_rank_1.json.gz", 1), ("base-rank-5.json", 5)])
def test_rank_from_file_name(tmp_path, name, rank):
    doc = _trace()
    if name.endswith(".gz"):
        (tmp_path / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    else:
        _write(tmp_path / name, doc)
    loaded = traceattr.load(tmp_path)
    check_conservation(loaded)
    assert loaded.ranks == [rank]


def test_json_rank_wins_over_name_with_a_note(tmp_path):
    _write(tmp_path / "rank1.json", _trace(0))
    loaded = traceattr.load(tmp_path)
    check_conservation(loaded)
    assert loaded.ranks == [0] and loaded.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_FROM_JSON]
    assert any("says rank 1" in n for n in loaded.notes)


def test_rank_map_and_ambiguous_ranks(tmp_path):
    _write(tmp_path / "host-a_100.1.pt.trace.json", _trace())
    _write(tmp_path / "host-b_200.1.pt.trace.json", _trace(start=1_700_000_000_000_000 + 5))
    with pytest.raises(TraceDiscoveryError) as caught:
        traceattr.load(tmp_path)
    _one_line_error(caught.value, "host-a_100", "rank{r}")
    loaded = traceattr.load(tmp_path, rank_map={"host-a_100.1.pt.trace.json": 4, "host-b_200.1.pt.trace.json": 2})
    check_conservation(loaded)
    assert loaded.ranks == [2, 4]
    assert loaded.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_FROM_MAP] * 2


def test_one_unranked_process_beside_ranked_files_is_rank_0(tmp_path):
    """A folder of several runs (like sample_traces/): one process's unranked windows are rank 0, said in
    a note and in the header's rank sources; two unranked processes stay an error that counts them."""
    _write(tmp_path / "rank1.pt.trace.json", _trace(start=1_700_000_000_000_000))
    _write(tmp_path / "host-a_100.1.pt.trace.json", _trace(start=1_700_000_100_000_000))
    loaded = traceattr.load(tmp_path, cache=False)
    assert loaded.ranks == [0, 1] and any("rank assumed 0" in note for note in loaded.notes)
    from tracesets import header_of
    assert header_of(loaded)["rank_sources"] == {0: S.RANK_ASSUMED, 1: S.RANK_FROM_NAME}
    _write(tmp_path / "host-b_200.1.pt.trace.json", _trace(start=1_700_000_200_000_000))
    with pytest.raises(TraceDiscoveryError) as caught:
        traceattr.load(tmp_path, cache=False)
    _one_line_error(caught.value, "host-a_100", "2 trace files from 2 processes")


def test_windows_of_one_rank_and_overlap(tmp_path):
    late, early = 1_700_000_001_000_000, 1_700_000_000_000_000
    _write(tmp_path / "rank0.a.json", _trace(0, start=late))
    _write(tmp_path / "rank0.b.json", _trace(0, start=early))
    loaded = traceattr.load(tmp_path)
    check_conservation(loaded)
    files = loaded.files.to_pydict()
    assert files[S.WINDOW] == [0, 1] and files[S.PATH][0].endswith("rank0.b.json")
    assert sorted(set(zip(loaded.device.column(S.WINDOW).to_pylist(),
                          loaded.device.column(S.START_NS).to_pylist())))[0] == (0, early * 1000)
    _write(tmp_path / "rank0.c.json", _trace(0, start=early + 5))        # the same capture again
    with pytest.raises(TraceDiscoveryError) as caught:
        traceattr.load(tmp_path)
    _one_line_error(caught.value, "rank0.c.json", "overlap")
    assert "rank0.b.json" in str(caught.value)
    loaded = traceattr.load(tmp_path, skip_bad=True)
    check_conservation(loaded)
    assert loaded.files.num_rows == 2 and any("rank0.c.json" in n for n in loaded.notes)


def test_negative_and_absurd_durations(tmp_path):
    doc = _trace(0)
    doc["traceEvents"] += [_kernel(1_700_000_000_000_100, -3.0), _kernel(1_700_000_000_000_200, 2 * 86_400e6),
                           {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1,
                            "ts": 1_700_000_000_000_000, "dur": -1}]
    loaded = traceattr.load(_write(tmp_path / "rank0.json", doc))
    check_conservation(loaded)
    files = loaded.files.to_pydict()
    assert files[S.NEGATIVE_DURATIONS] == [2] and files[S.ABSURD_DURATIONS] == [1]
    assert loaded.device.num_rows == 3
    durations = [e - s for s, e in zip(loaded.device.column(S.START_NS).to_pylist(),
                                       loaded.device.column(S.END_NS).to_pylist())]
    assert sorted(durations) == [0, 1000, 1000]
    assert any("longer than a day" in n for n in loaded.notes)


def test_host_event_longer_than_a_day_is_dropped_not_a_three_day_window(tmp_path):
    """A forged host annotation (or a gpu_user_annotation marker) of three days would make the file's
    window, and so its idle time, three days long; both are dropped with the device rule and noted."""
    doc = _trace(0)
    end_before = traceattr.load(_write(tmp_path / "before.json", doc)).files.column(S.END_NS)[0].as_py()
    three_days_us = 3 * 86_400e6
    doc["traceEvents"] += [
        {"ph": "X", "cat": "user_annotation", "name": "forged", "pid": 1, "tid": 1, "ts": 1_700_000_000_000_000,
         "dur": three_days_us},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "forged", "pid": 0, "tid": 7, "ts": 1_700_000_000_000_000,
         "dur": three_days_us}]
    loaded = traceattr.load(_write(tmp_path / "rank0.json", doc))
    check_conservation(loaded)
    files = loaded.files.to_pydict()
    assert files[S.END_NS] == [end_before] and files[S.ABSURD_DURATIONS] == [2]
    assert "forged" not in loaded.host.column(S.NAME).to_pylist()
    assert any("dropped 2 events longer than a day" in n for n in loaded.notes)


def test_args_of_an_unexpected_type_read_as_absent_with_a_note(tmp_path):
    """A string or float where an integer id belongs must not refuse the file (device time does not depend
    on it); the arg reads as absent and a note counts it. ts/dur of the wrong type still refuse."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 100, "dur": 50,
         "args": {"correlation": "12", "External id": 3}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 0, "tid": 7, "ts": 200, "dur": 10,
         "args": {"correlation": 13, "bytes": 4.0}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 8, "ts": 120, "dur": 50,
         "args": {"correlation": 14, "Collective name": 5}},
    ]
    for big in (False, True):        # whole-document path and the streaming chunked path
        filler = [{"ph": "i", "name": "x" * 200, "pid": 1, "tid": 1, "ts": 1, "s": "t"}] * (6000 if big else 0)
        path = tmp_path / f"rank0_{big}.json"
        path.write_text(json.dumps({"traceEvents": filler + events}))
        ts = traceattr.load(path, cache=False)
        device = ts.device.to_pydict()
        assert device[S.CORRELATION] == [-1, 13, 14] and device[S.BYTES] == [-1, -1, -1]
        assert device[S.EXTERNAL_ID] == [3, -1, -1] and device[S.COLLECTIVE] == ["", "", ""]
        assert sorted(device[S.START_NS]) == [100_000, 120_000, 200_000]
        note = [n for n in ts.notes if "unexpected type" in n]
        assert len(note) == 1 and note[0].startswith(f"{path}: 3 event args") and "args.correlation" in note[0]
    events[0]["ts"] = "100"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(TraceFormatError, match=r"traceEvents\[0\]\.ts"):
        traceattr.load(path, cache=False)
