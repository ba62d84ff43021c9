"""The event list of a simulated job: network bursts, GPU compute phases, collective calls.

Ground truth is known by construction: every number in ``truth.json`` is computed from this
event list, never from the sampled files.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.simulator.nccl_writer import LoggedCall
from agent.simulator.params import JobParams, allreduce_wire_bytes, gather_wire_bytes

__all__ = ["Schedule", "build_schedule"]

FloatArray = npt.NDArray[np.float64]

#: NCCL datatype id of bfloat16 (2 bytes), what current training stacks communicate in.
BF16 = 9
BF16_BYTES = 2

#: Fraction of SMs an NCCL kernel keeps busy while the GPU does nothing else (NVIDIA/nccl#1463
#: measured ~15 % for a kernel running alone); what SM-activity reads during exposed comm.
SM_ACTIVE_COMM = 0.12
SM_ACTIVE_COMPUTE = 0.85


@dataclass(frozen=True)
class Schedule:
    """A job as events on ``[0, duration_s)`` (seconds from the job start).

    ``bursts`` rows are (start, end, rate) of collective traffic on each rank's link, per
    direction (ring collectives send and receive the same amount). ``compute`` rows are
    (start, end) of GPU compute phases. ``calls`` are the NCCL COLL lines, per local rank.
    """

    params: JobParams
    bursts: FloatArray
    compute: FloatArray
    calls: list[LoggedCall]
    iteration_starts: FloatArray
    truth: dict[str, Any] = field(default_factory=dict)


def _iteration_lengths(p: JobParams, rng: np.random.Generator, base: float) -> list[float]:
    """Iteration durations with i.i.d. jitter and a linear drift of the nominal period."""
    assert p.duration_s is not None
    out: list[float] = []
    t = 0.0
    while t < p.duration_s + base:
        nominal = base * (1.0 + p.drift * min(1.0, t / p.duration_s))
        length = nominal + p.jitter * base * float(rng.standard_normal())
        length = max(length, 0.2 * nominal)
        out.append(length)
        t += length
    return out


def _enqueue_calls(
    rng: np.random.Generator, p: JobParams, at: float, op: str, count: int, peer: int = 0
) -> list[LoggedCall]:
    """One COLL line per local rank, the host a little ahead of the GPU (enqueue time)."""
    ahead = float(rng.uniform(0.0005, 0.002))
    return [
        LoggedCall(
            time_s=p.start_time_s + max(0.0, at - ahead + 1e-5 * r),
            op=op,
            count=count,
            datatype=BF16,
            local_rank=r,
            peer=peer,
        )
        for r in range(p.local_ranks)
    ]


def _training(p: JobParams, rng: np.random.Generator) -> Schedule:
    assert p.period_s is not None
    assert p.duty is not None
    assert p.duration_s is not None
    comm = p.duty * p.period_s  # link busy per step
    exposed = (1.0 - p.overlap) * comm  # of which the GPUs wait for
    lengths = _iteration_lengths(p, rng, p.period_s)
    bursts, compute, calls, starts = [], [], [], []
    bucket_count = max(1, round(p.size_bytes / p.buckets / BF16_BYTES))
    t = -float(rng.uniform(0.0, p.period_s))  # the job was already running when we started
    link_free = -math.inf
    for length in lengths:
        compute_end = t + (length - exposed)
        drawn_start = compute_end - (comm - exposed)  # the overlapped buckets go first
        # A step drawn shorter than its collective: the collective waits for the previous one
        # (the GPUs idle meanwhile), and the step lasts that much longer. Overlapping bursts
        # summed their rates past the link's (twice it under 20 % jitter, D 0.65).
        burst_start = max(drawn_start, link_free)
        wait = burst_start - drawn_start
        link_free = burst_start + comm
        starts.append(burst_start)
        compute.append((t, compute_end))
        bursts.append((burst_start, burst_start + comm, p.bandwidth))
        for _ in range(p.buckets):
            calls.extend(_enqueue_calls(rng, p, burst_start, "AllReduce", bucket_count))
        t += length + wait
    sched = _clip(p, bursts, compute, calls, starts)
    size = bucket_count * BF16_BYTES * p.buckets
    sched.truth.update(
        regime="training",
        size_bytes=size,
        wire_bytes_per_iteration=allreduce_wire_bytes(size, p.nranks),
        nominal_period_s=p.period_s,
        inner_period_s=None,
        zero_stage="ddp_or_zero1",  # AllReduce only
        collectives_per_step=p.buckets,
    )
    return sched


def _finetune(p: JobParams, rng: np.random.Generator) -> Schedule:
    """ZeRO-3 without prefetch: a layer train of collectives, then the optimizer step.

    Per layer: AllGather then compute (forward); AllGather, compute, ReduceScatter (backward).
    """
    assert p.period_s is not None
    assert p.duration_s is not None
    layer_bytes = p.size_bytes / p.layers
    layer_comm = gather_wire_bytes(layer_bytes, p.nranks) / p.bandwidth
    per_rank_count = max(1, round(layer_bytes / p.nranks / BF16_BYTES))
    lengths = _iteration_lengths(p, rng, p.period_s)
    bursts, compute, calls, starts = [], [], [], []
    t = -float(rng.uniform(0.0, p.period_s))
    for length in lengths:
        scale = (length - p.optimizer_s) / (p.period_s - p.optimizer_s)
        fwd = p.layer_compute_s * scale
        bwd = 2.0 * p.layer_compute_s * scale
        starts.append(t)
        for _ in range(p.layers):
            bursts.append((t, t + layer_comm, p.bandwidth))
            calls.extend(_enqueue_calls(rng, p, t, "AllGather", per_rank_count))
            t += layer_comm
            compute.append((t, t + fwd))
            t += fwd
        for _ in range(p.layers):
            bursts.append((t, t + layer_comm, p.bandwidth))
            calls.extend(_enqueue_calls(rng, p, t, "AllGather", per_rank_count))
            t += layer_comm
            compute.append((t, t + bwd))
            t += bwd
            bursts.append((t, t + layer_comm, p.bandwidth))
            calls.extend(_enqueue_calls(rng, p, t, "ReduceScatter", per_rank_count))
            t += layer_comm
        compute.append((t, t + p.optimizer_s))
        t += p.optimizer_s
    sched = _clip(p, bursts, compute, calls, starts)
    size = per_rank_count * p.nranks * BF16_BYTES * p.layers
    sched.truth.update(
        regime="finetune",
        size_bytes=size,
        layers=p.layers,
        collectives_per_step=3 * p.layers,
        layer_spacing_forward_s=layer_comm + p.layer_compute_s,
        layer_spacing_backward_s=0.5 * (2 * layer_comm + 2 * p.layer_compute_s),
        nominal_period_s=p.period_s,
        inner_period_s=layer_comm + p.layer_compute_s,
        # Two AllGathers (forward, backward) per ReduceScatter, per layer.
        zero_stage="zero3_or_fsdp_full_shard",
        allgather_per_step=2 * p.layers,
        reduce_scatter_per_step=p.layers,
        # Median gap between consecutive calls of a process inside a step. The 3L - 1 gaps
        # are L - 1 of layer_comm (RS → next AG in backward), L of layer_comm + fwd (forward,
        # and forward → backward) and L of layer_comm + bwd (AG → RS in backward): the median
        # is in the middle group, layer_comm + fwd, at the nominal step length.
        layer_gap_s=layer_comm + p.layer_compute_s,
    )
    return sched


#: MMPP variant: mean requests per episode (the episode length is this over the episode rate).
EPISODE_REQUESTS = 8.0


def _mmpp_arrivals(p: JobParams) -> Iterator[float]:
    """Request times of an interrupted Poisson process with mean rate ``arrival_rate_hz``.

    Episodes (exponential, mean ``EPISODE_REQUESTS`` / λ_on) of Poisson arrivals at
    λ_on = burstiness · λ alternate with silences (exponential, mean (burstiness - 1) × the
    episode mean); the job starts in either state with its stationary probability. Its own
    random stream, so the Poisson default keeps its draws.
    """
    assert p.duration_s is not None
    rng = np.random.default_rng([p.seed, 3])
    rate_on = p.burstiness * p.arrival_rate_hz
    mean_on = EPISODE_REQUESTS / rate_on
    mean_off = (p.burstiness - 1.0) * mean_on
    on = bool(rng.random() < 1.0 / p.burstiness)
    t = 0.0
    while t < p.duration_s:
        if not on:
            t += float(rng.exponential(mean_off))
        else:
            end = t + float(rng.exponential(mean_on))
            t += float(rng.exponential(1.0 / rate_on))
            while t < end:
                yield t
                t += float(rng.exponential(1.0 / rate_on))
            t = end
        on = not on


def mmpp_inter_arrival_cv(p: JobParams) -> float:
    """Theoretical CV of an interrupted Poisson process's inter-arrival times.

    c² = 1 + 2 λ_on ω₁ / (ω₁ + ω₂)², with ω₁ = 1/mean episode, ω₂ = 1/mean silence
    (Fischer and Meier-Hellstern, "The MMPP cookbook", 1993, the IPP case).
    """
    rate_on = p.burstiness * p.arrival_rate_hz
    w1 = rate_on / EPISODE_REQUESTS
    w2 = w1 / (p.burstiness - 1.0)
    return math.sqrt(1.0 + 2.0 * rate_on * w1 / (w1 + w2) ** 2)


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    p50, p90, p99 = (float(v) for v in np.percentile(values, [50.0, 90.0, 99.0]))
    return {"p50": p50, "p90": p90, "p99": p99}


def _cv(values: FloatArray) -> float | None:
    if values.size < 2 or float(values.mean()) <= 0:
        return None
    return float(values.std(ddof=1) / values.mean())


def _arrivals_truth(
    p: JobParams,
    busy: list[tuple[float, float, int]],
    requests: int,
    per_request: float,
    request_s: float,
) -> dict[str, Any]:
    """Ground truth of the busy periods (what a counter sees as bursts), by construction.

    A busy period runs from the first AlltoAll of a request that found the replica idle to the
    last AlltoAll of the last request queued behind it. Bytes are per direction, summed over
    the host's ranks (the counters' view), above the background. Only periods that start and
    end inside the run give sizes and durations. A busy period of k requests moves k ×
    ``request_bytes`` and lasts k × ``request_duration_s``; ``requests_per_burst`` is the
    histogram of k, the exact size and duration distribution.
    """
    assert p.duration_s is not None
    end = p.duration_s
    periods = np.asarray(busy, dtype=np.float64).reshape(-1, 3)
    inside = periods[(periods[:, 0] >= 0) & (periods[:, 0] < end)]
    complete = inside[inside[:, 1] <= end]
    starts = inside[:, 0]
    gaps = starts[1:] - inside[:-1, 1] if inside.shape[0] >= 2 else np.empty(0)
    inter = np.diff(starts)
    covered = float(np.sum(np.clip(periods[:, 1], 0, end) - np.clip(periods[:, 0], 0, end)))
    return {
        "process": p.arrival_process,
        "request_rate_hz": p.arrival_rate_hz,
        "request_inter_arrival_cv": (
            1.0 if p.arrival_process == "poisson" else mmpp_inter_arrival_cv(p)
        ),
        "requests": requests,
        "request_bytes": per_request * p.local_ranks,
        "request_duration_s": request_s,
        "requests_per_burst": {
            str(int(k)): int(v)
            for k, v in zip(*np.unique(complete[:, 2], return_counts=True), strict=True)
        },
        "bursts": int(inside.shape[0]),
        "burst_rate_hz": float(inside.shape[0] / end),
        "burst_bytes": _percentiles([r * per_request * p.local_ranks for r in complete[:, 2]]),
        "burst_duration_s": _percentiles((complete[:, 1] - complete[:, 0]).tolist()),
        "inter_arrival_mean_s": float(inter.mean()) if inter.size else None,
        "inter_arrival_cv": _cv(inter),
        "gap_mean_s": float(gaps.mean()) if gaps.size else None,
        "gap_cv": _cv(gaps),
        "verdict": "poisson" if p.arrival_process == "poisson" else "bursty",
        "busy_ratio": covered / end,
    }


def _inference(p: JobParams, rng: np.random.Generator) -> Schedule:
    """MoE expert parallelism: requests at random times, so no period by construction.

    Requests arrive as a Poisson process (default) or an MMPP (``arrival_process="mmpp"``).
    Each request runs an AlltoAll dispatch and combine per MoE layer around the expert compute;
    one request at a time per replica, so a request that arrives while another is served waits
    and extends the busy period.
    """
    assert p.duration_s is not None
    size = p.tokens * p.hidden * BF16_BYTES  # bytes per AlltoAll, all peers together
    comm = gather_wire_bytes(size, p.nranks) / p.bandwidth
    per_peer = max(1, round(size / p.nranks / BF16_BYTES))
    bursts, compute, calls, starts = [], [], [], []
    busy: list[tuple[float, float, int]] = []  # (start, end, requests) of each busy period
    mmpp = _mmpp_arrivals(p) if p.arrival_process == "mmpp" else None

    def next_arrival(after: float) -> float:
        if mmpp is None:
            return after + float(rng.exponential(1.0 / p.arrival_rate_hz))
        return next(mmpp, math.inf)

    t = next_arrival(0.0)
    busy_until = 0.0
    requests = 0
    while t < p.duration_s:
        s = max(t, busy_until)  # one request at a time on this replica
        if t >= busy_until:
            busy.append((s, s, 0))
        starts.append(s)
        requests += 1
        for _ in range(p.moe_layers):
            for op_at in (s, s + comm + p.expert_compute_s):
                bursts.append((op_at, op_at + comm, p.bandwidth))
                calls.extend(_enqueue_calls(rng, p, op_at, "AlltoAll", per_peer))
            compute.append((s + comm, s + comm + p.expert_compute_s))
            s += 2 * comm + p.expert_compute_s
        busy_until = s
        first, _, served = busy[-1]
        busy[-1] = (first, s, served + 1)  # the last combine ends where the next layer would start
        t = next_arrival(t)
    sched = _clip(p, bursts, compute, calls, starts)
    per_request = 2 * p.moe_layers * comm * p.bandwidth
    kept = [c for c in sched.calls if c.op == "AlltoAll"]
    sched.truth.update(
        regime="inference",
        size_bytes=size,
        arrival_rate_hz=p.arrival_rate_hz,
        alltoall_bytes=size,
        nominal_period_s=None,
        inner_period_s=None,
        arrivals=_arrivals_truth(
            p, busy, requests, per_request, p.moe_layers * (2 * comm + p.expert_compute_s)
        ),
        alltoall={
            "message_bytes": per_peer * BF16_BYTES * p.nranks,
            "calls": len(kept),
            "calls_per_request": 2 * p.moe_layers,
            "call_rate_per_rank_hz": len(kept) / p.local_ranks / p.duration_s,
        },
    )
    return sched


def _idle(p: JobParams) -> Schedule:
    sched = _clip(p, [], [], [], [])
    sched.truth.update(regime="idle", size_bytes=None, nominal_period_s=None)
    return sched


def _clip(
    p: JobParams,
    bursts: list[tuple[float, float, float]],
    compute: list[tuple[float, float]],
    calls: list[LoggedCall],
    starts: list[float],
) -> Schedule:
    """Keep what falls inside the run and compute the window's ground truth."""
    assert p.duration_s is not None
    end = p.duration_s
    b = np.asarray(bursts, dtype=np.float64).reshape(-1, 3)
    b = b[(b[:, 1] > 0) & (b[:, 0] < end)]
    b[:, 0] = np.clip(b[:, 0], 0, end)
    b[:, 1] = np.clip(b[:, 1], 0, end)
    c = np.asarray(compute, dtype=np.float64).reshape(-1, 2)
    c = c[(c[:, 1] > 0) & (c[:, 0] < end)]
    c = np.clip(c, 0, end)
    kept_calls = [call for call in calls if p.start_time_s <= call.time_s < p.start_time_s + end]
    s = np.asarray(starts, dtype=np.float64)
    s = s[(s >= 0) & (s < end)]
    truth: dict[str, Any] = {}
    background = p.background_fraction * p.bandwidth
    busy = _union_length(b[:, :2]) if b.size else 0.0
    if p.period_s is not None and s.size >= 2:
        # Realised truth: over the complete iterations inside the run.
        first, last = float(s[0]), float(s[-1])
        inside = b[(b[:, 0] >= first) & (b[:, 0] < last)]
        comm_time = _union_length(inside[:, :2]) if inside.size else 0.0
        hidden = _intersection_length(inside[:, :2], c) if inside.size else 0.0
        period = (last - first) / (s.size - 1)
        truth.update(
            period_s=period,
            # D: communication the GPUs wait for (what a GPU signal lets commpulse measure);
            # without overlap it is the network on-fraction.
            duty_cycle=(comm_time - hidden) / (last - first),
            network_on_ratio=comm_time / (last - first),
            overlapped_ratio=hidden / (last - first),
            bytes_per_iteration=p.bandwidth * comm_time / (s.size - 1) * p.local_ranks,
            iterations=int(s.size - 1),
        )
    else:
        truth.update(period_s=None, duty_cycle=None, network_on_ratio=busy / end)
    truth.update(
        burst_bandwidth_bytes_per_s=(
            (p.bandwidth + background) * p.local_ranks if b.size else None
        ),
        collective_bandwidth_bytes_per_s=p.bandwidth * p.local_ranks if b.size else None,
        background_bytes_per_s=background * p.local_ranks,
        noise_bytes_per_s=p.noise_fraction * p.bandwidth * math.sqrt(p.local_ranks),
        nranks=p.nranks,
        local_ranks=p.local_ranks,
        duration_s=end,
        sample_rate_hz=p.sample_rate_hz,
        gpu_interval_s=p.gpu_interval_s,
        seed=p.seed,
        scenario=p.scenario,
        start_time_s=p.start_time_s,
        timezone="UTC",
    )
    return Schedule(
        params=p,
        bursts=b,
        compute=c,
        calls=kept_calls,
        iteration_starts=s,
        truth=truth,
    )


def _intersection_length(a: FloatArray, b: FloatArray) -> float:
    """Total overlap of two sets of intervals, each made of disjoint intervals."""
    if a.size == 0 or b.size == 0:
        return 0.0
    a = a[np.argsort(a[:, 0])]
    b = b[np.argsort(b[:, 0])]
    total, i, j = 0.0, 0, 0
    while i < a.shape[0] and j < b.shape[0]:  # merge the two sorted lists
        lo = max(float(a[i, 0]), float(b[j, 0]))
        hi = min(float(a[i, 1]), float(b[j, 1]))
        total += max(0.0, hi - lo)
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return total


def _union_length(intervals: FloatArray) -> float:
    """Total length covered by possibly overlapping intervals."""
    if intervals.size == 0:
        return 0.0
    order = np.argsort(intervals[:, 0])
    total, cur_s, cur_e = 0.0, float(intervals[order[0], 0]), float(intervals[order[0], 1])
    for i in order[1:]:
        s, e = float(intervals[i, 0]), float(intervals[i, 1])
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s


def build_schedule(p: JobParams) -> Schedule:
    """The event list of a resolved job (see :func:`agent.simulator.params.resolve`)."""
    rng = np.random.default_rng(p.seed)
    if p.scenario == "training":
        return _training(p, rng)
    if p.scenario == "finetune":
        return _finetune(p, rng)
    if p.scenario == "inference":
        return _inference(p, rng)
    return _idle(p)
