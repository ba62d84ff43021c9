"""`commpulse record` end to end: a live job's sources recorded, then read back by `analyze`.

The job (tests/integration/live_job.py) writes RDMA counters into a copy of the mlx5 fixture
sysfs tree, an NCCL log with one AllReduce per step, and a GPU CSV, in real time. The recorder
runs as a user would run it, as its own process; the files it leaves must be what `analyze`
reads, plain or gzip-compressed, and give the job's T.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.live_job import LiveJob

pytestmark = pytest.mark.slow

PERIOD, DUTY, RATE = 0.5, 0.3, 2.0e9
RECORD_S = 6.0


@pytest.fixture
def job(tmp_path: Path) -> Iterator[LiveJob]:
    live = LiveJob(tmp_path / "job", period=PERIOD, duty=DUTY, rate=RATE)
    live.start()
    try:
        yield live
    finally:
        live.stop()


def _commpulse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip


def _record(job: LiveJob, tmp_path: Path, out: Path, *extra: str) -> str:
    config = tmp_path / "record.toml"
    config.write_text(
        "[sources.nic_counters]\nenabled = false\n"
        f'[sources.rdma_counters]\nsysfs_root = "{job.sys}"\n'
        f'[sources.nccl_log]\nenabled = true\npaths = ["{job.nccl_log.parent}/*.log"]\n'
        f'[sources.gpu_csv]\nenabled = true\npath = "{job.gpu_csv}"\n'
    )
    done = _commpulse(
        "record", "--config", str(config), "--out", str(out), "--duration", str(RECORD_S), *extra
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("compress", [False, True])
def test_a_recording_of_a_live_job_analyses_to_its_period(
    job: LiveJob, tmp_path: Path, compress: bool
) -> None:
    out = tmp_path / "rec"
    summary = _record(job, tmp_path, out, *(["--compress"] if compress else []))
    suffix = ".gz" if compress else ""
    counters = out / f"counters_rdma_counters.csv{suffix}"
    files = {p.name for p in out.iterdir()}
    assert files == {f"counters_rdma_counters.csv{suffix}", f"gpu.csv{suffix}",
                     f"nccl.log{suffix}"}  # fmt: skip
    assert f"counters_rdma_counters.csv{suffix}: " in summary

    opener = gzip.open if compress else open
    with opener(counters, "rt") as fh:
        lines = fh.read().splitlines()
    # The header names the port's directions; about 100 polls a second were written.
    assert lines[0].startswith("time,")
    assert any(c.startswith("mlx5_0") and c.endswith("_tx_bytes") for c in lines[0].split(","))
    assert len(lines) - 1 >= 0.8 * 100 * RECORD_S
    with opener(out / f"nccl.log{suffix}", "rt") as fh:
        calls = [line for line in fh if "AllReduce: opCount" in line]
    assert len(calls) >= 0.8 * RECORD_S / PERIOD

    done = _commpulse("analyze", "--counters", str(counters), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["period_s"] == pytest.approx(PERIOD, rel=0.02), result
    assert result["duty_cycle"] == pytest.approx(DUTY, abs=0.05), result


def test_a_directory_that_holds_a_recording_is_not_written_over(
    job: LiveJob, tmp_path: Path
) -> None:
    """A second recorder into the same directory (a script's recorder left running by a failed
    job wrote into the next run's file: their rows interleaved) is refused with the files named,
    and the first recording stays as it was."""
    out = tmp_path / "rec"
    _record(job, tmp_path, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    config = tmp_path / "record.toml"
    done = _commpulse("record", "--config", str(config), "--out", str(out), "--duration", "1")
    assert done.returncode != 0
    assert "already holds a recording" in done.stderr
    assert "counters_rdma_counters.csv" in done.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
