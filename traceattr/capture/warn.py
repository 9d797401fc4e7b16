"""Warnings that point at the user's line, however deep inside capture (or torch's callback) they start."""

from __future__ import annotations

import os
import sys
import warnings

_CAPTURE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIPPED = (_CAPTURE_DIR, os.path.dirname(warnings.__file__) + os.sep + "contextlib.py")


def warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """warnings.warn with the stacklevel of the first frame outside traceattr.capture and torch."""
    warnings.warn(message, category, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    skipped = _SKIPPED + tuple(_torch_dirs())
    frame, level = sys._getframe(2), 2        # 1 is warn() itself; 2 its caller
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame, level = frame.f_back, level + 1
    return level


def _torch_dirs() -> list[str]:
    torch = sys.modules.get("torch")
    path = getattr(torch, "__file__", None)
    return [os.path.dirname(path) + os.sep] if path else []
