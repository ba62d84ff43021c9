"""Placing a source's own time stamps on the agent's clock.

NCCL's log lines and nvidia-smi's rows carry wall-clock stamps (local time, any origin); the
agent's windows run on its monotonic clock. A line cannot arrive before it was written, so
``arrival - stamp`` is the clock offset plus a delivery delay, and its minimum is the offset.
The minimum is taken over the last ``LAG_HORIZON_S`` of arrivals only: over all time, one
stamp ahead of the clock (a line from another host, a glued fragment) or a wall clock stepped
back (DST's fall-back hour in NCCL's local-time stamps, an NTP step) placed every later line
minutes or an hour in the past, outside every window, until the agent restarted: T from the
log was gone for good, with nothing logged.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = [
    "BACKLOG_S",
    "CATCHUP_END_S",
    "LAG_HORIZON_S",
    "WALL_STAMP_S",
    "ArrivalLag",
    "WallStamps",
]

F64 = npt.NDArray[np.float64]

#: Arrivals this recent give the lag (a stamp far off, or a clock step, costs this long).
LAG_HORIZON_S = 30.0
#: A read whose newest stamp is this much nearer to its arrival than any lag before starts a
#: catch-up on a backlog (see ``ArrivalLag(backlog_s=...)``) ...
BACKLOG_S = 5.0
#: ... which lasts while each read's newest stamp is this much nearer than the one before.
CATCHUP_END_S = 1.0


class ArrivalLag:
    """The smallest arrival-minus-stamp lag of recent arrivals (a sliding-window minimum).

    With ``backlog_s``, :meth:`times` leaves the stamps of reads that catch up on a backlog
    unplaced (NaN): from a read whose newest stamp is ``backlog_s`` nearer to its arrival than
    any lag before (the first read: whose stamps spread over ``backlog_s``) until one whose
    newest stamp is less than ``CATCHUP_END_S`` nearer than the last. A backlog read at 5 s of
    log per 0.2 s poll lowers the lag with every line, and each line landed on its arrival:
    calls bunched at the polls, and a 1 GB log read from its start gave T = the poll interval
    at confidence 0.92 for three minutes. Its lines happened before the lag can be known; from
    the live end on, the lag holds again. Lines that waited in a buffer are no backlog: the
    newest of each read is about as near as the newest of the last.
    """

    def __init__(self, horizon_s: float = LAG_HORIZON_S, *, backlog_s: float | None = None) -> None:
        self._horizon = horizon_s
        self._backlog = backlog_s
        self._catching_up = False
        # (arrival, lag) of every arrival, less those a later and smaller lag made useless:
        # arrivals and lags both increase, so the front holds the window's minimum.
        self._mins: deque[tuple[float, float]] = deque()

    @property
    def lag(self) -> float | None:
        """The lag now in use (None before the first stamp, or after a quiet horizon)."""
        return self._mins[0][1] if self._mins else None

    def _expire(self, arrival: float) -> None:
        while self._mins and self._mins[0][0] < arrival - self._horizon:
            self._mins.popleft()

    def _push(self, arrival: float, lag: float) -> None:
        while self._mins and self._mins[-1][1] >= lag:
            self._mins.pop()
        self._mins.append((arrival, lag))

    def time(self, stamp: float | None, arrival: float) -> float:
        """One stamp on the agent's clock (None: stamped on arrival)."""
        self._expire(arrival)
        if stamp is None:
            return arrival
        lag = arrival - stamp
        self._push(arrival, lag)  # every lag: when the smaller ones expire, it may be the least
        return stamp + self._mins[0][1]

    def times(self, stamps: F64, arrival: float) -> F64:
        """:meth:`time` of every stamp in order (NaN: none), in numpy: the same doubles.

        Within one arrival the lag applied to a stamp is the smallest one up to and including
        it: a running minimum (``fmin`` skips the NaN of stamps that are missing).
        """
        if not stamps.size:
            return stamps.copy()
        self._expire(arrival)
        current = self.lag
        lags = arrival - stamps
        least = float(np.fmin.reduce(lags))  # NaN only when no stamp is there
        if self._backlog is not None and not math.isnan(least):
            # How much nearer to its arrival this read's newest line is than any before.
            drop = current - least if current is not None else float(np.fmax.reduce(lags)) - least
            self._catching_up = drop >= (CATCHUP_END_S if self._catching_up else self._backlog)
            if self._catching_up:
                self._push(arrival, least)
                times = np.full(stamps.size, math.nan)
                times[np.isnan(stamps)] = arrival
                return times
        running = np.fmin.accumulate(
            np.concatenate(([math.inf if current is None else current], lags))
        )[1:]
        times = stamps + running
        times[np.isnan(stamps)] = arrival
        if not math.isnan(least):
            self._push(arrival, least)
        return times


#: A stamp this many seconds or less before its arrival, on the host's own wall clock, is taken
#: as the time it was sampled.
WALL_STAMP_S = 60.0


class WallStamps:
    """Stamps in the host's own wall-clock time placed exactly; any other by the arrival lag.

    The smallest arrival-minus-stamp lag holds the clock offset plus the least delivery
    delay, which is not zero: rows written at 10 Hz and read every 0.2 s arrive a fixed,
    unknown 0-0.1 s after their stamps, and rows a recorder flushed 0.5 s late all of that.
    GPU samples then landed that late against the network's, and the exposed share of a job
    with 1 s steps read 0.069 against 0.15 (a live probe; 0.000 for the 0.5 s flush). Where
    a stamp is on this host's wall clock (sampled before it arrived, within
    :data:`WALL_STAMP_S`), it is used as it is. A stamp ahead of its arrival, or long before
    it (another clock, a backlog), is placed by the lag as before, which every stamp keeps
    current.
    """

    def __init__(
        self, wall_offset: Callable[[], float | None], lag: ArrivalLag | None = None
    ) -> None:
        self._wall_offset = wall_offset
        self._lag = lag if lag is not None else ArrivalLag()

    def time(self, stamp: float | None, arrival: float) -> float:
        """One stamp on the agent's clock (None: stamped on arrival)."""
        placed = self._lag.time(stamp, arrival)
        offset = self._wall_offset()
        if stamp is None or offset is None:
            return placed
        before = arrival + offset - stamp  # seconds the stamp is before its arrival, on the wall
        return stamp - offset if 0.0 <= before <= WALL_STAMP_S else placed
