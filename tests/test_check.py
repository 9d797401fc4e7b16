"""traceattr check: every finding on hand-made traces with planted problems (counts and ns known exactly),
verdicts ok/warn/bad per file and overall, exit codes 0/1/2, JSON for CI, --clip-outliers side by side,
the one-line verdict in table headers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis.check import BAD, OK, WARN
from traceattr.pipelines.check import check_runs
from tracesets import checked, header_of
from clirun import run_cli

T0 = 1_795_993_600_000_000          # µs


def op(start, dur, pid=100, name="aten::mm", cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": pid, "ts": T0 + start, "dur": dur}


def kernel(start, dur, name="gemm", stream=7, corr=None):
    event = {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": T0 + start, "dur": dur}
    if corr is not None:
        event["args"] = {"correlation": corr}
    return event


def launch(start, corr, pid=100):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid,
            "ts": T0 + start, "dur": 1, "args": {"correlation": corr}}


def write(path, events, rank=0, world=1, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {"backend": "nccl", "rank": rank, "world_size": world}
    path.write_text(json.dumps({"distributedInfo": info, "traceEvents": events, **extra}))
    return path


def steps(n, rank_pid=100):
    return [op(i * 1_000, 1_000, pid=rank_pid, name=f"ProfilerStep#{i + 1}", cat="user_annotation")
            for i in range(n)]


def clean(n_kernels=10):
    """A window of 10 ms of host time with linked 10 µs gemms: nothing to report."""
    events = steps(10) + [op(0, 10_000)]
    for i in range(n_kernels):
        events += [launch(100 + i * 500, corr=i + 1), kernel(200 + i * 500, 10, corr=i + 1)]
    return events


def findings(report):
    table = report.findings
    shown = table[(table[S.COUNT] > 0) | (table["verdict"] != OK)]
    return {(row.path.rsplit("/", 1)[-1], row.check): (row.count, row.time_ns, row.verdict)
            for row in shown.itertuples()}


def test_a_clean_trace_is_ok(tmp_path):
    write(tmp_path / "rank0.json", clean())
    report = checked(traceattr.load(tmp_path, cache=False))
    assert report.verdict == OK and report.exit_code == 0 and findings(report) == {}
    assert report.line() == "ok"
    assert set(report.findings["check"]) >= {"same_stream_overlap", "longer_than_window", "missing_ranks"}


def test_a_single_corrupt_duration_is_bad_and_clipping_restores_the_numbers(tmp_path):
    # one gemm launched like the others runs 20 ms in a 10 ms window: longer than its window, 2000x its
    # median, and alone most of the device's busy time
    events = clean() + [launch(9_000, corr=99), kernel(9_100, 20_000, corr=99)]
    write(tmp_path / "rank0.json", events)
    ts = traceattr.load(tmp_path, cache=False)
    report = checked(ts)
    found = findings(report)
    assert found[("rank0.json", "longer_than_window")] == (1, 20_000_000, BAD)
    assert found[("rank0.json", "far_beyond_typical")] == (1, 20_000_000 - 10_000, BAD)
    assert report.verdict == BAD and report.exit_code == 2
    assert report.line().startswith("bad: longer than window (1), far beyond typical (1)")
    (run,), verdict = check_runs(str(tmp_path), clip=True, cache=False)
    clip = run.clip.iloc[0]
    assert verdict == BAD and clip[S.BUSY_NS] == 10 * 10_000 + 20_000_000
    assert clip["clipped_" + S.BUSY_NS] == 11 * 10_000 and clip["clipped_activities"] == 1
    # idle is window minus busy on both sides: the window (host and device span) is the same
    assert clip[S.IDLE_NS] + clip[S.BUSY_NS] == clip["clipped_" + S.IDLE_NS] + clip["clipped_" + S.BUSY_NS]


def test_an_outlier_that_is_not_most_of_the_device_is_a_warning(tmp_path):
    events = clean() + [kernel(1_000, 6_000, name="big_fused"), launch(8_000, corr=98),
                        kernel(8_000, 1_500, corr=98)]                     # 150x the gemm median, 1.5 ms
    write(tmp_path / "rank0.json", events)
    found = findings(checked(traceattr.load(tmp_path, cache=False)))
    assert found[("rank0.json", "far_beyond_typical")] == (1, 1_500_000 - 10_000, WARN)
    assert ("rank0.json", "longer_than_window") not in found


def test_every_warning_kind_with_its_count_and_ns(tmp_path):
    events = clean()
    events += [kernel(300, 10, name="late_copy", stream=9), kernel(305, 10, name="late_copy2", stream=9)]  # overlap 5 µs
    events += [kernel(1_500_000, 20, name="after_the_window", stream=11),  # 1.49 s after the host window
               kernel(900_000, 20, name="lagging", stream=11)]              # 0.89 s after: a lagging device
    events += [kernel(3_000, -4, name="negative", stream=12)]               # clamped
    events += [kernel(4_000, 30, stream=13, corr=777)]                      # dangling correlation
    write(tmp_path / "run" / "rank0.json", events, world=4,
          WARNING=["CUPTI dropped 12 activity records", "something else"])
    write(tmp_path / "run" / "rank1.json", clean()[:-20], rank=1, world=4)          # host only
    ts = traceattr.load(tmp_path / "run", cache=False)
    report = checked(ts)
    found = findings(report)
    assert found[("rank0.json", "same_stream_overlap")] == (1, 5_000, WARN)
    assert found[("rank0.json", "outside_window")] == (1, 20_000, WARN)
    assert found[("rank0.json", "clamped_durations")][::2] == (1, WARN)
    assert found[("rank0.json", "profiler_dropped")][::2] == (1, WARN)
    assert found[("<run>", "missing_ranks")] == (2, 0, WARN)             # world 4, ranks 0 and 1
    unlinked = report.findings.set_index(["path", "check"]).loc[(str(tmp_path / "run" / "rank0.json"), "unlinked")]
    assert "dangling correlation 1 (30000 ns)" in unlinked["detail"]
    assert report.verdict == WARN and report.exit_code == 1


def test_ranks_with_different_step_sets_and_unreadable_or_repeated_files(tmp_path):
    write(tmp_path / "rank0.json", clean())
    write(tmp_path / "rank1.json", [e for e in clean() if e["name"] != "ProfilerStep#10"], rank=1, world=2)
    write(tmp_path / "rank0.json", clean(), world=2)
    (results,), verdict = check_runs(str(tmp_path), cache=False)
    found = findings(results.report)
    assert found[("<run>", "step_sets_differ")][::2] == (1, WARN) and verdict == WARN
    (tmp_path / "rank2.json").write_text('{"traceEvents": [')                                # unreadable
    write(tmp_path / "rank1.again.json", clean(), rank=1, world=2)                # the same window twice
    (results,), verdict = check_runs(str(tmp_path), cache=False)
    found = findings(results.report)
    assert found[("rank2.json", "unreadable")][::2] == (1, BAD)
    assert found[("rank1.json", "overlapping_windows")][::2] == (1, BAD)
    assert verdict == BAD


def cli(*args):
    return run_cli(*args)           # in this process (tests/clirun.py): a process's exit code and output


def test_cli_exit_codes_json_and_the_verdict_in_table_headers(tmp_path):
    write(tmp_path / "good" / "rank0.json", clean())
    write(tmp_path / "bad" / "rank0.json", clean() + [launch(9_000, corr=99), kernel(9_100, 20_000, corr=99)])
    from traceattr.report.check import render_check
    good, verdict = check_runs(str(tmp_path / "good"), cache=False)
    assert verdict == OK and "verdict: ok" in render_check(good, verdict, "good", "markdown", None)
    bad = cli("check", tmp_path / "bad", "--format", "json", "--clip-outliers", "--no-cache", "-q")
    assert bad.returncode == 2, bad.stderr
    document = json.loads(bad.stdout)
    assert document["verdict"] == BAD and document["exit_code"] == 2
    (run,) = document["runs"]
    assert [f["verdict"] for f in run["files"] if f["path"] != "<run>"] == [BAD]
    assert {f["check"] for f in run["findings"] if f["verdict"] == BAD} == {"longer_than_window",
                                                                              "far_beyond_typical"}
    assert run["clipped"][0]["clipped_busy_ns"] == 11 * 10_000
    both = cli("check", tmp_path, "--format", "csv", "--no-cache", "-q")     # two runs: each checked
    assert both.returncode == 2 and set(pd.read_csv(io.StringIO(both.stdout))["run"]) == {"good", "bad"}
    header = header_of(traceattr.load(tmp_path / "bad", cache=False))
    assert header["check"].startswith("bad: longer than window (1)")
    table = cli("summarize", tmp_path / "bad", "--format", "markdown", "--no-cache", "-q")
    assert "- check: bad: longer than window (1)" in table.stdout


def test_an_unreadable_file_beside_several_runs_is_reported_once(tmp_path):
    """It belongs to no run: it was listed, and counted bad, in every run's report (two clean runs showed
    'files: 1 bad' and verdict bad each)."""
    write(tmp_path / "control" / "rank0.json", clean())
    write(tmp_path / "test" / "rank0.json", clean())
    (tmp_path / "rank7.json").write_text("{ broken")
    done = cli("check", tmp_path, "--format", "json", "--no-cache", "-q")
    assert done.returncode == 2, done.stderr
    document = json.loads(done.stdout)
    runs = {run["run"]: run for run in document["runs"]}
    assert set(runs) == {"control", "test", "(files in no run)"} and document["verdict"] == BAD
    assert runs["control"]["verdict"] == runs["test"]["verdict"] == OK
    unreadable = [f for run in runs.values() for f in run["findings"] if f["check"] == "unreadable"]
    assert [f["path"] for f in unreadable] == [str(tmp_path / "rank7.json")]
    table = cli("check", tmp_path, "--no-cache", "-q", "--format", "markdown").stdout
    assert table.count("rank7.json") == 2       # the header's note and the finding's row, once
    assert "one of 2 runs" in table and "belong to none of its runs" in table


def test_a_late_device_timestamp_does_not_push_a_window_onto_the_next(tmp_path):
    """Found on planted truth: one kernel 1.5 s after window 0's host events (outside_window, a warn) made
    that window overlap the rank's next one, 1 s later: check said bad (overlapping_windows, 'the same
    capture twice?') and summarize refused the folder. Windows are placed by their host events' span."""
    shift = 1_000_000          # window 1 starts 1 s after window 0 (µs)
    later = [{**e, "ts": e["ts"] + shift} for e in clean()]
    write(tmp_path / "w0" / "rank0.json", clean() + [launch(9_000, corr=99), kernel(1_511_000, 20, corr=99)])
    write(tmp_path / "w1" / "rank0.json", later)
    done = cli("check", tmp_path, "--format", "json", "--no-cache", "-q")
    assert done.returncode == 1, done.stderr        # warn
    (run,) = json.loads(done.stdout)["runs"]
    assert {(f["check"], f["verdict"]) for f in run["findings"] if f["verdict"] != OK} == {
        ("outside_window", WARN), ("windows_overlap", WARN)}          # it lands 0.5 s into window 1
    ts = traceattr.load(tmp_path, cache=False)
    assert ts.files.column(S.WINDOW).to_pylist() == [0, 1]
    assert int(traceattr.summarize(ts, by="rank")[S.BUSY_NS].sum()) == 2 * 10 * 10_000 + 20_000


def test_a_capture_that_did_not_end_cleanly_is_a_warning(tmp_path):
    """Found by a search: a rank killed in stop() left its manifest 'running' and windows that read fine,
    and check said ok (exit 0): only traceattr.capture.read_run knew. Now its manifests are checked too."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "capture_cpu_2rank", run)
    clean = cli("check", run, "--format", "json", "--no-cache", "-q")
    assert clean.returncode == 0, clean.stdout
    manifest = run / "rank1" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "state": "running"}))
    done = cli("check", run, "--format", "json", "--no-cache", "-q")
    assert done.returncode == 1, done.stderr
    (found,) = json.loads(done.stdout)["runs"]
    rows = [f for f in found["findings"] if f["check"] == "capture_incomplete"]
    assert [(r["count"], r["verdict"]) for r in rows] == [(1, WARN)] and "rank 1: state 'running'" in rows[0]["detail"]


def test_a_device_timestamp_inside_the_next_window_is_a_warning(tmp_path):
    """Re-measured on planted truth after windows were placed by their host span: a kernel stamped 20 ms
    late, on top of window 1's first kernel, was refused before (the same capture twice) and then passed
    check without a word, while rank 0's idle time grew by the gap between the windows."""
    shift = 20_000                 # window 1 starts 20 ms after window 0 (µs)
    later = [{**e, "ts": e["ts"] + shift} for e in clean()]
    write(tmp_path / "w0" / "rank0.json", clean() + [launch(9_000, corr=99), kernel(shift + 200, 20, corr=99)])
    write(tmp_path / "w1" / "rank0.json", later)
    done = cli("check", tmp_path, "--format", "json", "--no-cache", "-q")
    assert done.returncode == 1, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    rows = {f["check"]: f for f in run["findings"] if f["verdict"] != OK}
    assert set(rows) == {"windows_overlap"} and rows["windows_overlap"]["count"] == 1
    # the late kernel ends 220 µs after window 1's first event
    assert rows["windows_overlap"]["time_ns"] == (200 + 20) * 1_000


def test_summarize_says_what_a_capture_folders_manifests_say(tmp_path):
    """The same capture folder (a rank's manifest still 'running'): summarize's tables were fine and said
    nothing; the header now quotes the manifests, also when the answer comes from the cache, and a change
    of a manifest alone is a new answer."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "capture_cpu_2rank", run)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for by in ("kernel", "rank"):              # --by rank reads the traces and stores its answer
        assert "capture:" not in cli("summarize", run, "--by", by, "--format", "markdown", *cache).stdout
    manifest = run / "rank1" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "state": "running"}))
    for by in ("kernel", "rank", "rank"):       # the stored answer is not reused: the manifest changed
        shown = cli("summarize", run, "--by", by, "--format", "markdown", *cache).stdout
        assert "- note: capture: rank 1: state 'running'" in shown, shown
    assert "source: cached result" in shown


def test_capture_problems_are_found_above_and_inside_a_capture_folder(tmp_path):
    """With run_name (out_dir/<run>/rank*/), as docs/capture.md recommends, `check out_dir` and `check
    out_dir/<run>/rank1` said ok (exit 0) for a capture whose rank 1 never stopped, and summarize's headers
    said nothing: only the capture folder itself was looked at, and with several runs the problems were
    dropped. Each run now gets its own capture's problems, named by folder."""
    import shutil

    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "capture_cpu_2rank"
    out = tmp_path / "out"
    for name in ("runA", "runB"):          # the same capture twice: two runs (ranks overlap in time)
        shutil.copytree(sample, out / name)
    manifest = out / "runA" / "rank1" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "state": "running"}))

    def incomplete(path):
        done = cli("check", path, "--format", "json", "--no-cache", "-q")
        assert done.returncode == 1, done.stderr
        return {run["run"]: [f["detail"].split(":")[:-1] for f in run["findings"]
                             if f["check"] == "capture_incomplete" and f["verdict"] == WARN]
                for run in json.loads(done.stdout)["runs"]}

    assert incomplete(out) == {"runA": [["runA", " rank 1", " state 'running'"]], "runB": []}
    assert incomplete(out / "runA" / "rank1") == {".": [["rank 1", " state 'running'"]]}
    shown = cli("summarize", out, "--by", "category", "--format", "markdown", "--no-cache", "-q").stdout
    runs = shown.split("run: ")[1:]
    assert len(runs) == 2 and runs[0].startswith("runA") and "- note: capture: runA: rank 1: state 'running'" \
        in runs[0] and "capture:" not in runs[1], shown


def test_the_people_table_shows_each_detail_whole_and_paths_under_the_checked_one(tmp_path):
    """A check's detail was cut in the middle at 90 characters, which dropped the very figure it gave
    (`raw 1…figures use`: the offending rank and offset), and paths were folded `synthetic_ / 2rank/rank0.pt.
    trace.jso / n.gz` in a 24-column cell beside empty space; the header's note said only `<run>: warn`.
    The run: the sample's ranks uncoupled, rank 1 starting 1 ms later (read as its clock 1 ms ahead)."""
    from traceattr.builder import TraceSpec, write_trace_set
    from traceattr.report.check import render_check
    from test_sample_traces import _script

    spec = {**_script().SYNTHETIC_SPEC, "coupled_collectives": False, "steps": (10, 11, 12)}
    write_trace_set(tmp_path / "synthetic_2rank", TraceSpec(**spec))
    root = str(tmp_path / "synthetic_2rank")
    results, verdict = check_runs(root, cache=False, jobs=1)
    detail = results[0].report.findings.set_index("check").loc["clock_skew", "detail"]
    assert verdict == WARN and len(detail) > 90 and "rank 1 +" in detail, detail
    for width in (200, 130, 100):
        text = render_check(results, verdict, root, "table", None, width=width)
        lines = text.splitlines()
        assert max(map(len, lines)) <= width, width
        assert "…" not in text and "synthetic_2rank/rank" not in text, text
        assert "note: the run as a whole: warn (clock_skew)" in text, text
        table = lines[next(i for i, line in enumerate(lines) if line.startswith("rank ")):]
        assert "window" not in table[0], table[0]     # every window is 0: no column of zeros
        rows = [line for line in table[2:] if line.strip()]
        assert [row.split()[1] for row in rows if not row.startswith(" " * 6)] == [
            "<run>", "rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"], rows
        # the detail, folded in its column, reads whole when its pieces are joined
        start = table[0].index("detail")
        assert " ".join(" ".join(row[start:].split()) for row in rows[:rows.index(next(
            r for r in rows if "rank0.pt" in r))]) == detail, rows
    whole = json.loads(render_check(results, verdict, root, "json", None))
    assert {f["path"] for f in whole["runs"][0]["files"]} - {"<run>"} == {
        str(Path(root) / "rank0.pt.trace.json.gz"), str(Path(root) / "rank1.pt.trace.json.gz")}


def test_a_file_that_recorded_nothing_is_a_warning_on_both_paths(tmp_path):
    """Found by a trial: a trace with no events at all (a profiler window that never became active) checked
    ok. A file with only metadata and an instant is as empty; a CPU-only trace is not."""
    write(tmp_path / "rank0.json", [], world=3)
    write(tmp_path / "rank1.json", [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}},
                                    {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": T0, "s": "t"}], rank=1, world=3)
    write(tmp_path / "rank2.json", steps(3), rank=2, world=3)
    by_file = checked(traceattr.load(tmp_path, cache=False)).findings.set_index([S.PATH, "check"])
    (result,), verdict = check_runs(str(tmp_path), cache=False, jobs=1)        # the per-file map-reduce
    mapped = result.report.findings.set_index([S.PATH, "check"])
    for table in (by_file, mapped):
        empty = table.xs("empty", level="check")
        assert [Path(p).name for p in empty.index[empty["verdict"] == WARN]] == ["rank0.json", "rank1.json"]
        assert empty["detail"].tolist()[:2] == ["0 events, none with a time", "2 events, none with a time"]
    assert verdict == WARN


def test_ranks_beyond_the_world_size_are_a_finding(tmp_path):
    """Found by a trial: four ranks whose files all said world_size 2 checked ok (exit 0), while summarize
    noted 'rank 2 is outside distributedInfo.world_size 2'."""
    from traceattr.builder.multirank import MultiRankSpec, build_multirank

    build_multirank(MultiRankSpec(ranks=4, steps=2), tmp_path)
    for path in tmp_path.glob("rank*.pt.trace.json"):
        path.write_text(path.read_text().replace('"world_size": 4', '"world_size": 2'))
    (result,), verdict = check_runs(str(tmp_path), cache=False, jobs=1)
    found = result.report.findings.set_index("check")
    assert verdict == WARN and found.loc["ranks_beyond_world", "verdict"] == WARN
    assert found.loc["ranks_beyond_world", S.COUNT] == 2
    assert found.loc["ranks_beyond_world", "detail"] == "world size 2 (distributedInfo), yet rank(s) 2, 3 found"
    run = cli("check", tmp_path, "--no-cache")
    assert run.returncode == 1 and "ranks_beyond_world" in run.stdout, (run.stdout, run.stderr)
    # the files agreeing with their world: the check is listed ok
    (result,), _ = check_runs(str(Path(__file__).parent.parent / "sample_traces" / "synthetic_2rank"), cache=False)
    assert result.report.findings.set_index("check").loc["ranks_beyond_world", "verdict"] == OK


def test_ranks_the_process_groups_name_are_missing_ranks_without_a_world_size(tmp_path):
    """Found by a trial: four ranks without distributedInfo, rank 1's file gone: check said ok (exit 0),
    as missing_ranks read the world size alone, while summarize noted that the collectives lacked rank 1.
    The process groups' ranks now say which are missing when no world size does, by map-reduce and on a
    loaded TraceSet alike."""
    from traceattr.builder.multirank import MultiRankSpec, build_multirank

    build_multirank(MultiRankSpec(ranks=4, steps=2), tmp_path)
    for path in tmp_path.glob("rank*.pt.trace.json"):
        trace = json.loads(path.read_text())
        del trace["distributedInfo"]
        path.write_text(json.dumps(trace))
    (whole,), verdict = check_runs(str(tmp_path), cache=False, jobs=1)
    assert verdict == OK, whole.report.findings
    (tmp_path / "rank1.pt.trace.json").unlink()
    (result,), verdict = check_runs(str(tmp_path), cache=False, jobs=1)
    row = result.report.findings.set_index("check").loc["missing_ranks"]
    assert verdict == WARN and row["verdict"] == WARN and row[S.COUNT] == 1
    assert row["detail"] == ("no world size (distributedInfo); the collectives' process groups name 4 rank(s), "
                             "3 found; missing: 1")
    loaded = checked(traceattr.load(tmp_path, cache=False, jobs=1)).findings.set_index("check")
    assert loaded.loc["missing_ranks", "detail"] == row["detail"]


@pytest.mark.parametrize("text, ranks", [
    ("[0, 1, 2]", (0, 1, 2)), ("[3]", (3,)), ("[ 5 , 6 ]", (5, 6)), (" [0,1] ", (0, 1)), ("[]", None),
    ("[1,,2]", (1, 2)), ("[1, x]", None), ("[1 2]", None), ("1,2", None), ("[1234567890]", None), ("[-1, 2]", None),
    ("[1,]", (1,)), ("[,1]", (1,)), ("[0, 0, 1]", None), ("[\u00b2]", None), ("[" + "9" * 12 + "]", None),
    ("[\u0663]", None)])
def test_group_ranks_are_read_in_numpy_as_collectives_read_them(text, ranks):
    """The one reader of `Process Group Ranks` (a hostile group of 2 M ranks as Python ints took 7 s and 290 MB,
    and a grouped regex 467 MB): what the tuple parser accepted, and ASCII digits only ('٣' read as 3)."""
    import warnings

    from traceattr.analysis.check import group_ranks_named
    from traceattr.analysis.collectives import parse_ranks, rank_array

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = rank_array(text)
        assert (None if found is None else tuple(found.tolist())) == ranks == parse_ranks(text)
        assert group_ranks_named([text, "[7, 3]"]).tolist() == sorted({7, 3} | set(ranks or ()))


def test_the_python_check_reports_planted_problems_as_the_command_does(tmp_path):
    """traceattr.check(path or TraceSet): the command's verdict, exit code, problems and notes per run."""
    write(tmp_path / "rank0.json", clean(), world=3)                                 # rank 2 missing
    write(tmp_path / "rank1.json", clean() + [launch(9_000, corr=99), kernel(9_100, 20_000, corr=99)],
          rank=1, world=3)                                                           # 20 ms: far beyond, longer
    (tmp_path / "rank3.json").write_text('{"traceEvents": [')                         # unreadable
    result = traceattr.check(tmp_path, cache=False, jobs=1)
    assert result.verdict == BAD and result.exit_code == 2
    (run,) = result.runs
    assert run.verdict == BAD and run.name == "."
    problems = {(p.rsplit("/", 1)[-1], c): (n, v) for p, c, n, v in
                zip(run.problems[S.PATH], run.problems["check"], run.problems[S.COUNT], run.problems["verdict"])}
    assert problems == {("rank3.json", "unreadable"): (1, BAD), ("rank1.json", "longer_than_window"): (1, BAD),
                        ("rank1.json", "far_beyond_typical"): (1, BAD), ("<run>", "missing_ranks"): (1, WARN)}
    assert sorted(note.rsplit("/", 1)[-1] for note in run.notes) == [
        "rank1.json: bad (longer_than_window, far_beyond_typical)", "rank3.json: bad (unreadable)",
        "the run as a whole: warn (missing_ranks)"]
    assert len(run.findings) > len(run.problems) and run.clip is None       # passed checks are listed too
    command = json.loads(cli("check", tmp_path, "--format", "json", "--no-cache", "-q").stdout)
    assert command["verdict"] == result.verdict and [r["verdict"] for r in command["runs"]] == [run.verdict]
    assert len(command["runs"][0]["findings"]) == len(run.findings)
    # a TraceSet is one run, the unreadable file a note of its load, so a finding here too; --clip-outliers
    loaded = traceattr.load(tmp_path, cache=False, jobs=1, skip_bad=True)
    (held,) = traceattr.check(loaded, clip=True).runs
    pd.testing.assert_frame_equal(held.findings, run.findings, check_exact=True)
    assert held.clip[S.CLIPPED_ACTIVITIES].tolist() == [0, 1]
    with pytest.raises(TypeError, match="jobs"):
        traceattr.check(loaded, jobs=2)                  # load options belong to a path
    with pytest.raises(TypeError, match="skip_bad"):
        traceattr.check(tmp_path, skip_bad=False)         # a check always skips, and says so in its findings
    with pytest.raises(TypeError, match="clip must be True or False"):
        traceattr.check(tmp_path, clip="yes")


def test_a_summarys_check_line_from_the_findings_alone_is_the_full_reports(tmp_path):
    """summarize's header reads the check's findings without the rows of checks passed (check.report_of
    listed=False): the same line, causes in the same order, as `traceattr check`'s whole report."""
    overlapping = clean() + [kernel(300, 10, name="a", stream=9), kernel(305, 10, name="b", stream=9)]
    write(tmp_path / "rank0.json", overlapping + [kernel(3_000, -4, name="negative", stream=12)], world=4)
    write(tmp_path / "rank1.json", overlapping + [kernel(4_000, 30, stream=13, corr=777)], rank=1, world=4)
    (results,), verdict = check_runs(str(tmp_path), cache=False)
    line = results.report.line()
    # run-level rows first, then file by file in the order of the checks; unlinked: a and b on both ranks, the
    # negative one and the dangling correlation
    assert verdict == WARN and line == ("warn: missing ranks (2), same stream overlap (2), clamped durations (1), "
                                        "unlinked (6) (traceattr check PATH for details)"), line
    assert header_of(traceattr.load(tmp_path, cache=False), by="op")["check"] == line
    table = cli("summarize", tmp_path, "--format", "markdown", "--no-cache", "-q", "--jobs", "2")   # the pool's fold
    assert f"- check: {line}" in table.stdout, table.stdout
