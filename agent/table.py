"""The capacity-planning parameter table of ``commpulse analyze --table csv|json|md``.

One row for the job as this host saw it (S, N, T, B, D, V, the collective mix and the regime;
for aperiodic traffic also λ, the inter-arrival CV and the burst size and duration
percentiles; with an NCCL log of AllReduce/AllGather/ReduceScatter the ZeRO stage, collectives
per step, per-layer gap and latency share), an ``alltoall`` and a ``pipeline`` row when the
NCCL log has that traffic, one per NCCL communicator when a log was given, and one per
what-if. A what-if rescales the measured step with the DOMAIN.md formulas (pure functions, no I/O):

* per-rank wire volume of a collective of S bytes on N ranks: S times the nccl-tests bus
  factor: 2(N-1)/N for AllReduce, (N-1)/N for AllGather, ReduceScatter and AlltoAll, 1 for
  Broadcast, Reduce and point-to-point; weighted by the step's collective mix;
* communication time = wire volume / link rate, so it scales with the bus factor, with S and
  with 1/bandwidth, from the measured communication time D·T;
* compute time T·(1-D) stays unless the what-if scales it;
* T' = compute' + communication', D' = communication' / T'. D' > 0.5: network-bound.

The model is the DOMAIN.md square wave: communication is not overlapped with compute (with a
GPU signal, D is the exposed part, which is what adds to T). Ring formulas barely change with
N (2(N-1)/N tends to 2): growing N raises D only through a lower effective bandwidth (more
hops, oversubscribed uplinks), which a ``bandwidth=`` what-if expresses.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.errors import ConfigError
from agent.estimate import Estimate

__all__ = [
    "COLUMNS",
    "WhatIf",
    "bus_factor",
    "mix_factor",
    "parse_what_if",
    "planning_rows",
    "predict",
    "render_rows",
]

#: The table's columns, in order (units in the names).
COLUMNS = (
    "row",
    "regime",
    "nranks",
    "collective_bytes_per_step",
    "period_s",
    "burst_bandwidth_bytes_per_s",
    "duty_cycle",
    "bytes_per_iteration",
    "compute_s",
    "communication_s",
    "network_bound",
    "collective_mix",
    "calls",
    "message_bytes_p50",
    "message_bytes_p99",
    "latency_p50_s",
    "latency_p99_s",
    "bus_bandwidth_p50_bytes_per_s",
    "note",
    "arrival_rate_hz",
    "inter_arrival_cv",
    "arrival_pattern",
    "burst_bytes_p50",
    "burst_bytes_p99",
    "burst_duration_p50_s",
    "burst_duration_p99_s",
    "pipeline_stages",
    "pipeline_bubble_ratio",
    "zero_stage",
    "collectives_per_step",
    "layer_gap_s",
    "latency_share",
)


def bus_factor(op: str, nranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: per-rank wire bytes per byte of S."""
    n = max(nranks, 1)
    if op == "AllReduce":
        return 2.0 * (n - 1) / n
    if op in ("AllGather", "ReduceScatter", "AlltoAll"):
        return (n - 1) / n
    return 1.0  # Broadcast, Reduce, Send, Recv, Gather, Scatter, ...


def mix_factor(mix: Mapping[str, tuple[int, int]], nranks: int) -> float:
    """The bus factor of a collective mix, weighted by each op's bytes (AllReduce if none)."""
    total = sum(b for _, b in mix.values())
    if total <= 0:
        return bus_factor("AllReduce", nranks)
    return sum(bus_factor(op, nranks) * b / total for op, (_, b) in mix.items())


@dataclass(frozen=True)
class WhatIf:
    """A change to the measured job: absolute N, and factors on S, bandwidth and compute."""

    nranks: int | None = None
    size: float = 1.0
    bandwidth: float = 1.0
    bandwidth_bytes_per_s: float | None = None
    compute: float = 1.0
    text: str = ""


def _factor(key: str, value: str) -> float:
    body = value[1:] if value[:1] in "x*" else value
    try:
        f = float(body)
    except ValueError:
        raise ConfigError(f"--what-if {key}={value}: not a number") from None
    if not (math.isfinite(f) and f > 0):
        raise ConfigError(f"--what-if {key}={value}: must be positive")
    return f


def parse_what_if(spec: str) -> WhatIf:
    """``nranks=128,bandwidth=x0.5,size=x2,compute=x2`` (``bandwidth=50e9`` is absolute B/s)."""
    fields: dict[str, Any] = {"text": spec}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        value = value.strip()
        if not sep or not value:
            raise ConfigError(
                f"--what-if {part!r}: write key=value (nranks, bandwidth, size, compute)"
            )
        if key == "nranks":
            n = _factor(key, value)
            if value[:1] in "x*":
                raise ConfigError("--what-if nranks takes a number of ranks, not a factor")
            if n != int(n) or n < 2:
                raise ConfigError(f"--what-if nranks={value}: an integer of at least 2")
            fields["nranks"] = int(n)
        elif key == "bandwidth":
            if value[:1] in "x*":
                fields["bandwidth"] = _factor(key, value)
            else:
                fields["bandwidth_bytes_per_s"] = _factor(key, value)
        elif key in ("size", "compute"):
            fields[key] = _factor(key, value)
        else:
            raise ConfigError(
                f"--what-if {key}: unknown; use nranks=N, bandwidth=xF or B/s, size=xF, compute=xF"
            )
    if len(fields) == 1:
        raise ConfigError("--what-if: nothing to change")
    return WhatIf(**fields)


@dataclass(frozen=True)
class Prediction:
    """T, D and their parts after a what-if."""

    period_s: float
    duty_cycle: float
    compute_s: float
    communication_s: float

    @property
    def network_bound(self) -> bool:
        """D > 0.5: the network, not the GPUs, sets the step time."""
        return self.duty_cycle > 0.5


def predict(
    *,
    period_s: float,
    duty_cycle: float,
    nranks: int,
    mix: Mapping[str, tuple[int, int]],
    burst_bandwidth: float | None,
    what_if: WhatIf,
) -> Prediction:
    """The step after ``what_if``, from the measured T and D (DOMAIN.md formulas)."""
    comm = duty_cycle * period_s
    compute = (period_s - comm) * what_if.compute
    n2 = what_if.nranks or nranks
    scale = mix_factor(mix, n2) / mix_factor(mix, nranks) * what_if.size
    bw = what_if.bandwidth
    if what_if.bandwidth_bytes_per_s is not None:
        if burst_bandwidth is None or burst_bandwidth <= 0:
            raise ConfigError(
                "--what-if bandwidth=B/s needs a measured B: give --counters or --pcap"
            )
        bw = what_if.bandwidth_bytes_per_s / burst_bandwidth
    comm2 = comm * scale / bw
    t2 = compute + comm2
    return Prediction(
        period_s=t2,
        duty_cycle=comm2 / t2 if t2 > 0 else 0.0,
        compute_s=compute,
        communication_s=comm2,
    )


def _mix_text(mix: Mapping[str, tuple[int, int]]) -> str:
    total = sum(b for _, b in mix.values())
    if total <= 0:
        return " ".join(sorted(mix))
    parts = sorted(mix.items(), key=lambda kv: -kv[1][1])
    return " ".join(f"{op} {100.0 * b / total:.0f}%" for op, (_, b) in parts)


def planning_rows(
    est: Estimate,
    *,
    communicators: Sequence[Mapping[str, Any]] = (),
    what_ifs: Sequence[WhatIf] = (),
    inspector_ops: Mapping[str, Mapping[str, Any]] | None = None,
    arrivals: Mapping[str, Any] | None = None,
    alltoall: Mapping[str, Any] | None = None,
    pipeline: Mapping[str, Any] | None = None,
    sharding: Mapping[str, Any] | None = None,
    capture: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The table: the job, its communicators, GPU-timed ops (Inspector), then each what-if.

    ``capture`` (the ``analyze --json`` object) adds a ``roce ack`` row with the RC ACK round
    trip percentiles of a packet capture, when it matched any.

    ``arrivals``, ``alltoall`` and ``pipeline`` are the ``analyze --json`` objects of those
    names: burst arrival statistics go into the job row when the traffic has no period (the
    inference view; a periodic job is described by T, B and D), the AlltoAll and pipeline
    structure into rows of their own. ``sharding`` (the fine-tuning view: ZeRO stage,
    collectives per step, per-layer gap, latency share) goes into the job row.
    """
    t, d = est.period_s, est.duty_cycle
    comm = d * t if t is not None and d is not None else None
    job: dict[str, Any] = {
        "row": "job",
        "regime": est.regime,
        "nranks": est.nranks,
        "collective_bytes_per_step": est.step_bytes,
        "period_s": t,
        "burst_bandwidth_bytes_per_s": est.burst_bandwidth,
        "duty_cycle": d,
        "bytes_per_iteration": est.bytes_per_iteration,
        "compute_s": t - comm if t is not None and comm is not None else None,
        "communication_s": comm,
        "network_bound": d > 0.5 if d is not None else None,
        "collective_mix": _mix_text(est.collectives) if est.collectives else None,
        "calls": sum(c for c, _ in est.collectives.values()) if est.collectives else None,
        "note": f"D from {est.duty_cycle_source}" if est.duty_cycle_source else None,
    }
    if arrivals and t is None and arrivals.get("bursts"):
        sizes = arrivals.get("burst_bytes") or {}
        durations = arrivals.get("burst_duration_s") or {}
        job.update(
            arrival_rate_hz=arrivals.get("arrival_rate_hz"),
            inter_arrival_cv=arrivals.get("inter_arrival_cv"),
            arrival_pattern=arrivals.get("verdict"),
            burst_bytes_p50=sizes.get("p50"),
            burst_bytes_p99=sizes.get("p99"),
            burst_duration_p50_s=durations.get("p50"),
            burst_duration_p99_s=durations.get("p99"),
        )
    if sharding:
        job.update(
            zero_stage=sharding.get("zero_stage"),
            collectives_per_step=sharding.get("collectives_per_step"),
            layer_gap_s=sharding.get("layer_gap_s"),
            latency_share=sharding.get("latency_share"),
        )
    rows = [job]
    if alltoall:
        sizes = alltoall.get("message_bytes") or {}
        grouped = alltoall.get("grouped_send_recv_calls")
        rows.append(
            {
                "row": "alltoall",
                "nranks": alltoall.get("nranks"),
                "collective_mix": "AlltoAll",
                "calls": alltoall.get("calls"),
                "message_bytes_p50": sizes.get("p50"),
                "message_bytes_p99": sizes.get("p99"),
                "arrival_rate_hz": alltoall.get("call_rate_per_rank_hz"),
                "note": "arrival rate = calls per second per rank"
                + (f"; {grouped} from grouped Send/Recv" if grouped else ""),
            }
        )
    if pipeline:
        sizes = pipeline.get("message_bytes") or {}
        rows.append(
            {
                "row": "pipeline",
                "nranks": pipeline.get("nranks"),
                "collective_mix": "Send Recv",
                "calls": pipeline.get("p2p_calls"),
                "message_bytes_p50": sizes.get("p50"),
                "message_bytes_p99": sizes.get("p99"),
                "pipeline_stages": pipeline.get("stages"),
                "pipeline_bubble_ratio": pipeline.get("bubble_ratio"),
                "note": pipeline.get("reason"),
            }
        )
    for c in communicators:
        rows.append(
            {
                "row": f"comm {c['comm']}",
                "nranks": c.get("nranks"),
                "collective_mix": _mix_text(c.get("ops", {})),
                "calls": c.get("calls"),
                "message_bytes_p50": c.get("message_bytes_p50"),
                "message_bytes_p99": c.get("message_bytes_p99"),
                "note": f"{c.get('ranks_here', 0)} rank(s) on this host",
            }
        )
    for op, timing in (inspector_ops or {}).items():
        rows.append(
            {
                "row": f"op {op}",
                "calls": timing.get("calls"),
                "message_bytes_p50": timing.get("message_bytes_p50"),
                "latency_p50_s": timing.get("exec_time_p50_s"),
                "latency_p99_s": timing.get("exec_time_p99_s"),
                "bus_bandwidth_p50_bytes_per_s": timing.get("bus_bandwidth_p50_bytes_per_s"),
                "note": "NCCL Inspector: kernel time on the GPU (includes waiting for peers)",
            }
        )
    if capture and capture.get("ack_latency_samples"):
        acks = capture.get("ack_latency_s") or {}
        rows.append(
            {
                "row": "roce ack",
                "calls": capture.get("ack_latency_samples"),
                "latency_p50_s": acks.get("p50"),
                "latency_p99_s": acks.get("p99"),
                "note": "packet capture: RC request to its ACK (fabric round trip and peer "
                "turnaround, both directions pooled)",
            }
        )
    for w in what_ifs:
        row: dict[str, Any] = {"row": f"what-if {w.text}", "regime": est.regime}
        if t is None or d is None or est.nranks is None:
            row["note"] = "needs T and D (counters or pcap) and N (an NCCL log)"
            rows.append(row)
            continue
        p = predict(
            period_s=t,
            duty_cycle=d,
            nranks=est.nranks,
            mix=est.collectives,
            burst_bandwidth=est.burst_bandwidth,
            what_if=w,
        )
        b = est.burst_bandwidth
        if b is not None:
            b = w.bandwidth_bytes_per_s if w.bandwidth_bytes_per_s is not None else b * w.bandwidth
        row.update(
            nranks=w.nranks or est.nranks,
            collective_bytes_per_step=(
                est.step_bytes * w.size if est.step_bytes is not None else None
            ),
            period_s=p.period_s,
            burst_bandwidth_bytes_per_s=b,
            duty_cycle=p.duty_cycle,
            bytes_per_iteration=(b * p.communication_s if b is not None else None),
            compute_s=p.compute_s,
            communication_s=p.communication_s,
            network_bound=p.network_bound,
            collective_mix=job["collective_mix"],
            note="D crosses 0.5: the network would be the bottleneck"
            if p.network_bound and not job["network_bound"]
            else None,
        )
        rows.append(row)
    return [{k: r.get(k) for k in COLUMNS} for r in rows]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render_rows(rows: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """The rows as ``csv``, ``json`` (a list of objects) or ``md`` (a Markdown table)."""
    if fmt == "json":
        return json.dumps(list(rows), indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([_cell(r.get(c)) for c in COLUMNS])
        return buf.getvalue().rstrip("\n")
    if fmt == "md":
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for r in rows:
            cells = [_cell(r.get(c)).replace("|", "\\|") for c in COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    raise ConfigError(f"--table {fmt}: use csv, json or md")
