"""NCCL logs that hold more than one job: runs one after another, or jobs side by side.

A job restarted into the same file (``>>``), or the logs of two jobs given together, were
read as one series: two runs an hour apart gave the step of one with no word of the other,
a week (or ten minutes) apart no period at all, and two jobs of different steps on one host
(two 4-GPU jobs on an 8-GPU node) made the estimate fail on every window.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.call_sequence import sequence_step

START = dt.datetime(2026, 11, 20, 10, 0, 0)


def _steps(
    t0: float, lengths: list[float], pid: int, *, nominal: float | None = None
) -> list[tuple[float, str]]:
    """Two ranks' 0.6/0.7/0.9-step AllReduces over steps of the given lengths (the calls at
    those shares of ``nominal`` into each step, if given)."""
    out = []
    for r in range(2):
        t, op = t0, 0
        for step_s in lengths:
            for at, count in ((0.6, 6_553_600), (0.7, 6_553_600), (0.9, 1_200_000)):
                when = t + at * (nominal or step_s)
                stamp = (START + dt.timedelta(seconds=when)).strftime("[%F %T.%f] ")
                out.append((when, (
                    f"{stamp}node1:{pid + r}:{pid + r} [{r}] NCCL INFO AllReduce: opCount "
                    f"{op:x} sendbuff 0x7f00 recvbuff 0x7f10 count {count} datatype 7 op 0 "
                    f"root 0 comm 0x55{pid + r:x} [nranks=2] stream 0x66"
                )))  # fmt: skip
                op += 1
            t += step_s
    return out


def _run(
    t0: float, step_s: float, steps: int, pid: int, *, seed: int = 1
) -> list[tuple[float, str]]:
    """Two ranks (processes ``pid``, ``pid + 1``) of 0.6/0.7/0.9-step AllReduces, 2 % jitter."""
    rng = np.random.default_rng(seed)
    lengths = step_s * (1.0 + 0.02 * rng.uniform(-1.0, 1.0, steps))
    return _steps(t0, lengths.tolist(), pid, nominal=step_s)


def _write(path: Path, *runs: list[tuple[float, str]]) -> Path:
    lines = sorted(line for run in runs for line in run)
    path.write_text("\n".join(text for _, text in lines) + "\n")
    return path


@pytest.mark.parametrize("gap_s", [600.0, 3600.0, 7 * 86400.0])
def test_the_run_that_moved_the_most_bytes_is_shown_and_every_run_named(
    tmp_path: Path, gap_s: float
) -> None:
    first = _run(0.3, 0.5, 300, 100)
    second = _run(gap_s, 0.7, 100, 200, seed=2)
    result = analyze_files(nccl_logs=[_write(tmp_path / "job.log", first, second)])
    est = result.estimate
    assert est.period_s == pytest.approx(0.5, rel=0.005)
    note = next(w for w in est.warnings if "runs one after the other" in w)
    assert re.search(r"T 0\.(69|70)\d* s", note)  # the other run, with its own step
    assert "2026-11-20 10:00:00" in note
    # The per-op totals stay the whole log's (the contract's collectives).
    assert result.inputs.collectives is not None
    assert result.inputs.collectives.ops["AllReduce"][0] == 2 * 3 * (300 + 100)
    # Bytes per step and rank are the shown run's two ranks' (not divided by all four).
    step_bytes = 4 * (6_553_600 + 6_553_600 + 1_200_000)
    assert est.step_bytes == pytest.approx(step_bytes, rel=0.02)


def test_ranks_of_one_job_are_one_run(tmp_path: Path) -> None:
    """A rank that starts a second late and stops early overlaps the others: no split."""
    late = [(t, text) for t, text in _run(0.3, 0.5, 200, 100) if t > 1.3 or "[0]" in text]
    est = analyze_files(nccl_logs=[_write(tmp_path / "job.log", late)]).estimate
    assert est.period_s == pytest.approx(0.5, rel=0.005)
    assert not any("runs one after the other" in w for w in est.warnings)


def test_two_jobs_side_by_side_give_the_step_of_the_larger_group() -> None:
    """Markers of 0.5 s steps in two processes and 0.7 s in one: the median (0.5) was kept;
    two against two had a median of 0.6 s, within 5 % of none, and raised."""
    for steps_05, steps_07 in ((2, 1), (2, 2)):
        times, keys, procs = [], [], []
        for p in range(steps_05 + steps_07):
            step = 0.5 if p < steps_05 else 0.7
            n = 120 if p < steps_05 else 60
            for k in range(n):
                for j, at in enumerate((0.1, 0.2, 0.4)):
                    times.append(k * step + at * step)
                    keys.append(3 * p + j)
                    procs.append(p)
        seq = sequence_step(
            np.array(times), np.array(keys), np.ones(len(times)), np.array(procs), 0.0
        )
        assert seq is not None
        assert seq.period_s == pytest.approx(0.5, rel=1e-6)
        assert seq.processes == steps_05


def test_fine_times_give_the_mean_step_of_a_jittery_job(tmp_path: Path) -> None:
    """400 steps of 2 % random-walk jitter whose ranks drift apart (their step times drawn
    each on its own): the binned calls' edges read 1.2 % short; the marker's mean step is
    within 0.1 % of the ranks' mean."""
    rank0 = [(t, x) for t, x in _run(0.3, 0.5, 400, 100, seed=1) if "[0]" in x]
    rank1 = [(t, x) for t, x in _run(0.3, 0.5, 400, 100, seed=7) if "[1]" in x]
    truth = []
    for run in (rank0, rank1):
        marks = [t for t, x in run if "count 1200000" in x]
        truth.append((marks[-1] - marks[0]) / (len(marks) - 1))
    est = analyze_files(nccl_logs=[_write(tmp_path / "job.log", rank0, rank1)]).estimate
    assert est.period_s == pytest.approx(float(np.mean(truth)), rel=0.001)


def test_steps_of_four_calls_are_not_read_at_three_steps() -> None:
    """20 steps of 1.5 s (3 ms jitter), each four alike AllReduces 20 ms apart (a log written
    by a test job, NCCL's microsecond stamps): binned at 1 ms, the 4 ms level repeated at
    4.5 s (comb 0.85) before the 16 ms level's 1.5 s (comb 0.99), and 4.5 s was T."""
    log = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "steps-of-four-calls.log"
    est = analyze_files(nccl_logs=[log]).estimate
    assert est.period_s == pytest.approx(1.5, rel=0.005)
    assert est.confidence > 0.9


@pytest.mark.parametrize(("before", "after"), [(1.8, 2.7), (1.8, 3.6), (3.6, 1.8)])
def test_a_step_time_that_changes_in_one_run_shows_the_newest_and_says_so(
    tmp_path: Path, before: float, after: float
) -> None:
    """One process, the batch changed halfway: timed over the whole log, 1.8 -> 2.7 s read
    T = 2.25 s (a step that never ran) at confidence 0.82, 1.8 -> 3.6 s read 1.8 s with bytes
    per step a third short, with no word of the change."""
    rng = np.random.default_rng(4)
    lengths = [before] * 150 + [after] * 150
    lengths = [s * (1.0 + 0.01 * rng.uniform(-1.0, 1.0)) for s in lengths]
    est = analyze_files(
        nccl_logs=[_write(tmp_path / "job.log", _steps(0.3, lengths, 100))]
    ).estimate
    assert est.period_s == pytest.approx(after, rel=0.01)
    assert est.step_bytes == pytest.approx(4 * (6_553_600 + 6_553_600 + 1_200_000), rel=0.02)
    note = next(w for w in est.warnings if "the step time changed" in w)
    assert f"T {before:.2g}" in note
    assert "shown: the newest part" in note


def test_a_steady_log_with_a_checkpoint_pause_is_no_change(tmp_path: Path) -> None:
    lengths = [1.8] * 100 + [61.8] + [1.8] * 100
    est = analyze_files(
        nccl_logs=[_write(tmp_path / "job.log", _steps(0.3, lengths, 100))]
    ).estimate
    assert est.period_s == pytest.approx(1.8, rel=0.005)
    assert not any("step time changed" in w for w in est.warnings)


def test_a_log_alone_is_never_told_to_poll_faster(tmp_path: Path) -> None:
    """Layers 50 ms apart in each step's last 0.8 s: the inner period is a few of the bins the
    stamped calls are binned at, which no poll makes finer (a ZeRO-3 log read "poll faster")."""
    rng = np.random.default_rng(5)
    starts = 0.3 + np.cumsum(1.6 * (1.0 + 0.01 * rng.uniform(-1.0, 1.0, 250)))
    lines = []
    op = 0
    for start in starts:
        for layer in range(16):
            when = float(start) + 0.8 + 0.05 * layer
            stamp = (START + dt.timedelta(seconds=when)).strftime("[%F %T.%f] ")
            lines.append((when, (
                f"{stamp}node1:100:100 [0] NCCL INFO ReduceScatter: opCount {op:x} sendbuff "
                "0x7f00 recvbuff 0x7f10 count 4000000 datatype 7 op 0 root 0 comm 0x55 "
                "[nranks=8] stream 0x66"
            )))  # fmt: skip
            op += 1
    est = analyze_files(nccl_logs=[_write(tmp_path / "job.log", lines)]).estimate
    assert est.period_s == pytest.approx(1.6, rel=0.005)
    assert est.inner_period_s == pytest.approx(0.05, rel=0.02)
    assert not any("poll" in w for w in est.warnings)
