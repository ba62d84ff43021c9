"""Counter deltas, wrap/reset handling and the byte-conserving grid."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent.rates import (
    active_span,
    column_direction,
    counter_delta,
    counter_deltas,
    direction_grids,
    grid_from_cumulative,
    stale_reads,
)


def u64(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.uint64)


def test_plain_increments() -> None:
    d, resets, wraps = counter_deltas(u64([10, 30, 30, 100]))
    assert d.tolist() == [20.0, 0.0, 70.0]
    assert (resets, wraps) == (0, 0)


def test_32bit_wrap_is_counted_as_the_bytes_that_passed() -> None:
    top = 2**32 - 100
    d, resets, wraps = counter_deltas(u64([top - 1000, top, 200]), bits=32)
    assert d.tolist() == [1000.0, 300.0]
    assert (resets, wraps) == (0, 1)


def test_reset_leaves_the_interval_unknown_not_zero_or_negative() -> None:
    d, resets, wraps = counter_deltas(u64([5_000_000, 6_000_000, 1_000, 2_000]), bits=64)
    assert d[0] == 1_000_000
    assert np.isnan(d[1])
    assert d[2] == 1_000
    assert (resets, wraps) == (1, 0)


def test_implausibly_large_wrap_is_a_reset() -> None:
    # From the top half to the bottom half, but the "wrapped" delta would be 10x anything seen.
    d, resets, _ = counter_deltas(u64([2**31 + 10, 2**31 + 20, 2**30]), bits=32)
    assert np.isnan(d[1])
    assert resets == 1


@given(
    st.lists(st.integers(min_value=0, max_value=2**32 - 1), min_size=2, max_size=40),
    st.sampled_from([32, 64]),
)
def test_vectorised_and_scalar_rules_agree(values: list[int], bits: int) -> None:
    d, _, _ = counter_deltas(u64(values), bits=bits)
    increases = [b - a for a, b in itertools.pairwise(values) if b >= a]
    largest = float(max(increases)) if increases else 0.0
    for i in range(len(values) - 1):
        scalar = counter_delta(values[i], values[i + 1], bits=bits, largest=largest)
        if scalar is None:
            assert np.isnan(d[i])
        else:
            assert d[i] == scalar


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("mlx5_0_tx_bytes", "tx"),
        ("eth0_rx_bytes", "rx"),
        ("port_xmit_data", "tx"),
        ("port_rcv_data", "rx"),
        ("bytes", "total"),
        ("rxe0_tx_bytes", "tx"),
        ("tx0_rx_bytes", "rx"),
        ("mlx5_0:1_rx_bytes", "rx"),
        ("nictx", "tx"),
    ],
)
def test_column_direction(name: str, direction: str) -> None:
    assert column_direction(name) == direction


@settings(max_examples=60)
@given(
    st.lists(st.floats(min_value=0.001, max_value=0.05), min_size=8, max_size=200),
    st.lists(st.floats(min_value=0, max_value=1e9), min_size=200, max_size=200),
    st.floats(min_value=0.005, max_value=0.03),
)
def test_grid_conserves_bytes(spans: list[float], amounts: list[float], dt: float) -> None:
    times = np.concatenate(([0.0], np.cumsum(spans)))
    assume(times[-1] >= dt)
    deltas = np.asarray(amounts[: len(spans)])
    # Reads the stale-read rule drops (a chunky counter) move bytes to the polls they really
    # cover, which this raw-interval expectation does not model (tested on their own below).
    assume(not stale_reads(deltas).any())
    g = grid_from_cumulative(times, deltas, dt=dt)
    covered = g.rate.size * dt
    # Bytes on the grid = bytes up to the end of the last slot (constant rate per interval).
    expected = np.interp(covered, times, np.concatenate(([0.0], np.cumsum(deltas))))
    got = float(np.nansum(g.rate) * dt)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-3)


def test_missed_poll_spreads_merged_bytes_evenly() -> None:
    times = np.array([0.0, 0.01, 0.02, 0.05, 0.06])  # polls at 0.03 and 0.04 were lost
    deltas = np.array([100.0, 100.0, 300.0, 100.0])
    g = grid_from_cumulative(times, deltas, dt=0.01)
    assert g.rate.tolist() == pytest.approx([10_000.0] * 6)
    assert g.valid.all()


def test_long_gap_is_invalid_not_a_flat_line() -> None:
    times = np.concatenate((np.arange(0, 1, 0.01), np.arange(2, 3, 0.01)))
    deltas = np.full(times.size - 1, 50.0)
    g = grid_from_cumulative(times, deltas, dt=0.01)
    gap = (g.times > 1.0) & (g.times < 2.0)
    assert not g.valid[gap].any()
    assert np.isnan(g.rate[gap]).all()
    assert g.valid[g.times < 0.98].all()


def test_reset_invalidates_only_its_slots() -> None:
    times = np.arange(0, 1.0001, 0.01)
    values = np.arange(times.size, dtype=np.uint64) * np.uint64(1000)
    values[60:] = np.arange(values.size - 60, dtype=np.uint64) * np.uint64(1000)  # reset
    grids = direction_grids(times, {"nic_tx_bytes": values})
    g = grids["tx"]
    assert g.resets == 1
    assert int((~g.valid).sum()) == 1
    assert np.nanmean(g.rate) == pytest.approx(100_000.0)


def test_directions_are_summed_per_column_group() -> None:
    times = np.arange(0, 1.0001, 0.1)
    a = (np.arange(times.size) * 100).astype(np.uint64)
    b = (np.arange(times.size) * 300).astype(np.uint64)
    grids = direction_grids(times, {"a_tx_bytes": a, "b_tx_bytes": b, "a_rx_bytes": b})
    assert set(grids) == {"tx", "rx"}
    assert np.nanmean(grids["tx"].rate) == pytest.approx(4000.0)
    assert np.nanmean(grids["rx"].rate) == pytest.approx(3000.0)


def test_column_missing_from_some_reads_is_spread_over_its_own_span() -> None:
    times = np.arange(0, 1.0001, 0.1)
    full = (np.arange(times.size) * 100).astype(np.uint64)
    present = np.ones(times.size, dtype=bool)
    present[4:6] = False  # device unreadable for two polls
    grids = direction_grids(times, {"x_tx_bytes": full}, present={"x_tx_bytes": present})
    g = grids["tx"]
    assert g.valid.all()
    assert g.rate.tolist() == pytest.approx([1000.0] * g.rate.size)


def test_chunky_counter_is_resampled_over_the_polls_each_step_covers() -> None:
    """A driver that refreshes its counter every 3rd poll: 0, 0, 3x, 0, 0, 3x ... in bursts."""
    from agent.bursts import burst_stats
    from tests.signals import periodic_bursts, sample_bursts

    b, _ = periodic_bursts(1.0, 0.3, 30, rate=1e9, seed=0)
    true_rate = sample_bursts(b, 100, 30)
    cum = np.concatenate(([0.0], np.cumsum(true_rate * 0.01)))
    seen = cum.copy()
    for i in range(seen.size):
        seen[i] = cum[(i // 3) * 3]  # the value of the last refresh
    times = np.arange(seen.size) * 0.01
    g = grid_from_cumulative(times, np.diff(seen), dt=0.01)
    s = burst_stats(g.rate, 0.01, 1.0)
    assert s.burst_bandwidth == pytest.approx(1e9, rel=0.05)
    assert s.on_ratio == pytest.approx(0.3, abs=0.03)
    # Without the stale-read rule the same data reads as 3x bursts a third of the time.
    assert int(stale_reads(np.diff(seen)).sum()) > 100


def test_genuine_short_gaps_are_not_taken_for_stale_reads() -> None:
    # A layer train: 3 polls on, 1 poll off, counters refreshed at every poll.
    deltas = np.tile([5.0, 5.0, 5.0, 0.0], 100)
    assert not stale_reads(deltas).any()


# -- the traffic's span: idle before and after it ---------------------------------------------


def test_active_span_cuts_long_idle_at_both_ends_and_keeps_one_off_phase() -> None:
    on = np.tile(np.r_[np.ones(8), np.zeros(2)], 30)  # D = 0.8, off phases of 2 slots
    x = np.r_[np.zeros(500), on, np.zeros(300)]
    x[100] = 0.01  # a stray frame in the lead-in: below 5 % of the traffic's level
    i0, i1 = active_span(x)
    assert (i0, i1) == (500 - 2, 500 + on.size - 2 + 2)  # the last burst ends 2 slots early
    assert x[i0 : i0 + 2].tolist() == [0.0, 0.0]  # the first burst keeps its rising edge


def test_active_span_leaves_off_phases_and_unknown_slots_alone() -> None:
    on = np.tile(np.r_[np.ones(3), np.zeros(7)], 30)  # D = 0.3: off phases of 7 slots
    x = np.r_[np.zeros(12), on]  # a lead-in shorter than two off phases: part of the pattern
    assert active_span(x) == (0, x.size)
    x = np.r_[np.full(6, np.nan), on]  # slots nobody read are not idle
    assert active_span(x) == (0, x.size)
    # ... but past a long hole without reads, an end holds nothing of the traffic.
    x = np.r_[np.full(400, np.nan), on, np.zeros(3), np.full(500, np.nan), np.zeros(5)]
    assert active_span(x) == (400, 400 + on.size + 3)
    assert active_span(np.zeros(50)) == (0, 50)


def test_a_short_job_in_a_long_quiet_recording_is_found() -> None:
    """A 10 s job (0.5 s steps, D = 0.2) in 10 min of a link that only carries a metrics
    scrape every 15 s: its bursts fill 0.3 % of the slots, so the 99th percentile was the
    scrape's level, nothing was idle, and the scrape's 15 s was reported as T."""
    fs = 100
    x = np.zeros(600 * fs)
    x[(np.arange(0, 600, 15) * fs).astype(int)] = 2e5  # the scrape: 2 kB in 10 ms
    job = np.tile(np.r_[np.full(10, 8e7), np.zeros(40)], 20)  # 20 steps of 0.5 s
    x[300 * fs : 300 * fs + job.size] = job
    i0, i1 = active_span(x)
    assert 300 * fs - 50 <= i0 <= 300 * fs
    assert 300 * fs + job.size - 40 <= i1 <= 300 * fs + job.size + 50
    # Steady traffic with chatter on top keeps its whole span.
    steady = np.full(600 * fs, 1e6)
    steady[::1500] = 5e7
    assert active_span(steady) == (0, steady.size)


def test_a_grid_too_large_to_hold_is_a_clear_error_not_a_memory_error() -> None:
    """Two reads a year apart at a 10 ms poll ask for 3 G slots (24 GB a float array)."""
    times = np.array([0.0, 0.01, 0.02, 3.2e7])
    with pytest.raises(ValueError, match="grid slots, more than"):
        grid_from_cumulative(times, np.array([1.0, 1.0, 1.0]), dt=0.01)
