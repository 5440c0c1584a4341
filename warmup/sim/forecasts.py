"""Online forecasts for the predictive policy: trained before the test start, each
made from the minutes strictly before its own origin, computed in one batch.

The default model is the project's LSTM (``forecaster.lstm.LSTMForecaster``); the
forecaster's baselines can be named instead.  ``sim_seasonal_profile`` is a small
model of this module (a daily profile times the recent level, with empirical
error quantiles per lead): used by the fast tests and when no forecaster package
model can be trained; it is never what the benchmark counts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmcast.resolution import resolution_of, steps_for

DEFAULT_LEVELS: tuple[float, ...] = (0.1, 0.5, 0.9)
DAY = 1440


@dataclass
class ForecastBundle:
    """Forecast paths for every test minute: ``paths[q]`` has shape (minutes, horizon)."""

    model: str
    levels: tuple[float, ...]
    paths: dict[float, np.ndarray]
    fit_seconds: float = 0.0
    predict_seconds: float = 0.0
    note: str = ""
    extra: dict = field(default_factory=dict)


class SimSeasonalProfile:
    """A small, fast seasonal model (not the project's forecaster; see the module docstring).

    Forecast(t + h) = exp(level(t) + profile(minute of day of t + h)), where the profile is
    the mean log load per minute of day over the training days (smoothed over 5
    minutes) and level(t) the mean log deviation from it over the ``level_window``
    minutes before t.  Quantiles add empirical error quantiles per lead from the last
    training days.
    """

    name = "sim_seasonal_profile"
    version = "1"

    def __init__(self, level_window: int = 15, smooth: int = 5, error_days: int = 3) -> None:
        self.level_window = level_window
        self.smooth = smooth
        self.error_days = error_days
        self.profile: Optional[np.ndarray] = None
        self.errors: Optional[np.ndarray] = None

    @staticmethod
    def _log(v: np.ndarray) -> np.ndarray:
        return np.log1p(np.clip(v, 0, None))

    def fit(self, history: pd.Series | pd.DataFrame) -> "SimSeasonalProfile":
        s = history["requests"] if isinstance(history, pd.DataFrame) else history
        s = s.astype(float).asfreq("min")
        if len(s) < DAY:
            raise InputError(f"{self.name} needs at least a day of history, got {len(s)} minutes")
        log_load = self._log(s.to_numpy())
        mod = (s.index.hour * 60 + s.index.minute).to_numpy()
        prof = (pd.Series(log_load).groupby(mod).mean().reindex(range(DAY))
                .interpolate(limit_direction="both").to_numpy())
        k = self.smooth
        ext = np.concatenate([prof[-k:], prof, prof[:k]])
        prof = pd.Series(ext).rolling(k, center=True, min_periods=1).mean().to_numpy()[k:k + DAY]
        self.profile = prof
        self._start_mod = int(mod[0])
        # Errors per lead on the last training days.
        n = len(log_load)
        first = max(self.level_window, n - self.error_days * DAY)
        origins = np.arange(first, n - 30)
        if len(origins) > 0:
            pred = self._point_log(log_load, mod, origins, 30)
            idx = origins[:, None] + np.arange(30)[None, :]
            err = log_load[idx] - pred
            self.errors = err[np.isfinite(err).all(axis=1)]
        else:
            self.errors = np.zeros((1, 30))
        return self

    def _point_log(self, log_load: np.ndarray, mod: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        w = self.level_window
        win = origins[:, None] - w + np.arange(w)[None, :]
        dev = log_load[win] - self.profile[mod[win]]
        level = np.nanmean(np.where(np.isfinite(dev), dev, np.nan), axis=1)
        level = np.nan_to_num(level, nan=0.0)
        leads = (mod[origins][:, None] + np.arange(horizon)[None, :]) % DAY
        return level[:, None] + self.profile[leads]

    def predict_paths(self, history: pd.Series | pd.DataFrame, origins: Sequence[pd.Timestamp], horizon: int,
                      levels: Sequence[float]) -> dict[float, np.ndarray]:
        if self.profile is None:
            raise RuntimeError("fit first")
        s = history["requests"] if isinstance(history, pd.DataFrame) else history
        s = s.astype(float).asfreq("min")
        log_load = self._log(s.to_numpy())
        mod = (s.index.hour * 60 + s.index.minute).to_numpy()
        pos = s.index.searchsorted(pd.DatetimeIndex(origins))
        if (pos < self.level_window).any():
            raise InputError(f"{self.name}: origins need {self.level_window} minutes of history before them")
        # The level uses log_load[pos - w .. pos - 1] only: the minutes strictly before each origin.
        mod_ext = np.concatenate([mod, (mod[-1] + 1 + np.arange(horizon + 1)) % DAY])
        point = self._point_log(log_load, mod_ext, pos, horizon)
        out = {}
        for q in levels:
            e = np.quantile(self.errors[:, :horizon], q, axis=0) if len(self.errors) else np.zeros(horizon)
            out[q] = np.expm1(point + e[None, :]).clip(min=0)
        return out


def make_forecaster(name: str, progress: bool = False):
    name = name.lower()
    if name in ("lstm",):
        from forecaster.lstm import LSTMForecaster

        return LSTMForecaster(progress=progress)
    if name == "lstm_quick":  # one member, 8 epochs: for benches that fit per window on a small machine
        from forecaster.lstm import LSTMConfig, LSTMForecaster

        return LSTMForecaster(config=LSTMConfig(members=1, epochs=8, min_epochs=4, patience=3, max_origins=6000,
                                                refit_full=False), progress=progress)
    if name in ("sim_seasonal_profile", "profile"):
        return SimSeasonalProfile()
    from forecaster import baselines

    table = {
        "persistence": lambda: baselines.Persistence(),
        "seasonal_naive_day": lambda: baselines.SeasonalNaive(),
        "seasonal_naive": lambda: baselines.SeasonalNaive(),
        "holt_winters": lambda: baselines.HoltWinters(),
        "uc_fourier": lambda: baselines.UCFourier(),
        "uc": lambda: baselines.UCFourier(),
    }
    if name not in table:
        raise InputError(f"unknown forecaster {name!r}; use lstm, lstm_quick, uc_fourier, holt_winters, "
                         "seasonal_naive, persistence or sim_seasonal_profile")
    return table[name]()


def online_forecasts(model, frame: pd.DataFrame, test_start: pd.Timestamp, minutes: int, horizon: int = 30,
                     levels: Sequence[float] = DEFAULT_LEVELS, fit: bool = True) -> ForecastBundle:
    """Fit ``model`` on the frame before ``test_start`` (unless fit=False) and forecast at
    every test minute from the data strictly before it.  A coarse frame (5-minute bins,
    ``warmcast.resolution``) is forecast in its bins from the bins that have ended by each
    minute, and the paths are given per minute as that bin's share (see :func:`_binned_paths`)."""
    levels = tuple(sorted(set(float(q) for q in levels)))
    res = resolution_of(frame)
    if res > 1 and isinstance(model, SimSeasonalProfile):
        raise InputError(f"{model.name} works per minute; this series has {res}-minute bins: "
                         "use lstm, uc_fourier, holt_winters, seasonal_naive or persistence")
    train = frame[frame.index + pd.Timedelta(minutes=res) <= test_start]  # bins that ended before the test
    t0 = time.perf_counter()
    if fit:
        model.fit(train)
    fit_s = time.perf_counter() - t0
    origins = pd.date_range(test_start, periods=minutes, freq="min")
    if res > 1:
        t1 = time.perf_counter()
        paths = _binned_paths(model, frame, origins, horizon, levels, res)
        return ForecastBundle(model=getattr(model, "name", type(model).__name__), levels=levels, paths=paths,
                              fit_seconds=fit_s, predict_seconds=time.perf_counter() - t1)
    # Only data before the last origin is ever needed: cut the frame there, so nothing
    # after the test part can reach the model even by mistake.
    hist = frame[frame.index < origins[-1]]
    t1 = time.perf_counter()
    if hasattr(model, "predict_paths"):
        paths = model.predict_paths(hist, origins, horizon, levels)
    else:
        fcs = model.predict_origins(hist, list(origins), horizon=horizon, quantiles=levels)
        paths = {q: np.stack([np.asarray(f.quantile(q), dtype=float)[:horizon] for f in fcs]) for q in levels}
    pred_s = time.perf_counter() - t1
    name = getattr(model, "name", type(model).__name__)
    return ForecastBundle(model=name, levels=levels, paths=paths, fit_seconds=fit_s, predict_seconds=pred_s)


def _binned_paths(model, bins: pd.DataFrame, origins: pd.DatetimeIndex, horizon: int,
                  levels: tuple[float, ...], res: int) -> dict[float, np.ndarray]:
    """Per-minute paths from forecasts of ``res``-minute bins.  At minute t the newest forecast is
    made at the start of t's bin from the bins before it (all ended by then); minute t + h gets
    1/res of the forecast of the bin it falls in (the fleet replays a bin spread evenly too)."""
    step = pd.Timedelta(minutes=res)
    b0 = bins.index[0]
    at = b0 + ((origins - b0) // step) * step  # the bin boundary at or before each minute
    starts = pd.DatetimeIndex(at.unique())
    leads = steps_for(horizon + res - 1, res)
    hist = bins[bins.index < starts[-1]]
    fcs = model.predict_origins(hist, list(starts), horizon=leads, quantiles=levels)
    row = starts.get_indexer(at)
    into = ((origins - at) // pd.Timedelta(minutes=1)).to_numpy()
    k = (into[:, None] + np.arange(horizon)[None, :]) // res
    out = {}
    for q in levels:
        per_bin = np.stack([np.asarray(f.quantile(q), dtype=float)[:leads] for f in fcs])
        out[q] = per_bin[row[:, None], k] / res
    return out
