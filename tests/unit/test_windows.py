"""Rolling windows: the live path must see what the offline path sees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.rates import GridSeries, direction_grids
from agent.tracker import (
    PAUSE_MAX_S,
    PauseMemory,
    PeriodTracker,
    first_activity_s,
    job_gone,
    longest_gap_s,
    periods_kept_after_lost_lock,
)
from agent.windows import FORGET_COLUMN_AFTER_S, CollectiveWindow, CounterWindow, GpuWindow, Ring
from collectors._base import CallBatch, CallKey, CollectiveCall, CounterReading, GpuReading


def test_ring_keeps_the_newest_rows_in_order() -> None:
    r = Ring(4, 1)
    for i in range(6):
        r.append([i])
    assert r.view()[:, 0].tolist() == [2, 3, 4, 5]
    assert r.last() is not None
    r.drop_before(4)
    assert r.view()[:, 0].tolist() == [4, 5]


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(2, 12),
    times=st.lists(st.floats(0, 100, allow_nan=False), max_size=40),
    t=st.one_of(st.none(), st.floats(-1, 101, allow_nan=False)),
    order=st.sampled_from(["as drawn", "sorted", "sorted, one late row"]),
    batches=st.lists(st.integers(1, 15), max_size=6),
)
def test_ring_since_and_first_equal_filtering_the_whole_view(
    capacity: int,
    times: list[float],
    t: float | None,
    order: str,
    batches: list[int],
) -> None:
    # Windows read "the rows since t" every hop; only those rows are copied, the same ones,
    # whether the times came in order (since bisects) or not (since compares every row).
    if order != "as drawn":
        times = sorted(times)
    if order == "sorted, one late row" and len(times) > 2:
        times.insert(len(times) // 2, times.pop())
    r = Ring(capacity, 2)
    rows = [(x, float(i)) for i, x in enumerate(times)]
    at = 0
    for size in batches:  # some rows come in batches (extend), the rest one by one
        r.extend(np.array(rows[at : at + size], dtype=np.float64).reshape(-1, 2))
        at += size
    for row in rows[at:]:
        r.append(row)
    whole = r.view()
    expected = whole if t is None else whole[whole[:, 0] >= t]
    np.testing.assert_array_equal(r.since(t), expected)
    first = r.first()
    assert (first is None) == (len(r) == 0)
    if first is not None:
        np.testing.assert_array_equal(first, whole[0])
    if t is not None:
        r.drop_before(t)
        np.testing.assert_array_equal(r.view(), expected)
        r.append((1000.0, -1))  # and it goes on as a ring
        assert r.view()[-1].tolist() == [1000.0, -1.0]


def _readings(times: np.ndarray, tx: np.ndarray, rx: np.ndarray) -> list[CounterReading]:
    return [
        CounterReading(float(t), {"nic_tx_bytes": int(a), "nic_rx_bytes": int(b)})
        for t, a, b in zip(times, tx, rx, strict=True)
    ]


def test_live_grid_equals_offline_grid_with_a_reset_and_a_wrap() -> None:
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.uniform(0.009, 0.011, 500))
    tx = np.cumsum(rng.integers(0, 10_000, 500)).astype(np.uint64) + np.uint64(10)
    tx[300:] -= tx[299]  # the driver reloaded: counter restarts from 0
    rx = (np.cumsum(rng.integers(0, 10_000_000, 500)) + (2**32 - 2_000_000_000)) % 2**32
    rx = rx.astype(np.uint64)
    w = CounterWindow(1000)
    for r in _readings(times, tx, rx):
        w.add(r)
    live = w.grids(dt=0.01)
    offline = direction_grids(times, {"nic_tx_bytes": tx, "nic_rx_bytes": rx}, dt=0.01)
    for d in ("tx", "rx"):
        np.testing.assert_allclose(live[d].rate, offline[d].rate, rtol=1e-9, equal_nan=True)
    assert w.resets == 1
    assert w.wraps >= 1


def test_a_column_missing_from_a_poll_makes_that_interval_unknown() -> None:
    w = CounterWindow(100)
    t = 0.0
    for i in range(20):
        t += 0.01
        values = {"a_tx_bytes": 1000 * i, "b_tx_bytes": 500 * i}
        if i == 10:
            del values["b_tx_bytes"]
        w.add(CounterReading(t, values))
    g = w.grids(dt=0.01)["tx"]
    assert int((~g.valid).sum()) in (2, 3)  # the missed poll and the one after it
    assert np.nanmax(g.rate) == pytest.approx(150_000.0)


def test_duplicate_or_backwards_poll_is_ignored() -> None:
    w = CounterWindow(10)
    w.add(CounterReading(1.0, {"x_tx_bytes": 10}))
    w.add(CounterReading(1.0, {"x_tx_bytes": 20}))
    w.add(CounterReading(0.5, {"x_tx_bytes": 30}))
    assert len(w) == 1


def test_gpu_window_and_signal_change() -> None:
    g = GpuWindow(10)
    g.add(GpuReading(0.1, 0, {"util": 1.0}))
    g.add(GpuReading(0.2, 0, {"util": 1.0}))
    s = g.samples()
    assert s is not None
    assert set(s.signals) == {"util"}
    g.add(GpuReading(0.3, 0, {"util": 1.0, "sm_active": 0.5}))
    assert g.samples() is None  # a new signal set restarts the window
    g.add(GpuReading(0.4, 0, {"util": 1.0, "sm_active": 0.5}))
    s = g.samples()
    assert s is not None
    assert set(s.signals) == {"util", "sm_active"}


def test_collective_window_totals_and_timed_calls() -> None:
    c = CollectiveWindow(3)
    for i in range(5):
        c.add(CollectiveCall(float(i), "AllReduce", 100, 8, comm="0x1"))
    c.add(CollectiveCall(5.0, "AllGather", None, 16, comm="0x2"))
    mix = c.mix(since=3.0)
    assert mix is not None
    assert mix.ops["AllReduce"] == (5, 500)
    assert mix.ops["AllGather"] == (1, 0)
    assert mix.nranks == 16
    assert mix.call_times.tolist() == [3.0, 4.0, 5.0]


def test_a_vanished_device_is_forgotten_and_its_direction_goes_on() -> None:
    # Port b goes away at 1 s (hot-unplug) and comes back at 6 s from a reset counter.
    w = CounterWindow(2000)
    for i in range(1, 1000):
        t = i * 0.01
        values = {"a_tx_bytes": 1000 * i}
        if t < 1.0 or t >= 6.0:
            values["b_tx_bytes"] = 500 * i if t < 1.0 else 7 * (i - 600)
        w.add(CounterReading(t, values))
    g = w.grids(dt=0.01)["tx"]
    times = g.t0 + g.dt * np.arange(g.rate.size)
    unknown = times[~g.valid]
    # Only while b might still come back is an interval unknown; then a alone is summed.
    assert unknown.min() >= 0.98
    assert unknown.max() <= 1.0 + FORGET_COLUMN_AFTER_S + 0.02
    alone = (times > 3.1) & (times < 5.9)
    assert g.rate[alone] == pytest.approx(np.full(int(alone.sum()), 100_000.0))
    # Back, b starts afresh: its reset counter is no negative or huge interval.
    back = times > 6.05
    assert g.rate[back] == pytest.approx(np.full(int(back.sum()), 100_700.0))
    assert w.resets == 0


def test_a_slow_poller_does_not_forget_a_device_that_missed_one_poll() -> None:
    w = CounterWindow(100)
    for i in range(1, 8):  # a poll every 5 s; b unread at 20 s
        values = {"a_tx_bytes": 1000 * i, "b_tx_bytes": 1000 * i}
        if i == 4:
            del values["b_tx_bytes"]
        w.add(CounterReading(5.0 * i, values))
    g = w.grids(dt=5.0)["tx"]
    assert int((~g.valid).sum()) == 2  # the missed poll's two intervals: gaps, not dips
    assert np.nanmin(g.rate) == pytest.approx(400.0)  # b still counted everywhere else


def test_tracker_locks_after_two_agreeing_windows_and_relocks_after_a_change() -> None:
    tr = PeriodTracker()
    assert tr.update(1.0).period_s is None
    u = tr.update(1.01)
    assert u.locked
    assert u.period_s == pytest.approx(1.01)
    assert tr.update(1.02).period_s == pytest.approx(1.02)
    # A step change 1.0 → 1.3: one window is not enough, two agreeing ones re-lock.
    assert tr.update(1.3).period_s == pytest.approx(1.02)
    u = tr.update(1.31)
    assert u.changed
    assert u.period_s == pytest.approx(1.31)


def test_a_window_back_near_the_lock_before_the_last_one_is_no_change() -> None:
    """A jittery job's window reads 4.5 % short and is followed; the next one reads 6 % above
    that but 1.6 % above the lock before it: the job did not change, and the window is not
    cut. A real change still re-locks, and the memory goes with the lock."""
    tr = PeriodTracker(hop_s=1.0)
    tr.update(1.388, confidence=0.9)
    assert tr.update(1.326, confidence=0.4).period_s == pytest.approx(1.326)
    u = tr.update(1.41, confidence=0.5)
    assert not u.changed
    assert u.period_s == pytest.approx(1.41)
    assert not tr.update(1.405, confidence=0.6).changed
    # A step change: two agreeing windows far from both re-lock.
    assert tr.update(1.8, confidence=0.9).period_s == pytest.approx(1.405)
    u = tr.update(1.81, confidence=0.9)
    assert u.changed
    assert u.period_s == pytest.approx(1.81)
    # The period before the change is no longer a lock to come back to.
    assert tr.update(1.41, confidence=0.9).period_s == pytest.approx(1.81)
    assert tr.update(1.41, confidence=0.9).changed


def test_a_weak_switch_waits_for_windows_spanning_one_new_period() -> None:
    """At a 1 s hop, two windows read nearly the same bursts: a lock of 2.43 s (steps of 2 or
    3 s at random) switched to a weak 7.0 s (runs of 2+2+3 s, confidence 0.08) on two of them.
    A weak new period now needs a new period's worth of agreeing windows; a confident one
    (a real job whose steps went from 6.04 to 6.39 s) still switches on two."""
    tr = PeriodTracker(hop_s=1.0)
    tr.update(2.43, confidence=0.9)
    for _ in range(6):
        assert tr.update(7.0, confidence=0.08).period_s == pytest.approx(2.43)
    u = tr.update(7.0, confidence=0.08)
    assert u.changed
    assert u.period_s == pytest.approx(7.0)
    # A window back at the lock breaks the run.
    tr = PeriodTracker(hop_s=1.0)
    tr.update(2.43, confidence=0.9)
    for _ in range(4):
        tr.update(7.0, confidence=0.08)
    assert tr.update(2.45, confidence=0.6).period_s == pytest.approx(2.45)
    assert tr.update(7.0, confidence=0.08).period_s == pytest.approx(2.45)
    # Confident: two windows.
    tr = PeriodTracker(hop_s=1.0)
    tr.update(6.04, confidence=0.9)
    assert tr.update(6.39, confidence=0.84).period_s == pytest.approx(6.04)
    assert tr.update(6.39, confidence=0.84).period_s == pytest.approx(6.39)


def test_windows_without_a_period_between_two_agreeing_ones_do_not_hold_a_stale_lock() -> None:
    """A real jittery DDP job whose steps went from 0.53 to about 0.61 s: windows with the new
    step came between windows with no period at all, each of which reset the challenger, and
    the stale 0.53 s stayed locked for 8 s. While locked, a window without a period is a miss,
    not evidence against the new step; with nothing locked it still resets the candidate."""
    tr = PeriodTracker(hop_s=1.0)
    tr.update(0.533, confidence=0.9)
    assert tr.update(0.594, confidence=0.06, rel_error=0.03).period_s == pytest.approx(0.533)
    assert tr.update(None).period_s == pytest.approx(0.533)
    u = tr.update(0.62, confidence=0.1, rel_error=0.03)
    assert u.changed
    assert u.period_s == pytest.approx(0.62)
    cold = PeriodTracker(hop_s=1.0)
    cold.update(0.6, confidence=0.1)
    cold.update(None)
    assert cold.update(0.6, confidence=0.1).period_s is None


def test_tracker_locks_on_one_confident_window_but_switches_only_on_two() -> None:
    tr = PeriodTracker()
    assert tr.update(1.0, confidence=0.3).period_s is None  # modest: wait for a second window
    tr = PeriodTracker()
    u = tr.update(1.0, confidence=0.9)  # clear: lock at once (cold start a period sooner)
    assert u.locked
    assert u.period_s == pytest.approx(1.0)
    # Locked, a confident window on another period is not enough to switch.
    assert tr.update(1.3, confidence=0.95).period_s == pytest.approx(1.0)
    u = tr.update(1.31, confidence=0.95)
    assert u.changed
    assert u.period_s == pytest.approx(1.31)


def test_tracker_widens_to_an_outer_period_seen_twice_over_the_whole_window() -> None:
    # Locked on a 68 ms layer train; the whole window shows the 3.6 s step around it.
    tr = PeriodTracker()
    tr.update(0.068)
    tr.update(0.068)
    assert tr.widen(0.07) is None  # not longer: nothing to do
    assert tr.widen(3.6) is None  # once is not enough
    assert tr.widen(None) is None  # and a miss forgets it
    assert tr.widen(3.6) is None
    assert tr.widen(3.62) == pytest.approx(3.62)
    assert tr.locked == pytest.approx(3.62)
    # Now locked on the step, the layer train's period is no challenger of the widening kind.
    assert tr.widen(0.068) is None
    assert tr.update(3.61).period_s == pytest.approx(3.61)
    assert PeriodTracker().widen(3.6) is None  # nothing locked, nothing to widen


def test_tracker_widens_only_to_a_period_far_longer_than_the_locked_one() -> None:
    """A ring holding two jobs' traffic (T 1.0 s, then 1.3 s) repeats at their common multiple,
    3.9 s: three locked periods are no outer period (the benchmark's no-reset diagnostic
    re-locked on it and stayed); a shallow nesting shows in the locked window itself."""
    tr = PeriodTracker()
    tr.update(1.3, confidence=0.9)
    for _ in range(3):
        assert tr.widen(3.9) is None
    assert tr.locked == pytest.approx(1.3)
    assert tr.widen(5.3) is None
    assert tr.widen(5.3) == pytest.approx(5.3)


def test_tracker_unlocks_after_three_empty_windows() -> None:
    tr = PeriodTracker()
    tr.update(2.0)
    tr.update(2.0)
    assert tr.update(None).period_s == 2.0
    assert tr.update(None).period_s == 2.0
    assert tr.update(None).period_s is None


def test_ticker_keeps_absolute_deadlines_and_skips_missed_ticks() -> None:
    import asyncio

    from agent.clock import FakeClock, Ticker

    clock = FakeClock(100.0)
    ticker = Ticker(clock, 0.5)

    async def run() -> list[float]:
        times = [await ticker.tick(), await ticker.tick()]
        clock.advance(2.2)  # a stall of more than four intervals
        times.append(await ticker.tick())
        times.append(await ticker.tick())
        return times

    times = asyncio.run(run())
    assert times == [100.5, 101.0, 103.5, 104.0]
    assert ticker.skipped == 4


def test_ring_extend_wraps_like_repeated_appends() -> None:
    a, b = Ring(5, 2), Ring(5, 2)
    rows = np.arange(26, dtype=np.float64).reshape(13, 2)
    for chunk in (rows[:3], rows[3:4], rows[4:11], rows[11:]):
        a.extend(chunk)
        for row in chunk:
            b.append(row)
        np.testing.assert_array_equal(a.view(), b.view())


def test_ring_tail_is_the_end_of_the_view_before_and_after_wrapping() -> None:
    ring = Ring(5, 1)
    for i in range(12):
        ring.append((float(i),))
        view = ring.view()
        for n in range(7):
            np.testing.assert_array_equal(ring.tail(n), view[len(view) - min(n, len(view)) :])


def test_collective_window_takes_batches() -> None:
    from collectors._base import CallBatch

    c = CollectiveWindow(100)
    c.add_batch(
        CallBatch(
            times=np.array([1.0, 2.0]),
            s_bytes=np.array([10.0, np.nan]),
            ops={"AllReduce": (1, 10), "Send": (1, 0)},
            nranks=8,
            processes=frozenset({"h:1"}),
        )
    )
    c.add(CollectiveCall(3.0, "AllReduce", 5, 16, comm="0x1", extra={"process": "h:2"}))
    mix = c.mix()
    assert mix is not None
    assert mix.ops == {"AllReduce": (2, 15), "Send": (1, 0)}
    assert mix.nranks == 16
    assert mix.processes == 2
    assert mix.call_times.tolist() == [1.0, 2.0, 3.0]


def test_a_short_window_that_twice_sees_another_period_relocks_at_once() -> None:
    """The step-change watch: two short windows agreeing on a new T re-lock without waiting
    for the new T to dominate the long window."""
    tr = PeriodTracker()
    tr.update(1.0)
    tr.update(1.0)
    assert tr.locked == 1.0
    assert tr.challenge(1.02) is None  # within the short window's jitter: no change
    assert tr.challenge(1.30) is None  # one short window is not enough
    assert tr.challenge(None) is None  # a window without a period breaks the streak
    assert tr.challenge(1.30) is None
    assert tr.challenge(1.31) == pytest.approx(1.31)  # two agreeing: re-locked
    assert tr.locked == pytest.approx(1.31)
    assert tr.update(1.30).period_s == pytest.approx(1.30)  # the long window follows


def test_the_watch_needs_a_lock_and_agreeing_challengers() -> None:
    tr = PeriodTracker()
    assert tr.challenge(2.0) is None  # nothing locked: the normal lock path decides
    tr.update(1.0)
    tr.update(1.0)
    assert tr.challenge(1.5) is None
    assert tr.challenge(2.0) is None  # 1.5 then 2.0 do not agree with each other
    assert tr.challenge(2.0) == 2.0


def test_a_lost_lock_keeps_the_locked_window_only_for_a_job_that_stopped() -> None:
    """After losing the lock, a job still talking restarts on its last few periods (a changed
    job must not re-lock on its old T from the older ring); a stopped job keeps the locked
    window, which holds no burst, so its old bursts do not come back."""
    talking = periods_kept_after_lost_lock(
        stopped=False, lock_window_periods=16.0, restart_periods=5.0
    )
    stopped = periods_kept_after_lost_lock(
        stopped=True, lock_window_periods=16.0, restart_periods=5.0
    )
    assert talking == 5.0
    assert stopped == 16.0
    # Five lost periods of 0.11 s (an FSDP job's layers) hold less than a minimum window:
    # the ring, with the steps those layers were part of, is kept.
    layers = periods_kept_after_lost_lock(
        stopped=False, lock_window_periods=16.0, restart_periods=5.0, locked_s=0.11,
        min_window_s=2.0,
    )  # fmt: skip
    steps = periods_kept_after_lost_lock(
        stopped=False, lock_window_periods=16.0, restart_periods=5.0, locked_s=1.0,
        min_window_s=2.0,
    )  # fmt: skip
    assert layers is None
    assert steps == 5.0


def _bursts_at(
    starts: list[float], length: float, dt: float = 0.01, end: float = 10.0
) -> GridSeries:
    rate = np.zeros(round(end / dt))
    for a in starts:
        rate[round(a / dt) : round((a + length) / dt)] = 1e9
    return GridSeries(t0=0.0, dt=dt, rate=rate, valid=np.ones(rate.size, dtype=bool))


def test_the_longest_gap_is_the_longest_pause_between_two_bursts() -> None:
    # Layer trains (0.1 s bursts every 0.2 s) with a 1.5 s compute pause between steps, and
    # the silence after the last burst, which is no pause of the traffic (nothing follows it).
    grid = _bursts_at([0.0, 0.2, 0.4, 2.0, 2.2, 2.4], 0.1)
    assert longest_gap_s(grid, 0.5e9) == pytest.approx(1.5)
    # A poll that never came is part of the gap around it, never a burst.
    grid.valid[100:120] = False
    grid.rate[100:120] = np.nan
    assert longest_gap_s(grid, 0.5e9) == pytest.approx(1.5)
    assert longest_gap_s(_bursts_at([3.0], 0.1), 0.5e9) == 0.0


def test_a_job_is_gone_after_two_periods_and_more_than_its_own_pauses() -> None:
    assert not job_gone(0.9, 0.5, 0.3)  # under two periods: one late step
    assert job_gone(1.1, 0.5, 0.3)
    # A lock on 0.2 s layers in a step that pauses 1.5 s to compute: 1.6 s of silence is
    # that pause, not the end (giving the lock up there lost the step, which the ring shows).
    assert not job_gone(1.6, 0.2, 1.5)
    assert job_gone(2.3, 0.2, 1.5)


def test_traffic_comes_back_at_the_first_slot_above_the_threshold_after_the_stop() -> None:
    grid = _bursts_at([0.0, 0.5, 4.0, 4.5], 0.1)
    assert first_activity_s(grid, 0.5e9, 0.6) == pytest.approx(4.0)
    assert first_activity_s(grid, 0.5e9, 4.05) == pytest.approx(4.05)  # inside a burst
    # A poll that never came is no activity.
    grid.valid[400:420] = False
    assert first_activity_s(grid, 0.5e9, 0.6) == pytest.approx(4.5)
    assert first_activity_s(grid, 0.5e9, 4.7) is None
    assert first_activity_s(grid, 0.5e9, 99.0) is None


def test_a_pause_counts_once_the_job_locks_again_at_its_old_period() -> None:
    """A pause is the job's own only when the lock that follows it is at the released T, soon:
    then a later silence up to 1.5 times it is no stop (:func:`job_gone` with it as the gap).
    """
    mem = PauseMemory()
    assert mem.pause_s == 0.0
    mem.resumed(3.0, 0.6, now_s=100.0)
    assert mem.pause_s == 0.0  # not yet: the traffic that came back may be another job
    mem.locked(0.62, now_s=103.0)
    assert mem.pause_s == 3.0
    assert not job_gone(4.4, 0.62, mem.pause_s)
    assert job_gone(4.6, 0.62, mem.pause_s)
    # A shorter pause keeps the longest; a lock taken without a resume changes nothing.
    mem.resumed(2.0, 0.62, now_s=110.0)
    mem.locked(0.6, now_s=112.0)
    mem.locked(0.6, now_s=130.0)
    assert mem.pause_s == 3.0
    # A lock at another pace after a stop is another job: its pauses are its own.
    mem.resumed(4.0, 0.6, now_s=140.0)
    mem.locked(1.3, now_s=143.0)
    assert mem.pause_s == 0.0


def test_a_late_lock_a_stop_without_a_lock_or_a_long_silence_remembers_no_pause() -> None:
    mem = PauseMemory()
    mem.resumed(3.0, 0.5, now_s=0.0)
    mem.locked(0.5, now_s=30.0)  # 60 periods after the resume: a new job at the same pace
    assert mem.pause_s == 0.0
    mem.resumed(3.0, None, now_s=40.0)  # nothing was locked at the stop
    mem.locked(0.5, now_s=42.0)
    assert mem.pause_s == 0.0
    mem.resumed(PAUSE_MAX_S + 1.0, 0.5, now_s=50.0)  # a silence that long is a stop
    mem.locked(0.5, now_s=52.0)
    assert mem.pause_s == 0.0


def test_a_released_lock_comes_back_at_once_only_for_the_same_period() -> None:
    """A job that resumes after a pause: one window that agrees with the released T locks
    (the real pause job re-locked 3-7.5 s after each resume, with 7 s between pauses). Any
    other period needs two agreeing windows, as at a cold start."""
    tr = PeriodTracker()
    tr.update(1.0)
    assert tr.update(1.0).period_s == 1.0
    update = tr.release()
    assert update.period_s is None
    assert tr.locked is None
    assert tr.update(1.01, rel_error=0.01).period_s == pytest.approx(1.01)
    tr.release()
    assert tr.update(1.5).period_s is None
    assert tr.update(1.5).period_s == 1.5
    tr.release()
    assert tr.update(1.5).period_s == 1.5  # the last released period, not an older one


def _calls(times: np.ndarray) -> CallBatch:
    """A tailer's batch of one process's calls: AllReduce (the step's marker), two others."""
    keys = tuple(CallKey(op, "h:1", "0x1", 8, -1, 0) for op in ("AllReduce", "AllGather", "Bcast"))
    return CallBatch(
        times=times,
        s_bytes=np.full(times.size, 4096.0),
        ops={"AllReduce": (times.size, 4096 * times.size)},
        nranks=8,
        processes=frozenset({"h:1"}),
        key_ids=np.tile(np.arange(3, dtype=np.int32), times.size // 3),
        keys=keys,
    )


@pytest.mark.parametrize("blocks_last", [True, False])
def test_lines_timed_in_blocks_are_judged_on_the_newest_calls(
    monkeypatch: pytest.MonkeyPatch, blocks_last: bool
) -> None:
    """How the lines reach the file is read from the newest calls (``BLOCKS_CALLS``): a log
    that went from line by line to 4 KiB blocks (a job restarted behind a pipe) is coarse,
    and the other way round it is fine again, without waiting for the old calls to leave."""
    monkeypatch.setattr(CollectiveWindow, "BLOCKS_CALLS", 600)
    fine = 100.0 + np.arange(900) * 0.017  # 3 calls a step, each timed
    blocks = 120.0 + np.repeat(np.arange(60) * 2.0, 12)  # 4 steps a block, blocks 2 s apart
    c = CollectiveWindow(10_000)
    for part in (fine, blocks) if blocks_last else (blocks - 100.0, fine + 200.0):
        c.add_batch(_calls(part))
    mix = c.mix()
    assert mix is not None
    assert mix.call_times.size == 1620
    assert mix.time_resolution_s == (pytest.approx(2.0) if blocks_last else 0.0)
