"""The critical path (attribution/critical.py, docs/critical-path.md): planted truth from hand-timed builder
traces, hostile input, the CLI and API surfaces, and HTA's critical_path_analysis on the shared traces."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import traceattr
from tests.clirun import run_cli
from traceattr.attribution.critical import HTA_BOUND, KINDS, critical_paths
from traceattr.builder import critical as scenarios

HTA_FIXTURE = Path(__file__).parent / "data" / "hta_critical_path.json"


def _load(scenario, tmp_path: Path, name: str = "trace.json"):
    path = scenario.write(tmp_path / name)
    return traceattr.load(path, cache=False), path


def _by_kind(path) -> dict[str, int]:
    frame = path.breakdown()
    return {kind: int(ns) for kind, ns in frame.groupby("kind")["critical_ns"].sum().items() if ns}


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_planted_paths(name, tmp_path):
    scenario, kinds, keys = scenarios.SCENARIOS[name]()
    traceset, _ = _load(scenario, tmp_path)
    paths, notes = critical_paths(traceset)
    assert notes == []
    (path,) = paths
    assert path.step == scenarios.STEP
    assert _by_kind(path) == kinds
    frame = path.breakdown()
    assert int(frame.critical_ns.sum()) == path.end_ns - path.start_ns == int(frame.step_ns.iloc[0])
    got = {(k, n): int(ns) for k, n, ns in frame[["kind", "key", "critical_ns"]].itertuples(index=False)}
    assert got == {key: int(ns) for key, ns in keys.items()}
    # segments tile the step, in time order, none empty
    assert path.seg_start[0] == path.start_ns and path.seg_end[-1] == path.end_ns
    assert (path.seg_start[1:] == path.seg_end[:-1]).all() and (path.seg_end > path.seg_start).all()


def test_event_wait_is_what_makes_the_second_stream_wait(tmp_path):
    """Without the marker's wait_on_* args the second kernel would look launch-bound for 284 µs."""
    scenario, _, _ = scenarios.event_wait()
    scenario.events = [e for e in scenario.events if e["name"] != "Stream Wait Event"]
    traceset, _ = _load(scenario, tmp_path)
    (path,), _ = critical_paths(traceset)
    assert _by_kind(path)["launch"] == 284 * 1000 and "compute" in _by_kind(path)


def _hostile() -> scenarios.Scenario:
    s = scenarios.Scenario()
    s.step(0, 500)
    s.host("aten::a", 5, 400)
    s.kernel("k_skewed", 7, (100, 110), (50, 90))      # starts before its launch: clock skew
    s.kernel("k_zero", 7, (120, 121), (130, 130))      # zero duration
    s.host("aten::zero", 200, 200)
    s.device("kernel", "k_orphan", 7, 300, 350, correlation=999_999)   # no runtime call
    s.sync(7, 360, 380)
    corr = s.call("cudaStreamSynchronize", 385, 390)
    s.device("cuda_sync", "Stream Sync", 9, 385, 390, cuda_sync_kind="Stream Sync", correlation=corr)  # no kernel
    s.step(600, 700, name="ProfilerStep#2")            # a step with no kernels at all
    return s


def test_hostile_input_is_a_path_within_the_step_and_a_note(tmp_path):
    traceset, path = _load(_hostile(), tmp_path)
    paths, notes = critical_paths(traceset)
    assert [p.step for p in paths] == ["ProfilerStep#1", "ProfilerStep#2"]
    for p in paths:
        frame = p.breakdown()
        assert int(frame.critical_ns.sum()) == p.end_ns - p.start_ns
    assert _by_kind(paths[1]) == {"host": 100_000}
    assert any("1 dependency edge(s) ran backward" in note for note in notes)
    result = run_cli("summarize", path, "--by", "critical", "--format", "csv", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    table = pd.read_csv(io.StringIO(result.stdout))
    assert int(table.critical_ns.sum()) == 600_000
    assert "ran backward" in result.stderr


def test_cli_api_and_partial_agree(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    truths = {}
    for rank, name in enumerate(("compute_bound", "event_wait")):
        scenario, kinds, _ = scenarios.SCENARIOS[name]()
        for event in scenario.events:
            if event["pid"] == scenarios.PID:
                event["pid"] = event["tid"] = scenarios.PID + rank
        trace = scenario.write(folder / f"rank{rank}.json")
        text = json.loads(trace.read_text())
        text["distributedInfo"] = {"rank": rank, "world_size": 2}
        trace.write_text(json.dumps(text))
        truths[rank] = kinds
    expected = {}
    for kinds in truths.values():
        for kind, ns in kinds.items():
            expected[kind] = expected.get(kind, 0) + ns
    table = traceattr.critical_path(folder, cache=False)
    assert {k: v for k, v in table.attrs["kinds"].items() if v} == expected
    assert int(table.critical_ns.sum()) == table.attrs["step_ns"] == 1_700_000
    assert table.attrs["steps"] == 2
    per_step = traceattr.critical_path(traceattr.load(folder, cache=False), per_step=True)
    assert sorted(per_step["rank"].unique()) == [0, 1]
    assert per_step.groupby("kind").critical_ns.sum().to_dict() == pytest.approx(expected)
    assert traceattr.summarize(folder, by="critical", cache=False).critical_ns.sum() == 1_700_000
    top = traceattr.critical_path(folder, top=1, cache=False)
    assert int(top.critical_ns.sum()) == 1_700_000 and top.groupby("kind").size().max() <= 2
    result = run_cli("summarize", folder, "--by", "critical", "--format", "json", "--no-cache", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert "critical path" in result.stdout or "critical_ns" in result.stdout


def test_step_annotation_option(tmp_path):
    scenario, kinds, _ = scenarios.compute_bound()
    _, path = _load(scenario, tmp_path)
    table = traceattr.critical_path(path, step="aten::op", cache=False)
    assert table.attrs["step_ns"] == (950 - 5) * 1000
    missing = traceattr.critical_path(path, step="no such annotation", cache=False)
    assert missing.attrs["step_ns"] == 1000 * 1000 and missing.attrs["steps"] == 1    # the window
    assert any("no annotation named" in note for note in missing.attrs["notes"])
    result = run_cli("summarize", path, "--step-annotation", "x")
    assert result.returncode != 0 and "--step-annotation needs --by critical" in result.stderr


# --- the shared traces and HTA -------------------------------------------------------------------------

def _hta_live(folder: Path, annotation: str, instance: int) -> dict | None:
    """HTA's breakdown run here, when its numpy/pandas work in this environment; None when they do not."""
    import logging
    import warnings
    try:
        from hta.trace_analysis import TraceAnalysis   # optional: HTA, the reference implementation
    except ImportError:
        return None
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph, _ = TraceAnalysis(trace_dir=str(folder)).critical_path_analysis(
                rank=0, annotation=annotation, instance_id=instance)
            frame = graph.get_critical_path_breakdown()
    except Exception:          # HTA 0.5 raises on pandas >= 2.2: the recorded figures stand in
        return None
    finally:
        logging.disable(logging.NOTSET)
    return {k: int(v) for k, v in frame.groupby("bound_by").duration.sum().items() if k}


@pytest.mark.parametrize("name", ["alexnet", "simple_add"])
def test_shared_traces_agree_with_hta(name, shared_traces, tmp_path):
    folder = shared_traces / "critical_path" / name
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    fixture = json.loads(HTA_FIXTURE.read_text())
    annotation = fixture["annotation"]
    traceset = traceattr.load(folder, cache=False)
    paths, _ = critical_paths(traceset, annotation)
    assert len(paths) == 2
    for instance, path in enumerate(paths):
        frame = path.breakdown()
        step_ns = path.end_ns - path.start_ns
        assert int(frame.critical_ns.sum()) == step_ns
        mine = {bound: 0 for bound in set(HTA_BOUND.values())}
        for kind, ns in frame.groupby("kind").critical_ns.sum().items():
            mine[HTA_BOUND[kind]] += int(ns)
        mine_us = {bound: ns // 1000 for bound, ns in mine.items()}
        local = tmp_path / f"{name}{instance}"
        shutil.copytree(folder, local)
        hta = _hta_live(local, annotation, instance) or fixture["traces"][name][instance]
        hta_total = sum(hta.values())
        if name == "alexnet":
            # the same path: every GPU kind equal to the µs; HTA's unweighted edges (the gaps between
            # top-level ops, a blocking sync call's span) are host, sync or idle time here
            for bound in ("gpu_compute_bound", "gpu_kernel_kernel_overhead", "gpu_kernel_launch_overhead"):
                assert mine_us[bound] == hta.get(bound, 0), bound
            assert mine_us["cpu_bound"] + mine_us[""] - hta["cpu_bound"] == step_ns // 1000 - hta_total
        else:
            # HTA's longest path detours through the last kernels that the host never waited for (the
            # cudaDeviceSynchronize started 256 µs after they ended): docs/critical-path.md
            assert mine_us["cpu_bound"] == step_ns // 1000
            assert hta["cpu_bound"] / hta_total > 0.99
            assert hta_total <= step_ns // 1000


def test_every_shared_critical_trace_tiles_its_window(shared_traces):
    for folder in sorted((shared_traces / "critical_path").iterdir()):
        table = traceattr.critical_path(folder, cache=False)
        assert int(table.critical_ns.sum()) == table.attrs["step_ns"] > 0
        assert set(table.kind) <= set(KINDS)


def test_across_ranks_follows_the_late_rank(tmp_path):
    """Rank 0 waits 590 µs in the all-reduce for rank 1's host stall: across ranks the stall is the path."""
    ranks, truth, chain = scenarios.late_rank()
    for scenario in ranks:
        scenario.write(tmp_path / f"rank{scenario.rank}.json")
    rows = traceattr.critical_path(tmp_path, across_ranks=True, per_step=True, cache=False)
    got = {(r, k, n): int(ns) for r, k, n, ns in rows[["rank", "kind", "key", "critical_ns"]].itertuples(index=False)}
    assert got == truth
    chains = rows.attrs["chains"]
    assert chains["path_ns"].tolist() == [820_000] == [sum(truth.values())]
    assert chains["end_rank"].tolist() == [0]
    assert chains["chain"].tolist() == [" > ".join(f"rank {r} {b - a} ns" for r, a, b in chain)]
    # per rank, rank 0's own path blames the all-reduce: 640 µs of communication
    own = traceattr.critical_path(tmp_path, per_step=True, cache=False)
    assert own[(own["rank"] == 0) & (own["kind"] == "communication")].critical_ns.sum() == 640_000
    result = run_cli("summarize", tmp_path, "--by", "critical", "--across-ranks", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "from rank 0's end: rank 1 650000" in result.stdout     # the header names the chain
    table = traceattr.critical_path(tmp_path, across_ranks=True, cache=False)
    assert int(table.critical_ns.sum()) == table.attrs["path_ns"] == 820_000
    bad = run_cli("summarize", tmp_path, "--by", "kernel", "--across-ranks")
    assert bad.returncode != 0 and "--across-ranks needs --by critical" in bad.stderr
    # from a parquet store (traceattr convert): the markers keep their sync args, the same path
    store = tmp_path.parent / f"{tmp_path.name}.store"
    assert run_cli("convert", tmp_path, "-o", store).returncode == 0
    stored = traceattr.critical_path(store, across_ranks=True)
    assert stored.attrs["chains"].equals(chains)


@pytest.mark.parametrize("name", ["compute_bound", "sync_in_the_middle"])
def test_stream_syncs_without_markers(name, tmp_path):
    """torch < 2.1 writes no cuda_sync markers: a stream sync waits for the last activity its thread launched,
    which gives the same path here."""
    scenario, kinds, _ = scenarios.SCENARIOS[name]()
    scenario.events = [e for e in scenario.events if e["cat"] != "cuda_sync"]
    traceset, _ = _load(scenario, tmp_path)
    (path,), notes = critical_paths(traceset)
    assert _by_kind(path) == kinds
    assert any("no cuda_sync markers" in note for note in notes)


@pytest.mark.parametrize("what_if, new_us", [
    ({"k1": 1.0}, 1000),          # unchanged weights give the trace's times back
    ({"k1": 0.5}, 760),           # k1 240 µs shorter, k2 queued behind it moves up with the sync and the op
    ({"k1": 0}, 520),             # k2 then starts 2 µs after its predecessor, as in the trace
    ({"k2": 0.5}, 801),
    ({"aten::op": 0.5}, 975),     # only its 50 µs on the path count: 5 before the launch, 45 after the sync
    ("k1=2", 1480),
])
def test_what_if_compute_bound(what_if, new_us, tmp_path):
    scenario, _, _ = scenarios.compute_bound()
    _, path = _load(scenario, tmp_path)
    scaled = traceattr.critical_path(path, what_if=what_if, cache=False).attrs["what_if"]
    assert scaled[["step_ns", "what_if_ns", "gain_ns"]].values.tolist() == [[1_000_000, new_us * 1000,
                                                                               1_000_000 - new_us * 1000]]


def test_what_if_off_the_path_gains_nothing(tmp_path):
    scenario, _, _ = scenarios.host_bound()
    _, path = _load(scenario, tmp_path)
    assert traceattr.critical_path(path, what_if={"k_small": 0}, cache=False).attrs["what_if"].gain_ns.tolist() == [0]
    assert traceattr.critical_path(path, what_if={"aten::b": 0.5}, cache=False).attrs["what_if"].gain_ns.tolist() == \
        [300_000]
    result = run_cli("summarize", path, "--by", "critical", "--what-if", "aten::b=0.5", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "gain 300000 ns" in " ".join(result.stdout.split())
    for bad in ("aten::b", "aten::b=-1", "aten::b=x", "=2"):
        result = run_cli("summarize", path, "--by", "critical", "--what-if", bad, "--no-cache")
        assert result.returncode != 0 and "--what-if" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("summarize", path, "--what-if", "aten::b=0.5")
    assert result.returncode != 0 and "--what-if needs --by critical" in result.stderr


def test_slack_is_what_shrinking_gains_for_sure(tmp_path):
    scenario, kinds, keys, slack = scenarios.parallel_streams()
    traceset, path = _load(scenario, tmp_path)
    (found,), _ = critical_paths(traceset)
    assert _by_kind(found) == kinds
    frame = found.breakdown()
    assert {(k, n): int(ns) for k, n, ns in frame[["kind", "key", "critical_ns"]].itertuples(index=False)} == keys
    assert {(k, n): int(ns) for k, n, ns in frame[["kind", "key", "slack_ns"]].itertuples(index=False)} == slack
    # the what-if agrees: A halved gains its 15 µs of slack and no more; B is off the path
    for what_if, gain in (({"A": 0.5}, 15_000), ({"A": 0.99}, 2_800), ({"B": 0.5}, 0)):
        assert traceattr.critical_path(path, what_if=what_if, cache=False).attrs["what_if"].gain_ns.tolist() == [gain]
    table = traceattr.critical_path(path, cache=False)
    assert table.set_index(["kind", "key"]).slack_ns.to_dict() == slack


def test_across_ranks_on_the_multirank_builder(tmp_path):
    """builder.multirank's straggler (rank 1 busy 800 µs on the host before each all-reduce, on a clock 90 µs
    ahead) is what bounds every step across ranks, though the step ends on another rank."""
    from traceattr.builder.multirank import MultiRankSpec, build_multirank
    build_multirank(MultiRankSpec(ranks=3, steps=2, seed=0, late_launch_ns={1: 800_000}, clock_offset_ns={1: 90_000}),
                    tmp_path)
    rows = traceattr.critical_path(tmp_path, across_ranks=True, per_step=True, cache=False)
    chains = rows.attrs["chains"]
    assert len(chains) == 2 and (chains["end_rank"] != 1).all()
    assert all(chain.startswith("rank 1 ") for chain in chains["chain"])
    late = rows[(rows["key"] == "aten::_late_host_work")]
    assert late["rank"].tolist() == [1, 1] and late["critical_ns"].tolist() == [800_000, 800_000]
    assert rows.groupby("step").critical_ns.sum().tolist() == chains["path_ns"].tolist()
    # per rank, the others only see the collective: their own paths hold no host work of rank 1
    own = traceattr.critical_path(tmp_path, per_step=True, cache=False)
    assert not (own["key"] == "aten::_late_host_work").any() or \
        set(own[own["key"] == "aten::_late_host_work"]["rank"]) == {1}


def test_the_bound_is_the_finding(tmp_path):
    """summarize --by critical opens with what bounds the step: the kind holding most of the path, planted."""
    scenario, kinds, _ = scenarios.SCENARIOS["host_bound"]()
    path = scenario.write(tmp_path / "trace.json")
    result = run_cli("summarize", path, "--by", "critical", "--format", "csv", "--no-cache")
    assert result.returncode == 0, result.stderr
    top = max(kinds, key=kinds.get)
    share = kinds[top] / sum(kinds.values())
    line = next(line for line in result.stderr.splitlines() if line.startswith("traceattr: finding: "))
    assert f"the step is bound by {top}, {share:.0%} of the path" in line
    quiet = run_cli("summarize", path, "--by", "critical", "--format", "csv", "--no-cache", "-q")
    assert "finding:" not in quiet.stderr


@pytest.mark.parametrize("factor", ["-1", "nan", "inf", "1e308", "1000.5"])
def test_a_what_if_factor_out_of_range_is_one_line(factor, tmp_path):
    """A factor that would scale durations past int64 ns (or mean nothing) is refused where it enters."""
    scenario, _, _ = scenarios.SCENARIOS["host_bound"]()
    path = scenario.write(tmp_path / "trace.json")
    result = run_cli("summarize", path, "--by", "critical", "--what-if", f"aten::mm={factor}", "--no-cache")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().endswith("the factor must be a number from 0 to 1000")
