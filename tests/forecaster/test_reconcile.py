"""Reconciling client forecasts with their deployment's total (issue 43): bottom-up sums exactly,
top-down splits by historical shares, MinT on a toy hierarchy matches its closed form, and the
development split picks the method that is right there."""
from __future__ import annotations

import numpy as np
import pytest

from forecaster.global_lstm.reconcile import (METHODS, choose, covariances, mint_matrix, proportions, reconcile,
                                              shrunk_covariance)

LEVELS = (0.1, 0.5, 0.9, 0.95, 0.99)
HIER = {"d": (0, [1, 2, 3])}  # row 0 the total of rows 1-3; row 4 stands alone


def _preds(mid: np.ndarray) -> np.ndarray:
    """(series, origins, leads, levels) with bands of +-10/20/30/40% around the given P50s."""
    f = np.array([0.8, 1.0, 1.2, 1.3, 1.5])
    return mid[..., None] * f


def _base(rng, n_o: int = 40) -> np.ndarray:
    mid = rng.uniform(1, 50, size=(5, n_o, 3))
    mid[0] = rng.uniform(80, 120, size=(n_o, 3))  # a total that does not equal its clients' sum
    return _preds(mid)


def test_bottom_up_sums_exactly_and_keeps_the_clients():
    p = _base(np.random.default_rng(0))
    r = reconcile(p, HIER, "bottom_up")
    np.testing.assert_array_equal(r[0, ..., 1], r[1:4, ..., 1].sum(axis=0))
    np.testing.assert_array_equal(r[1:], p[1:])  # the clients, and the row outside the hierarchy
    assert (np.diff(r, axis=-1) >= 0).all()


def test_top_down_splits_the_total_by_historical_shares():
    p = _base(np.random.default_rng(1))
    train = np.array([[0, 0], [1.0, 3.0], [4.0, 4.0], [0.0, 0.0], [9, 9]])
    shares = proportions(train, HIER)
    np.testing.assert_allclose(shares["d"], [2 / 6, 4 / 6, 0.0])
    r = reconcile(p, HIER, "top_down", shares=shares)
    np.testing.assert_allclose(r[0, ..., 1], p[0, ..., 1])
    np.testing.assert_allclose(r[2, ..., 1], 4 / 6 * p[0, ..., 1])
    np.testing.assert_allclose(r[0, ..., 1], r[1:4, ..., 1].sum(axis=0))
    assert (r[3, ..., :2] == 0).all() and (r[3, ..., 4] < p[3, ..., 4]).all()  # no share: P50 0, a narrower band
    np.testing.assert_array_equal(proportions(np.zeros((5, 3)), HIER)["d"], [1 / 3] * 3)  # no load: equal shares


def test_mint_on_a_toy_hierarchy_is_its_closed_form():
    # total and two clients, W = I (OLS): S (S'S)^-1 S' y, worked by hand: y = (10, 4, 4) -> (28/3, 14/3, 14/3)
    proj = mint_matrix(np.eye(3))
    np.testing.assert_allclose(proj @ np.array([10.0, 4.0, 4.0]), [28 / 3, 14 / 3, 14 / 3])
    # a total known far worse than its clients: MinT trusts the clients (bottom-up)
    proj = mint_matrix(np.diag([1e6, 1.0, 1.0]))
    np.testing.assert_allclose(proj @ np.array([100.0, 4.0, 5.0]), [9.0, 4.0, 5.0], rtol=1e-4)
    # and the other way round: the clients share the total's correction by their variance
    proj = mint_matrix(np.diag([1e-6, 1.0, 3.0]))
    np.testing.assert_allclose(proj @ np.array([13.0, 4.0, 5.0]), [13.0, 5.0, 8.0], rtol=1e-4)


def test_the_shrinkage_follows_the_correlation():
    rng = np.random.default_rng(2)
    indep = rng.normal(size=(400, 4))
    w = shrunk_covariance(indep)
    assert np.abs(w[~np.eye(4, dtype=bool)]).max() < 0.05  # noise correlations shrunk away
    z = rng.normal(size=(400, 1))
    tied = z + 0.1 * rng.normal(size=(400, 4))
    c = np.cov(tied.T, bias=True)
    w = shrunk_covariance(tied)
    assert np.allclose(w, c, rtol=0.05)  # a real correlation is kept
    flat = shrunk_covariance(np.hstack([indep[:, :2], np.zeros((400, 1))]))  # a series without error
    assert np.all(np.linalg.eigvalsh(flat) > 0)
    with pytest.raises(ValueError, match="at least 3"):
        shrunk_covariance(indep[:2])


def test_mint_reconciles_and_the_development_split_chooses():
    rng = np.random.default_rng(4)
    truth = rng.uniform(5, 30, size=(5, 60, 3))
    truth[0] = truth[1:4].sum(axis=0)
    mid = truth * rng.normal(1, 0.05, size=truth.shape)  # good clients...
    mid[0] = truth[0] * 1.5                                 # ...and a total that runs 50% high
    p = _preds(mid)
    covs = covariances(p[:, :30], truth[:, :30], HIER)
    r = reconcile(p, HIER, "mint_shrink", covs=covs)
    np.testing.assert_allclose(r[0, ..., 1], r[1:4, ..., 1].sum(axis=0))
    shares = proportions(truth[:, 0], HIER)
    c = choose(p[:, 30:], truth[:, 30:], HIER, truth.mean(axis=(1, 2)), LEVELS, shares, covs)
    assert c.method in ("bottom_up", "mint_shrink") and set(c.scores) == set(METHODS)
    assert c.scores["top_down"] > c.scores["bottom_up"]  # splitting the biased total keeps its bias
    with pytest.raises(ValueError, match="unknown"):
        reconcile(p, HIER, "middle_out")


def test_a_band_moves_with_its_p50_and_never_blows_up():
    p = _preds(np.array([[[100.0]], [[1e-6]], [[50.0]], [[40.0]], [[1.0]]]))  # a client forecast at ~0
    r = reconcile(p, HIER, "top_down", shares={"d": np.array([0.5, 0.3, 0.2])})
    assert r[1, 0, 0, 1] == 50.0 and r[1, 0, 0, 4] < 2 * 51  # 1 + P99 moved by the P50's factor, not 5e7
    assert (np.diff(r, axis=-1) >= 0).all() and (r >= 0).all()
