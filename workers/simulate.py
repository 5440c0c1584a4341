"""Seed a simulated fleet: a week of history from the synthetic generator, then its traffic replayed live.

The generator's rate curve (:func:`warmcast.generate.rate_per_minute`, daily and
weekly cycles with bursts) is drawn with Poisson noise over 14 days placed so
that the first 7 end at the current minute: those go into the load store (the
forecaster has a week of history at once), the rest is the traffic the
simulated fleet receives minute by minute from now on.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from warmup.core import replicas_for
from workers.context import Ctx


def simulation_settings(settings: Any) -> Any:
    """The settings a simulated run works under: a key prefix (``<prefix>:sim``) and models directory of its
    own, so its synthetic minutes (dated now) never land in the history of a deployment of the same name (issue
    32: ``run --simulate`` overwrote the quickstart's ``demo``; retention then dropped its 2024 days)."""
    models = Path(settings.models_dir)
    return settings.model_copy(update={"key_prefix": f"{settings.key_prefix}:sim",
                                       "models_dir": models.with_name(models.name + "-sim")})


def synthetic_minutes(now: float, days_before: int = 7, days_after: int = 7, mean_rpm: float = 600.0,
                      seed: int = 0) -> pd.Series:
    from warmcast.generate import WorkloadSpec, rate_per_minute

    first_day = pd.Timestamp(now, unit="s").floor("D") - pd.Timedelta(days=days_before)
    spec = WorkloadSpec(days=days_before + days_after + 1, start=str(first_day.date()), mean_rpm=mean_rpm, seed=seed)
    rng = np.random.default_rng(seed)
    rate = rate_per_minute(spec, rng)
    return pd.Series(rng.poisson(rate.to_numpy()).astype(float), index=rate.index, name="requests")


def seed_deployment(ctx: Ctx, dep: str, mean_rpm: float | None = None, seed: int = 0,
                    now: float | None = None, series: pd.Series | None = None) -> dict:
    """Store the history, the live traffic and a right-sized fleet for one deployment (``series``: its
    requests per minute around ``now``, else the synthetic generator's)."""
    now = time.time() if now is None else now
    d = ctx.dep(dep)
    mean = mean_rpm or 2.0 * d.capacity_rpm
    series = synthetic_minutes(now, mean_rpm=mean, seed=seed) if series is None else series
    cut = pd.Timestamp(int(now // 60) * 60, unit="s")
    history = series[series.index < cut]
    ctx.store.upsert_frame(dep, history.to_frame("requests"))
    ctx.r.set(f"{ctx.prefix}:ingested:{dep}", int(now // 60) - 1)
    sim = ctx.sim(dep)
    sim.load_traffic(series[series.index >= cut - pd.Timedelta(minutes=5)])
    replicas = max(d.min_replicas, replicas_for(float(history.iloc[-1]), d.capacity_rpm, 1.0))
    sim.reset(min(replicas, d.max_replicas), now)
    return {"history_minutes": len(history), "replicas": replicas, "mean_rpm": mean}
