"""The peak RSS (VmHWM) of one traceattr command's own process: the driver, not its pool or Dask workers
(`/usr/bin/time %M` reports the largest of the process and its children instead).

    python3 benchmarks/driver_peak.py compare RUN_A RUN_B --jobs 2 --no-cache --format csv > /dev/null
    python3 benchmarks/driver_peak.py report RUN -o /tmp/r.html --jobs 2

prints `driver peak: N MB` on stderr when the command exits (Linux: reads /proc/self/status).
"""

from __future__ import annotations

import atexit
import sys


def _report() -> None:
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    print(f"driver peak: {peak_kb / 1024:.0f} MB", file=sys.stderr)


if __name__ == "__main__":
    atexit.register(_report)
    from traceattr.cli import main

    main(sys.argv[1:])
