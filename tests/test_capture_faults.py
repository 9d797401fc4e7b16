"""Fault isolation: whatever breaks inside capture, the loop runs all its steps and the error is recorded."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import time
import warnings

import torch

from traceattr.capture import CaptureConfig, Profiler, profile, read_run

STEPS = 12


def config(tmp_path, **fields) -> CaptureConfig:
    base = dict(out_dir=str(tmp_path / "run"), kernel_summary=False, wait=0, warmup=1, active=2, repeat=3)
    return CaptureConfig(**{**base, **fields})


def run_loop(cfg_or_prof, after_step=None) -> tuple[Profiler, int, list[warnings.WarningMessage]]:
    """A real (tiny) training loop; returns the profiler, the steps it completed and capture warnings.
    Takes a config (the loop starts and stops the profiler) or a started profiler (the loop stops it)."""
    model = torch.nn.Linear(16, 16)
    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with (profile(cfg_or_prof) if isinstance(cfg_or_prof, CaptureConfig) else cfg_or_prof) as prof:
            for step in range(STEPS):
                model(torch.randn(4, 16)).sum().backward()
                prof.step()
                done += 1
                if after_step is not None:
                    after_step(step)
    ours = [w for w in caught if "traceattr.capture" in str(w.message)]
    return prof, done, ours


def wait_until_dead(pid: int, timeout_s: float = 30.0) -> None:
    """Until the process `pid` (a child not yet reaped) has exited: a zombie, or gone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still runs {timeout_s} s after SIGKILL")


def manifest(tmp_path) -> dict:
    return json.loads((tmp_path / "run" / "rank0" / "manifest.json").read_text())


def assert_isolated(prof, done, ours, cause: str):
    assert done == STEPS
    assert len(ours) == 1 and cause in str(ours[0].message)
    assert ours[0].filename == __file__        # the warning points at the user's line, not at capture
    status = prof.status()
    assert status.state == "failed" and cause in status.error
    assert not torch.autograd._profiler_enabled()      # the underlying Kineto profiler was stopped too


def test_export_raising(tmp_path, monkeypatch):
    def broken_export(self, path, *args, **kwargs):
        raise RuntimeError("export exploded")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken_export)
    prof, done, ours = run_loop(config(tmp_path))
    assert_isolated(prof, done, ours, "export exploded")
    assert any("exporting window 0" in e for e in manifest(tmp_path)["errors"])
    assert manifest(tmp_path)["state"] == "failed"
    assert list((tmp_path / "run" / "rank0").glob("*window*")) == []   # no temporary leftovers
    monkeypatch.undo()
    with profile(config(tmp_path / "again")) as again:     # a later profiler in this process works
        for _ in range(4):
            again.step()
    assert again.status().windows == 2 and again.status().error is None   # one full, one cut by stop()


def test_rank_folder_replaced_by_a_file_after_start(tmp_path):
    cfg = config(tmp_path)
    model = torch.nn.Linear(16, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = Profiler(cfg)
        prof.start()
        rank_dir = tmp_path / "run" / "rank0"
        shutil.rmtree(rank_dir)
        rank_dir.write_text("the folder is gone")        # root ignores chmod; a file cannot be written into
        for _ in range(STEPS):
            model(torch.randn(4, 16)).sum().backward()
            prof.step()
        status = prof.stop()
    ours = [w for w in caught if "traceattr.capture" in str(w.message)]
    assert len(ours) == 1 and status.state == "failed" and "exporting window 0" in status.error
    assert status.files == () and not torch.autograd._profiler_enabled()


def test_summary_failing_skips_that_summary_and_profiling_goes_on(tmp_path, monkeypatch):
    real_export = torch.profiler.profile.export_chrome_trace
    exported = []

    def export_a_broken_first_window(self, path, *args, **kwargs):
        real_export(self, path, *args, **kwargs)
        exported.append(path)
        if len(exported) == 1:      # a real fault for the real summary: window 0's trace is not JSON
            with open(path, "rb") as file:
                text = file.read()
            with open(path, "wb") as out:      # still ends as a whole export does (a cut one is refused)
                out.write(b"<<broken" + text)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export_a_broken_first_window)
    prof, done, ours = run_loop(config(tmp_path, kernel_summary=True))
    assert done == STEPS and len(ours) == 1 and "window 0: kernel summary failed" in str(ours[0].message)
    assert "profiling goes on" in str(ours[0].message) and ours[0].filename == __file__
    status = prof.status()
    # three traces exist: windows counts what exists (it said 2); the skipped summary is in errors
    assert status.state == "stopped" and status.error is None and status.windows == 3
    assert [e.split(": ")[:2] for e in status.errors] == [["window 0", "kernel summary failed"]]
    data = manifest(tmp_path)
    first, *later = data["windows"]
    assert first["status"] == "incomplete" and first["files"] == {"trace": "window0.pt.trace.json.gz"}
    assert "kernel summary failed" in first["errors"][0]
    assert [w["status"] for w in later] == ["written", "written"]
    assert all(set(w["files"]) == {"trace", "kernels"} for w in later)
    assert any("window 0: kernel summary failed" in e for e in data["errors"])
    assert not read_run(tmp_path / "run").ok
    assert not torch.autograd._profiler_enabled()


def test_compression_failing_keeps_the_uncompressed_trace_and_later_windows(tmp_path):
    rank_dir = tmp_path / "run" / "rank0"
    prof = Profiler(config(tmp_path))
    prof.start()
    (rank_dir / ".window0.gz.tmp").mkdir()     # the gzip target cannot be opened, even by root
    prof, _, ours = run_loop(prof)
    status = prof.status()
    assert len(ours) == 1 and "window 0: compression failed" in str(ours[0].message)
    assert status.state == "stopped" and status.windows == 3          # window 0's trace exists, uncompressed
    assert len(status.errors) == 1 and status.errors[0].startswith("window 0: compression failed")
    plain = rank_dir / "window0.pt.trace.json"
    assert plain.exists() and json.loads(plain.read_text())["distributedInfo"]["rank"] == 0
    assert str(plain) in status.files
    assert sorted(p.name for p in rank_dir.glob("*.gz")) == ["window1.pt.trace.json.gz", "window2.pt.trace.json.gz"]
    run = read_run(tmp_path / "run")
    assert run.errors[0] and not run.ok and len(run.trace_files) == 3


def test_killed_writer_process_loses_nothing_but_that_window_compression(tmp_path):
    prof = Profiler(config(tmp_path))
    prof.start()
    writer_pid = prof._writer._proc.pid
    os.kill(writer_pid, signal.SIGSTOP)

    def kill_writer(step):
        if step == 2:              # window 0 was handed over and is waiting: the writer process dies
            os.kill(writer_pid, signal.SIGKILL)
            # before the next window is handed over: a loaded machine took longer to end it than the loop
            # took to its last window, and all three went to the dying process (kept uncompressed, as they must)
            wait_until_dead(writer_pid)

    prof, _, ours = run_loop(prof, kill_writer)
    status = prof.status()
    assert len(ours) == 1 and "window 0: writer process failed" in str(ours[0].message)
    rank_dir = tmp_path / "run" / "rank0"
    assert status.state == "stopped" and status.windows == 3
    assert (rank_dir / "window0.pt.trace.json").exists()          # torch's export, kept uncompressed
    assert [os.path.basename(w["trace"]) for w in read_run(tmp_path / "run").windows] == [
        "window0.pt.trace.json", "window1.pt.trace.json.gz", "window2.pt.trace.json.gz"]
    assert not list(rank_dir.glob(".window*"))                  # no temporaries left


def test_no_half_written_trace_is_visible_while_the_writer_is_held(tmp_path):
    prof = Profiler(config(tmp_path, repeat=1))
    prof.start()
    writer_pid = prof._writer._proc.pid
    os.kill(writer_pid, signal.SIGSTOP)       # the writer process cannot run: the window waits for it
    try:
        for _ in range(3):
            prof.step()                       # the window is exported and handed over
        root = tmp_path / "run"
        assert [p.name for p in root.rglob("*.json*")] == ["manifest.json"]   # hidden temporaries never match
        assert prof.status().files == ()
        from traceattr.io.discover import find_trace_files    # the loader's own discovery
        assert [p.name for p in find_trace_files(root)] == ["manifest.json"]   # no trace, complete or not
    finally:
        os.kill(writer_pid, signal.SIGCONT)
    status = prof.stop()
    assert status.files == (str(root / "rank0" / "window0.pt.trace.json.gz"),)
    assert all(p.exists() for p in map(type(root), status.files))


def test_stop_reports_unfinished_writes_after_its_bounded_wait(tmp_path):
    prof = Profiler(config(tmp_path, repeat=1, flush_timeout_s=0.2))
    prof.start()
    writer_pid = prof._writer._proc.pid
    os.kill(writer_pid, signal.SIGSTOP)
    try:
        for _ in range(3):
            prof.step()
        status = prof.stop()
    finally:
        os.kill(writer_pid, signal.SIGCONT)
    assert status.pending == ("window0: queued",) and status.files == ()
    assert manifest(tmp_path)["unfinished"] == ["window0: queued"]
    run = read_run(tmp_path / "run")
    assert not run.ok and any("unfinished" in p for p in run.problems)
    prof._writer.reaper.join(30)          # the late write still lands, complete, and is recorded
    data = manifest(tmp_path)
    assert data["windows"][0]["status"] == "written"
    trace = tmp_path / "run" / "rank0" / "window0.pt.trace.json.gz"
    assert json.load(gzip.open(trace))["distributedInfo"]["rank"] == 0
