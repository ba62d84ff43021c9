"""Cumulative counters → clean byte totals → rates on a uniform time grid.

Counters are read at irregular, measured instants. Everything downstream (periodogram,
autocorrelation, burst statistics) wants a uniform grid. The conversion here is exact for the
only assumption a counter allows — constant rate between two reads — and never invents bytes:

1. per column, successive differences are taken in the counter's own width (wrap-around is
   modular arithmetic); a decrease that is not a plausible wrap is a *reset*: the bytes of that
   interval are unknown, so the interval is marked invalid (never zero, never negative);
2. the valid differences of all columns of one direction are summed into one monotone
   cumulative series;
3. that piecewise-linear cumulative curve is read at the grid edges, and each slot's rate is
   its increment over the slot width. A missed poll therefore spreads its merged bytes evenly
   over the slots it covers, exactly what a slower poll would have shown.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.levels import boxcar
from agent.quantiles import percentiles

__all__ = [
    "Direction",
    "GridSeries",
    "column_direction",
    "column_words",
    "counter_delta",
    "counter_deltas",
    "grid_from_cumulative",
    "group_columns",
    "nominal_interval",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

Direction = str  # "tx" | "rx" | "total"

#: Above this many nominal intervals, a gap between two reads is not spread but marked invalid:
#: a flat stretch that long would read as a real (and false) traffic level.
MAX_SPREAD_INTERVALS = 50.0


@dataclass(frozen=True)
class PollIntervals:
    """The counter reads a grid was resampled from.

    ``times`` are the n + 1 read instants and ``rate`` the mean rate over each of the n
    intervals between them (NaN where unknown). A grid slot is a time-weighted mix of the
    intervals it overlaps; only the intervals themselves say which stretches of time were
    wholly inside a burst.
    """

    times: FloatArray
    rate: FloatArray


@dataclass(frozen=True)
class GridSeries:
    """Rates on a uniform grid.

    ``rate[i]`` is the mean rate (bytes/s) over ``[t0 + i*dt, t0 + (i+1)*dt)``; ``valid[i]`` is
    False where the slot overlaps a counter reset, a long gap or the region before the first
    read. ``resets`` and ``wraps`` count what the delta step found. ``polls`` are the reads
    the grid was resampled from, when it came from counters. ``refresh_s`` is the interval at
    which the counters changed when that was longer than the poll (a driver that refreshes
    its statistics on a timer, see :func:`refresh_cadence`): detail finer than it is not real.
    """

    t0: float
    dt: float
    rate: FloatArray
    valid: BoolArray
    resets: int = 0
    wraps: int = 0
    polls: PollIntervals | None = field(default=None, repr=False, compare=False)
    refresh_s: float | None = None

    @property
    def times(self) -> FloatArray:
        """Centre time of every slot."""
        return self.t0 + (np.arange(self.rate.size, dtype=np.float64) + 0.5) * self.dt

    @property
    def duration_s(self) -> float:
        """Length of the grid in seconds."""
        return float(self.rate.size * self.dt)

    def from_traffic_start(self) -> GridSeries:
        """The grid without the idle before its traffic (:func:`active_span`'s start).

        A ring that filled before a job would dilute its steps in every estimate.
        """
        start, _ = active_span(self.rate)
        return self.sliced(start, self.rate.size) if start else self

    def sliced(self, i0: int, i1: int) -> GridSeries:
        """Slots ``i0`` to ``i1`` (exclusive) as a grid of their own (polls kept whole)."""
        return GridSeries(
            t0=self.t0 + i0 * self.dt,
            dt=self.dt,
            rate=self.rate[i0:i1],
            valid=self.valid[i0:i1],
            resets=self.resets,
            wraps=self.wraps,
            polls=self.polls,
            refresh_s=self.refresh_s,
        )


#: A slot below this fraction of the traffic's high level (its 99th percentile) is idle.
IDLE_FRACTION = 0.05


def busy_slots(rate: FloatArray) -> npt.NDArray[np.intp]:
    """Indices of the slots that are not idle (empty when there is no traffic at all).

    Idle is below ``IDLE_FRACTION`` of the traffic's level: its 99th percentile, or, where
    traffic fills under 1 % of the slots (a 10 s job in a 10 min capture, with ARP or a scrape
    every few seconds), the rate of the slots that carry half the bytes; the 99th percentile
    was then 0 or the chatter's, nothing was idle, and the chatter's period or an idle host
    was reported. Unknown (NaN) is not idle.
    """
    finite = rate[np.isfinite(rate)]
    if finite.size == 0:
        return np.empty(0, dtype=np.intp)
    high = float(percentiles(finite, [99.0])[0])
    top = float(finite.max())
    if high < IDLE_FRACTION * top:  # sparse traffic: weigh the slots by their bytes
        busy = np.sort(finite[finite > IDLE_FRACTION * high])
        share = np.cumsum(busy)
        high = float(busy[np.searchsorted(share, 0.5 * share[-1])])
    if high <= 0:
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(~(rate <= IDLE_FRACTION * high))


def on_runs(mask: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Start and end (exclusive) indices of the True runs of ``mask``."""
    padded = np.concatenate(([False], mask, [False]))
    change = np.flatnonzero(padded[1:] != padded[:-1])
    return change[0::2].astype(np.int64), change[1::2].astype(np.int64)


def active_span(rate: FloatArray) -> tuple[int, int]:
    """Slots ``[i0, i1)`` without the idle stretch before the traffic and the one after it.

    A recording that starts before a job (its start-up: imports, rendezvous) or runs on after
    it, a capture with a stray ARP frame minutes away: such idle, next to traffic of high duty
    cycle, is most of what the autocorrelation sees, and hides the period. An idle stretch at
    either end is cut only when it is longer than twice the longest one inside the traffic
    (an off phase of the job), keeping one such off phase, so that the first burst still has
    its rising edge. Unknown (NaN) slots inside the traffic are not idle (a gap is no off
    phase), but the ends are found among the known slots: an unknown slot at either end (a
    device not read at the last poll) must not make the idle before it part of the traffic.
    A long hole without reads at an end is cut, with all beyond it.
    Returns ``(0, n)`` when nothing is cut.
    """
    n = rate.size
    busy = busy_slots(rate)
    known = np.isfinite(rate)
    busy = busy[known[busy]]
    if busy.size < 2:
        return 0, n
    first, last = int(busy[0]), int(busy[-1])
    # The longest run of known idle slots between the first and the last busy one.
    idle = known[first : last + 1].copy()
    idle[busy - first] = False
    starts, ends = on_runs(idle)
    inner = int((ends - starts).max()) if starts.size else 0
    keep = max(1, inner)
    cut = max(2 * inner, 8)
    # Beyond a hole without reads longer than that, an end holds nothing of the traffic: a
    # last row an hour after the others (a poll that found the job gone) left an hour of
    # unknown slots, which moved T from 1.0 to 6.8 s.
    lo, hi = _past_holes(known, first, last, cut)
    head, tail = int(known[lo:first].sum()), int(known[last + 1 : hi].sum())  # known idle
    i0 = first - keep if head > cut else lo
    i1 = last + 1 + keep if tail > cut else hi
    return i0, i1


def _past_holes(
    known: npt.NDArray[np.bool_], first: int, last: int, longer: int
) -> tuple[int, int]:
    """Slots ``[lo, hi)``: the ends beyond holes of over ``longer`` unknown slots cut.

    Only holes before slot ``first`` and after slot ``last`` (the traffic's) count.
    """
    unknown = np.concatenate(([0], (~known).astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(unknown))
    starts, ends = edges[0::2], edges[1::2]
    long = (ends - starts) > longer
    lo = int(ends[long & (ends <= first)].max(initial=0))
    hi = int(starts[long & (starts > last)].min(initial=known.size))
    return lo, hi


_DIRECTION_WORDS = {"tx": "tx", "xmit": "tx", "transmit": "tx", "transmitted": "tx",
                    "sent": "tx", "send": "tx", "out": "tx", "egress": "tx",
                    "rx": "rx", "rcv": "rx", "receive": "rx", "received": "rx", "recv": "rx",
                    "in": "rx", "ingress": "rx"}  # fmt: skip


def column_words(name: str) -> list[str]:
    """A column name's words, lower case (``ifHCOutOctets``: if, hc, out, octets).

    Split at non-alphanumerics and at camelCase humps, as other tools name their counters.
    """
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", spaced)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


@functools.lru_cache(maxsize=4096)
def column_direction(name: str) -> Direction:
    """Direction of a counter column from its name.

    The counters-CSV contract says a column containing ``tx`` is transmit and ``rx`` receive.
    The *last* direction word wins, so a device named after one (``rxe0_tx_bytes``, soft-RoCE)
    keeps the direction of its suffix; InfiniBand's own names (``port_xmit_data``,
    ``port_rcv_data``) are accepted, and so are other tools' words for the two: psutil's
    ``bytes_sent``/``bytes_recv``, SNMP's ``ifHCOutOctets``/``ifHCInOctets``, ``egress`` and
    ``ingress``. Anything else is ``total`` (used only when no tx/rx column exists).
    """
    words = column_words(name)
    for word in reversed(words):
        if word in _DIRECTION_WORDS:
            return _DIRECTION_WORDS[word]
    low = name.lower()  # glued forms such as "nictx0"
    last_tx = max(low.rfind("tx"), low.rfind("xmit"))
    last_rx = max(low.rfind("rx"), low.rfind("rcv"))
    if last_tx < 0 and last_rx < 0:
        return "total"
    return "tx" if last_tx > last_rx else "rx"


#: Words between a device's name and its direction that name no device.
_COUNTER_WORDS = frozenset({"port", "ports", "bytes", "byte", "octets", "data", "counters", "hw"})


def column_device(name: str) -> str:
    """The device a counter column counts, as the column spells it: ``mlx5_0:1``, ``eth0``.

    The text before the column's last direction word, less words that name the counter
    (``mlx5_0:1_port_xmit_data``: ``mlx5_0:1``); empty when there is none (``tx_bytes``).
    """
    tokens = list(re.finditer(r"[A-Za-z0-9]+", name))
    way = [m for m in tokens if m.group().lower() in _DIRECTION_WORDS]
    if not way:
        return ""
    head = [m for m in tokens if m.end() <= way[-1].start()]
    while head and head[-1].group().lower() in _COUNTER_WORDS:
        head.pop()
    return name[head[0].start() : head[-1].end()] if head else ""


def group_columns(names: Sequence[str]) -> dict[Direction, list[int]]:
    """Indices of the columns of each direction (only directions that have columns)."""
    groups: dict[Direction, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(column_direction(name), []).append(i)
    return groups


def counter_deltas(
    values: npt.NDArray[np.uint64], *, bits: int | None = None
) -> tuple[FloatArray, int, int]:
    """Differences of one cumulative counter column, NaN where the bytes are unknown.

    Args:
        values: raw counter reads in time order.
        bits: counter width; ``None`` infers 32 when every value fits in 32 bits, else 64.

    Returns:
        ``(deltas, resets, wraps)`` with ``deltas`` one shorter than ``values``; a decrease
        is judged by :func:`counter_delta` against the column's largest ordinary difference,
        and a reset leaves its interval NaN.
    """
    if values.size < 2:
        return np.empty(0, dtype=np.float64), 0, 0
    if bits is None:
        bits = 32 if int(values.max()) < 2**32 else 64
    prev = values[:-1]
    cur = values[1:]
    increasing = cur >= prev
    deltas = np.full(prev.size, np.nan, dtype=np.float64)
    deltas[increasing] = (cur[increasing] - prev[increasing]).astype(np.float64)
    decreasing = np.flatnonzero(~increasing)
    if decreasing.size == 0:
        return deltas, 0, 0
    ordinary = deltas[increasing]
    largest = float(ordinary.max()) if ordinary.size else 0.0
    resets = wraps = 0
    for i in decreasing:
        d = counter_delta(int(prev[i]), int(cur[i]), bits=bits, largest=largest)
        if d is None:
            resets += 1
        else:
            deltas[i] = float(d)
            wraps += 1
    return deltas, resets, wraps


def counter_delta(prev: int, cur: int, *, bits: int = 64, largest: float = 0.0) -> int | None:
    """Bytes between two reads of one counter of width ``bits``, or None (a reset).

    A decrease is a wrap only when the previous value was in the top half of the range, the
    new one in the bottom half, and the wrapped difference is at most twice ``largest``, the
    largest ordinary difference seen on that counter; anything else is a reset, whose bytes
    are unknown.
    """
    if cur >= prev:
        return cur - prev
    modulus = 1 << bits
    half = modulus >> 1
    wrapped = (cur - prev) % modulus
    if prev >= half and cur < half and largest > 0 and wrapped <= 2.0 * largest:
        return wrapped
    return None


def glitch_reads(values: npt.NDArray[np.uint64]) -> BoolArray:
    """Single reads off a counter's trajectory: a 0 or a spike between two reads that agree.

    A counter that drops and then, one read later, is back at or above where it was before
    the drop was not reset (a reset or a wrap starts counting again from near zero): that one
    read was wrong (a tool that wrote 0 for a failed read, a corrupted cell). Read as a reset,
    it lost an interval and then gave the next one the counter's whole value as bytes, a spike
    that hid the period of the whole recording. Such reads are better treated as missed.
    """
    out = np.zeros(values.size, dtype=np.bool_)
    if values.size < 3:
        return out
    before, read, after = values[:-2], values[1:-1], values[2:]
    out[1:-1] = ((read < before) | (after < read)) & (before <= after)
    return out


def nominal_interval(times: FloatArray) -> float:
    """The poll interval the reads were meant to have: the median positive spacing."""
    steps = np.diff(times)
    steps = steps[steps > 0]
    if steps.size == 0:
        raise ValueError("need at least two reads at distinct times")
    return float(np.median(steps))


#: A run of at least this many poll intervals each over ``POLL_CHANGE_FACTOR`` times the
#: finest poll is a stretch polled more slowly (not a few missed polls) ...
POLL_CHANGE_RUN = 10
POLL_CHANGE_FACTOR = 3.0
#: ... and such stretches covering this share of the recording make it one of two poll rates.
POLL_CHANGE_SHARE = 0.1


@dataclass(frozen=True)
class PollChange:
    """A recording polled at two rates: its longest stretch at the finer one."""

    first: int  # rows [first, last] of that stretch
    last: int
    fine_s: float  # its poll interval
    coarse_s: float  # the median interval of the slower stretches
    coarse_share: float  # share of the recording's span polled more slowly


def poll_change(times: FloatArray) -> PollChange | None:
    """The longest finely polled stretch of a recording whose poll rate changed, or None.

    A recorder reconfigured mid-run (100 Hz, then 10 Hz), or two recordings joined: gridded at
    the finer poll, the slower stretch's bytes are spread evenly over its polls, its bursts
    get ramps a poll long, and D over both read 0.46 against 0.35 (each part alone: 0.35).
    """
    steps = np.diff(times)
    if steps.size < 4 * POLL_CHANGE_RUN:
        return None
    fine = float(np.percentile(steps[steps > 0], 5)) if (steps > 0).any() else 0.0
    if fine <= 0:
        return None
    slow = steps > POLL_CHANGE_FACTOR * fine
    starts, ends = on_runs(slow)
    keep = (ends - starts) >= POLL_CHANGE_RUN
    if not keep.any():
        return None
    starts, ends = starts[keep], ends[keep]
    span = float(times[-1] - times[0])
    slow_s = float(sum(times[b] - times[a] for a, b in zip(starts, ends, strict=True)))
    if span <= 0 or slow_s < POLL_CHANGE_SHARE * span:
        return None
    # Fine stretches: between the slow runs (intervals a..b-1 of a run join rows a..b).
    bounds = [0, *[int(x) for pair in zip(starts, ends, strict=True) for x in pair], steps.size]
    pieces = [(bounds[k], bounds[k + 1]) for k in range(0, len(bounds), 2)]
    first, last = max(pieces, key=lambda p: times[p[1]] - times[p[0]])
    inside = steps[first:last]
    coarse = np.concatenate([steps[a:b] for a, b in zip(starts, ends, strict=True)])
    return PollChange(
        first=first,
        last=last,
        fine_s=float(np.median(inside)) if inside.size else fine,
        coarse_s=float(np.median(coarse)),
        coarse_share=slow_s / span,
    )


#: Zero-delta runs at most this long, between two non-zero deltas, are stale reads when the
#: counter is "chunky" (see :func:`stale_reads`).
MAX_STALE_RUN = 20
#: Fraction of exact-zero deltas during traffic above which a counter is taken as chunky.
CHUNKY_ZERO_FRACTION = 0.2
#: A counter changes on a refresh timer when at least this share of its changes stand alone
#: between two unchanged reads (real traffic, even in bursts shorter than one poll, straddles
#: a read now and then: a burst of length d does so in about d/dt of its steps) ...
REFRESH_ISOLATED = 0.97
#: ... at least this many times ...
REFRESH_MIN_STEPS = 10
#: ... and this share of the spacings between changes are whole multiples of the shortest
#: common one (within a tenth of it or one read: poll jitter), a quarter of them that one.
REFRESH_REGULAR = 0.9
#: Refresh intervals shorter than this many reads are left to :func:`stale_reads`' chunky
#: rule: with a tolerance of one read, nearly any spacing is a multiple of 3, 4 or 5.
REFRESH_MIN_READS = 6


def refresh_cadence(deltas: FloatArray) -> int | None:
    """Reads per counter refresh, when the counter changes only on a timer slower than the poll.

    Some drivers fold their statistics into the counters on a timer (bnxt_en's statistics DMA
    every second by default; others every few hundred milliseconds): polled at 100 Hz, such a
    counter stays flat for a hundred reads and then jumps by a second's bytes, whatever the
    traffic did within that second. The sign is a counter whose changes are almost all
    isolated and regularly spaced (silences skip whole refresh intervals). None when the
    changes do not look like that (ordinary traffic, or a refresh every read or two).
    """
    finite = np.isfinite(deltas)
    positive = finite & (np.where(finite, deltas, 0.0) > 0)
    where = np.flatnonzero(positive)
    if where.size < REFRESH_MIN_STEPS:
        return None
    before = np.r_[False, positive[:-1]]
    after = np.r_[positive[1:], False]
    isolated = positive & ~before & ~after
    if float(isolated[where].mean()) < REFRESH_ISOLATED:
        return None
    gaps = np.diff(where).astype(np.float64)
    # The refresh interval is the shortest common spacing (traffic in bursts skips some).
    shortest = float(np.percentile(gaps, 10))
    step = float(np.median(gaps[gaps <= 1.5 * shortest]))
    if step < REFRESH_MIN_READS:
        return None
    tolerance = max(1.0, 0.1 * step)
    multiple = np.maximum(np.round(gaps / step), 1.0)
    regular = np.abs(gaps - multiple * step) <= tolerance
    one = np.abs(gaps - step) <= tolerance
    if float(regular.mean()) < REFRESH_REGULAR or float(one.mean()) < 0.25:
        return None
    return round(float(np.median(gaps[one])))


def stale_reads(deltas: FloatArray, *, refresh: int | None = None) -> BoolArray:
    """Reads that repeated a counter the device had not updated yet (one flag per read).

    Some drivers refresh their counters every few milliseconds (or every few hundred), so a
    fast poll sees the same value twice and then a double step: the rate alternates between
    0 and 2×. A series is taken as *chunky* when, while traffic flows, a fifth or more of its
    deltas are exactly zero *and* a step that follows zeros is larger than one that follows a
    step (genuine short gaps between bursts leave the steps after them no larger). Then the
    reads inside short zero runs are flagged, and before the first step after a silence as
    many reads as one refresh interval spans; dropping them spreads each step over the polls
    it really covers, exactly as a missed poll is spread. Other series are left alone.
    ``refresh`` (reads per refresh, from :func:`refresh_cadence`) lifts the limit on how long
    a run of stale reads can be and fixes the refresh interval.
    """
    n = deltas.size
    stale = np.zeros(n + 1, dtype=np.bool_)
    if n < 8:
        return stale
    finite = np.isfinite(deltas)
    clean = np.where(finite, deltas, 0.0)
    zero = finite & (clean == 0)
    positive = finite & (clean > 0)
    longest = MAX_STALE_RUN
    if refresh is not None:
        longest = max(longest, round(1.5 * refresh))
    else:
        local = boxcar(clean, 21)
        busy = finite & (local > 0.05 * float(percentiles(local, [99.0])[0]))
        if busy.sum() < 8:
            return stale
        if float(zero[busy].mean()) < CHUNKY_ZERO_FRACTION:
            return stale
        after_zero = clean[1:][positive[1:] & zero[:-1] & busy[1:]]
        after_step = clean[1:][positive[1:] & positive[:-1] & busy[1:]]
        if after_zero.size < 5:
            return stale
        if after_step.size >= 5 and np.median(after_zero) < 1.5 * np.median(after_step):
            return stale  # steps after zeros are not bigger: genuine gaps, not stale reads
    runs = [(int(a), int(b)) for a, b in zip(*on_runs(zero), strict=True)]
    if refresh is None:
        short = [b - a for a, b in runs if a > 0 and b < n and b - a <= longest
                 and positive[a - 1] and positive[b]]  # fmt: skip
        refresh = round(float(np.median(short))) + 1 if short else 2
    for a, b in runs:  # zero deltas a .. b-1: reads a+1 .. b repeated the value of read a
        if b >= n or not positive[b]:
            continue
        if a > 0 and b - a <= longest and positive[a - 1]:
            stale[a + 1 : b + 1] = True
        else:  # a silence: the step after it covers at most one refresh interval
            stale[max(a + 1, b - refresh + 2) : b + 1] = True
    return stale


#: Most slots one grid may have: 0.8 GB a float array (a day at 1 kHz is 86 M). A stray time
#: stamp asked for 170 G, and numpy's MemoryError reached the user as a traceback.
MAX_GRID_SLOTS = 100_000_000


def grid_from_cumulative(
    times: FloatArray,
    deltas: FloatArray,
    *,
    dt: float | None = None,
    t0: float | None = None,
    resets: int = 0,
    wraps: int = 0,
) -> GridSeries:
    """Resample per-interval byte counts onto a uniform grid, conserving bytes.

    Args:
        times: read instants (strictly increasing after duplicates are removed by the caller).
        deltas: bytes between read ``i`` and ``i+1`` (``len(times) - 1`` values); NaN = unknown.
        dt: grid step; defaults to the nominal poll interval.
        t0: grid origin; defaults to the first read.
        resets: carried into the result for reporting.
        wraps: carried into the result for reporting.
    """
    if times.size < 2:
        raise ValueError("need at least two reads")
    cadence = refresh_cadence(deltas)
    poll = nominal_interval(times) if dt is None or cadence is not None else dt
    if dt is None:
        dt = poll
    if t0 is None:
        t0 = float(times[0])
    limit = MAX_SPREAD_INTERVALS * dt
    if cadence is not None:
        limit = max(limit, 1.5 * cadence * poll)  # a refresh interval is spread, not a gap
    stale = stale_reads(deltas, refresh=cadence)
    if stale.any():
        keep = ~stale
        cum = np.concatenate(([0.0], np.cumsum(np.where(np.isfinite(deltas), deltas, 0.0))))
        unknown = np.concatenate(([0], np.cumsum(~np.isfinite(deltas))))
        times, cum, unknown = times[keep], cum[keep], unknown[keep]
        deltas = np.diff(cum)
        deltas[np.diff(unknown) > 0] = np.nan
    spans = np.diff(times)
    bad = ~np.isfinite(deltas) | (spans <= 0) | (spans > limit)
    clean = np.where(bad, 0.0, deltas)
    cumulative = np.concatenate(([0.0], np.cumsum(clean)))
    span = float(times[-1]) - t0
    n = int(np.floor(span / dt + 1e-9))
    if n < 1:
        raise ValueError("the reads span less than one grid step")
    if n > MAX_GRID_SLOTS:
        raise ValueError(
            f"the reads span {span:,.0f} s at a {dt:.3g} s poll: {n:,} grid slots, more than "
            f"the {MAX_GRID_SLOTS:,} read at once (a row stamped far from the others? analyze "
            "the file in parts)"
        )
    edges = t0 + dt * np.arange(n + 1, dtype=np.float64)
    at_edges = np.interp(edges, times, cumulative)
    rate = np.diff(at_edges) / dt
    valid = np.ones(n, dtype=np.bool_)
    if bad.any():
        # A slot is invalid when it overlaps a bad interval [times[i], times[i+1]].
        valid &= ~_overlapping(times[:-1][bad], times[1:][bad], t0, dt, n)
    valid &= edges[:-1] >= float(times[0]) - 1e-9
    rate = np.where(valid, rate, np.nan)
    polls = PollIntervals(times, np.where(bad, np.nan, clean / np.where(bad, 1.0, spans)))
    refresh_s = cadence * poll if cadence is not None else None
    return GridSeries(
        t0=t0,
        dt=dt,
        rate=rate,
        valid=valid,
        resets=resets,
        wraps=wraps,
        polls=polls,
        refresh_s=refresh_s,
    )


def at_refresh_interval(grids: Mapping[Direction, GridSeries]) -> dict[Direction, GridSeries]:
    """The grids in steps of their counters' refresh interval, when it is longer than two slots.

    Inside a refresh interval the bytes were spread evenly (nobody saw when they flowed), so
    slots finer than it would show made-up flat plateaus: the periodogram would lock on the
    refresh cadence and the burst statistics would read a plateau as a burst. On the coarse
    grid the estimator's own limits (Nyquist, bursts of three slots) apply to what was really
    measured. Blocks start at a read that saw a refresh; one with an unknown slot is unknown.
    """
    refreshed = [g for g in grids.values() if g.refresh_s is not None and g.polls is not None]
    if not refreshed:
        return dict(grids)
    source = max(refreshed, key=lambda g: g.refresh_s or 0.0)
    refresh = source.refresh_s or 0.0
    out: dict[Direction, GridSeries] = {}
    for direction, g in grids.items():
        k = round(refresh / g.dt)
        if k < 2:
            out[direction] = g
            continue
        reads = source.polls.times if source.polls is not None else np.array([g.t0])
        first = round((float(reads[reads.size // 2]) - g.t0) / g.dt) % k
        blocks = (g.rate.size - first) // k
        if blocks < 1:
            out[direction] = g
            continue
        cut = slice(first, first + blocks * k)
        rate = g.rate[cut].reshape(blocks, k).mean(axis=1)  # NaN anywhere: the block is unknown
        valid: BoolArray = np.asarray(g.valid[cut].reshape(blocks, k).all(axis=1), dtype=np.bool_)
        out[direction] = GridSeries(
            t0=g.t0 + first * g.dt,
            dt=k * g.dt,
            rate=np.where(valid, rate, np.nan),
            valid=valid,
            resets=g.resets,
            wraps=g.wraps,
            polls=g.polls,
            refresh_s=refresh,
        )
    return out


def spread_slots(grid: GridSeries, *, longer_than: float = 5.0) -> BoolArray | None:
    """Slots that overlap a poll interval longer than ``longer_than`` grid steps.

    Their rate is the interval's mean spread evenly (a stalled sampler, a run of lost polls):
    the bytes are right, but an edge inside such an interval has no time. None when the grid has
    no polls or no long interval.
    """
    polls = grid.polls
    if polls is None or polls.times.size < 2:
        return None
    spans = np.diff(polls.times)
    long_ = spans > longer_than * grid.dt
    if not long_.any():
        return None
    return _overlapping(
        polls.times[:-1][long_], polls.times[1:][long_], grid.t0, grid.dt, grid.rate.size
    )


def _overlapping(starts: FloatArray, ends: FloatArray, t0: float, dt: float, n: int) -> BoolArray:
    """Which of ``n`` slots of ``dt`` from ``t0`` overlap any interval ``[starts, ends]``."""
    # A relative tolerance keeps float noise in the read times from tainting a neighbour.
    first = np.clip(np.floor((starts - t0) / dt + 1e-6).astype(np.int64), 0, n)
    last = np.clip(np.ceil((ends - t0) / dt - 1e-6).astype(np.int64), 0, n)
    marks = np.zeros(n + 1, dtype=np.int64)
    np.add.at(marks, first, 1)
    np.add.at(marks, last, -1)
    out: BoolArray = np.cumsum(marks[:-1]) > 0
    return out


def _column_on_base(
    times: FloatArray,
    values: npt.NDArray[np.uint64],
    present: npt.NDArray[np.bool_] | None,
    bits: int | None,
) -> tuple[FloatArray, int, int]:
    """Per-interval bytes of one column on the shared read times.

    A column missing from some reads (a device that could not be read) has its own, sparser
    time axis: its bytes are spread over the shared intervals by time (constant rate between
    its own reads), and intervals outside its first and last read are unknown, as are those
    within a gap of its reads over ``MAX_SPREAD_INTERVALS`` polls (a rail unreadable for 20 s
    spread its bursts' bytes flat, and the sum's bursts read 35 % low there).
    """
    if present is None or bool(present.all()):
        return counter_deltas(values, bits=bits)
    t = times[present]
    d, resets, wraps = counter_deltas(values[present], bits=bits)
    if t.size < 2:
        return np.full(times.size - 1, np.nan), resets, wraps
    cum = np.concatenate(([0.0], np.cumsum(np.where(np.isfinite(d), d, 0.0))))
    out = np.diff(np.interp(times, t, cum))
    unknown = (times[1:] <= t[0]) | (times[:-1] >= t[-1])
    bad = ~np.isfinite(d) | (np.diff(t) > MAX_SPREAD_INTERVALS * nominal_interval(times))
    if bad.any():
        for a, b in zip(t[:-1][bad], t[1:][bad], strict=True):
            unknown |= (times[1:] > a) & (times[:-1] < b)
    out[unknown] = np.nan
    return out, resets, wraps


def sum_grids(parts: Sequence[Mapping[Direction, GridSeries]]) -> dict[Direction, GridSeries]:
    """Sum per-direction grids that share a step onto their common time span."""
    if len(parts) == 1:
        return dict(parts[0])
    out: dict[Direction, GridSeries] = {}
    directions = sorted({d for p in parts for d in p})
    for d in directions:
        series = [p[d] for p in parts if d in p]
        dt = series[0].dt
        t0 = max(s.t0 for s in series)
        t1 = min(s.t0 + s.duration_s for s in series)
        n = int((t1 - t0) / dt)
        if n < 8:
            raise ValueError("the grids do not overlap in time")
        total = np.zeros(n)
        valid = np.ones(n, dtype=bool)
        for s in series:
            k = round((t0 - s.t0) / s.dt)
            seg = s.rate[k : k + n]
            total += np.nan_to_num(seg)
            valid &= s.valid[k : k + n]
        out[d] = GridSeries(
            t0=t0,
            dt=dt,
            rate=np.where(valid, total, np.nan),
            valid=valid,
            resets=sum(s.resets for s in series),
            wraps=sum(s.wraps for s in series),
            refresh_s=max((s.refresh_s or 0.0 for s in series), default=0.0) or None,
        )
    return out


def direction_grids(
    times: FloatArray,
    columns: Mapping[str, npt.NDArray[np.uint64]],
    *,
    present: Mapping[str, npt.NDArray[np.bool_]] | None = None,
    dt: float | None = None,
    bits: int | None = None,
    scale: Mapping[str, float] | None = None,
) -> dict[Direction, GridSeries]:
    """Per-direction rate grids from raw cumulative counter columns (the offline path).

    ``scale`` turns a column's units into bytes (InfiniBand's data counters count 4-byte
    words); it applies to the deltas, after wraps and resets are read in the counter's units.
    """
    names = list(columns)
    if dt is None:
        dt = nominal_interval(times)
    out: dict[Direction, GridSeries] = {}
    for direction, idx in group_columns(names).items():
        total = np.zeros(times.size - 1, dtype=np.float64)
        resets = wraps = 0
        for i in idx:
            name = names[i]
            mask = present.get(name) if present is not None else None
            d, r, w = _column_on_base(times, columns[name], mask, bits)
            if scale is not None and name in scale:
                d = d * scale[name]
            total += d  # NaN in any column makes the interval unknown for the direction
            resets += r
            wraps += w
        out[direction] = grid_from_cumulative(times, total, dt=dt, resets=resets, wraps=wraps)
    return out


__all__ += [
    "IDLE_FRACTION",
    "MAX_GRID_SLOTS",
    "MAX_SPREAD_INTERVALS",
    "PollChange",
    "PollIntervals",
    "active_span",
    "at_refresh_interval",
    "busy_slots",
    "column_device",
    "direction_grids",
    "glitch_reads",
    "on_runs",
    "poll_change",
    "refresh_cadence",
    "spread_slots",
    "stale_reads",
    "sum_grids",
]
