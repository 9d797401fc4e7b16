"""Writes small adversarial Kineto traces, each exercising one fact of docs/kineto-format.md.

Times are given in absolute int ns (or as a literal JSON token, `Raw`), and written in the era's own
format: era A integer µs, era B absolute µs with three decimals, era C µs relative to
baseTimeNanoseconds. A host side (ProfilerStep#1 > aten::mm > one cudaLaunchKernel per device activity,
linked by correlation) is added so that the op and step tables have something to attribute.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path


class Raw(str):
    """A JSON token written exactly as given (a number in a precise textual form)."""


ERA_C_BASE_NS = 1711964646000000000
EPOCH_NS = 1712195495519689047                 # an era-B style absolute time (April 2024)


def float_trap_tokens(count: int, seed: int = 7) -> list[str]:
    """Era-C relative µs tokens for which the obvious rint(float(ts) * 1000) is 1 ns off."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        ns = rng.randrange(4_400_000_000_000_000, 4_500_000_000_000_000)
        text = f"{ns // 1000}.{ns % 1000:03d}"
        if round(float(text) * 1000) != ns:
            out.append(text)
    return out


class TraceBuilder:
    def __init__(self, era: str, *, display_unit: str | None = None, base_after: bool = False,
                 distributed_rank: int | None = None, host: bool = True, legacy: bool = False):
        self.era, self.display_unit, self.base_after = era, display_unit, base_after
        self.distributed_rank, self.host, self.legacy = distributed_rank, host, legacy
        self.base_ns = ERA_C_BASE_NS if era == "C" else 0
        self.device: list[dict] = []
        self.extra: list[dict] = []
        self.head_m: list[dict] = []
        self.tail_m: list[dict] = []

    def token(self, ns, *, duration: bool = False) -> Raw:
        if isinstance(ns, Raw):
            return ns
        value = ns if duration else ns - self.base_ns
        if self.era == "A":
            assert value % 1000 == 0, "era A holds whole µs only"
            return Raw(str(value // 1000))
        sign, value = ("-", -value) if value < 0 else ("", value)
        return Raw(f"{sign}{value // 1000}.{value % 1000:03d}")

    def activity(self, name: str, start, dur, *, stream=7, pid=0, cat="kernel", args: dict | None = None):
        correlation = 1000 + len(self.device)
        full_args = {"External id": correlation, "device": pid, "stream": stream, "correlation": correlation}
        full_args.update(args or {})
        self.device.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": stream,
                            "ts": self.token(start), "dur": self.token(dur, duration=True), "args": full_args})
        return self

    def add(self, event: dict):
        self.extra.append(event)
        return self

    def _host(self) -> list[dict]:
        if not self.host or not self.device:
            return []
        first = min(self._ns(e["ts"]) for e in self.device)
        step_ns = (first - 1_000_000 - 1000 * len(self.device)) // 1000 * 1000
        op_cat, rt_cat = ("Operator", "Runtime") if self.legacy else ("cpu_op", "cuda_runtime")
        n = len(self.device)
        events = [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 4242, "tid": 4242,
             "ts": self.token(step_ns), "dur": self.token(1000 * (n + 4), duration=True), "args": {"External id": 1}},
            {"ph": "X", "cat": op_cat, "name": "aten::mm", "pid": 4242, "tid": 4242,
             "ts": self.token(step_ns + 1000), "dur": self.token(1000 * (n + 2), duration=True),
             "args": {"External id": 2}}]
        for i, activity in enumerate(self.device):
            events.append({"ph": "X", "cat": rt_cat, "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
                           "ts": self.token(step_ns + 2000 + 1000 * i), "dur": self.token(0, duration=True),
                           "args": {"External id": 2, "correlation": activity["args"]["correlation"]}})
        return events

    def _ns(self, token: str) -> int:
        from decimal import Decimal
        return int(Decimal(token) * 1000) + self.base_ns

    def document(self) -> dict:
        events = self.head_m + self._host() + self.device + self.extra + self.tail_m
        head: dict = {"schemaVersion": 1, "deviceProperties": []}
        if self.distributed_rank is not None:
            head["distributedInfo"] = {"backend": "nccl", "rank": self.distributed_rank, "world_size": 8}
        late: dict = {}
        if self.era == "C":
            (late if self.base_after else head)["baseTimeNanoseconds"] = self.base_ns
        if self.display_unit:
            (late if self.base_after else head)["displayTimeUnit"] = self.display_unit
        return {**head, "traceEvents": events, "traceName": "/tmp/xyz.json", **late}

    def write(self, path: Path, layout: str = "compact", compress: bool = False) -> Path:
        text = render(self.document(), layout)
        path.write_bytes(gzip.compress(text.encode(), 9) if compress else text.encode())
        return path


def _encode(value, indent: int | None, level: int) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, (dict, list)):
        items = ([f"{json.dumps(k)}: {_encode(v, indent, level + 1)}" for k, v in value.items()]
                 if isinstance(value, dict) else [_encode(v, indent, level + 1) for v in value])
        opener, closer = ("{", "}") if isinstance(value, dict) else ("[", "]")
        if indent is None or not items:
            return opener + ",".join(items) + closer
        pad, inner = " " * (indent * level), " " * (indent * (level + 1))
        return opener + "\n" + ",\n".join(inner + item for item in items) + "\n" + pad + closer
    return json.dumps(value)


def render(doc: dict, layout: str) -> str:
    """compact: the whole file on one line; keyline: torch 2.13's C++ writer (every key on its own line,
    events at a two-space indent); eventline: torch 2.13's Python exporter (one compact event a line)."""
    if layout == "compact":
        return _encode(doc, None, 0)
    if layout == "keyline":
        return _encode(doc, 2, 0)
    if layout == "eventline":
        parts = []
        for key, value in doc.items():
            if key == "traceEvents":
                body = ",\n".join(_encode(e, None, 0) for e in value)
                parts.append(f'"traceEvents": [\n{body}\n]')
            else:
                parts.append(f"{json.dumps(key)}: {_encode(value, None, 0)}")
        return "{\n" + ",\n".join(parts) + "\n}\n"
    raise ValueError(layout)


def metadata_rows(pids: list, ts: Raw) -> list[dict]:
    """process_name / thread_name rows as kineto writes them (a `ts`, string pids allowed)."""
    rows = []
    for pid in pids:
        rows.append({"ph": "M", "name": "process_name", "ts": ts, "pid": pid, "tid": 0, "args": {"name": "x"}})
        rows.append({"ph": "M", "name": "thread_name", "ts": ts, "pid": pid, "tid": 7,
                     "args": {"name": "stream 7 "}})
    return rows
