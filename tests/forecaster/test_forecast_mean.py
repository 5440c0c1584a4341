"""The mean a forecast reports, estimated from its quantiles (``warmcast.forecast.mean_from_quantiles``)."""
from __future__ import annotations

import numpy as np
import pytest
from statistics import NormalDist

from warmcast.forecast import DEFAULT_QUANTILES, mean_from_quantiles


def test_exact_for_a_quantile_function_linear_between_the_levels():
    # uniform on [0, 100] known at 0, 0.5, 1: the trapezoid is exact; per row of a (leads, levels) array
    np.testing.assert_allclose(mean_from_quantiles((0.0, 0.5, 1.0), np.array([[0.0, 50.0, 100.0],
                                                                               [10.0, 20.0, 90.0]])), [50.0, 35.0])


@pytest.mark.parametrize("spread, mean, estimate", [(0.3, 104.6, 106.9), (0.6, 119.7, 126.6)])
def test_a_skewed_load_has_a_mean_above_its_median_as_the_docstring_says(spread, mean, estimate):
    # log-normal, median 100: quantiles 100 exp(spread z_q), mean 100 exp(spread^2 / 2)
    quantiles = [100.0 * np.exp(spread * NormalDist().inv_cdf(q)) for q in DEFAULT_QUANTILES]
    got, true = float(mean_from_quantiles(DEFAULT_QUANTILES, np.array(quantiles))), 100.0 * np.exp(spread ** 2 / 2)
    assert true == pytest.approx(mean, abs=0.05) and got == pytest.approx(estimate, abs=0.05)
    assert abs(got - true) < abs(100.0 - true)  # nearer the mean than the P50 is
