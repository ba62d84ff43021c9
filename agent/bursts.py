"""Burst bandwidth B, duty cycle D and bytes per iteration V of a rate series.

Estimators (research/period_estimation.md §3.6):

* samples are classified on/off against the midpoint of the two levels (2-means), smoothed
  first only when the noise would otherwise flip samples (and not where smoothing would merge
  a train of transfers about two samples long, such as a pipeline stage's micro-batches);
* both masks are eroded so that samples straddling a burst edge (counter semantics: a partial
  value) never enter either level — this is what makes B unbiased by edges;
* **B** = mean of the on-core: the link rate while a burst is in progress (the mean, not the
  median: background traffic is skewed, and B·D·T must add up to the bytes moved);
* **D** = (mean − off) / (on − off) with *means* of the cores: energy conservation, so every
  burst counts, including micro-bursts and layer trains, and every straddling sample counts
  exactly by its share;
* **V** = (mean − off) · T: bytes per iteration, identifiable even when bursts are shorter
  than a sample (then B and D are not, and are reported as unresolved; the off level is then
  a clipped mean, as transfers' slow lead-ins fall into the off class).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.levels import boxcar, erode, level_noise, separation, two_means
from agent.quantiles import median
from agent.rates import PollIntervals, on_runs

__all__ = [
    "MIN_CORE_SAMPLES",
    "BurstStats",
    "burst_stats",
    "clear_spikes",
    "on_runs",
    "poll_cores",
    "step_silence",
    "whole_burst_levels",
]

FloatArray = npt.NDArray[np.float64]

#: Fewest on-core samples for which a median is called a burst bandwidth.
MIN_CORE_SAMPLES = 3


@dataclass(frozen=True)
class BurstStats:
    """On/off structure of a rate series. ``None`` means "cannot be told from this data"."""

    burst_bandwidth: float | None
    off_level: float
    on_level: float
    on_ratio: float | None
    mean_rate: float
    bytes_per_period: float | None
    bursts: int
    mean_burst_s: float | None
    mean_gap_s: float | None
    resolved: bool
    reliable: bool
    noise: float
    on_mask: npt.NDArray[np.bool_] | None = None

    @property
    def has_bursts(self) -> bool:
        """True when an on level stands clearly above the background."""
        return self.on_ratio is not None and self.bursts > 0


def clear_spikes(rate: FloatArray, level: float) -> int:
    """Runs of polls at ``level`` or over that stand clear of the rest (0 if they do not).

    Transfers that each fit in a poll show as single polls far above a near-empty line (a real
    inference service read at 10-20 Hz: 200-280 polls over 10 MB/s, 27-37 between 5 and 10).
    The tail of a noisy background reaches the level too, but its polls thin out towards it:
    a simulated idle host's noise put about 110 polls over 10 MB/s and 700 between 5 and 10.
    Runs count only where the polls at the level outnumber those from half of it up to it.
    """
    high = rate >= level
    above = int(np.count_nonzero(high))
    near = int(np.count_nonzero((rate >= 0.5 * level) & ~high))
    if above == 0 or above <= near:
        return 0
    return int(on_runs(high)[0].size)


def step_silence(on: npt.NDArray[np.bool_], dt: float, period_s: float) -> float | None:
    """The longest silence of a typical step, as a share of the step (None: under 2 steps).

    A window of K whole steps holds each step's longest silence among its K longest off runs:
    their median, over T, is the typical one (0 when the traffic never stops). DDP's bucketed
    all-reduces leave the forward pass silent (a real job: 0.38 of the step), where ZeRO-3 /
    FSDP gathers each layer's parameters through the forward pass too (real FSDP: 0.04).
    """
    steps = int(on.size * dt / period_s) if period_s > 0 else 0
    if steps < 2:
        return None
    starts, ends = on_runs(~on)
    return typical_longest((ends - starts).astype(np.float64), steps) * dt / period_s


def typical_longest(lengths: FloatArray, steps: int) -> float:
    """The typical step's longest of ``lengths`` (silences), without knowing the steps' phase.

    A window of ``steps`` whole steps holds each step's longest among the ``steps`` longest:
    their median (a step with none counts 0).
    """
    longest = np.zeros(steps)
    runs = np.sort(lengths)[::-1][:steps]
    longest[: runs.size] = runs
    return float(np.median(longest))


def largest_burst_share(
    rate: FloatArray, on: npt.NDArray[np.bool_], dt: float, period_s: float, off_level: float
) -> float | None:
    """The share of the bursts' bytes that the largest burst of each step carries.

    Like :func:`step_silence`, without a phase: a window of K steps holds each step's largest
    burst among its K largest, whose bytes (above the background) over all the bursts' are the
    share (None: under 2 steps, or no bytes). A step of one sync burst reads near 1, a DDP
    step's buckets 0.2-0.9, ZeRO-3 / FSDP's layer trains about one over the layers' calls.
    """
    steps = int(on.size * dt / period_s) if period_s > 0 else 0
    if steps < 2:
        return None
    starts, ends = on_runs(on)
    if starts.size == 0:
        return None
    above = np.concatenate(([0.0], np.cumsum(np.clip(np.nan_to_num(rate) - off_level, 0.0, None))))
    sizes = above[ends] - above[starts]
    total = float(sizes.sum())
    if total <= 0:
        return None
    return float(np.sort(sizes)[::-1][:steps].sum()) / total


def poll_cores(
    polls: PollIntervals,
    lo: float,
    contrast: float,
    start: float,
    end: float,
    nominal: float,
    rel_noise: float,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """On- and off-core poll intervals between ``start`` and ``end``: (rates, durations) each.

    A grid slot is a time-weighted mix of the poll intervals it overlaps. When polls are
    jittered, the interval that holds a burst edge (a partial rate) can be longer than a slot
    and fill a slot that one-slot erosion keeps, biasing B low. Classified and eroded as
    intervals instead, the partial interval is always the first or last of its run (or an
    outer neighbour of it) and never enters a core; a run's end enters it when its outer
    neighbour is the partial one (:func:`_whole_ends`; ``rel_noise``: the noise over the
    contrast). Intervals longer than two nominal ones
    are left out of both cores: one can hold a whole short burst and still read as "off".
    """
    times, rate = polls.times, polls.rate
    spans = np.diff(times)
    inside = (times[:-1] >= start - 1e-9 * nominal) & (times[1:] <= end + 1e-9 * nominal)
    known = inside & np.isfinite(rate)
    u = (np.where(known, rate, lo) - lo) / contrast
    usable = spans <= 2.0 * nominal
    on = known & (u >= 0.5)
    off = known & (u < 0.5)
    on_core = erode(on, 1) | _whole_ends(
        on, known & ~on & (u >= _EDGE_SHARE), u >= 1.0 - 3.0 * rel_noise
    )
    off_core = erode(off, 1) | _whole_ends(off, on & (u <= 1.0 - _EDGE_SHARE), u <= 3.0 * rel_noise)
    on_core &= usable
    off_core &= usable
    return rate[on_core], spans[on_core], rate[off_core], spans[off_core]


def _whole_ends(
    run: npt.NDArray[np.bool_], holds_edge: npt.NDArray[np.bool_], level: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """End polls of ``run``'s stretches that are whole: the poll outside holds the edge.

    An edge falls inside one poll, which reads partial (``holds_edge``): the run's poll next to
    it is then wholly on (or off). That neighbour's own reading decides, not the end's (whose
    noise would select itself), and the end must read as its level does (``level``: a
    transfer's slow lead-in is a ramp of partial polls). Bursts of 3 polls keep about 1.5 of
    their 2 whole polls instead of 1 (benchmark S4: B's median error 1.21 -> 0.97 %).
    """
    beside = run | holds_edge
    before = np.concatenate(([False], beside[:-1]))
    after = np.concatenate((beside[1:], [False]))
    return run & before & after & level


#: A poll reading at least this share of the way from the background to the bursts holds part
#: of a burst (2.5 noise σ of the benchmark's noisiest in-spec scenario, 0.1 of the height).
_EDGE_SHARE = 0.25


def _structured(values: FloatArray, lo: float, hi: float) -> bool:
    """Whether the high samples come in runs, as bursts do, rather than scattered at random.

    I.i.d. heavy-tailed background has spikes but no runs: with a fraction p of samples high,
    runs are geometric and average 1/(1-p) samples, with a standard error of
    √p / (1-p) / √n over n runs. Without a period to vouch for it, bursts must beat that
    clearly: 1.75 times the i.i.d. mean, at least 2 samples, and 6 standard errors above it.
    (Twice the mean missed a real inference service in a capture binned at 20 ms: replies of
    0.5-4 MB at 48 MB/s averaged 2.62 bins a run against 2.66 needed, 1.33 for i.i.d.)
    Used only when no period was found.
    """
    high = values >= 0.5 * (lo + hi)
    p = float(high.mean())
    if p <= 0.0 or p >= 1.0:
        return False
    starts, ends = on_runs(high)
    mean_run = float(np.mean(ends - starts))
    iid = 1.0 / (1.0 - p)
    standard_error = math.sqrt(p) / (1.0 - p) / math.sqrt(starts.size)
    return mean_run >= max(2.0, 1.75 * iid, iid + 6.0 * standard_error)


#: Share of a smoothed burst's samples that may sit near the background (under a quarter of
#: the height) before the "burst" is called a train of transfers: Gaussian plateau noise of
#: up to 0.35 of the height puts under 2 % of the samples there.
_TRAIN_DIP_SHARE = 0.1


def _merged_train(u_core: FloatArray, rel_noise: float) -> bool:
    """Whether smoothing would merge separate short transfers into one apparent burst.

    Smoothing is for noisy plateaus: their samples scatter around the on level and fall near
    the background only in the noise's far tail. A pipeline stage's micro-batch transfers
    (each about two polls, as long again between them) also read as "noise" (a full sample
    next to a partial one), and the smoothed run then spans the whole train: its mean is the
    train's average, B came out a third to a half of the wire rate and D two to four times too
    high. Such a run holds many samples back at the background level.
    """
    if u_core.size < MIN_CORE_SAMPLES:
        return False
    dips = int(np.count_nonzero(u_core < 0.25))
    if dips < MIN_CORE_SAMPLES:
        return False
    expected = 0.5 * math.erfc(0.75 / max(rel_noise, 1e-12) / math.sqrt(2.0))
    share = dips / u_core.size
    return share >= _TRAIN_DIP_SHARE and share >= 3.0 * expected


#: Highest relative noise at which raw samples may be classified when smoothing would leave no
#: burst core: a sample of a plateau then falls below half height in about 2 % of cases.
_RAW_CLASSIFY_NOISE = 0.25

#: Share of the smoothed bursts' samples that must survive as their core for the smoothing to
#: stand: wide noisy plateaus keep most of theirs, while transfers two polls long are smeared
#: into runs whose core is a few stray samples (a real pipeline stage: 5 of 281, whose mean
#: read B at half the wire rate and D 0.46 against 0.22).
_MIN_CORE_SHARE = 0.1


def _smoothing_width(
    u: FloatArray,
    finite: npt.NDArray[np.bool_],
    rel_noise: float,
    dt: float,
    period_s: float | None,
) -> tuple[int, FloatArray]:
    """The boxcar width that brings plateau noise to 0.1 of the contrast, and ``u`` smoothed.

    Width 1 is no smoothing. The noise estimate cannot tell noise from bursts about two samples
    long (a full sample next to a partial one), so the smoothing is dropped again where it
    would merge a train of such transfers (:func:`_merged_train`), or where it leaves almost no
    burst core while the raw samples have one and the noise is low enough to classify them
    one by one.
    """
    if rel_noise <= 0.1:
        return 1, u
    width = max(1, round((rel_noise / 0.1) ** 2))
    if period_s is not None:
        width = min(width, max(1, int(period_s / dt / 8)))
    if width == 1:
        return 1, u
    smoothed = boxcar(u, width)
    smoothed_core = erode((smoothed >= 0.5) & finite, width // 2 + 1)
    if _merged_train(u[smoothed_core], rel_noise):
        return 1, u
    smoothed_on = np.count_nonzero((smoothed >= 0.5) & finite)
    if (
        np.count_nonzero(smoothed_core) < max(MIN_CORE_SAMPLES, _MIN_CORE_SHARE * smoothed_on)
        and rel_noise <= _RAW_CLASSIFY_NOISE
        and np.count_nonzero(erode((u >= 0.5) & finite, 1)) >= MIN_CORE_SAMPLES
    ):
        return 1, u
    return width, smoothed


#: Longest dip (samples) that a late counter update can explain: a stalled driver refresh or
#: counter writer of up to ~0.15 s at 100 Hz.
_MAX_LAG_SAMPLES = 16


def _bridge_late_counts(
    on: npt.NDArray[np.bool_], u: FloatArray, finite: npt.NDArray[np.bool_], rel_noise: float
) -> npt.NDArray[np.bool_]:
    """``on`` with dips inside a burst that a late counter update explains marked on again.

    A counter refreshed late (a driver that folds its statistics on a timer, a cached
    ``hw_counters`` read, a stalled writer) reads flat for a poll or two in mid-burst and then
    jumps by the bytes it missed: the burst looks split in two, and burst counts, sizes and
    arrival rates go wrong. The bytes give it away: the samples right after the dip exceed the
    burst's level by about what the dip lacked, and then the level drops back. A real gap
    between two transfers has no such catch-up (the link cannot run above its rate), and a
    faster transfer after a gap keeps its higher level, so neither is bridged.

    Args:
        on: on-mask of the series.
        u: the raw series scaled to 0 (off level) .. 1 (on level).
        finite: which samples are known (dips with unknown samples are never bridged).
        rel_noise: plateau noise over the contrast (how far above the level a catch-up peaks).
    """
    starts, ends = on_runs(on)
    if starts.size < 2:
        return on
    dip_start, dip_end = ends[:-1], starts[1:]
    length = dip_end - dip_start
    # The catch-up may straddle a poll (a partial sample first): look (length + 2) samples on.
    catch_end = np.minimum(dip_end + length + 2, ends[1:])
    short = np.flatnonzero(length <= _MAX_LAG_SAMPLES)
    if not finite.all():
        missing = np.concatenate(([0], np.cumsum(~finite)))
        # No unknown slot in the dip.
        short = short[missing[dip_end[short]] == missing[dip_start[short]]]
    if not short.size:
        return on
    # Cheap screen against the on level before the closer look at each candidate: the
    # catch-up must hold at least a quarter of the bytes the dip lacked. Dips and catch-ups
    # are a few samples each, gathered as rows (a cumulative sum of the whole series cost
    # more than the rest of this function on a long window).
    steps = np.arange(_MAX_LAG_SAMPLES + 2)[None, :]
    last = u.size - 1

    def rows(first: npt.NDArray[np.int64], stop: npt.NDArray[np.int64]) -> FloatArray:
        at = first[:, None] + steps
        vals = u[np.minimum(at, last)]
        out: FloatArray = np.where((at < stop[:, None]) & np.isfinite(vals), vals, 0.0)
        return out

    deficit = np.where(
        steps < length[short][:, None], 1.0 - rows(dip_start[short], dip_end[short]), 0.0
    ).sum(axis=1)
    excess = np.maximum(rows(dip_end[short], catch_end[short]) - 1.0, 0.0).sum(axis=1)
    candidates = short[(deficit > 0) & (excess >= 0.25 * deficit)]
    if not candidates.size:
        return on
    out = on.copy()
    spread = max(0.25, 3.0 * rel_noise)
    for i in candidates:
        a, b, c = int(dip_start[i]), int(dip_end[i]), int(catch_end[i])
        before = u[max(int(starts[i]), a - 4) : a]
        before = before[np.isfinite(before)]
        # The burst's level: never under the on level (short runs are mostly edge samples).
        level = max(1.0, float(np.median(before))) if before.size else 1.0
        lack = float(np.sum(level - u[a:b]))
        catch = u[b:c]
        extra = float(np.nansum(np.maximum(catch - level, 0.0)))
        if float(np.nanmax(catch)) < level + spread or extra < 0.5 * lack:
            continue
        after = u[c : min(int(ends[i + 1]), c + 4)]
        after = after[np.isfinite(after)]
        if after.size:
            if float(np.median(after)) - level > spread:
                continue  # a faster transfer going on, not a catch-up back to this one
        elif extra > 2.0 * lack:
            continue  # a short, faster transfer rather than the missed bytes
        out[a:b] = True
    return out


#: An off level this share of the burst height above the quietest phase of the step is a
#: lower tier of the step's own bursts, not background (:func:`_step_floor`).
STEP_TIER = 0.02
#: Phase bins of the folded step, and the fewest samples each must average.
_FOLD_BINS = 64
_FOLD_MIN_SAMPLES = 20


def _step_floor(
    x: FloatArray,
    finite: npt.NDArray[np.bool_],
    dt: float,
    t0: float,
    period_s: float,
    noise: float,
    off_level: float,
    on_level: float,
) -> float | None:
    """The rate in the quietest phases of the step: the background the bursts stand on.

    Everything under the two levels' midpoint was "off": a step whose AllReduce runs at
    20 GB/s and whose AllGather at 8 GB/s put the AllGather in the background (0.9 GB/s of
    made-up background, D 0.17 against 0.27 and bytes per step 22 % low). Folded at the step,
    a background that is not the job's spreads evenly over the phases, while the step's own
    lower bursts keep to theirs: the 10th percentile of the phase bins' means is the
    background when ``off_level`` stands above it by ``STEP_TIER`` of the burst height and
    four σ of a bin's mean. None otherwise, or when the window is too short to fill the bins.
    """
    n = int(np.count_nonzero(finite))
    bins = min(_FOLD_BINS, int(period_s / dt), n // _FOLD_MIN_SAMPLES)
    if bins < 8:
        return None
    # (t0 + (i + 0.5) dt) / T, then np.mod(., 1.0) bit for bit, in place: a 64 k window
    # spent a millisecond here on temporaries and np.mod's sign fix-ups.
    phase = np.arange(x.size, dtype=np.float64)
    phase += 0.5
    phase *= dt
    phase += t0
    phase /= period_s
    phase -= np.floor(phase)
    phase *= bins
    everywhere = n == x.size
    k = np.minimum((phase if everywhere else phase[finite]).astype(np.int64), bins - 1)
    counts = np.bincount(k, minlength=bins)
    if int(counts.min()) < _FOLD_MIN_SAMPLES:
        return None
    means = np.bincount(k, weights=x if everywhere else x[finite], minlength=bins) / counts
    floor = float(np.percentile(means, 10.0))
    margin = max(STEP_TIER * (on_level - off_level), 4.0 * noise / math.sqrt(float(counts.min())))
    return floor if off_level - floor > margin else None


def _clipped_mean(values: FloatArray, sigmas: float = 3.0) -> float:
    """Mean of the values within ``sigmas`` robust σ (MAD) of their median.

    The background under bursts too short to resolve: its class also catches the slow lead-in
    of transfers that start at a fraction of the wire rate (a real pipeline stage's gradients:
    2-5 polls at 0.05-0.45 of it before each), which the plain mean counted as background
    (2.7 MB/s against 0.05, and bytes per step 22 % low). Noise around the background stays.
    """
    centre = median(values)
    spread = 1.4826 * median(np.abs(values - centre))
    kept = values[np.abs(values - centre) <= sigmas * spread] if spread > 0 else values
    return float(kept.mean()) if kept.size else centre


def _half_sample_mode(values: FloatArray) -> float:
    """The densest value of a sample (Bickel's half-sample mode).

    The narrowest half of the sorted values, again and again: robust to a skewed tail and to
    a second, smaller cluster beside the mode.
    """
    v = np.sort(values)
    while v.size > 3:
        half = (v.size + 1) // 2
        i = int(np.argmin(v[half - 1 :] - v[: v.size - half + 1]))
        v = v[i : i + half]
    if v.size == 3:
        v = v[:2] if v[1] - v[0] <= v[2] - v[1] else v[1:]
    return float(v.mean())


#: Spread (robust σ away from the middle) under which the low samples' mode is a floor, or
#: the high samples' a ceiling, as a share of the contrast.
_TIGHT_LEVEL = 0.1


def _tight_level(values: FloatArray, contrast: float, *, floor: bool) -> float | None:
    """The floor the low samples rest on (or the ceiling the high ones reach), if there is one.

    A link idles between transfers at a level that varies by far less than the bursts'
    height, and runs them at its line rate, a ceiling; the samples of the gaps between
    transfers shorter than a poll (partial polls) and of their slow lead-ins all fall in
    between. The half-sample mode finds such a level under them, and its spread is measured
    on the side away from them. Under noise of a sizeable share of the burst height there is
    no such level to read from one sample at a time: on a square wave with Gaussian noise of
    0.3-0.5 of its height, the mode put V up to 38-53 % off (the low samples' mean: 12-60 %
    high).
    """
    mode = _half_sample_mode(values)
    # Samples at the mode count: an idle counter's floor is exact zeros, and is as tight as
    # a floor gets.
    beyond = mode - values[values <= mode] if floor else values[values >= mode] - mode
    if beyond.size < 8:
        return None
    spread = 1.4826 * float(np.median(beyond))
    if spread > _TIGHT_LEVEL * contrast:
        return None
    near = values[np.abs(values - mode) <= 3.0 * spread]
    return float(near.mean()) if near.size else mode


#: Width of the band at the bottom that :func:`_idle_floor` takes for the floor, as a share of
#: the contrast, and the fewest samples it must hold.
_IDLE_BAND = 0.05
_MIN_IDLE_SAMPLES = 5


def _idle_floor(low: FloatArray, contrast: float) -> float | None:
    """The idle floor at the very bottom of the low samples, where the partial polls outnumber it.

    A 16-step window of a real layer-by-layer job holds some 5-20 idle polls (ACKs only, at
    0-0.3 MB/s) under 50 partial ones spread up to the middle: their densest cluster is not
    the floor, and the idle polls are too few for a spread of their own (D was missing on 45 %
    of its locked hops). The samples within ``_IDLE_BAND`` of the contrast from the lowest are
    the floor when they are at least ``_MIN_IDLE_SAMPLES`` and twice as many as in the twice
    as wide band above them: partial polls spread out and do not pile up there, and the far
    tail of noise thins out towards its extreme instead.
    """
    above = low - float(low.min())
    band = _IDLE_BAND * contrast
    at_floor = above <= band
    count = int(np.count_nonzero(at_floor))
    if count < _MIN_IDLE_SAMPLES:
        return None
    if count < 2 * int(np.count_nonzero((above > band) & (above <= 3.0 * band))):
        return None
    return float(low[at_floor].mean())


def _between_levels(
    x: FloatArray,
    finite: npt.NDArray[np.bool_],
    dt: float,
    period_s: float,
    lo: float,
    hi: float,
    noise: float,
) -> BurstStats:
    """B, D and V of periodic traffic whose bursts do not stand clear of what reads as noise.

    The period was found in this very series, so it is not flat; its samples only fail the
    two-level test because many of them fall between the levels: a real 1F1B stage's 2-poll
    transfers after 1-5 polls of slow lead-in (contrast 4.1 σ, separation 4.0), a real
    layer-by-layer job's all-reduces with gaps shorter than a poll (3.4 σ, 3.0). Where the
    low samples rest on a floor, it is the background and V holds (the low samples' mean
    counted the lead-ins: V 23 % low); where the high ones also reach a ceiling, the link's
    rate while busy, that is B, and D is the energy share between the two.
    """
    values = x[finite]
    mean = float(values.mean())
    mid = 0.5 * (lo + hi)
    contrast = hi - lo
    low = values[values < mid]
    floor = _tight_level(low, contrast, floor=True)
    ceiling = _tight_level(values[values >= mid], contrast, floor=False)
    if floor is None and ceiling is not None:
        # Only under a line-rate ceiling: additive noise clipped at zero also piles up at the
        # extreme (σ = 0.5-1·B: V 7-14 times the truth), but it never leaves a tight ceiling.
        floor = _idle_floor(low, contrast)
    if floor is None:
        return BurstStats(None, lo, hi, None, mean, None, 0, None, None, False, False, noise)
    v = (mean - floor) * period_s
    if ceiling is None or ceiling <= floor:
        return BurstStats(None, floor, hi, None, mean, v, 0, None, None, False, False, noise)
    on = finite & (x >= 0.5 * (floor + ceiling))
    starts, ends = on_runs(on)
    gap_starts, gap_ends = on_runs(~on & finite)
    return BurstStats(
        burst_bandwidth=ceiling,
        off_level=floor,
        on_level=ceiling,
        on_ratio=float(min(1.0, max(0.0, (mean - floor) / (ceiling - floor)))),
        mean_rate=mean,
        bytes_per_period=v,
        bursts=int(starts.size),
        mean_burst_s=float(np.mean(ends - starts) * dt) if starts.size else None,
        mean_gap_s=float(np.mean(gap_ends - gap_starts) * dt) if gap_starts.size else None,
        resolved=True,
        reliable=False,
        noise=noise,
        on_mask=on,
    )


#: Fewest samples inside a burst (its two edge samples left out) for its own level to count.
_WHOLE_BURST_SAMPLES = 4


def _run_levels(
    x: FloatArray, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> tuple[FloatArray, FloatArray]:
    """Median and robust spread of the inner samples of each run long enough to have a level.

    The edge samples are left out: a counter poll that holds a burst's edge reads a partial
    rate.
    """
    long = np.flatnonzero(ends - starts - 2 >= _WHOLE_BURST_SAMPLES)
    levels = np.empty(long.size)
    spreads = np.empty(long.size)
    for k, i in enumerate(long):
        samples = x[starts[i] + 1 : ends[i] - 1]
        levels[k] = float(np.median(samples))
        spreads[k] = 1.4826 * float(np.median(np.abs(samples - levels[k])))
    return levels, spreads


def whole_burst_levels(rate: FloatArray, threshold: float) -> tuple[FloatArray, FloatArray]:
    """Level and spread of every burst long enough to have a level of its own.

    A burst is a run of ``rate`` at ``threshold`` or over.
    """
    starts, ends = on_runs(np.asarray(rate) >= threshold)
    return _run_levels(np.asarray(rate, dtype=np.float64), starts, ends)


def _slower_whole_bursts(
    x: FloatArray,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    ceiling: float,
    contrast: float,
) -> bool:
    """True when some bursts ran from edge to edge at a flat level of their own below the ceiling.

    The core averages below the ceiling most of its samples reach for two reasons. Transfers
    with gaps shorter than a poll inside mix partial polls in among the ceiling's, within each
    burst: the link is busy only for its energy share. A collective that ran slower on some
    steps (flows colliding on one path) holds a whole burst at a lower, flat level: the link
    is busy all along it. Read as the first, a stream busy 60 % of the time (half its steps
    at half rate) read D 0.43-0.45 on the windows where the full-rate steps were the more.
    """
    levels, spreads = _run_levels(x, starts, ends)
    lower = ceiling - levels > 3.0 * _TIGHT_LEVEL * contrast
    return bool(np.any(lower & (spreads <= _TIGHT_LEVEL * contrast)))


#: How far (a share of the contrast) the bursts' core may average below the ceiling most of
#: its samples reach before it is taken for transfers with gaps shorter than a poll inside.
_PARTIAL_CORE = 0.03


def burst_stats(
    rate: FloatArray,
    dt: float,
    period_s: float | None = None,
    *,
    min_contrast_sigmas: float = 6.0,
    polls: PollIntervals | None = None,
    t0: float = 0.0,
) -> BurstStats:
    """B, D, V and the burst count of one direction's rate series.

    Args:
        rate: bytes/s per grid slot; NaN slots are left out of every statistic.
        dt: grid step in seconds.
        period_s: T if known (for V and the smoothing cap).
        min_contrast_sigmas: the on level must stand this many noise σ above the off level
            to be called a burst at all; otherwise the traffic is flat (or silent).
        polls: the counter reads the grid was made from, if known: the two levels then come
            from whole poll intervals (:func:`poll_cores`) rather than from eroded slots.
        t0: start of the first slot (with ``polls``).
    """
    x = np.asarray(rate, dtype=np.float64)
    finite = np.isfinite(x)
    values = x[finite]
    if values.size < 8:
        return BurstStats(None, 0.0, 0.0, None, 0.0, None, 0, None, None, False, False, 0.0)
    mean = float(values.mean())
    lo, hi = two_means(values)
    noise = level_noise(values, lo, hi)
    contrast = hi - lo
    # Bursty when the on level stands clear of the sample-to-sample noise, or when the two
    # levels are well separated distributions (noisy plateaus: jittery counter refreshes);
    # a known period lowers the bar, since the structure is already established.
    clear = contrast > 0 and contrast >= min_contrast_sigmas * noise
    apart = clear or separation(values, lo, hi) >= (4.0 if period_s is not None else 6.0)
    if not apart or (period_s is None and not _structured(values, lo, hi)):
        if period_s is not None and contrast > 0:
            return _between_levels(x, finite, dt, period_s, lo, hi, noise)
        return BurstStats(None, lo, hi, None, mean, None, 0, None, None, False, False, noise)

    filled = np.where(finite, x, lo)
    u_raw = (filled - lo) / contrast
    rel_noise = noise / contrast
    width, u = _smoothing_width(u_raw, finite, rel_noise, dt, period_s)
    on = _bridge_late_counts((u >= 0.5) & finite, u_raw, finite, rel_noise)
    off = ~on & finite
    starts, ends = on_runs(on)
    bursts = int(starts.size)
    mean_burst = float(np.mean(ends - starts) * dt) if bursts else None
    gap_starts, gap_ends = on_runs(off)
    mean_gap = float(np.mean(gap_ends - gap_starts) * dt) if gap_starts.size else None

    if width == 1 and polls is not None:
        on_r, on_w, off_r, off_w = poll_cores(
            polls, lo, contrast, t0, t0 + x.size * dt, dt, rel_noise
        )
        resolved = on_r.size >= MIN_CORE_SAMPLES
        core_on = float(np.einsum("i,i->", on_r, on_w) / on_w.sum()) if resolved else None
        off_level = float(np.einsum("i,i->", off_r, off_w) / off_w.sum()) if off_r.size else lo
    else:
        radius = width // 2 + 1
        on_core = erode(on, radius)
        off_core = erode(off, radius)
        on_vals = x[on_core]
        resolved = on_vals.size >= MIN_CORE_SAMPLES
        if not resolved and width > 1:
            # Bursts shorter than the smoothing: smoothing spread them below half height, into
            # the "off" class, and their bytes would count as background (V would collapse).
            # The background comes from the unsmoothed samples instead.
            raw_off = erode(u_raw < 0.5, 1) & finite
            off_core = raw_off if raw_off.any() else off_core
        off_vals = x[off_core]
        if not off_vals.size:
            off_level = lo
        else:
            off_level = float(off_vals.mean()) if resolved else _clipped_mean(off_vals)
        core_on = float(on_vals.mean()) if resolved else None
    if period_s is not None and core_on is not None:
        core = on_r if width == 1 and polls is not None else on_vals
        # Below the ceiling by more than the noise of the core's mean can explain, too. The
        # median comes first: cheaper than the ceiling's sort, and a plateau's is its mean.
        margin = max(_PARTIAL_CORE * contrast, 4.0 * noise / math.sqrt(core.size))
        if median(core) - core_on > margin:
            ceiling = _tight_level(core, contrast, floor=False)
            if (
                ceiling is not None
                and ceiling - core_on > margin
                and not _slower_whole_bursts(x, starts, ends, ceiling, contrast)
            ):
                between = _between_levels(x, finite, dt, period_s, lo, hi, noise)
                if between.burst_bandwidth is not None:
                    return between
    b = core_on
    on_level = core_on if core_on is not None else hi
    if period_s is not None and core_on is not None:
        floor = _step_floor(x, finite, dt, t0, period_s, noise, off_level, on_level)
        if floor is not None:
            off_level = floor
    height = on_level - off_level
    on_ratio = (mean - off_level) / height if height > 0 else None
    if on_ratio is not None:
        on_ratio = float(min(1.0, max(0.0, on_ratio)))
    v = (mean - off_level) * period_s if period_s is not None else None
    reliable = resolved and noise / max(height, 1e-300) / math.sqrt(width) <= 0.3
    return BurstStats(
        burst_bandwidth=b,
        off_level=off_level,
        on_level=on_level,
        on_ratio=on_ratio,
        mean_rate=mean,
        bytes_per_period=v,
        bursts=bursts,
        mean_burst_s=mean_burst,
        mean_gap_s=mean_gap,
        resolved=resolved,
        reliable=reliable,
        noise=noise,
        on_mask=on,
    )
