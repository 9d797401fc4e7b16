"""Separate runs without ranks (issue 38, point 3): files that carry no rank (no distributedInfo, no rank in a
name) and never overlap in time, written by different processes, are separate runs, one per process, each
reported on its own; compare pairs the runs of two such folders by name, else in time order; files that do
overlap in time are ranks the loader cannot tell apart and stay refused."""

from __future__ import annotations

import io
import json
import shutil

import pandas as pd
import pytest

import traceattr
from clirun import run_cli
from conftest import shared_trace
from traceattr import schema as S
from traceattr.builder import TraceSpec, write_trace
from traceattr.errors import TraceDiscoveryError
from traceattr.io.runs import SeveralRunsError
from tracesets import SMALL

MODELS = ("bert", "qwen", "llama", "vit", "t5")
SPEC = dict(SMALL, streams=(7,), dropped_records=0, collective=False)
GAP_US = 10_000_000         # 10 s between models: far less than io/runs.py's FAR_APART_NS


def _unranked(path, seed: int, shift_us: int, **changes) -> None:
    """One single-GPU trace without distributedInfo, its times moved `shift_us` later."""
    write_trace(path, TraceSpec(seed=seed, **SPEC, **changes))
    document = json.loads(path.read_text())
    document.pop("distributedInfo", None)
    for event in document["traceEvents"]:
        if "ts" in event:
            event["ts"] = float(event["ts"]) + shift_us
    path.write_text(json.dumps(document))


def _models(folder, names=MODELS, seed: int = 0, overlap: bool = False, **changes):
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        _unranked(folder / f"{name}.json", seed + i, 0 if overlap else i * GAP_US, **changes)
    return folder


def test_five_models_one_after_another_are_five_runs(tmp_path):
    folder = _models(tmp_path / "models")
    runs = traceattr.load_runs(folder, cache=False)
    assert [name for name, _ in runs] == list(MODELS)          # in time order, named by their files
    for name, ts in runs:
        assert ts.ranks == [0] and ts.files.column(S.PATH).to_pylist() == [str(folder / f"{name}.json")]
    with pytest.raises(SeveralRunsError, match="5 separate runs") as caught:
        traceattr.load(folder, cache=False)
    assert caught.value.runs == list(MODELS) and "folder or file" in str(caught.value)
    out = run_cli("summarize", folder, "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    for name, ts in runs:        # each run's rows are its own file's table, nothing summed across
        mine = table[table["run"] == name]
        alone = traceattr.summarize(folder / f"{name}.json", cache=False)
        assert int(mine[S.SELF_NS].sum()) == int(alone[S.SELF_NS].sum()) > 0
    people = run_cli("summarize", folder, "--by", "op", "--no-cache", "-q")
    assert people.returncode == 0 and people.stdout.count("never merged") == 5, people.stderr


def test_files_that_overlap_in_time_stay_refused_as_ranks(tmp_path):
    folder = _models(tmp_path / "ranks", names=("a", "b", "c"), overlap=True)
    with pytest.raises(TraceDiscoveryError, match="cannot tell the ranks of 3 trace files"):
        traceattr.load(folder, cache=False)
    out = run_cli("summarize", folder, "--no-cache", "-q")
    assert out.returncode == 2 and "--rank-map" in out.stderr and len(out.stderr.splitlines()) == 1


def test_windows_of_one_process_stay_one_run(tmp_path):
    """tensorboard_trace_handler names a process's windows worker.<time stamp>.pt.trace.json: one run."""
    folder = tmp_path / "one"
    folder.mkdir()
    for i in range(3):
        _unranked(folder / f"host_42.{1000 + i}.pt.trace.json", i, i * GAP_US)
    runs = traceattr.load_runs(folder, cache=False)
    assert [name for name, _ in runs] == ["."]
    assert runs[0][1].files.column(S.WINDOW).to_pylist() == [0, 1, 2]


def test_compare_pairs_runs_by_name_else_in_time_order(tmp_path):
    a = _models(tmp_path / "a", names=MODELS[:3], seed=1)
    b = _models(tmp_path / "b", names=MODELS[:3], seed=1, kernel_scale={"ampere_sgemm_128x64_tn": 1.5})
    pairs = traceattr.compare_runs(a, b, cache=False)
    assert [name for name, _ in pairs] == list(MODELS[:3])
    for name, table in pairs:      # each pair is the comparison of the two files alone
        alone = traceattr.compare(a / f"{name}.json", b / f"{name}.json", cache=False)
        pd.testing.assert_frame_equal(table, alone, check_exact=True)
        total = table[table["kind"] == "total"].iloc[0]
        assert total["delta_ns"] == table.attrs["busy_b_ns"] - table.attrs["busy_a_ns"] > 0
    with pytest.raises(SeveralRunsError, match="compare_runs"):
        traceattr.compare(a, b, cache=False)
    out = run_cli("compare", a, b, "--no-cache", "-q", "--format", "csv")
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    assert list(table["run"].unique()) == list(MODELS[:3])
    assert run_cli("compare", a, b, "--no-cache", "-q").stdout.count("run: ") == 3
    # other names, as many runs: paired in time order, and the table says so
    c = _models(tmp_path / "c", names=("x1", "x2", "x3"), seed=1)
    ordered = traceattr.compare_runs(a, c, cache=False)
    assert [name for name, _ in ordered] == [f"{m} vs {x}" for m, x in zip(MODELS[:3], ("x1", "x2", "x3"))]
    assert "paired in time order" in ordered[0][1].attrs["notes"][0]
    # neither names nor numbers match: one clear line
    d = _models(tmp_path / "d", names=("y1", "y2"), seed=1)
    refused = run_cli("compare", a, d, "--no-cache", "-q")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "cannot pair the runs" in refused.stderr and "y1" in refused.stderr
    # several runs against one: refused as before, naming the runs
    one = run_cli("compare", a, a / "bert.json", "--no-cache", "-q")
    assert one.returncode == 2 and "3 separate runs" in one.stderr


def test_shared_mi300_model_traces_are_separate_runs(tmp_path):
    """Four models profiled one after another on an MI300 (TraceLens's examples): no distributedInfo, no
    rank in their names, one process each, hours of host time apart but under a day."""
    source = shared_trace("tracelens/mi300")
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        for path in source.glob("*.json.gz"):
            shutil.copy(path, tmp_path / side / path.name)
    names = sorted(path.name[:-len(".json.gz")] for path in source.glob("*.json.gz"))
    runs = traceattr.load_runs(tmp_path / "a", cache=False)
    assert sorted(name for name, _ in runs) == names and all(ts.ranks == [0] for _, ts in runs)
    pairs = traceattr.compare_runs(tmp_path / "a", tmp_path / "b", cache=False)
    assert sorted(name for name, _ in pairs) == names
    assert all(table.attrs["busy_a_ns"] == table.attrs["busy_b_ns"] > 0 for _, table in pairs)


def test_compare_runs_by_critical_says_what_to_call_instead(tmp_path):
    """compare_runs(by="critical") named every level but "critical" as the choices, although compare offers
    it: it now says that the critical path is compared one pair of runs at a time, and how."""
    with pytest.raises(traceattr.TraceInputError, match=r"traceattr\.compare\(run_a, run_b, by='critical'\)"):
        traceattr.compare_runs(tmp_path, tmp_path, by="critical")
