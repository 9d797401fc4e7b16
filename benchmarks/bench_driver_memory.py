"""The driver's peak memory against the import floor, and its growth from 64 to 1,024 ranks (issue 35, point 6).

Goal: the driver's peak RSS is at most the import floor (the interpreter with the driver's imports, measured
in the same run) plus the largest file's JSON size, and grows by at most 16 MB from 64 to 1,024 ranks, for
every `--by` level, `check` and the Python API.

    python3 benchmarks/bench_driver_memory.py                       # 64 and 1,024 ranks, --jobs 2
    python3 benchmarks/bench_driver_memory.py --ranks 32 256 --dir /tmp/dm   # keep the sets there

Each rank is one builder trace (traceattr.builder.build_multirank: 2 steps of compute kernels and one
all-reduce across all ranks per step, CPU ops and annotations) so every level has rows; each command is a
whole process (`--no-cache --jobs 2 -q`, csv to /dev/null) whose own VmHWM is read at exit (pool workers
are other processes). The Python API rows run `traceattr.<function>(path, jobs=2, cache=False)` in a fresh
interpreter. The import floor is a process that imports every module the measured drivers imported (a
first pass gathers them) and runs nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LEVELS = ("kernel", "category", "rank", "collective", "op", "op_stack", "module", "annotation", "step")
API = ("summarize", "attribute", "collectives", "imbalance")
PEAK = ("import atexit, os, sys\n"
        "def _peak():\n"
        "    kb = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "    sys.stderr.write(f'\\nVMHWM_KB {kb}\\n')\n"
        "    if os.environ.get('MODULES_TO'):\n"
        "        open(os.environ['MODULES_TO'], 'a').write('\\n'.join(sys.modules) + '\\n')\n"
        "atexit.register(_peak)\n")
CLI = PEAK + "from traceattr.entry import main\nsys.argv[0] = 'traceattr'\nsys.exit(main())\n"
# every module some measured driver imported (gathered in a first pass), imported and nothing run
FLOOR = PEAK + ("import importlib\n"
                "for name in open(sys.argv[1]).read().split():\n"
                "    try:\n"
                "        importlib.import_module(name)\n"
                "    except Exception:\n"
                "        pass\n")
CALL = PEAK + ("import traceattr\n"
               "function, path = sys.argv[1], sys.argv[2]\n"
               "getattr(traceattr, function)(path, jobs=2, cache=False)\n")


def build(folder: Path, ranks: int) -> int:
    """The largest file's size in bytes; the set is built once per folder."""
    from traceattr.builder.multirank import MultiRankSpec, build_multirank
    marker = folder / ".built"
    if not marker.exists():
        folder.mkdir(parents=True, exist_ok=True)
        build_multirank(MultiRankSpec(ranks=ranks, steps=2, compute_kernels=2, seed=1), folder)
        marker.write_text(str(ranks))
    return max(p.stat().st_size for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))


def peak_mib(code: str, *args: str, modules_to: str = "") -> tuple[float, int]:
    """(VmHWM MiB, exit code) of one interpreter running `code` with args."""
    env = dict(os.environ, MODULES_TO=modules_to) if modules_to else None
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    lines = [line for line in done.stderr.splitlines() if line.startswith("VMHWM_KB ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-2000:])
    return (int(lines[-1].split()[1]) / 1024 if lines else float("nan")), done.returncode


def commands(folder: Path) -> list[tuple[str, str, list[str]]]:
    common = ["--no-cache", "--jobs", "2", "-q"]
    rows = [(f"summarize --by {level}", CLI,
             ["summarize", str(folder), "--by", level, *common, "--format", "csv", "-o", os.devnull])
            for level in LEVELS]
    rows.append(("check", CLI, ["check", str(folder), *common]))
    rows += [(f"traceattr.{name}(path)", CALL, [name, str(folder)]) for name in API]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs=2, default=(64, 1024))
    parser.add_argument("--dir", type=Path, default=None, help="keep the built sets here")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="driver_memory_"))
    small, large = args.ranks
    sizes = {n: build(root / f"ranks{n}", n) for n in (small, large)}
    modules = root / "modules.txt"
    modules.write_text("")
    for _name, code, argv in commands(root / f"ranks{small}"):       # what the drivers import
        peak_mib(code, *argv, modules_to=str(modules))
    names = sorted({n for n in modules.read_text().split() if not n.startswith("__main__")})
    modules.write_text("\n".join(names))
    floor, _ = peak_mib(FLOOR, str(modules))
    load = os.getloadavg()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {load[0]:.2f}, "
          f"python {sys.version.split()[0]}, import floor {floor:.1f} MiB, largest file "
          f"{sizes[small] / 2**20:.2f} / {sizes[large] / 2**20:.2f} MiB")
    print(f"| command | {small} ranks MiB | {large} ranks MiB | growth MiB | peak - floor - largest file "
          f"({large}) MiB | exit |")
    print("|---|---:|---:|---:|---:|---|")
    for name, code, argv in commands(root / f"ranks{small}"):
        first, rc1 = peak_mib(code, *argv)
        second, rc2 = peak_mib(code, *[a.replace(f"ranks{small}", f"ranks{large}") for a in argv])
        over = second - floor - sizes[large] / 2**20
        print(f"| {name} | {first:.1f} | {second:.1f} | {second - first:+.1f} | {over:+.1f} | {rc1}/{rc2} |",
              flush=True)
    print(json.dumps({"end_load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
