"""Helpers shared by the tests that build small trace sets and compare loaded TraceSets."""

from __future__ import annotations

SMALL = dict(layers=3, ops_per_module=1, kernels_per_op=2, steps=2)   # TraceSpec fields of a quick build
TABLES = ("device", "host", "markers", "files")


def assert_same(a, b) -> None:
    """Two TraceSets hold identical tables and notes."""
    for name in TABLES:
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.notes == b.notes


def checked(traceset):
    """The CheckReport `traceattr check` gives a loaded TraceSet: traceattr.check maps its files from its
    tables with the command's plans (one run)."""
    import traceattr

    (run,) = traceattr.check(traceset).runs
    return run.report


def header_of(traceset, by: str = "kernel") -> dict:
    """The report header `traceattr summarize` gives a loaded TraceSet's table of level `by` (its files
    mapped from its tables with the command's plan, the check line included)."""
    from traceattr.analysis.run_tables import report_runs

    (run,) = report_runs(traceset, by=by)
    return run.header
