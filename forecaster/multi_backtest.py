"""Rolling-origin backtest of every model on every series of a multi-series file (issue 43).

The protocol is :mod:`forecaster.backtest`'s, per series: each model is fitted on the steps before
``test_start`` and forecasts leads 1..``horizon`` at origins every ``step`` minutes, each from the
steps strictly before it.  The fleet model (``lstm_global``, and its ablation
``lstm_global_no_recurrent``) is fitted once on every series before ``test_start`` and answers every
series and origin in one call; every other model is fitted on each series alone.

Scores: per series, the single-series backtest's metrics (:func:`forecaster.backtest.compute_metrics`),
and, to compare series of any size, the P50 MAE and the pinball loss at each level divided by the
series' mean over its training part; their median and mean over series per model.  A series with no
load before ``test_start`` has no scale and is left out of the scaled scores (and counted).

Outputs (:func:`write_multi_outputs`): ``forecasts.csv`` (series, origin, target, model, p10..p99),
``metrics.json`` (the scaled summary per model and every series' own metrics) and ``per_series.csv``.
"""
from __future__ import annotations

import json
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from forecaster.backtest import (COLUMNS, LEVELS, TIME_FMT, BacktestResult, _atomic_write, _in_sample_scale,
                                 compute_metrics, origins_for, run_backtest)
from forecaster.global_lstm.panel import Panel

GLOBAL_MODELS = ("lstm_global", "lstm_global_no_recurrent")
SCORES = ("mae", *(f"pinball_{c}" for c in COLUMNS))


@dataclass
class MultiResult:
    test_start: pd.Timestamp
    origins: pd.DatetimeIndex
    horizon: int
    step_min: int
    names: tuple[str, ...]
    actual: np.ndarray                      # (n_series, n_origins, horizon)
    scale: np.ndarray                       # (n_series,) training mean
    preds: dict[str, np.ndarray] = field(default_factory=dict)  # model -> (n_series, n_origins, horizon, levels)
    fit_seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)  # model -> series -> why
    metrics: dict = field(default_factory=dict)


def make_global(name: str, quick: bool, horizon_min: int):
    """The fleet model by name (``quick``: tiny, for smoke runs)."""
    from forecaster.global_lstm import GlobalLSTM, fleet_config, tiny_fleet_config

    recurrent = name == "lstm_global"
    cfg = tiny_fleet_config(recurrent=recurrent, epochs=4) if quick else fleet_config(recurrent=recurrent)
    return GlobalLSTM(cfg, horizon_min=horizon_min)


def _actuals(panel: Panel, origins: pd.DatetimeIndex, horizon: int) -> np.ndarray:
    pos = panel.index.get_indexer(origins)
    return panel.values[:, pos[:, None] + np.arange(horizon)[None, :]]


def _run_global(res: MultiResult, panel: Panel, name: str, quick: bool, factory: Callable | None) -> None:
    model = factory(name) if factory is not None else make_global(name, quick, res.horizon * res.step_min)
    t = time.perf_counter()
    try:
        model.fit(panel.before(res.test_start))
        res.preds[name] = model.predict_panel(panel, res.origins, horizon=res.horizon)
    except ValueError as err:  # too little history for its window: said for every series
        res.skipped[name] = {s: str(err) for s in res.names}
        return
    res.fit_seconds[name] = time.perf_counter() - t
    missing = ~np.isfinite(res.preds[name]).all(axis=(1, 2, 3))
    if missing.any():
        res.skipped[name] = {res.names[i]: "no observed step in the day before some origin"
                             for i in np.flatnonzero(missing)}


def _run_per_series(res: MultiResult, panel: Panel, names: Sequence[str], quick: bool) -> None:
    from forecaster.catalogue import make_models

    n, k, H = res.actual.shape
    for name in names:
        res.preds[name] = np.full((n, k, H, len(LEVELS)), np.nan)
        res.fit_seconds[name] = 0.0
    for i in range(n):
        frame = panel.frame(i)
        for model in make_models(list(names), quick, progress=False):
            try:
                with _quiet():  # a series with no load has no WAPE (0/0): None in its metrics, not a warning
                    one = run_backtest(frame, res.test_start, [model], horizon=H, step=_step(res), progress=False)
            except Exception as err:  # noqa: BLE001 - one model failing on one series is a row of the report
                one, why = None, f"{type(err).__name__}: {err}"
            if one is None or model.name not in one.preds:
                res.skipped.setdefault(model.name, {})[res.names[i]] = why if one is None else \
                    one.skipped.get(model.name, "no forecast")
                continue
            res.preds[model.name][i] = one.preds[model.name]
            res.fit_seconds[model.name] += one.fit_seconds.get(model.name, 0.0)


def _step(res: MultiResult) -> int:
    if len(res.origins) < 2:
        return res.step_min
    return int((res.origins[1] - res.origins[0]) / pd.Timedelta(minutes=1))


def run_multi_backtest(panel: Panel, test_start, models: Sequence[str], horizon: int, step: int,
                       quick: bool = False, global_factory: Callable | None = None) -> MultiResult:
    """Every model on every series of ``panel``; ``horizon`` in the panel's steps, ``step`` (between
    origins) in minutes.  ``global_factory(name)``: the fleet model to use (tests, benches)."""
    T = pd.Timestamp(test_start)
    if not (panel.index[0] < T <= panel.index[-1]):
        raise ValueError(f"the test start {T} must lie inside the series ({panel.index[0]} .. {panel.index[-1]})")
    origins = origins_for(panel.index, T, horizon, step, panel.step_min)
    if len(origins) == 0:
        raise ValueError(f"no complete {horizon * panel.step_min}-minute forecast fits after the test start {T}")
    train = panel.before(T)
    with np.errstate(invalid="ignore"), _quiet():
        scale = np.nan_to_num(np.nanmean(train.values, axis=1))
    res = MultiResult(T, origins, horizon, panel.step_min, panel.names, _actuals(panel, origins, horizon), scale)
    for name in [m for m in models if m in GLOBAL_MODELS]:
        _run_global(res, panel, name, quick, global_factory)
    _run_per_series(res, panel, [m for m in models if m not in GLOBAL_MODELS], quick)
    res.metrics = multi_metrics(res, train)
    return res


@contextmanager
def _quiet() -> Iterator[None]:
    """Silences numpy's 'mean of empty slice' for a series with no values at all (its score is NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def scaled_scores(p: np.ndarray, actual: np.ndarray, scale: np.ndarray) -> dict[str, np.ndarray]:
    """Per series: P50 MAE and pinball per level over every (origin, lead) with a known actual and
    forecast, divided by ``scale`` (NaN where the scale is 0 or no point is known)."""
    ok = np.isfinite(actual) & np.isfinite(p).all(axis=-1)
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"), _quiet():
        err = np.where(ok, np.abs(p[..., 1] - actual), np.nan)
        out["mae"] = np.nanmean(err.reshape(len(p), -1), axis=1)
        for j, (c, q) in enumerate(zip(COLUMNS, LEVELS)):
            d = actual - p[..., j]
            loss = np.where(ok, np.maximum(q * d, (q - 1) * d), np.nan)
            out[f"pinball_{c}"] = np.nanmean(loss.reshape(len(p), -1), axis=1)
        div = np.where(scale > 0, scale, np.nan)
        return {k: v / div for k, v in out.items()}


def _stat(v: np.ndarray, how) -> float | None:
    v = v[np.isfinite(v)]
    return None if not len(v) else round(float(how(v)), 5)


def multi_metrics(res: MultiResult, train: Panel) -> dict:
    """The scaled summary per model (median and mean over series) and every series' own metrics."""
    out: dict = {"test_start": res.test_start.strftime(TIME_FMT), "origins": len(res.origins),
                 "horizon": res.horizon, "resolution_min": res.step_min, "series": len(res.names),
                 "series_without_training_load": int((res.scale <= 0).sum()), "models": {}, "per_series": {}}
    for name, p in res.preds.items():
        sc = scaled_scores(p, res.actual, res.scale)
        out["models"][name] = {
            "median_scaled": {k: _stat(v, np.median) for k, v in sc.items()},
            "mean_scaled": {k: _stat(v, np.mean) for k, v in sc.items()},
            "series_scored": int(np.isfinite(sc["mae"]).sum()),
            "series_skipped": len(res.skipped.get(name, {})),
            "fit_seconds": round(res.fit_seconds[name], 2) if name in res.fit_seconds else None,
        }
    base = {k: v["median_scaled"]["mae"] for k, v in out["models"].items()
            if not k.startswith("lstm") and v["median_scaled"]["mae"] is not None}
    if base:
        best = min(base, key=base.get)
        out["best_baseline"] = {"model": best, "median_scaled_mae": base[best]}
    for i, s in enumerate(res.names):
        one = BacktestResult(res.test_start, res.origins, res.horizon, res.actual[i],
                             preds={k: v[i] for k, v in res.preds.items() if np.isfinite(v[i]).any()},
                             train_scale=_in_sample_scale(pd.Series(train.values[i]), res.step_min),
                             step_min=res.step_min,
                             skipped={k: v[s] for k, v in res.skipped.items() if s in v})
        with _quiet():  # a series with no load has no WAPE (0/0): None in its metrics, not a warning
            out["per_series"][s] = compute_metrics(one)
    out["skipped"] = {k: dict(list(v.items())[:20]) for k, v in res.skipped.items()}  # the first 20 per model
    return out


# ---------------------------------------------------------------- outputs
def forecasts_frame(res: MultiResult) -> pd.DataFrame:
    """One row per series, origin, lead and model: series, origin, target, model, p10..p99."""
    n, k, H = res.actual.shape
    origin = np.asarray(res.origins.strftime(TIME_FMT))
    leads = (np.arange(H) * res.step_min).astype("timedelta64[m]")
    target = np.asarray(pd.DatetimeIndex((res.origins.to_numpy()[:, None] + leads[None, :]).ravel())
                        .strftime(TIME_FMT))
    series = np.repeat(np.asarray(res.names, dtype=object), k * H)
    o_col = np.tile(np.repeat(origin, H), n)
    t_col = np.tile(target, n)
    parts = [pd.DataFrame({"series": series, "origin": o_col, "target": t_col, "model": name,
                           **{c: np.round(p[..., j].ravel(), 3) for j, c in enumerate(COLUMNS)}})
             for name, p in res.preds.items()]
    if not parts:
        return pd.DataFrame(columns=["series", "origin", "target", "model", *COLUMNS])
    return pd.concat(parts, ignore_index=True)


def per_series_frame(res: MultiResult) -> pd.DataFrame:
    """Scaled scores per series and model (the rows the medians are taken over)."""
    rows = []
    for name, p in res.preds.items():
        sc = scaled_scores(p, res.actual, res.scale)
        rows.append(pd.DataFrame({"series": res.names, "model": name, "train_mean": np.round(res.scale, 4),
                                  **{f"scaled_{k}": np.round(v, 5) for k, v in sc.items()}}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def write_multi_outputs(res: MultiResult, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"forecasts": out / "forecasts.csv", "metrics": out / "metrics.json",
             "per_series": out / "per_series.csv"}
    _atomic_write(paths["forecasts"], lambda tmp: forecasts_frame(res).to_csv(tmp, index=False))
    _atomic_write(paths["per_series"], lambda tmp: per_series_frame(res).to_csv(tmp, index=False))
    text = json.dumps(res.metrics, indent=2, allow_nan=False) + "\n"
    _atomic_write(paths["metrics"], lambda tmp: tmp.write_text(text))
    return paths


def multi_table(metrics: dict) -> str:
    """Median (and mean) over series of the scaled scores, one row per model, best median MAE first."""
    head = ("model", "series", "med MAE", "mean MAE", "med p50", "med p90", "med p95", "med p99", "fit s")
    rows = [head]
    f = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
    order = sorted(metrics["models"].items(), key=lambda kv: kv[1]["median_scaled"]["mae"] or np.inf)
    for name, m in order:
        md, mn = m["median_scaled"], m["mean_scaled"]
        rows.append((name, str(m["series_scored"]), f(md["mae"]), f(mn["mae"]), f(md["pinball_p50"]),
                     f(md["pinball_p90"]), f(md["pinball_p95"]), f(md["pinball_p99"]),
                     "-" if m["fit_seconds"] is None else f"{m['fit_seconds']:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
                     for r in rows)


def multi_summary(metrics: dict) -> str:
    """What the table means, in words: scores are per series over its training mean."""
    lines = [f"{metrics['series']} series, {metrics['origins']} origins x {metrics['horizon']} leads of "
             f"{metrics['resolution_min']} min; scores per series divided by its mean before the test start"]
    if metrics["series_without_training_load"]:
        lines.append(f"{metrics['series_without_training_load']} series had no load before the test start: "
                     "forecast, but not in the scaled scores")
    bb = metrics.get("best_baseline")
    for name, m in sorted(metrics["models"].items()):
        ours = m["median_scaled"]["mae"]
        if name.startswith("lstm") and bb and ours is not None and bb["median_scaled_mae"]:
            lines.append(f"{name}: median scaled MAE {ours:.4f} = {ours / bb['median_scaled_mae']:.3f}x the best "
                         f"baseline {bb['model']} ({bb['median_scaled_mae']:.4f})")
        if m["series_skipped"]:
            lines.append(f"{name}: no forecast for {m['series_skipped']} series (metrics.json names them)")
    return "\n".join(lines)
