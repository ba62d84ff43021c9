"""Offline packet captures: a pure frame decoder and a thin pcap / pcapng reader.

The reader turns a capture into per-frame arrays (time, original length, direction) that the
window layer bins into a byte-rate series, plus totals that say what the traffic was (RoCEv2
packets, queue pairs, CNPs, flows). Only the headers needed are decoded, straight from the
memory-mapped file, and without Python work per packet beyond one step: a tight loop follows
the record (pcap) or block (pcapng) lengths, the one part that cannot be vectorized since each
record's place depends on the length of the one before. Everything else is numpy over batches
of records: :func:`decode_columns` reads every header field of a batch at once (unaligned
big-endian views of the buffer indexed by arrays of offsets) and takes, frame by frame, the
decisions of the scalar :func:`decode_frame`, which still decodes the rare frames the vector
path does not follow (IPv6 extension-header chains). The live capture source decodes its ring
frames with the same function. ``bench/throughput.py --pcap-only`` measures the whole read
(read, decode, 1 ms bins) at about 1.5 M packets/s on one core, 30-40x plain dpkt (an
``Ethernet(buf)`` per packet), on a 2-core shared VM.

Rules that matter (``shared/DESIGN.md``, pcap row):

* Bytes are counted by the frame's ORIGINAL length, never the captured length: captures are
  usually cut at a small snaplen, and host captures hold TSO/GRO frames far above the MTU.
* RoCEv2 is UDP destination port 4791 followed by a 12-byte Base Transport Header (BTH); a CNP
  is BTH opcode 0x81. An RC ACKNOWLEDGE (opcode 0x11) or RC ATOMIC ACKNOWLEDGE (0x12) carries a
  4-byte ACK Extended Transport Header (AETH) right after the BTH, whose first byte, the
  syndrome, tells an ACK (bits 7..5 = 000), an RNR NAK (001) and a NAK (011, the low 5 bits
  the NAK code: 0 is a PSN sequence error, i.e. a loss the requester retransmits for). An AETH
  cut by the snaplen leaves the frame a RoCE frame, with no syndrome.
* A Linux cooked frame (``tcpdump -i any``: SLL, SLL2) counts its device's length: libpcap's
  original length holds the 16- or 20-byte cooked header in place of the device's 14-byte
  Ethernet one (none on tun or IPoIB), which the header's ARPHRD type tells.
* Frames of several interfaces (SLL2 interface indexes, pcapng interfaces) are summed with a
  warning naming them: a tunnel's bytes are counted on it and on the device under it.
* A frame stamped implausibly far from the others (before 2000 among later frames, or beyond a
  day-long gap from the median frame: a NIC clock before PTP sync) is left out of the time
  series, with a warning; binned, it would stretch the bins over the gap.
* Up to two VLAN tags (802.1Q 0x8100, QinQ 0x88a8 / 0x9100), IPv4 (with options) and IPv6 (with
  hop-by-hop, routing, fragment, destination-options and AH extension headers).
* InfiniBand (link type 247, or ibdump's ERF records, 197): the local route header's source
  and destination LIDs stand for the MACs in telling the host's frames from its peers'. Its
  next-header field says whether the BTH follows it (2) or a 40-byte GRH first (3); that BTH
  is read as RoCEv2's (with the AETH of ACKs), keyed by LIDs instead of IP addresses, and a
  CNP is opcode 0x80 there. ibdump counts its ERF header in each record's original length; it
  is taken off, as it never was on the wire.
* RC ACK round-trip latency (``CaptureStats.ack_latency_s``): an ACK's BTH PSN is that of the
  last request it acknowledges (ACKs coalesce), so each ACK is matched with the RC request of
  that PSN on the reverse address pair, the latest one at or before the ACK (a retransmission's
  last copy) and at most :data:`ACK_MATCH_WINDOW_NS` older; one sample per ACK, none for NAKs
  or for ACKs whose request was not captured. The match is vectorized (one sort per record
  chunk; see :class:`_AckMatcher`). Ambiguity: the BTH names only the destination queue pair,
  so a request (to the responder's QP) and its ACK (to the requester's) share no QP number and
  the key is (addresses, PSN) alone; several QPs between two hosts can use the same PSN value.
  Taking the latest request before the ACK makes a wrong match need another QP to send that
  very PSN inside the round trip itself; where the right request was not captured, another
  QP's within the window can be taken. A host capture sees both sides: requests it sent and
  its peers' ACKs (``ack_latency_local_requester_s``: fabric round trip plus the peer's ACK
  turnaround) and its peers' requests with its own ACKs (``ack_latency_remote_requester_s``:
  its own responder turnaround, no fabric in it); they are split by the source MAC of the
  request against ``local_mac``.

A gzip-, bzip2- or xz-compressed capture is inflated to a temporary file first (a cut stream:
what it held, with a warning); a zstd one is refused with ``zstd -d`` to run.

Malformed files, as decided here:

* Not a capture (bad magic, empty file, cut file header): :class:`InputFormatError`.
* The file ends inside a record or block (a capture that was killed, a partial copy): the
  records read so far are kept, ``stats.truncated`` is set and ``stats.warnings`` names the
  record. The cut record is not counted.
* A record or block whose own header is inconsistent (captured length over 256 KiB, original
  length over 16 MiB, a pcapng block length that is not a multiple of 4, smaller than its
  header or not repeated at its end, an unknown interface): :class:`InputFormatError` with the
  1-based record (pcap) or block (pcapng) number as ``line``. Past such a point nothing can be
  trusted, and stopping quietly would make the byte total silently wrong.
* A frame whose headers cannot be decoded (runt, unsupported link type, IP or transport header
  cut by the snaplen or malformed) is still counted in ``packets`` and ``bytes`` (it was on the
  wire) but in none of the per-protocol totals; ``stats.skipped_records`` counts such frames.

Formats: https://www.ietf.org/archive/id/draft-ietf-opsawg-pcap-04.html (pcap) and
https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html (pcapng); link types from
https://www.tcpdump.org/linktypes.html.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import socket
import struct
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO, TypeAlias

import numpy as np
import numpy.typing as npt

from agent.errors import InputFormatError
from collectors._stray import stray_times
from collectors._text import inflated_chunks, open_binary

__all__ = [
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

# Link types (https://www.tcpdump.org/linktypes.html).
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
#: InfiniBand packets from the local route header (LRH) on, and ERF records (ibdump -w with
#: its default ERF header): headers past the LRH are not decoded, its local identifiers (LIDs)
#: stand for the MACs, so the two directions of an InfiniBand capture are told apart.
LINKTYPE_ERF = 197
LINKTYPE_INFINIBAND = 247
#: ERF record types (ERF_TYPE_* in Wireshark's wiretap/erf_record.h) that hold an InfiniBand
#: packet from its LRH; the type byte's top bit says extension headers follow the 16 bytes.
_ERF_TYPES_IB = frozenset((21, 25))
_ERF_MAX_EXT = 8  # extension headers followed (8 bytes each); more: the frame is not read
_LINKTYPES_IB = frozenset((LINKTYPE_ERF, LINKTYPE_INFINIBAND))

#: sll_pkttype of a frame the host sent (<linux/if_packet.h>); received ones are 0-3.
PACKET_OUTGOING = 4

ROCEV2_UDP_PORT = 4791
CNP_OPCODE = 0x81
#: InfiniBand congestion control's CNP (BTH opcode; IBTA vol. 1 annex A10).
IB_CNP_OPCODE = 0x80
#: The top byte of the flow and QP keys of InfiniBand frames (RoCE's is the IP version).
_IB_KEY_MARK = 0x1B
# RC ACKNOWLEDGE and RC ATOMIC ACKNOWLEDGE: a 4-byte AETH follows their BTH (IBTA vol. 1).
_ACK_OPCODES = frozenset((0x11, 0x12))
_AETH_ACK = 0  # syndrome bits 7..5
_AETH_RNR_NAK = 1
_AETH_NAK = 3
_AETH_SEQ_NAK = 0x60  # NAK, code 0: PSN sequence error

# libpcap's largest snapshot length for almost every link type (MAXIMUM_SNAPLEN).
MAX_CAPLEN = 262_144
# Far above any frame a NIC hands up (BIG TCP GSO tops out at 512 KiB); a larger original
# length is a corrupt record, and counting it would make the byte total silently wrong.
MAX_ORIG_LEN = 1 << 24

_ETHERTYPE_IPV4 = 0x0800
_ETHERTYPE_IPV6 = 0x86DD
_VLAN_TPIDS = frozenset((0x8100, 0x88A8, 0x9100))
_IPV6_EXT_GENERIC = frozenset((0, 43, 60))  # hop-by-hop, routing, destination options
_IPPROTO_TCP = 6
_IPPROTO_UDP = 17
_IPPROTO_FRAGMENT = 44
_IPPROTO_AH = 51

_ETH = struct.Struct("!6s6sH")
_SLL = struct.Struct("!HHH8sH")
_SLL2 = struct.Struct("!HHIHBB8s")
_TAG = struct.Struct("!HH")
_IPV4 = struct.Struct("!B5xHxB2x4s4s")  # ver/ihl, frag field, proto, src, dst
_IPV6 = struct.Struct("!B5xB1x16s16s")  # first byte, next header, src, dst
_PORTS = struct.Struct("!HH")
_BTH = struct.Struct("!B3xII")  # opcode, resv8|dest QP, ackreq|PSN

_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),  # microsecond, little-endian
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanosecond, little-endian
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_PCAPNG_BOM = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_BT_IDB = 1
_BT_OPB = 2
_BT_SPB = 3
_BT_EPB = 6
_BT_SHB = 0x0A0D0D0A
_OPT_END = 0
_OPT_IF_NAME = 2
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14

_NS = 1_000_000_000
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

_Buf: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
# dst MAC, src MAC, ethertype, vlan, ip version, src ip, dst ip, proto, sport, dport, roce,
# BTH opcode, dest QP, PSN, AETH syndrome.  IP addresses stay raw bytes on the hot path.
_Decoded: TypeAlias = tuple[
    bytes,
    bytes,
    int,
    int | None,
    int | None,
    bytes | None,
    bytes | None,
    int | None,
    int | None,
    int | None,
    bool,
    int | None,
    int | None,
    int | None,
    int | None,
]


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """What :func:`decode_frame` learns from one frame.

    Attributes:
        src_mac: Source MAC (6 bytes); empty when the link type carries none (raw IP); the
            2-byte source LID of an InfiniBand frame.
        dst_mac: Destination MAC; empty for raw IP and Linux cooked captures; the 2-byte
            destination LID of an InfiniBand frame.
        ethertype: The EtherType after any VLAN tags (for raw IP: 0x0800 or 0x86DD).
        vlan: VLAN ID of the innermost tag (the one the host configured), or None.
        ip_version: 4, 6, or None for a non-IP frame.
        src_ip: Source address in text form, or None.
        dst_ip: Destination address in text form, or None.
        proto: IP protocol (IPv6: the header after the extension headers), or None.
        src_port: TCP/UDP source port; None for other protocols and non-first fragments.
        dst_port: TCP/UDP destination port; as ``src_port``.
        roce: A whole BTH: RoCEv2 (UDP destination port 4791) or native InfiniBand.
        bth_opcode: BTH opcode, or None.
        dest_qp: BTH destination queue pair (24 bits), or None.
        psn: BTH packet sequence number (24 bits), or None.
        cnp: Congestion notification packet (BTH opcode 0x81 on RoCEv2, 0x80 on InfiniBand).
        aeth_syndrome: The AETH syndrome byte (bits 7..5: 000 ACK, 001 RNR NAK, 011 NAK with
            the NAK code in bits 4..0, 010 reserved) of an RC ACKNOWLEDGE or RC ATOMIC
            ACKNOWLEDGE (BTH opcode 0x11 / 0x12); None for any other frame, and when the
            4-byte AETH is not all within the captured bytes.
    """

    src_mac: bytes
    dst_mac: bytes
    ethertype: int
    vlan: int | None
    ip_version: int | None
    src_ip: str | None
    dst_ip: str | None
    proto: int | None
    src_port: int | None
    dst_port: int | None
    roce: bool
    bth_opcode: int | None
    dest_qp: int | None
    psn: int | None
    cnp: bool
    aeth_syndrome: int | None = None


@dataclass(frozen=True)
class CaptureStats:
    """Totals over one capture.

    Attributes:
        packets: Frames read (including undecodable ones).
        bytes: Sum of ORIGINAL frame lengths, including undecodable frames.
        roce_packets: RoCEv2 frames (UDP dport 4791 with a BTH), CNPs included.
        cnp_packets: RoCEv2 CNPs (BTH opcode 0x81).
        roce_qps: Distinct (destination IP, BTH destination QP) pairs.
        flows: Distinct (proto, src ip, src port, dst ip, dst port) over IP frames; ports are
            None for protocols other than TCP/UDP and for non-first fragments.
        tcp_bytes: Original bytes of decodable TCP frames.
        udp_bytes: Original bytes of decodable UDP frames (RoCEv2 included).
        skipped_records: Frames whose headers could not be decoded (runt, unsupported link
            type, a header cut by the snaplen or malformed); counted in ``packets`` and
            ``bytes`` only.
        truncated: The file ended inside a record; the cut record is not counted.
        first_time_s: Earliest frame time (POSIX seconds), None without timed frames.
        last_time_s: Latest frame time, None without timed frames.
        link_type: The pcap link type (pcapng: of the first interface; -1 when none declared).
        local_mac: The MAC seen in the most frames (as source or unicast destination): the
            capturing host. None when no frame carries a MAC.
        warnings: Human-readable notes on anything unusual (truncation, odd records).
        roce_acks: RoCEv2 ACKs: RC ACKNOWLEDGE / ATOMIC ACKNOWLEDGE frames (BTH opcode 0x11 /
            0x12) whose captured AETH syndrome is an ACK (bits 7..5 = 000).
        roce_naks: RoCEv2 negative acknowledgements: AETH syndrome NAK (011, any NAK code) or
            RNR NAK (001), as ``roce_acks``. Frames whose AETH the snaplen cut count in
            neither (nor does the reserved class 010).
        roce_seq_naks: The NAKs of ``roce_naks`` with NAK code 0, PSN sequence error
            (syndrome 0x60): the responder saw a gap in the PSNs, i.e. a packet was lost and
            the requester goes back and retransmits.
        ack_latency_s: RC ACK round-trip latency (seconds) over every ACK matched with the
            captured request whose PSN it carries (see the module docstring); None when none
            matched.
        ack_latency_local_requester_s: Of those, the requests the capturing host sent
            (``local_mac``) and the ACKs its peers returned: the fabric round trip plus the
            peer's ACK turnaround. None when none, or when no frame carries a MAC.
        ack_latency_remote_requester_s: The requests the peers sent and the ACKs the
            capturing host returned: its own responder turnaround (request in, ACK out, both
            stamped here), no fabric. None as ``ack_latency_local_requester_s``.
    """

    packets: int
    bytes: int
    roce_packets: int
    cnp_packets: int
    roce_qps: int
    flows: int
    tcp_bytes: int
    udp_bytes: int
    skipped_records: int
    truncated: bool
    first_time_s: float | None
    last_time_s: float | None
    link_type: int
    local_mac: str | None
    warnings: tuple[str, ...] = ()
    roce_acks: int = 0
    roce_naks: int = 0
    roce_seq_naks: int = 0
    ack_latency_s: AckLatency | None = None
    ack_latency_local_requester_s: AckLatency | None = None
    ack_latency_remote_requester_s: AckLatency | None = None


@dataclass(frozen=True)
class Capture:
    """Per-frame arrays of one capture, in file order.

    Attributes:
        time_s: float64 POSIX seconds per frame (float64 keeps ~0.24 µs at today's epoch;
            ``time_ns`` is exact). NaN for pcapng simple packet blocks before any timed frame.
        length: int64 ORIGINAL length per frame.
        is_tx: bool, the capturing host sent the frame: a Linux cooked header's packet type
            is PACKET_OUTGOING where the frame has one, else its source MAC is
            ``stats.local_mac``.
        stats: Totals.
        time_ns: int64 POSIX nanoseconds per frame, exact (None when built by hand).
        ack_samples: The RC ACK latency samples behind ``stats.ack_latency_s``, for merging
            several captures (:func:`merge_ack_samples`); None when no ACK matched.
    """

    time_s: np.ndarray
    length: np.ndarray
    is_tx: np.ndarray
    stats: CaptureStats
    time_ns: np.ndarray | None = None
    ack_samples: AckSamples | None = None


# ------------------------------------------------------------------------------------------
# Frame decoder (pure)


def _decode(buf: _Buf, off: int, end: int, link_type: int) -> _Decoded | None:
    """Decode the headers of the frame ``buf[off:end]``; None when undecodable.

    Works on any buffer (the file's mmap included) without copying the frame. Every read is
    bounds-checked first, so no byte string makes it raise.
    """
    if link_type == LINKTYPE_ETHERNET:
        if end - off < 14:
            return None
        dst, src, et = _ETH.unpack_from(buf, off)
        p = off + 14
    elif link_type == LINKTYPE_LINUX_SLL:
        if end - off < 16:
            return None
        _pkttype, _hatype, halen, addr, et = _SLL.unpack_from(buf, off)
        src = addr[:6] if halen == 6 else b""
        dst = b""
        p = off + 16
    elif link_type == LINKTYPE_LINUX_SLL2:
        if end - off < 20:
            return None
        et, _res, _ifindex, _hatype, _pkttype, halen, addr = _SLL2.unpack_from(buf, off)
        src = addr[:6] if halen == 6 else b""
        dst = b""
        p = off + 20
    elif link_type in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if end - off < 1:
            return None
        version = buf[off] >> 4
        if version == 4:
            et = _ETHERTYPE_IPV4
        elif version == 6:
            et = _ETHERTYPE_IPV6
        else:
            return None
        src = dst = b""
        p = off
    else:
        return None

    vlan: int | None = None
    if et in _VLAN_TPIDS:
        for _ in range(2):  # at most two tags (QinQ); a third is left as the ethertype
            if end - p < 4:
                return None
            tci, et = _TAG.unpack_from(buf, p)
            vlan = tci & 0x0FFF
            p += 4
            if et not in _VLAN_TPIDS:
                break

    first_fragment = True
    if et == _ETHERTYPE_IPV4:
        if end - p < 20:
            return None
        vihl, frag, proto, sip, dip = _IPV4.unpack_from(buf, p)
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20 or end - p < ihl:
            return None
        ipver = 4
        first_fragment = (frag & 0x1FFF) == 0
        l4 = p + ihl
    elif et == _ETHERTYPE_IPV6:
        if end - p < 40:
            return None
        b0, proto, sip, dip = _IPV6.unpack_from(buf, p)
        if b0 >> 4 != 6:
            return None
        ipver = 6
        l4 = p + 40
        for _ in range(8):  # a longer extension-header chain is left undecoded
            if proto in _IPV6_EXT_GENERIC or proto == _IPPROTO_AH:
                if end - l4 < 2:
                    return None
                hdr_len = buf[l4 + 1]
                nxt = buf[l4]
                l4 += (hdr_len + 2) * 4 if proto == _IPPROTO_AH else (hdr_len + 1) * 8
                proto = nxt
            elif proto == _IPPROTO_FRAGMENT:
                if end - l4 < 8:
                    return None
                nxt = buf[l4]
                first_fragment = ((buf[l4 + 2] << 5) | (buf[l4 + 3] >> 3)) == 0
                l4 += 8
                proto = nxt
                if not first_fragment:
                    break
            else:
                break
    else:
        return (
            dst, src, et, vlan, None, None, None, None, None, None, False, None, None, None, None,
        )  # fmt: skip

    if proto not in (_IPPROTO_TCP, _IPPROTO_UDP) or not first_fragment:
        return (
            dst, src, et, vlan, ipver, sip, dip, proto, None, None, False, None, None, None, None,
        )  # fmt: skip
    if end - l4 < 4:
        return None
    sport, dport = _PORTS.unpack_from(buf, l4)
    if proto == _IPPROTO_UDP and dport == ROCEV2_UDP_PORT:
        bth = l4 + 8
        if end - bth < 12:
            return None
        opcode, qp_word, psn_word = _BTH.unpack_from(buf, bth)
        # The AETH (4 bytes) follows the BTH of an ACK; cut by the snaplen: no syndrome.
        syndrome = buf[bth + 12] if opcode in _ACK_OPCODES and end - bth >= 16 else None
        return (
            dst, src, et, vlan, ipver, sip, dip, proto, sport, dport,
            True, opcode, qp_word & 0xFFFFFF, psn_word & 0xFFFFFF, syndrome,
        )  # fmt: skip
    return (
        dst, src, et, vlan, ipver, sip, dip, proto, sport, dport, False, None, None, None, None,
    )  # fmt: skip


def _decode_ib(
    buf: bytes | bytearray | memoryview, link_type: int
) -> tuple[bytes, bytes, int, int, int, int | None] | None:
    """(DLID, SLID, BTH opcode, destination QP, PSN, AETH syndrome) of one InfiniBand frame.

    None unless a whole BTH follows its LRH (LNH 2) or the LRH and a GRH (LNH 3); for ERF
    records (ibdump), the LRH follows the ERF header and its extension headers, in records of
    an InfiniBand type. The scalar twin of :func:`_ib_transport`.
    """
    end = len(buf)
    at = 0
    if link_type == LINKTYPE_ERF:
        if end < 16 or buf[8] & 0x7F not in _ERF_TYPES_IB:
            return None
        at, more = 16, buf[8] & 0x80
        for _ in range(_ERF_MAX_EXT):
            if not more:
                break
            if end < at + 8:
                return None
            more = buf[at] & 0x80
            at += 8
        if more:
            return None
    if end < at + 8:
        return None
    lnh = buf[at + 1] & 3
    if lnh < 2:
        return None
    bth = at + 8 + (40 if lnh == 3 else 0)
    if end < bth + 12:
        return None
    opcode, qp_word, psn_word = _BTH.unpack_from(buf, bth)
    syndrome = buf[bth + 12] if opcode in _ACK_OPCODES and end >= bth + 16 else None
    dlid, slid = bytes(buf[at + 2 : at + 4]), bytes(buf[at + 6 : at + 8])
    return dlid, slid, opcode, qp_word & 0xFFFFFF, psn_word & 0xFFFFFF, syndrome


def _ip_text(addr: bytes | None) -> str | None:
    if addr is None:
        return None
    return socket.inet_ntop(socket.AF_INET if len(addr) == 4 else socket.AF_INET6, addr)


def decode_frame(buf: bytes | bytearray | memoryview, link_type: int = 1) -> FrameInfo | None:
    """Decode one captured frame's headers.

    Pure and total: it never raises. Returns None for a runt, an unsupported link type, or a
    frame whose announced IP / TCP / UDP / BTH header is cut short or malformed; such frames
    still count by their original length in :func:`read_capture`.

    Args:
        buf: The captured bytes of the frame (possibly cut at the snaplen).
        link_type: pcap link type: 1 Ethernet, 113 Linux SLL, 276 Linux SLL2, 101/228/229
            raw IP, 247 InfiniBand, 197 ERF (ibdump). An InfiniBand frame is decoded when a
            whole BTH follows its LRH (or GRH): its "MACs" are then its 2-byte LIDs, and it
            has no EtherType (0) and no IP fields.

    Returns:
        The decoded fields, or None.
    """
    if link_type in _LINKTYPES_IB:
        ib = _decode_ib(buf, link_type)
        if ib is None:
            return None
        dlid, slid, opcode, qp, seq, syndrome = ib
        return FrameInfo(
            src_mac=slid, dst_mac=dlid, ethertype=0, vlan=None, ip_version=None, src_ip=None,
            dst_ip=None, proto=None, src_port=None, dst_port=None, roce=True, bth_opcode=opcode,
            dest_qp=qp, psn=seq, cnp=opcode == IB_CNP_OPCODE, aeth_syndrome=syndrome,
        )  # fmt: skip
    try:
        r = _decode(buf, 0, len(buf), link_type)
    except (struct.error, IndexError, TypeError, ValueError):  # pragma: no cover - defensive
        return None
    if r is None:
        return None
    dst, src, et, vlan, ipver, sip, dip, proto, sport, dport, roce, opc, dqp, psn, syn = r
    return FrameInfo(
        src_mac=src,
        dst_mac=dst,
        ethertype=et,
        vlan=vlan,
        ip_version=ipver,
        src_ip=_ip_text(sip),
        dst_ip=_ip_text(dip),
        proto=proto,
        src_port=sport,
        dst_port=dport,
        roce=roce,
        bth_opcode=opc,
        dest_qp=dqp,
        psn=psn,
        cnp=opc == CNP_OPCODE,
        aeth_syndrome=syn,
    )


# ------------------------------------------------------------------------------------------
# Vectorized decoder: the same decisions as _decode, for many frames at once

# Frames per decode batch: bounds the working set (a few dozen bytes per frame) for any file.
_CHUNK = 1 << 16
_MASK48 = (1 << 48) - 1
# How far past a frame's start the decoder reads: SLL2 (20) + two tags (8) + IPv4 with
# options (60) + UDP (8) + the 12 BTH bytes read = 108; the AETH syndrome: byte 108. For
# InfiniBand in ERF: header and 8 extensions (80) + LRH (8) + GRH (40) + BTH (12) = 140;
# the AETH syndrome: byte 140.
_HDR_REACH = 160
# Up to this many bytes at a buffer's end are copied rather than decoded in two passes.
_TAIL_COPY = 1 << 22
_FLOW_WORDS = 5
_QP_WORDS = 3
_FLOW_KEY = np.dtype(f"V{8 * _FLOW_WORDS}")
_QP_KEY = np.dtype(f"V{8 * _QP_WORDS}")
# Odd 64-bit constants for the row hash that groups keys before the exact comparison.
_HASH_MUL = (
    0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
    0xFF51AFD7ED558CCD,
)  # fmt: skip

_I64: TypeAlias = npt.NDArray[np.int64]
_U64: TypeAlias = npt.NDArray[np.uint64]
_Bool: TypeAlias = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class FrameColumns:
    """What :func:`decode_columns` learns from many frames: one equal-length array per field.

    Every field is what :func:`decode_frame` would say for the frame, as a column; a frame it
    returns None for has ``decoded`` False and the "none" value everywhere else, except the
    Ethernet MACs (see ``has_src_mac``) and InfiniBand LIDs (in the MAC columns wherever the
    LRH was captured).

    Attributes:
        decoded: bool, the headers could be decoded (see :func:`decode_frame`).
        ethertype: uint16, the EtherType after any VLAN tags; 0 when not decoded.
        vlan: int16, VLAN ID of the innermost tag; -1 when untagged or not decoded.
        ip_version: uint8, 4 or 6; 0 for non-IP and undecoded frames.
        proto: int16, IP protocol (IPv6: after the extension headers); -1 when not IP.
        src_port: int32, TCP/UDP source port; -1 for other protocols and non-first fragments.
        dst_port: int32, as ``src_port``.
        tcp: bool, an IP frame of protocol 6 (non-first fragments included).
        udp: bool, an IP frame of protocol 17 (non-first fragments included).
        roce: bool, a frame with a whole BTH: RoCEv2 (UDP destination port 4791) or native
            InfiniBand (LRH next header 2 or 3: the BTH after the LRH, or after its GRH).
        cnp: bool, a CNP: BTH opcode 0x81 on RoCEv2, 0x80 on InfiniBand.
        bth_opcode: int16, BTH opcode; -1 where not ``roce``.
        dest_qp: int32, BTH destination QP (24 bits); -1 where not ``roce``.
        psn: int32, BTH packet sequence number (24 bits, BTH bytes 9-11); -1 where not ``roce``.
        aeth_syndrome: int16, the AETH syndrome byte (0-255) of a ``roce`` frame with BTH
            opcode 0x11 or 0x12 whose 4-byte AETH is within the captured bytes; -1 elsewhere
            (see :attr:`FrameInfo.aeth_syndrome`).
        src_mac: uint64, the source MAC as a 48-bit number (first byte most significant);
            0 where ``has_src_mac`` is False.
        dst_mac: uint64, the destination MAC, as ``src_mac``.
        has_src_mac: bool, the frame carries a source MAC: Ethernet with at least 12 captured
            bytes (decoded or not, so that direction is known even for a runt), or a decoded
            Linux cooked frame whose link-layer address is 6 bytes. An all-zero MAC (the
            loopback device's) is a MAC, hence this column.
        has_dst_mac: bool, as ``has_src_mac``; Ethernet only.
        pkttype: int8, a Linux cooked frame's packet type (0 to the host, 1 broadcast, 2
            multicast, 3 to another host, 4 sent by the host: ``PACKET_OUTGOING``); -1 for
            other link types and cut headers.
        ifindex: int64, a Linux cooked v2 (SLL2) frame's interface index; -1 elsewhere.
        flow_key: ``V40`` (np.void of 40 bytes), equal for frames of the same 5-tuple (proto,
            src ip, src port, dst ip, dst port), so ``np.unique(flow_key[ip_version > 0]).size``
            counts flows. Five native-endian uint64 words (``.view(np.uint64).reshape(-1, 5)``):
            ``ip_version << 56 | proto << 48 | has_ports << 40 | src_port << 16 | dst_port``,
            then the source and the destination address, each as two words (IPv6: its high
            and low 64 bits; IPv4: the address, 0). Ports count only where ``src_port >= 0``.
            All zero for other frames, except InfiniBand ones with a BTH: ``0x1B << 56 |
            dest_qp``, SLID, 0, DLID, 0 (a flow is a source port's traffic to one queue pair).
        qp_key: ``V24``, equal for frames to the same (destination IP, BTH destination QP), so
            ``np.unique(qp_key[roce]).size`` counts queue pairs. Three native-endian uint64
            words: ``ip_version << 56 | dest_qp``, then the destination address as two words
            (InfiniBand: ``0x1B << 56 | dest_qp``, DLID, 0). All zero where ``roce`` is False.
    """

    decoded: _Bool
    ethertype: npt.NDArray[np.uint16]
    vlan: npt.NDArray[np.int16]
    ip_version: npt.NDArray[np.uint8]
    proto: npt.NDArray[np.int16]
    src_port: npt.NDArray[np.int32]
    dst_port: npt.NDArray[np.int32]
    tcp: _Bool
    udp: _Bool
    roce: _Bool
    cnp: _Bool
    bth_opcode: npt.NDArray[np.int16]
    dest_qp: npt.NDArray[np.int32]
    psn: npt.NDArray[np.int32]
    aeth_syndrome: npt.NDArray[np.int16]
    src_mac: _U64
    dst_mac: _U64
    has_src_mac: _Bool
    has_dst_mac: _Bool
    pkttype: npt.NDArray[np.int8]
    ifindex: npt.NDArray[np.int64]
    flow_key: npt.NDArray[np.void]
    qp_key: npt.NDArray[np.void]


class _Gather:
    """Reads of big-endian fields at many byte positions of one buffer (no copy of it).

    Unaligned multi-byte views of the buffer with a 1-byte stride, indexed by arrays of
    positions. A position past the end is clamped to it: what is read there is garbage, and
    every caller checks the captured length before trusting a field, as :func:`_decode` does.
    """

    __slots__ = ("_l8", "_l32", "_l64", "_v8", "_v32", "_v64", "size")

    def __init__(self, buf: _Buf) -> None:
        raw = np.frombuffer(buf, dtype=np.uint8)
        self.size = int(raw.size)
        if raw.size < 8:  # too small for an 8-byte view: a padded copy
            raw = np.concatenate([raw, np.zeros(8, dtype=np.uint8)])
        self._v8 = raw
        self._v32 = np.ndarray((raw.size - 3,), dtype="<u4", buffer=raw, strides=(1,))
        self._v64 = np.ndarray((raw.size - 7,), dtype="<u8", buffer=raw, strides=(1,))
        self._l8 = raw.size - 1
        self._l32 = raw.size - 4
        self._l64 = raw.size - 8

    def u8(self, pos: _I64) -> _U64:
        return self._v8[np.minimum(pos, self._l8)].astype(np.uint64)

    def be32(self, pos: _I64) -> _U64:
        return self._v32[np.minimum(pos, self._l32)].byteswap().astype(np.uint64)

    def be64(self, pos: _I64) -> _U64:
        return self._v64[np.minimum(pos, self._l64)].byteswap(inplace=True)

    def be64_some(self, pos: _I64, rows: _Bool) -> _U64:
        """``be64`` where ``rows``; elsewhere 0 or garbage (cheaper when few rows are wanted)."""
        k = int(np.count_nonzero(rows))
        if k > rows.size // 4:
            return self.be64(pos)
        out = np.zeros(rows.size, dtype=np.uint64)
        if k:
            at = np.flatnonzero(rows)
            out[at] = self.be64(pos[at])
        return out

    def pair(self, pos: _I64, big: bool) -> tuple[_I64, _I64]:
        """Two consecutive 32-bit fields in the file's byte order, from one 8-byte read."""
        w = self._v64[np.minimum(pos, self._l64)]
        if big:
            w = w.byteswap(inplace=True)
            first, second = w >> np.uint64(32), w & np.uint64(0xFFFFFFFF)
        else:
            first, second = w & np.uint64(0xFFFFFFFF), w >> np.uint64(32)
        return first.astype(np.int64), second.astype(np.int64)

    def u32(self, pos: _I64, big: bool) -> _U64:
        words = self._v32[np.minimum(pos, self._l32)]
        return (words.byteswap() if big else words).astype(np.uint64)


def _is_tpid(et: _U64) -> _Bool:
    tpid: _Bool = (et == 0x8100) | (et == 0x88A8) | (et == 0x9100)
    return tpid


def _empty_columns(n: int) -> dict[str, np.ndarray]:
    """Columns of n frames that decoded to nothing (the values of "none")."""
    return {
        "decoded": np.zeros(n, dtype=bool),
        "ethertype": np.zeros(n, dtype=np.uint16),
        "vlan": np.full(n, -1, dtype=np.int16),
        "ip_version": np.zeros(n, dtype=np.uint8),
        "proto": np.full(n, -1, dtype=np.int16),
        "src_port": np.full(n, -1, dtype=np.int32),
        "dst_port": np.full(n, -1, dtype=np.int32),
        "tcp": np.zeros(n, dtype=bool),
        "udp": np.zeros(n, dtype=bool),
        "roce": np.zeros(n, dtype=bool),
        "cnp": np.zeros(n, dtype=bool),
        "bth_opcode": np.full(n, -1, dtype=np.int16),
        "dest_qp": np.full(n, -1, dtype=np.int32),
        "psn": np.full(n, -1, dtype=np.int32),
        "aeth_syndrome": np.full(n, -1, dtype=np.int16),
        "src_mac": np.zeros(n, dtype=np.uint64),
        "dst_mac": np.zeros(n, dtype=np.uint64),
        "has_src_mac": np.zeros(n, dtype=bool),
        "has_dst_mac": np.zeros(n, dtype=bool),
        "pkttype": np.full(n, -1, dtype=np.int8),
        "ifindex": np.full(n, -1, dtype=np.int64),
        "flow_key": np.zeros((n, _FLOW_WORDS), dtype=np.uint64),
        "qp_key": np.zeros((n, _QP_WORDS), dtype=np.uint64),
        "flow_hash": np.zeros(n, dtype=np.uint64),  # _hash_words of the key (0 for 0)
        "qp_hash": np.zeros(n, dtype=np.uint64),
    }


def _addr_words(addr: bytes) -> tuple[int, int]:
    if len(addr) == 4:
        return int.from_bytes(addr, "big"), 0
    return int.from_bytes(addr[:8], "big"), int.from_bytes(addr[8:], "big")


def _fill_scalar(cols: dict[str, np.ndarray], i: int, r: _Decoded | None) -> None:
    """Set row i of the columns from the scalar decoder's answer (the rare frames)."""
    if r is None:
        cols["decoded"][i] = False
        cols["ethertype"][i] = 0
        cols["vlan"][i] = -1
        return
    _dst, _src, et, vlan, ipver, sip, dip, proto, sport, dport, roce, opc, dqp, psn, syn = r
    cols["decoded"][i] = True
    cols["ethertype"][i] = et
    cols["vlan"][i] = -1 if vlan is None else vlan
    if ipver is None or sip is None or dip is None or proto is None:
        return
    has_ports = sport is not None and dport is not None
    cols["ip_version"][i] = ipver
    cols["proto"][i] = proto
    cols["tcp"][i] = proto == _IPPROTO_TCP
    cols["udp"][i] = proto == _IPPROTO_UDP
    s_hi, s_lo = _addr_words(sip)
    d_hi, d_lo = _addr_words(dip)
    sp, dp = (sport or 0, dport or 0) if has_ports else (0, 0)
    if has_ports:
        cols["src_port"][i] = sp
        cols["dst_port"][i] = dp
    cols["flow_key"][i] = (
        ipver << 56 | proto << 48 | int(has_ports) << 40 | sp << 16 | dp,
        s_hi,
        s_lo,
        d_hi,
        d_lo,
    )
    if roce and opc is not None and dqp is not None and psn is not None:
        cols["roce"][i] = True
        cols["cnp"][i] = opc == CNP_OPCODE
        cols["bth_opcode"][i] = opc
        cols["dest_qp"][i] = dqp
        cols["psn"][i] = psn
        cols["aeth_syndrome"][i] = -1 if syn is None else syn
        cols["qp_key"][i] = (ipver << 56 | dqp, d_hi, d_lo)


def ack_counts(syndrome: npt.NDArray[np.int16]) -> tuple[int, int, int]:
    """(ACKs, NAKs, PSN-sequence NAKs) among AETH syndromes (-1 where a frame has none).

    NAKs are the NAK (011) and RNR NAK (001) classes; a sequence NAK (code 0) says the
    responder saw a gap in the PSNs: a lost packet and a go-back-N retransmission.
    """
    if not (syndrome >= 0).any():
        return 0, 0, 0
    kind = syndrome >> 5  # -1 where none
    acks = int(np.count_nonzero(kind == _AETH_ACK))
    naks = int(np.count_nonzero((kind == _AETH_NAK) | (kind == _AETH_RNR_NAK)))
    return acks, naks, int(np.count_nonzero(syndrome == _AETH_SEQ_NAK))


def decode_columns(
    buf: _Buf | memoryview, offs: npt.ArrayLike, caps: npt.ArrayLike, link_type: int
) -> FrameColumns:
    """Decode the headers of many frames of one buffer at once (numpy, no per-frame Python).

    For the live capture (frames in a TPACKET_V3 ring) and the offline reader alike: one
    decoder, whose answers are those of :func:`decode_frame` frame by frame (the rare frames
    the vector path does not follow, IPv6 extension-header chains, go through it). Bytes past a
    frame's captured length are never trusted. Never raises for any bytes.

    Args:
        buf: A C-contiguous buffer holding the frames (bytes, bytearray, mmap, memoryview).
        offs: int64 array, byte offset in ``buf`` of each frame's first (link-layer) byte.
        caps: int64 array, captured length of each frame (cut to what ``buf`` holds).
        link_type: pcap link type of every frame: 1 Ethernet, 113 Linux SLL, 276 Linux SLL2,
            101/228/229 raw IP; any other: nothing decoded.

    Returns:
        One array per field, each as long as ``offs``; see :class:`FrameColumns`.
    """
    if isinstance(buf, memoryview):
        buf = buf.cast("B")  # byte offsets, whatever the view's item format
    g = _Gather(buf)
    o = np.asarray(offs, dtype=np.int64).ravel()
    c = np.asarray(caps, dtype=np.int64).ravel()
    if o.shape != c.shape:
        raise ValueError(f"offs and caps differ in length ({o.size} and {c.size})")
    o = np.clip(o, 0, g.size)
    c = np.clip(np.minimum(c, g.size - o), 0, None)
    return _columns(_decode_into(g, buf, o, c, link_type))


def _columns(cols: dict[str, np.ndarray]) -> FrameColumns:
    flow = np.ascontiguousarray(cols.pop("flow_key")).view(_FLOW_KEY).reshape(-1)
    qp = np.ascontiguousarray(cols.pop("qp_key")).view(_QP_KEY).reshape(-1)
    del cols["flow_hash"], cols["qp_hash"]
    return FrameColumns(flow_key=flow, qp_key=qp, **cols)


def _decode_into(
    g: _Gather, buf: _Buf | memoryview, o: _I64, c: _I64, lt: int
) -> dict[str, np.ndarray]:
    """The vector decoder: columns (flow and QP keys as word matrices) for frames o/c.

    Frames that start within _HDR_REACH bytes of the buffer's end are decoded from a
    zero-padded copy of that end, so that every multi-byte read stays where it was aimed: all
    the frames when the copy is small (a ring block, a short buffer), else only those.
    """
    near = o > g.size - _HDR_REACH
    if not near.any():
        return _decode_rows(g, buf, o, c, lt)
    low = int(o.min())
    if g.size - low <= _TAIL_COPY:
        tail = bytes(buf[low:]) + bytes(_HDR_REACH)
        return _decode_rows(_Gather(tail), tail, o - low, c, lt)
    rows, far = np.flatnonzero(near), np.flatnonzero(~near)
    base = int(o[rows].min())
    tail = bytes(buf[base:]) + bytes(_HDR_REACH)
    cols = _empty_columns(int(o.size))
    parts = (
        (far, _decode_rows(g, buf, o[far], c[far], lt)),
        (rows, _decode_rows(_Gather(tail), tail, o[rows] - base, c[rows], lt)),
    )
    for sel, part in parts:
        for name, values in part.items():
            cols[name][sel] = values
    return cols


def _decode_rows(
    g: _Gather, buf: _Buf | memoryview, o: _I64, c: _I64, lt: int
) -> dict[str, np.ndarray]:
    """_decode_into for frames whose every header read lies inside the buffer."""
    n = int(o.size)
    cols = _empty_columns(n)
    if n == 0:
        return cols
    p: _I64 | int
    if lt == LINKTYPE_ETHERNET:
        w0 = g.be64(o)
        w1 = g.be64(o + 6)
        dst, src, et = w0 >> np.uint64(16), w1 >> np.uint64(16), w1 & np.uint64(0xFFFF)
        ok = c >= 14
        has_mac = c >= 12  # as the reader always did: the MACs of undecodable frames count
        cols["has_src_mac"] = has_mac
        cols["has_dst_mac"] = has_mac.copy()
        cols["src_mac"] = np.where(has_mac, src, np.uint64(0))
        cols["dst_mac"] = np.where(has_mac, dst, np.uint64(0))
        p0 = 14
    elif lt in (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2):
        if lt == LINKTYPE_LINUX_SLL:
            w = g.be64(o + 4)  # halen, then the first 6 address bytes
            halen, src = w >> np.uint64(48), w & np.uint64(_MASK48)
            et = g.be32(o + 12) & np.uint64(0xFFFF)
            pkttype, typed = g.be32(o) >> np.uint64(16), c >= 2
            p0 = 16
        else:
            et = g.be32(o) >> np.uint64(16)
            halen = g.u8(o + 11)
            src = g.be64(o + 12) >> np.uint64(16)
            pkttype, typed = g.u8(o + 10), c >= 11
            cols["ifindex"] = np.where(c >= 8, g.be32(o + 4), np.uint64(1) << np.uint64(63)).view(
                np.int64
            )  # the sign bit: not captured
            p0 = 20
        # The kernel's own word on direction (PACKET_HOST, ..., PACKET_OUTGOING = 4).
        cols["pkttype"] = (
            np.where(typed & (pkttype <= 127), pkttype, 255).astype(np.uint8).view(np.int8)
        )
        ok = c >= p0
    elif lt in (LINKTYPE_INFINIBAND, LINKTYPE_ERF):
        lrh, has_lrh, at = _ib_lrh(g, o, c, lt)
        cols["has_src_mac"] = has_lrh
        cols["has_dst_mac"] = has_lrh.copy()
        cols["src_mac"] = np.where(has_lrh, lrh & np.uint64(0xFFFF), np.uint64(0))
        dlid = (lrh >> np.uint64(32)) & np.uint64(0xFFFF)
        cols["dst_mac"] = np.where(has_lrh, dlid, np.uint64(0))
        _ib_transport(g, cols, o, c, lrh, has_lrh, at)
        return cols
    elif lt in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        version = g.u8(o) >> np.uint64(4)
        ok = (c >= 1) & ((version == 4) | (version == 6))
        et = np.where(version == 4, np.uint64(_ETHERTYPE_IPV4), np.uint64(_ETHERTYPE_IPV6))
        p0 = 0
    else:
        return cols

    # Up to two VLAN tags; a third TPID is left as the EtherType (a non-IP frame).
    p = p0
    tci: _U64 | None = None
    tag1 = _is_tpid(et)
    if tag1.any():
        tags = g.be64_some(o + p0, tag1)  # TCI, EtherType, TCI, EtherType
        et1 = (tags >> np.uint64(32)) & np.uint64(0xFFFF)
        tag2 = tag1 & _is_tpid(et1)
        ok &= ~tag1 | (c >= p0 + 4)
        ok &= ~tag2 | (c >= p0 + 8)
        et = np.where(tag1, np.where(tag2, tags & np.uint64(0xFFFF), et1), et)
        tci = np.where(tag2, tags >> np.uint64(16), tags >> np.uint64(48)) & np.uint64(0xFFF)
        p = p0 + 4 * tag1.astype(np.int64) + 4 * tag2.astype(np.int64)

    # IPv4 / IPv6 fixed header: bytes 0-23 serve both (IPv6 addresses need 24-39 too).
    is4 = ok & (et == _ETHERTYPE_IPV4)
    is6 = ok & (et == _ETHERTYPE_IPV6)
    q = o + p
    room = c - p
    a0 = g.be64(q)
    a1 = g.be64(q + 8)
    a2 = g.be64(q + 16)
    b0 = a0 >> np.uint64(56)
    ver = b0 >> np.uint64(4)
    ihl = ((b0 & np.uint64(0x0F)) * np.uint64(4)).astype(np.int64)
    ok &= ~is4 | ((room >= 20) & (ver == 4) & (ihl >= 20) & (room >= ihl))
    ok &= ~is6 | ((room >= 40) & (ver == 6))
    ip4 = is4 & ok
    ip6 = is6 & ok
    nh = (a0 >> np.uint64(8)) & np.uint64(0xFF)
    proto = np.where(ip4, (a1 >> np.uint64(48)) & np.uint64(0xFF), nh).astype(np.int64)
    # IPv6 extension headers: the scalar decoder follows the chain (rare on the wire).
    ext = ip6 & (
        (nh == 0) | (nh == 43) | (nh == 60) | (nh == _IPPROTO_AH) | (nh == _IPPROTO_FRAGMENT)
    )
    ip = (ip4 | ip6) & ~ext
    first = ~ip4 | ((a0 & np.uint64(0x1FFF)) == 0)
    tcp = proto == _IPPROTO_TCP
    udp = proto == _IPPROTO_UDP
    has_ports = ip & first & (tcp | udp)
    l4 = p + np.where(ip4, ihl, 40)
    ports = g.be32(o + l4)
    ok &= ~has_ports | (c - l4 >= 4)
    dport = ports & np.uint64(0xFFFF)
    roce = has_ports & udp & (dport == ROCEV2_UDP_PORT)
    ok &= ~roce | (c - l4 >= 20)  # UDP (8) and the whole BTH (12)
    ip &= ok
    has_ports &= ok
    roce &= ok

    cols["decoded"] = ok & ~ext
    cols["ethertype"] = np.where(ok, et, np.uint64(0)).astype(np.uint16)
    if tci is not None:
        cols["vlan"] = np.where(ok & tag1, tci.astype(np.int16), np.int16(-1))
    cols["ip_version"] = np.where(ip4 & ip, np.uint8(4), np.where(ip, np.uint8(6), np.uint8(0)))
    cols["proto"] = np.where(ip, proto, -1).astype(np.int16)
    sport = (ports >> np.uint64(16)).astype(np.int32)
    cols["src_port"] = np.where(has_ports, sport, np.int32(-1))
    cols["dst_port"] = np.where(has_ports, dport.astype(np.int32), np.int32(-1))
    cols["tcp"] = ip & tcp
    cols["udp"] = ip & udp
    if roce.any():
        dest_qp = _bth_columns(g, cols, o, c, roce, o + l4 + 8, CNP_OPCODE)
    else:
        dest_qp = np.zeros(n, dtype=np.uint64)

    # Keys (word matrices here; FrameColumns views them as fixed-width bytes).
    a3 = g.be64_some(q + 24, ip6)
    a4 = g.be64_some(q + 32, ip6)
    zero = np.uint64(0)
    ipver = np.where(ip4, np.uint64(4), np.uint64(6))
    head = (
        ipver << np.uint64(56)
        | proto.astype(np.uint64) << np.uint64(48)
        | has_ports.astype(np.uint64) << np.uint64(40)
        | np.where(has_ports, ports, zero)
    )
    dhi = np.where(ip4, a2 >> np.uint64(32), a3)
    dlo = np.where(ip4, zero, a4)
    flow = (
        np.where(ip, head, zero),
        np.where(ip, np.where(ip4, a1 & np.uint64(0xFFFFFFFF), a1), zero),
        np.where(ip6 & ip, a2, zero),
        np.where(ip, dhi, zero),
        np.where(ip, dlo, zero),
    )
    qpk = (
        np.where(roce, ipver << np.uint64(56) | dest_qp, zero),
        np.where(roce, dhi, zero),
        np.where(roce, dlo, zero),
    )
    cols["flow_key"] = np.stack(flow, axis=1)
    cols["qp_key"] = np.stack(qpk, axis=1)
    cols["flow_hash"] = _hash_words(flow)
    cols["qp_hash"] = _hash_words(qpk)

    if ext.any():
        for i in np.flatnonzero(ext).tolist():
            off = int(o[i])
            _fill_scalar(cols, i, _decode(buf, off, off + int(c[i]), lt))
        for name in ("flow", "qp"):
            keys = cols[f"{name}_key"][ext]
            cols[f"{name}_hash"][ext] = _hash_words([keys[:, j] for j in range(keys.shape[1])])
    if lt in (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2):  # as the reader did: decoded frames
        has_src = cols["decoded"] & (halen == 6)
        cols["has_src_mac"] = has_src
        cols["src_mac"] = np.where(has_src, src, np.uint64(0))
    return cols


def _erf_payload(g: _Gather, o: _I64, c: _I64) -> tuple[_I64, _Bool]:
    """Where the packet of each ERF record starts, and whether all its headers were captured.

    The packet follows the 16-byte header and its 8-byte extension headers: the type byte's
    top bit, then each extension's, says another follows.
    """
    kind = g.u8(o + 8)
    ok = c >= 16
    at = o + 16
    more = (kind & np.uint64(0x80)) != 0
    for _ in range(_ERF_MAX_EXT):
        ok &= ~more | (c >= at - o + 8)
        step = more & ok
        if not step.any():
            break
        more = step & ((g.u8(at) & np.uint64(0x80)) != 0)
        at = at + 8 * step
    return at, ok & ~more


def _ib_lrh(g: _Gather, o: _I64, c: _I64, lt: int) -> tuple[_U64, _Bool, _I64]:
    """The 8 LRH bytes of InfiniBand frames (DLID in bits 47..32, SLID in 15..0).

    Also where they were captured whole, and where they start: for ERF records they follow
    the ERF header and its extension headers, in records of an InfiniBand type.
    """
    if lt == LINKTYPE_INFINIBAND:
        return g.be64(o), c >= 8, o
    at, ok = _erf_payload(g, o, c)
    ok &= np.isin(g.u8(o + 8) & np.uint64(0x7F), list(_ERF_TYPES_IB)) & (c >= at - o + 8)
    return g.be64(at), ok, at


def _bth_columns(
    g: _Gather,
    cols: dict[str, np.ndarray],
    o: _I64,
    c: _I64,
    has_bth: _Bool,
    at: _I64,
    cnp_opcode: int,
) -> _U64:
    """The BTH columns of the frames ``has_bth`` (a whole BTH at ``at``); their destination QPs.

    RoCEv2 and InfiniBand share the BTH and differ in where it starts and in the CNP opcode.
    The AETH syndrome is one byte read, only for ACKs (0x11 / 0x12) whose AETH was captured.
    """
    bth = g.be64(at)
    psn = g.be32(at + 8) & np.uint64(0xFFFFFF)  # BTH bytes 8-11: ackreq, PSN
    opcode = bth >> np.uint64(56)
    dest_qp = bth & np.uint64(0xFFFFFF)
    cols["roce"] = has_bth
    cols["cnp"] = has_bth & (opcode == cnp_opcode)
    cols["bth_opcode"] = np.where(has_bth, opcode.astype(np.int16), np.int16(-1))
    cols["dest_qp"] = np.where(has_bth, dest_qp.astype(np.int32), np.int32(-1))
    cols["psn"] = np.where(has_bth, psn.astype(np.int32), np.int32(-1))
    acks = np.flatnonzero(has_bth & ((opcode - np.uint64(0x11)) < np.uint64(2)))
    if acks.size:
        aeth = at[acks] + 12
        whole = c[acks] - (aeth - o[acks]) >= 4
        cols["aeth_syndrome"][acks[whole]] = g.u8(aeth[whole]).astype(np.int16)
    return dest_qp


def _ib_transport(
    g: _Gather, cols: dict[str, np.ndarray], o: _I64, c: _I64, lrh: _U64, has_lrh: _Bool, at: _I64
) -> None:
    """The BTH (and an ACK's AETH) of InfiniBand frames, into ``cols`` as for RoCEv2.

    The LRH's next-header field says what follows its 8 bytes: the BTH (LNH 2, IBA local),
    or a 40-byte GRH and then the BTH (LNH 3, IBA global); raw packets (LNH 0, 1) have none.
    The keys use LIDs where RoCE uses IP addresses (a GRH's GIDs would name ports across
    subnets; a training fabric is one subnet): flows are (SLID, DLID, destination QP), queue
    pairs (DLID, destination QP), and ACKs match requests on (LIDs, PSN). The CNP of
    InfiniBand congestion control is BTH opcode 0x80 (RoCEv2's is 0x81).
    """
    lnh = (lrh >> np.uint64(48)) & np.uint64(3)
    bth_at = at + 8 + 40 * (lnh == 3).astype(np.int64)
    ib = has_lrh & (lnh >= 2) & (c - (bth_at - o) >= 12)
    if not ib.any():
        return
    cols["decoded"] = ib
    dest_qp = _bth_columns(g, cols, o, c, ib, bth_at, IB_CNP_OPCODE)
    zero = np.uint64(0)
    slid, dlid = lrh & np.uint64(0xFFFF), (lrh >> np.uint64(32)) & np.uint64(0xFFFF)
    head = np.uint64(_IB_KEY_MARK) << np.uint64(56)
    flow = (
        np.where(ib, head | dest_qp, zero),
        np.where(ib, slid, zero),
        np.zeros(ib.size, dtype=np.uint64),
        np.where(ib, dlid, zero),
        np.zeros(ib.size, dtype=np.uint64),
    )
    qpk = (
        np.where(ib, head | dest_qp, zero),
        np.where(ib, dlid, zero),
        np.zeros(ib.size, dtype=np.uint64),
    )
    cols["flow_key"] = np.stack(flow, axis=1)
    cols["qp_key"] = np.stack(qpk, axis=1)
    cols["flow_hash"] = _hash_words(flow)
    cols["qp_hash"] = _hash_words(qpk)


def _without_erf_headers(g: _Gather, chunk: _Chunk, link_type: int) -> _I64:
    """Original lengths less the ERF headers, which ibdump counts in them.

    Those headers never were on the wire. Other link types, and records whose headers were
    cut, keep their lengths.
    """
    erf = (chunk.lts == LINKTYPE_ERF) if chunk.lts is not None else None
    if erf is None and link_type != LINKTYPE_ERF:
        return chunk.origs
    rows = np.flatnonzero(erf) if erf is not None else np.arange(chunk.origs.size)
    if rows.size == 0:
        return chunk.origs
    o, c = chunk.offs[rows], chunk.caps[rows]
    at, ok = _erf_payload(g, o, c)
    origs = chunk.origs.copy()
    origs[rows] = np.where(ok, np.maximum(origs[rows] - (at - o), 0), origs[rows])
    return origs


#: ARPHRD types (<linux/if_arp.h>) whose frames have a 14-byte Ethernet header on the device:
#: Ethernet, and the loopback device (its frames carry one, of zero MACs).
_ARPHRD_ETHER = 1
_ARPHRD_LOOPBACK = 772
_ETH_HEADER = 14


def _cooked_to_wire(g: _Gather, chunk: _Chunk, link_type: int, origs: _I64) -> _I64:
    """Original lengths of Linux cooked frames as the device had them, not as libpcap counts.

    A `tcpdump -i any` record's original length counts its 16-byte SLL (20-byte SLL2) header in
    place of the device's own: +2 (+6) bytes on every Ethernet frame (+9 % on a 66-byte ACK),
    +16 (+20) over the IP length on a device without a link header (tun, IPoIB). The cooked
    header's ARPHRD type says which; where it was not captured, Ethernet is taken.
    """
    cooked = (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2)
    if chunk.lts is None:
        if link_type not in cooked:
            return origs
        rows = np.arange(origs.size)
        v2 = np.full(rows.size, link_type == LINKTYPE_LINUX_SLL2)
    else:
        v2_all = chunk.lts == LINKTYPE_LINUX_SLL2
        rows = np.flatnonzero(v2_all | (chunk.lts == LINKTYPE_LINUX_SLL))
        if rows.size == 0:
            return origs
        v2 = v2_all[rows]
    o, c = chunk.offs[rows], chunk.caps[rows]
    at = np.where(v2, 8, 2)  # the ARPHRD type: SLL bytes 2-3, SLL2 bytes 8-9
    hatype = g.u8(o + at) << np.uint64(8) | g.u8(o + at + 1)
    eth = (c < at + 2) | (hatype == _ARPHRD_ETHER) | (hatype == _ARPHRD_LOOPBACK)
    out = origs.copy()
    wire = origs[rows] - np.where(v2, 20, 16) + np.where(eth, _ETH_HEADER, 0)
    out[rows] = np.maximum(wire, 0)
    return out


def _frames(k: int) -> str:
    return f"{k} frame" if k == 1 else f"{k} frames"


def _stray_warning(time_ns: _I64, timed: _Bool, stray: _Bool) -> str:
    """Says how many frames :func:`~collectors._stray.stray_times` left out, and where."""
    first = int(np.flatnonzero(stray)[0])
    t = int(time_ns[first])
    median = int(np.median(time_ns[timed])) if timed.any() else t
    days = abs(t - median) / (86_400 * _NS)
    gap = f"{days:,.0f} days" if days >= 2 else f"{days * 24:.0f} h"
    try:
        stamp = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=t // 1000)).strftime(
            "%Y-%m-%d %H:%M:%S UTC"
        )
    except OverflowError:
        stamp = f"{t / _NS:.0f} s after 1970"
    return (
        f"{_frames(int(stray.sum()))} stamped far from the others left out of the time series "
        f"(they count in packets and bytes): the first, frame {first + 1}, at {stamp}, {gap} "
        f"{'before' if t < median else 'after'} the median frame (a NIC clock not yet "
        "synchronised?); binned with the others, they would stretch the bins over the gap and "
        "the traffic would read as idle"
    )


def _hash_words(words: Sequence[_U64]) -> _U64:
    """A 64-bit hash per row of key words given column by column (0 for an all-zero row)."""
    h = words[0] * np.uint64(_HASH_MUL[0])
    for j in range(1, len(words)):
        h ^= words[j] * np.uint64(_HASH_MUL[j])
    return h


def _distinct_rows(words: _U64, hashes: _U64 | None = None) -> _U64:
    """The distinct rows of a (m, k) uint64 matrix, exactly (in no particular order).

    Rows are grouped by their 64-bit hash (one sort of m numbers rather than of m rows of k
    words), and every row is then compared with its group's representative: a collision,
    however unlikely, falls back to ``np.unique(axis=0)``, so the answer is exact for any input.
    """
    m = int(words.shape[0])
    if m <= 1:
        return words.copy()
    if hashes is None:
        hashes = _hash_words([words[:, j] for j in range(words.shape[1])])
    uniq, inv = np.unique(hashes, return_inverse=True)
    inv = inv.reshape(-1)
    rep = np.empty(uniq.size, dtype=np.int64)
    rep[inv] = np.arange(m)  # any row of each group
    table = words[rep]
    if not np.array_equal(table[inv], words):
        return np.asarray(np.unique(words, axis=0), dtype=np.uint64)
    return table


# ------------------------------------------------------------------------------------------
# Record scanners (pcap, pcapng): a tight walk for the record positions, the rest vectorized


@dataclass(slots=True)
class _Chunk:
    """Up to _CHUNK records, in file order."""

    offs: _I64  # first byte of each frame
    caps: _I64
    origs: _I64  # original lengths (raised to the captured length where that is larger)
    tns: _I64  # POSIX ns; 0 where untimed
    timed: _Bool | None  # None: every record is timed
    lts: _I64 | None  # link type per record (pcapng); None: _Meta.link_type for all
    ifs: _I64 | None = None  # interface per record (pcapng: its _Iface.gid); None: one


@dataclass(slots=True)
class _Meta:
    """What a scanner learns about the whole file, besides the records."""

    link_type: int = -1
    truncated: bool = False
    warn: list[str] = field(default_factory=list)
    #: pcapng interfaces of every section, by _Iface.gid: their if_name, or "" without one.
    iface_names: list[str] = field(default_factory=list)


def _corrupt(path: Path, number: int, message: str, what: str = "block") -> InputFormatError:
    """The error for a record or block whose own header is inconsistent."""
    return InputFormatError(path, f"{what} {number}: {message}", line=number)


def _check_lengths(path: Path, what: str, number: int, caplen: int, origlen: int) -> None:
    """Reject a record header whose lengths cannot be real (see the module docstring)."""
    if caplen > MAX_CAPLEN:
        raise _corrupt(
            path, number, f"captured length {caplen} exceeds {MAX_CAPLEN} bytes (corrupt)", what
        )
    if origlen > MAX_ORIG_LEN:
        raise _corrupt(
            path, number, f"original length {origlen} exceeds {MAX_ORIG_LEN} bytes (corrupt)", what
        )


def _scan_pcap(buf: _Buf, size: int, path: Path, meta: _Meta) -> Iterator[_Chunk]:
    """Walk the records of a classic pcap file, _CHUNK records at a time.

    The walk itself only follows the captured lengths (one ``unpack_from`` per record, the
    one step that cannot be vectorized); the header fields are then read for the whole chunk
    at once, and checked in record order, so errors and truncation read as a record-by-record
    reader would report them.
    """
    endian, frac_ns = _PCAP_MAGIC[bytes(buf[0:4])]
    if size < 24:
        raise InputFormatError(path, f"pcap file header cut short ({size} of 24 bytes)")
    major, minor, _snaplen, linktype = struct.unpack_from(endian + "4xHH8xII", buf, 0)
    meta.link_type = linktype & 0xFFFF  # upper bits: FCS length flags
    if (major, minor) != (2, 4):  # every writer since 1998; libpcap refuses most others
        meta.warn.append(
            f"pcap header says format version {major}.{minor}, not 2.4: records read as 2.4"
        )
    big = endian == ">"
    caplen_at = struct.Struct(endian + "8xI").unpack_from
    g = _Gather(buf)
    steps = range(_CHUNK)
    pos = 24
    done = 0  # records before this chunk
    oversized = 0
    end = False
    while not end:
        starts: list[int] = []
        add = starts.append
        try:
            for _ in steps:
                (caplen,) = caplen_at(buf, pos)
                add(pos)
                pos += 16 + caplen
        except struct.error:  # fewer than 12 bytes at pos: the end of the file (or past it)
            end = True
        hdr = np.array(starts, dtype=np.int64)
        m = int(hdr.size)
        caps, origs = g.pair(hdr + 8, big)
        complete = m  # records whose 16-byte header is whole
        cut_header = -1  # where a cut record header starts
        # Only the file's last record can be cut: the walk cannot go on past it.
        if m and size - int(hdr[-1]) < 16:
            complete = m - 1
            cut_header = int(hdr[-1])
        elif end and pos < size:
            cut_header = pos
        bad = np.flatnonzero((caps[:complete] > MAX_CAPLEN) | (origs[:complete] > MAX_ORIG_LEN))
        if bad.size:
            i = int(bad[0])
            _check_lengths(path, "record", done + i + 1, int(caps[i]), int(origs[i]))
        keep = complete
        if cut_header >= 0:
            meta.truncated = True
            meta.warn.append(
                f"record {done + complete + 1}: file ends inside the record header "
                f"({size - cut_header} of 16 bytes); earlier records kept"
            )
        elif m and int(hdr[-1]) + 16 + int(caps[-1]) > size:
            keep = m - 1
            meta.truncated = True
            meta.warn.append(
                f"record {done + m}: file ends inside the record ({size - int(hdr[-1]) - 16} of "
                f"{int(caps[-1])} captured bytes); the record is dropped, earlier records kept"
            )
        done += m
        if keep == 0:
            continue
        hdr, caps, origs = hdr[:keep], caps[:keep], origs[:keep]
        over = caps > origs
        if over.any():
            oversized += int(over.sum())
            origs = np.maximum(origs, caps)
        sec, frac = g.pair(hdr, big)
        yield _Chunk(hdr + 16, caps, origs, sec * _NS + frac * frac_ns, None, None)
    if oversized:
        meta.warn.append(
            f"{oversized} records had a captured length above their original length; "
            "the captured length was counted"
        )


@dataclass(slots=True)
class _Iface:
    link_type: int
    snaplen: int
    mul: int  # time units -> ns: units * mul // div + offset_ns
    div: int
    offset_ns: int
    gid: int = 0  # the interface's number in the file, over all sections (_Meta.iface_names)


def _idb_name(buf: _Buf, start: int, stop: int, endian: str) -> str:
    """An IDB's if_name option ("" without one), so that a warning can name the interface."""
    head = struct.Struct(endian + "HH")
    q = start
    while stop - q >= 4:
        code, olen = head.unpack_from(buf, q)
        q += 4
        if code == _OPT_END or olen > stop - q:
            break
        if code == _OPT_IF_NAME:
            return bytes(buf[q : q + olen]).rstrip(b"\0").decode("utf-8", "replace")
        q += (olen + 3) & ~3
    return ""


def _parse_idb_options(
    buf: _Buf, start: int, stop: int, *, endian: str, path: Path, number: int
) -> tuple[int, int, int]:
    """Read if_tsresol / if_tsoffset from an IDB's options; returns (mul, div, offset_ns)."""
    mul, div, offset_ns = 1_000, 1, 0  # default resolution: microseconds
    head = struct.Struct(endian + "HH")
    q = start
    while stop - q >= 4:
        code, olen = head.unpack_from(buf, q)
        q += 4
        if code == _OPT_END:
            break
        if olen > stop - q:
            raise _corrupt(path, number, f"interface option {code} overruns the block")
        if code == _OPT_IF_TSRESOL and olen >= 1:
            v = buf[q]
            if v & 0x80:
                mul, div = _NS, 1 << (v & 0x7F)
            elif v <= 9:
                mul, div = 10 ** (9 - v), 1
            else:
                mul, div = 1, 10 ** (v - 9)
        elif code == _OPT_IF_TSOFFSET and olen >= 8:
            (offset_s,) = struct.unpack_from(endian + "q", buf, q)
            offset_ns = offset_s * _NS
        q += (olen + 3) & ~3
    return mul, div, offset_ns


# A slow-path packet block (OPB, SPB): frame offset, interface, captured and original length,
# time in ns (None for an SPB: it takes the previous timed frame's).
_SlowPacket: TypeAlias = tuple[int, int, int, int, int | None]


@dataclass(slots=True)
class _NgBatch:
    """Packet blocks of one pcapng section and interface table, awaiting their vector pass."""

    done: int = 0  # blocks before the batch
    parts: list[_I64] = field(default_factory=list)  # block offsets of its packet blocks
    count: int = 0  # packet blocks in parts
    slow: dict[int, _SlowPacket] = field(default_factory=dict)  # by packet index
    #: Slow packets whose time is out of range: their raw timestamp units, by packet index.
    slow_bad: dict[int, int] = field(default_factory=dict)
    marks: list[int] = field(default_factory=list)  # count at each non-packet block
    last_t: int | None = None  # time of the last timed packet (for SPBs)
    oversized: int = 0
    spb_untimed: int = 0
    #: Packets whose timestamp is out of range (kept untimed), and the first one's
    #: (block number, interface id, raw timestamp units).
    bad_times: int = 0
    first_bad_time: tuple[int, int, int] | None = None

    def add(self, offsets: _I64) -> None:
        self.parts.append(offsets)
        self.count += int(offsets.size)

    def number(self) -> int:
        """The 1-based number of the next block."""
        return self.done + self.count + len(self.marks) + 1

    def number_of(self, i: int) -> int:
        """The 1-based block number of the batch's packet i."""
        return self.done + i + 1 + bisect.bisect_right(self.marks, i)

    def reset(self) -> None:
        self.done += self.count + len(self.marks)
        self.parts = []
        self.count = 0
        self.slow = {}
        self.slow_bad = {}
        self.marks = []


def _epb_times(
    units: _U64, if_id: _I64, rows: _I64, ifaces: list[_Iface]
) -> tuple[_I64, list[int]]:
    """Times in ns of the EPB rows (per interface), and the rows out of range.

    Exact integer arithmetic as ``units * mul // div + offset_ns``: in uint64 where it cannot
    overflow (every real resolution and epoch), in Python integers for the rest.
    """
    t = np.zeros(units.size, dtype=np.int64)
    bad: list[int] = []
    ids = if_id[rows]
    one = ids.size > 0 and bool((ids == ids[0]).all())
    for k in [int(ids[0])] if one else np.unique(ids).tolist():
        iface = ifaces[k]
        sel = rows[if_id[rows] == k]
        u = units[sel]
        mul, div, off = iface.mul, iface.div, iface.offset_ns
        slow = np.ones(sel.size, dtype=bool)
        if mul * div < 1 << 62 and abs(off) < 1 << 61:
            q = u // np.uint64(div) if div > 1 else u
            slow = q > np.uint64((1 << 61) // mul)
            val = q * np.uint64(mul)
            if div > 1:
                val += (u % np.uint64(div)) * np.uint64(mul) // np.uint64(div)
            t[sel] = val.astype(np.int64) + off
        for i in np.flatnonzero(slow).tolist():
            row = int(sel[i])
            v = int(u[i]) * mul // div + off
            if _I64_MIN <= v <= _I64_MAX:
                t[row] = v
            else:
                bad.append(row)
    return t, sorted(bad)


def _ng_flush(
    g: _Gather, size: int, path: Path, b: _NgBatch, ifaces: list[_Iface], big: bool, meta: _Meta
) -> _Chunk | None:
    """Check and decode the batch's block headers at once; the records, or an error.

    The checks are those of a block-by-block reader, in its order, and the first block that
    fails one decides (an error, or the truncation of the file's last block).
    """
    pend = np.concatenate(b.parts) if b.parts else np.zeros(0, dtype=np.int64)
    m = int(pend.size)
    if m == 0:
        b.reset()
        return None
    fast = np.ones(m, dtype=bool)
    slow_rows = np.fromiter(b.slow, dtype=np.int64, count=len(b.slow))
    fast[slow_rows] = False
    blen, if_id = g.pair(pend + 4, big)
    hi, lo = g.pair(pend + 12, big)
    units = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    caps, origs = g.pair(pend + 20, big)
    trailer = g.u32(pend + blen - 4, big).astype(np.int64)
    code = np.select(
        [
            size - pend < 12,
            blen % 4 != 0,
            blen > size - pend,
            trailer != blen,
            caps > blen - 32,
            if_id >= len(ifaces),
            (caps > MAX_CAPLEN) | (origs > MAX_ORIG_LEN),
        ],
        [1, 2, 3, 4, 5, 6, 7],
        0,
    )
    code[~fast] = 0
    bad = np.flatnonzero(code)
    stop = int(bad[0]) if bad.size else m
    ok_rows = np.flatnonzero(fast[:stop])
    tns, bad_rows = _epb_times(units, if_id, ok_rows, ifaces)
    # A time past the int64 nanosecond range (a real dumpcap file: a negative time written
    # unsigned on its second interface) loses that packet's time, not the file: kept untimed.
    bad_time = np.zeros(m, dtype=bool)
    bad_time[[r for r in bad_rows if r < stop]] = True
    bad_time[[i for i in b.slow_bad if i < stop]] = True
    if bad_time.any():
        first = int(np.flatnonzero(bad_time)[0])
        if b.first_bad_time is None:
            raw = b.slow_bad.get(first, int(units[first]))
            iface_id = b.slow[first][1] if first in b.slow else int(if_id[first])
            b.first_bad_time = (b.number_of(first), iface_id, raw)
        b.bad_times += int(bad_time.sum())
        tns[bad_time] = 0  # as an untimed packet's
    if stop < m:
        i = stop
        number, at, bl = b.number_of(i), int(pend[i]), int(blen[i])
        kind = int(code[i])
        if kind == 1:
            meta.truncated = True
            meta.warn.append(
                f"block {number}: file ends inside the block header ({size - at} bytes); "
                "earlier blocks kept"
            )
        elif kind == 3:
            meta.truncated = True
            meta.warn.append(
                f"block {number}: file ends inside the block ({size - at} of {bl} bytes); "
                "the block is dropped, earlier blocks kept"
            )
        elif kind == 2:
            raise _corrupt(
                path, number, f"block length {bl} is invalid (not a multiple of 4, or under 12)"
            )
        elif kind == 4:
            raise _corrupt(
                path, number, f"trailing block length {int(trailer[i])} differs from {bl}"
            )
        elif kind == 5:
            raise _corrupt(path, number, f"captured length {int(caps[i])} overruns the block")
        elif kind == 6:
            raise _corrupt(path, number, f"packet refers to undeclared interface {int(if_id[i])}")
        else:
            _check_lengths(path, "block", number, int(caps[i]), int(origs[i]))
    offs = pend + 28
    own = fast & ~bad_time  # packets with a time of their own (EPB, OPB)
    for i, (data_off, iface, caplen, origlen, t) in b.slow.items():
        offs[i], if_id[i], caps[i], origs[i] = data_off, iface, caplen, origlen
        if t is not None:
            tns[i] = t
            own[i] = True
    offs, caps, origs, tns, own, if_id = (
        offs[:stop],
        caps[:stop],
        origs[:stop],
        tns[:stop],
        own[:stop],
        if_id[:stop],
    )
    bad_time = bad_time[:stop]
    timed = own
    spb = ~own & ~bad_time
    if spb.any():  # a simple packet block takes the time of the last timed packet before it
        src = np.where(own, np.arange(stop), -1)
        np.maximum.accumulate(src, out=src)
        fill = spb & (src >= 0)
        tns[fill] = tns[src[fill]]
        orphans = spb & (src < 0)
        timed = own | fill
        if b.last_t is not None:
            tns[orphans] = b.last_t
            timed |= orphans
        else:
            b.spb_untimed += int(orphans.sum())
    sources = np.flatnonzero(own)
    if sources.size:
        b.last_t = int(tns[sources[-1]])
    over = caps > origs
    if over.any():
        b.oversized += int(over.sum())
        origs = np.maximum(origs, caps)
    lt_of = np.array([f.link_type for f in ifaces] or [0], dtype=np.int64)
    lts = lt_of[np.minimum(if_id, lt_of.size - 1)]
    gid_of = np.array([f.gid for f in ifaces] or [0], dtype=np.int64)
    ifs = gid_of[np.minimum(if_id, gid_of.size - 1)]
    b.reset()
    if stop == 0:
        return None
    return _Chunk(offs, caps, origs, tns, None if timed.all() else timed, lts, ifs)


def _scan_pcapng(buf: _Buf, size: int, path: Path, meta: _Meta) -> Iterator[_Chunk]:
    """Walk the blocks of a pcapng file (all sections; unknown block types skipped).

    Enhanced packet blocks, nearly every block of a real capture, take a fast path: a walk
    that only follows block lengths (one ``unpack_from`` per block), after which one vector
    check keeps the run of EPBs it started with, and :func:`_ng_flush` checks and reads their
    headers a whole batch at once. Every other block goes through the block-by-block code
    below, which first settles the pending batch when it changes what the batch depends on (a
    new section or interface) or is about to report an error (an earlier block's error comes
    first).
    """
    g = _Gather(buf)
    b = _NgBatch()
    ifaces: list[_Iface] = []
    endian = "<"
    head = u32 = idb = epb = opb = struct.Struct("<II")  # replaced at the first SHB
    u32_at4 = struct.Struct("<4xI").unpack_from
    pos = 0

    def fail(number: int, message: str) -> InputFormatError:
        _ng_flush(g, size, path, b, ifaces, endian == ">", meta)  # an earlier error wins
        return _corrupt(path, number, message)

    hint = _CHUNK  # blocks to walk blindly: shrinks where other blocks come often
    while pos < size:
        # Fast path: follow block lengths blindly, then keep the run of EPBs from the start.
        big = endian == ">"
        blen_at = u32_at4
        walk: list[int] = []
        add = walk.append
        stopped = cut = False
        try:
            for _ in range(min(hint, _CHUNK - b.count)):
                (blen,) = blen_at(buf, pos)
                add(pos)
                pos += blen
        except struct.error:  # under 8 bytes at pos (or the walk went past the end)
            stopped = True
        if walk:
            at = np.array(walk, dtype=np.int64)
            kind, length = g.pair(at, big)
            other = np.flatnonzero((kind != _BT_EPB) | (length < 32))
            if other.size:  # from there on, the block-by-block code below
                k = int(other[0])
                pos, at, cut = walk[k], at[:k], True
                hint = max(32, 2 * k)
            else:
                hint = min(_CHUNK, 2 * hint)
            b.add(at)
        if b.count >= _CHUNK:
            chunk = _ng_flush(g, size, path, b, ifaces, big, meta)
            if chunk is not None:
                yield chunk
            continue
        if not (cut or stopped):
            continue
        if pos >= size:
            break
        number = b.number()
        if size - pos < 12:
            if pos == 0:
                raise InputFormatError(path, f"pcapng section header cut short ({size} bytes)")
            meta.truncated = True
            meta.warn.append(
                f"block {number}: file ends inside the block header ({size - pos} bytes); "
                "earlier blocks kept"
            )
            break
        if buf[pos : pos + 4] == _PCAPNG_SHB:
            chunk = _ng_flush(g, size, path, b, ifaces, endian == ">", meta)
            if chunk is not None:
                yield chunk
            bom = bytes(buf[pos + 8 : pos + 12])
            if bom not in _PCAPNG_BOM:
                raise _corrupt(path, number, "section header has a bad byte-order magic")
            endian = _PCAPNG_BOM[bom]
            head = struct.Struct(endian + "II")
            u32 = struct.Struct(endian + "I")
            idb = struct.Struct(endian + "HHI")
            epb = struct.Struct(endian + "IIIII")
            opb = struct.Struct(endian + "HHIIII")
            u32_at4 = struct.Struct(endian + "4xI").unpack_from
            ifaces = []  # interface ids are per section
        btype, blen = head.unpack_from(buf, pos)
        if blen < 12 or blen % 4:
            raise fail(number, f"block length {blen} is invalid (not a multiple of 4, or under 12)")
        if blen > size - pos:
            if pos == 0:
                raise InputFormatError(path, f"pcapng section header cut short ({size} bytes)")
            meta.truncated = True
            meta.warn.append(
                f"block {number}: file ends inside the block ({size - pos} of {blen} bytes); "
                "the block is dropped, earlier blocks kept"
            )
            break
        (trailer,) = u32.unpack_from(buf, pos + blen - 4)
        if trailer != blen:
            raise fail(number, f"trailing block length {trailer} differs from {blen}")
        body_end = pos + blen - 4
        packet: tuple[int, int, int, int, int | None] | None = None
        if btype == _BT_SHB:
            if blen < 28:
                raise fail(number, "section header too short")
            (major,) = struct.unpack_from(endian + "H", buf, pos + 12)
            if major != 1:
                raise fail(number, f"unsupported pcapng major version {major}")
        elif btype == _BT_IDB:
            chunk = _ng_flush(g, size, path, b, ifaces, endian == ">", meta)
            if chunk is not None:
                yield chunk
            if blen < 20:
                raise _corrupt(path, number, "interface description too short")
            lt, _res, snap = idb.unpack_from(buf, pos + 8)
            mul, div, off_ns = _parse_idb_options(
                buf, pos + 16, body_end, endian=endian, path=path, number=number
            )
            ifaces.append(_Iface(lt, snap, mul, div, off_ns, len(meta.iface_names)))
            meta.iface_names.append(_idb_name(buf, pos + 16, body_end, endian))
            if meta.link_type < 0:
                meta.link_type = lt
        elif btype in (_BT_EPB, _BT_OPB):
            if blen < 32:
                raise fail(number, "packet block too short")
            if btype == _BT_EPB:
                if_id, hi, lo, caplen, origlen = epb.unpack_from(buf, pos + 8)
            else:
                if_id, _drops, hi, lo, caplen, origlen = opb.unpack_from(buf, pos + 8)
            if caplen > blen - 32:
                raise fail(number, f"captured length {caplen} overruns the block")
            packet = (pos + 28, if_id, caplen, origlen, (hi << 32) | lo)
        elif btype == _BT_SPB:
            if blen < 16:
                raise fail(number, "simple packet block too short")
            (origlen,) = u32.unpack_from(buf, pos + 8)
            caplen = min(origlen, blen - 16)
            if ifaces and ifaces[0].snaplen:
                caplen = min(caplen, ifaces[0].snaplen)
            packet = (pos + 12, 0, caplen, origlen, None)
        if packet is None:
            b.marks.append(b.count)
        else:
            data_off, if_id, caplen, origlen, t_units = packet
            if if_id >= len(ifaces):
                raise fail(number, f"packet refers to undeclared interface {if_id}")
            if caplen > MAX_CAPLEN or origlen > MAX_ORIG_LEN:
                _ng_flush(g, size, path, b, ifaces, endian == ">", meta)
                _check_lengths(path, "block", number, caplen, origlen)
            t: int | None = None
            if t_units is not None:
                iface = ifaces[if_id]
                t = t_units * iface.mul // iface.div + iface.offset_ns
                if not _I64_MIN <= t <= _I64_MAX:  # kept untimed: see _ng_flush
                    b.slow_bad[b.count] = t_units
                    t = None
            b.slow[b.count] = (data_off, if_id, caplen, origlen, t)
            b.add(np.array([pos], dtype=np.int64))
            if b.count >= _CHUNK:
                chunk = _ng_flush(g, size, path, b, ifaces, endian == ">", meta)
                if chunk is not None:
                    yield chunk
        pos += blen
    chunk = _ng_flush(g, size, path, b, ifaces, endian == ">", meta)
    if chunk is not None:
        yield chunk
    if b.oversized:
        meta.warn.append(
            f"{b.oversized} packets had a captured length above their original length; "
            "the captured length was counted"
        )
    if b.spb_untimed:
        meta.warn.append(
            f"{b.spb_untimed} simple packet blocks came before any timed packet; their time is NaN"
        )
    if b.first_bad_time is not None:
        number, iface_id, raw = b.first_bad_time
        meta.warn.append(
            f"{b.bad_times} packets have a timestamp out of range, first in block {number} "
            f"(interface {iface_id}, raw {raw:#x}: a negative time written unsigned?); they "
            "are kept without a time"
        )


# ------------------------------------------------------------------------------------------
# RC ACK round-trip latency: each ACK matched with the request whose PSN it carries

# RC opcodes of requests a responder acknowledges by PSN (IBTA vol. 1, 9.2): SEND first /
# middle / last / only (with immediate: 0x00-0x05), RDMA WRITE (0x06-0x0B), RDMA READ request
# (0x0C), the atomics (0x13, 0x14) and SEND with invalidate (0x16, 0x17). RDMA READ responses
# (0x0D-0x10) go the other way, in the requester's PSN space: they are no requests.
_RC_REQUEST = np.zeros(256, dtype=bool)
_RC_REQUEST[[*range(0x0D), 0x13, 0x14, 0x16, 0x17]] = True
#: Longest request-to-ACK time matched (nanoseconds); an older request is another exchange.
ACK_MATCH_WINDOW_NS = 1_000_000_000
#: Most latency samples kept per capture for the percentiles (a deterministic uniform subset).
ACK_SAMPLES_KEPT = 100_000
#: Most requests carried from one record chunk to the next for ACKs in the next chunk.
ACK_CARRY = 1 << 14
_KEY_WORDS = 5  # ip_version << 56 | PSN, requester address (2 words), responder address (2)


@dataclass(frozen=True)
class AckLatency:
    """RC ACK round-trip latency percentiles, seconds.

    Attributes:
        p50: Median.
        p90: 90th percentile.
        p99: 99th percentile.
        samples: Request/ACK pairs matched (every one, although the percentiles come from at
            most :data:`ACK_SAMPLES_KEPT` of them).
    """

    p50: float
    p90: float
    p99: float
    samples: int


@dataclass(frozen=True, eq=False)
class AckSamples:
    """The latency samples of one or more captures, kept for percentiles and merging.

    A sample is kept when its priority (a hash of the ACK's time and key) is among the
    :data:`ACK_SAMPLES_KEPT` smallest: a uniform subset, the same on every run, and mergeable
    (the kept samples of several captures, cut to the smallest priorities again, are a uniform
    subset of all their samples).

    Attributes:
        latency_ns: int64, ACK time minus request time of each kept sample.
        priority: uint64, the sample's priority.
        requester: int8, 1 where the request came from the capturing host (``local_mac``:
            fabric round trip plus the peer's ACK turnaround), 0 where it came from a peer
            (the capturing host's own responder turnaround, no fabric), -1 unknown (no MACs).
        matched: Pairs matched in all.
        local_matched: Of them, with a local requester.
        remote_matched: Of them, with a remote requester.
    """

    latency_ns: npt.NDArray[np.int64]
    priority: _U64
    requester: npt.NDArray[np.int8]
    matched: int
    local_matched: int = 0
    remote_matched: int = 0

    def percentiles(self, requester: int | None = None) -> AckLatency | None:
        """P50/P90/P99 of all samples, or of those of one ``requester`` class (1, 0, -1)."""
        if requester is None:
            lat, count = self.latency_ns, self.matched
        else:
            lat = self.latency_ns[self.requester == requester]
            count = {1: self.local_matched, 0: self.remote_matched}.get(
                requester, self.matched - self.local_matched - self.remote_matched
            )
        if lat.size == 0 or count == 0:
            return None
        p50, p90, p99 = (float(v) / 1e9 for v in np.percentile(lat, [50.0, 90.0, 99.0]))
        return AckLatency(p50, p90, p99, count)


def merge_ack_samples(parts: Iterable[AckSamples]) -> AckSamples:
    """The samples of several captures as one (still at most :data:`ACK_SAMPLES_KEPT`)."""
    parts = list(parts)
    lat = np.concatenate([p.latency_ns for p in parts]) if parts else np.zeros(0, np.int64)
    pri = np.concatenate([p.priority for p in parts]) if parts else np.zeros(0, np.uint64)
    req = np.concatenate([p.requester for p in parts]) if parts else np.zeros(0, np.int8)
    keep = _smallest(pri, ACK_SAMPLES_KEPT)
    return AckSamples(
        latency_ns=lat[keep],
        priority=pri[keep],
        requester=req[keep],
        matched=sum(p.matched for p in parts),
        local_matched=sum(p.local_matched for p in parts),
        remote_matched=sum(p.remote_matched for p in parts),
    )


def _smallest(priority: _U64, k: int) -> _I64:
    """Indexes of the k smallest priorities (ties: the earlier), in index order."""
    if priority.size <= k:
        return np.arange(priority.size, dtype=np.int64)
    order = np.argsort(priority, kind="stable")[:k]
    return np.sort(order)


def _mix(x: _U64) -> _U64:
    """A 64-bit finalizer (splitmix64's): spreads every input bit over the output."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass(slots=True)
class _AckMatcher:
    """Matches RC ACKs with the request they acknowledge, chunk by chunk (numpy only).

    An ACK (BTH opcode 0x11 / 0x12 with an ACK syndrome) carries the PSN of the last request
    it acknowledges (ACKs coalesce: one ACK covers every request up to it), in a BTH that names
    only the DESTINATION queue pair. Its request is the RC request (:data:`_RC_REQUEST`) with
    that PSN on the reverse address pair (request src -> dst, ACK dst -> src) and of the same
    IP version, with the latest time at or before the ACK's (the last transmission of a
    retransmitted PSN; at equal times, earlier in the file) and at most
    :data:`ACK_MATCH_WINDOW_NS` before it. One sample per ACK, none for an ACK whose request
    was not captured (or is out of the window), none for NAKs.

    The ambiguity: a request names the responder's QP and its ACK the requester's, so they
    share no QP number, and the match is by (address pair, PSN) only. Several QPs between the
    same two hosts, each with its own PSN sequence, can use the same PSN value; taking the
    latest request before the ACK makes a wrong match need another QP to send that very PSN
    (one in 2**24 of its packets) within the round trip itself, but where the right request
    was not captured, a request of another QP with that PSN within the window is taken.

    Across chunks, the latest request of each key (the newest :data:`ACK_CARRY` of them, no
    older than the window) is carried to the next chunk; after a chunk without ACKs, its last
    :data:`ACK_CARRY` requests. So a pair whose request lies more than ``ACK_CARRY`` requests
    before the chunk of its ACK, or records out of time order across a chunk edge, can miss.
    """

    carry_words: _U64 = field(default_factory=lambda: np.zeros((0, _KEY_WORDS), np.uint64))
    carry_h: _U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    carry_t: _I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    carry_mac: _U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    carry_has_mac: _Bool = field(default_factory=lambda: np.zeros(0, bool))
    latency: list[_I64] = field(default_factory=list)
    priority: list[_U64] = field(default_factory=list)
    mac: list[_U64] = field(default_factory=list)
    has_mac: list[_Bool] = field(default_factory=list)
    kept: int = 0
    matched: int = 0
    by_mac: dict[int, int] = field(default_factory=dict)
    #: Live use: hand each chunk's samples out (``fresh``) instead of keeping a subset.
    live: bool = False
    fresh: list[_I64] = field(default_factory=list)

    def add(self, cols: dict[str, np.ndarray], t_ns: _I64, timed: _Bool | None) -> None:
        """Match the ACKs of one chunk (its decoded columns and times)."""
        syn = cols["aeth_syndrome"]
        ack = (syn >= 0) & (syn < 0x20)  # syndrome class ACK; only opcode 0x11 / 0x12 have one
        req = _RC_REQUEST[cols["bth_opcode"]]  # -1 (not RoCE) reads entry 255: False
        if timed is not None:
            ack &= timed
            req &= timed
        k = int(self.carry_t.size)
        if not ack.any():
            rows = np.flatnonzero(req)[-ACK_CARRY:]
            if rows.size:
                keys = _Keys(cols, rows, None)
                self._carry(
                    np.concatenate([self.carry_words, keys.words()]),
                    np.concatenate([self.carry_h, keys.h]),
                    np.concatenate([self.carry_t, t_ns[rows]]),
                    np.concatenate([self.carry_mac, cols["src_mac"][rows]]),
                    np.concatenate([self.carry_has_mac, cols["has_src_mac"][rows]]),
                )
            return
        rows = np.flatnonzero(req | ack)
        chunk_ack = ack[rows]
        keys = _Keys(cols, rows, chunk_ack)
        h = np.concatenate([self.carry_h, keys.h])
        t = np.concatenate([self.carry_t, t_ns[rows]])
        is_ack = np.concatenate([np.zeros(k, dtype=bool), chunk_ack])
        src: _I64 | None = None  # event -> index in carry + rows, where not the identity
        if (t[1:] < t[:-1]).any():  # records out of time order: time order, then file order
            src = np.argsort(t, kind="stable")
            h, t, is_ack = h[src], t[src], is_ack[src]
        e = int(t.size)
        # One sort of (hash, position): the hash's high bits above the event's position, so
        # the sort groups equal keys and keeps them in time order (a collision of the high
        # bits is caught by the exact comparison below, and costs at most a sample).
        shift = np.uint64(max(1, e.bit_length()))
        low = (np.uint64(1) << shift) - np.uint64(1)
        s = np.sort((h & ~low) | np.arange(e, dtype=np.uint64))
        pos = (s & low).astype(np.int64)
        group = s >> shift
        ack_s = is_ack[pos]
        last = np.where(ack_s, -1, np.arange(e, dtype=np.int64))  # latest request so far
        np.maximum.accumulate(last, out=last)
        acks = np.flatnonzero(ack_s)
        j = last[acks]
        ok = j >= 0
        j[~ok] = 0
        ok &= group[j] == group[acks]
        a_pos, r_pos = pos[acks[ok]], pos[j[ok]]
        lat = t[a_pos] - t[r_pos]
        near = lat <= ACK_MATCH_WINDOW_NS
        a_pos, r_pos, lat = a_pos[near], r_pos[near], lat[near]

        def origin(p: _I64) -> _I64:
            return p if src is None else src[p]

        # The key words of every event (carry, then rows), IPv4's zero low words left out.
        cw = self.carry_words
        cols_w = [0, 1, 3] if keys.rq_lo is None and not cw[:, [2, 4]].any() else range(5)
        all_words = {j: np.concatenate([cw[:, j], keys.column(j)]) for j in cols_w}

        def words(p: _I64) -> _U64:
            i = origin(p)
            out = np.zeros((i.size, _KEY_WORDS), dtype=np.uint64)
            for col, values in all_words.items():
                out[:, col] = values[i]
            return out

        def macs(p: _I64) -> tuple[_U64, _Bool]:
            i = origin(p)
            old = i < k
            r = rows[i[~old] - k]
            mac = np.empty(i.size, dtype=np.uint64)
            has = np.empty(i.size, dtype=bool)
            mac[old], has[old] = self.carry_mac[i[old]], self.carry_has_mac[i[old]]
            mac[~old], has[~old] = cols["src_mac"][r], cols["has_src_mac"][r]
            return mac, has

        if lat.size:
            ia, ir = origin(a_pos), origin(r_pos)
            same = np.ones(lat.size, dtype=bool)
            for values in all_words.values():
                same &= values[ia] == values[ir]
            a_pos, r_pos, lat = a_pos[same], r_pos[same], lat[same]
        if lat.size:
            self._keep(lat, _mix(t[a_pos].astype(np.uint64) ^ h[a_pos]), *macs(r_pos))
        # The carry: the latest request of each key (group).
        ends = np.flatnonzero(np.append(group[1:] != group[:-1], True))
        jr = last[ends]
        valid = jr >= 0
        valid[valid] = group[jr[valid]] == group[ends[valid]]
        keep = np.sort(pos[jr[valid]])
        self._carry(words(keep), h[keep], t[keep], *macs(keep))

    def _carry(self, words: _U64, h: _U64, t: _I64, mac: _U64, has_mac: _Bool) -> None:
        """Carry the newest ACK_CARRY of these requests (in time order) within the window."""
        if t.size:
            recent = np.flatnonzero(t >= int(t.max()) - ACK_MATCH_WINDOW_NS)[-ACK_CARRY:]
            words, h, t = words[recent], h[recent], t[recent]
            mac, has_mac = mac[recent], has_mac[recent]
        self.carry_words, self.carry_h, self.carry_t = words, h, t
        self.carry_mac, self.carry_has_mac = mac, has_mac

    def _keep(self, lat: _I64, priority: _U64, mac: _U64, has_mac: _Bool) -> None:
        self.matched += int(lat.size)
        if self.live:
            self.fresh.append(lat)
            return
        macs, counts = np.unique(mac[has_mac], return_counts=True)
        for m, k in zip(macs.tolist(), counts.tolist(), strict=True):
            self.by_mac[m] = self.by_mac.get(m, 0) + k
        self.latency.append(lat)
        self.priority.append(priority)
        self.mac.append(mac)
        self.has_mac.append(has_mac)
        self.kept += int(lat.size)
        if self.kept > 2 * ACK_SAMPLES_KEPT:
            self._compact()

    def _compact(self) -> None:
        if len(self.latency) <= 1 and self.kept <= ACK_SAMPLES_KEPT:
            return
        lat: _I64 = np.concatenate(self.latency)
        pri: _U64 = np.concatenate(self.priority)
        mac: _U64 = np.concatenate(self.mac)
        has: _Bool = np.concatenate(self.has_mac)
        keep = _smallest(pri, ACK_SAMPLES_KEPT)
        self.latency, self.priority = [lat[keep]], [pri[keep]]
        self.mac, self.has_mac = [mac[keep]], [has[keep]]
        self.kept = int(keep.size)

    def result(self, local: int | None) -> AckSamples | None:
        """The kept samples, classed by requester once the capturing host's MAC is known."""
        if not self.matched:
            return None
        self._compact()
        mac, has = self.mac[0], self.has_mac[0]
        if local is None:
            requester = np.full(mac.size, -1, dtype=np.int8)
        else:
            requester = np.where(has, (mac == np.uint64(local)).astype(np.int8), np.int8(-1))
        local_n = self.by_mac.get(local, 0) if local is not None else 0
        remote_n = sum(self.by_mac.values()) - local_n if local is not None else 0
        return AckSamples(
            latency_ns=self.latency[0],
            priority=self.priority[0],
            requester=requester.astype(np.int8),
            matched=self.matched,
            local_matched=local_n,
            remote_matched=remote_n,
        )


class LiveAckMatcher:
    """RC ACK round trips of a live capture, block by block, matched as the offline reader does.

    Requests of one block wait (a bounded carry) for their ACKs in the next ones. With 1-in-N
    sampling a request and its ACK are both kept only one time in N², so far fewer pairs match,
    but those that do are unbiased samples.
    """

    def __init__(self) -> None:
        self._m = _AckMatcher(live=True)

    @property
    def matched(self) -> int:
        """Pairs matched so far."""
        return self._m.matched

    def add(self, cols: FrameColumns, time_ns: _I64) -> _I64:
        """Round trips (nanoseconds) of the ACKs of this block matched with their requests."""
        raw = dict(vars(cols))
        # The matcher reads the flow key as its five uint64 words, as the offline reader has it.
        raw["flow_key"] = cols.flow_key.view(np.uint64).reshape(-1, _FLOW_WORDS)
        self._m.add(raw, np.asarray(time_ns, dtype=np.int64), None)
        fresh, self._m.fresh = self._m.fresh, []
        return np.concatenate(fresh) if fresh else np.empty(0, dtype=np.int64)


class _Keys:
    """The match keys of some frames of a chunk: a 64-bit hash each, words on demand.

    A key is five words: ``ip_version << 56 | PSN``, then the requester's address and the
    responder's (two words each: IPv6 high and low 64 bits; IPv4 the address and 0), so an
    ACK's key, its addresses turned round, equals its request's.
    """

    __slots__ = ("h", "head", "rq_hi", "rq_lo", "rs_hi", "rs_lo")

    def __init__(self, cols: dict[str, np.ndarray], rows: _I64, is_ack: _Bool | None) -> None:
        # ip_version << 56 | ..., src (2 words), dst (2 words); take: 5x faster than fk[rows]
        fk = np.take(cols["flow_key"], rows, axis=0)
        self.head = (fk[:, 0] >> np.uint64(56)) << np.uint64(56) | cols["psn"][rows].astype(
            np.uint64
        )
        if is_ack is None:
            self.rq_hi, self.rs_hi = fk[:, 1], fk[:, 3]
        else:
            self.rq_hi = np.where(is_ack, fk[:, 3], fk[:, 1])
            self.rs_hi = np.where(is_ack, fk[:, 1], fk[:, 3])
        h = self.head * np.uint64(_HASH_MUL[0])
        h ^= self.rq_hi * np.uint64(_HASH_MUL[1])
        h ^= self.rs_hi * np.uint64(_HASH_MUL[3])
        self.rq_lo: _U64 | None = None
        self.rs_lo: _U64 | None = None
        if fk[:, 2].any() or fk[:, 4].any():  # IPv6 (an IPv4 address's low word is 0)
            if is_ack is None:
                self.rq_lo, self.rs_lo = fk[:, 2], fk[:, 4]
            else:
                self.rq_lo = np.where(is_ack, fk[:, 4], fk[:, 2])
                self.rs_lo = np.where(is_ack, fk[:, 2], fk[:, 4])
            h ^= self.rq_lo * np.uint64(_HASH_MUL[2])
            h ^= self.rs_lo * np.uint64(_HASH_MUL[4])
        self.h: _U64 = h

    def column(self, j: int) -> _U64:
        """Key word ``j`` of every frame."""
        col = (self.head, self.rq_hi, self.rq_lo, self.rs_hi, self.rs_lo)[j]
        return np.zeros(self.h.size, dtype=np.uint64) if col is None else col

    def words(self) -> _U64:
        """The key words of every frame, one row each."""
        return np.stack([self.column(j) for j in range(_KEY_WORDS)], axis=1)


# ------------------------------------------------------------------------------------------
# Decode pass and totals


def _mac_text(mac: int) -> str:
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))


@dataclass(slots=True)
class _MacVotes:
    """Frames per MAC as source or unicast destination, chunk by chunk: the capturing host.

    The MAC seen in the most frames is the host's. Ties go to the MAC seen first, sources
    before destinations (the order in which the per-frame reader this replaces met them). The
    choice is a guess when a second MAC is seen within 1 % as often (over 100 frames or more):
    the capture is between two hosts only, where every unicast frame counts once for each and
    only the odd broadcast decides. Counted per chunk, so no copy of every frame's addresses
    is kept (they were 18 bytes a frame, twice over at the end).
    """

    #: Per chunk and side: distinct MACs, their frames, and where each was first seen (its
    #: index among all the capture's sources, or all its destinations).
    parts: list[tuple[_U64, _I64, _I64, bool]] = field(default_factory=list)
    srcs: int = 0
    dsts: int = 0

    def add(self, src: _U64, has_src: _Bool, dst: _U64, has_dst: _Bool) -> None:
        srcs = src[has_src]
        dsts = dst[has_dst & ((dst >> np.uint64(40)) & np.uint64(1) == 0)]
        for macs, is_src in ((srcs, True), (dsts, False)):
            if macs.size:
                values, first, counts = np.unique(macs, return_index=True, return_counts=True)
                base = self.srcs if is_src else self.dsts
                self.parts.append((values, counts, first + base, is_src))
        self.srcs += int(srcs.size)
        self.dsts += int(dsts.size)

    def local(self) -> tuple[int | None, bool]:
        """The host's MAC (None: no frame has one), and whether that is a guess."""
        if not self.parts:
            return None, False
        values, inverse = np.unique(np.concatenate([p[0] for p in self.parts]), return_inverse=True)
        counts = np.zeros(values.size, dtype=np.int64)
        first_src = np.full(values.size, self.srcs, dtype=np.int64)
        first_dst = np.full(values.size, self.dsts, dtype=np.int64)
        at = 0
        for part_values, part_counts, first, is_src in self.parts:
            rows = inverse[at : at + part_values.size]
            at += part_values.size
            counts[rows] += part_counts
            side = first_src if is_src else first_dst
            side[rows] = np.minimum(side[rows], first)
        best = int(counts.max())
        close = int(np.count_nonzero(counts >= 0.99 * best)) > 1 and best >= 100
        tied = np.flatnonzero(counts == best)
        if tied.size == 1:
            return int(values[tied[0]]), close
        order = np.where(first_src < self.srcs, first_src, self.srcs + first_dst)[tied]
        return int(values[tied[int(np.argmin(order))]]), close


@dataclass(slots=True)
class _Totals:
    """Running totals over the chunks of one capture."""

    packets: int = 0
    skipped: int = 0
    roce: int = 0
    cnp: int = 0
    acks: int = 0
    naks: int = 0
    seq_naks: int = 0
    tcp_bytes: int = 0
    udp_bytes: int = 0
    flows: list[_U64] = field(default_factory=list)
    qps: list[_U64] = field(default_factory=list)
    macs: _MacVotes = field(default_factory=_MacVotes)
    per_frame: dict[str, list[np.ndarray]] = field(default_factory=dict)
    interfaces: set[int] = field(default_factory=set)  # SLL2 interface indexes
    ifaces: set[int] = field(default_factory=set)  # pcapng interfaces (_Iface.gid)

    def keep(self, name: str, values: np.ndarray) -> None:
        self.per_frame.setdefault(name, []).append(values)

    def column(self, name: str, dtype: type[np.generic]) -> np.ndarray:
        """The chunks' values of one column as one array; the chunks' own are let go."""
        parts = self.per_frame.pop(name, [])
        if not parts:
            return np.zeros(0, dtype=dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _count_keys(parts: list[_U64]) -> int:
    """Distinct non-zero keys over the chunks' distinct keys."""
    if not parts:
        return 0
    rows = _distinct_rows(np.concatenate(parts))
    return int(np.count_nonzero(rows[:, 0]))


def _decode_chunk(g: _Gather, buf: _Buf, chunk: _Chunk, link_type: int) -> dict[str, np.ndarray]:
    """The columns of a chunk's frames (per link type where a pcapng has several)."""
    lts = chunk.lts
    if lts is None or not (lts != lts[0]).any():
        lt = link_type if lts is None else int(lts[0])
        return _decode_into(g, buf, chunk.offs, chunk.caps, lt)
    cols = _empty_columns(int(chunk.offs.size))
    for lt in np.unique(lts).tolist():
        rows = np.flatnonzero(lts == lt)
        part = _decode_into(g, buf, chunk.offs[rows], chunk.caps[rows], int(lt))
        for name, values in part.items():
            cols[name][rows] = values
    return cols


_TWO_HOSTS = (
    "two hosts only: which MAC is the capturing host's is a guess, so tx and rx may be swapped "
    "(a cooked capture, `tcpdump -i any`, records the direction)"
)
_TWO_PORTS = (
    "two ports only: which LID is the capturing port's is a guess (both are seen as often), "
    "so tx and rx may be swapped"
)


def _analyse(buf: _Buf, chunks: Iterable[_Chunk], meta: _Meta) -> Capture:
    """Decode every frame, chunk by chunk, with :func:`_decode_into`; the arrays and totals."""
    g = _Gather(buf)
    tot = _Totals()
    matcher = _AckMatcher()
    for chunk in chunks:
        cols = _decode_chunk(g, buf, chunk, meta.link_type)
        matcher.add(cols, chunk.tns, chunk.timed)
        origs = _without_erf_headers(g, chunk, meta.link_type)
        origs = _cooked_to_wire(g, chunk, meta.link_type, origs)
        tot.packets += int(origs.size)
        tot.skipped += int(origs.size - np.count_nonzero(cols["decoded"]))
        tot.roce += int(np.count_nonzero(cols["roce"]))
        tot.cnp += int(np.count_nonzero(cols["cnp"]))
        acks, naks, seq_naks = ack_counts(cols["aeth_syndrome"])
        tot.acks += acks
        tot.naks += naks
        tot.seq_naks += seq_naks
        tot.tcp_bytes += int(origs[cols["tcp"]].sum())
        tot.udp_bytes += int(origs[cols["udp"]].sum())
        # All-zero keys (non-IP, non-RoCE frames) are counted out at the end.
        tot.flows.append(_distinct_rows(cols["flow_key"], cols["flow_hash"]))
        tot.qps.append(_distinct_rows(cols["qp_key"], cols["qp_hash"]))
        tot.keep("length", origs)
        tot.keep("time_ns", chunk.tns)
        tot.keep("timed", np.ones(origs.size, dtype=bool) if chunk.timed is None else chunk.timed)
        tot.macs.add(cols["src_mac"], cols["has_src_mac"], cols["dst_mac"], cols["has_dst_mac"])
        for name in ("src_mac", "has_src_mac", "pkttype"):
            tot.keep(name, cols[name])
        ifindex = cols["ifindex"]
        tot.interfaces.update(np.unique(ifindex[ifindex >= 0]).tolist())
        if chunk.ifs is not None:
            tot.ifaces.update(np.unique(chunk.ifs).tolist())

    n = tot.packets
    length = tot.column("length", np.int64)
    time_ns = tot.column("time_ns", np.int64)
    timed = tot.column("timed", np.bool_)
    src = tot.column("src_mac", np.uint64)
    has_src = tot.column("has_src_mac", np.bool_)
    local, guessed = tot.macs.local()
    is_tx = has_src & (src == np.uint64(local)) if local is not None else np.zeros(n, dtype=bool)
    del src, has_src
    # A Linux cooked capture (`tcpdump -i any`) says which frames the host sent: that beats
    # the MAC guess, which two hosts talking only to each other leave to chance.
    pkttype = tot.column("pkttype", np.int8)
    typed = pkttype >= 0
    if typed.any():
        is_tx = np.where(typed, pkttype == PACKET_OUTGOING, is_tx)
    # Seconds and nanoseconds apart (a float64 of the whole ns count rounds to 0.2 us), in
    # place: each temporary is 8 bytes a frame.
    time_s = (time_ns % _NS).astype(np.float64)
    time_s /= 1e9
    time_s += time_ns // _NS
    warn = list(meta.warn)
    stray = stray_times(time_s, timed)
    if stray.any():
        timed = timed & ~stray
        warn.append(_stray_warning(time_ns, timed, stray))
    first = last = None
    if n:
        if timed.all():
            first, last = int(time_ns.min()), int(time_ns.max())
        else:
            time_s[~timed] = np.nan
            if timed.any():
                first, last = int(time_ns[timed].min()), int(time_ns[timed].max())
    flows = _count_keys(tot.flows)
    qps = _count_keys(tot.qps)
    samples = matcher.result(local)
    if guessed and not typed.all():
        warn.append(_TWO_PORTS if meta.link_type in _LINKTYPES_IB else _TWO_HOSTS)
    if n and local is None and not typed.any():
        warn.append(
            f"the frames carry no direction (link type {meta.link_type}: no Ethernet MAC, no "
            "cooked-capture packet type), so all are counted as received: where both "
            "directions were captured, B and the rx bytes are their sum, up to twice one "
            "direction's; capture on the Ethernet/RoCE interface, or with `tcpdump -i any`, "
            "for each direction"
        )
    if len(tot.ifaces) > 1:
        names = [meta.iface_names[k] or f"interface #{k}" for k in sorted(tot.ifaces)]
        listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        warn.append(
            f"frames of {len(names)} interfaces ({listed}) are summed: traffic that crosses a "
            "bridge, a bond or a tunnel (a VXLAN and the device under it) is counted on each "
            "interface it crosses; capture on the physical NICs for B and D"
        )
    elif len(tot.interfaces) > 1:
        warn.append(
            f"frames of {len(tot.interfaces)} interfaces (a `-i any` capture) are summed: "
            "traffic that crosses a bridge, a bond or a tunnel is counted on each interface it "
            "crosses; capture on the physical NICs for B and D"
        )
    if tot.skipped and meta.link_type in _LINKTYPES_IB:
        warn.append(
            f"{tot.skipped} InfiniBand frames without a whole transport header (raw packets, "
            "other ERF record types, or headers cut by the snaplen): they count in packets "
            "and bytes only"
        )
    elif tot.skipped:
        warn.append(
            f"{tot.skipped} frames could not be decoded (runt, unsupported link type, or a "
            "header cut by the snaplen); they count in packets and bytes only"
        )
    stats = CaptureStats(
        packets=n,
        bytes=int(length.sum()),
        roce_packets=tot.roce,
        cnp_packets=tot.cnp,
        roce_qps=qps,
        flows=flows,
        tcp_bytes=tot.tcp_bytes,
        udp_bytes=tot.udp_bytes,
        skipped_records=tot.skipped,
        truncated=meta.truncated,
        first_time_s=None if first is None else first // _NS + (first % _NS) / 1e9,
        last_time_s=None if last is None else last // _NS + (last % _NS) / 1e9,
        link_type=meta.link_type,
        # (an InfiniBand capture's "MAC" is a LID: it tells the direction and is not shown)
        local_mac=None if local is None or meta.link_type in _LINKTYPES_IB else _mac_text(local),
        warnings=tuple(warn),
        roce_acks=tot.acks,
        roce_naks=tot.naks,
        roce_seq_naks=tot.seq_naks,
        ack_latency_s=samples.percentiles() if samples else None,
        ack_latency_local_requester_s=samples.percentiles(1) if samples else None,
        ack_latency_remote_requester_s=samples.percentiles(0) if samples else None,
    )
    return Capture(
        time_s=time_s,
        length=length,
        is_tx=is_tx,
        stats=stats,
        time_ns=time_ns,
        ack_samples=samples,
    )


def _parse(buf: _Buf, path: Path) -> Capture:
    size = len(buf)
    if size == 0:
        raise InputFormatError(path, "empty file: not a pcap or pcapng file")
    magic = bytes(buf[0:4])
    meta = _Meta()
    if magic in _PCAP_MAGIC:
        chunks = _scan_pcap(buf, size, path, meta)
    elif magic == _PCAPNG_SHB:
        chunks = _scan_pcapng(buf, size, path, meta)
    else:
        hint = _OTHER_MAGIC.get(magic, "")
        raise InputFormatError(
            path,
            f"not a pcap or pcapng file (magic {magic.hex()} is neither pcap nor pcapng{hint})",
        )
    return _analyse(buf, chunks, meta)


#: Capture formats that are not read, and what to do about them (the error message says).
_OTHER_MAGIC = {
    b"\xa1\xb2\xcd\x34": "; it is Kuznetzov's modified pcap: `editcap -F pcap` converts it",
    b"\x34\xcd\xb2\xa1": "; it is Kuznetzov's modified pcap: `editcap -F pcap` converts it",
}
_INFLATE_CHUNK = 1 << 20


def parse_capture(data: bytes | bytearray | memoryview, *, name: str = "<bytes>") -> Capture:
    """Parse a whole pcap or pcapng file held in memory (pure; see :func:`read_capture`).

    Args:
        data: The file's bytes.
        name: What error messages call the input.

    Returns:
        The capture.

    Raises:
        InputFormatError: The bytes are not a capture or a record header is corrupt.
    """
    return _parse(data, Path(name))


def read_capture(path: Path) -> Capture:
    """Read an offline pcap (µs or ns, either byte order) or pcapng capture.

    The file is memory-mapped, so a capture larger than memory can be read; frames are decoded
    in place. A gzip-, bzip2- or xz-compressed capture is inflated first (told by its leading
    bytes, as every input is); a zstd one is refused with what to run. See the module
    docstring for how malformed files are treated.

    Args:
        path: The capture file.

    Returns:
        Per-frame arrays and totals.

    Raises:
        InputFormatError: The file cannot be read, is not a capture, or is corrupt.
    """
    path = Path(path)
    try:
        # The text readers' opener: the same formats, the same refusal of zstd.
        stream, compression = open_binary(path)
        with stream:
            if compression is not None:
                return _read_compressed(stream, compression, path)
            try:
                mm = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError):  # empty file, pipe, or a file system without mmap
                return _parse(stream.read(), path)
            try:
                return _parse(mm, path)
            finally:
                _close(mm)
    except OSError as exc:
        raise InputFormatError(path, f"cannot read the file: {exc.strerror or exc}") from exc


def _read_compressed(f: BinaryIO, compression: str, path: Path) -> Capture:
    """A compressed capture (``.pcap.gz``, ``.pcap.bz2``, ``.pcap.xz``), inflated first.

    It goes to an unnamed temporary file, mapped and read from there like any other. A stream
    cut short keeps every byte it inflated to (the capture reader then says where the last
    record was cut), with a warning; concatenated streams (``pbzip2``) are all read.
    """
    cut: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        for chunk in inflated_chunks(
            path, f, compression, _INFLATE_CHUNK,
            lambda: cut.append(
                f"the {compression} stream ends early (a cut download or copy?): read what it held"
            ),
            log_cut=False,
        ):  # fmt: skip
            tmp.write(chunk)
        tmp.flush()
        if tmp.tell() == 0:
            raise InputFormatError(path, f"{compression}-compressed, but it inflates to nothing")
        mm = mmap.mmap(tmp.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            capture = _parse(mm, path)
        finally:
            _close(mm)
    if not cut:
        return capture
    return replace(capture, stats=replace(capture.stats, warnings=(*capture.stats.warnings, *cut)))


def _close(mm: mmap.mmap) -> None:
    """Unmap; a numpy view still alive (in an exception's traceback) keeps it until freed."""
    with contextlib.suppress(BufferError):  # only while an error's frames hold a view
        mm.close()


def bin_bytes(
    capture: Capture, *, t0: float, bin_s: float, n_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sum original bytes per time bin, split by direction.

    Bin ``i`` covers ``[t0 + i*bin_s, t0 + (i+1)*bin_s)``; a frame counts whole in the bin of
    its timestamp. Frames outside the range (and untimed ones) are left out. With
    ``capture.time_ns`` the bin of each frame is computed exactly in integer nanoseconds
    (``t0`` taken to the nearest nanosecond).

    Args:
        capture: From :func:`read_capture`.
        t0: Start of bin 0, POSIX seconds.
        bin_s: Bin width in seconds (> 0).
        n_bins: Number of bins (>= 0).

    Returns:
        ``(tx_bytes, rx_bytes)``, float64 arrays of length ``n_bins``.
    """
    if not bin_s > 0 or not np.isfinite(bin_s):
        raise ValueError(f"bin_s must be a positive number, got {bin_s!r}")
    if n_bins < 0:
        raise ValueError(f"n_bins must be >= 0, got {n_bins!r}")
    if not np.isfinite(t0):
        raise ValueError(f"t0 must be a finite number, got {t0!r}")
    bin_ns = bin_s * 1e9
    if capture.time_ns is not None and capture.time_ns.size == capture.length.size:
        # Exact integer arithmetic on the nanosecond stamps, so that a frame stamped exactly on
        # a bin edge lands in the bin that starts there (float64 at today's epoch is ~0.24 µs
        # coarse and would put it either side).
        whole = int(np.floor(t0))
        t0_ns = whole * _NS + round((t0 - whole) * 1e9)
        rel_ns = capture.time_ns - np.int64(t0_ns)
        if bin_ns == round(bin_ns):
            pos = rel_ns // np.int64(round(bin_ns))
        else:
            pos = np.floor(rel_ns / bin_ns).astype(np.int64)
        keep = (pos >= 0) & (pos < n_bins) & np.isfinite(capture.time_s)
    else:
        with np.errstate(invalid="ignore"):
            fpos = np.floor((capture.time_s - t0) / bin_s)
        keep = (fpos >= 0) & (fpos < n_bins)  # NaN compares False
        pos = np.where(keep, fpos, 0).astype(np.int64)
    idx = pos[keep]
    weights = capture.length[keep].astype(np.float64)
    tx = capture.is_tx[keep]
    tx_bytes = np.bincount(idx[tx], weights=weights[tx], minlength=n_bins).astype(np.float64)
    rx_bytes = np.bincount(idx[~tx], weights=weights[~tx], minlength=n_bins).astype(np.float64)
    return tx_bytes, rx_bytes
