"""The command's reduce replayed over saved per-file aggregates: the driver's memory at each phase in seconds,
where benchmarks/driver_phases.py maps every file again (100 s at 1024 x 10 MB). Session 9's changes were
found with it (benchmarks/RESULTS.md); confirm a change with driver_phases.py, which runs the real thing.

    python3 benchmarks/driver_replay.py save FOLDER OUT [--by-rank]   # map every file once, pickle each aggregate
    python3 benchmarks/driver_replay.py run OUT N [--per-rank | --by-rank | --api [--opt-in]]

`run` reduces the first N saved aggregates as `traceattr summarize --scheduler` does (the driver only reduces:
small_arrays_returned), then the check line, the table and the header, and prints the RSS at each phase with
the peak since the last one (sampled every 5 ms). `--by-rank` (both steps): `summarize --by rank`'s plan and
table (the collectives matched, the straggler's files mapped again in a process pool). `--api`: what
`traceattr.summarize(path, executor=client)` does with aggregates saved without --by-rank (the per-rank
kernel table, no check line) in a library caller's process, whose allocator is left as it is unless
`--opt-in` (traceattr.allocator.return_freed_memory() first, as docs/scale.md suggests). The aggregates are
read one at a time from their files, so the replay holds what the driver holds. What it leaves out: Dask's
client and its messages.
"""

from __future__ import annotations

import sys

from traceattr.allocator import return_freed_memory

if "--api" not in sys.argv or "--opt-in" in sys.argv:
    return_freed_memory()       # as the command does, before pyarrow loads

import functools  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402

import psutil  # noqa: E402

from traceattr.allocator import small_arrays_returned  # noqa: E402
from traceattr.analysis import summary_plan as M  # noqa: E402
from traceattr.analysis import check_plan  # noqa: E402
from traceattr.engine.runner import Runner  # noqa: E402
from traceattr.io.discover import find_trace_files  # noqa: E402

PLAN = M.Plan(by="kernel", extracts=(check_plan.EXTRACT,))     # summarize's plan (run_tables)


def _rank_plan() -> M.Plan:
    from traceattr.analysis import multirank_plan     # summarize --by rank's plan (comm_report_runs)
    return M.Plan(by="rank", extracts=(multirank_plan.COMM_EXTRACT, check_plan.EXTRACT_WITHOUT_COMM))


def _save_one(numbered: tuple[int, str], out: str, by_rank: bool) -> None:
    index, path = numbered
    with open(os.path.join(out, f"{index:06d}.pkl"), "wb") as file:
        pickle.dump(M.map_file(path, plan=_rank_plan() if by_rank else PLAN), file, protocol=5)


def save(folder: str, out: str, by_rank: bool) -> None:
    os.makedirs(out, exist_ok=True)
    paths = [str(path) for path in find_trace_files(folder, [])]
    with Pool(2) as pool:
        pool.map(functools.partial(_save_one, out=out, by_rank=by_rank), list(enumerate(paths)), chunksize=8)
    print(f"{len(paths)} aggregates in {out}")


def run(out: str, count: int, per_rank: bool, by_rank: bool, api: bool) -> None:
    files = sorted(Path(out).glob("*.pkl"))[:count]
    process, samples, marks, done = psutil.Process(), [], [], threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(process.memory_info().rss)
            time.sleep(0.005)

    def mark(name: str) -> None:
        marks.append((name, process.memory_info().rss, len(samples)))

    def aggregates():
        for number, path in enumerate(files, 1):
            with open(path, "rb") as file:
                aggregate = pickle.load(file)
            if api:
                aggregate.extracts = {}     # the API's plan has no check
            yield aggregate
            if number in (64, len(files)):
                mark(f"{number} piled")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    mark("start")
    plan, runner = _rank_plan() if by_rank else PLAN, Runner(2, None, None, False)
    if api:         # summary_plan.summarize_files: reduce_path, then the table
        with small_arrays_returned():
            reduced = M.reduce_files(aggregates())
        mark("reduced")
        table = M.table_of(reduced, "kernel")
        mark("table")
    else:
        with small_arrays_returned():
            reduced = M.reduce_files(aggregates(), extracts=plan.extracts)
            mark("reduced")
            if by_rank:         # comm_report_runs' order: the table, then the check line
                from traceattr.analysis import multirank_plan
                table = multirank_plan.comm_table(reduced, runner, "rank")
                mark("table")
                check = check_plan.check_line(reduced, runner, comm=reduced.extracts[multirank_plan.COMM].frame)
                mark("check")
            else:
                check = check_plan.check_line(reduced, runner)
                mark("check")
                if per_rank:
                    table = M.table_of(reduced, "kernel")
                else:
                    from traceattr.analysis.across import across_ranks
                    table = across_ranks(M.table_of(reduced, "kernel", coded=True), None)
                mark("table")
            M.header_for(reduced, table, plan.by, runner, check=check)
            mark("header")
    done.set()
    sampler.join()
    since = 0
    for name, rss, at in marks:
        peak = max(samples[since:at + 1] or [rss])
        print(f"{name:12s} RSS {rss / 2**20:7.1f} MB   peak since the last mark {peak / 2**20:7.1f} MB")
        since = at
    print(f"peak {max(samples) / 2**20:.1f} MB over {len(files)} files, {len(table)} rows")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "save":
        save(sys.argv[2], sys.argv[3], "--by-rank" in sys.argv[4:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), "--per-rank" in sys.argv[4:], "--by-rank" in sys.argv[4:],
            "--api" in sys.argv[4:])
    else:
        sys.exit(__doc__)
