"""Discover once (issue 35): a command walks its input folder once, opens each trace file at most once and
stats it at most twice (found; unchanged after its read), on a cold and on a warm cache.

Counted in process (-j 1, so every map runs here) by wrapping the os and io functions that list, open and
stat a path: os.scandir / os.listdir (os.walk lists through os.scandir), os.stat / os.lstat (pathlib's
is_file, exists and os.path.realpath go through them), builtins.open / io.open / os.open. Before this, one
cold `summarize DIR` of 8 ranks listed the folder 6 times and stat'd each trace 10 times.
"""

from __future__ import annotations

import builtins
import collections
import io
import os
import shutil
from pathlib import Path

import pytest

from traceattr.builder.multirank import MultiRankSpec, build_multirank
from traceattr.cli import main

from conftest import SAMPLE_TRACES

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


def _run(args: list[str], root: Path, monkeypatch: pytest.MonkeyPatch) -> Counted:
    counted = Counted(root)
    with monkeypatch.context() as patch:
        counted.install(patch)
        try:
            main(args, standalone_mode=False)
        except SystemExit as exc:        # check exits with its verdict
            assert exc.code in (0, 1, None), exc
    return counted


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
    return {"file": root / "run" / "rank1.pt.trace.json", "folder": root / "run", "capture": root / "capture",
            "store": root / "store", "other": root / "other"}


COMMANDS = {
    "summarize": lambda p, o, out: ["summarize", p, "--format", "csv"],
    "summarize --by rank": lambda p, o, out: ["summarize", p, "--by", "rank", "--format", "csv"],
    "check": lambda p, o, out: ["check", p, "--format", "csv"],
    "report": lambda p, o, out: ["report", p, "-o", out],
    "compare": lambda p, o, out: ["compare", p, o, "--format", "csv"],
}


@pytest.mark.parametrize("source", ["file", "folder", "capture", "store"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_trace_is_listed_once_opened_once_and_stat_twice(inputs, source, command, tmp_path, monkeypatch,
                                                              capsys):
    if command == "report":
        pytest.importorskip("matplotlib")
    path = inputs[source]
    root = path.parent if source == "file" else path
    other = inputs["other"]
    args = COMMANDS[command](str(path), str(other), str(tmp_path / "page.html"))
    args += ["--cache-dir", str(tmp_path / "cache"), "-q", "-j", "1"]
    traces = [path] if source == "file" else _traces(root)
    for state in ("cold", "warm"):
        counted = _run(args, root, monkeypatch)
        capsys.readouterr()
        folders = {p for p in counted.listings}
        walks = max(counted.listings.values(), default=0)
        assert walks <= 1, f"{state}: listed {dict(counted.listings)}"
        if source == "store":      # the store's partitions are read by pyarrow; its folder is listed once
            assert str(root) in folders or not folders
            continue
        for trace in map(str, traces):
            assert counted.opens[trace] <= 1, f"{state} {trace}: opened {counted.opens[trace]} times"
            assert counted.stats[trace] <= 2, f"{state} {trace}: stat'd {counted.stats[trace]} times"
        if state == "cold" and not (source == "capture" and command == "summarize"):   # summaries answer that
            assert all(counted.opens[str(t)] == 1 for t in traces)    # the counter sees the real reads
