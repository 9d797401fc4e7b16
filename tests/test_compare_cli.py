"""`traceattr compare` through a real subprocess: formats, exit codes of the CI gate, bad input."""

from __future__ import annotations

import io
import json

import html
import re

import pandas as pd
import pytest

from traceattr.analysis import compare as K
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from clirun import run_cli

BASE = dict(ranks=1, steps=5, streams=(7,), jitter=0.02, dropped_records=0)
GROWN, SHRUNK = "GammaBetaBackwardCUDAKernel", "clamp_min_scalar_functor"   # +40% / -50% in "mixed"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    truths = {"a": write_trace_set(root / "a", TraceSpec(seed=1, **BASE)),
              "slow": write_trace_set(root / "slow", TraceSpec(seed=2, kernel_scale={"sgemm": 1.6}, **BASE)),
              "noise": write_trace_set(root / "noise", TraceSpec(seed=3, **BASE)),
              # one kernel slower beyond noise, a larger one faster by more: the total is faster
              "mixed": write_trace_set(root / "mixed", TraceSpec(seed=4, kernel_scale={GROWN: 1.4, SHRUNK: 0.5},
                                                                 **BASE))}
    for window in range(2):      # one process profiled twice: each profiler object numbers ProfilerStep#1..#5
        spec = TraceSpec(seed=5 + window, base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000,
                         **BASE)
        write_trace(root / "twice" / f"w{window}_rank0.pt.trace.json", spec, 0)
    for steps in (3, 5):         # the same steps, profiled for 3 and for 5 active steps
        write_trace_set(root / f"steps{steps}", TraceSpec(seed=1, **{**BASE, "steps": steps, "jitter": 0.0}))
    return root, truths


def run(*args):
    return run_cli("compare", *args)      # in this process (tests/clirun.py): a process's exit code and output


def test_csv_adds_up(runs):
    root, truths = runs
    out = run(root / "a", root / "slow", "--format", "csv")
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    keys = table[table[K.KIND] == "key"]
    assert int(keys[K.DELTA_NS].sum()) == truths["slow"][0].busy_ns - truths["a"][0].busy_ns
    assert set(table[K.KEY]) >= {K.TOTAL, K.IDLE}
    assert (keys[keys[K.KEY].str.contains("sgemm")][K.STATUS] == K.CHANGED).all()


def test_fail_on_regression_exit_codes(runs):
    root, _ = runs
    slow = run(root / "a", root / "slow", "--fail-on-regression", "20", "--format", "csv")
    assert slow.returncode == 1 and "regression beyond noise" in slow.stderr and "sgemm" in slow.stderr
    noise = run(root / "a", root / "noise", "--fail-on-regression", "1", "--format", "csv")
    assert noise.returncode == 0, noise.stderr
    bad = run(root / "a", root / "missing", "--fail-on-regression", "1")
    assert bad.returncode == 2
    assert bad.stderr.startswith("traceattr: error:") and len(bad.stderr.strip().splitlines()) == 1


def test_json_is_valid_and_table_is_readable(runs):
    root, _ = runs
    out = run(root / "a", root / "noise", "--format", "json", "--by", "module", "--no-normalize")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)                 # strict JSON: nan became null
    assert any(row[K.P_VALUE] is None for row in rows if row[K.KIND] == "idle")
    table = run(root / "a", root / "slow", "--top", "3")
    assert table.returncode == 0, table.stderr
    assert "compare by kernel" in table.stdout and "<other>" in table.stdout
    assert "noise test: paired or Welch t over" in table.stdout


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_an_untested_row_shows_no_p_value_not_nan(runs, fmt):
    root, _ = runs
    out = run(root / "a", root / "noise", "--format", fmt)
    assert out.returncode == 0, out.stderr
    (idle,) = [line for line in out.stdout.splitlines() if "idle" in line]
    assert "untested" in idle and "nan" not in idle.lower()


def test_top_folds_the_display_not_the_gate(runs):
    """A key slower beyond noise whose |delta| is below the top N is still gated: --top is a display option."""
    root, _ = runs
    whole = run(root / "a", root / "mixed", "--fail-on-regression", "20", "--format", "csv")
    assert whole.returncode == 1 and GROWN in whole.stderr, whole.stderr
    table = pd.read_csv(io.StringIO(whole.stdout))
    assert table.iloc[0][K.KEY].find(SHRUNK) >= 0       # the larger |delta| is the faster kernel
    assert table[table[K.KIND] == "total"].iloc[0][K.DELTA_NS] < 0
    folded = run(root / "a", root / "mixed", "--top", "1", "--fail-on-regression", "20", "--format", "csv")
    assert folded.returncode == 1, folded.stderr
    assert GROWN in folded.stderr and "regression beyond noise (> 20%)" in folded.stderr
    shown = pd.read_csv(io.StringIO(folded.stdout))
    assert list(shown[K.KIND]) == ["key", "other", "idle", "total"]
    assert not shown[K.KEY].str.contains(GROWN).any()


def test_two_windows_with_the_same_step_names_are_ten_steps(runs):
    """Two profiling windows of one process, both ProfilerStep#1..#5: ten steps of the same length as A's,
    not five steps of double length (every key +100% per step)."""
    root, _ = runs
    out = run(root / "a", root / "twice", "--fail-on-regression", "5")
    assert out.returncode == 0, out.stderr
    assert "steps: A 5, B 10" in out.stdout
    csv = run(root / "a", root / "twice", "--format", "csv")
    total = pd.read_csv(io.StringIO(csv.stdout)).set_index(K.KEY).loc[K.TOTAL]
    assert total[K.B_NS] > 1.9 * total[K.A_NS]                      # B holds twice the work
    assert abs(total[K.B_STEP_NS] - total[K.A_STEP_NS]) < 0.1 * total[K.A_STEP_NS]   # per step: the same
    assert total[K.STATUS] == K.NOISE        # twice the total, the same per step: within noise


def test_by_step_gate_follows_the_total(runs):
    """--by step: steps on one side only (3 vs 5) and untested step rows are not regressions; <total> is
    the tested row, and a slower run still fails."""
    root, _ = runs
    extra = run(root / "steps3", root / "steps5", "--by", "step", "--fail-on-regression", "1", "--format", "csv")
    assert extra.returncode == 0, extra.stderr
    table = pd.read_csv(io.StringIO(extra.stdout)).set_index(K.KEY)
    assert table.loc["step 4", K.STATUS] == K.ADDED
    # a step row's per-step value is its own time (all of it inside the step), not a mean over the steps
    steps = table[table.index.str.startswith("step ")]
    assert (steps[K.A_STEP_NS] == steps[K.A_NS]).all() and (steps[K.B_STEP_NS] == steps[K.B_NS]).all()
    noise = run(root / "a", root / "noise", "--by", "step", "--fail-on-regression", "1", "--format", "csv")
    rows = pd.read_csv(io.StringIO(noise.stdout)).set_index(K.KEY)
    assert ((rows[K.STATUS] == K.UNTESTED) & (rows[K.DELTA_PCT] > 1)).any()      # a step 1% slower, untested
    assert rows.loc[K.TOTAL, K.STATUS] == K.NOISE
    assert noise.returncode == 0, noise.stderr
    slow = run(root / "a", root / "slow", "--by", "step", "--fail-on-regression", "5", "--format", "csv")
    assert slow.returncode == 1 and "<total>" in slow.stderr, slow.stderr


def test_html_table_keeps_other_idle_total_last(runs, tmp_path):
    root, _ = runs
    page = tmp_path / "diff.html"
    out = run(root / "a", root / "mixed", "--top", "3", "--format", "html", "-o", page)
    assert out.returncode == 0, out.stderr
    keys = [html.unescape(k) for k in re.findall(r'<tr data-key="([^"]*)"', page.read_text())]
    assert keys[-3:] == [K.OTHER, K.IDLE, K.TOTAL] and len(keys) == 6, keys
