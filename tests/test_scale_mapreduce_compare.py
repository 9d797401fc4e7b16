"""compare() of two trace paths by per-file map-reduce (analysis/compare_plan.py) equals compare() of
the two loaded TraceSets bit for bit, at every level, normalized or not: builder runs of several ranks and
windows whose steps are numbered differently per file, a planted regression, the real trace_diff pair; the
CLI's compare never builds a TraceSet with device rows (a real subprocess)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import traceattr
from clirun import run_cli_counting
from conftest import shared_trace
from traceattr.analysis import compare as K
from tracesets import header_of
from traceattr.analysis.keys import LEVELS
from traceattr.analysis.compare_plan import compare_paths
from traceattr.analysis.normalize import normalize_kernel_name
from traceattr.builder import TraceSpec, write_trace
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from tracesets import SMALL

SLOWER = "ampere_sgemm_128x64_tn"


def _run(folder, *, ranks: int, windows: int, seed: int, **changes) -> None:
    """`ranks` ranks in `windows` profiling windows; window w holds ProfilerStep#(3w+1)..#(3w+3), so each
    file numbers only its own steps and the run's step order is known only over all files."""
    for window in range(windows):
        spec = TraceSpec(ranks=tuple(range(ranks)), **{**SMALL, "steps": tuple(range(3 * window + 1, 3 * window + 4))},
                         jitter=0.05, seed=seed + window, **changes,
                         base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        for rank in spec.ranks:
            write_trace(folder / f"w{window}_rank{rank}.pt.trace.json", spec, rank)


def _same(table, expected) -> None:
    pd.testing.assert_frame_equal(table, expected, check_exact=True)
    assert table.attrs == expected.attrs
    keys = table[table[K.KIND].isin(["key", "other"])]
    total = table[table[K.KIND] == "total"].iloc[0]
    assert int(keys[K.DELTA_NS].sum()) == total[K.DELTA_NS] == table.attrs["busy_b_ns"] - table.attrs["busy_a_ns"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare_runs")
    _run(root / "a", ranks=3, windows=2, seed=1)
    _run(root / "b", ranks=3, windows=2, seed=11, kernel_scale={SLOWER: 1.5})
    _run(root / "one", ranks=1, windows=1, seed=21)
    return root


@pytest.fixture(scope="module")
def loaded(runs):
    return traceattr.load(runs / "a"), traceattr.load(runs / "b")


@pytest.mark.parametrize("by", LEVELS)
def test_every_level_equals_the_traceset_comparison(runs, loaded, by):
    _same(compare_paths(runs / "a", runs / "b", by=by), traceattr.compare(*loaded, by=by))


def test_raw_names_top_and_a_pool(runs, loaded):
    for by in ("kernel", "step"):
        _same(compare_paths(runs / "a", runs / "b", by=by, normalize=False), traceattr.compare(*loaded, by=by, normalize=False))
    _same(traceattr.compare(str(runs / "a"), str(runs / "b"), by="op", top=3, jobs=2),
          traceattr.compare(*loaded, by="op", top=3))


def test_steps_numbered_per_file_and_notes(runs, loaded):
    """by step: keys are positions in the run's step order (6 steps over two windows), never a file's own;
    different rank counts are noted as the TraceSet path notes them."""
    table = compare_paths(runs / "a", runs / "one", by="step")
    assert table.attrs["steps_a"] == 6 and table.attrs["steps_b"] == 3
    assert {f"step {i}" for i in range(1, 7)} <= set(table[K.KEY])
    assert any("A holds 3 rank(s), B 1" in note for note in table.attrs["notes"])
    _same(table, traceattr.compare(loaded[0], traceattr.load(runs / "one"), by="step"))


def test_planted_regression_found_and_check_lines(runs, loaded):
    table = compare_paths(runs / "a", runs / "b", check_lines=True)
    row = table[table[K.KEY] == normalize_kernel_name(SLOWER)].iloc[0]
    assert row[K.STATUS] == K.CHANGED and 45 < row[K.DELTA_PCT] < 55
    a, b = loaded
    # each side's check line is the one its summary header shows
    assert table.attrs["check"] == f"A {header_of(a)['check']}; B {header_of(b)['check']}"


def test_real_trace_diff_pair_equals():
    control, test = shared_trace("trace_diff/control"), shared_trace("trace_diff/test")
    a, b = traceattr.load(control), traceattr.load(test)
    for by in ("kernel", "step"):
        _same(compare_paths(control, test, by=by), traceattr.compare(a, b, by=by))


def test_cli_compare_never_builds_a_traceset_with_device_rows(runs):
    """The command's driver: a TraceSet with device rows is never made (only one-file TraceSets, in the map:
    --jobs 2 puts those in pool workers); the CSV adds up."""
    done, biggest = run_cli_counting("compare", runs / "a", runs / "b", "--jobs", "2", "--no-cache", "--format",
                                     "json", "--quiet")
    assert done.returncode == 0, done.stderr
    assert biggest == 0
    rows = json.loads(done.stdout)
    keys = [r for r in rows if r[K.KIND] in ("key", "other")]
    total = next(r for r in rows if r[K.KIND] == "total")
    assert sum(r[K.DELTA_NS] for r in keys) == total[K.DELTA_NS]
