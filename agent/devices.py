"""Several NICs or RDMA ports on one host: which of them step together, and when the last is done.

The host's T, B and D come from the sum of its devices per direction. The sum hides two things
an operator of an 8-rail node meets:

* **Two jobs on one host**, each on its own rails (two 4-GPU jobs on an 8-GPU node): their
  steps add into a pattern of neither. Steps of 1.0 s and 1.5 s on four rails each read
  T = 3.0 s at confidence 0.95 with no word; with D 0.35 and 0.30 they read D 0.55, a
  bottleneck alert on two healthy jobs.
* **Rails that finish apart**: a collective is done when its slowest rail is. A rail at half
  speed carries its share for twice as long, at 1/16 of the host's rate: the sum's bursts end
  when the fast rails do, and D read 0.32 where the step waited on the network 0.6 of the
  time (the alert missed).

Each device that carries a share of the host's bytes is estimated on its own
(:func:`device_steps`); devices with confident periods are grouped by them
(:func:`step_groups`); and where the devices of the job are in a burst for longer than the sum
is, D counts until the last of them ends (:func:`last_done_share`). Pure functions of grids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from agent.estimate import Estimate, EstimateInputs, estimate, mean_rate
from agent.levels import separation, two_means
from agent.rates import Direction, GridSeries

__all__ = [
    "LONGER_ON",
    "DeviceBursts",
    "DeviceSteps",
    "burst_threshold",
    "device_bursts",
    "device_steps",
    "in_step",
    "job_of",
    "jobs_note",
    "last_done_share",
    "same_step",
    "step_groups",
    "until_last_done",
]

Grids = Mapping[Direction, GridSeries]

#: A device carrying less than this share of the host's bytes per second is no rail of a job
#: (a management NIC, an idle rail with a few KB/s), and its own T is not asked for.
MIN_SHARE = 0.05
#: Periods within this share of each other are one step time; so are ratios this close to a
#: whole number (a rail that shows only a rhythm inside the job's step, or its multiple).
SAME_STEP = 0.03
#: A device's own T counts for grouping at this confidence or more (the alert's own bar is
#: 0.5: a period below it is not shown as a job's).
MIN_CONFIDENCE = 0.6
#: Each device is estimated on its newest slots only (at 100 Hz, 11 minutes).
NEWEST_SLOTS = 2**16
#: The job's devices in a burst this much longer than the sum's D: D counts until the last of
#: them ends. Below it, edges and noise (a few slots a step) would move D for nothing.
LONGER_ON = 1.1


@dataclass(frozen=True)
class DeviceSteps:
    """One device's own estimate, and its bytes per second (both directions)."""

    name: str
    bytes_per_s: float
    estimate: Estimate

    @property
    def timed(self) -> bool:
        """Whether its own T is confident enough to group by."""
        e = self.estimate
        return e.period_s is not None and e.confidence >= MIN_CONFIDENCE and not e.period_unsure


def _mean_rate(grids: Grids) -> float:
    """A device's bytes per second, its directions' mean rates summed."""
    return sum(mean_rate(g) for g in grids.values())


def _busy(devices: Mapping[str, Grids]) -> dict[str, float]:
    """Bytes per second of the devices carrying ``MIN_SHARE`` of the host's or more."""
    rates = {name: _mean_rate(g) for name, g in devices.items()}
    total = sum(rates.values())
    return {n: r for n, r in rates.items() if total > 0 and r >= MIN_SHARE * total}


def _newest(grids: Grids, slots: int) -> dict[Direction, GridSeries]:
    return {d: g.sliced(max(0, g.rate.size - slots), g.rate.size) for d, g in grids.items()}


def device_steps(devices: Mapping[str, Grids]) -> list[DeviceSteps]:
    """Each device's own estimate, for those with ``MIN_SHARE`` of the bytes or more."""
    out = []
    for name, rate in _busy(devices).items():
        grids = devices[name]
        if not grids:
            continue
        inputs = EstimateInputs(network=_newest(grids, NEWEST_SLOTS), network_source="counters")
        out.append(DeviceSteps(name, rate, estimate(inputs)))
    return out


#: Busy devices whose rates all correlate this well with their sum move in step: one job, no
#: rail behind the others (a rail at half speed for twice as long correlates 0.65, channels
#: 0.1 s apart on 0.45 s bursts 0.92, the rails of two jobs 0.58-0.84).
IN_STEP = 0.95


def in_step(devices: Mapping[str, Grids]) -> bool:
    """Whether the busy devices move in step, so that their own estimates would add nothing.

    The live agent's look costs one estimate per device (8 rails: ~55 ms); rails of one job
    polled together are told by a correlation first. Grids of one poll table (same slots).
    """
    busy = list(_busy(devices))
    if len(busy) < 2:
        return True
    for way in {d for name in busy for d in devices[name]}:
        series = [devices[name][way].rate for name in busy if way in devices[name]]
        if len(series) < 2 or len({x.size for x in series}) != 1:
            return False
        stack = np.vstack(series)
        known = np.isfinite(stack).all(axis=0)
        if int(known.sum()) < 16:
            return False
        stack = stack[:, known]
        summed = stack.sum(axis=0)
        if float(np.std(summed)) <= 0:
            continue
        for x in stack:
            if float(np.std(x)) <= 0 or float(np.corrcoef(x, summed)[0, 1]) < IN_STEP:
                return False
    return True


def _period(s: DeviceSteps) -> float:
    return s.estimate.period_s or 0.0


def same_step(a: float, b: float) -> bool:
    """One step time: equal within ``SAME_STEP``, or one a whole multiple of the other."""
    ratio = max(a, b) / min(a, b)
    return abs(ratio - round(ratio)) <= SAME_STEP * ratio


def step_groups(steps: Sequence[DeviceSteps]) -> list[list[DeviceSteps]]:
    """The timed devices grouped by their step time, the group with the most bytes first.

    A whole-number ratio keeps two groups one: a rail that carries only the micro-batches'
    traffic of a pipeline stage may show their rhythm, not the step, and two jobs at 1 s and
    2 s cannot be told from that by the counters alone.
    """
    timed = sorted((s for s in steps if s.timed), key=_period)
    groups: list[list[DeviceSteps]] = []
    for s in timed:
        if groups and _period(s) <= _period(groups[-1][0]) * (1.0 + SAME_STEP):
            groups[-1].append(s)
        else:
            groups.append([s])
    groups.sort(key=lambda g: -sum(s.bytes_per_s for s in g))
    merged: list[list[DeviceSteps]] = []
    for g in groups:
        home = next((m for m in merged if same_step(_period(m[0]), _period(g[0]))), None)
        if home is None:
            merged.append(list(g))
        else:
            home.extend(g)
    return merged


#: A device's own bursts must stand this clear of its background (:func:`separation`: a
#: unimodal spread split in two scores up to ~5.5) to count in :func:`last_done_share`.
CLEAR_BURSTS = 6.0


def burst_threshold(grid: GridSeries) -> float | None:
    """The on/off midpoint of one device's rate, where its bursts stand clear (else None).

    Taken on the direction asked for, not the one the device's own estimate chose: on
    symmetric traffic that choice is a tie, and a slow rail's came out the other way.
    """
    x = grid.rate[np.isfinite(grid.rate)]
    if x.size < 16:
        return None
    lo, hi = two_means(x)
    if hi <= lo or separation(x, lo, hi) < CLEAR_BURSTS:
        return None
    return 0.5 * (lo + hi)


def last_done_share(host: GridSeries, members: Sequence[tuple[GridSeries, float]]) -> float | None:
    """The share of the host's known slots in which any member device is in a burst.

    Each member comes with its own burst threshold (:func:`burst_threshold`): a slow rail's
    burst is a burst on its own scale, not on the sum's. ``None`` where no slot is known.
    """
    n = host.rate.size
    known = np.isfinite(host.rate)
    union = np.zeros(n, dtype=np.bool_)
    for grid, threshold in members:
        k = round((host.t0 - grid.t0) / host.dt)
        seg = np.full(n, -np.inf)
        lo, hi = max(0, k), min(grid.rate.size, k + n)
        if hi > lo:
            seg[lo - k : hi - k] = np.nan_to_num(grid.rate[lo:hi], nan=-np.inf)
        union |= seg >= threshold
    count = int(np.count_nonzero(known))
    return float(np.count_nonzero(union & known)) / count if count else None


@dataclass(frozen=True)
class DeviceBursts:
    """One device's bursts in one direction, on its own scale (the live agent's metrics).

    A slow rail shows as half the others' burst bandwidth and twice their on-ratio; the sum's
    B and D hide which rail it is.
    """

    device: str
    direction: Direction
    burst_bandwidth: float
    on_ratio: float
    #: The device's own T, where the look estimated it (devices not in step).
    period_s: float | None = None


def device_bursts(
    devices: Mapping[str, Grids], steps: Sequence[DeviceSteps] = ()
) -> list[DeviceBursts]:
    """Each busy device's burst bandwidth and on-ratio per direction with clear bursts."""
    periods = {s.name: s.estimate.period_s for s in steps if s.timed}
    out = []
    for name in sorted(_busy(devices)):
        for way, grid in sorted(devices[name].items()):
            cut = burst_threshold(grid)
            if cut is None:
                continue
            x = grid.rate[np.isfinite(grid.rate)]
            on = x >= cut
            out.append(
                DeviceBursts(name, way, float(x[on].mean()), float(on.mean()), periods.get(name))
            )
    return out


def _names(steps: Sequence[DeviceSteps]) -> str:
    return ", ".join(sorted(s.name for s in steps))


def jobs_note(groups: Sequence[Sequence[DeviceSteps]], devices: int) -> str:
    """Which devices step at which period, and whose T, B and D are shown (the first group)."""
    total = sum(s.bytes_per_s for g in groups for s in g)
    parts = [f"{_names(g)} at T = {g[0].estimate.period_s or 0.0:.4g} s" for g in groups]
    share = sum(s.bytes_per_s for s in groups[0]) / total if total > 0 else 1.0
    return (
        f"the devices step apart ({'; '.join(parts)}): two jobs on this host, or more? "
        f"T, B and D are those of the busiest group, {_names(groups[0])} ({share:.0%} of the "
        f"bytes of the {sum(len(g) for g in groups)} devices with steps, of {devices})"
    )


def job_of(
    groups: Sequence[Sequence[DeviceSteps]], period_s: float | None
) -> Sequence[DeviceSteps]:
    """The group whose devices step at ``period_s`` (empty when none does)."""
    if not period_s:
        return ()
    return next((g for g in groups if same_step(g[0].estimate.period_s or 0.0, period_s)), ())


def until_last_done(
    est: Estimate, host: GridSeries, job: Sequence[DeviceSteps], devices: Mapping[str, Grids]
) -> Estimate:
    """D until the job's last device is done, where its devices' bursts outlast their sum's.

    ``host`` is the grid ``est`` was made on (its direction); ``job`` the devices of the job
    (:func:`job_of`), whose grids ``devices`` holds. A rail at half speed, or channels started
    apart, keep a device busy after the sum's bursts have ended; the step waits for it all the
    same.
    """
    d, way = est.duty_cycle, est.direction
    if est.period_s is None or d is None or way is None or est.duty_cycle_source != "network":
        return est
    members = [
        (s.name, devices[s.name].get(way), s.estimate.duty_cycle) for s in job if s.name in devices
    ]
    clear = [
        (n, g, own, cut)
        for n, g, own in members
        if g is not None and (cut := burst_threshold(g)) is not None
    ]
    if len(clear) < 2:
        return est
    share = last_done_share(host, [(g, cut) for _, g, _, cut in clear])
    if share is None or share < LONGER_ON * d:
        return est
    longest = sorted(clear, key=lambda m: -(m[2] or 0.0))
    shown = ", ".join(f"{n} {own or 0.0:.2f}" for n, _, own, _ in longest[:3])
    note = (
        f"the job's devices are in a burst longer than their sum shows (their own D: {shown}"
        f"{', ...' if len(longest) > 3 else ''}): a slow or loaded rail, or channels out of "
        f"step; the step waits until the last one is done, so D counts until then "
        f"({d:.2f} -> {share:.2f})"
    )
    on = est.network_on_ratio
    return replace(
        est,
        duty_cycle=share,
        network_on_ratio=max(on, share) if on is not None else None,
        warnings=(*est.warnings, note),
    )
