"""The Prometheus exposition: contract names, absent-not-zero, and promtool's lint."""

from __future__ import annotations

import math
import subprocess

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from agent.estimate import Estimate
from agent.pipeline import Snapshot, SourceHealth
from collectors._base import CallBatch
from tests.conftest import exposition, require_component


def _estimate(**kw: object) -> Estimate:
    base: dict[str, object] = {
        "period_s": 4.55,
        "burst_bandwidth": 25e9,
        "duty_cycle": 0.34,
        "confidence": 0.95,
        "regime": "training",
        "network_on_ratio": 0.34,
        "nranks": 32,
        "collectives": {"AllReduce": (16, 20_000_000_000)},
    }
    base.update(kw)
    return Estimate(**base)  # type: ignore[arg-type]


def _exposition(est: Estimate | None) -> str:
    return exposition(
        Snapshot(
            estimate=est,
            time_s=1.0,
            wall_time_s=1.0,
            estimator_seconds=0.01,
            sources=(SourceHealth("nic_counters", up=True, readings=5),
                     SourceHealth("nccl_log", up=False, errors=2)),
        )
    )  # fmt: skip


def _assert_promtool_clean(text: str) -> None:
    promtool = require_component("promtool")
    res = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_contract_metrics_are_exported() -> None:
    s = _samples(_exposition(_estimate()))
    assert s[("commpulse_sync_period_seconds", ())] == 4.55
    assert s[("commpulse_burst_bandwidth_bytes_per_second", ())] == 25e9
    assert s[("commpulse_duty_cycle_ratio", ())] == 0.34
    assert s[("commpulse_period_confidence_ratio", ())] == 0.95
    assert s[("commpulse_network_on_ratio", ())] == 0.34
    assert s[("commpulse_workload_regime", (("regime", "training"),))] == 1.0
    assert s[("commpulse_workload_regime", (("regime", "inference"),))] == 0.0
    assert s[("commpulse_source_up", (("source", "nic_counters"),))] == 1.0
    assert s[("commpulse_source_up", (("source", "nccl_log"),))] == 0.0
    assert s[("commpulse_source_errors_total", (("source", "nccl_log"),))] == 2.0
    assert s[("commpulse_collective_calls_total", (("op", "AllReduce"),))] == 16.0
    assert s[("commpulse_collective_bytes_total", (("op", "AllReduce"),))] == 2e10


def test_no_period_means_no_period_series_not_zero() -> None:
    text = _exposition(_estimate(period_s=None, confidence=0.0, regime="inference"))
    assert "commpulse_sync_period_seconds" not in text
    s = _samples(text)
    assert s[("commpulse_workload_regime", (("regime", "inference"),))] == 1.0


def test_before_the_first_estimate_only_health_is_exported() -> None:
    text = _exposition(None)
    assert "commpulse_build_info" in text
    assert "commpulse_source_up" in text
    assert "commpulse_duty_cycle_ratio" not in text


def test_promtool_check_metrics_is_clean() -> None:
    promtool = require_component("promtool")
    text = _exposition(_estimate(inner_period_s=0.03, exposed_ratio=0.3, overlapped_ratio=0.04))
    res = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _snapshot_exposition(**kw: object) -> str:
    base: dict[str, object] = {
        "estimate": _estimate(gpu_signal="sm_active", gpu_activity=0.62),
        "time_s": 1.0,
        "wall_time_s": 1_800_000_000.0,
        "estimator_seconds": 0.01,
        "sources": (),
    }
    base.update(kw)
    return exposition(Snapshot(**base))  # type: ignore[arg-type]


def test_job_identity_and_last_burst_are_exported_for_the_fleet_rules() -> None:
    text = _snapshot_exposition(
        job_id="nccl-5a9e03b1", job_id_source="nccl", last_burst_wall_s=1_799_999_998.5
    )
    s = _samples(text)
    key = (("job_id", "nccl-5a9e03b1"), ("job_id_source", "nccl"))
    assert s[("commpulse_job_info", key)] == 1.0
    assert s[("commpulse_last_burst_timestamp_seconds", ())] == 1_799_999_998.5
    assert s[("commpulse_gpu_activity_ratio", (("signal", "sm_active"),))] == 0.62


def test_every_gpu_signal_is_exported_for_the_hang_alert() -> None:
    """tensor_active is the best signal for D, but reads ~0 in a hang as after the job's end;
    util and gr_engine_active read NCCL's spin: all go out, so that CommpulseJobStalled sees
    a hang on a host whose best signal cannot (it exported the best one only)."""
    est = _estimate(
        gpu_signal="tensor_active",
        gpu_activity=0.01,
        gpu_activities=(("gr_engine_active", 0.97), ("tensor_active", 0.01), ("util", 1.0)),
    )
    s = _samples(_snapshot_exposition(estimate=est))
    assert s[("commpulse_gpu_activity_ratio", (("signal", "tensor_active"),))] == 0.01
    assert s[("commpulse_gpu_activity_ratio", (("signal", "gr_engine_active"),))] == 0.97
    assert s[("commpulse_gpu_activity_ratio", (("signal", "util"),))] == 1.0


def test_no_job_and_no_burst_yet_export_nothing_rather_than_a_fake_value() -> None:
    text = _snapshot_exposition(estimate=_estimate())
    assert "commpulse_job_info" not in text
    assert "commpulse_last_burst_timestamp_seconds" not in text
    assert "commpulse_gpu_activity_ratio" not in text


def test_nccl_log_health_and_message_sizes_are_exported_promtool_clean() -> None:
    from agent.windows import CollectiveWindow

    window = CollectiveWindow(64)
    for size in (1024.0, 1025.0, 4.0e6, 2.0e10, float("nan")):
        window.add_batch(_batch(size))
    hist = window.size_histogram()
    assert hist is not None
    text = _snapshot_exposition(
        source_stats={"nccl_log": {"lines": 120, "coll_lines": 100, "warn_lines": 3,
                                   "unparsed_lines": 2, "overlong_lines": 1, "rotations": 1,
                                   "truncations": 0, "files": 4, "unread_bytes": 5 << 20}},
        message_sizes=hist,
    )  # fmt: skip
    s = _samples(text)
    assert s[("commpulse_nccl_log_lines_total", (("kind", "warn"),))] == 3.0
    assert s[("commpulse_nccl_log_lines_total", (("kind", "unparsed"),))] == 2.0
    assert s[("commpulse_nccl_log_file_events_total", (("event", "rotation"),))] == 1.0
    assert s[("commpulse_nccl_log_files", ())] == 4.0
    assert s[("commpulse_nccl_log_unread_bytes", ())] == float(5 << 20)
    # le buckets: 1024 falls in le="1024", 1025 in the next; NaN (unknown S) is not counted
    assert s[("commpulse_collective_message_bytes_bucket", (("le", "1024"),))] == 1.0
    assert s[("commpulse_collective_message_bytes_bucket", (("le", "4096"),))] == 2.0
    assert s[("commpulse_collective_message_bytes_bucket", (("le", "4194304"),))] == 3.0
    assert s[("commpulse_collective_message_bytes_bucket", (("le", "17179869184"),))] == 3.0
    assert s[("commpulse_collective_message_bytes_bucket", (("le", "+Inf"),))] == 4.0
    assert s[("commpulse_collective_message_bytes_count", ())] == 4.0
    assert s[("commpulse_collective_message_bytes_sum", ())] == 1024.0 + 1025.0 + 4.0e6 + 2.0e10
    _assert_promtool_clean(text)


def _batch(size: float) -> CallBatch:
    return CallBatch(
        times=np.asarray([1.0]),
        s_bytes=np.asarray([size]),
        ops={"AllReduce": (1, int(size) if math.isfinite(size) else 0)},
        nranks=8,
        processes=frozenset({"h:1"}),
    )


def test_capture_totals_are_exported_promtool_clean() -> None:
    text = _snapshot_exposition(
        source_stats={"packet_capture": {
            "captured_packets": 5000, "roce_packets": 1200, "cnp_packets": 40, "nak_packets": 6,
            "seq_nak_packets": 5, "ack_packets": 300,
            "undecoded_packets": 3, "kernel_dropped_packets": 7, "late_packets": 2,
            "handover_drops": 1, "tcp_bytes": 10_000, "udp_bytes": 90_000, "flows": 12,
            "queue_pairs": 4, "sample_every": 4, "ack_latency_sum_ns": 3_000_000,
            "ack_latency_bucket_2": 2, "ack_latency_bucket_9": 1,
        }}
    )  # fmt: skip
    s = _samples(text)
    assert s[("commpulse_capture_packets_total", (("kind", "cnp"),))] == 40.0
    assert s[("commpulse_capture_packets_total", (("kind", "seq_nak"),))] == 5.0
    assert s[("commpulse_capture_packets_total", (("kind", "captured"),))] == 5000.0
    assert s[("commpulse_capture_dropped_packets_total", ())] == 7.0
    assert s[("commpulse_capture_late_packets_total", ())] == 2.0
    assert s[("commpulse_capture_dropped_handovers_total", ())] == 1.0
    assert s[("commpulse_capture_protocol_bytes_total", (("protocol", "udp"),))] == 90_000.0
    assert s[("commpulse_capture_flows", ())] == 12.0
    assert s[("commpulse_capture_queue_pairs", ())] == 4.0
    assert s[("commpulse_capture_sample_every", ())] == 4.0
    # Two round trips of (2 µs, 5 µs], one of (0.5 ms, 1 ms]
    assert s[("commpulse_capture_ack_latency_seconds_bucket", (("le", "5e-06"),))] == 2.0
    assert s[("commpulse_capture_ack_latency_seconds_bucket", (("le", "0.001"),))] == 3.0
    assert s[("commpulse_capture_ack_latency_seconds_count", ())] == 3.0
    assert s[("commpulse_capture_ack_latency_seconds_sum", ())] == 0.003
    _assert_promtool_clean(text)


def test_no_capture_source_means_no_capture_series() -> None:
    assert "commpulse_capture_" not in _snapshot_exposition(source_stats={})


def test_regime_parameters_are_exported_with_bounded_labels_promtool_clean() -> None:
    from agent.arrivals import ArrivalStats, Percentiles
    from agent.p2p import AlltoAllStats, PipelineStats
    from agent.regime_params import RegimeParams
    from agent.sharding import ShardingStats
    from agent.windows import BurstTally

    arrivals = ArrivalStats(
        window_s=60.0, dt=0.01, bursts=90, arrival_rate_hz=1.5,
        size_bytes=Percentiles(2e6, 8e6, 3e7), duration_s=Percentiles(0.02, 0.05, 0.2),
        inter_arrival_mean_s=0.66, inter_arrival_cv=0.9, gap_mean_s=0.6, gap_cv=1.02,
        verdict="poisson", busy_ratio=0.05, resolved=True,
    )  # fmt: skip
    sharding = ShardingStats(
        comm="c0ffee", nranks=16, processes=8, stage="zero3_or_fsdp_full_shard", reason="",
        calls_per_process={}, allgather_per_reduce_scatter=2.0, period_s=1.0, steps=10,
        collectives_per_step=240.0, allgather_per_step=160.0, reduce_scatter_per_step=80.0,
        message_bytes=None, layer_gap_s=0.0021, latency_s=1e-5, latency_source="config",
        latency_per_step_s=0.0024, latency_share=0.0024,
    )  # fmt: skip
    a2a = AlltoAllStats(30, 30, 0, 1, 8, Percentiles(8192.0, 8192.0, 16384.0), 0.5)
    pipe = PipelineStats(4, 1, 4, 80, None, (0,), None, 8.0, 3 / 11)
    tally = BurstTally()
    tally.add(np.array([1.0, 2.0]), np.array([1e6, 3e9]), np.array([0.004, np.nan]), 0.01)
    text = _snapshot_exposition(
        regime=RegimeParams(arrivals=arrivals, sharding=sharding, alltoall=a2a, pipeline=pipe),
        burst_bytes=tally.sizes.histogram(),
        burst_seconds=tally.durations.histogram(),
    )
    s = _samples(text)
    assert s[("commpulse_burst_arrivals_per_second", ())] == 1.5
    assert s[("commpulse_burst_gap_cv", ())] == 1.02
    patterns = {k[1][0][1]: v for k, v in s.items() if k[0] == "commpulse_burst_arrival_pattern"}
    assert patterns == {"periodic": 0.0, "regular": 0.0, "poisson": 1.0, "bursty": 0.0}
    assert s[("commpulse_burst_duration_window_seconds", (("percentile", "99"),))] == 0.2
    assert s[("commpulse_burst_size_window_bytes", (("percentile", "50"),))] == 2e6
    stages = {k[1][0][1]: v for k, v in s.items() if k[0] == "commpulse_zero_stage"}
    assert stages == {"ddp_or_zero1": 0.0, "zero2": 0.0, "zero3_or_fsdp_full_shard": 1.0,
                      "unknown": 0.0}  # fmt: skip
    assert s[("commpulse_collectives_per_step", ())] == 240.0
    assert s[("commpulse_layer_gap_seconds", ())] == 0.0021
    assert s[("commpulse_collective_latency_ratio", ())] == 0.0024
    assert s[("commpulse_alltoall_calls_per_second", ())] == 0.5
    assert s[("commpulse_alltoall_message_window_bytes", (("percentile", "99"),))] == 16384.0
    assert s[("commpulse_pipeline_stages", ())] == 4.0
    assert s[("commpulse_pipeline_bubble_ratio", ())] == 3 / 11
    # Histograms since the start: both bursts sized, only the resolved one timed.
    assert s[("commpulse_burst_size_bytes_count", ())] == 2.0
    assert s[("commpulse_burst_size_bytes_bucket", (("le", "1048576"),))] == 1.0
    assert s[("commpulse_burst_duration_seconds_count", ())] == 1.0
    assert s[("commpulse_burst_duration_seconds_bucket", (("le", "0.005"),))] == 1.0
    _assert_promtool_clean(text)


def test_unknown_regime_parameters_are_absent_not_zero() -> None:
    from agent.arrivals import ArrivalStats
    from agent.regime_params import RegimeParams

    flat = ArrivalStats(
        window_s=60.0, dt=0.01, bursts=0, arrival_rate_hz=None, size_bytes=None,
        duration_s=None, inter_arrival_mean_s=None, inter_arrival_cv=None, gap_mean_s=None,
        gap_cv=None, verdict=None, busy_ratio=None, resolved=False,
    )  # fmt: skip
    text = _snapshot_exposition(regime=RegimeParams(arrivals=flat))
    for name in (
        "commpulse_burst_arrivals_per_second",
        "commpulse_burst_arrival_pattern",
        "commpulse_burst_size_window_bytes",
        "commpulse_zero_stage",
        "commpulse_pipeline_",
        "commpulse_alltoall_",
        "commpulse_burst_size_bytes",
    ):
        assert name not in text  # fmt: skip
