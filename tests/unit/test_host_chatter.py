"""Counter recordings of an idle host's chatter, a tiny job, and steps with regular pauses.

Each file is a counters CSV as ``commpulse record`` writes it: 10 ms polls (measured times,
a little jitter) of cumulative tx/rx byte counters that start at large values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files

Rate = Callable[[np.ndarray], np.ndarray]


def _recording(path: Path, seconds: float, dt: float, rate: Rate, seed: int = 0) -> Path:
    """Poll ``rate`` (bytes/s at time t, on a 0.1 ms grid) every ``dt`` into a counters CSV."""
    rng = np.random.default_rng(seed)
    fine = 1e-4
    t = np.arange(0.0, seconds, fine)
    cum = np.concatenate(([0.0], np.cumsum(rate(t) * fine)))
    polls = np.arange(0.0, seconds - dt, dt)
    polls = np.sort(polls + rng.uniform(0.0, 0.05 * dt, polls.size))
    at = np.interp(polls, np.append(t, seconds), cum)
    tx = 8_123_456_789 + np.floor(at)
    rx = 5_432_100_000 + np.floor(0.97 * at)
    rows = [f"{p:.6f},{int(a)},{int(b)}" for p, a, b in zip(polls, tx, rx, strict=True)]
    path.write_text("time,eth0_tx_bytes,eth0_rx_bytes\n" + "\n".join(rows) + "\n")
    return path


def _chatter(t: np.ndarray, *, transfer: float, every: float) -> np.ndarray:
    """50 kB/s of chatter, a 1 kB heartbeat each second, and ``transfer`` bytes at 100 MB/s
    every ``every`` seconds (a metrics scrape, a log shipment)."""
    rate = np.full(t.size, 50e3)
    rate += np.where(np.mod(t, 1.0) < 1e-3, 1e6, 0.0)
    rate += np.where(np.mod(t - 0.37, every) < transfer / 100e6, 100e6, 0.0)
    return rate


@pytest.mark.parametrize(("transfer", "every"), [(200e3, 10.0), (2e6, 15.0)])
def test_an_idle_hosts_chatter_has_no_period_and_is_idle(
    tmp_path: Path, transfer: float, every: float
) -> None:
    """A 200 kB transfer every 10 s, read at 10 ms polls, reached the 10 MB/s a poll that
    lets a period count: T = 10 s at confidence 0.98, "training", on an idle host. Its bytes
    a cycle (under 1 MB) and its mean (under 0.2 MB/s) are no job's."""
    path = _recording(
        tmp_path / "idle.csv", 120.0, 0.01, lambda t: _chatter(t, transfer=transfer, every=every)
    )
    est = analyze_files(counters=[path]).estimate
    assert est.period_s is None
    assert est.regime == "idle"
    assert any("management traffic" in w for w in est.warnings)


def test_a_tiny_job_is_still_a_job(tmp_path: Path) -> None:
    """A small model's DDP step: 0.4 MB at 1 GB/s every 50 ms (8 MB/s on average)."""
    path = _recording(
        tmp_path / "mnist.csv", 30.0, 0.001, lambda t: np.where(np.mod(t, 0.05) < 4e-4, 1e9, 0.0)
    )
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(0.05, rel=0.01)
    assert est.regime in ("training", "finetune")


def test_steps_with_a_regular_evaluation_name_both_readings(tmp_path: Path) -> None:
    """20 steps of 1 s (3 % spread, a 0.25 s all-reduce at the end of each) and an 8 s
    evaluation: the traffic repeats every 28 s with the steps inside, which is what a ZeRO-3
    step of layers looks like too. T stays the long period (28 s at confidence 0.99, D
    diluted by the pauses), and the note says the steps may be the step."""
    rng = np.random.default_rng(4)
    starts, ends, t = [], [], 0.0
    while t < 300.0:
        for _ in range(20):
            step = 1.0 + 0.03 * rng.standard_normal()
            starts.append(t + step - 0.25)
            ends.append(t + step)
            t += step
        t += 8.0
    on_from, on_to = np.asarray(starts), np.asarray(ends)

    def rate(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(on_from, t, side="right") - 1
        return np.where((i >= 0) & (t < on_to[np.maximum(i, 0)]), 20e9, 0.0)

    path = _recording(tmp_path / "eval.csv", 300.0, 0.05, rate)
    est = analyze_files(counters=[path]).estimate
    assert est.period_s == pytest.approx(28.0, rel=0.03)
    assert est.inner_period_s == pytest.approx(1.0, rel=0.03)
    note = next(w for w in est.warnings if "pauses regularly" in w)
    assert "every 20 steps" in note
