"""The one model protocol every forecaster follows (LSTM and baselines alike).

A model is fitted on a per-minute history and then asked, at an origin, for the
next ``horizon`` minutes given only the history before that origin.  It returns a
:class:`Forecast`: the mean and quantiles per lead, and who made it.

Series convention used across warmcast: a ``pandas.Series`` (or a DataFrame whose
``requests`` column is the target) with a tz-naive, UTC, regular ``DatetimeIndex`` at the
series' resolution (1 minute, or a coarser count series' own interval, see
``warmcast.resolution``); NaN marks a missing bin (never zero).  Models work in the
series' own steps: leads, horizons and seasonal periods are counted in bins (a 30-minute
horizon is 6 steps at 5 minutes, a day 288), and a forecast carries its ``step_min``.
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np
import pandas as pd

from warmcast.forecast import DEFAULT_QUANTILES, Forecast
from warmcast.resolution import resolution_of, with_resolution

@runtime_checkable
class ForecastModel(Protocol):
    """fit/predict contract; see tests/forecaster/test_contract.py."""

    name: str
    version: str

    def fit(self, history: pd.Series | pd.DataFrame) -> "ForecastModel":
        """Learn from a per-minute history (requests column is the target)."""
        ...

    def predict(
        self,
        history: pd.Series | pd.DataFrame,
        horizon: int = 30,
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
    ) -> Forecast:
        """Forecast the ``horizon`` minutes after the last index of ``history``."""
        ...


def target_series(history: pd.Series | pd.DataFrame) -> pd.Series:
    """The requests/min series of a history, whatever shape it came in."""
    if isinstance(history, pd.DataFrame):
        if "requests" not in history.columns:
            raise ValueError(f"history has no 'requests' column (columns: {list(history.columns)})")
        y = history["requests"].astype(float)
        if "coverage" in history.columns:  # a minute some instance went unread is missing, not a count
            y = y.where(~(history["coverage"] < 1.0))
        return y
    return history.astype(float)


# ---------------------------------------------------------------------------
# Helpers shared by every model (added by the forecaster; names above unchanged).
# ---------------------------------------------------------------------------
MINUTE = pd.Timedelta(minutes=1)
DAY = 1440
WEEK = 7 * 1440


class InsufficientHistory(ValueError):
    """The model cannot answer (or train) with this little history."""


def resolution(history: pd.Series | pd.DataFrame) -> int:
    """Minutes per bin of a history (1 for a per-minute series)."""
    return resolution_of(history)


def per_step(minutes: int, res: int) -> int:
    """A span in minutes (a day, a week, a smoothing window) as whole steps of ``res`` minutes."""
    return max(1, minutes // res)


def minute_series(history: pd.Series | pd.DataFrame) -> pd.Series:
    """The requests series on a regular index at its resolution (missing bins -> NaN): per
    minute, or a coarser series' own bins (the name stays from when every series was per minute).

    Cheap when the index is already regular (the common case): no copy is made.
    """
    s = target_series(history)
    if len(s) == 0:
        return s
    idx = s.index
    if not isinstance(idx, pd.DatetimeIndex):
        raise ValueError("history needs a DatetimeIndex of minutes")
    res = resolution_of(history)
    step = res * MINUTE
    if len(s) > 1 and (idx[-1] - idx[0]) == (len(s) - 1) * step and idx.is_monotonic_increasing:
        return with_resolution(s, res)
    s = s[~s.index.duplicated(keep="last")].sort_index()
    s.index = s.index.floor("min")
    s = s.groupby(level=0).sum(min_count=1)
    return with_resolution(s.asfreq(f"{res}min" if res > 1 else "min"), res)


CEILING = 10.0  # no forecast level above this times the highest load in the lookback (a week)


def ceiling(peak_log: np.ndarray) -> np.ndarray:
    """``CEILING`` times a lookback's highest load (log1p), and at least ``CEILING`` requests a
    step (a week of zeros still lets a small forecast through)."""
    return CEILING * np.maximum(np.expm1(np.nan_to_num(peak_log, nan=0.0)), 1.0)


def within_ceiling(f: Forecast, history: pd.Series | pd.DataFrame) -> Forecast:
    """``f`` with its mean and every level at most :func:`ceiling` of the last week of ``history``: the
    LSTM's own bound, for every model that serves.  The baselines' bands are quantiles of their log
    errors, and a tail learned where the load was near zero (an outage's edges) multiplies a busy
    minute's point: seasonal naive's P99 was 65x the week's largest bin on NASA's 5-minute log."""
    v = minute_series(history).to_numpy(dtype=float)[-per_step(WEEK, f.step_min):]
    seen = v[np.isfinite(v)]
    top = float(ceiling(np.log1p(np.array([seen.max() if len(seen) else 0.0])))[0])
    cap = lambda a: np.minimum(np.asarray(a, float), top)  # noqa: E731
    return Forecast(f.origin, cap(f.mean), {q: cap(p) for q, p in f.quantiles.items()}, f.model, f.version,
                    f.note, dict(f.extra), f.step_min)


def per_minute_rate(f: Forecast) -> Forecast:
    """A coarse forecast (requests per bin) as requests/min: each bin's value over its minutes,
    for consumers that plan per minute; the note says it is a rate from bins."""
    if f.step_min == 1:
        return f
    r = f.step_min
    spread = lambda a: np.repeat(np.asarray(a, float) / r, r)  # noqa: E731
    note = "; ".join(x for x in (f.note, f"requests/min (rate, from {r}-min bins)") if x)
    return Forecast(f.origin, spread(f.mean), {q: spread(v) for q, v in f.quantiles.items()}, f.model, f.version,
                    note, {k: spread(v) for k, v in f.extra.items()}, 1)


def tokens_series(history: pd.Series | pd.DataFrame) -> pd.Series | None:
    """Total tokens per minute (input + output) when the history has them, else None."""
    if not isinstance(history, pd.DataFrame):
        return None
    tok = token_total([history[c].to_numpy(dtype=float) for c in TOKEN_COLUMNS if c in history.columns])
    return None if tok is None else pd.Series(tok, index=history.index)


TOKEN_COLUMNS = ("input_tokens", "output_tokens")


def token_total(cols: list[np.ndarray]) -> np.ndarray | None:
    """Input + output tokens per step from their columns' values (NaN where none is known); None when
    there are no such columns or no step has a positive total."""
    if not cols:
        return None
    both = np.vstack(cols)
    tok = np.where(np.isnan(both).all(axis=0), np.nan, np.nansum(both, axis=0))
    return tok if np.isfinite(tok).any() and np.nansum(tok) > 0 else None


def monotone_quantiles(quantiles: dict[float, np.ndarray]) -> dict[float, np.ndarray]:
    """Sort quantile arrays level by level so that they never cross."""
    levels = sorted(quantiles)
    stack = np.sort(np.vstack([np.asarray(quantiles[q], dtype=float) for q in levels]), axis=0)
    return {q: stack[i] for i, q in enumerate(levels)}


class BaseForecaster:
    """Common plumbing: ``predict_origins`` (many origins of one series) by looping
    ``predict`` over the history before each origin.  Models override it with a
    faster batched version where they can; the answer must stay the same."""

    name: str = "base"
    version: str = "0"
    min_history: int = 1  # minutes of history needed to answer
    levels: tuple[float, ...] | None = None  # trained levels; it refuses any outside them (None: any level)

    def predict_origins(
        self,
        history: pd.Series | pd.DataFrame,
        origins: Sequence[pd.Timestamp],
        horizon: int = 30,
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
    ) -> list[Forecast]:
        """One forecast per origin, each from ``history`` strictly before that origin."""
        idx = history.index
        out = []
        for o in origins:
            pos = int(idx.searchsorted(pd.Timestamp(o), side="left"))
            out.append(self.predict(history.iloc[:pos], horizon=horizon, quantiles=quantiles))  # type: ignore[attr-defined]
        return out

