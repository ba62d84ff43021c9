"""NCCL debug-log parser: a pure, sans-I/O line decoder, an accumulator, and a thin file reader.

Reads what ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL[,NET]`` prints (NCCL 2.3.5 → 2.30 and
the RCCL fork), with or without NCCL's own timestamp prefix (``NCCL_DEBUG_TIMESTAMP_LEVELS``,
2.26+) and with the prefixes launchers add (torchrun ``[rank0]:``, ``srun -l`` ``0: ``, OpenMPI
``[1,0]<stdout>:``, Ray ``(RayTrainWorker pid=…) ``, mpirun ``[56] ``).

Format reference: ``research/nccl_log_format.md`` (per-version format strings, read from
https://github.com/NVIDIA/nccl at each tag). Line prefix: ``src/debug.cc``; COLL line:
``src/enqueue.cc`` ``ncclEnqueueCheck``; init lines: ``src/init.cc``; IB devices:
``src/transport/net_ib.cc``.

Decisions a reader should know:

* Every regex that can run over a whole line starts at a "token boundary" (a negative
  look-behind), so a search over a pathological line (megabytes without spaces) stays linear.
* NCCL prints its timestamp in *local* time without a zone. It is read here as if it were UTC,
  so ``timestamp_s`` is off from true POSIX time by the host's UTC offset; only differences
  (periods, inter-arrival times) are meaningful, and those are unaffected.
* ``opCount`` is decoded but is not a sequence number (it stays 0 on NVLink-only comms, and is
  shared by grouped calls); count lines instead.
* Pointers are only unique inside a process, so a communicator is keyed by ``(host, pid, comm)``.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from itertools import repeat
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from agent.errors import InputFormatError
from collectors._text import inflated_chunks, open_binary
from collectors.container_logs import DOCKER_HEAD, unwrap_docker_line, unwrap_docker_text
from collectors.nccl_stamps import UNDATED_LIMIT, UndatedClock, epoch_seconds, other_lead_time

__all__ = [
    "DATATYPE_SIZES",
    "KNOWN_OPS",
    "MAX_LINE_BYTES",
    "OP_ALIASES",
    "P2P_OPS",
    "PER_RANK_OPS",
    "UNKNOWN_OP",
    "WHOLE_SECOND_S",
    "CallKind",
    "CallRecord",
    "CollLine",
    "CommInfo",
    "CommKey",
    "FastCall",
    "InfoLine",
    "InitLine",
    "LiveDecoder",
    "NcclEvent",
    "NcclLogAccumulator",
    "NcclLogSummary",
    "NetLine",
    "NoNcclLinesError",
    "OpStats",
    "TopologyLine",
    "VersionLine",
    "WarnLine",
    "canonical_op",
    "collective_bytes",
    "parse_line",
    "parse_records",
    "parse_timestamp",
    "read_nccl_log",
    "read_nccl_logs",
    "stamp_resolution",
]

#: NCCL datatype id → bytes per element (``ncclTypeSize``; ids from ``src/nccl.h.in``).
#: 9 (bfloat16) exists from 2.10, 10/11 (fp8 e4m3/e5m2) from 2.24; ids never changed meaning.
DATATYPE_SIZES: Final[Mapping[int, int]] = MappingProxyType(
    {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
)

#: Ops whose nccl-tests S is count·size·nranks: the COLL ``count`` of AllGather is the per-rank
#: sendcount, of ReduceScatter the per-rank recvcount, of AlltoAll/Gather/Scatter per peer
#: (``src/collectives.cc``; nccl-tests ``src/*.cu`` ``*GetBw``).
PER_RANK_OPS: Final[frozenset[str]] = frozenset(
    {"AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter"}
)

#: Every op name NCCL's ``ncclEnqueueCheck`` can log (``ncclFuncToString``): 2.3.7+ the five
#: classic collectives, 2.7+ Send/Recv, 2.28+ AlltoAll/Gather/Scatter, 2.29+ the one-sided
#: PutSignal/Signal/WaitSignal (S = count·size like Send; Signal/WaitSignal log count 0).
KNOWN_OPS: Final[frozenset[str]] = PER_RANK_OPS | frozenset(
    {"AllReduce", "Broadcast", "Reduce", "Send", "Recv", "PutSignal", "Signal", "WaitSignal"}
)

#: RCCL's names for NCCL's ops (ROCm/rccl ``src/collectives.cc``,
#: ``src/misc/msccl/msccl_lifecycle.cc``): ``AllToAllPivot`` (``count`` per peer, as
#: AlltoAll's), the MSCCL algorithms' ``mscclFunc<Op>`` (on by default, ``MSCCL_ENABLE``;
#: ``count`` as the API's) and MSCCL++'s ``mscclpp_nccl<Op>``. Without them an MSCCL AllGather
#: counted nranks times too few bytes, and an MSCCL++ call was dropped.
OP_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "AllToAll": "AlltoAll",
        "AllToAllPivot": "AlltoAll",
        "mscclFuncAllToAll": "AlltoAll",
        **{
            f"{prefix}{op}": op
            for prefix in ("mscclFunc", "mscclpp_nccl")
            for op in (
                "AllReduce",
                "AllGather",
                "ReduceScatter",
                "Broadcast",
                "Reduce",
                "Send",
                "Recv",
                "Gather",
                "Scatter",
            )
        },
    }
)


def canonical_op(op: str) -> str:
    """NCCL's name for a logged op (:data:`OP_ALIASES`), else the name as logged."""
    return OP_ALIASES.get(op, op)


#: Point-to-point ops: their COLL line's ``root`` is the peer rank (``src/collectives.cc``), kept
#: per call as the call's peer (-1 for every other op, whose root is a root or 0).
P2P_OPS: Final[frozenset[str]] = frozenset({"Send", "Recv"})

#: Op name given to NCCL 2.3.5 COLL lines, which print no op name (``src/collectives/*.cu @
#: v2.3.5-5``). All five ops then have the same format except that Broadcast/Reduce add ``root``,
#: and neither form tells which op it is, so the name is not guessed.
UNKNOWN_OP: Final = "Unknown"

#: Longest line :func:`read_nccl_log` decodes; NCCL itself cuts lines at 1023 bytes up to 2.28.
MAX_LINE_BYTES: Final = 64 * 1024

# (host, pid, comm pointer): a comm pointer is only unique inside one process.
CommKey = tuple[str | None, int | None, str]

# ---------------------------------------------------------------------------------------------
# Regular expressions
# ---------------------------------------------------------------------------------------------


#: NCCL's default timestamp format, "[%F %T] ", has whole seconds only: call times it gives
#: are that coarse.
WHOLE_SECOND_S = 1.0


def stamp_resolution(stamps: npt.NDArray[np.float64]) -> float:
    """How coarse NCCL timestamps are (NaN: no timestamp): 0, or a whole second.

    Every stamp a whole second is NCCL's default format (:data:`WHOLE_SECOND_S`); by chance,
    a ``%6f`` stamp is whole in one call of a million.
    """
    finite = stamps[np.isfinite(stamps)]
    return WHOLE_SECOND_S if finite.size and bool(np.all(finite == np.floor(finite))) else 0.0


def _rx(pattern: str) -> re.Pattern[str]:
    r"""Compile with ASCII classes: NCCL prints ASCII, and ``\d`` must not take other digits."""
    return re.compile(pattern, re.ASCII)


_PTR = r"\(nil\)|0x[0-9a-f]+"  # glibc %p: "0x" + lower-case hex, "(nil)" for NULL

# NCCL's timestamp (2.26.2+, NCCL_DEBUG_TIMESTAMP_FORMAT default "[%F %T] ", with "%Nf" for
# N = 1..9 fractional digits, src/debug.cc @ v2.26.2-1), also without its brackets (a custom
# format such as "%F %T.%6f ") and in the RFC 3339 form that `kubectl logs --timestamps` and
# `docker logs -t` put before each line ("2025-07-17T13:14:16.123456789Z "). A zone designator
# is skipped: NCCL prints local time without one, and periods do not see a constant offset.
# Other strftime formats are not decoded: the prefix is still found, the line just gets no time.
# The year starts at a digit boundary: a record glued into a pointer (stdout written in 4 KiB
# blocks: "stream 0x55825-03-01 12:00:15.001000] host:...") must not read as year 5825.
_TS_SECOND = r"(?<!\d)\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"
_TS_ZONE = r"(?:Z|[+-]\d\d:?\d\d)?"
_TS = r"(?:\[?(?P<ts>" + _TS_SECOND + r"(?:[.,]\d+)?)" + _TS_ZONE + r"(?:\] ?| ))?"
# (A custom NCCL_DEBUG_TIMESTAMP_FORMAT may end in the bracket, with no blank before the host.)
# The same with the second and its fraction as two unnamed groups (the fast paths).
_TS_FAST = r"(?:\[?(" + _TS_SECOND + r")(?:[.,](\d+))?" + _TS_ZONE + r"(?:\] ?| ))?"
# Such a timestamp at the very start of a line, with a launcher tag between it and NCCL's
# prefix ("2025-07-17T13:14:16.1Z [rank0]:host:..."): the record's time when it has no other.
_LEAD_TS_RE: Final = _rx(r"\[?(" + _TS_SECOND + r"(?:[.,]\d{1,9})?)" + _TS_ZONE + r"\]?[ \t]")
# Ray's log deduplication (RAY_DEDUP_LOGS=1, the default) ends a line that stands for N
# alike lines of several processes with this; the other N - 1 are not in the log.
_RAY_REPEATED_RE: Final = _rx(r" \[repeated (\d{1,9})x across cluster\]$")
# Terminal colour and other CSI sequences (a coloured launcher tag or level): removed first.
_ANSI_RE: Final = _rx(r"\x1b\[[0-?]*[ -/]*[@-~]")
# What a glued neighbour's tail adds to the front of a host when no blank comes before the
# next record: a pointer or a float (a host, gethostname() cut at the first '.', holds
# neither), or the last word of an Init line.
_GLUED_HEAD_RE: Final = _rx(
    r"(?:0x[0-9a-fA-F]+|[0-9]*\.[0-9]+)(?=[A-Za-z])|(?:COMPLETE|START)(?=[A-Za-z0-9])"
)

# "%s:%d:%d [%d] " host:pid:tid [cudaDev] (src/debug.cc). The host is gethostname() cut at the
# first '.', so it has no '.', ':' or blanks. The look-behind makes a host start at a token
# boundary, which keeps `search` linear on long junk; it still accepts every launcher prefix
# (they all end in ':', ' ' or ']' / ')' / '>').
_HOST_PID_TID_DEV = (
    r"(?<![^\s:\[\]()<>])(?P<host>[^\s:\[\]()<>]{1,255}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10})"
    r" \[(?P<dev>-?\d{1,6})\] "
)

# Every INFO/WARN prefix. WARN adds "file:line " (2.3 → 2.30.4) and "file:line (function) "
# (2.30.7+, src/debug.cc @ v2.30.7-1) before "NCCL WARN". RCCL of 2019 (ROCm 2.x) put the
# wall-clock time in µs since the epoch after the device ("host:24888:25056 [1]
# 1558545003174220 NCCL INFO AllReduce: ...", the form ROCm's rocm-timeline-generator.py
# parses): an integer of 10, 13, 16 or 19 digits there is read as s, ms, µs or ns.
_PREFIX_RE: Final = _rx(
    _TS
    + _HOST_PID_TID_DEV
    + r"(?:(?P<epoch>\d{10}(?:\d{3}){0,3}) )?"
    + r"(?:(?P<src>[^\s()]+:\d+)(?: \((?P<func>[^)\s]*)\))? )?NCCL (?P<level>INFO|WARN) "
)

# The COLL message, 2.3.7 → master: "%s: opCount %lx sendbuff %p recvbuff %p count %zi
# datatype %d op %d root %d comm %p [nranks=%d] stream %p" (%zu from 2.22.3). RCCL adds
# " acc %p" after recvbuff (2.2x, src/enqueue.cc) and appends " task %d globalrank %d", hence
# no end anchor. The stream is optional so a record cut by a glued neighbour still counts.
_COLL_BODY = (
    r"(?P<op>[A-Za-z][A-Za-z_]{0,63}): opCount (?P<opcount>[0-9a-fA-F]{1,16})"
    r" sendbuff (?P<sendbuff>" + _PTR + r") recvbuff (?P<recvbuff>" + _PTR + r")"
    r"(?: acc (?:" + _PTR + r"))?"
    r" count (?P<count>\d{1,20}) datatype (?P<dtype>\d{1,10}) op (?P<redop>-?\d{1,10})"
    r" root (?P<root>-?\d{1,10}) comm (?P<comm>" + _PTR + r") \[nranks=(?P<nranks>\d{1,10})\]"
    r"(?: stream (?P<stream>" + _PTR + r"))?"
)
_COLL_BODY_RE: Final = _rx(_COLL_BODY)
# The same message found anywhere (its own prefix lost). The look-behind keeps the search linear.
_COLL_BARE_RE: Final = _rx(r"(?<![A-Za-z_])" + _COLL_BODY)
# Prefix and COLL message in one search (parse_line's common case).
_COLL_FULL_RE: Final = _rx(_TS + _HOST_PID_TID_DEV + r"NCCL INFO " + _COLL_BODY)
# The same, capturing only what NcclLogAccumulator.feed accounts (timestamp seconds and
# fraction, host, pid, op, count, datatype, root, comm, nranks): fewer groups make the hot-path
# search and groups() cheaper. It accepts exactly the lines _COLL_FULL_RE accepts.
_COLL_FAST_RE: Final = _rx(
    _TS_FAST
    + r"(?<![^\s:\[\]()<>])([^\s:\[\]().<>]{1,255}):(\d{1,10}):\d{1,10} \[-?\d{1,6}\] NCCL INFO "
    r"([A-Za-z][A-Za-z_]{0,63}): opCount [0-9a-fA-F]{1,16} sendbuff (?:"
    + _PTR
    + r") recvbuff (?:"
    + _PTR
    + r")(?: acc (?:"
    + _PTR
    + r"))? count (\d{1,20}) datatype (\d{1,10}) op -?\d{1,10} root (-?\d{1,10})"
    r" comm (" + _PTR + r") \[nranks=(\d{1,10})\]"
)

# The same fast path in two anchored pieces around a line's only "NCCL INFO ": the prefix is
# searched in the text before it (ending right there), the message matched right after it. On
# a line with one "NCCL " (the only lines the live fast path takes) they accept exactly what
# _COLL_FAST_RE accepts, with the same groups, without trying a match at every position.
_FAST_PREFIX_RE: Final = _rx(
    _TS_FAST + r"(?<![^\s:\[\]()<>])([^\s:\[\]().<>]{1,255}):(\d{1,10}):\d{1,10} \[-?\d{1,6}\] \Z"
)
_FAST_BODY_RE: Final = _rx(
    r"([A-Za-z][A-Za-z_]{0,63}): opCount [0-9a-fA-F]{1,16} sendbuff (?:"
    + _PTR
    + r") recvbuff (?:"
    + _PTR
    + r")(?: acc (?:"
    + _PTR
    + r"))? count (\d{1,20}) datatype (\d{1,10}) op -?\d{1,10} root (-?\d{1,10})"
    r" comm (" + _PTR + r") \[nranks=(\d{1,10})\]"
)

# Both at once, anchored at the start of the line: the common case (no launcher tag) in a
# single match that never scans.
_FAST_LINE_RE: Final = _rx(
    _FAST_PREFIX_RE.pattern.removesuffix(r"\Z") + "NCCL INFO " + _FAST_BODY_RE.pattern
)

#: A COLL record on the live fast path: (NCCL timestamp or None, op, S or None, nranks, comm
#: pointer, "host:pid", peer: the ``root`` of a Send/Recv, -1 for every other op).
FastCall = tuple[float | None, str, int | None, int, str, str, int]

# The live tailer's bulk path: one regex split over a whole chunk of complete lines, one match
# per line, so no Python runs per line (split, unlike findall, makes no tuple per match: its
# flat list of groups is sliced into columns). CPython's regex engine is slow on character
# classes (each char of `[^\s:\[\]()<>]` or `\d` costs several times a `[^ ]`), so the first
# branch only *delimits* the common COLL line, with single-character loops where it can: the
# timestamp, "host:pid:tid [dev] NCCL INFO op" (one value per thread and op) and everything from
# "sendbuff" to the end (one value per buffers, shape, comm and stream). Those repeat from line
# to line, so each distinct value is checked once against the strict pieces below and cached;
# the opCount, which changes every line, is checked in place, and the timestamp with numpy. A
# line the first branch does not take, or whose pieces fail a check, goes to the per-line path
# (LiveDecoder.fast, then decode), exactly as before. The loops are possessive (each stops at
# a character it cannot take, which is the one that must follow, so giving some back could
# never help): the same matches, ~10 % faster.
_BULK_RE: Final = _rx(
    r"(\[[^\]]{19,29}+\] |)([^ ]++ [^ ]++ NCCL INFO [^:]++): opCount [0-9a-fA-F]{1,16}+"
    r" (sendbuff [^\n]*+)\n|[^\n]*+\n"
)
# The same, but no piece can run past a newline: slower, for a chunk where a loose loop above
# ran across lines (then the matches are not the lines).
_BULK_SAFE_RE: Final = _rx(
    r"(\[[^\]\n]{19,29}+\] |)([^ \n]++ [^ \n]++ NCCL INFO [^:\n]++): opCount [0-9a-fA-F]{1,16}+"
    r" (sendbuff [^\n]*+)\n|[^\n]*+\n"
)
# The strict pieces: with them the line is exactly what _FAST_LINE_RE accepts (whose match
# is unique: every field ends at a character it cannot hold), with the same groups.
_BULK_WHO_RE: Final = _rx(
    r"([^\s:\[\]().<>]{1,255}:\d{1,10}):\d{1,10} \[-?\d{1,6}\] NCCL INFO ([A-Za-z][A-Za-z_]{0,63})"
)
_BULK_MID_RE: Final = _rx(
    r"sendbuff (?:" + _PTR + r") recvbuff (?:" + _PTR + r")(?: acc (?:" + _PTR + r"))?"
    r" count (\d{1,20}) datatype (\d{1,10})"
    r" op -?\d{1,10} root (-?\d{1,10}) comm (" + _PTR + r") \[nranks=(\d{1,10})\]"
)
_UNSEEN: Final = -2  # a pair of line pieces not in the cache yet

#: A call kind of the bulk path: (op, S or None, nranks or 0, comm pointer, "host:pid", peer).
#: The peer is -1 for every op but Send/Recv, so collectives with other roots share a kind.
CallKind = tuple[str, int | None, int, str, str, int]

# NCCL 2.3.5 only (src/collectives/*.cu @ v2.3.5-5): no op name, a "size" field in bytes, and
# "root %d" only in broadcast.cu/reduce.cu.
_COLL_235_RE: Final = _rx(
    r"opCount (?P<opcount>[0-9a-fA-F]{1,16})"
    r" sendbuff (?P<sendbuff>" + _PTR + r") recvbuff (?P<recvbuff>" + _PTR + r")"
    r" count (?P<count>\d{1,20}) size (?P<size>\d{1,20}) datatype (?P<dtype>\d{1,10})"
    r" op (?P<redop>-?\d{1,10})(?: root (?P<root>-?\d{1,10}))?"
    r" comm (?P<comm>" + _PTR + r") \[nranks=(?P<nranks>\d{1,10})\]"
    r"(?: stream (?P<stream>" + _PTR + r"))?"
)

# Communicator creation, src/init.cc. One pattern covers all versions:
#   2.3.7          "comm %p rank %d nranks %d - COMPLETE"
#   2.4            "... cudaDev %d nvmlDev %d - Init COMPLETE"
#   2.5.6 → 2.15   "... cudaDev %d busId %x|%lx - Init COMPLETE"
#   2.16           "... busId %lx commId 0x%llx - Init COMPLETE"
#   2.18.3 → 2.20  "... cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START|COMPLETE"
#   2.21 → 2.22    "ncclCommInitRank comm %p ..." / "ncclCommSplit ... parent %p color %d key %d
#                  commId 0x%llx - Init ..."
#   2.23 → master  "%s comm %p ..." (API name); splits "parent %p splitCount|childCount %d color
#                  %d key %d- Init START" (sic, no blank before '-') and no commId
#   2.29 → master  START gains a "[Rank %d] " head.
#   RCCL           COMPLETE has "localSize %zi used %ld bytes[ on core %d]" before " - Init".
_INIT_RE: Final = _rx(
    r"(?:\[Rank -?\d{1,10}\] )?(?:(?P<fn>nccl\w{1,64}) )?comm (?P<comm>" + _PTR + r")"
    r" rank (?P<rank>-?\d{1,10}) nranks (?P<nranks>\d{1,10})"
    r"(?: cudaDev (?P<cudadev>-?\d{1,10}))?(?: nvmlDev (?P<nvmldev>-?\d{1,10}))?"
    r"(?: busId (?P<busid>[0-9a-fA-F]{1,16}))?(?: parent (?P<parent>" + _PTR + r"))?"
    r"(?: (?:splitCount|childCount) (?P<split>-?\d{1,10}))?"
    r"(?: color (?P<color>-?\d{1,10}) key -?\d{1,10})?"
    r"(?: commId 0x(?P<commid>[0-9a-fA-F]{1,16}))?"
    r"(?: localSize -?\d{1,20} used -?\d{1,20} bytes(?: on core -?\d{1,10})?)?"
    r" ?- (?:Init )?(?P<phase>START|COMPLETE)"
)

# NCCL 2.3.5 → 2.4.2 print no "Init START/COMPLETE"; at a comm's allocation they print "comm %p
# rank %d nranks %d" (2.3.x) and "... cudaDev %d nvmlDev %d" (2.4.x; src/init.cu, TRACE from
# 2.4.6): for ncclCommInitAll (one process, many GPUs) the only line that joins comm and rank.
_INIT_ALLOC_RE: Final = _rx(
    r"comm (?P<comm>" + _PTR + r") rank (?P<rank>-?\d{1,10}) nranks (?P<nranks>\d{1,10})"
    r"(?: cudaDev (?P<cudadev>-?\d{1,10}) nvmlDev (?P<nvmldev>-?\d{1,10}))?\s*\Z"
)

# "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d" (2.20+, init.cc).
_TOPO_RE: Final = _rx(
    r"comm (?P<comm>" + _PTR + r") rank (?P<rank>-?\d{1,10}) nRanks (?P<nranks>\d{1,10})"
    r" nNodes (?P<nnodes>\d{1,10}) localRanks (?P<lranks>\d{1,10})"
    r" localRank (?P<lrank>-?\d{1,10})(?: MNNVL (?P<mnnvl>\d{1,10}))?"
)

# "NET/IB : Using%s ; OOB %s:%s" (2.4 → 2.11) and "NET/IB : Using%s %s; OOB %s:%s" (2.12+, the
# second %s is "[RO]" or ""), devices " [%d]%s:%d/%s" (src/transport/net_ib.cc); on master an
# optional ":rail" / ":plane" sits before the link layer, and plugins can add "/SHARP". Up to
# 2.28 a line is cut at 1023 bytes (src/debug.cc buffer[1024]), which only a long NIC list
# reaches, so the OOB tail is optional and a cut last entry is skipped.
_NET_IB_RE: Final = _rx(
    r"NET/IB ?: Using(?P<devs>(?: \[\d{1,6}\][^ ;]{1,256})*)"
    r"(?: ?(?P<ro>\[RO\])?; OOB (?P<oobif>[^:\s]*):?(?P<oobaddr>\S*))?"
)
_NET_IB_DEV_RE: Final = _rx(
    r"\[(?P<idx>\d+)\](?P<dev>[^:\s\[\]]+):(?P<port>\d+)(?::\d*)?(?::\d+)?/(?P<ll>[A-Za-z_]+)"
)

# VERSION_STRING "NCCL version " MAJOR.MINOR.PATCH SUFFIX "+cuda" CUDA_MAJOR.CUDA_MINOR
# (src/init.cc). Look-behind: do not take "RCCL version" or a longer word for it.
_VERSION_RE: Final = _rx(
    r"(?<![A-Za-z])NCCL version (?P<ver>\d{1,4}\.\d{1,4}\.\d{1,4})(?P<suffix>[^+\s]{0,32})"
    r"(?:\+cuda(?P<cuda>\d{1,4}\.\d{1,4}))?"
)
# RCCL's VERSION_STRING "RCCL version : " MAJOR.MINOR.PATCH SUFFIX, then "-" and the git hash
# after a colon (ROCm/rccl src/init.cc); before ROCm 5 "RCCL version 2.6.4+hip3.5".
_RCCL_VERSION_RE: Final = _rx(
    r"(?<![A-Za-z])RCCL version(?: :)? (?P<ver>\d{1,4}\.\d{1,4}\.\d{1,4})(?P<suffix>[^+\s:]{0,32})"
)

_MAX_DEV_ENTRIES = 64  # cap on decoded IB devices per line (NCCL_IB_MAX_DEVS is 32)

_NAN: Final = float("nan")
_POW10: Final = tuple(10.0**k for k in range(10))  # 10^0..10^9 as floats, all exact

# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollLine:
    """One collective or P2P call as logged by ``ncclEnqueueCheck`` (host enqueue time).

    ``s_bytes`` is nccl-tests' S (see :func:`collective_bytes`); None when the datatype is
    unknown, or the op needs nranks and the line has none. ``elem_size`` is the datatype's
    size in bytes, None when unknown. ``host``/``pid``/``tid``/``dev`` are None when the line
    lost its NCCL prefix (interleaved output); ``timestamp_s`` is None without NCCL's
    timestamp prefix.
    """

    op: str
    opcount: int
    sendbuff: str
    recvbuff: str
    count: int
    datatype: int
    redop: int
    root: int
    comm: str
    nranks: int | None
    stream: str
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None
    timestamp_s: float | None
    elem_size: int | None
    s_bytes: int | None


@dataclass(frozen=True, slots=True)
class InitLine:
    """``... comm %p rank %d nranks %d ... - Init START|COMPLETE``: joins a comm to its rank.

    NCCL 2.3.5-2.4.2's allocation line (``comm %p rank %d nranks %d[ cudaDev %d nvmlDev %d]``,
    no Init) is a START.

    ``bus_id`` is NCCL's ``busId`` as printed (``%lx`` of the packed PCI id, e.g. ``1b000``);
    ``comm_id`` the ``commId`` hash without ``0x`` (2.16+; the same value the Inspector prints
    as ``id`` from 2.28). ``api`` is the API name NCCL prints first from 2.21
    (``ncclCommInitRank``, ``ncclCommSplit``, ...); ``parent`` the parent comm of a split.
    """

    comm: str
    rank: int
    nranks: int
    cuda_dev: int | None
    bus_id: str | None
    comm_id: str | None
    phase: Literal["START", "COMPLETE"]
    nvml_dev: int | None = None
    api: str | None = None
    parent: str | None = None
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    timestamp_s: float | None = None
    #: ``splitCount:color`` of a split (2.23+ print no commId for it): with the parent's
    #: commId, the same on every rank of the child communicator.
    split: str | None = None


@dataclass(frozen=True, slots=True)
class TopologyLine:
    """``comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d`` (2.20+)."""

    comm: str
    rank: int
    nranks: int
    nnodes: int
    local_ranks: int
    local_rank: int
    mnnvl: int | None = None
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    timestamp_s: float | None = None


@dataclass(frozen=True, slots=True)
class VersionLine:
    """The ``NCCL version 2.28.3+cuda12.8`` banner, bare (≤2.21 stdout) or as an INFO line.

    RCCL's is ``RCCL version : 2.27.7-HEAD:0d2c4fd`` (``RCCL version 2.6.4+hip3.5`` before):
    ``library`` says which, and ``cuda`` is then None.
    """

    version: str
    cuda: str | None
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    timestamp_s: float | None = None
    library: str = "NCCL"


@dataclass(frozen=True, slots=True)
class WarnLine:
    """A ``NCCL WARN`` line. ``source`` is NCCL's ``file:line``, ``function`` from 2.30.7."""

    text: str
    source: str | None = None
    function: str | None = None
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    timestamp_s: float | None = None


@dataclass(frozen=True, slots=True)
class NetLine:
    """The network NCCL chose: ``Using network X`` (2.6+) or the ``NET/IB : Using`` NIC list.

    ``devices`` holds ``(device, port, link_layer)`` per NIC (``("mlx5_0", 1, "IB")``; the link
    layer is ``IB``, ``RoCE`` or ``UNSPECIFIED``); empty for ``Using network``. ``oob`` is the
    out-of-band socket as printed (``10.0.0.1<0>``) on interface ``oob_interface``.
    """

    network: str
    devices: tuple[tuple[str, int, str], ...] = ()
    relaxed_ordering: bool = False
    oob_interface: str | None = None
    oob: str | None = None
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    timestamp_s: float | None = None


@dataclass(frozen=True, slots=True)
class InfoLine:
    """Any other well-formed ``NCCL INFO`` line (channels, transports, env, tuning)."""

    text: str
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    timestamp_s: float | None = None


NcclEvent = CollLine | InitLine | TopologyLine | VersionLine | WarnLine | NetLine | InfoLine


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------


def collective_bytes(op: str, count: int, elem_size: int | None, nranks: int | None) -> int | None:
    """S of one call as nccl-tests defines it, so logged volumes compare with nccl-tests runs.

    count·size for AllReduce, Broadcast, Reduce, Send, Recv (and PutSignal); count·size·nranks
    for AllGather, ReduceScatter, AlltoAll, Gather, Scatter, whose ``count`` is per rank or per
    peer. Ops not in :data:`KNOWN_OPS` get count·size (their semantics are unknown, so no
    factor is guessed). None when the element size, or a needed nranks, is unknown.
    """
    if elem_size is None:
        return None
    if op in PER_RANK_OPS:
        return None if nranks is None else count * elem_size * nranks
    return count * elem_size


@lru_cache(maxsize=4096)
def _second_epoch(second: str) -> float | None:
    """POSIX seconds of ``YYYY-MM-DD HH:MM:SS`` read as UTC; memoised since lines share it."""
    try:
        sec = int(second[17:19])
        leap = sec == 60  # strftime %T can print a leap second
        moment = datetime(
            int(second[0:4]),
            int(second[5:7]),
            int(second[8:10]),
            int(second[11:13]),
            int(second[14:16]),
            59 if leap else sec,
            tzinfo=UTC,
        )
    except ValueError:
        return None
    return moment.timestamp() + (1.0 if leap else 0.0)


def parse_timestamp(ts: str) -> float | None:
    """Decode NCCL's ``%F %T[.%Nf]`` timestamp text into POSIX seconds, reading it as UTC.

    NCCL prints local time with no zone (``src/debug.cc``, ``localtime``); treating it as UTC
    shifts every time by the same offset, which periods and inter-arrival times do not see.
    Returns None for impossible dates.
    """
    base = _second_epoch(ts[:19])
    if base is None or len(ts) <= 20:
        return base
    frac = ts[20:]
    if not frac.isascii() or not frac.isdigit():
        return None
    digits = frac[:9]  # %Nf has N ≤ 9; anything longer is not NCCL's and is cut at 1 ns
    return base + int(digits) / _POW10[len(digits)]


def _lead_stamp(line: str) -> str | None:
    """The text of a timestamp that starts the line (see ``_LEAD_TS_RE``), if any."""
    if not line[:1].isdigit() and not line.startswith("["):
        return None
    m = _LEAD_TS_RE.match(line)
    return m[1] if m is not None else None


# A launcher's tag at the start of a line, before a stamp of NCCL's custom format: torchrun's
# "[rank0]:" / "[default0]:", srun -l's "0: ", OpenMPI's "[1,0]<stdout>:".
_LAUNCHER_TAG_RE: Final = _rx(r"(?:\[[\w.,-]{1,32}\](?:<std(?:out|err)>)?:|\d{1,6}: ) ?")


def _line_time(line: str) -> float | None:
    """The time of a timestamp that starts the line, if any (see also :mod:`.nccl_stamps`).

    Also after a launcher's tag: NCCL prints its stamp (a custom format: time of day, epoch
    seconds) before its own prefix, and the launcher puts its tag before both.
    """
    stamp = _lead_stamp(line)
    if stamp is not None:
        return parse_timestamp(stamp)
    t = other_lead_time(line)
    if t is None and (m := _LAUNCHER_TAG_RE.match(line)) is not None:
        rest = line[m.end() :]
        stamp = _lead_stamp(rest)
        t = parse_timestamp(stamp) if stamp is not None else other_lead_time(rest)
    return t


def _finer_lead(line: str) -> float | None:
    """The line's leading timestamp when it has a fraction of a second (else None).

    ``kubectl logs --timestamps`` puts nanosecond stamps before NCCL's whole-second default
    ones: steps under a second are timed by the former (a 0.5 s job read as no period).
    """
    stamp = _lead_stamp(line)
    if stamp is None or ("." not in stamp and "," not in stamp):
        return None
    return parse_timestamp(stamp)


def _plain(line: str) -> str:
    """The line without terminal escape sequences (colours a launcher or a wrapper added)."""
    if line.startswith(DOCKER_HEAD):
        line = unwrap_docker_line(line)
    return _ANSI_RE.sub("", line) if "\x1b" in line else line


def _unglued(host: str) -> str:
    """The host without the tail of a record glued before it (see ``_GLUED_HEAD_RE``)."""
    if host[:1].isdigit() or host.startswith(("COMPLETE", "START")):
        m = _GLUED_HEAD_RE.match(host)
        if m is not None:
            return host[m.end() :]
    return host


# Where a record came from: host, pid, tid, dev and timestamp of its NCCL prefix.
_Where = tuple[str | None, int | None, int | None, int | None, float | None]
_NOWHERE: Final[_Where] = (None, None, None, None, None)


def _ptr_or_empty(text: str | None) -> str:
    return "" if text is None else text


def _coll_from_groups(groups: Mapping[str, str | None], where: _Where) -> CollLine:
    """Build a :class:`CollLine` from a 2.3.7+ body match's named groups."""
    op = canonical_op(groups["op"] or UNKNOWN_OP)
    count = int(groups["count"] or 0)
    dtype = int(groups["dtype"] or 0)
    nranks_text = groups["nranks"]
    nranks = int(nranks_text) if nranks_text is not None else None
    elem = DATATYPE_SIZES.get(dtype)
    host, pid, tid, dev, ts = where
    return CollLine(
        op=op,
        opcount=int(groups["opcount"] or "0", 16),
        sendbuff=_ptr_or_empty(groups["sendbuff"]),
        recvbuff=_ptr_or_empty(groups["recvbuff"]),
        count=count,
        datatype=dtype,
        redop=int(groups["redop"] or 0),
        root=int(groups["root"] or 0),
        comm=_ptr_or_empty(groups["comm"]),
        nranks=nranks,
        stream=_ptr_or_empty(groups["stream"]),
        host=host,
        pid=pid,
        tid=tid,
        dev=dev,
        timestamp_s=ts,
        elem_size=elem,
        s_bytes=collective_bytes(op, count, elem, nranks),
    )


def _coll_235(m: re.Match[str], where: _Where) -> CollLine:
    """Build a :class:`CollLine` from the 2.3.5 form, whose ``size`` gives bytes directly."""
    count = int(m["count"])
    size = int(m["size"])
    dtype = int(m["dtype"])
    elem = DATATYPE_SIZES.get(dtype)
    if elem is None and count > 0 and size % count == 0:
        elem = size // count
    host, pid, tid, dev, ts = where
    return CollLine(
        op=UNKNOWN_OP,
        opcount=int(m["opcount"], 16),
        sendbuff=m["sendbuff"],
        recvbuff=m["recvbuff"],
        count=count,
        datatype=dtype,
        redop=int(m["redop"]),
        root=int(m["root"]) if m["root"] is not None else 0,
        comm=m["comm"],
        nranks=int(m["nranks"]),
        stream=_ptr_or_empty(m["stream"]),
        host=host,
        pid=pid,
        tid=tid,
        dev=dev,
        timestamp_s=ts,
        elem_size=elem,
        # The op is unknown, so S is the logged size (count·size), per collective_bytes' rule.
        s_bytes=size,
    )


def _decode_coll(msg: str, where: _Where, *, anywhere: bool) -> CollLine | None:
    """Decode a COLL message at the start of ``msg`` (or anywhere in it, for bare text)."""
    m = _COLL_BARE_RE.search(msg) if anywhere else _COLL_BODY_RE.match(msg)
    if m is not None:
        return _coll_from_groups(m.groupdict(), where)
    m = _COLL_235_RE.search(msg) if anywhere else _COLL_235_RE.match(msg)
    if m is not None:
        return _coll_235(m, where)
    return None


def _init_line(m: re.Match[str], where: _Where, phase: Literal["START", "COMPLETE"]) -> InitLine:
    """An :class:`InitLine` from an init match (groups the allocation form lacks are None)."""
    g = m.groupdict()
    cudadev, nvmldev = g["cudadev"], g["nvmldev"]
    host, pid, tid, dev, ts = where
    return InitLine(
        comm=g["comm"],
        rank=int(g["rank"]),
        nranks=int(g["nranks"]),
        cuda_dev=int(cudadev) if cudadev is not None else None,
        bus_id=g.get("busid"),
        comm_id=g.get("commid"),
        phase=phase,
        nvml_dev=int(nvmldev) if nvmldev is not None else None,
        api=g.get("fn"),
        parent=g.get("parent"),
        host=host,
        pid=pid,
        tid=tid,
        dev=dev,
        timestamp_s=ts,
        split=f"{g['split']}:{g['color']}" if g.get("split") and g.get("color") else None,
    )


def _decode_info(msg: str, where: _Where) -> NcclEvent | None:
    """Decode the message of an INFO record; None only for a COLL message that is broken."""
    host, pid, tid, dev, ts = where
    if "opCount " in msg:
        return _decode_coll(msg, where, anywhere=False)
    if "COMPLETE" in msg or "Init START" in msg:
        m = _INIT_RE.match(msg)
        if m is not None:
            return _init_line(m, where, "START" if m["phase"] == "START" else "COMPLETE")
    elif msg.startswith("comm ") and " nranks " in msg:
        m = _INIT_ALLOC_RE.match(msg)
        if m is not None:
            return _init_line(m, where, "START")
    elif " nNodes " in msg:
        m = _TOPO_RE.match(msg)
        if m is not None:
            mnnvl = m["mnnvl"]
            return TopologyLine(
                comm=m["comm"],
                rank=int(m["rank"]),
                nranks=int(m["nranks"]),
                nnodes=int(m["nnodes"]),
                local_ranks=int(m["lranks"]),
                local_rank=int(m["lrank"]),
                mnnvl=int(mnnvl) if mnnvl is not None else None,
                host=host,
                pid=pid,
                tid=tid,
                dev=dev,
                timestamp_s=ts,
            )
    elif msg.startswith("Using network "):
        return NetLine(
            network=msg[len("Using network ") :].strip(),
            host=host,
            pid=pid,
            tid=tid,
            dev=dev,
            timestamp_s=ts,
        )
    elif msg.startswith("NET/IB"):
        m = _NET_IB_RE.match(msg)
        if m is not None:
            devices = tuple(
                (d["dev"], int(d["port"]), d["ll"])
                for d in _NET_IB_DEV_RE.finditer(m["devs"][: 256 * _MAX_DEV_ENTRIES])
            )[:_MAX_DEV_ENTRIES]
            return NetLine(
                network="IB",
                devices=devices,
                relaxed_ordering=m["ro"] is not None,
                oob_interface=m["oobif"] or None,
                oob=m["oobaddr"] or None,
                host=host,
                pid=pid,
                tid=tid,
                dev=dev,
                timestamp_s=ts,
            )
    elif msg.startswith("NCCL version "):
        m = _VERSION_RE.match(msg)
        if m is not None:
            return VersionLine(
                version=m["ver"] + m["suffix"],
                cuda=m["cuda"],
                host=host,
                pid=pid,
                tid=tid,
                dev=dev,
                timestamp_s=ts,
            )
    elif msg.startswith("RCCL version"):
        m = _RCCL_VERSION_RE.match(msg)
        if m is not None:
            return VersionLine(
                version=m["ver"] + m["suffix"],
                cuda=None,
                host=host,
                pid=pid,
                tid=tid,
                dev=dev,
                timestamp_s=ts,
                library="RCCL",
            )
    return InfoLine(text=msg.rstrip(), host=host, pid=pid, tid=tid, dev=dev, timestamp_s=ts)


def _decode_bare(text: str) -> NcclEvent | None:
    """Decode text carrying no NCCL prefix: a COLL message that lost it, or the bare banner."""
    if "opCount " in text:
        coll = _decode_coll(text, _NOWHERE, anywhere=True)
        if coll is not None:
            return coll
    if "NCCL version " in text:
        m = _VERSION_RE.search(text)
        if m is not None:
            return VersionLine(version=m["ver"] + m["suffix"], cuda=m["cuda"])
    if "RCCL version" in text:
        m = _RCCL_VERSION_RE.search(text)
        if m is not None:
            return VersionLine(version=m["ver"] + m["suffix"], cuda=None, library="RCCL")
    return None


def _records(line: str) -> tuple[list[NcclEvent], int]:
    """Split a line at every NCCL prefix and decode each record; also count broken records.

    A record runs from its prefix to the next prefix (output of several processes can be glued
    on one line). Text before the first prefix is tried as a bare record. A record is "broken"
    when it is a COLL message that does not decode, or when the line mentions ``NCCL INFO`` /
    ``NCCL WARN`` but no prefix is found at all.
    """
    events: list[NcclEvent] = []
    broken = 0
    prefixes = list(_PREFIX_RE.finditer(line))
    head_end = prefixes[0].start() if prefixes else len(line)
    if head_end > 0:
        bare = _decode_bare(line[:head_end])
        if bare is not None:
            events.append(bare)
    if not prefixes:
        if not events and ("NCCL INFO" in line or "NCCL WARN" in line):
            broken += 1
        return events, broken
    lead = _line_time(line)
    for i, p in enumerate(prefixes):
        end = prefixes[i + 1].start() if i + 1 < len(prefixes) else len(line)
        msg = line[p.end() : end]
        ts_text = p["ts"]
        ts = parse_timestamp(ts_text) if ts_text is not None else lead
        if ts is None and p["epoch"] is not None:
            ts = epoch_seconds(p["epoch"])
        if ts_text is not None and "." not in ts_text and "," not in ts_text:
            ts = _finer_lead(line) or ts
        host, pid, tid, dev = _unglued(p["host"]), int(p["pid"]), int(p["tid"]), int(p["dev"])
        if p["level"] == "WARN":
            events.append(
                WarnLine(
                    text=msg.strip(),
                    source=p["src"],
                    function=p["func"],
                    host=host,
                    pid=pid,
                    tid=tid,
                    dev=dev,
                    timestamp_s=ts,
                )
            )
            continue
        event = _decode_info(msg, (host, pid, tid, dev, ts))
        if event is None:
            broken += 1
        else:
            events.append(event)
    return events, broken


def parse_records(line: str) -> list[NcclEvent]:
    """Every NCCL record on one line, in order (several when launchers glued outputs together).

    Pure and total: never raises; returns ``[]`` for text that holds no NCCL record.
    """
    if "NCCL " not in line and "opCount " not in line:
        return []
    try:
        return _records(_plain(line))[0]
    except (ValueError, OverflowError, IndexError):  # pragma: no cover - defensive
        return []


def parse_line(line: str) -> NcclEvent | None:
    """Decode one log line; None when it holds no NCCL record. Never raises.

    Uses ``search``, so launcher prefixes before NCCL's own are skipped. When several records
    are glued on one line, a COLL record wins (COLL lines are what the agent counts): the first
    one that kept its NCCL prefix, else the first one; without COLL record, the first record.
    """
    line = _plain(line)
    try:
        if "opCount " in line:
            m = _COLL_FULL_RE.search(line)
            if m is not None:
                ts_text = m["ts"]
                ts = parse_timestamp(ts_text) if ts_text is not None else _line_time(line)
                where = (_unglued(m["host"]), int(m["pid"]), int(m["tid"]), int(m["dev"]), ts)
                return _coll_from_groups(m.groupdict(), where)
        elif "NCCL " not in line and "RCCL version" not in line:
            return None
        events = _records(line)[0]
    except (ValueError, OverflowError, IndexError):  # pragma: no cover - defensive
        return None
    for event in events:
        if isinstance(event, CollLine):
            return event
    return events[0] if events else None


# ---------------------------------------------------------------------------------------------
# Accumulation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpStats:
    """Per-op totals: ``count`` COLL lines and the sum of their S in bytes (known S only)."""

    count: int
    bytes: int


@dataclass(frozen=True, slots=True)
class CommInfo:
    """What the log says about one communicator of one process (init lines and COLL lines)."""

    host: str | None
    pid: int | None
    comm: str
    rank: int | None
    nranks: int | None
    comm_id: str | None
    cuda_dev: int | None
    bus_id: str | None
    nnodes: int | None
    local_ranks: int | None
    local_rank: int | None
    init_complete: bool
    calls: int


class _CommState:
    """Mutable per-comm record while accumulating; frozen into :class:`CommInfo` on summary."""

    __slots__ = (
        "bus_id",
        "comm_id",
        "cuda_dev",
        "init_complete",
        "local_rank",
        "local_ranks",
        "nnodes",
        "nranks",
        "rank",
    )

    def __init__(self) -> None:
        self.rank: int | None = None
        self.nranks: int | None = None
        self.comm_id: str | None = None
        self.cuda_dev: int | None = None
        self.bus_id: str | None = None
        self.nnodes: int | None = None
        self.local_ranks: int | None = None
        self.local_rank: int | None = None
        self.init_complete = False


_F64 = npt.NDArray[np.float64]
_I32 = npt.NDArray[np.int32]
_IP = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class NcclLogSummary:
    """Everything the agent keeps from an NCCL log; arrays hold one entry per COLL record.

    ``call_times_s`` is NaN where a line had no timestamp; ``call_bytes`` NaN where S is unknown.
    ``call_op_ids`` index ``op_names``; ``call_comm_ids`` index ``comm_keys``; ``call_peers`` is
    the peer rank of a Send or Recv (its ``root`` field), -1 for every other op. ``nranks`` is the
    largest nranks of any communicator or COLL line. ``unparsed_nccl_lines`` counts lines that
    mention ``NCCL INFO``/``NCCL WARN`` with a record that could not be decoded (including
    over-long lines, also counted in ``overlong_lines``).
    """

    collectives: dict[str, OpStats]
    nranks: int | None
    call_times_s: _F64
    call_bytes: _F64
    call_op_ids: _I32
    op_names: tuple[str, ...]
    call_comm_ids: _I32
    comm_keys: tuple[CommKey, ...]
    comms: dict[CommKey, CommInfo]
    call_peers: _I32
    version: str | None
    cuda: str | None
    warn_count: int
    lines_total: int
    nccl_lines: int
    unparsed_nccl_lines: int
    overlong_lines: int
    unknown_ops: dict[str, int]
    unknown_datatype_calls: int
    hosts: tuple[str, ...]
    pids: tuple[int, ...]
    networks: tuple[str, ...]
    ib_devices: tuple[tuple[str, int, str], ...]
    has_timestamps: bool
    calls_total: int
    #: "NCCL" or "RCCL", from the version banner (None without one).
    library: str | None = None
    #: COLL lines ending in Ray's "[repeated Nx across cluster]", and the N - 1 lines of
    #: other processes that Ray's log deduplication folded into them (not counted).
    ray_folded_lines: int = 0
    ray_folded_calls: int = 0
    #: Files given beside others that held no NCCL line, each with the reason (skipped).
    skipped_files: tuple[str, ...] = ()
    #: NCCL 2.26.2 printed wrong fractions of a second: the call times were cut to seconds.
    wrong_fractions: bool = False

    @property
    def call_ops(self) -> list[str]:
        """Op name of every COLL record, in file order."""
        names = self.op_names
        return [names[i] for i in self.call_op_ids.tolist()]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """What the live agent keeps of one COLL record."""

    timestamp_s: float | None
    op: str
    s_bytes: int | None
    nranks: int | None
    comm: str
    process: str
    #: The peer rank of a Send/Recv (the line's ``root``), -1 for every other op.
    peer: int = -1


class LiveDecoder:
    """Decoding for the live tailer: COLL records on fast paths.

    :meth:`decode_chunks` takes whole chunks of lines: the common line (one prefixed COLL
    record) costs no Python of its own there (see ``_BULK_RE``), and every other line goes
    through :meth:`fast` then :meth:`decode`, which read one line: the common line by one regex
    search with few groups, each distinct call shape ``(op, count, datatype, nranks, root)``
    resolved to its S and peer once, as in :class:`NcclLogAccumulator`; anything else mentioning
    NCCL through :func:`parse_records`. WARN lines and lines that mention NCCL but do not decode
    are counted. Init (and topology) lines teach each process's comm its commId and rank.
    """

    #: Communicators remembered for :meth:`comm_id` and :meth:`rank` (a job makes a handful; a
    #: bound all the same).
    MAX_COMMS = 4096
    #: Call kinds kept by the bulk path (distinct op, S, nranks, comm, process, peer) before a
    #: reset.
    MAX_KINDS = 65536
    #: Distinct line pieces whose kind the bulk path remembers (buffers can vary per call),
    #: and their longest length (a real COLL line's pieces have a few hundred characters).
    MAX_PAIRS = 16384
    MAX_PAIR_CHARS = 1024
    #: Texts shorter than this go line by line (below some 30 lines that is cheaper).
    SMALL_CHARS = 8192
    #: Consecutive texts are joined into one bulk pass up to this many characters.
    JOIN_CHARS = 1 << 18

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, str, str, str, str], tuple[int | None, int, int, str]] = {}
        self._seconds: dict[str, float | None] = {}
        self._comm_ids: dict[tuple[str, str], str] = {}
        self._ranks: dict[tuple[str, str], int] = {}
        self.warn_lines = 0
        self.unparsed_lines = 0
        # Bulk path: call kinds (ids valid until the next decode_chunks), and the kind of each
        # distinct ("host:pid:tid [dev] NCCL INFO op", "sendbuff ..." rest) pair (-1: not the
        # common line).
        self._kinds: list[CallKind] = []
        self._kind_index: dict[CallKind, int] = {}
        self._kind_bytes: list[float] = []
        self._pairs: dict[tuple[str | None, str | None], int] = {}
        self._undated = UndatedClock()
        #: The library's version, from the newest banner (None before one).
        self.version: str | None = None
        #: Whether stamps were cut to whole seconds (NCCL 2.26.2's fractions, see _trusted).
        self.fractions_cut = False
        self._fractions_seen = 0
        self._fractions_small = 0

    def unwrap_undated(self, stamps: _F64, processes: Sequence[str]) -> _F64:
        """Stamps without a date (:mod:`collectors.nccl_stamps`) with the days they passed.

        ``processes`` names each stamp's "host:pid"; the count carries over calls.
        """
        return self._undated.unwrap(stamps, processes)

    def comm_id(self, process: str, comm: str) -> str | None:
        """The ``commId`` an Init line gave this process's comm pointer (NCCL 2.16+), if any.

        The commId hashes the job's unique id, so every host of a job sees the same value:
        it names the job without any help from the scheduler.
        """
        return self._comm_ids.get((process, comm))

    def rank(self, process: str, comm: str) -> int | None:
        """This process's rank in its comm pointer, from the comm's Init line; None before one.

        A later Init line of the same pointer (a comm destroyed and another made at its
        address) replaces it.
        """
        return self._ranks.get((process, comm))

    def _second(self, sec: str) -> float | None:
        """POSIX second of a ``%F %T`` text, memoised (None: an impossible date)."""
        base = self._seconds.get(sec)
        if base is None:
            if len(self._seconds) >= 4096:
                self._seconds.clear()
            base = self._seconds[sec] = _second_epoch(sec)
        return base

    def _time(self, sec: str | None, frac: str | None) -> float | None:
        if sec is None:
            return None
        base = self._second(sec)
        if base is None:
            return None
        if frac is None or len(frac) >= 10:
            return parse_timestamp(sec if frac is None else f"{sec}.{frac}")
        return base + int(frac) / _POW10[len(frac)]

    def fast(self, line: str) -> FastCall | None:
        """The line's COLL record if it is the common case (one prefixed record), else None.

        None means "not decided here": :meth:`decode` then takes the line. Each distinct call
        shape ``(op, count, datatype, nranks, root)`` is resolved to its S and peer once.
        """
        if "\x1b" in line or line.startswith(DOCKER_HEAD):
            line = _plain(line)
        whole = _FAST_LINE_RE.match(line)
        if whole is not None:
            # one "NCCL " and one "opCount" in the line: none after the record, none in the host
            end = whole.end()
            if line.find("NCCL ", end) >= 0 or line.find("opCount", end) >= 0:
                return None
            sec, frac, host, pid, op, count, dtype, root, comm, nranks_text = whole.groups()
            if "opCount" in host:
                return None
        else:
            i = line.find("NCCL INFO ")
            if i < 0 or line.count("NCCL ") != 1 or line.count("opCount") != 1:
                return None
            body = _FAST_BODY_RE.match(line, i + 10)
            if body is None:
                return None
            head = _FAST_PREFIX_RE.search(line, 0, i)  # after a launcher tag
            if head is None:
                return None
            sec, frac, host, pid = head.groups()
            op, count, dtype, root, comm, nranks_text = body.groups()
        shape = self._shapes.get((op, count, dtype, nranks_text, root))
        if shape is None:
            shape = self._new_shape(op, count, dtype, nranks_text, root)
        s_bytes, nranks, peer, name = shape
        stamp = self._time(sec, frac) if sec is not None else _line_time(line)
        return (stamp, name, s_bytes, nranks, comm, f"{host}:{pid}", peer)

    def _new_shape(
        self, op: str, count: str, dtype: str, nranks_text: str, root: str
    ) -> tuple[int | None, int, int, str]:
        """(S, nranks, peer, NCCL's op name) of a call shape seen for the first time.

        Cached, up to a bound.
        """
        nranks = int(nranks_text)
        elem = DATATYPE_SIZES.get(int(dtype))
        name = canonical_op(op)
        peer = int(root) if name in P2P_OPS else -1
        shape = (collective_bytes(name, int(count), elem, nranks), nranks, peer, name)
        if len(self._shapes) < 65536:
            self._shapes[(op, count, dtype, nranks_text, root)] = shape
        return shape

    def decode(self, line: str) -> list[CallRecord]:
        """The COLL records of one line (usually zero or one)."""
        line = _plain(line)
        call = self.fast(line)
        if call is not None:
            return [CallRecord(*call)]
        if "NCCL " not in line and "opCount " not in line:  # a bare record lost its prefix
            return []
        try:
            events, broken = _records(line)
        except (ValueError, OverflowError, IndexError):  # pragma: no cover - defensive
            self.unparsed_lines += 1
            return []
        if broken:
            self.unparsed_lines += 1
        out: list[CallRecord] = []
        for event in events:
            if isinstance(event, CollLine):
                process = f"{event.host}:{event.pid}"
                peer = event.root if event.op in P2P_OPS else -1
                out.append(CallRecord(event.timestamp_s, event.op, event.s_bytes, event.nranks,
                                      event.comm, process, peer))  # fmt: skip
            elif isinstance(event, WarnLine):
                self.warn_lines += 1
            elif isinstance(event, (InitLine, TopologyLine)):
                self._learn_comm(event)
            elif isinstance(event, VersionLine):
                self.version = event.version
        return out

    def _trusted(self, stamps: _F64) -> _F64:
        """The stamps cut to whole seconds while they may carry NCCL 2.26.2's wrong fractions.

        As :func:`_wrong_fractions` decides for a whole file, but as the calls come: under
        the 2.26.2 banner the stamps are cut until 50 fractions are seen, and from then on
        only while under 2 % of all seen read under 0.1 s (true ones do a tenth of the time:
        a container runtime's stamps before NCCL's whole seconds).
        """
        if not _fraction_bug_version(self.version):
            return stamps
        stamped, small = _fraction_counts(stamps)
        self._fractions_seen += stamped
        self._fractions_small += small
        if self._fractions_seen >= _FRACTIONS_TO_TELL and not _fractions_look_wrong(
            self._fractions_seen, self._fractions_small
        ):
            return stamps
        self.fractions_cut = True
        return np.floor(stamps)

    def _learn_comm(self, event: InitLine | TopologyLine) -> None:
        """Remember what an Init (or topology) line says of its comm: rank, and commId."""
        key = (f"{event.host}:{event.pid}", event.comm)
        if len(self._ranks) >= self.MAX_COMMS and key not in self._ranks:
            self._ranks.clear()
        self._ranks[key] = event.rank
        if isinstance(event, InitLine) and event.comm_id is not None:
            if len(self._comm_ids) >= self.MAX_COMMS:
                self._comm_ids.clear()
            self._comm_ids[key] = event.comm_id

    # -- bulk path ---------------------------------------------------------------------------

    def decode_chunks(self, texts: Iterable[str]) -> tuple[_F64, _IP]:
        """Every COLL record of whole chunks of lines, in order: (NCCL timestamps, kinds).

        Each text is complete lines, each ending in a newline (what ``Tailer.poll_text``
        gives). A timestamp is NaN where the line had none (or an impossible date); a kind
        indexes :meth:`kind` and :meth:`kind_bytes`, until the next call. The result equals
        :meth:`fast`, then :meth:`decode`, line by line (counters and comm ids included), but
        the common line costs no Python of its own: see ``_BULK_RE``.
        """
        if len(self._kinds) > self.MAX_KINDS:  # no id of an earlier batch is still held
            self._kinds.clear()
            self._kind_index.clear()
            self._kind_bytes.clear()
            self._pairs.clear()
        stamps: list[_F64] = []
        kinds: list[_IP] = []
        # Small texts (a live sweep reads a few lines per file) are joined: one pass has a
        # fixed cost of some 30 numpy calls, which only many lines pay for.
        joined: list[str] = []
        size = 0
        for given in texts:
            text = unwrap_docker_text(given) if given.startswith(DOCKER_HEAD) else given
            if joined and size + len(text) > self.JOIN_CHARS:
                self._decode_chunk("".join(joined), stamps, kinds)
                joined, size = [], 0
            joined.append(text)
            size += len(text)
        if joined:
            self._decode_chunk("".join(joined), stamps, kinds)
        if not kinds:
            return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.intp)
        all_stamps, all_kinds = (
            (stamps[0], kinds[0])
            if len(kinds) == 1
            else (np.concatenate(stamps), np.concatenate(kinds))
        )
        if bool((all_stamps < UNDATED_LIMIT).any()):
            processes = [self._kinds[k][4] for k in all_kinds.tolist()]
            all_stamps = self.unwrap_undated(all_stamps, processes)
        return self._trusted(all_stamps), all_kinds

    def kind(self, kind: int) -> CallKind:
        """(op, S or None, nranks or 0, comm, "host:pid", peer) of a :meth:`decode_chunks` kind."""
        return self._kinds[kind]

    def kind_bytes(self) -> _F64:
        """S of every kind as a float (NaN where unknown), indexed by kind."""
        return np.array(self._kind_bytes, dtype=np.float64)

    def _kind(
        self, op: str, s_bytes: int | None, nranks: int, comm: str, process: str, peer: int
    ) -> int:
        key = (op, s_bytes, nranks, comm, process, peer)
        kind = self._kind_index.get(key)
        if kind is None:
            kind = self._kind_index[key] = len(self._kinds)
            self._kinds.append(key)
            self._kind_bytes.append(_NAN if s_bytes is None else float(s_bytes))
        return kind

    def _pair(self, who: str | None, mid: str | None) -> int:
        """Kind of a line made of these two pieces (checked strictly), -1 if not a fast line."""
        kind = -1
        w = _BULK_WHO_RE.fullmatch(who) if who is not None else None
        m = _BULK_MID_RE.match(mid) if w is not None and mid is not None else None
        if w is not None and m is not None and mid is not None:
            process, op = w.groups()
            rest = mid[m.end() :]
            # as in fast(): no other record after this one, no "opCount" in the host
            if "opCount" not in process and "NCCL " not in rest and "opCount" not in rest:
                count, dtype, root, comm, nranks_text = m.groups()
                shape = self._shapes.get((op, count, dtype, nranks_text, root))
                if shape is None:
                    shape = self._new_shape(op, count, dtype, nranks_text, root)
                kind = self._kind(shape[3], shape[0], shape[1], comm, process, shape[2])
        if len(who or "") + len(mid or "") <= self.MAX_PAIR_CHARS:  # junk stays uncached
            if len(self._pairs) >= self.MAX_PAIRS:
                self._pairs.clear()
            self._pairs[(who, mid)] = kind
        return kind

    def _decode_chunk(
        self, text: str, stamps: list[_F64], kinds: list[_IP], *, safe: bool = False
    ) -> None:
        """Append the COLL records of one chunk of complete lines (see decode_chunks)."""
        if len(text) < self.SMALL_CHARS:  # a few lines: cheaper one by one
            line_stamps: list[float] = []
            line_kinds: list[int] = []
            for line in text.split("\n")[:-1]:
                self._line_calls(line, line_stamps, line_kinds)
            stamps.append(np.array(line_stamps, dtype=np.float64))
            kinds.append(np.array(line_kinds, dtype=np.intp))
            return
        # [text before the match (""), timestamp, who, rest] per match, then the text after
        flat: list[str | None] = (_BULK_SAFE_RE if safe else _BULK_RE).split(text)
        rows = len(flat) // 4
        if not rows:
            return
        ts, who, mid = flat[1::4], flat[2::4], flat[3::4]
        row_kinds = np.array(
            list(map(self._pairs.get, zip(who, mid, strict=True), repeat(_UNSEEN))), dtype=np.intp
        )
        for i in np.flatnonzero(row_kinds == _UNSEEN).tolist():
            row_kinds[i] = self._pair(who[i], mid[i])
        row_stamps, ts_ok = self._bulk_stamps(ts)
        bad = row_kinds < 0
        bad |= ~ts_ok
        if not bad.any():
            stamps.append(row_stamps)
            kinds.append(row_kinds)
            return
        # A loose loop that ran across a newline leaves a newline in a timestamp or host piece,
        # which fails its check: only with a bad row can the matches be other than the lines.
        lines = text.split("\n")
        if rows != len(lines) - 1:
            self._decode_chunk(text, stamps, kinds, safe=True)
            return
        # Lines the bulk pattern did not take: line by line, in place.
        good = ~bad
        out_stamps, out_kinds = row_stamps[good], row_kinds[good]
        at: list[int] = []
        more_stamps: list[float] = []
        more_kinds: list[int] = []
        for j, i in enumerate(np.flatnonzero(bad).tolist()):
            before = len(more_kinds)
            self._line_calls(lines[i], more_stamps, more_kinds)
            at.extend([i - j] * (len(more_kinds) - before))  # i - j good rows come before
        if at:
            out_stamps = np.insert(out_stamps, at, more_stamps)
            out_kinds = np.insert(out_kinds, at, more_kinds)
        stamps.append(out_stamps)
        kinds.append(out_kinds)

    def _line_calls(self, line: str, stamps: list[float], kinds: list[int]) -> None:
        """One line the bulk pattern did not take, as the per-line path reads it."""
        if "NCCL " not in line and "opCount " not in line:  # fast() needs "NCCL INFO "
            return
        call = self.fast(line)
        if call is not None:
            calls = [call]
        else:
            calls = [(c.timestamp_s, c.op, c.s_bytes, c.nranks or 0, c.comm, c.process, c.peer)
                     for c in self.decode(line)]  # fmt: skip
        for stamp, op, s_bytes, nranks, comm, process, peer in calls:
            stamps.append(_NAN if stamp is None else stamp)
            kinds.append(self._kind(op, s_bytes, nranks, comm, process, peer))

    def _bulk_stamps(self, ts: list[str | None]) -> tuple[_F64, npt.NDArray[np.bool_]]:
        """NCCL timestamps of a chunk's rows (NaN: none) and which rows' text is well-formed.

        ``ts`` is the "[...] " prefix of 22 to 32 characters, "" or None (no such prefix).
        The rows of one length are checked and decoded together as bytes: the shape by one
        ``translate`` and compare against a template, the second once per run of rows that
        share it (found by comparing its 19 bytes as three unaligned 64-bit words), the
        fraction's digits by a float matrix product (exact: every partial sum is an integer
        below 2^53) over 10**digits: the same double as ``int(digits) / 10**len(digits)`` of
        the per-line path.
        """
        n = len(ts)
        stamps = np.full(n, _NAN)
        ok = np.ones(n, dtype=np.bool_)
        texts: list[str] = [t or "" for t in ts] if None in ts else ts  # type: ignore[assignment]
        widths = set(map(len, texts))
        widths.discard(0)
        if not widths:  # no row has a timestamp
            return stamps, ok
        lengths = None if len(widths) == 1 and "" not in texts else np.array(list(map(len, texts)))
        for width in widths:
            if lengths is None:
                rows, text = np.arange(n), "".join(texts)
            else:
                rows = np.flatnonzero(lengths == width)
                text = "".join([texts[i] for i in rows.tolist()])
            shape = _ts_shape(width)
            if shape is None:
                ok[rows] = False
                continue
            # latin-1 keeps one byte per character; "?" stands for the others (none is valid)
            raw = text.encode("latin-1", "replace")
            classes = raw.translate(_TS_CLASSES)
            if classes != shape * rows.size:
                good = (
                    np.frombuffer(classes, np.uint8).reshape(-1, width)
                    == np.frombuffer(shape, np.uint8)
                ).all(axis=1)
                ok[rows[~good]] = False
                rows = rows[good]
                raw = np.frombuffer(raw, np.uint8).reshape(-1, width)[good].tobytes()
                text = raw.decode("ascii")
                if not rows.size:
                    continue
            count = rows.size
            # "[%F %T" is bytes 1 to 19: as words at 1, 9 and 12
            words = [np.ndarray((count,), np.uint64, raw, at, (width,)) for at in (1, 9, 12)]
            change = np.zeros(count, dtype=np.bool_)
            change[0] = True
            for word in words:
                change[1:] |= word[1:] != word[:-1]
            starts = np.flatnonzero(change)
            bases = [self._second(text[at + 1 : at + 20]) for at in (starts * width).tolist()]
            row_stamps = np.repeat(
                np.array([_NAN if b is None else b for b in bases]),
                np.diff(np.append(starts, count)),
            )
            if width > 22:  # the fraction: bytes 21 to width - 3
                digits = np.frombuffer(raw, np.uint8).reshape(-1, width)[:, 21:-2]
                weights = 10.0 ** np.arange(width - 24, -1, -1)
                value = np.einsum("ij,j->i", digits.astype(np.float64), weights)
                value -= ord("0") * weights.sum()
                row_stamps += value / _POW10[width - 23]
            stamps[rows] = row_stamps
        return stamps, ok


#: Timestamp bytes by class: digits read "0", the other bytes of "[%F %T.%Nf] " stay, others "x".
_TS_CLASSES: Final = bytes(
    ord("0") if 48 <= c <= 57 else c if chr(c) in "[-: .]" else ord("x") for c in range(256)
)


@lru_cache(maxsize=16)
def _ts_shape(width: int) -> bytes | None:
    """The class template of a ``[%F %T[.%Nf]] `` prefix of ``width`` characters (None: invalid)."""
    if width != 22 and not 24 <= width <= 32:
        return None
    frac = b"." + b"0" * (width - 23) if width > 22 else b""
    return b"[0000-00-00 00:00:00" + frac + b"] "


class NcclLogAccumulator:
    """Folds NCCL log lines into an :class:`NcclLogSummary`, one line at a time.

    ``feed`` is on the agent's hot path. The common line (one prefixed COLL record) is decoded
    by one regex search that captures only what is accounted, and each distinct call shape
    ``(op, count, datatype, nranks, root)`` (a "signature": training repeats the same few calls)
    is resolved to its S and peer once; per line only a signature index, a comm index and a time
    are appended. Anything else goes through :func:`parse_records`. ``summary`` can be called at any
    time; feeding may continue afterwards.
    """

    def __init__(self) -> None:
        self._lines_total = 0
        self._nccl_lines = 0
        self._unparsed = 0
        self._overlong = 0
        self._ray_lines = 0
        self._ray_calls = 0
        self._warns = 0
        self._version: str | None = None
        self._cuda: str | None = None
        self._library: str | None = None
        self._nranks: int | None = None
        # Signatures: key → index; per index op id, S (None = unknown), unknown datatype, peer.
        # The fast path's key holds the root text, so a Send/Recv's peer is its signature's.
        self._sig_index: dict[tuple[object, ...], int] = {}
        self._sig_op: list[int] = []
        self._sig_peer: list[int] = []
        self._sig_bytes: list[int | None] = []
        self._sig_unknown_dtype: list[bool] = []
        self._op_index: dict[str, int] = {}
        # Per call, in file order.
        self._times = array("d")
        self._call_sig = array("i")
        self._call_comm = array("i")
        # Communicators: the fast path keys them by the pid's text, the event path by int.
        self._comm_fast: dict[tuple[str, str, str], int] = {}
        self._comm_index: dict[CommKey, int] = {}
        self._comm_states: list[_CommState] = []
        self._sec_cache: dict[str, float | None] = {}
        self._hosts: dict[str, None] = {}
        self._pids: dict[int, None] = {}
        self._pid_hosts: dict[int, list[str]] = {}  # the hosts each pid's comms were seen on
        self._networks: dict[str, None] = {}
        self._ib_devices: dict[tuple[str, int, str], None] = {}

    # -- public -------------------------------------------------------------------------------

    def feed(self, line: str) -> None:
        """Account for one line of log text (without its newline)."""
        self._lines_total += 1
        if "\x1b" in line or line.startswith(DOCKER_HEAD):
            line = _plain(line)
        if "opCount " in line:
            if line.endswith("across cluster]"):
                self._ray_folded(line)
            # The record at the line's start (no launcher tag) is the common case, and an
            # anchored match is cheaper than a search: it finds the same match there.
            m = _FAST_LINE_RE.match(line) or _COLL_FAST_RE.search(line)
            if m is not None and line.count("NCCL ") == 1 and line.count("opCount") == 1:
                # One prefixed COLL record and no other record glued to it.
                self._nccl_lines += 1
                sec, frac, host, pid, op, count, dtype, root, comm, nranks = m.groups()
                sig = self._sig_index.get((op, count, dtype, nranks, root))
                if sig is None:
                    sig = self._new_fast_sig(op, count, dtype, nranks, root)
                self._call_sig.append(sig)
                ci = self._comm_fast.get((host, pid, comm))
                if ci is None:
                    ci = self._new_fast_comm(host, pid, comm, nranks)
                self._call_comm.append(ci)
                if sec is None:
                    lead = _line_time(line)
                    self._times.append(_NAN if lead is None else lead)
                    return
                if frac is None and m.start(1) > 1 and (fine := _finer_lead(line)) is not None:
                    self._times.append(fine)  # a finer stamp before NCCL's whole seconds
                    return
                # Inlined parse_timestamp, with the whole-second part memoised.
                base = self._sec_cache.get(sec)
                if base is not None and frac is not None and len(frac) < 10:
                    self._times.append(base + int(frac) / _POW10[len(frac)])
                else:
                    self._times.append(self._slow_time(sec, frac))
                return
        elif "NCCL " not in line and "RCCL version" not in line:  # RCCL's bare banner
            return
        try:
            events, broken = _records(line)
        except (ValueError, OverflowError, IndexError):  # pragma: no cover - defensive
            self._unparsed += 1
            return
        if events:
            self._nccl_lines += 1
        if broken:
            self._unparsed += 1
        for event in events:
            self._add_event(event)

    @property
    def lines_seen(self) -> int:
        """Lines fed so far (including over-long ones)."""
        return self._lines_total

    @property
    def nccl_lines_seen(self) -> int:
        """Lines so far that held at least one decoded NCCL record."""
        return self._nccl_lines

    @property
    def unparsed_seen(self) -> int:
        """Lines so far that mention NCCL INFO/WARN with a record that did not decode."""
        return self._unparsed

    def note_overlong_line(self) -> None:
        """Count a line that was too long to decode (the reader drops it unread)."""
        self._lines_total += 1
        self._overlong += 1
        self._unparsed += 1

    def summary(self) -> NcclLogSummary:
        """Snapshot of everything accumulated so far (arrays are copies)."""
        names = tuple(self._op_index)
        counts = dict.fromkeys(names, 0)
        volumes = dict.fromkeys(names, 0)
        unknown_dtype = 0
        # Per-signature and per-comm call counts come from the per-call index arrays.
        # (Copies, not np.frombuffer views: a live view would stop the arrays from growing.)
        call_comm = np.array(self._call_comm, dtype=np.int32)
        sig_hits = np.bincount(
            np.array(self._call_sig, dtype=np.int32), minlength=len(self._sig_op)
        ).tolist()
        comm_calls = np.bincount(call_comm, minlength=len(self._comm_states)).tolist()
        for op_id, s_bytes, bad_dtype, hits in zip(
            self._sig_op, self._sig_bytes, self._sig_unknown_dtype, sig_hits, strict=True
        ):
            op = names[op_id]
            counts[op] += hits
            if s_bytes is not None:
                volumes[op] += hits * s_bytes
            if bad_dtype:
                unknown_dtype += hits
        call_sig = np.array(self._call_sig, dtype=np.int32) if self._call_sig else None
        sig_bytes = np.array(
            [_NAN if b is None else float(b) for b in self._sig_bytes], dtype=np.float64
        )
        sig_op = np.array(self._sig_op, dtype=np.int32)
        sig_peer = np.array(self._sig_peer, dtype=np.int32)
        times = np.array(self._times, dtype=np.float64)
        keys = tuple(self._comm_index)
        if bool((times < UNDATED_LIMIT).any()):  # stamps without a date: count the days
            times = UndatedClock().unwrap(times, [keys[c][:2] for c in call_comm.tolist()])
        fraction_bug = _wrong_fractions(self._version, times)
        if fraction_bug:
            times = np.floor(times)
        comms = {
            key: CommInfo(
                host=key[0],
                pid=key[1],
                comm=key[2],
                rank=st.rank,
                nranks=st.nranks,
                comm_id=st.comm_id,
                cuda_dev=st.cuda_dev,
                bus_id=st.bus_id,
                nnodes=st.nnodes,
                local_ranks=st.local_ranks,
                local_rank=st.local_rank,
                init_complete=st.init_complete,
                calls=calls,
            )
            for key, st, calls in zip(keys, self._comm_states, comm_calls, strict=True)
        }
        return NcclLogSummary(
            collectives={op: OpStats(count=counts[op], bytes=volumes[op]) for op in names},
            nranks=self._nranks,
            call_times_s=times,
            call_bytes=(
                sig_bytes[call_sig] if call_sig is not None else np.empty(0, dtype=np.float64)
            ),
            call_op_ids=(sig_op[call_sig] if call_sig is not None else np.empty(0, dtype=np.int32)),
            op_names=names,
            call_comm_ids=call_comm,
            comm_keys=keys,
            comms=comms,
            call_peers=(
                sig_peer[call_sig] if call_sig is not None else np.empty(0, dtype=np.int32)
            ),
            version=self._version,
            cuda=self._cuda,
            library=self._library,
            warn_count=self._warns,
            lines_total=self._lines_total,
            nccl_lines=self._nccl_lines,
            unparsed_nccl_lines=self._unparsed,
            overlong_lines=self._overlong,
            ray_folded_lines=self._ray_lines,
            ray_folded_calls=self._ray_calls,
            wrong_fractions=fraction_bug,
            unknown_ops={op: counts[op] for op in names if op not in KNOWN_OPS},
            unknown_datatype_calls=unknown_dtype,
            hosts=tuple(self._hosts),
            pids=tuple(self._pids),
            networks=tuple(self._networks),
            ib_devices=tuple(self._ib_devices),
            has_timestamps=bool(np.isfinite(times).any()),
            calls_total=len(self._call_sig),
        )

    # -- internals ----------------------------------------------------------------------------

    def _slow_time(self, sec: str, frac: str | None) -> float:
        """Timestamp → seconds when the per-second memo misses (and fill it)."""
        if sec not in self._sec_cache:
            if len(self._sec_cache) >= 4096:
                self._sec_cache.clear()
            self._sec_cache[sec] = _second_epoch(sec)
        t = parse_timestamp(sec if frac is None else f"{sec}.{frac}")
        return _NAN if t is None else t

    def _new_sig_index(
        self,
        key: tuple[object, ...],
        op: str,
        s_bytes: int | None,
        peer: int,
        *,
        unknown_dtype: bool,
    ) -> int:
        op_id = self._op_index.get(op)
        if op_id is None:
            op_id = self._op_index[op] = len(self._op_index)
        sig = self._sig_index[key] = len(self._sig_op)
        self._sig_op.append(op_id)
        self._sig_bytes.append(s_bytes)
        self._sig_unknown_dtype.append(unknown_dtype)
        self._sig_peer.append(peer)
        return sig

    def _new_fast_sig(self, op: str, count: str, dtype: str, nranks_text: str, root: str) -> int:
        nranks = int(nranks_text)
        self._see_nranks(nranks)
        elem = DATATYPE_SIZES.get(int(dtype))
        key = (op, count, dtype, nranks_text, root)
        op = canonical_op(op)
        s_bytes = collective_bytes(op, int(count), elem, nranks)
        peer = int(root) if op in P2P_OPS else -1
        return self._new_sig_index(key, op, s_bytes, peer, unknown_dtype=elem is None)

    def _new_fast_comm(self, host: str, pid_text: str, comm: str, nranks_text: str) -> int:
        ci = self._comm(host, int(pid_text), comm)
        state = self._comm_states[ci]
        if state.nranks is None:
            state.nranks = int(nranks_text)
        self._comm_fast[(host, pid_text, comm)] = ci
        return ci

    def _comm(self, host: str | None, pid: int | None, comm: str) -> int:
        key = (host, pid, comm)
        idx = self._comm_index.get(key)
        if idx is None:
            idx = len(self._comm_states)
            self._comm_index[key] = idx
            self._comm_states.append(_CommState())
            if host is not None:
                self._hosts[host] = None
            if pid is not None:
                self._pids[pid] = None
            if host is not None and pid is not None:
                seen = self._pid_hosts.setdefault(pid, [])
                if host not in seen:
                    seen.append(host)
        return idx

    def _ray_folded(self, line: str) -> None:
        """Count a COLL line into which Ray's log deduplication folded other ranks' lines."""
        m = _RAY_REPEATED_RE.search(line)
        if m is not None:
            self._ray_lines += 1
            self._ray_calls += int(m[1]) - 1

    def _split_id(self, event: InitLine) -> str | None:
        """A split communicator's name from its parent's commId, its split count and colour.

        NCCL 2.23+ print no commId for ``ncclCommSplit``: without one, each rank's child was a
        communicator of its own (8 ranks of a TP x DP split read as 16 comms of 1 rank here).
        """
        if event.parent is None or event.split is None:
            return None
        parent = self._comm_index.get((event.host, event.pid, event.parent))
        parent_id = self._comm_states[parent].comm_id if parent is not None else None
        return f"{parent_id}/split{event.split}" if parent_id else None

    def _see_nranks(self, nranks: int | None) -> None:
        if nranks is not None and (self._nranks is None or nranks > self._nranks):
            self._nranks = nranks

    def _add_coll(self, event: CollLine) -> None:
        # Int-typed key: cannot collide with the fast path's text keys.
        peer = event.root if event.op in P2P_OPS else -1
        key = (event.op, event.s_bytes, event.elem_size is None, event.nranks, peer, 0)
        sig = self._sig_index.get(key)
        if sig is None:
            self._see_nranks(event.nranks)
            sig = self._new_sig_index(
                key, event.op, event.s_bytes, peer, unknown_dtype=event.elem_size is None
            )
        ci = self._comm(event.host, event.pid, event.comm)
        state = self._comm_states[ci]
        if state.nranks is None:
            state.nranks = event.nranks
        self._call_sig.append(sig)
        self._call_comm.append(ci)
        self._times.append(_NAN if event.timestamp_s is None else event.timestamp_s)

    def _with_known_host(self, event: NcclEvent) -> NcclEvent:
        """The event on its process's host where a glued neighbour took the host's head.

        A record glued after a pointer ("stream 0x7f00aadgx-a100-01:11:11 [1] NCCL INFO")
        cannot tell the pointer's last hex digits from a host that starts with a-f: the host
        read "gx-a100-01", and the call made a process of its own. A host that the same pid
        was seen on ends with it: that one is the host.
        """
        host, pid = event.host, event.pid
        if host is None or pid is None:
            return event
        known = self._pid_hosts.get(pid, ())
        if host in known:
            return event
        longer = [h for h in known if len(h) > len(host) and h.endswith(host)]
        return replace(event, host=longer[0]) if len(longer) == 1 else event

    def _add_event(self, event: NcclEvent) -> None:
        event = self._with_known_host(event)
        if isinstance(event, CollLine):
            self._add_coll(event)
        elif isinstance(event, InitLine):
            st = self._comm_states[self._comm(event.host, event.pid, event.comm)]
            st.rank = event.rank
            st.nranks = event.nranks
            st.cuda_dev = event.cuda_dev if event.cuda_dev is not None else st.cuda_dev
            st.bus_id = event.bus_id or st.bus_id
            st.comm_id = event.comm_id or st.comm_id or self._split_id(event)
            st.init_complete = st.init_complete or event.phase == "COMPLETE"
            self._see_nranks(event.nranks)
        elif isinstance(event, TopologyLine):
            st = self._comm_states[self._comm(event.host, event.pid, event.comm)]
            st.rank = event.rank
            st.nranks = event.nranks
            st.nnodes = event.nnodes
            st.local_ranks = event.local_ranks
            st.local_rank = event.local_rank
            self._see_nranks(event.nranks)
        elif isinstance(event, VersionLine):
            if self._version is None:
                self._version, self._cuda = event.version, event.cuda
                self._library = event.library
        elif isinstance(event, WarnLine):
            self._warns += 1
        elif isinstance(event, NetLine):
            self._networks[event.network] = None
            for dev in event.devices:
                self._ib_devices[dev] = None
        if event.host is not None:
            self._hosts[event.host] = None
        if event.pid is not None:
            self._pids[event.pid] = None


# ---------------------------------------------------------------------------------------------
# Thin reader
# ---------------------------------------------------------------------------------------------

_CHUNK = 1 << 20


def _iter_lines(path: Path, max_line_bytes: int) -> Iterator[bytes | None]:
    """Yield the file's lines as bytes (no LF / CR LF, no NUL); None for an over-long line.

    The unfinished last line of a compressed stream cut short is left out.

    Reads in fixed chunks, so an over-long line is skipped, never held whole in memory.
    """
    stream, compression = open_binary(path)
    cut: list[bool] = []
    with stream:
        pending = bytearray()
        skipping = False  # inside an over-long line: drop bytes up to its newline
        for raw in inflated_chunks(path, stream, compression, _CHUNK, lambda: cut.append(True)):
            # NUL runs are no text: logrotate's copytruncate leaves a hole of them where the
            # writer's offset still points, which glued to the next record made it over-long.
            chunk = raw.replace(b"\0", b"") if b"\0" in raw else raw
            start = 0
            while True:
                nl = chunk.find(b"\n", start)
                if nl < 0:
                    if not skipping:
                        pending += chunk[start:]
                        if len(pending) > max_line_bytes:
                            pending.clear()
                            skipping = True
                    break
                if skipping:
                    skipping = False
                    yield None
                else:
                    pending += chunk[start:nl]
                    if len(pending) > max_line_bytes:
                        yield None
                    else:
                        yield bytes(pending.removesuffix(b"\r"))
                    pending.clear()
                start = nl + 1
        if skipping:
            yield None
        elif pending and not cut:  # (a line cut with its stream could read as a shorter S)
            yield bytes(pending.removesuffix(b"\r"))


def _wrong_fractions(version: str | None, times: _F64) -> bool:
    """Whether the call times carry NCCL 2.26.2's wrong fractions of a second.

    2.26.2, the first release with timestamps, printed the ``%Nf`` fraction as
    ``tv_nsec / (1000000 / 10^N)`` cut to N digits (``src/debug.cc @ v2.26.2-1``; fixed in
    2.26.3): any time under 0.1 s past the second read 10x or 100x too far into it, and
    0.5 s steps read 5 s. Only the whole seconds can be trusted. Its fractions never read
    under 0.1 s, while true ones do a tenth of the time: ``kubectl logs --timestamps`` stamps
    before the default whole-second format are true ones (the time then comes from them).
    """
    if not _fraction_bug_version(version):
        return False
    stamped, small = _fraction_counts(times)
    return stamped >= _FRACTIONS_TO_TELL and _fractions_look_wrong(stamped, small)


#: Stamps with a fraction needed to tell 2.26.2's fractions from true ones ...
_FRACTIONS_TO_TELL = 50
#: ... which fall under this fraction of a second ...
_SMALL_FRACTION = 0.1
#: ... this share of the time at least (a tenth of it, in truth), and 2.26.2's never.
_MIN_SMALL_SHARE = 0.02


def _fraction_bug_version(version: str | None) -> bool:
    """Whether the banner names the release with the wrong fractions (2.26.2)."""
    return version is not None and version.split("+", 1)[0] == "2.26.2"


def _fraction_counts(times: _F64) -> tuple[int, int]:
    """(stamps with a fraction of a second, those whose fraction is under 0.1 s); NaN: none."""
    fraction = times - np.floor(times)  # NaN > 0 is False: unstamped calls count in neither
    stamped = fraction > 0
    return int(stamped.sum()), int((fraction[stamped] < _SMALL_FRACTION).sum())


def _fractions_look_wrong(stamped: int, small: int) -> bool:
    """Whether so few of ``stamped`` fractions fall under 0.1 s that they are 2.26.2's."""
    return small < _MIN_SMALL_SHARE * stamped


class NoNcclLinesError(InputFormatError):
    """A readable file that holds no NCCL line (an empty or unrelated log)."""


def _feed_file(acc: NcclLogAccumulator, path: Path, max_line_bytes: int) -> None:
    """Feed one file's lines into ``acc``; raise if it cannot be read or has no NCCL line."""
    before_lines, before_nccl, before_bad = acc.lines_seen, acc.nccl_lines_seen, acc.unparsed_seen
    try:
        for raw in _iter_lines(path, max_line_bytes):
            if raw is None:
                acc.note_overlong_line()
            else:
                acc.feed(raw.decode("utf-8", errors="replace"))
    except IsADirectoryError:
        raise InputFormatError(path, "is a directory, not an NCCL log file") from None
    except OSError as exc:
        raise InputFormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if acc.nccl_lines_seen == before_nccl:
        bad = acc.unparsed_seen - before_bad
        detail = f"{bad} line(s) mention NCCL INFO/WARN but could not be decoded; " if bad else ""
        raise NoNcclLinesError(
            path,
            f"no NCCL lines found ({acc.lines_seen - before_lines} lines read); {detail}"
            "was the job run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL?",
        )


def read_nccl_log(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> NcclLogSummary:
    """Read a whole NCCL log file (``NCCL_DEBUG_FILE`` output or a job's stdout/stderr).

    Bytes that are not UTF-8 are replaced; lines longer than ``max_line_bytes`` are counted
    as unparsed and skipped without being held in memory.

    Raises:
        InputFormatError: the file cannot be opened or read, or holds no NCCL line at all.
    """
    return read_nccl_logs([path], max_line_bytes=max_line_bytes)


def read_nccl_logs(
    paths: Iterable[Path], *, max_line_bytes: int = MAX_LINE_BYTES
) -> NcclLogSummary:
    """Read several NCCL log files (one per process, or per host) into one summary.

    Per-call arrays are in input order, file after file (not merged by time); communicators
    stay apart because they are keyed by ``(host, pid, comm)``.

    A file that holds no NCCL line beside files that do (a rank's empty log in a glob) is
    skipped and named in ``skipped_files``.

    Raises:
        InputFormatError: naming the first file that cannot be read, or the first without an
            NCCL line when none has one.
    """
    acc = NcclLogAccumulator()
    skipped: list[InputFormatError] = []
    for path in paths:
        try:
            _feed_file(acc, Path(path), max_line_bytes)
        except NoNcclLinesError as exc:
            skipped.append(exc)  # one rank's empty log must not cost the others theirs
    if skipped and acc.nccl_lines_seen == 0:
        raise skipped[0]
    return replace(acc.summary(), skipped_files=tuple(str(e) for e in skipped))
