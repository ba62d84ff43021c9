"""Injectable clocks, so loops and windows never read the wall clock themselves."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "MonotonicClock"]


class Clock(Protocol):
    """A monotonic time source in seconds, with a matching sleep."""

    def now(self) -> float:
        """Seconds on a monotonic time line (origin arbitrary)."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until ``now() >= deadline`` (returns at once when already past)."""
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


class FakeClock:
    """A clock that only moves when told to; for tests of loops and windows."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

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
