"""The edge-run period: the span under step jitter, the line fit under timing noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.edge_fit import edge_noise_ratio, realised_period
from agent.period import edge_timing


def _bursts(
    rng: np.random.Generator, cycles: int, period: float, jitter: float, timing: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Measured rising and falling edges of bursts of 0.3 T (steps jittered, the compute
    absorbing it; timing error independent per edge), and the realised mean step."""
    steps = period * (1.0 + jitter * rng.standard_normal(cycles))
    rise = np.concatenate(([0.0], np.cumsum(steps)))
    fall = rise + 0.3 * period
    noise = timing * period * rng.standard_normal((2, rise.size))
    return rise + noise[0], fall + noise[1], float(steps.mean())


def _ratio(rise: np.ndarray, fall: np.ndarray) -> float:
    d_r, d_f = np.diff(rise), np.diff(fall)
    ones = np.ones(d_r.size)
    span = float((rise[-1] - rise[0] + fall[-1] - fall[0]) / (2 * d_r.size))
    return edge_noise_ratio((d_r, ones), (d_f, ones), span)


def _estimate(rise: np.ndarray, fall: np.ndarray) -> float:
    ratio = _ratio(rise, fall)
    ones = np.ones(rise.size - 1)
    return 0.5 * (realised_period(rise, ones, ratio) + realised_period(fall, ones, ratio))


def test_ratio_zero_is_the_span_and_infinite_ratio_is_the_least_squares_slope() -> None:
    rng = np.random.default_rng(1)
    cycles = np.array([1, 1, 2, 1, 1, 3, 1, 1], dtype=float)  # bursts missed in two places
    index = np.concatenate(([0.0], np.cumsum(cycles)))
    edges = 0.3 + 1.25 * index + 0.01 * rng.standard_normal(index.size)
    span = (edges[-1] - edges[0]) / cycles.sum()
    assert realised_period(edges, cycles, 0.0) == pytest.approx(span, rel=1e-12)
    slope = np.polyfit(index, edges, 1)[0]
    assert realised_period(edges, cycles, math.inf) == pytest.approx(slope, rel=1e-12)
    # In between, the estimate lies between the two.
    mid = realised_period(edges, cycles, 1.0)
    assert min(span, slope) <= mid <= max(span, slope)


def test_noisy_jitter_free_train_reaches_the_line_fit_error() -> None:
    """64 cycles, exact steps, 1 % timing noise: the span's error falls as 1/K, the line's as
    K^-1.5 (√(K/6) = 3.3× better here). With the noise ratio estimated from the same 64
    bursts, the estimate must be at least 2.5× better than the span."""
    rng = np.random.default_rng(7)
    ours, span = [], []
    for _ in range(300):
        rise, fall, truth = _bursts(rng, 64, 1.0, 0.0, 0.01)
        ours.append(_estimate(rise, fall) / truth - 1.0)
        span.append(0.5 * (rise[-1] - rise[0] + fall[-1] - fall[0]) / 64 / truth - 1.0)
    rms_ours = float(np.sqrt(np.mean(np.square(ours))))
    rms_span = float(np.sqrt(np.mean(np.square(span))))
    assert rms_ours < rms_span / 2.5


@pytest.mark.parametrize("jitter", [0.02, 0.1])
def test_jittered_train_keeps_the_realised_mean(jitter: float) -> None:
    """Step jitter with exact timing, and with timing noise 20× below the jitter: T is the
    realised mean step (the span), not a line fit that would miss it by the jitter."""
    rng = np.random.default_rng(3)
    for timing in (0.0, jitter / 20):
        for _ in range(100):
            rise, fall, truth = _bursts(rng, 16, 1.0, jitter, timing)
            span = 0.5 * (rise[-1] - rise[0] + fall[-1] - fall[0]) / 16
            assert _ratio(rise, fall) < 0.05
            assert _estimate(rise, fall) == pytest.approx(span, rel=timing + 1e-12)
            assert abs(_estimate(rise, fall) / truth - 1.0) <= 3 * timing + 1e-12


def test_layer_train_filling_the_step_still_reads_as_jitter() -> None:
    """A ZeRO-3 layer train fills the step: its rise follows the step's start, its fall the
    next step's start, so rise and fall intervals share jitter one step apart. Read as timing
    noise, a line fit would miss the realised mean; the estimate must stay as close to it as
    the span (RMS within 10 %)."""
    rng = np.random.default_rng(4)
    ours, span = [], []
    for _ in range(200):
        steps = 2.0 * (1.0 + 0.02 * rng.standard_normal(33))
        starts = np.concatenate(([0.0], np.cumsum(steps)))
        rise = starts[:-1] + 0.2 * steps  # the optimizer gap stretches with its step
        fall = starts[1:]
        truth = 0.5 * float(steps[:-1].mean() + steps[1:].mean())  # the steps each run spans
        ours.append(_estimate(rise, fall) / truth - 1.0)
        span.append(0.5 * (rise[-1] - rise[0] + fall[-1] - fall[0]) / 32 / truth - 1.0)
    assert np.sqrt(np.mean(np.square(ours))) <= 1.1 * np.sqrt(np.mean(np.square(span)))


def test_too_few_intervals_keep_the_span() -> None:
    rng = np.random.default_rng(8)
    rise, fall, _ = _bursts(rng, 8, 1.0, 0.0, 0.01)  # noise only, but 8 steps cannot show it
    assert _ratio(rise, fall) == 0.0


def _square_wave(rng: np.random.Generator, n_t: float, cycles: int, noise: float) -> np.ndarray:
    """Counter semantics: sample i averages [i, i+1), so a sample across an edge is partial."""
    phase = rng.uniform(0, n_t)
    width = 0.3 * n_t

    def on_time(t: np.ndarray) -> np.ndarray:
        rel = t - phase
        return np.floor(rel / n_t) * width + np.minimum(np.mod(rel, n_t), width)

    edges = np.arange(int(n_t * cycles) + 1, dtype=float)
    return np.diff(on_time(edges)) + noise * rng.standard_normal(edges.size - 1)


def test_edge_timing_on_a_noisy_square_wave_scales_like_the_line_fit() -> None:
    """End to end, exact steps and σ = 0.1 of the burst: 16 → 64 periods must cut the RMS
    error of ``edge_timing`` by ≥ 5× (the line fit's (64/16)^1.5 = 8; the span's is 4)."""
    rng = np.random.default_rng(5)
    rms = {}
    for cycles in (16, 64):
        errs = []
        for _ in range(60):
            n_t = 20.3
            timing = edge_timing(_square_wave(rng, n_t, cycles, 0.1), 1.0, n_t)
            assert timing is not None
            errs.append(timing.period_s / n_t - 1.0)
        rms[cycles] = float(np.sqrt(np.mean(np.square(errs))))
    assert rms[64] < rms[16] / 5.0


def test_edges_of_clean_counter_samples_are_placed_exactly() -> None:
    """A step inside a sample leaves one partial sample: its value places the step exactly,
    wherever in the sample it falls (the 50 % crossing of two samples misses by up to a
    tenth of a sample)."""
    rng = np.random.default_rng(12)
    for _ in range(20):
        n_t = 20.0 + rng.uniform(0.0, 1.0)
        x = _square_wave(rng, n_t, 8, 0.0)
        timing = edge_timing(x, 1.0, n_t)
        assert timing is not None
        assert np.allclose(np.diff(timing.rising_s), n_t, atol=1e-9)


def test_noisy_edges_are_placed_by_their_partial_sample() -> None:
    """σ = 0.2 of the burst, exact steps, 16 periods: the RMS error of T is within 2× the
    Cramér–Rao bound √6·σ/(K^1.5·N_T) (the smoothed 50 % crossing was about 3×)."""
    rng = np.random.default_rng(13)
    n_t, cycles, noise = 20.3, 16, 0.2
    errs = []
    for _ in range(80):
        timing = edge_timing(_square_wave(rng, n_t, cycles, noise), 1.0, n_t)
        assert timing is not None
        errs.append(timing.period_s / n_t - 1.0)
    bound = math.sqrt(6.0) * noise / (cycles**1.5 * n_t)
    assert float(np.sqrt(np.mean(np.square(errs)))) < 2.0 * bound


@pytest.mark.parametrize("ratio", [0.0, 1.0, math.inf])
def test_an_interval_left_out_does_not_count(ratio: float) -> None:
    """A pause of 3.7 periods between two runs of steps: counted as 4 cycles it moves T by
    0.3 periods over the run; left out (weight 0), T is the steps' own."""
    first = np.arange(20) * 0.5
    second = first[-1] + 1.85 + np.arange(20) * 0.5
    edges = np.concatenate((first, second))
    cycles = np.ones(edges.size - 1)
    cycles[19] = 4.0
    kept = cycles == 1.0
    assert realised_period(edges, cycles, ratio) != pytest.approx(0.5, rel=1e-3)
    assert realised_period(edges, cycles, ratio, kept=kept) == pytest.approx(0.5, rel=1e-9)


@pytest.mark.parametrize("n", [2, 12, 655])
@pytest.mark.parametrize("cycles", [1.0, 2.0])
@pytest.mark.parametrize("ratio", [1e-6, 0.1, 1.0, 30.0, 1e4, 1e9, math.inf])
def test_the_closed_form_weights_solve_the_tridiagonal_system(
    n: int, cycles: float, ratio: float
) -> None:
    """Where no burst was missed the weights come in closed form: they must be the system's
    solution, from the span's end (small ratio) to the parabola (infinite)."""
    from agent.edge_fit import _weights

    m = np.full(n, cycles)
    alpha, beta = (0.0, 1.0) if math.isinf(ratio) else (1 / (1 + ratio), ratio / (1 + ratio))
    system = (
        np.diag(alpha * m + 2 * beta)
        + np.diag(np.full(n - 1, -beta), 1)
        + np.diag(np.full(n - 1, -beta), -1)
    )
    exact = np.linalg.solve(system, m)
    assert _weights(m, ratio) == pytest.approx(exact, rel=1e-7, abs=1e-9 * float(exact.max()))
