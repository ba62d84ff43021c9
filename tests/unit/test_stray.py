"""Stray stamps: the in-place path for stamps in order equals sorting them first."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors._stray import STRAY_GAP_S, Y2000_S, stray_times


def _by_sorting(times: npt.NDArray[np.float64], timed: npt.NDArray[np.bool_]) -> np.ndarray:
    """The rule as written, on a sorted copy of the timed stamps."""
    rows = np.flatnonzero(timed)
    stray = np.zeros(times.size, dtype=bool)
    if rows.size < 3:
        return stray
    order = np.argsort(times[rows], kind="stable")
    s = times[rows][order]
    mid = s.size // 2
    odd = np.zeros(s.size, dtype=bool)
    gaps = np.flatnonzero(np.diff(s) > STRAY_GAP_S)
    if gaps[gaps < mid].size:
        odd[: int(gaps[gaps < mid][-1]) + 1] = True
    if gaps[gaps >= mid].size:
        odd[int(gaps[gaps >= mid][0]) + 1 :] = True
    if s[mid] >= Y2000_S:
        odd |= s < Y2000_S
    stray[rows[order[odd]]] = True
    return stray


_STAMP = st.one_of(
    st.floats(1.7e9, 1.7e9 + 3 * STRAY_GAP_S),  # a job's days
    st.sampled_from([0.0, 1.0, 5e8, 2.0e9, 1.7e9 + 400 * STRAY_GAP_S]),  # clocks astray
)


@settings(max_examples=300, deadline=None)
@given(
    stamps=st.lists(_STAMP, min_size=0, max_size=40),
    in_order=st.booleans(),
    untimed=st.lists(st.booleans(), min_size=40, max_size=40),
    all_timed=st.booleans(),
)
def test_stamps_in_order_or_not_timed_or_not_give_the_same_strays(
    stamps: list[float], in_order: bool, untimed: list[bool], all_timed: bool
) -> None:
    times = np.array(sorted(stamps) if in_order else stamps, dtype=np.float64)
    skipped = np.array(untimed[: times.size], dtype=bool)
    timed = np.ones(times.size, dtype=bool) if all_timed else ~skipped
    want = _by_sorting(times, timed)
    assert np.array_equal(stray_times(times, timed), want)
    if all_timed:
        assert np.array_equal(stray_times(times), want)


def test_a_1970_stamp_and_one_a_year_later_are_found_in_a_capture_in_order() -> None:
    times = np.concatenate(([0.0], 1.7e9 + np.arange(1000) * 0.01, [1.7e9 + 365 * STRAY_GAP_S]))
    assert np.flatnonzero(stray_times(times)).tolist() == [0, 1001]
