"""Serve the trained model when it can answer, the best available baseline when not.

:class:`FallbackForecaster` wraps a primary model (normally the registry's LSTM
champion) and falls back to a baseline when

* there is no primary (none trained, or the registry refused its artifact),
* the history holds less than ``min_history`` minutes (default one day),
* the primary is stale (trained on data ending more than ``max_age`` before the
  history ends),
* the primary raises or returns something non-finite.

The answer then comes from the best baseline that can answer (ranked by MAE on the
last hours of the history; with too little history in the order UC, Holt-Winters,
seasonal naive, persistence) and its ``note`` says which and why, e.g.
``"fallback to persistence: less than a day of history (200 min)"``.
"""
from __future__ import annotations

from dataclasses import replace

from typing import Sequence

import numpy as np
import pandas as pd

from forecaster.base import DAY, WEEK, BaseForecaster, minute_series, resolution, within_ceiling

from warmcast.forecast import DEFAULT_QUANTILES, Forecast
from warmcast.resolution import steps_for
from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier

_DEFAULT_ORDER = ("uc_fourier", "holt_winters", "seasonal_naive_week", "seasonal_naive_day", "persistence")


def default_fallbacks() -> list[BaseForecaster]:
    return [UCFourier(max_days=3), HoltWinters(max_days=3), SeasonalNaive(DAY), Persistence()]


# The baselines a training's validation table names, as they serve: the state-space ones on their
# last three days (as default_fallbacks), since a server fits them again every hour.
_BY_NAME = {"uc_fourier": lambda: UCFourier(max_days=3), "holt_winters": lambda: HoltWinters(max_days=3),
            "seasonal_naive_day": lambda: SeasonalNaive(DAY), "seasonal_naive_week": lambda: SeasonalNaive(WEEK),
            "persistence": Persistence}


def baseline_named(name: str) -> BaseForecaster | None:
    """A fresh baseline by the name a backtest scored it under; None for a name that is no baseline."""
    make = _BY_NAME.get(name)
    return make() if make else None


class FallbackForecaster(BaseForecaster):
    name = "auto"

    def __init__(self, primary=None, baselines: Sequence[BaseForecaster] | None = None,
                 min_history: int = DAY, max_age: pd.Timedelta | None = pd.Timedelta(days=14),
                 primary_missing_reason: str = "no trained model", primary_note: str = "") -> None:
        self.primary = primary
        self.primary_note = primary_note  # said on every answer of the primary (why it was chosen)
        self.baselines = list(baselines) if baselines is not None else default_fallbacks()
        self.min_history = min_history
        self.max_age = max_age
        self.primary_missing_reason = primary_missing_reason
        self._fitted: list[BaseForecaster] = []
        self._fit_errors: dict[str, str] = {}
        self._ranking: dict[str, float] = {}

    @property
    def version(self) -> str:  # type: ignore[override]
        return getattr(self.primary, "version", "0")

    # --------------------------------------------------------------- fitting
    def fit(self, history, rank_hours: int | None = 6) -> "FallbackForecaster":
        """Fit every baseline that can be fitted on this history and rank them on its last
        ``rank_hours``; None keeps the order they were given in (ranked already, by a training's
        validation window)."""
        self._fitted, self._fit_errors = [], {}
        for b in self.baselines:
            try:
                b.fit(history)
                self._fitted.append(b)
            except Exception as err:  # noqa: BLE001 - a baseline that cannot fit is skipped, and said so
                self._fit_errors[b.name] = f"{type(err).__name__}: {err}"
        if rank_hours is None:
            self._ranking = {}
            return self
        self._ranking = self._rank(history, rank_hours)
        order = {n: i for i, n in enumerate(_DEFAULT_ORDER)}
        self._fitted.sort(key=lambda b: (self._ranking.get(b.name, np.inf), order.get(b.name, 99)))
        return self

    def _rank(self, history, hours: int) -> dict[str, float]:
        s = minute_series(history)
        n, r = len(s), resolution(s)  # positions are the series' steps (minutes, or coarser bins)
        if n < 2 * hours * 60 // r:
            return {}
        lead = steps_for(30, r)
        origins = s.index[n - hours * 60 // r::lead][:-1]
        out = {}
        for b in self._fitted:
            errs = []
            try:
                for o in origins:
                    pos = int(s.index.searchsorted(o))
                    f = b.predict(s.iloc[:pos], horizon=lead)
                    act = s.iloc[pos:pos + lead].to_numpy()
                    e = np.abs(f.mean[: len(act)] - act)
                    errs.append(e[np.isfinite(e)])
                allerr = np.concatenate(errs) if errs else np.array([])
                if len(allerr):
                    out[b.name] = float(allerr.mean())
            except Exception:  # noqa: BLE001
                out[b.name] = np.inf
        return out

    # ------------------------------------------------------------- answering
    def why_not_primary(self, history) -> str | None:
        """The reason the primary cannot answer for this history, or None."""
        if self.primary is None:
            return self.primary_missing_reason
        s = minute_series(history)
        observed = int(np.isfinite(s.to_numpy(dtype=float)).sum()) * resolution(s) if len(s) else 0
        if observed < self.min_history:
            return f"less than a day of history ({observed} observed minutes)"
        if self.max_age is not None:
            end = getattr(self.primary, "meta", {}).get("train_end")
            if end and s.index[-1] - pd.Timestamp(end) > self.max_age:
                age = (s.index[-1] - pd.Timestamp(end)).days
                return f"model is stale (trained on data up to {end}, {age} days before the history ends)"
        return None

    def predict(self, history, horizon: int = 30, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Forecast:
        """The primary's answer, else the first baseline's that can answer; either under the ceiling."""
        return within_ceiling(self._answer(history, horizon, quantiles), history)

    def _answer(self, history, horizon: int, quantiles: Sequence[float]) -> Forecast:
        reason = self.why_not_primary(history)
        if reason is None:
            try:
                f = self.primary.predict(history, horizon=horizon, quantiles=quantiles)
                if np.isfinite(f.mean).all() and all(np.isfinite(v).all() for v in f.quantiles.values()):
                    return replace(f, note=f.note or self.primary_note, extra={})
                reason = "model returned non-finite values"
            except Exception as err:  # noqa: BLE001 - any model failure falls back, and says so
                reason = f"model failed ({type(err).__name__}: {err})"
        return self._baseline_answer(history, horizon, quantiles, reason)

    def _candidates(self, history):
        """Fitted baselines in rank order; without a fit, each baseline is fitted on demand in
        the default order (the first that answers wins, so the cheap ones are not fitted
        when a better one works)."""
        if self._fitted:
            yield from self._fitted
            return
        order = {n: i for i, n in enumerate(_DEFAULT_ORDER)}
        for b in sorted(self.baselines, key=lambda b: order.get(b.name, 99)):
            try:
                b.fit(history)
            except Exception as err:  # noqa: BLE001
                self._fit_errors[b.name] = f"{type(err).__name__}: {err}"
                continue
            yield b

    def _baseline_answer(self, history, horizon, quantiles, reason: str) -> Forecast:
        tried = []
        for b in self._candidates(history):
            try:
                f = b.predict(history, horizon=horizon, quantiles=quantiles)
            except Exception as err:  # noqa: BLE001
                tried.append(f"{b.name}: {err}")
                continue
            if np.isfinite(f.mean).all():
                # a baseline named before this one that could not answer is said: the note may name it
                failed = [f"{n}: {e}" for n, e in self._fit_errors.items()] + tried
                extra = f" ({'; '.join(failed)})" if failed and b is not self.baselines[0] else ""
                return replace(f, note=f"fallback to {b.name}: {reason}{extra}", extra={})
        # last resort: persistence fitted on the spot
        p = Persistence().fit(history)
        f = p.predict(history, horizon=horizon, quantiles=quantiles)
        extra = f" ({'; '.join(tried)})" if tried else ""
        return replace(f, note=f"fallback to persistence: {reason}{extra}", extra={})
