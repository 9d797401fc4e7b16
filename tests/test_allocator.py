"""The command's allocator settings (traceattr/allocator.py), in fresh processes: pyarrow reads its pool
setting once, when it loads."""

import json
import os
import subprocess
import sys

from traceattr.allocator import MMAP_THRESHOLD_BYTES

SCRIPT = """
import json, os
from traceattr.allocator import return_freed_memory
return_freed_memory()
import pyarrow as pa
print(json.dumps([pa.default_memory_pool().backend_name, os.environ["MALLOC_MMAP_THRESHOLD_"]]))
"""


def _run(**env: str) -> list:
    clean = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_MMAP_THRESHOLD_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**clean, **env}, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_system_allocator_and_fixed_mmap_threshold_for_the_process_and_its_workers():
    assert _run() == ["system", str(MMAP_THRESHOLD_BYTES)]


def test_a_users_own_settings_win():
    assert _run(ARROW_DEFAULT_MEMORY_POOL="mimalloc", MALLOC_MMAP_THRESHOLD_="65536") == ["mimalloc", "65536"]
