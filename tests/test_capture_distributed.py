"""Two real processes with a gloo process group: rank selection, per-rank files, loading by rank."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
import torch.multiprocessing as mp

from traceattr.capture import CaptureConfig, read_run

WORLD = 2


def _worker(rank: int, root: str) -> None:
    import torch.distributed as dist

    import traceattr.capture as capture

    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    statuses = {}
    for name, ranks, extra in (("only1", [1], {}), ("all", "all", {}),
                               ("named", [1], {"run_name": "{time}-{config_hash}"})):
        if rank == 0 and extra:
            import time
            time.sleep(1.1)           # rank 0's clock reads a later second: only a broadcast name agrees
        cfg = capture.CaptureConfig(out_dir=f"{root}/{name}", ranks=ranks, wait=1, warmup=1, active=2,
                                    repeat=1, kernel_summary=False, barrier_on_stop=True, **extra)
        with capture.profile(cfg) as prof:
            for _ in range(6):
                model(torch.randn(4, 16)).sum().backward()
                for p in model.parameters():          # a real collective every step
                    dist.all_reduce(p.grad)
                prof.step()
        statuses[name] = prof.status()
        statuses[name + " out_dir"] = prof.config.out_dir      # run_name filled in
    with open(f"{root}/status{rank}.pickle.tmp", "wb") as out:
        pickle.dump(statuses, out)
    os.replace(f"{root}/status{rank}.pickle.tmp", f"{root}/status{rank}.pickle")   # whole, or not there
    dist.barrier()                 # no rank tears gloo down while a peer is still inside a collective
    dist.destroy_process_group()


def _spawn(root) -> None:
    try:
        mp.spawn(_worker, args=(str(root),), nprocs=WORLD, join=True)
    except mp.ProcessExitedException as exc:
        # gloo can abort a process as it tears down ("terminate called without an active exception",
        # pytorch/pytorch#190489; seen once in CI, never in 16 runs here). Forgiven only when every rank
        # had recorded its status first: the capture under test was finished by then.
        if not (exc.signal_name and all((root / f"status{r}.pickle").exists() for r in range(WORLD))):
            raise


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    try:
        _spawn(root)
    except mp.ProcessExitedException as exc:
        if not exc.signal_name:
            raise
        root = tmp_path_factory.mktemp("dist_again")     # a death by signal before the end: once more
        _spawn(root)
    statuses = {r: pickle.loads((root / f"status{r}.pickle").read_bytes()) for r in range(WORLD)}
    return root, statuses


def test_ranks_1_writes_only_rank_1(two_rank_run):
    root, statuses = two_rank_run
    assert statuses[0]["only1"].state == "not_selected" and statuses[0]["only1"].files == ()
    assert statuses[1]["only1"].state == "stopped" and statuses[1]["only1"].windows == 1
    assert sorted(p.name for p in (root / "only1").iterdir()) == ["rank1"]
    run = read_run(root / "only1")
    assert run.ranks == [1] and run.world_size == WORLD and run.ok
    assert run.manifests[1]["rank_source"] == "torch.distributed"


def test_all_writes_both_ranks_and_they_load_with_their_ranks(two_rank_run):
    root, statuses = two_rank_run
    run = read_run(root / "all")
    assert run.ranks == [0, 1] and run.ok and len(run.trace_files) == 2
    for rank in range(WORLD):
        assert statuses[rank]["all"].files == (str(root / "all" / f"rank{rank}" / "window0.pt.trace.json.gz"),)
    load = pytest.importorskip("traceattr.io.load").load
    ts = load(str(root / "all"))
    assert ts.ranks == [0, 1]
    from traceattr import schema as S
    files = ts.files.to_pandas()
    assert set(files[S.RANK_SOURCE]) == {S.RANK_FROM_JSON}          # torch's own distributedInfo
    assert set(files[S.WORLD_SIZE]) == {WORLD}
    by_rank = dict(zip(files[S.RANK], files[S.PATH]))
    assert all(f"rank{r}" in by_rank[r] for r in range(WORLD))
    assert ts.device.num_rows == 0                                   # CPU only: Σ self == busy == 0


def test_run_name_is_rank_0s_on_every_rank(two_rank_run):
    root, statuses = two_rank_run
    [folder] = list((root / "named").iterdir())       # rank 1 writes, into the folder rank 0 named
    assert statuses[0]["named out_dir"] == statuses[1]["named out_dir"] == str(folder)
    assert statuses[1]["named"].files[0].startswith(str(folder / "rank1"))
    assert read_run(folder).ranks == [1] and read_run(folder).ok


def _raising_worker(rank: int, root: str) -> None:
    import datetime
    import json
    import time

    import torch.distributed as dist

    import traceattr.capture as capture

    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    cfg = capture.CaptureConfig(out_dir=f"{root}/run", ranks="all", wait=0, warmup=1, active=2, repeat=1,
                                kernel_summary=False, barrier_on_stop=True)
    tensor, raised_at, report = torch.ones(4), None, {}
    try:
        with capture.profile(cfg) as prof:
            for step in range(50):
                if rank == 1 and step == 3:
                    raised_at = time.monotonic()
                    raise ValueError("a bug in the training loop")
                dist.all_reduce(tensor)
                prof.step()
    except Exception as exc:  # noqa: BLE001 - rank 0 sees its peer go (gloo's error)
        report = {"error": type(exc).__name__, "took_s": time.monotonic() - (raised_at or time.monotonic())}
    with open(f"{root}/report{rank}.json", "w") as out:
        json.dump(report, out)
    os._exit(0)         # no teardown of a process group whose peer is gone


def test_an_exception_in_the_loop_is_not_held_back_by_the_stop_barrier(tmp_path):
    """barrier_on_stop with the loop ending on a user's exception on one rank: the other rank is inside
    another collective, and the barrier held the traceback back for the group's timeout (60 s here, 30
    minutes by default)."""
    import json

    mp.spawn(_raising_worker, args=(str(tmp_path),), nprocs=WORLD, join=True)
    report = json.loads((tmp_path / "report1.json").read_text())
    assert report["error"] == "ValueError" and report["took_s"] < 20, report
    assert read_run(tmp_path / "run").manifests[1]["state"] == "stopped"


def test_ranks_a_capture_did_not_select_are_not_missing(two_rank_run, tmp_path):
    """`ranks=[1]` of a world of 2 (rank 0 only by default): check warned 'missing ranks (1)' on every such
    clean capture. A selected rank without its trace still counts."""
    import shutil

    from traceattr.pipelines.check import check_runs

    def missing(path):
        results, verdict = check_runs(str(path), cache=False)
        findings = results[0].report.findings
        row = findings[findings["check"] == "missing_ranks"].iloc[0]
        return verdict, row["verdict"], int(row["count"])

    root, _ = two_rank_run
    assert missing(root / "only1") == ("ok", "ok", 0)
    lost = tmp_path / "lost"
    shutil.copytree(root / "all", lost)
    for trace in (lost / "rank1").glob("*.json*"):
        if trace.name != "manifest.json":
            trace.unlink()
    assert missing(lost)[1:] == ("warn", 1)
