"""`traceattr ...` run in this process through click's CliRunner: what a `python -m traceattr.cli` subprocess
answers (exit code, stdout, stderr) without the ~1 s CPU of a new interpreter importing pandas and pyarrow.

Tests whose point is the process boundary (signals and Ctrl-C, a pseudo-terminal, what a process prints at
exit, imports of a fresh interpreter, `python -m traceattr` itself) keep real subprocesses.

What a process would show and CliRunner would swallow is put back on stderr, so the same assertions fail
for the same bugs: an exception that escaped the command's handler (a process prints its traceback and
exits 1), and warnings (a process prints them with Python's default filters)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import traceback
import warnings

from click.testing import CliRunner


def run_cli(*args, env: dict | None = None, cwd=None, input: str | bytes | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess:
    """`traceattr *args` in this process: a CompletedProcess as `subprocess.run(..., capture_output=True,
    text=True)` gives it. `env` updates the environment for the run only; `timeout` is a subprocess's and
    ignored here."""
    from traceattr.cli import main

    argv = [str(arg) for arg in args]
    saved = dict(os.environ)         # the command sets --max-events/--max-inflate in os.environ for its workers
    # a subprocess writing to a pipe sees no terminal: tables are 160 columns wide (cli.terminal_width)
    overrides = {"COLUMNS": "160", "LINES": "24", **(env or {})}
    try:
        with warnings.catch_warnings(record=True) as caught, \
                (contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext()):
            warnings.resetwarnings()             # a fresh interpreter's filters, not pytest's
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            result = CliRunner().invoke(main, argv, input=input, env=overrides, catch_exceptions=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    stderr = result.stderr
    stderr += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))     # "Traceback (most recent..."
    return subprocess.CompletedProcess(["traceattr", *argv], result.exit_code, result.stdout, stderr)


def run_cli_counting(*args, **kwargs) -> tuple[subprocess.CompletedProcess, int]:
    """run_cli, and the most device rows of any TraceSet this process built meanwhile (0: the driver never
    held the traces), as conftest.TRACESET_PROBE counts them in a process of its own: pool workers are other
    processes, whose TraceSets are not counted here either."""
    from traceattr.model import traceset

    biggest = [0]
    init = traceset.TraceSet.__init__

    def counting(self, device, *rest, **named):
        biggest[0] = max(biggest[0], device.num_rows)
        init(self, device, *rest, **named)

    traceset.TraceSet.__init__ = counting
    try:
        done = run_cli(*args, **kwargs)
    finally:
        traceset.TraceSet.__init__ = init
    return done, biggest[0]
