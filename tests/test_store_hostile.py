"""A damaged or forged parquet store (`traceattr convert` output): the real CLI refuses it with one line that
names the store or its parquet file at fault, exit code 2, no traceback (io/store.py checks every table as it
enters). The sample traces are converted once; each case edits one thing of a copy with pyarrow, as a fuzzer
or a forger would, rewrites the store's hashes as a forger can (reseal: else every case is refused as
"changed since convert", tests/test_store_bitflips.py), and runs the command: in this process (tests/clirun.py:
a process's exit code and output, an escaped traceback included), and `check` in a real process, which
also shows what it prints as it exits."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clirun import run_cli
from conftest import SAMPLE_TRACES
from traceattr import schema as S
from traceattr.io.limits import TIME_LIMIT_NS
from traceattr.io.store import FILES_NAME, MARKER, TABLE_SCHEMAS, file_sha256, sealed_metadata

CLI = [sys.executable, "-m", "traceattr.cli"]
BOMB_ROWS = 500_000            # identical rows: ~40 KB of parquet (about 13 rows a byte), 75 MB once read


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("converted") / "store"
    done = subprocess.run([*CLI, "convert", str(SAMPLE_TRACES / "synthetic_2rank"), "-o", str(store),
                           "--no-cache", "-q", "-j", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return store


def part(store: Path, table: str = "device", rank: int = 0) -> Path:
    return store / table / f"{S.RANK}={rank}" / f"{S.WINDOW}=0" / "part-0.parquet"


def edit(path: Path, column: str, change) -> Path:
    """Column `column` of the parquet file replaced by change(values, table); returns the file's path."""
    table = pq.read_table(path)
    index = table.schema.get_field_index(column)
    field = table.schema.field(index)
    pq.write_table(table.set_column(index, field, pa.array(change(table[column].to_pylist(), table), field.type)),
                   path)
    return path


def edit_metadata(store: Path, change) -> Path:
    metadata = json.loads((store / MARKER).read_text())
    change(metadata)
    (store / MARKER).write_text(json.dumps(metadata))
    return store


def reseal(store: Path) -> None:
    """The store's hashes rewritten to match its files, as a forger can: the content checks must hold alone."""
    metadata = json.loads((store / MARKER).read_text())
    for table in TABLE_SCHEMAS:
        partitions = metadata["tables"][table]["partitions"]
        for entry in partitions if isinstance(partitions, list) else []:
            path = store / table / f"{S.RANK}={entry[0]}" / f"{S.WINDOW}={entry[1]}" / "part-0.parquet"
            entry[3] = file_sha256(path)
    metadata["files_sha256"] = file_sha256(store / FILES_NAME)
    (store / MARKER).write_bytes(sealed_metadata(metadata))


def files(store: Path) -> Path:
    return store / FILES_NAME


def row_bomb(store: Path, forge_events: bool) -> Path:
    """A small partition of BOMB_ROWS identical rows, the metadata's row count (and, with `forge_events`,
    the files' event counts) matching it."""
    path = part(store)
    schema = pq.read_schema(path)
    zeros = pa.array(np.zeros(BOMB_ROWS, np.int64))
    columns = {f.name: zeros if pa.types.is_integer(f.type) else pa.array([S.COMPUTE]).take(zeros) for f in schema}
    pq.write_table(pa.table(columns).cast(schema), path, compression="zstd")
    edit_metadata(store, lambda m: m["tables"]["device"]["partitions"][0].__setitem__(2, BOMB_ROWS))
    if forge_events:
        edit(files(store), S.EVENTS, lambda v, t: [10**9] * len(v))
    return path


def swap_window(store: Path) -> Path:
    """The first file row's start_ns and end_ns swapped: a window that starts after it ends."""
    table = pq.read_table(files(store))
    start, end = table[S.START_NS].to_pylist(), table[S.END_NS].to_pylist()
    start[0], end[0] = end[0], start[0]
    table = table.set_column(table.schema.get_field_index(S.START_NS), S.START_NS, pa.array(start, pa.int64()))
    pq.write_table(table.set_column(table.schema.get_field_index(S.END_NS), S.END_NS, pa.array(end, pa.int64())),
                   files(store))
    return files(store)


def move_late(store: Path) -> Path:
    """The first device row moved 10**15 ns after its file's window and made 10**12 ns long."""
    edit(part(store), S.START_NS, lambda v, t: [v[0] + 10**15] + v[1:])
    return edit(part(store), S.END_NS, lambda v, t: [v[0] + 10**15 + 10**12] + v[1:])


def no_file_rows(store: Path) -> Path:
    pq.write_table(pq.read_table(files(store)).slice(0, 0), files(store))
    return part(store)                  # the first partition without its file row


def list_twice(store: Path) -> Path:
    return edit_metadata(store, lambda m: m["tables"]["host"]["partitions"].append(
        list(m["tables"]["host"]["partitions"][0])))


def name_bomb(store: Path, dictionary: bool) -> Path:
    """Every device row's name one 2 MiB text, zstd-packed into a few kB: stored once as a dictionary entry
    (the footer's sizes stay small) or plainly in every row."""
    path = part(store)
    table = pq.read_table(path)
    huge = "A" * (2 << 20)
    names = (pa.DictionaryArray.from_arrays(pa.array([0] * table.num_rows, pa.int32()), pa.array([huge]))
             if dictionary else pa.array([huge] * table.num_rows))
    table = table.set_column(table.schema.get_field_index(S.NAME), S.NAME, names)
    pq.write_table(table, path, compression="zstd", compression_level=19, store_schema=False)
    return path


def deep_json(store: Path, column: str) -> Path:
    return edit(files(store), column, lambda v, t: ['{"a":' * 5000 + "1" + "}" * 5000] * len(v))


# case -> (damage(store) -> the path the message must name, a word of the problem it must say)
def forge_capture_problems(store: Path) -> Path:
    marker = store / MARKER
    metadata = json.loads(marker.read_text())
    metadata["capture_problems"] = {"rank 0": "missing"}
    marker.write_text(json.dumps(metadata))
    return store


CASES = {
    "capture_problems_not_a_list": (forge_capture_problems, "capture_problems is not a list"),
    "null_name": (lambda s: edit(part(s), S.NAME, lambda v, t: [None] + v[1:]), "device.name holds 1 null"),
    "end_before_start": (lambda s: edit(part(s), S.END_NS, lambda v, t: [t[S.START_NS][0].as_py() - 1000] + v[1:]),
                         "ends before it starts"),
    "bad_category": (lambda s: edit(part(s), S.CATEGORY, lambda v, t: ["bogus"] + v[1:]), "'bogus'"),
    "files_rank_mismatch": (lambda s: edit(files(s), S.RANK, lambda v, t: [0] * len(v)), "2 file rows for rank 0"),
    "files_rank_negative": (lambda s: edit(files(s), S.RANK, lambda v, t: [-1] + v[1:]), "rank -1, out of range"),
    "files_empty": (no_file_rows, "no row in files.parquet"),
    "files_window_inverted": (swap_window, "starts after it ends"),
    # NO_TIME (no timed event) is start and end together, and lies beyond the time limits on its own
    "files_half_timed": (lambda s: edit(files(s), S.START_NS, lambda v, t: [S.NO_TIME] + v[1:]),
                         "has one of start_ns and end_ns but not the other"),
    "files_start_beyond_limits": (lambda s: edit(files(s), S.START_NS, lambda v, t: [-TIME_LIMIT_NS - 1] + v[1:]),
                                  "files.start_ns beyond"),
    "files_untimed_with_rows": (lambda s: (edit(files(s), S.START_NS, lambda v, t: [S.NO_TIME] + v[1:]),
                                           edit(files(s), S.END_NS, lambda v, t: [S.NO_TIME] + v[1:]), part(s))[2],
                                "outside its file's window"),
    "files_world_huge": (lambda s: edit(files(s), S.WORLD_SIZE, lambda v, t: [2**31 - 1] * len(v)),
                         "world_size 2147483647, out of range"),
    "device_outside_window": (move_late, "outside its file's window"),
    "device_group_size_zero": (lambda s: edit(part(s), S.GROUP_SIZE, lambda v, t: [0] + v[1:]),
                               "group_size 0, out of range"),
    "device_graph_node_id_negative": (lambda s: edit(part(s), S.GRAPH_NODE_ID, lambda v, t: [-5] + v[1:]),
                                      "graph_node_id -5, below -1"),
    "row_bomb": (lambda s: (row_bomb(s, forge_events=False), files(s))[1], "events read from its file"),
    "row_bomb_events_forged": (lambda s: row_bomb(s, forge_events=True), "more rows than bytes"),
    "host_outside_window": (lambda s: edit(part(s, "host", 1), S.START_NS, lambda v, t: [v[0] - 10**9] + v[1:]),
                            "outside its file's window"),
    "markers_end_before_start": (lambda s: edit(part(s, "markers"), S.END_NS,
                                                lambda v, t: [t[S.START_NS][0].as_py() - 5] + v[1:]),
                                 "ends before it starts"),
    "partition_listed_twice": (list_twice, "listed twice"),
    # a shape text as the decoder never writes one (io/shapes.py: over 64 KiB of raw JSON is absent)
    "host_input_dims_huge": (lambda s: edit(part(s, "host", 1), S.INPUT_DIMS,
                                            lambda v, t: ["[" + "1, " * 70_000 + "1]"] + v[1:]),
                             "host.input_dims holds a text of 210,003 characters"),
    # a fuzz run: 6 kB of partition took 4.3 GB to read; nested metadata was a RecursionError in every command
    "name_bomb_dictionary": (lambda s: name_bomb(s, dictionary=True), "beyond the inflate limit"),
    "name_bomb_plain": (lambda s: name_bomb(s, dictionary=False), "beyond the inflate limit"),
    "files_metadata_deep": (lambda s: deep_json(s, S.METADATA), "metadata that is not readable JSON"),
    "files_device_properties_deep": (lambda s: deep_json(s, S.DEVICE_PROPERTIES),
                                     "device_properties that is not readable JSON"),
}


def damaged_run(converted: Path, tmp_path: Path, case: str, *command: str, process: bool = False):
    """(the finished command on a damaged copy of the store, the path its message must name, a word)."""
    store = tmp_path / "store"
    shutil.copytree(converted, store)
    damage, word = CASES[case]
    named = damage(store)
    reseal(store)
    if not process:
        began = time.monotonic()
        done = run_cli(*command, store, "--no-cache", "-q")
        assert time.monotonic() - began < 60, f"{case}: `traceattr {' '.join(command)}` took over 60 s"
        return done, named, word
    try:
        done = subprocess.run([*CLI, *command, str(store), "--no-cache", "-q"], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: `traceattr {' '.join(command)}` did not finish in 60 s")
    return done, named, word


def assert_refused(done: subprocess.CompletedProcess, named: Path, word: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and lines[0].startswith("traceattr: error: "), done.stderr[-2000:]
    assert f"{named}: " in lines[0] and word in lines[0], lines[0]
    assert done.stdout == ""


@pytest.mark.parametrize("case", sorted(CASES))
def test_summarize_refuses_a_damaged_store_in_one_line(converted, tmp_path, case):
    assert_refused(*damaged_run(converted, tmp_path, case, "summarize", "--by", "rank"))


@pytest.mark.parametrize("case", ["files_world_huge"])
def test_check_refuses_a_damaged_store_in_one_line(converted, tmp_path, case):
    assert_refused(*damaged_run(converted, tmp_path, case, "check", process=True))


def test_the_undamaged_store_is_read(converted, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(converted, store)
    done = run_cli("summarize", store, "--by", "rank", "--no-cache", "-q")
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_store_of_a_capture_keeps_its_problems(tmp_path):
    """The manifests do not travel into a store: check said ok (exit 0) on the store of a capture that lost
    window 1, where it warned on the capture itself."""
    def run(*args):
        return run_cli(*args, "--no-cache", "-q")

    capture = SAMPLE_TRACES / "capture_cuda_2stream"
    first, second = tmp_path / "store", tmp_path / "again"
    assert run("convert", capture, "-o", first).returncode == 0
    assert run("convert", first, "-o", second).returncode == 0          # a store of a store keeps them too
    for path in (capture, first, second):
        checked = run("check", path, "--format", "csv")
        assert checked.returncode == 1 and "capture_incomplete,1,0,warn,missing: " in checked.stdout, path
        summary = run("summarize", path, "--format", "csv")
        assert "traceattr: check: warn: capture incomplete (1)" in summary.stderr, path
        assert "traceattr: note: capture: missing: " in summary.stderr, path


def test_store_metadata_past_its_limit_is_refused_before_it_is_read(converted, tmp_path, monkeypatch):
    """The store's metadata and graph catalog are JSON read whole: one past MAX_STORE_JSON_BYTES (a forged
    or runaway file) is refused in one line, never read into memory whole."""
    from traceattr.io import limits

    store = tmp_path / "store"
    shutil.copytree(converted, store)
    monkeypatch.setattr(limits, "MAX_STORE_JSON_BYTES", (store / MARKER).stat().st_size - 1)
    assert_refused(run_cli("summarize", store, "--no-cache", "-q"), store / MARKER, "more than")
    monkeypatch.setattr(limits, "MAX_STORE_JSON_BYTES", (store / MARKER).stat().st_size)
    assert run_cli("summarize", store, "--no-cache", "-q").returncode == 0


def test_a_capture_manifest_past_its_limit_is_refused_in_one_line(tmp_path):
    """A capture's manifest.json past MAX_MANIFEST_BYTES (64 MiB) is named, with exit 2; it was read whole."""
    from traceattr.io.limits import MAX_MANIFEST_BYTES

    capture = tmp_path / "capture"
    shutil.copytree(SAMPLE_TRACES / "capture_cpu_2rank", capture)
    manifest = capture / "rank0" / "manifest.json"
    text = manifest.read_text().rstrip()
    assert text.endswith("}")
    with open(manifest, "w") as out:
        out.write(text[:-1])
        out.write(" " * (MAX_MANIFEST_BYTES + 1))
        out.write("}")
    done = run_cli("summarize", capture, "--no-cache", "-q")
    assert_refused(done, manifest, "more than")
