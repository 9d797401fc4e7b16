"""What the store's entry checks (io/store.py: _check_files, _check_layout, _check_partition) cost beside the
parquet reading itself, on a store `traceattr convert` wrote.

    traceattr convert /work/benchdata/flat_64 -o /tmp/store64 --no-cache -q -j 2
    python3 benchmarks/bench_store_checks.py /tmp/store64

Reads the store once to warm the page cache, then once under cProfile: prints the whole read_store time and
the checks' cumulative time.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from traceattr.io.store import read_store

CHECKS = ("_check_files", "_check_layout", "_check_partition")


def main(path: str) -> None:
    read_store(path)
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    traces = read_store(path)
    profile.disable()
    total = time.perf_counter() - started
    stats = pstats.Stats(profile).stats
    checks = sum(row[3] for (_, _, name), row in stats.items() if name in CHECKS)
    rows = traces.device.num_rows + traces.host.num_rows + traces.markers.num_rows
    print(f"{path}: {traces.files.num_rows} files, {rows:,} rows; read_store {total:.3f} s under cProfile, "
          f"of which the checks {checks:.3f} s ({100 * checks / total:.0f}%)")


if __name__ == "__main__":
    main(sys.argv[1])
