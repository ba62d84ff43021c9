"""Prometheus exposition of the latest snapshot.

A custom collector: each scrape turns the latest :class:`agent.pipeline.Snapshot` into metric
families and does no other work (no I/O, no estimation). Names follow the contract in
DESIGN.md and Prometheus' conventions: base units, ``_ratio`` for 0..1, ``_total`` only on
counters, no host label (Prometheus adds ``instance``).
"""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from agent import __version__
from agent.arrivals import ARRIVAL_PATTERNS, Percentiles
from agent.http import MetricsServer
from agent.pipeline import Snapshot, SnapshotStore
from agent.regime import REGIMES
from agent.sharding import ZERO_STAGES
from agent.windows import EXEC_TIME_BOUNDS, DeviceStatus, SizeHistogram
from collectors.packet_capture import ACK_LATENCY_BOUNDS
from collectors.rdma_counters import HW_COUNTERS

__all__ = ["SnapshotCollector", "metrics_registry", "start_metrics_server"]


def _gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily | None:
    """A single-sample gauge, or nothing at all when the value is unknown (never a fake 0)."""
    if value is None:
        return None
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], float(value))
    return g


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    """A single-sample counter (``_total`` is added by the client)."""
    c = CounterMetricFamily(name, doc)
    c.add_metric([], float(value))
    return c


class SnapshotCollector(Collector):
    """Yields the contract metrics (and the agent's own health) from the snapshot store."""

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        """Build the families for one scrape."""
        info = InfoMetricFamily("commpulse_build", "commpulse version.")
        info.add_metric([], {"version": __version__})
        yield info
        snap = self._store.latest()
        if snap is None:
            return
        yield from self._health(snap)
        yield from _job_families(snap)
        yield from _nccl_families(snap)
        yield from _capture_families(snap)
        yield from _regime_families(snap)
        yield from _device_families(snap.devices)
        yield from _device_burst_families(snap)
        est = snap.estimate
        if est is None:
            return
        families: list[GaugeMetricFamily | None] = [
            _gauge("commpulse_sync_period_seconds", "T: sync period of the collective burst "
                   "train (absent while no period is detected).", est.period_s),
            _gauge("commpulse_burst_bandwidth_bytes_per_second", "B: link bandwidth while a "
                   "burst is in progress (busier direction, or the other when the busier one "
                   "carries another flow; summed over devices).", est.burst_bandwidth),
            _gauge("commpulse_duty_cycle_ratio", "D: communication time / T. Above 0.5 the "
                   "network is the bottleneck.", est.duty_cycle),
            _gauge("commpulse_period_confidence_ratio", "Confidence of T, 0..1 (at least 0.6 "
                   "once the lock has held 16 periods and 30 s).", est.confidence),
            _gauge("commpulse_network_on_ratio", "Fraction of time the links are in a burst.",
                   est.network_on_ratio),
            _gauge("commpulse_inner_period_seconds", "Inner period of a nested step (layer "
                   "or micro-step spacing).", est.inner_period_s),
            _gauge("commpulse_iteration_bytes", "V: bytes on the wire per step (B·D·T).",
                   est.bytes_per_iteration),
            _gauge("commpulse_mean_bandwidth_bytes_per_second", "Mean link bandwidth over the "
                   "window (busier direction).", est.mean_bandwidth),
            _gauge("commpulse_exposed_comm_ratio", "Communication not hidden by compute, as a "
                   "fraction of time (needs an SM- or tensor-activity GPU signal).",
                   est.exposed_ratio),
            _gauge("commpulse_overlapped_comm_ratio", "Communication overlapped with compute, "
                   "as a fraction of time.", est.overlapped_ratio),
            _gauge("commpulse_gpu_compute_ratio", "Fraction of time the GPUs compute.",
                   est.compute_ratio),
            _gauge("commpulse_nranks", "World size of the largest communicator in the NCCL "
                   "log.", est.nranks),
            _gauge("commpulse_estimate_window_seconds", "Length of the window the estimate "
                   "was computed over.", est.window_s),
        ]  # fmt: skip
        yield from _known(*families)
        activities = dict(est.gpu_activities)
        if est.gpu_activity is not None and est.gpu_signal is not None:
            activities[est.gpu_signal] = est.gpu_activity
        if activities:
            activity = GaugeMetricFamily(
                "commpulse_gpu_activity_ratio",
                "Mean of each GPU activity signal the host has over the window, bursts or not "
                "(util and gr_engine_active count spinning NCCL kernels as busy: a hung "
                "collective keeps them high; sm_active reads the few SMs NCCL spins on).",
                labels=["signal"],
            )
            for signal, value in sorted(activities.items()):
                activity.add_metric([signal], value)
            yield activity
        regime = GaugeMetricFamily(
            "commpulse_workload_regime",
            "1 for the current workload regime, 0 for the others.",
            labels=["regime"],
        )
        for name in REGIMES:
            regime.add_metric([name], 1.0 if est.regime == name else 0.0)
        yield regime
        detail = InfoMetricFamily("commpulse_estimate", "Where the current T and D come from.")
        detail.add_metric(
            [],
            {
                "duty_cycle_source": est.duty_cycle_source or "none",
                "period_source": est.period_source or "none",
                "gpu_signal": est.gpu_signal or "none",
                "direction": est.direction or "none",
            },
        )
        yield detail
        if est.collectives:
            calls = CounterMetricFamily(
                "commpulse_collective_calls", "COLL lines seen, by op.", labels=["op"]
            )
            nbytes = CounterMetricFamily(
                "commpulse_collective_bytes",
                "Sum of the collectives' S (nccl-tests definition), by op.",
                labels=["op"],
            )
            for op, (count, total) in sorted(est.collectives.items()):
                calls.add_metric([op], float(count))
                nbytes.add_metric([op], float(total))
            yield calls
            yield nbytes

    @staticmethod
    def _health(snap: Snapshot) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "commpulse_source_up", "1 while a source delivers data.", labels=["source"]
        )
        readings = CounterMetricFamily(
            "commpulse_source_readings", "Readings delivered, by source.", labels=["source"]
        )
        dropped = CounterMetricFamily(
            "commpulse_discarded_samples",
            "Readings dropped because the queue was full, by source.",
            labels=["source"],
        )
        errors = CounterMetricFamily(
            "commpulse_source_errors", "Failures of a source (it is retried).", labels=["source"]
        )
        for h in snap.sources:
            up.add_metric([h.name], 1.0 if h.up else 0.0)
            readings.add_metric([h.name], float(h.readings))
            dropped.add_metric([h.name], float(h.dropped))
            errors.add_metric([h.name], float(h.errors))
        yield up
        yield readings
        yield dropped
        yield errors
        duration = GaugeMetricFamily(
            "commpulse_estimator_duration_seconds", "Run time of the last estimate."
        )
        duration.add_metric([], snap.estimator_seconds)
        yield duration
        age = GaugeMetricFamily(
            "commpulse_estimate_age_seconds", "Seconds since the last estimate was published."
        )
        age.add_metric([], max(0.0, time.time() - snap.wall_time_s))
        yield age
        count = CounterMetricFamily("commpulse_estimates", "Estimates published.")
        count.add_metric([], float(snap.estimates))
        yield count
        if snap.sinks:
            yield from _sink_families(snap)


def _job_families(snap: Snapshot) -> Iterator[Metric]:
    """Which job the host works for, and when its traffic last burst (for the stall alert)."""
    if snap.job_id is not None:
        job = InfoMetricFamily(
            "commpulse_job",
            "The job this host works for: job_id from the config or nccl-<commId>; the fleet "
            "recording rules join on it.",
        )
        job.add_metric([], {"job_id": snap.job_id, "job_id_source": snap.job_id_source or ""})
        yield job
    if snap.last_burst_wall_s is not None:
        last = GaugeMetricFamily(
            "commpulse_last_burst_timestamp_seconds",
            "Unix time the last communication burst ended; time() minus this grows while a "
            "job is stalled.",
        )
        last.add_metric([], snap.last_burst_wall_s)
        yield last


#: The NCCL tailer's line counts, by kind (SourceStats keys → label values).
_NCCL_LINE_KINDS = {
    "lines": "read",
    "coll_lines": "coll",
    "warn_lines": "warn",
    "unparsed_lines": "unparsed",
    "overlong_lines": "overlong",
}


def _nccl_families(snap: Snapshot) -> Iterator[Metric]:
    """What the NCCL log says besides the collectives.

    WARN and undecodable lines, rotations, and the message-size distribution.
    """
    stats = snap.source_stats.get("nccl_log")
    if stats:
        lines = CounterMetricFamily(
            "commpulse_nccl_log_lines",
            "NCCL log lines by kind: read, coll, warn (NCCL WARN: look at them), unparsed (mention "
            "NCCL but do not decode), overlong (dropped).",
            labels=["kind"],
        )
        for key, kind in _NCCL_LINE_KINDS.items():
            if key in stats:
                lines.add_metric([kind], float(stats[key]))
        yield lines
        events = CounterMetricFamily(
            "commpulse_nccl_log_file_events",
            "Log files rotated away or truncated (copytruncate, a restarted job) while tailed.",
            labels=["event"],
        )
        events.add_metric(["rotation"], float(stats.get("rotations", 0)))
        events.add_metric(["truncation"], float(stats.get("truncations", 0)))
        yield events
        files = GaugeMetricFamily("commpulse_nccl_log_files", "NCCL log files being tailed.")
        files.add_metric([], float(stats.get("files", 0)))
        yield files
        if "unread_bytes" in stats:
            unread = GaugeMetricFamily(
                "commpulse_nccl_log_unread_bytes",
                "Bytes of the tailed NCCL logs left unread after the last poll (a poll reads up "
                "to 16 MiB a file). Above zero for more than a few polls: the agent is behind "
                "the job's logging; calls read while it catches up are counted, not timed.",
            )
            unread.add_metric([], float(stats["unread_bytes"]))
            yield unread
    yield from _histogram(
        "commpulse_collective_message_bytes",
        "Collective size S of each COLL line (nccl-tests definition), since the agent started.",
        snap.message_sizes,
    )
    if snap.collective_timings:
        exec_time = HistogramMetricFamily(
            "commpulse_collective_exec_seconds",
            "GPU execution time of each collective the NCCL Inspector timed, by op (includes "
            "time spent waiting for peers inside the kernel).",
            labels=["op"],
        )
        busbw = GaugeMetricFamily(
            "commpulse_collective_bus_bandwidth_bytes_per_second",
            "Median nccl-tests bus bandwidth of the recent Inspector-timed collectives, by op.",
            labels=["op"],
        )
        for op, t in snap.collective_timings.items():
            exec_time.add_metric([op], _buckets(EXEC_TIME_BOUNDS, t.counts), sum_value=t.total_s)
            if t.busbw_p50 is not None:
                busbw.add_metric([op], t.busbw_p50)
        yield exec_time
        yield busbw


def _capture_families(snap: Snapshot) -> Iterator[Metric]:
    """What live packet capture saw besides bytes: RoCE and CNP packets, flows, and losses.

    Packet counts are estimates of the wire totals (captured frames × ``sample_every``), like
    the capture's byte counters; ``captured`` and the drops are frames actually handled.
    """
    stats = snap.source_stats.get("packet_capture")
    if not stats:
        return
    packets = CounterMetricFamily(
        "commpulse_capture_packets",
        "Frames by kind: captured (handed to the agent, after sampling); roce, cnp (congestion "
        "notifications), ack, nak and seq_nak (NAKs for a PSN gap: loss and retransmission) of "
        "RoCEv2, as estimated wire counts; undecoded (headers not understood, bytes counted).",
        labels=["kind"],
    )
    for kind in ("captured", "roce", "cnp", "ack", "nak", "seq_nak", "undecoded"):
        packets.add_metric([kind], float(stats.get(f"{kind}_packets", 0)))
    yield packets
    yield _counter(
        "commpulse_capture_dropped_packets",
        "Frames the kernel dropped because the capture ring was full (raise ring_mib or "
        "sample_every): the byte series undercounts while this grows.",
        stats.get("kernel_dropped_packets", 0),
    )
    yield _counter(
        "commpulse_capture_late_packets",
        "Frames that reached the agent after their time bin was closed (counted in a later bin).",
        stats.get("late_packets", 0),
    )
    yield _counter(
        "commpulse_capture_dropped_handovers",
        "Batches of capture readings dropped because the agent's event loop fell behind (the "
        "counters are cumulative: time resolution is lost, bytes are not).",
        stats.get("handover_drops", 0),
    )
    buckets = tuple(
        int(stats.get(f"ack_latency_bucket_{i}", 0)) for i in range(len(ACK_LATENCY_BOUNDS) + 1)
    )
    if any(buckets):
        yield from _histogram(
            "commpulse_capture_ack_latency_seconds",
            "RoCE RC round trips: each ACK captured matched with the request of the PSN it "
            "acknowledges (both directions pooled; with sample_every N only 1 pair in N² is seen).",
            SizeHistogram(ACK_LATENCY_BOUNDS, buckets, stats.get("ack_latency_sum_ns", 0) / 1e9),
        )
    proto = CounterMetricFamily(
        "commpulse_capture_protocol_bytes",
        "Captured bytes by transport (estimated wire bytes; RoCEv2 is UDP).",
        labels=["protocol"],
    )
    proto.add_metric(["tcp"], float(stats.get("tcp_bytes", 0)))
    proto.add_metric(["udp"], float(stats.get("udp_bytes", 0)))
    yield proto
    for name, doc, default in (
        ("flows", "Distinct flows (5-tuples) seen in the last flow_window_s.", 0),
        ("queue_pairs", "Distinct RoCEv2 destination queue pairs seen in the last flow_window_s.",
         0),
        ("sample_every", "1-in-N sampling of the capture (1: every frame).", 1),
    ):  # fmt: skip
        gauge = _gauge(f"commpulse_capture_{name}", doc, stats.get(name, default))
        assert gauge is not None
        yield gauge


def _known(*families: Metric | None) -> Iterator[Metric]:
    """The families whose value is known (an unknown one is left out, never a fake 0)."""
    yield from (f for f in families if f is not None)


def _state_set(name: str, doc: str, label: str, states: tuple[str, ...], now: str) -> Metric:
    """1 for the current state, 0 for every other one of a fixed set (bounded labels)."""
    g = GaugeMetricFamily(name, doc, labels=[label])
    for state in states:
        g.add_metric([state], 1.0 if state == now else 0.0)
    return g


def _percentiles(name: str, doc: str, p: Percentiles | None) -> Iterator[Metric]:
    """P50/P90/P99 of a window as one gauge with a ``percentile`` label; nothing when unknown.

    Not a summary's ``quantile``: those belong to a summary with cumulative count and sum,
    and these are a sliding window's (the histograms next to them are the cumulative view).
    """
    if p is None:
        return
    g = GaugeMetricFamily(name, doc, labels=["percentile"])
    for q, v in (("50", p.p50), ("90", p.p90), ("99", p.p99)):
        g.add_metric([q], v)
    yield g


def _histogram(name: str, doc: str, h: SizeHistogram | None) -> Iterator[Metric]:
    if h is None:
        return
    hist = HistogramMetricFamily(name, doc)
    hist.add_metric([], _buckets(h.bounds, h.counts), sum_value=h.total_bytes)
    yield hist


def _regime_families(snap: Snapshot) -> Iterator[Metric]:
    """The parameters each regime is judged by (DOMAIN.md), each absent when unknown.

    Inference: burst arrival rate, burst size and duration (window percentiles, and histograms
    since the start for PromQL's histogram_quantile), the arrival pattern; AlltoAll rate and
    size. Fine-tuning: ZeRO stage, collectives per step, per-layer gap, latency share. Pipeline
    parallel: stages, micro-batches per step, bubble share.
    """
    yield from _histogram(
        "commpulse_burst_size_bytes",
        "Bytes above the background of each communication burst seen end, since the agent "
        "started (each burst counted once).",
        snap.burst_bytes,
    )
    yield from _histogram(
        "commpulse_burst_duration_seconds",
        "Duration of each communication burst seen end, since the agent started (only bursts "
        "long enough for the poll rate to resolve).",
        snap.burst_seconds,
    )
    rp = snap.regime
    if rp is None:
        return
    arr = rp.arrivals
    if arr is not None:
        yield from _known(
            _gauge("commpulse_burst_arrivals_per_second", "λ: communication bursts starting "
                   "per second over the window.", arr.arrival_rate_hz),
            _gauge("commpulse_burst_gap_cv", "Coefficient of variation of the idle gaps "
                   "between bursts: ~0 periodic, ~1 Poisson, > 1.5 bursty.", arr.gap_cv),
        )  # fmt: skip
        if arr.verdict is not None:
            yield _state_set(
                "commpulse_burst_arrival_pattern",
                "1 for the arrival pattern of the window's bursts (from the idle-gap CV), 0 for "
                "the others.",
                "pattern",
                ARRIVAL_PATTERNS,
                arr.verdict,
            )
        yield from _percentiles(
            "commpulse_burst_size_window_bytes",
            "Burst size (bytes above the background) over the window, by percentile.",
            arr.size_bytes,
        )
        yield from _percentiles(
            "commpulse_burst_duration_window_seconds",
            "Burst duration over the window, by percentile (absent when the poll rate cannot "
            "resolve it).",
            arr.duration_s,
        )
    sh = rp.sharding
    if sh is not None:
        yield _state_set(
            "commpulse_zero_stage",
            "1 for the ZeRO stage the collective mix of the largest communicator implies, 0 for "
            "the others.",
            "stage",
            ZERO_STAGES,
            sh.stage,
        )
        yield from _known(
            _gauge("commpulse_collectives_per_step", "Collectives a process of the largest "
                   "communicator makes per step (median).", sh.collectives_per_step),
            _gauge("commpulse_allgather_per_reduce_scatter", "AllGather calls per "
                   "ReduceScatter call: 1 for ZeRO-2, 2 for ZeRO-3 / FSDP full shard.",
                   sh.allgather_per_reduce_scatter),
            _gauge("commpulse_layer_gap_seconds", "Median time between consecutive "
                   "collectives inside a step (the per-layer spacing).", sh.layer_gap_s),
            _gauge("commpulse_collective_latency_ratio", "Share of a step the per-collective "
                   "latency costs: collectives per step × agent.collective_latency_s / T.",
                   sh.latency_share),
        )  # fmt: skip
    a2a = rp.alltoall
    if a2a is not None:
        yield from _known(
            _gauge(
                "commpulse_alltoall_calls_per_second",
                "AlltoAll calls per rank per second over the window (named AlltoAll and grouped "
                "Send/Recv to every peer alike).",
                a2a.call_rate_hz,
            )
        )
        yield from _percentiles(
            "commpulse_alltoall_message_window_bytes",
            "AlltoAll size S (nccl-tests definition) over the window, by percentile.",
            a2a.message_bytes,
        )
    pipe = rp.pipeline
    if pipe is not None:
        yield from _known(
            _gauge("commpulse_pipeline_stages", "Pipeline stages, from the Send/Recv peers' "
                   "rank distance.", pipe.stages),
            _gauge("commpulse_pipeline_micro_batches_per_step", "Forward hand-offs per step of "
                   "the busiest stage (micro-batches × model chunks).", pipe.micro_batches),
            _gauge("commpulse_pipeline_bubble_ratio", "Share of a step a stage idles in the "
                   "pipeline schedule: (stages − 1) / (micro-batches + stages − 1).",
                   pipe.bubble_ratio),
        )  # fmt: skip


def _buckets(bounds: tuple[float, ...], counts: tuple[int, ...]) -> list[tuple[str, float]]:
    """Cumulative ``le`` buckets from per-bucket counts (the last count is +Inf's)."""
    out = []
    cumulative = 0
    for bound, count in zip((*bounds, math.inf), counts, strict=True):
        cumulative += count
        if math.isinf(bound):
            label = "+Inf"
        else:
            label = f"{bound:.0f}" if bound >= 1 and bound.is_integer() else f"{bound:g}"
        out.append((label, float(cumulative)))
    return out


def _sink_families(snap: Snapshot) -> Iterator[Metric]:
    """Health of the push sinks (MQTT)."""
    connected = GaugeMetricFamily(
        "commpulse_export_connected", "1 while a push sink is connected.", labels=["sink"]
    )
    buffered = GaugeMetricFamily(
        "commpulse_export_buffered", "Messages waiting for the broker.", labels=["sink"]
    )
    published = CounterMetricFamily(
        "commpulse_export_published", "Messages delivered.", labels=["sink"]
    )
    dropped = CounterMetricFamily(
        "commpulse_export_dropped", "Messages dropped (buffer full).", labels=["sink"]
    )
    errors = CounterMetricFamily(
        "commpulse_export_errors", "Connection losses and failures.", labels=["sink"]
    )
    for h in snap.sinks:
        connected.add_metric([h.name], 1.0 if h.connected else 0.0)
        buffered.add_metric([h.name], float(h.buffered))
        published.add_metric([h.name], float(h.published))
        dropped.add_metric([h.name], float(h.dropped))
        errors.add_metric([h.name], float(h.errors))
    yield from (connected, buffered, published, dropped, errors)


def _split_device(device: str) -> tuple[str, str]:
    """``mlx5_0:1`` → (``mlx5_0``, ``1``); a netdev has no port."""
    name, sep, port = device.rpartition(":")
    return (name, port) if sep and port.isdigit() else (device, "")


def _device_burst_families(snap: Snapshot) -> Iterator[Metric]:
    """Each busy device's bursts on its own scale, from the last look at them one by one."""
    if not snap.device_bursts or snap.device_bursts_source is None:
        return
    labels = ["source", "device", "port"]
    band = GaugeMetricFamily(
        "commpulse_device_burst_bandwidth_bytes_per_second",
        "A device's bandwidth while in its own bursts (a slow rail reads below the others).",
        labels=[*labels, "direction"],
    )
    on = GaugeMetricFamily(
        "commpulse_device_burst_on_ratio",
        "Share of the time a device is in its own bursts (a slow rail's is the longest).",
        labels=[*labels, "direction"],
    )
    period = GaugeMetricFamily(
        "commpulse_device_sync_period_seconds",
        "A device's own step time, where its devices did not move in step (two jobs?).",
        labels=labels,
    )
    timed: set[str] = set()
    for b in snap.device_bursts:
        name, port = _split_device(b.device)
        key = [snap.device_bursts_source, name, port]
        band.add_metric([*key, b.direction], b.burst_bandwidth)
        on.add_metric([*key, b.direction], b.on_ratio)
        if b.period_s is not None and b.device not in timed:
            timed.add(b.device)
            period.add_metric(key, b.period_s)
    yield from (band, on, period)


def _device_families(devices: tuple[DeviceStatus, ...]) -> Iterator[Metric]:
    """Per-device counters, last-hop bandwidth, link utilisation and RoCE congestion."""
    if not devices:
        return
    labels = ["source", "device", "port"]
    info = InfoMetricFamily(
        "commpulse_device",
        "Devices a counter source sees; skipped says why one is not read.",
        labels=labels,
    )
    bw = GaugeMetricFamily(
        "commpulse_device_bandwidth_bytes_per_second",
        "Bandwidth of a device over the last estimator hop.",
        labels=[*labels, "direction"],
    )
    speed = GaugeMetricFamily(
        "commpulse_device_link_speed_bytes_per_second",
        "Link rate of the device (sysfs speed or IB rate).",
        labels=labels,
    )
    util = GaugeMetricFamily(
        "commpulse_device_link_utilisation_ratio",
        "Last-hop bandwidth as a fraction of the link rate.",
        labels=[*labels, "direction"],
    )
    total = CounterMetricFamily(
        "commpulse_device_bytes",
        "Bytes the device counted (InfiniBand data words times 4).",
        labels=[*labels, "direction"],
    )
    packets = CounterMetricFamily(
        "commpulse_device_packets", "Packets the device counted.", labels=[*labels, "direction"]
    )
    errors = CounterMetricFamily(
        "commpulse_device_errors", "Receive/transmit errors.", labels=[*labels, "direction"]
    )
    dropped = CounterMetricFamily(
        "commpulse_device_dropped_packets", "Dropped packets.", labels=[*labels, "direction"]
    )
    hw = CounterMetricFamily(
        "commpulse_rdma_hw_events",
        "RoCE congestion and transport counters from hw_counters (CNPs, ECN marks, retries).",
        labels=[*labels, "counter"],
    )
    stale = GaugeMetricFamily(
        "commpulse_device_saturated",
        "1 for a 32-bit counter stuck at 2^32-1: its rate is not reported.",
        labels=[*labels, "counter"],
    )
    for d in devices:
        name, port = _split_device(d.device)
        key = [d.source, name, port]
        i = d.info
        info.add_metric(
            key,
            {
                "kind": i.kind if i else "unknown",
                "link_layer": (i.link_layer or "") if i else "",
                "state": (i.state or "") if i else "",
                "skipped": (i.skipped or "") if i else "",
            },
        )
        link = i.speed_bytes_per_s if i else None
        if link:
            speed.add_metric(key, link)
        for direction, rate, raw in (("tx", d.tx_rate, d.tx_bytes), ("rx", d.rx_rate, d.rx_bytes)):
            if rate is not None:
                bw.add_metric([*key, direction], rate)
                if link:
                    util.add_metric([*key, direction], rate / link)
            if raw is not None:
                total.add_metric([*key, direction], float(raw))
            for fam, counter in ((packets, "packets"), (errors, "errors"), (dropped, "dropped")):
                value = d.counters.get(f"{direction}_{counter}")
                if value is not None:
                    fam.add_metric([*key, direction], float(value))
        for counter, value in sorted(d.counters.items()):
            if counter in HW_COUNTERS:
                hw.add_metric([*key, counter], float(value))
        for counter in sorted(i.stale_counters if i else ()):
            stale.add_metric([*key, counter], 1.0)
    yield from (info, bw, speed, util, total, packets, errors, dropped, hw, stale)


def metrics_registry(store: SnapshotStore) -> CollectorRegistry:
    """A registry of its own with the snapshot collector (no other library's metrics leak in)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(store))
    return registry


def start_metrics_server(
    store: SnapshotStore, *, addr: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> MetricsServer:
    """Serve ``/metrics`` for the store on a daemon thread."""
    return MetricsServer(metrics_registry(store), address=addr, port=port, ssl_context=ssl_context)
