"""The edge-run period: the span under step jitter, the line fit under timing noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.edge_fit import edge_noise_ratio, realised_period
from agent.period import edge_timing


def _run(
    rng: np.random.Generator, cycles: int, period: float, jitter: float, timing: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """True edges (steps jittered), measured edges (plus timing error), realised mean T."""
    steps = period + jitter * rng.standard_normal(cycles)
    true = np.concatenate(([0.0], np.cumsum(steps)))
    measured = true + timing * rng.standard_normal(true.size)
    return true, measured, float(steps.mean())


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
    edges, the estimate must be at least 2× better than the span."""
    rng = np.random.default_rng(7)
    ours, span = [], []
    for _ in range(300):
        _, measured, truth = _run(rng, 64, 1.0, 0.0, 0.01)
        d = np.diff(measured)
        m = np.ones(d.size)
        widths = 0.3 + 0.01 * 2**0.5 * rng.standard_normal(64)
        ratio = edge_noise_ratio([(d, m)], float(d.mean()), widths)
        ours.append(realised_period(measured, m, ratio) / truth - 1.0)
        span.append(d.mean() / truth - 1.0)
    rms_ours = float(np.sqrt(np.mean(np.square(ours))))
    rms_span = float(np.sqrt(np.mean(np.square(span))))
    assert rms_ours < rms_span / 2.0


def test_jittered_train_with_exact_timing_keeps_the_realised_mean() -> None:
    """10 % step jitter, bursts of constant width timed exactly: T is the realised mean (the
    span) to rounding, not a line fit that would spread the jitter over the estimate."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        true, measured, truth = _run(rng, 16, 1.0, 0.1, 0.0)
        d = np.diff(measured)
        m = np.ones(d.size)
        widths = np.full(true.size, 0.3)
        ratio = edge_noise_ratio([(d, m)], float(d.mean()), widths)
        assert ratio == 0.0
        assert realised_period(measured, m, ratio) == pytest.approx(truth, rel=1e-12)


def test_jitter_dominated_train_with_small_timing_noise_stays_near_the_span() -> None:
    """2 % step jitter and 0.1 % timing noise (the default simulated job): against the
    realised mean the estimate must be no worse than the span by more than 10 %."""
    rng = np.random.default_rng(11)
    ours, span = [], []
    for _ in range(300):
        _, measured, truth = _run(rng, 16, 1.0, 0.02, 0.001)
        d = np.diff(measured)
        m = np.ones(d.size)
        widths = 0.3 + 0.001 * 2**0.5 * rng.standard_normal(16)
        ratio = edge_noise_ratio([(d, m)], float(d.mean()), widths)
        ours.append(realised_period(measured, m, ratio) / truth - 1.0)
        span.append(d.mean() / truth - 1.0)
    assert np.sqrt(np.mean(np.square(ours))) <= 1.1 * np.sqrt(np.mean(np.square(span)))


def test_too_few_intervals_fall_back_to_the_span() -> None:
    d = np.array([1.0, 1.01, 0.99])
    assert edge_noise_ratio([(d, np.ones(3))], 1.0, np.array([0.3, 0.3])) == 0.0


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
