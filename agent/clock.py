"""Injectable clocks, so loops and windows never read the wall clock themselves."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "MonotonicClock", "Ticker"]


class Clock(Protocol):
    """A monotonic time source in seconds, with a matching sleep."""

    def now(self) -> float:
        """Seconds on a monotonic time line (origin arbitrary)."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until ``now() >= deadline`` (returns at once when already past)."""
        ...

    def block_until(self, deadline: float) -> None:
        """The same, blocking the calling thread (for sampling threads)."""
        ...

    def wall_offset(self) -> float | None:
        """Wall-clock (epoch) seconds minus :meth:`now`; None where the clock has no wall time."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        """Seconds from ``time.monotonic()``."""
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until the absolute deadline (drift-free loops use absolute deadlines)."""
        delay = deadline - time.monotonic()
        await asyncio.sleep(max(0.0, delay))

    def block_until(self, deadline: float) -> None:
        """Block the calling thread until the absolute deadline."""
        delay = deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def wall_offset(self) -> float | None:
        """``time.time() - time.monotonic()`` now (it moves only when the wall clock is set)."""
        return time.time() - time.monotonic()


class FakeClock:
    """A clock that only moves when told to; for tests of loops and windows."""

    def __init__(self, start: float = 0.0, *, wall_offset: float | None = None) -> None:
        self._now = start
        self._wall_offset = wall_offset

    def wall_offset(self) -> float | None:
        """The wall-clock offset it was given (None: no wall time)."""
        return self._wall_offset

    def now(self) -> float:
        """The current fake time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self._now += seconds

    async def sleep_until(self, deadline: float) -> None:
        """Jump straight to the deadline and yield to the event loop once."""
        self._now = max(self._now, deadline)
        await asyncio.sleep(0)

    def block_until(self, deadline: float) -> None:
        """Jump straight to the deadline (and let other threads run)."""
        self._now = max(self._now, deadline)
        time.sleep(0)


class Ticker:
    """Absolute-deadline ticks (``start + k·interval``): no drift, and no catch-up bursts.

    After a stall longer than one interval the missed ticks are skipped, not fired back to
    back: a burst of polls microseconds apart would carry no information and would distort
    the nominal poll interval downstream. ``skipped`` counts them.
    """

    def __init__(self, clock: Clock, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self._clock = clock
        self._interval = interval_s
        self._start = clock.now()
        self._k = 0
        self.skipped = 0

    def _next_deadline(self) -> float:
        self._k += 1
        due = int((self._clock.now() - self._start) / self._interval) + 1
        if due > self._k:
            self.skipped += due - self._k
            self._k = due
        return self._start + self._k * self._interval

    async def tick(self) -> float:
        """Sleep until the next deadline; returns the clock time on waking."""
        await self._clock.sleep_until(self._next_deadline())
        return self._clock.now()

    def tick_blocking(self) -> float:
        """:meth:`tick` for a sampling thread."""
        self._clock.block_until(self._next_deadline())
        return self._clock.now()
