"""FileFailure: what a decoding task sends back for a file instead of raising."""

from __future__ import annotations

from dataclasses import dataclass

from traceattr.errors import TraceFormatError
from traceattr.io.splitter import NoTraceEventsError


@dataclass(frozen=True)
class FileFailure:
    """What a worker sends back instead of raising: enough to rebuild the serial path's exception."""

    path: str
    problem: str
    not_a_trace: bool        # NoTraceEventsError: skipped with a note, never fatal

    def exception(self) -> TraceFormatError:
        kind = NoTraceEventsError if self.not_a_trace else TraceFormatError
        return kind(self.path, self.problem)
