"""One LSTM for the whole fleet: trained once across every series of a panel (deployments and
their clients), answering any series with enough history for its input window.

It is the per-deployment LSTM's network, heads, training loop, anchor and calibration
(:class:`forecaster.lstm.LSTMForecaster`, whose ``fit_rows`` it calls); what differs is where the
rows come from and how it answers:

* **Training rows** from a :class:`~forecaster.global_lstm.panel.Panel` in one vectorised pass
  (:mod:`forecaster.global_lstm.rows`): every series gives an equal share of ``max_origins``,
  each scaled to itself (log load minus the log of its own mean over the ``level_window`` steps
  before the origin: nothing at or after an origin is read), one time-ordered split for all.
* **Calendar inputs**: time of day always, day of week when the panel spans ``dow_min_days``
  (7 here: a fleet's training span is days, not the per-deployment default's two weeks).
* **Horizon** in minutes (``horizon_min``, 30): 30 steps on a per-minute series, 3 on 10-minute bins.
* **Answers**: :meth:`predict_batch` (the last window of many series ending at one time, one
  call, no per-series Python), :meth:`predict_panel` (every series at many origins, each from the
  steps strictly before it: backtests), and the per-series protocol inherited from the LSTM
  (``predict``, ``predict_origins``, ``predict_many``), which gives the same numbers.

Why a fleet model: a per-deployment model sees one series of a week; on its own ServeGen and
Azure ablations its recurrent part bought nothing (issue 43).  Many related series give the
recurrent part something to learn, and a new deployment a forecast on its first window.
"""
from __future__ import annotations

import time
import warnings
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from forecaster.base import DAY, MINUTE, InsufficientHistory, ceiling
from forecaster.global_lstm.panel import Panel
from forecaster.global_lstm.rows import CHUNK, features, outage_rows, stacked, training_rows
from forecaster.lstm.anchor import apply_anchor, recent_load
from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.features import lookback
from forecaster.lstm.model import LSTMForecaster, ceilings
from forecaster.lstm.network import torch_module
from forecaster.lstm.training import apply_scale, reproducible
from warmcast.forecast import Forecast, mean_from_quantiles


KIND = "lstm_global"  # the registry's artifact kind


def fleet_config(**overrides) -> LSTMConfig:
    """The fleet model's defaults: more origins than one deployment's model (many series share
    them), day-of-week inputs from a week of history, larger batches for the larger set.

    The outer levels are calibrated to their nominal coverage (``cal_margin`` 0, where the
    per-deployment model asks 2 points more): on the ServeGen development days (10-11, fitted on
    days 0-9) the margin's P99 at 99.5% coverage scored 0.0629 (median client) and 0.0244 (model
    totals) in scaled pinball loss, the nominal one 0.0256 and 0.0144; P95 0.0639 against 0.0587
    (clients), 0.0410 against 0.0428 (totals).  Many series on one set of factors leave little to
    allow for: the margin only widened the bands."""
    base = dict(window=48, max_origins=60_000, dow_min_days=7, epochs=16, min_epochs=6, patience=4,
                batch_size=1024, epoch_fraction=0.5, members=2, lr=4e-3, cal_margin=0.0)
    base.update(overrides)
    return LSTMConfig(**base)


def tiny_fleet_config(**overrides) -> LSTMConfig:
    """For tests: a few seconds on a handful of series."""
    return LSTMConfig.tiny(**{"dow_min_days": 7, "max_origins": 3000, **overrides})


def as_panel(series) -> Panel:
    """A panel from a Panel, a mapping name -> history, or a list of histories."""
    if isinstance(series, Panel):
        return series
    if isinstance(series, Mapping):
        return Panel.from_series(series)
    if isinstance(series, (list, tuple)):
        return Panel.from_series({f"series {i + 1}": h for i, h in enumerate(series)})
    return Panel.from_series({"series 1": series})


class GlobalLSTM(LSTMForecaster):
    """The fleet model; see the module docstring."""

    name = "lstm_global"

    def __init__(self, config: LSTMConfig | None = None, horizon_min: int = 30, progress: bool = False,
                 **overrides) -> None:
        super().__init__(config if config is not None else fleet_config(), progress=progress, **overrides)
        self.horizon_min = int(horizon_min)
        self.name = "lstm_global" if self.cfg.recurrent else "lstm_global_no_recurrent"

    # ------------------------------------------------------------ training
    def fit(self, series) -> "GlobalLSTM":
        """Fit once on every series of ``series`` (a Panel, a mapping or a list of histories):
        only the steps given are read, so pass the part before the first forecast origin."""
        panel = as_panel(series)
        cfg = self.cfg
        t0 = time.perf_counter()
        cfg.step_min = panel.step_min
        cfg.horizon = max(1, self.horizon_min // panel.step_min)
        cfg.use_dow = len(panel.index) * panel.step_min / DAY >= cfg.dow_min_days
        need = cfg.window + 20
        if len(panel.index) < need:
            raise InsufficientHistory(f"{self.name}: {len(panel.index)} steps of history are too few to train on "
                                      f"(at least {need}: the input window and 20 origins)")
        with reproducible(cfg.threads):
            try:
                data = training_rows(panel.values, panel.index, cfg)
            except ValueError as err:
                raise InsufficientHistory(f"{self.name}: {err}") from None
            summary = {"train_start": str(panel.index[0]), "train_end": str(panel.index[-1]),
                       "train_origins": int(len(data.tr)), "val_origins": int(len(data.va)),
                       "val_start": data.spans[0]["val_start"], "series_count": len(panel),
                       "step_min": panel.step_min, "use_dow": bool(cfg.use_dow)}
            self.fit_rows(data, summary)
        self.fit_seconds = time.perf_counter() - t0
        self.meta["fit_seconds"] = round(self.fit_seconds, 2)
        return self

    # ------------------------------------------------------------ artifacts
    def to_artifact(self) -> tuple[dict, dict]:
        """The LSTM's artifact, kind ``lstm_global`` (the registry loads it as this class)."""
        tensors, meta = super().to_artifact()
        return tensors, {**meta, "kind": KIND, "horizon_min": self.horizon_min}

    @classmethod
    def from_artifact(cls, tensors: Mapping, meta: Mapping) -> "GlobalLSTM":
        if meta.get("kind") != KIND:
            raise ValueError(f"artifact kind {meta.get('kind')!r} is not {KIND!r}")
        model = super().from_artifact(tensors, {**meta, "kind": "lstm"})
        model.horizon_min = int(meta.get("horizon_min", model.cfg.horizon * model.cfg.step_min))
        return model

    # ------------------------------------------------------------ answers as arrays
    def _levels_out(self, seq: np.ndarray, static: np.ndarray, level: np.ndarray, cap: np.ndarray,
                    horizon: int) -> np.ndarray:
        """(n, horizon, levels) forecasts of trained levels, as ``_forecasts`` computes them; a row
        whose level is unknown (nothing observed in its last day) is NaN."""
        torch = torch_module()
        levels = self.cfg.levels
        pred = apply_anchor(self._forward(torch.from_numpy(seq), torch.from_numpy(static)),
                            recent_load(seq, static), self.anchor, levels)
        pred = apply_scale(pred, self.scale, levels)[:, :horizon] + level[:, None, None]
        return np.clip(np.expm1(pred), 0.0, cap[:, None, None])

    def predict_batch(self, values: np.ndarray, last: pd.Timestamp, horizon: int | None = None) -> np.ndarray:
        """Forecasts for many series whose histories end at the same step ``last``: ``values`` (n,
        T) counts, NaN missing, any T (only the last ``lookback`` steps are read).  Returns (n,
        horizon, levels) in ``self.levels`` order; a row with nothing observed in its last day is NaN
        (the caller falls back for it).  One vectorised pass: a 1,000-series fleet is one call."""
        horizon = self.cfg.horizon if horizon is None else horizon
        self._check(horizon, self.cfg.levels)
        values = np.atleast_2d(np.asarray(values, dtype=float))
        need = lookback(self.cfg)
        rows = np.full((len(values), need), np.nan)
        tail = values[:, -need:]
        rows[:, need - tail.shape[1]:] = tail
        logv = np.log1p(outage_rows(rows))
        origin = pd.Timestamp(last) + self.cfg.step_min * MINUTE
        out = np.full((len(values), horizon, len(self.cfg.levels)), np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-missing row: its peak is NaN
            peak = np.nanmax(logv, axis=1)
        for a in range(0, len(values), CHUNK):
            block = logv[a:a + CHUNK]
            ends = (np.arange(len(block)) + 1) * need
            seq, static, level = features(block.ravel(), ends, pd.DatetimeIndex([origin] * len(block)), self.cfg)
            out[a:a + len(block)] = self._levels_out(seq, static, level, ceiling(peak[a:a + CHUNK]), horizon)
        return out

    def predict_panel(self, panel: Panel, origins: Sequence[pd.Timestamp], horizon: int | None = None) -> np.ndarray:
        """Every series of ``panel`` at every origin, each forecast from the steps strictly before
        its origin: (n_series, n_origins, horizon, levels), NaN where a series has nothing observed
        in the day before an origin.  Origins lie on the panel's grid (bin boundaries)."""
        horizon = self.cfg.horizon if horizon is None else horizon
        self._check(horizon, self.cfg.levels)
        if panel.step_min != self.cfg.step_min:
            raise ValueError(f"{self.name} was fitted on {self.cfg.step_min}-minute steps; this panel has "
                             f"{panel.step_min}-minute bins")
        origins = pd.DatetimeIndex(origins)
        step = self.cfg.step_min * MINUTE
        pos = ((origins - panel.index[0]) // step).to_numpy().astype(np.int64)
        if (pos < 1).any():
            raise InsufficientHistory(f"{self.name}: an origin has no history before it")
        vals = panel.values
        if pos.max() > vals.shape[1]:  # origins past the end: missing steps (never read past an origin)
            vals = np.hstack([vals, np.full((len(vals), int(pos.max()) - vals.shape[1]), np.nan)])
        logv = np.log1p(outage_rows(vals, int(pos.min())))  # the outage rule reads only steps before every origin
        flat, stride = stacked(logv, self.cfg)
        pad = stride - logv.shape[1]
        n, k = len(panel), len(origins)
        ends = (np.arange(n)[:, None] * stride + pad + pos[None, :]).ravel()
        times = pd.DatetimeIndex(np.tile(origins.to_numpy(), n))
        cap = ceilings(flat, ends, lookback(self.cfg))
        out = np.empty((len(ends), horizon, len(self.cfg.levels)))
        for a in range(0, len(ends), CHUNK):
            seq, static, level = features(flat, ends[a:a + CHUNK], times[a:a + CHUNK], self.cfg)
            out[a:a + CHUNK] = self._levels_out(seq, static, level, cap[a:a + CHUNK], horizon)
        return out.reshape(n, k, horizon, len(self.cfg.levels))

    def forecasts(self, names: Sequence[str], arr: np.ndarray, origin: pd.Timestamp) -> dict[str, Forecast]:
        """``predict_batch``'s array as Forecast objects (the serving shape), rows with a forecast only."""
        levels = self.cfg.levels
        out = {}
        for name, row in zip(names, arr):
            if np.isfinite(row).all():
                out[name] = Forecast(pd.Timestamp(origin), mean_from_quantiles(levels, row),
                                     {q: row[:, j] for j, q in enumerate(levels)}, self.name, self.version,
                                     step_min=self.cfg.step_min)
        return out
