"""The parquet store: `traceattr convert`, read back identically, readable without traceattr, atomic."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.store import MARKER, STORE_VERSION, StoreError, read_store, write_store
from traceattr.model.traceset import TraceSet
from conftest import wait_until_gone
from tracesets import SMALL, assert_same
from clirun import run_cli


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)           # in this process (tests/clirun.py): a process's exit code and output


@pytest.fixture
def traces(tmp_path) -> Path:
    folder = tmp_path / "traces"
    write_trace_set(folder, TraceSpec(ranks=3, **SMALL))
    return folder


def test_convert_then_every_command_reads_the_store_identically(traces, tmp_path):
    store = tmp_path / "store"
    done = cli("convert", str(traces), "-o", str(store), "--no-cache")
    assert done.returncode == 0, done.stderr
    original = traceattr.load(traces, cache=False)
    stored = traceattr.load(store)
    assert_same(stored, original)
    sweep(stored).self_check()
    from_traces = cli("summarize", str(traces), "--by", "category", "--format", "csv", "--no-cache")
    from_store = cli("summarize", str(store), "--by", "category", "--format", "csv")
    assert from_store.returncode == 0, from_store.stderr
    assert from_store.stdout == from_traces.stdout
    table = cli("summarize", str(store), "--by", "rank").stdout
    assert "parquet store" in table
    assert cli("compare", str(store), str(traces), "--format", "csv").returncode == 0


def test_store_is_readable_without_traceattr(traces, tmp_path):
    original = traceattr.load(traces, cache=False)
    store = write_store(original, tmp_path / "store")
    metadata = json.loads((store / MARKER).read_text())
    assert (metadata["format"], metadata["version"]) == ("traceattr.store", STORE_VERSION)
    assert sorted(p.name for p in (store / "device").iterdir()) == ["rank=0", "rank=1", "rank=2"]
    device = ds.dataset(store / "device", format="parquet", partitioning="hive").to_table()
    expected = original.device.to_pandas()
    frame = device.to_pandas()
    assert len(frame) == len(expected)
    for rank in (0, 1, 2):
        got = frame[frame[S.RANK] == rank]
        want = expected[expected[S.RANK] == rank]
        assert (got[S.END_NS] - got[S.START_NS]).sum() == (want[S.END_NS] - want[S.START_NS]).sum()
    host = pd.read_parquet(store / "host")
    assert len(host) == original.host.num_rows and set(host[S.RANK].astype(int)) == {0, 1, 2}
    files = pd.read_parquet(store / "files.parquet")
    assert sorted(files[S.RANK]) == [0, 1, 2]


def test_store_is_readable_by_duckdb(traces, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    original = traceattr.load(traces, cache=False)
    store = write_store(original, tmp_path / "store")
    count = duckdb.sql(f"select count(*) from read_parquet('{store}/device/**/*.parquet', "
                       "hive_partitioning=true)").fetchone()[0]
    assert count == original.device.num_rows


def test_an_incomplete_or_foreign_store_is_never_read(traces, tmp_path):
    store = write_store(traceattr.load(traces, cache=False), tmp_path / "store")
    metadata = json.loads((store / MARKER).read_text())
    metadata["version"] = STORE_VERSION + 1
    (store / MARKER).write_text(json.dumps(metadata))
    with pytest.raises(StoreError, match="version"):
        read_store(store)
    (store / MARKER).unlink()
    with pytest.raises(StoreError, match="incomplete"):
        traceattr.load(store)
    done = cli("summarize", str(store))
    assert done.returncode == 2
    assert "incomplete traceattr store" in done.stderr and "Traceback" not in done.stderr


def test_a_failed_write_leaves_no_store_and_no_temporary_folder(traces, tmp_path):
    good = traceattr.load(traces, cache=False)
    broken = TraceSet(good.device, good.host, good.markers, files=None)   # fails after the partitions
    with pytest.raises(AttributeError):
        write_store(broken, tmp_path / "store")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces"]


def test_existing_store_needs_force(traces, tmp_path):
    store = tmp_path / "store"
    assert cli("convert", str(traces), "-o", str(store)).returncode == 0
    again = cli("convert", str(traces), "-o", str(store))
    assert again.returncode == 2 and "--force" in again.stderr
    forced = cli("convert", str(traces), "-o", str(store), "--force")
    assert forced.returncode == 0, forced.stderr
    assert traceattr.load(store).device.equals(traceattr.load(traces, cache=False).device)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".traceattr")) == ["store", "traces"]


def test_a_store_inside_a_trace_folder_is_not_read_as_traces(traces):
    from traceattr.io.discover import find_trace_files

    before = find_trace_files(traces)
    write_store(traceattr.load(traces, cache=False), traces / "store")
    assert find_trace_files(traces) == before           # the store's JSON metadata is not a trace file
    assert not traceattr.load(traces, cache=False).notes


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_convert_sweeps_what_killed_converts_left_and_restores_a_store_moved_aside(traces, tmp_path):
    """A convert killed outright (SIGKILL, the out-of-memory killer) left `.store.tmp-PID-NS` (its staging)
    or, between the two renames of a replacement, `.store.old-PID-NS` with no store in place; nothing swept
    them. The next convert deletes those of dead processes, moves a lone old store back, and leaves a live
    process's alone."""
    store = tmp_path / "store"
    assert cli("convert", str(traces), "-o", str(store)).returncode == 0
    dead, alive = _dead_pid(), os.getpid()
    store.rename(tmp_path / f".store.old-{dead}-1")                 # killed between the renames
    (tmp_path / f".store.tmp-{dead}-2" / "_staging").mkdir(parents=True)
    (tmp_path / f".store.tmp-{alive}-3").mkdir()                    # a convert still running
    (tmp_path / ".store.tmp-notapid-4").mkdir()                     # not ours to judge
    again = cli("convert", str(traces), "-o", str(store), "--force")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".store")) == sorted([
        ".store.tmp-notapid-4", f".store.tmp-{alive}-3"])
    assert traceattr.load(store, cache=False).device.equals(traceattr.load(traces, cache=False).device)


def test_a_replaced_store_is_swapped_in_one_step(tmp_path):
    """convert --force exchanges the new store with the old in one rename (Linux renameat2): a reader never
    finds the store missing in between."""
    from traceattr.io.store import _exchange

    old, new = tmp_path / "store", tmp_path / ".store.tmp"
    for folder, name in ((old, "old"), (new, "new")):
        folder.mkdir()
        (folder / name).write_text(name)
    if not _exchange(new, old):
        pytest.skip("no atomic exchange on this system (the fallback renames twice)")
    assert [p.name for p in old.iterdir()] == ["new"] and [p.name for p in new.iterdir()] == ["old"]


LEAF = "import os, sys, time; from traceattr.io.parallel import _ignore_sigint; " \
       "_ignore_sigint(int(sys.argv[1])); print(os.getpid(), flush=True); time.sleep(120)"
MIDDLE = "import subprocess, sys, time; leaf = subprocess.Popen([sys.executable, '-c', sys.argv[1], " \
         "str(__import__('os').getpid())], stdout=subprocess.PIPE, text=True); " \
         "print(leaf.stdout.readline().strip(), flush=True); time.sleep(120)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pool_workers_end_with_a_driver_killed_outright():
    """A driver SIGKILLed (the out-of-memory killer) left its pool workers decoding for nobody."""
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, LEAF], stdout=subprocess.PIPE, text=True)
    leaf = int(middle.stdout.readline())
    os.kill(middle.pid, signal.SIGKILL)
    middle.wait(30)
    try:
        wait_until_gone(leaf, 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leaf, signal.SIGKILL)
