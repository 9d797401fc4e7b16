"""traceattr: where did the device time go, and what changed? Exactly.

Public API (imported lazily so that `import traceattr` stays cheap and never imports torch):
    load(path, ...) -> TraceSet                     (refuses a folder of several runs, naming them)
    load_runs(path, ...) -> [(run name, TraceSet)]  (one per run found under path)
    summarize(traceset, by="kernel"|"category"|"rank", ...) -> pandas.DataFrame
    attribute(traceset, by="op"|"op_stack"|"module"|"module_class"|"annotation"|"step"|"shape"|"launch", ...)
        -> pandas.DataFrame
    across_ranks(table, top=None, ranks=()) -> pandas.DataFrame  (one row per key over all ranks, as the
                                                  CLI's default table, from a summarize/attribute table)
    compare(a, b, by=...) -> pandas.DataFrame
    compare_runs(a, b, by=...) -> [(run name, DataFrame)]  (one per pair of runs when both hold several)
    collectives(traceset, ...) -> pandas.DataFrame   (one row per collective instance matched across ranks)
    imbalance(traceset, ...) -> Straggler           (who made the others wait at collectives, and why)
    rank_imbalance(traceset, by="kernel", ...) -> Imbalance  (the busiest rank vs the median rank, and the
                                                  keys behind its extra busy time)
    step_imbalance(traceset, by="kernel", ...) -> Imbalance  (the longest step vs the median step, and the
                                                  keys behind it)
    check(traceset, clip=False, ...) -> CheckResult  (what `traceattr check` reports: the verdict, and per
                                                  run its verdict, problems, notes and every finding)
    critical_path(traceset, step=None, ...) -> pandas.DataFrame  (what bounds each step: its critical path
                                                  by kind and key, Σ critical_ns == Σ step_ns)
    (each takes a TraceSet or a path; with a path, load options such as jobs=, executor=, cache=)
    capture                (the traceattr.capture package; needs torch)
    TraceError and its subclasses
"""

from __future__ import annotations

import importlib

from traceattr.errors import (
    CaptureConfigError,
    TraceDiscoveryError,
    TraceError,
    TraceFormatError,
    TraceInputError,
)

__version__ = "0.1.0"

_LAZY = {
    "load": ("traceattr.api", "load"),
    "load_runs": ("traceattr.api", "load_runs"),
    "TraceSet": ("traceattr.model.traceset", "TraceSet"),
    "summarize": ("traceattr.api", "summarize"),
    "attribute": ("traceattr.api", "attribute"),
    "across_ranks": ("traceattr.analysis.across", "across_ranks"),
    "compare": ("traceattr.api", "compare"),
    "compare_runs": ("traceattr.api", "compare_runs"),
    "collectives": ("traceattr.api", "collectives"),
    "imbalance": ("traceattr.api", "imbalance"),
    "rank_imbalance": ("traceattr.api", "rank_imbalance"),
    "step_imbalance": ("traceattr.api", "step_imbalance"),
    "check": ("traceattr.api", "check"),
    "critical_path": ("traceattr.api", "critical_path"),
    "capture": ("traceattr.capture", None),
}

__all__ = [
    "CaptureConfigError", "TraceDiscoveryError", "TraceError", "TraceFormatError", "TraceInputError",
    *_LAZY,
]


def __dir__() -> list[str]:
    """The public API (lazy names included), so dir(traceattr) and tab completion show load, summarize..."""
    return sorted(set(__all__) | {"__version__"})


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'traceattr' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value
