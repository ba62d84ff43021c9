"""Write a synthetic RoCEv2 packet capture of a simulated burst train.

The capture is what a host capture of a NCCL job over RoCEv2 would look like: Ethernet / IPv4
(or IPv6) / UDP dport 4791 / BTH frames of a fixed size at the burst rates, transmitted to and
received from a few peers, optionally with CNPs. It lets ``analyze --pcap`` and the pcap
collector be tested end to end against a known truth.

scapy (``scapy.contrib.roce``) builds one template frame per flow, with a valid ICRC; the
millions of records are then stamped out with numpy by patching timestamps and PSNs into
copies of the template bytes, because scapy builds only a few thousand packets per second.
Frames are cut at the snaplen like a real ``tcpdump -s`` capture; when a frame is captured
whole, its ICRC is recomputed for the patched PSN so that it stays valid.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from agent.errors import ConfigError

__all__ = ["write_roce_pcap"]

ROCEV2_UDP_PORT = 4791
BTH_OPCODE_RC_RDMA_WRITE_MIDDLE = 0x07
BTH_OPCODE_RC_ACKNOWLEDGE = 0x11
AETH_ACK_CREDITS = 0x1F  # syndrome: ACK (bits 7..5 = 000), credit count 31 (unlimited)
CNP_OPCODE = 0x81
PCAP_NS_MAGIC = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
MAX_SNAPLEN = 262_144

_ETH_LEN = 14
_UDP_LEN = 8
_BTH_LEN = 12
_ICRC_LEN = 4
_NS = 1_000_000_000
_CHUNK_BYTES = 32 << 20  # records stamped per numpy batch


def _burst_array(bursts: np.ndarray, name: str) -> np.ndarray:
    """Validate a (k, 3) array of (start_s, end_s, rate_bytes_per_s)."""
    arr = np.asarray(bursts, dtype=np.float64)
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ConfigError(f"{name} must have shape (k, 3) (start_s, end_s, rate), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name} holds a NaN or infinite value")
    if np.any(arr[:, 1] < arr[:, 0]):
        raise ConfigError(f"{name}: a burst ends before it starts")
    if np.any(arr[:, 2] < 0):
        raise ConfigError(f"{name}: a burst has a negative rate")
    return arr


def _frame_counts(bursts: np.ndarray, frame_bytes: int, min_frame: int) -> tuple[int, int]:
    """(full frames, partial frames) the bursts produce; float math, no allocation."""
    total = bursts[:, 2] * (bursts[:, 1] - bursts[:, 0])
    full = np.floor(total / frame_bytes)
    partial = (total - full * frame_bytes) >= min_frame
    return int(full.sum()), int(partial.sum())


def _burst_frames(
    bursts: np.ndarray, frame_bytes: int, min_frame: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Relative times (s), lengths and burst numbers of the frames of every burst, in order.

    Frames of one burst are evenly spaced at ``frame_bytes / rate``; the bytes left over after
    the last full frame go into one shorter frame (dropped when below the minimum frame), so a
    burst carries ``rate * duration`` bytes within one frame.
    """
    times: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    which: list[np.ndarray] = []
    for k, (start, end, rate) in enumerate(bursts):
        total = rate * (end - start)
        n_full = int(np.floor(total / frame_bytes))
        rem = int(total - n_full * frame_bytes)
        if n_full == 0 and rem < min_frame:
            continue
        dt = frame_bytes / rate
        n = n_full + (1 if rem >= min_frame else 0)
        times.append(start + np.arange(n, dtype=np.float64) * dt)
        lens = np.full(n, frame_bytes, dtype=np.int64)
        if n > n_full:
            lens[-1] = rem
        lengths.append(lens)
        which.append(np.full(n, k, dtype=np.int64))
    if not times:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64), np.zeros(0, np.int64)
    return np.concatenate(times), np.concatenate(lengths), np.concatenate(which)


def _mac_for(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """A locally administered MAC derived from the address: distinct hosts, distinct MACs."""
    tail = ip.packed[-4:]
    return "02:00:" + ":".join(f"{b:02x}" for b in tail)


def _ipv4_checksum(header: bytes | bytearray) -> int:
    total = sum(int(x) for x in struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _masked_icrc_input(frame: bytes | bytearray, ip_version: int) -> bytearray:
    """The bytes the RoCEv2 ICRC covers.

    A pseudo-LRH of 8 ones bytes, then IP/UDP/BTH/payload with the variant fields (TOS/TC,
    flow label, TTL/hop limit, IP and UDP checksums, BTH resv8a) set to ones, as in the
    InfiniBand spec Annex A17 and ``scapy.contrib.roce``.
    """
    body = bytearray(b"\xff" * 8)
    body += frame[_ETH_LEN : len(frame) - _ICRC_LEN]
    ip = 8
    if ip_version == 4:
        body[ip + 1] = 0xFF  # TOS
        body[ip + 8] = 0xFF  # TTL
        body[ip + 10 : ip + 12] = b"\xff\xff"  # header checksum
        udp = ip + (body[ip] & 0x0F) * 4
    else:
        body[ip] = 0x6F  # version 6, traffic class and flow label all ones
        body[ip + 1 : ip + 4] = b"\xff\xff\xff"
        body[ip + 7] = 0xFF  # hop limit
        udp = ip + 40
    body[udp + 6 : udp + 8] = b"\xff\xff"  # UDP checksum
    body[udp + _UDP_LEN + 4] = 0xFF  # BTH FECN, BECN, resv6
    return body


def _icrc(frame: bytes | bytearray, ip_version: int) -> bytes:
    """The ICRC of a whole RoCEv2 frame (little-endian on the wire, as scapy writes it)."""
    return struct.pack("<I", zlib.crc32(_masked_icrc_input(frame, ip_version)) & 0xFFFFFFFF)


def _resize_frame(full: bytes, length: int, ip_version: int) -> bytes:
    """Shorten a RoCEv2 template to ``length`` bytes, fixing the IP/UDP lengths and ICRC."""
    b = bytearray(full[:length])
    ip = _ETH_LEN
    if ip_version == 4:
        ihl = (b[ip] & 0x0F) * 4
        struct.pack_into("!H", b, ip + 2, length - _ETH_LEN)
        struct.pack_into("!H", b, ip + 10, 0)
        struct.pack_into("!H", b, ip + 10, _ipv4_checksum(b[ip : ip + ihl]))
        udp = ip + ihl
    else:
        struct.pack_into("!H", b, ip + 4, length - _ETH_LEN - 40)
        udp = ip + 40
    struct.pack_into("!H", b, udp + 4, length - udp)
    b[length - _ICRC_LEN :] = _icrc(b, ip_version)
    return bytes(b)


def _build_templates(
    local: ipaddress.IPv4Address | ipaddress.IPv6Address,
    peers: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address],
    frame_bytes: int,
    seed: int,
) -> tuple[list[bytes], list[bytes], list[bytes], np.ndarray, int]:
    """Data templates (full size, tx flows then rx flows), CNPs, ACKs, start PSNs, BTH offset.

    CNP and ACK templates are one per peer.

    Per peer p the connected QP pair is (local QP ``base+2p``, remote QP ``base+2p+1``): tx
    frames carry the remote QP, rx frames, CNPs and the peer's ACKs the local one.
    """
    from scapy.contrib.roce import AETH, BTH, cnp
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.packet import Packet, Raw

    rng = np.random.default_rng(seed)
    n_peers = len(peers)
    qp_base = int(rng.integers(0x100, 0x800000))
    sports = rng.integers(49152, 65536, size=2 * n_peers)
    psn0 = rng.integers(0, 1 << 24, size=2 * n_peers).astype(np.int64)
    ip_len = 20 if local.version == 4 else 40
    payload = frame_bytes - (_ETH_LEN + ip_len + _UDP_LEN + _BTH_LEN + _ICRC_LEN)

    def l3(src: object, dst: object) -> Packet:
        if local.version == 4:
            return IP(src=str(src), dst=str(dst), tos=0x6A, ttl=64, id=0, flags="DF")
        return IPv6(src=str(src), dst=str(dst), tc=0x6A, hlim=64)

    data: list[bytes] = []
    for direction in (0, 1):
        for p, peer in enumerate(peers):
            src, dst = (local, peer) if direction == 0 else (peer, local)
            qp = qp_base + 2 * p + (1 if direction == 0 else 0)
            frame = (
                Ether(src=_mac_for(src), dst=_mac_for(dst))
                / l3(src, dst)
                / UDP(sport=int(sports[direction * n_peers + p]), dport=ROCEV2_UDP_PORT, chksum=0)
                / BTH(opcode=BTH_OPCODE_RC_RDMA_WRITE_MIDDLE, dqpn=qp, psn=0)
                / Raw(b"\x00" * payload)
            )
            data.append(bytes(frame))
    cnps: list[bytes] = []
    for p, peer in enumerate(peers):
        frame = (
            Ether(src=_mac_for(peer), dst=_mac_for(local))
            / l3(peer, local)
            / UDP(sport=int(sports[n_peers + p]), dport=ROCEV2_UDP_PORT, chksum=0)
            / cnp(qp_base + 2 * p)
        )
        cnps.append(bytes(frame))
    acks: list[bytes] = []
    for p, peer in enumerate(peers):
        frame = (
            Ether(src=_mac_for(peer), dst=_mac_for(local))
            / l3(peer, local)
            / UDP(sport=int(sports[n_peers + p]), dport=ROCEV2_UDP_PORT, chksum=0)
            / BTH(opcode=BTH_OPCODE_RC_ACKNOWLEDGE, dqpn=qp_base + 2 * p, psn=0)
            / AETH(syndrome=AETH_ACK_CREDITS, msn=0)
        )
        acks.append(bytes(frame))
    return data, cnps, acks, psn0, _ETH_LEN + ip_len + _UDP_LEN


def write_roce_pcap(
    path: Path,
    bursts_tx: np.ndarray,
    bursts_rx: np.ndarray,
    *,
    start_time_s: float,
    local_ip: str = "10.0.0.1",
    peer_ips: Sequence[str] = ("10.0.0.2",),
    frame_bytes: int = 4154,
    snaplen: int = 128,
    cnp_every: int = 0,
    max_packets: int = 2_000_000,
    seed: int = 0,
    ack_every: int = 0,
    ack_delay_s: float = 5e-6,
    ack_jitter_s: float = 1e-6,
) -> int:
    """Write a nanosecond pcap of RoCEv2 traffic following the given bursts.

    Each burst ``(start_s, end_s, rate)`` (seconds relative to ``start_time_s``, bytes per
    second; bursts may overlap and their rates add) becomes frames of ``frame_bytes`` original
    length spaced ``frame_bytes / rate`` apart from ``start_s``; one shorter last frame makes
    the burst carry ``rate * (end_s - start_s)`` bytes within one frame. Transmit frames go from
    ``local_ip`` to the peers, receive frames back, round-robin over the peers (one RC queue
    pair each) in time order, with per-flow incrementing PSNs. With ``cnp_every = N > 0``,
    after every N-th data frame (either direction, time order) the peer of that frame sends a
    CNP (74 bytes over IPv4, counted as received traffic) at the same timestamp.

    With ``ack_every = N > 0`` each peer acknowledges the local host's frames as an RC
    responder: an RC ACKNOWLEDGE (BTH opcode 0x11, AETH syndrome 0x1F: ACK, 62 bytes over
    IPv4, received traffic) carrying the PSN of every N-th transmit frame of its queue pair
    and of the last one of each burst (ACKs coalesce: each covers the frames since the one
    before), ``ack_delay_s`` plus an exponential jitter of mean ``ack_jitter_s`` after that
    frame (so the round trip's median is ``ack_delay_s + ln 2 * ack_jitter_s`` and its P99
    ``ack_delay_s + ln 100 * ack_jitter_s``). Receive frames are not acknowledged.

    Args:
        path: Output file.
        bursts_tx: (k, 3) transmit bursts.
        bursts_rx: (k, 3) receive bursts.
        start_time_s: POSIX time of relative time 0.
        local_ip: Address of the capturing host (IPv4 or IPv6).
        peer_ips: Addresses of the peers (same IP version as ``local_ip``).
        frame_bytes: Original length of a full data frame, Ethernet header to ICRC.
        snaplen: Bytes captured per frame (the pcap snaplen).
        cnp_every: One CNP per this many data frames; 0 for none.
        max_packets: Refuse to write more packets than this.
        seed: Seeds queue-pair numbers, UDP source ports, start PSNs and ACK jitter.
        ack_every: One peer ACK per this many transmit frames of a queue pair (and one after
            each burst); 0 for none.
        ack_delay_s: Least time from a transmit frame to its ACK, seconds.
        ack_jitter_s: Mean of the exponential delay added to each ACK, seconds.

    Returns:
        The number of packets written.

    Raises:
        ConfigError: Bad arguments, too many packets, or the file cannot be written.
    """
    tx_bursts = _burst_array(bursts_tx, "bursts_tx")
    rx_bursts = _burst_array(bursts_rx, "bursts_rx")
    try:
        local = ipaddress.ip_address(local_ip)
        peers = [ipaddress.ip_address(p) for p in peer_ips]
    except ValueError as exc:
        raise ConfigError(f"bad IP address: {exc}") from exc
    if not peers:
        raise ConfigError("peer_ips must name at least one peer")
    if any(p.version != local.version for p in peers):
        raise ConfigError("local_ip and peer_ips must all be IPv4 or all IPv6")
    if len({local, *peers}) != len(peers) + 1:
        raise ConfigError("local_ip and peer_ips must be distinct addresses")
    ip_len = 20 if local.version == 4 else 40
    overhead = _ETH_LEN + ip_len + _UDP_LEN + _BTH_LEN + _ICRC_LEN
    min_frame = max(60, overhead)  # 60: Ethernet minimum without FCS
    max_frame = _ETH_LEN + 65535 + (40 if local.version == 6 else 0)
    if not min_frame <= frame_bytes <= max_frame:
        raise ConfigError(f"frame_bytes must be in [{min_frame}, {max_frame}], got {frame_bytes}")
    if not 1 <= snaplen <= MAX_SNAPLEN:
        raise ConfigError(f"snaplen must be in [1, {MAX_SNAPLEN}], got {snaplen}")
    if cnp_every < 0:
        raise ConfigError(f"cnp_every must be >= 0, got {cnp_every}")
    if ack_every < 0:
        raise ConfigError(f"ack_every must be >= 0, got {ack_every}")
    for name, value in (("ack_delay_s", ack_delay_s), ("ack_jitter_s", ack_jitter_s)):
        if not (np.isfinite(value) and 0 <= value <= 1):
            raise ConfigError(f"{name} must be in [0, 1] seconds, got {value!r}")

    n_data = sum(sum(_frame_counts(b, frame_bytes, min_frame)) for b in (tx_bursts, rx_bursts))
    n_cnp = n_data // cnp_every if cnp_every else 0
    if n_data + n_cnp > max_packets:
        raise ConfigError(
            f"the capture would hold {n_data + n_cnp} packets, more than max_packets="
            f"{max_packets}; lower the bandwidth or the duration (or raise max_packets)"
        )

    # Frames of both directions in global time order (ties: transmit first).
    t_tx, len_tx, burst_tx = _burst_frames(tx_bursts, frame_bytes, min_frame)
    t_rx, len_rx, _ = _burst_frames(rx_bursts, frame_bytes, min_frame)
    whole_s = int(np.floor(start_time_s))
    start_ns = whole_s * _NS + round((start_time_s - whole_s) * 1e9)
    rel_ns = np.round(np.concatenate((t_tx, t_rx)) * 1e9).astype(np.int64)
    is_rx = np.concatenate((np.zeros(t_tx.size, dtype=bool), np.ones(t_rx.size, dtype=bool)))
    lengths = np.concatenate((len_tx, len_rx))
    if rel_ns.size and not (
        start_ns + int(rel_ns.min()) >= 0 and start_ns + int(rel_ns.max()) < (1 << 32) * _NS
    ):
        raise ConfigError(
            "frame times must fall between 1970 and 2106 (pcap stores unsigned 32-bit seconds); "
            "check start_time_s and the burst times"
        )
    order = np.argsort(rel_ns, kind="stable")
    rel_ns, is_rx, lengths = rel_ns[order], is_rx[order], lengths[order]

    n_peers = len(peers)
    rank = np.where(is_rx, np.cumsum(is_rx) - 1, np.cumsum(~is_rx) - 1)
    peer = rank % n_peers
    flow = is_rx.astype(np.int64) * n_peers + peer  # 0..P-1 tx flows, P..2P-1 rx flows

    data_tpl, cnp_tpl, ack_tpl, psn0, bth_off = _build_templates(local, peers, frame_bytes, seed)
    n = flow.size
    by_flow = np.argsort(flow, kind="stable")
    sorted_flow = flow[by_flow]
    group_start = np.searchsorted(sorted_flow, sorted_flow, side="left")
    seq = np.empty(n, dtype=np.int64)
    seq[by_flow] = np.arange(n, dtype=np.int64) - group_start
    psn = (psn0[flow] + seq) & 0xFFFFFF if n else np.zeros(0, dtype=np.int64)
    data_ns, data_psn, is_rx_data = rel_ns, psn, is_rx

    # Template id: 0..2P-1 full data frames, 2P..3P-1 CNPs, then shortened data frames.
    tid = flow.copy()
    templates: list[bytes] = [*data_tpl, *cnp_tpl]
    short = lengths != frame_bytes
    if np.any(short):
        keys, inverse = np.unique(flow[short] * (1 << 20) + lengths[short], return_inverse=True)
        for key in keys:
            fl, length = divmod(int(key), 1 << 20)
            templates.append(_resize_frame(data_tpl[fl], length, local.version))
        tid[short] = 3 * n_peers + inverse.reshape(-1)
    if n_cnp:
        pos_cnp = np.arange(cnp_every - 1, n, cnp_every)
        key = np.concatenate((2 * np.arange(n), 2 * pos_cnp + 1))
        merged = np.argsort(key, kind="stable")
        rel_ns = np.concatenate((rel_ns, rel_ns[pos_cnp]))[merged]
        psn = np.concatenate((psn, np.zeros(pos_cnp.size, dtype=np.int64)))[merged]
        tid = np.concatenate((tid, 2 * n_peers + peer[pos_cnp]))[merged]
    if ack_every and t_tx.size:
        burst = np.concatenate((burst_tx, np.full(t_rx.size, -1, dtype=np.int64)))[order]
        sent = np.flatnonzero(~is_rx_data)  # transmit frames, time order
        # The last frame of each (queue pair, burst), and every ack_every-th of a queue pair.
        by = np.lexsort((sent, burst[sent], flow[sent]))
        f, b = flow[sent][by], burst[sent][by]
        last = np.append((f[1:] != f[:-1]) | (b[1:] != b[:-1]), True)
        acked = np.sort(sent[by[last | (seq[sent][by] % ack_every == ack_every - 1)]])
        rng = np.random.default_rng([seed, 0xACC])
        delay = np.full(acked.size, ack_delay_s)
        if ack_jitter_s:
            delay += rng.exponential(ack_jitter_s, acked.size)
        ack_ns = data_ns[acked] + np.round(delay * 1e9).astype(np.int64)
        ack_tid = len(templates) + peer[acked]
        templates.extend(ack_tpl)
        merged = np.argsort(np.concatenate((rel_ns, ack_ns)), kind="stable")
        rel_ns = np.concatenate((rel_ns, ack_ns))[merged]
        psn = np.concatenate((psn, data_psn[acked]))[merged]
        tid = np.concatenate((tid, ack_tid))[merged]
        if start_ns + int(rel_ns[-1]) >= (1 << 32) * _NS:
            raise ConfigError("an ACK would fall after 2106 (pcap stores unsigned 32-bit seconds)")
    total = int(tid.size)
    if total > max_packets:
        raise ConfigError(
            f"the capture would hold {total} packets with its ACKs, more than max_packets="
            f"{max_packets}; lower the bandwidth or the duration (or raise max_packets)"
        )

    try:
        with Path(path).open("wb") as f:
            f.write(struct.pack("<IHHiIII", PCAP_NS_MAGIC, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
            _write_records(
                f,
                templates,
                tid=tid,
                t_ns=start_ns + rel_ns,
                psn=psn,
                snaplen=snaplen,
                bth_off=bth_off,
                cnp_templates=range(2 * n_peers, 3 * n_peers),
                ip_version=local.version,
            )
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return total


def _write_records(
    f: BinaryIO,
    templates: list[bytes],
    *,
    tid: np.ndarray,
    t_ns: np.ndarray,
    psn: np.ndarray,
    snaplen: int,
    bth_off: int,
    cnp_templates: range,
    ip_version: int,
) -> None:
    """Stamp out the pcap records: template bytes with the time and PSN patched in.

    Records are built a chunk at a time as rows of a uint8 matrix (one template row per
    record, then the time and PSN columns overwritten), which is ~50x faster than a Python
    loop; rows shorter than the widest are compacted with a boolean mask.
    """
    write = f.write
    n_tpl = len(templates)
    caplens = np.array([min(snaplen, len(t)) for t in templates], dtype=np.int64)
    width = 16 + int(caplens.max()) if n_tpl else 16
    mat = np.zeros((n_tpl, width), dtype=np.uint8)
    for i, tpl in enumerate(templates):
        cap = int(caplens[i])
        mat[i, 8:16] = np.frombuffer(struct.pack("<II", cap, len(tpl)), dtype=np.uint8)
        mat[i, 16 : 16 + cap] = np.frombuffer(tpl[:cap], dtype=np.uint8)
    is_cnp_tpl = np.zeros(n_tpl, dtype=bool)
    is_cnp_tpl[cnp_templates.start : cnp_templates.stop] = True
    # Data frames captured whole carry their ICRC: it must be recomputed for each PSN.
    needs_icrc = np.array([len(tpl) <= snaplen for tpl in templates], dtype=bool) & ~is_cnp_tpl
    psn_col = 16 + bth_off + 9  # PSN: the low 3 bytes of BTH word 2
    psn_cols = [c for c in range(psn_col, psn_col + 3) if c < width]
    cols = np.arange(width)
    rows_per_chunk = max(1, _CHUNK_BYTES // width)
    for a in range(0, tid.size, rows_per_chunk):
        t = tid[a : a + rows_per_chunk]
        rows = mat[t]
        sec, nsec = np.divmod(t_ns[a : a + rows_per_chunk], _NS)
        rows[:, 0:4] = sec.astype("<u4").view(np.uint8).reshape(-1, 4)
        rows[:, 4:8] = nsec.astype("<u4").view(np.uint8).reshape(-1, 4)
        p = psn[a : a + rows_per_chunk]
        for c in psn_cols:
            shift = 8 * (psn_col + 2 - c)
            rows[:, c] = ((p >> shift) & 0xFF).astype(np.uint8)
        for j in np.flatnonzero(needs_icrc[t]):
            length = len(templates[int(t[j])])
            frame = rows[j, 16 : 16 + length].tobytes()
            rows[j, 16 + length - _ICRC_LEN : 16 + length] = np.frombuffer(
                _icrc(frame, ip_version), dtype=np.uint8
            )
        rec_len = 16 + caplens[t]
        if np.all(rec_len == width):
            write(rows.tobytes())
        else:
            write(rows[cols[None, :] < rec_len[:, None]].tobytes())
