"""compare()'s noise test on planted truth: steps matched by position get a paired t-test (an effect of a
step's position cancels), different step counts fall back to Welch and say so, and noise_ns agrees with
status. The builder's 4-stream runs carry a real per-position effect: the first step is ~11% busier in
every run (checked below), which an unpaired test counted as noise."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis import compare as K
from traceattr.analysis import noise as N
from traceattr.analysis.compare import compare_units, regressions
from traceattr.api import compare
from traceattr.analysis.keys import KEY, RAW, STEP, UNIT_COLUMNS, activity_keys
from traceattr.analysis.normalize import normalize_kernel_name
from traceattr.builder import TraceSpec, write_trace_set
from clirun import run_cli

BOTH_TESTS = "paired or Welch t over 3 steps (the smaller p, doubled)"

SLOWER = "ampere_sgemm_128x64_tn"             # planted 2x slower in B
# torch's usual active=3, 1% jitter, 4 streams: the tester's setting (repro compare_3steps.py)
THREE_STEPS = dict(steps=3, streams=(7, 20, 24, 28), jitter=0.01, dropped_records=0)
REGRESSION_SEEDS = (1, 3, 5)                  # A seed s, B seed s + 1
NOISE_PAIRS = tuple((s, s + 1) for s in range(1, 21, 2))    # 10 fixed noise-only pairs


def build(folder, seed: int, ranks: int, **changes):
    write_trace_set(folder, TraceSpec(seed=seed, ranks=ranks, **THREE_STEPS, **changes))
    return traceattr.load(folder, cache=False)


def per_step_busy(traceset) -> np.ndarray:
    """Busy ns per step over all ranks (Σ self of the activities launched in the step)."""
    units = activity_keys(traceset, "kernel")
    units = units[units[STEP] >= 0]
    return units.groupby(STEP)[S.SELF_NS].sum().sort_index().to_numpy()


def assert_noise_matches_status(table: pd.DataFrame) -> int:
    """The documented rule: a tested row (p_value not nan, status changed/noise/unchanged) is `changed` exactly when
    |b_step_ns − a_step_ns| > noise_ns (2 ns slack: both step means and noise_ns are rounded to whole ns).
    Returns how many rows it checked."""
    tested = table[table[K.P_VALUE].notna() & table[K.STATUS].isin([K.CHANGED, K.NOISE, K.UNCHANGED])]
    step_delta = (tested[K.B_STEP_NS] - tested[K.A_STEP_NS]).abs()
    noise = tested[K.NOISE_NS]
    assert (noise >= 0).all()
    clear = (step_delta - noise).abs() > 2
    beyond = step_delta > noise
    agree = (tested[K.STATUS] == K.CHANGED) == beyond
    bad = tested[clear & ~agree]
    assert bad.empty, bad[[K.KEY, K.A_STEP_NS, K.B_STEP_NS, K.NOISE_NS, K.P_VALUE, K.STATUS]].to_string()
    # and the Holm-adjusted p_value says the same
    assert ((tested[K.P_VALUE] <= table.attrs.get("alpha", 0.05)) == (tested[K.STATUS] == K.CHANGED)).all()
    return len(tested)


@pytest.fixture(scope="module")
def regression_pairs(tmp_path_factory):
    """(A, B) per seed at 4 ranks: B's sgemm_128x64 2x slower."""
    root = tmp_path_factory.mktemp("paired_regression")
    return {seed: (build(root / f"a{seed}", seed, 4),
                   build(root / f"b{seed}", seed + 1, 4, kernel_scale={SLOWER: 2.0}))
            for seed in REGRESSION_SEEDS}


@pytest.fixture(scope="module")
def noise_pairs(tmp_path_factory):
    """Ten noise-only pairs (same spec, different seeds), one rank."""
    root = tmp_path_factory.mktemp("paired_noise")
    runs = {seed: build(root / f"s{seed}", seed, 1) for pair in NOISE_PAIRS for seed in pair}
    return [(runs[a], runs[b]) for a, b in NOISE_PAIRS]


# --- (a) a 2x kernel with 3 steps and a heavier first step ------------------------------------------------

@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_2x_kernel_over_3_steps_with_a_heavier_first_step_is_a_regression(regression_pairs, seed):
    a, b = regression_pairs[seed]
    for side in (a, b):      # the per-position effect the unpaired test took for noise: step 1 heavier in both
        busy = per_step_busy(side)
        assert len(busy) == 3 and busy[0] > 1.05 * busy[1:].max(), busy
    table = compare(a, b)
    assert table.attrs["test"] == K.noise_test_name(3, 3) == BOTH_TESTS
    total = table[table[K.KIND] == "total"].iloc[0]
    assert total[K.DELTA_PCT] > 10 and total[K.STATUS] == K.CHANGED and total[K.P_VALUE] < 0.05
    assert K.TOTAL in set(regressions(table, 5.0)[K.KEY])          # --fail-on-regression 5 exits 1
    key = table.set_index(K.KEY).loc[normalize_kernel_name(SLOWER)]
    assert key[K.DELTA_PCT] > 80
    assert_noise_matches_status(table)
    # exactness laws are untouched: key deltas add up to the busy delta, integers
    keys = table[table[K.KIND] == "key"]
    assert keys[K.DELTA_NS].dtype == np.int64
    assert int(keys[K.DELTA_NS].sum()) == int(total[K.DELTA_NS]) == table.attrs["busy_b_ns"] - table.attrs["busy_a_ns"]


def test_the_cli_gate_exits_1_on_the_testers_setting(tmp_path):
    """The tester's reproducer: 4 ranks, 3 steps, 1% jitter, a 2x sgemm; it exited 0."""
    write_trace_set(tmp_path / "a", TraceSpec(seed=1, ranks=4, **THREE_STEPS))
    write_trace_set(tmp_path / "b", TraceSpec(seed=2, ranks=4, kernel_scale={SLOWER: 2.0}, **THREE_STEPS))
    out = run_cli("compare", tmp_path / "a", tmp_path / "b", "--format", "csv", "--fail-on-regression", "5",
                  "--no-cache", "-q")
    assert out.returncode == 1, out.stderr
    assert "regression beyond noise" in out.stderr and "<total>" in out.stderr
    shown = run_cli("compare", tmp_path / "a", tmp_path / "b", "--format", "markdown", "--no-cache", "-q")
    # the header names the test
    assert "noise test: paired or Welch t over 3 steps (the smaller p, doubled) on per-step" in shown.stdout


def test_a_position_effect_cancels_in_the_paired_test_of_a_key():
    """compare_units on per-step values with a first step 1,000 ns heavier in both runs: the key costs
    1,000 ns more per step in B, steady; the unpaired spread hid it (Welch p ~0.1)."""
    per_step = {"slow": ([2000, 1000, 1010], [3000, 2010, 2000]),
                "same_1": ([500, 510, 505], [507, 503, 508]),
                "same_2": ([800, 790, 805], [795, 806, 799])}

    def units(side: int) -> pd.DataFrame:
        rows = [(0, 0, key, key, step, values[side][step], 1)
                for key, values in per_step.items() for step in range(3)]
        return pd.DataFrame(rows, columns=UNIT_COLUMNS)

    table = compare_units(units(0), units(1), 3, 3)
    assert table.attrs["test"] == K.noise_test_name(3, 3) == BOTH_TESTS
    slow = table.set_index(KEY).loc["slow"]
    assert slow[K.STATUS] == K.CHANGED and slow[K.DELTA_NS] == 3000
    assert table[table[KEY].str.startswith("same")][K.STATUS].isin([K.UNCHANGED, K.NOISE]).all()
    assert_noise_matches_status(table)
    a, b = np.array([per_step["slow"][0]]), np.array([per_step["slow"][1]])
    assert N.paired(a, b, 0.05)[0][0] < 0.001 < 0.05 < N.welch(a, b, 0.05)[0][0]


# --- (b) noise only is not flagged beyond alpha ------------------------------------------------------------

def test_noise_only_pairs_stay_within_alpha(noise_pairs):
    """Ten fixed noise-only pairs (same spec, seeds differ), alpha 0.05. The key rows are one Holm family
    (P(any noise key changed) <= alpha per table) and <total> one more test at alpha, so over ten tables ~0.5
    tables with a changed key and ~0.5 with a changed <total> are expected: at most 2 of each (a bound a
    calibrated test exceeds with probability ~1%). The CI gate at 5% never fires."""
    tables_with_key, tables_with_total, tested = 0, 0, 0
    for a, b in noise_pairs:
        table = compare(a, b)
        assert table.attrs["test"] == K.noise_test_name(3, 3) == BOTH_TESTS
        keys = table[table[K.KIND] == "key"]
        tables_with_key += bool((keys[K.STATUS] == K.CHANGED).any())
        tables_with_total += table.iloc[-1][K.STATUS] == K.CHANGED
        assert regressions(table, 5.0).empty, regressions(table, 5.0)
        tested += assert_noise_matches_status(table)
    assert tables_with_key <= 2 and tables_with_total <= 2, (tables_with_key, tables_with_total)
    assert tested >= 10 * 15


# --- (c) different step counts: Welch, and it says so -------------------------------------------------------

def test_different_step_counts_fall_back_to_welch_and_say_so(tmp_path):
    spec = dict(ranks=1, streams=(7, 20, 24, 28), jitter=0.01, dropped_records=0)
    write_trace_set(tmp_path / "a", TraceSpec(seed=1, steps=3, **spec))
    write_trace_set(tmp_path / "b", TraceSpec(seed=2, steps=4, kernel_scale={SLOWER: 2.0}, **spec))
    write_trace_set(tmp_path / "c", TraceSpec(seed=3, steps=3, **spec))
    a, b, c = (traceattr.load(tmp_path / name, cache=False) for name in "abc")
    welch_table = compare(a, b)
    assert welch_table.attrs["test"] == "Welch t (A 3 steps, B 4 steps)"
    assert any("Welch" in note and "cannot be paired" in note for note in welch_table.attrs["notes"])
    busy_a, busy_b, busy_c = per_step_busy(a)[None, :], per_step_busy(b)[None, :], per_step_busy(c)[None, :]
    total = welch_table.iloc[-1]
    assert total[K.P_VALUE] == pytest.approx(N.welch(busy_a, busy_b, 0.05)[0][0], rel=1e-9)
    assert_noise_matches_status(welch_table)
    assert int(welch_table[welch_table[K.KIND] == "key"][K.DELTA_NS].sum()) == \
        welch_table.attrs["busy_b_ns"] - welch_table.attrs["busy_a_ns"]
    # the same step count: paired, on the same per-step values
    paired_table = compare(a, c)
    assert paired_table.attrs["test"] == K.noise_test_name(3, 3)      # named in the header, no note needed
    assert not any("noise test" in note for note in paired_table.attrs["notes"])
    # both tests ran on the same per-step values: the smaller p, doubled (Bonferroni over the two)
    best = min(N.paired(busy_a, busy_c, 0.05)[0][0], N.welch(busy_a, busy_c, 0.05)[0][0])
    assert paired_table.iloc[-1][K.P_VALUE] == pytest.approx(min(1.0, 2 * best), rel=1e-9)
    # one step: no test
    write_trace_set(tmp_path / "one", TraceSpec(seed=4, steps=1, **spec))
    single = compare(a, traceattr.load(tmp_path / "one", cache=False))
    assert single.attrs["test"].startswith("none")


# --- (d) noise_ns agrees with status ------------------------------------------------------------------------

def test_noise_ns_agrees_with_status(regression_pairs):
    """The tester's confusing row: noise_ns 299 µs against a per-step delta of 652 µs, yet `unchanged` (the
    p-value was Holm-adjusted, the interval not). noise_ns is now the half-width at Holm's level for the row."""
    checked = 0
    for a, b in regression_pairs.values():
        table = compare(a, b)
        checked += assert_noise_matches_status(table)
        key = table.set_index(K.KEY).loc[normalize_kernel_name(SLOWER)]
        step_delta = key[K.B_STEP_NS] - key[K.A_STEP_NS]
        assert (step_delta > key[K.NOISE_NS]) == (key[K.STATUS] == K.CHANGED)
    assert checked >= 3 * 15


def test_holm_levels_match_holm():
    """p <= holm_levels(p, alpha) exactly where holm(p) <= alpha: ties, nan, p = 0 and 1 included."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(1, 20))
        pool = np.array([*rng.uniform(0, 0.02, 3), rng.uniform(0, 1), 0.0, 1.0, 0.01, 0.025, np.nan])
        p = rng.choice(pool, size=m)            # ties on purpose
        for alpha in (0.05, 0.01):
            levels, adjusted = N.holm_levels(p, alpha), N.holm(p)
            assert np.array_equal(np.isnan(levels), np.isnan(p))
            tested = ~np.isnan(p)
            assert np.array_equal((p <= levels)[tested], (adjusted <= alpha)[tested]), (p, levels, adjusted)


def test_paired_statistics():
    a = np.array([[10, 20, 30], [5, 5, 5], [5, 5, 5], [1, 2, 3]], dtype=float)
    b = np.array([[12, 22, 32], [5, 5, 5], [6, 6, 6], [2, 2, 4]], dtype=float)
    p, half = N.paired(a, b, 0.05)
    # constant nonzero difference: p 0, half 0; all equal: p 1, half 0
    assert p[0] == 0.0 and p[1] == 1.0 and p[2] == 0.0 and half[0] == half[1] == 0.0
    # d = 1, 0, 1: mean 2/3, se sqrt(1/3)/sqrt(3) = 1/3, df 2 -> t 2, two-sided p 1 - 2/sqrt(6)
    assert p[3] == pytest.approx(1 - 2 / np.sqrt(6), rel=1e-9)
    assert half[3] == pytest.approx(N.t_quantile(0.025, 2) / 3, rel=1e-9)
    assert np.isnan(N.paired(a[:, :2], b, 0.05)[0]).all()       # counts differ: no pairing
    assert np.isnan(N.paired(a[:, :1], b[:, :1], 0.05)[0]).all()


def test_the_gate_compares_per_step_when_the_step_counts_differ(tmp_path):
    """Found on planted truth: A of 6 steps against B of 4 with a kernel 20% slower per step read
    delta_pct -20% (totals over different step counts), so --fail-on-regression never fired although the
    per-step test said changed; a 2% slowdown read +50% (within noise, so it did not fire either)."""
    base = dict(ranks=2, streams=(7,), jitter=0.01, dropped_records=0)
    write_trace_set(tmp_path / "a", TraceSpec(seed=1, steps=6, **base))
    write_trace_set(tmp_path / "b", TraceSpec(seed=2, steps=4, kernel_scale={"ampere_sgemm_128x64_tn": 1.2}, **base))
    table = compare(str(tmp_path / "a"), str(tmp_path / "b"), cache=False)
    row = table[table[KEY].str.contains("sgemm_128x64_tn")].iloc[0]
    assert row[K.STATUS] == K.CHANGED and row[K.DELTA_PCT] < 0 < row[K.B_STEP_NS] - row[K.A_STEP_NS]
    assert any("sgemm_128x64_tn" in key for key in regressions(table, 5.0)[KEY])
    write_trace_set(tmp_path / "c", TraceSpec(seed=3, steps=6, kernel_scale={"ampere_sgemm_128x64_tn": 1.02}, **base))
    assert regressions(compare(str(tmp_path / "b"), str(tmp_path / "c"), cache=False), 5.0).empty
