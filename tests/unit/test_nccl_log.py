"""Tests of collectors.nccl_log: lines instantiated from NCCL's own format strings.

Every message below is a format string from NVIDIA/nccl (tag named next to it, see
research/nccl_log_format.md) with its placeholders filled in, so a regex change that breaks a
version shows up here.
"""

from __future__ import annotations

import calendar
import math
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.errors import InputFormatError
from collectors import nccl_log
from collectors.nccl_log import (
    DATATYPE_SIZES,
    KNOWN_OPS,
    UNKNOWN_OP,
    CollLine,
    InfoLine,
    InitLine,
    LiveDecoder,
    NcclLogAccumulator,
    NetLine,
    TopologyLine,
    VersionLine,
    WarnLine,
    canonical_op,
    collective_bytes,
    parse_line,
    parse_records,
    parse_timestamp,
    read_nccl_log,
    read_nccl_logs,
)

HOST, PID, TID, DEV = "node-01", 189884, 189901, 3
NCCL_PREFIX = f"{HOST}:{PID}:{TID} [{DEV}] NCCL INFO "
COMM = "0x78cfda045840"
STREAM = "0x78d07125e5e0"
BUF = "0x78d056200000"
BUF2 = "0x78d05a400000"

# Launcher prefixes seen in real logs (research note §1.1).
LAUNCHERS = [
    "",
    "[rank0]:",
    "[default0]:",
    "0: ",
    "[1,0]<stdout>:",
    "(RayTrainWorker pid=123, ip=10.0.0.1) ",
    "[56] ",
    # A coloured launcher tag (terminal escape sequences are removed before parsing).
    "\x1b[36m[default0]:\x1b[0m",
]

# NCCL_DEBUG_TIMESTAMP_FORMAT "[%F %T] " and "[%F %T.%Nf] " (2.26.2+, src/debug.cc).
_T0 = calendar.timegm((2026, 5, 5, 6, 16, 47, 0, 0, 0))
TIMESTAMPS: list[tuple[str, float | None]] = [
    ("", None),
    ("[2026-05-05 06:16:47] ", float(_T0)),
    ("[2026-05-05 06:16:47.123] ", _T0 + 0.123),
    ("[2026-05-05 06:16:47.123456] ", _T0 + 0.123456),
    ("[2026-05-05 06:16:47.123456789] ", _T0 + 0.123456789),
    # A custom NCCL_DEBUG_TIMESTAMP_FORMAT without brackets ("%F %T.%6f ").
    ("2026-05-05 06:16:47.123456 ", _T0 + 0.123456),
    # RFC 3339, as `kubectl logs --timestamps` and `docker logs -t` print it; the zone is skipped.
    ("2026-05-05T06:16:47.123456789Z ", _T0 + 0.123456789),
    ("2026-05-05T06:16:47+02:00 ", float(_T0)),
]


def coll_body(
    op: str = "AllReduce",
    *,
    count: int = 7382228,
    dtype: int = 7,
    nranks: int = 128,
    send: str = BUF,
    recv: str = BUF,
    root: int = 0,
    redop: int = 0,
    opcount: str = "139d",
    stream: str = STREAM,
) -> str:
    """src/enqueue.cc (2.4.2 → master): the %zi and %zu forms print the same text."""
    return (
        f"{op}: opCount {opcount} sendbuff {send} recvbuff {recv} count {count} datatype {dtype} "
        f"op {redop} root {root} comm {COMM} [nranks={nranks}] stream {stream}"
    )


# (case id, message, expected fields)
COLL_CASES: list[tuple[str, str, dict[str, object]]] = [
    (
        # The real 2.14.3 line of the research note, worked example: S = 29,528,912 B.
        "2.14-allreduce",
        coll_body(),
        {
            "op": "AllReduce",
            "count": 7382228,
            "datatype": 7,
            "nranks": 128,
            "s_bytes": 29528912,
            "opcount": 0x139D,
            "sendbuff": BUF,
            "recvbuff": BUF,
            "root": 0,
            "elem_size": 4,
        },
    ),
    (
        # 2.3.7 per-file literal: "AllGather: opCount %lx ... count %zi datatype %d op %d root %d"
        "2.3.7-allgather",
        coll_body("AllGather", count=256, dtype=6, nranks=8, recv=BUF2, opcount="2"),
        {"op": "AllGather", "count": 256, "datatype": 6, "nranks": 8, "s_bytes": 256 * 2 * 8},
    ),
    (
        "2.22-reducescatter",
        coll_body("ReduceScatter", count=1000, dtype=9, nranks=16, recv=BUF2),
        {"op": "ReduceScatter", "s_bytes": 1000 * 2 * 16, "elem_size": 2},
    ),
    (
        "broadcast-root",
        coll_body("Broadcast", count=10, dtype=8, nranks=4, root=3),
        {"op": "Broadcast", "root": 3, "s_bytes": 80},
    ),
    (
        "reduce-max",
        coll_body("Reduce", count=10, dtype=4, nranks=4, root=1, redop=2, recv=BUF2),
        {"op": "Reduce", "root": 1, "redop": 2, "s_bytes": 80},
    ),
    (
        # ncclRedOpCreatePreMulSum: a mangled user op prints as a large integer (2.11+).
        "allreduce-premulsum",
        coll_body(count=4, dtype=7, nranks=2, redop=1234567890),
        {"redop": 1234567890, "s_bytes": 16},
    ),
    (
        # 2.7–2.11: Send puts its buffer in sendbuff, Recv in recvbuff.
        "2.7-send",
        coll_body("Send", count=1024, dtype=0, nranks=8, recv="(nil)", root=5),
        {"op": "Send", "sendbuff": BUF, "recvbuff": "(nil)", "root": 5, "s_bytes": 1024},
    ),
    (
        "2.7-recv",
        coll_body("Recv", count=1024, dtype=0, nranks=8, send="(nil)", root=4),
        {"op": "Recv", "sendbuff": "(nil)", "recvbuff": BUF, "root": 4, "s_bytes": 1024},
    ),
    (
        # 2.12+: both print "sendbuff (nil)" and the buffer in recvbuff (collectives.cc).
        "2.12-send",
        coll_body("Send", count=512, dtype=9, nranks=8, send="(nil)", root=7),
        {"op": "Send", "sendbuff": "(nil)", "recvbuff": BUF, "s_bytes": 1024},
    ),
    (
        # RCCL 2.27 (ROCm 7.2): "acc %p" after recvbuff, "task %d globalrank %d" appended.
        "rccl-2.27-acc",
        "AllReduce: opCount 0 sendbuff 0x7973d6e00400 recvbuff 0x7973d6e00400 acc (nil) count 1 "
        "datatype 7 op 0 root 0 comm 0x78cfda045840 [nranks=2] stream (nil) task 0 globalrank 0",
        {"op": "AllReduce", "count": 1, "nranks": 2, "s_bytes": 4, "stream": "(nil)"},
    ),
    (
        "2.28-alltoall",
        coll_body("AlltoAll", count=4096, dtype=9, nranks=8, recv=BUF2),
        {"op": "AlltoAll", "s_bytes": 4096 * 2 * 8},
    ),
    (
        "2.28-gather",
        coll_body("Gather", count=100, dtype=7, nranks=4, recv=BUF2, root=2),
        {"op": "Gather", "root": 2, "s_bytes": 100 * 4 * 4},
    ),
    (
        "2.28-scatter",
        coll_body("Scatter", count=100, dtype=7, nranks=4, recv=BUF2, root=1),
        {"op": "Scatter", "s_bytes": 100 * 4 * 4},
    ),
    (
        # 2.29+: ncclPutSignal(localbuff, count, ...) → sendbuff localbuff, recvbuff NULL.
        "2.29-putsignal",
        coll_body("PutSignal", count=64, dtype=0, nranks=8, recv="(nil)", root=3),
        {"op": "PutSignal", "s_bytes": 64},
    ),
    (
        "2.29-signal",
        coll_body("Signal", count=0, dtype=0, nranks=8, send="(nil)", recv="(nil)", root=3),
        {"op": "Signal", "s_bytes": 0},
    ),
    (
        "default-stream",
        coll_body(count=8, dtype=7, nranks=2, stream="(nil)"),
        {"stream": "(nil)", "s_bytes": 32},
    ),
    (
        # RCCL appends " task %d globalrank %d" (ROCm/rccl src/enqueue.cc).
        "rccl-task-globalrank",
        coll_body(count=8, dtype=7, nranks=2) + " task 0 globalrank 5",
        {"op": "AllReduce", "stream": STREAM, "s_bytes": 32},
    ),
    (
        # v2.3.5-5 src/collectives/all_reduce.cu: no op name, a size field in bytes, no root.
        "2.3.5-allreduce",
        f"opCount 1f sendbuff {BUF} recvbuff {BUF} count 1024 size 4096 datatype 7 op 0 "
        f"comm {COMM} [nranks=8] stream {STREAM}",
        {
            "op": UNKNOWN_OP,
            "count": 1024,
            "datatype": 7,
            "nranks": 8,
            "s_bytes": 4096,
            "root": 0,
            "opcount": 0x1F,
            "elem_size": 4,
        },
    ),
    (
        # v2.3.5-5 src/collectives/broadcast.cu: the same plus "root %d".
        "2.3.5-broadcast",
        f"opCount 0 sendbuff {BUF} recvbuff {BUF} count 10 size 20 datatype 6 op 0 root 2 "
        f"comm {COMM} [nranks=4] stream {STREAM}",
        {"op": UNKNOWN_OP, "root": 2, "s_bytes": 20},
    ),
]


def _check_coll(event: object, expected: dict[str, object]) -> None:
    assert isinstance(event, CollLine)
    for name, value in expected.items():
        assert getattr(event, name) == value, name


@pytest.mark.parametrize("case", COLL_CASES, ids=[c[0] for c in COLL_CASES])
@pytest.mark.parametrize("launcher", LAUNCHERS, ids=repr)
@pytest.mark.parametrize("stamp", TIMESTAMPS, ids=[t[0] or "none" for t in TIMESTAMPS])
def test_coll_lines_every_version_prefix_and_timestamp(
    case: tuple[str, str, dict[str, object]], launcher: str, stamp: tuple[str, float | None]
) -> None:
    _, message, expected = case
    stamp_text, stamp_s = stamp
    line = launcher + stamp_text + NCCL_PREFIX + message
    event = parse_line(line)
    _check_coll(event, expected)
    assert isinstance(event, CollLine)
    assert (event.host, event.pid, event.tid, event.dev) == (HOST, PID, TID, DEV)
    assert event.comm == COMM
    if stamp_s is None:
        assert event.timestamp_s is None
    else:
        assert event.timestamp_s == pytest.approx(stamp_s, abs=1e-6)
    # The accumulator's fast path must agree with parse_line.
    acc = NcclLogAccumulator()
    acc.feed(line)
    summary = acc.summary()
    assert summary.calls_total == 1
    assert summary.call_ops == [event.op]
    assert summary.call_peers.tolist() == [event.root if event.op in ("Send", "Recv") else -1]
    assert summary.call_peers.dtype == np.int32
    stats = summary.collectives[event.op]
    assert stats.count == 1
    assert stats.bytes == (event.s_bytes or 0)
    if stamp_s is None:
        assert math.isnan(summary.call_times_s[0])
    else:
        assert summary.call_times_s[0] == pytest.approx(stamp_s, abs=1e-6)
    assert summary.has_timestamps is (stamp_s is not None)
    assert summary.unparsed_nccl_lines == 0


@pytest.mark.parametrize("case", COLL_CASES, ids=[c[0] for c in COLL_CASES])
def test_coll_message_without_its_prefix_still_counts(
    case: tuple[str, str, dict[str, object]],
) -> None:
    _, message, expected = case
    # Interleaved output can separate a message from its prefix: it is still a call.
    event = parse_line("[rank3]: " + message)
    _check_coll(event, expected)
    assert isinstance(event, CollLine)
    assert (event.host, event.pid, event.timestamp_s) == (None, None, None)


# -- bytes per op -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "factor"),
    [
        ("AllReduce", 1),
        ("Broadcast", 1),
        ("Reduce", 1),
        ("Send", 1),
        ("Recv", 1),
        ("AllGather", 8),
        ("ReduceScatter", 8),
        ("AlltoAll", 8),
        ("Gather", 8),
        ("Scatter", 8),
    ],
)
def test_s_bytes_multiplies_by_nranks_only_for_per_rank_ops(op: str, factor: int) -> None:
    event = parse_line(NCCL_PREFIX + coll_body(op, count=1000, dtype=9, nranks=8))
    assert isinstance(event, CollLine)
    assert event.s_bytes == 1000 * 2 * factor
    assert collective_bytes(op, 1000, 2, 8) == 1000 * 2 * factor


def test_collective_bytes_unknowns() -> None:
    assert collective_bytes("AllReduce", 10, None, 8) is None
    assert collective_bytes("AllGather", 10, 4, None) is None
    assert collective_bytes("AllReduce", 10, 4, None) == 40
    assert collective_bytes("FutureOp", 10, 4, 8) == 40  # unknown op: no factor guessed


def test_datatype_sizes_match_nccl_type_size() -> None:
    assert dict(DATATYPE_SIZES) == {
        0: 1,
        1: 1,
        2: 4,
        3: 4,
        4: 8,
        5: 8,
        6: 2,
        7: 4,
        8: 8,
        9: 2,
        10: 1,
        11: 1,
    }
    with pytest.raises(TypeError):
        DATATYPE_SIZES[12] = 4  # type: ignore[index]


def test_unknown_datatype_is_counted_without_bytes() -> None:
    line = NCCL_PREFIX + coll_body(count=100, dtype=12, nranks=8)
    event = parse_line(line)
    assert isinstance(event, CollLine)
    assert event.elem_size is None
    assert event.s_bytes is None
    acc = NcclLogAccumulator()
    acc.feed(line)
    acc.feed(NCCL_PREFIX + coll_body(count=100, dtype=7, nranks=8))
    summary = acc.summary()
    assert summary.collectives["AllReduce"].count == 2
    assert summary.collectives["AllReduce"].bytes == 400
    assert summary.unknown_datatype_calls == 1
    assert math.isnan(summary.call_bytes[0])
    assert summary.call_bytes[1] == 400.0


def test_unknown_op_is_counted_and_listed() -> None:
    acc = NcclLogAccumulator()
    for _ in range(3):
        acc.feed(NCCL_PREFIX + coll_body("FutureOp", count=10, dtype=7, nranks=8))
    acc.feed(NCCL_PREFIX + coll_body("AllReduce", count=10, dtype=7, nranks=8))
    summary = acc.summary()
    assert summary.collectives["FutureOp"].count == 3
    assert summary.collectives["FutureOp"].bytes == 3 * 40
    assert summary.unknown_ops == {"FutureOp": 3}
    assert "FutureOp" not in KNOWN_OPS


def test_nccl_2_3_5_lines_are_unknown_op_with_their_size() -> None:
    acc = NcclLogAccumulator()
    acc.feed(NCCL_PREFIX + COLL_CASES[-2][1])
    summary = acc.summary()
    assert summary.collectives == {UNKNOWN_OP: nccl_log.OpStats(count=1, bytes=4096)}
    assert summary.unknown_ops == {UNKNOWN_OP: 1}


# -- other line kinds ---------------------------------------------------------------------------

C = "0x55d0c6a3b2c0"
P = "0x55d0c6a39000"
INIT_CASES: list[tuple[str, str, dict[str, object]]] = [
    (
        "2.3.7",
        f"comm {C} rank 0 nranks 8 - COMPLETE",
        {"rank": 0, "nranks": 8, "cuda_dev": None, "bus_id": None, "phase": "COMPLETE"},
    ),
    (
        "2.4",
        f"comm {C} rank 1 nranks 8 cudaDev 1 nvmlDev 5 - Init COMPLETE",
        {"rank": 1, "cuda_dev": 1, "nvml_dev": 5, "bus_id": None, "phase": "COMPLETE"},
    ),
    (
        "2.5.6",
        f"comm {C} rank 2 nranks 8 cudaDev 2 busId 1b000 - Init COMPLETE",
        {"rank": 2, "cuda_dev": 2, "bus_id": "1b000", "comm_id": None},
    ),
    (
        "2.16",
        f"comm {C} rank 2 nranks 8 cudaDev 2 busId 1b000 commId 0x8f3a2b1c4d5e6f70 - Init COMPLETE",
        {"bus_id": "1b000", "comm_id": "8f3a2b1c4d5e6f70", "phase": "COMPLETE"},
    ),
    (
        "2.18.3-start",
        f"comm {C} rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId 0xabc - Init START",
        {"rank": 3, "nranks": 16, "phase": "START", "comm_id": "abc"},
    ),
    (
        "2.21-initrank",
        f"ncclCommInitRank comm {C} rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId "
        "5d000 commId 0xabc - Init COMPLETE",
        {"api": "ncclCommInitRank", "phase": "COMPLETE"},
    ),
    (
        "2.21-split",
        f"ncclCommSplit comm {C} rank 1 nranks 4 cudaDev 3 nvmlDev 3 busId 5d000 "
        f"parent {P} color 7 key 1 commId 0xdef - Init COMPLETE",
        {"api": "ncclCommSplit", "parent": P, "comm_id": "def", "nranks": 4},
    ),
    (
        "2.23-config",
        f"ncclCommInitRankConfig comm {C} rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
        "busId 18000 commId 0x1 - Init COMPLETE",
        {"api": "ncclCommInitRankConfig"},
    ),
    # 2.23 split START: "... key %d- Init START" (no blank before the dash, sic).
    (
        "2.23-split-start",
        f"ncclCommSplit comm {C} rank 1 nranks 4 cudaDev 3 nvmlDev 3 busId "
        f"5d000 parent {P} color 7 key 1- Init START",
        {"parent": P, "phase": "START"},
    ),
    (
        "2.24-split",
        f"ncclCommSplit comm {C} rank 1 nranks 4 cudaDev 3 nvmlDev 3 busId 5d000 "
        f"parent {P} splitCount 2 color 7 key 1 - Init COMPLETE",
        {"parent": P, "comm_id": None},
    ),
    (
        "2.29-split",
        f"ncclCommSplit comm {C} rank 1 nranks 4 cudaDev 3 nvmlDev 3 busId 5d000 "
        f"parent {P} childCount 2 color -1 key 1 - Init COMPLETE",
        {"parent": P},
    ),
    (
        "2.29-rank-start",
        f"[Rank 3] ncclCommInitRank comm {C} rank 3 nranks 16 cudaDev 3 "
        "nvmlDev 3 busId 5d000 commId 0xabc - Init START",
        {"rank": 3, "api": "ncclCommInitRank", "phase": "START", "comm_id": "abc"},
    ),
    # RCCL (rocm-5.x → develop) says how much memory the comm took before " - Init COMPLETE".
    (
        "rccl",
        f"comm {C} rank 0 nranks 8 cudaDev 0 busId c1000 commId 0x3f2a9c81d4e5b607 "
        "localSize 104 used 283115520 bytes - Init COMPLETE",
        {"rank": 0, "nranks": 8, "bus_id": "c1000", "comm_id": "3f2a9c81d4e5b607"},
    ),
    (
        "rccl-core",
        f"comm {C} rank 5 nranks 8 cudaDev 5 busId d1000 localSize 104 used 283115520 bytes "
        "on core 12 - Init COMPLETE",
        {"rank": 5, "nranks": 8, "phase": "COMPLETE"},
    ),
]


@pytest.mark.parametrize(
    ("case", "message", "expected"), INIT_CASES, ids=[c[0] for c in INIT_CASES]
)
@pytest.mark.parametrize("launcher", ["", "[rank0]:", "0: "], ids=repr)
def test_init_lines_of_every_version(
    case: str, message: str, expected: dict[str, object], launcher: str
) -> None:
    event = parse_line(launcher + "[2026-05-05 06:16:47.5] " + NCCL_PREFIX + message)
    assert isinstance(event, InitLine)
    assert event.comm == C
    assert event.host == HOST
    assert event.timestamp_s == pytest.approx(_T0 + 0.5)
    for name, value in expected.items():
        assert getattr(event, name) == value, name


def test_destroy_line_is_not_an_init_line() -> None:
    # 2.22+: "comm %p rank %d nranks %d cudaDev %d busId %lx - %s COMPLETE" (Destroy/Abort).
    event = parse_line(
        NCCL_PREFIX + f"comm {C} rank 1 nranks 8 cudaDev 1 busId 1b000 - Destroy COMPLETE"
    )
    assert isinstance(event, InfoLine)


def test_topology_line() -> None:
    event = parse_line(
        NCCL_PREFIX + f"comm {C} rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0"
    )
    assert event == TopologyLine(
        comm=C,
        rank=3,
        nranks=16,
        nnodes=2,
        local_ranks=8,
        local_rank=3,
        mnnvl=0,
        host=HOST,
        pid=PID,
        tid=TID,
        dev=DEV,
    )


@pytest.mark.parametrize(
    ("line", "version", "cuda", "host"),
    [
        ("NCCL version 2.18.3+cuda12.2", "2.18.3", "12.2", None),  # ≤2.21 bare printf
        ("[rank0]:NCCL version 2.14.3+cuda11.8", "2.14.3", "11.8", None),
        ("0: NCCL version 2.4.8+cuda10.1", "2.4.8", "10.1", None),
        (NCCL_PREFIX + "NCCL version 2.26.2+cuda12.2", "2.26.2", "12.2", HOST),  # 2.22+ INFO
        (
            "[2026-05-05 06:16:47] " + NCCL_PREFIX + "NCCL version 2.28.3+cuda12.8",
            "2.28.3",
            "12.8",
            HOST,
        ),
        ("NCCL version 2.19.3a0+cuda12.3", "2.19.3a0", "12.3", None),  # NCCL_SUFFIX
    ],
)
def test_version_banner(line: str, version: str, cuda: str, host: str | None) -> None:
    event = parse_line(line)
    assert isinstance(event, VersionLine)
    assert (event.version, event.cuda, event.host) == (version, cuda, host)


def test_git_version_line_is_not_the_banner() -> None:
    # 2.29+ prints "NCCL git version <branch> <describe>" after the banner.
    assert isinstance(parse_line(NCCL_PREFIX + "NCCL git version master v2.29.2-1-g1234"), InfoLine)
    # RCCL's banner is RCCL's, never taken for an NCCL version.
    rccl = parse_line("RCCL version 2.18.3+hip6.0")
    assert isinstance(rccl, VersionLine)
    assert (rccl.library, rccl.version, rccl.cuda) == ("RCCL", "2.18.3", None)


@pytest.mark.parametrize(
    ("line", "version", "host"),
    [
        # Real banners (ROCm/ROCm#6074, ROCm/rccl-tests#163): an INFO record and the bare print.
        (
            "TARS:829507:829507 [0] NCCL INFO RCCL version : 2.27.7-HEAD:0d2c4fd",
            "2.27.7-HEAD",
            "TARS",
        ),
        ("RCCL version : 2.21.5-HEAD:9a0e6a1", "2.21.5-HEAD", None),
        ("RCCL version 2.6.4+hip3.5", "2.6.4", None),  # before ROCm 5 (ROCm/rccl#212)
    ],
)
def test_rccl_version_banner(line: str, version: str, host: str | None) -> None:
    event = parse_line(line)
    assert isinstance(event, VersionLine)
    assert (event.library, event.version, event.cuda, event.host) == ("RCCL", version, None, host)


def test_an_rccl_log_reports_its_library_and_version(tmp_path: Path) -> None:
    """The start of a real RCCL 2.27.7 job's log (ROCm/ROCm#6074): the version is RCCL's."""
    path = tmp_path / "rccl.log"
    path.write_text(
        "TARS:829507:829507 [0] NCCL INFO RCCL version : 2.27.7-HEAD:0d2c4fd\n"
        "HIP version  : 7.2.26015-fc0010cf6a\n"
        "TARS:829507:829507 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7973d6e00400 recvbuff "
        "0x7973d6e00400 acc (nil) count 1 datatype 7 op 0 root 0 comm 0x2bc1f840 [nranks=2] "
        "stream (nil) task 0 globalrank 0\n"
    )
    summary = read_nccl_log(path)
    assert (summary.library, summary.version) == ("RCCL", "2.27.7-HEAD")
    assert summary.collectives["AllReduce"].count == 1


# RCCL of 2019 (ROCm 2.x) printed the time in µs since the epoch after the device; the line is
# the one ROCm's rocm-timeline-generator.py quotes ("RCCL non-standard timestamps"), its comm
# pointer rejoined to the line it was wrapped from.
_RCCL_2019 = (
    "rocm-framework-3:24888:25056 [1] {stamp} NCCL INFO AllReduce: opCount {op:x} sendbuff "
    "0x7f80b54bad00 recvbuff 0x7f81cce12200 count 1001 datatype 7 op 0 root 0 comm "
    "0x7f80467b9770 [nranks=2] stream 0x7f804680c090"
)


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        ("1558545003174220", 1558545003.17422),  # µs, as that RCCL printed it
        ("1558545003174", 1558545003.174),  # ms
        ("1558545003174220123", 1558545003.174220123),  # ns
        ("1558545003", 1558545003.0),  # s
    ],
)
def test_rccl_2019_epoch_stamp_after_the_device_is_the_time(stamp: str, seconds: float) -> None:
    """The stamp used to cost the line its host, pid and time (it was read as prefix-less)."""
    event = parse_line(_RCCL_2019.format(stamp=stamp, op=1))
    assert isinstance(event, CollLine)
    assert (event.host, event.pid, event.tid, event.dev) == ("rocm-framework-3", 24888, 25056, 1)
    assert event.timestamp_s == pytest.approx(seconds, abs=1e-6)
    assert event.s_bytes == 4004


def test_an_rccl_2019_log_gives_its_call_times_and_step(tmp_path: Path) -> None:
    """Three AllReduces a 0.25 s step, µs stamps: the file and the live decoder time every call,
    and the step is read from the log alone."""
    t0 = 1_558_545_003_174_220
    times = [t0 + round(1e6 * (0.25 * k + 0.01 * j)) for k in range(80) for j in range(3)]
    lines = [_RCCL_2019.format(stamp=t, op=i) for i, t in enumerate(times)]
    path = tmp_path / "rccl-2019.log"
    path.write_text("\n".join(lines) + "\n")
    summary = read_nccl_log(path)
    assert summary.collectives["AllReduce"].count == len(times)
    assert np.allclose(summary.call_times_s, np.array(times) / 1e6, rtol=0, atol=2e-6)
    stamps, kinds = LiveDecoder().decode_chunks(["\n".join(lines) + "\n"])
    assert kinds.size == len(times)
    assert np.allclose(stamps, np.array(times) / 1e6, rtol=0, atol=2e-6)
    from agent.analyze import analyze_files

    est = analyze_files(nccl_logs=[path]).estimate
    assert est.period_s == pytest.approx(0.25, rel=0.01)


# RCCL's own op names, in lines built from its format strings (ROCm/rccl src/collectives.cc,
# src/misc/msccl/msccl_lifecycle.cc: "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype
# %d op %d root %d comm %p [nranks=%d] stream %p task %d globalrank %d"); no public log has them.
_RCCL_COLL = (
    NCCL_PREFIX + "{op}: opCount 0 sendbuff 0x7f0000000000 recvbuff 0x7f0000100000 count 1024 "
    "datatype 7 op 0 root 0 comm 0x55d4c0a0b0c0 [nranks=8] stream 0x55d4c0a0b0d0 task 0 "
    "globalrank 3"
)


@pytest.mark.parametrize(
    ("logged", "op", "s_bytes"),
    [
        ("mscclFuncAllGather", "AllGather", 1024 * 4 * 8),  # MSCCL is on by default
        ("mscclFuncReduceScatter", "ReduceScatter", 1024 * 4 * 8),
        ("mscclFuncAllReduce", "AllReduce", 1024 * 4),
        ("mscclFuncAllToAll", "AlltoAll", 1024 * 4 * 8),
        ("AllToAllPivot", "AlltoAll", 1024 * 4 * 8),  # count per peer
        ("mscclpp_ncclAllReduce", "AllReduce", 1024 * 4),  # MSCCL++: was dropped
        ("mscclpp_ncclAllGather", "AllGather", 1024 * 4 * 8),
    ],
)
def test_rccl_op_names_are_nccls(logged: str, op: str, s_bytes: int, tmp_path: Path) -> None:
    """An MSCCL AllGather counted 8 times too few bytes as an unknown op; the per-line, the
    live and the bulk decoders all read it as NCCL's op now."""
    line = _RCCL_COLL.format(op=logged)
    event = parse_line(line)
    assert isinstance(event, CollLine)
    assert (event.op, event.s_bytes) == (op, s_bytes)
    live = LiveDecoder().decode(line)
    assert [(c.op, c.s_bytes) for c in live] == [(op, s_bytes)]
    path = tmp_path / "rccl.log"
    path.write_text((line + "\n") * 3)
    summary = read_nccl_log(path)
    assert summary.collectives[op].count == 3
    assert summary.collectives[op].bytes == 3 * s_bytes
    assert summary.unknown_ops == {}


@pytest.mark.parametrize(
    ("line", "text", "source", "function", "stamp"),
    [
        # 2.3 → 2.30.4: "\n%s:%d:%d [%d] %s:%d NCCL WARN "
        (
            f"{HOST}:{PID}:{TID} [{DEV}] transport/net_ib.cc:1234 NCCL WARN "
            "NET/IB : Got completion with error 12",
            "NET/IB : Got completion with error 12",
            "transport/net_ib.cc:1234",
            None,
            None,
        ),
        # 2.26+ default timestamp on WARN (NVIDIA docs sample).
        (
            f"[2026-05-05 06:16:47] {HOST}:{PID}:{TID} [{DEV}] plugin/net.cc:334 NCCL WARN "
            "Failed to initialize any NET plugin",
            "Failed to initialize any NET plugin",
            "plugin/net.cc:334",
            None,
            float(_T0),
        ),
        # A WARN that mentions opCount is still a WARN (src/proxy.cc).
        (
            f"{HOST}:{PID}:{TID} [{DEV}] proxy.cc:530 NCCL WARN Unable to post incomplete proxy "
            "op chain 0..3 (opCount 12)",
            "Unable to post incomplete proxy op chain 0..3 (opCount 12)",
            "proxy.cc:530",
            None,
            None,
        ),
        # 2.30.7+: "[%d] %s:%d (%s) NCCL WARN %s" after host:pid:tid (src/debug.cc @ v2.30.7-1).
        (
            f"[1,0]<stdout>:{HOST}:{PID}:{TID} [{DEV}] plugin/net.cc:334 (ncclNetPluginLoad) NCCL "
            "WARN Failed to initialize any NET plugin",
            "Failed to initialize any NET plugin",
            "plugin/net.cc:334",
            "ncclNetPluginLoad",
            None,
        ),
    ],
)
def test_warn_lines(
    line: str, text: str, source: str, function: str | None, stamp: float | None
) -> None:
    event = parse_line(line)
    assert isinstance(event, WarnLine)
    assert (event.text, event.source, event.function, event.timestamp_s) == (
        text,
        source,
        function,
        stamp,
    )
    assert (event.host, event.pid, event.tid, event.dev) == (HOST, PID, TID, DEV)


@pytest.mark.parametrize(
    ("message", "devices", "ro", "oob_if", "oob"),
    [
        # 2.12+ "NET/IB : Using%s %s; OOB %s:%s" with [RO] (a real log's NIC list).
        (
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE [RO]; OOB "
            "eno1np0:172.18.62.6<0>",
            (("mlx5_0", 1, "IB"), ("mlx5_1", 1, "IB"), ("mlx5_2", 1, "RoCE")),
            True,
            "eno1np0",
            "172.18.62.6<0>",
        ),
        # 2.12+ without relaxed ordering: the second %s is empty.
        (
            "NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>",
            (("mlx5_0", 1, "RoCE"),),
            False,
            "eth0",
            "10.0.0.1<0>",
        ),
        # 2.4–2.11 "NET/IB : Using%s ; OOB %s:%s".
        (
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:2/IB ; OOB ib0:192.168.1.2<0>",
            (("mlx5_0", 1, "IB"), ("mlx5_3", 2, "IB")),
            False,
            "ib0",
            "192.168.1.2<0>",
        ),
        # master: optional ":rail" / ":plane" before the link layer, UNSPECIFIED, IPv6 OOB.
        (
            "NET/IB : Using [0]mlx5_0:1:0/IB [1]mlx5_1:1::1/RoCE [2]mlx5_2:1/UNSPECIFIED [RO]; "
            "OOB eth0:fe80::1%eth0<0>",
            (("mlx5_0", 1, "IB"), ("mlx5_1", 1, "RoCE"), ("mlx5_2", 1, "UNSPECIFIED")),
            True,
            "eth0",
            "fe80::1%eth0<0>",
        ),
    ],
)
def test_net_ib_device_list(
    message: str, devices: tuple[tuple[str, int, str], ...], ro: bool, oob_if: str, oob: str
) -> None:
    event = parse_line("[rank0]:" + NCCL_PREFIX + message)
    assert isinstance(event, NetLine)
    assert event.network == "IB"
    assert event.devices == devices
    assert event.relaxed_ordering is ro
    assert (event.oob_interface, event.oob) == (oob_if, oob)


def test_net_ib_device_list_cut_at_1023_bytes() -> None:
    # Up to 2.28 NCCL builds the line in a 1024-byte buffer; a long NIC list loses its tail.
    devices = "".join(f" [{i}]mlx5_{i}:1/RoCE" for i in range(64))
    line = (NCCL_PREFIX + "NET/IB : Using" + devices + " [RO]; OOB eth0:10.0.0.1<0>")[:1023]
    event = parse_line(line)
    assert isinstance(event, NetLine)
    assert event.oob is None
    assert 40 < len(event.devices) < 64
    assert event.devices[-1] == (f"mlx5_{len(event.devices) - 1}", 1, "RoCE")


@pytest.mark.parametrize("name", ["IB", "Socket", "IBext_v8", "AWS Libfabric"])
def test_using_network(name: str) -> None:
    event = parse_line(NCCL_PREFIX + f"Using network {name}")
    assert event == NetLine(network=name, host=HOST, pid=PID, tid=TID, dev=DEV)


def test_other_info_lines_are_info_lines() -> None:
    message = "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"
    assert parse_line(NCCL_PREFIX + message) == InfoLine(
        text=message, host=HOST, pid=PID, tid=TID, dev=DEV
    )


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Epoch 3 | loss 1.234 | elapsed time per iteration (ms): 306.5",
        "[56]",  # what a launcher makes of the empty line before every WARN
        f"{HOST}:{PID}:{TID} NCCL CALL ncclAllReduce(7f00,7f00,10,7,0,0,{COMM},{STREAM})",
        f"{HOST}:{PID}:{TID} [0] 12.345000 enqueue.cc:100 NCCL TRACE something",
        "NCCL INFO without any prefix",
    ],
)
def test_non_nccl_lines(line: str) -> None:
    assert parse_line(line) is None
    assert parse_records(line) == []


# -- glued and broken lines ---------------------------------------------------------------------


def test_glued_info_and_coll_record_finds_the_coll() -> None:
    line = (
        NCCL_PREFIX
        + "Channel 00/02 : 0 1 2 3 "
        + "h2:5:6 [1] NCCL INFO "
        + coll_body("AllGather", count=4, dtype=7, nranks=4)
    )
    event = parse_line(line)
    assert isinstance(event, CollLine)
    assert (event.op, event.host, event.pid, event.s_bytes) == ("AllGather", "h2", 5, 64)
    records = parse_records(line)
    assert [type(r) for r in records] == [InfoLine, CollLine]


def test_two_glued_coll_records_are_both_counted() -> None:
    first = NCCL_PREFIX + coll_body(count=4, dtype=7, nranks=4)
    second = "[default1]:h2:5:6 [1] NCCL INFO " + coll_body("AllGather", count=4, dtype=7, nranks=4)
    acc = NcclLogAccumulator()
    acc.feed(first + second)
    acc.feed(first + " " + second)
    summary = acc.summary()
    assert summary.collectives["AllReduce"].count == 2
    assert summary.collectives["AllGather"].count == 2
    assert summary.collectives["AllGather"].bytes == 2 * 64
    assert summary.nccl_lines == 2


def test_a_record_glued_with_no_blank_keeps_its_own_host() -> None:
    # The previous record ends in a pointer or a float, and the next starts right after it:
    # a host (gethostname() cut at its first '.') holds neither, so they are not its name.
    info = NCCL_PREFIX + "AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008"
    coll = NCCL_PREFIX + coll_body(count=4, dtype=7, nranks=4)
    init = NCCL_PREFIX + f"comm {COMM} rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE"
    for line in (info + coll, coll + coll, init + coll):
        records = parse_records(line)
        assert [r.host for r in records] == [HOST, HOST]
        acc = NcclLogAccumulator()
        acc.feed(line)
        assert {c.host for c in acc.summary().comms.values()} == {HOST}
    event = parse_line(info + coll)
    assert isinstance(event, CollLine)
    assert (event.host, event.pid) == (HOST, PID)


def test_a_glued_record_whose_host_starts_with_hex_letters_keeps_its_process() -> None:
    """``stream 0x7f00aadgx-a100-01:11:11 [1]``: the pointer's hex cannot be told from a host
    that starts with a-f (dgx-, a100-, b200-), and "gx-a100-01" made a process of its own. The
    host that pid was seen on, which ends with it, is the host."""

    def coll(rank: int) -> str:
        return (
            f"dgx-a100-01:{10 + rank}:{10 + rank} [{rank}] NCCL INFO AllReduce: opCount 0 "
            "sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 count 1000 datatype 7 op 0 root 0 "
            f"comm 0x55{rank:08x} [nranks=2] stream 0x7f00aa"
        )

    acc = NcclLogAccumulator()
    for line in (coll(0), coll(1), coll(0) + coll(1)):
        acc.feed(line)
    summary = acc.summary()
    assert summary.hosts == ("dgx-a100-01",)
    assert {(c.host, c.pid) for c in summary.comms.values()} == {
        ("dgx-a100-01", 10),
        ("dgx-a100-01", 11),
    }
    assert summary.calls_total == 4


def test_a_line_stamped_before_its_launcher_tag_takes_that_time() -> None:
    # `kubectl logs --timestamps` of a torchrun job: the stamp starts the line, the tag follows.
    line = "2026-05-05T06:16:47.25Z [rank0]:" + NCCL_PREFIX + coll_body(nranks=4)
    event = parse_line(line)
    assert isinstance(event, CollLine)
    assert event.timestamp_s == pytest.approx(_T0 + 0.25, abs=1e-6)
    assert [r.timestamp_s for r in parse_records(line)] == [event.timestamp_s]
    acc = NcclLogAccumulator()
    acc.feed(line)
    assert acc.summary().call_times_s.tolist() == [event.timestamp_s]
    # NCCL's own stamp, when the record has one, wins over the launcher's.
    own = "2026-05-05T06:16:50Z [rank0]:[2026-05-05 06:16:47.5] " + NCCL_PREFIX + coll_body()
    event = parse_line(own)
    assert isinstance(event, CollLine)
    assert event.timestamp_s == pytest.approx(_T0 + 0.5, abs=1e-6)


def test_coloured_level_and_init_lines_decode_as_plain_ones() -> None:
    init = f"comm {COMM} rank 1 nranks 4 cudaDev 1 busId 1b000 - Init COMPLETE"
    for text in (init, coll_body(nranks=4)):
        plain = NCCL_PREFIX + text
        coloured = f"{HOST}:{PID}:{TID} [{DEV}] \x1b[1;34mNCCL INFO\x1b[0m {text}\x1b[0m"
        assert parse_records(coloured) == parse_records(plain)
        assert parse_line(coloured) == parse_line(plain)


def test_bare_coll_glued_before_a_prefixed_record() -> None:
    line = coll_body(count=4, dtype=7, nranks=4) + NCCL_PREFIX + "Using network IB"
    records = parse_records(line)
    assert [type(r) for r in records] == [CollLine, NetLine]
    assert isinstance(records[0], CollLine)
    assert records[0].host is None


def test_truncated_coll_line_is_unparsed() -> None:
    line = NCCL_PREFIX + "AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f"
    assert parse_line(line) is None
    acc = NcclLogAccumulator()
    acc.feed(line)
    acc.feed("junk NCCL WARN junk")
    acc.feed("not nccl")
    summary = acc.summary()
    assert summary.unparsed_nccl_lines == 2
    assert summary.nccl_lines == 0
    assert summary.lines_total == 3
    assert summary.calls_total == 0


def test_long_lines_are_parsed_in_linear_time() -> None:
    # Patterns that make a naive regex search quadratic: long runs of host or digit chars.
    for junk in ("a" * 400_000, "1:" * 200_000, "[" * 400_000, "a" * 400_000 + ": opCount "):
        start = time.perf_counter()
        assert parse_line(junk + " NCCL INFO " + junk) is None
        NcclLogAccumulator().feed(junk + " NCCL WARN opCount " + junk)
        assert time.perf_counter() - start < 5.0
    event = parse_line("x" * 100_000 + " " + NCCL_PREFIX + coll_body())
    assert isinstance(event, CollLine)


def test_timestamp_parsing() -> None:
    assert parse_timestamp("2026-05-05 06:16:47") == _T0
    assert parse_timestamp("2026-05-05 06:16:47.5") == _T0 + 0.5
    new_year = calendar.timegm((2027, 1, 1, 0, 0, 0, 0, 0, 0))
    assert parse_timestamp("2026-12-31 23:59:60") == new_year
    assert parse_timestamp("2026-13-05 06:16:47") is None
    assert parse_timestamp("2026-02-30 06:16:47.1") is None
    assert parse_timestamp("garbage") is None
    assert parse_timestamp("2026-05-05 06:16:47.x") is None


@pytest.mark.parametrize("digits", [10, 400, 5000])
def test_overlong_timestamp_fraction(digits: int) -> None:
    # NCCL prints at most 9 fractional digits; more must not overflow int() or 10.0**n.
    line = f"[2026-05-05 06:16:47.{'1' * digits}] " + NCCL_PREFIX + coll_body()
    event = parse_line(line)
    assert isinstance(event, CollLine)
    assert event.timestamp_s == pytest.approx(_T0 + 0.111111111, abs=1e-6)
    acc = NcclLogAccumulator()
    acc.feed(line)
    assert acc.summary().call_times_s[0] == pytest.approx(_T0 + 0.111111111, abs=1e-6)


def test_impossible_timestamp_gives_no_time() -> None:
    event = parse_line("[2026-02-30 06:16:47.1] " + NCCL_PREFIX + coll_body())
    assert isinstance(event, CollLine)
    assert event.timestamp_s is None
    acc = NcclLogAccumulator()
    acc.feed("[2026-02-30 06:16:47.1] " + NCCL_PREFIX + coll_body())
    assert math.isnan(acc.summary().call_times_s[0])


# -- properties ---------------------------------------------------------------------------------

_VALID = "[2026-05-05 06:16:47.123456] " + NCCL_PREFIX + coll_body()


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_parse_line_never_raises_on_text(text: str) -> None:
    parse_line(text)
    parse_records(text)
    NcclLogAccumulator().feed(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_parse_line_never_raises_on_binary_junk(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    parse_line(text)
    parse_line(NCCL_PREFIX + text)
    parse_line(_VALID[:40] + text + _VALID[40:])
    acc = NcclLogAccumulator()
    acc.feed(text)
    acc.feed(NCCL_PREFIX + "AllReduce: opCount " + text)
    acc.summary()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, len(_VALID)),
    st.integers(0, len(_VALID)),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
)
def test_mutated_valid_lines_never_raise(cut: int, at: int, insert: str) -> None:
    line = _VALID[:cut]
    line = line[:at] + insert + line[at:]
    parse_line(line)
    acc = NcclLogAccumulator()
    acc.feed(line)
    summary = acc.summary()
    assert summary.lines_total == 1


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from([*sorted(KNOWN_OPS), "AllToAllPivot"]),
    count=st.integers(0, 2**40),
    dtype=st.integers(0, 14),
    nranks=st.integers(1, 100_000),
    launcher=st.sampled_from(LAUNCHERS),
    stamp=st.sampled_from([t for t, _ in TIMESTAMPS]),
    rccl=st.booleans(),
)
def test_fast_path_agrees_with_parse_line(
    *, op: str, count: int, dtype: int, nranks: int, launcher: str, stamp: str, rccl: bool
) -> None:
    line = launcher + stamp + NCCL_PREFIX + coll_body(op, count=count, dtype=dtype, nranks=nranks)
    if rccl:
        line += " task 3 globalrank 7"
    event = parse_line(line)
    assert isinstance(event, CollLine)
    acc = NcclLogAccumulator()
    acc.feed(line)
    acc.feed(line)
    summary = acc.summary()
    assert summary.collectives[canonical_op(op)].count == 2
    assert summary.collectives[canonical_op(op)].bytes == 2 * (event.s_bytes or 0)
    assert summary.unknown_datatype_calls == (2 if event.elem_size is None else 0)
    assert summary.nranks == nranks
    if event.s_bytes is None:
        assert np.isnan(summary.call_bytes).all()
    else:
        assert summary.call_bytes.tolist() == [float(event.s_bytes)] * 2


# -- accumulator --------------------------------------------------------------------------------


def test_empty_summary() -> None:
    summary = NcclLogAccumulator().summary()
    assert summary.collectives == {}
    assert summary.nranks is None
    assert summary.call_times_s.shape == (0,)
    assert summary.call_bytes.dtype == np.float64
    assert summary.call_peers.shape == (0,)
    assert summary.call_peers.dtype == np.int32
    assert summary.call_ops == []
    assert summary.comms == {}
    assert summary.version is None
    assert summary.has_timestamps is False


def test_accumulator_joins_comms_and_collects_metadata() -> None:
    other = "node-01:189885:189885 [4] NCCL INFO "
    comm2 = "0x55d0c6a3b2c0"
    lines = [
        "NCCL version 2.18.3+cuda12.2",
        NCCL_PREFIX + "NCCL version 2.26.2+cuda12.2",  # the first version seen wins
        NCCL_PREFIX + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>",
        NCCL_PREFIX + "Using network IB",
        NCCL_PREFIX + f"comm {COMM} rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId "
        "0xabc - Init START",
        NCCL_PREFIX + f"comm {COMM} rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
        NCCL_PREFIX + f"comm {COMM} rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId "
        "0xabc - Init COMPLETE",
        other + f"ncclCommSplit comm {comm2} rank 0 nranks 4 cudaDev 4 nvmlDev 4 busId 9a000 "
        f"parent {P} splitCount 1 color 0 key 0 - Init COMPLETE",
        "",
        f"[2026-05-05 06:16:47] {HOST}:{PID}:{TID} [{DEV}] misc/socket.cc:1 NCCL WARN oops",
        NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16),
        other + coll_body("AllGather", count=10, dtype=7, nranks=4).replace(COMM, comm2),
        NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16),
    ]
    acc = NcclLogAccumulator()
    for line in lines:
        acc.feed(line)
    s = acc.summary()
    assert (s.version, s.cuda) == ("2.18.3", "12.2")
    assert s.warn_count == 1
    assert s.networks == ("IB",)
    assert s.ib_devices == (("mlx5_0", 1, "IB"), ("mlx5_1", 1, "IB"))
    assert s.nranks == 16
    assert s.hosts == (HOST,)
    assert s.pids == (PID, 189885)
    assert s.lines_total == len(lines)
    assert s.nccl_lines == len(lines) - 1
    assert s.unparsed_nccl_lines == 0
    assert s.collectives == {
        "AllReduce": nccl_log.OpStats(count=2, bytes=80),
        "AllGather": nccl_log.OpStats(count=1, bytes=160),
    }
    assert s.call_ops == ["AllReduce", "AllGather", "AllReduce"]
    assert s.call_bytes.tolist() == [40.0, 160.0, 40.0]
    assert len(s.comms) == 2
    main = s.comms[(HOST, PID, COMM)]
    assert (main.rank, main.nranks, main.comm_id, main.bus_id, main.cuda_dev) == (
        3,
        16,
        "abc",
        "5d000",
        3,
    )
    assert (main.nnodes, main.local_ranks, main.local_rank) == (2, 8, 3)
    assert main.init_complete
    assert main.calls == 2
    split = s.comms[(HOST, 189885, comm2)]
    assert (split.rank, split.nranks, split.calls, split.comm_id) == (0, 4, 1, None)
    assert [s.comm_keys[i] for i in s.call_comm_ids] == [
        (HOST, PID, COMM),
        (HOST, 189885, comm2),
        (HOST, PID, COMM),
    ]


def test_same_comm_pointer_in_two_processes_is_two_comms() -> None:
    acc = NcclLogAccumulator()
    acc.feed("a:1:1 [0] NCCL INFO " + coll_body(count=1, dtype=7, nranks=2))
    acc.feed("a:2:2 [1] NCCL INFO " + coll_body(count=1, dtype=7, nranks=2))
    acc.feed("b:1:1 [0] NCCL INFO " + coll_body(count=1, dtype=7, nranks=2))
    assert len(acc.summary().comms) == 3


def test_feeding_continues_after_summary() -> None:
    acc = NcclLogAccumulator()
    acc.feed(NCCL_PREFIX + coll_body(count=1, dtype=7, nranks=2))
    first = acc.summary()
    acc.feed(NCCL_PREFIX + coll_body(count=1, dtype=7, nranks=2))
    second = acc.summary()
    assert first.calls_total == 1
    assert first.call_bytes.shape == (1,)
    assert second.calls_total == 2
    assert second.collectives["AllReduce"].count == 2


def test_timestamps_across_second_boundaries() -> None:
    acc = NcclLogAccumulator()
    times = [_T0 + k * 0.3 for k in range(40)]
    for t in times:
        whole = int(t)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole))
        micros = round((t - whole) * 1e6)
        acc.feed(f"[{stamp}.{micros:06d}] " + NCCL_PREFIX + coll_body())
    got = acc.summary().call_times_s
    assert np.allclose(got, times, rtol=0, atol=1.5e-6)


# -- reader -------------------------------------------------------------------------------------


def test_read_nccl_log(tmp_path: Path) -> None:
    path = tmp_path / "nccl.host.1.log"
    body = (
        b"NCCL version 2.18.3+cuda12.2\r\n"
        + (NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16)).encode()
        + b"\r\n"
        + b"\xff\xfe binary \x00 junk\n"
        + b"\n"
        + (NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16)).encode()  # no final newline
    )
    path.write_bytes(body)
    s = read_nccl_log(path)
    assert s.collectives["AllReduce"] == nccl_log.OpStats(count=2, bytes=80)
    assert s.version == "2.18.3"
    assert s.lines_total == 5
    assert s.comms[(HOST, PID, COMM)].nranks == 16


def test_read_nccl_log_skips_overlong_lines(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    good = NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16)
    path.write_text(
        good + "\n" + "x" * 5000 + good + "\n" + good + "\n" + "y" * 3000, encoding="utf-8"
    )
    s = read_nccl_log(path, max_line_bytes=1000)
    assert s.collectives["AllReduce"].count == 2
    assert s.overlong_lines == 2
    assert s.unparsed_nccl_lines == 2
    assert s.lines_total == 4


def test_read_nccl_log_large_file_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    good = NCCL_PREFIX + coll_body(count=10, dtype=7, nranks=16)
    n = 3 * (1 << 20) // len(good) + 7  # spans several read chunks
    path.write_text((good + "\n") * n, encoding="utf-8")
    s = read_nccl_log(path)
    assert s.collectives["AllReduce"].count == n
    assert s.lines_total == n


def test_read_nccl_log_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.log"
    with pytest.raises(InputFormatError) as info:
        read_nccl_log(path)
    assert info.value.path == path
    assert str(path) in str(info.value)
    assert "cannot read" in str(info.value)


def test_read_nccl_log_directory(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError) as info:
        read_nccl_log(tmp_path)
    assert info.value.path == tmp_path
    assert "directory" in str(info.value)


def test_read_nccl_log_without_nccl_lines(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("epoch 1 loss 3.2\nepoch 2 loss 2.9\n", encoding="utf-8")
    with pytest.raises(InputFormatError) as info:
        read_nccl_log(path)
    assert info.value.path == path
    assert "no NCCL lines found" in str(info.value)
    assert "NCCL_DEBUG=INFO" in str(info.value)


def test_read_nccl_log_with_only_broken_nccl_lines(tmp_path: Path) -> None:
    path = tmp_path / "broken.log"
    path.write_text(NCCL_PREFIX + "AllReduce: opCount 1 sendbuff 0x7f\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match="could not be decoded"):
        read_nccl_log(path)


def test_read_nccl_logs_combines_files_and_skips_one_without_nccl_lines(tmp_path: Path) -> None:
    """A rank's empty log in a glob of per-rank files cost the others theirs (no output at
    all); it is skipped and named, and only a set of files none of which holds an NCCL line
    is an error."""
    a, b, bad = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "bad.log"
    a.write_text(NCCL_PREFIX + coll_body(count=1, dtype=7, nranks=2) + "\n", encoding="utf-8")
    b.write_text(
        "h2:7:7 [0] NCCL INFO " + coll_body("AllGather", count=1, dtype=7, nranks=8) + "\n",
        encoding="utf-8",
    )
    bad.write_text("nothing here\n", encoding="utf-8")
    s = read_nccl_logs([a, b])
    assert s.call_ops == ["AllReduce", "AllGather"]
    assert s.nranks == 8
    assert s.hosts == (HOST, "h2")
    assert s.skipped_files == ()
    both = read_nccl_logs([a, bad, b])
    assert both.call_ops == ["AllReduce", "AllGather"]
    assert len(both.skipped_files) == 1
    assert str(bad) in both.skipped_files[0]
    assert "no NCCL lines found" in both.skipped_files[0]
    empty = tmp_path / "empty.log"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(InputFormatError) as info:
        read_nccl_logs([bad, empty])
    assert info.value.path == bad
    with pytest.raises(InputFormatError, match="directory"):
        read_nccl_logs([a, tmp_path])  # a file that cannot be read at all is still an error


def test_public_names_are_exported() -> None:
    for name in nccl_log.__all__:
        assert hasattr(nccl_log, name), name
    defined_here = {
        name
        for name, obj in vars(nccl_log).items()
        if not name.startswith("_") and getattr(obj, "__module__", None) == nccl_log.__name__
    }
    assert defined_here <= set(nccl_log.__all__)


def test_live_decoder_agrees_with_parse_records_on_coll_lines() -> None:
    from collectors.nccl_log import LiveDecoder, parse_records

    lines = [
        "[2026-05-05 06:16:47.123456] node-01:189884:189884 [3] NCCL INFO AllGather: opCount 1a "
        "sendbuff 0x7f0000 recvbuff 0x7f0000 count 1024 datatype 9 op 0 root 0 comm 0x55aa "
        "[nranks=8] stream 0x55bb",
        "[rank0]:node-01:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 "
        "count 7382228 datatype 7 op 0 root 0 comm 0x78cf [nranks=128] stream (nil)",
        "node-01:1:1 [0] NCCL INFO Send: opCount 3 sendbuff (nil) recvbuff 0x2 count 10 "
        "datatype 99 op 0 root 5 comm 0x9 [nranks=2] stream 0x3",
        "node-01:1:2 [0] NCCL INFO Init COMPLETE",
        "\nnode-01:1:1 [0] misc/x.cc:12 NCCL WARN something broke",
        "epoch 3 loss 0.1",
    ]
    decoder = LiveDecoder()
    for line in lines:
        fast = decoder.decode(line)
        slow = [e for e in parse_records(line) if type(e).__name__ == "CollLine"]
        assert len(fast) == len(slow)
        for f, s in zip(fast, slow, strict=True):
            assert (f.op, f.s_bytes, f.nranks, f.comm) == (s.op, s.s_bytes, s.nranks, s.comm)
            assert f.peer == (s.root if s.op in ("Send", "Recv") else -1)
            assert f.process == f"{s.host}:{s.pid}"
            assert (f.timestamp_s is None) == (s.timestamp_s is None)
            if f.timestamp_s is not None:
                assert f.timestamp_s == pytest.approx(s.timestamp_s, abs=1e-6)
    assert decoder.warn_lines == 1


_COLL_MSG = (
    "NCCL INFO {op}: opCount {oc:x} sendbuff 0x7f0000 recvbuff 0x7f0000 count {count} datatype "
    "{dt} op 0 root {root} comm 0x55aa{comm:x} [nranks={n}] stream 0x55bb"
)


@given(
    launcher=st.sampled_from(["", "[rank3]:", "[default0]:", "3: ", "[1,0]<stdout>:",
                              "(RayTrainWorker pid=12, ip=10.0.0.1) ", "junk opCount ", "x y "]),
    stamp=st.sampled_from(["", "[2026-05-05 06:16:47] ", "[2026-05-05 06:16:47.123456] "]),
    op=st.sampled_from(["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Send", "Recv",
                        "Foo"]),
    count=st.integers(0, 2**40),
    root=st.integers(-1, 4096),
    dt=st.integers(0, 12),
    n=st.integers(1, 4096),
    comm=st.integers(0, 255),
    suffix=st.sampled_from(["", " task 3 globalrank 7", " NCCL INFO x", " opCount 1"]),
)  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_live_fast_path_agrees_with_the_full_parser(
    launcher: str,
    stamp: str,
    op: str,
    count: int,
    root: int,
    dt: int,
    n: int,
    comm: int,
    suffix: str,
) -> None:
    """The live decoder's fast path takes a line only when the full parser reads the same
    single record from it; everything else goes to the full parser."""
    from collectors.nccl_log import LiveDecoder, parse_records

    msg = _COLL_MSG.format(op=op, oc=7, count=count, root=root, dt=dt, comm=comm, n=n)
    line = f"{launcher}{stamp}gpu-07:4242:4243 [3] {msg}{suffix}"
    decoder = LiveDecoder()
    fast = decoder.fast(line)
    slow = [e for e in parse_records(line) if type(e).__name__ == "CollLine"]
    got = LiveDecoder().decode(line)
    peer = root if op in ("Send", "Recv") else -1
    assert [(c.op, c.s_bytes, c.nranks, c.comm, c.process, c.peer) for c in got] == [
        (s.op, s.s_bytes, s.nranks, s.comm, f"{s.host}:{s.pid}", peer) for s in slow
    ]
    if fast is not None:
        (record,) = slow
        assert fast[1:] == (record.op, record.s_bytes, record.nranks, record.comm,
                            f"{record.host}:{record.pid}", peer)  # fmt: skip
        assert (fast[0] is None) == (record.timestamp_s is None)


def test_nccl_2_4_2_allocation_lines_join_each_comm_to_its_rank(tmp_path: Path) -> None:
    """NCCL 2.3.5-2.4.2 print no "Init START/COMPLETE": ncclCommInitAll (one process, many
    GPUs: TensorFlow, Horovod) joins its comms to their ranks only in the allocation line. Real
    lines of a 2.4.2 job (NVIDIA/nccl#203)."""
    path = tmp_path / "tf.log"
    path.write_text(
        "NCCL version 2.4.2+cuda9.0\n"
        "gpu1:11907:12331 [0] NCCL INFO nranks 2\n"
        "gpu1:11907:12331 [1] NCCL INFO comm 0x7ef9d4137620 rank 0 nranks 2 cudaDev 1 nvmlDev 1\n"
        "gpu1:11907:12331 [0] NCCL INFO comm 0x7ef9d414a840 rank 1 nranks 2 cudaDev 0 nvmlDev 0\n"
    )
    summary = read_nccl_log(path)
    ranks = {key[2]: info.rank for key, info in summary.comms.items()}
    assert ranks == {"0x7ef9d4137620": 0, "0x7ef9d414a840": 1}
    event = parse_line("gpu1:11907:12331 [1] NCCL INFO comm 0x7ef9d4137620 rank 0 nranks 2")
    assert isinstance(event, InitLine)  # the 2.3.x form
    assert (event.rank, event.nranks, event.cuda_dev) == (0, 2, None)
    # Not to be confused with 2.20+'s topology line, which goes on with nNodes.
    topo = parse_line(
        NCCL_PREFIX + "comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"
    )
    assert not isinstance(topo, InitLine)


@pytest.mark.parametrize(
    ("version", "fractions", "wrong"),
    [
        ("2.26.2+cuda12.2", "broken", True),
        ("2.26.3+cuda12.2", "broken", False),
        ("2.26.2+cuda12.2", "true", False),  # kubectl's stamps before the whole-second default
    ],
)
def test_nccl_2_26_2s_wrong_fractions_of_a_second_are_cut_to_the_second(
    tmp_path: Path, version: str, fractions: str, wrong: bool
) -> None:
    """2.26.2 printed 0.03 s past the second as .3 (never under .1): only its whole seconds
    are kept. True fractions fall under .1 a tenth of the time."""
    rng = np.random.default_rng(1)
    lines = [f"{HOST}:1:1 [0] NCCL INFO NCCL version {version}"]
    for k in range(60):
        frac = float(rng.uniform(0.0, 1.0))
        if fractions == "broken" and frac < 0.1:
            frac *= 10.0
        micros = min(999_999, round(frac * 1e6))
        stamp = f"[2026-05-05 06:16:{k:02d}.{micros:06d}] "
        lines.append(stamp + NCCL_PREFIX + coll_body(count=1, dtype=7))
    path = tmp_path / "nccl.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = read_nccl_log(path)
    assert s.wrong_fractions is wrong
    whole = s.call_times_s - np.floor(s.call_times_s)
    assert bool((whole == 0).all()) is wrong
    # The live decoder, 20 lines a chunk: cut while it cannot tell yet, then as the file's.
    live = LiveDecoder()
    chunks = [live.decode_chunks(["".join(x + "\n" for x in lines[a:b])])[0]
              for a, b in ((0, 21), (21, 41), (41, 61))]  # fmt: skip
    assert live.version == version.split("+", 1)[0]
    last = chunks[-1]
    assert last.size == 20
    assert bool((last == np.floor(last)).all()) is wrong
    assert live.fractions_cut is (version.startswith("2.26.2"))


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ("[rank0]:[06:16:47.500000] ", 6 * 3600 + 16 * 60 + 47.5),  # time of day, torchrun
        ("[default3]:[06:16:47.500000] ", 6 * 3600 + 16 * 60 + 47.5),
        ("0: 1767225600.000100 ", 1767225600.0001),  # epoch seconds behind srun -l
        ("[1,0]<stdout>:1767225600.000100 ", 1767225600.0001),  # OpenMPI
        ("[2026-05-05 06:16:47.500000]", _T0 + 0.5),  # a custom format ending in "]"
    ],
    ids=["tod-torchrun", "tod-default", "epoch-srun", "epoch-openmpi", "no-blank"],
)
def test_custom_stamps_behind_a_launcher_tag_or_before_the_host_without_a_blank(
    head: str, expected: float
) -> None:
    """NCCL prints its (custom) stamp before its prefix and the launcher its tag before both:
    such lines got no time, and a log of them no period."""
    event = parse_line(head + NCCL_PREFIX + coll_body(count=1, dtype=7))
    assert isinstance(event, CollLine)
    assert event.timestamp_s == pytest.approx(expected, abs=1e-6)
