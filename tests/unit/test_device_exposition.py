"""Golden exposition of the fixture host's devices (update with COMMPULSE_UPDATE_GOLDENS=1)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from agent.clock import FakeClock
from agent.pipeline import Snapshot
from agent.windows import DeviceTable
from collectors._base import CounterBatch, CounterReading, DeviceInfo, Reading
from collectors.nic_counters import NicConfig, NicCounters
from collectors.rdma_counters import RdmaConfig, RdmaCounters
from tests.conftest import exposition, require_component
from tests.sources import polls, run_until

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "mlx5-host" / "sys"
GOLDEN = ROOT / "golden" / "mlx5-host.prom"


async def _readings(source: NicCounters | RdmaCounters, n: int) -> list[Reading]:
    return await run_until(source, lambda out: polls(out) >= n)


def _device_exposition() -> str:
    table = DeviceTable()
    for source in (
        NicCounters(NicConfig(sysfs_root=FIXTURE), clock=FakeClock()),
        RdmaCounters(RdmaConfig(sysfs_root=FIXTURE), clock=FakeClock()),
    ):
        for r in asyncio.run(_readings(source, 2)):
            if isinstance(r, DeviceInfo):
                table.add_info(source.name, r)
            elif isinstance(r, CounterBatch):
                table.add_batch(source.name, r)
            elif isinstance(r, CounterReading):
                table.add_reading(source.name, r)
        table.hop()
    text = exposition(Snapshot(None, 0.0, 0.0, 0.0, (), devices=tuple(table.hop())))
    keep = [
        line for line in text.splitlines() if "commpulse_device" in line or "commpulse_rdma" in line
    ]
    return "\n".join(keep) + "\n"


def test_fixture_host_exposition_matches_golden() -> None:
    text = _device_exposition()
    if os.environ.get("COMMPULSE_UPDATE_GOLDENS") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_golden_is_promtool_clean() -> None:
    promtool = require_component("promtool")
    res = subprocess.run(
        [promtool, "check", "metrics"],
        input=GOLDEN.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_device_no_longer_read_loses_its_rate_after_a_few_hops() -> None:
    """A device re-created under a new ifindex went unread while its last rate stayed on
    /metrics for good: a rate is shown again for at most 3 hops without a new read."""
    table = DeviceTable()
    for t, value in ((0.0, 0), (1.0, 1000)):
        table.add_reading(
            "nic_counters", CounterReading(t, {"eth0_tx_bytes": value, "eth0_rx_bytes": value})
        )
        table.hop()
    rates = [next(d for d in table.hop() if d.device == "eth0").tx_rate for _ in range(5)]
    assert rates == [1000.0, 1000.0, 1000.0, None, None]
    table.add_reading("nic_counters", CounterReading(6.0, {"eth0_tx_bytes": 6000}))
    assert next(d for d in table.hop() if d.device == "eth0").tx_rate == 1000.0


def test_vanished_devices_leave_the_table() -> None:
    """Pod churn: every veth that ever existed stayed on /metrics as device_info (7 -> 37
    series after 15 veths came and went). A device that was read is shown as vanished for a
    while, then forgotten; one that was only ever skipped goes at once."""
    from agent.windows import VANISHED_KEEP_HOPS

    table = DeviceTable()
    table.add_info("nic_counters", DeviceInfo("eth1", "netdev"))
    table.add_reading("nic_counters", CounterReading(0.0, {"eth1_tx_bytes": 5}))
    for i in range(15):
        table.add_info("nic_counters", DeviceInfo(f"veth{i}", "netdev", skipped="excluded"))
    assert len(table.hop()) == 16
    for i in range(15):
        table.add_info("nic_counters", DeviceInfo(f"veth{i}", "netdev", skipped="vanished"))
    table.add_info("nic_counters", DeviceInfo("eth1", "netdev", skipped="vanished"))
    shown = table.hop()
    assert [(d.device, d.info.skipped if d.info else None) for d in shown] == [("eth1", "vanished")]
    for _ in range(VANISHED_KEEP_HOPS):
        shown = table.hop()
    assert shown == []
    # It comes back: read again as before.
    table.add_info("nic_counters", DeviceInfo("eth1", "netdev"))
    table.add_reading("nic_counters", CounterReading(1.0, {"eth1_tx_bytes": 9}))
    assert [d.device for d in table.hop()] == ["eth1"]


def test_the_devices_of_a_source_that_stopped_show_as_vanished() -> None:
    """The last RDMA port went away: the source stopped before its "vanished" notes were
    delivered, and mlx5_0 stayed on /metrics as ACTIVE with its last counters. Another
    source's devices are not touched."""
    table = DeviceTable()
    table.add_info("rdma_counters", DeviceInfo("mlx5_0:1", "rdma", state="ACTIVE"))
    table.add_reading("rdma_counters", CounterReading(0.0, {"mlx5_0:1_tx_bytes": 5}))
    table.add_info("rdma_counters", DeviceInfo("mlx5_1:1", "rdma", skipped="no counters"))
    table.add_info("nic_counters", DeviceInfo("eth0", "netdev"))
    table.source_down("rdma_counters")
    shown = {(d.source, d.device): d for d in table.hop()}
    assert set(shown) == {("rdma_counters", "mlx5_0:1"), ("nic_counters", "eth0")}
    gone = shown["rdma_counters", "mlx5_0:1"]
    assert gone.info is not None
    assert gone.info.skipped == "vanished"
    assert gone.tx_bytes is None
    assert shown["nic_counters", "eth0"].info == DeviceInfo("eth0", "netdev")


def test_a_saturated_byte_counter_has_no_rate_on_the_scrape() -> None:
    """A 32-bit port_xmit_data stuck at 2^32-1 was flagged (device_saturated 1) while its last
    rate stayed on the scrape for 3 more hops: the flag's help says its rate is not reported."""
    table = DeviceTable()
    table.add_info("rdma_counters", DeviceInfo("mlx4_0:1", "rdma"))
    for t, value in ((0.0, 0), (1.0, 1000)):
        table.add_reading(
            "rdma_counters",
            CounterReading(t, {"mlx4_0:1_tx_bytes": value, "mlx4_0:1_rx_bytes": value}),
        )
        table.hop()
    stuck = DeviceInfo("mlx4_0:1", "rdma", stale_counters=frozenset({"port_xmit_data"}))
    table.add_info("rdma_counters", stuck)
    (status,) = table.hop()
    assert status.tx_rate is None
    assert status.rx_rate == 1000.0  # the other direction's counter still counts
