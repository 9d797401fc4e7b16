"""Shared fixtures. Real traces are read from ../shared/traces beside the repository, never copied in."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
from pathlib import Path

import msgspec
import pytest

# pytest-xdist's workers export COLUMNS=80 and LINES=24: tests, and the CLI subprocesses they start, see no
# terminal size from whoever runs them (a table's columns depend on it)
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# capture's writer process runs at nice 19 for users; beside two busy test processes it was starved past
# stop()'s flush timeout, and capture tests failed on timing alone (test_capture_writer checks the default)
os.environ.setdefault("TRACEATTR_WRITER_NICE", "0")

# a test run started in the background (`cmd &` in a script, as some CI runners do) inherits SIGINT ignored,
# and so do the processes the Ctrl-C tests interrupt: they never saw the Ctrl-C (8 tests failed that way).
# Handled here, it is back to its default in every process the tests start (a handler is reset on exec)
signal.signal(signal.SIGINT, signal.default_int_handler)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("TRACEATTR_SHARED_TRACES", REPO_ROOT.parent / "shared" / "traces"))
SAMPLE_TRACES = REPO_ROOT / "sample_traces"


def wait_until_gone(pid: int, timeout_s: float = 60.0) -> None:
    """Until process `pid` (not a child of this one) has exited; AssertionError after `timeout_s`."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs after {timeout_s} s")


def read_terminal(leader: int) -> str:
    """Everything a child wrote to the pseudo-terminal whose leader end is `leader`, until it closed it
    (then the leader is closed too)."""
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:           # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of real GPU traces from other projects; tests that need it skip when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (set TRACEATTR_SHARED_TRACES)")
    return SHARED_TRACES


class _TraceHead(msgspec.Struct):
    traceEvents: msgspec.Raw                       # required; its content is skipped, not decoded


def is_kineto_trace(path: Path) -> bool:
    """Whether `path` (.json or .json.gz) holds a Kineto trace: a JSON object with `traceEvents`. A file that
    decodes to anything else (a list, an object without `traceEvents`, as a capture's
    execution_details.json beside its traces) is not one. A file that does not decode at all still counts,
    so that a truncated or corrupt trace fails the tests that read it instead of vanishing from them."""
    try:
        data = gzip.open(path).read() if path.name.endswith(".gz") else path.read_bytes()
        msgspec.json.decode(data, type=_TraceHead)
    except msgspec.ValidationError:                 # valid JSON, but not an object with traceEvents
        return False
    except (OSError, EOFError, msgspec.DecodeError):
        return True
    return True


def trace_files(path: Path) -> list[Path]:
    """The Kineto trace files at or under `path`, sorted: every .json / .json.gz file that is a trace
    (`is_kineto_trace`). The one listing of trace files under a folder that tests use on the shared traces,
    which also hold JSON files that are not traces."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")) and is_kineto_trace(p))


def shared_trace(relative: str) -> Path:
    """One file or folder under the shared traces, skipping the calling test when it is missing."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"real trace {relative} not found under {SHARED_TRACES}")
    return path


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Every test, and every CLI subprocess it starts, uses one cache folder of this session, never the
    user's ~/.cache/traceattr."""
    os.environ["TRACEATTR_CACHE_DIR"] = str(tmp_path_factory.mktemp("traceattr-cache"))
    yield
    os.environ.pop("TRACEATTR_CACHE_DIR", None)


# a CLI run (`python -c TRACESET_PROBE summarize ...`) that prints on stderr `BIGGEST n`: the most device rows of
# any TraceSet the command's process built (0: the driver never held the traces; map-reduce runs one-file
# TraceSets in pool workers). TRACESET_COUNTER keeps that count in `biggest[0]`, for scripts of their own
TRACESET_COUNTER = """
import sys
from traceattr.model import traceset
biggest = [0]
init = traceset.TraceSet.__init__
def counting(self, device, *args, **kwargs):
    biggest[0] = max(biggest[0], device.num_rows)
    init(self, device, *args, **kwargs)
traceset.TraceSet.__init__ = counting
"""
TRACESET_PROBE = TRACESET_COUNTER + """
from traceattr.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print("BIGGEST", biggest[0], file=sys.stderr)
"""


# a real headless browser for the HTML report's tests (.ci/run installs Debian's chromium when missing)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium package)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()
