"""The forecast every model returns and every policy reads: the contract between the forecaster
and the decisions, kept in the base package so that the live state (``warmcast.state``) can
store it without importing any model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

# The levels every live forecast carries, and so the only levels a policy may provision
# for (a configured level outside them is refused when the configuration is loaded).
DEFAULT_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Forecast:
    """Forecast of requests/min for leads 1..H after ``origin``.

    ``origin`` is the first forecast minute; the history used ends at origin - 1 min.
    ``mean`` is the expected load per lead: the LSTM's is estimated from its quantiles
    (:func:`mean_from_quantiles`), a baseline's is its point forecast.
    ``quantiles`` maps a level (0.1, 0.5, 0.9, ...) to an array of H values that
    never cross (q_a <= q_b for a < b at every lead).
    """

    origin: pd.Timestamp
    mean: np.ndarray
    quantiles: dict[float, np.ndarray]
    model: str
    version: str = "0"
    note: str = ""  # e.g. why a fallback model answered
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # optional other signals
    step_min: int = 1  # minutes per lead: the series' resolution (values are requests per step)

    @property
    def horizon(self) -> int:
        return int(len(self.mean))

    @property
    def index(self) -> pd.DatetimeIndex:
        return pd.date_range(self.origin, periods=self.horizon, freq=f"{self.step_min}min")

    def quantile(self, q: float) -> np.ndarray:
        """The forecast at level q, interpolated between stored levels if needed; a level
        outside the stored ones is refused (never clamped to the nearest)."""
        if q in self.quantiles:
            return self.quantiles[q]
        levels = sorted(self.quantiles)
        if not levels or not levels[0] <= q <= levels[-1]:
            raise ValueError(f"forecast by {self.model} has levels {levels}: level {q} is outside them")
        stack = np.vstack([self.quantiles[level] for level in levels])
        return np.array([np.interp(q, levels, stack[:, i]) for i in range(stack.shape[1])])


def mean_from_quantiles(levels: Sequence[float], values: np.ndarray) -> np.ndarray:
    """The mean of a distribution known by its quantiles, per row: values[..., j] is the level
    levels[j] (ascending).  The mean is the integral of the quantile function over (0, 1); this
    takes it piecewise linear between the levels (the trapezoid rule) and held at the outermost
    level beyond them.  An estimate, then: holding the lowest level (P10) below it and the one
    straight segment from P10 to P50 err high, cutting the tail above the top level (P99) errs
    low.  For a log-normal load with the live levels it is 2% high at a 30% spread (median 100:
    mean 104.6, estimate 106.9), 6% at 60% (119.7, 126.6): nearer the mean than the P50 is."""
    lv, v = np.asarray(levels, float), np.asarray(values, float)
    inner = ((v[..., 1:] + v[..., :-1]) / 2 * np.diff(lv)).sum(axis=-1)
    return lv[0] * v[..., 0] + inner + (1.0 - lv[-1]) * v[..., -1]
