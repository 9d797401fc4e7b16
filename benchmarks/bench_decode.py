"""Cold decode of one file, C scanner against msgspec alone, alternating runs in fresh processes.

    python3 benchmarks/bench_decode.py                   # the 200 MB trace of bench_load.py, 3 runs each
    python3 benchmarks/bench_decode.py --size-mb 1000 --gzip --runs 2

Each run is one `decode_file` (the whole io decode path: inflate, split, decode, columns, arrow tables) in a
new process. Wall time, and CPU time (user + system of the process: what one core spends, much less
sensitive to a loaded machine than wall time); the scanner's own CPU time (`Scanner.scan`, summed over
chunks) beside it. Prints markdown table rows, with the load average before and after (the machine may be
shared).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

ONE_RUN = """
import json, resource, sys, time
import traceattr.io.decode as decode_module
from traceattr.io import fastscan
spent = [0.0]
original_make_decoder = decode_module.make_decoder
def make_decoder(exact_decimal):
    decoder = original_make_decoder(exact_decimal)
    scanner = getattr(decoder, "_scanner", None)
    if scanner is not None:
        class Timed:
            def scan(self, data):
                begin = time.process_time()
                try:
                    return scanner.scan(data)
                finally:
                    spent[0] += time.process_time() - begin
        decoder._scanner = Timed()
    return decoder
decode_module.make_decoder = make_decoder
begin, cpu = time.perf_counter(), time.process_time()
decoded = decode_module.decode_file(sys.argv[1])
print(json.dumps({"s": time.perf_counter() - begin, "cpu_s": time.process_time() - cpu, "scan_s": spent[0], "rows": decoded.device.num_rows +
                  decoded.host.num_rows + decoded.markers.num_rows,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from bench_load import build

    plain, packed, _ = build(args.size_mb)
    path = packed if args.gzip else plain
    json_mb = plain.stat().st_size / 1e6
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs; a shared machine)")
    print("| file | decoder | run | wall s | CPU s | of it Scanner.scan CPU s | JSON MB per CPU s | peak RSS MB | rows |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        for pure in ("0", "1"):
            done = subprocess.run([sys.executable, "-c", ONE_RUN, str(path)], capture_output=True, text=True,
                                  env={**os.environ, "TRACEATTR_PURE_PYTHON": pure}, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            name = "msgspec" if pure == "1" else "C scanner"
            scan = f"{result['scan_s']:.2f}" if pure == "0" else "-"
            print(f"| {path.name} | {name} | {run} | {result['s']:.2f} | {result['cpu_s']:.2f} | {scan} | "
                  f"{json_mb / result['cpu_s']:.0f} | "
                  f"{result['rss_mb']:.0f} | {result['rows']:,} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
