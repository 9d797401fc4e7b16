"""HTA's own loader against traceattr.interop.hta.trace_analysis() on the same files, each a whole process.

    python3 benchmarks/bench_hta_interop.py                      # 1 x 200 MB and 8 x 100 MB
    python3 benchmarks/bench_hta_interop.py --one-mb 20 --eight-mb 10   # a quick run

Trace sets are built with traceattr.builder as in bench_hta.py (same spec, reused while unchanged) under
--data. Timed, each as its own process, with the HTA installed beside traceattr (`traceattr[hta]`):
* HTA: `TraceAnalysis(trace_dir=...)` (its JSON backend, multiprocessing over ranks as it chooses);
* traceattr: `trace_analysis(folder, cache=False)` (a cold decode on all cores, then HTA's frames built).
Each then runs HTA's temporal breakdown and prints it, so the two rows can be checked equal. Wall time
and peak PSS of the whole process tree (bench_hta.timed). Prints markdown table rows.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hta import build_set, timed  # noqa: E402

SCRIPT = """
import sys, time, warnings, logging
warnings.filterwarnings("ignore")
from hta.configs.config import logger
logger.setLevel(logging.ERROR)
started = time.perf_counter()
if sys.argv[2] == "hta":
    from hta.trace_analysis import TraceAnalysis
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
else:
    from traceattr.interop.hta import trace_analysis
    analysis = trace_analysis(sys.argv[1], cache=False)
loaded = time.perf_counter()
breakdown = analysis.get_temporal_breakdown(visualize=False)
print(f"RESULT load_s={loaded - started:.2f} breakdown=" + breakdown.to_json(orient="values"))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one-mb", type=int, default=200)
    parser.add_argument("--eight-mb", type=int, default=100)
    parser.add_argument("--data", type=Path, default=Path("/tmp/traceattr-bench-hta-interop"))
    parser.add_argument("--keep", action="store_true", help="keep the built traces (default: delete them)")
    args = parser.parse_args()
    print("| set | JSON MB per file | loader | load s (in process) | wall s | peak tree PSS MB | "
          "temporal breakdown equal |")
    print("|---|---|---|---|---|---|---|")
    for name, ranks, size_mb in (("one", 1, args.one_mb), ("eight", 8, args.eight_mb)):
        if not (args.data / f"{name}{size_mb}").is_dir():
            (args.data / f"{name}{size_mb}.truth.json").unlink(missing_ok=True)
        plain, packed, _ = build_set(args.data, f"{name}{size_mb}", ranks, size_mb)
        shutil.rmtree(packed, ignore_errors=True)           # only the plain JSON is timed here
        largest = max(p.stat().st_size for p in plain.iterdir()) / 1e6
        results = {}
        for loader in ("hta", "traceattr"):
            wall, tree, _, out = timed([sys.executable, "-c", SCRIPT, str(plain), loader])
            line = next(l for l in out.splitlines() if l.startswith("RESULT"))
            load_s, breakdown = line.split()[1].split("=")[1], line.split("breakdown=")[1]
            results[loader] = breakdown
            same = "" if loader == "hta" else ("yes" if breakdown == results["hta"] else f"NO: {breakdown}")
            print(f"| {name} | {largest:.1f} | {loader} | {load_s} | {wall:.2f} | {tree:.0f} | {same} |", flush=True)
        if not args.keep:
            shutil.rmtree(plain, ignore_errors=True)
            (args.data / f"{name}{size_mb}.truth.json").unlink()     # build_set's record of the kept set
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
