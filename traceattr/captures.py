"""Capture traces given beside the path (`--graph-capture PATH`, `graph_capture=`) for the command or call
that is running: a context variable, so the capture stage finds them without every function passing them on.
Its own module on the ground floor because the CLI reads it before anything heavy is imported (no numpy)."""

from __future__ import annotations

import contextlib
import os
from contextvars import ContextVar

# --graph-capture / graph_capture=: capture traces given beside the path, for the command or call running
GIVEN_CAPTURES: ContextVar[tuple[str, ...]] = ContextVar("graph_capture", default=())


def capture_paths(value) -> tuple[str, ...]:
    """graph_capture= as a tuple of paths: one path, or several (a text is one path, not its characters)."""
    if value is None:
        return ()
    values = (value,) if isinstance(value, (str, os.PathLike)) else tuple(value)
    for one in values:
        if not isinstance(one, (str, os.PathLike)) or not str(one):
            raise TypeError(f"graph_capture must be a path or paths, got {type(one).__name__}")
    return tuple(os.fspath(one) for one in values)


@contextlib.contextmanager
def captures_given(value):
    """GIVEN_CAPTURES set to `value` (paths) while the block runs."""
    token = GIVEN_CAPTURES.set(capture_paths(value))
    try:
        yield
    finally:
        GIVEN_CAPTURES.reset(token)
