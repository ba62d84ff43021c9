"""T from an NCCL log alone, on logs whose steps are regular: on pyramid levels too coarse
to resolve the step, its (harmonics') aliases were taken for an outer period (0.45 s steps at
1 % jitter read 3.18 s at confidence 0.92; small syncs each quarter step read 7 T at 1.0).
Steps with no jitter read a multiple: the calls are instants, and a step of a non-whole
number of bins peaks highest at its multiple nearest a whole number of bins (0.45 s read
1.8 s on the finest level while every coarser one read 0.45 s); the finest level's multiple
now yields to a coarser level's step when the peaks' mass is alike at every multiple. Some
zero-jitter shapes (long logs of 0.123 s steps, FSDP layers, pipeline stages) still do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.estimate import EstimateInputs, estimate
from tests.signals import allreduce_calls

START = datetime(2026, 3, 4, 9, 30, 0, tzinfo=UTC)


#: Two AllReduces 3 ms apart a step, as (fraction of the step, count).
PAIR = ((0.0, 25_000_000), (0.003, 25_000_000))
#: A small AllReduce after each of three micro-batches, then the gradients' six buckets.
MICRO = tuple((q / 4 - 0.02, 100_000) for q in (1, 2, 3)) + tuple(
    (0.95 + 0.04 * i / 6, 4_000_000) for i in range(6)
)


def _log(
    path: Path,
    period: float,
    steps: int,
    jitter: float,
    seed: int,
    calls: tuple[tuple[float, int], ...] = PAIR,
) -> Path:
    """Two ranks, ``calls`` a step (PAIR's offsets in seconds, else fractions of the step);
    each step's length jitters uniformly."""
    rng = np.random.default_rng(seed)
    lines, t, op = [], 0.0, 0
    for _ in range(steps):
        for at, count in calls:
            offset = at if calls is PAIR else at * period
            for r in range(2):
                stamp = (START + timedelta(seconds=t + offset + 2e-4 * r)).strftime(
                    "[%Y-%m-%d %H:%M:%S.%f] "
                )
                lines.append(
                    f"{stamp}node1:{1000 + r}:{1000 + r} [{r}] NCCL INFO AllReduce: opCount "
                    f"{op:x} sendbuff 0x7f1a2c000000 recvbuff 0x7f1a2c000000 count "
                    f"{count} datatype 9 op 0 root 0 comm 0x55d0c0a0b0c{r} [nranks=2] stream "
                    "0x5581e2a0c0d0"
                )
            op += 1
        t += period * (1.0 + jitter * rng.uniform(-1.0, 1.0))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("period", [0.061, 0.123, 0.45, 1.0, 2.7])
@pytest.mark.parametrize("steps", [30, 80, 400])
def test_regular_steps_read_their_own_period(tmp_path: Path, period: float, steps: int) -> None:
    wrong = []
    for seed, jitter in enumerate((0.01, 0.03)):
        est = analyze_files(nccl_logs=[_log(tmp_path / "j.log", period, steps, jitter, seed)])
        t = est.estimate.period_s
        if t is None or abs(t / period - 1.0) > 0.02:
            wrong.append((jitter, t, round(est.estimate.confidence, 2)))
    assert not wrong


@pytest.mark.parametrize("period", [1.0, 3.0])
@pytest.mark.parametrize("jitter", [0.0, 0.02])
def test_micro_batch_syncs_leave_no_outer_alias(
    tmp_path: Path, period: float, jitter: float
) -> None:
    """Small syncs at each quarter step: on the level where a step is 2.6 samples their fifth
    harmonic aliased to 7 T, and 7 T (on a whole lag of the finer levels, where narrow calls
    peak highest) was reported as the step at confidence 1.0, with T as its inner period."""
    est = analyze_files(nccl_logs=[_log(tmp_path / "m.log", period, 50, jitter, 7, MICRO)])
    assert est.estimate.period_s == pytest.approx(period, rel=0.01)


@pytest.mark.parametrize(
    ("period", "steps"), [(0.45, 30), (0.45, 80), (0.45, 400), (1.0, 80), (1.0, 400), (0.123, 30)]
)
def test_steps_without_jitter_read_the_step_not_a_lattice_multiple(
    tmp_path: Path, period: float, steps: int
) -> None:
    """Every one of these read a multiple (2.25, 1.8, 3.6, 4.0, 5.93, 0.615 s) at confidence
    0.5-1.0 before the finest level's multiple yielded to the coarser levels' step."""
    est = analyze_files(nccl_logs=[_log(tmp_path / "z.log", period, steps, 0.0, 0)])
    assert est.estimate.period_s == pytest.approx(period, rel=0.01)


#: Other steps' calls as (fraction of the step, count): a DDP backward's 8 buckets in its last
#: 30 %; FSDP's 24 layers gathered forward, then gathered and reduce-scattered backward.
SHAPES = {
    "ddp buckets": tuple((0.7 + 0.3 * i / 8, 3_000_000) for i in range(8)),
    "fsdp layers": tuple((0.4 * i / 24, 2_000_000) for i in range(24))
    + tuple((0.4 + 0.55 * i / 24, 2_000_000) for i in range(24))
    + tuple((0.42 + 0.55 * i / 24, 2_000_000) for i in range(24)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("period", [0.3, 1.0])
@pytest.mark.parametrize("jitter", [0.01, 0.02])
def test_bucketed_and_layered_steps_read_their_own_period(
    tmp_path: Path, shape: str, period: float, jitter: float
) -> None:
    """300 steps: DDP buckets read 2.1 and 6.95 s at confidence 0.9-0.94 (an alias of the step
    taken for an outer period) before aliases were checked by their peaks' mass."""
    log = _log(tmp_path / "s.log", period, 300, jitter, 3, SHAPES[shape])
    assert analyze_files(nccl_logs=[log]).estimate.period_s == pytest.approx(period, rel=0.02)


@pytest.mark.parametrize("period", [0.3, 1.0])
def test_ddp_buckets_without_jitter_read_the_step(tmp_path: Path, period: float) -> None:
    """300 steps of 8 buckets with no jitter read 2 T at confidence 0.99."""
    log = _log(tmp_path / "d.log", period, 300, 0.0, 3, SHAPES["ddp buckets"])
    assert analyze_files(nccl_logs=[log]).estimate.period_s == pytest.approx(period, rel=0.01)


#: A pipeline stage, as (fraction of the step, op, count): eight micro-batches' activations
#: sent and gradients received 10 ms later, then the stage's gradient all-reduce.
PIPELINE = (
    tuple((i / 10, "Send", 1_000_000) for i in range(8))
    + tuple((i / 10 + 0.01, "Recv", 1_000_000) for i in range(8))
    + ((0.9, "AllReduce", 5_000_000),)
)


def _pipeline_log(path: Path, period: float, steps: int, jitter: float, seed: int) -> Path:
    """Two ranks of an 8-rank communicator, 0.1 ms apart. A step's calls share one opCount,
    as a group's calls do in NCCL (here the all-reduce too: the period must not rest on it)."""
    rng = np.random.default_rng(seed)
    lines: list[tuple[float, str]] = []
    t = 0.0
    for step in range(steps):
        for at, name, count in PIPELINE:
            peer = 1 if name in ("Send", "Recv") else 0
            for r in range(2):
                when = t + at * period + 1e-4 * r
                stamp = (START + timedelta(seconds=when)).strftime("[%Y-%m-%d %H:%M:%S.%f] ")
                lines.append(
                    (
                        when,
                        f"{stamp}node1:{1000 + r}:{1000 + r} [{r}] NCCL INFO {name}: opCount "
                        f"{step * len(PIPELINE):x} sendbuff 0x7f1a2c000000 recvbuff "
                        f"0x7f1a2c000000 count {count} datatype 9 op 0 root {peer} comm "
                        f"0x55d0c0a0b0c{r} [nranks=8] stream 0x5581e2a0c0d0",
                    )
                )
        t += period * (1.0 + jitter * rng.uniform(-1.0, 1.0))
    lines.sort(key=lambda x: x[0])
    path.write_text("\n".join(line for _, line in lines) + "\n")
    return path


@pytest.mark.parametrize("seed", list(range(40)))
def test_pipeline_stage_reads_its_step_not_an_alias_of_it(tmp_path: Path, seed: int) -> None:
    """50 steps of 1 s with 2 % jitter: the coarsest level's alias of the step (7 s, comb
    0.91) passed for an outer period, because the step's own comb one level finer was 0.79,
    under the 0.8 at which aliases were judged; its bursts then repeated too irregularly and
    the log gave no T at all. Rhythms with a comb of 0.5 are judged now (a real FSDP job's
    layer gathers, 0.2-0.3, still are not)."""
    log = _pipeline_log(tmp_path / "p.log", 1.0, 50, 0.02, seed)
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("hours", [2.0, 12.0])
def test_a_log_of_many_hours_keeps_short_steps(hours: float) -> None:
    """0.3 s steps (two AllReduces each, 1 % jitter) over many hours: binned over the whole
    log, a bin was 41 ms (8 a step) at 12 h and T was lost without a word (25 h of them, in
    a real-format log, read no period). The newest 2.9 h are binned at 10 ms, and the note
    says so."""
    rng = np.random.default_rng(7)
    starts = np.cumsum(0.3 * (1.0 + 0.01 * rng.uniform(-1.0, 1.0, int(hours * 3600 / 0.3))))
    times = np.sort(np.concatenate((starts, starts + 0.02)))
    est = estimate(EstimateInputs(collectives=allreduce_calls(times, 5e7)))
    assert est.period_s == pytest.approx(float(np.diff(starts).mean()), rel=2e-3)
    cut = [w for w in est.warnings if "newest 2.9 h" in w]
    assert len(cut) == (1 if hours > 2.9 else 0)
