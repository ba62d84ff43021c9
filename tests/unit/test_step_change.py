"""The step-change watch: a new step time seen in the newest burst intervals."""

from __future__ import annotations

import numpy as np
import pytest

from agent.estimate import CollectiveMix, EstimateInputs, estimate, log_grid
from agent.rates import GridSeries
from agent.tracker import PeriodTracker, RecentWatch, StepChange, step_change, watch_recent
from tests.signals import allreduce_calls

OLD_EDGES = [20.0, 21.0, 22.0, 23.0, 24.0, 25.0]


def test_three_agreeing_new_intervals_are_a_step_change_starting_at_their_first_burst() -> None:
    # The old step (1.0 s), a transition interval, then 1.3 s steps with ±2 % jitter.
    edges = np.array([*OLD_EDGES, 26.17, 27.49, 28.77, 30.09])
    got = step_change(edges, 1.0)
    assert got is not None
    assert got.period_s == pytest.approx((30.09 - 26.17) / 3)
    assert got.since_s == pytest.approx(26.17)
    assert got.last_s == pytest.approx(30.09)
    assert got.intervals == 3


def test_no_step_change_from_too_few_new_intervals_or_the_locked_period() -> None:
    assert step_change(np.array([*OLD_EDGES, 26.3, 27.6]), 1.0) is None  # two intervals
    assert step_change(np.arange(10.0) * 1.02, 1.0) is None  # within 10 % of the lock
    # Irregular intervals, all off the lock: no run of them agrees within 8 %.
    assert step_change(np.cumsum([1.0, 1.0, 1.5, 1.15, 1.45, 1.2]), 1.0) is None


def test_bursts_inside_a_step_are_not_a_new_step_time() -> None:
    # Locked on a 2 s ZeRO step, the edges of its 25 ms layer bursts agree with each other.
    layers = 10.0 + 0.025 * np.arange(40)
    assert step_change(layers, 2.0) is None
    assert step_change(np.arange(8) * 5.0, 2.0) is None  # 2.5x the lock: left to the others


STEADY_EDGES = 10.0 + np.cumsum([1.0, 0.98, 1.02, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0])
#: Each burst of the steady job lasts 0.3 s.
BURST_S = 0.3


def _change(*new_steps: float, edges: np.ndarray = STEADY_EDGES) -> tuple[np.ndarray, np.ndarray]:
    """Rises and falls of the steady job followed by bursts ``new_steps`` apart."""
    rises = np.array([*edges, *(edges[-1] + np.cumsum(new_steps))])
    return rises, rises + BURST_S


def test_two_new_intervals_far_outside_a_steady_jobs_spread_are_a_decisive_change() -> None:
    """A steady job (1-2 % step spread) whose steps become 1.3 s: the two newest intervals
    are 15 of its σ off the lock, which no run of its own steps ever is. The older one
    straddles the change (1.17 s, part old, part new): the newest one alone times the new
    step; the window restarts at the pair's first burst."""
    rises, falls = _change(1.17, 1.31)
    got = step_change(rises, 1.0, falling_s=falls)
    assert got is not None
    assert got.decisive
    assert got.period_s == pytest.approx(1.31)
    assert got.since_s == pytest.approx(rises[-3])
    assert got.last_s == pytest.approx(rises[-1])
    # Shorter steps too.
    rises, falls = _change(0.8, 0.75)
    short = step_change(rises, 1.0, falling_s=falls)
    assert short is not None
    assert short.decisive
    assert short.period_s == pytest.approx(0.75)
    # Without the falls, the rises alone are not enough.
    assert step_change(rises, 1.0) is None


def test_two_new_intervals_are_not_decisive_under_step_jitter_nor_without_history() -> None:
    # 10 % step spread: 1.3 s is 3 of its σ, which a pair of its own steps can reach.
    jittery = 10.0 + np.cumsum([1.0, 0.85, 1.12, 0.95, 1.1, 0.88, 1.05, 0.92, 1.13])
    rises, falls = _change(1.3, 1.3, edges=jittery)
    assert step_change(rises, 1.0, falling_s=falls) is None
    # Fewer than six older steps measure no spread.
    rises, falls = _change(1.3, 1.3, edges=np.array([20.0, 21.0, 22.0, 23.0, 24.0]))
    assert step_change(rises, 1.0, falling_s=falls) is None
    # The pair must agree (within 8 % of its mean): 1.3 s then 1.6 s is no new step yet.
    rises, falls = _change(1.3, 1.6)
    assert step_change(rises, 1.0, falling_s=falls) is None


def test_one_slow_step_moves_two_rise_intervals_but_one_fall_interval() -> None:
    """A step 40 % slow in its compute and its burst: the next rise comes 0.28 s late and the
    one after 0.12 s (the longer burst), two rise intervals 12 % and more off the lock; its
    fall comes 0.4 s late, and the fall after it on time again."""
    rises = np.array([*STEADY_EDGES, STEADY_EDGES[-1] + 1.28, STEADY_EDGES[-1] + 2.4])
    falls = rises + BURST_S
    falls[-2] += 0.12  # the slow step's burst lasts 0.42 s
    assert step_change(rises, 1.0, falling_s=falls) is None


def test_stalls_in_the_longer_history_make_two_slow_steps_no_change() -> None:
    """Two slow steps in a row look like a change in the locked window's 10 steps, but the
    whole ring shows the job stalling like that a minute earlier: no decisive run."""
    rises, falls = _change(1.35, 1.38)
    assert step_change(rises, 1.0, falling_s=falls) is not None  # the locked window alone
    earlier = 10.0 - np.cumsum([1.0, 1.01, 1.36, 0.99, 1.0, 0.98, 1.02, 1.0, 0.99, 1.01])[::-1]
    old_r = np.concatenate((earlier, rises))
    stalled = step_change(rises, 1.0, falling_s=falls, history=(old_r, old_r + BURST_S))
    assert stalled is None
    steady = 10.0 - np.cumsum([1.0, 1.01, 0.99, 0.99, 1.0, 0.98, 1.02, 1.0, 0.99, 1.01])[::-1]
    old_r = np.concatenate((steady, rises))
    fine = step_change(rises, 1.0, falling_s=falls, history=(old_r, old_r + BURST_S))
    assert fine is not None
    assert fine.decisive


def test_two_intervals_of_two_locked_periods_are_missed_bursts_not_a_change() -> None:
    """A real FSDP job of 1.33 s steps lost two bursts in a row in its noise: two intervals of
    2.5-2.6 s, which re-locked it on 2.52 s for 3-7 hops."""
    rises, falls = _change(2.03, 1.98)
    assert step_change(rises, 1.0, falling_s=falls) is None
    rises, falls = _change(0.5, 0.51)
    assert step_change(rises, 1.0, falling_s=falls) is None


def test_a_decisive_step_re_locks_at_once() -> None:
    tr = PeriodTracker()
    tr.update(1.0, confidence=0.9)
    fast = StepChange(1.31, 21.2, 22.5, 2, decisive=True)
    assert tr.challenge(None, step=fast) == pytest.approx(1.31)
    assert tr.locked == pytest.approx(1.31)


def _step(period: float, since: float, last: float) -> StepChange:
    return StepChange(period, since, last, 3)


def test_edges_confirm_a_change_only_with_a_newer_burst() -> None:
    tr = PeriodTracker()
    tr.update(1.0, confidence=0.9)
    first = _step(1.31, 26.2, 30.1)
    assert tr.challenge(None, step=first) is None
    assert tr.challenge(None, step=first) is None  # the same bursts again: no confirmation
    assert tr.locked == 1.0
    assert tr.challenge(None, step=_step(1.30, 26.2, 31.4)) == pytest.approx(1.30)
    assert tr.locked == pytest.approx(1.30)
    # A window with neither a period nor a run of new intervals resets the challenger.
    tr = PeriodTracker()
    tr.update(1.0, confidence=0.9)
    assert tr.challenge(None, step=_step(1.15, 20.0, 23.5)) is None
    assert tr.challenge(None, step=None) is None
    assert tr.challenge(None, step=_step(1.16, 20.0, 24.6)) is None
    assert tr.locked == 1.0
    # A window with a period of its own takes precedence over the edges.
    assert tr.challenge(1.30, step=_step(2.0, 40.0, 46.0)) is None


def test_empty_windows_must_span_a_locked_period_before_the_lock_goes() -> None:
    tr = PeriodTracker(hop_s=0.25)
    tr.update(2.0, confidence=0.9)
    for _ in range(7):  # 1.75 s of empty windows: less than one 2 s step
        assert tr.update(None).period_s == 2.0
    assert tr.update(None).period_s is None  # the eighth: 2 s
    fast = PeriodTracker(hop_s=1.0)
    fast.update(0.5, confidence=0.9)
    for _ in range(2):
        fast.update(None)
    assert fast.update(None).period_s is None  # never fewer than three


def test_windows_agree_within_their_own_error_under_step_jitter() -> None:
    """Two low-confidence windows of a jittery job (12 % spread over 7 steps: 4.5 % error
    each) 6 % apart lock; without an error they must agree within 3 %; and no error widens
    the agreement past 10 %, so an inner or outer period (≥ 1.5×) never passes for T."""
    jittery = PeriodTracker()
    assert jittery.update(0.55, 0.1, rel_error=0.045).period_s is None
    assert jittery.update(0.583, 0.1, rel_error=0.045).period_s == 0.583
    exact = PeriodTracker()
    exact.update(0.55, 0.1)
    assert exact.update(0.583, 0.1).period_s is None
    loose = PeriodTracker()
    loose.update(0.55, 0.1, rel_error=0.5)
    assert loose.update(0.64, 0.1, rel_error=0.5).period_s is None


def _square(starts: list[float], width: float, t_end: float, dt: float = 0.01) -> GridSeries:
    t = np.arange(0.0, t_end, dt)
    on = np.zeros(t.size, dtype=bool)
    for s in starts:
        on |= (t >= s) & (t < s + width)
    rate = np.where(on, 1e9, 1e7) + np.random.default_rng(3).normal(0, 1e7, t.size)
    return GridSeries(t0=0.0, dt=dt, rate=rate, valid=np.ones(t.size, dtype=bool))


def test_the_watch_finds_a_longer_new_step_in_the_locked_window_edges() -> None:
    # 1.0 s steps until 20 s, then 1.8 s steps: the last 4.5 s hold only 2.5 of the new
    # steps, too few for a period of their own; the locked window's edges show the new run.
    starts = [float(k) for k in range(20)] + [20.15 + 1.8 * k for k in range(5)]
    whole = _square(starts, 0.3, 28.0)
    cut = round((28.0 - 4.5) / whole.dt)
    recent = GridSeries(
        t0=cut * whole.dt, dt=whole.dt, rate=whole.rate[cut:], valid=whole.valid[cut:]
    )
    watch = watch_recent(recent, 1.0, edges_from=whole)
    assert watch.period_s is None
    assert watch.step is not None
    assert watch.step.period_s == pytest.approx(1.8, rel=0.01)
    assert watch.step.since_s == pytest.approx(20.15, abs=0.02)
    # After a re-lock on it, the window restarts just before the new run, not 5 T back.
    assert watch.keep_from(28.0, 1.8, 5.0) == pytest.approx(20.15 - 0.45, abs=0.02)
    # A new step of 1.3 s shows as a period of its own in the 4.5 s (3.5 of its cycles).
    shorter = _square(
        [float(k) for k in range(20)] + [20.15 + 1.3 * k for k in range(5)], 0.3, 26.0
    )
    cut = round((26.0 - 4.5) / shorter.dt)
    tail = GridSeries(
        t0=cut * shorter.dt, dt=shorter.dt, rate=shorter.rate[cut:], valid=shorter.valid[cut:]
    )
    assert watch_recent(tail, 1.0, edges_from=shorter).period_s == pytest.approx(1.3, rel=0.01)
    # A short window with a new period of its own: the window restarts where it starts.
    shown = RecentWatch(1.3, since_s=21.5)
    assert shown.keep_from(26.0, 1.3, 5.0) == pytest.approx(21.5)
    assert shown.keep_from(60.0, 1.3, 5.0) == pytest.approx(60.0 - 6.5)  # long after: 5 T
    # A steady job: the short window has its own period and the edges are not consulted.
    steady = _square([float(k) for k in range(26)], 0.3, 26.0)
    tail = GridSeries(t0=cut * 0.01, dt=0.01, rate=steady.rate[cut:], valid=steady.valid[cut:])
    assert watch_recent(tail, 1.0, edges_from=steady).period_s == pytest.approx(1.0, rel=0.01)


def test_fast_steps_are_timed_by_their_newest_edges_while_the_short_window_shows_the_old() -> None:
    """0.1 s steps becoming 0.13 s: the short window is min_window_s (2 s) long, mostly old
    steps, and shows about the old period for a while after the change; the decisive run of
    the newest edges gives the new step at once instead of a mix (0.113 s)."""
    starts = [0.1 * k for k in range(60)] + [6.0 + 0.13 * k for k in range(4)]
    grid = _square(starts, 0.03, 6.45, dt=0.005)
    cut = round((6.45 - 2.0) / grid.dt)
    recent = GridSeries(t0=cut * grid.dt, dt=grid.dt, rate=grid.rate[cut:], valid=grid.valid[cut:])
    watch = watch_recent(recent, 0.1, edges_from=grid)
    assert watch.period_s is None
    assert watch.step is not None
    assert watch.step.decisive
    assert watch.step.period_s == pytest.approx(0.13, rel=0.01)


def test_a_short_window_that_shows_only_the_layer_train_is_no_challenger() -> None:
    # Locked on a 2 s ZeRO step; short windows that catch only its 25 ms layer spacing (too
    # few steps in them for the outer period) must not re-lock the job on its layers.
    tr = PeriodTracker()
    tr.update(2.0, confidence=0.9)
    for _ in range(4):
        assert tr.challenge(0.025) is None
    assert tr.locked == 2.0
    assert tr.challenge(2.5) is None  # a real step change within 2x still counts
    assert tr.challenge(2.52) == pytest.approx(2.52)


def _train_mix(starts: list[float], calls: int = 4, spacing: float = 0.008) -> CollectiveMix:
    """NCCL calls as a DDP step makes them: a train of bucketed all-reduces at each sync."""
    times = np.array([s + k * spacing for s in starts for k in range(calls)])
    return allreduce_calls(times, 25e6)


def test_the_nccl_log_alone_shows_a_longer_new_step_once_its_trains_are_merged() -> None:
    # 1.0 s steps until 20 s, then 1.3 s steps, each a train of 4 calls 8 ms apart. Binned at
    # T/64 the trains are one burst each and the watch finds the new step; at 1 ms the bins
    # show single calls, and neither a short-window period nor a run of steps appears.
    starts = [float(k) for k in range(20)] + [20.15 + 1.3 * k for k in range(5)]
    now = 26.0
    whole = _train_mix([s for s in starts if s >= now - 16.0])
    recent = _train_mix([s for s in starts if s >= now - 4.5])
    dt = 1.0 / 64
    watch = watch_recent(
        log_grid(recent, dt, end=now), 1.0, edges_from=log_grid(whole, dt, end=now)
    )
    seen = watch.period_s if watch.period_s is not None else (watch.step and watch.step.period_s)
    assert seen == pytest.approx(1.3, rel=0.02)
    fine = watch_recent(
        log_grid(recent, 1e-3, end=now), 1.0, edges_from=log_grid(whole, 1e-3, end=now)
    )
    assert fine.step is None
    assert fine.period_s is None or not 0.5 <= fine.period_s <= 2.0


def test_log_grid_conserves_the_bytes_of_the_calls() -> None:
    mix = _train_mix([0.3, 1.3, 2.3])
    grid = log_grid(mix, 0.01, end=5.0)
    assert grid is not None
    assert grid.t0 == pytest.approx(0.3)
    assert grid.duration_s == pytest.approx(4.71, abs=0.011)
    assert float(np.sum(grid.rate) * grid.dt) == pytest.approx(12 * 25e6)


def test_a_far_shorter_period_while_locked_is_no_period_not_a_new_lock() -> None:
    """Windows that show only the layers of a locked FSDP step (a quarter of T or less) count
    as misses: two of them no longer re-lock onto the layers; enough of them still let go. A
    third of T is a period like any other (a lock on a common multiple must be left)."""
    tr = PeriodTracker(hop_s=1.0)
    tr.update(1.35, confidence=0.9)
    assert tr.update(0.11, 0.1).period_s == 1.35
    assert tr.update(0.11, 0.1).period_s == 1.35
    assert tr.update(1.37, 0.2).period_s == 1.37  # the step again: the misses reset
    for _ in range(2):
        tr.update(0.11, 0.1)
    assert tr.update(0.11, 0.1).period_s is None  # three in a row: the lock goes
    assert tr.update(0.5, 0.1).period_s is None  # unlocked, short periods lock as ever
    assert tr.update(0.5, 0.1).period_s == 0.5
    wrong = PeriodTracker()
    wrong.update(3.9, confidence=0.9)
    wrong.update(1.3, 0.5)
    assert wrong.update(1.3, 0.5).period_s == 1.3


@pytest.mark.parametrize(("step", "trains"), [(0.5, 3), (1.0, 2), (1.0, 3), (2.0, 2)])
def test_the_calls_of_one_sync_point_are_no_period(step: float, trains: int) -> None:
    """Two or three trains of 4 calls 4 ms apart: the window is too short for the step, and
    the 4 ms spacing inside a train is no period (a live NCCL-only host locked onto it, and
    its window of 16 x 4 ms never grew long enough to show the step again)."""
    mix = _train_mix([0.05 + step * k for k in range(trains)], spacing=0.004)
    est = estimate(EstimateInputs(collectives=mix))
    assert est.period_s is None


@pytest.mark.parametrize("step", [0.5, 1.0, 2.0])
def test_the_step_is_found_once_the_window_holds_enough_trains(step: float) -> None:
    mix = _train_mix([0.05 + step * k for k in range(8)], spacing=0.004)
    est = estimate(EstimateInputs(collectives=mix))
    assert est.period_s == pytest.approx(step, rel=0.01)


def test_a_chance_run_of_the_slower_of_two_step_times_is_no_new_step() -> None:
    """Steps of 2.0 or 3.0 s at random (a collective at full or half rate on half of them),
    locked at their mean: three 3.0 s steps in a row come every eighth step or so. Each run
    re-locked the tracker to 3.0 s, cut the window, and the lock was lost hops later (the
    half-rate stream of bench/alert_gate.py: locked runs of 3 to 71 hops). When a fifth of the
    older intervals were like the run, it is one of them."""
    mixed = [2.0, 3.0, 2.0, 2.0, 3.0, 3.0, 2.0, 3.0, 2.0, 2.0, 3.0, 2.0]
    rises = 5.0 + np.cumsum([*mixed, 3.0, 3.0, 3.0])
    assert step_change(rises, 2.5) is None
    # The same run after steps that were all 2.0 s (locked at 2.0) is a new step time.
    got = step_change(5.0 + np.cumsum([2.0] * 12 + [3.0, 3.0, 3.0]), 2.0)
    assert got is not None
    assert got.period_s == pytest.approx(3.0)
    # ... and so when slow steps were rare before it (one in twelve).
    rare = [2.0] * 11 + [3.0, 2.0]
    assert step_change(5.0 + np.cumsum([*rare, 3.0, 3.0, 3.0]), 2.0) is not None


def test_a_short_window_of_the_slower_steps_is_no_challenger_when_they_were_common() -> None:
    """The short window (4.5 locked periods) holding three 3.0 s steps by chance shows a period
    of 3.0 s of its own; the locked window's older edges say such steps were half of them."""
    mixed = [2.0, 3.0, 2.0, 3.0, 3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 2.0, 2.0, 3.0, 2.0]
    starts = list(np.cumsum([1.0, *mixed, 3.0, 3.0, 3.0, 3.0]))
    whole = _square(starts, 1.0, starts[-1] + 2.0)
    cut = round((whole.t0 + whole.rate.size * whole.dt - 4.5 * 2.5) / whole.dt)
    recent = GridSeries(
        t0=cut * whole.dt, dt=whole.dt, rate=whole.rate[cut:], valid=whole.valid[cut:]
    )
    assert watch_recent(recent, 2.5).period_s == pytest.approx(3.0, rel=0.02)  # on its own
    watch = watch_recent(recent, 2.5, edges_from=whole)
    assert watch.period_s is None
    assert watch.step is None
    # After steps that were all 2.0 s, the same short window is a challenger.
    steady = list(np.cumsum([1.0] + [2.0] * 14 + [3.0, 3.0, 3.0, 3.0]))
    whole = _square(steady, 1.0, steady[-1] + 2.0)
    cut = round((whole.rate.size * whole.dt - 4.5 * 2.0) / whole.dt)
    recent = GridSeries(
        t0=cut * whole.dt, dt=whole.dt, rate=whole.rate[cut:], valid=whole.valid[cut:]
    )
    assert watch_recent(recent, 2.0, edges_from=whole).period_s == pytest.approx(3.0, rel=0.02)
