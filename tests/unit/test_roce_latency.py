"""RC ACK round-trip latency from a capture (collectors.pcap): hand-built exchanges, exact.

Every frame is built with scapy (``scapy.contrib.roce``: BTH, AETH, valid ICRC); the expected
latencies are computed by hand from the frame times below.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

import collectors.pcap as pcap_mod
from collectors.pcap import AckLatency, merge_ack_samples, parse_capture, read_capture

L_MAC, P_MAC, Q_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"
L4, P4, Q4 = "10.0.0.1", "10.0.0.2", "10.0.0.3"
MACS = {L4: L_MAC, P4: P_MAC, Q4: Q_MAC}
T0 = 1_700_000_000 * 1_000_000_000
US = 1_000


def req(src: str, dst: str, psn: int, *, opcode: int = 0x0A, qp: int = 0x22) -> Packet:
    """An RC request (default RDMA WRITE only with immediate) of 64 payload bytes."""
    return (
        Ether(src=MACS[src], dst=MACS[dst])
        / IP(src=src, dst=dst)
        / UDP(sport=50000, dport=4791, chksum=0)
        / BTH(opcode=opcode, dqpn=qp, psn=psn)
        / Raw(b"\x00" * 64)
    )


def ack(src: str, dst: str, psn: int, *, syndrome: int = 0x1F, qp: int = 0x11) -> Packet:
    """An RC ACKNOWLEDGE (syndrome 0x1F: ACK, credits 31; 0x60: PSN sequence NAK)."""
    return (
        Ether(src=MACS[src], dst=MACS[dst])
        / IP(src=src, dst=dst)
        / UDP(sport=50001, dport=4791, chksum=0)
        / BTH(opcode=0x11, dqpn=qp, psn=psn)
        / AETH(syndrome=syndrome, msn=1)
    )


def pcap_ns(records: list[tuple[int, Packet]]) -> bytes:
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
    for t_ns, pkt in records:
        data = bytes(pkt)
        sec, frac = divmod(t_ns, 1_000_000_000)
        out += struct.pack("<IIII", sec, frac, len(data), len(data)) + data
    return bytes(out)


def exchanges() -> list[tuple[int, Packet]]:
    """Local host 10.0.0.1 (most frames), peers 10.0.0.2 and 10.0.0.3. Times in µs from T0."""
    at: list[tuple[float, Packet]] = []
    # Local requester, coalesced ACKs: requests PSN 100..107 at 0..7 µs; ACK 103 at 10 µs
    # (covers 100-103: one sample, 10 - 3 = 7 µs); ACK 107 at 20 µs (20 - 7 = 13 µs).
    at += [(float(k), req(L4, P4, 100 + k)) for k in range(8)]
    at += [(10.0, ack(P4, L4, 103)), (20.0, ack(P4, L4, 107))]
    # Frames that must not be taken for PSN 103's request: the same PSN to another peer, and
    # an RDMA READ response (opcode 0x10, the requester's PSN space) from the peer.
    at += [(5.0, req(L4, Q4, 103)), (6.0, req(P4, L4, 103, opcode=0x10))]
    # A retransmitted PSN: the last transmission before the ACK counts (45 - 40 = 5 µs).
    at += [(30.0, req(L4, P4, 108)), (40.0, req(L4, P4, 108)), (45.0, ack(P4, L4, 108))]
    # A NAK: counted as a NAK, no latency sample.
    at += [(46.0, req(L4, P4, 109)), (47.0, ack(P4, L4, 109, syndrome=0x60))]
    # An ACK whose request was not captured: ignored.
    at += [(50.0, ack(P4, L4, 500))]
    # Remote requester: the peer's request in, our ACK out (61.5 - 60 = 1.5 µs).
    at += [(60.0, req(P4, L4, 7000, qp=0x11)), (61.5, ack(L4, P4, 7000, qp=0x22))]
    # The request after its "ACK": no sample. A request older than the window: no sample.
    at += [(70.0, ack(P4, L4, 300)), (71.0, req(L4, P4, 300))]
    at += [(80.0, req(L4, P4, 900)), (80.0 + 1.5e6, ack(P4, L4, 900))]
    at.sort(key=lambda x: x[0])
    return [(T0 + round(t * US), pkt) for t, pkt in at]


LOCAL_US = [7.0, 13.0, 5.0]
REMOTE_US = [1.5]


def pct(values_us: list[float]) -> tuple[float, float, float]:
    p50, p90, p99 = np.percentile(np.array(values_us) * 1e-6, [50, 90, 99])
    return float(p50), float(p90), float(p99)


def check(lat: AckLatency | None, values_us: list[float]) -> None:
    assert lat is not None
    assert lat.samples == len(values_us)
    np.testing.assert_allclose((lat.p50, lat.p90, lat.p99), pct(values_us), rtol=1e-9)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7, 1 << 16])
def test_ack_latency_exact(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Coalesced ACKs, a retransmission, a NAK, an unmatched ACK, both requester sides; the
    same answer whatever the record chunk size (pairs split across chunk edges)."""
    monkeypatch.setattr(pcap_mod, "_CHUNK", chunk)
    cap = parse_capture(pcap_ns(exchanges()))
    s = cap.stats
    assert s.local_mac == L_MAC
    assert (s.roce_acks, s.roce_naks, s.roce_seq_naks) == (7, 1, 1)
    check(s.ack_latency_s, LOCAL_US + REMOTE_US)
    check(s.ack_latency_local_requester_s, LOCAL_US)
    check(s.ack_latency_remote_requester_s, REMOTE_US)
    assert cap.ack_samples is not None
    assert sorted(cap.ack_samples.latency_ns.tolist()) == [1500, 5000, 7000, 13000]


def test_out_of_order_records_and_equal_times() -> None:
    """Records out of time order are matched in time order; at equal times, file order."""
    recs = exchanges()
    shuffled = recs[::-1]
    assert (
        parse_capture(pcap_ns(shuffled)).stats.ack_latency_s
        == parse_capture(pcap_ns(recs)).stats.ack_latency_s
    )
    # A request stamped at the ACK's very time counts when it comes first in the file.
    same = [(T0, req(L4, P4, 1)), (T0, ack(P4, L4, 1)), (T0 + US, ack(P4, L4, 2))]
    same += [(T0 + US, req(L4, P4, 2))]
    s = parse_capture(pcap_ns(same)).stats
    assert s.ack_latency_s == AckLatency(0.0, 0.0, 0.0, 1)


def test_no_acks_no_latency(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(pcap_ns([(T0 + k, req(L4, P4, k)) for k in range(10)]))
    cap = read_capture(path)
    assert cap.stats.ack_latency_s is None
    assert cap.stats.ack_latency_local_requester_s is None
    assert cap.ack_samples is None


def test_no_macs_pools_both_sides() -> None:
    """Raw IP (no MACs): the requester side is unknown; the pooled percentiles remain."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 101))
    for t_ns, pkt in exchanges():
        data = bytes(pkt)[14:]
        sec, frac = divmod(t_ns, 1_000_000_000)
        out += struct.pack("<IIII", sec, frac, len(data), len(data)) + data
    s = parse_capture(bytes(out)).stats
    assert s.local_mac is None
    check(s.ack_latency_s, LOCAL_US + REMOTE_US)
    assert s.ack_latency_local_requester_s is None
    assert s.ack_latency_remote_requester_s is None


def test_carry_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request further back than the carry, chunks before its ACK, is not matched."""
    monkeypatch.setattr(pcap_mod, "_CHUNK", 4)
    monkeypatch.setattr(pcap_mod, "ACK_CARRY", 3)
    recs = [(T0, req(L4, P4, 1))] + [(T0 + k * US, req(L4, P4, 10 + k)) for k in range(1, 9)]
    recs += [(T0 + 10 * US, ack(P4, L4, 1)), (T0 + 11 * US, ack(P4, L4, 18))]
    s = parse_capture(pcap_ns(recs)).stats
    assert s.ack_latency_s == AckLatency(3e-6, 3e-6, 3e-6, 1)


def test_samples_kept_are_bounded_and_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most ACK_SAMPLES_KEPT samples, the same ones each run; merging keeps the bound."""
    monkeypatch.setattr(pcap_mod, "ACK_SAMPLES_KEPT", 5)
    monkeypatch.setattr(pcap_mod, "_CHUNK", 8)
    recs: list[tuple[int, Packet]] = []
    for k in range(40):
        recs += [(T0 + 100 * k * US, req(L4, P4, k)), (T0 + (100 * k + k + 1) * US, ack(P4, L4, k))]
    a = parse_capture(pcap_ns(recs))
    b = parse_capture(pcap_ns(recs))
    assert a.ack_samples is not None
    assert b.ack_samples is not None
    assert a.ack_samples.latency_ns.size == 5
    assert a.ack_samples.latency_ns.tolist() == b.ack_samples.latency_ns.tolist()
    assert a.stats.ack_latency_s is not None
    assert a.stats.ack_latency_s.samples == 40
    merged = merge_ack_samples([a.ack_samples, b.ack_samples])
    assert (merged.matched, merged.local_matched, merged.latency_ns.size) == (80, 80, 5)
    assert merge_ack_samples([]).percentiles() is None
