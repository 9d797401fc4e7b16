"""The multi-rank columns of `summarize --by rank`: wait vs transfer, late arrivals, wait caused, clock offset,
and the straggler verdict for the header (collectives.py, straggler.py).

Per (rank, device): communication_wait_ns + communication_transfer_ns == communication_ns exactly (both are
shares of the communication kernels' self time); late_arrivals and wait_caused_ns sit on the rank's first
device row so that sums over rows stay per-rank figures; clock_offset_ns is the rank's estimated offset
(0 for the reference rank, and for every rank when nothing is shared).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.collectives import Collectives, alignment_facts
from traceattr.analysis.straggler import Straggler

COLUMNS = [S.COMMUNICATION_WAIT_NS, S.COMMUNICATION_TRANSFER_NS, S.LATE_ARRIVALS, S.WAIT_CAUSED_NS,
           S.CLOCK_OFFSET_NS]


def multirank_columns(table: pd.DataFrame, found: Collectives, verdict: Straggler, align: bool = True) -> pd.DataFrame:
    """`table` (summarize by rank) with COLUMNS appended and attrs `facts`/`notes` for the header, from the
    collectives matched over per-file extracts and the straggler verdict (analysis/multirank_plan.py).
    Judged only as far as the data allows: with one rank, waiting for another cannot be measured (wait and
    transfer are null: blank in csv, null in json, n/a in tables) and no straggler is named; clock offsets are
    those applied (0 when the alignment was not)."""
    keys = pd.MultiIndex.from_frame(table[[S.RANK, S.DEVICE]])
    per_rank = found.per_rank.set_index([S.RANK, S.DEVICE])
    out = table.copy()
    for name in COLUMNS[:4]:
        values = per_rank[name].reindex(keys).fillna(0).to_numpy(np.int64) if len(per_rank) else 0
        out[name] = np.zeros(len(out), np.int64) + values
    several = out[S.RANK].nunique() > 1
    if not several:
        for name in (S.COMMUNICATION_WAIT_NS, S.COMMUNICATION_TRANSFER_NS):
            out[name] = pd.array([pd.NA] * len(out), dtype="Int64")
    offsets = found.alignment.offset_ns if found.alignment.applied else {}
    out[S.CLOCK_OFFSET_NS] = out[S.RANK].map(offsets).fillna(0).astype("int64")
    facts = alignment_facts(found.alignment, align)
    notes = list(found.notes)
    if several:
        facts["straggler"] = verdict.summary()
        notes += [f"straggler rank {verdict.rank}: {line}" for line in verdict.details]
    elif verdict.absent:
        notes.append(f"one rank loaded: the collectives also expect rank(s) {verdict.absent}, whose traces are not "
                     "loaded (waiting and a straggler need two or more)")
    out.attrs["facts"] = facts
    out.attrs["straggler"] = verdict          # the findings' rule reads the verdict, not its text
    out.attrs["notes"] = notes
    return out
