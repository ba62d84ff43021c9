"""T from NCCL logs of real job structures: per-layer calls, several files, pauses.

The logs are real-format COLL lines with NCCL's timestamp prefix ("[%F %T.%6f] ", from
NCCL_DEBUG_TIMESTAMP_LEVELS), one process per rank, as a job of that structure writes them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files

START = dt.datetime(2026, 12, 7, 16, 0, 0)


class _Job:
    """Calls of a few local ranks, written as NCCL writes them (per process, or merged)."""

    def __init__(self, ranks: int, seed: int = 3) -> None:
        self.ranks = ranks
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple[float, int, str, int, str, int]] = []
        self._ops: dict[tuple[str, int], int] = {}

    def call(self, t: float, rank: int, op: str, count: int, comm: str, nranks: int) -> None:
        self.calls.append((t, rank, op, count, comm, nranks))

    def _line(self, t: float, rank: int, op: str, count: int, comm: str, nranks: int) -> str:
        n = self._ops.get((comm, rank), 0)
        self._ops[(comm, rank)] = n + 1
        stamp = (START + dt.timedelta(seconds=t)).strftime("[%Y-%m-%d %H:%M:%S.%f] ")
        pid = 41000 + 37 * rank
        ptr = f"0x55d0a{rank:x}{abs(hash(comm)) % 4096:03x}000"
        return (
            f"{stamp}node01:{pid}:{pid} [{rank}] NCCL INFO {op}: opCount {n:x} sendbuff "
            f"0x7f3a00000000 recvbuff 0x7f3a00000000 count {count} datatype 9 op 0 root 0 "
            f"comm {ptr} [nranks={nranks}] stream 0x55d0b0000000"
        )

    def write(self, directory: Path, *, per_process: bool) -> list[Path]:
        calls = sorted(self.calls)
        if not per_process:
            path = directory / "merged.log"
            path.write_text("\n".join(self._line(*c) for c in calls) + "\n")
            return [path]
        paths = []
        for rank in range(self.ranks):
            path = directory / f"node01.{41000 + 37 * rank}"
            path.write_text("\n".join(self._line(*c) for c in calls if c[1] == rank) + "\n")
            paths.append(path)
        return paths


@dataclass(frozen=True)
class _Passes:
    """Where a step's passes sit, in seconds from its start: forward calls from 0.02 s every
    ``forward_gap``; backward calls from ``backward_at`` every ``backward_gap``, each layer's
    ReduceScatter and AllReduce ``rs_after`` and ``ar_after`` after its AllGather."""

    forward_gap: float
    backward_at: float
    backward_gap: float
    rs_after: float
    ar_after: float


def _fixed(step_s: float, layers: int) -> _Passes:
    """Passes of fixed length (0.7 s forward, 1.45 s backward from 0.75 s)."""
    return _Passes(0.7 / layers, 0.75, 1.45 / layers, 0.030, 0.035)


def _scaled(step_s: float, layers: int) -> _Passes:
    """Passes scaled to the step: forward over its first 30 %, backward from 32 % over 60 %."""
    return _Passes(
        0.3 * step_s / layers,
        0.32 * step_s,
        0.6 * step_s / layers,
        0.3 * step_s / layers,
        0.35 * step_s / layers,
    )


def _fsdp(step_s: float, steps: int, layers: int, passes: _Passes, ranks: int = 8) -> _Job:
    """FSDP hybrid shard: a layer's AllGather in the forward pass, AllGather, ReduceScatter
    (8-rank shard group) and the shard's AllReduce (4-node replica group) in the backward
    one; exact steps, calls jittered by 0.5 ms."""
    job = _Job(ranks)
    shard = 218_000_000 // 8
    for s in range(steps):
        ts = 1.0 + s * step_s
        for rank in range(ranks):
            jit = job.rng.normal(0.0, 5e-4, 4 * layers)
            for i in range(layers):
                job.call(ts + 0.02 + i * passes.forward_gap + jit[i], rank, "AllGather",
                         shard, "shard", 8)  # fmt: skip
            for k in range(layers):
                tb = ts + passes.backward_at + k * passes.backward_gap
                job.call(tb + jit[layers + k], rank, "AllGather", shard, "shard", 8)
                job.call(tb + passes.rs_after + jit[2 * layers + k], rank, "ReduceScatter",
                         shard, "shard", 8)  # fmt: skip
                job.call(tb + passes.ar_after + jit[3 * layers + k], rank, "AllReduce",
                         shard, f"repl{rank}", 4)  # fmt: skip
    return job


@pytest.mark.parametrize("passes", [_fixed, _scaled])
@pytest.mark.parametrize("layers", [8, 32])
def test_per_layer_calls_read_the_step_not_a_multiple(
    tmp_path: Path, layers: int, passes: Callable[[float, int], _Passes]
) -> None:
    """Binned at ~9 ms, a 2.4 s step is no whole number of bins; the finest levels' narrow
    spikes lined up best at 3 or 7 steps (T = 7.2 s or 16.8 s at confidence 0.98-1.0), while
    two or three coarser levels read 2.4 s over 120 cycles, one of them at 5-60 times the z."""
    logs = _fsdp(2.4, 120, layers, passes(2.4, layers)).write(tmp_path, per_process=False)
    est = analyze_files(nccl_logs=logs).estimate
    assert est.period_s == pytest.approx(2.4, rel=0.01)
    assert est.confidence >= 0.5


def _ddp(job: _Job, t: float, backward_at: float, backward_s: float) -> None:
    """One DDP step from ``t``: 17 gradient buckets over the backward pass (100 M params)."""
    buckets = [262144] + [6553600] * 15
    buckets.append(100_000_000 - sum(buckets))
    for rank in range(job.ranks):
        jit = job.rng.normal(0.0, 1e-3, len(buckets))
        for i, count in enumerate(reversed(buckets)):
            at = t + backward_at + (i + 1) / len(buckets) * backward_s + jit[i]
            job.call(at, rank, "AllReduce", count, "dp", 16)


def test_files_of_several_processes_read_the_newest_steps(tmp_path: Path) -> None:
    """Per-process files (NCCL_DEBUG_FILE=%h.%p) come file after file: the call order read
    the last 20 k calls of the array, one process's whole log, old steps and new, and its
    step no longer overruled the binned calls (T 2.93 s; the same lines in one file: 0.6 s)."""
    job, t = _Job(8, seed=9), 1.0
    for _ in range(300):
        _ddp(job, t, 0.14, 0.2)
        t += 0.4
    for _ in range(300):
        _ddp(job, t, 0.24, 0.3)
        t += 0.6
    merged = analyze_files(nccl_logs=job.write(tmp_path, per_process=False)).estimate
    (tmp_path / "per").mkdir()
    per = analyze_files(nccl_logs=job.write(tmp_path / "per", per_process=True)).estimate
    assert merged.period_s == pytest.approx(0.6, rel=0.01)
    assert per.period_s == pytest.approx(0.6, rel=0.01)


def _paused(*, checkpoints: bool) -> _Job:
    """600 DDP steps of 0.5 s, a 6 s evaluation (24 one-float metric AllReduces) every 100
    and, with ``checkpoints``, a 10 s checkpoint between two barriers every 200."""
    job, t = _Job(8, seed=8), 1.0
    for s in range(600):
        _ddp(job, t, 0.14, 0.28)
        t += 0.5
        if (s + 1) % 100 == 0:
            for k in range(24):
                for rank in range(8):
                    job.call(t + 0.1 + 0.25 * k, rank, "AllReduce", 1, "dp", 16)
            t += 6.0
        if checkpoints and (s + 1) % 200 == 0:
            for rank in range(8):
                job.call(t + 0.01 * rank, rank, "AllReduce", 1, "dp", 16)
            t += 10.0
            for rank in range(8):
                job.call(t - 0.05 + 0.001 * rank, rank, "AllReduce", 1, "dp", 16)
    return job


def test_steps_between_pauses_are_timed_by_their_calls(tmp_path: Path) -> None:
    """Evaluations and checkpoints: the binned calls repeat at the pauses' cycle, three
    cycles in the log, too few to call it a period, and no T was given; one call comes once
    a step, steadily: that step is T."""
    job = _paused(checkpoints=True)
    est = analyze_files(nccl_logs=job.write(tmp_path, per_process=False)).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.01)
    assert any("T from the calls' order" in w for w in est.warnings)


def test_steps_with_a_regular_evaluation_name_both_readings(tmp_path: Path) -> None:
    """Evaluations only: the log repeats every 56 s with the steps inside, as a step of layer
    trains does. T stays 56 s, and the note names the steps as the step of a job that pauses
    (the evaluation's one-float metric AllReduces are no traffic)."""
    job = _paused(checkpoints=False)
    est = analyze_files(nccl_logs=job.write(tmp_path, per_process=False)).estimate
    assert est.period_s == pytest.approx(56.0, rel=0.01)
    assert est.inner_period_s == pytest.approx(0.5, rel=0.01)
    note = next(w for w in est.warnings if "pauses regularly" in w)
    assert "every 100 steps" in note
