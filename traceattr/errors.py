"""One exception hierarchy. The CLI turns any TraceError into one line and its exit code."""

from __future__ import annotations


class TraceError(Exception):
    """Base of every error traceattr raises on purpose. `exit_code` is what the CLI exits with."""

    exit_code = 1


class TraceInputError(TraceError):
    """Bad input from the user (missing path, broken file, ambiguous ranks): exit code 2."""

    exit_code = 2


class TraceFormatError(TraceInputError):
    """A file that should be a Kineto trace but cannot be read as one. The message names the file."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TraceDiscoveryError(TraceInputError):
    """The path holds no traces, or their ranks cannot be told apart."""


class NoTracesError(TraceDiscoveryError):
    """`path` holds no (readable) trace file; the CLI adds what a capture's manifests there say."""

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        super().__init__(message)


class CaptureConfigError(TraceError, ValueError):
    """A capture configuration with one or more invalid fields; `problems` lists each by field name."""

    exit_code = 2

    def __init__(self, problems: list[str], hint: str = "") -> None:
        self.problems, self.hint = list(problems), hint
        super().__init__("invalid capture config: " + "; ".join(self.problems) + (f" ({hint})" if hint else ""))

    def __reduce__(self):
        # the default pickles str(self) as the only argument, which would become a list of characters
        return type(self), (self.problems, self.hint)
