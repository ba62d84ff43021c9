"""Two-level (on/off) statistics of a bursty rate series.

Training traffic is a square wave: silence while the GPUs compute, a burst at the sync point.
Both the period refinement (edge timing) and the burst statistics (B, D) start from the same
question — where is "off", where is "on" — so it is answered once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.quantiles import median, percentiles, probe_indices

__all__ = [
    "OnOffLevels",
    "boxcar",
    "erode",
    "level_noise",
    "lowest_tier",
    "robust_noise",
    "separation",
    "two_means",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class OnOffLevels:
    """The two levels of a bursty series and its sample-to-sample noise."""

    off: float
    on: float
    noise: float

    @property
    def contrast(self) -> float:
        """``on - off``: the burst height above the background."""
        return self.on - self.off


#: Upper percentiles the on level is started from; the lower one always starts at the 1st.
_START_PERCENTILES = (99.9, 99.0, 95.0, 80.0)
#: The other starts are tried only when the first one's on cluster holds less than this share
#: of the samples (outliers, or bursts that rare: both are settled by the comparison) ...
_SMALL_UPPER = 0.05
#: ... or when its off cluster holds two tiers (:func:`_two_tiers`): bursts lower than the
#: rest fell in with the background (steps whose collective ran at half rate now and then, as
#: flows that collide on one path do).
_LOWER_TIER = 0.1
#: Quartiles of the off cluster this share of the contrast apart, one each side of its mean,
#: are two tiers whatever their shares.
_TIER_SPREAD = 0.5
#: That median is taken over a spread probe of at most this many samples (the cost of a full
#: one was half that of the whole 2-means on 64 k samples).
_TIER_SAMPLES = 4096


#: Windows at least this long are first clustered on a spread probe of 2048 of their samples.
_WARM_FROM = 16384


def _lloyd(x: FloatArray, lo: float, hi: float, iterations: int) -> tuple[float, float]:
    """1-D 2-means iterations from (lo, hi) until the levels stop moving.

    A long window starts from where the same iterations on a spread probe of it stopped: each
    iteration reads the whole window, and a noisy one takes 20 of them to settle (64 k samples:
    about 3 ms), against two or three from that start.
    """
    if x.size >= _WARM_FROM:
        lo, hi = _iterate(x[probe_indices(x.size)], lo, hi, iterations)
    return _iterate(x, lo, hi, iterations)


def _iterate(x: FloatArray, lo: float, hi: float, iterations: int) -> tuple[float, float]:
    """Lloyd's iterations proper: threshold midway, each level the mean of its side.

    Each side's sum is a dot product with the side's 0/1 weights: gathering a side's samples
    (``x[upper]``) branches on every sample and cost six times as much on a noisy window.
    """
    n = x.size
    weights = np.empty(n)
    for _ in range(iterations):
        threshold = 0.5 * (lo + hi)
        upper = x >= threshold
        n_up = int(np.count_nonzero(upper))
        if n_up in (0, n):
            break
        np.copyto(weights, upper)
        new_hi = float(np.einsum("i,i->", x, weights)) / n_up
        np.subtract(1.0, weights, out=weights)
        new_lo = float(np.einsum("i,i->", x, weights)) / (n - n_up)
        if (
            abs(new_hi - hi) <= 1e-9 * abs(hi) + 1e-12
            and abs(new_lo - lo) <= 1e-9 * abs(lo) + 1e-12
        ):
            lo, hi = new_lo, new_hi
            break
        lo, hi = new_lo, new_hi
    return lo, hi


def _two_tiers(lower: FloatArray, lo: float, contrast: float) -> bool:
    """Whether an off cluster (mean ``lo``) holds a tier of bursts beside its background.

    A tier that the background outnumbers pulls the mean far above the median; one about as
    large leaves mean and median together between the two, with its quartiles on the tiers.
    A background alone, noisy or not, keeps its mean at its median, and needs noise of 0.37
    of the contrast to spread its quartiles that far.
    """
    if abs(lo - median(lower)) > _LOWER_TIER * contrast:
        return True
    q1, q3 = percentiles(lower, [25.0, 75.0])
    return bool(q1 < lo < q3 and q3 - q1 > _TIER_SPREAD * contrast)


def two_means(x: FloatArray, *, iterations: int = 30) -> tuple[float, float]:
    """1-D 2-means (Lloyd) for the off and on levels of ``x`` (finite values only).

    Lloyd finds a local optimum only. It starts from the 1st percentile and the 99.9th (a
    median or 5/95 % start collapses both levels into the background when bursts fill less than
    5 % of the time). That start can lock onto a handful of outliers (capture bins that caught a
    few extra frames, at 2.5x the burst rate) and leave the bursts in the "off" cluster, mixed
    with the background; so when its on cluster is that small, Lloyd is also started from the
    99th, 95th and 80th percentiles, and the result with the least absolute deviation from its
    two levels wins (absolute, so that the outliers weigh little in the choice). The same
    happens when the first start's off cluster holds two tiers (:func:`_two_tiers`): bursts of two
    heights (a collective at half rate on some steps, as colliding flows run it) put the lower
    ones in with the background, which then read 4.7 GB/s under 25 GB/s bursts: T 15 % short
    (the full-rate steps only) and D 0.13 for 0.45.
    """
    if x.size == 0:
        return 0.0, 0.0
    # The other starts only when the first one's on cluster is small, or its off cluster holds
    # a tier of bursts (most windows stop there).
    first = percentiles(x, [1.0, _START_PERCENTILES[0]])
    lo0 = float(first[0])
    best: tuple[float, float] | None = None
    best_cost = math.inf
    seen: set[tuple[float, float]] = set()
    for k in range(len(_START_PERCENTILES)):
        if k == 1:
            first = np.concatenate((first, percentiles(x, _START_PERCENTILES[1:])))
        hi0 = float(first[k + 1])
        if hi0 <= lo0:
            continue
        lo, hi = _lloyd(x, lo0, hi0, iterations)
        threshold = 0.5 * (lo + hi)
        upper = x >= threshold
        if k == 0 and np.count_nonzero(upper) >= _SMALL_UPPER * x.size:
            some = x[probe_indices(x.size, _TIER_SAMPLES)]  # (a stride may see one phase)
            lower = some[some < threshold]
            if not lower.size or not _two_tiers(lower, lo, hi - lo):
                return lo, hi  # a sizeable on cluster over a plain background: the usual case
        if (lo, hi) in seen:
            continue
        seen.add((lo, hi))
        cost = float(np.abs(x[upper] - hi).sum() + np.abs(x[~upper] - lo).sum())
        if cost < best_cost:
            best, best_cost = (lo, hi), cost
    if best is None:  # (nearly) constant: no two levels
        return lo0, float(first[1])
    return best


#: A tier of bursts must stand this share of the two levels' contrast above the background ...
_TIER_MIN = 0.25
#: ... and apart from the cluster beside it by this many of their σ (:func:`separation`; a
#: unimodal spread split in two scores about 2.7-3.5).
_TIER_SEPARATION = 4.0


def lowest_tier(x: FloatArray, lo: float, hi: float) -> tuple[float, float] | None:
    """(background, lowest tier of bursts) where 2-means levels ``lo``, ``hi`` hide a third.

    Bursts of two heights (a collective at full rate on some steps and at 0.4 of it on
    others, as colliding flows make it) are split by 2-means where their costs say: the lower
    ones in with the background, or both in the on cluster, whose level then lies between
    them. Either way the edges of the lower bursts are not found, and a third of a job's
    steps went missing from its timing. A tier is a second cluster on either side, well
    separated from its neighbour and ``_TIER_MIN`` of the contrast clear of the background;
    None where there is none.
    """
    contrast = hi - lo
    if contrast <= 0 or x.size < 32:
        return None
    threshold = 0.5 * (lo + hi)
    lower, upper = x[x < threshold], x[x >= threshold]
    for side in (lower, upper):
        if side.size < 16:
            continue
        a, b = two_means(side)
        if b - a < _TIER_MIN * contrast or separation(side, a, b) < _TIER_SEPARATION:
            continue
        background = a if side is lower else lo
        tier = b if side is lower else a
        if tier - background >= _TIER_MIN * contrast:
            return background, tier
    return None


def robust_noise(x: FloatArray) -> float:
    """Per-sample white-noise σ from the median absolute first difference.

    Square-wave edges are rare, so they barely move the median; the signal itself cancels in
    the difference. 1.4826 turns a MAD into a Gaussian σ; √2 undoes the differencing.
    """
    if x.size < 3:
        return 0.0
    return float(1.4826 * median(np.abs(np.diff(x))) / np.sqrt(2.0))


def level_noise(x: FloatArray, lo: float, hi: float) -> float:
    """Noise σ around the two levels, from consecutive pairs that sit on the same plateau.

    Unlike :func:`robust_noise`, edges do not inflate it even when they are frequent (a layer
    train has an edge every few samples): only pairs whose both samples lie in the outer
    quarter of the range on one side count. The larger of the two plateaus' σ is returned.
    """
    if x.size < 3 or hi <= lo:
        return robust_noise(x)
    quarter = 0.25 * (hi - lo)
    low, high = x <= lo + quarter, x >= hi - quarter
    steps = np.abs(np.diff(x))  # |a - b| is |b - a| exactly
    sigmas = []
    for side in (low, high):
        both = side[:-1] & side[1:]
        if int(np.count_nonzero(both)) >= 10:
            sigmas.append(float(1.4826 * median(steps[both]) / np.sqrt(2.0)))
    return max(sigmas) if sigmas else robust_noise(x)


def separation(x: FloatArray, lo: float, hi: float) -> float:
    """How cleanly the two levels stand apart: contrast over the pooled within-level σ.

    Each level's σ is a MAD of the samples on its side of the midpoint, so edge samples and
    spikes barely count. A unimodal distribution split in two scores about 2.7 (Gaussian) to
    3.5 (exponential) and up to ~5.5 for heavy-tailed lognormal traffic; a square wave scores
    its contrast-to-noise ratio.
    """
    if x.size < 8 or hi <= lo:
        return 0.0
    mid = 0.5 * (lo + hi)
    sigmas = []
    for side in (x[x < mid], x[x >= mid]):
        if side.size >= 3:
            sigmas.append(1.4826 * median(np.abs(side - median(side))))
    if not sigmas:
        return 0.0
    pooled = float(np.sqrt(np.mean(np.square(sigmas))))
    return (hi - lo) / pooled if pooled > 0 else float("inf")


def boxcar(x: FloatArray, width: int) -> FloatArray:
    """Centred moving average of odd ``width`` with edge samples averaged over what exists."""
    if width <= 1:
        return x
    width |= 1
    half = width // 2
    csum = np.concatenate(([0.0], np.cumsum(x)))
    idx = np.arange(x.size)
    hi = np.minimum(idx + half + 1, x.size)
    lo = np.maximum(idx - half, 0)
    out: FloatArray = (csum[hi] - csum[lo]) / (hi - lo)
    return out


def erode(mask: BoolArray, radius: int) -> BoolArray:
    """Keep a True sample only if every sample within ``radius`` is True as well.

    Samples whose window runs past either end cannot be certified as interior: they are False.
    """
    n = mask.size
    if radius <= 0 or n == 0:
        return mask.copy()
    out = np.zeros(n, dtype=bool)
    if n <= 2 * radius:
        return out
    inner = slice(radius, n - radius)
    if radius <= 8:
        # Shifted ANDs over contiguous slices: no index arrays, no cumulative sum.
        core = mask[inner].copy()
        for shift in range(-radius, radius + 1):
            if shift:
                core &= mask[radius + shift : n - radius + shift]
        out[inner] = core
        return out
    falses = np.concatenate(([0], np.cumsum(~mask, dtype=np.int64)))
    out[inner] = (falses[2 * radius + 1 :] == falses[: n - 2 * radius]) & mask[inner]
    return out
