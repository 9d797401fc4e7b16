"""`-o FILE`, written whole or not at all.

A full disk (or a kill) mid-write left a truncated report that looked finished (a 300 KB `.html` of a
larger one). The text goes to a temporary file beside the target and becomes it in one rename. Imports
nothing heavy: the cached-answer path writes through here.
"""

from __future__ import annotations

import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from traceattr.errors import TraceInputError
from traceattr.report.printable import printable_lines


def write_output(data: str | bytes, output: str | os.PathLike, what: str = "output") -> None:
    """Write `data` (text as UTF-8; bytes kept by a lenient decode go back as they came) to `output`. Text
    for a terminal (`-o /dev/tty`, `-o /dev/stdout` at a shell) is shown escaped as on stdout (cli.echo_data):
    a kernel name's escape sequences would act on it."""
    with replacing(output, what) as target:
        with open(target, "wb") as handle:
            if isinstance(data, str) and os.isatty(handle.fileno()):
                data = printable_lines(data)
            handle.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)


@contextmanager
def replacing(output: str | os.PathLike, what: str = "output") -> Iterator[str]:
    """The path to write `output` through: a temporary file that replaces `output` when the block ends
    without error (removed otherwise). A target that is not a regular file (/dev/null, a FIFO,
    /dev/stdout) is written in place: a rename would replace the device. A failure is one TraceInputError
    naming `output`."""
    real = os.path.realpath(output)          # through a symlink: the file it names is replaced, not the link
    try:
        mode = os.stat(real).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with _one_line(output, what):
            yield os.fspath(output)
        return
    folder, name = os.path.split(real)
    temporary = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    try:
        with _one_line(output, what):
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))   # the umask's mode
            if mode is not None:
                os.chmod(temporary, stat.S_IMODE(mode))      # replacing a file keeps its mode
            yield temporary
            os.replace(temporary, real)
    finally:
        Path(temporary).unlink(missing_ok=True)


@contextmanager
def _one_line(output, what: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise TraceInputError(f"{output}: cannot write {what} ({exc.strerror or exc})") from None
