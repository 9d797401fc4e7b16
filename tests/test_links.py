"""Links from device activities to runtime calls, ops, modules, annotations and steps: known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceattr
from traceattr import schema as S
from traceattr.attribution.hosttree import build_host_tree
from traceattr.attribution.links import (
    CHECKS, GRAPH_LAUNCH, LINKED, NO_CORRELATION, NO_OP, NO_OP_THREAD, NO_RUNTIME, link, profiler_step_names,
)
from traceattr.builder.spec import TraceSpec
from traceattr.builder.writer import write_trace_set
from traceattr.model.traceset import TraceSet

# --- building TraceSets from rows --------------------------------------------------------------


def host(name, category, start, end, *, tid=1, pid=1, rank=0, window=0, corr=-1, seq=-1, fwd=-1):
    return {S.RANK: rank, S.WINDOW: window, S.PID: pid, S.TID: tid, S.NAME: name, S.CATEGORY: category,
            S.START_NS: start, S.END_NS: end, S.CORRELATION: corr, S.EXTERNAL_ID: -1,
            S.SEQUENCE_NUMBER: seq, S.FWD_THREAD_ID: fwd, S.PYTHON_ID: -1, S.PYTHON_PARENT_ID: -1,
            S.PYTHON_MODULE_ID: -1}


def op(name, start, end, **kw):
    return host(name, S.CPU_OP, start, end, **kw)


def launch(start, corr, name="cudaLaunchKernel", category=S.CUDA_RUNTIME, **kw):
    return host(name, category, start, start + 5, corr=corr, **kw)


def kernel(start, end, corr, *, stream=7, device=0, rank=0, window=0, name="k", category=S.COMPUTE):
    return {S.RANK: rank, S.WINDOW: window, S.DEVICE: device, S.STREAM: stream, S.NAME: name,
            S.CATEGORY: category, S.START_NS: start, S.END_NS: end, S.CORRELATION: corr,
            S.EXTERNAL_ID: -1, S.BYTES: -1, S.COLLECTIVE: ""}


def make_traceset(host_rows, device_rows) -> TraceSet:
    spans = {}
    for row in host_rows + device_rows:
        key = (row[S.RANK], row[S.WINDOW])
        lo, hi = spans.get(key, (row[S.START_NS], row[S.END_NS]))
        spans[key] = (min(lo, row[S.START_NS]), max(hi, row[S.END_NS]))
    files = pa.Table.from_pylist([
        {S.RANK: r, S.WINDOW: w, S.PATH: f"rank{r}.{w}.json", S.WORLD_SIZE: -1, S.RANK_SOURCE: S.RANK_FROM_NAME,
         S.ERA: S.ERA_C, S.BASE_TIME_NS: 0, S.START_NS: lo, S.END_NS: hi, S.EVENTS: 0,
         S.NEGATIVE_DURATIONS: 0, S.ABSURD_DURATIONS: 0, S.DEVICE_PROPERTIES: "[]", S.METADATA: "{}"}
        for (r, w), (lo, hi) in sorted(spans.items())], schema=S.FILE_SCHEMA)
    return TraceSet(pa.Table.from_pylist(device_rows, schema=S.DEVICE_SCHEMA),
                    pa.Table.from_pylist(host_rows, schema=S.HOST_SCHEMA), S.MARKER_SCHEMA.empty_table(), files)


def described(ts: TraceSet) -> list[dict]:
    """Every device row's links as plain strings."""
    links = link(ts)
    rows = []
    for i in range(ts.device.num_rows):
        op_code = links.op_code[i]
        rows.append({
            "status": int(links.status[i]),
            "op": links.host_names[op_code] if op_code >= 0 else "",
            "op_stack": links.op_stacks.string(links.op_stack[i]),
            "module": links.modules.string(links.module[i]),
            "inferred": bool(links.module_inferred[i]),
            "annotation": links.annotations.string(links.annotation[i]),
            "step": links.step_names[links.step[i]] if links.step[i] >= 0 else "",
        })
    return rows


def report_of(ts: TraceSet, rank=0, window=0) -> dict[str, tuple[int, int]]:
    report = link(ts).report
    mine = report[(report[S.RANK] == rank) & (report[S.WINDOW] == window)]
    return {c: (int(n), int(ns)) for c, n, ns in zip(mine["check"], mine[S.COUNT], mine["ns"])}


# --- one trace with every link kind ------------------------------------------------------------

MAIN, AUTOGRAD, SIDE = 1, 2, 3
EVERY_KIND_HOST = [
    host("ProfilerStep#7", S.USER_ANNOTATION, 0, 1_000),
    host("my_forward", S.USER_ANNOTATION, 5, 600),
    host("nn.Module: Net_0", S.PYTHON_FUNCTION, 10, 500),
    host("nn.Module: Linear_0", S.PYTHON_FUNCTION, 20, 200),
    op("aten::linear", 30, 190, seq=5),
    op("aten::addmm", 40, 180, seq=5),
    launch(50, corr=1),
    launch(60, corr=6),
    op("aten::relu", 250, 300, seq=6),                    # inside Net_0 but outside Linear_0
    launch(260, corr=7),
    launch(900, corr=4, name="cudaGraphLaunch"),          # inside the step, outside every op
    # backward on the autograd thread: no step range there, the step comes from time
    op("autograd::engine::evaluate_function: AddmmBackward0", 700, 800, tid=AUTOGRAD, seq=5, fwd=1),
    op("AddmmBackward0", 705, 795, tid=AUTOGRAD, seq=5, fwd=1),
    op("aten::mm", 710, 790, tid=AUTOGRAD),
    launch(720, corr=2, tid=AUTOGRAD),
    launch(1_500, corr=3, tid=SIDE),                      # a thread with no cpu ops at all
]
EVERY_KIND_DEVICE = [
    kernel(100, 150, 1),                 # 0: nested op in module, annotation and step
    kernel(800, 900, 2),                 # 1: backward kernel: forward module inferred
    kernel(1_600, 1_700, 3),             # 2: launched from a thread without ops
    kernel(2_000, 2_100, 99),            # 3: dangling correlation
    kernel(2_200, 2_300, -1),            # 4: no correlation
    kernel(950, 960, 4),                 # 5, 6: one graph launch owns two kernels on two streams
    kernel(955, 970, 4, stream=9),
    kernel(160, 170, 6),                 # 7: second kernel of aten::addmm (via another launch)
    kernel(310, 330, 7),                 # 8: relu in Net_0 only
]


@pytest.fixture(scope="module")
def every_kind() -> TraceSet:
    return make_traceset(EVERY_KIND_HOST, EVERY_KIND_DEVICE)


def test_every_link_kind_has_its_known_answer(every_kind):
    rows = described(every_kind)
    assert rows[0] == dict(status=LINKED, op="aten::addmm", op_stack="aten::linear > aten::addmm",
                           module="Net_0/Linear_0", inferred=False, annotation="my_forward", step="ProfilerStep#7")
    assert rows[7] == rows[0]
    assert rows[8] == dict(status=LINKED, op="aten::relu", op_stack="aten::relu", module="Net_0",
                           inferred=False, annotation="my_forward", step="ProfilerStep#7")
    assert rows[1] == dict(
        status=LINKED, op="aten::mm",
        op_stack="autograd::engine::evaluate_function: AddmmBackward0 > AddmmBackward0 > aten::mm",
        module="Net_0/Linear_0", inferred=True, annotation="", step="ProfilerStep#7")
    assert rows[2]["status"] == NO_OP_THREAD and rows[2]["op"] == "" and rows[2]["step"] == ""
    assert rows[3]["status"] == NO_RUNTIME and rows[3]["step"] == ""
    assert rows[4]["status"] == NO_CORRELATION
    for graph_kernel in rows[5:7]:     # no capture trace: attributed to the launch's innermost range
        assert graph_kernel == dict(status=GRAPH_LAUNCH, op="<graph replay: ProfilerStep#7>",
                                    op_stack="<graph replay: ProfilerStep#7>", module="", inferred=False,
                                    annotation="", step="ProfilerStep#7")


def test_link_rows_point_at_the_right_host_rows(every_kind):
    links = link(every_kind)
    names = every_kind.host.column(S.NAME).to_pylist()
    correlation = every_kind.host.column(S.CORRELATION).to_pylist()
    assert [correlation[r] for r in links.runtime_row[:3]] == [1, 2, 3]
    assert names[links.op_row[0]] == "aten::addmm" and names[links.op_row[1]] == "aten::mm"
    assert links.runtime_row[5] == links.runtime_row[6] >= 0          # one graph launch, two kernels
    assert links.runtime_row[3] == links.runtime_row[4] == -1
    assert links.op_row[2] == links.op_row[5] == -1


def test_link_report_counts_every_problem_with_its_ns(every_kind):
    report = report_of(every_kind)
    assert list(link(every_kind).report["check"].unique()) == list(CHECKS)
    assert report["device_activities"][0] == 9
    assert report["linked"][0] == 4
    assert report["no_correlation"] == (1, 100)
    assert report["dangling_correlation"] == (1, 100)
    assert report["thread_without_ops"] == (1, 100)
    assert report["no_enclosing_op"] == (0, 0)       # the graph launch's kernels are graph kernels
    # the two graph kernels overlap for 5 ns: their self time is the union [950, 970), not 10 + 15
    assert report["graph_kernels"] == report["graph_no_capture"] == (2, 20)
    assert report["graph_launches"] == (1, 0)
    assert report["no_step"] == (1, 100)                 # only the side-thread launch is outside the step
    assert report["module_inferred"] == (1, 100)
    assert report["profiler_steps"] == (1, 0)
    assert report["duplicate_correlation"] == (0, 0)
    assert report["overlapping_ops"] == (0, 0)
    assert sum(report[c][1] for c in ("linked", "no_correlation", "dangling_correlation", "no_enclosing_op",
                                      "thread_without_ops", "graph_kernels")) == report["device_activities"][1]


def test_duplicate_correlations_are_counted_and_the_earliest_record_wins():
    ts = make_traceset(
        [op("aten::first", 0, 100), launch(10, corr=5), op("aten::second", 200, 300), launch(210, corr=5)],
        [kernel(400, 450, 5)])
    assert described(ts)[0]["op"] == "aten::first"
    assert report_of(ts)["duplicate_correlation"] == (1, 50)


def test_correlations_match_only_within_the_same_rank_and_window():
    ts = make_traceset(
        [op("aten::r0", 0, 100, rank=0), launch(10, corr=5, rank=0),
         op("aten::r1", 0, 100, rank=1), launch(10, corr=5, rank=1),
         op("aten::r1w1", 0, 100, rank=1, window=1), launch(10, corr=5, rank=1, window=1)],
        [kernel(200, 300, 5, rank=1), kernel(200, 300, 5, rank=0), kernel(200, 300, 5, rank=1, window=1),
         kernel(300, 400, 6, rank=0)])
    assert [r["op"] for r in described(ts)] == ["aten::r1", "aten::r0", "aten::r1w1", ""]
    assert report_of(ts, rank=0)["dangling_correlation"] == (1, 100)
    assert report_of(ts, rank=1, window=1)["linked"] == (1, 100)


def test_rocm_and_other_backend_runtime_categories_link():
    ts = make_traceset(
        [op("aten::add", 0, 100), launch(10, corr=1, name="hipLaunchKernel"),
         launch(20, corr=2, name="cuLaunchKernel", category=S.CUDA_DRIVER),
         launch(30, corr=3, name="xpuLaunch", category="xpu_runtime")],
        [kernel(200, 210, 1), kernel(210, 220, 2), kernel(220, 230, 3)])
    assert [r["op"] for r in described(ts)] == ["aten::add"] * 3


def test_overlapping_ops_are_counted_and_nested_by_cutting_one_end():
    # aten::outlives overhangs its frame by 2 ns: clipped. my_range starts inside a 10 ns python frame
    # and runs 1000 ns past it (record_function entered under `with_stack=True`): the frame is cut.
    ts = make_traceset(
        [host("nn.Module: Block_0", S.PYTHON_FUNCTION, 0, 100),
         op("aten::outlives", 50, 102), launch(60, corr=1), launch(101, corr=2),
         host("profiler.py(918): __enter__", S.PYTHON_FUNCTION, 200, 210),
         host("my_range", S.USER_ANNOTATION, 205, 1_210),
         op("aten::inside", 300, 400), launch(310, corr=3)],
        [kernel(1_300, 1_310, 1), kernel(1_310, 1_320, 2), kernel(1_320, 1_330, 3)])
    rows = described(ts)
    assert rows[0]["op"] == "aten::outlives" and rows[0]["module"] == "Block_0"
    assert rows[1]["op"] == "" and rows[1]["status"] == NO_OP      # past the clipped end
    assert rows[2]["annotation"] == "my_range" and rows[2]["op"] == "aten::inside"
    assert report_of(ts)["overlapping_ops"] == (2, 2 + 5)


def test_backward_without_unique_forward_is_counted_not_guessed():
    # the same sequence number on two forward threads: ambiguous, so the module is not inferred
    ts = make_traceset(
        [host("nn.Module: A_0", S.PYTHON_FUNCTION, 0, 100, tid=1), op("aten::mul", 10, 90, tid=1, seq=3),
         host("nn.Module: B_0", S.PYTHON_FUNCTION, 0, 100, tid=4), op("aten::mul", 10, 90, tid=4, seq=3),
         op("autograd::engine::evaluate_function: MulBackward0", 200, 300, tid=2, seq=3, fwd=1),
         launch(210, corr=1, tid=2),
         op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 400, 500, tid=2),
         launch(410, corr=2, tid=2)],
        [kernel(600, 700, 1), kernel(700, 750, 2)])
    rows = described(ts)
    assert rows[0]["module"] == "" and not rows[0]["inferred"]
    assert report_of(ts)["backward_unmatched"] == (1, 100)     # AccumulateGrad has no forward op
    assert report_of(ts)["module_inferred"] == (0, 0)


def test_steps_are_matched_by_category_and_name_and_by_launch_time():
    ts = make_traceset(
        [host("ProfilerStep#2", S.USER_ANNOTATION, 0, 100), host("ProfilerStep#10", S.USER_ANNOTATION, 100, 200),
         host("ProfilerStep#3", S.CPU_OP, 200, 300),          # wrong category: not a step
         op("aten::a", 50, 60), launch(55, corr=1), op("aten::b", 150, 160), launch(155, corr=2),
         op("aten::c", 250, 260), launch(255, corr=3)],
        [kernel(150, 400, 1), kernel(400, 500, 2), kernel(500, 600, 3)])   # the device runs behind
    assert profiler_step_names(ts) == ("ProfilerStep#2", "ProfilerStep#10")   # without linking: the same
    links = link(ts)
    assert links.step_names == ("ProfilerStep#2", "ProfilerStep#10")      # step number order
    assert [r["step"] for r in described(ts)] == ["ProfilerStep#2", "ProfilerStep#10", ""]


def test_a_launch_at_a_steps_end_is_not_in_that_step(tmp_path):
    """Steps are half-open [start, end): a launch exactly at a ProfilerStep's end is outside it (in no step
    after a last step or in a gap; in the enclosing step when the ended one was nested), one at its start is
    inside. A hand-written Kineto file in integer µs (era A), loaded as users load it."""
    import json

    pid = 4242

    def x(cat, name, ts, dur, tid=pid, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid if cat != "kernel" else 0, "tid": tid,
                "ts": ts, "dur": dur, "args": args}

    steps = [x("user_annotation", "ProfilerStep#1", 1000, 100),     # [1000, 1100), then a gap
             x("user_annotation", "ProfilerStep#2", 1200, 100),     # [1200, 1300)
             x("user_annotation", "ProfilerStep#3", 2000, 300),     # [2000, 2300), the last step
             x("user_annotation", "ProfilerStep#4", 2100, 100)]     # [2100, 2200), nested in #3
    launches = {1099: "ProfilerStep#1",     # inside, 1 µs before the end
                1100: "",                   # at #1's end, in the gap before #2
                1200: "ProfilerStep#2",     # at #2's start: inside
                1300: "",                   # at #2's end
                2200: "ProfilerStep#3",     # at the nested #4's end: still inside #3
                2300: ""}                   # at the last step's end
    events = list(steps)
    for corr, (ts, _) in enumerate(launches.items(), start=1):
        events += [x("cpu_op", "aten::mm", ts, 1),                 # ends by 1100: never straddles a step
                   x("cuda_runtime", "cudaLaunchKernel", ts, 0, correlation=corr),
                   x("kernel", f"k{corr}", 3000 + 100 * corr, 50, tid=7, device=0, stream=7, correlation=corr)]
    (tmp_path / "rank0.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))

    ts = traceattr.load(tmp_path, cache=False, jobs=1)
    assert ts.device.column(S.NAME).to_pylist() == [f"k{c}" for c in range(1, 7)]
    rows = described(ts)
    assert [r["status"] for r in rows] == [LINKED] * 6 and [r["op"] for r in rows] == ["aten::mm"] * 6
    assert [r["step"] for r in rows] == list(launches.values())
    assert report_of(ts)["no_step"] == (3, 150_000)


def test_a_trace_without_steps_reports_zero_steps():
    ts = make_traceset([op("aten::a", 0, 10), launch(5, corr=1)], [kernel(20, 30, 1)])
    assert report_of(ts)["profiler_steps"] == (0, 0)
    assert report_of(ts)["no_step"] == (1, 10)


def test_links_are_cached_per_traceset(every_kind):
    assert link(every_kind) is link(every_kind)


# --- the containment tree against a brute force -------------------------------------------------

@st.composite
def nested_threads(draw):
    """Properly nested ranges on a few threads (drawn as random trees) plus random probe points."""
    rows = []
    for tid in range(draw(st.integers(1, 3))):
        def grow(lo, hi, depth):
            t = lo
            while t < hi and depth < 5 and draw(st.booleans()):
                start = draw(st.integers(t, hi))
                end = draw(st.integers(start, hi))
                rows.append(op(f"op{len(rows)}", start, end, tid=tid))
                grow(start, end, depth + 1)
                t = end if end > start else end + 1
        grow(0, 200, 0)
        for _ in range(draw(st.integers(0, 6))):
            rows.append(launch(draw(st.integers(0, 200)), corr=len(rows), tid=tid))
    return rows


@settings(max_examples=60, deadline=None)
@given(nested_threads())
def test_tree_parent_is_the_innermost_enclosing_range(rows):
    table = pa.Table.from_pylist(rows, schema=S.HOST_SCHEMA)
    tree = build_host_tree(table)
    assert not tree.clipped_ns.any()                        # nested input needs no cut
    node_of_row = {int(r): i for i, r in enumerate(tree.host_row)}
    for i, row in enumerate(rows):
        is_probe = row[S.CATEGORY] == S.CUDA_RUNTIME
        t0, t1 = row[S.START_NS], (row[S.START_NS] if is_probe else row[S.END_NS])
        # enclosing candidates: ranges on the thread that contain [t0, t1] (half-open for points),
        # earlier in (start, longer first, row) order; the innermost is the last of them
        candidates = []
        for j, other in enumerate(rows):
            if j == i or other[S.TID] != row[S.TID] or other[S.CATEGORY] != S.CPU_OP:
                continue
            s, e = other[S.START_NS], other[S.END_NS]
            before = (s, -(e - s), j) < (t0, -(t1 - t0), i)
            zero_width_point = t0 == t1
            inside = s <= t0 and (t1 < e if zero_width_point else t1 <= e) and before
            if zero_width_point and not is_probe and s == t0 and e == t1:
                inside = False                          # a zero-length range encloses nothing
            if inside:
                candidates.append((s, -(e - s), j))
        expected = max(candidates)[2] if candidates else -1
        parent = tree.parent[node_of_row[i]]
        assert (int(tree.host_row[parent]) if parent >= 0 else -1) == expected


# --- builder-made traces: every link against the builder's truth ---------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("built")
    truths = write_trace_set(folder, TraceSpec(ranks=2, steps=3, seed=3))
    return traceattr.load(folder), truths


def test_builder_traces_link_exactly_as_built(built):
    ts, truths = built
    frame = ts.device.to_pandas()
    mine = pd.DataFrame(described(ts))
    mine["op_stack"] = [tuple(s.split(" > ")) if s else () for s in mine["op_stack"]]
    frame = pd.concat([frame, mine], axis=1)
    for rank, truth in truths.items():
        expected = pd.DataFrame(truth.activities)
        got = frame[frame[S.RANK] == rank]
        merged = expected.merge(got, on=[S.DEVICE, S.STREAM, S.START_NS, S.END_NS, S.CORRELATION],
                                suffixes=("_truth", ""))
        assert len(merged) == len(expected) == len(got)
        for level in ("op", "op_stack", "module", "annotation", "step"):
            assert (merged[f"{level}_truth"] == merged[level]).all(), level
        # graph launches (no capture trace: attributed to the launch) and dropped runtime records are built
        assert set(merged.loc[merged["status"] == GRAPH_LAUNCH, "launch"]) == {"cudaGraphLaunch"}
        assert set(merged.loc[merged["status"] == NO_RUNTIME, "launch"]) == {""}
        assert (merged["inferred"] == (merged["module"] != "") & merged["op_stack"].map(
            lambda s: bool(s) and s[0].startswith("autograd::engine"))).all()


def test_step_names_without_linking_are_the_links_step_names(shared_traces):
    """profiler_step_names reads the host table alone; link() finds steps among the host tree's nodes."""
    for name in ("nccl_parser_config", "torch213_cpu/dist2", "trace_filter", "amd_trace"):
        ts = traceattr.load(shared_traces / name)
        names = profiler_step_names(ts)
        assert names == link(ts).step_names and names, name


def test_real_trace_links_are_vectorized_and_report_every_check(shared_traces):
    ts = traceattr.load(shared_traces / "nccl_parser_config")
    links = link(ts)
    assert len(links.status) == ts.device.num_rows
    assert (links.status == LINKED).all()        # every kernel of this trace has its launching op
    report = links.report
    assert set(report["check"]) == set(CHECKS)
    steps = report[report["check"] == "profiler_steps"][S.COUNT].sum()
    assert steps == 3
    assert np.isin(links.op_row[links.op_row >= 0], np.flatnonzero(
        np.asarray(ts.host.column(S.CATEGORY).to_pylist()) == S.CPU_OP)).all()


def test_steps_come_from_the_launching_process_only():
    # pid 2 holds a trace-long ProfilerStep on the same thread id as the launching thread of pid 1
    ts = make_traceset(
        [host("ProfilerStep#1", S.USER_ANNOTATION, 0, 100, pid=1),
         host("ProfilerStep#9", S.USER_ANNOTATION, 0, 10_000, pid=2),
         op("aten::a", 50, 60, pid=1), launch(55, corr=1, pid=1),
         op("aten::b", 500, 600, pid=1), launch(550, corr=2, pid=1),       # outside pid 1's step
         op("aten::c", 700, 800, pid=2), launch(750, corr=3, pid=2)],
        [kernel(100, 200, 1), kernel(600, 700, 2), kernel(800, 900, 3)])
    assert [r["step"] for r in described(ts)] == ["ProfilerStep#1", "", "ProfilerStep#9"]
    assert report_of(ts)["no_step"] == (1, 100)


def test_nested_steps_resolve_to_the_innermost_containing_one():
    # #1 spans everything; #2 nests in it and ends before the second launch; #3 overlaps #1's end
    ts = make_traceset(
        [host("ProfilerStep#1", S.USER_ANNOTATION, 0, 1_000),
         host("ProfilerStep#2", S.USER_ANNOTATION, 100, 200),
         host("ProfilerStep#3", S.USER_ANNOTATION, 900, 2_000),
         op("aten::a", 150, 160), launch(150, corr=1),
         op("aten::b", 500, 510), launch(500, corr=2),       # after #2 ended, still inside #1
         op("aten::c", 950, 960), launch(950, corr=3),       # inside #1 and #3: #3 started last
         op("aten::d", 1_500, 1_510), launch(1_500, corr=4),
         op("aten::e", 2_500, 2_510), launch(2_500, corr=5)],
        [kernel(3_000, 3_100, c) if c == 5 else kernel(2_000 + 100 * c, 2_050 + 100 * c, c) for c in range(1, 6)])
    assert [r["step"] for r in described(ts)] == [
        "ProfilerStep#2", "ProfilerStep#1", "ProfilerStep#3", "ProfilerStep#3", ""]


def test_a_launch_under_another_threads_annotation_stays_unattributed_and_is_counted():
    """Annotations are per thread (kineto-format.md section 4; torch's own gpu_user_annotation agrees): on a
    real trace 67% of the time was <unattributed> beside a `## backward ##` of 115 µs, as autograd's thread
    launched the backward kernels. The table keeps the rule; the link report now says how much that is.
    A ProfilerStep, or another process's annotation, is not an annotation of this process."""
    rows = [
        host("ProfilerStep#1", S.USER_ANNOTATION, 0, 5_000),
        host("## backward ##", S.USER_ANNOTATION, 1_000, 2_000),
        op("autograd::engine::evaluate_function: MmBackward0", 1_100, 1_900, tid=AUTOGRAD),
        launch(1_120, corr=1, tid=AUTOGRAD),                    # under ## backward ## of the main thread
        op("aten::mm", 2_500, 2_600, tid=AUTOGRAD),
        launch(2_520, corr=2, tid=AUTOGRAD),                    # only the step is open
        host("other process", S.USER_ANNOTATION, 2_500, 2_700, pid=2),
        op("aten::mm", 1_300, 1_400),
        launch(1_320, corr=3),                                  # on the main thread: under ## backward ##
    ]
    ts = make_traceset(rows, [kernel(1_200, 1_900, 1), kernel(2_600, 2_650, 2), kernel(1_950, 1_990, 3)])
    assert [row["annotation"] for row in described(ts)] == ["", "", "## backward ##"]
    assert report_of(ts)["annotation_other_thread"] == (1, 700)
    table = traceattr.attribute(ts, by="annotation")
    assert dict(zip(table["key"], table[S.SELF_NS])) == {"<unattributed>": 750, "## backward ##": 40}
    assert any("autograd's thread" in note for note in table.attrs["notes"])


@pytest.mark.parametrize("inner_first", [True, False])
def test_of_two_steps_starting_together_the_shorter_is_the_innermost(inner_first):
    """The step was the one written last, not the shorter: ProfilerStep#9 written before #8 (same start)
    gave #8 both kernels."""
    outer = host("ProfilerStep#8", S.USER_ANNOTATION, 7_000, 8_000)
    inner = host("ProfilerStep#9", S.USER_ANNOTATION, 7_000, 7_500)
    rows = [inner, outer] if inner_first else [outer, inner]
    rows += [op("aten::mm", 7_050, 7_150), launch(7_100, corr=1), op("aten::mm", 7_600, 7_700), launch(7_650, corr=2)]
    ts = make_traceset(rows, [kernel(7_200, 7_290, 1), kernel(7_700, 7_810, 2)])
    assert [row["step"] for row in described(ts)] == ["ProfilerStep#9", "ProfilerStep#8"]
