"""A real Dask LocalCluster decodes the files: identical tables to the process pool; an unreachable
scheduler is a clear error, not a hang."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import traceattr
from traceattr.attribution.sweep import sweep
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.errors import TraceFormatError
from tracesets import SMALL, assert_same

distributed = pytest.importorskip("distributed")


def test_local_cluster_matches_the_process_pool(tmp_path, monkeypatch):
    write_trace_set(tmp_path, TraceSpec(ranks=3, **SMALL))
    (tmp_path / "rank9.pt.trace.json").write_text("{ broken")
    monkeypatch.chdir(tmp_path)     # relative paths: the workers must still find the files
    pooled = traceattr.load(".", jobs=2, cache=False, skip_bad=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        executor = client.get_executor(pure=False)
        on_dask = traceattr.load(".", executor=executor, cache=False, skip_bad=True)
        with pytest.raises(TraceFormatError) as caught:
            traceattr.load(".", executor=executor, cache=False)
        # the Client itself, as summarize takes it (load ran every task through Client.submit's pure cache)
        on_client = traceattr.load(".", executor=client, cache=False, skip_bad=True)
    assert_same(on_dask, pooled)
    assert_same(on_client, pooled)
    assert any("rank9" in note for note in on_dask.notes)
    assert caught.value.path == "rank9.pt.trace.json"
    sweep(on_dask).self_check()


def test_unreachable_scheduler_fails_fast_with_a_clear_message(tmp_path):
    write_trace_set(tmp_path, TraceSpec(ranks=1, **SMALL))
    with socket.socket() as probe:        # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "traceattr.cli", "summarize", str(tmp_path), "--no-cache",
                           "--scheduler", f"tcp://127.0.0.1:{port}"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TRACEATTR_SCHEDULER_TIMEOUT_S": "2"})
    assert time.monotonic() - started < 20
    assert done.returncode == 2
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
