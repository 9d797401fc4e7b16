"""Several runs under one folder: recognised from the decoded files and never merged.

A parent folder often holds more than one job (a control and a test run, sample sets, runs of different
world sizes). Merged, they made one impossible job (`span: 735004 s`, a straggler named across runs).
Files are grouped by folder (and, inside one folder, by world size and backend); groups are then joined
into runs, in time order, only when nothing says they are different runs:

* `distributedInfo` differs: another world size or backend, or present in one and absent in the other
  (torch records it whenever torch.distributed is up, so a file without it is another kind of job), unless
  the files without it hold only ranks the other's world lacks, named by their files or folders, and were
  recorded while it ran: one job, one of whose ranks was written without distributedInfo;
* the same rank appears in both with windows that overlap in time (one rank cannot be profiled twice at
  once), or from different host processes (a rank's windows come from one process; a new pid is a new job);
* their time spans lie far apart (more than FAR_APART_NS between them).

Within one folder nothing is split by rank or time: a `tensorboard_trace_handler` folder holds many windows
of one job (the loader still refuses two overlapping files of one rank there). One exception: files that carry
no rank at all (no distributedInfo, no rank in a name or rank map), written by several processes (as the loader
tells processes apart: discover._processes) whose time spans never overlap, are separate runs, one per process
(five models profiled one after another). Such files that do overlap in time are ranks of one job the loader
cannot tell apart: they stay one group, and the loader asks for --rank-map.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.errors import TraceDiscoveryError
from traceattr.io.decode import DecodedFile, placement_span
from traceattr.io.discover import mapped_rank, rank_from_folders, rank_from_name, rank_of, worker_prefix
from traceattr.io.header import parse_metadata

FAR_APART_NS = 12 * 3600 * 10**9      # windows of one job are minutes apart; runs of a study days apart


class SeveralRunsError(TraceDiscoveryError):
    """A path that holds several runs where one is needed (compare sides, convert, load): exit code 2."""

    def __init__(self, message: str, runs: list[str], split: tuple = (), paths: tuple = ()) -> None:
        super().__init__(message)
        self.runs = runs
        self.split = tuple(split)   # the Runs themselves when the raiser had them (members: positions in its list)
        self.paths = tuple(paths)   # per run, its files' paths, when the raiser had them


@dataclass(frozen=True)
class Run:
    name: str                 # the run's folder relative to the path given ("." for the path itself)
    members: tuple[int, ...]  # indices of its files in the decoded list


@dataclass
class _Group:
    """Files of one folder (one world size and backend), or a run being built from such groups."""
    members: list[int]
    folders: set[str]
    world_sizes: set[int]
    backends: set[str]
    start_ns: int
    end_ns: int
    by_rank: dict[int, list[tuple[int, int, frozenset]]] = field(default_factory=dict)  # (start, end, pids)
    named: bool = True           # every rank of it comes from distributedInfo, a rank map, a file or folder name
    label: str = ""              # a run of its own (unranked_runs): its name, and it joins no other group

    def accepts(self, other: "_Group") -> bool:
        if self.label or other.label:
            return False
        if len(self.backends | other.backends) > 1:
            return False
        if len(self.world_sizes | other.world_sizes) > 1 and not (self.completes(other) or other.completes(self)):
            return False
        timed = S.NO_TIME not in (self.start_ns, other.start_ns)
        if timed and (other.start_ns - self.end_ns > FAR_APART_NS or self.start_ns - other.end_ns > FAR_APART_NS):
            return False
        for rank in self.by_rank.keys() & other.by_rank.keys():
            mine, theirs = self.by_rank[rank], other.by_rank[rank]
            pids_mine = frozenset().union(*(p for _, _, p in mine))
            pids_theirs = frozenset().union(*(p for _, _, p in theirs))
            if pids_mine and pids_theirs and not pids_mine & pids_theirs:
                return False
            if any(s1 < e2 and s2 < e1 for s1, e1, _ in mine for s2, e2, _ in theirs):
                return False
        return True

    def widen(self, start_ns: int, end_ns: int) -> None:
        """The span joined with start_ns..end_ns; an untimed side (S.NO_TIME, below every time) adds nothing."""
        if start_ns == S.NO_TIME:
            return
        if self.start_ns == S.NO_TIME:
            self.start_ns, self.end_ns = start_ns, end_ns
        else:
            self.start_ns, self.end_ns = min(self.start_ns, start_ns), max(self.end_ns, end_ns)

    def completes(self, other: "_Group") -> bool:
        """Whether this group, without distributedInfo, holds only named ranks that `other`'s one world size
        expects and lacks, recorded while `other` ran (their time spans overlap)."""
        worlds = {w for w in other.world_sizes if w > 0}
        if self.world_sizes != {-1} or not self.named or len(worlds) != 1:
            return False
        (world,) = worlds
        ranks = set(self.by_rank)
        overlap = S.NO_TIME not in (self.start_ns, other.start_ns) and self.start_ns < other.end_ns \
            and other.start_ns < self.end_ns
        return overlap and ranks <= set(range(world)) and not ranks & set(other.by_rank)

    def absorb(self, other: "_Group") -> None:
        self.members += other.members
        self.folders |= other.folders
        self.world_sizes |= other.world_sizes
        self.backends |= other.backends
        self.widen(other.start_ns, other.end_ns)
        self.named &= other.named
        for rank, windows in other.by_rank.items():
            self.by_rank.setdefault(rank, []).extend(windows)


def split_runs(decoded: Sequence[DecodedFile], root: str | Path,
               rank_map: dict[str, int] | None = None) -> list[Run]:
    """The runs among `decoded` (files found under `root`), each a list of indices, in time order."""
    root = Path(root)
    if len(decoded) < 2 or root.is_file():
        return [Run(".", tuple(range(len(decoded))))]
    groups: dict[tuple, _Group] = {}
    unnamed: set[int] = set()           # files whose rank nothing names
    for index, file in enumerate(decoded):
        folder = _folder(file.path, root)
        world = {file.world_size}           # -1 (no distributedInfo) is a value of its own here
        backend = _backend(file.metadata)
        key = (folder, file.world_size, backend)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group([], {folder}, world, {backend} if backend else set(),
                                         file.start_ns, file.end_ns)
        group.members.append(index)
        group.widen(file.start_ns, file.end_ns)
        window = (*placement_span(file), _host_pids(file))
        group.by_rank.setdefault(rank_of(file.path, file.json_rank, rank_map, str(root)), []).append(window)
        named = file.json_rank >= 0 or _named_rank(file.path, rank_map, str(root))
        group.named &= named
        if not named:
            unnamed.add(index)
    candidates = [run for group in groups.values() for run in unranked_runs(group, decoded, unnamed)]
    runs: list[_Group] = []
    for group in sorted(candidates, key=lambda g: (g.start_ns, min(g.folders), g.label)):
        home = next((run for run in runs if run.accepts(group)), None)
        if home is None:
            runs.append(group)
        else:
            home.absorb(group)
    if len(runs) == 1:
        return [Run(".", tuple(range(len(decoded))))]
    return _named(runs, decoded, root)


def unranked_runs(group: _Group, decoded: Sequence[DecodedFile], unnamed: set[int]) -> list[_Group]:
    """A folder's group of files that carry no rank, as runs: one per process when they come from several
    processes whose spans (placement_span, over each process's files) never overlap; else the group itself
    (one process's windows, or ranks the loader cannot tell apart). A process is what the loader counts:
    tensorboard_trace_handler's worker name, the part of the file name before its first dot."""
    if not unnamed.issuperset(group.members):
        return [group]
    processes: dict[str, list[int]] = {}
    for i in group.members:
        processes.setdefault(worker_prefix(Path(decoded[i].path).name), []).append(i)
    if len(processes) < 2:
        return [group]
    spans = []
    for members in processes.values():
        timed = [placement_span(decoded[i]) for i in members if placement_span(decoded[i])[0] != S.NO_TIME]
        if timed:
            spans.append((min(s for s, _ in timed), max(e for _, e in timed)))
    spans.sort()
    if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
        return [group]
    (folder,) = group.folders
    runs = []
    for prefix, members in processes.items():
        name = _stem(Path(decoded[members[0]].path).name) if len(members) == 1 else prefix
        run = _Group(list(members), {folder}, {-1}, set(group.backends), S.NO_TIME, S.NO_TIME,
                     label=name if folder == "." else f"{folder}/{name}")
        for i in members:
            run.widen(decoded[i].start_ns, decoded[i].end_ns)
        runs.append(run)
    return runs


def _stem(name: str) -> str:
    """A trace file's name without .json / .json.gz."""
    for suffix in (".json.gz", ".json"):
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return name


def describe_runs(runs: list[Run], decoded: Sequence[DecodedFile]) -> str:
    """`a (2 files, world 2), b (1 file)`: for messages that name the runs."""
    parts = []
    for run in runs:
        worlds = sorted({decoded[i].world_size for i in run.members if decoded[i].world_size > 0})
        files = len(run.members)
        world = f", world {worlds[0]}" if len(worlds) == 1 else ""
        parts.append(f"{run.name} ({files} file{'s' * (files != 1)}{world})")
    return ", ".join(parts)


def _named(runs: list[_Group], decoded: Sequence[DecodedFile], root: Path) -> list[Run]:
    named: list[Run] = []
    seen: dict[str, int] = {}
    for run in runs:
        if run.label:
            named.append(Run(run.label, tuple(sorted(run.members))))
            continue
        parents = [Path(_folder(decoded[i].path, root)).parts for i in run.members]
        common = []
        for parts in zip(*parents):
            if len(set(parts)) != 1:
                break
            common.append(parts[0])
        name = "/".join(common) or "."
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} #{seen[name]}"
        named.append(Run(name, tuple(sorted(run.members))))
    return named


def _folder(path: str, root: Path) -> str:
    return _parent_folder(os.path.dirname(path), root)


@functools.lru_cache(maxsize=4096)
def _parent_folder(parent: str, root: Path) -> str:
    """The folder `parent` relative to `root`: asked once per folder (split_runs asks for every file)."""
    parent = Path(parent)
    try:
        return parent.relative_to(root).as_posix()
    except ValueError:
        return parent.as_posix()


def _named_rank(path: str, rank_map: dict[str, int] | None, root: str) -> bool:
    """Whether a file without distributedInfo has its rank from a rank map, its name or its folders (not
    the rank 0 a lone file is given)."""
    return bool(mapped_rank(path, rank_map)) or rank_from_name(Path(path).name) is not None \
        or rank_from_folders(path, root) is not None


@functools.lru_cache(maxsize=256)         # the same text on every file of a run (placement.shared_facts)
def _backend(metadata: str) -> str:
    info = (parse_metadata(metadata) or {}).get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    return backend if isinstance(backend, str) and backend not in ("", "none") else ""


def _host_pids(file: DecodedFile) -> frozenset:
    """OS process ids of the file's host events (string pids such as "Spans" have negative ids)."""
    if file.host_pids is not None:            # a driver's header facts (engine.placement.driver_facts)
        return frozenset(p for p in file.host_pids if p > 0)
    if not file.host.num_rows:
        return frozenset()
    pids = pc.unique(file.host.column(S.PID)).to_pylist()
    return frozenset(p for p in pids if p > 0)
