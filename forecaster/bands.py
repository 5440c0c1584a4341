"""Empirical forecast bands: per-lead quantiles of a model's own log errors on its fit history
(what the naive baselines and Holt-Winters use for their levels)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from forecaster.base import monotone_quantiles

_GRID = np.linspace(0.01, 0.99, 99)  # quantile levels of the stored error distributions
MAX_LEAD = 60



def ffill(v: np.ndarray) -> np.ndarray:
    """Forward-fill NaN (leading NaN stay NaN)."""
    mask = np.isfinite(v)
    if mask.all():
        return v
    idx = np.where(mask, np.arange(len(v)), 0)
    np.maximum.accumulate(idx, out=idx)
    return v[idx]  # leading NaN stay NaN (v[0] is NaN there)


class EmpiricalBands:
    """Per-lead quantiles of log errors (log1p(actual) - log1p(point))."""

    def __init__(self) -> None:
        self.table: np.ndarray | None = None  # (len(_GRID), MAX_LEAD)

    def fit(self, errors: np.ndarray) -> None:
        """errors: (n_origins, MAX_LEAD) with NaN where unknown."""
        table = np.zeros((len(_GRID), errors.shape[1]))
        for h in range(errors.shape[1]):
            e = errors[:, h]
            e = e[np.isfinite(e)]
            table[:, h] = np.quantile(e, _GRID) if len(e) >= 20 else _GRID * 0 + np.nan
        # leads without enough samples borrow from the previous lead; none at all -> +-10 %
        for h in range(table.shape[1]):
            if not np.isfinite(table[:, h]).all():
                table[:, h] = table[:, h - 1] if h else np.log(1 + (_GRID - 0.5) * 0.4)
        # centred on the point forecast: P50 is the model's own point, the band its error spread
        self.table = table - table[len(_GRID) // 2][None, :]

    def apply(self, point: np.ndarray, quantiles: Sequence[float]) -> dict[float, np.ndarray]:
        H = len(point)
        lp = np.log1p(np.maximum(point, 0.0))
        table = self.table if self.table is not None else np.log(1 + (_GRID - 0.5) * 0.4)[:, None]
        cols = np.minimum(np.arange(H), table.shape[1] - 1)
        out = {}
        for q in quantiles:
            if q == 0.5 and self.table is None:
                off = np.zeros(H)
            else:
                off = np.array([np.interp(q, _GRID, table[:, c]) for c in cols])
            out[float(q)] = np.maximum(np.expm1(lp + off), 0.0)
        return monotone_quantiles(out)


def sample_origins(n: int, start: int, max_origins: int = 4000) -> np.ndarray:
    if n - MAX_LEAD <= start:
        return np.array([], dtype=int)
    o = np.arange(start, n - 1)
    if len(o) > max_origins:
        o = np.linspace(start, n - 2, max_origins).astype(int)
    return o


def lead_errors(logv: np.ndarray, origins: np.ndarray, point_log: np.ndarray) -> np.ndarray:
    """(n_origins, MAX_LEAD) log errors; point_log has the same shape."""
    n = len(logv)
    idx = origins[:, None] + np.arange(MAX_LEAD)[None, :]
    act = np.where(idx < n, logv[np.minimum(idx, n - 1)], np.nan)
    return act - point_log
