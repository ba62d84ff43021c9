"""The regime rule, one branch at a time."""

from __future__ import annotations

import pytest

from agent.regime import RegimeFeatures, classify_regime, collective_shares


@pytest.mark.parametrize(
    ("features", "regime"),
    [
        (RegimeFeatures(periodic=False, mean_rate=1e5), "idle"),
        (RegimeFeatures(periodic=False, mean_rate=None, collective_calls=0), "idle"),
        (RegimeFeatures(periodic=True, bursts_per_period=1.0, mean_rate=8e9), "training"),
        (RegimeFeatures(periodic=True, bursts_per_period=1.0, mean_rate=7e6), "training"),
        (RegimeFeatures(periodic=True, inner_period=True, mean_rate=8e9), "finetune"),
        (RegimeFeatures(periodic=True, bursts_per_period=96, mean_rate=8e9), "finetune"),
        (
            RegimeFeatures(periodic=True, bursts_per_period=1, mean_rate=8e9, gather_share=0.9),
            "finetune",
        ),
        (RegimeFeatures(periodic=False, bursty=True, bursts=40, mean_rate=1e9), "inference"),
        (RegimeFeatures(periodic=False, bursty=True, bursts=3, mean_rate=1e9), "unknown"),
        (RegimeFeatures(periodic=False, mean_rate=1e9, sparse_share=0.8), "inference"),
        (RegimeFeatures(periodic=False, bursty=False, mean_rate=5e9), "unknown"),
    ],
)
def test_rule(features: RegimeFeatures, regime: str) -> None:
    assert classify_regime(features) == regime


def test_collective_shares() -> None:
    shares = collective_shares(
        {"AllGather": (10, 600), "ReduceScatter": (5, 200), "AllReduce": (1, 100), "Send": (2, 100)}
    )
    assert shares == pytest.approx((0.8, 0.1))
    assert collective_shares({"AllReduce": (3, 0)}) is None
