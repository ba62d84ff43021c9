"""Live capture without a socket: ring blocks laid out exactly as the kernel lays them out.

The layout follows linux/if_packet.h and net/packet/af_packet.c (TPACKET_V3): a 48-byte
``tpacket_block_desc``, the first frame at ``offset_to_first_pkt`` = 48; each frame a 48-byte
``tpacket3_hdr`` followed by a ``sockaddr_ll``, the frame's network header at
``TPACKET_ALIGN(68 + max(maclen, 16))``, its link header ``maclen`` bytes before that, and the
next frame ``ALIGN(tp_mac + snaplen, 8)`` further on (0 for the last frame of the block).
"""

from __future__ import annotations

import math
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from agent.clock import FakeClock
from agent.errors import ConfigError, SourceError, SourceUnavailable
from collectors import packet_capture as pc
from collectors._base import CounterReading, DeviceInfo, SourceStats
from collectors.packet_capture import (
    BlockFrames,
    ByteBinner,
    CaptureConfig,
    TrafficTally,
    capture_filter,
    parse_block,
)
from collectors.pcap import LINKTYPE_ETHERNET, LINKTYPE_RAW, decode_columns

BLOCK = 1 << 16  # a small block keeps the fixtures light; the layout is the same


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def kernel_block(
    frames: list[tuple[bytes, int, int, int, int]],
    *,
    snaplen: int = 128,
    maclen: int = 14,
    size: int = BLOCK,
) -> bytearray:
    """One ring block holding ``frames``: (frame bytes, time ns, wire length, status, pkttype).

    ``frame bytes`` is the whole frame as it left the link layer; the block keeps the first
    ``snaplen`` bytes, as the capture filter asks.
    """
    buf = bytearray(size)
    pos = 48
    prev = None
    for data, t_ns, wire, status, pkttype in frames:
        net = _align(68 + max(maclen, 16), 16)
        mac = net - maclen
        kept = data[:snaplen]
        struct.pack_into(
            "=IIIIIIHHIIHH", buf, pos, 0, t_ns // 10**9, t_ns % 10**9, len(kept), wire,
            status | 1, mac, net, 0, 0, 0, 0,
        )  # fmt: skip
        # sockaddr_ll: family, protocol, ifindex, hatype, pkttype, halen, addr
        struct.pack_into("=HHiHBB8s", buf, pos + 48, 17, 0x0008, 3, 1, pkttype, 6, b"\x02" * 6)
        buf[pos + mac : pos + mac + len(kept)] = kept
        if prev is not None:
            struct.pack_into("=I", buf, prev, pos - prev)
        prev = pos
        pos += _align(mac + len(kept), 8)
    # block_desc: version, offset_to_priv, block_status, num_pkts, offset_to_first_pkt, blk_len
    struct.pack_into("=IIIIII", buf, 0, 3, 0, pc.TP_STATUS_USER, len(frames), 48, pos)
    return buf


T0 = 1_800_000_000 * 10**9
ROCE = bytes(
    Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    / IP(src="10.0.0.1", dst="10.0.0.2")
    / UDP(sport=49152, dport=4791)
    / BTH(opcode=0x04, dqpn=0x11, psn=7)
    / (b"\x00" * 1024)
)
CNP = bytes(
    Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
    / IP(src="10.0.0.2", dst="10.0.0.1")
    / UDP(sport=49153, dport=4791)
    / cnp(0x22)
)
SEQ_NAK = bytes(
    Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
    / IP(src="10.0.0.2", dst="10.0.0.1")
    / UDP(sport=49153, dport=4791)
    / BTH(opcode=0x11, dqpn=0x33, psn=9)
    / AETH(syndrome=0x60)
)
TCP_V6 = bytes(
    Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    / IPv6(src="fd00::1", dst="fd00::2")
    / TCP(sport=40000, dport=5201)
    / (b"\x00" * 8000)
)


def test_parse_block_reads_times_wire_lengths_and_direction() -> None:
    buf = kernel_block(
        [
            (ROCE, T0, len(ROCE), 0, 0),
            (CNP, T0 + 1500, len(CNP), 0, pc.PACKET_OUTGOING),
            # a TSO-sized frame whose VLAN tag the NIC stripped: the tag counts back in
            (TCP_V6, T0 + 2_000_000, 65_000, pc.TP_STATUS_VLAN_VALID, 0),
        ]
    )
    frames = parse_block(buf, 0, len(buf))
    assert frames.complete
    assert frames.time_ns.tolist() == [T0, T0 + 1500, T0 + 2_000_000]
    assert frames.length.tolist() == [len(ROCE), len(CNP), 65_004]
    assert frames.outgoing.tolist() == [False, True, False]
    assert frames.caplen.tolist() == [128, len(CNP), 128]
    cols = decode_columns(buf, frames.data_off, frames.caplen, LINKTYPE_ETHERNET)
    assert cols.decoded.tolist() == [True, True, True]
    assert cols.roce.tolist() == [True, True, False]
    assert cols.cnp.tolist() == [False, True, False]
    assert cols.tcp.tolist() == [False, False, True]
    assert cols.ip_version.tolist() == [4, 4, 6]


def test_parse_block_from_the_network_header_for_other_link_types() -> None:
    # IPoIB / tun: commpulse decodes from tp_net, as raw IP; 4-byte link header here
    payload = ROCE[14:]
    buf = kernel_block([(b"\x00\x00\x08\x00" + payload, T0, 4 + len(payload), 0, 0)], maclen=4)
    frames = parse_block(buf, 0, len(buf), link_header=False)
    assert frames.caplen.tolist() == [124]
    cols = decode_columns(buf, frames.data_off, frames.caplen, LINKTYPE_RAW)
    assert cols.roce.tolist() == [True]


def test_parse_block_at_an_offset_in_the_ring() -> None:
    ring = bytearray(BLOCK) + kernel_block([(ROCE, T0, len(ROCE), 0, 0)])
    frames = parse_block(ring, BLOCK, BLOCK)
    assert frames.length.tolist() == [len(ROCE)]
    assert frames.data_off[0] > BLOCK


def test_parse_block_stops_at_a_frame_chain_leaving_the_block() -> None:
    buf = kernel_block([(ROCE, T0, len(ROCE), 0, 0), (CNP, T0, len(CNP), 0, 0)])
    struct.pack_into("=I", buf, 48, BLOCK * 4)  # first frame's tp_next_offset points outside
    frames = parse_block(buf, 0, len(buf))
    assert not frames.complete
    assert frames.length.tolist() == [len(ROCE)]


def reference_parse_block(
    buf: bytearray, offset: int, size: int, *, link_header: bool = True
) -> BlockFrames:
    """The frame walk written plainly, one frame at a time (what parse_block must equal)."""
    end = offset + size
    _v, _p, _s, num, first, _l = struct.unpack_from("=IIIIII", buf, offset)
    rows: list[tuple[int, int, int, int, bool]] = []
    pos, complete = offset + first, True
    for i in range(num):
        if pos + 59 > end:
            complete = False
            break
        nxt, sec, nsec, snap, wire, status, mac, net = struct.unpack_from("=IIIIIIHH", buf, pos)
        start = mac if link_header else net
        if start > snap + mac or pos + mac + snap > end:
            complete = False
            break
        wire += 4 if status & pc.TP_STATUS_VLAN_VALID else 0
        out = buf[pos + 58] == pc.PACKET_OUTGOING
        rows.append((sec * 10**9 + nsec, wire, pos + start, snap - (start - mac), out))
        if i + 1 < num:
            if nxt <= 0:
                complete = False
                break
            pos += nxt
    cols = list(zip(*rows, strict=True)) if rows else [[], [], [], [], []]
    return BlockFrames(
        time_ns=np.array(cols[0], dtype=np.int64),
        length=np.array(cols[1], dtype=np.int64),
        data_off=np.array(cols[2], dtype=np.int64),
        caplen=np.array(cols[3], dtype=np.int64),
        outgoing=np.array(cols[4], dtype=bool),
        complete=complete,
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_parse_block_equals_the_plain_walk_on_corrupt_blocks(data: st.DataObject) -> None:
    frames_in = [(ROCE, T0, len(ROCE), 0, 0), (CNP, T0, len(CNP), 16, 4), (TCP_V6, T0, 9000, 0, 0)]
    buf = kernel_block(frames_in, size=4096)
    for _ in range(data.draw(st.integers(0, 12))):
        i = data.draw(st.integers(0, 700))
        buf[i] = data.draw(st.integers(0, 255))
    link_header = data.draw(st.booleans())
    got = parse_block(buf, 0, len(buf), link_header=link_header)
    want = reference_parse_block(buf, 0, len(buf), link_header=link_header)
    assert got.complete == want.complete
    for name in ("time_ns", "length", "data_off", "caplen", "outgoing"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    if got.data_off.size:
        assert int((got.data_off + got.caplen).max()) <= len(buf)
    decode_columns(buf, got.data_off, got.caplen, LINKTYPE_ETHERNET)  # no exception


# ------------------------------------------------------------------------------------------
# Bins


def test_binner_conserves_bytes_and_emits_every_bin_in_order() -> None:
    b = ByteBinner(["eth0"], 0.01)
    (base,) = b.start(100.0)
    assert base.time_s == pytest.approx(100.0)
    assert base.values == {
        "eth0_tx_bytes": 0,
        "eth0_rx_bytes": 0,
    }
    t = np.array([100.001, 100.004, 100.015, 100.052])
    b.add("eth0", t, np.array([100, 200, 300, 400]), np.array([True, False, True, True]))
    out = b.close_until(100.06)
    assert [round(r.time_s, 3) for r in out] == [100.01, 100.02, 100.03, 100.04, 100.05, 100.06]
    assert [r.values["eth0_tx_bytes"] for r in out] == [100, 400, 400, 400, 400, 800]
    assert [r.values["eth0_rx_bytes"] for r in out] == [200] * 6
    assert b.close_until(100.06) == []  # nothing twice


def test_binner_counts_late_frames_in_the_open_bin_and_scales_samples() -> None:
    b = ByteBinner(["eth0"], 0.01, scale=4)
    b.start(0.0)
    b.close_until(0.05)
    b.add("eth0", np.array([0.012, 0.061]), np.array([10, 20]), np.array([False, False]))
    assert b.late_frames == 1
    out = b.close_until(0.07)
    assert [r.values["eth0_rx_bytes"] for r in out] == [40, 120]


def test_binner_keeps_a_reappearing_device_cumulative() -> None:
    b = ByteBinner(["a"], 0.1)
    b.start(0.0)
    b.add("a", np.array([0.05]), np.array([10]), np.array([True]))
    b.close_until(0.2)
    b.add_device("a")
    b.add_device("b")
    b.add("a", np.array([0.25]), np.array([5]), np.array([True]))
    (r,) = b.close_until(0.3)
    assert r.values["a_tx_bytes"] == 15
    assert r.values["b_tx_bytes"] == 0


# ------------------------------------------------------------------------------------------
# Traffic totals


def _frames(buf: bytearray) -> BlockFrames:
    return parse_block(buf, 0, len(buf))


def test_tally_counts_roce_cnp_naks_flows_and_queue_pairs_scaled() -> None:
    buf = kernel_block(
        [(ROCE, T0, len(ROCE), 0, 0)] * 3
        + [(CNP, T0, len(CNP), 0, 4), (TCP_V6, T0, 9000, 0, 0), (SEQ_NAK, T0, len(SEQ_NAK), 0, 4)]
    )
    tally = TrafficTally(scale=2, window_s=10.0)
    tally.add("eth0", buf, _frames(buf), LINKTYPE_ETHERNET, now_s=5.0)
    assert tally.captured == 6
    assert tally.roce_packets == 10
    assert tally.cnp_packets == 2
    assert tally.nak_packets == 2  # a NAK for a PSN gap: a packet was lost
    assert tally.seq_nak_packets == 2
    assert tally.ack_packets == 0
    assert tally.tcp_bytes == 18_000
    assert tally.packets["eth0"] == [4, 8]
    assert tally.flows == 3  # the NAK shares the CNP's 5-tuple (10.0.0.2:49153 -> :4791)
    assert tally.queue_pairs == 3
    tally.prune(14.0)
    assert tally.flows == 3
    tally.prune(15.5)
    assert tally.flows == 0
    assert tally.queue_pairs == 0


def _rc(opcode: int, psn: int, *, ack: bool) -> bytes:
    """A WRITE request 10.0.0.1 -> .2, or the ACK .2 -> .1 of its PSN."""
    src, dst = ("10.0.0.2", "10.0.0.1") if ack else ("10.0.0.1", "10.0.0.2")
    frame = (
        Ether(src="02:00:00:00:00:0" + dst[-1], dst="02:00:00:00:00:0" + src[-1])
        / IP(src=src, dst=dst)
        / UDP(sport=49152, dport=4791)
        / BTH(opcode=opcode, dqpn=0x11, psn=psn)
    )
    return bytes(frame / AETH(syndrome=0x1F)) if ack else bytes(frame / (b"\x00" * 256))


def test_tally_times_ack_round_trips_across_blocks() -> None:
    # Requests PSN 1..3 in one block; the ACK of 3 (coalesced: covers 1..3) 7 µs after the
    # third in the next block, the ACK of 5 in the block after the request of 4 and 5.
    first = kernel_block([(_rc(0x0A, psn, ack=False), T0 + psn * 1000, 300, 0, 4)
                          for psn in (1, 2, 3)])  # fmt: skip
    second = kernel_block([(_rc(0x11, 3, ack=True), T0 + 3000 + 7000, 62, 0, 0),
                           (_rc(0x0A, 4, ack=False), T0 + 20_000, 300, 0, 4),
                           (_rc(0x0A, 5, ack=False), T0 + 21_000, 300, 0, 4)])  # fmt: skip
    third = kernel_block(
        [
            (_rc(0x11, 5, ack=True), T0 + 21_000 + 1_500_000, 62, 0, 0),
            (_rc(0x11, 9, ack=True), T0 + 30_000_000, 62, 0, 0),
        ]
    )  # no request
    tally = TrafficTally()
    for buf in (first, second, third):
        tally.add("eth0", buf, _frames(buf), LINKTYPE_ETHERNET, now_s=1.0)
    assert tally.ack_packets == 3
    assert tally.ack_latency_sum_ns == 7000 + 1_500_000
    bounds = pc.ACK_LATENCY_BOUNDS
    counts = dict(zip((*bounds, math.inf), tally.ack_latency_counts, strict=True))
    assert counts[1e-5] == 1  # 7 µs: the (5 µs, 10 µs] bucket
    assert counts[2e-3] == 1  # 1.5 ms
    assert sum(tally.ack_latency_counts) == 2


def test_tally_bounds_its_flow_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pc, "MAX_TRACKED_KEYS", 2)
    frames = [
        (
            bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1000 + i, dport=9)),
            T0, 60, 0, 0,
        )
        for i in range(5)
    ]  # fmt: skip
    buf = kernel_block(frames)
    tally = TrafficTally()
    tally.add("eth0", buf, _frames(buf), LINKTYPE_ETHERNET, now_s=0.0)
    assert tally.flows == 2
    assert tally.table_full


# ------------------------------------------------------------------------------------------
# Filter and configuration


def test_capture_filter_keeps_headers_and_samples_in_the_kernel() -> None:
    def decode(prog: bytes) -> list[tuple[int, int, int, int]]:
        return [pc._SOCK_FILTER.unpack_from(prog, i) for i in range(0, len(prog), 8)]

    assert decode(capture_filter(128)) == [(0x06, 0, 0, 128)]  # ret #128
    assert decode(capture_filter(96, 10)) == [
        (0x20, 0, 0, 0xFFFFF038),  # ld rand (SKF_AD_OFF + SKF_AD_RAND)
        (0x94, 0, 0, 10),  # mod #10
        (0x15, 0, 1, 0),  # jeq #0: keep, else drop
        (0x06, 0, 0, 96),  # ret #96
        (0x06, 0, 0, 0),  # ret #0
    ]
    with pytest.raises(ValueError, match="snaplen"):
        capture_filter(0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"enabled": True}, "name at least one interface"),
        ({"interfaces": ("eth0", "eth0")}, "listed twice"),
        ({"interfaces": ("a" * 16,)}, "not an interface name"),
        ({"snaplen": 20}, "snaplen"),
        ({"sample_every": 0}, "sample_every"),
        ({"ring_mib": 0}, "ring_mib"),
        ({"bin_s": 5.0}, "bin_s"),
        ({"block_timeout_ms": 0}, "block_timeout_ms"),
    ],
)
def test_bad_capture_config_is_refused_naming_the_key(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        CaptureConfig(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# The capture thread's logic, with rings that hold prepared blocks


class FakeRing:
    """Stands in for the socket and its mapped ring: the same attributes the worker uses."""

    def __init__(self, name: str, blocks: list[bytearray]) -> None:
        self.name = name
        self.map = bytearray().join(blocks)
        self.blocks = len(blocks)
        self._next = 0
        self.link_header = True
        self.link_type = LINKTYPE_ETHERNET
        self.hatype = 1
        self.ifindex = 999_999
        self.kernel_drops = 3
        self.closed = False

    def fileno(self) -> int:
        return -1

    def ready_block(self) -> int | None:
        off = self._next * BLOCK
        if self._next >= self.blocks or not self.map[off + 8] & 1:
            return None
        return off

    def release(self, off: int) -> None:
        self.map[off + 8] = 0
        self._next += 1

    def pending_error(self) -> int:
        return 0

    def read_stats(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _worker(
    opener: object,
    interfaces: tuple[str, ...] = ("eth0",),
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[pc._Worker, FakeClock, list[list[object]]]:
    if monkeypatch is not None:
        monkeypatch.setattr(pc, "_BLOCK_SIZE", BLOCK)
    clock = FakeClock(1000.0)
    batches: list[list[object]] = []

    def deliver(batch: list[object]) -> bool:
        batches.append(batch)
        return True

    cfg = CaptureConfig(enabled=True, interfaces=interfaces, sysfs_root=Path("/nonexistent"))
    worker = pc._Worker(cfg, clock, deliver, open_ring=opener)  # type: ignore[arg-type]
    return worker, clock, batches


def test_worker_bins_ring_blocks_on_the_agent_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)  # wall = agent + 1.8e9 - 1000
    t = T0 + 5_000_000  # 1000.005 on the agent's clock
    ring = FakeRing(
        "eth0",
        [
            kernel_block([(ROCE, t, len(ROCE), 0, 0), (CNP, t + 10**6, len(CNP), 0, 4)]),
            kernel_block([(ROCE, t + 20_000_000, len(ROCE), 0, 0)]),
            # stamped an hour ahead (a wall clock stepped forward): counted now, not parked
            kernel_block([(CNP, t + 3600 * 10**9, len(CNP), 0, 0)]),
        ],
    )
    worker, clock, _ = _worker(lambda name, cfg: ring, monkeypatch=monkeypatch)
    (info,) = worker.open_all()
    assert isinstance(info, DeviceInfo)
    assert info.kind == "capture"
    assert info.skipped is None
    worker._offset = worker._clock_offset()
    worker.binner.start(clock.now())
    clock.advance(0.05)
    worker.drain()
    assert ring._next == 3
    assert ring.map[8] == 0  # every block handed back to the kernel
    clock.advance(0.2)  # past the hand-over delay (2 block timeouts + 20 ms)
    worker._slow(clock.now())
    readings = worker.close_bins(clock.now())
    assert all(isinstance(r, CounterReading) for r in readings)
    by_time = {round(r.time_s, 3): r.values for r in readings}
    assert by_time[1000.01] == {"eth0_tx_bytes": len(CNP), "eth0_rx_bytes": len(ROCE)}
    assert by_time[1000.03]["eth0_rx_bytes"] == 2 * len(ROCE)
    assert by_time[1000.06]["eth0_rx_bytes"] == 2 * len(ROCE) + len(CNP)
    assert readings[-1].counters == {"eth0": {"tx_packets": 1, "rx_packets": 3}}
    stats = worker.stats()
    assert stats["roce_packets"] == 4
    assert stats["cnp_packets"] == 2
    assert stats["kernel_dropped_packets"] == 3


class SlowDrainRing(FakeRing):
    """Each block is seen 10 ms after the one before: a loaded machine drains while the
    kernel keeps retiring blocks, so most of them become ready after the drain began."""

    def __init__(self, name: str, blocks: list[bytearray], clock: FakeClock) -> None:
        super().__init__(name, blocks)
        self.clock = clock

    def ready_block(self) -> int | None:
        off = super().ready_block()
        if off is not None and self._next:
            self.clock.advance(0.01)
        return off


def test_blocks_that_arrive_during_a_slow_drain_keep_their_frames_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)  # wall = agent + 1.8e9 - 1000
    # one frame every 10 ms from 1000.005 on the agent's clock: a 100 ms burst, 10 blocks
    blocks = [
        kernel_block([(ROCE, T0 + 5_000_000 + k * 10_000_000, len(ROCE), 0, 0)]) for k in range(10)
    ]
    clock = FakeClock(1000.0)
    ring = SlowDrainRing("eth0", blocks, clock)
    worker, _, _ = _worker(lambda name, cfg: ring, monkeypatch=monkeypatch)
    worker._clock = clock
    worker.open_all()
    worker._offset = worker._clock_offset()
    worker.binner.start(clock.now())
    clock.advance(0.01)  # the first block is ready
    worker.drain()
    assert ring._next == 10
    clock.advance(1.0)
    readings = worker.close_bins(clock.now())
    rx = np.diff([0] + [r.values["eth0_rx_bytes"] for r in readings])
    # each frame in its own 10 ms bin: the burst keeps its length
    assert rx[:10].tolist() == [len(ROCE)] * 10
    assert not rx[10:].any()


def test_worker_keeps_capturing_on_the_interfaces_it_could_open() -> None:
    def opener(name: str, cfg: CaptureConfig) -> FakeRing:
        if name == "eth1":
            raise SourceUnavailable("packet_capture", "no interface named 'eth1'")
        return FakeRing(name, [])

    worker, _, _ = _worker(opener, ("eth0", "eth1"))
    infos = worker.open_all()
    skipped = {i.device: i.skipped for i in infos if isinstance(i, DeviceInfo)}
    assert skipped == {"eth0": None, "eth1": "no interface named 'eth1'"}
    assert list(worker.rings) == ["eth0"]


def test_worker_without_any_interface_or_permission_says_why() -> None:
    def missing(name: str, cfg: CaptureConfig) -> FakeRing:
        raise SourceUnavailable("packet_capture", f"no interface named {name!r}")

    worker, _, _ = _worker(missing, ("eth0", "eth1"))
    with pytest.raises(SourceUnavailable, match=r"'eth0'.*'eth1'"):
        worker.open_all()

    def denied(name: str, cfg: CaptureConfig) -> FakeRing:
        raise SourceUnavailable("packet_capture", pc._CAP_NET_RAW_HINT)

    worker, _, _ = _worker(denied, ("eth0", "eth1"))
    with pytest.raises(SourceError, match="CAP_NET_RAW"):
        worker.open_all()


def test_worker_closes_a_vanished_interface_and_reopens_it() -> None:
    rings: list[FakeRing] = []
    present = {"eth0": True}

    def opener(name: str, cfg: CaptureConfig) -> FakeRing:
        if not present[name]:
            raise SourceUnavailable("packet_capture", f"no interface named {name!r}")
        rings.append(FakeRing(name, []))
        return rings[-1]

    worker, clock, _ = _worker(opener)
    worker.open_all()
    # poll() flagged the socket; the fake ifindex does not exist: the interface is gone
    (gone,) = worker._check_errors({-1})
    assert isinstance(gone, DeviceInfo)
    assert gone.skipped == "vanished"
    assert rings[0].closed
    assert not worker.rings
    present["eth0"] = False
    out = worker._slow(clock.now())
    assert not worker.rings
    assert isinstance(out[-1], SourceStats)
    assert out[-1].values["kernel_dropped_packets"] == 3  # the closed ring's drops are kept
    present["eth0"] = True
    out = worker._slow(clock.now())
    assert list(worker.rings) == ["eth0"]
    assert any(isinstance(r, DeviceInfo) and r.skipped is None for r in out)
