"""One flipped bit anywhere in a parquet store is refused, never read as changed numbers. Found from outside:
one bit flipped in one partition changed results with exit 0 in 2 of 60 random flips (a kernel renamed,
splitting a row across ranks; a duration changed, rank 0 busy 291,000 -> 290,992 ns). Every file of a store
now carries its sha256 in the metadata, and the metadata the sha256 of its own bytes (io/store.py): each
flip here is exit 2, one line naming the file, "changed since convert (hash mismatch)", no traceback."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traceattr import schema as S
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.store import CHANGED, FILES_NAME, MARKER, StoreError, read_store
from clirun import run_cli
from tracesets import SMALL

CLI = [sys.executable, "-m", "traceattr"]
OFFSETS = 20            # flips per file through the CLI, spread evenly over the file


def cli(*args) -> subprocess.CompletedProcess:
    """The command in this process (clirun: its exit code, stdout and stderr, a traceback included)."""
    return run_cli(*args)


def cli_process(*args) -> subprocess.CompletedProcess:
    """The console script's entry in a process of its own: arrow objects over Python bytes, kept alive by an
    error's traceback, once aborted the process at exit ('terminate called') on the store's error path."""
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("bitflips")
    traces, store = folder / "traces", folder / "store"
    write_trace_set(traces, TraceSpec(ranks=2, **SMALL))
    done = cli("convert", traces, "-o", store, "--no-cache", "-q", "-j", "1")
    assert done.returncode == 0, done.stderr
    return traces, store


def flipped(store: Path, tmp_path: Path, relative: str, offset: int, bit: int) -> tuple[Path, Path]:
    """A copy of `store` with bit `bit` of byte `offset` of its file `relative` flipped: (copy, that file)."""
    copy = tmp_path / "store"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store, copy)
    path = copy / relative
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))
    return copy, path


def spread(size: int, count: int) -> list[int]:
    """`count` offsets spread evenly over a file of `size` bytes, its first and last byte included."""
    return sorted({round(i * (size - 1) / (count - 1)) for i in range(count)})


FILES = {"partition": f"device/{S.RANK}=0/{S.WINDOW}=0/part-0.parquet", "files": FILES_NAME, "metadata": MARKER}


@pytest.mark.parametrize("which", sorted(FILES))
def test_every_flipped_bit_is_one_line_exit_2(converted, tmp_path, which):
    _, store = converted
    relative = FILES[which]
    size = (store / relative).stat().st_size
    for index, offset in enumerate(spread(size, OFFSETS)):
        copy, path = flipped(store, tmp_path, relative, offset, index % 8)
        # the first flip of each file in a real process (what it prints as it exits), the rest in this one
        done = (cli_process if index == 0 else cli)("summarize", copy, "--by", "rank", "--no-cache", "-q")
        lines = done.stderr.strip().splitlines()
        where = f"{which} byte {offset} bit {index % 8}"
        assert done.returncode == 2, (where, done.returncode, done.stdout[-1000:], done.stderr[-1000:])
        assert "Traceback" not in done.stderr and done.stdout == "", (where, done.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("traceattr: error: "), (where, done.stderr[-2000:])
        assert f"{path}: {CHANGED}" in lines[0], (where, lines[0])


def test_a_flipped_bit_in_any_file_of_the_store_is_refused(converted, tmp_path):
    """In process, many more flips: 300 (file, byte, bit) picked over every file of the store."""
    _, store = converted
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    assert len(files) >= 8, files            # metadata, files.parquet, partitions of three tables, two ranks
    chosen = random.Random(0)
    for _ in range(300):
        relative = chosen.choice(files)
        offset = chosen.randrange((store / relative).stat().st_size)
        copy, path = flipped(store, tmp_path, relative, offset, chosen.randrange(8))
        with pytest.raises(StoreError) as caught:
            read_store(copy)
        assert str(caught.value).startswith(f"{path}: {CHANGED}"), str(caught.value)


def test_the_unflipped_store_reads_as_the_traces(converted):
    traces, store = converted
    for by in ("rank", "category"):
        from_traces = cli("summarize", traces, "--by", by, "--format", "csv", "--no-cache")
        from_store = cli("summarize", store, "--by", by, "--format", "csv", "--no-cache")
        assert from_store.returncode == from_traces.returncode == 0, from_store.stderr
        assert from_store.stdout == from_traces.stdout


def test_a_truncated_or_missing_partition_is_one_line(converted, tmp_path):
    _, store = converted
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    part = copy / FILES["partition"]
    part.write_bytes(part.read_bytes()[:-1])
    with pytest.raises(StoreError, match=f"{part}: {CHANGED}".replace("(", r"\(").replace(")", r"\)")):
        read_store(copy)
    part.unlink()
    with pytest.raises(StoreError, match="damaged store"):
        read_store(copy)


def test_a_store_of_the_previous_version_is_refused_as_such(converted, tmp_path):
    """Version 2 stores carry no hashes: refused with the version line (convert again), as before."""
    import json
    _, store = converted
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    metadata = json.loads((copy / MARKER).read_text())
    metadata.pop("metadata_sha256")
    metadata["version"] = 2
    (copy / MARKER).write_text(json.dumps(metadata, indent=1))
    done = cli("summarize", copy, "--no-cache", "-q")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "version 2" in done.stderr and "convert the traces again" in done.stderr, done.stderr
