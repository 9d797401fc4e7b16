"""traceattr against Holistic Trace Analysis on the same files, every measurement a whole process.

    python3 benchmarks/bench_hta.py                         # 1 rank x 1000 MB and 8 ranks x 100 MB, plain + gzip
    python3 benchmarks/bench_hta.py --one-mb 50 --eight-mb 10   # a quick run
    python3 benchmarks/bench_hta.py --skip-hta              # traceattr rows only

Trace sets are built once with traceattr.builder under --data (default /tmp/traceattr-bench; reused while
their spec is unchanged): `one/` (1 rank), `eight/` (8 ranks), and `one_gz/`, `eight_gz/` with isal
level-3 gzip copies. HTA (`holistictraceanalysis` from the package registry) is installed into
benchmarks/.venv-hta (git-ignored) on first use. Timed, each as its own process:

* traceattr summarize, cold: no cache yet (it decodes and fills a fresh `--cache-dir`), --jobs default
* traceattr summarize, cached: the same command again (the finished table is read from the cache), and
  `--by category` (decoded tables read from the cache, sweep and table computed)
* traceattr summarize --no-cache --jobs 1 and --jobs 2 (8 ranks: scaling with cores)
* HTA: TraceAnalysis(trace_dir=...) + get_gpu_kernel_breakdown(visualize=False)

Wall time, and peak memory of the whole process tree (sum of PSS over the process and its workers, sampled
every 50 ms from /proc/PID/smaps_rollup), and the peak RSS of the largest single process. Prints markdown table rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / "benchmarks" / ".venv-hta"
HEADER = ("| set | JSON MiB (largest file) | tool / run | wall s | peak tree PSS MiB | largest process RSS MiB | "
          "tree / largest JSON | Σ self or Σ dur (ms) |\n|---|---|---|---|---|---|---|---|")
HTA_SCRIPT = """
import sys, time, warnings
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
started = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter()
kernel_type, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
done = time.perf_counter()
print(f"RESULT load_s={loaded - started:.2f} breakdown_s={done - loaded:.2f} "
      f"sum_ms={kernels['sum (us)'].sum() / 1000:.3f}")
"""


def spec_for(ranks: int, size_mb: int):
    from traceattr.builder import TraceSpec
    # as benchmarks/bench_load.py: about 570k kernels and 3.5M events per GB, 4 overlapping streams
    return TraceSpec(ranks=ranks, streams=(7, 20, 24, 28), layers=24, ops_per_module=2, kernels_per_op=2,
                     steps=(1,), era="C", layout="pretty", seed=1, target_bytes=size_mb * 1_000_000)


def build_set(data: Path, name: str, ranks: int, size_mb: int) -> tuple[Path, Path, dict]:
    """folder of plain traces, folder of their gzip copies, builder truth (busy per rank); cached."""
    from isal import igzip

    from traceattr.builder import write_trace_set

    plain, packed = data / name, data / f"{name}_gz"
    sidecar = data / f"{name}.truth.json"
    spec = spec_for(ranks, size_mb)
    spec_text = json.dumps(asdict(spec), sort_keys=True, default=str)
    if sidecar.exists() and json.loads(sidecar.read_text()).get("spec") == spec_text:
        return plain, packed, json.loads(sidecar.read_text())
    for folder in (plain, packed):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    started = time.perf_counter()
    truths = write_trace_set(plain, spec)
    built_s = time.perf_counter() - started
    for trace in sorted(plain.iterdir()):
        with open(trace, "rb") as src, igzip.open(packed / (trace.name + ".gz"), "wb", compresslevel=3) as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
    info = {"spec": spec_text, "build_s": round(built_s, 1),
            "busy_ns": sum(d.busy_ns for t in truths.values() for d in t.devices.values()),
            "sum_duration_ns": sum(d.sum_duration_ns for t in truths.values() for d in t.devices.values()),
            "kernels": sum(len(t) for t in truths.values())}
    sidecar.write_text(json.dumps(info))
    return plain, packed, info


def ensure_hta() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "holistictraceanalysis"], check=True)
    return python


def _pss(pid: int, fallback: int) -> int:
    """Proportional set size from smaps_rollup (cheap, unlike a full smaps walk); RSS when unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return fallback


def timed(command: list[str], timeout: float | None = None) -> tuple[float, float, float, str | None]:
    """(wall s, peak tree PSS MB, largest single process RSS MB, stdout or None when stopped at timeout)."""
    started = time.perf_counter()
    process = psutil.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_tree = peak_one = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_tree, peak_one
        while not stop.is_set():
            try:
                tree = [process, *process.children(recursive=True)]
                rss, pss = [], []
                for member in tree:
                    try:   # PSS: forked workers share the parent's pages; RSS would count them twice
                        rss.append(member.memory_info().rss)
                        pss.append(_pss(member.pid, rss[-1]))
                    except psutil.Error:
                        pass
                peak_tree, peak_one = max(peak_tree, sum(pss)), max(peak_one, max(rss, default=0))
            except psutil.Error:
                pass
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        out = None
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    if out is None:
        return wall, peak_tree / 2**20, peak_one / 2**20, None
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{err[-3000:]}")
    return wall, peak_tree / 2**20, peak_one / 2**20, out


def traceattr_run(folder: Path, *extra: str, cache: Path = Path("/tmp/traceattr-bench/cache")):
    csv = Path("/tmp") / f"bench_hta_{os.getpid()}.csv"
    command = [sys.executable, "-m", "traceattr.cli", "summarize", str(folder), "--format", "csv", "-o", str(csv),
               "--quiet", "--cache-dir", str(cache), *extra]
    wall, tree, one, _ = timed(command)
    import pandas as pd
    frame = pd.read_csv(csv)
    self_ms = frame["self_ns"].sum() / 1e6
    csv.unlink()
    return wall, tree, one, self_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one-mb", type=int, default=1000, help="JSON size of the 1-rank trace (default 1000)")
    parser.add_argument("--eight-mb", type=int, default=100, help="JSON size per rank of the 8-rank set (100)")
    parser.add_argument("--data", type=Path, default=Path("/tmp/traceattr-bench"))
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--sets", default="eight,eight_gz,one,one_gz", help="which sets to time")
    parser.add_argument("--hta-sets", default="eight,one", help="sets HTA is timed on (it is slow)")
    parser.add_argument("--hta-timeout", type=float, default=1200, help="seconds before HTA is stopped")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, ranks, size in (("one", 1, args.one_mb), ("eight", 8, args.eight_mb)):
        plain, packed, info = build_set(args.data, name, ranks, size)
        built[name], built[f"{name}_gz"] = (plain, info), (packed, info)
        print(f"{name}: {ranks} rank(s) x {size} MB, {info['kernels']:,} kernels, exact busy "
              f"{info['busy_ns'] / 1e6:,.3f} ms, Σ durations {info['sum_duration_ns'] / 1e6:,.3f} ms "
              f"(built in {info['build_s']} s)", file=sys.stderr)
    hta = None if args.skip_hta else ensure_hta()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", file=sys.stderr)
    print(HEADER, flush=True)
    for name in args.sets.split(","):
        folder, info = built[name]
        # MiB, the unit of the RSS and PSS (/ 2**20): "tree / largest JSON" is a ratio of bytes
        largest = max(f.stat().st_size for f in built[name.removesuffix("_gz")][0].iterdir()) / 2**20
        rows = []
        cache = args.data / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        rows.append(("traceattr cold (writes cache)", *traceattr_run(folder, cache=cache)))
        rows.append(("traceattr cached (same table again)", *traceattr_run(folder, cache=cache)))
        rows.append(("traceattr cached files, new table (--by category)",
                     *traceattr_run(folder, "--by", "category", cache=cache)))
        rows.append(("traceattr --no-cache", *traceattr_run(folder, "--no-cache")))
        if name.startswith("eight"):
            rows.append(("traceattr --no-cache --jobs 1", *traceattr_run(folder, "--no-cache", "--jobs", "1")))
            rows.append(("traceattr --no-cache --jobs 2", *traceattr_run(folder, "--no-cache", "--jobs", "2")))
        if hta is not None and name in args.hta_sets.split(","):
            wall, tree, one, out = timed([str(hta), "-c", HTA_SCRIPT, str(folder)], timeout=args.hta_timeout)
            if out is None:
                rows.append((f"HTA (stopped after {args.hta_timeout:.0f} s, unfinished)", wall, tree, one, float("nan")))
            else:
                result = dict(part.split("=") for part in out.split("RESULT", 1)[1].split())
                rows.append((f"HTA (load {result['load_s']} s + breakdown {result['breakdown_s']} s)", wall, tree,
                             one, float(result["sum_ms"])))
        for label, wall, tree, one, total_ms in rows:
            print(f"| {name} | {largest:.1f} | {label} | {wall:.2f} | {tree:.0f} | {one:.0f} | {tree / largest:.2f}x | "
                  f"{total_ms:,.3f} |", flush=True)
        print(f"<!-- {name}: exact busy {info['busy_ns'] / 1e6:,.3f} ms, Σ durations "
              f"{info['sum_duration_ns'] / 1e6:,.3f} ms -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
