"""The writer process and what it reports: per-window top kernels (status.kernels), the memory view, and a
profiler that is used without being started."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import shutil
import warnings

import pandas as pd
import pytest
import torch

import traceattr
from traceattr import schema as S
from traceattr.capture import CaptureConfig, KernelRow, profile, read_run
from traceattr.capture.artifacts import write_memory_view
from traceattr.capture.writer import Writer

from conftest import SAMPLE_TRACES

GPU_TRACE = SAMPLE_TRACES / "synthetic_2rank" / "rank0.pt.trace.json.gz"


def expected_top(trace, top=10) -> pd.DataFrame:
    table = traceattr.summarize(traceattr.load(str(trace), cache=False), by="kernel")
    return table.sort_values([S.SELF_NS, S.NAME], ascending=[False, True]).head(top).reset_index(drop=True)


def test_kernel_rows_of_a_gpu_window_match_summarize(tmp_path, monkeypatch):
    """A GPU machine's export (the bundled synthetic 4-stream trace) through the real writer process."""
    def export_gpu_trace(self, path, *args, **kwargs):
        with gzip.open(GPU_TRACE) as src, open(path, "wb") as out:
            shutil.copyfileobj(src, out)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export_gpu_trace)
    cfg = CaptureConfig(out_dir=str(tmp_path / "run"), wait=0, warmup=1, active=2, repeat=2)
    with profile(cfg) as prof:
        for _ in range(6):
            prof.step()
    status = prof.status()
    assert status.windows == 2 and len(status.kernels) == 10
    assert pickle.loads(pickle.dumps(status)) == status             # travels over RPC as it is
    rows = pd.DataFrame(status.kernels)
    want = expected_top(GPU_TRACE)
    assert list(rows[S.NAME]) == list(want[S.NAME]) and list(rows[S.SELF_NS]) == list(want[S.SELF_NS])
    assert set(rows["window"]) == {1} and prof.kernel_summary(0)[0].window == 0
    assert prof.kernel_summary() == status.kernels and isinstance(status.kernels[0], KernelRow)
    # the full summary conserves busy time: Σ self == busy per device, as summarize says
    [window] = [w for w in read_run(tmp_path / "run").windows if w["window"] == 1]
    summary = pd.read_parquet(window["kernels"])
    busy = traceattr.summarize(traceattr.load(str(GPU_TRACE), cache=False), by="rank")
    busy = {int(d): int(b) for d, b in zip(busy[S.DEVICE], busy[S.BUSY_NS]) if d >= 0}
    assert {int(d): int(v) for d, v in summary.groupby(S.DEVICE)[S.SELF_NS].sum().items()} == busy


def test_memory_snapshot_and_its_html_view(tmp_path):
    """The writer process renames the snapshot and draws it with torch's own _memory_viz (no CUDA needed
    to draw a snapshot; taking one needs CUDA, which the GPU script covers)."""
    rank_dir = tmp_path / "rank0"
    rank_dir.mkdir()
    snapshot = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512,
                                                     "stream": 0, "time_us": 1, "frames": []}]]}
    (rank_dir / ".window0.memory.tmp").write_bytes(pickle.dumps(snapshot))
    shutil.copy(GPU_TRACE, rank_dir / ".window0.export.tmp")
    events = []
    writer = Writer(events.append, rank_dir)
    writer.submit({"window": 0, "rank_dir": str(rank_dir), "raw": str(rank_dir / ".window0.export.tmp"),
                   "compress": False, "kernel_summary": False, "prepend_header": "",
                   "memory": str(rank_dir / ".window0.memory.tmp")})
    assert writer.close(60) == {}
    files = {e["kind"]: e["name"] for e in events if e["event"] == "file"}
    assert files == {"trace": "window0.pt.trace.json", "memory": "window0.memory.pickle",
                     "memory_view": "window0.memory.html"}
    assert pickle.loads((rank_dir / "window0.memory.pickle").read_bytes()) == snapshot
    html = (rank_dir / "window0.memory.html").read_text()
    assert "MemoryViz.js" in html
    embedded = json.loads(html.split("const local_files = ")[1].split("\n")[0])[0]["base64"]
    assert pickle.loads(base64.b64decode(embedded)) == snapshot
    assert write_memory_view(rank_dir / "window0.memory.pickle", tmp_path / "again.html")


def test_step_without_start_warns_once_at_the_users_line(tmp_path):
    prof = profile(CaptureConfig(out_dir=str(tmp_path / "run")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            prof.step()
    [warning] = [w for w in caught if "traceattr.capture" in str(w.message)]
    assert "never started" in str(warning.message) and warning.filename == __file__
    assert not (tmp_path / "run").exists() and prof.status().state == "created"


def test_run_name_gives_each_run_a_fresh_folder(tmp_path):
    cfg = CaptureConfig(out_dir=str(tmp_path), run_name="exp-{config_hash}", wait=0, warmup=1, active=1,
                        kernel_summary=False)
    with profile(cfg) as prof:
        for _ in range(3):
            prof.step()
    [folder] = [p for p in tmp_path.iterdir()]
    assert folder.name == f"exp-{cfg.content_hash()}" and read_run(folder).ok
    assert prof.status().files[0].startswith(str(folder))



def test_writer_process_never_imports_torch():
    """One writer process per profiling rank: importing torch there would cost seconds and hundreds of MB."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "traceattr.capture.worker"], input=b"",
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines() if "|" in line}
    assert "traceattr.capture.artifacts" in imported and not {m for m in imported if m.split(".")[0] == "torch"}


@pytest.mark.parametrize("asked, niceness", [(None, 19), ("5", 5), ("0", 0), ("twenty", 19), ("99", 19)])
def test_the_writer_runs_at_the_lowest_priority_unless_told(tmp_path, monkeypatch, asked, niceness):
    """The suite runs writers at 0 (conftest): a nice-19 writer beside two busy test processes was starved
    past stop()'s flush timeout. Users on nodes busy with data-loader workers have the same knob."""
    import os
    import time

    from traceattr.capture.worker import NICE_ENV

    if asked is None:
        monkeypatch.delenv(NICE_ENV, raising=False)
    else:
        monkeypatch.setenv(NICE_ENV, asked)
    writer = Writer(lambda event: None, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer.start(required=True)
    assert [str(w.message) for w in caught if NICE_ENV in str(w.message)] == (
        [] if asked in (None, "5", "0") else [f"traceattr.capture: {NICE_ENV}={asked!r} is not a niceness from 0 "
                                               "to 19: the writer runs at 19"])
    base, pid = os.getpriority(os.PRIO_PROCESS, 0), writer._proc.pid
    deadline = time.monotonic() + 60
    while os.getpriority(os.PRIO_PROCESS, pid) != min(19, base + niceness) and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = os.getpriority(os.PRIO_PROCESS, pid)
    writer.close(30)
    assert seen == min(19, base + niceness)


def _autogroup(pid) -> str:
    """`/autogroup-N nice K` of a process (Linux with CONFIG_SCHED_AUTOGROUP)."""
    with open(f"/proc/{pid}/autogroup") as group:
        return group.read().strip()


def _when(condition, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_writer_competes_with_training_at_its_niceness(tmp_path, monkeypatch):
    """It ran in a session of its own: with autogroup scheduling (sched_autogroup_enabled=1, the default of
    most distributions) that is a group of its own, where nice 19 ranks it against nothing, and it took as
    much CPU as training. Now it shares the training's session, hence its autogroup, while still in a
    process group of its own (a Ctrl-C or a killpg of the job does not reach it)."""
    import os
    import sys

    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10 has no process_group: the writer lowers its own autogroup (test below)")
    monkeypatch.setenv("TRACEATTR_WRITER_NICE", "19")
    before = _autogroup("self") if os.path.exists("/proc/self/autogroup") else None
    writer = Writer(lambda event: None, tmp_path)
    writer.start(required=True)
    pid = writer._proc.pid
    try:
        _when(lambda: os.getpriority(os.PRIO_PROCESS, pid) == 19)
        assert os.getpriority(os.PRIO_PROCESS, pid) == 19
        assert os.getpgid(pid) == pid != os.getpgid(0)          # out of the job's process group
        assert os.getsid(pid) == os.getsid(0)                   # in the training's session
        if os.path.exists("/proc/self/autogroup"):
            assert _autogroup(pid) == _autogroup("self")        # so nice 19 counts against training
            assert _autogroup("self") == before                 # whose group's niceness is untouched
    finally:
        writer.close(30)


def test_a_writer_alone_in_its_session_lowers_its_autogroup(tmp_path):
    """Where the writer is alone in its session (Python 3.10 starts it so), its autogroup's niceness is what
    competes with training: the writer raises it to its own (no privilege needed to lower a priority)."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("no autogroup scheduling in this kernel")
    before = _autogroup("self")
    writer = subprocess.Popen([sys.executable, "-m", "traceattr.capture.worker"], stdin=subprocess.PIPE,
                              env={**os.environ, "TRACEATTR_WRITER_NICE": "19"}, start_new_session=True)
    try:
        _when(lambda: _autogroup(writer.pid).endswith("nice 19"))
        assert _autogroup(writer.pid).endswith("nice 19") and _autogroup(writer.pid) != before
        assert _autogroup("self") == before                     # ours, and the training's, are untouched
    finally:
        writer.stdin.close()
        assert writer.wait(60) == 0


def test_the_writer_is_out_of_reach_of_the_jobs_ctrl_c_from_its_start(tmp_path):
    """Found by a trial: a Ctrl-C to the process group 0.1 s after start() killed the writer during its
    imports (it ignored SIGINT only once running), leaving its windows unfinished; a SIGTERM to the group
    left its temporaries. It now runs in a process group of its own: the group's signals do not reach it.
    Here a job (in a session of its own, so the test's group is spared) signals its group right after
    starting it."""
    import subprocess
    import sys

    script = f"""
import os, signal, sys, time
from traceattr.capture.writer import Writer
signal.signal(signal.SIGINT, lambda *args: None)      # the job lives on; a handled signal is default after exec
from pathlib import Path
writer = Writer(lambda event: None, Path({str(tmp_path)!r}))
writer.start(required=True)
os.killpg(0, signal.SIGINT)                           # the terminal's Ctrl-C, during the writer's imports
time.sleep(2)
alive = writer._proc.poll() is None
writer.close(30)
print(alive, writer._proc.returncode)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["True", "0"], (done.stdout, done.stderr)


def test_a_writer_killed_mid_window_is_reported_with_its_exit_code_and_leaves_no_temporary(tmp_path):
    """The OOM killer takes the writer while it gzips window 0: its half-written temporary stayed, and the
    next window's new writer took the blame ("exited with code 0") once it exited cleanly at stop()."""
    import os
    import signal

    rank_dir = tmp_path / "rank0"
    rank_dir.mkdir()
    events = []
    writer = Writer(events.append, rank_dir)
    writer.start(required=True)
    first = writer._proc
    os.kill(first.pid, signal.SIGSTOP)          # it holds window 0 and gets no further
    for window in (0, 1):
        shutil.copy(GPU_TRACE, rank_dir / f".window{window}.export.tmp")
    job = {"rank_dir": str(rank_dir), "compress": True, "kernel_summary": False, "prepend_header": "",
           "memory": None}
    writer.submit({**job, "window": 0, "raw": str(rank_dir / ".window0.export.tmp")})
    (rank_dir / ".window0.gz.tmp").write_bytes(b"\x1f\x8b half a gzip")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    writer.submit({**job, "window": 1, "raw": str(rank_dir / ".window1.export.tmp")})
    assert writer.close(60) == {}
    errors = [e for e in events if e["event"] == "error"]
    assert [(e["window"], e["message"]) for e in errors] == [(0, "the writer process exited with code -9")]
    # window 1's record stays: no manifest here to list it (a profiler's removes it once it does)
    assert sorted(p.name for p in rank_dir.iterdir()) == [".window1.record", "window0.pt.trace.json",
                                                          "window1.pt.trace.json.gz"]
    record = json.loads((rank_dir / ".window1.record").read_text())
    assert record["done"] and record["files"] == {"trace": "window1.pt.trace.json.gz"} and record["errors"] == []
