"""Baselines on the one model protocol: what an analyst gets from numpy and
statsmodels in an afternoon.

* :class:`Persistence` -- the last observed minute, repeated.
* :class:`SeasonalNaive` -- the same minute one day (``period=1440``) or one week
  (``period=10080``) before.
* :class:`HoltWinters` -- additive damped Holt-Winters (ETS(A,Ad,A)) on log load with
  a daily season, parameters estimated by statsmodels; afterwards the state is
  advanced through new observations by the ETS recursions, never refitted.
* :class:`UCFourier` -- statsmodels ``UnobservedComponents`` on log load: local
  level + AR(2) + daily Fourier terms (6 harmonics) as regressors; new
  observations are folded in with ``results.extend`` (a Kalman filter update),
  never refitted.  (On the Azure split AR(2) beat AR(1), no AR, 3 or 10 harmonics
  and a local linear trend.)

Every baseline gives P10/P50/P90: the naive ones and Holt-Winters from empirical
quantiles of their own log errors per lead on the fit history, UC from its
Gaussian predictive distribution in log space.  ``log1p`` is used throughout so
that zero-load minutes are fine.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import pandas as pd

from forecaster.bands import MAX_LEAD, EmpiricalBands, ffill, lead_errors, sample_origins
from forecaster.base import (
    DAY,
    DEFAULT_QUANTILES,
    MINUTE,
    WEEK,
    BaseForecaster,
    Forecast,
    InsufficientHistory,
    minute_series,
    monotone_quantiles,
    per_step,
    resolution,
)

# ----------------------------------------------------------------------- naive
class Persistence(BaseForecaster):
    """Last observed value (NaN minutes skipped)."""

    name = "persistence"
    version = "1"
    min_history = 1

    def __init__(self) -> None:
        self.bands = EmpiricalBands()

    def fit(self, history):
        v = minute_series(history).to_numpy(dtype=float)
        logv = np.log1p(np.maximum(v, 0))
        last = ffill(logv)
        o = sample_origins(len(logv), 1)
        if len(o):
            self.bands.fit(lead_errors(logv, o, np.repeat(last[o - 1][:, None], MAX_LEAD, axis=1)))
        return self

    @staticmethod
    def _last(v: np.ndarray) -> float:
        ok = np.flatnonzero(np.isfinite(v))
        if not len(ok):
            raise InsufficientHistory("persistence needs at least one observed minute")
        return float(v[ok[-1]])

    def predict(self, history, horizon=30, quantiles=DEFAULT_QUANTILES):
        s = minute_series(history)
        res = resolution(s)
        point = np.repeat(self._last(s.to_numpy(dtype=float)[-per_step(DAY, res):]), horizon)
        qs = self.bands.apply(point, quantiles)
        return Forecast(s.index[-1] + res * MINUTE, point, qs, self.name, self.version, step_min=res)


class SeasonalNaive(BaseForecaster):
    """The same minute one period ago (a missing minute: the mean of its neighbours).
    ``period`` is in minutes; on a coarser series it is that many minutes' worth of bins."""

    version = "1"

    def __init__(self, period: int = DAY) -> None:
        self.period = int(period)
        self.name = "seasonal_naive_day" if period == DAY else ("seasonal_naive_week" if period == WEEK
                                                                 else f"seasonal_naive_{period}")
        self.min_history = self.period
        self.bands = EmpiricalBands()

    def _points(self, v: np.ndarray, ends: np.ndarray, horizon: int, res: int = 1) -> np.ndarray:
        """Point forecasts for histories v[:e] (e in ends): (len(ends), horizon), in steps of res minutes."""
        idx = ends[:, None] + np.arange(horizon)[None, :] - per_step(self.period, res)
        base = np.where(idx >= 0, v[np.clip(idx, 0, len(v) - 1)], np.nan)
        bad = ~np.isfinite(base)
        near = per_step(15, res)
        if bad.any():  # neighbours within +-15 min one period ago, then the last value
            for r, c in zip(*np.nonzero(bad)):
                j = idx[r, c]
                lo, hi = max(j - near, 0), min(j + near + 1, ends[r])
                w = v[lo:hi] if hi > lo else np.array([])
                w = w[np.isfinite(w)]
                if len(w):
                    base[r, c] = w.mean()
                else:
                    prev = v[max(ends[r] - per_step(DAY, res), 0):ends[r]]
                    prev = prev[np.isfinite(prev)]
                    base[r, c] = prev[-1] if len(prev) else np.nan
        return base

    def fit(self, history):
        s = minute_series(history)
        v, res = s.to_numpy(dtype=float), resolution(s)
        o = sample_origins(len(v), per_step(self.period, res))
        if len(o):
            pts = self._points(v, o, MAX_LEAD, res)
            self.bands.fit(lead_errors(np.log1p(np.maximum(v, 0)), o, np.log1p(np.maximum(pts, 0))))
        return self

    def predict(self, history, horizon=30, quantiles=DEFAULT_QUANTILES):
        s = minute_series(history)
        res = resolution(s)
        period = per_step(self.period, res)
        if len(s) < period:
            raise InsufficientHistory(f"{self.name} needs {self.period} minutes of history, got {len(s) * res}")
        v = s.to_numpy(dtype=float)[-(period + per_step(DAY, res)):]
        point = self._points(v, np.array([len(v)]), horizon, res)[0]
        if not np.isfinite(point).all():
            raise InsufficientHistory(f"{self.name}: no observed minutes one period back")
        qs = self.bands.apply(point, quantiles)
        return Forecast(s.index[-1] + res * MINUTE, point, qs, self.name, self.version, step_min=res)


# -------------------------------------------------------- stateful (HW and UC)
class _Stateful(BaseForecaster):
    """Keeps the filter state at the fit end and at the last answered origin, and
    advances it through the minutes of each new history that lie beyond it.  Only
    the values in the history passed to ``predict`` are ever read past the fit end,
    so an origin's forecast never sees data after it."""

    def _reset_running(self) -> None:
        self._run_time = self._fit_time
        self._run_state = self._fit_state
        self._run_last = self._fit_last

    def _state_for(self, s: pd.Series):
        end = s.index[-1]
        if end < self._fit_time:
            return self._state_from_scratch(s)
        if not (self._run_time <= end):
            self._reset_running()
        elif self._run_time > self._fit_time:  # check the history agrees with what we consumed
            try:
                seen = s.at[self._run_time]
            except KeyError:
                seen = np.nan
            if not (np.isnan(seen) and np.isnan(self._run_last)) and seen != self._run_last:
                self._reset_running()
        start = self._run_time + self.res * MINUTE
        new = s.loc[start:end] if end >= start else s.iloc[:0]
        if len(new) and new.index[0] != start:  # gap between the state and the history: NaN-fill
            new = new.reindex(pd.date_range(start, end, freq=f"{self.res}min"))
        if len(new):
            self._run_state = self._advance(self._run_state, new)
            self._run_time = end
            self._run_last = float(new.iloc[-1])
        return self._run_state

    def predict(self, history, horizon=30, quantiles=DEFAULT_QUANTILES):
        s = minute_series(history)
        if len(s) == 0:
            raise InsufficientHistory(f"{self.name}: empty history")
        if resolution(s) != self.res:
            raise ValueError(f"{self.name} was fitted on {self.res}-minute bins, asked about {resolution(s)}-minute ones")
        state = self._state_for(s)
        origin = s.index[-1] + self.res * MINUTE
        point, qs = self._forecast(state, origin, horizon, quantiles)
        return Forecast(origin, point, monotone_quantiles(qs), self.name, self.version, step_min=self.res)


def _log_clean(s: pd.Series) -> pd.Series:
    return np.log1p(s.clip(lower=0))


class HoltWinters(_Stateful):
    """Additive damped Holt-Winters on log1p load with a daily season (ETS(A,Ad,A)).

    With less than two days of history the season is dropped (damped Holt).
    ``max_days``: how much recent history the parameters are estimated on.
    """

    name = "holt_winters"
    version = "1"
    min_history = 120

    def __init__(self, max_days: int = 7, season: int = DAY) -> None:
        self.max_days = max_days
        self.m = season
        self.bands = EmpiricalBands()

    def fit(self, history):
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        s = minute_series(history)
        self.res = res = resolution(s)
        self.day = per_step(DAY, res)
        s = s.iloc[-self.max_days * self.day:]
        m = per_step(self.m, res)
        ls = _log_clean(s)
        filled = ls.interpolate(limit_direction="both")
        if filled.isna().all():
            raise InsufficientHistory("holt_winters: no observed minutes")
        seasonal = len(s) >= 2 * m
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = ExponentialSmoothing(
                filled.to_numpy(), trend="add", damped_trend=True,
                seasonal="add" if seasonal else None, seasonal_periods=m if seasonal else None,
                initialization_method="heuristic" if seasonal else "estimated",
            )
            res = mod.fit(optimized=True)
        p = res.params
        self.alpha = float(p["smoothing_level"])
        self.beta = float(p.get("smoothing_trend") or 0.0)
        self.gamma = float(p.get("smoothing_seasonal") or 0.0) if seasonal else 0.0
        self.phi = float(p.get("damping_trend") or 1.0)
        self.seasonal = seasonal
        # initial state one step before the first fitted bin; season by bin of day
        season = np.zeros(self.day)
        mods = self._bins_of_day(s.index)
        if seasonal:
            init = np.asarray(p["initial_seasons"], dtype=float)
            season[mods[:m]] = init
        state0 = (float(p["initial_level"]), float(p.get("initial_trend") or 0.0), season)
        # run the recursions over the fit data, collecting log errors per lead
        logv = ls.to_numpy(dtype=float)
        errs = []
        st = state0
        warm = 2 * m if seasonal else per_step(60, res)
        sample_every = max(1, (len(logv) - warm) // 2000)
        for i in range(len(logv)):
            if i >= warm and (i - warm) % sample_every == 0 and i + 1 < len(logv):
                fc = self._path(st, mods[i], MAX_LEAD)
                act = logv[i:i + MAX_LEAD]
                e = np.full(MAX_LEAD, np.nan)
                e[: len(act)] = act - fc[: len(act)]
                errs.append(e)
            st = self._step(st, logv[i], mods[i])
        if errs:
            self.bands.fit(np.array(errs))
        self._fit_time = s.index[-1]
        self._fit_state = st
        self._fit_last = float(s.iloc[-1])
        self._state0 = (state0, s.index[0])
        self._reset_running()
        return self

    def _bins_of_day(self, idx: pd.DatetimeIndex) -> np.ndarray:
        return ((idx.hour * 60 + idx.minute) // self.res).to_numpy()

    def _step(self, st, y: float, mod: int):
        lvl, tr, season = st
        if self.seasonal:
            sp = season[mod]
        else:
            sp = 0.0
        if not np.isfinite(y):
            return (lvl + self.phi * tr, self.phi * tr, season)
        new_l = self.alpha * (y - sp) + (1 - self.alpha) * (lvl + self.phi * tr)
        new_b = self.beta * (new_l - lvl) + (1 - self.beta) * self.phi * tr
        if self.seasonal:
            season = season.copy()
            season[mod] = self.gamma * (y - lvl - self.phi * tr) + (1 - self.gamma) * sp
        return (new_l, new_b, season)

    def _path(self, st, mod0: int, horizon: int) -> np.ndarray:
        lvl, tr, season = st
        h = np.arange(1, horizon + 1)
        damp = np.cumsum(self.phi ** h)
        sea = season[(mod0 + h - 1) % self.day] if self.seasonal else 0.0
        return lvl + damp * tr + sea

    def _advance(self, st, new: pd.Series):
        logv = np.log1p(np.maximum(new.to_numpy(dtype=float), 0))
        mods = self._bins_of_day(new.index)
        for y, m in zip(logv, mods):
            st = self._step(st, y, m)
        return st

    def _state_from_scratch(self, s: pd.Series):
        state0, t0 = self._state0
        if s.index[-1] < t0:
            raise InsufficientHistory("holt_winters: history ends before the fit window starts")
        return self._advance(state0, s.loc[t0:].reindex(pd.date_range(t0, s.index[-1], freq=f"{self.res}min")))

    def _forecast(self, st, origin: pd.Timestamp, horizon, quantiles):
        path = self._path(st, (origin.hour * 60 + origin.minute) // self.res, horizon)
        point = np.maximum(np.expm1(path), 0)
        return point, self.bands.apply(point, quantiles)


def fourier_terms(times: pd.DatetimeIndex, k: int, period_min: int = DAY) -> np.ndarray:
    """sin/cos of the first k harmonics of a period (in minutes since the epoch)."""
    t = (times.asi8 // 60_000_000_000).astype(np.int64) % period_min
    a = 2 * np.pi * t[:, None] * np.arange(1, k + 1)[None, :] / period_min
    return np.hstack([np.sin(a), np.cos(a)])


class UCFourier(_Stateful):
    """UnobservedComponents on log1p load: local level + AR(ar) + daily Fourier terms.

    Fitted once on the last ``max_days`` days of the history; afterwards each new
    observation is folded in with ``results.extend`` (Kalman filter), never refitted.
    """

    name = "uc_fourier"
    version = "1"
    min_history = 120

    def __init__(self, k: int = 6, max_days: int = 7, maxiter: int = 60, ar: int = 2) -> None:
        self.k = k
        self.ar = ar
        self.max_days = max_days
        self.maxiter = maxiter

    def _exog(self, idx: pd.DatetimeIndex) -> np.ndarray:
        return fourier_terms(idx, self.k)

    def fit(self, history):
        from statsmodels.tsa.statespace.structural import UnobservedComponents

        s = minute_series(history)
        self.res = resolution(s)
        s = s.iloc[-self.max_days * per_step(DAY, self.res):]
        ls = _log_clean(s)
        if ls.notna().sum() < 30:
            raise InsufficientHistory("uc_fourier: needs at least 30 observed minutes")
        use_exog = len(s) >= per_step(DAY, self.res) // 2
        self.use_exog = use_exog
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = UnobservedComponents(ls.to_numpy(), level="llevel", autoregressive=self.ar,
                                       exog=self._exog(s.index) if use_exog else None)
            res = mod.fit(disp=False, maxiter=self.maxiter)
        self._fit_res = res
        self._fit_time = s.index[-1]
        self._fit_state = res
        self._fit_last = float(s.iloc[-1])
        self._reset_running()
        return self

    def _advance(self, res, new: pd.Series):
        y = np.log1p(np.maximum(new.to_numpy(dtype=float), 0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return res.extend(y, exog=self._exog(new.index) if self.use_exog else None)

    def _state_from_scratch(self, s: pd.Series):
        s = s.iloc[-self.max_days * per_step(DAY, self.res):]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._fit_res.apply(_log_clean(s).to_numpy(),
                                       exog=self._exog(s.index) if self.use_exog else None)

    def _forecast(self, res, origin: pd.Timestamp, horizon, quantiles):
        from scipy.stats import norm

        idx = pd.date_range(origin, periods=horizon, freq=f"{self.res}min")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = res.get_forecast(horizon, exog=self._exog(idx) if self.use_exog else None)
        m = np.asarray(f.predicted_mean, dtype=float)
        sd = np.sqrt(np.maximum(np.asarray(f.var_pred_mean, dtype=float), 0))
        point = np.maximum(np.expm1(m), 0)
        qs = {float(q): np.maximum(np.expm1(m + norm.ppf(q) * sd), 0) for q in quantiles}
        return point, qs

