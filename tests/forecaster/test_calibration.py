"""The LSTM's calibration: conformal factors per level and lead bucket from a held-back slice."""
from __future__ import annotations

import numpy as np
import pytest

from forecaster.lstm.training import apply_scale, calibrate, lead_buckets

LEVELS = (0.1, 0.5, 0.9, 0.95, 0.99)


def _heads(n: int, H: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Heads that are too narrow, more so at long leads (as a net trained on calm days is), and
    targets whose spread grows with the lead."""
    rng = np.random.default_rng(seed)
    mid = rng.normal(0, 1, (n, 1)).repeat(H, axis=1)
    spread = np.linspace(0.5, 2.0, H)[None, :]
    y = mid + rng.normal(0, 1, (n, H)) * spread
    z = {0.1: -1.2816, 0.5: 0.0, 0.9: 1.2816, 0.95: 1.6449, 0.99: 2.3263}
    pred = np.stack([mid + 0.6 * z[q] * np.ones((n, H)) for q in LEVELS], axis=-1)
    return pred, y


def test_each_level_and_lead_bucket_reaches_its_wanted_coverage_on_new_data():
    """Fitted on one slice, checked on another drawn the same way: each level covers its
    nominal share ``margin`` wider in every lead bucket (one factor for all leads cannot:
    the spread grows with the lead)."""
    H, edges, margin = 30, (5, 15), 0.02
    pred, y = _heads(6000, H, seed=1)
    scale = calibrate(pred, y, LEVELS, margin, edges)
    assert set(scale) == {"0.1", "0.9", "0.95", "0.99"} and all(len(v) == H for v in scale.values())
    new_pred, new_y = _heads(6000, H, seed=2)
    out = apply_scale(new_pred, scale, LEVELS)
    for b in lead_buckets(H, edges):
        for j, q in enumerate(LEVELS):
            if q == 0.5:
                continue
            want = min((q if q > 0.5 else 1 - q) + margin, 0.995)
            cov = (new_y[:, b] <= out[:, b, j]).mean() if q > 0.5 else (new_y[:, b] >= out[:, b, j]).mean()
            assert abs(cov - want) < max(0.01, (1 - want) * 0.35), (q, b, cov, want)
    # uncalibrated, the narrow heads miss badly at long leads: the test above can fail
    assert (y[:, 15:] <= pred[:, 15:, 4]).mean() < 0.9


def test_too_few_points_in_a_bucket_use_the_whole_horizon_and_none_leaves_the_heads():
    pred, y = _heads(400, 30, seed=3)
    y[:, :5] = np.nan  # the first bucket has nothing: it takes the factor of all leads
    scale = calibrate(pred, y, LEVELS, 0.02, (5, 15))
    whole = calibrate(pred[:, 5:], y[:, 5:], LEVELS, 0.02, ())
    assert scale["0.9"][0] == pytest.approx(whole["0.9"][0])
    assert calibrate(pred[:1], y[:1], LEVELS, 0.02, (5,)) == {str(q): [1.0] * 30 for q in (0.1, 0.9, 0.95, 0.99)}


def test_one_factor_per_level_still_applies():
    """Artifacts stored before per-lead factors carry one number per level; they load and apply."""
    pred, _ = _heads(10, 30, seed=4)
    a = apply_scale(pred, {"0.9": 1.5, "0.95": 1.5, "0.99": 1.5, "0.1": 1.5}, LEVELS)
    b = apply_scale(pred, {k: [1.5] * 30 for k in ("0.9", "0.95", "0.99", "0.1")}, LEVELS)
    np.testing.assert_array_equal(a, b)
    assert lead_buckets(30, (5, 15)) == [slice(0, 5), slice(5, 15), slice(15, 30)]
    assert lead_buckets(6, (5, 15)) == [slice(0, 5), slice(5, 6)]
