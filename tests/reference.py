"""An independent reference for traceattr's device-time numbers, in plain Python.

Nothing here imports traceattr or numpy: JSON is decoded with the stdlib (`parse_float=Decimal`, so every
timestamp is exact in every era), times become int ns with Decimal arithmetic (kineto-format.md 3), and
fair-share self time is computed as exact `fractions.Fraction`s over elementary segments.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from pathlib import Path

# kernel/memcpy/memset in any case, plus the 2020 writer's Kernel/Memcpy/Memset; never annotations or syncs
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
_RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z0-9])rank[-_]?(\d+)(?!\d)")


@dataclass
class DeviceReference:
    """Exact numbers for one (rank, device), summed over the rank's windows."""
    busy_ns: int = 0
    duration_ns: int = 0
    activities: int = 0
    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    duration_by_name: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    self_by_name: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))


def read_json(path: Path) -> dict:
    """The whole document; gzip is recognised by its magic bytes, whatever the file is called."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal, parse_int=int)


def to_ns(value_us, base_ns: int) -> int:
    """µs as written (int or Decimal) -> int ns, exact; sub-ns digits (never written by Kineto) half-even."""
    ns = (Decimal(value_us) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
    return base_ns + int(ns)


def file_rank(path: Path, doc: dict) -> int:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    matches = _RANK_IN_NAME.findall(Path(path).name)
    return int(matches[-1]) if matches else 0


def device_activities(doc: dict) -> list[tuple[int, str, int, int]]:
    """(device pid, name, start_ns, end_ns) of every device activity; era C adds baseTimeNanoseconds
    wherever it sits in the file, eras A and B are absolute µs. Negative durations count as 0."""
    base = doc.get("baseTimeNanoseconds")
    base_ns = base if isinstance(base, int) else 0
    out = []
    for event in doc.get("traceEvents", []):
        if event.get("ph") != "X" or str(event.get("cat", "")).lower() not in DEVICE_CATEGORIES:
            continue
        start = to_ns(event["ts"], base_ns)
        duration = max(0, to_ns(event["dur"], 0))
        out.append((event["pid"], event["name"], start, start + duration))
    return out


def union_ns(intervals) -> int:
    """Length of the union of [start, end) intervals, in plain Python (independent of the sweep)."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def fair_share(intervals: list[tuple[str, int, int]]) -> tuple[int, dict[str, Fraction]]:
    """(busy ns, exact self time per name): every elementary segment's length split equally between the
    activities covering it. Event sweep with an explicit active list, integer sums per share count."""
    points = sorted({t for _, s, e in intervals for t in (s, e)})
    starts_at: dict[int, list[int]] = defaultdict(list)
    ends_at: dict[int, list[int]] = defaultdict(list)
    for index, (_, start, end) in enumerate(intervals):
        if end > start:
            starts_at[start].append(index)
            ends_at[end].append(index)
    active: set[int] = set()
    by_share: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))   # name -> k -> Σ length
    busy = 0
    for left, right in zip(points, points[1:]):
        active.difference_update(ends_at.get(left, ()))
        active.update(starts_at.get(left, ()))
        if active:
            busy += right - left
            for index in active:
                by_share[intervals[index][0]][len(active)] += right - left
    self_time = {name: sum((Fraction(total, k) for k, total in shares.items()), Fraction(0))
                 for name, shares in by_share.items()}
    return busy, self_time


def brute_force(intervals: list[tuple[str, int, int]]) -> tuple[int, dict[str, Fraction]]:
    """The same by definition, O(segments x activities): a check of `fair_share` on small inputs."""
    points = sorted({t for _, s, e in intervals for t in (s, e)})
    busy, self_time = 0, defaultdict(Fraction)
    for left, right in zip(points, points[1:]):
        covering = [name for name, s, e in intervals if s <= left and right <= e and e > s]
        if covering:
            busy += right - left
            for name in covering:
                self_time[name] += Fraction(right - left, len(covering))
    return busy, dict(self_time)


def reference(paths: list[Path]) -> dict[tuple[int, int], DeviceReference]:
    """Per (rank, device): busy, Σ duration, counts and exact self per name, over all windows (files)."""
    result: dict[tuple[int, int], DeviceReference] = defaultdict(DeviceReference)
    for path in paths:
        doc = read_json(path)
        rank = file_rank(path, doc)
        per_device: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        for device, name, start, end in device_activities(doc):
            per_device[device].append((name, start, end))
        for device, intervals in per_device.items():
            ref = result[(rank, device)]
            busy, self_time = fair_share(intervals)
            if len(intervals) <= 200:
                assert (busy, {k: v for k, v in self_time.items() if v}) == \
                    (lambda b, s: (b, {k: v for k, v in s.items() if v}))(*brute_force(intervals))
            ref.busy_ns += busy
            for name, start, end in intervals:
                ref.activities += 1
                ref.count[name] += 1
                ref.duration_ns += end - start
                ref.duration_by_name[name] += end - start
            for name, share in self_time.items():
                ref.self_by_name[name] += share
    return dict(result)
