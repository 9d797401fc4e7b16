"""A training process killed while its writer process finishes, and a disk that fills up: the manifest, and
read_run and `traceattr check` reading it, tell what is on disk and why, never a false problem.

Real processes and real signals: a small CPU training loop in a subprocess, SIGTERM to its process group as
torchrun sends it (and SLURM ends every job so), a real tmpfs that fills up (mounted in a user namespace)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from traceattr.capture import read_run

from clirun import run_cli
from conftest import REPO_ROOT, wait_until_gone

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def start_script(source: str, *args: str) -> subprocess.Popen:
    """The script in a session of its own (so a signal to its group spares pytest), lines on stdout."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(source), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)


def manifest(out, rank=0) -> dict:
    return json.loads((out / f"rank{rank}" / "manifest.json").read_text())


def wait_for(condition, timeout_s=60.0, what="a condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def check(out) -> subprocess.CompletedProcess:
    return run_cli("check", out, "--no-cache")


def assert_whole_capture(out, windows: int) -> None:
    """Every window listed with its files, each file whole, and no problem read into it."""
    run = read_run(out)
    assert run.problems == [], run.problems
    assert [w["window"] for w in run.windows] == list(range(windows))
    for window in run.windows:
        assert window["status"] == "written", window
        json.load(gzip.open(window["trace"]))                  # whole
        import pyarrow.parquet as pq
        assert pq.read_table(window["kernels"]).num_rows >= 0  # loads


TRAIN_THEN_STOP = """
    import sys, torch
    import traceattr.capture as capture

    cfg = capture.CaptureConfig(out_dir=sys.argv[1], wait=0, warmup=1, active=2, repeat=2, flush_timeout_s=300)
    model = torch.nn.Linear(16, 16)
    prof = capture.Profiler(cfg)
    prof.start()
    print(prof._writer._proc.pid, flush=True)
    sys.stdin.readline()                # the test holds the writer process first
    for _ in range(5):                  # window 0 whole (steps 1-2), window 1 under way (step 4)
        model(torch.randn(4, 16)).sum().backward()
        prof.step()
    print("stopping", flush=True)
    prof.stop()                         # exports window 1, then waits for the held writer: killed in here
    print("stopped", flush=True)
"""


@pytest.mark.parametrize("how", ["torchrun", "slurm"])
def test_sigterm_during_stop_leaves_a_manifest_that_lists_what_the_writer_finished(tmp_path, how):
    """The issue: torchrun SIGTERMs every rank during stop(); the writer (out of the job's process group)
    finished every file, but every manifest said `running`, windows `writing`, `files: {}`, and check and
    read_run said the process died. SLURM sends its SIGTERM to every process of the job, the writer too:
    it finishes the windows it holds all the same."""
    out = tmp_path / "run"
    job = start_script(TRAIN_THEN_STOP, str(out))
    try:
        writer = int(job.stdout.readline())
        os.kill(writer, signal.SIGSTOP)           # its windows wait: stop() is still waiting when killed
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "stopping", job.stderr.read()
        wait_for(lambda: len(manifest(out)["windows"]) == 2, what="stop() to hand both windows over")
        time.sleep(0.5)                           # stop() waits for the held writer now
        os.killpg(job.pid, signal.SIGTERM)        # as torchrun does, to the rank's process group
        if how == "slurm":
            os.kill(writer, signal.SIGTERM)       # to every process of the job step
        assert job.wait(60) == -signal.SIGTERM
    finally:
        if job.poll() is None:
            job.kill()
        os.kill(writer, signal.SIGCONT)
    wait_until_gone(writer)                       # it finished both windows after the training died
    data = manifest(out)                          # the writer put them into the manifest itself
    assert [w["status"] for w in data["windows"]] == ["written", "written"]
    assert [sorted(w["files"]) for w in data["windows"]] == [["kernels", "trace"], ["kernels", "trace"]]
    assert data["windows"][1]["partial"] and data["errors"] == [] and data["state"] == "stopping"
    assert not list((out / "rank0").glob(".window*"))     # records merged, no temporaries
    assert_whole_capture(out, 2)
    done = check(out)
    assert done.returncode == 0 and "verdict: ok" in done.stdout, (done.stdout, done.stderr)
    assert "capture_incomplete" not in done.stdout + done.stderr and "died" not in done.stdout + done.stderr


def test_a_manifest_left_writing_is_reconciled_from_the_writer_records_and_the_disk(tmp_path):
    """The writer could not put its windows into the manifest (say it was killed too, after its files):
    read_run settles the windows from its records, else from the whole files on disk."""
    out = tmp_path / "run"
    job = start_script(TRAIN_THEN_STOP, str(out))
    try:
        writer = int(job.stdout.readline())
        os.kill(writer, signal.SIGSTOP)
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "stopping"
        wait_for(lambda: len(manifest(out)["windows"]) == 2, what="stop() to hand both windows over")
        time.sleep(0.5)
        stale = (out / "rank0" / "manifest.json").read_bytes()     # as the killed training process left it
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(60) == -signal.SIGTERM
    finally:
        if job.poll() is None:
            job.kill()
        os.kill(writer, signal.SIGCONT)
    wait_until_gone(writer)
    rank_dir = out / "rank0"
    # the manifest as the killed process left it; window 0's record as the writer wrote it, window 1's gone
    (rank_dir / "manifest.json").write_bytes(stale)
    assert [w["status"] for w in manifest(out)["windows"]] == ["writing", "writing"]
    record = {"window": 0, "entry": None, "files": {"trace": "window0.pt.trace.json.gz",
                                                    "kernels": "window0.kernels.parquet"},
              "errors": [], "degraded": None, "done": True, "writer_pid": writer}
    (rank_dir / ".window0.record").write_text(json.dumps(record))
    run = read_run(out)
    assert run.problems == [], run.problems
    assert [w.get("reconciled") for w in run.windows] == ["the writer process's record", "whole files on disk"]
    assert len(run.notes) == 2 and not run.writers[0] and run.processes[0] is False
    assert_whole_capture(out, 2)
    # a file cut short is not taken for a finished one
    trace = rank_dir / "window1.pt.trace.json.gz"
    trace.write_bytes(trace.read_bytes()[:-20])
    run = read_run(out)
    assert run.windows[1]["status"] == "writing" and not run.ok
    assert any("window 1: writing, never finished: no writer process" in p for p in run.problems), run.problems
    assert any("state 'stopping': the process ended inside stop()" in p for p in run.problems), run.problems


TRAIN_PAST_THE_SCHEDULE = """
    import sys, torch
    import traceattr.capture as capture

    cfg = capture.CaptureConfig(out_dir=sys.argv[1], wait=0, warmup=1, active=2, repeat=1)
    model = torch.nn.Linear(16, 16)
    prof = capture.Profiler(cfg)
    prof.start()
    print(prof._writer._proc.pid, flush=True)
    for step in range(10**9):           # training goes on long after its one window; SLURM ends it
        model(torch.randn(4, 16)).sum().backward()
        prof.step()
        if step == 3:
            print("profiled", flush=True)
            if len(sys.argv) > 2:       # held here, inside the next window's warmup, until killed
                sys.stdin.readline()
"""


def test_a_job_killed_after_its_profiling_is_a_whole_capture(tmp_path):
    """SLURM ends a job (SIGTERM) hours after its profiling windows: stop() never ran, yet every window is
    on disk. The manifest says the schedule was done, so nothing is missing."""
    out = tmp_path / "run"
    job = start_script(TRAIN_PAST_THE_SCHEDULE, str(out))
    try:
        writer = int(job.stdout.readline())
        assert job.stdout.readline().strip() == "profiled", job.stderr.read()
        assert manifest(out)["state"] == "done"
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(60) == -signal.SIGTERM
    finally:
        if job.poll() is None:
            job.kill()
    wait_until_gone(writer)
    assert_whole_capture(out, 1)
    assert manifest(out)["state"] == "done"


def test_a_process_killed_mid_schedule_is_a_problem_that_names_the_cause(tmp_path):
    """Killed while profiling (repeat=0: until stop()): the windows it exported are there and listed, and
    the one problem says the process ended without stop(), not that windows are missing."""
    out = tmp_path / "run"
    script = TRAIN_PAST_THE_SCHEDULE.replace("repeat=1", "repeat=0")
    job = start_script(script, str(out), "hold")
    try:
        writer = int(job.stdout.readline())
        assert job.stdout.readline().strip() == "profiled"
        os.killpg(job.pid, signal.SIGKILL)        # window 0 exported, window 1 in its warmup
        job.wait(60)
    finally:
        if job.poll() is None:
            job.kill()
    wait_until_gone(writer)
    run = read_run(out)
    assert run.processes[0] is False and [w["status"] for w in run.windows] == ["written"], run.windows
    assert len(run.problems) == 1 and "state 'running'" in run.problems[0], run.problems
    assert "ended without calling stop()" in run.problems[0] and "died, or" not in run.problems[0]


# ---- a full disk -------------------------------------------------------------------------------------

def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-rm", "sh", "-c", 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d"'],
                          capture_output=True, timeout=30)
    return done.returncode == 0


FULL_DISK = """
    import json, os, signal, sys, time, warnings
    import torch
    import traceattr.capture as capture

    folder, mode = sys.argv[1], sys.argv[2]

    def fill(leave_bytes=0):
        with open(folder + "/filler", "ab", buffering=0) as filler:
            try:
                st = os.statvfs(folder)
                filler.write(b"x" * max(0, st.f_bavail * st.f_frsize - leave_bytes))
                while not leave_bytes:          # to the last byte
                    filler.write(b"x" * 512)
            except OSError:
                pass

    if mode == "nearly_full":                   # room for the manifest, not for the space it keeps
        fill(leave_bytes=4096)
    model, steps = torch.nn.Linear(16, 16), 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = capture.CaptureConfig(out_dir=folder + "/run", wait=0, warmup=1, active=2, repeat=2,
                                    kernel_summary=False)
        prof = capture.Profiler(cfg)
        prof.start()
        writer = prof._writer._proc.pid if prof._writer is not None else None
        if mode == "fills_up":
            os.kill(writer, signal.SIGSTOP)     # both windows exported and queued, then the disk fills
        for step in range(8):
            model(torch.randn(4, 16)).sum().backward()
            prof.step()
            steps += 1
            if mode == "fills_up" and step == 5:
                fill()
                os.kill(writer, signal.SIGCONT)     # its gzips fail: it keeps torch's exports, renamed
                rank_dir = folder + "/run/rank0/"
                while not all(os.path.exists(rank_dir + f"window{w}.pt.trace.json") for w in (0, 1)):
                    time.sleep(0.01)
                time.sleep(0.5)                     # and says so (on a full disk, to a pipe only)
        prof.stop()
    status = prof.status()
    os.unlink(folder + "/filler")
    listing = sorted(os.listdir(folder + "/run/rank0")) if os.path.isdir(folder + "/run/rank0") else []
    data = json.load(open(folder + "/run/rank0/manifest.json")) if "manifest.json" in listing else None
    run = capture.read_run(folder + "/run") if data else None
    import subprocess
    checked = subprocess.run([sys.executable, "-m", "traceattr.cli", "check", folder + "/run", "--no-cache"],
                             capture_output=True, text=True) if data else None
    print(json.dumps({"check": checked and checked.stdout + checked.stderr, "steps": steps,
                      "windows": status.windows, "files": status.files, "state": status.state,
                      "errors": getattr(status, "errors", ()),
                      "manifest_error": getattr(status, "manifest_error", "(no such field)"),
                      "warnings": [str(w.message) for w in caught if "traceattr" in str(w.message)],
                      "manifest": data, "listing": listing, "problems": run and run.problems,
                      "traces": run and run.trace_files}))
"""


def run_on_a_small_disk(tmp_path, mode: str) -> dict:
    """FULL_DISK on a 1 MiB tmpfs of its own (a user namespace: no privilege needed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(textwrap.dedent(FULL_DISK))
    command = f"mount -t tmpfs -o size=1m tmpfs {mount} && {sys.executable} {script} {mount} {mode}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=300,
                          env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespaces to mount a small tmpfs in")
def test_a_full_disk_is_recorded_in_the_manifest_and_status(tmp_path):
    """The issue: after ENOSPC training went on, but the manifest stayed `running` with `errors: []`, the
    rescued (uncompressed) traces were missing from it, status().windows said 0 while two traces existed,
    and check blamed a dead process. The manifest keeps space for itself and uses it when the disk is full."""
    report = run_on_a_small_disk(tmp_path, "fills_up")
    assert report["steps"] == 8 and report["state"] == "stopped", report
    data = report["manifest"]
    assert data["state"] == "stopped" and report["manifest_error"] is None
    files = [w["files"].get("trace") for w in data["windows"]]
    assert files == ["window0.pt.trace.json", "window1.pt.trace.json"], data["windows"]   # rescued, listed
    for window in (0, 1):
        assert any(e.startswith(f"window {window}: compression failed") and "No space left" in e
                   for e in data["errors"]), data["errors"]
    assert any(e.startswith("manifest: an update failed (No space left on device)") for e in data["errors"])
    assert report["windows"] == 2 and len(report["files"]) == 2          # what exists
    assert sum("compression failed" in e for e in report["errors"]) == 2, report["errors"]
    assert len(report["traces"]) == 2
    problems = report["problems"]
    assert problems and not any("died" in p or "ended without" in p or "running" in p for p in problems)
    assert any("No space left on device" in p for p in problems), problems
    assert "No space left on device" in report["check"] and "capture_incomplete" in report["check"]
    assert "died" not in report["check"] and "state 'running'" not in report["check"], report["check"]
    assert ".manifest.reserve" not in report["listing"]                 # given back at stop()


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespaces to mount a small tmpfs in")
def test_a_disk_too_full_for_the_manifest_says_so_in_status(tmp_path):
    """No room for the space the manifest keeps: once the disk is full the manifest stays as last written,
    and status() says why (as the one warning does)."""
    report = run_on_a_small_disk(tmp_path, "nearly_full")
    assert report["steps"] == 8 and report["state"] == "failed", report      # torch's export did not fit
    assert report["manifest_error"] == "No space left on device", report
    assert sum("cannot update" in w for w in report["warnings"]) == 1, report["warnings"]
    assert any("exporting window 0 failed" in e for e in report["errors"])


TORCHRUN_RANK = """
    import os, signal, sys, time, torch
    from pathlib import Path
    import traceattr.capture as capture

    out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
    cfg = capture.CaptureConfig(out_dir=str(out / "run"), ranks="all", wait=0, warmup=1, active=2, repeat=2,
                                flush_timeout_s=300)
    model = torch.nn.Linear(16, 16)
    with capture.profile(cfg) as prof:
        if rank == 0:       # its writes are held, so that its stop() is still waiting when the job ends
            writer = prof._writer._proc.pid
            os.kill(writer, signal.SIGSTOP)
            (out / "writer0").write_text(str(writer))
        for _ in range(5):
            model(torch.randn(4, 16)).sum().backward()
            prof.step()
    if rank == 1:           # rank 1 stopped cleanly; it then dies once rank 0 is inside its stop()
        import json
        manifest, deadline = out / "run" / "rank0" / "manifest.json", time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if len(json.loads(manifest.read_text())["windows"]) == 2:     # both handed to its writer
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        time.sleep(1.0)     # rank 0 waits for its held writer now
        os.kill(os.getpid(), signal.SIGTERM)
"""


def test_under_torchrun_a_rank_killed_in_stop_leaves_a_whole_capture(tmp_path):
    """The issue as it happens: under torchrun one rank dies by SIGTERM, torchrun SIGTERMs the others while
    they wait in stop() for their writes; their writers finish. read_run and check find nothing wrong."""
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(TORCHRUN_RANK))
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                            "--max-restarts=0", "--monitor-interval=0.1", str(script), str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                           start_new_session=True)
    try:
        output, _ = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        writer = int((tmp_path / "writer0").read_text()) if (tmp_path / "writer0").exists() else None
        if writer is not None:
            os.kill(writer, signal.SIGCONT)
    assert job.returncode != 0 and "SIGTERM" in output, output[-3000:]     # the job failed, as it does
    wait_until_gone(writer)
    out = tmp_path / "run"
    assert manifest(out, 0)["state"] == "stopping" and manifest(out, 1)["state"] == "stopped"
    run = read_run(out)
    assert run.problems == [], run.problems
    assert [(w["rank"], w["status"], bool(w.get("trace")), bool(w.get("kernels"))) for w in run.windows] == [
        (rank, "written", True, True) for rank in (0, 1) for _ in (0, 1)]
    done = check(out)
    assert done.returncode == 0 and "verdict: ok" in done.stdout, (done.stdout, done.stderr)
