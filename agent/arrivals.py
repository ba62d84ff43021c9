"""Burst arrival statistics of aperiodic (inference) traffic.

Inference has no sync period: requests arrive at random, and each one puts a short train of
AlltoAll (MoE) or Send/Recv (pipeline) traffic on the link. It is judged by how often bursts
come (λ), how big and how long they are (P50/P90/P99, since the tail sets the latency budget)
and how irregular their arrivals are, not by T, B and D (DOMAIN.md, inference).

Bursts are the on-runs of the estimator's own two-level segmentation
(:func:`agent.bursts.burst_stats`), so "a burst" means the same thing here as in B and D, at the
resolution of the grid: sub-bursts closer together than about one sample (the AlltoAlls of one
request, at 100 Hz polling) merge into one.

The arrival-pattern verdict uses the coefficient of variation of the *idle gaps* between bursts,
not of the start-to-start times. For Poisson requests served one at a time, the time from the
end of a burst to the next arrival is exponential whatever the service time (memorylessness),
so its CV is 1; start-to-start times add the burst itself and read lower as the load grows
(0.85 at 10 % busy, 0.65 at 50 % busy in the simulator). Both are reported.

Thresholds (evidence: ``tests/unit/test_arrivals.py``, simulated over seeds and loads):

* ``periodic``: CV < 0.3. A training job's gaps vary by its step jitter only (CV ≈ 0.01–0.1).
* ``regular``: 0.3 ≤ CV < 0.7. More regular than random (closed-loop clients, batching).
* ``poisson``: 0.7 ≤ CV < 1.5. Memoryless arrivals; the sample CV of ~100 exponential gaps
  spreads about ±0.15 around 1, and merging of gaps shorter than a sample biases it slightly low.
* ``bursty``: CV ≥ 1.5. Arrivals clustered in episodes (MMPP / on-off sources); the simulator's
  on-off variant reads 2–4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.bursts import MIN_CORE_SAMPLES, BurstStats, burst_stats, on_runs

__all__ = [
    "ARRIVAL_PATTERNS",
    "BURSTY_CV",
    "MIN_INTERVALS",
    "PERIODIC_CV",
    "POISSON_CV",
    "ArrivalStats",
    "Percentiles",
    "arrival_stats",
    "arrival_verdict",
    "percentiles_json",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_EMPTY: FloatArray = np.empty(0)

#: CV of the idle gaps below which arrivals are called periodic.
PERIODIC_CV = 0.3
#: CV from which arrivals are as irregular as a Poisson process.
POISSON_CV = 0.7
#: CV from which arrivals are clustered (bursty).
BURSTY_CV = 1.5
#: Every verdict :func:`arrival_verdict` gives (the exporter's bounded label set).
ARRIVAL_PATTERNS = ("periodic", "regular", "poisson", "bursty")
#: Fewest gaps for a verdict: with fewer, the sample CV of a Poisson process spreads over
#: more than one class.
MIN_INTERVALS = 8


@dataclass(frozen=True)
class Percentiles:
    """P50, P90 and P99 of a sample."""

    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: FloatArray) -> Percentiles | None:
        """The three percentiles, or None for an empty sample."""
        if values.size == 0:
            return None
        p50, p90, p99 = (float(v) for v in np.percentile(values, [50.0, 90.0, 99.0]))
        return cls(p50, p90, p99)


def percentiles_json(p: Percentiles | None) -> dict[str, float | None]:
    """``{"p50", "p90", "p99"}``, each null when the sample was empty or unresolved."""
    return {"p50": p.p50 if p else None, "p90": p.p90 if p else None, "p99": p.p99 if p else None}


@dataclass(frozen=True)
class ArrivalStats:
    """Arrival statistics of the bursts in one window; ``None`` where the data cannot say.

    ``bursts`` counts every on-run (also those cut by the window's edges); the arrival rate
    counts the starts seen inside the window; sizes and durations come from complete bursts
    only. ``size_bytes`` is above the background level (what the collectives moved);
    ``busy_ratio`` is the time in bursts over the window.
    """

    window_s: float
    dt: float
    bursts: int
    arrival_rate_hz: float | None
    size_bytes: Percentiles | None
    duration_s: Percentiles | None
    inter_arrival_mean_s: float | None
    inter_arrival_cv: float | None
    gap_mean_s: float | None
    gap_cv: float | None
    verdict: str | None
    busy_ratio: float | None
    resolved: bool
    notes: tuple[str, ...] = ()
    #: Per complete burst (one that began and ended inside the window), in time order: start
    #: offset from the series' first sample, bytes above the background, and duration (NaN
    #: where durations are not resolved). The live agent tallies each burst once from these.
    burst_starts_s: FloatArray = field(default_factory=lambda: _EMPTY, compare=False, repr=False)
    burst_bytes: FloatArray = field(default_factory=lambda: _EMPTY, compare=False, repr=False)
    burst_seconds: FloatArray = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The ``"arrivals"`` object of ``analyze --json``."""
        return {
            "bursts": self.bursts,
            "window_s": self.window_s,
            "bin_s": self.dt,
            "arrival_rate_hz": self.arrival_rate_hz,
            "burst_bytes": percentiles_json(self.size_bytes),
            "burst_duration_s": percentiles_json(self.duration_s),
            "inter_arrival_mean_s": self.inter_arrival_mean_s,
            "inter_arrival_cv": self.inter_arrival_cv,
            "gap_mean_s": self.gap_mean_s,
            "gap_cv": self.gap_cv,
            "verdict": self.verdict,
            "busy_ratio": self.busy_ratio,
            "resolved": self.resolved,
            "notes": list(self.notes),
        }


def arrival_verdict(cv: float | None) -> str | None:
    """``periodic`` / ``regular`` / ``poisson`` / ``bursty`` from the idle-gap CV."""
    if cv is None or not math.isfinite(cv):
        return None
    if cv < PERIODIC_CV:
        return "periodic"
    if cv < POISSON_CV:
        return "regular"
    if cv < BURSTY_CV:
        return "poisson"
    return "bursty"


#: Highest start-to-start CV at which the arrival rate comes from the intervals, not the count.
_REGULAR_CV = 0.5


def _arrival_rate(
    count: int, window: float, inter: FloatArray, inter_cv: float | None
) -> float | None:
    """λ: bursts starting per second.

    The count over the window is the rate's maximum-likelihood estimate for random arrivals,
    but on a regular stream it is off by up to one arrival, whatever the phase: ±1/W, 11 % on
    a 9 s window of one burst a second (the live window right after a lock). A regular stream's
    rate comes from its mean start-to-start interval instead, exact up to the jitter.
    """
    if window <= 0:
        return None
    if inter.size >= MIN_INTERVALS // 2 and inter_cv is not None and inter_cv <= _REGULAR_CV:
        return float(1.0 / inter.mean())
    return float(count / window)


def _cv(x: FloatArray) -> float | None:
    if x.size < 2:
        return None
    mean = float(x.mean())
    return float(x.std(ddof=1) / mean) if mean > 0 else None


def _burst_sizes(
    x: FloatArray, starts: IntArray, ends: IntArray, stats: BurstStats, dt: float
) -> tuple[FloatArray, FloatArray]:
    """Bytes above the background and duration of each run, edges counted by their share.

    A counter sample that straddles a burst edge holds part of the burst: each run is widened
    by one sample on both sides (never into a neighbour's run), and every edge sample counts
    for the fraction of the on level it reached. Interior samples count as whole samples.
    Vectorised over the runs (a busy inference window holds thousands).
    """
    n = x.size
    height = stats.on_level - stats.off_level
    frac = np.clip((x - stats.off_level) / height, 0.0, 1.0) if height > 0 else np.zeros(n)
    cum = np.concatenate(([0.0], np.cumsum(x - stats.off_level)))
    if starts.size == 0:
        return np.empty(0), np.empty(0)
    prev_end = np.concatenate(([-2], ends[:-1]))  # -2: no neighbour before the first run
    next_start = np.concatenate((starts[1:], [n + 2]))
    lo = np.where((starts >= 1) & (prev_end < starts - 1), starts - 1, starts)
    hi = np.where((ends < n) & (next_start > ends), ends + 1, ends)
    sizes = (cum[hi] - cum[lo]) * dt
    last = ends - 1
    # The distinct samples among lo <= start <= last <= hi - 1, each counted by its share.
    edge = frac[lo] + np.where(starts != lo, frac[starts], 0.0)
    edge += np.where(last != starts, frac[last], 0.0)
    edge += np.where(hi - 1 != last, frac[hi - 1], 0.0)
    inner = np.maximum(0, (ends - 1) - (starts + 1))
    return sizes, (inner + edge) * dt


#: Coarsest rebinning tried when the native grid shows no bursts (×2, ×4, ... up to this).
MAX_REBIN = 16
#: Fewest samples a rebinned series must keep.
MIN_REBIN_SAMPLES = 64


def _rebin(x: FloatArray, factor: int) -> FloatArray:
    """Mean rate over ``factor`` consecutive slots (bytes are kept; a NaN slot spoils its bin)."""
    n = x.size // factor
    out: FloatArray = x[: n * factor].reshape(n, factor).mean(axis=1)
    return out


def arrival_stats(
    rate: FloatArray,
    dt: float,
    *,
    period_s: float | None = None,
    quiet: bool = False,
    stats: BurstStats | None = None,
) -> ArrivalStats:
    """λ, burst size/duration percentiles, inter-arrival CV and busy time of one series.

    A fine grid can resolve the sub-bursts inside one burst train (the AlltoAlls of one
    request, 1–3 ms apart, seen at 5 ms): the samples then alternate inside the train and the
    segmentation sees noise, not bursts. When the native grid shows none, the series is summed
    into ×2, ×4, ... ×``MAX_REBIN`` coarser bins, and the finest that shows bursts is used (and
    named in the notes). Arguments as for :func:`_at_resolution`.
    """
    x = np.asarray(rate, dtype=np.float64)
    first = _at_resolution(x, dt, period_s=period_s, quiet=quiet, stats=stats)
    if first.bursts or quiet:
        return first
    factor = 2
    while factor <= MAX_REBIN and x.size // factor >= MIN_REBIN_SAMPLES:
        coarse = _at_resolution(_rebin(x, factor), dt * factor, period_s=period_s, quiet=False)
        if coarse.bursts:
            note = (
                f"bursts found on {dt * factor:.3g} s bins: the {dt:.3g} s grid resolves the "
                "sub-bursts inside each burst, which then read as noise"
            )
            return replace(coarse, window_s=first.window_s, notes=(note, *coarse.notes))
        factor *= 2
    return first


def _at_resolution(
    x: FloatArray,
    dt: float,
    *,
    period_s: float | None = None,
    quiet: bool = False,
    stats: BurstStats | None = None,
) -> ArrivalStats:
    """The statistics on one grid.

    Args:
        x: bytes/s per grid slot of one direction (the estimator's busier direction); NaN
            slots are never part of a burst.
        dt: grid step in seconds.
        period_s: T when the estimator found one (it lowers the bar for calling bursts).
        quiet: the series is below the idle level; without bursts the busy ratio is then 0
            rather than unknown (flat load is busy all the time, or not at all).
        stats: a segmentation already made of this very series, to reuse.
    """
    window = float(x.size * dt)
    bs = stats if stats is not None else burst_stats(x, dt, period_s)
    notes: list[str] = []
    if not bs.has_bursts or bs.on_mask is None:
        empty = ArrivalStats(
            window_s=window,
            dt=dt,
            bursts=0,
            arrival_rate_hz=0.0 if window > 0 and quiet else None,
            size_bytes=None,
            duration_s=None,
            inter_arrival_mean_s=None,
            inter_arrival_cv=None,
            gap_mean_s=None,
            gap_cv=None,
            verdict=None,
            busy_ratio=0.0 if quiet else None,
            resolved=False,
            notes=()
            if quiet
            else (
                f"no bursts stand out of the background on {dt:.3g} s bins: flat load, or "
                "bursts too short and too close together for this poll rate",
            ),
        )
        return empty
    starts, ends = on_runs(bs.on_mask)
    finite = np.isfinite(x)
    filled = np.where(finite, x, bs.off_level)
    sizes, durations = _burst_sizes(filled, starts, ends, bs, dt)
    complete = (starts > 0) & (ends < x.size)
    arrivals = starts[starts > 0]
    begin = (starts.astype(np.float64) + 0.5) * dt
    inter = np.diff(begin[starts > 0]) if arrivals.size >= 2 else np.empty(0)
    # Idle gaps: off-runs between two bursts (the leading and trailing ones are cut).
    gaps = (starts[1:] - ends[:-1]).astype(np.float64) * dt
    run_samples = (ends - starts)[complete]
    # The estimator calls B resolved with MIN_CORE_SAMPLES on-samples clear of the edges;
    # a duration needs that per burst: the core plus one straddling sample at each end.
    min_run = MIN_CORE_SAMPLES + 2
    resolved = bool(bs.resolved and run_samples.size and np.median(run_samples) >= min_run)
    if not resolved:
        notes.append(
            f"bursts last fewer than {min_run} samples of {dt:.3g} s: their durations cannot be "
            "resolved at this rate (counts, sizes and gaps still hold); poll faster"
        )
    if gaps.size < MIN_INTERVALS:
        notes.append(f"fewer than {MIN_INTERVALS} gaps between bursts: no arrival-pattern verdict")
    gap_cv = _cv(gaps) if gaps.size >= MIN_INTERVALS else None
    inter_cv = _cv(inter)
    return ArrivalStats(
        window_s=window,
        dt=dt,
        bursts=int(starts.size),
        arrival_rate_hz=_arrival_rate(arrivals.size, window, inter, inter_cv),
        size_bytes=Percentiles.of(sizes[complete]),
        duration_s=Percentiles.of(durations[complete]) if resolved else None,
        inter_arrival_mean_s=float(inter.mean()) if inter.size else None,
        inter_arrival_cv=inter_cv,
        gap_mean_s=float(gaps.mean()) if gaps.size else None,
        gap_cv=gap_cv,
        # With a sync period found the traffic is periodic whatever its gaps: several bursts a
        # step (DDP's gradient buckets) make them alternate, short and long, and read as
        # "poisson" on a training job.
        verdict="periodic"
        if period_s is not None and gap_cv is not None
        else arrival_verdict(gap_cv),
        busy_ratio=float(durations.sum() / window) if window > 0 else None,
        resolved=resolved,
        notes=tuple(notes),
        burst_starts_s=begin[complete] - 0.5 * dt,
        burst_bytes=sizes[complete],
        burst_seconds=durations[complete] if resolved else np.full(int(complete.sum()), np.nan),
    )
