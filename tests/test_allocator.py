"""The command's allocator settings (traceattr/allocator.py), in fresh processes: pyarrow reads its pool
setting once, when it loads."""

import json
import os
import subprocess
import sys

from traceattr.allocator import MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES

SCRIPT = """
import json, os
from traceattr.allocator import return_freed_memory
return_freed_memory()
import pyarrow as pa
print(json.dumps([pa.default_memory_pool().backend_name, os.environ["MALLOC_MMAP_THRESHOLD_"],
                  os.environ["MALLOC_TRIM_THRESHOLD_"]]))
"""


def _run(**env: str) -> list:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**clean, **env}, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_system_allocator_and_fixed_mmap_threshold_for_the_process_and_its_workers():
    assert _run() == ["system", str(MMAP_THRESHOLD_BYTES), str(TRIM_THRESHOLD_BYTES)]


def test_a_users_own_settings_win():
    assert _run(ARROW_DEFAULT_MEMORY_POOL="mimalloc", MALLOC_MMAP_THRESHOLD_="65536") == [
        "mimalloc", "65536", str(TRIM_THRESHOLD_BYTES)]
    assert _run(MALLOC_TRIM_THRESHOLD_="131072") == ["system", str(MMAP_THRESHOLD_BYTES), "131072"]


TRIM = """
import json
import numpy as np
from traceattr.allocator import TRIM_AFTER_BYTES, _malloc_trim, give_back_free_heap, return_freed_memory
return_freed_memory()             # the command's fixed mmap threshold: 512 KB blocks come from the heap
def rss():
    return [int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmRSS")][0]
blocks = [np.ones(1 << 16) for _ in range(200)]       # 200 x 512 KB, then one more that pins the heap's top
pin = np.ones(1 << 16)
del blocks
held = rss()
give_back_free_heap(TRIM_AFTER_BYTES - 1)             # below the floor: nothing happens
kept = rss()
give_back_free_heap(100 << 20)
print(json.dumps({"glibc": _malloc_trim() is not None, "held": held, "kept": kept, "after": rss()}))
"""


def test_give_back_free_heap_returns_the_holes_only_after_a_large_free():
    found = json.loads(subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True,
                                      check=True).stdout)
    if not found["glibc"]:
        return                                          # other C libraries: a no-op by design
    assert found["held"] - found["kept"] < (20 << 20), found     # 100 MB of holes stay below the floor
    assert found["kept"] - found["after"] > (60 << 20), found    # and are handed back above it
