"""The body of a terminal table as plain lines: titles, a rule, rows; numbers right-aligned and never
wrapped, text folded to its column's width.

Why not rich's Table: it measures, wraps and renders every cell through its layout engine and keeps the
segments of the whole table, about 0.5 ms and several KB per cell: 200k distinct kernel names took 148 s
and 2.7 GB. This is one pass of string padding (the same look as the SIMPLE_HEAD table it replaces), linear
in the cells; cell widths are terminal cells (wide characters count 2), as rich counts them.
"""

from __future__ import annotations

from rich.cells import cell_len, chop_cells

GAP = "   "
RULE = "─"


def grid_lines(titles: list[str], rows: list[list[str]], right: list[bool], text_widths: list[int | None]) -> list[str]:
    """Lines of the table. Numeric columns (`right[i]`) are as wide as their longest cell; text column i
    `text_widths[i]` wide at most (None: its longest cell; the caller gives text columns their room:
    render._widen_text); longer text folds, at spaces where it can."""
    longest = [max([_cells(title)] + [_cells(row[i]) for row in rows]) for i, title in enumerate(titles)]
    widths = [n if r or w is None else max(1, min(w, n)) for n, r, w in zip(longest, right, text_widths)]
    lines = _row_lines(titles, widths, right)
    lines.append(RULE * (sum(widths) + len(GAP) * (len(widths) - 1)))
    for row in rows:
        lines.extend(_row_lines(row, widths, right))
    return lines


def _row_lines(cells: list[str], widths: list[int], right: list[bool]) -> list[str]:
    sizes = list(map(_cells, cells))
    if all(map(int.__le__, sizes, widths)):     # the usual row: one line
        return [GAP.join([" " * (width - size) + cell if r else cell + " " * (width - size)
                          for cell, size, width, r in zip(cells, sizes, widths, right)]).rstrip()]
    folded = [[cell] if r else _fold(cell, width) for cell, width, r in zip(cells, widths, right)]
    height = max(map(len, folded))
    return [GAP.join(_pad(parts[line] if line < len(parts) else "", width, r)
                     for parts, width, r in zip(folded, widths, right)).rstrip()
            for line in range(height)]


def _cells(text: str) -> int:
    """Terminal cells of `text` (rich's cell_len is slow on the ASCII text most names are)."""
    return len(text) if text.isascii() else cell_len(text)


def _fold(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells, broken after spaces where possible."""
    if cell_len(text) <= width:
        return [text]
    lines, line = [], ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        pieces = chop_cells(word, width) or [""]
        lines.extend(pieces[:-1])
        line = pieces[-1]
    lines.append(line)
    return lines


def _pad(cell: str, width: int, right: bool) -> str:
    space = " " * max(0, width - _cells(cell))
    return space + cell if right else cell + space
