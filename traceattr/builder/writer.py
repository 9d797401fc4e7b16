"""Render neutral events as Kineto JSON, per era and layout, streamed to a (gzipped) file."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

from traceattr.builder.events import RankTimeline
from traceattr.builder.spec import TraceSpec
from traceattr.builder.truth import TraceTruth

_FLUSH_CHARS = 4 << 20      # write in ~4 MB pieces: bounded memory, few syscalls


def _time_formatters(spec: TraceSpec) -> tuple[Callable[[int], str], Callable[[int], str]]:
    """(ts, dur) formatters from int ns, exactly as each writer generation printed them."""
    if spec.era == "A":                                   # integer epoch µs (times are µs-aligned)
        return (lambda ns: str(ns // 1000)), (lambda ns: str(ns // 1000))
    exact = lambda ns: f"{ns // 1000}.{ns % 1000:03}"    # noqa: E731  kineto's `{us}.{ns:03}`
    if spec.era == "B":                                   # absolute epoch µs with three decimals
        return exact, exact
    base = spec.base_time_ns                              # era C: relative to baseTimeNanoseconds
    return (lambda ns: exact(ns - base)), exact


class _Renderer:
    def __init__(self, spec: TraceSpec) -> None:
        self.ts, self.dur = _time_formatters(spec)
        self.pretty = spec.layout == "pretty"
        self._names: dict[str, str] = {}

    def name(self, text: str) -> str:
        quoted = self._names.get(text)
        if quoted is None:
            quoted = self._names[text] = json.dumps(text)
        return quoted

    def render(self, ev: tuple) -> str:
        ph = ev[0]
        if self.pretty:
            return self._pretty(ph, ev)
        if ph == "X":
            _, cat, name, pid, tid, start, dur, args = ev
            tail = "" if args is None else f', "args": {{{args}}}'
            return (f'{{"ph": "X", "cat": "{cat}", "name": {self.name(name)}, "pid": {pid}, "tid": {tid}, '
                    f'"ts": {self.ts(start)}, "dur": {self.dur(dur)}{tail}}}')
        if ph == "s" or ph == "f":
            _, cat, flow_id, pid, tid, ts = ev
            bp = ', "bp": "e"' if ph == "f" else ""
            return (f'{{"ph": "{ph}", "id": {flow_id}, "pid": {pid}, "tid": {tid}, "ts": {self.ts(ts)}, '
                    f'"cat": "{cat}", "name": "{cat}"{bp}}}')
        if ph == "i":
            _, cat, name, pid, tid, ts, scope, args = ev
            head = f'"cat": "{cat}", ' if cat else ""
            tail = "" if args is None else f', "args": {{{args}}}'
            return (f'{{"ph": "i", {head}"s": "{scope}", "name": {self.name(name)}, "pid": {pid}, "tid": {tid}, '
                    f'"ts": {self.ts(ts)}{tail}}}')
        _, name, pid, tid, ts, args = ev
        return f'{{"ph": "M", "name": "{name}", "ts": {self.ts(ts)}, "pid": {pid}, "tid": {tid}, "args": {{{args}}}}}'

    def _pretty(self, ph: str, ev: tuple) -> str:
        """torch 2.13's C++ writer: one key per line, args on one line, its stray commas kept."""
        if ph == "X":
            _, cat, name, pid, tid, start, dur, args = ev
            tail = "\n  }" if args is None else f'\n    ,\n    "args": {{\n      {args}\n    }}\n  }}'
            return (f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": {self.name(name)},\n    "pid": {pid},'
                    f'\n    "tid": {tid},\n    "ts": {self.ts(start)},\n    "dur": {self.dur(dur)}{tail}')
        if ph == "s" or ph == "f":
            _, cat, flow_id, pid, tid, ts = ev
            bp = ', "bp": "e"' if ph == "f" else ""
            return (f'  {{\n    "ph": "{ph}",\n    "id": {flow_id},\n    "pid": {pid},\n    "tid": {tid},\n'
                    f'    "ts": {self.ts(ts)},\n    "cat": "{cat}",\n    "name": "{cat}"\n    {bp}\n  }}')
        if ph == "i":
            _, cat, name, pid, tid, ts, scope, args = ev
            head = f'\n    "cat": "{cat}",' if cat else ""
            tail = "\n    \n  }" if args is None else f'\n    ,\n    "args": {{\n      {args}\n    }}\n  }}'
            return (f'  {{\n    "ph": "i",\n    {head}\n    "s": "{scope}",\n    "name": {self.name(name)},\n'
                    f'    "pid": {pid},\n    "tid": {tid},\n    "ts": {self.ts(ts)}{tail}')
        _, name, pid, tid, ts, args = ev
        return (f'  {{\n    "ph": "M",\n    "name": "{name}",\n    "ts": {self.ts(ts)},\n    "pid": {pid},\n'
                f'    "tid": {tid},\n    "args": {{\n      {args}\n    }}\n  }}')


def _device_properties(spec: TraceSpec) -> list[dict]:
    return [{"id": i, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9,
             "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
             "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
             "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}
            for i in range(spec.visible_devices)]


def _distributed_info(spec: TraceSpec, rank: int) -> dict:
    ranks = list(range(spec.world_size))
    return {"backend": "nccl", "rank": rank, "world_size": spec.world_size, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": spec.world_size, "ranks": ranks}], "nccl_version": "2.21.5"}


def _header_and_footer(spec: TraceSpec, rank: int, trace_name: str) -> tuple[str, str]:
    """Text before the first event and after the last one."""
    meta = {"trace_id": f"{(spec.seed * 7919 + rank * 104729) & 0xFFFFFFFF:032X}", "with_stack": int(spec.with_stack),
            "profile_memory": int(spec.profile_memory), "record_shapes": 1}
    if spec.world_size > 1:
        meta["distributedInfo"] = _distributed_info(spec, rank)
    meta["host_name"] = f"node{rank // 8}"
    timing = []
    if spec.era == "C":
        timing = [("displayTimeUnit", "ms"), ("baseTimeNanoseconds", spec.base_time_ns)]
    elif spec.era == "B":
        timing = [("displayTimeUnit", "ns")]
    front = timing if not spec.base_at_end else []
    back = timing if spec.base_at_end else []
    dumps = json.dumps
    if spec.layout == "pretty":
        props = ",\n".join("      " + dumps(p) for p in _device_properties(spec))
        head = ' {\n    "schemaVersion": 1,\n    "deviceProperties": [\n' + props + "\n    ],\n    \n"
        head += "".join(f"      {dumps(k)}: {dumps(v)},\n" for k, v in meta.items())
        head += "".join(f"    {dumps(k)}: {dumps(v)},\n" for k, v in front)
        head += '    "traceEvents": [\n    \n'
        tail = f'\n  ],"traceName": {dumps(trace_name)}'
        tail += "".join(f",\n  {dumps(k)}: {dumps(v)}" for k, v in back) + " }"
        return head, tail
    newline = "\n" if spec.layout == "lines" else ""
    keys = [("schemaVersion", 1), ("deviceProperties", _device_properties(spec)), *meta.items(), *front]
    head = "{" + ", ".join(f"{dumps(k)}: {dumps(v)}" for k, v in keys) + ', "traceEvents": [' + newline
    tail = newline + "], " + ", ".join(f"{dumps(k)}: {dumps(v)}" for k, v in [("traceName", trace_name), *back])
    return head, tail + "}" + newline


def _events(spec: TraceSpec, timeline: RankTimeline) -> Iterator[tuple]:
    """Every event of the rank, with the truth's window: the span of its timed events, as the loader
    measures it (torch's `Trace` span, which starts when the profiler does, and CUPTI overhead rows are not
    events of the run)."""
    def in_order() -> Iterator[tuple]:       # the footer's span reads where the steps ended: called last
        yield from timeline.metadata_events()
        yield from timeline.carried_events()
        for number in spec.steps:
            yield from timeline.step(number)
        yield from timeline.footer_events()

    start, end = None, None
    for row in in_order():
        if row[0] == "X" and row[1] not in ("Trace", "overhead"):
            start = row[5] if start is None else min(start, row[5])
            end = row[5] + row[6] if end is None else max(end, row[5] + row[6])
        yield row
    timeline.truth.window_start_ns, timeline.truth.window_end_ns = start or 0, end or 0


def _chunks(spec: TraceSpec, rank: int, truth: TraceTruth, trace_name: str,
            collective_ends: list[int] | None = None) -> Iterator[str]:
    """The whole document as text pieces; counts events into the truth."""
    renderer = _Renderer(spec)
    head, tail = _header_and_footer(spec, rank, trace_name)
    separator = ",\n" if spec.layout != "compact" else ","
    render = renderer.render
    pieces: list[str] = [head]
    size = len(head)
    count = 0
    for ev in _events(spec, RankTimeline(spec, rank, truth, collective_ends)):
        text = render(ev)
        if count:
            pieces.append(separator)
        pieces.append(text)
        count += 1
        size += len(text)
        if size > _FLUSH_CHARS:
            yield "".join(pieces)
            pieces, size = [], 0
    pieces.append(tail)
    truth.events = count
    yield "".join(pieces)


@contextmanager
def _open(path: Path, spec: TraceSpec):
    """A binary sink; gzip members get mtime 0 and no name so the same spec gives the same bytes."""
    with open(path, "wb", buffering=1 << 20) as raw:
        if not spec.gzip:
            yield raw
            return
        if spec.gzip_level <= 3:             # isal's fast levels (writing a GB in seconds)
            from isal.igzip import IGzipFile as GzipFile
        else:
            from gzip import GzipFile
        with GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=spec.gzip_level, mtime=0) as out:
            yield out


def resolve_target(spec: TraceSpec) -> TraceSpec:
    """Turn `target_bytes` into a step count: measure two steps, extrapolate the steady state."""
    if spec.target_bytes is None:
        return spec
    probe = replace(spec.with_steps(2), target_bytes=None, gzip=False)
    truth = TraceTruth("", 0, probe.world_size, probe.era, 0)
    timeline = RankTimeline(probe, probe.ranks[0], truth)
    renderer = _Renderer(probe)
    sizes = [sum(len(renderer.render(ev)) + 2 for ev in timeline.step(n)) for n in probe.steps]
    fixed = sum(len(renderer.render(ev)) + 2 for ev in timeline.metadata_events()) + 4096
    steps = max(1, round((spec.target_bytes - fixed) / max(sizes[-1], 1)))
    return replace(spec.with_steps(steps), target_bytes=None)


def write_trace(path: str | Path, spec: TraceSpec, rank: int = 0, *,
                collective_ends: list[int] | None = None) -> TraceTruth:
    """Write one rank's trace to `path` (gzip when spec.gzip) and return what it contains. collective_ends:
    where each allreduce ends (write_trace_set's coupling); without it each lasts the transfer it draws."""
    spec = resolve_target(spec)
    if not 0 <= rank < spec.world_size:
        raise ValueError(f"rank {rank} is outside world_size {spec.world_size}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    truth = TraceTruth(str(path), rank, spec.world_size, spec.era, spec.base_time_ns if spec.era == "C" else 0)
    trace_name = f"/tmp/tmp{spec.seed:04d}r{rank}.json" if spec.gzip else str(path)
    with _open(path, spec) as out:
        for text in _chunks(spec, rank, truth, trace_name, collective_ends):
            out.write(text.encode())
    truth.finish()
    return truth


def write_trace_set(folder: str | Path, spec: TraceSpec) -> dict[int, TraceTruth]:
    """One file per rank, `rank{R}.pt.trace.json[.gz]`, each with distributedInfo when world_size > 1."""
    folder = Path(folder)
    spec = resolve_target(spec)
    ends = coupled_ends(spec) if spec.coupled_collectives else None
    return {rank: write_trace(folder / f"rank{rank}{spec.suffix}", spec, rank, collective_ends=ends)
            for rank in spec.ranks}


def coupled_ends(spec: TraceSpec, rounds: int = 8) -> list[int] | None:
    """Where each allreduce ends, the same ns on every rank, when the ranks are coupled as NCCL couples
    them: the last arriver's drawn transfer after it arrived (ties: the lowest rank); None without one. An
    end can delay the next collective on its stream, so the ends are settled in rounds until no arrival
    moves."""
    ends: list[int] | None = None
    for _ in range(rounds):
        arrivals = {}
        for rank in spec.ranks:
            timeline = RankTimeline(spec, rank, TraceTruth("", rank, spec.world_size, spec.era, 0), ends)
            for _row in _events(spec, timeline):
                pass
            arrivals[rank] = timeline.collective_arrivals
        counts = {len(found) for found in arrivals.values()}
        if counts == {0}:
            return None
        assert len(counts) == 1, "every rank runs the same steps, so the same collectives"
        settled = []
        for index in range(counts.pop()):
            start, transfer_ns = max((arrivals[rank][index] for rank in spec.ranks), key=lambda a: a[0])
            settled.append(start + transfer_ns)
        if settled == ends:
            return ends
        ends = settled
    raise RuntimeError(f"the coupled collectives did not settle in {rounds} rounds")


def write_events(path: str | Path, spec: TraceSpec, events: Iterable[tuple], rank: int = 0) -> None:
    """A trace of exactly `events` (neutral tuples, events.py) in the spec's era, layout and header: cases
    whose truth a test plants by hand and the timeline does not make (a CPU-only capture: host ops alone)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head, tail = _header_and_footer(spec, rank, str(path))
    separator = ",\n" if spec.layout != "compact" else ","
    with _open(path, spec) as out:
        out.write((head + separator.join(render_events(spec, events)) + tail).encode())


def render_events(spec: TraceSpec, events: Iterable[tuple]) -> list[str]:
    """Rendered text of neutral events (for tests and debugging)."""
    renderer = _Renderer(spec)
    return [renderer.render(ev) for ev in events]
