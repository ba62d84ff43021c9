"""simulate → analyze recovers the truth (issue: foundation acceptance criteria)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.cli import main
from agent.simulator.files import simulate_to_dir
from agent.simulator.nccl_writer import LoggedCall, render_nccl_log
from agent.simulator.params import JobParams
from agent.simulator.sampling import Cumulative

CONTRACT_KEYS = {
    "period_s",
    "burst_bandwidth_bytes_per_s",
    "duty_cycle",
    "confidence",
    "regime",
    "network_on_ratio",
    "nranks",
    "collectives",
}


def _simulate(out: Path, *args: str) -> dict[str, Any]:
    assert main(["simulate", "--out", str(out), *args]) == 0
    return json.loads((out / "truth.json").read_text())


def _all_files(run: Path) -> list[str]:
    """analyze arguments for every file a simulated run wrote (but the pcap)."""
    return [
        "--counters", str(run / "counters.csv"),
        "--gpu", str(run / "gpu.csv"),
        "--nccl-log", str(run / "nccl.log"),
    ]  # fmt: skip


def _analyze(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["analyze", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_console_scripts_end_to_end(tmp_path: Path) -> None:
    """The README's tour, through the installed ``commpulse`` entry point."""
    exe = [sys.executable, "-m", "agent"]
    sim = subprocess.run(
        [*exe, "simulate", "--scenario", "training", "--out", str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "truth.json" in sim.stdout
    res = subprocess.run(
        [*exe, "analyze", "--counters", str(tmp_path / "counters.csv"),
         "--gpu", str(tmp_path / "gpu.csv"), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = json.loads(res.stdout)
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert set(out) >= CONTRACT_KEYS
    assert out["period_s"] == pytest.approx(truth["period_s"], rel=0.01)
    assert out["burst_bandwidth_bytes_per_s"] == pytest.approx(
        truth["burst_bandwidth_bytes_per_s"], rel=0.05
    )
    assert out["duty_cycle"] == pytest.approx(truth["duty_cycle"], abs=0.03)
    assert out["regime"] == "training"
    # The worked example itself: T ≈ 4.55 s, D ≈ 0.34.
    assert out["period_s"] == pytest.approx(4.55, rel=0.01)
    assert out["duty_cycle"] == pytest.approx(0.34, abs=0.01)


PARAMETER_SETS = [
    pytest.param([], id="domain-example"),
    pytest.param(["--period", "0.05", "--duty", "0.3", "--sample-rate", "1000",
                  "--duration", "10", "--gpu-interval", "0.005"], id="T=50ms"),
    pytest.param(["--period", "0.5", "--duty", "0.05", "--sample-rate", "1000",
                  "--duration", "20", "--gpu-interval", "0.01"], id="D=0.05"),
    pytest.param(["--period", "1", "--duty", "0.8", "--noise", "0.1"], id="D=0.8-noisy"),
    pytest.param(["--period", "30", "--duty", "0.2", "--sample-rate", "10",
                  "--gpu-interval", "1"], id="T=30s"),
    pytest.param(["--period", "2", "--duty", "0.5", "--noise", "0.2", "--jitter", "0.03"],
                 id="noise=0.2-jitter=3%"),
    pytest.param(["--period", "10", "--duty", "0.05", "--poll-jitter", "0.2",
                  "--missing", "0.1"], id="missed-polls"),
    pytest.param(["--period", "3", "--duty", "0.4", "--local-ranks", "8",
                  "--counter-bits", "32"], id="8-nics-32bit-wrap"),
]  # fmt: skip


@pytest.mark.parametrize("args", PARAMETER_SETS)
def test_training_truth_is_recovered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    truth = _simulate(tmp_path, "--seed", "7", *args)
    out = _analyze(
        capsys, "--counters", str(tmp_path / "counters.csv"), "--gpu", str(tmp_path / "gpu.csv")
    )
    assert set(out) >= CONTRACT_KEYS
    assert out["period_s"] == pytest.approx(truth["period_s"], rel=0.01)
    assert out["burst_bandwidth_bytes_per_s"] == pytest.approx(
        truth["burst_bandwidth_bytes_per_s"], rel=0.05
    )
    assert out["duty_cycle"] == pytest.approx(truth["duty_cycle"], abs=0.03)
    assert out["network_on_ratio"] == pytest.approx(truth["network_on_ratio"], abs=0.03)
    assert out["regime"] == "training"
    assert out["confidence"] > 0.5


def test_gpu_separated_duty_is_reported_when_the_gpu_resolves_the_phases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _simulate(tmp_path, "--seed", "3")
    out = _analyze(
        capsys, "--counters", str(tmp_path / "counters.csv"), "--gpu", str(tmp_path / "gpu.csv")
    )
    assert out["duty_cycle_source"] == "gpu_exposed"
    assert out["gpu_signal"] == "sm_active"


@pytest.mark.parametrize(
    ("period", "duty", "overlap"), [("2", "0.5", "0.6"), ("4", "0.35", "0.3"), ("1", "0.6", "0.0")]
)
def test_overlapped_communication_is_split_from_the_exposed_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], period: str, duty: str, overlap: str
) -> None:
    """DDP hides part of the AllReduce behind the backward pass: with an SM-activity signal, D
    is the exposed part, and the link's on-fraction is reported beside it."""
    truth = _simulate(tmp_path, "--seed", "5", "--period", period, "--duty", duty,
                      "--overlap", overlap, "--duration", "120")  # fmt: skip
    assert truth["network_on_ratio"] == pytest.approx(float(duty), abs=0.02)
    assert truth["duty_cycle"] == pytest.approx(float(duty) * (1 - float(overlap)), abs=0.02)
    out = _analyze(
        capsys, "--counters", str(tmp_path / "counters.csv"), "--gpu", str(tmp_path / "gpu.csv")
    )
    assert out["duty_cycle_source"] == "gpu_exposed"
    assert out["duty_cycle"] == pytest.approx(truth["duty_cycle"], abs=0.03)
    assert out["network_on_ratio"] == pytest.approx(truth["network_on_ratio"], abs=0.03)
    assert out["overlapped_comm_ratio"] == pytest.approx(truth["overlapped_ratio"], abs=0.03)


def test_with_only_utilization_gpu_d_is_the_network_on_fraction_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """utilization.gpu counts NCCL's kernels as busy: it cannot split D, and the output says
    D came from the network."""
    truth = _simulate(tmp_path, "--seed", "5", "--period", "2", "--duty", "0.5",
                      "--overlap", "0.6", "--duration", "120")  # fmt: skip
    rows = (tmp_path / "gpu.csv").read_text().splitlines()
    util_only = tmp_path / "util.csv"
    util_only.write_text(
        "\n".join(",".join(c for i, c in enumerate(r.split(",")) if i != 2) for r in rows) + "\n"
    )
    assert util_only.read_text().startswith("time,gpu,util\n")
    out = _analyze(capsys, "--counters", str(tmp_path / "counters.csv"), "--gpu", str(util_only))
    assert out["gpu_signal"] == "util"
    assert out["duty_cycle_source"] == "network"
    assert out["duty_cycle"] == pytest.approx(truth["network_on_ratio"], abs=0.03)


@pytest.mark.parametrize("scenario", ["inference", "idle"])
def test_aperiodic_scenarios_report_no_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    truth = _simulate(tmp_path, "--scenario", scenario, "--seed", "2")
    out = _analyze(capsys, *_all_files(tmp_path))
    assert out["period_s"] is None
    assert out["confidence"] == 0.0
    assert out["regime"] == truth["regime"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_finetune_and_training_are_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    ft = _simulate(tmp_path / "ft", "--scenario", "finetune", "--seed", str(seed))
    tr = _simulate(tmp_path / "tr", "--scenario", "training", "--seed", str(seed))
    out_ft = _analyze(capsys, "--counters", str(tmp_path / "ft" / "counters.csv"))
    out_tr = _analyze(capsys, "--counters", str(tmp_path / "tr" / "counters.csv"))
    assert out_ft["regime"] == "finetune"
    assert out_tr["regime"] == "training"
    assert out_ft["period_s"] == pytest.approx(ft["period_s"], rel=0.01)
    assert out_tr["period_s"] == pytest.approx(tr["period_s"], rel=0.01)
    assert out_ft["inner_period_s"] is not None


def test_nccl_log_alone_gives_t_collectives_and_nranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = _simulate(tmp_path, "--seed", "4", "--local-ranks", "2")
    out = _analyze(capsys, "--nccl-log", str(tmp_path / "nccl.log"))
    assert out["period_s"] == pytest.approx(truth["period_s"], rel=0.01)
    assert out["period_source"] == "nccl_log"
    assert out["nranks"] == 32
    assert out["collectives"] == truth["collectives"]
    assert out["burst_bandwidth_bytes_per_s"] is None  # the log has no GPU timing
    assert out["collective_bytes_per_step"] == pytest.approx(truth["size_bytes"], rel=0.01)


def test_all_sources_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truth = _simulate(tmp_path, "--seed", "5", "--scenario", "finetune")
    out = _analyze(capsys, *_all_files(tmp_path))
    assert out["regime"] == "finetune"
    assert set(out["collectives"]) == {"AllGather", "ReduceScatter"}
    assert out["period_s"] == pytest.approx(truth["period_s"], rel=0.01)


def test_pcap_gives_the_same_numbers_as_the_counters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Small rates keep the capture small: 25 MB/s in 4 kB frames.
    truth = _simulate(
        tmp_path, "--seed", "6", "--period", "0.5", "--duty", "0.3", "--bandwidth", "25MB/s",
        "--duration", "12", "--pcap",
    )  # fmt: skip
    out = _analyze(capsys, "--pcap", str(tmp_path / "capture.pcap"))
    assert out["period_s"] == pytest.approx(truth["period_s"], rel=0.01)
    assert out["burst_bandwidth_bytes_per_s"] == pytest.approx(
        truth["burst_bandwidth_bytes_per_s"], rel=0.05
    )
    assert out["duty_cycle"] == pytest.approx(truth["duty_cycle"], abs=0.03)
    assert out["capture"]["roce_packets"] == out["capture"]["packets"]
    assert out["capture"]["flows"] >= 2
    # The peers' ACKs: round-trip percentiles as simulated (µs), all of our own requests.
    acks = out["capture"]["ack_latency_s"]
    for q in ("p50", "p90", "p99"):
        assert acks[q] == pytest.approx(truth["capture"]["ack_latency_s"][q], abs=0.5e-6)
    assert out["capture"]["ack_latency_local_requester_s"] == acks
    assert out["capture"]["ack_latency_samples"] > 1000


def test_table_output_is_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _simulate(tmp_path, "--seed", "1")
    capsys.readouterr()
    assert main(["analyze", "--counters", str(tmp_path / "counters.csv"),
                 "--nccl-log", str(tmp_path / "nccl.log")]) == 0  # fmt: skip
    text = capsys.readouterr().out
    for fragment in ("T  sync period", "B  burst bandwidth", "D  duty cycle", "AllReduce",
                     "compute-bound", "regime"):  # fmt: skip
        assert fragment in text


# --- inference: burst arrivals, AlltoAll, pipeline stages (issue 10) ----------------------------


def _inference_run(out: Path, **kw: Any) -> dict[str, Any]:
    return simulate_to_dir(JobParams(scenario="inference", **kw), out)


@pytest.mark.parametrize(
    ("process", "seed", "verdict"), [("poisson", 1, "poisson"), ("mmpp", 2, "bursty")]
)
def test_inference_arrivals_and_alltoall_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], process: str, seed: int, verdict: str
) -> None:
    """λ within the merge tolerance of tests/unit/test_arrivals.py (1 - exp(-2 λ_on dt) + 1 %);
    AlltoAll S exact; its rate per rank within 10 % (the log's span ends at the first and last
    request, about one inter-request gap short of the run: 2 × 0.5 s of 60 s, plus chance)."""
    truth = _inference_run(tmp_path, arrival_process=process, seed=seed, duration_s=120)
    out = _analyze(capsys, *_all_files(tmp_path))
    assert out["regime"] == "inference"
    assert out["period_s"] is None
    arr, true_arr = out["arrivals"], truth["arrivals"]
    rate_on = 2.0 * (5.0 if process == "mmpp" else 1.0)
    tol = 1 - math.exp(-2 * rate_on * 0.01) + 0.01
    assert arr["arrival_rate_hz"] == pytest.approx(true_arr["burst_rate_hz"], rel=tol)
    assert arr["verdict"] == verdict == true_arr["verdict"]
    assert arr["burst_bytes"]["p50"] is not None
    assert arr["burst_duration_s"]["p99"] is not None
    a2a = out["alltoall"]
    assert a2a["calls"] == truth["alltoall"]["calls"] == out["collectives"]["AlltoAll"]["count"]
    assert a2a["grouped_send_recv_calls"] == 0
    assert a2a["message_bytes"]["p50"] == truth["alltoall"]["message_bytes"]
    assert a2a["call_rate_per_rank_hz"] == pytest.approx(
        truth["alltoall"]["call_rate_per_rank_hz"], rel=0.1
    )
    assert out["pipeline"] is None
    capsys.readouterr()
    assert main(["analyze", *_all_files(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert f": {verdict}" in text
    assert "burst duration    P50" in text
    assert "AlltoAll          " in text


def test_a_training_job_has_arrivals_but_no_alltoall_or_pipeline(
    training_job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _analyze(capsys, *_all_files(training_job))
    assert out["regime"] == "training"
    assert out["arrivals"]["verdict"] == "periodic"
    assert out["alltoall"] is None
    assert out["pipeline"] is None
    only_log = _analyze(capsys, "--nccl-log", str(training_job / "nccl.log"))
    assert only_log["arrivals"] is None  # no counters or capture: no rate series


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("process", ["poisson", "mmpp"])
def test_the_inference_regime_never_reports_a_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int, process: str
) -> None:
    _inference_run(tmp_path, arrival_process=process, seed=seed, duration_s=120)
    for files in (_all_files(tmp_path), ["--nccl-log", str(tmp_path / "nccl.log")]):
        out = _analyze(capsys, *files)
        assert out["regime"] == "inference"
        assert out["period_s"] is None
        assert out["duty_cycle"] is None


def _write_log(path: Path, calls: list[LoggedCall], nranks: int, version: str) -> None:
    lines = render_nccl_log(
        calls, hostname="gpu-node-01", nranks=nranks, first_rank=0, local_ranks=nranks,
        start_time_s=1767225600.0, seed=7, version=version,
    )  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))


def test_grouped_send_recv_of_an_older_nccl_is_counted_as_alltoall(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NCCL 2.21 has no AlltoAll op: PyTorch's all_to_all_single groups a Send and a Recv to
    every peer; the lines of one rank come back to back, the ranks interleaved. Requests at
    random (Poisson) times, as inference serves them."""
    nranks, rounds, count = 8, 20, 65536
    starts = 1767225601.0 + np.cumsum(np.random.default_rng(5).exponential(0.05, rounds))
    calls = []
    for k in range(rounds):
        for rank in range(nranks):
            t = float(starts[k]) + 1e-4 * rank
            for i, peer in enumerate(p for p in range(nranks) if p != rank):
                for j, op in enumerate(("Send", "Recv")):
                    calls.append(LoggedCall(t + 1e-6 * (2 * i + j), op, count, 9, rank, peer))
    log = tmp_path / "nccl.log"
    _write_log(log, calls, nranks, "2.21.5")
    out = _analyze(capsys, "--nccl-log", str(log))
    a2a = out["alltoall"]
    assert a2a["calls"] == a2a["grouped_send_recv_calls"] == nranks * rounds
    assert a2a["native_calls"] == 0
    assert a2a["message_bytes"]["p50"] == count * 2 * nranks  # nccl-tests S: count·size·nranks
    span = max(c.time_s for c in calls) - min(c.time_s for c in calls)
    assert a2a["call_rate_per_rank_hz"] == pytest.approx(rounds / span, rel=1e-3)
    assert out["collectives"]["Send"]["count"] == nranks * rounds * (nranks - 1)  # unchanged
    assert out["pipeline"] is None
    assert out["regime"] == "inference"


def test_pipeline_stages_come_from_the_send_recv_peers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 ranks, 4 stages of 2 (pipeline outermost): rank r hands to r + 2, receives from r - 2."""
    nranks, stride, micro = 8, 2, 12
    calls = []
    for m in range(micro):
        for rank in range(nranks):
            t = 1767225601.0 + 0.02 * m + 1e-4 * rank
            if rank + stride < nranks:
                calls.append(LoggedCall(t, "Send", 1 << 20, 9, rank, rank + stride))
            if rank >= stride:
                calls.append(LoggedCall(t + 1e-6, "Recv", 1 << 20, 9, rank, rank - stride))
    log = tmp_path / "nccl.log"
    _write_log(log, calls, nranks, "2.28.3")
    out = _analyze(capsys, "--nccl-log", str(log))
    pipe = out["pipeline"]
    assert pipe["stages"] == nranks // stride
    assert pipe["rank_stride"] == stride
    assert pipe["stages_here"] == [0, 1, 2, 3]
    assert pipe["p2p_calls"] == len(calls)
    assert pipe["message_bytes"]["p50"] == 2 << 20
    assert out["alltoall"] is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_finetune_sharding_is_recovered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """ZeRO-3 stage, collectives per step and per-layer gap from the simulated finetune job.

    Tolerances: calls per step are counted in windows of length T from a process's first call;
    a window edge that falls inside a layer train moves calls to the next window, but the
    median over ~19 windows is exact unless most edges do, so ±1 call (seen: exact, 8 seeds,
    32 and 8 layers). Layer gap: each call is enqueued 0.5-2 ms ahead of its burst (uniform),
    so one gap errs by up to 1.5 ms, and each step's compute is scaled by its 1 % jitter
    (0.1 ms of the 10 ms layer); the median of ~1800 gaps cancels the first, hence 2 %
    (seen: 0.3 %).
    """
    truth = _simulate(tmp_path, "--scenario", "finetune", "--seed", str(seed), "--local-ranks", "2")
    for files in (["--nccl-log", str(tmp_path / "nccl.log")], _all_files(tmp_path)):
        s = _analyze(capsys, *files)["sharding"]
        assert s["zero_stage"] == truth["zero_stage"] == "zero3_or_fsdp_full_shard"
        assert s["processes"] == 2
        assert s["nranks"] == truth["nranks"]
        assert s["collectives_per_step"] == pytest.approx(truth["collectives_per_step"], abs=1)
        assert s["allgather_per_step"] == pytest.approx(truth["allgather_per_step"], abs=1)
        assert s["reduce_scatter_per_step"] == pytest.approx(
            truth["reduce_scatter_per_step"], abs=1
        )
        assert s["layer_gap_s"] == pytest.approx(truth["layer_gap_s"], rel=0.02)
        layer_s = truth["size_bytes"] / truth["layers"]
        assert s["message_bytes"]["p50"] == pytest.approx(layer_s, rel=1e-6)
        assert s["latency_source"] == "default"
        assert s["latency_share"] == pytest.approx(
            truth["collectives_per_step"] * 10e-6 / truth["period_s"], rel=0.02
        )


def test_a_training_job_is_ddp_or_zero1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truth = _simulate(tmp_path, "--scenario", "training", "--seed", "3")
    s = _analyze(capsys, *_all_files(tmp_path))["sharding"]
    assert s["zero_stage"] == truth["zero_stage"] == "ddp_or_zero1"
    assert s["collectives_per_step"] == truth["collectives_per_step"]  # the 16 buckets


def test_inference_has_no_sharding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _inference_run(tmp_path, seed=1, duration_s=60)
    assert _analyze(capsys, *_all_files(tmp_path))["sharding"] is None
    assert _analyze(capsys, "--counters", str(tmp_path / "counters.csv"))["sharding"] is None


def test_a_recording_from_the_jobs_start_up_to_after_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `commpulse record` started before a communication-bound job (D = 0.8) and stopped after
    # it: 12 s of start-up idle, 28 s of steps, 10 s of idle. The idle at both ends hid the
    # period (no T, regime "inference"); analyze estimates the job's own span.
    from tests.signals import periodic_bursts

    bursts, realised = periodic_bursts(0.57, 0.8, 28.0, rate=4.8e7, seed=3)
    bursts[:, :2] += 12.0
    bursts = bursts[bursts[:, 1] <= 40.0]
    times = np.arange(0.0, 50.0, 0.01)
    cum = np.rint(Cumulative(bursts[:, :2], bursts[:, 2]).at(times)).astype(np.int64)
    path = tmp_path / "counters.csv"
    rows = "".join(f"{t:.2f},{c}\n" for t, c in zip(times, cum, strict=True))
    path.write_text("time,eth0_tx_bytes\n" + rows)
    out = _analyze(capsys, "--counters", str(path))
    assert out["period_s"] == pytest.approx(realised, rel=0.01)
    assert out["duty_cycle"] == pytest.approx(0.8, abs=0.03)
    assert out["regime"] == "training"
    assert out["window_s"] < 32.0  # the job's span, not the recording's 50 s
