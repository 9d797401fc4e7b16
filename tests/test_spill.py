"""The spill (io/spill.py): each process appends the files it decodes to one file of its own and indexes them;
any process of the command reads any of them back exactly as decoded, and nothing half written is ever read.
(test_decode_once.py checks that the commands read it instead of decoding again.)"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os

import pytest

from traceattr.io import spill as SP
from traceattr.io.decode import decode_file


def _trace(path, rank: int, kernels: int) -> str:
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1000 + 50 * i,
               "dur": 5, "args": {"correlation": i}} for i in range(kernels)]
    events += [{"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7, "ts": 1010 + 50 * i, "dur": 20 + i,
                "args": {"correlation": i, "device": 0, "stream": 7}} for i in range(kernels)]
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 4}, "traceEvents": events}))
    return str(path)


@pytest.fixture()
def traces(tmp_path):
    return [_trace(tmp_path / f"rank{r}.pt.trace.json", r, 1 + 40 * r) for r in range(4)]


def assert_same(got, expected) -> None:
    assert got is not None
    for field in dataclasses.fields(expected):
        mine, theirs = getattr(got, field.name), getattr(expected, field.name)
        assert (mine.equals(theirs) if field.name in ("device", "host", "markers") else mine == theirs), field.name


def _spill_some(folder: str, paths: list[str]) -> None:
    for path in paths:
        SP.spill(folder, path, path, decode_file(path))


def test_files_spilled_by_several_processes_read_back_as_decoded(traces):
    with SP.spill_folder() as folder:
        context = multiprocessing.get_context("fork")
        workers = [context.Process(target=_spill_some, args=(folder, traces[i::2])) for i in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        # one data file and one index per process, not a file per trace
        assert sorted(os.listdir(folder)) == sorted(f"{w.pid}{ext}" for w in workers for ext in (".arrow", ".index"))
        for path in traces:
            assert_same(SP.spilled(folder, path, path), decode_file(path))
        assert SP.spilled(folder, traces[0], "shown otherwise") is None     # keyed by the shown path too
    assert not os.path.exists(folder)


def test_an_entry_is_read_only_once_its_index_line_is_whole(traces):
    with SP.spill_folder() as folder:
        _spill_some(folder, traces[:1])
        index = os.path.join(folder, f"{os.getpid()}.index")
        line = open(index, "rb").read()
        open(index, "wb").write(line[:-1])                       # the line not yet ended
        SP._FOUND.pop(folder, None)
        assert SP.spilled(folder, traces[0], traces[0]) is None
        open(index, "ab").write(b"\n")
        assert_same(SP.spilled(folder, traces[0], traces[0]), decode_file(traces[0]))


def test_an_entry_beyond_its_data_is_decoded_again(traces):
    with SP.spill_folder() as folder:
        _spill_some(folder, traces[:2])
        data = os.path.join(folder, f"{os.getpid()}.arrow")
        os.truncate(data, os.path.getsize(data) - 10)             # the second entry cut short
        SP._FOUND.pop(folder, None)
        assert_same(SP.spilled(folder, traces[0], traces[0]), decode_file(traces[0]))
        assert SP.spilled(folder, traces[1], traces[1]) is None


def test_a_killed_commands_spill_is_removed_by_the_next_command(tmp_path):
    """kill -9 (or the OOM killer) skips the command's cleanup and left its spill folder in /tmp for good,
    as large as the decoded traces. The next command removes this user's spill folders whose command is gone
    and that were untouched for an hour; a live command's folder, a fresh one and other names stay."""
    done = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    done.start()
    done.join()
    dead = done.pid
    old = 1_000_000_000
    made = {name: tmp_path / name for name in (
        f"{SP.PREFIX}{dead}-old", f"{SP.PREFIX}{dead}-fresh", f"{SP.PREFIX}{os.getpid()}-live",
        f"{SP.PREFIX}legacyname", "someone-elses-folder")}
    for name, folder in made.items():
        folder.mkdir()
        (folder / "1.arrow").write_bytes(b"x" * 100)
        if not name.endswith("fresh"):
            os.utime(folder / "1.arrow", (old, old))
            os.utime(folder, (old, old))
    with SP.spill_folder(parent=str(tmp_path)) as mine:
        assert os.path.basename(mine).startswith(f"{SP.PREFIX}{os.getpid()}-")
        left = {p.name for p in tmp_path.iterdir()} - {os.path.basename(mine)}
    assert left == {f"{SP.PREFIX}{dead}-fresh", f"{SP.PREFIX}{os.getpid()}-live", "someone-elses-folder"}
    assert not os.path.exists(mine)
