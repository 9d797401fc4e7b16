"""Building torch.profiler.profile from a CaptureConfig, on whichever torch version is installed."""

from __future__ import annotations

import inspect
import json
import warnings
from typing import Callable

from traceattr.capture.config import CaptureConfig, resolve_activities
from traceattr.capture.ranks import distributed_initialized


def torch_schedule(cfg: CaptureConfig) -> Callable:
    import torch.profiler as tp  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    return tp.schedule(skip_first=cfg.skip_first, wait=cfg.wait, warmup=cfg.warmup, active=cfg.active,
                       repeat=cfg.repeat)


def build_torch_profiler(cfg: CaptureConfig, schedule: Callable, on_trace_ready: Callable,
                         rank_info: dict) -> tuple[object, str]:
    """(the profiler, header text the writer must insert into each trace: "" when torch presets it).
    rank_info (rank, world_size, rank_source) goes into the trace's distributedInfo when torch.distributed
    is not running, since loaders need the rank in the file."""
    import torch.profiler as tp  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    wanted = dict(activities=resolve_activities(cfg.activities), schedule=schedule,
                  on_trace_ready=on_trace_ready, record_shapes=cfg.record_shapes,
                  profile_memory=cfg.profile_memory, with_stack=cfg.with_stack, with_flops=cfg.with_flops,
                  with_modules=cfg.with_modules)
    # we never read key_averages(), so torch's advice to set acc_events does not apply here
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
    accepted = inspect.signature(tp.profile.__init__).parameters
    prof = tp.profile(**{k: v for k, v in wanted.items() if k in accepted})
    if distributed_initialized():
        return prof, ""      # torch writes distributedInfo itself
    info = json.dumps({"backend": "none", **rank_info})
    if hasattr(prof, "preset_metadata_json"):
        prof.preset_metadata_json("distributedInfo", info)
        return prof, ""
    return prof, f'"distributedInfo": {info}, '    # older torch: the writer inserts it when it copies the trace
