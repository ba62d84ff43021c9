"""The mean period of a run of burst edges, with the least variance the edges allow.

Each measured edge is the true edge plus a timing error (noise, sampling), and the true edges
advance by one step at a time, each step a little longer or shorter than the last (step
jitter). The truth to estimate is the *realised* mean period: the true span over the number of
cycles. Two classical estimators are each optimal at one end:

* the span, ``(last − first) / cycles``, when the steps jitter and the timing is exact: every
  interval in between cancels;
* the least-squares line through all the edges, when the steps are exact and the timing is
  noisy: its error falls as ``K^-1.5`` with K cycles instead of ``K^-1``, which is what the
  Cramér–Rao bound of a noisy periodic edge train allows (research/period_estimation.md §2).

The minimum-variance linear estimator for a mix of both is a weighted sum of the intervals,
``T = Σ W_i δ_i / Σ W_i m_i`` (``m_i`` cycles in interval ``i``, more than one where bursts
were missed), whose weights solve one tridiagonal system. The ratio of the two variances comes
from the intervals themselves: step jitter moves both edges of a burst together, timing error
moves each on its own.

Pure functions of numpy arrays.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["edge_noise_ratio", "realised_period"]

FloatArray = npt.NDArray[np.float64]

#: Fewest single-cycle intervals for a departure from the span. Below, the line fit gains
#: little (its variance is about 6/K of the span's) and the two variances cannot be told apart.
MIN_INTERVALS = 12


def edge_noise_ratio(
    rising: tuple[FloatArray, FloatArray],
    falling: tuple[FloatArray, FloatArray],
    period_s: float,
    timing_sd_bound: float = math.inf,
) -> float:
    """σ_e² / σ_j²: edge timing variance over step jitter variance, from the intervals.

    Args:
        rising: (intervals, cycles per interval) of the rising edges of the bursts.
        falling: the same for their falling edges (burst i's fall follows its rise).
        period_s: the period the deviations are taken from.
        timing_sd_bound: the largest edge timing error the amplitude noise can explain (a
            generous bound: only a spread far beyond it is taken for timing error).

    A step that runs long moves both edges of the bursts after it, while the timing errors of
    the two edges are independent: the covariance of the rising and falling intervals is the
    jitter σ_j², and each interval's variance is σ_j² + 2σ_e². A burst's width is a difference
    of two timing errors, so the change of width bounds σ_e² too, as does the amplitude noise;
    the spread beyond it is jitter. Each estimate is taken less its standard error, so that
    jitter counts as zero only on a train that shows none (then the line fit, ``inf``), and
    with too few intervals to tell the span is kept (0).
    """
    (d_r, m_r), (d_f, m_f) = rising, falling
    n = min(d_r.size, d_f.size)
    unit = (m_r[:n] == 1.0) & (m_f[:n] == 1.0)
    count = int(unit.sum())
    if count < MIN_INTERVALS:
        return 0.0
    dev_r = d_r[:n] - period_s
    dev_f = d_f[:n] - period_s
    # Which step moves a burst's fall depends on where in the step the burst sits (a burst at
    # the sync point shares its step with its rise; a layer train that fills the step ends with
    # the next one): the shared jitter is the sum of the cross-covariances at lags -1, 0, +1.
    cov = 0.0
    var_of_cov = 0.0
    for a, b, both in (
        (dev_r, dev_f, unit),
        (dev_r[1:], dev_f[:-1], unit[1:] & unit[:-1]),
        (dev_r[:-1], dev_f[1:], unit[:-1] & unit[1:]),
    ):
        if int(both.sum()) < 3:
            continue
        products = (a * b)[both]
        cov += float(products.mean())
        var_of_cov += float(products.var()) / products.size
    spread = 0.5 * float(np.mean(dev_r[unit] ** 2) + np.mean(dev_f[unit] ** 2))
    spread_se = spread * math.sqrt(2.0 / count)
    # Widths change by the difference of two steps' width noise: var(Δw) = 2·var(w) ≥ 4σ_e²
    # when the timing error is all there is; the amplitude noise bounds it as well.
    widths_change = d_f[:n][unit] - d_r[:n][unit]
    edge_var = min(
        max(0.0, 0.5 * (spread - max(cov, 0.0))),
        0.25 * float(np.mean(widths_change**2)),
        timing_sd_bound**2,
    )
    # Jitter, less a standard error: the shared movement of the two edges, or the spread the
    # timing error cannot explain, whichever is clearer.
    jitter_var = max(cov - math.sqrt(var_of_cov), spread - 2.0 * edge_var - spread_se, 0.0)
    # The timing error must show too (also less a standard error): with both unresolved the
    # span is the safe side.
    edge_var = min(edge_var, max(0.0, 0.5 * (spread - max(cov, 0.0) - spread_se)))
    if edge_var == 0.0:
        return 0.0
    return math.inf if jitter_var == 0.0 else edge_var / jitter_var


def _weights(m: FloatArray, ratio: float) -> FloatArray:
    """Solve ``(α·diag(m) + β·L) W = m`` with L the Dirichlet second difference (2, −1).

    α = 1/(1+r), β = r/(1+r): r = 0 gives W = 1 (the span), r = ∞ the least-squares parabola.
    Thomas algorithm: the system is symmetric, diagonally dominant and tridiagonal.
    """
    n = m.size
    if ratio <= 0.0:
        return np.ones(n)
    alpha, beta = (0.0, 1.0) if math.isinf(ratio) else (1.0 / (1.0 + ratio), ratio / (1.0 + ratio))
    if n > 1 and bool(np.all(m == m[0])):
        return _uniform_weights(n, float(m[0]), alpha, beta)
    diag = (alpha * m + 2.0 * beta).tolist()
    rhs = m.tolist()
    off = -beta
    # Forward sweep, then back substitution.
    c_prime = [0.0] * n
    d_prime = [0.0] * n
    c_prime[0] = off / diag[0]
    d_prime[0] = rhs[0] / diag[0]
    for i in range(1, n):
        denom = diag[i] - off * c_prime[i - 1]
        c_prime[i] = off / denom
        d_prime[i] = (rhs[i] - off * d_prime[i - 1]) / denom
    w = [0.0] * n
    w[-1] = d_prime[-1]
    for i in range(n - 2, -1, -1):
        w[i] = d_prime[i] - c_prime[i] * w[i + 1]
    return np.asarray(w)


#: Below this ``x·n²`` the closed form's two terms cancel to a few digits, and the parabola
#: it tends to is closer than that (both errors ~1e-8 at the bar).
_PARABOLA_BAR = 1e-8


def _uniform_weights(n: int, m: float, alpha: float, beta: float) -> FloatArray:
    """:func:`_weights` where every interval spans ``m`` cycles (no burst missed), in closed form.

    The sweep above is a Python loop over every interval (1.2 ms an estimate at 650 steps);
    with equal ``m`` the system is Toeplitz and its solution is ``1/α`` less two geometric
    boundary terms, ``λ + 1/λ = 2 + α·m/β``, or the parabola ``(i+1)(n−i)·m/2β`` when α = 0.
    """
    x = alpha * m / beta
    i = np.arange(n, dtype=np.float64)
    if x * n * n < _PARABOLA_BAR:
        return (i + 1.0) * (n - i) * (0.5 * m / beta)
    log_lam = -math.log1p(0.5 * x + math.sqrt(x + 0.25 * x * x))  # λ < 1, as 1/(the root > 1)
    ends = np.exp((i + 1.0) * log_lam) + np.exp((n - i) * log_lam)
    return (1.0 - ends / (1.0 + math.exp((n + 1.0) * log_lam))) / alpha


def realised_period(
    edges: FloatArray,
    cycles: FloatArray,
    ratio: float,
    *,
    kept: npt.NDArray[np.bool_] | None = None,
) -> float:
    """Mean period of an edge run: ``Σ W_i δ_i / Σ W_i m_i`` with the minimum-variance weights.

    Args:
        edges: edge times, increasing.
        cycles: cycles in each interval (``edges.size − 1`` values, each ≥ 1).
        ratio: σ_e²/σ_j² (:func:`edge_noise_ratio`); 0 gives the span estimator exactly.
        kept: the intervals that count (default all): one whose cycles are unknown (a pause in
            the job) gets weight 0, which leaves the estimate unbiased.
    """
    intervals = np.diff(edges)
    if kept is not None and not kept.all():
        w = np.ones(intervals.size) if ratio <= 0.0 else _weights(cycles, ratio)
        w = np.where(kept, w, 0.0)
        return float(np.einsum("i,i->", w, intervals) / np.einsum("i,i->", w, cycles))
    if ratio <= 0.0 or intervals.size < 2:
        return float(intervals.sum() / cycles.sum())
    w = _weights(cycles, ratio)
    return float(np.einsum("i,i->", w, intervals) / np.einsum("i,i->", w, cycles))
