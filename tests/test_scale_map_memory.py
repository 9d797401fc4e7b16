"""The map step of one file does not copy whole columns (docs/scale.md, "Memory of one file").

A cold `summarize` of one file peaks during its map step, so a copy of a whole column there is a copy of
the largest thing the process holds: the kernel names (hundreds of bytes each in real traces, 14 MB on the
202 MB benchmark file). Measured in a subprocess, on arrow's and numpy's own allocation counters (exact,
unlike RSS): arrow's pool high-water mark across the map step's per-file extracts, and the numpy peak of
the decoder's end-of-file table build.
"""

from __future__ import annotations

import json
import subprocess
import sys

from traceattr.builder import TraceSpec, write_trace

NAME_PAD = 400          # bytes added to every kernel name: names dominate, as in real traces
CHUNKS = 8

MAP_STEP = f"""
import json, os, sys
import pyarrow as pa
from traceattr import schema as S
from traceattr.analysis.collectives import comm_columns
from traceattr.analysis.check_plan import check_extract
from traceattr.io.decode import decode_file
from traceattr.io.load import one_file

decoded = decode_file(sys.argv[1])
device = decoded.device
encoded = device.column(S.NAME).combine_chunks().dictionary_encode()
long_names = pa.array([name + "_" + "x" * {NAME_PAD} for name in encoded.dictionary.to_pylist()])
device = device.set_column(device.schema.get_field_index(S.NAME), S.NAME, long_names.take(encoded.indices))
rows = -(-device.num_rows // {CHUNKS})
decoded.device = pa.Table.from_batches(device.to_batches(max_chunksize=rows))     # chunks, as decoded
del device, encoded
traceset = one_file(decoded)
names = traceset.device.column(S.NAME)
pool = pa.proxy_memory_pool(pa.default_memory_pool())    # its own statistics: only what the extracts allocate
pa.set_memory_pool(pool)
comm = comm_columns(traceset)
check_extract(traceset)
print(json.dumps({{"growth": pool.max_memory(), "name_bytes": names.nbytes,
                   "chunks": names.num_chunks, "comm_rows": len(comm[S.SELF_NS])}}), flush=True)
os._exit(0)      # no teardown: arrays allocated from `pool` must not outlive it
"""

DECODE_TABLES = """
import json, sys, tracemalloc
import numpy as np
from traceattr.io import columns as C
from traceattr.io.columns import ColumnCollector, HOST
from traceattr.io.decode import make_decoder
from traceattr.io.splitter import stream_events

path = sys.argv[1]
tracemalloc.start()          # before the parts are made: their frees count too
collector = ColumnCollector(path)
stream_events(path, collector.add, decoder=make_decoder(exact_decimal=False), block_bytes=1 << 16)
parts_bytes = sum(column.nbytes for parts in collector.parts.values() for part in parts for column in part.values()
                  if column.strides != (0,))        # a broadcast of one value holds one
host_parts = len(collector.parts[HOST])
held = tracemalloc.get_traced_memory()[0]
tracemalloc.reset_peak()
collector.tables(0)
growth = tracemalloc.get_traced_memory()[1] - held
print(json.dumps({"parts_bytes": parts_bytes, "growth": growth, "host_parts": host_parts}))
"""


def _trace(tmp_path) -> str:
    path = tmp_path / "rank0.pt.trace.json"
    write_trace(path, TraceSpec(ranks=2, steps=30, layers=6, kernels_per_op=3), 0)
    return str(path)


def _run(script: str, path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_map_step_extracts_do_not_copy_the_name_column(tmp_path):
    found = _run(MAP_STEP, _trace(tmp_path))
    assert found["chunks"] >= CHUNKS and found["comm_rows"] > 0     # the case that copied: chunks, collectives
    # the extracts need the names' codes (4-8 bytes a row) and a few rows (39 KB here); a combined copy of
    # the column (check_extract before), or a take that concatenates every chunk of every column first
    # (comm_columns before), is the whole name column again (1.3 MB here)
    assert found["growth"] < found["name_bytes"] / 4, found


def test_decoder_end_of_file_does_not_copy_every_host_column(tmp_path):
    found = _run(DECODE_TABLES, _trace(tmp_path))
    assert found["host_parts"] > 1
    # the tables are built a column at a time, each part's copy let go as its column is joined, and the
    # launching-op search merges only the 7 host columns it reads: 0.74x the parts here; merging all 15 host
    # columns (1.2x), or joining every column before letting the parts go, held the parts and a copy at once
    assert found["growth"] < 0.9 * found["parts_bytes"], found


def test_summary_levels_map_the_kernel_names_as_a_dictionary_column(tmp_path):
    """The summary levels' map step holds the kernel names coded (engine.units.coded_names): the same values,
    distinct names in first-seen order, a fraction of the bytes, kept so by one_file, while the file cache
    keeps the plain column."""
    import pyarrow as pa
    from traceattr import schema as S
    from traceattr.analysis.summary_plan import Plan
    from traceattr.engine.units import file_task
    from traceattr.engine.units import coded_names
    from traceattr.io.cache import FileCache
    from traceattr.io.codes import dictionary_codes
    from traceattr.io.decode import decode_file
    from traceattr.io.load import one_file

    path = _trace(tmp_path)
    decoded = decode_file(path)
    plain = decoded.device.column(S.NAME)
    coded = coded_names(decoded)
    names = coded.device.column(S.NAME)
    assert pa.types.is_dictionary(names.type) and names.to_pylist() == plain.to_pylist()
    assert names.chunk(0).dictionary.equals(dictionary_codes(plain)[0])         # first-seen order
    assert coded_names(coded) is coded
    kept = one_file(coded).device.column(S.NAME)
    assert pa.types.is_dictionary(kept.type) and kept.nbytes < plain.nbytes / 4
    assert one_file(decoded).device.column(S.NAME).type == pa.string()          # the TraceSet path: text
    cache = tmp_path / "cache"
    file_task(path, None, task=Plan(by="kernel").task(), cache_folder=str(cache))
    assert FileCache(str(cache)).get(path).device.column(S.NAME).type == pa.string()
