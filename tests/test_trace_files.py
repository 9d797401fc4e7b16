"""conftest.trace_files, the one listing of trace files under a folder that the tests use on ../shared/traces:
only Kineto traces (a JSON object with `traceEvents`), never the other JSON files a capture leaves beside
them (CI went red when the shared folder gained a capture's execution_details.json, a JSON list)."""

from __future__ import annotations

import gzip
import json

from conftest import is_kineto_trace, trace_files


def test_trace_files_lists_only_kineto_traces(tmp_path):
    trace = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 7}]}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rank0.pt.trace.json").write_text(json.dumps(trace))
    with gzip.open(tmp_path / "a" / "rank1.json.gz", "wt") as out:
        json.dump(trace, out)
    (tmp_path / "a" / "empty_trace.json").write_text('{"traceEvents": []}')
    # a truncated trace stays listed: the tests that read it must fail on it, not lose it
    (tmp_path / "a" / "truncated.json").write_text(json.dumps(trace)[:40])
    # not traces: a JSON list (execution_details.json), objects without traceEvents, a bare value, other files
    (tmp_path / "a" / "execution_details.json").write_text('[{"file": "rank0.json.gz", "batch_size": 32}]')
    (tmp_path / "manifest.json").write_text('{"ranks": 2, "events": [], "note": "traceEvents"}')
    with gzip.open(tmp_path / "a" / "meta.json.gz", "wt") as out:
        json.dump({"deviceProperties": []}, out)
    (tmp_path / "a" / "number.json").write_text("42")
    (tmp_path / "a" / "notes.txt").write_text('{"traceEvents": []}')
    (tmp_path / "a" / "dir.json").mkdir()

    listed = [p.relative_to(tmp_path).as_posix() for p in trace_files(tmp_path)]
    assert listed == ["a/empty_trace.json", "a/rank0.pt.trace.json", "a/rank1.json.gz", "a/truncated.json"]
    assert trace_files(tmp_path / "a" / "rank1.json.gz") == [tmp_path / "a" / "rank1.json.gz"]


def test_shared_listing_agrees_with_the_stdlib_json_reading(shared_traces):
    """Each .json / .json.gz file under the shared traces is listed exactly when the stdlib json reading of it
    is an object with traceEvents (all of them decode)."""
    listed = set(trace_files(shared_traces))
    assert listed
    for path in sorted(shared_traces.rglob("*")):
        if not (path.is_file() and path.name.endswith((".json", ".json.gz"))):
            continue
        with (gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)) as f:
            data = json.load(f)
        expected = isinstance(data, dict) and "traceEvents" in data
        assert (path in listed) == expected == is_kineto_trace(path), path
