"""Comparison tables for people and machines: header facts, columns per format, JSON-safe values."""

from __future__ import annotations

import pandas as pd

from traceattr.analysis.compare import KIND, RAW_NAMES

PEOPLE_FORMATS = ("table", "markdown")


def compare_header(table: pd.DataFrame, path_a: str, path_b: str) -> dict:
    """Facts for the report header from compare()'s attrs."""
    attrs = table.attrs
    return {
        "A": path_a, "B": path_b,
        "busy A_ns": attrs.get("busy_a_ns", 0), "busy B_ns": attrs.get("busy_b_ns", 0),
        "windows A_ns": attrs.get("window_a_ns", 0), "windows B_ns": attrs.get("window_b_ns", 0),
        "steps": f"A {attrs.get('steps_a', 0)}, B {attrs.get('steps_b', 0)}",
        "noise test": (attrs["test"] if str(attrs.get("test", "")).startswith("none") else
                       f"{attrs.get('test', 'Welch t')} on per-step values, Holm-corrected, "
                       f"alpha {attrs.get('alpha', 0.05)}"),
        "names normalized": bool(attrs.get("normalized", True)),
        "notes": list(attrs.get("notes", [])),
        "findings": list(attrs.get("findings", [])),      # analysis/findings.py: what the page opens with
    }


def for_format(table: pd.DataFrame, fmt: str) -> pd.DataFrame:
    """People formats drop the long raw-name and kind columns."""
    if fmt in PEOPLE_FORMATS:
        return table.drop(columns=[RAW_NAMES, KIND])
    return table


def runs_table(tables: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The comparisons of several pairs of runs as one table, each row led by its pair's `run` name (as
    summarize's several runs in a file or a machine format)."""
    return pd.concat([table.assign(run=name)[["run", *table.columns]] for name, table in tables], ignore_index=True)
