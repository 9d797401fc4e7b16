"""Column names produced by the sweep and summaries that traceattr/schema.py does not define.

Shared names (rank, busy_ns, self_ns, ...) come from traceattr.schema; only the additions live here.
"""

from __future__ import annotations

from traceattr import schema as S

COMPUTE_NS = f"{S.COMPUTE}_ns"                # Σ self_ns of compute kernels
COMMUNICATION_NS = f"{S.COMMUNICATION}_ns"    # Σ self_ns of communication kernels
MEMCPY_NS = f"{S.MEMCPY}_ns"
MEMSET_NS = f"{S.MEMSET}_ns"
CATEGORY_NS = {S.COMPUTE: COMPUTE_NS, S.COMMUNICATION: COMMUNICATION_NS,
               S.MEMCPY: MEMCPY_NS, S.MEMSET: MEMSET_NS}
# per category: time when that category runs and no activity of another category does (on the same device);
# exposed_communication_ns (schema.py) is wider: communication running and no compute (memcpy may run too)
EXPOSED_NS = {name: f"{name}_exposed_ns" for name in S.DEVICE_CATEGORIES}
COMMUNICATION_RUNNING_NS = "communication_running_ns"   # time at least one communication activity runs
MAX_CONCURRENCY = "max_concurrency"           # most activities running at once (over non-empty segments)
SAME_STREAM_OVERLAP_NS = "same_stream_overlap_ns"   # Σ duration − union, per stream, summed over streams
