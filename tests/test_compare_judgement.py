"""compare's verdicts on planted truth, from an outside trial of the command: a change held by one step,
sides of different rank counts, a renamed kernel, rows without a noise estimate, CPU-only runs and sides
that share no rank. Each case says what a user must be told, and the test checks that and only that."""

from __future__ import annotations

import subprocess

import numpy as np
import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis import compare as K
from traceattr.analysis.compare import Side, compare_sides, regressions
from traceattr.analysis.keys import KEY, RAW, STEP, UNIT_COLUMNS
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.cli import regression_line
from conftest import REPO_ROOT
from clirun import run_cli

KERNELS = {"gemm": 80_000, "softmax": 30_000, "relu": 20_000}


def units(seed: int, steps: int = 10, ranks: int = 1, jitter: float = 0.02, extra: dict | None = None,
          names: dict | None = None) -> pd.DataFrame:
    """activity_keys() rows: every kernel once per step and rank, durations jittered (seeded); `extra`
    {(step, name): ns} adds time to one step's kernel on rank 0; `names` renames keys."""
    rng = np.random.default_rng(seed)
    rows = []
    for rank in range(ranks):
        for step in range(steps):
            for name, ns in KERNELS.items():
                value = int(round(ns * (1 + rng.normal(0, jitter)))) + (extra or {}).get((step, name), 0) * (rank == 0)
                key = (names or {}).get(name, name)
                rows.append((rank, 0, key, key, step, value, 1))
    return pd.DataFrame(rows, columns=UNIT_COLUMNS)


def side(table: pd.DataFrame, steps: int) -> Side:
    ranks = tuple(sorted(set(table[S.RANK])))
    busy = int(table[S.SELF_NS].sum())
    return Side(files=len(ranks), device_rows=len(table), ranks=ranks, world_sizes=frozenset(), steps=steps,
                window_ns=busy, busy_ns=busy)


def compared(a: pd.DataFrame, b: pd.DataFrame, steps: int = 10) -> pd.DataFrame:
    return compare_sides(side(a, steps), side(b, steps), a, b, "kernel", True, 0.05, None)


def total_row(table: pd.DataFrame) -> pd.Series:
    return table[table[K.KIND] == "total"].iloc[0]


def test_a_change_held_by_one_step_is_named_not_left_as_noise():
    """gemm +400 µs in step 5 of 10 (+26% busy): the paired test reads one large difference as spread, so
    <total> is within noise; the note must name step 5 and its change."""
    table = compared(units(1), units(2, extra={(4, "gemm"): 400_000}))
    assert total_row(table)[K.STATUS] == K.NOISE
    step, change, total = table.attrs["one_step"]
    assert step == 4 and 390_000 < change < 410_000 and abs(total - change) < 20_000
    (note,) = [n for n in table.attrs["notes"] if "one step's" in n]
    assert "step 5 (by position) +" in note and "--by step" in note


def test_noise_alone_never_gets_the_one_step_note():
    """60 noise-only pairs (5 to 20 steps, 2-30% jitter): the note never appears."""
    seen = []
    for steps, jitter in ((5, 0.05), (5, 0.3), (10, 0.02), (10, 0.2), (20, 0.1), (8, 0.1)):
        for seed in range(10):
            table = compared(units(100 + 2 * seed, steps, jitter=jitter), units(101 + 2 * seed, steps, jitter=jitter),
                             steps)
            seen.append(table.attrs["one_step"])
    assert seen == [None] * 60


def test_twice_the_ranks_doing_the_same_work_is_no_regression():
    """2 ranks against 4 with the same per-rank work: every sum doubles (+100%), which failed the gate; per
    rank nothing changed. 4 ranks with gemm 30% slower per rank still fail it."""
    a = units(1, ranks=2)
    same = compared(a, units(2, ranks=4))
    assert total_row(same)[K.DELTA_NS] > 0.9 * total_row(same)[K.A_NS]          # the sums: +100%
    assert regressions(same, 5).empty and total_row(same)[K.STATUS] == K.NOISE
    per_step = total_row(same)[[K.A_STEP_NS, K.B_STEP_NS]].to_numpy()
    assert abs(per_step[1] - per_step[0]) < 0.02 * per_step[0]               # per step and rank
    assert any("the noise test and --fail-on-regression are per rank" in n for n in same.attrs["notes"])
    slower = units(2, ranks=4)
    slower.loc[slower[KEY] == "gemm", S.SELF_NS] = (slower.loc[slower[KEY] == "gemm", S.SELF_NS] * 1.3).round()
    failed = regressions(compared(a, slower), 5)
    assert "gemm" in failed[KEY].tolist()


def test_a_renamed_kernel_is_not_new_work_but_an_added_one_is():
    """gemm<float> renamed gemm<half> with the same durations failed the gate as `added` while the total
    fell; new work (a kernel of 25% of A's busy, nothing removed) still fails it."""
    a = units(1)
    renamed = compared(a, units(2, names={"gemm": "gemm_half"}))
    assert set(renamed[K.STATUS]) >= {K.ADDED, K.REMOVED} and regressions(renamed, 5).empty
    grown = units(2)
    grown = pd.concat([grown, grown[grown[KEY] == "softmax"].assign(**{KEY: "attention", RAW: "attention"})])
    failed = regressions(compared(a, grown), 5)
    assert failed.loc[failed[KEY] == "attention", K.STATUS].tolist() == [K.ADDED]


def test_the_gate_line_says_which_rows_are_untested():
    """With one step per side nothing is tested: the gate still fails a slower run (a slowdown without a
    noise estimate cannot be called noise) but must not call it 'beyond noise'."""
    table = compared(units(1, steps=1), units(2, steps=1, extra={(0, "gemm"): 40_000}), steps=1)
    line = regression_line(regressions(table, 5), 5)
    assert line.startswith("regression (> 5%): ") and "beyond noise" not in line
    assert "gemm (untested: no noise estimate)" in line
    assert table.attrs["test"].startswith("none")
    tested = compared(units(1), units(2, extra={(s, "gemm"): 40_000 for s in range(10)}))
    assert regression_line(regressions(tested, 5), 5).startswith("regression beyond noise (> 5%): gemm")


def cli(*args) -> subprocess.CompletedProcess:
    return run_cli("compare", *args, "--no-cache", "-q")     # in this process (tests/clirun.py)


def test_cpu_only_runs_cannot_pass_the_gate_silently():
    """Host op time 6x slower on CPU-only runs compared as `unchanged`, exit 0: compare measures device time,
    so the gate cannot judge them and says so, exit 2."""
    cpu = REPO_ROOT / "sample_traces" / "cpu_torch213"
    done = cli(cpu, cpu, "--fail-on-regression", "5")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("traceattr: error: --fail-on-regression cannot judge: "
                                                    "neither run has device activities (compare measures device time)")
    shown = cli(cpu, cpu)
    assert shown.returncode == 0 and "neither side has device activities" in shown.stdout


def test_sides_that_share_no_rank_are_said_to(tmp_path):
    write_trace_set(tmp_path / "a", TraceSpec(ranks=(0, 1), world_size=4, steps=3, seed=1))
    write_trace_set(tmp_path / "b", TraceSpec(ranks=(2, 3), world_size=4, steps=3, seed=2))
    table = traceattr.compare(str(tmp_path / "a"), str(tmp_path / "b"), cache=False)
    assert "no rank in common (A: 0-1, B: 2-3): each row compares other ranks' work" in table.attrs["notes"]
    same = traceattr.compare(str(tmp_path / "a"), str(tmp_path / "a"), cache=False)
    assert not any("no rank in common" in n for n in same.attrs["notes"])
