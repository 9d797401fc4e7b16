"""Renderers in process, and the `traceattr` command: in this process through click's CliRunner
(tests/clirun.py: the exit code, stdout and stderr a process gives, a traceback included), and through real
subprocesses where the process is the point: `python -m traceattr` (the console script's entry point, run by
this interpreter, so the tests run, and fail when they should, where the script is not on PATH), a closed
pipe, a file-size limit, a missing matplotlib; test_the_console_script_is_installed checks the installed
script itself."""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import shutil
import subprocess
import sys

import pandas as pd
import pyarrow.parquet as pq
import pytest

from clirun import run_cli
from conftest import REPO_ROOT, shared_trace
from test_sweep import activity, make_traceset
from traceattr import __version__
from traceattr import schema as S
from tracesets import header_of
from traceattr.api import summarize
from traceattr.errors import TraceInputError
from traceattr.report.render import FORMATS, HEADER_METADATA_KEY, render
from traceattr.report.shape import human_ns

TRACEATTR = [sys.executable, "-m", "traceattr"]       # traceattr/__main__.py: the console script's entry point
needs_loader = pytest.mark.skipif(importlib.util.find_spec("traceattr.io.load") is None,
                                  reason="the loader (traceattr.io.load) has not landed yet")

ACTIVITIES = [
    activity(0, 2_000_000, name="void gemm<[memory]|x>"), activity(1_000_000, 3_000_000, stream=8, name="relu"),
    activity(2_500_000, 2_600_000, stream=20, name="ncclKernel_AllReduce", category=S.COMMUNICATION),
    activity(0, 10, rank=1, device=1, name="Memset (Device)", category=S.MEMSET),
]


def run(*args, check_rc=0, process=False):
    """`traceattr *args`: in this process, or with `process` through `python -m traceattr`."""
    if process:
        proc = subprocess.run([*TRACEATTR, *map(str, args)], capture_output=True, text=True, timeout=120)
    else:
        proc = run_cli(*args)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def assert_one_line_error(proc, rc, *needles):
    assert proc.returncode == rc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceattr: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for needle in needles:
        assert needle in lines[0]


def busy_from(rank_csv: str) -> dict:
    table = pd.read_csv(io.StringIO(rank_csv))
    return {(r, d): b for r, d, b in zip(table[S.RANK], table[S.DEVICE], table[S.BUSY_NS])}


def self_sums_from(kernel_csv: str) -> dict:
    table = pd.read_csv(io.StringIO(kernel_csv))
    assert table[S.SELF_NS].dtype.kind == "i"
    return {key: int(v) for key, v in table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum().items()}


# --- renderers (in process) --------------------------------------------------------------------

def test_human_units():
    assert [human_ns(v) for v in (0, 999, 1000, 12_345, 12_345_678, 3_210_000_000, -1_500)] == [
        "0 ns", "999 ns", "1.00 µs", "12.3 µs", "12.3 ms", "3.21 s", "-1.50 µs"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips_through_a_file(fmt, tmp_path):
    ts = make_traceset(ACTIVITIES)
    table, header = summarize(ts), header_of(ts)
    out = tmp_path / f"out.{fmt}"
    assert render(table, fmt, header=header, output=str(out), title="kernels") is None
    if fmt == "csv":
        pd.testing.assert_frame_equal(pd.read_csv(out), table, check_dtype=False)
        assert pd.read_csv(out)[S.SELF_NS].dtype.kind == "i"
    elif fmt == "json":
        rows = json.loads(out.read_text())
        assert rows[0] == {k: (v.item() if hasattr(v, "item") else v) for k, v in table.iloc[0].items()}
        assert all(isinstance(row[S.SELF_NS], int) for row in rows)
    elif fmt == "parquet":
        back = pq.read_table(out)
        pd.testing.assert_frame_equal(back.to_pandas(), table, check_dtype=False)
        assert back.schema.field(S.SELF_NS).type == "int64"
        assert json.loads(back.schema.metadata[HEADER_METADATA_KEY])["busy_ns"] == header["busy_ns"]
    elif fmt == "markdown":
        lines = out.read_text().splitlines()
        table_lines = [line for line in lines if line.startswith("|")]
        assert len(table_lines) == 2 + len(table)
        assert r"gemm&lt;\[memory\]\|x&gt;" in out.read_text()    # markdown syntax escaped (renders as typed)
        assert "- busy: 3.00 ms (3,000,010 ns)" in lines
    else:
        text = out.read_text()
        assert "gemm<[memory]|x>" in text                           # not eaten as rich markup
        assert "3.00 ms" in text and "rank sources" in text and "kernels" in text


def test_table_says_what_was_loaded_and_warns():
    ts = make_traceset(ACTIVITIES + [activity(0, 1000, name="dup")], notes=("rank assumed 0 for x.json",))
    text = render(summarize(ts, by="rank"), "table", header=header_of(ts))
    assert "note: rank assumed 0 for x.json" in text
    assert "one stream overlap" in text
    assert "overlap saved" in text and "files: 2" in text


def test_render_rejects_bad_requests(tmp_path):
    table = summarize(make_traceset(ACTIVITIES))
    with pytest.raises(TraceInputError, match="-o FILE"):
        render(table, "parquet")
    with pytest.raises(TraceInputError, match="unknown format"):
        render(table, "xml")
    with pytest.raises(TraceInputError, match="cannot write"):
        render(table, "csv", output=str(tmp_path / "missing" / "dir" / "x.csv"))


# --- the installed command ---------------------------------------------------------------------

def test_version():
    proc = run("--version", process=True)
    assert __version__ in proc.stdout and "traceattr" in proc.stdout


def test_the_console_script_is_installed():
    """`pip install` puts `traceattr` ([project.scripts]) on PATH; the other tests run `python -m traceattr`,
    so this one must fail, not skip, when the script is missing, and its script must be this interpreter's
    traceattr: the same --version as `python -m traceattr`."""
    script = shutil.which("traceattr")
    assert script is not None, "the traceattr console script is not on PATH (pip install -e . installs it)"
    installed = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.startswith(f"traceattr, version {__version__}\n"), installed.stdout
    assert installed.stdout == run("--version", process=True).stdout


def test_parquet_without_output_is_a_one_line_error(tmp_path):
    assert_one_line_error(run("summarize", tmp_path, "--format", "parquet", check_rc=None), 2, "-o FILE")


def test_bad_option_is_a_usage_error(tmp_path):
    proc = run("summarize", tmp_path, "--by", "kernels", check_rc=None)
    assert proc.returncode == 2 and "kernels" in proc.stderr and "Traceback" not in proc.stderr


@needs_loader
def test_nonexistent_path(tmp_path):
    missing = tmp_path / "no_such_trace.json"
    # through the entry point: a process's whole stderr for an error, nothing printed as it exits
    assert_one_line_error(run("summarize", missing, check_rc=None, process=True), 2, "no_such_trace.json")


@needs_loader
@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage", b'{"traceEvents": [{"ph": "X", "ts": 1'])
def test_corrupt_file(tmp_path, content):
    bad = tmp_path / ("rank0.json.gz" if content.startswith(b"\x1f\x8b") else "rank0.json")
    bad.write_bytes(content)
    assert_one_line_error(run("summarize", bad, check_rc=None), 2, bad.name)


@pytest.fixture(scope="module")
def built_run(tmp_path_factory):
    """A synthetic 2-rank run with concurrency, NCCL, memcpy and memset, and its known answers."""
    from traceattr.builder import TraceSpec, write_trace_set
    folder = tmp_path_factory.mktemp("built")
    truths = write_trace_set(folder, TraceSpec(ranks=2, steps=2, gzip=True, seed=3))
    busy = {(truth.rank, device): facts.busy_ns for truth in truths.values()
            for device, facts in truth.devices.items()}
    return folder, busy


@needs_loader
def test_printed_csv_adds_up_to_busy_and_to_the_truth(built_run):
    folder, truth_busy = built_run
    kernels = run("summarize", folder, "--format", "csv", "--per-rank").stdout
    ranks = run("summarize", folder, "--by", "rank", "--format", "csv").stdout
    assert self_sums_from(kernels) == busy_from(ranks) == truth_busy
    top = run("summarize", folder, "--top", "2", "--by", "kernel", "--format", "csv", "--per-rank").stdout
    assert self_sums_from(top) == truth_busy and "<other>" in top
    across = pd.read_csv(io.StringIO(run("summarize", folder, "--top", "2", "--format", "csv").stdout))
    assert int(across[S.SELF_NS].sum()) == sum(truth_busy.values()) and "<other>" in set(across[S.NAME])


@needs_loader
@pytest.mark.parametrize("fmt", ["table", "json", "parquet"])   # markdown: in-process test above
def test_every_format_through_the_command(built_run, tmp_path, fmt):
    folder, truth_busy = built_run
    out = tmp_path / f"summary.{fmt}"
    proc = run("summarize", folder, "--by", "rank", "--format", fmt, "-o", out)
    assert proc.stdout == "" and out.exists()
    if fmt == "json":
        rows = json.loads(out.read_text())
        assert {(r[S.RANK], r[S.DEVICE]): r[S.BUSY_NS] for r in rows} == truth_busy
    elif fmt == "parquet":
        table = pq.read_table(out).to_pandas()
        assert {(r, d): b for r, d, b in zip(table[S.RANK], table[S.DEVICE], table[S.BUSY_NS])} == truth_busy
    else:
        assert "ranks: 0, 1" in out.read_text()
    if fmt == "table":   # stdout carries the same text when no -o is given (both answered by the cache the
        again = tmp_path / "again.txt"      # first run filled: its header says where the answer came from)
        run("summarize", folder, "--by", "rank", "--format", fmt, "-o", again)
        assert run("summarize", folder, "--by", "rank", "--format", fmt).stdout == again.read_text()


@needs_loader
@pytest.mark.parametrize("folder", ["single_json", "single_gz", "dist2"])
def test_cpu_only_traces_show_host_ops_by_self_time_and_say_so(folder):
    """Plain `summarize` of a CPU-only capture answered "(no rows)"; it shows `--by op`'s table, saying why."""
    proc = run("summarize", shared_trace(f"torch213_cpu/{folder}"))
    assert "no device activity in these traces" in proc.stdout and "(no rows)" not in proc.stdout
    assert "host time by op" in proc.stdout and "aten::mm" in proc.stdout
    as_op = run("summarize", shared_trace(f"torch213_cpu/{folder}"), "--by", "op", "--format", "json", "-q").stdout
    plain = run("summarize", shared_trace(f"torch213_cpu/{folder}"), "--format", "json", "-q").stdout
    assert json.loads(plain) == json.loads(as_op)
    if folder == "dist2":
        assert "ranks: 0, 1" in proc.stdout


def test_cpu_only_builder_trace_shows_planted_host_self_times(tmp_path):
    from traceattr.builder import TraceSpec, write_events

    pid, tid = "100", "100"
    ops = [("user_annotation", "ProfilerStep#1", 0, 1_000_000), ("cpu_op", "aten::linear", 10_000, 100_000),
           ("cpu_op", "aten::addmm", 20_000, 80_000), ("cpu_op", "aten::relu", 200_000, 50_000),
           ("cpu_op", "aten::relu", 300_000, 30_000)]
    write_events(tmp_path / "cpu.pt.trace.json", TraceSpec(era="C", layout="lines"),
                 [("X", cat, name, pid, tid, TraceSpec().base_time_ns + start, dur, None)
                  for cat, name, start, dur in ops])
    for cache in ("--no-cache", None):        # computed, then answered again from the results cache
        args = [a for a in (cache,) if a]
        out = run("summarize", tmp_path, "--format", "json", *args, "--cache-dir", tmp_path / "cache")
        rows = {row["key"]: row for row in json.loads(out.stdout)}
        assert {key: row[S.SELF_NS] for key, row in rows.items()} == {
            "aten::addmm": 80_000, "aten::relu": 80_000, "aten::linear": 20_000}
        assert rows["aten::relu"][S.COUNT] == 2
        assert "no device activity in these traces" in out.stderr


@needs_loader
def test_real_two_rank_trace_adds_up_to_the_reference_busy_union():
    # exact busy unions per device from /work/shared/traces/README.md (all real traces: test_summarize.py)
    folder = shared_trace("trace_filter")
    kernels = run("summarize", folder, "--format", "csv", "--per-rank").stdout
    ranks = run("summarize", folder, "--by", "rank", "--format", "csv").stdout
    assert self_sums_from(kernels) == busy_from(ranks) == {(0, 0): 547_656_000, (1, 1): 580_050_000}


def test_narrow_table_folds_names_but_never_crops_numbers():
    ts = make_traceset([activity(0, 1000 + i, stream=7 + i, name="x" * 200 + str(i)) for i in range(3)])
    table = summarize(ts)
    text = render(table, "table", width=60)
    for self_ns in table[S.SELF_NS]:
        assert human_ns(self_ns) in text
    assert "33.3%" in text


@needs_loader
def test_closed_pipe_exits_quietly(built_run):
    folder, _ = built_run
    proc = subprocess.Popen([*TRACEATTR, "summarize", folder, "--format", "csv"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()          # the reader is gone before the first write, like `| head` after one line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


@needs_loader
def test_attribution_levels_route_to_attribute_and_add_up(built_run):
    if importlib.util.find_spec("traceattr.analysis.attribute") is None:
        pytest.skip("traceattr.analysis.attribute has not landed")
    folder, truth_busy = built_run
    steps = run("summarize", folder, "--by", "step", "--format", "csv", "--per-rank").stdout
    assert self_sums_from(steps) == truth_busy
    assert "ProfilerStep#1" in steps and "ProfilerStep#2" in steps


def test_people_tables_show_not_applicable_durations_as_a_dash():
    """-1 in a duration column means 'not applicable' (host solo time, no noise estimate); a delta of -1 ns
    is a real number and stays one."""
    import pandas as pd

    from traceattr.report.shape import display_rows

    titles, rows = display_rows(pd.DataFrame({"solo_ns": [-1, 1500], "delta_ns": [-1, 2]}))
    assert titles == ["solo", "delta"]
    assert rows == [["-", "-1 ns"], ["1.50 µs", "2 ns"]]


@pytest.mark.parametrize("args, needle", [
    (["summarize", "PATH", "-o", "FOLDER", "--format", "csv"], "is a directory"),
    (["summarize", "PATH", "--by", "nope"], "'nope' is not one of"),
    (["summarize", "PATH", "--bogus"], "No such option '--bogus'"),
    (["compare", "PATH"], "Missing argument"),
])
def test_a_bad_option_is_one_line_naming_it(tmp_path, args, needle):
    args = [str(tmp_path) if a == "FOLDER" else str(REPO_ROOT / "sample_traces" / "synthetic_2rank") if a == "PATH"
            else a for a in args]
    assert_one_line_error(run(*args, check_rc=None), 2, needle, "--help")


@pytest.mark.parametrize("command", [("summarize", "--format", "csv"), ("report",)])
def test_output_is_written_whole_or_not_at_all(tmp_path, command):
    """On a full disk `report -o` left a truncated page that looked like a report (and `summarize -o` a
    cut table). The output goes through a temporary file and one rename: here a file-size limit makes the
    write fail, and the old file stays as it was, with no temporary left."""
    import resource
    import signal

    output = tmp_path / ("page.html" if command == ("report",) else "table.csv")
    traces = REPO_ROOT / "sample_traces" / "synthetic_2rank"
    output.write_text("the old output\n")

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # writes past the limit fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    done = subprocess.run([sys.executable, "-m", "traceattr.cli", command[0], str(traces),
                           *command[1:], "-o", str(output), "--no-cache", "-q"],
                          capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and f"{output}: cannot write " in done.stderr, done.stderr
    assert output.read_text() == "the old output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [output.name]
    fine = run_cli(command[0], traces, *command[1:], "-o", output, "--no-cache", "-q")
    assert fine.returncode == 0 and output.stat().st_size > 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == [output.name]


def test_the_wrote_line_escapes_the_output_path(tmp_path):
    """`report` and `convert` printed the -o path raw: an escape sequence or a bidi override in it reached
    the terminal."""
    traces = REPO_ROOT / "sample_traces" / "synthetic_2rank"
    for command, name in (("report", "x\x1b[31m\u202e.html"), ("convert", "store\x1b[31m\u202e")):
        done = run_cli(command, traces, "-o", tmp_path / name, "--no-cache", "-q")
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stderr and "\u202e" not in done.stderr, done.stderr
        assert "\\x1b[31m\\u202e" in done.stderr, done.stderr


def test_charts_without_matplotlib_are_one_line_not_a_traceback(tmp_path):
    """Found by a docs trial: with matplotlib missing, `report` and `compare --format html` ended in a
    traceback from deep in the drawing. matplotlib is a core dependency now; a broken install still gets one
    line, exit 2, before any trace is read."""
    traces = str(REPO_ROOT / "sample_traces" / "synthetic_2rank")
    for args in (["report", traces, "-o", str(tmp_path / "r.html")],
                 ["compare", traces, traces, "--format", "html", "-o", str(tmp_path / "c.html")]):
        code = ("import sys; sys.modules['matplotlib'] = None; from traceattr.cli import main; "
                f"sys.argv = ['traceattr'] + {args!r} + ['--no-cache', '-q']; main()")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().endswith("which is not installed: pip install matplotlib")
        assert len(done.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
