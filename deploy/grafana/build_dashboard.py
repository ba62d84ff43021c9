"""Generate deploy/grafana/commpulse.json with Grafana's own SDK (grafana-foundation-sdk).

Run ``python deploy/grafana/build_dashboard.py > deploy/grafana/commpulse.json`` after a
change; the tests regenerate it and fail when the committed JSON differs, and check every
query with promtool and against a real Prometheus scraping the agent.

The dashboard reads the agent's metrics (DESIGN.md) and the recording rules of
deploy/prometheus/commpulse-rules.yml. Variables: ``datasource`` (any Prometheus),
``instance`` (hosts running the agent), ``job_id`` (jobs, for the fleet row).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

UID = "commpulse-main"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
HOSTS = 'instance=~"$instance"'
#: Rows are 24 units wide; panels of one row share its width.
WIDTH = 24


@dataclass(frozen=True)
class Query:
    """One PromQL target: the expression and its legend."""

    expr: str
    legend: str = ""


def _target(q: Query, ref: str, *, instant: bool = False) -> prometheus.Dataquery:
    """A range query for graphs; an instant query for "now" (stat panels).

    An instant query returns nothing for a series that went stale (a job that ended, an agent
    that stopped exporting a value), where a range query reduced to its last non-null value
    would show that value for as long as the dashboard's time range reaches back to it.
    """
    t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
    t = t.instant() if instant else t.range()
    return t.legend_format(q.legend) if q.legend else t


#: The window percentiles the agent exports (label ``percentile``: "50", "90", "99") drawn.
WINDOW_PERCENTILES = ("50", "99")


def _quantile(q: float, histogram: str, by: str, legend: str) -> Query:
    """``histogram_quantile`` of a histogram's rate by ``by``, only where calls were counted.

    Without new observations in the rate window every bucket's rate is 0 and the quantile is
    NaN, which Grafana draws as a gap or a spike; the ``and`` leaves those points out.
    """
    sel = f"{{{HOSTS}}}[$__rate_interval]"
    return Query(
        f"histogram_quantile({q}, sum by ({by}, le) (rate({histogram}_bucket{sel})))"
        f" and on({by}) (sum by ({by}) (rate({histogram}_count{sel})) > 0)",
        legend,
    )


def _thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def _legend() -> cb.VizLegendOptions:
    return (
        cb.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.LIST)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def series(
    title: str,
    description: str,
    queries: list[Query],
    *,
    unit: str,
    width: int = 12,
    height: int = 8,
    threshold: float | None = None,
    stacked: bool = False,
    min_value: float | None = 0,
    max_value: float | None = None,
    overrides: dict[str, list[dm.DynamicConfigValue]] | None = None,
) -> timeseries.Panel:
    """A time-series panel; ``threshold`` draws a dashed red line (the D = 0.5 boundary).

    ``min_value`` None lets the axis go below 0 (signed values); ``overrides`` maps a query's
    ref id (A, B, ...) to field settings of its own (a unit and an axis of its own).
    """
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .legend(_legend())
        .line_width(1)
        .fill_opacity(10 if not stacked else 40)
    )
    if min_value is not None:
        p = p.min(min_value)
    if max_value is not None:
        p = p.max(max_value)
    if threshold is not None:
        p = p.thresholds(_thresholds((None, "green"), (threshold, "red"))).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    if stacked:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    for i, q in enumerate(queries):
        p = p.with_target(_target(q, chr(ord("A") + i)))
    for ref, properties in (overrides or {}).items():
        p = p.override_by_query(ref, properties)
    return p


def single(
    title: str,
    description: str,
    query: Query,
    *,
    unit: str,
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "blue"),),
    width: int = 4,
) -> stat.Panel:
    """A stat panel with the current value (one per host), from an instant query.

    Not a range query reduced to its last non-null value: that kept a finished job's D, T and
    B on the panel for as long as the time range reached back to them.
    """
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(4)
        .color_mode(cm.BigValueColorMode.VALUE)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .text_mode(cm.BigValueTextMode.VALUE_AND_NAME)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(_thresholds(*thresholds))
        .with_target(_target(query, "A", instant=True))
    )


#: A one-hot state (regime, arrival pattern, ZeRO stage): only the current one is drawn.
ONE_HOT = (("off", "transparent"), ("on", "green"))
#: Health: a 0 must stand out, never vanish.
HEALTH = (("down", "red"), ("up", "green"))


def states(
    title: str,
    description: str,
    query: Query,
    *,
    width: int = 12,
    texts: tuple[tuple[str, str], tuple[str, str]] = ONE_HOT,
) -> statetimeline.Panel:
    """A state timeline of a 0/1 series per label; ``texts`` names and colours 0 and 1."""
    (off, off_color), (on, on_color) = texts
    mappings: list[dm.ValueMapping] = [
        dm.ValueMap(
            options={
                "0": dm.ValueMappingResult(text=off, color=off_color, index=0),
                "1": dm.ValueMappingResult(text=on, color=on_color, index=1),
            }
        )
    ]
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(6)
        .mappings(mappings)
        .with_target(_target(query, "A"))
    )


def _variables(d: db.Dashboard) -> db.Dashboard:
    return (
        d.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            db.QueryVariable("instance")
            .label("Host")
            .datasource(DATASOURCE)
            .query("label_values(commpulse_build_info, instance)")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(
            db.QueryVariable("job_id")
            .label("Job")
            .datasource(DATASOURCE)
            .query("label_values(commpulse_job_info, job_id)")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )


def build() -> db.Dashboard:
    """The whole dashboard."""
    d = (
        db.Dashboard("commpulse: collective communication")
        .uid(UID)
        .description(
            "T (sync period), B (burst bandwidth) and D (communication duty cycle) of the "
            "collective traffic on each GPU host, from the commpulse agent. D > 0.5: the "
            "network is the bottleneck."
        )
        .tags(["commpulse", "gpu", "nccl", "network"])
        .time("now-3h", "now")
        .refresh("30s")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .link(
            db.DashboardLink("commpulse README")
            .type(dm.DashboardLinkType.LINK)
            .url("https://github.com/commpulse/commpulse#alerts")
        )
    )
    d = _variables(d)
    d = d.annotation(
        db.AnnotationQuery()
        .name("commpulse alerts")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .expr(f'ALERTS{{alertname=~"Commpulse.*", alertstate="firing", {HOSTS}}}')
    )

    d = d.with_row(db.Row("T, B, D"))
    d = (
        d.with_panel(
            single(
                "D: duty cycle",
                "Communication time / T. Above 0.5 the network, not the GPUs, sets the step time.",
                Query(f"commpulse_duty_cycle_ratio{{{HOSTS}}}", "{{instance}}"),
                unit="percentunit",
                thresholds=((None, "green"), (0.35, "yellow"), (0.5, "red")),
            )
        )
        .with_panel(
            single(
                "T: sync period",
                "Step time: burst start to burst start. Absent while no period is detected.",
                Query(f"commpulse_sync_period_seconds{{{HOSTS}}}", "{{instance}}"),
                unit="s",
            )
        )
        .with_panel(
            single(
                "B: burst bandwidth",
                "Link bandwidth while a burst is in progress (busier direction, all devices).",
                Query(f"commpulse_burst_bandwidth_bytes_per_second{{{HOSTS}}}", "{{instance}}"),
                unit="Bps",
            )
        )
        .with_panel(
            single(
                "Confidence of T",
                "How sure the estimator is of T (0..1); D is only alerted on above 0.5.",
                Query(f"commpulse_period_confidence_ratio{{{HOSTS}}}", "{{instance}}"),
                unit="percentunit",
                thresholds=((None, "orange"), (0.5, "green")),
            )
        )
        .with_panel(
            single(
                "V: bytes per step",
                "Bytes on the wire per step, B·D·T.",
                Query(f"commpulse_iteration_bytes{{{HOSTS}}}", "{{instance}}"),
                # SI, as B (Bps): bytes per step = B·D·T reads in the same prefixes.
                unit="decbytes",
            )
        )
        .with_panel(
            single(
                "Since last burst",
                "Seconds since the last communication burst ended: grows while a job is stalled.",
                Query(
                    f"instance:commpulse_seconds_since_last_burst:estimate{{{HOSTS}}}",
                    "{{instance}}",
                ),
                unit="s",
                thresholds=((None, "green"), (60, "orange"), (300, "red")),
            )
        )
    )
    d = (
        d.with_panel(
            series(
                "D: communication duty cycle",
                "D per host with the 0.5 line: above it the job is network-bound. Network on is "
                "the fraction of time in a burst; exposed is the part not hidden by compute.",
                [
                    Query(f"commpulse_duty_cycle_ratio{{{HOSTS}}}", "D {{instance}}"),
                    Query(f"commpulse_network_on_ratio{{{HOSTS}}}", "network on {{instance}}"),
                ],
                unit="percentunit",
                threshold=0.5,
                max_value=1,
            )
        )
        .with_panel(
            series(
                "T: sync period",
                "Step time per host; the inner period is the layer or micro-step spacing of a "
                "nested step (ZeRO-3, gradient accumulation).",
                [
                    Query(f"commpulse_sync_period_seconds{{{HOSTS}}}", "T {{instance}}"),
                    Query(f"commpulse_inner_period_seconds{{{HOSTS}}}", "inner {{instance}}"),
                ],
                unit="s",
            )
        )
        .with_panel(
            series(
                "B: burst bandwidth and link rate",
                "B against the rate of the links that carried traffic in the last 5 minutes, "
                "and the mean bandwidth (what average-based tools show).",
                [
                    Query(
                        f"commpulse_burst_bandwidth_bytes_per_second{{{HOSTS}}}", "B {{instance}}"
                    ),
                    Query(
                        f"instance:commpulse_link_speed_bytes_per_second:active{{{HOSTS}}}",
                        "link rate {{instance}}",
                    ),
                    Query(
                        f"commpulse_mean_bandwidth_bytes_per_second{{{HOSTS}}}",
                        "mean {{instance}}",
                    ),
                ],
                unit="Bps",
            )
        )
        .with_panel(
            states(
                "Workload regime",
                "training: a square wave; finetune: dense per-layer collectives; inference: "
                "random short bursts; idle: no traffic.",
                Query(f"commpulse_workload_regime{{{HOSTS}}} == 1", "{{instance}} {{regime}}"),
            )
        )
    )

    d = d.with_row(db.Row("Traffic"))
    d = (
        d.with_panel(
            series(
                "Bandwidth per device",
                "Last-hop bandwidth of each NIC / RDMA port and direction.",
                [
                    Query(
                        f"commpulse_device_bandwidth_bytes_per_second{{{HOSTS}}}",
                        "{{instance}} {{device}}:{{port}} {{direction}}",
                    )
                ],
                unit="Bps",
            )
        )
        .with_panel(
            series(
                "Link utilisation per device",
                "Last-hop bandwidth as a fraction of the link rate.",
                [
                    Query(
                        f"commpulse_device_link_utilisation_ratio{{{HOSTS}}}",
                        "{{instance}} {{device}}:{{port}} {{direction}}",
                    )
                ],
                unit="percentunit",
                max_value=1,
            )
        )
        .with_panel(
            series(
                "Burst bandwidth per device",
                "Each busy device's bandwidth while in its own bursts (sampled every 15 hops): "
                "a rail below the others is slow or loaded, and the step waits for it.",
                [
                    Query(
                        f"commpulse_device_burst_bandwidth_bytes_per_second{{{HOSTS}}}",
                        "{{instance}} {{device}}:{{port}} {{direction}}",
                    )
                ],
                unit="Bps",
            )
        )
        .with_panel(
            series(
                "Collective mix (bytes)",
                "Collective size S per second by op, from the NCCL log (nccl-tests definition).",
                [
                    Query(
                        f"sum by (op) (rate(commpulse_collective_bytes_total{{{HOSTS}}}"
                        "[$__rate_interval]))",
                        "{{op}}",
                    )
                ],
                unit="Bps",
                stacked=True,
            )
        )
        .with_panel(
            series(
                "Collective calls",
                "COLL lines per second by op (one per calling rank).",
                [
                    Query(
                        f"sum by (op) (rate(commpulse_collective_calls_total{{{HOSTS}}}"
                        "[$__rate_interval]))",
                        "{{op}}",
                    )
                ],
                unit="ops",
                stacked=True,
            )
        )
        .with_panel(
            series(
                "GPU compute vs communication",
                "Fractions of time: GPUs computing, communication hidden by compute "
                "(overlapped) and communication the GPUs wait for (exposed). Needs an SM- or "
                "tensor-activity signal; GPU activity is the raw mean of each signal the host has.",
                [
                    Query(f"commpulse_gpu_compute_ratio{{{HOSTS}}}", "compute {{instance}}"),
                    Query(f"commpulse_overlapped_comm_ratio{{{HOSTS}}}", "overlapped {{instance}}"),
                    Query(f"commpulse_exposed_comm_ratio{{{HOSTS}}}", "exposed {{instance}}"),
                    Query(
                        f"commpulse_gpu_activity_ratio{{{HOSTS}}}",
                        "GPU activity ({{signal}}) {{instance}}",
                    ),
                ],
                unit="percentunit",
                max_value=1,
            )
        )
        .with_panel(
            series(
                "RoCE congestion and transport errors",
                "CNPs per second and port (DCQCN throttling), the retransmission signals, and "
                "CNPs seen by live packet capture (with the frames its ring dropped).",
                [
                    Query(
                        f"instance_device:commpulse_rdma_cnp:rate5m{{{HOSTS}}}",
                        "CNP {{instance}} {{device}}:{{port}}",
                    ),
                    Query(
                        "sum by (instance, device, port, counter) ("
                        f"rate(commpulse_rdma_hw_events_total{{{HOSTS}, "
                        'counter=~"out_of_sequence|packet_seq_err|local_ack_timeout_err'
                        '|roce_adp_retrans|rnr_nak_retry_err"}[$__rate_interval]))',
                        "{{counter}} {{instance}} {{device}}:{{port}}",
                    ),
                    Query(
                        f'rate(commpulse_capture_packets_total{{{HOSTS}, kind="cnp"}}'
                        "[$__rate_interval])",
                        "captured CNP {{instance}}",
                    ),
                    Query(
                        f"rate(commpulse_capture_dropped_packets_total{{{HOSTS}}}"
                        "[$__rate_interval])",
                        "capture ring drops {{instance}}",
                    ),
                ],
                unit="cps",
            )
        )
    )

    d = d.with_row(db.Row("Fleet: jobs"))
    jobs = 'job_id=~"$job_id"'
    d = (
        d.with_panel(
            series(
                "Job D (mean and worst host)",
                "D over the job's hosts (commpulse_job_info groups hosts by job_id).",
                [
                    Query(f"job_id:commpulse_duty_cycle_ratio:avg{{{jobs}}}", "mean {{job_id}}"),
                    Query(f"job_id:commpulse_duty_cycle_ratio:max{{{jobs}}}", "max {{job_id}}"),
                ],
                unit="percentunit",
                threshold=0.5,
                max_value=1,
            )
        )
        .with_panel(
            series(
                "Job T",
                "Mean sync period T over each job's hosts (B is the next panel).",
                [
                    Query(f"job_id:commpulse_sync_period_seconds:avg{{{jobs}}}", "T {{job_id}}"),
                ],
                unit="s",
                width=6,
            )
        )
        .with_panel(
            series(
                "Job B",
                "Mean and slowest-host burst bandwidth of each job.",
                [
                    Query(
                        f"job_id:commpulse_burst_bandwidth_bytes_per_second:avg{{{jobs}}}",
                        "mean {{job_id}}",
                    ),
                    Query(
                        f"job_id:commpulse_burst_bandwidth_bytes_per_second:min{{{jobs}}}",
                        "min {{job_id}}",
                    ),
                ],
                unit="Bps",
                width=6,
            )
        )
        .with_panel(
            series(
                "Stragglers: compute time per step over the job median",
                "Each host's compute time per step relative to its job's median host; the "
                "straggler is the top line (everyone else waits for it).",
                [
                    Query(
                        f"instance:commpulse_compute_excess_over_job_median:ratio{{{jobs}}}",
                        "{{job_id}} {{instance}}",
                    ),
                    Query(
                        f"job_id:commpulse_compute_seconds_per_step:spread_ratio{{{jobs}}}",
                        "spread {{job_id}}",
                    ),
                ],
                unit="percentunit",
                # Below 0: a host that computes less than the median (the excess is signed).
                min_value=None,
            )
        )
        .with_panel(
            series(
                "Share of jobs that are network-bound",
                "Jobs whose mean D is above 0.5, over the jobs (job_id) that have a D (a job "
                "without a period, such as inference, has none): the share on the right axis "
                "(0-100 %), the counts of jobs on the left.",
                [
                    Query("cluster:commpulse_jobs_network_bound:ratio", "share network-bound"),
                    Query("cluster:commpulse_jobs_network_bound:count", "network-bound jobs"),
                    Query("cluster:commpulse_jobs:count", "jobs"),
                ],
                unit="short",
                overrides={
                    "A": [
                        dm.DynamicConfigValue(id_val="unit", value="percentunit"),
                        dm.DynamicConfigValue(id_val="min", value=0),
                        dm.DynamicConfigValue(id_val="max", value=1),
                        dm.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                    ]
                },
            )
        )
    )

    d = d.with_row(db.Row("NCCL"))
    calls = f"{{{HOSTS}}}[$__rate_interval]"
    d = d.with_panel(
        series(
            "Collective message size",
            "Mean collective size S per call (from the NCCL log) over the dashboard's rate "
            "window: bytes of the calls over their number. The p99 is approximate: the "
            "histogram's buckets are 4x apart (1 KiB, 4 KiB, 16 KiB, ...) and the quantile is "
            "interpolated inside one, so it can be off by up to 4x; it only says which bucket "
            "the largest calls fall in.",
            [
                Query(
                    f"sum by (instance) (rate(commpulse_collective_message_bytes_sum{calls}))"
                    " / (sum by (instance) (rate(commpulse_collective_message_bytes_count"
                    f"{calls})) > 0)",
                    "mean {{instance}}",
                ),
                _quantile(
                    0.99,
                    "commpulse_collective_message_bytes",
                    "instance",
                    "p99 approx. (4x buckets) {{instance}}",
                ),
            ],
            unit="bytes",
        )
    ).with_panel(
        series(
            "NCCL log lines",
            "WARN lines (read them: network errors often precede a stall), lines that mention "
            "NCCL but do not decode, and over-long lines dropped, per second.",
            [
                Query(
                    f"sum by (instance, kind) (rate(commpulse_nccl_log_lines_total{{{HOSTS}, "
                    'kind=~"warn|unparsed|overlong"}[$__rate_interval]))',
                    "{{kind}} {{instance}}",
                )
            ],
            unit="cps",
        )
    )
    d = d.with_panel(
        series(
            "GPU time per collective (NCCL Inspector)",
            "p50 and p99 of each op's execution time on the GPU, from the Inspector plugin "
            "(includes waiting for slower peers inside the kernel). P99 is what latency-bound "
            "inference and ZeRO layer trains feel.",
            [
                _quantile(
                    q, "commpulse_collective_exec_seconds", "op", f"p{int(q * 100)} {{{{op}}}}"
                )
                for q in (0.5, 0.99)
            ],
            unit="s",
        )
    ).with_panel(
        series(
            "Bus bandwidth per collective (NCCL Inspector)",
            "Median nccl-tests bus bandwidth of the recent GPU-timed collectives, by op.",
            [
                Query(
                    f"commpulse_collective_bus_bandwidth_bytes_per_second{{{HOSTS}}}",
                    "{{op}} {{instance}}",
                )
            ],
            unit="Bps",
        )
    )

    d = d.with_row(db.Row("Inference and fine-tuning"))
    d = (
        d.with_panel(
            series(
                "Inference: burst arrivals",
                "λ: communication bursts starting per second (each an inference request's "
                "AlltoAll / Send-Recv train at the poll resolution), and the CV of the idle gaps "
                "between them: ~1 Poisson, > 1.5 bursty, < 0.3 periodic.",
                [
                    Query(f"commpulse_burst_arrivals_per_second{{{HOSTS}}}", "λ {{instance}}"),
                    Query(f"commpulse_burst_gap_cv{{{HOSTS}}}", "gap CV {{instance}}"),
                ],
                unit="short",
            )
        )
        .with_panel(
            states(
                "Arrival pattern",
                "From the idle-gap CV of the window's bursts: periodic < 0.3 <= regular < 0.7 "
                "<= poisson < 1.5 <= bursty.",
                Query(
                    f"commpulse_burst_arrival_pattern{{{HOSTS}}} == 1", "{{instance}} {{pattern}}"
                ),
            )
        )
        .with_panel(
            series(
                "Burst duration p50 / p99",
                "How long communication bursts last (for inference the tail is the latency "
                "budget; for training the comm phase of a step): the exact P50 and P99 of the "
                "bursts in the agent's estimate window, not interpolated from histogram "
                "buckets. Absent while the poll rate cannot resolve the bursts.",
                [
                    Query(
                        f'commpulse_burst_duration_window_seconds{{{HOSTS}, percentile="{q}"}}',
                        f"p{q} {{{{instance}}}}",
                    )
                    for q in WINDOW_PERCENTILES
                ],
                unit="s",
            )
        )
        .with_panel(
            series(
                "Burst size p50 / p99",
                "Bytes above the background per communication burst: the exact P50 and P99 of "
                "the bursts in the agent's estimate window, not interpolated from histogram "
                "buckets.",
                [
                    Query(
                        f'commpulse_burst_size_window_bytes{{{HOSTS}, percentile="{q}"}}',
                        f"p{q} {{{{instance}}}}",
                    )
                    for q in WINDOW_PERCENTILES
                ],
                unit="decbytes",
            )
        )
        .with_panel(
            states(
                "ZeRO stage",
                "What the collective mix of the largest communicator implies: AllReduce only "
                "(DDP / ZeRO-1), one AllGather per ReduceScatter (ZeRO-2), two (ZeRO-3 / FSDP "
                "full shard).",
                Query(f"commpulse_zero_stage{{{HOSTS}}} == 1", "{{instance}} {{stage}}"),
            )
        )
        .with_panel(
            series(
                "Fine-tuning: latency share of a step",
                "Collectives per step × the per-collective latency (agent.collective_latency_s) "
                "/ T: what the per-layer collective train costs in latency alone.",
                [
                    Query(
                        f"commpulse_collective_latency_ratio{{{HOSTS}}}",
                        "latency share {{instance}}",
                    )
                ],
                unit="percentunit",
            )
        )
        .with_panel(
            series(
                "Fine-tuning: collectives per step and per-layer gap",
                "Collectives a process makes per step, and the median time between two of them "
                "inside a step (the layer spacing).",
                [
                    Query(f"commpulse_collectives_per_step{{{HOSTS}}}", "per step {{instance}}"),
                    Query(f"commpulse_layer_gap_seconds{{{HOSTS}}} * 1000", "gap ms {{instance}}"),
                ],
                unit="short",
            )
        )
        .with_panel(
            series(
                "AlltoAll rate and pipeline bubble",
                "AlltoAll calls per rank per second (MoE expert parallel), and the share of a "
                "step the pipeline schedule leaves a stage idle (pipeline parallel training).",
                [
                    Query(
                        f"commpulse_alltoall_calls_per_second{{{HOSTS}}}",
                        "AlltoAll/s {{instance}}",
                    ),
                    Query(
                        f"commpulse_pipeline_bubble_ratio{{{HOSTS}}}", "bubble share {{instance}}"
                    ),
                ],
                unit="short",
            )
        )
        .with_panel(
            series(
                "RoCE ACK round trip p50 / p99 (packet capture)",
                "Each RC ACK the live capture sees matched with the request of the PSN it "
                "acknowledges: the transport latency a latency-bound job (inference, ZeRO layer "
                "trains) pays per message. Needs [sources.packet_capture]; with sample_every N "
                "only one pair in N² is seen.",
                [
                    _quantile(
                        q,
                        "commpulse_capture_ack_latency_seconds",
                        "instance",
                        f"p{int(q * 100)} {{{{instance}}}}",
                    )
                    for q in (0.5, 0.99)
                ],
                unit="s",
                width=24,
            )
        )
    )

    d = d.with_row(db.Row("Agent health"))
    return (
        d.with_panel(
            states(
                "Sources up",
                "1 while a source delivers data. A down source is retried with backoff; the "
                "others keep running.",
                Query(f"commpulse_source_up{{{HOSTS}}}", "{{instance}} {{source}}"),
                texts=HEALTH,
            )
        )
        .with_panel(
            series(
                "Source errors and dropped readings",
                "Failures per second by source, and readings dropped because the queue was full.",
                [
                    Query(
                        f"rate(commpulse_source_errors_total{{{HOSTS}}}[$__rate_interval])",
                        "errors {{instance}} {{source}}",
                    ),
                    Query(
                        f"rate(commpulse_discarded_samples_total{{{HOSTS}}}[$__rate_interval])",
                        "dropped {{instance}} {{source}}",
                    ),
                ],
                unit="cps",
            )
        )
        .with_panel(
            series(
                "Estimator",
                "Run time of the last estimate and the age of the published one.",
                [
                    Query(
                        f"commpulse_estimator_duration_seconds{{{HOSTS}}}",
                        "run time {{instance}}",
                    ),
                    Query(f"commpulse_estimate_age_seconds{{{HOSTS}}}", "age {{instance}}"),
                ],
                unit="s",
            )
        )
        .with_panel(
            series(
                "Scrapes and MQTT",
                "Prometheus' own up for the agents, and the MQTT sink's connection.",
                [
                    Query(f'up{{job="commpulse", {HOSTS}}}', "scrape up {{instance}}"),
                    Query(
                        f"commpulse_export_connected{{{HOSTS}}}",
                        "{{sink}} connected {{instance}}",
                    ),
                    Query(
                        f"rate(commpulse_export_dropped_total{{{HOSTS}}}[$__rate_interval])",
                        "{{sink}} dropped/s {{instance}}",
                    ),
                ],
                unit="short",
            )
        )
    )


def render() -> str:
    """The dashboard JSON, as committed (stable key order, trailing newline)."""
    model = json.loads(JSONEncoder().encode(build().build()))
    # The SDK leaves panel ids unset (rows get 0); Grafana links and alerts need unique ones.
    for number, panel in enumerate(model["panels"], start=1):
        panel["id"] = number
    return json.dumps(model, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
