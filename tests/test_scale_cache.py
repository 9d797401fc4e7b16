"""The caches (decoded files, finished tables, answers): kept in the user's cache folder (never beside the
traces), served only while each trace is unchanged, corrupt or foreign entries rebuilt, least recently used
entries evicted past the cap, and concurrent runs never see half an entry."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.io.cache import FileCache
from traceattr.io.cachedir import TAG_NAME, CacheDir
from traceattr.io.results import CACHED_SOURCE
from clirun import run_cli
from tracesets import SMALL, assert_same


def busy_by_rank(traceset) -> dict:
    result = sweep(traceset)
    result.self_check()      # conservation: Σ self == busy per device
    return result.groups.groupby(S.RANK)[S.BUSY_NS].sum().to_dict()


def load_counting(path, cache_dir) -> tuple:
    cache = FileCache(cache_dir)
    return traceattr.load(path, jobs=1, cache=cache), cache


def cli(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """In this process (tests/clirun.py): a process's exit code and output. Per-process state carries over
    (cachedir's bytes written since its last scan: a process scans each folder once), which no test of
    this file's cli() depends on; the concurrent runs and the import checks start processes of their own."""
    return run_cli(*args, env=env, cwd=cwd)


def invoke(*args: str):
    """The CLI in this process (click's runner: the real command code, without a Python start)."""
    from click.testing import CliRunner

    from traceattr.cli import main

    return CliRunner().invoke(main, list(args))


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def test_second_load_is_served_from_the_cache_and_identical(tmp_path):
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    before = files_under(traces)
    fresh = traceattr.load(traces, jobs=1, cache=False)
    first, cold = load_counting(traces, cache_dir)
    second, warm = load_counting(traces, cache_dir)
    assert (cold.hits, cold.misses) == (0, 2)
    assert (warm.hits, warm.misses) == (2, 0)
    assert files_under(traces) == before                        # nothing written beside the traces
    assert (cache_dir / TAG_NAME).is_file() and len(list((cache_dir / "files").glob("*.record"))) == 2
    assert_same(fresh, first)
    assert_same(fresh, second)
    busy_by_rank(second)


def test_default_location_is_the_user_cache_folder_never_the_trace_folder(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    traces.chmod(0o555)                                         # read-only by convention, even for root
    monkeypatch.delenv("TRACEATTR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    try:
        assert CacheDir.at().root == tmp_path / "xdg" / "traceattr"
        traceattr.load(traces, jobs=1)
        assert load_counting(traces, None)[1].hits == 1
        assert (tmp_path / "xdg" / "traceattr" / "files").is_dir()
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert CacheDir.at().root == tmp_path / "home" / ".cache" / "traceattr"
        done = invoke("summarize", str(traces), "--format", "csv", "-q")
        assert done.exit_code == 0, done.output
        assert (tmp_path / "home" / ".cache" / "traceattr" / "results").is_dir()
        assert ((tmp_path / "home" / ".cache" / "traceattr").stat().st_mode & 0o077) == 0   # private
        assert sorted(p.name for p in traces.iterdir()) == ["rank0.pt.trace.json"]
    finally:
        traces.chmod(0o755)


def test_cache_dir_option_and_environment_choose_a_team_cache(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    team = tmp_path / "team"
    assert invoke("summarize", str(traces), "--by", "rank", "--cache-dir", str(team)).exit_code == 0
    assert len(list((team / "files").glob("*.record"))) == 1
    monkeypatch.setenv("TRACEATTR_CACHE_DIR", str(team))
    assert load_counting(traces, None)[1].hits == 1           # the environment names the same folder
    monkeypatch.delenv("TRACEATTR_CACHE_DIR")
    cache = FileCache.of(str(team))                            # load(cache="DIR") in Python
    traceattr.load(traces, jobs=1, cache=cache)
    assert cache.hits == 1 and cache.dir.root == team


def test_a_bad_cache_cap_is_refused_in_one_line(tmp_path):
    traces = tmp_path / "traces"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    done = cli("summarize", str(traces), env={"TRACEATTR_CACHE_MAX": "lots"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "TRACEATTR_CACHE_MAX='lots'" in done.stderr
    assert CacheDir(tmp_path, max_bytes=None).max_bytes == 10 << 30


@pytest.mark.parametrize("make,problem", [
    (lambda p: p.write_text("a file"), "exists and is not a folder"),
    (lambda p: (p.mkdir(), (p / "thesis.tex").write_text("precious")), "not empty and not a traceattr cache"),
])
def test_a_cache_dir_that_is_not_one_is_refused_in_one_line(tmp_path, make, problem):
    traces, target = tmp_path / "traces", tmp_path / "target"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    make(target)
    for run in (cli("summarize", str(traces), "--cache-dir", str(target)),
                cli("summarize", str(traces), env={"TRACEATTR_CACHE_DIR": str(target)}),
                cli("cache", "clear", "--cache-dir", str(target))):
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.count("\n") == 1 and problem in run.stderr and str(target) in run.stderr
    assert target.is_file() or (target / "thesis.tex").read_text() == "precious"


def test_a_changed_or_replaced_trace_is_never_served_stale(tmp_path):
    trace = tmp_path / "rank0.pt.trace.json"
    cache_dir = tmp_path / "cache"
    write_trace(trace, TraceSpec(**SMALL))
    before = busy_by_rank(load_counting(tmp_path, cache_dir)[0])
    slower = write_trace(tmp_path / "other.json.tmp", TraceSpec(kernel_scale={"gemm": 3.0}, **SMALL))
    os.replace(tmp_path / "other.json.tmp", trace)          # replaced under the same name
    after, cache = load_counting(tmp_path, cache_dir)
    assert cache.misses == 1
    assert busy_by_rank(after) == {0: sum(d.busy_ns for d in slower.devices.values())} != before
    # same size, same content length, only the mtime differs: still re-read
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1_000_000))
    assert load_counting(tmp_path, cache_dir)[1].misses == 1


def test_corrupt_or_other_version_entries_are_rebuilt(tmp_path):
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    reference = traceattr.load(traces, jobs=1, cache=False)
    load_counting(traces, cache_dir)
    folder = cache_dir / "files"
    tables = sorted(folder.glob("*.device"))
    entries = sorted(folder.glob("*.record"))
    tables[0].write_bytes(b"PAR1 not really parquet")            # a damaged table
    facts = json.loads(entries[1].read_text())
    facts["key"]["format"] = -1                                  # written by another cache version
    entries[1].write_text(json.dumps(facts))
    rebuilt, cache = load_counting(traces, cache_dir)
    assert (cache.hits, cache.misses) == (0, 2)
    assert_same(reference, rebuilt)
    assert load_counting(traces, cache_dir)[1].hits == 2         # rewritten entries are good again
    entries[0].write_text("{ truncated")
    assert_same(reference, load_counting(traces, cache_dir)[0])


def test_cli_no_cache_writes_nothing_and_cached_output_matches(tmp_path):
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    run = lambda *extra: invoke("summarize", str(traces), "--format", "csv", "--cache-dir", str(cache_dir), *extra)  # noqa: E731
    plain = run("--no-cache")
    assert plain.exit_code == 0, plain.output
    assert not cache_dir.exists()
    cold, warm = run(), run()
    assert plain.stdout == cold.stdout == warm.stdout
    header = invoke("summarize", str(traces), "--by", "rank", "--cache-dir", str(cache_dir)).stdout
    assert re.search(r"2 from (the )?cache", " ".join(header.split()))


def test_finished_tables_and_answers_are_reused_only_for_unchanged_inputs(tmp_path):
    trace = tmp_path / "rank0.pt.trace.json"
    write_trace(trace, TraceSpec(**SMALL))
    run = lambda *extra: invoke("summarize", str(tmp_path), "-q", *extra)   # noqa: E731
    first, second = run("--by", "category"), run("--by", "category")
    assert "cached result" not in first.stdout and "cached result" in second.stdout
    body = lambda text: text[text.index("╯"):]                 # noqa: E731  (the table below the header box)
    assert body(first.stdout) == body(second.stdout)
    assert run("--by", "category", "--format", "json").stdout == run("--by", "category", "--format", "json").stdout
    assert "cached result" not in run("--by", "kernel").stdout  # another request: computed
    slower = write_trace(trace, TraceSpec(kernel_scale={"gemm": 3.0}, **SMALL))
    changed = pd.read_csv(io.StringIO(run("--by", "category", "--format", "csv").stdout))
    assert changed[S.SELF_NS].sum() == sum(d.busy_ns for d in slower.devices.values())
    assert run("--by", "category").stdout != second.stdout         # the old answer is never replayed


def test_cached_attribution_tables_store_without_warnings(tmp_path):
    """attribute() tables carry attrs with tuple keys; caching the finished table must neither warn nor
    fail: the second look is served from the finished-table cache."""
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic_2rank", folder)
    runs = [cli("summarize", str(folder), "--by", "op") for _ in range(2)]
    assert all(run.returncode == 0 and "Warning" not in run.stderr for run in runs), runs[0].stderr
    assert "cached result" in runs[1].stdout


def test_least_recently_used_entries_are_evicted_past_the_cap(tmp_path):
    cache_dir = tmp_path / "cache"
    traces = []
    for index in range(4):
        folder = tmp_path / f"run{index}"
        write_trace_set(folder, TraceSpec(ranks=1, **SMALL))
        traces.append(folder)
    for folder in traces[:3]:
        load_counting(folder, cache_dir)
    entry_bytes = sum(p.stat().st_size for p in (cache_dir / "files").iterdir()) // 3
    records = sorted((cache_dir / "files").glob("*.record"), key=lambda p: p.stat().st_mtime_ns)
    for age, record in zip((300, 200, 100), records):            # run0 oldest ... run2 newest
        os.utime(record, (record.stat().st_atime - age, record.stat().st_mtime - age))
    assert load_counting(traces[0], cache_dir)[1].hits == 1     # a hit makes run0 the most recent
    capped = FileCache(CacheDir(cache_dir, max_bytes=int(3.5 * entry_bytes)))
    traceattr.load(traces[3], jobs=1, cache=capped)              # a fourth entry: one must go
    hits = {folder.name: load_counting(folder, cache_dir)[1].hits for folder in traces}
    assert hits == {"run0": 1, "run1": 0, "run2": 1, "run3": 1}  # run1 was the least recently used


def test_cache_info_and_clear(tmp_path):
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    assert invoke("summarize", str(traces), "--cache-dir", str(cache_dir)).exit_code == 0
    (cache_dir / "files" / "README.txt").write_text("not ours")
    info = cli("cache", "info", "--cache-dir", str(cache_dir))
    assert info.returncode == 0 and str(cache_dir) in info.stdout
    assert "2 files, 1 results, 1 answers" in info.stdout
    cleared = cli("cache", "clear", env={"TRACEATTR_CACHE_DIR": str(cache_dir)})
    assert cleared.returncode == 0 and "removed 4 entries" in cleared.stdout
    assert sorted(p.name for p in (cache_dir / "files").iterdir()) == ["README.txt"]
    assert "0 files, 0 results, 0 answers" in invoke("cache", "info", "--cache-dir", str(cache_dir)).stdout
    assert "cached result" not in invoke("summarize", str(traces), "--cache-dir", str(cache_dir)).stdout


CONCURRENT = """
import contextlib, io, sys
from traceattr.cli import main
for by in sys.argv[2:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["summarize", sys.argv[1], "--format", "csv", "--by", by, "-q", "--jobs", "1"], standalone_mode=False)
    sys.stdout.write(f"=== {by}\\n" + out.getvalue())
"""


def test_concurrent_runs_on_one_cache_never_see_half_an_entry(tmp_path):
    """Four processes summarize the same traces through one cache at once, with a cap so small that they
    evict each other's entries while others read and write them: every answer equals the uncached one."""
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    levels = ("kernel", "category", "rank")
    truth = {by: invoke("summarize", str(traces), "--format", "csv", "--by", by, "--no-cache").stdout
             for by in levels}
    env = {**os.environ, "TRACEATTR_CACHE_DIR": str(cache_dir), "TRACEATTR_CACHE_MAX": "96k"}
    orders = [levels + levels[:1], levels[::-1] + levels[:1], levels[1:] + levels[:2], levels + levels[2:]]
    workers = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(traces), *order], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for order in orders]
    for worker, order in zip(workers, orders):
        stdout, stderr = worker.communicate(timeout=300)
        assert worker.returncode == 0 and "Traceback" not in stderr, stderr
        answers = stdout.split("=== ")[1:]
        assert [a.split("\n", 1)[0] for a in answers] == list(order)
        for answer in answers:
            by, text = answer.split("\n", 1)
            assert text == truth[by], by
    assert CacheDir(cache_dir).usage().bytes <= 96 * 1024 * 9 // 8 + 64 * 1024   # the cap holds (+ one entry)


PREPARE = """
import sys
from pathlib import Path
from traceattr.io.cachedir import CacheDir
for root in sys.argv[1:]:
    CacheDir.at(root)._prepare(Path(root) / "files")
"""
CHECK = """
import sys
from pathlib import Path
from traceattr.errors import TraceInputError
from traceattr.io.cachedir import TAG_NAME, CacheDir
from traceattr.io.results import CACHED_SOURCE
refused = 0
for root in sys.argv[1:]:
    while not (Path(root) / TAG_NAME).is_file():
        try:
            CacheDir.at(root)
        except TraceInputError:
            refused += 1
            break
print(refused)
"""


def test_a_cache_folder_being_prepared_is_never_refused(tmp_path):
    """One process prepares 300 new cache folders while another checks each (CacheDir.at, as every run and
    pool worker does) until its tag is there: a folder is never seen holding a file and no tag. Before,
    the tag was renamed from a temporary file and checked apart from the listing: 9 in 10 were refused,
    and a pool worker's run failed with "not a traceattr cache" (a flaky CLI test)."""
    roots = [str(tmp_path / f"cache{i}") for i in range(300)]
    checker = subprocess.Popen([sys.executable, "-c", CHECK, *roots], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    preparer = subprocess.run([sys.executable, "-c", PREPARE, *roots], capture_output=True, text=True, timeout=120)
    stdout, stderr = checker.communicate(timeout=120)
    assert preparer.returncode == 0 and checker.returncode == 0, preparer.stderr + stderr
    assert stdout.strip() == "0"
    assert all((Path(root) / TAG_NAME).read_bytes().startswith(b"Signature: ") for root in roots)


def test_help_version_and_a_cached_answer_import_no_heavy_modules(tmp_path, monkeypatch):
    """`traceattr --help`, `--version` and a repeated summarize start without pandas, pyarrow, numpy or rich
    (measured with python -X importtime; docs/scale.md has the timings)."""
    monkeypatch.setenv("COLUMNS", "160")     # a table's answer is cached per width: both runs at 160 columns
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=1, **SMALL))
    invoke("summarize", str(traces), "--by", "category", "--cache-dir", str(cache_dir))
    heavy = re.compile(r"\|\s+(pandas|pyarrow|numpy|rich|msgspec)(\.|$)", re.M)
    for args in (["--help"], ["--version"], ["summarize", str(traces), "--by", "category", "--cache-dir",
                                             str(cache_dir)]):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "traceattr.cli", *args],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "160"})
        assert done.returncode == 0, done.stderr
        assert "import time:" in done.stderr and not heavy.search(done.stderr), heavy.findall(done.stderr)
    assert "cached result" in done.stdout and "compute" in done.stdout


def test_a_replayed_answer_is_byte_identical_to_the_rendered_cached_table(tmp_path):
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    for fmt in ("table", "csv", "json", "markdown"):
        args = ("summarize", str(traces), "--by", "op", "--format", fmt, "--cache-dir", str(cache_dir), "-q")
        first = invoke(*args)                          # computed (table) or read from the finished table
        replayed = invoke(*args)
        for path in (cache_dir / "answers").iterdir():
            path.unlink()                              # no answer: the finished table is read and rendered
        rendered = invoke(*args)
        assert first.exit_code == replayed.exit_code == rendered.exit_code == 0
        assert replayed.stdout == rendered.stdout and replayed.stderr == rendered.stderr
        assert "cached result" in replayed.stdout or fmt in ("csv", "json")
        written = tmp_path / f"out.{fmt}"
        assert invoke(*args, "-o", str(written)).stdout == ""
        assert written.read_text(encoding="utf-8") == replayed.stdout


def test_several_runs_under_a_folder_get_a_replayed_answer_too(tmp_path, monkeypatch):
    """A folder of several runs (like sample_traces/) was never answered from the cache: each repeat decoded
    nothing but imported and rendered everything (1.6 s for sample_traces). The replay shows every run's
    header with the cached source, the numbers as computed."""
    monkeypatch.setenv("COLUMNS", "160")
    traces, cache_dir = tmp_path / "traces", tmp_path / "cache"
    write_trace_set(traces / "control", TraceSpec(ranks=2, seed=1, **SMALL))
    write_trace_set(traces / "test", TraceSpec(ranks=1, seed=2, **SMALL))
    for fmt in ("table", "csv"):
        args = ("summarize", str(traces), "--format", fmt, "--cache-dir", str(cache_dir), "-q")
        first, again = cli(*args), cli(*args)
        assert first.returncode == again.returncode == 0, first.stderr + again.stderr
        assert len({p.name.split(".")[0] for p in (cache_dir / "answers").iterdir()}) == (1 if fmt == "table" else 2)
        if fmt == "csv":
            assert again.stdout == first.stdout and "run," in first.stdout.splitlines()[0]
            continue
        flat = " ".join(again.stdout.split())
        assert flat.count("cached result") == 2 and "source: traces" not in flat
        assert again.stdout.replace("cached result (inputs unchanged since it was computed)", "") \
            .count("control") == first.stdout.count("control")
        rows = [line for line in again.stdout.splitlines() if "│" not in line]
        assert rows == [line for line in first.stdout.splitlines() if "│" not in line]   # the tables as computed


def test_an_answer_under_a_low_max_inflate_is_not_served_once_the_limit_is_raised(tmp_path):
    """--max-inflate decides, under --skip-bad, which files are read: an answer stored while rank 1 was
    refused came back after the limit was raised (one rank, its waits and late arrivals gone)."""
    import gzip

    traces, cache_dir = tmp_path / "run", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    plain = next(traces.glob("*rank1*"))
    with open(plain, "rb") as src, gzip.open(f"{plain}.gz", "wb") as dst:
        dst.write(src.read())
    plain.unlink()

    def ranks(*extra):
        done = cli("summarize", str(traces), "--by", "rank", "--format", "csv", "--skip-bad", "-q",
                   "--cache-dir", str(cache_dir), *extra)
        assert done.returncode == 0, done.stderr
        return sorted(pd.read_csv(io.StringIO(done.stdout))["rank"].tolist()), done.stderr

    low, stderr = ranks("--max-inflate", "2:1")
    assert low == [0] and "inflates to more than" in stderr
    for _ in range(2):                   # computed, then its own answer served
        raised, stderr = ranks()
        assert raised == [0, 1] and "inflates" not in stderr, stderr
    assert ranks("--max-inflate", "2:1")[0] == [0]     # and the low limit's answer is its own


def test_a_file_replaced_with_the_same_size_and_mtime_is_read_again(tmp_path):
    """The key was (path, size, mtime): a trace edited in place at equal length with its mtime put back
    (`touch -r`, `cp -p`, `rsync -a` do this) was served stale from every layer."""
    traces, cache_dir = tmp_path / "run", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))

    def kernels():
        done = cli("summarize", str(traces), "--format", "csv", "-q", "--cache-dir", str(cache_dir))
        assert done.returncode == 0, done.stderr
        return done.stdout.replace(CACHED_SOURCE, "")

    before = kernels()
    path = next(traces.glob("*rank0*"))
    stat = path.stat()
    text = path.read_text()
    at = text.index('"dur": ', text.index('"cat": "kernel"')) + len('"dur": ')
    while text[at + 1].isdigit() or text[at + 1] == ".":      # the last digit of the kernel's dur
        at += 1
    digit = text[at]
    assert digit.isdigit()
    path.write_text(text[:at] + str((int(digit) + 1) % 10) + text[at + 1:])    # same length
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    fresh = cli("summarize", str(traces), "--format", "csv", "-q", "--no-cache").stdout
    assert fresh != before
    assert kernels() == fresh


def test_one_process_scans_the_cache_folder_once_not_once_per_file(tmp_path, monkeypatch):
    """Each decoded file made its own CacheDir, whose first write listed and stat-ed the whole cache: a cold
    64-rank run on a team cache of 5000 entries took 50 s instead of 6 s. The scan is now once per process
    and folder (then after each eighth of the cap written)."""
    traces, cache_dir = tmp_path / "run", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=8, **SMALL))
    scans = []
    real_scan = CacheDir._scan
    monkeypatch.setattr(CacheDir, "_scan", lambda self: scans.append(self.root) or real_scan(self))
    monkeypatch.setattr(traceattr.io.cachedir, "_WRITTEN_SINCE_SCAN", {})
    done = invoke("summarize", str(traces), "--jobs", "1", "-q", "--cache-dir", str(cache_dir))
    assert done.exit_code == 0, done.output
    written = sum(1 for _ in (cache_dir / "files").glob("*.record"))
    assert written == 8 and scans == [cache_dir.resolve()]


def test_cache_info_shows_the_cap_in_a_unit_that_fits(tmp_path):
    for cap, shown in (("300K", "300 KiB"), ("1", "1 B"), ("10G", "10 GiB"), ("1536M", "1.5 GiB")):
        done = cli("cache", "info", "--cache-dir", str(tmp_path / "c"), env={"TRACEATTR_CACHE_MAX": cap})
        assert done.returncode == 0 and f"of {shown} " in done.stdout, (cap, done.stdout)


def test_cache_clear_counts_only_what_it_removed_and_fails_when_it_could_not(tmp_path, request):
    """On a cache the user cannot write to (a team cache of colleagues, a read-only mount), clear said
    'removed 4 entries' and exited 0 having removed nothing."""
    import shutil
    import tempfile

    traces = tmp_path / "run"
    # pytest's tmp_path is private to its user: the other user below must be able to reach the cache
    shared = Path(tempfile.mkdtemp(prefix="traceattr-team-"))
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    cache_dir = shared / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    assert cli("summarize", str(traces), "-q", "--cache-dir", str(cache_dir)).returncode == 0
    before = files_under(cache_dir)
    as_other = os.geteuid() == 0    # root ignores modes: clear as another user, as a colleague would
    if not as_other:
        for kind in ("files", "results", "answers"):
            (cache_dir / kind).chmod(0o555)
    done = clear_as(cache_dir, as_other, tmp_path)
    for kind in ("files", "results", "answers"):
        (cache_dir / kind).chmod(0o755)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "removed 0 entries (0 B)" in done.stdout
    assert re.fullmatch(r"traceattr: error: \d+ files could not be removed from .*\(Permission denied\)\n",
                        done.stderr), done.stderr
    assert files_under(cache_dir) == before
    done = cli("cache", "clear", "--cache-dir", str(cache_dir))
    assert done.returncode == 0 and re.match(r"removed [1-9]\d* entries", done.stdout), done.stdout


def clear_as(cache_dir: Path, other_user: bool, scratch: Path) -> subprocess.CompletedProcess:
    """`traceattr cache clear` as this user (a subprocess), or as user nobody: a forked child of this
    process that drops root before the command runs (nobody may not be able to start this Python)."""
    if not other_user:
        return cli("cache", "clear", "--cache-dir", str(cache_dir))
    from traceattr.cli import main

    out, err = scratch / "out", scratch / "err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        pid = os.fork()
        if pid == 0:                                        # pragma: no cover - the child
            code = 3
            try:
                os.dup2(stdout.fileno(), 1)
                os.dup2(stderr.fileno(), 2)
                sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                main(["cache", "clear", "--cache-dir", str(cache_dir)])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 3
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess([], os.waitstatus_to_exitcode(status), out.read_text(), err.read_text())


def test_a_replayed_note_names_files_as_this_run_typed_them(tmp_path):
    """Stored notes name files as typed: typed `../run` from one folder, the answer replayed from another
    named `../run/notatrace.json`, which is no path from there."""
    traces, cache_dir = tmp_path / "run", tmp_path / "cache"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    (traces / "notatrace.json").write_text('{"config": 1}')
    (tmp_path / "a").mkdir()

    def notes(cwd, typed):
        done = cli("summarize", typed, "--format", "csv", "-q", "--cache-dir", str(cache_dir), cwd=cwd)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stderr.splitlines() if "notatrace" in line]

    for _ in range(2):       # issue 37: a note names a file relative to the PATH argument, as typed or not
        typed_above = notes(tmp_path / "a", "../run")
        assert typed_above and all("skipped notatrace.json:" in n for n in typed_above), typed_above
        shown = notes(tmp_path, "run")
        assert shown and all("skipped notatrace.json:" in n for n in shown), shown
        elsewhere = notes(tmp_path / "a", str(traces.parent / "." / "run"))
        assert elsewhere and all("skipped notatrace.json:" in n for n in elsewhere), elsewhere
