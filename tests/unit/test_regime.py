"""The regime rule, one branch at a time."""

from __future__ import annotations

import numpy as np
import pytest

from agent.bursts import largest_burst_share
from agent.regime import RegimeFeatures, RegimeGate, classify_regime, collective_shares


@pytest.mark.parametrize(
    ("features", "regime"),
    [
        (RegimeFeatures(periodic=False, mean_rate=1e5), "idle"),
        (RegimeFeatures(periodic=False, mean_rate=None, collective_calls=0), "idle"),
        # Neither counters nor a log (GPU samples alone, 47 % busy): nothing says idle.
        (RegimeFeatures(periodic=False, mean_rate=None, collective_calls=None), "unknown"),
        # Polls that reach a job's rates, too short and random to count as bursts: not idle.
        (RegimeFeatures(periodic=False, mean_rate=5e6, spikes=140), "unknown"),
        (RegimeFeatures(periodic=False, mean_rate=5e6, spikes=3), "idle"),
        (RegimeFeatures(periodic=True, bursts_per_period=1.0, mean_rate=8e9), "training"),
        (RegimeFeatures(periodic=True, bursts_per_period=1.0, mean_rate=7e6), "training"),
        (RegimeFeatures(periodic=True, inner_period=True, mean_rate=8e9), "finetune"),
        (RegimeFeatures(periodic=True, bursts_per_period=96, mean_rate=8e9), "finetune"),
        (
            RegimeFeatures(periodic=True, bursts_per_period=1, mean_rate=8e9, gather_share=0.9),
            "finetune",
        ),
        # A train of collectives through the whole step: ZeRO-3 / FSDP (real FSDP: 0.04).
        (
            RegimeFeatures(periodic=True, bursts_per_period=18, step_silence=0.04, mean_rate=8e9),
            "finetune",
        ),
        # A train that leaves the forward pass silent: DDP's bucketed AllReduces (real: 0.38).
        (
            RegimeFeatures(periodic=True, bursts_per_period=6, step_silence=0.38, mean_rate=8e9),
            "training",
        ),
        (
            RegimeFeatures(periodic=True, inner_period=True, step_silence=0.3, mean_rate=8e9),
            "training",
        ),
        # The NCCL log's collectives outrank the traffic's shape: AllReduce in buckets is DDP.
        (
            RegimeFeatures(
                periodic=True, bursts_per_period=40, step_silence=0.05, gather_share=0.0
            ),
            "training",
        ),
        (RegimeFeatures(periodic=False, bursty=True, bursts=40, mean_rate=1e9), "inference"),
        (RegimeFeatures(periodic=False, bursty=True, bursts=3, mean_rate=1e9), "unknown"),
        # A rhythm too irregular to time (two jobs' steps on one link): a job, not inference.
        (
            RegimeFeatures(periodic=False, bursty=True, bursts=270, mean_rate=3e7, rhythm=True),
            "training",
        ),
        (
            RegimeFeatures(
                periodic=False, bursty=True, bursts=90, mean_rate=3e7, rhythm=True, gather_share=0.8
            ),
            "finetune",
        ),
        # ... unless the NCCL log says AlltoAll / Send / Recv, or the bursts are chatter.
        (
            RegimeFeatures(
                periodic=False, bursty=True, bursts=90, mean_rate=3e7, rhythm=True, sparse_share=0.9
            ),
            "inference",
        ),
        (
            RegimeFeatures(
                periodic=False, bursty=True, bursts=20, burst_rate=2e5, mean_rate=1e4, rhythm=True
            ),
            "idle",
        ),
        (RegimeFeatures(periodic=False, mean_rate=1e9, sparse_share=0.8), "inference"),
        # Send/Recv-heavy calls with nothing to time them (a log without timestamps, no
        # counters): a pipeline-parallel training job's as much as inference's.
        (
            RegimeFeatures(periodic=False, collective_calls=900, sparse_share=0.9, untimed=True),
            "unknown",
        ),
        (RegimeFeatures(periodic=False, bursty=False, mean_rate=5e9), "unknown"),
        # A real inference service at 1.85 requests/s: 4 MB/s on average, in 47 MB/s bursts
        # (it was "idle": the mean alone decided).
        (
            RegimeFeatures(periodic=False, bursty=True, bursts=74, burst_rate=47e6, mean_rate=4e6),
            "inference",
        ),
        # A job's first few bursts: too few to tell, but no idle host.
        (
            RegimeFeatures(periodic=False, bursty=True, bursts=4, burst_rate=47e6, mean_rate=4e6),
            "unknown",
        ),
        # Management chatter: regular-looking bursts, but nowhere near a job's rate.
        (
            RegimeFeatures(periodic=False, bursty=True, bursts=20, burst_rate=2e5, mean_rate=1e4),
            "idle",
        ),
        # ... nor when its bursts reach one (a 2 MB scrape every 15 s read at 10 ms polls).
        (
            RegimeFeatures(periodic=False, bursty=True, bursts=20, burst_rate=2e8, mean_rate=2e5),
            "idle",
        ),
        # A train through the step that ends in one large sync burst: a data-parallel AllReduce
        # after tensor- or expert-parallel traffic is training (synthetic TP+DP: 0.52).
        (
            RegimeFeatures(
                periodic=True,
                bursts_per_period=33,
                step_silence=0.05,
                largest_share=0.52,
                mean_rate=8e9,
            ),
            "training",
        ),
        # Real FSDP: every burst a layer's, the largest of each step 0.11 of the bytes.
        (
            RegimeFeatures(
                periodic=True,
                bursts_per_period=17,
                step_silence=0.04,
                largest_share=0.11,
                mean_rate=8e9,
            ),
            "finetune",
        ),
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


def test_the_live_gate_confirms_inference_before_showing_it() -> None:
    """A training job between locks (or before its first) reads "no period, random bursts"
    for a few seconds: a dashboard must not flip to inference for that. Inference shows once
    it has lasted 10 s; every other switch shows at once."""
    gate = RegimeGate(confirm_s=10.0)
    assert gate.update("inference", 0.0) == "unknown"  # a start: not locked yet
    assert gate.update("training", 6.0) == "training"
    for t in (7.0, 10.0, 14.0):  # the lock lost for 8 s mid-job
        assert gate.update("inference", t) == "training"
    assert gate.update("training", 15.0) == "training"
    assert gate.update("inference", 20.0) == "training"
    assert gate.update("inference", 30.0) == "inference"  # 10 s on: a real switch
    assert gate.update("inference", 31.0) == "inference"
    assert gate.update("idle", 32.0) == "idle"  # the job ended: at once
    assert gate.update("inference", 33.0) == "unknown"
    assert gate.update("finetune", 34.0) == "finetune"


def test_a_locked_period_keeps_a_periodic_regime() -> None:
    """While the tracker holds T on weaker evidence, the window alone may read "idle" (a real
    DDP job at 6-9 MB/s mean) or "inference": next to a T, the last periodic regime shows."""
    gate = RegimeGate(confirm_s=10.0)
    assert gate.update("finetune", 0.0, locked=True) == "finetune"
    assert gate.update("idle", 1.0, locked=True) == "finetune"
    assert gate.update("inference", 2.0, locked=True) == "finetune"
    assert gate.update("idle", 3.0, locked=False) == "idle"  # the lock is gone: as it reads


def test_the_largest_burst_share_tells_one_sync_from_a_train_of_layers() -> None:
    """Per step: 8 layer bursts of 1 unit and one sync of 8 (share 0.5), or 24 of 1 (1/24)."""
    dt, steps = 0.01, 10
    sync = np.zeros(200 * steps)
    layers = np.zeros(200 * steps)
    for k in range(steps):
        base = 200 * k
        for i in range(8):
            sync[base + 10 * i : base + 10 * i + 2] = 1e9
        sync[base + 100 : base + 116] = 1e9
        for i in range(24):
            layers[base + 6 * i : base + 6 * i + 2] = 1e9
    share = largest_burst_share(sync, sync > 0, dt, 2.0, 0.0)
    assert share == pytest.approx(0.5)
    share = largest_burst_share(layers, layers > 0, dt, 2.0, 0.0)
    assert share == pytest.approx(1 / 24)
