"""`traceattr summarize PATH` by per-file map-reduce (analysis/run_tables.py), every level but rank and
collective, on builder sets of 1 and 8 ranks with several windows and on several runs under one folder: the
header's files, ranks, windows, activities, busy and summed durations and the kernel table's counts and
durations are the builder's planted truth; every device table adds up to busy; a loaded TraceSet of the same
files gives the same table and header. The check by map-reduce (analysis/check_plan.py) finds exactly
the planted far-beyond kernels, clock offsets, missing ranks, differing step sets, unreadable and repeated
files, and its rows are those of `traceattr check` (the links plan); the CLI's driver never holds a TraceSet
of device rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import traceattr
from clirun import run_cli, run_cli_counting
from traceattr import schema as S
from traceattr.analysis.check import BAD, WARN
from traceattr.analysis.summary_plan import reduce_path
from traceattr.analysis.check_plan import EXTRACT, bucket_of, check_report, lower_bound
from traceattr.builder import TraceSpec, write_trace
from traceattr.errors import TraceError
from traceattr.builder.multirank import MultiRankSpec, build_multirank
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from traceattr.io.results import multirank_options
from traceattr.pipelines import summarize
from traceattr.report.summarize import Report, render_report
from traceattr.pipelines.check import check_runs
from test_check import clean, findings, kernel, launch, write
from tracesets import SMALL

LEVELS = ("kernel", "category", "op", "op_stack", "module", "annotation", "step")
MULTIRANK = multirank_options((), True, False)


def _ran(command: list[str], counting: bool = False):
    """`traceattr *command` run to the end with exit 0, in this process (tests/clirun.py); else the failure
    shows its stderr. With `counting`: (the run, the most device rows of a TraceSet the driver built)."""
    done, biggest = run_cli_counting(*command) if counting else (run_cli(*command), None)
    assert done.returncode == 0, f"exit {done.returncode}: {' '.join(command[-8:])}\n{done.stderr[-3000:]}"
    return (done, biggest) if counting else done


def report(path, by, top=None, tree=False, links=False, per_rank=False, skip_bad=False, rank_map=None):
    """summarize's report of the traces under `path` (or of a loaded TraceSet), cache off, in this process."""
    return summarize._from_traces(path if isinstance(path, traceattr.TraceSet) else str(path), by, top, tree, links,
                                  skip_bad, 1, False, False, None, rank_map, None, MULTIRANK,
                                  summarize._across(by, per_rank) and not (tree or links))


def assert_true_reports(path, by, truths=None, **options) -> Report:
    """The report of each run adds up, holds the planted truth (`truths`: {run name: [TraceTruth]}, "."
    for one run), and is what the run's files loaded whole as a TraceSet give."""
    got = report(path, by, **options)
    runs = got.runs or [(".", got)]
    for name, mine in runs:
        assert_adds_up(mine, by, options)
        if truths is not None:
            assert_truth(mine, truths[name], by)
        if not options.get("skip_bad") and not options.get("rank_map"):     # load() places files by itself
            loaded = report(traceattr.load(Path(path) / name, cache=False, jobs=1), by,
                            **{k: v for k, v in options.items() if k not in ("skip_bad", "rank_map")})
            pd.testing.assert_frame_equal(mine.table, loaded.table, check_exact=True)
            assert {**mine.header, "source": "", "run": ""} == {**loaded.header, "source": "", "run": ""}, by
    return got


def assert_truth(report: Report, truths: list, by: str) -> None:
    """Header facts and kernel rows against what the builder wrote (each TraceTruth one file)."""
    header, table = report.header, report.table
    assert header["files"] == header["windows"] == len(truths)
    assert header["ranks"] == sorted({t.rank for t in truths})
    assert header["activities"] == sum(len(t) for t in truths)
    assert header["busy_ns"] == sum(t.busy_ns for t in truths)
    assert header["duration_ns"] == sum(d.sum_duration_ns for t in truths for d in t.devices.values())
    if by == "kernel" and S.NAME in table:
        want = {}
        for truth in truths:
            for name, start, end in zip(*(truth.activities[k] for k in ("name", "start_ns", "end_ns"))):
                count, ns = want.get(name, (0, 0))
                want[name] = (count + 1, ns + end - start)
        summed = table.groupby(S.NAME)[[S.COUNT, S.DURATION_NS]].sum()
        got = {name: (int(row[S.COUNT]), int(row[S.DURATION_NS])) for name, row in summed.iterrows()}
        folded = got.pop("<other>", (0, 0))         # --top: the rest in one row, which still adds up
        assert {name: want[name] for name in got} == got
        assert tuple(map(sum, zip(*(want[name] for name in set(want) - set(got))))) in ((), folded)


def assert_adds_up(report: Report, by: str, options: dict) -> None:
    """Σ self == busy: the table over all ranks or per (rank, device), <other> and <unattributed> included."""
    table, header = report.table, report.header
    if options.get("tree") or options.get("links") or "busy_ns" not in header or table.empty or \
            table.attrs.get("time_kind", "device") != "device":
        return
    assert int(table[S.SELF_NS].sum()) == header["busy_ns"], by


def assert_same_check(folder, by="op"):
    """The summary's check by map-reduce (the plan of level `by`: kernel levels leave the cpu ops out, and
    the trace window is the span of the host rows) has the rows of `traceattr check` (the links plan), the
    unlinked ones included: the launch statuses are taken before the cpu ops go (engine/units.py)."""
    reduced, runner = reduce_path(folder, by=by, jobs=1, cache=False, extracts=(EXTRACT,))
    got = check_report(reduced, runner)
    (run,), _ = check_runs(str(folder), cache=False, jobs=1)
    pd.testing.assert_frame_equal(got.findings, run.report.findings, check_exact=True)
    return got


def test_buckets_are_exact_and_ordered():
    values = pd.Series([0, 1, 15, 16, 17, 31, 32, 10_900, 2**40 + 12345, 86_400 * 10**9]).to_numpy()
    buckets = bucket_of(values)
    assert (pd.Series(buckets).diff().dropna() >= 0).all()
    for value, bucket in zip(values.tolist(), buckets.tolist()):
        assert lower_bound(bucket) <= value < lower_bound(bucket + 1)
        assert lower_bound(bucket) > value / 1.13 or value < 16      # 8 buckets per octave: within 9%
    assert lower_bound(0, shortest=-5) == -5


def windows(folder, ranks, count, **extra) -> list:
    """`count` profiling windows of `ranks` in one folder (one run); the TraceTruth of each file."""
    seed = extra.pop("seed", 0)
    truths = []
    for window in range(count):
        spec = TraceSpec(ranks=ranks, **{**SMALL, "steps": (2 * window + 1, 2 * window + 2), **extra},
                         seed=seed + window, base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        for rank in spec.ranks:
            truths.append(write_trace(folder / f"w{window}_rank{rank}.pt.trace.json", spec, rank))
    return truths


def test_one_rank_in_three_windows_every_level(tmp_path):
    truths = {".": windows(tmp_path, (0,), 3)}
    for by in LEVELS:
        assert_true_reports(tmp_path, by, truths)
    assert_true_reports(tmp_path, "kernel", truths, top=2)
    assert_true_reports(tmp_path, "module", truths, tree=True, top=2)
    assert_true_reports(tmp_path, "op", links=True)
    assert_same_check(tmp_path, "kernel")


def test_eight_ranks_two_windows_every_level(tmp_path):
    truths = {".": windows(tmp_path, tuple(range(8)), 2, rank_scale={5: 1.4}, jitter=0.05, layers=1)}
    for by in ("kernel", "category", "step"):      # the 1-rank test has every level
        found = assert_true_reports(tmp_path, by, truths)
        assert found.table.attrs.get("across_ranks") == 8 or by == "step", by
    assert_true_reports(tmp_path, "kernel", truths, top=3)          # the kernel texts' codes, folded below the top 3
    assert_true_reports(tmp_path, "op", truths, per_rank=True, top=3)
    assert_true_reports(tmp_path, "module", truths, top=2)          # over all ranks, folded below the top 2
    assert found.header["ranks"] == list(range(8)) and found.header["windows"] == 16


def test_several_runs_are_reported_apart(tmp_path):
    truths = {"a": windows(tmp_path / "a", (0, 1), 1, layers=1),
              "b": windows(tmp_path / "b", (0, 1, 2, 3), 1, seed=3, layers=1)}      # another world size: another run
    found = assert_true_reports(tmp_path, "module", truths)
    runs = dict(found.runs)
    assert sorted(runs) == ["a", "b"] and runs["b"].header["ranks"] == [0, 1, 2, 3]


def test_skipped_and_foreign_files_and_a_rank_map_give_the_same_notes(tmp_path):
    truths = windows(tmp_path, (0, 1), 1, layers=1)
    (tmp_path / "rank2.pt.trace.json").write_text('{"traceEvents": [')              # broken
    (tmp_path / "config.json").write_text('{"lr": 0.1}')                            # not a trace
    swapped = {"w0_rank0.pt.trace.json": 1, "w0_rank1.pt.trace.json": 0}
    found = assert_true_reports(tmp_path, "kernel", {".": truths}, per_rank=True, skip_bad=True, rank_map=swapped)
    assert any("rank2.pt.trace.json" in note for note in found.header["notes"])
    busy = found.table.groupby(S.RANK)[S.SELF_NS].sum().to_dict()
    assert busy == {truth.rank: truth.busy_ns for truth in truths}      # distributedInfo wins over the map
    for good in tmp_path.glob("w0_*"):
        good.unlink()
    with pytest.raises(TraceError) as raised:     # nothing readable: one line that names the file skipped
        report(tmp_path, "op", skip_bad=True)
    assert "skipped " + str(tmp_path / "rank2.pt.trace.json") in str(raised.value)


def test_a_far_beyond_kernel_in_one_file_is_judged_on_the_run_median(tmp_path):
    # 10 µs gemms on both ranks; rank 1 also runs one for 20 ms (2000x the median, most of its device: bad)
    write(tmp_path / "rank0.json", clean(), world=4)                 # ranks 2 and 3 missing
    write(tmp_path / "rank1.json", clean() + [launch(9_000, corr=99), kernel(9_100, 20_000, corr=99)],
          rank=1, world=4)
    got = assert_same_check(tmp_path)
    found = findings(got)
    assert found[("rank1.json", "far_beyond_typical")] == (1, 20_000_000 - 10_000, BAD)
    assert found[("<run>", "missing_ranks")] == (2, 0, WARN)
    assert got.line().startswith("bad: longer than window (1), far beyond typical (1)")
    assert_same_check(tmp_path, "kernel")
    assert_true_reports(tmp_path, "kernel")
    # the first map on a process pool writes the file cache, the second map reads it
    shown = _ran(["summarize", str(tmp_path), "--jobs", "2", "-q", "--by", "category", "--format", "markdown",
                  "--cache-dir", str(tmp_path.with_name(tmp_path.name + "-cache"))]).stdout
    assert "- check: bad: longer than window (1), far beyond typical (1) " in shown


def test_a_median_between_buckets_and_a_near_miss(tmp_path):
    # gemm: six of 10.9 µs on rank 0, four of 11.5 µs on rank 1, and two long ones: the median is the mean
    # of two middle values in different buckets (11.2 µs). 1.05 ms is over 100x the median's bucket bound (10.24 µs) but not 100x the
    # median: a candidate the second map clears. 2.5 ms is far beyond, but not most of its device (warn).
    def gemms(duration, n):
        return [kernel(100 + i * 300, duration) for i in range(n)]
    write(tmp_path / "rank0.json", clean(0) + gemms(10.9, 6) + [kernel(5_000, 1_050)], world=2)
    write(tmp_path / "rank1.json", clean(0) + gemms(11.5, 4) + [kernel(5_000, 2_500), kernel(8_000, 6_000,
                                                                                             name="other")],
          rank=1, world=2)
    found = findings(assert_same_check(tmp_path))
    assert ("rank0.json", "far_beyond_typical") not in found
    assert found[("rank1.json", "far_beyond_typical")] == (1, 2_500_000 - 11_200, WARN)


def test_steps_that_differ_and_a_clean_run(tmp_path):
    write(tmp_path / "rank0.json", clean(), world=2)
    write(tmp_path / "rank1.json", [e for e in clean() if e["name"] != "ProfilerStep#10"], rank=1, world=2)
    found = findings(assert_same_check(tmp_path))
    assert found[("<run>", "step_sets_differ")][::2] == (1, WARN)
    (tmp_path / "rank1.json").unlink()
    write(tmp_path / "rank0.json", clean())
    assert assert_same_check(tmp_path).line() == "ok"


def test_the_check_command_finds_what_was_planted_in_each_run(tmp_path):
    # two runs (another world size in b), an unreadable file and a repeated window of rank 1 in a
    write(tmp_path / "a" / "rank0.json", clean(), world=2)
    write(tmp_path / "a" / "rank1.json", [e for e in clean() if e["name"] != "ProfilerStep#10"], rank=1, world=2)
    write(tmp_path / "a" / "rank1.again.json", clean(), rank=1, world=2)
    (tmp_path / "a" / "rank2.json").write_text('{"traceEvents": [')
    write(tmp_path / "b" / "rank0.json", clean() + [launch(9_000, corr=99), kernel(9_100, 20_000, corr=99)], world=3)
    got, verdict = check_runs(str(tmp_path), cache=False, jobs=1)                  # map-reduce
    clipped, clip_verdict = check_runs(str(tmp_path), clip=True, cache=False, jobs=1)  # --clip-outliers too
    assert verdict == clip_verdict == BAD and [r.name for r in got] == [r.name for r in clipped] == ["a", "b"]
    assert [r.report.verdict for r in got] == [BAD, BAD]
    for mine, mine_clipped in zip(got, clipped):
        pd.testing.assert_frame_equal(mine_clipped.report.findings, mine.report.findings, check_exact=True)
    # b's far-beyond kernel (20 ms, of its rank's 20.1 ms busy) is clipped to the 10 µs median
    b_clip = clipped[1].clip.iloc[0]
    assert b_clip[S.BUSY_NS] - b_clip[S.CLIPPED_PREFIX + S.BUSY_NS] == 20_000_000 - 10_000
    # exactly the planted problems
    # (the window of rank 1 kept is rank1.again.json's, with every step: no step set differs)
    assert set(findings(got[0].report)) == {("rank2.json", "unreadable"), ("rank1.json", "overlapping_windows")}
    assert set(findings(got[1].report)) == {("rank0.json", "far_beyond_typical"), ("rank0.json", "longer_than_window"),
                                            ("<run>", "missing_ranks")}
    found = findings(got[0].report)
    assert found[("rank2.json", "unreadable")][::2] == (1, BAD)
    assert not any(key[0] == "rank2.json" for key in findings(got[1].report))      # a's file, not b's
    assert found[("rank1.json", "overlapping_windows")][::2] == (1, BAD)
    assert findings(got[1].report)[("rank0.json", "far_beyond_typical")] == (1, 20_000_000 - 10_000, BAD)


def test_a_clock_offset_is_clock_skew(tmp_path):
    # several offsets and jittered ends: the alignment is a fixed point that any change in the rows or their
    # order would move (the check keeps the communication rows cut to what the skew reads)
    build_multirank(MultiRankSpec(ranks=4, steps=3, clock_offset_ns={1: 37_000, 2: 40_000_000, 3: -480_000},
                                  end_jitter_ns=1_000, seed=3), tmp_path)
    got = assert_same_check(tmp_path)
    skew = got.findings.set_index("check").loc["clock_skew"]
    assert skew[S.COUNT] >= 1 and skew["verdict"] == WARN and "rank 2 " in skew["detail"]
    assert_true_reports(tmp_path, "kernel")


# the driver's TraceSets: how many device rows the biggest one held (the pool workers are other processes)



def test_the_cli_driver_never_holds_the_traces(tmp_path):
    import dataclasses

    from traceattr.cli import Display

    windows(tmp_path, (0, 1), 2, layers=1)

    def cli(*extra):
        done, biggest = _ran(["summarize", str(tmp_path), "--jobs", "2", "--no-cache", "-q", "--format", "markdown",
                              *extra], counting=True)
        return done.stdout, biggest

    text, biggest = cli("--by", "module")
    assert biggest == 0                                    # map-reduce: header facts only, no device rows
    made = report(tmp_path, "module")         # shown as the command shows a header (cli.Display: -q, no -v)
    shown = dataclasses.replace(made, header=Display(str(tmp_path), quiet=True).header(made.header))
    assert text == render_report(shown, "markdown", None, None)
    assert "- check: " in text
    for extra in (("--by", "module", "--comm-pattern", "nothing_matches_this"), ("--by", "rank"),
                  ("--by", "collective")):          # the patterns and the multi-rank levels too
        assert cli(*extra)[1] == 0, extra
    links, biggest = cli("--by", "rank", "--links")       # the link report is the same at every level
    assert biggest == 0 and links == cli("--links")[0]
    store = tmp_path.parent / f"{tmp_path.name}_store"
    _ran(["convert", str(tmp_path), "-o", str(store), "-q"])
    _, biggest = _ran(["summarize", str(store), "-q", "--by", "rank"], counting=True)
    total = traceattr.load(tmp_path, cache=False, jobs=1).device.num_rows
    assert biggest == total > 0    # the count sees a whole TraceSet: a store's


def test_the_file_cache_serves_the_map_step(tmp_path):
    windows(tmp_path / "run", (0, 1), 2, layers=1)

    def cli(*extra):
        return _ran(["summarize", str(tmp_path / "run"), "-q", "--format", "markdown", "--jobs", "2",
                     "--cache-dir", str(tmp_path / "cache"), *extra]).stdout

    assert "source: traces (4 decoded, 0 from cache)" in cli("--by", "op")
    cached = cli("--by", "module")                        # another level: the files come from the cache
    assert "source: traces (0 decoded, 4 from cache)" in cached
    assert cached.replace("0 decoded, 4 from cache", "cache off") == cli("--by", "module", "--no-cache")
