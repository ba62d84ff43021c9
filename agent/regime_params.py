"""The regime-specific parameters of one window: one composition for analyze and the live agent.

Training is described by T, B and D. Fine-tuning adds the ZeRO stage, collectives per step,
the per-layer gap and the latency share (:mod:`agent.sharding`); inference adds burst arrivals
(:mod:`agent.arrivals`) and AlltoAll / pipeline structure (:mod:`agent.p2p`). This module takes
the same inputs in both places (a network grid plus the estimate made of it, and a columnar
table of collective calls) so ``commpulse analyze`` and the live gauges cannot disagree.

Pure: arrays in, frozen dataclasses out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.arrivals import ArrivalStats, arrival_stats
from agent.estimate import Estimate, busier_direction
from agent.p2p import (
    AlltoAllStats,
    P2PCall,
    PipelineStats,
    alltoall_stats,
    group_alltoalls,
    pipeline_stats,
)
from agent.rates import Direction, GridSeries
from agent.regime import IDLE_BYTES_PER_S
from agent.sharding import DEFAULT_LATENCY_S, ShardingStats, sharding_from_codes, zero_stage
from collectors._base import CallKey

__all__ = [
    "MAX_P2P_CALLS",
    "CallTable",
    "RegimeParams",
    "arrivals_of",
    "comm_name",
    "p2p_calls",
    "regime_params",
    "sharding_of",
    "sparse_ops_of",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]

#: Send/Recv calls grouped into AlltoAlls at most (the newest): the grouping walks calls one
#: by one, and a few thousand hold hundreds of exchanges, plenty for rates and percentiles.
MAX_P2P_CALLS = 8192

_P2P_OPS = ("Send", "Recv")


@dataclass(frozen=True)
class CallTable:
    """Collective calls as columns: time (NaN: untimed), nccl-tests S (NaN: unknown) and key.

    ``key_ids`` index ``keys`` (who called, on which communicator, to which peer); -1 where the
    producer could not say. Rows are in log order. ``resolution_s`` is 0 when the times are
    NCCL's own, else how coarse they are (whole seconds, or stamped when read).
    """

    times: FloatArray
    nbytes: FloatArray
    key_ids: IntArray
    keys: Sequence[CallKey]
    resolution_s: float = 0.0

    def __len__(self) -> int:
        return int(self.times.size)

    def column(self, field: str) -> npt.NDArray[np.object_]:
        """One CallKey field per call (None where the key is unknown)."""
        values = np.asarray([getattr(k, field) for k in self.keys] + [None], dtype=object)
        return values[self.key_ids]  # -1 picks the trailing None


def comm_name(key: CallKey) -> str:
    """The communicator's name: its commId (the same in every process), else process:pointer."""
    return key.comm_id if key.comm_id else f"{key.process}:{key.comm}"


#: A communicator with under this share of the busiest one's calls is not the job's step.
MIN_COMM_CALL_SHARE = 0.05


#: Per communicator: (ranks, calls, ZeRO stage, reason).
_CommStages = dict[str, tuple[int, int, str, str]]


def _comm_stages(table: CallTable) -> _CommStages:
    """Per communicator: (ranks, calls, ZeRO stage, reason) from its own calls per caller."""
    known = table.key_ids[table.key_ids >= 0]
    per_key = np.bincount(known, minlength=len(table.keys)).tolist()
    counts: dict[str, dict[str, float]] = {}
    callers: dict[str, set[tuple[str, int]]] = {}
    ranks: dict[str, int] = {}
    for key, calls in zip(table.keys, per_key, strict=True):
        name = comm_name(key)
        ops = counts.setdefault(name, {})
        ops[key.op] = ops.get(key.op, 0.0) + calls
        callers.setdefault(name, set()).add((key.process, -1 if key.rank is None else key.rank))
        ranks[name] = max(ranks.get(name, 0), key.nranks or 0)
    out = {}
    for name, ops in counts.items():
        n = max(1, len(callers[name]))
        stage, why = zero_stage(
            ops.get("AllReduce", 0.0) / n,
            ops.get("AllGather", 0.0) / n,
            ops.get("ReduceScatter", 0.0) / n,
        )
        out[name] = (ranks[name], int(sum(ops.values())), stage, why)
    return out


def _largest_comm(
    table: CallTable, stages: _CommStages
) -> tuple[str, int | None, npt.NDArray[np.bool_]] | None:
    """(name, nranks, row mask) of the communicator with the most ranks, then the most calls.

    Only communicators with at least 5 % of the busiest one's calls count. The data-parallel
    communicator is the largest: its ReduceScatter/AllGather are ZeRO's, while a smaller
    tensor-parallel communicator's AllGathers would blur the stage ratio. Ties go to the
    smallest name, so every host names the same one.
    """
    if not bool((table.key_ids >= 0).any()):
        return None
    busiest = max(calls for _, calls, _, _ in stages.values())
    # A communicator of an init barrier or a one-off broadcast is no step's: the world comm of
    # a TP x DP split logs one AllReduce, and was taken over the DP comm's thousands of calls.
    active = [k for k, (_, calls, _, _) in stages.items() if calls >= MIN_COMM_CALL_SHARE * busiest]
    best = min(active, key=lambda k: (-stages[k][0], -stages[k][1], k))
    member = np.asarray([comm_name(k) == best for k in table.keys] + [False])
    return best, stages[best][0] or None, member[table.key_ids]


def _disagreeing(stats: ShardingStats, stages: _CommStages) -> ShardingStats:
    """The stage "unknown" where a communicator as large as the chosen one reads another stage.

    Tensor and data parallel of one size (Megatron, TP 8 beside DP 8) tie on ranks, and the
    busier one, TP's activation AllReduces, was read as "ddp_or_zero1 (AllReduce gradient
    sync)" beside the DP communicator's ReduceScatter and AllGather of the distributed
    optimizer. Which is the gradient sync the log does not say: both are named.
    """
    mine = stages.get(stats.comm or "")
    if mine is None:
        return stats
    busiest = max(calls for _, calls, _, _ in stages.values())
    others = [
        (name, stage, why)
        for name, (ranks, calls, stage, why) in sorted(stages.items())
        if name != stats.comm
        and ranks == mine[0]
        and calls >= MIN_COMM_CALL_SHARE * busiest
        and stage not in (stats.stage, "unknown")
    ]
    if not others or stats.stage == "unknown":
        return stats
    listed = "; ".join(f"{name}: {stage} ({why})" for name, stage, why in others)
    return replace(
        stats,
        stage="unknown",
        reason=(
            f"communicators of {mine[0]} ranks read different stages, {stats.comm}: "
            f"{stats.stage} ({stats.reason}); {listed}: tensor and data parallel of one size? "
            "The log does not say which one syncs the gradients"
        ),
    )


def sharding_of(
    table: CallTable,
    period_s: float | None,
    *,
    latency_s: float | None = None,
    latency_source: str = "given",
    nranks: int | None = None,
) -> ShardingStats | None:
    """ZeRO stage and per-step collectives of the largest communicator (see agent.sharding).

    ``latency_s`` None: the default per-collective latency (10 µs), named as such. ``nranks``
    stands in for the communicator's size when no line gave it.
    """
    stages = _comm_stages(table)
    largest = _largest_comm(table, stages)
    if largest is None:
        return None
    name, comm_ranks, rows = largest
    if latency_s is None:
        latency_s, latency_source = DEFAULT_LATENCY_S, "default"
    # Integer codes per call through the keys: tens of thousands of calls, a few hundred keys.
    ops = sorted({k.op for k in table.keys})
    # Within one communicator each rank is a caller: a process that drives two GPUs is two
    # (its calls counted as one caller's read 2x the collectives per step).
    callers = sorted({(k.process, -1 if k.rank is None else k.rank) for k in table.keys})
    code = {c: i for i, c in enumerate(callers)}
    op_of_key = np.asarray([ops.index(k.op) for k in table.keys] + [-1], dtype=np.int64)
    proc_of_key = np.asarray(
        [code[(k.process, -1 if k.rank is None else k.rank)] for k in table.keys] + [-1],
        dtype=np.int64,
    )
    ids = table.key_ids[rows]
    stats = sharding_from_codes(
        op_of_key[ids],
        ops,
        table.nbytes[rows],
        table.times[rows],
        proc_of_key[ids],
        period_s=period_s,
        comm=name,
        nranks=comm_ranks or nranks,
        latency_s=latency_s,
        latency_source=latency_source,
        resolution_s=table.resolution_s,
    )
    return _disagreeing(stats, stages) if stats is not None else None


def p2p_calls(table: CallTable, limit: int | None = MAX_P2P_CALLS) -> list[P2PCall]:
    """The newest ``limit`` (None: all) Send/Recv calls with their peers, in log order."""
    p2p = np.asarray([k.op in _P2P_OPS for k in table.keys] + [False])
    rows = np.flatnonzero(p2p[table.key_ids])
    if limit is not None:
        rows = rows[-limit:]
    out: list[P2PCall] = []
    for row, kid in zip(rows.tolist(), table.key_ids[rows].tolist(), strict=True):
        key = table.keys[kid]
        out.append(
            P2PCall(
                process=key.process,
                comm=key.comm,
                op=key.op,
                peer=key.peer,
                nbytes=float(table.nbytes[row]),
                time_s=float(table.times[row]),
                rank=key.rank,
                nranks=key.nranks,
            )
        )
    return out


def sparse_ops_of(
    table: CallTable,
    *,
    nranks: int | None = None,
    period_s: float | None = None,
    max_p2p_calls: int | None = MAX_P2P_CALLS,
) -> tuple[AlltoAllStats | None, PipelineStats | None]:
    """AlltoAll (named, and grouped Send/Recv) size and rate; pipeline stages and bubble.

    Each is None when the table holds no such traffic. ``nranks`` is the job's world size
    when known (else the AlltoAll communicators'); ``period_s`` T for the bubble share;
    ``max_p2p_calls`` the newest Send/Recv calls grouped at most (None: all, for files).
    """
    grouped, rest = group_alltoalls(p2p_calls(table, max_p2p_calls))
    native_key = np.asarray([k.op == "AlltoAll" for k in table.keys] + [False])
    native = native_key[table.key_ids]
    timed = table.times[np.isfinite(table.times)]
    span = float(timed.max() - timed.min()) if timed.size >= 2 else None
    a2a = alltoall_stats(
        native_bytes=table.nbytes[native],
        native_processes=table.column("process")[native].tolist(),
        grouped=grouped,
        nranks=nranks,
        span_s=span,
    )
    return a2a, pipeline_stats(rest, period_s)


def arrivals_of(
    network: Mapping[Direction, GridSeries], est: Estimate
) -> tuple[str, GridSeries, ArrivalStats] | None:
    """(direction, grid, burst arrival statistics) of the series the estimator used.

    The estimator's own segmentation is reused when it saw the whole series (no period, so no
    cut to whole periods); otherwise the same segmentation is redone on the whole series.
    """
    chosen = busier_direction(network) if network else None
    if chosen is None:
        return None
    direction, grid = chosen
    finite = grid.rate[np.isfinite(grid.rate)]
    quiet = bool(finite.size and float(finite.mean()) < IDLE_BYTES_PER_S)
    detail = est.burst_detail
    same = (
        est.period_s is None
        and detail is not None
        and detail.on_mask is not None
        and detail.on_mask.size == grid.rate.size
    )
    stats = arrival_stats(
        grid.rate, grid.dt, period_s=est.period_s, quiet=quiet, stats=detail if same else None
    )
    return direction, grid, stats


@dataclass(frozen=True)
class RegimeParams:
    """Everything regime-specific of one window; each part None when its data is absent."""

    arrivals: ArrivalStats | None = None
    arrival_direction: str | None = None
    #: Grid time of the window's first sample: burst offsets in ``arrivals`` count from it.
    arrivals_t0: float = 0.0
    sharding: ShardingStats | None = None
    alltoall: AlltoAllStats | None = None
    pipeline: PipelineStats | None = None


def regime_params(
    network: Mapping[Direction, GridSeries],
    est: Estimate,
    calls: CallTable | None,
    *,
    latency_s: float | None = None,
    latency_source: str = "given",
) -> RegimeParams:
    """Arrivals of the network series, sharding and sparse-op structure of the calls."""
    arrivals = arrivals_of(network, est)
    sharding = a2a = pipe = None
    if calls is not None and len(calls):
        period = est.period_s if est.period_s is not None and math.isfinite(est.period_s) else None
        sharding = sharding_of(calls, period, latency_s=latency_s, latency_source=latency_source)
        a2a, pipe = sparse_ops_of(calls, nranks=est.nranks, period_s=period)
    return RegimeParams(
        arrivals=arrivals[2] if arrivals else None,
        arrival_direction=arrivals[0] if arrivals else None,
        arrivals_t0=arrivals[1].t0 if arrivals else 0.0,
        sharding=sharding,
        alltoall=a2a,
        pipeline=pipe,
    )
