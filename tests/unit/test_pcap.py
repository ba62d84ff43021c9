"""Tests of collectors.pcap: the frame decoder, the pcap/pcapng readers and the binning.

Frames are built with scapy (RoCEv2 frames carry a valid ICRC); files are written with scapy's
own writers where it has them and by hand (struct, per the pcap/pcapng specs) for the variants
it cannot write (nanosecond and big-endian pcap, if_tsresol, SPB/OPB, several sections).
"""

from __future__ import annotations

import contextlib
import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import AETH, BTH, cnp
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


def ack4(
    syndrome: int, *, opcode: int = 0x11, qp: int = 0x11, psn: int = 0, msn: int = 0
) -> Packet:
    """An RC ACKNOWLEDGE (or, opcode 0x12, ATOMIC ACKNOWLEDGE) from the peer: BTH + AETH."""
    return (
        Ether(src=PEER_MAC, dst=LOCAL_MAC)
        / IP(src=P4, dst=L4)
        / UDP(sport=50010, dport=4791, chksum=0)
        / BTH(opcode=opcode, dqpn=qp, psn=psn)
        / AETH(syndrome=syndrome, msn=msn)
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
            "ACK_MATCH_WINDOW_NS",
            "AckLatency",
            "AckSamples",
            "Capture",
            "CaptureStats",
            "FrameColumns",
            "FrameInfo",
            "LiveAckMatcher",
            "ack_counts",
            "bin_bytes",
            "decode_columns",
            "decode_frame",
            "merge_ack_samples",
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


def test_decode_aeth_syndrome() -> None:
    for opcode in (0x11, 0x12):
        for syndrome in (0x00, 0x1F, 0x20, 0x3F, 0x40, 0x60, 0x61, 0x62, 0x63, 0x64, 0xFF):
            frame = bytes(ack4(syndrome, opcode=opcode, qp=0x1234, psn=77, msn=5))
            assert len(frame) == 14 + 20 + 8 + 12 + 4 + 4  # ... + AETH + ICRC
            if opcode == 0x11:  # scapy binds AETH after RC ACKNOWLEDGE (not 0x12) itself
                assert Ether(frame)[AETH].syndrome == syndrome
            info = decode_frame(frame)
            assert info is not None
            assert info.roce
            assert not info.cnp
            assert (info.bth_opcode, info.dest_qp, info.psn) == (opcode, 0x1234, 77)
            assert info.aeth_syndrome == syndrome
            # The AETH cut by the snaplen: still a RoCE frame, with no syndrome.
            for cut in range(14 + 20 + 8 + 12, 14 + 20 + 8 + 12 + 4):
                info = decode_frame(frame[:cut])
                assert info is not None
                assert (info.roce, info.bth_opcode, info.aeth_syndrome) == (True, opcode, None)
            whole = decode_frame(frame[: 14 + 20 + 8 + 12 + 4])  # the AETH just captured
            assert whole is not None
            assert whole.aeth_syndrome == syndrome
    # Other opcodes carry no AETH, whatever bytes follow the BTH.
    for frame in (bytes(roce4(opcode=0x10)), bytes(roce4(opcode=0x13)), bytes(cnp4())):
        info = decode_frame(frame)
        assert info is not None
        assert info.roce
        assert info.aeth_syndrome is None
    tcp = decode_frame(bytes(tcp4(L4, P4, 1, 4791)))
    assert tcp is not None
    assert tcp.aeth_syndrome is None


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
@given(
    buf=st.binary(max_size=128),
    link_type=st.sampled_from([1, 101, 113, 228, 229, 276, 197, 247, 0]),
)
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


def test_read_capture_counts_acks_and_naks(tmp_path: Path) -> None:
    """Exact ACK / NAK / sequence-NAK totals from scapy-built frames, the snaplen included."""
    acks = [ack4(0x1F, psn=i) for i in range(5)]  # ACK, credit field 31
    acks += [ack4(0x00, opcode=0x12, qp=0x22), ack4(0x0A)]  # atomic ACK, ACK with 10 credits
    rnr = [ack4(0x20 | 14), ack4(0x3F, opcode=0x12)]  # RNR NAK (timer 14, 31)
    seq = [ack4(0x60, psn=9), ack4(0x60, psn=9, opcode=0x12), ack4(0x60)]  # PSN sequence error
    other_naks = [ack4(0x61), ack4(0x62), ack4(0x63), ack4(0x64)]  # invalid request .. RD
    reserved = [ack4(0x40), ack4(0x5F), ack4(0x80), ack4(0xE0)]  # 010 and 1xx: neither
    plain = [roce4(psn=1), roce4(opcode=0x10, psn=2), cnp4()]  # no AETH: not counted
    # Frames whose opcode says ACK but whose AETH the snaplen cut: RoCE, counted in neither.
    aeth_at = 14 + 20 + 8 + 12
    cut = [(bytes(ack4(0x60))[:aeth_at], 62), (bytes(ack4(0x00))[: aeth_at + 3], 62)]
    pkts = acks + rnr + seq + other_naks + reserved + plain
    frames = [(bytes(p), len(p)) for p in pkts] + cut
    for f in pkts:
        f.time = EDecimal(1_700_000_000)
    wrpcap(str(tmp_path / "acks.pcap"), pkts, linktype=1)
    by_scapy = read_capture(tmp_path / "acks.pcap").stats
    assert (by_scapy.roce_acks, by_scapy.roce_naks, by_scapy.roce_seq_naks) == (7, 9, 3)
    assert by_scapy.roce_packets == len(pkts)

    raw = pcap_bytes([(T0_NS + i, d, o) for i, (d, o) in enumerate(frames)])
    path = tmp_path / "acks_cut.pcap"
    path.write_bytes(raw)
    s = read_capture(path).stats
    assert (s.roce_acks, s.roce_naks, s.roce_seq_naks) == (7, 9, 3)  # the cut two: neither
    assert (s.roce_packets, s.cnp_packets, s.skipped_records) == (len(frames), 1, 0)
    assert_same_outcome(raw)
    # The whole capture at a snaplen that cuts every AETH (but no BTH): no ACK nor NAK, and
    # every frame still RoCE.
    short = [(d[: aeth_at + 2], o) for d, o in frames]
    s = parse_capture(pcap_bytes([(T0_NS + i, d, o) for i, (d, o) in enumerate(short)])).stats
    assert (s.roce_acks, s.roce_naks, s.roce_seq_naks) == (0, 0, 0)
    assert (s.roce_packets, s.skipped_records) == (len(frames), 0)
    # The columns say the same, frame by frame (dtype int16, -1 where none).
    buf = b"".join(d for d, _ in frames)
    offs = np.cumsum([0] + [len(d) for d, _ in frames[:-1]], dtype=np.int64)
    cols = pcap_mod.decode_columns(buf, offs, [len(d) for d, _ in frames], 1)
    assert cols.aeth_syndrome.dtype == np.int16
    want = [-1 if (i := decode_frame(d)) is None or i.aeth_syndrome is None else i.aeth_syndrome
            for d, _ in frames]  # fmt: skip
    assert cols.aeth_syndrome.tolist() == want
    assert want[:3] == [0x1F] * 3
    assert want[-5:] == [-1, -1, -1, -1, -1]


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
    acks = [
        (bytes(ack4(syn, opcode=opc)), 62) for syn, opc in ((0, 0x11), (0x60, 0x12), (0x21, 0x11))
    ]
    recs = [(T0_NS + i, d, o) for i, (d, o) in enumerate(frames[:6] + acks)]
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


def _mutated_valid_file(data: st.DataObject) -> bytearray:
    """One of VALID_FILES with up to six random flips, sets, inserts, deletions or a cut."""
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
    return buf


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_files_raise_only_input_format_error(data: st.DataObject) -> None:
    buf = _mutated_valid_file(data)
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


# --- the vectorized reader against the per-record reader it replaced --------------------------
#
# ``ref_parse`` is the previous implementation (record by record, ``_decode`` per frame), kept
# here as the oracle: the vector path must give the same arrays, totals, warnings and errors
# for every input.


class _RefRecords:
    def __init__(self) -> None:
        self.offs: list[int] = []
        self.caps: list[int] = []
        self.origs: list[int] = []
        self.tns: list[int | None] = []
        self.link_types: list[int] | None = None
        self.link_type = -1
        self.truncated = False
        self.warn: list[str] = []
        self.ifs: list[int] = []  # pcapng: each packet's interface, numbered over the file
        self.iface_names: list[str] = []


def _ref_scan_pcap(buf: bytes, size: int, path: Path) -> _RefRecords:
    endian, frac_ns = pcap_mod._PCAP_MAGIC[bytes(buf[0:4])]
    if size < 24:
        raise InputFormatError(path, f"pcap file header cut short ({size} of 24 bytes)")
    major, minor = struct.unpack_from(endian + "HH", buf, 4)
    _snaplen, linktype = struct.unpack_from(endian + "16xII", buf, 0)
    recs = _RefRecords()
    recs.link_type = linktype & 0xFFFF
    if (major, minor) != (2, 4):
        recs.warn.append(
            f"pcap header says format version {major}.{minor}, not 2.4: records read as 2.4"
        )
    rec = struct.Struct(endian + "IIII")
    pos, number, oversized = 24, 0, 0
    while pos < size:
        number += 1
        if size - pos < 16:
            recs.truncated = True
            recs.warn.append(
                f"record {number}: file ends inside the record header "
                f"({size - pos} of 16 bytes); earlier records kept"
            )
            break
        sec, frac, caplen, origlen = rec.unpack_from(buf, pos)
        if caplen > pcap_mod.MAX_CAPLEN or origlen > pcap_mod.MAX_ORIG_LEN:
            pcap_mod._check_lengths(path, "record", number, caplen, origlen)
        pos += 16
        if caplen > size - pos:
            recs.truncated = True
            recs.warn.append(
                f"record {number}: file ends inside the record ({size - pos} of {caplen} "
                "captured bytes); the record is dropped, earlier records kept"
            )
            break
        if caplen > origlen:
            oversized += 1
            origlen = caplen
        recs.offs.append(pos)
        recs.caps.append(caplen)
        recs.origs.append(origlen)
        recs.tns.append(sec * 1_000_000_000 + frac * frac_ns)
        pos += caplen
    if oversized:
        recs.warn.append(
            f"{oversized} records had a captured length above their original length; "
            "the captured length was counted"
        )
    return recs


def _ref_scan_pcapng(buf: bytes, size: int, path: Path) -> _RefRecords:
    corrupt = pcap_mod._corrupt
    recs = _RefRecords()
    recs.link_types = []
    ifaces: list[pcap_mod._Iface] = []
    head = u32 = idb = epb = opb = struct.Struct("<II")
    endian = "<"
    pos = number = oversized = spb_untimed = bad_times = 0
    last_t: int | None = None
    first_bad_time: tuple[int, int, int] | None = None
    while pos < size:
        number += 1
        if size - pos < 12:
            if pos == 0:
                raise InputFormatError(path, f"pcapng section header cut short ({size} bytes)")
            recs.truncated = True
            recs.warn.append(
                f"block {number}: file ends inside the block header ({size - pos} bytes); "
                "earlier blocks kept"
            )
            break
        if buf[pos : pos + 4] == b"\x0a\x0d\x0d\x0a":
            bom = bytes(buf[pos + 8 : pos + 12])
            if bom not in pcap_mod._PCAPNG_BOM:
                raise corrupt(path, number, "section header has a bad byte-order magic")
            endian = pcap_mod._PCAPNG_BOM[bom]
            head = struct.Struct(endian + "II")
            u32 = struct.Struct(endian + "I")
            idb = struct.Struct(endian + "HHI")
            epb = struct.Struct(endian + "IIIII")
            opb = struct.Struct(endian + "HHIIII")
            ifaces = []
        btype, blen = head.unpack_from(buf, pos)
        if blen < 12 or blen % 4:
            raise corrupt(
                path, number, f"block length {blen} is invalid (not a multiple of 4, or under 12)"
            )
        if blen > size - pos:
            if pos == 0:
                raise InputFormatError(path, f"pcapng section header cut short ({size} bytes)")
            recs.truncated = True
            recs.warn.append(
                f"block {number}: file ends inside the block ({size - pos} of {blen} bytes); "
                "the block is dropped, earlier blocks kept"
            )
            break
        (trailer,) = u32.unpack_from(buf, pos + blen - 4)
        if trailer != blen:
            raise corrupt(path, number, f"trailing block length {trailer} differs from {blen}")
        body_end = pos + blen - 4
        data_off = -1
        t_units: int | None = None
        if btype == 0x0A0D0D0A:
            if blen < 28:
                raise corrupt(path, number, "section header too short")
            (major,) = struct.unpack_from(endian + "H", buf, pos + 12)
            if major != 1:
                raise corrupt(path, number, f"unsupported pcapng major version {major}")
        elif btype == 1:
            if blen < 20:
                raise corrupt(path, number, "interface description too short")
            lt, _res, snap = idb.unpack_from(buf, pos + 8)
            mul, div, off_ns = pcap_mod._parse_idb_options(
                buf, pos + 16, body_end, endian=endian, path=path, number=number
            )
            ifaces.append(pcap_mod._Iface(lt, snap, mul, div, off_ns, len(recs.iface_names)))
            recs.iface_names.append(pcap_mod._idb_name(buf, pos + 16, body_end, endian))
            if recs.link_type < 0:
                recs.link_type = lt
        elif btype in (6, 2):
            if blen < 32:
                raise corrupt(path, number, "packet block too short")
            if btype == 6:
                if_id, hi, lo, caplen, origlen = epb.unpack_from(buf, pos + 8)
            else:
                if_id, _drops, hi, lo, caplen, origlen = opb.unpack_from(buf, pos + 8)
            if caplen > blen - 32:
                raise corrupt(path, number, f"captured length {caplen} overruns the block")
            data_off = pos + 28
            t_units = (hi << 32) | lo
        elif btype == 3:
            if blen < 16:
                raise corrupt(path, number, "simple packet block too short")
            if_id = 0
            (origlen,) = u32.unpack_from(buf, pos + 8)
            caplen = min(origlen, blen - 16)
            if ifaces and ifaces[0].snaplen:
                caplen = min(caplen, ifaces[0].snaplen)
            data_off = pos + 12
        if data_off >= 0:
            if if_id >= len(ifaces):
                raise corrupt(path, number, f"packet refers to undeclared interface {if_id}")
            if caplen > pcap_mod.MAX_CAPLEN or origlen > pcap_mod.MAX_ORIG_LEN:
                pcap_mod._check_lengths(path, "block", number, caplen, origlen)
            if caplen > origlen:
                oversized += 1
                origlen = caplen
            iface = ifaces[if_id]
            if t_units is None:
                t = last_t
                if t is None:
                    spb_untimed += 1
            else:
                t = t_units * iface.mul // iface.div + iface.offset_ns
                if not -(1 << 63) <= t <= (1 << 63) - 1:  # kept, untimed
                    if first_bad_time is None:
                        first_bad_time = (number, if_id, t_units)
                    bad_times += 1
                    t = None
                else:
                    last_t = t
            recs.offs.append(data_off)
            recs.caps.append(caplen)
            recs.origs.append(origlen)
            recs.tns.append(t)
            recs.link_types.append(iface.link_type)
            recs.ifs.append(iface.gid)
        pos += blen
    if oversized:
        recs.warn.append(
            f"{oversized} packets had a captured length above their original length; "
            "the captured length was counted"
        )
    if spb_untimed:
        recs.warn.append(
            f"{spb_untimed} simple packet blocks came before any timed packet; their time is NaN"
        )
    if first_bad_time is not None:
        number, iface_id, raw = first_bad_time
        recs.warn.append(
            f"{bad_times} packets have a timestamp out of range, first in block {number} "
            f"(interface {iface_id}, raw {raw:#x}: a negative time written unsigned?); they "
            "are kept without a time"
        )
    return recs


def _ref_analyse(buf: bytes, recs: _RefRecords) -> Capture:
    from collections import Counter

    n = len(recs.offs)
    srcs: list[bytes] = []
    dsts: list[bytes] = []
    flows: set[tuple[object, ...]] = set()
    qps: set[tuple[object, ...]] = set()
    roce = cnp = skipped = tcp_bytes = udp_bytes = acks = naks = seq_naks = 0
    lts = recs.link_types if recs.link_types is not None else [recs.link_type] * n
    # ibdump counts its ERF header in the original length: it never was on the wire; a Linux
    # cooked header stands in the original length for the device's (Ethernet: 14 bytes).
    rows = zip(recs.offs, recs.caps, recs.origs, lts, strict=True)
    wires = [_ref_wire(buf, off, cap, orig, lt) for off, cap, orig, lt in rows]
    # RC requests and ACKs: (time, record, is ACK, key in the request's orientation, src MAC).
    rc: list[tuple[int, int, bool, tuple[object, ...], bytes]] = []
    # Linux cooked headers: the packet type (the direction) and SLL2's interface index.
    pkttypes: list[int] = []
    interfaces: set[int] = set()
    for idx, (off, caplen, orig, lt, t) in enumerate(
        zip(recs.offs, recs.caps, wires, lts, recs.tns, strict=True)
    ):
        pkttype = -1
        if lt == 113 and caplen >= 2:
            pkttype = int.from_bytes(buf[off : off + 2], "big")
        elif lt == 276 and caplen >= 11:
            pkttype = buf[off + 10]
        pkttypes.append(pkttype if pkttype <= 127 else -1)
        if lt == 276 and caplen >= 8:
            interfaces.add(int.from_bytes(buf[off + 4 : off + 8], "big"))
        r = pcap_mod._decode(buf, off, off + caplen, lt)
        if r is None:
            lrh = _ref_lrh(buf, off, caplen, lt)
            ib = _ref_ib_transport(buf, off, caplen, lt)
            skipped += ib is None
            if lt == 1 and caplen >= 12:
                dsts.append(bytes(buf[off : off + 6]))
                srcs.append(bytes(buf[off + 6 : off + 12]))
            elif lrh is not None:  # LIDs, as 48-bit numbers like the MACs
                dsts.append(bytes(4) + lrh[2:4])
                srcs.append(bytes(4) + lrh[6:8])
            else:
                dsts.append(b"")
                srcs.append(b"")
            if ib is not None:  # the BTH as RoCE's, keyed by LIDs
                slid, dlid, opc, dqp, psn, syn = ib
                roce += 1
                cnp += opc == 0x80
                qps.add(("ib", dlid, dqp))
                flows.add(("ib", slid, dlid, dqp))
                if syn is not None:
                    acks += syn >> 5 == 0b000
                    naks += syn >> 5 in (0b001, 0b011)
                    seq_naks += syn == 0b011_00000
                if t is not None:
                    if opc in RC_REQUESTS:
                        rc.append((t, idx, False, ("ib", slid, dlid, psn), srcs[-1]))
                    elif syn is not None and syn >> 5 == 0:
                        rc.append((t, idx, True, ("ib", dlid, slid, psn), srcs[-1]))
            continue
        dst, src, _et, _vlan, ipver, sip, dip, proto, sport, dport, is_roce, opc, dqp, psn, syn = r
        if is_roce and t is not None:
            if opc in RC_REQUESTS:
                rc.append((t, idx, False, (sip, dip, psn), src))
            elif syn is not None and syn >> 5 == 0:
                rc.append((t, idx, True, (dip, sip, psn), src))
        srcs.append(src)
        dsts.append(dst)
        if ipver is None:
            continue
        flows.add((proto, sip, sport, dip, dport))
        if proto == 17:
            udp_bytes += orig
            if is_roce:
                roce += 1
                qps.add((dip, dqp))
                cnp += opc == 0x81
                if syn is not None:
                    acks += syn >> 5 == 0b000
                    naks += syn >> 5 in (0b001, 0b011)
                    seq_naks += syn == 0b011_00000
        elif proto == 6:
            tcp_bytes += orig
    counts = Counter(srcs)
    counts.update(d for d in dsts if d and not d[0] & 1)
    counts.pop(b"", None)
    local = counts.most_common(1)[0][0] if counts else None
    best = max(counts.values(), default=0)
    guessed = best >= 100 and sum(v >= 0.99 * best for v in counts.values()) > 1
    is_tx = np.array(
        [s == local if k < 0 else k == 4 for s, k in zip(srcs, pkttypes, strict=True)], dtype=bool
    )
    warn = list(recs.warn)
    tns = list(recs.tns)
    stray = _ref_stray(tns)
    if stray:
        first_stray = tns[stray[0]]
        assert first_stray is not None
        left = sorted(t for i, t in enumerate(tns) if t is not None and i not in set(stray))
        median = int(np.median(np.array(left, dtype=np.int64))) if left else first_stray
        days = abs(first_stray - median) / 86_400e9
        gap = f"{days:,.0f} days" if days >= 2 else f"{days * 24:.0f} h"
        import datetime as dt

        try:
            when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
                microseconds=first_stray // 1000
            )
            stamp = when.strftime("%Y-%m-%d %H:%M:%S UTC")
        except OverflowError:
            stamp = f"{first_stray / 1e9:.0f} s after 1970"
        count = f"{len(stray)} frame" + ("s" if len(stray) > 1 else "")
        warn.append(
            f"{count} stamped far from the others left out of the time series (they count in "
            f"packets and bytes): the first, frame {stray[0] + 1}, at {stamp}, {gap} "
            f"{'before' if first_stray < median else 'after'} the median frame (a NIC clock not "
            "yet synchronised?); binned with the others, they would stretch the bins over the "
            "gap and the traffic would read as idle"
        )
    timed = [t for i, t in enumerate(tns) if t is not None and i not in set(stray)]
    ns = 1_000_000_000
    time_ns = np.array([t if t is not None else 0 for t in recs.tns], dtype=np.int64)
    time_s = (time_ns // ns).astype(np.float64) + (time_ns % ns).astype(np.float64) / 1e9
    time_s[np.array([t is None for t in recs.tns], dtype=bool)] = np.nan
    time_s[stray] = np.nan
    first = min(timed) if timed else None
    last = max(timed) if timed else None
    length = np.array(wires, dtype=np.int64)
    if guessed and not all(k >= 0 for k in pkttypes):
        if recs.link_type in (197, 247):
            warn.append(
                "two ports only: which LID is the capturing port's is a guess (both are seen "
                "as often), so tx and rx may be swapped"
            )
        else:
            warn.append(
                "two hosts only: which MAC is the capturing host's is a guess, so tx and rx may "
                "be swapped (a cooked capture, `tcpdump -i any`, records the direction)"
            )
    if srcs and local is None and not any(k >= 0 for k in pkttypes):
        warn.append(
            f"the frames carry no direction (link type {recs.link_type}: no Ethernet MAC, no "
            "cooked-capture packet type), so all are counted as received: where both "
            "directions were captured, B and the rx bytes are their sum, up to twice one "
            "direction's; capture on the Ethernet/RoCE interface, or with `tcpdump -i any`, "
            "for each direction"
        )
    if len(set(recs.ifs)) > 1:
        names = [recs.iface_names[k] or f"interface #{k}" for k in sorted(set(recs.ifs))]
        listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        warn.append(
            f"frames of {len(names)} interfaces ({listed}) are summed: traffic that crosses a "
            "bridge, a bond or a tunnel (a VXLAN and the device under it) is counted on each "
            "interface it crosses; capture on the physical NICs for B and D"
        )
    elif len(interfaces) > 1:
        warn.append(
            f"frames of {len(interfaces)} interfaces (a `-i any` capture) are summed: traffic "
            "that crosses a bridge, a bond or a tunnel is counted on each interface it crosses; "
            "capture on the physical NICs for B and D"
        )
    infiniband = recs.link_type in (197, 247)
    if skipped and infiniband:
        warn.append(
            f"{skipped} InfiniBand frames without a whole transport header (raw packets, "
            "other ERF record types, or headers cut by the snaplen): they count in packets "
            "and bytes only"
        )
    elif skipped:
        warn.append(
            f"{skipped} frames could not be decoded (runt, unsupported link type, or a header "
            "cut by the snaplen); they count in packets and bytes only"
        )
    ack = _ref_ack_latency(rc, local)
    stats = CaptureStats(
        packets=n, bytes=int(length.sum()), roce_packets=roce, cnp_packets=cnp,
        roce_qps=len(qps), flows=len(flows), tcp_bytes=tcp_bytes, udp_bytes=udp_bytes,
        skipped_records=skipped, truncated=recs.truncated,
        first_time_s=None if first is None else first // ns + (first % ns) / 1e9,
        last_time_s=None if last is None else last // ns + (last % ns) / 1e9,
        link_type=recs.link_type,
        local_mac=None if local is None or infiniband else ":".join(f"{b:02x}" for b in local),
        warnings=tuple(warn), roce_acks=acks, roce_naks=naks, roce_seq_naks=seq_naks,
        ack_latency_s=ack[0], ack_latency_local_requester_s=ack[1],
        ack_latency_remote_requester_s=ack[2],
    )  # fmt: skip
    return Capture(time_s=time_s, length=length, is_tx=is_tx, stats=stats, time_ns=time_ns)


RC_REQUESTS = {*range(0x0D), 0x13, 0x14, 0x16, 0x17}


def _ref_wire(buf: bytes, off: int, cap: int, orig: int, lt: int) -> int:
    """A record's length on the wire: an ERF header off; a cooked header off, and an Ethernet
    header on where its ARPHRD type (SLL bytes 2-3, SLL2 8-9; not captured: taken as
    Ethernet) is Ethernet (1) or loopback (772)."""
    if lt == 197:
        h = _ref_erf_header(buf, off, cap)
        return orig if h is None else max(orig - h, 0)
    if lt in (113, 276):
        at, head = (2, 16) if lt == 113 else (8, 20)
        hatype = int.from_bytes(buf[off + at : off + at + 2], "big") if cap >= at + 2 else None
        return max(orig - head + (14 if hatype in (None, 1, 772) else 0), 0)
    return orig


def _ref_stray(tns: list[int | None]) -> list[int]:
    """Records (in file order) stamped before 2000 while the median is later, or cut off from
    the median frame by a gap of over a day; none with fewer than three timed frames."""
    timed = sorted((t, i) for i, t in enumerate(tns) if t is not None)
    if len(timed) < 3:
        return []
    mid = len(timed) // 2
    day, y2000 = 86_400 * 10**9, 946_684_800 * 10**9
    odd = set()
    for k in range(mid, 0, -1):  # down from the median: all below the first long gap
        if timed[k][0] - timed[k - 1][0] > day:
            odd.update(i for _, i in timed[:k])
            break
    for k in range(mid, len(timed) - 1):
        if timed[k + 1][0] - timed[k][0] > day:
            odd.update(i for _, i in timed[k + 1 :])
            break
    if timed[mid][0] >= y2000:
        odd.update(i for t, i in timed if t < y2000)
    return sorted(odd)


def _ref_ack_latency(
    rc: list[tuple[int, int, bool, tuple[object, ...], bytes]], local: bytes | None
) -> tuple[pcap_mod.AckLatency | None, ...]:
    """ACK latency, record by record in (time, record) order: each ACK against the latest
    request before it with its PSN on the reverse address pair, within the window."""
    last: dict[tuple[object, ...], tuple[int, bytes]] = {}
    samples: list[tuple[int, bytes]] = []
    for t, _idx, is_ack, key, src in sorted(rc, key=lambda e: (e[0], e[1])):
        if not is_ack:
            last[key] = (t, src)
        elif (hit := last.get(key)) is not None and t - hit[0] <= pcap_mod.ACK_MATCH_WINDOW_NS:
            samples.append((t - hit[0], hit[1]))

    def pct(kind: int | None) -> pcap_mod.AckLatency | None:
        if kind is not None and local is None:
            return None
        lat = [x for x, mac in samples if kind is None or (mac == local) == bool(kind)]
        if not lat:
            return None
        p50, p90, p99 = np.percentile(np.array(lat, dtype=np.int64), [50.0, 90.0, 99.0])
        return pcap_mod.AckLatency(p50 / 1e9, p90 / 1e9, p99 / 1e9, len(lat))

    return pct(None), pct(1), pct(0)


def _ref_erf_header(buf: bytes, off: int, cap: int) -> int | None:
    """The length of an ERF record's headers (16 + 8 per extension), None when cut or when
    more than 8 extensions follow."""
    if cap < 16:
        return None
    at, more, ext = 16, buf[off + 8] & 0x80, 0
    while more:
        if ext == 8 or cap < at + 8:
            return None
        more = buf[off + at] & 0x80
        at, ext = at + 8, ext + 1
    return at


def _ref_lrh(buf: bytes, off: int, cap: int, lt: int) -> bytes | None:
    """The LRH of an InfiniBand frame (DLT 247) or ERF record of type 21/25 (DLT 197)."""
    if lt == 247:
        return bytes(buf[off : off + 8]) if cap >= 8 else None
    if lt != 197 or cap < 16 or buf[off + 8] & 0x7F not in (21, 25):
        return None
    at = _ref_erf_header(buf, off, cap)
    return bytes(buf[off + at : off + at + 8]) if at is not None and cap >= at + 8 else None


def _ref_ib_transport(
    buf: bytes, off: int, cap: int, lt: int
) -> tuple[int, int, int, int, int, int | None] | None:
    """(SLID, DLID, opcode, destination QP, PSN, AETH syndrome) of an InfiniBand frame whose
    LRH is followed by a whole BTH: directly (LNH 2) or after a 40-byte GRH (LNH 3)."""
    lrh = _ref_lrh(buf, off, cap, lt)
    if lrh is None or lrh[1] & 3 < 2:
        return None
    start = 0 if lt == 247 else _ref_erf_header(buf, off, cap)
    assert start is not None
    bth = start + 8 + (40 if lrh[1] & 3 == 3 else 0)
    if cap < bth + 12:
        return None
    head = bytes(buf[off + bth : off + bth + 12])
    opcode, qp, psn = head[0], int.from_bytes(head[5:8], "big"), int.from_bytes(head[9:12], "big")
    syn = buf[off + bth + 12] if opcode in (0x11, 0x12) and cap >= bth + 16 else None
    slid, dlid = int.from_bytes(lrh[6:8], "big"), int.from_bytes(lrh[2:4], "big")
    return slid, dlid, opcode, qp, psn, syn


def ref_parse(data: bytes) -> Capture:
    """The per-record reader (the oracle)."""
    path = Path("<bytes>")
    if not data:
        raise InputFormatError(path, "empty file: not a pcap or pcapng file")
    magic = data[0:4]
    if magic in pcap_mod._PCAP_MAGIC:
        recs = _ref_scan_pcap(data, len(data), path)
    elif magic == b"\x0a\x0d\x0d\x0a":
        recs = _ref_scan_pcapng(data, len(data), path)
    else:
        raise InputFormatError(
            path,
            f"not a pcap or pcapng file (magic {magic.hex()} is neither pcap nor pcapng"
            f"{pcap_mod._OTHER_MAGIC.get(magic, '')})",
        )
    return _ref_analyse(data, recs)


def assert_same_capture(got: Capture, want: Capture) -> None:
    assert got.stats == want.stats
    assert got.length.dtype == np.int64
    assert got.length.tolist() == want.length.tolist()
    assert got.is_tx.dtype == np.bool_
    assert got.is_tx.tolist() == want.is_tx.tolist()
    assert got.time_ns is not None
    assert want.time_ns is not None
    assert got.time_ns.tolist() == want.time_ns.tolist()
    np.testing.assert_array_equal(got.time_s, want.time_s)  # NaN where NaN


def assert_same_outcome(data: bytes) -> None:
    """parse_capture and the oracle: the same capture, or the same error."""
    want: Capture | InputFormatError
    try:
        want = ref_parse(data)
    except InputFormatError as exc:
        want = exc
    if isinstance(want, InputFormatError):
        with pytest.raises(InputFormatError) as got:
            parse_capture(data)
        assert (str(got.value), got.value.line) == (str(want), want.line)
        return
    assert_same_capture(parse_capture(data), want)


# Frames built byte by byte: every header the decoder looks at, valid or not, cut anywhere.

MACS = [
    bytes.fromhex("020000000001"),
    bytes.fromhex("020000000002"),
    bytes(6),  # the loopback device's
    b"\xff" * 6,
    bytes.fromhex("01005e000001"),  # multicast
]
ADDR4 = [bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), bytes(4)]
ADDR6 = [bytes.fromhex("fd00" + "00" * 13 + "01"), bytes.fromhex("fd00" + "00" * 13 + "02")]


@st.composite
def l4_bytes(draw: st.DrawFn, proto: int) -> bytes:
    if proto not in (6, 17):
        return draw(st.binary(max_size=8))
    sport = draw(st.sampled_from([1, 80, 4791, 50000]))
    dport = draw(st.sampled_from([4791, 4791, 80, 443]))
    if proto == 6:
        return struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 0x50, 0x10, 1, 0, 0)
    bth = struct.pack(
        "!BBHII",
        draw(st.sampled_from([4, 6, 0x0C, 0x10, 0x11, 0x11, 0x12, 0x81])),
        0x40,
        0xFFFF,
        draw(st.sampled_from([0x11, 0x22, 0xABCDEF])),
        # Few PSNs (0x80000001: the AckReq bit and PSN 1), so that ACKs meet their requests.
        draw(st.one_of(st.sampled_from([0, 1, 0x80000001]), st.integers(0, 0xFFFFFFFF))),
    )
    # The AETH of an ACK (any opcode carries these 4 bytes here; only 0x11 / 0x12 read them):
    # every syndrome class, ACK 000 (credits), RNR NAK 001, reserved 010, NAK 011 codes 0-4
    # and beyond, and 1xx (reserved) bytes.
    syndrome = draw(st.sampled_from([0x00, 0x1F, 0x20, 0x3F, 0x40, 0x60, 0x61, 0x62, 0x63, 0x64,
                                     0x7F, 0x80, 0xFF]))  # fmt: skip
    aeth = struct.pack("!BBH", syndrome, 0, draw(st.integers(0, 0xFFFF)))
    return struct.pack("!HHHH", sport, dport, 24, 0) + bth + aeth + b"\x00" * 4


@st.composite
def l3_bytes(draw: st.DrawFn) -> tuple[int, bytes]:
    """(EtherType, bytes from the L3 header on)."""
    kind = draw(st.sampled_from(["v4", "v4", "v6", "v6ext", "arp", "other"]))
    if kind == "arp":
        return 0x0806, b"\x00\x01\x08\x00\x06\x04\x00\x01" + bytes(20)
    if kind == "other":
        return draw(st.sampled_from([0x88CC, 0x8100, 0x0800, 0x86DD])), draw(st.binary(max_size=48))
    proto = draw(st.sampled_from([6, 17, 17, 1]))
    l4 = draw(l4_bytes(proto))
    if kind == "v4":
        ihl = draw(st.sampled_from([5, 5, 5, 6, 15, 4]))
        vihl = draw(st.sampled_from([0x40, 0x40, 0x40, 0x60])) | ihl
        frag = draw(st.sampled_from([0, 0, 0x2000, 0x0010, 0x4000]))
        head = struct.pack(
            "!BBHHHBBH4s4s", vihl, 0, 20 + len(l4), 0, frag, 64, proto, 0,
            draw(st.sampled_from(ADDR4)), draw(st.sampled_from(ADDR4)),
        )  # fmt: skip
        return 0x0800, head + b"\x01" * (max(ihl, 5) * 4 - 20) + l4
    chain = (
        draw(st.lists(st.sampled_from([0, 43, 60, 44, 51]), max_size=3)) if kind == "v6ext" else []
    )
    nh_seq = [*chain, proto]
    ext = b""
    for h, nxt in zip(chain, nh_seq[1:], strict=True):
        if h == 44:
            off = draw(st.sampled_from([0, 0, 8]))
            ext += struct.pack("!BBHI", nxt, 0, off << 3, 1)
        elif h == 51:
            ext += struct.pack("!BB", nxt, 1) + bytes(10)
        else:
            ext += struct.pack("!BB", nxt, 0) + bytes(6)
    version = draw(st.sampled_from([0x60, 0x60, 0x60, 0x40]))
    head = struct.pack(
        "!IHBB16s16s", version << 24, len(ext) + len(l4), nh_seq[0], 64,
        draw(st.sampled_from(ADDR6)), draw(st.sampled_from(ADDR6)),
    )  # fmt: skip
    return 0x86DD, head + ext + l4


@st.composite
def frame_bytes(draw: st.DrawFn, link_type: int) -> bytes:
    """A frame of that link type: valid, malformed, or random bytes."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=40))
    if link_type in (197, 247):
        lids = st.sampled_from([1, 3, 0x0103, 0xC001, 0xFFFF])
        lrh = struct.pack(">BBHHH", 0, draw(st.integers(0, 3)), draw(lids), 0x200, draw(lids))
        frame = lrh + draw(st.binary(max_size=24))
        if link_type == 247:
            return frame
        kind = draw(st.sampled_from([21, 25, 21 | 0x80, 25 | 0x80, 2, 0]))
        ext = b""
        if kind & 0x80:
            n = draw(st.sampled_from([1, 2, 9]))
            ext = b"".join(bytes([0x80 if i < n - 1 else 0x01]) + bytes(7) for i in range(n))
        return (
            bytes(8) + struct.pack(">BBHHH", kind, 4, 16 + len(frame), 0, len(frame)) + ext + frame
        )
    et, l3 = draw(l3_bytes())
    if link_type in (101, 228, 229):
        return l3
    tags = b""
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        tpid = draw(st.sampled_from([0x8100, 0x88A8, 0x9100]))
        tags += struct.pack("!H", tpid) + struct.pack("!H", draw(st.integers(0, 0xFFFF)))
    # The first tag's TPID is the link header's EtherType; each tag carries the next one.
    if tags:
        et_field = tags[:2]
        body = tags[2:] + struct.pack("!H", et) + l3
    else:
        et_field, body = struct.pack("!H", et), l3
    src, dst = draw(st.sampled_from(MACS)), draw(st.sampled_from(MACS))
    if link_type == 1:
        return dst + src + et_field + body
    halen = draw(st.sampled_from([6, 6, 4, 0]))
    addr = src + b"\x00\x00"
    if link_type == 113:
        return struct.pack("!HHH8s", 0, 1, halen, addr) + et_field + body
    if link_type == 276:
        return et_field + struct.pack("!HIHBB8s", 0, 2, 1, 0, halen, addr) + body
    return dst + src + et_field + body  # an unsupported link type: undecodable


@st.composite
def records(draw: st.DrawFn, link_type: int) -> list[tuple[bytes, int]]:
    """(captured bytes, original length), cut at random captured lengths."""
    out = []
    for frame in draw(st.lists(frame_bytes(link_type), max_size=24)):
        cut = draw(st.sampled_from([len(frame), len(frame), 64, 57, 55, 54, 40, 18, 14, 13, 0]))
        data = frame[: min(cut, len(frame))]
        orig = draw(st.sampled_from([len(frame), len(frame) + 9000, 65226, max(len(data) - 1, 0)]))
        out.append((data, orig))
    return out


LINK_TYPES = [1, 1, 1, 113, 276, 101, 228, 229, 147, 247, 197]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_vector_reader_matches_per_record_reader_pcap(data: st.DataObject) -> None:
    link_type = data.draw(st.sampled_from(LINK_TYPES))
    recs = data.draw(records(link_type))
    t0 = data.draw(st.sampled_from([T0_NS, 0, (1 << 32) - 1]))
    step = data.draw(st.sampled_from([997, 997, 300_000_001]))  # the last: past the ACK window
    raw = pcap_bytes(
        [(t0 + i * step, d, o) for i, (d, o) in enumerate(recs)],
        nano=data.draw(st.booleans()),
        endian=data.draw(st.sampled_from(["<", ">"])),
        linktype=link_type,
    )
    assert_same_outcome(raw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_vector_reader_matches_per_record_reader_pcapng(data: st.DataObject) -> None:
    blocks = []
    for _section in range(data.draw(st.integers(1, 2))):
        endian = data.draw(st.sampled_from(["<", ">"]))
        blocks.append(ng_shb(endian))
        lts = data.draw(st.lists(st.sampled_from(LINK_TYPES), min_size=1, max_size=3))
        for lt in lts:
            blocks.append(
                ng_idb(
                    lt,
                    snaplen=data.draw(st.sampled_from([0, 64, 128])),
                    tsresol=data.draw(st.sampled_from([None, 6, 9, 0x80 | 20, 3, 12])),
                    tsoffset=data.draw(st.sampled_from([None, 0, 100, -5])),
                    endian=endian,
                )
            )
        t = data.draw(st.sampled_from([T0_NS, 1_700_000_000_000_000, 5, (1 << 64) - 1]))
        for i in range(data.draw(st.integers(0, 16))):
            if_id = data.draw(st.integers(0, len(lts) - 1))
            frame = data.draw(frame_bytes(lts[if_id]))
            cut = data.draw(st.sampled_from([len(frame), len(frame), 56, 40, 14, 0]))
            d = frame[: min(cut, len(frame))]
            orig = data.draw(st.sampled_from([len(frame), 9000, max(len(d) - 1, 0)]))
            kind = data.draw(st.sampled_from(["epb", "epb", "epb", "opb", "spb", "isb"]))
            ts = (t + i * 1013) & ((1 << 64) - 1)
            if kind == "epb":
                blocks.append(ng_epb(if_id, ts, d, orig, endian))
            elif kind == "opb":
                blocks.append(ng_opb(if_id, ts, d, orig, endian))
            elif kind == "spb":
                blocks.append(ng_spb(d, orig, endian))
            else:
                blocks.append(ng_block(5, b"\x00" * 20, endian))
    assert_same_outcome(b"".join(blocks))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_vector_reader_matches_per_record_reader_on_mutated_files(data: st.DataObject) -> None:
    buf = _mutated_valid_file(data)
    assert_same_outcome(bytes(buf))


_RC_HOSTS = {
    L4: bytes.fromhex("020000000001"),
    P4: bytes.fromhex("020000000002"),
    Q4: bytes.fromhex("020000000003"),
    L6: bytes.fromhex("020000000001"),
    P6: bytes.fromhex("020000000002"),
}


@st.composite
def rc_exchange(draw: st.DrawFn) -> list[tuple[int, bytes, int]]:
    """RC requests, ACKs, NAKs and READ responses between a few hosts, few PSNs: records
    (time, frame, original length) whose times step back now and then, or past the window."""
    import ipaddress

    out = []
    t = T0_NS
    for _ in range(draw(st.integers(0, 40))):
        src, dst = draw(st.sampled_from([(L4, P4), (P4, L4), (L4, Q4), (Q4, L4), (L6, P6),
                                         (P6, L6)]))  # fmt: skip
        opcode, syndrome = draw(st.sampled_from([(0x0A, 0), (0x06, 0), (0x04, 0), (0x10, 0),
                                                 (0x11, 0x1F), (0x11, 0x1F), (0x12, 0x00),
                                                 (0x11, 0x60), (0x11, 0x20)]))  # fmt: skip
        psn = draw(st.integers(0, 3)) | draw(st.sampled_from([0, 0x80000000]))
        bth = struct.pack("!BBHII", opcode, 0x40, 0xFFFF, draw(st.sampled_from([0x11, 0x22])), psn)
        udp = struct.pack("!HHHH", 50000, 4791, 8 + 12 + 4, 0) + bth
        udp += struct.pack("!BBH", syndrome, 0, 1)
        a, b = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
        if len(a) == 4:
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, a, b)
            et = b"\x08\x00"
        else:
            ip = struct.pack("!IHBB16s16s", 0x60000000, len(udp), 17, 64, a, b)
            et = b"\x86\xdd"
        frame = _RC_HOSTS[dst] + _RC_HOSTS[src] + et + ip + udp
        t += draw(st.sampled_from([0, 1, 1_000, 1_000, -700, pcap_mod.ACK_MATCH_WINDOW_NS]))
        out.append((t, frame, len(frame)))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=rc_exchange(), chunk=st.sampled_from([1, 2, 5, 1 << 16]))
def test_ack_latency_matches_per_record_reader(
    recs: list[tuple[int, bytes, int]], chunk: int
) -> None:
    """ACK latency (pooled and by requester) as the record-by-record oracle finds it. Across
    record chunks the reader needs time order (its documented limit), so chunks cut only
    captures in time order."""
    times = [t for t, _, _ in recs]
    if times != sorted(times):
        chunk = 1 << 16
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pcap_mod, "_CHUNK", chunk)
        assert_same_outcome(pcap_bytes(recs))


def _ib_packet(slid: int, dlid: int, bth: bytes, *, grh: bool = False) -> bytes:
    """An InfiniBand packet: LRH (LNH 2, or 3 with a 40-byte GRH), then ``bth`` and on."""
    lrh = struct.pack(">BBHHH", 0x00, 0x03 if grh else 0x02, dlid, 0x40, slid)
    return lrh + (bytes([0x60]) + bytes(39) if grh else b"") + bth


#: (BTH opcode, AETH syndrome): RC requests, ACKs, NAKs, a READ response, InfiniBand's CNP.
_IB_OPS = [(0x0A, 0), (0x06, 0), (0x04, 0), (0x10, 0), (0x11, 0x1F), (0x11, 0x1F), (0x12, 0x00),
           (0x11, 0x60), (0x11, 0x20), (0x80, 0)]  # fmt: skip


@st.composite
def ib_rc_exchange(draw: st.DrawFn) -> tuple[int, list[tuple[int, bytes, int]]]:
    """The RC exchange of rc_exchange between InfiniBand ports (LIDs), as DLT 247 or as
    ibdump's ERF records, some with a GRH, some CNPs (0x80): (link type, records)."""
    erf = draw(st.booleans())
    out = []
    t = T0_NS
    for _ in range(draw(st.integers(0, 40))):
        slid, dlid = draw(st.sampled_from([(3, 1), (1, 3), (3, 9), (9, 3)]))
        opcode, syndrome = draw(st.sampled_from(_IB_OPS))
        psn = draw(st.integers(0, 3)) | draw(st.sampled_from([0, 0x80000000]))
        qp = draw(st.sampled_from([0x11, 0x22])) | draw(
            st.sampled_from([0, 0xC0000000])
        )  # FECN/BECN
        bth = struct.pack("!BBHII", opcode, 0x40, 0xFFFF, qp, psn) + struct.pack(
            "!BBH", syndrome, 0, 1
        )
        frame = _ib_packet(slid, dlid, bth, grh=draw(st.booleans()))
        if erf:
            frame = _erf(frame, extensions=draw(st.sampled_from([0, 1])))
        t += draw(st.sampled_from([0, 1, 1_000, 1_000, -700, pcap_mod.ACK_MATCH_WINDOW_NS]))
        cut = draw(st.sampled_from([len(frame), len(frame), len(frame) - 4, 20]))
        out.append((t, frame[:cut], len(frame)))
    return (197 if erf else 247), out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exchange=ib_rc_exchange(), chunk=st.sampled_from([1, 2, 5, 1 << 16]))
def test_infiniband_transport_matches_per_record_reader(
    exchange: tuple[int, list[tuple[int, bytes, int]]], chunk: int
) -> None:
    """QPs, CNPs, ACK/NAK counts and ACK latency of InfiniBand captures (LID keys, GRHs, ERF
    headers, cut AETHs and BTHs) as the record-by-record oracle finds them."""
    link_type, recs = exchange
    times = [t for t, _, _ in recs]
    if times != sorted(times):
        chunk = 1 << 16
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pcap_mod, "_CHUNK", chunk)
        assert_same_outcome(pcap_bytes(recs, linktype=link_type))


def test_decode_frame_reads_an_infiniband_bth_after_the_lrh_or_the_grh() -> None:
    ack = struct.pack("!BBHII", 0x11, 0, 0xFFFF, 0x80000021, 0x00000007) + b"\x1f\x00\x00\x01"
    for grh in (False, True):
        frame = _ib_packet(9, 3, ack, grh=grh)
        for link_type, data in ((247, frame), (197, _erf(frame, extensions=2))):
            info = decode_frame(data, link_type)
            assert info is not None
            assert (info.src_mac, info.dst_mac) == (b"\x00\x09", b"\x00\x03")  # the LIDs
            assert info.roce
            assert not info.cnp
            assert info.ip_version is None
            assert (info.bth_opcode, info.dest_qp, info.psn, info.aeth_syndrome) == (
                0x11, 0x21, 7, 0x1F,
            )  # fmt: skip
            # an AETH cut short has no syndrome; a BTH cut short, no frame
            assert decode_frame(data[:-1], link_type).aeth_syndrome is None  # type: ignore[union-attr]
            assert decode_frame(data[:-4], link_type).psn == 7  # type: ignore[union-attr]
            assert decode_frame(data[:-5], link_type) is None
    cnp = _ib_packet(9, 3, struct.pack("!BBHII", 0x80, 0, 0xFFFF, 0x21, 0))
    assert decode_frame(cnp, 247).cnp  # type: ignore[union-attr]
    raw = struct.pack(">BBHHH", 0, 0x01, 3, 0x40, 9) + bytes(20)  # LNH 1: raw, no BTH
    assert decode_frame(raw, 247) is None
    assert decode_frame(_ib_packet(9, 3, ack, grh=True)[:59], 247) is None  # BTH cut


@pytest.mark.parametrize(("erf", "grh"), [(False, False), (False, True), (True, True)])
def test_an_infiniband_capture_gives_qps_cnps_and_ack_latency(erf: bool, grh: bool) -> None:
    """ibdump's view of RC RDMA WRITEs from this port (LID 3) to two peers, their ACKs 6 µs
    later, one PSN sequence NAK and two CNPs (InfiniBand's opcode 0x80): all of it keyed by
    LIDs, as RoCE's is by IP addresses. Before, only the LRH was read and the capture had no
    QP, CNP or ACK figure at all."""

    def bth(opcode: int, qp: int, psn: int, syndrome: int | None = None) -> bytes:
        head = struct.pack("!BBHII", opcode, 0, 0xFFFF, qp, psn)
        return head + (struct.pack("!BBH", syndrome, 0, 1) if syndrome is not None else b"")

    recs = []
    t = T0_NS
    for k in range(8):
        peer = 1 if k % 2 else 9
        recs.append((t, _ib_packet(3, peer, bth(0x0A, 0x40 + peer, k) + bytes(64), grh=grh)))
        recs.append((t + 6_000, _ib_packet(peer, 3, bth(0x11, 0x21, k, 0x1F), grh=grh)))
        t += 100_000
    recs.append((t, _ib_packet(1, 3, bth(0x11, 0x21, 99, 0x60), grh=grh)))  # NAK: PSN sequence
    recs += [(t + i, _ib_packet(9, 3, bth(0x80, 0x21, 0), grh=grh)) for i in (1, 2)]
    frames = [(ts, _erf(f) if erf else f) for ts, f in recs]
    cap = parse_capture(pcap_bytes([(ts, f, len(f)) for ts, f in frames],
                                   linktype=197 if erf else 247))  # fmt: skip
    s = cap.stats
    assert s.roce_packets == len(recs)
    assert s.skipped_records == 0
    assert s.cnp_packets == 2
    assert s.roce_qps == 3  # the two peers' QPs 0x41 / 0x49 and this port's 0x21
    assert (s.roce_acks, s.roce_naks, s.roce_seq_naks) == (8, 1, 1)
    assert s.ack_latency_s is not None
    assert s.ack_latency_s.samples == 8
    assert s.ack_latency_s.p50 == pytest.approx(6e-6)
    # this port (the LID seen most) was the requester of every request
    assert s.ack_latency_local_requester_s is not None
    assert s.ack_latency_local_requester_s.samples == 8
    assert s.ack_latency_remote_requester_s is None
    assert not s.warnings


def test_known_files_match_per_record_reader() -> None:
    frames = mixed_frames()
    recs = [(T0_NS + i * 1_000_001, d, o) for i, (d, o) in enumerate(frames)]
    for raw in [*VALID_FILES, pcap_bytes(recs, snaplen=128), pcap_bytes(recs, endian=">")]:
        assert_same_outcome(raw)
        for cut in range(0, len(raw), 7):  # every truncation point, roughly
            assert_same_outcome(raw[:cut])


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunk_boundaries_change_nothing(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Records are read in batches of _CHUNK; a batch edge anywhere gives the same answer."""
    frames = mixed_frames()
    recs = [(T0_NS + i * 1_000_001, d, o) for i, (d, o) in enumerate(frames)]
    files = [*VALID_FILES, pcap_bytes(recs), pcap_bytes(recs)[:-5]]
    corrupt = pcap_bytes(recs) + struct.pack("<IIII", 1, 0, 300_000, 300_000) + b"\x00" * 16
    ng = [ng_shb(), ng_idb(tsresol=9), ng_idb(113)]
    ng += [ng_epb(0, T0_NS + i, d, o) for i, (d, o) in enumerate(frames)]
    ng += [ng_spb(frames[0][0], frames[0][1]), ng_epb(1, 5, b"\x00" * 20, 20)]
    bad_trailer = ng_epb(0, 1, frames[0][0], 60)[:-4] + struct.pack("<I", 4)
    files += [b"".join(ng), b"".join(ng)[:-6], b"".join(ng[:8]) + bad_trailer + ng[8], corrupt]
    monkeypatch.setattr(pcap_mod, "_CHUNK", chunk)
    for raw in files:
        assert_same_outcome(raw)


def test_pcapng_timestamps_of_every_resolution() -> None:
    """Units to ns: the uint64 path, and Python integers where it could overflow."""
    frame = bytes(roce4())
    for tsresol, tsoffset, units in [
        (6, None, 1_700_000_000_123_456),
        (9, -5, 1_700_000_000_123_456_789),
        (0x80 | 20, 100, 1_700_000_000 * 2**20 + 7),
        (0x80 | 62, None, (1 << 64) - 1),
        (12, None, (1 << 64) - 1),  # picoseconds
        (0, 1 << 40, 3),  # seconds, offset far past int64 ns: out of range
        (6, None, (1 << 64) - 1),  # µs past int64 ns: out of range
        (0x80 | 127, None, 12345),
    ]:
        raw = ng_shb() + ng_idb(tsresol=tsresol, tsoffset=tsoffset)
        raw += ng_epb(0, units, frame, len(frame)) + ng_epb(0, units // 2, frame, len(frame))
        assert_same_outcome(raw)


# --- decode_columns ----------------------------------------------------------------------


def _frame_columns_match(
    cols: pcap_mod.FrameColumns, i: int, info: pcap_mod.FrameInfo | None
) -> None:
    if info is None:
        assert not cols.decoded[i]
        assert (cols.ip_version[i], cols.proto[i], cols.ethertype[i], cols.vlan[i]) == (
            0,
            -1,
            0,
            -1,
        )
        assert not cols.tcp[i]
        assert not cols.udp[i]
        assert not cols.roce[i]
        assert not cols.cnp[i]
        assert (cols.src_port[i], cols.dst_port[i], cols.dest_qp[i], cols.bth_opcode[i]) == (
            -1,
        ) * 4
        assert cols.psn[i] == -1
        assert cols.aeth_syndrome[i] == -1
        assert not cols.flow_key[i].tobytes().strip(b"\x00")
        return
    assert cols.decoded[i]
    assert cols.ethertype[i] == info.ethertype
    assert cols.vlan[i] == (-1 if info.vlan is None else info.vlan)
    assert cols.ip_version[i] == (info.ip_version or 0)
    assert cols.proto[i] == (-1 if info.proto is None else info.proto)
    assert cols.src_port[i] == (-1 if info.src_port is None else info.src_port)
    assert cols.dst_port[i] == (-1 if info.dst_port is None else info.dst_port)
    assert cols.tcp[i] == (info.proto == 6)
    assert cols.udp[i] == (info.proto == 17)
    assert (cols.roce[i], cols.cnp[i]) == (info.roce, info.cnp)
    assert cols.bth_opcode[i] == (-1 if info.bth_opcode is None else info.bth_opcode)
    assert cols.dest_qp[i] == (-1 if info.dest_qp is None else info.dest_qp)
    assert cols.psn[i] == (-1 if info.psn is None else info.psn)
    assert cols.aeth_syndrome[i] == (-1 if info.aeth_syndrome is None else info.aeth_syndrome)
    if info.src_mac:
        assert cols.has_src_mac[i]
        assert int(cols.src_mac[i]) == int.from_bytes(info.src_mac, "big")
    if info.dst_mac:
        assert cols.has_dst_mac[i]
        assert int(cols.dst_mac[i]) == int.from_bytes(info.dst_mac, "big")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decode_columns_agrees_with_decode_frame(data: st.DataObject) -> None:
    link_type = data.draw(st.sampled_from(LINK_TYPES))
    frames = [
        f[: data.draw(st.integers(0, len(f)))] if data.draw(st.booleans()) else f
        for f in data.draw(st.lists(frame_bytes(link_type), min_size=1, max_size=16))
    ]
    # Frames back to back in one buffer, as in a ring block: bytes past a frame's captured
    # length belong to the next frame and must not be read as its own.
    buf = b"".join(frames)
    offs = np.cumsum([0] + [len(f) for f in frames[:-1]], dtype=np.int64)
    caps = np.array([len(f) for f in frames], dtype=np.int64)
    cols = pcap_mod.decode_columns(buf, offs, caps, link_type)
    for i, f in enumerate(frames):
        _frame_columns_match(cols, i, decode_frame(f, link_type))
    ip = cols.ip_version > 0
    infos = [decode_frame(f, link_type) for f in frames]
    flows = {
        (x.proto, x.src_ip, x.src_port, x.dst_ip, x.dst_port)
        for x in infos
        if x is not None and x.ip_version is not None
    }
    # (InfiniBand: the destination LID stands for the address)
    qps = {(x.dst_ip or x.dst_mac, x.dest_qp) for x in infos if x is not None and x.roce}
    assert np.unique(cols.flow_key[ip]).size == len(flows)
    assert np.unique(cols.qp_key[cols.roce]).size == len(qps)


def test_decode_columns_api() -> None:
    frames = [
        bytes(roce4(qp=0x11)),
        bytes(roce4(qp=0x11, psn=5)),
        bytes(cnp4(0x33)),
        bytes(tcp4(L4, P4, 1, 2)),
        bytes.fromhex("02000000000102000000000908"),
    ]  # a 13-byte runt; fmt: skip
    buf = bytearray(b"".join(frames))
    offs = np.cumsum([0] + [len(f) for f in frames[:-1]])
    caps = np.array([len(f) for f in frames])
    for b in (bytes(buf), buf, memoryview(buf)):
        cols = pcap_mod.decode_columns(b, offs, caps, 1)
        assert cols.decoded.tolist() == [True, True, True, True, False]
        assert cols.decoded.dtype == np.bool_
        assert cols.ip_version.dtype == np.uint8
        assert cols.proto.dtype == np.int16
        assert cols.src_port.dtype == cols.dst_port.dtype == cols.dest_qp.dtype == np.int32
        assert cols.src_mac.dtype == cols.dst_mac.dtype == np.uint64
        assert cols.flow_key.dtype == np.dtype("V40")
        assert cols.qp_key.dtype == np.dtype("V24")
        assert cols.roce.tolist() == [True, True, True, False, False]
        assert cols.cnp.tolist() == [False, False, True, False, False]
        assert cols.tcp.tolist() == [False, False, False, True, False]
        assert cols.udp.tolist() == [True, True, True, False, False]
        assert cols.dest_qp.tolist() == [0x11, 0x11, 0x33, -1, -1]
        assert cols.psn.dtype == np.int32
        assert cols.psn.tolist() == [0, 5, 0, -1, -1]
        assert cols.proto.tolist() == [17, 17, 17, 6, -1]
        assert np.unique(cols.flow_key[cols.ip_version > 0]).size == 3
        assert np.unique(cols.qp_key[cols.roce]).size == 2
        words = cols.flow_key.view(np.uint64).reshape(-1, 5)
        assert words[0].tolist() == [
            4 << 56 | 17 << 48 | 1 << 40 | 50000 << 16 | 4791,
            0x0A000001,
            0,
            0x0A000002,
            0,
        ]
        assert cols.qp_key.view(np.uint64).reshape(-1, 3)[2].tolist() == [
            4 << 56 | 0x33,
            0x0A000001,
            0,
        ]
        # The runt still has its MACs (direction), as the reader counts them.
        assert cols.has_src_mac.tolist() == [True] * 5
        assert int(cols.src_mac[4]) == 0x020000000009
        assert int(cols.dst_mac[0]) == 0x020000000002
    # Captured lengths past the buffer are cut to it; offsets past it hold nothing.
    cols = pcap_mod.decode_columns(bytes(frames[0]), [0, 10, 500], [10_000, 10_000, 64], 1)
    assert cols.decoded.tolist() == [True, decode_frame(frames[0][10:]) is not None, False]
    assert cols.roce.tolist() == [True, False, False]
    empty = pcap_mod.decode_columns(
        b"", np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 1
    )
    assert empty.decoded.size == empty.flow_key.size == 0
    unknown = pcap_mod.decode_columns(bytes(frames[0]), [0], [len(frames[0])], 147)
    assert not unknown.decoded[0]
    assert not unknown.has_src_mac[0]
    with pytest.raises(ValueError, match="differ in length"):
        pcap_mod.decode_columns(b"", [0, 1], [1], 1)


def test_distinct_rows_is_exact_even_when_hashes_collide() -> None:
    rows = np.array([[1, 2], [3, 4], [1, 2], [5, 6]], dtype=np.uint64)
    same = np.zeros(4, dtype=np.uint64)  # every row "collides"
    got = pcap_mod._distinct_rows(rows, same)
    assert sorted(map(tuple, got.tolist())) == [(1, 2), (3, 4), (5, 6)]
    assert len(pcap_mod._distinct_rows(rows)) == 3


def test_local_mac_ties_go_to_the_first_seen() -> None:
    a, b, zero = bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), bytes(6)
    for frames in (
        [b + a, a + b],  # a and b twice each: a was the first source
        [a + zero, zero + a],  # the all-zero MAC is a MAC
        [b"\xff" * 6 + zero, b"\x01" * 6 + b],  # multicast destinations do not count
    ):
        raw = pcap_bytes(
            [(T0_NS + i, f + b"\x08\x06" + bytes(28), 60) for i, f in enumerate(frames)]
        )
        assert_same_outcome(raw)


def test_read_capture_errors_and_mmap_buffers(tmp_path: Path) -> None:
    """A corrupt file read through mmap raises InputFormatError (the map is still in use by
    numpy views held in the error's frames); decode_columns reads an mmap like bytes."""
    import mmap

    frame = bytes(roce4())
    good = pcap_bytes([(T0_NS, frame, len(frame))] * 3)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(good + struct.pack("<IIII", 1, 0, 300_000, 300_000) + b"\x00" * 16)
    with pytest.raises(InputFormatError, match="record 4: captured length"):
        read_capture(bad)
    bad_ng = tmp_path / "bad.pcapng"
    epb = ng_epb(0, 1, frame, len(frame))
    bad_ng.write_bytes(ng_shb() + ng_idb() + epb + epb[:-4] + b"\x00\x00\x00\x00")
    with pytest.raises(InputFormatError, match="block 4: trailing block length"):
        read_capture(bad_ng)
    ok = tmp_path / "ok.pcap"
    ok.write_bytes(good)
    with ok.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        offs = np.array([24 + 16, 24 + 2 * 16 + len(frame)], dtype=np.int64)
        cols = pcap_mod.decode_columns(mm, offs, np.full(2, len(frame)), 1)
        assert cols.roce.tolist() == [True, True]
    # The columns are copies, not views of the map: it closed above with them alive.
    assert cols.dest_qp.tolist() == [0x11, 0x11]
    assert read_capture(ok).stats.roce_packets == 3


def _sll2(payload: bytes, *, pkttype: int, ifindex: int, mac: bytes) -> bytes:
    """A frame as `tcpdump -i any` writes it (scapy's Linux cooked v2 header)."""
    head = CookedLinuxV2(proto=0x0800, ifindex=ifindex, lladdrtype=1, pkttype=pkttype,
                         lladdrlen=6, src=mac + b"\0\0")  # fmt: skip
    return bytes(head) + payload


def test_cooked_v2_direction_is_the_kernels_packet_type_not_the_mac_guess() -> None:
    ip = bytes(roce4()[IP])
    ours, peer = b"\x02\x00\x00\x00\x00\x01", b"\x02\x00\x00\x00\x00\x02"
    # `tcpdump -i any` on the receiver of a one-way stream: the peer's MAC is the source of
    # most frames, so the MAC guess takes the peer for the capturing host (tx and rx swapped).
    frames = [_sll2(ip, pkttype=0, ifindex=3, mac=peer) for _ in range(5)]
    frames.append(_sll2(ip, pkttype=4, ifindex=3, mac=ours))
    cap = parse_capture(pcap_bytes([(i, f, len(f)) for i, f in enumerate(frames)], linktype=276))
    assert cap.is_tx.tolist() == [False] * 5 + [True]
    assert cap.stats.warnings == ()  # one interface


def test_cooked_v2_capture_of_several_interfaces_warns_of_double_counting() -> None:
    ip = bytes(roce4()[IP])
    mac = b"\x02\x00\x00\x00\x00\x01"
    # The same frame on a tunnel device and on the NIC under it, as `-i any` records it.
    frames = [_sll2(ip, pkttype=4, ifindex=i, mac=mac) for i in (7, 2)]
    cap = parse_capture(pcap_bytes([(i, f, len(f)) for i, f in enumerate(frames)], linktype=276))
    assert cap.is_tx.tolist() == [True, True]
    assert any("2 interfaces" in w and "counted on each" in w for w in cap.stats.warnings)


def _ib_frame(slid: int, dlid: int, size: int = 2076) -> bytes:
    """An InfiniBand RC RDMA WRITE packet as DLT_INFINIBAND records it: LRH (LNH 2, a local
    route: BTH next), BTH, payload."""
    lrh = struct.pack(">BBHHH", 0x00, 0x02, dlid, size // 4, slid)
    bth = struct.pack(">BBHII", 0x0A, 0, 0xFFFF, 0x11, 7)
    return lrh + bth + bytes(size - len(lrh) - len(bth))


def _erf(packet: bytes, *, extensions: int = 0) -> bytes:
    """The packet behind an ERF header of type INFINIBAND (21), as ibdump writes it by
    default, with ``extensions`` 8-byte extension headers (the type's top bit, then each
    header's, says another follows)."""
    kind = 21 | (0x80 if extensions else 0)
    ext = b"".join(bytes([0x80 if i < extensions - 1 else 0x01]) + bytes(7)
                   for i in range(extensions))  # fmt: skip
    head = bytes(8) + struct.pack(">BBHHH", kind, 4, 16 + len(ext) + len(packet), 0, len(packet))
    return head + ext + packet


@pytest.mark.parametrize("erf_extensions", [None, 0, 2])
def test_an_infiniband_capture_tells_the_directions_apart_by_lid(
    erf_extensions: int | None,
) -> None:
    """ibdump records both directions of a port; the LRH's source LID says which frames the
    host sent (the LID seen most, as for MACs). Before, every frame was "received", so a
    bidirectional collective read B at the sum of both directions, and each frame counted
    ibdump's ERF header as wire bytes."""
    ours, peer, third = 3, 1, 9
    frames = [_ib_frame(ours, peer), _ib_frame(peer, ours), _ib_frame(ours, third)] * 4
    if erf_extensions is not None:
        frames = [_erf(f, extensions=erf_extensions) for f in frames]
    linktype = 247 if erf_extensions is None else 197
    cut = 64 if erf_extensions is None else 120
    cap = parse_capture(pcap_bytes([(i, f[:cut], len(f)) for i, f in enumerate(frames)],
                                   linktype=linktype))  # fmt: skip
    assert cap.is_tx.tolist() == [True, False, True] * 4
    # the packets' own bytes: ibdump counts its ERF header in the original length
    assert cap.stats.bytes == 12 * 2076
    assert cap.stats.local_mac is None  # a LID, not a MAC
    # their BTHs are read: RDMA WRITEs to QP 0x11 of three ports
    assert cap.stats.skipped_records == 0
    assert cap.stats.roce_packets == 12
    assert cap.stats.roce_qps == 3
    assert not cap.stats.warnings


def test_an_infiniband_capture_between_two_ports_says_lid_not_mac() -> None:
    """Two ports talking only to each other are seen equally often: which is this host's is a
    guess, and the warning names what was guessed (a LID) and no cure that needs Ethernet."""
    frames = [_ib_frame(3, 1), _ib_frame(1, 3)] * 60
    cap = parse_capture(pcap_bytes([(i, f[:64], len(f)) for i, f in enumerate(frames)],
                                   linktype=247))  # fmt: skip
    (warning,) = cap.stats.warnings
    assert warning.startswith("two ports only: which LID")
    assert "tcpdump" not in warning


def test_a_capture_without_direction_says_that_both_are_counted_as_received() -> None:
    """A raw-IP capture (no MAC, no packet type) of both directions: every frame is counted
    as received, so B reads as the sum of the two. Said, not silently doubled; an Ethernet
    capture of the same exchange has no such warning."""
    ip = bytes(roce4()[IP])
    cap = parse_capture(pcap_bytes([(i, ip, len(ip)) for i in range(6)], linktype=101))
    assert not cap.is_tx.any()
    (warning,) = [w for w in cap.stats.warnings if "carry no direction" in w]
    assert "link type 101" in warning
    assert "twice" in warning

    ours, peer = "02:00:00:00:00:01", "02:00:00:00:00:02"
    eth = [bytes(Ether(src=a, dst=b) / roce4()[IP]) for a, b in ((ours, peer), (peer, ours))]
    cap = parse_capture(pcap_bytes([(i, f, len(f)) for i, f in enumerate(eth * 3)]))
    assert not any("carry no direction" in w for w in cap.stats.warnings)


def test_gzip_compressed_capture_reads_as_the_plain_one(tmp_path: Path) -> None:
    frames = mixed_frames()
    data = pcap_bytes([(1_000_000 * i, f, n) for i, (f, n) in enumerate(frames)])
    plain, packed = tmp_path / "c.pcap", tmp_path / "c.pcap.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    assert_same_capture(read_capture(packed), read_capture(plain))
    # A compressed stream cut short: what it held is read, and the output says so.
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(gzip.compress(data)[: len(gzip.compress(data)) * 2 // 3])
    cap = read_capture(cut)
    assert 0 < cap.stats.packets < len(frames)
    assert any("gzip stream ends early" in w for w in cap.stats.warnings)
    bad = tmp_path / "bad.pcap.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\xff" * 40)
    with pytest.raises(InputFormatError, match="gzip-compressed, but it does not inflate"):
        read_capture(bad)


def test_modified_pcap_is_named_with_its_conversion() -> None:
    data = bytearray(pcap_bytes([(1, b"\x00" * 60, 60)], nano=False))
    data[0:4] = b"\x34\xcd\xb2\xa1"  # editcap -F modpcap, little-endian
    with pytest.raises(InputFormatError, match=r"modified pcap: `editcap -F pcap` converts it"):
        parse_capture(bytes(data))


def test_a_capture_between_two_hosts_says_its_direction_is_a_guess() -> None:
    # Every unicast frame counts once for each MAC: only the odd broadcast decides which one
    # is "this host", so tx and rx may be swapped, and the reader says so.
    out = bytes(Ether(src=LOCAL_MAC, dst=PEER_MAC) / roce4()[IP])
    back = bytes(Ether(src=PEER_MAC, dst=LOCAL_MAC) / ack4(0x1F)[IP])
    frames = [out] * 150 + [back] * 20
    cap = parse_capture(pcap_bytes([(i, f, len(f)) for i, f in enumerate(frames)]))
    assert any(w.startswith("two hosts only") for w in cap.stats.warnings)
    # A third host makes the capturing one plain: it is in every conversation.
    third = bytes(Ether(src=LOCAL_MAC, dst=OTHER_MAC) / roce4(dst=Q4)[IP])
    frames += [third] * 30
    cap = parse_capture(pcap_bytes([(i, f, len(f)) for i, f in enumerate(frames)]))
    assert cap.stats.local_mac == LOCAL_MAC
    assert not any(w.startswith("two hosts only") for w in cap.stats.warnings)


def test_pcapng_packets_whose_time_is_out_of_range_are_kept_untimed() -> None:
    """A real dumpcap file (PcapPlusPlus' pcapng example) wrote a negative time unsigned on its
    second interface (µs units 0xffffffffe1dfd279: past int64 nanoseconds). The whole file was
    rejected; tshark reads all of it. Every packet is kept and counted, those packets without a
    time, the first interface's with theirs, and a warning names the first block."""
    data = bytes(roce4())
    bad_units = 0xFFFFFFFFE1DFD279
    raw = (
        ng_shb()
        + ng_idb(snaplen=256, tsresol=9)
        + ng_idb(snaplen=256)  # microseconds
        + ng_epb(0, T0_NS, data, len(data))
        + ng_epb(1, bad_units, data, len(data))
        + ng_epb(0, T0_NS + 1_000_000, data, len(data))
        + ng_spb(data, len(data))  # takes the last good time, not the bad one
    )
    cap = parse_capture(raw)
    assert cap.stats.packets == 4
    assert cap.stats.bytes == 4 * len(data)
    assert cap.stats.roce_packets == 4
    assert np.isnan(cap.time_s[1])
    assert cap.time_s[[0, 2, 3]] == pytest.approx(
        [T0_NS / 1e9, T0_NS / 1e9 + 1e-3, T0_NS / 1e9 + 1e-3], abs=1e-6
    )
    note = next(w for w in cap.stats.warnings if "out of range" in w)
    assert "block 5" in note
    assert "interface 1" in note
    assert "kept without a time" in note


def test_a_pcap_header_of_another_format_version_is_read_with_a_warning() -> None:
    """libpcap writes 2.4 since 1998; a file saying otherwise is read, and the user told."""
    frames = [bytes(roce4()) for _ in range(3)]
    good = pcap_bytes([(T0_NS + i, f, len(f)) for i, f in enumerate(frames)])
    odd = good[:4] + struct.pack("<HH", 2, 2) + good[8:]
    ok, cap = parse_capture(good), parse_capture(odd)
    assert cap.stats.packets == ok.stats.packets == 3
    assert cap.stats.bytes == ok.stats.bytes
    assert not ok.stats.warnings
    assert any("format version 2.2" in w for w in cap.stats.warnings)
