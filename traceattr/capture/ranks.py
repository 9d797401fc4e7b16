"""Which rank this process is, and whether the config selects it."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from traceattr.capture.config import ALL, CaptureConfig
from traceattr.capture.warn import warn


def distributed_initialized() -> bool:
    import torch.distributed as dist  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    return bool(dist.is_available() and dist.is_initialized())


def resolve_rank() -> tuple[int, int, str]:
    """(rank, world_size, source): torch.distributed when initialized, else RANK/WORLD_SIZE, else 0/1."""
    if distributed_initialized():
        import torch.distributed as dist  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

        return dist.get_rank(), dist.get_world_size(), "torch.distributed"
    if "RANK" in os.environ:
        rank = int(os.environ["RANK"])    # a malformed value raises: the caller turns it into a fault
        world = int(os.environ.get("WORLD_SIZE", rank + 1))
        return rank, world, "RANK/WORLD_SIZE environment"
    return 0, 1, "default (no torch.distributed, no RANK)"


def requested_ranks(ranks: Any) -> frozenset[int] | None:
    """The ranks a (validated) config asks for; None means all."""
    if ranks == ALL:
        return None
    if isinstance(ranks, int):
        return frozenset([ranks])
    return frozenset(ranks)


def out_of_range(ranks: Any, world_size: int) -> list[int]:
    """Requested ranks that do not exist in a world of this size."""
    wanted = requested_ranks(ranks)
    return [] if wanted is None else sorted(r for r in wanted if r >= world_size)


def is_selected(ranks: Any, rank: int) -> bool:
    wanted = requested_ranks(ranks)
    return wanted is None or rank in wanted


def agree_on_run_name(config: CaptureConfig, rank: int, world_size: int) -> CaptureConfig:
    """Fill in run_name; under torch.distributed rank 0's name is broadcast (so every rank calls start())."""
    resolved = config.resolve_run_name()
    if distributed_initialized() and world_size > 1:
        import torch.distributed as dist  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

        name = [resolved.out_dir]
        dist.broadcast_object_list(name, src=0)
        return dataclasses.replace(resolved, out_dir=name[0])
    if world_size > 1 and rank == 0:
        warn("traceattr.capture: run_name with several ranks and no torch.distributed: each rank fills in "
             "{time} itself; call cfg.resolve_run_name() once in the driver so all ranks share one folder")
    return resolved
