"""Cost of Profiler.step() where capture does nothing: a disabled config and a non-selected rank.

Target: under 1 µs per call. Run: python3 benchmarks/bench_capture_step.py
"""

from __future__ import annotations

import os
import tempfile
import timeit

from traceattr.capture import CaptureConfig, Profiler

CALLS = 1_000_000


def per_call_ns(prof: Profiler) -> float:
    best = min(timeit.repeat(prof.step, number=CALLS, repeat=5))
    return best / CALLS * 1e9


def main() -> None:
    out = tempfile.mkdtemp(prefix="bench_capture_")
    disabled = Profiler(CaptureConfig(enabled=False))
    disabled.start()
    os.environ.update(RANK="1", WORLD_SIZE="2")
    other = Profiler(CaptureConfig(out_dir=out, ranks=0))
    assert other.start().state == "not_selected"
    empty = timeit.repeat(lambda: None, number=CALLS, repeat=5)
    print(f"disabled config : {per_call_ns(disabled):6.1f} ns per step()")
    print(f"non-selected rank: {per_call_ns(other):6.1f} ns per step()")
    print(f"(an empty lambda : {min(empty) / CALLS * 1e9:6.1f} ns per call)")


if __name__ == "__main__":
    main()
