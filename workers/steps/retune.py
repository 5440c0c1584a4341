"""Maintenance, nightly after the retrain: re-tune the predictive policy's risk for the deployment's SLO.

The choice is ``warmup.sim.risk.tune`` on the stored history: the days before now are replayed
through the fleet simulator under each candidate setting (forecaster trained before them), and the
cheapest setting that met the deployment's ``slo`` there is stored as the operator overrides the
loop already reads (``policy-config``, ``scaling`` section).  Only the knobs the live loop uses are
tuned: the quantile among the levels the live forecast carries, the target utilisation and the
scale-in stabilisation.  Every run is audited (``retune``): old and new knobs, why, the table.
The replay forecasts with the seasonal naive baseline (seconds, deterministic); it says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pandas as pd

from forecaster.base import DEFAULT_QUANTILES
from warmcast.errors import InputError
from workers.context import Ctx
from workers.steps.outcome import Outcome

KNOBS = ("quantile", "target_utilisation", "stabilisation_s")
LIVE_GRIDS = {
    "predictive": [{"quantile": q} for q in DEFAULT_QUANTILES if q >= 0.5],
    "predictive_stage2": [{"target_utilisation": 0.9, "stabilisation_s": 300.0},
                          {"target_utilisation": 1.0, "stabilisation_s": 900.0}],
}


@dataclass(frozen=True)
class RetuneOutcome(Outcome):
    knobs: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] = field(default_factory=dict)
    changed: bool = False
    met: bool = False
    why: str = ""


def step(ctx: Ctx, deployment: str, *, validation_days: float = 2.0, forecaster: str = "seasonal_naive",
         now: Optional[pd.Timestamp] = None) -> RetuneOutcome:
    """Tune on the ``validation_days`` before ``now`` (the forecaster trains on the day(s) before them)."""
    from warmup.sim import FleetBacktestConfig, from_series
    from warmup.sim.forecasts import make_forecaster
    from warmup.sim.risk import tune

    dep = ctx.dep(deployment)
    end = (now or pd.Timestamp.now()).floor("min")
    frame = ctx.store.frame(deployment, start=end - pd.Timedelta(days=validation_days + 2), end=end)
    if frame["requests"].notna().sum() < (validation_days + 1) * 1440:
        why = f"{int(frame['requests'].notna().sum())} stored minutes: too few to re-tune on {validation_days:g} days"
        ctx.state.audit(deployment, "retune", "risk unchanged", why, False)
        return RetuneOutcome(deployment, why=why)
    cfg = ctx.cfg(deployment)
    bt = FleetBacktestConfig(capacity_rpm=dep.capacity_rpm, cold_start_min=dep.cold_start_min, test_start=end,
                             forecaster=forecaster, min_replicas=dep.min_replicas, max_replicas=dep.max_replicas,
                             core=cfg)
    try:
        tuning = tune(from_series(frame["requests"], source=deployment), bt, dep.slo, validation_days,
                      ("predictive",), model=make_forecaster(forecaster), grids=LIVE_GRIDS)
    except (InputError, ValueError) as err:  # the night's retrain stands; the risk stays as it was
        why = f"re-tune failed: {err}"
        ctx.state.audit(deployment, "retune", "risk unchanged", why, False)
        return RetuneOutcome(deployment, why=why)
    return _store(ctx, deployment, tuning, {k: getattr(cfg.scaling, k) for k in KNOBS})


def _store(ctx: Ctx, deployment: str, tuning: Any, previous: dict[str, Any]) -> RetuneOutcome:
    """Store the chosen knobs as the scaling overrides (kept with any others) and audit the change."""
    choice = tuning.choices["predictive"]
    knobs = {k: v for k, v in {**previous, **choice.knobs}.items() if k in KNOBS}
    changed = knobs != previous
    if changed:
        ov = dict(ctx.state.get("policy-config", deployment) or {})
        ov["scaling"] = {**ov.get("scaling", {}), **knobs}
        try:
            from workers.coreconfig import core_config

            core_config(ctx.dep(deployment), overrides=ov)  # the loop must be able to read what is stored
        except InputError as err:
            raise InputError(f"re-tuned policy-config for {deployment} was refused: {err}") from None
        ctx.state.put("policy-config", deployment, ov)
    verb = f"risk {previous} -> {knobs}" if changed else f"risk unchanged {knobs}"
    table = [{**r["knobs"], "late_share": r["late_share"], "gpu_x": r["gpu_x"]} for r in choice.table]
    ctx.state.audit(deployment, "retune", verb, f"SLO {tuning.slo.describe()}: {choice.why}", changed,
                    tuning.report()[:2000], {"validation": list(tuning.window), "forecaster": tuning.forecaster,
                                             "table": table})
    return RetuneOutcome(deployment, knobs, previous, changed, choice.met, choice.why)
