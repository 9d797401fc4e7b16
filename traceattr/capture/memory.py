"""CUDA allocator history for a window: on at the window's first step, capped, always turned off after."""

from __future__ import annotations

import inspect
from typing import Any


def _record(**kwargs: Any) -> None:
    import torch.cuda.memory as cuda_memory  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    record = cuda_memory._record_memory_history
    accepted = inspect.signature(record).parameters
    record(**{k: v for k, v in kwargs.items() if k in accepted})


def start_history(max_entries: int) -> None:
    # stacks="python": "all" (C++ frames too) made dumps take minutes in torchtitan
    _record(enabled="all", stacks="python", max_entries=max_entries)


def take_snapshot() -> Any:
    import torch.cuda.memory as cuda_memory  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    return cuda_memory._snapshot()


def stop_history() -> None:
    """Turn history off; never raises (called on every exit path)."""
    try:
        _record(enabled=None)
    except Exception:   # noqa: BLE001 - nothing to do if the allocator refuses
        pass
