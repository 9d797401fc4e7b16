"""Finding traces and their ranks in real folder layouts: ranks from folder names, rank-map keys relative to
PATH, one base name in several folders, links, hidden entries and ranks beyond the world size."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceattr
from traceattr import schema as S
from traceattr.errors import TraceDiscoveryError
from traceattr.io.discover import find_trace_files
from traceattr.io.rankmap import read_rank_map
from test_io_bad_input import _trace, _write
from clirun import run_cli

START = 1_700_000_000_000_000      # µs; a file's two kernels span 11 µs


def cli(*args, cwd=None):
    return run_cli(*args, cwd=cwd)      # in this process (tests/clirun.py): a process's exit code and output


def _ranks_of_csv(stdout: str) -> list[str]:
    header, *rows = stdout.splitlines()
    assert header.startswith("rank,"), header          # one run: no `run` column
    return [row.split(",")[0] for row in rows]


def _folders(tmp_path, names, overlap: bool):
    """job/<name>/trace.json for each name, without distributedInfo: at once (ranks of one job) or apart."""
    job = tmp_path / "job"
    for i, name in enumerate(names):
        (job / name).mkdir(parents=True)
        _write(job / name / "trace.json", _trace(start=START if overlap else START + 100 * i))
    return job


def test_rank_from_folder_names(tmp_path):
    """rank0/trace.json + rank1/trace.json: ranks 0 and 1 of one run (was: two runs, both rank 0)."""
    job = _folders(tmp_path, ["rank0", "rank1"], overlap=True)
    out = cli("summarize", job, "--by", "rank", "--no-cache", "-q", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert _ranks_of_csv(out.stdout) == ["0", "1"] and "separate runs" not in out.stderr
    loaded = traceattr.load(job, cache=False)
    assert loaded.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_FROM_FOLDER] * 2
    assert traceattr.load(job / "rank1", cache=False).ranks == [1]      # PATH's own name counts


def test_one_base_name_in_two_folders_is_two_processes(tmp_path):
    """node_a/trace.json + node_b/trace.json carry no rank: not one process's two windows of rank 0."""
    job = _folders(tmp_path, ["node_a", "node_b"], overlap=False)
    with pytest.raises(TraceDiscoveryError, match="2 trace files from 2 processes"):
        traceattr.load(job, cache=False)
    out = cli("summarize", job, "--no-cache", "-q")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "rank3/trace.json" in out.stderr, out.stderr


def test_rank_map_keys_relative_to_path_absolute_and_as_typed(tmp_path):
    job = _folders(tmp_path, ["node_a", "node_b"], overlap=False)
    relative = tmp_path / "relative.txt"
    relative.write_text("./node_a/trace.json=0\nnode_b/trace.json=1\nnode_c/trace.json=2\n")
    assert read_rank_map(relative) == {"node_a/trace.json": 0, "node_b/trace.json": 1, "node_c/trace.json": 2}
    typed = tmp_path / "typed.txt"
    typed.write_text("job/node_a/trace.json=0\njob/node_b/trace.json=1\n")
    for path, rank_map in (("job", relative), (job, relative), ("job", typed), (job, typed)):
        out = cli("summarize", path, "--by", "rank", "--no-cache", "--format", "csv", "--rank-map", rank_map,
                  cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert _ranks_of_csv(out.stdout) == ["0", "1"], (path, rank_map)
        unused = "1 rank-map entry names no trace file" in out.stderr and "node_c/trace.json" in out.stderr
        assert unused == (rank_map == relative), out.stderr
    loaded = traceattr.load(job, cache=False, rank_map={str(job / "node_a" / "trace.json"): 0, "node_b/trace.json": 1})
    assert loaded.ranks == [0, 1] and loaded.files.column(S.RANK_SOURCE).to_pylist() == [S.RANK_FROM_MAP] * 2


def test_links_are_noted_and_file_links_read(tmp_path):
    job, scratch, elsewhere = tmp_path / "job", tmp_path / "scratch", tmp_path / "elsewhere"
    for folder in (job / "node0", scratch / "node1", elsewhere):
        folder.mkdir(parents=True)
    _write(job / "node0" / "rank0.json", _trace(start=START))
    _write(scratch / "node1" / "rank1.json", _trace(start=START))
    _write(elsewhere / "r3.json", _trace(start=START))
    (job / "node1").symlink_to("../scratch/node1")                  # a node folder kept on scratch
    (job / "latest").symlink_to("node0")                            # a link to a folder under PATH
    (job / "node0" / "rank2.json").symlink_to("/nonexistent/rank2.json")
    (job / "node0" / "rank3.json").symlink_to("../../elsewhere/r3.json")
    loaded = traceattr.load(job, cache=False)
    assert loaded.ranks == [0, 3]           # the file link is read, even out of PATH; folder links are not
    notes = "\n".join(loaded.notes)
    assert f"skipped {job / 'node1'}: a link to the folder ../scratch/node1, not followed" in notes
    assert f"skipped {job / 'latest'}: a link to node0, a folder under PATH, searched where it is" in notes
    assert f"skipped {job / 'node0' / 'rank2.json'}: a broken link (to /nonexistent/rank2.json)" in notes


def test_hidden_entries_holding_traces_get_one_note(tmp_path):
    _write(tmp_path / "rank0.json", _trace(start=START))
    for folder in (".node1", ".git", ".hydra"):
        (tmp_path / folder).mkdir()
    _write(tmp_path / ".node1" / "rank1.json", _trace(start=START))
    (tmp_path / ".git" / "HEAD.json").write_text("{}")                 # a tool's folder: not even listed
    (tmp_path / ".hydra" / "config.yaml").write_text("lr: 0.1\n")      # holds no trace: no note
    _write(tmp_path / ".rank6.json", _trace(start=START))
    loaded = traceattr.load(tmp_path, cache=False)
    assert loaded.ranks == [0]
    hidden = [note for note in loaded.notes if "hidden" in note]
    assert len(hidden) == 1 and f"{tmp_path / '.node1'}/" in hidden[0] and ".rank6.json" in hidden[0], hidden
    assert ".git" not in hidden[0] and ".hydra" not in hidden[0]


def test_rank_beyond_world_size_is_noted(tmp_path):
    _write(tmp_path / "a.json", _trace(start=START, distributedInfo={"rank": 0, "world_size": 4}))
    _write(tmp_path / "b.json", _trace(start=START, distributedInfo={"rank": 5, "world_size": 4}))
    loaded = traceattr.load(tmp_path, cache=False)
    assert loaded.ranks == [0, 5]
    assert f"{tmp_path / 'b.json'}: rank 5 is outside distributedInfo.world_size 4 (ranks 0 to 3)" in loaded.notes
    assert not any("a.json" in note for note in loaded.notes)


def test_a_fifo_or_a_link_to_a_device_named_like_a_trace_is_noted_not_read(tmp_path):
    """A FIFO named like a trace was skipped without a word, and a link to /dev/zero was called a broken
    link; neither is read (a FIFO would block, a device never ends)."""
    import os
    import shutil

    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic_2rank"
    for source in sample.glob("rank*.json.gz"):
        shutil.copy(source, tmp_path / source.name)
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere.json")
    notes: list[str] = []
    found = find_trace_files(tmp_path, notes)
    assert sorted(p.name for p in found) == sorted(p.name for p in sample.glob("rank*.json.gz"))
    assert any("pipe.json: not a regular file" in n for n in notes), notes
    assert any("zero.json: not a regular file" in n for n in notes), notes
    assert any("gone.json: a broken link" in n for n in notes), notes
