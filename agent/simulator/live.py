"""A simulated job played back in real time as live sources (what ``commpulse demo`` runs).

The sources implement the same :class:`collectors._base.Source` protocol as the real ones and
emit the same readings: cumulative NIC counters polled on absolute deadlines, GPU SM-activity
samples, and NCCL COLL calls at their enqueue times. The job's event list is built once for a
long horizon and replayed cyclically.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.clock import Clock, Ticker
from agent.simulator.nccl_writer import job_comm_id
from agent.simulator.params import JobParams, resolve
from agent.simulator.sampling import Cumulative
from agent.simulator.schedule import (
    BF16_BYTES,
    SM_ACTIVE_COMM,
    SM_ACTIVE_COMPUTE,
    Schedule,
    build_schedule,
)
from collectors._base import CollectiveCall, CounterReading, DeviceInfo, Emit, GpuReading

__all__ = [
    "SimulatedCollectives",
    "SimulatedCounters",
    "SimulatedGpu",
    "SimulatedJob",
    "link_speed_for",
]

_PER_RANK_OPS = frozenset({"AllGather", "ReduceScatter", "AlltoAll"})


@dataclass
class SimulatedJob:
    """The job shared by the three sources: one schedule, one time origin."""

    schedule: Schedule
    origin: float  # clock time that maps to job time 0
    horizon_s: float

    def __post_init__(self) -> None:
        s = self.schedule
        self.traffic = Cumulative(s.bursts[:, :2], s.bursts[:, 2])
        self.busy = Cumulative(s.bursts[:, :2], np.ones(s.bursts.shape[0]))
        self.computing = Cumulative(s.compute, np.ones(s.compute.shape[0]))
        self.lap_bytes = float(self.traffic.at(np.array([self.horizon_s]))[0])

    @classmethod
    def start(cls, params: JobParams, clock: Clock, *, horizon_s: float = 1800.0) -> SimulatedJob:
        """Build the schedule for ``horizon_s`` seconds and start the job now."""
        p = resolve(JobParams(**{**params.__dict__, "duration_s": horizon_s}))
        return cls(schedule=build_schedule(p), origin=clock.now(), horizon_s=horizon_s)

    def job_time(self, now: float) -> tuple[int, float]:
        """(lap, time within the lap): the schedule repeats every ``horizon_s``."""
        t = max(0.0, now - self.origin)
        lap = int(t // self.horizon_s)
        return lap, t - lap * self.horizon_s


#: Ethernet and InfiniBand link rates, Gb/s.
LINK_RATES_GBPS = (10, 25, 40, 50, 100, 200, 400, 800, 1600)


def link_speed_for(burst_bytes_per_s: float) -> float:
    """The slowest standard link rate (bytes/s) that ``burst_bytes_per_s`` fills 90 % at most.

    A collective's bursts rarely fill the link: the demo's NICs look like a real host's.
    """
    for gbps in LINK_RATES_GBPS:
        if burst_bytes_per_s <= 0.9 * gbps * 1e9 / 8:
            return gbps * 1e9 / 8
    return burst_bytes_per_s / 0.9


class SimulatedCounters:
    """Cumulative tx/rx counters of every local NIC, polled at ``poll_hz``."""

    name = "simulated_counters"

    def __init__(self, job: SimulatedJob, clock: Clock, *, poll_hz: float = 100.0) -> None:
        self._job = job
        self._clock = clock
        self._dt = 1.0 / poll_hz
        p = job.schedule.params
        self._rng = np.random.default_rng([p.seed, 11])
        self._columns = [f"sim{r}_{d}_bytes" for r in range(p.local_ranks) for d in ("tx", "rx")]
        self._background = np.zeros(len(self._columns))
        self._offsets = self._rng.integers(0, 2**40, len(self._columns)).astype(np.float64)

    def _collective_bytes(self, now: float) -> float:
        lap, t = self._job.job_time(now)
        return lap * self._job.lap_bytes + float(self._job.traffic.at(np.array([t]))[0])

    async def run(self, emit: Emit) -> None:
        """Poll on absolute deadlines until cancelled."""
        p = self._job.schedule.params
        # Each NIC as a real source describes it: up, at the standard rate of the job's B.
        speed = link_speed_for(p.bandwidth)
        for r in range(p.local_ranks):
            emit(DeviceInfo(f"sim{r}", "netdev", "Ethernet", speed_bytes_per_s=speed, state="up"))
        mean = p.background_fraction * p.bandwidth
        sigma = p.noise_fraction * p.bandwidth
        ticker = Ticker(self._clock, self._dt)
        last = self._clock.now()
        while True:
            now = await ticker.tick()
            span = now - last
            last = now
            if span > 0 and mean > 0:
                expected = mean * span
                var = max(sigma**2 * self._dt * span, 1e-9)
                self._background += self._rng.gamma(
                    expected**2 / var, var / expected, len(self._columns)
                )
            collective = self._collective_bytes(now)
            values = {
                name: int(self._offsets[i] + collective + self._background[i])
                for i, name in enumerate(self._columns)
            }
            emit(CounterReading(now, values))


class SimulatedGpu:
    """SM activity per local GPU, averaged over each sampling window (as DCGM reports it)."""

    name = "simulated_gpu"

    def __init__(self, job: SimulatedJob, clock: Clock, *, interval_s: float = 0.1) -> None:
        self._job = job
        self._clock = clock
        self._interval = interval_s
        self._rng = np.random.default_rng([job.schedule.params.seed, 12])

    @staticmethod
    def _fraction(cum: Cumulative, a: float, b: float) -> float:
        area = cum.at(np.array([a, b]))
        return float(np.clip((area[1] - area[0]) / (b - a), 0.0, 1.0))

    async def run(self, emit: Emit) -> None:
        """Sample every ``interval_s`` until cancelled."""
        s = self._job.schedule
        ticker = Ticker(self._clock, self._interval)
        while True:
            now = await ticker.tick()
            _, t = self._job.job_time(now)
            a = max(0.0, t - self._interval)
            compute = self._fraction(self._job.computing, a, t) if t > a else 0.0
            comm = self._fraction(self._job.busy, a, t) if t > a else 0.0
            comm_only = max(0.0, comm - compute)
            for gpu in range(s.params.local_ranks):
                sm = SM_ACTIVE_COMPUTE * compute + SM_ACTIVE_COMM * comm_only
                sm = float(np.clip(sm + self._rng.normal(0.0, 0.01), 0.0, 1.0))
                util = min(1.0, compute + comm_only)
                emit(GpuReading(now, gpu, {"sm_active": sm, "util": util}))


class SimulatedCollectives:
    """The NCCL COLL calls of the job, emitted when their enqueue time comes."""

    name = "simulated_nccl"

    def __init__(self, job: SimulatedJob, clock: Clock) -> None:
        self._job = job
        self._clock = clock
        calls = sorted(job.schedule.calls, key=lambda c: c.time_s)
        p = job.schedule.params
        self._times = np.array([c.time_s - p.start_time_s for c in calls])
        self._calls = calls
        self._comm_id = f"{job_comm_id(p.seed):x}"

    async def run(self, emit: Emit) -> None:
        """Replay calls in real time (checked every 10 ms) until cancelled."""
        p = self._job.schedule.params
        idx = 0
        lap_seen = 0
        ticker = Ticker(self._clock, 0.01)
        while True:
            now = await ticker.tick()
            lap, t = self._job.job_time(now)
            if lap != lap_seen:
                lap_seen, idx = lap, 0
            while idx < len(self._calls) and self._times[idx] <= t:
                c = self._calls[idx]
                nranks = p.nranks
                size = c.count * BF16_BYTES * (nranks if c.op in _PER_RANK_OPS else 1)
                emit(
                    CollectiveCall(
                        time_s=now - (t - self._times[idx]),
                        op=c.op,
                        s_bytes=size,
                        nranks=nranks,
                        comm=f"rank{c.local_rank}",
                        extra={"process": f"{p.hostname}:{c.local_rank}"},
                        comm_id=self._comm_id,
                    )
                )
                idx += 1
