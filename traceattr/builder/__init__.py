"""Synthetic Kineto traces with known answers, for tests and benchmarks. Never imports torch.

    from traceattr.builder import TraceSpec, write_trace, write_trace_set
    truth = write_trace(tmp_path / "rank0.pt.trace.json", TraceSpec(steps=2, era="C"))
    truth.devices[0].busy_ns, truth.activities["module"][0], truth.rows()[:3]

Multi-rank runs whose collectives couple the ranks (clock offsets, late ranks, p2p, truncation):
    from traceattr.builder import MultiRankSpec, build_multirank
    truth = build_multirank(MultiRankSpec(ranks=4, extra_compute_ns={2: 70_000}), tmp_path)
"""

from traceattr.builder.multirank import MultiRankSpec, MultiRankTruth, build_multirank
from traceattr.builder.spec import DEFAULT_BASE_NS, ERAS, LAYOUTS, TraceSpec
from traceattr.builder.truth import ACTIVITY_FIELDS, DeviceTruth, TraceTruth, device_truth
from traceattr.builder.writer import resolve_target, write_events, write_trace, write_trace_set

__all__ = ["ACTIVITY_FIELDS", "DEFAULT_BASE_NS", "ERAS", "LAYOUTS", "DeviceTruth", "MultiRankSpec", "MultiRankTruth",
           "TraceSpec", "TraceTruth", "build_multirank", "device_truth", "resolve_target", "write_events",
           "write_trace", "write_trace_set"]
