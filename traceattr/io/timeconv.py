"""Exact conversion of trace timestamps (µs as written) to int64 ns, per era (kineto-format.md 3).

* float µs (eras A, C and relative): split off the integer part, then round the fraction. The fraction
  `us - floor(us)` is exact in float64, and for |us| < 2^43 it is within 0.5 ns of the three written
  decimals, so `rint` recovers them. The tempting `rint(us * 1000)` is off by 1 ns for ~0.4% of era-C values
  because the product itself is rounded to a 1 ns spacing.
* Decimal µs (era B, absolute µs with three decimals): exact integer arithmetic on the decimal text.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Iterable

import numpy as np

from traceattr import schema as S

EPOCH_US_FLOOR = 1e14      # below this a `ts` cannot be epoch µs (1973): relative time
ERA_B_US_FLOOR = 1e15      # absolute µs of any real capture (2001 on)


def float_us_to_ns(us: np.ndarray) -> np.ndarray:
    """float64 µs -> int64 ns, exact for values written with up to 3 decimals below 2^43 µs."""
    us = np.asarray(us, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def decimal_us_to_ns(values: Iterable[Decimal], count: int = -1) -> np.ndarray:
    """Decimal µs -> int64 ns, exact (sub-ns digits are rounded half-even, as Decimal does)."""
    return np.fromiter((int((value * 1000).to_integral_value()) for value in values), np.int64, count)


def detect_era(*, has_base: bool, display_unit: str | None, max_ts_us: float | None,
               fractional_absolute: bool) -> str:
    """The timestamp era of one file (kineto-format.md 3.1) from its header and its float `ts` values:
    the largest `ts` in µs (None without timed events) and whether any epoch-sized `ts` has decimals."""
    if has_base:
        return S.ERA_C
    if max_ts_us is None:
        return S.ERA_B if display_unit == "ns" else S.ERA_A
    if max_ts_us < EPOCH_US_FLOOR:
        return S.ERA_RELATIVE
    if display_unit == "ns" or fractional_absolute:
        return S.ERA_B
    return S.ERA_A
