"""Tests of collectors.pcap: the frame decoder, the pcap/pcapng readers and the binning.

Frames are built with scapy (RoCEv2 frames carry a valid ICRC); files are written with scapy's
own writers where it has them and by hand (struct, per the pcap/pcapng specs) for the variants
it cannot write (nanosecond and big-endian pcap, if_tsresol, SPB/OPB, several sections).
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import BTH, cnp
from scapy.layers.inet import IP, TCP, UDP, IPOption_NOP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.packet import Packet, Raw
from scapy.utils import EDecimal, wrpcap, wrpcapng

import collectors.pcap as pcap_mod
from agent.errors import InputFormatError
from collectors.pcap import (
    Capture,
    CaptureStats,
    bin_bytes,
    decode_frame,
    parse_capture,
    read_capture,
)

LOCAL_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:00:02"
OTHER_MAC = "02:00:00:00:00:03"
L4, P4, Q4 = "10.0.0.1", "10.0.0.2", "10.0.0.3"
L6, P6 = "fd00::1", "fd00::2"
T0_NS = 1_700_000_000_123_456_789


def roce4(
    src: str = L4,
    dst: str = P4,
    *,
    sport: int = 50000,
    qp: int = 0x11,
    psn: int = 0,
    opcode: int = 4,
    payload: int = 256,
    tx: bool = True,
) -> Packet:
    smac, dmac = (LOCAL_MAC, PEER_MAC) if tx else (PEER_MAC, LOCAL_MAC)
    return (
        Ether(src=smac, dst=dmac)
        / IP(src=src, dst=dst)
        / UDP(sport=sport, dport=4791, chksum=0)
        / BTH(opcode=opcode, dqpn=qp, psn=psn)
        / Raw(b"\x00" * payload)
    )


def cnp4(qp: int = 0x33) -> Packet:
    return (
        Ether(src=PEER_MAC, dst=LOCAL_MAC)
        / IP(src=P4, dst=L4)
        / UDP(sport=50002, dport=4791, chksum=0)
        / cnp(qp)
    )


def tcp4(
    src: str, dst: str, sport: int, dport: int, *, payload: int = 100, tx: bool = True
) -> Packet:
    smac, dmac = (LOCAL_MAC, PEER_MAC) if tx else (PEER_MAC, LOCAL_MAC)
    return (
        Ether(src=smac, dst=dmac)
        / IP(src=src, dst=dst)
        / TCP(sport=sport, dport=dport)
        / Raw(b"x" * payload)
    )


# --- writers for the variants scapy cannot write ------------------------------------------


def pcap_bytes(
    records: list[tuple[int, bytes, int]],
    *,
    nano: bool = True,
    endian: str = "<",
    linktype: int = 1,
    snaplen: int = 65535,
) -> bytes:
    """A classic pcap: records are (time_ns, captured bytes, original length)."""
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = bytearray(struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
    for t_ns, data, orig in records:
        sec, frac = divmod(t_ns, 1_000_000_000)
        if not nano:
            frac //= 1000
        out += struct.pack(endian + "IIII", sec, frac, len(data), orig) + data
    return bytes(out)


def _pad4(b: bytes) -> bytes:
    return b + b"\x00" * (-len(b) % 4)


def ng_block(btype: int, body: bytes, endian: str = "<") -> bytes:
    body = _pad4(body)
    n = 12 + len(body)
    return struct.pack(endian + "II", btype, n) + body + struct.pack(endian + "I", n)


def ng_shb(endian: str = "<") -> bytes:
    return ng_block(0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1), endian)


def ng_idb(
    linktype: int = 1,
    snaplen: int = 0,
    tsresol: int | None = None,
    tsoffset: int | None = None,
    endian: str = "<",
) -> bytes:
    body = struct.pack(endian + "HHI", linktype, 0, snaplen)
    if tsresol is not None:
        body += struct.pack(endian + "HH", 9, 1) + _pad4(bytes([tsresol]))
    if tsoffset is not None:
        body += struct.pack(endian + "HHq", 14, 8, tsoffset)
    if tsresol is not None or tsoffset is not None:
        body += struct.pack(endian + "HH", 0, 0)
    return ng_block(1, body, endian)


def ng_epb(if_id: int, ts: int, data: bytes, orig: int, endian: str = "<") -> bytes:
    body = struct.pack(endian + "IIIII", if_id, ts >> 32, ts & 0xFFFFFFFF, len(data), orig)
    return ng_block(6, body + _pad4(data), endian)


def ng_opb(if_id: int, ts: int, data: bytes, orig: int, endian: str = "<") -> bytes:
    body = struct.pack(endian + "HHIIII", if_id, 0, ts >> 32, ts & 0xFFFFFFFF, len(data), orig)
    return ng_block(2, body + _pad4(data), endian)


def ng_spb(data: bytes, orig: int, endian: str = "<") -> bytes:
    return ng_block(3, struct.pack(endian + "I", orig) + data, endian)


# --- decode_frame -----------------------------------------------------------------------


def test_exports() -> None:
    assert sorted(pcap_mod.__all__) == sorted(
        [
            "Capture",
            "CaptureStats",
            "FrameInfo",
            "bin_bytes",
            "decode_frame",
            "parse_capture",
            "read_capture",
        ]
    )
    for name in pcap_mod.__all__:
        assert hasattr(pcap_mod, name)


def test_decode_roce_ipv4() -> None:
    frame = bytes(roce4(qp=0xABCDEF, psn=0x123456, opcode=7))
    info = decode_frame(frame)
    assert info is not None
    assert info.src_mac == bytes.fromhex("020000000001")
    assert info.dst_mac == bytes.fromhex("020000000002")
    assert (info.ethertype, info.vlan, info.ip_version) == (0x0800, None, 4)
    assert (info.src_ip, info.dst_ip, info.proto) == (L4, P4, 17)
    assert (info.src_port, info.dst_port) == (50000, 4791)
    assert info.roce
    assert not info.cnp
    assert (info.bth_opcode, info.dest_qp, info.psn) == (7, 0xABCDEF, 0x123456)
    # The scapy frame carries a valid ICRC (sanity of the fixture itself).
    rebuilt = Ether(frame)
    rebuilt[BTH].icrc = None
    assert bytes(rebuilt) == frame


def test_decode_cnp() -> None:
    info = decode_frame(bytes(cnp4(0x33)))
    assert info is not None
    assert info.roce
    assert info.cnp
    assert (info.bth_opcode, info.dest_qp) == (0x81, 0x33)
    assert (info.src_ip, info.dst_ip) == (P4, L4)


def test_decode_vlan_and_qinq() -> None:
    vlan = Ether(src=LOCAL_MAC, dst=PEER_MAC) / Dot1Q(vlan=100) / roce4()[IP]
    info = decode_frame(bytes(vlan))
    assert info is not None
    assert (info.ethertype, info.vlan, info.roce, info.dest_qp) == (0x0800, 100, True, 0x11)

    qinq = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC, type=0x88A8)
        / Dot1AD(vlan=10)
        / Dot1Q(vlan=20)
        / IP(src=L4, dst=P4)
        / TCP(sport=1234, dport=80)
    )
    info = decode_frame(bytes(qinq))
    assert info is not None
    assert (info.ethertype, info.vlan) == (0x0800, 20)  # the inner (customer) tag
    assert (info.proto, info.src_port, info.dst_port, info.roce) == (6, 1234, 80, False)

    old_qinq = bytes(qinq)[:12] + b"\x91\x00" + bytes(qinq)[14:]  # pre-standard 0x9100 TPID
    info = decode_frame(old_qinq)
    assert info is not None
    assert (info.vlan, info.dst_port) == (20, 80)


def test_decode_ipv6_roce_and_extension_headers() -> None:
    frame = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / IPv6(src=L6, dst=P6)
        / UDP(sport=49999, dport=4791, chksum=0)
        / BTH(opcode=10, dqpn=0x42, psn=9)
        / Raw(b"\x00" * 64)
    )
    raw = bytes(frame)
    rebuilt = Ether(raw)
    rebuilt[BTH].icrc = None
    assert bytes(rebuilt) == raw  # valid ICRC over IPv6
    info = decode_frame(raw)
    assert info is not None
    assert (info.ethertype, info.ip_version, info.src_ip, info.dst_ip) == (0x86DD, 6, L6, P6)
    assert (info.proto, info.roce, info.bth_opcode, info.dest_qp, info.psn) == (
        17,
        True,
        10,
        0x42,
        9,
    )

    ext = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / IPv6(src=L6, dst=P6)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / TCP(sport=5555, dport=443)
    )
    info = decode_frame(bytes(ext))
    assert info is not None
    assert (info.proto, info.src_port, info.dst_port) == (6, 5555, 443)

    first = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / IPv6(src=L6, dst=P6)
        / IPv6ExtHdrFragment(offset=0, m=1)
        / UDP(sport=1, dport=2)
    )
    info = decode_frame(bytes(first))
    assert info is not None
    assert (info.proto, info.src_port, info.dst_port) == (17, 1, 2)
    later = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / IPv6(src=L6, dst=P6)
        / IPv6ExtHdrFragment(offset=100, nh=17)
        / Raw(b"\x01" * 40)
    )
    info = decode_frame(bytes(later))
    assert info is not None
    assert (info.proto, info.src_port, info.dst_port, info.roce) == (17, None, None, False)


def test_decode_ipv4_options_and_fragments() -> None:
    opts = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / IP(src=L4, dst=P4, options=[IPOption_NOP()] * 4)
        / TCP(sport=7, dport=8)
    )
    info = decode_frame(bytes(opts))
    assert info is not None
    assert (info.src_port, info.dst_port) == (7, 8)
    frag = (
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / IP(src=L4, dst=P4, proto=17, frag=10)
        / Raw(b"\x12\xb7" * 20)
    )
    info = decode_frame(bytes(frag))
    assert info is not None
    assert (info.proto, info.src_port, info.roce) == (17, None, False)


def test_decode_non_ip_and_runts() -> None:
    info = decode_frame(
        bytes(
            Ether(src=LOCAL_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(hwsrc=LOCAL_MAC, psrc=L4, pdst=P4)
        )
    )
    assert info is not None
    assert (info.ethertype, info.ip_version, info.proto, info.roce) == (0x0806, None, None, False)
    assert decode_frame(b"") is None
    assert decode_frame(b"\x00" * 13) is None
    frame = bytes(roce4())
    # Every cut inside the IP/UDP/BTH headers makes the frame undecodable, never an error.
    for cut in range(14, 14 + 20 + 8 + 12):
        assert decode_frame(frame[:cut]) is None, cut
    assert decode_frame(frame[: 14 + 20 + 8 + 12]) is not None  # BTH complete: enough
    # A wrong IP version nibble or IHL below 5 is malformed.
    bad = bytearray(frame)
    bad[14] = 0x44
    assert decode_frame(bytes(bad)) is None


def test_decode_other_link_types() -> None:
    ip_frame = bytes(roce4()[IP])
    info = decode_frame(ip_frame, link_type=101)
    assert info is not None
    assert (info.src_mac, info.ethertype, info.roce, info.dest_qp) == (b"", 0x0800, True, 0x11)
    v6 = bytes(IPv6(src=L6, dst=P6) / TCP(sport=1, dport=2))
    info = decode_frame(v6, link_type=229)
    assert info is not None
    assert (info.ethertype, info.ip_version, info.dst_port) == (0x86DD, 6, 2)

    sll = CookedLinux(pkttype=4, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x01\x00\x00")
    info = decode_frame(bytes(sll / roce4()[IP]), link_type=113)
    assert info is not None
    assert (info.src_mac, info.dst_mac, info.roce) == (bytes.fromhex("020000000001"), b"", True)
    sll2 = CookedLinuxV2(
        proto=0x0800, pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x02\x00\x00"
    )
    info = decode_frame(bytes(sll2 / roce4()[IP]), link_type=276)
    assert info is not None
    assert (info.src_mac, info.roce, info.dest_qp) == (bytes.fromhex("020000000002"), True, 0x11)

    assert decode_frame(bytes(roce4()), link_type=147) is None  # a user DLT: undecodable
    assert decode_frame(b"\x50" + ip_frame[1:], link_type=101) is None  # version 5


@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=128), link_type=st.sampled_from([1, 101, 113, 228, 229, 276, 0]))
def test_decode_never_raises(buf: bytes, link_type: int) -> None:
    decode_frame(buf, link_type)


MUTATION_FRAMES = [
    bytes(roce4()),
    bytes(
        Ether(src=LOCAL_MAC, dst=PEER_MAC)
        / Dot1Q(vlan=5)
        / IPv6(src=L6, dst=P6)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrFragment()
        / TCP()
    ),
]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_decode_mutated_headers_never_raise(data: st.DataObject) -> None:
    frame = bytearray(data.draw(st.sampled_from(MUTATION_FRAMES)))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    decode_frame(bytes(frame[:cut]))


# --- a mixed capture with exact totals ------------------------------------------------------


def mixed_frames() -> list[tuple[bytes, int]]:
    """(captured bytes, original length) of a capture whose totals the tests know exactly.

    Flows (5-tuples): roce 50000->4791 (QP 0x11, 3 frames), roce 50001->4791 (QP 0x22),
    CNP 50002->4791 (to L4, QP 0x33), VLAN roce 50003 (QP 0x11 on P4: same QP key as the
    first), IPv6 roce (QP 0x44), IPv6 TCP 5555->443, TCP 40000->80 and back, QinQ TCP
    1234->80, and one TSO frame of 20000 bytes on the 40000->80 flow. Plus an ARP, a runt.
    """
    jumbo = bytes(tcp4(L4, P4, 40000, 80, payload=20000 - 54))
    assert len(jumbo) == 20000
    frames = [
        bytes(roce4(psn=1)),
        bytes(roce4(psn=2)),
        bytes(roce4(psn=3)),
        bytes(roce4(sport=50001, qp=0x22)),
        bytes(cnp4(0x33)),
        bytes(Ether(src=LOCAL_MAC, dst=PEER_MAC) / Dot1Q(vlan=7) / roce4(sport=50003)[IP]),
        bytes(
            Ether(src=PEER_MAC, dst=LOCAL_MAC)
            / IPv6(src=P6, dst=L6)
            / UDP(sport=49999, dport=4791, chksum=0)
            / BTH(opcode=4, dqpn=0x44)
            / Raw(b"\x00" * 32)
        ),
        bytes(
            Ether(src=LOCAL_MAC, dst=PEER_MAC) / IPv6(src=L6, dst=P6) / TCP(sport=5555, dport=443)
        ),
        bytes(tcp4(L4, P4, 40000, 80)),
        bytes(tcp4(P4, L4, 80, 40000, payload=1400, tx=False)),
        bytes(
            Ether(src=OTHER_MAC, dst=LOCAL_MAC, type=0x88A8)
            / Dot1AD(vlan=10)
            / Dot1Q(vlan=20)
            / IP(src=Q4, dst=L4)
            / TCP(sport=1234, dport=80)
        ),
        bytes(
            Ether(src=LOCAL_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(hwsrc=LOCAL_MAC, psrc=L4, pdst=P4)
        ),
        b"\x02\x00\x00\x00\x00\x01\x02",  # runt: 7 bytes
    ]
    out = [(f, len(f)) for f in frames]
    out.insert(9, (jumbo[:128], len(jumbo)))  # TSO frame cut at a 128-byte snaplen
    return out


MIXED_FLOWS = 9  # 4 RoCE (incl. CNP and VLAN) + IPv6 RoCE + IPv6 TCP + TCP x2 + QinQ TCP
MIXED_QPS = 4  # (P4, 0x11), (P4, 0x22), (L4, 0x33), (L6, 0x44)


def check_mixed(cap: Capture, frames: list[tuple[bytes, int]], *, exact_ns: bool) -> None:
    s = cap.stats
    origs = [orig for _, orig in frames]
    assert s.packets == len(frames) == 14
    assert s.bytes == sum(origs)
    assert cap.length.tolist() == origs
    assert s.roce_packets == 7
    assert s.cnp_packets == 1
    assert s.roce_qps == MIXED_QPS
    assert s.flows == MIXED_FLOWS
    tcp_idx = [7, 8, 9, 10, 11]
    udp_idx = [0, 1, 2, 3, 4, 5, 6]
    assert s.tcp_bytes == sum(origs[i] for i in tcp_idx)
    assert s.udp_bytes == sum(origs[i] for i in udp_idx)
    assert s.skipped_records == 1  # the runt
    assert not s.truncated
    assert s.local_mac == LOCAL_MAC
    assert s.link_type == 1
    tx = [
        True, True, True, True, False, True, False, True, True, True, False, False, True, False
    ]  # fmt: skip
    assert cap.is_tx.tolist() == tx
    assert cap.time_ns is not None
    expected_ns = [T0_NS + i * 1_000_001 for i in range(len(frames))]
    if exact_ns:
        assert cap.time_ns.tolist() == expected_ns
    else:  # microsecond files
        assert cap.time_ns.tolist() == [t // 1000 * 1000 for t in expected_ns]
    np.testing.assert_allclose(cap.time_s, np.array(expected_ns) / 1e9, rtol=0, atol=2e-6)
    assert s.first_time_s == pytest.approx(T0_NS / 1e9, abs=2e-6)
    assert s.last_time_s == pytest.approx(expected_ns[-1] / 1e9, abs=2e-6)


@pytest.mark.parametrize(("nano", "endian"), [(True, "<"), (True, ">"), (False, ">")])
def test_pcap_variants_exact_totals(tmp_path: Path, nano: bool, endian: str) -> None:
    frames = mixed_frames()
    recs = [(T0_NS + i * 1_000_001, data, orig) for i, (data, orig) in enumerate(frames)]
    path = tmp_path / "mixed.pcap"
    path.write_bytes(pcap_bytes(recs, nano=nano, endian=endian, snaplen=128))
    cap = read_capture(path)
    check_mixed(cap, frames, exact_ns=nano)
    assert any("could not be decoded" in w for w in cap.stats.warnings)


def test_pcap_written_by_scapy(tmp_path: Path) -> None:
    frames = mixed_frames()
    pkts = []
    for i, (data, orig) in enumerate(frames):
        p = Raw(data) if len(data) < 14 else Ether(data)
        p.time = EDecimal((T0_NS + i * 1_000_001) // 1000) / EDecimal(1_000_000)
        p.wirelen = orig
        pkts.append(p)
    path = tmp_path / "scapy.pcap"
    wrpcap(str(path), pkts, linktype=1)
    check_mixed(read_capture(path), frames, exact_ns=False)


def test_pcapng_written_by_scapy(tmp_path: Path) -> None:
    frames = [(d, o) for d, o in mixed_frames() if len(d) == o]  # scapy writes whole frames
    pkts = []
    for data, _ in frames:
        p = Raw(data) if len(data) < 14 else Ether(data)
        p.time = 1_700_000_000.5
        pkts.append(p)
    path = tmp_path / "scapy.pcapng"
    wrpcapng(str(path), pkts)
    cap = read_capture(path)
    assert cap.stats.packets == len(frames)
    assert cap.stats.bytes == sum(o for _, o in frames)
    assert cap.stats.roce_packets == 7
    assert cap.stats.link_type == 1
    assert cap.stats.first_time_s == pytest.approx(1_700_000_000.5, abs=1e-6)


def test_pcapng_by_hand_tsresol_sections_and_block_types(tmp_path: Path) -> None:
    frames = mixed_frames()
    blocks = [ng_shb(), ng_idb(snaplen=128, tsresol=9)]
    blocks.append(ng_block(0x0BAD, b"custom block, skipped"))  # unknown block types are skipped
    for i, (data, orig) in enumerate(frames[:10]):
        blocks.append(ng_epb(0, T0_NS + i * 1_000_001, data, orig))
    blocks.append(ng_block(5, b"\x00" * 20))  # interface statistics block: skipped
    # Second section, big-endian: interface 0 there is a new one (2^-20 s units, +100 s).
    blocks += [ng_shb(">"), ng_idb(snaplen=65535, tsresol=0x80 | 20, tsoffset=100, endian=">")]
    units = 1_700_000_000 * 2**20 + 3  # 3 units of 2^-20 s past the second
    data, orig = frames[10]
    blocks.append(ng_epb(0, units, data, orig, endian=">"))
    data, orig = frames[11]
    blocks.append(ng_opb(0, units + 1, data, orig, endian=">"))
    data, orig = frames[12]
    blocks.append(ng_spb(data, orig, endian=">"))  # no time: takes the previous frame's
    data, orig = frames[13]
    blocks.append(ng_epb(0, units + 2, data, orig, endian=">"))
    path = tmp_path / "hand.pcapng"
    path.write_bytes(b"".join(blocks))
    cap = read_capture(path)
    s = cap.stats
    assert s.packets == 14
    assert s.bytes == sum(o for _, o in frames)
    assert (s.roce_packets, s.cnp_packets, s.roce_qps, s.flows) == (7, 1, MIXED_QPS, MIXED_FLOWS)
    assert s.skipped_records == 1
    assert s.link_type == 1
    assert s.local_mac == LOCAL_MAC
    assert cap.time_ns is not None
    second_base = (1_700_000_000 + 100) * 1_000_000_000
    assert cap.time_ns.tolist() == [T0_NS + i * 1_000_001 for i in range(10)] + [
        second_base + 3 * 10**9 // 2**20,
        second_base + 4 * 10**9 // 2**20,
        second_base + 4 * 10**9 // 2**20,
        second_base + 5 * 10**9 // 2**20,
    ]


def test_pcapng_spb_before_any_time_is_nan(tmp_path: Path) -> None:
    data = bytes(roce4())
    raw = (
        ng_shb()
        + ng_idb(snaplen=64)
        + ng_spb(data, len(data))
        + ng_epb(0, 5_000_000, data, len(data))
    )
    cap = parse_capture(raw)
    assert cap.stats.packets == 2
    assert cap.stats.bytes == 2 * len(data)
    assert np.isnan(cap.time_s[0])
    assert cap.time_s[1] == pytest.approx(5.0)  # default resolution: microseconds
    assert cap.stats.first_time_s == pytest.approx(5.0)
    assert any("simple packet blocks" in w for w in cap.stats.warnings)
    assert cap.stats.roce_packets == 2  # SPB cut to the interface snaplen (64) still decodes


def test_snaplen_truncated_capture_counts_original_lengths() -> None:
    frames = [bytes(roce4(payload=4096, psn=i)) for i in range(5)]
    orig = len(frames[0])
    recs = [(T0_NS + i, f[:64], orig) for i, f in enumerate(frames)]
    cap = parse_capture(pcap_bytes(recs, snaplen=64))
    assert cap.stats.bytes == 5 * orig == 5 * (14 + 20 + 8 + 12 + 4096 + 4)
    assert cap.stats.roce_packets == 5
    assert cap.stats.skipped_records == 0
    # Cut inside the UDP header: undecodable, but still counted by original length.
    cap = parse_capture(pcap_bytes([(T0_NS, f[:40], orig) for f in frames], snaplen=40))
    assert (cap.stats.packets, cap.stats.bytes, cap.stats.skipped_records) == (5, 5 * orig, 5)
    assert (cap.stats.roce_packets, cap.stats.udp_bytes, cap.stats.flows) == (0, 0, 0)
    assert cap.stats.local_mac == LOCAL_MAC  # the MACs of undecodable frames still count
    assert cap.is_tx.all()


def test_caplen_above_orig_len_counts_captured_length() -> None:
    frame = bytes(roce4())
    cap = parse_capture(pcap_bytes([(T0_NS, frame, 10)]))
    assert cap.stats.bytes == len(frame)
    assert any("above their original length" in w for w in cap.stats.warnings)


def test_cooked_and_raw_link_types() -> None:
    tx = bytes(
        CookedLinux(pkttype=4, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x01\x00\x00")
        / roce4()[IP]
    )
    rx = bytes(
        CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x02\x00\x00")
        / cnp4()[IP]
    )
    cap = parse_capture(
        pcap_bytes([(1, tx, len(tx)), (2, tx, len(tx)), (3, rx, len(rx))], linktype=113)
    )
    assert cap.stats.link_type == 113
    assert cap.stats.local_mac == LOCAL_MAC
    assert cap.is_tx.tolist() == [True, True, False]
    assert (cap.stats.roce_packets, cap.stats.cnp_packets) == (3, 1)

    ip = bytes(roce4()[IP])
    cap = parse_capture(pcap_bytes([(1, ip, len(ip))], linktype=101))
    assert (cap.stats.roce_packets, cap.stats.local_mac) == (1, None)
    assert cap.is_tx.tolist() == [False]

    cap = parse_capture(pcap_bytes([(1, ip, len(ip))], linktype=147))
    assert (cap.stats.packets, cap.stats.bytes, cap.stats.skipped_records) == (1, len(ip), 1)


def test_header_only_and_no_interface_files() -> None:
    cap = parse_capture(pcap_bytes([]))
    assert cap.stats.packets == 0
    assert cap.stats.first_time_s is None
    assert cap.stats.local_mac is None
    assert cap.time_s.dtype == np.float64
    assert cap.time_s.size == 0
    cap = parse_capture(ng_shb())
    assert (cap.stats.packets, cap.stats.link_type) == (0, -1)


# --- error paths -----------------------------------------------------------------------------


def test_empty_file_and_bad_magic(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    with pytest.raises(InputFormatError, match="not a pcap or pcapng"):
        read_capture(empty)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"GIF89a" + b"\x00" * 100)
    with pytest.raises(InputFormatError, match="not a pcap or pcapng") as exc:
        read_capture(bad)
    assert exc.value.path == bad
    with pytest.raises(InputFormatError, match="cannot read"):
        read_capture(tmp_path / "missing.pcap")
    with pytest.raises(InputFormatError, match="file header cut short"):
        parse_capture(pcap_bytes([])[:20])
    with pytest.raises(InputFormatError, match="pcapng section header cut short"):
        parse_capture(ng_shb()[:20])
    with pytest.raises(InputFormatError, match="pcapng section header cut short"):
        parse_capture(ng_shb(">")[:8])


def test_truncated_last_record_keeps_earlier_packets(tmp_path: Path) -> None:
    frame = bytes(roce4())
    full = pcap_bytes([(T0_NS + i, frame, len(frame)) for i in range(3)])
    path = tmp_path / "cut.pcap"
    path.write_bytes(full[:-10])  # the file ends inside record 3's data
    cap = read_capture(path)
    assert cap.stats.truncated
    assert (cap.stats.packets, cap.stats.bytes) == (2, 2 * len(frame))
    assert any("record 3" in w for w in cap.stats.warnings)
    assert cap.time_ns is not None
    assert cap.time_ns.tolist() == [T0_NS, T0_NS + 1]

    cut_header = parse_capture(full[: 24 + 2 * (16 + len(frame)) + 7])  # inside record 3's header
    assert cut_header.stats.truncated
    assert cut_header.stats.packets == 2
    assert any("record 3" in w for w in cut_header.stats.warnings)


def test_corrupt_record_length_is_an_error() -> None:
    frame = bytes(roce4())
    good = pcap_bytes([(T0_NS, frame, len(frame))])
    corrupt = good + struct.pack("<IIII", 1, 0, 300_000, 300_000) + b"\x00" * 16
    with pytest.raises(InputFormatError, match="record 2: captured length") as exc:
        parse_capture(corrupt)
    assert exc.value.line == 2
    huge_orig = good + struct.pack("<IIII", 1, 0, 4, 1 << 30) + b"\x00" * 4
    with pytest.raises(InputFormatError, match="original length") as exc:
        parse_capture(huge_orig)
    assert exc.value.line == 2


def test_pcapng_errors_and_truncation() -> None:
    frame = bytes(roce4())
    head = ng_shb() + ng_idb(tsresol=9)
    epb = ng_epb(0, 1, frame, len(frame))
    bad_len = bytearray(epb)
    struct.pack_into("<I", bad_len, 4, len(epb) - 2)
    with pytest.raises(InputFormatError, match=r"block 3: block length \d+ is invalid") as exc:
        parse_capture(head + bytes(bad_len))
    assert exc.value.line == 3
    bad_trailer = epb[:-4] + struct.pack("<I", len(epb) + 4)
    with pytest.raises(InputFormatError, match="trailing block length"):
        parse_capture(head + bad_trailer)
    with pytest.raises(InputFormatError, match="undeclared interface 1"):
        parse_capture(head + ng_epb(1, 1, frame, len(frame)))
    with pytest.raises(InputFormatError, match="byte-order magic"):
        parse_capture(b"\x0a\x0d\x0d\x0a" + b"\x1c\x00\x00\x00" + b"\x00" * 20)
    cap = parse_capture(head + epb + epb[:-8])
    assert cap.stats.truncated
    assert cap.stats.packets == 1
    assert any("block 4" in w for w in cap.stats.warnings)


def _valid_files() -> list[bytes]:
    frames = mixed_frames()
    recs = [(T0_NS + i, d, o) for i, (d, o) in enumerate(frames[:6])]
    ng = [ng_shb(), ng_idb(tsresol=9, snaplen=128)]
    ng += [ng_epb(0, T0_NS + i, d, o) for i, (d, o) in enumerate(frames[6:])]
    ng += [ng_spb(frames[0][0], frames[0][1])]
    return [pcap_bytes(recs), pcap_bytes(recs, nano=False, endian=">"), b"".join(ng)]


VALID_FILES = _valid_files()


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=512))
def test_random_bytes_raise_only_input_format_error(data: bytes) -> None:
    for prefix in (b"", b"\xd4\xc3\xb2\xa1", b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a"):
        with contextlib.suppress(InputFormatError):
            parse_capture(prefix + data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_files_raise_only_input_format_error(data: st.DataObject) -> None:
    buf = bytearray(data.draw(st.sampled_from(VALID_FILES)))
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "cut"]))
        i = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "flip" and buf:
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[i] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del buf[i : i + data.draw(st.integers(1, 8))]
        elif kind == "cut":
            del buf[i:]
    try:
        cap = parse_capture(bytes(buf))
    except InputFormatError:
        return
    s = cap.stats
    assert s.packets == cap.length.size == cap.time_s.size == cap.is_tx.size
    assert s.bytes == int(cap.length.sum())
    assert s.skipped_records <= s.packets


# --- bin_bytes -------------------------------------------------------------------------------


def _capture(times: list[float], lengths: list[int], tx: list[bool]) -> Capture:
    stats = CaptureStats(
        packets=len(times), bytes=sum(lengths), roce_packets=0, cnp_packets=0, roce_qps=0,
        flows=0, tcp_bytes=0, udp_bytes=0, skipped_records=0, truncated=False,
        first_time_s=None, last_time_s=None, link_type=1, local_mac=None,
    )  # fmt: skip
    return Capture(
        time_s=np.array(times, dtype=np.float64),
        length=np.array(lengths, dtype=np.int64),
        is_tx=np.array(tx, dtype=bool),
        stats=stats,
    )


def test_bin_bytes_splits_by_direction_and_bin() -> None:
    cap = _capture(
        [100.01, 100.05, 100.15, 100.25, 99.9, 100.35, float("nan")],
        [10, 20, 40, 80, 1000, 2000, 5000],
        [True, False, True, False, True, True, False],
    )
    tx, rx = bin_bytes(cap, t0=100.0, bin_s=0.1, n_bins=3)
    assert tx.dtype == np.float64
    assert rx.dtype == np.float64
    assert tx.tolist() == [10.0, 40.0, 0.0]  # 99.9 is before bin 0, 100.35 after bin 2
    assert rx.tolist() == [20.0, 0.0, 80.0]
    tx, rx = bin_bytes(cap, t0=0.0, bin_s=1.0, n_bins=0)
    assert tx.size == rx.size == 0
    with pytest.raises(ValueError, match="bin_s"):
        bin_bytes(cap, t0=0.0, bin_s=0.0, n_bins=3)
    with pytest.raises(ValueError, match="n_bins"):
        bin_bytes(cap, t0=0.0, bin_s=1.0, n_bins=-1)


def test_bin_bytes_exact_on_bin_edges_with_ns_stamps() -> None:
    base = 1_700_000_000_250_000_000
    edges = [base + k * 100_000_000 for k in range(4)]  # exactly on the 0.1 s edges
    frame = bytes(roce4())
    recs = [(t, frame, 1000) for t in edges] + [(edges[1] - 1, frame, 500)]
    cap = parse_capture(pcap_bytes(recs))
    tx, rx = bin_bytes(cap, t0=1_700_000_000.25, bin_s=0.1, n_bins=4)
    assert tx.tolist() == [1500.0, 1000.0, 1000.0, 1000.0]
    assert rx.tolist() == [0.0] * 4
    tx, _ = bin_bytes(cap, t0=1_700_000_000.25, bin_s=0.1 / 3, n_bins=12)  # not whole ns
    assert tx.sum() == 4500.0
    assert tx[0] == 1000.0
    assert tx[2] == 500.0
    assert tx[3] == 1000.0
