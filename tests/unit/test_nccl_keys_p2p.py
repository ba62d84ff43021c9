"""``analyze``'s Send/Recv calls come from the summary's arrays, as the second read gave them.

analyze used to decode the log files a second time for the peers (the COLL line's ``root``);
the summary now keeps them (``call_peers``), and its call table (the live agent's view) carries
them. The reference below is that second read, kept here to show the P2P calls, and so the
``alltoall`` and ``pipeline`` objects, are unchanged.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import call_table, sparse_ops_json
from agent.p2p import P2PCall, group_alltoalls
from agent.regime_params import p2p_calls
from agent.simulator.nccl_writer import LoggedCall, render_nccl_log
from collectors.nccl_log import CollLine, parse_records, read_nccl_logs


def _second_read(paths: list[Path]) -> list[P2PCall]:
    """analyze's former way: every Send/Recv record of the files, decoded again."""
    summary = read_nccl_logs(paths)
    out = []
    for path in paths:
        for line in path.read_text().split("\n"):
            for event in parse_records(line):
                if isinstance(event, CollLine) and event.op in ("Send", "Recv"):
                    info = summary.comms.get((event.host, event.pid, event.comm))
                    out.append(
                        P2PCall(
                            process=f"{event.host}:{event.pid}",
                            comm=event.comm,
                            op=event.op,
                            peer=event.root,
                            nbytes=math.nan if event.s_bytes is None else event.s_bytes,
                            time_s=math.nan if event.timestamp_s is None else event.timestamp_s,
                            rank=info.rank if info is not None else None,
                            nranks=event.nranks,
                        )
                    )
    return out


def _plain(calls: list[P2PCall]) -> list[tuple[object, ...]]:
    """Comparable rows (NaN, which equals nothing, as None)."""
    return [
        (c.process, c.comm, c.op, c.peer, None if math.isnan(c.nbytes) else c.nbytes,
         None if math.isnan(c.time_s) else c.time_s, c.rank, c.nranks)
        for c in calls
    ]  # fmt: skip


def _log(path: Path, calls: list[LoggedCall], *, host: str, first_rank: int, version: str) -> Path:
    lines = render_nccl_log(calls, hostname=host, nranks=8, first_rank=first_rank, local_ranks=4,
                            start_time_s=1767225600.0, seed=11, version=version)  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _alltoall_and_pipeline(first_rank: int) -> list[LoggedCall]:
    """Grouped Send/Recv to every peer (an AlltoAll of 8 ranks), then pipeline hand-offs."""
    calls = []
    for local in range(4):
        rank = first_rank + local
        t = 1767225601.0 + 1e-3 * local
        for i, peer in enumerate(p for p in range(8) if p != rank):
            calls.append(LoggedCall(t + 2e-6 * i, "Send", 4096, 9, local, peer))
            calls.append(LoggedCall(t + 2e-6 * i + 1e-6, "Recv", 4096, 9, local, peer))
        calls.append(LoggedCall(t + 0.01, "AllReduce", 1 << 20, 7, local))
        calls.append(LoggedCall(t + 0.011, "Broadcast", 1024, 7, local, 3))
        if rank + 2 < 8:
            calls.append(LoggedCall(t + 0.02, "Send", 1 << 16, 9, local, rank + 2))
        if rank >= 2:
            calls.append(LoggedCall(t + 0.021, "Recv", 1 << 16, 9, local, rank - 2))
    return calls


@pytest.mark.parametrize("version", ["2.21.5", "2.28.3"])
def test_p2p_calls_from_the_summary_equal_the_second_read(tmp_path: Path, version: str) -> None:
    paths = [
        _log(tmp_path / "a.log", _alltoall_and_pipeline(0), host="node-a", first_rank=0,
             version=version),
        _log(tmp_path / "b.log", _alltoall_and_pipeline(4), host="node-b", first_rank=4,
             version=version),
    ]  # fmt: skip
    summary = read_nccl_logs(paths)
    new = p2p_calls(call_table(summary), None)
    assert _plain(new) == _plain(_second_read(paths))
    assert len(new) == 8 * 14 + 6 + 6  # 14 grouped per rank; 6 ranks send on, 6 receive
    found, rest = group_alltoalls(new)
    assert len(found) == 8
    assert {c.peer - (c.rank or 0) for c in rest} == {2, -2}
    a2a, pipe = sparse_ops_json(summary)
    assert a2a is not None
    assert a2a["grouped_send_recv_calls"] == 8
    assert pipe is not None
    assert pipe["stages"] == 4


def test_p2p_calls_of_odd_lines_equal_the_second_read(tmp_path: Path) -> None:
    """Launcher tags, no timestamps, glued records, a record that lost its prefix, an unknown
    datatype, RCCL's tail, and a comm without an Init line."""
    head = "gpu-a:101:101 [0] NCCL INFO "
    init = (
        f"{head}ncclCommInitRank comm 0x55aa rank 3 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE"
    )
    body = "{op}: opCount 0 sendbuff (nil) recvbuff 0x7f00 count {n} datatype {dt} op 0 root {p} "
    body += "comm {c} [nranks={r}] stream 0x1"
    lines = [
        init,
        "[rank3]:[2026-05-05 06:16:47.5] " + head + body.format(op="Send", n=4, dt=7, p=4,
                                                               c="0x55aa", r=8),
        head + body.format(op="Recv", n=4, dt=99, p=2, c="0x55aa", r=8) + " task 0 globalrank 3",
        head + body.format(op="Send", n=1, dt=0, p=5, c="0x55aa", r=8) + "[default1]:gpu-b:7:7 "
        "[1] NCCL INFO " + body.format(op="Recv", n=2, dt=0, p=0, c="0x66bb", r=2),
        body.format(op="Send", n=8, dt=0, p=1, c="0x55aa", r=8),  # no prefix: host unknown
        head + body.format(op="AllReduce", n=8, dt=7, p=0, c="0x55aa", r=8),
    ]  # fmt: skip
    path = tmp_path / "odd.log"
    path.write_text("\n".join(lines) + "\n")
    summary = read_nccl_logs([path])
    new = p2p_calls(call_table(summary), None)
    assert _plain(new) == _plain(_second_read([path]))
    assert [(c.op, c.peer, c.rank) for c in new] == [
        ("Send", 4, 3), ("Recv", 2, 3), ("Send", 5, 3), ("Recv", 0, None), ("Send", 1, None),
    ]  # fmt: skip
    assert math.isnan(new[1].nbytes)  # datatype 99: S unknown
    assert not math.isnan(new[0].time_s)
    assert math.isnan(new[2].time_s)


def test_no_send_recv_gives_no_p2p_calls(tmp_path: Path) -> None:
    calls = [LoggedCall(1767225601.0 + i, "AllReduce", 1024, 7, i % 4) for i in range(8)]
    summary = read_nccl_logs([_log(tmp_path / "a.log", calls, host="n", first_rank=0,
                                   version="2.28.3")])  # fmt: skip
    assert p2p_calls(call_table(summary), None) == []
    assert summary.call_peers.tolist() == [-1] * 8
    assert sparse_ops_json(summary) == (None, None)
    assert np.all(summary.call_peers == -1)
