"""Which event decoder runs: the compiled scanner (`_scan.c`, see io/scanned.py) or msgspec alone.

The C scanner is used when the extension was built (setup.py marks it optional: an install without a
compiler still works) and TRACEATTR_PURE_PYTHON is not set; both give the same tables bit for bit
(tests/test_io_scanner.py); see io/scanned.py. This module imports nothing heavy, so `traceattr --version` can name the
decoder without loading numpy or msgspec.
"""

from __future__ import annotations

import os

try:
    from traceattr.io import _scan
except ImportError:              # installed without a compiler: msgspec alone
    _scan = None

PURE_PYTHON_ENV = "TRACEATTR_PURE_PYTHON"


def compiled_available() -> bool:
    return _scan is not None


def use_compiled() -> bool:
    return _scan is not None and os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")


def decoder_name() -> str:
    """Which event decoder runs, for --version and debug notes."""
    if use_compiled():
        return "C scanner (traceattr.io._scan) with msgspec fallback"
    reason = f"{PURE_PYTHON_ENV} is set" if _scan is not None else "C scanner not built"
    return f"msgspec ({reason})"
