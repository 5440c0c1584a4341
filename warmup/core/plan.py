"""The replica plan: minute by minute, what the pre-scaler will ask for over the forecast.

The one home of the peak-over-lead arithmetic outside a live decision: the API's
computed plan and autoscaler values and the workers' plan preview all call
:func:`plan_replicas`.  Each planned minute runs four named stages, each saying why:

- ``profile``: the profile the schedule makes active at that minute, and its capacity;
- ``forecast``: the highest forecast over that minute's whole lead window
  (``prescale.peak_over_lead``, the same as the live decision's forecast need);
- ``reactive_floor``: the present minute only, the current load and backlog
  (``prescale.reactive_need``): nothing planned may drop below what serves them now;
- ``bounds``: min/max replicas and the GPU budget.

The plan stops at the last minute whose whole lead window the forecast covers: a window
cut short by the horizon would under-plan.  The present minute is always planned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional

from warmup.core.config import CoreConfig
from warmup.core.inputs import ForecastInput, as_utc
from warmup.core.guardrails import hard_cap
from warmup.core.prescale import forecast_need, lead_steps, peak_over_lead, planning_path, reactive_need, replicas_for
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.switching import scheduled_profile


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One planned minute: the replicas asked for and each stage's reason."""

    time: datetime
    profile: str
    capacity_rpm: float
    demand_rpm: Optional[float]      # forecast peak over the lead window (None: no usable forecast)
    peak_in_min: int                 # minutes from ``time`` to that peak
    desired: int
    reasons: tuple[tuple[str, str], ...]  # (stage, why), in stage order
    capacity_source: str = "declared"    # "calibrated" when the profile's capacity was measured (issue 15)

    @property
    def reason(self) -> str:
        return "; ".join(why for _, why in self.reasons)


def stage_profile(cfg: CoreConfig, at: datetime) -> tuple[str, float, str]:
    """(profile, capacity per replica, why) at instant ``at``: the schedule's profile when switching is on."""
    sw, base = cfg.switch, cfg.scaling.capacity_rpm
    if not sw.enabled:
        src = sw.source_of(sw.default_profile)
        return sw.default_profile, base, f"profile {sw.default_profile} ({base:g} req/min per replica, {src})"
    name, why = scheduled_profile(sw, at)
    cap = sw.capacity_of(name, base)
    return name, cap, f"profile {name} ({cap:g} req/min per replica, {sw.source_of(name)}): {why}"


def stage_forecast(cfg: CoreConfig, path: tuple[float, ...], offset: int, cap: float) -> tuple[int, float, int, str]:
    """(replicas, peak, minutes to it, why) for the forecast peak over the lead window from ``offset``."""
    s = cfg.scaling
    peak, at, cut = peak_over_lead(s, path, offset)
    n = replicas_for(peak, cap, s.target_utilisation)
    why = (f"P{s.quantile * 100:.0f} peak {peak:,.0f} req/min in {at} min within the "
           f"{s.lead_min:g}-min lead needs {n} at {s.target_utilisation:.0%}")
    if cut:
        why += " (the forecast ends inside the lead window)"
    return n, peak, at, why


def stage_reactive_floor(cfg: CoreConfig, n: int, observed_rpm: float, queue_depth: float,
                         cap: float) -> tuple[int, str]:
    """The present minute never plans below what the current load and backlog need."""
    if not math.isfinite(observed_rpm):
        return n, "current load unknown: no reactive floor"
    floor, load, _ = reactive_need(cfg.scaling, observed_rpm, queue_depth, cap)
    if floor > n:
        return floor, f"current load and backlog {load:,.0f} req/min need {floor}: floor above the forecast"
    return n, f"current load and backlog {load:,.0f} req/min need {floor}"


def stage_plan_bounds(cfg: CoreConfig, n: int) -> tuple[int, str]:
    lo, hi = cfg.scaling.min_replicas, hard_cap(cfg.scaling)
    m = min(max(n, lo), hi)
    if m != n:
        return m, f"bounds [{lo}, {hi}] (replicas and GPU budget) make it {m}"
    return n, f"within bounds [{lo}, {hi}]"


def _no_forecast_step(cfg: CoreConfig, now: datetime, why: Reason, observed_rpm: float,
                      queue_depth: float) -> PlanStep:
    profile, cap, p_why = stage_profile(cfg, now)
    n, r_why = stage_reactive_floor(cfg, 0, observed_rpm, queue_depth, cap)
    n, b_why = stage_plan_bounds(cfg, n)
    return PlanStep(now, profile, cap, None, 0, n,
                    (("profile", p_why), ("forecast", why.text), ("reactive_floor", r_why), ("bounds", b_why)),
                    cfg.switch.source_of(profile))


def plan_replicas(cfg: CoreConfig, fc: Optional[ForecastInput], now: datetime, observed_rpm: float = math.nan,
                  queue_depth: float = 0.0, minutes: Optional[int] = None) -> tuple[PlanStep, ...]:
    """Replicas per minute from ``now`` (at most ``minutes``) while the forecast covers the whole lead window."""
    now = as_utc(now)
    profile, cap, _ = stage_profile(cfg, now)
    _, no_forecast, _, _ = forecast_need(cfg.scaling, fc, now, cap)  # usable and fresh, as the live decision asks
    if no_forecast is not None:
        return (_no_forecast_step(cfg, now, no_forecast, observed_rpm, queue_depth),)
    path = planning_path(cfg.scaling, fc)
    offset = fc.offset(now)
    count = max(1, len(path) - offset - lead_steps(cfg.scaling))
    steps = []
    for i in range(count if minutes is None else min(count, minutes)):
        t = now + timedelta(minutes=i)
        profile, cap, p_why = stage_profile(cfg, t)
        n, peak, at, f_why = stage_forecast(cfg, path, offset + i, cap)
        reasons = [("profile", p_why), ("forecast", f_why)]
        if i == 0:
            n, r_why = stage_reactive_floor(cfg, n, observed_rpm, queue_depth, cap)
            reasons.append(("reactive_floor", r_why))
        n, b_why = stage_plan_bounds(cfg, n)
        steps.append(PlanStep(t, profile, cap, peak, at, n, tuple(reasons) + (("bounds", b_why),),
                              cfg.switch.source_of(profile)))
    return tuple(steps)
