"""`traceattr compare` through a real subprocess: formats, exit codes of the CI gate, bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pandas as pd
import pytest

from traceattr.analysis import compare as K
from traceattr.builder import TraceSpec, write_trace_set

BASE = dict(ranks=1, steps=5, streams=(7,), jitter=0.02, dropped_records=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    truths = {"a": write_trace_set(root / "a", TraceSpec(seed=1, **BASE)),
              "slow": write_trace_set(root / "slow", TraceSpec(seed=2, kernel_scale={"sgemm": 1.6}, **BASE)),
              "noise": write_trace_set(root / "noise", TraceSpec(seed=3, **BASE))}
    return root, truths


def run(*args):
    return subprocess.run([sys.executable, "-m", "traceattr.cli", "compare", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


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
