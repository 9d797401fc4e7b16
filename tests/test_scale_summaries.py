"""Capture-time summaries answer summarize --by kernel without the JSON; stale or missing ones, --by rank
and --by category (exposed time needs the overlaps), fall back to the traces and say why."""

from __future__ import annotations

import csv
import gzip
import io
import os
import subprocess
from time import time_ns
from pathlib import Path

import numpy as np
import pytest

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace
from traceattr.errors import TraceDiscoveryError
from traceattr.capture.manifest import Manifest, read_run, summary_name, trace_name
from traceattr.capture.writer import write_kernel_summary
from traceattr.analysis.capture_summary import capture_summary
from clirun import run_cli
from tracesets import SMALL


@pytest.fixture
def run(tmp_path) -> Path:
    """A two-rank capture folder written with the capture package's own manifest and summary writers."""
    spec = TraceSpec(ranks=2, **SMALL)
    for rank in (0, 1):
        rank_dir = tmp_path / f"rank{rank}"
        rank_dir.mkdir()
        manifest = Manifest(rank_dir, {"rank": rank, "world_size": 2})
        manifest.add_window({"window": 0, "first_step": 1, "last_step": 2, "partial": False, "status": "written",
                             "files": {}})
        trace = rank_dir / trace_name(0, False)
        write_trace(trace, spec, rank=rank)
        manifest.add_file(0, "trace", trace.name)
        write_kernel_summary(trace, rank_dir / ".k.tmp", rank_dir / summary_name(0))
        manifest.add_file(0, "kernels", summary_name(0))
    for cache in tmp_path.rglob(".traceattr-cache"):    # the summary writer loads its trace; start clean
        for item in cache.iterdir():
            item.unlink()
        cache.rmdir()
    return tmp_path


def summarize_cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli("summarize", path, "--no-cache", *args)     # in this process (tests/clirun.py)


@pytest.mark.parametrize("by,top", [("kernel", None), ("kernel", 3)])
def test_summaries_give_the_tables_summarize_computes_from_traces(run, by, top):
    traceset = traceattr.load(run, cache=False)
    sweep(traceset).self_check()
    want = traceattr.summarize(traceset, by=by, top=top)
    got = capture_summary(run, by, top).table
    integers = [c for c in want.columns if c != S.SELF_PCT]
    assert got[integers].equals(want[integers])
    assert np.allclose(got[S.SELF_PCT], want[S.SELF_PCT])
    busy = sweep(traceset).groups.groupby(S.RANK)[S.BUSY_NS].sum()
    assert got.groupby(S.RANK)[S.SELF_NS].sum().to_dict() == busy.to_dict()


def test_cli_answers_without_reading_the_json(run):
    for trace in run.glob("rank*/*.pt.trace.json"):   # garbage a reader would choke on, older than its summary
        stat = trace.stat()
        trace.write_text("not json at all")
        os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))
    done = summarize_cli(run, "--by", "kernel", "--format", "csv")
    assert done.returncode == 0, done.stderr
    table = summarize_cli(run, "--by", "kernel").stdout
    assert "capture summaries" in table and "trace JSON not read" in " ".join(table.split())


def test_by_category_reads_the_traces_for_exposed_time_the_summaries_cannot_hold(run):
    """Per-kernel sums lose how kernels overlapped: --by category (exposed_ns) is answered from the traces,
    whose figures it then shows, and the header says why the summaries did not answer."""
    assert capture_summary(run, "category").reason.endswith("read the traces")
    done = summarize_cli(run, "--by", "category", "--format", "csv", "--per-rank")
    assert done.returncode == 0, done.stderr
    assert "exposed time" in done.stderr and "capture summaries" not in done.stdout
    want = traceattr.summarize(traceattr.load(run, cache=False), by="category")
    got = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [int(row[S.EXPOSED_NS]) for row in got] == want[S.EXPOSED_NS].tolist()
    assert sum(int(row[S.EXPOSED_NS]) for row in got) > 0


def test_stale_or_missing_summaries_and_by_rank_fall_back_to_traces(run):
    trace = run / "rank1" / trace_name(0, False)
    os.utime(trace, ns=(trace.stat().st_atime_ns, (run / "rank1" / summary_name(0)).stat().st_mtime_ns + 10**9))
    stale = " ".join(summarize_cli(run, "--by", "kernel").stdout.split())
    assert "source: traces" in stale and "older than its trace" in stale
    (run / "rank0" / summary_name(0)).unlink()
    assert capture_summary(run, "kernel").table is None
    missing = " ".join(summarize_cli(run, "--by", "kernel").stdout.split())
    assert "source: traces" in missing and "capture summary" in missing
    by_rank = " ".join(summarize_cli(run, "--by", "rank").stdout.split())
    assert "source: traces" in by_rank and "window lengths" in by_rank
    assert "manifest.json" not in by_rank     # manifests are recognized, not reported as skipped files


def test_plain_trace_folders_are_not_capture_runs(tmp_path):
    write_trace(tmp_path / "rank0.pt.trace.json", TraceSpec(**SMALL))
    assert capture_summary(tmp_path, "kernel") is None


def test_a_capture_folders_answer_is_replayed_only_while_its_summaries_are_unchanged(run, tmp_path):
    """The kernel summaries answer before the traces do, so a repeated summarize of a capture folder is
    replayed from the cache (0.2 s, no pandas) only while they are unchanged too: a summary rewritten with
    other counts (and nothing else changed) is read again. The cache folder lies inside the capture folder
    here on purpose: its own files are not inputs (else no answer would ever be replayed)."""
    import pyarrow.parquet as pq

    args = ("--by", "kernel", "--format", "csv", "--cache-dir", str(tmp_path / "cache"))
    cli = ["summarize", str(run), *args]
    first, again = (run_cli(*cli) for _ in range(2))
    assert first.returncode == again.returncode == 0 and again.stdout == first.stdout, first.stderr
    assert len({p.name.split(".")[0] for p in (tmp_path / "cache" / "answers").iterdir()}) == 1
    summary = run / "rank0" / summary_name(0)
    table = pq.read_table(summary)
    counts = table.column(S.COUNT).to_numpy() + 1
    pq.write_table(table.set_column(table.schema.get_field_index(S.COUNT), S.COUNT, [counts]), summary)
    changed = run_cli(*cli)
    assert changed.returncode == 0, changed.stderr
    total = [sum(int(row[S.COUNT]) for row in csv.DictReader(io.StringIO(out.stdout))) for out in (first, changed)]
    assert total[1] == total[0] + len(counts)


def _edit_manifest(rank_dir: Path, **changes) -> None:
    import json

    path = rank_dir / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("damage", ["copied rank folder", "world size", "started days apart", "config"])
def test_summaries_never_answer_for_manifests_of_several_runs(run, damage):
    """Found on real layouts: a backup `rank0_old/` (cp -a rank0) matched rank*, and its windows were summed
    on top of rank 0's (busy doubled, self % unchanged); a stale rank folder of an earlier, other-sized run
    was merged into the table. The trace path splits those runs: the summaries now give way to it."""
    import shutil

    if damage == "copied rank folder":
        shutil.copytree(run / "rank0", run / "rank0_old")
        with pytest.raises(TraceDiscoveryError, match="two capture manifests say rank 0"):
            read_run(run)       # its windows were appended to rank 0's
    elif damage == "world size":
        _edit_manifest(run / "rank1", world_size=4)
    elif damage == "started days apart":
        _edit_manifest(run / "rank1", started_at_ns=time_ns() - 2 * 86400 * 10**9)
    else:
        _edit_manifest(run / "rank1", config_sha256="0123456789abcdef")
    found = capture_summary(run, "kernel")
    assert found.table is None and found.reason.endswith("read the traces"), found.reason
    done = summarize_cli(run, "--by", "kernel", "--format", "csv", "--per-rank")     # rank 0's rows in each run
    assert done.returncode == 0, done.stderr
    assert "capture summaries" not in done.stdout + done.stderr and "read the traces" in done.stderr
    if damage == "copied rank folder":      # two runs, each reported on its own, rank 0's busy time not doubled
        table = list(csv.DictReader(io.StringIO(done.stdout)))
        busy = {r["run"]: 0 for r in table}
        for row in table:
            busy[row["run"]] += int(row[S.SELF_NS]) if row[S.RANK] == "0" else 0
        assert len(busy) == 2 and len(set(busy.values())) == 1, busy


def test_one_rank_folder_of_a_capture_answers_from_its_own_summaries(run):
    """`summarize CAPTURE/rank0` (the default --by kernel) exited 2: 'no capture manifests'."""
    done = summarize_cli(run / "rank1", "--format", "csv")
    assert done.returncode == 0, done.stderr
    got = list(csv.DictReader(io.StringIO(done.stdout)))
    want = traceattr.summarize(traceattr.load(run / "rank1", cache=False), by="kernel")
    assert [int(r[S.SELF_NS]) for r in got] == want[S.SELF_NS].tolist() and {r[S.RANK] for r in got} == {"1"}
    assert "summaries" in summarize_cli(run / "rank1").stdout
    _edit_manifest(run / "rank1", state="running")              # its own problems: no other rank's, none missing
    shown = " ".join(summarize_cli(run / "rank1", "--by", "category").stdout.split())
    assert "capture: rank 1: state 'running'" in shown and "rank 0" not in shown and "wrote no manifest" not in shown


def test_a_non_trace_json_in_a_capture_folder_leaves_the_summaries_on(run):
    """A config.json beside the rank folders was called 'in no capture manifest (an interrupted or rewritten
    capture)' and turned the summaries off; the loader skips it as not a trace. An unlisted trace still does."""
    (run / "config.json").write_text('{"lr": 0.1}')
    (run / "rank0" / "notes.json.gz").write_bytes(gzip.compress(b"[1, 2, 3]"))
    assert capture_summary(run, "kernel").table is not None
    write_trace(run / "rank1" / "window9.pt.trace.json", TraceSpec(ranks=2, **SMALL), rank=1)
    assert "window9.pt.trace.json is in no capture manifest" in capture_summary(run, "kernel").reason
