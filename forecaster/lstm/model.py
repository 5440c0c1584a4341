"""The LSTM forecaster: next 30 minutes of load at P10, P50, P90, P95 and P99.

Shape of the model
------------------
* **Per-series scaling** and **inputs**: see :mod:`forecaster.lstm.features`. An
  LSTM reads the last ``window`` minutes (scaled load, missing mask, the day before,
  tokens when the history has them); a head adds per-lead seasonal profiles (one
  day and one week before, the mean of the last ``profile_days`` days), level
  ratios, recent weighted levels and calendar features (day of week only when the
  history spans ``dow_min_days`` = 14 days or more).
* **Outputs**: a head per lead and trained level (:mod:`forecaster.lstm.network`),
  non-crossing by construction, trained with pinball loss on the scaled log target.
  A level between two trained levels (``LSTMConfig.levels``) is interpolated between
  their heads; a level outside them is refused, never extrapolated.
* **Training** (:mod:`forecaster.lstm.training`): one origin per minute of the last
  ``max_train_days``, a time-ordered split, an ensemble of ``members`` seeds with
  early stopping, a refit on all origins for the chosen epoch count, then a
  conformal calibration factor per level and lead bucket on the validation split
  (held back from the early-stopping fit; never the test window). Reproducible bit for bit.
* **Ceiling**: no level above ``CEILING`` times the highest load in the lookback (a week).  The
  heads work in log space, so a spread learned from a series with outage gaps (zero runs of
  hours in a series of a million requests per bin: ServeGen m-mid) turns into P99s of 1e22
  once exponentiated; ten times the week's peak is a bound no real forecast here reaches (a x3
  shift, x4 spikes) and no planner can use anything above.
* **Several series** (a global model, :mod:`forecaster.lstm.dataset`): ``fit`` also takes a
  list of histories; each gives its share of the origins and its own split, scaled by its
  own level, so series of any size train one model.

Online use
----------
``fit(history)`` then ``predict(history, horizon=30)``, ``predict_many({name:
history})`` (one batched pass for many deployments) or ``predict_origins(history,
origins)`` (many origins of one series, each from the minutes strictly before it).
``to_artifact()`` / ``from_artifact()``: see :mod:`forecaster.lstm.artifact`.
"""
from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import asdict
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from forecaster.base import CEILING, MINUTE, BaseForecaster, InsufficientHistory, ceiling, resolution

from warmcast.forecast import DEFAULT_QUANTILES, Forecast, mean_from_quantiles
from forecaster.lstm import artifact, dataset, tails
from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.anchor import anchor_weights, apply_anchor, recent_load
from forecaster.lstm.features import build_features, lookback, series_arrays
from forecaster.lstm.network import torch_module
from forecaster.lstm.members import train_members
from forecaster.lstm.training import apply_scale, calibrate, log_metrics, reproducible

class LSTMForecaster(BaseForecaster):
    """Global LSTM with quantile heads; see the module docstring."""

    name = "lstm"
    min_history = 60

    def __init__(self, config: LSTMConfig | None = None, progress: bool = True, **overrides) -> None:
        cfg = copy.deepcopy(config) if config is not None else LSTMConfig()
        if overrides:
            cfg = LSTMConfig(**{**asdict(cfg), **overrides})
        cfg.levels = tuple(sorted(float(q) for q in cfg.levels))
        if 0.5 not in cfg.levels:
            raise ValueError("levels must include 0.5")
        self.cfg = cfg
        if not cfg.recurrent:  # the ablation is reported beside the model, never mistaken for it
            self.name = "lstm_no_recurrent"
        self.progress = progress
        self.nets: list = []
        self.scale: dict[str, list[float]] = {}  # calibration factors per level and lead (training.calibrate)
        self.anchor: list[float] | None = None  # weight on the net's P50 per lead (anchor.py); None: 1
        self.version = "0"
        self.meta: dict = {}
        self.fit_seconds = 0.0
        self.primed: dict[tuple, Forecast] = {}   # answers a batched call made ahead (prime), by their tail

    @property
    def levels(self) -> tuple[float, ...]:
        """The levels its heads were trained for: it answers these, and levels between them by
        interpolation; it refuses any outside them."""
        return self.cfg.levels

    # ------------------------------------------------------------ training
    def fit(self, history) -> "LSTMForecaster":
        """Fit on one history, or on a list of them (a global model: each series gives its own
        origins, scaled by its own level, and its own split; :mod:`forecaster.lstm.dataset`)."""
        cfg = self.cfg
        t_start = time.perf_counter()
        with reproducible(cfg.threads):
            histories = dataset.as_histories(history)
            dataset.settle(histories, cfg)
            data = dataset.build(histories, cfg)
            self.fit_rows(data, dataset.summary(data))
        self.fit_seconds = time.perf_counter() - t_start
        self.meta["fit_seconds"] = round(self.fit_seconds, 2)
        return self

    def fit_rows(self, data: dataset.TrainingData, summary: dict) -> None:
        """Train on stacked rows (``cfg.step_min`` and ``cfg.use_dow`` set): the members, the anchor and
        the calibration.  Called inside ``reproducible``; shared with the fleet model
        (:mod:`forecaster.global_lstm`), which builds its rows from a panel of many series at once."""
        from tqdm.auto import tqdm

        torch = torch_module()
        cfg = self.cfg
        tr, va, target = data.tr, data.va, data.target
        tensors = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in (data.seq, data.static, target))
        budget = (None if cfg.time_budget_s is None
                  else cfg.time_budget_s / max(cfg.members, 1) / (2 if cfg.refit_full else 1))
        bar = tqdm(total=cfg.members * cfg.epochs, desc=f"training {self.name}", unit="epoch",
                   disable=not self.progress, leave=False)
        done = train_members(tensors, tr, va, cfg, budget, bar)
        bar.close()
        runs = [d.run for d in done]
        refits = [d.refit for d in done if d.refit is not None]
        self.nets = [r.net for r in runs]
        val_pred = self._forward(tensors[0][va], tensors[1][va])
        recent = recent_load(data.seq[va], data.static[va])
        self.anchor = anchor_weights(val_pred, target[va], recent, cfg.levels) if cfg.anchor else None
        val_pred = apply_anchor(val_pred, recent, self.anchor, cfg.levels)
        self.scale = (calibrate(val_pred, target[va], cfg.levels, cfg.cal_margin, cfg.cal_lead_edges)
                      if cfg.calibrate else {})
        if refits:  # the calibration factors stay those measured out of sample above
            self.nets = [r.net for r in refits]
        self.meta = {
            **summary,
            "members": [{"member": m, "best_val_pinball": r.best_val, "epochs": r.epochs,
                         "best_epoch": r.best_epoch} for m, r in enumerate(runs)],
            "val_metrics": log_metrics(apply_scale(val_pred, self.scale, cfg.levels), target[va], cfg.levels,
                                       self.scale),
            "has_tokens": bool(np.any(data.seq[:, :, 5])),
            **self._budget_meta(runs, refits),
        }
        self.version = self.version if self.version != "0" else "1"

    def _budget_meta(self, runs, refits) -> dict:
        """Recorded only where a time budget was set; ``fired`` names the runs it cut short."""
        if self.cfg.time_budget_s is None:
            return {}
        fired = ([f"member {m} early-stopping run" for m, r in enumerate(runs) if r.budget_fired]
                 + [f"member {m} refit" for m, r in enumerate(refits) if r.budget_fired])
        return {"time_budget": {"budget_s": self.cfg.time_budget_s, "fired": fired}}

    def _forward(self, Xs, Xf) -> np.ndarray:
        torch = torch_module()
        with torch.inference_mode():
            return torch.stack([net(Xs, Xf) for net in self.nets]).mean(0).numpy()

    # ------------------------------------------------------------ inference
    def _check(self, horizon: int, quantiles: Sequence[float]) -> None:
        if not self.nets:
            raise RuntimeError("LSTMForecaster is not fitted (call fit or load an artifact)")
        if horizon > self.cfg.horizon:
            raise ValueError(f"lstm was trained for {self.cfg.horizon} leads, asked for {horizon}")
        lo, hi = self.cfg.levels[0], self.cfg.levels[-1]
        outside = [float(q) for q in quantiles if not lo <= float(q) <= hi]
        if outside:
            raise ValueError(f"lstm was trained for levels {list(self.cfg.levels)}; it cannot produce {outside} "
                             "(no extrapolation beyond the outer heads)")

    def _forecasts(self, seq, static, level, origins, horizon, quantiles, cap: np.ndarray) -> list[Forecast]:
        """Every trained level from its own head; a level between two heads (a simulator's
        quantile sweep) interpolated between them in log space; none above ``cap`` (per origin)."""
        torch = torch_module()
        levels = self.cfg.levels
        pred = apply_anchor(self._forward(torch.from_numpy(seq), torch.from_numpy(static)), recent_load(seq, static),
                            self.anchor, levels)
        pred = apply_scale(pred, self.scale, levels)
        pred = pred[:, :horizon] + level[:, None, None]
        # the mean from the trained heads only, so it is the same whichever levels were asked for
        # (it was the P50 head's values: issue 32, a "mean" always equal to the P50)
        means = np.minimum(mean_from_quantiles(levels, np.maximum(np.expm1(pred), 0.0)), cap[:, None])
        between = sorted({float(q) for q in quantiles} - set(levels))
        out_levels = sorted(set(levels) | set(between))
        if between:
            grid = np.array(levels)
            pred = np.stack([pred[..., levels.index(q)] if q in levels else _interp_level(pred, grid, q)
                             for q in out_levels], axis=-1)
        vals = np.clip(np.expm1(pred), 0.0, cap[:, None, None])
        return [Forecast(pd.Timestamp(o), means[i], {q: vals[i, :, j] for j, q in enumerate(out_levels)},
                         self.name, self.version, step_min=self.cfg.step_min) for i, o in enumerate(origins)]

    def _series(self, history, known_before: pd.Timestamp | None = None):
        """(series, log load, log tokens) of a history at the resolution the model was fitted on
        (``known_before``: the first origin; see ``features.series_arrays``)."""
        s, logv, logtok = series_arrays(history, known_before)
        if len(s) > 1 and resolution(s) != self.cfg.step_min:
            raise ValueError(f"lstm was fitted on {self.cfg.step_min}-minute steps; this history has "
                             f"{resolution(s)}-minute bins")
        return s, logv, logtok

    def _tail(self, hist, need: int) -> tuple[np.ndarray, np.ndarray | None, pd.Timestamp]:
        """(log load, log tokens or None, last time) of a non-empty history's last ``need`` steps, any shape."""
        s, logv, logtok = self._series(hist.iloc[-need:])
        return logv, logtok, s.index[-1]

    def predict(self, history, horizon: int = 30, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Forecast:
        self._check(horizon, quantiles)
        need = lookback(self.cfg)
        if len(history) == 0:
            raise InsufficientHistory("lstm: empty history")
        fast = tails.regular_counts(history, need, self.cfg.step_min)
        if fast is not None and self.primed:
            kept = self.primed.pop(_primed_key(fast, horizon, quantiles), None)
            if kept is not None:
                return kept
        if fast is not None:
            logv, logtok, last = np.log1p(fast[0]), None if fast[1] is None else np.log1p(fast[1]), fast[2]
        else:
            logv, logtok, last = self._tail(history, need)
        origin = last + self.cfg.step_min * MINUTE
        seq, static, level = build_features(logv, logtok, np.array([len(logv)]), pd.DatetimeIndex([origin]),
                                            self.cfg)
        if not np.isfinite(level).all():
            raise InsufficientHistory("lstm: no observed minute in the last day")
        return self._forecasts(seq, static, level, [origin], horizon, quantiles,
                               ceiling(np.nanmax(logv[-need:])[None]))[0]  # level is finite: a value is there

    def predict_origins(self, history, origins, horizon: int = 30,
                        quantiles: Sequence[float] = DEFAULT_QUANTILES) -> list[Forecast]:
        """One forecast per origin, each from the minutes of ``history`` strictly before it,
        in one batched pass."""
        self._check(horizon, quantiles)
        origins = pd.DatetimeIndex(origins)
        s, logv, logtok = self._series(history, origins.min() if len(origins) else None)
        # bins before the origin's: on a coarse series an origin inside a bin does not see that bin
        ends = ((origins - s.index[0]) // (self.cfg.step_min * MINUTE)).to_numpy().astype(np.int64)
        if (ends < 1).any():
            raise InsufficientHistory("lstm: an origin has no history before it")
        # an origin past the end of the history: pad NaN (never read past the origin anyway)
        if ends.max() > len(logv):
            pad = np.full(int(ends.max() - len(logv)), np.nan)
            logv = np.concatenate([logv, pad])
            logtok = None if logtok is None else np.concatenate([logtok, pad])
        seq, static, level = build_features(logv, logtok, ends, origins, self.cfg)
        if not np.isfinite(level).all():
            raise InsufficientHistory("lstm: an origin has no observed minute in the day before it")
        return self._forecasts(seq, static, level, origins, horizon, quantiles,
                               ceilings(logv, ends, lookback(self.cfg)))

    def predict_many(self, histories: Mapping[str, pd.Series | pd.DataFrame], horizon: int = 30,
                     quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, Forecast]:
        """Forecast many deployments in one batched forward pass.

        A deployment whose history cannot be used (empty, no observed minute in the
        last day) is left out of the answer; callers fall back for it.
        """
        self._check(horizon, quantiles)
        live = [(name, h) for name, h in histories.items() if len(h)]
        if not live:
            return {}
        need, n = lookback(self.cfg), len(live)
        # every series in its own row of `need` steps; the rows end to end make one feature pass
        vals, toks = np.full((n, need), np.nan), None
        counts = np.zeros(n, bool)  # rows read by tails.regular_counts: logged together below
        lasts = []
        for i, (_, hist) in enumerate(live):
            fast = tails.regular_counts(hist, need, self.cfg.step_min)
            y, tok, last = fast if fast is not None else self._tail(hist, need)
            counts[i] = fast is not None
            tails.put(vals, i, y)
            if tok is not None:
                toks = np.full((n, need), np.nan) if toks is None else toks
                tails.put(toks, i, tok)
            lasts.append(last)
        for rows in (vals, toks) if toks is not None else (vals,):
            tails.log_rows(rows, counts)
        ends = (np.arange(n) + 1) * need
        origins = pd.DatetimeIndex(lasts) + self.cfg.step_min * MINUTE
        seq, static, level = build_features(vals.ravel(), None if toks is None else toks.ravel(), ends, origins,
                                            self.cfg)
        keep = np.flatnonzero(np.isfinite(level))  # no observed minute in the last day: left out
        if not len(keep):
            return {}
        cap = ceiling(np.nanmax(vals[keep], axis=1))  # each row is its lookback; a kept row has a value
        fcs = self._forecasts(seq[keep], static[keep], level[keep], origins[keep], horizon, quantiles, cap)
        return {live[i][0]: f for i, f in zip(keep, fcs)}

    def prime(self, histories: Mapping[str, pd.Series | pd.DataFrame], horizon: int = 30,
              quantiles: Sequence[float] = DEFAULT_QUANTILES) -> int:
        """:meth:`predict_many` ahead of the one-by-one :meth:`predict` calls that follow (a shard's
        forecast step, issue 44): each answer is kept under the exact tail it was made from and
        handed to the ``predict`` of that tail, once; a history changed in between is forecast afresh.
        Returns the answers kept."""
        if len(self.primed) > 20_000:   # answers nobody asked for (a deployment that fell back): bounded
            self.primed.clear()
        kept = 0
        for name, f in self.predict_many(histories, horizon, quantiles).items():
            fast = tails.regular_counts(histories[name], lookback(self.cfg), self.cfg.step_min)
            if fast is not None:
                self.primed[_primed_key(fast, horizon, quantiles)] = f
                kept += 1
        return kept

    # ------------------------------------------------------------ artifacts
    def to_artifact(self) -> tuple[dict, dict]:
        """(tensors, metadata): flat name -> tensor dict and JSON-able metadata."""
        self._check(1, ())
        return artifact.to_artifact(self)

    @classmethod
    def from_artifact(cls, tensors: Mapping, meta: Mapping) -> "LSTMForecaster":
        model = cls(artifact.config_from_meta(meta), progress=False)
        model.nets = artifact.load_nets(model.cfg, tensors, int(meta["members"]))
        # one factor per level (older artifacts) or one per lead
        model.scale = {str(k): float(v) if isinstance(v, (int, float)) else [float(x) for x in v]
                       for k, v in dict(meta.get("band_scale", {})).items()}
        model.meta = dict(meta.get("training", {}))
        anchor = meta.get("anchor")  # older artifacts: none (the net's P50 as it is)
        model.anchor = None if anchor is None else [float(w) for w in anchor]
        return model


def _primed_key(fast: tuple, horizon: int, quantiles: Sequence[float]) -> tuple:
    """What a primed answer is kept under: the tail's last time and exact values, and what was asked."""
    y, tok, last = fast
    digest = hashlib.blake2b(np.ascontiguousarray(y).tobytes(), digest_size=16)
    if tok is not None:
        digest.update(np.ascontiguousarray(tok).tobytes())
    return pd.Timestamp(last), int(horizon), tuple(float(q) for q in quantiles), tok is None, digest.digest()


def ceilings(logv: np.ndarray, ends: np.ndarray, need: int) -> np.ndarray:
    """Per end e: :func:`ceiling` of the highest load in logv[e - need:e] (log1p; NaN = missing)."""
    peak = pd.Series(logv).rolling(need, min_periods=1).max().to_numpy()
    return ceiling(peak[np.clip(np.asarray(ends, dtype=np.int64) - 1, 0, len(peak) - 1)])


def _interp_level(pred: np.ndarray, grid: np.ndarray, q: float) -> np.ndarray:
    """pred (n, H, len(grid)) at level q, linear between the two trained levels around it."""
    j = int(np.searchsorted(grid, q))
    w = (q - grid[j - 1]) / (grid[j] - grid[j - 1])
    return pred[..., j - 1] + w * (pred[..., j] - pred[..., j - 1])
