"""Tests of agent.simulator.pcap_writer: the synthetic RoCEv2 capture, read back two ways.

``collectors.pcap`` checks the byte and packet truth bin by bin; scapy (an independent decoder)
checks that the frames are real RoCEv2 with valid ICRCs.
"""

from __future__ import annotations

import itertools
import struct
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import rdpcap

from agent.analyze import analyze_files
from agent.errors import ConfigError
from agent.simulator import pcap_writer
from agent.simulator.pcap_writer import write_roce_pcap
from collectors.pcap import bin_bytes, decode_frame, read_capture

START = 1_700_000_000.25
START_NS = 1_700_000_000_250_000_000
FRAME = 4154


def expected_bins(bursts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bytes per bin if every burst were a perfect fluid at its rate."""
    out = np.zeros(edges.size - 1)
    for start, end, rate in bursts:
        lo = np.maximum(edges[:-1], start)
        hi = np.minimum(edges[1:], end)
        out += rate * np.clip(hi - lo, 0, None)
    return out


def overlapping(bursts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How many bursts touch each bin (each may be off by up to one frame there)."""
    n = np.zeros(edges.size - 1)
    for start, end, _ in bursts:
        n += (edges[1:] > start) & (edges[:-1] < end)
    return n


def test_round_trip_bins_and_totals(tmp_path: Path) -> None:
    tx_b = np.array([[0.000, 0.010, 2.0e8], [0.005, 0.020, 1.0e8], [0.030, 0.0337, 3.0e8]])
    rx_b = np.array([[0.002, 0.025, 1.5e8]])
    path = tmp_path / "roce.pcap"
    n = write_roce_pcap(
        path, tx_b, rx_b, start_time_s=START, peer_ips=("10.0.0.2", "10.0.0.3", "10.0.0.4")
    )
    cap = read_capture(path)
    s = cap.stats
    assert s.packets == n == cap.length.size
    assert s.roce_packets == n
    assert s.cnp_packets == 0
    assert s.roce_qps == 6
    assert s.flows == 6
    assert s.udp_bytes == s.bytes
    assert s.tcp_bytes == 0
    assert s.skipped_records == 0
    assert not s.truncated
    assert s.warnings == ()
    assert s.local_mac == "02:00:0a:00:00:01"
    assert s.link_type == 1
    assert cap.time_ns is not None
    assert cap.time_ns[0] == START_NS  # the first frame sits at the first burst's start
    assert np.all(np.diff(cap.time_ns) >= 0)  # global time order

    # Whole-capture truth: each burst carries rate*duration bytes within one frame.
    for bursts, sel in ((tx_b, cap.is_tx), (rx_b, ~cap.is_tx)):
        truth = float((bursts[:, 2] * (bursts[:, 1] - bursts[:, 0])).sum())
        total = float(cap.length[sel].sum())
        assert abs(total - truth) <= 60 * len(bursts), (total, truth)
        assert (cap.length[sel] <= FRAME).all()

    edges = np.arange(0.0, 0.0405, 0.001)
    tx, rx = bin_bytes(cap, t0=START, bin_s=0.001, n_bins=edges.size - 1)
    for got, bursts in ((tx, tx_b), (rx, rx_b)):
        want = expected_bins(bursts, edges)
        tol = FRAME * np.maximum(overlapping(bursts, edges), 1)
        assert np.all(np.abs(got - want) <= tol), np.max(np.abs(got - want) - tol)
    assert tx[12] == pytest.approx(1.0e8 * 0.001, abs=FRAME)  # only the second burst here
    assert tx[25:30].sum() == 0.0
    assert rx[26:].sum() == 0.0


def test_frames_are_rocev2_for_scapy_with_consecutive_psns(tmp_path: Path) -> None:
    path = tmp_path / "small.pcap"
    n = write_roce_pcap(
        path,
        np.array([[0.0, 0.001, 1e8]]),
        np.array([[0.0, 0.001, 5e7]]),
        start_time_s=START,
        peer_ips=("10.0.0.2", "10.0.0.3"),
        seed=7,
    )
    pkts = rdpcap(str(path))
    assert len(pkts) == n
    psns: dict[tuple[str, int], list[int]] = defaultdict(list)
    for p in pkts:
        assert p.haslayer(BTH)
        assert p[UDP].dport == 4791
        assert p[BTH].opcode == 0x07  # RC RDMA WRITE MIDDLE
        assert len(bytes(p)) == 128  # cut at the snaplen
        psns[(p[IP].dst, p[BTH].dqpn)].append(p[BTH].psn)
    assert len(psns) == 4
    for seq in psns.values():
        assert all((b - a) % (1 << 24) == 1 for a, b in itertools.pairwise(seq))
    # Round-robin: each tx peer gets half of the tx frames (within one).
    by_peer = {k: len(v) for k, v in psns.items() if k[0] != "10.0.0.1"}
    assert max(by_peer.values()) - min(by_peer.values()) <= 1


def _icrc_valid(frame: bytes) -> bool:
    p = Ether(frame)
    p[BTH].icrc = None
    return bytes(p) == frame


def test_uncut_frames_carry_valid_icrc_after_psn_patching(tmp_path: Path) -> None:
    path = tmp_path / "full.pcap"
    # 10.5 frames of tx: ten full frames and one shorter one; CNPs every 4 data frames.
    tx_b = np.array([[0.0, 1e-3, 10.5 * 1054 * 1e3]])
    rx_b = np.array([[0.0, 1e-3, 3 * 1054 * 1e3]])
    n = write_roce_pcap(
        path, tx_b, rx_b, start_time_s=START, frame_bytes=1054, snaplen=2048, cnp_every=4
    )
    assert n == 11 + 3 + 14 // 4
    raw = path.read_bytes()
    magic, major, minor, _, _, snaplen, linktype = struct.unpack_from("<IHHiIII", raw)
    assert (magic, major, minor, snaplen, linktype) == (0xA1B23C4D, 2, 4, 2048, 1)
    pkts = rdpcap(str(path))
    lengths = sorted(len(bytes(p)) for p in pkts)
    assert lengths.count(1054) == 13
    assert 1054 // 2 - 60 <= lengths[3] <= 1054 // 2 + 4  # the shorter last tx frame
    assert lengths[:3] == [74, 74, 74]  # CNPs: Ether/IPv4/UDP/BTH/16-byte padding/ICRC
    for p in pkts:
        frame = bytes(p)
        assert _icrc_valid(frame), p.summary()
        info = decode_frame(frame)
        assert info is not None
        assert info.roce
        if len(frame) == 74:
            assert info.cnp
            assert p.haslayer(CNPPadding)
            assert info.dst_ip == "10.0.0.1"  # CNPs come from the peer
    cap = read_capture(path)
    assert (cap.stats.cnp_packets, cap.stats.roce_qps, cap.stats.flows) == (3, 2, 2)
    assert int(cap.is_tx.sum()) == 11


def test_resize_frame_matches_scapy() -> None:
    def build(payload: int) -> bytes:
        return bytes(
            Ether(src="02:00:0a:00:00:01", dst="02:00:0a:00:00:02")
            / IP(src="10.0.0.1", dst="10.0.0.2", tos=0x6A, ttl=64, id=0, flags="DF")
            / UDP(sport=50000, dport=4791, chksum=0)
            / BTH(opcode=7, dqpn=0x1234, psn=77)
            / Raw(b"\x00" * payload)
        )

    full = build(1000)
    for payload in (0, 3, 500):
        assert pcap_writer._resize_frame(full, 58 + payload, 4) == build(payload)

    def build6(payload: int) -> bytes:
        return bytes(
            Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
            / IPv6(src="fd00::1", dst="fd00::2", tc=0x6A, hlim=64)
            / UDP(sport=50000, dport=4791, chksum=0)
            / BTH(opcode=7, dqpn=0x1234, psn=77)
            / Raw(b"\x00" * payload)
        )

    assert pcap_writer._resize_frame(build6(1000), 78 + 10, 6) == build6(10)


def test_ipv6_capture(tmp_path: Path) -> None:
    path = tmp_path / "v6.pcap"
    n = write_roce_pcap(
        path,
        np.array([[0.0, 1e-4, 4.174e8]]),
        np.zeros((0, 3)),
        start_time_s=START,
        local_ip="fd00::1",
        peer_ips=("fd00::2",),
        frame_bytes=4174,
        snaplen=9000,
    )
    assert n == 10
    for p in rdpcap(str(path)):
        assert _icrc_valid(bytes(p))
    cap = read_capture(path)
    assert (cap.stats.roce_packets, cap.stats.bytes) == (10, 41740)
    assert cap.is_tx.all()
    info = decode_frame(path.read_bytes()[24 + 16 :])
    assert info is not None
    assert (info.ip_version, info.src_ip, info.dst_ip) == (6, "fd00::1", "fd00::2")


def test_empty_bursts_write_a_header_only_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pcap"
    assert write_roce_pcap(path, np.zeros((0, 3)), np.array([]), start_time_s=START) == 0
    assert path.stat().st_size == 24
    assert read_capture(path).stats.packets == 0


def test_max_packets_refused_with_a_useful_message(tmp_path: Path) -> None:
    # 1e8 B/s for 1 s: 24073 full frames of 4154 bytes and one of the 758 bytes left.
    with pytest.raises(ConfigError, match=r"would hold 24074 packets.*lower the bandwidth"):
        write_roce_pcap(
            tmp_path / "big.pcap",
            np.array([[0.0, 1.0, 1e8]]),
            np.zeros((0, 3)),
            start_time_s=START,
            max_packets=1000,
        )
    assert not (tmp_path / "big.pcap").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bursts_tx": np.ones((2, 2))}, "shape"),
        ({"bursts_tx": np.array([[0.0, 1.0, -5.0]])}, "negative rate"),
        ({"bursts_tx": np.array([[1.0, 0.5, 5.0]])}, "ends before"),
        ({"bursts_tx": np.array([[0.0, np.nan, 5.0]])}, "NaN"),
        ({"local_ip": "10.0.0.300"}, "bad IP"),
        ({"peer_ips": ("fd00::2",)}, "IPv4 or all IPv6"),
        ({"peer_ips": ("10.0.0.1",)}, "distinct"),
        ({"peer_ips": ()}, "at least one peer"),
        ({"frame_bytes": 40}, "frame_bytes"),
        ({"snaplen": 0}, "snaplen"),
        ({"cnp_every": -1}, "cnp_every"),
        ({"ack_every": -1}, "ack_every"),
        ({"ack_every": 8, "ack_delay_s": -1e-6}, "ack_delay_s"),
        ({"ack_every": 8, "ack_jitter_s": np.inf}, "ack_jitter_s"),
        ({"start_time_s": -1.0}, "between 1970 and 2106"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "bursts_tx": np.array([[0.0, 1e-4, 1e8]]),
        "bursts_rx": np.zeros((0, 3)),
        "start_time_s": START,
    }
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        write_roce_pcap(tmp_path / "x.pcap", **args)  # type: ignore[arg-type]


def test_acks_coalesce_and_carry_the_psn_of_the_frame_they_acknowledge(tmp_path: Path) -> None:
    """One ACK per 4 transmit frames of a queue pair and after each burst, at a fixed delay."""
    path = tmp_path / "acks.pcap"
    # Two bursts of 10 and 3 frames to each of two peers (round-robin), 5 receive frames.
    tx_b = np.array([[0.0, 1e-3, 20 * 1054 * 1e3], [0.01, 0.011, 6 * 1054 * 1e3]])
    rx_b = np.array([[0.0, 1e-3, 5 * 1054 * 1e3]])
    kw = {"start_time_s": START, "frame_bytes": 1054, "snaplen": 2048}
    kw["peer_ips"] = ("10.0.0.2", "10.0.0.3")
    n_plain = write_roce_pcap(tmp_path / "plain.pcap", tx_b, rx_b, **kw)  # type: ignore[arg-type]
    n = write_roce_pcap(
        path,
        tx_b,
        rx_b,
        ack_every=4,
        ack_delay_s=7e-6,
        ack_jitter_s=0.0,
        **kw,  # type: ignore[arg-type]
    )
    # Per peer and burst: 10 frames -> ACKs after frames 4, 8 and 10; 3 frames -> after 3 (the
    # PSN sequence runs on across bursts: frames 11-13 of the QP, ACKs after 12 and 13).
    assert n == n_plain + 2 * (3 + 2) == 31 + 10
    pkts = rdpcap(str(path))
    sent: dict[tuple[str, int], int] = {}  # (peer, PSN) -> time
    acks = []
    for p in pkts:
        frame = bytes(p)
        assert _icrc_valid(frame), p.summary()
        if p[BTH].opcode == 0x07 and p[IP].src == "10.0.0.1":
            sent[(p[IP].dst, p[BTH].psn)] = int(p.time * 10**6)
        if p[BTH].opcode == 0x11:
            assert p.haslayer(AETH)
            assert p[AETH].syndrome == 0x1F
            assert p[IP].dst == "10.0.0.1"
            assert len(frame) == 62
            acks.append((p[IP].src, p[BTH].psn, int(p.time * 10**6)))
    assert len(acks) == 10
    for peer, psn, t_us in acks:
        assert t_us - sent[(peer, psn)] == 7  # µs (pcap times read back as µs here)
    cap = read_capture(path)
    s = cap.stats
    assert s.roce_acks == 10
    assert s.ack_latency_s is not None
    assert s.ack_latency_s.samples == 10
    assert s.ack_latency_s.p50 == s.ack_latency_s.p99 == pytest.approx(7e-6, abs=1e-9)
    assert s.ack_latency_remote_requester_s is None
    assert s.ack_latency_local_requester_s == s.ack_latency_s
    assert read_capture(tmp_path / "plain.pcap").stats.ack_latency_s is None


def test_ack_latency_percentiles_recovered_by_read_capture_and_analyze(tmp_path: Path) -> None:
    """ACK delay 5 µs + Exp(mean 2 µs): P50 = 5 + 2 ln 2, P99 = 5 + 2 ln 100 µs. About 10,000
    samples over two captures: the P50 estimate's spread is ~0.03 µs and the P99's ~0.2 µs,
    so 0.1 µs and 0.8 µs (4 sigma) are the tolerances."""
    d, j = 5e-6, 2e-6
    p50, p99 = d + j * np.log(2), d + j * np.log(100)
    paths = []
    for k in range(2):
        path = tmp_path / f"c{k}.pcap"
        write_roce_pcap(
            path,
            np.array([[0.0, 0.2, 1e9]]),  # 48,147 frames of 4154 bytes (the last shorter)
            np.zeros((0, 3)),
            start_time_s=START + k,
            peer_ips=("10.0.0.2", "10.0.0.3", "10.0.0.4"),
            ack_every=8,
            ack_delay_s=d,
            ack_jitter_s=j,
            seed=k,
        )
        paths.append(path)
    caps = [read_capture(p) for p in paths]
    for cap in caps:
        lat = cap.stats.ack_latency_s
        assert lat is not None
        # 48,147 frames, 16,049 per peer: every 8th (2,006) and the last of the burst.
        assert lat.samples == cap.stats.roce_acks == 3 * 2007
        assert lat.p50 == pytest.approx(p50, abs=0.15e-6)
        assert lat.p99 == pytest.approx(p99, abs=1.2e-6)
        assert lat.p50 < lat.p90 < lat.p99
    out = analyze_files(pcaps=paths).extra["capture"]
    samples = sum(c.stats.ack_latency_s.samples for c in caps if c.stats.ack_latency_s)
    assert out["ack_latency_samples"] == samples
    assert out["ack_latency_s"]["p50"] == pytest.approx(p50, abs=0.1e-6)
    assert out["ack_latency_s"]["p99"] == pytest.approx(p99, abs=0.8e-6)
    assert out["ack_latency_local_requester_s"] == out["ack_latency_s"]
    assert out["ack_latency_remote_requester_s"] == {"p50": None, "p90": None, "p99": None}
    assert out["roce_acks"] == samples
