"""Split communication into the part hidden by compute and the part the step waits for.

D is "communication time / T", but the network is also busy while the GPU computes
(overlapped DDP buckets), and NCCL kernels keep ``utilization.gpu`` at 100 % while they spin.
Only a signal that tells compute from NCCL (SM activity, tensor-pipe activity) can say which
communication is *exposed*: traffic flowing while the GPU is not computing.

Per grid slot: ``u`` = network on-level in 0..1 from the burst levels, ``c`` = computing level in
0..1 from the GPU signal between its low (exposed-comm or idle) and busy plateaus. Then
``exposed = mean(u·(1−c))``, ``overlapped = mean(u·c)``, ``compute = mean(c)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.levels import two_means

__all__ = [
    "DISTINGUISHING_SIGNALS",
    "SIGNAL_RANK",
    "DutySplit",
    "GpuWindows",
    "best_signal",
    "choose_signal",
    "gpu_windows",
    "split_duty",
]

FloatArray = npt.NDArray[np.float64]

#: Signals in order of preference. Tensor-pipe and SM activity drop during NCCL-only phases
#: (NCCL uses no tensor pipes and few SMs); graphics-engine activity and utilization.gpu count
#: any resident kernel, NCCL's spin included, so they cannot separate compute from comm.
SIGNAL_RANK = ("tensor_active", "sm_active", "gr_engine_active", "util")
DISTINGUISHING_SIGNALS = frozenset({"tensor_active", "sm_active"})


def best_signal(available: set[str] | frozenset[str]) -> str | None:
    """The most compute-specific signal among those available."""
    for name in SIGNAL_RANK:
        if name in available:
            return name
    return None


#: Activity under this is no compute: a GPU whose busy level stays under it never computes,
#: and a tensor-pipe signal whose busiest samples stay under it, where SM activity does not,
#: shows a job without tensor-core work (FP32, or kernels that use none), not an idle GPU.
NO_COMPUTE = 0.05
#: A busy level less than this share of itself above the low one is one plateau: the GPU
#: never leaves its compute level.
PLATEAU_SPREAD = 0.25


def choose_signal(signals: Mapping[str, FloatArray]) -> tuple[str | None, str | None]:
    """The signal to split D on, and why a better-ranked one was passed over (or None).

    By :data:`SIGNAL_RANK` among the signals that hold values: a column of only ``[N/A]``
    (profiling off, a consumer GPU) was chosen and left "no GPU samples" where util had them.
    ``tensor_active`` is passed over for ``sm_active`` when its busiest samples stay under
    :data:`NO_COMPUTE` and sm_active's do not: read as "the GPU never computes", it made
    every burst exposed (an FP32 job, D 0.45 against 0.30). dcgm-exporter's default fields
    include the tensor pipe, so this is the setup out of the box.
    """
    held = {name for name, values in signals.items() if bool(np.isfinite(values).any())}
    name = best_signal(held)
    if name == "tensor_active" and "sm_active" in held:
        tensor = float(np.nanpercentile(signals["tensor_active"], 95))
        sm = float(np.nanpercentile(signals["sm_active"], 95))
        if tensor < NO_COMPUTE <= sm:
            return "sm_active", (
                f"tensor_active stays under {NO_COMPUTE:.0%} while sm_active shows "
                "compute (no tensor-core work: FP32?); compute is told from communication "
                "by sm_active"
            )
    return (name if name is not None else best_signal(set(signals))), None


@dataclass(frozen=True)
class DutySplit:
    """Exposed and overlapped communication as fractions of time."""

    signal: str
    distinguishing: bool
    exposed: float | None
    overlapped: float | None
    compute_fraction: float | None
    gpu_interval_s: float
    reason: str | None = None


@dataclass(frozen=True)
class GpuWindows:
    """Per GPU sample: the window it averages over and its value (one GPU per array row set)."""

    start: FloatArray
    end: FloatArray
    value: FloatArray
    gpu: npt.NDArray[np.int64]
    interval_s: float
    #: GPUs left out because most of their samples share a time stamp (whole seconds at 10 Hz).
    stacked: int = 0


def gpu_windows(times: FloatArray, gpu: npt.NDArray[np.int64], values: FloatArray) -> GpuWindows:
    """Turn GPU samples into averaging windows.

    A GPU sample is an average over the interval that *ends* at its timestamp (DCGM and NVML
    report that way); a GPU's first sample gets the window length of its median spacing.
    """
    starts, ends, vals, ids, steps = [], [], [], [], []
    stacked = 0
    for g in np.unique(gpu):
        sel = gpu == g
        t, v = times[sel], values[sel]
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        if t.size < 2:
            continue
        step = float(np.median(np.diff(t)))
        if step <= 0:
            stacked += 1
            continue
        # Windows come from every sample time, so a sample after a missing one (NaN) or a
        # gap does not claim the missing window; only then are the NaN values dropped.
        s = np.maximum(np.concatenate(([t[0] - step], t[:-1])), t - 2.0 * step)
        ok = np.isfinite(v)
        if int(ok.sum()) < 2:
            continue
        steps.append(step)
        starts.append(s[ok])
        ends.append(t[ok])
        vals.append(v[ok])
        ids.append(np.full(int(ok.sum()), g, dtype=np.int64))
    if not steps:
        empty = np.empty(0)
        return GpuWindows(empty, empty, empty, np.empty(0, dtype=np.int64), math.nan, stacked)
    return GpuWindows(
        start=np.concatenate(starts),
        end=np.concatenate(ends),
        value=np.concatenate(vals),
        gpu=np.concatenate(ids),
        interval_s=float(np.median(steps)),
        stacked=stacked,
    )


def _apart(windows: GpuWindows, t0: float, dt: float, rate: FloatArray) -> str:
    """Why the GPU and network samples do not meet: their two time spans, and what to check.

    Both are read on one clock as given: a counters file timed from boot (or from 0) beside a
    GPU file in epoch seconds, or nvidia-smi's local time beside UTC, do not meet, and nothing
    in the files says which origin is right.
    """
    net = (t0, t0 + rate.size * dt)
    gpu = (float(windows.start.min()), float(windows.end.max())) if windows.start.size else None
    if gpu is None:
        return "GPU and network samples do not overlap in time"
    gap = max(gpu[0] - net[1], net[0] - gpu[1])
    spans = f"network {net[0]:.3f} to {net[1]:.3f} s, GPU {gpu[0]:.3f} to {gpu[1]:.3f} s"
    if gap <= 0:
        return (
            f"GPU and network samples overlap too little in time ({spans}): D is the network "
            "on-fraction"
        )
    return (
        f"GPU and network samples do not overlap in time ({spans}, {gap:.3g} s apart): both "
        "must be on one clock (epoch seconds, or nvidia-smi's timestamps in the same time "
        "zone); D is the network on-fraction"
    )


def split_duty(
    rate: FloatArray,
    t0: float,
    dt: float,
    off_level: float,
    on_level: float,
    windows: GpuWindows,
    *,
    signal: str,
    shortest_phase_s: float | None,
    period_s: float | None = None,
) -> DutySplit:
    """Exposed / overlapped communication from the network grid and GPU sample windows.

    Per GPU window: ``n`` = network on-fraction inside it (from the finer network grid),
    ``c`` = computing fraction from the GPU value. Inside one window the GPU is assumed to
    compute while the network is quiet first (``exposed = min(n, 1 − c)``): exact when
    compute and communication alternate — the transitions, where a plain product of the two
    would smear — and zero when the window is computing throughout.

    Args:
        rate: network rate per grid slot (NaN = unknown).
        t0: start of the first grid slot.
        dt: grid step.
        off_level: background rate (off-core mean).
        on_level: burst rate (on-core mean).
        windows: the GPU samples as windows (:func:`gpu_windows`).
        signal: which signal the windows hold.
        shortest_phase_s: the shorter of the communication and compute phases; the GPU
            samples must be at most half of it to see the phases apart.
        period_s: T, if known: the GPU samples are then checked against the network for a
            clock offset (:func:`_idle_and_silent`).
    """
    interval = windows.interval_s
    distinguishing = signal in DISTINGUISHING_SIGNALS
    if not distinguishing:
        return DutySplit(
            signal, False, None, None, None, interval,
            f"{signal} counts NCCL kernels as busy, so it cannot tell compute from "
            "communication; D is the network on-fraction",
        )  # fmt: skip
    if shortest_phase_s is not None and interval > 0.5 * shortest_phase_s:
        return DutySplit(
            signal, True, None, None, None, interval,
            f"GPU samples every {interval:.3g} s cannot resolve phases of "
            f"{shortest_phase_s:.3g} s; D is the network on-fraction",
        )  # fmt: skip
    if windows.value.size == 0 and windows.stacked:
        return DutySplit(
            signal, True, None, None, None, interval,
            "the GPU samples share their time stamps (whole seconds at a faster rate?), so "
            "they cannot be placed against the network's; D is the network on-fraction",
        )  # fmt: skip
    if on_level <= off_level or windows.value.size == 0:
        return DutySplit(signal, True, None, None, None, interval, "no GPU samples")
    # Unclipped per slot and clipped per window: clipping noisy background samples at 0 one
    # by one would turn zero-mean noise into a positive on-fraction.
    u = (rate - off_level) / (on_level - off_level)
    known = np.isfinite(u)
    csum_u = np.concatenate(([0.0], np.cumsum(np.where(known, u, 0.0))))
    csum_k = np.concatenate(([0], np.cumsum(known)))
    lo = np.clip(np.round((windows.start - t0) / dt).astype(np.int64), 0, rate.size)
    hi = np.clip(np.round((windows.end - t0) / dt).astype(np.int64), 0, rate.size)
    count = csum_k[hi] - csum_k[lo]
    inside = count >= 1
    if int(inside.sum()) < 8:
        return DutySplit(signal, True, None, None, None, interval, _apart(windows, t0, dt, rate))
    n = (csum_u[hi] - csum_u[lo])[inside] / count[inside]
    g = windows.value[inside]
    weight = count[inside].astype(np.float64)
    lo, hi = lo[inside], hi[inside]
    low, busy = two_means(g)
    idle = _idle_gpus(g, windows.gpu[inside], low, busy)
    notes: list[str] = []
    if idle:
        keep = ~np.isin(windows.gpu[inside], idle)
        n, g, weight, lo, hi = n[keep], g[keep], weight[keep], lo[keep], hi[keep]
        low, busy = two_means(g)
        listed = ", ".join(map(str, idle[:8])) + (", ..." if len(idle) > 8 else "")
        notes.append(
            f"GPU {listed} never computed in the window (idle, or another job's): left out "
            "of the exposed/overlapped split"
        )
    if busy < NO_COMPUTE:
        c = np.zeros_like(g)  # the GPU does not compute at all
    elif busy - low < PLATEAU_SPREAD * busy:
        c = np.ones_like(g)  # the GPU never leaves its compute plateau
    else:
        c = np.clip((g - low) / (busy - low), 0.0, 1.0)
    # Plateau windows are taken linearly (GPU idle: all traffic is exposed; GPU computing the
    # whole window: none is), so their noise averages out instead of being clipped; only
    # windows that straddle a transition go through min(n, 1 - c).
    c = np.where(c >= 0.9, 1.0, np.where(c <= 0.1, 0.0, c))
    if period_s is not None:
        apart = _idle_and_silent((csum_u, csum_k), lo, hi, c == 0.0, weight, dt, interval, period_s)
        if apart:
            notes.append(apart)
    exposed = np.where(
        c == 0.0, n, np.where(c == 1.0, 0.0, np.minimum(np.clip(n, 0.0, 1.0), 1.0 - c))
    )
    n = np.clip(n, 0.0, None)
    total = float(weight.sum())
    return DutySplit(
        signal=signal,
        distinguishing=True,
        # The windows' noise averages out, but its mean may land a hair under 0 (-5e-8 on a
        # real run, exported as a negative ratio): clipped once, here.
        exposed=max(0.0, float(np.einsum("i,i->", exposed, weight) / total)),
        overlapped=float(np.einsum("i,i->", np.clip(n - exposed, 0.0, None), weight) / total),
        compute_fraction=float(np.einsum("i,i->", c, weight) / total),
        gpu_interval_s=interval,
        reason="; ".join(notes) or None,
    )


#: GPU-idle samples with the network silent, as a share of all GPU-idle ones, from which the
#: two are judged out of step.
_SILENT_IDLE = 0.3
#: ... and at most this share of them left silent when shifted: an offset of the clocks.
_SHIFTED_FIT = 0.05


def _idle_and_silent(
    csums: tuple[FloatArray, npt.NDArray[np.int64]],
    lo: npt.NDArray[np.int64],
    hi: npt.NDArray[np.int64],
    idle: npt.NDArray[np.bool_],
    weight: FloatArray,
    dt: float,
    interval: float,
    period_s: float,
) -> str | None:
    """Why the GPUs idle while the network is silent, if they often do (None: they do not).

    A training step's GPU waits for exposed communication: its idle samples fall on bursts.
    Samples on two clocks (a GPU file in local time, a host clock off) put them elsewhere,
    and the split reads what it is given: a second's offset on 2 s steps made an exposed
    share of 0.30 read 0.00 ("all hidden"), with no word. The GPU samples are shifted against
    the network by up to half a period: if the idle ones then fall on bursts, the offset is
    named; if no shift does it, the step waits on something else (data loading, the CPU).
    """
    csum_u, csum_k = csums
    total = float(weight[idle].sum())
    if int(idle.sum()) < 8 or total < 0.1 * float(weight.sum()):
        return None
    size = csum_k.size - 1

    def silent_share(shift: int) -> float:
        a, b = np.clip(lo + shift, 0, size), np.clip(hi + shift, 0, size)
        known = csum_k[b] - csum_k[a]
        on = np.where(known > 0, (csum_u[b] - csum_u[a]) / np.maximum(known, 1), np.nan)
        seen = idle & np.isfinite(on)
        if float(weight[seen].sum()) < 0.5 * total:
            return math.nan
        return float(weight[seen & (on <= 0.1)].sum() / weight[seen].sum())

    here = silent_share(0)
    if not here >= _SILENT_IDLE:
        return None
    step = max(1, round(interval / dt))
    reach = int(0.5 * period_s / dt)
    shifts = [k for k in range(-reach, reach + 1, step) if k]
    shares = np.array([silent_share(k) for k in shifts])
    ok = np.isfinite(shares)
    text = f"the GPUs idle while the network is silent in {here:.0%} of their idle samples"
    # Shifted by the offset, the idle samples fit inside the bursts (none left silent). How
    # far is not said: they fit over a range of shifts, and whole steps more. A step that
    # idles longer than its bursts fits no shift (a live probe with 0.5 s of data wait beside
    # 0.3 s of exposed communication was asked about its clocks).
    if ok.any() and float(np.nanmin(shares)) <= _SHIFTED_FIT:
        return (
            f"{text}, and shifted by part of a step they would idle on its bursts: are the "
            "GPU and network samples on one clock (time zone, host clock)? The "
            "exposed/overlapped split takes them as given"
        )
    return f"{text}: the step waits on something besides communication (data loading, the CPU)"


#: A GPU whose busiest windows stay this far (a share of the way from the pooled low level to
#: the busy one) above the low level never computed.
_IDLE_GPU_SHARE = 0.25


def _idle_gpus(value: FloatArray, gpu: npt.NDArray[np.int64], low: float, busy: float) -> list[int]:
    """GPUs that never left the low level while the others computed (none if all did).

    Pooled with the job's GPUs, an idle one (a 4-GPU job on an 8-GPU node, a spare) counts
    every burst as exposed: a fully overlapped job read D 0.20 with four idle GPUs beside it.
    """
    if busy < NO_COMPUTE or busy - low < PLATEAU_SPREAD * busy:  # no idle level to compare
        return []
    ids = np.unique(gpu)
    bar = low + _IDLE_GPU_SHARE * (busy - low)
    idle = [int(k) for k in ids if float(np.percentile(value[gpu == k], 95)) < bar]
    return idle if len(idle) < ids.size else []
