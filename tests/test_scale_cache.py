"""The caches (decoded files, finished tables): served only while each trace is unchanged; corrupt or
foreign entries rebuilt."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pandas as pd

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.io.cache import CACHE_DIR_NAME, FileCache, cache_dir_for
from tracesets import SMALL, assert_same


def busy_by_rank(traceset) -> dict:
    result = sweep(traceset)
    result.self_check()      # conservation: Σ self == busy per device
    return result.groups.groupby(S.RANK)[S.BUSY_NS].sum().to_dict()


def load_counting(path) -> tuple:
    cache = FileCache(cache_dir_for(path))
    return traceattr.load(path, jobs=1, cache=cache), cache


def test_second_load_is_served_from_the_cache_and_identical(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=2, **SMALL))
    fresh = traceattr.load(tmp_path, jobs=1, cache=False)
    first, cold = load_counting(tmp_path)
    second, warm = load_counting(tmp_path)
    assert (cold.hits, cold.misses) == (0, 2)
    assert (warm.hits, warm.misses) == (2, 0)
    assert (tmp_path / CACHE_DIR_NAME).is_dir()
    assert_same(fresh, first)
    assert_same(fresh, second)
    busy_by_rank(second)


def test_a_changed_or_replaced_trace_is_never_served_stale(tmp_path):
    trace = tmp_path / "rank0.pt.trace.json"
    write_trace(trace, TraceSpec(**SMALL))
    before = busy_by_rank(load_counting(tmp_path)[0])
    slower = write_trace(tmp_path / "other.json.tmp", TraceSpec(kernel_scale={"gemm": 3.0}, **SMALL))
    os.replace(tmp_path / "other.json.tmp", trace)          # replaced under the same name
    after, cache = load_counting(tmp_path)
    assert cache.misses == 1
    assert busy_by_rank(after) == {0: sum(d.busy_ns for d in slower.devices.values())} != before
    # same size, same content length, only the mtime differs: still re-read
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1_000_000))
    assert load_counting(tmp_path)[1].misses == 1


def test_corrupt_or_other_version_entries_are_rebuilt(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=2, **SMALL))
    reference = traceattr.load(tmp_path, jobs=1, cache=False)
    load_counting(tmp_path)
    folder = tmp_path / CACHE_DIR_NAME
    tables = sorted(folder.glob("*.device.parquet"))
    entries = sorted(folder.glob("*.json"))
    tables[0].write_bytes(b"PAR1 not really parquet")            # a damaged table
    facts = json.loads(entries[1].read_text())
    facts["key"]["format"] = -1                                  # written by another cache version
    entries[1].write_text(json.dumps(facts))
    rebuilt, cache = load_counting(tmp_path)
    assert (cache.hits, cache.misses) == (0, 2)
    assert_same(reference, rebuilt)
    assert load_counting(tmp_path)[1].hits == 2                  # rewritten entries are good again
    entries[0].write_text("{ truncated")
    assert_same(reference, load_counting(tmp_path)[0])


def test_unusable_trace_folder_cache_falls_back_to_the_user_cache(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    (traces / CACHE_DIR_NAME).write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir_for(traces) == tmp_path / "xdg" / "traceattr" / "files"
    load_counting(traces)
    assert load_counting(traces)[1].hits == 1
    readonly = tmp_path / "readonly"
    write_trace_set(readonly, TraceSpec(ranks=1, **SMALL))
    readonly.chmod(0o555)                       # no write bit: read-only by intent, even for root
    try:
        assert cache_dir_for(readonly) == tmp_path / "xdg" / "traceattr" / "files"
        traceattr.load(readonly, jobs=1)
        assert not (readonly / CACHE_DIR_NAME).exists()
        assert load_counting(readonly)[1].hits == 1
    finally:
        readonly.chmod(0o755)


def test_cli_no_cache_writes_nothing_and_cached_output_matches(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=2, **SMALL))
    run = lambda *extra: subprocess.run(                       # noqa: E731
        [sys.executable, "-m", "traceattr.cli", "summarize", str(tmp_path), "--format", "csv", *extra],
        capture_output=True, text=True, timeout=60)
    plain = run("--no-cache")
    assert plain.returncode == 0, plain.stderr
    assert not (tmp_path / CACHE_DIR_NAME).exists()
    cold, warm = run(), run()
    assert (tmp_path / CACHE_DIR_NAME).is_dir()
    assert plain.stdout == cold.stdout == warm.stdout
    header = subprocess.run([sys.executable, "-m", "traceattr.cli", "summarize", str(tmp_path), "--by", "rank"],
                            capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"2 from (the )?cache", " ".join(header.split()))


def test_finished_tables_are_reused_only_for_unchanged_inputs(tmp_path):
    trace = tmp_path / "rank0.pt.trace.json"
    write_trace(trace, TraceSpec(**SMALL))
    run = lambda *extra: subprocess.run(                       # noqa: E731
        [sys.executable, "-m", "traceattr.cli", "summarize", str(tmp_path), *extra],
        capture_output=True, text=True, timeout=60)
    first, second = run("--by", "category"), run("--by", "category")
    assert "cached result" not in first.stdout and "cached result" in second.stdout
    body = lambda text: text[text.index("╯"):]                 # noqa: E731  (the table below the header box)
    assert body(first.stdout) == body(second.stdout)
    assert run("--by", "category", "--format", "json").stdout == run("--by", "category", "--format", "json").stdout
    assert "cached result" not in run("--by", "kernel").stdout  # another request: computed
    slower = write_trace(trace, TraceSpec(kernel_scale={"gemm": 3.0}, **SMALL))
    changed = pd.read_csv(io.StringIO(run("--by", "category", "--format", "csv").stdout))
    assert changed[S.SELF_NS].sum() == sum(d.busy_ns for d in slower.devices.values())


def test_cached_attribution_tables_store_without_warnings(tmp_path):
    """attribute() tables carry attrs with tuple keys; caching the finished table must neither warn nor
    fail: the second look is served from the finished-table cache."""
    import shutil
    from pathlib import Path

    folder = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic_2rank", folder)
    runs = [subprocess.run([sys.executable, "-m", "traceattr.cli", "summarize", str(folder), "--by", "op"],
                           capture_output=True, text=True) for _ in range(2)]
    assert all(run.returncode == 0 and "Warning" not in run.stderr for run in runs), runs[0].stderr
    assert "cached result" in runs[1].stdout
