"""Render any result table (+ optional header dict) as table, csv, json, markdown or parquet.

Step one (report/shape.py) turns data into what people read; step two (here) writes one format. Every
renderer takes the same arguments, so `compare` and the attribution levels reuse them unchanged.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from traceattr.errors import TraceInputError
from traceattr.report.shape import display_rows, header_lines, right_aligned

FORMATS = ("table", "csv", "json", "markdown", "parquet")
HEADER_METADATA_KEY = b"traceattr.header"      # parquet schema metadata: the header as JSON


def render(table: pd.DataFrame, fmt: str = "table", header: dict | None = None, output: str | None = None,
           title: str | None = None, width: int | None = None, tree_top: int | None = None) -> str | None:
    """Render `table` as `fmt`. With `output` the result is written there and None returned; otherwise the
    text is returned (parquet is binary and needs `output`). `tree_top`: a tree table (attribute(...,
    tree=True)) in the `table` format is drawn indented, with that many children per level."""
    if fmt not in FORMATS:
        raise TraceInputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if output is None:
            raise TraceInputError("parquet is a binary format: give a file with -o FILE")
        write_parquet(table, header, output)
        return None
    if fmt == "table" and tree_top is not None:
        text = render_tree_text(table, header, tree_top)
    else:
        text = _TEXT_RENDERERS[fmt](table, header, title, width)
    if output is None:
        return text
    write_text(text, output)
    return None


def write_text(text: str, output: str) -> None:
    """Write rendered text to `output`; a failure is one line naming the file."""
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TraceInputError(f"{output}: cannot write output ({exc.strerror or exc})") from None


def render_table(table: pd.DataFrame, header: dict | None, title: str | None, width: int | None) -> str:
    from rich.box import SIMPLE_HEAD
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text     # plain Text everywhere: names like `[memory]` are not markup

    titles, rows = display_rows(table)
    min_widths, width = _column_plan(titles, rows, table, width or 160)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None,
                      highlight=False, emoji=False)
    facts, notes = header_lines(header)
    if facts or notes:
        body = "\n".join(_wrap_facts(facts) + [f"note: {note}" for note in notes])
        console.print(Panel(Text(body), title=Text(title or "traceattr"), expand=False))
    grid = Table(box=SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column, right, min_width in zip(titles, right_aligned(table), min_widths):
        if right:   # numbers never wrap or vanish; names fold into the room that is left
            grid.add_column(column, justify="right", no_wrap=True)
        else:
            grid.add_column(column, overflow="fold", min_width=min_width)
    for row in rows:
        grid.add_row(*(Text(cell) for cell in row))
    if rows:
        console.print(grid)
    else:
        console.print("(no rows)")
    return buffer.getvalue()


def render_tree_text(table: pd.DataFrame, header: dict | None, top_per_level: int) -> str:
    from traceattr.report.tree import render_tree

    facts, notes = header_lines(header)
    return "\n".join(facts + [f"note: {n}" for n in notes]) + "\n\n" + render_tree(table, top_per_level)


def _column_plan(titles, rows, table, width: int) -> tuple[list[int | None], int]:
    """Minimum widths of text columns (what numbers leave of `width`, most of it to the first, the row's
    key) and the console width to use: wider than asked rather than cropping a number off the table."""
    longest = [max([len(t)] + [len(row[i]) for row in rows]) for i, t in enumerate(titles)]
    right = right_aligned(table)
    numbers = sum(n for n, r in zip(longest, right) if r) + 3 * len(titles)   # + padding and divider
    text = [i for i, r in enumerate(right) if not r]
    widths: list[int | None] = [None] * len(titles)
    for i in text[1:]:
        widths[i] = min(longest[i], 16)
    if text:
        others = sum(widths[i] for i in text[1:])
        widths[text[0]] = min(longest[text[0]], max(20, width - numbers - others))
    needed = numbers + sum(w for w in widths if w is not None) + 2
    return widths, max(width, needed)


def _wrap_facts(facts: list[str], per_line: int = 3) -> list[str]:
    return ["   ".join(facts[i:i + per_line]) for i in range(0, len(facts), per_line)]


def render_csv(table: pd.DataFrame, header: dict | None, title: str | None, width: int | None) -> str:
    return table.to_csv(index=False, lineterminator="\n")


def render_json(table: pd.DataFrame, header: dict | None, title: str | None, width: int | None) -> str:
    # to_dict gives Python ints for int64 columns: raw ns, exact; nan becomes null (NaN is not JSON)
    values = table.astype(object).where(table.notna(), None)
    return json.dumps(values.to_dict(orient="records"), ensure_ascii=False, allow_nan=False) + "\n"


def render_markdown(table: pd.DataFrame, header: dict | None, title: str | None, width: int | None) -> str:
    facts, notes = header_lines(header)
    lines = [f"### {title}", ""] if title else []
    lines += [f"- {fact}" for fact in facts] + [f"- note: {note}" for note in notes]
    if lines:
        lines.append("")
    titles, rows = display_rows(table)
    align = ["---:" if right else ":---" for right in right_aligned(table)]
    lines.append("| " + " | ".join(_cell(t) for t in titles) + " |")
    lines.append("| " + " | ".join(align) + " |")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def write_parquet(table: pd.DataFrame, header: dict | None, output: str) -> None:
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    if header:
        metadata = dict(arrow.schema.metadata or {})
        metadata[HEADER_METADATA_KEY] = json.dumps(header, default=str).encode()
        arrow = arrow.replace_schema_metadata(metadata)
    try:
        pq.write_table(arrow, output)
    except OSError as exc:
        raise TraceInputError(f"{output}: cannot write parquet ({exc})") from None


_TEXT_RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "markdown": render_markdown}
