"""Tiered warmup: send warmup requests to instances that are about to take traffic.

Two triggers:
- **queue depth** above the tier thresholds (default 5 / 10 / 20 -> low / medium /
  high), each tier a number and a concurrency of warmup requests per instance,
  lasting ``min(max_duration_s, depth * seconds_per_queued)``;
- **predicted growth**: when the forecast median rises ``growth_threshold`` above the
  current load within ``ramp_lead_min`` minutes, a gradual ramp whose intensity
  grows linearly from 1/ramp_lead of the high tier (growth ``ramp_lead`` minutes away) to
  the full high tier (growth now).

Targets are new (not yet warmed), booting, waking or idle instances, never busy or
saturated ones.  Overload protection: the warmup rate on an instance never exceeds
``max_share`` of its capacity, warmups stop when P99 rises ``p99_stop_rise`` above the
baseline, and when real traffic needs the capacity (fleet utilisation at or above
``stop_utilisation``) only instances that serve no traffic (booting, waking, new) are warmed.
"""
from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Optional

from warmup.core.config import WarmupConfig, WarmupTier
from warmup.core.decisions import WarmupAction, WarmupDecision
from warmup.core.inputs import ForecastInput, Instance, InstanceState, as_utc
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.state import WarmupState

RAMP = "ramp"


def tier_for_depth(cfg: WarmupConfig, depth: float) -> Optional[WarmupTier]:
    """The highest tier whose threshold the queue depth is above (None below the lowest)."""
    chosen = None
    for t in cfg.tiers:
        if depth > t.min_queue_depth:
            chosen = t
    return chosen


def warmup_duration_s(cfg: WarmupConfig, depth: float) -> float:
    return min(cfg.max_duration_s, max(0.0, depth) * cfg.seconds_per_queued)


def minutes_to_growth(cfg: WarmupConfig, fc: Optional[ForecastInput], now: datetime,
                      current_rpm: float) -> Optional[int]:
    """Minutes from now to the first forecast minute (median) ``growth_threshold`` above the current load."""
    if fc is None or not fc.usable() or not math.isfinite(current_rpm):
        return None
    offset = max(0, int(math.floor((as_utc(now) - as_utc(fc.origin)).total_seconds() / 60.0 + 1e-9)))
    path = fc.path(0.5)
    limit = current_rpm * (1.0 + cfg.growth_threshold)
    horizon = int(math.ceil(cfg.ramp_lead_min))
    for h in range(0, horizon + 1):
        i = offset + h
        if i >= len(path):
            break
        if path[i] > limit and path[i] > 0:
            return h
    return None


def select_targets(cfg: WarmupConfig, instances: tuple[Instance, ...], under_pressure: bool) -> tuple[str, ...]:
    """New first, then booting, waking and idle ones; never busy or saturated.

    Under pressure (real traffic needs the capacity) idle instances that are already
    warm are left to serve traffic.
    """
    new = [i for i in instances if i.state is InstanceState.READY_IDLE and not i.warmed]
    booting = [i for i in instances if i.state is InstanceState.BOOTING]
    waking = [i for i in instances if i.state is InstanceState.WAKING]
    idle = [] if under_pressure else [i for i in instances if i.state is InstanceState.READY_IDLE and i.warmed]
    ordered = new + booting + waking + idle
    return tuple(i.id for i in ordered[: cfg.max_instances])


def _capped(cfg: WarmupConfig, requests: int, concurrency: int, duration_s: float,
            capacity_rpm: float) -> tuple[int, int]:
    """Overload protection: warmup rate per instance <= max_share of its capacity."""
    allowed = int(math.floor(cfg.max_share * capacity_rpm * max(duration_s, 1.0) / 60.0 + 1e-9))
    req = min(requests, allowed)
    conc = max(0, min(concurrency, cfg.max_concurrency, req))
    return req, conc


def decide_warmup(cfg: WarmupConfig, now: datetime, instances: tuple[Instance, ...], observed_rpm: float,
                  queue_depth: float, p99_s: Optional[float], forecast: Optional[ForecastInput],
                  state: WarmupState, capacity_rpm: float) -> tuple[WarmupDecision, WarmupState]:
    now = as_utc(now)
    active = state.active_until is not None and as_utc(state.active_until) > now

    # P99 baseline: learnt only while no warmup runs (warmups must not move their own yardstick).
    baseline = state.p99_baseline_s
    if not active and p99_s is not None and math.isfinite(p99_s) and p99_s > 0:
        a = cfg.p99_baseline_alpha
        baseline = p99_s if baseline is None else (1 - a) * baseline + a * p99_s
    state = replace(state, p99_baseline_s=baseline)

    def none(code: ReasonCode, text: str, st: WarmupState) -> tuple[WarmupDecision, WarmupState]:
        return WarmupDecision(WarmupAction.NONE, Reason(code, text)), st

    def stop(code: ReasonCode, text: str) -> tuple[WarmupDecision, WarmupState]:
        return (WarmupDecision(WarmupAction.STOP, Reason(code, text), tier=state.tier),
                replace(state, active_until=None, tier=""))

    if not cfg.enabled:
        return none(ReasonCode.WARMUP_IDLE, "warmup disabled", state)

    depth = queue_depth if math.isfinite(queue_depth) else 0.0
    ready = [i for i in instances if i.state.ready]
    ready_cap = capacity_rpm * len(ready)
    obs = observed_rpm if math.isfinite(observed_rpm) and observed_rpm > 0 else 0.0
    util = obs / ready_cap if ready_cap > 0 else (math.inf if obs > 0 else 0.0)
    under_pressure = util >= cfg.stop_utilisation

    # What is asked for now: the queue tier first, then the predictive ramp.
    ask: Optional[tuple[str, int, int, float, Reason]] = None
    tier = tier_for_depth(cfg, depth)
    if tier is not None:
        dur = warmup_duration_s(cfg, depth)
        ask = (tier.name, tier.requests, tier.concurrency, dur,
               Reason(ReasonCode.WARMUP_QUEUE, f"queue depth {depth:.0f} is above {tier.min_queue_depth:g}: "
                      f"{tier.name} intensity for {dur:.0f} s"))
    else:
        h = minutes_to_growth(cfg, forecast, now, obs)
        if h is not None and cfg.tiers:
            top = cfg.tiers[-1]
            lead = max(cfg.ramp_lead_min, 1.0)
            frac = min(1.0, max(1.0 / lead, (lead - h) / lead))
            ask = (RAMP, max(1, math.ceil(frac * top.requests)), max(1, math.ceil(frac * top.concurrency)), 60.0,
                   Reason(ReasonCode.WARMUP_PREDICTED_GROWTH,
                          f"forecast median rises {cfg.growth_threshold:.0%} above the current "
                          f"{obs:,.0f} req/min in {h} min: ramp at {frac:.0%} of the {top.name} tier"))

    # Overload protection: a rising P99 stops a warmup and blocks a new one.
    if (baseline is not None and p99_s is not None and math.isfinite(p99_s)
            and p99_s > baseline * (1.0 + cfg.p99_stop_rise) and (active or ask is not None)):
        text = (f"P99 {p99_s:.2f} s is more than {cfg.p99_stop_rise:.0%} above the baseline {baseline:.2f} s")
        if active:
            return stop(ReasonCode.WARMUP_STOP_P99, text + ": warmup stopped")
        return none(ReasonCode.WARMUP_STOP_P99, text + ": no warmup started", state)

    if ask is None:
        if active:
            left = (as_utc(state.active_until) - now).total_seconds()
            return (WarmupDecision(WarmupAction.CONTINUE, Reason(ReasonCode.WARMUP_CONTINUE,
                                   f"{state.tier} warmup continues for {left:.0f} s"), tier=state.tier,
                                   duration_s=left), state)
        if state.tier:
            return none(ReasonCode.WARMUP_DONE, f"{state.tier} warmup finished; queue depth {depth:.0f} is "
                        "below every tier and no growth is forecast", replace(state, tier="", active_until=None))
        return none(ReasonCode.WARMUP_IDLE, f"queue depth {depth:.0f} is below every tier threshold and no "
                    "growth is forecast within the ramp lead", state)

    name, req, conc, dur, why = ask
    targets = select_targets(cfg, instances, under_pressure)
    if not targets:
        if under_pressure:
            text = (f"real traffic uses {util:.0%} of ready capacity and no booting, waking or new instance "
                    "is left to warm")
            return stop(ReasonCode.WARMUP_STOP_TRAFFIC, text) if active else none(
                ReasonCode.WARMUP_STOP_TRAFFIC, text, state)
        text = "no new, booting, waking or idle instance to warm (busy and saturated ones are never warmed)"
        return stop(ReasonCode.WARMUP_NO_ELIGIBLE, text) if active else none(ReasonCode.WARMUP_NO_ELIGIBLE, text, state)

    req, conc = _capped(cfg, req, conc, dur, capacity_rpm)
    if req <= 0 or conc <= 0:
        return none(ReasonCode.WARMUP_NO_ELIGIBLE, f"{cfg.max_share:.0%} of an instance's capacity over "
                    f"{dur:.0f} s allows no warmup request", state)
    until = now + timedelta(seconds=dur)
    if state.active_until is not None and as_utc(state.active_until) > until:
        until = as_utc(state.active_until)
    continuing = active or (name == RAMP and state.tier == RAMP)
    action = WarmupAction.CONTINUE if continuing else WarmupAction.START
    new_state = replace(state, active_until=until, tier=name,
                        started=state.started + (0 if continuing else 1))
    text = why.text + f"; {req} requests at concurrency {conc} on {len(targets)} instance(s)"
    return WarmupDecision(action, Reason(why.code, text), tier=name, requests_per_instance=req,
                          concurrency=conc, duration_s=dur, instances=targets), new_state
