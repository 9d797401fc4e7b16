"""What counts as communication: the one table of rules, applied per file as it decodes and, for the
user's own `--comm-pattern`s, once more on the loaded TraceSet.

A device **kernel** is communication when the first rule below that fires says so (memcpy and memset stay
memcpy/memset). The rules, in the order a report credits them (docs/collectives.md):

| rule              | fires when                                                                      |
|-------------------|---------------------------------------------------------------------------------|
| `collective arg`  | the kernel's own args carry `Collective name` (NCCL kernels since torch 2.2)    |
| `nccl`            | name contains `nccl` (`ncclKernel_*`, `ncclDevKernel_*`, any case)               |
| `rccl`            | name contains `rccl`                                                            |
| `hccl`            | name contains `hccl` (MTIA's and Ascend's collectives)                          |
| `msccl`           | name contains `msccl` (MSCCL and MSCCL++ `mscclpp::` kernels)                   |
| `nvshmem`         | name contains `nvshmem`                                                         |
| `deepep`          | a `deep_ep::` / `dpsk::ep::` kernel that dispatches, combines or notifies        |
|                   | (intranode, internode and low-latency `internode_ll` variants alike)            |
| `custom allreduce`| vLLM/SGLang custom all-reduce: `cross_device_reduce*`, one-shot/two-shot        |
|                   | all-reduce kernels, `custom_all_reduce`                                         |
| `--comm-pattern`  | the user's regular expression matches the name (`comm_patterns=` in the API)    |
| `launching op`    | the innermost cpu op or annotation around its launch is `record_param_comms`,   |
|                   | a `c10d::*` op or an `nccl:*` annotation                                        |

Point-to-point `SendRecv` kernels are NCCL kernels (`ncclDevKernel_SendRecv`) and fall under `nccl`.
"""

from __future__ import annotations

import dataclasses
import re
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.errors import TraceInputError

COLLECTIVE_ARG = "collective arg"
LAUNCHING_OP = "launching op"
USER_PATTERN = "--comm-pattern"

# (rule, regular expression over the kernel name): the built-in name rules, in report order
NAME_RULES: tuple[tuple[str, re.Pattern], ...] = tuple((rule, re.compile(pattern)) for rule, pattern in (
    ("nccl", r"(?i)nccl"),
    ("rccl", r"(?i)rccl"),
    ("hccl", r"(?i)hccl"),
    ("msccl", r"(?i)msccl"),
    ("nvshmem", r"(?i)nvshmem"),
    ("deepep", r"(?:deep_ep|dpsk::ep)::(?:\w+::)*\w*(?:dispatch|combine|notify)"),
    ("custom allreduce", r"(?i)cross_device_reduce|(?:one|two)_?shot_?all_?reduce|all_?reduce_?(?:one|two)_?shot"
                         r"|custom_?all_?reduce"),
))
RULE_NAMES = (COLLECTIVE_ARG, *(rule for rule, _ in NAME_RULES), USER_PATTERN, LAUNCHING_OP)

# the launching ops (cpu_op or user_annotation names) that make a kernel communication
COMM_OP = re.compile(r"^(?:record_param_comms$|c10d::|nccl:)")
RECORD_PARAM_COMMS = "record_param_comms"

# bytes per element of the `dtype` strings torch writes (c10 ScalarType names)
DTYPE_BYTES = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
               "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4,
               "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
               "UInt16": 2, "UInt32": 4, "UInt64": 8}


def compile_patterns(patterns) -> tuple[re.Pattern, ...]:
    """The user's `--comm-pattern`s, compiled; a bad one is a TraceInputError naming it."""
    compiled = []
    if isinstance(patterns, str):       # one pattern, not its characters
        patterns = (patterns,)
    for pattern in patterns or ():
        if not isinstance(pattern, str) or not pattern:
            raise TraceInputError(f"--comm-pattern must be a non-empty regular expression, got {pattern!r}")
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise TraceInputError(f"--comm-pattern {pattern!r} is not a regular expression: {exc}") from None
    return tuple(compiled)


def name_rule(names: list[str], patterns: tuple[re.Pattern, ...] = ()) -> np.ndarray:
    """Per distinct name: the index in RULE_NAMES of the first name rule (or user pattern) that matches,
    -1 when none does. Runs once per distinct name, never per event."""
    rules = [(RULE_NAMES.index(rule), regex) for rule, regex in NAME_RULES]
    rules += [(RULE_NAMES.index(USER_PATTERN), regex) for regex in patterns]
    out = np.full(len(names), -1, np.int64)
    for i, name in enumerate(names):
        for code, regex in rules:
            if regex.search(name):
                out[i] = code
                break
    return out


def is_comm_op(names: list[str]) -> np.ndarray:
    return np.array([COMM_OP.search(name) is not None for name in names], bool)


MAX_MESSAGE_BYTES = 1 << 50        # 1 PiB: no collective moves more; the product stays far from int64's end


def message_bytes(in_nelems: np.ndarray, out_nelems: np.ndarray, dtype_codes: np.ndarray,
                  dtypes: list[str]) -> np.ndarray:
    """max(In, Out msg nelems) x element size: the nccl-tests `size` of every collective (allgather's
    output and reduce_scatter's input are the whole buffer). -1 when a count or the dtype is unknown, or
    the size is beyond any real message (MAX_MESSAGE_BYTES: a hostile count wrapped int64 to negative or
    zero bytes)."""
    size = np.array([DTYPE_BYTES.get(name, -1) for name in dtypes], np.int64)[dtype_codes]
    nelems = np.maximum(in_nelems, out_nelems)
    possible = (nelems >= 0) & (size > 0) & (nelems <= MAX_MESSAGE_BYTES // np.maximum(size, 1))
    return np.where(possible, np.where(possible, nelems, 0) * np.maximum(size, 0), S.NO_INT)


def innermost_range(range_thread: np.ndarray, range_start: np.ndarray, range_end: np.ndarray,
                    probe_thread: np.ndarray, probe_ns: np.ndarray) -> np.ndarray:
    """Per probe (a launch time on a thread): the index of the innermost range [start, end) on the same
    thread that contains it, -1 when none. Ranges are assumed to nest (cpu ops and annotations do); then
    the innermost container is the last range opened before the probe at the probe's own depth."""
    n_probes = len(probe_ns)
    keep = np.flatnonzero(range_end > range_start)     # an empty range [s, s) contains nothing
    n_ranges = len(keep)
    if n_ranges == 0 or n_probes == 0:
        return np.full(n_probes, -1, np.int64)
    range_thread, range_start, range_end = range_thread[keep], range_start[keep], range_end[keep]
    # points: ends (kind 0) before starts (1, longer first) before probes (2) at one time: half-open ranges
    thread = np.concatenate([range_thread, range_thread, probe_thread])
    time = np.concatenate([range_end, range_start, probe_ns])
    kind = np.concatenate([np.zeros(n_ranges, np.int64), np.ones(n_ranges, np.int64),
                           np.full(n_probes, 2, np.int64)])
    length = np.concatenate([np.zeros(n_ranges, np.int64), range_end - range_start, np.zeros(n_probes, np.int64)])
    order = np.lexsort((-length, kind, time, thread))
    kind_sorted = kind[order]
    # every range opens and closes on its own thread, so the running count is 0 between threads
    depth = np.cumsum(np.where(kind_sorted == 0, -1, np.where(kind_sorted == 1, 1, 0)))
    starts = np.flatnonzero(kind_sorted == 1)
    probes = np.flatnonzero(kind_sorted == 2)
    thread_code = np.unique(thread[order], return_inverse=True)[1].astype(np.int64).ravel()
    max_depth = int(depth.max(initial=0)) + 1
    n_points = len(order) + 1
    start_key = (thread_code[starts] * max_depth + depth[starts]) * n_points + starts
    by_key = np.argsort(start_key)
    starts, start_key = starts[by_key], start_key[by_key]
    probe_key = (thread_code[probes] * max_depth + depth[probes]) * n_points + probes
    at = np.searchsorted(start_key, probe_key) - 1     # start_key is sorted by thread, depth, position
    same = (at >= 0) & (depth[probes] > 0)
    same[same] = start_key[at[same]] // n_points == probe_key[same] // n_points
    range_index = keep[order[starts] - n_ranges]      # start points are the second block of points
    result = np.full(n_probes, -1, np.int64)
    result[order[probes] - 2 * n_ranges] = np.where(same, range_index[np.maximum(at, 0)], -1)
    return result


# the user patterns a TraceSet was made with, so that rule_of_rows credits them without being told again
_APPLIED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def apply_patterns(traceset, patterns):
    """The TraceSet with kernels whose name matches a user pattern made communication (a new TraceSet
    when any changed, so every table computed from it agrees)."""
    compiled = compile_patterns(patterns)
    if not compiled or traceset.device.num_rows == 0:
        return traceset
    device = traceset.device
    encoded = pc.dictionary_encode(device.column(S.NAME)).combine_chunks()
    names = encoded.dictionary.to_pylist()
    hit = np.array([any(regex.search(name) for regex in compiled) for name in names], bool)
    row_hit = hit[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)]
    category = np.asarray(device.column(S.CATEGORY).to_numpy(zero_copy_only=False), object)
    change = row_hit & (category == S.COMPUTE)
    if not change.any():
        return traceset
    category = np.where(change, S.COMMUNICATION, category)
    index = device.schema.get_field_index(S.CATEGORY)
    changed = dataclasses.replace(traceset, device=device.set_column(index, S.CATEGORY, pa.array(category, pa.string())))
    _APPLIED[changed] = compiled
    return changed


def rule_of_rows(traceset, patterns=()) -> np.ndarray:
    """Per communication row of traceset.device (others get -1): the index in RULE_NAMES of the rule that
    made it communication. Own args first, then names, then the user's patterns; what is left was made
    communication by its launching op when the file was decoded."""
    device = traceset.device
    compiled = compile_patterns(patterns) or _APPLIED.get(traceset, ())
    encoded = pc.dictionary_encode(device.column(S.NAME)).combine_chunks()
    by_name = name_rule(encoded.dictionary.to_pylist(), compiled)
    rule = by_name[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)] if len(by_name) else \
        np.full(device.num_rows, -1, np.int64)
    own_args = np.asarray(pc.not_equal(device.column(S.COLLECTIVE), "").to_numpy(zero_copy_only=False), bool)
    rule = np.where(own_args, RULE_NAMES.index(COLLECTIVE_ARG), np.where(rule >= 0, rule,
                                                                         RULE_NAMES.index(LAUNCHING_OP)))
    is_comm = np.asarray(pc.equal(device.column(S.CATEGORY), S.COMMUNICATION).to_numpy(zero_copy_only=False), bool)
    return np.where(is_comm, rule, -1)


def time_by_rule(traceset, self_ns: np.ndarray) -> dict[str, int]:
    """Σ self ns of communication activities per rule that made them communication (rules with time only)."""
    rule = rule_of_rows(traceset)
    out = {}
    for code, name in enumerate(RULE_NAMES):
        ns = int(self_ns[rule == code].sum())
        if ns or (rule == code).any():
            out[name] = ns
    return out
