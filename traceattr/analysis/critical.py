"""`summarize --by critical`: the critical path of every step, per file, reduced to one row per (kind, key).

The path of a step lives in one file (one rank's window: attribution/critical.py), so the whole analysis is
the first stage of the engine (docs/design.md): each file's map solves its steps' paths and returns a few
rows per (step, kind, key); the reduce stacks them with the file's rank. Σ critical_ns over every row ==
Σ step_ns over every (rank, step): each path tiles its step exactly.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.collectives import ROW, comm_columns
from traceattr.analysis.critical_ranks import across_ranks
from traceattr.analysis.header import header_of
from traceattr.analysis.summary_plan import reduce_path
from traceattr.analysis.normalize import normalize_kernel_name, normalize_text
from traceattr.attribution.critical import CRITICAL_NS, KEY, KIND, KINDS, SEGMENTS, SLACK_NS, STEP, STEP_NS
from traceattr.attribution.critical_pieces import critical_pieces
from traceattr.engine.partial import Partial, listed
from traceattr.errors import TraceInputError
from traceattr.model.traceset import TraceSet

NAME = "critical"
SHARE_PCT = "share_pct"       # critical_ns over Σ step_ns, in percent
STEPS = "steps"
WHAT_IF_NS = "what_if_ns"     # the step re-solved with the --what-if keys scaled
GAIN_NS = "gain_ns"           # step_ns - what_if_ns
OTHER = "<other>"
STEP_COLUMNS = [S.RANK, STEP, KIND, KEY, CRITICAL_NS, SLACK_NS, SEGMENTS, STEP_NS]
TABLE_COLUMNS = [KIND, KEY, CRITICAL_NS, SHARE_PCT, SLACK_NS, SEGMENTS, STEPS]


def critical_map(traceset: TraceSet, step: str | None = None, what_if: tuple = ()) -> dict:
    """One file's paths: rows per (step, kind, key) as plain columns, the notes, with communication
    activities the pieces of the cross-rank path (analysis/critical_ranks.py), and with `what_if`
    ((key, factor), ...) each step's duration re-solved with those kernels / ops scaled."""
    comm = comm_columns(traceset)
    rows = np.asarray(comm[ROW], np.int64)
    matcher = functools.partial(name_factors, what_if) if what_if else None
    paths, fragments, notes, scaled = critical_pieces(traceset, step, rows, matcher)
    frames = [path.breakdown() for path in paths]
    frame = pd.concat(frames, ignore_index=True) if frames else _empty_steps().drop(columns=[S.RANK])
    columns = {name: frame[name].to_numpy() for name in STEP_COLUMNS if name != S.RANK}
    part = {"columns": columns, "notes": notes, "step_names": [path.step for path in paths],
            "step_end_ns": [path.end_ns for path in paths], "step_start_ns": [path.start_ns for path in paths],
            "cross": None, "what_if_ns": scaled}
    if fragments is not None:
        # walks: the steps' tails first, then one per communication activity (comm rows order)
        part["cross"] = {"comm": comm, "rows": fragments.rows, "meta": fragments.meta,
                         "tail": fragments.first[:len(paths)], "activity": fragments.first[len(paths):]}
    return part


def name_factors(what_if: tuple, names: list[str]) -> dict[int, float]:
    """{name code: factor} of the names a what-if key names: the name itself, or its normalized form (the
    kernel names the tables show), or an op name."""
    wanted = dict(what_if)
    found = {}
    for code, name in enumerate(names):
        for candidate in (name, normalize_kernel_name(name), normalize_text(name)):
            if candidate in wanted:
                found[code] = float(wanted[candidate])
                break
    return found


# a file's times sum to at most io.limits.FILE_SUM_LIMIT_NS (2**53): scaled by 1,000 they still fit int64 ns
MAX_WHAT_IF_FACTOR = 1000.0


def parse_what_if(values) -> tuple[tuple[str, float], ...]:
    """`KEY=FACTOR` texts (or a {key: factor} dict) as ((key, factor), ...); a factor is a number from 0 to
    MAX_WHAT_IF_FACTOR (nan and inf fail the range test too)."""
    pairs = list(values.items()) if isinstance(values, dict) else []
    if not isinstance(values, dict):
        for text in ([values] if isinstance(values, str) else list(values or ())):
            key, sep, factor = str(text).rpartition("=")
            if not sep or not key:
                raise TraceInputError(f"--what-if {text!r}: write KEY=FACTOR, e.g. 'aten::mm=0.5'")
            pairs.append((key, factor))
    out = []
    for key, factor in pairs:
        try:
            value = float(factor)
        except (TypeError, ValueError):
            raise TraceInputError(f"--what-if {key}={factor}: the factor must be a number") from None
        if not (0 <= value <= MAX_WHAT_IF_FACTOR):
            raise TraceInputError(f"--what-if {key}={factor}: the factor must be a number from 0 to "
                                  f"{MAX_WHAT_IF_FACTOR:g}")
        out.append((str(key), value))
    return tuple(out)


def what_if_table(found: list) -> pd.DataFrame:
    """Per (rank, step): its duration, and re-solved with the what-if keys scaled."""
    rows = [(rank, name, end - start, new) for rank, _, part in found if part["what_if_ns"] is not None
            for name, start, end, new in zip(part["step_names"], part["step_start_ns"], part["step_end_ns"],
                                              part["what_if_ns"])]
    frame = pd.DataFrame(rows, columns=[S.RANK, STEP, STEP_NS, WHAT_IF_NS]).astype(
        {S.RANK: "int64", STEP_NS: "int64", WHAT_IF_NS: "int64"})
    frame[GAIN_NS] = frame[STEP_NS] - frame[WHAT_IF_NS]
    return frame


def critical_reduce(found: list) -> tuple[pd.DataFrame, list[str], tuple[pd.DataFrame, pd.DataFrame]]:
    """Rows of every kept file with its rank, the notes (each file's, prefixed by its rank), and the
    cross-rank paths (rows per (step, rank, kind, key), one row per step with its chain of ranks)."""
    frames, notes = [], []
    for rank, window, part in found:
        frame = pd.DataFrame(part["columns"])
        frame.insert(0, S.RANK, rank)
        frames.append(frame)
        notes += [f"rank {rank} window {window}: {note}" for note in part["notes"]]
    steps = pd.concat(frames, ignore_index=True) if frames else _empty_steps()
    rows, chains, cross_notes = across_ranks(found, {rank for rank, _, _ in found})
    return (steps.astype({CRITICAL_NS: "int64", SLACK_NS: "int64", SEGMENTS: "int64", STEP_NS: "int64"}),
            notes + cross_notes,
            (rows, chains), what_if_table(found))


def critical_partial(step: str | None = None, what_if: tuple = ()) -> Partial:
    return Partial(NAME, functools.partial(critical_map, step=step, what_if=what_if), listed(critical_reduce))


def critical_steps(path, step: str | None = None, what_if: tuple = (), **load_options) -> tuple[pd.DataFrame, dict]:
    """(rows per (rank, step, kind, key), the report header) of the traces under `path`, a store or a
    TraceSet, by the engine's per-file plan."""
    reduced, _ = reduce_path(path, extracts=(critical_partial(step, what_if),), keep_host=True, **load_options)
    steps, notes, across, scaled = reduced.extracts[NAME]
    header = header_of(reduced.files, reduced.groups, list(reduced.notes) + notes)
    header["across_ranks"] = across       # popped by the callers: (rows, chains) of critical_ranks
    header["what_if"] = scaled            # popped by the callers: what_if_table
    return steps, header


def across_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The cross-rank paths as one row per (kind, key, rank), Σ critical_ns == Σ path_ns of the steps."""
    total = int(rows[CRITICAL_NS].sum())
    table = rows.groupby([KIND, KEY, S.RANK], as_index=False, sort=False).agg(
        critical_ns=(CRITICAL_NS, "sum"), steps=(STEP, "size"))
    table[SHARE_PCT] = table[CRITICAL_NS] / total * 100 if total else 0.0
    order = {kind: i for i, kind in enumerate(KINDS)}
    table["_kind"] = table[KIND].map(order)
    table = table.sort_values(["_kind", CRITICAL_NS], ascending=[True, False], kind="stable")
    return table[[KIND, KEY, S.RANK, CRITICAL_NS, SHARE_PCT, STEPS]].reset_index(drop=True).astype(
        {CRITICAL_NS: "int64", STEPS: "int64", S.RANK: "int64"})


def critical_table(steps: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """One row per (kind, key) over every rank and step: Σ critical_ns == Σ step_ns (attrs step_ns). `top`:
    the N largest keys of each kind, the rest of that kind summed into one `<other>` row (sums kept)."""
    per_step = steps.drop_duplicates([S.RANK, STEP])
    total = int(per_step[STEP_NS].sum())
    # rows are already one per (rank, step, kind, key): a key's row count is its number of steps
    table = steps.groupby([KIND, KEY], as_index=False, sort=False).agg(
        critical_ns=(CRITICAL_NS, "sum"), slack_ns=(SLACK_NS, "sum"), segments=(SEGMENTS, "sum"),
        steps=(STEP, "size"))
    table[SHARE_PCT] = table[CRITICAL_NS] / total * 100 if total else 0.0
    order = {kind: i for i, kind in enumerate(KINDS)}
    table["_kind"] = table[KIND].map(order)
    table = table.sort_values(["_kind", CRITICAL_NS], ascending=[True, False], kind="stable")
    if top is not None:
        rank_in_kind = table.groupby(KIND, sort=False).cumcount()
        rest = table[rank_in_kind >= top]
        if len(rest):
            other = rest.groupby([KIND, "_kind"], as_index=False, sort=False)[
                [CRITICAL_NS, SLACK_NS, SEGMENTS, SHARE_PCT]].sum()
            other[KEY], other[STEPS] = OTHER, 0
            table = pd.concat([table[rank_in_kind < top], other], ignore_index=True).sort_values(
                "_kind", kind="stable")
    table = table[TABLE_COLUMNS].reset_index(drop=True).astype({CRITICAL_NS: "int64", SLACK_NS: "int64",
                                                                 SEGMENTS: "int64", STEPS: "int64"})
    table.attrs["step_ns"] = total
    table.attrs["steps"] = len(per_step)
    return table


def kinds_table(steps: pd.DataFrame) -> pd.DataFrame:
    """critical_ns per kind (every kind listed), Σ == Σ step_ns."""
    total = int(steps.drop_duplicates([S.RANK, STEP])[STEP_NS].sum())
    sums = steps.groupby(KIND)[CRITICAL_NS].sum()
    values = np.array([int(sums.get(kind, 0)) for kind in KINDS], np.int64)
    return pd.DataFrame({KIND: list(KINDS), CRITICAL_NS: values,
                         SHARE_PCT: values / total * 100 if total else np.zeros(len(KINDS))})


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({S.RANK: pd.Series([], dtype="int64"), STEP: pd.Series([], dtype="str"),
                         KIND: pd.Series([], dtype="str"), KEY: pd.Series([], dtype="str"),
                         CRITICAL_NS: pd.Series([], dtype="int64"), SLACK_NS: pd.Series([], dtype="int64"),
                         SEGMENTS: pd.Series([], dtype="int64"),
                         STEP_NS: pd.Series([], dtype="int64")})
