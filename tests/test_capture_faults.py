"""Fault isolation: whatever breaks inside capture, the loop runs all its steps and the error is recorded."""

from __future__ import annotations

import json
import os
import shutil
import threading
import warnings

import pytest
import torch

import traceattr.capture.writer as writer_module
from traceattr.capture import CaptureConfig, Profiler, profile, read_run

STEPS = 12


def config(tmp_path, **fields) -> CaptureConfig:
    base = dict(out_dir=str(tmp_path / "run"), kernel_summary=False, wait=0, warmup=1, active=2, repeat=3)
    return CaptureConfig(**{**base, **fields})


def run_loop(cfg) -> tuple[Profiler, int, list[warnings.WarningMessage]]:
    """A real (tiny) training loop; returns the profiler, the steps it completed and capture warnings."""
    model = torch.nn.Linear(16, 16)
    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(cfg) as prof:
            for _ in range(STEPS):
                model(torch.randn(4, 16)).sum().backward()
                prof.step()
                done += 1
    ours = [w for w in caught if "traceattr.capture" in str(w.message)]
    return prof, done, ours


def manifest(tmp_path) -> dict:
    return json.loads((tmp_path / "run" / "rank0" / "manifest.json").read_text())


def assert_isolated(prof, done, ours, cause: str):
    assert done == STEPS
    assert len(ours) == 1 and cause in str(ours[0].message)
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


def test_summary_raising(tmp_path, monkeypatch):
    def broken_summary(path):
        raise ValueError("summary exploded")

    monkeypatch.setattr(writer_module, "kernel_summary_table", broken_summary)
    prof, done, ours = run_loop(config(tmp_path, kernel_summary=True))
    assert_isolated(prof, done, ours, "summary exploded")
    data = manifest(tmp_path)
    assert data["windows"][0]["status"] == "failed" and "summary exploded" in data["windows"][0]["error"]
    assert any("kernel summary failed" in e for e in data["errors"])
    # the trace itself was written before the summary failed, and it is listed
    assert data["windows"][0]["files"] == {"trace": "window0.pt.trace.json.gz"}
    files = prof.status().files      # later windows may have been exported before the fault was seen
    assert files[0] == str(tmp_path / "run" / "rank0" / "window0.pt.trace.json.gz")
    assert all(f.endswith(".pt.trace.json.gz") and os.path.exists(f) for f in files)


def test_compression_raising_keeps_the_uncompressed_trace(tmp_path, monkeypatch):
    class NoGzip:
        @staticmethod
        def open(path, mode):
            raise OSError("compression exploded")

    monkeypatch.setattr(writer_module, "_gzip_module", NoGzip)
    prof, done, ours = run_loop(config(tmp_path))
    assert_isolated(prof, done, ours, "compression exploded")
    run = read_run(tmp_path / "run")
    assert run.errors[0] and not run.ok
    plain = tmp_path / "run" / "rank0" / "window0.pt.trace.json"
    assert plain.exists() and json.loads(plain.read_text())["distributedInfo"]["rank"] == 0
    assert str(plain) in prof.status().files
    assert not list((tmp_path / "run" / "rank0").glob("*.gz"))


def test_no_half_written_trace_is_visible_while_compressing(tmp_path, monkeypatch):
    release, entered = threading.Event(), threading.Event()
    real_copy = writer_module.copy_trace

    def slow_copy(src, dst, compress, prepend_header=""):
        entered.set()
        assert release.wait(20)
        real_copy(src, dst, compress, prepend_header)

    monkeypatch.setattr(writer_module, "copy_trace", slow_copy)
    prof = Profiler(config(tmp_path, repeat=1))
    prof.start()
    for _ in range(3):
        prof.step()                       # the window is exported; compression is now blocked
    assert entered.wait(20)
    root = tmp_path / "run"
    assert [p.name for p in root.rglob("*.json.gz")] == []
    assert [p.name for p in root.rglob("*.json*")] == ["manifest.json"]   # hidden temporaries never match
    assert prof.status().files == ()
    try:
        from traceattr.io.discover import find_trace_files    # the loader's own discovery
    except ImportError:
        find_trace_files = None
    if find_trace_files is not None:
        assert [p.name for p in find_trace_files(root)] == ["manifest.json"]   # no trace, complete or not
    release.set()
    status = prof.stop()
    assert status.files == (str(root / "rank0" / "window0.pt.trace.json.gz"),)
    assert all(p.exists() for p in map(type(root), status.files))


def test_stop_reports_unfinished_writes_after_its_bounded_wait(tmp_path, monkeypatch):
    release = threading.Event()
    real_copy = writer_module.copy_trace

    def stuck_copy(*args):
        release.wait(20)
        real_copy(*args)

    monkeypatch.setattr(writer_module, "copy_trace", stuck_copy)
    prof = Profiler(config(tmp_path, repeat=1, flush_timeout_s=0.2))
    prof.start()
    for _ in range(3):
        prof.step()
    status = prof.stop()
    assert status.pending == ("window0: compression",) and status.files == ()
    assert manifest(tmp_path)["unfinished"] == ["window0: compression"]
    release.set()
    prof._writer._thread.join(20)         # the late write still lands, complete, and is recorded
    data = manifest(tmp_path)
    assert data["windows"][0]["status"] == "written"
    assert (tmp_path / "run" / "rank0" / "window0.pt.trace.json.gz").exists()
