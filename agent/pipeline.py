"""The live pipeline: sources → bounded queue → windows → estimator → snapshot.

One ``asyncio.TaskGroup`` owns a named task per source, one consumer that files readings into
the rolling windows, and one estimator loop on absolute deadlines (no drift) that runs the
CPU-heavy estimate in a worker thread and publishes an immutable :class:`Snapshot`. Sinks only
ever read the latest snapshot. A failing source is retried with capped, jittered exponential
backoff and never takes the others down.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agent.clock import Clock, MonotonicClock, Ticker
from agent.devices import (
    DeviceBursts,
    DeviceSteps,
    device_bursts,
    device_steps,
    in_step,
    job_of,
    jobs_note,
    step_groups,
    until_last_done,
)
from agent.errors import SourceError, SourceUnavailable
from agent.estimate import (
    MIN_ARRIVAL_POLLS,
    Estimate,
    EstimateInputs,
    busier_direction,
    estimate,
    estimate_recent,
    log_grid,
)
from agent.rates import Direction, GridSeries, sum_grids
from agent.regime import IDLE_BYTES_PER_S, RegimeGate
from agent.regime_params import RegimeParams, regime_params
from agent.sharding import DEFAULT_LATENCY_S
from agent.tracker import (
    LockAge,
    PauseMemory,
    PeriodTracker,
    RecentWatch,
    first_activity_s,
    job_gone,
    longest_event_gap_s,
    longest_gap_s,
    periods_kept_after_lost_lock,
    sustained_confidence,
    watch_recent,
    whole_window_period,
)
from agent.warning_log import WarningLog
from agent.windows import (
    BurstTally,
    CollectiveWindow,
    CounterWindow,
    DeviceDeltas,
    DeviceStatus,
    DeviceTable,
    GpuWindow,
    OpTimings,
    SizeHistogram,
    TimingWindow,
    device_grids,
    window_capacity,
)
from collectors._base import (
    CallBatch,
    CollectiveCall,
    CounterBatch,
    CounterReading,
    DeviceInfo,
    GpuReading,
    Reading,
    Source,
    SourceStats,
    TimingBatch,
)

__all__ = [
    "Pipeline",
    "PipelineSettings",
    "Sink",
    "SinkHealth",
    "Snapshot",
    "SnapshotStore",
    "SourceHealth",
    "traffic_back_at",
]

log = logging.getLogger(__name__)


@dataclass
class SourceHealth:
    """Per-source bookkeeping, exported as ``commpulse_source_up`` and friends."""

    name: str
    up: bool = False
    readings: int = 0
    dropped: int = 0
    errors: int = 0
    restarts: int = 0
    last_error: str | None = None
    last_reading_s: float | None = None


@dataclass
class SinkHealth:
    """What the exporter shows about a push sink."""

    name: str
    connected: bool = False
    published: int = 0
    dropped: int = 0
    errors: int = 0
    buffered: int = 0
    last_error: str | None = None


class Sink(Protocol):
    """A push exporter run by the pipeline (e.g. MQTT)."""

    name: str
    health: SinkHealth

    def offer(self, snapshot: Snapshot) -> None:
        """Take a snapshot without blocking (drop and count when full)."""
        ...

    async def run(self) -> None:
        """Deliver until cancelled."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """What sinks see: the latest estimate and the health of everything that made it."""

    estimate: Estimate | None
    time_s: float
    wall_time_s: float
    estimator_seconds: float
    sources: tuple[SourceHealth, ...]
    estimates: int = 0
    locked: bool = False
    devices: tuple[DeviceStatus, ...] = ()
    network_source: str | None = None
    sinks: tuple[SinkHealth, ...] = ()
    #: The job this host works for: from the config (``agent.job_id``) or NCCL's commId.
    job_id: str | None = None
    job_id_source: str | None = None
    #: Wall-clock time (Unix seconds) the last burst ended: a stalled job stops moving it.
    last_burst_wall_s: float | None = None
    #: Each source's own running totals (the NCCL tailer's lines, WARNs, rotations, ...).
    source_stats: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    message_sizes: SizeHistogram | None = None
    #: GPU-timed collectives from the NCCL Inspector, per op.
    collective_timings: Mapping[str, OpTimings] = field(default_factory=dict)
    #: Regime-specific parameters of the window: burst arrivals, ZeRO stage, AlltoAll, pipeline.
    regime: RegimeParams | None = None
    #: Sizes (bytes above the background) and durations of every burst seen end, since start.
    burst_bytes: SizeHistogram | None = None
    burst_seconds: SizeHistogram | None = None
    #: The network source's devices' own bursts at the last look (agent.devices), and which
    #: source they are of.
    device_bursts: tuple[DeviceBursts, ...] = ()
    device_bursts_source: str | None = None


class SnapshotStore:
    """Holds the latest snapshot; safe to read from the HTTP server's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None

    def publish(self, snapshot: Snapshot) -> None:
        """Replace the snapshot."""
        with self._lock:
            self._snapshot = snapshot

    def latest(self) -> Snapshot | None:
        """The newest snapshot, or None before the first estimate."""
        with self._lock:
            return self._snapshot


#: The live capture source's name: its bins are exact, so it is preferred on a shared link.
CAPTURE_SOURCE = "packet_capture"
#: Capture wins when it sees this share of the busiest counter source's bytes.
CAPTURE_SHARE = 0.9
#: The network source in use changes only for one this much busier.
SWITCH_MARGIN = 1.1
#: A counter source whose newest poll is this old (or three hops) is not estimated: the only
#: RDMA device unloaded kept its job's T, B and D on the scrape for half a window, at
#: confidence 0.97, beside ``source_up`` 0.
STALE_SOURCE_S = 5.0
#: Least span of an NCCL-only window, in resolutions of its calls' times when they are coarse
#: (stamped when read, or whole seconds): T within about 1 % (20 s at the 0.2 s polls).
COARSE_SPAN_RESOLUTIONS = 100.0


@dataclass(frozen=True)
class PipelineSettings:
    """Knobs of the live pipeline (seconds throughout)."""

    window_s: float = 120.0
    hop_s: float = 1.0
    queue_size: int = 8192
    counter_rate_hz: float = 100.0
    gpu_rate_hz: float = 10.0
    calls_per_s: float = 2000.0
    min_window_s: float = 2.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    job_id: str = ""
    restart_periods: float = 5.0
    #: Once T is locked, estimate over the last this many periods (within window_s): old data
    #: ages out in a few periods instead of window_s, and shorter windows cost less.
    lock_window_periods: float = 16.0
    #: ... and watch the last this many periods alone for a step change of T.
    change_window_periods: float = 4.5
    #: ... and, every this many hops, the whole window for a longer period than the locked one
    #: (every hop for the first ``outer_watch_fast_hops`` after a lock: a first lock is often
    #: on the finest rhythm, an FSDP job's layers, whose short window never shows the step).
    outer_watch_hops: int = 5
    outer_watch_fast_hops: int = 10
    #: Below this mean rate, with no period, the host is idle.
    idle_bytes_per_s: float = IDLE_BYTES_PER_S
    #: Per-collective latency of the fine-tuning latency share.
    collective_latency_s: float = DEFAULT_LATENCY_S
    #: Longest a logged call takes to reach the pipeline (the log sources' poll interval): a
    #: log-only job's silence counts from that long before now, or a job of 0.05 s steps,
    #: its calls read every 0.2 s, "stopped" between two reads.
    calls_delivery_s: float = 0.2
    #: Newest collective calls the regime parameters read at most ...
    regime_calls: int = 65536
    #: ... every this many hops (the ZeRO stage, AlltoAll and pipeline structure change
    #: slowly; burst arrivals are redone every hop).
    regime_calls_every_hops: int = 5


@dataclass
class _State:
    counter_capacity: int
    gpu: GpuWindow
    calls: CollectiveWindow
    counters: dict[str, CounterWindow] = field(default_factory=dict)  # one per source
    #: Each source's per-column increments, for the view per device (agent.devices).
    device_deltas: dict[str, DeviceDeltas] = field(default_factory=dict)
    devices: DeviceTable = field(default_factory=DeviceTable)
    health: dict[str, SourceHealth] = field(default_factory=dict)
    stats: dict[str, Mapping[str, int]] = field(default_factory=dict)
    timings: TimingWindow = field(default_factory=TimingWindow)
    bursts: BurstTally = field(default_factory=BurstTally)

    def counter_window(self, source: str) -> CounterWindow:
        window = self.counters.get(source)
        if window is None:
            window = self.counters[source] = CounterWindow(self.counter_capacity)
        return window

    def device_window(self, source: str) -> DeviceDeltas:
        window = self.device_deltas.get(source)
        if window is None:
            window = self.device_deltas[source] = DeviceDeltas(self.counter_capacity)
        return window


#: Hops between two looks at the devices one by one (each busy device estimated on its own).
DEVICE_CHECK_HOPS = 15
#: ... over their newest seconds only.
DEVICE_CHECK_S = 30.0


@dataclass(frozen=True)
class _DeviceView:
    """What the last look at a source's devices found (see :mod:`agent.devices`)."""

    source: str
    groups: tuple[tuple[DeviceSteps, ...], ...]
    #: Two jobs or more: the busiest group's devices, whose sum is estimated; else None.
    job: tuple[str, ...] | None
    note: str | None
    #: Each busy device's bursts on its own scale, for /metrics.
    bursts: tuple[DeviceBursts, ...] = ()
    #: The job's devices were in a burst longer than their sum at the look: D is counted
    #: until the last one is done every hop, until the next look says otherwise.
    apart: bool = False


def _look_at_devices(
    source: str, columns: tuple[str, ...], rows: npt.NDArray[np.float64]
) -> _DeviceView:
    """Each busy device of ``source`` estimated on its own, grouped by its step time."""
    devices = device_grids(columns, rows)
    steps = device_steps(devices) if not in_step(devices) else []
    groups = step_groups(steps)
    apart = len(groups) >= 2
    return _DeviceView(
        source=source,
        groups=tuple(tuple(g) for g in groups),
        job=tuple(s.name for s in groups[0]) if apart else None,
        note=jobs_note(groups, len(devices)) if apart else None,
        bursts=tuple(device_bursts(devices, steps)) if len(devices) >= 2 else (),
    )


#: A burst's end moves by a grid slot or so from one window to the next.
_STOP_SLACK_S = 0.1


def _active_after(est: Estimate, inputs: EstimateInputs, stopped_at: float) -> bool:
    """Whether this hop's window has traffic newer than a stop at ``stopped_at``."""
    if inputs.network:
        end = est.last_burst_end_s
        return end is not None and end > stopped_at + _STOP_SLACK_S
    mix = inputs.collectives
    if mix is None:
        return False
    timed = mix.call_times[np.isfinite(mix.call_times)]
    return timed.size > 0 and float(timed.max()) > stopped_at


def traffic_back_at(est: Estimate, inputs: EstimateInputs, stopped_at: float) -> float | None:
    """When traffic came back after a stop at ``stopped_at`` (a hop :func:`_active_after`).

    The first slot above the burst threshold after it, or with the NCCL log alone, the first
    call after it.
    """
    if inputs.network:
        threshold = est.burst_threshold
        grid = inputs.network.get(est.direction) if est.direction is not None else None
        if grid is None or threshold is None:
            return None
        return first_activity_s(grid, threshold, stopped_at + _STOP_SLACK_S)
    mix = inputs.collectives
    if mix is None:
        return None
    times = mix.call_times[np.isfinite(mix.call_times)]
    later = times[times > stopped_at]
    return float(later.min()) if later.size else None


class Pipeline:
    """Runs sources, windows and the estimator until :meth:`stop` is called."""

    def __init__(
        self,
        sources: Sequence[Source],
        store: SnapshotStore,
        *,
        settings: PipelineSettings | None = None,
        clock: Clock | None = None,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        sinks: Sequence[Sink] = (),
    ) -> None:
        self._sources = {s.name: s for s in sources}
        self._warning_log = WarningLog()
        self._sinks = {k.name: k for k in sinks}
        self._store = store
        self._cfg = settings or PipelineSettings()
        self._clock: Clock = clock or MonotonicClock()
        self._on_snapshot = on_snapshot
        self._state = self._new_state(self._cfg)
        self._state.health = {name: SourceHealth(name) for name in self._sources}
        self._queue: asyncio.Queue[tuple[str, Reading]] = asyncio.Queue(self._cfg.queue_size)
        self._queued: dict[str, int] = {}  # readings of each source waiting in the queue
        self._tracker = PeriodTracker(hop_s=self._cfg.hop_s)
        self._stop = asyncio.Event()
        self._estimates = 0
        self._last_burst_wall: float | None = None
        self._job_comm_id: str | None = None
        #: The last look at the network source's devices one by one, and hops since.
        self._device_view: _DeviceView | None = None
        self._device_hops = 0
        self._network_source: str | None = None
        #: Calls before this time are old traffic after a re-lock or a lost lock: the NCCL
        #: log's estimates start here (counter windows drop their polls instead; the calls
        #: stay for the collective-side parameters).
        self._calls_floor: float | None = None
        self._last_regime: RegimeParams | None = None
        self._regime_gate = RegimeGate()
        self._hops_locked = 0  # hops since the current lock was taken
        #: How long T has been held (re-locks onto another T do not restart it).
        self._lock_age = LockAge()
        #: When the job last seen stopped (clock time of its last burst or call), until new
        #: traffic comes: its old bursts are still in the window, and describe nothing now.
        self._stopped_at: float | None = None
        #: The pauses the job came back from at its own pace: the next one is not a stop.
        self._pauses = PauseMemory()
        #: A re-lock's window cut (clock time) and the last estimate published with a lock:
        #: until the cut window is long enough to estimate, the lock is shown on that estimate.
        self._cut_at: float | None = None
        self._last_locked: Estimate | None = None
        self.estimator_errors = 0
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @staticmethod
    def _new_state(cfg: PipelineSettings) -> _State:
        return _State(
            counter_capacity=window_capacity(cfg.window_s, cfg.counter_rate_hz),
            gpu=GpuWindow(window_capacity(cfg.window_s, cfg.gpu_rate_hz * 8)),
            calls=CollectiveWindow(window_capacity(cfg.window_s, cfg.calls_per_s)),
        )

    @property
    def settings(self) -> PipelineSettings:
        """The settings in force."""
        return self._cfg

    def _spawn(self, key: str, coro: Any) -> None:
        assert self._tg is not None
        old = self._tasks.pop(key, None)
        if old is not None:
            old.cancel()
        self._tasks[key] = self._tg.create_task(coro, name=key)

    def _cancel(self, key: str) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def replace_source(self, source: Source) -> None:
        """Start ``source``, replacing a running source of the same name.

        A counter source's window starts over: its devices or roots changed, and the sums it
        holds are of the old set (a reload down to one of two rails showed the two rails' B
        for 9 s, then a mix of both for 8 s more). The collective and GPU windows stay.
        """
        self._state.counters.pop(source.name, None)
        self._sources[source.name] = source
        health = self._state.health.setdefault(source.name, SourceHealth(source.name))
        health.up = False
        if self._tg is not None:
            self._spawn(f"source[{source.name}]", self._run_source(source))

    def remove_source(self, name: str) -> None:
        """Stop a source and forget its health and window."""
        self._sources.pop(name, None)
        self._cancel(f"source[{name}]")
        self._state.health.pop(name, None)
        self._state.counters.pop(name, None)

    def replace_sink(self, sink: Sink) -> None:
        """Start ``sink``, replacing a running sink of the same name."""
        self._sinks[sink.name] = sink
        if self._tg is not None:
            self._spawn(f"sink[{sink.name}]", self._run_sink(sink))

    def remove_sink(self, name: str) -> None:
        """Stop a sink."""
        self._sinks.pop(name, None)
        self._cancel(f"sink[{name}]")

    def apply_settings(self, settings: PipelineSettings) -> bool:
        """Change the settings; True when the windows had to start over (new sizes)."""
        old, self._cfg = self._cfg, settings
        if settings == old:
            return False
        self._tracker.hop_s = settings.hop_s
        if self._tg is not None and settings.hop_s != old.hop_s:
            self._spawn("estimator", self._estimate_loop())
        sizes = ("window_s", "counter_rate_hz", "gpu_rate_hz", "calls_per_s")
        if any(getattr(old, k) != getattr(settings, k) for k in sizes):
            # Only the windows start over: what is not sized by them (the device table, the
            # sources' health and stats, the totals exported as counters) carries over. The
            # call totals started over too, a false counter reset for Prometheus.
            old_state, new_state = self._state, self._new_state(settings)
            new_state.health, new_state.bursts = old_state.health, old_state.bursts
            new_state.devices, new_state.stats = old_state.devices, old_state.stats
            new_state.timings = old_state.timings
            new_state.calls.totals = old_state.calls.totals
            self._state = new_state
            return True
        return False

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe to call from a signal handler)."""
        self._stop.set()

    def _emitter(self, name: str) -> Callable[[Reading], None]:
        health = self._state.health.setdefault(name, SourceHealth(name))

        def emit(reading: Reading) -> None:
            # A batch of counter polls is one queue item but counts as its polls, so the
            # readings and drops a source reports do not depend on how it hands them over.
            polls = len(reading) if isinstance(reading, CounterBatch) else 1
            # Each source may hold its share of the queue at most: a source that floods it
            # (a log burst, a stuck loop) loses its own readings, never the others'.
            share = max(1, self._cfg.queue_size // max(1, len(self._sources)))
            if self._queued.get(name, 0) >= share:
                health.dropped += polls
                return
            try:
                self._queue.put_nowait((name, reading))
            except asyncio.QueueFull:
                health.dropped += polls
                return
            self._queued[name] = self._queued.get(name, 0) + 1
            health.readings += polls
            health.up = True
            health.last_reading_s = self._clock.now()

        return emit

    async def _run_source(self, source: Source) -> None:
        health = self._state.health.setdefault(source.name, SourceHealth(source.name))
        delay = self._cfg.backoff_initial_s
        emit = self._emitter(source.name)
        said: str | None = None  # the unavailability last logged at warning level
        while True:
            delivered = health.readings
            unavailable = False
            try:
                await source.run(emit)
                health.up = False
                log.info("source %s finished", source.name, extra={"source": source.name})
                return
            except asyncio.CancelledError:
                raise
            except SourceUnavailable as exc:
                health.last_error = str(exc)
                unavailable = True
            except SourceError as exc:
                health.last_error = str(exc)
                health.errors += 1
            except Exception as exc:  # a bug in one source must not stop the others
                health.last_error = f"{type(exc).__name__}: {exc}"
                health.errors += 1
                log.exception("source %s crashed", source.name, extra={"source": source.name})
            health.up = False
            health.restarts += 1
            self._state.devices.source_down(source.name)
            if health.readings > delivered:
                delay = self._cfg.backoff_initial_s  # it worked for a while: start over
            # A host without the hardware (no RDMA device, no GPU) says so once, not every
            # 30 s for months; a failure, or a new reason, is said each time.
            quiet = unavailable and health.last_error == said
            said = health.last_error if unavailable else None
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "source %s down (%s); retrying in %.1f s",
                source.name,
                health.last_error,
                delay,
                extra={"source": source.name},
            )
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2.0, self._cfg.backoff_max_s)

    async def _run_sink(self, sink: Sink) -> None:
        try:
            await sink.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken sink must not stop the agent
            sink.health.errors += 1
            sink.health.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("sink %s failed; it stays stopped until a reload", sink.name)

    async def _consume(self) -> None:
        while True:
            source, reading = await self._queue.get()
            self._queued[source] -= 1
            st = self._state  # re-read: a reload may have replaced the windows
            if isinstance(reading, CounterBatch):
                st.counter_window(source).add_batch(reading)
                st.device_window(source).add_batch(reading)
                st.devices.add_batch(source, reading)
            elif isinstance(reading, CounterReading):
                st.counter_window(source).add(reading)
                st.device_window(source).add(reading)
                st.devices.add_reading(source, reading)
            elif isinstance(reading, DeviceInfo):
                st.devices.add_info(source, reading)
            elif isinstance(reading, GpuReading):
                st.gpu.add(reading)
            elif isinstance(reading, CallBatch):
                st.calls.add_batch(reading)
            elif isinstance(reading, CollectiveCall):
                st.calls.add(reading)
            elif isinstance(reading, SourceStats):
                st.stats[source] = reading.values
            elif isinstance(reading, TimingBatch):
                st.timings.add(reading)

    def _network(
        self, since: float | None = None
    ) -> tuple[str | None, dict[Direction, GridSeries]]:
        """The counter source that carries the most traffic, and its grids.

        NIC and RDMA counters see different traffic (RDMA bypasses netdev), and their polls
        are not simultaneous, so they are never summed: the busiest one is estimated. Packet
        capture and NIC counters on one link see the same bytes: capture is taken when it sees
        at least ``CAPTURE_SHARE`` of the busiest source's bytes (its bins have no poll
        jitter). The source in use is kept until another one is ``SWITCH_MARGIN`` busier, so
        two sources of near-equal rate do not take turns from one hop to the next.
        """
        means: dict[str, tuple[float, dict[Direction, GridSeries]]] = {}
        stale_before = self._clock.now() - max(STALE_SOURCE_S, 3.0 * self._cfg.hop_s)
        for source, window in sorted(self._state.counters.items()):
            newest = window.newest_s()
            if newest is None or newest < stale_before:
                continue  # polls stopped (a device gone): its last window is no longer news
            grids = window.grids(since=since)
            rate = -1.0
            for g in grids.values():
                finite = g.rate[np.isfinite(g.rate)]
                if finite.size:
                    rate = max(rate, float(finite.mean()))
            means[source] = (rate, grids)
        if not means:
            return None, {}
        best = max(means, key=lambda name: means[name][0])
        top = means[best][0]
        capture = means.get(CAPTURE_SOURCE)
        if capture is not None and top > 0 and capture[0] >= CAPTURE_SHARE * top:
            best = CAPTURE_SOURCE
        elif (
            self._network_source in means and means[self._network_source][0] * SWITCH_MARGIN >= top
        ):
            best = self._network_source
        self._network_source = best
        return best, means[best][1]

    def _log_since(self, periods: float, *, coarse_span: bool = False) -> float | None:
        """Start of the NCCL log's window: ``periods`` locked periods back.

        Never before the calls floor; None means the whole call window. With ``coarse_span``,
        calls timed only to the poll (or second) keep ``COARSE_SPAN_RESOLUTIONS`` of those at
        least: T from their order is as fine as the window is long (16 steps of 0.13 s read
        every 0.2 s wandered from 0.117 to 0.134 s).
        """
        start = self._window_start(periods)
        coarse = self._state.calls.resolution_s(start) if coarse_span else 0.0
        if start is not None and coarse > 0:
            span = min(self._cfg.window_s, COARSE_SPAN_RESOLUTIONS * coarse)
            start = min(start, self._clock.now() - span)
        if self._calls_floor is None:
            return start
        return self._calls_floor if start is None else max(start, self._calls_floor)

    def _window_start(self, periods: float) -> float | None:
        """Start of the last ``periods`` locked periods (None when not locked)."""
        t = self._tracker.locked
        if t is None:
            return None
        span = min(self._cfg.window_s, max(self._cfg.min_window_s, periods * t))
        return self._clock.now() - span

    def _inputs(self) -> tuple[str | None, float | None, EstimateInputs | None]:
        """(network source, window start, inputs); no inputs while too little is known."""
        st = self._state
        start = self._window_start(self._cfg.lock_window_periods)
        source, grids = self._network(since=start)
        view = self._device_view
        if grids and view is not None and view.job is not None and view.source == source:
            # Two jobs on their own devices: the busiest one's devices are the network.
            devices = st.device_window(source).devices(since=start, only=view.job)
            # (No device of the job left in the window: the source's sum.)
            with contextlib.suppress(ValueError):
                grids = sum_grids([devices[name] for name in view.job if name in devices])
        since: float | None = None
        if grids:
            since = min(g.t0 for g in grids.values())
        else:
            # The NCCL log alone: the locked window as for counters, not the whole call ring
            # (a change of step would otherwise wait for the old steps to leave the ring).
            since = self._log_since(self._cfg.lock_window_periods, coarse_span=True)
        mix = st.calls.mix(since=since)
        self._job_comm_id = st.calls.job_comm_id(since=since)
        if not grids and mix is None:
            return source, since, None
        span = max((g.duration_s for g in grids.values()), default=0.0)
        # 10 % slack: a locked window of exactly min_window_s holds a poll or two less.
        if grids and span < 0.9 * self._cfg.min_window_s:
            return source, since, None
        return (
            source,
            since,
            EstimateInputs(
                network=grids,
                network_source="counters" if grids else None,
                gpu=st.gpu.samples(since=since),
                collectives=mix,
                expected_period_s=self._tracker.expected,
            ),
        )

    async def _estimate_loop(self) -> None:
        ticker = Ticker(self._clock, self._cfg.hop_s)
        while True:
            await ticker.tick()
            try:
                await self._hop()
            except Exception:  # a bug on odd data, or no descriptor left: skip this hop
                self.estimator_errors += 1
                log.exception("estimating this hop failed; keeping the last snapshot")

    async def _per_device(self, source: str, inputs: EstimateInputs, est: Estimate) -> Estimate:
        """The hop's estimate as the source's devices one by one correct it.

        Every ``DEVICE_CHECK_HOPS`` hops each busy device is estimated on its own
        (:func:`agent.devices.device_steps`, off the event loop): devices that step apart are
        two jobs, and the next hops estimate the busiest one's devices (:meth:`_inputs`);
        devices of the job in a burst longer than their sum keep D counting until the last one
        is done (:func:`agent.devices.until_last_done`), every hop while it holds.
        """
        window = self._state.device_deltas.get(source)
        if window is None:
            return est
        since = min(g.t0 for g in inputs.network.values())
        view = self._device_view
        if view is None or view.source != source or self._device_hops >= DEVICE_CHECK_HOPS:
            self._device_hops = 0
            locked = self._tracker.locked or 0.0  # (8 steps at least: a step of 10 s too)
            newest = max(since, self._clock.now() - max(DEVICE_CHECK_S, 8.0 * locked))
            # The rows are copied here, on the loop that appends to them.
            view = await asyncio.to_thread(_look_at_devices, source, *window.rows(newest))
            self._device_view = view
        self._device_hops += 1
        if view.note is not None:
            est = replace(est, warnings=(*est.warnings, view.note))
        way = est.direction
        job = job_of(view.groups, est.period_s)
        host = inputs.network.get(way) if way is not None else None
        if len(job) < 2 or host is None:
            return est
        if not view.apart and self._device_hops != 1:
            return est  # the look found them together: no per-device grids every hop
        names = {s.name for s in job}
        devices = await asyncio.to_thread(
            functools.partial(device_grids, only=names), *window.rows(since)
        )
        done = until_last_done(est, host, job, devices)
        if self._device_hops == 1:
            self._device_view = replace(view, apart=done is not est)
        return done

    def _mark_silent(self) -> None:
        """Sources silent for longer than they may be (``stale_after_s``) are down.

        A followed GPU CSV whose recorder died stays readable: ``commpulse_source_up`` read
        1 for as long as the agent ran, while the GPU samples aged out of the window. Sources
        that are silent by nature (an NCCL log between jobs) set no limit.
        """
        now = self._clock.now()
        for name, source in self._sources.items():
            limit = getattr(source, "stale_after_s", None)
            health = self._state.health.get(name)
            if limit is None or health is None or not health.up or health.last_reading_s is None:
                continue
            silent = now - health.last_reading_s
            if silent > float(limit):
                health.up = False
                health.last_error = f"no reading for {silent:.0f} s (its writer stopped?)"
                log.warning("source %s: %s", name, health.last_error, extra={"source": name})

    async def _hop(self) -> None:
        """One hop: estimate the window, track the lock, publish a snapshot."""
        self._mark_silent()
        source, since, inputs = self._inputs()
        if inputs is None:
            held = self._held()
            self._publish(held, 0.0, locked=held is not None, source=source)
            return
        began = time.perf_counter()
        # (A failure here, or anywhere in the hop, skips the hop: _estimate_loop.)
        est, recent_from = await asyncio.to_thread(
            estimate_recent,
            inputs,
            min_window_s=self._cfg.min_window_s,
            idle_bytes_per_s=self._cfg.idle_bytes_per_s,
        )
        if source is not None and inputs.network:
            est = await self._per_device(source, inputs, est)
        took = time.perf_counter() - began
        if est.last_burst_end_s is not None:
            # Grid times are the clock's; the alert compares with Prometheus' time().
            wall = time.time() - (self._clock.now() - est.last_burst_end_s)
            if self._last_burst_wall is None or wall > self._last_burst_wall:
                self._last_burst_wall = wall
        was_locked = self._tracker.locked
        resumed = False
        stopped_at = await self._job_gone(est, was_locked, inputs)
        if stopped_at is not None:
            self._stopped_at = stopped_at
        elif self._stopped_at is not None and _active_after(est, inputs, self._stopped_at):
            back = traffic_back_at(est, inputs, self._stopped_at)
            if back is not None:
                self._pauses.resumed(
                    back - self._stopped_at, self._tracker.expected, self._clock.now()
                )
            # The job resumed, or another one began: the window keeps only what came after
            # the stop. Read across it, the old steps re-locked the old T on a new job
            # (two real jobs back to back: the first one's T shown 0.2-0.7 s into the
            # second). The released T still speeds a resumed job's lock (tracker).
            for window in self._state.counters.values():
                window.drop_before(self._stopped_at + _STOP_SLACK_S)
            self._calls_floor = self._stopped_at + _STOP_SLACK_S
            self._stopped_at = None
            resumed = True
            log.info("traffic again after the stop: estimating afresh")
        # This hop's window still reaches back across the stop: from the next one on.
        stopped = self._stopped_at is not None or resumed
        if stopped and was_locked is not None:
            update = self._tracker.release()
            log.info("no burst for over %.3g s: the job stopped, T released", 2 * was_locked)
        else:
            period = None if stopped else est.period_s
            update = self._tracker.update(period, est.confidence, est.period_rel_error)
        if was_locked is not None and update.period_s is None:
            periods = periods_kept_after_lost_lock(
                stopped=stopped or est.traffic_stopped(self._cfg.idle_bytes_per_s),
                lock_window_periods=self._cfg.lock_window_periods,
                restart_periods=self._cfg.restart_periods,
                locked_s=was_locked,
                min_window_s=self._cfg.min_window_s,
            )
            if periods is not None:
                lost_from = self._clock.now() - periods * was_locked
                for window in self._state.counters.values():
                    window.drop_before(lost_from)
                self._calls_floor = lost_from
        if stopped:
            self._hops_locked = 0
            self._lock_age.reset()
            self._estimates += 1
            est = est.after_stop(self._cfg.idle_bytes_per_s)
            est = replace(est, regime=self._regime_gate.update(est.regime, self._clock.now()))
            self._publish(est, took, locked=False, source=source)
            return
        relocked = update.period_s if update.changed else None
        keep_from: float | None = None
        if relocked is None and update.period_s is not None:
            watch = await self._recent_watch(inputs, update.period_s, est.period_direction)
            relocked = self._tracker.challenge(watch.period_s, step=watch.step)
            if relocked is not None:
                update = replace(update, period_s=relocked, changed=True)
                keep_from = watch.keep_from(self._clock.now(), relocked, self._cfg.restart_periods)
                log.info("sync period changed: T = %.4g s (re-locked)", relocked)
        if was_locked is None and update.period_s is not None:
            self._pauses.locked(update.period_s, self._clock.now())
        if update.period_s is None or was_locked is None or update.changed:
            self._hops_locked = 0
        else:
            self._hops_locked += 1
        if (
            relocked is None
            and update.period_s is not None
            and (
                self._hops_locked < self._cfg.outer_watch_fast_hops
                or self._estimates % max(1, self._cfg.outer_watch_hops) == 0
            )
        ):
            relocked = self._tracker.widen(await self._whole_window_period())
            if relocked is not None:
                update = replace(update, period_s=relocked, changed=True)
                # The same traffic read at a longer scale: nothing old to forget, and a
                # window of a few long periods is too short to show them again.
                keep_from = self._clock.now() - self._cfg.lock_window_periods * relocked
                log.info("longer sync period found: T = %.4g s (re-locked)", relocked)
        if was_locked is None and update.period_s is not None and recent_from is not None:
            # Locked on the newest part of the window: the older traffic (a job's start-up)
            # did not repeat, and the locked window must not reach back into it.
            relocked, keep_from = update.period_s, recent_from
        if relocked is not None:
            if keep_from is None:
                keep_from = self._clock.now() - self._cfg.restart_periods * relocked
            for window in self._state.counters.values():
                window.drop_before(keep_from)
            self._calls_floor = keep_from
            self._cut_at = self._clock.now()
        if update.period_s is None:
            # Not locked yet (or lost): no T, and so no D, rather than a guess.
            self._lock_age.update(self._clock.now(), locked=False)
            est = replace(
                est,
                period_s=None,
                confidence=0.0,
                inner_period_s=None,
                duty_cycle=None,
                duty_cycle_source=None,
                bytes_per_iteration=None,
            )
        else:
            confidence = sustained_confidence(
                est.confidence,
                est.period_s,
                update.period_s,
                self._lock_age.update(self._clock.now(), locked=True, period_s=update.period_s),
                unsure=est.period_unsure,
            )
            est = replace(est, period_s=update.period_s, confidence=confidence)
            self._last_locked = est
        began = time.perf_counter()
        params = await self._regime_params(inputs, est, since)
        took += time.perf_counter() - began
        self._estimates += 1
        shown = self._regime_gate.update(
            est.regime, self._clock.now(), locked=update.period_s is not None
        )
        est = replace(est, regime=shown)
        self._publish(est, took, locked=update.locked, source=source, regime=params)

    def _held(self) -> Estimate | None:
        """The lock, shown while a re-lock's cut window is too short to estimate.

        A re-lock keeps only the new traffic (5 new periods, or from the new run's first
        burst): under ``min_window_s`` that is not estimated, and T left the scrape until the
        window regrew (0.1 s steps becoming 0.13 s: a second without T, twice). Keeping more
        would mix the old steps back in. So the locked T is shown on the last locked estimate,
        without the parts that depend on it (D, V) or on the old window (inner period), for
        at most ``min_window_s`` and a hop after the cut: a source gone quiet is not held.
        """
        locked, last, cut = self._tracker.locked, self._last_locked, self._cut_at
        if locked is None or last is None or cut is None:
            return None
        if self._clock.now() - cut > self._cfg.min_window_s + self._cfg.hop_s:
            return None
        return replace(
            last,
            period_s=locked,
            inner_period_s=None,
            duty_cycle=None,
            duty_cycle_source=None,
            bytes_per_iteration=None,
        )

    async def _regime_params(
        self, inputs: EstimateInputs, est: Estimate, since: float | None
    ) -> RegimeParams | None:
        """Arrivals, sharding and sparse-op structure of this hop's window, off the loop.

        Advisory like the step-change watch: a failure costs these gauges one hop, never T.
        Every burst seen end is counted once into the burst histograms.
        """
        last = self._last_regime
        calls_due = last is None or self._estimates % max(1, self._cfg.regime_calls_every_hops) == 0
        table = (
            self._state.calls.table(since=since, limit=self._cfg.regime_calls)
            if calls_due
            else None
        )
        try:
            params = await asyncio.to_thread(
                regime_params,
                inputs.network,
                est,
                table,
                latency_s=self._cfg.collective_latency_s,
                latency_source="config",
            )
        except Exception:
            log.exception("regime parameters failed on this window")
            return None
        if not calls_due and last is not None:  # keep the collective side of the last reading
            params = replace(
                params, sharding=last.sharding, alltoall=last.alltoall, pipeline=last.pipeline
            )
        self._last_regime = params
        arr = params.arrivals
        if arr is not None and arr.burst_starts_s.size:
            self._state.bursts.add(
                params.arrivals_t0 + arr.burst_starts_s,
                arr.burst_bytes,
                arr.burst_seconds,
                arr.dt,
                min_rate=self._cfg.idle_bytes_per_s,
            )
        return params

    async def _recent_watch(
        self, inputs: EstimateInputs, locked_s: float, direction: str | None = None
    ) -> RecentWatch:
        """The step-change watch over the last few locked periods, off the loop.

        It reads ``direction`` (where the estimate found T; by default the busier one). Its edge
        fallback reads the locked window's grid of the same direction (``inputs``), and the
        whole ring's for the steps before it.
        """
        source, grids = self._network(since=self._window_start(self._cfg.change_window_periods))
        chosen = busier_direction(grids) if grids else None
        if direction is not None and direction in grids:
            chosen = direction, grids[direction]
        history: Callable[[], GridSeries | None]
        if chosen is not None:
            direction, recent = chosen
            edges_from = inputs.network.get(direction)

            def history() -> GridSeries | None:
                if source is None:
                    return None
                return self._state.counters[source].grids().get(direction)
        else:
            # The NCCL log alone: its calls binned coarsely enough (T/64) that the calls of one
            # sync point (a bucketed all-reduce, a layer's gathers) merge into one burst whose
            # edges time the steps; 1 ms bins would show the spacing of single calls.
            mix = self._state.calls.mix(since=self._log_since(self._cfg.change_window_periods))
            if mix is not None and locked_s < MIN_ARRIVAL_POLLS * mix.time_resolution_s:
                # Steps timed by their calls' order (agent.call_sequence), shorter than the
                # calls' times can time: binned, those show only the beat against the polls.
                # A change of step is seen by the windows' own estimates.
                return RecentWatch(None)
            dt = max(1e-3, locked_s / 64.0)
            now = self._clock.now()
            log_recent = log_grid(mix, dt, end=now) if mix is not None else None
            edges_from = (
                log_grid(inputs.collectives, dt, end=now)
                if inputs.collectives is not None
                else None
            )
            if log_recent is None:
                return RecentWatch(None)
            recent = log_recent

            def history() -> GridSeries | None:
                ring = self._state.calls.mix(since=self._calls_floor)
                return log_grid(ring, dt, end=now) if ring is not None else None

        try:
            watch = await asyncio.to_thread(watch_recent, recent, locked_s, edges_from=edges_from)
            if watch.step is not None and watch.step.decisive:
                # Rare (a change of step, or two stalls in a row): only then the whole ring,
                # built here on the loop (the rings are not read from other threads).
                watch = await asyncio.to_thread(
                    watch_recent, recent, locked_s, edges_from=edges_from, history_from=history()
                )
            return watch
        except Exception:  # the watches are advisory: never let them stop the estimates
            log.exception("step-change watch failed on this window")
            return RecentWatch(None)

    async def _job_gone(
        self, est: Estimate, locked: float | None, inputs: EstimateInputs
    ) -> float | None:
        """When the job stopped (its last burst or call), if silent longer than it ever paused.

        None while it has not (:func:`job_gone`). The ring is gridded only once the silence
        exceeds two periods: at a job's end, or in the compute phase of a step whose layers are
        locked. With the NCCL log alone, the silence runs from its newest call to the last time
        all calls until then have surely arrived (``calls_delivery_s`` ago), and the pauses are
        those between its calls.
        """
        period = locked if locked is not None else est.period_s
        if period is None:
            return None
        mix = inputs.collectives
        if not inputs.network and mix is not None:
            timed = mix.call_times[np.isfinite(mix.call_times)]
            if timed.size == 0:
                return None
            last = float(timed.max())
            silent = max(0.0, self._clock.now() - self._cfg.calls_delivery_s - last)
            if not job_gone(silent, period, self._pauses.pause_s):
                return None  # under two periods, or a pause the job came back from
            ring = self._state.calls.mix(since=None)
            gap = longest_event_gap_s(ring.call_times) if ring is not None else 0.0
            return last if job_gone(silent, period, gap) else None
        quiet, threshold, last_end = est.quiet_s, est.burst_threshold, est.last_burst_end_s
        if quiet is None or threshold is None or last_end is None:
            return None
        if not job_gone(quiet, period, self._pauses.pause_s):
            return None  # under two periods, or a pause the job came back from
        _, grids = self._network(since=None)
        grid = grids.get(est.direction) if est.direction is not None else None
        if grid is None:
            return None
        try:
            gap = await asyncio.to_thread(longest_gap_s, grid, threshold)
        except Exception:  # advisory: never let it stop the estimates
            log.exception("quiet watch failed on this window")
            return None
        return last_end if job_gone(quiet, period, gap) else None

    async def _whole_window_period(self) -> float | None:
        """T of the whole window (the outer-period watch), off the loop.

        With the NCCL log alone, T of every call since the calls floor: a job whose steps
        open with a few calls 20 ms apart locked on those 20 ms from its first seconds, and
        its locked window, a few of those periods, never held a whole step again.
        """
        _, grids = self._network(since=None)
        chosen = busier_direction(grids) if grids else None
        try:
            if chosen is not None:
                return await asyncio.to_thread(whole_window_period, chosen[1])
            if grids:
                return None
            mix = self._state.calls.mix(since=self._calls_floor)
            if mix is None or mix.call_times.size == 0:
                return None
            inputs = EstimateInputs(collectives=mix)
            return (await asyncio.to_thread(estimate, inputs)).period_s
        except Exception:  # the watches are advisory: never let them stop the estimates
            log.exception("period watch failed on this window")
            return None

    def _publish(
        self,
        est: Estimate | None,
        took: float,
        *,
        locked: bool,
        source: str | None,
        regime: RegimeParams | None = None,
    ) -> None:
        job_id, job_source = self.job()
        snap = Snapshot(
            estimate=est,
            time_s=self._clock.now(),
            wall_time_s=time.time(),
            estimator_seconds=took,
            sources=tuple(replace(h) for h in self._state.health.values()),
            estimates=self._estimates,
            locked=locked,
            devices=tuple(self._state.devices.hop()),
            network_source=source,
            sinks=tuple(replace(k.health) for k in self._sinks.values()),
            job_id=job_id,
            job_id_source=job_source,
            last_burst_wall_s=self._last_burst_wall,
            source_stats=dict(self._state.stats),
            message_sizes=self._state.calls.size_histogram(),
            collective_timings=self._state.timings.summary(),
            regime=regime,
            burst_bytes=self._state.bursts.sizes.histogram(),
            burst_seconds=self._state.bursts.durations.histogram(),
            device_bursts=self._device_view.bursts if self._device_view is not None else (),
            device_bursts_source=self._device_view.source if self._device_view else None,
        )
        self._store.publish(snap)
        if est is not None:
            for text in self._warning_log.due(est.warnings, snap.time_s):
                log.info("estimate: %s", text)
        for sink in self._sinks.values():
            sink.offer(snap)
        if self._on_snapshot is not None:
            try:
                self._on_snapshot(snap)
            except Exception:
                log.exception("snapshot callback failed")

    def job(self) -> tuple[str | None, str | None]:
        """(job id, where it came from): the configured one, else the NCCL commId."""
        if self._cfg.job_id:
            return self._cfg.job_id, "config"
        if self._job_comm_id is not None:
            return f"nccl-{self._job_comm_id}", "nccl"
        return None, None

    async def run(self) -> None:
        """Run until :meth:`stop`; cancels every task on the way out."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            for source in self._sources.values():
                self._spawn(f"source[{source.name}]", self._run_source(source))
            for sink in self._sinks.values():
                self._spawn(f"sink[{sink.name}]", self._run_sink(sink))
            self._spawn("windows", self._consume())
            self._spawn("estimator", self._estimate_loop())
            await self._stop.wait()
            await _cancel_all(list(self._tasks.values()))
        self._tg = None
        self._tasks.clear()


async def _cancel_all(tasks: list[asyncio.Task[Any]], *, grace_s: float = 1.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again whoever is still running.

    Python 3.11's ``asyncio.wait_for`` swallows a cancellation that lands while the awaited
    operation completes (fixed in 3.12), and third-party clients use it: one cancel() is not
    always enough, and a shutdown that waited on it would hang until systemd kills us.
    """
    pending = {t for t in tasks if not t.done()}
    rounds = 0
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=grace_s)
        rounds += 1
        if pending and rounds in (1, 10):
            log.warning(
                "still stopping after %d cancellation(s): %s",
                rounds,
                ", ".join(sorted(t.get_name() for t in pending)),
            )
