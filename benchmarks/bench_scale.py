"""Driver memory and wall time of `traceattr summarize` on many ranks: per-file map-reduce (the default)
against the TraceSet path (load every rank, then summarize), on a process pool or a Dask LocalCluster.

    python3 benchmarks/bench_scale.py --sets eight,sixtyfour          # 8 x 100 MB and 64 x 20 MB
    python3 benchmarks/bench_scale.py --sets flat --flat-mb 1         # 64, 256, 1024 ranks x 1 MB, LocalCluster
    python3 benchmarks/bench_scale.py --sets eight --eight-mb 10      # a quick run

Sets are built once with traceattr.builder into --data (default /tmp/traceattr-bench-scale; delete it
afterwards), the same trace shape as bench_load/bench_hta (4 overlapping streams, torch 2.13 layout, era C).
Each row is one whole process: `traceattr.summarize(DIR, by="kernel", cache=False)` (map-reduce; `jobs`, or
a Dask Client as executor) or, for the TraceSet rows, load + summarize, written as CSV. Memory: the driver's own peak RSS (VmHWM of the
driver process, which the pool workers and Dask workers are not part of) and the peak of the summed PSS of the
driver and its pool workers (sampled every 20 ms). Σ self_ns is checked against the builder's exact busy time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hta import _pss, spec_for  # noqa: E402  (same trace shape as the other benchmarks)

MAPREDUCE_SCRIPT = """
import sys, traceattr
executor = None
if sys.argv[3].startswith("tcp://"):
    from distributed import Client
    executor = Client(sys.argv[3])
jobs = None if executor is not None else int(sys.argv[3])
traceattr.summarize(sys.argv[1], by="kernel", jobs=jobs, executor=executor, cache=False).to_csv(sys.argv[2], index=False)
"""

TRACESET_SCRIPT = """
import sys, traceattr
from traceattr import schema as S
ts = traceattr.load(sys.argv[1], jobs=int(sys.argv[2]), cache=False, drop_host=(S.CPU_OP, S.PYTHON_FUNCTION))
traceattr.summarize(ts, by="kernel").to_csv(sys.argv[3], index=False)
"""


def _write_one(args) -> int:
    from traceattr.builder import write_trace
    folder, rank, ranks, size_mb = args
    spec = spec_for(ranks, size_mb)
    truth = write_trace(Path(folder) / f"rank{rank}.pt.trace.json", spec, rank)
    return sum(d.busy_ns for d in truth.devices.values())


def build(data: Path, name: str, ranks: int, size_mb: float, jobs: int = 2) -> tuple[Path, list[int]]:
    """rank{R}.pt.trace.json for R < ranks (cached with the spec), and each rank's exact busy time."""
    folder = data / name
    sidecar = data / f"{name}.json"
    key = json.dumps([ranks, size_mb, repr(spec_for(ranks, size_mb))])
    if sidecar.exists() and json.loads(sidecar.read_text())["key"] == key:
        return folder, json.loads(sidecar.read_text())["busy_ns"]
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    started = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        busy = list(pool.map(_write_one, [(str(folder), r, ranks, size_mb) for r in range(ranks)], chunksize=4))
    sidecar.write_text(json.dumps({"key": key, "busy_ns": busy, "build_s": round(time.perf_counter() - started)}))
    return folder, busy


def subset(data: Path, source: Path, ranks: int) -> Path:
    """The first `ranks` files of a larger set, as hard links (their distributedInfo ranks are 0..ranks-1)."""
    folder = data / f"{source.name}_{ranks}"
    folder.mkdir(exist_ok=True)
    for rank in range(ranks):
        link = folder / f"rank{rank}.pt.trace.json"
        if not link.exists():
            link.hardlink_to(source / link.name)
    return folder


def measure(command: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    """wall s, driver VmHWM MB, peak Σ PSS of the driver and its children MB, and its stdout (None when it
    was stopped after `timeout` seconds)."""
    started = time.perf_counter()
    process = psutil.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = {"hwm": 0, "tree": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                with open(f"/proc/{process.pid}/status") as status:
                    for line in status:
                        if line.startswith("VmHWM"):
                            peak["hwm"] = max(peak["hwm"], int(line.split()[1]) * 1024)
                tree = [process, *process.children(recursive=True)]
                peak["tree"] = max(peak["tree"], sum(_pss(p.pid, 0) for p in tree))
            except (OSError, psutil.Error):
                pass
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for member in [*process.children(recursive=True), process]:
            with contextlib.suppress(psutil.Error):
                member.kill()
        process.communicate()
        out = err = None
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    if out is not None and process.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{err[-3000:]}")
    return {"wall_s": wall, "driver_mb": peak["hwm"] / 2**20, "tree_mb": peak["tree"] / 2**20, "stdout": out}


def run_row(folder: Path, busy_ns: int, label: str, mode: str, jobs: int | None, scheduler: str | None) -> str:
    csv = Path("/tmp") / f"bench_scale_{os.getpid()}.csv"
    if mode == "traceset":
        command = [sys.executable, "-c", TRACESET_SCRIPT, str(folder), str(jobs or 2), str(csv)]
    else:
        # the map-reduce is the Python API's path since the command's header gained the check line
        command = [sys.executable, "-c", MAPREDUCE_SCRIPT, str(folder), str(csv), scheduler or str(jobs)]
    result = measure(command)
    import pandas as pd
    self_ns = int(pd.read_csv(csv)["self_ns"].sum())
    csv.unlink()
    files = sorted(folder.iterdir())
    largest = max(f.stat().st_size for f in files) / 2**20     # MiB, the RSS's unit: the ratio is of bytes
    total = sum(f.stat().st_size for f in files) / 2**20
    exact = "yes" if self_ns == busy_ns else f"NO ({self_ns} != {busy_ns})"
    where = f"LocalCluster 2 workers" if scheduler else f"jobs {jobs}"
    return (f"| {label} | {len(files)} | {largest:.1f} | {total:,.0f} | {mode} | {where} | {result['wall_s']:.1f} | "
            f"{result['driver_mb']:.0f} | {result['driver_mb'] / largest:.2f}x | {result['tree_mb']:.0f} | {exact} |")


HEADER = ("| set | files | largest MiB | total MiB | path | workers | wall s | driver peak RSS MiB | driver / "
          "largest file | peak Σ PSS driver+pool MiB | Σ self == busy |\n|---|---|---|---|---|---|---|---|---|---|---|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/traceattr-bench-scale"))
    parser.add_argument("--sets", default="eight,sixtyfour,flat")
    parser.add_argument("--eight-mb", type=float, default=100)
    parser.add_argument("--sixtyfour-mb", type=float, default=20)
    parser.add_argument("--flat-mb", type=float, default=1)
    parser.add_argument("--flat-ranks", default="64,256,1024")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    print(HEADER, flush=True)
    sets = args.sets.split(",")
    if "eight" in sets:
        folder, busy = build(args.data, "eight", 8, args.eight_mb)
        for mode, jobs in (("mapreduce", 1), ("mapreduce", 2), ("traceset", 2)):
            print(run_row(folder, sum(busy), "8 ranks", mode, jobs, None), flush=True)
    if "sixtyfour" in sets:
        folder, busy = build(args.data, "sixtyfour", 64, args.sixtyfour_mb)
        for mode, jobs in (("mapreduce", 1), ("mapreduce", 2), ("traceset", 2)):
            print(run_row(folder, sum(busy), "64 ranks", mode, jobs, None), flush=True)
    if "flat" in sets:
        counts = [int(n) for n in args.flat_ranks.split(",")]
        source, busy = build(args.data, "flat", max(counts), args.flat_mb)
        from distributed import Client, LocalCluster
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                          silence_logs=50) as cluster, Client(cluster):
            for count in counts:
                folder = subset(args.data, source, count) if count < max(counts) else source
                print(run_row(folder, sum(busy[:count]), f"{count} ranks", "mapreduce", None, cluster.scheduler_address),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
