"""Time `traceattr.check` (the integrity verdict every summary header carries) on a large in-memory trace set
(a TraceSet is a source of the one engine: its files are mapped from its tables, as `traceattr check` maps
trace files).

Builds a TraceSet of N device activities (8 ranks, 4 streams each, 200 kernel names, random durations and a
few planted outliers) and a host window per rank straight from numpy: no JSON, so only check() is timed.
    python benchmarks/bench_check.py --activities 2000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.model.traceset import TraceSet


def build(n: int, ranks: int = 8, seed: int = 0) -> TraceSet:
    rng = np.random.default_rng(seed)
    rank = rng.integers(0, ranks, n).astype(np.int32)
    stream = rng.integers(0, 4, n)
    name_code = rng.integers(0, 200, n)
    start = np.int64(1_795_993_600_000_000_000) + rng.integers(0, 10**10, n)
    duration = (rng.lognormal(10, 1, n)).astype(np.int64)
    duration[rng.choice(n, 5, replace=False)] = 5 * 10**9          # planted corrupt durations
    names = pa.array([f"kernel_{i}" for i in range(200)])
    columns = {
        S.RANK: rank, S.WINDOW: np.zeros(n, np.int32), S.DEVICE: rank.astype(np.int64), S.STREAM: stream,
        S.NAME: names.take(pa.array(name_code)), S.CATEGORY: pa.array(np.full(n, S.COMPUTE)),
        S.START_NS: start, S.END_NS: start + duration, S.CORRELATION: np.full(n, -1), S.EXTERNAL_ID: np.full(n, -1),
        S.BYTES: np.full(n, -1), S.COLLECTIVE: pa.array(np.full(n, ""))}
    for field in S.DEVICE_SCHEMA:       # the communication columns: absent on compute kernels
        if field.name not in columns:
            columns[field.name] = pa.array(np.full(n, "" if pa.types.is_string(field.type) else S.NO_INT))
    device = pa.table({f.name: columns[f.name] for f in S.DEVICE_SCHEMA}).cast(S.DEVICE_SCHEMA)
    lo, hi = int(start.min()), int((start + duration).max())
    host = pa.Table.from_pylist([{S.RANK: r, S.WINDOW: 0, S.PID: 100 + r, S.TID: 100 + r, S.NAME: "ProfilerStep#1",
                                  S.CATEGORY: S.USER_ANNOTATION, S.START_NS: lo, S.END_NS: lo + 10**10,
                                  S.CORRELATION: -1, S.EXTERNAL_ID: -1, S.SEQUENCE_NUMBER: -1,
                                  S.FWD_THREAD_ID: -1, S.PYTHON_ID: -1, S.PYTHON_PARENT_ID: -1,
                                  S.PYTHON_MODULE_ID: -1} for r in range(ranks)], schema=S.HOST_SCHEMA)
    files = pa.Table.from_pylist([{S.RANK: r, S.WINDOW: 0, S.PATH: f"rank{r}.json", S.WORLD_SIZE: ranks,
                                   S.RANK_SOURCE: S.RANK_FROM_JSON, S.ERA: S.ERA_C, S.BASE_TIME_NS: 0,
                                   S.START_NS: lo, S.END_NS: hi, S.EVENTS: 0, S.NEGATIVE_DURATIONS: 0,
                                   S.ABSURD_DURATIONS: 0, S.DEVICE_PROPERTIES: "[]", S.METADATA: "{}"}
                                  for r in range(ranks)], schema=S.FILE_SCHEMA)
    return TraceSet(device, host, S.MARKER_SCHEMA.empty_table(), files)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--activities", type=int, default=2_000_000)
    args = parser.parse_args()
    traceset = build(args.activities)
    started = time.perf_counter()
    sweep(traceset)
    swept = time.perf_counter() - started
    started = time.perf_counter()
    report = traceattr.check(traceset).runs[0].report
    checked = time.perf_counter() - started
    print(f"{args.activities:,} activities: sweep {swept:.2f} s, check {checked:.2f} s; {report.verdict}")


if __name__ == "__main__":
    main()
