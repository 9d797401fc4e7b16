"""`summarize --by shape` (analysis/roofline.py, shape_keys.py): planted shapes and durations give the planted
TFLOP/s; the table adds up to busy time; hostile shapes give no numbers and a note, never a traceback or an
infinite rate; TraceLens's golden GEMM/SDPA/CONV tables give the same FLOPs, calls and kernel time."""

from __future__ import annotations

import ast
import csv
import json
import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis.peaks import PEAKS
from traceattr.builder import TraceSpec, write_trace
from traceattr.errors import TraceInputError

from clirun import run_cli
from conftest import SHARED_TRACES

BF16 = "c10::BFloat16"
# planted: Linear's addmm 64x512 @ 512x1024 + bias [1024] in bf16, LayerNorm's native_layer_norm on [64, 1024]
ADDMM = ("[[1024], [64, 512], [512, 1024], [], []]", json.dumps([BF16, BF16, BF16, "Scalar", "Scalar"]),
         '["", "", "", "1", "1"]')
ADDMM_FLOPS = 2 * 64 * 1024 * 512 + 64 * 1024
ADDMM_BYTES = (64 * 512 + 512 * 1024 + 64 * 1024 + 1024) * 2
NORM = ("[[64, 1024], [], [1024], [1024], []]", json.dumps([BF16, "ScalarList", BF16, BF16, "Scalar"]), "")
NORM_FLOPS, NORM_BYTES = 5 * 64 * 1024, 2 * 64 * 1024 * 2 + 2 * 1024 * 2
STEPS = 3


def planted(tmp_path, shapes: dict, name: str = "rank0.json"):
    spec = TraceSpec(steps=STEPS, layers=4, dropped_records=0, cuda_graph=False, op_shapes=shapes, seed=5)
    path = tmp_path / name
    truth = write_trace(path, spec)
    return path, truth


def shape_table(path, **options) -> pd.DataFrame:
    table = traceattr.attribute(str(path), by="shape", cache=False, **options)
    busy = {(r, d): v for (r, d), v in table.attrs["totals"].items()}
    sums = {(int(r), int(d)): int(v) for (r, d), v in table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum().items()}
    assert sums == busy                                          # Σ self == busy, as every table
    rates = table[["tflops_per_s", "tb_per_s", "peak_pct", "intensity"]].to_numpy(np.float64)
    assert not np.isinf(rates).any() and not (rates < 0).any()   # never infinite, never negative
    return table


def truth_ns(truth, op: str) -> tuple[int, int]:
    """(kernels, Σ duration ns) of the activities whose innermost launching op is `op`, from the builder."""
    rows = [r for r in truth.rows() if r["op"] == op]
    return len(rows), sum(r["end_ns"] - r["start_ns"] for r in rows)


def test_planted_shapes_give_planted_rates(tmp_path):
    path, truth = planted(tmp_path, {"aten::addmm": ADDMM, "aten::native_layer_norm": NORM})
    table = shape_table(path)
    addmm = table[(table["key"] == "aten::addmm") & (table[S.INPUT_DIMS] == ADDMM[0])]
    assert len(addmm) == 1
    row = addmm.iloc[0]
    kernels, ns = truth_ns(truth, "aten::addmm")
    calls = 2 * 2 * STEPS                     # 2 Linear modules x 2 forward ops each, per step
    assert (row["count"], row["kernels"], row[S.DURATION_NS]) == (calls, kernels, ns)
    assert (row["flops"], row["bytes"], row["model"], row["dtype"]) == (ADDMM_FLOPS, ADDMM_BYTES, "gemm", "bf16")
    assert row["tflops_per_s"] == pytest.approx(ADDMM_FLOPS * calls / ns / 1e3, rel=1e-12)
    assert row["tb_per_s"] == pytest.approx(ADDMM_BYTES * calls / ns / 1e3, rel=1e-12)
    assert row["intensity"] == pytest.approx(ADDMM_FLOPS / ADDMM_BYTES)
    h100 = PEAKS["H100 SXM"]                  # the builder's deviceProperties: NVIDIA H100 80GB HBM3
    ridge = h100.tflops["bf16"] / h100.tbps
    assert row["bound"] == ("compute" if ADDMM_FLOPS / ADDMM_BYTES >= ridge else "memory")
    expected = (100 * row["tflops_per_s"] / h100.tflops["bf16"] if row["bound"] == "compute"
                else 100 * row["tb_per_s"] / h100.tbps)
    assert row["peak_pct"] == pytest.approx(expected)
    norm = table[table["key"] == "aten::native_layer_norm"].iloc[0]
    kernels, ns = truth_ns(truth, "aten::native_layer_norm")
    calls = 2 * STEPS                         # 1 LayerNorm module x 2 forward ops, per step
    assert (norm["count"], norm[S.DURATION_NS], norm["flops"], norm["bytes"]) == (calls, ns, NORM_FLOPS, NORM_BYTES)
    assert norm["bound"] == "memory"
    assert norm["peak_pct"] == pytest.approx(100 * NORM_BYTES * calls / ns / 1e3 / h100.tbps)
    # the header: how much time has a model, and against which peaks
    assert "H100 SXM" in table.attrs["level_facts"]["peaks"]
    modelled = table.loc[table["model"] != "", S.SELF_NS].sum() / table[S.SELF_NS].sum()
    assert table.attrs["level_facts"]["modelled"].startswith(f"{100 * modelled:.1f}%")
    # --top folds rows into <other>, which has no model: the share is still that of every row
    folded = traceattr.attribute(str(path), by="shape", cache=False, top=2)
    assert folded.attrs["level_facts"] == table.attrs["level_facts"] and (folded["key"] == "<other>").any()
    out = run_cli("summarize", path, "--by", "shape", "--top", "2", "--no-cache", "-q")
    assert f"modelled: {100 * modelled:.1f}%" in out.stdout


def test_peak_overrides_and_the_cli_in_every_format(tmp_path):
    path, _ = planted(tmp_path, {"aten::addmm": ADDMM})
    table = shape_table(path)
    row = table[table[S.INPUT_DIMS] == ADDMM[0]].iloc[0]
    out = run_cli("summarize", path, "--by", "shape", "--format", "csv", "--no-cache", "-q",
                  "--peak-tflops", "100", "--peak-tbps", "1")
    assert out.returncode == 0, out.stderr
    got = pd.read_csv(__import__("io").StringIO(out.stdout), keep_default_na=False)
    mine = got[got[S.INPUT_DIMS] == ADDMM[0]].iloc[0]
    intensity = ADDMM_FLOPS / ADDMM_BYTES
    assert mine["bound"] == ("compute" if intensity >= 100 / 1 else "memory")
    expected = row["tflops_per_s"] if intensity >= 100 else 100 * row["tb_per_s"] / 1
    assert float(mine["peak_pct"]) == pytest.approx(expected)
    assert int(mine["self_ns"]) == row[S.SELF_NS] and int(mine["count"]) == row["count"]
    api = traceattr.attribute(str(path), by="shape", cache=False, peak_tflops=100, peak_tbps=1)
    assert api.loc[api[S.INPUT_DIMS] == ADDMM[0], "peak_pct"].iloc[0] == pytest.approx(expected)
    with pytest.raises(TraceInputError, match="--peak-tbps"):
        traceattr.attribute(str(path), by="shape", cache=False, peak_tbps=float("inf"))
    with pytest.raises(TraceInputError, match="--by shape"):
        traceattr.attribute(str(path), by="op", cache=False, peak_tflops=10)
    for fmt in ("table", "markdown", "json"):
        out = run_cli("summarize", path, "--by", "shape", "--format", fmt, "--no-cache", "-q")
        assert out.returncode == 0 and "aten::addmm" in out.stdout, out.stderr
    out = run_cli("summarize", path, "--by", "shape", "--format", "parquet", "-o", tmp_path / "t.parquet",
                  "--no-cache", "-q")
    assert out.returncode == 0 and pd.read_parquet(tmp_path / "t.parquet")[S.SELF_NS].sum() == table[S.SELF_NS].sum()
    for bad in (["--peak-tflops", "0"], ["--peak-tbps", "-3"], ["--peak-tflops", "nan"]):
        out = run_cli("summarize", path, "--by", "shape", *bad, "--no-cache", "-q")
        assert out.returncode != 0 and "Traceback" not in out.stderr and "--peak" in out.stderr
    out = run_cli("summarize", path, "--by", "op", "--peak-tflops", "10", "--no-cache", "-q")
    assert out.returncode != 0 and "--by shape" in out.stderr


HOSTILE = {
    "negative": "[[1024], [-64, 512], [512, 1024], [], []]",
    "absurd": "[[1024], [4611686018427387904, 512], [512, 1024], [], []]",
    "strings": '[[1024], ["64", 512], [512, 1024], [], []]',
    "ranks": "[[1024], [64, 512, 1], [512, 1024], [], []]",
    "not a list": '"[[64, 512]]"',
    "deep": "[" * 60 + "]" * 60,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_shapes_have_no_numbers_and_a_note(tmp_path, case):
    shapes = {"aten::addmm": (HOSTILE[case], ADDMM[1], ADDMM[2]),
              "aten::native_layer_norm": (NORM[0], '["c10::Float9", "ScalarList", "x", "x", "Scalar"]', "")}
    path, _ = planted(tmp_path, shapes)
    table = shape_table(path)
    for op in ("aten::addmm", "aten::native_layer_norm"):
        rows = table[table["key"] == op]
        assert len(rows) and (rows["flops"] == -1).all() and rows["tflops_per_s"].isna().all()
    assert any("do not fit their model" in note for note in table.attrs["notes"])
    out = run_cli("summarize", path, "--by", "shape", "--no-cache")
    assert out.returncode == 0 and "Traceback" not in out.stderr


def test_zero_durations_and_no_shapes(tmp_path):
    """A modelled call whose only kernel lasted 0 ns has no rate (not an infinite one); a trace without
    record_shapes has rows but no numbers, and says how to get them."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
         "args": {"External id": 1, "Input Dims": [[8, 8], [8, 8]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 2,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 15, "dur": 0,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "other", "pid": 0, "tid": 7, "ts": 16, "dur": 3,
         "args": {"correlation": 99}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 PCIe"}]}))
    table = shape_table(path)
    mm = table[table["key"] == "aten::mm"].iloc[0]
    assert mm["flops"] == 2 * 8 * 8 * 8 and mm[S.DURATION_NS] == 0 and math.isnan(mm["tflops_per_s"])
    assert mm["bound"] == "" and math.isnan(mm["peak_pct"])
    assert any("no device duration" in note for note in table.attrs["notes"])
    del events[0]["args"]["Input Dims"], events[0]["args"]["Input type"]
    path.write_text(json.dumps({"traceEvents": events}))
    table = shape_table(path)
    assert (table["flops"] == -1).all()
    assert any("record_shapes=True" in note for note in table.attrs["notes"])
    assert any("no deviceProperties" in note for note in table.attrs["notes"])


def test_several_ranks_sum_before_the_rates(tmp_path):
    """Over ranks, count and duration are summed and the rate is computed from the sums."""
    for rank in (0, 1):
        spec = TraceSpec(ranks=(rank,), world_size=2, steps=STEPS, dropped_records=0, cuda_graph=False,
                         op_shapes={"aten::addmm": ADDMM}, seed=rank)
        write_trace(tmp_path / f"rank{rank}.json", spec, rank=rank)
    per_rank = shape_table(tmp_path)
    out = run_cli("summarize", tmp_path, "--by", "shape", "--format", "json", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    mine = [r for r in rows if r["key"] == "aten::addmm" and r[S.INPUT_DIMS] == ADDMM[0]][0]
    ours = per_rank[per_rank[S.INPUT_DIMS] == ADDMM[0]]
    calls, ns = int(ours["count"].sum()), int(ours[S.DURATION_NS].sum())
    assert (mine["count"], mine[S.DURATION_NS]) == (calls, ns)
    assert mine["tflops_per_s"] == pytest.approx(ADDMM_FLOPS * calls / ns / 1e3)


# --- TraceLens's golden tables of its MI300X test traces -------------------------------------------

GOLDEN = ("GEMM.csv", "SDPA_fwd.csv", "CONV_fwd.csv")


def _golden(folder) -> dict:
    """(op, Input Dims, Input type, Concrete Inputs) -> [calls, kernel µs, {FLOPs per call}], TraceLens's
    rows summed over what it also keys on (Input Strides)."""
    found: dict = defaultdict(lambda: [0, 0.0, set()])
    for name in GOLDEN:
        if not (folder / name).exists():
            continue
        with open(folder / name, encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                key = (row["name"], row["Input Dims_first"], json.dumps(ast.literal_eval(row["Input type_first"])),
                       json.dumps(ast.literal_eval(row["Concrete Inputs_first"])))
                entry = found[key]
                entry[0] += int(row["name_count"])
                entry[1] += float(row["Kernel Time (µs)_sum"])
                entry[2].add(round(float(row["GFLOPS_first"]) * 1e9))
    return found


def test_tracelens_golden_tables_agree():
    folder = SHARED_TRACES / "tracelens" / "mi300"
    traces = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not traces:
        pytest.skip(f"TraceLens's MI300X traces not found under {folder} (set TRACEATTR_SHARED_TRACES)")
    compared = 0
    for trace in traces:
        golden = _golden(folder / trace.name.replace(".json.gz", "_perf_report_csvs"))
        table = shape_table(trace)
        assert "MI300X" in table.attrs["level_facts"]["peaks"]
        ours = {(r.key, r.input_dims, r.input_types, r.concrete_inputs): r for r in table.itertuples()}
        for key, (calls, kernel_us, flops) in golden.items():
            row = ours[key]
            assert {row.flops} == flops, key                           # the same FLOPs per call, exactly
            assert row.count == calls, key
            # TraceLens sums float µs (about 1/1000 ns apart per kernel); ours are exact int ns
            assert abs(row.duration_ns - kernel_us * 1000) <= 2, key
            compared += 1
    assert compared >= 25
