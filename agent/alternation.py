"""Traffic that alternates from one poll to the next: a rhythm near two polls, unresolvable.

A step of 19.5 ms read every 10 ms puts about half a step in each poll: the rate swings high,
low, high, low, and the swing's size drifts through a beat of 0.39 s as the steps slide
against the polls. The period detector took that beat for T at confidence 0.9, with D 1.0:
a false "network bottleneck" on a job whose true D was 0.4. Real traffic at a resolvable
rate changes over several polls (the lag-1 autocorrelation of 24 recorded jobs, DDP to
pipeline stages at 100 Hz: 0.41 to 0.93), while this swing has one of -0.96 to -0.98 and
averaging two neighbouring polls removes 98-99 % of its variance (24 real jobs: 23-30 %).

Pure functions over a rate series; no I/O.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.period import filled, nsdf

__all__ = ["alternates", "seen_over_pairs"]

FloatArray = npt.NDArray[np.float64]

#: Lag-1 autocorrelation under which the rate alternates poll to poll ...
MAX_LAG1 = -0.5
#: ... and the share of its variance left after averaging each pair of neighbouring polls.
MAX_PAIR_VARIANCE = 0.1
#: A period the pair-averaged series repeats at this normalised autocorrelation or more is
#: in the traffic, not only in the swing's beat against the polls.
MIN_PAIR_NSDF = 0.5


def alternates(rate: FloatArray) -> bool:
    """Whether the rate swings from one poll to the next and little else (see the module)."""
    x = filled(rate, least=16)
    if x is None:
        return False
    y = x - x.mean()
    power = float(np.einsum("i,i->", y, y))  # (einsum: no BLAS call, agent/threads.py)
    if power <= 0:
        return False
    if float(np.einsum("i,i->", y[:-1], y[1:])) / power >= MAX_LAG1:
        return False
    pairs = 0.5 * (x[1:] + x[:-1])
    return float(np.var(pairs)) < MAX_PAIR_VARIANCE * float(np.var(x))


def seen_over_pairs(rate: FloatArray, dt: float, period_s: float) -> bool:
    """Whether ``period_s`` shows in the rate averaged over pairs of polls (the swing gone)."""
    x = filled(rate, least=16)
    if x is None:
        return False
    pairs = 0.5 * (x[1:] + x[:-1])
    lag = round(period_s / dt)
    if lag < 2 or lag >= pairs.size // 2:
        return False
    r = nsdf(pairs - pairs.mean())
    return float(np.max(r[lag - 1 : lag + 2])) >= MIN_PAIR_NSDF
