"""Two periodic flows on one link are not one job's step (agent.rhythms).

Real kernel traffic (two TCP flows through tbf, 0.7 s and 1.93 s apart) read as a 7.70 s step
at confidence 0.97 with D 0.62 and fired the bottleneck alert.
"""

from __future__ import annotations

import numpy as np
import pytest

from agent.estimate import EstimateInputs, estimate
from agent.rates import GridSeries
from agent.rhythms import two_rhythms
from tests.signals import periodic_bursts, sample_bursts

FS = 100.0


def _flow(period: float, duty: float, duration: float, seed: int, rate: float = 1e9) -> np.ndarray:
    bursts, _ = periodic_bursts(period, duty, duration, rate=rate, jitter=0.005, seed=seed)
    return sample_bursts(bursts, FS, duration)


def _estimate(rate: np.ndarray):  # type: ignore[no-untyped-def]
    grid = GridSeries(t0=0.0, dt=1 / FS, rate=rate, valid=np.ones(rate.size, dtype=bool))
    return estimate(EstimateInputs(network={"tx": grid}, network_source="counters"))


def test_two_flows_with_their_own_periods_are_no_confident_step() -> None:
    rate = _flow(0.7, 0.3, 120.0, 1) + _flow(1.93, 0.3, 120.0, 2)
    est = _estimate(rate)
    assert est.period_s == pytest.approx(7.7, rel=0.01)  # the near-common multiple: shown,
    assert est.confidence < 0.5  # but below the alerts' threshold, and said
    assert any("two flows with their own rhythms" in w for w in est.warnings)
    assert est.period_unsure  # so the live agent never vouches for it, however long held


@pytest.mark.parametrize(
    "shape",
    ["plain", "grad-accum", "layer trains", "background"],
)
def test_one_job_keeps_its_confidence(shape: str) -> None:
    """A step with one rhythm inside it (micro-steps, layers) or a steady background."""
    duration, period = 60.0, 1.0
    rate = _flow(period, 0.3, duration, 3)
    if shape == "grad-accum":  # 4 micro-step bursts, then the all-reduce, every step
        rate = _flow(period, 0.25, duration, 3) + _flow(period / 4, 0.1, duration, 3, 5e8)
    elif shape == "layer trains":  # 8 layer bursts 40 ms apart at the start of each step
        t = np.arange(rate.size) / FS
        phase = np.mod(t, period)
        rate = np.where((phase < 0.32) & (np.mod(phase, 0.04) < 0.02), 1e9, 0.0)
    elif shape == "background":
        rate = rate + 3e8
    est = _estimate(rate)
    assert est.period_s == pytest.approx(period, rel=0.01)
    assert est.confidence > 0.5
    assert not any("own rhythms" in w for w in est.warnings)


def test_the_spacings_are_named() -> None:
    rate = _flow(0.7, 0.3, 120.0, 1) + _flow(1.93, 0.3, 120.0, 2)
    found = two_rhythms(rate, 1 / FS, 7.7)
    assert found is not None
    a, b = found
    assert abs(b / a - round(b / a)) > 0.1  # not multiples of one another
    assert two_rhythms(_flow(1.0, 0.3, 60.0, 3), 1 / FS, 1.0) is None


@pytest.mark.parametrize("duration", [60.0, 120.0, 240.0])
def test_bucket_trains_finer_than_the_averaged_series_are_one_rhythm(duration: float) -> None:
    """Eight 30 ms buckets 60 ms apart in each 1.5 s step: over 120 s of 100 Hz polls the
    series was averaged in pairs, which hid the 60 ms spacing under the shortest lag, and its
    multiples 0.12 and 0.18 s read as two flows (confidence capped at 0.45, a false warning)
    in a 120 s recording, and not in one of 60 or 240 s."""
    t = np.arange(int(duration * FS)) / FS
    phase = np.mod(t, 1.5) - 1.0
    rate = np.where((phase >= 0) & (phase < 0.48) & (np.mod(phase, 0.06) < 0.03), 2e9, 0.0)
    assert two_rhythms(rate, 1 / FS, 1.5) is None
    est = _estimate(rate)
    assert est.period_s == pytest.approx(1.5, rel=0.01)
    assert est.confidence > 0.5
    assert not any("own rhythms" in w for w in est.warnings)
