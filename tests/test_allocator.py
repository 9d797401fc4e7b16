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
from traceattr.allocator import TRIM_AFTER_BYTES, _heap_free_bytes, _malloc_trim, give_back_free_heap, return_freed_memory
return_freed_memory()             # the command's fixed mmap threshold: 512 KB blocks come from the heap
def rss():
    return [int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmRSS")][0]
blocks = [np.ones(1 << 16) for _ in range(200)]       # 200 x 512 KB, then one more that pins the heap's top
pin = np.ones(1 << 16)
del blocks[::50]                                      # 2 MB of holes: under the floor
few_free, few_held = _heap_free_bytes(), rss()
give_back_free_heap()
few_kept = rss()
del blocks                                            # 100 MB of holes
held, free = rss(), _heap_free_bytes()
give_back_free_heap()
print(json.dumps({"glibc": _malloc_trim() is not None and free is not None, "few_free": few_free,
                  "floor": TRIM_AFTER_BYTES, "few_held": few_held, "few_kept": few_kept, "free": free,
                  "held": held, "after": rss()}))
"""


def test_give_back_free_heap_returns_the_holes_only_when_they_are_many():
    found = json.loads(subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True,
                                      check=True).stdout)
    if not found["glibc"]:
        return                                          # other C libraries: a no-op by design
    assert found["free"] > (90 << 20), found            # mallinfo2 sees the holes
    if found["few_free"] < found["floor"]:              # holes under the floor stay
        assert found["few_held"] - found["few_kept"] < (1 << 20), found
    assert found["held"] - found["after"] > (60 << 20), found    # and many are handed back


SMALL_FILES = """
import json
import numpy as np
from traceattr import allocator
from traceattr.allocator import FREED_PER_EVENT, TRIM_AFTER_BYTES, give_back_free_heap, return_freed_memory
return_freed_memory()
def rss():
    return [int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmRSS")][0]
give_back_free_heap()                                  # a look: what is free now is known
blocks = [np.ones(1 << 16) for _ in range(200)]
pin = np.ones(1 << 16)
del blocks                                            # 100 MB of holes, freed by no file's map
held = rss()
small = TRIM_AFTER_BYTES // FREED_PER_EVENT // 4       # a quarter of the events that could free the floor
give_back_free_heap(events=small)                      # a small file: the heap is not looked at
kept = rss()
give_back_free_heap(events=4 * small)                 # the small files since the last look could have
print(json.dumps({"glibc": allocator._malloc_trim() is not None, "held": held, "kept": kept, "after": rss()}))
"""


def test_small_files_look_at_the_heap_only_once_they_could_have_freed_the_floor():
    """mallinfo2 walks every free chunk (0.04 ms): a one-kernel file's three looks were 3% of its map. The
    files since the last look are counted; once they could have freed the floor, the heap is looked at and
    trimmed as ever."""
    found = json.loads(subprocess.run([sys.executable, "-c", SMALL_FILES], capture_output=True, text=True,
                                      check=True).stdout)
    if not found["glibc"]:
        return
    assert found["held"] - found["kept"] < (8 << 20), found        # not looked at: the holes stay
    assert found["kept"] - found["after"] > (60 << 20), found      # looked at once enough came: returned


REDUCE = """
import json, os, sys
import numpy as np
from traceattr.allocator import _malloc_trim, return_freed_memory, small_arrays_returned
if sys.argv[1] == "command":
    return_freed_memory()
warm = np.ones(1 << 17)       # glibc's own dynamic threshold rises past 1 MB when this 1 MB block is freed
del warm
def rss():
    return [int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmRSS")][0]
def holes():
    # 200 x 512 KB freed while one more pins the heap's top: heap holes, or unmapped when freed
    blocks = [np.ones(1 << 16) for _ in range(200)]
    pin = np.ones(1 << 16)
    before = rss()
    del blocks
    return before - rss(), pin
found = {"glibc": _malloc_trim() is not None}
with small_arrays_returned():
    found["inside"], pin1 = holes()
    read, write = os.pipe()
    if os.fork() == 0:        # a pool worker forked meanwhile decodes: the command's own threshold again
        os.write(write, str(holes()[0]).encode())
        os._exit(0)
    os.wait()
    found["forked"] = int(os.read(read, 64))
found["after"], pin2 = holes()
with small_arrays_returned(False):
    found["unwanted"], pin3 = holes()
print(json.dumps(found))
"""


def _reduce_run(kind: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    return json.loads(subprocess.run([sys.executable, "-c", REDUCE, kind], env=clean, capture_output=True,
                                     text=True, check=True).stdout)


def test_a_reducing_driver_returns_each_freed_array_then_the_threshold_comes_back():
    found = _reduce_run("command")
    if not found["glibc"]:
        return
    assert found["inside"] > (90 << 20), found          # 100 MB freed inside: every block was its own mapping
    assert found["after"] < (20 << 20), found           # the command's 4 MB threshold again: heap holes
    assert found["forked"] < (20 << 20), found          # and in a worker forked while it was lowered
    assert found["unwanted"] < (20 << 20), found        # a driver that decodes keeps the 4 MB threshold


def test_a_library_callers_allocator_is_left_alone():
    found = _reduce_run("library")
    if not found["glibc"]:
        return
    # glibc's own dynamic threshold (raised past 1 MB by then) is not lowered: the blocks stay heap holes
    assert found["inside"] < (20 << 20), found


def test_heap_free_bytes_reads_mallinfo_where_mallinfo2_is_missing():
    """glibc before 2.33 has only mallinfo (C ints): the fallback reads the same free bytes."""
    import ctypes
    from traceattr.allocator import _MallInfo, _heap_free_bytes, _libc
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo"):
        return                                          # other C libraries: nothing to read
    old = libc.mallinfo
    old.argtypes, old.restype = [], _MallInfo
    assert abs(int(old().fordblks) - _heap_free_bytes()) < (1 << 20)
