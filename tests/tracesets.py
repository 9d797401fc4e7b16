"""Helpers shared by the tests that build small trace sets and compare loaded TraceSets."""

from __future__ import annotations

SMALL = dict(layers=3, ops_per_module=1, kernels_per_op=2, steps=2)   # TraceSpec fields of a quick build
TABLES = ("device", "host", "markers", "files")


def assert_same(a, b) -> None:
    """Two TraceSets hold identical tables and notes."""
    for name in TABLES:
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.notes == b.notes
