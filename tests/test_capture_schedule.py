"""Schedule -> files on disk, with real torch.profiler on CPU; lifecycle safety (no start, double stop, ...)."""

from __future__ import annotations

import gzip
import json
import pickle
import threading
import warnings

import pytest
import torch

import traceattr.capture.profiler as capture_profiler
from traceattr.capture import CaptureConfig, CaptureStatus, Profiler, profile, read_run


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train(prof, steps: int) -> list[CaptureStatus]:
    model, opt = make_model()
    statuses = []
    for _ in range(steps):
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
        statuses.append(prof.step())
    return statuses


def config(tmp_path, **fields) -> CaptureConfig:
    base = dict(out_dir=str(tmp_path / "run"), kernel_summary=False, wait=1, warmup=1, active=2, repeat=1)
    return CaptureConfig(**{**base, **fields})


def traces(tmp_path, rank=0):
    return sorted(p.name for p in (tmp_path / "run" / f"rank{rank}").glob("*.pt.trace.json*"))


def profiler_steps(path) -> list[int]:
    events = json.load(gzip.open(path))["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#"))


def test_one_window(tmp_path):
    with profile(config(tmp_path)) as prof:
        statuses = train(prof, 8)
    status = prof.status()
    assert traces(tmp_path) == ["window0.pt.trace.json.gz"]
    assert status.state == "stopped" and status.error is None and status.windows == 1
    assert statuses[-1].state == "done"          # the schedule ended, torch was stopped early
    [window] = read_run(tmp_path / "run").windows
    assert (window["first_step"], window["last_step"], window["partial"]) == (2, 3, False)
    assert profiler_steps(window["trace"]) == [2, 3]   # the manifest's range is what the trace holds
    assert not torch.autograd._profiler_enabled()


def test_repeat_two_and_skip_first(tmp_path):
    with profile(config(tmp_path, skip_first=3, repeat=2)) as prof:
        train(prof, 4)
        assert traces(tmp_path) == []            # skip_first defers the first window
        train(prof, 10)
    run = read_run(tmp_path / "run")
    assert traces(tmp_path) == ["window0.pt.trace.json.gz", "window1.pt.trace.json.gz"]
    assert [(w["first_step"], w["last_step"]) for w in run.windows] == [(5, 6), (9, 10)]
    assert [profiler_steps(w["trace"]) for w in run.windows] == [[5, 6], [9, 10]]


def test_repeat_zero_runs_until_stop_and_marks_the_cut_window_partial(tmp_path):
    prof = Profiler(config(tmp_path, wait=0, warmup=1, active=2, repeat=0))
    prof.start()
    train(prof, 8)              # cycles of 3: windows end after steps 3, 6; step 8 is in RECORD at stop
    status = prof.stop()
    assert status.windows == 3 and status.state == "stopped"
    run = read_run(tmp_path / "run")
    assert [w["partial"] for w in run.windows] == [False, False, True]
    assert run.windows[2]["first_step"] == 7 and run.windows[2]["stopped_at_step"] == 8
    assert len(run.trace_files) == 3 and run.ok
    assert run.manifests[0]["state"] == "stopped"


def test_max_windows_bounds_repeat_zero(tmp_path):
    with profile(config(tmp_path, wait=0, warmup=1, active=1, repeat=0, max_windows=2)) as prof:
        train(prof, 12)
    assert len(traces(tmp_path)) == 2


def test_uncompressed_output_and_distributed_info(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with profile(config(tmp_path, ranks=3, compress=False)) as prof:
        train(prof, 4)
    [path] = (tmp_path / "run" / "rank3").glob("*.pt.trace.json")
    assert path.name == "window0.pt.trace.json"
    info = json.loads(path.read_text())["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (3, 4)
    manifest = read_run(tmp_path / "run").manifests[3]
    assert manifest["world_size"] == 4 and manifest["torch_version"] == torch.__version__
    assert manifest["config"]["ranks"] == 3 and manifest["config_sha256"]


def test_non_selected_rank_and_disabled_config_build_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for cfg in (config(tmp_path, ranks=0), CaptureConfig(enabled=False, out_dir=str(tmp_path / "run"))):
        prof = Profiler(cfg)
        start = prof.start()
        train(prof, 6)
        stop = prof.stop()
        assert prof._torch_prof is None and prof._writer is None
        assert start.state in ("not_selected", "disabled") and stop.files == () and stop.error is None
    assert not (tmp_path / "run" / "rank1").exists() and not (tmp_path / "run" / "rank0").exists()


def test_rank_beyond_world_size_is_reported_once_and_the_others_still_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.warns(RuntimeWarning, match=r"ranks \[5\] do not exist") as caught:
        with profile(config(tmp_path, ranks=[0, 5])) as prof:
            train(prof, 5)
    assert len([w for w in caught if "traceattr" in str(w.message)]) == 1
    assert prof.status().error is None and len(traces(tmp_path)) == 1      # rank 0 was selected and exists
    manifest = json.loads((tmp_path / "run" / "rank0" / "manifest.json").read_text())
    assert manifest["warnings"] == ["ranks [5] do not exist in a world of size 2"]


def test_stop_without_start_double_stop_and_pickled_status(tmp_path):
    prof = Profiler(config(tmp_path))
    assert prof.stop().state == "stopped"
    assert prof.stop().state == "stopped"
    assert prof.start().state == "stopped"       # latched: no profiler after stop
    assert prof.step().files == ()
    with profile(config(tmp_path / "b")) as prof:
        train(prof, 4)
    first = prof.stop()
    assert prof.stop() == first
    assert pickle.loads(pickle.dumps(first)) == first


def test_user_exception_propagates_unchanged_and_profiler_is_stopped(tmp_path):
    class Boom(Exception):
        pass

    with pytest.raises(Boom, match="user error"):
        with profile(config(tmp_path, wait=0, warmup=1, active=3)) as prof:
            train(prof, 2)
            raise Boom("user error")
    assert not torch.autograd._profiler_enabled()
    [window] = read_run(tmp_path / "run").windows
    assert window["partial"] is True


def test_one_profiler_per_process(tmp_path):
    with profile(config(tmp_path / "a")) as first:
        with pytest.warns(RuntimeWarning, match="already running"):
            second = Profiler(config(tmp_path / "b"))
            assert second.start().state == "failed"
        train(first, 4)
        assert second.step().state == "failed"
    assert first.status().windows == 1 and first.status().error is None
    with profile(config(tmp_path / "c")) as third:   # the guard was released
        train(third, 4)
    assert third.status().windows == 1
    assert capture_profiler._active is None


def test_step_from_another_thread_disables_once(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(config(tmp_path)) as prof:
            train(prof, 1)
            worker = threading.Thread(target=prof.step)
            worker.start()
            worker.join()
            train(prof, 6)
    assert prof.status().state == "failed" and "thread other than" in prof.status().error
    assert len([w for w in caught if "traceattr.capture" in str(w.message)]) == 1
    assert not torch.autograd._profiler_enabled()
