"""`--by iteration`: `--by phase` one engine iteration at a time (analysis/phase.py reads the iterations).

One row per (rank, device, iteration) in start order: its phase, requests, tokens, start and end (epoch ns; duration_ns is
the range's wall time), and the self time of the activities it launched; activities launched outside every iteration are the device's `other` row,
those launched before the window its `<carried in>` row, so the rows of a (rank, device) sum to its busy time.
Every iteration of a rank has a row on each device of the rank, 0 ns when it launched nothing there.
`--top N` keeps each rank's N longest iterations and sums the rest (with_top).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.phase import (BEFORE as CARRIED, CONTEXT_TOKENS, GENERATION_TOKENS, NO_ITERATIONS_NOTE,
                                      PHASES, REQUESTS, device_sums, iterations, launched_in)
from traceattr.engine.partial import Partial, listed
from traceattr.model.traceset import TraceSet

LEVEL = "iteration"
ITERATION = "iteration"       # its number on the rank, in start order; -1 on the other and carried-in rows
PHASE = "phase"
OTHER_ITERATIONS = "<other iterations>"     # --top: the iterations not among the longest, summed
_ITERATION_COLUMNS = (PHASE, S.ITERATION_START_NS, S.ITERATION_END_NS, REQUESTS, CONTEXT_TOKENS, GENERATION_TOKENS)
# over ranks (analysis/across.py): an iteration's number, wall time, requests and tokens are one value per rank
# (their mean over the ranks that ran it), its start the earliest rank's, its end the latest's; never summed
ACROSS_RANKS = dict(rank_values=(ITERATION, S.DURATION_NS, REQUESTS, CONTEXT_TOKENS, GENERATION_TOKENS),
                    rank_first=(S.ITERATION_START_NS,), rank_last=(S.ITERATION_END_NS,))


def iteration_part(traceset: TraceSet) -> dict:
    """The map: per (rank, device, iteration of the file) the self ns and activity count, and the file's
    iterations (rank, phase, start, end, requests, tokens)."""
    found = iterations(traceset)
    sums = device_sums(traceset, launched_in(traceset, found), ITERATION)
    table = {S.RANK: (found["file"] >> 32).astype(np.int64), PHASE: found["phase"],
             S.ITERATION_START_NS: found["start"], S.ITERATION_END_NS: found["end"], REQUESTS: found["prefills"] + found["decodes"],
             CONTEXT_TOKENS: found["c_tokens"], GENERATION_TOKENS: found["g_tokens"]}
    return {"sums": sums, "iterations": table}


def reduce_parts(found: list[tuple[int, int, dict]]) -> pd.DataFrame:
    """The iteration table over the kept files' parts (rank relabelled; iteration codes made unique)."""
    sums, its, offset = [], [], 0
    for rank, _, part in found:
        frame = pd.DataFrame(part["sums"]).assign(**{S.RANK: rank})
        inside = frame[ITERATION] >= 0
        frame.loc[inside, ITERATION] += offset
        sums.append(frame)
        table = pd.DataFrame(part["iterations"]).assign(**{S.RANK: rank})
        table[ITERATION] = np.arange(offset, offset + len(table), dtype=np.int64)
        its.append(table)
        offset += len(table)
    sums = pd.concat(sums or [pd.DataFrame(columns=[S.RANK, S.DEVICE, ITERATION, S.SELF_NS, S.COUNT])],
                     ignore_index=True).astype("int64")
    its = pd.concat(its or [pd.DataFrame(columns=[S.RANK, ITERATION, *_ITERATION_COLUMNS])],
                    ignore_index=True).astype("int64")
    # each rank's iterations numbered from 0 in start order, on every device of the rank
    its = its.sort_values([S.RANK, S.ITERATION_START_NS, S.ITERATION_END_NS], kind="stable")
    its["number"] = its.groupby(S.RANK).cumcount().astype("int64")
    table = sums.groupby([S.RANK, S.DEVICE, ITERATION], as_index=False)[[S.SELF_NS, S.COUNT]].sum()
    devices = table[[S.RANK, S.DEVICE]].drop_duplicates()
    # merged without NaN in the epoch columns (a float64 column would round them to 256 ns)
    inside = devices.merge(its, on=S.RANK).merge(table[table[ITERATION] >= 0], how="left",
                                                 on=[S.RANK, S.DEVICE, ITERATION])
    inside = inside.fillna({S.SELF_NS: 0, S.COUNT: 0})
    outside = table[table[ITERATION] < 0].assign(
        **{PHASE: np.where(table.loc[table[ITERATION] < 0, ITERATION] == CARRIED, PHASES.index("<carried in>"),
                           PHASES.index("other")), "number": -1, S.ITERATION_START_NS: S.NO_INT,
           S.ITERATION_END_NS: S.NO_INT, REQUESTS: 0, CONTEXT_TOKENS: 0, GENERATION_TOKENS: 0})
    table = pd.concat([inside, outside], ignore_index=True)
    for name in (S.SELF_NS, S.COUNT, "number", *_ITERATION_COLUMNS):
        table[name] = table[name].astype("int64")
    outside = (table[ITERATION] < 0).to_numpy()
    # iterations in start order, then other, then carried in
    table["_order"] = np.where(outside, np.iinfo(np.int64).max - 3 - table[ITERATION], table["number"])
    table = table.sort_values([S.RANK, S.DEVICE, "_order"], kind="stable").reset_index(drop=True)
    outside = (table[ITERATION] < 0).to_numpy()      # in the sorted order
    phase = [PHASES[p] for p in table[PHASE].tolist()]
    table["key"] = [f"#{n} {p}" if n >= 0 else p for n, p in zip(table["number"].tolist(), phase)]
    table[PHASE] = phase
    table[ITERATION] = table.pop("number")
    table[S.DURATION_NS] = np.where(outside, S.NO_INT, table[S.ITERATION_END_NS] - table[S.ITERATION_START_NS])
    busy = table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].transform("sum")
    table[S.SELF_PCT] = np.where(busy > 0, 100.0 * table[S.SELF_NS] / busy.where(busy > 0, 1), 0.0)
    table = table[[S.RANK, S.DEVICE, "key", ITERATION, *_ITERATION_COLUMNS, S.DURATION_NS, S.COUNT, S.SELF_NS,
                   S.SELF_PCT]]
    table.attrs.update(level=LEVEL, notes=[] if len(its) else [NO_ITERATIONS_NOTE],
                       totals={(int(r), int(d)): int(v) for (r, d), v in
                               table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum().items()})
    return table


def in_start_order(table: pd.DataFrame) -> pd.DataFrame:
    """The table over ranks (across_ranks orders rows by self time) as the time series it is: iterations by
    number, the rows outside iterations last in the order they came."""
    outside = table[ITERATION] < 0
    return pd.concat([table[~outside].sort_values(ITERATION, kind="stable"), table[outside]], ignore_index=True)


def with_top(table: pd.DataFrame, top: int) -> pd.DataFrame:
    """`--top N` on a time series: each rank's N longest iterations (wall time; the earlier on a tie), still
    in start order and numbered as without --top; the rank's other iterations summed into one
    `<other iterations>` row per device (their activities' time and count, requests and tokens), before the
    `other` and `<carried in>` rows, so a (rank, device)'s rows still sum to its busy time."""
    attrs, inside = dict(table.attrs), table[ITERATION] >= 0
    its = table.loc[inside, [S.RANK, ITERATION, S.DURATION_NS]].drop_duplicates([S.RANK, ITERATION])
    its = its.sort_values([S.RANK, S.DURATION_NS, ITERATION], ascending=[True, False, True], kind="stable")
    longest = its[its.groupby(S.RANK).cumcount() < top]
    kept = ~inside | pd.MultiIndex.from_frame(table[[S.RANK, ITERATION]]).isin(
        pd.MultiIndex.from_frame(longest[[S.RANK, ITERATION]]))
    if kept.all():
        return table
    summed = [REQUESTS, CONTEXT_TOKENS, GENERATION_TOKENS, S.COUNT, S.SELF_NS]
    rest = table[~kept].groupby([S.RANK, S.DEVICE], as_index=False)[summed].sum()
    busy = table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum()
    busy = busy.reindex(pd.MultiIndex.from_frame(rest[[S.RANK, S.DEVICE]])).to_numpy(np.float64)
    rest = rest.assign(**{"key": OTHER_ITERATIONS, ITERATION: -1, PHASE: "", S.ITERATION_START_NS: S.NO_INT,
                          S.ITERATION_END_NS: S.NO_INT, S.DURATION_NS: S.NO_INT,
                          S.SELF_PCT: np.divide(100.0 * rest[S.SELF_NS].to_numpy(np.float64), busy,
                                                out=np.zeros(len(rest)), where=busy > 0)})
    # per (rank, device): the kept iterations (in their order), the rest, then the rows outside iterations
    place = np.where(inside[kept], 0, 2)
    table = pd.concat([table[kept].assign(_place=place), rest[table.columns].assign(_place=1)], ignore_index=True)
    table = table.sort_values([S.RANK, S.DEVICE, "_place"], kind="stable").drop(columns="_place")
    table = table.reset_index(drop=True).astype({c: "int64" for c in summed})
    others = len(its) - len(longest)
    table.attrs = attrs
    table.attrs["level_facts"] = {"shown": f"each rank's {top} longest iteration(s) (wall time), in start order; "
                                           f"{others} other iteration(s) summed in {OTHER_ITERATIONS}"}
    return table


EXTRACT = Partial(LEVEL, iteration_part, listed(reduce_parts))
