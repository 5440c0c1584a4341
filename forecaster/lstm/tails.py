"""The last steps of many histories, read for one batched forecast (``LSTMForecaster.predict_many``).

A history already on the model's grid (the common case) is read with numpy alone: pandas'
general path (``features.series_arrays``) costs about a millisecond a deployment, most of a
1,000-deployment call (issue 32).  Its counts are kept as counts and put through ``log1p``
together with every other such history's, in two threads: numpy lets go of the GIL inside a
ufunc loop, and log1p is the largest single cost left.  The results are the general path's, bit
for bit (tests/forecaster/test_lstm.py).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

from forecaster.base import TOKEN_COLUMNS, token_total
from forecaster.lstm.features import outage_zeros
from warmcast.resolution import ATTR as RESOLUTION_ATTR, NS_PER_MIN

LOG_THREADS = 2  # this project's machines have two cores
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}  # an index's unit in nanoseconds


def regular_counts(hist, need: int, step_min: int) -> tuple[np.ndarray, np.ndarray | None, pd.Timestamp] | None:
    """(load, tokens or None, last time) of a history whose last ``need`` steps lie on the model's grid:
    counts clipped at 0 (an impossible zero missing: ``features.outage_zeros``), not yet logged, at
    most ``need`` of them.  None: not that case (the
    general path reads it, and says what is wrong with it)."""
    idx = hist.index
    marked = (getattr(hist, "attrs", None) or {}).get(RESOLUTION_ATTR, step_min)
    if not isinstance(idx, pd.DatetimeIndex) or len(hist) < 2 or marked != step_min:
        return None
    if not _on_grid(idx, need, step_min):
        return None
    if isinstance(hist, pd.DataFrame):
        cols = list(hist.columns)
        if "requests" not in cols:
            return None
        try:  # one float block is a view, far cheaper than a Series per column
            table = hist.to_numpy(dtype=float)[-need:]
        except (TypeError, ValueError):  # a column that is not a number
            return None
        y = table[:, cols.index("requests")]
        if "coverage" in cols:  # a minute some instance went unread is missing (target_series)
            y = np.where(table[:, cols.index("coverage")] < 1.0, np.nan, y)
        tok = token_total([table[:, cols.index(c)] for c in TOKEN_COLUMNS if c in cols])
    else:
        y, tok = hist.to_numpy(dtype=float)[-need:], None
    return outage_zeros(np.clip(y, 0, None)), None if tok is None else np.clip(tok, 0, None), idx[-1]


def _on_grid(idx: pd.DatetimeIndex, need: int, step_min: int) -> bool:
    """Whether the last ``need`` times are ``step_min`` minutes apart: an index that carries that
    frequency is (pandas checks a frequency when it is set), else every gap is looked at."""
    if idx.freq is not None and idx.freq == _offset(step_min):
        return True
    per_ns = UNIT_NS.get(idx.unit)
    return per_ns is not None and bool(np.all(np.diff(idx.asi8[-need:]) * per_ns == step_min * NS_PER_MIN))


@lru_cache(maxsize=8)
def _offset(step_min: int):
    return to_offset(f"{step_min}min")


def put(rows: np.ndarray, i: int, values: np.ndarray) -> None:
    """Row ``i`` gets the last values, right-aligned (the row's NaN start stands for no history)."""
    values = values[-rows.shape[1]:]
    rows[i, rows.shape[1] - len(values):] = values


def log_rows(rows: np.ndarray, counts: np.ndarray) -> None:
    """log1p, in place, of the rows still holding counts (``counts[i]``); the others are logged already."""
    cuts = np.linspace(0, len(rows), LOG_THREADS + 1).astype(int)
    parts = [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    with ThreadPoolExecutor(LOG_THREADS) as pool:
        list(pool.map(lambda s: np.log1p(rows[s], out=rows[s], where=counts[s, None]), parts))
