"""Decoding while another thread holds this thread's frames, as Dask's worker profiler does (it samples
sys._current_frames() every 10 ms): a frame kept the decoded chunk's memoryview slice exported, and the
splitter's next `del buf[...]` raised BufferError (most 1024-rank runs on a LocalCluster failed under load)."""

from __future__ import annotations

import sys
import threading

from traceattr.builder import TraceSpec, write_trace
from traceattr.io.decode import decode_file


def test_decoding_survives_a_thread_that_holds_its_frames(tmp_path):
    path = tmp_path / "rank0.pt.trace.json"
    write_trace(path, TraceSpec(ranks=1, layers=1, steps=1), 0)
    whole = decode_file(str(path))
    stop = threading.Event()

    def sample() -> None:
        held = []
        while not stop.is_set():
            held[:] = sys._current_frames().values()        # every thread's frames, held for a while
            stop.wait(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in range(5):        # small blocks: many chunks, each cut from the buffer after it is decoded
            streamed = decode_file(str(path), block_bytes=4096)
            assert streamed.device.equals(whole.device) and streamed.host.equals(whole.host)
    finally:
        stop.set()
        sampler.join()
