"""The map-reduce driver stays flat in the rank count: `traceattr.summarize(path)` (a 2-process pool) and the
command's map-reduce on a Dask LocalCluster, each over 32 and then 320 small ranks in one subprocess
(imports, pool or client start-up and the allocators' first pages are paid by the first run), the driver's
peak RSS after each. What may grow is what the output itself holds per file (docs/scale.md, "Driver
memory"): the files table's row and the table's rows of each rank; the rest must not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from traceattr.builder import TraceSpec, write_trace

SMALL, LARGE = 32, 320
# per added file: the files table's row, the table's 11 rows of that rank, allocator slack. Measured on the
# 2-core VM: 36 KB per file; 68-71 KB before the driver stopped keeping each file's host facts as an arrow
# table (16 KB a file) and stacking empty tables per file
BOUND_PER_FILE = 50 * 1024
# the command's map-reduce (`traceattr summarize PATH --scheduler`: with the check line's extract, on a
# 2-worker Dask LocalCluster): a Dask client unpickles arrays as views into the message they came in, so
# each file's check extract and header facts, held until every file is in, kept its whole message (~45 KB a
# file here before the driver copied what it keeps, ~22 KB after)
COMMAND_BOUND_PER_FILE = 32 * 1024
DRIVER = """
import json, sys
if sys.argv[1] == "command":           # the command's allocator settings, before pyarrow loads
    from traceattr.allocator import return_freed_memory
    return_freed_memory()
import traceattr
from traceattr.analysis.run_tables import report_runs
found = []
for folder in sys.argv[3:]:
    if sys.argv[1] == "api":
        table = traceattr.summarize(folder, by="kernel", jobs=2, cache=False)
    else:
        # across: the command's table over all ranks (one row per kernel), as `traceattr summarize` gives
        (report,) = report_runs(folder, by="kernel", jobs=2, cache=False, scheduler=sys.argv[2], across=True)
        assert report.header["check"], report.header
        table = report.table
    # VmHWM: the kernel's exact peak of this process (the pool workers are other processes), which sampling
    # RSS from outside could only underestimate
    hwm = [int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
    ranks = table.attrs["across_ranks"] if "ranks" in table else table["rank"].nunique()
    found.append({"self_ns": int(table["self_ns"].sum()), "ranks": int(ranks), "hwm": hwm})
print(json.dumps(found))
"""


def _ranks(folder: Path, ranks: int) -> int:
    """`ranks` files that differ only in distributedInfo's rank (rank 0's events on every rank: the
    builder's truth holds for each); returns one rank's exact busy ns."""
    folder.mkdir()
    spec = TraceSpec(ranks=ranks, layers=1, ops_per_module=1, kernels_per_op=2, steps=2)
    truth = write_trace(folder / "rank0.pt.trace.json", spec, 0)
    text = (folder / "rank0.pt.trace.json").read_bytes()
    field = b'"rank": 0, "world_size"'
    assert text.count(field) == 1
    for rank in range(1, ranks):
        (folder / f"rank{rank}.pt.trace.json").write_bytes(text.replace(field, b'"rank": %d, "world_size"' % rank))
    return sum(device.busy_ns for device in truth.devices.values())


@pytest.fixture(scope="module")
def rank_sets(tmp_path_factory):
    """(small folder, large folder, one rank's busy ns): the small ranks are hard links to the large's."""
    root = tmp_path_factory.mktemp("ranks")
    busy = _ranks(root / "large", LARGE)
    (root / "small").mkdir()
    for rank in range(SMALL):
        (root / "small" / f"rank{rank}.pt.trace.json").hardlink_to(root / "large" / f"rank{rank}.pt.trace.json")
    return root / "small", root / "large", busy


@pytest.fixture(scope="module")
def scheduler():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as cluster:
        yield cluster.scheduler_address


@pytest.mark.parametrize("mode, bound", [("api", BOUND_PER_FILE), ("command", COMMAND_BOUND_PER_FILE)])
def test_driver_memory_is_flat_in_the_rank_count(rank_sets, mode, bound, request):
    small_folder, large_folder, busy = rank_sets
    address = request.getfixturevalue("scheduler") if mode == "command" else "-"
    done = subprocess.run([sys.executable, "-c", DRIVER, mode, address, str(small_folder), str(large_folder)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    small, large = json.loads(done.stdout)
    # the tables are whole and exact: every rank, Σ self == busy
    assert (small["ranks"], small["self_ns"]) == (SMALL, SMALL * busy)
    assert (large["ranks"], large["self_ns"]) == (LARGE, LARGE * busy)
    growth = large["hwm"] - small["hwm"]
    print(f"{mode}: {growth / (LARGE - SMALL) / 1024:.1f} KB per added file")
    assert growth < bound * (LARGE - SMALL), (
        f"{mode}: driver peak {small['hwm'] / 2**20:.1f} MB at {SMALL} ranks, {large['hwm'] / 2**20:.1f} MB at "
        f"{LARGE}: {growth / (LARGE - SMALL) / 1024:.1f} KB per added file")
