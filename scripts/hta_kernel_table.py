"""The row-by-row comparison in docs/hta.md: HTA's per-kernel table against traceattr's, on the same rows.

    python3 scripts/hta_kernel_table.py ../shared/traces/trace_filter --rank 0 --rows 12

Both tables are computed on the rows HTA keeps (HTA drops the last ProfilerStep): HTA's analyses run on the
TraceAnalysis built by traceattr.interop.hta, and traceattr's on `from_trace_analysis` of that object.
Prints markdown.
"""

from __future__ import annotations

import argparse
import logging
import warnings

import traceattr
from traceattr import schema as S
from traceattr.interop.hta import from_trace_analysis, trace_analysis


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--rows", type=int, default=12)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from hta.configs.config import logger
    logger.setLevel(logging.ERROR)

    analysis = trace_analysis(args.path, cache=False)
    kinds, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=10**6,
                                                       duration_ratio=1.0)
    theirs = kernels[kernels["rank"] == args.rank].set_index("name")["sum (us)"]
    table = traceattr.summarize(from_trace_analysis(analysis), by="kernel")
    ours = table[table[S.RANK] == args.rank].groupby(S.NAME)[[S.DURATION_NS, S.SELF_NS, S.COUNT]].sum()
    rank_row = traceattr.summarize(from_trace_analysis(analysis), by="rank").set_index(S.RANK).loc[args.rank]

    print("| kernel | count | HTA `sum (us)` | traceattr Σ duration µs | traceattr self µs | HTA over self |")
    print("|---|---|---|---|---|---|")
    for name in theirs.sort_values(ascending=False).index[:args.rows]:
        row = ours.loc[name]
        self_us = row[S.SELF_NS] / 1000
        short = name if len(name) <= 70 else name[:67] + "..."
        print(f"| `{short.replace('|', '/')}` | {row[S.COUNT]:,} | {theirs[name]:,.0f} | "
              f"{row[S.DURATION_NS] / 1000:,.0f} | {self_us:,.1f} | {100 * (theirs[name] / self_us - 1):+.1f}% |")
    self_total_us = ours[S.SELF_NS].sum() / 1000
    print(f"| **all {len(theirs)} kernels of rank {args.rank}** | {int(ours[S.COUNT].sum()):,} | "
          f"{theirs.sum():,.0f} | {ours[S.DURATION_NS].sum() / 1000:,.0f} | {self_total_us:,.1f} "
          f"(= busy {rank_row[S.BUSY_NS] / 1000:,.1f}) | {100 * (theirs.sum() / self_total_us - 1):+.1f}% |")
    print()
    print("HTA's kernel-type table (all ranks), which merges overlapping intervals:")
    print()
    print("| kernel_type | sum µs | percentage |")
    print("|---|---|---|")
    for row in kinds.itertuples(index=False):
        print(f"| {row.kernel_type} | {row.sum:,} | {row.percentage} |")
    total_busy = traceattr.summarize(from_trace_analysis(analysis), by="rank")[S.BUSY_NS].sum() / 1000
    print(f"| **total** | {kinds['sum'].sum():,} (traceattr busy, all ranks: {total_busy:,.1f}) | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
