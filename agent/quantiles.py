"""``np.median`` and ``np.percentile`` (linear method) for finite 1-D arrays, bit for bit, faster.

The estimators take medians and percentiles of whole windows every hop (64 k samples on a long
window). numpy asks ``partition`` for several order statistics at once (both middle values of
a median, both neighbours of every percentile, plus the last element for its NaN check), and
numpy 2's multi-``kth`` partition costs as much as a full sort: 0.9 ms for a 64 k median on
this machine against 0.15 ms for one single-``kth`` partition. Here each order statistic costs
one single-``kth`` partition of a shrinking slice, and the neighbour above a partitioned value
is the minimum of the part to its right.

On long arrays (a 64 k window) even one partition is the cost: there a sorted probe of 2048
samples brackets each wanted rank, one pass counts the values under the bracket and keeps those
inside it, and only those few thousand are partitioned (Floyd and Rivest's selection). The
result is still exact; a bracket that misses its rank (about one in a few thousand) falls back
to the full partition.

Inputs must be finite (callers drop NaN first, as they already do).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

__all__ = ["median", "percentiles", "probe_indices"]

FloatArray = npt.NDArray[np.float64]


#: Samples in the probe that brackets the wanted ranks of a long array.
_PROBE = 2048
#: Arrays at least this long are bracketed first (below it one partition costs about as much).
_BRACKET_FROM = 8192
#: Half-width of a bracket: standard errors of the probe's quantile, and probe samples more.
_BRACKET_SIGMAS = 3.5
_BRACKET_SLACK = 4.0


@functools.lru_cache(maxsize=32)
def probe_indices(n: int, count: int = _PROBE) -> npt.NDArray[np.int64]:
    """``count`` distinct indices spread over ``range(n)``, the same every call (or all of them).

    Spread like a random sample: a Weyl sequence (steps of the golden ratio of ``n``), not a
    stride; a periodic series sampled every k-th value sees one phase of a period that divides
    k, and its quantiles then miss the bracket every time.
    """
    if count >= n:
        idx = np.arange(n, dtype=np.int64)
    else:
        step = round(n * 0.6180339887498949) | 1
        while math.gcd(step, n) != 1:
            step += 2
        idx = (np.arange(count, dtype=np.int64) * step) % n
    idx.flags.writeable = False
    return idx


def _bracketed(x: FloatArray, ranks: list[int]) -> dict[int, float] | None:
    """:func:`_order_stats` of a long array via brackets from a probe; None if one missed."""
    n = x.size
    out: dict[int, float] = {}
    if ranks[0] == 0:
        out[0] = float(x.min())
    if ranks[-1] == n - 1:
        out[n - 1] = float(x.max())
    probe = np.sort(x[probe_indices(n)])
    m = probe.size
    groups: list[tuple[int, int, list[int]]] = []  # probe ranks bounding some wanted ranks
    for r in ranks:
        if r in out:
            continue
        p = (r + 0.5) / n
        half = _BRACKET_SIGMAS * math.sqrt(m * p * (1.0 - p)) + _BRACKET_SLACK
        lo_i, hi_i = math.floor(p * m - half), math.ceil(p * m + half)
        if groups and lo_i <= groups[-1][1]:
            g_lo, g_hi, want = groups[-1]
            groups[-1] = (g_lo, max(g_hi, hi_i), [*want, r])
        else:
            groups.append((lo_i, hi_i, [r]))
    for lo_i, hi_i, want in groups:
        lo = float(probe[lo_i]) if lo_i >= 0 else -math.inf  # (inputs are finite)
        hi = float(probe[hi_i]) if hi_i < m else math.inf
        # Ranks [0, below) lie under the bracket, [below, first_inner) on its low end,
        # [first_inner, last_inner) strictly inside, [last_inner, upper) on its high end.
        # Ties (an idle link's zeros) sit on the ends and need no partition.
        under, over = x < lo, x > hi
        below = int(np.count_nonzero(under))
        upper = n - int(np.count_nonzero(over))
        if not below <= want[0] <= want[-1] < upper:
            return None
        between = x[~(under | over)]  # [lo, hi]: a few thousand values
        first_inner = below + int(np.count_nonzero(between == lo))
        last_inner = upper if hi == lo else upper - int(np.count_nonzero(between == hi))
        inner = [r for r in want if first_inner <= r < last_inner]
        for r in want:
            if r < first_inner:
                out[r] = lo
            elif r >= last_inner:
                out[r] = hi
        if inner:
            strict = between[(between > lo) & (between < hi)]
            got = _partitioned(strict, [r - first_inner for r in inner])
            for r in inner:
                out[r] = got[r - first_inner]
    return out


def _order_stats(x: FloatArray, ranks: list[int]) -> dict[int, float]:
    """Values of the given 0-based ranks of ``x`` in ascending order (ranks sorted, unique)."""
    if x.size >= _BRACKET_FROM:
        got = _bracketed(x, ranks)
        if got is not None:
            return got
    return _partitioned(x, ranks)


def _partitioned(x: FloatArray, ranks: list[int]) -> dict[int, float]:
    """:func:`_order_stats` by single-``kth`` partitions of shrinking slices."""
    out: dict[int, float] = {}
    # (slice, its offset in sorted order, the ranks that fall inside it)
    stack: list[tuple[FloatArray, int, list[int]]] = [(x, 0, ranks)]
    while stack:
        arr, offset, want = stack.pop()
        mid = want[len(want) // 2]
        k = mid - offset
        part = np.partition(arr, k)
        out[mid] = float(part[k])
        lower = [r for r in want if r < mid]
        upper = [r for r in want if r > mid]
        if lower:
            stack.append((part[:k], offset, lower))
        if upper:
            if upper[0] == mid + 1:  # the next value up is the smallest of the right part
                out[mid + 1] = float(part[k + 1 :].min())
                upper = upper[1:]
            if upper:
                stack.append((part[k + 1 :], mid + 1, upper))
    return out


def median(x: FloatArray) -> float:
    """``float(np.median(x))`` for a non-empty finite 1-D array."""
    n = x.size
    k = n // 2
    if n % 2:
        return _order_stats(x, [k])[k]
    stats = _order_stats(x, [k - 1, k])
    return (stats[k - 1] + stats[k]) / 2.0


def percentiles(x: FloatArray, q: npt.ArrayLike) -> FloatArray:
    """``np.percentile(x, q)`` (method "linear") for a non-empty finite 1-D array."""
    quantiles = np.true_divide(np.asarray(q, dtype=np.float64), 100.0)
    n = x.size
    # numpy's virtual index for the linear method, then its two neighbours.
    virtual = (n - 1) * quantiles
    previous = np.clip(np.floor(virtual), 0, n - 1).astype(np.int64)
    following = np.clip(previous + 1, 0, n - 1)
    gamma = virtual - np.floor(virtual)
    stats = _order_stats(x, sorted(set(previous.tolist()) | set(following.tolist())))
    a = np.array([stats[i] for i in previous.tolist()])
    b = np.array([stats[i] for i in following.tolist()])
    diff = b - a
    out: FloatArray = np.where(gamma >= 0.5, b - diff * (1.0 - gamma), a + diff * gamma)
    return out
