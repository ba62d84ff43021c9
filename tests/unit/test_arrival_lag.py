"""Source time stamps onto the agent's clock (collectors._lag): the lag recovers.

Over all time, the smallest arrival-minus-stamp lag never rose again: one NCCL line stamped
120 s ahead, or NCCL's local-time stamps stepping back an hour (DST), placed every later call
in the past, outside every window, and T from the log was gone until a restart.
"""

from __future__ import annotations

import numpy as np
import pytest

from collectors._lag import LAG_HORIZON_S, WALL_STAMP_S, ArrivalLag, WallStamps

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


def _read_through(lags: ArrivalLag, backlog_s: float, poll_s: float, per_read_s: float):
    """A log of lines every 10 ms written from ``-backlog_s`` (agent clock) on, read from its
    start: each poll reads ``per_read_s`` of it (16 MiB of a busy log hold a minute or more)
    until it reaches what was written by then. Yields (written, placed) per read."""
    written_to = -backlog_s
    arrival = 0.0
    while arrival < 40.0:
        upto = min(written_to + per_read_s, arrival)
        written = np.arange(written_to, upto, 0.01)
        written_to = max(upto, written_to)
        if written.size:
            yield written, lags.times(written - OFFSET, arrival + 0.005)
        arrival += poll_s


def test_a_backlog_read_from_its_start_is_not_placed_on_the_reads() -> None:
    """A log read from its start (a restart without state, a file found late): each read of
    many seconds of lines lowered the lag line by line, and every line landed on its read:
    calls bunched at the polls, T the poll interval. Until the reads reach the live end the
    lines are left unplaced; from there on they are placed where they were written."""
    caught_up = False
    for written, placed in _read_through(ArrivalLag(backlog_s=5.0), 300.0, 0.2, 20.0):
        if not np.isfinite(placed).any():
            assert not caught_up  # unplaced only before the live end
            continue
        caught_up = True
        assert np.all(np.abs(placed - written) < 0.02)
    assert caught_up


def test_without_the_backlog_rule_a_backlog_lands_on_its_reads() -> None:
    # What the rule is for: the plain lag puts each catching-up read's lines on its arrival.
    bunched = 0
    for written, placed in _read_through(ArrivalLag(), 300.0, 0.2, 20.0):
        if written[-1] < -1.0:  # still in the backlog: 20 s of lines squeezed into a poll
            bunched += int(np.ptp(placed) < 0.25 and np.ptp(written) > 19.0)
    assert bunched >= 10


def test_lines_waiting_in_a_buffer_are_not_a_backlog() -> None:
    """Lines buffered up to 4 s before they are read (stdout to a file, flushed in blocks):
    every one placed once the first read's lag is known."""
    rng = np.random.default_rng(5)
    lags = ArrivalLag(backlog_s=5.0)
    unplaced = 0
    for k in range(300):
        arrival = 0.2 * k + 5.0
        written = np.sort(arrival - rng.uniform(0.01, 4.0, 20))
        placed = lags.times(written - OFFSET, arrival)
        unplaced += int(np.isnan(placed).sum())
        if k > int(LAG_HORIZON_S / 0.2):
            assert np.all(placed - written < 0.2)
    assert unplaced == 0


WALL = 1.7e9  # wall clock minus agent clock


def test_rows_on_the_hosts_wall_clock_are_placed_as_stamped() -> None:
    """GPU rows at 10 Hz read every 0.2 s (or flushed 0.5 s late): the least lag held a fixed
    part of the delivery delay, and the samples landed that late against the network's (an
    exposed share of 0.15 read 0.069, or 0.000). On this host's wall clock they are exact."""
    for delay in (0.0, 0.5):
        lags = WallStamps(lambda: WALL)
        for k in range(100):
            sampled = 10.0 + 0.1 * k
            arrival = 10.0 + 0.2 * (k // 2 + 1) + delay  # read at the next 0.2 s poll
            assert lags.time(sampled + WALL, arrival) == pytest.approx(sampled, abs=1e-6)


def test_stamps_not_on_this_wall_clock_fall_back_to_the_lag() -> None:
    """Stamps ahead of their arrival (another clock), an hour off (local time read as UTC),
    or without a wall clock to compare with: the least lag places them, as before."""
    for shift in (+0.4, -3600.0):
        wall = WallStamps(lambda: WALL)
        plain = ArrivalLag()
        for k in range(50):
            arrival = 5.0 + 0.1 * k + 0.05
            stamp = WALL + arrival - 0.05 + shift  # written 50 ms before its read, on a clock off
            assert wall.time(stamp, arrival) == plain.time(stamp, arrival)
    no_wall, plain = WallStamps(lambda: None), ArrivalLag()
    assert no_wall.time(WALL + 1.0, 3.0) == plain.time(WALL + 1.0, 3.0)
    assert no_wall.time(None, 3.0) == 3.0


def test_a_backlog_older_than_the_window_is_placed_by_the_fresh_rows_lag() -> None:
    """Rows from ten minutes ago (a file read from its start) are placed by the lag that the
    fresh rows, stamped on the wall clock, keep current: in the past, not on their read."""
    lags = WallStamps(lambda: WALL)
    for k in range(20):  # fresh rows, read 10 ms after their stamp
        lags.time(WALL + 600.0 + 0.1 * k, 600.0 + 0.1 * k + 0.01)
    old = lags.time(WALL + 5.0, 602.0)
    assert old == pytest.approx(5.0 + 0.01, abs=1e-6)
    assert 602.0 - old > WALL_STAMP_S
