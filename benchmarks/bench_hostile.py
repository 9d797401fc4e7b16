"""Hostile-input benchmark (issue 11): time and peak RSS of `traceattr summarize` on inputs built to hurt.

    python3 benchmarks/bench_hostile.py [--names 200000] [--bomb-gib 2]

* `names`: one trace with N distinct kernel names, summarized as a terminal table and as json (the table
  took 148 s and 2.7 GB for 200k names when rich laid out every cell).
* `bomb`: gzip files of one kernel then GiB of whitespace, or of the same event repeated (~1000:1): streamed
  and refused (whitespace: no event boundary within MAX_PENDING_BYTES; events: the default --max-inflate
  ratio), never inflated whole (it was: 2.1x the inflated size in RSS).
* `utf8`: one invalid UTF-8 byte in the middle of a 4.3 MB trace (took 20.6 s when every earlier boundary was
  retried; the error now names the byte).

Each run is a fresh process running the CLI; peak RSS is its VmHWM (/proc/self/status).
Files go to a temporary folder. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# VmHWM (peak RSS of this process image), not ru_maxrss, which survives exec from a bigger parent
RUNNER = ("import re, sys\nfrom traceattr.cli import main\n"
          "try:\n    main(sys.argv[1:], prog_name='traceattr')\nexcept SystemExit as exc:\n    code = exc.code\n"
          "peak = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
          "print('RSS', peak, 'EXIT', code, file=sys.stderr)")


def run(*args: str) -> tuple[float, int, int, str]:
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True)
    wall = time.monotonic() - began
    tail = result.stderr.strip().splitlines()
    rss_kb, code = int(tail[-1].split()[1]), tail[-1].split()[3]
    message = tail[0][:110] if len(tail) > 1 else ""
    return wall, rss_kb // 1024, int(code) if code.isdigit() else 0, message


def kernel(i: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": f"kernel_{i}_{'x' * 40}", "pid": 0, "tid": 7,
            "ts": 1.7e15 + 2 * i, "dur": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", type=int, default=200_000)
    parser.add_argument("--bomb-gib", type=float, default=2.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        names = folder / "names.json"
        names.write_text(json.dumps({"traceEvents": [kernel(i) for i in range(args.names)]}))
        for fmt in ("table", "json"):
            wall, rss, code, _ = run("summarize", str(names), "--no-cache", "-q", "--format", fmt, "-o",
                                     str(folder / f"out.{fmt}"))
            rows.append((f"{args.names:,} distinct kernel names, --format {fmt}", wall, rss, code, ""))
        hidden = str(folder)
        for kind, filler in (("whitespace", b" " * (1 << 24)),
                             ("repeated events", (b"," + json.dumps(kernel(1)).encode()) * 150_000)):
            bomb = folder / "bomb.json.gz"
            with gzip.open(bomb, "wb", compresslevel=9) as out:
                out.write(b'{"traceEvents": [' + json.dumps(kernel(0)).encode())
                for _ in range(int(args.bomb_gib * 2**30 / len(filler))):
                    out.write(filler)
                out.write(b"]}")
            size = f"{bomb.stat().st_size / 2**20:.1f} MB gz -> {args.bomb_gib:g} GiB"
            wall, rss, code, message = run("summarize", str(bomb), "--no-cache", "-q")
            rows.append((f"gzip bomb of {kind}, {size}", wall, rss, code, message))
        events = ",".join(json.dumps(kernel(i)) for i in range(28_000)).encode()
        text = b'{"traceEvents": [' + events + b"]}"
        at = text.index(b"kernel_", len(text) // 2)
        utf8 = folder / "utf8.json"
        utf8.write_bytes(text[:at] + b"\xff" + text[at + 1:])
        wall, rss, code, message = run("summarize", str(utf8), "--no-cache", "-q")
        rows.append((f"invalid UTF-8 at byte {at:,} of {len(text) / 1e6:.1f} MB", wall, rss, code, message))
    print("| input | wall s | peak RSS MB | exit | message |\n|---|---:|---:|---:|---|")
    for label, wall, rss, code, message in rows:
        message = message.replace(hidden, "TMP").replace("|", "\\|")
        print(f"| {label} | {wall:.1f} | {rss} | {code} | {message} |")


if __name__ == "__main__":
    main()
