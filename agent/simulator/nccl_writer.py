"""Render a simulated job's NCCL debug log, line for line in NCCL 2.28's format.

What a real host would show with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL
NCCL_DEBUG_TIMESTAMP_LEVELS=INFO NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] " TZ=UTC``: per local
rank (one process per GPU) the init block, then one COLL line per call. The format strings are
copied from NVIDIA/nccl at tag ``v2.28.3-1`` (``src/debug.cc`` prefix, ``src/init.cc`` init
lines, ``src/transport/net_ib.cc`` NIC list, ``src/graph/rings.cc`` and ``src/transport/*.cc``
channel lines, ``src/enqueue.cc`` COLL line); see ``research/nccl_log_format.md``.

Deliberate simplifications: all processes' lines come out in one stream (as in a job's captured
stdout) with each rank's init block whole, every line of a process carries the main thread's
id, and ``opCount`` counts calls per comm (2.3–2.7 semantics; real 2.28 advances it per
proxy-using plan only, and nothing downstream may rely on it anyway).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["LoggedCall", "job_comm_id", "render_nccl_log"]

# Bytes per element by NCCL datatype id (src/nccl.h.in, ncclTypeSize). Only used to lay out
# plausible buffer addresses; an unknown id is rendered as given, with 1-byte elements.
_TYPE_SIZES: Final = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1)

# PCI bus ids (NCCL's %lx of the packed id) of the eight GPUs of an HGX H100 board.
_BUS_IDS: Final = (0x18000, 0x2A000, 0x3A000, 0x5D000, 0x9A000, 0xAB000, 0xBA000, 0xDB000)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_CHANNELS: Final = 2
_BAD_HOST_CHARS: Final = frozenset(":[]()<>%/")  # the NCCL prefix never has these in a host


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One collective call as one process enqueues it (one COLL line).

    ``op`` is an NCCL op name (AllReduce, AllGather, ReduceScatter, AlltoAll, Broadcast, Reduce,
    Gather, Scatter, Send, Recv, ...); any alphabetic name is written as given, so tests can
    also render ops the parser does not know. ``count`` is the COLL line's count in elements:
    per rank for AllGather/ReduceScatter, per peer for AlltoAll. ``peer`` is printed in the
    ``root`` field: the root of Broadcast/Reduce/Gather/Scatter, the peer rank of Send/Recv,
    0 otherwise.
    """

    time_s: float
    op: str
    count: int
    datatype: int
    local_rank: int
    peer: int = 0


@dataclass(frozen=True, slots=True)
class _Rank:
    """Fixed identity of one local process: what NCCL prints in every line it writes."""

    local_rank: int
    rank: int
    pid: int
    comm: str
    stream: str
    bus_id: int
    nic: int
    heap_base: int


def _stamp(t: float, cache: dict[int, str]) -> str:
    """NCCL's ``[%F %T.%6f] `` prefix for POSIX time ``t`` in UTC.

    NCCL truncates to the microsecond; this rounds, so the printed time is the nearest
    microsecond to the simulated one.
    """
    sec, usec = divmod(round(t * 1_000_000), 1_000_000)
    head = cache.get(sec)
    if head is None:
        if len(cache) > 100_000:
            cache.clear()
        head = cache[sec] = (_EPOCH + timedelta(seconds=sec)).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{head}.{usec:06d}] "


def _ptr(value: int) -> str:
    """Format like glibc ``%p``: ``0x`` + lower-case hex, ``(nil)`` for NULL."""
    return f"0x{value:x}" if value else "(nil)"


def _validate(
    hostname: str, nranks: int, first_rank: int, local_ranks: int, start_time_s: float
) -> str:
    host = hostname.split(".", 1)[0]  # NCCL's getHostName cuts at the first '.'
    if not host or any(c.isspace() or c in _BAD_HOST_CHARS for c in host):
        raise ValueError(f"hostname {hostname!r} cannot appear in an NCCL line prefix")
    if nranks < 1:
        raise ValueError(f"nranks must be at least 1, got {nranks}")
    if local_ranks < 1:
        raise ValueError(f"local_ranks must be at least 1, got {local_ranks}")
    if first_rank < 0 or first_rank + local_ranks > nranks:
        raise ValueError(
            f"ranks {first_rank}..{first_rank + local_ranks - 1} do not fit in nranks={nranks}"
        )
    if not math.isfinite(start_time_s):
        raise ValueError(f"start_time_s must be finite, got {start_time_s}")
    return host


def _check_call(call: LoggedCall, local_ranks: int) -> None:
    if not 0 <= call.local_rank < local_ranks:
        raise ValueError(f"{call}: local_rank outside 0..{local_ranks - 1}")
    if not call.op.isascii() or not call.op.isalpha():
        raise ValueError(f"{call}: op must be an NCCL op name such as AllReduce")
    if call.count < 0:
        raise ValueError(f"{call}: count must not be negative")
    if call.datatype < 0:
        raise ValueError(f"{call}: datatype must not be negative")
    if not math.isfinite(call.time_s):
        raise ValueError(f"{call}: time_s must be finite")


def job_comm_id(seed: int) -> int:
    """The commId of a simulated job's world communicator: one value per seed, on every host."""
    return random.Random(f"commpulse-nccl-job:{seed}").getrandbits(64) | 1


def render_nccl_log(
    calls: Iterable[LoggedCall],
    *,
    hostname: str,
    nranks: int,
    first_rank: int,
    local_ranks: int,
    start_time_s: float,
    seed: int,
    version: str = "2.28.3",
    cuda: str = "12.8",
) -> Iterator[str]:
    """Yield the log lines (no newline) one host of a job would write.

    Local rank ``r`` is global rank ``first_rank + r`` on CUDA device ``r``; nodes are assumed
    to hold ``local_ranks`` consecutive ranks each. The init block is stamped at
    ``start_time_s`` (calls are expected at or after it). Calls may come in any order; they are
    written sorted by time (stable). Pointers, pids and addresses are drawn from ``seed`` and
    the host name, so a seed gives byte-identical output, and the commId (the job's
    communicator) is the same on every host of a job.

    Raises:
        ValueError: arguments or a call that NCCL could not have printed (checked before the
            first line is yielded).
    """
    host = _validate(hostname, nranks, first_rank, local_ranks, start_time_s)
    ordered = sorted(calls, key=lambda c: c.time_s)
    for call in ordered:
        _check_call(call, local_ranks)
    return _render(
        ordered,
        host=host,
        nranks=nranks,
        first_rank=first_rank,
        local_ranks=local_ranks,
        start_time_s=start_time_s,
        seed=seed,
        version=version,
        cuda=cuda,
    )


def _render(
    calls: list[LoggedCall],
    *,
    host: str,
    nranks: int,
    first_rank: int,
    local_ranks: int,
    start_time_s: float,
    seed: int,
    version: str,
    cuda: str,
) -> Iterator[str]:
    rng = random.Random(f"commpulse-nccl-host:{seed}:{host}")
    comm_id = job_comm_id(seed)
    nics = max(1, min(local_ranks, 8))
    base_pid = rng.randrange(10_000, 3_000_000)
    ranks = []
    for r in range(local_ranks):
        bus = _BUS_IDS[r % 8] | ((r // 8) << 20)  # a new PCI domain per eight GPUs
        ranks.append(
            _Rank(
                local_rank=r,
                rank=first_rank + r,
                pid=base_pid + 37 * r + rng.randrange(0, 30),
                comm=_ptr(0x55_0000_0000_00 + (rng.getrandbits(36) << 4)),
                stream=_ptr(0x55_0000_0000_00 + (rng.getrandbits(36) << 4)),
                bus_id=bus,
                nic=r % nics,
                heap_base=0x7F_0000_0000_00 + (rng.getrandbits(8) << 32),
            )
        )
    oob_ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    stamps: dict[int, str] = {}

    init_ts = _stamp(start_time_s, stamps)
    for rk in ranks:
        prefix = f"{init_ts}{host}:{rk.pid}:{rk.pid} [{rk.local_rank}] NCCL INFO "
        for message in _init_block(
            rk,
            nranks=nranks,
            first_rank=first_rank,
            local_ranks=local_ranks,
            nics=nics,
            comm_id=comm_id,
            oob_ip=oob_ip,
            version=version,
            cuda=cuda,
        ):
            yield prefix + message

    op_counts = [0] * local_ranks
    buffers: dict[tuple[int, str, int, int], tuple[int, int]] = {}
    next_buffer = [rk.heap_base for rk in ranks]
    for call in calls:
        rk = ranks[call.local_rank]
        key = (call.local_rank, call.op, call.count, call.datatype)
        bufs = buffers.get(key)
        if bufs is None:
            # A caching allocator hands the same buffers back every step: reuse per shape.
            elem = _TYPE_SIZES[call.datatype] if call.datatype < len(_TYPE_SIZES) else 1
            nbytes = call.count * elem
            send, recv = _buffers(call.op, next_buffer[call.local_rank], nbytes, rk.rank, nranks)
            span = max(nbytes * nranks, nbytes) * 2
            next_buffer[call.local_rank] += (span + (1 << 21)) & ~((1 << 21) - 1)
            bufs = buffers[key] = (send, recv)
        opcount = op_counts[call.local_rank]
        op_counts[call.local_rank] = opcount + 1
        # src/enqueue.cc @ v2.28.3-1: "%s: opCount %lx sendbuff %p recvbuff %p count %zu
        # datatype %d op %d root %d comm %p [nranks=%d] stream %p"; op is ncclSum (0) here.
        yield (
            f"{_stamp(call.time_s, stamps)}{host}:{rk.pid}:{rk.pid} [{rk.local_rank}] NCCL INFO "
            f"{call.op}: opCount {opcount:x} sendbuff {_ptr(bufs[0])} recvbuff {_ptr(bufs[1])} "
            f"count {call.count} datatype {call.datatype} op 0 root {call.peer} comm {rk.comm} "
            f"[nranks={nranks}] stream {rk.stream}"
        )


def _buffers(op: str, base: int, nbytes: int, rank: int, nranks: int) -> tuple[int, int]:
    """(sendbuff, recvbuff) as frameworks pass them to NCCL for this op."""
    if op in {"AllReduce", "Broadcast", "Reduce"}:
        return base, base  # in place
    if op == "AllGather":
        return base + rank * nbytes, base  # in place: own slice of the output
    if op == "ReduceScatter":
        return base, base + rank * nbytes  # in place: own slice of the input
    if op in {"Send", "Recv"}:
        return 0, base  # 2.12+: the buffer in recvbuff, sendbuff (nil) (collectives.cc)
    if op == "PutSignal":
        return base, 0
    if op in {"Signal", "WaitSignal"}:
        return 0, 0
    return base, base + max(nbytes * nranks, 1)  # AlltoAll, Gather, Scatter: out of place


def _init_block(
    rk: _Rank,
    *,
    nranks: int,
    first_rank: int,
    local_ranks: int,
    nics: int,
    comm_id: int,
    oob_ip: str,
    version: str,
    cuda: str,
) -> Iterator[str]:
    """The INIT/NET messages one process prints while creating its communicator (2.28)."""
    nnodes = -(-nranks // local_ranks)
    ident = (
        f"ncclCommInitRank comm {rk.comm} rank {rk.rank} nranks {nranks} cudaDev "
        f"{rk.local_rank} nvmlDev {rk.local_rank} busId {rk.bus_id:x} commId 0x{comm_id:x}"
    )
    devices = "".join(f" [{i}]mlx5_{i}:1/IB" for i in range(nics))
    yield f"NCCL version {version}+cuda{cuda}"
    yield f"NET/IB : Using{devices} [RO]; OOB eth0:{oob_ip}<0>"
    yield "Using network IB"
    yield f"{ident} - Init START"
    yield (
        f"comm {rk.comm} rank {rk.rank} nRanks {nranks} nNodes {nnodes} "
        f"localRanks {local_ranks} localRank {rk.local_rank} MNNVL 0"
    )
    if rk.rank == 0:  # src/graph/rings.cc: only rank 0 dumps the ring order
        order = "".join(f" {r}" for r in range(nranks))
        for ch in range(_CHANNELS):
            yield f"Channel {ch:02d}/{_CHANNELS:02d} :{order}"
    if nranks > 1:
        nxt, prv = (rk.rank + 1) % nranks, (rk.rank - 1) % nranks

        def local(peer: int) -> bool:
            return first_rank <= peer < first_rank + local_ranks

        for ch in range(_CHANNELS):
            head = f"Channel {ch:02d}/0 : "
            if local(nxt):
                yield f"{head}{rk.rank}[{rk.local_rank}] -> {nxt}[{nxt - first_rank}] via P2P/CUMEM"
            else:
                yield (
                    f"{head}{rk.rank}[{rk.local_rank}] -> {nxt}[{nxt % local_ranks}] [send] "
                    f"via NET/IB/{rk.nic}/GDRDMA"
                )
            if not local(prv):
                yield (
                    f"{head}{prv}[{prv % local_ranks}] -> {rk.rank}[{rk.local_rank}] [receive] "
                    f"via NET/IB/{rk.nic}/GDRDMA"
                )
    yield (
        f"{_CHANNELS} coll channels, {_CHANNELS} collnet channels, 0 nvls channels, "
        f"{_CHANNELS} p2p channels, {_CHANNELS} p2p channels per peer"
    )
    if nranks > 1:
        yield "Connected all rings, use ring PXN 0 GDR 1"
    yield f"{ident} - Init COMPLETE"
    yield (
        f"Init timings - ncclCommInitRank: rank {rk.rank} nranks {nranks} total 0.62 "
        "(kernels 0.15, alloc 0.02, bootstrap 0.05, allgathers 0.01, topo 0.12, graphs 0.01, "
        "connections 0.22, rest 0.04)"
    )
