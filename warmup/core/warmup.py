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
from dataclasses import dataclass, replace
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
    offset = fc.offset(now)
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


# --------------------------------------------------------------------------- what is asked for


@dataclass(frozen=True, slots=True)
class WarmupAsk:
    """A warmup asked for now: its tier, per-instance requests and concurrency, duration and why."""

    tier: str
    requests: int
    concurrency: int
    duration_s: float
    reason: Reason


def queue_ask(cfg: WarmupConfig, depth: float) -> Optional[WarmupAsk]:
    """The tier the queue depth is above, for ``min(max_duration_s, depth * seconds_per_queued)``."""
    tier = tier_for_depth(cfg, depth)
    if tier is None:
        return None
    dur = warmup_duration_s(cfg, depth)
    return WarmupAsk(tier.name, tier.requests, tier.concurrency, dur,
                     Reason(ReasonCode.WARMUP_QUEUE, f"queue depth {depth:.0f} is above {tier.min_queue_depth:g}: "
                            f"{tier.name} intensity for {dur:.0f} s"))


def ramp_ask(cfg: WarmupConfig, forecast: Optional[ForecastInput], now: datetime,
             load_rpm: float) -> Optional[WarmupAsk]:
    """Forecast growth within ``ramp_lead_min``: a share of the top tier growing as the growth nears."""
    h = minutes_to_growth(cfg, forecast, now, load_rpm)
    if h is None or not cfg.tiers:
        return None
    top = cfg.tiers[-1]
    lead = max(cfg.ramp_lead_min, 1.0)
    frac = min(1.0, max(1.0 / lead, (lead - h) / lead))
    return WarmupAsk(RAMP, max(1, math.ceil(frac * top.requests)), max(1, math.ceil(frac * top.concurrency)), 60.0,
                     Reason(ReasonCode.WARMUP_PREDICTED_GROWTH,
                            f"forecast median rises {cfg.growth_threshold:.0%} above the current "
                            f"{load_rpm:,.0f} req/min in {h} min: ramp at {frac:.0%} of the {top.name} tier"))


# --------------------------------------------------------------------------- the decision's stages


WarmupOutcome = tuple[WarmupDecision, WarmupState]


@dataclass(frozen=True, slots=True)
class WarmupTick:
    """What the warmup stages see: the inputs, the fleet's utilisation and what is asked for."""

    cfg: WarmupConfig
    now: datetime
    p99_s: Optional[float]
    capacity_rpm: float
    state: WarmupState         # with the P99 baseline learnt this tick
    active: bool               # a warmup is running
    depth: float               # queue depth (0 when unknown)
    utilisation: float         # real traffic / ready capacity
    under_pressure: bool       # real traffic needs the capacity
    ask: Optional[WarmupAsk]
    targets: tuple[str, ...]   # instances that may be warmed


def no_warmup(state: WarmupState, code: ReasonCode, text: str) -> WarmupOutcome:
    """Nothing to send this tick, and why."""
    return WarmupDecision(WarmupAction.NONE, Reason(code, text)), state


def stop_warmup(state: WarmupState, code: ReasonCode, text: str) -> WarmupOutcome:
    """End the running warmup, and why."""
    return (WarmupDecision(WarmupAction.STOP, Reason(code, text), tier=state.tier),
            replace(state, active_until=None, tier=""))


def learn_p99_baseline(cfg: WarmupConfig, state: WarmupState, now: datetime,
                       p99_s: Optional[float]) -> tuple[WarmupState, bool]:
    """(state with the updated P99 baseline, whether a warmup runs).  The baseline is an EWMA learnt
    only while no warmup runs: warmups must not move their own yardstick."""
    active = state.active_until is not None and as_utc(state.active_until) > now
    baseline = state.p99_baseline_s
    if not active and p99_s is not None and math.isfinite(p99_s) and p99_s > 0:
        a = cfg.p99_baseline_alpha
        baseline = p99_s if baseline is None else (1 - a) * baseline + a * p99_s
    return replace(state, p99_baseline_s=baseline), active


def fleet_utilisation(instances: tuple[Instance, ...], observed_rpm: float, capacity_rpm: float) -> tuple[float, float]:
    """(load in req/min, 0 when unknown; its share of the ready instances' capacity)."""
    ready_cap = capacity_rpm * sum(1 for i in instances if i.state.ready)
    load = observed_rpm if math.isfinite(observed_rpm) and observed_rpm > 0 else 0.0
    util = load / ready_cap if ready_cap > 0 else (math.inf if load > 0 else 0.0)
    return load, util


def stop_on_p99(t: WarmupTick) -> Optional[WarmupOutcome]:
    """Overload protection: a P99 ``p99_stop_rise`` above the baseline stops a warmup and blocks a new one."""
    base, p99 = t.state.p99_baseline_s, t.p99_s
    if not (base is not None and p99 is not None and math.isfinite(p99)
            and p99 > base * (1.0 + t.cfg.p99_stop_rise) and (t.active or t.ask is not None)):
        return None
    text = f"P99 {p99:.2f} s is more than {t.cfg.p99_stop_rise:.0%} above the baseline {base:.2f} s"
    if t.active:
        return stop_warmup(t.state, ReasonCode.WARMUP_STOP_P99, text + ": warmup stopped")
    return no_warmup(t.state, ReasonCode.WARMUP_STOP_P99, text + ": no warmup started")


def nothing_asked(t: WarmupTick) -> Optional[WarmupOutcome]:
    """No tier and no ramp asked for: a running warmup continues to its end, a finished one is cleared."""
    if t.ask is not None:
        return None
    state = t.state
    if t.active:
        left = (as_utc(state.active_until) - t.now).total_seconds()
        return (WarmupDecision(WarmupAction.CONTINUE, Reason(ReasonCode.WARMUP_CONTINUE,
                               f"{state.tier} warmup continues for {left:.0f} s"), tier=state.tier,
                               duration_s=left), state)
    if state.tier:
        return no_warmup(replace(state, tier="", active_until=None), ReasonCode.WARMUP_DONE,
                         f"{state.tier} warmup finished; queue depth {t.depth:.0f} is below every tier and "
                         "no growth is forecast")
    return no_warmup(state, ReasonCode.WARMUP_IDLE, f"queue depth {t.depth:.0f} is below every tier threshold "
                     "and no growth is forecast within the ramp lead")


def no_targets(t: WarmupTick) -> Optional[WarmupOutcome]:
    """Nothing eligible to warm (under pressure only booting, waking and new instances are)."""
    if t.targets:
        return None
    if t.under_pressure:
        code = ReasonCode.WARMUP_STOP_TRAFFIC
        text = (f"real traffic uses {t.utilisation:.0%} of ready capacity and no booting, waking or new "
                "instance is left to warm")
    else:
        code = ReasonCode.WARMUP_NO_ELIGIBLE
        text = "no new, booting, waking or idle instance to warm (busy and saturated ones are never warmed)"
    return stop_warmup(t.state, code, text) if t.active else no_warmup(t.state, code, text)


def within_share(t: WarmupTick, ask: WarmupAsk) -> tuple[int, int]:
    """Overload protection: (requests, concurrency) so the warmup rate per instance stays within
    ``max_share`` of its capacity."""
    cfg = t.cfg
    allowed = int(math.floor(cfg.max_share * t.capacity_rpm * max(ask.duration_s, 1.0) / 60.0 + 1e-9))
    req = min(ask.requests, allowed)
    conc = max(0, min(ask.concurrency, cfg.max_concurrency, req))
    return req, conc


def no_share_left(t: WarmupTick) -> Optional[WarmupOutcome]:
    """``max_share`` of an instance's capacity over the duration allows not even one request."""
    req, conc = within_share(t, t.ask)
    if req > 0 and conc > 0:
        return None
    return no_warmup(t.state, ReasonCode.WARMUP_NO_ELIGIBLE, f"{t.cfg.max_share:.0%} of an instance's capacity "
                     f"over {t.ask.duration_s:.0f} s allows no warmup request")


def start_or_continue(t: WarmupTick) -> WarmupOutcome:
    """Send the ask to the targets: a new warmup, or a running one (or ramp) extended."""
    ask, state = t.ask, t.state
    req, conc = within_share(t, ask)
    until = t.now + timedelta(seconds=ask.duration_s)
    if state.active_until is not None and as_utc(state.active_until) > until:
        until = as_utc(state.active_until)
    continuing = t.active or (ask.tier == RAMP and state.tier == RAMP)
    action = WarmupAction.CONTINUE if continuing else WarmupAction.START
    new_state = replace(state, active_until=until, tier=ask.tier, started=state.started + (0 if continuing else 1))
    text = ask.reason.text + f"; {req} requests at concurrency {conc} on {len(t.targets)} instance(s)"
    return WarmupDecision(action, Reason(ask.reason.code, text), tier=ask.tier, requests_per_instance=req,
                          concurrency=conc, duration_s=ask.duration_s, instances=t.targets), new_state


def decide_warmup(cfg: WarmupConfig, now: datetime, instances: tuple[Instance, ...], observed_rpm: float,
                  queue_depth: float, p99_s: Optional[float], forecast: Optional[ForecastInput],
                  state: WarmupState, capacity_rpm: float) -> WarmupOutcome:
    """Learn the P99 baseline, see what is asked for (queue tier first, then the predictive ramp),
    then the first stage that decides: P99 guard, nothing asked, no target, no share left, send."""
    now = as_utc(now)
    state, active = learn_p99_baseline(cfg, state, now, p99_s)
    if not cfg.enabled:
        return no_warmup(state, ReasonCode.WARMUP_IDLE, "warmup disabled")
    depth = queue_depth if math.isfinite(queue_depth) else 0.0
    load, util = fleet_utilisation(instances, observed_rpm, capacity_rpm)
    under_pressure = util >= cfg.stop_utilisation
    ask = queue_ask(cfg, depth) or ramp_ask(cfg, forecast, now, load)
    t = WarmupTick(cfg, now, p99_s, capacity_rpm, state, active, depth, util, under_pressure, ask,
                   select_targets(cfg, instances, under_pressure))
    return (stop_on_p99(t) or nothing_asked(t) or no_targets(t) or no_share_left(t)
            or start_or_continue(t))
