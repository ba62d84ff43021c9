"""Offline packet captures: a pure frame decoder and a thin pcap / pcapng reader.

The reader turns a capture into per-frame arrays (time, original length, direction) that the
window layer bins into a byte-rate series, plus totals that say what the traffic was (RoCEv2
packets, queue pairs, CNPs, flows). Only the headers needed are decoded, with
``struct.Struct.unpack_from`` straight from the file buffer (no per-packet dpkt or scapy
objects: the research notes measured dpkt's eager decode at ~160 kpkt/s against >2 Mpkt/s for
a bare struct loop).

Rules that matter (``shared/DESIGN.md``, pcap row):

* Bytes are counted by the frame's ORIGINAL length, never the captured length: captures are
  usually cut at a small snaplen, and host captures hold TSO/GRO frames far above the MTU.
* RoCEv2 is UDP destination port 4791 followed by a 12-byte Base Transport Header (BTH); a CNP
  is BTH opcode 0x81.
* Up to two VLAN tags (802.1Q 0x8100, QinQ 0x88a8 / 0x9100), IPv4 (with options) and IPv6 (with
  hop-by-hop, routing, fragment, destination-options and AH extension headers).

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

import mmap
import socket
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import TypeAlias

import numpy as np

from agent.errors import InputFormatError

__all__ = [
    "Capture",
    "CaptureStats",
    "FrameInfo",
    "bin_bytes",
    "decode_frame",
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

ROCEV2_UDP_PORT = 4791
CNP_OPCODE = 0x81

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
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14

_NS = 1_000_000_000
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

_Buf: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
# dst MAC, src MAC, ethertype, vlan, ip version, src ip, dst ip, proto, sport, dport, roce,
# BTH opcode, dest QP, PSN.  IP addresses stay raw bytes on the hot path.
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
]


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """What :func:`decode_frame` learns from one frame.

    Attributes:
        src_mac: Source MAC (6 bytes); empty when the link type carries none (raw IP).
        dst_mac: Destination MAC; empty for raw IP and Linux cooked captures.
        ethertype: The EtherType after any VLAN tags (for raw IP: 0x0800 or 0x86DD).
        vlan: VLAN ID of the innermost tag (the one the host configured), or None.
        ip_version: 4, 6, or None for a non-IP frame.
        src_ip: Source address in text form, or None.
        dst_ip: Destination address in text form, or None.
        proto: IP protocol (IPv6: the header after the extension headers), or None.
        src_port: TCP/UDP source port; None for other protocols and non-first fragments.
        dst_port: TCP/UDP destination port; as ``src_port``.
        roce: RoCEv2: UDP destination port 4791 with a full BTH.
        bth_opcode: BTH opcode, or None.
        dest_qp: BTH destination queue pair (24 bits), or None.
        psn: BTH packet sequence number (24 bits), or None.
        cnp: RoCEv2 congestion notification packet (BTH opcode 0x81).
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


@dataclass(frozen=True)
class Capture:
    """Per-frame arrays of one capture, in file order.

    Attributes:
        time_s: float64 POSIX seconds per frame (float64 keeps ~0.24 µs at today's epoch;
            ``time_ns`` is exact). NaN for pcapng simple packet blocks before any timed frame.
        length: int64 ORIGINAL length per frame.
        is_tx: bool, the frame's source MAC is ``stats.local_mac``.
        stats: Totals.
        time_ns: int64 POSIX nanoseconds per frame, exact (None when built by hand).
    """

    time_s: np.ndarray
    length: np.ndarray
    is_tx: np.ndarray
    stats: CaptureStats
    time_ns: np.ndarray | None = None


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
        return (dst, src, et, vlan, None, None, None, None, None, None, False, None, None, None)

    if proto not in (_IPPROTO_TCP, _IPPROTO_UDP) or not first_fragment:
        return (dst, src, et, vlan, ipver, sip, dip, proto, None, None, False, None, None, None)
    if end - l4 < 4:
        return None
    sport, dport = _PORTS.unpack_from(buf, l4)
    if proto == _IPPROTO_UDP and dport == ROCEV2_UDP_PORT:
        bth = l4 + 8
        if end - bth < 12:
            return None
        opcode, qp_word, psn_word = _BTH.unpack_from(buf, bth)
        return (
            dst, src, et, vlan, ipver, sip, dip, proto, sport, dport,
            True, opcode, qp_word & 0xFFFFFF, psn_word & 0xFFFFFF,
        )  # fmt: skip
    return (dst, src, et, vlan, ipver, sip, dip, proto, sport, dport, False, None, None, None)


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
            raw IP.

    Returns:
        The decoded fields, or None.
    """
    try:
        r = _decode(buf, 0, len(buf), link_type)
    except (struct.error, IndexError, TypeError, ValueError):  # pragma: no cover - defensive
        return None
    if r is None:
        return None
    dst, src, et, vlan, ipver, sip, dip, proto, sport, dport, roce, opc, dqp, psn = r
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
    )


# ------------------------------------------------------------------------------------------
# Record scanners (pcap, pcapng): find each frame's offset, lengths and time


class _Records:
    """Per-record columns collected by a scanner (Python lists: cheap appends)."""

    __slots__ = ("caps", "link_type", "link_types", "offs", "origs", "tns", "truncated", "warn")

    def __init__(self) -> None:
        self.offs: list[int] = []
        self.caps: list[int] = []
        self.origs: list[int] = []
        self.tns: list[int | None] = []
        self.link_types: list[int] | None = None  # per record, pcapng only
        self.link_type = -1
        self.truncated = False
        self.warn: list[str] = []


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


def _scan_pcap(buf: _Buf, size: int, path: Path) -> _Records:
    """Walk the records of a classic pcap file."""
    endian, frac_ns = _PCAP_MAGIC[bytes(buf[0:4])]
    if size < 24:
        raise InputFormatError(path, f"pcap file header cut short ({size} of 24 bytes)")
    _snaplen, linktype = struct.unpack_from(endian + "16xII", buf, 0)
    recs = _Records()
    recs.link_type = linktype & 0xFFFF  # upper bits: FCS length flags
    rec = struct.Struct(endian + "IIII")
    offs, caps, origs, tns = recs.offs, recs.caps, recs.origs, recs.tns
    pos = 24
    number = 0
    oversized = 0
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
        if caplen > MAX_CAPLEN or origlen > MAX_ORIG_LEN:
            _check_lengths(path, "record", number, caplen, origlen)
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
        offs.append(pos)
        caps.append(caplen)
        origs.append(origlen)
        tns.append(sec * _NS + frac * frac_ns)
        pos += caplen
    if oversized:
        recs.warn.append(
            f"{oversized} records had a captured length above their original length; "
            "the captured length was counted"
        )
    return recs


@dataclass(slots=True)
class _Iface:
    link_type: int
    snaplen: int
    mul: int  # time units -> ns: units * mul // div + offset_ns
    div: int
    offset_ns: int


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


def _scan_pcapng(buf: _Buf, size: int, path: Path) -> _Records:
    """Walk the blocks of a pcapng file (all sections; unknown block types skipped)."""
    recs = _Records()
    link_types: list[int] = []
    recs.link_types = link_types
    offs, caps, origs, tns = recs.offs, recs.caps, recs.origs, recs.tns
    ifaces: list[_Iface] = []
    head = u32 = idb = epb = opb = struct.Struct("<II")  # replaced at the first SHB
    endian = "<"
    pos = 0
    number = 0
    oversized = 0
    spb_untimed = 0
    last_t: int | None = None
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
        if buf[pos : pos + 4] == _PCAPNG_SHB:
            bom = bytes(buf[pos + 8 : pos + 12])
            if bom not in _PCAPNG_BOM:
                raise _corrupt(path, number, "section header has a bad byte-order magic")
            endian = _PCAPNG_BOM[bom]
            head = struct.Struct(endian + "II")
            u32 = struct.Struct(endian + "I")
            idb = struct.Struct(endian + "HHI")
            epb = struct.Struct(endian + "IIIII")
            opb = struct.Struct(endian + "HHIIII")
            ifaces = []  # interface ids are per section
        btype, blen = head.unpack_from(buf, pos)
        if blen < 12 or blen % 4:
            raise _corrupt(
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
            raise _corrupt(path, number, f"trailing block length {trailer} differs from {blen}")
        body_end = pos + blen - 4
        data_off = -1
        if btype == _BT_SHB:
            if blen < 28:
                raise _corrupt(path, number, "section header too short")
            (major,) = struct.unpack_from(endian + "H", buf, pos + 12)
            if major != 1:
                raise _corrupt(path, number, f"unsupported pcapng major version {major}")
        elif btype == _BT_IDB:
            if blen < 20:
                raise _corrupt(path, number, "interface description too short")
            lt, _res, snap = idb.unpack_from(buf, pos + 8)
            mul, div, off_ns = _parse_idb_options(
                buf, pos + 16, body_end, endian=endian, path=path, number=number
            )
            ifaces.append(_Iface(lt, snap, mul, div, off_ns))
            if recs.link_type < 0:
                recs.link_type = lt
        elif btype in (_BT_EPB, _BT_OPB):
            if blen < 32:
                raise _corrupt(path, number, "packet block too short")
            if btype == _BT_EPB:
                if_id, hi, lo, caplen, origlen = epb.unpack_from(buf, pos + 8)
            else:
                if_id, _drops, hi, lo, caplen, origlen = opb.unpack_from(buf, pos + 8)
            if caplen > blen - 32:
                raise _corrupt(path, number, f"captured length {caplen} overruns the block")
            data_off = pos + 28
            t_units: int | None = (hi << 32) | lo
        elif btype == _BT_SPB:
            if blen < 16:
                raise _corrupt(path, number, "simple packet block too short")
            if_id = 0
            (origlen,) = u32.unpack_from(buf, pos + 8)
            caplen = min(origlen, blen - 16)
            if ifaces and ifaces[0].snaplen:
                caplen = min(caplen, ifaces[0].snaplen)
            data_off = pos + 12
            t_units = None
        if data_off >= 0:
            if if_id >= len(ifaces):
                raise _corrupt(path, number, f"packet refers to undeclared interface {if_id}")
            if caplen > MAX_CAPLEN or origlen > MAX_ORIG_LEN:
                _check_lengths(path, "block", number, caplen, origlen)
            if caplen > origlen:
                oversized += 1
                origlen = caplen
            iface = ifaces[if_id]
            if t_units is None:
                t = last_t  # a simple packet block has no time: take the previous frame's
                if t is None:
                    spb_untimed += 1
            else:
                t = t_units * iface.mul // iface.div + iface.offset_ns
                if not _I64_MIN <= t <= _I64_MAX:
                    raise _corrupt(path, number, "timestamp out of range")
                last_t = t
            offs.append(data_off)
            caps.append(caplen)
            origs.append(origlen)
            tns.append(t)
            link_types.append(iface.link_type)
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
    return recs


# ------------------------------------------------------------------------------------------
# Decode pass and totals


def _mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def _analyse(buf: _Buf, recs: _Records) -> Capture:
    """Decode every recorded frame and build the arrays and totals."""
    n = len(recs.offs)
    srcs: list[bytes] = []
    dsts: list[bytes] = []
    flows: set[tuple[object, ...]] = set()
    qps: set[tuple[bytes | None, int | None]] = set()
    roce = cnp = skipped = tcp_bytes = udp_bytes = 0
    lts: Iterable[int] = recs.link_types if recs.link_types is not None else repeat(recs.link_type)
    add_src = srcs.append
    add_dst = dsts.append
    add_flow = flows.add
    decode = _decode
    for off, caplen, orig, lt in zip(recs.offs, recs.caps, recs.origs, lts, strict=False):
        try:
            r = decode(buf, off, off + caplen, lt)
        except (struct.error, IndexError, TypeError, ValueError):  # pragma: no cover
            r = None
        if r is None:
            skipped += 1
            if lt == LINKTYPE_ETHERNET and caplen >= 12:
                add_dst(bytes(buf[off : off + 6]))
                add_src(bytes(buf[off + 6 : off + 12]))
            else:
                add_dst(b"")
                add_src(b"")
            continue
        dst, src, _et, _vlan, ipver, sip, dip, proto, sport, dport, is_roce, opc, dqp, _psn = r
        add_src(src)
        add_dst(dst)
        if ipver is None:
            continue
        add_flow((proto, sip, sport, dip, dport))
        if proto == _IPPROTO_UDP:
            udp_bytes += orig
            if is_roce:
                roce += 1
                qps.add((dip, dqp))
                if opc == CNP_OPCODE:
                    cnp += 1
        elif proto == _IPPROTO_TCP:
            tcp_bytes += orig

    counts = Counter(srcs)
    counts.update(d for d in dsts if d and not d[0] & 1)  # unicast destinations only
    counts.pop(b"", None)
    local = counts.most_common(1)[0][0] if counts else None
    is_tx = np.fromiter((s == local for s in srcs), dtype=bool, count=n)

    timed = [t for t in recs.tns if t is not None]
    if len(timed) == n:
        time_ns = np.array(recs.tns, dtype=np.int64)
        time_s = (time_ns // _NS).astype(np.float64) + (time_ns % _NS).astype(np.float64) / 1e9
    else:  # pcapng simple packet blocks before any timed frame
        time_ns = np.array([t if t is not None else 0 for t in recs.tns], dtype=np.int64)
        time_s = (time_ns // _NS).astype(np.float64) + (time_ns % _NS).astype(np.float64) / 1e9
        time_s[np.array([t is None for t in recs.tns], dtype=bool)] = np.nan
    first = min(timed) if timed else None
    last = max(timed) if timed else None

    length = np.array(recs.origs, dtype=np.int64)
    warn = list(recs.warn)
    if skipped:
        warn.append(
            f"{skipped} frames could not be decoded (runt, unsupported link type, or a header "
            "cut by the snaplen); they count in packets and bytes only"
        )
    stats = CaptureStats(
        packets=n,
        bytes=int(length.sum()),
        roce_packets=roce,
        cnp_packets=cnp,
        roce_qps=len(qps),
        flows=len(flows),
        tcp_bytes=tcp_bytes,
        udp_bytes=udp_bytes,
        skipped_records=skipped,
        truncated=recs.truncated,
        first_time_s=None if first is None else first // _NS + (first % _NS) / 1e9,
        last_time_s=None if last is None else last // _NS + (last % _NS) / 1e9,
        link_type=recs.link_type,
        local_mac=None if local is None else _mac_text(local),
        warnings=tuple(warn),
    )
    return Capture(time_s=time_s, length=length, is_tx=is_tx, stats=stats, time_ns=time_ns)


def _parse(buf: _Buf, path: Path) -> Capture:
    size = len(buf)
    if size == 0:
        raise InputFormatError(path, "empty file: not a pcap or pcapng file")
    magic = bytes(buf[0:4])
    if magic in _PCAP_MAGIC:
        recs = _scan_pcap(buf, size, path)
    elif magic == _PCAPNG_SHB:
        recs = _scan_pcapng(buf, size, path)
    else:
        raise InputFormatError(
            path, f"not a pcap or pcapng file (magic {magic.hex()} is neither pcap nor pcapng)"
        )
    return _analyse(buf, recs)


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
    in place. See the module docstring for how malformed files are treated.

    Args:
        path: The capture file.

    Returns:
        Per-frame arrays and totals.

    Raises:
        InputFormatError: The file cannot be read, is not a capture, or is corrupt.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError):  # empty file, pipe, or a file system without mmap
                return _parse(f.read(), path)
            with mm:
                return _parse(mm, path)
    except OSError as exc:
        raise InputFormatError(path, f"cannot read the file: {exc.strerror or exc}") from exc


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
