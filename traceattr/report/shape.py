"""Shape any result table for people: human time units, percentages, shortened names, header lines.

Generic over columns: `*_ns` columns are durations (schema.INSTANT_COLUMNS: points in time, shown as UTC
with ns), `*_pct` columns percentages, everything else as is. The
machine formats (csv, json, parquet) never go through here: they keep raw int64 ns. A table is a pandas
DataFrame or a pyarrow Table (cached answers are shown without importing pandas).
"""

from __future__ import annotations

import math

from traceattr import schema as S
from traceattr.names import display_names
from traceattr.report.printable import clipped, printable
from traceattr.units import human_ns  # noqa: F401  (one unit style; imported from here by reports)

MAX_TEXT = 90        # kernel names can be 500+ characters of templates; the table shows the start and end
# columns of sentences (a check's detail): cutting one in the middle dropped what it said ("rank 1 +1,430,003
# ns"), so they are shown whole, folded by the table, up to a bound that only hostile text reaches
PROSE = ("detail",)
MAX_PROSE = 1000


def human_pct(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.1f}%"


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: keep * 2 // 3] + "…" + text[-(keep - keep * 2 // 3):]


def is_time(column: str) -> bool:
    return column.endswith("_ns") or column == "ns"


def human_instant(ns) -> str:
    """Epoch ns as UTC with all nine ns digits (integer arithmetic: exact), e.g. 2026-11-30 12:00:00.000000042."""
    import datetime

    if ns == S.NO_INT:
        return _NOT_APPLICABLE
    seconds, rest = divmod(int(ns), 10**9)
    try:
        day = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):     # beyond what a calendar shows: the raw number
        return f"{int(ns):,} ns"
    return f"{day:%Y-%m-%d %H:%M:%S}.{rest:09d}"


def is_pct(column: str) -> bool:
    return column.endswith("_pct")


LABELS_FIRST = ("key", "name")     # the column that names a row; it gets the room the numbers leave
_REDUNDANT = ("name", "parent")    # a flat path table's key already holds the whole path
_NOT_APPLICABLE = "-"


def column_names(table) -> list[str]:
    return list(table.column_names) if hasattr(table, "column_names") else list(table.columns)


def column_values(table, name: str) -> list:
    column = table.column(name) if hasattr(table, "column_names") else table[name]
    return column.to_pylist() if hasattr(column, "to_pylist") else column.tolist()


def column_kind(table, name: str) -> str:
    """"int", "float" or "text" for a pandas or an arrow column."""
    if hasattr(table, "column_names"):
        import pyarrow as pa
        kind = table.schema.field(name).type
        return "int" if pa.types.is_integer(kind) else "float" if pa.types.is_floating(kind) else "text"
    kind = table[name].dtype.kind
    return "int" if kind in "iu" else "float" if kind == "f" else "text"


def label_column(table) -> str | None:
    names = column_names(table)
    return next((c for c in LABELS_FIRST if c in names), None)


def people_view(table):
    """The columns people read: a flat path table shows its path once (key), not as key, name and parent
    (csv, json and parquet keep every column)."""
    names = column_names(table)
    drop = [c for c in _REDUNDANT if c in names] if "key" in names else []
    if not drop:
        return table
    return table.drop_columns(drop) if hasattr(table, "drop_columns") else table.drop(columns=drop)


def display_rows(table, max_text: int = MAX_TEXT, full_names: bool = False,
                 name_width: int | None = None) -> tuple[list[str], list[list[str]]]:
    """Column titles and rows of strings for a people-facing table. The label column (key or name) shows
    short display names (traceattr/names.py) that fit `name_width` and never collide, or with `full_names`
    the names whole; every text cell shows control characters as visible escapes."""
    label = label_column(table)
    cells = []
    for column in column_names(table):
        values = column_values(table, column)
        kind = column_kind(table, column)
        missing = [_is_missing(v) for v in values]      # null: not measurable (one rank's wait and transfer)
        if any(missing):
            shown = display_rows(_only(table, column, missing), max_text, full_names, name_width)[1] if \
                not all(missing) else []
            present = iter(row[0] for row in shown)
            cells.append([_NOT_MEASURED if m else next(present) for m in missing])
            continue
        if column in S.INSTANT_COLUMNS:
            cells.append([human_instant(v) for v in values])
        elif is_time(column) and "delta" not in column:
            # a duration is never negative: -1 means "not applicable" (host solo time, a missing noise figure)
            cells.append([_NOT_APPLICABLE if v == S.NO_INT else human_ns(v) for v in values])
        elif is_time(column):
            cells.append([human_ns(v) for v in values])
        elif is_pct(column):
            cells.append([human_pct(v) for v in values])
        elif kind == "float":       # nan: not computed (a compare row that is not tested)
            cells.append([_NOT_APPLICABLE if v != v else f"{v:.3g}" for v in values])
        elif kind == "int":
            # rank, device, depth, counts: -1 is "not applicable" (an <other> row, a host-only rank)
            cells.append([_NOT_APPLICABLE if v == S.NO_INT else str(v) for v in values])
        elif column == label and not full_names:
            cells.append([printable(v) for v in display_names(values, name_width)])
        elif column == label:
            cells.append([printable(v) for v in values])
        else:
            limit = MAX_PROSE if column in PROSE else max_text
            cells.append([printable(shorten(str(v), limit)) for v in values])
    titles = [column.removesuffix("_ns").removesuffix("_pct").replace("_", " ") + (" %" if is_pct(column) else "")
              for column in column_names(table)]
    return titles, [list(row) for row in zip(*cells)] if cells else []


_NOT_MEASURED = "n/a"


def _is_missing(value) -> bool:
    """None (arrow's null) or pandas' NA (a nullable column): pandas is not imported here."""
    return value is None or type(value).__name__ == "NAType"


def _only(table, column: str, missing: list[bool]):
    """The one column's present values, as a table of the same kind."""
    keep = [i for i, m in enumerate(missing) if not m]
    if hasattr(table, "column_names"):
        return table.select([column]).take(keep)
    return table[[column]].iloc[keep].astype({column: "int64"} if column_kind(table, column) == "int" else {})


def right_aligned(table) -> list[bool]:
    return [column_kind(table, c) != "text" for c in column_names(table)]


LABELS = {"span_ns": "span", "window_ns": "windows total", "busy_ns": "busy", "idle_ns": "idle",
          "duration_ns": "Σ durations", "overlap_ns": "overlap saved"}


FINDINGS = "findings"      # analysis/findings.py's header key (report/ imports no analysis on this path)


def finding_lines(header: dict | None) -> list[str]:
    """The header's findings (analysis/findings.py), largest first: what a report opens with."""
    return [clipped(str(line)) for line in (header or {}).get(FINDINGS, [])]


def header_lines(header: dict | None) -> tuple[list[str], list[str]]:
    """(fact lines, note lines) from a header dict; times shown in human units, exact ns kept alongside."""
    if not header:
        return [], []
    facts, notes = [], [clipped(str(note)) for note in header.get("notes", [])]
    for key, value in header.items():
        if key in ("notes", FINDINGS):     # findings open the header (finding_lines)
            continue
        label = LABELS.get(key, key.removesuffix("_ns").replace("_", " "))
        if is_time(key):
            text = human_ns(value) + (f" ({int(value):,} ns)" if abs(int(value)) >= 1000 else "")
        elif isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, dict):
            text = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        elif isinstance(value, (list, tuple)):
            text = ", ".join(str(v) for v in value) or "-"
        else:
            text = str(value)
        facts.append(clipped(f"{label}: {text}"))
    return facts, notes
