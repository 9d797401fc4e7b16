"""Converts racing for one output: a store that appeared while converting is never replaced without --force,
another host's (or pid namespace's) temporary folder is never swept as dead, and a convert whose temporary
folder vanished says so in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import traceattr
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.store import (FOREIGN_STALE_S, StoreError, TABLE_SCHEMAS, _begin, _commit, _write_partitions,
                                building, host_tag)
from tracesets import SMALL


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceattr.cli", *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("runs")
    write_trace_set(folder / "a", TraceSpec(ranks=1, **SMALL))
    write_trace_set(folder / "b", TraceSpec(ranks=2, **SMALL))
    return folder / "a", folder / "b"


def _stage(traces: Path, tmp: Path) -> tuple:
    """The arguments of _commit for `traces`, its partitions written into `tmp` (as write_store does)."""
    loaded = traceattr.load(traces, jobs=1, cache=False)
    tables = {name: _write_partitions(getattr(loaded, name), tmp / name, schema)
              for name, schema in TABLE_SCHEMAS.items()}
    return tables, loaded.files, loaded.notes, str(traces), []


def _source(store: Path) -> str:
    return json.loads((store / "_traceattr_store.json").read_text())["source"]


def test_a_store_that_appeared_while_converting_is_not_replaced(runs, tmp_path):
    """Two converts into the same new output both passed the check at their start; the second to commit
    swapped its store in (RENAME_EXCHANGE) and both reported success."""
    a, b = runs
    out = tmp_path / "store"
    target, tmp = _begin(out, False)                       # this convert starts: no store yet
    done = cli("convert", str(b), "-o", str(out), "--jobs", "1", "--no-cache", "-q")   # another one commits
    assert done.returncode == 0, done.stderr
    with pytest.raises(StoreError) as caught, building(tmp, target):
        _commit(tmp, target, *_stage(a, tmp))
    assert str(caught.value) == f"{out} appeared while converting (another convert?): not replaced; use --force"
    assert _source(out) == str(b)                          # the other convert's store, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]      # and no temporary folder left


def test_with_force_a_store_that_appeared_is_replaced(runs, tmp_path):
    a, b = runs
    out = tmp_path / "store"
    target, tmp = _begin(out, True)
    assert cli("convert", str(b), "-o", str(out), "--jobs", "1", "--no-cache", "-q").returncode == 0
    with building(tmp, target):
        _commit(tmp, target, *_stage(a, tmp), overwrite=True)
    assert _source(out) == str(a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_two_concurrent_converts_into_one_new_output_never_both_succeed(tmp_path):
    """Started together (12 files each, so both usually pass the check at the start): one store, the other
    convert refused in one line, whichever check caught it."""
    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        write_trace_set(run, TraceSpec(ranks=12, **SMALL))
    out = tmp_path / "out" / "store"
    started = [subprocess.Popen([sys.executable, "-m", "traceattr.cli", "convert", str(run), "-o", str(out),
                                 "--jobs", "1", "--no-cache", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for run in (a, b)]
    outcomes = [(process.wait(timeout=120), process.stderr.read()) for process in started]
    for process in started:
        process.stdout.close()
        process.stderr.close()
    winners = [run for run, (code, _) in zip((a, b), outcomes) if code == 0]
    assert len(winners) == 1, outcomes
    code, error = next(outcome for outcome in outcomes if outcome[0] != 0)
    assert code == 2 and error.count("\n") == 1 and "Traceback" not in error, error
    assert "appeared while converting" in error or "already exists" in error, error
    assert _source(out) == str(winners[0])
    assert sorted(p.name for p in out.parent.iterdir()) == ["store"]


def _unshare_pid() -> list[str]:
    """A command prefix that runs in a new pid namespace, or a skip where this system allows none."""
    for prefix in (["unshare", "--pid", "--fork"], ["unshare", "--user", "--map-root-user", "--pid", "--fork"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            pass
    pytest.skip("cannot start a process in a new pid namespace here (unshare)")


def test_a_convert_elsewhere_never_sweeps_a_live_convert_s_folder(runs, tmp_path):
    """Shared storage, another host (here: another pid namespace, where this process's pid is not alive):
    its convert swept this convert's temporary folder as dead, and this one then died with a traceback."""
    a, b = runs
    out = tmp_path / "store"
    target, tmp = _begin(out, False)                       # this convert is running
    elsewhere = subprocess.run([*_unshare_pid(), sys.executable, "-m", "traceattr.cli", "convert", str(b), "-o",
                                str(tmp_path / "store"), "--jobs", "1", "--no-cache", "-q"],
                               capture_output=True, text=True, timeout=120)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert tmp.is_dir()                                    # still there: its owner is alive, elsewhere
    shutil.rmtree(tmp)


def test_sweep_judges_only_this_host_s_pids(runs, tmp_path):
    """This host's leftovers of dead converts go; another host's only once unchanged for a day."""
    a, _ = runs
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    mine_dead = tmp_path / f".store.tmp-{host_tag()}-{dead}-1"
    theirs_live = tmp_path / f".store.tmp-othernode_4026531836-{dead}-2"     # its pid means nothing here
    theirs_stale = tmp_path / f".store.tmp-othernode_4026531836-{dead}-3"
    for folder in (mine_dead, theirs_live, theirs_stale):
        (folder / "_staging").mkdir(parents=True)
    old = time.time() - FOREIGN_STALE_S - 60
    for path in (theirs_stale / "_staging", theirs_stale):
        os.utime(path, (old, old))
    done = cli("convert", str(a), "-o", str(tmp_path / "store"), "--jobs", "1", "--no-cache", "-q")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["store", theirs_live.name])


def test_a_vanished_temporary_folder_is_one_line(runs, tmp_path):
    """Its temporary folder removed under a running convert (by another host's sweep, or a person): the
    commit failed with a FileNotFoundError traceback."""
    a, _ = runs
    target, tmp = _begin(tmp_path / "store", False)
    staged = _stage(a, tmp)
    with pytest.raises(StoreError) as caught, building(tmp, target):
        shutil.rmtree(tmp)
        _commit(tmp, target, *staged)
    assert "vanished while converting" in str(caught.value) and str(target) in str(caught.value)
    assert not list(tmp_path.iterdir())
