"""The accuracy bench's generator: its ground truth must be exact, or the bench means nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "accuracy.py"


acc = load_script(BENCH, "bench_accuracy")


def _overlap_bytes(bursts, a: float, b: float) -> float:
    """Σ rate·|[start, end) ∩ [a, b)| + baseline·(b − a), by brute force."""
    lo = np.maximum(bursts.start, a)
    hi = np.minimum(bursts.end, b)
    return float(np.sum(bursts.rate * np.clip(hi - lo, 0.0, None)) + bursts.baseline * (b - a))


def test_cumulative_bytes_are_exact_sums_over_bursts_even_when_they_overlap() -> None:
    rng = np.random.default_rng(1)
    start = np.sort(rng.uniform(-1.0, 10.0, 40))
    end = start + rng.exponential(0.4, 40)  # many overlaps
    bursts = acc.Bursts(start, end, rng.uniform(1.0, 3.0, 40), baseline=0.25)
    for a, b in [(0.0, 10.0), (0.123, 0.125), (2.5, 7.75), (-0.5, 0.5)]:
        got = float(bursts.cumulative(b) - bursts.cumulative(a))
        assert got == pytest.approx(_overlap_bytes(bursts, a, b), rel=1e-12, abs=1e-12)
    t = np.linspace(0.0, 10.0, 7)
    assert bursts.rate_at(t) == pytest.approx(
        [0.25 + float(np.sum(bursts.rate[(bursts.start <= x) & (bursts.end > x)])) for x in t]
    )


def test_window_bytes_equal_the_bursts_inside_through_the_products_grid() -> None:
    sc = next(s for s in acc.SCENARIOS if s.key == "S10")
    rng = np.random.default_rng(2)
    trace = sc.trace(rng, sc.duration_s)
    spec = acc.PollSpec(fs=sc.fs)  # no noise: every byte is a burst or the baseline
    times, cum = acc.poll_counter(trace, spec, 0.0, sc.duration_s, rng)
    grid = acc.to_grid(times, cum)
    total = float(np.sum(grid.rate) * grid.dt)
    a, b = float(times[0]), float(times[0] + grid.rate.size * grid.dt)
    assert total == pytest.approx(_overlap_bytes(trace.bursts, a, b), rel=1e-9)


def test_lost_polls_conserve_bytes_and_long_gaps_become_unknown() -> None:
    sc = next(s for s in acc.SCENARIOS if s.key == "S12")
    rng = np.random.default_rng(3)
    trace = sc.trace(rng, sc.duration_s)
    spec = acc.PollSpec(fs=100.0, loss=0.1, gaps=(20,))
    times, cum = acc.poll_counter(trace, spec, 0.0, 16.0, rng)
    assert times.size < 1601 * 0.93  # ~10 % lost plus a gap of 20
    assert times[0] == 0.0
    assert times[-1] == pytest.approx(16.0)
    grid = acc.to_grid(times, cum)
    assert np.isfinite(grid.rate).all()  # merged intervals are spread, not dropped
    assert float(np.sum(grid.rate) * grid.dt) == pytest.approx(
        _overlap_bytes(trace.bursts, 0.0, 16.0), rel=1e-9
    )
    long_gap = acc.PollSpec(fs=100.0, gaps=(80,))  # > MAX_SPREAD_INTERVALS polls
    times, cum = acc.poll_counter(trace, long_gap, 0.0, 16.0, np.random.default_rng(4))
    assert np.isnan(acc.to_grid(times, cum).rate).sum() >= 79


def test_an_edge_sample_straddling_a_burst_start_has_the_proportional_value() -> None:
    bursts = acc.Bursts(np.array([0.0137]), np.array([0.0562]), np.array([1000.0]), baseline=10.0)
    trace = acc.Trace(bursts, np.empty(0), np.empty(0), np.zeros(1, dtype=np.int64))
    times, cum = acc.poll_counter(trace, acc.PollSpec(fs=100.0), 0.0, 0.1, np.random.default_rng())
    grid = acc.to_grid(times, cum)
    expected = [10.0, 10.0 + 1000.0 * 0.63, 1010.0, 1010.0, 1010.0, 10.0 + 1000.0 * 0.62, 10.0]
    assert grid.rate[:7] == pytest.approx(expected, rel=1e-9)


def test_jittered_polls_are_read_at_their_own_instants() -> None:
    bursts = acc.Bursts(np.array([0.5]), np.array([0.8]), np.array([7.0]), baseline=1.0)
    trace = acc.Trace(bursts, np.empty(0), np.empty(0), np.zeros(1, dtype=np.int64))
    spec = acc.PollSpec(fs=100.0, poll_jitter=0.2)
    times, cum = acc.poll_counter(trace, spec, 0.0, 2.0, np.random.default_rng(5))
    steps = np.diff(times) * 100.0
    assert steps.min() > 0.05
    assert np.std(steps) > 0.1
    assert cum == pytest.approx(bursts.cumulative(times), rel=1e-12)


def test_realised_period_is_the_mean_duration_of_the_iterations_fully_inside() -> None:
    rng = np.random.default_rng(6)
    trace = acc.layout_schedule(rng, acc.periodic_layout(0.3), 1.0, 20.0, rate=1.0, jitter=0.05)
    a, b = 2.3, 17.9
    lo, hi = trace.bounds[:-1], trace.bounds[1:]
    inside = (lo >= a) & (hi <= b)
    truth = acc.window_truth(trace, a, b, fs=100.0)
    assert truth is not None
    assert truth.iterations == int(inside.sum())
    assert truth.period_s == pytest.approx(float(np.mean((hi - lo)[inside])), rel=1e-12)
    assert truth.nominal_s == pytest.approx(1.0)
    # Bursts keep their nominal length; D is burst time over iteration time.
    lengths = trace.bursts.end - trace.bursts.start
    assert lengths == pytest.approx(np.full(lengths.size, 0.3))
    assert truth.duty == pytest.approx(0.3 * truth.iterations / float((hi - lo)[inside].sum()))
    assert truth.bytes_per_iteration == pytest.approx(truth.duty * truth.period_s)
    # Each burst ends its iteration (the sync point).
    assert trace.bursts.end == pytest.approx(hi)


def test_iteration_jitter_is_a_random_walk_and_drift_is_linear() -> None:
    rng = np.random.default_rng(7)
    trace = acc.layout_schedule(rng, acc.periodic_layout(0.2), 1.0, 4000.0, jitter=0.03)
    d = np.diff(trace.bounds)
    assert np.std(d) == pytest.approx(0.03, rel=0.1)
    assert abs(np.corrcoef(d[:-1], d[1:])[0, 1]) < 0.1  # i.i.d. durations
    drift = acc.layout_schedule(
        np.random.default_rng(8), acc.periodic_layout(0.3), 1.0, 16.0, drift=0.1, drift_span_s=16.0
    )
    inside = (drift.bounds[:-1] >= 0) & (drift.bounds[1:] <= 16.0)
    assert drift.nominal[inside] == pytest.approx(1.0 + 0.1 * drift.bounds[:-1][inside] / 16.0)


def test_nested_layouts_have_the_tabled_duty_and_burst_sizes() -> None:
    s10 = next(s for s in acc.SCENARIOS if s.key == "S10")
    trace = s10.trace(np.random.default_rng(9), s10.duration_s)
    truth = acc.window_truth(trace, 0.0, s10.duration_s, s10.fs)
    assert truth is not None
    assert truth.duty == pytest.approx(0.28, rel=0.03)
    lengths = (trace.bursts.end - trace.bursts.start) * s10.fs
    assert sorted(set(np.round(lengths, 6)))[:1] == [4.0]  # micro-bursts: 4 samples
    assert truth.resolved
    s11 = next(s for s in acc.SCENARIOS if s.key == "S11")
    trace = s11.trace(np.random.default_rng(10), s11.duration_s)
    per_iteration = np.bincount(trace.burst_iter)
    assert set(per_iteration) == {72}
    truth = acc.window_truth(trace, 0.0, s11.duration_s, s11.fs)
    assert truth is not None
    assert truth.duty == pytest.approx(0.288, rel=0.03)
    assert truth.inner_period_s == pytest.approx(0.025)


def test_sub_sample_bursts_are_unresolved_in_truth() -> None:
    s3 = next(s for s in acc.SCENARIOS if s.key == "S3")
    truth = acc.window_truth(s3.trace(np.random.default_rng(11), 6.4), 0.0, 6.4, s3.fs)
    assert truth is not None
    assert not truth.resolved


@pytest.mark.parametrize(("kind", "cv"), [("poisson", 1.0), ("gamma", 0.5)])
def test_aperiodic_schedules_have_the_requested_interval_cv(kind: str, cv: float) -> None:
    sc = next(s for s in acc.SCENARIOS if s.kind == kind)
    trace = sc.trace(np.random.default_rng(12), 2000.0)
    starts = np.sort(trace.bursts.start[trace.bursts.start >= 0])
    gaps = np.diff(starts)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(cv, rel=0.08)
    assert np.mean(gaps) == pytest.approx(1.0 / sc.events_per_s, rel=0.05)
    lengths = trace.bursts.end - trace.bursts.start
    assert np.mean(lengths) == pytest.approx(sc.mean_duration_s, rel=0.08)
    rates = trace.bursts.rate / acc.B_RATE
    assert rates.min() >= 0.5
    assert rates.max() <= 1.0
    assert acc.window_truth(trace, 0.0, 30.0, sc.fs) is None


def test_noise_is_zero_mean_and_never_clipped() -> None:
    sc = next(s for s in acc.SCENARIOS if s.key == "A4")
    rng = np.random.default_rng(13)
    times, cum = acc.poll_counter(sc.trace(rng, 30.0), sc.poll_spec(), 0.0, 30.0, rng)
    rate = acc.to_grid(times, cum).rate / acc.B_RATE
    assert float(np.mean(rate)) == pytest.approx(acc.BASELINE, abs=0.005)
    assert float(np.std(rate)) == pytest.approx(0.05, rel=0.05)
    assert (rate < 0).mean() > 0.3  # baseline 0.02 under σ 0.05: many negative samples


def test_exact_edge_oracle_equals_the_realised_period_without_jitter() -> None:
    trace = acc.layout_schedule(np.random.default_rng(14), acc.periodic_layout(0.3), 0.5, 10.0)
    truth = acc.window_truth(trace, 0.0, 10.0, 100.0)
    assert truth is not None
    assert truth.oracle_s == pytest.approx(0.5, rel=1e-12)
    assert truth.period_s == pytest.approx(0.5, rel=1e-12)


def test_windows_are_reproducible_and_independent() -> None:
    s1 = acc.SCENARIOS[0]
    g1, t1 = acc.make_window(s1, 42, 0)
    g2, t2 = acc.make_window(s1, 42, 0)
    g3, _ = acc.make_window(s1, 42, 1)
    assert np.array_equal(g1.rate, g2.rate)
    assert t1 == t2
    assert not np.array_equal(g1.rate, g3.rate)


def test_classification_and_bounds() -> None:
    assert acc.classify(1.02, 1.0) == "ok"
    assert acc.classify(0.5, 1.0) == "harmonic"
    assert acc.classify(3.05, 1.0) == "harmonic"
    assert acc.classify(1.5, 1.0) == "other"
    assert acc.classify(None, 1.0) == "none"
    assert acc.crb_edge(0.1, 16, 100) == pytest.approx(np.sqrt(6) * 0.1 / (64 * 100))
    assert acc.jitter_floor(0.02, 16) == pytest.approx(0.005)


def test_baselines_find_a_clean_period() -> None:
    t = np.arange(2000) / 100.0
    x = ((t % 0.8) < 0.2).astype(np.float64)
    assert acc.fft_argmax_period(x, 0.01) == pytest.approx(0.8, rel=0.01)
    assert acc.acf_first_peak_period(x, 0.01) == pytest.approx(0.8, rel=0.01)
    noise = np.random.default_rng(15).normal(size=2000)
    assert acc.acf_first_peak_period(noise, 0.01) is None
