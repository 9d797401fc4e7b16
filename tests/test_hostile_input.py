"""Hostile input (issue 11): every number beyond what a fixed-width type takes, nesting beyond the decoder,
ambiguous documents, gzip bombs, paths that leave their folder, and text that would drive a terminal or
forge markdown. Each case is one small file built here: a clean one-line error naming the file and the
field (exit 2, no traceback, skipped with --skip-bad), or events dropped with a note, never a wrap, an
overflow or a cast warning."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
from pathlib import Path

import pytest

import traceattr
from traceattr import schema as S
from tracesets import checked
from traceattr.builder import TraceSpec, write_trace
from traceattr.errors import TraceDiscoveryError, TraceFormatError
from traceattr.io.decode import decode_file
from traceattr.io.gzipstream import InflateLimit
from traceattr.io.limits import TIME_LIMIT_NS
from traceattr.io.store import StoreError, file_sha256, sealed_metadata, write_store
from clirun import run_cli
from conftest import read_terminal
from test_io_real import check_conservation
from test_scale_summaries import run  # noqa: F401  (the capture-folder fixture)
from tracesets import SMALL

BASE_US = 1_700_000_000_000_000.0


def kernel(ts: float = BASE_US, dur: float = 5.0, **fields) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur, **fields}


def write(folder: Path, name: str, doc: dict | str) -> Path:
    path = folder / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """In this process (clirun: the exit code, stdout and stderr a `python -m traceattr.cli` would give);
    the tests of signals, terminals and arguments no str can hold start real processes below."""
    return run_cli(*args, env=env)


def cli_process(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """A real `python -m traceattr.cli`: for what a process prints as it tears down (`__del__` noise)."""
    return subprocess.run([sys.executable, "-m", "traceattr.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def load_strict(path: Path, **kwargs):
    """load() with numpy warnings as errors: a cast warning is a finding, not noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return traceattr.load(path, cache=False, jobs=1, **kwargs)


# -- numbers beyond their type: a clean error naming the file and the field ------------------------------

INTEGER_CASES = {
    "pid": ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 100000000000000000000, '
            '"tid": 7, "ts": 1, "dur": 1}]}', "pid or tid"),
    "tid": (json.dumps({"traceEvents": [kernel(tid=2**64)]}), "pid or tid"),
    "json_rank": (json.dumps({"traceEvents": [kernel()], "distributedInfo": {"rank": 2**31}}),
                  "distributedinfo.rank"),
    "world_size": (json.dumps({"traceEvents": [kernel()], "distributedInfo": {"rank": 0, "world_size": 2**40}}),
                   "distributedinfo.world_size"),
    "base_time": ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, '
                  '"dur": 1}], "baseTimeNanoseconds": 1000000000000000000000000000000}', "basetimenanoseconds"),
    "deep_args": ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, '
                  '"dur": 1, "args": {"a": ' + "[" * 6000 + "]" * 6000 + "}}]}", "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(INTEGER_CASES))
def test_out_of_range_integers_and_nesting_are_one_clean_error(tmp_path, case):
    text, words = INTEGER_CASES[case]
    path = write(tmp_path, "trace.json", text)
    with pytest.raises(TraceFormatError) as caught:
        load_strict(path)
    message = str(caught.value)
    assert str(path) in message and words in message.lower() and "\n" not in message


def test_rank_in_the_file_name_beyond_int32_is_a_clean_error(tmp_path):
    path = write(tmp_path, "rank2147483648.json", {"traceEvents": [kernel()]})
    with pytest.raises(TraceFormatError, match="rank in the file name 2147483648 is out of range"):
        load_strict(path)
    with pytest.raises(TraceDiscoveryError, match="rank map is out of range"):
        traceattr.load(write(tmp_path / ".." / tmp_path.name, "ok.json", {"traceEvents": [kernel()]}),
                       cache=False, rank_map={"ok.json": 2**40})


def test_skip_bad_skips_every_out_of_range_file_and_the_good_one_loads(tmp_path):
    for number, case in enumerate(sorted(INTEGER_CASES)):
        write(tmp_path, f"bad{number}_{case}.json", INTEGER_CASES[case][0])
    write(tmp_path, "rank2147483648.json", {"traceEvents": [kernel()]})
    write(tmp_path, "good.json", {"traceEvents": [kernel()], "distributedInfo": {"rank": 0, "world_size": 1}})
    for jobs in ("1", "2"):                      # in this process and in the process pool alike
        failed = cli("summarize", str(tmp_path), "--no-cache", "-q", "--jobs", jobs)
        assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
        assert failed.stderr.startswith("traceattr: error: ") and failed.stderr.count("\n") == 1
        skipped = cli("summarize", str(tmp_path), "--no-cache", "-q", "--jobs", jobs, "--skip-bad", "--format", "json")
        assert skipped.returncode == 0, skipped.stderr
        assert json.loads(skipped.stdout)[0]["self_ns"] == 5000
    traceset = traceattr.load(tmp_path, cache=False, skip_bad=True, jobs=2)
    assert sum("skipped" in note for note in traceset.notes) == len(INTEGER_CASES) + 1


# -- times beyond int64 ns: dropped with a note, never wrapped ---------------------------------------------

@pytest.mark.parametrize("bad", [{"ts": -9.3e15}, {"ts": 9.3e15}, {"ts": 1e300}, {"dur": 1e300}, {"dur": 1e16},
                                 {"ts": 2.2e16}], ids=str)
def test_times_beyond_int64_ns_are_dropped_with_a_note(tmp_path, bad):
    path = write(tmp_path, "trace.json", {"traceEvents": [kernel(BASE_US, 5.0), kernel(**{"ts": BASE_US + 10, **bad})]})
    traceset = load_strict(path)
    assert traceset.device.num_rows == 1                      # the good kernel, at its true time
    assert traceset.device.column(S.START_NS).to_pylist() == [int(BASE_US) * 1000]
    assert any("dropped 1 events whose ts or dur is beyond" in note for note in traceset.notes)
    assert not any("negative durations" in note for note in traceset.notes)      # 1e16 µs is not "negative"
    # counted with the impossible durations, so check() and the files table say so too, not only a note
    assert traceset.files.column(S.ABSURD_DURATIONS).to_pylist() == [1]
    findings = checked(traceset).findings
    assert findings[findings["check"] == "absurd_durations"][S.COUNT].tolist() == [1]
    check_conservation(traceset)
    window = traceattr.summarize(traceset, by="rank")[S.WINDOW_NS].iloc[0]
    assert 0 <= window < TIME_LIMIT_NS                          # no wrapped window length


def test_exact_decimal_path_range_checks_and_reads_exponents_as_numbers(tmp_path):
    # era B (ns decimals on epoch µs) takes the exact Decimal path: 1e300 there is dropped, not an overflow
    text = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
            '"ts": 1700000000000000.123, "dur": 1}, {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, '
            '"tid": 7, "ts": 1e300, "dur": 1}]}')
    traceset = load_strict(write(tmp_path, "b.json", text))
    assert traceset.device.column(S.START_NS).to_pylist() == [1_700_000_000_000_000_123]
    assert traceset.files.column(S.ERA).to_pylist() == [S.ERA_B]
    # `2.2e+16` has no sub-µs digits: it must not switch the file to the exact path (era A stays A)
    text = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.7e+15, '
            '"dur": 2.2e+1}]}')
    traceset = load_strict(write(tmp_path, "a.json", text))
    assert traceset.files.column(S.ERA).to_pylist() == [S.ERA_A]
    assert traceset.device.column(S.END_NS).to_pylist() == [1_700_000_000_000_000_000 + 22_000]


# -- streaming equals whole-document semantics ------------------------------------------------------------

def test_a_second_traceevents_key_is_refused_when_streamed_and_last_wins_when_whole(tmp_path):
    first = [kernel(BASE_US + 10 * i) for i in range(200)]
    text = json.dumps({"traceEvents": first})[:-1] + ', "traceEvents": [' + json.dumps(kernel()) + "]}"
    path = write(tmp_path, "twice.json", text)
    with pytest.raises(TraceFormatError, match="traceEvents appears twice"):
        decode_file(str(path), block_bytes=512)               # streamed in many chunks
    whole = decode_file(str(path), block_bytes=len(text) * 2)   # one block: json.load semantics, last key wins
    assert whole.device.num_rows == len(json.loads(text)["traceEvents"]) == 1


def test_invalid_utf8_names_its_byte_offset(tmp_path):
    events = b",".join(json.dumps(kernel(BASE_US + i)).encode() for i in range(3000))
    text = b'{"traceEvents": [' + events + b"]}"
    at = text.index(b'"name": "k"', len(text) // 2) + len(b'"name": "')
    path = tmp_path / "utf8.json"
    path.write_bytes(text[:at] + b"\xff" + text[at + 1:])
    for block_bytes in (4096, 1 << 20):
        with pytest.raises(TraceFormatError, match=f"invalid UTF-8 at byte {at}$"):
            decode_file(str(path), block_bytes=block_bytes)


def test_malformed_json_in_the_middle_is_reported_where_it_is(tmp_path):
    events = ",".join(json.dumps(kernel(BASE_US + i)) for i in range(3000))
    text = '{"traceEvents": [' + events + "]}"
    at = text.index('"ph"', len(text) // 2)
    path = write(tmp_path, "broken.json", text[:at] + "?" + text[at + 1:])
    with pytest.raises(TraceFormatError, match=r"malformed JSON.*\(byte \d+\)") as caught:
        decode_file(str(path), block_bytes=4096)
    reported = int(str(caught.value).rsplit("(byte ", 1)[1].rstrip(")"))
    assert abs(reported - at) <= 1


# -- inflation: streamed, capped ----------------------------------------------------------------------------

def gzip_bomb(path: Path, inflated_mb: int) -> Path:
    """A valid trace whose gzip inflates ~1000:1: one kernel, then megabytes of whitespace."""
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(b'{"traceEvents": [' + json.dumps(kernel()).encode())
        block = b" " * (1 << 20)
        for _ in range(inflated_mb):
            out.write(block)
        out.write(b"]}")
    return path


def test_max_inflate_refuses_a_gzip_bomb_with_a_clear_error(tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 20)
    assert InflateLimit.from_text("10MB").max_bytes == 10 << 20
    assert InflateLimit.from_text("64GiB,50:1") == InflateLimit(64 << 30, 50.0)
    for limit, words in (("10MB", "more than 10,485,760 bytes"), ("50:1", "gzip bomb")):
        result = cli("summarize", str(bomb), "--no-cache", "-q", "--max-inflate", limit)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert str(bomb) in result.stderr and words in result.stderr
    default = cli("summarize", str(bomb), "--no-cache", "-q")          # whitespace deflates beyond 1000:1
    assert default.returncode == 2 and "gzip bomb" in default.stderr
    allowed = cli("summarize", str(bomb), "--no-cache", "-q", "--format", "json", "--max-inflate", "1GiB,100000:1")
    assert allowed.returncode == 0 and json.loads(allowed.stdout)[0]["self_ns"] == 5000
    bad = cli("summarize", str(bomb), "--no-cache", "--max-inflate", "lots")
    assert bad.returncode == 2 and "--max-inflate" in bad.stderr


def test_peak_memory_stays_within_the_streaming_bound_for_a_large_inflation(tmp_path):
    """200 MB of inflated whitespace streams in blocks: the process never holds it whole."""
    bomb = gzip_bomb(tmp_path / "big.json.gz", 200)
    # VmHWM, not ru_maxrss: ru_maxrss survives exec, so it would start at the RSS of this pytest process
    script = ("import re, sys; from traceattr.io.decode import decode_file\n"
              "try:\n    decode_file(sys.argv[1])\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
              "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024)")
    result = subprocess.run([sys.executable, "-c", script, str(bomb)], capture_output=True, text=True, timeout=120)
    assert "no event boundary" in result.stdout, result.stdout + result.stderr
    peak_mb = int(result.stdout.split()[-1])
    assert peak_mb < 400, peak_mb          # python + numpy + pyarrow ~150 MB, plus at most 64 MB of text held


# -- discovery, store and capture manifests --------------------------------------------------------------

def test_an_unlistable_sub_folder_is_a_note_not_silence(tmp_path):
    write(tmp_path, "rank0.json", {"traceEvents": [kernel()]})
    # a folder path beyond PATH_MAX cannot be listed, even by root (chmod 000 would not stop root)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    traceset = traceattr.load(tmp_path, cache=False, jobs=1)
    assert any("cannot list the folder" in note for note in traceset.notes), traceset.notes


@pytest.fixture
def store(tmp_path) -> Path:
    write(tmp_path / "..", f"{tmp_path.name}-r0.json", {"traceEvents": [kernel()]})
    traceset = traceattr.load(tmp_path / ".." / f"{tmp_path.name}-r0.json", cache=False)
    return write_store(traceset, tmp_path / "store")


@pytest.mark.parametrize("damage", ["traversal", "list", "partitions_number", "huge_rank", "notes", "time"])
def test_store_metadata_is_validated_and_never_leaves_the_store(store, tmp_path, damage):
    marker = store / "_traceattr_store.json"
    metadata = json.loads(marker.read_text())
    outside = tmp_path / "outside" / "rank=0" / "window=0"
    outside.mkdir(parents=True)
    (outside / "part-0.parquet").write_bytes((store / "device/rank=0/window=0/part-0.parquet").read_bytes())
    if damage == "traversal":
        metadata["tables"]["device"]["partitions"] = [["0/../../../outside/rank=0", 0, 1]]
    elif damage == "list":
        metadata = [metadata]
    elif damage == "partitions_number":
        metadata["tables"]["device"]["partitions"] = 5
    elif damage == "huge_rank":
        metadata["tables"]["device"]["partitions"] = [[10**30, 0, 1]]
    elif damage == "notes":
        metadata["notes"] = {"a": 1}
    else:                                                 # a time that would wrap int64 in the sweep
        import pyarrow as pa
        import pyarrow.parquet as pq
        part = store / "device/rank=0/window=0/part-0.parquet"
        table = pq.read_table(part)
        table = table.set_column(table.schema.get_field_index(S.END_NS), S.END_NS,
                                 pa.array([9 * 10**18] * table.num_rows, pa.int64()))
        pq.write_table(table, part)
        metadata["tables"]["device"]["partitions"][0][3] = file_sha256(part)     # resealed: its value is checked
    # sealed as a writer who knows the format would: the check under test is the content's, not the hash's
    marker.write_bytes(sealed_metadata(metadata) if isinstance(metadata, dict) else json.dumps(metadata).encode())
    with pytest.raises(StoreError, match="store") as refused:
        traceattr.load(store)
    if damage != "list":                                   # a list carries no seal: refused at the hash
        assert "hash mismatch" not in str(refused.value)    # refused by the check under test
    if damage == "traversal":
        result = cli("summarize", str(store), "-q")
        assert result.returncode == 2 and "Traceback" not in result.stderr


def test_a_capture_manifest_cannot_point_outside_its_folder(run, tmp_path):
    root = run
    manifest_path = root / "rank0" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    secret = tmp_path.parent / f"{tmp_path.name}-elsewhere.parquet"
    secret.write_bytes((root / "rank0" / manifest["windows"][0]["files"]["kernels"]).read_bytes())
    manifest["windows"][0]["files"]["kernels"] = str(secret)          # absolute: outside the capture
    manifest_path.write_text(json.dumps(manifest))
    from traceattr.analysis.capture_summary import capture_summary
    with pytest.raises(TraceDiscoveryError, match="outside the capture folder"):
        capture_summary(root, "kernel")
    manifest["windows"][0]["files"]["kernels"] = f"../../{secret.name}"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(TraceDiscoveryError, match="outside the capture folder"):
        capture_summary(root, "kernel")


# -- output: names cannot drive a terminal or forge markdown ------------------------------------------------

HOSTILE_NAME = "evil\x1b]0;pwned\x07\x1b[2J\r# fake heading\n- fake item | <script>alert(1)</script>"


def test_table_markdown_and_stderr_escape_control_characters(tmp_path):
    path = write(tmp_path, "rank0.json", {"traceEvents": [kernel(name=HOSTILE_NAME)]})
    # shown as typed: the table prints the escapes, markdown's source backslashes them again to render them
    for fmt, shown in (("table", "pwned"), ("markdown", "pwned")):
        result = cli("summarize", str(path), "--no-cache", "-q", "--format", fmt)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out
        assert shown in out
    markdown = cli("summarize", str(path), "--no-cache", "-q", "--format", "markdown").stdout
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(rows) == 3                                  # header, rule, one kernel: the newline forged nothing
    assert not any(line.startswith(("# fake", "- fake")) for line in markdown.splitlines())
    assert "&lt;script&gt;" in markdown and r"\|" in markdown
    # a file name with a newline and an escape reaches stderr escaped, on one line
    bad = tmp_path / "x\n\x1b[31mred.json"
    bad.write_text("{not json")
    result = cli("summarize", str(bad), "--no-cache", "-q")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "\x1b" not in result.stderr
    assert r"x\n\x1b[31mred.json" in result.stderr


def test_escape_api():
    from traceattr.report.escape import for_markdown, for_terminal

    assert for_terminal("a\x1bb\r\n\t\x7f\u202e") == r"a\x1bb\r\n\t\x7f\u202e"
    assert for_terminal("gemm<float> 42 µs") == "gemm<float> 42 µs"          # printable text unchanged
    assert for_markdown("a|b*c`e[f]<g>&h _i_ #1 @u") == r"a\|b\*c\`e\[f\]&lt;g&gt;&amp;h \_i\_ \#1 \@u"
    assert for_markdown("kernel_name ProfilerStep#4") == "kernel_name ProfilerStep#4"   # not syntax there


def test_every_invisible_character_is_escaped():
    """Zero-width, bidi and every other format character (Cf) of the running Unicode database, the line and
    paragraph separators and the controls: none reaches a terminal, markdown or HTML as it is."""
    import unicodedata

    from traceattr.report.escape import for_terminal

    hidden = [chr(c) for c in range(0x110000)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")]
    assert len(hidden) > 2000 and [c for c in hidden if for_terminal(c) == c] == []
    assert for_terminal("k\ufeffX\u2060\u061c\U000e0041") == r"k\ufeffX\u2060\u061c\U000e0041"


def on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the command with stdout on a pseudo-terminal, as a user at a shell sees it."""
    import pty
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "traceattr.cli", *args], stdout=follower,
                               stderr=subprocess.DEVNULL)
    os.close(follower)
    shown = read_terminal(leader)
    return process.wait(timeout=120), shown


def test_csv_and_json_escape_names_on_a_terminal_and_keep_them_whole_in_a_pipe(tmp_path):
    """csv to a terminal printed a kernel name's escape sequences raw: they acted on the user's terminal."""
    path = write(tmp_path, "rank0.json", {"traceEvents": [kernel(name="a\x1b[2J\x9b31m\u202eb")]})
    for fmt in ("csv", "json"):
        rc, shown = on_a_terminal("summarize", str(path), "--no-cache", "-q", "--format", fmt)
        assert rc == 0 and "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown, shown
        assert r"[2J\x9b31m\u202eb" in shown, shown      # json's own \u001b for ESC, then ours
    piped = cli("summarize", str(path), "--no-cache", "-q", "--format", "csv")
    assert piped.returncode == 0 and "a\x1b[2J\x9b31m\u202eb" in piped.stdout   # a pipe keeps the name whole


def test_output_to_a_terminal_by_o_is_escaped_and_a_pipe_or_a_file_gets_the_exact_name(tmp_path):
    """`-o /dev/stdout` at a shell is a terminal too: csv and json written there printed a kernel name's
    escape sequences raw. A real pipe and a file keep the name whole, its line break included (csv quotes
    it, json escapes it)."""
    import pandas as pd

    name = "a\x1b]0;title\x07\r\nb\x9b31m\u202ec"
    path = write(tmp_path, "rank0.json", {"traceEvents": [kernel(name=name)]})
    # one format is enough on the terminal: -o writes every text format through one function
    rc, shown = on_a_terminal("summarize", str(path), "--no-cache", "-q", "--format", "csv", "-o", "/dev/stdout")
    assert rc == 0 and not {"\x1b", "\x07", "\x9b", "\u202e"} & set(shown), shown
    assert r"title\x07\r" in shown and r"b\x9b31m\u202ec" in shown, shown
    for fmt in ("csv", "json"):
        written = tmp_path / f"out.{fmt}"
        assert cli("summarize", str(path), "--no-cache", "-q", "--format", fmt, "-o", str(written)).returncode == 0
        rows = pd.read_csv(written) if fmt == "csv" else pd.DataFrame(json.loads(written.read_bytes()))
        assert rows["name"].tolist() == [name]
    piped = subprocess.run([sys.executable, "-m", "traceattr.cli", "summarize", str(path), "--no-cache", "-q",
                            "--format", "csv"], capture_output=True, timeout=120)   # bytes: no newline changed
    assert piped.returncode == 0 and pd.read_csv(io.BytesIO(piped.stdout))["name"].tolist() == [name]


def test_names_never_become_links_in_markdown():
    mistune = pytest.importorskip("mistune", reason="mistune comes with nbconvert, a test dependency")
    from traceattr.report.escape import for_markdown

    render = mistune.create_markdown(plugins=["table", "url"])
    for name in ("kern https://evil.example/login?x=1", "k www.evil.example", "HTTP://x.y/z", "ftp://a.b"):
        cell = for_markdown(name)
        html = render(f"| kernel |\n|---|\n| {cell} |\n")
        assert "<a " not in html and "href" not in html, html


# -- interrupts and the scheduler ------------------------------------------------------------------------

def test_ctrl_c_stops_workers_without_a_traceback(tmp_path):
    from traceattr.builder import TraceSpec, write_trace
    # one long file and two short ones: the two workers that finish early wait for work when Ctrl-C comes,
    # which is where a worker printed its KeyboardInterrupt traceback (about one run in four)
    for rank, steps in ((0, 150), (1, 2), (2, 2)):
        write_trace(tmp_path / f"rank{rank}.json", TraceSpec(ranks=3, steps=steps), rank=rank)
    for _ in range(3):
        process = subprocess.Popen([sys.executable, "-m", "traceattr.cli", "summarize", str(tmp_path), "--no-cache",
                                    "-q", "--jobs", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        deadline = time.monotonic() + 60
        while process.poll() is None and not children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.05)                            # until the pool's workers exist
        time.sleep(1.0)                                 # and the short files are done
        os.killpg(process.pid, signal.SIGINT)           # as a terminal's Ctrl-C: the whole process group
        _, err = process.communicate(timeout=60)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        # 130 with one line; on a fast machine the run may end first (0), or Ctrl-C hit interpreter exit (-2)
        assert (process.returncode, err) == (130, "traceattr: interrupted\n") or process.returncode in (0, -2)


def test_ctrl_c_while_the_command_imports_is_one_line(tmp_path):
    """A SIGINT in the first ~50 ms (the CLI's imports, before its handler exists) printed a traceback.
    The interrupt is delivered exactly there: a finder run by sitecustomize signals the process when
    `click` is imported, as a terminal's Ctrl-C would at that moment."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'click':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", "from traceattr.entry import main; main()", "--version"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stderr) == (130, "traceattr: interrupted\n"), done.stderr
    console = Path(sysconfig.get_path("scripts")) / "traceattr"     # what `pip install` made of the entry point
    if console.exists():
        done = subprocess.run([str(console), "--version"], capture_output=True, text=True, timeout=60, env=env)
        assert (done.returncode, done.stderr) == (130, "traceattr: interrupted\n"), done.stderr


@pytest.mark.parametrize("address", ["bogus", "tcp://", "http://127.0.0.1:8786", " ", "ucx://127.0.0.1:1",
                                     "tcp://127.0.0.1:99999"])
def test_malformed_scheduler_addresses_fail_at_once(address):
    from traceattr.io.cluster import SchedulerError, dask_executor

    began = time.monotonic()
    with pytest.raises(SchedulerError, match="--scheduler"):
        with dask_executor(address):
            pass
    assert time.monotonic() - began < 1


def test_a_silent_listener_fails_within_the_deadline_and_env_is_checked(tmp_path):
    pytest.importorskip("distributed")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted = []
    threading.Thread(target=lambda: [accepted.append(listener.accept()) for _ in range(8)], daemon=True).start()
    path = write(tmp_path, "rank0.json", {"traceEvents": [kernel()]})
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    began = time.monotonic()
    result = cli_process("summarize", str(path), "--no-cache", "-q", "--scheduler", address,
                         env={"TRACEATTR_SCHEDULER_TIMEOUT_S": "2"}, timeout=90)
    assert result.returncode == 2 and "no answer" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "__del__" not in result.stderr
    assert time.monotonic() - began < 45               # 2 s deadline + interpreter and dask start on a busy machine
    assert accepted                                    # it really connected, and the peer never answered
    result = cli("summarize", str(path), "--no-cache", "-q", "--scheduler", address,
                 env={"TRACEATTR_SCHEDULER_TIMEOUT_S": "abc"})
    assert result.returncode == 2 and "TRACEATTR_SCHEDULER_TIMEOUT_S" in result.stderr
    listener.close()


# -- manifests, rank maps and capture summaries: checked where they enter -----------------------------------

def one_line_exit_2(done: subprocess.CompletedProcess, named: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr and named in lines[0], done.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("command", ["summarize", "check", "convert"])
def test_a_deeply_nested_manifest_beside_traces_is_one_clean_error(tmp_path, command):
    write_trace(tmp_path / "rank0.pt.trace.json", TraceSpec(**SMALL))
    (tmp_path / "manifest.json").write_text("[" * 200_000)          # RecursionError in every JSON reader
    extra = {"convert": ["-o", str(tmp_path / "store")], "check": ["--format", "json"]}.get(command, [])
    done = cli(command, str(tmp_path), "--no-cache", "-q", "-j", "1", *extra)
    if command == "check":      # the check's verdict per file: the manifest is a bad file of the run
        assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
        (run,) = json.loads(done.stdout)["runs"]
        assert {Path(f["path"]).name: f["verdict"] for f in run["files"] if f["rank"] >= 0 or
                f["path"] != "<run>"} == {"manifest.json": "bad", "rank0.pt.trace.json": "ok"}
    else:
        one_line_exit_2(done, "manifest.json")


@pytest.mark.parametrize("damage", [
    lambda m: m["windows"][0].pop("window"),
    lambda m: m["windows"][0].update(window="0"),
    lambda m: m["windows"][0].update(files=["window0.pt.trace.json"]),
    lambda m: m.update(errors=7),
    lambda m: m.update(windows=[[1, 2]]),
    lambda m: m.update(world_size="x"),         # read past the manifest's checks: ValueError, no file named
    lambda m: m.update(rank=-3),
])
def test_a_capture_manifest_of_another_shape_is_one_clean_error(run, damage):
    path = run / "rank0" / "manifest.json"
    manifest = json.loads(path.read_text())
    damage(manifest)
    path.write_text(json.dumps(manifest))
    assert "not a readable capture manifest" in one_line_exit_2(cli("summarize", str(run), "--no-cache"),
                                                               str(path))


def test_a_deeply_nested_rank_map_is_one_clean_error(tmp_path):
    write_trace(tmp_path / "a.json", TraceSpec(**SMALL))
    rank_map = tmp_path / "map.json"
    rank_map.write_text('{"a.json": ' * 5000)
    assert "nested too deeply" in one_line_exit_2(
        cli("summarize", str(tmp_path / "a.json"), "--no-cache", "--rank-map", str(rank_map)), str(rank_map))


@pytest.mark.parametrize("column,value", [(S.SELF_NS, -10**15), (S.DURATION_NS, 2**62), (S.SOLO_NS, 10**12),
                                          (S.COUNT, 0), (S.CATEGORY, "bogus"), (S.NAME, None)])
def test_capture_summaries_of_impossible_values_give_way_to_the_traces(run, column, value):
    import pyarrow.parquet as pq

    summary = run / "rank0" / "window0.kernels.parquet"
    table = pq.read_table(summary).to_pandas()
    table.loc[0, column] = value
    if column == S.DURATION_NS:         # one huge row on every rank: their sum would wrap int64
        table[column] = value
    stat = summary.stat()
    table.to_parquet(summary)
    os.utime(summary, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    from traceattr.analysis.capture_summary import capture_summary
    assert capture_summary(run, "kernel").table is None          # the traces answer, with a note
    done = cli("summarize", str(run), "--no-cache", "--format", "json")
    assert done.returncode == 0 and "impossible values" in done.stderr
    rows = json.loads(done.stdout)
    busy = traceattr.summarize(traceattr.load(run, cache=False), by="rank")[S.BUSY_NS].sum()
    assert sum(row[S.SELF_NS] for row in rows) == busy and all(row[S.SELF_NS] >= 0 for row in rows)


def test_the_largest_world_size_allowed_costs_nothing_per_missing_rank():
    import pyarrow as pa

    from traceattr.analysis.check import run_rows

    files = pa.table({S.RANK: [0, 3], S.WORLD_SIZE: [2**24, 2**24]})
    (row,) = run_rows(files, {})          # was a set of 16 M ranks: 5 s and 2 GB
    assert row[3] == "missing_ranks" and row[4] == 2**24 - 2
    assert row[7].endswith("missing: 1, 2, 4, 5, 6, 7, 8, 9, 10, 11 ...")


def test_a_file_name_that_is_not_utf8_is_skipped_with_a_note(tmp_path):
    """A legal POSIX name of undecodable bytes (every table holds paths as UTF-8 text) crashed every command
    with a UnicodeEncodeError traceback."""
    good = TraceSpec(**SMALL)
    write_trace(tmp_path / "rank0.pt.trace.json", good, rank=0)
    bad = os.path.join(os.fsencode(tmp_path), b"rank1\xff.pt.trace.json")
    write_trace(tmp_path / "rank1.pt.trace.json", TraceSpec(ranks=2, **SMALL), rank=1)
    os.rename(os.path.join(os.fsencode(tmp_path), b"rank1.pt.trace.json"), bad)
    done = cli("summarize", str(tmp_path), "--no-cache", "--format", "csv")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "rank1\\xff.pt.trace.json: the file name is not valid UTF-8" in done.stderr
    alone = subprocess.run([sys.executable, "-m", "traceattr.cli", "summarize", bad, "--no-cache"],
                           capture_output=True, text=True, timeout=120)
    one_line_exit_2(alone, "rank1\\xff.pt.trace.json: the file name is not valid UTF-8")


def test_a_big_json_document_beside_the_traces_is_skipped_like_a_small_one(tmp_path, monkeypatch):
    """A JSON document without traceEvents was skipped with a note when small but was fatal (exit 2; check:
    verdict bad) once over the 64 MB the streaming reader holds before traceEvents. Text that is not JSON,
    or a document naming traceEvents too late to stream, stays an error. (The limit is lowered to 1 MB.)"""
    from traceattr.io import splitter

    monkeypatch.setattr(splitter, "MAX_PENDING_BYTES", 1 << 20)
    write_trace(tmp_path / "rank0.json", TraceSpec(ranks=1, layers=1, steps=1), 0)
    rows = ",".join(json.dumps({"id": i, "text": "some words here"}) for i in range(60_000))
    (tmp_path / "dataset.json").write_text('{"rows": [' + rows + "]}")
    with pytest.raises(splitter.NoTraceEventsError, match="without traceEvents .over 1 MB"):
        decode_file(str(tmp_path / "dataset.json"), block_bytes=1 << 16)
    traceset = traceattr.load(tmp_path, cache=False, jobs=1)
    assert traceset.ranks == [0] and any("dataset.json" in note and "not a trace" in note for note in traceset.notes)
    late = tmp_path / "late" / "late.json"
    late.parent.mkdir()
    late.write_text('{"rows": [' + rows + '], "traceEvents": []}')
    garbage = tmp_path / "late" / "garbage.json"
    garbage.write_text("x" * (3 << 20))
    for path in (late, garbage):
        with pytest.raises(TraceFormatError) as refused:
            decode_file(str(path), block_bytes=1 << 16)
        assert not isinstance(refused.value, splitter.NoTraceEventsError)


@pytest.mark.parametrize("nelems", [2305843009213693953, 2**62, 2**63 - 1])
def test_a_message_count_whose_bytes_overflow_is_unknown_not_wrapped(tmp_path, nelems):
    """`In msg nelems` x the element size wrapped int64: --by collective showed bytes of
    -9223372036854775804, 0 or -4 for a hostile count. Beyond 1 PiB the size is unknown (-1)."""
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic_2rank"
    for source in sorted(sample.glob("rank*.json.gz")):
        trace = json.load(gzip.open(source))
        for event in trace["traceEvents"]:
            if "In msg nelems" in event.get("args", {}):
                event["args"]["In msg nelems"] = event["args"]["Out msg nelems"] = nelems
        (tmp_path / source.name.removesuffix(".gz")).write_text(json.dumps(trace))
    table = traceattr.summarize(str(tmp_path), by="collective", cache=False, jobs=1)
    assert len(table) and (table["bytes"] == -1).all(), table["bytes"].tolist()


def test_a_huge_kernel_name_is_cut_in_notes_and_header_facts(tmp_path):
    """A note holding a whole 8 MiB kernel name (the straggler's kernels) took minutes to wrap into the
    table's header box and filled stderr: notes and header facts are cut at 1,000 characters, saying how
    much was left out (csv and json keep every name whole in their rows)."""
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic_2rank"
    long_name = "ampere_" + "A" * 300_000
    for source in sorted(sample.glob("rank*.json.gz")):
        trace = json.load(gzip.open(source))
        for event in trace["traceEvents"]:
            if event.get("name") == "ampere_sgemm_128x32_nt":
                event["name"] = long_name
        (tmp_path / source.name.removesuffix(".gz")).write_text(json.dumps(trace))
    for fmt in ("table", "csv"):
        done = cli("summarize", str(tmp_path), "--by", "rank", "--format", fmt, "--no-cache", "-q")
        assert done.returncode == 0, done.stderr[-500:]
        shown = done.stdout + done.stderr
        flat = re.sub(r"[\s│]+", " ", shown)       # the header box may fold the note anywhere
        assert 900 <= shown.count("A") < 1_100 and "more characters)" in flat, fmt
        assert len(shown) < 60_000, (fmt, len(shown))


@pytest.mark.parametrize("base, shown", [('""', '""'), ("1.5", "1.5"), ('"12"', '"12"')])
def test_a_base_time_that_is_not_an_integer_is_shown_as_written(tmp_path, base, shown):
    """`baseTimeNanoseconds: ""` said "is not an integer: " with nothing after the colon."""
    path = tmp_path / "rank0.json"
    path.write_text('{"baseTimeNanoseconds": ' + base + ', "traceEvents": []}')
    with pytest.raises(TraceFormatError, match=f"baseTimeNanoseconds is not an integer: {re.escape(shown)}$"):
        decode_file(str(path))


def _small_trace(rank=0, world=2, first=None) -> dict:
    kernel = {"ph": "X", "cat": "kernel", "name": "k_alpha", "pid": 0, "tid": 7, "ts": 1000.0, "dur": 10.0,
              "args": {"device": 0, "stream": 7, "correlation": 1}}
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1790857026000000000,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "traceEvents": ([first] if first else []) + [kernel]}


@pytest.mark.parametrize("field, value, shown", [("rank", "\u00b2", '"\\u00b2"'), ("world_size", "\u2460", '"\\u2460"'),
                                                 ("rank", 1.0, "1.0"), ("rank", True, "true"), ("world_size", 2.5, "2.5")])
def test_a_rank_or_world_size_that_is_no_integer_is_one_line_naming_the_field(tmp_path, field, value, shown):
    """Found by fuzzing: '²' and '①' pass str.isdigit() and then failed int() with a traceback on every
    command; 1.0 or true read as absent, so the file was taken for rank 0 with a note saying it had no
    distributedInfo (and a real rank 1 then 'overlapped' rank 0)."""
    trace = _small_trace()
    trace["distributedInfo"][field] = value
    path = tmp_path / "rank1.json"
    path.write_text(json.dumps(trace))
    for command in (["summarize"], ["check"], ["convert", "-o", str(tmp_path / "store")]):
        done = cli(*command, str(path), "--no-cache")
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, done.stderr)
        assert f"distributedInfo.{field} is not an integer: {shown}" in done.stderr, (command, done.stderr)
    # "3" in hand-made files stays a rank, and a rank map of '²' is a usage line
    trace["distributedInfo"][field] = "1"
    path.write_text(json.dumps(trace))
    assert cli("summarize", str(path), "--no-cache").returncode == 0
    (tmp_path / "map.txt").write_text("rank1.json=\u00b2\n")
    done = cli("summarize", str(tmp_path), "--no-cache", "--rank-map", str(tmp_path / "map.txt"))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "rank must be an integer" in done.stderr


@pytest.mark.parametrize("step", ["ProfilerStep#\u00b2", "ProfilerStep#" + "9" * 5000])
def test_a_step_number_that_is_no_small_integer_is_a_step_without_a_number(tmp_path, step):
    """Found by fuzzing: 'ProfilerStep#²' (str.isdigit() is true, int() refuses it) and a 5,000-digit step
    number (over int()'s 4,300-digit limit) ended check, compare, report and summarize --by step|op|rank in
    a traceback. They sort as steps without a number."""
    annotation = {"ph": "X", "cat": "user_annotation", "name": step, "pid": 100, "tid": 100, "ts": 980.0,
                  "dur": 60.0}
    (tmp_path / "rank0.json").write_text(json.dumps(_small_trace(first=annotation)))
    for command in (["check"], ["summarize", "--by", "step"], ["summarize", "--by", "op"],
                    ["report", "-o", str(tmp_path / "r.html")], ["compare", str(tmp_path), str(tmp_path)]):
        args = command if command[0] == "compare" else [*command, str(tmp_path)]
        done = cli(*args, "--no-cache", "--format", "csv") if command[0] == "summarize" else cli(*args, "--no-cache")
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, (command, done.stderr[-800:])
    steps = traceattr.attribute(str(tmp_path), by="step", cache=False)
    assert int(steps[S.SELF_NS].sum()) == 10_000      # the kernel, launched by no op: <unattributed>


def test_a_file_skipped_by_skip_bad_adds_nothing_to_the_header(tmp_path):
    """Found by fuzzing: with --skip-bad, a second copy of a rank's file is skipped (the two overlap in
    time), yet its communication time was still in the header's 'communication by rule' (30 µs of 15 µs,
    table and HTML report alike)."""
    from traceattr.analysis.run_tables import report_runs

    collective = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                  "tid": 20, "ts": 1005.0, "dur": 20.0,
                  "args": {"device": 0, "stream": 20, "correlation": 3, "Collective name": "allreduce",
                           "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Seq": 1}}
    kept = _small_trace(first=collective)
    (tmp_path / "a.json").write_text(json.dumps(kept))
    extra = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99", "pid": 100, "tid": 100, "ts": 990.0,
             "dur": 50.0}
    (tmp_path / "b.json").write_text(json.dumps({**kept, "traceEvents": [extra] + kept["traceEvents"]}))
    (alone,) = report_runs(str(tmp_path / "a.json"), by="kernel", jobs=1, cache=False)
    (report,) = report_runs(str(tmp_path), by="kernel", jobs=1, cache=False, skip_bad=True)
    assert any("skipped" in note and "b.json" in note for note in report.header["notes"]), report.header
    assert report.header["communication by rule"] == alone.header["communication by rule"] == \
        "collective arg 17.5 µs (100.0%)"       # 20 µs, 5 of them shared with k_alpha


def test_a_file_whose_span_or_summed_durations_cannot_be_summed_is_refused(tmp_path):
    """Found by fuzzing: each time was range-checked, but their sums were not. Two files of 69,000 one-day
    kernels spanning 5.9e18 ns each printed 'windows total: -6,578,744,073,709,551,616 ns' with check: ok,
    and 110,000 one-day kernels on separate streams a negative Σ durations. A file whose span or summed
    device durations pass 2**53 ns (104 days) is refused with one line (the sums over 1,024 of them fit)."""
    def kernel(ts_us, dur_us, stream, corr):
        return {"ph": "X", "cat": "kernel", "name": "k_day", "pid": 0, "tid": stream, "ts": ts_us, "dur": dur_us,
                "args": {"device": 0, "stream": stream, "correlation": corr}}

    wide = _small_trace()
    wide["baseTimeNanoseconds"] = 0
    wide["traceEvents"] = [kernel(-2.9e15, 10.0, 7, 1), kernel(2.9e15, 10.0, 7, 2)]
    (tmp_path / "wide").mkdir()
    (tmp_path / "wide" / "rank0.json").write_text(json.dumps(wide))
    deep = _small_trace()
    deep["traceEvents"] = [kernel(1000.0 + i, 8.6e10, 100 + i, 10 + i) for i in range(110)]
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "rank0.json").write_text(json.dumps(deep))
    for name, problem in (("wide", "its events span 5.8e+18 ns"),
                          ("deep", "its device activities' durations add up to 9.46e+15 ns")):
        done = cli("summarize", str(tmp_path / name), "--no-cache")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-600:]
        assert done.stderr.strip() == (f"traceattr: error: {tmp_path / name / 'rank0.json'}: {problem}: beyond the "
                                       "2**53 ns (104 days) a trace file can hold (times or durations are corrupt)")
    # 104 kernels of 8.6e10 µs (just under a day each): loaded, and the sums are the exact ones
    deep["traceEvents"] = deep["traceEvents"][:104]
    (tmp_path / "deep" / "rank0.json").write_text(json.dumps(deep))
    table = traceattr.summarize(str(tmp_path / "deep"), cache=False, jobs=1)
    assert int(table[S.DURATION_NS].sum()) == 104 * 86_000_000_000_000


def test_a_rank_padded_with_spaces_is_no_integer_and_a_long_rank_in_a_name_is_shown_as_such(tmp_path):
    """Found by a trial: distributedInfo.rank " 1", "\\t1\\n" or "\\u00a01" read as rank 1, where the rules
    allow a string of ASCII digits only; and `rank99999999999999999999.json` was refused as 'rank
    10000000000000000000', the cap, not the number in the name."""
    from traceattr.errors import TraceError

    for padded in (" 1", "\t1\n", "\u00a01", "1 "):
        trace = _small_trace()
        trace["distributedInfo"]["rank"] = padded
        folder = tmp_path / f"pad{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "trace.json").write_text(json.dumps(trace))
        with pytest.raises(TraceError, match="distributedInfo.rank is not an integer"):
            traceattr.load(folder, cache=False, jobs=1)
    (tmp_path / "long").mkdir()
    trace = _small_trace()
    del trace["distributedInfo"]
    (tmp_path / "long" / f"rank{'9' * 20}.json").write_text(json.dumps(trace))
    with pytest.raises(TraceError, match="the rank in the file name has more than 18 digits: out of range"):
        traceattr.load(tmp_path / "long", cache=False, jobs=1)


def test_an_event_of_an_unknown_phase_is_skipped_with_a_note(tmp_path):
    """Found by a trial: a memset written with "ph": "3" (or "GPU 7", or B/E pairs) vanished from the memset
    count and the busy time, exit 0, nothing said. Events of a phase traceattr does not read now get a note
    naming the phase and count, on both decoders; the phases kineto writes get none."""
    from traceattr.io import fastscan

    trace = _small_trace()
    odd = dict(trace["traceEvents"][0], ph="3", name="k_beta")
    trace["traceEvents"] += [odd, dict(odd, ph="B"), {"ph": "i", "name": "mark", "pid": 0, "tid": 7, "ts": 1001.0,
                                                       "s": "t"}]
    (tmp_path / "rank0.json").write_text(json.dumps(trace))
    for pure in ("1", "0"):
        os.environ[fastscan.PURE_PYTHON_ENV] = pure
        try:
            notes = [note for note in traceattr.load(tmp_path, cache=False, jobs=1).notes if "phase" in note]
        finally:
            del os.environ[fastscan.PURE_PYTHON_ENV]
        assert notes == [f"{tmp_path / 'rank0.json'}: skipped 2 events of a phase traceattr does not read "
                         "(ph \"3\" (1), \"B\" (1)); only complete 'X' events are timed"], notes
