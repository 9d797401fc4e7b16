"""The capture-time kernel summary: the analysis core's exact self time, conserving busy time per device."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
import torch

import traceattr
from traceattr import schema as S
from traceattr.capture import CaptureConfig, profile, read_run
from traceattr.capture.artifacts import KERNEL_SUMMARY_SCHEMA, write_kernel_summary

from conftest import shared_trace
from clirun import run_cli

pytest.importorskip("traceattr.io.load")
pytest.importorskip("traceattr.analysis.summarize")


def busy_by_device(path) -> dict[tuple[int, int], int]:
    ranks = traceattr.summarize(traceattr.load(str(path)), by="rank")
    return {(int(r), int(d)): int(b) for r, d, b in zip(ranks[S.RANK], ranks[S.DEVICE], ranks[S.BUSY_NS]) if d >= 0}


def test_summary_of_a_real_multi_stream_gpu_trace_conserves_busy_time(tmp_path):
    trace = shared_trace("trace_filter/sampled_rank-0.json.gz")
    out = tmp_path / "window0.kernels.parquet"
    rows = write_kernel_summary(trace, tmp_path / ".window0.kernels.tmp", out)
    table = pq.read_table(out)
    assert rows == table.num_rows > 0 and table.schema == KERNEL_SUMMARY_SCHEMA
    assert not (tmp_path / ".window0.kernels.tmp").exists()
    frame = table.to_pandas()
    sums = frame.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum()
    busy = busy_by_device(trace)
    assert {k: int(v) for k, v in sums.items()} == busy          # Σ self == busy, exactly, per device
    ts = traceattr.load(str(trace))
    assert int(frame[S.COUNT].sum()) == ts.device.num_rows       # every kernel, memcpy and memset counted once
    assert (frame[S.SELF_NS] <= frame[S.DURATION_NS]).all()
    assert int(frame[S.DURATION_NS].sum()) > sum(busy.values())  # concurrent streams: raw sums over-count


def test_cpu_capture_writes_an_empty_summary_with_the_columns(tmp_path):
    cfg = CaptureConfig(out_dir=str(tmp_path / "run"), wait=0, warmup=1, active=2, repeat=1)
    model = torch.nn.Linear(8, 8)
    with profile(cfg) as prof:
        for _ in range(4):
            model(torch.randn(2, 8)).sum().backward()
            prof.step()
    [window] = read_run(tmp_path / "run").windows
    assert window["degraded"] is None and window["status"] == "written"   # no CUDA asked, none expected
    table = pq.read_table(window["kernels"])
    assert table.num_rows == 0 and table.schema.names == KERNEL_SUMMARY_SCHEMA.names
    ts = traceattr.load(str(tmp_path / "run"))
    assert ts.ranks == [0] and ts.device.num_rows == 0 and ts.host.num_rows > 0
    assert busy_by_device(window["trace"]) == {}                 # conservation holds trivially: no device


def test_real_cuda_two_stream_capture_sample():
    """A capture made on an H200 by scripts/gpu_capture_check.py: the summary conserves busy time."""
    from conftest import SAMPLE_TRACES

    root = SAMPLE_TRACES / "capture_cuda_2stream"
    run = read_run(root)
    assert run.ranks == [0] and run.manifests[0]["torch_version"].startswith("2.11")
    assert [w["window"] for w in run.windows] == [0, 1]
    assert run.windows[0]["trace"].endswith("window0.pt.trace.json.gz")
    assert any("window1" in m for m in run.missing_files)       # not copied back: reported, not hidden
    table = pq.read_table(root / "rank0" / "window0.kernels.parquet").to_pandas()
    busy = busy_by_device(root / "rank0" / "window0.pt.trace.json.gz")
    assert {(0, 0): int(table[S.SELF_NS].sum())} == busy
    ts = traceattr.load(str(root))
    assert ts.device.to_pandas()[S.STREAM].nunique() == 2
    assert int(table[S.DURATION_NS].sum()) > busy[(0, 0)]       # the side stream really overlapped


def test_summarize_header_verdict_counts_the_capture_problems_as_check_does():
    """The header said `check: ok` beside a note that window 1 was missing, while `traceattr check` warned."""
    import json

    from traceattr.pipelines.summarize import summary_report
    from conftest import SAMPLE_TRACES

    def run(*args):
        return run_cli(*args)

    root = str(SAMPLE_TRACES / "capture_cuda_2stream")
    report = summary_report(root, cache=False)
    assert report.header["check"] == "warn: capture incomplete (1) (traceattr check PATH for details)"
    checked = run("check", root, "--format", "json", "--no-cache")
    assert checked.returncode == 1 and '"capture_incomplete"' in checked.stdout
    assert json.loads(checked.stdout)       # the same verdict, warn, both ways
    assert "traceattr: check: warn: capture incomplete (1)" in run("summarize", root, "--format", "csv").stderr


def test_a_cpu_capture_answered_from_its_summaries_has_the_layout_and_notes_of_its_traces(tmp_path):
    """Two ranks, no device rows: the table was per-rank (9 columns), the traces' is over ranks (13)."""
    import shutil

    from traceattr.analysis.capture_summary import capture_header, capture_summary
    from traceattr.analysis.header import HOST_ONLY_NOTE
    from traceattr.pipelines.summarize import summary_report
    from conftest import SAMPLE_TRACES

    root = tmp_path / "run"
    shutil.copytree(SAMPLE_TRACES / "capture_cpu_2rank", root)
    # a summary older than its trace is stale (the capture writes it after the trace); a git checkout writes
    # both in name order, so a clock tick between them made this test fail in a fresh clone now and then
    for summary in root.glob("rank*/*.kernels.parquet"):
        trace = summary.with_name(summary.name.replace(".kernels.parquet", ".pt.trace.json.gz"))
        newest = max(summary.stat().st_mtime_ns, trace.stat().st_mtime_ns)
        os.utime(summary, ns=(newest, newest))
    by_kernel = capture_summary(root, "kernel")       # the summaries' own answer: empty, and says why
    assert by_kernel.table.empty and HOST_ONLY_NOTE in capture_header(by_kernel)["notes"]
    by_category = summary_report(str(root), by="category", cache=False)     # exposed time: from the traces
    assert by_category.header["source"].startswith("traces") and by_category.table.empty
    assert HOST_ONLY_NOTE in by_category.header["notes"]
    # plain summarize of a CPU-only run shows host ops, which the summaries (kernels only) do not hold
    from_summaries = summary_report(str(root), cache=False)
    assert from_summaries.header["source"].startswith("traces")
    for summary in root.glob("rank*/*.kernels.parquet"):
        summary.unlink()
    from_traces = summary_report(str(root), cache=False)
    assert from_traces.header["source"].startswith("traces")
    assert list(from_summaries.table.columns) == list(from_traces.table.columns)
    assert from_summaries.title == from_traces.title
    assert from_summaries.header["notes"][0] == from_traces.header["notes"][0]      # the CPU-only note


def test_a_capture_without_its_traces_says_what_its_manifests_list(tmp_path):
    """Found by a review: a capture folder whose trace files were lost said only 'no readable trace files';
    its manifests know which files they wrote. Every command now names them on the one error line; a folder
    of no capture keeps the plain line, and a broken manifest never turns it into a traceback."""
    import shutil

    from conftest import SAMPLE_TRACES

    def run(*args):
        return run_cli(*args)

    root = tmp_path / "capture"
    shutil.copytree(SAMPLE_TRACES / "capture_cpu_2rank", root)
    for trace in root.glob("rank*/window*"):
        trace.unlink()
    for args in (("summarize", root), ("check", root), ("report", root, "-o", tmp_path / "r.html"),
                 ("convert", root, "-o", tmp_path / "store")):
        out = run(*args, "--no-cache")
        assert out.returncode == 2 and out.stdout == "", out
        line, = out.stderr.splitlines()
        assert line.startswith(f"traceattr: error: {root}: no ") and "the capture's manifests there: missing: " \
            f"{root}/rank0/window0.pt.trace.json.gz;" in line and "and 1 more)" in line, line
    (root / "rank1" / "manifest.json").write_text("{not json")
    out = run("summarize", root, "--no-cache")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    out = run("summarize", empty)
    assert out.stderr == f"traceattr: error: {empty}: no trace files (*.json or *.json.gz) found\n"
