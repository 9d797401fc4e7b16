"""render_tree: an attribution tree (attribute(..., tree=True)) as indented text for the terminal.

One block per (rank, device). Each line: inclusive self time, its share of the block's total, exclusive
self time, then the name indented by depth. Children are sorted by inclusive time; past `top_per_level`
the rest of a parent's children fold into one "... N more" line so the total still adds up on screen.
"""

from __future__ import annotations

import pandas as pd

from traceattr import schema as S
from traceattr.report.escape import for_terminal
from traceattr.report.shape import human_ns

_INDENT = "  "


def format_ns(ns: int) -> str:
    """The one unit style of every table (report/shape.py human_ns)."""
    return human_ns(ns)


def render_tree(df: pd.DataFrame, top_per_level: int = 10, max_depth: int | None = None) -> str:
    """Indented text of a tree-level attribution table (columns key, name, parent, depth,
    inclusive_self_ns, exclusive_self_ns, rank, device)."""
    needed = {"key", "name", "parent", "inclusive_self_ns", "exclusive_self_ns", S.RANK, S.DEVICE}
    missing = needed - set(df.columns)
    if missing:
        raise ValueError(f"render_tree needs an op_stack/module/annotation table; missing {sorted(missing)}")
    if top_per_level < 1:
        raise ValueError("top_per_level must be at least 1")
    kind = df.attrs.get("time_kind", "device")
    blocks = []
    for (rank, device), group in df.groupby([S.RANK, S.DEVICE], sort=True):
        total = int(group["exclusive_self_ns"].sum())
        where = f"rank {rank}" + (f" device {device}" if device >= 0 else "")
        lines = [f"{where}: {format_ns(total)} {kind} self time"]
        lines.append(f"{'inclusive':>13} {'share':>6} {'exclusive':>13}  name")
        lines.extend(_lines(group, total, top_per_level, max_depth))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def _lines(group: pd.DataFrame, total: int, top: int, max_depth: int | None) -> list[str]:
    keys = set(group["key"])
    children: dict[str, list[tuple]] = {}
    for key, name, parent, inclusive, exclusive in zip(
            group["key"], group["name"], group["parent"], group["inclusive_self_ns"],
            group["exclusive_self_ns"]):
        parent = parent if parent in keys else ""      # orphans (flat tables) print as roots
        children.setdefault(parent, []).append((int(inclusive), int(exclusive), key, name))
    out: list[str] = []

    def emit(parent: str, depth: int) -> None:
        kids = sorted(children.get(parent, []), key=lambda kid: (-kid[0], kid[2]))
        for inclusive, exclusive, key, name in kids[:top]:
            out.append(_line(inclusive, exclusive, total, depth, name))
            if max_depth is None or depth + 1 < max_depth:
                emit(key, depth + 1)
        rest = kids[top:]
        if rest:
            hidden = sum(kid[0] for kid in rest)
            out.append(_line(hidden, None, total, depth, f"... {len(rest)} more"))

    emit("", 0)
    return out


def _line(inclusive: int, exclusive: int | None, total: int, depth: int, name: str) -> str:
    share = 100.0 * inclusive / total if total else 0.0
    own = format_ns(exclusive) if exclusive is not None else ""
    return f"{format_ns(inclusive):>13} {share:5.1f}% {own:>13}  {_INDENT * depth}{for_terminal(name)}"
