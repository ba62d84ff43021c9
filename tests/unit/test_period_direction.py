"""Which direction T comes from: the busier one, unless the other shows the job more clearly.

Traffic that is not the job's (a data loader's reads, a checkpoint's writes) often flows one
way, while a job's collectives move as much each way. B, D and V stay the busier direction's
(the contract's), timed by that T, unless the busier one carries more bytes than a job's
collectives explain: then they come from the other direction too.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.estimate import EstimateInputs, estimate
from agent.rates import GridSeries
from tests.signals import periodic_bursts, poisson_bursts, sample_bursts

FS = 100.0
SECONDS = 40.0
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "counters"


def _grid(rate: np.ndarray) -> GridSeries:
    return GridSeries(t0=0.0, dt=1.0 / FS, rate=rate, valid=np.ones(rate.size, dtype=bool))


def _job(seed: int, jitter: float = 0.03) -> tuple[np.ndarray, float]:
    """A job's 0.5 s steps, bursts of 0.2 s at 40 MB/s, the same each way."""
    bursts, realised = periodic_bursts(0.5, 0.4, SECONDS, rate=40e6, jitter=jitter, seed=seed)
    return sample_bursts(bursts, FS, SECONDS), realised


def _chunks(seed: int, per_s: float, rate: float, mean_s: float) -> np.ndarray:
    """Another flow: bursts at Poisson times, of 0.5-1 times ``rate``."""
    return rate * poisson_bursts(per_s, mean_s, FS, SECONDS, noise=0.0, seed=seed)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_t_comes_from_the_direction_without_the_other_flow(seed: int) -> None:
    """rx carries the job and 2 chunks a second of another flow (sharing the link's 40 MB/s),
    tx the job alone: T, B and D are the job's, from tx (rx's D counted the other flow's
    bursts: above 0.4), and a warning says where they came from and why."""
    job, realised = _job(seed)
    rx = np.minimum(job + _chunks(seed + 100, 2.0, 40e6, 0.08), 40e6)
    est = estimate(EstimateInputs(network={"tx": _grid(job), "rx": _grid(rx)}))
    assert est.direction == "tx"
    assert est.period_direction == "tx"
    assert est.period_s == pytest.approx(realised, rel=0.01)
    assert est.duty_cycle == pytest.approx(0.4, abs=0.01)
    assert est.burst_bandwidth == pytest.approx(40e6, rel=0.01)
    note = next(w for w in est.warnings if "shows the period more clearly" in w)
    assert "T, B and D come from tx" in note
    assert "% more bytes than tx" in note  # the other flow's excess, which the note blames


def test_a_clear_busier_direction_is_used_alone() -> None:
    """Both directions clear: the busier one's T, no second look, no warning."""
    job, realised = _job(5, jitter=0.0)
    est = estimate(EstimateInputs(network={"tx": _grid(job), "rx": _grid(1.01 * job)}))
    assert est.direction == "rx"
    assert est.period_direction is None
    assert est.period_s == pytest.approx(realised, rel=0.005)
    assert not any("more clearly" in w for w in est.warnings)


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_small_periodic_requests_beside_random_replies_give_no_period(seed: int) -> None:
    """rx: replies at random times; tx: a small request every 0.5 s (under 30 % of rx's
    bytes). The requests repeat, but they are not what the host moves: no T."""
    replies = _chunks(seed, 2.0, 40e6, 0.1)
    requests, _ = _job(seed, jitter=0.0)
    est = estimate(EstimateInputs(network={"tx": _grid(0.02 * requests), "rx": _grid(replies)}))
    assert est.period_s is None
    assert est.period_direction is None


@pytest.mark.parametrize("seed", [9, 10, 11, 12])
def test_random_traffic_each_way_gets_no_period_from_either(seed: int) -> None:
    """Aperiodic both ways: no second chance at a chance period."""
    tx = _chunks(seed, 2.0, 40e6, 0.1)
    rx = _chunks(seed + 50, 2.0, 40e6, 0.1)
    est = estimate(EstimateInputs(network={"tx": _grid(tx), "rx": _grid(rx)}))
    assert est.period_s is None


def test_a_real_job_beside_a_data_flow_reads_its_step() -> None:
    """Real DDP (0.44 s steps) with 0.5-4 MB chunks of another TCP flow into the host: from
    rx alone T was 6.5 % short, the chunks counted as steps; from tx it is within 1.5 %, and
    B is the shaped link's rate (rx's rides on the other flow)."""
    truth = json.loads((FIXTURES / "ddp-gloo-background.truth.json").read_text())
    ends = np.asarray(truth["step_end_s"])
    step = float(np.diff(ends[truth["warmup_steps"] - 1 :]).mean())
    est = analyze_files(counters=[FIXTURES / "ddp-gloo-background.csv.gz"]).estimate
    assert est.direction == "tx"
    assert est.period_direction == "tx"
    assert est.period_s == pytest.approx(step, rel=0.015)
    assert est.burst_bandwidth == pytest.approx(truth["shaped_rate_bytes_per_s"], rel=0.05)
    assert est.regime == "training"


def test_directions_with_their_own_rhythms_are_said(tmp_path: Path) -> None:
    """tx every 1.0 s and rx every 1.5 s, both clear (real kernel traffic): T was rx's, the
    busier, and nothing said that tx repeats at another rhythm. A job's both directions at
    one step (or tx at a multiple of rx's) are no cause for the note."""
    fs, duration = 100, 60.0

    def cumulative(period: float, duty: float, seed: int) -> np.ndarray:
        bursts, _ = periodic_bursts(period, duty, duration, rate=1e9, jitter=0.01, seed=seed)
        return np.concatenate(([0.0], np.cumsum(sample_bursts(bursts, fs, duration) / fs)))

    def analyze(tx: np.ndarray, rx: np.ndarray) -> tuple[float | None, tuple[str, ...]]:
        path = tmp_path / "two.csv"
        rows = [
            f"{i / fs:.4f},{int(a)},{int(b)}" for i, (a, b) in enumerate(zip(tx, rx, strict=True))
        ]
        path.write_text("time,eth0_tx_bytes,eth0_rx_bytes\n" + "\n".join(rows) + "\n")
        est = analyze_files(counters=[path]).estimate
        return est.period_s, est.warnings

    t, warnings = analyze(cumulative(1.0, 0.33, 1), cumulative(1.5, 0.42, 2))
    assert t is not None
    note = next(w for w in warnings if "own rhythms" in w)
    assert "every 1.5 s" in note
    assert "every 0.99" in note or "every 1 s" in note or "every 1.00" in note
    t, warnings = analyze(cumulative(1.0, 0.3, 1), cumulative(1.0, 0.3, 1))
    assert t == pytest.approx(1.0, rel=0.01)
    assert not any("own rhythms" in w for w in warnings)


@pytest.mark.parametrize(("step_s", "seed"), [(45.0, 1), (45.0, 2), (50.0, 1)])
def test_a_window_of_a_few_long_steps_says_why_it_has_no_period(step_s: float, seed: int) -> None:
    """Three steps of 45-50 s (3 % jitter) in 120 s: no T, and before, nothing said why."""
    bursts, _ = periodic_bursts(step_s, 0.55, 120.0, rate=1e9, jitter=0.03, seed=seed)
    rate = sample_bursts(bursts, 10, 120.0)
    grid = GridSeries(t0=0.0, dt=0.1, rate=rate, valid=np.ones(rate.size, dtype=bool))
    est = estimate(EstimateInputs(network={"tx": grid}))
    assert est.period_s is None
    assert any("only 3 burst(s) in 120 s: too few to time a period" in w for w in est.warnings)


@pytest.mark.parametrize("seed", range(6))
def test_equally_clear_directions_keep_the_busier_ones_b(seed: int) -> None:
    """rx at 0.9 of tx in the same bursts, both periods at confidence 1.00: B and D came from
    rx, on a rounding difference of the confidences (9 GB/s for a job whose busier direction
    bursts at 10). The busier direction keeps them unless the other is clearly clearer."""
    bursts, realised = periodic_bursts(1.5, 0.3, 120.0, rate=10e9, jitter=0.01, seed=seed)
    wire = sample_bursts(bursts, FS, 120.0)
    rng = np.random.default_rng(seed)
    tx, rx = (k * wire + rng.normal(0.0, 1e8, wire.size) for k in (1.0, 0.9))
    est = estimate(EstimateInputs(network={"tx": _grid(tx), "rx": _grid(rx)}))
    assert est.direction == "tx"
    assert est.burst_bandwidth == pytest.approx(10e9, rel=0.01)
    assert est.period_s == pytest.approx(realised, rel=1e-3)
