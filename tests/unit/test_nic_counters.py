"""NIC counters: pure parsers, the fixture host, and the real kernel's netlink and sysfs."""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
from pathlib import Path

import pytest

from agent.clock import FakeClock
from agent.errors import ConfigError, SourceUnavailable
from collectors._base import CounterReading, DeviceInfo
from collectors.nic_counters import (
    DEFAULT_EXCLUDE,
    LinkStats,
    NetlinkStatsReader,
    NicConfig,
    NicCounters,
    SysfsStatsReader,
    _NicSweeper,
    discover_interfaces,
    parse_speed,
    parse_stats_dump,
    parse_sysfs_int,
    select_interfaces,
    stats_request,
)
from tests.sources import collect_counter_readings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mlx5-host" / "sys"


@pytest.mark.parametrize(
    ("text", "value"), [(b"25000\n", 25000), (b"-1\n", -1), (b"", None), (b"x", None)]
)
def test_parse_sysfs_int(text: bytes, value: int | None) -> None:
    assert parse_sysfs_int(text) == value


@pytest.mark.parametrize(
    ("text", "value"), [(b"25000\n", 25000e6 / 8), (b"-1\n", None), (b"0", None), (b"", None)]
)
def test_parse_speed(text: bytes, value: float | None) -> None:
    assert parse_speed(text) == value


def _newstats(ifindex: int, values: list[int], seq: int = 1) -> bytes:
    payload = struct.pack("=24Q", *values, *([0] * (24 - len(values))))
    attr = struct.pack("=HH", 4 + len(payload), 1) + payload
    pad_attr = struct.pack("=HH", 4, 0)  # IFLA_STATS_UNSPEC padding, as the kernel may send
    body = struct.pack("=BBHII", 0, 0, 0, ifindex, 1) + pad_attr + attr
    return struct.pack("=IHHII", 16 + len(body), 92, 2, seq, 0) + body


def test_parse_stats_dump_reads_every_link_and_the_end() -> None:
    data = _newstats(1, [10, 20, 1000, 2000, 1, 2, 3, 4]) + _newstats(7, [5, 6, 500, 600])
    stats, done = parse_stats_dump(data)
    assert not done
    assert stats[1] == LinkStats(1000, 2000, 10, 20, 1, 2, 3, 4)
    assert stats[7].tx_bytes == 600
    stats, done = parse_stats_dump(struct.pack("=IHHIIi", 20, 3, 2, 1, 0, 0))
    assert done
    assert stats == {}


def test_parse_stats_dump_errors() -> None:
    err = struct.pack("=IHHIIi", 20, 2, 0, 1, 0, -95)  # -EOPNOTSUPP
    with pytest.raises(OSError, match="RTM_GETSTATS"):
        parse_stats_dump(err)
    with pytest.raises(ValueError, match="overruns"):
        parse_stats_dump(_newstats(1, [1, 2, 3, 4])[:-8])


def test_stats_request_layout() -> None:
    req = stats_request(42)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, kind, seq) == (len(req), 94, 42)
    assert flags & 0x301 == 0x301
    assert struct.unpack_from("=BBHII", req, 16)[4] == 1  # IFLA_STATS_LINK_64 only


def test_fixture_interfaces_and_their_kinds() -> None:
    ifaces = {i.name: i for i in discover_interfaces(FIXTURE)}
    assert set(ifaces) == {"eth0", "ib0", "enp93s0f0np0", "lo", "docker0", "veth1a2b3c"}
    assert ifaces["eth0"].kind == "physical"
    assert ifaces["eth0"].speed_bytes_per_s == 25e9 / 8
    assert ifaces["lo"].kind == "loopback"
    assert ifaces["docker0"].kind == "bridge"
    assert ifaces["veth1a2b3c"].kind == "virtual"
    assert ifaces["ib0"].arphrd == 32


def test_default_filter_skips_loopback_bridges_and_container_plumbing() -> None:
    chosen, skipped = select_interfaces(
        discover_interfaces(FIXTURE), include=None, exclude=DEFAULT_EXCLUDE
    )
    assert [i.name for i in chosen] == ["enp93s0f0np0", "eth0", "ib0"]
    assert skipped == {"docker0": "bridge", "lo": "loopback", "veth1a2b3c": "matched by exclude"}


def test_explicit_include_wins_over_exclusions() -> None:
    chosen, skipped = select_interfaces(
        discover_interfaces(FIXTURE), include=r"^(veth.*|lo)$", exclude=DEFAULT_EXCLUDE
    )
    assert [i.name for i in chosen] == ["lo", "veth1a2b3c"]
    assert skipped["eth0"] == "not matched by include"


def test_sysfs_reader_reads_the_files_and_drops_a_vanished_interface(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    chosen, _ = select_interfaces(discover_interfaces(root), include=None, exclude=DEFAULT_EXCLUDE)
    reader = SysfsStatsReader(chosen)
    stats = reader.read()
    assert stats["eth0"] == LinkStats(98765432109, 12345678901, 81234567, 23456789)
    # The driver unloads: the kernel removes the directory; reads of kept fds fail.
    target = (root / "class" / "net" / "ib0").resolve()
    for f in (target / "statistics").iterdir():
        f.write_text("")
    stats = reader.read()
    assert "ib0" not in stats
    assert reader.vanished == {"ib0"}
    assert "eth0" in stats
    reader.close()


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"nic_counters\.method"):
        NicConfig(method="snmp")
    with pytest.raises(ConfigError, match=r"nic_counters\.include"):
        NicConfig(include="(")
    with pytest.raises(ConfigError, match=r"nic_counters\.poll_interval_s"):
        NicConfig(poll_interval_s=0)


def test_source_on_the_fixture_host_emits_bytes_counters_and_device_info() -> None:
    clock = FakeClock()
    src = NicCounters(NicConfig(sysfs_root=FIXTURE, poll_interval_s=0.01), clock=clock)
    out = asyncio.run(collect_counter_readings(src, 3))
    assert src.method == "sysfs"
    infos = {r.device: r for r in out if isinstance(r, DeviceInfo)}
    assert infos["lo"].skipped == "loopback"
    assert infos["eth0"].speed_bytes_per_s == 25e9 / 8
    readings = [r for r in out if isinstance(r, CounterReading)]
    assert readings[0].values["eth0_rx_bytes"] == 98765432109
    assert readings[0].counters["eth0"]["rx_packets"] == 81234567
    assert readings[1].counters == {}  # packets and errors once a second, not every poll
    assert "lo_rx_bytes" not in readings[0].values
    times = [r.time_s for r in readings]
    assert times == sorted(times)
    assert times[1] - times[0] == pytest.approx(0.01)


def test_source_without_interfaces_says_why(tmp_path: Path) -> None:
    (tmp_path / "class" / "net").mkdir(parents=True)
    src = NicCounters(NicConfig(sysfs_root=tmp_path), clock=FakeClock())
    with pytest.raises(SourceUnavailable, match="no interface"):
        asyncio.run(src.run(lambda r: None))


def test_real_kernel_netlink_and_sysfs_agree() -> None:
    """This machine's own counters, read both ways (no root needed)."""
    sys_root = Path("/sys")
    ifaces = [i for i in discover_interfaces(sys_root) if i.name == "lo"]
    assert ifaces, "every Linux host has lo"
    try:
        netlink = NetlinkStatsReader(ifaces)
    except OSError as exc:  # pragma: no cover - a kernel without NETLINK_ROUTE stats
        pytest.fail(f"netlink RTM_GETSTATS refused: {exc}")
    sysfs = SysfsStatsReader(ifaces)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x" * 1000, ("127.0.0.1", 9))  # make lo count something
    a = netlink.read()["lo"]
    b = sysfs.read()["lo"]
    c = netlink.read()["lo"]
    assert a.rx_bytes <= b.rx_bytes <= c.rx_bytes
    assert a.tx_packets <= b.tx_packets <= c.tx_packets
    assert a.rx_bytes > 0
    netlink.close()
    sysfs.close()


def _eth0_sweeper(tmp_path: Path) -> tuple[Path, FakeClock, _NicSweeper]:
    """The mlx5 host's sysfs copied under ``tmp_path``, eth0 alone polled, on a fake clock."""
    root = tmp_path / "sys"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "mlx5-host" / "sys", root,
                    symlinks=True)  # fmt: skip
    clock = FakeClock()
    cfg = NicConfig(sysfs_root=root, method="sysfs", include="^eth0$", rescan_interval_s=1.0)
    return root, clock, _NicSweeper(cfg, clock, "nic_counters")


def test_an_interface_recreated_under_a_new_ifindex_is_reopened(tmp_path: Path) -> None:
    """A driver reload (or a veth re-created) between two rescans keeps the name under a new
    ifindex; the netlink reader matches by index, so the interface went unread for good."""
    root, clock, sweeper = _eth0_sweeper(tmp_path)
    first = sweeper.reader
    clock.advance(1.5)
    sweeper.sweep()
    assert sweeper.reader is first  # same name, same index: the kept-open reader stays
    ifindex = (root / "class" / "net" / "eth0" / "ifindex").resolve()
    ifindex.write_text(str(int(ifindex.read_text()) + 40) + "\n")
    clock.advance(1.5)
    sweeper.sweep()
    assert sweeper.reader is not first
    sweeper.close()


def test_the_source_is_down_when_every_selected_interface_went_away(tmp_path: Path) -> None:
    """Its included veths deleted, nic_counters stayed up (source_up 1) with empty polls,
    while rdma_counters in the same case went down."""
    root, clock, sweeper = _eth0_sweeper(tmp_path)
    clock.advance(1.5)
    assert any(isinstance(r, CounterReading) and r.values for r in sweeper.sweep())
    (root / "class" / "net" / "eth0").unlink()  # the interface is gone
    clock.advance(1.5)
    with pytest.raises(SourceUnavailable, match="every selected interface went away"):
        sweeper.sweep()
    sweeper.close()
