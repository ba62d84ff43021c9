"""RDMA counters against a fake mlx5 host: ×4 words, 32-bit saturation, skipped devices."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from agent.clock import FakeClock
from agent.errors import ConfigError, SourceUnavailable
from collectors._base import CounterBatch, CounterReading, DeviceInfo, Reading
from collectors._sysfs import parse_sysfs_int
from collectors.rdma_counters import (
    SATURATED_32,
    RdmaConfig,
    RdmaCounters,
    RdmaPortReader,
    _RdmaSweeper,
    discover_ports,
    parse_rate,
    parse_state,
)
from tests.sources import collect_counter_readings, polls, unbatched

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mlx5-host" / "sys"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("200 Gb/sec (4X HDR)", 25e9),
        ("100 Gb/sec (4X EDR)", 12.5e9),
        ("2.5 Gb/sec (1X SDR)", 2.5e9 / 8),
        ("400 Gb/sec (4X NDR)\n", 50e9),
        ("", None),
        ("N/A", None),
    ],
)
def test_parse_rate(text: str, value: float | None) -> None:
    assert parse_rate(text) == value


@pytest.mark.parametrize(
    ("text", "value"), [("4: ACTIVE\n", "ACTIVE"), ("1: DOWN", "DOWN"), ("", None)]
)
def test_parse_state(text: str, value: str | None) -> None:
    assert parse_state(text) == value


@pytest.mark.parametrize(
    ("text", "value"), [(b"123\n", 123), (b"N/A (no PMA)\n", None), (b"", None)]
)
def test_parse_counter(text: bytes, value: int | None) -> None:
    assert parse_sysfs_int(text) == value


def test_discovery_finds_every_port_and_says_why_some_are_skipped() -> None:
    ports = {p.name: p for p in discover_ports(FIXTURE)}
    assert set(ports) == {"mlx5_0:1", "mlx5_1:1", "mlx4_0:1", "mlx4_0:2", "bnxt_re0:1", "irdma0:1"}
    assert ports["mlx5_0:1"].link_layer == "InfiniBand"
    assert ports["mlx5_0:1"].rate_bytes_per_s == 25e9
    assert ports["mlx5_1:1"].link_layer == "Ethernet"
    assert ports["mlx5_1:1"].lifespan_ms == 10
    assert ports["mlx4_0:1"].extended
    assert not ports["mlx4_0:2"].extended
    assert ports["mlx4_0:2"].state == "DOWN"
    assert "no counters/" in (ports["bnxt_re0:1"].skipped or "")
    assert "N/A (no PMA)" in (ports["irdma0:1"].skipped or "")
    assert ports["mlx5_0:1"].skipped is None


def test_a_counter_the_agent_may_not_read_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CAP_DAC_OVERRIDE a mode-000 counter file refuses the read: the port said
    "counters unreadable: empty", which sent an operator looking at the driver."""
    real = Path.read_bytes

    def refused(self: Path) -> bytes:
        if self.name == "port_xmit_data" and "mlx5_0" in str(self.resolve()):
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", refused)
    ports = {p.name: p for p in discover_ports(FIXTURE)}
    assert ports["mlx5_0:1"].skipped == "counters unreadable: Permission denied"
    assert ports["mlx5_1:1"].skipped is None


def test_data_counters_are_words_times_four() -> None:
    port = next(p for p in discover_ports(FIXTURE) if p.name == "mlx5_0:1")
    reader = RdmaPortReader(port)
    tx, rx, txp, rxp = reader.read()
    assert tx == 2_500_000_000_000 * 4
    assert rx == 2_499_000_000_000 * 4
    assert (txp, rxp) == (1_220_000_000, 1_219_000_000)  # packets are not scaled
    reader.close()


def test_extended_counters_are_preferred_over_saturated_32bit_ones() -> None:
    port = next(p for p in discover_ports(FIXTURE) if p.name == "mlx4_0:1")
    reader = RdmaPortReader(port)
    assert reader.read() == (88_000_000_000 * 4, 87_000_000_000 * 4, 43_000_000, 42_500_000)
    assert reader.saturated() == frozenset()
    reader.close()


def test_saturated_32bit_counter_is_flagged_not_read_as_a_value() -> None:
    port = next(p for p in discover_ports(FIXTURE) if p.name == "mlx4_0:2")
    reader = RdmaPortReader(port)
    tx, rx, txp, rxp = reader.read()
    assert tx is None  # stuck at 2^32-1: unknown, never a rate of zero
    assert rx == 12_345 * 4
    assert txp is None
    assert rxp == 678
    assert reader.saturated() == {"port_xmit_data", "port_xmit_packets"}
    reader.close()


def test_hw_counters_are_the_allow_listed_congestion_counters() -> None:
    port = next(p for p in discover_ports(FIXTURE) if p.name == "mlx5_1:1")
    hw = RdmaPortReader(port).read_hw()
    assert hw["np_cnp_sent"] == 4411
    assert hw["np_ecn_marked_roce_packets"] == 9001
    assert "lifespan" not in hw
    assert "rx_write_requests" not in hw  # not a congestion signal: left out


def test_source_on_the_fixture_host() -> None:
    src = RdmaCounters(RdmaConfig(sysfs_root=FIXTURE), clock=FakeClock())
    out = asyncio.run(collect_counter_readings(src, 2))
    infos = {r.device: r for r in out if isinstance(r, DeviceInfo)}
    assert infos["bnxt_re0:1"].skipped is not None
    assert infos["mlx5_0:1"].speed_bytes_per_s == 25e9
    assert infos["mlx4_0:2"].stale_counters == {"port_xmit_data", "port_xmit_packets"}
    reading = next(r for r in out if isinstance(r, CounterReading))
    assert reading.values["mlx5_0:1_tx_bytes"] == 10_000_000_000_000
    assert "mlx4_0:2_tx_bytes" not in reading.values  # saturated: a gap
    assert reading.values["mlx4_0:2_rx_bytes"] == 49_380
    assert not any(k.startswith(("bnxt_re0", "irdma0")) for k in reading.values)
    # Packets and hw_counters come with the first sweep, then once a second: not at 100 Hz.
    readings = [r for r in out if isinstance(r, CounterReading)]
    assert readings[0].counters["mlx5_1:1"]["np_cnp_sent"] == 4411
    assert readings[0].counters["mlx5_0:1"]["tx_packets"] == 1_220_000_000
    assert readings[1].counters == {}


def test_a_device_that_goes_away_is_reported_and_the_others_continue(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    clock = FakeClock()
    src = RdmaCounters(RdmaConfig(sysfs_root=root, rescan_interval_s=1.0), clock=clock)

    def vanished(r: Reading) -> bool:
        return isinstance(r, DeviceInfo) and r.device == "mlx5_1:1" and r.skipped == "vanished"

    async def scenario() -> list[Reading]:
        out: list[Reading] = []
        task = asyncio.create_task(src.run(out.append))
        while polls(out) < 3:
            await asyncio.sleep(0)
        # Driver reload: mlx5_1 disappears from sysfs.
        shutil.rmtree((root / "class" / "infiniband" / "mlx5_1").resolve())
        (root / "class" / "infiniband" / "mlx5_1").unlink()
        while not any(vanished(r) for r in out):
            await asyncio.sleep(0.001)
            if task.done():
                task.result()
        mark = len(out)
        while polls(out[mark:]) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return unbatched(out[mark:])

    after = asyncio.run(scenario())
    last = [r for r in after if isinstance(r, CounterReading)][-1]
    assert "mlx5_1:1_tx_bytes" not in last.values
    assert "mlx5_0:1_tx_bytes" in last.values


def test_no_rdma_devices_is_no_data_with_a_reason(tmp_path: Path) -> None:
    src = RdmaCounters(RdmaConfig(sysfs_root=tmp_path), clock=FakeClock())
    with pytest.raises(SourceUnavailable, match="no device under"):
        asyncio.run(src.run(lambda r: None))


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"rdma_counters\.exclude"):
        RdmaConfig(exclude="[")
    with pytest.raises(ConfigError, match="hw_counters_interval_s"):
        RdmaConfig(hw_counters_interval_s=0)


def test_saturation_constant() -> None:
    assert SATURATED_32 == 4294967295


# --------------------------------------------------------------------------------------------
# The sampling thread's sweeper: polls kept as raw bytes, decoded ten at a time


def _narrow_rcv(root: Path) -> Path:
    """mlx4_0 port 2's 32-bit rcv counter (the fixture's port without extended counters)."""
    port = (root / "class" / "infiniband" / "mlx4_0").resolve() / "ports" / "2"
    return port / "counters" / "port_rcv_data"


def _sweeper(tmp_path: Path, **kw: float) -> tuple[_RdmaSweeper, FakeClock, Path]:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    clock = FakeClock()
    sweeper = _RdmaSweeper(RdmaConfig(sysfs_root=root, **kw), clock, "rdma_counters")
    return sweeper, clock, root


def _polls(
    sweeper: _RdmaSweeper, clock: FakeClock, words: list[bytes], path: Path
) -> list[Reading]:
    """One sweep per value written to ``path`` (10 ms apart), then the drain."""
    out: list[Reading] = []
    for w in words:
        path.write_bytes(w)
        clock.advance(0.01)
        out += sweeper.sweep()
    return out + sweeper.drain()


def test_kept_polls_come_out_as_one_batch_equal_to_polls_decoded_one_by_one(
    tmp_path: Path,
) -> None:
    sweeper, clock, root = _sweeper(tmp_path)
    sweeper.sweep()  # discovery: the device infos go out with the first poll
    counts = [b"%d\n" % (1000 + 7 * i) for i in range(10)]
    out = _polls(sweeper, clock, counts, _narrow_rcv(root))
    assert len(out) == 1  # one queue item a hand-over
    assert isinstance(out[0], CounterBatch)
    batch = out[0]
    assert np.allclose(np.diff(batch.times), 0.01)
    polls_ = list(batch.readings())
    assert [p.values["mlx4_0:2_rx_bytes"] for p in polls_] == [
        4 * (1000 + 7 * i) for i in range(10)
    ]
    # The saturated 32-bit tx counter is a gap in every poll, as a poll decoded alone has it.
    assert all("mlx4_0:2_tx_bytes" not in p.values for p in polls_)
    assert polls_[0].values["mlx5_0:1_tx_bytes"] == 10_000_000_000_000


def test_a_counter_saturating_or_unreadable_within_the_batch_is_a_gap_in_those_polls_only(
    tmp_path: Path,
) -> None:
    sweeper, clock, root = _sweeper(tmp_path)
    sweeper.sweep()
    words = [b"100\n", b"200\n", b"4294967295\n", b"N/A (no PMA)\n", b"500\n"]
    out = unbatched(_polls(sweeper, clock, words, _narrow_rcv(root)))
    got = [r.values.get("mlx4_0:2_rx_bytes") for r in out if isinstance(r, CounterReading)]
    assert got == [400, 800, None, None, 2000]
    assert all(r.values["mlx5_1:1_rx_bytes"] > 0 for r in out if isinstance(r, CounterReading))


def test_readings_keep_their_order_when_a_device_change_comes_between_kept_polls(
    tmp_path: Path,
) -> None:
    sweeper, clock, root = _sweeper(tmp_path, hw_counters_interval_s=0.05)
    sweeper.sweep()
    narrow = _narrow_rcv(root)
    out = _polls(sweeper, clock, [b"1\n", b"2\n", b"3\n"], narrow)
    # The tx counter comes unstuck: the next slow read reports the change (a DeviceInfo).
    (narrow.parent / "port_xmit_data").write_bytes(b"77\n")
    out += _polls(sweeper, clock, [b"4\n", b"5\n", b"6\n", b"7\n"], narrow)
    flat = unbatched(out)
    kinds = [type(r).__name__ for r in flat]
    info = kinds.index("DeviceInfo")
    changed = flat[info]
    assert isinstance(changed, DeviceInfo)
    assert changed.device == "mlx4_0:2"
    assert "port_xmit_data" not in changed.stale_counters
    rx = [r.values["mlx4_0:2_rx_bytes"] for r in flat if isinstance(r, CounterReading)]
    assert rx == [4 * k for k in range(1, 8)]  # every poll, in order, none twice
    after = [r for r in flat[info + 1 :] if isinstance(r, CounterReading)]
    assert after[0].values["mlx4_0:2_tx_bytes"] == 4 * 77  # the poll that saw the change
    polls_ = [r for r in flat if isinstance(r, CounterReading)]
    assert all("mlx4_0:2_tx_bytes" not in r.values for r in polls_[:3])  # still stuck then
    assert all(r.values["mlx4_0:2_tx_bytes"] == 4 * 77 for r in polls_[3:])
