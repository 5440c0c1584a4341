"""Step 2: forecast the next 30 minutes from the stored load with the serving model (wrapped in
the fallback rules), store the forecast, and score the one stored before once actuals arrive.

A series stored coarser than a minute (a 5-minute count series) is forecast in its own bins
(30 minutes are 6 leads) and scored against them; the planner reads it as a per-minute rate."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from forecaster.base import per_minute_rate
from warmcast.errors import NotFoundError
from warmcast.resolution import step as bin_length
from warmcast.state import forecast_from_dict, forecast_to_dict
from warmup.core import ForecastInput
from workers import metrics
from workers.context import Ctx
from workers.steps.outcome import DOC_ONLY, Outcome

log = logging.getLogger("warmcast.workers.forecast")


@dataclass(frozen=True)
class ForecastOutcome(Outcome):
    model: str | None
    origin: str | None
    note: str
    doc: dict[str, Any] | None = field(metadata=DOC_ONLY)


def step(ctx: Ctx, deployment: str, now: Optional[datetime] = None) -> ForecastOutcome:
    """Forecast the next 30 minutes from the stored load; store it; track the error of the previous one.
    ``now``: the clock when a replay drives the loop (``warmcast replay --through-worker``), else the wall's."""
    from forecaster.live import forecast_deployment

    frame, why_none = _live_history(ctx, deployment, now)
    if frame is None:
        return ForecastOutcome(deployment, None, None, why_none, None)
    _track_error(ctx, deployment, frame)
    fb = _model_for(ctx, deployment, frame)
    fc = forecast_deployment(frame, None, deployment, fitted=fb)
    trained = getattr(getattr(fb, "primary", None), "meta", {}) or {}
    doc = ctx.state.put_forecast(deployment, fc, trained_at=trained.get("created_at") or trained.get("train_end"))
    metrics.FORECASTS.labels(deployment, fc.model).inc()
    log.info("forecast", extra={"event": {"deployment": deployment, "model": fc.model, "origin": doc["origin"],
                                          "p50_lead1": (doc["quantiles"].get("0.5") or [None])[0],
                                          "note": fc.note}})
    return ForecastOutcome(deployment, fc.model, doc["origin"], fc.note or "", doc)


def _live_history(ctx: Ctx, deployment: str, now: Optional[datetime]) -> tuple[pd.DataFrame | None, str]:
    """(the serving window, "") of a live series, else (None, why none): the CLI's and the API's window,
    kept by this process and re-read only where a day changed; the loop forecasts a series whose
    newest bin lies in the window back from ``now`` (None: the wall clock) only."""
    from forecaster.live import serving_history

    now = pd.Timestamp.now(tz="UTC").tz_localize(None) if now is None else pd.Timestamp(now).tz_convert(None)
    days = ctx.settings.forecast_history_days
    try:
        frame = serving_history(ctx.store, deployment, days, cache=history_cache(ctx))
    except NotFoundError:
        return None, "no stored load"
    if frame.dropna(how="all").empty or frame.index[-1] < now - pd.Timedelta(days=days):
        return None, "no stored load in the history window"
    return frame, ""


def history_cache(ctx: Ctx):
    """This process's rolling copy of the stored load (None with ``history_cache_deployments`` 0)."""
    from warmcast.history import HistoryCache

    n = ctx.options.history_cache_deployments
    if not n:
        return None
    return ctx.cache.get("history") or ctx.cache.setdefault("history", HistoryCache(ctx.store, max_deployments=n))


def prime(ctx: Ctx, deployments: list[str], now: Optional[datetime] = None,
          meter: Callable[[], None] = lambda: None) -> int:
    """Before a shard forecasts its deployments one by one: the ones a shared model serves are
    forecast in one batched call per model and horizon (the fleet model, and a per-deployment LSTM
    such as the shipped one, which many deployments share), each deployment's step then answering
    from its part (issue 44); returns the batched calls made.  Nothing is stored here: each step
    stores its own, through the same fallback rules.  ``meter`` is called after each deployment
    (``workers.shardrun.Meter``: the CPU counted as it goes)."""
    from forecaster.global_lstm.answer import FleetAnswer, prime as prime_fleet
    from forecaster.lstm.model import LSTMForecaster
    from warmcast.forecast import DEFAULT_QUANTILES
    from warmcast.resolution import resolution_of, steps_for

    fleet: dict[int, list] = {}   # horizon -> [(answer, frame)]
    own: dict[tuple, tuple[LSTMForecaster, dict]] = {}   # (model, horizon) -> (model, {deployment: frame})
    for dep in deployments:
        meter()
        frame, _ = _live_history(ctx, dep, now)
        if frame is None:
            continue
        fb = _model_for(ctx, dep, frame)
        if fb.why_not_primary(frame) is not None:
            continue
        horizon = steps_for(30, resolution_of(frame))
        if isinstance(fb.primary, FleetAnswer):
            fleet.setdefault(horizon, []).append((fb.primary, frame))
        elif isinstance(fb.primary, LSTMForecaster):
            own.setdefault((id(fb.primary), horizon), (fb.primary, {}))[1][dep] = frame
    calls = sum(prime_fleet(work, h) for h, work in fleet.items())
    for (_, horizon), (model, frames) in own.items():
        model.prime(frames, horizon, DEFAULT_QUANTILES)
    return calls + len(own)


def stored(ctx: Ctx, dep: str) -> tuple[dict[str, Any] | None, ForecastInput | None]:
    """(the stored forecast document, the core's view of it); (None, None) when none is stored."""
    doc = ctx.state.get_forecast(dep)
    return doc, forecast_input(doc)


def forecast_input(doc: dict[str, Any] | None) -> ForecastInput | None:
    """The core's view of a stored forecast document (per minute: a coarse one as its rate)."""
    if not doc or not doc.get("quantiles"):
        return None
    if int(doc.get("step_min", 1)) != 1:
        doc = forecast_to_dict(per_minute_rate(forecast_from_dict(doc)))
    qs = sorted(doc["quantiles"].items(), key=lambda kv: float(kv[0]))
    origin = pd.Timestamp(doc["origin"]).to_pydatetime().replace(tzinfo=timezone.utc)
    return ForecastInput(origin=origin, levels=tuple(float(k) for k, _ in qs),
                         values=tuple(tuple(float(x) for x in v) for _, v in qs), model=str(doc.get("model", "")))


def _model_for(ctx: Ctx, dep: str, frame: pd.DataFrame):
    """The resolved model (forecaster.resolver: the same answer and note as the CLI and the API),
    wrapped in the fallback rules; kept per process while its champion, newest trained version and
    fit window (the hour, forecaster.resolver.fit_window) stay, so it answers as a fresh fit would."""
    from forecaster.registry import Registry
    from forecaster.resolver import resolve_forecaster, serving_key

    reg = ctx.cache.setdefault("registry", Registry(ctx.settings.models_dir))
    version = serving_key(reg, dep, frame)
    key = ("model", dep)
    cached = ctx.cache.get(key)
    if cached and cached[0] == version:
        return cached[1]
    from forecaster.live import serving_clients
    from forecaster.verdicts import SharedVerdicts

    clients = serving_clients(ctx.store, dep, ctx.settings.forecast_history_days)
    # a verdict another process judged in this judge period is read, not judged again (issue 44)
    fb, _ = resolve_forecaster(reg, dep, frame, clients=clients, shared=SharedVerdicts(ctx.r, ctx.prefix))
    metrics.MODEL_RESOLUTIONS.inc()
    ctx.cache[key] = (version, fb, time.time())
    return fb


def _track_error(ctx: Ctx, dep: str, frame: pd.DataFrame) -> None:
    """Once actuals arrive, score the forecast stored before: MAE over the leads now observed."""
    prev = ctx.state.get_forecast(dep)
    if not prev or "0.5" not in prev.get("quantiles", {}):
        return
    origin = pd.Timestamp(prev["origin"])
    p50 = np.asarray(prev["quantiles"]["0.5"], float)
    idx = pd.date_range(origin, periods=len(p50), freq=bin_length(int(prev.get("step_min", 1))))  # bins, as stored
    actual = frame["requests"].reindex(idx).to_numpy(float) if "requests" in frame else np.full(len(p50), np.nan)
    ok = np.isfinite(actual)
    if not ok.any():
        return
    err = np.abs(p50[ok] - actual[ok])
    metrics.FORECAST_MAE.labels(dep).set(float(err.mean()))
    if ok[0]:
        metrics.FORECAST_ERR.labels(dep, "1").observe(float(err[0]))
    ctx.r.hset(f"{ctx.prefix}:forecast-error:{dep}", mapping={
        "origin": prev["origin"], "model": prev.get("model", ""), "leads_observed": int(ok.sum()),
        "mae": round(float(err.mean()), 4), "lead1_abs_error": round(float(err[0]), 4) if ok[0] else "",
        "scored_at": time.time()})
