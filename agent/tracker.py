"""Online state on top of per-window estimates: lock, hold, re-lock after a change of T.

A single window can be fooled (a missed burst, a checkpoint pause). The live agent reports a
period once two consecutive windows agree (or one window is very confident), keeps it while
windows stay close, and re-locks, asking the window to forget the old traffic, when two
consecutive windows agree on a different period (research/period_estimation.md §3.7). The
step-change watch (:func:`watch_recent`) looks at the last few locked periods, and at the
newest burst intervals when those straddle the change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.ascending import finite_ascending
from agent.period import edge_timing, estimate_period
from agent.rates import GridSeries

__all__ = [
    "LOCK_GAP_GRACE_S",
    "NESTED_RATIO",
    "PAUSE_MAX_S",
    "PAUSE_PERIOD_TOL",
    "QUIET_GAP_MARGIN",
    "QUIET_PERIODS",
    "STEP_RATIO",
    "SUSTAINED_CONFIDENCE",
    "SUSTAINED_MIN_S",
    "SUSTAINED_PERIODS",
    "LockAge",
    "PauseMemory",
    "PeriodTracker",
    "RecentWatch",
    "StepChange",
    "TrackerUpdate",
    "first_activity_s",
    "job_gone",
    "longest_event_gap_s",
    "longest_gap_s",
    "periods_kept_after_lost_lock",
    "step_change",
    "sustained_confidence",
    "watch_recent",
    "whole_window_period",
]


@dataclass(frozen=True)
class TrackerUpdate:
    """The period to report, and whether the window should restart at ``restart_before_s``."""

    period_s: float | None
    locked: bool
    changed: bool


def periods_kept_after_lost_lock(
    *,
    stopped: bool,
    lock_window_periods: float,
    restart_periods: float,
    locked_s: float | None = None,
    min_window_s: float = 0.0,
) -> float | None:
    """How many of the lost period's lengths of data the window keeps once the lock is lost.

    A job that stopped (no burst left in the locked window) keeps that window: its old bursts
    must not come back from the older part of the ring and re-lock on a job that is gone. A
    job that still talks changed its traffic: the ring is mostly the old traffic and would
    re-lock on the old T (or on nothing for a long while), so only a few old periods are kept
    and the new T is looked for as at a cold start (benchmark: the median re-lock after
    T 1.0 → 1.3 s at a 1 s hop went from 12.3 to 7.7 periods). Unless those few periods of
    ``locked_s`` are shorter than ``min_window_s``: then None, the ring is kept. So short a
    lock that is lost while the traffic goes on was most likely structure inside a longer
    step (a real FSDP job's 0.11 s layers, whose 2 s windows stop showing them), and the
    ring's steps find that step at once instead of after it has filled again (12 against
    17 s on a jittery FSDP recording).
    """
    if stopped:
        return lock_window_periods
    if locked_s is not None and restart_periods * locked_s < min_window_s:
        return None
    return restart_periods


#: A period this many times shorter than the locked one is structure inside its step, not a
#: new step; and the whole-window watch widens a lock only to a period this many times longer.
NESTED_RATIO = 4.0

#: The step-change watch only considers a new period within this factor of the locked one.
#: Further off, what a short window or the burst edges show is more likely structure inside
#: a step (a ZeRO layer train, micro-batches) than a new step; bigger changes of T are left to
#: the locked window and to the lost-lock restart.
STEP_RATIO = 2.0


@dataclass(frozen=True)
class StepChange:
    """A new period seen in the newest burst intervals, and where the new traffic starts."""

    period_s: float
    since_s: float  # rising edge of the first burst of the new run
    last_s: float  # rising edge of the newest burst
    intervals: int
    #: So far outside the locked traffic's own step spread that it needs no second look.
    decisive: bool = False


#: Two new intervals are decisive when each lies this many times the locked traffic's interval
#: spread off the lock (and at least ``differ``), on the same side: 30 % off a job whose steps
#: spread 2 % is 15 of its σ, while under 10 % step spread it takes the usual longer run.
DECISIVE_SPREADS = 6.0
#: How many newest intervals make such a run (the older one may straddle the change).
DECISIVE_RUN = 2
#: Fewest older intervals (at about the locked period) that measure that spread.
DECISIVE_HISTORY = 6
#: A run of new intervals is no new step time when this share of the older ones in the
#: window were like them (within ``STEP_AGREE`` of the run's mean): steps of 2.0 or 3.0 s at
#: random (a collective at full or half rate) make three 3.0 s steps in a row every eighth
#: step or so, and each such run re-locked to 3.0 s, cut the window and lost the lock a few
#: hops later.
TYPICAL_SHARE = 0.2
#: Fewest older intervals that say what is typical.
TYPICAL_HISTORY = 4
#: The step-change watch's tolerances: a run's intervals agree within ``STEP_AGREE`` of their
#: mean, which differs from the lock by more than ``STEP_DIFFER``.
STEP_AGREE = 0.08
STEP_DIFFER = 0.1


def _locked_spread(gaps: npt.NDArray[np.float64], locked_s: float) -> float | None:
    """Spread of single-step intervals near the locked period (None: too few of them)."""
    rel = gaps / (np.maximum(1.0, np.round(gaps / locked_s)) * locked_s)
    near = rel[np.abs(rel - 1.0) <= 0.25]
    if near.size < DECISIVE_HISTORY:
        return None
    return float(np.std(near))


def step_change(
    rising_s: npt.NDArray[np.float64],
    locked_s: float,
    *,
    min_intervals: int = 3,
    agree: float = STEP_AGREE,
    differ: float = STEP_DIFFER,
    max_ratio: float = STEP_RATIO,
    falling_s: npt.NDArray[np.float64] | None = None,
    history: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None,
) -> StepChange | None:
    """The newest run of burst intervals that agree with each other but not with the lock.

    A window of a few locked periods that straddles a change of step time has no period of
    its own (its intervals are irregular), so the period detector only sees the new T once a
    whole window of it has passed. The burst edges see it sooner: ``min_intervals``
    consecutive newest intervals within ``agree`` of their mean, which differs from
    ``locked_s`` by more than ``differ`` and by three times the run's own spread. A new T more
    than ``max_ratio`` times the old one (or less than its inverse) is left to the other
    watches: at such ratios the edges may be those of the bursts inside a step (layer trains,
    micro-batches), not of the steps.

    Two newest intervals are enough when the locked traffic was steady and the bursts' ends
    (``falling_s``) say the same: each of the two newest rise-to-rise and fall-to-fall
    intervals must lie ``DECISIVE_SPREADS`` times the spread of the older intervals off the
    lock, on the same side (the interval that straddles the change, part old and part new,
    is left out of the new period). One slow step moves two rise-to-rise intervals when its
    burst is slow too, but only one fall-to-fall interval. No older interval may lie as far
    off on that side: a job that stalls now and then shows it there, and two stalls in a row
    are no new step time. ``history`` (rises and falls of a longer window, the whole ring)
    looks further back than ``rising_s``. Such a run is ``decisive``: the tracker re-locks on
    it without waiting for a newer burst.
    """
    if rising_s.size < 3 or locked_s <= 0:
        return None
    gaps = np.diff(rising_s)
    fast = None
    if falling_s is not None and falling_s.size >= 3:
        old_r, old_f = history if history is not None else (rising_s, falling_s)
        fast = _decisive(rising_s, old_r, locked_s, agree=agree, differ=differ)
        fall = _decisive(falling_s, old_f, locked_s, agree=agree, differ=differ)
        if fast is None or fall is None or abs(fall / fast - 1.0) > agree:
            fast = None
    if fast is not None and 1.0 / max_ratio <= fast / locked_s <= max_ratio:
        # The window restarts at the pair's first burst: three bursts, enough for the next
        # estimates to see the new period in (from the newest two alone they found none, and
        # six empty windows in a row dropped the lock again). The older interval may straddle
        # the change, so that burst may be the old traffic's last one.
        first = float(rising_s[-DECISIVE_RUN - 1])
        return StepChange(fast, first, float(rising_s[-1]), DECISIVE_RUN, decisive=True)
    if rising_s.size < min_intervals + 1:
        return None
    run = 0
    for k in range(gaps.size - 1, -1, -1):
        tail = gaps[k:]
        mean = float(tail.mean())
        if float(np.max(np.abs(tail / mean - 1.0))) > agree or abs(mean / locked_s - 1.0) <= differ:
            break
        run = gaps.size - k
    if run < min_intervals:
        return None
    tail = gaps[-run:]
    period = float(tail.mean())
    if not 1.0 / max_ratio <= period / locked_s <= max_ratio:
        return None
    # Under heavy step jitter a few intervals in a row can stray together: the run must stand
    # off the lock by three times its own spread as well.
    if abs(period / locked_s - 1.0) <= 3.0 * float(tail.std()) / period:
        return None
    # ... and be new: not what the older steps often were. (The interval before the run may
    # straddle the change, part old and part new: left out.)
    if _typical(gaps[: -run - 1], period, agree):
        return None
    return StepChange(period, float(rising_s[-run - 1]), float(rising_s[-1]), run)


def _typical(older: npt.NDArray[np.float64], period_s: float, agree: float) -> bool:
    """Whether the older steps were often like a run at ``period_s``: a chance run, not new.

    ``TYPICAL_SHARE`` of the ``older`` intervals within ``agree`` of ``period_s`` (missed
    bursts, intervals of two steps, do not count as like a longer run).
    """
    if older.size < TYPICAL_HISTORY:
        return False
    return float(np.mean(np.abs(older / period_s - 1.0) <= agree)) >= TYPICAL_SHARE


@dataclass(frozen=True)
class RecentWatch:
    """What the step-change watch saw in the last few locked periods."""

    period_s: float | None
    step: StepChange | None = None
    since_s: float | None = None  # start of the short window the period was found in

    def keep_from(self, now: float, relocked_s: float, restart_periods: float) -> float:
        """Where the window restarts after re-locking on this watch's evidence.

        ``restart_periods`` new periods back, but never before the evidence for the new period
        (the short window that showed it, or the first burst of the new run in the edges):
        older data is the old traffic, and left in the window it would bias every estimate
        until it aged out of the locked window (16 periods). (The caller keeps at least its
        minimum window.)
        """
        keep = now - restart_periods * relocked_s
        if self.period_s is not None and self.since_s is not None:
            keep = max(keep, self.since_s)
        elif self.step is not None:
            keep = max(keep, self.step.since_s - 0.25 * relocked_s)
        return keep


def _decisive(
    edges: npt.NDArray[np.float64],
    older: npt.NDArray[np.float64],
    locked_s: float,
    *,
    agree: float,
    differ: float,
) -> float | None:
    """The newest interval when it and the one before are far outside the locked spread.

    The one before may straddle the change (part old, part new traffic): it votes, but only
    the newest interval, wholly new, times the new period. The locked traffic's intervals are
    those of ``older`` (the same edges, or a longer window's) that end before the interval
    before the pair, which may straddle the change too.
    """
    if edges.size < DECISIVE_RUN + 2:
        return None
    new = np.diff(edges[-DECISIVE_RUN - 1 :])
    mean = float(new.mean())
    if float(np.max(np.abs(new / mean - 1.0))) > agree:
        return None
    history = np.diff(older[older <= edges[-DECISIVE_RUN - 2] + 0.25 * locked_s])
    spread = _locked_spread(history, locked_s)
    if spread is None:
        return None
    off = new / locked_s - 1.0
    bar = max(differ, DECISIVE_SPREADS * spread)
    if not (bool(np.all(off > bar)) or bool(np.all(off < -bar))):
        return None
    # A job whose steps stall now and then (a data-loader hiccup, a slow host) shows such
    # steps in its history too; two in a row are no new step time.
    single = history / locked_s - 1.0
    single = single[np.abs(single) < 0.5]
    if bool(np.any(single > bar)) if off[0] > 0 else bool(np.any(single < -bar)):
        return None
    # Whole multiples or fractions of the lock are missed or split bursts (two bursts in a row
    # lost in a real FSDP job's noise read as two intervals of 2T): the longer run decides.
    ratio = mean / locked_s
    for k in (2.0, 3.0):
        if abs(ratio / k - 1.0) <= bar or abs(ratio * k - 1.0) <= bar:
            return None
    return float(new[-1])


def watch_recent(
    recent: GridSeries,
    locked_s: float,
    *,
    edges_from: GridSeries | None = None,
    history_from: GridSeries | None = None,
) -> RecentWatch:
    """The step-change watch: the period of a short recent window, else burst intervals.

    When the short window has no period of its own (it straddles a change), the newest burst
    intervals of ``edges_from`` (a longer window: the locked one) are searched for a run at a
    new period; a window of a few old periods holds too few of the new, longer ones. A
    decisive run (:func:`step_change`) wins over the short window's period whatever it is.
    Such a run is checked against the steps of ``history_from`` (the whole ring) as well: a
    stall a minute ago says the job stalls.
    """
    result = estimate_period(recent.rate, recent.dt, t0=recent.t0)
    shown = result.period_s
    # The newest edges are read whatever the short window shows: for fast steps it is
    # min_window_s long, holds mostly old steps for a while after a change, and shows the old
    # period or a mix (0.1 s steps becoming 0.13 s read 0.100, then 0.109 s, for 0.75 s); a
    # decisive run of the newest edges times the new step alone.
    grid = edges_from if edges_from is not None else recent
    timing = edge_timing(grid.rate, grid.dt, locked_s, t0=grid.t0)
    if timing is None:
        return RecentWatch(shown, since_s=recent.t0 if shown is not None else None)
    if shown is not None and edges_from is not None and abs(shown / locked_s - 1.0) > STEP_DIFFER:
        # A short window of a few steps that happen to be slow ones (steps of 2.0 or 3.0 s at
        # random) shows 3.0 s: no new step time when the older steps were often that long.
        rises = timing.rising_s
        if _typical(np.diff(rises[rises < recent.t0]), shown, STEP_AGREE):
            shown = None
    step = step_change(timing.rising_s, locked_s, falling_s=timing.falling_s)
    if step is not None and step.decisive and history_from is not None:
        long = edge_timing(history_from.rate, history_from.dt, locked_s, t0=history_from.t0)
        step = step_change(
            timing.rising_s,
            locked_s,
            falling_s=timing.falling_s,
            history=(long.rising_s, long.falling_s) if long is not None else None,
        )
    if shown is not None and (step is None or not step.decisive):
        return RecentWatch(shown, since_s=recent.t0)
    return RecentWatch(None, step)


def whole_window_period(grid: GridSeries) -> float | None:
    """T of the whole window, for the outer-period watch (:meth:`PeriodTracker.widen`).

    The idle before the traffic is cut first, as for every estimate: a ring that filled before
    the job would dilute the NSDF of its steps.
    """
    grid = grid.from_traffic_start()
    return estimate_period(grid.rate, grid.dt, t0=grid.t0).period_s


#: A job is taken as gone once no burst has come for this many of its periods ...
QUIET_PERIODS = 2.0
#: ... and for this many times the longest gap between two bursts in the ring: a lock on the
#: layers of a ZeRO-3 / FSDP step (before the whole-window watch widens it) sees the step's
#: compute phase as many quiet "periods", and giving the lock up there lost the step.
QUIET_GAP_MARGIN = 1.5


def longest_gap_s(grid: GridSeries, threshold: float) -> float:
    """The longest stretch between two slots above ``threshold``: the traffic's own pauses.

    Slots without a sample count as part of a gap (unknown is not evidence of activity), which
    can only lengthen it and so delay the verdict of :func:`job_gone`, never hasten it.
    """
    above = np.flatnonzero(grid.valid & (grid.rate > threshold))
    if above.size < 2:
        return 0.0
    return float(np.diff(above).max() - 1) * grid.dt


def longest_event_gap_s(times: npt.NDArray[np.float64]) -> float:
    """The longest interval between consecutive timed events (NCCL calls): their pauses."""
    t = finite_ascending(times)
    return float(np.diff(t).max()) if t.size >= 2 else 0.0


def job_gone(quiet_s: float, period_s: float, ring_gap_s: float) -> bool:
    """Whether a silence of ``quiet_s`` since the last burst means the periodic job stopped.

    The window still holds the job's bursts for many periods after it stopped, so its period
    is still found there (T stayed 4-10 s after real jobs ended). A silence longer than two
    periods and 1.5 times any pause of the traffic in the ring has not been seen while the
    job ran.
    """
    return quiet_s > QUIET_PERIODS * period_s and quiet_s > QUIET_GAP_MARGIN * ring_gap_s


def first_activity_s(grid: GridSeries, threshold: float, after_s: float) -> float | None:
    """Start of the first slot after ``after_s`` above ``threshold``: when traffic came back."""
    start = max(0, math.ceil((after_s - grid.t0) / grid.dt))
    if start >= grid.rate.size:
        return None
    above = np.flatnonzero(grid.valid[start:] & (grid.rate[start:] > threshold))
    return grid.t0 + (start + int(above[0])) * grid.dt if above.size else None


#: A resume is the same job's when the tracker locks again within this of the released T.
PAUSE_PERIOD_TOL = 0.1
#: Longer pauses are not remembered: a silence that long is shown as a stop every time.
PAUSE_MAX_S = 60.0
#: The lock that confirms a pause must come within this many of the released periods (and
#: ``PAUSE_CONFIRM_MIN_S``) of the resume; later, it is a new job at the same pace.
PAUSE_CONFIRM_PERIODS = 20.0
PAUSE_CONFIRM_MIN_S = 10.0


class PauseMemory:
    """The longest pause the job came back from, so that the next one is not taken for a stop.

    Within a ring its longest gap already tells a pause from a stop (:func:`job_gone`), but a
    resume cuts the window at the stop and that evidence with it: a real job that paused 3-5 s
    for evaluation after every 6 s of steps lost its T in every pause and spent most of each
    stretch of steps locking again (T shown 42 % of the time). A pause counts once the
    tracker locks again, soon after the resume, on about the T it released at the stop; a lock
    on another T then is another job, and the memory is cleared. A job that changes its pace
    while it runs (no stop between) keeps its pauses.
    """

    def __init__(self) -> None:
        self._pause_s = 0.0
        self._pending: tuple[float, float, float] | None = None  # (pause, released T, at)

    def resumed(self, pause_s: float, released_s: float | None, now_s: float) -> None:
        """Traffic came back ``pause_s`` after the stop of a job locked at ``released_s``.

        ``released_s`` is None when nothing was locked at the stop.
        """
        self._pending = None
        if released_s is not None and 0.0 < pause_s <= PAUSE_MAX_S:
            self._pending = (pause_s, released_s, now_s)

    def locked(self, period_s: float, now_s: float) -> None:
        """The tracker took a lock on ``period_s`` (from none)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        pause, released, at = pending
        if now_s - at > max(PAUSE_CONFIRM_MIN_S, PAUSE_CONFIRM_PERIODS * released):
            return
        if _close(period_s, released, PAUSE_PERIOD_TOL):
            self._pause_s = max(self._pause_s, pause)
        else:
            self._pause_s = 0.0  # another job after the stop

    @property
    def pause_s(self) -> float:
        """The longest pause remembered (0 if none)."""
        return self._pause_s


#: A lock held this many of its periods, and at least ``SUSTAINED_MIN_S``, with the window
#: still finding the locked T, is a period in its own right, whatever one window's confidence.
SUSTAINED_PERIODS = 16.0
SUSTAINED_MIN_S = 30.0
#: The confidence such a lock is shown with: the tracker's one-window lock level, above the
#: alerts' 0.5.
SUSTAINED_CONFIDENCE = 0.6


#: A lock lost for at most this long keeps its age: a 20 %-spread job's lock drops for a hop
#: or two now and then (a real one: twice a minute), and each drop restarted the count.
LOCK_GAP_GRACE_S = 10.0


#: A lock that moves to a period this many times longer or shorter starts its age afresh.
AGE_RATIO = 1.5


class LockAge:
    """Seconds the tracker has held a lock, through losses of up to ``LOCK_GAP_GRACE_S``.

    The age vouches for the locked T only: a re-lock to a period ``AGE_RATIO`` times longer
    or shorter starts afresh. (Steps of 2.0 or 3.0 s at random re-locked on a chance multiple,
    7.0 s, which kept the old lock's age and was shown at the sustained confidence at once.)
    """

    def __init__(self) -> None:
        self._since: float | None = None
        self._lost_at: float | None = None
        self._period_s: float | None = None

    def update(self, now: float, locked: bool, period_s: float | None = None) -> float:
        """Feed one hop (``period_s``: the locked T, when known); the lock's age at ``now``.

        0 while nothing is locked.
        """
        if not locked:
            if self._since is not None and self._lost_at is None:
                self._lost_at = now
            return 0.0
        moved = (
            period_s is not None
            and self._period_s is not None
            and not 1.0 / AGE_RATIO < period_s / self._period_s < AGE_RATIO
        )
        if (
            self._since is None
            or moved
            or (self._lost_at is not None and now - self._lost_at > LOCK_GAP_GRACE_S)
        ):
            self._since = now
        self._lost_at = None
        if period_s is not None:
            self._period_s = period_s
        return now - self._since

    def reset(self) -> None:
        """Forget the lock (the job stopped)."""
        self._since = self._lost_at = self._period_s = None


def sustained_confidence(
    confidence: float,
    window_period_s: float | None,
    locked_s: float,
    held_s: float,
    *,
    unsure: bool = False,
    agree: float = 0.05,
) -> float:
    """The confidence to show for a locked T: the window's, or more once the lock has held.

    A window's confidence rates its own comb, z and edge spread: steps whose time spreads
    15-20 % (a congested, network-bound job) keep it at 0.01-0.3 on nearly every window, while
    the tracker holds their T for as long as the job runs. The bottleneck alert
    wants a confident T in the last 5 minutes, and never fired on such a job (simulated, 16 %
    spread, D 0.64: 20 minutes locked, no window at 0.5). A lock that has held
    ``SUSTAINED_PERIODS`` periods of new traffic, with this window finding the same T, is
    shown at ``SUSTAINED_CONFIDENCE`` at least; aperiodic streams never reach a lock at all
    (bench/accuracy.py). A T marked unsure (an alias of a counter refresh, two flows' common
    multiple, a swing at the poll rate) stays as it is: it is shown below the alerts on
    purpose.
    """
    if (
        unsure
        or window_period_s is None
        or abs(window_period_s / locked_s - 1.0) > agree
        or held_s < max(SUSTAINED_MIN_S, SUSTAINED_PERIODS * locked_s)
    ):
        return confidence
    return max(confidence, SUSTAINED_CONFIDENCE)


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a / b - 1.0) <= tol


class PeriodTracker:
    """Lock after ``lock_after`` agreeing windows; drop after ``unlock_after`` empty ones.

    With ``hop_s`` given, the empty windows must also span one locked period: at a short hop,
    three empty windows in a row are a fraction of a long step, too little to give it up.

    While nothing is locked, one window whose estimate has at least ``lock_confidence`` locks
    at once: a confidence that high needs a clear comb, a large z and regular burst edges over
    three periods or more, which aperiodic traffic never reached on the benchmark (0 of 8000
    windows gave any period). Switching from one locked period to another still takes two
    agreeing windows, so a nested job cannot flip between its inner and outer period, and
    windows spanning one new period when they are less confident than a cold lock
    (:meth:`_switch_after`).
    """

    def __init__(
        self,
        *,
        agree: float = 0.03,
        change: float = 0.05,
        lock_after: int = 2,
        unlock_after: int = 3,
        lock_confidence: float = 0.6,
        hop_s: float | None = None,
        max_agree: float = 0.1,
    ) -> None:
        self._agree = agree
        self._max_agree = max_agree
        self._candidate_error = 0.0
        self._change = change
        self._lock_after = lock_after
        self._unlock_after = unlock_after
        self._lock_confidence = lock_confidence
        #: The estimate hop; settable (a reload may change it).
        self.hop_s = hop_s
        self._locked: float | None = None
        self._candidate: float | None = None
        self._streak = 0
        self._misses = 0
        self._challenger: float | None = None
        self._challenger_edge: float | None = None
        self._outer: float | None = None
        self._released: float | None = None
        #: The locked period before the last window followed: a jittery job's window now and
        #: then reads 4-5 % off, and the next one, as far the other way from it, is no step
        #: change (a real FSDP job at 8 % step spread re-locked on that, and the window cut
        #: to a few periods held no T for 8 s).
        self._followed: float | None = None

    @property
    def expected(self) -> float | None:
        """The period a window is tested against: the locked one, else the released one.

        A job resuming after its stop is held on its edges at the old pace, as a locked one.
        """
        return self._locked if self._locked is not None else self._released

    @property
    def locked(self) -> float | None:
        """The period currently reported."""
        return self._locked

    def challenge(
        self, period_s: float | None, *, tol: float = 0.1, step: StepChange | None = None
    ) -> float | None:
        """Feed the period of a short recent window (a few of the locked periods).

        Returns a new period to re-lock on when two consecutive short windows agree with each
        other and both differ from the locked period by more than ``tol``: a step change,
        seen within a few new periods instead of when it dominates the whole window. ``tol``
        is wide because a short window's T carries the step jitter of only a few steps.

        A short window that straddles the change has no period of its own; then ``step`` (the
        newest burst intervals, :func:`step_change`) stands in for it. Two steps agree only if
        the second one rests on a newer burst: at a hop shorter than T, consecutive windows
        see the same edges, which would confirm nothing. Stray jittered intervals rarely pass:
        the next interval breaks their run, and a window without a run resets the challenger.
        A ``decisive`` step (two intervals far outside the locked traffic's spread) re-locks
        alone. A period more than ``STEP_RATIO`` off the lock is no challenger: a short window of a
        ZeRO step that shows only its layer train would otherwise re-lock on the layers.
        """
        evidence, edge, decisive = period_s, None, False
        if evidence is None and step is not None:
            evidence, edge, decisive = step.period_s, step.last_s, step.decisive
        if (
            self._locked is None
            or evidence is None
            or _close(evidence, self._locked, tol)
            or not 1.0 / STEP_RATIO <= evidence / self._locked <= STEP_RATIO
        ):
            self._challenger = self._challenger_edge = None
            return None
        if decisive or (
            self._challenger is not None
            and _close(evidence, self._challenger, self._agree)
            and (edge is None or self._challenger_edge is None or edge > self._challenger_edge)
        ):
            self._locked, self._followed = evidence, None
            self._challenger = self._challenger_edge = None
            self._candidate, self._streak, self._misses = None, 0, 0
            return evidence
        if edge is not None and edge == self._challenger_edge:
            return None  # the same bursts as last time: wait for a new one
        self._challenger, self._challenger_edge = evidence, edge
        return None

    def widen(self, period_s: float | None, *, deep: float = NESTED_RATIO) -> float | None:
        """Feed the period of the whole window while locked on a shorter one.

        Locking narrows the window to a few locked periods; a job locked on a short inner
        period first (the layer train of a ZeRO step, an FSDP job's layers, seen before a
        whole step was) would then never show its step again. Returns a longer period to
        re-lock on when two consecutive whole-window periods agree and are at least ``deep``
        times the locked one: a shallower nesting (gradient accumulation over 2-3 micro-steps)
        shows in the locked window of 16 periods itself, while a ring that still holds an
        earlier traffic (T 1.0 s, then 1.3 s) repeats at their common multiple, 3.9 s, which
        re-locked the benchmark's no-reset diagnostic and held it. (Requiring the locked period
        as the whole window's inner one was tried: a jittery FSDP job's whole window shows its
        step without the layers half the time, and a ZeRO-3 demo widened 10 s later.)
        """
        if self._locked is None or period_s is None or period_s < deep * self._locked:
            self._outer = None
            return None
        if self._outer is not None and _close(period_s, self._outer, self._agree):
            self._locked, self._followed = period_s, None
            self._outer = self._challenger = self._challenger_edge = None
            self._candidate, self._streak, self._misses = None, 0, 0
            return period_s
        self._outer = period_s
        return None

    def _switch_after(self, period_s: float, confidence: float) -> int:
        """Agreeing windows needed to lock on ``period_s``: from a lock, on weak evidence, more.

        A window less confident than a cold lock needs windows spanning one new period. At a
        hop shorter than the new period, consecutive windows read the same bursts, and
        their agreement confirms nothing. Steps of 2.0 or 3.0 s at random hold runs of 2+2+3 s
        that read as a 7.0 s period of confidence 0.08 for a few hops: two of them switched a
        lock of 2.43 s to 7.0 s, whose short window lost the job a minute later
        (bench/alert_gate.py). A window as confident as a cold lock needs no more than two: a
        real job whose steps went from 6.04 to 6.39 s (confidence 0.84) re-locked 5 s later
        when it had to wait for 7.
        """
        if self._locked is None or not self.hop_s or confidence >= self._lock_confidence:
            return self._lock_after
        return max(self._lock_after, math.ceil(period_s / self.hop_s))

    def release(self) -> TrackerUpdate:
        """Give the lock up at once: the job stopped (:func:`job_gone`), no misses to wait for.

        The released period is remembered: one window that agrees with it locks again (a job
        resuming after an evaluation or checkpoint pause re-locked only after 3-7.5 s, its
        whole training stretch between pauses being about 7 s).
        """
        self._released = self._locked
        self._locked = self._candidate = self._challenger = self._challenger_edge = None
        self._followed = None
        self._outer = None
        self._streak = self._misses = 0
        return TrackerUpdate(None, False, False)

    def update(
        self, period_s: float | None, confidence: float = 0.0, rel_error: float = 0.0
    ) -> TrackerUpdate:
        """Feed one window's period (None = no period found) and the estimate's confidence.

        While locked, a period a quarter of the locked one or shorter counts as no period: it
        is structure inside the step (an FSDP job's layers, micro-batches), which a window too
        jittery to show the step still shows; two such windows re-locked a real FSDP job from
        its 1.33 s step onto its 0.11 s layers. A job that really changed that much loses the
        lock to the misses and is found afresh. (The whole-window watch widens by that factor
        too: :meth:`widen`.)

        ``rel_error`` is the window's own relative standard error of T (interval spread over
        the square root of the cycles): under step jitter two windows of a few cycles differ by
        more than ``agree`` though both are right (12 % jitter over 7 steps: 5 % each), so
        two of them agree within twice the larger error, up to ``max_agree``. Inner and outer
        periods of a nested job, and harmonics, stay 30 % and more apart.
        """
        if (
            period_s is not None
            and self._locked is not None
            and NESTED_RATIO * period_s <= self._locked
        ):
            period_s = None
        if period_s is None:
            self._misses += 1
            # While locked, a window without a period is a miss, not evidence against a new
            # step: a real jittery job's windows with its new step came between such windows,
            # and each reset the challenger (a stale T stayed locked for 8 s).
            if self._locked is None:
                self._candidate, self._streak = None, 0
            needed = self._unlock_after
            if self.hop_s and self._locked is not None:
                needed = max(needed, math.ceil(self._locked / self.hop_s))
            if self._misses >= needed:
                self._locked = self._followed = None
            return TrackerUpdate(self._locked, self._locked is not None, False)
        self._misses = 0
        if self._locked is not None and (
            _close(period_s, self._locked, self._change)
            or (self._followed is not None and _close(period_s, self._followed, self._change))
        ):
            self._followed, self._locked = self._locked, period_s
            self._candidate, self._streak = None, 0
            return TrackerUpdate(period_s, True, False)
        resumed = self._released is not None and _close(
            period_s, self._released, max(self._agree, min(self._max_agree, 2.0 * rel_error))
        )
        if self._locked is None and (confidence >= self._lock_confidence or resumed):
            self._locked = period_s
            self._candidate, self._streak, self._released = None, 0, None
            return TrackerUpdate(period_s, True, False)
        tol = max(self._agree, min(self._max_agree, 2.0 * max(rel_error, self._candidate_error)))
        if self._candidate is not None and _close(period_s, self._candidate, tol):
            self._streak += 1
        else:
            self._candidate, self._streak = period_s, 1
        self._candidate_error = rel_error
        if self._streak >= self._switch_after(period_s, confidence):
            changed = self._locked is not None
            self._locked, self._followed = period_s, None
            self._candidate, self._streak, self._released = None, 0, None
            return TrackerUpdate(period_s, True, changed)
        return TrackerUpdate(self._locked, self._locked is not None, False)
