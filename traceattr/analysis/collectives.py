"""Collectives matched across ranks: instances, clock alignment, wait vs transfer (docs/collectives.md).

Shaped as a map and a reduce: `comm_extract` keeps, per file, one small row per communication activity
(rank, device, kind, group, seq, bytes, start/end, self ns); `match_extract` works on those rows alone; the
exact wait/transfer split then needs each activity's cut time (the last participant's arrival, from the
reduce) and its own file's segments (`attribution/cut.py`): a second per-file step.

Matching, per communication activity:
* point-to-point (`Src Rank` and `Dst Rank` known): the n-th transfer between the pair on each side;
* else process group + `Seq` when both are known (the group's ranks from `Process Group Ranks`);
* else the order of occurrence per (window, process group or stream, kind), with a note.
A participant expected (group ranks, or every rank that shows the key) but absent is listed in
`missing_ranks`, never dropped silently.

Alignment: a collective ends at nearly the same instant on all participants, so end(r, c) = T(c) + o(r).
Offsets o (reference: the lowest rank, o = 0) and instants T are solved by alternating medians over all
shared collectives, from offsets grown outwards from the reference rank through shared collectives; the
residual is the median over collectives of the spread of aligned ends. Offsets are applied to arrivals (and
so to skew and wait) only when they shrink that residual, or when one rank's own residual (the median spread
of the collectives it takes part in) shrinks by more than the residual: a rank off in a few collectives
only, which the median over all leaves unseen; per-device busy and self times never move.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.comm_groups import NOT_ASKED, UNMATCHED, inferred_groups
from traceattr.attribution.hosttree import dense_codes, file_key, runtime_mask
from traceattr.attribution.sweep import sweep
from traceattr.io.comm_rules import innermost_range
from traceattr.io.codes import pair_codes, text_codes
from traceattr.model.traceset import TraceSet
from traceattr.units import human_ns

ROW = "row"                  # the activity's row in traceset.device
RESIDUAL_WARN_NS = 100_000   # ends of one collective agree within µs on real clusters: more is a warning
P2P = "p2p"
GROUP_SEQ = "group+seq"
ORDER = "order"
UNMATCHED_BY = "unmatched"   # Group size below the ranks that show a lane, and their groups not told (comm_groups)
GROUP_N = "group_n"          # per activity: its group's size for the bus bandwidth (_group_n)
COUNT_COLUMN = S.COUNT

INSTANCE_COLUMNS = [S.INSTANCE, S.COLLECTIVE, S.PROCESS_GROUP, S.SEQ, S.RANKS, S.MISSING_RANKS, S.MATCHED_BY,
                    S.BYTES, S.FIRST_START_NS, S.LAST_START_NS, S.ARRIVAL_SKEW_NS, S.LAST_RANK,
                    S.TRANSFER_NS, S.WAIT_NS, S.ALGBW_GBPS, S.BUSBW_GBPS]
AGGREGATE_COLUMNS = [S.COLLECTIVE, S.PROCESS_GROUP, S.BYTES, COUNT_COLUMN, "skew_mean_ns", "skew_p50_ns",
                     "skew_p99_ns", "transfer_mean_ns", "transfer_p50_ns", "transfer_p99_ns", S.WAIT_NS]

# nccl-tests (doc/PERFORMANCE.md): busbw = algbw x factor(n)
_BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
               "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
               "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "barrier", "sendrecv",
          "reduce", "gather", "scatter")


@dataclass(frozen=True)
class Alignment:
    offset_ns: dict[int, int]        # per rank, against the reference rank (o = 0)
    residual_before_ns: int          # median spread of collective ends, raw clocks (-1: nothing shared)
    residual_after_ns: int           # the same with the offsets removed
    applied: bool                    # offsets used for arrival/skew/wait (they shrank the residual, or a rank's own)
    residual_max_ns: int = -1        # largest spread after what was applied
    residual_max_raw_ns: int = -1    # largest spread on raw clocks


@dataclass(frozen=True)
class Collectives:
    instances: pd.DataFrame          # INSTANCE_COLUMNS, one row per collective instance
    activities: pd.DataFrame         # one row per communication activity: its instance, wait and transfer ns
    per_rank: pd.DataFrame           # rank, device, communication_wait_ns, communication_transfer_ns, ...
    alignment: Alignment
    notes: list[str] = field(default_factory=list)


# --- map: the per-file extract ----------------------------------------------------------------------

def comm_extract(traceset: TraceSet) -> pd.DataFrame:
    """One row per communication activity with what matching needs (small: a few per step per rank)."""
    return comm_frame(comm_columns(traceset))


COMM_COLUMNS = [S.RANK, S.WINDOW, S.DEVICE, S.STREAM, S.NAME, S.COLLECTIVE, S.PROCESS_GROUP, S.GROUP_RANKS, S.SEQ,
                S.COMM_BYTES, S.SRC_RANK, S.DST_RANK, S.GROUP_SIZE, S.START_NS, S.END_NS, S.CORRELATION]


# what the instance keys and the clock alignment read (clock_alignment); start_ns and the group's ranks and
# size tell the groups of a lane whose group size is below the ranks that show it (comm_groups.py)
KEY_COLUMNS = [S.RANK, S.WINDOW, S.STREAM, S.KIND, S.PROCESS_GROUP, S.GROUP_RANKS, S.GROUP_SIZE, S.SEQ, S.SRC_RANK,
               S.DST_RANK, S.START_NS, S.END_NS]
# what clock_alignment reads, with comm_frame's order: the rows the check keeps for its clock skew
CLOCK_COLUMNS = KEY_COLUMNS + [S.DEVICE]
COMM_ORDER = [S.RANK, S.START_NS, S.DEVICE, S.STREAM]     # comm_frame's (stable) row order
SHARED_TEXTS = (S.COLLECTIVE, S.PROCESS_GROUP, S.GROUP_RANKS)
_OBJECT_TEXTS = SHARED_TEXTS + (S.NAME,)      # comm_frame keeps these as the objects they are


def comm_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """comm_extract's rows as plain numpy columns, before any pandas: cheap per file, and comm_frame of
    several files' columns concatenated is one frame (the per-file map-reduce sends these)."""
    device = traceset.device
    is_comm = np.asarray(pc.equal(device.column(S.CATEGORY), S.COMMUNICATION).to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(is_comm)
    # filter, not take: arrow's take on a chunked table concatenated every column first (+14 MB of names on a
    # 200 MB trace, the map step's peak) to pick a few hundred rows
    picked = device.select(COMM_COLUMNS).filter(pa.array(is_comm))
    columns = {name: picked.column(name).to_numpy(zero_copy_only=False) for name in COMM_COLUMNS}
    columns[ROW] = rows
    columns[S.SELF_NS] = sweep(traceset).self_ns[rows] if len(rows) else np.zeros(0, np.int64)
    columns[S.COMM_ANNOTATION] = launch_annotations(traceset, rows)
    return columns


COMM_ANNOTATIONS = r"^(?:nccl|gloo):"     # the ranges torch's process groups open around a collective's work


def launch_annotations(traceset: TraceSet, rows: np.ndarray) -> np.ndarray:
    """Per device row in `rows`: the name of the innermost `nccl:<kind>` / `gloo:<kind>` user_annotation
    around its launch on the launching thread (the runtime call with its correlation in its file, the
    earliest when several share it, as attribution/links.py links them), "" when none. The search runs on
    those annotations and launches alone (a few per step), not on the file's host tree."""
    out = np.full(len(rows), "", object)
    host = traceset.host
    if not len(rows) or host.num_rows == 0:
        return out
    category = host.column(S.CATEGORY)
    annotations = np.flatnonzero(np.asarray(pc.equal(category, S.USER_ANNOTATION).to_numpy(zero_copy_only=False), bool))
    names = host.column(S.NAME).take(pa.array(annotations, pa.int64()))      # the few annotations' names only
    is_comm = np.asarray(pc.match_substring_regex(names, COMM_ANNOTATIONS).to_numpy(zero_copy_only=False), bool)
    annotations, names = annotations[is_comm], np.asarray(names.filter(pa.array(is_comm)).to_pylist(), object)
    if not len(annotations):
        return out
    column = lambda table, name: np.asarray(table.column(name).to_numpy(), np.int64)  # noqa: E731
    device = traceset.device
    wanted = column(device, S.CORRELATION)[rows]
    host_corr = column(host, S.CORRELATION)
    probes = np.flatnonzero(runtime_mask(category) & np.isin(host_corr, wanted[wanted >= 0]))
    if not len(probes):
        return out
    host_file = file_key(column(host, S.RANK), column(host, S.WINDOW))
    start = column(host, S.START_NS)
    # each activity's launch: the earliest runtime call of its file with its correlation
    pair = dense_codes(np.concatenate([host_file[probes], file_key(column(device, S.RANK)[rows],
                                                                   column(device, S.WINDOW)[rows])]),
                       np.concatenate([host_corr[probes], wanted]))
    probe_key, row_key = pair[:len(probes)], pair[len(probes):]
    order = np.lexsort((start[probes], probe_key))
    probe_key, probes = probe_key[order], probes[order]
    at = np.minimum(np.searchsorted(probe_key, row_key), len(probe_key) - 1)
    linked = (probe_key[at] == row_key) & (wanted >= 0)
    launch = probes[at[linked]]
    thread = dense_codes(host_file, column(host, S.PID), column(host, S.TID))
    inner = innermost_range(thread[annotations], start[annotations], column(host, S.END_NS)[annotations],
                            thread[launch], start[launch])
    out[np.flatnonzero(linked)[inner >= 0]] = names[inner[inner >= 0]]
    return out


def comm_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """comm_columns (of one file, or of several concatenated) as comm_extract's frame."""
    picked = pa.table({name: pa.array(columns[name], type=S.DEVICE_SCHEMA.field(name).type, from_pandas=True)
                       for name in COMM_COLUMNS if name not in _OBJECT_TEXTS}).to_pandas()
    for name in _OBJECT_TEXTS:
        # the texts stay the objects they are (one per distinct value when the driver interned them):
        # through arrow every row would get its own copy, and `Process Group Ranks` lists every rank of
        # the group (kilobytes per row at 1024 ranks: 100+ MB of copies on the driver). Tables built by
        # hand may hold nulls.
        values = np.asarray(columns[name], dtype=object)
        texts = np.where(pd.isna(values), "", values) if len(values) else values
        picked[name] = pd.Series(texts, index=picked.index, dtype=object)   # not inferred as arrow strings
    picked = picked[COMM_COLUMNS]
    for name in (S.SEQ, S.COMM_BYTES, S.SRC_RANK, S.DST_RANK, S.GROUP_SIZE):
        picked[name] = picked[name].fillna(S.NO_INT).astype("int64")
    picked[ROW] = columns[ROW]
    picked[S.SELF_NS] = columns[S.SELF_NS]
    annotation = columns.get(S.COMM_ANNOTATION)
    picked[S.KIND] = _kinds(picked[S.COLLECTIVE].to_numpy(object),
                            np.full(len(picked), "", object) if annotation is None else np.asarray(annotation, object),
                            picked[S.NAME].to_numpy(object))
    picked[S.RANK] = picked[S.RANK].astype("int64")
    picked[S.WINDOW] = picked[S.WINDOW].astype("int64")
    return picked.sort_values(COMM_ORDER, kind="stable").reset_index(drop=True)


def clock_columns(traceset: TraceSet) -> dict[str, np.ndarray]:
    """A file's comm_extract rows cut to CLOCK_COLUMNS, as numpy columns: what the check's clock skew needs
    (at 1024 ranks the check holds tens of thousands of these rows; the other columns doubled them)."""
    frame = comm_frame(comm_columns(traceset))
    return {name: frame[name].to_numpy() for name in CLOCK_COLUMNS}


def clock_frame(columns: dict[str, np.ndarray], rows: np.ndarray) -> pd.DataFrame:
    """The `rows` of clock_columns of several files concatenated (ranks and windows relabelled) as one
    frame: comm_frame's rows and order, cut to CLOCK_COLUMNS (clock_alignment of either is the same). Takes
    the columns out of `columns` (comm_ordered)."""
    clock = {name: columns.pop(name) for name in CLOCK_COLUMNS}
    return comm_ordered(clock, rows, [name for name, values in clock.items() if values.dtype == object])


def comm_ordered(columns: dict[str, np.ndarray], rows: np.ndarray, texts) -> pd.DataFrame:
    """The `rows` of communication columns (ranks and windows relabelled) as one frame in comm_frame's row
    order (COMM_ORDER, stable). One sorted copy of each column is made, each column taken out of `columns`
    as it goes, and framed without a copy: at 1024 ranks a filter, a frame, its consolidated block and a
    sorted copy were the driver's peak. The `texts` columns stay the objects they are (comm_frame says why)."""
    order = rows[np.lexsort([columns[name][rows] for name in reversed(COMM_ORDER)])]
    frame = {}
    for name in list(columns):
        values = columns.pop(name)[order]
        frame[name] = pd.Series(values, dtype=object, copy=False) if name in texts else values
    return pd.DataFrame(frame, copy=False)


def kind_of(collective: str, annotation: str, name: str) -> str:
    """The collective kind, from what the trace says the call was: the `Collective name` arg (torch copies
    record_param_comms' onto NCCL kernels), else the `nccl:<kind>` / `gloo:<kind>` annotation around the
    launch (DLRM's all-to-alls run as SendRecv kernels inside `nccl:all_to_all`: the kernel name alone says
    sendrecv), else an NCCL kernel name (ncclDevKernel_AllReduce_... -> allreduce), else the kernel name
    without templates and arguments."""
    text = collective or annotation.partition(":")[2]
    if not text:
        found = re.search(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
        text = found.group(1) if found else ""
    if text:
        flat = text.lower().replace("_", "")
        if flat in ("send", "recv") or "sendrecv" in flat:
            return "sendrecv"
        for kind in _KINDS:
            if kind in flat:
                return kind
        return flat
    short = re.sub(r"^void\s+", "", name.split("(")[0])
    return re.sub(r"<.*>", "", short).strip() or name


def _kinds(collectives: np.ndarray, annotations: np.ndarray, names: np.ndarray) -> np.ndarray:
    cache: dict[tuple[str, str, str], str] = {}
    out = np.empty(len(names), object)
    for i, key in enumerate(zip(collectives.tolist(), annotations.tolist(), names.tolist())):
        kind = cache.get(key)
        if kind is None:
            kind = cache[key] = kind_of(*key)
        out[i] = kind
    return out


def parse_ranks(text: str) -> tuple[int, ...] | None:
    """`Process Group Ranks` ("[0, 1, 2]") -> (0, 1, 2); None when absent or malformed (rank_array)."""
    ranks = rank_array(text)
    return None if ranks is None else tuple(ranks.tolist())


_RANK_LIST = re.compile(r"[0-9,\s]*")     # a plain character class: a grouped, repeated pattern kept a
                                            # backtracking mark per element (467 MB on a list of 2 M ranks)
_EMPTY_ELEMENTS = re.compile(r",[\s,]*,")


def rank_array(text: str) -> np.ndarray | None:
    """`Process Group Ranks` ("[0, 1, 2]") as an int64 array; None when absent or malformed: an element not of
    1-9 ASCII digits, or a rank twice (empty elements are skipped). In numpy: a hostile group of 2 M ranks
    read as Python ints took 7 s and 290 MB; this, 0.2 s and 31 MB."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]") and _RANK_LIST.fullmatch(body, 1, len(body) - 1)):
        return None
    inner = _EMPTY_ELEMENTS.sub(",", body[1:-1]).strip(" \t\r\n,")     # empty elements are skipped
    if not inner:
        return None
    with warnings.catch_warnings():     # numpy warns, and stops, at an element that is no number ("1 2", "1,,2")
        warnings.simplefilter("error", DeprecationWarning)
        try:
            ranks = np.fromstring(inner, dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    # every element a number (an empty one would be skipped), of at most 9 digits, each rank once
    ordered = np.sort(ranks)
    fine = len(ranks) == inner.count(",") + 1 and (ranks < 10**9).all() and not (ordered[1:] == ordered[:-1]).any()
    return ranks if fine else None


# --- reduce: matching, alignment, wait/transfer ------------------------------------------------------

def collectives_table(found: Collectives, *, top: int | None = None, aggregate: bool = False,
                      align: bool = True) -> pd.DataFrame:
    """collectives()'s table from matched collectives (of a TraceSet, or reduced from per-file extracts)."""
    table = _aggregate(found.instances) if aggregate else found.instances
    if top is not None and len(table) > top:
        table = _fold(table, top)
    table = table.reset_index(drop=True)
    table.attrs["notes"] = list(found.notes)
    table.attrs["facts"] = alignment_facts(found.alignment, align)
    return table


def alignment_facts(alignment: Alignment, align: bool) -> dict:
    """Header lines about the clock alignment."""
    if alignment.residual_before_ns < 0:
        return {"collectives": "none shared by two or more ranks (no clock alignment)"}
    before, after = _ns_text(alignment.residual_before_ns), _ns_text(alignment.residual_after_ns)
    if alignment.applied and alignment.residual_after_ns > alignment.residual_before_ns:
        # applied for a rank far off in a few collectives (its own residual shrank): 'applied: residual 8.64
        # µs (raw clocks 8.44 µs ...)' read as a worse alignment applied for no reason
        largest, largest_raw = _ns_text(alignment.residual_max_ns), _ns_text(alignment.residual_max_raw_ns)
        text = (f"applied: a rank's clock is far off (largest spread {largest_raw} raw, {largest} aligned); the "
                f"median residual moves from {before} to {after}")
    elif alignment.applied:
        largest, largest_raw = _ns_text(alignment.residual_max_ns), _ns_text(alignment.residual_max_raw_ns)
        text = f"applied: residual {after} (raw clocks {before}; largest spread {largest}, raw {largest_raw})"
    elif not align:
        text = f"off (--no-align): residual {before} (aligned it would be {after})"
    elif alignment.residual_before_ns == 0:
        text = "not needed: matched collectives end together on the clocks as written (residual 0 ns)"
    else:
        text = f"not applied: residual {before} would not shrink (aligned {after})"
    return {"clock alignment": text}


def _ns_text(ns: int) -> str:
    return human_ns(ns)


def _fold(table: pd.DataFrame, top: int) -> pd.DataFrame:
    sort_by = S.WAIT_NS
    ranked = table.sort_values([sort_by], ascending=False, kind="stable")
    kept, rest = ranked.head(top), ranked.iloc[top:]
    other = {name: (S.NO_INT if _dtype(name) == "int64" else np.nan if _dtype(name) == "float64" else "")
             for name in table.columns}
    other[S.COLLECTIVE] = "<other>"
    for name in (S.WAIT_NS, S.TRANSFER_NS, COUNT_COLUMN):
        if name in table.columns:
            other[name] = int(rest[name].sum())
    # the table's own dtypes: text stays `str` where pandas made it so (was object after the fold)
    return pd.concat([kept, pd.DataFrame([other])], ignore_index=True).astype(table.dtypes.to_dict())


def with_split(keyed: pd.DataFrame, instances: pd.DataFrame, alignment: Alignment, notes: list[str],
               wait: np.ndarray, transfer: np.ndarray) -> Collectives:
    """The Collectives of match_extract's result and each activity's (wait, transfer) self ns."""
    keyed[S.COMMUNICATION_WAIT_NS] = wait
    keyed[S.COMMUNICATION_TRANSFER_NS] = transfer
    return Collectives(instances[INSTANCE_COLUMNS], keyed, _per_rank(keyed, instances), alignment, notes)


def match_extract(extract: pd.DataFrame, loaded: set[int], align: bool = True):
    """The cross-rank reduce over comm_extract rows (of any number of files): (activities with their
    instance and aligned arrival/end, instances, alignment, notes). Needs no trace tables."""
    notes: list[str] = []
    keyed = _instance_keys(extract, notes)
    alignment = _align(keyed, align)
    offsets = alignment.offset_ns if alignment.applied else {}
    keyed["arrival_ns"] = keyed[S.START_NS] - keyed[S.RANK].map(offsets).fillna(0).astype("int64")
    keyed["aligned_end_ns"] = keyed[S.END_NS] - keyed[S.RANK].map(offsets).fillna(0).astype("int64")
    instances = _instances(keyed)
    keyed[S.INSTANCE] = keyed["key"].map(instances.set_index("key")[S.INSTANCE]).astype("int64")
    notes += _instance_notes(instances, keyed, loaded)
    residual = alignment.residual_after_ns if alignment.applied else alignment.residual_before_ns
    if residual > RESIDUAL_WARN_NS:
        notes.append(f"matched collectives still end {residual:,} ns apart (median spread): instances matched by "
                     "order may not be the same collective on every rank, or clocks drift in the window; arrival "
                     "skew, wait and the straggler are uncertain by about that much")
    return keyed, instances, alignment, notes


def clock_alignment(extract: pd.DataFrame) -> Alignment:
    """match_extract(extract, ranks, True)'s alignment alone (the check's clock skew), from the columns the
    instance keys and the ends need: at 1024 ranks the rows are tens of thousands, and the whole frame's
    copies, the expected participants and the instances were the check's peak on the driver."""
    key = _instance_codes(extract)[3]
    return aligned(key, extract[S.RANK].to_numpy(np.int64), extract[S.END_NS].to_numpy(np.int64), True)


def _instance_keys(extract: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Each activity's instance key (an int standing for a tuple), its expected participants and how it was
    matched. Keys are integer codes built column-wise (no Python tuple per row: at 1024 ranks the rows are
    tens of thousands, and per-row tuples, lane texts and pairs were most of the driver's growth). The rows
    are not copied: the frame only gains columns, never changes the extract's (a deep copy was 4.2 MB of the
    driver's peak at 1024 ranks)."""
    frame = extract.copy(deep=False)
    codes, texts = text_codes(frame[S.GROUP_RANKS].to_numpy(object))
    parsed = {text: parse_ranks(text) for text in texts}
    bad = sorted(t for t, r in parsed.items() if t and r is None)
    if bad:
        notes.append(f"unreadable Process Group Ranks {', '.join(repr(t[:40]) for t in bad[:3])}: "
                     "their group's ranks read as unknown (participants taken from the traces)")
    # one tuple per distinct text, shared by its rows (Series.map(dict) of tuples made a transient copy
    # per row: 140 MB at 1024 ranks)
    per_text = [parsed[text] for text in texts]
    is_p2p, by_seq, base, key, inferred = _instance_codes(frame)
    unmatched = inferred == UNMATCHED
    frame[S.MATCHED_BY] = np.where(is_p2p, P2P, np.where(by_seq, GROUP_SEQ, np.where(unmatched, UNMATCHED_BY, ORDER)))
    frame["key"] = key
    frame["expected"] = pd.Series(_expected(frame, base, is_p2p, codes, per_text), index=frame.index, dtype=object)
    frame[GROUP_N] = _group_n(frame, is_p2p, unmatched, codes, per_text)
    by_order = ~(is_p2p | by_seq | unmatched)
    if by_order.any():
        kinds = sorted(set(frame.loc[by_order, S.KIND]))
        notes.append(f"{int(by_order.sum())} communication activities carry no process "
                     f"group + Seq ({', '.join(kinds[:5])}): matched by order of occurrence per "
                     "(window, group or stream, kind)")
    notes += _group_notes(frame, inferred)
    return frame


def _group_n(frame: pd.DataFrame, is_p2p: np.ndarray, unmatched: np.ndarray, codes: np.ndarray,
             per_text: list) -> np.ndarray:
    """Per row the size of its group for the bus bandwidth: its `Process Group Ranks`' count, else its
    `Group size`, else -1 (the ranks expected); 0 where unmatched (no bandwidth: its transfer holds the wait)."""
    counts = np.array([len(ranks) if ranks is not None else -1 for ranks in per_text] + [-1], np.int64)
    listed = counts[np.where(codes >= 0, codes, len(per_text))]
    size = frame[S.GROUP_SIZE].to_numpy(np.int64)
    n = np.where(listed > 0, listed, np.where(size > 0, size, -1))
    return np.where(is_p2p, -1, np.where(unmatched, 0, n))


def _group_notes(frame: pd.DataFrame, inferred: np.ndarray) -> list[str]:
    """What the pairing of ranks by Group size did (comm_groups.py): groups told, and rows left unmatched."""
    notes = []
    paired = inferred >= 0
    if paired.any():
        groups = frame[paired].groupby(inferred[paired])
        sizes = sorted(set(groups[S.RANK].nunique().tolist()))
        notes.append(f"{int(paired.sum())} communication activities carry a Group size ({', '.join(map(str, sizes))}) "
                     f"below the ranks that show them and no Process Group Ranks: matched within {groups.ngroups} "
                     "group(s) told apart by their collectives' overlap in time (each group's kernels run together "
                     "at every occurrence)")
    left = inferred == UNMATCHED
    if left.any():
        rows = frame[left]
        kinds = sorted(set(rows[S.KIND]))
        sizes = sorted(set(rows.loc[rows[S.GROUP_SIZE] > 0, S.GROUP_SIZE].tolist()))
        notes.append(f"{int(left.sum())} communication activities on {rows[S.RANK].nunique()} rank(s) "
                     f"({', '.join(kinds[:5])}) left unmatched: their Group size ({', '.join(map(str, sizes))}) is "
                     "below the ranks that show them, no Process Group Ranks name the groups, and their overlap "
                     "in time does not split the ranks into groups of that size at every occurrence (groups that "
                     "run at once, or clocks apart by more than a kernel): no wait, skew, bandwidth or clock "
                     "offset from them")
    return notes


def _instance_codes(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (point-to-point, matched by group + Seq, its base code, its instance key, its group inferred
    from Group size: comm_groups.inferred_groups). Rows of a group told apart get it in their base; rows left
    unmatched a base of their own (an instance of one rank, which feeds no clock alignment)."""
    is_p2p = ((frame[S.KIND] == "sendrecv") & (frame[S.SRC_RANK] >= 0) & (frame[S.DST_RANK] >= 0)).to_numpy(bool)
    has_group = (frame[S.PROCESS_GROUP] != "").to_numpy(bool)
    by_seq = ~is_p2p & has_group & (frame[S.SEQ] >= 0).to_numpy(bool)
    has_ranks = (frame[S.GROUP_RANKS] != "").to_numpy(bool)
    base = _base_codes(frame, is_p2p, by_seq, has_group, has_ranks)
    rank = frame[S.RANK].to_numpy(np.int64)
    occurrence = _occurrences(rank, base)
    inferred = inferred_groups(base, rank, occurrence, frame[S.START_NS].to_numpy(np.int64),
                               frame[S.END_NS].to_numpy(np.int64), frame[S.GROUP_SIZE].to_numpy(np.int64),
                               ~(is_p2p | by_seq | has_ranks))
    if (inferred != NOT_ASKED).any():
        own = np.where(inferred == UNMATCHED, np.arange(len(base)), -1)
        base = pair_codes(pair_codes(base, np.where(inferred >= 0, inferred, -1)), own).astype(np.int64)
        occurrence = _occurrences(rank, base)
    return is_p2p, by_seq, base, _keys(base, occurrence), inferred


def _occurrence_keys(rank: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Each row's instance key: its base and n, the row being the n-th occurrence of that base on its rank
    (n > 0 only for order/p2p, or repeated seqs), coded in order of first appearance."""
    return _keys(base, _occurrences(rank, base))


def _keys(base: np.ndarray, occurrence: np.ndarray) -> np.ndarray:
    return pd.factorize(base * (int(occurrence.max(initial=0)) + 1) + occurrence)[0].astype(np.int64)


def _occurrences(rank: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per row n: the row is the n-th occurrence of its base on its rank."""
    order = np.lexsort((base, rank))            # stable: a rank's rows of one base keep their order
    rank_sorted, base_sorted = rank[order], base[order]
    starts = np.ones(len(order), bool)
    starts[1:] = (rank_sorted[1:] != rank_sorted[:-1]) | (base_sorted[1:] != base_sorted[:-1])
    del rank_sorted, base_sorted
    position = np.arange(len(order))
    occurrence = np.empty(len(order), np.int64)
    occurrence[order] = position - np.maximum.accumulate(np.where(starts, position, 0))
    return occurrence


def _base_codes(frame: pd.DataFrame, is_p2p: np.ndarray, by_seq: np.ndarray, has_group: np.ndarray,
                has_ranks: np.ndarray) -> np.ndarray:
    """Per row a code of its instance's base: (p2p, group, lower rank, higher rank, kind), (group+seq,
    group, seq, kind) or (order, window, lane: its group, else its Process Group Ranks, else its stream,
    kind)."""
    group = pd.factorize(frame[S.PROCESS_GROUP])[0].astype(np.int64)
    kind = pd.factorize(frame[S.KIND])[0].astype(np.int64)
    stream = pd.factorize(frame[S.STREAM], use_na_sentinel=False)[0].astype(np.int64)
    src, dst = frame[S.SRC_RANK].to_numpy(np.int64), frame[S.DST_RANK].to_numpy(np.int64)
    how = np.where(is_p2p, 0, np.where(by_seq, 1, 2))
    lane = np.where(has_group, group, -1 - stream)         # "pg <group>" and "stream <stream>" never equal
    by_ranks = has_ranks & ~has_group
    if by_ranks.any():      # no group name, its ranks: one lane per group, never its stream (shared by groups)
        ranks = np.full(len(lane), -1, np.int64)
        ranks[by_ranks] = text_codes(frame[S.GROUP_RANKS].to_numpy(object)[by_ranks])[0]
        lane = pair_codes(np.where(by_ranks, 0, 1), np.where(by_ranks, ranks, lane)).astype(np.int64)
    first = np.where(how == 2, 0, group)
    second = np.where(is_p2p, np.minimum(src, dst), np.where(by_seq, frame[S.SEQ].to_numpy(np.int64),
                                                             frame[S.WINDOW].to_numpy(np.int64)))
    third = np.where(is_p2p, np.maximum(src, dst), np.where(by_seq, 0, lane))
    base = how
    for column in (first, second, third, kind):     # pairwise: a row-wise unique held 5 copies of the rows
        base = pair_codes(base, column)
    return base.astype(np.int64)




def _expected(frame: pd.DataFrame, base: np.ndarray, is_p2p: np.ndarray, codes: np.ndarray,
              per_text: list) -> list:
    """Per row its expected participants: the p2p pair, else its group's ranks, else the ranks that show
    its base in the traces; one shared tuple per distinct value."""
    src, dst = frame[S.SRC_RANK].to_numpy(np.int64), frame[S.DST_RANK].to_numpy(np.int64)
    # the distinct (base, rank) pairs, sorted: each base's ranks in one slice
    shown = np.unique(np.stack([base, frame[S.RANK].to_numpy(np.int64)], axis=1), axis=0) if len(base) else \
        np.zeros((0, 2), np.int64)
    bounds = np.searchsorted(shown[:, 0], np.arange(int(base.max(initial=-1)) + 2))
    seen: dict[int, tuple[int, ...]] = {}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    expected = []
    for row, (code, p2p, b) in enumerate(zip(codes.tolist(), is_p2p.tolist(), base.tolist())):
        if p2p:
            pair = (min(int(src[row]), int(dst[row])), max(int(src[row]), int(dst[row])))
            expected.append(pairs.setdefault(pair, pair))
        elif code >= 0 and per_text[code] is not None:
            expected.append(per_text[code])
        else:
            if b not in seen:
                seen[b] = tuple(shown[bounds[b]:bounds[b + 1], 1].tolist())
            expected.append(seen[b])
    return expected


def _align(keyed: pd.DataFrame, align: bool) -> Alignment:
    """aligned() over _instance_keys' frame."""
    return aligned(keyed["key"].to_numpy(np.int64), keyed[S.RANK].to_numpy(np.int64),
                   keyed[S.END_NS].to_numpy(np.int64), align)


def aligned(key: np.ndarray, rank: np.ndarray, end_ns: np.ndarray, align: bool) -> Alignment:
    """Clock offsets from collective ends (alternating medians) and the residual before/after, over the
    latest end of each (instance key, rank) of the keys that two or more ranks show, taken from sorted runs
    (no copy of the frame: at 1024 ranks the frame's copies were the check's peak on the driver)."""
    order = np.lexsort((end_ns, rank, key))
    key, rank, end_ns = key[order], rank[order], end_ns[order]
    del order
    last = np.ones(len(key), bool)      # a (key, rank) run's last row holds its latest end
    last[:-1] = (key[1:] != key[:-1]) | (rank[1:] != rank[:-1])
    key, rank, end_ns = key[last], rank[last], end_ns[last]
    ranks_of_key = _run_lengths(key)
    shared = np.repeat(ranks_of_key > 1, ranks_of_key)
    if not shared.any():
        return Alignment({}, -1, -1, False)
    key, rank, end_ns = key[shared], rank[shared], end_ns[shared]
    key_code = np.repeat(np.arange(int((ranks_of_key > 1).sum())), ranks_of_key[ranks_of_key > 1])
    ranks, rank_code = np.unique(rank, return_inverse=True)
    t0 = int(end_ns.min())
    e = (end_ns - t0).astype(np.float64)   # exact: spans far below 2**53 ns
    n_keys = int(key_code[-1]) + 1
    offset = _grown_offsets(e, key_code, rank_code, n_keys, len(ranks))
    for _ in range(50):
        instant = _group_median(e - offset[rank_code], key_code, n_keys)
        new = _group_median(e - instant[key_code], rank_code, len(ranks))
        new -= new[0]
        if np.array_equal(new, offset):
            break
        offset = new
    offset = np.rint(offset).astype(np.int64)
    before = _spreads(e, key_code, n_keys)
    after = _spreads(e - offset[rank_code], key_code, n_keys)
    before_ns, after_ns = int(np.median(before)), int(np.median(after))
    # a rank off in a few instances only (it lacks the others, or its group is small) leaves the median
    # over all instances as it was: its own instances' median spread must shrink by more than that median
    worst_before, worst_after = (int(_group_median(spread[key_code], rank_code, len(ranks)).max())
                                 for spread in (before, after))
    applied = align and (after_ns < before_ns or worst_before - worst_after > before_ns)
    return Alignment({int(r): int(o) for r, o in zip(ranks.tolist(), offset.tolist())}, before_ns, after_ns,
                     applied, int((after if applied else before).max()), int(before.max()))


def _grown_offsets(e: np.ndarray, key_code: np.ndarray, rank_code: np.ndarray, n_keys: int,
                   n_ranks: int) -> np.ndarray:
    """The alternating medians' starting offsets, grown outwards from the reference rank (code 0): each round,
    every instance holding a rank whose offset is known gets its instant from those ranks (median), and each
    rank not yet known its offset from those instances (median). Exact when ends coincide, whatever the
    groups. From zeros, the alternating medians stall on a group whose ranks share more collectives among
    themselves than with the rest (tensor-parallel pairs under a data-parallel all-reduce): a shift of the
    whole group moves no rank's median, so the group kept its raw clock offset. Ranks the reference never
    reaches through shared instances start at 0. An instance is used in the first round that reaches it:
    its ranks are all placed in that round, so it has nothing left to give (a chain of ranks, as pipeline
    stages are, takes a round per rank, each over the new instances only)."""
    offset, known = np.zeros(n_ranks), np.zeros(n_ranks, bool)
    known[0] = True
    instant = np.full(n_keys, np.nan)
    while True:
        unused = np.isnan(instant[key_code])
        from_known = unused & known[rank_code]
        keys, key_of_row = np.unique(key_code[from_known], return_inverse=True)
        instant[keys] = _group_median(e[from_known] - offset[rank_code[from_known]], key_of_row, len(keys))
        rows = unused & ~known[rank_code] & ~np.isnan(instant[key_code])
        if not rows.any():
            return offset
        new_ranks, rank_of_row = np.unique(rank_code[rows], return_inverse=True)
        offset[new_ranks] = _group_median(e[rows] - instant[key_code[rows]], rank_of_row, len(new_ranks))
        known[new_ranks] = True


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins."""
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])


def _run_lengths(sorted_values: np.ndarray) -> np.ndarray:
    return np.diff(np.r_[_run_starts(sorted_values), len(sorted_values)])


def _group_median(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1 its median: pandas' group-by (a counting sort by group, then a selection in each) is
    3-4x faster than one numpy lexsort of (group, value) at 287 k rows, 50 rounds a solve."""
    medians = pd.Series(values).groupby(group).median()
    out = np.zeros(n)
    out[medians.index.to_numpy()] = medians.to_numpy()
    return out


def _spreads(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1 (each present) max - min of its values, over the rows ordered by group (a stable
    sort of integers: the instance keys arrive sorted already)."""
    order = np.argsort(group, kind="stable")
    ordered, starts = values[order], _run_starts(group[order])
    return np.maximum.reduceat(ordered, starts) - np.minimum.reduceat(ordered, starts)


def _instances(keyed: pd.DataFrame) -> pd.DataFrame:
    """One row per instance key: arrival skew, last rank, transfer, wait, bandwidth."""
    if keyed.empty:
        return pd.DataFrame({name: pd.Series([], dtype=_dtype(name)) for name in INSTANCE_COLUMNS + ["key"]})
    per_rank = keyed.groupby(["key", S.RANK], sort=False).agg(
        arrival_ns=("arrival_ns", "min"), end_ns=("aligned_end_ns", "max"))
    per_rank = per_rank.reset_index()
    grouped = per_rank.groupby("key", sort=False)
    first = grouped["arrival_ns"].min()
    last = grouped["arrival_ns"].max()
    end = grouped["end_ns"].max()
    # the last to arrive; ties go to the lowest rank, and with no skew at all nobody was last (NO_INT below)
    by_arrival = per_rank.sort_values(["arrival_ns", S.RANK], ascending=[False, True], kind="stable")
    last_rank = by_arrival.drop_duplicates("key").set_index("key")[S.RANK]
    per_rank["last_ns"] = per_rank["key"].map(last)
    per_rank["wait"] = np.maximum(np.minimum(per_rank["last_ns"], per_rank["end_ns"]) - per_rank["arrival_ns"], 0)
    wait = per_rank.groupby("key", sort=False)["wait"].sum()
    ranks = grouped[S.RANK].agg(lambda r: tuple(sorted(r)))
    meta = keyed.groupby("key", sort=False).agg(kind=(S.KIND, "first"), group=(S.PROCESS_GROUP, "first"),
                                               seq=(S.SEQ, "max"), nbytes=(S.COMM_BYTES, "max"),
                                               how=(S.MATCHED_BY, "first"), expected=("expected", "first"),
                                               group_n=(GROUP_N, "max"))
    table = pd.DataFrame({"key": first.index})
    table[S.COLLECTIVE] = meta["kind"].reindex(table["key"]).to_numpy()
    table[S.PROCESS_GROUP] = meta["group"].reindex(table["key"]).to_numpy()
    table[S.SEQ] = meta["seq"].reindex(table["key"]).to_numpy()
    present = ranks.reindex(table["key"]).tolist()
    expected = meta["expected"].reindex(table["key"]).tolist()
    table[S.RANKS] = [",".join(map(str, r)) for r in present]
    table[S.MISSING_RANKS] = [",".join(str(r) for r in sorted(set(e) - set(p))) for p, e in zip(present, expected)]
    table[S.MATCHED_BY] = meta["how"].reindex(table["key"]).to_numpy()
    table[S.BYTES] = meta["nbytes"].reindex(table["key"]).to_numpy()
    table[S.FIRST_START_NS] = first.reindex(table["key"]).to_numpy()
    table[S.LAST_START_NS] = last.reindex(table["key"]).to_numpy()
    table[S.ARRIVAL_SKEW_NS] = table[S.LAST_START_NS] - table[S.FIRST_START_NS]
    several = np.array([len(p) > 1 for p in present]) & (table[S.ARRIVAL_SKEW_NS].to_numpy() > 0)
    table[S.LAST_RANK] = np.where(several, last_rank.reindex(table["key"]).to_numpy(), S.NO_INT)
    table[S.TRANSFER_NS] = end.reindex(table["key"]).to_numpy() - table[S.LAST_START_NS]
    table[S.WAIT_NS] = wait.reindex(table["key"]).to_numpy()
    # the group's size: its ranks listed, else its Group size, else the ranks expected; 0: unmatched
    group_n = meta["group_n"].reindex(table["key"]).to_numpy(np.int64)
    n = np.where(group_n >= 0, group_n, np.array([len(e) for e in expected], np.int64))
    known = (table[S.BYTES].to_numpy() > 0) & (table[S.TRANSFER_NS].to_numpy() > 0) & (n > 0)
    algbw = np.where(known, table[S.BYTES].to_numpy() / np.maximum(table[S.TRANSFER_NS].to_numpy(), 1), np.nan)
    factor = np.array([_BUS_FACTOR[k](m) if k in _BUS_FACTOR and m > 0 else np.nan
                       for k, m in zip(table[S.COLLECTIVE].tolist(), n.tolist())])
    table[S.ALGBW_GBPS] = algbw                      # bytes per ns == GB/s
    table[S.BUSBW_GBPS] = algbw * factor
    table = table.sort_values([S.FIRST_START_NS, S.COLLECTIVE], kind="stable").reset_index(drop=True)
    table[S.INSTANCE] = np.arange(len(table), dtype=np.int64)
    return table


def cut_times(keyed: pd.DataFrame, instances: pd.DataFrame, alignment: Alignment) -> np.ndarray:
    """Per activity: where its self time splits into wait and transfer, the last participant's arrival (in
    the rank's own clock); its own start (all transfer) when it is the only participant present."""
    if keyed.empty:
        return np.zeros(0, np.int64)
    offsets = alignment.offset_ns if alignment.applied else {}
    last = instances.set_index("key")
    several = last[S.RANKS].str.contains(",")
    cut_aligned = keyed["key"].map(last[S.LAST_START_NS]).to_numpy(np.int64)
    local_cut = cut_aligned + keyed[S.RANK].map(offsets).fillna(0).to_numpy(np.int64)
    alone = ~keyed["key"].map(several).to_numpy(bool)
    return np.where(alone, keyed[S.START_NS].to_numpy(np.int64), local_cut)


def _per_rank(keyed: pd.DataFrame, instances: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, device): wait and transfer ns, late arrivals and the wait imposed on the others."""
    columns = [S.RANK, S.DEVICE, S.COMMUNICATION_WAIT_NS, S.COMMUNICATION_TRANSFER_NS]
    sums = keyed.groupby([S.RANK, S.DEVICE], as_index=False)[columns[2:]].sum()
    # an exact tie (skew 0) has a last rank only by the tie-break: nobody arrived late, nobody waited
    shared = instances[(instances[S.LAST_RANK] >= 0) & (instances[S.ARRIVAL_SKEW_NS] > 0)]
    late = shared.groupby(S.LAST_RANK).agg(late=(S.INSTANCE, "count"), caused=(S.WAIT_NS, "sum"))
    # the late arrivals of a rank go on its first device row, so sums over devices stay per-rank counts
    first_row = ~sums.duplicated(S.RANK)
    sums[S.LATE_ARRIVALS] = np.where(first_row, sums[S.RANK].map(late["late"]).fillna(0), 0).astype("int64")
    sums[S.WAIT_CAUSED_NS] = np.where(first_row, sums[S.RANK].map(late["caused"]).fillna(0), 0).astype("int64")
    return sums


def rank_ranges(ranks: list[int], most: int = 8) -> str:
    """Sorted ranks as runs ("3, 307-999 (694 ranks)"): a note at 1024 ranks must stay one readable line."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most]]
    if len(runs) > most:
        shown.append(f"... +{sum(b - a + 1 for a, b in runs[most:])} more")
    count = len(set(ranks))
    compressed = len(runs) < count or len(runs) > most
    return ", ".join(shown) + (f" ({count} ranks)" if count > 2 and compressed else "")


def _instance_notes(instances: pd.DataFrame, keyed: pd.DataFrame, loaded: set[int]) -> list[str]:
    notes = []
    missing = instances[instances[S.MISSING_RANKS] != ""]
    if len(missing):
        absent = sorted({int(r) for text in missing[S.MISSING_RANKS] for r in text.split(",")} - loaded)
        for (kind, text), rows in missing.groupby([S.COLLECTIVE, S.MISSING_RANKS], sort=False):
            ranks = [int(r) for r in text.split(",")]
            why = "no trace loaded" if set(ranks) <= set(absent) else "a truncated window or a hang?"
            if why != "no trace loaded" and (rows[S.MATCHED_BY] == "order").any():
                # found on planted truth: one dropped record shifted every later collective of the rank onto
                # the next instance, absorbed as a one-step clock offset with residual 0, and nothing warned
                why = ("matched by order, as these traces carry no Seq: if that rank lost a record mid-window, "
                       "every later one of its collectives sits on the wrong instance, so its wait, skew, clock "
                       "offset and the straggler are unreliable")
            notes.append(f"{len(rows)} {kind} instance(s) lack rank(s) {rank_ranges(ranks)} ({why}); their wait "
                         "is a lower bound over the ranks present")
            if len(notes) >= 5:
                break
    # ranks that disagree on a matched collective's size (message elements or dtype): bytes and bandwidth
    # take the largest, which a trial saw double busbw with nothing said
    sized = keyed[keyed[S.COMM_BYTES] > 0].groupby("key", sort=False).agg(
        least=(S.COMM_BYTES, "min"), most=(S.COMM_BYTES, "max"), kind=(S.KIND, "first"))
    differ = sized[sized["least"] != sized["most"]]
    if len(differ):
        first = differ.iloc[0]
        notes.append(f"{len(differ)} collective instance(s) whose ranks disagree on the size (first: {first['kind']} "
                     f"of {int(first['least']):,} bytes on some ranks, {int(first['most']):,} on others): bytes and "
                     "bandwidth use the largest")
    return notes


def _aggregate(instances: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, process group, bytes): count and mean/p50/p99 of arrival skew and transfer."""
    if instances.empty:
        return pd.DataFrame({name: pd.Series([], dtype=_dtype(name)) for name in AGGREGATE_COLUMNS})
    grouped = instances.groupby([S.COLLECTIVE, S.PROCESS_GROUP, S.BYTES], sort=False)
    out = grouped.agg(**{COUNT_COLUMN: (S.INSTANCE, "count"), S.WAIT_NS: (S.WAIT_NS, "sum")})
    for column, prefix in ((S.ARRIVAL_SKEW_NS, "skew"), (S.TRANSFER_NS, "transfer")):
        out[f"{prefix}_mean_ns"] = grouped[column].mean().round().astype("int64")
        out[f"{prefix}_p50_ns"] = grouped[column].quantile(0.5, interpolation="lower").astype("int64")
        out[f"{prefix}_p99_ns"] = grouped[column].quantile(0.99, interpolation="higher").astype("int64")
    out = out.reset_index().sort_values([COUNT_COLUMN, S.COLLECTIVE], ascending=[False, True], kind="stable")
    return out[AGGREGATE_COLUMNS].reset_index(drop=True)


def _dtype(name: str) -> str:
    if name in (S.COLLECTIVE, S.PROCESS_GROUP, S.RANKS, S.MISSING_RANKS, S.MATCHED_BY, "key"):
        return "object"
    return "float64" if name in (S.ALGBW_GBPS, S.BUSBW_GBPS) else "int64"

