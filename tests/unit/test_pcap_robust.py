"""The capture reader on what real captures arrive as: compressed by any of the formats the
other inputs take, captured on several interfaces at once, cooked by `tcpdump -i any`, or with
a frame stamped by a clock that had not yet been set.

Files are real-format pcaps (the simulator's RoCEv2 writer, or records packed per the pcap
spec) and pcapngs packed block by block per the pcapng spec, with scapy's frames.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Packet, Raw

from agent.cli import main
from agent.errors import InputFormatError
from agent.simulator.pcap_writer import write_roce_pcap
from collectors.pcap import Capture, parse_capture, read_capture

OURS, PEER = "02:00:00:00:00:01", "02:00:00:00:00:02"
T0_NS = 1_760_000_000 * 10**9  # 2025-10-09
DAY_NS = 86_400 * 10**9


def _pcap(records: list[tuple[int, bytes, int]], linktype: int = 1) -> bytes:
    """A nanosecond little-endian pcap: records are (time_ns, captured bytes, original length)."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, linktype))
    for t, data, orig in records:
        out += struct.pack("<IIII", *divmod(t, 10**9), len(data), orig) + data
    return bytes(out)


def _block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) % 4)


def _pcapng(names: list[str | None], packets: list[tuple[int, int, bytes]], lt: int = 1) -> bytes:
    """A pcapng as dumpcap writes one: an SHB, an IDB per interface (if_name where named,
    nanosecond if_tsresol), an EPB per packet (interface id, time_ns, frame)."""
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    for name in names:
        opts = _option(9, b"\x09") + (_option(2, name.encode()) if name else b"")
        out += _block(1, struct.pack("<HHI", lt, 0, 0) + opts + _option(0, b""))
    for if_id, t, frame in packets:
        head = struct.pack("<IIIII", if_id, t >> 32, t & 0xFFFFFFFF, len(frame), len(frame))
        out += _block(6, head + frame)
    return out


def _roce_capture(path: Path, cycles: int = 12) -> Path:
    """A RoCEv2 job: 1 s steps, 0.3 s of each at 20 MB/s (about 1.4 MB of pcap)."""
    bursts = np.array([(k + 0.0, k + 0.3, 20e6) for k in range(cycles)])
    write_roce_pcap(path, bursts, np.empty((0, 3)), start_time_s=T0_NS / 1e9)
    return path


def _same(got: Capture, want: Capture) -> None:
    assert got.stats.packets == want.stats.packets
    assert got.stats.bytes == want.stats.bytes
    assert got.length.tolist() == want.length.tolist()
    assert got.is_tx.tolist() == want.is_tx.tolist()
    np.testing.assert_array_equal(got.time_s, want.time_s)


# --- compressed captures ------------------------------------------------------------------

PACK = {
    "gzip": lambda b: gzip.compress(b, compresslevel=1),
    "bzip2": lambda b: bz2.compress(b, compresslevel=1),  # 100 kB blocks: a cut keeps some
    "xz": lambda b: lzma.compress(b, preset=0),
}


@pytest.mark.parametrize("compression", sorted(PACK))
def test_a_compressed_capture_reads_as_the_plain_one(tmp_path: Path, compression: str) -> None:
    """The README promises gzip, bzip2 and xz inputs; bzip2 and xz captures were refused as
    "not a pcap or pcapng file (magic 425a6839...)"."""
    plain = _roce_capture(tmp_path / "c.pcap")
    data = plain.read_bytes()
    packed = tmp_path / "c.pcap.packed"  # told by its leading bytes, not its name
    packed.write_bytes(PACK[compression](data))
    want = read_capture(plain)
    got = read_capture(packed)
    _same(got, want)
    assert got.stats.warnings == want.stats.warnings

    # A cut download: what the stream held is read, and a warning says so.
    cut = tmp_path / "cut"
    cut.write_bytes(packed.read_bytes()[: packed.stat().st_size * 2 // 3])
    part = read_capture(cut)
    assert 0 < part.stats.packets < want.stats.packets
    assert part.length.tolist() == want.length[: part.stats.packets].tolist()
    assert any(f"the {compression} stream ends early" in w for w in part.stats.warnings)

    # Streams concatenated (pbzip2, `cat a.gz b.gz`): all of them are read.
    half = len(data) // 2
    joined = tmp_path / "joined"
    joined.write_bytes(PACK[compression](data[:half]) + PACK[compression](data[half:]))
    _same(read_capture(joined), want)


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (b"BZh9" + b"\xff" * 60, "bzip2-compressed, but it does not inflate"),
        (b"\xfd7zXZ\x00" + b"\xff" * 60, "xz-compressed, but it does not inflate"),
        (b"\x1f\x8b" + b"\xff" * 60, "gzip-compressed, but it does not inflate"),
        (b"\x28\xb5\x2f\xfd" + b"\x00" * 60, r"zstd-compressed: decompress it first \(zstd -d\)"),
    ],
)
def test_a_capture_that_does_not_inflate_is_named_so(
    tmp_path: Path, head: bytes, message: str
) -> None:
    bad = tmp_path / "bad.pcap.x"
    bad.write_bytes(head)
    with pytest.raises(InputFormatError, match=message):
        read_capture(bad)


# --- several interfaces in one pcapng -----------------------------------------------------


def _eth_frames(n: int) -> list[bytes]:
    frame = bytes(Ether(src=OURS, dst=PEER) / IP(src="10.0.0.1", dst="10.0.0.2")
                  / UDP(sport=40000, dport=4789) / Raw(b"\x00" * 1000))  # fmt: skip
    return [frame] * n


def test_a_pcapng_of_several_interfaces_names_them_and_warns_of_double_counting() -> None:
    """`dumpcap -i ve0 -i vx0` (a VXLAN over its veth) records every byte on both: B read
    twice the traffic's with no warning, where the same frames from `-i any` had one."""
    frames = _eth_frames(20)
    packets = [(i % 2, T0_NS + i * 1000, f) for i, f in enumerate(frames)]
    cap = parse_capture(_pcapng(["ve0", "vx0"], packets))
    (warning,) = [w for w in cap.stats.warnings if "interfaces" in w]
    assert warning.startswith("frames of 2 interfaces (ve0, vx0) are summed")
    assert "counted on each interface it crosses" in warning
    # An interface without an if_name is named by its number.
    cap = parse_capture(_pcapng(["ve0", None], packets))
    assert any("(ve0, interface #1)" in w for w in cap.stats.warnings)


def test_a_pcapng_whose_frames_are_all_on_one_interface_has_no_such_warning() -> None:
    # Two interfaces declared (dumpcap lists them), the frames all on the second.
    packets = [(1, T0_NS + i * 1000, f) for i, f in enumerate(_eth_frames(20))]
    cap = parse_capture(_pcapng(["ve0", "vx0"], packets))
    assert not any("interfaces" in w for w in cap.stats.warnings)
    assert cap.stats.packets == 20


# --- Linux cooked captures (`tcpdump -i any`) ---------------------------------------------

ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_NONE = 1, 32, 0xFFFE


def _ip_packets() -> list[bytes]:
    """A TCP exchange: data segments and 66-byte pure ACKs (52 bytes of IP)."""
    data = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=40000, dport=5201) / Raw(b"x" * 1448)
    ack = IP(src="10.0.0.2", dst="10.0.0.1") / TCP(sport=5201, dport=40000, options=[
        ("NOP", None), ("NOP", None), ("Timestamp", (1, 2))])  # fmt: skip
    return [bytes(data), bytes(ack)] * 10


def _cooked(ip: bytes, *, v2: bool, hatype: int, outgoing: bool) -> bytes:
    addr = bytes.fromhex(OURS.replace(":", "") if outgoing else PEER.replace(":", "")) + bytes(2)
    pkttype = 4 if outgoing else 0
    head: Packet
    if v2:
        head = CookedLinuxV2(proto=0x0800, ifindex=3, lladdrtype=hatype, pkttype=pkttype,
                             lladdrlen=6, src=addr)  # fmt: skip
    else:
        head = CookedLinux(pkttype=pkttype, lladdrtype=hatype, lladdrlen=6, src=addr, proto=0x0800)
    return bytes(head) + ip


@pytest.mark.parametrize(("v2", "linktype"), [(False, 113), (True, 276)])
def test_a_cooked_capture_counts_the_wire_bytes_of_the_ethernet_capture(
    v2: bool, linktype: int
) -> None:
    """libpcap's original length of a cooked frame holds its 16-byte (SLL) or 20-byte (SLL2)
    header in place of the 14-byte Ethernet one: every frame read 2 or 6 bytes long (+9 % on
    a 66-byte ACK). The same exchange captured on the NIC and with `-i any` now reads alike."""
    ips = _ip_packets()
    out = [i % 2 == 0 for i in range(len(ips))]
    eth = [bytes(Ether(src=OURS if o else PEER, dst=PEER if o else OURS, type=0x0800)) + ip
           for ip, o in zip(ips, out, strict=True)]  # fmt: skip
    cooked = [_cooked(ip, v2=v2, hatype=ARPHRD_ETHER, outgoing=o)
              for ip, o in zip(ips, out, strict=True)]  # fmt: skip
    times = [T0_NS + 1000 * i for i in range(len(ips))]
    on_nic = parse_capture(_pcap([(t, f[:96], len(f)) for t, f in zip(times, eth, strict=True)]))
    on_any = parse_capture(
        _pcap([(t, f[:96], len(f)) for t, f in zip(times, cooked, strict=True)], linktype)
    )
    assert on_any.length.tolist() == on_nic.length.tolist()
    assert on_any.length[1] == 66  # the ACK
    assert on_any.stats.bytes == on_nic.stats.bytes == sum(len(f) for f in eth)
    assert on_any.stats.tcp_bytes == on_nic.stats.tcp_bytes
    assert on_any.is_tx.tolist() == out


@pytest.mark.parametrize("hatype", [ARPHRD_NONE, ARPHRD_INFINIBAND])
@pytest.mark.parametrize(("v2", "linktype"), [(False, 113), (True, 276)])
def test_a_cooked_frame_of_a_device_without_ethernet_counts_its_ip_bytes(
    v2: bool, linktype: int, hatype: int
) -> None:
    """A tun device or IPoIB has no 14-byte link header: the cooked header was 16 or 20 bytes
    over the packet itself."""
    ips = _ip_packets()
    frames = [_cooked(ip, v2=v2, hatype=hatype, outgoing=True) for ip in ips]
    cap = parse_capture(_pcap([(T0_NS + i, f, len(f)) for i, f in enumerate(frames)], linktype))
    assert cap.length.tolist() == [len(ip) for ip in ips]


def test_cooked_and_ethernet_interfaces_of_one_pcapng_each_count_their_own_way() -> None:
    ip = _ip_packets()[0]
    eth = bytes(Ether(src=OURS, dst=PEER, type=0x0800)) + ip
    sll2 = _cooked(ip, v2=True, hatype=ARPHRD_ETHER, outgoing=True)
    raw = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    raw += _block(1, struct.pack("<HHI", 1, 0, 0)) + _block(1, struct.pack("<HHI", 276, 0, 0))
    for k, (if_id, frame) in enumerate([(0, eth), (1, sll2)]):
        raw += _block(6, struct.pack("<IIIII", if_id, 0, k, len(frame), len(frame)) + frame)
    assert parse_capture(raw).length.tolist() == [len(eth), len(eth)]


# --- a frame stamped far from the others ---------------------------------------------------


def _stamped(times: list[int]) -> Capture:
    frame = _eth_frames(1)[0]
    return parse_capture(_pcap([(t, frame, len(frame)) for t in times]))


def test_a_frame_stamped_in_1970_among_frames_of_2025_is_left_out_of_the_time_series() -> None:
    times = [0] + [T0_NS + i * 10**6 for i in range(100)]
    cap = _stamped(times)
    assert cap.stats.first_time_s == pytest.approx(T0_NS / 1e9)
    assert np.isnan(cap.time_s[0])
    assert np.isfinite(cap.time_s[1:]).all()
    assert cap.stats.packets == 101  # it was on the wire
    (warning,) = [w for w in cap.stats.warnings if "stamped far" in w]
    assert warning.startswith("1 frame stamped far from the others left out")
    assert "frame 1, at 1970-01-01 00:00:00 UTC" in warning
    assert "before the median frame" in warning


def test_frames_a_day_and_more_after_the_rest_are_left_out_and_counted() -> None:
    times = [T0_NS + i * 10**6 for i in range(50)] + [T0_NS + 3 * DAY_NS, T0_NS + 4 * DAY_NS]
    cap = _stamped(times)
    assert cap.stats.last_time_s == pytest.approx((T0_NS + 49 * 10**6) / 1e9)
    (warning,) = [w for w in cap.stats.warnings if "stamped far" in w]
    assert warning.startswith("2 frames stamped far")
    assert "frame 51," in warning
    assert "3 days after the median frame" in warning


def test_a_capture_that_runs_for_days_keeps_every_frame() -> None:
    # A frame an hour for four days: no gap a day long, so no frame is astray.
    cap = _stamped([T0_NS + h * 3600 * 10**9 for h in range(96)])
    assert np.isfinite(cap.time_s).all()
    assert not any("stamped far" in w for w in cap.stats.warnings)
    # Nor are old captures (all before 2000), nor two frames a year apart: no majority.
    assert np.isfinite(_stamped([i * 10**6 for i in range(10)]).time_s).all()
    assert np.isfinite(_stamped([0, T0_NS]).time_s).all()


def _analyze(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["analyze", "--pcap", str(path), "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_a_stray_1970_frame_no_longer_makes_the_job_read_as_idle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One frame at t=0 before frames of 2025 made the bins 10000 s wide: no T, no B."""
    data = _roce_capture(tmp_path / "job.pcap").read_bytes()
    (caplen,) = struct.unpack_from("<I", data, 24 + 8)
    first = data[24 + 16 : 24 + 16 + caplen]
    stray = tmp_path / "stray.pcap"
    stray.write_bytes(data[:24] + struct.pack("<IIII", 0, 0, caplen, 4154) + first + data[24:])
    out = _analyze(capsys, stray)
    assert out["period_s"] == pytest.approx(1.0, rel=0.005)
    assert out["burst_bandwidth_bytes_per_s"] == pytest.approx(20e6, rel=0.1)
    assert out["capture"]["bin_s"] <= 0.01
    assert any("1 frame stamped far from the others" in w for w in out["warnings"])
