"""Parameters of a simulated job and the DOMAIN.md formulas that derive T and D from them."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from agent.errors import ConfigError

__all__ = ["ARRIVAL_PROCESSES", "SCENARIOS", "JobParams", "allreduce_wire_bytes", "resolve"]

SCENARIOS = ("training", "finetune", "inference", "idle")

#: How inference requests arrive: ``poisson`` (memoryless, the default) or ``mmpp`` (an
#: interrupted Poisson process: episodes of ``burstiness`` × the mean rate, silence between).
ARRIVAL_PROCESSES = ("poisson", "mmpp")

#: 2026-01-01T00:00:00Z: a fixed origin so that a seed gives byte-identical files.
DEFAULT_START_S = 1767225600.0


def allreduce_wire_bytes(size_bytes: float, nranks: int) -> float:
    """Bytes each rank sends (and receives) in a ring AllReduce of S bytes: 2S(N-1)/N."""
    return 2.0 * size_bytes * (nranks - 1) / nranks


def gather_wire_bytes(size_bytes: float, nranks: int) -> float:
    """Bytes each rank moves per direction in a ring AllGather/ReduceScatter: S(N-1)/N."""
    return size_bytes * (nranks - 1) / nranks


@dataclass(frozen=True)
class JobParams:
    """Everything that defines a simulated job. Rates in bytes/s, times in seconds.

    ``noise`` and ``background`` are fractions of ``bandwidth``; ``jitter`` is the standard
    deviation of one iteration's duration as a fraction of T.
    """

    scenario: str = "training"
    nranks: int = 32
    size_bytes: float = 20e9
    bandwidth: float = 25e9
    compute_s: float = 3.0
    period_s: float | None = None
    duty: float | None = None
    #: Training: share of the link-busy time hidden behind the backward pass (DDP's bucketed
    #: AllReduce); exposed communication is (1 - overlap) of it.
    overlap: float = 0.0
    jitter: float = 0.01
    drift: float = 0.0
    noise: float | None = None
    background: float | None = None
    sample_rate_hz: float = 100.0
    poll_jitter: float = 0.0
    missing: float = 0.0
    gpu_interval_s: float = 0.1
    duration_s: float | None = None
    seed: int = 0
    local_ranks: int = 1
    buckets: int = 16
    layers: int = 32
    layer_compute_s: float = 0.010
    optimizer_s: float = 0.3
    arrival_rate_hz: float = 2.0
    arrival_process: str = "poisson"
    #: MMPP only: the request rate inside an episode over the mean rate (the episodes fill
    #: 1/burstiness of the time).
    burstiness: float = 5.0
    tokens: int = 2048
    hidden: int = 4096
    moe_layers: int = 16
    expert_compute_s: float = 0.002
    counter_bits: int = 64
    start_time_s: float = DEFAULT_START_S
    hostname: str = "gpu-node-01"

    @property
    def noise_fraction(self) -> float:
        """σ of the background per sample, as a fraction of B (scenario default if unset)."""
        if self.noise is not None:
            return self.noise
        return 1e-4 if self.scenario == "idle" else 0.02

    @property
    def background_fraction(self) -> float:
        """Mean background traffic as a fraction of B (scenario default if unset).

        Never below the noise σ: the noise is the fluctuation of real, non-negative traffic,
        and non-negative traffic with σ above its mean is a train of rare huge spikes, not noise.
        """
        if self.background is not None:
            base = self.background
        else:
            base = 1e-4 if self.scenario == "idle" else 0.01
        return max(base, self.noise_fraction)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def resolve(p: JobParams) -> JobParams:
    """Validate parameters and fill the derived ones (duration; S from T and D, or the reverse).

    Training is given either by model size and compute time (the DOMAIN.md worked example:
    N=32, S=20 GB, 25 GB/s, 3 s compute → T ≈ 4.55 s, D ≈ 0.34) or directly by ``period_s``
    and ``duty``, in which case S follows from the AllReduce formula.
    """
    _check(p.scenario in SCENARIOS, f"unknown scenario {p.scenario!r}; pick one of {SCENARIOS}")
    _check(p.nranks >= 2, "--nranks must be at least 2")
    _check(p.bandwidth > 0, "--bandwidth must be positive")
    _check(p.size_bytes > 0, "--size must be positive")
    _check(p.compute_s >= 0, "--compute must not be negative")
    _check(p.sample_rate_hz > 0, "--sample-rate must be positive")
    _check(0 <= p.jitter < 0.5, "--jitter must be in [0, 0.5)")
    _check(-0.5 < p.drift < 1.0, "--drift must be in (-0.5, 1)")
    _check(p.noise_fraction >= 0, "--noise must not be negative")
    _check(p.background_fraction >= 0, "--background must not be negative")
    _check(0 <= p.poll_jitter < 1, "--poll-jitter must be in [0, 1)")
    _check(0 <= p.missing < 0.9, "--missing must be in [0, 0.9)")
    _check(p.gpu_interval_s > 0, "--gpu-interval must be positive")
    _check(p.local_ranks >= 1, "--local-ranks must be at least 1")
    _check(p.local_ranks <= p.nranks, "--local-ranks cannot exceed --nranks")
    _check(p.buckets >= 1, "--buckets must be at least 1")
    _check(p.layers >= 1, "--layers must be at least 1")
    _check(p.arrival_rate_hz > 0, "--arrival-rate must be positive")
    _check(
        p.arrival_process in ARRIVAL_PROCESSES,
        f"unknown arrival process {p.arrival_process!r}; pick one of {ARRIVAL_PROCESSES}",
    )
    _check(p.burstiness > 1, "burstiness must be above 1")
    _check(p.counter_bits in (32, 64), "--counter-bits must be 32 or 64")
    if p.duty is not None:
        _check(0 < p.duty < 1, "--duty must be in (0, 1)")
    _check(0 <= p.overlap < 1, "--overlap must be in [0, 1)")
    _check(p.overlap == 0 or p.scenario == "training", "--overlap is for the training scenario")
    if p.period_s is not None:
        _check(p.period_s > 0, "--period must be positive")

    out = p
    if p.scenario == "training" and (p.period_s is not None or p.duty is not None):
        base_comm = allreduce_wire_bytes(p.size_bytes, p.nranks) / p.bandwidth
        t = p.period_s if p.period_s is not None else p.compute_s + base_comm
        d = p.duty if p.duty is not None else base_comm / (p.compute_s + base_comm)
        comm = d * t
        size = comm * p.bandwidth * p.nranks / (2.0 * (p.nranks - 1))
        compute = t - (1.0 - p.overlap) * comm
        _check(compute >= p.overlap * comm, "--overlap hides more than the compute phase")
        out = replace(p, period_s=t, duty=d, compute_s=compute, size_bytes=size)
    elif p.scenario == "training":
        comm = allreduce_wire_bytes(p.size_bytes, p.nranks) / p.bandwidth
        t = p.compute_s + (1.0 - p.overlap) * comm
        _check(t > 0, "the step has zero length: give --compute or --size")
        _check(p.compute_s >= p.overlap * comm, "--overlap hides more than the compute phase")
        out = replace(p, period_s=t, duty=comm / t)
    elif p.scenario == "finetune" and (p.period_s is not None or p.duty is not None):
        t = p.period_s if p.period_s is not None else 2.0
        d = p.duty if p.duty is not None else 0.4
        layer_comm = d * t / (3 * p.layers)
        size = layer_comm * p.bandwidth * p.layers * p.nranks / (p.nranks - 1)
        optimizer = min(p.optimizer_s, 0.1 * t)
        layer_compute = ((1 - d) * t - optimizer) / (3 * p.layers)
        _check(layer_compute > 0, "--duty too high for the optimizer gap: lower --duty")
        out = replace(
            p,
            period_s=t,
            duty=d,
            size_bytes=size,
            optimizer_s=optimizer,
            layer_compute_s=layer_compute,
        )
    elif p.scenario == "finetune":
        layer_comm = gather_wire_bytes(p.size_bytes / p.layers, p.nranks) / p.bandwidth
        t = p.layers * (3 * layer_comm + 3 * p.layer_compute_s) + p.optimizer_s
        out = replace(p, period_s=t, duty=3 * p.layers * layer_comm / t)
    else:
        out = replace(p, period_s=None, duty=None)

    if out.duration_s is None:
        duration = min(3600.0, max(60.0, 20.0 * out.period_s)) if out.period_s is not None else 60.0
        out = replace(out, duration_s=duration)
    assert out.duration_s is not None
    _check(out.duration_s > 0, "--duration must be positive")
    samples = out.duration_s * out.sample_rate_hz
    _check(samples >= 64, "the run is shorter than 64 polls: raise --duration or --sample-rate")
    _check(
        samples <= 20_000_000,
        f"{samples:.0f} polls is more than this simulator writes (20 M): lower --duration or "
        "--sample-rate",
    )
    if out.period_s is not None:
        _check(
            math.isfinite(out.period_s) and out.period_s > 0,
            "derived period is not positive",
        )
    return out
