"""The fleet model live (issue 43): fitted once on every stored deployment and its clients, judged
per deployment, and serving the deployments where it wins.

Training (:func:`train_fleet`), as a deployment's own training (``forecaster.live.train_deployment``):
the model is fitted on everything before the recent validation window (the last ``val_hours``), and
judged on that window at origins every 10 minutes, leads up to 30 minutes.  The window's first half
is the development part: each deployment with clients takes the reconciliation method (bottom-up,
top-down, MinT) that forecast its total best there (``reconcile.choose``).  Its second half is the
judge: the reconciled total's P50 MAE against each baseline's and the deployment's own champion's on
the same origins.  The fleet model serves a deployment only where it is strictly lower than all of
them (the champion/challenger rule: the per-deployment LSTM and the baselines stay its challengers);
each deployment's verdict, method, client labels and reconciliation parameters are stored in the
artifact's metrics, and :mod:`forecaster.global_lstm.answer` serves from them.

The artifacts live in their own registry (:mod:`forecaster.global_lstm.artifacts`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from forecaster.base import DAY, minute_series, resolution
from forecaster.global_lstm.artifacts import FLEET, NO_CLIENTS, fleet_registry
from forecaster.global_lstm.panel import TOTAL, Panel
from forecaster.global_lstm.reconcile import METHODS, choose, covariances, proportions, reconcile
from forecaster.registry import ArtifactError, Registry
from warmcast.resolution import steps_for

STEP_MIN = 10            # minutes between validation origins


@dataclass(frozen=True)
class FleetSeries:
    """What the fleet model reads of one deployment: its total and its client series (label -> frame)."""

    total: pd.DataFrame
    clients: Mapping[str, pd.DataFrame] = field(default_factory=dict)


@dataclass
class FleetReport:
    version: str | None
    step_min: int
    validation_start: str
    verdicts: dict[str, dict] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    fit_seconds: float = 0.0

    def summary(self) -> str:
        lines = [f"fleet model {FLEET}/{self.version}: {len(self.verdicts)} deployments, {self.step_min}-minute "
                 f"steps, validation from {self.validation_start} (fitted in {self.fit_seconds:.1f} s)"]
        for dep, v in sorted(self.verdicts.items()):
            lines.append(f"  {dep:<24} {'serves' if v['serves'] else 'does not serve'}: {v['why']}")
        lines += [f"  {dep:<24} left out: {why}" for dep, why in sorted(self.left_out.items())]
        return "\n".join(lines)


def fleet_data(store, days: float = 28.0) -> dict[str, FleetSeries]:
    """Every stored deployment's last ``days`` (before its newest stored day's end) and its client series."""
    from warmcast.clients import ClientStore

    out = {}
    for dep in sorted(store.deployments()):
        stored = store.days(dep)
        if not stored:
            continue
        start = pd.Timestamp(0) + pd.Timedelta(days=stored[-1] + 1) - pd.Timedelta(days=days)
        out[dep] = FleetSeries(store.frame(dep, start=start)[["requests"]],
                               ClientStore(store, dep).frames(start=start))
    return out


def panel_of(data: Mapping[str, FleetSeries]) -> tuple[Panel, dict[str, str]]:
    """The panel of every deployment at the most common resolution (``D/total`` and ``D/<client>``), and
    the deployments left out, with why (one panel has one step)."""
    steps = {d: resolution(minute_series(fs.total)) for d, fs in data.items() if len(fs.total)}
    left = {d: "no load stored" for d, fs in data.items() if not len(fs.total)}
    if not steps:
        raise ArtifactError("no deployment has load stored: nothing to train the fleet model on")
    common = max(set(steps.values()), key=lambda s: (list(steps.values()).count(s), -s))
    series, groups = {}, {}
    for d, step in steps.items():
        if step != common:
            left[d] = f"stored in {step}-minute bins; the fleet model trains on the {common}-minute ones"
            continue
        for label, f in {TOTAL: data[d].total, **dict(data[d].clients)}.items():
            series[f"{d}/{label}"], groups[f"{d}/{label}"] = f, d
    return Panel.from_series(series, groups), left


def train_fleet(data: Mapping[str, FleetSeries], registry: Registry, make_model: Callable[[int], object],
                val_hours: float = 24.0, baselines: Callable[[], list] | None = None) -> FleetReport:
    """Fit, judge and save the fleet model (see the module docstring); ``make_model(horizon_min)``
    builds it unfitted, ``baselines()`` the baselines each deployment's total is judged against."""
    panel, left = panel_of(data)
    r, H = panel.step_min, steps_for(30, panel.step_min)
    start = validation_start(panel, val_hours)
    model = make_model(H * r)
    model.fit(panel.before(start))
    origins = _origins(panel, start, H)
    preds = model.predict_panel(panel, origins, horizon=H)
    actual = panel.values[:, panel.index.get_indexer(origins)[:, None] + np.arange(H)[None, :]]
    half = len(origins) // 2
    train_values = panel.before(start).values
    verdicts = {}
    for dep, (tot, clients) in panel.hierarchy().items():
        h = {dep: (tot, clients)}
        entry = _reconciled(dep, h, preds, actual, train_values, half, model.cfg.levels, panel.names)
        frame = panel.frame(tot)
        fleet_mae = _mae(entry.pop("_pred")[half:], actual[tot, half:])
        verdicts[dep] = {**entry, **_judge(registry, dep, frame, origins[half], H, fleet_mae, baselines)}
    fleet = fleet_registry(registry)
    version = fleet.save(FLEET, model, metrics={"validation_start": str(start), "deployments": verdicts,
                                                "left_out": left})
    fleet.set_champion(FLEET, version, reason="the newest fleet model; each deployment's verdict is in its metrics")
    return FleetReport(version, r, str(start), verdicts, left, float(getattr(model, "fit_seconds", 0.0)))


def validation_start(panel: Panel, val_hours: float) -> pd.Timestamp:
    """The last ``val_hours`` (at most a fifth of the panel), on the panel's grid."""
    steps = int(min(val_hours * 60 // panel.step_min, max(len(panel.index) // 5, 2 * steps_for(60, panel.step_min))))
    if len(panel.index) - steps < steps_for(DAY, panel.step_min):
        raise ArtifactError(f"the fleet's series hold {len(panel.index) * panel.step_min} minutes; training "
                            "needs a day before the validation window")
    return panel.index[-steps]


def _origins(panel: Panel, start: pd.Timestamp, H: int) -> pd.DatetimeIndex:
    from forecaster.backtest import origins_for

    step = STEP_MIN if STEP_MIN % panel.step_min == 0 else panel.step_min
    origins = origins_for(panel.index, start, H, step, panel.step_min)
    if len(origins) < 4:
        raise ArtifactError(f"the validation window holds {len(origins)} forecast origins; at least 4 are needed")
    return origins


def _reconciled(dep: str, h: dict, preds: np.ndarray, actual: np.ndarray, train_values: np.ndarray, half: int,
                levels: Sequence[float], names: Sequence[str]) -> dict:
    """The deployment's method chosen on the development half, its parameters, and its reconciled
    total (``_pred``: origins x leads x levels)."""
    tot, clients = h[dep]
    if not clients:
        return {"method": NO_CLIENTS, "clients": [], "_pred": preds[tot]}
    shares = proportions(train_values, h)
    covs = covariances(preds[:, :half], actual[:, :half], h)
    with np.errstate(invalid="ignore"):
        scale = np.nan_to_num(np.nanmean(train_values, axis=1))
    choice = choose(preds[:, :half], actual[:, :half], h, scale, levels, shares, covs)
    rec = reconcile(preds, h, choice.method, shares, covs)
    return {"method": choice.method, "clients": [names[i].split("/", 1)[1] for i in clients],
            "method_scores": {m: round(choice.scores[m], 6) for m in METHODS},
            "shares": [float(x) for x in shares[dep]],
            "cov": np.asarray(covs[dep]).round(6).tolist() if choice.method == "mint_shrink" else None,
            "_pred": rec[tot]}


def _mae(pred: np.ndarray, actual: np.ndarray) -> float | None:
    err = np.abs(pred[..., 1] - actual)  # the P50 (levels 0.1, 0.5, ...)
    err = err[np.isfinite(err)]
    return float(err.mean()) if len(err) else None


def _judge(registry: Registry, dep: str, frame: pd.DataFrame, start: pd.Timestamp, H: int,
           fleet_mae: float | None, baselines: Callable[[], list] | None) -> dict:
    """The fleet model's verdict on one deployment's total: strictly below every baseline's MAE and its
    champion's (scored on the same origins by the single-series backtest), or why not."""
    from forecaster.backtest import run_backtest
    from forecaster.live import _champion

    champion_version, champion, _ = _champion(registry, dep)
    models = (baselines or _default_baselines)() + champion
    res = run_backtest(frame, start, models, horizon=H, step=STEP_MIN if STEP_MIN % resolution(frame) == 0
                       else resolution(frame), progress=False)
    others = {k: v["mae"] for k, v in res.metrics["models"].items() if v["mae"] is not None}
    table = ", ".join(f"{k} {v:.2f}" for k, v in sorted(others.items(), key=lambda kv: kv[1]))
    if fleet_mae is None:
        serves, why = False, "no finite forecast on the validation window"
    else:
        serves = bool(others) and all(fleet_mae < v for v in others.values())
        why = f"validation MAE {fleet_mae:.2f} {'beats' if serves else 'does not beat'} {table or 'nothing scored'}"
    return {"serves": serves, "why": why, "mae": fleet_mae, "maes": others, "champion": champion_version}


def _default_baselines() -> list:
    from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier

    return [Persistence(), SeasonalNaive(DAY), HoltWinters(max_days=7), UCFourier(max_days=7)]
