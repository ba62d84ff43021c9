"""Trains of bursts: a rhythm inside a longer step, or a step with pauses (agent/trains.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.trains import train_period, train_starts, train_verdict


def _edges(starts: list[float], per_train: int, spacing: float, burst: float) -> tuple:
    """Rising and falling edges of ``per_train`` bursts ``spacing`` apart from each start."""
    rise = np.concatenate([s + spacing * np.arange(per_train) for s in starts])
    return rise, rise + burst


def _buckets(steps: int = 8, step: float = 6.3, jitter: float = 0.02, seed: int = 1) -> tuple:
    """DDP's bucketed all-reduces: six 80 ms bursts 0.6 s apart after 3.2 s of forward pass."""
    rng = np.random.default_rng(seed)
    lengths = step * (1.0 + jitter * rng.standard_normal(steps))
    starts = list(3.2 + np.concatenate(([0.0], np.cumsum(lengths[:-1]))))
    return _edges(starts, 6, 0.6, 0.08), float(lengths.mean())


def test_a_steps_rhythm_inside_trains_is_told_and_the_trains_time_the_step() -> None:
    """Six buckets 0.6 s apart, then 3.2 s of silence, every 6.3 s (2 % spread): trains, and
    the trains' starts and ends time the step within 1 %."""
    (rise, fall), step = _buckets()
    assert train_verdict(rise, fall, 0.6, 0.0, float(fall[-1]) + 0.5) == "trains"
    found = train_period(rise, fall, 0.6)
    assert found == pytest.approx(step, rel=0.01)
    # The first train follows no silence the edges saw: seven starts.
    assert train_starts(rise, fall, 0.6).size == 7


def test_a_start_up_train_out_of_step_is_left_out() -> None:
    """The job's first train came 3.8 s before the next, in 6.3 s steps: still the step."""
    (rise, fall), step = _buckets(jitter=0.0)
    early_rise, early_fall = _edges([rise[0] - 3.8], 1, 0.6, 0.3)
    rise, fall = np.concatenate((early_rise, rise)), np.concatenate((early_fall, fall))
    assert train_period(rise, fall, 0.6) == pytest.approx(step, rel=0.005)


def test_pauses_of_varying_length_are_no_step() -> None:
    """Ten steps of 0.68 s, then a pause of 3-5 s (an evaluation), as a real job did: the
    trains' starts spread 6 % and more (12 % on the real job), so they are pauses, and no step
    of trains is made of them."""
    rng = np.random.default_rng(3)
    starts, at = [], 0.0
    for _ in range(7):
        starts.append(at)
        at += 10 * 0.68 + rng.uniform(3.0, 5.0)
    rise, fall = _edges(starts, 10, 0.68, 0.25)
    assert train_verdict(rise, fall, 0.68, 0.0, float(fall[-1]) + 0.3) == "pauses"
    assert train_period(rise, fall, 0.68) is None


@pytest.mark.parametrize("case", ["steady", "stopped", "started late", "rare pause"])
def test_steady_steps_are_no_trains(case: str) -> None:
    """Bursts one a step with no silence; a job that stopped (idle after its 20 steps) or
    started late (idle before them); one pause in 40 steps: none of them is trains."""
    rise, fall = _edges([0.0], 20, 1.0, 0.3)
    start, end = 0.0, float(fall[-1]) + 0.5
    if case == "stopped":
        end += 30.0
    elif case == "started late":
        start -= 30.0
    elif case == "rare pause":
        rise2, fall2 = _edges([float(rise[-1]) + 5.0], 20, 1.0, 0.3)
        rise, fall = np.concatenate((rise, rise2)), np.concatenate((fall, fall2))
        end = float(fall[-1]) + 0.5
    assert train_verdict(rise, fall, 1.0, start, end) == "none"
