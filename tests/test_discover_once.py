"""Discover once (issue 35): a command walks its input folder once, opens each trace file at most once and
stats it at most twice (found; unchanged after its read), on a cold and on a warm cache.

Counted in process (-j 1, so every map runs here) by wrapping the os and io functions that list, open and
stat a path: os.scandir / os.listdir (os.walk lists through os.scandir), os.stat / os.lstat (pathlib's
is_file, exists and os.path.realpath go through them), builtins.open / io.open / os.open. Before this, one
cold `summarize DIR` of 8 ranks listed the folder 6 times and stat'd each trace 10 times.

The same holds for era-A and era-B traces (their era told from the one read: tests/test_era_one_read.py),
folders with graph captures (capture_traces/, execution_details.json, --graph-capture), every summarize
level, --tree, --links, convert, and the Python API (load, summarize, check, critical_path); a capture's
manifests are read once, and no manifest is looked for beside a trace the walk found.
"""

from __future__ import annotations

import builtins
import collections
import io
import os
import shutil
from pathlib import Path

import pytest

import traceattr
from traceattr.builder import TraceSpec, write_trace
from traceattr.builder.graphs import GraphPairSpec, build_graph_pair
from traceattr.builder.multirank import MultiRankSpec, build_multirank
from traceattr.cli import ATTRIBUTION_LEVELS, SUMMARY_LEVELS, main

from conftest import SAMPLE_TRACES, shared_trace

RANKS = 4


class Counted:
    """Per path under `root`: directory listings, opens and stats while it is active."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.listings, self.opens, self.stats = (collections.Counter() for _ in range(3))

    def _wrap(self, module, name: str, counter: collections.Counter, patch: pytest.MonkeyPatch) -> None:
        original = getattr(module, name)

        def counted(path=".", *args, **kwargs):
            if isinstance(path, (str, os.PathLike)):
                text = os.path.abspath(os.fspath(path))
                if text == self.root or text.startswith(self.root + os.sep):
                    counter[text] += 1
            return original(path, *args, **kwargs)

        patch.setattr(module, name, counted)

    def install(self, patch: pytest.MonkeyPatch) -> None:
        for name in ("scandir", "listdir"):
            self._wrap(os, name, self.listings, patch)
        for name in ("stat", "lstat"):
            self._wrap(os, name, self.stats, patch)
        self._wrap(os, "open", self.opens, patch)
        self._wrap(builtins, "open", self.opens, patch)
        if io.open is not builtins.open:
            self._wrap(io, "open", self.opens, patch)


def _counted(run, root: Path, monkeypatch: pytest.MonkeyPatch) -> Counted:
    """The listings, opens and stats under `root` while `run()` runs."""
    counted = Counted(root)
    with monkeypatch.context() as patch:
        counted.install(patch)
        run()
    return counted


def _cli(args: list[str]):
    def run():
        try:
            main(args, standalone_mode=False)
        except SystemExit as exc:        # check exits with its verdict
            assert exc.code in (0, 1, None), exc
    return run


def _run(args: list[str], root: Path, monkeypatch: pytest.MonkeyPatch) -> Counted:
    return _counted(_cli(args), root, monkeypatch)


def _assert_once(counted: Counted, traces: list, state: str, *, all_read: bool = True) -> None:
    """One walk, each trace opened at most once and stat'd at most twice; `all_read`: every trace opened
    (the counter sees the real reads)."""
    assert max(counted.listings.values(), default=0) <= 1, f"{state}: listed {dict(counted.listings)}"
    for trace in map(str, traces):
        assert counted.opens[trace] <= 1, f"{state} {trace}: opened {counted.opens[trace]} times"
        assert counted.stats[trace] <= 2, f"{state} {trace}: stat'd {counted.stats[trace]} times"
    if all_read:
        assert all(counted.opens[str(t)] == 1 for t in traces), {str(t): counted.opens[str(t)] for t in traces}


def _traces(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")) and p.name != "manifest.json"
            and not p.name.startswith("_traceattr")]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("once")
    build_multirank(MultiRankSpec(ranks=RANKS, steps=2), root / "run")
    build_multirank(MultiRankSpec(ranks=RANKS, steps=2, extra_compute_ns={1: 30_000}), root / "other")
    shutil.copytree(SAMPLE_TRACES / "capture_cpu_2rank", root / "capture")
    for summary in (root / "capture").glob("rank*/*.kernels.parquet"):    # fresh, as the capture writes them
        trace = summary.with_name(summary.name.replace(".kernels.parquet", ".pt.trace.json.gz"))
        newest = max(summary.stat().st_mtime_ns, trace.stat().st_mtime_ns)
        os.utime(summary, ns=(newest, newest))
    main(["convert", str(root / "run"), "-o", str(root / "store"), "--no-cache", "-q", "-j", "1"],
         standalone_mode=False)
    # eras A (integer epoch µs) and B (epoch µs with ns decimals): an era decided from the one read
    for era in ("A", "B"):
        write_trace(root / f"era{era}" / "rank0.pt.trace.json", TraceSpec(era=era, **SMALL))
    build_graph_pair(GraphPairSpec(), root / "graphs")       # replay.json, capture_traces/ (execution_details.json)
    return {"file": root / "run" / "rank1.pt.trace.json", "folder": root / "run", "capture": root / "capture",
            "store": root / "store", "other": root / "other", "era A": root / "eraA" / "rank0.pt.trace.json",
            "era B": root / "eraB" / "rank0.pt.trace.json", "graphs": root / "graphs"}


SMALL = dict(layers=2, ops_per_module=1, kernels_per_op=2, steps=2)     # TraceSpec fields of a quick build
FILES = ("file", "era A", "era B")          # sources that are one trace file (its folder is counted)

COMMANDS = {
    "summarize": lambda p, o, out: ["summarize", p, "--format", "csv"],
    "summarize --by rank": lambda p, o, out: ["summarize", p, "--by", "rank", "--format", "csv"],
    "check": lambda p, o, out: ["check", p, "--format", "csv"],
    "report": lambda p, o, out: ["report", p, "-o", out],
    "compare": lambda p, o, out: ["compare", p, o, "--format", "csv"],
}
# everything else the CLI offers that reads traces, on the folder
MORE_COMMANDS = {
    **{f"summarize --by {by}": lambda p, o, out, by=by: ["summarize", p, "--by", by, "--format", "csv"]
       for by in SUMMARY_LEVELS + ATTRIBUTION_LEVELS + ("critical",) if by not in ("kernel", "rank")},
    **{f"summarize --by {by} --tree": lambda p, o, out, by=by: ["summarize", p, "--by", by, "--tree"]
       for by in ("op_stack", "module", "annotation")},
    "summarize --links": lambda p, o, out: ["summarize", p, "--links"],
    "summarize --per-rank": lambda p, o, out: ["summarize", p, "--per-rank", "--format", "csv"],
    "check --clip-outliers": lambda p, o, out: ["check", p, "--clip-outliers", "--format", "csv"],
    "compare --by op": lambda p, o, out: ["compare", p, o, "--by", "op", "--format", "csv"],
    "convert": lambda p, o, out: ["convert", p, "-o", out, "--force"],
}


def _command_run(inputs, source: str, command: str, tmp_path: Path) -> tuple[list[str], Path, list]:
    """(the CLI args, the folder counted, its traces) of `command` on `source`."""
    if command == "report":
        pytest.importorskip("matplotlib")
    path = inputs[source]
    root = path.parent if source in FILES else path
    maker = COMMANDS.get(command) or MORE_COMMANDS[command]
    out = tmp_path / ("store" if command == "convert" else "page.html")
    args = maker(str(path), str(inputs["other"]), str(out)) + ["--cache-dir", str(tmp_path / "cache"), "-q", "-j", "1"]
    return args, root, [path] if source in FILES else _traces(root)


@pytest.mark.parametrize("source", ["file", "folder", "capture", "store", "era A", "era B", "graphs"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_trace_is_listed_once_opened_once_and_stat_twice(inputs, source, command, tmp_path, monkeypatch,
                                                              capsys):
    args, root, traces = _command_run(inputs, source, command, tmp_path)
    for state in ("cold", "warm"):
        counted = _run(args, root, monkeypatch)
        capsys.readouterr()
        if source == "store":      # the store's partitions are read by pyarrow; its folder is listed once
            assert max(counted.listings.values(), default=0) <= 1, f"{state}: listed {dict(counted.listings)}"
            assert set(counted.listings) <= {str(root)}
            continue
        # summaries answer a capture's summarize; a warm cache answers the rest
        _assert_once(counted, traces, state, all_read=state == "cold" and not (source == "capture"
                                                                               and command == "summarize"))
        # a capture's manifests are read once for every reader (summaries, problems, check's selected ranks)
        manifests = [str(m) for m in root.rglob("manifest.json")]
        assert all(counted.opens[m] <= 1 for m in manifests), {m: counted.opens[m] for m in manifests}
        if source not in FILES:    # the walk listed every trace's folder: no look for a manifest beside one
            looked = [p for p in counted.stats if p.endswith(os.sep + "manifest.json") and p not in manifests]
            assert not looked, f"{state}: stat'd missing {looked}"


@pytest.mark.parametrize("command", list(MORE_COMMANDS))
def test_every_command_reads_each_trace_once(inputs, command, tmp_path, monkeypatch, capsys):
    args, root, traces = _command_run(inputs, "folder", command, tmp_path)
    for state in ("cold", "warm"):
        counted = _run(args, root, monkeypatch)
        capsys.readouterr()
        _assert_once(counted, traces, state, all_read=state == "cold")


API = {
    "load": lambda path, cache: traceattr.load(path, cache=cache, jobs=1),
    "summarize": lambda path, cache: traceattr.summarize(path, cache=cache, jobs=1),
    "check": lambda path, cache: traceattr.check(path, cache=cache, jobs=1),
    "critical_path": lambda path, cache: traceattr.critical_path(path, cache=cache, jobs=1),
}


@pytest.mark.parametrize("source", ["folder", "graphs", "sglang"])
@pytest.mark.parametrize("function", list(API))
def test_the_api_reads_each_trace_once(inputs, source, function, tmp_path, monkeypatch):
    """The Python API as the commands: a folder with graph captures (capture_traces/) is walked once too."""
    root = shared_trace("tracelens/inference/sglang_decode") if source == "sglang" else inputs[source]
    traces = _traces(root)
    for state in ("cold", "warm"):
        counted = _counted(lambda: API[function](str(root), str(tmp_path / "cache")), root, monkeypatch)
        _assert_once(counted, traces, state, all_read=state == "cold")


def test_graph_capture_given_reads_each_trace_once(inputs, tmp_path, monkeypatch, capsys):
    """--graph-capture PATH: the captures named apart from the replay are still each read once."""
    replay, captures = inputs["graphs"] / "replay.json", inputs["graphs"] / "capture_traces"
    args = ["summarize", str(replay), "--graph-capture", str(captures), "--by", "op", "--format", "csv",
            "--cache-dir", str(tmp_path / "cache"), "-q", "-j", "1"]
    for state in ("cold", "warm"):
        counted = _run(args, inputs["graphs"], monkeypatch)
        capsys.readouterr()
        _assert_once(counted, [replay] + _traces(captures), state, all_read=state == "cold")


@pytest.mark.parametrize("relative", ["ns_resolution_trace", "critical_path/alexnet"])
def test_real_era_a_and_b_files_are_read_once(relative, tmp_path, monkeypatch, capsys):
    """A real era-B file (ns decimals on epoch µs) and a real era-A one (integer epoch µs): one read each."""
    root = shared_trace(relative)
    args = ["summarize", str(root), "--format", "csv", "--cache-dir", str(tmp_path / "cache"), "-q", "-j", "1"]
    for state in ("cold", "warm"):
        counted = _run(args, root, monkeypatch)
        capsys.readouterr()
        _assert_once(counted, _traces(root), state, all_read=state == "cold")


def test_the_capture_selection_looks_once_per_folder_not_once_per_trace(tmp_path, monkeypatch):
    """The selected ranks are looked for beside each folder's traces once, and the walk's set of paths is
    made once: asked per trace, 20,000 one-kernel files cost 10 s of serial driver time (a set of 20,000
    paths built 20,000 times)."""
    from traceattr.io import summaries
    from traceattr.io.discover import discover

    for folder in ("a", "b"):
        for rank in range(60):
            (tmp_path / folder).mkdir(exist_ok=True)
            (tmp_path / folder / f"rank{rank}.pt.trace.json").write_text('{"traceEvents": []}')
    inputs = discover(tmp_path)
    looks = []
    size_of = summaries._file_size
    monkeypatch.setattr(summaries, "_file_size", lambda *a: looks.append(a[0]) or size_of(*a))
    paths = [str(f) for f in inputs.trace_files()]
    assert len(paths) == 120
    assert summaries.capture_selection(paths, inputs) is None
    assert sorted(looks) == sorted({Path(p).parent / "manifest.json" for p in paths})
    assert inputs.held_paths is inputs.held_paths
