"""Cached answers: how long a repeated `traceattr summarize` takes, next to a cold one and the other cache layers.

    python3 benchmarks/bench_cached.py                 # the 200 MB trace of bench_load.py, 5 runs each
    python3 benchmarks/bench_cached.py --size-mb 50 --runs 10

Each row is a whole subprocess (`python -m traceattr.cli ...`), wall clock, with a fresh cache folder for the
cold row: cold (decodes, fills the cache), repeated (replays the stored answer: no pandas/pyarrow/rich),
another terminal width (no stored answer for it: the finished table is read with pandas and rendered), another
level (`--by category`: the decoded tables are read, the table computed), `--help` / `--version`, and for
scale a bare interpreter and one that imports pyarrow or pandas.
Prints a markdown table (median and fastest of the runs) and the modules a repeated run imports.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import build  # noqa: E402  (the same trace as the load benchmark)


def wall(command: list[str], env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trace, _, info = build(args.size_mb)
    cache = Path(tempfile.mkdtemp(prefix="traceattr-bench-cache-"))
    env = {**os.environ, "TRACEATTR_CACHE_DIR": str(cache), "COLUMNS": "160"}
    cli = [sys.executable, "-m", "traceattr.cli"]
    summarize = cli + ["summarize", str(trace), "-q"]
    print(f"trace: {trace.name}, {trace.stat().st_size / 1e6:.0f} MB, {info.get('kernels', 0):,} kernels; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", file=sys.stderr)
    rows = [("cold (fresh cache folder)", [wall(summarize, env)])]
    imports = subprocess.run([sys.executable, "-X", "importtime", *summarize[1:]], capture_output=True,
                             text=True, env=env).stderr       # a repeated run: what does it import?
    heavy = sorted(set(re.findall(r"\|\s+(pandas|pyarrow|numpy|rich|msgspec)(?:\.|$)", imports, re.M)))
    cases = [
        ("repeated (stored answer replayed)", summarize, env),
        ("another width (finished table read with pandas)", summarize, None),
        ("another level, --by category (decoded tables read)", summarize + ["--by", "category"], None),
        ("traceattr --help", cli + ["--help"], env),
        ("traceattr --version", cli + ["--version"], env),
        ("for scale: python -c pass", [sys.executable, "-c", "pass"], env),
        ("for scale: python -c 'import pyarrow'", [sys.executable, "-c", "import pyarrow"], env),
        ("for scale: python -c 'import pandas'", [sys.executable, "-c", "import pandas"], env),
    ]
    for label, command, case_env in cases:
        times = []
        for run in range(args.runs):
            if case_env is None:          # no stored answer may serve these: a new width, a fresh level each run
                shutil.rmtree(cache / "answers", ignore_errors=True)
                if "category" in command:
                    shutil.rmtree(cache / "results", ignore_errors=True)
            times.append(wall(command, {**env, "COLUMNS": str(170 + run)} if case_env is None else case_env))
        rows.append((label, times))
    print(f"| run ({args.size_mb} MB trace) | median s | fastest s | runs |\n|---|---|---|---|")
    for label, times in rows:
        print(f"| {label} | {statistics.median(times):.3f} | {min(times):.3f} | {len(times)} |")
    print(f"\nheavy modules imported by a repeated run: {', '.join(heavy) or 'none'}; load average "
          f"{os.getloadavg()[0]:.2f} at the end", file=sys.stderr)
    shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
