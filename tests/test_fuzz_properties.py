"""Property-based fuzzing of every reader of untrusted files, on a small fixed budget (derandomized, so CI is
repeatable; scripts/fuzz.py is the long run, docs/robustness.md its results).

Properties: whatever the bytes, a reader either returns or raises a TraceError (one clean line for the
user), never another exception or a numpy warning; what loads obeys the conservation law with every time
inside int64 bounds; and the streaming splitter gives exactly the whole-document decode's tables, or the
same refusal.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceattr import schema as S
from traceattr.errors import TraceError
from traceattr.io.decode import decode_file
from traceattr.io.limits import TIME_LIMIT_NS
from traceattr.io.load import assemble

BUDGET = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, 1, -1, 9.3e15, -9.3e15, 1e300, 2.2e16, 1.7e15, 1700000000000000.5]))
JSON_SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=8))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                           max_leaves=8)
NAMES = st.one_of(st.sampled_from(["k", "nccl:all_reduce", "gemm<[m]|x>", "\x1b[2J", "a\nb"]), st.text(max_size=6))
EVENTS = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "M", "s"]),
     "cat": st.sampled_from(["kernel", "gpu_memcpy", "cpu_op", "cuda_runtime", "gpu_user_annotation", "other"]),
     "name": NAMES, "pid": st.one_of(st.sampled_from([0, 1]), st.integers(-(2**65), 2**65), st.text(max_size=4)),
     "tid": st.one_of(st.sampled_from([7, 8]), st.integers(-(2**65), 2**65)),
     "ts": st.one_of(st.floats(0, 5000).map(lambda us: 1.7e15 + round(us, 3)), NUMBERS),
     "dur": st.one_of(st.floats(0, 100).map(lambda us: round(us, 3)), NUMBERS)},
    optional={"args": st.one_of(JSON_VALUES, st.fixed_dictionaries(
        {}, optional={"correlation": NUMBERS, "External id": NUMBERS, "Collective name": JSON_SCALARS}))})
HEADERS = st.fixed_dictionaries({}, optional={
    "distributedInfo": st.one_of(JSON_VALUES, st.fixed_dictionaries({"rank": NUMBERS, "world_size": NUMBERS})),
    "baseTimeNanoseconds": st.one_of(NUMBERS, JSON_SCALARS), "displayTimeUnit": JSON_SCALARS})


def _quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # a cast warning fails the property
        return function(*args, **kwargs)


def _decode(path: Path, block_bytes: int):
    try:
        decoded = _quiet(decode_file, str(path), block_bytes=block_bytes)
    except TraceError as exc:
        return None, type(exc).__name__
    return decoded, ""


def _check_loaded(decoded) -> None:
    from traceattr.attribution.sweep import sweep

    traceset = _quiet(assemble, [decoded])
    for table in (traceset.device, traceset.host, traceset.markers):
        for column in (S.START_NS, S.END_NS):
            values = table.column(column).to_pylist()
            assert all(-TIME_LIMIT_NS <= v <= TIME_LIMIT_NS for v in values)
    _quiet(sweep, traceset).self_check()


@BUDGET
@given(events=st.lists(EVENTS, max_size=25), header=HEADERS, after=st.booleans(), block=st.sampled_from([64, 300]))
def test_streamed_decode_equals_whole_decode_and_obeys_the_laws(events, header, after, block):
    doc = {"traceEvents": events, **header} if after else {**header, "traceEvents": events}
    text = json.dumps(doc)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        path.write_text(text)
        whole, whole_error = _decode(path, len(text) + 10)
        streamed, streamed_error = _decode(path, block)
    assert (whole is None) == (streamed is None), (whole_error, streamed_error)
    if whole is not None:
        for name in ("device", "host", "markers"):
            assert getattr(whole, name).equals(getattr(streamed, name)), name
        assert whole.notes == streamed.notes
        _check_loaded(whole)


@BUDGET
@given(cut=st.integers(0, 10_000), insert=st.binary(max_size=12), block=st.sampled_from([64, 1 << 20]))
def test_byte_mutations_of_a_valid_trace_never_escape_as_other_exceptions(cut, insert, block):
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1.7e15 + 10 * i, "dur": 5}
              for i in range(60)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "distributedInfo": {"rank": 0}}).encode()
    at = cut % (len(text) + 1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0.json"
        path.write_bytes(text[:at] + insert + text[at + len(insert):])
        decoded, _ = _decode(path, block)
    if decoded is not None:
        _check_loaded(decoded)


@BUDGET
@given(names=st.lists(st.from_regex(r"[a-z_]{0,4}(rank[-_]?[0-9]{1,25})?[a-z]{0,3}\.json", fullmatch=True),
                      min_size=1, max_size=4, unique=True),
       json_ranks=st.lists(st.integers(-2, 2**40), min_size=4, max_size=4))
def test_discovery_gives_ranks_in_bounds_or_a_clean_error(names, json_ranks):
    from traceattr.io.discover import find_trace_files, resolve_ranks
    from traceattr.io.limits import MAX_RANK

    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            (Path(folder) / name).write_text("{}")
        try:
            paths = [str(p) for p in find_trace_files(folder, [])]
            choices, _ = resolve_ranks(paths, [r if r <= MAX_RANK else -1 for r in json_ranks[:len(paths)]])
        except TraceError:
            return
    assert all(0 <= choice.rank <= MAX_RANK for choice in choices)


@pytest.fixture(scope="module")
def store_folder(tmp_path_factory) -> Path:
    import traceattr
    from traceattr.io.store import write_store

    folder = tmp_path_factory.mktemp("store")
    trace = folder / "rank0.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                                                  "ts": 1.7e15, "dur": 5}]}))
    return write_store(traceattr.load(trace, cache=False), folder / "store")


@BUDGET
@given(metadata=JSON_VALUES, partitions=JSON_VALUES, keep_format=st.booleans())
def test_store_metadata_of_any_shape_is_read_or_refused_cleanly(store_folder, metadata, partitions, keep_format):
    from traceattr.io.store import MARKER, read_store, sealed_metadata

    marker = store_folder / MARKER
    original = marker.read_text()
    damaged = json.loads(original) if keep_format else metadata
    if keep_format:
        damaged["tables"]["device"]["partitions"] = partitions
    try:
        # sealed when it is an object, as a writer who knows the format would: the shape checks are under test
        marker.write_bytes(sealed_metadata(damaged) if isinstance(damaged, dict) and damaged else
                           json.dumps(damaged).encode())
        try:
            read_store(store_folder)
        except TraceError:
            pass
    finally:
        marker.write_text(original)


@BUDGET
@given(manifest=JSON_VALUES, files=st.dictionaries(st.sampled_from(["trace", "kernels"]),
                                                     st.one_of(st.text(max_size=12), st.sampled_from(
                                                         ["/etc/passwd", "../../x", "window0.kernels.parquet"])),
                                                     max_size=2))
def test_capture_manifests_of_any_shape_are_read_or_refused_cleanly(manifest, files):
    from traceattr.analysis.capture_summary import capture_summary

    with tempfile.TemporaryDirectory() as folder:
        rank = Path(folder) / "rank0"
        rank.mkdir()
        shaped = {"format": "traceattr.capture/1", "rank": 0, "windows": [{"window": 0, "files": files}]}
        for document in (manifest, shaped):
            if isinstance(document, dict):
                document = {**document, "format": "traceattr.capture/1"}
            (rank / "manifest.json").write_text(json.dumps(document))
            try:
                capture_summary(folder, "kernel")
            except TraceError:
                pass
