"""`traceattr report` by per-file map-reduce (analysis/page_plan.py): the page's header and tables of
trace files mapped as they are decoded equal those of the same files loaded whole as a TraceSet (one more
source of the same plan) bit for bit, and the HTML is the same page, on builder runs of one and several
windows (a planted straggler), a CPU-only sample and real shared traces; the timeline adds up to busy per
rank; the command never builds a TraceSet with device rows (a real subprocess)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import traceattr
from clirun import run_cli_counting
from conftest import SAMPLE_TRACES, shared_trace
from traceattr import schema as S
from traceattr.analysis.page_plan import page_data_files
from traceattr.analysis.timeline import BIN
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from traceattr.report.html import trace_page
from tracesets import SMALL

ORDER = [S.RANK, S.CATEGORY, BIN]


def _same_page(folder, exact_timeline: bool = True) -> None:
    loaded, _ = page_data_files(traceattr.load(folder))
    reduced, _ = page_data_files(folder, cache=False)
    assert reduced.header == loaded.header
    pd.testing.assert_frame_equal(reduced.rank_table, loaded.rank_table, check_exact=True)
    assert (reduced.ranks, reduced.device_rows) == (loaded.ranks, loaded.device_rows)
    for level, table in loaded.levels.items():
        pd.testing.assert_frame_equal(reduced.levels[level], table, check_exact=True, obj=level)
        assert reduced.levels[level].attrs == table.attrs, level
    np.testing.assert_array_equal(reduced.edges, loaded.edges)
    mine = reduced.timeline.sort_values(ORDER).reset_index(drop=True)
    theirs = loaded.timeline.sort_values(ORDER).reset_index(drop=True)
    pd.testing.assert_frame_equal(mine[ORDER], theirs[ORDER], check_dtype=False)
    if exact_timeline:
        np.testing.assert_array_equal(mine[S.SELF_NS].to_numpy(), theirs[S.SELF_NS].to_numpy())
        assert _page(reduced) == _page(loaded)
    else:   # a rank's windows summed: the same picture, but for float cancellation in the one-pass integral
        #     (cumulative sums of rate x time over windows a quarter-year apart, ~1e16 ns: tens of ns per bin)
        np.testing.assert_allclose(mine[S.SELF_NS].to_numpy(), theirs[S.SELF_NS].to_numpy(), rtol=1e-4, atol=64)
    if loaded.device_rows:      # the picture still adds up: Σ bins == busy per rank (to float rounding)
        busy = loaded.rank_table.groupby(S.RANK)[S.BUSY_NS].sum()
        binned = mine.groupby(S.RANK)[S.SELF_NS].sum()
        np.testing.assert_allclose(binned.to_numpy(), busy.reindex(binned.index).to_numpy(), rtol=1e-7)


def _page(data) -> str:
    text = trace_page(data, "traces", "run")[0]
    return re.sub(r"<footer.*", "", text, flags=re.S)      # the footer says when the page was made


def test_one_window_straggler_run_is_the_same_page(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=(0, 1, 2, 3), **SMALL, rank_scale={2: 1.3}, jitter=0.05, seed=4))
    _same_page(tmp_path)


def test_two_windows_per_rank(tmp_path):
    for window in range(2):
        spec = TraceSpec(ranks=(0, 1, 2), **{**SMALL, "steps": (3 * window + 1, 3 * window + 2)}, seed=window,
                         base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        for rank in spec.ranks:
            write_trace(tmp_path / f"w{window}_rank{rank}.pt.trace.json", spec, rank)
    _same_page(tmp_path, exact_timeline=False)


def test_cpu_only_sample():
    _same_page(SAMPLE_TRACES / "cpu_torch213")


@pytest.mark.parametrize("name", ["torch213_cpu/dist2", "nccl_parser_config"])
def test_real_traces(name):
    _same_page(shared_trace(name))


def test_cli_report_never_builds_a_traceset_with_device_rows(tmp_path):
    write_trace_set(tmp_path / "run", TraceSpec(ranks=(0, 1, 2), **SMALL, seed=5))
    output = tmp_path / "report.html"
    done, biggest = run_cli_counting("report", tmp_path / "run", "-o", output, "--jobs", "2", "--no-cache", "--quiet")
    assert done.returncode == 0, done.stderr
    assert biggest == 0
    assert "Top kernels by self time" in output.read_text()
