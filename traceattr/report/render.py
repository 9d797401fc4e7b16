"""Render any result table (+ optional header dict) as table, csv, json, markdown or parquet.

Step one (report/shape.py) turns data into what people read; step two (here) writes one format. Every
renderer takes the same arguments, so `compare` and the attribution levels reuse them unchanged. A table
is a pandas DataFrame or a pyarrow Table; an arrow table is rendered without importing pandas.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pyarrow as pa

from traceattr.errors import TraceInputError
from traceattr.report.escape import for_markdown, for_terminal
from traceattr.report.grid import grid_lines
from traceattr.report.output import replacing, write_output
from traceattr.report.shape import (column_names, display_rows, finding_lines, header_lines, label_column, people_view,
                                    right_aligned)

FORMATS = ("table", "csv", "json", "markdown", "parquet")
RAW_CSV = "csv-raw"          # csv without the spreadsheet formula guard (the CLI's --csv-raw)
HEADER_METADATA_KEY = b"traceattr.header"      # parquet schema metadata: the header as JSON


def render(table, fmt: str = "table", header: dict | None = None, output: str | None = None,
           title: str | None = None, width: int | None = None, tree_top: int | None = None,
           full_names: bool = False) -> str | None:
    """Render `table` as `fmt`. With `output` the result is written there and None returned; otherwise the
    text is returned (parquet is binary and needs `output`). `tree_top`: a tree table (attribute(...,
    tree=True)) in the `table` format is drawn indented, with that many children per level. People
    formats (table, markdown) show short unique display names unless `full_names`; machine formats always
    keep the full names."""
    if fmt not in FORMATS + (RAW_CSV,):
        raise TraceInputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if output is None:
            raise TraceInputError("parquet is a binary format: give a file with -o FILE")
        write_parquet(table, header, output)
        return None
    if fmt == "table" and tree_top is not None:
        text = render_tree_text(table, header, tree_top, title, width)
    elif fmt in ("table", "markdown"):
        text = _TEXT_RENDERERS[fmt](people_view(table), header, title, width, full_names)
    else:
        text = _TEXT_RENDERERS[fmt](table, header, title, width)
    if output is None:
        return text
    write_text(text, output)
    return None


def write_text(text: str, output: str) -> None:
    """Write rendered text to `output`; a failure is one line naming the file."""
    write_output(text, output)      # whole or not at all (report/output.py)


def render_table(table, header: dict | None, title: str | None, width: int | None,
                 full_names: bool = False) -> str:
    """A boxed header, then the table. Numbers always print whole (their columns are as wide as their
    longest cell); the label column (key or name) takes the width that is left: short display names that
    fit it, or with `full_names` the whole names folded onto several lines. On a terminal too narrow for
    every column, secondary columns (solo, duration, mean, ...) are left out, and a line under the table
    says which; if it is still too narrow the table is wider than asked (the terminal wraps it) rather
    than a number being cut. A table without a name column (ranks, collectives, categories) that is wider
    than the terminal is printed in blocks of columns that fit, each repeating the columns that say which
    row it is (like pandas' wide frames), never wrapped by the terminal line by line."""
    width = width or 160
    table, hidden = _fit_columns(table, width)
    blocks = _column_blocks(table, width)
    if len(blocks) == 1:
        return _render_grid(table, header, title, width, full_names, hidden)
    console, buffer = _console(width)
    _print_header(console, header, title)
    parts = [_render_grid(_select(table, columns), None, None, width, full_names, [])
             for columns in blocks]
    return buffer.getvalue() + "\n".join(parts) + _hidden_line(hidden, width)


def _render_grid(table, header: dict | None, title: str | None, width: int, full_names: bool,
                 hidden: list[str]) -> str:
    from rich.box import SIMPLE_HEAD
    from rich.table import Table
    from rich.text import Text     # plain Text everywhere: names like `[memory]` are not markup

    right = right_aligned(table)
    titles, rows = display_rows(table, full_names=True)
    widths, titles = _column_widths(titles, rows, right)
    label = _label_index(table)
    if label is None and not all(right):     # no name column (the link report): the last text column
        label = max(i for i, r in enumerate(right) if not r)
    fixed = sum(w for i, w in enumerate(widths) if i != label) + _GAP * max(len(widths) - 1, 0)
    name_width = max(_MIN_NAME, width - fixed)
    if label is not None:
        _, rows = display_rows(table, full_names=full_names, name_width=None if full_names else name_width)
        widths[label] = min(name_width, max([len(titles[label])] + [len(row[label]) for row in rows]))
        _widen_text(widths, rows, right, label, width - fixed - widths[label])
    console, buffer = _console(max(width, fixed + (widths[label] if label is not None else 0)))
    _print_header(console, header, title)
    grid = Table(box=SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=False)
    for i, (column, is_number) in enumerate(zip(titles, right)):
        if is_number:   # numbers never wrap, shrink or vanish
            grid.add_column(column, justify="right", no_wrap=True, min_width=widths[i])
        else:
            grid.add_column(column, overflow="fold", width=widths[i])
    text_columns = [i for i, is_number in enumerate(right) if not is_number]    # numbers are ours: safe
    for row in rows:
        for i in text_columns:
            row[i] = for_terminal(row[i])
        if full_names and label is not None:     # whole names filled line by line: rich breaks at words, and
            row[label] = _filled(row[label], widths[label])   # left 'void' alone on a kernel's first line
    if len(rows) > GRID_ROWS:     # rich lays out every cell (~0.5 ms each): a big table is plain padding
        body = grid_lines([" ".join(t.split()) for t in titles], rows, right, widths)
        return buffer.getvalue() + "\n".join(body) + "\n" + _hidden_line(hidden, width) + _hash_line(rows, label)
    for row in rows:
        grid.add_row(*(Text(cell) for cell in row))
    if rows:
        console.print(grid)
    else:
        console.print("(no rows)")
    for footer in (_hidden_line(hidden, width), "" if full_names else _hash_line(rows, label)):
        if footer:
            console.print(Text(footer.rstrip("\n")))
    return buffer.getvalue()


def _widen_text(widths: list[int], rows: list[list[str]], right: list[bool], label: int, room: int) -> None:
    """Give the room the label column leaves to the other text columns (held to _OTHER_TEXT, so a check's
    path folded over three lines beside empty space), left to right, each up to its longest cell."""
    for i, is_number in enumerate(right):
        if room <= 0:
            return
        if is_number or i == label:
            continue
        extra = min(room, max([0] + [len(row[i]) for row in rows]) - widths[i])
        if extra > 0:
            widths[i] += extra
            room -= extra


def _filled(text: str, width: int) -> str:
    """`text` folded into lines of `width` characters, each filled to the end (a break at a line's end,
    wherever it falls: a kernel signature has few spaces and many long words)."""
    lines = []
    for piece in text.splitlines() or [""]:
        while piece:
            line, piece = piece[:width], piece[width:].lstrip(" ")
            lines.append(line)
    return "\n".join(lines) or text


GRID_ROWS = 2000       # beyond this many rows the grid is drawn by report/grid.py, not rich


_HASHED = re.compile(r" ~[0-9a-f]{6}$")     # names.display_names' suffix for names shortened alike


def _hash_line(rows: list[list[str]], label: int | None) -> str:
    """A line saying what the `~1228c9` after some names is, when a shown name has one."""
    if label is None or not any(_HASHED.search(row[label]) for row in rows):
        return ""
    return ("(~xxxxxx after a name: names that look alike here, told apart by a hash of the whole name; "
            "--full-names or --format csv shows them whole)\n")


def _hidden_line(hidden: list[str], width: int) -> str:
    return (f"(not shown at {width} columns: {', '.join(hidden)}; a wider terminal or --format csv|json shows "
            "every column)\n") if hidden else ""


# secondary columns, first left out when the terminal is too narrow for the name column and the numbers
_DROP_ORDER = ("concrete_inputs", "input_types", "solo_ns", "kernels", "bytes", "flops", "duration_ns",
               "inferred_self_ns", "exclusive_self_ns", "mean_self_ns", "ranks",
               "min_rank", "max_rank", "min_self_ns", "max_self_ns",
               "a_step_ns", "b_step_ns", "noise_ns", "p_value", "a_count", "b_count", "device", "count",
               "inclusive_self_ns", "depth", "category")


# the columns that say which row it is, repeated in every block of a table printed in blocks
_ROW_KEYS = ("rank", "device", "window", "instance", "collective", "category", "step", "step_name", "stream")


def _column_blocks(table, width: int) -> list[list[str]]:
    """The table's columns in blocks that each fit `width` (one block when the table fits, has a name
    column, or has nothing to split): the leading row-key columns, then as many others as fit."""
    names = column_names(table)
    if _label_index(table) is not None or len(names) < 2:
        return [names]
    titles, rows = display_rows(table, full_names=True)
    widths, _ = _column_widths(titles, rows, right_aligned(table))
    if sum(widths) + _GAP * (len(widths) - 1) <= width:
        return [names]
    keys = 1
    while keys < len(names) - 1 and names[keys] in _ROW_KEYS and names[0] in _ROW_KEYS:
        keys += 1
    if sum(widths[:keys]) + _GAP * keys > width // 2:     # long keys: the first column alone says which row
        keys = 1
    blocks, used = [], sum(widths[:keys]) + _GAP * (keys - 1)
    current, current_width = [], used
    for name, column_width in zip(names[keys:], widths[keys:]):
        if current and current_width + _GAP + column_width > width:
            blocks.append(names[:keys] + current)
            current, current_width = [], used
        current.append(name)
        current_width += _GAP + column_width
    blocks.append(names[:keys] + current)
    return blocks


def _select(table, columns: list[str]):
    return table.select(columns) if isinstance(table, pa.Table) else table[columns]


def _fit_columns(table, width: int):
    """`table` without the secondary columns a `width`-column terminal has no room for, and their titles."""
    if _label_index(table) is None:      # tables without a name column (ranks, links) keep every column
        return table, []
    hidden = []
    titles, rows = display_rows(table)
    label = _label_index(table)
    wanted = min(_NAME_ROOM, max([_MIN_NAME] + [len(row[label]) for row in rows]))    # its short names whole
    for column in _DROP_ORDER:
        titles, rows = display_rows(table, full_names=True)
        widths, _ = _column_widths(titles, rows, right_aligned(table))
        label = _label_index(table)
        fixed = sum(w for i, w in enumerate(widths) if i != label) + _GAP * max(len(widths) - 1, 0)
        if fixed + wanted <= width:
            break
        if column in column_names(table):
            table = table.drop_columns([column]) if hasattr(table, "drop_columns") else table.drop(columns=[column])
            hidden.append(column.removesuffix("_ns").replace("_", " "))
    return table, hidden


_GAP = 3          # SIMPLE_HEAD: a padding space on each side of an inner column edge and a blank divider
_MIN_NAME = 24    # the label column never gets narrower than this; the table grows instead
_NAME_ROOM = 40   # secondary columns make way until the label column has this much (or its names whole)
_OTHER_TEXT = 24  # other text columns (category, status) fold at this width


def _label_index(table) -> int | None:
    label = label_column(table)
    return column_names(table).index(label) if label is not None else None


def _column_widths(titles: list[str], rows: list[list[str]], right: list[bool]) -> tuple[list[int], list[str]]:
    """Width of each column and its title, wrapped at word boundaries so a long title never widens or
    cuts a column of short numbers."""
    import textwrap

    widths, wrapped = [], []
    for i, title in enumerate(titles):
        longest = max([0] + [len(row[i]) for row in rows])
        if right[i]:
            width = max(longest, max(len(word) for word in title.split()) if title.split() else 0)
        else:
            width = max(min(longest, _OTHER_TEXT), min(len(title), _OTHER_TEXT))
        widths.append(width)
        wrapped.append("\n".join(textwrap.wrap(title, width, break_long_words=False)) or title)
    return widths, wrapped


def _console(width: int):
    from rich.console import Console

    buffer = io.StringIO()
    return Console(file=buffer, width=width, force_terminal=False, color_system=None, highlight=False,
                   emoji=False, no_color=True), buffer


def _print_header(console, header: dict | None, title: str | None) -> None:
    """The header's facts and notes in one box, the same above tables and trees."""
    from rich.panel import Panel
    from rich.text import Text

    facts, notes = header_lines(header)
    findings = [f"finding: {line}" for line in finding_lines(header)]
    if facts or notes or findings:
        body = "\n".join(for_terminal(line) for line in findings + _wrap_facts(facts) +
                         [f"note: {note}" for note in notes])
        console.print(Panel(Text(body), title=Text(for_terminal(title or "traceattr")), expand=False))


def render_tree_text(table, header: dict | None, top_per_level: int, title: str | None = None,
                     width: int | None = None) -> str:
    from traceattr.report.tree import render_tree   # lazy: imports pandas; an arrow table renders without it

    console, buffer = _console(width or 160)
    _print_header(console, header, title)
    return buffer.getvalue() + render_tree(table, top_per_level)


def _wrap_facts(facts: list[str], per_line: int = 3) -> list[str]:
    return ["   ".join(facts[i:i + per_line]) for i in range(0, len(facts), per_line)]


# A spreadsheet evaluates a cell that starts with one of these as a formula (CSV injection): a kernel or an
# annotation named `=HYPERLINK(...)` in a trace from elsewhere became a live link. Such a text cell gets a
# leading `'` (OWASP's advice), which spreadsheets show as text; numeric columns are never touched, so a
# negative number stays a number.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_PATTERN = "^([=+\\-@\t\r])"


def render_csv(table, header: dict | None, title: str | None, width: int | None, raw: bool = False) -> str:
    """csv of `table`; text cells a spreadsheet would run as formulas made inert unless `raw`."""
    if not raw:
        table = inert_formulas(table)
    if isinstance(table, pa.Table):
        import pyarrow.csv as pcsv
        buffer = pa.BufferOutputStream()
        pcsv.write_csv(table, buffer, pcsv.WriteOptions(quoting_style="needed"))
        return buffer.getvalue().to_pybytes().decode("utf-8", "surrogateescape")
    # the csv module quotes a cell holding "\n" but not one holding a bare "\r", where a spreadsheet starts
    # a new row: `x\r=cmd` put a live formula at the start of one. Such a table has every text cell quoted
    quoting = csv.QUOTE_NONNUMERIC if _holds_carriage_return(table) else csv.QUOTE_MINIMAL
    return table.to_csv(index=False, lineterminator="\n", quoting=quoting)


def _holds_carriage_return(frame) -> bool:
    return any(isinstance(v, str) and "\r" in v for name in frame.columns if frame[name].dtype.kind in "OSU"
               or str(frame[name].dtype) in ("string", "category") for v in frame[name].astype(object))


def inert_formulas(table):
    """`table` with every text cell that a spreadsheet would run as a formula prefixed by `'`; numbers,
    and text that does not start with = + - @ tab or CR, are left as they are."""
    if isinstance(table, pa.Table):
        import pyarrow.compute as pc

        columns = []
        for column in table.columns:
            kind = column.type
            if pa.types.is_dictionary(kind) and (pa.types.is_string(kind.value_type)
                                                  or pa.types.is_large_string(kind.value_type)):
                column, kind = column.cast(kind.value_type), kind.value_type
            if pa.types.is_string(kind) or pa.types.is_large_string(kind):
                column = pc.replace_substring_regex(column, pattern=_FORMULA_PATTERN, replacement="'\\1")
            columns.append(column)
        return pa.table(columns, names=table.column_names)
    import pandas as pd

    out = None
    for name in table.columns:
        values = table[name]
        if not (pd.api.types.is_object_dtype(values.dtype) or pd.api.types.is_string_dtype(values.dtype)
                or isinstance(values.dtype, pd.CategoricalDtype)):
            continue
        if isinstance(values.dtype, pd.CategoricalDtype):
            values = values.astype(object)
        risky = values.map(lambda v: isinstance(v, str) and v.startswith(FORMULA_STARTS)).astype(bool)
        if risky.any():
            out = table.copy() if out is None else out
            out[name] = values.astype(object).where(~risky, "'" + values[risky].astype(str))
    return table if out is None else out


def render_json(table, header: dict | None, title: str | None, width: int | None) -> str:
    if isinstance(table, pa.Table):   # to_pylist: Python ints, exact; nan becomes null (NaN is not JSON)
        rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
                for row in table.to_pylist()]
        return json.dumps(rows, ensure_ascii=False, allow_nan=False) + "\n"
    # to_dict gives Python ints for int64 columns: raw ns, exact; nan becomes null (NaN is not JSON)
    values = table.astype(object).where(table.notna(), None)
    return json.dumps(values.to_dict(orient="records"), ensure_ascii=False, allow_nan=False) + "\n"


def render_markdown(table, header: dict | None, title: str | None, width: int | None,
                    full_names: bool = False) -> str:
    facts, notes = header_lines(header)
    lines = [f"### {_cell(title)}", ""] if title else []
    lines += [f"- **finding:** {_cell(line)}" for line in finding_lines(header)]
    lines += [f"- {_cell(fact)}" for fact in facts] + [f"- note: {_cell(note)}" for note in notes]
    if lines:
        lines.append("")
    titles, rows = display_rows(table, full_names=full_names)
    align = ["---:" if right else ":---" for right in right_aligned(table)]
    lines.append("| " + " | ".join(_cell(t) for t in titles) + " |")
    lines.append("| " + " | ".join(align) + " |")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    footer = "" if full_names else _hash_line(rows, _label_index(table))
    return "\n".join(lines) + "\n" + (f"\n{_cell(footer.strip())}\n" if footer else "")


def _cell(text: str) -> str:
    return for_markdown(text)     # report/escape.py: control characters and markdown/HTML syntax


def write_parquet(table, header: dict | None, output: str) -> None:
    import pyarrow.parquet as pq

    arrow = table if isinstance(table, pa.Table) else pa.Table.from_pandas(table, preserve_index=False)
    if header:
        metadata = dict(arrow.schema.metadata or {})
        metadata[HEADER_METADATA_KEY] = json.dumps(header, default=str).encode()
        arrow = arrow.replace_schema_metadata(metadata)
    with replacing(output, "parquet") as target:
        pq.write_table(arrow, target)


def render_raw_csv(table, header: dict | None, title: str | None, width: int | None) -> str:
    return render_csv(table, header, title, width, raw=True)


_TEXT_RENDERERS = {"table": render_table, "csv": render_csv, RAW_CSV: render_raw_csv, "json": render_json,
                   "markdown": render_markdown}
