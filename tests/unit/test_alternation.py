"""A rhythm near two polls: the rate swings poll to poll, and its beat is no step.

Steps of 19.5 ms read every 10 ms put about half a step in each poll; the swing's size drifts
through a 0.39 s beat, which read as T at confidence 0.9 with D 1.0 (a false bottleneck alert
on a job of D 0.4). Resolvable traffic, real or simulated, is left as it was.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.alternation import alternates, seen_over_pairs
from agent.analyze import analyze_files
from agent.estimate import EstimateInputs, estimate
from agent.rates import GridSeries
from tests.signals import Cumulative, periodic_bursts, sample_bursts

FS = 100.0
SECONDS = 120.0
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "counters"


def _grid(rate: np.ndarray) -> GridSeries:
    return GridSeries(t0=0.0, dt=1.0 / FS, rate=rate, valid=np.ones(rate.size, dtype=bool))


def _rate(period: float, duty: float, seed: int = 1, jitter: float = 0.0) -> np.ndarray:
    bursts, _ = periodic_bursts(period, duty, SECONDS, rate=12.5e9, jitter=jitter, seed=seed)
    return sample_bursts(bursts, FS, SECONDS)


@pytest.mark.parametrize(("duty", "seed"), [(0.35, 1), (0.4, 2), (0.45, 3)])
def test_a_step_near_two_polls_gives_neither_its_beat_nor_a_duty_cycle(
    duty: float, seed: int
) -> None:
    """Exact polls keep a trace of the beat over pairs of polls too: then it is shown only
    below the alerts' confidence (with the poll jitter of a real sampler it is gone)."""
    est = estimate(EstimateInputs(network={"tx": _grid(_rate(0.0195, duty, seed))}))
    assert est.period_s is None or est.confidence < 0.5
    assert est.duty_cycle is None
    assert est.burst_bandwidth is None
    assert any("swings from one poll to the next" in w for w in est.warnings)


def test_a_pattern_that_repeats_over_pairs_of_polls_stays_under_the_alerts() -> None:
    """21 ms steps at 100 Hz repeat exactly every 21 polls: kept as a period only below the
    alerts' confidence, and without B or D."""
    est = estimate(EstimateInputs(network={"tx": _grid(_rate(0.021, 0.7, 2))}))
    assert est.duty_cycle is None
    assert est.period_s is None or est.confidence < 0.5


def test_resolvable_traffic_does_not_swing() -> None:
    rate = _rate(0.5, 0.3, jitter=0.02)
    assert not alternates(rate)
    assert seen_over_pairs(rate, 1.0 / FS, 0.5)
    est = estimate(EstimateInputs(network={"tx": _grid(rate)}))
    assert est.period_s == pytest.approx(0.5, rel=0.01)
    assert est.duty_cycle == pytest.approx(0.3, abs=0.01)


@pytest.mark.parametrize("name", ["tp-gloo-layers", "pp-gloo-1f1b", "fsdp-gloo-shard-grad-op"])
def test_real_jobs_with_fast_inner_rhythms_do_not_swing(name: str) -> None:
    """Recorded jobs at 100 Hz whose layers or micro-batches are a few polls apart."""
    result = analyze_files(counters=[FIXTURES / f"{name}.csv.gz"])
    grid = result.inputs.network[result.estimate.direction or "tx"]
    assert not alternates(grid.rate)
    assert not any("swings from one poll" in w for w in result.estimate.warnings)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_with_a_real_samplers_poll_jitter_the_beat_is_no_period(seed: int, tmp_path: Path) -> None:
    """Polls 0.3 ms off their deadlines (1 % of them 2-6 ms late), counters written as read:
    the beat does not survive averaging over pairs of polls, so no T at all."""
    rng = np.random.default_rng(seed)
    bursts, _ = periodic_bursts(0.0195, 0.4, SECONDS, rate=12.5e9, seed=seed)
    n = int(SECONDS * FS)
    times = np.arange(n) / FS + rng.normal(0.0, 3e-4, n)
    late = rng.random(n) < 0.01
    times[late] += rng.uniform(0.002, 0.006, int(late.sum()))
    times = np.sort(times) - times.min()
    counts = np.floor(Cumulative(bursts[:, :2], bursts[:, 2]).at(times)).astype(np.int64)
    path = tmp_path / "alias.csv"
    rows = [f"{t:.6f},{c}" for t, c in zip(times, counts, strict=True)]
    path.write_text("time,eth0_tx_bytes\n" + "\n".join(rows) + "\n")
    est = analyze_files(counters=[path]).estimate
    assert est.period_s is None
    assert est.duty_cycle is None
    assert any("its beat against the polls" in w for w in est.warnings)
