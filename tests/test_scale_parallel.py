"""Parallel decoding: identical tables to the serial path, worker errors named as in a serial run, crashes
and Ctrl-C stop cleanly, a progress bar only on a terminal."""

from __future__ import annotations

import concurrent.futures as cf
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.errors import TraceFormatError
from traceattr.io.parallel import WorkerCrashError
from conftest import read_terminal
from tracesets import SMALL, assert_same

REPO = Path(__file__).resolve().parents[1]


def build(folder: Path, ranks: int = 3, **extra) -> dict:
    return write_trace_set(folder, TraceSpec(ranks=ranks, **{**SMALL, **extra}))


def assert_conserved(traceset) -> None:
    result = sweep(traceset)
    result.self_check()
    busy = result.groups.groupby([S.RANK, S.DEVICE])[S.BUSY_NS].sum()
    by_kernel = traceattr.summarize(traceset, by="kernel").groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum()
    assert by_kernel.to_dict() == busy.to_dict()


def test_pool_gives_the_serial_tables_and_the_builder_busy(tmp_path):
    truths = build(tmp_path, ranks=3)
    serial = traceattr.load(tmp_path, jobs=1, cache=False)
    pooled = traceattr.load(tmp_path, jobs=2, cache=False)
    assert_same(serial, pooled)
    assert_conserved(pooled)
    busy = sweep(pooled).groups.groupby(S.RANK)[S.BUSY_NS].sum().to_dict()
    assert busy == {rank: sum(d.busy_ns for d in t.devices.values()) for rank, t in truths.items()}


def test_a_bad_file_is_named_exactly_as_in_a_serial_run(tmp_path):
    build(tmp_path, ranks=3)
    (tmp_path / "rank1.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", ')
    errors = []
    for jobs in (1, 2):
        with pytest.raises(TraceFormatError) as caught:
            traceattr.load(tmp_path, jobs=jobs, cache=False)
        errors.append((type(caught.value), str(caught.value), caught.value.path))
    assert errors[0] == errors[1]
    assert errors[0][2].endswith("rank1.pt.trace.json")
    skipped = [traceattr.load(tmp_path, jobs=jobs, cache=False, skip_bad=True) for jobs in (1, 2)]
    assert_same(*skipped)
    assert any("rank1.pt.trace.json" in note for note in skipped[1].notes)
    assert skipped[1].ranks == [0, 2]


def test_a_worker_that_dies_gives_a_clear_error(tmp_path):
    build(tmp_path, ranks=2)
    # a real pool whose worker process exits as it starts: the executor breaks mid-load
    with cf.ProcessPoolExecutor(max_workers=1, initializer=os._exit, initargs=(3,)) as broken:
        with pytest.raises(WorkerCrashError, match=r"rank0\.pt\.trace\.json"):
            traceattr.load(tmp_path, executor=broken, cache=False)


def test_capture_manifests_are_not_reported_as_skipped_files():
    traceset = traceattr.load(REPO / "sample_traces" / "capture_cpu_2rank", cache=False)
    assert traceset.ranks == [0, 1]
    assert not [note for note in traceset.notes if "manifest" in note]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "traceattr.cli", *args]


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    build(tmp_path, ranks=2)
    done = subprocess.run(_cli("summarize", str(tmp_path), "--no-cache", "--format", "csv"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # only the header's verdicts and notes, one line each (the builder's planted clock skew warns)
    assert "\r" not in done.stderr and all(line.startswith("traceattr: ") for line in done.stderr.splitlines())
    assert done.stdout.startswith("name,category,ranks")     # 2 ranks: one row per kernel over ranks


def test_progress_bar_on_a_terminal_and_quiet_silences_it(tmp_path):
    build(tmp_path, ranks=2)
    outputs = {}
    for quiet in (False, True):
        leader, follower = pty.openpty()
        args = ["summarize", str(tmp_path), "--no-cache", "--format", "csv", "-o", str(tmp_path / "out.csv")]
        process = subprocess.Popen(_cli(*args, *(["--quiet"] if quiet else [])), stderr=follower,
                                   stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120"})
        os.close(follower)
        outputs[quiet] = read_terminal(leader)
        assert process.wait(timeout=60) == 0
    assert "decoding" in outputs[False] and "files" in outputs[False]
    assert "decoding" not in outputs[True]


def test_ctrl_c_stops_the_workers(tmp_path):
    build(tmp_path, ranks=4, steps=40)
    process = psutil.Popen(_cli("summarize", str(tmp_path), "--no-cache", "--jobs", "2", "--quiet"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not workers:   # wait until the pool has started its workers
        workers = process.children(recursive=True)
        time.sleep(0.02)
    if not workers:
        process.wait(30)
        pytest.skip("the load finished before its workers could be seen")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 130
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"workers still running after Ctrl-C: {alive}"
    stderr = process.stderr.read().decode()
    assert "Traceback" not in stderr and "traceattr: interrupted" in stderr
