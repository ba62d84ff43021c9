"""The fast median and percentiles are numpy's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from agent import quantiles
from agent.quantiles import median, percentiles

_finite = st.floats(
    allow_nan=False, allow_infinity=False, width=64, min_value=-1e300, max_value=1e300
)
# Small value pools as well, so that ties (run-length counters, idle zeros) are common.
_values = st.one_of(_finite, st.sampled_from([0.0, 1.0, 2.5, -3.0, 1e9]))


@settings(max_examples=400, deadline=None)
@given(arrays(np.float64, st.integers(1, 300), elements=_values))
def test_median_is_numpys(x: np.ndarray) -> None:
    assert median(x) == float(np.median(x))


@settings(max_examples=400, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 300), elements=_values),
    st.lists(st.floats(0.0, 100.0), min_size=1, max_size=6),
)
def test_percentiles_are_numpys(x: np.ndarray, q: list[float]) -> None:
    ours = percentiles(x, q)
    theirs = np.percentile(x, q)
    assert np.array_equal(ours, theirs), (ours, theirs)


def test_the_input_is_left_as_it_was() -> None:
    x = np.random.default_rng(2).random(1001)
    before = x.copy()
    median(x)
    percentiles(x, [1.0, 99.9, 50.0])
    assert np.array_equal(x, before)


def test_long_window_values() -> None:
    """The sizes the estimators see each hop (64 k samples), including the two-level shape."""
    rng = np.random.default_rng(4)
    x = np.where(rng.random(65536) < 0.3, 4e10, 1e8) + 1e7 * rng.standard_normal(65536)
    assert median(x) == float(np.median(x))
    q = [1.0, 99.9, 99.0, 95.0, 80.0]
    assert np.array_equal(percentiles(x, q), np.percentile(x, q))


def _long_shapes() -> dict[str, np.ndarray]:
    """Long windows of the shapes the estimators meet, ties and periodic layouts included."""
    rng = np.random.default_rng(7)
    n = 65536
    phase = np.arange(n) % 100  # a 1 s step at 100 Hz: one phase per 100 samples
    return {
        "square wave, period dividing the window": np.where(phase < 30, 2.5e10, 0.0),
        "square wave with noise": np.where(phase < 4, 2.5e10, 1e8) + 1e7 * rng.standard_normal(n),
        "idle zeros and a few bursts": np.where(rng.random(n) < 0.001, 1e9, 0.0),
        "a handful of values": rng.choice([0.0, 1.0, 2.5, -3.0, 1e9], size=n),
        "heavy tail": rng.lognormal(0.0, 3.0, n),
        "sorted": np.sort(rng.random(n)),
        "odd length": rng.standard_normal(n + 1),
        "just over the bracketing size": rng.standard_normal(quantiles._BRACKET_FROM + 1),
    }


def test_long_arrays_are_exact_through_the_bracketed_selection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    q = [0.0, 0.01, 1.0, 25.0, 50.0, 75.0, 95.0, 99.0, 99.9, 100.0]
    whole = []
    full, size = quantiles._partitioned, quantiles._BRACKET_FROM
    monkeypatch.setattr(
        quantiles, "_partitioned", lambda x, r: whole.append(x.size > size) or full(x, r)
    )
    for name, x in _long_shapes().items():
        assert median(x) == float(np.median(x)), name
        assert np.array_equal(percentiles(x, q), np.percentile(x, q)), name
    assert not any(whole)  # the brackets held: no partition of a whole array


def test_a_bracket_that_misses_its_rank_falls_back_to_the_full_selection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Brackets of no width miss nearly every rank: the answer must still be numpy's."""
    monkeypatch.setattr(quantiles, "_BRACKET_SIGMAS", 0.0)
    monkeypatch.setattr(quantiles, "_BRACKET_SLACK", 0.0)
    calls = []
    full = quantiles._partitioned
    monkeypatch.setattr(quantiles, "_partitioned", lambda x, r: calls.append(x.size) or full(x, r))
    for name, x in _long_shapes().items():
        assert median(x) == float(np.median(x)), name
        assert np.array_equal(
            percentiles(x, [1.0, 50.0, 99.9]), np.percentile(x, [1.0, 50.0, 99.9])
        )
    assert max(calls) > quantiles._BRACKET_FROM  # the full selection did run


def test_the_probe_spreads_over_every_phase_of_a_period() -> None:
    """A strided probe of a 100-sample period would see one phase; the probe sees them all."""
    for n in (8192, 16384, 65536, 65537, 100000, 262144):
        idx = quantiles.probe_indices(n)
        assert idx.size == np.unique(idx).size == quantiles._PROBE
        assert idx.min() >= 0
        assert idx.max() < n
        assert np.unique(idx % 100).size == 100
        assert np.unique(idx % 16).size == 16
    assert np.array_equal(quantiles.probe_indices(1000, 4096), np.arange(1000))
