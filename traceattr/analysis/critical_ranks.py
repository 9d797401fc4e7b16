"""The critical path across ranks: leave a rank at a collective and go on on the rank that arrived last.

Each file's map (analysis/critical.py) sends, beside its per-rank breakdown, the pieces the path is stitched
from: per step its tail (the step's end back to the last communication activity the path reaches) and per
communication activity the chain from its start back to the previous one (attribution/critical.py
critical_pieces), each as rows per (kind, key). The reduce matches the collectives across ranks
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

PIECE = "piece"          # piece id within its file: >= 0 a communication activity (its comm row), < 0 a step tail
CHAIN = "chain"          # "rank 1 650 µs > rank 0 150 µs": the ranks the path went through, earliest first
PATH_NS = "path_ns"
END_RANK = "end_rank"    # the rank whose step ended last: the path starts from its end
_MAX_HOPS = 1_000_000


def piece_rows(paths, ids) -> dict[str, np.ndarray]:
    """Rows (piece, kind, key, critical_ns) of walked pieces, as columns."""
    frames = []
    for piece_id, path in zip(ids, paths):
        frame = path.breakdown()[[KIND, KEY, CRITICAL_NS]]
        frame.insert(0, PIECE, piece_id)
        frames.append(frame)
    if not frames:
        return {PIECE: np.zeros(0, np.int64), KIND: np.zeros(0, object), KEY: np.zeros(0, object),
                CRITICAL_NS: np.zeros(0, np.int64)}
    frame = pd.concat(frames, ignore_index=True)
    return {name: frame[name].to_numpy() for name in (PIECE, KIND, KEY, CRITICAL_NS)}


class _Pieces:
    """Every file's pieces, looked up by (rank, window, piece id)."""

    def __init__(self, found: list) -> None:
        self.rows: dict[tuple[int, int, int], list[tuple[str, str, int]]] = {}
        self.meta: dict[tuple[int, int, int], tuple[int, int, int]] = {}    # stop row, origin ns, end ns
        for rank, window, part in found:
            cross = part.get("cross")
            if cross is None:
                continue
            rows = cross["rows"]
            for piece, kind, key, ns in zip(rows[PIECE].tolist(), rows[KIND].tolist(), rows[KEY].tolist(),
                                            rows[CRITICAL_NS].tolist()):
                self.rows.setdefault((rank, window, piece), []).append((kind, key, ns))
            meta = cross["meta"]
            for piece, stop, origin, end in zip(meta[PIECE].tolist(), meta["stop_row"].tolist(),
                                                meta["origin_ns"].tolist(), meta["end_ns"].tolist()):
                self.meta[(rank, window, piece)] = (stop, origin, end)


def across_ranks(found: list, loaded: set[int]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(rows per (step, rank, kind, key) of each step's cross-rank path from the rank that ended it last,
    one row per step with its chain, notes). `found`: [(rank, window, part)] of critical_map."""
    pieces = _Pieces(found)
    comm = [(rank, window, part["cross"]["comm"]) for rank, window, part in found
            if part.get("cross") is not None and len(part["cross"]["comm"][S.START_NS])]
    if not comm:
        return _empty_rows(), _empty_chains(), []
    columns = {}
    for name in comm[0][2]:
        columns[name] = np.concatenate([c[name] for _, _, c in comm])
    columns[S.RANK] = np.concatenate([np.full(len(c[S.START_NS]), r, np.int64) for r, _, c in comm])
    columns[S.WINDOW] = np.concatenate([np.full(len(c[S.START_NS]), w, np.int64) for _, w, c in comm])
    keyed, instances, alignment, notes = match_extract(comm_frame(columns), loaded)
    offsets = alignment.offset_ns if alignment.applied else {}
    offset = lambda rank: int(offsets.get(rank, 0))    # noqa: E731  a rank's clock minus the reference's
    index = {(r, w, row): i for i, (r, w, row) in enumerate(zip(
        keyed[S.RANK].tolist(), keyed[S.WINDOW].tolist(), keyed["row"].tolist()))}
    by_instance = instances.set_index(S.INSTANCE)
    first_of = keyed.sort_values("arrival_ns", kind="stable").drop_duplicates([S.INSTANCE, S.RANK])
    activity_of = {(i, r): (r, w, row) for i, r, w, row in zip(
        first_of[S.INSTANCE].tolist(), first_of[S.RANK].tolist(), first_of[S.WINDOW].tolist(),
        first_of["row"].tolist())}
    k_start, k_end = keyed[S.START_NS].to_numpy(np.int64), keyed[S.END_NS].to_numpy(np.int64)
    k_name, k_instance = keyed[S.NAME].to_numpy(object), keyed[S.INSTANCE].to_numpy(np.int64)

    steps = [(r, w, p) for (r, w, p) in pieces.meta if p < 0]
    step_names = {(rank, window): part["step_names"] for rank, window, part in found}
    rows, chains = [], []
    ends = {}
    for rank, window, tail in steps:
        name = step_names[(rank, window)][-tail - 1]
        _, _, end = pieces.meta[(rank, window, tail)]
        ends.setdefault(name, []).append((end - offset(rank), rank, window, tail))
    for name, candidates in ends.items():
        end_aligned, rank, window, piece = max(candidates)      # the rank whose step ended last
        path_rows, chain = [], []
        current = (rank, window, piece)
        for _ in range(_MAX_HOPS):
            stop, origin, end = pieces.meta.get(current, (-1, None, None))
            if origin is None:
                notes.append(f"critical path across ranks: step {name}: no piece for rank {current[0]} "
                             f"activity {current[2]}; the path ends there")
                break
            r = current[0]
            path_rows += [(r, kind, key, ns) for kind, key, ns in pieces.rows.get(current, [])]
            chain.append([r, origin - offset(r), end - offset(r)])
            if stop < 0:
                break
            i = index.get((r, current[1], stop))
            start_ns, end_ns = (int(k_start[i]), int(k_end[i])) if i is not None else (origin, origin)
            key = str(k_name[i]) if i is not None else ""
            last = int(by_instance.at[k_instance[i], S.LAST_RANK]) if i is not None else -1
            target = activity_of.get((int(k_instance[i]), last)) if i is not None and last >= 0 else None
            if last < 0 or last == r or target is None or (target[0], target[1], target[2]) not in pieces.meta:
                path_rows.append((r, "communication", key, end_ns - start_ns))
                chain[-1][1] = start_ns - offset(r)
                current = (r, current[1], stop)
                continue
            cut = int(by_instance.at[k_instance[i], S.LAST_START_NS]) + offset(r)
            cut = min(max(cut, start_ns), end_ns)
            path_rows.append((r, "communication", key, end_ns - cut))
            chain[-1][1] = cut - offset(r)
            current = target
        frame = pd.DataFrame(path_rows, columns=[S.RANK, KIND, KEY, CRITICAL_NS])
        frame = frame.groupby([S.RANK, KIND, KEY], as_index=False, sort=False)[CRITICAL_NS].sum()
        frame.insert(0, STEP, name)
        rows.append(frame)
        total = int(frame[CRITICAL_NS].sum())
        chains.append({STEP: name, END_RANK: rank, PATH_NS: total, CHAIN: _chain_text(chain)})
    table = pd.concat(rows, ignore_index=True) if rows else _empty_rows()
    return table, pd.DataFrame(chains) if chains else _empty_chains(), notes


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

