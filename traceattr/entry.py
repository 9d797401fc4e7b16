"""The `traceattr` console script: the CLI (traceattr.cli) behind one guard for Ctrl-C while its modules
import (click and the rest: ~50 ms, before the command's own handler exists), which printed a traceback."""

from __future__ import annotations

import os
import sys


def main() -> None:
    try:
        from traceattr.cli import main as command   # lazy: a Ctrl-C while the CLI imports is caught here
    except KeyboardInterrupt:
        sys.stderr.write("traceattr: interrupted\n")
        sys.stderr.flush()
        os._exit(130)          # as the command's handler leaves (cli.TraceattrGroup)
    command()
