"""AlltoAll and pipeline structure from an NCCL log's collective and Send/Recv records.

Inference traffic is MoE AlltoAll (expert parallel) and pipeline Send/Recv (DOMAIN.md). NCCL
names AlltoAll in its COLL lines only from 2.28; before, frameworks build it from a group of
point-to-point calls (``ncclGroupStart``; a Send and a Recv to every peer; ``ncclGroupEnd``,
as PyTorch's ``all_to_all_single`` does), which the log shows as consecutive Send and Recv lines
of one communicator, one pair per peer. Those groups are recognised here and counted as
AlltoAll. The Send/Recv lines left over are pipeline hand-offs; their peers give the stage
structure when the layout allows it.

The ``root`` field of a Send/Recv COLL line is the peer rank (research/nccl_log_format.md §2.3);
the caller's own rank comes from the communicator's ``Init COMPLETE`` line.

Pure: records in, frozen dataclasses out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.arrivals import Percentiles, percentiles_json
from agent.sharding import calls_per_step

__all__ = [
    "MIN_GROUP_PEERS",
    "AlltoAllStats",
    "GroupedAlltoAll",
    "P2PCall",
    "PipelineStats",
    "alltoall_stats",
    "bubble_ratio",
    "group_alltoalls",
    "pipeline_stats",
]

FloatArray = npt.NDArray[np.float64]

#: A grouped exchange must reach this many distinct peers to be called an AlltoAll. A pipeline
#: stage talks to two neighbours at most (also with an interleaved schedule, whose last stage
#: wraps to the first), so with 2 or 3 ranks a Send+Recv to every peer cannot be told from
#: a stage handing activations forward and gradients back.
MIN_GROUP_PEERS = 3


@dataclass(frozen=True)
class P2PCall:
    """One Send or Recv COLL line: who called, on which communicator, to which peer."""

    process: str
    comm: str
    op: str
    peer: int
    nbytes: float
    time_s: float
    rank: int | None
    nranks: int | None


@dataclass(frozen=True)
class GroupedAlltoAll:
    """One AlltoAll one rank made of grouped Send/Recv calls.

    ``message_bytes`` is nccl-tests' S of an AlltoAll (per-peer count · size · nranks): the
    bytes sent, scaled to all ``nranks`` slots when the framework skipped the send to itself.
    """

    process: str
    comm: str
    time_s: float
    message_bytes: float
    peers: int
    nranks: int


def _closes(group: list[P2PCall]) -> GroupedAlltoAll | None:
    """The group as an AlltoAll if it sends to and receives from every peer exactly once.

    "Every peer" is every other rank, or every rank when the framework also sends to itself;
    with the caller's rank unknown, any n - 1 or n distinct ranks.
    """
    first = group[0]
    n = first.nranks
    if n is None or n <= MIN_GROUP_PEERS:
        return None
    sends = [c.peer for c in group if c.op == "Send"]
    recvs = [c.peer for c in group if c.op == "Recv"]
    peers = set(sends)
    if len(peers) != len(sends) or len(recvs) != len(sends) or set(recvs) != peers:
        return None
    if len(peers) < n - 1:
        return None  # (and no set of every rank is built for a corrupt line's huge nranks)
    everyone = set(range(n))
    if first.rank is not None:
        complete = peers in (everyone, everyone - {first.rank})
    else:
        complete = peers <= everyone and len(peers) >= n - 1
    if not complete:
        return None
    sent = float(sum(c.nbytes for c in group if c.op == "Send"))
    times = [c.time_s for c in group if math.isfinite(c.time_s)]
    return GroupedAlltoAll(
        process=first.process,
        comm=first.comm,
        time_s=min(times) if times else math.nan,
        message_bytes=sent * n / len(peers),
        peers=len(peers),
        nranks=n,
    )


def group_alltoalls(calls: Sequence[P2PCall]) -> tuple[list[GroupedAlltoAll], list[P2PCall]]:
    """Split Send/Recv records into recognised AlltoAlls and the remaining P2P calls.

    ``calls`` are in log order. Per (process, communicator), consecutive calls form a group
    until a (op, peer) pair repeats (back-to-back AlltoAlls of successive layers, enqueued
    ahead of the GPU, follow each other without another line between them). A group that sends
    to and receives from every other rank (or every rank, itself included), each once, on a
    communicator of more than ``MIN_GROUP_PEERS`` ranks, is an AlltoAll; counts may differ per
    peer (``all_to_all`` with uneven splits, as MoE routing makes them).
    """
    open_groups: dict[tuple[str, str], list[P2PCall]] = {}
    seen: dict[tuple[str, str], set[tuple[str, int]]] = {}
    found: list[GroupedAlltoAll] = []
    rest: list[P2PCall] = []

    def flush(key: tuple[str, str]) -> None:
        group = open_groups.pop(key, [])
        seen.pop(key, None)
        if not group:
            return
        hit = _closes(group)
        if hit is None:
            rest.extend(group)
        else:
            found.append(hit)

    for call in calls:
        key = (call.process, call.comm)
        pair = (call.op, call.peer)
        if pair in seen.get(key, set()):
            flush(key)
        open_groups.setdefault(key, []).append(call)
        seen.setdefault(key, set()).add(pair)
    for key in list(open_groups):
        flush(key)
    return found, rest


@dataclass(frozen=True)
class AlltoAllStats:
    """AlltoAll calls of the log: how many, how big, how often (per rank)."""

    calls: int
    native_calls: int
    grouped_calls: int
    ranks: int
    nranks: int | None
    message_bytes: Percentiles | None
    call_rate_hz: float | None

    def to_json(self) -> dict[str, Any]:
        """The ``"alltoall"`` object of ``analyze --json``."""
        return {
            "calls": self.calls,
            "native_calls": self.native_calls,
            "grouped_send_recv_calls": self.grouped_calls,
            "ranks": self.ranks,
            "nranks": self.nranks,
            "message_bytes": percentiles_json(self.message_bytes),
            "call_rate_per_rank_hz": self.call_rate_hz,
        }


def alltoall_stats(
    *,
    native_bytes: FloatArray,
    native_processes: Sequence[str],
    grouped: Sequence[GroupedAlltoAll],
    nranks: int | None,
    span_s: float | None,
) -> AlltoAllStats | None:
    """AlltoAll count, S percentiles and call rate; None when the log holds none.

    ``native_bytes`` is S of every AlltoAll COLL line (NCCL 2.28+), ``native_processes`` the
    process of each; ``span_s`` the time the log's timed COLL lines cover (None without
    timestamps: no rate). The rate is per rank: calls over ranks over the span.
    """
    total = int(native_bytes.size) + len(grouped)
    if total == 0:
        return None
    sizes = np.concatenate(
        (native_bytes[np.isfinite(native_bytes)], [g.message_bytes for g in grouped])
    )
    ranks = len(set(native_processes) | {g.process for g in grouped})
    rate = total / ranks / span_s if span_s is not None and span_s > 0 and ranks else None
    if nranks is None and grouped:
        nranks = max(g.nranks for g in grouped)
    return AlltoAllStats(
        calls=total,
        native_calls=int(native_bytes.size),
        grouped_calls=len(grouped),
        ranks=ranks,
        nranks=nranks,
        message_bytes=Percentiles.of(sizes),
        call_rate_hz=rate,
    )


@dataclass(frozen=True)
class PipelineStats:
    """Pipeline (P2P) structure: stage count when the peers reveal it, else why not.

    ``micro_batches`` is forward hand-offs per step (the busiest stage's, so v·m with an
    interleaved schedule of v chunks per stage); ``bubble_ratio`` the share of a step the
    schedule leaves a stage idle, (p − 1) / (v·m + p − 1) for GPipe / 1F1B (interleaved 1F1B
    divides the bubble by v). Both need T and the stage count.
    """

    stages: int | None
    rank_stride: int | None
    nranks: int | None
    calls: int
    message_bytes: Percentiles | None
    stages_here: tuple[int, ...]
    reason: str | None
    micro_batches: float | None = None
    bubble_ratio: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``"pipeline"`` object of ``analyze --json``."""
        return {
            "stages": self.stages,
            "rank_stride": self.rank_stride,
            "nranks": self.nranks,
            "p2p_calls": self.calls,
            "message_bytes": percentiles_json(self.message_bytes),
            "stages_here": list(self.stages_here),
            "reason": self.reason,
            "micro_batches_per_step": self.micro_batches,
            "bubble_ratio": self.bubble_ratio,
        }


def bubble_ratio(stages: int, micro_batches: float) -> float:
    """Idle share of a pipeline step: (p − 1) / (m + p − 1) (GPipe and 1F1B alike).

    ``micro_batches`` is forward hand-offs per step per stage, v·m for an interleaved
    schedule of v model chunks per stage, whose bubble is v times smaller (Narayanan et al.,
    SC'21): the same formula covers both.
    """
    return (stages - 1) / (micro_batches + stages - 1)


def _forward_sends_per_step(
    ranked: Sequence[P2PCall], stride: int, n: int, period_s: float
) -> float | None:
    """Forward Sends (to the next stage, or wrapping from the last to the first) per step.

    The busiest rank counts: with an interleaved schedule, the last stage sends one chunk
    fewer than the others, and the last stage of a plain schedule sends none forward.
    """
    by_rank: dict[tuple[str, str], list[float]] = {}  # a process may drive several ranks
    for c in ranked:
        if c.op == "Send" and c.rank is not None and (c.peer - c.rank) % n == stride:
            by_rank.setdefault((c.process, c.comm), []).append(c.time_s)
    counts = [calls_per_step(np.asarray(t), period_s)[0] for t in by_rank.values()]
    known = [c for c in counts if c]
    return max(known) if known else None


def pipeline_stats(calls: Sequence[P2PCall], period_s: float | None = None) -> PipelineStats | None:
    """Stage count of a pipeline from its Send/Recv peers; None without P2P calls.

    With the step period ``period_s`` (training with pipeline parallelism), also the forward
    hand-offs per step and the bubble share (:func:`bubble_ratio`).

    A stage hands activations to the next stage and gradients to the previous one. With stages
    as equal blocks of consecutive ranks (pipeline the outermost parallel dimension, Megatron's
    and DeepSpeed's default layout; a pipeline-only communicator is the case of blocks of one)
    every hop spans the same rank distance d, the block size, and there are N/d stages. Hops
    of N - d are the interleaved schedule's wrap from the last stage to the first.

    Not derivable (``stages`` None, ``reason`` says why): without the callers' ranks (no
    ``Init COMPLETE`` line), on 2-rank communicators (PyTorch makes one per peer pair, so each
    shows a single hop, not the chain), or when the hops do not share one distance.
    """
    if not calls:
        return None
    sizes = np.asarray([c.nbytes for c in calls], dtype=np.float64)
    mb = Percentiles.of(sizes[np.isfinite(sizes)])
    nranks_seen = {c.nranks for c in calls if c.nranks is not None}
    n = max(nranks_seen) if nranks_seen else None

    def unknown(reason: str, stride: int | None = None) -> PipelineStats:
        return PipelineStats(None, stride, n, len(calls), mb, (), reason)

    ranked = [c for c in calls if c.rank is not None and c.nranks is not None]
    if not ranked:
        return unknown("the callers' ranks are unknown (no Init COMPLETE line in the log)")
    if len(nranks_seen) > 1:
        return unknown("Send/Recv on communicators of different sizes")
    assert n is not None
    if n <= 2:
        return unknown(
            "Send/Recv on 2-rank communicators (one per peer pair): each shows one hop, not "
            "the chain of stages"
        )
    distances = Counter(abs(c.peer - (c.rank or 0)) for c in ranked)
    d = min(distances)
    if d == 0 or any(k not in (d, n - d) for k in distances) or n % d:
        return unknown(
            "the Send/Recv peers are not one stage apart: the hops do not share one rank "
            f"distance ({sorted(distances)})"
        )
    stages = n // d
    if stages < 2:
        return unknown("a single stage", d)
    here = tuple(sorted({(c.rank or 0) // d for c in ranked}))
    m = _forward_sends_per_step(ranked, d, n, period_s) if period_s and period_s > 0 else None
    bubble = bubble_ratio(stages, m) if m else None
    return PipelineStats(stages, d, n, len(calls), mb, here, None, m, bubble)
