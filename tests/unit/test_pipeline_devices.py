"""The live agent on a multi-rail host: two jobs on their own rails, a rail slower than the rest.

The analysis of recordings tells these apart per device (tests/unit/test_multi_device.py); the
daemon, which the alert reads, summed its source's devices as well: two jobs at 1.0 and 1.5 s
read a T of neither, or D 0.55 over two jobs under 0.5, and a slow rail's tail was not
counted in D. Real-time pipelines on a source of rails polled at 100 Hz.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Sequence

import numpy as np
import pytest
from prometheus_client import generate_latest

from agent import pipeline as pipeline_module
from agent.clock import MonotonicClock, Ticker
from agent.devices import DeviceBursts
from agent.estimate import Estimate
from agent.exporter import metrics_registry
from agent.pipeline import Pipeline, PipelineSettings, Snapshot, SnapshotStore
from agent.windows import DeviceDeltas
from collectors._base import CounterBatch, CounterReading, Emit
from tests.conftest import require_component

RATE = 1e9  # bytes/s of one rail in a burst


class Rails:
    """Rails of bursts, each (period, burst length, rate), polled every 10 ms (real clock)."""

    name = "rails"

    def __init__(self, rails: Sequence[tuple[float, float, float]]) -> None:
        self.rails = list(rails)

    @staticmethod
    def _on(t: float, period: float, length: float) -> float:
        k, phase = divmod(max(t, 0.0), period)
        return k * length + min(phase, length)

    async def run(self, emit: Emit) -> None:
        clock = MonotonicClock()
        ticker = Ticker(clock, 0.01)
        start = clock.now()
        while True:
            now = await ticker.tick()
            t = now - start
            emit(
                CounterReading(
                    now,
                    {
                        f"mlx5_{k}:1_tx_bytes": int(rate * self._on(t, period, length))
                        for k, (period, length, rate) in enumerate(self.rails)
                    },
                )
            )


def _run(rails: Sequence[tuple[float, float, float]], run_s: float) -> list[Snapshot]:
    seen: list[Snapshot] = []
    settings = PipelineSettings(hop_s=0.5, counter_rate_hz=100)
    pipeline = Pipeline([Rails(rails)], SnapshotStore(), settings=settings, on_snapshot=seen.append)

    async def main() -> None:
        asyncio.get_running_loop().call_later(run_s, pipeline.stop)
        await pipeline.run()

    asyncio.run(main())
    return seen


def _last(seen: list[Snapshot], hops: int = 4) -> list[Estimate]:
    """The estimates of the last ``hops`` snapshots (each must have one)."""
    last = [s.estimate for s in seen[-hops:] if s.estimate is not None]
    assert len(last) == hops
    return last


def test_two_jobs_on_their_own_rails_are_shown_as_the_busier_one_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline_module, "DEVICE_CHECK_HOPS", 2)
    rails = [(0.5, 0.2, RATE)] * 4 + [(0.75, 0.2, RATE)] * 4
    seen = _run(rails, 10.0)
    for est in _last(seen):
        assert est.period_s == pytest.approx(0.5, rel=0.02)
        assert est.duty_cycle == pytest.approx(0.4, abs=0.03)
        note = next(w for w in est.warnings if "devices step apart" in w)
        shown = re.search(r"mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1 at T = ([0-9.]+) s", note)
        assert shown is not None
        assert float(shown[1]) == pytest.approx(0.5, rel=0.02)


def test_a_slow_rail_keeps_d_counting_until_it_is_done_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline_module, "DEVICE_CHECK_HOPS", 2)
    rails = [(0.5, 0.15, RATE)] * 3 + [(0.5, 0.3, RATE / 2)]
    seen = _run(rails, 8.0)
    for est in _last(seen):
        assert est.period_s == pytest.approx(0.5, rel=0.02)
        assert est.duty_cycle == pytest.approx(0.6, abs=0.04)
        assert any("longer than their sum" in w for w in est.warnings)
    # /metrics names the slow rail: half the others' burst bandwidth, twice their on-ratio.
    store = SnapshotStore()
    store.publish(seen[-1])
    families = {f.name: f for f in metrics_registry(store).collect()}
    band = {
        s.labels["device"]: s.value
        for s in families["commpulse_device_burst_bandwidth_bytes_per_second"].samples
    }
    on = {s.labels["device"]: s.value for s in families["commpulse_device_burst_on_ratio"].samples}
    assert band["mlx5_3"] == pytest.approx(RATE / 2, rel=0.05)
    assert band["mlx5_0"] == pytest.approx(RATE, rel=0.05)
    assert on["mlx5_3"] == pytest.approx(0.6, abs=0.04)
    assert on["mlx5_0"] == pytest.approx(0.3, abs=0.04)
    timed = {
        s.labels["device"]: s.value
        for s in families["commpulse_device_sync_period_seconds"].samples
    }
    assert timed["mlx5_3"] == pytest.approx(0.5, rel=0.02)


def test_rails_in_step_are_left_as_their_sum_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module, "DEVICE_CHECK_HOPS", 2)
    seen = _run([(0.5, 0.15, RATE)] * 4, 6.0)
    for est in _last(seen):
        assert est.period_s == pytest.approx(0.5, rel=0.02)
        assert est.duty_cycle == pytest.approx(0.3, abs=0.03)
        assert not any("devices" in w for w in est.warnings)


def test_device_deltas_keep_each_device_apart_and_a_reset_unknown() -> None:
    """Batches and single polls give the same rows; a counter that falls (a driver reload)
    leaves that interval unknown for its device only."""
    times = np.arange(0.0, 1.0, 0.01)
    a = (np.arange(times.size) * 1000).astype(np.uint64)
    b = (np.arange(times.size) * 3000 + 10**12).astype(np.uint64)
    b[60:] -= np.uint64(10**12)  # reset at poll 60
    columns = ("mlx5_0:1_tx_bytes", "mlx5_1:1_tx_bytes")
    batched, single = DeviceDeltas(512), DeviceDeltas(512)
    batched.add_batch(CounterBatch(times[:50], columns, np.stack((a, b), 1)[:50]))
    batched.add_batch(CounterBatch(times[50:], columns, np.stack((a, b), 1)[50:]))
    for k, t in enumerate(times):
        single.add(CounterReading(float(t), {columns[0]: int(a[k]), columns[1]: int(b[k])}))
    np.testing.assert_array_equal(batched.rows()[1], single.rows()[1])
    devices = batched.devices()
    assert sorted(devices) == ["mlx5_0:1", "mlx5_1:1"]
    rate0, rate1 = devices["mlx5_0:1"]["tx"].rate, devices["mlx5_1:1"]["tx"].rate
    assert np.nanmedian(rate0) == pytest.approx(1e5, rel=1e-6)
    assert np.nanmedian(rate1) == pytest.approx(3e5, rel=1e-6)
    assert np.isfinite(rate0).all()
    assert int(np.isnan(rate1).sum()) == 1


def test_device_deltas_start_over_when_the_devices_change() -> None:
    window = DeviceDeltas(64)
    for k in range(10):
        window.add(CounterReading(0.01 * k, {"eth0_tx_bytes": 100 * k}))
    for k in range(10, 20):
        window.add(CounterReading(0.01 * k, {"eth0_tx_bytes": 100 * k, "eth1_tx_bytes": 7 * k}))
    columns, rows = window.rows()
    assert columns == ("eth0_tx_bytes", "eth1_tx_bytes")
    assert rows.shape == (9, 3)  # the first poll of the new set is the base of the next


def test_the_device_burst_families_pass_promtool() -> None:
    snap = Snapshot(
        estimate=None,
        time_s=1.0,
        wall_time_s=1.0,
        estimator_seconds=0.0,
        sources=(),
        device_bursts=(
            DeviceBursts("mlx5_0:1", "tx", 24e9, 0.3, 1.5),
            DeviceBursts("mlx5_0:1", "rx", 24e9, 0.3, 1.5),
            DeviceBursts("eth0", "tx", 1e9, 0.1),
        ),
        device_bursts_source="rdma",
    )
    store = SnapshotStore()
    store.publish(snap)
    text = generate_latest(metrics_registry(store)).decode()
    assert (
        'commpulse_device_sync_period_seconds{device="mlx5_0",port="1",source="rdma"} 1.5' in text
    )
    res = subprocess.run(
        [require_component("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
