"""Online state on top of per-window estimates: lock, hold, re-lock after a change of T.

A single window can be fooled (a missed burst, a checkpoint pause). The live agent reports a
period only after two consecutive windows agree, keeps it while windows stay close, and
re-locks — asking the window to forget data older than a few new periods — when two
consecutive windows agree on a different period (research/period_estimation.md §3.7).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PeriodTracker", "TrackerUpdate", "periods_kept_after_lost_lock"]


@dataclass(frozen=True)
class TrackerUpdate:
    """The period to report, and whether the window should restart at ``restart_before_s``."""

    period_s: float | None
    locked: bool
    changed: bool


def periods_kept_after_lost_lock(
    *, stopped: bool, lock_window_periods: float, restart_periods: float
) -> float:
    """How many of the lost period's lengths of data the window keeps once the lock is lost.

    A job that stopped (no burst left in the locked window) keeps that window: its old bursts
    must not come back from the older part of the ring and re-lock on a job that is gone. A
    job that still talks changed its traffic: the ring is mostly the old traffic and would
    re-lock on the old T (or on nothing for a long while), so only a few old periods are kept
    and the new T is looked for as at a cold start (benchmark: the median re-lock after
    T 1.0 → 1.3 s at a 1 s hop went from 12.3 to 7.7 periods).
    """
    return lock_window_periods if stopped else restart_periods


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a / b - 1.0) <= tol


class PeriodTracker:
    """Lock after ``lock_after`` agreeing windows; drop after ``unlock_after`` empty ones.

    While nothing is locked, one window whose estimate has at least ``lock_confidence`` locks
    at once: a confidence that high needs a clear comb, a large z and regular burst edges over
    about four periods, which aperiodic traffic never reached on the benchmark (0 of 8000
    windows gave any period). Switching from one locked period to another still takes two
    agreeing windows, so a nested job cannot flip between its inner and outer period.
    """

    def __init__(
        self,
        *,
        agree: float = 0.03,
        change: float = 0.05,
        lock_after: int = 2,
        unlock_after: int = 3,
        lock_confidence: float = 0.6,
    ) -> None:
        self._agree = agree
        self._change = change
        self._lock_after = lock_after
        self._unlock_after = unlock_after
        self._lock_confidence = lock_confidence
        self._locked: float | None = None
        self._candidate: float | None = None
        self._streak = 0
        self._misses = 0
        self._challenger: float | None = None
        self._outer: float | None = None

    @property
    def locked(self) -> float | None:
        """The period currently reported."""
        return self._locked

    def challenge(self, period_s: float | None, *, tol: float = 0.1) -> float | None:
        """Feed the period of a short recent window (a few of the locked periods).

        Returns a new period to re-lock on when two consecutive short windows agree with each
        other and both differ from the locked period by more than ``tol``: a step change,
        seen within a few new periods instead of when it dominates the whole window. ``tol``
        is wide because a short window's T carries the step jitter of only a few steps.
        """
        if self._locked is None or period_s is None or _close(period_s, self._locked, tol):
            self._challenger = None
            return None
        if self._challenger is not None and _close(period_s, self._challenger, self._agree):
            self._locked = period_s
            self._challenger = None
            self._candidate, self._streak, self._misses = None, 0, 0
            return period_s
        self._challenger = period_s
        return None

    def widen(self, period_s: float | None, *, factor: float = 1.5) -> float | None:
        """Feed the period of the whole window while locked on a shorter one.

        Locking narrows the window to a few locked periods; a job locked on a short inner
        period first (the layer train of a ZeRO step, seen before a whole step was) would then
        never show its step again. Returns a longer period to re-lock on when two consecutive
        whole-window periods agree and are at least ``factor`` times the locked one.
        """
        if self._locked is None or period_s is None or period_s < factor * self._locked:
            self._outer = None
            return None
        if self._outer is not None and _close(period_s, self._outer, self._agree):
            self._locked = period_s
            self._outer = self._challenger = None
            self._candidate, self._streak, self._misses = None, 0, 0
            return period_s
        self._outer = period_s
        return None

    def update(self, period_s: float | None, confidence: float = 0.0) -> TrackerUpdate:
        """Feed one window's period (None = no period found) and the estimate's confidence."""
        if period_s is None:
            self._misses += 1
            self._candidate, self._streak = None, 0
            if self._misses >= self._unlock_after:
                self._locked = None
            return TrackerUpdate(self._locked, self._locked is not None, False)
        self._misses = 0
        if self._locked is not None and _close(period_s, self._locked, self._change):
            self._locked = period_s
            self._candidate, self._streak = None, 0
            return TrackerUpdate(period_s, True, False)
        if self._locked is None and confidence >= self._lock_confidence:
            self._locked = period_s
            self._candidate, self._streak = None, 0
            return TrackerUpdate(period_s, True, False)
        if self._candidate is not None and _close(period_s, self._candidate, self._agree):
            self._streak += 1
        else:
            self._candidate, self._streak = period_s, 1
        if self._streak >= self._lock_after:
            changed = self._locked is not None
            self._locked = period_s
            self._candidate, self._streak = None, 0
            return TrackerUpdate(period_s, True, changed)
        return TrackerUpdate(self._locked, self._locked is not None, False)
