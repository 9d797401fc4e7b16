"""Decode once (issue 35 point 5): with or without the file cache, no command decodes a trace file twice.

Later maps of a command (the busiest and median ranks' keys of `--by rank`, the outlier step's of `--by
step`, the check's exact medians, the clip's third map, the report's timeline) read the file cache when it
is on, else the command's spill of its first map (io/spill.py). Counted by wrapping io.parallel.decode_file,
which every decode goes through: in this process (-j 1) and in the pool's forked workers (-j 2), each call
appending its path to a log file. Before the spill, `--no-cache -j 1` decoded the straggler's and the median
rank's files twice for `--by rank`, and every file twice for `report`.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

import traceattr
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.cli import main
from traceattr.io import parallel, spill

from test_scale_mapreduce_clip import FUSED, plant
from tracesets import SMALL

RANKS = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """8 ranks with one kernel planted far beyond its median (the check's second map and the clip's third
    run), and a copy to compare against."""
    root = tmp_path_factory.mktemp("decode_once")
    for name in ("a", "b"):
        write_trace_set(root / name, TraceSpec(ranks=tuple(range(RANKS)), **SMALL))
    plant(root / "a" / "rank3.pt.trace.json", FUSED, 1_200)
    return {"a": root / "a", "b": root / "b"}


def _decodes(log: Path, monkeypatch: pytest.MonkeyPatch, run) -> collections.Counter:
    """Decodes per file while `run()` runs, in this process and in forked pool workers."""
    original = parallel.decode_file

    def counted(path, *args, **kwargs):
        with open(log, "a") as out:      # one short line per write: appends from several processes interleave whole
            out.write(os.path.abspath(os.fspath(path)) + "\n")
        return original(path, *args, **kwargs)

    log.write_text("")
    with monkeypatch.context() as patch:
        patch.setattr(parallel, "decode_file", counted)
        run()
    return collections.Counter(log.read_text().split())


def _cli(args: list[str]):
    def run():
        try:
            main(args, standalone_mode=False)
        except SystemExit as exc:        # check exits with its verdict: 2 for the planted file's "bad"
            assert exc.code in (0, 1, 2, None), exc
    return run


COMMANDS = {
    **{f"summarize --by {by}": lambda a, b, out, by=by: ["summarize", a, "--by", by, "--format", "csv"]
       for by in ("kernel", "category", "rank", "collective", "op", "op_stack", "module", "annotation", "step")},
    "check": lambda a, b, out: ["check", a, "--format", "csv"],
    "check --clip-outliers": lambda a, b, out: ["check", a, "--clip-outliers", "--format", "csv"],
    "report": lambda a, b, out: ["report", a, "-o", out],
    "compare": lambda a, b, out: ["compare", a, b, "--format", "csv"],
}
POOLED = ("summarize --by rank", "summarize --by step", "check --clip-outliers", "report")   # -j 2: later maps


def _expected(folders, command: str) -> set[str]:
    names = [folders["a"]] + ([folders["b"]] if command == "compare" else [])
    return {str(p.resolve()) for folder in names for p in folder.glob("*.json")}


@pytest.mark.parametrize("command, jobs", [(command, 1) for command in COMMANDS] + [(command, 2) for command in POOLED])
def test_no_cache_decodes_each_file_once(folders, command, jobs, tmp_path, monkeypatch, capsys):
    if command == "report":
        pytest.importorskip("matplotlib")
    args = COMMANDS[command](str(folders["a"]), str(folders["b"]), str(tmp_path / "page.html"))
    counts = _decodes(tmp_path / "log", monkeypatch, _cli(args + ["--no-cache", "-q", "-j", str(jobs)]))
    capsys.readouterr()
    assert set(counts) == _expected(folders, command), "every file is decoded (the counter sees the pool's too)"
    assert max(counts.values()) == 1, {Path(p).name: n for p, n in counts.items() if n > 1}


@pytest.mark.parametrize("command", ["summarize --by rank", "summarize --by step", "check --clip-outliers",
                                     "report"])
def test_a_cold_cache_decodes_each_file_once(folders, command, tmp_path, monkeypatch, capsys):
    if command == "report":
        pytest.importorskip("matplotlib")
    args = COMMANDS[command](str(folders["a"]), str(folders["b"]), str(tmp_path / "page.html"))
    counts = _decodes(tmp_path / "log", monkeypatch,
                      _cli(args + ["--cache-dir", str(tmp_path / "cache"), "-q", "-j", "1"]))
    capsys.readouterr()
    assert set(counts) == _expected(folders, command) and max(counts.values()) == 1


@pytest.mark.parametrize("kind", ["rank", "step"])
def test_the_imbalance_functions_decode_each_file_once(folders, kind, tmp_path, monkeypatch):
    of = traceattr.rank_imbalance if kind == "rank" else traceattr.step_imbalance
    counts = _decodes(tmp_path / "log", monkeypatch, lambda: of(str(folders["a"]), cache=False, jobs=1))
    assert set(counts) == _expected(folders, "") and max(counts.values()) == 1


def test_the_spill_is_removed_when_the_command_ends_and_on_errors(folders, tmp_path, monkeypatch, capsys):
    """The spill lives in a private folder of its own, gone after the command (and after an error in it)."""
    made = []
    original = spill.tempfile.mkdtemp
    monkeypatch.setattr(spill.tempfile, "mkdtemp", lambda **kw: made.append(original(**{**kw, "dir": tmp_path})) or made[-1])
    _cli(["summarize", str(folders["a"]), "--by", "rank", "--no-cache", "-q", "-j", "1"])()
    capsys.readouterr()
    assert len(made) == 1 and not os.path.exists(made[0])
    with pytest.raises(KeyboardInterrupt):
        with spill.spill_folder() as folder:
            Path(folder, "x.arrow").write_bytes(b"")
            raise KeyboardInterrupt
    assert not os.path.exists(folder)
