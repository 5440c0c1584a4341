"""The recent-level anchor (forecaster/lstm/anchor.py): per lead, the weight on the net's P50
against the last step's load, chosen on the held-back validation slice."""
from __future__ import annotations

import numpy as np
import pandas as pd

from forecaster.lstm import LSTMConfig, LSTMForecaster
from forecaster.lstm.anchor import MIN_POINTS, anchor_weights, apply_anchor, recent_load

LEVELS = (0.1, 0.5, 0.9)


def _pred(mid: np.ndarray, spread: float = 0.2) -> np.ndarray:
    """(n, H, 3) quantiles around ``mid`` (n, H)."""
    return np.stack([mid - spread, mid, mid + spread], axis=-1)


def test_weight_is_zero_where_the_last_step_is_right_and_one_where_the_net_is():
    rng = np.random.default_rng(0)
    n, H = 200, 2
    recent = rng.normal(0, 0.5, n)
    target = np.stack([recent, rng.normal(0, 0.5, n)], axis=1)   # lead 1 persists, lead 2 is the net's
    net_mid = np.stack([np.zeros(n), target[:, 1]], axis=1)
    w = anchor_weights(_pred(net_mid), target, recent, LEVELS)
    assert w == [0.0, 1.0]


def test_a_blend_is_chosen_where_both_carry_information():
    rng = np.random.default_rng(1)
    n = 400
    a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
    target = (a + b)[:, None] / 2
    w = anchor_weights(_pred(a[:, None]), target, b, LEVELS)
    assert 0.3 <= w[0] <= 0.7


def test_too_few_validation_points_leave_the_net_alone():
    n = MIN_POINTS - 1
    target = np.ones((n, 1))
    assert anchor_weights(_pred(np.zeros((n, 1))), target, np.ones(n), LEVELS) == [1.0]
    target[:] = np.nan   # a lead with no finite target at all
    assert anchor_weights(_pred(np.zeros((n, 1))), target, np.ones(n), LEVELS) == [1.0]


def test_every_level_moves_by_the_same_shift_so_the_bands_keep_their_width():
    mid = np.array([[0.0, 1.0]])
    p = _pred(mid)
    out = apply_anchor(p, np.array([2.0]), [0.25, 1.0], LEVELS)
    np.testing.assert_allclose(out[0, 0], p[0, 0] + 0.75 * 2.0)   # lead 1 pulled 3/4 of the way to 2
    np.testing.assert_allclose(out[0, 1], p[0, 1])                # lead 2 untouched
    assert apply_anchor(p, np.array([2.0]), None, LEVELS) is p


def test_the_anchor_is_the_last_step_or_the_recent_level_where_that_step_is_missing():
    seq = np.zeros((2, 3, 8), dtype=np.float32)
    seq[:, -1, 0] = [0.4, 0.0]
    seq[:, -1, 1] = [1.0, 0.0]                 # the second origin's last step is missing
    static = np.zeros((2, 40), dtype=np.float32)
    static[:, 10] = [-0.3, 0.7]                # the recent weighted level (features.RECENT_COL)
    np.testing.assert_allclose(recent_load(seq, static), [0.4, 0.7])


def _random_walk_frame(days: int = 6, seed: int = 3) -> pd.DataFrame:
    """10-minute bins whose level wanders for hours (a deviation that persists): what the net
    alone reads poorly from a thousand origins, as on ServeGen."""
    rng = np.random.default_rng(seed)
    n = days * 144
    walk = np.cumsum(rng.normal(0, 0.08, n))
    walk -= np.convolve(walk, np.ones(72) / 72, mode="same")   # wanders, but stays near the daily shape
    mod = np.arange(n) % 144
    rate = 1e5 * np.exp(0.4 * np.sin(2 * np.pi * mod / 144) + walk)
    idx = pd.date_range("2025-01-06", periods=n, freq="10min")
    return pd.DataFrame({"requests": rng.poisson(rate).astype(float)}, index=idx).rename_axis("time")


def test_a_fitted_model_anchors_where_validation_says_so_and_keeps_it_in_its_artifact():
    frame = _random_walk_frame()
    cfg = LSTMConfig.tiny(horizon=6, window=24, level_window=12)
    m = LSTMForecaster(cfg, progress=False).fit(frame.iloc[:-144])
    off = LSTMForecaster(cfg, progress=False, anchor=False).fit(frame.iloc[:-144])
    assert off.anchor is None and len(m.anchor) == 6 and m.anchor[0] < 1.0
    origins = frame.index[-144:-6:3]
    y = np.array([frame["requests"].loc[o] for o in origins])
    def err(mod: LSTMForecaster) -> float:
        return float(np.mean(np.abs([f.quantiles[0.5][0] for f in mod.predict_origins(frame, origins, 6)] - y)))

    assert err(m) < err(off)   # lead 1 on the days after training: the anchor helps here
    tensors, meta = m.to_artifact()
    back = LSTMForecaster.from_artifact(tensors, meta)
    assert back.anchor == m.anchor
    np.testing.assert_array_equal(back.predict(frame, 6).quantiles[0.5], m.predict(frame, 6).quantiles[0.5])
    older = {k: v for k, v in meta.items() if k != "anchor"}   # an artifact from before the anchor
    assert LSTMForecaster.from_artifact(tensors, older).anchor is None
