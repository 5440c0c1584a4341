"""Rolling-origin backtest of every forecaster on one per-minute load log.

Protocol: each model is fitted on the minutes before ``test_start``; then at
origins every ``step`` minutes from ``test_start`` on, it forecasts leads
1..``horizon`` from the minutes strictly before that origin (``predict_origins``
receives the whole frame but each origin's forecast may only read what precedes
it; ``tests/forecaster/test_forecast_backtest.py::test_no_leakage`` checks this).  Origins run while the
last lead still lies inside the log.

Outputs (``write_outputs``): ``forecasts.csv`` (origin,target,model,p10,p50,p90,p95,p99),
``metrics.json`` (per model; see :func:`compute_metrics`) and ``forecast.png``.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from forecaster.backtest_table import table  # noqa: F401 - the CLI reads the table from here
from forecaster.base import DAY, minute_series, per_step, resolution
from warmcast.resolution import bin_label

# Every level a policy may provision for (forecaster.base.DEFAULT_QUANTILES); the columns of a
# prediction array in this order, so P10/P50/P90 stay at 0/1/2.
LEVELS = (0.1, 0.5, 0.9, 0.95, 0.99)
COLUMNS = tuple(f"p{round(q * 100)}" for q in LEVELS)
TIME_FMT = "%Y-%m-%d %H:%M:%S"


@dataclass
class BacktestResult:
    test_start: pd.Timestamp
    origins: pd.DatetimeIndex
    horizon: int
    actual: np.ndarray  # (n_origins, horizon), NaN where the log has no value
    preds: dict[str, np.ndarray] = field(default_factory=dict)  # model -> (n_origins, horizon, len(LEVELS))
    fit_seconds: dict[str, float] = field(default_factory=dict)
    predict_seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    train_scale: dict[str, float] = field(default_factory=dict)  # in-sample naive MAEs (MASE)
    metrics: dict = field(default_factory=dict)
    step_min: int = 1  # minutes per lead (the series' resolution); horizon and actuals are in these steps
    held_back: dict[str, dict] = field(default_factory=dict)  # model -> its own check on a held-back training slice


def origins_for(index: pd.DatetimeIndex, test_start: pd.Timestamp, horizon: int, step: int,
                res: int = 1) -> pd.DatetimeIndex:
    """Origins every ``step`` minutes from the first bin boundary at or after ``test_start`` while
    the last of ``horizon`` leads (of ``res`` minutes) lies in the index.  On a coarse series an
    origin is a bin boundary, so a forecast there reads only bins that have ended."""
    if step % res:
        raise ValueError(f"origins every {step} min do not fall on the series' {res}-minute bins; "
                         f"use a multiple of {res}")
    last = index[-1] - pd.Timedelta(minutes=(horizon - 1) * res)
    first = index[0] + np.ceil((test_start - index[0]) / pd.Timedelta(minutes=res)) * pd.Timedelta(minutes=res)
    if last < first:
        return pd.DatetimeIndex([])
    return pd.date_range(first, last, freq=f"{step}min")


def _in_sample_scale(train: pd.Series, res: int = 1) -> dict[str, float]:
    v = train.to_numpy(dtype=float)
    out = {}
    for name, lag in (("persistence", 1), ("seasonal_naive_day", per_step(DAY, res))):
        if len(v) > lag:
            d = np.abs(v[lag:] - v[:-lag])
            out[name] = float(np.nanmean(d)) if np.isfinite(d).any() else float("nan")
    return out


def run_backtest(frame: pd.DataFrame | pd.Series, test_start, models: Sequence, horizon: int = 30,
                 step: int = 10, progress: bool = True) -> BacktestResult:
    """Fit each model on the data before ``test_start`` and forecast every origin.  ``horizon`` is in
    the series' steps (minutes, or a coarser series' bins); ``step`` (between origins) in minutes."""
    from tqdm.auto import tqdm

    if isinstance(frame, pd.Series):
        frame = frame.to_frame("requests")
    s = minute_series(frame)
    if len(s) != len(frame):  # irregular frame: put every column on the regular grid
        frame = frame[~frame.index.duplicated(keep="last")].sort_index().reindex(s.index)
    r = resolution(s)
    T = pd.Timestamp(test_start)
    train = frame.loc[frame.index < T]
    if len(train) == 0:
        raise ValueError(f"no data before the test start {T}")
    origins = origins_for(frame.index, T, horizon, step, r)
    if len(origins) == 0:
        raise ValueError(f"no complete {horizon * r}-minute forecast fits after the test start {T}")
    pos = frame.index.get_indexer(origins)
    vals = s.to_numpy(dtype=float)
    actual = vals[pos[:, None] + np.arange(horizon)[None, :]]
    res = BacktestResult(T, origins, horizon, actual, train_scale=_in_sample_scale(train["requests"], r),
                         step_min=r)
    for model in models:
        name = model.name
        try:
            t = time.perf_counter()
            model.fit(train)
            res.fit_seconds[name] = time.perf_counter() - t
            check = getattr(model, "meta", {}).get("val_metrics")
            if check:  # calibration of every level on the slice of training data it held back
                res.held_back[name] = {k: v for k, v in check.items() if k != "band_scale"}  # factors: in the model
            t = time.perf_counter()
            fcs = _predict_all(model, frame, origins, horizon, progress)
            res.predict_seconds[name] = time.perf_counter() - t
        except ValueError as err:  # not enough history and the like: report, go on
            res.skipped[name] = str(err)
            continue
        arr = np.stack([np.stack([f.quantile(q)[:horizon] for q in LEVELS], axis=1) for f in fcs])
        res.preds[name] = arr
        notes = {f.note for f in fcs if f.note}
        if notes:
            res.notes[name] = "; ".join(sorted(notes))[:500]
    res.metrics = compute_metrics(res)
    return res


def _predict_all(model, frame, origins, horizon, progress):
    from tqdm.auto import tqdm

    if hasattr(model, "predict_origins"):
        # chunks so that the progress bar moves; each chunk is one batched call
        chunk = 64
        out = []
        for i in tqdm(range(0, len(origins), chunk), desc=f"backtest {model.name}", unit="x64 origins",
                      disable=not progress, leave=False):
            out += model.predict_origins(frame, origins[i:i + chunk], horizon=horizon, quantiles=LEVELS)
        return out
    idx = frame.index
    return [model.predict(frame.iloc[: int(idx.searchsorted(o))], horizon=horizon, quantiles=LEVELS)
            for o in tqdm(origins, desc=f"backtest {model.name}", disable=not progress, leave=False)]


def _pinball(y: np.ndarray, q: np.ndarray, level: float) -> np.ndarray:
    d = y - q
    return np.maximum(level * d, (level - 1) * d)


def _r(x: float, nd: int = 4):
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _ratio(a: float, b: float | None) -> float | None:
    """a / b rounded; None where b is missing or zero (a series a baseline forecasts exactly)."""
    return None if b is None or not b or not np.isfinite(b) else _r(a / b)


def _model_metrics(name: str, p: np.ndarray, res: BacktestResult, maes: dict[str, float]) -> dict:
    """The metrics of one model's predictions ``p`` (n_origins, horizon, len(LEVELS))."""
    y = res.actual
    m_ok = np.isfinite(y) & np.isfinite(p).all(axis=2)
    n_ok = bool(m_ok.any())
    e = np.where(m_ok, np.abs(p[..., 1] - y), np.nan)
    mae = maes[name]
    yy = np.where(m_ok, y, np.nan)
    inside = (p[..., 0] <= y) & (y <= p[..., 2])
    below90 = y <= p[..., 2]
    pin = {c: float(np.nanmean(np.where(m_ok, _pinball(y, p[..., i], q), np.nan))) for i, (c, q)
           in enumerate(zip(COLUMNS, LEVELS))}
    cover = {c: _r(float((y <= p[..., i])[m_ok].mean())) if n_ok else None for i, c in enumerate(COLUMNS)}
    n = int(m_ok.sum())
    rel = {b: _ratio(mae, maes.get(b)) for b in ("seasonal_naive_day", "persistence")}
    d = {
        "mae": _r(mae, 3),
        "mae_by_lead": [_r(x, 3) for x in np.nanmean(e, axis=0)],
        "mase_seasonal_naive": _ratio(mae, res.train_scale.get("seasonal_naive_day")),
        "mase_persistence": _ratio(mae, res.train_scale.get("persistence")),
        "rel_mae_seasonal_naive": rel["seasonal_naive_day"],
        "rel_mae_persistence": rel["persistence"],
        "wape": _r(float(np.nansum(e) / np.nansum(np.abs(yy)))),
        "coverage_p10_p90": _r(float(inside[m_ok].mean())) if n else None,
        "coverage_p90": _r(float(below90[m_ok].mean())) if n else None,
        "pinball": _r(float(np.mean(list(pin.values()))), 3),
        "pinball_by_level": {k: _r(v, 3) for k, v in pin.items()},
        "coverage_by_level": cover,
        "fit_seconds": _r(res.fit_seconds.get(name, float("nan")), 3),
        "predict_seconds": _r(res.predict_seconds.get(name, float("nan")), 3),
        "predict_ms_per_forecast": _r(1000 * res.predict_seconds.get(name, float("nan")) / max(len(res.origins), 1), 3),
        "points": n,
    }
    if name in res.notes:
        d["note"] = res.notes[name]
    if name in res.held_back:
        d["held_back"] = res.held_back[name]
    return d


def compute_metrics(res: BacktestResult) -> dict:
    """Metrics per model over every (origin, lead) with a known actual.

    ``mae``: mean absolute error of P50 over leads 1..H; ``mae_by_lead``;
    ``mase_seasonal_naive`` / ``mase_persistence``: MAE divided by the in-sample
    MAE of the one-day seasonal naive / one-step naive on the training part
    (Hyndman's MASE); ``rel_mae_seasonal_naive`` / ``rel_mae_persistence``: MAE
    divided by that baseline's MAE on the same test points; ``wape``; coverage of
    the P10-P90 band and of P90; ``coverage_by_level``: the share of actuals at or
    below each level (P10..P99); pinball loss (mean over every level, and per level);
    ``held_back``: a model's own calibration check on the slice of its training data
    held back from fitting (the LSTM's validation split), where it has one; fit and
    predict seconds.  ``winner``: the model with the lowest MAE;
    ``best_baseline``: the lowest-MAE model that is not an LSTM.
    """
    ok = np.isfinite(res.actual)
    out: dict = {"test_start": res.test_start.strftime(TIME_FMT), "origins": len(res.origins),
                 "horizon": res.horizon, "resolution_min": res.step_min, "points": int(ok.sum()), "models": {}}
    maes = {}
    for name, p in res.preds.items():
        m_ok = ok & np.isfinite(p).all(axis=2)
        mae = float(np.nanmean(np.where(m_ok, np.abs(p[..., 1] - res.actual), np.nan))) if m_ok.any() else math.nan
        if np.isfinite(mae):  # a model with no finite forecast has no MAE (and wins nothing)
            maes[name] = mae
    for name, p in res.preds.items():
        out["models"][name] = _model_metrics(name, p, res, {**maes, name: maes.get(name, math.nan)})
    out["skipped"] = dict(res.skipped)
    if maes:
        win = min(maes, key=maes.get)
        out["winner"] = {"model": win, "mae": _r(maes[win], 3)}
    baselines = {k: v for k, v in maes.items() if not k.startswith("lstm")}
    if baselines:
        best = min(baselines, key=baselines.get)
        out["best_baseline"] = {"model": best, "mae": _r(baselines[best], 3)}
        for name in maes:
            if name.startswith("lstm"):
                ratio = _ratio(maes[name], baselines[best])
                out["models"][name]["improvement_vs_best_baseline"] = None if ratio is None else _r(1 - ratio)
    out["train_scale"] = {k: _r(v, 3) for k, v in res.train_scale.items()}
    return out


def summary(metrics: dict) -> str:
    """Which model won and by how much, read from the metrics (the numbers in metrics.json)."""
    win = metrics.get("winner")
    if not win:
        return "no model produced a finite forecast"
    res = metrics.get("resolution_min", 1)
    lines = [] if res == 1 else [f"series resolution {res} min: leads are {res}-minute bins, errors in "
                                 f"{bin_label(res)}"]
    lines.append(f"lowest MAE: {win['model']} (MAE {win['mae']:.3f})")
    bb = metrics.get("best_baseline")
    for name, m in sorted(metrics["models"].items()):
        if not name.startswith("lstm") or m.get("mae") is None or not bb:
            continue
        if not bb["mae"]:
            lines.append(f"{name} MAE {m['mae']:.3f}; the best baseline {bb['model']} is exact (MAE 0)")
            continue
        diff = m["mae"] / bb["mae"] - 1
        word = "lower" if diff < 0 else "higher"
        lines.append(f"{name} MAE {m['mae']:.3f} is {abs(diff) * 100:.1f}% {word} than the best baseline "
                     f"{bb['model']} (MAE {bb['mae']:.3f})")
    return "\n".join(lines)


# ---------------------------------------------------------------- outputs
def forecasts_frame(res: BacktestResult) -> pd.DataFrame:
    H = res.horizon
    n = len(res.origins)
    t0 = res.origins[0]
    step = pd.Timedelta(minutes=res.step_min)
    span = pd.date_range(t0, res.origins[-1] + H * step, freq=step)
    labels = np.asarray(span.strftime(TIME_FMT))
    opos = ((res.origins - t0) // step).to_numpy()
    o_idx = np.repeat(opos, H)
    t_idx = o_idx + np.tile(np.arange(H), n)
    parts = []
    for name, p in res.preds.items():
        parts.append(pd.DataFrame({"origin": labels[o_idx], "target": labels[t_idx], "model": name,
                                   **{c: np.round(p[..., i].ravel(), 3) for i, c in enumerate(COLUMNS)}}))
    if not parts:
        return pd.DataFrame(columns=["origin", "target", "model", *COLUMNS])
    return pd.concat(parts, ignore_index=True)


def _atomic_write(path: Path, write) -> None:
    """``write(tmp)`` a file beside ``path``, then swap it in: readers never see half a file."""
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_outputs(res: BacktestResult, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"forecasts": out / "forecasts.csv", "metrics": out / "metrics.json", "plot": out / "forecast.png"}
    _atomic_write(paths["forecasts"], lambda tmp: forecasts_frame(res).to_csv(tmp, index=False))
    text = json.dumps(res.metrics, indent=2, allow_nan=False) + "\n"
    _atomic_write(paths["metrics"], lambda tmp: tmp.write_text(text))
    plot(res, paths["plot"])
    return paths


def plot(res: BacktestResult, path: str | Path) -> None:
    """Top: a sample test day, actual vs P50 10-20 min ahead (tiled) with the P10-P90
    band of the LSTM and of the best baseline. Bottom: MAE by lead, every model with an MAE
    (a model that was skipped or has no finite forecast is simply not drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(13, 8.5), gridspec_kw={"height_ratios": [3, 2]})
    models = {n: m for n, m in res.metrics.get("models", {}).items() if m.get("mae") is not None}
    best = res.metrics.get("best_baseline", {}).get("model")
    lstm = next((m for m in models if m.startswith("lstm")), None)
    colours = {lstm: "tab:blue", best: "tab:orange"}
    _plot_day(ax1, res, [n for n in (best, lstm) if n in models], models, colours)
    _plot_leads(ax2, res.horizon, models, colours, lstm, best, res.step_min)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_day(ax, res: BacktestResult, names: list[str], models: dict, colours: dict) -> None:
    H = res.horizon
    # sample day: the first full calendar day of the test part, else its first 24 hours
    start = res.origins[0].normalize()
    if start < res.origins[0]:
        start += pd.Timedelta(days=1)
    if start + pd.Timedelta(days=1) > res.origins[-1]:
        start = res.origins[0]
    sel = (res.origins >= start) & (res.origins < start + pd.Timedelta(days=1))
    r = res.step_min
    step = int((res.origins[1] - res.origins[0]) / pd.Timedelta(minutes=1)) if len(res.origins) > 1 else H * r
    lo = min(10 // r, max(H - step // r, 0))  # leads in steps: 10-20 min ahead, tiled by the origin step
    leads = np.arange(lo, min(lo + max(step // r, 1), H))
    oi = np.flatnonzero(sel)
    t = (res.origins[oi].to_numpy()[:, None] + (leads[None, :] * r).astype("timedelta64[m]")).ravel()
    ax.plot(t, res.actual[oi][:, leads].ravel(), color="0.55", lw=0.7, label="actual")
    for name in names:
        p = res.preds[name][oi][:, leads]
        c = colours[name]
        ax.fill_between(t, p[..., 0].ravel(), p[..., 2].ravel(), color=c, alpha=0.18, lw=0, label=f"{name} P10-P90")
        ax.plot(t, p[..., 1].ravel(), color=c, lw=1.2, label=f"{name} P50 (MAE {models[name]['mae']:.1f})")
    ax.set_title(f"{start:%Y-%m-%d}: actual vs forecast {ahead(leads, r)} (origins every {step} min)")
    ax.set_ylabel("requests / min" if r == 1 else bin_label(r))
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    ax.grid(alpha=0.3)


def ahead(leads: np.ndarray, r: int) -> str:
    """What the leads drawn cover, in minutes after the origin: lead index k is the bin from k*r to
    (k+1)*r (one 10-minute bin reads '10-20 min ahead', never '20-20')."""
    return f"{int(leads[0]) * r}-{int(leads[-1]) * r + r} min ahead"


def _plot_leads(ax, H: int, models: dict, colours: dict, lstm: str | None, best: str | None,
                r: int = 1) -> None:
    palette = iter(["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive"])
    # keep the scale readable: a model far worse than the rest is drawn off scale, and said so
    top = 1.6 * float(np.median([m["mae"] for m in models.values()])) if models else None
    for name, m in models.items():
        c = colours.get(name) or next(palette, None)
        style = dict(lw=2.6) if name == lstm else dict(lw=1.6 if name == best else 1.1,
                                                      ls="-" if name == best else "--")
        cov = "-" if m.get("coverage_p90") is None else f"{m['coverage_p90']:.2f}"
        label = f"{name}: MAE {m['mae']:.1f}, P90 cov {cov}" + (" (off scale)" if m["mae"] > top else "")
        ax.plot(np.arange(1, H + 1) * r, [np.nan if v is None else v for v in m["mae_by_lead"]], color=c,
                label=label, **style)
    if top is not None:
        ax.set_ylim(0, top * 1.05)
    ax.set_xlabel("lead (minutes)")
    ax.set_ylabel("MAE (requests / min)" if r == 1 else f"MAE ({bin_label(r)})")
    ax.set_title("error by lead (P50), all models")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
