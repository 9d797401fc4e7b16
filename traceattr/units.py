"""The one unit style of every people-facing number (tables, trees, HTML, repr), and the one reading of a
digit string (digits_int: from a trace, a file name, a store, an option or a step name)."""

from __future__ import annotations

_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"))
TIME_UNITS = _UNITS      # (ns per unit, unit), largest first: the chart axes' units too


def human_ns(ns) -> str:
    """12_345_678 -> '12.3 ms'; exact integers below 1 µs stay in ns; a missing value is blank."""
    if ns is None or ns != ns:
        return ""
    ns = int(ns)
    magnitude = abs(ns)
    for scale, unit in _UNITS:
        if magnitude >= scale:
            value = ns / scale
            digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
            return f"{value:.{digits}f} {unit}"
    return f"{ns} ns"


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 file`, `2 files`, `1,024 windows`: a count with its noun in the right number."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def human_bytes(count: int) -> str:
    """1536 -> '1.5 KiB', 10 << 30 -> '10 GiB': binary units, the one that fits."""
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.3g} {unit}"


def p_text(p: float) -> str:
    """A p-value as people read it: `p < 0.01` below 0.01, else `p = 0.23` (never `p >= 1.00`: a p-value is a
    probability, at most 1)."""
    if p != p:
        return "p n/a"
    return "p < 0.01" if p < 0.01 else f"p = {min(p, 1.0):.2f}"


def digits_int(text: str, most: int = 18) -> int | None:
    """The int that an ASCII digit string of at most `most` digits spells, else None: str.isdigit() is also
    true of '²' and '①', which int() refuses (a traceback from a trace's rank or step name), and int()
    refuses 4,300 digits or more."""
    return int(text) if 0 < len(text) <= most and text.isascii() and text.isdigit() else None
