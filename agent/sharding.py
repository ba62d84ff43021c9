"""Fine-tuning (ZeRO / FSDP) characterisation from the NCCL log's per-call records.

Sharded data parallelism replaces the one big gradient AllReduce of a step by a train of
smaller ReduceScatter and AllGather calls, one or two per layer, so latency, not bandwidth,
accumulates (DOMAIN.md, fine-tuning: 10 µs × 2 collectives × 100 layers ≈ 2 ms a step). This
module reads, for the job's largest communicator, which ZeRO stage the collective mix implies,
how many collectives a step makes, how big they are, how far apart they come (the per-layer
gap) and what share of the step the per-collective latency costs. Pure: arrays in, a dataclass
out.

The stage rule counts calls of one process, summed over the window (a ratio, so T is not
needed for it):

* AllReduce and no ReduceScatter → ``ddp_or_zero1``: gradients are all-reduced whole. ZeRO-1
  shards only the optimizer state and keeps that AllReduce (plus, in some implementations, an
  AllGather of the updated parameters), so the log cannot tell it from DDP.
* ReduceScatter + AllGather, AG/RS in [0.75, 1.35] → ``zero2``: gradients reduce-scattered in
  the backward pass, parameters gathered once per step after the sharded optimizer step (also
  FSDP ``SHARD_GRAD_OP``, which gathers in the forward pass only).
* AG/RS in [1.65, 2.5] → ``zero3_or_fsdp_full_shard``: parameters are freed after use, so they
  are gathered again in the backward pass: two AllGathers per ReduceScatter, per layer.
* anything else → ``unknown`` with the reason: fewer than :data:`MIN_CALLS` of the deciding op,
  no AllReduce/ReduceScatter/AllGather at all, ReduceScatter without AllGather, or a ratio in
  between or above.

Limits of the rule: frameworks bucket small layers into one call (DeepSpeed's
``reduce_bucket_size`` / ``allgather_bucket_size``, FSDP wrapping units), which changes the
calls per step but hardly the ratio as long as both directions bucket alike; ZeRO-3 keeps some
parameters gathered between forward and backward (``stage3_max_reuse_distance``,
``stage3_param_persistence_threshold``), which pulls the ratio below 2 (hence the band down to
1.65); prefetching moves calls earlier, not their number; tensor-parallel AllGathers on the
same communicator push the ratio up (on a separate, smaller TP communicator they are ignored:
only the largest communicator is read). The band edges sit halfway (in log terms, roughly)
between the ideal 1 and 2, so bucketing noise of ±30 % keeps the verdict.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.arrivals import Percentiles, percentiles_json
from agent.ascending import finite_ascending

__all__ = [
    "DEFAULT_LATENCY_S",
    "MIN_CALLS",
    "MIN_GAPS",
    "PAUSE_PERIODS",
    "STEP_GAP_FRACTION",
    "ZERO2_RATIO",
    "ZERO3_RATIO",
    "ZERO_STAGES",
    "ShardingStats",
    "calls_per_step",
    "latency_per_step",
    "layer_gap",
    "sharding_from_codes",
    "sharding_stats",
    "steps_spanned",
    "zero_stage",
]

FloatArray = npt.NDArray[np.float64]

#: Per-collective latency when nothing measured it: DOMAIN.md's example RTT (10 µs), about
#: what a small NCCL collective costs across an InfiniBand/RoCE fabric.
DEFAULT_LATENCY_S = 10e-6
#: Fewest calls (per process) of the op that decides the stage; below, the mix says nothing.
MIN_CALLS = 8
#: Fewest in-step gaps for a per-layer gap.
MIN_GAPS = 4
#: AG/RS call ratio band of ZeRO-2 (one gather per reduce-scatter).
ZERO2_RATIO = (0.75, 1.35)
#: AG/RS call ratio band of ZeRO-3 / FSDP FULL_SHARD (gather in forward and in backward).
ZERO3_RATIO = (1.65, 2.5)
#: A gap between two calls longer than this fraction of T is a step boundary (the optimizer
#: step, data loading), not a layer.
STEP_GAP_FRACTION = 0.25

#: Every verdict :func:`zero_stage` gives (the exporter's bounded label set).
ZERO_STAGES = ("ddp_or_zero1", "zero2", "zero3_or_fsdp_full_shard", "unknown")

_SHARDING_OPS = ("AllGather", "ReduceScatter")
_STAGE_OPS = ("AllReduce", "AllGather", "ReduceScatter")


#: A gather ratio this close to 2k (k ≥ 2) may be ZeRO-3 under k-step gradient accumulation.
ACCUMULATION_MATCH = 0.05


def zero_stage(allreduce: float, allgather: float, reduce_scatter: float) -> tuple[str, str]:
    """(stage, reason) from one process's call counts of the three ops (see the module doc)."""
    if allreduce + allgather + reduce_scatter <= 0:
        return "unknown", "no AllReduce, ReduceScatter or AllGather in the log"
    if reduce_scatter <= 0:
        if allreduce >= MIN_CALLS:
            why = "AllReduce gradient sync, no ReduceScatter"
            if allgather > 0:
                why += " (the AllGathers: ZeRO-1's parameter gather or tensor parallel)"
            return "ddp_or_zero1", why
        if allgather > 0 and allreduce <= 0:
            return "unknown", "AllGather without ReduceScatter or AllReduce: not a ZeRO pattern"
        return "unknown", f"too few calls: {allreduce:.0f} AllReduce per process (< {MIN_CALLS})"
    if allgather <= 0:
        return "unknown", "ReduceScatter without AllGather: not a ZeRO pattern"
    if reduce_scatter < MIN_CALLS:
        return "unknown", (
            f"too few calls: {reduce_scatter:.0f} ReduceScatter per process (< {MIN_CALLS})"
        )
    ratio = allgather / reduce_scatter
    text = f"{ratio:.2f} AllGather per ReduceScatter"
    if ZERO2_RATIO[0] <= ratio <= ZERO2_RATIO[1]:
        return "zero2", f"{text}: parameters gathered once per step"
    if ZERO3_RATIO[0] <= ratio <= ZERO3_RATIO[1]:
        return "zero3_or_fsdp_full_shard", f"{text}: parameters gathered in forward and backward"
    if ratio > ZERO3_RATIO[1]:
        # ZeRO-3 / FSDP under gradient accumulation gathers in every micro-step and
        # reduce-scatters in the last: 2k per ReduceScatter (a probe's FSDP log, k = 4, was
        # only asked about tensor parallelism).
        k = round(ratio / 2.0)
        if k >= 2 and abs(ratio / (2.0 * k) - 1.0) <= ACCUMULATION_MATCH:
            return "unknown", (
                f"{text}: more than ZeRO-3 makes; ZeRO-3 or FSDP accumulating gradients over {k} "
                "micro-steps (gathers in each, one ReduceScatter), or tensor-parallel "
                "AllGathers mixed in?"
            )
        return "unknown", f"{text}: more than ZeRO-3 makes (tensor-parallel AllGathers mixed in?)"
    if ratio < ZERO2_RATIO[0]:
        return "unknown", f"{text}: fewer than one gather per reduce-scatter"
    return "unknown", f"{text}: between ZeRO-2 (1) and ZeRO-3 (2)"


#: Calls further apart than this many periods are a pause of the job (start-up, an
#: evaluation, a checkpoint), not steps.
PAUSE_PERIODS = 2.0


def steps_spanned(times_s: FloatArray, period_s: float, resolution_s: float = 0.0) -> int:
    """How many steps of ``period_s`` calls at ``times_s`` span, pauses left out.

    Counted over the whole span, a job that made one call at start-up and its steps a minute
    later, or paused to checkpoint, had its bytes and calls per step divided by the silent
    steps too (0.14x of the truth after a 60 s start-up). Each run of calls without a gap of
    ``PAUSE_PERIODS`` periods (and two of the times' ``resolution_s``: whole-second times
    of 0.45 s steps are a second apart) counts its own span's steps.
    """
    t = finite_ascending(times_s)
    if t.size == 0 or not (period_s > 0):
        return 0
    cuts = np.flatnonzero(np.diff(t) > PAUSE_PERIODS * period_s + 2.0 * resolution_s) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [t.size])) - 1
    return int(np.sum(np.rint((t[ends] - t[starts]) / period_s)) + starts.size)


def calls_per_step(times_s: FloatArray, period_s: float) -> tuple[float | None, int]:
    """(median calls per step, complete steps) of one process's sorted call times.

    The window is cut into consecutive periods of length T from the first call; the last,
    incomplete one is dropped, and so are the empty ones (a pause: every step makes calls).
    A period boundary that falls inside a layer train moves a few calls from one window to
    the next, so the median of the windows, not a mean, is reported (most boundaries fall in
    the gap between steps when the train is shorter than T).
    """
    t = finite_ascending(times_s)
    if t.size < 2 or not (period_s > 0):
        return None, 0
    steps = int((t[-1] - t[0]) // period_s)
    if steps < 1:
        return None, 0
    index = np.floor((t - t[0]) / period_s).astype(np.int64)
    counts = np.bincount(index[index < steps], minlength=steps)
    counts = counts[counts > 0]
    if counts.size == 0:
        return None, 0
    return float(np.median(counts)), int(counts.size)


def calls_per_step_overall(
    times_s: FloatArray, period_s: float, resolution_s: float = 0.0
) -> tuple[float | None, int]:
    """(calls per step, steps) of one process's calls, counted over the whole window.

    For coarse times (whole seconds, stamped when read), which cannot cut the window into
    steps when T is shorter than they are fine: the calls over the steps their span holds.
    """
    t = times_s[np.isfinite(times_s)]
    if t.size < 2 or not (period_s > 0):
        return None, 0
    steps = steps_spanned(t, period_s, resolution_s)
    return t.size / steps, steps


def layer_gap(times_s: FloatArray, period_s: float | None) -> float | None:
    """Median time between consecutive calls inside a step (gaps ≥ T/4 are step boundaries).

    Without T every gap counts; one step boundary per train of tens of layers barely moves a
    median.
    """
    gaps = np.diff(finite_ascending(times_s))
    if period_s is not None and period_s > 0:
        gaps = gaps[gaps < STEP_GAP_FRACTION * period_s]
    if gaps.size < MIN_GAPS:
        return None
    return float(np.median(gaps))


def latency_per_step(collectives: float, latency_s: float) -> float:
    """Latency a step pays: collectives per step × per-collective latency (DOMAIN.md)."""
    return collectives * latency_s


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


@dataclass(frozen=True)
class ShardingStats:
    """The ``"sharding"`` object of ``analyze --json``; None where the data cannot say.

    Counts are per process of the largest communicator (the median over its processes on this
    host). ``latency_share`` = collectives per step × ``latency_s`` / T.
    """

    comm: str | None
    nranks: int | None
    processes: int
    stage: str
    reason: str
    calls_per_process: dict[str, float]
    allgather_per_reduce_scatter: float | None
    period_s: float | None
    steps: int
    collectives_per_step: float | None
    allgather_per_step: float | None
    reduce_scatter_per_step: float | None
    message_bytes: Percentiles | None
    layer_gap_s: float | None
    latency_s: float
    latency_source: str
    latency_per_step_s: float | None
    latency_share: float | None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (keys as in the README)."""
        return {
            "comm": self.comm,
            "nranks": self.nranks,
            "processes": self.processes,
            "zero_stage": self.stage,
            "reason": self.reason,
            "calls_per_process": dict(self.calls_per_process),
            "allgather_per_reduce_scatter": self.allgather_per_reduce_scatter,
            "period_s": self.period_s,
            "steps": self.steps,
            "collectives_per_step": self.collectives_per_step,
            "allgather_per_step": self.allgather_per_step,
            "reduce_scatter_per_step": self.reduce_scatter_per_step,
            "message_bytes": percentiles_json(self.message_bytes),
            "layer_gap_s": self.layer_gap_s,
            "latency_per_collective_s": self.latency_s,
            "latency_source": self.latency_source,
            "latency_per_step_s": self.latency_per_step_s,
            "latency_share": self.latency_share,
            "notes": list(self.notes),
        }


def _codes(values: Sequence[str] | npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Integer code per value and the distinct values (in order of first appearance)."""
    index: dict[str, int] = {}
    codes = np.fromiter(
        (index.setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values)
    )
    return codes, list(index)


def sharding_stats(
    ops: Sequence[str] | npt.NDArray[Any],
    nbytes: FloatArray,
    times_s: FloatArray,
    process: Sequence[str] | npt.NDArray[Any],
    *,
    period_s: float | None,
    comm: str | None = None,
    nranks: int | None = None,
    latency_s: float = DEFAULT_LATENCY_S,
    latency_source: str = "default",
) -> ShardingStats | None:
    """Stage, per-step counts, sizes, layer gap and latency share of one communicator's calls.

    ``ops``, ``nbytes`` (nccl-tests S, NaN if unknown), ``times_s`` (NaN if untimed) and
    ``process`` hold one entry per COLL record. Calls other than AllReduce, AllGather and
    ReduceScatter are ignored. None when there are none of those (nothing to characterise).
    """
    op_codes, op_names = _codes(ops)
    proc_codes, _ = _codes(process)
    return sharding_from_codes(
        op_codes, op_names, nbytes, times_s, proc_codes,
        period_s=period_s, comm=comm, nranks=nranks, latency_s=latency_s,
        latency_source=latency_source,
    )  # fmt: skip


def sharding_from_codes(
    op_codes: npt.NDArray[np.integer[Any]],
    op_names: Sequence[str],
    nbytes: FloatArray,
    times_s: FloatArray,
    process_codes: npt.NDArray[np.integer[Any]],
    *,
    period_s: float | None,
    comm: str | None = None,
    nranks: int | None = None,
    latency_s: float = DEFAULT_LATENCY_S,
    latency_source: str = "default",
    resolution_s: float = 0.0,
) -> ShardingStats | None:
    """:func:`sharding_stats` with ops and processes as integer codes (``op_names[code]``).

    The live agent reads tens of thousands of calls a hop: integer compares, not string ones.
    Times as coarse as ``resolution_s`` (whole seconds, stamped when read) count the calls per
    step over the whole window (:func:`calls_per_step_overall`) and time no layer gap.
    """
    code_of = {name: i for i, name in enumerate(op_names)}
    stage_code = {op: code_of.get(op, -1) for op in _STAGE_OPS}
    ops_c = np.asarray(op_codes, dtype=np.int64)
    keep = np.isin(ops_c, [c for c in stage_code.values() if c >= 0])
    if not keep.any():
        return None
    op_arr = ops_c[keep]
    proc_arr = np.asarray(process_codes, dtype=np.int64)[keep]
    sizes = np.asarray(nbytes, dtype=np.float64)[keep]
    times = np.asarray(times_s, dtype=np.float64)[keep]
    names = np.unique(proc_arr)
    n_proc = int(names.size)
    is_op = {op: op_arr == code for op, code in stage_code.items()}
    per_proc = {op: float(np.count_nonzero(is_op[op])) / n_proc for op in _STAGE_OPS}
    stage, reason = zero_stage(
        per_proc["AllReduce"], per_proc["AllGather"], per_proc["ReduceScatter"]
    )
    ratio = per_proc["AllGather"] / per_proc["ReduceScatter"] if per_proc["ReduceScatter"] else None
    notes: list[str] = []
    total_bytes = {op: float(np.nansum(sizes[is_op[op]])) for op in _STAGE_OPS}
    if stage.startswith("zero") and total_bytes["AllReduce"] > (
        total_bytes["AllGather"] + total_bytes["ReduceScatter"]
    ):
        notes.append("AllReduce carries most bytes: sharding mixed with plain data parallel")
    # Per process: calls per step and in-step gaps (the sharding train, or every call for DDP).
    t_ok = period_s is not None and period_s > 0
    gap_ops = _SHARDING_OPS if per_proc["ReduceScatter"] else _STAGE_OPS
    in_gap = np.logical_or.reduce([is_op[op] for op in gap_ops])
    all_steps: list[float | None] = []
    ag_steps: list[float | None] = []
    rs_steps: list[float | None] = []
    gaps: list[float | None] = []
    steps_seen = 0
    timed = bool(np.isfinite(times).any())
    coarse = resolution_s > 0
    per_step_of = (
        functools.partial(calls_per_step_overall, resolution_s=resolution_s)
        if coarse
        else calls_per_step
    )
    for name in names.tolist():
        mine = proc_arr == name
        if t_ok and timed:
            assert period_s is not None
            n, steps = per_step_of(times[mine], period_s)
            all_steps.append(n)
            ag_steps.append(per_step_of(times[mine & is_op["AllGather"]], period_s)[0])
            rs_steps.append(per_step_of(times[mine & is_op["ReduceScatter"]], period_s)[0])
            steps_seen = max(steps_seen, steps)
        gaps.append(None if coarse else layer_gap(times[mine & in_gap], period_s))
    if not timed:
        notes.append("the NCCL log has no timestamps: no calls per step or layer gap")
    elif coarse:
        notes.append(
            f"the calls are timed to {resolution_s:g} s only: calls per step counted over the "
            "whole window, no layer gap"
        )
    elif not t_ok:
        notes.append("no sync period T: no calls per step or latency share")
        if stage == "ddp_or_zero1":
            # A tensor-parallel inference server all-reduces every layer of every token, at
            # random: a probe's vLLM log read "AllReduce gradient sync", no word of doubt.
            reason += "; but no steps were found: tensor-parallel inference all-reduces too"
    per_step = _median(all_steps)
    lat_step = latency_per_step(per_step, latency_s) if per_step is not None else None
    share = lat_step / period_s if lat_step is not None and period_s else None
    if latency_source.startswith("inspector"):
        notes.append(
            "latency from the Inspector's P50 kernel time, which includes the transfer: "
            "the share is then the collectives' whole time in the step"
        )
    finite = sizes[np.isfinite(sizes)]
    return ShardingStats(
        comm=comm,
        nranks=nranks,
        processes=n_proc,
        stage=stage,
        reason=reason,
        calls_per_process={op: v for op, v in per_proc.items() if v > 0},
        allgather_per_reduce_scatter=ratio,
        period_s=period_s if t_ok else None,
        steps=steps_seen,
        collectives_per_step=per_step,
        allgather_per_step=_median(ag_steps) if per_proc["AllGather"] else None,
        reduce_scatter_per_step=_median(rs_steps) if per_proc["ReduceScatter"] else None,
        message_bytes=Percentiles.of(finite),
        layer_gap_s=_median(gaps),
        latency_s=latency_s,
        latency_source=latency_source,
        latency_per_step_s=lat_step,
        latency_share=share if share is None or math.isfinite(share) else None,
        notes=tuple(notes),
    )
