"""CUDA/HIP graph replays attributed to their ops through a capture trace, or to their launch without one
(attribution/graphs.py, analysis/graph_capture.py, docs/inference.md): builder pairs with planted truth in
both layouts, hostile captures, and the public SGLang decode pair against TraceLens's own tables."""

from __future__ import annotations

import ast
import gzip
import io
import json
import re
import shutil

import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.builder.graphs import FALLBACK_OP, GraphPairSpec, build_graph_pair
from traceattr.io.store import CATALOG_KEY, MARKER, file_sha256, sealed_metadata

from clirun import run_cli
from conftest import shared_trace

UNATTRIBUTED = "<unattributed>"


def _uncached(path) -> dict:
    return {} if isinstance(path, traceattr.TraceSet) else {"cache": False}


def table(path, by: str, **options) -> pd.DataFrame:
    df = traceattr.attribute(path, by=by, **_uncached(path), **options)
    assert df[S.SELF_NS].sum() == sum(df.attrs["totals"].values())         # Σ self == busy, every table
    return df


def sums(df: pd.DataFrame) -> dict[str, int]:
    return {("" if key == UNATTRIBUTED else key): int(ns) for key, ns in zip(df["key"], df[S.SELF_NS])}


def busy(path) -> int:
    return int(traceattr.summarize(path, by="rank", **_uncached(path))[S.BUSY_NS].sum())


def _header_notes(path) -> list[str]:
    """The lines `summarize --by op` prints (its header and notes), whitespace made single."""
    done = run_cli("summarize", path, "--by", "op", "--no-cache", "-q", "--notes")
    assert done.returncode == 0, done.stderr
    return [" ".join(line.replace("│", " ").split()) for line in (done.stdout + done.stderr).splitlines()]


def link_report(*args) -> dict[str, tuple[int, int]]:
    done = run_cli("summarize", *args, "--links", "--format", "csv", "--no-cache", "-q")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    return {check: (int(count), int(ns)) for check, count, ns in zip(frame["check"], frame["count"], frame["ns"])}


# --- builder pairs: every level as planted -------------------------------------------------------------

@pytest.mark.parametrize("layout", ["full", "piecewise"])
@pytest.mark.parametrize("node_ids, kernel_names", [(False, True), (True, True), (False, False), (True, False)])
def test_replays_take_their_capture_launch_at_every_level(tmp_path, layout, node_ids, kernel_names):
    """One full graph per step, or a graph per layer with eager attention between; replayed at batch sizes
    5, 16, 30 and 8 of captures 8, 16, 32 (the GEMM's name differs at 8). With node ids the kernels run
    pairwise swapped in time: only the ids give the capture's order. A capture without kernel names
    (CUDA's cudaLaunchKernel) is matched by position."""
    truth = build_graph_pair(GraphPairSpec(layout=layout, node_ids=node_ids, kernel_names=kernel_names), tmp_path)
    for level in ("op", "op_stack", "module"):
        assert sums(table(tmp_path, level)) == truth.sums(level), level
    # steps and annotations go through the launch: every kernel lies in its ProfilerStep and step range
    steps = table(tmp_path, "step")
    assert UNATTRIBUTED not in set(steps["key"]) and len(steps) == len(GraphPairSpec().replay_batch_sizes)
    annotations = table(tmp_path, "annotation")
    assert all(key.startswith("step[DECODE bs=") for key in annotations["key"])
    # the captures are never windows: busy time is the replay's alone, and the truth's
    assert busy(tmp_path) == busy(tmp_path / "replay.json") == truth.busy_ns
    assert "files: 1 " in " ".join(_header_notes(tmp_path))
    rule = "graph_by_node_id" if node_ids else "graph_by_name_order" if kernel_names else "graph_by_position"
    report = link_report(tmp_path)
    graph_kernels = sum(1 for graph in truth.kernels["graph"] if graph)
    assert report[rule][0] == report["graph_kernels"][0] == graph_kernels
    assert report["graph_no_capture"][0] == report["no_enclosing_op"][0] == 0


def shape_truth(truth) -> dict[tuple, tuple[int, int]]:
    """(calls, Σ ns) per planted shape key: a call is one op call of a replayed graph, or one eager op."""
    out: dict[tuple, tuple[set, int]] = {}
    k = truth.kernels
    for shape, call, start, end in zip(k["shape"], k["call"], k["start_ns"], k["end_ns"]):
        calls, ns = out.get(shape, (set(), 0))
        out[shape] = (calls | {call}, ns + end - start)
    return {key: (len(calls), ns) for key, (calls, ns) in out.items()}


def shape_table(df: pd.DataFrame) -> dict[tuple, tuple[int, int]]:
    return {(key, dims, types, concrete): (int(count), int(ns)) for key, dims, types, concrete, count, ns in zip(
        df["key"], df[S.INPUT_DIMS], df[S.INPUT_TYPES], df[S.CONCRETE_INPUTS], df["count"], df[S.SELF_NS])}


@pytest.mark.parametrize("layout", ["full", "piecewise"])
@pytest.mark.parametrize("node_ids, kernel_names", [(False, True), (True, False)])
def test_replays_take_their_capture_ops_shapes(tmp_path, layout, node_ids, kernel_names):
    """Each replayed kernel counts for its capture launch's op call with that call's args (the dims of the
    captured batch size, not the replay's: a graph of 8 replayed at 5 runs the work of 8), once per replay;
    the GEMM's FLOPs are the capture's aten::mm's (its aten::linear parent has other dims)."""
    truth = build_graph_pair(GraphPairSpec(layout=layout, node_ids=node_ids, kernel_names=kernel_names), tmp_path)
    shapes = table(tmp_path, "shape")
    assert shape_table(shapes) == shape_truth(truth)
    gemm = shapes[shapes["key"] == "aten::mm"]
    dims = [json.loads(d) for d in gemm[S.INPUT_DIMS]]
    assert list(gemm["flops"]) == [2 * m * k * n for (m, k), (_, n) in dims] and len(gemm)
    # --by launch keeps every replayed kernel under its capture op too
    launches = table(tmp_path, "launch")
    assert UNATTRIBUTED not in set(launches["key"])


def test_replays_without_a_capture_count_per_launch_at_the_shape_level(tmp_path):
    truth = build_graph_pair(GraphPairSpec(layout="piecewise", capture=False), tmp_path)
    assert shape_table(table(tmp_path, "shape")) == shape_truth(truth)


def test_without_a_capture_replays_go_to_their_launch(tmp_path):
    truth = build_graph_pair(GraphPairSpec(layout="piecewise", capture=False), tmp_path)
    op = table(tmp_path, "op")
    assert sums(op) == truth.sums("op") and FALLBACK_OP in set(op["key"])
    assert "have no capture trace" in " ".join(_header_notes(tmp_path))
    assert sums(table(tmp_path, "op_stack")) == truth.sums("op_stack")
    assert UNATTRIBUTED not in set(table(tmp_path, "step")["key"])
    report = link_report(tmp_path)
    assert report["graph_launches"][0] == 4 * 4       # a launch per layer, four steps
    assert report["graph_no_capture"][0] == report["graph_kernels"][0] > 0
    done = run_cli("summarize", tmp_path, "--links", "--no-cache", "-q")
    assert "16 x cudaGraphLaunch under graphs.py(139): replay" in " ".join(done.stdout.replace("│", " ").split())


# --- every way in agrees: load() and convert never take a capture as a window --------------------------

def _csv(*args) -> str:
    done = run_cli("summarize", *args, "--format", "csv", "--no-cache", "-q")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("layout", ["full", "piecewise"])
def test_load_leaves_captures_out_and_carries_their_catalog(tmp_path, layout):
    truth = build_graph_pair(GraphPairSpec(layout=layout, node_ids=layout == "full"), tmp_path)
    traceset = traceattr.load(tmp_path, cache=False)
    assert traceset.files.column(S.PATH).to_pylist() == [truth.replay]       # the captures are no windows
    assert any("3 graph capture file(s) are not windows" in note for note in traceset.notes)
    assert not any("execution_details" in note for note in traceset.notes)
    for level in ("op", "op_stack", "module"):
        assert sums(table(traceset, level)) == truth.sums(level), level
    assert shape_table(table(traceset, "shape")) == shape_truth(truth)
    assert busy(traceset) == truth.busy_ns
    [(_, run)] = traceattr.load_runs(tmp_path, cache=False)
    assert sums(table(run, "op")) == truth.sums("op")
    # given beside the replay file alone, as the commands take it
    given = traceattr.load(truth.replay, graph_capture=tmp_path / "capture_traces", cache=False)
    assert sums(table(given, "module")) == truth.sums("module")


@pytest.mark.parametrize("layout", ["full", "piecewise"])
def test_a_store_keeps_the_catalog_and_gives_the_folders_numbers(tmp_path, layout):
    """`summarize STORE` == `summarize FOLDER` at every level: the store keeps the captures' catalog (not
    their paths: it needs them neither present nor unchanged), never the captures as windows."""
    truth = build_graph_pair(GraphPairSpec(layout=layout), tmp_path / "run")
    done = run_cli("convert", tmp_path / "run", "-o", tmp_path / "store", "-q")
    assert done.returncode == 0 and "1 file," in done.stderr, done.stderr
    shutil.rmtree(tmp_path / "run" / "capture_traces")          # the store alone attributes the replays
    build_graph_pair(GraphPairSpec(layout=layout), tmp_path / "again")
    for level in ("op", "op_stack", "module", "shape", "launch", "step"):
        assert _csv(tmp_path / "store", "--by", level) == _csv(tmp_path / "again", "--by", level), level
    assert sums(table(tmp_path / "store", "op")) == truth.sums("op")
    assert shape_table(table(tmp_path / "store", "shape")) == shape_truth(truth)
    # a store of a store keeps it too; --graph-capture names captures kept elsewhere
    done = run_cli("convert", tmp_path / "store", "-o", tmp_path / "copy", "-q")
    assert done.returncode == 0, done.stderr
    assert _csv(tmp_path / "copy", "--by", "module") == _csv(tmp_path / "again", "--by", "module")
    done = run_cli("convert", tmp_path / "again" / "replay.json", "--graph-capture",
                   tmp_path / "again" / "capture_traces", "-o", tmp_path / "given", "-q")
    assert done.returncode == 0, done.stderr
    assert _csv(tmp_path / "given", "--by", "op") == _csv(tmp_path / "again", "--by", "op")


@pytest.mark.parametrize("layout", ["full", "piecewise"])
def test_compare_two_replay_folders_attributes_each_side_through_its_captures(tmp_path, layout):
    """Two serving runs at different batch sizes (other GEMM kernels, other captured graphs), each folder with
    its own captures: every row of both sides is its planted op, module or shape; a store on one side too."""
    a = build_graph_pair(GraphPairSpec(layout=layout, replay_batch_sizes=(5, 8)), tmp_path / "a")
    b = build_graph_pair(GraphPairSpec(layout=layout, replay_batch_sizes=(30, 20), seed=1), tmp_path / "b")
    for level in ("op", "module"):
        frame = pd.read_csv(io.StringIO(_compare(tmp_path / "a", tmp_path / "b", level)))
        keys = frame[frame["kind"] == "key"]
        assert dict(zip(keys["key"], keys["a_ns"])) == {k: v for k, v in a.sums(level).items()}, level
        assert dict(zip(keys["key"], keys["b_ns"])) == {k: v for k, v in b.sums(level).items()}, level
    assert run_cli("convert", tmp_path / "b", "-o", tmp_path / "b.store", "-q").returncode == 0
    assert _compare(tmp_path / "a", tmp_path / "b.store", "op") == _compare(tmp_path / "a", tmp_path / "b", "op")


def _compare(a, b, level: str) -> str:
    done = run_cli("compare", a, b, "--by", level, "--format", "csv", "--no-cache", "-q")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_damaged_store_catalog_is_one_line(tmp_path):
    build_graph_pair(GraphPairSpec(), tmp_path / "run")
    assert run_cli("convert", tmp_path / "run", "-o", tmp_path / "store", "-q").returncode == 0
    catalog = tmp_path / "store" / "graph_catalog.json"
    catalog.write_text(catalog.read_text().replace('"closed": true', '"closed": false', 1))
    done = run_cli("summarize", tmp_path / "store", "--by", "op", "-q")
    assert done.returncode != 0 and "graph_catalog.json: changed since convert" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("forge", [lambda c: c["graphs"][0]["op"].__setitem__(0, 10**9),
                                   lambda c: c["graphs"][0].__setitem__("shape", [0]),
                                   lambda c: c.__setitem__("strings", 7),
                                   lambda c: c["shapes"].append([0, 1])])
def test_a_forged_store_catalog_is_refused_value_by_value(tmp_path, forge):
    """Hashes stop damage, not a forger who rewrites them: every code of the catalog is range-checked."""
    build_graph_pair(GraphPairSpec(), tmp_path / "run")
    assert run_cli("convert", tmp_path / "run", "-o", tmp_path / "store", "-q").returncode == 0
    path = tmp_path / "store" / "graph_catalog.json"
    catalog = json.loads(path.read_text())
    forge(catalog)
    path.write_text(json.dumps(catalog))
    metadata = json.loads((tmp_path / "store" / MARKER).read_text())
    metadata[CATALOG_KEY] = file_sha256(path)
    (tmp_path / "store" / MARKER).write_bytes(sealed_metadata(metadata))
    done = run_cli("summarize", tmp_path / "store", "--by", "op", "-q")
    assert done.returncode != 0 and "graph_catalog.json: damaged graph catalog" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_capture_given_with_graph_capture_is_the_same_as_one_beside(tmp_path):
    truth = build_graph_pair(GraphPairSpec(), tmp_path)
    given = traceattr.attribute(tmp_path / "replay.json", by="module", cache=False,
                                graph_capture=tmp_path / "capture_traces")
    assert sums(given) == truth.sums("module")
    done = run_cli("summarize", tmp_path / "replay.json", "--by", "op", "--graph-capture",
                   tmp_path / "capture_traces", "--format", "csv", "-q")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    assert dict(zip(frame["key"], frame[S.SELF_NS])) == truth.sums("op")
    # the folder's captures given again, as another path to the same files: still one capture each
    again = traceattr.attribute(tmp_path, by="op", cache=False, graph_capture=str(tmp_path / "capture_traces" / ".."
                                                                                     / "capture_traces"))
    assert sums(again) == truth.sums("op")
    # report, compare and check read the folder the same way: the capture is no window
    page = tmp_path / "page.html"
    done = run_cli("report", tmp_path, "-o", page, "-q", "--no-cache")
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    at = html.find("graph replay:")
    assert "Model_0/Layer_" in html and at < 0, html[at - 800:at + 100]
    done = run_cli("compare", tmp_path / "replay.json", tmp_path, "--by", "op", "--format", "csv", "-q", "--no-cache",
                   "--graph-capture", tmp_path / "capture_traces")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout)).set_index("key")
    assert (frame.drop(index=["<idle>", "<total>"], errors="ignore")["delta_ns"] == 0).all()
    result = traceattr.check(tmp_path, cache=False)
    paths = " ".join(" ".join(run.findings["path"].astype(str)) for run in result.runs)
    assert result.verdict != "bad" and "replay.json" in paths and "bs_32.json" not in paths


def test_one_file_holding_the_capture_and_its_replays(tmp_path):
    """torch.compile profiled from capture to replay in one session: the file is a replay and a capture."""
    truth = build_graph_pair(GraphPairSpec(replay_batch_sizes=(16, 12)), tmp_path / "pair")
    doc = _events(tmp_path / "pair" / "replay.json")
    captured = _events(tmp_path / "pair" / "capture_traces" / "bs_16.json")["traceEvents"]
    for event in captured:            # correlations of their own, as one profiler session numbers them
        if "correlation" in event.get("args", {}):
            event["args"]["correlation"] += 10**6
    doc["traceEvents"] = captured + doc["traceEvents"]
    (tmp_path / "one.json").write_text(json.dumps(doc))
    df = table(tmp_path / "one.json", "op_stack", graph_capture=tmp_path / "one.json")
    assert sums(df) == truth.sums("op_stack")
    assert busy(tmp_path / "one.json") == truth.busy_ns


# --- bad input: a note naming the files, the kernels to their launch, numbers that add up -------------

def _events(path):
    return json.loads(path.read_text())


def test_a_capture_matching_no_replay_is_a_note(tmp_path):
    truth = build_graph_pair(GraphPairSpec(), tmp_path)
    other = tmp_path / "capture_traces" / "bs_64.json"
    doc = _events(tmp_path / "capture_traces" / "bs_32.json")
    for event in doc["traceEvents"]:
        if "kernel" in event.get("args", {}):
            event["args"]["kernel"] = "other_model_" + event["args"]["kernel"]
    other.write_text(json.dumps(doc))
    df = table(tmp_path, "op")
    assert sums(df) == truth.sums("op")
    assert f"graph capture {other.relative_to(tmp_path)}: 1 of 1 captured graphs match no replayed launch" in \
        " ".join(_header_notes(tmp_path))


def test_two_captures_claiming_one_graph_fall_back_with_a_note(tmp_path):
    truth = build_graph_pair(GraphPairSpec(), tmp_path)
    shutil.copy(tmp_path / "capture_traces" / "bs_32.json", tmp_path / "capture_traces" / "bs_32_again.json")
    df = table(tmp_path, "op")
    text = " ".join(_header_notes(tmp_path))
    assert "captured graphs match them equally" in text and "bs_32_again.json" in text
    # the steps of batch size 30 (rounded up to 32) go to their launch; the others keep their ops
    graph_30 = [i for i, graph in enumerate(truth.kernels["graph"]) if graph.startswith("32/")]
    fallback = sum(truth.kernels["end_ns"][i] - truth.kernels["start_ns"][i] for i in graph_30)
    assert sums(df)[FALLBACK_OP] == fallback > 0
    assert busy(tmp_path) == truth.busy_ns


def test_a_truncated_capture_keeps_what_it_holds(tmp_path):
    """The file ends inside the capture (its end and last launches lost): the replay has more kernels than
    that capture holds; those kernels go to their launch, the others keep their ops."""
    truth = build_graph_pair(GraphPairSpec(replay_batch_sizes=(30,)), tmp_path)
    path = tmp_path / "capture_traces" / "bs_32.json"
    doc = _events(path)
    launches = [i for i, e in enumerate(doc["traceEvents"]) if e["name"] == "cudaLaunchKernel"]
    cut = launches[len(launches) // 2]
    end = doc["traceEvents"][cut]["ts"]
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e["ts"] < end and e["name"] != "cudaStreamEndCapture"]
    path.write_text(json.dumps(doc))
    df = table(tmp_path, "op")
    text = " ".join(_header_notes(tmp_path))
    assert "not closed" in text and "bs_32.json" in text and "does not hold" in text
    got = sums(df)
    kept = sum(n for k, n in got.items() if k != FALLBACK_OP)
    assert got[FALLBACK_OP] > 0 and kept > 0 and got[FALLBACK_OP] + kept == truth.busy_ns
    assert got.get("", 0) == 0


def test_captures_in_capture_traces_need_no_execution_details(tmp_path):
    truth = build_graph_pair(GraphPairSpec(), tmp_path)
    (tmp_path / "capture_traces" / "execution_details.json").unlink()
    assert sums(table(tmp_path, "module")) == truth.sums("module")      # batch sizes from `capture_B`
    assert busy(tmp_path) == truth.busy_ns


@pytest.mark.parametrize("content", ["{nope", "[{\"file\": 3}]", "{\"file\": \"bs_8.json\"}", "[" * 100_000])
def test_a_malformed_execution_details_is_a_note(tmp_path, content):
    """Batch sizes then come from the captures' annotations (`capture_32`): the numbers stay exact."""
    truth = build_graph_pair(GraphPairSpec(), tmp_path)
    (tmp_path / "capture_traces" / "execution_details.json").write_text(content)
    assert sums(table(tmp_path, "op_stack")) == truth.sums("op_stack")
    assert "execution_details.json: malformed" in " ".join(_header_notes(tmp_path))


def test_graph_capture_naming_an_ordinary_trace_is_a_note(tmp_path):
    build_graph_pair(GraphPairSpec(capture=False), tmp_path / "a")
    build_graph_pair(GraphPairSpec(capture=False, seed=1), tmp_path / "b")
    done = run_cli("summarize", tmp_path / "a", "--graph-capture", tmp_path / "b" / "replay.json", "-q",
                   "--by", "op", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert "read as an ordinary trace" in " ".join(done.stdout.replace("│", " ").split())


# --- the public SGLang decode pair against TraceLens's golden tables ------------------------------------

def test_sglang_decode_pair_matches_tracelens_ops_summary(shared_traces):
    folder = shared_trace("tracelens/inference/sglang_decode")
    replay = folder / "sglang_Qwen3-8B_decode.json.gz"
    df = table(folder, "op")
    total = df[S.SELF_NS].sum()
    assert df.loc[df["key"] == UNATTRIBUTED, S.SELF_NS].sum() <= 0.01 * total
    assert busy(folder) == busy(replay) == total       # the capture trace adds nothing
    # TraceLens's per-op kernel time (µs, float sums of kernel durations per (op, parent module)). Two naming
    # differences, not in the numbers: it shows `sglang_profiler::attention_paged_attention_ragged_100` without
    # the `_100` suffix the trace gives the op, and kernels launched outside every op under their runtime call
    # (hipLaunchKernel, hipModuleLaunchKernel) where traceattr says <unattributed>. Its Count counts ops (the
    # attention op launches two kernels), so counts are not compared.
    golden = pd.read_csv(folder / "perf_csvs" / "ops_summary.csv")
    golden["name"] = golden["name"].replace({"hipLaunchKernel": UNATTRIBUTED, "hipModuleLaunchKernel": UNATTRIBUTED})
    theirs = golden.groupby("name")["total_direct_kernel_time_sum"].sum()
    named = df.assign(key=[re.sub(r"^(sglang_profiler::.*)_\d+$", r"\1", k) for k in df["key"]]).groupby("key")
    ours, kernels = named[S.DURATION_NS].sum() / 1000, named[S.COUNT].sum()
    assert set(ours.index) == set(theirs.index)
    for name, microseconds in theirs.items():
        # its float µs (timestamps near 4.9e12 µs keep about 1 ns) may differ by 1 ns a kernel
        assert ours[name] == pytest.approx(microseconds, abs=0.001 * int(kernels[name]) + 0.001), name
    # modules come from the capture too: per innermost module class (TraceLens's parent_module, "NA" for none)
    modules = table(folder, "module")
    assert modules.loc[modules["key"] == UNATTRIBUTED, S.SELF_NS].sum() <= 0.01 * total
    golden = pd.read_csv(folder / "perf_csvs" / "ops_summary.csv", keep_default_na=False)
    theirs = golden.groupby("parent_module")["total_direct_kernel_time_sum"].sum()
    leaf = ["NA" if key == UNATTRIBUTED else "nn.Module: " + re.sub(r"_\d+$", "", key.split("/")[-1])
            for key in modules["key"]]
    by_class = modules.assign(leaf=leaf).groupby("leaf")
    ours, kernels = by_class[S.DURATION_NS].sum() / 1000, by_class[S.COUNT].sum()
    assert set(ours.index) == set(theirs.index)
    for name, microseconds in theirs.items():
        assert ours[name] == pytest.approx(microseconds, abs=0.001 * int(kernels[name]) + 0.001), name
    report = link_report(folder)
    assert report["graph_by_name_order"][0] == report["graph_kernels"][0] == 544
    # check's unlinked row: only the three kernels launched outside every op, not the replayed ones
    findings = pd.concat([run.findings for run in traceattr.check(folder, cache=False).runs])
    assert findings.loc[findings["check"] == "unlinked", "count"].tolist() == [3]


TRACELENS_TABLES = ("GEMM", "RMSNorm_fwd", "InferenceAttention_fwd", "RoPE_fwd", "UnaryElementwise", "Reduce_fwd")


def _tracelens_key(name: str, dims: str, types: str) -> tuple[str, str, str]:
    """A TraceLens row's (op, Input Dims, Input type) as traceattr writes them: its lists are Python
    literals (`['c10::BFloat16']`), traceattr's compact JSON; it drops the `_100` line suffix SGLang gives
    its profiler ops."""
    name = re.sub(r"^(sglang_profiler::.*)_\d+$", r"\1", name)
    return name, json.dumps(ast.literal_eval(dims)), json.dumps(ast.literal_eval(types))


def test_sglang_decode_shapes_match_tracelens_perf_tables(shared_traces):
    """The replayed kernels take their capture op's shapes: per (op, dims, types) the same calls, kernels
    and kernel time as TraceLens's own perf tables for the pair, and for GEMMs the same FLOPs per call.
    Every difference is one of TraceLens's ways of counting, checked below from its own rows:
    * TraceLens counts an op's whole subtree, so an op with a model over another lists the same kernels
      twice (`aiter::gemm_a16w16` over `aten::mm`; `aten::cumsum` over its `aten::_to_copy > aten::copy_`;
      an `aten::copy_` int <- long over the inner long <- long `aten::copy_` whose DtoH memcpy it lists
      again); traceattr counts each kernel once, for its innermost modelled op (its Σ self == busy);
    * it lists calls that launched nothing (0 kernels); traceattr's rows hold device time;
    * its rows are per (op, dims, types); traceattr's also per Concrete Inputs (non_blocking=True and False
      copies are two rows), summed here;
    * its float µs sums may differ by 1 ns a kernel."""
    folder = shared_trace("tracelens/inference/sglang_decode")
    shapes = table(folder, "shape")
    name = [re.sub(r"^(sglang_profiler::.*)_\d+$", r"\1", k) for k in shapes["key"]]
    grouped = shapes.assign(key=name).groupby(["key", S.INPUT_DIMS, S.INPUT_TYPES])
    ours = grouped[["count", "kernels", S.DURATION_NS]].sum()
    flops = grouped["flops"].first()
    golden = {t: pd.read_csv(folder / "perf_csvs" / f"{t}.csv", keep_default_na=False) for t in TRACELENS_TABLES}
    events = json.loads(gzip.open(folder / "sglang_Qwen3-8B_decode.json.gz").read())["traceEvents"]
    [dtoh] = [e for e in events if e.get("name", "").startswith("Memcpy DtoH")]
    time_of = {}
    for kind, rows in golden.items():
        for row in rows.itertuples(index=False):
            key = _tracelens_key(row.name, row[rows.columns.get_loc("Input Dims_first")],
                                 row[rows.columns.get_loc("Input type_first")])
            if row.num_kernels:                 # a key may also have a row of calls that launched nothing
                time_of[key] = row[rows.columns.get_loc("Kernel Time (µs)_sum")] * 1000
    compared = 0
    for kind, rows in golden.items():
        for row in rows.itertuples(index=False):
            key = _tracelens_key(row.name, row[rows.columns.get_loc("Input Dims_first")],
                                 row[rows.columns.get_loc("Input type_first")])
            ns = row[rows.columns.get_loc("Kernel Time (µs)_sum")] * 1000
            calls, per_call = int(row.name_count), int(row.num_kernels)
            if per_call == 0:              # launched nothing: no device time, so no call in traceattr's counts
                assert key not in ours.index or key in time_of, key
                continue
            if key[0] == "aiter::gemm_a16w16":                     # the same kernels as its aten::mm
                mm = ("aten::mm", json.dumps([json.loads(key[1])[0], json.loads(key[1])[1][::-1]]),
                      json.dumps(["c10::BFloat16", "c10::BFloat16"]))
                assert time_of[mm] == ns and key not in ours.index, key
                continue
            if key[0] == "aten::cumsum":                           # and its inner copy_ (long <- int)'s kernel
                inner = ("aten::copy_", "[[32], [32], []]", json.dumps(["long int", "int", "Scalar"]))
                ns, per_call = ns - time_of[inner], per_call - 1
            if key == ("aten::copy_", "[[32], [32], []]", json.dumps(["int", "long int", "Scalar"])):
                ns, calls = ns - dtoh["dur"] * 1000, calls - 1     # its inner copy_'s DtoH memcpy, again
            got = ours.loc[key]
            assert (got["count"], got["kernels"]) == (calls, calls * per_call), key
            assert got[S.DURATION_NS] == pytest.approx(ns, abs=1 + int(got["kernels"])), key
            if kind == "GEMM":
                assert flops[key] == round(row.GFLOPS_first * 1e9), key          # exact: 2MNK
            compared += 1
    assert compared == 21          # all rows with kernels but the 4 aiter::gemm_a16w16
    # every GEMM traceattr models is in TraceLens's table
    models = grouped["model"].first()
    assert set(models[models == "gemm"].index) <= set(time_of)


def test_sglang_decode_pair_loaded_or_converted_gives_the_folders_numbers(shared_traces, tmp_path):
    folder = shared_trace("tracelens/inference/sglang_decode")
    loaded = traceattr.load(folder, cache=False)
    assert loaded.files.num_rows == 1 and loaded.graph_catalog
    done = run_cli("convert", folder, "-o", tmp_path / "store", "-q")
    assert done.returncode == 0, done.stderr
    for level in ("op", "module", "shape"):
        assert sums(table(loaded, level)) == sums(table(folder, level)), level
        assert _csv(tmp_path / "store", "--by", level) == _csv(folder, "--by", level), level
    compared = pd.read_csv(io.StringIO(_compare(folder, tmp_path / "store", "op")))
    assert (compared["delta_ns"] == 0).all() and not compared["key"].str.startswith("<graph replay").any()
    assert compared.loc[compared["key"] == "aten::mm", "a_ns"].sum() > 0


def test_sglang_decode_replay_alone_goes_to_its_launch(shared_traces):
    replay = shared_trace("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    df = table(replay, "op")
    launch = df.loc[df["key"] == "<graph replay: torch/cuda/graphs.py(139): replay>"]
    assert int(launch[S.COUNT].sum()) == 544
    assert df.loc[df["key"] == UNATTRIBUTED, S.SELF_NS].sum() <= 0.01 * df[S.SELF_NS].sum()
