"""Faults of a real Dask cluster: --max-inflate holds on the workers as it does locally, a cluster that lost
every worker or its scheduler fails with one line instead of waiting forever, and a convert's stage task that
runs after the convert gave up writes nothing."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

import traceattr
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.errors import TraceFormatError
from traceattr.io.gzipstream import MAX_INFLATE_ENV
from traceattr.io.parallel import FileFailure, WorkerCrashError, decode_files
from traceattr.engine.convert import convert_files
from traceattr.engine.units import WholeFileTask, file_task
from traceattr.io.store_writer import stage_file
from tracesets import SMALL

distributed = pytest.importorskip("distributed")

BOMB = "inflates to more than 1,024 bytes"


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, started before any test sets TRACEATTR_MAX_INFLATE: they never see it."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as local, distributed.Client(local) as client:
        yield client


def _gzipped(folder: Path, ranks: int = 2) -> Path:
    write_trace_set(folder, TraceSpec(ranks=ranks, **SMALL))
    for path in list(folder.glob("*.json")):
        Path(f"{path}.gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    return folder


def test_max_inflate_is_applied_on_the_workers_as_locally(cluster, tmp_path, monkeypatch):
    """--max-inflate lives in the driver's environment; the workers' environment is their own, so a
    --scheduler run accepted what a local run refused. Every path that decodes on the workers now refuses it."""
    run = _gzipped(tmp_path / "run")
    monkeypatch.setenv(MAX_INFLATE_ENV, "1KB")        # what `--max-inflate 1KB` does, in the driver only
    assert set(cluster.run(lambda: os.environ.get(MAX_INFLATE_ENV)).values()) == {None}
    with pytest.raises(TraceFormatError, match=BOMB):
        traceattr.load(run, jobs=2, cache=False)                            # the local pool refuses it
    with pytest.raises(TraceFormatError, match=BOMB):
        traceattr.load(run, executor=cluster, cache=False)
    with pytest.raises(TraceFormatError, match=BOMB):
        traceattr.summarize(run, by="kernel", executor=cluster, cache=False)    # map-reduce's map_file
    with pytest.raises(TraceFormatError, match=BOMB):
        traceattr.summarize(run, by="rank", executor=cluster, cache=False)
    with pytest.raises(TraceFormatError, match=BOMB):
        convert_files(str(run), str(tmp_path / "store"), executor=cluster.get_executor(pure=False))
    assert not (tmp_path / "store").exists()
    monkeypatch.delenv(MAX_INFLATE_ENV)
    assert traceattr.summarize(run, by="kernel", executor=cluster, cache=False).shape[0] > 0


def test_a_stage_task_after_the_convert_gave_up_writes_nothing(cluster, tmp_path):
    """A failed convert removes its temporary folder while Dask tasks still run (cancel does not stop a
    running task); a stage task that ran after that recreated STORE/../.store.tmp-PID-NS/_staging/... for good."""
    write_trace_set(tmp_path / "run", TraceSpec(ranks=1, **SMALL))
    trace = str(next((tmp_path / "run").glob("*.json")))
    gone = tmp_path / ".store.tmp-host-1-2"                 # removed by the convert that gave up
    task = WholeFileTask(functools.partial(stage_file, staging=str(gone / "_staging")))   # convert's map
    result = cluster.submit(file_task, trace, trace, task=task, pure=False).result()
    assert isinstance(result, FileFailure) and "staging folder" in result.problem
    assert not gone.exists()


def _finishes(call, within_s: float):
    """call()'s exception (or None), failing the test if it has not returned within `within_s` seconds
    (the bug was a wait without end: the thread is then abandoned)."""
    outcome: dict = {}

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within_s)
    assert not thread.is_alive(), f"still waiting after {within_s} s"
    return outcome.get("error")


def test_workers_that_all_died_fail_the_run_instead_of_a_silent_wait(tmp_path, monkeypatch):
    """Workers that cannot unpickle a task (an older traceattr on them) die; Dask then waits for workers
    forever, and so did traceattr. After the grace period (TRACEATTR_SCHEDULER_TIMEOUT_S) it fails."""
    monkeypatch.setenv("TRACEATTR_SCHEDULER_TIMEOUT_S", "2")
    paths = [str(tmp_path / f"rank{i}.json") for i in range(2)]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as local, distributed.Client(local) as client:
        # a task module the already started workers cannot import: unpickling the task kills them
        (tmp_path / "ta_not_on_workers.py").write_text("def task(path, shown):\n    return path\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        import ta_not_on_workers

        error = _finishes(lambda: list(decode_files(paths, executor=client.get_executor(pure=False),
                                                    task=ta_not_on_workers.task)), 60)
        address = local.scheduler_address
    assert isinstance(error, WorkerCrashError), error
    assert str(error) == f"the Dask cluster at {address} has no workers left (they died or were stopped)"
    assert error.exit_code == 1


SLOW_TASK = "import time\n\ndef slow(path, shown):\n    time.sleep(60)\n    return path\n"


@pytest.fixture
def subprocess_cluster(tmp_path, monkeypatch):
    """A scheduler and one worker (no nanny) as real processes that the test may kill; a task module
    (`ta_slow.slow`) on both sides. Yields (address, scheduler, worker)."""
    (tmp_path / "ta_slow.py").write_text(SLOW_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    file = tmp_path / "scheduler.json"
    common = dict(cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--dashboard-address", ":0", "--scheduler-file", str(file)], **common)
    processes = [scheduler]
    try:
        deadline = time.monotonic() + 60
        while not (file.exists() and file.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(file.read_text())["address"]
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                   "--no-nanny", "--local-directory", str(tmp_path / "w")], **common)
        processes.append(worker)
        yield address, scheduler, worker
    finally:
        for process in processes:       # only the processes this fixture started, by their handles
            process.kill()
            process.wait(timeout=30)


def _slow_run(address: str, paths: list[str]):
    import ta_slow

    client = distributed.Client(address, timeout="3s", set_as_default=False)
    client.wait_for_workers(1, timeout=60)
    return client, lambda: list(decode_files(paths, executor=client.get_executor(pure=False), task=ta_slow.slow))


def test_killed_workers_fail_the_run_instead_of_a_silent_wait(subprocess_cluster, tmp_path, monkeypatch):
    """Every worker SIGKILLed mid-run (no nanny to restart it): the run ends with one line, exit code 1."""
    address, _, worker = subprocess_cluster
    monkeypatch.setenv("TRACEATTR_SCHEDULER_TIMEOUT_S", "2")
    client, run = _slow_run(address, [str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    try:
        threading.Timer(1.0, worker.kill).start()
        error = _finishes(run, 60)
    finally:
        client.close()
    assert isinstance(error, WorkerCrashError), error
    assert str(error) == f"the Dask cluster at {address} has no workers left (they died or were stopped)"


DRIVER = """
import os, signal, sys, threading
from traceattr.errors import TraceError
from traceattr.io.cluster import dask_executor
from traceattr.io.parallel import decode_files
import ta_slow

address, scheduler, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
try:
    with dask_executor(address) as executor:
        executor._client.wait_for_workers(1, timeout=60)
        threading.Timer(1.0, os.kill, (scheduler, signal.SIGKILL)).start()
        list(decode_files(paths, executor=executor, task=ta_slow.slow))
except TraceError as exc:
    print(f"traceattr: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def test_a_lost_scheduler_is_one_line_naming_it_not_a_file(subprocess_cluster, tmp_path):
    """The scheduler SIGKILLed mid-run: Dask cancels every task and its client logged ~30 lines of
    tracebacks; then the run blamed a file with an empty reason (`decoding FILE failed on the executor:
    CancelledError:`). A driver process as the command's (io.cluster.dask_executor, closing included)."""
    address, scheduler, _ = subprocess_cluster
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
           "TRACEATTR_SCHEDULER_TIMEOUT_S": "3"}
    done = subprocess.run([sys.executable, "-c", DRIVER, address, str(scheduler.pid), str(tmp_path / "a.json"),
                           str(tmp_path / "b.json")], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"traceattr: error: the connection to the Dask scheduler at {address} was lost (the "
                           "scheduler stopped, or the network failed)\n")


def test_a_cluster_without_workers_says_it_waits_for_them(tmp_path):
    """Found by a review: --scheduler at a cluster whose workers never came waited forever, silently with
    -q. It still waits (adaptive and SLURM clusters start workers when tasks arrive), and says so on stderr
    after the grace period; then a worker that joins finishes the run."""
    import signal

    write_trace_set(tmp_path / "run", TraceSpec(ranks=2, **SMALL))
    with distributed.LocalCluster(n_workers=0, dashboard_address=":0", processes=True, silence_logs=50,
                                  host="127.0.0.1") as local:
        command = subprocess.Popen(
            [sys.executable, "-m", "traceattr.cli", "summarize", str(tmp_path / "run"), "--scheduler",
             local.scheduler_address, "--no-cache", "-q", "--format", "csv"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env={**os.environ, "TRACEATTR_SCHEDULER_TIMEOUT_S": "2"})
        try:
            import select

            ready, _, _ = select.select([command.stderr], [], [], 60)     # never a test that hangs
            line = command.stderr.readline() if ready else "(nothing in 60 s)"
            waited = re.fullmatch(rf"traceattr: waiting for workers: the Dask cluster at "
                                  rf"{re.escape(local.scheduler_address)} has had none for (\d+) s \(an adaptive "
                                  r"or SLURM cluster starts them when tasks arrive; Ctrl-C stops\)\n", line)
            assert waited and 2 <= int(waited.group(1)) < 60, line
            local.scale(1)          # a worker joins: the run goes on and finishes
            out, err = command.communicate(timeout=120)
        finally:
            if command.poll() is None:
                command.send_signal(signal.SIGINT)
                command.wait(30)
    assert command.returncode == 0, err
    assert out.startswith("name,") and "Traceback" not in err


# Hostile or wrong endpoints at --scheduler (found by an outside probe): each is one line naming the address and
# the problem, exit code 2, no traceback, and no 20 s wait at exit (a half-made Client's __del__ waited 2x the
# connect timeout, then printed "Exception ignored ... TimeoutError"). Every server here is a thread of this
# test on 127.0.0.1 that stops by itself.

TAIL_S = 15     # the __del__ tail alone was 20 s (2x the default 10 s timeout); start-up included


@contextmanager
def fake_scheduler(answer: bytes | None, lifetime_s: float = 40.0):
    """A listener on 127.0.0.1 that accepts every connection and sends `answer` on it (None: nothing, ever),
    keeping it open; it stops when the test leaves, or by itself after lifetime_s. Yields its tcp:// address."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    stop, deadline = threading.Event(), time.monotonic() + lifetime_s

    def serve() -> None:
        accepted = []
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    connection, _ = listener.accept()
                except socket.timeout:
                    continue
                accepted.append(connection)
                if answer:
                    with suppress(OSError):
                        connection.sendall(answer)
        finally:
            for connection in accepted:
                connection.close()
            listener.close()

    thread = threading.Thread(target=serve, name="fake-scheduler", daemon=True)
    thread.start()
    try:
        yield address
    finally:
        stop.set()
        thread.join(5)


def _summarize_at(tmp_path: Path, address: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """`traceattr summarize RUN --scheduler ADDRESS` as a user runs it, and its wall time. Dask's config is
    an empty folder (no TLS settings from the machine), and the connect timeout the default unless given."""
    run = tmp_path / "run"
    if not run.exists():
        write_trace_set(run, TraceSpec(ranks=1, **SMALL))
    (tmp_path / "dask-config").mkdir(exist_ok=True)
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith("DASK_") and key != "TRACEATTR_SCHEDULER_TIMEOUT_S"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "traceattr", "summarize", str(run), "--scheduler", address,
                           "--no-cache", "-q", "--format", "csv"], capture_output=True, text=True, timeout=60,
                          env={**clean, "DASK_CONFIG": str(tmp_path / "dask-config"), **env})
    return done, time.monotonic() - started


def _one_line(done: subprocess.CompletedProcess, elapsed: float, pattern: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(f"traceattr: error: {pattern}\n", done.stderr), done.stderr
    assert done.stdout == ""
    assert elapsed < TAIL_S, (elapsed, done.stderr)


NOT_DASK = r"the endpoint at {} did not answer as a Dask scheduler does \(([\w.]+): .+\); is it one, of a " \
           r"compatible Dask version\?"


@pytest.mark.parametrize("length", [2**63 - 1, 2**63], ids=["8EiB", "2^63"])
def test_a_huge_frame_length_is_one_line_at_once(tmp_path, length):
    """8 bytes announcing a frame of ~2^63 bytes: Dask's allocation for it raised MemoryError (`Unable to
    allocate 8.00 EiB`, a whole traceback) or ValueError, then the 20 s tail."""
    with fake_scheduler(struct.pack("<Q", length)) as address:
        done, elapsed = _summarize_at(tmp_path, address)
    _one_line(done, elapsed, NOT_DASK.format(re.escape(address)))
    assert re.search(r"\((MemoryError|ValueError): ", done.stderr), done.stderr


@pytest.mark.parametrize("answer", [b"SSH-2.0-OpenSSH_9.6\r\n" + bytes(range(256)) * 4,
                                    struct.pack("<Q", 24) + b"\xc1" * 24], ids=["banner", "junk-frame"])
def test_garbage_answers_are_one_line_at_once(tmp_path, answer):
    """Another protocol's banner (its first 8 bytes read as a frame length) or a frame of bytes msgpack
    cannot read: the one-line error was followed by the 20 s tail, or was a traceback itself."""
    with fake_scheduler(answer) as address:
        done, elapsed = _summarize_at(tmp_path, address)
    _one_line(done, elapsed, NOT_DASK.format(re.escape(address)))


def test_a_listener_that_never_answers_fails_within_the_timeout(tmp_path):
    """It accepts the connection and stays silent: one line after TRACEATTR_SCHEDULER_TIMEOUT_S (the
    documented deadline covers the first answer too)."""
    with fake_scheduler(None) as address:
        done, elapsed = _summarize_at(tmp_path, address, TRACEATTR_SCHEDULER_TIMEOUT_S="3")
    _one_line(done, elapsed, rf"cannot reach the Dask scheduler at {re.escape(address)} within 3 s \(no answer\)")
    assert elapsed >= 3


def test_tls_without_dask_tls_configuration_is_one_line(tmp_path):
    """tls:// with no TLS settings in Dask's config: `TypeError: TLS expects a ssl_context ...` as a
    traceback, the 20 s tail, exit 1. Now said before anything connects (the port is a silent fake anyway)."""
    with fake_scheduler(None) as plain:
        address = plain.replace("tcp://", "tls://")
        done, elapsed = _summarize_at(tmp_path, address)
    _one_line(done, elapsed, rf"cannot connect to the Dask scheduler at {re.escape(address)}: tls:// needs Dask's "
                             r"TLS configuration, and it is not set \(distributed\.comm\.tls\.ca-file and "
                             r"\.client\.cert, with \.client\.key, in Dask's config\)")
    assert elapsed < 8      # no connection attempted, so no wait for the timeout


def test_an_address_that_refuses_connections_is_one_line(tmp_path):
    """Nothing listens: Dask retries until the timeout (a scheduler may be starting), then one line."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    done, elapsed = _summarize_at(tmp_path, address, TRACEATTR_SCHEDULER_TIMEOUT_S="3")
    _one_line(done, elapsed, rf"cannot reach the Dask scheduler at {re.escape(address)} within 3 s \(OSError: .+\)")


def test_a_client_given_up_on_is_closed_and_its_thread_ends():
    """In a long-lived process (the Python API), the connection given up at the deadline no longer runs on:
    its half-made Client is closed, which ends the connecting thread."""
    from traceattr.io.cluster import SchedulerError, dask_executor

    with fake_scheduler(None) as address:
        with pytest.raises(SchedulerError, match="no answer"):
            with dask_executor(address, timeout_s=1):
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(t.name == "traceattr-dask-connect" for t in threading.enumerate()):
            time.sleep(0.1)
    assert not any(t.name == "traceattr-dask-connect" for t in threading.enumerate())
