"""Issue 14's scale table in ONE run: every row measured by this script, one after the other, on data built
beforehand, with the machine's load average before and after each row, the commit and the date.

    python3 benchmarks/bench_scale_table.py --build-only      # build (or check) every data set, measure nothing
    python3 benchmarks/bench_scale_table.py                   # the measurement (prints the markdown table)
    python3 benchmarks/bench_scale_table.py --small           # the same rows at tiny sizes (checks the script)

Rows (each one whole `traceattr summarize ... --format csv` process, the command users run; HTA as its own
process):

* one file of 200 MB and of 1 GB: cold (a fresh --cache-dir: decode, fill the cache) and cached (the same
  command again: the stored answer is replayed)
* 8 ranks x 100 MB and 64 ranks x 20 MB: --no-cache, --jobs 1 and --jobs 2
* 64 and 1024 ranks x 10 MB: --no-cache --scheduler of a 2-worker Dask LocalCluster (one thread each) started
  by this script; the 64 are the first 64 of the 1024 (hard links), so the two rows differ in rank count only
* with --api, the same two LocalCluster rows through the Python API's map-reduce (`traceattr.summarize(path,
  executor=client)`), to set the command's driver beside the library's
* HTA 0.5.0 on the same 200 MB file: TraceAnalysis(trace_dir) + get_gpu_kernel_breakdown (bench_hta.py)

Memory: the driver's peak RSS is the VmHWM of the `traceattr` process itself, read from /proc every 20 ms
with psutil (pool and Dask workers are other processes, not counted; the kernel's high-water mark, so a
sample misses at most the last 20 ms); "peak Σ PSS" adds the pool workers (not the Dask workers, which this
script started). Every traceattr row's Σ self_ns is checked against the builder's exact busy time. Sizes
in the rows are MiB, like the RSS, so "driver / largest file" is a ratio of bytes; a set's label keeps its
decimal size (1 x 202 MB is 192.7 MiB).

Data (traceattr.builder, the trace shape of bench_load/bench_hta: 4 overlapping streams, torch 2.13 pretty
layout, era C) goes to --data (default benchmarks/data/scale, git-ignored) and is reused while its spec is
unchanged (a sidecar JSON per set records the spec and the exact busy time). The 1024-rank set is built from
8 builder ranks (world size 1024): rank R is a byte copy of rank R % 8 with distributedInfo's rank set to R,
so each file's exact busy time is that of its source rank (~10.5 GB, a few minutes to write).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hta import HTA_SCRIPT, spec_for, timed  # noqa: E402  (the same trace shape and HTA run)
from bench_scale import MAPREDUCE_SCRIPT, _write_one, measure, subset  # noqa: E402  (builds, VmHWM sampling)

# (ranks, MB per file, distinct builder ranks or None for all) of each set: full size and --small
SETS = {
    "one200": (1, 200, None), "one1000": (1, 1000, None), "eight": (8, 100, None),
    "sixtyfour": (64, 20, None), "flat": (1024, 10, 8),
}
SMALL_SETS = {
    "one200": (1, 4, None), "one1000": (1, 8, None), "eight": (8, 2, None),
    "sixtyfour": (64, 1, None), "flat": (128, 1, 8),
}
FLAT_FEW = 64                       # the flat set's first ranks, compared with all of them
FLAT_FEW_SMALL = 16
RANK_FIELD = b'"rank": %d, "world_size"'       # distributedInfo in the builder's pretty layout, once per file


def build(data: Path, name: str, ranks: int, size_mb: int, distinct: int | None, jobs: int) -> dict:
    """The set's folder (rank{R}.pt.trace.json) and exact busy ns per rank; built once per spec."""
    folder, sidecar = data / name, data / f"{name}.json"
    key = json.dumps([ranks, size_mb, distinct, repr(spec_for(ranks, size_mb))])
    if sidecar.exists():
        info = json.loads(sidecar.read_text())
        if info["key"] == key and len(list(folder.glob("rank*.pt.trace.json"))) == ranks:
            return {**info, "folder": folder}
    shutil.rmtree(folder, ignore_errors=True)
    sidecar.unlink(missing_ok=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    built = distinct or ranks
    with ProcessPoolExecutor(min(jobs, built)) as pool:
        busy = list(pool.map(_write_one, [(str(folder), r, ranks, size_mb) for r in range(built)]))
    texts = {}
    for rank in range(built, ranks):              # byte copies of the built ranks with their own rank
        source = rank % built
        if source not in texts:
            texts[source] = (folder / f"rank{source}.pt.trace.json").read_bytes()
            if texts[source].count(RANK_FIELD % source) != 1:
                raise SystemExit(f"{name}: rank {source}'s distributedInfo is not where the copy expects it")
        copy = texts[source].replace(RANK_FIELD % source, RANK_FIELD % rank)
        (folder / f"rank{rank}.pt.trace.json").write_bytes(copy)
        busy.append(busy[source])
    info = {"key": key, "busy_ns": busy, "build_s": round(time.perf_counter() - started, 1),
            "largest_mb": max(p.stat().st_size for p in folder.iterdir()) / 1e6,
            "total_mb": sum(p.stat().st_size for p in folder.iterdir()) / 1e6}
    sidecar.write_text(json.dumps(info))
    return {**info, "folder": folder}


def first_ranks(data: Path, source: dict, count: int) -> dict:
    """The first `count` ranks of a set, as hard links (same files, so only the rank count differs)."""
    return {**source, "folder": subset(data, source["folder"], count), "busy_ns": source["busy_ns"][:count], "total_mb": None}


# the import floor of the command's driver: its allocator settings, then the modules `summarize` runs
FLOOR_SCRIPT = ("from traceattr.allocator import return_freed_memory; return_freed_memory(); "
                "import traceattr.cli, traceattr.pipelines.summarize, traceattr.report.render, "
                "traceattr.analysis.run_tables, traceattr.analysis.multirank_plan")


def traceattr_command() -> list[str]:
    script = Path(sys.executable).with_name("traceattr")
    return [str(script)] if script.exists() else [sys.executable, "-m", "traceattr.cli"]


def self_ns_of(text: str) -> int:
    """Σ self ns of a kernel table (Σ busy ns of a rank table: the same law)."""
    return sum(int(row["self_ns"] if "self_ns" in row else row["busy_ns"]) for row in csv.DictReader(io.StringIO(text)))


def largest_mib(data: dict) -> float:
    """The largest file of a set in MiB, the unit of every RSS here (RSS / 2**20): a ratio of the two is
    then a ratio of bytes. Sets keep their names in decimal MB (the builder's target sizes); until session
    11 the ratios divided MiB of RSS by decimal MB of JSON, 4.9% too low."""
    return max(path.stat().st_size for path in Path(data["folder"]).iterdir() if path.is_file()) / 2**20


def load() -> float:
    return os.getloadavg()[0]


class Table:
    def __init__(self, timeout: float) -> None:
        self.rows: list[dict] = []
        self.timeout = timeout

    def traceattr(self, label: str, target: Path, data: dict, *flags: str, env: dict | None = None,
                  what: str = "", command: list[str] | None = None) -> dict:
        before = load()
        command = command or [*traceattr_command(), "summarize", str(target), "--format", "csv", "--quiet", *flags]
        result = measure(command, env={**os.environ, **(env or {})}, timeout=self.timeout)
        busy = sum(data["busy_ns"])
        if result["stdout"] is None:
            exact = f"stopped after {self.timeout:.0f} s"
        else:
            found = self_ns_of(result["stdout"])
            exact = "yes" if found == busy else f"NO ({found:,} != {busy:,})"
        row = {"label": label, "files": len(data["busy_ns"]), "largest_mib": largest_mib(data),
               "command": what or "summarize " + " ".join(f for f in flags if not f.startswith(("/", "tcp://"))),
               "wall_s": result["wall_s"], "driver_mb": result["driver_mb"], "tree_mb": result["tree_mb"],
               "exact": exact, "load": (before, load())}
        self.rows.append(row)
        print(self.line(row), file=sys.stderr, flush=True)
        return row

    def hta(self, label: str, target: Path, data: dict) -> dict:
        before = load()
        wall, tree, largest_rss, out = timed([sys.executable, "-c", HTA_SCRIPT, str(target)], timeout=self.timeout)
        detail = "stopped" if out is None else dict(
            part.split("=") for part in out.split("RESULT", 1)[1].split())
        command = ("HTA TraceAnalysis + kernel breakdown" if out is None else
                   f"HTA (load {detail['load_s']} s + breakdown {detail['breakdown_s']} s)")
        row = {"label": label, "files": len(data["busy_ns"]), "largest_mib": largest_mib(data), "command": command,
               "wall_s": wall, "driver_mb": largest_rss, "tree_mb": tree,
               "exact": "- (sums durations)" if out is not None else f"stopped after {self.timeout:.0f} s",
               "load": (before, load())}
        self.rows.append(row)
        print(self.line(row), file=sys.stderr, flush=True)
        return row

    @staticmethod
    def line(row: dict) -> str:
        return (f"| {row['label']} | {row['files']} | {row['largest_mib']:,.1f} | {row['command']} | "
                f"{row['wall_s']:.2f} | {row['driver_mb']:,.0f} | {row['driver_mb'] / row['largest_mib']:.2f}x | "
                f"{row['tree_mb']:,.0f} | {row['exact']} | {row['load'][0]:.2f} -> {row['load'][1]:.2f} |")


HEADER = ("| set | files | largest file MiB | command | wall s | driver peak RSS MiB | driver / largest file | "
          "peak Σ PSS driver+pool MiB | Σ self == exact busy | load avg before -> after |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def machine() -> str:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import pyarrow
    import pandas
    return (f"commit {commit}{' (working tree modified)' if dirty else ''}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, {memory:.0f} GiB, "
            f"Python {platform.python_version()}, pandas {pandas.__version__}, pyarrow {pyarrow.__version__}, "
            f"load average at start {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} / {os.getloadavg()[2]:.2f}")


def goals(rows: dict[str, dict], flat_few: int, flat_all: int, floor_mb: float) -> list[str]:
    """The issue's goals against the rows of this run (and, beside the driver goal, the driver above the
    floor of an interpreter that imports what the command imports: what it holds of the traces)."""
    out = ["| goal | measured | met |", "|---|---|---|"]
    cold, hta = rows["cold200"], rows.get("hta200")
    if hta is not None:
        ratio = hta["wall_s"] / cold["wall_s"]
        out.append(f"| cold >= 20x HTA on one {cold['label'].removeprefix('1 x ')} file (whole processes) | HTA "
                   f"{hta['wall_s']:.1f} s / traceattr {cold['wall_s']:.2f} s = {ratio:.1f}x | "
                   f"{'yes' if ratio >= 20 else 'no'} |")
    for name in ("cached200", "cached1000"):
        row = rows[name]
        out.append(f"| cached answer <= 0.2 s ({row['label']} file) | {row['wall_s']:.3f} s | "
                   f"{'yes' if row['wall_s'] <= 0.2 else 'no'} |")
    for name in ("cold200", "cold1000", "eight1", "eight2", "sixtyfour1", "sixtyfour2"):
        row = rows[name]
        share = row["driver_mb"] / row["largest_mib"]
        above = (row["driver_mb"] - floor_mb) / row["largest_mib"]
        out.append(f"| driver peak RSS <= 1.0x the largest file ({row['label']}, {row['command']}) | "
                   f"{row['driver_mb']:,.0f} MiB = {share:.2f}x of {row['largest_mib']:,.1f} MiB (above the "
                   f"{floor_mb:.0f} MiB import floor: "
                   f"{above:.2f}x) | {'yes' if share <= 1.0 else 'no'} |")
    for what, few_key, many_key in (("command", "flat_few", "flat_all"), ("Python API", "api_few", "api_all"),
                                    ("command --by rank", "rank_few", "rank_all")):
        if few_key not in rows:
            continue
        few, many = rows[few_key], rows[many_key]
        growth = many["driver_mb"] - few["driver_mb"]
        out.append(f"| driver flat from {flat_few} to {flat_all} ranks ({what}, LocalCluster; met within 5%) | "
                   f"{few['driver_mb']:,.0f} -> {many['driver_mb']:,.0f} MiB ({growth:+,.1f} MiB, "
                   f"{growth * 1024 / (flat_all - flat_few):+.1f} KiB per added file) | "
                   f"{'yes' if growth <= 0.05 * few['driver_mb'] else 'no'} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "benchmarks" / "data" / "scale")
    parser.add_argument("--small", action="store_true", help="tiny sizes, to check the script end to end")
    parser.add_argument("--build-only", action="store_true", help="build the data sets and stop")
    parser.add_argument("--build-jobs", type=int, default=2, help="processes building the traces")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before a row is stopped")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--api", action="store_true", help="also the LocalCluster rows through the Python API's "
                        "map-reduce, traceattr.summarize(path, executor=client)")
    parser.add_argument("--by-rank", action="store_true", help="also the LocalCluster rows of `--by rank` (the "
                        "multi-rank answers: collectives matched across every rank)")
    args = parser.parse_args()
    sets = SMALL_SETS if args.small else SETS
    data_dir = args.data / "small" if args.small else args.data
    data_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, (ranks, size_mb, distinct) in sets.items():
        started = time.perf_counter()
        built[name] = build(data_dir, name, ranks, size_mb, distinct, args.build_jobs)
        print(f"{name}: {ranks} x {built[name]['largest_mb']:.1f} MB ready ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
    flat_few = FLAT_FEW_SMALL if args.small else FLAT_FEW
    few = first_ranks(data_dir, built["flat"], flat_few)
    if args.build_only:
        return 0

    print(machine(), flush=True)
    table, rows = Table(args.timeout), {}
    floor = measure([sys.executable, "-c", FLOOR_SCRIPT])
    print(f"for scale: a Python process that only imports what the command imports before reading a trace "
          f"(pandas, pyarrow, traceattr) peaks at {floor['driver_mb']:.0f} MiB RSS ({floor['wall_s']:.2f} s)", flush=True)
    caches = data_dir / "caches"
    shutil.rmtree(caches, ignore_errors=True)
    for size, name in (("200", "one200"), ("1000", "one1000")):
        data = built[name]
        trace = data["folder"] / "rank0.pt.trace.json"
        label = f"1 x {data['largest_mb']:,.0f} MB"
        env = {"TRACEATTR_CACHE_DIR": str(caches / name), "COLUMNS": "160"}
        rows[f"cold{size}"] = table.traceattr(label, trace, data, env=env, what="summarize, cold (fresh cache)")
        rows[f"cached{size}"] = table.traceattr(label, trace, data, env=env,
                                                what="summarize again (cached answer)")
    for name in ("eight", "sixtyfour"):
        data = built[name]
        for jobs in (1, 2):
            rows[f"{name}{jobs}"] = table.traceattr(f"{len(data['busy_ns'])} x {data['largest_mb']:,.0f} MB",
                                                    data["folder"], data, "--no-cache", "--jobs", str(jobs))
    from distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as cluster:
        for key, data in (("flat_few", few), ("flat_all", built["flat"])):
            rows[key] = table.traceattr(f"{len(data['busy_ns'])} x {data['largest_mb']:,.0f} MB, LocalCluster 2 "
                                        "workers", data["folder"], data, "--no-cache", "--scheduler",
                                        cluster.scheduler_address)
        for key, data in (("rank_few", few), ("rank_all", built["flat"])) if args.by_rank else ():
            rows[key] = table.traceattr(f"{len(data['busy_ns'])} x {data['largest_mb']:,.0f} MB, LocalCluster 2 "
                                        "workers", data["folder"], data, "--no-cache", "--by", "rank", "--scheduler",
                                        cluster.scheduler_address)
        for key, data in (("api_few", few), ("api_all", built["flat"])) if args.api else ():
            command = [sys.executable, "-c", MAPREDUCE_SCRIPT, str(data["folder"]), "/dev/stdout",
                       cluster.scheduler_address]
            rows[key] = table.traceattr(f"{len(data['busy_ns'])} x {data['largest_mb']:,.0f} MB, LocalCluster 2 "
                                        "workers", data["folder"], data, command=command,
                                        what="traceattr.summarize(path, executor=Client) (Python API)")
    if not args.skip_hta:
        data = built["one200"]
        rows["hta200"] = table.hta(f"1 x {data['largest_mb']:,.0f} MB", data["folder"], data)
    print(HEADER)
    for row in table.rows:
        print(Table.line(row))
    print()
    print("\n".join(goals(rows, flat_few, len(built["flat"]["busy_ns"]), floor["driver_mb"])))
    print(f"\nfinished {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}")
    shutil.rmtree(caches, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
