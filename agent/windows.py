"""Rolling windows: fixed-memory ring buffers fed by live readings.

Counter readings become per-direction byte increments here (with the same wrap / reset rules
as the offline path, :func:`agent.rates.counter_deltas`), so the estimator sees exactly what
``analyze`` would see for the same data. No clock is read: every reading carries its time.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from agent.call_sequence import clumped_resolution, process_codes
from agent.estimate import CollectiveMix, GpuSamples
from agent.rates import (
    Direction,
    GridSeries,
    at_refresh_interval,
    column_device,
    column_direction,
    counter_delta,
    grid_from_cumulative,
)
from agent.regime_params import CallTable
from collectors._base import (
    CallBatch,
    CallKey,
    CollectiveCall,
    CounterBatch,
    CounterReading,
    DeviceInfo,
    GpuReading,
    TimingBatch,
)
from collectors.rdma_counters import RCV_DATA, XMIT_DATA

__all__ = [
    "BURST_BYTES_BOUNDS",
    "BURST_SECONDS_BOUNDS",
    "EXEC_TIME_BOUNDS",
    "FORGET_COLUMN_AFTER_S",
    "MESSAGE_SIZE_BOUNDS",
    "BurstTally",
    "CollectiveWindow",
    "CounterWindow",
    "DeviceDeltas",
    "DeviceStatus",
    "DeviceTable",
    "GpuWindow",
    "OpTimings",
    "Ring",
    "SizeHistogram",
    "Tally",
    "TimingWindow",
    "device_grids",
    "split_column",
    "window_capacity",
]

FloatArray = npt.NDArray[np.float64]


class Ring:
    """A ring of fixed capacity over several float64 columns; ``view()`` returns time order.

    It also knows whether its column 0 is in order (rows may come out of order: calls of
    several processes), so that :meth:`since` can bisect instead of comparing every row.
    """

    def __init__(self, capacity: int, columns: int) -> None:
        if capacity < 2:
            raise ValueError("capacity must be at least 2")
        self._data = np.zeros((capacity, columns), dtype=np.float64)
        self._head = 0
        self._size = 0
        self._added = 0  # rows ever added
        self._disorder = 0  # the number (1-based) of the last row added below its predecessor
        self._last = -math.inf  # column 0 of the last row added

    @property
    def capacity(self) -> int:
        """Rows the ring holds at most."""
        return int(self._data.shape[0])

    def __len__(self) -> int:
        return self._size

    def append(self, row: npt.ArrayLike) -> None:
        """Add one row, overwriting the oldest when full."""
        self._data[self._head] = row
        value = float(self._data[self._head, 0])
        self._added += 1
        if not value >= self._last:  # NaN included
            self._disorder = self._added
        self._last = value
        self._head = (self._head + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def extend(self, rows: FloatArray) -> None:
        """Add many rows at once (only the newest ``capacity`` are kept)."""
        rows = rows[-self.capacity :]
        n = rows.shape[0]
        if n:
            col = rows[:, 0]
            if not col[0] >= self._last:
                self._disorder = self._added + 1
            falls = np.flatnonzero(~(col[1:] >= col[:-1]))
            if falls.size:
                self._disorder = self._added + 1 + int(falls[-1]) + 1
            self._added += n
            self._last = float(col[-1])
        first = min(n, self.capacity - self._head)
        self._data[self._head : self._head + first] = rows[:first]
        self._data[: n - first] = rows[first:]
        self._head = (self._head + n) % self.capacity
        self._size = min(self._size + n, self.capacity)

    def view(self) -> FloatArray:
        """All rows, oldest first (a copy)."""
        if self._size < self.capacity:
            return self._data[: self._size].copy()
        return np.concatenate((self._data[self._head :], self._data[: self._head]))

    def since(self, t: float | None, column: int = 0) -> FloatArray:
        """The rows whose ``column`` value is at least ``t``, oldest first (all for None).

        The same rows as filtering :meth:`view`, but only they are copied: a call ring holds
        hundreds of thousands of rows, and the windows read a few periods of it every hop.
        """
        if t is None:
            return self.view()
        # In order when the last row that fell below its predecessor is the oldest held, or
        # gone: then the rows since t are a tail of each part, found by bisection.
        ordered = column == 0 and self._disorder <= self._added - self._size + 1
        if self._size < self.capacity:
            held = self._data[: self._size]
            if ordered:
                return held[int(np.searchsorted(held[:, 0], t)) :].copy()
            return held[held[:, column] >= t]
        old, new = self._data[self._head :], self._data[: self._head]
        if ordered:
            i, j = int(np.searchsorted(old[:, 0], t)), int(np.searchsorted(new[:, 0], t))
            return np.concatenate((old[i:], new[j:]))
        return np.concatenate((old[old[:, column] >= t], new[new[:, column] >= t]))

    def first(self) -> FloatArray | None:
        """The oldest row (a copy), or None when empty."""
        if self._size == 0:
            return None
        row: FloatArray = self._data[self._head if self._size == self.capacity else 0].copy()
        return row

    def tail(self, n: int) -> FloatArray:
        """The newest ``n`` rows, oldest first (a copy of those rows only)."""
        n = max(0, min(n, self._size))
        start = self._head - n
        if start >= 0:
            return self._data[start : self._head].copy()
        return np.concatenate((self._data[start:], self._data[: self._head]))

    def last(self) -> FloatArray | None:
        """The newest row (a copy), or None when empty."""
        if self._size == 0:
            return None
        row: FloatArray = self._data[(self._head - 1) % self.capacity].copy()
        return row

    def drop_before(self, t: float, column: int = 0) -> None:
        """Forget rows whose ``column`` value is below ``t`` (rows are in time order)."""
        keep = self.since(t, column)
        self._data[:] = 0.0
        self._head = 0
        self._size = 0
        self._added = self._disorder = 0
        self._last = -math.inf
        if keep.shape[0]:
            self.extend(keep)


@dataclass
class _ColumnState:
    value: int
    time_s: float
    bits: int
    direction: Direction  # parsed from the name once, not at every poll
    largest: float = 0.0
    before_drop: int | None = None  # the value before a drop judged a reset, for one poll


@dataclass(frozen=True)
class _Layout:
    """Where a batch's columns go in a window, kept while batches bring the same columns."""

    columns: tuple[str, ...]
    states: list[_ColumnState]
    groups: list[tuple[Direction, npt.NDArray[np.intp]]]  # column indices, in column order


#: A column not read for this long (and for five polls) is a device that went away
#: (unplugged, renamed, filtered out, its driver unloaded): the window forgets it, and its
#: direction goes on summing the other devices. Until then its misses are gaps. If it comes
#: back it counts afresh, like a new device.
FORGET_COLUMN_AFTER_S = 2.0


class CounterWindow:
    """Per-direction cumulative bytes at each poll, ready to be gridded.

    Each row is ``(time, cumulative bytes, 1.0 if the interval ending here is known)`` per
    direction. A column that was not read at the previous poll cannot say how its bytes split
    over the missed intervals, so the interval is marked unknown rather than guessed; one
    missing for ``FORGET_COLUMN_AFTER_S`` is forgotten (else one vanished port would leave
    its source without a known interval, and without T, B and D, until a restart).
    """

    def __init__(self, capacity: int) -> None:
        self._rings: dict[Direction, Ring] = {}
        self._capacity = capacity
        self._columns: dict[str, _ColumnState] = {}
        self._cumulative: dict[Direction, float] = {}
        self._last_time: float | None = None
        self._layout: _Layout | None = None
        self.resets = 0
        self.wraps = 0
        self.glitches = 0  # single wrong reads (a drop undone at the next poll)

    def add(self, reading: CounterReading) -> None:
        """Account one poll."""
        t = reading.time_s
        if self._last_time is not None and t <= self._last_time:
            return  # a duplicate or out-of-order poll carries no interval
        increments: dict[Direction, float] = {}
        known: dict[Direction, bool] = {}
        values = reading.values
        # Gone: unread for FORGET_COLUMN_AFTER_S and for at least five polls (slow pollers).
        after = FORGET_COLUMN_AFTER_S
        if self._last_time is not None:
            after = max(after, 5.0 * (t - self._last_time))
        gone = [
            name
            for name, seen in self._columns.items()
            if name not in values and t - seen.time_s > after
        ]
        for name in gone:
            del self._columns[name]
            self._layout = None
        for name, seen in self._columns.items():
            if name not in values:
                known[seen.direction] = False  # not read this time: a gap
        for name, value in values.items():
            state = self._columns.get(name)
            if state is None:
                # A device that appears (hot-plug, driver reload) starts counting from here.
                d = column_direction(name)
                known.setdefault(d, True)
                self._columns[name] = _ColumnState(value, t, 32 if value < 2**32 else 64, d)
                continue
            d = state.direction
            known.setdefault(d, True)
            delta: int | None = None
            if state.time_s == self._last_time:
                delta = counter_delta(state.value, value, bits=state.bits, largest=state.largest)
            drop, state.before_drop = state.before_drop, None
            if drop is not None and delta is not None and value >= drop:
                # Back above the value before the drop: that one read was wrong, not a reset
                # (which would start again near 0). Both of its intervals are unknown; read as
                # a reset, this one got the whole counter as bytes (a spike hiding T).
                self.resets -= 1
                self.glitches += 1
                known[d] = False
                delta = value - drop
            if delta is None:
                if value < state.value:
                    self.resets += 1
                    state.before_drop = state.value
                known[d] = False
            else:
                if value < state.value:
                    self.wraps += 1
                state.largest = max(state.largest, float(delta))
                increments[d] = increments.get(d, 0.0) + float(delta)
            if value >= 2**32:
                state.bits = 64
            state.value, state.time_s = value, t
        for d, ok in known.items():
            ring = self._rings.get(d)
            if ring is None:
                ring = self._rings[d] = Ring(self._capacity, 3)
            cum = self._cumulative.get(d, 0.0) + increments.get(d, 0.0)
            self._cumulative[d] = cum
            ring.append((t, cum, 1.0 if ok else 0.0))
        self._last_time = t

    def add_batch(self, batch: CounterBatch) -> None:
        """Account consecutive polls: the same window as :meth:`add` of each poll in turn.

        The usual batch (every column of the window read at the previous poll and at each of
        these, none decreasing, times rising) is taken with array operations; any other (the
        first poll, a device that appears or is missing, a wrap, a reset, a late poll) goes
        poll by poll.
        """
        if not self._add_increasing(batch):
            for reading in batch.readings():
                self.add(reading)

    def _add_increasing(self, batch: CounterBatch) -> bool:
        """:meth:`add_batch`'s array path; False (nothing changed) when it does not apply.

        It repeats :meth:`add`'s arithmetic exactly: per poll, the deltas of a direction are
        summed in column order (``add.accumulate`` along the columns is that sequence of
        additions), and the running total is a sequential ``add.accumulate`` over the polls.
        """
        last = self._last_time
        times = batch.times
        n = int(times.size)
        if last is None or n == 0:
            return False
        layout = self._layout
        if layout is None or layout.columns != batch.columns:
            layout = self._layout_of(batch.columns)
            if layout is None:
                return False
            self._layout = layout
        states = layout.states
        if len(states) != len(self._columns):
            return False  # a column of the window is missing: a gap
        previous = []
        for state in states:
            if state.time_s != last or type(state.value) is not int:
                return False  # not read at the previous poll (or not a counter)
            if state.before_drop is not None:
                return False  # a drop one poll ago: a reset or a wrong read, judged by add
            previous.append(state.value)
        if not times[0] > last or (n > 1 and not bool((times[1:] > times[:-1]).all())):
            return False
        try:
            prev = np.array(previous, dtype=np.uint64)
        except OverflowError:
            return False
        values = batch.values
        stacked = np.concatenate((prev[np.newaxis, :], values))
        later, earlier = stacked[1:], stacked[:-1]
        if not bool((later >= earlier).all()):
            return False  # a wrap or a reset: judged poll by poll
        deltas = (later - earlier).astype(np.float64)
        for d, index in layout.groups:
            increments = np.add.accumulate(deltas[:, index], axis=1)[:, -1]
            start = np.array([self._cumulative.get(d, 0.0)])
            cumulative = np.add.accumulate(np.concatenate((start, increments)))[1:]
            rows = np.empty((n, 3))
            rows[:, 0] = times
            rows[:, 1] = cumulative
            rows[:, 2] = 1.0
            ring = self._rings.get(d)
            if ring is None:
                ring = self._rings[d] = Ring(self._capacity, 3)
            ring.extend(rows)
            self._cumulative[d] = float(cumulative[-1])
        t = float(times[-1])
        # No counter decreased, so the last poll holds each column's largest value.
        for state, top, value in zip(
            states, deltas.max(axis=0).tolist(), values[-1].tolist(), strict=True
        ):
            state.largest = max(state.largest, top)
            if value >= 2**32:
                state.bits = 64
            state.value, state.time_s = value, t
        self._last_time = t
        return True

    def _layout_of(self, columns: tuple[str, ...]) -> _Layout | None:
        """The states of ``columns`` and their indices per direction; None for a new column."""
        states = []
        for name in columns:
            state = self._columns.get(name)
            if state is None:
                return None
            states.append(state)
        by_direction: dict[Direction, list[int]] = {}
        for j, state in enumerate(states):
            by_direction.setdefault(state.direction, []).append(j)
        groups = [(d, np.array(index, dtype=np.intp)) for d, index in by_direction.items()]
        return _Layout(columns, states, groups)

    def __len__(self) -> int:
        return max((len(r) for r in self._rings.values()), default=0)

    def newest_s(self) -> float | None:
        """Time of the newest poll held (None: none)."""
        last = [row[0] for ring in self._rings.values() if (row := ring.last()) is not None]
        return float(max(last)) if last else None

    def span_s(self) -> float:
        """Seconds between the oldest and newest poll held."""
        spans = []
        for ring in self._rings.values():
            first, last = ring.first(), ring.last()
            if len(ring) >= 2 and first is not None and last is not None:
                spans.append(float(last[0] - first[0]))
        return max(spans, default=0.0)

    def drop_before(self, t: float) -> None:
        """Forget polls older than ``t`` (after a step change of the period)."""
        for ring in self._rings.values():
            ring.drop_before(t)

    def grids(
        self, dt: float | None = None, *, since: float | None = None
    ) -> dict[Direction, GridSeries]:
        """Per-direction rate grids over the window (directions with at least 3 polls).

        ``since`` keeps only the polls at or after it.
        """
        out: dict[Direction, GridSeries] = {}
        for d, ring in self._rings.items():
            rows = ring.since(since)
            if rows.shape[0] < 3:
                continue
            times = rows[:, 0]
            deltas = np.diff(rows[:, 1])
            deltas[rows[1:, 2] < 0.5] = np.nan
            try:
                out[d] = grid_from_cumulative(times, deltas, dt=dt)
            except ValueError:
                continue
        return at_refresh_interval(out)


class DeviceDeltas:
    """Per column byte increments of one counter source's polls: each device's own window.

    :class:`CounterWindow` sums a source's columns per direction as they come, so which device
    moved which bytes is gone there. Two jobs on their own rails of one host, or a rail slower
    than the others, show only per device (:mod:`agent.devices`). Rows are (time, increment
    per column); an increment that is not a plain rise (a reset, a wrap, a column unread at
    the poll before) is unknown (NaN). A change of the columns (a device that came or went)
    starts the window over.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._columns: tuple[str, ...] = ()
        self._ring: Ring | None = None
        self._previous: npt.NDArray[np.uint64] | None = None
        self._last_time: float | None = None

    def add(self, reading: CounterReading) -> None:
        """Account one poll."""
        columns = tuple(sorted(reading.values))
        values = np.asarray([[reading.values[c] for c in columns]], dtype=np.uint64)
        self._add(np.asarray([reading.time_s]), columns, values)

    def add_batch(self, batch: CounterBatch) -> None:
        """Account consecutive polls at once."""
        if len(batch):
            self._add(batch.times, batch.columns, batch.values)

    def _add(
        self, times: FloatArray, columns: tuple[str, ...], values: npt.NDArray[np.uint64]
    ) -> None:
        if columns != self._columns or self._ring is None:
            self._columns = columns
            self._ring = Ring(self._capacity, 1 + len(columns))
            self._previous, self._last_time = None, None
        if self._last_time is not None:
            keep = times > self._last_time  # duplicate or out-of-order polls: no interval
            if not keep.all():
                times, values = times[keep], values[keep]
        if times.size == 0:
            return
        if self._previous is None:
            self._previous, self._last_time = values[0], float(times[0])
            times, values = times[1:], values[1:]
            if times.size == 0:
                return
        stacked = np.vstack((self._previous[np.newaxis, :], values))
        before, after = stacked[:-1], stacked[1:]
        rose = after >= before
        increments = np.where(
            rose, (after - np.where(rose, before, after)).astype(np.float64), np.nan
        )
        rows = np.empty((times.size, 1 + len(columns)))
        rows[:, 0] = times
        rows[:, 1:] = increments
        self._ring.extend(rows)
        self._previous, self._last_time = values[-1], float(times[-1])

    def rows(self, since: float | None = None) -> tuple[tuple[str, ...], FloatArray]:
        """The columns and a copy of the rows ``since`` on (for :func:`device_grids`)."""
        if self._ring is None:
            return (), np.empty((0, 1))
        return self._columns, self._ring.since(since)

    def devices(
        self, since: float | None = None, only: Collection[str] | None = None
    ) -> dict[str, dict[Direction, GridSeries]]:
        """Each device's rate grids (directions with at least 3 polls), ``since`` on."""
        return device_grids(*self.rows(since), only=only)


def device_grids(
    columns: tuple[str, ...], rows: FloatArray, *, only: Collection[str] | None = None
) -> dict[str, dict[Direction, GridSeries]]:
    """Each device's rate grids from :meth:`DeviceDeltas.rows` (a pure function of them).

    ``only``: these devices' (each grid costs a pass over the rows).
    """
    if rows.shape[0] < 3:
        return {}
    times = rows[:, 0]
    parts: dict[tuple[str, Direction], list[int]] = {}
    for j, name in enumerate(columns):
        parts.setdefault((column_device(name), column_direction(name)), []).append(j + 1)
    out: dict[str, dict[Direction, GridSeries]] = {}
    for (device, direction), cols in parts.items():
        if not device or direction == "total" or (only is not None and device not in only):
            continue
        deltas = rows[1:, cols].sum(axis=1)  # NaN in any column: unknown
        try:
            grid = grid_from_cumulative(times, deltas)
        except ValueError:
            continue
        out.setdefault(device, {})[direction] = grid
    return {d: at_refresh_interval(g) for d, g in out.items()}


class GpuWindow:
    """Recent GPU samples, one ring of (time, gpu, signal values...) per signal set."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._signals: tuple[str, ...] | None = None
        self._ring: Ring | None = None

    def add(self, reading: GpuReading) -> None:
        """Account one sample; a change of the signal set restarts the window."""
        names = tuple(sorted(reading.signals))
        if names != self._signals or self._ring is None:
            self._signals = names
            self._ring = Ring(self._capacity, 2 + len(names))
        row = [reading.time_s, float(reading.gpu)]
        row.extend(float(reading.signals[n]) for n in names)
        self._ring.append(row)

    def samples(self, since: float | None = None) -> GpuSamples | None:
        """The window's samples (optionally only those at or after ``since``)."""
        if self._ring is None or self._signals is None or len(self._ring) < 2:
            return None
        rows = self._ring.since(since)
        if rows.shape[0] < 2:
            return None
        return GpuSamples(
            times=rows[:, 0],
            gpu=rows[:, 1].astype(np.int64),
            signals={n: rows[:, 2 + i] for i, n in enumerate(self._signals)},
        )


#: Upper bounds of the message-size histogram: 1 KiB to 16 GiB in powers of 4 (then +Inf).
MESSAGE_SIZE_BOUNDS = tuple(float(1024 * 4**i) for i in range(13))


@dataclass(frozen=True)
class SizeHistogram:
    """Values seen since the agent started (collective sizes S, burst sizes or durations).

    Counts per bucket (the last one is +Inf) and their sum; unknown (NaN) values are left out.
    """

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total_bytes: float


class Tally:
    """A cumulative histogram with Prometheus' ``le`` buckets: bucket i holds (b[i-1], b[i]]."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds_t = bounds
        self._bounds = np.asarray(bounds)
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)
        self._sum = 0.0

    def add(self, values: FloatArray) -> None:
        """Count the finite values."""
        known = values[np.isfinite(values)]
        if known.size:
            idx = np.searchsorted(self._bounds, known, side="left")
            self._counts += np.bincount(idx, minlength=self._counts.size)
            self._sum += float(known.sum())

    def histogram(self) -> SizeHistogram | None:
        """Everything counted so far (None before the first value)."""
        if not self._counts.any():
            return None
        return SizeHistogram(self._bounds_t, tuple(int(c) for c in self._counts), self._sum)


#: Upper bounds of the burst-duration histogram (seconds), then +Inf: an MoE AlltoAll train
#: lasts milliseconds, a training step's gradient burst up to seconds.
BURST_SECONDS_BOUNDS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0
)  # fmt: skip
#: Upper bounds of the burst-size histogram (bytes above the background): 64 KiB to 64 GiB.
BURST_BYTES_BOUNDS = tuple(float(65536 * 4**i) for i in range(11))


class BurstTally:
    """Sizes and durations of every burst the live agent has seen end, each counted once.

    Each hop re-segments a window that overlaps the previous one, so a burst shows up in
    several hops: only complete bursts that start more than one bin after the last counted
    start are new (a burst segmented again starts within a bin of where it did before).
    """

    def __init__(self) -> None:
        self.sizes = Tally(BURST_BYTES_BOUNDS)
        self.durations = Tally(BURST_SECONDS_BOUNDS)
        self._last_start = -np.inf

    def add(
        self,
        starts_s: FloatArray,
        sizes: FloatArray,
        seconds: FloatArray,
        dt: float,
        *,
        min_rate: float = 0.0,
    ) -> int:
        """Count the bursts starting after the last counted one; returns how many were new.

        Bursts slower than ``min_rate`` (bytes/s) are chatter (an ARP, a teardown's last
        packets), not collectives, and are not counted; one whose duration is unknown (NaN,
        too short to resolve) is.
        """
        slow = sizes < min_rate * seconds  # False where the duration is NaN
        starts_s, sizes, seconds = starts_s[~slow], sizes[~slow], seconds[~slow]
        new = starts_s > self._last_start + dt
        if not new.any():
            return 0
        self.sizes.add(sizes[new])
        self.durations.add(seconds[new])
        self._last_start = float(starts_s[new].max())
        return int(new.sum())


#: Upper bounds of the collective execution-time histogram (seconds), then +Inf.
EXEC_TIME_BOUNDS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


@dataclass(frozen=True)
class OpTimings:
    """GPU execution times of one op since the start (histogram) and its recent bus bandwidth."""

    counts: tuple[int, ...]
    total_s: float
    busbw_p50: float | None


class TimingWindow:
    """What the NCCL Inspector timed: per op, a cumulative histogram and recent bandwidths."""

    RECENT = 256

    def __init__(self) -> None:
        self._bounds = np.asarray(EXEC_TIME_BOUNDS)
        self._counts: dict[str, npt.NDArray[np.int64]] = {}
        self._sums: dict[str, float] = {}
        self._busbw: dict[str, Ring] = {}

    def add(self, batch: TimingBatch) -> None:
        """Account the operations of a batch."""
        for call in batch.calls:
            counts = self._counts.get(call.op)
            if counts is None:
                if len(self._counts) >= 64:  # op names come from files: keep the label set small
                    continue
                counts = self._counts[call.op] = np.zeros(len(EXEC_TIME_BOUNDS) + 1, np.int64)
                self._busbw[call.op] = Ring(self.RECENT, 1)
            counts[int(np.searchsorted(self._bounds, call.exec_s, side="left"))] += 1
            self._sums[call.op] = self._sums.get(call.op, 0.0) + call.exec_s
            if call.busbw is not None:
                self._busbw[call.op].append((call.busbw,))

    def summary(self) -> dict[str, OpTimings]:
        """Per op: the histogram since the start and the median of the recent bandwidths."""
        out = {}
        for op, counts in sorted(self._counts.items()):
            recent = self._busbw[op].view()[:, 0]
            out[op] = OpTimings(
                tuple(int(c) for c in counts),
                self._sums[op],
                float(np.median(recent)) if recent.size else None,
            )
        return out


class CollectiveWindow:
    """Recent collective calls plus running totals per op since the agent started."""

    #: Distinct call keys remembered (a job makes a few hundred: ops × comms × peers); calls
    #: of keys beyond are kept with an unknown key until the table starts over.
    MAX_KEYS = 16384
    #: Seconds of calls over which a verdict on blocks of lines stands (see ``_resolution``).
    BLOCKS_EVERY_S = 5.0
    #: ... over the newest this many calls: how lines reach the file does not change from
    #: one second to the next, and at 5 k lines/s a whole locked window (80 k calls) cost
    #: 9 ms a test, the whole ring of an NCCL-only agent (600 k) 70 ms.
    BLOCKS_CALLS = 16384

    def __init__(self, capacity: int) -> None:
        self._ring = Ring(capacity, 3)  # time, S bytes (NaN when unknown), key id (-1 unknown)
        self._sizes = Tally(MESSAGE_SIZE_BOUNDS)
        self._key_ids: dict[CallKey, int] = {}
        self._keys: list[CallKey] = []
        self.totals: dict[str, tuple[int, int]] = {}
        self.nranks: int | None = None
        self.processes: set[str] = set()
        self._comms: dict[str, tuple[int, float]] = {}  # commId → (nranks, last call time)
        # Calls stamped on arrival: the newest one's time, and how coarse their times are.
        self._coarse_until = -math.inf
        self._coarse_s = 0.0
        # Lines timed in blocks (see _resolution): how coarse, as of the newest call then.
        self._blocks_s = 0.0
        self._blocks_at = -math.inf

    def _see_comm(self, comm_id: str | None, nranks: int | None, time_s: float) -> None:
        if comm_id is None:
            return
        if comm_id not in self._comms and len(self._comms) >= 256:
            oldest = min(self._comms, key=lambda k: self._comms[k][1])
            del self._comms[oldest]
        self._comms[comm_id] = (nranks or 0, time_s)

    def job_comm_id(self, since: float | None = None) -> str | None:
        """The commId of the largest communicator that made calls since ``since`` (the job's).

        Ties go to the smallest id, so every host of a job names the same communicator; a
        communicator that went quiet stops naming the job (a new job on the host takes over).
        """
        live = [(-n, cid) for cid, (n, t) in self._comms.items() if since is None or t >= since]
        return min(live)[1] if live else None

    def add(self, call: CollectiveCall) -> None:
        """Account one COLL line."""
        count, nbytes = self.totals.get(call.op, (0, 0))
        self.totals[call.op] = (count + 1, nbytes + (call.s_bytes or 0))
        if call.nranks is not None:
            self.nranks = max(self.nranks or 0, call.nranks)
        self._see_comm(call.comm_id, call.nranks, call.time_s)
        process = str(call.extra.get("process", call.comm))
        self.processes.add(process)
        peer, rank = call.extra.get("peer"), call.extra.get("rank")
        key = CallKey(
            call.op,
            process,
            call.comm,
            call.nranks,
            peer if isinstance(peer, int) and call.op in ("Send", "Recv") else -1,
            rank if isinstance(rank, int) else None,
            call.comm_id,
        )
        size = float(call.s_bytes) if call.s_bytes is not None else np.nan
        self._ring.append((call.time_s, size, self._key_id(key)))
        self._sizes.add(np.asarray([size]))

    def _key_id(self, key: CallKey) -> int:
        kid = self._key_ids.get(key)
        if kid is None:
            if len(self._keys) >= self.MAX_KEYS:
                return -1
            kid = self._key_ids[key] = len(self._keys)
            self._keys.append(key)
        return kid

    def size_histogram(self) -> SizeHistogram | None:
        """Sizes of every call since the start (None before the first sized call)."""
        return self._sizes.histogram()

    def add_batch(self, batch: CallBatch) -> None:
        """Account a batch of COLL lines."""
        for op, (count, nbytes) in batch.ops.items():
            c0, b0 = self.totals.get(op, (0, 0))
            self.totals[op] = (c0 + count, b0 + nbytes)
        if batch.nranks is not None:
            self.nranks = max(self.nranks or 0, batch.nranks)
        self.processes.update(batch.processes)
        self._see_comm(batch.comm_id, batch.nranks, batch.time_s)
        if batch.time_resolution_s > 0 and batch.times.size:
            self._coarse_until = max(self._coarse_until, float(batch.times.max()))
            self._coarse_s = batch.time_resolution_s
        if batch.times.size:
            if batch.keys and batch.key_ids.size == batch.times.size:
                local = np.asarray([self._key_id(k) for k in batch.keys] + [-1], dtype=np.float64)
                ids = local[batch.key_ids]
            else:
                ids = np.full(batch.times.size, -1.0)
            rows = np.column_stack((batch.times, batch.s_bytes, ids))
            if (batch.times[1:] < batch.times[:-1]).any():
                # Files of several processes come one after another in a sweep: in time order
                # the ring's `since` bisects instead of comparing every row, every hop.
                rows = rows[np.argsort(batch.times, kind="stable")]
            self._ring.extend(rows)
            self._sizes.add(batch.s_bytes)

    def resolution_s(self, since: float | None = None) -> float:
        """How coarse the times of the calls since ``since`` are (0: NCCL's own, fine).

        Lines timed in blocks count as coarse as the blocks are apart, as last found by
        :meth:`mix`.
        """
        read = self._coarse_s if since is None or self._coarse_until >= since else 0.0
        return max(read, self._blocks_s)

    def mix(self, since: float | None = None) -> CollectiveMix | None:
        """The estimator's view: totals since start, timed calls within the window."""
        if not self.totals:
            return None
        rows = self._ring.since(since)
        # Who made each call, for T from the calls' order (agent.call_sequence): with coarse
        # times it may be the only T; with fine ones it checks the binned calls' period.
        ids = rows[:, 2].astype(np.int64)
        processes = process_codes(k.process for k in self._keys)[ids]
        return CollectiveMix(
            ops=dict(self.totals),
            nranks=self.nranks,
            call_times=rows[:, 0],
            call_bytes=rows[:, 1],
            processes=len(self.processes),
            time_resolution_s=self._resolution(rows, ids, processes, since),
            call_keys=ids,
            call_processes=processes,
        )

    def _resolution(
        self,
        rows: npt.NDArray[np.float64],
        ids: npt.NDArray[np.int64],
        processes: npt.NDArray[np.int64],
        since: float | None,
    ) -> float:
        """How coarse the times of these calls are, lines timed in blocks included.

        A job's stdout through a pipe (``2>&1 | tee``, a container's log under
        ``/var/log/pods``) reaches the file in 4 KiB blocks: stamped on arrival, or by the
        container runtime, a block's lines share one time, blocks seconds apart, and their
        rhythm read as T (0.5 s steps: 4.3 s). Such times are as coarse as the blocks are
        apart (:func:`agent.call_sequence.clumped_resolution`), which times the calls by their
        order, as ``analyze`` does. The verdict is kept for ``BLOCKS_EVERY_S`` of calls: on
        a log stamped when read every poll is a clump, and the test costs 30 ms at 69 k calls.
        It reads the newest ``BLOCKS_CALLS`` calls: thousands of blocks where there are that
        many, the whole window where calls are fewer.
        """
        newest = float(rows[-1, 0]) if rows.shape[0] else -math.inf
        if not self._blocks_at <= newest < self._blocks_at + self.BLOCKS_EVERY_S:
            last = slice(-self.BLOCKS_CALLS, None)
            self._blocks_s = clumped_resolution(
                rows[last, 0], processes[last], ids[last], rows[last, 1]
            )
            self._blocks_at = newest
        return self.resolution_s(since)

    def table(self, since: float | None = None, limit: int | None = None) -> CallTable | None:
        """The window's calls with their keys (the newest ``limit``), None when there are none.

        The key table starts over once it is full and every call that used it has left the
        ring, so a long-lived agent whose jobs come and go keeps naming its calls.
        """
        if limit is None:
            rows = self._ring.since(since)
        else:
            rows = self._ring.tail(limit)
            if since is not None:
                rows = rows[rows[:, 0] >= since]
        if len(self._keys) >= self.MAX_KEYS and not (self._ring.view()[:, 2] >= 0).any():
            self._key_ids.clear()
            self._keys.clear()
        if rows.shape[0] == 0:
            return None
        return CallTable(
            times=rows[:, 0],
            nbytes=rows[:, 1],
            key_ids=rows[:, 2].astype(np.int32),
            keys=tuple(self._keys),
            resolution_s=self.resolution_s(float(rows[0, 0])),
        )


def window_capacity(window_s: float, rate_hz: float, *, minimum: int = 64) -> int:
    """Ring size that holds ``window_s`` of samples at ``rate_hz`` (with 10 % slack)."""
    return max(minimum, int(window_s * rate_hz * 1.1) + 1)


@dataclass(frozen=True)
class DeviceStatus:
    """One device of one counter source, as the exporter shows it."""

    source: str
    device: str
    info: DeviceInfo | None
    tx_bytes: int | None
    rx_bytes: int | None
    counters: Mapping[str, int]
    tx_rate: float | None
    rx_rate: float | None


@dataclass
class _DeviceState:
    info: DeviceInfo | None = None
    values: dict[str, tuple[float, int]] = field(default_factory=dict)  # direction → (t, bytes)
    counters: dict[str, int] = field(default_factory=dict)
    mark: dict[str, tuple[float, int]] = field(default_factory=dict)  # at the previous hop
    largest: dict[str, float] = field(default_factory=dict)
    rates: dict[str, float | None] = field(default_factory=dict)
    idle_hops: dict[str, int] = field(default_factory=dict)  # hops without a new read
    vanished_hops: int = 0  # hops since the source said the device vanished


#: Hops a vanished device stays in the table (and on /metrics, as vanished) before it goes.
VANISHED_KEEP_HOPS = 300

#: Hops a device's last rate is shown again without a new read (a poll slower than the hop);
#: after that it has no rate: a device no longer read must not show its last one forever.
MAX_REPEATED_HOPS = 3


def split_column(column: str) -> tuple[str, Direction] | None:
    """``mlx5_0:1_tx_bytes`` → (``mlx5_0:1``, ``tx``); None for other column names."""
    for suffix, direction in (("_tx_bytes", "tx"), ("_rx_bytes", "rx")):
        if column.endswith(suffix):
            return column[: -len(suffix)], direction
    return None


class DeviceTable:
    """Latest raw counters and last-hop bandwidth of every device of every counter source."""

    def __init__(self) -> None:
        self._devices: dict[tuple[str, str], _DeviceState] = {}
        # (source, batch columns) → (column index, the device's values, direction): split once.
        self._targets: dict[
            tuple[str, tuple[str, ...]], list[tuple[int, dict[str, tuple[float, int]], str]]
        ] = {}

    def _state(self, source: str, device: str) -> _DeviceState:
        key = (source, device)
        st = self._devices.get(key)
        if st is None:
            st = self._devices[key] = _DeviceState()
        return st

    def add_info(self, source: str, info: DeviceInfo) -> None:
        """Record (or replace) what the source says about a device.

        A device that vanishes is shown as such for ``VANISHED_KEEP_HOPS`` hops, then
        forgotten; one that was never read (skipped: a pod's veth) is forgotten at once. On a
        node with pod churn every veth that ever existed stayed in the table and on /metrics.
        """
        key = (source, info.device)
        previous = self._devices.get(key)
        if info.skipped == "vanished" and (
            previous is None or previous.info is None or previous.info.skipped is not None
        ):
            self._forget(key)
            return
        st = self._state(source, info.device)
        st.info = info
        st.vanished_hops = 0

    def _forget(self, key: tuple[str, str]) -> None:
        if self._devices.pop(key, None) is not None:
            self._targets.clear()  # they hold the forgotten device's values

    def source_down(self, source: str) -> None:
        """A source that stopped: its devices show as vanished (then are forgotten).

        When the last RDMA port went away, the source stopped before its "vanished" notes
        were delivered, and the port stayed on /metrics as ACTIVE with its last counters.
        A source that comes back says again what it finds.
        """
        for key, st in list(self._devices.items()):
            if key[0] != source:
                continue
            if st.info is None or st.info.skipped not in (None, "vanished"):
                self._forget(key)
            elif st.info.skipped is None:  # (a vanished one keeps counting its hops)
                st.info = replace(st.info, skipped="vanished")
                st.vanished_hops = 0

    def add_reading(self, source: str, reading: CounterReading) -> None:
        """Keep the newest raw values."""
        for column, value in reading.values.items():
            parts = split_column(column)
            if parts is not None:
                self._state(source, parts[0]).values[parts[1]] = (reading.time_s, value)
        for device, counters in reading.counters.items():
            self._state(source, device).counters.update(counters)

    def add_batch(self, source: str, batch: CounterBatch) -> None:
        """Keep the newest raw values of a batch (its last poll read every column)."""
        if len(batch) == 0:
            return
        key = (source, batch.columns)
        targets = self._targets.get(key)
        if targets is None:
            if len(self._targets) >= 64:  # devices came and went: start over
                self._targets.clear()
            targets = self._targets[key] = []
            for j, column in enumerate(batch.columns):
                parts = split_column(column)
                if parts is not None:
                    targets.append((j, self._state(source, parts[0]).values, parts[1]))
        t = float(batch.times[-1])
        newest = batch.values[-1].tolist()
        for j, values, direction in targets:
            values[direction] = (t, newest[j])
        for _, counters in batch.counters:
            for device, device_counters in counters.items():
                self._state(source, device).counters.update(device_counters)

    def hop(self) -> list[DeviceStatus]:
        """Bandwidth of each device and direction since the previous call."""
        out = []
        for key, st in list(self._devices.items()):
            if st.info is not None and st.info.skipped == "vanished":
                st.vanished_hops += 1
                if st.vanished_hops > VANISHED_KEEP_HOPS:
                    self._forget(key)
        for (source, device), st in sorted(self._devices.items()):
            for direction, (t, value) in st.values.items():
                prev = st.mark.get(direction)
                rate = None
                if prev is not None and t <= prev[0]:  # no new read since the last hop
                    idle = st.idle_hops[direction] = st.idle_hops.get(direction, 0) + 1
                    rate = st.rates.get(direction) if idle <= MAX_REPEATED_HOPS else None
                else:
                    st.idle_hops[direction] = 0
                    if prev is not None:
                        bits = 64 if max(value, prev[1]) >= 2**32 else 32
                        delta = counter_delta(
                            prev[1], value, bits=bits, largest=st.largest.get(direction, 0.0)
                        )
                        if delta is not None:
                            st.largest[direction] = max(
                                st.largest.get(direction, 0.0), float(delta)
                            )
                            rate = delta / (t - prev[0])
                st.rates[direction] = rate
                st.mark[direction] = (t, value)
            skipped = st.info is not None and st.info.skipped is not None
            stuck = st.info.stale_counters if st.info is not None else frozenset()
            out.append(
                DeviceStatus(
                    source=source,
                    device=device,
                    info=st.info,
                    tx_bytes=None if skipped else st.values.get("tx", (0.0, None))[1],
                    rx_bytes=None if skipped else st.values.get("rx", (0.0, None))[1],
                    counters={} if skipped else dict(st.counters),
                    # A saturated byte counter has no rate (its last one was shown 4 hops on).
                    tx_rate=None if skipped or XMIT_DATA in stuck else st.rates.get("tx"),
                    rx_rate=None if skipped or RCV_DATA in stuck else st.rates.get("rx"),
                )
            )
        return out
