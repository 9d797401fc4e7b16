"""The driver's peak memory against its import floor, and its growth from 64 to 1,024 ranks (issue 35, point 6).

Goal: the driver's peak RSS is at most the import floor (the interpreter with the driver's imports, measured
in the same run) plus the largest file's JSON size, and grows by at most 16 MB from 64 to 1,024 ranks, for
every `--by` level, `check` and the Python API.

    python3 benchmarks/bench_driver_memory.py                       # 64 and 1,024 ranks, --jobs 2
    python3 benchmarks/bench_driver_memory.py --ranks 32 256 --dir /tmp/dm   # keep the sets there
    python3 benchmarks/bench_driver_memory.py --only check "--by rank"       # only the commands named so

Each rank is one builder trace (traceattr.builder.build_multirank: 2 steps of compute kernels and one
all-reduce across all ranks per step, CPU ops and annotations) so every level has rows; each command is a
whole process (`--no-cache --jobs 2 -q`, csv to /dev/null) whose own VmHWM is read at exit (pool workers
are other processes). The Python API rows run `traceattr.<function>(path, jobs=2, cache=False)` in a fresh
interpreter.

The floor is per command and per set, measured right after it: an interpreter that imports every module
that command's process held at its exit (its sys.modules, in import order), with the command's allocator
settings, and runs nothing. Peak and floor are split into anonymous memory (the heap, arrays, Python
objects: what the command holds) and file-backed pages (the shared libraries' code and data that the run
executes, paged in from the page cache and shared with every process mapping them): the split at the peak
comes from sampling /proc/self/status every 2 ms, so it is the largest sample, within a few hundred KB of
VmHWM.
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
# at exit: VmHWM, the largest sample of RSS with its anonymous and file-backed parts, and sys.modules
PROBE = ("import atexit, json, os, sys, threading, time\n"
         "def _status():\n"
         "    return {k: int(v.split()[0]) for k, _, v in (l.partition(':') for l in open('/proc/self/status'))\n"
         "            if k in ('VmHWM', 'VmRSS', 'RssAnon', 'RssFile')}\n"
         "_peak = {'VmRSS': 0}\n"
         "def _sample():\n"
         "    while True:\n"
         "        found = _status()\n"
         "        if found['VmRSS'] > _peak['VmRSS']:\n"
         "            _peak.update(found)\n"
         "        time.sleep(0.002)\n"
         "threading.Thread(target=_sample, daemon=True).start()\n"
         "def _report():\n"
         "    _sample_once = _status()\n"
         "    if _sample_once['VmRSS'] > _peak['VmRSS']:\n"
         "        _peak.update(_sample_once)\n"
         "    sys.stderr.write('\\nPROBE ' + json.dumps({'hwm': _status()['VmHWM'], 'anon': _peak.get('RssAnon', 0),\n"
         "                     'file': _peak.get('RssFile', 0)}) + '\\n')\n"
         "    if os.environ.get('MODULES_TO'):\n"
         "        open(os.environ['MODULES_TO'], 'w').write('\\n'.join(n for n in sys.modules if n != '__main__'))\n"
         "atexit.register(_report)\n")
CLI = PROBE + "from traceattr.entry import main\nsys.argv[0] = 'traceattr'\nsys.exit(main())\n"
CALL = PROBE + ("import traceattr\n"
                "function, path = sys.argv[1], sys.argv[2]\n"
                "getattr(traceattr, function)(path, jobs=2, cache=False)\n")
# one command's modules (its sys.modules at exit, in import order), imported with its allocator settings
FLOOR = PROBE + ("import importlib\n"
                 "if sys.argv[2] == 'cli':          # the command sets its allocator first (cli.main)\n"
                 "    from traceattr.allocator import return_freed_memory\n"
                 "    return_freed_memory()\n"
                 "for name in open(sys.argv[1]).read().split():\n"
                 "    try:\n"
                 "        importlib.import_module(name)\n"
                 "    except Exception:\n"
                 "        pass\n")


def build(folder: Path, ranks: int) -> int:
    """The largest file's size in bytes; the set is built once per folder."""
    from traceattr.builder.multirank import MultiRankSpec, build_multirank
    marker = folder / ".built"
    if not marker.exists():
        folder.mkdir(parents=True, exist_ok=True)
        build_multirank(MultiRankSpec(ranks=ranks, steps=2, compute_kernels=2, seed=1), folder)
        marker.write_text(str(ranks))
    return max(p.stat().st_size for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))


def probed(code: str, *args: str, modules_to: str = "") -> dict:
    """{hwm, anon, file} in MiB (VmHWM; the anonymous and file-backed parts of the largest RSS sample) and
    the exit code of one interpreter running `code` with args."""
    env = dict(os.environ, MODULES_TO=modules_to) if modules_to else None
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    lines = [line for line in done.stderr.splitlines() if line.startswith("PROBE ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-2000:])
    found = json.loads(lines[-1][len("PROBE "):]) if lines else {"hwm": 0, "anon": 0, "file": 0}
    return {key: value / 1024 for key, value in found.items()} | {"rc": done.returncode}


def commands(folder: Path) -> list[tuple[str, str, str, list[str]]]:
    """(name, code, floor kind, argv) of every measured driver."""
    common = ["--no-cache", "--jobs", "2", "-q"]
    rows = [(f"summarize --by {level}", CLI, "cli",
             ["summarize", str(folder), "--by", level, *common, "--format", "csv", "-o", os.devnull])
            for level in LEVELS]
    rows.append(("check", CLI, "cli", ["check", str(folder), *common]))
    rows += [(f"traceattr.{name}(path)", CALL, "api", [name, str(folder)]) for name in API]
    return rows


def measured(code: str, kind: str, argv: list[str], modules: Path) -> tuple[dict, dict]:
    """(the command, its floor): the floor imports what this very run imported."""
    command = probed(code, *argv, modules_to=str(modules))
    return command, probed(FLOOR, str(modules), kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs=2, default=(64, 1024))
    parser.add_argument("--dir", type=Path, default=None, help="keep the built sets here")
    parser.add_argument("--only", nargs="*", default=None, help="commands whose name contains one of these")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="driver_memory_"))
    small, large = args.ranks
    sizes = {n: build(root / f"ranks{n}", n) for n in (small, large)}
    modules = root / "modules.txt"
    load = os.getloadavg()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {load[0]:.2f}, "
          f"python {sys.version.split()[0]}, largest file {sizes[small] / 2**10:.1f} / {sizes[large] / 2**10:.1f} KiB "
          f"({small} / {large} ranks). MiB; excess = peak - floor - largest file, split into anonymous / "
          "file-backed (at the peak sample against the floor's)")
    print(f"| command | floor {small} / {large} | peak {small} / {large} | growth | excess {small} | "
          f"excess {large} | anon / file {large} | exit |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, code, kind, argv in commands(root / f"ranks{small}"):
        if args.only is not None and not any(part in name for part in args.only):
            continue
        found = {}
        for ranks in (small, large):
            argv_here = [a.replace(f"ranks{small}", f"ranks{ranks}") for a in argv]
            found[ranks] = measured(code, kind, argv_here, modules)
        (first, floor1), (second, floor2) = found[small], found[large]
        over1 = first["hwm"] - floor1["hwm"] - sizes[small] / 2**20
        over2 = second["hwm"] - floor2["hwm"] - sizes[large] / 2**20
        print(f"| {name} | {floor1['hwm']:.1f} / {floor2['hwm']:.1f} | {first['hwm']:.1f} / {second['hwm']:.1f} | "
              f"{second['hwm'] - first['hwm']:+.1f} | {over1:+.1f} | {over2:+.1f} | "
              f"{second['anon'] - floor2['anon']:+.1f} / {second['file'] - floor2['file']:+.1f} | "
              f"{first['rc']}/{second['rc']} |", flush=True)
    print(json.dumps({"end_load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
