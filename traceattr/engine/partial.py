"""Partials: an analysis computed per file and reduced exactly, as DuckDB's aggregate functions are.

A Partial names its map, map(Unit) -> part (in the worker, on one file: engine/units.py), and its state,
state() -> an object with
    update(index, part)      take one file's part (index: the file's position in the source)
    combine(other)           take another state's files (all after this one's: states of consecutive runs
                             of files combine in order, so any split of the files, reduced left to right,
                             gives the same result as one state)
    finalize(placement)      the result, once every file is placed (engine/placement.py): rank_of[index],
                             window_of[index] are that file's rank and window, -1 for a file the load skipped.
A part is small and picklable; a state keeps numpy columns tagged with the file's position
(engine/columns.py), never an object per file. map and state are top-level (they travel by name).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from traceattr.engine.placement import Placement


@dataclass(frozen=True)
class Partial:
    name: str
    map: Callable[[Any], Any]           # map(traceset), or map(unit) when `on_unit`
    state: Callable[[], Any]
    on_unit: bool = False               # map the Unit: what the task took before the host rows went (launch statuses)
    # probe(host table, device table) runs on the file's whole host table before a plan leaves host rows out
    # (UnitTask's host_probe); with one, map is called as map(traceset, probed)
    probe: Callable[[Any], Any] | None = None


def probes(extracts: tuple[Partial, ...], host, device) -> dict:
    """{name: probe(host, device)} of the partials that have a probe (UnitTask.host_probe of a plan)."""
    return {extract.name: extract.probe(host, device) for extract in extracts if extract.probe is not None}


class Listed:
    """A state for parts reduced all at once: holds each file's part as it came and calls
    reduce([(rank, window, part), ...]) over the kept files in load order. For parts that are small or that
    the reduce needs side by side; fold the others as they arrive (analysis/check_plan.py)."""

    def __init__(self, reduce: Callable[[list], Any]) -> None:
        self.reduce_list, self.found = reduce, []

    def update(self, index: int, found) -> None:
        self.found.append((index, found))

    def combine(self, other: "Listed") -> None:
        self.found += other.found

    def finalize(self, placement: Placement):
        rank_of, window_of = placement.rank_of, placement.window_of
        return self.reduce_list([(int(rank_of[i]), int(window_of[i]), found) for i, found in self.found
                                 if rank_of[i] >= 0])


def listed(reduce: Callable[[list], Any]) -> Callable[[], Listed]:
    """Partial(name, map, listed(reduce)): the state of a partial reduced from the list of its parts."""
    return functools.partial(Listed, reduce)
