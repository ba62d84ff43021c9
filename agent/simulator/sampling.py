"""Sample a schedule the way the real sources would: cumulative counters and GPU activity.

Counter semantics are exact: a poll reads the integral of the rate up to its instant, so a
sample that straddles a burst edge holds a partial value. Background traffic is real,
non-negative traffic (gamma-distributed bytes per poll interval with the requested mean and
standard deviation), never Gaussian noise clipped at zero: clipping biases the duty cycle
(research/period_estimation.md §4.1), and a real counter never decreases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.simulator.schedule import SM_ACTIVE_COMM, SM_ACTIVE_COMPUTE, Schedule

__all__ = [
    "CounterTrace",
    "Cumulative",
    "GpuTrace",
    "cumulative_at",
    "sample_counters",
    "sample_gpu",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CounterTrace:
    """Poll times (seconds from the job start) and raw counter values per column."""

    times: FloatArray
    columns: dict[str, npt.NDArray[np.uint64]]


@dataclass(frozen=True)
class GpuTrace:
    """GPU samples: time (end of each averaging window), GPU index, signals."""

    times: FloatArray
    gpu: npt.NDArray[np.int64]
    sm_active: FloatArray
    util_percent: FloatArray


class Cumulative:
    """The exact integral of a sum of boxcars (start, end, rate), precomputed for fast reads."""

    def __init__(self, intervals: FloatArray, rates: FloatArray) -> None:
        if intervals.size == 0:
            self._edges = np.zeros(1)
            self._area = np.zeros(1)
            self._level_end = 0.0
            return
        edges = np.concatenate((intervals[:, 0], intervals[:, 1]))
        steps = np.concatenate((rates, -rates))
        order = np.argsort(edges, kind="stable")
        self._edges = edges[order]
        level = np.cumsum(steps[order])  # rate right after each edge
        self._area = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(self._edges))))
        self._level_end = float(level[-1])

    def at(self, times: FloatArray) -> FloatArray:
        """Integral from the first edge (and 0 before it) up to each of ``times``."""
        out = np.interp(times, self._edges, self._area, left=0.0)
        beyond = times > self._edges[-1]
        out[beyond] = self._area[-1] + self._level_end * (times[beyond] - self._edges[-1])
        return out


def cumulative_at(times: FloatArray, intervals: FloatArray, rates: FloatArray) -> FloatArray:
    """Exact integral of a sum of boxcars (start, end, rate) from 0 up to each of ``times``."""
    return Cumulative(intervals, rates).at(times)


def _poll_times(s: Schedule, rng: np.random.Generator) -> FloatArray:
    p = s.params
    assert p.duration_s is not None
    dt = 1.0 / p.sample_rate_hz
    n = int(np.floor(p.duration_s * p.sample_rate_hz)) + 1
    times = np.arange(n, dtype=np.float64) * dt
    if p.poll_jitter > 0:
        times[1:-1] += rng.uniform(-0.5, 0.5, n - 2) * p.poll_jitter * dt
    if p.missing > 0 and n > 2:
        keep = np.ones(n, dtype=bool)
        keep[1:-1] = rng.random(n - 2) >= p.missing
        times = times[keep]
    return times


def sample_counters(s: Schedule) -> CounterTrace:
    """Cumulative tx/rx byte counters of every local rank's NIC at the poll instants."""
    p = s.params
    rng = np.random.default_rng([p.seed, 1])
    times = _poll_times(s, rng)
    collective = cumulative_at(times, s.bursts[:, :2], s.bursts[:, 2])
    dt_nominal = 1.0 / p.sample_rate_hz
    mean = p.background_fraction * p.bandwidth
    sigma = p.noise_fraction * p.bandwidth
    spans = np.diff(times)
    modulus = 2**p.counter_bits
    columns: dict[str, npt.NDArray[np.uint64]] = {}
    for rank in range(p.local_ranks):
        for direction in ("tx", "rx"):
            if mean > 0:
                expected = mean * spans
                if sigma > 0:
                    # Compound-Poisson background: variance grows with the interval length.
                    var = sigma**2 * dt_nominal * spans
                    background = rng.gamma(expected**2 / var, var / expected)
                else:
                    background = expected
            else:
                background = np.zeros(spans.size)
            total = collective + np.concatenate(([0.0], np.cumsum(background)))
            offset = (
                int(rng.integers(0, 2**40)) if p.counter_bits == 64 else int(rng.integers(0, 2**31))
            )
            whole = np.floor(total).astype(np.uint64)
            values = (
                (whole + np.uint64(offset)) % np.uint64(modulus)
                if p.counter_bits < 64
                else (whole + np.uint64(offset))
            )
            columns[f"mlx5_{rank}_{direction}_bytes"] = values.astype(np.uint64)
    return CounterTrace(times=times, columns=columns)


def sample_gpu(s: Schedule) -> GpuTrace:
    """SM-activity averaged over each GPU sampling window, as DCGM reports it.

    The SM level is high in compute phases, low (NCCL's few SMs) in communication-only phases
    and zero when the GPU waits for work; ``utilization.gpu`` reads 100 % whenever any kernel
    (compute or NCCL) runs, which is why it cannot separate the two.
    """
    p = s.params
    assert p.duration_s is not None
    rng = np.random.default_rng([p.seed, 2])
    gi = p.gpu_interval_s
    ends = np.arange(gi, p.duration_s + 1e-9, gi)
    compute_area = cumulative_at(
        np.concatenate((ends - gi, ends)), s.compute, np.ones(s.compute.shape[0])
    )
    comm_area = cumulative_at(
        np.concatenate((ends - gi, ends)), s.bursts[:, :2], np.ones(s.bursts.shape[0])
    )
    n = ends.size
    compute_frac = np.clip((compute_area[n:] - compute_area[:n]) / gi, 0.0, 1.0)
    comm_frac = np.clip((comm_area[n:] - comm_area[:n]) / gi, 0.0, 1.0)
    comm_only = np.clip(comm_frac - compute_frac, 0.0, None)
    active = np.clip(compute_frac + comm_only, 0.0, 1.0)
    times, gpus, sm, util = [], [], [], []
    for rank in range(p.local_ranks):
        noise = rng.normal(0.0, 0.01, n)
        sm_active = np.clip(
            SM_ACTIVE_COMPUTE * compute_frac + SM_ACTIVE_COMM * comm_only + noise, 0.0, 1.0
        )
        times.append(ends)
        gpus.append(np.full(n, rank, dtype=np.int64))
        sm.append(sm_active)
        util.append(np.round(100.0 * active))
    return GpuTrace(
        times=np.concatenate(times),
        gpu=np.concatenate(gpus),
        sm_active=np.concatenate(sm),
        util_percent=np.concatenate(util),
    )
