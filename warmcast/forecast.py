"""The forecast every model returns and every policy reads: the contract between the forecaster
and the decisions, kept in the base package so that the live state (``warmcast.state``) can
store it without importing any model."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# The levels every live forecast carries, and so the only levels a policy may provision
# for (a configured level outside them is refused when the configuration is loaded).
DEFAULT_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Forecast:
    """Forecast of requests/min for leads 1..H after ``origin``.

    ``origin`` is the first forecast minute; the history used ends at origin - 1 min.
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
