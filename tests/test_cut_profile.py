"""The driver's split of piled cut profiles (attribution/cut.py with_lengths + profile_before) on planted
truth: exact self time before a cut, whether a row's gaps fit int32 or not."""

from __future__ import annotations

import numpy as np
import pytest

from traceattr.attribution.cut import CutProfile, profile_before, with_lengths


def piled(gap_ns: int) -> CutProfile:
    """Two rows as the driver piles them (points concatenated, no lengths): row 0 alone for 1 s, shared by 2
    activities for `gap_ns`, alone for 1 s; row 1 alone for 10 ns, shared by 3 for 20 ns."""
    times = np.array([0, 10**9, 10**9 + gap_ns, 2 * 10**9 + gap_ns, 10, 20, 40], np.int64)
    running = np.array([1, 2, 1, 0, 1, 3, 0], np.int8)
    return CutProfile(times, running, None, np.array([0, 4]), np.array([3, 6]))


@pytest.mark.parametrize("gap_ns, dtype", [(2 * 10**9, np.int32), (3 * 10**9, np.int64)])
def test_piled_profiles_split_exactly_with_narrow_or_wide_gaps(gap_ns, dtype):
    profile = with_lengths(piled(gap_ns))
    assert profile.length.dtype == dtype
    assert profile.length.tolist() == [10**9, gap_ns, 10**9, 0, 10, 20, 0]     # nothing after a row's end
    cuts = np.array([10**9 + gap_ns // 2, 25])
    # row 0: 1 s alone + half of the shared half; row 1: 10 ns alone + floor(5 / 3)
    assert profile_before(profile, cuts).tolist() == [10**9 + gap_ns // 4, 11]
    ends = np.array([2 * 10**9 + gap_ns, 40])          # the whole rows: their exact self time
    assert profile_before(profile, ends).tolist() == [2 * 10**9 + gap_ns // 2, 10 + 20 // 3]
