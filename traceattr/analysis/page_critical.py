"""The HTML report's critical-path section (report/html.py): per rank, one step's path as segments over
time, with its time by kind. A Partial of the page's one map (analysis/page_plan.py): no second decode.

Each file's map solves its steps' paths (attribution/critical.py) and keeps them compact: consecutive
segments of one kind merged (the name of the longest piece kept for the tooltip), and past MAX_SEGMENTS a
run of segments each shorter than step/MAX_SEGMENTS drawn as one, of the kind with most time in it: a
picture of at most ~2 x MAX_SEGMENTS pieces per step that still tiles the step exactly. The reduce picks the
longest step of the run by name and shows that step on every rank that has it (else the rank's longest).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.attribution.critical import KIND, KINDS, STEP, STEP_NS, critical_paths
from traceattr.engine.partial import Partial, listed
from traceattr.model.traceset import TraceSet

NAME = "page critical"
MAX_SEGMENTS = 300          # a 9 in chart shows no more: the picture's resolution
START_NS, END_NS = "start_ns", "end_ns"      # a segment's times since its step's start
PIECES = "pieces"                            # path segments a drawn segment holds
LABEL = "label"                              # the longest piece's op or kernel name ("" for gaps and mixed runs)


@dataclass
class CriticalPage:
    segments: pd.DataFrame      # rank, step, start_ns, end_ns (since the step's start), kind, label, pieces
    steps: pd.DataFrame         # per rank: step, step_ns, and <kind>_ns for every kind (Σ == step_ns)
    notes: list[str] = field(default_factory=list)


def kind_column(kind: str) -> str:
    return f"{kind}_ns"


def file_paths(traceset: TraceSet) -> dict:
    """The map: every step's path of one file, compacted, as numpy columns (names coded)."""
    paths, notes = critical_paths(traceset)
    columns = {name: [] for name in ("step", START_NS, END_NS, KIND, LABEL, PIECES)}
    names: dict[str, int] = {}
    for index, path in enumerate(paths):
        start, end, kind, label, pieces = compact(path.seg_start - path.start_ns, path.seg_end - path.start_ns,
                                                  path.kind, path.name, path.end_ns - path.start_ns)
        columns["step"].append(np.full(len(start), index, np.int64))
        columns[START_NS].append(start)
        columns[END_NS].append(end)
        columns[KIND].append(kind)
        columns[LABEL].append(np.array([names.setdefault(str(text), len(names)) for text in label], np.int64))
        columns[PIECES].append(pieces)
    empty = {"step": np.int64, START_NS: np.int64, END_NS: np.int64, KIND: np.int8, LABEL: np.int64, PIECES: np.int64}
    return {"columns": {name: np.concatenate(parts) if parts else np.zeros(0, empty[name])
                        for name, parts in columns.items()},
            "names": list(names), "step_names": [path.step for path in paths],
            "step_ns": np.array([path.end_ns - path.start_ns for path in paths], np.int64), "notes": notes}


def compact(start: np.ndarray, end: np.ndarray, kind: np.ndarray, name: np.ndarray, step_ns: int,
            limit: int = MAX_SEGMENTS) -> tuple[np.ndarray, ...]:
    """(start, end, kind, label, pieces) of contiguous segments tiling the step: same-kind neighbours merged,
    then, past `limit`, runs of short segments merged into their main kind (label "")."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    kind, name = np.asarray(kind, np.int8), np.asarray(name, dtype=object)
    if not len(start):
        return start, end, kind, name, np.zeros(0, np.int64)
    start, end, kind, name, pieces = _merge(start, end, kind, name, np.ones(len(start), np.int64),
                                            np.r_[True, kind[1:] != kind[:-1]])
    if len(start) <= limit:
        return start, end, kind, name, pieces
    short = (end - start) < max(step_ns // limit, 1)
    opens = ~short | np.r_[True, ~short[:-1]]          # a long segment, or the first of a run of short ones
    run = np.cumsum(opens) - 1
    by_kind = np.zeros((int(run[-1]) + 1, len(KINDS)), np.int64)
    np.add.at(by_kind, (run, kind.astype(np.int64)), end - start)
    main = by_kind.argmax(1).astype(np.int8)
    start, end, _, name, pieces = _merge(start, end, kind, name, pieces, opens)
    several = np.add.reduceat(np.ones(len(run), np.int64), np.flatnonzero(opens)) > 1
    name[several] = ""
    return start, end, main, name, pieces


def _merge(start, end, kind, name, pieces, opens: np.ndarray):
    """Groups of consecutive segments (each opened where `opens`): first start, last end, first kind, the
    longest piece's name, Σ pieces."""
    at = np.flatnonzero(opens)
    group = np.cumsum(opens) - 1
    order = np.lexsort((-(end - start), group))        # per group, its longest piece first
    first_of_group = order[np.r_[True, group[order][1:] != group[order][:-1]]]
    return (start[at], end[np.r_[at[1:] - 1, len(end) - 1]], kind[at], name[first_of_group].copy(),
            np.add.reduceat(pieces, at))


def reduce_paths(found: list) -> CriticalPage:
    """The longest step of the run by name, on every rank (a rank without it: its own longest step)."""
    longest, notes = {}, []
    for rank, window, part in found:
        notes += [f"rank {rank} window {window}: {note}" for note in part["notes"]]
        for index, (name, ns) in enumerate(zip(part["step_names"], part["step_ns"].tolist())):
            longest.setdefault(rank, []).append((ns, name, index, part))
    if not longest:
        return CriticalPage(_segments_frame([]), _steps_frame([]), notes)
    chosen_name = max((entry for entries in longest.values() for entry in entries), key=lambda e: e[0])[1]
    segments, steps = [], []
    for rank in sorted(longest):
        entries = longest[rank]
        named = [entry for entry in entries if entry[1] == chosen_name]
        ns, name, index, part = max(named or entries, key=lambda e: e[0])
        columns = part["columns"]
        mine = columns["step"] == index
        labels = np.asarray(part["names"] + [""], dtype=object)[columns[LABEL][mine]]
        frame = pd.DataFrame({S.RANK: rank, STEP: name, START_NS: columns[START_NS][mine],
                              END_NS: columns[END_NS][mine], KIND: np.asarray(KINDS, object)[columns[KIND][mine]],
                              LABEL: labels, PIECES: columns[PIECES][mine]})
        segments.append(frame)
        by_kind = (frame[END_NS] - frame[START_NS]).groupby(frame[KIND]).sum()
        steps.append({S.RANK: rank, STEP: name, STEP_NS: ns,
                      **{kind_column(kind): int(by_kind.get(kind, 0)) for kind in KINDS}})
    return CriticalPage(_segments_frame(segments), _steps_frame(steps), notes)


def _segments_frame(frames: list) -> pd.DataFrame:
    if frames:
        return pd.concat(frames, ignore_index=True)
    return pd.DataFrame({S.RANK: pd.Series([], dtype="int64"), STEP: pd.Series([], dtype=object),
                         START_NS: pd.Series([], dtype="int64"), END_NS: pd.Series([], dtype="int64"),
                         KIND: pd.Series([], dtype=object), LABEL: pd.Series([], dtype=object),
                         PIECES: pd.Series([], dtype="int64")})


def _steps_frame(rows: list) -> pd.DataFrame:
    columns = [S.RANK, STEP, STEP_NS] + [kind_column(kind) for kind in KINDS]
    return pd.DataFrame(rows, columns=columns).astype({c: "int64" for c in columns if c != STEP})


EXTRACT = Partial(NAME, file_paths, listed(reduce_paths))
