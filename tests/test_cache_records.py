"""A cache record is covered by a hash like its parts (traceattr/io/cachedir.py).

Finding: the parts were hashed and `files/*.record` was not: one digit (`"json_rank": 5` -> `9`) moved rank
5's data to rank 9 with exit 0, and a note then blamed the trace ("the file name says rank 5 but
distributedInfo says rank 9"); `"world_size": 8` -> `9` changed both tables silently. Each record now
carries the sha256 of its canonical body (key, parts' digests, facts): a record edited in any field, or with
any byte flipped, is a miss, its trace is decoded again and the entry rewritten.

Each edit below is made the way the finding was, in place and without resealing the record: an edit that
recomputes the hash is tests/test_cache_security.py's (caught there by the schema, bounds and laws).
Every run is the real command, in this process (tests/clirun.py): nothing of the cache is held in memory
between runs, and an answer served from memory would leave the tampered record in place, which fails
assert_rewritten."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.cachedir import Record
from clirun import run_cli
from tracesets import SMALL

SOURCE = re.compile(r"source: traces \((\d+) decoded, (\d+) from cache\)")


def summarize(traces: Path, cache: Path, fmt: str = "csv") -> subprocess.CompletedProcess:
    done = run_cli("summarize", traces, "--by", "rank", "--format", fmt, "--cache-dir", cache, "-q", "--jobs", "1",
                   env={"TRACEATTR_CACHE_DIR": None})
    assert done.returncode == 0, done.stderr
    return done


def forget(cache: Path, *kinds: str) -> None:
    """Remove the entries of `kinds`: a stored answer or table replays before any record of a file is read."""
    for kind in kinds:
        for path in (cache / kind).iterdir():
            path.unlink()


def records(cache: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted((cache / "files").glob("*.record"))}


def record_of_rank(cache: Path, rank: int) -> Path:
    (path,) = [path for path, data in records(cache).items() if json.loads(data)["facts"]["json_rank"] == rank]
    return path


def assert_rewritten(path: Path, original: bytes, tampered: bytes) -> None:
    """Decoded again: the tampered bytes are gone and the record verifies, with the key and facts it had."""
    now = path.read_bytes()
    assert now != tampered, f"{path.name}: still the tampered record (served, never rewritten)"
    fresh, before = Record.decode(now), Record.decode(original)
    assert (fresh.key, fresh.facts) == (before.key, before.facts)


def leaves(value, at=()):
    """(path, value) of every scalar in a record, and of every empty dict or list (a field may be added)."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, (*at, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from leaves(item, (*at, index))
    else:
        yield at, value


def changed(value):
    """Another value of the same kind, one a careless edit could make: a number one up, a text with one
    letter or digit changed (JSON texts stay JSON), an entry added to an empty dict or list."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        for at in [*range(len(value) // 2, len(value)), *range(len(value) // 2)]:
            char = value[at]
            if char.isascii() and char.isalnum():
                other = str((int(char) + 1) % 10) if char.isdigit() else chr((ord(char.lower()) - 96) % 26 + 97)
                other = other.upper() if char.isupper() else other
                return value[:at] + other + value[at + 1:]
        return value + "x"
    if isinstance(value, dict):
        return {"x": 1}
    if isinstance(value, list):
        return ["tampered"]
    return 0


def edited(data: bytes, at: tuple, value) -> bytes:
    record = json.loads(data)
    holder = record
    for step in at[:-1]:
        holder = holder[step]
    holder[at[-1]] = value
    return json.dumps(record).encode()


def swapped_parts(data: bytes) -> bytes:
    record = json.loads(data)
    parts = record["parts"]
    parts["device"], parts["host"] = parts["host"], parts["device"]
    return json.dumps(record).encode()


def flipped(data: bytes, fraction: float) -> bytes:
    at = min(len(data) - 1, int(len(data) * fraction))
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def test_every_field_of_a_record_and_any_flipped_byte_is_a_miss_and_rewritten(tmp_path):
    traces, cache = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=4, **SMALL))
    truth = summarize(traces, cache).stdout
    originals = records(cache)
    assert len(originals) == 4
    shapes = {tuple(at for at, _ in leaves(json.loads(data))) for data in originals.values()}
    assert len(shapes) == 1, "the records of a uniform trace set hold the same fields"
    fields = [at for at, _ in leaves(json.loads(next(iter(originals.values()))))]
    for wanted in (("facts", "json_rank"), ("facts", "world_size"), ("facts", "notes"), ("sha256",)):
        assert wanted in fields
    tampers = [(f"{'.'.join(map(str, at))} changed", lambda data, at=at: edited(data, at, changed(
        _at(json.loads(data), at)))) for at in fields]
    tampers.append(("device and host parts swapped", swapped_parts))
    tampers += [(f"byte {fraction:.0%} flipped", lambda data, f=fraction: flipped(data, f))
                for fraction in (0.03, 0.2, 0.41, 0.5, 0.67, 0.88, 0.99)]
    # four records, so four tampers per run, each on its own record (each record is verified on its own)
    paths = list(originals)
    for start in range(0, len(tampers), len(paths)):
        done = {}
        for path, (what, tamper) in zip(paths, tampers[start:start + len(paths)]):
            done[path] = (what, tamper(originals[path]))
            assert done[path][1] != originals[path], what
            path.write_bytes(done[path][1])
        forget(cache, "answers", "results")
        run = summarize(traces, cache)
        assert run.stdout == truth, [what for what, _ in done.values()]
        for path, (what, tampered) in done.items():
            assert_rewritten(path, originals[path], tampered)


def _at(record, at):
    for step in at:
        record = record[step]
    return record


def test_the_issue_rank_5_edited_to_9_and_world_size_8_to_9(tmp_path):
    """The finding's own edits, on an 8-rank set: the answer is the untampered one, no note blames the
    trace, and the header says the file was decoded again."""
    traces, cache = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=8, **SMALL))
    truth = summarize(traces, cache).stdout
    forget(cache, "answers", "results")
    shown = summarize(traces, cache, "markdown")
    assert SOURCE.search(shown.stdout).groups() == ("0", "8")
    for field, before, after in (("json_rank", 5, 9), ("world_size", 8, 9)):
        for fmt in ("csv", "markdown"):
            path = record_of_rank(cache, 5)
            original = path.read_bytes()
            text = original.decode()
            assert text.count(f'"{field}": {before}') == 1
            tampered = text.replace(f'"{field}": {before}', f'"{field}": {after}').encode()
            path.write_bytes(tampered)
            forget(cache, "answers", "results")
            run = summarize(traces, cache, fmt)
            assert "file name says rank 5" not in run.stderr and "outside distributedInfo" not in run.stderr
            if fmt == "csv":
                assert run.stdout == truth
            else:
                assert SOURCE.search(run.stdout).groups() == ("1", "7")
                assert SOURCE.sub("", run.stdout) == SOURCE.sub("", shown.stdout)
                assert run.stderr == shown.stderr
            assert_rewritten(path, original, tampered)


def test_an_edited_table_record_is_a_miss_too(tmp_path):
    """The hash is the cache folder's, so the stored tables (and answers) are covered as the decoded files
    are: a stored table whose header is edited (the check verdict) is computed again."""
    traces, cache = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    summarize(traces, cache)
    forget(cache, "answers", "results")
    shown = summarize(traces, cache, "markdown")          # the header as computed from the decoded files
    (path,) = (cache / "results").glob("*.record")
    record = json.loads(path.read_bytes())
    header = record["facts"]["header"]
    assert "clock skew" in header["check"]
    header["check"] = "ok"                # text: no law of the table's catches it, the hash does
    tampered = json.dumps(record).encode()
    path.write_bytes(tampered)
    forget(cache, "answers")
    run = summarize(traces, cache, "markdown")
    assert run.stdout == shown.stdout and run.stderr == shown.stderr
    assert path.read_bytes() != tampered
    Record.decode(path.read_bytes())                     # rewritten: it verifies
