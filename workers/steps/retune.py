"""Maintenance, nightly after the retrain: re-tune the predictive policy's risk for the deployment's SLO.

The choice is ``warmup.sim.risk.tune`` on the stored history: the days before now are replayed
through the fleet simulator under each candidate setting, and the cheapest setting that met the
deployment's ``slo`` there is stored as the operator overrides the loop already reads
(``policy-config``, ``scaling`` section).  It searches what bench/fleet_slo.py searches, with the
same code (``warmup.sim.risk.tune`` and its grids: the HPA it replaces tuned first, then the quantile,
the warm buffer, the reactive guard at that HPA's utilisation and its window, the utilisations and the
stabilisation), so the benchmarked policy is the one that runs (issue 42).  Which knobs it stored is
kept beside them (``retuned``), so ``warmcast deployments show`` names the layer of each.

The replay is the live loop's (issue 25): the forecaster that serves the deployment (the resolver's
answer: its champion or the shipped model, predicting only; the baselines where those answer), at the
levels the live forecast carries, with any candidate level between them interpolated as the core
reads a path; the capacity the planner uses (calibrated where a calibration is stored); the lead it
plans with (measured launch-to-ready first).  Every run is audited (``retune``): what it replayed,
old and new knobs, why, the table.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import pandas as pd

from warmcast.forecast import DEFAULT_QUANTILES
from warmcast.errors import InputError
from workers.context import Ctx
from workers.steps.outcome import Outcome

KNOBS = ("quantile", "buffer_level", "target_utilisation", "reactive_utilisation", "stabilisation_s",
         "reactive_guard", "reactive_guard_window_min")
POLICIES = ("reactive", "predictive")   # the reactive one first: its utilisation is the predictive guard's


@dataclass(frozen=True)
class RetuneOutcome(Outcome):
    knobs: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] = field(default_factory=dict)
    changed: bool = False
    met: bool = False
    why: str = ""


def step(ctx: Ctx, deployment: str, *, validation_days: float = 2.0, now: Optional[pd.Timestamp] = None
         ) -> RetuneOutcome:
    """Tune on the ``validation_days`` before ``now`` with what the live loop runs (see the module doc)."""
    from warmup.sim import FleetBacktestConfig, from_series
    from warmup.sim.risk import tune

    dep = ctx.dep(deployment)
    end = (now or pd.Timestamp.now()).floor("min")
    frame = ctx.store.frame(deployment, start=end - pd.Timedelta(days=validation_days + 2), end=end)
    if frame["requests"].notna().sum() < (validation_days + 1) * 1440:
        why = f"{int(frame['requests'].notna().sum())} stored minutes: too few to re-tune on {validation_days:g} days"
        ctx.state.audit(deployment, "retune", "risk unchanged", why, False)
        return RetuneOutcome(deployment, why=why)
    cfg, replayed = live_setup(ctx, deployment, frame)
    previous = {k: getattr(cfg.scaling, k) for k in KNOBS}
    declared = _declared_knobs(ctx, deployment)
    cfg = replace(cfg, scaling=replace(cfg.scaling, **declared))
    bt = FleetBacktestConfig(capacity_rpm=cfg.scaling.capacity_rpm, cold_start_min=cfg.scaling.cold_start_min,
                             test_start=end, forecaster=replayed["forecaster"], min_replicas=dep.min_replicas,
                             max_replicas=dep.max_replicas, core=cfg, capacity_source=replayed["capacity_source"])
    model = replayed.pop("model")
    try:
        tuning = tune(from_series(frame["requests"], source=deployment), bt, dep.slo, validation_days,
                      POLICIES, model=model, levels=DEFAULT_QUANTILES)
    except (InputError, ValueError) as err:  # the night's retrain stands; the risk stays as it was
        why = f"re-tune failed: {err}"
        ctx.state.audit(deployment, "retune", "risk unchanged", why, False, "", replayed)
        return RetuneOutcome(deployment, why=why)
    if tuning.forecaster != getattr(model, "name", tuning.forecaster):  # the replay's own fallback answered
        replayed["forecaster"] = f"{tuning.forecaster} (the serving {replayed['forecaster']} could not answer)"
    return _store(ctx, deployment, tuning, previous, declared, replayed)


def _declared_knobs(ctx: Ctx, deployment: str) -> dict[str, Any]:
    """The tuned knobs at the deployment's declared values, where the replay runs them: the search starts
    from the same point every night, not from its own last answer (which made a second run on the same
    data choose another quantile, as stage 1 grids the quantile at the stored utilisation and
    stabilisation)."""
    from warmup.core import adapters

    declared = adapters.core_config(ctx.dep(deployment)).scaling
    return {k: getattr(declared, k) for k in KNOBS}


def live_setup(ctx: Ctx, deployment: str, frame: pd.DataFrame) -> tuple[Any, dict[str, Any]]:
    """(the live core config with the planner's lead, what the replay uses: the serving model and, for the
    audit, its name and why, the capacity and its source, the lead and its source)."""
    from workers import lead

    cfg, used = lead.with_lead(ctx, deployment, ctx.cfg(deployment))
    model, name, why = serving_model(ctx, deployment, frame)
    default = cfg.switch.default_profile
    return cfg, {"model": model, "forecaster": name, "forecaster_why": why,
                 "capacity_rpm": cfg.scaling.capacity_rpm, "capacity_source": cfg.switch.source_of(default),
                 "lead_min": round(used.cold_start_min, 3), "lead_source": f"{used.source}: {used.detail}"}


def serving_model(ctx: Ctx, deployment: str, frame: pd.DataFrame) -> tuple[Any, str, str]:
    """(the model to replay, its name with version and source, why it serves): what the forecast step
    answers with now, asked through the same resolver and fallback rules (``resolve_forecaster``)."""
    from forecaster.registry import Registry
    from forecaster.resolver import AsFitted, resolve_forecaster
    from warmcast.resolution import resolution_of, steps_for

    fb, res = resolve_forecaster(Registry(ctx.settings.models_dir), deployment, frame)
    # One live forecast says who answers: a stale champion or too short a history falls back live too.
    answer = fb.predict(frame, horizon=steps_for(30, resolution_of(frame)))
    baseline = next((b for b in fb.baselines if b.name == answer.model), None)
    if baseline is None:   # the champion or the shipped model: trained already, it only predicts (fit no-op)
        name = f"{answer.model} {getattr(res.model, 'version', answer.version)} ({res.source})"
        return AsFitted(res.model, name), name, res.why
    # A baseline answers live (ranked on the recent hours): the same one, refitted on the replay's past
    # (cheap); the answer's note says why the trained model did not serve.
    return baseline, f"{baseline.name} (baselines)", answer.note


def _store(ctx: Ctx, deployment: str, tuning: Any, previous: dict[str, Any], declared: dict[str, Any],
           replayed: dict[str, Any]) -> RetuneOutcome:
    """Store the chosen knobs (any the choice leaves out at their ``declared`` values, which the replay
    ran them at) as the scaling overrides, kept with any others, and audit the change."""
    choice = tuning.choices["predictive"]
    knobs = {k: v for k, v in {**declared, **choice.knobs}.items() if k in KNOBS}
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
        ctx.state.put("retuned", deployment, {"knobs": knobs, "validation": list(tuning.window)})
    verb = f"risk {previous} -> {knobs}" if changed else f"risk unchanged {knobs}"
    table = [{**r["knobs"], "late_share": r["late_share"], "gpu_x": r["gpu_x"]} for r in choice.table]
    what = (f"replayed {replayed['forecaster']} at {replayed['capacity_rpm']:g} req/min per replica "
            f"({replayed['capacity_source']}) with a {replayed['lead_min']:g}-min lead ({replayed['lead_source']})")
    ctx.state.audit(deployment, "retune", verb, f"SLO {tuning.slo.describe()}: {choice.why}; {what}", changed,
                    tuning.report()[:2000], {"validation": list(tuning.window), **replayed, "table": table})
    return RetuneOutcome(deployment, knobs, previous, changed, choice.met, choice.why)
