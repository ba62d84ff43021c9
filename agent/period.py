"""The sync period T of a bursty rate series, or an honest "no period".

Method (research/period_estimation.md §3), in short:

* a constant-Q pyramid (CIC-3 decimation by 4 per level) so one input stream covers periods
  from a few samples to many minutes with a few thousand samples per level;
* per level, periodogram peaks nominate candidate lags, which are validated and climbed on
  the NSDF (McLeod's normalised autocorrelation); sub-multiples of every candidate are added;
* the fundamental is chosen YIN-style: the smallest lag whose multiples repeat as well as the
  best one — this removes both harmonic (T/2) and sub-harmonic (2T) errors;
* significance: the NSDF height at T over its block-jackknife standard error (deflated by a
  Student-t factor when blocks are few) or over a Bartlett null from the periodogram floor;
* across levels, a coarser period at least 3× the finer one, at which the finer one is no
  longer visible, is the iteration period and the finer one its inner period (gradient
  accumulation, ZeRO-3 layer trains);
* refinement by edge timing (Schmitt trigger, sub-sample 50 % crossings) where there is about
  one main burst per period; the spread of the edge intervals is also the aperiodicity test.

Everything here is a pure function of numpy arrays: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from agent.edge_fit import edge_noise_ratio, realised_period
from agent.levels import boxcar, lowest_tier, robust_noise, two_means
from agent.quantiles import median
from agent.trains import silences_after, train_period, train_starts, train_verdict

__all__ = [
    "DetectorSettings",
    "EdgeTiming",
    "LevelDetection",
    "PeriodResult",
    "PyramidLevel",
    "build_pyramid",
    "comes_in_trains",
    "detect_level",
    "edge_timing",
    "estimate_period",
    "filled",
    "nsdf",
    "pulse_timing",
    "whole_multiple",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

#: One-sided 0.9995 quantile of Student's t by degrees of freedom (1..30); beyond, the normal.
_T_9995 = (
    636.62, 31.599, 12.924, 8.610, 6.869, 5.959, 5.408, 5.041, 4.781, 4.587,
    4.437, 4.318, 4.221, 4.140, 4.073, 4.015, 3.965, 3.922, 3.883, 3.850,
    3.819, 3.792, 3.768, 3.745, 3.725, 3.707, 3.690, 3.674, 3.659, 3.646,
)  # fmt: skip
_Z_9995 = 3.2905


def t_quantile_9995(dof: int) -> float:
    """Student-t 0.9995 quantile (table up to 30 degrees of freedom, normal beyond)."""
    if dof < 1:
        return math.inf
    if dof <= len(_T_9995):
        return _T_9995[dof - 1]
    return _Z_9995 + (_T_9995[-1] - _Z_9995) * 30.0 / dof


@dataclass(frozen=True)
class DetectorSettings:
    """Thresholds of the detector; calibrated on synthetic traffic (see bench/accuracy.py)."""

    z_min: float = 5.5
    comb_min: float = 0.2
    min_cycles: float = 2.3
    max_interval_cv: float = 0.25
    min_regular_fraction: float = 0.7
    level_samples: int = 8192
    decimation: int = 4
    #: Fewest samples of a decimated level, and before a lock. A step whose bursts come as a
    #: train (DDP's bucketed all-reduces through the backward pass) repeats clearly only once
    #: decimation has merged each train into one bump; 64 samples of that level took 10 s of
    #: 100 Hz polls, and a real job of 1.4 s steps was locked after 9-12 steps (13-17 s).
    #: With 32, after 3-7 steps. A locked window keeps 64: there a short coarse level, across
    #: a change of step, read a period between the old and the new one and delayed the re-lock.
    #: A short level's period counts only where no full level has one (:func:`_short_levels_last`).
    min_level_samples: int = 64
    cold_min_level_samples: int = 32
    #: Shortest lag looked for at the decimated levels. At 5, a period of just under 20 input
    #: samples fell between level 0 (where narrow jittered bursts smear its NSDF comb) and
    #: level 1 (where the decimation has merged them into a clear one): bench S3, 13 % missed.
    min_lag: int = 4
    min_lag_level0: int = 4
    max_inner_ratio: float = 512.0
    #: A short window (few cycles) cannot make the jackknife or Bartlett z large, however clean
    #: the repetition: there a comb this high (aperiodic traffic stayed below 0.5 on the
    #: benchmark) with a modest z is enough.
    strong_comb: float = 0.7
    strong_z_min: float = 2.0
    #: Three cycles are enough to lock at cold start (2.75: a window of three periods holds a
    #: little under three at the coarser levels); aperiodic traffic reached none of the
    #: benchmark's 8000 windows with it.
    strong_min_cycles: float = 2.75
    #: Under this many cycles, a period that is a multiple of another detected one is dropped:
    #: any multiple of T repeats too, and over three or four cycles it can look like a period.
    outer_min_cycles: float = 3.5
    #: Below this many cycles a period must have the strong comb whatever its z: with so few
    #: repetitions in the window, noise makes large-lag peaks look significant.
    few_cycles: float = 4.2
    #: Jitter smears the NSDF peaks at k·T and holds z down; a clearly repeating comb lowers
    #: the z needed (on the benchmark, aperiodic windows with z >= 4 had combs <= 0.2).
    moderate_comb: float = 0.4
    moderate_z_min: float = 4.0
    #: A candidate below every bar above is still taken when its burst edges are regular:
    #: z and spread of the single-step intervals it must meet (bench S8, 10 % step jitter).
    rescue_z_min: float = 3.5
    rescue_max_cv: float = 0.15
    #: How far the burst edges' T may be from the locked period for the lock to hold on them
    #: alone (a larger change is left to the tracker's re-lock).
    hold_tolerance: float = 0.15
    #: The spread of all the burst intervals (irregular ones included) under which they hold
    #: the lock: 0.11-0.19 in a real DDP job with 12.5 % step spread, 0.14 and above in gamma
    #: traffic of CV 0.5 (whose bursts merge where they come close, which hides its spread).
    hold_max_cv: float = 0.2
    #: Edges whose single-period intervals spread more than this are compared with the next
    #: coarser level's, which wins when it spreads less than half as much: stalls of a few
    #: fine samples inside bursts misplace the edges of the pieces they cut (a real veth
    #: capture: 5 % spread and T 0.3 % off at 4 ms, 0.2 % spread and T exact at 16 ms).
    fragment_cv: float = 0.02
    #: A period too short for its burst edges to be timed (under 8 samples) must have a burst
    #: in at least this share of its cycles: the calls of one NCCL sync point 4 ms apart, every
    #: second, made a "4 ms period" of 250 cycles in a window that held only two such trains.
    min_occupancy: float = 0.5
    #: Steady steps (:func:`_steady`): a training job whose step time spreads 15-25 % (variable
    #: sequence lengths, data-loader stalls) smears the NSDF until no level detects it, yet
    #: each step still moves the same bytes. Its main bursts then count as a period when their
    #: sizes spread less than this, over at least ``steady_min_steps`` intervals whose raw
    #: spread stays under ``max_interval_cv``. Random traffic has neither: its burst sizes
    #: spread 0.5 and more (the benchmark's A1-A3, real inference requests).
    steady_mass_cv: float = 0.2
    steady_min_steps: int = 8
    #: ... and with no interval this many median ones long: a longer one is a missed burst
    #: (the regular edge rules count it), or the gap between two trains of equal bursts, which
    #: makes them an FSDP job's layers rather than its steps.
    steady_longest_step: float = 1.75
    #: While a period is locked, steady steps (equal bursts, one a step, none missing) hold it
    #: up to this raw spread: a real job of 20 % spread had windows of 16 steps spreading 21-
    #: 30 %, and lost the lock for 6 s twice a minute under the stricter spread of a first lock.
    hold_steady_cv: float = 0.35
    #: Steady steps whose bursts carry the same bytes within this spread are steps even under
    #: a clear comb: pieces of bursts (noise splitting them) differ in size, a job's steps do
    #: not. Steps of 2.0 and 2.7 s at random (a third of the steps' collective at half rate)
    #: kept a clear comb at the commonest step, and the edges' mean step was rejected as
    #: irregular against it: no period at all.
    equal_mass_cv: float = 0.05


@dataclass(frozen=True)
class LevelDetection:
    """What one pyramid level says about periodicity."""

    level: int
    dt: float
    lag: float
    nsdf: float
    comb: float
    z: float
    cycles: float
    valid: bool

    @property
    def period_s(self) -> float:
        """The detected period in seconds."""
        return self.lag * self.dt


@dataclass(frozen=True)
class EdgeTiming:
    """Period from burst edges, and how regular the bursts are."""

    period_s: float
    interval_cv: float
    regular_fraction: float
    bursts_per_period: float
    cycles: int
    rising_s: FloatArray = field(repr=False)
    #: Spread of every rise-to-rise interval as it is (none folded into whole periods).
    step_cv: float = math.inf
    #: Spread of the main bursts' sizes (bytes above the background).
    mass_cv: float = math.inf
    #: Mean rise-to-rise interval, each one step: under a wide step spread, rounding to whole
    #: periods counts a long step as two (a step 1.5 T long in 60 made T 1.7 % short).
    step_period_s: float = math.nan
    #: Longest rise-to-rise interval over the median one.
    longest_step: float = math.inf
    #: Falling edges of the main bursts that have ended (none from pulse timing).
    falling_s: FloatArray = field(default_factory=lambda: np.empty(0), repr=False)


@dataclass(frozen=True)
class PeriodResult:
    """The verdict: a period with its confidence, or ``period_s is None``."""

    period_s: float | None
    confidence: float
    inner_period_s: float | None = None
    cycles: float = 0.0
    z: float = 0.0
    comb: float = 0.0
    interval_cv: float | None = None
    method: str = "none"
    level: int = -1
    warnings: tuple[str, ...] = ()
    detections: tuple[LevelDetection, ...] = ()
    rising_edges_s: FloatArray | None = field(default=None, repr=False)
    #: No period, but a rhythm whose bursts come in trains (:mod:`agent.trains`): structure
    #: inside a step the window does not show yet, not aperiodic traffic.
    train_rhythm_s: float | None = None
    #: No period, but a candidate the autocorrelation found whose burst edges repeat too
    #: irregularly to time it: steps too uneven, or two jobs' steps on one link. Random
    #: arrivals (Poisson, gamma renewals of CV 0.2-0.5) never get this far.
    irregular_rhythm_s: float | None = None


# --------------------------------------------------------------------------------------------
# Pyramid


def _cic3_decimate(x: FloatArray, factor: int) -> FloatArray:
    """Three cascaded boxcars of length ``factor``, then keep every ``factor``-th sample.

    The boxcars put nulls exactly on the frequencies that fold onto DC, so the residue of fast
    structure does not masquerade as a slow period at the coarser level.
    """
    y = x
    kernel = np.full(factor, 1.0 / factor)
    for _ in range(3):
        y = np.convolve(y, kernel, mode="valid")
    return np.ascontiguousarray(y[::factor])


@dataclass(frozen=True)
class PyramidLevel:
    """One level of the pyramid: samples, their spacing, and where sample 0 sits in time."""

    samples: FloatArray
    dt: float
    start_s: float  # start of sample 0's slot, relative to the input's first slot


def build_pyramid(
    x: FloatArray, dt: float, *, factor: int = 4, min_samples: int = 64
) -> list[PyramidLevel]:
    """Levels from the input rate down by ``factor`` per level, each with its time offset."""
    levels = [PyramidLevel(x, dt, 0.0)]
    cur, cur_dt, centre = x, dt, 0.5 * dt
    while cur.size // factor >= min_samples:
        nxt = _cic3_decimate(cur, factor)
        if nxt.size < min_samples:
            break
        # Three boxcars of length f delay the first output's centre by 1.5 (f - 1) inputs.
        centre += 1.5 * (factor - 1) * cur_dt
        cur, cur_dt = nxt, cur_dt * factor
        levels.append(PyramidLevel(cur, cur_dt, centre - 0.5 * cur_dt))
    return levels


# --------------------------------------------------------------------------------------------
# NSDF and periodogram


def _fft_size(n: int) -> int:
    return 1 << (2 * n - 1).bit_length()


def nsdf(x: FloatArray) -> FloatArray:
    """McLeod's normalised square-difference function of a zero-mean series.

    ``n(τ) = 2 Σ x_i x_{i+τ} / Σ (x_i² + x_{i+τ}²)`` lies in [-1, 1] and, unlike the plain
    autocorrelation, does not taper with the lag, so peak heights compare across lags.
    """
    n = x.size
    nfft = _fft_size(n)
    spec = np.fft.rfft(x, nfft)
    acf = np.fft.irfft(spec.real**2 + spec.imag**2, nfft)[:n]
    sq = np.concatenate(([0.0], np.cumsum(x * x)))
    lags = np.arange(n)
    denom = sq[n - lags] + (sq[n] - sq[lags])
    out = np.zeros(n, dtype=np.float64)
    ok = denom > 1e-300
    out[ok] = 2.0 * acf[ok] / denom[ok]
    return out


def _local_maxima(y: FloatArray, lo: int, hi: int) -> npt.NDArray[np.int64]:
    """Indices in ``[lo, hi)`` that are ≥ their left and > their right neighbour."""
    lo = max(lo, 1)
    hi = min(hi, y.size - 1)
    if hi <= lo:
        return np.empty(0, dtype=np.int64)
    mid = y[lo:hi]
    peaks = (mid >= y[lo - 1 : hi - 1]) & (mid > y[lo + 1 : hi + 1])
    return np.flatnonzero(peaks).astype(np.int64) + lo


class _Peaks:
    """An NSDF as Python floats, with its local maxima, for scalar peak look-ups.

    The detector looks up a few hundred short windows per level; a numpy call costs several
    microseconds whatever its size, while ``max`` and ``bisect`` over a list stay in C: this
    is what makes the per-candidate work cheap.
    """

    __slots__ = ("maxima", "n", "r")

    def __init__(self, r: FloatArray) -> None:
        self.r: list[float] = r.tolist()
        self.n = r.size
        maxima: list[int] = []
        if r.size >= 3:
            mid = r[1:-1]
            maxima = (np.flatnonzero((mid >= r[:-2]) & (mid > r[2:])) + 1).tolist()
        self.maxima = maxima

    def _window(self, lag: float, tol: float) -> tuple[int, int]:
        width = max(tol, 1.0)
        return max(1, math.floor(lag - width)), min(self.n - 2, math.ceil(lag + width))

    def parabolic(self, i: int) -> tuple[float, float]:
        """Sub-sample position and height of the peak at integer ``i``."""
        y = self.r
        if i <= 0 or i >= self.n - 1:
            return float(i), y[i]
        a, b, c = y[i - 1], y[i], y[i + 1]
        den = a - 2.0 * b + c
        if den >= 0:
            return float(i), b
        off = 0.5 * (a - c) / den
        off = max(-0.5, min(0.5, off))
        return i + off, b - 0.25 * (a - c) * off

    def near(self, lag: float, tol: float) -> tuple[float, float]:
        """Highest value within ``lag ± tol`` (at least ±1 sample), parabolically refined."""
        lo, hi = self._window(lag, tol)
        if hi < lo:
            return lag, -1.0
        seg = self.r[lo : hi + 1]
        return self.parabolic(lo + seg.index(max(seg)))

    def at(self, lag: float, tol: float) -> tuple[float, float] | None:
        """The highest true peak (a local maximum) within ``lag ± tol``, refined, or None.

        Unlike :meth:`near`, a window that only holds a slope has no peak: its highest
        sample is the window's edge, and taking it for a peak invents a candidate next to a
        real one (a period of 10 samples read as 9.5).
        """
        lo, hi = self._window(lag, tol)
        first = bisect.bisect_left(self.maxima, lo)
        last = bisect.bisect_right(self.maxima, hi)
        if first >= last:
            return None
        y, peaks = self.r, self.maxima
        best = peaks[first]
        for i in peaks[first + 1 : last]:
            if y[i] > y[best]:
                best = i
        return self.parabolic(best)

    def comb(self, lag: float, max_lag: float, harmonics: int = 3) -> float:
        """Mean peak height at ``k·lag`` for k = 1.. (as far as ``max_lag`` allows)."""
        total, count = 0.0, 0
        for k in range(1, harmonics + 1):
            target = k * lag
            if target > max_lag:
                break
            total += self.near(target, 0.02 * target)[1]
            count += 1
        return total / count if count else -1.0


# --------------------------------------------------------------------------------------------
# Per-level detector


@dataclass
class _Level:
    """Precomputed per-level quantities shared by the candidate search and the tests."""

    x: FloatArray
    r: FloatArray
    power: FloatArray  # Hann periodogram, padded
    nfft: int
    peaks: _Peaks
    jackknife: dict[int, tuple[float, float, int]] = field(default_factory=dict)

    def jackknife_at(self, lag: int) -> tuple[float, float, int]:
        """:func:`_jackknife` of this level at ``lag``, computed once per lag."""
        got = self.jackknife.get(lag)
        if got is None:
            got = self.jackknife[lag] = _jackknife(self.x, lag)
        return got


@functools.lru_cache(maxsize=16)
def _hann(n: int) -> FloatArray:
    """``np.hanning(n)``, made once per length (the levels' windows recur every hop)."""
    win = np.hanning(n)
    win.flags.writeable = False
    return win


def _prepare(x: FloatArray) -> _Level | None:
    if bool(np.isfinite(x).all()):  # the pyramid's levels: filled, so one pass is enough
        mean = float(np.mean(x))
        x = x - mean
    else:
        x = np.where(np.isfinite(x), x, np.nan)
        mean = float(np.nanmean(x)) if np.isfinite(x).any() else 0.0
        x = np.nan_to_num(x - mean, nan=0.0)
    # A flat rate differs from its mean by rounding alone (1e-13 of it): that repeats too.
    floor = max(1e-300, (1e-9 * abs(mean)) ** 2)
    if float(np.einsum("i,i->", x, x)) <= floor * max(1, x.size):
        return None
    nfft = _fft_size(x.size)
    win = _hann(x.size)
    spec = np.fft.rfft(x * win, nfft)
    power = spec.real**2 + spec.imag**2
    r = nsdf(x)
    return _Level(x=x, r=r, power=power, nfft=nfft, peaks=_Peaks(r))


def _periodogram_hints(lv: _Level, lag_lo: int, lag_hi: int, count: int = 8) -> list[float]:
    """Lags of the strongest periodogram peaks that stand ≥ 10× above the local floor."""
    p = lv.power
    k_lo = max(1, int(lv.nfft / max(lag_hi, 1)))
    k_hi = min(p.size - 1, math.ceil(lv.nfft / max(lag_lo, 1)) + 1)
    peaks = _local_maxima(p, k_lo, k_hi)
    if peaks.size == 0:
        return []
    # Local floor: median of blocks of 32 bins, interpolated (a cheap median filter).
    block = 32
    nb = max(1, p.size // block)
    # np.median's own result (the mean of the two middle bins) without its per-call overhead
    # (a sort of 32-bin rows beats numpy 2's two-kth partition of them).
    part = np.sort(p[: nb * block].reshape(nb, block), axis=1)
    med = part[:, block // 2 - 1 : block // 2 + 1].mean(axis=1)
    centres = (np.arange(nb) + 0.5) * block
    floor = np.interp(peaks.astype(np.float64), centres, med)
    strong = peaks[p[peaks] > 10.0 * np.maximum(floor, 1e-300)]
    if strong.size == 0:
        return []
    order = np.argsort(p[strong])[::-1][:count]
    return [lv.nfft / float(k) for k in strong[order]]


def _jackknife(x: FloatArray, lag: int) -> tuple[float, float, int]:
    """NSDF at ``lag``, its block-jackknife standard error, and the number of blocks.

    Blocks of about one lag capture what the white-noise bound misses: jitter and the
    sparsity of bursts.
    """
    n = x.size
    m = n - lag
    if lag < 1 or m < 3:
        return 0.0, math.inf, 0
    a = x[:m] * x[lag:]
    b = x[:m] ** 2 + x[lag:] ** 2
    nb = int(min(32, max(3, m // max(lag, 1))))
    edges = np.linspace(0, m, nb + 1).astype(np.int64)
    ca = np.add.reduceat(a, edges[:-1])
    cb = np.add.reduceat(b, edges[:-1])
    sa, sb = float(ca.sum()), float(cb.sum())
    if sb <= 0:
        return 0.0, math.inf, nb
    r = 2.0 * sa / sb
    loo_den = sb - cb
    safe = np.where(loo_den > 0, loo_den, 1.0)
    loo = np.where(loo_den > 0, 2.0 * (sa - ca) / safe, r)
    var = (nb - 1) / nb * float(np.sum((loo - loo.mean()) ** 2))
    return r, math.sqrt(var) if var > 0 else 1e-12, nb


def _jackknife_z(jackknife: tuple[float, float, int]) -> float:
    """Jackknife z of an NSDF value, deflated by t/z when there are few blocks."""
    r, se, nb = jackknife
    if nb < 2 or not math.isfinite(se):
        return 0.0
    return r / se * _Z_9995 / t_quantile_9995(nb - 1)


def _bartlett_sigma(x: FloatArray, lag: float) -> float:
    """Null σ of an NSDF value from the periodogram floor, the candidate's harmonics masked."""
    n = x.size
    spec = np.fft.rfft(x)[1:]
    s = spec.real**2 + spec.imag**2
    if s.size < 4:
        return 1.0
    k = np.arange(1, s.size + 1, dtype=np.float64)
    f0 = n / lag  # bins per harmonic
    dist = np.abs(k / f0 - np.round(k / f0)) * f0
    keep = (dist > 2.0) | (k < 0.5 * f0)
    floor = s[keep]
    if floor.size < 4 or float(floor.sum()) <= 0:
        return 1.0
    sigma = math.sqrt(0.5 * float(np.sum(floor**2))) / float(floor.sum())
    return sigma * math.sqrt(n / max(n - lag, 1.0))


def detect_level(
    x: FloatArray,
    dt: float,
    *,
    level: int = 0,
    lag_lo: int = 8,
    lag_hi: int | None = None,
    settings: DetectorSettings | None = None,
    prepared: _Level | None = None,
) -> LevelDetection | None:
    """Detect the fundamental period of one pyramid level (lags in samples of ``dt``).

    ``prepared`` (from :func:`_prepare` on the same ``x``) saves recomputing its transforms.
    """
    cfg = settings or DetectorSettings()
    n = x.size
    hi_cap = int(n / cfg.min_cycles)
    lag_hi = hi_cap if lag_hi is None else min(lag_hi, hi_cap)
    if lag_hi <= lag_lo or n < 3 * lag_lo:
        return None
    lv = prepared if prepared is not None else _prepare(x)
    if lv is None:
        return None
    r = lv.r
    neg = np.flatnonzero(r[1:] < 0)
    first_zero = int(neg[0]) + 1 if neg.size else n
    # The main lobe also ends at its first trough near zero: under a slow drift of the rate
    # (steps slowing down over the window) the troughs between periods stay a little above
    # zero, and a search from the first negative lag skipped the fundamental itself (a real
    # FSDP job: trough 0.01 at lag 4, peak at 8.6, first negative at 12; 2T was reported).
    mid = r[1:-1]
    trough = np.flatnonzero((mid < 0.2) & (mid <= r[:-2]) & (mid <= r[2:]))
    first_trough = int(trough[0]) + 1 if trough.size else n
    # Candidates are searched from 2 samples up, not from ``lag_lo``: a level whose variance is
    # explained by a faster oscillation (a finer level's period, or its alias after
    # decimation) must not report a multiple of it as its own period.
    search_lo = max(2, min(first_zero, first_trough))
    if search_lo >= lag_hi:
        return None

    pk = lv.peaks
    found: list[tuple[float, float]] = []  # (lag, NSDF height) of true peaks
    for hint in _periodogram_hints(lv, lag_lo, lag_hi):
        if hint < search_lo * 0.9 or hint > lag_hi:
            continue
        k = lv.nfft / hint
        tol = max(1.0, hint - lv.nfft / (k + 1.0))
        peak = pk.at(hint, tol)
        if peak is not None:
            found.append(peak)
    peaks = _local_maxima(r, search_lo, lag_hi + 1)
    if peaks.size:
        top = peaks[np.argsort(r[peaks])[::-1][:8]]
        found.extend(pk.parabolic(i) for i in top.tolist())
    if not found:
        return None
    for c, _ in list(found):
        for d in range(2, 7):
            sub = c / d
            if sub >= search_lo:
                peak = pk.at(sub, 0.03 * sub)
                if peak is not None:
                    found.append(peak)
    # Near-equal candidates are one peak seen twice: keep the higher reading of it.
    uniq: list[float] = []
    best_height: list[float] = []
    for c, h in sorted(found):
        if not search_lo <= c <= lag_hi:
            continue
        if uniq and c - uniq[-1] <= max(1.0, 0.01 * c):
            if h > best_height[-1]:
                uniq[-1], best_height[-1] = c, h
            continue
        uniq.append(c)
        best_height.append(h)
    if not uniq:
        return None

    comb_max = 0.5 * n
    combs = {c: pk.comb(c, comb_max) for c in uniq}
    height = {c: pk.near(c, 0.5)[1] for c in uniq}
    short = [c for c in uniq if c <= 0.8 * lag_hi] or uniq
    best = max(short, key=lambda c: combs[c])

    # YIN-style fundamental: the smallest lag whose multiples up to ``best`` repeat as well.
    def se(lag: float) -> float:
        return min(1.0, lv.jackknife_at(round(lag))[1])

    for small in uniq:
        if small >= best:
            break
        m = best / small
        mult = round(m)
        if mult < 2 or abs(m - mult) > 0.05 * mult:
            continue
        if height[small] < 0.08 or height[small] < 3.0 * se(small):
            continue  # (the jackknife only when the cheap bar is met: 74 lags a window)
        repeats = [pk.near(k * small, 0.03 * k * small)[1] for k in range(1, mult)]
        tol = max(0.1, 2.0 * math.hypot(se(best), se(small)))
        if float(np.mean(repeats)) >= height[best] - tol:
            best = small
            break

    # Refine on the multiples: least-squares slope through the origin of peak lags at k·T.
    ks, lags = [], []
    for k in range(1, 17):
        target = k * best
        if target > comb_max:
            break
        peak = pk.at(target, 0.03 * target)
        if peak is None or peak[1] <= 0:
            break
        ks.append(k)
        lags.append(peak[0])
    lag = float(np.dot(ks, lags) / np.dot(ks, ks)) if ks else best

    comb = pk.comb(lag, comb_max)
    z_jk = _jackknife_z(lv.jackknife_at(round(lag)))
    z_spec = comb / max(_bartlett_sigma(lv.x, lag), 1e-12)
    z = max(z_jk, z_spec)
    cycles = n / lag
    strong = comb >= cfg.strong_comb and z >= cfg.strong_z_min and cycles >= cfg.strong_min_cycles
    moderate = comb >= cfg.moderate_comb and z >= cfg.moderate_z_min
    significant = strong or ((z >= cfg.z_min or moderate) and cycles >= cfg.few_cycles)
    valid = lag >= lag_lo and cycles >= cfg.min_cycles and comb >= cfg.comb_min and significant
    return LevelDetection(
        level=level,
        dt=dt,
        lag=lag,
        nsdf=pk.near(lag, 0.5)[1],
        comb=comb,
        z=z,
        cycles=cycles,
        valid=valid,
    )


def _visible(lv: _Level | None, lag: float, reference: float, tol: float = 0.1) -> bool:
    """Whether a finer period still shows at a coarser level (NSDF comb near the reference)."""
    if lv is None or lag < 2.0 or lag * 3 > lv.x.size:
        return False
    return lv.peaks.comb(lag, 0.5 * lv.x.size) >= reference - tol


def _beyond_inner(
    pyramid: list[PyramidLevel], prepared: list[_Level | None], det: LevelDetection, inner_s: float
) -> bool | None:
    """Whether ``det``'s period repeats better than a clean inner rhythm makes it repeat.

    Judged on the coarsest level finer than ``det``'s that resolves the inner period (4
    samples or more) and holds two of the outer periods, when the inner rhythm there is
    clear (an NSDF comb of 0.5 or more; a pipeline stage's 1 s step under 2 % jitter read
    0.79 there, and its 7 s alias, unjudged, left the log without a T). A real outer period
    then repeats its whole pattern, so its NSDF peak stands above those one and two inner periods
    before and after it; a rhythm that only repeats itself peaks alike at every multiple. An
    alias of the inner rhythm on a level too coarse to resolve it lands anywhere among those
    multiples: regular NCCL calls of 0.45 s at 0.35 s samples read 3.2 s (confirmed by the
    decimation by 3, whose own alias had a multiple there), of 2.7 s at 2.56 s, 49 s. None:
    no level to judge on, or an inner rhythm too weak to judge by (a real FSDP job's layer
    gathers under 8 % step jitter: comb 0.2-0.3; its step is a real outer period).
    """
    for level, lv in reversed(list(enumerate(prepared[: det.level]))):
        if lv is None:
            continue
        dt = pyramid[level].dt
        lag, step = det.period_s / dt, inner_s / dt
        if step < 4.0 or 2.0 * (lag + 2.0 * step) > lv.x.size:
            continue
        if lv.peaks.comb(step, 0.5 * lv.x.size) < 0.5:
            return None
        own = _peak_mass(lv, lag)
        others = [lag + k * step for k in (-2, -1, 1, 2) if lag + k * step >= step]
        return own > max(_peak_mass(lv, o) for o in others) + 0.01
    return None


def _lattice_divisor(
    valid: list[LevelDetection], pyramid: list[PyramidLevel], prepared: list[_Level | None]
) -> LevelDetection | None:
    """A coarser level's clean period that the finest valid one is a lattice multiple of.

    Taken when the finest level repeats at each of its multiples as well as at its own
    period. Narrow bursts on a step that is not a whole number of samples (NCCL calls binned at
    ~1 ms, bursts of one poll) put the pairs one step apart on two lags and those m steps
    apart on one lag when m steps are nearly whole: the NSDF peaks highest at that multiple,
    and the finest level read 1.8 s (4 T, comb 0.99) where every coarser level read 0.45 s
    (comb 0.97). By peak *mass* (five lags: two calls 3 ms apart spread a peak over them)
    the multiples are alike and the step is the period. A real outer period stands above its
    inner rhythm's multiples by mass too, and is kept.
    """
    finest = valid[0]
    lv = prepared[finest.level]
    if lv is None:
        return None
    dt = pyramid[finest.level].dt
    own = _peak_mass(lv, finest.period_s / dt, 2)
    for det in valid[1:]:
        ratio = finest.period_s / det.period_s
        m = round(ratio)
        if det.level <= finest.level or m < 2 or abs(ratio - m) > 0.02 * m or det.comb < 0.8:
            continue
        if min(_peak_mass(lv, k * det.period_s / dt, 2) for k in range(1, m)) >= own - 0.02:
            return det
        if _coarse_consensus(valid, finest, det):
            return det
    return None


#: Coarser levels that agree on a divisor of the finest level's period overrule it when each
#: sees this many times its cycles, and the clearest one this many times its z
#: (:func:`_coarse_consensus`).
CONSENSUS_CYCLES = 3.0
CONSENSUS_Z = 2.0


def _coarse_consensus(
    valid: list[LevelDetection], finest: LevelDetection, divisor: LevelDetection
) -> bool:
    """Whether two coarser levels or more read ``divisor`` more clearly than the finest does.

    The finest level holds the newest ``level_samples`` only, a few of the multiple's cycles,
    and its narrow spikes (NCCL calls binned at 5-9 ms, steps no whole number of bins) may
    line up best at the multiple whatever their peak mass says (FSDP's per-layer calls: 7 T
    at confidence 0.98 over 4 cycles, where three coarser levels read T over 120 cycles at
    5-60 times the z). A real outer period shows on the coarser levels too, which then read
    it, not its divisor.
    """
    agree = [
        d
        for d in valid
        if d.level > finest.level
        and abs(d.period_s / divisor.period_s - 1.0) <= 0.01
        and d.cycles >= CONSENSUS_CYCLES * finest.cycles
        and d.comb >= 0.9
    ]
    return len(agree) >= 2 and max(d.z for d in agree) >= CONSENSUS_Z * finest.z


def _peak_mass(lv: _Level, lag: float, half_width: int = 1) -> float:
    """Mean NSDF over the lags within ``half_width`` of the highest one near ``lag`` (± 3 %).

    Not the peak's height: bursts as narrow as a sample put a whole peak on one lag where
    their spacing is a whole number of samples and split it over two elsewhere, so the
    multiple of a rhythm nearest a whole lag (where an alias lands) peaked highest; the
    three lags hold the peak whichever way it splits. A step of two calls a sample apart
    spreads its peak over five.
    """
    centre = round(lv.peaks.near(lag, 0.03 * lag)[0])
    seg = lv.r[max(1, centre - half_width) : centre + half_width + 1]
    return float(seg.mean()) if seg.size else -1.0


#: A detection k times finer than the walk's outer period replaces it when its comb is this
#: much higher (see :func:`_clearer_divisor`).
DIVISOR_COMB_MARGIN = 0.1


def _clearer_divisor(
    valid: list[LevelDetection], current: LevelDetection, inner: LevelDetection
) -> LevelDetection:
    """The outer period, or a whole fraction of it that a coarser level shows far more clearly.

    The walk takes the first coarser level that repeats at 3 times the inner period or more:
    20 steps of four calls 20 ms apart every 1.5 s, binned at 1 ms, repeated at 4.5 s on the
    4 ms level (comb 0.85, the steps' jitter blurring the calls against one another) and at
    1.5 s on the 16 ms one (comb 0.99); 4.5 s was T. A period 2-8 times shorter than the
    outer one, still 3 times the inner one or more, whose comb is ``DIVISOR_COMB_MARGIN``
    higher, is the outer rhythm itself.
    """
    best = current
    for det in valid:
        if det.period_s < 3.0 * inner.period_s:
            continue
        if not whole_multiple(current.period_s, det.period_s, at_most=8):
            continue
        if det.comb >= current.comb + DIVISOR_COMB_MARGIN and det.comb > best.comb:
            best = det
    return best


def _confirmed(finer: PyramidLevel, det: LevelDetection, cfg: DetectorSettings) -> bool:
    """Re-detect a coarse level's period after decimating its parent by 3 instead of 4.

    A period that exists in the traffic does not depend on the sampling rate; the alias of a
    fast period that leaked through the decimation filter does, and moves.
    """
    alt = _cic3_decimate(finer.samples, 3)[-cfg.level_samples :]
    check = detect_level(alt, finer.dt * 3, lag_lo=cfg.min_lag, settings=cfg)
    return check is not None and check.valid and abs(check.period_s / det.period_s - 1.0) <= 0.03


# --------------------------------------------------------------------------------------------
# Edge timing


def _last_at_or_before(where: IntArray, at: IntArray) -> IntArray:
    """For each index in ``at``, the largest of the sorted indices ``where`` not after it (-1)."""
    pos = np.searchsorted(where, at, side="right") - 1
    out: IntArray = np.where(pos >= 0, where[np.maximum(pos, 0)] if where.size else -1, -1)
    return out


def _step_positions(
    raw: FloatArray,
    crossings: FloatArray,
    rising: BoolArray,
    *,
    off: float = 0.0,
    on: float = 1.0,
) -> FloatArray:
    """Least-squares positions of off → on (or on → off) steps near the given crossings.

    With counter semantics a step at ``e`` (sample ``i`` covers ``[i, i+1)``) leaves one
    partial sample, ``u_m = m + 1 − e`` for a rise (``u`` = ``raw`` scaled so that ``off`` is
    0 and ``on`` is 1), between plateaus of 0 and 1. For each candidate sample ``m`` within
    two of the crossing the best ``e`` is read off ``u_m``, and the candidate whose plateaus
    fit the raw samples best (seven samples around the step) wins: the partial sample alone
    places the step, where a 50 % crossing of smoothed samples spreads the noise of all the
    samples the smoothing averaged. Steps with another step within 4.5 samples (short bursts
    or gaps) keep their crossing. Only the seven samples around each step are read.
    """
    n = raw.size
    out = crossings.astype(np.float64).copy()
    if crossings.size == 0:
        return out
    k = np.floor(crossings).astype(np.int64)
    gap_before = np.diff(crossings, prepend=-np.inf)
    gap_after = np.diff(crossings, append=np.inf)
    ok = (k >= 0) & (k < n) & (gap_before >= 4.5) & (gap_after >= 4.5)
    if not ok.any():
        return out
    k, up = k[ok], rising[ok]
    # The seven samples k-3 .. k+3, cut at the series' ends (a step in the first samples
    # still has its partial sample): samples outside it weigh nothing, and candidates outside
    # it are not candidates.
    at = k[:, None] + np.arange(-3, 4)[None, :]
    inside = (at >= 0) & (at < n)
    u = (raw[np.clip(at, 0, n - 1)] - off) / (on - off)
    # Squared distance of each sample to plateau 0 and to plateau 1, summed left to right.
    zero = np.zeros((k.size, 8))
    one = np.zeros((k.size, 8))
    np.cumsum(np.where(inside, u**2, 0.0), axis=1, out=zero[:, 1:])
    np.cumsum(np.where(inside, (u - 1.0) ** 2, 0.0), axis=1, out=one[:, 1:])
    col = np.arange(1, 6)[None, :]  # candidates m = k-2 .. k+2, as columns of ``at``
    rows = np.arange(k.size)[:, None]
    um = u[rows, col]
    part = np.clip(um, 0.0, 1.0)
    resid = np.where(inside[rows, col], (um - part) ** 2, np.inf)
    # Before the partial sample: plateau 0 for a rise, 1 for a fall; after it, the other.
    before_0, before_1 = zero[rows, col], one[rows, col]
    after_0, after_1 = zero[:, 7:8] - zero[rows, col + 1], one[:, 7:8] - one[rows, col + 1]
    cost = np.where(up[:, None], before_0 + after_1, before_1 + after_0) + resid
    best = np.argmin(cost, axis=1)
    mb = k + best - 2
    pb = part[np.arange(k.size), best]
    out[ok] = np.where(up, mb + 1.0 - pb, mb + pb)
    return out


def _tier_timing(x: FloatArray, dt: float, period_s: float, t0: float) -> EdgeTiming | None:
    """:func:`edge_timing` between the background and the lowest tier of bursts, if any."""
    finite = x[np.isfinite(x)]
    if finite.size < 16:
        return None
    tiers = lowest_tier(finite, *two_means(finite))
    if tiers is None:
        return None
    return edge_timing(x, dt, period_s, t0=t0, levels=tiers)


#: Most periods one interval between main bursts may span and still count as steps (bursts
#: missed); a longer one is a pause.
_MAX_MISSED = 3

#: Most main bursts per period for a run to be taken as one burst a step with some bursts
#: split in pieces; more is a step of several bursts, which other rules time.
_SPLIT_BURSTS_PER_PERIOD = 1.4
#: Sizes of the pieces of a split burst, as shares of the main bursts' size: chatter is
#: smaller, and a whole burst with a small one beside it (a late bucket) is timed as it is.
_PIECE_MASS = (0.1, 0.8)
#: Largest spread of the whole steps, as a share of their mean, for pieces to be joined: where
#: steps spread widely (35 % on a real job), two bursts under half a period apart may be two
#: short steps.
_SPLIT_STEP_CV = 0.1


def _join_split(
    rise: FloatArray,
    fall: FloatArray,
    mass: FloatArray,
    clean: npt.NDArray[np.bool_],
    period_s: float,
    top: float,
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """The bursts with the pieces of each split one joined, and which ones are main bursts.

    A step's burst now and then cut in two by a short silence (a late bucket, a stalled peer)
    gives two main bursts well under a period apart, and the interval between them, rounded up
    to one period, counted as a whole step: 15 % of the steps split by 0.2 s read T 1-4 %
    short. Joined (first rise, last fall, bytes summed), the step has one burst again; its
    rise is early by the silence, an error that cancels over the run. (Left out instead, the
    intervals around them span two steps, counted by rounding to whole periods, which a real
    job whose step changed in the window miscounted: 3 % short.)

    Pieces are bursts of ``_PIECE_MASS`` of the main size (not chatter, not a whole burst
    with a small one beside it) that start under half a period apart; a run of them is joined
    when two or more are main bursts (one main piece alone is timed by an edge off by the
    silence, which also cancels over the run, not as two steps). Nothing is joined where most
    main bursts are pieces (stalls cut every burst: the pieces' edges are not the bursts'),
    where a step has more than about one main burst (a train, which other rules time), or
    where the whole steps spread by more than ``_SPLIT_STEP_CV``. ``clean``: the bursts whose
    edges can be timed (none beside lost samples); a joined one is clean when all its pieces
    are.
    """
    main = (mass >= 0.5 * top) & clean
    unchanged = (rise, fall, mass, main)
    sizable = np.flatnonzero((mass >= _PIECE_MASS[0] * top) & (mass < _PIECE_MASS[1] * top))
    close = np.diff(rise[sizable]) < 0.5 * period_s
    if not close.any():
        return unchanged
    piece = np.zeros(rise.size, dtype=bool)
    piece[sizable[:-1][close]] = True
    piece[sizable[1:][close]] = True
    kept = rise[main]
    if kept.size < 3 or 2 * int((main & ~piece).sum()) < kept.size:
        return unchanged
    if (kept.size - 1) * period_s > _SPLIT_BURSTS_PER_PERIOD * float(kept[-1] - kept[0]):
        return unchanged
    # Steps between two whole main bursts with no piece between them.
    pos = np.flatnonzero(main | piece)
    whole = main[pos] & ~piece[pos]
    steps = (np.diff(rise[pos]) / period_s)[whole[:-1] & whole[1:]]
    steps = steps[steps < 1.5]
    if steps.size < 3 or float(np.std(steps)) > _SPLIT_STEP_CV * float(np.mean(steps)):
        return unchanged
    # Each run of close pieces becomes one burst, at its first piece.
    link = np.concatenate(([False], close))
    group = np.cumsum(~link) - 1
    first = sizable[np.flatnonzero(~link)]
    last = sizable[np.append(np.flatnonzero(~link)[1:] - 1, sizable.size - 1)]
    joined = np.bincount(group, weights=mass[sizable])
    grouped = np.bincount(group, weights=main[sizable].astype(np.float64)) >= 2
    first, last, joined = first[grouped], last[grouped], joined[grouped]
    fall, mass, clean = fall.copy(), mass.copy(), clean.copy()
    members = np.bincount(group, weights=(~clean[sizable]).astype(np.float64))[grouped] == 0
    fall[first], mass[first], clean[first] = fall[last], joined, members
    keep = np.ones(rise.size, dtype=bool)
    keep[sizable[grouped[group]]] = False
    keep[first] = True
    rise, fall, mass, clean = rise[keep], fall[keep], mass[keep], clean[keep]
    return rise, fall, mass, (mass >= 0.5 * top) & clean


def edge_timing(
    x: FloatArray,
    dt: float,
    period_s: float,
    *,
    t0: float = 0.0,
    levels: tuple[float, float] | None = None,
) -> EdgeTiming | None:
    """Refine a period from the edges of its main bursts.

    Samples are assumed to be averages over ``[t0 + i*dt, t0 + (i+1)*dt)`` (counter semantics).
    ``levels`` (off, on) replaces the 2-means levels the edges are found between. Returns
    None when there are too few bursts to time.
    """
    finite = np.isfinite(x)
    if finite.sum() < 16:
        return None
    if not finite.all():
        x = np.where(finite, x, median(x[finite]))
    lo, hi = two_means(x) if levels is None else levels
    if hi - lo <= 0:
        return None
    u = raw = (x - lo) / (hi - lo)
    period_n = period_s / dt
    noise = robust_noise(u)
    width = 1
    if noise > 0.1:
        width = math.ceil((noise / 0.1) ** 2)
        width = int(min(width, max(1, period_n / 8)))
        u = boxcar(u, width)
    # Hysteresis: the state is that of the last sample at or above 0.65 (on) or at or below
    # 0.35 (off); it changes at a mark of the other kind than the mark before it. Only the
    # marks are looked at, not every sample's state (64 k samples per window at 1 kHz).
    on_mark = u >= 0.65
    marks = np.flatnonzero(on_mark | (u <= 0.35))
    kind = on_mark[marks]
    switch = np.flatnonzero(kind[1:] != kind[:-1]) + 1
    changes = marks[switch]
    rising = kind[switch]
    csum = np.empty(u.size + 1)
    csum[0] = 0.0
    np.cumsum(np.clip(u, 0.0, None), out=csum[1:])
    # Each change of state is timed at the 50 % crossing just before it: one past the last
    # sample on the other side of 0.5 (vectorised; the changes alternate rise / fall).
    upper = u >= 0.5
    before = np.where(
        rising,
        _last_at_or_before(np.flatnonzero(~upper), changes - 1),
        _last_at_or_before(np.flatnonzero(upper), changes - 1),
    )
    j = np.minimum(before, changes - 1) + 1
    keep = j > 0
    rising, j = rising[keep], j[keep]
    a, b = u[j - 1], u[j]
    same = b == a
    frac = np.where(same, 0.5, (0.5 - a) / np.where(same, 1.0, b - a))
    position = j - 0.5 + frac
    high = raw >= 0.5
    if noise <= 0.3 and high.any() and not high.all():
        # Beyond that noise the partial sample is lost in it and the smoothed crossing wins.
        # The plateaus are re-read as medians: 2-means levels lean towards the edge samples,
        # and a partial sample scaled by them would misplace its step by its own fraction.
        off, on = median(raw[~high]), median(raw[high])
        if on > off:
            position = _step_positions(raw, position, rising, off=off, on=on)
    times = t0 + dt * position
    first_rise = int(np.argmax(rising)) if rising.any() else rising.size
    rising, times = rising[first_rise:], times[first_rise:]  # a fall needs a rise before it
    rises, falls = times[rising], times[~rising]
    n_bursts = min(rises.size, falls.size)
    # Where that leaves too few bursts, one still on at the window's end is timed by its rise:
    # a window of three periods (the cold start) holds three rises but only two falls whenever
    # the third burst ends after "now", and three bursts are the fewest this needs. Its bytes
    # so far decide whether it is a main burst; they take no part in the size statistics, nor
    # its end in the falls.
    ongoing = n_bursts < 3 and rises.size > n_bursts
    if n_bursts + ongoing < 3:
        return None
    rise = rises[: n_bursts + ongoing]
    fall = np.append(falls[:n_bursts], t0 + dt * x.size) if ongoing else falls[:n_bursts]
    start = np.round((rise - t0) / dt).astype(np.int64)
    end = np.maximum(np.round((fall - t0) / dt).astype(np.int64), start)
    end = np.minimum(end, x.size)
    mass = csum[end] - csum[np.maximum(start, 0)]
    # Periods the bursts span, not the window: traffic that starts or stops inside the window
    # (a job after an idle spell, a capture with quiet minutes around it) has fewer.
    expected = max(1, round(float(rise[-1] - rise[0]) / period_s) + 1)
    top = np.sort(mass)[::-1][:expected]
    clean = np.ones(rise.size, dtype=bool)
    if not finite.all():
        # A burst with unknown samples next to an edge (lost polls, a gap) has that edge
        # where the fill met the traffic, not where the traffic changed: it is left out, and
        # the intervals around it count the cycles it spanned.
        unknown = np.concatenate(([0], np.cumsum(~finite)))
        lo_i = np.clip(start - 3, 0, x.size)
        hi_i = np.clip(end + 4, 0, x.size)
        clean = unknown[hi_i] == unknown[lo_i]
    rise, fall, mass, main = _join_split(rise, fall, mass, clean, period_s, float(median(top)))
    ongoing = ongoing and bool(main[-1])
    rise, fall, mass = rise[main], fall[main], mass[main]
    if rise.size < 3:
        return None
    if ongoing:
        fall, mass = fall[:-1], mass[:-1]
    steps = np.diff(rise)
    step_period = float(steps.mean())
    step_cv = float(np.std(steps) / step_period)
    longest = float(steps.max() / np.median(steps))
    mass_cv = (
        float(np.std(mass) / np.mean(mass)) if mass.size and float(np.mean(mass)) > 0 else math.inf
    )
    span = rise[-1] - rise[0]
    bursts_per_period = (rise.size - 1) / max(float(span) / period_s, 1e-12)

    def intervals(edges: FloatArray) -> tuple[FloatArray, FloatArray]:
        d = np.diff(edges)
        mult = np.maximum(np.round(d / period_s), 1.0)
        return d, mult

    d_r, m_r = intervals(rise)
    d_f, m_f = intervals(fall)
    d = np.concatenate((d_r, d_f))
    m = np.concatenate((m_r, m_f))
    rel = d / (m * period_s)
    regular = (np.abs(rel - 1.0) <= 0.25) & (m <= _MAX_MISSED)
    regular_fraction = float(regular.mean()) if regular.size else 0.0
    if not regular.any():
        return EdgeTiming(
            period_s, math.inf, 0.0, bursts_per_period, 0, rise, step_cv, mass_cv, step_period,
            longest, fall,
        )  # fmt: skip
    # The mean period over all cycles of the run, for rising and falling edges: every interval
    # counts (dropping irregular ones would bias T under random-walk jitter: a long step
    # dropped, its short neighbours kept), weighted between the span and the least-squares
    # line by how much of the interval spread is edge timing error (agent/edge_fit.py).
    # An interval of more than three periods without a burst is a pause (an evaluation, a
    # checkpoint), not missed bursts: its length is no whole number of steps, and counted as
    # one it moved T by up to half a period per pause (a real job with 7 pauses in 80 s read
    # 3.6 % short). Its cycles are unknown, and it is left out.
    kept_r, kept_f = m_r <= _MAX_MISSED, m_f <= _MAX_MISSED
    counts = [float(m_r[kept_r].sum()), float(m_f[kept_f].sum())]
    span_t = float((d_r[kept_r].sum() + d_f[kept_f].sum()) / sum(counts))
    # A 50 % crossing moves by about the noise over the edge's slope: σ·√width samples after
    # a boxcar of ``width``; three times that bounds it generously (sampling phase included).
    timing_bound = 3.0 * noise * math.sqrt(width) * dt
    ratio = edge_noise_ratio((d_r, m_r), (d_f, m_f), span_t, timing_bound)
    # Either kind of edge may have no interval left (two falls a pause apart, or a single one):
    # the other kind times the period alone.
    t_edges = float(
        sum(
            c * realised_period(e, mult, ratio, kept=k)
            for c, e, mult, k in ((counts[0], rise, m_r, kept_r), (counts[1], fall, m_f, kept_f))
            if c > 0
        )
        / sum(counts)
    )
    single = d[regular] / m[regular]
    cv = float(np.std(single) / np.mean(single)) if single.size > 1 else 0.0
    cycles = round(span / t_edges) if t_edges > 0 else 0
    return EdgeTiming(
        t_edges, cv, regular_fraction, bursts_per_period, cycles, rise, step_cv, mass_cv,
        step_period, longest, fall,
    )  # fmt: skip


def pulse_timing(
    x: FloatArray, dt: float, period_s: float, *, t0: float = 0.0
) -> EdgeTiming | None:
    """Refine a period from bursts shorter than a sample or two, by their centres of mass.

    A burst shorter than the poll interval has no edges to time: it is one or two samples
    of partial height, which the noise smoothing of :func:`edge_timing` flattens away. Its
    bytes still say where it was: with counter semantics a burst split over two samples puts
    its bytes in proportion to its time in each, so the centroid of the baseline-subtracted
    samples around it times it to a fraction of a sample. One pulse per period is taken: the
    largest two-sample sum of each half-period block that beats its neighbours, when that
    pair holds most of the bytes around it (a wide burst does not qualify).
    """
    finite = np.isfinite(x)
    if finite.sum() < 16:
        return None
    lo, _ = two_means(x[finite])
    y = np.where(finite, x - lo, 0.0)
    period_n = period_s / dt
    block = max(2, int(period_n / 2))
    pair = y[:-1] + y[1:]
    blocks = pair.size // block
    if blocks < 6:
        return None
    grid = pair[: blocks * block].reshape(blocks, block)
    best = grid.argmax(axis=1) + block * np.arange(blocks)
    top = pair[best]
    left = np.concatenate(([-np.inf], top[:-1]))
    right = np.concatenate((top[1:], [-np.inf]))
    peaks = np.unique(best[(top >= left) & (top >= right)])
    expected = max(1, int(x.size / period_n))
    heights = np.sort(pair[peaks])[::-1][:expected]
    if heights.size < 3 or heights[-1] <= 0:
        return None
    peaks = peaks[pair[peaks] >= 0.5 * median(heights)]
    # Centroid over the pair, and over a neighbour only where it holds bytes beyond the
    # noise (a pulse wider than a sample): a sample of noise alone at one sample from the
    # pair would move the centroid by more than the pulse's own sampling error.
    noise = robust_noise(y)
    csum = np.concatenate(([0.0], np.cumsum(y)))
    wsum = np.concatenate(([0.0], np.cumsum(y * (np.arange(y.size) + 0.5))))
    before = np.maximum(peaks - 1, 0)
    after = np.minimum(peaks + 2, y.size - 1)
    a = np.where(y[before] > 3.0 * noise, before, peaks)
    b = np.where(y[after] > 3.0 * noise, after + 1, peaks + 2)
    mass = csum[b] - csum[a]
    quarter = max(4, int(period_n / 4))
    hi_w = np.minimum(peaks + 2 + quarter, y.size)
    lo_w = np.maximum(peaks - quarter, 0)
    flanks = csum[hi_w] - csum[lo_w] - mass
    # What the noise alone can put in the flanks (3 σ of their sum).
    slack = 3.0 * noise * np.sqrt(np.maximum(hi_w - lo_w - (b - a), 1))
    narrow = (mass > 0) & (flanks <= 0.25 * mass + slack)
    if int(narrow.sum()) < 0.7 * peaks.size or int(narrow.sum()) < 3:
        return None
    centres = t0 + dt * (wsum[b] - wsum[a])[narrow] / mass[narrow]
    d = np.diff(centres)
    # Cycles per interval may be 0: a stray pulse inside a step splits it in two intervals
    # that must still count one cycle between them, or T comes out short by a step's share.
    m = np.round(d / period_s)
    counted = m >= 1
    rel = d / (np.maximum(m, 1.0) * period_s)
    regular = counted & (np.abs(rel - 1.0) <= 0.25) & (m <= 3)
    regular_fraction = float(regular.mean())
    bursts_per_period = centres.size / max(x.size / period_n, 1e-12)
    if not regular.any() or m.sum() < 2:
        return EdgeTiming(period_s, math.inf, 0.0, bursts_per_period, 0, centres)
    # One sequence: no second edge to tell jitter from timing error, so the span.
    t_pulses = float((centres[-1] - centres[0]) / m.sum())
    single = d[regular] / m[regular]
    cv = float(np.std(single) / np.mean(single)) if single.size > 1 else 0.0
    return EdgeTiming(t_pulses, cv, regular_fraction, bursts_per_period, int(m.sum()), centres)


# --------------------------------------------------------------------------------------------
# Whole estimate


def _confidence(det: LevelDetection, cv: float | None, cfg: DetectorSettings) -> float:
    """Comb height × z (full from 20) × cycles (full from 3) × edge regularity, in [0, 1].

    Three cycles count in full, as the tracker's one-window lock at 0.6 intends (a clear comb,
    a large z and regular edges over three periods): from four, the benchmark's base cold
    start locked after a median 4 periods at a 1 s hop, now 3, with no aperiodic stream
    locked.
    """
    comb = min(1.0, max(0.0, det.comb))
    conf = comb * min(1.0, det.z / 20.0) * min(1.0, det.cycles / 3.0)
    if cv is not None:
        conf *= max(0.0, 1.0 - (cv / cfg.max_interval_cv) ** 2)
    return float(max(0.0, min(1.0, conf)))


def _without_few_cycle_multiples(
    valid: list[LevelDetection], cfg: DetectorSettings
) -> list[LevelDetection]:
    """Drop detections under ``outer_min_cycles`` that are a multiple of another detection.

    Every multiple of T repeats as well as T does, and over three or four cycles a level can
    take one for its period; a shorter period that divides it and is seen too wins until the
    longer one has repeated often enough to be an outer period (a nested period's claim).
    """
    keep = []
    for d in valid:
        if d.cycles < cfg.outer_min_cycles and any(
            e.period_s < d.period_s
            and round(d.period_s / e.period_s) >= 2
            and abs(d.period_s / e.period_s - round(d.period_s / e.period_s))
            <= 0.05 * round(d.period_s / e.period_s)
            for e in valid
        ):
            continue
        keep.append(d)
    return keep


def _short_levels_last(
    valid: list[LevelDetection], pyramid: list[PyramidLevel], cfg: DetectorSettings
) -> list[LevelDetection]:
    """Drop the periods of levels under ``min_level_samples`` when a full level has one.

    A short coarse level (kept before a lock for trains of bursts, which repeat clearly only
    there) cannot show a finer level's period, which its decimation aliases (0.1 s steps at
    80 ms samples read 0.4 s), and 32-63 samples average little of that alias or of a beat
    at the hop away: the walk would take it for an outer period the fine period hides under.
    It speaks only where the full levels find nothing: a train's bursts, irregular inside.
    """
    full = [d for d in valid if pyramid[d.level].samples.size >= cfg.min_level_samples]
    return full if full else valid


def _occupancy(x: FloatArray, dt: float, period_s: float) -> float:
    """Share of the window's period-long stretches that hold a sample above the level midpoint.

    A period repeats across the window; a rhythm inside bursts (calls of one sync point, frames
    of one transfer) fills only the stretches where the bursts are. Used for periods too short
    for their burst edges to be timed, which the edge checks therefore never see.
    """
    n = max(1, round(period_s / dt))
    chunks = x.size // n
    if chunks < 2:
        return 1.0
    lo, hi = two_means(x)
    if hi <= lo:
        return 1.0
    busy = x[: chunks * n].reshape(chunks, n).max(axis=1) > 0.5 * (lo + hi)
    return float(np.count_nonzero(busy)) / chunks


def _rejected(
    current: LevelDetection,
    detections: list[LevelDetection],
    reason: str,
    *,
    interval_cv: float | None = None,
    method: str = "none",
    train_rhythm_s: float | None = None,
    irregular_rhythm_s: float | None = None,
) -> PeriodResult:
    """No period, with the candidate that was turned down and why."""
    return PeriodResult(
        None,
        0.0,
        cycles=current.cycles,
        z=current.z,
        comb=current.comb,
        interval_cv=interval_cv,
        method=method,
        level=current.level,
        warnings=(reason,),
        detections=tuple(detections),
        train_rhythm_s=train_rhythm_s,
        irregular_rhythm_s=irregular_rhythm_s,
    )


def _confirmed_by_edges(
    detections: list[LevelDetection],
    pyramid: list[PyramidLevel],
    cfg: DetectorSettings,
    t0: float,
) -> LevelDetection | None:
    """A candidate the NSDF could not vouch for, that the burst edges can.

    Heavy step jitter is a random walk: over k steps the burst times spread by √k·σ, so the
    NSDF peaks at 2T and 3T smear and hold the comb and z down, though every burst is still
    there, one per step. The clearest candidate that repeats over enough cycles is taken when
    its burst intervals are that regular (one main burst per period, nine intervals in ten
    within 25 %, a spread under ``rescue_max_cv``): Poisson or gamma traffic of CV 0.5 never
    is. Returns the candidate marked valid, or None.
    """
    candidates = [
        d
        for d in detections
        if d.comb >= cfg.comb_min and d.z >= cfg.rescue_z_min and d.cycles >= cfg.few_cycles
    ]
    if not candidates:
        return None
    det = max(candidates, key=lambda d: d.z)
    for _, _, timing in _one_burst_levels(pyramid, det.period_s, t0):
        if (
            timing.regular_fraction >= 0.9
            and timing.interval_cv <= cfg.rescue_max_cv
            and abs(timing.period_s / det.period_s - 1.0) <= 0.05
        ):
            return replace(det, valid=True)
    return None


def _one_burst_levels(
    pyramid: list[PyramidLevel], period_s: float, t0: float
) -> Iterator[tuple[int, PyramidLevel, EdgeTiming]]:
    """Fine to coarse, the levels whose burst edges at ``period_s`` come once a period.

    Levels stop where a period is under 8 samples. Callers take the first level whose edges
    pass their test: pieces of bursts (a bucket gap, a stalled sender) repeat irregularly at
    a fine level and merge one level coarser, as in :func:`estimate_period`'s edge refinement.
    """
    for level, lv in enumerate(pyramid):
        if period_s / lv.dt < 8:
            return
        timing = edge_timing(lv.samples, lv.dt, period_s, t0=t0 + lv.start_s)
        if timing is not None and 0.8 <= timing.bursts_per_period <= 1.25:
            yield level, lv, timing


def _all_interval_cv(rising_s: FloatArray, period_s: float) -> float:
    """Spread of every single-period interval between rises, irregular ones included.

    ``EdgeTiming.interval_cv`` spreads only the intervals within 25 % of the period, which
    suits a period found by its own repetition; against a given period the outliers are the
    evidence (gamma traffic of CV 0.5 showed 0.13 there and 0.2-0.5 here).
    """
    d = np.diff(rising_s)
    if d.size < 2:
        return math.inf
    rel = d / (np.maximum(1.0, np.round(d / period_s)) * period_s)
    return float(np.std(rel) / np.mean(rel))


def _held(
    expected_s: float,
    detections: list[LevelDetection],
    pyramid: list[PyramidLevel],
    prepared: list[_Level | None],
    cfg: DetectorSettings,
    t0: float,
) -> LevelDetection | None:
    """The locked period, still there though no level could detect it unaided.

    Searching every lag for a period needs strong evidence, since some lag always looks a
    little periodic; testing the one period already locked needs far less. Real step jitter
    (12-15 % on PyTorch DDP jobs, a few steps 25 % long) holds the NSDF comb near 0.3 and
    dropped the lock mid-job although every step's traffic was still there. The period is
    held on either of two pieces of evidence within ``hold_tolerance`` of the lock, in this
    order:

    * burst edges, at the finest level where a burst comes once a period, that repeat as
      regularly as any accepted period must (``min_regular_fraction``, ``max_interval_cv``)
      over ``few_cycles``, with all their intervals within ``hold_max_cv``; the edges' own T
      is reported (the NSDF's lag leans short under jitter: 0.536 s against 0.579 s from the
      edges, with 0.57 s true);
    * a level's candidate with the z a rescue needs (``rescue_z_min``) over ``few_cycles``,
      whatever its comb (a step whose gradient buckets went out as two bursts).

    A job that stopped has no bursts, aperiodic traffic irregular ones, and a larger change of
    T disagrees: each of these still loses the lock. So does traffic whose last burst began
    more than two locked periods before the window's end: a job that has just stopped still
    fills most of its window with regular bursts.
    """
    chosen: tuple[int, PyramidLevel, EdgeTiming] | None = None
    steady: tuple[int, PyramidLevel, EdgeTiming] | None = None
    for level, lv, timing in _one_burst_levels(pyramid, expected_s, t0):
        if (
            not _regular(timing, cfg)
            or timing.cycles < cfg.few_cycles
            or abs(timing.period_s / expected_s - 1.0) > cfg.hold_tolerance
            or _all_interval_cv(timing.rising_s, expected_s) > cfg.hold_max_cv
        ):
            if steady is None and _steady_hold(timing, expected_s, cfg):
                steady = level, lv, replace(timing, period_s=timing.step_period_s)
            continue
        chosen = level, lv, timing
        break
    if chosen is None:
        near = _near_candidate(expected_s, detections, cfg, comb=cfg.comb_min, z=cfg.rescue_z_min)
        if near is not None or steady is None:
            return near
        chosen = steady
    level, lv, timing = chosen
    end_s = t0 + pyramid[0].samples.size * pyramid[0].dt
    if end_s - float(timing.rising_s[-1]) > 2.0 * expected_s:
        return None  # the job's last burst is behind it: the bursts are history
    return _edge_detection(level, lv, timing, prepared[level])


def _edge_detection(
    level: int, lv: PyramidLevel, timing: EdgeTiming, prepared: _Level | None
) -> LevelDetection:
    """A valid detection at the burst edges' period, with the comb and z its level shows."""
    found = timing.period_s / lv.dt
    comb = z = 0.0
    if prepared is not None and 2 * found < prepared.x.size:
        comb = max(0.0, prepared.peaks.comb(found, 0.5 * prepared.x.size))
        z = _jackknife_z(prepared.jackknife_at(round(found)))
    return LevelDetection(
        level=level,
        dt=lv.dt,
        lag=found,
        nsdf=comb,
        comb=comb,
        z=max(0.0, z),
        cycles=lv.samples.size / found,
        valid=True,
    )


def _steady_hold(timing: EdgeTiming, expected_s: float, cfg: DetectorSettings) -> bool:
    """Whether steady steps about the locked period keep it (``hold_steady_cv``).

    Equal burst sizes carry the evidence here: inference requests and other random traffic
    spread their sizes 0.5 and more, while every step of a training job moves the same bytes.
    """
    return (
        _equal_steps(timing, cfg)
        and timing.step_cv <= cfg.hold_steady_cv
        and abs(timing.step_period_s / expected_s - 1.0) <= cfg.hold_tolerance
    )


def _regular(timing: EdgeTiming, cfg: DetectorSettings) -> bool:
    """Whether the bursts repeat at the period as any accepted period's must.

    Mostly at whole multiples of it (``min_regular_fraction``), with those intervals spreading
    within ``max_interval_cv``.
    """
    return (
        timing.regular_fraction >= cfg.min_regular_fraction
        and timing.interval_cv <= cfg.max_interval_cv
    )


def _equal_steps(timing: EdgeTiming, cfg: DetectorSettings) -> bool:
    """Enough main bursts, all of one size, none missing: what makes them a job's steps."""
    return (
        timing.rising_s.size - 1 >= cfg.steady_min_steps
        and timing.mass_cv <= cfg.steady_mass_cv
        and timing.longest_step <= cfg.steady_longest_step
    )


def _steady(timing: EdgeTiming, cfg: DetectorSettings) -> bool:
    """Whether the main bursts are a jittery job's steps: equal, one a step, none missing.

    Their rise-to-rise spread must stay under ``max_interval_cv`` (0.25). Under a wide spread
    the NSDF's lag leans towards the commonest step, while T means the mean step: the edges
    count the steps.
    """
    if not _equal_steps(timing, cfg):
        return False
    # The spread is itself measured, with a standard error of about cv / √(2n): a margin of
    # 0.75 of it keeps equal-size bursts at random intervals of CV 0.3 to 2.5 % of 30 s
    # windows (5 % without it; 0 at CV 0.35 and 0.5), while a job of 20 % spread still locks
    # on its first ten steps (a margin of 1.5 of it delayed that to 20 s).
    margin = 1.0 + 0.75 / math.sqrt(2.0 * (timing.rising_s.size - 1))
    return timing.step_cv * margin <= cfg.max_interval_cv


def _coarse_timing(
    pyramid: list[PyramidLevel], period_s: float, t0: float
) -> tuple[int, PyramidLevel, EdgeTiming | None] | None:
    """(level, its samples, :func:`edge_timing`) on the coarsest level with 8 samples a period.

    Such a level (8-32 samples a period) times steps well enough to see whether they are
    steady, at a fraction of the cost of the finest (an edge timing took ~6 ms at 64 k
    samples, on every aperiodic window); the edge refinement then times the period on the
    finest level that shows it. None where no level has 8 samples a period (or it is NaN).
    """
    usable = [i for i, lv in enumerate(pyramid) if period_s / lv.dt >= 8]
    if not usable:
        return None
    lv = pyramid[usable[-1]]
    return usable[-1], lv, edge_timing(lv.samples, lv.dt, period_s, t0=t0 + lv.start_s)


def _steady_steps(
    detections: list[LevelDetection],
    pyramid: list[PyramidLevel],
    prepared: list[_Level | None],
    cfg: DetectorSettings,
    t0: float,
) -> LevelDetection | None:
    """A period of steady steps (:func:`_steady`): the likeliest candidate's, or its bursts'.

    The bursts' own mean interval is timed when the candidate spans several of them. Real DDP
    with 20 % step spread (a sleep U(0, 0.42 s) per step) held every level's comb under 0.2
    and z under 4 in 20 s windows: no period in most of them, and the live agent called the
    job inference. Its steps, counted by their edges, give T within 1 %.
    """
    candidates = [d for d in detections if d.cycles >= cfg.few_cycles]
    if not candidates:
        return None
    det = max(candidates, key=lambda d: d.z)
    candidate_s = det.period_s
    timed = _coarse_timing(pyramid, candidate_s, t0)
    if timed is None:
        return None
    level, lv, timing = timed
    if timing is not None and timing.bursts_per_period > 1.25:
        # The likeliest lag may span several steps: steps of 2.0 or 3.0 s at random (a
        # collective at full or half rate) smear the lags of one and two steps, and the comb
        # peaked at four or five of them (9.5-12 s for 2.5 s steps), where every burst is a
        # fraction of a period. Their own mean interval is timed instead; _steady below
        # decides, as for any other candidate.
        candidate_s = timing.step_period_s
        timed = _coarse_timing(pyramid, candidate_s, t0)
        if timed is None:  # (also when the mean interval is NaN: fewer than two bursts)
            return None
        level, lv, timing = timed
    if timing is None or not 0.8 <= timing.bursts_per_period <= 1.25:
        return None
    # Steps fill the window: bursts confined to part of it (one FSDP step's train of equal
    # layer bursts, with silence after it) are no steps of their own.
    span = float(timing.rising_s[-1] - timing.rising_s[0]) + 2.5 * timing.step_period_s
    # The candidate's lag leans to the commonest step; steps of two lengths at random (2.0 and
    # 3.0 s: a collective at full or half rate) put it at the shorter one, 18 % under their
    # mean, which their spread allows.
    if (
        span >= pyramid[0].samples.size * pyramid[0].dt
        and _steady(timing, cfg)
        and (
            abs(timing.period_s / candidate_s - 1.0) <= cfg.hold_tolerance
            or abs(timing.step_period_s / candidate_s - 1.0) <= cfg.max_interval_cv
        )
    ):
        return _edge_detection(level, lv, timing, prepared[level])
    return None


def _near_candidate(
    expected_s: float,
    detections: list[LevelDetection],
    cfg: DetectorSettings,
    *,
    comb: float,
    z: float,
) -> LevelDetection | None:
    """The most significant candidate near the locked period, marked valid, or None.

    Near: within ``hold_tolerance``, with at least this comb and z, over ``few_cycles``.
    """
    near = [
        d
        for d in detections
        if abs(d.period_s / expected_s - 1.0) <= cfg.hold_tolerance
        and d.comb >= comb
        and d.z >= z
        and d.cycles >= cfg.few_cycles
    ]
    return replace(max(near, key=lambda d: d.z), valid=True) if near else None


#: NSDF height at which the finest level's rhythm inside a period counts as a train's spacing,
#: once the NSDF has dipped under ``_INNER_DIP`` (between bursts, the traffic is unlike itself).
_CLEAR_INNER_NSDF = 0.5
_INNER_DIP = 0.2


def _inner_spacing(lv: _Level | None, period_s: float, dt: float) -> float | None:
    """The clearest rhythm of the finest level within a third of the period, if it is clear.

    A window of a dozen steps can show the step itself on its finest level, and then the
    walk reports no inner period though the step is a train of transfers (0.09 s apart,
    NSDF 0.79 at that lag, on a real 1F1B pipeline job).
    """
    if lv is None:
        return None
    peaks = lv.peaks
    hi = period_s / dt / 3.0
    # Only past the NSDF's first dip: before it, a ripple on the main lobe is a local maximum
    # too, and as high as the lobe (a square wave read an "inner rhythm" of two samples).
    dips = np.flatnonzero(lv.r[1 : math.floor(hi) + 1] < _INNER_DIP) + 1
    if dips.size == 0:
        return None
    best: int | None = None
    for i in peaks.maxima:
        if i > hi:
            break
        if i > dips[0] and (best is None or peaks.r[i] > peaks.r[best]):
            best = i
    if best is None or peaks.r[best] < _CLEAR_INNER_NSDF:
        return None
    return peaks.parabolic(best)[0] * dt


#: An inner interval this many inner periods long or more is a gap between trains.
_TRAIN_GAP = 1.3


def _train_result(
    outer_s: float,
    rhythm_s: float,
    timing: EdgeTiming,
    detections: list[LevelDetection],
    cfg: DetectorSettings,
) -> PeriodResult:
    """The step of :func:`agent.trains.train_period`, its rhythm as the inner period.

    Its confidence is that of the clearest level that sees about the same step (each one too
    weak to be valid on its own), scaled down by the spread of the train starts.
    """
    starts = train_starts(timing.rising_s, timing.falling_s, rhythm_s)
    steps = np.diff(starts)
    cv = float(np.std(steps) / np.mean(steps))
    near = [d for d in detections if abs(d.period_s / outer_s - 1.0) <= 0.05]
    best = max(near, key=lambda d: d.comb * min(1.0, d.z / 20.0), default=None)
    return PeriodResult(
        period_s=outer_s,
        confidence=_confidence(best, cv, cfg) if best is not None else 0.0,
        inner_period_s=rhythm_s,
        cycles=float(starts.size - 1),
        z=best.z if best is not None else 0.0,
        comb=best.comb if best is not None else 0.0,
        interval_cv=cv,
        method="trains",
        level=best.level if best is not None else 0,
        detections=tuple(detections),
        rising_edges_s=starts,
    )


def _trains_rescue(
    detections: list[LevelDetection],
    pyramid: list[PyramidLevel],
    cfg: DetectorSettings,
    t0: float,
    end_s: float,
) -> PeriodResult | None:
    """A step of trains (:mod:`agent.trains`) that no level could detect.

    Over a window of a few long steps, the silences between trains dilute the rhythm's NSDF
    (comb 0.23 for six buckets 0.6 s apart, 3.2 s of silence a step) and the steps' own comb
    stays low while the trains' insides differ step to step. The finest candidate rhythm that
    repeats (``comb_min``, ``few_cycles``) is timed by its bursts; if they come in trains,
    regular inside (four in five within 25 % of the rhythm) and whose starts are regular
    (:func:`agent.trains.train_period`), the trains' step is T.
    """
    for det in sorted(detections, key=lambda d: d.period_s):
        if det.comb < cfg.comb_min or det.cycles < cfg.few_cycles:
            continue
        levels = [lv for lv in pyramid if det.period_s / lv.dt >= 8]
        if not levels:
            continue
        lv = levels[0]
        timing = edge_timing(lv.samples, lv.dt, det.period_s, t0=t0 + lv.start_s)
        if timing is None:
            continue
        rise, fall = timing.rising_s, timing.falling_s
        if train_verdict(rise, fall, det.period_s, t0, end_s) != "trains":
            continue
        inside = np.delete(np.diff(rise), silences_after(rise, fall, det.period_s))
        if inside.size == 0 or np.mean(np.abs(inside / det.period_s - 1.0) <= 0.25) < 0.8:
            continue
        outer_s = train_period(rise, fall, det.period_s)
        if outer_s is not None:
            return _train_result(outer_s, det.period_s, timing, detections, cfg)
    return None


def comes_in_trains(rate: FloatArray, dt: float, period_s: float, *, t0: float = 0.0) -> bool:
    """Whether this series' bursts ``period_s`` apart come in a step's trains.

    :func:`agent.trains.train_verdict` says "trains" (not "pauses", not "none").

    Timed on the coarsest pyramid level with 8 samples a period or more (edge timing at 64 k
    samples costs milliseconds, and a burst that comes once a period merges there as well).
    """
    x = filled(rate)
    if x is None:
        return False
    levels = [lv for lv in build_pyramid(x, dt) if period_s / lv.dt >= 8]
    if not levels:
        return False
    lv = levels[-1]
    timing = edge_timing(lv.samples, lv.dt, period_s, t0=t0 + lv.start_s)
    if timing is None:
        return False
    end = t0 + x.size * dt
    return train_verdict(timing.rising_s, timing.falling_s, period_s, t0, end) == "trains"


def _envelope_outer(
    x: FloatArray, dt: float, found: LevelDetection, cfg: DetectorSettings
) -> LevelDetection | None:
    """A period of the trains of ``found``'s bursts, where no level separated it from them.

    The walk above finds an outer period on a coarser level where the inner one no longer
    shows; micro-batch transfers close to a level's Nyquist period leak through its
    decimation as aliases (a real 1F1B job's 0.092 s transfers read 0.28 s and 0.08 s at
    40 ms bins), and its 0.83 s step showed only 10-11 s into the job. Averaged over one
    inner period (:func:`_train_level`), the inner rhythm is gone and the trains' envelope is
    left: its period was valid 6.5 s into the same job. Sampling it at a quarter of the inner
    period keeps the residue of an inexact average at its own frequency, far below the lags
    looked for (three inner periods and up).

    A steady rhythm leaves a residue too, and a periodic one: the edges of its bursts fall at
    another phase within their polls in each cycle, and the pattern comes back after as many
    cycles as it takes to make a whole number of polls (a 0.1013 s square wave at 200 Hz: a
    1.92 s "envelope", 3-5 % deep, which the scale-free NSDF reads as clearly as a real one;
    35 % deep for narrow bursts 5.3 polls apart). So the trains must be seen as trains: the
    inner bursts' own edges must show a gap (an interval of ``_TRAIN_GAP`` inner periods or
    more) in at least every other outer period.
    """
    trains = _train_level(x, dt, found.period_s)
    if trains is None:
        return None
    step = max(1, round(found.period_s / dt) // 4)
    envelope = trains.samples[::step][-cfg.level_samples :]
    dt_env = dt * step
    det = detect_level(
        envelope,
        dt_env,
        level=found.level,
        lag_lo=max(cfg.min_lag, math.ceil(3.0 * found.period_s / dt_env)),
        settings=cfg,
    )
    if det is None or not det.valid or det.period_s > cfg.max_inner_ratio * found.period_s:
        return None
    bursts = edge_timing(x, dt, found.period_s)
    if bursts is None or bursts.rising_s.size < 3:
        return None
    rising = bursts.rising_s
    gaps = int(np.count_nonzero(np.diff(rising) >= _TRAIN_GAP * found.period_s))
    outer_cycles = float(rising[-1] - rising[0]) / det.period_s
    return det if gaps >= 0.5 * outer_cycles else None


def _train_level(x: FloatArray, dt: float, inner_s: float) -> PyramidLevel | None:
    """The series averaged over one inner period: each train of inner bursts as one burst.

    A moving average over exactly one period of a rhythm is flat wherever the rhythm runs
    (its comb of nulls sits on that period's frequency and harmonics), so a step's train of
    micro-batch transfers or layer gathers becomes one plateau, and the gap between trains
    stays a gap. The pyramid's coarser levels merge a train only once their bin spans its
    gaps, often past 8 bins per step: a real 1F1B pipeline job's 0.76 s steps of eight 21 ms
    transfers split into pieces at 40 ms bins (edges 0.52-0.58 s, and the live lock lost for
    3-5 hops at a time), while its inner-period average timed the steps to 1 %. Sample i
    averages the slots i to i + w - 1, so the series starts (w - 1)/2 slots late.
    """
    width = round(inner_s / dt)
    if width < 2 or x.size < 4 * width:
        return None
    csum = np.concatenate(([0.0], np.cumsum(x)))
    averaged = (csum[width:] - csum[:-width]) / width
    return PyramidLevel(samples=averaged, dt=dt, start_s=0.5 * (width - 1) * dt)


#: An outer cycle's mark is saturated when the middle half of it averages at least this share
#: of the way from the background to the burst level.
_RIDING_FILL = 0.9


def _riding_event(
    x: FloatArray, dt: float, t0: float, inner_s: float, outer_s: float, *, mark_cv: float = 0.0
) -> bool:
    """Whether a longer period is only another transfer riding on the inner rhythm.

    An asynchronous checkpoint every 12 s beside a real DDP job's 0.41 s steps: the steps go on
    through it, and what repeats every 13.2 s is 1.2 s of a saturated link (the live agent
    widened its lock to 13.2 s, with the steps as the inner period). A step made of inner
    bursts is marked otherwise: by a quiet gap (the compute of a ZeRO-3 or FSDP step, a
    pipeline's flush: measured 0-0.5 of the way from the background to the bursts) or by a
    sync burst among compute (gradient accumulation: 0.7). Each outer cycle's mark is its
    longest interval between inner rises (of two inner periods at least); when the middle
    halves of the marks are saturated (``_RIDING_FILL``), the longer period is another flow's
    and the steps are the inner period. Inner periods under 8 samples are not timed: no test.
    With ``mark_cv``, the marks' lengths must also spread at least that much: a timer's
    transfer starts anywhere within a step (the real checkpoint's marks: 5 %), a step's own
    saturating sync burst always after the same inner burst (a tensor-parallel job's gradient
    all-reduce after its last layer: 1 %).
    """
    if inner_s / dt < 8:
        return False
    timing = edge_timing(x, dt, inner_s, t0=t0)
    if timing is None or timing.rising_s.size < 4:
        return False
    rises = timing.rising_s
    gaps = np.diff(rises)
    cycles = int((rises[-1] - rises[0]) // outer_s)
    if cycles < 2:
        return False
    lo, hi = two_means(x)
    if hi <= lo:
        return False
    fills: list[float] = []
    lengths: list[float] = []
    for k in range(cycles):
        begin = rises[0] + k * outer_s
        inside = np.flatnonzero((rises[:-1] >= begin) & (rises[:-1] < begin + outer_s))
        if inside.size == 0:
            continue
        j = int(inside[np.argmax(gaps[inside])])
        if gaps[j] < 2.0 * inner_s:
            continue
        lengths.append(float(gaps[j]))
        a = float(rises[j]) + 0.25 * float(gaps[j])
        i0 = max(0, math.ceil((a - t0) / dt))
        i1 = min(x.size, math.floor((a + 0.5 * float(gaps[j]) - t0) / dt))
        if i1 > i0:
            fills.append((float(np.mean(x[i0:i1])) - lo) / (hi - lo))
    if len(fills) < 2 or float(np.median(fills)) < _RIDING_FILL:
        return False
    return mark_cv <= 0.0 or float(np.std(lengths) / np.mean(lengths)) >= mark_cv


#: Spread of the marks' lengths above which a saturated mark that won a level outright is a
#: timer's transfer (:func:`_steps_under`).
_TIMER_MARK_CV = 0.04


def _steps_under(
    x: FloatArray,
    dt: float,
    t0: float,
    found: LevelDetection,
    prepared: _Level | None,
    cfg: DetectorSettings,
    *,
    tested: float | None = None,
) -> LevelDetection | None:
    """The steps, where a transfer riding on them won a level's choice of period outright.

    Each level reports one period: where a checkpoint's saturated stretch holds more of the
    variance than the steps, the finest level itself picks the checkpoint's period (synthetic
    checkpoints of 1.0-1.2 s every 7.7 or 10.3 s over 0.4-0.5 s steps), and no inner period is
    left to test; or the walk's inner period is two steps, read on a level where they alias
    (every 8.3 s over 0.5 s steps). A clear rhythm inside that period (:func:`_inner_spacing`)
    that it rides on (:func:`_riding_event`, marks spreading ``_TIMER_MARK_CV`` or more: no
    walk vouched for this rhythm, and a tensor-parallel job's step read as its 12.5 ms layers
    without it) is detected on the finest level on its own, and is T. A rhythm within 1.5
    times the walk's inner period (``tested``) is the one :func:`_riding_event` has just
    timed: it is not timed again (1.2-1.5 ms more per nested window, a ZeRO-3 or 1F1B job's
    every hop).
    """
    spacing = _inner_spacing(prepared, found.period_s, dt)
    if spacing is None or (tested is not None and tested / 1.5 < spacing < 1.5 * tested):
        return None
    if not _riding_event(x, dt, t0, spacing, found.period_s, mark_cv=_TIMER_MARK_CV):
        return None
    det = detect_level(
        x[-cfg.level_samples :],
        dt,
        level=0,
        lag_lo=cfg.min_lag_level0,
        lag_hi=math.ceil(1.5 * spacing / dt),
        settings=cfg,
        prepared=prepared,
    )
    if det is None or not det.valid or abs(det.period_s / spacing - 1.0) > 0.1:
        return None
    return det


def _locked_outer(
    expected_s: float,
    detections: list[LevelDetection],
    pyramid: list[PyramidLevel],
    prepared: list[_Level | None],
    cfg: DetectorSettings,
    t0: float,
) -> LevelDetection | None:
    """The locked period as the outer one, when a window shows a period far shorter than it.

    A real FSDP job's layer rhythm (one all-gather every 0.11 s through the backward pass)
    stays significant in every window, while 7 % step jitter holds its 1.4 s step under the
    bar in some: such a window's own verdict is the layer spacing, and two of them in a row
    re-locked the tracker from the step onto the layers. Given the lock, the question is only
    which scale is the iteration: the lock stays when :func:`_held` vouches for it, or a
    level's candidate near it repeats with a comb of ``moderate_comb`` and z of
    ``strong_z_min`` over ``few_cycles``; the short period becomes the inner one.
    """
    held = _held(expected_s, detections, pyramid, prepared, cfg, t0)
    if held is not None:
        return held
    return _near_candidate(expected_s, detections, cfg, comb=cfg.moderate_comb, z=cfg.strong_z_min)


def filled(rate: FloatArray, least: int = 32) -> FloatArray | None:
    """The rate with unknown (NaN) slots at its mean; None under ``least`` known slots."""
    x = np.asarray(rate, dtype=np.float64)
    finite = np.isfinite(x)
    if finite.sum() < least:
        return None
    return np.where(finite, x, float(np.mean(x[finite])))


def whole_multiple(period_s: float | None, step_s: float, *, at_most: int | None = None) -> bool:
    """Whether ``period_s`` is 2, 3, ... (up to ``at_most``) times ``step_s`` (within 3 %)."""
    if period_s is None:
        return False
    k = round(period_s / step_s)
    if at_most is not None and k > at_most:
        return False
    return k >= 2 and abs(period_s / (k * step_s) - 1.0) <= 0.03


def estimate_period(
    rate: FloatArray,
    dt: float,
    *,
    t0: float = 0.0,
    min_period_s: float | None = None,
    max_period_s: float | None = None,
    settings: DetectorSettings | None = None,
    untimed: BoolArray | None = None,
    expected_period_s: float | None = None,
    polled: bool = True,
) -> PeriodResult:
    """Estimate the sync period of a uniformly sampled rate series.

    Args:
        rate: bytes/s (or any rate) per grid slot; NaN marks unknown slots.
        dt: grid step in seconds.
        t0: time of the start of the first slot (edge times are reported on this axis).
        min_period_s: shortest period to look for (default: 4 samples).
        max_period_s: longest period to look for (default: a third of the series).
        settings: detector thresholds.
        untimed: slots whose bytes are known but not when within them they moved (spread
            over a long poll interval): no burst edge is timed next to them.
        expected_period_s: the period a live tracker has locked, if any: when no level
            detects a period, regular burst edges at about this one keep it
            (:func:`_held`); when a level detects one 3× shorter or less, evidence for the
            locked one keeps it as the outer period (:func:`_locked_outer`).
        polled: the series comes from polls (counters); False for bins of exactly timed
            events (an NCCL log's stamped calls), which no faster poll would make finer.
    """
    cfg = settings or DetectorSettings()
    x = filled(rate)
    if x is None:
        return PeriodResult(None, 0.0, warnings=("too few samples to look for a period",))

    fewest = cfg.min_level_samples if expected_period_s is not None else cfg.cold_min_level_samples
    pyramid = build_pyramid(x, dt, factor=cfg.decimation, min_samples=fewest)
    detections: list[LevelDetection] = []
    prepared: list[_Level | None] = []
    for level, lv in enumerate(pyramid):
        window = lv.samples[-cfg.level_samples :]
        prepared.append(_prepare(window))
        lo = cfg.min_lag_level0 if level == 0 else cfg.min_lag
        if min_period_s is not None:
            lo = max(lo, math.ceil(min_period_s / lv.dt))
        hi = None if max_period_s is None else int(max_period_s / lv.dt)
        det = detect_level(
            window, lv.dt, level=level, lag_lo=lo, lag_hi=hi, settings=cfg,
            prepared=prepared[-1],
        )  # fmt: skip
        if det is not None:
            detections.append(det)

    valid = _short_levels_last(
        _without_few_cycle_multiples([d for d in detections if d.valid], cfg), pyramid, cfg
    )
    if not valid:
        rescued = _confirmed_by_edges(detections, pyramid, cfg, t0)
        if rescued is None and expected_period_s is not None:
            rescued = _held(expected_period_s, detections, pyramid, prepared, cfg, t0)
        if rescued is None:
            rescued = _steady_steps(detections, pyramid, prepared, cfg, t0)
        valid = [rescued] if rescued is not None else []
    if not valid:
        stepped = _trains_rescue(detections, pyramid, cfg, t0, t0 + x.size * dt)
        if stepped is not None:
            return stepped
        best = max(detections, key=lambda d: d.z, default=None)
        return PeriodResult(
            None,
            0.0,
            z=best.z if best else 0.0,
            comb=best.comb if best else 0.0,
            detections=tuple(detections),
        )

    # Walk fine → coarse: a coarser period ≥ 3× the current one at which the current one no
    # longer shows is the iteration period; the current one becomes its inner period.
    current = _lattice_divisor(valid, pyramid, prepared) or valid[0]
    inner: LevelDetection | None = None
    for det in valid[1:]:
        ratio = det.period_s / current.period_s
        if ratio < 3.0 or ratio > cfg.max_inner_ratio:
            continue
        if _visible(prepared[det.level], current.period_s / det.dt, det.comb):
            continue
        if _beyond_inner(pyramid, prepared, det, current.period_s) is False:
            continue
        if not _confirmed(pyramid[det.level - 1], det, cfg):
            continue
        inner, current = current, det
    if inner is not None:
        current = _clearer_divisor(valid, current, inner)
    if inner is None:
        outer = _envelope_outer(x, dt, current, cfg)
        if outer is not None:
            inner, current = current, outer
    if (
        expected_period_s is not None
        and inner is None
        and current.period_s * 3.0 <= expected_period_s
    ):
        outer = _locked_outer(expected_period_s, detections, pyramid, prepared, cfg, t0)
        if outer is not None:
            inner, current = current, outer
    if inner is not None and _riding_event(x, dt, t0, inner.period_s, current.period_s):
        current, inner = inner, None
    else:
        # The walk's inner period may be a multiple of the steps (two of them, on a level
        # where they alias): the finest level's own rhythm is tried as well.
        tested = inner.period_s if inner is not None else None
        steps = _steps_under(x, dt, t0, current, prepared[0], cfg, tested=tested)
        if steps is not None:
            current, inner = steps, None

    if current.period_s / dt < 8:
        share = _occupancy(x, dt, current.period_s)
        if share < cfg.min_occupancy:
            return _rejected(
                current,
                detections,
                f"a {current.period_s * 1e3:.3g} ms rhythm holds a burst in only {share:.0%} of "
                "its cycles: it is structure inside bursts, and the window shows no longer period",
            )

    period = current.period_s
    method = "nsdf"
    cv: float | None = None
    rising: FloatArray | None = None
    # Edge refinement on the finest level where the main bursts come about once per period
    # (for a layer train that is a coarse level, where the train has merged into one burst).
    # Bursts that repeat irregularly at one level are looked at on the coarser ones before
    # the period is rejected: gaps of a few fine samples inside a burst (a sender stalled for
    # a millisecond, frames of a capture sparser than its bins) split it into pieces that the
    # decimation merges again, while irregular repetition stays irregular at every level.
    irregular: EdgeTiming | None = None
    irregular_method = "edges"
    weak_nsdf = max(d.comb for d in valid) < cfg.moderate_comb
    accepted: EdgeTiming | None = None
    series = [(level, lv) for level, lv in enumerate(pyramid) if period / lv.dt >= 8]
    # Trains of inner bursts, each read as one burst: first when the walk found the inner
    # period; else last, when the finest level repeats clearly within the period.
    spacing = inner.period_s if inner is not None else _inner_spacing(prepared[0], period, dt)
    trains = _train_level(x, dt, spacing) if spacing is not None and series else None
    if trains is not None:
        series.insert(0 if inner is not None else len(series), (current.level, trains))
    for level, lv in series:
        samples = lv.samples
        if untimed is not None and lv is pyramid[0] and untimed.size == samples.size:
            samples = np.where(untimed, np.nan, samples)
        timing = edge_timing(samples, lv.dt, period, t0=t0 + lv.start_s)
        timing_method = "edges"
        if timing is None and lv is pyramid[0]:
            timing = pulse_timing(samples, lv.dt, period, t0=t0 + lv.start_s)
            timing_method = "pulses"
        if timing is not None and timing.bursts_per_period < 0.6 and timing_method == "edges":
            # Fewer bursts than periods: bursts of two heights may have left the lower ones
            # under the edges' levels (a third of the steps' collective at 0.4 of the rate:
            # the others alone timed T 14 % short). Their lowest tier is timed instead, where
            # it gives steps (irregular ones would reject a period the other levels or the
            # calls may still confirm: a MoE log's 3 T, which its calls' order overrules).
            tiered = _tier_timing(samples, lv.dt, period, t0 + lv.start_s)
            if (
                tiered is not None
                and 0.6 <= tiered.bursts_per_period <= 1.4
                and (_steady(tiered, cfg) or _regular(tiered, cfg))
            ):
                timing = tiered
        if timing is not None and 1.6 <= timing.bursts_per_period <= 2.4 and _steady(timing, cfg):
            # Two equal bursts a period, at a steady pace: the lag took two steps for one
            # (steps of 2.0 or 2.7 s at random, as a collective at full or half rate makes
            # them, read as 4.7 s: the two-step lags pile up at one sum, each single step's
            # split in two). Their own mean interval is the step.
            retimed = edge_timing(samples, lv.dt, timing.step_period_s, t0=t0 + lv.start_s)
            if retimed is not None and _steady(retimed, cfg):
                period, timing = timing.step_period_s, retimed
        if timing is None or not 0.6 <= timing.bursts_per_period <= 1.4:
            continue
        held_steps = (
            expected_period_s is not None
            and weak_nsdf
            and _steady_hold(timing, expected_period_s, cfg)
        )
        # Equal bursts, one a step, spreading as a job's steps may: irregular only against a
        # lag that leans to the commonest step. Steps of two lengths (a collective at full or
        # half rate, at random: 2.0 and 2.7 s) put the lag at the shorter one, 15 % short,
        # and every longer step off it; their own mean interval is the step.
        steady = held_steps or (
            (weak_nsdf or timing.mass_cv <= cfg.equal_mass_cv) and _steady(timing, cfg)
        )
        if not steady and not _regular(timing, cfg):
            if irregular is None:
                irregular, irregular_method = timing, timing_method
            continue
        # Edges that disagree with the period are pieces of bursts, as above, unless they are
        # steady steps under a weak NSDF (under a wide step spread its lag leans to the
        # commonest step; a clear comb, as heavy noise on regular steps leaves it, is right),
        # or agree with their own level's detection of it: pauses in the window (evaluation,
        # checkpoints) move each level's lag differently (0.63, 0.65, 0.73 s on a real job of
        # 0.681 s steps, whose edges read 0.681 s on the level that found 0.65 s).
        own = [
            d.period_s for d in valid if d.level == level and abs(d.period_s / period - 1.0) <= 0.1
        ]
        if not any(abs(timing.period_s / p - 1.0) <= 0.05 for p in own) and not (
            abs(timing.period_s / period - 1.0) <= (cfg.hold_tolerance if steady else 0.05)
            or (steady and abs(timing.step_period_s / period - 1.0) <= cfg.max_interval_cv)
        ):
            continue
        if accepted is not None and not timing.interval_cv < 0.5 * accepted.interval_cv:
            break  # the finer level's edges were as regular: they time it more finely
        accepted = timing
        method = timing_method
        if timing.interval_cv <= cfg.fragment_cv:
            break
        # Intervals that spread this much may be pieces of bursts too: one level coarser,
        # whole bursts repeat far more regularly than pieces do, while true jitter stays.
    if accepted is not None:
        period = accepted.period_s
        if accepted.step_cv > cfg.rescue_max_cv and (
            _steady(accepted, cfg)
            or (expected_period_s is not None and _steady_hold(accepted, expected_period_s, cfg))
        ):
            period = accepted.step_period_s
        cv = accepted.interval_cv
        rising = accepted.rising_s
    if irregular is not None and rising is None:
        return _rejected(
            current,
            detections,
            "bursts repeat too irregularly to call it a period",
            interval_cv=irregular.interval_cv,
            method=irregular_method,
            irregular_rhythm_s=current.period_s,
        )

    in_trains = (
        accepted is not None
        and inner is None
        and train_verdict(accepted.rising_s, accepted.falling_s, period, t0, t0 + x.size * dt)
        == "trains"
    )
    if in_trains and accepted is not None:
        outer_s = train_period(accepted.rising_s, accepted.falling_s, period)
        if outer_s is not None:
            return _train_result(outer_s, period, accepted, detections, cfg)
        # Unlocked, even a train or two and their silence are reason enough to wait for the
        # step; locked on this rhythm, only trains that start as regularly as steps do undo
        # it (the silence in a locked window is more often a pause).
        regular = train_starts(accepted.rising_s, accepted.falling_s, period).size >= 3
        in_trains = expected_period_s is None or regular
    if in_trains:
        return _rejected(
            current,
            detections,
            f"bursts {period * 1e3:.3g} ms apart come in trains with long silences between "
            "them: that is a rhythm inside a longer step (bucketed all-reduces, layers), whose "
            "own period the window does not show yet",
            interval_cv=cv,
            method=method,
            train_rhythm_s=period,
        )

    if current.cycles < cfg.outer_min_cycles and method == "nsdf":
        # Few cycles are enough only when the burst edges confirm about one main burst per
        # period: otherwise a multiple of a period too smeared to be seen can pass for one.
        return _rejected(
            current,
            detections,
            f"only {current.cycles:.1f} cycles in the window and no regular burst edges to "
            "confirm them",
        )

    # Confidence from the clearest level that sees the same period (the finest one can be
    # the noisiest: narrow bursts under jitter smear its NSDF peaks).
    agreeing = [d for d in valid if abs(d.period_s / period - 1.0) <= 0.03] or [current]
    clearest = max(agreeing, key=lambda d: d.comb * min(1.0, d.z / 20.0))
    warnings: list[str] = []
    if period / dt < 8 and polled:
        warnings.append(
            f"period is {period / dt:.1f} samples at the poll rate; under 8 samples per period "
            "an alias cannot be told from a true period: poll faster"
        )
    if inner is not None and inner.period_s / dt < 2 * cfg.min_lag_level0:
        warnings.append(
            f"inner period is {inner.period_s / dt:.1f} samples at the poll rate: periods under "
            f"{cfg.min_lag_level0} samples are not looked for, so it may be a multiple of the "
            "true layer spacing (the NCCL log's layer gap is exact): poll faster"
            if polled
            else f"inner period is {inner.period_s / dt:.1f} bins of the {dt * 1e3:.3g} ms the "
            f"NCCL log's calls were binned at: rhythms under {cfg.min_lag_level0} bins are not "
            "looked for, so it may be a multiple of the true layer spacing"
        )
    return PeriodResult(
        period_s=period,
        confidence=_confidence(clearest, cv, cfg),
        inner_period_s=inner.period_s if inner else None,
        cycles=current.cycles,
        z=current.z,
        comb=current.comb,
        interval_cv=cv,
        method=method,
        level=current.level,
        warnings=tuple(warnings),
        detections=tuple(detections),
        rising_edges_s=rising,
    )
