"""A Dask distributed cluster as a concurrent.futures.Executor for load(..., executor=...).

Dask is an optional extra (`pip install traceattr[dask]`): it is imported only here, only when asked for.
The address is checked before Dask sees it (a malformed one makes Dask retry for its whole timeout and
print a traceback from `Client.__del__`), and connecting has one deadline for the connection *and* the
scheduler's first answer: a listener that accepts and never answers fails in time too. Whatever the peer
answers (garbage, a huge frame length), a failed connection is one line (SchedulerError, exit 2), and the
half-made Client is closed at once (its `__del__` waited 2x the timeout, then printed a traceback). During a run,
ClusterWatch fails it when the scheduler connection is lost or no worker is left (Dask would wait forever).
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext
from typing import Iterator

from traceattr.errors import TraceInputError

TIMEOUT_ENV = "TRACEATTR_SCHEDULER_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 3600.0
SCHEMES = ("tcp", "tls")
# [scheme://]host:port, host a name, an IPv4 address or a bracketed IPv6 address
_ADDRESS = re.compile(r"(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
                      r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
                      r":(?P<port>[0-9]{1,5})/?")


class SchedulerError(TraceInputError):
    """No Dask scheduler answers at the given address (or dask is not installed): exit code 2."""


def check_address(address: str) -> str:
    """The address as Dask wants it (`tcp://host:port`), or a SchedulerError saying what is wrong."""
    text = address.strip()
    match = _ADDRESS.fullmatch(text)
    scheme = (match.group("scheme") or "tcp").lower() if match else None
    if match is None or not 1 <= int(match.group("port")) <= 65535:
        raise SchedulerError(f"--scheduler {address!r}: expected tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786)")
    if scheme not in SCHEMES:
        raise SchedulerError(f"--scheduler {address!r}: scheme {scheme}:// is not supported "
                             f"(use {' or '.join(s + '://' for s in SCHEMES)})")
    return f"{scheme}://{match.group('host')}:{int(match.group('port'))}"


def timeout_from_env() -> float:
    """TRACEATTR_SCHEDULER_TIMEOUT_S (seconds, default 10), checked."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:
        raise SchedulerError(f"{TIMEOUT_ENV}={text[:40]!r}: expected seconds, more than 0 and at most "
                             f"{MAX_TIMEOUT_S:g}")
    return value


def executor_pool(executor=None, scheduler: str | None = None):
    """A context manager that yields `executor` as it is (None: traceattr's own process pool), or with a
    scheduler address, an executor on that Dask cluster's workers (dask_executor)."""
    return dask_executor(scheduler) if scheduler else nullcontext(executor)


_quiet_lock = threading.Lock()
_quieted: dict[int, tuple[object, deque, int]] = {}     # id(comm) -> (comm, its own log, maps running on it)
_CLIENT_LOGGER = "distributed.client"
_silenced = [0]                                          # maps and CLI clients running with the logger silenced


def _drop(record: logging.LogRecord) -> bool:
    return False


@contextmanager
def silent_client_log() -> Iterator[None]:
    """distributed.client logs nothing meanwhile: a lost scheduler made it print ~30 lines of tracebacks
    before traceattr's own one-line error said the same (nested uses count; the last one restores it)."""
    with _quiet_lock:
        _silenced[0] += 1
        if _silenced[0] == 1:
            logging.getLogger(_CLIENT_LOGGER).addFilter(_drop)
    try:
        yield
    finally:
        with _quiet_lock:
            _silenced[0] -= 1
            if _silenced[0] == 0:
                logging.getLogger(_CLIENT_LOGGER).removeFilter(_drop)


@contextmanager
def quiet_client(executor):
    """Yield `executor`; a Dask Client (or its executor) keeps no debug log of the messages it sends
    meanwhile (Dask keeps its last 1000, each with a whole task: ~3 MB on the driver at 1024 files), and
    its logger stays silent (silent_client_log). The user's own log is put back when the last map running on
    that client ends."""
    comm = getattr(getattr(executor, "_client", executor), "scheduler_comm", None)
    if not isinstance(getattr(comm, "recent_message_log", None), deque):
        yield executor
        return
    with _quiet_lock:
        _, log, running = _quieted.get(id(comm), (comm, comm.recent_message_log, 0))
        _quieted[id(comm)] = (comm, log, running + 1)
        comm.recent_message_log = deque(maxlen=0)
    try:
        with silent_client_log():
            yield executor
    finally:
        with _quiet_lock:
            _, log, running = _quieted[id(comm)]
            if running == 1:
                del _quieted[id(comm)]
                comm.recent_message_log = log
            else:
                _quieted[id(comm)] = (comm, log, running - 1)


@contextmanager
def dask_executor(address: str, timeout_s: float | None = None) -> Iterator:
    """Connect to the scheduler at `address` and yield `client.get_executor(pure=False)` (pure=False: two
    loads of one path must both run, not share a cached result). The client is closed on exit."""
    address = check_address(address)
    timeout_s = timeout_from_env() if timeout_s is None else timeout_s
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerError("--scheduler needs dask distributed: pip install 'traceattr[dask]'") from None
    _check_tls(address)
    client = _connect(Client, address, timeout_s)
    with silent_client_log():   # also while closing: a lost scheduler logs "Failed to reconnect" then
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()


def _check_tls(address: str) -> None:
    """A tls:// address needs Dask's TLS configuration (a CA file and a client certificate). Without it
    Dask raised `TypeError: TLS expects a ssl_context` from deep inside its connect."""
    if not address.startswith("tls://"):
        return
    from distributed.security import Security   # lazy: dask is optional, and only a tls:// address needs this

    try:
        context = Security().get_connection_args("client")["ssl_context"]
    except Exception as exc:  # noqa: BLE001 - a CA or certificate file that is missing or unreadable, ...
        raise SchedulerError(f"cannot connect to the Dask scheduler at {address}: Dask's TLS configuration "
                             f"cannot be used ({_detail(exc)})") from None
    if context is None:
        raise SchedulerError(f"cannot connect to the Dask scheduler at {address}: tls:// needs Dask's TLS "
                             "configuration, and it is not set (distributed.comm.tls.ca-file and "
                             ".client.cert, with .client.key, in Dask's config)")


DISCARD_TIMEOUT_S = 2.0


def _connect(client_type, address: str, timeout_s: float):
    """Client(address) within `timeout_s` overall, or a SchedulerError naming the address and the problem.

    Dask's own timeout covers the TCP connection but not a peer that accepts and stays silent, so the
    connection runs on a daemon thread, given up when the deadline passes. Whatever the peer sends, the
    error is one line: garbage or a huge frame length makes Dask raise MemoryError, ValueError or the like,
    not OSError. The Client that Dask was making is closed here when it fails or is given up (that also ends
    the thread): left to its `__del__`, it waited 2x the timeout and printed a traceback at exit."""
    made: list = []
    outcome: dict = {}

    class Made(client_type):
        def start(self, **kwargs):
            made.append(self)       # the half-made client, for _discard
            return super().start(**kwargs)

    Made.__name__, Made.__qualname__ = client_type.__name__, client_type.__qualname__   # its repr unchanged

    def connect() -> None:
        try:
            outcome["client"] = Made(address, timeout=f"{timeout_s}s", set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome["error"] = exc

    thread = threading.Thread(target=connect, name="traceattr-dask-connect", daemon=True)
    thread.start()
    try:
        thread.join(timeout_s + 1.0)
    except BaseException:       # Ctrl-C while connecting
        _discard(made)
        raise
    silent, error = thread.is_alive(), outcome.get("error")
    if not silent and error is None:
        made.clear()            # no cycle (client, its class, this list) keeps a working client alive
        return outcome["client"]
    _discard(made)
    if silent:
        problem = f"cannot reach the Dask scheduler at {address} within {timeout_s:g} s (no answer)"
    elif isinstance(error, OSError):     # refused, reset, unresolvable, Dask's own TimeoutError
        problem = f"cannot reach the Dask scheduler at {address} within {timeout_s:g} s ({_detail(error)})"
    elif isinstance(error, ImportError):     # Dask's word for a scheduler that refused this client
        problem = f"the Dask scheduler at {address} refused this client ({_detail(error)})"
    elif isinstance(error, Exception):
        problem = (f"the endpoint at {address} did not answer as a Dask scheduler does ({_detail(error)}); is "
                   "it one, of a compatible Dask version?")
    else:
        raise error
    raise SchedulerError(problem) from None


def _discard(made: list) -> None:
    """Close the Client that failed to connect or was given up (its loop still runs, so that is quick); if
    even that fails, mark it closed so that its `__del__` does not wait either."""
    with silent_client_log():
        for client in made:
            try:
                client.close(timeout=DISCARD_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the connection error is what the user is told
                pass
            if client.status != "closed":
                client.status = "closed"


def _detail(error: BaseException) -> str:
    """`Type: message` on one line, clipped; numpy's private _ArrayMemoryError shown as the MemoryError it is,
    a lower-case name with its module (`struct.error`, not `error`)."""
    kind = next(cls for cls in type(error).__mro__ if not cls.__name__.startswith("_"))
    name = kind.__name__ if kind.__name__[:1].isupper() else f"{kind.__module__.rpartition('.')[2]}.{kind.__name__}"
    return f"{name}: {' '.join(str(error).split())[:200]}".rstrip(": ")


class ClusterWatch:
    """Tells a Dask run that can no longer finish from one that is slow: a lost scheduler connection at
    once, a cluster whose workers are all gone (or a scheduler that does not answer) for `grace_s` seconds
    in a row. Dask itself waits for workers forever, so killed workers, or workers that died unpickling a
    task from a newer traceattr, left the command waiting silently. A cluster that has had no worker yet is
    waited for, as Dask does: adaptive and SLURM clusters start theirs when tasks arrive; after grace_s a
    line on stderr says so (the wait was silent, and endless on a cluster whose workers never came)."""

    def __init__(self, client, grace_s: float) -> None:
        self.client, self.grace_s = client, grace_s
        self.address = getattr(getattr(client, "scheduler", None), "address", None) or "?"
        self.bad_since: float | None = None
        self.started = time.monotonic()
        self.told_waiting = False
        self.had_workers = bool(self._workers())    # before the first task: workers may die on receiving it

    def lost(self) -> str | None:
        """Why the connection to the scheduler is gone, or None while it is up."""
        if getattr(self.client, "status", "running") in ("running", "newly-created"):
            return None
        return (f"the connection to the Dask scheduler at {self.address} was lost (the scheduler stopped, or "
                "the network failed)")

    def problem(self) -> str | None:
        """lost(), or why the run cannot go on once it has had no workers for grace_s; else None."""
        lost = self.lost()
        if lost:
            return lost
        workers = self._workers()
        if workers or (workers == 0 and not self.had_workers):
            self.had_workers = self.had_workers or bool(workers)
            self.bad_since = None
            if not self.had_workers:
                self._tell_waiting()
            return None
        now = time.monotonic()
        self.bad_since = self.bad_since or now
        if now - self.bad_since < self.grace_s:
            return None
        if workers is None:
            return f"the Dask scheduler at {self.address} stopped answering for {self.grace_s:g} s"
        return f"the Dask cluster at {self.address} has no workers left (they died or were stopped)"

    def _tell_waiting(self) -> None:
        waited = time.monotonic() - self.started
        if self.told_waiting or waited < self.grace_s:
            return
        self.told_waiting = True
        import sys      # a notice, not progress: shown with --quiet too (the wait may never end)

        sys.stderr.write(f"traceattr: waiting for workers: the Dask cluster at {self.address} has had none for "
                         f"{waited:.0f} s (an adaptive or SLURM cluster starts them when tasks arrive; Ctrl-C "
                         "stops)\n")
        sys.stderr.flush()

    def _workers(self) -> int | None:
        """How many workers the scheduler has; None when it does not answer within grace_s."""
        try:
            return len(self.client.nthreads(callback_timeout=self.grace_s))
        except Exception:  # noqa: BLE001 - any failure to answer is "no answer"
            return None


def cluster_watch(executor) -> ClusterWatch | None:
    """A ClusterWatch for a Dask Client or its executor (grace: TRACEATTR_SCHEDULER_TIMEOUT_S, default
    10 s); None for any other executor, which keeps waiting as concurrent.futures does."""
    client = getattr(executor, "_client", executor)
    if not (callable(getattr(client, "nthreads", None)) and hasattr(client, "scheduler_comm")):
        return None
    return ClusterWatch(client, timeout_from_env())
