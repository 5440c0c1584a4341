"""The per-minute LSTM's inputs for every row of a panel at once.

The features are :mod:`forecaster.lstm.features`' own (each series scaled to itself: log1p load
minus the log of its mean over the last ``level_window`` steps before the origin; calendar inputs;
the day and week before), so the fleet model and the per-deployment one read a series the same
way, and a batched answer equals the per-series ones (tests/forecaster/test_global_lstm.py).

Rows are laid end to end in one flat array with ``lookback`` missing steps in front of each, so
that no feature of one series ever reads its neighbour (``build_features`` reads nothing further
back than ``lookback``), and one ``build_features`` call serves every series.  Work is cut in
chunks of ``CHUNK`` origins to keep memory flat (a seq row is window x 8 float32).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.dataset import TrainingData
from forecaster.lstm.features import (MAX_ZERO_SHARE, OUTAGE_FLOOR, OUTAGE_SHARE, build_features, days, lookback,
                                      take)

CHUNK = 40_000  # origins per feature pass


def _row_quantile(sorted_rows: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """np.quantile (linear) of each row's first ``count`` values (rows sorted, NaN last)."""
    pos = q * np.maximum(count - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
    a = np.take_along_axis(sorted_rows, lo[:, None], 1)[:, 0]
    b = np.take_along_axis(sorted_rows, hi[:, None], 1)[:, 0]
    t = pos - lo
    # numpy's own lerp, so that a threshold lands where np.quantile puts it
    return np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)


def outage_rows(y: np.ndarray, known: int | None = None) -> np.ndarray:
    """:func:`forecaster.lstm.features.outage_zeros` for every row of ``y`` (n, T) at once: in a row
    whose non-zero steps (of the first ``known``) are all busy and that is not at zero most of the
    time, its zeros and near-zero steps are missing.  Rows with no zero are untouched, as there."""
    y = np.clip(y, 0, None)
    has_zero = (y == 0).any(axis=1)
    if not has_zero.any():
        return y
    rows = np.flatnonzero(has_zero)
    seen = y[rows] if known is None else y[rows, :known]
    nz = np.sort(np.where(seen > 0, seen, np.nan), axis=1)
    count = np.isfinite(nz).sum(axis=1)
    q01 = _row_quantile(nz, count, 0.01)
    med = _row_quantile(nz, count, 0.5)
    zeros = (seen == 0).sum(axis=1)
    observed = np.isfinite(seen).sum(axis=1)
    intermittent = (observed > 0) & (zeros > MAX_ZERO_SHARE * observed)  # its zeros are load
    busy = (count > 0) & (q01 >= OUTAGE_FLOOR) & ~intermittent
    if not busy.any():
        return y
    out = y.copy()
    r = rows[busy]
    out[r] = np.where((y[r] == 0) | (y[r] < OUTAGE_SHARE * med[busy][:, None]), np.nan, y[r])
    return out


def stacked(logv: np.ndarray, cfg: LSTMConfig) -> tuple[np.ndarray, int]:
    """(flat array, row stride): each row behind ``lookback`` missing steps, rows end to end."""
    pad = lookback(cfg)
    n, T = logv.shape
    flat = np.full((n, pad + T), np.nan)
    flat[:, pad:] = logv
    return flat.ravel(), pad + T


def features(flat: np.ndarray, ends: np.ndarray, times: pd.DatetimeIndex, cfg: LSTMConfig):
    """``build_features`` over ``ends`` of the flat array, in chunks: (seq, static, level)."""
    parts = [build_features(flat, None, ends[i:i + CHUNK], times[i:i + CHUNK], cfg)
             for i in range(0, len(ends), CHUNK)]
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))


def origin_ends(n_steps: int, cfg: LSTMConfig, share: int) -> np.ndarray:
    """Training origins (positions in a row) as ``training_set`` takes them: one per step of the
    last ``max_train_days``, at least one target step after, thinned evenly to ``share`` keeping
    the most recent."""
    first = max(cfg.window, cfg.level_window, n_steps - cfg.max_train_days * days(cfg)[0])
    ends = np.arange(first, n_steps - 1)
    if len(ends) > share:
        stride = int(math.ceil(len(ends) / share))
        ends = ends[::-1][::stride][::-1]
    return ends


def split_ends(ends: np.ndarray, cfg: LSTMConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """(train mask, validation mask, validation start) over one row's origins, the per-series
    LSTM's rule (``training.split``): the last ``val_fraction`` validate, and no training target
    reaches into them.  Every row shares the grid, so every row shares the cut."""
    n = len(ends)
    n_val = max(int(n * cfg.val_fraction), min(n // 4, 60))
    val_start = int(ends[n - n_val])
    tr = ends + cfg.horizon <= val_start
    if tr.sum() < 10:
        tr = np.arange(n) < n - n_val
    return tr, np.arange(n) >= n - n_val, val_start


def training_rows(values: np.ndarray, index: pd.DatetimeIndex, cfg: LSTMConfig) -> TrainingData:
    """Rows of every series of a panel (values (n, T), the training part only), stacked; the
    target is each origin's next ``horizon`` steps of log load minus its level."""
    n, T = values.shape
    logv = np.log1p(outage_rows(values))
    flat, stride = stacked(logv, cfg)
    # every series keeps at least 20 origins (a panel of more series than max_origins / 20 takes more
    # rows than max_origins: 264 series under the tests' 3,000 had 11 each, refused as "too few steps")
    ends = origin_ends(T, cfg, max(cfg.max_origins // max(n, 1), 20))
    if len(ends) < 20:
        raise ValueError(f"{T} steps of history are too few to train on (the input window is {cfg.window})")
    tr_mask, va_mask, val_start = split_ends(ends, cfg)
    pad = stride - T
    all_ends = (np.arange(n)[:, None] * stride + pad + ends[None, :]).ravel()
    times = index[np.tile(ends, n)]
    seq, static, level = features(flat, all_ends, times, cfg)
    target = (take(flat, all_ends[:, None] + np.arange(cfg.horizon)[None, :]) - level[:, None]).astype(np.float32)
    keep = np.isfinite(level) & np.isfinite(target).any(axis=1) & (seq[:, -cfg.level_window:, 1].sum(1) > 0)
    tr = np.flatnonzero(np.tile(tr_mask, n)[keep])
    va = np.flatnonzero(np.tile(va_mask, n)[keep])
    if not len(tr) or not len(va):
        raise ValueError("no series has a load to learn from in its training or validation part")
    spans = [{"series": int(n), "steps": int(T), "start": str(index[0]), "end": str(index[-1]),
              "val_start": str(index[val_start]), "rows_kept": int(keep.sum())}]
    return TrainingData(seq[keep], static[keep], target[keep], tr, va, spans)
