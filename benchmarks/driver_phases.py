"""The driver's RSS at each phase of one `traceattr summarize` on a 2-worker Dask LocalCluster: where the
driver's memory grows with the rank count (benchmarks/RESULTS.md, session 8, "phase-marked driver").

    python3 benchmarks/driver_phases.py FOLDER [summarize options, e.g. --by rank]

The cluster runs in a child process (its scheduler's state is not the driver's); this process is the
command's driver: it calls the CLI's main() with `--no-cache --scheduler ADDRESS`, samples its own RSS every
10 ms, and marks the reduce's phases by wrapping their functions. Prints the peak and the RSS at each mark
(and after 1, 64, 128, ... 1024 files have been piled).
"""

from __future__ import annotations

from traceattr.allocator import return_freed_memory

return_freed_memory()       # as the command does, before pyarrow loads

import functools  # noqa: E402
import multiprocessing  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import psutil  # noqa: E402

PILED = (1, 64, 128, 256, 512, 768, 1024)


def _cluster(ready, stop) -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        ready.put(cluster.scheduler_address)
        stop.wait()


def main() -> int:
    import traceattr.analysis.summary_plan as M
    import traceattr.analysis.check_plan as MC
    import traceattr.analysis.multirank_plan as MCO
    import traceattr.cli as cli

    marks: list[tuple[float, str]] = []
    samples: list[tuple[float, int]] = []

    def wrap(module, name: str) -> None:
        original = getattr(module, name)

        @functools.wraps(original)
        def marked(*args, **kwargs):
            marks.append((time.time(), name + " <"))
            result = original(*args, **kwargs)
            marks.append((time.time(), name + " >"))
            return result
        setattr(module, name, marked)

    for name in ("reduce_files", "table_of", "header_for"):
        wrap(M, name)
    wrap(MC, "check_report")
    for name in ("comm_table", "match_extract", "straggler_spans", "_map_split"):
        wrap(MCO, name)
    add, piled = M._Pile.update, [0]

    def counted(pile, index, aggregate):
        piled[0] += 1
        if piled[0] in PILED:
            marks.append((time.time(), f"{piled[0]} files piled"))
        return add(pile, index, aggregate)
    M._Pile.update = counted

    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    child = context.Process(target=_cluster, args=(ready, stop))
    child.start()
    address = ready.get(timeout=120)
    process, done = psutil.Process(), threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.time(), process.memory_info().rss))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.time()
    try:
        cli.main(["summarize", sys.argv[1], "--no-cache", "--format", "csv", "-o", "/dev/null", "--scheduler",
                  address, *sys.argv[2:]], standalone_mode=False)
    finally:
        done.set()
        sampler.join()
        stop.set()
        child.join(timeout=60)
    peak = max(samples, key=lambda s: s[1])
    print(f"peak {peak[1] / 2**20:.1f} MB at {peak[0] - start:.2f} s, wall {time.time() - start:.1f} s")
    for at, name in marks:
        rss = min(samples, key=lambda s: abs(s[0] - at))[1]
        print(f"{at - start:8.2f} s  {name:24s} {rss / 2**20:7.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
