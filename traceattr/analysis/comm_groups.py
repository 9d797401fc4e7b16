"""Process groups a trace implies without naming them (collectives.py's order matching).

Torch versions that record no `Seq` and no `Process Group Ranks` still write `Group size` on each
collective. Matched by order per lane (window, group name or stream, kind), the k-th collectives of every
rank that shows the lane were one instance: four disjoint 2-rank groups on one stream id made instances of
8 ranks, bus bandwidth with n = 8, and clock "offsets" of hundreds of µs between ranks that never differed.
An instance must never hold more ranks than its group.

Where a lane is shown by more ranks than its `Group size`, the ranks are paired by what the trace implies:
each participant's kernel waits until the last one arrives, so the k-th kernels of one group's ranks all run
at the instant the last arrives (they overlap pairwise); another group's, run at other times, do not. Per
k, the lane's k-th kernels are chained by overlap; ranks chained together at every k are a candidate group,
kept when it holds exactly `Group size` ranks whose k-th kernels share an instant at every k. Anything else
(groups that always run at once, clocks apart by more than a kernel, a rank whose group lost its trace)
stays unmatched: nothing in the trace tells who was with whom, and a guess would feed the wait, the skew,
the bandwidth and the clock alignment with instances that may not exist.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr.io.codes import pair_codes

NOT_ASKED = -2      # a row outside the lanes that need pairing: matched as before
UNMATCHED = -1      # a row of such a lane whose group could not be told


def inferred_groups(lane: np.ndarray, rank: np.ndarray, occurrence: np.ndarray, start_ns: np.ndarray,
                    end_ns: np.ndarray, group_size: np.ndarray, asked: np.ndarray) -> np.ndarray:
    """Per row: its inferred group (a code >= 0, unique across lanes), UNMATCHED, or NOT_ASKED. `lane`: the
    order-matching lane of each row, `occurrence`: the row's position among its rank's rows of that lane,
    `asked`: rows whose group the trace does not name (no `Process Group Ranks`). Only lanes whose rows say
    a `Group size` smaller than the number of ranks showing them are asked."""
    out = np.full(len(lane), NOT_ASKED, np.int64)
    rows = np.flatnonzero(asked & (group_size >= 1)) if len(lane) else np.zeros(0, np.int64)
    if not len(rows):
        return out
    rows = np.flatnonzero(asked & np.isin(lane, np.unique(lane[rows])))     # a lane's rows without a size too
    frame = pd.DataFrame({"lane": lane[rows], "rank": rank[rows], "k": occurrence[rows], "start": start_ns[rows],
                          "end": end_ns[rows], "size": group_size[rows], "row": rows})
    lanes = frame.groupby("lane").agg(ranks=("rank", "nunique"), size=("size", "max"))
    wide = lanes.index[(lanes["size"] >= 1) & (lanes["ranks"] > lanes["size"])]
    frame = frame[frame["lane"].isin(wide)]
    if frame.empty:
        return out
    member = pair_codes(frame["lane"].to_numpy(np.int64), frame["rank"].to_numpy(np.int64))
    frame["member"] = member
    # the k a lane's every rank reached: there all of its ranks must be told apart
    depth = frame.groupby(["lane", "rank"]).size().groupby(level="lane").min()
    checked = frame[frame["k"] < frame["lane"].map(depth)]
    component = _components(checked, member)
    frame["component"] = component[frame["member"].to_numpy()]
    checked = checked.assign(component=component[checked["member"].to_numpy()])
    # a component is a group when it has the lane's size and a common instant at every k
    common = checked.groupby(["component", "k"]).agg(start=("start", "max"), end=("end", "min"))
    shared = (common["start"] < common["end"]).groupby(level="component").all()
    ranks = frame.groupby("component")["rank"].nunique()
    size = frame.groupby("component")["lane"].first().map(lanes["size"])
    good = np.zeros(int(component.max()) + 1, bool)
    good[ranks.index.to_numpy()] = (shared.reindex(ranks.index, fill_value=False) & (ranks == size)).to_numpy(bool)
    told = frame["component"].to_numpy(np.int64)
    out[frame["row"].to_numpy()] = np.where(good[told], told, UNMATCHED)
    return out


def _components(checked: pd.DataFrame, member: np.ndarray) -> np.ndarray:
    """Per member (lane, rank) code: its candidate group, the members whose k-th kernels fall in the same
    chain of overlapping kernels at every k (a chain per (lane, k), by start; a new one where a kernel
    starts at or after the end of all before it)."""
    ordered = checked.sort_values(["lane", "k", "start"], kind="stable")
    segment = pair_codes(ordered["lane"].to_numpy(np.int64), ordered["k"].to_numpy(np.int64))
    reach = ordered["end"].groupby(segment).cummax().groupby(segment).shift(1)
    chain = np.cumsum((reach.isna() | (ordered["start"] >= reach)).to_numpy())
    # the chains of a member over its k's, as one hash (equal chains, equal hashes; a collision only joins
    # members the common-instant test then refuses)
    member_of = ordered["member"].to_numpy()
    order = np.argsort(member_of, kind="stable")
    starts = np.flatnonzero(np.r_[True, member_of[order][1:] != member_of[order][:-1]])
    signature = np.add.reduceat(_mix64(chain[order].astype(np.uint64)), starts)
    members = member_of[order][starts]
    lane_of_member = np.zeros(int(member.max()) + 1, np.int64)
    lane_of_member[ordered["member"].to_numpy()] = ordered["lane"].to_numpy(np.int64)
    component = np.full(int(member.max()) + 1, -1, np.int64)
    component[members] = pair_codes(lane_of_member[members], signature.view(np.int64))
    return component


def _mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: distinct inputs, well-spread 64-bit outputs (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
