"""The cache trusts nothing it reads (issue 11): forged names never reach outside the cache, forged or
foreign entries are rebuilt (never served, never a traceback), stored answers with control characters are
never printed, and a writer killed mid-write leaves no half entry and no lasting temporary files.

Each forgery below is written the way an attacker with write access to a shared cache would: with digests
that match the forged bytes and the record resealed, so what catches it is the schema, the bounds and the
laws, not the hash."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import traceattr
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.cache import FileCache
from traceattr.io.cachedir import STALE_SECONDS, CacheDir, Record
from tracesets import SMALL, assert_same


@pytest.fixture
def run(tmp_path):
    """A one-rank trace folder, its cache folder, and the reference load (no cache)."""
    traces, cache = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    return traces, cache, traceattr.load(traces, jobs=1, cache=False)


def load(traces, cache):
    file_cache = FileCache(cache)
    return traceattr.load(traces, jobs=1, cache=file_cache), file_cache


def only_record(cache: Path, kind: str) -> Path:
    (record,) = (cache / kind).glob("*.record")
    return record


def forge(cache: Path, kind: str, mutate) -> None:
    """Rewrite the one entry of `kind` as `mutate(record, parts) -> (record, parts)` makes it, with digests
    and part names that match the new bytes, and the record resealed with the hash of its new body (the
    hashes are not keyed: a writer can recompute them; tests/test_cache_records.py edits without)."""
    record_path = only_record(cache, kind)
    name = record_path.name.split(".")[0]
    record = json.loads(record_path.read_text())
    parts = {}
    for part, digest in record["parts"].items():
        path = cache / kind / f"{name}.{digest[:32]}.{part}"
        parts[part] = path.read_bytes()
        path.unlink()
    record, parts = mutate(record, parts)
    record["parts"] = {}
    for part, blob in parts.items():
        digest = hashlib.sha256(blob).hexdigest()
        (cache / kind / f"{name}.{digest[:32]}.{part}").write_bytes(blob)
        record["parts"][part] = digest
    record_path.write_bytes(Record(record["key"], record["parts"], record["facts"]).encode())


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_forged_part_names_never_delete_or_read_outside_the_cache(run, tmp_path):
    """Finding: an entry's `token` was joined into a path: `d/../../../victim/precious` made summarize
    delete precious.{device,host,markers}.parquet outside the cache (reproduced on the old code)."""
    traces, cache, reference = run
    load(traces, cache)
    victim = tmp_path / "victim"
    victim.mkdir()
    precious = {t: parquet_bytes(reference.device.slice(0, 1)) for t in ("device", "host", "markers")}
    for table, blob in precious.items():
        (victim / f"precious.{table}.parquet").write_bytes(blob)
    record_path = only_record(cache, "files")
    (record_path.parent / f"{record_path.name.split('.')[0]}.d").mkdir()   # makes `d/..` resolve
    record = json.loads(record_path.read_text())
    for forged in ({**record, "token": "d/../../../victim/precious"},
                   {**record, "parts": {t: "d/../../../victim/precious" for t in precious}},
                   {**record, "parts": {"../../victim/precious": record["parts"]["device"]}}):
        record_path.write_text(json.dumps(forged))
        for _ in range(2):                                       # read (a miss), rewrite, read again
            loaded, _cache = load(traces, cache)
            assert_same(reference, loaded)
        assert {p.name: p.read_bytes() for p in victim.iterdir()} == {
            f"precious.{t}.parquet": blob for t, blob in precious.items()}


def test_symlinks_in_the_cache_are_never_followed_out_of_it(run, tmp_path):
    traces, cache, reference = run
    load(traces, cache)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    record_path = only_record(cache, "files")
    record_path.unlink()
    record_path.symlink_to(outside)
    loaded, file_cache = load(traces, cache)
    assert file_cache.misses == 1
    assert_same(reference, loaded)
    assert outside.read_text() == "keep me" and record_path.is_symlink()


def _set_fact(name, value):
    def mutate(record, parts):
        record["facts"][name] = value
        return record, parts
    return mutate


def _drop_name_column(record, parts):
    device = pq.read_table(pa.BufferReader(parts["device"]))
    return record, {**parts, "device": parquet_bytes(device.drop_columns(["name"]))}


def _end_before_start(record, parts):
    device = pq.read_table(pa.BufferReader(parts["device"]))
    end = device.schema.get_field_index("end_ns")
    earlier = pc.subtract(device["start_ns"], 1)
    return record, {**parts, "device": parquet_bytes(device.set_column(end, "end_ns", earlier))}


def _double_busy(record, parts):
    device = pq.read_table(pa.BufferReader(parts["device"]))
    end = device.schema.get_field_index("end_ns")
    longer = pc.add(device["end_ns"], pc.subtract(device["end_ns"], device["start_ns"]))
    return record, {**parts, "device": parquet_bytes(device.set_column(end, "end_ns", longer))}


def _name_bomb(record, parts):
    """Every name one 2 MiB dictionary entry: a few kB on disk, hundreds of MB once read (a fuzz run's store
    partition took 4.3 GB)."""
    device = pq.read_table(pa.BufferReader(parts["device"]))
    names = pa.DictionaryArray.from_arrays(pa.array([0] * device.num_rows, pa.int32()), pa.array(["A" * (2 << 20)]))
    device = device.set_column(device.schema.get_field_index("name"), "name", names)
    sink = pa.BufferOutputStream()
    pq.write_table(device, sink, compression="zstd", store_schema=False)
    return record, {**parts, "device": sink.getvalue().to_pybytes()}


DEEP = '{"a":' * 5000 + "1" + "}" * 5000      # json.loads: RecursionError in every reader of the text


@pytest.mark.parametrize("mutate", [
    _set_fact("json_rank", 1e30), _set_fact("json_rank", 2**40), _set_fact("world_size", -5),
    _set_fact("events", "x"), _set_fact("base_time_ns", 2**70), _set_fact("phases", {"X": -3}),
    _set_fact("notes", "not a list"), _set_fact("surprise", 1), _set_fact("era", "Z"), _drop_name_column,
    _end_before_start, _double_busy, _set_fact("metadata", DEEP), _set_fact("device_properties", DEEP),
    _set_fact("metadata", "[1]"), _name_bomb,
], ids=["json_rank 1e30", "json_rank 2**40", "world_size -5", "events 'x'", "base_time 2**70",
        "negative phase count", "notes text", "unknown field", "unknown era", "no name column",
        "end before start", "tables beyond the window", "metadata nested deeply", "device properties nested deeply",
        "metadata not an object", "names inflating past the limit"])
def test_forged_decoded_entries_are_rebuilt_never_served(run, mutate):
    """Findings: parseable-but-wrong entries (json_rank 1e30, events "x", a missing name column) raised
    tracebacks; here each is a miss and the trace is decoded again."""
    traces, cache, reference = run
    load(traces, cache)
    forge(cache, "files", mutate)
    loaded, file_cache = load(traces, cache)
    assert (file_cache.hits, file_cache.misses) == (0, 1)
    assert_same(reference, loaded)


def _csv(traces, cache, *extra):
    """`traceattr summarize TRACES --format csv` in this process (click's runner: the real command code)."""
    from click.testing import CliRunner

    from traceattr.cli import main

    done = CliRunner().invoke(main, ["summarize", str(traces), "--format", "csv", "--cache-dir", str(cache),
                                     "-q", "--jobs", "1", *extra])
    assert done.exit_code == 0 and done.exception is None, done.output
    return done.stdout


def _forge_result(mutate_table=None, header=None):
    def mutate(record, parts):
        table = pq.read_table(pa.BufferReader(parts["table"]))
        if mutate_table:
            table = mutate_table(table)
        if header:
            record["facts"]["header"].update(header)
        return record, {"table": parquet_bytes(table)}
    return mutate


def _self_times_2(table):
    return table.set_column(table.schema.get_field_index("self_ns"), "self_ns", pc.multiply(table["self_ns"], 2))


@pytest.mark.parametrize("mutate", [
    _forge_result(_self_times_2), _forge_result(_self_times_2, {"busy_ns": "x"}),
    _forge_result(lambda t: t.drop_columns(["name"])),
    _forge_result(lambda t: t.set_column(t.schema.get_field_index("count"), "count", pc.cast(t["count"], pa.float64()))),
], ids=["self x2", "busy_ns text", "no name column", "float counts"])
def test_a_crafted_result_table_is_never_served(run, mutate):
    """Finding: a crafted result parquet (self x2) was served as the answer."""
    traces, cache, _ = run
    truth = _csv(traces, cache, "--no-cache")
    assert _csv(traces, cache) == truth
    for kind in ("answers", "results"):      # the answer replays first; forge below it
        if kind == "answers":
            for path in (cache / kind).iterdir():
                path.unlink()
        else:
            forge(cache, kind, mutate)
    assert _csv(traces, cache) == truth
    # tampering without fixing the digest: the content hash catches it too
    part = next(p for p in (cache / "results").iterdir() if p.name.endswith(".table"))
    part.write_bytes(part.read_bytes()[:-10] + b"0" * 10)
    for path in (cache / "answers").iterdir():
        path.unlink()
    assert _csv(traces, cache) == truth


@pytest.mark.parametrize("forged", [b"\x1b]0;pwned\x07\x1b[2J", "evil\u202egnp.exe\u2066".encode()])
def test_a_stored_answer_with_control_characters_is_never_printed(run, forged):
    traces, cache, _ = run
    truth = _csv(traces, cache, "--no-cache")
    _csv(traces, cache)
    forge(cache, "answers", lambda record, parts: (record, {"stdout": forged + parts["stdout"]}))
    assert _csv(traces, cache) == truth         # bidi controls too: the renderers escape them


WRITER = """
import sys, time
from traceattr.io.cachedir import CacheDir

def half_then_hang(target):
    with open(target, "wb") as out:
        out.write(b"half a part")
        out.flush()
        print("writing", flush=True)
        time.sleep(60)

CacheDir(sys.argv[1]).write("results", "ab" * 16, {"key": "ab" * 16}, {}, {"table": half_then_hang})
"""


def test_a_writer_killed_mid_write_leaves_no_half_entry_and_its_files_are_swept(tmp_path):
    """Finding: SIGKILL left .tmp files that were never removed."""
    cache = tmp_path / "cache"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(cache)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    leftovers = list((cache / "results").glob(".*.tmp"))
    assert len(leftovers) == 1
    folder = CacheDir(cache)
    with pytest.raises(Exception):
        folder.read("results", "ab" * 16, {"key": "ab" * 16}, ("table",))
    assert folder.usage().stale_temporary == 0                  # young: maybe a live writer's
    old = time.time() - STALE_SECONDS - 60
    os.utime(leftovers[0], (old, old))
    assert folder.usage().stale_temporary == 1
    folder.write("results", "cd" * 16, {"key": "cd" * 16}, {}, {"table": lambda t: Path(t).write_bytes(b"x")})
    assert not leftovers[0].exists()
    _, parts = folder.read("results", "cd" * 16, {"key": "cd" * 16}, ("table",))
    assert parts == {"table": b"x"}


def test_a_kind_folder_symlinked_elsewhere_is_never_written_evicted_or_cleared(run, tmp_path):
    traces, cache, reference = run
    load(traces, cache)
    victim = tmp_path / "victim"
    victim.mkdir()
    planted = {victim / ("ab" * 16 + ".record"): "1", victim / ".old.tmp": "2", victim / ("cd" * 16): "3"}
    for path, text in planted.items():
        path.write_text(text)
        os.utime(path, (1, 1))                                    # old enough to be swept
    for path in (cache / "files").iterdir():
        path.unlink()
    (cache / "files").rmdir()
    (cache / "files").symlink_to(victim)
    for _ in range(2):
        loaded, file_cache = load(traces, cache)
        assert file_cache.misses == 1 and file_cache.write_errors == 1
        assert_same(reference, loaded)
    folder = CacheDir(cache, max_bytes=0)
    folder.evict()
    folder.clear()
    assert {path: path.read_text() for path in victim.iterdir()} == planted


def test_an_entry_with_nulls_or_dictionary_columns_is_a_miss(tmp_path):
    """The decoder writes plain strings and no nulls: an entry holding either (forged, or from other code)
    is rebuilt from the trace, never served (a null name reached the map step's rule lookup as a NaN
    index and failed the file with an IndexError)."""
    import dataclasses

    import pyarrow as pa

    from traceattr import schema as S
    from traceattr.io.cache import FileCache
    from traceattr.io.decode import decode_file

    path = next(iter(sorted((Path(__file__).parents[1] / "sample_traces" / "synthetic_2rank").glob("*.json*"))))
    decoded = decode_file(str(path))
    cache = FileCache(str(tmp_path / "cache"))
    at = decoded.device.schema.get_field_index(S.NAME)
    names = decoded.device.column(S.NAME).to_pylist()
    coded = decoded.device.column(S.NAME).dictionary_encode()
    assert cache.get(str(path)) is None               # a miss: put() stores what was decoded after one
    for device in (decoded.device.set_column(at, S.NAME, pa.array([None] + names[1:], pa.string())),
                   decoded.device.set_column(at, pa.field(S.NAME, coded.type), coded)):
        cache.put(str(path), dataclasses.replace(decoded, device=device))
        assert cache.get(str(path)) is None
    cache.put(str(path), decoded)
    assert cache.get(str(path)) is not None


def test_a_trace_replaced_while_it_was_decoded_is_not_stored_under_the_new_files_key(tmp_path):
    """Found by a fuzz run: `mv new.json rank0.json` while traceattr read rank0.json stored the old file's
    tables under the new file's key (put() took the key after the decode), and every later run showed the
    old numbers (busy 472 ms against a true 4.1 ms). The interleaving, step by step: a miss, the decode,
    the file replaced, then put()."""
    import shutil

    from traceattr.io.decode import decode_file

    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic_2rank"
    first, second = sorted(sample.glob("*.json*"))[:2]
    path = tmp_path / "rank0.json"
    shutil.copy(first, path)
    cache = FileCache(str(tmp_path / "cache"))
    assert cache.get(str(path)) is None
    old = decode_file(str(path))
    shutil.copy(second, tmp_path / "new.json")
    os.replace(tmp_path / "new.json", path)              # replaced between the read and the store
    cache.put(str(path), old)
    assert cache.get(str(path)) is None and cache.write_errors == 1
    fresh = decode_file(str(path))
    cache.put(str(path), fresh)
    served = cache.get(str(path))
    assert served is not None and served.device.equals(fresh.device) and not served.device.equals(old.device)
