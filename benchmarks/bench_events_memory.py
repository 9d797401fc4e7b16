"""Peak memory per event of a cold `summarize` on a file of many tiny kernel events (issue 36, point 3).

    python3 benchmarks/bench_events_memory.py                       # 1 M and 10 M events, C scanner
    python3 benchmarks/bench_events_memory.py --events 1000000 --pure-python
    python3 benchmarks/bench_events_memory.py --phases              # also the peak of each phase, in-process

The file: `{"traceEvents": [...], "baseTimeNanoseconds": ...}` of N one-µs kernels on one stream, gzip
(~300:1, inside the default --max-inflate ratio), written once into --data (default /tmp/traceattr-bench-events).
Each run is `traceattr summarize FILE --no-cache -j 1 -q --format csv` in a fresh process; peak RSS is its
VmHWM. `--phases` runs the same steps in one process and resets the peak between them (writing 5 to
/proc/self/clear_refs), so each phase's peak is its own: inflate (the text read and dropped), scan (the
events streamed into per-chunk columns), tables (the columns stacked into arrow tables), decode (decode_file: all of the above), map (the
summarize map step on the decoded file, which is held). Prints markdown rows and the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EVENT = '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%d,"dur":1}'

RUNNER = ("import re, sys\nfrom traceattr.cli import main\n"
          "try:\n    main(sys.argv[1:], prog_name='traceattr')\nexcept SystemExit as exc:\n    code = exc.code\n"
          "peak = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
          "print('RSS', peak, 'EXIT', code, file=sys.stderr)")

PHASES = r"""
import json, re, sys, time
def peak():
    return int(re.search(r'VmHWM:\s+(\d+)', open('/proc/self/status').read()).group(1)) << 10
def reset():
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')
from traceattr.allocator import return_freed_memory
return_freed_memory()
from traceattr.analysis.summary_plan import Plan, aggregate_file
from traceattr.io import decode as D
from traceattr.io.columns import ColumnCollector
from traceattr.io.gzipstream import open_inflated, read_block
from traceattr.io.splitter import stream_events
path = sys.argv[1]
out = {"floor": peak()}
def phase(name, began):
    out[name], out[name + "_s"] = peak(), time.perf_counter() - began
    reset()
    return time.perf_counter()
began = phase("floor", time.perf_counter())
with open_inflated(path) as stream:
    while read_block(stream, path):
        pass
began = phase("inflate", began)
collector = ColumnCollector(path)
stream_events(path, collector.add, decoder=D.make_decoder(False))
began = phase("scan", began)
tables = collector.tables(0)
began = phase("tables", began)
del tables, collector
began = phase("free", began)
decoded = D.decode_file(path)
began = phase("decode", began)
result = aggregate_file(decoded, Plan())
began = phase("map", began)
print(json.dumps(out))
"""


def build(folder: Path, events: int) -> Path:
    """The gzip trace of `events` kernels (written once; its name says how many)."""
    path = folder / f"tiny_{events}.json.gz"
    if path.exists():
        return path
    if events < 1:
        raise SystemExit("--events: at least 1")
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    with gzip.open(partial, "wt", compresslevel=6) as out:
        out.write('{"schemaVersion":1,"traceEvents":[')
        block = 100_000
        for first in range(0, events, block):
            out.write(",".join(EVENT % (2 * i) for i in range(first, min(first + block, events))))
            if first + block < events:
                out.write(",")
        out.write('],"baseTimeNanoseconds":1700000000000000000}')
    partial.rename(path)
    return path


def run_cli(path: Path, pure: bool) -> tuple[float, float, int, int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEATTR_PURE_PYTHON": "1" if pure else "0",
           "TRACEATTR_MAX_EVENTS": str(10**12)}     # no --max-events refusal: the run is the measurement
    began, cpu = time.monotonic(), _children_cpu()
    done = subprocess.run([sys.executable, "-c", RUNNER, "summarize", str(path), "--no-cache", "-j", "1", "-q",
                           "--format", "csv"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    wall, cpu = time.monotonic() - began, _children_cpu() - cpu
    tail = done.stderr.strip().splitlines()
    found = re.search(r"RSS (\d+) EXIT (\S+)", tail[-1]) if tail else None
    if found is None:
        return wall, cpu, 0, -1, (tail[-1] if tail else "")[:120]
    message = " ".join(line for line in tail if "error" in line)[:160]      # notes (rank assumed 0) left out
    return wall, cpu, int(found.group(1)) << 10, int(found.group(2)) if found.group(2).isdigit() else 0, message


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (less sensitive to load than wall)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--data", type=Path, default=Path("/tmp/traceattr-bench-events"))
    parser.add_argument("--pure-python", action="store_true", help="msgspec alone (TRACEATTR_PURE_PYTHON=1)")
    parser.add_argument("--phases", action="store_true")
    parser.add_argument("--no-cli", action="store_true", help="only --phases")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs; a shared machine)")
    paths = {events: build(args.data, events) for events in args.events}
    decoder = "msgspec" if args.pure_python else "C scanner"
    # the same command on a file of 10 events: what the process holds before any event (imports, buffers)
    floor = run_cli(build(args.data, 10), args.pure_python)[2]
    print(f"floor: {floor / 2**20:.0f} MiB peak RSS on a 10-event file")
    print("| events | decoder | gzip MB | JSON MB | wall s | CPU s | peak RSS MiB | bytes/event | above the floor, "
          "bytes/event | exit |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for events, path in paths.items():
        json_mb = events * (len(EVENT % 10**7) + 1) / 1e6
        if not args.no_cli:
            wall, cpu, rss, code, message = run_cli(path, args.pure_python)
            print(f"| {events:,} | {decoder} | {path.stat().st_size / 1e6:.1f} | ~{json_mb:.0f} | {wall:.1f} | {cpu:.1f} | "
                  f"{rss / 2**20:.0f} | {rss / events:.0f} | {(rss - floor) / events:.0f} | {code} {message} |",
                  flush=True)
        if args.phases:
            env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEATTR_PURE_PYTHON": "1" if args.pure_python else "0"}
            done = subprocess.run([sys.executable, "-c", PHASES, str(path)], capture_output=True, text=True,
                                  env=env, cwd=REPO)
            if done.returncode:
                print(done.stderr[-2000:])
                continue
            phases = json.loads(done.stdout.strip().splitlines()[-1])
            base = phases["floor"]
            shown = ", ".join(f"{name} {phases[name] / 2**20:.0f} MiB ({(phases[name] - base) / events:.0f} B/event "
                              f"above the floor, {phases[name + '_s']:.1f} s)"
                              for name in ("inflate", "scan", "tables", "decode", "map"))
            print(f"phases, {events:,} events, {decoder}: import floor {phases['floor'] / 2**20:.0f} MiB; {shown}",
                  flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
