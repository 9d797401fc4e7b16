"""summarize() and the report header (tracesets.header_of): tables that add up to busy time per (rank, device)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_sweep import activity, make_traceset, reference
from traceattr import schema as S
from traceattr.analysis.rank_comm import COLUMNS as MULTIRANK_COLUMNS
from traceattr.analysis.across import across_ranks
from traceattr.analysis.fold import OTHER
from tracesets import header_of
from traceattr.analysis.summarize import CATEGORY_COLUMNS, KERNEL_COLUMNS, RANK_COLUMNS
from traceattr.api import summarize
from traceattr.attribution import columns as C
from traceattr.attribution.sweep import sweep
from traceattr.errors import TraceInputError
from traceattr.model.traceset import TraceSet

INT_COLUMNS = {S.RANK, S.DEVICE, S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS, S.EXPOSED_NS, S.WINDOW_NS, S.BUSY_NS,
               S.IDLE_NS, S.DEVICE_SPAN_NS, S.OVERLAP_NS, S.ACTIVITIES, S.EXPOSED_COMMUNICATION_NS, *C.CATEGORY_NS.values()}


def busy_by_device(activities) -> dict:
    """Independent busy time per (rank, device) from the brute-force reference."""
    _, _, facts = reference(activities)
    busy = defaultdict(int)
    for (rank, _window, device), fact in facts.items():
        busy[(rank, device)] += fact[S.BUSY_NS]
    return dict(busy)


def sums_by_device(table, column=S.SELF_NS) -> dict:
    return {key: int(v) for key, v in table.groupby([S.RANK, S.DEVICE])[column].sum().items()}


def assert_int64(table):
    for name in table.columns:
        if name in INT_COLUMNS:
            assert table[name].dtype == np.int64, name


TWO_RANKS = [
    activity(0, 100, name="gemm"), activity(50, 150, stream=8, name="gemm"),
    activity(120, 300, stream=20, name="ncclKernel_AllReduce", category=S.COMMUNICATION),
    activity(310, 320, name="Memcpy HtoD", category=S.MEMCPY),
    activity(400, 450, window=1, name="gemm"),
    activity(0, 90, rank=1, device=1, name="gemm"), activity(10, 20, rank=1, device=1, stream=8, name="relu"),
    activity(30, 35, rank=1, device=1, name="Memset", category=S.MEMSET),
]


def test_kernel_table_adds_up_and_is_sorted():
    table = summarize(make_traceset(TWO_RANKS), by="kernel")
    assert list(table.columns) == KERNEL_COLUMNS
    assert_int64(table)
    assert sums_by_device(table) == busy_by_device(TWO_RANKS)
    assert table[S.SELF_NS].is_monotonic_decreasing
    gemm0 = table[(table[S.RANK] == 0) & (table[S.NAME] == "gemm")].iloc[0]
    assert gemm0[S.COUNT] == 3 and gemm0[S.DURATION_NS] == 250
    # self_pct is the share of its own device's busy time
    for (rank, device), pct in table.groupby([S.RANK, S.DEVICE])[S.SELF_PCT].sum().items():
        assert pct == pytest.approx(100.0)


def test_category_table():
    table = summarize(make_traceset(TWO_RANKS), by="category")
    assert list(table.columns) == CATEGORY_COLUMNS
    assert sums_by_device(table) == busy_by_device(TWO_RANKS)
    rank0 = table[table[S.RANK] == 0].set_index(S.CATEGORY)
    assert rank0.loc[S.COMMUNICATION, S.SOLO_NS] == 150      # 150..300 alone
    assert set(table[table[S.RANK] == 1][S.CATEGORY]) == {S.COMPUTE, S.MEMSET}
    # planted: rank 0 computes alone 0..120 and 400..450, communicates alone 150..300, copies alone 310..320;
    # rank 1's memset runs beside a gemm (hidden), which is alone 0..30 and 35..90
    exposed = {(r, c): e for r, c, e in zip(table[S.RANK], table[S.CATEGORY], table[S.EXPOSED_NS])}
    assert exposed == {(0, S.COMPUTE): 170, (0, S.COMMUNICATION): 150, (0, S.MEMCPY): 10,
                       (1, S.COMPUTE): 85, (1, S.MEMSET): 0}


def exposed_by_device(activities) -> dict:
    """Independent exposed time per (rank, device, category) from the brute-force reference."""
    _, _, facts = reference(activities)
    exposed = defaultdict(int)
    for (rank, _window, device), fact in facts.items():
        for name in S.DEVICE_CATEGORIES:
            exposed[(rank, device, name)] += fact[C.EXPOSED_NS[name]]
    return dict(exposed)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 15),
                          st.sampled_from(S.DEVICE_CATEGORIES)), min_size=1, max_size=20))
def test_category_exposed_time_is_the_reference_and_keeps_its_laws(specs):
    """Per row solo_ns ≤ exposed_ns (an activity alone is its category alone) and exposed_ns ≤ the exact
    share (a category alone holds the whole segment), which self_ns rounds per activity: exposed_ns − self_ns
    < count; per device Σ exposed_ns ≤ busy; --top folds exposed_ns into <other>, and
    the table over ranks sums it."""
    activities = [activity(s, s + d, rank=g % 2, window=g // 2, device=g % 2, stream=7 + i % 3, category=c)
                  for i, (g, s, d, c) in enumerate(specs)]
    ts = make_traceset(activities)
    table = summarize(ts, by="category")
    got = {(r, d, c): e for r, d, c, e in zip(table[S.RANK], table[S.DEVICE], table[S.CATEGORY], table[S.EXPOSED_NS])}
    assert got == {key: ns for key, ns in exposed_by_device(activities).items() if key in got}
    assert (table[S.SOLO_NS] <= table[S.EXPOSED_NS]).all()
    assert (table[S.EXPOSED_NS] - table[S.SELF_NS] < table[S.COUNT]).all()
    busy = busy_by_device(activities)
    assert all(ns <= busy[key] for key, ns in sums_by_device(table, S.EXPOSED_NS).items())
    top = summarize(ts, by="category", top=1)
    assert sums_by_device(top, S.EXPOSED_NS) == sums_by_device(table, S.EXPOSED_NS)
    over = across_ranks(table, ranks=(0, 1))
    assert over[S.EXPOSED_NS].sum() == table[S.EXPOSED_NS].sum()


def test_rank_table_adds_windows_and_keeps_categories_apart():
    ts = make_traceset(TWO_RANKS)
    table = summarize(ts, by="rank")
    assert list(table.columns) == RANK_COLUMNS + MULTIRANK_COLUMNS
    assert_int64(table)
    busy = busy_by_device(TWO_RANKS)
    assert {(r, d): b for r, d, b in zip(table[S.RANK], table[S.DEVICE], table[S.BUSY_NS])} == busy
    parts = table[[C.COMPUTE_NS, C.COMMUNICATION_NS, C.MEMCPY_NS, C.MEMSET_NS]].sum(axis=1)
    assert (parts == table[S.BUSY_NS]).all()
    assert (table[S.IDLE_NS] == table[S.WINDOW_NS] - table[S.BUSY_NS]).all()
    files = ts.files.to_pandas()
    windows = (files[S.END_NS] - files[S.START_NS]).groupby(files[S.RANK]).sum()
    assert table.set_index(S.RANK)[S.WINDOW_NS].to_dict() == windows.to_dict()
    # first start to last end per window (0..320 and 400..450 on rank 0), summed like window_ns
    assert table.set_index(S.RANK)[S.DEVICE_SPAN_NS].to_dict() == {0: 320 + 50, 1: 90}
    row0 = table[table[S.RANK] == 0].iloc[0]
    assert row0[S.ACTIVITIES] == 5 and row0[S.OVERLAP_NS] == 50 + 30
    assert row0[S.EXPOSED_COMMUNICATION_NS] == 150


def test_top_folds_the_rest_into_other_and_still_adds_up():
    activities = [activity(10 * i, 10 * i + 5 + i, stream=7 + i % 2, name=f"k{i}") for i in range(12)]
    full = summarize(make_traceset(activities))
    top = summarize(make_traceset(activities), top=3)
    assert len(top) == 4 and top[S.NAME].iloc[-1] == OTHER
    assert top[S.NAME].iloc[:3].tolist() == full[S.NAME].iloc[:3].tolist()
    assert top[S.SELF_NS].sum() == full[S.SELF_NS].sum() == busy_by_device(activities)[(0, 0)]
    assert top[S.COUNT].sum() == 12
    assert summarize(make_traceset(activities), by="category", top=5).equals(
        summarize(make_traceset(activities), by="category"))


@settings(max_examples=20, deadline=None)      # ~0.14 s CPU an example (5 engine calls); new ones each run
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 15), st.sampled_from("abc"),
                          st.sampled_from(S.DEVICE_CATEGORIES)), min_size=1, max_size=20),
       st.none() | st.integers(1, 3))
def test_every_table_adds_up_to_busy(specs, top):
    activities = [activity(s, s + d, rank=g % 2, window=g // 2, device=g % 2, stream=7 + i % 3, name=n,
                           category=c) for i, (g, s, d, n, c) in enumerate(specs)]
    ts = make_traceset(activities)
    busy = busy_by_device(activities)
    for by in ("kernel", "category"):
        assert sums_by_device(summarize(ts, by=by, top=top)) == busy
    ranks = summarize(ts, by="rank")
    assert sums_by_device(ranks, S.BUSY_NS) == busy
    header = header_of(ts)
    assert header["busy_ns"] == sum(busy.values()) == int(sweep(ts).self_ns.sum())
    assert header["overlap_ns"] == header["duration_ns"] - header["busy_ns"]


def test_host_only_trace_set():
    ts = make_traceset([], windows={(0, 0): (1000, 5000), (1, 0): (1000, 4000)}, notes=("rank assumed 0",))
    kernels = summarize(ts)
    assert kernels.empty and list(kernels.columns) == KERNEL_COLUMNS
    assert_int64(kernels)
    ranks = summarize(ts, by="rank")
    assert ranks[S.RANK].tolist() == [0, 1] and ranks[S.DEVICE].tolist() == [-1, -1]
    assert ranks[S.WINDOW_NS].tolist() == [4000, 3000] and ranks[S.BUSY_NS].tolist() == [0, 0]
    header = header_of(ts)
    assert header["host_only"] and header["busy_ns"] == 0 and header["ranks"] == [0, 1]
    assert header["notes"][0] == "rank assumed 0"
    assert any("no device activities" in note for note in header["notes"])


def test_empty_trace_set():
    assert summarize(TraceSet.empty(), by="rank").empty
    assert header_of(TraceSet.empty())["files"] == 0


def test_header_facts():
    ts = make_traceset(TWO_RANKS + [activity(0, 100, stream=7, name="dup")])   # same-stream overlap
    header = header_of(ts)
    assert header["files"] == 3 and header["windows"] == 3 and header["devices"] == 2
    assert header["ranks"] == [0, 1] and header["eras"] == [S.ERA_C]
    assert header["activities"] == len(TWO_RANKS) + 1
    files = ts.files.to_pandas()
    assert header["span_ns"] == files[S.END_NS].max() - files[S.START_NS].min()
    assert header["idle_ns"] == int(summarize(ts, by="rank")[S.IDLE_NS].sum())
    assert any("same stream" in note or "one stream" in note for note in header["notes"])


def test_bad_arguments():
    ts = make_traceset(TWO_RANKS)
    with pytest.raises(TraceInputError, match="unknown summary level"):
        summarize(ts, by="kernels")
    with pytest.raises(TraceInputError, match="top"):
        summarize(ts, top=0)


# --- real traces (/work/shared/traces/README.md gives exact per-device references) ----------------

# folder -> {(rank, device): (Σ durations ns, busy union ns, max concurrency)}
REFERENCE = {
    "trace_filter": {(0, 0): (607_844_000, 547_656_000, 3), (1, 1): (667_530_000, 580_050_000, 3)},
    "trace_diff/control": {(3, 3): (501_567_000, 388_587_000, 3)},
    "trace_diff/test": {(1, 1): (963_762_000, 717_943_000, 4)},
    "nccl_parser_config": {(0, 0): (165_185_838, 157_500_014, 2)},
    "amd_trace": {(0, 2): (149_042, 149_042, 1)},
    "ns_resolution_trace": {(0, 0): (472_454_441, 472_454_441, 1)},
    "critical_path/alexnet": {(0, 0): (66_203_000, 66_141_000, 2)},
    "critical_path/simple_add": {(0, 0): (49_816_000, 49_758_000, 2)},
}


@pytest.mark.parametrize("folder", sorted(REFERENCE))
def test_real_traces_add_up_to_the_reference_busy_union(shared_traces, folder):
    import traceattr
    ts = traceattr.load(shared_traces / folder)
    result = sweep(ts)
    result.self_check()
    expected = REFERENCE[folder]
    assert sums_by_device(summarize(ts, by="kernel")) == {k: busy for k, (_, busy, _) in expected.items()}
    assert sums_by_device(summarize(ts, by="category")) == {k: busy for k, (_, busy, _) in expected.items()}
    ranks = summarize(ts, by="rank")
    got = {(r, d): (dur, busy) for r, d, dur, busy in zip(
        ranks[S.RANK], ranks[S.DEVICE], ranks[S.OVERLAP_NS] + ranks[S.BUSY_NS], ranks[S.BUSY_NS])}
    assert got == {k: (dur, busy) for k, (dur, busy, _) in expected.items()}
    concurrency = result.groups.groupby([S.RANK, S.DEVICE])[C.MAX_CONCURRENCY].max().to_dict()
    assert concurrency == {k: kmax for k, (_, _, kmax) in expected.items()}
    assert (ranks[S.IDLE_NS] >= 0).all()


def test_real_cpu_only_run_lists_ranks_with_zero_busy(shared_traces):
    import traceattr
    ts = traceattr.load(shared_traces / "torch213_cpu" / "dist2")
    assert summarize(ts).empty
    ranks = summarize(ts, by="rank")
    assert ranks[S.RANK].tolist() == [0, 1] and ranks[S.DEVICE].tolist() == [-1, -1]
    assert (ranks[S.BUSY_NS] == 0).all() and (ranks[S.WINDOW_NS] > 0).all()
    assert header_of(ts)["host_only"]


def test_sum_by_groups_exactly_in_first_seen_order():
    """summarize.sum_by (numpy over key codes, no Acero plan): the sums of a plain Python dict, int64 exact
    near 2**62, groups in first-seen order, keys in their own types (plain or dictionary text, chunked)."""
    import numpy as np
    import pyarrow as pa

    from traceattr.analysis.summarize import sum_by

    rng = np.random.default_rng(7)
    summed = [S.COUNT, S.DURATION_NS, S.SELF_NS, S.SOLO_NS]
    for trial in range(40):
        n = int(rng.integers(0, 300))
        names = pa.array([f"k{int(x)}" for x in rng.integers(0, 9, n)], pa.string())
        columns = {S.RANK: pa.array(rng.integers(0, 4, n), pa.int32()), S.DEVICE: pa.array(rng.integers(-1, 2, n)),
                   S.NAME: names.dictionary_encode() if trial % 2 else names,
                   S.CATEGORY: pa.array([("compute", "communication")[int(x)] for x in rng.integers(0, 2, n)]),
                   **{name: pa.array(rng.integers(0, 2**62 // 300, n)) for name in summed}}
        table = pa.table(columns)
        if trial % 3 == 0 and n:
            table = pa.Table.from_batches(table.to_batches(max_chunksize=29), schema=table.schema)
        keys = [S.RANK, S.DEVICE, S.NAME, S.CATEGORY]
        expected: dict[tuple, list[int]] = {}
        for row in table.to_pylist():
            sums = expected.setdefault(tuple(row[k] for k in keys), [0] * len(summed))
            for i, name in enumerate(summed):
                sums[i] += row[name]
        found = sum_by(table, keys)
        assert [f.type for f in found.schema] == [table.schema.field(k).type for k in keys] + [pa.int64()] * 4
        assert [(tuple(r[k] for k in keys), [r[s] for s in summed]) for r in found.to_pylist()] == \
            [(key, sums) for key, sums in expected.items()]


def test_keys_table_orders_ties_by_text_with_a_null_last():
    """keys_table's order (self_ns descending, then rank, device, name, category ascending), sorted in
    arrow on the texts' codes: equal self times fall back to the names in code point order, and a null
    name (a table built by hand) comes last, as pandas' sort put it."""
    import pandas as pd
    import pyarrow as pa

    from traceattr.analysis.summarize import KERNEL_COLUMNS, keys_table

    names = ["b", None, "a", "z", "B", "é"]
    sums = pa.table({S.RANK: pa.array([0, 0, 0, 1, 0, 0], pa.int32()), S.DEVICE: [0] * 6, S.NAME: pa.array(names),
                     S.CATEGORY: ["compute"] * 6, S.COUNT: [1] * 6, S.DURATION_NS: [5, 5, 5, 9, 5, 5],
                     S.SELF_NS: [5, 5, 5, 9, 5, 5], S.SOLO_NS: [0] * 6})
    busy = pd.Series([25, 9], index=pd.MultiIndex.from_tuples([(0, 0), (1, 0)], names=[S.RANK, S.DEVICE]))
    table = keys_table(sums, busy, [S.RANK, S.DEVICE, S.NAME, S.CATEGORY], KERNEL_COLUMNS)
    assert table[S.NAME].tolist()[:5] == ["z", "B", "a", "b", "é"] and pd.isna(table[S.NAME].iloc[5])
    assert table[S.SELF_NS].tolist() == [9, 5, 5, 5, 5, 5] and list(table.index) == list(range(6))


def test_a_traceset_with_load_options_is_refused_and_aggregate_is_honoured(tmp_path):
    """A misspelled or path-only option beside a TraceSet (topp=, per_rank=, tre=) was swallowed by
    **load_options and the call answered as if it were absent; `aggregate` worked only on a path."""
    import traceattr
    from traceattr.builder import TraceSpec, write_trace_set
    from tracesets import SMALL

    write_trace_set(tmp_path, TraceSpec(ranks=2, **SMALL))
    traces = traceattr.load(tmp_path, cache=False)
    for call in (lambda: traceattr.summarize(traces, by="kernel", topp=1),
                 lambda: traceattr.summarize(traces, per_rank=False),
                 lambda: traceattr.attribute(traces, by="module", tre=True)):
        with pytest.raises(TypeError, match="with a TraceSet"):
            call()
    on_traces = traceattr.summarize(traces, by="collective", aggregate=True)
    on_path = traceattr.summarize(str(tmp_path), by="collective", aggregate=True, cache=False)
    assert "count" in on_traces.columns and len(on_traces) < len(traceattr.summarize(traces, by="collective"))
    assert on_traces.reset_index(drop=True).equals(on_path.reset_index(drop=True))


def test_api_arguments_are_checked_where_they_enter(tmp_path):
    """Found by an API contract check: each of these raised from pathlib or pandas without naming the
    argument, or answered wrongly without a word."""
    import pandas as pd

    import traceattr
    from traceattr.builder import TraceSpec, write_trace_set
    from tracesets import SMALL

    write_trace_set(tmp_path / "traces", TraceSpec(ranks=2, **SMALL))
    path = str(tmp_path / "traces")
    traces = traceattr.load(path, cache=False)
    for call, words in ((lambda: traceattr.summarize(None), "traceset must be a TraceSet or a trace path"),
                        (lambda: traceattr.attribute(pd.DataFrame()), "traceset must be a TraceSet"),
                        (lambda: traceattr.compare(traces, 3), "b must be a TraceSet"),
                        (lambda: traceattr.load(None), "path must be"),
                        (lambda: traceattr.load(path, rank_map=5), "rank_map must be a dict"),
                        # these failed inside the cache code or the pool, naming neither argument
                        (lambda: traceattr.load(path, cache=5), r"load\(\): cache must be"),
                        (lambda: traceattr.load(path, executor=3), r"load\(\): executor must be"),
                        (lambda: traceattr.load_runs(path, cache=[1]), r"load_runs\(\): cache must be"),
                        (lambda: traceattr.load_runs(None), r"load_runs\(\): path must be"),
                        (lambda: traceattr.collectives(5), r"collectives\(\): traceset must be"),
                        (lambda: traceattr.imbalance(pd.DataFrame()), r"imbalance\(\): traceset must be"),
                        (lambda: traceattr.imbalance(traces, jobs=2), "got jobs with a TraceSet"),
                        (lambda: traceattr.collectives(traces, cache=False), "got cache with a TraceSet"),
                        # a misspelt option on a path named a private helper (_side(), summarize_files())
                        (lambda: traceattr.summarize(path, jbos=1), r"summarize\(\) got an unexpected .*'jbos'"),
                        (lambda: traceattr.attribute(path, by="op", jbos=1), r"attribute\(\) got an unexpected"),
                        (lambda: traceattr.compare(path, path, jbos=1), r"compare\(\) got an unexpected .*'jbos'"),
                        # normalize="no" is truthy: it normalized without a word; so were these
                        (lambda: traceattr.compare(path, path, normalize="no"), "normalize must be True or False"),
                        (lambda: traceattr.load(path, skip_bad="no"), r"load\(\): skip_bad must be True or False"),
                        (lambda: traceattr.summarize(path, skip_bad="no"), "skip_bad must be True or False"),
                        (lambda: traceattr.summarize(traces, by="rank", align="no"), "align must be True or"),
                        (lambda: traceattr.attribute(traces, by="op", tree="yes"), "tree must be True or"),
                        (lambda: traceattr.imbalance(traces, align="no"), "align must be True or"),
                        # these failed deep inside, naming neither argument
                        (lambda: traceattr.summarize(path, rank_map=[1]), r"summarize\(\): rank_map must be a dict"),
                        (lambda: traceattr.summarize(path, rank_map={"a": "x"}), "rank_map must be a dict"),
                        (lambda: traceattr.summarize(path, cache=1), r"summarize\(\): cache must be")):
        with pytest.raises(TypeError, match=words):
            call()
    for top in (0, -1, 2.5, "3", True):          # attribute(TraceSet, top=0) gave only <other> rows
        for call in (lambda: traceattr.attribute(traces, by="op", top=top),
                     lambda: traceattr.summarize(traces, top=top), lambda: traceattr.compare(traces, traces, top=top)):
            with pytest.raises(TraceInputError, match="--top must be an integer of at least 1"):
                call()
    # a text is one pattern, not its characters (every kernel with an s, g, e or m was communication)
    one = traceattr.summarize(traces, by="category", comm_patterns="sgemm")
    assert one.equals(traceattr.summarize(traces, by="category", comm_patterns=["sgemm"]))
    assert traceattr.load(path, cache=False, drop_host="cpu_op").host.num_rows == \
        traceattr.load(path, cache=False, drop_host=["cpu_op"]).host.num_rows < traces.host.num_rows
    # a bad pattern is the request's fault, not every file's (with skip_bad all were skipped as unreadable)
    with pytest.raises(TraceInputError, match="--comm-pattern"):
        traceattr.summarize(path, by="kernel", comm_patterns=["("], skip_bad=True, cache=False)
    # a parquet store, for every level (kernel, category and the attribution levels said "no trace files")
    traceattr.io.store.write_store(traces, tmp_path / "store")
    store = str(tmp_path / "store")
    assert traceattr.summarize(store, by="kernel").equals(traceattr.summarize(traces, by="kernel"))
    assert traceattr.attribute(store, by="op").equals(traceattr.attribute(traces, by="op"))
