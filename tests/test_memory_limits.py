"""Memory bounded by events, not only bytes (issue 36): --max-events refuses a file of too many events (CLI and
API, decoded or from the cache), and a MemoryError anywhere is one line naming the file, exit 2, never a
traceback: tested for real under RLIMIT_AS in a subprocess, in this process's decode and in a pool worker."""

from __future__ import annotations

import gzip
import io
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import traceattr
from traceattr.errors import TraceFormatError, TraceInputError

EVENT = '{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":7,"ts":%d,"dur":1}'


def tiny_trace(path: Path, events: int, distinct: int = 1000) -> Path:
    """`events` one-µs kernels (`distinct` of them, repeated), gzip: far under the --max-inflate ratio."""
    block = ",".join(EVENT % (i % 7, 2 * i) for i in range(min(events, distinct)))
    whole, rest = divmod(events, distinct)
    parts = [block] * whole + ([",".join(EVENT % (i % 7, 2 * i) for i in range(rest))] if rest else [])
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write('{"traceEvents":[' + ",".join(parts) + '],"baseTimeNanoseconds":1700000000000000000}')
    return path


WIDE_EVENT = ('{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":%d,"ts":%d,"dur":%d,'
              '"args":{"correlation":%d,"External id":%d}}')


def wide_trace(path: Path, events: int) -> Path:
    """`events` kernels that each hold something of their own (ids, one of 8 overlapping streams, a
    duration) but share 7 names, so the answer stays small: no columnar trick makes the decode small."""
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write('{"traceEvents":[' + ",".join(WIDE_EVENT % (i % 7, i % 8, 2 * i, 3 + i % 5, i, i)
                                                for i in range(events))
                  + '],"baseTimeNanoseconds":1700000000000000000}')
    return path


def cli(*args: str, limit_as: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m traceattr ARGS` in a fresh process, under RLIMIT_AS `limit_as` bytes when given."""
    def limited():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    environment = {k: v for k, v in os.environ.items() if k != "TRACEATTR_MAX_EVENTS"}
    return subprocess.run([sys.executable, "-m", "traceattr", *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=limited, env={**environment, **(env or {})})


def one_error_line(done: subprocess.CompletedProcess, path: Path) -> str:
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and str(path) in lines[0], done.stderr
    return lines[0]


def test_max_events_refuses_a_file_over_it_and_takes_one_at_it(tmp_path):
    trace = tiny_trace(tmp_path / "t.json.gz", 3000)
    over = cli("summarize", str(trace), "--no-cache", "-q", "--max-events", "2999")
    line = one_error_line(over, trace)
    assert "more than 2,999 events" in line and "--max-events" in line
    read = int(re.search(r"\(([\d,]+) read so far\)", line).group(1).replace(",", ""))
    assert 2999 < read <= 3000
    at = cli("summarize", str(trace), "--no-cache", "-q", "--format", "csv", "--max-events", "3000")
    assert at.returncode == 0, at.stderr
    assert pd.read_csv(io.StringIO(at.stdout))["count"].sum() == 3000
    # the environment variable the option sets (pool workers read it there too)
    assert "more than 100 events" in cli("summarize", str(trace), "--no-cache", "-q",
                                         env={"TRACEATTR_MAX_EVENTS": "100"}).stderr
    bad = cli("summarize", str(trace), "--no-cache", "-q", "--max-events", "0")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--max-events" in bad.stderr


def test_max_events_in_a_pool_skips_the_file_under_skip_bad(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    big = tiny_trace(folder / "rank0.json.gz", 5000)
    tiny_trace(folder / "rank1.json.gz", 50)
    refused = cli("summarize", str(folder), "--no-cache", "-q", "-j", "2", "--max-events", "1000")
    assert "more than 1,000 events" in one_error_line(refused, big)
    skipped = cli("summarize", str(folder), "--no-cache", "-q", "-j", "2", "--max-events", "1000", "--skip-bad",
                  "--format", "csv")
    assert skipped.returncode == 0, skipped.stderr
    assert f"skipped {big.name}: more than 1,000 events" in skipped.stderr      # notes name files under PATH and skipped.stderr.count("skipped") == 1
    assert pd.read_csv(io.StringIO(skipped.stdout))["count"].sum() == 50


def test_max_events_holds_for_a_file_the_cache_serves(tmp_path):
    """The map's memory grows per event wherever the columns come from: a cached file is refused as its
    decode would be, and an answer cached under another limit is not replayed."""
    trace, cache = tiny_trace(tmp_path / "t.json.gz", 3000), str(tmp_path / "cache")
    assert cli("summarize", str(trace), "-q", "--cache-dir", cache).returncode == 0
    for args in (("--by", "kernel"), ("--by", "category")):     # the answer cache, and the file cache alone
        refused = cli("summarize", str(trace), "-q", "--cache-dir", cache, "--max-events", "100", *args)
        assert "more than 100 events (3,000 read so far)" in one_error_line(refused, trace)


def test_max_events_is_a_load_option_of_the_api(tmp_path):
    trace = tiny_trace(tmp_path / "t.json.gz", 3000)
    with pytest.raises(TraceFormatError, match="more than 2,000 events"):
        traceattr.load(trace, cache=False, max_events=2000)
    with pytest.raises(TraceFormatError, match="max_events="):
        traceattr.summarize(str(trace), cache=False, jobs=1, max_events=2000)
    loaded = traceattr.load(trace, cache=False, max_events=3000)
    assert loaded.device.num_rows == 3000
    assert traceattr.summarize(str(trace), cache=False, jobs=1, max_events=3000)["count"].sum() == 3000
    with pytest.raises(TypeError, match="max_events"):
        traceattr.summarize(loaded, max_events=10)       # a load option beside a TraceSet
    with pytest.raises(TraceInputError, match="at least 1"):
        traceattr.load(trace, cache=False, max_events=0)
    with pytest.raises(TypeError, match="max_events"):
        traceattr.load(trace, cache=False, max_events="10")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_out_of_memory_is_one_line_naming_the_file_in_the_driver_and_in_a_worker(tmp_path):
    """A file that needs far more memory than is left (600 k events with ids of their own on 8 overlapping
    streams: ~100 MB decoded) but is well under --max-inflate: one line naming it, exit 2, in this process,
    and in a pool worker, where --skip-bad skips it with a note. The address space allowed is what a run over
    a tiny file reserves plus 32 MB; one malloc arena (MALLOC_ARENA_MAX=1), so that what a run reserves
    is close to what it uses."""
    folder = tmp_path / "run"
    folder.mkdir()
    big, small = wide_trace(folder / "rank0.json.gz", 600_000), tiny_trace(folder / "rank1.json.gz", 10)
    env = {"MALLOC_ARENA_MAX": "1"}
    probe = subprocess.run([sys.executable, "-c", "import re, sys\nfrom traceattr.cli import main\ntry:\n"
                            "    main(sys.argv[1:], prog_name='traceattr')\nexcept SystemExit:\n    pass\n"
                            "print(re.search(r'VmPeak:\\s+(\\d+)', open('/proc/self/status').read()).group(1))",
                            "summarize", str(small), "--no-cache", "-q", "-j", "1"], capture_output=True, text=True,
                           env={**os.environ, **env})
    limit = (int(probe.stdout.split()[-1]) << 10) + (32 << 20)
    here = cli("summarize", str(big), "--no-cache", "-q", "-j", "1", limit_as=limit, env=env)
    assert "out of memory" in one_error_line(here, big)
    pooled = cli("summarize", str(folder), "--no-cache", "-q", "-j", "2", "--skip-bad", "--format", "csv",
                 limit_as=limit, env=env)
    assert pooled.returncode == 0 and "Traceback" not in pooled.stderr, pooled.stderr
    assert f"skipped {big.name}: out of memory" in pooled.stderr
    assert pd.read_csv(io.StringIO(pooled.stdout))["count"].sum() == 10
