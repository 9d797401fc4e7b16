"""`--by phase`: device time per serving-engine phase (prefill, decode, mixed, other), per engine iteration.

vLLM and SGLang (and AMD's ATOM) wrap each engine iteration in a `record_function` range (a
`user_annotation` row) whose name carries the batch: how many requests are prefilling (context) and how many
are decoding (generation), and their token counts. The formats read (docs/inference.md lists examples):

* vLLM, detailed: `execute_{T}_context_{Rc}(sq{..}sk{..}sqsq{..}sqsk{..})_generation_{Rg}(sq{..}sk{..}...)`:
  Rc prefill requests with sq context tokens, Rg decode requests with sq generated tokens (SGLang's
  roofline annotations write this format too);
* vLLM, native: `execute_context_{Rc}({Tc})_generation_{Rg}({Tg})`;
* SGLang: `step[EXTEND|DECODE|MIXED bs={B} ...]` with `toks=`, `c=`/`g=` (a MIXED batch's request counts)
  and `c_sq=`/`g_sq=` (tokens) when present;
* ATOM: `prefill[bs={B} tok={T} ...]`, `decode[bs={B} tok={T} ...]` (bs=117/128: 117 real requests).

An iteration is prefill (prefill requests only), decode (decode requests only) or mixed (both); one with
neither is other. Iterations nest (SGLang writes `step[...]` inside its `execute_...` range): only the
outermost range of each thread counts, so an iteration is counted once. A device activity goes to the
iteration whose range holds its launch (the runtime call, on the same process; graph replays included);
activities launched outside every iteration, or whose launch is not in the trace, go to `other`. Each row
sums the self time of its activities, so the rows of a (rank, device) sum to its busy time exactly.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceattr import schema as S
from traceattr.analysis.fold import fold_below_top
from traceattr.attribution.carried import carried_in
from traceattr.attribution.hosttree import dense_codes, file_key, runtime_mask
from traceattr.attribution.sweep import sweep
from traceattr.engine.partial import Partial, listed
from traceattr.io.codes import dictionary_codes
from traceattr.model.traceset import TraceSet

LEVEL = "phase"
PHASES = ("prefill", "decode", "mixed", "other", "<carried in>")
PREFILL, DECODE, MIXED, OTHER, CARRIED = range(5)      # carried in: launched before the window (carried.py)
OUTSIDE, BEFORE = -1, -2      # launched_in's codes: launched outside every iteration, before the window
ITERATIONS, REQUESTS = "iterations", "requests"
CONTEXT_TOKENS, GENERATION_TOKENS = "context_tokens", "generation_tokens"
COUNTS = (ITERATIONS, REQUESTS, CONTEXT_TOKENS, GENERATION_TOKENS)
NO_ITERATIONS_NOTE = ("no engine-iteration annotations (vLLM `execute_context_...`, SGLang `step[...]`, ATOM "
                      "`prefill[...]`/`decode[...]`) in these traces: all device time is `other` "
                      "(docs/inference.md says how to record them)")

_INT = r"(\d{1,18})"
_VLLM_DETAILED = re.compile(rf"execute_{_INT}_context_{_INT}\(sq{_INT}sk{_INT}sqsq{_INT}sqsk{_INT}\)"
                            rf"_generation_{_INT}\(sq{_INT}sk{_INT}sqsq{_INT}sqsk{_INT}\)")
_VLLM_NATIVE = re.compile(rf"execute_context_{_INT}\({_INT}\)_generation_{_INT}\({_INT}\)")
_SGLANG = re.compile(r"step\[(EXTEND|DECODE|MIXED|IDLE)\b([^\]]*)\]")
_ATOM = re.compile(r"(prefill|decode)\[([^\]]*)\]")
_FIELD = re.compile(r"(\w+)=(\d{1,18})")
FORMATS = ("vLLM detailed", "vLLM native", "SGLang", "ATOM")


def parse_iteration(name: str) -> tuple[int, int, int, int, int, int] | None:
    """(format index, prefill requests, decode requests, prefill tokens, decode tokens, tokens known) of an
    engine-iteration annotation name, or None when it is not one (module docstring)."""
    found = _VLLM_DETAILED.match(name)
    if found:
        (_, contexts, c_sq, *_), (generations, g_sq) = found.groups()[:6], found.groups()[6:8]
        return 0, int(contexts), int(generations), int(c_sq), int(g_sq), 1
    found = _VLLM_NATIVE.match(name)
    if found:
        contexts, c_tokens, generations, g_tokens = map(int, found.groups())
        return 1, contexts, generations, c_tokens, g_tokens, 1
    found = _SGLANG.match(name)
    if found:
        mode, fields = found.group(1), dict(_FIELD.findall(found.group(2)))
        batch = int(fields.get("bs", 0))
        if mode == "DECODE":
            return 2, 0, batch, 0, int(fields.get("g_sq", batch)), 1
        if mode == "EXTEND":
            known = "c_sq" in fields or "toks" in fields
            return 2, batch, 0, int(fields.get("c_sq", fields.get("toks", 0))), 0, int(known)
        if mode == "MIXED":
            known = "c_sq" in fields and "g_sq" in fields
            return (2, int(fields.get("c", batch)), int(fields.get("g", 0)), int(fields.get("c_sq", 0)),
                    int(fields.get("g_sq", 0)), int(known))
        return 2, 0, 0, 0, 0, 1                  # IDLE: an iteration with nothing to run
    found = _ATOM.match(name)
    if found:
        fields = dict(_FIELD.findall(found.group(2)))      # bs=117/128 reads 117, the real batch
        batch, tokens = int(fields.get("bs", 0)), int(fields.get("tok", 0))
        if found.group(1) == "prefill":
            return 3, batch, 0, tokens, 0, int("tok" in fields)
        return 3, 0, batch, 0, tokens, int("tok" in fields)
    return None


def phase_of(prefills: np.ndarray, decodes: np.ndarray) -> np.ndarray:
    return np.where(prefills > 0, np.where(decodes > 0, MIXED, PREFILL), np.where(decodes > 0, DECODE, OTHER))


def iterations(traceset: TraceSet) -> dict[str, np.ndarray]:
    """The outermost engine-iteration annotations of every thread: host row, file, process, start, end,
    phase, requests, tokens, format (columns). Names are parsed once each (distinct names only)."""
    host = traceset.host
    ranges = np.flatnonzero(np.asarray(pc.equal(host.column(S.CATEGORY), S.USER_ANNOTATION)
                                       .to_numpy(zero_copy_only=False), bool))
    empty = {name: np.zeros(0, np.int64) for name in
             ("row", "file", "pid", "start", "end", "phase", "prefills", "decodes", "c_tokens", "g_tokens",
              "known", "format")}
    if not len(ranges):
        return empty
    dictionary, codes = dictionary_codes(host.column(S.NAME).take(ranges))
    parsed = [parse_iteration(name) if isinstance(name, str) else None for name in dictionary.to_pylist()]
    table = np.array([p if p is not None else (-1, 0, 0, 0, 0, 0) for p in parsed] or [(-1, 0, 0, 0, 0, 0)],
                     dtype=np.int64)
    found = table[codes]
    keep = found[:, 0] >= 0
    rows, found = ranges[keep], found[keep]
    column = lambda name: np.asarray(host.column(name).to_numpy(), dtype=np.int64)[rows]   # noqa: E731
    file, pid = file_key(column(S.RANK), column(S.WINDOW)), column(S.PID)
    start, end = column(S.START_NS), np.maximum(column(S.END_NS), column(S.START_NS))
    outer = _outermost(dense_codes(file, pid, column(S.TID)), start, end)
    found = found[outer]
    return {"row": rows[outer], "file": file[outer], "pid": pid[outer], "start": start[outer], "end": end[outer],
            "phase": phase_of(found[:, 1], found[:, 2]), "prefills": found[:, 1], "decodes": found[:, 2],
            "c_tokens": found[:, 3], "g_tokens": found[:, 4], "known": found[:, 5], "format": found[:, 0]}


def _outermost(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which ranges no earlier-starting range of their thread still holds (by start, longest first)."""
    order = np.lexsort((-end, start, thread))
    t, s, e = thread[order], start[order], end[order]
    first = np.r_[True, t[1:] != t[:-1]] if len(t) else np.zeros(0, bool)
    # running maximum of the ends before each range, restarting per thread (ends offset per thread)
    offset = np.cumsum(first) * (int(e.max(initial=0)) - int(s.min(initial=0)) + 1)
    reach = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, (e + offset)[:-1]])
    held = ~first & (s + offset < reach[:len(s)] if len(s) else np.zeros(0, bool))
    out = np.zeros(len(t), bool)
    out[order] = ~held
    return out


def phase_part(traceset: TraceSet) -> dict:
    """The map: per (rank, device, phase) the self ns and activity count, per (rank, phase) the iteration
    counts, and the formats seen (on one file, or a whole TraceSet)."""
    found = iterations(traceset)
    at = launched_in(traceset, found)
    phase = np.full(len(at), OTHER, np.int64)
    inside = at >= 0
    phase[inside] = found["phase"][at[inside]]
    phase[at == BEFORE] = CARRIED
    sums = device_sums(traceset, phase, LEVEL)
    iteration_rank = (found["file"] >> 32).astype(np.int64)
    key = dense_codes(iteration_rank, found["phase"])
    m = int(key.max(initial=-1)) + 1
    head = np.zeros(m, np.int64)
    head[key[::-1]] = np.arange(len(key))[::-1]
    counts = {S.RANK: iteration_rank[head], LEVEL: found["phase"][head]}
    for name, values in ((ITERATIONS, np.ones(len(key), np.int64)),
                         (REQUESTS, found["prefills"] + found["decodes"]),
                         (CONTEXT_TOKENS, found["c_tokens"]), (GENERATION_TOKENS, found["g_tokens"])):
        counts[name] = np.zeros(m, np.int64)
        np.add.at(counts[name], key, values)
    unknown = int((found["known"] == 0).sum())
    return {"sums": sums, "counts": counts, "formats": tuple(sorted(set(found["format"].tolist()))),
            "unknown_tokens": unknown}


def launched_in(traceset: TraceSet, found: dict[str, np.ndarray]) -> np.ndarray:
    """Per device row: the index in `found` (iterations()) of the iteration that launched it
    (launch_iteration), OUTSIDE every iteration, or BEFORE the window (carried in)."""
    at = np.full(traceset.device.num_rows, OUTSIDE, np.int64)
    if traceset.device.num_rows and len(found["row"]):
        at = launch_iteration(traceset, found)
    at[carried_in(traceset)] = BEFORE
    return at


def device_sums(traceset: TraceSet, key: np.ndarray, name: str) -> dict[str, np.ndarray]:
    """Per (rank, device, key) of the device rows (`key`: one per row, its column called `name`): the self
    ns and the activity count."""
    device = traceset.device
    rank = np.asarray(device.column(S.RANK).to_numpy(), dtype=np.int64)
    dev = np.asarray(device.column(S.DEVICE).to_numpy(), dtype=np.int64)
    self_ns = sweep(traceset).self_ns if device.num_rows else np.zeros(0, np.int64)
    group = dense_codes(rank, dev, key)
    n = int(group.max(initial=-1)) + 1
    first = np.zeros(n, np.int64)
    first[group[::-1]] = np.arange(len(group))[::-1]
    sums = {S.RANK: rank[first], S.DEVICE: dev[first], name: key[first], S.SELF_NS: np.zeros(n, np.int64),
            S.COUNT: np.bincount(group, minlength=n).astype(np.int64)}
    np.add.at(sums[S.SELF_NS], group, self_ns)          # int64, exact (bincount's weights add in float64)
    return sums


def launch_iteration(traceset: TraceSet, found: dict[str, np.ndarray]) -> np.ndarray:
    """Per device row: the index in `found` (iterations()) of the outermost iteration of its launching process
    whose range holds the launch (the runtime record with its correlation, the earliest when several), else
    -1."""
    host, device = traceset.host, traceset.device
    runtime = np.flatnonzero(runtime_mask(host.column(S.CATEGORY)))
    col = lambda table, name, rows=None: (np.asarray(table.column(name).to_numpy(), dtype=np.int64)  # noqa: E731
                                         if rows is None else np.asarray(table.column(name).to_numpy(),
                                                                         dtype=np.int64)[rows])
    corr = col(host, S.CORRELATION, runtime)
    runtime, corr = runtime[corr >= 0], corr[corr >= 0]
    r_file = file_key(col(host, S.RANK, runtime), col(host, S.WINDOW, runtime))
    d_file = file_key(col(device, S.RANK), col(device, S.WINDOW))
    d_corr = col(device, S.CORRELATION)
    key = dense_codes(np.r_[r_file, d_file], np.r_[corr, d_corr])
    r_key, d_key = key[:len(runtime)], key[len(runtime):]
    order = np.lexsort((col(host, S.START_NS, runtime), r_key))      # the earliest record of a key first
    r_key, runtime = r_key[order], runtime[order]
    pos = np.searchsorted(r_key, d_key)
    hit = (pos < len(r_key)) & (d_corr >= 0)
    hit[hit] = r_key[pos[hit]] == d_key[hit]
    launch_row = np.where(hit, runtime[np.minimum(pos, max(len(runtime) - 1, 0))], -1)
    launched = launch_row >= 0
    t = col(host, S.START_NS, launch_row[launched])
    process = dense_codes(np.r_[found["file"], file_key(col(host, S.RANK, launch_row[launched]),
                                                        col(host, S.WINDOW, launch_row[launched]))],
                          np.r_[found["pid"], col(host, S.PID, launch_row[launched])])
    it_process, launch_process = process[:len(found["file"])], process[len(found["file"]):]
    order = np.lexsort((found["start"], it_process))
    it_process, it_start, it_end = it_process[order], found["start"][order], found["end"][order]
    # the last iteration of the launch's process starting at or before it
    span = int(max(it_end.max(initial=0), t.max(initial=0))) - int(min(it_start.min(initial=0), t.min(initial=0))) + 1
    base = int(min(it_start.min(initial=0), t.min(initial=0)))
    at = np.searchsorted(it_process * span + (it_start - base), launch_process * span + (t - base), side="right") - 1
    ok = at >= 0
    ok[ok] = (it_process[at[ok]] == launch_process[ok]) & (t[ok] < it_end[at[ok]])
    index = np.full(device.num_rows, -1, np.int64)
    inside = np.flatnonzero(launched)
    index[inside[ok]] = order[at[ok]]
    return index


def reduce_parts(found: list[tuple[int, int, dict]]) -> pd.DataFrame:
    """The phase table over the kept files' parts (rank relabelled): one row per (rank, device, phase) with
    device time, and the rank's iteration counts of that phase on each of its devices' rows."""
    sums = pd.concat([pd.DataFrame(p["sums"]).assign(**{S.RANK: rank}) for rank, _, p in found]
                     or [pd.DataFrame({S.RANK: [], S.DEVICE: [], LEVEL: [], S.SELF_NS: [], S.COUNT: []})],
                     ignore_index=True).astype("int64")
    counts = pd.concat([pd.DataFrame(p["counts"]).assign(**{S.RANK: rank}) for rank, _, p in found]
                       or [pd.DataFrame({S.RANK: [], LEVEL: [], **{c: [] for c in COUNTS}})],
                       ignore_index=True).astype("int64")
    table = sums.groupby([S.RANK, S.DEVICE, LEVEL], as_index=False)[[S.SELF_NS, S.COUNT]].sum()
    counts = counts.groupby([S.RANK, LEVEL], as_index=False)[list(COUNTS)].sum()
    devices = table[[S.RANK, S.DEVICE]].drop_duplicates()
    # a phase with iterations but no device time still has its row (0 ns) on each device of its rank
    table = devices.merge(counts[[S.RANK, LEVEL]], on=S.RANK).merge(table, how="outer",
                                                                     on=[S.RANK, S.DEVICE, LEVEL])
    table = table.merge(counts, how="left", on=[S.RANK, LEVEL]).fillna(0)
    for name in (S.SELF_NS, S.COUNT, *COUNTS):
        table[name] = table[name].astype("int64")
    busy = table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].transform("sum")
    table[S.SELF_PCT] = np.where(busy > 0, 100.0 * table[S.SELF_NS] / busy.where(busy > 0, 1), 0.0)
    table = table.sort_values([S.RANK, S.DEVICE, LEVEL]).reset_index(drop=True)
    table.insert(2, "key", [PHASES[p] for p in table.pop(LEVEL).tolist()])
    formats = sorted({FORMATS[f] for _, _, p in found for f in p["formats"]})
    unknown = sum(p["unknown_tokens"] for _, _, p in found)
    notes = [] if formats else [NO_ITERATIONS_NOTE]
    if unknown:
        notes.append(f"{unknown} iteration annotation(s) carry no token counts (SGLang `step[EXTEND bs=N]`): "
                     "their tokens count as 0")
    table.attrs.update(level=LEVEL, notes=notes,
                       facts={"iterations": ", ".join(formats) + " annotations" if formats else "none found"},
                       totals={(int(r), int(d)): int(v) for (r, d), v in
                               table.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum().items()})
    return table


def with_top(table: pd.DataFrame, top: int) -> pd.DataFrame:
    """`--top N`: as every level, the N phases of most self time of each (rank, device), the rest summed into
    one `<other>` row (their time, activities, iterations, requests and tokens), so rows still sum to busy."""
    folded = fold_below_top(table, top, "key", [S.SELF_NS, S.COUNT, *COUNTS, S.SELF_PCT])
    folded.attrs = dict(table.attrs)
    return folded


EXTRACT = Partial(LEVEL, phase_part, listed(reduce_parts))

