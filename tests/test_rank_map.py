"""--rank-map FILE on every command: JSON or name=rank lines, range-checked where they enter; the rank error
names the option."""

from __future__ import annotations

import json

import pytest

import traceattr
from traceattr.errors import TraceDiscoveryError, TraceInputError
from traceattr.io.rankmap import read_rank_map
from test_io_bad_input import _trace, _write
from clirun import run_cli

NAMES = ("host-a_100.1.pt.trace.json", "host-b_200.1.pt.trace.json")


def cli(*args):
    return run_cli(*args)           # in this process (tests/clirun.py): a process's exit code and output


@pytest.fixture()
def unranked(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _write(folder / NAMES[0], _trace())
    _write(folder / NAMES[1], _trace(start=1_700_000_000_000_000 + 5))
    return folder


def test_rank_map_file_on_every_command(unranked, tmp_path):
    with pytest.raises(TraceDiscoveryError, match="--rank-map FILE"):     # the rank error names the option
        traceattr.load(unranked, cache=False)
    lines = tmp_path / "ranks.txt"
    lines.write_text(f"# rank of each worker\n{NAMES[0]} = 4\n\n{unranked / NAMES[1]}=2\n")
    as_json = tmp_path / "ranks.json"
    as_json.write_text(json.dumps({NAMES[0]: 4, NAMES[1]: 2}))
    named = {NAMES[0]: 4, str(unranked / NAMES[1]): 2}
    assert read_rank_map(lines) == named and read_rank_map(as_json) == {NAMES[0]: 4, NAMES[1]: 2}
    out = cli("summarize", unranked, "--no-cache", "-q", "--by", "rank", "--format", "csv", "--rank-map", as_json)
    assert out.returncode == 0, out.stderr
    assert [line.split(",")[0] for line in out.stdout.splitlines()[1:]] == ["2", "4"]
    compared = cli("compare", unranked, unranked, "--no-cache", "-q", "--format", "csv", "--rank-map", lines)
    assert compared.returncode == 0, compared.stderr
    converted = cli("convert", unranked, "-o", tmp_path / "store", "--no-cache", "-q", "--rank-map", lines)
    assert converted.returncode == 0 and "ranks [2, 4]" in converted.stderr, converted.stderr


@pytest.mark.parametrize("text,words", [
    ("a.json=-1\n", "rank must be an integer"), ("a.json=x\n", "rank must be an integer"),
    ("a.json 3\n", "expected name=rank"), ('{"a.json": 2.5}', "rank must be an integer"),
    ('{"a.json": true}', "rank must be an integer"), ("{nope", "not valid json"), ("\n# only\n", "empty"),
    (f"a.json={2**31}\n", "rank must be an integer"), (f"a.json={2**24}\n", "from 0 to 16777215"),
    ("a.json=1\nb.json=2\na.json=3\n", "line 3: 'a.json' is given rank 3 here and rank 1 before"),
    ("a.json=1\n./a.json=2\n", "line 2: 'a.json' is given rank 2"),
    ('{"a.json": 1, "a.json": 0}', "key 'a.json': 'a.json' is given rank 0 here and rank 1 before")])
def test_bad_rank_maps_are_one_line_errors(tmp_path, text, words):
    path = tmp_path / "map.txt"
    path.write_text(text)
    with pytest.raises(TraceInputError) as caught:
        read_rank_map(path)
    assert str(path) in str(caught.value) and words in str(caught.value).lower()


def test_a_name_repeated_with_its_own_rank_is_no_contradiction(tmp_path):
    (tmp_path / "map.txt").write_text("a.json=1\n./a.json=1\n")
    (tmp_path / "map.json").write_text('{"a.json": 1, "a.json": 1, "b.json": {"c": 1}}')
    assert read_rank_map(tmp_path / "map.txt") == {"a.json": 1}
    with pytest.raises(TraceInputError, match="key 'b.json': rank must be an integer"):
        read_rank_map(tmp_path / "map.json")


def test_bad_rank_map_on_the_command_line(tmp_path, unranked):
    (tmp_path / "map.txt").write_text("a.json=-1\n")
    out = cli("check", unranked, "--rank-map", tmp_path / "map.txt")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    assert "map.txt" in out.stderr
    with pytest.raises(TraceInputError, match="absent.txt"):
        read_rank_map(tmp_path / "absent.txt")
