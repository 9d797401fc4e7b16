"""traceattr.capture: per-rank Kineto traces plus exact kernel summaries, without ever hurting training.

    cfg = CaptureConfig(out_dir="traces/run1", ranks="all", wait=1, warmup=1, active=3, repeat=2)
    with traceattr.capture.profile(cfg) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    run = traceattr.capture.read_run("traces/run1")

This package is the only part of traceattr that imports torch.
"""

from traceattr.capture.config import CaptureConfig
from traceattr.capture.manifest import CaptureRun, read_run
from traceattr.capture.profiler import Profiler, profile
from traceattr.capture.status import CaptureStatus, KernelRow
from traceattr.errors import CaptureConfigError

__all__ = ["CaptureConfig", "CaptureConfigError", "CaptureRun", "CaptureStatus", "KernelRow", "Profiler", "profile",
           "read_run"]
