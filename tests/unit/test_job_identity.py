"""Which job a host works for (commpulse_job_info), and when its traffic last burst.

The fleet recording rules group hosts by ``job_id``: from the config, or NCCL's ``commId`` of
the job's largest communicator, which every host of the job prints at init (2.16+).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from agent.clock import FakeClock
from agent.estimate import EstimateInputs, GpuSamples, estimate
from agent.pipeline import Pipeline, PipelineSettings, SnapshotStore
from agent.rates import GridSeries
from agent.simulator.nccl_writer import LoggedCall, job_comm_id, render_nccl_log
from agent.windows import CollectiveWindow
from collectors._base import CallBatch, CollectiveCall
from collectors.nccl_log import LiveDecoder
from collectors.nccl_tail import NcclTail, NcclTailConfig
from tests.signals import square_wave
from tests.sources import collect_until


def _host_log(host: str, seed: int, nranks: int = 16, first_rank: int = 0) -> list[str]:
    calls = [
        LoggedCall(time_s=1.0 + i, op="AllReduce", count=1 << 20, datatype=9, local_rank=r)
        for i in range(3)
        for r in range(8)
    ]
    return list(
        render_nccl_log(
            calls,
            hostname=host,
            nranks=nranks,
            first_rank=first_rank,
            local_ranks=8,
            start_time_s=0.5,
            seed=seed,
        )
    )


def test_live_decoder_joins_coll_lines_to_the_commid_of_their_init_line() -> None:
    decoder = LiveDecoder()
    calls = [c for line in _host_log("node-a", seed=7) for c in decoder.decode(line)]
    assert calls
    ids = {decoder.comm_id(c.process, c.comm) for c in calls}
    assert ids == {f"{job_comm_id(7):x}"}


def test_every_host_of_a_job_names_the_same_job_and_another_job_differs(tmp_path: Path) -> None:
    def tail(lines: list[str], name: str) -> list[CallBatch]:
        log = tmp_path / f"{name}.log"
        log.write_text("\n".join(lines) + "\n")
        cfg = NcclTailConfig(enabled=True, paths=(str(log),), read_from="beginning")
        source = NcclTail(cfg, clock=FakeClock(), state_file=tmp_path / f"{name}.json")
        out = asyncio.run(collect_until(source, CallBatch))
        return [r for r in out if isinstance(r, CallBatch)]

    a = tail(_host_log("node-a", seed=3, first_rank=0), "a")
    b = tail(_host_log("node-b", seed=3, first_rank=8), "b")
    other = tail(_host_log("node-c", seed=4), "c")
    assert {x.comm_id for x in a} == {x.comm_id for x in b} == {f"{job_comm_id(3):x}"}
    assert {x.comm_id for x in other} == {f"{job_comm_id(4):x}"}


def test_window_names_the_largest_live_communicator_and_forgets_quiet_ones() -> None:
    w = CollectiveWindow(64)

    def call(t: float, nranks: int, comm_id: str) -> CollectiveCall:
        return CollectiveCall(t, "AllReduce", 1024, nranks, comm_id=comm_id)

    w.add(call(1.0, 8, "aa"))  # a tensor-parallel group
    w.add(call(1.0, 64, "ff"))  # the job's world communicator
    w.add(call(1.5, 64, "0b"))  # another world-sized one: ties go to the smallest id
    assert w.job_comm_id() == "0b"
    assert w.job_comm_id(since=0.0) == "0b"
    # a new, smaller job after the old one went quiet takes over
    w.add(call(100.0, 16, "c3"))
    assert w.job_comm_id(since=50.0) == "c3"
    # calls without a commId (old NCCL) name nothing
    fresh = CollectiveWindow(64)
    fresh.add(CollectiveCall(1.0, "AllReduce", 1024, 8))
    assert fresh.job_comm_id() is None


def test_pipeline_job_prefers_the_configured_id() -> None:
    store = SnapshotStore()
    p = Pipeline([], store, settings=PipelineSettings(job_id="slurm-4242"), clock=FakeClock())
    assert p.job() == ("slurm-4242", "config")
    assert Pipeline([], store, clock=FakeClock()).job() == (None, None)


def _grid(rate: np.ndarray, dt: float) -> GridSeries:
    return GridSeries(t0=100.0, dt=dt, rate=rate, valid=np.ones(rate.size, dtype=bool))


def test_last_burst_end_is_where_the_traffic_stopped() -> None:
    """A job that bursts every 2 s, then goes silent at t = 160 s of a 180 s window."""
    dt = 0.01
    wave, _ = square_wave(2.0, 0.3, 1 / dt, 180.0, noise=0.02, seed=1)
    rate = 1e6 + 20e9 * wave
    rate[16_000:] = 1e6  # silence after 160 s
    est = estimate(EstimateInputs(network={"tx": _grid(rate, dt)}, network_source="counters"))
    assert est.period_s is not None
    assert abs(est.period_s - 2.0) < 0.01
    on = np.flatnonzero(rate[:16_000] > 10e9)
    truth = 100.0 + (on[-1] + 1) * dt
    assert est.last_burst_end_s is not None
    assert abs(est.last_burst_end_s - truth) <= dt


def test_no_burst_in_the_window_means_no_last_burst() -> None:
    rate = np.full(6_000, 1e6)
    est = estimate(EstimateInputs(network={"tx": _grid(rate, 0.01)}, network_source="counters"))
    assert est.last_burst_end_s is None


def test_gpu_activity_is_reported_without_bursts() -> None:
    """A hung job: no traffic at all, GPUs spinning (what tells a hang from a finished job)."""
    times = np.arange(0.0, 60.0, 0.1)
    gpu = GpuSamples(
        times=times,
        gpu=np.zeros(times.size, dtype=np.int64),
        signals={"util": np.full(times.size, 1.0), "sm_active": np.full(times.size, 0.9)},
    )
    est = estimate(
        EstimateInputs(
            network={"tx": _grid(np.full(6_000, 1e5), 0.01)}, network_source="counters", gpu=gpu
        )
    )
    assert est.gpu_signal == "sm_active"  # the best signal present
    assert est.gpu_activity == 0.9
    # ... and every signal's mean, for the hang alert (util reads NCCL's spin).
    assert dict(est.gpu_activities) == {"sm_active": 0.9, "util": 1.0}
    assert est.last_burst_end_s is None
