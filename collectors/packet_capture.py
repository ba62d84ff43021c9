"""Live packet capture on named interfaces: AF_PACKET with a TPACKET_V3 ring, headers only.

Where counters are too coarse (sub-millisecond bursts, fine-tuning's dense small collectives)
the packets say when the bytes moved. This source reads them the way libpcap does, without
libpcap:

* one ``AF_PACKET``/``SOCK_RAW`` socket per interface, with a ``TPACKET_V3`` receive ring
  mapped into the process: the kernel fills whole blocks of frames and hands a block over when
  it is full or ``block_timeout_ms`` after its first frame, so one wake-up carries thousands of
  frames and nothing is copied per frame;
* a classic BPF program that returns ``snaplen``, so only headers are copied into the ring, and
  optionally keeps one frame in ``sample_every`` (``ld rand; mod #N``) so a busy link costs the
  kernel, not Python. Every total the source reports is an estimate of the wire total
  (captured × ``sample_every``); ``tp_len`` is the frame's ORIGINAL length, and a VLAN tag the
  NIC stripped (``TP_STATUS_VLAN_VALID``) is added back, as libpcap does;
* frames are timed by the kernel (``tp_sec``/``tp_nsec``), put on the agent's monotonic clock,
  and summed per direction (``sll_pkttype == PACKET_OUTGOING`` is transmit) into ``bin_s``
  bins. Each closed bin becomes one :class:`CounterReading` of cumulative bytes, stamped with
  the bin's end: a counter source whose "polls" have no jitter at all.

The reading runs in a thread of its own (off the event loop), which hands readings over every
``0.1 s``; when the loop falls behind, whole hand-overs are dropped and counted (the counters
are cumulative, so a dropped hand-over costs resolution, never bytes). Kernel ring drops come
from ``PACKET_STATISTICS`` (which resets on read, so they are summed here).

RDMA traffic (RoCEv2 offloaded to the NIC) never crosses the kernel's network stack and is not
seen here unless the NIC mirrors it (mlx5's sniffer mode); what is seen is the socket
transport's TCP, and RoCE only on software RoCE. A vanished interface is closed and reopened
when it returns, and the other interfaces go on; a missing ``CAP_NET_RAW`` is said plainly.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import mmap
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from agent.clock import Clock
from agent.errors import ConfigError, SourceError, SourceUnavailable
from agent.thread_names import name_this_thread
from collectors._base import (
    CounterReading,
    DeviceInfo,
    Emit,
    Reading,
    SourceStats,
    coalesce_counters,
)
from collectors._config import check_interval, doc
from collectors._sysfs import read_attr
from collectors.nic_counters import parse_speed
from collectors.pcap import (
    LINKTYPE_ETHERNET,
    LINKTYPE_RAW,
    PACKET_OUTGOING,
    LiveAckMatcher,
    ack_counts,
    decode_columns,
)

__all__ = [
    "BlockFrames",
    "ByteBinner",
    "CaptureConfig",
    "PacketCapture",
    "TrafficTally",
    "capture_filter",
    "parse_block",
]

log = logging.getLogger(__name__)

# <linux/if_packet.h>, <linux/if_ether.h>, <asm-generic/socket.h>, <linux/filter.h>
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
TPACKET_V3 = 2
ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
TP_STATUS_KERNEL = 0
TP_STATUS_USER = 1
TP_STATUS_VLAN_VALID = 0x10
VLAN_TAG_LEN = 4
ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772
# Classic BPF opcodes and the ancillary "random number" load.
_BPF_LD_W_ABS = 0x20
_BPF_ALU_MOD_K = 0x94
_BPF_JMP_JEQ_K = 0x15
_BPF_RET_K = 0x06
_SKF_AD_RAND = (-0x1000 + 56) & 0xFFFFFFFF
_SOCK_FILTER = struct.Struct("=HBBI")

#: struct tpacket_block_desc: version, offset_to_priv, then tpacket_hdr_v1: block_status,
#: num_pkts, offset_to_first_pkt, blk_len.
_BLOCK_DESC = struct.Struct("=IIIIII")
#: struct tpacket3_hdr (48 bytes) up to tp_net, then struct sockaddr_ll at TPACKET_ALIGN(48):
#: sll_pkttype is its byte 10, so byte 58 of the frame.
_T3_DTYPE = np.dtype(
    [("next", "=u4"), ("sec", "=u4"), ("nsec", "=u4"), ("snaplen", "=u4"), ("len", "=u4"),
     ("status", "=u4"), ("mac", "=u2"), ("net", "=u2")]
)  # fmt: skip
_PKTTYPE_AT = 58
_T3_SPAN = np.arange(_PKTTYPE_AT + 1)
_U32 = struct.Struct("=I")
_TPACKET_REQ3 = struct.Struct("=IIIIIII")
_STATS_V3 = struct.Struct("=III")  # tp_packets, tp_drops, tp_freeze_q_cnt
_BLOCK_SIZE = 1 << 20
_FRAME_SIZE = 2048
_NS = 1_000_000_000
#: A time a float rounding below a bin edge (0.3 / 0.1 = 2.999...) still falls on the edge.
_BIN_EPS = 1e-6

#: Seconds between hand-overs to the event loop (ten loop wake-ups per second).
HANDOVER_S = 0.1
#: Hand-overs allowed in flight before new ones are dropped (the loop is stalled).
MAX_PENDING_HANDOVERS = 50
#: Seconds between totals (SourceStats, packet counters), kernel statistics and reopen tries.
SLOW_INTERVAL_S = 1.0
#: Distinct flows / queue pairs remembered at most (a scan must not grow memory without bound).
MAX_TRACKED_KEYS = 65_536
Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

_CAP_NET_RAW_HINT = (
    "live capture opens AF_PACKET sockets, which needs CAP_NET_RAW: run as root, or install "
    "systemd/capture.conf (AmbientCapabilities=CAP_NET_RAW)"
)


@dataclass(frozen=True)
class CaptureConfig:
    """Settings of the live capture source (section ``[sources.packet_capture]``)."""

    enabled: bool = doc(False, "Capture packets live (needs CAP_NET_RAW; see systemd/).")
    interfaces: tuple[str, ...] = doc((), "Interfaces to capture on, by name (required).")
    snaplen: int = doc(128, "Bytes kept per frame: headers only (64..65535).")
    sample_every: int = doc(1, "Keep one frame in N, chosen at random in the kernel (1 = all).")
    bin_s: float = doc(0.01, "Width of the byte bins fed to the estimator, seconds.")
    ring_mib: int = doc(16, "Receive ring per interface, MiB (kernel memory, 1 MiB blocks).")
    block_timeout_ms: int = doc(
        50,
        "A partly filled ring block is handed over after this. The ring holds ring_mib blocks "
        "of 1 MiB, so at a low packet rate the capture thread may be starved for "
        "ring_mib x this long before the kernel drops frames (at 10 ms it dropped some on a "
        "3x oversubscribed host); bins reach the estimator 2x this later.",
    )
    flow_window_s: float = doc(10.0, "Distinct flows and queue pairs are counted over this.")
    sysfs_root: Path = doc(Path("/sys"), "Root of sysfs (link speed of the interfaces).")

    def __post_init__(self) -> None:
        section = "sources.packet_capture"
        if self.enabled and not self.interfaces:
            raise ConfigError(f"{section}.interfaces: name at least one interface to capture on")
        for name in self.interfaces:
            if not name or len(name) >= 16 or "/" in name or any(c.isspace() for c in name):
                raise ConfigError(f"{section}.interfaces: {name!r} is not an interface name")
        if len(set(self.interfaces)) != len(self.interfaces):
            raise ConfigError(f"{section}.interfaces: an interface is listed twice")
        if not 64 <= self.snaplen <= 65_535:
            raise ConfigError(f"{section}.snaplen must be between 64 and 65535, not {self.snaplen}")
        if not 1 <= self.sample_every <= 1_000_000:
            raise ConfigError(
                f"{section}.sample_every must be between 1 and 1000000, not {self.sample_every}"
            )
        if not 1 <= self.ring_mib <= 4096:
            raise ConfigError(f"{section}.ring_mib must be between 1 and 4096, not {self.ring_mib}")
        if not 1 <= self.block_timeout_ms <= 1000:
            raise ConfigError(
                f"{section}.block_timeout_ms must be between 1 and 1000, not "
                f"{self.block_timeout_ms}"
            )
        check_interval(section, "bin_s", self.bin_s, 0.0005, 1.0)
        check_interval(section, "flow_window_s", self.flow_window_s, 1.0, 3600.0)


# ------------------------------------------------------------------------------------------
# Pure parts: the BPF program, a ring block, bins, traffic totals


def capture_filter(snaplen: int, sample_every: int = 1) -> bytes:
    """The classic BPF program (``struct sock_filter[]``) the capture socket runs.

    It returns ``snaplen`` (keep that many bytes of the frame) or, with ``sample_every`` > 1,
    keeps a frame only when a kernel random number is 0 modulo N and returns 0 (drop) otherwise.
    """
    if snaplen <= 0 or sample_every < 1:
        raise ValueError("snaplen must be > 0 and sample_every >= 1")
    prog = []
    if sample_every > 1:
        prog += [
            (_BPF_LD_W_ABS, 0, 0, _SKF_AD_RAND),
            (_BPF_ALU_MOD_K, 0, 0, sample_every),
            (_BPF_JMP_JEQ_K, 0, 1, 0),
        ]
    prog.append((_BPF_RET_K, 0, 0, snaplen))
    if sample_every > 1:
        prog.append((_BPF_RET_K, 0, 0, 0))
    return b"".join(_SOCK_FILTER.pack(*ins) for ins in prog)


@dataclass(frozen=True, slots=True)
class BlockFrames:
    """The frames of one TPACKET_V3 ring block, as arrays.

    Attributes:
        time_ns: Kernel receive time, POSIX nanoseconds.
        length: Original frame length (a VLAN tag stripped by the NIC counted back in).
        data_off: Offset in the ring buffer of the first byte to decode (the link header for
            Ethernet, the network header otherwise: see ``link_header``).
        caplen: Bytes present from ``data_off``.
        outgoing: The frame was sent by this host.
        complete: False when the block's frame chain was inconsistent (walk stopped early).
    """

    time_ns: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    data_off: npt.NDArray[np.int64]
    caplen: npt.NDArray[np.int64]
    outgoing: npt.NDArray[np.bool_]
    complete: bool = True


def parse_block(buf: Buffer, offset: int, size: int, *, link_header: bool = True) -> BlockFrames:
    """Walk the frames of the ring block at ``buf[offset:offset+size]`` (pure, never raises).

    Args:
        buf: The mapped ring (or any buffer holding a block laid out by the kernel).
        offset: Start of the block (its ``tpacket_block_desc``).
        size: Block size.
        link_header: Decode from the link-layer header (Ethernet, loopback); False: from the
            network header (IPoIB, tun: link types whose header commpulse does not decode).

    Returns:
        The frames; ``complete`` is False if a frame header pointed outside the block.
    """
    end = offset + size
    _v, _priv, _status, num, first, _blk_len = _BLOCK_DESC.unpack_from(buf, offset)
    # The chain is the one sequential part: each frame says where the next one starts. The
    # loop only follows it; the fields are then gathered for all frames at once.
    positions: list[int] = []
    pos = offset + first
    last = end - _T3_SPAN.size
    complete = True
    next_offset = _U32.unpack_from
    for i in range(num):
        if pos > last:
            complete = False
            break
        positions.append(pos)
        if i + 1 < num:
            (nxt,) = next_offset(buf, pos)
            if nxt <= 0:
                complete = False
                break
            pos += nxt
    p = np.array(positions, dtype=np.int64)
    rows = np.frombuffer(buf, dtype=np.uint8)[p[:, None] + _T3_SPAN]
    head = np.ascontiguousarray(rows[:, :28]).view(_T3_DTYPE).ravel()
    mac = head["mac"].astype(np.int64)
    snap = head["snaplen"].astype(np.int64)
    start = mac if link_header else head["net"].astype(np.int64)
    bad = (start > snap + mac) | (p + mac + snap > end)
    if bad.any():  # a frame that points outside the block ends the walk there
        complete = False
        keep = int(np.argmax(bad))
        p, head, mac, snap, start, rows = (
            p[:keep],
            head[:keep],
            mac[:keep],
            snap[:keep],
            start[:keep],
            rows[:keep],
        )
    wire = head["len"].astype(np.int64)
    wire += np.where(head["status"] & TP_STATUS_VLAN_VALID, VLAN_TAG_LEN, 0)
    return BlockFrames(
        time_ns=head["sec"].astype(np.int64) * _NS + head["nsec"].astype(np.int64),
        length=wire,
        data_off=p + start,
        caplen=snap - (start - mac),
        outgoing=rows[:, _PKTTYPE_AT] == PACKET_OUTGOING,
        complete=complete,
    )


class ByteBinner:
    """Sums frame bytes per device and direction into fixed bins; closed bins become readings.

    Bin ``k`` covers ``[k*bin_s, (k+1)*bin_s)`` on the agent's clock. A bin is closed (emitted
    as one :class:`CounterReading` of cumulative bytes, stamped at its end) once no frame of
    it can still arrive; every bin is emitted, empty ones too, so the series has no holes. A
    frame older than the oldest open bin (it came late) is counted in that bin and in
    ``late_frames``: bytes are never lost.
    """

    def __init__(self, devices: Iterable[str], bin_s: float, *, scale: int = 1) -> None:
        self.bin_s = bin_s
        self.scale = scale
        self.late_frames = 0
        self._devices = list(devices)
        self._cum = {d: [0, 0] for d in self._devices}  # tx, rx
        self._open_k: int | None = None  # first open bin
        self._pending: dict[int, dict[str, list[int]]] = {}

    def start(self, now_s: float) -> list[CounterReading]:
        """Open the bins at ``now_s``; returns the baseline reading (all zeros)."""
        k = self._bin(now_s)
        self._open_k = k
        return [self._reading(k * self.bin_s)]

    def add_device(self, device: str) -> None:
        """A device that (re)appears counts on from zero... of its own new column."""
        if device not in self._cum:
            self._devices.append(device)
            self._cum[device] = [0, 0]

    def add(
        self,
        device: str,
        time_s: npt.NDArray[np.float64],
        length: npt.NDArray[np.int64],
        outgoing: npt.NDArray[np.bool_],
    ) -> None:
        """Account frames of one device (times on the agent's clock)."""
        if self._open_k is None or time_s.size == 0:
            return
        k = np.floor(time_s / self.bin_s + _BIN_EPS).astype(np.int64)
        late = k < self._open_k
        if late.any():
            self.late_frames += int(late.sum())
            k[late] = self._open_k
        for direction, mask in ((0, outgoing), (1, ~outgoing)):
            if not mask.any():
                continue
            ks, inverse = np.unique(k[mask], return_inverse=True)
            sums = np.bincount(inverse, weights=length[mask].astype(np.float64))
            for kk, total in zip(ks.tolist(), sums.tolist(), strict=True):
                row = self._pending.setdefault(kk, {}).setdefault(device, [0, 0])
                row[direction] += int(total)

    def close_until(self, now_s: float) -> list[CounterReading]:
        """Emit every bin that ends at or before ``now_s``, in order."""
        if self._open_k is None:
            return []
        last = self._bin(now_s)  # bins below this one have ended
        out = []
        for k in range(self._open_k, last):
            row = self._pending.pop(k, None)
            if row:
                for device, (tx, rx) in row.items():
                    cum = self._cum.setdefault(device, [0, 0])
                    cum[0] += tx * self.scale
                    cum[1] += rx * self.scale
            out.append(self._reading((k + 1) * self.bin_s))
        self._open_k = max(self._open_k, last)
        return out

    def _bin(self, t: float) -> int:
        return int(np.floor(t / self.bin_s + _BIN_EPS))

    def _reading(self, t: float) -> CounterReading:
        values = {}
        for device, (tx, rx) in self._cum.items():
            values[f"{device}_tx_bytes"] = tx
            values[f"{device}_rx_bytes"] = rx
        return CounterReading(t, values)


_HASH_MULT = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD],
    dtype=np.uint64,
)  # fmt: skip


def _key_hash(keys: npt.NDArray[np.void]) -> npt.NDArray[np.uint64]:
    """One uint64 per fixed-width key (a flow or QP key of :func:`decode_columns`).

    Sorting uint64 is far cheaper than sorting 40-byte voids; the words are mixed with odd
    multipliers and a final avalanche (splitmix64's), so similar keys get unrelated hashes.
    """
    words = np.ascontiguousarray(keys).view(np.uint64).reshape(keys.size, -1)
    h = (words * _HASH_MULT[: words.shape[1]]).sum(axis=1, dtype=np.uint64)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return np.asarray(h, dtype=np.uint64)


#: Upper bounds (seconds) of the live RC ACK round-trip histogram, then +Inf: a round trip in
#: one rack takes a few µs; congestion and PFC pauses push it to ms.
ACK_LATENCY_BOUNDS = (
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 0.1
)  # fmt: skip
_ACK_BOUNDS_NS = np.round(np.asarray(ACK_LATENCY_BOUNDS) * 1e9).astype(np.int64)


@dataclass
class TrafficTally:
    """What kind of traffic the frames were: totals and distinct flows / queue pairs.

    Counts are estimates of the wire totals (captured × ``scale``). Flows and queue pairs are
    the distinct keys seen in the last ``window_s`` seconds (at most ``MAX_TRACKED_KEYS``),
    remembered by a 64-bit hash of the key (two keys share one with odds of ~2^-64 per pair).
    """

    scale: int = 1
    window_s: float = 10.0
    captured: int = 0
    packets: dict[str, list[int]] = field(default_factory=dict)  # device -> [tx, rx]
    roce_packets: int = 0
    cnp_packets: int = 0
    ack_packets: int = 0
    nak_packets: int = 0
    seq_nak_packets: int = 0
    tcp_bytes: int = 0
    udp_bytes: int = 0
    undecoded: int = 0
    table_full: bool = False
    #: RC ACK round trips matched so far, per ``ACK_LATENCY_BOUNDS`` bucket (the last is +Inf),
    #: and their sum in nanoseconds.
    ack_latency_counts: list[int] = field(
        default_factory=lambda: [0] * (len(ACK_LATENCY_BOUNDS) + 1)
    )
    ack_latency_sum_ns: int = 0
    _acks: LiveAckMatcher = field(default_factory=LiveAckMatcher)
    _flows: dict[int, float] = field(default_factory=dict)
    _qps: dict[int, float] = field(default_factory=dict)

    def add(
        self, device: str, buf: Buffer, frames: BlockFrames, link_type: int, now_s: float
    ) -> None:
        """Decode the headers of one block's frames and count them."""
        n = int(frames.length.size)
        if n == 0:
            return
        self.captured += n
        tx = int(frames.outgoing.sum())
        row = self.packets.setdefault(device, [0, 0])
        row[0] += tx * self.scale
        row[1] += (n - tx) * self.scale
        cols = decode_columns(buf, frames.data_off, frames.caplen, link_type)
        self.undecoded += int(n - cols.decoded.sum())
        self.roce_packets += int(cols.roce.sum()) * self.scale
        self.cnp_packets += int(cols.cnp.sum()) * self.scale
        acks, naks, seq_naks = ack_counts(cols.aeth_syndrome)
        self.ack_packets += acks * self.scale
        self.nak_packets += naks * self.scale
        self.seq_nak_packets += seq_naks * self.scale
        if acks:
            self._count_latency(self._acks.add(cols, frames.time_ns))
        elif cols.roce.any():  # requests wait for their ACKs in later blocks
            self._acks.add(cols, frames.time_ns)
        self.tcp_bytes += int(frames.length[cols.tcp].sum()) * self.scale
        self.udp_bytes += int(frames.length[cols.udp].sum()) * self.scale
        ip = cols.decoded & (cols.ip_version > 0)
        self._remember(self._flows, cols.flow_key[ip], now_s)
        self._remember(self._qps, cols.qp_key[cols.roce], now_s)

    def _count_latency(self, latency_ns: npt.NDArray[np.int64]) -> None:
        if latency_ns.size:
            idx = np.searchsorted(_ACK_BOUNDS_NS, latency_ns, side="left")
            for i, c in enumerate(np.bincount(idx, minlength=len(self.ack_latency_counts))):
                self.ack_latency_counts[i] += int(c)
            self.ack_latency_sum_ns += int(latency_ns.sum())

    def _remember(self, table: dict[int, float], keys: npt.NDArray[np.void], now_s: float) -> None:
        if keys.size == 0:
            return
        for key in np.unique(_key_hash(keys)).tolist():
            if key in table or len(table) < MAX_TRACKED_KEYS:
                table[key] = now_s
            else:
                self.table_full = True

    def prune(self, now_s: float) -> None:
        """Forget keys not seen for ``window_s``."""
        horizon = now_s - self.window_s
        for table in (self._flows, self._qps):
            for key in [k for k, t in table.items() if t < horizon]:
                del table[key]
        full = max(len(self._flows), len(self._qps)) >= MAX_TRACKED_KEYS
        self.table_full = self.table_full and full

    @property
    def flows(self) -> int:
        """Distinct 5-tuples in the window."""
        return len(self._flows)

    @property
    def queue_pairs(self) -> int:
        """Distinct (destination IP, destination QP) in the window."""
        return len(self._qps)


# ------------------------------------------------------------------------------------------
# The ring (I/O)


class _Ring:
    """One interface's AF_PACKET socket and mapped TPACKET_V3 ring."""

    def __init__(self, name: str, cfg: CaptureConfig) -> None:
        self.name = name
        self.kernel_drops = 0
        self._next = 0
        try:
            ifindex = socket.if_nametoindex(name)
        except OSError:
            raise SourceUnavailable("packet_capture", f"no interface named {name!r}") from None
        try:
            # Protocol 0: nothing is received until bind(), after the filter and ring are set.
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise SourceUnavailable("packet_capture", _CAP_NET_RAW_HINT) from None
        try:
            self._setup(cfg)
            self.sock.bind((name, ETH_P_ALL))
        except OSError as exc:
            self.close()
            if exc.errno in (errno.ENODEV, errno.ENXIO):
                raise SourceUnavailable("packet_capture", f"{name}: interface is gone") from None
            if exc.errno in (errno.EPERM, errno.EACCES):
                raise SourceUnavailable("packet_capture", _CAP_NET_RAW_HINT) from None
            raise SourceError("packet_capture", f"{name}: {self._step}: {exc}") from None
        _name, _proto, _pkttype, hatype, _addr = self.sock.getsockname()
        self.ifindex = ifindex
        self.hatype = int(hatype)
        ethernet = self.hatype in (ARPHRD_ETHER, ARPHRD_LOOPBACK)
        self.link_header = ethernet
        self.link_type = LINKTYPE_ETHERNET if ethernet else LINKTYPE_RAW

    def _setup(self, cfg: CaptureConfig) -> None:
        self._step = "setting TPACKET_V3"
        self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
        self._step = "attaching the capture filter"
        prog = capture_filter(cfg.snaplen, cfg.sample_every)
        code = ctypes.create_string_buffer(prog, len(prog))
        fprog = struct.pack("HL", len(prog) // _SOCK_FILTER.size, ctypes.addressof(code))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        self._step = f"allocating a {cfg.ring_mib} MiB ring (lower ring_mib?)"
        self.blocks = cfg.ring_mib * (1 << 20) // _BLOCK_SIZE
        req = _TPACKET_REQ3.pack(
            _BLOCK_SIZE,
            self.blocks,
            _FRAME_SIZE,
            self.blocks * (_BLOCK_SIZE // _FRAME_SIZE),
            cfg.block_timeout_ms,
            0,
            0,
        )
        self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
        self._step = "mapping the ring"
        self.map = mmap.mmap(
            self.sock.fileno(),
            self.blocks * _BLOCK_SIZE,
            mmap.MAP_SHARED,
            mmap.PROT_READ | mmap.PROT_WRITE,
        )
        self._step = "binding"

    def fileno(self) -> int:
        """The socket, for poll()."""
        return self.sock.fileno()

    def ready_block(self) -> int | None:
        """Offset of the next block the kernel handed over, or None."""
        off = self._next * _BLOCK_SIZE
        (status,) = struct.unpack_from("=I", self.map, off + 8)
        return off if status & TP_STATUS_USER else None

    def release(self, off: int) -> None:
        """Give the block back to the kernel and move on."""
        struct.pack_into("=I", self.map, off + 8, TP_STATUS_KERNEL)
        self._next = (self._next + 1) % self.blocks

    def pending_error(self) -> int:
        """The socket's pending error (ENETDOWN when the link went down or the device left)."""
        return int(self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))

    def read_stats(self) -> None:
        """Add the kernel's ring drops since the last read (PACKET_STATISTICS resets them)."""
        raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS_V3.size)
        _packets, drops, _freeze = _STATS_V3.unpack(raw)
        self.kernel_drops += drops

    def close(self) -> None:
        """Unmap and close (safe to call twice)."""
        m = getattr(self, "map", None)
        if m is not None:
            m.close()
            self.map = None  # type: ignore[assignment]
        self.sock.close()


def _link_speed(sysfs_root: Path, name: str) -> float | None:
    return parse_speed(read_attr(sysfs_root / "class" / "net" / name / "speed") or b"")


# ------------------------------------------------------------------------------------------
# The capture thread and the source


class _Worker:
    """The capture thread: rings → bins and totals → readings handed to the event loop."""

    def __init__(
        self,
        cfg: CaptureConfig,
        clock: Clock,
        deliver: Callable[[list[Reading]], bool],
        open_ring: Callable[[str, CaptureConfig], _Ring] = _Ring,
    ) -> None:
        self._cfg = cfg
        self._clock = clock
        self._deliver = deliver
        self._open_ring = open_ring
        self.stop = threading.Event()
        self.rings: dict[str, _Ring] = {}
        self.handover_drops = 0
        self.closed_drops = 0  # kernel drops of rings since closed
        self.binner = ByteBinner(cfg.interfaces, cfg.bin_s, scale=cfg.sample_every)
        self.tally = TrafficTally(scale=cfg.sample_every, window_s=cfg.flow_window_s)
        self._offset = 0.0
        self._batch: list[Reading] = []
        self._counters_due = False
        # A bin can be closed once its frames are surely out of the ring: a block is handed
        # over at most block_timeout_ms after its first frame, then waits for one poll.
        self._delay_s = 2 * cfg.block_timeout_ms / 1000 + 0.02

    def _info(self, name: str, skipped: str | None = None) -> DeviceInfo:
        ring = self.rings.get(name)
        layer = None
        if ring is not None:
            layer = {ARPHRD_ETHER: "Ethernet", ARPHRD_LOOPBACK: "loopback", 32: "InfiniBand"}.get(
                ring.hatype, str(ring.hatype)
            )
        return DeviceInfo(
            device=name,
            kind="capture",
            link_layer=layer,
            speed_bytes_per_s=_link_speed(self._cfg.sysfs_root, name),
            state="capturing" if ring is not None else None,
            skipped=skipped,
        )

    def open_all(self) -> list[Reading]:
        """Open every interface that can be opened; raise if none can."""
        out: list[Reading] = []
        errors: dict[str, str] = {}
        for name in self._cfg.interfaces:
            if name in self.rings:
                continue
            try:
                self.rings[name] = self._open_ring(name, self._cfg)
            except SourceError as exc:
                if _CAP_NET_RAW_HINT in str(exc):
                    raise  # the same for every interface: say it once, plainly
                errors[name] = str(exc).removeprefix("source packet_capture: ")
                continue
            self.binner.add_device(name)
            out.append(self._info(name))
        if not self.rings:
            raise SourceUnavailable(
                "packet_capture", "; ".join(errors[n] for n in self._cfg.interfaces if n in errors)
            )
        out.extend(self._info(n, skipped=e) for n, e in errors.items())
        return out

    def _clock_offset(self) -> float:
        """Agent clock minus wall clock, from the closest of three paired reads."""
        best: tuple[float, float] | None = None
        for _ in range(3):
            a = self._clock.now()
            w = time.time()
            b = self._clock.now()
            if best is None or b - a < best[0]:
                best = (b - a, 0.5 * (a + b) - w)
        assert best is not None
        return best[1]

    def drain(self) -> float:
        """Take every ready block of every ring; returns the time it began.

        Bins may be closed up to that time (less the hand-over delay), never up to a later
        one: frames that arrive while this thread is descheduled after the drain are still in
        the ring, and a bin closed over them would get them late, lumped into one bin.
        """
        now = self._clock.now()
        for name, ring in list(self.rings.items()):
            while (off := ring.ready_block()) is not None:
                # Every frame of a ready block came before this moment. Blocks keep coming
                # while a loaded machine drains slowly, so the drain's start is no bound: it
                # would stamp those frames all at once and turn a burst into one bin.
                seen = self._clock.now()
                frames = parse_block(ring.map, off, _BLOCK_SIZE, link_header=ring.link_header)
                if not frames.complete:
                    log.warning("capture %s: a ring block had an inconsistent frame chain", name)
                mono = frames.time_ns.astype(np.float64) / 1e9 + self._offset
                # A frame cannot come from the future: a wall clock stepped forward (until
                # the offset is measured again) must not park bytes in a bin far ahead.
                np.minimum(mono, seen, out=mono)
                self.binner.add(name, mono, frames.length, frames.outgoing)
                self.tally.add(name, ring.map, frames, ring.link_type, now)
                ring.release(off)
        return now

    def _check_errors(self, bad_fds: set[int]) -> list[Reading]:
        out: list[Reading] = []
        for name, ring in list(self.rings.items()):
            if ring.fileno() not in bad_fds:
                continue
            err = ring.pending_error()
            try:
                present = socket.if_nametoindex(name) == ring.ifindex
            except OSError:
                present = False
            if present:
                if err:
                    log.info("capture %s: %s (the link went down)", name, os.strerror(err))
                continue
            log.warning("capture %s: the interface vanished; reopening when it returns", name)
            self._close(name)
            out.append(self._info(name, skipped="vanished"))
        return out

    def _close(self, name: str) -> None:
        ring = self.rings.pop(name)
        with contextlib.suppress(OSError):
            ring.read_stats()
        self.closed_drops += ring.kernel_drops
        ring.close()

    def _slow(self, now: float) -> list[Reading]:
        out: list[Reading] = []
        if len(self.rings) < len(self._cfg.interfaces):
            for name in self._cfg.interfaces:
                if name in self.rings:
                    continue
                try:
                    self.rings[name] = self._open_ring(name, self._cfg)
                except SourceError:
                    continue
                log.info("capture %s: reopened", name)
                self.binner.add_device(name)
                out.append(self._info(name))
        for ring in self.rings.values():
            with contextlib.suppress(OSError):
                ring.read_stats()
        self._offset = self._clock_offset()
        self.tally.prune(now)
        self._counters_due = True
        out.append(SourceStats(now, self.stats()))
        return out

    def close_bins(self, now: float) -> list[CounterReading]:
        """Readings of the bins complete when a drain began at ``now`` (totals on the last)."""
        readings = self.binner.close_until(now - self._delay_s)
        if readings and self._counters_due:
            self._counters_due = False
            packets = {
                d: {"tx_packets": p[0], "rx_packets": p[1]} for d, p in self.tally.packets.items()
            }
            readings[-1] = replace(readings[-1], counters=packets)
        return readings

    def stats(self) -> dict[str, int]:
        """The source's totals, for its metrics."""
        t = self.tally
        return {
            "captured_packets": t.captured,
            "kernel_dropped_packets": self.closed_drops
            + sum(r.kernel_drops for r in self.rings.values()),
            "late_packets": self.binner.late_frames,
            "handover_drops": self.handover_drops,
            "roce_packets": t.roce_packets,
            "cnp_packets": t.cnp_packets,
            "ack_packets": t.ack_packets,
            "nak_packets": t.nak_packets,
            "seq_nak_packets": t.seq_nak_packets,
            "tcp_bytes": t.tcp_bytes,
            "udp_bytes": t.udp_bytes,
            "undecoded_packets": t.undecoded,
            "flows": t.flows,
            "queue_pairs": t.queue_pairs,
            "flow_table_full": int(t.table_full),
            "ack_latency_sum_ns": t.ack_latency_sum_ns,
            **{f"ack_latency_bucket_{i}": c for i, c in enumerate(t.ack_latency_counts)},
            "sample_every": self._cfg.sample_every,
            "interfaces": len(self.rings),
        }

    def run(self, first: list[Reading]) -> None:
        """The thread's loop, until ``stop`` is set; closes the rings at the end."""
        try:
            self._offset = self._clock_offset()
            now = self._clock.now()
            self._batch = first + list(self.binner.start(now))
            next_flush = now + HANDOVER_S
            next_slow = now
            poller = select.poll()
            registered: set[int] = set()
            while not self.stop.is_set():
                fds = {r.fileno() for r in self.rings.values()}
                for fd in registered - fds:
                    poller.unregister(fd)
                for fd in fds - registered:
                    poller.register(fd, select.POLLIN | select.POLLERR)
                registered = fds
                events = poller.poll(50)
                bad = {fd for fd, ev in events if ev & (select.POLLERR | select.POLLNVAL)}
                drained = self.drain()
                if bad:
                    self._batch.extend(self._check_errors(bad))
                self._batch.extend(self.close_bins(drained))
                now = self._clock.now()
                if now >= next_slow:
                    next_slow = now + SLOW_INTERVAL_S
                    self._batch.extend(self._slow(now))
                if now >= next_flush:
                    next_flush = now + HANDOVER_S
                    self._flush()
            self._batch.extend(self.close_bins(self.drain()))
            self._batch.append(SourceStats(self._clock.now(), self.stats()))
            self._flush()
        finally:
            for name in list(self.rings):
                self._close(name)

    def _flush(self) -> None:
        if not self._batch:
            return
        # Consecutive bins as one CounterBatch: one queue item and one array update.
        batch, self._batch = coalesce_counters(self._batch), []
        if not self._deliver(batch):
            self.handover_drops += 1


class PacketCapture:
    """Captures on the configured interfaces in a thread; a counter source without jitter."""

    name = "packet_capture"

    def __init__(self, config: CaptureConfig, *, clock: Clock) -> None:
        self._cfg = config
        self._clock = clock
        self.worker: _Worker | None = None

    async def run(self, emit: Emit) -> None:
        """Capture until cancelled; raise when no interface can be opened."""
        loop = asyncio.get_running_loop()
        pending = 0
        lock = threading.Lock()
        done: asyncio.Future[None] = loop.create_future()

        def deliver(batch: list[Reading]) -> bool:
            nonlocal pending
            with lock:
                if pending >= MAX_PENDING_HANDOVERS or loop.is_closed():
                    return False
                pending += 1

            def hand_over() -> None:
                nonlocal pending
                with lock:
                    pending -= 1
                for reading in batch:
                    emit(reading)

            loop.call_soon_threadsafe(hand_over)
            return True

        worker = _Worker(self._cfg, self._clock, deliver)
        first = await asyncio.to_thread(worker.open_all)
        self.worker = worker

        def work() -> None:
            name_this_thread()
            exc: BaseException | None = None
            try:
                worker.run(first)
            except BaseException as e:  # handed to the source's task, which raises it
                exc = e

            def finish() -> None:
                if done.done():
                    return
                if exc is None:
                    done.set_result(None)
                else:
                    done.set_exception(exc)

            if not loop.is_closed():
                loop.call_soon_threadsafe(finish)

        thread = threading.Thread(target=work, name="packet-capture", daemon=True)
        thread.start()
        try:
            await asyncio.shield(done)
        finally:
            worker.stop.set()
            if not done.done():
                with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(done), 2.0)
