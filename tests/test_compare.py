"""compare(): exact additive deltas, noise-aware status, normalized keys, bad input; on builder pairs with known
changes and on the real trace_diff pair."""

from __future__ import annotations

import numpy as np
import pytest

import traceattr
from conftest import SAMPLE_TRACES, shared_trace
from traceattr import schema as S
from traceattr.analysis import compare as K
from traceattr.analysis.compare import regressions
from traceattr.api import compare
from traceattr.analysis.normalize import normalize_kernel_name
from traceattr.analysis.noise import holm, t_quantile, t_two_sided_p, welch
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace, write_trace_set
from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S
from traceattr.errors import TraceInputError
from traceattr.model.traceset import TraceSet

# one stream: self time == duration, so a kernel made slower changes no other key's self time
BASE = dict(ranks=1, steps=6, streams=(7,), jitter=0.03, dropped_records=0)
SLOWER = "ampere_sgemm_128x64_tn"          # made 2x slower in B
DROPPED = "GammaBetaBackwardCUDAKernel"    # gone in B
ADDED_KERNEL = "my_new_kernel"             # new in B, 40 µs per step


def conserved(traceset) -> int:
    """Σ self == busy per device (the sweep's own law); returns the total busy."""
    result = sweep(traceset)
    result.self_check()
    return int(result.groups[S.BUSY_NS].sum())


def window_total(traceset) -> int:
    """Σ file windows (the loader's span of timed events; the builder's truth window also covers the `Trace`
    span, so it is not used here). One device per rank in these tests."""
    files = traceset.files
    return sum(e - s for s, e in zip(files.column(S.START_NS).to_pylist(), files.column(S.END_NS).to_pylist()))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    truths = {
        "a": write_trace_set(root / "a", TraceSpec(seed=1, **BASE)),
        "b": write_trace_set(root / "b", TraceSpec(seed=2, kernel_scale={SLOWER: 2.0}, drop_kernels=(DROPPED,),
                                                   add_kernels={ADDED_KERNEL: 40_000}, **BASE)),
        "noise": write_trace_set(root / "noise", TraceSpec(seed=3, **BASE)),
    }
    sets = {name: traceattr.load(root / name) for name in truths}
    return sets, truths


def keys_of(table):
    return table[table[K.KIND] == "key"]


def test_known_changes_flagged_exactly(pair):
    sets, truths = pair
    table = compare(sets["a"], sets["b"])
    rows = keys_of(table).set_index(K.KEY)
    status = rows[K.STATUS]
    slower, dropped = normalize_kernel_name(SLOWER), [k for k in rows.index if DROPPED in k]
    assert status[slower] == K.CHANGED and rows.loc[slower, K.DELTA_PCT] > 80
    assert len(dropped) == 1 and status[dropped[0]] == K.REMOVED and rows.loc[dropped[0], K.B_NS] == 0
    assert status[ADDED_KERNEL] == K.ADDED
    assert rows.loc[ADDED_KERNEL, K.B_NS] == 40_000 * 6 and rows.loc[ADDED_KERNEL, K.B_COUNT] == 6
    others = status.drop([slower, dropped[0], ADDED_KERNEL])
    assert others.isin([K.UNCHANGED, K.NOISE]).all(), others[others == K.CHANGED]
    # the 2x kernel is the largest change, and the sort is by |delta|
    assert table.iloc[0][K.KEY] == slower
    assert np.all(np.diff(np.abs(keys_of(table)[K.DELTA_NS].to_numpy())) <= 0)


def test_noise_only_pair_flags_nothing(pair):
    sets, _ = pair
    table = compare(sets["a"], sets["noise"])
    tested = table[table[K.KIND].isin(["key", "total"])]
    # every key moved a little (jitter): within noise, and never called unchanged while it moved
    assert (tested[K.STATUS] == np.where(tested[K.DELTA_NS] == 0, K.UNCHANGED, K.NOISE)).all(), \
        tested[[K.KEY, K.STATUS, K.P_VALUE]]
    assert tested[K.P_VALUE].notna().all() and (tested[K.NOISE_NS] >= 0).all()
    assert regressions(table, 1.0).empty
    idle = table[table[K.KIND] == "idle"].iloc[0]
    assert idle[K.STATUS] in (K.UNTESTED, K.UNCHANGED) and np.isnan(idle[K.P_VALUE])


def test_deltas_add_up_exactly_to_builder_truth(pair):
    sets, truths = pair
    table = compare(sets["a"], sets["b"])
    busy_a, busy_b = truths["a"][0].busy_ns, truths["b"][0].busy_ns
    assert conserved(sets["a"]) == busy_a and conserved(sets["b"]) == busy_b
    keys = keys_of(table)
    assert keys[K.DELTA_NS].dtype == np.int64
    assert int(keys[K.DELTA_NS].sum()) == busy_b - busy_a
    assert int(keys[K.A_NS].sum()) == busy_a and int(keys[K.B_NS].sum()) == busy_b
    total = table[table[K.KIND] == "total"].iloc[0]
    assert (total[K.A_NS], total[K.B_NS]) == (busy_a, busy_b)
    idle = table[table[K.KIND] == "idle"].iloc[0]
    window_delta = window_total(sets["b"]) - window_total(sets["a"])
    assert int(keys[K.DELTA_NS].sum()) + int(idle[K.DELTA_NS]) == window_delta
    assert table.attrs["window_b_ns"] - table.attrs["window_a_ns"] == window_delta
    assert table.iloc[-1][K.KEY] == K.TOTAL and table.iloc[-2][K.KEY] == K.IDLE


def test_top_folds_into_other_and_still_adds_up(pair):
    sets, truths = pair
    table = compare(sets["a"], sets["b"], top=3)
    assert list(table[K.KIND]) == ["key"] * 3 + ["other", "idle", "total"]
    assert int(table[table[K.KIND].isin(["key", "other"])][K.DELTA_NS].sum()) == \
        truths["b"][0].busy_ns - truths["a"][0].busy_ns


def test_regressions_gate(pair):
    sets, _ = pair
    table = compare(sets["a"], sets["b"])
    slow = regressions(table, 50.0)
    assert normalize_kernel_name(SLOWER) in set(slow[K.KEY])
    assert K.TOTAL not in set(slow[K.KEY])           # the total grew by ~13%, below 50%
    assert K.TOTAL in set(regressions(table, 5.0)[K.KEY])
    assert regressions(table, 500.0).empty


def test_by_step_normalized_matches_positions(tmp_path):
    spec = dict(ranks=1, streams=(7,), dropped_records=0, cuda_graph=False)
    write_trace_set(tmp_path / "a", TraceSpec(steps=(1, 2, 3), seed=1, **spec))
    write_trace_set(tmp_path / "b", TraceSpec(steps=(11, 12, 13), seed=1, **spec))
    a, b = traceattr.load(tmp_path / "a"), traceattr.load(tmp_path / "b")
    matched = compare(a, b, by="step")
    assert list(keys_of(matched)[K.KEY].sort_values()) == ["step 1", "step 2", "step 3"]
    assert "ProfilerStep#11" in " ".join(matched[K.RAW_NAMES])
    raw = compare(a, b, by="step", normalize=False)        # nothing in common: added/removed, with a note
    assert sorted(keys_of(raw)[K.STATUS]) == [K.ADDED] * 3 + [K.REMOVED] * 3
    assert any("no key in common" in note for note in raw.attrs["notes"])
    assert int(keys_of(raw)[K.DELTA_NS].sum()) == conserved(b) - conserved(a)


@pytest.mark.parametrize("by", ["category", "op", "module", "annotation"])
def test_every_level_adds_up(pair, by):
    sets, truths = pair
    table = compare(sets["a"], sets["b"], by=by)
    assert int(keys_of(table)[K.DELTA_NS].sum()) == truths["b"][0].busy_ns - truths["a"][0].busy_ns
    assert keys_of(table)[K.KEY].is_unique


def test_host_only_and_empty_sides_give_tables_not_crashes(pair):
    sets, _ = pair
    host_only = traceattr.load(SAMPLE_TRACES / "cpu_torch213")
    table = compare(host_only, sets["a"])
    assert set(keys_of(table)[K.STATUS]) == {K.ADDED}
    assert int(keys_of(table)[K.DELTA_NS].sum()) == conserved(sets["a"])
    assert any("no device activities" in note for note in table.attrs["notes"])
    empty = compare(sets["a"], TraceSet.empty())
    assert set(keys_of(empty)[K.STATUS]) == {K.REMOVED}
    assert any("empty" in note for note in empty.attrs["notes"])
    assert empty.iloc[-1][K.B_NS] == 0


def test_world_size_difference_is_noted(tmp_path):
    spec = dict(ranks=(0,), steps=2, streams=(7,), cuda_graph=False)
    write_trace_set(tmp_path / "a", TraceSpec(world_size=2, **spec))
    write_trace_set(tmp_path / "b", TraceSpec(world_size=4, **spec))
    table = compare(traceattr.load(tmp_path / "a"), traceattr.load(tmp_path / "b"))
    assert any("world sizes differ (2 vs 4)" in note for note in table.attrs["notes"])


def test_bad_arguments():
    with pytest.raises(TraceInputError, match="cannot compare by"):
        compare(TraceSet.empty(), TraceSet.empty(), by="nonsense")
    with pytest.raises(TraceInputError, match="alpha"):
        compare(TraceSet.empty(), TraceSet.empty(), alpha=1.5)


# --- the real pair ---------------------------------------------------------------------------------

def test_real_trace_diff_pair():
    a = traceattr.load(shared_trace("trace_diff/control"))
    b = traceattr.load(shared_trace("trace_diff/test"))
    table = compare(a, b)
    keys = keys_of(table)
    # exact busy unions from the traces README
    assert conserved(a) == 388_587_000 and conserved(b) == 717_943_000
    assert int(keys[K.DELTA_NS].sum()) == 717_943_000 - 388_587_000
    idle = table[table[K.KIND] == "idle"].iloc[0]
    assert int(keys[K.DELTA_NS].sum()) + int(idle[K.DELTA_NS]) == \
        table.attrs["window_b_ns"] - table.attrs["window_a_ns"]
    # what we see: the V100 run (test) does ~4,600 device-to-device copies against 18 on the A100 (control):
    # the top row, +84.8 ms; then the NCCL allreduce (+27.9 ms); cuBLAS sgemm kernels follow, matched across
    # GPU families by the <arch>_ prefix (ampere_* in A, volta_* in B)
    top = keys.iloc[0]
    assert top[K.KEY].startswith("Memcpy DtoD") and top[K.B_COUNT] > 100 * top[K.A_COUNT]
    assert top[K.STATUS] == K.CHANGED
    assert keys.iloc[1][K.KEY].startswith("ncclKernel_AllReduce") and keys.iloc[1][K.STATUS] == K.CHANGED
    sgemm = keys[keys[K.KEY].str.startswith("<arch>_sgemm") & (keys[K.A_COUNT] > 0) & (keys[K.B_COUNT] > 0)]
    assert len(sgemm) >= 3
    assert any("ampere_" in names and "volta_" in names for names in sgemm[K.RAW_NAMES])
    total = table.iloc[-1]
    assert total[K.STATUS] == K.CHANGED and total[K.DELTA_PCT] > 80
    raw = keys_of(compare(a, b, normalize=False))
    assert not raw[K.KEY].str.contains("sgemm").any() or \
        not (raw[raw[K.KEY].str.contains("sgemm")][K.STATUS] == K.CHANGED).any()
    assert len(raw) > len(keys)          # without normalization fewer names match


# --- the statistics ----------------------------------------------------------------------------------

def test_t_distribution_matches_tables():
    # two-sided 5% critical values of Student's t (any statistics table)
    p = t_two_sided_p(np.array([12.706, 4.303, 2.776, 2.228, 1.960]), np.array([1, 2, 4, 10, 1e7]))
    assert np.allclose(p, 0.05, atol=2e-4)
    assert abs(t_quantile(0.025, 4) - 2.776) < 1e-3 and abs(t_quantile(0.005, 10) - 3.169) < 1e-3
    assert t_two_sided_p(np.array([0.0]), np.array([3.0]))[0] == pytest.approx(1.0)


def test_welch_and_holm():
    a = np.array([[10, 11, 9, 10], [5, 5, 5, 5], [5, 5, 5, 5], [1, 2, 3, 4]])
    b = np.array([[20, 21, 19, 20], [5, 5, 5, 5], [6, 6, 6, 6], [2, 1, 4, 3]])
    p, half = welch(a, b, 0.05)
    assert p[0] < 1e-5 and p[1] == 1.0 and p[2] == 0.0 and p[3] == pytest.approx(1.0)
    assert half[1] == 0.0 and 0 < half[0] < 2.0
    single_p, _ = welch(a[:, :1], b, 0.05)
    assert np.isnan(single_p).all()
    assert np.allclose(holm(np.array([0.01, 0.04, np.nan, 0.03, 0.005]))[[0, 1, 3, 4]], [0.03, 0.06, 0.06, 0.02])


@pytest.mark.parametrize("raw, key", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "at::native::vectorized_elementwise_kernel<N, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, N>>"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul"),
    ("triton_per_fused__native_batch_norm_legit_12", "triton_per_fused__native_batch_norm_legit"),
    ("volta_sgemm_128x64_tn", "<arch>_sgemm_128x64_tn"),
    ("sm90_xmma_gemm_f16f16_tn_kernel", "<arch>_xmma_gemm_f16f16_tn_kernel"),
    ("cutlass_gemm_a1b2c3d4e5f6", "cutlass_gemm_<hash>"),
    ("void at::native::(anonymous namespace)::ln_kernel<float>(float const*)", "at::native::(anonymous)::ln_kernel<float>"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "ncclKernel_AllReduce_RING_LL_Sum_float"),
])
def test_kernel_name_normalization(raw, key):
    assert normalize_kernel_name(raw) == key


def test_normalization_keeps_different_kernels_apart():
    add = normalize_kernel_name("void k<4, at::native::CUDAFunctor_add<float>>(int)")
    relu = normalize_kernel_name("void k<4, at::native::clamp_min_scalar_functor<float>>(int)")
    assert add != relu
    assert normalize_kernel_name("Memcpy HtoD (Pinned -> Device)") != normalize_kernel_name(
        "Memcpy HtoD (Pageable -> Device)")


def test_by_step_verdict_on_a_60_percent_slower_run(tmp_path):
    """Each step key held its time in its own step only; testing it against the other steps' zeros called
    every step of a much slower run 'unchanged'. Steps are untested rows; <total> tests the distributions."""
    spec = dict(ranks=1, steps=6, streams=(7,), jitter=0.03, dropped_records=0)
    write_trace_set(tmp_path / "a", TraceSpec(seed=1, **spec))
    write_trace_set(tmp_path / "b", TraceSpec(seed=2, rank_scale={0: 1.6}, **spec))
    write_trace_set(tmp_path / "same", TraceSpec(seed=3, **spec))
    a, b, same = (traceattr.load(tmp_path / n) for n in ("a", "b", "same"))
    table = compare(a, b, by="step")
    steps = keys_of(table)
    assert len(steps) == 6 and (steps[K.DELTA_PCT] > 40).all()
    assert (steps[K.STATUS] == K.UNTESTED).all() and steps[K.P_VALUE].isna().all()
    total = table[table[K.KIND] == "total"].iloc[0]
    assert total[K.STATUS] == K.CHANGED and total[K.DELTA_PCT] > 40 and total[K.P_VALUE] < 0.01
    assert "<total>" in regressions(table, 10.0)[K.KEY].tolist()
    noise = compare(a, same, by="step")
    assert noise[noise[K.KIND] == "total"].iloc[0][K.STATUS] == K.NOISE
    assert regressions(noise, 10.0).empty
    assert any("matched by position" in note for note in table.attrs["notes"])


def test_regressions_judge_every_key_never_a_folded_table(pair):
    """top folds rows for display: a key folded into <other> cannot be judged, so regressions() refuses a
    folded table, and fold() of the whole table shows the same rows compare(top=N) gives."""
    sets, _ = pair
    whole = compare(sets["a"], sets["b"])
    folded = compare(sets["a"], sets["b"], top=1)
    assert normalize_kernel_name(SLOWER) in set(regressions(whole, 50.0)[K.KEY])
    with pytest.raises(TraceInputError, match="every key"):
        regressions(folded, 50.0)
    refolded = K.fold(whole, 1)
    assert refolded.equals(folded) and refolded.attrs == folded.attrs


def _profiled_twice(folder, steps: int = 4) -> None:
    """One process, two profiling windows, each numbering its steps ProfilerStep#1..#steps (torch restarts
    the count per profiler object)."""
    for window in range(2):
        spec = TraceSpec(ranks=1, steps=steps, streams=(7,), jitter=0.02, dropped_records=0, seed=7 + window,
                         base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        write_trace(folder / f"w{window}_rank0.pt.trace.json", spec, 0)


def test_windows_repeating_step_names_are_separate_steps(tmp_path):
    _profiled_twice(tmp_path / "twice")
    write_trace_set(tmp_path / "once", TraceSpec(ranks=1, steps=4, streams=(7,), jitter=0.02, dropped_records=0,
                                                 seed=7))
    once, twice = traceattr.load(tmp_path / "once"), traceattr.load(tmp_path / "twice")
    table = compare(once, twice)
    assert (table.attrs["steps_a"], table.attrs["steps_b"]) == (4, 8)
    total = table[table[K.KIND] == "total"].iloc[0]
    assert total[K.B_NS] > 1.9 * total[K.A_NS] and abs(total[K.B_STEP_NS] / total[K.A_STEP_NS] - 1) < 0.1
    assert total[K.STATUS] == K.NOISE and regressions(table, 5.0).empty
    by_step = compare(once, twice, by="step")
    assert sorted(keys_of(by_step)[K.KEY], key=lambda k: int(k.split()[1])) == [f"step {i}" for i in range(1, 9)]
    raw = set(keys_of(compare(once, twice, by="step", normalize=False))[K.KEY])
    assert raw == {f"ProfilerStep#{i}" for i in range(1, 5)} | {f"ProfilerStep#{i} [2]" for i in range(1, 5)}
    # the paths, file by file, give the same tables
    for by in ("kernel", "step"):
        path_table = compare(str(tmp_path / "once"), str(tmp_path / "twice"), by=by, cache=False)
        assert path_table.equals(compare(once, twice, by=by))


def test_unknown_world_size_is_not_compared(tmp_path):
    """A trace without distributedInfo has world size -1 (unknown): no "world sizes differ (-1 vs 2)" note;
    two known sizes that differ are still noted."""
    spec = dict(steps=2, streams=(7,), dropped_records=0)
    write_trace_set(tmp_path / "unknown", TraceSpec(ranks=1, seed=1, **spec))     # one rank: no distributedInfo
    for size in (2, 4):
        write_trace_set(tmp_path / f"of{size}", TraceSpec(ranks=(0,), world_size=size, seed=1, **spec))
    unknown, of2, of4 = (traceattr.load(tmp_path / name) for name in ("unknown", "of2", "of4"))
    assert set(unknown.files.column(S.WORLD_SIZE).to_pylist()) == {-1}
    notes = compare(unknown, of2).attrs["notes"]
    assert not any("world size" in note or "-1" in note for note in notes), notes
    assert any("world sizes differ (2 vs 4)" in note for note in compare(of2, of4).attrs["notes"])
