"""Several runs under one folder are recognised (world size, distributedInfo, process, time) and never
merged: load refuses naming them, load_runs and `summarize` give one report per run, compare needs one run
per side. Windows of one run in sibling folders stay one run."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest

import traceattr
from conftest import SAMPLE_TRACES
from traceattr import schema as S
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.builder.spec import QUARTER_YEAR_S, DEFAULT_BASE_NS
from traceattr.io.runs import SeveralRunsError
from tracesets import SMALL
from clirun import run_cli

SPEC = dict(SMALL, streams=(7,), dropped_records=0)


def cli(*args):
    return run_cli(*args)           # in this process (tests/clirun.py): a process's exit code and output


def names(path, **kw) -> list[str]:
    return [name for name, _ in traceattr.load_runs(path, cache=False, **kw)]


def test_control_and_test_runs_in_sibling_folders_are_never_merged(tmp_path):
    write_trace_set(tmp_path / "control", TraceSpec(ranks=2, seed=1, **SPEC))
    write_trace_set(tmp_path / "test", TraceSpec(ranks=2, seed=2, **SPEC))      # same ranks, same time
    with pytest.raises(SeveralRunsError, match="2 separate runs") as caught:
        traceattr.load(tmp_path, cache=False)
    assert "control (2 files, world 2)" in str(caught.value) and sorted(caught.value.runs) == ["control", "test"]
    runs = dict(traceattr.load_runs(tmp_path, cache=False))
    assert sorted(runs) == ["control", "test"]
    for name, ts in runs.items():
        assert ts.ranks == [0, 1] and ts.files.num_rows == 2
        assert all(f"/{name}/" in p for p in ts.files.column(S.PATH).to_pylist())
    # compare (and convert, through the same open_traces) needs exactly one run per side
    refused = cli("compare", tmp_path, tmp_path / "control", "--no-cache", "-q")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "2 separate runs" in refused.stderr and "control" in refused.stderr


def test_world_sizes_far_apart_times_and_other_processes_split_runs(tmp_path):
    write_trace_set(tmp_path / "eight", TraceSpec(ranks=2, world_size=8, seed=1, **SPEC))
    write_trace_set(tmp_path / "two", TraceSpec(ranks=(2, 3), seed=1, **SPEC))  # other ranks, same time
    assert names(tmp_path) == ["eight", "two"]
    later = DEFAULT_BASE_NS + QUARTER_YEAR_S * 10**9                                 # 91 days later
    far = tmp_path / "far"
    write_trace_set(far / "a", TraceSpec(ranks=(0,), world_size=2, seed=1, **SPEC))
    write_trace_set(far / "b", TraceSpec(ranks=(1,), world_size=2, seed=1, base_time_ns=later, **SPEC))
    assert names(far) == ["a", "b"]
    # one folder, two world sizes: two runs even there
    mixed = tmp_path / "mixed"
    write_trace(mixed / "rank0.json", TraceSpec(ranks=(0,), world_size=2, seed=1, **SPEC), rank=0)
    write_trace(mixed / "rank1.json", TraceSpec(ranks=(1,), world_size=4, seed=1, **SPEC), rank=1)
    assert sorted(names(mixed)) == [".", ". #2"]


def _window(path, rank: int, pid: int, start_us: int) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": start_us, "dur": 50},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": start_us + 10, "dur": 20}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
                                "traceEvents": events}))


def test_windows_of_one_job_in_sibling_folders_stay_one_run(tmp_path):
    """torchtitan writes iteration_{N}/rank{R}_trace.json: one process per rank, windows minutes apart."""
    t0 = 1_795_993_600_000_000
    for n, offset in ((10, 0), (20, 600_000_000)):
        for rank in (0, 1):
            _window(tmp_path / f"iteration_{n}" / f"rank{rank}_trace.json", rank, 100 + rank, t0 + offset)
    ts = traceattr.load(tmp_path, cache=False)
    assert ts.ranks == [0, 1] and ts.files.column(S.WINDOW).to_pylist() == [0, 1, 0, 1]
    # the same layout from a restarted job (new processes) is two runs
    _window(tmp_path / "iteration_30" / "rank0_trace.json", 0, 555, t0 + 1_200_000_000)
    assert names(tmp_path) == [".", "iteration_30"]


def test_sample_traces_folder_reports_each_run():
    from traceattr.pipelines.summarize import summary_report
    from traceattr.report.summarize import render_report

    runs = dict(traceattr.load_runs(SAMPLE_TRACES, cache=False))
    assert sorted(runs) == ["capture_cpu_2rank", "capture_cuda_2stream/rank0", "cpu_torch213", "synthetic_2rank"]
    assert runs["capture_cpu_2rank"].ranks == [0, 1] and runs["synthetic_2rank"].ranks == [0, 1]
    out = cli("summarize", SAMPLE_TRACES, "--by", "rank", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    assert list(table.columns[:2]) == ["run", S.RANK]
    for name, ts in runs.items():       # each run's rows are that run's own table, nothing summed across
        mine = table[table["run"] == name].drop(columns="run").reset_index(drop=True)
        expected = traceattr.summarize(ts, by="rank").reset_index(drop=True)
        assert mine[S.BUSY_NS].tolist() == expected[S.BUSY_NS].tolist()
        assert mine[S.WINDOW_NS].tolist() == expected[S.WINDOW_NS].tolist()
    report = summary_report(str(SAMPLE_TRACES), by="kernel", top=2, cache=False)
    people = render_report(report, "markdown", None, 120)
    assert people.count("### ") == 4
    assert "- run: synthetic_2rank (" in people and "never merged" in people


def _without_distributed_info(path) -> None:
    document = json.loads(path.read_text())
    document.pop("distributedInfo")
    path.write_text(json.dumps(document))


def test_a_rank_written_without_distributed_info_joins_the_job_whose_world_lacks_it(tmp_path):
    """Found from outside: 4 ranks, rank 0's file without distributedInfo (named rank0, recorded while the
    others ran, the one rank their world of 4 lacks) was split into a run of its own: --by rank said rank 0
    was missing and compare refused the folder. It is one run; a file without distributedInfo stays apart
    when its rank is not one the world lacks, when nothing names its rank, or when it ran at another time."""
    spec = TraceSpec(ranks=(0, 1, 2, 3), seed=1, **SPEC)
    write_trace_set(tmp_path / "one", spec)
    _without_distributed_info(tmp_path / "one" / "rank0.pt.trace.json")
    assert names(tmp_path / "one") == ["."]
    loaded = traceattr.load(tmp_path / "one", cache=False)
    assert sorted(set(loaded.files.column(S.RANK).to_pylist())) == [0, 1, 2, 3]
    table = traceattr.summarize(tmp_path / "one", by="rank", cache=False, jobs=1)
    assert sorted(table[S.RANK].tolist()) == [0, 1, 2, 3]
    # the same rank twice (rank 1 again, without distributedInfo): two runs, as before
    twice = tmp_path / "twice"
    write_trace_set(twice, TraceSpec(ranks=(0, 1, 2, 3), seed=1, **SPEC))
    write_trace(twice / "extra" / "rank1.pt.trace.json", TraceSpec(ranks=(1,), world_size=4, seed=2, **SPEC), rank=1)
    _without_distributed_info(twice / "extra" / "rank1.pt.trace.json")
    assert len(names(twice)) == 2
    # no name says its rank (it would load as rank 0): apart
    unnamed = tmp_path / "unnamed"
    write_trace_set(unnamed, TraceSpec(ranks=(1, 2, 3), world_size=4, seed=1, **SPEC))
    write_trace(unnamed / "trace.json", TraceSpec(ranks=(0,), world_size=4, seed=1, **SPEC), rank=0)
    _without_distributed_info(unnamed / "trace.json")
    assert len(names(unnamed)) == 2
    # 91 days later: another job
    later = tmp_path / "later"
    write_trace_set(later, TraceSpec(ranks=(1, 2, 3), world_size=4, seed=1, **SPEC))
    write_trace(later / "rank0.pt.trace.json", TraceSpec(ranks=(0,), world_size=4, seed=1,
                                                         base_time_ns=DEFAULT_BASE_NS + QUARTER_YEAR_S * 10**9,
                                                         **SPEC), rank=0)
    _without_distributed_info(later / "rank0.pt.trace.json")
    assert len(names(later)) == 2


def test_several_runs_keep_integers_integer_in_machine_formats():
    """Runs of different kinds have different columns (a one-rank run has rank and device columns, a
    several-rank run min/max rank columns instead): the stacked csv
    must still print nanoseconds and ranks as integers (not 1143148.0), blank where a run lacks the column."""
    out = cli("summarize", SAMPLE_TRACES, "--by", "kernel", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {row["run"] for row in rows} >= {"synthetic_2rank", "capture_cuda_2stream/rank0"}
    for column in ("ranks", "count", "self_ns", "min_self_ns", "min_rank", "max_self_ns", "max_rank"):
        values = [row[column] for row in rows if row[column] != ""]
        assert values and all(value.lstrip("-").isdigit() for value in values), (column, values[:5])


def test_the_api_on_a_folder_of_several_runs_gives_one_table_with_a_run_column(tmp_path):
    """Issue 37: traceattr.summarize("folder with two runs") raised SeveralRunsError where the CLI reports each
    run. Each run's rows are what the run's own folder gives (planted: two runs of different busy time)."""
    write_trace_set(tmp_path / "control", TraceSpec(ranks=2, seed=1, **SPEC))
    write_trace_set(tmp_path / "test", TraceSpec(ranks=2, seed=2, rank_scale={1: 1.5}, **SPEC))
    for by, call in (("kernel", traceattr.summarize), ("rank", traceattr.summarize), ("op", traceattr.attribute)):
        table = call(tmp_path, by=by, cache=False, jobs=1)
        assert table.columns[0] == S.RUN and sorted(table.attrs["runs"]) == ["control", "test"], by
        for name in ("control", "test"):
            alone = call(tmp_path / name, by=by, cache=False, jobs=1).reset_index(drop=True)
            mine = table[table[S.RUN] == name].drop(columns=S.RUN).reset_index(drop=True)
            pd.testing.assert_frame_equal(mine, alone, check_dtype=False, obj=f"{by} {name}")


def test_a_note_about_the_folder_is_said_once_not_in_every_run(tmp_path):
    """A file skipped under PATH is the folder's, not a run's: one line, however many runs the folder holds."""
    import shutil

    for name in ("synthetic_2rank", "cpu_torch213"):
        shutil.copytree(SAMPLE_TRACES / name, tmp_path / name)
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    for fmt in ("table", "csv"):
        out = cli("summarize", tmp_path, "--no-cache", "-q", "--format", fmt)
        assert out.returncode == 0, out.stderr
        said = (out.stdout + out.stderr).count("config.json")
        assert said == 1, (fmt, said)


@pytest.mark.parametrize("by", ["rank", "collective", "step", "kernel"])
def test_several_one_rank_gpu_runs_stack_at_every_multirank_level(tmp_path, by):
    """`summarize --by rank` on a folder of unrelated one-rank GPU runs (TraceLens's mi300 folder) raised a
    pandas traceback: each run's table carried its straggler facts (frames) in attrs, which pandas compares
    when it stacks tables. Every run's rows must equal what its own file gives."""
    for seed in (1, 2):
        write_trace(tmp_path / f"job{seed}" / "trace.json", TraceSpec(ranks=1, seed=seed, **SPEC))
    out = cli("summarize", tmp_path, "--by", by, "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {row["run"] for row in rows} == {"job1", "job2"}, rows[:3]
    for seed in (1, 2):
        alone = list(csv.DictReader(io.StringIO(cli("summarize", tmp_path / f"job{seed}", "--by", by, "--format",
                                                    "csv", "--no-cache", "-q").stdout)))
        mine = [{k: v for k, v in row.items() if k != "run"} for row in rows if row["run"] == f"job{seed}"]
        assert mine == alone, by
