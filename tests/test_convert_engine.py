"""`traceattr convert` runs on the engine's runner (engine/convert.py), and the runner has one fold.

A store converted in this process, on a process pool (--jobs 2) and on a Dask LocalCluster is the same store:
byte-identical partitions and files.parquet, the same metadata but for its creation time (and so its seal),
skipped files noted alike; a bad file refuses the convert in the same one line everywhere and leaves nothing.
The pool and the cluster fold the same runs of files (io.parallel.fold_runs) into the same states: the same
files at the same positions, the same failures at theirs.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from traceattr.analysis import summary_plan as M
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.engine import convert as C
from traceattr.engine.runner import Runner
from traceattr.engine.units import WholeFileTask
from traceattr.errors import TraceError
from traceattr.io import parallel
from traceattr.io.parallel import as_executor, fold_runs
from traceattr.io.store_writer import stage_file
from traceattr.io.store import MARKER, read_store
from tracesets import SMALL, assert_same

distributed = pytest.importorskip("distributed")

BROKEN = "rank12.pt.trace.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """12 ranks, a truncated trace among them and a JSON file that is not a trace: 14 files."""
    folder = tmp_path_factory.mktemp("convert") / "run"
    write_trace_set(folder, TraceSpec(ranks=12, **SMALL))
    (folder / BROKEN).write_text('{"traceEvents": [')
    (folder / "config.json").write_text('{"lr": 0.1}')
    return folder


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        yield client


def store_files(store: Path) -> dict:
    """Every file of a store: parquet files as their bytes' sha256, the metadata as parsed, without its
    creation time and the seal over it."""
    found = {}
    for path in sorted(p for p in store.rglob("*") if p.is_file()):
        if path.name == MARKER:
            metadata = json.loads(path.read_text())
            del metadata["created_ns"], metadata["metadata_sha256"]
            found[path.name] = metadata
        else:
            found[str(path.relative_to(store))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_convert_here_on_a_pool_and_on_dask_gives_one_store(run, client, tmp_path, monkeypatch):
    folds = []
    real = parallel.fold_files
    monkeypatch.setattr("traceattr.engine.runner.fold_files",
                        lambda paths, *args, **kwargs: folds.append((len(paths), kwargs["executor"] is not None))
                        or real(paths, *args, **kwargs))
    stores, outcomes = {}, {}
    for name, how in (("here", {"jobs": 1}), ("pool", {"jobs": 2}), ("dask", {"executor": client})):
        stores[name] = tmp_path / name
        outcomes[name] = C.convert_files(str(run), str(stores[name]), skip_bad=True, **how)
    # the pool and the cluster folded the 14 files into states; this process mapped them one by one
    assert folds == [(14, False), (14, True)]
    prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert {"fold_task", "combined"} <= set(prefixes) and "stage_file" not in prefixes, prefixes
    here = store_files(stores["here"])
    assert store_files(stores["pool"]) == here and store_files(stores["dask"]) == here
    assert len([name for name in here if name.endswith("part-0.parquet")]) == 12 * 3      # device, host, markers
    notes = here[MARKER]["notes"]
    assert [note for note in notes if note.startswith("skipped")] == [
        f"skipped {run / 'config.json'}: valid JSON without traceEvents (not a trace)",
        f"skipped {run / BROKEN}: not valid JSON: truncated JSON (the file ends early)"]
    for files, rows in outcomes.values():
        assert files.equals(outcomes["here"][0]) and rows == outcomes["here"][1]
    assert_same(read_store(stores["dask"]), read_store(stores["here"]))
    assert not list(tmp_path.glob(".*"))            # each committed once, no temporary folder left


def test_a_bad_file_refuses_the_convert_alike_everywhere_and_leaves_nothing(run, client, tmp_path):
    errors = []
    for name, how in (("here", {"jobs": 1}), ("pool", {"jobs": 2}), ("dask", {"executor": client})):
        with pytest.raises(TraceError) as raised:
            C.convert_files(str(run), str(tmp_path / name), **how)
        errors.append(str(raised.value))
    assert errors[0] == errors[1] == errors[2] == f"{run / BROKEN}: not valid JSON: truncated JSON (the file ends early)"
    assert not list(tmp_path.iterdir())


def _same_staged(got: C.Staged, want: C.Staged) -> None:
    assert got.first == want.first == 0
    assert [None if s is None else (s.facts.path, s.rows, s.digests) for s in got.files] == \
        [None if s is None else (s.facts.path, s.rows, s.digests) for s in want.files]
    assert [(f.path, f.problem, f.not_a_trace) for f in got.failures] == \
        [(f.path, f.problem, f.not_a_trace) for f in want.failures]


def test_the_pool_and_the_cluster_fold_the_same_runs_into_the_same_states(run, client, tmp_path):
    runners = {"pool": Runner(jobs=2), "dask": Runner(executor=as_executor(client))}
    paths = sorted(str(p) for p in run.iterdir())
    broken = paths.index(str(run / BROKEN))
    assert len(fold_runs([p.stat().st_size for p in sorted(run.iterdir())], 2)) == 7     # runs of two files
    staged, piles = {}, {}
    for name, runner in runners.items():
        assert runner.folds(len(paths))
        staging = tmp_path / name
        staging.mkdir()
        task = WholeFileTask(functools.partial(stage_file, staging=str(staging)))
        staged[name] = runner.fold(paths, task, functools.partial(C.Staged, str(staging)))
        piles[name] = runner.fold(paths, M.Plan(by="kernel").task(), M._Pile)
    _same_staged(staged["dask"], staged["pool"])
    assert staged["pool"].files[broken] is None and len(staged["pool"].files) == len(paths)
    assert [f.path for f in staged["pool"].failures] == [str(run / "config.json"), str(run / BROKEN)]
    # the map's states: the same facts at the same positions (None where a file was not read), the same
    # failures, and so the same tables
    facts = {name: [None if f is None else f.path for f in pile.all_facts(keep=True)] for name, pile in piles.items()}
    assert facts["dask"] == facts["pool"] and facts["pool"][broken] is None
    assert [(f.path, f.problem) for f in piles["dask"].failures] == [(f.path, f.problem) for f in piles["pool"].failures]
    reduced = {name: M.reduce_pile(pile, skip_bad=True, origin=str(run)) for name, pile in piles.items()}
    assert reduced["dask"].notes == reduced["pool"].notes
    pd.testing.assert_frame_equal(M.table_of(reduced["dask"], "kernel"), M.table_of(reduced["pool"], "kernel"),
                                  check_exact=True)


def test_fold_runs_cut_by_files_and_bytes():
    assert fold_runs([], 2) == []
    assert fold_runs([10] * 16, 2) == [(i, i + 2) for i in range(0, 16, 2)]       # 4 runs per worker
    assert fold_runs([10] * 1000, 1) == [(i, min(i + 128, 1000)) for i in range(0, 1000, 128)]    # 128 at most
    big = parallel.FOLD_BYTES                                                     # a large file alone
    assert fold_runs([10, big] + [10] * 38, 1) == [(0, 1), (1, 2), (2, 12), (12, 22), (22, 32), (32, 40)]
