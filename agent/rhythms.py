"""Two rhythms under one period: independent periodic flows that share a link.

Two flows with their own periods (0.7 s and 1.93 s on one link, real kernel traffic) add up
to a series that nearly repeats at a common multiple of both (11 x 0.7 = 7.70, 4 x 1.93 =
7.72); the period detector then reports that multiple as the step, with a confidence of 0.97
and the two flows' busy time as D: a false "network bottleneck". A job's step has one
rhythm inside it at most (gradient accumulation's micro-steps, pipeline micro-batches,
ZeRO-3 layers): the autocorrelation's strong peaks below half the period are multiples of
one spacing. Strong peaks at two spacings that are not multiples of one another are two
flows. Pure function over a rate series; no I/O.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.period import nsdf

__all__ = ["MAX_SAMPLES", "PEAK_NSDF", "two_rhythms"]

FloatArray = npt.NDArray[np.float64]

#: The series is averaged down to at most this many samples (the rhythms are far coarser).
MAX_SAMPLES = 8192
#: A sub-period peak counts at this normalised autocorrelation or more.
PEAK_NSDF = 0.4
#: Shortest lag looked at, in samples (shorter peaks are a poll's or a packet train's).
MIN_LAG = 4
#: Two spacings found on the averaged series are checked on at most this many samples.
MAX_CHECK_SAMPLES = 1 << 21


def two_rhythms(rate: FloatArray, dt: float, period_s: float) -> tuple[float, float] | None:
    """Two spacings under ``period_s`` at which the series repeats, neither a multiple of one.

    None when the strong autocorrelation peaks below half the period are all multiples of
    one spacing (or there are fewer than two). The series is averaged down to ``MAX_SAMPLES``
    first; two spacings found there are checked at the full resolution, as the averaging can
    hide the one spacing they are multiples of under ``MIN_LAG`` (buckets 60 ms apart, read
    from 120 s of 100 Hz polls averaged in pairs, showed peaks at 0.12 and 0.18 s only).
    """
    x = np.nan_to_num(np.asarray(rate, dtype=np.float64))
    k = _factor(x.size, MAX_SAMPLES)
    found = _two_rhythms(x, dt, period_s, k)
    fine = _factor(x.size, MAX_CHECK_SAMPLES)
    if found is not None and fine < k:
        found = _two_rhythms(x, dt, period_s, fine)
    return found


def _factor(n: int, most: int) -> int:
    return max(1, -(-n // most))


def _two_rhythms(x: FloatArray, dt: float, period_s: float, k: int) -> tuple[float, float] | None:
    if k > 1:
        x = x[: x.size // k * k].reshape(-1, k).mean(axis=1)
        dt *= k
    hi = int(0.55 * period_s / dt)
    if hi <= MIN_LAG + 2 or x.size < 2 * hi:
        return None
    r = nsdf(x - x.mean())
    seg = r[MIN_LAG - 1 : hi + 1]
    inner = seg[1:-1]
    peaks = np.flatnonzero((inner >= seg[:-2]) & (inner > seg[2:]) & (inner >= PEAK_NSDF))
    lags = (peaks + MIN_LAG).astype(np.float64)
    if lags.size < 2:
        return None
    base = lags[0]
    for lag in lags[1:]:
        multiple = max(1.0, round(lag / base))
        if abs(lag - multiple * base) > max(2.0, 0.1 * base * multiple):
            return float(base * dt), float(lag * dt)
    return None
