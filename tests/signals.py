"""Rate series with exact counter semantics and known truth, for estimator tests.

Each sample is the mean rate over its poll interval (the integral of a piecewise-constant
rate), so edge samples straddle bursts exactly as real counters do.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.estimate import CollectiveMix
from agent.simulator.sampling import Cumulative

FloatArray = npt.NDArray[np.float64]


def sample_bursts(bursts: FloatArray, fs: float, duration: float) -> FloatArray:
    """Mean rate per sample of a list of (start, end, rate) bursts."""
    edges = np.arange(int(duration * fs) + 1) / fs
    cum = Cumulative(bursts[:, :2], bursts[:, 2]).at(edges)
    return np.diff(cum) * fs


def periodic_bursts(
    period: float,
    duty: float,
    duration: float,
    *,
    rate: float = 1.0,
    jitter: float = 0.0,
    seed: int = 0,
    phase: float = 0.123,
) -> tuple[FloatArray, float]:
    """(bursts, realised mean period) of a square wave with i.i.d. step jitter."""
    rng = np.random.default_rng(seed)
    starts = [phase * period]
    while starts[-1] < duration + period:
        starts.append(starts[-1] + period * (1.0 + jitter * rng.standard_normal()))
    s = np.asarray(starts)
    b = np.column_stack((s, s + duty * period, np.full(s.size, rate)))
    inside = s[(s >= 0) & (s < duration)]
    return b, float(np.diff(inside).mean())


def square_wave(
    period: float,
    duty: float,
    fs: float,
    duration: float,
    *,
    noise: float = 0.0,
    jitter: float = 0.0,
    background: float = 0.0,
    seed: int = 0,
) -> tuple[FloatArray, float]:
    """(rate samples, realised period): bursts of height 1 plus background and white noise."""
    b, realised = periodic_bursts(period, duty, duration, jitter=jitter, seed=seed)
    x = sample_bursts(b, fs, duration) + background
    if noise:
        x = x + np.random.default_rng(seed + 1000).normal(0.0, noise, x.size)
    return x, realised


def poisson_bursts(
    rate_hz: float, mean_len: float, fs: float, duration: float, *, noise: float, seed: int
) -> FloatArray:
    """Bursts at Poisson times with exponential lengths: aperiodic by construction."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate_hz * duration)
    starts = np.sort(rng.uniform(0, duration, n))
    lens = rng.exponential(mean_len, n)
    b = np.column_stack((starts, starts + lens, rng.uniform(0.5, 1.0, n)))
    x = sample_bursts(b, fs, duration)
    return x + rng.normal(0.0, noise, x.size)


def gamma_renewal(
    mean_interval: float, cv: float, fs: float, duration: float, *, noise: float, seed: int
) -> FloatArray:
    """Quasi-periodic bursts: gamma-distributed intervals with the given CV (a trap)."""
    rng = np.random.default_rng(seed)
    k = 1.0 / cv**2
    gaps = rng.gamma(k, mean_interval / k, int(3 * duration / mean_interval) + 10)
    starts = np.cumsum(gaps)
    starts = starts[starts < duration]
    lens = rng.exponential(0.2 * mean_interval, starts.size)
    b = np.column_stack((starts, starts + lens, np.ones(starts.size)))
    x = sample_bursts(b, fs, duration)
    return x + rng.normal(0.0, noise, x.size)


def pipeline_stage(
    rng: np.random.Generator, gap_s: tuple[float, float], steps: int = 40
) -> FloatArray:
    """(start, end, rate) of a pipeline stage's transfers: per 0.76 s step, 8 micro-batches of
    21 ms at 50 MB/s, ``gap_s`` apart (the shape of a real 2-stage GPipe job on a 400 Mbit/s
    link)."""
    rows = []
    for k in range(steps):
        t = 0.05 + k * 0.76
        for _ in range(8):
            rows.append((t, t + 0.021, 50e6))
            t += 0.021 + float(rng.uniform(*gap_s))
    return np.asarray(rows)


def allreduce_calls(
    times: FloatArray, bytes_each: float, *, resolution_s: float = 0.0
) -> CollectiveMix:
    """One process's AllReduce calls of ``bytes_each`` bytes at ``times`` (8 ranks), as the
    NCCL log source hands them over; ``resolution_s`` as ``CollectiveMix.time_resolution_s``."""
    return CollectiveMix(
        ops={"AllReduce": (times.size, 0)},
        nranks=8,
        call_times=times,
        call_bytes=np.full(times.size, bytes_each),
        processes=1,
        time_resolution_s=resolution_s,
    )
