"""Live use: train a challenger on a deployment's stored load and forecast with the champion.

Both work on a per-minute frame (the load store's ``LoadStore.frame(name)``) and a
:class:`~forecaster.registry.Registry`; the CLI (``warmcast train`` /
``warmcast forecast``) only adds the store and printing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from forecaster.base import DAY, minute_series, per_step, resolution

from warmcast.forecast import DEFAULT_QUANTILES, Forecast
from warmcast.resolution import bin_label, steps_for
from forecaster.registry import ArtifactError, Decision, Registry


@dataclass
class TrainReport:
    deployment: str
    version: str | None
    decision: Decision | None
    window: tuple[str, str]
    maes: dict[str, float] = field(default_factory=dict)
    fit_seconds: float = 0.0
    note: str = ""
    resolution_min: int = 1

    def summary(self) -> str:
        lines = [f"deployment {self.deployment}: validation window {self.window[0]} .. {self.window[1]}"]
        if self.resolution_min != 1:
            lines.append(f"series resolution {self.resolution_min} min: the model forecasts "
                         f"{self.resolution_min}-minute bins; MAE in {bin_label(self.resolution_min)}")
        # a model with no finite forecast has no MAE: listed last, said so (never a crash)
        for name, mae in sorted(self.maes.items(), key=lambda kv: (kv[1] is None, kv[1] or 0.0)):
            lines.append(f"  {name:<22} MAE {mae:9.2f}" if mae is not None
                         else f"  {name:<22} no finite forecast")
        if self.version:
            lines.append(f"saved challenger {self.deployment}/{self.version} (trained in {self.fit_seconds:.1f} s)")
        if self.decision:
            lines.append(("promoted to champion: " if self.decision.promoted else "not promoted: ") + self.decision.reason)
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


def validation_window(frame: pd.DataFrame, val_hours: float) -> pd.Timestamp:
    """Start of the recent validation window: the last ``val_hours`` (at most a fifth of the data)."""
    s = minute_series(frame)
    r = resolution(s)
    steps = int(min(val_hours * 60 // r, max(len(s) // 5, per_step(60, r))))
    return s.index[-steps]


def train_deployment(frame: pd.DataFrame, registry: Registry, deployment: str, val_hours: float = 24,
                     config=None, progress: bool = True, baselines: list | None = None,
                     make_challenger: Callable[[], object] | None = None) -> TrainReport:
    """Train a challenger on the data before the recent validation window; score it, the
    champion and the baselines on that window (origins every 10 minutes); save it and
    promote it only if it beats both.

    ``make_challenger``: builds the unfitted challenger (default: the LSTM with ``config``); any
    model on forecaster.base's protocol whose artifact kind the registry loads. It is scored
    as "lstm" and the champion as "lstm_champion" whatever its class: the report, the CLI and
    the retrain audit read those keys."""
    from forecaster.backtest import run_backtest
    from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier

    s = minute_series(frame)
    r = resolution(s)
    if np.isfinite(s.to_numpy(dtype=float)).sum() < per_step(DAY + 60, r):
        raise ArtifactError(f"deployment {deployment!r} has {len(s) * r} minutes of load; "
                            f"training needs more than a day")
    start = validation_window(frame, val_hours)
    challenger = make_challenger() if make_challenger else _lstm(config, progress)
    challenger.name = "lstm"
    if baselines is None:
        baselines = [Persistence(), SeasonalNaive(DAY), HoltWinters(max_days=7), UCFourier(max_days=7)]
    champion_version, champion, note = _champion(registry, deployment)
    cap = getattr(getattr(challenger, "cfg", None), "horizon", None) or steps_for(30, r)
    res = run_backtest(frame, start, [challenger, *baselines, *champion], horizon=min(steps_for(30, r), cap),
                       step=10 if 10 % r == 0 else r, progress=progress)
    maes = {k: v["mae"] for k, v in res.metrics["models"].items()}
    version = registry.save(deployment, challenger, metrics={
        "validation_window_start": str(start), "validation_mae": maes.get("lstm"),
        "validation": {k: {m: v[m] for m in ("mae", "coverage_p90", "coverage_p10_p90", "wape")}
                       for k, v in res.metrics["models"].items()},
    })
    decision = _decide(registry, deployment, version, maes, champion_version)
    registry.record_decision(deployment, version, decision.promoted, decision.reason)
    note = "; ".join(x for x in (note, _budget_note(challenger)) if x)
    return TrainReport(deployment, version, decision, (str(start), str(s.index[-1])), maes,
                       getattr(challenger, "fit_seconds", 0.0), note, r)


def _lstm(config, progress: bool):
    from forecaster.lstm import LSTMConfig, LSTMForecaster

    return LSTMForecaster(config or LSTMConfig(), progress=progress)


def _champion(registry: Registry, deployment: str) -> tuple[str | None, list, str]:
    """(champion version, [the champion to score] or [], a note when it does not load)."""
    from forecaster.resolver import AsFitted

    version = registry.champion(deployment)
    if not version:
        return None, [], ""
    try:
        return version, [AsFitted(registry.load(deployment, version), "lstm_champion")], ""
    except ArtifactError as err:
        return None, [], f"current champion {version} is unusable ({err}); scoring without it"


def _decide(registry: Registry, deployment: str, version: str, maes: dict, champion_version: str | None) -> Decision:
    """Promote iff the challenger beats the champion and the best baseline (Registry.consider)."""
    base = {k: v for k, v in maes.items() if not k.startswith("lstm") and v is not None}
    best = min(base, key=base.get) if base else None
    if maes.get("lstm") is None:  # no finite forecast on the window: it cannot win, and that is the reason
        return Decision(False, "challenger has no finite forecast on the validation window", version,
                        champion_version)
    return registry.consider(deployment, version, maes["lstm"], maes.get("lstm_champion"),
                             base.get(best) if best else None, best or "best baseline")


def _budget_note(challenger) -> str:
    """Said when the LSTM's training was cut short by its time budget (its metadata has it too)."""
    fired = getattr(challenger, "meta", {}).get("time_budget", {}).get("fired")
    if not fired:
        return ""
    return f"training stopped by its time budget ({challenger.cfg.time_budget_s:g} s): {', '.join(fired)}"


def serving_history(store, deployment: str, days: float, cache=None) -> pd.DataFrame:
    """The load every serving forecast reads (``warmcast forecast``, the API, the workers' step): from
    ``days`` before the top of the hour the newest stored bin ends in, through that bin.  Counted from
    the data, not the wall clock, and the same for all of them, so that they answer alike (issue 46:
    the CLI read everything stored, the API whole calendar days, the workers 7 days back from now).
    The models are fitted on the part before the start of the deployment's hour, which starts at a
    minute of its own (:func:`forecaster.resolver.fit_window`).
    ``cache``: a :class:`warmcast.history.HistoryCache` a process keeps (the same frame, read from the
    store only where a day changed)."""
    from warmcast.errors import NotFoundError

    if cache is not None:
        frame = cache.serving(deployment, days)
        if frame is not None:
            return frame
    read = store.frame
    stored = store.days(deployment)
    if not stored:
        raise NotFoundError(f"no load stored for {deployment!r}; ingest a log first")
    tail = read(deployment, start=pd.Timestamp(0) + pd.Timedelta(days=stored[-1]))
    if not len(tail):
        return read(deployment)
    origin = tail.index[-1] + pd.Timedelta(minutes=resolution(tail))
    return read(deployment, start=origin.floor("h") - pd.Timedelta(days=days))


def serving_clients(store, deployment: str, days: float):
    """Reads the deployment's client series over the serving window when called (the fleet model's
    reconciliation reads them as it forecasts: a kept answer reads each minute's clients)."""
    from warmcast.clients import ClientStore

    def read() -> dict[str, pd.DataFrame]:
        stored = store.days(deployment)
        start = pd.Timestamp(0) + pd.Timedelta(days=stored[-1] - int(days) - 1) if stored else None
        return ClientStore(store, deployment).frames(start=start)

    return read


def forecast_deployment(frame: pd.DataFrame, registry: Registry, deployment: str, horizon: int = 30,
                        quantiles: Sequence[float] = DEFAULT_QUANTILES, fitted=None, clients=None) -> Forecast:
    """The one serving forecast: the resolved model (forecaster.resolver) through the fallback rules;
    ``horizon`` in minutes (a 5-minute series is forecast in 5-minute bins: 30 minutes are 6 leads).
    ``fitted``: a :func:`~forecaster.resolver.resolve_forecaster` answer a server keeps between calls
    (it is fitted on :func:`~forecaster.resolver.fit_window`, so a kept one answers as a fresh one);
    ``clients``: :func:`serving_clients`, for the fleet model."""
    from forecaster.resolver import resolve_forecaster

    fb = fitted if fitted is not None else resolve_forecaster(registry, deployment, frame, clients=clients)[0]
    return fb.predict(frame, horizon=steps_for(horizon, resolution(frame)), quantiles=quantiles)


def forecast_table(f: Forecast) -> pd.DataFrame:
    return pd.DataFrame({"time": f.index.strftime("%Y-%m-%d %H:%M:%S"), "lead": np.arange(1, f.horizon + 1),
                         **{f"p{int(round(q * 100))}": np.round(v, 2) for q, v in sorted(f.quantiles.items())},
                         "mean": np.round(f.mean, 2)})
