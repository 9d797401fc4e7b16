"""`compare --by shape` (analysis/compare_shape.py): two builder runs with planted durations give the planted
per-call times, TFLOP/s and speed-ups, and the rows add up to the busy delta as every compare level's."""

from __future__ import annotations

import json

import pytest

import traceattr
from tests.clirun import run_cli
from tests.test_roofline import ADDMM, ADDMM_FLOPS
from traceattr.builder import TraceSpec, write_trace

# no overlapping streams (no side streams, collective or copies): a kernel's self time is its duration
BASE = dict(steps=3, dropped_records=0, cuda_graph=False, op_shapes={"aten::addmm": ADDMM}, collective=False,
            memcpy=False, streams=(7, 20, 24), seed=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("shape_runs")
    truths = [write_trace(root / name, TraceSpec(**BASE, **extra))
              for name, extra in (("a.json", {}), ("b.json", {"kernel_scale": {"gemm": 0.5}}))]
    return root / "a.json", root / "b.json", truths


def _per_call(truth, op: str, calls: int) -> float:
    return sum(r["end_ns"] - r["start_ns"] for r in truth.rows() if r["op"] == op) / calls


def test_planted_speedups(runs):
    a, b, (truth_a, truth_b) = runs
    table = traceattr.compare(str(a), str(b), by="shape", cache=False)
    keys = table[table["kind"].isin(["key", "other"])]
    assert int(keys["delta_ns"].sum()) == table.attrs["busy_b_ns"] - table.attrs["busy_a_ns"]
    (row,) = table[(table["input_dims"] == ADDMM[0])].to_dict("records")
    calls = 2 * 2 * 3                          # 2 Linear modules x 2 forward ops, 3 steps
    assert (row["a_count"], row["b_count"], row["flops"]) == (calls, calls, ADDMM_FLOPS)
    a_call, b_call = _per_call(truth_a, "aten::addmm", calls), _per_call(truth_b, "aten::addmm", calls)
    assert b_call < a_call                     # its GEMM kernels ran at half their time
    assert row["a_call_ns"] == round(a_call) and row["b_call_ns"] == round(b_call)
    assert row["speedup"] == pytest.approx(a_call / b_call, rel=1e-12)
    assert row["a_tflops_per_s"] == pytest.approx(ADDMM_FLOPS / a_call / 1e3, rel=1e-12)
    assert row["b_tflops_per_s"] == pytest.approx(ADDMM_FLOPS / b_call / 1e3, rel=1e-12)
    assert row["key"] == f"aten::addmm {ADDMM[0]}" and row["status"] == "changed"
    # an op untouched by the scale: speed-up 1
    norm = table[table["key"].str.startswith("aten::native_layer_norm [")]
    assert (norm["speedup"] == 1.0).all() and len(norm)


def test_cli_top_and_formats(runs):
    a, b, _ = runs
    out = run_cli("compare", a, b, "--by", "shape", "--top", "2", "--format", "json", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    rows = payload["rows"] if isinstance(payload, dict) else payload
    kinds = [r["kind"] for r in rows] if "kind" in rows[0] else None
    other = [r for r in rows if r["key"] == "<other>"]
    assert other and other[0]["speedup"] is None and other[0]["flops"] == -1
    assert kinds is None or "other" in kinds
    out = run_cli("compare", a, b, "--by", "shape", "--no-cache", "-q")
    assert out.returncode == 0 and "speedup" in out.stdout, out.stderr
    page = b.parent / "c.html"
    out = run_cli("compare", a, b, "--by", "shape", "--format", "html", "-o", page, "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    assert "compare by shape" in page.read_text(encoding="utf-8")
