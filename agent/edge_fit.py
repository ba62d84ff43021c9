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
from the intervals themselves: timing error makes consecutive intervals anti-correlated (lag-1
autocovariance −σ_e²), step jitter does not.

Pure functions of numpy arrays.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["edge_noise_ratio", "realised_period"]

FloatArray = npt.NDArray[np.float64]


def edge_noise_ratio(
    sequences: list[tuple[FloatArray, FloatArray]], period_s: float, widths: FloatArray
) -> float:
    """σ_e² / σ_j²: edge timing variance over step jitter variance, from the intervals.

    Args:
        sequences: (intervals, cycles per interval) of each edge sequence (rising, falling);
            only consecutive single-cycle intervals are used.
        period_s: the period the deviations are taken from.
        widths: burst widths (fall − rise of each burst).

    With intervals ``d_i = τ_i + e_{i+1} − e_i``: var(d) = σ_j² + 2σ_e² and the lag-1
    autocovariance is −σ_e². Returns 0 (trust the span) when there is too little to tell and
    ``inf`` (least squares) when the steps show no jitter at all.
    """
    squares: list[FloatArray] = []
    products: list[FloatArray] = []
    for d, m in sequences:
        unit = m == 1.0
        dev = d - period_s
        squares.append(dev[unit] ** 2)
        pair = unit[1:] & unit[:-1]
        products.append((dev[1:] * dev[:-1])[pair])
    sq = np.concatenate(squares) if squares else np.empty(0)
    pr = np.concatenate(products) if products else np.empty(0)
    if sq.size < 4 or pr.size < 3:
        return 0.0
    edge_var = max(0.0, -float(pr.mean()))
    if widths.size >= 4:
        # A burst's width is a difference of two timing errors, untouched by step jitter: the
        # tighter bound when the bursts last the same each step (the covariance above is noisy
        # when jitter dominates). Bursts of varying length only loosen it.
        edge_var = min(edge_var, 0.5 * float(np.var(widths)))
    # Jitter is what the spread leaves beyond the timing error, less one standard error of the
    # spread: a chance excess on a jitter-free train would otherwise keep T off the line fit.
    spread = float(sq.mean())
    jitter_var = max(0.0, spread - 2.0 * edge_var - spread * math.sqrt(2.0 / sq.size))
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


def realised_period(edges: FloatArray, cycles: FloatArray, ratio: float) -> float:
    """Mean period of an edge run: ``Σ W_i δ_i / Σ W_i m_i`` with the minimum-variance weights.

    Args:
        edges: edge times, increasing.
        cycles: cycles in each interval (``edges.size − 1`` values, each ≥ 1).
        ratio: σ_e²/σ_j² (:func:`edge_noise_ratio`); 0 gives the span estimator exactly.
    """
    intervals = np.diff(edges)
    if ratio <= 0.0 or intervals.size < 2:
        return float(intervals.sum() / cycles.sum())
    w = _weights(cycles, ratio)
    return float(np.dot(w, intervals) / np.dot(w, cycles))
