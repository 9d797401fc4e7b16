"""`summarize --by launch` (analysis/launch.py): the table adds up (its counts and times sum to the kernel
table's), the delay percentiles are those of planted delays to within a bin (4.4%), short kernels are
counted and named in the header."""

from __future__ import annotations

import json

import traceattr
from traceattr import schema as S
from traceattr.analysis.launch import BINS_PER_OCTAVE, SHORT_NS, bin_upper_ns, delay_bin
from traceattr.builder import TraceSpec, write_trace

from clirun import run_cli

BIN = 2 ** (1 / BINS_PER_OCTAVE)      # a percentile is at most this factor above the exact one


def planted_delays(path, delays_us: list[int], kernel_us: float = 3.0):
    """One op per kernel: a launch at t, its kernel starting `delay` µs later, kernels back to back."""
    events, t = [], 1000.0
    for i, delay in enumerate(delays_us):
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm" if i % 2 else "aten::add", "pid": 1, "tid": 1,
             "ts": t, "dur": 2.0, "args": {"External id": i}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 0.5,
             "dur": 1.25, "args": {"correlation": i}},
            {"ph": "X", "cat": "kernel", "name": f"k{i % 2}", "pid": 0, "tid": 7, "ts": t + 0.5 + delay,
             "dur": kernel_us if i % 4 else 20.0, "args": {"correlation": i}}]
        t += 300.0
    path.write_text(json.dumps({"traceEvents": events}))


def test_delay_bins():
    # log2(1000) = 9.9658: bin 1 + floor(16 x 9.9658) = 160
    assert delay_bin([-5, 0, 1, 2, 1000]).tolist() == [0, 0, 1, 1 + BINS_PER_OCTAVE, 160]
    for delay in (1, 7, 1000, 123_456_789):
        upper = bin_upper_ns(int(delay_bin([delay])[0]))
        assert delay <= upper <= delay * BIN + 1


def test_planted_delays_percentiles_and_short_kernels(tmp_path):
    path = tmp_path / "rank0.json"
    delays = list(range(1, 201))                      # µs; even i -> aten::add, odd -> aten::mm
    planted_delays(path, delays)
    table = traceattr.attribute(str(path), by="launch", cache=False)
    busy = table.attrs["totals"]
    assert table[S.SELF_NS].sum() == sum(busy.values()) and table[S.COUNT].sum() == 200
    assert (table[S.STREAM] == 7).all() and table["launches"].sum() == 200
    assert table["launch_ns"].sum() == 200 * 1250
    for op, mine in (("aten::add", delays[0::2]), ("aten::mm", delays[1::2])):
        row = table[table["key"] == op].iloc[0]
        ordered = sorted(d * 1000 for d in mine)
        p50, p99 = ordered[(len(ordered) + 1) // 2 - 1], ordered[-(-99 * len(ordered) // 100) - 1]
        assert p50 <= row["delay_p50_ns"] <= p50 * BIN + 1, (op, row["delay_p50_ns"], p50)
        assert p99 <= row["delay_p99_ns"] <= p99 * BIN + 1, (op, row["delay_p99_ns"], p99)
        short = [i for i in range(len(delays)) if i % 4 and (op == "aten::mm") == bool(i % 2)]
        assert row["short"] == len(short)
    # kernels of 3 µs are short (3 in 4 of them), of 20 µs not; the header names who launches them
    facts = table.attrs["level_facts"]["short kernels"]
    assert facts.startswith(f"150 of 200 activities under {SHORT_NS // 1000} µs")
    assert "aten::mm (100)" in facts and "aten::add (50)" in facts
    out = run_cli("summarize", path, "--by", "launch", "--no-cache")
    assert out.returncode == 0 and "short kernels: 150 of 200" in out.stdout, out.stderr


def test_builder_trace_adds_up_to_the_kernel_table(tmp_path):
    spec = TraceSpec(steps=2, seed=2)
    truth = write_trace(tmp_path / "rank0.json", spec)
    table = traceattr.attribute(str(tmp_path / "rank0.json"), by="launch", cache=False)
    kernels = traceattr.summarize(str(tmp_path / "rank0.json"), by="kernel", cache=False)
    assert table[S.COUNT].sum() == kernels[S.COUNT].sum() == len(truth)
    assert table[S.SELF_NS].sum() == kernels[S.SELF_NS].sum() == truth.busy_ns
    assert table[S.DURATION_NS].sum() == kernels[S.DURATION_NS].sum()
    rows = truth.rows()
    assert table["short"].sum() == sum(r["end_ns"] - r["start_ns"] < SHORT_NS for r in rows)
    assert table["launches"].sum() == len({r["correlation"] for r in rows if r["launch"]})
    assert (table["delay_p50_ns"] <= table["delay_p99_ns"]).all()
    folded = traceattr.attribute(str(tmp_path / "rank0.json"), by="launch", cache=False, top=2)
    assert folded[S.SELF_NS].sum() == table[S.SELF_NS].sum() and folded["short"].sum() == table["short"].sum()
    for fmt in ("csv", "json", "markdown"):
        out = run_cli("summarize", tmp_path, "--by", "launch", "--format", fmt, "--no-cache", "-q")
        assert out.returncode == 0, out.stderr


def test_no_launch_records(tmp_path):
    """Kernels without a runtime record have no delay (-1) and no launch; a host-only trace gives the ops."""
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 0},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 30}]}))
    table = traceattr.attribute(str(path), by="launch", cache=False)
    assert table["delay_p50_ns"].tolist() == [-1] and table["launches"].tolist() == [0]
    assert table["short"].tolist() == [1]
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]}))
    table = traceattr.attribute(str(path), by="launch", cache=False)
    assert table["key"].tolist() == ["aten::mm"] and table["launches"].tolist() == [0]


def test_several_ranks_stay_per_rank(tmp_path):
    for rank in (0, 1):
        write_trace(tmp_path / f"rank{rank}.json", TraceSpec(ranks=(rank,), world_size=2, steps=1, seed=rank),
                    rank=rank)
    out = run_cli("summarize", tmp_path, "--by", "launch", "--format", "csv", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("rank,device,stream,key")
