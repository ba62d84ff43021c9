"""The capacity-planning table: DOMAIN.md's worked examples are its test cases."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.config import ConfigError
from agent.estimate import Estimate
from agent.table import (
    COLUMNS,
    WhatIf,
    bus_factor,
    mix_factor,
    parse_what_if,
    planning_rows,
    predict,
    render_rows,
)

ALLREDUCE = {"AllReduce": (16, 20 * 10**9)}
#: DOMAIN.md: N=32, S=20 GB, 25 GB/s: AllReduce ≈ 2·20·31/32/25 = 1.55 s; 3 s of compute.
COMM = 2 * 20e9 * 31 / 32 / 25e9
T = 3.0 + COMM


def test_the_allreduce_time_of_the_worked_example() -> None:
    comm, period = COMM, T
    assert comm == pytest.approx(1.55)
    assert period == pytest.approx(4.55)
    assert comm / period == pytest.approx(0.34, abs=0.005)


def test_growing_n_with_the_ring_formula_barely_moves_d() -> None:
    """N 32 → 128 at the same bandwidth: per-rank volume 2S(N-1)/N goes from 1.9375 S to
    1.984 S, so D rises from 0.341 to 0.346 — DOMAIN.md's "rises sharply" needs a lower
    effective bandwidth too (more hops, oversubscribed uplinks)."""
    p = predict(period_s=T, duty_cycle=COMM / T, nranks=32, mix=ALLREDUCE, burst_bandwidth=25e9,
                what_if=WhatIf(nranks=128))  # fmt: skip
    assert p.communication_s == pytest.approx(2 * 20e9 * 127 / 128 / 25e9)
    assert p.period_s == pytest.approx(3.0 + 2 * 20e9 * 127 / 128 / 25e9)
    assert p.duty_cycle == pytest.approx(0.346, abs=0.001)
    assert not p.network_bound
    slower = predict(period_s=T, duty_cycle=COMM / T, nranks=32, mix=ALLREDUCE,
                     burst_bandwidth=25e9, what_if=WhatIf(nranks=128, bandwidth=0.4))  # fmt: skip
    assert slower.network_bound


def test_a_70b_model_on_64_ranks_is_network_bound() -> None:
    """DOMAIN.md: S ≈ 140 GB, N=64: 2S(N-1)/N ≈ 275 GB; at 25 GB/s one AllReduce ≈ 11 s,
    longer than the compute of a step."""
    p = predict(period_s=T, duty_cycle=COMM / T, nranks=32, mix=ALLREDUCE, burst_bandwidth=25e9,
                what_if=WhatIf(nranks=64, size=7.0))  # fmt: skip
    wire = 2 * 140e9 * 63 / 64
    assert wire == pytest.approx(275e9, rel=0.005)
    assert p.communication_s == pytest.approx(275.625e9 / 25e9)
    assert p.communication_s > p.compute_s
    assert p.network_bound


def test_absolute_bandwidth_is_relative_to_the_measured_b() -> None:
    p = predict(period_s=T, duty_cycle=COMM / T, nranks=32, mix=ALLREDUCE, burst_bandwidth=25e9,
                what_if=WhatIf(bandwidth_bytes_per_s=50e9))  # fmt: skip
    assert p.communication_s == pytest.approx(COMM / 2)
    with pytest.raises(ConfigError, match="needs a measured B"):
        predict(period_s=T, duty_cycle=0.3, nranks=32, mix=ALLREDUCE, burst_bandwidth=None,
                what_if=WhatIf(bandwidth_bytes_per_s=50e9))  # fmt: skip


def test_bus_factors_are_nccl_tests_and_the_mix_weights_them() -> None:
    assert bus_factor("AllReduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("AllGather", 8) == bus_factor("ReduceScatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("AlltoAll", 8) == pytest.approx(7 / 8)
    assert bus_factor("Broadcast", 8) == bus_factor("Send", 8) == 1.0
    zero = {"AllGather": (10, 3 * 10**9), "ReduceScatter": (10, 10**9)}
    assert mix_factor(zero, 8) == pytest.approx(7 / 8)
    assert mix_factor({"AllReduce": (1, 1), "Broadcast": (1, 1)}, 2) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nranks=128", WhatIf(nranks=128, text="nranks=128")),
        ("bandwidth=x0.5", WhatIf(bandwidth=0.5, text="bandwidth=x0.5")),
        ("bandwidth=50e9", WhatIf(bandwidth_bytes_per_s=50e9, text="bandwidth=50e9")),
        ("nranks=64, size=x7", WhatIf(nranks=64, size=7.0, text="nranks=64, size=x7")),
        ("compute=x2", WhatIf(compute=2.0, text="compute=x2")),
    ],
)
def test_what_if_specs(spec: str, expected: WhatIf) -> None:
    assert parse_what_if(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nranks=x2", "number of ranks"),
        ("nranks=1", "at least 2"),
        ("size=-1", "positive"),
        ("speed=x2", "unknown"),
        ("nranks", "key=value"),
        ("", "nothing to change"),
    ],
)
def test_bad_what_if_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_what_if(spec)


def test_analyze_table_end_to_end(training_job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [
        "--counters", str(training_job / "counters.csv"),
        "--gpu", str(training_job / "gpu.csv"),
        "--nccl-log", str(training_job / "nccl.log"),
    ]  # fmt: skip
    assert main(["analyze", *files, "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert main(["analyze", *files, "--table", "csv", "--what-if", "nranks=64,size=x7"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert tuple(rows[0]) == COLUMNS
    job, comm, what_if = rows
    assert job["row"] == "job"
    assert float(job["period_s"]) == pytest.approx(est["period_s"], rel=1e-5)
    assert float(job["duty_cycle"]) == pytest.approx(est["duty_cycle"], rel=1e-5)
    assert int(job["nranks"]) == 32
    assert float(job["collective_bytes_per_step"]) == pytest.approx(20e9, rel=0.01)
    assert job["collective_mix"] == "AllReduce 100%"
    assert job["network_bound"] == "no"
    assert comm["row"].startswith("comm ")
    assert comm["nranks"] == "32"
    assert what_if["network_bound"] == "yes"
    assert "crosses 0.5" in what_if["note"]
    assert float(what_if["communication_s"]) == pytest.approx(11.0, rel=0.03)  # DOMAIN: ≈ 11 s
    assert main(["analyze", *files, "--table", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["regime"] == "training"
    assert main(["analyze", *files, "--table", "md"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0].startswith("| row | regime | nranks |")
    assert len(md) == 4  # header, rule, job, communicator


def test_table_errors(training_job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counters = ["--counters", str(training_job / "counters.csv")]
    assert main(["analyze", *counters, "--json", "--table", "csv"]) == 1
    assert "not both" in capsys.readouterr().err
    assert main(["analyze", *counters, "--what-if", "nranks=64"]) == 1
    assert "give --table" in capsys.readouterr().err
    # without an NCCL log there is no N: the what-if row says what it needs
    assert main(["analyze", *counters, "--table", "json", "--what-if", "nranks=64"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert "needs T and D" in rows[-1]["note"]


def _estimate(period_s: float | None, regime: str) -> Estimate:
    return Estimate(
        period_s=period_s,
        burst_bandwidth=10e9,
        duty_cycle=None if period_s is None else 0.3,
        confidence=0.0 if period_s is None else 0.9,
        regime=regime,
        network_on_ratio=0.1,
        nranks=32,
        collectives={"AlltoAll": (100, 10**9)},
    )


ARRIVALS = {
    "bursts": 107,
    "arrival_rate_hz": 1.78,
    "inter_arrival_cv": 0.79,
    "verdict": "poisson",
    "burst_bytes": {"p50": 5.2e8, "p90": 7.4e8, "p99": 1.06e9},
    "burst_duration_s": {"p50": 0.053, "p90": 0.075, "p99": 0.108},
}


def test_inference_rows_carry_arrivals_alltoall_and_pipeline() -> None:
    rows = planning_rows(
        _estimate(None, "inference"),
        arrivals=ARRIVALS,
        alltoall={"calls": 3776, "nranks": 32, "grouped_send_recv_calls": 12,
                  "message_bytes": {"p50": 16777216.0, "p99": 16777216.0},
                  "call_rate_per_rank_hz": 62.9},
        pipeline={"stages": 4, "nranks": 8, "p2p_calls": 40, "reason": None,
                  "message_bytes": {"p50": 1e6, "p99": 2e6}, "bubble_ratio": 0.27},
    )  # fmt: skip
    job, a2a, pipe = rows
    assert job["period_s"] is None
    assert (job["arrival_rate_hz"], job["inter_arrival_cv"], job["arrival_pattern"]) == (
        1.78,
        0.79,
        "poisson",
    )
    assert (job["burst_bytes_p99"], job["burst_duration_p99_s"]) == (1.06e9, 0.108)
    assert (a2a["row"], a2a["calls"], a2a["message_bytes_p50"]) == ("alltoall", 3776, 16777216.0)
    assert a2a["arrival_rate_hz"] == 62.9
    assert "12 from grouped Send/Recv" in a2a["note"]
    assert (pipe["row"], pipe["pipeline_stages"], pipe["calls"]) == ("pipeline", 4, 40)
    assert pipe["pipeline_bubble_ratio"] == 0.27
    assert next(iter(csv.reader(io.StringIO(render_rows(rows, "csv"))))) == list(COLUMNS)


def test_a_periodic_job_is_described_by_t_b_d_not_by_arrivals() -> None:
    (job,) = planning_rows(_estimate(1.0, "training"), arrivals=ARRIVALS)
    assert job["period_s"] == 1.0
    assert job["arrival_rate_hz"] is None
    assert job["arrival_pattern"] is None


def test_a_capture_with_matched_acks_adds_a_latency_row() -> None:
    capture = {"ack_latency_samples": 1458,
               "ack_latency_s": {"p50": 5.0e-6, "p90": 7.5e-6, "p99": 1.1e-5}}  # fmt: skip
    rows = planning_rows(_estimate(1.0, "training"), capture=capture)
    (ack,) = [r for r in rows if r["row"] == "roce ack"]
    assert (ack["calls"], ack["latency_p50_s"], ack["latency_p99_s"]) == (1458, 5.0e-6, 1.1e-5)
    none = planning_rows(_estimate(1.0, "training"), capture={"ack_latency_samples": 0})
    assert [r["row"] for r in none] == ["job"]
