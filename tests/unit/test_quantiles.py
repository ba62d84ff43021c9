"""The fast median and percentiles are numpy's, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

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
