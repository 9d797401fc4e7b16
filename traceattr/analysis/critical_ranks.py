"""The critical path across ranks: leave a rank at a collective and go on on the rank that arrived last.

Each file's map (analysis/critical.py) sends, beside its per-rank breakdown, the pieces the path is stitched
from: per step its tail (the step's end back to the last communication activity the path reaches) and per
communication activity the chain from its start back to the previous one, as linked fragments summed per
(kind, key) (attribution/critical_pieces.py). The reduce matches the collectives across ranks
(collectives.match_extract, with its clock alignment) and walks back from a step's end:

* at a communication activity whose instance's last arrival is another rank L, the activity counts only from
  that arrival (the transfer, `communication`) and the path continues on L from the start of L's activity,
  with L's piece before it (L was the one everybody waited for);
* at one this rank arrived last to (or alone, or unmatched), the whole activity counts and the path goes on
  with this rank's piece before it.

The path's length is Σ of its pieces: from the step's end on its rank back to the start of the step on the
rank the chain ends on, in aligned clocks (the two starts differ by the ranks' skew at the step's start).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.collectives import comm_frame, match_extract
from traceattr.attribution.critical import CRITICAL_NS, KEY, KIND, STEP
from traceattr.attribution.critical_pieces import END_NS, FRAGMENT, NEXT, START_NS, STOP_ROW

CHAIN = "chain"          # "rank 1 650000 ns > rank 0 170000 ns": the ranks the path went through, earliest first
PATH_NS = "path_ns"
END_RANK = "end_rank"    # the rank whose step ended last: the path starts from its end
_MAX_HOPS = 10_000_000


class _Files:
    """Every file's fragments (attribution/critical_pieces.py), looked up by (rank, window)."""

    def __init__(self, found: list) -> None:
        self.rows: dict[tuple[int, int], dict[int, list]] = {}
        self.meta: dict[tuple[int, int], dict] = {}
        self.activity: dict[tuple[int, int, int], int] = {}     # (rank, window, device row) -> fragment
        self.tail: dict[tuple[int, int], np.ndarray] = {}
        for rank, window, part in found:
            cross = part.get("cross")
            if cross is None:
                continue
            rows, by_fragment = cross["rows"], {}
            for fragment, kind, key, ns in zip(rows[FRAGMENT].tolist(), rows[KIND].tolist(), rows[KEY].tolist(),
                                               rows[CRITICAL_NS].tolist()):
                by_fragment.setdefault(fragment, []).append((kind, key, ns))
            self.rows[(rank, window)] = by_fragment
            self.meta[(rank, window)] = {name: values.tolist() for name, values in cross["meta"].items()}
            self.tail[(rank, window)] = cross["tail"]
            for row, fragment in zip(np.asarray(cross["comm"]["row"]).tolist(), cross["activity"].tolist()):
                self.activity[(rank, window, row)] = fragment


def across_ranks(found: list, loaded: set[int]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(rows per (step, rank, kind, key) of each step's cross-rank path from the rank that ended it last,
    one row per step with its chain, notes). `found`: [(rank, window, part)] of critical_map."""
    files = _Files(found)
    comm = [(rank, window, part["cross"]["comm"]) for rank, window, part in found
            if part.get("cross") is not None and len(part["cross"]["comm"][S.START_NS])]
    notes: list[str] = []
    keyed, instances, offsets = None, None, {}
    if comm:
        columns = {name: np.concatenate([c[name] for _, _, c in comm]) for name in comm[0][2]}
        columns[S.RANK] = np.concatenate([np.full(len(c[S.START_NS]), r, np.int64) for r, _, c in comm])
        columns[S.WINDOW] = np.concatenate([np.full(len(c[S.START_NS]), w, np.int64) for _, w, c in comm])
        keyed, instances, alignment, notes = match_extract(comm_frame(columns), loaded)
        offsets = alignment.offset_ns if alignment.applied else {}
    matched = _Matched(keyed, instances)
    offset = lambda rank: int(offsets.get(rank, 0))    # noqa: E731  a rank's clock minus the reference's

    ends: dict[str, list] = {}
    for rank, window, part in found:
        for i, (name, end) in enumerate(zip(part["step_names"], part["step_end_ns"])):
            ends.setdefault(name, []).append((end - offset(rank), rank, window, i, part))
    rows, chains = [], []
    for name, candidates in ends.items():
        _, rank, window, i, part = max(candidates, key=lambda c: c[:4])     # the rank whose step ended last
        if (rank, window) in files.meta:
            path_rows, chain = _stitch(files, matched, offset, rank, window, int(files.tail[(rank, window)][i]),
                                       name, notes)
        else:          # no communication in that file: its own path is the path
            own = pd.DataFrame(part["columns"])
            own = own[own[STEP] == name]
            path_rows = [(rank, k, key, ns) for k, key, ns in own[[KIND, KEY, CRITICAL_NS]].itertuples(index=False)]
            chain = [[rank, part["step_start_ns"][i] - offset(rank), part["step_end_ns"][i] - offset(rank)]]
        frame = pd.DataFrame(path_rows, columns=[S.RANK, KIND, KEY, CRITICAL_NS])
        frame = frame.groupby([S.RANK, KIND, KEY], as_index=False, sort=False)[CRITICAL_NS].sum()
        frame.insert(0, STEP, name)
        rows.append(frame)
        chains.append({STEP: name, END_RANK: rank, PATH_NS: int(frame[CRITICAL_NS].sum()), CHAIN: _chain_text(chain)})
    table = pd.concat(rows, ignore_index=True) if rows else _empty_rows()
    return table.astype({CRITICAL_NS: "int64", S.RANK: "int64"}), \
        pd.DataFrame(chains) if chains else _empty_chains(), notes


class _Matched:
    """The matched collectives: each activity's instance, and each instance's last rank and arrival."""

    def __init__(self, keyed: pd.DataFrame | None, instances: pd.DataFrame | None) -> None:
        self.index: dict[tuple[int, int, int], int] = {}
        if keyed is None:
            return
        self.index = {(r, w, row): i for i, (r, w, row) in enumerate(zip(
            keyed[S.RANK].tolist(), keyed[S.WINDOW].tolist(), keyed["row"].tolist()))}
        by_instance = instances.set_index(S.INSTANCE)
        self.last_rank = by_instance[S.LAST_RANK].to_dict()
        self.last_start = by_instance[S.LAST_START_NS].to_dict()
        first = keyed.sort_values("arrival_ns", kind="stable").drop_duplicates([S.INSTANCE, S.RANK])
        self.activity_of = {(i, r): (r, w, row) for i, r, w, row in zip(
            first[S.INSTANCE].tolist(), first[S.RANK].tolist(), first[S.WINDOW].tolist(), first["row"].tolist())}
        self.start, self.end = keyed[S.START_NS].tolist(), keyed[S.END_NS].tolist()
        self.name, self.instance = keyed[S.NAME].tolist(), keyed[S.INSTANCE].tolist()


def _stitch(files: _Files, matched: _Matched, offset, rank: int, window: int, fragment: int, name: str,
            notes: list[str]) -> tuple[list, list]:
    """The rows and chain of one step's path, from its tail fragment on (rank, window) back in time."""
    path_rows, chain = [], []
    for _ in range(_MAX_HOPS):
        meta = files.meta[(rank, window)]
        path_rows += [(rank, kind, key, ns) for kind, key, ns in files.rows[(rank, window)].get(fragment, [])]
        chain.append([rank, meta[START_NS][fragment] - offset(rank), meta[END_NS][fragment] - offset(rank)])
        if meta[NEXT][fragment] >= 0:
            fragment = meta[NEXT][fragment]
            continue
        stop = meta[STOP_ROW][fragment]
        if stop < 0:
            break
        i = matched.index.get((rank, window, stop))
        if i is None:           # not a matched activity: counted whole, the path stays on this rank
            notes.append(f"critical path across ranks: step {name}: rank {rank} activity row {stop} was not "
                         f"matched; counted whole")
            fragment = files.activity[(rank, window, stop)]
            continue
        start_ns, end_ns, key = matched.start[i], matched.end[i], str(matched.name[i])
        instance = matched.instance[i]
        last = int(matched.last_rank.get(instance, -1))
        target = matched.activity_of.get((instance, last)) if last >= 0 and last != rank else None
        if target is None or target not in files.activity:
            path_rows.append((rank, "communication", key, end_ns - start_ns))
            chain[-1][1] = start_ns - offset(rank)
            fragment = files.activity[(rank, window, stop)]
            continue
        # the last to arrive was another rank: this one's activity counts from that arrival (the transfer),
        # the rest of the path is the late rank's, from the start of its activity
        cut = min(max(int(matched.last_start[instance]) + offset(rank), start_ns), end_ns)
        path_rows.append((rank, "communication", key, end_ns - cut))
        chain[-1][1] = cut - offset(rank)
        rank, window = target[0], target[1]
        fragment = files.activity[target]
    else:
        notes.append(f"critical path across ranks: step {name}: stopped after {_MAX_HOPS} pieces")
    return path_rows, chain


def _chain_text(chain: list) -> str:
    """Consecutive pieces on one rank merged, earliest first: "rank 1 [0, 650000] > rank 0 [650000, 800000]"
    as "rank 1 650000 ns > rank 0 150000 ns"."""
    merged: list[list[int]] = []
    for rank, start, end in reversed(chain):
        if merged and merged[-1][0] == rank:
            merged[-1][2] = end
        else:
            merged.append([rank, start, end])
    return " > ".join(f"rank {rank} {end - start} ns" for rank, start, end in merged)


def _empty_rows() -> pd.DataFrame:
    return pd.DataFrame({STEP: pd.Series([], dtype="str"), S.RANK: pd.Series([], dtype="int64"),
                         KIND: pd.Series([], dtype="str"), KEY: pd.Series([], dtype="str"),
                         CRITICAL_NS: pd.Series([], dtype="int64")})


def _empty_chains() -> pd.DataFrame:
    return pd.DataFrame({STEP: pd.Series([], dtype="str"), END_RANK: pd.Series([], dtype="int64"),
                         PATH_NS: pd.Series([], dtype="int64"), CHAIN: pd.Series([], dtype="str")})

