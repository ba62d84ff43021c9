"""NCCL calls without timestamps, stamped when the tailer reads them: T only where it can be told.

NCCL before 2.26 (and later ones without NCCL_DEBUG_TIMESTAMP_LEVELS) prints COLL lines
without a time, so the live tailer stamps each call when it reads it, every poll interval
(0.2 s by default). Those times sit on the poll instants. Binned at 1 ms they made a lattice
of spikes that the period detector read: T = 0.2 s on a job of 0.05 s steps, 0.6 s on 0.3 s
steps, 1.4 s on 0.47 s steps, 4.6 s on 2.3 s steps (a real daemon, measured).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from agent.analyze import analyze_files
from agent.estimate import (
    MIN_ARRIVAL_POLLS,
    CollectiveMix,
    EstimateInputs,
    arrival_period,
    estimate,
)
from agent.windows import CollectiveWindow
from collectors._base import CallBatch
from tests.signals import allreduce_calls

POLL_S = 0.2


def _arrivals(step_s: float, steps: int, *, seed: int = 0, calls: int = 4) -> np.ndarray:
    """When a tailer polling every POLL_S reads the calls of steps ``step_s`` apart (the
    poll after each write, a few ms of wake-up jitter), from a random phase."""
    rng = np.random.default_rng(seed)
    written = rng.uniform(0.0, POLL_S) + step_s * np.arange(steps)
    read = np.ceil(written / POLL_S) * POLL_S + rng.uniform(0.0, 0.003, steps)
    return np.repeat(read, calls)


def _mix(times: np.ndarray, resolution_s: float = POLL_S) -> CollectiveMix:
    return allreduce_calls(times, 1e6, resolution_s=resolution_s)


def _period(
    times: np.ndarray, resolution_s: float = POLL_S
) -> tuple[float | None, tuple[str, ...]]:
    est = estimate(EstimateInputs(collectives=_mix(times, resolution_s)))
    return est.period_s, est.warnings


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("step_s", [1.03, 2.3, 5.7])
def test_steps_of_several_polls_are_timed_by_their_trains(step_s: float, seed: int) -> None:
    """Each step's calls arrive up to a poll late; the mean interval of the trains is T,
    whatever beat the steps make against the polls (2.3 s: 11 and 12 polls in turn)."""
    steps = 30
    period, _ = _period(_arrivals(step_s, steps, seed=seed))
    assert period == pytest.approx(step_s, abs=1.5 * POLL_S / (steps - 2))


@pytest.mark.parametrize("step_s", [0.05, 0.3, 0.47, 0.7])
def test_steps_under_four_polls_get_no_period_and_a_warning_that_says_why(step_s: float) -> None:
    period, warnings = _period(_arrivals(step_s, int(40 / step_s)))
    assert period is None
    (why,) = [w for w in warnings if "timed to 0.2 s only" in w]
    assert "NCCL_DEBUG_TIMESTAMP_FORMAT" in why
    assert f"{MIN_ARRIVAL_POLLS * POLL_S:g} s" in why


@pytest.mark.parametrize("seed", range(10))
def test_random_calls_read_every_poll_have_no_period(seed: int) -> None:
    """Calls at random (an inference service): their trains come at random intervals."""
    rng = np.random.default_rng(seed)
    written = np.cumsum(rng.exponential(1.5, 40))
    read = np.ceil(written / POLL_S) * POLL_S
    assert arrival_period(read, POLL_S) is None
    period, _ = _period(read)
    assert period is None


def test_a_first_read_of_a_grown_log_and_a_pause_are_left_out() -> None:
    """The first read takes several steps' calls at once, and a checkpoint pauses the job for
    three steps: both intervals are left out of the mean."""
    times = _arrivals(1.03, 30, seed=5)
    times[times < 3.0] = 3.0
    times = np.where(times > 20.0, times + 3 * 1.03, times)
    polls = arrival_period(times, POLL_S)
    assert polls is not None
    assert polls * POLL_S == pytest.approx(1.03, abs=0.02)


def test_timestamped_calls_are_estimated_as_before() -> None:
    """With NCCL's own timestamps (resolution 0) the 2.3 s steps are exact, not quantized."""
    times = np.repeat(0.1 + 2.3 * np.arange(30), 4) + np.tile(0.004 * np.arange(4), 30)
    period, _ = _period(times, 0.0)
    assert period == pytest.approx(2.3, rel=1e-3)


def test_the_window_says_how_coarse_its_calls_are() -> None:
    """A batch stamped on arrival makes the window's calls coarse while any of them are in
    it; timestamped batches alone are not."""
    w = CollectiveWindow(1000)

    def batch(t: float, resolution_s: float) -> CallBatch:
        return CallBatch(
            times=np.array([t, t]),
            s_bytes=np.array([1e6, 1e6]),
            ops={"AllReduce": (2, 2_000_000)},
            nranks=8,
            processes=frozenset({"h:1"}),
            time_resolution_s=resolution_s,
        )

    w.add_batch(batch(1.0, 0.0))
    mix = w.mix()
    assert mix is not None
    assert mix.time_resolution_s == 0.0
    w.add_batch(batch(2.0, POLL_S))
    w.add_batch(batch(3.0, 0.0))
    for since, coarse in ((None, POLL_S), (1.5, POLL_S), (2.5, 0.0)):
        mix = w.mix(since=since)
        assert mix is not None
        assert mix.time_resolution_s == coarse


def _whole_second_log(path: Path, step_s: float, seconds: float) -> None:
    """An NCCL log with NCCL's default timestamp format, "[%F %T] " (whole seconds)."""
    start = dt.datetime(2026, 12, 1, 1, 0, 0)
    lines = []
    for k in range(int(seconds / step_s)):
        stamp = (start + dt.timedelta(seconds=0.37 + k * step_s)).strftime("[%F %T] ")
        lines += [
            f"{stamp}node1:42:42 [0] NCCL INFO AllReduce: opCount {4 * k + j:x} sendbuff 0x1 "
            "recvbuff 0x2 count 65536 datatype 7 op 0 root 0 comm 0x3 [nranks=8] stream 0x4"
            for j in range(4)
        ]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(("step_s", "expected"), [(5.3, 5.3), (2.3, None)])
def test_a_log_with_whole_second_timestamps_is_timed_to_the_second(
    tmp_path: Path, step_s: float, expected: float | None
) -> None:
    """`analyze` on a log in NCCL's default timestamp format: steps of 4 s and more are timed
    by their seconds; shorter ones get no T (and the warning), not the seconds' beat."""
    log = tmp_path / "nccl.log"
    _whole_second_log(log, step_s, 120.0)
    est = analyze_files(nccl_logs=[log]).estimate
    if expected is None:
        assert est.period_s is None
        assert any("timed to 1 s only" in w for w in est.warnings)
    else:
        assert est.period_s == pytest.approx(expected, abs=0.05)
