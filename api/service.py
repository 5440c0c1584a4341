"""Thin adapters between the routes and the other packages' code.

Reads what the workers stored (forecast, plan) and fills the gaps when they have
not stored anything yet: an on-demand forecast from the load store with the
forecaster's champion (through its fallback rules), and a plan computed from a
forecast with the decision core's replica arithmetic.  No HTTP here.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import replace
from typing import Any, Sequence

import pandas as pd
from starlette.concurrency import run_in_threadpool

from api import ondemand
from api.deps import ApiContext
from api.ondemand import TS, shape, utcnow
from api.staleness import StalePlan, check_fresh, freshness
from forecaster.base import per_minute_rate
from warmup.calibration.store import load_capacities
from warmcast.config.deployments import Deployment
from warmcast.errors import InputError, NotFoundError
from warmcast.resolution import steps_for
from warmcast.state import forecast_from_dict
from warmup.core.adapters import forecast_input
from warmup.core import CoreConfig, PlanStep, plan_replicas
from warmup.core.lead import Lead, with_lead
from workers.coreconfig import live_core_config

log = logging.getLogger("warmcast.api")


def parse_quantiles(raw: str | None, field: str = "quantiles") -> tuple[float, ...]:
    """'0.1,0.5,0.9' -> (0.1, 0.5, 0.9); InputError naming the field otherwise."""
    if raw is None or raw.strip() == "":
        return (0.1, 0.5, 0.9)
    out = []
    for part in raw.split(","):
        try:
            q = float(part)
        except ValueError:
            raise InputError(f"{field}: {part.strip()!r} is not a number") from None
        if not 0.01 <= q <= 0.99:
            raise InputError(f"{field}: {q} is outside [0.01, 0.99]")
        out.append(round(q, 4))
    if len(out) > 9:
        raise InputError(f"{field}: at most 9 levels")
    return tuple(sorted(set(out)))


# --------------------------------------------------------------------------- forecasts

def stored_levels(doc: dict[str, Any]) -> list[float]:
    return sorted(float(q) for q in doc.get("quantiles", {}))


def covers(doc: dict[str, Any], horizon: int, quantiles: Sequence[float]) -> bool:
    """Does a stored forecast answer ``horizon`` minutes at these levels?  Its leads are its bins: a
    10-minute series' 30 minutes are 3 leads (counted as minutes, a coarse stored forecast was never
    served and the API computed its own instead: issue 46)."""
    levels = stored_levels(doc)
    leads = steps_for(horizon, int(doc.get("step_min", 1)))
    return bool(levels) and all(levels[0] - 1e-9 <= q <= levels[-1] + 1e-9 for q in quantiles) \
        and len(doc.get("mean", [])) >= leads


def latest_forecast(ctx: ApiContext, dep: str, horizon: int = 30,
                    quantiles: Sequence[float] = (0.1, 0.5, 0.9)) -> dict[str, Any]:
    """The workers' stored forecast when it covers the request; computed on demand otherwise."""
    doc = ctx.state.get_forecast(dep)
    if doc is not None and covers(doc, horizon, quantiles):
        return aged(ctx, shape({**doc, "source": "stored"}, dep, horizon, quantiles))
    return aged(ctx, ondemand.computed(ctx, dep, horizon, quantiles).shaped)


def aged(ctx: ApiContext, forecast: dict[str, Any] | None, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """The answer made from ``plan`` (else ``forecast``) with its ``age_s`` and ``stale`` flag, by the
    rule the KEDA routes refuse by (api/staleness.py)."""
    fresh = freshness(forecast, plan, ctx.config.plan_max_age_s, utcnow())
    return fresh.stamp(plan if plan is not None else forecast or {})


def aged_bytes(ctx: ApiContext, body: bytes) -> bytes:
    """A rendered forecast body with its age and stale flag (rendered once per document; the age is now's)."""
    return json.dumps(aged(ctx, json.loads(body)), separators=(",", ":")).encode()


async def stored_forecast_bytes(ctx: ApiContext, dep: str, horizon: int,
                                quantiles: Sequence[float]) -> bytes | None:
    """The JSON body for a stored forecast, re-rendered only when the stored document changes.

    The stored document is read from Redis at most once per RAW_TTL_S (so the answer is the
    workers' newest forecast within a second); the pandas/numpy work of shaping it runs once
    per new document, not per request. Returns None when there is no stored forecast or it
    does not cover the request."""
    raw = await _stored_raw(ctx, dep)
    if raw is None:
        return None
    key = ("body", dep, horizon, tuple(quantiles))
    hit = ctx.cache.get(key)
    if hit is not None and hit[1] == raw:
        return hit[2]
    doc = json.loads(raw)
    if not covers(doc, horizon, quantiles):
        return None
    body = json.dumps(shape({**doc, "source": "stored"}, dep, horizon, quantiles), separators=(",", ":")).encode()
    ctx.cache[key] = (time.monotonic(), raw, body)
    return body


RAW_TTL_S = 1.0    # workers write once a minute: a copy at most this old is as good as a fresh read
RAW_STALE_S = 5.0  # while a read is in flight, a copy up to this old is answered instead of waiting


async def _stored_raw(ctx: ApiContext, dep: str) -> bytes | None:
    """The stored forecast's raw JSON. The Redis read runs in a thread, never on the event loop:
    on a busy machine it waits for the Redis process to be scheduled, and every open request
    would wait with it. While one read is in flight, the previous copy is answered."""
    key = ("raw", dep)
    hit = ctx.cache.get(key)
    age = time.monotonic() - hit[0] if hit is not None else None
    if age is not None and age < RAW_TTL_S:
        return hit[1]
    task = ctx.inflight.get(key)
    if task is None:
        task = ctx.inflight[key] = asyncio.ensure_future(_read_raw(ctx, dep, key))
        task.add_done_callback(lambda t: _read_failed(t, dep))
    if age is not None and age < RAW_STALE_S:
        return hit[1]
    return await asyncio.shield(task)


def _read_failed(task: asyncio.Future, dep: str) -> None:
    """Look at a finished read's error, and say it once.  While a copy under RAW_STALE_S old is
    answered no request awaits the read, and asyncio logged its error (Redis down) as "Task
    exception was never retrieved" with a traceback (issue 41); a request that awaits it gets its
    503 as before."""
    err = None if task.cancelled() else task.exception()   # retrieved here, whoever else awaits it
    if err is not None:
        log.warning("reading the stored forecast of %r from Redis failed (%s: %s); a copy under %g s old "
                    "is answered, else 503", dep, type(err).__name__, err, RAW_STALE_S)


async def _read_raw(ctx: ApiContext, dep: str, key: tuple) -> bytes | None:
    try:
        raw = await run_in_threadpool(ctx.redis.get, ctx.state.key("forecast", dep))
        ctx.cache[key] = (time.monotonic(), raw)
        return raw
    finally:
        ctx.inflight.pop(key, None)


def cached_or_stored(ctx: ApiContext, dep: str) -> dict[str, Any] | None:
    """The newest forecast document without computing one (for scrapes and health)."""
    return ctx.state.get_forecast(dep) or ctx.cache.get(("latest", dep))


def forecast_age_s(doc: dict[str, Any], now: pd.Timestamp | None = None) -> float | None:
    stamp = doc.get("created_at")
    if not stamp:
        return None
    return float(((now or utcnow()) - pd.Timestamp(stamp)).total_seconds())


# --------------------------------------------------------------------------- plans

def plan_lead(ctx: ApiContext, dep: Deployment, lead_min: float | None) -> Lead:
    """The lead the plan uses: one asked for in the request, else the workers' planner's own
    (measured launches, then the measure-coldstart record, then the deployments file)."""
    # imported here: the module brings the vLLM client (httpx), a second of start-up on a busy machine
    from warmup.actuators.coldstart import resolve_lead

    if lead_min is not None:
        return Lead(float(lead_min), "request", "lead given in the request")
    return resolve_lead(ctx.redis, ctx.settings.key_prefix, dep)


def _core_plan(ctx: ApiContext, dep: Deployment, doc: dict[str, Any], quantile: float, utilisation: float, lead_min: float | None,
               now: pd.Timestamp) -> tuple[CoreConfig, tuple[PlanStep, ...], Lead]:
    """The core's plan (:func:`warmup.core.plan_replicas`) for the forecast ``doc`` from ``now`` (data time),
    led by :func:`plan_lead`, and that lead."""
    cfg = live_core_config(ctx.redis, ctx.settings.key_prefix, dep)
    lead = plan_lead(ctx, dep, lead_min)
    cfg = with_lead(cfg, lead)
    # a lead asked for is the whole look-ahead, with no margin on top; the planner's keeps its margin
    margin = {} if lead_min is None else {"margin_min": 0.0}
    cfg = replace(cfg, scaling=replace(cfg.scaling, quantile=quantile, target_utilisation=utilisation, **margin))
    fc = forecast_from_dict({"origin": doc["origin"], "mean": doc["mean"], "model": doc["model"],
                             "quantiles": {str(quantile): doc["quantiles"][f"{quantile:g}"]},
                             "step_min": doc.get("resolution_min", 1)})
    fc = per_minute_rate(fc)  # the plan is per minute: a coarse forecast enters as its per-minute rate
    return cfg, plan_replicas(cfg, forecast_input(fc), now.tz_localize("UTC").to_pydatetime()), lead


def capacity_basis(ctx: ApiContext, conf: Deployment | None,
                   given: float | None) -> tuple[float | None, CoreConfig | None, list[str]]:
    """What the capacity plan divides by: the rpm asked for (every hour), else the deployment's profiles
    through the core's configuration (each hour the profile its schedule makes active, calibrated where
    stored); returns (the default profile's or the given capacity, the core config or None, notes)."""
    if given is not None or conf is None:
        return given, None, []
    caps = load_capacities(ctx.redis, ctx.settings.key_prefix, conf)
    cfg = live_core_config(ctx.redis, ctx.settings.key_prefix, conf)
    used = caps if cfg.switch.enabled else {conf.default_profile: caps[conf.default_profile]}
    notes = [f"capacity per instance, profile {name}: {c.describe()}" for name, c in used.items()]
    if cfg.switch.enabled:
        notes.append("each hour uses the profile the schedule makes active (the smaller capacity in an hour a "
                     "window starts or ends in)")
    return caps[conf.default_profile].capacity_rpm, cfg, notes


def computed_plan(ctx: ApiContext, dep: Deployment, quantile: float = 0.9, utilisation: float = 1.0) -> dict[str, Any]:
    """Desired replicas per minute from the forecast's origin (no stored plan yet), by the core's plan."""
    doc = latest_forecast(ctx, dep.name, 30, (0.1, 0.5, quantile))
    _, plan, lead = _core_plan(ctx, dep, doc, quantile, utilisation, None, pd.Timestamp(doc["origin"]))
    steps = [{"time": p.time.strftime(TS), "desired": p.desired, "profile": p.profile,
              "capacity_rpm": p.capacity_rpm, "capacity_source": p.capacity_source,
              "demand_rpm": None if p.demand_rpm is None else round(p.demand_rpm, 2),
              "reason": f"{p.reason} (cold start from {lead.source})"}  # as the workers' plan says it
             for p in plan]
    return {"deployment": dep.name, "source": "computed", "created_at": utcnow().strftime(TS),
            "forecast_model": doc["model"], "desired": steps[0]["desired"] if steps else dep.min_replicas,
            "lead": lead.as_doc(), "steps": steps, "warmups": [], "switches": [],
            "note": "computed by the API from the forecast: the planner has not stored a plan yet "
                    "(warmups and switches are scheduled by the planner only)"}


def current_plan(ctx: ApiContext, dep: Deployment) -> dict[str, Any]:
    """The workers' plan, else one computed now; with the age of what it is made from (the plan and
    the forecast, as the KEDA routes judge them) and whether that is past the limit."""
    plan = ctx.state.get("plan", dep.name)
    if plan is not None:
        return aged(ctx, cached_or_stored(ctx, dep.name), {"deployment": dep.name, "source": "stored", **plan})
    plan = computed_plan(ctx, dep)
    return aged(ctx, latest_forecast(ctx, dep.name, 30, (0.1, 0.5, 0.9)), plan)


def plan_desired(plan: dict[str, Any] | None) -> int | None:
    """The planner's current desired replicas, whatever of the known shapes it stored."""
    if not plan:
        return None
    for key in ("desired", "desired_replicas", "replicas"):
        v = plan.get(key)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            return int(v)
        if isinstance(v, list) and v:
            first = v[0]
            if isinstance(first, (int, float)):
                return int(first)
            if isinstance(first, dict):
                for k in ("desired", "replicas"):
                    if isinstance(first.get(k), (int, float)):
                        return int(first[k])
    steps = plan.get("steps")
    if isinstance(steps, list) and steps and isinstance(steps[0], dict) and isinstance(steps[0].get("desired"), (int, float)):
        return int(steps[0]["desired"])
    return None


def autoscaler_values(ctx: ApiContext, dep: Deployment, quantile: float, lead_min: int | None,
                      utilisation: float) -> dict[str, Any]:
    """What KEDA/HPA act on: desired replicas now and peak forecast demand over the lead (the core's plan)."""
    doc = latest_forecast(ctx, dep.name, 30, (quantile,))
    stored_plan = ctx.state.get("plan", dep.name)
    check_fresh(dep.name, doc, stored_plan, ctx.config.plan_max_age_s, utcnow())  # a stopped loop: 503
    # Minutes since the forecast was made (wall clock), not since its origin (data time):
    # the two agree live, and a replayed or historic log still reads the right lead.
    age = forecast_age_s(doc) or 0.0
    now = pd.Timestamp(doc["origin"]) + pd.Timedelta(minutes=max(0, int(age // 60)))
    cfg, plan, lead = _core_plan(ctx, dep, doc, quantile, utilisation, lead_min, now)
    first = plan[0]
    planned = plan_desired(stored_plan)
    desired = first.desired if planned is None else planned
    peak_at = pd.Timestamp(first.time.replace(tzinfo=None)) + pd.Timedelta(minutes=first.peak_in_min)
    return {
        "deployment": dep.name, "desiredReplicas": int(desired), "forecastDemandRpm": round(first.demand_rpm or 0.0, 3),
        "forecastReplicas": int(first.desired), "plannedReplicas": planned,
        "quantile": quantile, "leadMinutes": int(math.ceil(cfg.scaling.lead_min)),
        "leadSource": lead.source, "utilisation": utilisation,
        "capacityPerInstanceRpm": first.capacity_rpm, "capacitySource": first.capacity_source,
        "profile": first.profile,
        "peakAt": peak_at.strftime(TS) if first.demand_rpm is not None else None,
        "forecastOrigin": doc["origin"], "forecastSource": doc["source"], "model": doc["model"],
        "paused": ctx.state.paused(dep.name) is not None, "forecastAgeSeconds": round(age, 1),
    }


def demand_target(ctx: ApiContext, dep: Deployment, quantile: float, lead_min: int | None,
                  utilisation: float) -> float:
    """KEDA's target for ``forecastDemandRpm`` (requests/min one replica should serve): the
    capacity of the profile the core's plan has active at the present minute, times
    ``utilisation``, so that demand / target is the plan's replicas, at night as by day.  With
    no forecast yet, the profile of the core's plan without one (the schedule's, at wall time)."""
    try:
        cap = float(autoscaler_values(ctx, dep, quantile, lead_min, utilisation)["capacityPerInstanceRpm"])
    except (NotFoundError, StalePlan):  # the target is the configuration's; only the values go stale
        cfg = live_core_config(ctx.redis, ctx.settings.key_prefix, dep)
        cap = plan_replicas(cfg, None, utcnow().tz_localize("UTC").to_pydatetime())[0].capacity_rpm
    return cap * utilisation
