"""Per-file map-reduce (analysis/summary_plan.py): every summary table, report header and link report of files
mapped as they are decoded equals that of the same files loaded whole as a TraceSet (one more source of the
same plan), bit for bit, on every shared real trace and on builder sets of 1, 8 and 64 ranks with several
windows; the tables add up to busy time, the header's busy time to the builder's; the driver's memory does
not grow with the traces (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.engine import columns as engine_columns
from traceattr.analysis import summary_plan as M
from traceattr.analysis.attribute import LEVELS as ATTRIBUTION_LEVELS, TREE_LEVELS
from traceattr.analysis.summary_plan import Plan, header_for, reduce_files, reduce_traceset, table_of
from traceattr.engine.columns import Chunks, concat_columns
from traceattr.engine.runner import Runner
from traceattr.analysis.check_plan import EXTRACT, check_report
from traceattr.analysis.summarize import LEVELS as SUMMARY_LEVELS
from traceattr.api import attribute, summarize
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from traceattr.io.decode import DecodedFile
from traceattr.io.discover import find_trace_files
from traceattr.io.load import assemble
from traceattr.io.parallel import FileFailure, decode_task
from traceattr.io.runs import split_runs
from traceattr.io.summaries import is_capture_manifest
from tracesets import SMALL

# the collective table and the rank table's wait/transfer columns match collectives across ranks
# (test_scale_mapreduce_comm.py); table_of gives the rank table without them
LEVELS = tuple(level for level in SUMMARY_LEVELS if level != "collective") + ATTRIBUTION_LEVELS
REAL = ["amd_trace", "critical_path", "nccl_parser_config", "ns_resolution_trace", "trace_diff/control",
        "trace_diff/test", "trace_filter", "torch213_cpu/dist2", "torch213_cpu/single_gz",
        "torch213_cpu/single_json"]
BIG = {"ns_resolution_trace", "trace_diff/control", "trace_diff/test"}     # 10-35 MB: the tables only


def assert_same_as_traceset(folder: Path, levels=LEVELS, variants: bool = True) -> dict:
    """Each file decoded once; the plan over the TraceSet of all of them against the reduce of per-file
    aggregates. Returns the map-reduce header of each level."""
    paths = [str(p) for p in find_trace_files(folder) if not is_capture_manifest(p)]
    decoded = [decode_task(path) for path in paths]
    good = [r for r in decoded if isinstance(r, DecodedFile)]
    headers = {}
    for run in split_runs(good, folder):       # a folder of several runs: each on its own, as load_runs
        members = {id(good[i]) for i in run.members}
        headers[run.name] = _same_run([r for r in decoded if not isinstance(r, DecodedFile) or id(r) in members],
                                      folder, levels, variants)
    return headers[split_runs(good, folder)[0].name] if len(headers) == 1 else headers


def _same_run(results: list, folder: Path, levels, variants: bool) -> dict:
    notes = [f"skipped {r.path}: {r.problem}" for r in results if isinstance(r, FileFailure)]
    traceset = assemble([r for r in results if isinstance(r, DecodedFile)], notes=notes, origin=str(folder))
    headers = {}
    for by in levels:
        # the module level (cpu ops kept, as check() sees them) also maps the check (check_plan.py)
        plan = Plan(by, extracts=(EXTRACT,) if by == "module" else ())
        reduced = reduce_files([plan.task().on_decoded(r, False) if isinstance(r, DecodedFile) else r
                                for r in results], origin=str(folder), extracts=plan.extracts)
        shapes = [(False, None)]
        if variants:
            shapes += [(False, 2)] + ([(True, None)] if by in TREE_LEVELS else [])
        for tree, top in shapes:
            want = (table_of(reduce_traceset(traceset, by=by)[0], by) if by == "rank" else
                    summarize(traceset, by, top=top) if by in SUMMARY_LEVELS else
                    attribute(traceset, by, tree=tree, top=top))
            got = table_of(reduced, by, top=top, tree=tree)
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            assert repr(got.attrs) == repr(want.attrs), by
            if top is None and not tree:
                assert_adds_up(got, reduced.groups, by)
        check = check_report(reduced, Runner(jobs=1)).line() if by == "module" else None
        header = header_for(reduced, got, by, Runner(jobs=1), check=check)
        held, runner = reduce_traceset(traceset, by=by, extracts=plan.extracts)
        expected = header_for(held, want, by, runner, check=check_report(held, runner).line() if check else None)
        assert header == expected, by
        assert header["busy_ns"] == int(reduced.groups[S.BUSY_NS].sum()) == int(
            table_of(reduced, "rank")[S.BUSY_NS].sum())
        headers[by] = header
    if variants:
        reduced = reduce_files([Plan(links=True).task().on_decoded(r, False) if isinstance(r, DecodedFile) else r
                                for r in results], origin=str(folder))
        report = reduced.link_report
        pd.testing.assert_frame_equal(report, reduce_traceset(traceset, links=True)[0].link_report, check_exact=True)
        # per file, the device activities checked are its own
        activities = report[report["check"] == "device_activities"].set_index([S.RANK, S.WINDOW])[S.COUNT]
        assert activities.sum() == traceset.device.num_rows
    return headers


def assert_adds_up(table: pd.DataFrame, groups: pd.DataFrame, by: str) -> None:
    """Σ self_ns per (rank, device) == busy_ns (device tables), with <unattributed> rows included."""
    if by == "rank":
        assert (table[S.IDLE_NS] == table[S.WINDOW_NS] - table[S.BUSY_NS]).all()
        return
    if table.attrs.get("time_kind", "device") != "device" or table.empty:
        return
    busy = groups.groupby([S.RANK, S.DEVICE])[S.BUSY_NS].sum()
    assert table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum().to_dict() == busy.to_dict()


@pytest.mark.parametrize("relative", REAL)
def test_real_traces_give_the_traceset_tables_bit_for_bit(shared_traces, relative):
    folder = shared_traces / relative
    if not folder.exists():
        pytest.skip(f"{relative} not found under {shared_traces}")
    big = relative in BIG
    assert_same_as_traceset(folder, levels=("kernel", "rank", "module", "step") if big else LEVELS,
                            variants=not big)


def test_one_rank_in_three_windows(tmp_path):
    truths = []
    for window in range(3):        # a later base time: the next profiling window of the same process
        spec = TraceSpec(ranks=1, **{**SMALL, "steps": (2 * window + 1, 2 * window + 2)}, seed=window,
                         base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        truths.append(write_trace(tmp_path / f"w{window}_rank0.pt.trace.json", spec, 0))
    headers = assert_same_as_traceset(tmp_path)
    assert {header["busy_ns"] for header in headers.values()} == {sum(truth.busy_ns for truth in truths)}
    assert headers["kernel"]["windows"] == 3


def test_eight_ranks_two_windows_with_a_straggler(tmp_path, monkeypatch):
    # the piles in several chunks and a tail (summary_plan.Chunks), as at 1024 files; every other test has
    # fewer files than a chunk
    monkeypatch.setattr(M, "COMPACT_EVERY", 3)
    monkeypatch.setattr(engine_columns, "COMPACT_EVERY", 3)
    for window in range(2):
        spec = TraceSpec(ranks=tuple(range(8)), **{**SMALL, "steps": (window * 2 + 1, window * 2 + 2)},
                         rank_scale={5: 1.4}, jitter=0.05, seed=window,
                         base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        for rank in spec.ranks:       # one folder: later windows of the same ranks are the same run
            write_trace(tmp_path / f"w{window}_rank{rank}.pt.trace.json", spec, rank)
    headers = assert_same_as_traceset(tmp_path, variants=False)
    assert headers["rank"]["busiest rank"].startswith("rank 5 ")   # planted: rank 5 runs every kernel 1.4x slower


def test_sixty_four_ranks(tmp_path):
    spec = TraceSpec(ranks=tuple(range(64)), layers=1, ops_per_module=1, kernels_per_op=1, steps=2,
                     rank_scale={17: 1.5}, with_stack=False, profile_memory=False)
    truths = write_trace_set(tmp_path, spec)
    headers = assert_same_as_traceset(tmp_path, levels=("rank", "step"), variants=False)
    assert headers["rank"]["busy_ns"] == sum(truth.busy_ns for truth in truths.values())
    assert headers["rank"]["busiest rank"].startswith("rank 17 ")
    assert headers["rank"]["ranks"] == list(range(64))


def test_path_api_equals_the_traceset_api(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=(0, 1), **SMALL))
    loaded = traceattr.load(tmp_path, cache=False, jobs=1)
    pd.testing.assert_frame_equal(traceattr.summarize(tmp_path, by="category", jobs=2, cache=False),
                                  traceattr.summarize(loaded, by="category"), check_exact=True)
    pd.testing.assert_frame_equal(traceattr.attribute(tmp_path, by="module", tree=True, jobs=1, cache=False),
                                  traceattr.attribute(loaded, by="module", tree=True), check_exact=True)


MEMORY_PROBE = """
import json, sys
import traceattr.analysis.run_tables as mapreduce, traceattr.io.load
peaks = []
for folder in sys.argv[2:]:
    if sys.argv[1] == "mapreduce":
        mapreduce.report_runs(folder, by="kernel", jobs=2, cache=False)
    else:
        traceattr.io.load.load(folder, jobs=2, cache=False)
    # VmHWM: this process only (not its workers), and unlike ru_maxrss not inherited across exec from the
    # pytest process that started it
    peaks.append([int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM")][0])
print(json.dumps(peaks))
"""


def test_driver_memory_does_not_grow_with_the_ranks(tmp_path):
    """The driver's own peak RSS (the pool workers are not counted) after 8 ranks and then after
    64 ranks of the same traces, in one process (imports and pool start-up paid by the first): the TraceSet
    path grows with the tables of 56 more ranks, map-reduce by a few MB of allocator slack."""
    spec = TraceSpec(ranks=tuple(range(64)), layers=2, ops_per_module=1, kernels_per_op=2, steps=40)
    write_trace_set(tmp_path / "64", spec)
    (tmp_path / "8").mkdir()
    for rank in range(8):
        (tmp_path / "8" / f"rank{rank}.pt.trace.json").hardlink_to(tmp_path / "64" / f"rank{rank}.pt.trace.json")
    total = sum(p.stat().st_size for p in (tmp_path / "64").iterdir())

    def growth(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, mode, str(tmp_path / "8"), str(tmp_path / "64")],
                              capture_output=True, text=True, timeout=300, check=True)
        at_8, at_64 = json.loads(done.stdout)
        return at_64 - at_8

    mapped, loaded = growth("mapreduce"), growth("load")
    assert loaded > 0.25 * total * 56 / 64, (loaded, mapped, total)     # every rank's tables, ~0.4x their JSON
    assert mapped < min(loaded / 2, 0.25 * total), (mapped, loaded, total)


def _pid(path: str, shown_path: str | None = None) -> int:
    return os.getpid()


@pytest.mark.parametrize("jobs", [None, 1, 2])
@pytest.mark.parametrize("files", [1, 3])
def test_runner_knows_where_decode_files_decodes(tmp_path, jobs, files):
    """Runner.decodes_here (the driver lowers its mmap threshold only where it never decodes) follows
    io.parallel.decode_files' own rule: the pids of the tasks say where they ran."""
    from traceattr.io.parallel import decode_files

    paths = [str(tmp_path / f"rank{i}.json") for i in range(files)]
    pids = list(decode_files(paths, jobs=jobs, task=_pid))
    assert Runner(jobs=jobs).decodes_here(files) == (set(pids) == {os.getpid()})


@pytest.mark.parametrize("jobs", [0, -2, "2", 1.5, True])
def test_jobs_other_than_a_positive_int_are_refused(tmp_path, jobs):
    """jobs=0 and -2 were taken as 1, "x" failed inside int(); the CLI has always required at least 1."""
    from traceattr.errors import TraceInputError
    from traceattr.io.parallel import decode_files

    with pytest.raises(TraceInputError, match="jobs must be an integer of at least 1"):
        list(decode_files([str(tmp_path / "rank0.json")], jobs=jobs, task=_pid))


def test_chunks_hold_narrow_columns_and_give_back_exactly_what_concatenation_gives(monkeypatch):
    # integer columns are held narrowed and object columns coded per chunk; whole() must give every value
    # back in the columns' own (promoted) types, at the edges of each narrow type and when one file's column
    # is wider than another's
    monkeypatch.setattr(engine_columns, "COMPACT_EVERY", 2)
    edges = [limit for t in (np.int8, np.int16, np.int32) for limit in (np.iinfo(t).min, np.iinfo(t).max)]
    items = [{"small": np.array([1, 2], np.int64), "edge": np.array([edge, edge + (1 if edge < 0 else -1)], np.int64),
              "wide": np.array([i, 2**40 + i], np.int64) if i % 3 else np.array([i, -i], np.int32),
              "flag": np.array([True, False]), "text": np.array([f"t{i}", None], object),
              "ns": np.array([0.5, i], np.float64)} for i, edge in enumerate(edges + [2**62, -2**62, 0])]
    chunks = Chunks()
    for item in items:
        chunks.append(dict(item))
    assert any(chunk["small"].dtype == np.int8 for chunk in chunks.chunks)     # held narrow
    whole = chunks.whole()
    expected = concat_columns(items)
    assert whole.keys() == expected.keys()
    for name, values in expected.items():
        assert whole[name].dtype == values.dtype, name
        assert whole[name].tolist() == values.tolist(), name
    assert all(mine is theirs for mine, theirs in zip(whole["text"], expected["text"]))    # the very objects
    lists = Chunks()      # objects that cannot be coded are held as they are
    for i in range(3):
        column = np.empty(1, dtype=object)
        column[0] = [i]
        lists.append({"ranks": column})
    assert lists.whole()["ranks"].tolist() == [[0], [1], [2]]
