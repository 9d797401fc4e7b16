"""The synthetic trace builder: valid Kineto JSON whose exact contents match the truth it returns.

Every check reads the file back with an independent plain-Python reader (stdlib json + Decimal), never
with traceattr's own loader, except the final round-trip test through `traceattr.load`.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceattr.builder import ERAS, LAYOUTS, TraceSpec, device_truth, write_trace, write_trace_set
from tracesets import SMALL

BUSY_CATS = {"kernel": None, "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


# --- an independent reader ------------------------------------------------------------------------
def read_doc(path: Path) -> dict:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def to_ns(value, doc: dict) -> int:
    """Exact ns from the written decimal µs (Decimal never rounds), plus the base in era C."""
    return int(Decimal(value) * 1000) + int(doc.get("baseTimeNanoseconds", 0))


def device_rows(doc: dict) -> list[dict]:
    rows = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat", "").lower() in BUSY_CATS:
            start = to_ns(ev["ts"], doc)
            category = BUSY_CATS[ev["cat"].lower()] or (
                "communication" if "Collective name" in ev["args"] else "compute")
            rows.append(dict(device=ev["pid"], stream=ev["tid"], name=ev["name"], category=category,
                             start_ns=start, end_ns=start + int(Decimal(ev["dur"]) * 1000),
                             correlation=ev["args"]["correlation"]))
    return rows


def truth_rows(truth, keys=("device", "stream", "name", "category", "start_ns", "end_ns", "correlation")):
    return [{k: row[k] for k in keys} for row in truth.rows()]


def brute_force(starts: list[int], ends: list[int]) -> tuple[int, int]:
    """Union and peak concurrency over elementary segments, in plain Python."""
    points = sorted(set(starts) | set(ends))
    busy, peak = 0, 0
    for lo, hi in zip(points, points[1:]):
        running = sum(1 for s, e in zip(starts, ends) if s <= lo and hi <= e)
        busy += (hi - lo) if running else 0
        peak = max(peak, running)
    return busy, peak


# --- format and exact times -------------------------------------------------------------------------
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_era_and_layout_round_trips_to_the_exact_ns(tmp_path, era, layout):
    spec = TraceSpec(era=era, layout=layout, seed=3, **SMALL)
    truth = write_trace(tmp_path / "t.json", spec)
    doc = read_doc(tmp_path / "t.json")
    assert len(doc["traceEvents"]) == truth.events
    assert device_rows(doc) == truth_rows(truth)
    assert ("baseTimeNanoseconds" in doc) == (era == "C")
    text = (tmp_path / "t.json").read_text()
    if layout == "pretty":
        assert '\n    "ph": "X",\n    "cat": "kernel",\n' in text and '"dur": ' in text
    elif layout == "lines":     # header line, one complete event per line, closing line
        lines = text.rstrip("\n").split("\n")
        assert [json.loads(line.rstrip(",")) for line in lines[1:-1]] == json.loads(text)["traceEvents"]
    else:
        assert "\n" not in text
    if era == "A":
        assert all(r["start_ns"] % 1000 == 0 and r["end_ns"] % 1000 == 0 for r in truth.rows())
    else:   # era B/C timestamps carry ns digits that float64 * 1000 would get wrong
        assert any(r["start_ns"] % 1000 for r in truth.rows())


def test_era_c_times_are_relative_to_a_quarter_year_base(tmp_path):
    truth = write_trace(tmp_path / "t.json", TraceSpec(**SMALL))
    doc = read_doc(tmp_path / "t.json")
    assert doc["baseTimeNanoseconds"] % (7_889_238 * 10**9) == 0
    assert doc["displayTimeUnit"] == "ms"
    first_ts = next(ev["ts"] for ev in doc["traceEvents"] if ev["ph"] == "X")
    assert Decimal("1e12") < first_ts < Decimal("7.9e12")      # relative µs, not epoch µs
    assert truth.base_time_ns == doc["baseTimeNanoseconds"]


def test_base_at_end_puts_the_timing_keys_after_the_events(tmp_path):
    write_trace(tmp_path / "t.json", TraceSpec(base_at_end=True, **SMALL))
    text = (tmp_path / "t.json").read_text()
    assert text.index('"traceEvents"') < text.index('"traceName"') < text.index('"baseTimeNanoseconds"')
    assert read_doc(tmp_path / "t.json")["baseTimeNanoseconds"] > 0


def test_gzip_and_trace_set_write_ranked_files_with_distributed_info(tmp_path):
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, gzip=True, **SMALL))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for rank, truth in truths.items():
        doc = read_doc(Path(truth.path))
        assert doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["world_size"] == 2
        assert device_rows(doc) == truth_rows(truth)
        assert set(truth.activities["device"]) == {rank}          # device index = rank % 8


# --- what the trace contains ---------------------------------------------------------------------------
def test_truth_busy_and_concurrency_match_a_brute_force(tmp_path):
    truth = write_trace(tmp_path / "t.json", TraceSpec(**SMALL))
    rows = truth.rows()
    for device, figures in truth.devices.items():
        starts = [r["start_ns"] for r in rows if r["device"] == device]
        ends = [r["end_ns"] for r in rows if r["device"] == device]
        assert (figures.busy_ns, figures.max_concurrency) == brute_force(starts, ends)
        assert figures.sum_duration_ns == sum(e - s for s, e in zip(starts, ends))
        assert figures.max_concurrency >= 2 and figures.overlap_ns > 0    # real cross-stream concurrency


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=1, max_size=25))
def test_device_truth_matches_brute_force_on_random_intervals(pairs):
    starts = [s for s, _ in pairs]
    ends = [s + d for s, d in pairs]
    got = device_truth(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    assert (got.busy_ns, got.max_concurrency) == brute_force(starts, ends)


def test_markers_and_special_launches_are_written(tmp_path):
    truth = write_trace(tmp_path / "t.json", TraceSpec(**SMALL))
    events = read_doc(tmp_path / "t.json")["traceEvents"]
    cats = [ev.get("cat") for ev in events]
    assert cats.count("gpu_user_annotation") == truth.markers["gpu_user_annotation"] == 4
    assert cats.count("cuda_sync") == truth.markers["cuda_sync"] == 2
    assert cats.count("cpu_instant_event") > 0 and cats.count("python_function") > 0
    assert {ev["ph"] for ev in events} >= {"X", "i", "s", "f", "M"}
    runtime = {ev["args"]["correlation"]: ev["name"] for ev in events if ev.get("cat") == "cuda_runtime"}
    graph = [r for r in truth.rows() if r["launch"] == "cudaGraphLaunch"]
    assert len(graph) == 2 * 3 and len({r["correlation"] for r in graph}) == 2   # one launch, 3 kernels
    dropped = [r for r in truth.rows() if r["launch"] == ""]
    assert len(dropped) == 2 and all(r["correlation"] not in runtime for r in dropped)
    assert {r["category"] for r in truth.rows()} == {"compute", "communication", "memcpy", "memset"}
    flows = {(ev["cat"], ev["ph"]) for ev in events if ev["ph"] in "sf"}
    assert flows == {("ac2g", "s"), ("ac2g", "f"), ("fwdbwd", "s"), ("fwdbwd", "f")}


def _innermost(events: list[dict], ts: Decimal, cats: set[str], tid) -> list[dict]:
    """Host events of the given cats on thread tid that contain ts, outermost first."""
    hits = [ev for ev in events if ev.get("ph") == "X" and ev.get("cat") in cats and ev["tid"] == tid
            and ev["ts"] <= ts <= ev["ts"] + ev["dur"]]
    return sorted(hits, key=lambda ev: (ev["ts"], -ev["dur"]))


def test_truth_links_agree_with_a_brute_force_linker(tmp_path):
    """launch, op, op stack, module (with the fwd link for backward), annotation and step, from the file."""
    truth = write_trace(tmp_path / "t.json", TraceSpec(**SMALL))
    events = read_doc(tmp_path / "t.json")["traceEvents"]
    runtime = {ev["args"]["correlation"]: ev for ev in events if ev.get("cat") == "cuda_runtime"}
    forward_module = {}
    for ev in events:
        if ev.get("cat") == "cpu_op" and ev["args"].get("Fwd thread id") == 0:
            frames = _innermost(events, ev["ts"], {"python_function"}, ev["tid"])
            path = "/".join(f["name"].removeprefix("nn.Module: ") for f in frames if "nn.Module" in f["name"])
            forward_module[ev["args"]["Sequence number"]] = path
    checked = 0
    for row in truth.rows():
        launch = runtime.get(row["correlation"])
        if launch is None:
            assert (row["launch"], row["op"], row["module"], row["step"]) == ("", "", "", "")
            continue
        ops = _innermost(events, launch["ts"], {"cpu_op"}, launch["tid"])
        notes = _innermost(events, launch["ts"], {"user_annotation"}, launch["tid"])
        assert row["launch"] == launch["name"]
        if launch["name"] == "cudaGraphLaunch":      # no capture trace: to the launch's innermost range
            ranges = _innermost(events, launch["ts"], {"cpu_op", "user_annotation", "python_function"},
                                launch["tid"])
            ops = [{"name": f"<graph replay: {(ops or ranges)[-1]['name']}>", "args": {}}]
        assert row["op_stack"] == tuple(op["name"] for op in ops)
        assert row["op"] == (ops[-1]["name"] if ops else "")
        assert row["step"] == next(n["name"] for n in notes if n["name"].startswith("ProfilerStep#"))
        inner_notes = [n["name"] for n in notes if not n["name"].startswith("ProfilerStep#")]
        assert row["annotation"] == (inner_notes[-1] if inner_notes else "")
        seqs = [op["args"]["Sequence number"] for op in ops if "Sequence number" in op["args"]]
        assert row["module"] == (forward_module[seqs[0]] if seqs else "")
        checked += 1
    backward = [r for r in truth.rows() if "Backward" in "".join(r["op_stack"])]
    assert checked > 20 and backward and all(r["module"].startswith("Model_0/") for r in backward)


def test_several_devices_per_rank_and_unlinked_kernels_carry_no_external_id(tmp_path):
    truth = write_trace(tmp_path / "t.json", TraceSpec(ranks=(0, 5), devices_per_rank=2, **SMALL), rank=5)
    doc = read_doc(tmp_path / "t.json")
    assert device_rows(doc) == truth_rows(truth)
    assert set(truth.devices) == {2, 3}                       # (5 * 2 + i) % 8
    assert len(doc["deviceProperties"]) == 8
    dropped = {r["correlation"] for r in truth.rows() if r["launch"] == ""}
    kernels = {ev["args"]["correlation"]: ev["args"] for ev in doc["traceEvents"] if ev.get("cat") == "kernel"}
    assert dropped and all("External id" not in kernels[c] for c in dropped)


# --- knobs -------------------------------------------------------------------------------------------------
def test_same_seed_same_bytes_other_seed_other_times(tmp_path):
    written = []
    for seed in (5, 5, 6):      # same name in fresh folders: traceName holds the path, like torch's
        write_trace(tmp_path / "x.json", TraceSpec(seed=seed, **SMALL))
        written.append((tmp_path / "x.json").read_bytes())
    assert written[0] == written[1]
    assert written[0] != written[2]


def test_kernel_scale_drop_add_and_rank_scale_change_only_what_they_name(tmp_path):
    base = write_trace(tmp_path / "base.json", TraceSpec(**SMALL))
    gemm = "ampere_sgemm_128x64_tn"
    scaled = write_trace(tmp_path / "s.json", TraceSpec(kernel_scale={gemm: 2.0}, **SMALL))

    def durations(truth, name):
        return [e - s for n, s, e in zip(truth.activities["name"], truth.activities["start_ns"],
                                         truth.activities["end_ns"]) if n == name]
    for before, after in zip(durations(base, gemm), durations(scaled, gemm)):
        assert abs(after - 2 * before) <= 2
    other = next(n for n in base.activities["name"] if n != gemm and "Memcpy" not in n)
    assert durations(base, other) == durations(scaled, other)

    dropped = write_trace(tmp_path / "d.json", TraceSpec(drop_kernels=("sgemm",), **SMALL))
    assert not any("sgemm" in n for n in dropped.activities["name"])
    assert len(dropped) == len(base) - sum("sgemm" in n for n in base.activities["name"])

    added = write_trace(tmp_path / "a.json", TraceSpec(add_kernels={"my_new_kernel": 50_000}, **SMALL))
    assert durations(added, "my_new_kernel") == [50_000, 50_000]
    assert {r["op"] for r in added.rows() if r["name"] == "my_new_kernel"} == {"aten::custom_op"}

    slow = write_trace_set(tmp_path / "ranks", TraceSpec(ranks=2, rank_scale={1: 1.5}, **SMALL))
    assert slow[1].busy_ns > 1.3 * slow[0].busy_ns

    jittered = write_trace(tmp_path / "j.json", TraceSpec(jitter=0.2, **SMALL))
    assert durations(jittered, gemm) != durations(base, gemm)


def test_target_bytes_is_roughly_honoured(tmp_path):
    for target in (300_000, 3_000_000):
        write_trace(tmp_path / "t.json", TraceSpec(target_bytes=target))
        assert 0.8 * target <= (tmp_path / "t.json").stat().st_size <= 1.2 * target


def test_bad_spec_is_refused_with_every_problem_named():
    with pytest.raises(ValueError, match="era must be one of.*layout must be one of"):
        TraceSpec(era="D", layout="fancy")
    with pytest.raises(ValueError, match="world_size 2 must exceed the largest rank 3"):
        TraceSpec(ranks=(0, 3), world_size=2)


# --- through traceattr's own loader -------------------------------------------------------------------
@pytest.mark.parametrize("era,layout", [("C", "pretty"), ("A", "lines"), ("B", "compact")])
def test_loader_reproduces_the_truth_device_rows(tmp_path, era, layout):
    load = pytest.importorskip("traceattr.io.load", reason="the loader has not landed yet").load
    from traceattr import schema as S
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, era=era, layout=layout, gzip=era == "C", **SMALL))
    traces = load(tmp_path)
    device = traces.device.to_pandas().sort_values([S.RANK, S.DEVICE, S.STREAM, S.START_NS, S.CORRELATION])
    expected = sorted((rank, r["device"], r["stream"], r["start_ns"], r["correlation"], r["end_ns"], r["name"],
                       r["category"]) for rank, t in truths.items() for r in t.rows())
    got = list(zip(device[S.RANK], device[S.DEVICE], device[S.STREAM], device[S.START_NS],
                   device[S.CORRELATION], device[S.END_NS], device[S.NAME], device[S.CATEGORY]))
    assert [tuple(int(x) if i < 6 else x for i, x in enumerate(row)) for row in got] == expected
    check_conservation(traces, truths)


@pytest.mark.parametrize("era,layout,extra", [
    ("C", "pretty", {}), ("A", "lines", dict(cuda_sync=False, collective=False)),
    ("B", "compact", dict(profile_memory=True, jitter=0.5, base_at_end=True))])
def test_rank_window_and_idle_are_the_truth_window(tmp_path, era, layout, extra):
    """The rank table's window is the span of the file's events (torch's `Trace` span, which starts before
    the first event, is not one), and idle is that window less busy: the truth's figures, per rank."""
    import traceattr
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, devices_per_rank=1, era=era, layout=layout, **SMALL,
                                                 **extra))
    table = traceattr.summarize(traceattr.load(tmp_path, cache=False, jobs=1), by="rank").set_index("rank")
    for rank, truth in truths.items():
        trace = json.loads((tmp_path / f"rank{rank}.pt.trace.json").read_text())
        (span,) = [e for e in trace["traceEvents"] if e.get("cat") == "Trace"]
        window = truth.window_end_ns - truth.window_start_ns
        (busy,) = [figures.busy_ns for figures in truth.devices.values()]
        assert 0 < window < int(Decimal(str(span["dur"])) * 1000)     # the span starts before the first event
        assert int(table.loc[rank, "window_ns"]) == window
        assert int(table.loc[rank, "idle_ns"]) == window - busy


def check_conservation(traces, truths) -> None:
    """Σ self == busy per (rank, device), against the builder's own busy figures."""
    from traceattr import schema as S
    try:
        from traceattr.attribution.sweep import sweep
    except ImportError:
        return
    result = sweep(traces)
    result.self_check()
    rank = traces.device.column(S.RANK).to_numpy()
    device = traces.device.column(S.DEVICE).to_numpy()
    for r, truth in truths.items():
        for dev, figures in truth.devices.items():
            assert int(result.self_ns[(rank == r) & (device == dev)].sum()) == figures.busy_ns


def test_attribution_links_reproduce_the_truth_links(tmp_path):
    """op stack, module (incl. backward via the forward op), annotation and step of every activity."""
    load = pytest.importorskip("traceattr.io.load", reason="the loader has not landed yet").load
    links_module = pytest.importorskip("traceattr.attribution.links", reason="links have not landed yet")
    from traceattr import schema as S
    truths = write_trace_set(tmp_path, TraceSpec(ranks=2, **SMALL))
    traces = load(tmp_path)
    links = links_module.link(traces)
    got = list(zip(links.op_stacks.strings(links.op_stack), links.modules.strings(links.module),
                   links.annotations.strings(links.annotation),
                   [links.step_names[i] if i >= 0 else "" for i in links.step]))
    by_key = {(rank, r["correlation"], r["start_ns"]): r for rank, t in truths.items() for r in t.rows()}
    keys = zip(*(traces.device.column(c).to_pylist() for c in (S.RANK, S.CORRELATION, S.START_NS)))
    sep = links.op_stacks.separator
    expected = [(sep.join(r["op_stack"]), r["module"].replace("/", links.modules.separator), r["annotation"],
                 r["step"]) for r in (by_key[key] for key in keys)]
    assert got == expected
    check_conservation(traces, truths)


def test_coupled_collectives_end_together_after_the_last_arrival(tmp_path):
    """coupled_collectives: every allreduce ends on every rank at the same ns, the last arriver's transfer
    after it arrived, and the optimizer's kernel waits for it (DDP), so no rank runs a step ahead."""
    spec = {**SMALL, "ranks": 3, "steps": 4, "rank_scale": {2: 1.3}}
    coupled = write_trace_set(tmp_path / "coupled", TraceSpec(coupled_collectives=True, **spec))
    loose = write_trace_set(tmp_path / "loose", TraceSpec(**spec))

    def rows(truth, category):
        acts = truth.activities
        return [(n, s, e) for n, c, s, e in zip(acts["name"], acts["category"], acts["start_ns"], acts["end_ns"])
                if c == category]
    optimizer = "multi_tensor_apply"
    for index in range(4):
        starts = [rows(coupled[rank], "communication")[index][1] for rank in range(3)]
        ends = {rows(coupled[rank], "communication")[index][2] for rank in range(3)}
        assert len(ends) == 1 and max(starts) < min(ends)
        end = ends.pop()
        assert starts.index(max(starts)) == 2                   # the slow rank is last at every one
        for rank in range(3):                                   # the update waits for the reduced gradients
            updates = [s for n, s, _ in rows(coupled[rank], "compute") if optimizer in n]
            assert updates[index] >= end
    # uncoupled, the updates do not wait: some starts before its rank's allreduce ends
    assert any(update < nccl[2] for rank in range(3) for update, nccl in zip(
        [s for n, s, _ in rows(loose[rank], "compute") if optimizer in n], rows(loose[rank], "communication")))
    # before any coupling, the first collective arrives where the uncoupled rank's does (on one clock: uncoupled,
    # rank r's timeline starts 1,000,003 ns * r later), and the last arriver lasts the transfer it drew
    first = [rows(loose[rank], "communication")[0] for rank in range(3)]
    assert [rows(coupled[rank], "communication")[0][1] for rank in range(3)] == [
        start - 1_000_003 * rank for rank, (_, start, _) in enumerate(first)]
    last = rows(coupled[2], "communication")[0]
    assert last[2] - last[1] == first[2][2] - first[2][1]
    from traceattr import load
    check_conservation(load(tmp_path / "coupled", cache=False, jobs=1), coupled)   # the files hold the truth
