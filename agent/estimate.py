"""One estimate of T, B, D, regime and collective mix from whatever sources are at hand.

This is the single composition used by both ``commpulse analyze`` (whole files) and the live
pipeline (rolling windows): same inputs, same numbers. Pure: numpy arrays in, a frozen
:class:`Estimate` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.alternation import alternates, seen_over_pairs
from agent.bursts import (
    BurstStats,
    burst_stats,
    clear_spikes,
    largest_burst_share,
    step_silence,
    typical_longest,
)
from agent.call_sequence import SequenceStep, sequence_step
from agent.period import (
    DetectorSettings,
    PeriodResult,
    comes_in_trains,
    estimate_period,
    whole_multiple,
)
from agent.quantiles import percentiles
from agent.rates import Direction, GridSeries, active_span, spread_slots
from agent.regime import (
    IDLE_BYTES_PER_S,
    MIN_APERIODIC_BURSTS,
    RegimeFeatures,
    classify_regime,
    collective_shares,
)
from agent.rhythms import two_rhythms
from agent.separation import DutySplit, choose_signal, gpu_windows, split_duty
from agent.sharding import steps_spanned
from agent.tracker import SUSTAINED_CONFIDENCE

__all__ = [
    "CollectiveMix",
    "Estimate",
    "EstimateInputs",
    "GpuSamples",
    "busier_direction",
    "estimate",
    "estimate_recent",
    "log_grid",
    "log_series",
    "mean_rate",
    "whole_periods",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GpuSamples:
    """GPU activity samples on the same time axis as the network series."""

    times: FloatArray
    gpu: npt.NDArray[np.int64]
    signals: Mapping[str, FloatArray]


@dataclass(frozen=True)
class CollectiveMix:
    """What the NCCL log says: per-op (count, bytes), world size, and timed calls."""

    ops: Mapping[str, tuple[int, int]]
    nranks: int | None
    call_times: FloatArray = field(default_factory=lambda: np.empty(0))
    call_bytes: FloatArray = field(default_factory=lambda: np.empty(0))
    warnings: int = 0
    version: str | None = None
    #: Ranks that logged the calls (processes, times the GPUs each drives): the divisor of
    #: the bytes one rank issues.
    processes: int = 0
    #: 0 when the calls carry NCCL's timestamps; else how coarse their times are (the log
    #: tailer's poll interval: calls stamped when read).
    time_resolution_s: float = 0.0
    #: Per call (empty when unknown): a code of who made it and what it is (op, communicator,
    #: peer; with its bytes it tells the calls of a step apart) and of the process that
    #: logged it, for T from the call order when the times are coarse.
    call_keys: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    call_processes: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @property
    def calls(self) -> int:
        """Number of COLL lines."""
        return sum(c for c, _ in self.ops.values())


@dataclass(frozen=True)
class EstimateInputs:
    """Everything an estimate may use; any part may be missing."""

    network: Mapping[Direction, GridSeries] = field(default_factory=dict)
    network_source: str | None = None
    gpu: GpuSamples | None = None
    collectives: CollectiveMix | None = None
    #: The period the live tracker has locked: evidence enough that a weaker repetition at
    #: about this period is still the job (see ``agent.period.estimate_period``).
    expected_period_s: float | None = None


@dataclass(frozen=True)
class Estimate:
    """T, B, D and friends; ``None`` wherever the data cannot say."""

    period_s: float | None
    burst_bandwidth: float | None
    duty_cycle: float | None
    confidence: float
    regime: str
    network_on_ratio: float | None
    nranks: int | None
    collectives: Mapping[str, tuple[int, int]]
    inner_period_s: float | None = None
    bytes_per_iteration: float | None = None
    step_bytes: float | None = None
    mean_bandwidth: float | None = None
    background_bandwidth: float | None = None
    duty_cycle_source: str | None = None
    period_source: str | None = None
    direction: str | None = None
    gpu_signal: str | None = None
    exposed_ratio: float | None = None
    overlapped_ratio: float | None = None
    compute_ratio: float | None = None
    bursts: int = 0
    last_burst_end_s: float | None = None
    #: Seconds from the last burst's end to the window's last known sample (None: no burst).
    quiet_s: float | None = None
    #: Rate above which a slot belongs to a burst (None: no bursts).
    burst_threshold: float | None = None
    #: Mean rate over the second half of the time since the last burst (None: no burst).
    quiet_bandwidth: float | None = None
    gpu_activity: float | None = None
    #: Every GPU signal's mean over the window, (signal, mean), the best one's included: a
    #: hang reads high on util and gr_engine_active only (NCCL's spin), so the alert needs
    #: them beside a best signal that cannot see it (tensor_active).
    gpu_activities: tuple[tuple[str, float], ...] = ()
    bursts_per_period: float | None = None
    burst_resolved: bool = False
    period_cycles: float = 0.0
    period_method: str = "none"
    window_s: float = 0.0
    warnings: tuple[str, ...] = ()
    #: T is shown but may not be a step (an alias of a counter refresh, two flows' near-common
    #: multiple, a swing at the poll rate): its confidence stays below the alerts, live too.
    period_unsure: bool = False
    period_detail: PeriodResult | None = field(default=None, repr=False, compare=False)
    burst_detail: BurstStats | None = field(default=None, repr=False, compare=False)
    #: The direction T was found in, when not ``direction`` (whose bursts give B and D): see
    #: ``_period_direction``. Not in the JSON: the live step-change watch reads its edges.
    period_direction: str | None = field(default=None, compare=False)

    def traffic_stopped(self, idle_bytes_per_s: float = IDLE_BYTES_PER_S) -> bool:
        """No burst left in the window and its mean rate idle: the job is gone.

        Bursts alone do not say it: a window of 2 s inside a busy FSDP step (D 0.65, layer
        bursts a few polls long) can hold no clear two-level burst while 28 MB/s flow.
        """
        quiet = self.mean_bandwidth is None or self.mean_bandwidth < idle_bytes_per_s
        return self.last_burst_end_s is None and quiet

    def after_stop(self, idle_bytes_per_s: float = IDLE_BYTES_PER_S) -> Estimate:
        """This estimate once its job has stopped (the live agent's view of a gone job).

        The window still holds the job's last bursts, and everything measured on them (T, B,
        D, V, the burst counts, "training") would describe a job that is no longer there: a
        real job's figures stayed on the dashboard for two minutes after it ended, until its
        bursts had left the window. What is left is the traffic since the last burst. The
        time of that burst stays: it is what the stalled-job alert counts from.
        """
        # Once the window holds nothing after the last burst, or no burst at all, its mean
        # is the traffic since.
        mean = self.quiet_bandwidth if self.quiet_bandwidth is not None else self.mean_bandwidth
        idle = mean is None or mean < idle_bytes_per_s
        return replace(
            self,
            period_s=None,
            burst_bandwidth=None,
            duty_cycle=None,
            confidence=0.0,
            regime="idle" if idle else "unknown",
            network_on_ratio=0.0 if idle else None,
            inner_period_s=None,
            bytes_per_iteration=None,
            step_bytes=None,
            mean_bandwidth=mean,
            duty_cycle_source=None,
            period_source=None,
            exposed_ratio=None,
            overlapped_ratio=None,
            compute_ratio=None,
            bursts=0,
            bursts_per_period=None,
            burst_resolved=False,
            period_cycles=0.0,
            period_method="none",
            warnings=(
                "no burst for over two periods: the job stopped (or paused), and its T, B and D "
                "are no longer shown",
            ),
        )

    @property
    def period_rel_error(self) -> float:
        """Relative standard error of T from its burst intervals' spread (0 when unknown).

        Step jitter is a random walk of the burst times: the mean of K steps is off by the
        single-step spread over √K, whatever the estimator.
        """
        detail = self.period_detail
        if self.period_s is None or detail is None or detail.interval_cv is None:
            return 0.0
        cycles = max(self.period_cycles, 1.0)
        cv = detail.interval_cv
        return cv / math.sqrt(cycles) if math.isfinite(cv) else 0.0

    def to_json(self) -> dict[str, Any]:
        """The ``analyze --json`` object: the contract keys first, then the extras."""

        def num(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)

        return {
            "period_s": num(self.period_s),
            "burst_bandwidth_bytes_per_s": num(self.burst_bandwidth),
            "duty_cycle": num(self.duty_cycle),
            "confidence": float(self.confidence),
            "regime": self.regime,
            "network_on_ratio": num(self.network_on_ratio),
            "nranks": self.nranks,
            "collectives": {
                op: {"count": int(c), "bytes": int(b)}
                for op, (c, b) in sorted(self.collectives.items())
            },
            "inner_period_s": num(self.inner_period_s),
            "bytes_per_iteration": num(self.bytes_per_iteration),
            "collective_bytes_per_step": num(self.step_bytes),
            "mean_bandwidth_bytes_per_s": num(self.mean_bandwidth),
            "background_bandwidth_bytes_per_s": num(self.background_bandwidth),
            "duty_cycle_source": self.duty_cycle_source,
            "period_source": self.period_source,
            "direction": self.direction,
            "gpu_signal": self.gpu_signal,
            "exposed_comm_ratio": num(self.exposed_ratio),
            "overlapped_comm_ratio": num(self.overlapped_ratio),
            "compute_ratio": num(self.compute_ratio),
            "gpu_activity_ratio": num(self.gpu_activity),
            "bursts": self.bursts,
            "bursts_per_period": num(self.bursts_per_period),
            "burst_resolved": self.burst_resolved,
            "period_cycles": num(self.period_cycles),
            "period_method": self.period_method,
            "window_s": num(self.window_s),
            "warnings": list(self.warnings),
        }


def busier_direction(
    network: Mapping[Direction, GridSeries],
) -> tuple[Direction, GridSeries] | None:
    """The direction that carries more bytes (tx/rx preferred over an undirected total)."""
    directed = {d: g for d, g in network.items() if d in ("tx", "rx")} or dict(network)
    best: tuple[Direction, GridSeries] | None = None
    best_mean = -math.inf
    for d, g in sorted(directed.items()):
        finite = g.rate[np.isfinite(g.rate)]
        mean = float(finite.mean()) if finite.size else -math.inf
        if mean > best_mean:
            best, best_mean = (d, g), mean
    return best


#: A window without T that holds this many bursts or fewer says it is too short.
FEW_BURSTS = 4
#: Under this confidence the busier direction's period is unclear, and the other direction
#: is looked at too (the tracker's one-window lock level: above it, nothing is to be gained).
CLEARER_BELOW = 0.6
#: ... if it carries at least this share of the busier one's bytes: a job's collectives move
#: as much each way, requests beside their replies or acknowledgements do not.
CLEARER_SHARE = 0.3
#: The other direction is looked at whatever the confidence when the busier one carries this
#: many times its bytes: a job's collectives move as much each way, so the excess is another
#: flow's, whose bursts can pass for steps even in a confident period.
CLEARER_EXCESS = 1.1
#: ... and where B and D would go with its T, its period wins over one the busier direction
#: has only when it is this much more confident: with rx at 0.9 of tx and both periods at
#: confidence 1.00, B and D came from rx (9 GB/s for a job whose busier direction bursts at
#: 10), on a rounding difference. Where only T would move, equal confidences suffice: the
#: T of real jittery jobs timed on rx's edges is vouched for over many steps, tx's is not.
CLEARER_MARGIN = 0.05


def _direction_period(
    grid: GridSeries,
    cfg: DetectorSettings,
    expected_period_s: float | None,
    idle_bytes_per_s: float,
) -> tuple[GridSeries, PeriodResult]:
    """One direction's series from its traffic's start, and its period."""
    # Idle before the traffic (a job that started in the window) is cut; idle after it is
    # not: live, the end of the window is now, and traffic that stopped must show.
    grid = grid.from_traffic_start()
    peak = float(np.fmax.reduce(grid.rate)) if grid.rate.size else math.nan  # NaN-blind max
    peak = 0.0 if math.isnan(peak) else peak
    if peak < idle_bytes_per_s:
        # Heartbeats and management chatter can repeat like clockwork (three keep-alives
        # 2 s apart read as a 2 s "training" period); a job's collectives run far faster.
        return grid, PeriodResult(None, 0.0)
    period = estimate_period(
        grid.rate,
        grid.dt,
        t0=grid.t0,
        settings=cfg,
        untimed=spread_slots(grid),
        expected_period_s=expected_period_s,
    )
    if period.period_s is not None:
        # A poll of a scrape or a log shipment can pass the peak above at 10 ms polls (a
        # 200 KB transfer every 10 s read as T = 10 s, confidence 0.98, "training", on an
        # idle host): the bytes a cycle tell it from a job's, whose collectives move MBs a
        # step and average MB/s (a tiny MNIST job: 0.4 MB every 50 ms).
        mean = mean_rate(grid)
        per_cycle = mean * period.period_s
        if mean < MANAGEMENT_SHARE * idle_bytes_per_s and per_cycle < MANAGEMENT_CYCLE_BYTES:
            note = (
                f"traffic repeats every {period.period_s:.4g} s but moves only "
                f"{per_cycle / 1e3:.0f} kB a cycle ({mean / 1e3:.0f} kB/s): management "
                "traffic (scrapes, heartbeats, log shipping), not a job's collectives"
            )
            return grid, PeriodResult(None, 0.0, warnings=(note,))
    return grid, period


#: Periodic traffic under this share of the idle rate on average, and under
#: ``MANAGEMENT_CYCLE_BYTES`` a cycle, is management traffic, not a job (:func:`_direction_period`).
MANAGEMENT_SHARE = 0.1
MANAGEMENT_CYCLE_BYTES = 4e6


def mean_rate(grid: GridSeries) -> float:
    """The grid's mean over its known slots (0 with none)."""
    finite = grid.rate[np.isfinite(grid.rate)]
    return float(finite.mean()) if finite.size else 0.0


def _period_direction(
    inputs: EstimateInputs,
    chosen: tuple[Direction, GridSeries],
    cfg: DetectorSettings,
    idle_bytes_per_s: float,
    warnings: list[str],
) -> tuple[GridSeries, PeriodResult, Direction | None, Direction]:
    """The busier direction's series, and its period or the other direction's if clearer.

    Traffic that is not the job's (a data loader's reads, a checkpoint's writes) often flows
    one way only, while the job's collectives move as much each way. On a real DDP job beside
    a flow of 0.5-4 MB chunks into the host, the busier direction (rx: job and flow) gave T
    6.5 % short (the flow's chunks counted as steps), confidence 0.26; tx gave T 1.2 % short,
    0.41; on synthetic ones, rx's T was 2.4 % off at confidence 0.76. So the other direction
    is estimated too if it carries ``CLEARER_SHARE`` of the bytes and either the busier one's
    period is unclear (confidence under ``CLEARER_BELOW``) or the busier one carries
    ``CLEARER_EXCESS`` times its bytes; its period wins with a higher confidence, and where
    the busier one has no period at all, only with a clear one (``CLEARER_BELOW``), so that
    aperiodic traffic gets no second chance at a chance period, or when it holds a live lock
    (as :func:`agent.period.estimate_period` holds one: the real job above lost its lock for
    8 s while rx alone showed no period). A symmetric, clear job costs nothing more. B, D and
    V stay the busier direction's (the contract's), timed by that period, unless the busier
    one carries ``CLEARER_EXCESS`` times the other's bytes: the excess is then another flow's,
    which rides on the job's bursts and fills its gaps (storage reads on rx averaging 20 % of
    B read B 1.27x and D 0.36-0.50 for 0.45), and the other direction's series gives them too.
    Returns the series, the period, the direction that gave T if not the busier one, and the
    direction of the series.
    """
    direction, busier = chosen
    grid, period = _direction_period(busier, cfg, inputs.expected_period_s, idle_bytes_per_s)
    if direction not in ("tx", "rx"):
        return grid, period, None, direction
    busier_rate = mean_rate(busier)
    for other, other_grid in sorted(inputs.network.items()):
        if other == direction or other not in ("tx", "rx"):
            continue
        other_rate = mean_rate(other_grid)
        if other_rate < CLEARER_SHARE * busier_rate or (
            period.confidence >= CLEARER_BELOW and busier_rate <= CLEARER_EXCESS * other_rate
        ):
            continue
        grid_o, period_o = _direction_period(
            other_grid, cfg, inputs.expected_period_s, idle_bytes_per_s
        )
        if period_o.period_s is None:
            continue
        expected = inputs.expected_period_s
        moves = busier_rate > CLEARER_EXCESS * other_rate  # B and D would go with T
        if period.period_s is not None:
            bar = period.confidence + (CLEARER_MARGIN if moves else 0.0)
        elif period.train_rhythm_s is not None:
            bar = 0.0  # a rhythm inside a longer step, whose step the other may show
        elif expected is not None and abs(period_o.period_s / expected - 1.0) <= cfg.hold_tolerance:
            bar = -1.0  # the locked period, held on the other direction's steps
        else:
            bar = CLEARER_BELOW
        if period_o.confidence > bar:
            warnings.append(
                _clearer_note(
                    direction,
                    other,
                    busier_rate / other_rate if other_rate > 0 else math.inf,
                    period_o,
                    period,
                )
            )
            if moves:
                return grid_o, period_o, other, other
            return grid, period_o, other, direction
        note = _other_rhythm_note(direction, period, other, period_o)
        if note is not None:
            warnings.append(note)
    return grid, period, None, direction


def other_direction_note(
    inputs: EstimateInputs, est: Estimate, *, settings: DetectorSettings | None = None
) -> str | None:
    """The other direction's own rhythm, estimated where the busier one's T did not need it.

    Offline only (an estimate more per window): the live path looks at the other direction
    only when the busier one is unclear or carries far more bytes.
    """
    direction = est.period_direction or est.direction
    if est.period_detail is None or direction not in ("tx", "rx"):
        return None
    other = "rx" if direction == "tx" else "tx"
    grid, other_grid = inputs.network.get(direction), inputs.network.get(other)
    if grid is None or other_grid is None:
        return None
    if mean_rate(other_grid) < CLEARER_SHARE * mean_rate(grid):
        return None
    _, period_o = _direction_period(
        other_grid, settings or DetectorSettings(), inputs.expected_period_s, IDLE_BYTES_PER_S
    )
    return _other_rhythm_note(direction, est.period_detail, other, period_o)


def _other_rhythm_note(
    direction: Direction, period: PeriodResult, other: Direction, other_period: PeriodResult
) -> str | None:
    """Said when the two directions repeat, both clearly, at rhythms that are not one job's.

    A job's collectives move both ways at its step (or a multiple of it); tx every 1.0 s and
    rx every 1.5 s are two flows, and T was the busier one's with nothing said of the other.
    """
    t, t_o = period.period_s, other_period.period_s
    if t is None or t_o is None or min(period.confidence, other_period.confidence) < CLEARER_BELOW:
        return None
    ratio = max(t, t_o) / min(t, t_o)
    if abs(ratio - round(ratio)) <= 0.05 * ratio:
        return None  # the same steps, or a multiple of them (a train inside a step)
    return (
        f"{other} repeats every {t_o:.4g} s and {direction} every {t:.4g} s, both clearly: two "
        f"flows with their own rhythms share the link; T is {direction}'s"
    )


def _clearer_note(
    busier: Direction, other: Direction, excess: float, chosen: PeriodResult, own: PeriodResult
) -> str:
    """Where T came from; another flow is blamed only for bytes a job's collectives cannot explain.

    A real DDP job's bucketed all-reduces moved 0.8 % more bytes out than in, and its tx showed
    the steps less clearly (confidence 0.38 against 0.76) with nothing else on the link.
    """
    clarity = f"confidence {chosen.confidence:.2f} against {own.confidence:.2f}"
    if excess <= CLEARER_EXCESS:
        return (
            f"T comes from {other}, which shows the period more clearly than {busier} ({clarity})"
        )
    return (
        f"{busier} carries {100.0 * (excess - 1.0):.0f} % more bytes than {other}, and {other} "
        f"shows the period more clearly ({clarity}): T, B and D come from {other}; traffic that "
        f"is not the job's may share {busier}"
    )


def _step_silence(
    steps: GridSeries | None,
    bursts: BurstStats | None,
    threshold: float | None,
    period_s: float | None,
) -> float | None:
    """:func:`agent.bursts.step_silence` of the steps' bursts.

    Where B and D could not be resolved, of the slots at or above the burst threshold.
    """
    if steps is None or bursts is None or period_s is None:
        return None
    on = bursts.on_mask
    if on is None or on.size != steps.rate.size:
        if threshold is None:
            return None
        on = np.nan_to_num(steps.rate, nan=-np.inf) >= threshold
    return step_silence(on, steps.dt, period_s)


def _largest_share(
    steps: GridSeries | None, bursts: BurstStats | None, period_s: float | None
) -> float | None:
    """:func:`agent.bursts.largest_burst_share` of the steps' bursts (None: not resolved)."""
    if steps is None or bursts is None or period_s is None or not bursts.has_bursts:
        return None
    on = bursts.on_mask
    if on is None or on.size != steps.rate.size:
        return None
    return largest_burst_share(steps.rate, on, steps.dt, period_s, bursts.off_level)


def _burst_threshold(bursts: BurstStats, floor: float, *, periodic: bool) -> float | None:
    """Rate above which a slot is in a burst: the on/off midpoint, never below ``floor``.

    A slot below ``floor`` (the idle rate) never counts: once the job's bursts have left the
    window, the two levels of what remains are management chatter (ARP, a teardown's last
    packets), which must not keep a stalled job's last burst moving. Periodic traffic whose
    two levels are too noisy to call bursts (a pipeline stage's forward sends at a varying
    TCP rate) still has them: its last burst still tells when the job fell silent.
    """
    if not (bursts.has_bursts or (periodic and bursts.on_level > bursts.off_level)):
        return None
    return max(0.5 * (bursts.on_level + bursts.off_level), floor)


def _last_burst_end(
    grid: GridSeries, threshold: float | None
) -> tuple[float, float, float | None] | None:
    """The newest burst's end, the known seconds after it, and the rate since (or None).

    The end is that of the newest grid slot above ``threshold``, in the grid's time base.
    Taken on the whole window (not the whole-period cut), so that "seconds since the last
    burst" grows from the moment a job stops talking. Slots without a sample (a poll that never
    came) at the end are not quiet: they are unknown.
    """
    if threshold is None:
        return None
    above = np.flatnonzero(grid.valid & (grid.rate > threshold))
    if above.size == 0:
        return None
    known = np.flatnonzero(grid.valid)
    # The rate since: its second half, clear of the burst's trailing partial sample.
    tail = above[-1] + 1 + (known[-1] - above[-1]) // 2
    after = grid.rate[tail:][grid.valid[tail:]]
    return (
        grid.t0 + float(above[-1] + 1) * grid.dt,
        float(known[-1] - above[-1]) * grid.dt,
        float(after.mean()) if after.size else None,
    )


def _gpu_activity(
    gpu: GpuSamples | None,
) -> tuple[str | None, float | None, tuple[tuple[str, float], ...], str | None]:
    """The best GPU signal, its mean (0..1), every signal's mean, and why one was passed over.

    The signal is :func:`choose_signal`'s. Means over the whole window, bursts or not. A job
    hung in a collective keeps its GPUs busy (NCCL kernels spin) while the network is silent;
    a finished job leaves them idle: this tells the two apart.
    """
    if gpu is None:
        return None, None, (), None
    means: dict[str, float] = {}
    for signal, values in sorted(gpu.signals.items()):
        finite = values[np.isfinite(values)]
        if finite.size:
            means[signal] = float(finite.mean())
    name, passed_over = choose_signal(gpu.signals)
    if name is None:
        return None, None, tuple(means.items()), None
    return name, means.get(name), tuple(means.items()), passed_over


def whole_periods(grid: GridSeries, period: PeriodResult) -> GridSeries:
    """The grid cut to whole periods, from the first main-burst start to the last.

    A window that ends in the middle of a burst (the live case: "now") would bias the energy
    duty cycle by up to one partial period; whole periods make it exact.
    """
    edges = period.rising_edges_s
    if period.period_s is None or edges is None or edges.size < 3:
        return grid
    i0 = int(np.floor((float(edges[0]) - grid.t0) / grid.dt))
    i1 = int(np.floor((float(edges[-1]) - grid.t0) / grid.dt))
    if i0 < 0 or i1 > grid.rate.size or i1 - i0 < 16:
        return grid
    return grid.sliced(i0, i1)


#: A gap between two main bursts longer than this many periods is a pause of the job, not
#: part of its steps (the job gone is left to the live agent's stop watch).
PAUSE_PERIODS = 2.0


def without_pauses(grid: GridSeries, period: PeriodResult) -> GridSeries:
    """The grid with the job's pauses (an evaluation, a checkpoint) marked unknown.

    B, D and V describe the steps: a recording whose job paused 3-5 s every 10 steps read D
    0.22 against 0.31 and bytes per step 36 % low, the silent seconds counted as steps. A gap
    between main bursts of more than ``PAUSE_PERIODS`` periods is a pause when it is quiet
    (nothing in it reaches a tenth of the way to the bursts); its slots from one period after
    the burst before it are left out. Bursts whose edges were missed (sub-sample bursts) leave
    traffic in the gap, which is then not touched.
    """
    edges = period.rising_edges_s
    t = period.period_s
    if t is None or edges is None or edges.size < 3:
        return grid
    long_gaps = np.flatnonzero(np.diff(edges) > PAUSE_PERIODS * t)
    if long_gaps.size == 0:
        return grid
    finite = grid.rate[grid.valid & np.isfinite(grid.rate)]
    if finite.size == 0:
        return grid
    lo, hi = percentiles(finite, [5.0, 99.0])
    floor = float(lo) + 0.1 * (float(hi) - float(lo))
    rate, valid = grid.rate.copy(), grid.valid.copy()
    for k in long_gaps.tolist():
        i0 = int(np.ceil((float(edges[k]) + t - grid.t0) / grid.dt))
        i1 = int(np.floor((float(edges[k + 1]) - grid.t0) / grid.dt)) - 1
        i0, i1 = max(i0, 0), min(i1, rate.size)
        if i1 - i0 < 2:
            continue
        seg = rate[i0:i1]
        if np.any(np.isfinite(seg) & (seg >= floor)):
            continue
        rate[i0:i1] = np.nan
        valid[i0:i1] = False
    return replace(grid, rate=rate, valid=valid)


#: Widest bin of an NCCL log's calls, up to a million bins (a log of 2.9 h).
EVENT_BIN_S = 0.01
#: Longest stretch of an NCCL log with fine timestamps that is binned for its period: its
#: newest million bins of ``EVENT_BIN_S``. Wider bins over a longer log lost short steps
#: without a word (a 25 h log of 0.3 s steps, binned at 91 ms, had no T; its newest 2.9 h
#: have it).
LOG_SPAN_S = 2**20 * EVENT_BIN_S


def _events_series(
    times: FloatArray, weights: FloatArray, resolution_s: float = 0.0
) -> tuple[FloatArray, float, float]:
    """Bin timed events (NCCL COLL lines) into a rate series for the period detector.

    Events stamped when a poller read them (``resolution_s`` > 0) sit on the poll instants:
    one bin per poll, centred on them, so the series is sampled as counters are. Finer bins
    made a lattice of spikes at the poll interval, and the period detector read it (a job of
    0.05 s steps, read every 0.2 s: T = 0.2 s) or the beat of the steps against it (0.3 s
    steps: 0.6 s; 2.3 s steps: 4.6 s).
    """
    if resolution_s > 0:
        dt = resolution_s
        t0 = float(times[0]) - 0.5 * dt
    else:
        # ~32 k bins, but none over 10 ms while a million bins span the log: steps of a
        # long log (4000 of 0.25 s) took 4 to 8 bins each and their phase wander (2 % step
        # jitter) hid them: a confident 1.24 s, or 10.3 s for 8000 steps of 1 s.
        span = float(times[-1] - times[0])
        dt = max(1e-3, span / 2**15)
        if dt > EVENT_BIN_S:
            dt = max(EVENT_BIN_S, span / 2**20)
        t0 = float(times[0])
    n = max(1, int((float(times[-1]) - t0) / dt) + 1)
    idx = np.minimum(((times - t0) / dt).astype(np.int64), n - 1)
    series = np.bincount(idx, weights=weights, minlength=n) / dt
    return series, dt, t0


#: Fewest timed calls an NCCL log's T is looked for in.
MIN_TIMED_CALLS = 8


def log_series(mix: CollectiveMix) -> tuple[FloatArray, float, float] | None:
    """The rate series the period detector sees in an NCCL log: (series, dt, t0), or None.

    Timed calls sorted, weighted by bytes when every call's S is known (else by count).
    """
    ok = np.isfinite(mix.call_times)
    if ok.sum() < MIN_TIMED_CALLS:
        return None
    order = np.argsort(mix.call_times[ok], kind="stable")
    times = mix.call_times[ok][order]
    weights = mix.call_bytes[ok] if mix.call_bytes.size == mix.call_times.size else None
    if weights is None or not np.isfinite(weights).all() or float(np.sum(weights)) <= 0:
        weights = np.ones(times.size)
    else:
        weights = weights[order]
    keep = _without_stray_ends(times)
    times, weights = times[keep], weights[keep]
    if mix.time_resolution_s == 0 and times[-1] - times[0] > LOG_SPAN_S:
        cut = int(np.searchsorted(times, times[-1] - LOG_SPAN_S))
        times, weights = times[cut:], weights[cut:]
    if times.size < MIN_TIMED_CALLS or times[-1] - times[0] <= 0:
        return None
    return _events_series(times, weights, mix.time_resolution_s)


#: Most calls, as a share, that :func:`_without_stray_ends` may drop at each end.
STRAY_SHARE = 0.01


def _without_stray_ends(times: FloatArray) -> slice:
    """The sorted times without a few strays at either end, far from all the others.

    One line with a wrong year (a clock set wrong, a stamp cut and glued) stretched the
    binned span to years, and a 0.5 s job's period was lost. A first (last) call further from
    the next (previous) one than all the calls after (before) it span is a stray; at most
    ``STRAY_SHARE`` of the calls, and one at least, go at each end.
    """
    n = times.size
    most = max(1, int(STRAY_SHARE * n))
    lo, hi = 0, n
    while lo < most and hi - lo > 3 and times[lo + 1] - times[lo] > times[hi - 1] - times[lo + 1]:
        lo += 1
    while (
        n - hi < most and hi - lo > 3 and times[hi - 1] - times[hi - 2] > times[hi - 2] - times[lo]
    ):
        hi -= 1
    return slice(lo, hi)


def log_grid(mix: CollectiveMix, dt: float, *, end: float) -> GridSeries | None:
    """The NCCL log's timed calls binned at ``dt``, from the first call to ``end``.

    Bytes per second, or calls per second when some S is unknown; None without two timed
    calls. Calls stamped when read are binned per poll at least (see :func:`_events_series`).
    """
    times = mix.call_times
    ok = np.isfinite(times)
    if int(ok.sum()) < 2:
        return None
    t = times[ok]
    weights = mix.call_bytes[ok] if mix.call_bytes.size == times.size else np.ones(t.size)
    if not np.isfinite(weights).all() or float(weights.sum()) <= 0:
        weights = np.ones(t.size)
    t0 = float(t.min())
    if mix.time_resolution_s > dt:  # calls stamped when read: one bin per poll, centred on it
        dt = mix.time_resolution_s
        t0 -= 0.5 * dt
    n = max(1, int((max(end, float(t.max())) - t0) / dt) + 1)
    idx = np.minimum(((t - t0) / dt).astype(np.int64), n - 1)
    rate = np.bincount(idx, weights=weights, minlength=n) / dt
    return GridSeries(t0=t0, dt=dt, rate=rate, valid=np.ones(n, dtype=np.bool_))


#: Fewest polls per step for calls stamped when they were read: their times are only one
#: poll fine, and shorter steps alias against the polls.
MIN_ARRIVAL_POLLS = 4.0


def arrival_period(times: FloatArray, resolution_s: float) -> float | None:
    """The mean step of calls stamped when read, in polls, if their trains come regularly.

    Each step's calls arrive in one poll, or a few in a row; a poll without calls separates two
    steps. The trains' first polls are the steps, each up to a poll late: their mean interval
    is T, however the steps beat against the polls (2.3 s steps read every 0.2 s come 11 and
    12 polls apart in turn, which the period detector took for a 4.6 s period). At least 4
    intervals, and 80 % of them, must lie within a poll and 10 % of their median; the others
    (the first read of a log that had grown for a while, a pause) are left out of the mean.
    Else None: several trains a step, aperiodic calls, or one train (a call in every poll).
    """
    if times.size < 2:
        return None
    polls = np.unique(np.rint((times - times.min()) / resolution_s).astype(np.int64))
    starts = polls[np.concatenate(([True], np.diff(polls) > 1))]
    if starts.size < 5:
        return None
    gaps = np.diff(starts).astype(np.float64)
    median = float(np.median(gaps))
    regular = gaps[np.abs(gaps - median) <= 1.0 + 0.1 * median]
    if regular.size < 4 or regular.size < 0.8 * gaps.size:
        return None
    return float(regular.mean())


#: Newest calls whose order may time the step when their times are coarse: thousands of
#: steps of any job, at a bounded cost (5 k calls/s fill a 120 s window with 600 k).
MAX_SEQUENCE_CALLS = 20000
#: Steps a sequence-timed T needs for full confidence (capped at ``SEQUENCE_CONFIDENCE``).
SEQUENCE_FULL_STEPS = 16
SEQUENCE_CONFIDENCE = 0.8


def _sequence_result(seq: SequenceStep, warnings: tuple[str, ...]) -> PeriodResult:
    """The step read from the call order as a period (see :mod:`agent.call_sequence`)."""
    confidence = SEQUENCE_CONFIDENCE * min(1.0, seq.steps / SEQUENCE_FULL_STEPS) * seq.alike
    return PeriodResult(
        seq.period_s, confidence, cycles=float(seq.steps), method="sequence", warnings=warnings
    )


def _coarse_sequence_result(seq: SequenceStep, res: float) -> PeriodResult:
    """:func:`_sequence_result` for calls timed only to ``res``, with the note that says so."""
    note = (
        f"the NCCL log's calls are timed to {res:g} s only: T comes from their order (each "
        f"process repeats its {seq.calls_per_step} calls every step; {seq.steps} steps timed "
        "by a call that comes once a step)"
    )
    return _sequence_result(seq, (note,))


#: Share of the polls holding calls above which a coarse log's binned period is a beat.
MAX_BUSY_POLLS = 0.6


def _busy_polls(times: FloatArray, res: float) -> float:
    """Share of the polls (or whole seconds) from the first call to the last that hold calls."""
    t = times[np.isfinite(times)]
    if t.size < 2:
        return 0.0
    polls = np.unique(np.rint((t - t.min()) / res).astype(np.int64))
    return polls.size / float(polls[-1] + 1)


#: Spread of a marker's intervals under which it times steady steps (3 % jitter: 0.02).
STEADY_MARKER_CV = 0.1
#: Steps the marker must time to overrule the binned calls.
ORDER_MIN_STEPS = 16
#: A binned period this close to the marker's step is that step, timed by the marker.
ORDER_SAME = 0.03


def _steady_marker(seq: SequenceStep) -> bool:
    """Whether a call order's marker times enough steps, steadily enough, to give T."""
    return seq.steps >= ORDER_MIN_STEPS and seq.interval_cv <= STEADY_MARKER_CV


def _checked_by_order(timed: PeriodResult, seq: SequenceStep) -> PeriodResult:
    """The binned calls' period, unless the calls' order says it is a multiple or a fraction.

    A long log of fast steps is binned at up to 10 ms: a 0.061 s step of an MoE job took
    6.6 bins and read 3 T at confidence 0.7, a pipeline stage's 0.2 s step read T/2. Their
    call order is exact: one call comes once a step (:mod:`agent.call_sequence`), at steady
    intervals. When the binned period is 1/k or k times that step (k = 2..8), no call comes
    once per binned period, and the binned result found no inner period there (a grad-accum
    step over identical micro-steps marks the micro-step), the marker's step is T. So is it
    where the binned calls gave no period (the caller passes only a result that saw one).
    """
    t = timed.period_s
    if not _steady_marker(seq):
        return timed
    if t is None:
        # A period seen but rejected (an evaluation and a checkpoint pause every 100 steps:
        # the binned calls showed their cycle, 3 of them, and no T at all).
        note = (
            f"T from the calls' order: one call comes every {seq.period_s:.4g} s, at steady "
            f"intervals over {seq.steps} steps, where the binned calls gave no period "
            "(pauses between runs of steps: evaluation, checkpoints)"
        )
        return _sequence_result(seq, (*timed.warnings, note))
    step = seq.period_s
    if abs(t / step - 1.0) <= ORDER_SAME:
        # The same period, which the marker times from the calls' own times over every step
        # (the bins cost up to 10 ms each, and the bursts' edges can be the wrong calls': two
        # ranks whose 400 steps of 0.5 s drift apart read 0.494 s from the binned calls).
        return replace(timed, period_s=step)
    if not (whole_multiple(t, step, at_most=8) or whole_multiple(step, t, at_most=8)):
        return timed
    near = [p for p in (seq.period_s, *seq.other_periods_s) if abs(t / p - 1.0) <= 0.03]
    inner = timed.inner_period_s
    if near or (inner is not None and abs(inner / seq.period_s - 1.0) <= 0.05):
        return timed
    note = (
        f"the binned calls repeat every {t:.4g} s, but a call comes once every "
        f"{seq.period_s:.4g} s, at steady intervals, and none once every {t:.4g} s: T is "
        "the latter's step"
    )
    return _sequence_result(seq, (*timed.warnings, note))


def _lattice_multiple(period_s: float | None, step_s: float, res: float) -> bool:
    """Whether ``period_s`` (k steps) is the lattice of the steps' rounding, not their repeat.

    It is when k steps are a whole number of resolutions and one step is not.

    5.49 s FSDP steps in whole seconds are 5 then 6 s apart, so the binned calls repeat
    exactly every 11 s: read as T at confidence 0.79, while their order timed 5.49 s (4.2 s
    steps: 21 s). A step of a whole number of resolutions has no such lattice of its own.
    """
    if period_s is None or res <= 0:
        return False

    def off_lattice(seconds: float) -> float:
        return abs(seconds / res - round(seconds / res))

    k = round(period_s / step_s)
    on = off_lattice(period_s) <= 0.1 or off_lattice(k * step_s) <= 0.15
    return on and off_lattice(step_s) >= 0.15


def _call_order(mix: CollectiveMix) -> SequenceStep | None:
    """The step the newest calls' order marks, when the mix carries who made each call."""
    if not mix.call_keys.size == mix.call_times.size == mix.call_processes.size > 0:
        return None
    times = mix.call_times
    order: npt.NDArray[np.intp] | slice = slice(None)
    finite = np.isfinite(times)
    timed = times[finite]
    if timed.size > 1 and not bool(np.all(timed[1:] >= timed[:-1])):
        # Calls of several files (one per process) come file after file: the newest calls
        # are the newest in time, not the last file's (per-process files of a job whose step
        # changed read T 2.93 s, the same lines in one file 0.6 s).
        order = np.flatnonzero(finite)[np.argsort(timed, kind="stable")]
    newest = slice(-MAX_SEQUENCE_CALLS, None)
    return sequence_step(
        times[order][newest],
        mix.call_keys[order][newest],
        mix.call_bytes[order][newest],
        mix.call_processes[order][newest],
        mix.time_resolution_s,
    )


def _log_period(
    mix: CollectiveMix, settings: DetectorSettings, expected_s: float | None = None
) -> PeriodResult | None:
    series = log_series(mix)
    if series is None:
        return None
    res = mix.time_resolution_s
    rate, dt, t0 = series
    if res == 0:
        binned = estimate_period(
            rate, dt, t0=t0, settings=settings, expected_period_s=expected_s, polled=False
        )
        stamped = mix.call_times[np.isfinite(mix.call_times)]
        inside = float(np.count_nonzero(stamped >= t0)) / stamped.size
        if inside < 1.0 - STRAY_SHARE:  # more than the strays were cut (log_series)
            note = (
                f"the NCCL log is longer than {LOG_SPAN_S / 3600:.2g} h: its period is timed "
                f"on the newest {LOG_SPAN_S / 3600:.2g} h ({inside:.0%} of its calls); cut "
                "the log to time an earlier part"
            )
            binned = replace(binned, warnings=(*binned.warnings, note))
        if binned.period_s is None and not any(d.valid for d in binned.detections):
            return binned  # nothing repeats: the order is not looked at (its cost)
        seq = _call_order(mix)
        return _checked_by_order(binned, seq) if seq is not None else binned
    seq = _call_order(mix)
    if seq is not None and seq.period_s < MIN_ARRIVAL_POLLS * res:
        return _coarse_sequence_result(seq, res)
    steps = None
    timed: PeriodResult | None = None
    # Steps that can be timed leave polls without calls between them; calls in most polls are
    # steps too short for the polls (whose trains merge: 1.3 s steps in whole seconds read as
    # trains 4.35 s apart), or calls all through the steps.
    busy = _busy_polls(mix.call_times, res) > MAX_BUSY_POLLS
    if not busy:
        steps = arrival_period(mix.call_times[np.isfinite(mix.call_times)], res)
        if steps is not None and steps >= MIN_ARRIVAL_POLLS:
            span = float(np.nanmax(mix.call_times) - np.nanmin(mix.call_times))
            cycles = span / (steps * res)
            # Never a one-window lock (0.6): two windows must agree.
            timed = PeriodResult(
                steps * res, 0.5 * min(1.0, cycles / 8.0), cycles=cycles, method="arrivals"
            )
    if timed is None:
        timed = estimate_period(rate, dt, t0=t0, settings=settings, expected_period_s=expected_s)
    if seq is not None:
        # A step long enough to be timed: the timed calls have their say when they repeat at
        # a whole multiple of the call order's period (which may be half a step: a, b, a, b),
        # unless that multiple is the times' own lattice (see _lattice_multiple).
        if whole_multiple(timed.period_s, seq.period_s) and not _lattice_multiple(
            timed.period_s, seq.period_s, res
        ):
            return timed
        return _coarse_sequence_result(seq, res)
    result = timed
    if result.method == "arrivals":
        return result
    # Regular steps too short to time leave only the beat of the steps against the polls
    # (0.47 s steps read every 0.2 s: a 1.4 s "period"; 0.45 s steps in whole seconds: 4.5 s).
    if (
        busy
        or steps is not None
        or result.period_s is None
        or result.period_s < MIN_ARRIVAL_POLLS * res
    ):
        why = (
            f"the NCCL log's calls are timed to {res:g} s only (COLL lines without a timestamp "
            "are timed when read; NCCL's default timestamp format has whole seconds), so steps "
            f"under {MIN_ARRIVAL_POLLS * res:g} s (or several trains of calls a step) cannot be "
            "timed; set NCCL_DEBUG_TIMESTAMP_LEVELS to WARN,INFO and "
            'NCCL_DEBUG_TIMESTAMP_FORMAT to "[%F %T.%6f] " (NCCL >= 2.26), a shorter '
            "sources.nccl_log.poll_interval_s, or add a counter source"
        )
        return PeriodResult(None, 0.0, warnings=(*result.warnings, why))
    return result


def _step_bytes(mix: CollectiveMix | None, period: float | None) -> float | None:
    """S: collective bytes one rank issues per step (nccl-tests' S summed over its calls).

    Needs timestamps to count the steps the log spans (pauses left out); each process logs
    its own calls.
    """
    if mix is None or period is None or mix.processes < 1:
        return None
    times = mix.call_times[np.isfinite(mix.call_times)]
    if times.size < 2:
        return None
    steps = steps_spanned(times, period, mix.time_resolution_s)
    total = float(np.nansum(mix.call_bytes))
    return total / mix.processes / steps if total > 0 else None


def refresh_note(refresh_s: float) -> str:
    """What a counter that changes only every ``refresh_s`` seconds leaves unmeasured."""
    r = f"{refresh_s:.3g}"
    return (
        f"the counters change only every {r} s (a driver that refreshes its statistics on a "
        f"timer, or traffic in bursts much shorter than one poll, once every {r} s): the "
        f"series is read in {r} s steps, so periods under {2 * refresh_s:.3g} s cannot be "
        f"seen, one under {8 * refresh_s:.3g} s may be an alias of a faster one (its "
        f"confidence is kept under 0.5), and bursts under {3 * refresh_s:.3g} s are not "
        "resolved; RDMA port counters or a packet capture see finer"
    )


#: Highest confidence of a period that may not be a step (an alias of a driver's refresh,
#: the near-common multiple of two flows): shown, but below the alerts' 0.5.
UNSURE_CONFIDENCE = 0.45


def _unsure(period: PeriodResult) -> PeriodResult:
    """The period with its confidence kept at ``UNSURE_CONFIDENCE`` at most."""
    if period.confidence <= UNSURE_CONFIDENCE:
        return period
    return replace(period, confidence=UNSURE_CONFIDENCE)


def _two_flows(grid: GridSeries, period: PeriodResult, warnings: list[str]) -> bool:
    """Whether two flows' rhythms run under the period (with a warning that says so).

    See :mod:`agent.rhythms`: flows of 0.7 s and 1.93 s read as a 7.70 s step at confidence
    0.97 with D 0.62, and fired the bottleneck alert. A period with an inner rhythm of its
    own (ZeRO-3 layers, pipeline micro-batches) is one job's and is not looked at. Looked at
    whatever the confidence: a lock held long enough is shown as confident live
    (:func:`agent.tracker.sustained_confidence`), unless this says the period is unsure.
    """
    t = period.period_s
    if t is None or period.inner_period_s is not None:
        return False
    found = two_rhythms(grid.rate, grid.dt, t)
    if found is None:
        return False
    a, b = found
    warnings.append(
        f"the traffic also repeats every {a:.3g} s and every {b:.3g} s, neither a multiple of "
        f"the other: two flows with their own rhythms may share the link, and T = {t:.4g} s "
        "their near-common multiple rather than a step (confidence kept under 0.5)"
    )
    return True


#: Polls this far apart or more can hide a job's steps: one shorter than two polls aliases.
SLOW_POLL_S = 0.5
#: A period whose rate, folded over it, never drops under this share of its peak, read at
#: slow polls, may be such an alias (:func:`_alias_of_fast_steps`).
ALIAS_FLOOR = 0.5


def _alias_of_fast_steps(grid: GridSeries, period: PeriodResult, warnings: list[str]) -> bool:
    """Whether the period may be the alias of steps faster than the polls (with a warning).

    Each poll averages the traffic over its interval, so steps of 16 s read every 15 s show
    as a swing of 240 s between 82 and 100 % of the peak rate: detected with confidence 1.0,
    with D 0.65 against 0.35 (a false bottleneck alert), and 0.97 s steps read every second
    as 32 s. A true period that long, seen at polls that fine against it, has quiet or low
    phases: its bursts and gaps span polls. So at slow polls a period whose folded rate
    never falls under ``ALIAS_FLOOR`` of its peak is shown, but kept below the alerts.
    """
    t = period.period_s
    if t is None or grid.dt < SLOW_POLL_S:
        return False
    x = grid.rate
    ok = np.flatnonzero(np.isfinite(x))
    bins = max(4, round(t / grid.dt))
    if ok.size < 2 * bins:
        return False
    phase = np.mod((ok + 0.5) * grid.dt, t) / t  # slot centres: edges land between bins
    idx = np.minimum((phase * bins).astype(np.int64), bins - 1)
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=x[ok], minlength=bins)
    profile = sums[counts > 0] / counts[counts > 0]
    peak = float(profile.max())
    if peak <= 0:
        return False
    floor = float(profile.min()) / peak
    if floor < ALIAS_FLOOR:
        return False
    warnings.append(
        f"read every {grid.dt:.3g} s, the rate over T = {t:.4g} s never drops under "
        f"{floor:.0%} of its peak: steps shorter than two polls alias to a slow, shallow swing "
        "like this one, so T may be such an alias rather than a step (confidence kept under "
        "0.5), and B and D are not a step's; poll faster (RDMA or NIC counters at 100 Hz)"
    )
    return True


def _may_alias_refresh(period: PeriodResult, refresh_s: float) -> bool:
    """Whether the period could be an alias of the counters' refresh interval.

    Steps of 0.7 s under a 1 s refresh read as a confident 6.8 s period (and under 0.5 s, 3.5 s
    with D 0.56 against 0.30: a false bottleneck alert). Under 8 refresh intervals a period
    cannot be told from such an alias, so it is shown but kept below the alerts' threshold.
    """
    t = period.period_s
    return t is not None and t < 8 * refresh_s


def estimate(
    inputs: EstimateInputs,
    *,
    settings: DetectorSettings | None = None,
    idle_bytes_per_s: float = IDLE_BYTES_PER_S,
) -> Estimate:
    """Estimate T, B, D, the D split, the regime and the collective mix."""
    cfg = settings or DetectorSettings()
    warnings: list[str] = []
    mix = inputs.collectives
    collectives = dict(mix.ops) if mix is not None else {}
    nranks = mix.nranks if mix is not None else None

    period: PeriodResult | None = None
    bursts: BurstStats | None = None
    direction: str | None = None
    grid: GridSeries | None = None
    period_source: str | None = None
    last_burst_end: float | None = None
    quiet: float | None = None
    quiet_bandwidth: float | None = None
    threshold: float | None = None
    steps_grid: GridSeries | None = None
    chosen = busier_direction(inputs.network) if inputs.network else None
    period_direction: str | None = None
    swinging = False  # the rate alternates poll to poll (agent/alternation.py)
    unsure = False  # T shown, but kept below the alerts (``Estimate.period_unsure``)
    if chosen is not None:
        full_grid, period, period_direction, direction = _period_direction(
            inputs, chosen, cfg, idle_bytes_per_s, warnings
        )
        period_source = inputs.network_source
        if full_grid.refresh_s is not None:
            warnings.append(refresh_note(full_grid.refresh_s))
            unsure = _may_alias_refresh(period, full_grid.refresh_s)
        unsure = _two_flows(full_grid, period, warnings) or unsure
        unsure = _alias_of_fast_steps(full_grid, period, warnings) or unsure
        swinging = alternates(full_grid.rate)
        if (
            swinging
            and period.period_s is not None
            and not seen_over_pairs(full_grid.rate, full_grid.dt, period.period_s)
        ):
            warnings.append(
                f"the rate swings from one poll to the next (a rhythm near two polls, "
                f"{0.5 / full_grid.dt:.3g} Hz): the {period.period_s:.3g} s it repeats at is "
                "its beat against the polls, not a step; poll faster"
            )
            period = PeriodResult(None, 0.0)
        elif swinging and period.period_s is not None:
            # It shows over pairs of polls too, yet may be the swing's pattern repeating (21 ms
            # steps read every 10 ms repeat every 21 polls: 0.21 s): below the alerts.
            unsure = True
        if unsure and period.period_s is not None:
            period = _unsure(period)
        else:
            unsure = False
        grid = whole_periods(full_grid, period)
        steps = steps_grid = without_pauses(grid, period)
        bursts = burst_stats(steps.rate, steps.dt, period.period_s, polls=steps.polls, t0=steps.t0)
        threshold = _burst_threshold(bursts, idle_bytes_per_s, periodic=period.period_s is not None)
        ended = _last_burst_end(full_grid, threshold)
        if ended is not None:
            last_burst_end, quiet, quiet_bandwidth = ended
        # Either direction's resets: a reset read only where the direction shown held it
        # (one file with both) vanished when the other one was shown (files apart).
        resets = sum(g.resets for g in inputs.network.values())
        if resets:
            warnings.append(f"{resets} counter reset(s): those intervals were left out")
    elif mix is not None:
        period = _log_period(mix, cfg, inputs.expected_period_s)
        if period is not None:
            period_source = "nccl_log"
        elif mix.calls and np.isfinite(mix.call_times).any():
            timed = int(np.isfinite(mix.call_times).sum())
            warnings.append(
                f"only {timed} timed COLL call(s) in the NCCL log"
                + (" (all at one instant)" if timed >= MIN_TIMED_CALLS else "")
                + f": T needs {MIN_TIMED_CALLS} or more over some steps; give a longer log"
            )
        elif mix.calls:
            warnings.append(
                "the NCCL log has no timestamps on its COLL lines, so T cannot come from it: "
                "set NCCL_DEBUG_TIMESTAMP_LEVELS to WARN,INFO and NCCL_DEBUG_TIMESTAMP_FORMAT "
                'to "[%F %T.%6f] " (NCCL >= 2.26; `commpulse wrap` does), or give --counters'
            )
    if period is not None:
        warnings.extend(period.warnings)

    t = period.period_s if period is not None else None
    b = bursts.burst_bandwidth if bursts is not None and bursts.has_bursts else None
    on_ratio = bursts.on_ratio if bursts is not None else None
    if bursts is not None and not bursts.has_bursts:
        on_ratio = 0.0 if bursts.mean_rate < idle_bytes_per_s else None
    unresolved = bursts is not None and bursts.has_bursts and not bursts.resolved
    swung = swinging and bursts is not None
    few = bursts is not None and bursts.has_bursts and 0 < bursts.bursts <= FEW_BURSTS
    if t is None and grid is not None and bursts is not None and few and not swinging:
        # 30-40 s steps in 120 s: no T and nothing said why.
        warnings.append(
            f"only {bursts.bursts} burst(s) in {grid.duration_s:.0f} s: too few to time a "
            f"period; give a window of {FEW_BURSTS + 1} steps or more"
        )
    if swung:
        # Bursts of about a poll, every other poll: each poll holds part of one, so the polls
        # read neither B nor the time in bursts (a 19.5 ms step of D 0.4 read D 1.0).
        warnings.append(
            "the rate swings from one poll to the next: bursts of about a poll cannot be "
            "resolved, so B and D are not given; poll faster"
        )
        b, on_ratio, unresolved = None, None, bursts is not None and bursts.has_bursts
    elif unresolved:
        warnings.append(
            "bursts are shorter than 3 samples: B and D cannot be resolved at this poll rate "
            "(T and bytes per iteration still hold); poll faster"
        )
    elif (
        t is not None
        and bursts is not None
        and not bursts.has_bursts
        and bursts.mean_rate >= idle_bytes_per_s
    ):
        warnings.append(
            "the bursts do not stand clear of the rate's noise: B and D cannot be resolved "
            "(T and bytes per iteration still hold)"
            if bursts.bytes_per_period is not None
            else "the bursts do not stand clear of the rate's noise, and no quiet level lies "
            "between them: B, D and bytes per iteration cannot be resolved (T still holds)"
        )

    split: DutySplit | None = None
    gpu_signal, activity, activities, passed_over = _gpu_activity(inputs.gpu)
    if passed_over:
        warnings.append(passed_over)
    if (
        inputs.gpu is not None
        and gpu_signal is not None
        and grid is not None
        and bursts is not None
        and bursts.has_bursts
        and not swinging
    ):
        windows = gpu_windows(inputs.gpu.times, inputs.gpu.gpu, inputs.gpu.signals[gpu_signal])
        phases = [v for v in (bursts.mean_burst_s, bursts.mean_gap_s) if v is not None]
        shortest = min(phases) if phases else None
        split = split_duty(
            grid.rate,
            grid.t0,
            grid.dt,
            bursts.off_level,
            bursts.on_level,
            windows,
            signal=gpu_signal,
            shortest_phase_s=shortest,
            period_s=t,
        )
        if split.reason:
            warnings.append(split.reason)

    # D is communication time per period: without a period it is undefined (the network
    # on-fraction is still reported on its own).
    duty: float | None = None
    duty_source: str | None = None
    if t is not None and split is not None and split.exposed is not None:
        duty, duty_source = split.exposed, "gpu_exposed"
    elif t is not None and on_ratio is not None and not unresolved:
        # Bursts under 3 samples: the on-fraction counts partial edge samples as whole (20 ms
        # bursts read every 10 ms: D 0.156 against 0.102), so no D is given, as the warning says.
        duty, duty_source = on_ratio, "network"

    shares = collective_shares(collectives) if collectives else None
    duration = grid.duration_s if grid is not None else 0.0
    bursts_per_period = None
    if t is not None and bursts is not None and duration > 0:
        bursts_per_period = bursts.bursts * t / duration
    spikes = 0
    if grid is not None and bursts is not None and not bursts.has_bursts:
        spikes = clear_spikes(grid.rate, idle_bytes_per_s)
    features = RegimeFeatures(
        periodic=t is not None,
        inner_period=period is not None and period.inner_period_s is not None,
        bursts_per_period=bursts_per_period,
        step_silence=_step_silence(steps_grid, bursts, threshold, t),
        largest_share=_largest_share(steps_grid, bursts, t),
        bursty=bursts is not None and bursts.has_bursts,
        bursts=bursts.bursts if bursts is not None else 0,
        burst_rate=bursts.on_level if bursts is not None and bursts.has_bursts else None,
        mean_rate=bursts.mean_rate if bursts is not None else None,
        collective_calls=mix.calls if mix is not None else None,
        gather_share=shares[0] if shares else None,
        sparse_share=shares[1] if shares else None,
        untimed=chosen is None and mix is not None and not bool(np.isfinite(mix.call_times).any()),
        spikes=spikes,
        rhythm=t is None and period is not None and period.irregular_rhythm_s is not None,
    )
    regime = classify_regime(features, idle_bytes_per_s=idle_bytes_per_s)
    silence = features.step_silence
    if silence is None and grid is None and mix is not None and t is not None:
        silence = _calls_silence(mix.call_times, mix.call_bytes, t)
    note = _pause_note(t, period, silence)
    if note is not None:
        warnings.append(note)
    if (
        regime == "unknown"
        and grid is not None
        and spikes >= MIN_APERIODIC_BURSTS
        and bursts is not None
        and bursts.mean_rate < idle_bytes_per_s
    ):
        peak = float(np.fmax.reduce(grid.rate))
        warnings.append(
            f"the rate reaches {idle_bytes_per_s / 1e6:.3g} MB/s or more {spikes} times (up to "
            f"{peak / 1e6:.3g} MB/s) between quiet polls, with no bursts: "
            f"transfers that each fit in a poll cannot be told from noise at "
            f"{1.0 / grid.dt:.3g} Hz (inference replies? other traffic?); poll faster"
        )
    elif (
        regime == "unknown"
        and t is None
        and grid is not None
        and bursts is not None
        and bursts.mean_rate >= idle_bytes_per_s
        and not warnings
    ):
        # Steady load says nothing about steps faster than the polls: a real tensor-parallel
        # job's 0.19 s steps, polled at 10 Hz, read as 35 MB/s with no period and no word.
        shortest = cfg.min_lag_level0 * grid.dt
        warnings.append(
            f"no period between {shortest:.3g} s ({cfg.min_lag_level0} polls) and "
            f"{grid.duration_s / cfg.min_cycles:.3g} s in {bursts.mean_rate / 1e6:.3g} MB/s "
            f"of traffic: steady load, or steps shorter than {cfg.min_lag_level0} polls, "
            "which this poll rate cannot show (poll faster)"
        )
    step_bytes = _step_bytes(mix, t)
    return Estimate(
        period_s=t,
        burst_bandwidth=b,
        duty_cycle=duty,
        confidence=period.confidence if period is not None else 0.0,
        regime=regime,
        network_on_ratio=on_ratio,
        nranks=nranks,
        collectives=collectives,
        inner_period_s=period.inner_period_s if period is not None else None,
        bytes_per_iteration=bursts.bytes_per_period if bursts is not None and t else None,
        step_bytes=step_bytes,
        mean_bandwidth=bursts.mean_rate if bursts is not None else None,
        background_bandwidth=bursts.off_level if bursts is not None and bursts.has_bursts else None,
        duty_cycle_source=duty_source,
        period_source=period_source if t is not None else None,
        direction=direction,
        gpu_signal=gpu_signal,
        exposed_ratio=split.exposed if split is not None else None,
        overlapped_ratio=split.overlapped if split is not None else None,
        compute_ratio=split.compute_fraction if split is not None else None,
        bursts=bursts.bursts if bursts is not None else 0,
        last_burst_end_s=last_burst_end,
        quiet_s=quiet,
        burst_threshold=threshold,
        quiet_bandwidth=quiet_bandwidth,
        gpu_activity=activity,
        gpu_activities=activities,
        bursts_per_period=bursts_per_period,
        burst_resolved=bool(bursts is not None and bursts.resolved),
        # Periods the estimate covers (the detector's own count is of one pyramid level's
        # window, which can be a fraction of it).
        period_cycles=(
            duration / t if t and duration > 0 else period.cycles if period is not None else 0.0
        ),
        period_method=period.method if period is not None else "none",
        window_s=duration,
        warnings=tuple(warnings),
        period_unsure=unsure and t is not None,
        period_detail=period,
        burst_detail=bursts,
        period_direction=period_direction,
    )


#: Steps, counted by their bursts' edges, that time T well enough to vouch for it ...
TIMED_STEPS = 32
#: ... when their spread leaves the mean step this uncertain (relative standard error) ...
TIMED_REL_ERROR = 0.02
#: ... and no interval between them is this many typical (median) intervals long.
TIMED_LONGEST = 1.75


#: A period of this many inner periods or more, ending in a silence this long, whose inner
#: period is this long or more, may be steps and a regular pause (:func:`_pause_note`).
PAUSE_NOTE_CYCLES = 8.0
PAUSE_NOTE_SILENCE_S = 2.0
PAUSE_NOTE_INNER_S = 0.25


def _calls_silence(times: FloatArray, sizes: FloatArray, period_s: float) -> float | None:
    """The longest silence between calls of a typical period, as a share of it.

    :func:`agent.bursts.step_silence` for an NCCL log, over the gaps between calls.
    Calls of under 1 % of the median size are no traffic (an evaluation's metric AllReduces
    of one float, a barrier).
    """
    keep = np.isfinite(times)
    if sizes.size == times.size and bool(np.isfinite(sizes).all()) and sizes.size:
        keep &= sizes >= 0.01 * float(np.median(sizes))
    timed = np.sort(times[keep])
    if timed.size < 2:
        return None
    steps = int((timed[-1] - timed[0]) / period_s)
    if steps < 2:
        return None
    return typical_longest(np.diff(timed), steps) / period_s


def _pause_note(
    period_s: float | None, period: PeriodResult | None, silence_share: float | None
) -> str | None:
    """A note where T may be a run of steps and a regular pause, not one step.

    Trains of bursts with a silence between them are read as one period with the bursts'
    rhythm inside (a ZeRO-3 step's layers, a pipeline's micro-batches): the traffic alone
    cannot tell that from steps with an evaluation or a checkpoint every N steps (20 steps
    of 1 s and an 8 s evaluation read T = 28 s, confidence 0.99). The user can: the note
    names both readings where the inner rhythm is as slow as steps are and the silence long.
    """
    if period_s is None or period is None or silence_share is None:
        return None
    inner = period.inner_period_s
    if inner is None or inner < PAUSE_NOTE_INNER_S or period_s < PAUSE_NOTE_CYCLES * inner:
        return None
    silence = silence_share * period_s
    if silence < PAUSE_NOTE_SILENCE_S:
        return None
    return (
        f"T = {period_s:.4g} s is a run of bursts {inner:.4g} s apart and a {silence:.3g} s "
        f"silence: if the job pauses regularly (evaluation or checkpoints every "
        f"{math.ceil((period_s - silence) / inner)} steps), its step is the inner period, "
        f"{inner:.4g} s"
    )


def timed_confidence(est: Estimate) -> float:
    """The confidence ``analyze`` shows for a T timed over many steps: the window's, or more.

    A window's confidence rates its comb, z and edge spread, and steps that spread 15-20 %
    keep it low however many there are: ``analyze`` of real DDP jobs of 53 to 145 steps
    spreading 10-20 % read their T within 0.3-0.4 % of the mean step at confidence 0.07,
    0.08 and 0.25. Over ``TIMED_STEPS`` steps or more, with the edges giving T to within
    ``TIMED_REL_ERROR``, T is shown at ``SUSTAINED_CONFIDENCE`` at least, the level the live
    agent shows a lock held that long at (:func:`agent.tracker.sustained_confidence`). A T
    marked unsure (a refresh alias, two flows, a poll swing) is left as it is.

    Steps come one after another: where a rhythm stops for a while (``TIMED_LONGEST``), its
    bursts may be the layers of a longer step that the window does not show (10-20 s of a
    real jittery FSDP job read its 0.11 s layers, trains of seven with gaps of four to five
    between them), or a job's pauses; such a T keeps its own confidence. Offline only: live,
    the tracker's own rule vouches for what it has held.
    """
    detail = est.period_detail
    if (
        est.period_s is None
        or est.period_unsure
        or detail is None
        or detail.interval_cv is None
        or not math.isfinite(detail.interval_cv)
        or detail.rising_edges_s is None
        or detail.rising_edges_s.size < TIMED_STEPS
        or est.period_cycles < TIMED_STEPS
        or est.period_rel_error > TIMED_REL_ERROR
    ):
        return est.confidence
    intervals = np.diff(detail.rising_edges_s)
    if float(intervals.max()) > TIMED_LONGEST * float(np.median(intervals)):
        return est.confidence
    return max(est.confidence, SUSTAINED_CONFIDENCE)


def _trains_in_window(inputs: EstimateInputs, recent: Estimate) -> bool:
    """Whether the whole window shows a newest part's period as a rhythm that stops.

    A part can hold a single train of DDP's bucketed all-reduces, whose spacing then reads as
    a clear period (a real job's six buckets 0.6 s apart: confidence 0.98); the window before
    it holds the step's silence, which a step's own rhythm never has.
    """
    direction = recent.period_direction or recent.direction
    grid = inputs.network.get(direction) if direction is not None else None
    if grid is None or recent.period_s is None:
        return False
    grid = grid.from_traffic_start()
    return comes_in_trains(grid.rate, grid.dt, recent.period_s, t0=grid.t0)


def estimate_recent(
    inputs: EstimateInputs,
    *,
    min_window_s: float,
    settings: DetectorSettings | None = None,
    idle_bytes_per_s: float = IDLE_BYTES_PER_S,
    fractions: tuple[float, ...] = (0.5, 0.25),
    max_span_s: float = 30.0,
) -> tuple[Estimate, float | None]:
    """:func:`estimate` on the window and, before a lock, on its newest part too.

    A job's first steps do not repeat like the rest: parameter broadcast at start-up, warm-up
    steps slower than the steady ones. Until the live tracker has a lock, the window grows
    from that start, which holds the NSDF down or biases the edges (a real comm-bound DDP job:
    z 1.6 and no period over the whole window of 9 steps, z 8 and T within 0.2 % over its
    last 7; two windows later the whole window's T was 3.6 % long). While nothing is locked
    (``inputs.expected_period_s`` is None) and the traffic spans at most ``max_span_s`` (in a
    longer window a start-up is diluted, and an aperiodic host would pay for every retry),
    the newest ``fractions`` of the traffic are tried in turn, never under ``min_window_s``:
    the first with a period is compared with the whole window's, and the more confident one is
    the estimate. Counter grids only: an NCCL log's call window is cut by the caller.

    Returns the estimate and the start of the part it came from (None: the whole window), from
    which a caller that locks on it keeps its window: the older traffic did not repeat.
    """
    est = estimate(inputs, settings=settings, idle_bytes_per_s=idle_bytes_per_s)
    if inputs.expected_period_s is not None or not inputs.network:
        return est, None
    # Of the traffic only: idle before it (a ring that filled before the job) is no part.
    active = {d: g.rate.size - active_span(g.rate)[0] for d, g in inputs.network.items()}
    if max(n * inputs.network[d].dt for d, n in active.items()) > max_span_s:
        return est, None
    best, since = est, None
    for fraction in fractions:
        parts: dict[Direction, GridSeries] = {}
        for direction, grid in inputs.network.items():
            keep = math.ceil(active[direction] * fraction)
            if keep * grid.dt < min_window_s:
                return best, since
            parts[direction] = grid.sliced(grid.rate.size - keep, grid.rate.size)
        recent = estimate(
            replace(inputs, network=parts), settings=settings, idle_bytes_per_s=idle_bytes_per_s
        )
        if (
            recent.period_s is not None
            and (best.period_s is None or recent.confidence > best.confidence)
            and not _trains_in_window(inputs, recent)
        ):
            best, since = recent, min(g.t0 for g in parts.values())
        if best.period_s is not None:
            break
    return best, since
