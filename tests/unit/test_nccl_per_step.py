"""Per-step figures of an NCCL log: a job's pauses and a process that drives several GPUs.

Bytes and calls per step were counted over the log's whole time span and divided by its
processes: a job that made one call at start-up and its steps a minute later read 0.14x its
bytes per step and 0 collectives per step; a process driving two GPUs (``ncclCommInitAll``,
JAX, nccl-tests ``-g``) read twice a rank's bytes and calls.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from agent.analyze import analyze_files

START = dt.datetime(2026, 1, 1, 0, 0, 0)
COUNT = 262_144  # float32: 1 MiB per call


def _line(t: float, dev: int, comm: str, op: int, pid: int = 100, rank_n: int = 2) -> str:
    stamp = (START + dt.timedelta(seconds=t)).strftime("[%F %T.%f] ")
    return (
        f"{stamp}h0:{pid}:{pid} [{dev}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f00 "
        f"recvbuff 0x7f00 count {COUNT} datatype 7 op 0 root 0 comm {comm} [nranks={rank_n}] "
        "stream 0x1"
    )


def _init(dev: int, comm: str, pid: int = 100) -> str:
    return (
        f"[2025-12-31 23:59:59.000000] h0:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitAll comm "
        f"{comm} rank {dev} nranks 2 cudaDev {dev} nvmlDev {dev} busId {dev + 1}8000 commId "
        "0x77 - Init COMPLETE"
    )


def test_a_start_up_call_a_minute_before_the_steps_does_not_dilute_them(tmp_path: Path) -> None:
    """One process: a broadcast-like call at 0 s, then 3 AllReduces a 0.5 s step from 60 s."""
    lines = [_line(0.0, 0, "0x1", 0, rank_n=8)]
    op = 1
    for k in range(40):
        for j in range(3):
            lines.append(_line(60.0 + 0.5 * k + 0.05 * j, 0, "0x1", op, rank_n=8))
            op += 1
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    result = analyze_files(nccl_logs=[path])
    est = result.estimate
    assert est.period_s == pytest.approx(0.5, rel=0.01)
    # 40 steps of 3 MiB and the start-up call (one step of its own): within 3 %.
    assert est.step_bytes == pytest.approx(3 * 2**20, rel=0.03)
    assert result.extra["sharding"]["collectives_per_step"] == pytest.approx(3.0)


def test_a_process_that_drives_two_gpus_is_two_ranks(tmp_path: Path) -> None:
    lines = [_init(0, "0x55000"), _init(1, "0x55001")]
    for k in range(60):
        lines.append(_line(0.5 * k, 0, "0x55000", k))
        lines.append(_line(0.5 * k + 1e-4, 1, "0x55001", k))
    path = tmp_path / "one_process.log"
    path.write_text("\n".join(lines) + "\n")
    result = analyze_files(nccl_logs=[path])
    assert result.estimate.period_s == pytest.approx(0.5, rel=0.01)
    assert result.estimate.step_bytes == pytest.approx(2**20, rel=0.01)
    assert result.extra["nccl"]["processes"] == 1
    assert result.extra["nccl"]["ranks_logged"] == 2
    assert result.extra["sharding"]["collectives_per_step"] == pytest.approx(1.0)


def test_one_line_with_a_wrong_year_does_not_cost_the_period(tmp_path: Path) -> None:
    """The stray stretched the binned span to four years: no period."""
    lines = [_line(0.5 * k, 0, "0x1", k, rank_n=8) for k in range(80)]
    stray = _line(0.0, 0, "0x1", 80, rank_n=8).replace("[2026-", "[2030-")
    path = tmp_path / "job.log"
    path.write_text("\n".join([*lines[:40], stray, *lines[40:]]) + "\n")
    est = analyze_files(nccl_logs=[path]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.01)
    assert est.collectives["AllReduce"] == (81, 81 * 2**20)  # the stray call still counts
