"""CSV injection: a kernel or annotation name a spreadsheet would run as a formula is written inert (`'`)."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pyarrow as pa

from traceattr.report.render import render_csv
from clirun import run_cli

START = 1_700_000_000_000_000


def _trace(path):
    """A real Kineto-shaped trace: an annotation around two launches whose kernels have hostile names."""
    host = dict(pid=1, tid=1, ph="X")
    device = dict(pid=0, tid=7, ph="X", cat="kernel")
    events = [
        dict(host, cat="user_annotation", name="@SUM(A1)", ts=START, dur=100),
        dict(host, cat="cpu_op", name="aten::mm", ts=START + 1, dur=50),
        dict(host, cat="cuda_runtime", name="cudaLaunchKernel", ts=START + 2, dur=5, args={"correlation": 11}),
        dict(host, cat="cuda_runtime", name="cudaLaunchKernel", ts=START + 10, dur=5, args={"correlation": 12}),
        dict(device, name='=HYPERLINK("x")', ts=START + 20, dur=10, args={"correlation": 11, "device": 0, "stream": 7}),
        dict(device, name="-2+3", ts=START + 40, dur=5, args={"correlation": 12, "device": 0, "stream": 7}),
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
                                "traceEvents": events}))
    return path


def _summarize_csv(path, by: str, *extra: str) -> list[dict]:
    done = run_cli("summarize", path, "--by", by, "--format", "csv", "--no-cache", *extra)
    assert done.returncode == 0, done.stderr
    return list(csv.DictReader(io.StringIO(done.stdout)))


def test_kernel_names_that_are_formulas_are_written_inert(tmp_path):
    rows = {row["name"]: row for row in _summarize_csv(_trace(tmp_path / "t.json"), "kernel")}
    assert set(rows) == {"'=HYPERLINK(\"x\")", "'-2+3"}
    for row in rows.values():       # the numbers are untouched: no quote, they parse as numbers
        assert int(row["self_ns"]) > 0 and float(row["self_pct"]) > 0 and row["category"] == "compute"


def test_annotation_names_that_are_formulas_are_written_inert(tmp_path):
    [row] = _summarize_csv(_trace(tmp_path / "t.json"), "annotation")
    assert row["key"] == row["name"] == "'@SUM(A1)" and int(row["self_ns"]) == 15_000


def test_only_text_cells_change_and_negative_numbers_stay_numbers():
    # "x\r=cmd": a bare carriage return starts a new row in a spreadsheet, so that cell must be quoted
    names = ["=1+1", "+a", "-x", "@b", "\tc", "\rd", "plain", "a=b", "x\r=cmd", None]
    frame = pd.DataFrame({"name": names, "offset_ns": [-5] * 10, "pct": [-1.5] * 10,
                          "kind": pd.Categorical(["=k"] * 10)})
    for table in (frame, pa.Table.from_pandas(frame, preserve_index=False)):
        rows = list(csv.reader(io.StringIO(render_csv(table, None, None, None), newline="")))
        assert rows[0] == ["name", "offset_ns", "pct", "kind"]
        assert [r[0] for r in rows[1:]] == ["'=1+1", "'+a", "'-x", "'@b", "'\tc", "'\rd", "plain", "a=b", "x\r=cmd", ""]
        assert {(r[1], r[2], r[3]) for r in rows[1:]} == {("-5", "-1.5", "'=k")}
        assert float(rows[1][1]) == -5 and rows[1][2] == "-1.5"


def test_csv_raw_writes_the_names_exactly_and_needs_csv(tmp_path):
    """--csv-raw: the exact text (for a pipeline, not a spreadsheet), in summarize, check and compare; the
    cached answer of the guarded csv is not served for it (nor the other way round)."""
    trace = _trace(tmp_path / "t.json")
    rows = {row["name"] for row in _summarize_csv(trace, "kernel", "--csv-raw")}
    assert rows == {'=HYPERLINK("x")', "-2+3"}
    cache = ["--cache-dir", str(tmp_path / "cache")]
    run = run_cli
    guarded = run("summarize", str(trace), "--format", "csv", *cache)
    raw = run("summarize", str(trace), "--format", "csv", "--csv-raw", *cache)
    again = run("summarize", str(trace), "--format", "csv", *cache)
    assert "'=HYPERLINK" in guarded.stdout and "'=HYPERLINK" not in raw.stdout and '"=HYPERLINK' in raw.stdout
    assert again.stdout == guarded.stdout
    compared = run("compare", str(trace), str(trace), "--format", "csv", "--csv-raw", "--no-cache")
    assert compared.returncode == 0 and "\n=HYPERLINK" in "\n" + compared.stdout.replace('"', ""), compared.stdout
    checked = run("check", str(trace), "--format", "csv", "--csv-raw", "--no-cache")
    assert checked.returncode in (0, 1) and checked.stdout.startswith("run,"), checked.stderr
    for argv in (("summarize", str(trace), "--csv-raw"), ("check", str(trace), "--format", "json", "--csv-raw")):
        refused = run(*argv)
        assert refused.returncode == 2 and refused.stderr.strip() == "traceattr: error: --csv-raw needs --format csv"
