"""Load benchmark: `traceattr summarize` on a ~1 GB torch-2.13-layout trace, as a whole subprocess.

    python3 benchmarks/bench_load.py                      # 1000 MB plain JSON, 1 run
    python3 benchmarks/bench_load.py --size-mb 200 --gzip --runs 3
    python3 benchmarks/bench_load.py --check              # also compare the CSV's Σ self with the exact busy
    python3 benchmarks/bench_load.py --attribution        # also time load, sweep, link, attribute(by=...) in one process

The trace (1 rank, 4 overlapping streams, pretty-printed one key per line, era C) is built once with
traceattr.builder into benchmarks/data/ (git-ignored) and reused while its spec is unchanged. Wall time and
peak RSS come from `/usr/bin/time -v` when present, else from getrusage(RUSAGE_CHILDREN).
Prints one markdown table row per run.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data"
HEADER = ("| input | JSON MiB | .gz MiB | kernels | events | run | wall s | peak RSS MiB | RSS / JSON |\n"
          "|---|---|---|---|---|---|---|---|---|")


def bench_spec(size_mb: int):
    from traceattr.builder import TraceSpec
    # 24 modules x 2 ops x 2 kernels: about 570k kernels and 3.5M events per GB, as in prior-art.md section 5
    return TraceSpec(ranks=1, streams=(7, 20, 24, 28), layers=24, ops_per_module=2, kernels_per_op=2,
                     steps=(1,), era="C", layout="pretty", seed=1, target_bytes=size_mb * 1_000_000)


def build(size_mb: int) -> tuple[Path, Path, dict]:
    """The plain trace, its gzip copy and a summary; rebuilt only when the spec changed."""
    from traceattr.builder import write_trace

    DATA.mkdir(parents=True, exist_ok=True)
    plain = DATA / f"bench_{size_mb}mb.pt.trace.json"
    packed = plain.with_name(plain.name + ".gz")
    sidecar = plain.with_name(plain.name + ".truth.json")
    spec = bench_spec(size_mb)
    spec_text = json.dumps(asdict(spec), sort_keys=True, default=str)
    if sidecar.exists() and plain.exists() and packed.exists():
        info = json.loads(sidecar.read_text())
        if info.get("spec") == spec_text:
            return plain, packed, info
    started = time.perf_counter()
    truth = write_trace(plain, spec)
    built_s = time.perf_counter() - started
    started = time.perf_counter()
    from isal import igzip                # level 3: seconds per GB (torch's level 9 is ~10% smaller, much slower)
    with open(plain, "rb") as src, igzip.open(packed, "wb", compresslevel=3) as dst:
        shutil.copyfileobj(src, dst, 8 << 20)
    info = {"spec": spec_text, "kernels": len(truth), "events": truth.events, "build_s": round(built_s, 1),
            "gzip_s": round(time.perf_counter() - started, 1),
            "busy_ns": {str(k): v.busy_ns for k, v in truth.devices.items()},
            "sum_duration_ns": {str(k): v.sum_duration_ns for k, v in truth.devices.items()}}
    sidecar.write_text(json.dumps(info, indent=1))
    return plain, packed, info


def run_once(path: Path, output: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `traceattr summarize` subprocess."""
    command = [sys.executable, "-m", "traceattr.cli", "summarize", str(path), "--format", "csv", "-o", output,
               "--no-cache", "--quiet"]   # a cold look every run
    if shutil.which("traceattr"):
        command = ["traceattr", *command[3:]]
    if Path("/usr/bin/time").exists():
        done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"summarize failed ({done.returncode}):\n{done.stderr[-3000:]}")
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr).group(1)
        seconds = sum(float(part) * 60 ** i for i, part in enumerate(reversed(wall.split(":"))))
        rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
        return seconds, rss_kb / 1024
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def check(path: Path, info: dict) -> str:
    """Σ self in the kernel CSV against the builder's exact busy time."""
    import pandas as pd
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "k.csv"
        run_once(path, str(out))
        table = pd.read_csv(out)
    got = int(table["self_ns"].sum())
    want = sum(info["busy_ns"].values())
    return f"Σ self_ns = {got:,}; exact busy = {want:,}; {'OK' if got == want else 'MISMATCH'}"


ATTRIBUTION_SCRIPT = """
import json, resource, sys, time
started = time.perf_counter()
import traceattr
from traceattr.attribution.links import link
from traceattr.attribution.sweep import sweep
times = {"imports": time.perf_counter() - started}
def timed(name, work):
    begin = time.perf_counter()
    work()
    times[name] = time.perf_counter() - begin
box = {}
timed("load", lambda: box.update(ts=traceattr.load(sys.argv[1], jobs=1, cache=False)))
timed("sweep", lambda: sweep(box["ts"]))
timed("link", lambda: link(box["ts"]))
for level in ("op", "op_stack", "module", "annotation", "step"):
    timed(f"attribute {level}", lambda: traceattr.attribute(box["ts"], by=level))
times["peak RSS MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(times))
"""


def attribution_breakdown(path: Path) -> dict:
    """Seconds of each stage (load, sweep, link, each attribute level) and peak RSS, in one fresh process."""
    done = subprocess.run([sys.executable, "-c", ATTRIBUTION_SCRIPT, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"attribution run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1000, help="size of the plain JSON (default 1000)")
    parser.add_argument("--gzip", action="store_true", help="time the .json.gz instead of the plain file")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="verify Σ self == exact busy once")
    parser.add_argument("--attribution", action="store_true",
                        help="also time load, sweep, link and attribute(by=...) stage by stage")
    args = parser.parse_args()
    plain, packed, info = build(args.size_mb)
    size_mb = plain.stat().st_size / 2**20     # MiB, ru_maxrss's unit here (KiB / 1024): the ratio is of bytes
    gz_mb = packed.stat().st_size / 2**20
    print(f"built {plain.name}: {size_mb:.1f} MiB JSON, {gz_mb:.1f} MiB gz, {info['kernels']:,} kernels, "
          f"{info['events']:,} events (build {info['build_s']} s, gzip {info['gzip_s']} s)", file=sys.stderr)
    target = packed if args.gzip else plain
    print(HEADER)
    for run in range(1, args.runs + 1):
        seconds, rss_mb = run_once(target, "/dev/null")
        print(f"| {target.name} | {size_mb:.1f} | {gz_mb:.1f} | {info['kernels']:,} | {info['events']:,} | {run} | "
              f"{seconds:.2f} | {rss_mb:.0f} | {rss_mb / size_mb:.2f}x |", flush=True)
    if args.check:
        print(check(target, info), file=sys.stderr)
    if args.attribution:
        stages = attribution_breakdown(target)
        print("\n| stage | s |\n|---|---|")
        for name, value in stages.items():
            print(f"| {name} | {value:.2f} |" if name != "peak RSS MB" else f"| peak RSS MB | {value:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
