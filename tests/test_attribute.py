"""attribute(): every table sums to busy per (rank, device); known answers; trees; host-only; real traces."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceattr
from traceattr import schema as S
from traceattr.analysis.summary_plan import reduce_traceset
from traceattr.analysis.attribute import (
    EXCLUSIVE_SELF_NS, INCLUSIVE_SELF_NS, LEVELS, TREE_LEVELS, UNATTRIBUTED,
)
from traceattr.api import attribute
from traceattr.attribution.links import CHECKS
from traceattr.errors import TraceInputError
from traceattr.report.tree import render_tree

from reference import union_ns
from test_links import EVERY_KIND_DEVICE, EVERY_KIND_HOST, host, kernel, launch, make_traceset, op
import clirun


def linked_share(traceset) -> dict:
    """Per rank, the share of device busy time linked to a launching op: the op table's own figure."""
    return attribute(traceset, by="op").attrs["linked_share"]


def busy_by_device(ts) -> dict[tuple[int, int], int]:
    groups: dict[tuple[int, int, int], list] = {}
    for row in ts.device.to_pylist():
        groups.setdefault((row[S.RANK], row[S.WINDOW], row[S.DEVICE]), []).append((row[S.START_NS], row[S.END_NS]))
    busy: dict[tuple[int, int], int] = {}
    for (rank, _, device), intervals in groups.items():
        busy[(rank, device)] = busy.get((rank, device), 0) + union_ns(intervals)
    return busy


def check_conservation(df: pd.DataFrame, busy: dict[tuple[int, int], int], tree: bool = False) -> None:
    """Σ self_ns per (rank, device) == busy, exactly; in a full tree, the roots' inclusive time too."""
    sums = {(int(r), int(d)): int(v) for (r, d), v in df.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum().items()}
    assert sums == {k: v for k, v in busy.items() if v or k in sums}
    assert df.attrs["totals"] == sums
    # the trust figure in the header is the share of this table's own time that is not <unattributed>, of
    # the time launched in the window (<carried in> has no launch to link)
    folded = (df["key"] == "<other>").any()          # --top may fold <unattributed> into <other>
    for rank, mine in df.groupby(S.RANK):
        total = int(mine[S.SELF_NS].sum()) - int(mine.loc[mine["key"] == "<carried in>", S.SELF_NS].sum())
        if total and not folded:
            unattributed = int(mine.loc[mine["key"] == UNATTRIBUTED, S.SELF_NS].sum())
            assert df.attrs["linked_share"][rank] == pytest.approx(1 - unattributed / total)
    if tree:
        roots = df[df["depth"] == 0].groupby([S.RANK, S.DEVICE])[INCLUSIVE_SELF_NS].sum()
        assert {(int(r), int(d)): int(v) for (r, d), v in roots.items()} == sums


@pytest.fixture(scope="module")
def every_kind():
    return make_traceset(EVERY_KIND_HOST, EVERY_KIND_DEVICE)


# --- known answers ---------------------------------------------------------------------------------

def test_op_table_has_known_rows_and_an_unattributed_row(every_kind):
    df = attribute(every_kind, by="op")
    rows = {k: (s, c) for k, s, c in zip(df["key"], df[S.SELF_NS], df[S.COUNT])}
    # the graph launch's two kernels (no capture trace) go to the launch's innermost range, the step
    assert rows == {"aten::addmm": (60, 2), "aten::mm": (100, 1), "aten::relu": (20, 1),
                    "<graph replay: ProfilerStep#7>": (20, 2), UNATTRIBUTED: (300, 3)}
    assert list(df.columns[:8]) == [S.RANK, S.DEVICE, "key", S.SELF_NS, S.DURATION_NS, S.SOLO_NS, S.COUNT,
                                    S.SELF_PCT]
    assert df[S.SELF_PCT].sum() == pytest.approx(100.0)
    assert df.attrs["time_kind"] == "device"
    check_conservation(df, busy_by_device(every_kind))


def test_module_tree_has_inclusive_exclusive_and_inferred_time(every_kind):
    df = attribute(every_kind, by="module", tree=True).set_index("key")
    assert df.loc["Net_0", EXCLUSIVE_SELF_NS] == 20                 # relu ran in Net_0 itself
    assert df.loc["Net_0/Linear_0", EXCLUSIVE_SELF_NS] == 160       # forward 60 + backward 100
    assert df.loc["Net_0", INCLUSIVE_SELF_NS] == 180
    assert df.loc["Net_0/Linear_0", "inferred_self_ns"] == 100
    assert df.loc["Net_0/Linear_0", "parent"] == "Net_0" and df.loc["Net_0/Linear_0", "depth"] == 1
    assert df.loc[UNATTRIBUTED, S.SELF_NS] == 320
    check_conservation(df.reset_index(), busy_by_device(every_kind), tree=True)


def test_tree_lists_internal_nodes_depth_first_and_flat_does_not(every_kind):
    tree = attribute(every_kind, by="op_stack", tree=True)
    flat = attribute(every_kind, by="op_stack")
    assert "aten::linear" in set(tree["key"]) and "aten::linear" not in set(flat["key"])
    assert tree.set_index("key").loc["aten::linear", INCLUSIVE_SELF_NS] == 60
    # depth-first: every row's parent appears before it; <unattributed> comes last
    seen = set()
    for key, parent in zip(tree["key"], tree["parent"]):
        assert parent == "" or parent in seen
        seen.add(key)
    assert tree["key"].iloc[-1] == UNATTRIBUTED
    # inclusive = exclusive + Σ children's inclusive, at every node
    by_key = tree.set_index("key")
    for key, row in by_key.iterrows():
        children = by_key[by_key["parent"] == key][INCLUSIVE_SELF_NS].sum() if key != UNATTRIBUTED else 0
        assert row[INCLUSIVE_SELF_NS] == row[EXCLUSIVE_SELF_NS] + children


def test_step_and_annotation_tables(every_kind):
    steps = attribute(every_kind, by="step")
    assert dict(zip(steps["key"], steps[S.SELF_NS])) == {"ProfilerStep#7": 200, UNATTRIBUTED: 300}
    annotations = attribute(every_kind, by="annotation")
    assert dict(zip(annotations["key"], annotations[S.SELF_NS])) == {"my_forward": 80, UNATTRIBUTED: 420}


def test_bad_levels_are_one_line_input_errors(every_kind):
    with pytest.raises(TraceInputError, match="choose one of"):
        attribute(every_kind, by="kernel_name")
    with pytest.raises(TraceInputError, match="tree"):
        attribute(every_kind, by="step", tree=True)


def test_linked_share_and_link_report(every_kind):
    # 180 ns launched inside an op, and 20 ns replayed by a graph launch (to `<graph replay: ProfilerStep#7>`)
    assert linked_share(every_kind) == {0: pytest.approx(200 / 500)}
    report = reduce_traceset(every_kind, links=True)[0].link_report
    assert list(report["check"]) == list(CHECKS)
    assert report["meaning"].str.len().min() > 10
    notes = attribute(every_kind, by="op").attrs["notes"]
    assert any("40.0%" in n for n in notes)       # the low linked share is said plainly
    # each level reports its own share: 200 of 500 ns launch inside a ProfilerStep, 200 have an op key
    steps = attribute(every_kind, by="step")
    assert steps.attrs["linked_share"] == {0: pytest.approx(200 / 500)}
    assert any("40.0% of device time has a ProfilerStep" in n for n in steps.attrs["notes"])


def test_render_tree_indents_and_folds_beyond_top_n(every_kind):
    text = render_tree(attribute(every_kind, by="module", tree=True), top_per_level=5)
    lines = text.splitlines()
    assert lines[0].startswith("rank 0 device 0: 500 ns")
    net = next(line for line in lines if line.endswith("  Net_0"))
    linear = next(line for line in lines if line.endswith("Linear_0"))
    assert linear.index("Linear_0") == net.index("Net_0") + 2          # one level deeper
    assert "180 ns" in net and "36.0%" in net
    folded = render_tree(attribute(every_kind, by="module", tree=True), top_per_level=1)
    assert "... 1 more" in folded and "<unattributed>" in folded and "Net_0" not in folded
    with pytest.raises(ValueError):
        render_tree(attribute(every_kind, by="op"))


# --- host-only traces -------------------------------------------------------------------------------

def test_host_only_attributes_exact_host_self_time():
    ts = make_traceset(
        [host("ProfilerStep#1", S.USER_ANNOTATION, 0, 1_000),
         host("nn.Module: Net_0", S.PYTHON_FUNCTION, 5, 900),
         op("aten::linear", 10, 110), op("aten::addmm", 20, 100), op("aten::t", 100, 105),
         op("aten::relu", 200, 250),
         op("aten::add", 0, 40, tid=2), op("aten::add", 50, 60, tid=2)], [])
    df = attribute(ts, by="op")
    assert df.attrs["time_kind"] == "host"
    assert dict(zip(df["key"], df[S.SELF_NS])) == {"aten::linear": 15, "aten::addmm": 80, "aten::t": 5,
                                                   "aten::relu": 50, "aten::add": 50}
    assert df.set_index("key").loc["aten::add", S.COUNT] == 2
    assert (df[S.DEVICE] == -1).all() and (df[S.SOLO_NS] == -1).all()
    assert df.attrs["totals"] == {(0, -1): 100 + 50 + 50}
    folded = attribute(ts, by="op", top=2)       # <other> sums self time, and solo stays "not applicable"
    assert folded[S.SELF_NS].sum() == 200 and (folded[S.SOLO_NS] == -1).all() and len(folded) == 3
    modules = attribute(ts, by="module")
    assert dict(zip(modules["key"], modules[S.SELF_NS])) == {"Net_0": 150, UNATTRIBUTED: 50}
    assert linked_share(ts) == {0: 1.0}          # a host table's share is of host time: each op its own key


# --- conservation as a property ---------------------------------------------------------------------

@st.composite
def random_traces(draw):
    """Random ranks/windows/devices/streams; kernels with random (possibly dangling, duplicate or
    missing) correlations; host ops nested on two threads, some overlapping; modules; steps."""
    host_rows, device_rows = [], []
    for rank in range(draw(st.integers(1, 2))):
        for window in range(draw(st.integers(1, 2))):
            where = dict(rank=rank, window=window)
            host_rows.append(host("ProfilerStep#1", S.USER_ANNOTATION, 0, 500, **where))
            host_rows.append(host("nn.Module: M_0", S.PYTHON_FUNCTION, 0, 300, **where))
            for i in range(draw(st.integers(0, 6))):
                start = draw(st.integers(0, 900))
                length = draw(st.integers(0, 200))
                tid = draw(st.integers(1, 2))
                host_rows.append(op(f"aten::op{i % 3}", start, start + length, tid=tid, seq=i, **where))
                host_rows.append(launch(start + length // 2, corr=i, tid=tid, **where))
            for _ in range(draw(st.integers(1, 8))):
                start = draw(st.integers(0, 1_000))
                device_rows.append(kernel(start, start + draw(st.integers(0, 300)), draw(st.integers(-1, 7)),
                                          device=draw(st.integers(0, 1)), stream=draw(st.integers(7, 9)), **where))
    return make_traceset(host_rows, device_rows)


# ~0.5 s CPU an example (19 engine calls: every level, folded and as a tree): 10 a run, new ones each run
# (not derandomized), so runs add up to more; the planted real and builder traces below cover every level too
@settings(max_examples=10, deadline=None)
@given(random_traces())
def test_every_table_sums_to_busy_per_rank_and_device(ts):
    busy = busy_by_device(ts)
    for by in LEVELS:
        check_conservation(attribute(ts, by=by), busy)
        folded = attribute(ts, by=by, top=1)          # --top folds the rest into <other>: still adds up
        check_conservation(folded, busy)
        assert (folded.groupby([S.RANK, S.DEVICE]).size() <= 2).all()
        if by in TREE_LEVELS:
            check_conservation(attribute(ts, by=by, tree=True), busy, tree=True)
    shares = linked_share(ts)
    assert all(0.0 <= v <= 1.0 for v in shares.values() if not math.isnan(v))


# --- real traces -------------------------------------------------------------------------------------

# Linked share floors, from the files (measured: trace_filter 99.89%, control 98.03%, test 93.91% with
# 614 dangling correlations, every other GPU trace 100%).
GPU_TRACES = {
    "trace_filter": 0.998, "trace_diff/control": 0.98, "trace_diff/test": 0.939, "nccl_parser_config": 1.0,
    "amd_trace": 1.0, "ns_resolution_trace": 1.0, "critical_path/alexnet": 1.0, "critical_path/simple_add": 1.0,
}
STEPS = {"trace_filter": ["ProfilerStep#551", "ProfilerStep#552"],
         "trace_diff/control": [f"ProfilerStep#{n}" for n in range(1009, 1015)],
         "trace_diff/test": [f"ProfilerStep#{n}" for n in range(1009, 1015)],
         "nccl_parser_config": ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"],
         "amd_trace": ["ProfilerStep#1"],
         "ns_resolution_trace": [f"ProfilerStep#{n}" for n in range(101, 106)],
         "critical_path/alexnet": [], "critical_path/simple_add": []}


@pytest.mark.parametrize("name", sorted(GPU_TRACES))
def test_real_gpu_traces_conserve_link_and_split_by_step(shared_traces, name):
    ts = traceattr.load(shared_traces / name)
    busy = busy_by_device(ts)
    for by in LEVELS:
        df = attribute(ts, by=by)
        check_conservation(df, busy)
    shares = linked_share(ts)
    assert min(shares.values()) >= GPU_TRACES[name] - 1e-4
    steps = attribute(ts, by="step")
    for rank, mine in steps.groupby(S.RANK):
        keys = list(mine["key"])
        present = [k for k in keys if k not in (UNATTRIBUTED, "<carried in>")]
        assert present == STEPS[name]
        assert len(keys) == len(set(keys))                 # one row per step (one device per rank here)


# share of host self time that reaches a module only through the backward Sequence number (measured
# 73.9% and 27.0%; in dist2 half the time is gloo all-reduce work outside every module)
@pytest.mark.parametrize("name, inferred_floor", [("torch213_cpu/single_json", 0.7), ("torch213_cpu/dist2", 0.25)])
def test_real_cpu_traces_give_host_self_time_per_op_module_and_step(shared_traces, name, inferred_floor):
    ts = traceattr.load(shared_traces / name)
    ops = attribute(ts, by="op")
    assert ops.attrs["time_kind"] == "host" and len(ops) > 10
    assert (ops[S.SELF_NS] >= 0).all() and (ops[S.SELF_NS] <= ops[S.DURATION_NS]).all()
    for by in LEVELS:
        df = attribute(ts, by=by)
        assert df.attrs["totals"] == ops.attrs["totals"]
        check_conservation(df, {k: v for k, v in ops.attrs["totals"].items()})
    steps = attribute(ts, by="step")
    assert sorted(set(steps["key"]) - {UNATTRIBUTED}) == ["ProfilerStep#2", "ProfilerStep#3"]
    modules = attribute(ts, by="module", tree=True)
    assert "Net_0" in set(modules["key"])
    # backward time reaches the modules through the Sequence number
    assert modules["inferred_self_ns"].sum() > inferred_floor * modules[S.SELF_NS].sum()


def test_attribute_time_on_the_largest_real_trace(shared_traces):
    ts = traceattr.load(shared_traces / "trace_diff/control")
    started = time.perf_counter()
    for by in LEVELS:
        attribute(ts, by=by)
    elapsed = time.perf_counter() - started
    assert elapsed < 10.0          # measured about 0.3 s for all five levels, links included


# --- the CLI options that show attribution (real subprocesses) -------------------------------------

def run_cli(*args):
    return clirun.run_cli("summarize", *args)       # in this process: a process's exit code and output


@pytest.fixture(scope="module")
def built_folder(tmp_path_factory):
    from traceattr.builder.spec import TraceSpec
    from traceattr.builder.writer import write_trace_set
    folder = tmp_path_factory.mktemp("cli")
    write_trace_set(folder, TraceSpec(ranks=1, steps=2, seed=5))
    return folder


def test_cli_tree_links_and_linked_share_header(built_folder):
    tree = run_cli(built_folder, "--by", "module", "--tree", "--top", "2")
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert any("linked share: 0: " in line for line in lines)        # in the header box, as above tables
    model = next(line for line in lines if line.endswith("  Model_0"))
    child = next(line for line in lines if "  Model_0" not in line and line.rstrip().endswith(("_0", "_1", "_2", "_3"))
                 and line.index(line.split()[-1]) > model.index("Model_0"))
    assert child.index(child.split()[-1]) == model.index("Model_0") + 2
    links = run_cli(built_folder, "--links", "--format", "csv")
    assert links.returncode == 0, links.stderr
    report = pd.read_csv(__import__("io").StringIO(links.stdout), comment="#")
    assert set(CHECKS) <= set(report["check"])
    bad = run_cli(built_folder, "--by", "step", "--tree")
    assert bad.returncode == 2 and bad.stderr.startswith("traceattr: error:") and len(bad.stderr.splitlines()) == 1


def test_step_names_repeated_over_windows_of_a_rank_are_named_in_a_note(tmp_path):
    """A process that profiled twice (torch numbers each profiler object's steps from the same N) gave
    `--by step` rows summing two different steps per name without a word, while compare keeps them apart;
    the table now says so, on a TraceSet and on the files alike. One window per rank: no note."""
    from traceattr.builder import TraceSpec, write_trace, write_trace_set
    from traceattr.builder.spec import DEFAULT_BASE_NS, QUARTER_YEAR_S

    for window in range(2):
        spec = TraceSpec(ranks=1, steps=3, streams=(7,), dropped_records=0, seed=7 + window,
                         base_time_ns=DEFAULT_BASE_NS + window * QUARTER_YEAR_S * 1_000_000_000)
        write_trace(tmp_path / "twice" / f"w{window}_rank0.pt.trace.json", spec, 0)
    write_trace_set(tmp_path / "once", TraceSpec(ranks=2, steps=3, streams=(7,), dropped_records=0, seed=7))
    for folder, repeated in (("twice", True), ("once", False)):
        on_files = traceattr.attribute(str(tmp_path / folder), by="step", cache=False, jobs=1)
        on_set = traceattr.attribute(traceattr.load(tmp_path / folder, cache=False), by="step")
        assert on_files.attrs["notes"] == on_set.attrs["notes"]
        noted = [n for n in on_set.attrs["notes"] if "more than one profiling window" in n]
        assert bool(noted) == repeated, on_set.attrs["notes"]
    assert noted == [] and "ProfilerStep#1, ProfilerStep#2, ProfilerStep#3 appear" in " ".join(
        traceattr.attribute(str(tmp_path / "twice"), by="step", cache=False, jobs=1).attrs["notes"])


def test_the_other_row_of_a_folded_table_has_its_percentage_computed_not_summed():
    """--top N: <other>'s self_pct was the float sum of the folded rows' (60.7034668104086 where every
    other row's rule, 100 * self / total, gives 60.70346681040859)."""
    import traceattr
    from traceattr.analysis.fold import OTHER

    ts = traceattr.load("sample_traces/synthetic_2rank", progress=False)
    for table, label in ((traceattr.summarize(ts, by="kernel", top=3), S.NAME),
                         (attribute(ts, by="op", top=2), "key")):
        other = table[table[label] == OTHER]
        whole = table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].transform("sum")[other.index]
        assert len(other) == 2
        assert other[S.SELF_PCT].tolist() == (100.0 * other[S.SELF_NS] / whole).tolist()


def test_module_class_groups_instances_by_class_and_adds_up(tmp_path):
    """`Model_0/Linear_0` and `Model_0/Linear_2` are one class path `Model/Linear` with 2 instances; the
    table regroups the module table's exact rows (Σ self == busy per device) over ranks, in summarize and
    in compare."""
    import json

    import traceattr
    from traceattr.analysis.attribute import INSTANCES, class_path
    from traceattr.builder import TraceSpec, write_trace_set

    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, steps=2, layers=4,
                                                 module_classes=("Linear", "LayerNorm", "Linear", "ReLU")))
    ts = traceattr.load(tmp_path, cache=False, jobs=1)
    classes = attribute(ts, by="module_class")
    modules = attribute(ts, by="module")
    check_conservation(classes, busy_by_device(ts))
    assert int(classes[S.SELF_NS].sum()) == sum(t.busy_ns for t in truths.values())
    for rank, truth in truths.items():
        planted: dict[str, set] = {}
        for path in truth.activities["module"]:
            if path:
                planted.setdefault(class_path(path), set()).add(path)
        mine = classes[classes[S.RANK] == rank].set_index("key")
        assert {k: int(v) for k, v in mine[INSTANCES].items() if k != UNATTRIBUTED} == \
            {k: len(v) for k, v in planted.items()}
        assert {len(v) for k, v in planted.items() if k.endswith("/Linear")} == {2}
        theirs = modules[modules[S.RANK] == rank]
        expected = theirs.groupby(theirs["key"].map(class_path))[S.SELF_NS].sum()
        assert mine[S.SELF_NS].to_dict() == {k: int(v) for k, v in expected.items()}
    out = run_cli(tmp_path, "--by", "module_class", "--format", "json", "--no-cache")
    assert out.returncode == 0, out.stderr
    rows = {row["key"]: row for row in json.loads(out.stdout)}
    assert rows["Model/Linear"][INSTANCES] == 4 and rows["Model/Linear"]["ranks"] == 2    # 2 per rank
    assert sum(row[S.SELF_NS] for row in rows.values()) == sum(t.busy_ns for t in truths.values())
    diff = clirun.run_cli("compare", tmp_path, tmp_path, "--by", "module_class", "--format", "json")
    assert diff.returncode == 0, diff.stderr
    keys = {row["key"] for row in json.loads(diff.stdout)}
    assert "Model/Linear" in keys and not any("_0" in key for key in keys)
