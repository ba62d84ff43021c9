"""Tests of agent.simulator.nccl_writer, and the round trip through collectors.nccl_log."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from agent.simulator.nccl_writer import LoggedCall, render_nccl_log
from collectors.nccl_log import (
    CollLine,
    InfoLine,
    InitLine,
    NcclLogAccumulator,
    NetLine,
    OpStats,
    TopologyLine,
    VersionLine,
    parse_line,
)

START = 1767225600.0  # 2026-01-01T00:00:00Z
HOST = "gpu-node-02"

# src/enqueue.cc @ v2.22.3-1 … master, placeholders turned into patterns, behind the prefix
# "[%F %T.%6f] " + "%s:%d:%d [%d] NCCL INFO " (src/debug.cc).
_PTR = r"(?:0x[0-9a-f]+|\(nil\))"
COLL_FORMAT = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] [^\s:]+:\d+:\d+ \[\d+\] NCCL INFO "
    r"[A-Za-z]+: opCount [0-9a-f]+ sendbuff " + _PTR + " recvbuff " + _PTR + r" count \d+ "
    r"datatype \d+ op \d+ root -?\d+ comm " + _PTR + r" \[nranks=\d+\] stream " + _PTR
)


def job_calls() -> list[LoggedCall]:
    """Three training-like steps on 8 local ranks, given out of time order."""
    calls: list[LoggedCall] = []
    for step in range(3):
        t = START + 10.0 + 2.5 * step
        for r in range(8):
            calls.append(LoggedCall(t + 1e-5 * r, "AllReduce", 25_000_000, 9, r))
            calls.append(LoggedCall(t + 0.1 + 1e-5 * r, "AllGather", 1000, 7, r))
            calls.append(LoggedCall(t + 0.2 + 1e-5 * r, "ReduceScatter", 333, 6, r))
            calls.append(LoggedCall(t + 0.3 + 1e-5 * r, "AlltoAll", 4096, 9, r))
            calls.append(LoggedCall(t + 0.4 + 1e-5 * r, "Broadcast", 17, 0, r))
            calls.append(LoggedCall(t + 0.5 + 1.234567e-6 * r, "Send", 2048, 9, r, peer=r + 9))
            calls.append(LoggedCall(t + 0.6 + 1e-6 * r, "Recv", 2048, 9, r, peer=r + 7))
    calls.reverse()
    return calls


def render(calls: list[LoggedCall], **overrides: object) -> list[str]:
    kwargs: dict[str, object] = {
        "hostname": HOST + ".cluster.example",
        "nranks": 16,
        "first_rank": 8,
        "local_ranks": 8,
        "start_time_s": START,
        "seed": 7,
    }
    kwargs.update(overrides)
    return list(render_nccl_log(calls, **kwargs))  # type: ignore[arg-type]


def test_round_trip_through_the_accumulator() -> None:
    calls = job_calls()
    acc = NcclLogAccumulator()
    for line in render(calls):
        acc.feed(line)
    s = acc.summary()

    size = {9: 2, 7: 4, 6: 2, 0: 1}
    factor = {"AllGather": 16, "ReduceScatter": 16, "AlltoAll": 16}
    expected: dict[str, OpStats] = {}
    for c in calls:
        prev = expected.get(c.op, OpStats(0, 0))
        s_bytes = c.count * size[c.datatype] * factor.get(c.op, 1)
        expected[c.op] = OpStats(prev.count + 1, prev.bytes + s_bytes)
    assert s.collectives == expected
    assert s.collectives["AllReduce"].bytes == 3 * 8 * 50_000_000
    assert s.nranks == 16
    assert s.calls_total == len(calls)
    assert s.unparsed_nccl_lines == 0
    assert s.unknown_ops == {}
    assert s.unknown_datatype_calls == 0
    assert s.warn_count == 0
    assert (s.version, s.cuda) == ("2.28.3", "12.8")
    assert s.networks == ("IB",)
    assert s.ib_devices == tuple((f"mlx5_{i}", 1, "IB") for i in range(8))
    assert s.hosts == (HOST,)
    assert len(s.pids) == 8
    assert s.has_timestamps

    assert len(s.comms) == 8
    comm_ids = {info.comm_id for info in s.comms.values()}
    assert len(comm_ids) == 1
    assert None not in comm_ids
    for info in s.comms.values():
        assert info.init_complete
        assert info.nranks == 16
        assert info.rank is not None
        assert info.cuda_dev == info.rank - 8 == info.local_rank
        assert (info.nnodes, info.local_ranks) == (2, 8)
        assert info.calls == len(calls) // 8
    assert sorted(info.rank for info in s.comms.values() if info.rank is not None) == list(
        range(8, 16)
    )

    ordered = sorted(calls, key=lambda c: c.time_s)
    np.testing.assert_allclose(s.call_times_s, [c.time_s for c in ordered], rtol=0, atol=1e-6)
    assert s.call_ops == [c.op for c in ordered]
    ranks = [s.comms[s.comm_keys[i]].rank for i in s.call_comm_ids]
    assert ranks == [8 + c.local_rank for c in ordered]


def test_every_line_parses_and_coll_lines_follow_the_format() -> None:
    calls = job_calls()
    lines = render(calls)
    events = [parse_line(line) for line in lines]
    assert all(e is not None for e in events)
    colls = [e for e in events if isinstance(e, CollLine)]
    assert len(colls) == len(calls)
    coll_lines = [line for line in lines if "opCount" in line]
    for line in coll_lines:
        assert COLL_FORMAT.fullmatch(line), line
    assert len(lines) == len(coll_lines) + sum(1 for e in events if not isinstance(e, CollLine))
    # Init lines come first, stamped at the start time.
    first_coll = next(i for i, e in enumerate(events) if isinstance(e, CollLine))
    assert all(isinstance(e, CollLine) for e in events[first_coll:])
    for e in events[:first_coll]:
        assert e is not None
        assert e.timestamp_s == START
        assert e.host == HOST


def test_init_block_of_each_rank() -> None:
    lines = render([], nranks=16, first_rank=0, local_ranks=8)
    events = [parse_line(line) for line in lines]
    per_pid: dict[int | None, list[object]] = {}
    for e in events:
        assert e is not None
        per_pid.setdefault(e.pid, []).append(e)
    assert len(per_pid) == 8
    for block in per_pid.values():
        kinds = [type(e) for e in block]
        assert kinds[0] is VersionLine
        net = [e for e in block if isinstance(e, NetLine)]
        assert [n.network for n in net] == ["IB", "IB"]
        assert any(n.relaxed_ordering and n.oob_interface == "eth0" for n in net)
        inits = [e for e in block if isinstance(e, InitLine)]
        assert [i.phase for i in inits] == ["START", "COMPLETE"]
        assert inits[0].api == "ncclCommInitRank"
        assert kinds.index(InitLine) < kinds.index(TopologyLine)
        assert isinstance(block[-1], InfoLine)  # "Init timings - ..."
        assert any(isinstance(e, InfoLine) and e.text.startswith("Channel 00/0 :") for e in block)
    # Only rank 0 dumps the ring order (src/graph/rings.cc).
    rings = [line for line in lines if re.search(r"Channel \d\d/\d\d : 0 1 2", line)]
    assert len(rings) == 2


def test_buffers_and_opcount() -> None:
    calls = [
        LoggedCall(START + 1 + i, op, 64, 7, 0, peer=3)
        for i, op in enumerate(
            ["AllReduce", "Send", "Recv", "AllGather", "AllReduce"] + ["Broadcast"] * 20
        )
    ]
    colls = [e for e in map(parse_line, render(calls)) if isinstance(e, CollLine)]
    allreduce, send, recv, allgather = colls[:4]
    assert allreduce.sendbuff == allreduce.recvbuff != "(nil)"
    assert send.sendbuff == recv.sendbuff == "(nil)"
    assert send.recvbuff != "(nil)"
    assert send.root == recv.root == 3
    assert allgather.sendbuff != allgather.recvbuff
    assert colls[4].recvbuff == allreduce.recvbuff  # same shape, same cached buffer
    assert [c.opcount for c in colls] == list(range(len(calls)))
    assert "opCount 13 " in render(calls)[-6]  # hex, no 0x: call 19 → 0x13
    assert len({c.comm for c in colls}) == 1
    assert all(c.tid == c.pid for c in colls)
    assert all(re.fullmatch(r"0x[0-9a-f]+", c.stream) for c in colls)


def test_deterministic_and_seeded() -> None:
    calls = job_calls()
    assert render(calls) == render(calls)
    other = render(calls, seed=8)
    assert other != render(calls)
    # The job's communicator has one commId on every host of a job (same seed).
    a = [
        e
        for e in map(parse_line, render([], hostname="h1", first_rank=0))
        if isinstance(e, InitLine)
    ]
    b = [
        e
        for e in map(parse_line, render([], hostname="h2", first_rank=8))
        if isinstance(e, InitLine)
    ]
    assert {e.comm_id for e in a} == {e.comm_id for e in b}
    assert {e.pid for e in a} != {e.pid for e in b}


def test_calls_sorted_stably_by_time() -> None:
    calls = [
        LoggedCall(START + 2.0, "AllReduce", 1, 7, 0),
        LoggedCall(START + 1.0, "AllGather", 1, 7, 1),
        LoggedCall(START + 1.0, "ReduceScatter", 1, 7, 0),
        LoggedCall(START + 1.0, "Broadcast", 1, 7, 1),
    ]
    colls = [e for e in map(parse_line, render(calls)) if isinstance(e, CollLine)]
    assert [c.op for c in colls] == ["AllGather", "ReduceScatter", "Broadcast", "AllReduce"]


def test_timestamp_rendering() -> None:
    t = START + 3661.2345675
    line = render([LoggedCall(t, "AllReduce", 1, 7, 0)])[-1]
    assert line.startswith("[2026-01-01 01:01:01.234568] gpu-node-02:")  # nearest microsecond
    event = parse_line(line)
    assert isinstance(event, CollLine)
    assert event.timestamp_s is not None
    assert math.isclose(event.timestamp_s, t, abs_tol=1e-6)


def test_single_rank_job() -> None:
    lines = render([LoggedCall(START, "AllReduce", 1, 7, 0)], nranks=1, first_rank=0, local_ranks=1)
    acc = NcclLogAccumulator()
    for line in lines:
        acc.feed(line)
    s = acc.summary()
    assert s.nranks == 1
    assert s.collectives == {"AllReduce": OpStats(1, 4)}


@pytest.mark.parametrize(
    ("calls", "overrides", "match"),
    [
        ([LoggedCall(START, "AllReduce", 1, 7, 8)], {}, "local_rank"),
        ([LoggedCall(START, "AllReduce", 1, 7, -1)], {}, "local_rank"),
        ([LoggedCall(START, "All Reduce", 1, 7, 0)], {}, "op"),
        ([LoggedCall(START, "AllReduce", -1, 7, 0)], {}, "count"),
        ([LoggedCall(START, "AllReduce", 1, -7, 0)], {}, "datatype"),
        ([LoggedCall(math.nan, "AllReduce", 1, 7, 0)], {}, "time_s"),
        ([], {"first_rank": 9}, "do not fit"),
        ([], {"nranks": 0}, "nranks"),
        ([], {"local_ranks": 0}, "local_ranks"),
        ([], {"hostname": "bad host"}, "hostname"),
        ([], {"hostname": ".example"}, "hostname"),
        ([], {"hostname": "a:b"}, "hostname"),
        ([], {"start_time_s": math.inf}, "start_time_s"),
    ],
)
def test_invalid_arguments_raise_at_call_time(
    calls: list[LoggedCall], overrides: dict[str, object], match: str
) -> None:
    kwargs: dict[str, object] = {
        "hostname": HOST,
        "nranks": 16,
        "first_rank": 8,
        "local_ranks": 8,
        "start_time_s": START,
        "seed": 7,
    }
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=match):
        render_nccl_log(calls, **kwargs)  # type: ignore[arg-type]
