"""`summarize --by collective` and `--by rank` on many ranks of built multi-rank traces: wall time, peak RSS.

    python3 benchmarks/bench_collectives.py --ranks 64 --size-mb 20

Builds `benchmarks/data/collectives_{ranks}x{size}mb/` once with traceattr.builder.multirank (reused while
the spec is unchanged): every rank's clock offset (up to 2 ms), a late rank with extra compute before every
all-reduce, a send/recv pair, end jitter. Each command runs as a whole subprocess under /usr/bin/time -v,
cold (--no-cache), and is checked: wait + transfer == communication per rank row, and the straggler named.

The command's answer is computed per file on the engine (analysis/multirank_plan.py, `comm_report`).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from traceattr.builder.multirank import MultiRankSpec, build_multirank

DATA = Path(__file__).resolve().parent / "data"
BYTES_PER_STEP = 8_500          # measured: one step of one rank with 16 compute kernels, compact JSON


def build(ranks: int, size_mb: int) -> Path:
    steps = max(1, size_mb * 1_000_000 // BYTES_PER_STEP)
    spec = MultiRankSpec(ranks=ranks, steps=steps, compute_kernels=16, compute_ns=40_000,
                         clock_offset_ns={r: (r * 7_919) % 2_000_000 for r in range(ranks)},
                         extra_compute_ns={ranks // 2: 25_000}, p2p=True, end_jitter_ns=500, seed=1)
    folder = DATA / f"collectives_{ranks}x{size_mb}mb"
    marker = folder / "spec.txt"
    if marker.exists() and marker.read_text() == repr(spec):
        return folder
    started = time.perf_counter()
    build_multirank(spec, folder)
    marker.write_text(repr(spec))
    size = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
    print(f"built {folder.name}: {size:.0f} MB in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return folder


# the driver's own peak RSS (RUSAGE_SELF, printed at exit): /usr/bin/time's figure is the largest of the
# driver and its reaped workers
DRIVER_RSS = """
import atexit, resource, sys
atexit.register(lambda: print("driver_maxrss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
"""
# the command's map-reduce answer (analysis/multirank_plan.py), rendered as the command renders it
MAPREDUCE = DRIVER_RSS + """
from traceattr import schema as S
from traceattr.analysis.multirank_plan import comm_report
from traceattr.io.results import multirank_options
from traceattr.pipelines.summarize import _title
from traceattr.report.summarize import Report, render_report
path, by, out, jobs = sys.argv[1:5]
table, header = comm_report(path, by, jobs=int(jobs), cache=False, host_dropped=(S.PYTHON_FUNCTION,))
render_report(Report(table, header, _title(table, by, multirank_options())), "json", out, 200)
"""

def run(folder: Path, by: str, jobs: int) -> dict:
    out = folder.parent / f"{folder.name}.{by}.json"
    command = ["/usr/bin/time", "-v", sys.executable, "-c", MAPREDUCE, str(folder), by, str(out), str(jobs)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    hours, minutes, seconds = (float(g) if g else 0.0 for g in wall.groups())
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    driver = int(re.search(r"driver_maxrss_kb (\d+)", done.stderr).group(1))
    rows = json.loads(out.read_text())
    if by == "rank":
        assert all(r["communication_wait_ns"] + r["communication_transfer_ns"] == r["communication_ns"] for r in rows)
    return {"by": by, "rows": len(rows), "wall_s": hours * 3600 + minutes * 60 + seconds, "rss_mb": rss / 1024,
            "driver_mb": driver / 1024, "text": out.read_text()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--size-mb", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    folder = build(args.ranks, args.size_mb)
    size = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
    largest = max(p.stat().st_size for p in folder.glob("*.json")) / 2 ** 20
    print("| input | JSON MB | largest file MiB | --by | path | rows | wall s | peak RSS MB (time -v) | "
          "driver peak RSS MB |\n|---|---|---|---|---|---|---|---|---|")
    for by in ("collective", "rank"):
        results = [("engine", run(folder, by, args.jobs))]
        for path, result in results:
            print(f"| {args.ranks} ranks x {args.size_mb} MB | {size:.0f} | {largest:.1f} | {by} | {path} | "
                  f"{result['rows']} | {result['wall_s']:.1f} | {result['rss_mb']:.0f} | {result['driver_mb']:.0f} |")


if __name__ == "__main__":
    main()
