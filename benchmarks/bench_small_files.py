"""The fixed cost per file: many one-kernel trace files, each command a whole `traceattr` process.

Goal (benchmarks/RESULTS.md): about 2 ms of CPU per file on top of decoding its bytes, so 20,000 small files
summarize in under 40 s with `--jobs 2`. Writes N files of one launch and one kernel each (ranks x windows,
as a job that profiled many short windows leaves them) into a temporary folder, then runs

    traceattr summarize DIR --no-cache --jobs 2 -q --format csv -o /dev/null
    traceattr summarize DIR --no-cache --jobs 2 -q --format csv -o /dev/null --by rank
    traceattr check DIR --no-cache --jobs 2 -q

and prints each one's wall time and CPU time (the process and its pool workers, from its rusage), in total
and per file, and the peak RSS of its largest process.

    python3 benchmarks/bench_small_files.py                      # 20,000 files: 1,000 ranks x 20 windows
    python3 benchmarks/bench_small_files.py --files 1000 --repeat 3
    python3 benchmarks/bench_small_files.py --dir /tmp/small     # keep (and reuse) the files there

PYTHONPATH picks the code under test (the console script imports traceattr as any program does).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "summarize": ["summarize", "{dir}", "--no-cache", "--jobs", "{jobs}", "-q", "--format", "csv", "-o", "/dev/null"],
    "summarize --by rank": ["summarize", "{dir}", "--no-cache", "--jobs", "{jobs}", "-q", "--format", "csv",
                            "-o", "/dev/null", "--by", "rank"],
    "check": ["check", "{dir}", "--no-cache", "--jobs", "{jobs}", "-q"],
}
BASE_US = 1_700_000_000_000_000      # the first window's start (µs, as the profiler writes it)
WINDOW_US = 10_000                   # windows of a rank are 10 ms apart


def one_file(rank: int, window: int, ranks: int) -> str:
    """A trace of one window: one launch on the host, the kernel it launched on device 0."""
    base = BASE_US + window * WINDOW_US
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": base, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": base + 10, "dur": 100,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
    ]
    return json.dumps({"distributedInfo": {"rank": rank, "world_size": ranks, "backend": "nccl"},
                       "traceEvents": events})


def write_files(folder: Path, ranks: int, windows: int) -> int:
    """rank{r}_w{w}.pt.trace.json for every rank and window (kept when the folder already holds them all)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"rank{r}_w{w}.pt.trace.json" for r in range(ranks) for w in range(windows)]
    present = {p.name for p in folder.iterdir()}
    if present == set(names):
        return len(names)
    for name in present:
        (folder / name).unlink()
    for r in range(ranks):
        for w in range(windows):
            (folder / f"rank{r}_w{w}.pt.trace.json").write_text(one_file(r, w, ranks))
    return len(names)


def traceattr_command() -> list[str]:
    script = shutil.which("traceattr") or str(Path(sys.executable).with_name("traceattr"))
    if os.path.exists(script):
        return [sys.executable, script]
    return [sys.executable, "-c", "import sys; from traceattr.entry import main; sys.exit(main())"]


def timed(argv: list[str]) -> tuple[float, float, float, int, str]:
    """(wall s, CPU s, peak RSS MiB, exit code, stderr's tail) of one command. CPU and peak come from its own
    rusage (os.wait4): the process and every child it waited for (the pool's workers), the peak being that
    of the largest one of them."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)      # reaped here: Popen must not wait again
        err.seek(0)
        tail = err.read()[-500:].decode("utf-8", "replace")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000, help="files to write (default 20,000)")
    parser.add_argument("--windows", type=int, default=20, help="windows per rank (default 20)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command (each printed)")
    parser.add_argument("--only", choices=sorted(COMMANDS), action="append", help="run only these commands")
    parser.add_argument("--dir", type=Path, help="write the files here and keep them (default: a temporary folder)")
    args = parser.parse_args(argv)
    ranks = max(1, args.files // args.windows)
    windows = min(args.windows, args.files)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="traceattr-small-"))
    try:
        started = time.perf_counter()
        files = write_files(folder, ranks, windows)
        print(f"{files:,} files ({ranks:,} ranks x {windows} windows, one kernel each) in {folder}, "
              f"written in {time.perf_counter() - started:.1f} s")
        import traceattr                                     # noqa: E402  (the package under test, named)
        print(f"traceattr: {traceattr.__file__}")
        print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
              f"Python {sys.version.split()[0]}, load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print()
        print("| command | files | wall s | CPU s | wall ms / file | CPU ms / file | peak RSS MiB | load before |")
        print("|---|---|---|---|---|---|---|---|")
        failed = 0
        for name, template in COMMANDS.items():
            if args.only and name not in args.only:
                continue
            argv = traceattr_command() + [part.format(dir=folder, jobs=args.jobs) for part in template]
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                wall, cpu, peak, code, err = timed(argv)
                # check exits by its verdict: 1 (warn) here, as no op encloses the launch (unlinked)
                if code not in ((0, 1) if name == "check" else (0,)):
                    failed += 1
                    print(f"{name}: exit {code}: {err}", file=sys.stderr)
                print(f"| `{name} --no-cache --jobs {args.jobs}` | {files:,} | {wall:.1f} | {cpu:.1f} | "
                      f"{1e3 * wall / files:.2f} | {1e3 * cpu / files:.2f} | {peak:.0f} | {load:.2f} |", flush=True)
        print()
        print(f"load average after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 1 if failed else 0
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
