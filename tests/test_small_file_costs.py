"""The map step's shortcuts for small files give what the code they replace gave, exactly.

A one-kernel file's map step built pandas frames (and arrow tables) of a row or two only to take them apart
again into numpy columns, and each result travelled to the driver alone (benchmarks/bench_small_files.py).
The numpy columns made directly must equal engine.columns.numpy_columns of those frames (names, order,
dtypes, values), on one file and on a TraceSet of several ranks and windows; io.codes.row_codes must give
the codes folding pair_codes gave; and a process pool that folds runs of files into states where they are
mapped (io.parallel.fold_files) must give the in-process answer.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis import summary_plan as M
from traceattr.analysis.imbalance import step_range_columns
from traceattr.analysis.summarize import device_span_columns, kernel_sum_columns, kernel_sums
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.engine.columns import numpy_columns
from traceattr.engine.units import coded_names
from traceattr.io.codes import pair_codes, row_codes
from traceattr.io.decode import decode_file
from traceattr.io.load import one_file
from traceattr.model.traceset import TraceSet


def assert_same_columns(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for name, values in expected.items():
        assert got[name].dtype == values.dtype, name
        assert got[name].tolist() == values.tolist(), name


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("built")
    write_trace_set(folder, TraceSpec(ranks=3, steps=(1, 2), layers=2, coupled_collectives=True, jitter=0.05))
    return folder


def _small_files(folder, count: int) -> None:
    """One launch and one kernel each, ranks x 2 windows (benchmarks/bench_small_files.py's files)."""
    for i in range(count):
        rank, window = divmod(i, 2)
        base = 1_700_000_000_000_000 + window * 10_000
        events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": base,
                   "dur": 5, "args": {"correlation": 1}},
                  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": base + 10, "dur": 100 + i,
                   "args": {"correlation": 1, "device": 0, "stream": 7}}]
        doc = {"distributedInfo": {"rank": rank, "world_size": count // 2, "backend": "nccl"}, "traceEvents": events}
        (folder / f"rank{rank}_w{window}.pt.trace.json").write_text(json.dumps(doc))


def device_spans(traceset: TraceSet) -> pd.DataFrame:
    """device_span_columns' answer by an arrow group-by per (rank, window, device), then pandas (what the
    map step computed before its numpy shortcut): the reference it must equal."""
    spans = traceset.device.group_by([S.RANK, S.WINDOW, S.DEVICE], use_threads=False).aggregate(
        [(S.START_NS, "min"), (S.END_NS, "max")]).to_pandas()
    spans[S.DEVICE_SPAN_NS] = spans[f"{S.END_NS}_max"] - spans[f"{S.START_NS}_min"]
    return spans.astype({S.RANK: "int64"}).groupby([S.RANK, S.DEVICE])[S.DEVICE_SPAN_NS].sum().reset_index()


def step_ranges(traceset: TraceSet) -> pd.DataFrame:
    """step_range_columns' answer as an arrow filter to pandas: the reference it must equal."""
    host = traceset.host
    mask = pc.and_(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION),
                   pc.starts_with(host.column(S.NAME), "ProfilerStep#"))
    rows = host.filter(mask).select([S.RANK, S.NAME, S.START_NS, S.END_NS]).to_pandas()
    rows[S.DURATION_NS] = rows[S.END_NS] - rows[S.START_NS]
    return rows


def _tracesets(built):
    """A map step's one-file TraceSets (names coded, as the summary levels run), the whole loaded set, none."""
    files = sorted(built.glob("*.json"))
    return [one_file(coded_names(decode_file(str(files[0])))), one_file(decode_file(str(files[1]))),
            traceattr.load(built, cache=False), TraceSet.empty()]


def test_the_map_columns_equal_the_frames_they_replace(built):
    for traceset in _tracesets(built):
        assert_same_columns(dict(sweep(traceset).columns), numpy_columns(sweep(traceset).groups))
        assert_same_columns(device_span_columns(traceset), numpy_columns(device_spans(traceset)))
        assert_same_columns(step_range_columns(traceset), numpy_columns(step_ranges(traceset)))
        if traceset.device.num_rows:        # the map step sums kernels only then
            assert_same_columns(kernel_sum_columns(traceset), numpy_columns(kernel_sums(traceset)))


def test_the_sweep_frame_is_its_columns(built):
    result = sweep(traceattr.load(built, cache=False))
    pd.testing.assert_frame_equal(result.groups, pd.DataFrame(result.columns))
    assert result.groups is result.groups        # built once


def test_row_codes_are_the_codes_pair_codes_gives():
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = int(rng.integers(0, 40))
        columns = [rng.integers(-3, int(rng.integers(1, 6)), rows) * int(rng.choice([1, 7, 10**15]))
                   for _ in range(int(rng.integers(1, 5)))]
        expected = functools.reduce(pair_codes, columns, np.zeros(rows, np.int64))
        got = row_codes(columns)
        assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


@pytest.mark.parametrize("by", ["kernel", "rank", "step"])
def test_a_pool_folding_runs_of_files_gives_the_in_process_answer(tmp_path, by):
    _small_files(tmp_path, 40)
    answers = []
    for jobs in (1, 2):
        reduced, runner = M.reduce_path(tmp_path, by=by, jobs=jobs, cache=False)
        table = M.table_of(reduced, by)
        answers.append((table, M.header_for(reduced, table, by, runner), reduced.notes))
    pd.testing.assert_frame_equal(answers[0][0], answers[1][0], check_exact=True)
    assert answers[0][1:] == answers[1][1:]
