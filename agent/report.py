"""Human-readable rendering of an estimate: the parameter table and a one-line summary."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agent.estimate import Estimate

__all__ = ["format_bytes", "format_rate", "render_summary_line", "render_table", "verdict"]

#: The domain's alert threshold: communication more than half of every step.
BOTTLENECK_DUTY = 0.5


def format_bytes(n: float | None) -> str:
    """Decimal units, as link rates and nccl-tests use them (1 GB = 1e9 B)."""
    if n is None:
        return "—"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def format_rate(bps: float | None) -> str:
    """Bytes/s with the bit rate network people think in."""
    if bps is None:
        return "—"
    gbit = bps * 8 / 1e9
    return f"{format_bytes(bps)}/s ({gbit:.3g} Gb/s)"


def _seconds(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.4g} µs"
    if s < 1.0:
        return f"{s * 1e3:.4g} ms"
    return f"{s:.5g} s"


def verdict(e: Estimate) -> str:
    """One sentence an operator can act on."""
    if e.regime == "idle":
        return "No collective traffic: the host is idle."
    if e.period_s is None:
        if e.regime == "inference":
            return (
                "No sync period: random, short bursts (inference-like); judge it by latency "
                "percentiles, not by T and D."
            )
        return "No sync period found in this window."
    if e.duty_cycle is None:
        return "Periodic traffic, but D cannot be measured at this resolution."
    if e.duty_cycle > BOTTLENECK_DUTY:
        return (
            f"D = {e.duty_cycle:.2f} > {BOTTLENECK_DUTY}: the network is the bottleneck of "
            "this job (communication takes more than half of every step)."
        )
    return f"D = {e.duty_cycle:.2f} ≤ {BOTTLENECK_DUTY}: compute-bound; the network has headroom."


def render_table(
    e: Estimate,
    *,
    sources: Mapping[str, list[str]] | None = None,
    extra: Mapping[str, object] | None = None,
) -> str:
    """The parameter table ``commpulse analyze`` prints."""
    rows: list[tuple[str, str, str]] = []
    conf = f"confidence {e.confidence:.2f}"
    detail = [conf]
    if e.period_source:
        detail.append(f"from {e.period_source.replace('_', ' ')}")
    if e.period_cycles:
        detail.append(f"{e.period_cycles:.0f} cycles in window")
    rows.append(("regime", e.regime, ""))
    rows.append(("T  sync period", _seconds(e.period_s), ", ".join(detail)))
    if e.inner_period_s is not None:
        rows.append(("   inner period", _seconds(e.inner_period_s), "layer / micro-step spacing"))
    b_note = f"busier direction: {e.direction}" if e.direction else ""
    if e.direction is not None and e.period_direction == e.direction:
        b_note = f"{e.direction}: the busier direction carries another flow"
    rows.append(("B  burst bandwidth", format_rate(e.burst_bandwidth), b_note))
    d_note = {
        "gpu_exposed": f"exposed communication (GPU signal: {e.gpu_signal})",
        "network": "network on-fraction (no compute-distinguishing GPU signal)",
    }.get(e.duty_cycle_source or "", "")
    rows.append(("D  duty cycle", "—" if e.duty_cycle is None else f"{e.duty_cycle:.3f}", d_note))
    if e.network_on_ratio is not None:
        rows.append(("   network on", f"{e.network_on_ratio:.3f}", "fraction of time in a burst"))
    if e.overlapped_ratio is not None:
        rows.append(
            ("   overlapped", f"{e.overlapped_ratio:.3f}", "communication hidden by compute")
        )
    if e.compute_ratio is not None:
        rows.append(("   GPU computing", f"{e.compute_ratio:.3f}", "fraction of time"))
    rows.append(("V  bytes / step", format_bytes(e.bytes_per_iteration), "on the wire, B·D·T"))
    rows.append(("N  ranks", "—" if e.nranks is None else str(e.nranks), "from the NCCL log"))
    rows.append(
        ("S  bytes / step", format_bytes(e.step_bytes), "collective size per rank (NCCL log)")
    )
    rows.append(("mean bandwidth", format_rate(e.mean_bandwidth), ""))
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    lines = []
    if sources:
        lines.append("sources: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in sources.items()))
        lines.append("")
    for name, value, note in rows:
        lines.append(f"  {name:<{width}}  {value:<{vwidth}}  {note}".rstrip())
    if e.collectives:
        lines.append("")
        total = sum(b for _, b in e.collectives.values()) or 1
        lines.append(f"  {'collective':<14} {'calls':>10} {'bytes (S)':>12} {'share':>7}")
        for op, (count, nbytes) in sorted(e.collectives.items(), key=lambda kv: -kv[1][1]):
            lines.append(
                f"  {op:<14} {count:>10} {format_bytes(nbytes):>12} {nbytes / total:>7.1%}"
            )
    inspector = (extra or {}).get("inspector")
    if isinstance(inspector, Mapping) and inspector.get("ops"):
        lines.append("")
        head = f"  {'GPU-timed (Inspector)':<22} {'calls':>7} {'p50':>10} {'p99':>10}"
        lines.append(f"{head} {'bus bw p50':>14}")
        for op, t in inspector["ops"].items():
            bw = t.get("bus_bandwidth_p50_bytes_per_s")
            lines.append(
                f"  {op:<22} {t['calls']:>7} {_seconds(t['exec_time_p50_s']):>10} "
                f"{_seconds(t['exec_time_p99_s']):>10} "
                f"{(format_bytes(bw) + '/s') if bw else '—':>14}"
            )
    lines.extend(_sparse_lines(e, extra or {}))
    lines.extend(_sharding_lines((extra or {}).get("sharding")))
    capture = (extra or {}).get("capture")
    if isinstance(capture, Mapping):
        lines.append("")
        lines.append(
            f"  capture: {capture.get('packets')} packets, {capture.get('flows')} flows, "
            f"{capture.get('roce_qps')} RDMA QPs, {capture.get('cnp_packets')} CNPs"
        )
        if capture.get("ack_latency_samples"):
            lines.append(
                f"  {'RC ACK round trip':<17} {_pcts(capture.get('ack_latency_s'), _seconds)}"
                f" over {capture['ack_latency_samples']} request/ACK pairs"
            )
    lines.append("")
    lines.append(verdict(e))
    for w in e.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _pcts(p: Mapping[str, float | None] | None, fmt: Callable[[float | None], str]) -> str:
    if not p or p.get("p50") is None:
        return "—"
    return f"P50 {fmt(p['p50'])}  P90 {fmt(p['p90'])}  P99 {fmt(p['p99'])}"


def _sparse_lines(e: Estimate, extra: Mapping[str, object]) -> list[str]:
    """Inference view: burst arrivals (aperiodic traffic only), AlltoAll, pipeline stages."""
    out: list[str] = []
    arrivals = extra.get("arrivals")
    if isinstance(arrivals, Mapping) and e.period_s is None and arrivals.get("bursts"):
        cv = arrivals.get("inter_arrival_cv")
        gap_cv = arrivals.get("gap_cv")
        pattern = arrivals.get("verdict") or "no verdict"
        cv_text = "—" if cv is None else f"{cv:.2f}"
        gap_text = "—" if gap_cv is None else f"{gap_cv:.2f}"
        out += [
            "",
            f"  burst arrivals    λ {arrivals['arrival_rate_hz']:.3g}/s over "
            f"{arrivals['bursts']} bursts; inter-arrival CV {cv_text}, idle-gap CV {gap_text}: "
            f"{pattern}",
            f"  burst size        {_pcts(arrivals.get('burst_bytes'), format_bytes)}",
            f"  burst duration    {_pcts(arrivals.get('burst_duration_s'), _seconds)}",
        ]
        if arrivals.get("busy_ratio") is not None:
            out.append(f"  busy              {arrivals['busy_ratio']:.3f} of the time in a burst")
        out += [f"  note: {n}" for n in arrivals.get("notes") or []]
    a2a = extra.get("alltoall")
    if isinstance(a2a, Mapping):
        rate = a2a.get("call_rate_per_rank_hz")
        grouped = a2a.get("grouped_send_recv_calls")
        how = f" ({grouped} from grouped Send/Recv)" if grouped else ""
        sizes = a2a.get("message_bytes")
        p50 = sizes.get("p50") if isinstance(sizes, Mapping) else None
        out += [
            "",
            f"  AlltoAll          {a2a['calls']} calls{how}, S P50 {format_bytes(p50)}, "
            + ("rate unknown (no timestamps)" if rate is None else f"{rate:.3g}/s per rank"),
        ]
    pipe = extra.get("pipeline")
    if isinstance(pipe, Mapping):
        if pipe.get("stages") is not None:
            text = f"{pipe['stages']} stages (rank stride {pipe['rank_stride']})"
        else:
            text = f"stages not derivable: {pipe.get('reason')}"
        out += ["", f"  pipeline P2P      {pipe['p2p_calls']} Send/Recv calls; {text}"]
    return out


def _micro(s: object) -> str:
    return f"{s * 1e6:.3g} µs" if isinstance(s, (int, float)) else "—"


def _sharding_lines(sharding: object) -> list[str]:
    """Fine-tuning view: ZeRO stage, collectives per step, per-layer gap, latency share."""
    if not isinstance(sharding, Mapping):
        return []
    out = ["", f"  ZeRO stage        {sharding.get('zero_stage')} ({sharding.get('reason')})"]
    per_step = sharding.get("collectives_per_step")
    if per_step is not None:
        ag, rs = sharding.get("allgather_per_step"), sharding.get("reduce_scatter_per_step")
        split = f" (AllGather {ag:.4g}, ReduceScatter {rs:.4g})" if ag and rs else ""
        out.append(f"  collectives/step  {per_step:.4g} per process{split}")
    out.append(f"  message size      {_pcts(sharding.get('message_bytes'), format_bytes)}")
    gap = sharding.get("layer_gap_s")
    if gap is not None:
        out.append(f"  per-layer gap     {_seconds(gap)} median between calls inside a step")
    share = sharding.get("latency_share")
    if share is not None:
        lat = sharding.get("latency_per_collective_s")
        src = str(sharding.get("latency_source", "")).replace("_", " ")
        out.append(
            f"  latency share     {share:.2%} of T: {_seconds(sharding.get('latency_per_step_s'))}"
            f" a step at {_micro(lat)} per collective ({src})"
        )
    out += [f"  note: {n}" for n in sharding.get("notes") or []]
    return out


def render_summary_line(e: Estimate) -> str:
    """The live one-liner of ``commpulse demo``."""
    t = "T=—" if e.period_s is None else f"T={_seconds(e.period_s)}"
    b = "B=—" if e.burst_bandwidth is None else f"B={format_bytes(e.burst_bandwidth)}/s"
    d = "D=—" if e.duty_cycle is None else f"D={e.duty_cycle:.3f}"
    flag = "  NETWORK BOTTLENECK" if (e.duty_cycle or 0) > BOTTLENECK_DUTY and e.period_s else ""
    return f"{t}  {b}  {d}  conf={e.confidence:.2f}  regime={e.regime}{flag}"
