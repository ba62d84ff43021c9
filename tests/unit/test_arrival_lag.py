"""Source time stamps onto the agent's clock (collectors._lag): the lag recovers.

Over all time, the smallest arrival-minus-stamp lag never rose again: one NCCL line stamped
120 s ahead, or NCCL's local-time stamps stepping back an hour (DST), placed every later call
in the past, outside every window, and T from the log was gone until a restart.
"""

from __future__ import annotations

import numpy as np
import pytest

from collectors._lag import LAG_HORIZON_S, ArrivalLag

OFFSET = 1000.0  # agent clock minus wall clock


def _feed(lags: ArrivalLag, start: float, seconds: float, shift: float = 0.0) -> list[float]:
    """Lines written every 0.2 s from ``start`` (agent clock), read 10 ms later; their stamps
    are wall-clock plus ``shift``. Returns each line's placing error (placed minus written)."""
    errors = []
    for k in range(int(seconds / 0.2)):
        written = start + 0.2 * k
        placed = lags.time(written - OFFSET + shift, written + 0.01)
        errors.append(placed - written)
    return errors


@pytest.mark.parametrize("shift", [120.0, -3600.0])
def test_a_stamp_ahead_or_a_clock_stepped_back_is_forgotten_after_the_horizon(
    shift: float,
) -> None:
    lags = ArrivalLag()
    assert max(abs(e) for e in _feed(lags, 0.0, 10.0)) < 0.02
    if shift > 0:  # one line stamped two minutes ahead, then the clock as before
        lags.time(10.0 - OFFSET + shift, 10.01)
        errors = _feed(lags, 10.2, 60.0)
    else:  # every stamp from now on an hour behind (the fall-back hour)
        errors = _feed(lags, 10.2, 60.0, shift)
    assert min(errors) < -100.0  # misplaced at first (within the horizon) ...
    settled = errors[int((LAG_HORIZON_S + 1.0) / 0.2) :]
    assert settled
    assert max(abs(e) for e in settled) < 0.02  # ... and right once it has passed


def test_one_stamp_at_a_time_and_many_at_once_agree() -> None:
    one, many = ArrivalLag(), ArrivalLag()
    rng = np.random.default_rng(3)
    for k in range(200):
        arrival = 0.25 * k
        stamps = arrival - OFFSET - rng.uniform(0.0, 0.3, 5)
        if k == 50:
            stamps[2] += 300.0  # a stamp far ahead
        placed_one = [one.time(float(s), arrival) for s in stamps]
        placed_many = many.times(stamps, arrival)
        np.testing.assert_array_equal(placed_many, np.array(placed_one))
        assert one.lag == many.lag


def test_the_lag_is_the_least_of_the_horizon_not_the_next_line_after_it() -> None:
    """Lines that wait 10 ms to 2 s in a buffer: the lag in use is the smallest delay of the
    last 30 s, at every line, not whatever the first line after an expiry happened to wait."""
    rng = np.random.default_rng(11)
    one, many = ArrivalLag(), ArrivalLag()
    worst_one = worst_many = 0.0
    for k in range(int(150.0 / 0.2)):
        written = 0.2 * k
        arrival = written + rng.uniform(0.01, 2.0)
        placed = one.time(written - OFFSET, arrival)
        placed_many = float(many.times(np.array([written - OFFSET]), arrival)[0])
        if written > LAG_HORIZON_S:
            worst_one = max(worst_one, placed - written)
            worst_many = max(worst_many, placed_many - written)
    assert worst_one < 0.2  # the least delay of ~150 lines, not a random one of up to 2 s
    assert worst_many < 0.2
