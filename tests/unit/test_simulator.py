"""The simulator: DOMAIN.md arithmetic, parameter checks, and truth that matches its files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.errors import ConfigError
from agent.simulator.files import simulate_to_dir
from agent.simulator.params import JobParams, allreduce_wire_bytes, resolve
from agent.simulator.sampling import sample_counters, sample_gpu
from agent.simulator.schedule import build_schedule
from collectors.counters_csv import read_counters_csv
from collectors.gpu_csv import read_gpu_csv


def test_defaults_are_the_domain_worked_example() -> None:
    p = resolve(JobParams())
    # N=32, S=20 GB, 25 GB/s: AllReduce = 2·20·31/32/25 = 1.55 s; + 3 s compute.
    assert p.period_s == pytest.approx(4.55, abs=0.005)
    assert p.duty == pytest.approx(0.34, abs=0.005)


def test_domain_70b_example_allreduce_is_longer_than_a_step_of_compute() -> None:
    wire = allreduce_wire_bytes(140e9, 64)
    assert wire == pytest.approx(275e9, rel=0.01)
    assert wire / 25e9 == pytest.approx(11.0, rel=0.01)


def test_period_and_duty_override_derive_the_size() -> None:
    p = resolve(JobParams(period_s=2.0, duty=0.5, nranks=8, bandwidth=10e9))
    assert p.compute_s == pytest.approx(1.0)
    assert allreduce_wire_bytes(p.size_bytes, 8) / 10e9 == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        (JobParams(scenario="bogus"), "unknown scenario"),
        (JobParams(nranks=1), "--nranks"),
        (JobParams(duty=1.5), "--duty"),
        (JobParams(sample_rate_hz=1, duration_s=10), "64 polls"),
        (JobParams(local_ranks=64), "--local-ranks"),
        (JobParams(scenario="finetune", duty=0.99), "--duty too high"),
    ],
)
def test_bad_parameters_are_named(params: JobParams, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        resolve(params)


def test_counters_are_monotone_and_integrate_the_bursts() -> None:
    p = resolve(JobParams(period_s=1.0, duty=0.3, duration_s=20, seed=3))
    s = build_schedule(p)
    trace = sample_counters(s)
    tx = trace.columns["mlx5_0_tx_bytes"].astype(np.float64)
    assert np.all(np.diff(tx) >= 0)
    total = tx[-1] - tx[0]
    bursts = float(np.sum((s.bursts[:, 1] - s.bursts[:, 0]) * s.bursts[:, 2]))
    background = p.background_fraction * p.bandwidth * float(trace.times[-1])
    assert total == pytest.approx(bursts + background, rel=0.01)


def test_32bit_counters_wrap() -> None:
    p = resolve(JobParams(period_s=1.0, duty=0.3, duration_s=10, counter_bits=32))
    tx = sample_counters(build_schedule(p)).columns["mlx5_0_tx_bytes"]
    assert int(tx.max()) < 2**32
    assert np.any(np.diff(tx.astype(np.int64)) < 0)


def test_gpu_signal_is_low_when_only_nccl_runs() -> None:
    p = resolve(JobParams(period_s=2.0, duty=0.4, duration_s=20, gpu_interval_s=0.05))
    s = build_schedule(p)
    g = sample_gpu(s)
    assert g.sm_active.max() > 0.8
    assert g.sm_active.min() < 0.2
    assert set(np.unique(g.util_percent)) <= {float(v) for v in range(101)}
    assert np.mean(g.util_percent > 95) > 0.9  # utilization.gpu: busy even during NCCL


def test_inference_has_no_period_in_truth_and_idle_no_bursts() -> None:
    inf = build_schedule(resolve(JobParams(scenario="inference", duration_s=30)))
    assert inf.truth["period_s"] is None
    assert inf.bursts.shape[0] > 10
    idle = build_schedule(resolve(JobParams(scenario="idle", duration_s=30)))
    assert idle.bursts.shape[0] == 0
    assert idle.truth["burst_bandwidth_bytes_per_s"] is None


def test_written_files_follow_the_contracts(tmp_path: Path) -> None:
    truth = simulate_to_dir(JobParams(period_s=1.0, duty=0.3, duration_s=20, seed=2), tmp_path)
    assert (tmp_path / "truth.json").exists()
    on_disk = json.loads((tmp_path / "truth.json").read_text())
    assert on_disk["period_s"] == pytest.approx(truth["period_s"])
    counters = read_counters_csv(tmp_path / "counters.csv")
    assert set(counters.columns) == {"mlx5_0_tx_bytes", "mlx5_0_rx_bytes"}
    gpu = read_gpu_csv(tmp_path / "gpu.csv")
    assert set(gpu.signals) == {"sm_active", "util"}
    assert gpu.times.min() >= counters.times.min() - 1
    log = (tmp_path / "nccl.log").read_text().splitlines()
    coll = [line for line in log if "AllReduce: opCount" in line]
    assert len(coll) == on_disk["collectives"]["AllReduce"]["count"]
    assert coll[0].startswith("[20")  # NCCL's [%F %T.%6f] timestamp prefix
    per_step = truth["collectives"]["AllReduce"]["bytes"] / len(coll) * 16
    assert per_step == pytest.approx(truth["size_bytes"], rel=1e-6)


def test_same_seed_same_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    simulate_to_dir(JobParams(duration_s=30, seed=9), a)
    simulate_to_dir(JobParams(duration_s=30, seed=9), b)
    for name in ("counters.csv", "gpu.csv", "nccl.log", "truth.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_a_step_drawn_shorter_than_its_collective_waits_for_the_link() -> None:
    """Under 20 % step jitter at D 0.65 a step is now and then drawn shorter than its
    collective: the next burst started before the last one ended, and the two summed their
    rates to twice the link's. NCCL runs them one after the other; the step lasts longer."""
    p = resolve(JobParams(period_s=2.0, duty=0.65, jitter=0.2, duration_s=600.0, seed=3))
    s = build_schedule(p)
    b = s.bursts[np.argsort(s.bursts[:, 0])]
    assert b.shape[0] > 250
    assert bool(np.all(b[1:, 0] >= b[:-1, 1] - 1e-9))  # one collective at a time on the link
    assert s.truth["duty_cycle"] == pytest.approx(0.65 * 2.0 / s.truth["period_s"], rel=0.02)
