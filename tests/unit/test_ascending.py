"""Call times in order: sorted only when they are not (agent.ascending), same answers either way."""

from __future__ import annotations

import numpy as np
import pytest

from agent.ascending import ascending, finite_ascending
from agent.call_sequence import clumped_resolution
from agent.sharding import calls_per_step, layer_gap, steps_spanned


def test_times_in_order_are_returned_as_they_are() -> None:
    t = np.array([0.0, 0.5, 0.5, 1.25, 3.0])
    assert ascending(t) is t  # no copy: the live window's calls come in log order
    assert finite_ascending(t) is t


def test_times_out_of_order_are_sorted_without_touching_the_input() -> None:
    t = np.array([2.0, 0.5, 1.0, 0.25])
    out = ascending(t)
    assert out.tolist() == [0.25, 0.5, 1.0, 2.0]
    assert t.tolist() == [2.0, 0.5, 1.0, 0.25]


def test_unknown_times_are_left_out_or_sort_last() -> None:
    t = np.array([0.0, np.nan, 1.0, np.inf, 0.5])
    assert finite_ascending(t).tolist() == [0.0, 0.5, 1.0]
    # NaN breaks the order check, so the array is sorted, NaN last, as np.sort does.
    assert np.array_equal(ascending(t), np.sort(t), equal_nan=True)
    assert ascending(np.array([np.nan, 1.0]))[0] == 1.0
    assert finite_ascending(np.array([np.nan])).size == 0


def test_call_time_readers_answer_the_same_in_log_order_and_shuffled() -> None:
    """Two processes' files read one after another interleave their times: every reader of the
    calls' times must give the answer it gives on them in time order."""
    rng = np.random.default_rng(5)
    train = np.arange(12) * 0.004
    one = np.concatenate([k * 0.5 + train for k in range(40)])
    both = np.concatenate((one, one + 0.001))  # the second process's file after the first's
    ordered = np.sort(both)
    for times in (both, rng.permutation(both)):
        assert steps_spanned(times, 0.5) == steps_spanned(ordered, 0.5) == 40
        assert calls_per_step(times, 0.5) == calls_per_step(ordered, 0.5)
        assert layer_gap(times, 0.5) == pytest.approx(layer_gap(ordered, 0.5))
    # A pause of 10 steps is left out of the steps, in any order.
    paused = np.concatenate((one, one[-1] + 5.0 + one))
    assert steps_spanned(rng.permutation(paused), 0.5) == steps_spanned(paused, 0.5) == 80


def test_lines_timed_in_blocks_are_found_when_files_are_read_one_after_another() -> None:
    """Each process's block of lines shares one time, blocks 2 s apart, 4 steps of 3 calls a
    block; the second process's file comes after the first's, so the times go back."""
    kinds = np.tile(np.array([0, 1, 2]), 4 * 30)  # AllReduce markers among two other calls
    blocks = np.repeat(np.arange(30) * 2.0, 12)
    sizes = np.full(2 * blocks.size, 1024.0)
    times = np.concatenate((blocks, blocks + 0.3))
    procs = np.repeat(np.array([0, 1]), blocks.size)
    keys = np.concatenate((kinds, kinds))
    assert clumped_resolution(times, procs, keys, sizes) == pytest.approx(2.0)
    # Timed line by line instead (a call every 17 ms), nothing is coarse.
    fine = np.arange(times.size) * 0.017
    assert clumped_resolution(fine, procs, keys, sizes) == 0.0
