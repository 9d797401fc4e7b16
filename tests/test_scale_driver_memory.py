"""The map-reduce driver stays flat in the rank count: `traceattr.summarize(path)` over 32 and then 320 small
ranks in one subprocess (a 2-process pool; imports, pool start-up and the allocators' first pages are paid by
the first run), the driver's peak RSS after each. What may grow is what the output itself holds per file
(docs/scale.md, "Driver memory"): the files table's row (path, device properties, metadata) and the table's
rows of each rank; the rest must not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from traceattr.builder import TraceSpec, write_trace

SMALL, LARGE = 32, 320
# per added file: the files table's text (~5 KB here: device properties and metadata with distributedInfo,
# held by the table and by the facts it is built from), the table's 11 rows of that rank, allocator slack.
# Measured on the 2-core VM: 36 KB per file; 68-71 KB before the driver stopped keeping each file's host
# facts as an arrow table (16 KB a file) and stacking empty tables per file
BOUND_PER_FILE = 50 * 1024
DRIVER = """
import json, sys
import traceattr
found = []
for folder in sys.argv[1:]:
    table = traceattr.summarize(folder, by="kernel", jobs=2, cache=False)
    # VmHWM: the kernel's exact peak of this process (the pool workers are other processes), which sampling
    # RSS from outside could only underestimate
    hwm = [int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
    found.append({"self_ns": int(table["self_ns"].sum()), "ranks": int(table["rank"].nunique()), "hwm": hwm})
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


def test_driver_memory_is_flat_in_the_rank_count(tmp_path):
    busy = _ranks(tmp_path / "large", LARGE)
    (tmp_path / "small").mkdir()
    for rank in range(SMALL):
        (tmp_path / "small" / f"rank{rank}.pt.trace.json").hardlink_to(tmp_path / "large" / f"rank{rank}.pt.trace.json")
    done = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "small"), str(tmp_path / "large")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    small, large = json.loads(done.stdout)
    # the tables are whole and exact: every rank, Σ self == busy
    assert (small["ranks"], small["self_ns"]) == (SMALL, SMALL * busy)
    assert (large["ranks"], large["self_ns"]) == (LARGE, LARGE * busy)
    growth = large["hwm"] - small["hwm"]
    assert growth < BOUND_PER_FILE * (LARGE - SMALL), (
        f"driver peak {small['hwm'] / 2**20:.1f} MB at {SMALL} ranks, {large['hwm'] / 2**20:.1f} MB at {LARGE}: "
        f"{growth / (LARGE - SMALL) / 1024:.1f} KB per added file")
